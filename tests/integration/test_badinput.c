/*
 * test_badinput.c - wrong arguments, wrong addresses, wrong passwords and
 * wrong key types give the documented codes and never crash.
 *
 * Design note: one server per case, configured as the case needs
 * (requirepass, ACL users). Failed client creation must leave *out NULL.
 * Every detail message (dlock_last_error and the log callback) is checked
 * for the passwords used, which must never appear. System calls the client
 * needs (getrandom, pipe2, clone) are made to fail with a seccomp filter in
 * a forked child, which must get DLOCK_ESYS naming the call. Single
 * threaded except for the library's own threads.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "itest.h"

#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#define WD DLOCK_LEASE_WATCHDOG

/* ------------------------------------------------------- log capture */

typedef struct logcap {
  pthread_mutex_t mu;
  char secret[64];
  int leaks, lines;
  char leak[512];
} logcap_t;

static void log_cb(void *ud, dlock_log_level_t level, const char *msg) {
  (void)level;
  logcap_t *lc = ud;
  pthread_mutex_lock(&lc->mu);
  lc->lines++;
  if (msg && lc->secret[0] && strstr(msg, lc->secret)) {
    lc->leaks++;
    snprintf(lc->leak, sizeof lc->leak, "%s", msg);
  }
  pthread_mutex_unlock(&lc->mu);
}

/* client_new with a log callback capturing messages; returns the code. */
static int new_client(const char *url, const char *user, const char *password,
                      logcap_t *lc, dlock_client_t **out) {
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 2000));
  CHECK_OK(dlock_options_set_command_timeout(o, 2000));
  if (user || password)
    CHECK_OK(dlock_options_set_credentials(o, user, password));
  if (lc)
    CHECK_OK(dlock_options_set_log_callback(o, log_cb, lc, DLOCK_LOG_DEBUG));
  *out = (dlock_client_t *)o; /* any non-NULL value: must be overwritten */
  int rc = dlock_client_new(out, url, o);
  dlock_options_free(o);
  if (rc != 0)
    CHECKF(*out == NULL, "failed dlock_client_new left *out set");
  return rc;
}

static void no_secret(const char *secret) {
  const char *e = dlock_last_error();
  CHECK(e != NULL);
  CHECKF(!strstr(e, secret), "last error shows the password: \"%s\"", e);
}

/* ----------------------------------------------------------------- cases */

