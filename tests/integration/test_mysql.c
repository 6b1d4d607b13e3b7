/*
 * test_mysql.c - the MySQL/MariaDB backend against a private MariaDB.
 *
 * Design note: each case starts its own server (tests/harness/mysql.c)
 * and asserts what a user sees: the `mariadb` client's
 * `SELECT GET_LOCK('nightly-report', 10)` and dlock exclude each other
 * both ways (the one-liner of docs/MYSQL.md), a long name is the lock the
 * documented SQL rule computes, fenced tokens grow (across a server crash)
 * and are the table's, a
 * multilock is all or nothing, a frozen holder's session is closed by the
 * server after its lease, a holder whose session is killed is told at once
 * (not at its next heartbeat), and bad input gets one clear line. Permit
 * semaphores: K permits are K slot locks the client sees (and can take by
 * hand), exclude the K+1th, come to a waiter of another client or
 * process on a release, a kill or a freeze of their holder, never have
 * more than K holders across processes, and `dlock -N` runs K commands
 * at once and lists their ids. The async calls' tries and releases need
 * no thread (a warmed-up client's thread count stays), and meet a
 * stopped, killed or restarted server as the blocking calls do. Every
 * wait is bounded. Without mariadbd
 * every case exits 77 (skipped).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "check.h"
#include "harness.h"
#include "mysql.h"

#include "async_one.h" /* after check.h and harness.h */

#include <dirent.h>
#include <dlock/dlock.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define LEASE_MS 1500

static atomic_int g_lost;

static void on_lost(void *ud, const char *name, uint64_t tid,
                    dlock_lost_reason_t reason) {
  (void)ud;
  (void)name;
  (void)tid;
  (void)reason;
  atomic_fetch_add(&g_lost, 1);
}

static th_my_t *start(void) {
  if (!th_my_available()) {
    printf("skipped: no mariadbd (install mariadb-server)\n");
    exit(77);
  }
  th_my_t *s = th_my_start();
  CHECK(s != NULL);
  return s;
}

static dlock_client_t *client_for(const char *url) {
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 5000));
  CHECK_OK(dlock_options_set_command_timeout(o, 5000));
  CHECK_OK(dlock_options_set_watchdog_timeout(o, LEASE_MS));
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new(&c, url, o));
  dlock_options_free(o);
  return c;
}

/* The mariadb client's GET_LOCK(sql, 0) in its own session: "1" or "0". */
static char client_try(th_my_t *s, const char *sql_name) {
  char sql[1024], out[64];
  snprintf(sql, sizeof sql, "SELECT GET_LOCK(%s, 0)", sql_name);
  CHECK_INT(th_my_sql(s, sql, out, sizeof out), ==, 0);
  return out[0];
}

/* The documented one-liner from a mariadb session that stays open. */
static th_my_session_t *client_holds(th_my_t *s, const char *name) {
  th_my_session_t *q = th_my_session_open(s);
  CHECK(q != NULL);
  char sql[256];
  snprintf(sql, sizeof sql, "SELECT GET_LOCK('%s', 10);", name);
  CHECK_OK(th_my_session_send(q, sql));
  char line[64] = "";
  CHECK_OK(th_my_session_line(q, line, sizeof line, 15000));
  CHECK_STR(line, "1");
  return q;
}

/* mariadb holds 'nightly-report': dlock gets EBUSY, ETIMEDOUT after a
 * wait, and the lock once the client's session ends; then dlock holds it
 * (twice, reentrant) and the client's GET_LOCK gets 0 until dlock's last
 * release. */
