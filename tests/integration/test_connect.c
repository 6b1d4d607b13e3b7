/*
 * test_connect.c - the URL forms that must work, and what they select.
 *
 * Design note: a Unix-socket URL (with and without ?db=N), a redis:// URL
 * with a database number, and a percent-encoded ACL user name. Each case
 * checks on the server (through a harness connection that SELECTs the same
 * database) that the lock landed where the URL said. One server per case.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "itest.h"

#define WD DLOCK_LEASE_WATCHDOG

/* EXISTS name in database db, on a connection of our own. */
static int64_t exists_in_db(th_server_t *s, int db, const char *name) {
  redisContext *c = th_redis_connect(s);
  CHECK(c);
  redisReply *r = redisCommand(c, "SELECT %d", db);
  CHECK(r && r->type == REDIS_REPLY_STATUS);
  freeReplyObject(r);
  r = redisCommand(c, "EXISTS %s", name);
  CHECK(r && r->type == REDIS_REPLY_INTEGER);
  int64_t v = r->integer;
  freeReplyObject(r);
  redisFree(c);
  return v;
}

static void lock_lands_in(th_server_t *s, const char *url, int db,
                          const char *name) {
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new(&c, url, NULL));
  CHECK_OK(dlock_client_ping(c));
  dlock_lock_t *l = it_lock(c, name);
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECKF(exists_in_db(s, db, name) == 1, "%s: lock %s not in db %d", url, name,
         db);
  for (int other = 0; other < 4; other++)
    if (other != db)
      CHECKF(exists_in_db(s, other, name) == 0, "%s: lock %s also in db %d",
             url, name, other);
  bool b = false;
  CHECK_OK(dlock_lock_is_locked(l, &b));
  CHECK(b);
  CHECK_OK(dlock_lock_release(l));
  CHECK_INT(exists_in_db(s, db, name), ==, 0);
  dlock_lock_free(l);
  dlock_client_free(c);
}

static void t_unix_socket(void) {
  const char *conf[] = {"unixsocket ${dir}/redis.sock", "unixsocketperm 700",
                        NULL};
  th_server_t *s = th_server_start(conf);
  CHECK(s);
  char url[512];
  snprintf(url, sizeof url, "unix://%s/redis.sock", s->dir);
  lock_lands_in(s, url, 0, "unixlock");
  snprintf(url, sizeof url, "unix://%s/redis.sock?db=2", s->dir);
  lock_lands_in(s, url, 2, "unixlock-db2");
  /* the scheme in any case */
  snprintf(url, sizeof url, "UNIX://%s/redis.sock", s->dir);
  lock_lands_in(s, url, 0, "unixlock-upper");
  /* a socket path that does not exist */
  snprintf(url, sizeof url, "unix://%s/no-such.sock", s->dir);
  dlock_client_t *c = NULL;
  CHECK_RC(dlock_client_new(&c, url, NULL), DLOCK_EUNAVAILABLE);
  CHECK(c == NULL);
  th_server_stop(s);
}

static void t_redis_db(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  char url[128];
  snprintf(url, sizeof url, "redis://127.0.0.1:%d/3", s->port);
  lock_lands_in(s, url, 3, "dblock");
  snprintf(url, sizeof url, "redis://127.0.0.1:%d/0", s->port);
  lock_lands_in(s, url, 0, "dblock0");
  /* the scheme in any case, as every backend reads it (RFC 3986 3.1) */
  snprintf(url, sizeof url, "REDIS://127.0.0.1:%d/1", s->port);
  lock_lands_in(s, url, 1, "dblock-upper");
  snprintf(url, sizeof url, "Redis://127.0.0.1:%d", s->port);
  lock_lands_in(s, url, 0, "dblock-mixed");
  /* a database the server does not have */
  snprintf(url, sizeof url, "redis://127.0.0.1:%d/99", s->port);
  dlock_client_t *c = NULL;
  int rc = dlock_client_new(&c, url, NULL);
  printf("db 99 of 16: %s (\"%s\")\n", dlock_err_name(rc), dlock_last_error());
  CHECK_RC_IN(rc, DLOCK_ESERVER, DLOCK_EURL);
  CHECK(c == NULL);
  th_server_stop(s);
}

static void t_percent_encoded_user(void) {
  const char *conf[] = {"user a@b on >p:w ~* &* +@all", NULL};
  th_server_t *s = th_server_start(conf);
  CHECK(s);
  char url[256];
  snprintf(url, sizeof url, "redis://a%%40b:p%%3Aw@127.0.0.1:%d", s->port);
  lock_lands_in(s, url, 0, "pctlock");
  th_server_stop(s);
}

static const check_case_t cases[] = {
    {"unix_socket", t_unix_socket},
    {"redis_db", t_redis_db},
    {"percent_encoded_user", t_percent_encoded_user},
};

CHECK_MAIN(cases)