static void t_null_args(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  CHECK_RC(dlock_client_new(NULL, s->url, NULL), DLOCK_EINVAL);
  dlock_client_t *c = (dlock_client_t *)s;
  CHECK_RC(dlock_client_new(&c, NULL, NULL), DLOCK_EINVAL);
  CHECK(c == NULL);
  CHECK_RC(dlock_client_ping(NULL), DLOCK_EINVAL);
  c = it_client(s);
  dlock_lock_t *l = (dlock_lock_t *)s;
  CHECK_RC(dlock_lock_new(NULL, "x", &l), DLOCK_EINVAL);
  CHECK_RC(dlock_lock_new(c, NULL, &l), DLOCK_EINVAL);
  CHECK_RC(dlock_lock_new(c, "x", NULL), DLOCK_EINVAL);
  l = it_lock(c, "x");
  bool b;
  int64_t v;
  dlock_lock_state_t *st;
  CHECK_RC(dlock_lock_acquire(NULL, 0, WD), DLOCK_EINVAL);
  CHECK_RC(dlock_lock_release(NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_lock_acquire_as(NULL, 1, 0, WD), DLOCK_EINVAL);
  CHECK_RC(dlock_lock_release_as(NULL, 1), DLOCK_EINVAL);
  CHECK_RC(dlock_lock_force_release(NULL, &b), DLOCK_EINVAL);
  CHECK_RC(dlock_lock_is_locked(NULL, &b), DLOCK_EINVAL);
  CHECK_RC(dlock_lock_is_locked(l, NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_lock_is_held_by_thread(NULL, &b), DLOCK_EINVAL);
  CHECK_RC(dlock_lock_is_held_by_thread(l, NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_lock_hold_count(NULL, &v), DLOCK_EINVAL);
  CHECK_RC(dlock_lock_hold_count(l, NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_lock_remaining_lease(NULL, &v), DLOCK_EINVAL);
  CHECK_RC(dlock_lock_remaining_lease(l, NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_lock_state(NULL, &st), DLOCK_EINVAL);
  CHECK_RC(dlock_lock_state(l, NULL), DLOCK_EINVAL);
  /* the failed calls left nothing behind and the handle still works */
  CHECK_INT(it_lock_keys(s), ==, 0);
  CHECK_OK(dlock_lock_force_release(l, NULL));
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_state_free(NULL);
  dlock_lock_free(NULL);
  dlock_client_free(NULL);
  dlock_options_free(NULL);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_bad_wait_lease(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_lock_t *l = it_lock(c, "args");
  const int64_t bad_wait[] = {-2, -1000, INT64_MIN};
  const int64_t bad_lease[] = {0, -2, -1000, INT64_MIN};
  for (size_t i = 0; i < sizeof bad_wait / sizeof bad_wait[0]; i++) {
    CHECK_RC(dlock_lock_acquire(l, bad_wait[i], WD), DLOCK_EINVAL);
    CHECK_RC(dlock_lock_acquire_as(l, 5, bad_wait[i], WD), DLOCK_EINVAL);
  }
  for (size_t i = 0; i < sizeof bad_lease / sizeof bad_lease[0]; i++) {
    CHECK_RC(dlock_lock_acquire(l, 0, bad_lease[i]), DLOCK_EINVAL);
    CHECK_RC(dlock_lock_acquire_as(l, 5, 0, bad_lease[i]), DLOCK_EINVAL);
  }
  CHECK_INT(it_lock_keys(s), ==, 0);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_names(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_lock_t *l = (dlock_lock_t *)s;
  CHECK_RC(dlock_lock_new(c, "", &l), DLOCK_EINVAL);
  char *big = malloc(DLOCK_NAME_MAX + 2);
  CHECK(big);
  memset(big, 'n', DLOCK_NAME_MAX + 1);
  big[DLOCK_NAME_MAX + 1] = '\0';
  CHECK_RC(dlock_lock_new(c, big, &l), DLOCK_EINVAL);
  big[DLOCK_NAME_MAX] = '\0'; /* exactly DLOCK_NAME_MAX bytes */
  l = NULL;
  CHECK_OK(dlock_lock_new(c, big, &l));
  CHECK_STR(dlock_lock_name(l), big);
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  redisReply *r = th_redis_cmd(s, "EXISTS %b", big, (size_t)DLOCK_NAME_MAX);
  CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
  freeReplyObject(r);
  CHECK_OK(dlock_lock_release(l));
  CHECK_INT(it_lock_keys(s), ==, 0);
  dlock_lock_free(l);
  free(big);
  /* arbitrary bytes: spaces, quotes, colons, high bytes */
  const char *odd = "a b\t\"c\":\xff\xfe{x}%s\n";
  l = it_lock(c, odd);
  CHECK_STR(dlock_lock_name(l), odd);
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  r = th_redis_cmd(s, "TYPE %b", odd, strlen(odd));
  CHECK(r && r->type == REDIS_REPLY_STATUS);
  CHECK_STR(r->str, "hash");
  freeReplyObject(r);
  CHECK_OK(dlock_lock_release(l));
  CHECK_INT(it_lock_keys(s), ==, 0);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_unknown_host(void) {
  dlock_client_t *c;
  int64_t t0 = th_now_ms();
  int rc =
      new_client("redis://no-such-host.invalid:6379", NULL, NULL, NULL, &c);
  printf("unknown host: %s after %lld ms (\"%s\")\n", dlock_err_name(rc),
         (long long)(th_now_ms() - t0), dlock_last_error());
  CHECK_RC(rc, DLOCK_EUNAVAILABLE);
  CHECK(strstr(dlock_last_error(), "no-such-host.invalid"));
}

static void t_conn_refused(void) {
  int port = th_free_port();
  CHECK(port > 0);
  char url[64], addr[64];
  snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  dlock_client_t *c;
  int64_t t0 = th_now_ms();
  CHECK_RC(new_client(url, NULL, NULL, NULL, &c), DLOCK_EUNAVAILABLE);
  CHECK_INT(th_now_ms() - t0, <, 2000);
  CHECKF(strstr(dlock_last_error(), addr), "message does not name %s: \"%s\"",
         addr, dlock_last_error());
  printf("refused: \"%s\"\n", dlock_last_error());
}

static void t_requirepass(void) {
  const char *conf[] = {"requirepass s3cret-pw", NULL};
  th_server_t *s = th_server_start(conf);
  CHECK(s);
  logcap_t lc = {.mu = PTHREAD_MUTEX_INITIALIZER, .secret = "wrong-pw-77"};
  char url[256];
  dlock_client_t *c;
  snprintf(url, sizeof url, "redis://:wrong-pw-77@127.0.0.1:%d", s->port);
  CHECK_RC(new_client(url, NULL, NULL, &lc, &c), DLOCK_EAUTH);
  no_secret("wrong-pw-77");
  /* no password at all */
  CHECK_RC(new_client(s->url, NULL, NULL, NULL, &c), DLOCK_EAUTH);
  /* the right one, in the URL */
  snprintf(url, sizeof url, "redis://:s3cret-pw@127.0.0.1:%d", s->port);
  CHECK_OK(new_client(url, NULL, NULL, NULL, &c));
  dlock_lock_t *l = it_lock(c, "auth");
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  /* in the options, and overriding a wrong one in the URL */
  CHECK_OK(new_client(s->url, NULL, "s3cret-pw", NULL, &c));
  CHECK_OK(dlock_client_ping(c));
  dlock_client_free(c);
  snprintf(url, sizeof url, "redis://:wrong-pw-77@127.0.0.1:%d", s->port);
  CHECK_OK(new_client(url, NULL, "s3cret-pw", &lc, &c));
  dlock_client_free(c);
  /* the options copy the strings they are given */
  {
    char user[16] = "default", pass[16] = "s3cret-pw";
    dlock_options_t *o = NULL;
    CHECK_OK(dlock_options_new(&o));
    CHECK_OK(dlock_options_set_credentials(o, user, pass));
    CHECK_OK(dlock_options_set_client_name(o, "copied-name"));
    memset(user, 'x', sizeof user - 1);
    memset(pass, 'x', sizeof pass - 1);
    c = NULL;
    CHECK_OK(dlock_client_new(&c, s->url, o));
    dlock_options_free(o); /* the client keeps its own copy */
    CHECK_OK(dlock_client_ping(c));
    dlock_client_free(c);
  }
  /* a wrong password in the options */
  CHECK_RC(new_client(s->url, NULL, "wrong-pw-77", &lc, &c), DLOCK_EAUTH);
  no_secret("wrong-pw-77");
  /* percent-encoded special characters */
  char *ok = th_redis_str(s, "CONFIG SET requirepass %s", "p@ss:w/rd%");
  CHECK_STR(ok, "OK");
  free(ok);
  snprintf(url, sizeof url, "redis://:p%%40ss%%3Aw%%2Frd%%25@127.0.0.1:%d",
           s->port);
  CHECK_OK(new_client(url, NULL, NULL, NULL, &c));
  CHECK_OK(dlock_client_ping(c));
  dlock_client_free(c);
  CHECKF(lc.leaks == 0, "log message shows the password: \"%s\"", lc.leak);
  th_server_stop(s);
}

static void t_acl_user(void) {
  const char *conf[] = {"user alice on >alice-pw-1 ~* &* +@all", NULL};
  th_server_t *s = th_server_start(conf);
  CHECK(s);
  logcap_t lc = {.mu = PTHREAD_MUTEX_INITIALIZER, .secret = "alice-pw-1"};
  char url[256];
  dlock_client_t *c, *d;
  snprintf(url, sizeof url, "redis://alice:alice-pw-1@127.0.0.1:%d", s->port);
  CHECK_OK(new_client(url, NULL, NULL, &lc, &c));
  char *who = NULL;
  /* the lock works end to end as alice, waking included */
  CHECK_OK(new_client(url, NULL, NULL, &lc, &d));
  dlock_lock_t *l = it_lock(c, "acl"), *ld = it_lock(d, "acl");
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  it_async_t w;
  it_async_start(&w, ld, 5000, WD, false);
  CHECK(it_wait_subscribers(s, "acl", 1, 5000));
  CHECK_OK(dlock_lock_release(l));
  CHECK(it_async_wait(&w, 2000));
  CHECK_OK(w.rc);
  CHECK_OK(it_async_finish(&w));
  /* the connections are alice's */
  who = th_redis_str(s, "CLIENT LIST");
  CHECK(who && strstr(who, "user=alice"));
  free(who);
  dlock_lock_free(l);
  dlock_lock_free(ld);
  dlock_client_free(c);
  dlock_client_free(d);
  /* wrong password, unknown user */
  snprintf(url, sizeof url, "redis://alice:nope-pw-2@127.0.0.1:%d", s->port);
  CHECK_RC(new_client(url, NULL, NULL, &lc, &c), DLOCK_EAUTH);
  no_secret("nope-pw-2");
  snprintf(url, sizeof url, "redis://bob:alice-pw-1@127.0.0.1:%d", s->port);
  CHECK_RC(new_client(url, NULL, NULL, &lc, &c), DLOCK_EAUTH);
  no_secret("alice-pw-1");
  /* credentials through the options */
  CHECK_OK(new_client(s->url, "alice", "alice-pw-1", &lc, &c));
  CHECK_OK(dlock_client_ping(c));
  dlock_client_free(c);
  CHECK_RC(new_client(s->url, "alice", "nope-pw-2", &lc, &c), DLOCK_EAUTH);
  no_secret("nope-pw-2");
  CHECKF(lc.leaks == 0, "log message shows the password: \"%s\"", lc.leak);
  th_server_stop(s);
}

/* A user without pub/sub channel permissions (Redis 7's default for new
 * users, "resetchannels"). Locking without waiting needs no channel: the
 * acquire, the release (its PUBLISH is best effort) and a force release all
 * work, and the lock really is gone afterwards. */
static void t_acl_user_without_channels(void) {
  const char *conf[] = {"user carol on >carol-pw ~* +@all", NULL};
  th_server_t *s = th_server_start(conf);
  CHECK(s);
  char url[256];
  snprintf(url, sizeof url, "redis://carol:carol-pw@127.0.0.1:%d", s->port);
  dlock_client_t *c;
  CHECK_OK(new_client(url, NULL, NULL, NULL, &c));
  dlock_lock_t *l = it_lock(c, "nochan");
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_OK(dlock_lock_release(l));
  CHECK(!it_exists(s, "nochan"));
  CHECK_RC(dlock_lock_release(l), DLOCK_ENOTOWNER);
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  bool was = false;
  CHECK_OK(dlock_lock_force_release(l, &was));
  CHECK(was);
  CHECK(!it_exists(s, "nochan"));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

/* The same user waiting: the wake-up subscription is refused (NOPERM). The
 * header: "Backend errors are returned at once (a wait does not hide
 * them)". Silently waiting instead would leave the waiter to find out only
 * by polling on the holder's PTTL (30 s with the watchdog). */
static void t_acl_wait_without_channels(void) {
  const char *conf[] = {"user carol on >carol-pw ~* +@all", NULL};
  th_server_t *s = th_server_start(conf);
  CHECK(s);
  CHECK_INT(th_redis_int(s, "HSET nochan %s 1", "holder:1"), ==, 1);
  CHECK_INT(th_redis_int(s, "PEXPIRE nochan 30000"), ==, 1);
  char url[256];
  snprintf(url, sizeof url, "redis://carol:carol-pw@127.0.0.1:%d", s->port);
  dlock_client_t *c;
  CHECK_OK(new_client(url, NULL, NULL, NULL, &c));
  dlock_lock_t *l = it_lock(c, "nochan");
  int64_t t0 = th_now_ms();
  int rc = dlock_lock_acquire(l, 2000, WD);
  int64_t took = th_now_ms() - t0;
  printf("wait 2000 ms without SUBSCRIBE permission: %s after %lld ms "
         "(\"%s\")\n",
         dlock_err_name(rc), (long long)took, dlock_last_error());
  CHECKF(rc != DLOCK_ETIMEDOUT && rc < 0 && took < 2000,
         "the refused SUBSCRIBE was hidden: %s after %lld ms",
         dlock_err_name(rc), (long long)took);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_wrongtype(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  char *ok = th_redis_str(s, "SET wt %s", "just-a-string");
  CHECK_STR(ok, "OK");
  free(ok);
  dlock_client_t *c = it_client(s);
  dlock_lock_t *l = it_lock(c, "wt");
  /* said in the user's terms, not as the server's WRONGTYPE */
  const char *said =
      "lock 'wt': the key holds a value of another type (not a lock)";
  CHECK_RC(dlock_lock_acquire(l, 0, WD), DLOCK_EWRONGTYPE);
  CHECK_STR(dlock_last_error(), said);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_acquire(l, 2000, WD), DLOCK_EWRONGTYPE);
  CHECK_STR(dlock_last_error(), said);
  CHECKF(th_now_ms() - t0 < 1000, "a wait hid a WRONGTYPE error for %lld ms",
         (long long)(th_now_ms() - t0));
  CHECK_RC(dlock_lock_acquire(l, 0, 5000), DLOCK_EWRONGTYPE);
  CHECK_RC(dlock_lock_acquire_as(l, 9, 0, WD), DLOCK_EWRONGTYPE);
  /* the key is untouched */
  char *v = th_redis_str(s, "GET wt");
  CHECK_STR(v, "just-a-string");
  free(v);
  int rc = dlock_lock_release(l);
  CHECK_RC_IN(rc, DLOCK_ENOTOWNER, DLOCK_EWRONGTYPE);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_never_held(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s), *other = it_client(s);
  dlock_lock_t *l = it_lock(c, "nh"), *lo = it_lock(other, "nh");
  CHECK_RC(dlock_lock_release(l), DLOCK_ENOTOWNER);
  CHECK_RC(dlock_lock_release_as(l, 12345), DLOCK_ENOTOWNER);
  CHECK_OK(dlock_lock_acquire(lo, 0, WD));
  CHECK_RC(dlock_lock_release(l), DLOCK_ENOTOWNER);
  CHECK_RC(dlock_lock_release_as(l, dlock_thread_id()), DLOCK_ENOTOWNER);
  char owner[128];
  it_owner(other, dlock_thread_id(), owner, sizeof owner);
  CHECK_INT(it_hget_int(s, "nh", owner), ==, 1);
  CHECK_OK(dlock_lock_release(lo));
  dlock_lock_free(l);
  dlock_lock_free(lo);
  dlock_client_free(c);
  dlock_client_free(other);
  th_server_stop(s);
}

static void t_password_never_in_errors(void) {
  const char *conf[] = {"requirepass right-pw-0", NULL};
  th_server_t *s = th_server_start(conf);
  CHECK(s);
  const char *secret = "hunter2-XYZ";
  logcap_t lc = {.mu = PTHREAD_MUTEX_INITIALIZER};
  snprintf(lc.secret, sizeof lc.secret, "%s", secret);
  int dead = th_free_port();
  char url[256];
  dlock_client_t *c;
  struct {
    const char *fmt;
    int port;
    int want;
  } cases[] = {
      {"redis://:%s@127.0.0.1:%d", s->port, DLOCK_EAUTH},
      {"redis://default:%s@127.0.0.1:%d", s->port, DLOCK_EAUTH},
      {"redis://:%s@127.0.0.1:%d", dead, DLOCK_EUNAVAILABLE},
      {"redis://someone:%s@127.0.0.1:%d", dead, DLOCK_EUNAVAILABLE},
      {"redis://:%s@127.0.0.1:%d", 99999, DLOCK_EURL},
      {"redis://:%s@127.0.0.1:%d/notadb", s->port, DLOCK_EURL},
      {"redis://:%s@no-such-host.invalid:%d", 6379, DLOCK_EUNAVAILABLE},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(url, sizeof url, cases[i].fmt, secret, cases[i].port);
    CHECK_RC(new_client(url, NULL, NULL, &lc, &c), cases[i].want);
    no_secret(secret);
  }
  /* wrong password through the options */
  CHECK_RC(new_client(s->url, NULL, secret, &lc, &c), DLOCK_EAUTH);
  no_secret(secret);
  CHECK_RC(new_client(s->url, "default", secret, &lc, &c), DLOCK_EAUTH);
  no_secret(secret);
  CHECKF(lc.leaks == 0, "log message shows the password: \"%s\"", lc.leak);
  printf("%d log lines checked\n", lc.lines);
  th_server_stop(s);
}

/* A client used in a forked child answers ECLOSED and leaves the parent's
 * connections and holds alone; the child can make its own client. */
static void fork_child(th_server_t *s, dlock_client_t *c, dlock_lock_t *held) {
  dlock_lock_t *l = NULL;
  CHECK_RC(dlock_client_ping(c), DLOCK_ECLOSED);
  int rc = dlock_lock_new(c, "child-lock", &l);
  if (rc == 0) {
    CHECK_RC(dlock_lock_acquire(l, 0, WD), DLOCK_ECLOSED);
    dlock_lock_free(l);
  } else {
    CHECK_RC(rc, DLOCK_ECLOSED);
  }
  CHECK_RC(dlock_lock_acquire(held, 0, WD), DLOCK_ECLOSED);
  CHECK_RC(dlock_lock_release(held), DLOCK_ECLOSED);
  bool b;
  CHECK_RC(dlock_lock_is_locked(held, &b), DLOCK_ECLOSED);
  dlock_lock_free(held);
  dlock_client_free(c);
#ifndef __SANITIZE_THREAD__
  /* a fresh client in the child works (TSan cannot start threads in a
   * child forked from a threaded process, so not under TSan) */
  dlock_client_t *mine = it_client(s);
  l = it_lock(mine, "child-lock");
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(mine);
#else
  (void)s;
#endif
  fflush(stdout);
  _exit(0);
}

static void t_used_after_fork(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_client_cfg_t cfg = {.watchdog_ms = 600};
  dlock_client_t *c = it_client_cfg(s, &cfg);
  dlock_lock_t *l = it_lock(c, "forked");
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0)
    fork_child(s, c, l);
  int st = 0;
  bool ok;
  TH_WAIT_FOR(ok, waitpid(pid, &st, WNOHANG) == pid, 10000);
  if (!ok) {
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
  }
  CHECKF(ok, "child using the parent's client hung");
  CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child failed (status 0x%x)",
         st);
  /* the parent's hold is intact and still renewed (lease 600 ms) */
  int64_t end = th_now_ms() + 1000;
  for (int i = 0; i < 50 && th_now_ms() < end; i++) {
    CHECKF(it_exists(s, "forked"), "parent's hold lost after the child ran");
    th_sleep_ms(50);
  }
  CHECK_OK(dlock_client_ping(c));
  CHECK_OK(dlock_lock_release(l));
  CHECK(!it_exists(s, "forked"));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

/* ------------------------------------------- failing system calls */

/* A system call to make fail, and the errno it then gives. */
typedef struct sys_fail {
  long nr;
  int err;
} sys_fail_t;

#if defined(__x86_64__)
#define SYS_FAIL_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define SYS_FAIL_ARCH AUDIT_ARCH_AARCH64
#endif

/* From now on each listed system call of this process fails with its
 * errno (a seccomp filter; other calls and other ABIs are left alone).
 * False, with why, when seccomp cannot be used here. */
static bool fail_syscalls(const sys_fail_t *f, size_t n, char *why,
                          size_t wn) {
#ifdef SYS_FAIL_ARCH
  struct sock_filter prog[4 + 2 * 8];
  unsigned short k = 0;
  CHECK(n <= 8);
  prog[k++] = (struct sock_filter)BPF_STMT(
      BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
  prog[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
                                           SYS_FAIL_ARCH, 1, 0);
  prog[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  prog[k++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                           offsetof(struct seccomp_data, nr));
  for (size_t i = 0; i < n; i++) {
    prog[k++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K,
                                             (unsigned)f[i].nr, 0, 1);
    prog[k++] = (struct sock_filter)BPF_STMT(
        BPF_RET | BPF_K,
        SECCOMP_RET_ERRNO | ((unsigned)f[i].err & SECCOMP_RET_DATA));
  }
  prog[k++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
  struct sock_fprog fp = {.len = k, .filter = prog};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    snprintf(why, wn, "prctl(PR_SET_NO_NEW_PRIVS): %s", strerror(errno));
    return false;
  }
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fp) != 0) {
    snprintf(why, wn, "prctl(PR_SET_SECCOMP): %s", strerror(errno));
    return false;
  }
  return true;
#else
  (void)f;
  (void)n;
  snprintf(why, wn, "no seccomp filter written for this architecture");
  return false;
#endif
}

/* In a forked child whose listed system calls fail: dlock_client_new
 * against a live server returns DLOCK_ESYS (not DLOCK_ENOMEM), leaves *out
 * NULL and says which call failed; the child ends normally. A child that
 * cannot install the filter prints "skipped: why" and the case passes. */
static void syscall_fails_case(const sys_fail_t *f, size_t n,
                               const char *call) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    char why[160];
    if (!fail_syscalls(f, n, why, sizeof why)) {
      printf("skipped: %s\n", why);
      fflush(stdout);
      _exit(77);
    }
    unsigned char probe[16];
    if (f[0].nr == SYS_getrandom && getrandom(probe, sizeof probe, 0) >= 0) {
      printf("skipped: getrandom() does not reach the system call here\n");
      fflush(stdout);
      _exit(77);
    }
    dlock_client_t *c;
    CHECK_RC(new_client(s->url, NULL, NULL, NULL, &c), DLOCK_ESYS);
    const char *e = dlock_last_error();
    printf("dlock_client_new: %s: %s\n", dlock_err_name(DLOCK_ESYS), e);
    CHECKF(strstr(e, call) != NULL, "message \"%s\" does not name %s", e,
           call);
    fflush(stdout);
    _exit(0);
  }
  int st = it_spawn_wait(pid, 20000);
  CHECKF(WIFEXITED(st), "child died (status 0x%x)", st);
  if (WEXITSTATUS(st) != 77)
    CHECKF(WEXITSTATUS(st) == 0, "child failed (status %d)", WEXITSTATUS(st));
  /* the server is untouched: a client here works */
  dlock_client_t *c = it_client(s);
  CHECK_OK(dlock_client_ping(c));
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_getrandom_fails(void) {
  const sys_fail_t f[] = {{SYS_getrandom, ENOSYS}};
  syscall_fails_case(f, 1, "getrandom");
}

static void t_pipe2_fails(void) {
  const sys_fail_t f[] = {{SYS_pipe2, EMFILE}};
  syscall_fails_case(f, 1, "pipe2");
}

/* No thread can start (glibc falls back from clone3 to clone). */
static void t_thread_start_fails(void) {
  const sys_fail_t f[] = {
#ifdef SYS_clone3
      {SYS_clone3, ENOSYS},
#endif
      {SYS_clone, EAGAIN}};
  syscall_fails_case(f, sizeof f / sizeof f[0], "pthread_create");
}

static const check_case_t cases[] = {
    {"null_args", t_null_args},
    {"bad_wait_lease", t_bad_wait_lease},
    {"names", t_names},
    {"unknown_host", t_unknown_host},
    {"conn_refused", t_conn_refused},
    {"requirepass", t_requirepass},
    {"acl_user", t_acl_user},
    {"acl_user_without_channels", t_acl_user_without_channels},
    {"acl_wait_without_channels", t_acl_wait_without_channels},
    {"wrongtype", t_wrongtype},
    {"never_held", t_never_held},
    {"password_never_in_errors", t_password_never_in_errors},
    {"used_after_fork", t_used_after_fork},
    {"getrandom_fails", t_getrandom_fails},
    {"pipe2_fails", t_pipe2_fails},
    {"thread_start_fails", t_thread_start_fails},
};

CHECK_MAIN(cases)