static void t_client_excludes_dlock(void) {
  th_my_t *s = start();
  th_my_session_t *q = client_holds(s, "nightly-report");
  dlock_client_t *c = client_for(th_my_url(s));
  dlock_lock_t *l = NULL;
  CHECK_OK(dlock_lock_new(c, "nightly-report", &l));
  CHECK_RC(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  CHECK_RC(dlock_lock_acquire(l, 300, DLOCK_LEASE_WATCHDOG), DLOCK_ETIMEDOUT);
  printf("mariadb holds it: dlock gets EBUSY, and ETIMEDOUT after a wait\n");
  th_my_session_close(q); /* the client's session ends, and its lock */
  CHECK_OK(dlock_lock_acquire(l, 20000, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG)); /* reentry */
  CHECK_INT(client_try(s, "'nightly-report'"), ==, '0');
  CHECK_OK(dlock_lock_release(l));
  CHECK_INT(client_try(s, "'nightly-report'"), ==, '0'); /* held once */
  CHECK_OK(dlock_lock_release(l));
  CHECK_INT(client_try(s, "'nightly-report'"), ==, '1');
  printf("dlock held it: mariadb's GET_LOCK got 0 until dlock's release\n");
  /* a name over 64 characters: the documented rule, computed in SQL */
  char longname[101];
  memset(longname, 'x', 100);
  longname[100] = '\0';
  char rule[600];
  snprintf(rule, sizeof rule,
           "IF(CHAR_LENGTH('%1$s') <= 64, '%1$s', CONCAT(LEFT('%1$s', 23), "
           "'#', LEFT(SHA2('%1$s', 256), 40)))",
           longname);
  dlock_lock_t *ll = NULL;
  CHECK_OK(dlock_lock_new(c, longname, &ll));
  CHECK_OK(dlock_lock_acquire(ll, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_INT(client_try(s, rule), ==, '0');
  CHECK_OK(dlock_lock_release(ll));
  CHECK_INT(client_try(s, rule), ==, '1');
  dlock_lock_free(ll);
  /* a waiter that times out has its GET_LOCK interrupted before the call
   * returns: once the holder lets go, the lock is free for the client */
  q = client_holds(s, "w");
  dlock_lock_t *w = NULL;
  CHECK_OK(dlock_lock_new(c, "w", &w));
  CHECK_RC(dlock_lock_acquire(w, 300, DLOCK_LEASE_WATCHDOG), DLOCK_ETIMEDOUT);
  th_my_session_close(q);
  CHECK_INT(client_try(s, "'w'"), ==, '1');
  dlock_lock_free(w);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_my_stop(s);
}

/* Fenced tokens grow with each grant and are dlock_fence's; a multilock
 * takes both names or neither; the other kinds are refused in one line;
 * the state names the holder. */
static void t_kinds(void) {
  th_my_t *s = start();
  dlock_client_t *c = client_for(th_my_url(s));
  dlock_lock_t *f = NULL;
  CHECK_OK(dlock_lock_new_kind(c, "fenced-res", DLOCK_FENCED, &f));
  int64_t t1 = 0, t2 = 0, again = 0;
  CHECK_OK(dlock_lock_acquire_fenced(f, 0, DLOCK_LEASE_WATCHDOG, &t1));
  CHECK_OK(dlock_lock_acquire_fenced(f, 0, DLOCK_LEASE_WATCHDOG, &again));
  CHECK_INT(again, ==, t1); /* reentry keeps the token */
  CHECK_OK(dlock_lock_release(f));
  CHECK_OK(dlock_lock_release(f));
  /* the tokens survive a server crash */
  CHECK_INT(th_my_kill9(s), ==, 0);
  CHECK_INT(th_my_up(s), ==, 0);
  CHECK_OK(dlock_lock_acquire_fenced(f, 20000, DLOCK_LEASE_WATCHDOG, &t2));
  CHECKF(t2 > t1 && t1 > 0, "token %lld after %lld", (long long)t2,
         (long long)t1);
  char out[64], want[32];
  CHECK_INT(th_my_sql(s,
                      "SELECT token FROM dlock_fence WHERE k = "
                      "UNHEX(SHA2('fenced-res', 256))",
                      out, sizeof out),
            ==, 0);
  snprintf(want, sizeof want, "%lld", (long long)t2);
  CHECK_STR(out, want);
  printf("tokens %lld then %lld; dlock_fence says %s\n", (long long)t1,
         (long long)t2, out);
  dlock_lock_state_t *st = NULL;
  CHECK_OK(dlock_lock_state(f, &st));
  CHECK_INT(st->nholders, ==, 1);
  printf("state: %s held by %s\n", st->kind, st->holders[0].owner);
  dlock_lock_state_free(st);
  CHECK_OK(dlock_lock_release(f));
  dlock_lock_free(f);

  th_my_session_t *q = client_holds(s, "ml-b");
  dlock_lock_t *l[2] = {NULL, NULL};
  CHECK_OK(dlock_lock_new(c, "ml-a", &l[0]));
  CHECK_OK(dlock_lock_new(c, "ml-b", &l[1]));
  dlock_multilock_t *m = NULL;
  CHECK_OK(dlock_multilock_new(&m, l, 2));
  CHECK_RC(dlock_multilock_acquire(m, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  CHECK_INT(client_try(s, "'ml-a'"), ==, '1'); /* nothing held */
  th_my_session_close(q);
  CHECK_OK(dlock_multilock_acquire(m, 20000, DLOCK_LEASE_WATCHDOG));
  CHECK_INT(client_try(s, "'ml-a'"), ==, '0');
  CHECK_INT(client_try(s, "'ml-b'"), ==, '0');
  CHECK_OK(dlock_multilock_release(m));
  CHECK_INT(client_try(s, "'ml-b'"), ==, '1');
  dlock_multilock_free(m);
  dlock_lock_free(l[0]);
  dlock_lock_free(l[1]);

  dlock_lock_t *k = NULL;
  dlock_lock_kind_t kinds[] = {DLOCK_FAIR, DLOCK_READ, DLOCK_WRITE};
  for (size_t i = 0; i < 3; i++) {
    CHECK_RC(dlock_lock_new_kind(c, "k", kinds[i], &k), DLOCK_ENOTSUP);
    CHECK(strchr(dlock_last_error(), '\n') == NULL);
    printf("kind %d -> %s\n", (int)kinds[i], dlock_last_error());
  }
  dlock_client_free(c);
  th_my_stop(s);
}

/* A holder that freezes (SIGSTOP) stops its heartbeats: the server
 * closes its idle session after wait_timeout (the lease), and a waiter
 * gets the lock. */
static void t_frozen_holder_loses(void) {
  th_my_t *s = start();
  int fds[2];
  CHECK(pipe(fds) == 0);
  fflush(stdout);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    dlock_client_t *c = client_for(th_my_url(s));
    dlock_lock_t *l = NULL;
    if (dlock_lock_new(c, "frozen", &l) != 0 ||
        dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG) != 0)
      _exit(1);
    if (write(fds[1], "h", 1) != 1)
      _exit(1);
    for (int i = 0; i < 600; i++)
      sleep(1);
    _exit(0);
  }
  close(fds[1]);
  char b = 0;
  CHECK(read(fds[0], &b, 1) == 1 && b == 'h');
  close(fds[0]);
  dlock_client_t *c = client_for(th_my_url(s));
  dlock_lock_t *l = NULL;
  CHECK_OK(dlock_lock_new(c, "frozen", &l));
  CHECK_RC(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  CHECK(kill(pid, SIGSTOP) == 0);
  int rc = dlock_lock_acquire(l, 30000, DLOCK_LEASE_WATCHDOG);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  CHECK_OK(rc);
  printf("the frozen holder's session was closed by the server; the waiter "
         "got the lock\n");
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_my_stop(s);
}

/* The holder's session killed from another session (KILL, as an operator
 * or a server-side timeout would end it): the loss is reported when the
 * server closes the connection, well before the first heartbeat (a third
 * of the 60 s lease). */
static void t_terminated_session_told(void) {
  th_my_t *s = start();
  atomic_store(&g_lost, 0);
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_watchdog_timeout(o, 60000));
  CHECK_OK(dlock_options_set_lost_callback(o, on_lost, NULL));
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new(&c, th_my_url(s), o));
  dlock_options_free(o);
  dlock_lock_t *l = NULL;
  CHECK_OK(dlock_lock_new(c, "terminated", &l));
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  char id[32], sql[64], out[64];
  CHECK_INT(th_my_sql(s, "SELECT IS_USED_LOCK('terminated')", id, sizeof id),
            ==, 0);
  CHECKF(id[0] >= '1' && id[0] <= '9', "IS_USED_LOCK said '%s'", id);
  snprintf(sql, sizeof sql, "KILL %s", id);
  int64_t t0 = th_now_ms();
  CHECK_INT(th_my_sql(s, sql, out, sizeof out), ==, 0);
  bool lost = false;
  TH_WAIT_FOR(lost, atomic_load(&g_lost) >= 1, 15000);
  CHECKF(lost, "the loss was not reported before the first heartbeat");
  printf("FIGURE mysql.terminated: the loss reported %lld ms after KILL %s "
         "was sent\n",
         (long long)(th_now_ms() - t0), id);
  CHECK_RC(dlock_lock_release(l), DLOCK_ELOST);
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG)); /* free again */
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_my_stop(s);
}

static void expect_line(int rc, int want, const char *url, const char *must,
                        const char *secret) {
  CHECKF(rc == want, "%s: got %s, want %s (%s)", url, dlock_err_name(rc),
         dlock_err_name(want), dlock_last_error());
  const char *e = dlock_last_error();
  CHECKF(strchr(e, '\n') == NULL, "not one line: %s", e);
  CHECKF(strstr(e, must) != NULL, "'%s' not in: %s", must, e);
  if (secret)
    CHECKF(strstr(e, secret) == NULL, "the password is echoed: %s", e);
  printf("%s -> %s: %s\n", url, dlock_err_name(rc), e);
}

static void t_bad_input(void) {
  th_my_t *s = start();
  char url[256];
  dlock_client_t *c = NULL;
  snprintf(url, sizeof url, "mysql://dlock:not-the-pw-4711@127.0.0.1:%d/dlock",
           th_my_port(s));
  expect_line(dlock_client_new(&c, url, NULL), DLOCK_EAUTH, url,
              "Access denied", "not-the-pw-4711");
  snprintf(url, sizeof url, "mariadb://dlock:%s@127.0.0.1:%d/nosuchdb",
           th_my_password(), th_my_port(s));
  expect_line(dlock_client_new(&c, url, NULL), DLOCK_ESERVER, "(nosuchdb)",
              "nosuchdb", th_my_password());
  expect_line(dlock_client_new(&c, "mysql://127.0.0.1/db?nosuch=1", NULL),
              DLOCK_EURL, "?nosuch=1", "nosuch", NULL);
  /* a server that is not MySQL: a Redis server on the port */
  th_server_t *r = th_server_start(NULL);
  CHECK(r != NULL);
  snprintf(url, sizeof url, "mysql://u:secret-pw-99@127.0.0.1:%d/db", r->port);
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 1000));
  CHECK_OK(dlock_options_set_command_timeout(o, 1000));
  int rc = dlock_client_new(&c, url, o);
  dlock_options_free(o);
  CHECKF(rc == DLOCK_EPROTO || rc == DLOCK_EIOTIMEOUT, "%s: %s (%s)", url,
         dlock_err_name(rc), dlock_last_error());
  expect_line(rc, rc, url, "MySQL", "secret-pw-99");
  th_server_stop(r);
  /* names: any length up to the maximum, quotes, multibyte; not UTF-8 */
  c = client_for(th_my_url(s));
  char longname[DLOCK_NAME_MAX + 1];
  memset(longname, 'n', DLOCK_NAME_MAX);
  longname[DLOCK_NAME_MAX] = '\0';
  const char *names[] = {longname, "it's \"quoted\" \\ and\nlined", "ünïcødé",
                         "%_*"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    dlock_lock_t *l = NULL;
    CHECK_OK(dlock_lock_new(c, names[i], &l));
    CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
    CHECK_OK(dlock_lock_release(l));
    dlock_lock_free(l);
  }
  dlock_lock_t *l = NULL;
  CHECK_OK(dlock_lock_new(c, "bad\xff\xfe", &l));
  expect_line(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EINVAL,
              "name \"bad\\xff\\xfe\"", "UTF-8", NULL);
  dlock_lock_free(l);
  dlock_client_free(c);
  /* a permit semaphore needs a database for its tables */
  snprintf(url, sizeof url, "mysql://dlock:%s@127.0.0.1:%d", th_my_password(),
           th_my_port(s));
  c = client_for(url);
  dlock_permit_sem_t *sem = NULL;
  CHECK_OK(dlock_permit_sem_new(c, "no-db", &sem));
  expect_line(dlock_permit_sem_try_set_permits(sem, 2, NULL), DLOCK_EINVAL,
              "permit semaphore, no database", "need a database",
              th_my_password());
  char id[DLOCK_PERMIT_ID_LEN + 1];
  expect_line(dlock_permit_sem_acquire(sem, 0, DLOCK_LEASE_WATCHDOG, id),
              DLOCK_EINVAL, "permit, no database", "need a database",
              th_my_password());
  dlock_permit_sem_free(sem);
  dlock_client_free(c);
  th_my_stop(s);
}

/* ------------------------------------------------------ permit semaphores */

typedef struct psem_waiter {
  dlock_permit_sem_t *sem;
  int64_t wait_ms;
  char id[DLOCK_PERMIT_ID_LEN + 1];
  atomic_int rc;
  _Atomic int64_t done_at; /* th_now_ms() when the acquire returned */
  char err[320];           /* its error line, if it failed */
  atomic_bool done;
} psem_waiter_t;

static void *psem_wait_main(void *arg) {
  psem_waiter_t *w = arg;
  int rc =
      dlock_permit_sem_acquire(w->sem, w->wait_ms, DLOCK_LEASE_WATCHDOG, w->id);
  snprintf(w->err, sizeof w->err, "%s", rc ? dlock_last_error() : "");
  atomic_store(&w->rc, rc);
  atomic_store(&w->done_at, th_now_ms());
  atomic_store(&w->done, true);
  return NULL;
}

/* A permit semaphore of K permits is K slot locks (docs/MYSQL.md): two
 * permits are taken, a third is refused, the mariadb client sees the slot
 * locks held and the size in dlock_semaphore; the state lists both ids; a
 * slot taken by hand with the documented SQL counts, is listed as its
 * session, and comes to a waiter when that session ends; delete ends it
 * all; a semaphore that shrank counts slots above its size as in use. */
static void t_permits_layout(void) {
  th_my_t *s = start();
  dlock_client_t *c = client_for(th_my_url(s));
  /* counting semaphores and latches are refused with one line */
  dlock_semaphore_t *cs = NULL;
  CHECK_RC(dlock_semaphore_new(c, "counting", &cs), DLOCK_ENOTSUP);
  printf("semaphore -> %s\n", dlock_last_error());
  CHECK(strstr(dlock_last_error(), "mysql"));
  dlock_latch_t *lt = NULL;
  CHECK_RC(dlock_latch_new(c, "latch", &lt), DLOCK_ENOTSUP);
  dlock_permit_sem_t *sem = NULL;
  CHECK_OK(dlock_permit_sem_new(c, "pool", &sem));
  int64_t n = -1;
  CHECK_OK(dlock_permit_sem_available(sem, &n)); /* no table yet */
  CHECK_INT(n, ==, 0);
  char x[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_RC(dlock_permit_sem_acquire(sem, 0, DLOCK_LEASE_WATCHDOG, x),
           DLOCK_EBUSY);
  bool set = false;
  CHECK_OK(dlock_permit_sem_try_set_permits(sem, 2, &set));
  CHECK(set);
  CHECK_OK(dlock_permit_sem_try_set_permits(sem, 5, &set));
  CHECK(!set);
  CHECK_RC(dlock_permit_sem_try_set_permits(sem, 1001, &set), DLOCK_EINVAL);
  printf("1001 permits -> %s\n", dlock_last_error());
  char a[DLOCK_PERMIT_ID_LEN + 1], b[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(dlock_permit_sem_acquire(sem, 0, DLOCK_LEASE_WATCHDOG, a));
  CHECK_OK(dlock_permit_sem_acquire(sem, 0, DLOCK_LEASE_WATCHDOG, b));
  CHECK_RC(dlock_permit_sem_acquire(sem, 0, DLOCK_LEASE_WATCHDOG, x),
           DLOCK_EBUSY);
  CHECK_RC(dlock_permit_sem_acquire(sem, 200, DLOCK_LEASE_WATCHDOG, x),
           DLOCK_ETIMEDOUT);
  CHECK_OK(dlock_permit_sem_available(sem, &n));
  CHECK_INT(n, ==, 0);
  char out[128];
  CHECK_INT(th_my_sql(s,
                      "SELECT IS_USED_LOCK('pool#permit#1') IS NOT NULL, "
                      "IS_USED_LOCK('pool#permit#2') IS NOT NULL, "
                      "IS_FREE_LOCK('pool#permit#3'), (SELECT permits FROM "
                      "dlock_semaphore WHERE k = UNHEX(SHA2('pool', 256)))",
                      out, sizeof out),
            ==, 0);
  CHECK_STR(out, "1\t1\t1\t2");
  dlock_sem_state_t *st = NULL;
  CHECK_OK(dlock_permit_sem_state(sem, &st));
  CHECK_INT(st->in_use, ==, 2);
  CHECK_INT(st->available, ==, 0);
  CHECK_INT(st->npermits, ==, 2);
  bool seen_a = false, seen_b = false;
  for (size_t i = 0; i < st->npermits; i++) {
    seen_a |= strcmp(st->permits[i].id, a) == 0;
    seen_b |= strcmp(st->permits[i].id, b) == 0;
  }
  CHECK(seen_a && seen_b);
  dlock_sem_state_free(st);
  int64_t valid = 0;
  CHECK_OK(dlock_permit_sem_permit_valid(sem, a, &valid));
  CHECK_INT(valid, >, 0);
  CHECK_RC(dlock_permit_sem_release(sem, "0123456789abcdef0123456789abcdef"),
           DLOCK_ENOTOWNER);
  CHECK_OK(dlock_permit_sem_release(sem, a));
  CHECK_RC(dlock_permit_sem_release(sem, a), DLOCK_ENOTOWNER);
  CHECK_OK(dlock_permit_sem_available(sem, &n));
  CHECK_INT(n, ==, 1);
  /* the free slot taken by hand, as docs/MYSQL.md shows */
  th_my_session_t *q = th_my_session_open(s);
  CHECK(q != NULL);
  CHECK_OK(th_my_session_send(
      q, "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s "
         "WHERE i < (SELECT permits FROM dlock_semaphore WHERE k = "
         "UNHEX(SHA2('pool', 256)))) SELECT (SELECT i FROM s WHERE "
         "GET_LOCK(CONCAT('pool#permit#', i), 0) = 1 LIMIT 1) AS slot;"));
  char line[64] = "";
  CHECK_OK(th_my_session_line(q, line, sizeof line, 15000));
  CHECKF(strcmp(line, "1") == 0 || strcmp(line, "2") == 0, "slot '%s'", line);
  CHECK_RC(dlock_permit_sem_acquire(sem, 0, DLOCK_LEASE_WATCHDOG, x),
           DLOCK_EBUSY);
  CHECK_OK(dlock_permit_sem_state(sem, &st));
  CHECK_INT(st->in_use, ==, 2);
  bool seen_client = false;
  for (size_t i = 0; i < st->npermits; i++) {
    printf("holder: %s\n", st->permits[i].id);
    seen_client |= strncmp(st->permits[i].id, "connection ", 11) == 0;
  }
  CHECK(seen_client);
  dlock_sem_state_free(st);
  th_my_session_close(q); /* its session ends, and the slot with it */
  CHECK_OK(dlock_permit_sem_acquire(sem, 20000, DLOCK_LEASE_WATCHDOG, x));
  CHECK_OK(dlock_permit_sem_release(sem, x));
  bool existed = false;
  CHECK_OK(dlock_permit_sem_delete(sem, &existed));
  CHECK(existed);
  CHECK_OK(dlock_permit_sem_available(sem, &n));
  CHECK_INT(n, ==, 0);
  CHECK_RC(dlock_permit_sem_release(sem, b), DLOCK_ELOST);
  CHECK_OK(dlock_permit_sem_delete(sem, &existed));
  CHECK(!existed);
  /* a semaphore that shrinks: a permit still held on a slot above the new
   * size counts as in use */
  dlock_permit_sem_t *sh = NULL;
  CHECK_OK(dlock_permit_sem_new(c, "shrink", &sh));
  CHECK_OK(dlock_permit_sem_try_set_permits(sh, 2, NULL));
  char p1[DLOCK_PERMIT_ID_LEN + 1], p2[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(dlock_permit_sem_acquire(sh, 0, DLOCK_LEASE_WATCHDOG, p1));
  CHECK_OK(dlock_permit_sem_acquire(sh, 0, DLOCK_LEASE_WATCHDOG, p2));
  CHECK_OK(dlock_permit_sem_add_permits(sh, -1));
  CHECK_OK(dlock_permit_sem_release(sh, p1)); /* slot 1 free, slot 2 held */
  CHECK_OK(dlock_permit_sem_available(sh, &n));
  CHECK_INT(n, ==, 0);
  CHECK_RC(dlock_permit_sem_acquire(sh, 0, DLOCK_LEASE_WATCHDOG, x),
           DLOCK_EBUSY);
  CHECK_OK(dlock_permit_sem_release(sh, p2));
  CHECK_OK(dlock_permit_sem_acquire(sh, 0, DLOCK_LEASE_WATCHDOG, x));
  CHECK_RC(dlock_permit_sem_acquire(sh, 0, DLOCK_LEASE_WATCHDOG, p1),
           DLOCK_EBUSY);
  CHECK_OK(dlock_permit_sem_release(sh, x));
  CHECK_OK(dlock_permit_sem_add_permits(sh, 2)); /* 3 now */
  CHECK_OK(dlock_permit_sem_available(sh, &n));
  CHECK_INT(n, ==, 3);
  CHECK_RC(dlock_permit_sem_add_permits(sh, 998), DLOCK_EINVAL);
  printf("past 1000 permits -> %s\n", dlock_last_error());
  CHECK_OK(dlock_permit_sem_available(sh, &n));
  CHECK_INT(n, ==, 3);
  dlock_permit_sem_free(sh);
  dlock_permit_sem_free(sem);
  /* more slots than a wait watches (4 of 6): a release of any of them
   * reaches a waiter of another client, by its probe or its next scan (a
   * third of the lease) */
  dlock_client_t *c2 = client_for(th_my_url(s));
  dlock_permit_sem_t *wide = NULL, *wide2 = NULL;
  CHECK_OK(dlock_permit_sem_new(c, "wide", &wide));
  CHECK_OK(dlock_permit_sem_new(c2, "wide", &wide2));
  CHECK_OK(dlock_permit_sem_try_set_permits(wide, 6, NULL));
  char ids[6][DLOCK_PERMIT_ID_LEN + 1];
  for (int i = 0; i < 6; i++)
    CHECK_OK(dlock_permit_sem_acquire(wide, 0, DLOCK_LEASE_WATCHDOG, ids[i]));
  for (int i = 0; i < 6; i++) {
    psem_waiter_t w = {.sem = wide2, .wait_ms = 20000};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, psem_wait_main, &w) == 0);
    bool early;
    TH_WAIT_FOR(early, atomic_load(&w.done), 100);
    CHECK(!early);
    CHECK_OK(dlock_permit_sem_release(wide, ids[i]));
    pthread_join(t, NULL);
    CHECK_OK(atomic_load(&w.rc));
    memcpy(ids[i], w.id, sizeof w.id); /* now c2's, on the same slot */
  }
  for (int i = 0; i < 6; i++)
    CHECK_OK(dlock_permit_sem_release(wide2, ids[i]));
  printf("each of 6 slots released came to the waiter of another client\n");
  /* past the slots the try writes out (16): the scan of every slot */
  dlock_permit_sem_t *big = NULL;
  CHECK_OK(dlock_permit_sem_new(c, "big", &big));
  CHECK_OK(dlock_permit_sem_try_set_permits(big, 20, NULL));
  char bid[20][DLOCK_PERMIT_ID_LEN + 1];
  for (int i = 0; i < 20; i++)
    CHECK_OK(dlock_permit_sem_acquire(big, 0, DLOCK_LEASE_WATCHDOG, bid[i]));
  CHECK_RC(dlock_permit_sem_acquire(big, 0, DLOCK_LEASE_WATCHDOG, x),
           DLOCK_EBUSY);
  CHECK_INT(th_my_sql(s,
                      "SELECT IS_USED_LOCK('big#permit#20') IS NOT NULL, "
                      "IS_FREE_LOCK('big#permit#21')",
                      out, sizeof out),
            ==, 0);
  CHECK_STR(out, "1\t1");
  CHECK_OK(dlock_permit_sem_release(big, bid[19])); /* slot 20 */
  CHECK_OK(dlock_permit_sem_acquire(big, 0, DLOCK_LEASE_WATCHDOG, bid[19]));
  CHECK_OK(dlock_permit_sem_state(big, &st));
  CHECK_INT(st->in_use, ==, 20);
  CHECK_INT(st->npermits, ==, 20);
  dlock_sem_state_free(st);
  for (int i = 0; i < 20; i++)
    CHECK_OK(dlock_permit_sem_release(big, bid[i]));
  dlock_permit_sem_free(big);
  dlock_permit_sem_free(wide);
  dlock_permit_sem_free(wide2);
  dlock_client_free(c2);
  dlock_client_free(c);
  th_my_stop(s);
}

/* A waiting thread is woken by another client's release: the server ends
 * its probe's GET_LOCK the moment the slot frees. The clients' watchdog is
 * 90 s, so a wait that only looked again on its own scan (a third of it,
 * 30 s) would not be done within 15 s. Both slots of K = 2 are held; the
 * release of either wakes the waiter. */
static void t_permit_wait_woken(void) {
  th_my_t *s = start();
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_watchdog_timeout(o, 90000));
  dlock_client_t *c1 = NULL, *c2 = NULL;
  CHECK_OK(dlock_client_new(&c1, th_my_url(s), o));
  CHECK_OK(dlock_client_new(&c2, th_my_url(s), o));
  dlock_options_free(o);
  dlock_permit_sem_t *s1 = NULL, *s2 = NULL;
  CHECK_OK(dlock_permit_sem_new(c1, "woken", &s1));
  CHECK_OK(dlock_permit_sem_new(c2, "woken", &s2));
  CHECK_OK(dlock_permit_sem_try_set_permits(s1, 2, NULL));
  for (int round = 0; round < 2; round++) {
    char id[2][DLOCK_PERMIT_ID_LEN + 1];
    CHECK_OK(dlock_permit_sem_acquire(s1, 0, DLOCK_LEASE_WATCHDOG, id[0]));
    CHECK_OK(dlock_permit_sem_acquire(s1, 0, DLOCK_LEASE_WATCHDOG, id[1]));
    psem_waiter_t w = {.sem = s2, .wait_ms = 60000};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, psem_wait_main, &w) == 0);
    /* it waits (a bounded look: it must not get a permit on its own) */
    bool early;
    TH_WAIT_FOR(early, atomic_load(&w.done), 300);
    CHECK(!early);
    int64_t t0 = th_now_ms();
    CHECK_OK(dlock_permit_sem_release(s1, id[round]));
    bool done;
    TH_WAIT_FOR(done, atomic_load(&w.done), 15000);
    pthread_join(t, NULL);
    CHECKF(done, "the release did not wake the waiter");
    CHECK_OK(atomic_load(&w.rc));
    printf("FIGURE mysql.permit_handoff: the waiter of another client had "
           "the permit %lld ms after the release returned (slot %d of 2)\n",
           (long long)(atomic_load(&w.done_at) - t0), round + 1);
    CHECK_OK(dlock_permit_sem_release(s2, w.id));
    CHECK_OK(dlock_permit_sem_release(s1, id[1 - round]));
  }
  dlock_permit_sem_free(s1);
  dlock_permit_sem_free(s2);
  dlock_client_free(c1);
  dlock_client_free(c2);
  th_my_stop(s);
}

/* A holder process that releases, is killed (its session ends at once)
 * or frozen (the server ends its idle session after wait_timeout, the
 * lease): its permit comes to a waiting process. Each round prints how
 * long the hand-off took (from the release's return, SIGKILL or SIGSTOP
 * to the waiter's grant; not asserted). */
static void t_dead_permit_holder(void) {
  static const char *const how[] = {"released", "killed", "frozen"};
  th_my_t *s = start();
  _Atomic int64_t *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(page != MAP_FAILED);
  for (int round = 0; round < 3; round++) {
    int fds[2], go[2];
    CHECK(pipe(fds) == 0 && pipe(go) == 0);
    atomic_store(&page[0], 0);
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
      close(fds[0]);
      close(go[1]);
      dlock_client_t *c = client_for(th_my_url(s));
      dlock_permit_sem_t *sem = NULL;
      char id[DLOCK_PERMIT_ID_LEN + 1];
      if (dlock_permit_sem_new(c, "dead-holder", &sem) != 0 ||
          dlock_permit_sem_try_set_permits(sem, 1, NULL) != 0 ||
          dlock_permit_sem_acquire(sem, 0, DLOCK_LEASE_WATCHDOG, id) != 0)
        _exit(1);
      if (write(fds[1], "h", 1) != 1)
        _exit(1);
      char b;
      if (read(go[0], &b, 1) == 1 && b == 'r') {
        if (dlock_permit_sem_release(sem, id) != 0)
          _exit(1);
        atomic_store(&page[0], th_now_ms());
      }
      for (int i = 0; i < 600; i++)
        sleep(1);
      _exit(0);
    }
    close(fds[1]);
    close(go[0]);
    char b = 0;
    CHECK(read(fds[0], &b, 1) == 1 && b == 'h');
    close(fds[0]);
    dlock_client_t *c = client_for(th_my_url(s));
    dlock_permit_sem_t *sem = NULL;
    CHECK_OK(dlock_permit_sem_new(c, "dead-holder", &sem));
    char id[DLOCK_PERMIT_ID_LEN + 1];
    CHECK_RC(dlock_permit_sem_acquire(sem, 0, DLOCK_LEASE_WATCHDOG, id),
             DLOCK_EBUSY);
    psem_waiter_t w = {.sem = sem, .wait_ms = 30000};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, psem_wait_main, &w) == 0);
    bool early;
    TH_WAIT_FOR(early, atomic_load(&w.done), 300); /* it waits */
    CHECK(!early);
    int64_t t0 = th_now_ms();
    if (round == 0)
      CHECK(write(go[1], "r", 1) == 1);
    else
      CHECK(kill(pid, round == 1 ? SIGKILL : SIGSTOP) == 0);
    pthread_join(t, NULL);
    if (round == 0)
      t0 = atomic_load(&page[0]);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(go[1]);
    CHECK_OK(atomic_load(&w.rc));
    printf("FIGURE mysql.permit_%s: a %s holder's permit came to the "
           "waiting process %lld ms after the %s (lease %d ms)\n",
           how[round], how[round], (long long)(atomic_load(&w.done_at) - t0),
           round == 0   ? "release returned"
           : round == 1 ? "SIGKILL"
                        : "SIGSTOP",
           LEASE_MS);
    CHECK_OK(dlock_permit_sem_release(sem, w.id));
    dlock_permit_sem_free(sem);
    dlock_client_free(c);
  }
  munmap((void *)page, 4096);
  th_my_stop(s);
}

/* A server restart ends the holder's session: its permit is reported
 * lost, and a waiter of another client (whose probes' sessions went too)
 * rides the outage out and gets the permit. */
static void t_permit_restart(void) {
  th_my_t *s = start();
  atomic_store(&g_lost, 0);
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 5000));
  CHECK_OK(dlock_options_set_command_timeout(o, 5000));
  CHECK_OK(dlock_options_set_watchdog_timeout(o, LEASE_MS));
  CHECK_OK(dlock_options_set_lost_callback(o, on_lost, NULL));
  dlock_client_t *a = NULL;
  CHECK_OK(dlock_client_new(&a, th_my_url(s), o));
  dlock_options_free(o);
  dlock_client_t *b = client_for(th_my_url(s));
  dlock_permit_sem_t *sa = NULL, *sb = NULL;
  CHECK_OK(dlock_permit_sem_new(a, "restart-pool", &sa));
  CHECK_OK(dlock_permit_sem_new(b, "restart-pool", &sb));
  CHECK_OK(dlock_permit_sem_try_set_permits(sa, 1, NULL));
  char id[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(dlock_permit_sem_acquire(sa, 0, DLOCK_LEASE_WATCHDOG, id));
  psem_waiter_t w = {.sem = sb, .wait_ms = 30000};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, psem_wait_main, &w) == 0);
  bool early;
  TH_WAIT_FOR(early, atomic_load(&w.done), 300);
  CHECK(!early);
  CHECK_INT(th_my_kill9(s), ==, 0);
  CHECK_INT(th_my_up(s), ==, 0);
  bool lost, done;
  TH_WAIT_FOR(lost, atomic_load(&g_lost) >= 1, 30000);
  TH_WAIT_FOR(done, atomic_load(&w.done), 40000);
  pthread_join(t, NULL);
  CHECKF(lost, "the permit's loss was never reported");
  CHECK(done);
  CHECKF(atomic_load(&w.rc) == 0, "the waiter: %s", w.err);
  CHECK_RC_IN(dlock_permit_sem_release(sa, id), DLOCK_ELOST, DLOCK_ENOTOWNER);
  CHECK_OK(dlock_permit_sem_release(sb, w.id));
  printf("the holder was told, the waiter got the permit after the restart\n");
  dlock_permit_sem_free(sa);
  dlock_permit_sem_free(sb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_my_stop(s);
}

/* K = 2 permits never have more than two holders: 4 processes take and
 * give back permits, each counting itself in a shared page. */
static void t_permits_bound_processes(void) {
  enum { NPROC = 4, ITERS = 10 };
  th_my_t *s = start();
  atomic_int *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(page != MAP_FAILED);
  atomic_store(&page[0], 0); /* holders now */
  atomic_store(&page[1], 0); /* the most at once */
  pid_t pids[NPROC];
  fflush(stdout);
  for (int i = 0; i < NPROC; i++) {
    pids[i] = fork();
    CHECK(pids[i] >= 0);
    if (pids[i] == 0) {
      dlock_client_t *c = client_for(th_my_url(s));
      dlock_permit_sem_t *sem = NULL;
      char id[DLOCK_PERMIT_ID_LEN + 1];
      if (dlock_permit_sem_new(c, "bound", &sem) != 0 ||
          dlock_permit_sem_try_set_permits(sem, 2, NULL) != 0)
        _exit(1);
      for (int k = 0; k < ITERS; k++) {
        if (dlock_permit_sem_acquire(sem, 30000, DLOCK_LEASE_WATCHDOG, id))
          _exit(2);
        int now = atomic_fetch_add(&page[0], 1) + 1;
        int most = atomic_load(&page[1]);
        while (now > most &&
               !atomic_compare_exchange_weak(&page[1], &most, now))
          ;
        usleep(2000);
        atomic_fetch_sub(&page[0], 1);
        if (dlock_permit_sem_release(sem, id))
          _exit(3);
      }
      dlock_permit_sem_free(sem);
      dlock_client_free(c);
      _exit(0);
    }
  }
  int done = 0, failed = 0;
  int64_t until = th_now_ms() + 90000;
  while (done < NPROC && th_now_ms() < until) {
    for (int i = 0; i < NPROC; i++) {
      int st;
      if (pids[i] > 0 && waitpid(pids[i], &st, WNOHANG) == pids[i]) {
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
          failed++;
        pids[i] = 0;
        done++;
      }
    }
    th_sleep_ms(10);
  }
  for (int i = 0; i < NPROC; i++)
    if (pids[i] > 0) {
      kill(pids[i], SIGKILL);
      waitpid(pids[i], NULL, 0);
    }
  CHECKF(done == NPROC, "%d children still ran after 90 s", NPROC - done);
  CHECK_INT(failed, ==, 0);
  printf("at most %d holders at once (2 permits, %d processes x %d)\n",
         atomic_load(&page[1]), NPROC, ITERS);
  CHECK_INT(atomic_load(&page[1]), <=, 2);
  munmap(page, 4096);
  th_my_stop(s);
}

/* `dlock -N 2` on mysql://: two holders run at once, a third is refused
 * (exit 1 with -n), a run with another limit is a usage error (64) while
 * the semaphore is in use, and --status lists the two holders. */
static void t_cli_limit(void) {
#ifndef DLOCK_CLI_PATH
  printf("this build has no dlock command\n");
#else
  th_my_t *s = start();
  char dir[] = "/tmp/dlock-mycli-XXXXXX";
  CHECK(mkdtemp(dir));
  char cmd[1400];
  pid_t bg[2];
  for (int i = 0; i < 2; i++) {
    snprintf(cmd, sizeof cmd,
             "exec " DLOCK_CLI_PATH " -u '%s' -N 2 cli-pool sh -c 'touch "
             "%s/in%d; while [ ! -e %s/stop ]; do sleep 0.05; done'",
             th_my_url(s), dir, i, dir);
    fflush(stdout);
    bg[i] = fork();
    CHECK(bg[i] >= 0);
    if (bg[i] == 0) {
      execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
      _exit(127);
    }
  }
  char f[128];
  bool in;
  snprintf(f, sizeof f, "%s/in0", dir);
  TH_WAIT_FOR(in, access(f, F_OK) == 0, 30000);
  CHECK(in);
  snprintf(f, sizeof f, "%s/in1", dir);
  TH_WAIT_FOR(in, access(f, F_OK) == 0, 30000);
  CHECK(in);
  snprintf(cmd, sizeof cmd,
           DLOCK_CLI_PATH " -u '%s' -N 2 -n cli-pool true 2>/dev/null",
           th_my_url(s));
  int st = system(cmd);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1);
  snprintf(cmd, sizeof cmd,
           DLOCK_CLI_PATH " -u '%s' -N 3 -n cli-pool true 2>/dev/null",
           th_my_url(s));
  st = system(cmd);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 64);
  snprintf(cmd, sizeof cmd,
           DLOCK_CLI_PATH " -u '%s' --status --json -N 2 cli-pool",
           th_my_url(s));
  FILE *pf = popen(cmd, "r");
  CHECK(pf != NULL);
  char json[2048] = "";
  size_t got = fread(json, 1, sizeof json - 1, pf);
  json[got] = '\0';
  st = pclose(pf);
  printf("status: %s", json);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  CHECK(strstr(json, "\"in_use\":2") != NULL);
  CHECK(strstr(json, "\"available\":0") != NULL);
  /* two ids of 32 hex digits: the holders' permit ids */
  int ids = 0;
  for (const char *p = json; (p = strstr(p, "{\"id\":\"")) != NULL; p++)
    ids += strspn(p + 7, "0123456789abcdef") == 32;
  CHECK_INT(ids, ==, 2);
  snprintf(f, sizeof f, "%s/stop", dir);
  FILE *sf = fopen(f, "w");
  CHECK(sf);
  fclose(sf);
  for (int i = 0; i < 2; i++) {
    int wst = 0;
    bool ended;
    TH_WAIT_FOR(ended, waitpid(bg[i], &wst, WNOHANG) == bg[i], 30000);
    if (!ended) {
      kill(bg[i], SIGKILL);
      waitpid(bg[i], &wst, 0);
    }
    CHECK(ended && WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
  }
  snprintf(cmd, sizeof cmd, DLOCK_CLI_PATH " -u '%s' -N 2 -n cli-pool true",
           th_my_url(s));
  CHECK_INT(system(cmd), ==, 0);
  printf("dlock -N 2: two ran at once, a third was refused (1), -N 3 was a "
         "usage error (64)\n");
  char rm[200];
  snprintf(rm, sizeof rm, "rm -rf %s", dir);
  CHECK_INT(system(rm), ==, 0);
  th_my_stop(s);
#endif
}

/* ------------------------------------------------------ sent operations
 *
 * The async API's tries and releases of reentrant and fenced locks go out
 * from the calling thread on pooled connections, their answers read by
 * the event loop (mysql.c "sent ops"). */

static dlock_client_t *client_timeout(const char *url, int64_t command_ms) {
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 5000));
  CHECK_OK(dlock_options_set_command_timeout(o, command_ms));
  CHECK_OK(dlock_options_set_watchdog_timeout(o, 6000));
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new(&c, url, o));
  dlock_options_free(o);
  return c;
}

/* On a client warmed up by one blocking acquire and release of each name,
 * async tries and releases of a reentrant and a fenced lock (re-entries
 * and a refusal among them) complete with no thread started: no pool
 * thread carried them. Fenced tokens grow, re-entry keeps the token, and
 * the locks are free after. */
static void t_async_sent_no_pool(void) {
  th_my_t *s = start();
  dlock_client_t *c = client_timeout(th_my_url(s), 5000);
  dlock_lock_t *r = NULL, *f = NULL;
  CHECK_OK(dlock_lock_new(c, "sent-r", &r));
  CHECK_OK(dlock_lock_new_kind(c, "sent-f", DLOCK_FENCED, &f));
  CHECK_OK(dlock_lock_acquire(r, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(r));
  CHECK_OK(dlock_lock_acquire(f, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(f));
  th_my_session_t *q = client_holds(s, "sent-busy");
  dlock_lock_t *b = NULL;
  CHECK_OK(dlock_lock_new(c, "sent-busy", &b));
  int before = th_thread_count();
  enum { PAIRS = 40 };
  int64_t last = 0;
  for (int i = 0; i < PAIRS; i++) {
    CHECK_OK(th_async_one(c, r, 0, true, 0, DLOCK_LEASE_WATCHDOG).rc);
    CHECK_OK(
        th_async_one(c, r, 0, true, 0, DLOCK_LEASE_WATCHDOG).rc); /* reentry */
    CHECK_OK(th_async_one(c, r, 0, false, 0, DLOCK_LEASE_WATCHDOG).rc);
    CHECK_OK(th_async_one(c, r, 0, false, 0, DLOCK_LEASE_WATCHDOG).rc);
    th_async_outcome_t g = th_async_one(c, f, 0, true, 0, DLOCK_LEASE_WATCHDOG);
    CHECK_OK(g.rc);
    CHECKF(g.value > last, "token %lld after %lld", (long long)g.value,
           (long long)last);
    last = g.value;
    CHECK_INT(th_async_one(c, f, 0, true, 0, DLOCK_LEASE_WATCHDOG).value, ==,
              last);
    CHECK_OK(th_async_one(c, f, 0, false, 0, DLOCK_LEASE_WATCHDOG).rc);
    CHECK_OK(th_async_one(c, f, 0, false, 0, DLOCK_LEASE_WATCHDOG).rc);
  }
  th_async_outcome_t busy =
      th_async_one(c, b, 0, true, 0, DLOCK_LEASE_WATCHDOG);
  CHECKF(busy.rc == DLOCK_EBUSY, "a held lock's try: %s (%s)",
         dlock_err_name(busy.rc), busy.detail);
  int after = th_thread_count();
  CHECKF(after == before, "%d threads before %d sent pairs, %d after", before,
         PAIRS * 2, after);
  printf("%d async pairs (re-entered, fenced tokens up to %lld) and a "
         "refusal with no thread started (%d threads)\n",
         PAIRS * 2, (long long)last, after);
  CHECK_INT(client_try(s, "'sent-r'"), ==, '1');
  CHECK_INT(client_try(s, "'sent-f'"), ==, '1');
  th_my_session_close(q);
  dlock_lock_free(b);
  dlock_lock_free(r);
  dlock_lock_free(f);
  dlock_client_free(c);
  th_my_stop(s);
}

/* The client's connections killed, and every session of user dlock but
 * the caller's, by KILL from a mariadb session. */
static void kill_sessions(th_my_t *s) {
  char ids[512] = "";
  CHECK_INT(th_my_sql(s,
                      "SELECT GROUP_CONCAT(ID SEPARATOR ' ') FROM "
                      "information_schema.PROCESSLIST WHERE USER = 'dlock' "
                      "AND ID <> CONNECTION_ID()",
                      ids, sizeof ids),
            ==, 0);
  char *save = NULL;
  for (char *id = strtok_r(ids, " ", &save); id;
       id = strtok_r(NULL, " ", &save)) {
    char sql[64], out[64];
    snprintf(sql, sizeof sql, "KILL %s", id);
    th_my_sql(s, sql, out, sizeof out); /* one that ended meanwhile: fine */
  }
}

/* Sent operations meet the server's faults as the blocking ones do: a
 * stopped server fails the try in flight with DLOCK_EIOTIMEOUT at the
 * command timeout, and the release in flight is taken as done (its
 * session is closed, and the lock with it); sessions killed, and a
 * restarted server, between operations cost nothing: the next try works,
 * and the lock is free after. */
static void t_async_sent_faults(void) {
  th_my_t *s = start();
  dlock_client_t *c = client_timeout(th_my_url(s), 1000);
  dlock_lock_t *l = NULL;
  CHECK_OK(dlock_lock_new(c, "sent-faults", &l));
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(l));
  CHECK_INT(th_my_pause(s), ==, 0);
  th_async_outcome_t o = th_async_one(c, l, 0, true, 0, DLOCK_LEASE_WATCHDOG);
  CHECK_INT(th_my_resume(s), ==, 0);
  CHECKF(o.rc == DLOCK_EIOTIMEOUT, "a try on a stopped server: %s (%s)",
         dlock_err_name(o.rc), o.detail);
  CHECK(strchr(o.detail, '\n') == NULL);
  printf("a try on a stopped server: %s (%s)\n", dlock_err_name(o.rc),
         o.detail);
  /* its session ends once the server reads on: the lock comes free */
  CHECK_OK(th_async_one(c, l, 0, true, 20000, DLOCK_LEASE_WATCHDOG).rc);
  CHECK_INT(th_my_pause(s), ==, 0);
  o = th_async_one(c, l, 0, false, 0, DLOCK_LEASE_WATCHDOG);
  CHECK_INT(th_my_resume(s), ==, 0);
  CHECKF(o.rc == 0, "a release on a stopped server: %s (%s)",
         dlock_err_name(o.rc), o.detail);
  bool locked = true, freed = false;
  TH_WAIT_FOR(freed, dlock_lock_is_locked(l, &locked) == 0 && !locked, 20000);
  CHECK(freed);
  printf("a release on a stopped server: done, the lock free once it ran "
         "on\n");
  kill_sessions(s);
  CHECK_OK(th_async_one(c, l, 0, true, 0, DLOCK_LEASE_WATCHDOG).rc);
  CHECK_OK(th_async_one(c, l, 0, false, 0, DLOCK_LEASE_WATCHDOG).rc);
  CHECK_INT(client_try(s, "'sent-faults'"), ==, '1');
  CHECK_INT(th_my_kill9(s), ==, 0);
  CHECK_INT(th_my_up(s), ==, 0);
  for (int i = 0; i < 2; i++) {
    CHECK_OK(th_async_one(c, l, 0, true, 0, DLOCK_LEASE_WATCHDOG).rc);
    CHECK_OK(th_async_one(c, l, 0, false, 0, DLOCK_LEASE_WATCHDOG).rc);
  }
  CHECK_INT(client_try(s, "'sent-faults'"), ==, '1');
  printf("sessions killed, then a server restart, between operations: the "
         "next tries worked, the lock free after\n");
  CHECK_INT(dlock_client_pending(c), ==, 0);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_my_stop(s);
}

static const check_case_t cases[] = {
    {"client_excludes_dlock", t_client_excludes_dlock},
    {"kinds", t_kinds},
    {"frozen_holder_loses", t_frozen_holder_loses},
    {"terminated_session_told", t_terminated_session_told},
    {"bad_input", t_bad_input},
    {"permits_layout", t_permits_layout},
    {"permit_wait_woken", t_permit_wait_woken},
    {"dead_permit_holder", t_dead_permit_holder},
    {"permit_restart", t_permit_restart},
    {"permits_bound_processes", t_permits_bound_processes},
    {"cli_limit", t_cli_limit},
    {"async_sent_no_pool", t_async_sent_no_pool},
    {"async_sent_faults", t_async_sent_faults},
};

CHECK_MAIN(cases)
