/*
 * test_postgres.c - the PostgreSQL backend against a private server.
 *
 * Design note: each case starts its own server (tests/harness/pg.c) and
 * asserts what a user sees: psql and dlock exclude each other on the same
 * advisory lock (the one-liner of docs/POSTGRES.md), a frozen holder's
 * session is ended by the server once its lease passes (the next waiter
 * gets the lock), a server restart is reported as a loss, and bad input
 * gets one clear line. Permit semaphores: psql sees and joins the slot
 * layout, a release wakes another client's waiter, a killed or frozen
 * holder's permit comes back, forked processes never exceed K = 2
 * (counted in a MAP_SHARED page; children fork before the parent makes a
 * client), and `dlock -N 2` runs two at once. Every wait is bounded.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "check.h"
#include "harness.h"
#include "pg.h"

#include "async_one.h"

#include <dirent.h>
#include <dlock/dlock.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

static dlock_client_t *client_for(const char *url) {
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 5000));
  CHECK_OK(dlock_options_set_command_timeout(o, 5000));
  CHECK_OK(dlock_options_set_watchdog_timeout(o, LEASE_MS));
  CHECK_OK(dlock_options_set_lost_callback(o, on_lost, NULL));
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new(&c, url, o));
  dlock_options_free(o);
  return c;
}

/* psql's pg_try_advisory_lock on the name, in its own session: "t"/"f" */
static char psql_try(th_pg_t *s, const char *name) {
  char sql[256], out[64];
  snprintf(sql, sizeof sql,
           "SELECT pg_try_advisory_lock(hashtextextended('%s', 0))", name);
  const char *cmds[] = {sql, NULL};
  CHECK_INT(th_pg_psql(s, cmds, out, sizeof out), ==, 0);
  return out[0];
}

/* psql holds the lock (the documented one-liner) and dlock cannot take it;
 * once psql's session ends, dlock's wait gets it. */
/* A psql session that holds the advisory lock of NAME, as a user would
 * take it by hand. */
static th_pg_session_t *psql_holds(th_pg_t *s, const char *name) {
  th_pg_session_t *q = th_pg_session_open(s);
  CHECK(q != NULL);
  char sql[256];
  snprintf(sql, sizeof sql,
           "SELECT pg_advisory_lock(hashtextextended('%s', 0)); "
           "SELECT 'held';",
           name);
  CHECK_OK(th_pg_session_send(q, sql));
  char line[128] = "";
  for (int i = 0; i < 4 && strcmp(line, "held") != 0; i++)
    CHECK_OK(th_pg_session_line(q, line, sizeof line, 10000));
  CHECK_STR(line, "held");
  return q;
}

static void t_psql_excludes_dlock(void) {
  th_pg_t *s = th_pg_start();
  CHECK(s != NULL);
  th_pg_session_t *q = psql_holds(s, "nightly-report");
  dlock_client_t *c = client_for(th_pg_url(s));
  dlock_lock_t *l = NULL;
  CHECK_OK(dlock_lock_new(c, "nightly-report", &l));
  CHECK_RC(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  CHECK_RC(dlock_lock_acquire(l, 200, DLOCK_LEASE_WATCHDOG), DLOCK_ETIMEDOUT);
  printf("psql holds it: dlock gets EBUSY, and ETIMEDOUT after a wait\n");
  th_pg_session_close(q); /* psql's session ends, and its lock */
  CHECK_OK(dlock_lock_acquire(l, 20000, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_pg_stop(s);
}

/* dlock holds it; psql's pg_try_advisory_lock gets false until dlock
 * releases. */
static void t_dlock_excludes_psql(void) {
  th_pg_t *s = th_pg_start();
  CHECK(s != NULL);
  dlock_client_t *c = client_for(th_pg_url(s));
  dlock_lock_t *l = NULL;
  CHECK_OK(dlock_lock_new(c, "nightly-report", &l));
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG)); /* reentry */
  CHECK_INT(psql_try(s, "nightly-report"), ==, 'f');
  CHECK_OK(dlock_lock_release(l));
  CHECK_INT(psql_try(s, "nightly-report"), ==, 'f'); /* still held once */
  CHECK_OK(dlock_lock_release(l));
  CHECK_INT(psql_try(s, "nightly-report"), ==, 't');
  printf("dlock held it: psql's try was refused until dlock's release\n");
  dlock_lock_free(l);
  dlock_client_free(c);
  th_pg_stop(s);
}

/* dlock's read side is psql's shared lock: psql's shared try succeeds
 * beside it, its exclusive try does not; dlock's write side excludes
 * both. */
static void t_read_side_with_psql(void) {
  th_pg_t *s = th_pg_start();
  CHECK(s != NULL);
  dlock_client_t *c = client_for(th_pg_url(s));
  dlock_lock_t *r = NULL, *w = NULL;
  CHECK_OK(dlock_lock_new_kind(c, "rw-res", DLOCK_READ, &r));
  CHECK_OK(dlock_lock_new_kind(c, "rw-res", DLOCK_WRITE, &w));
  char out[64];
  const char *shared_try[] = {
      "SELECT pg_try_advisory_lock_shared(hashtextextended('rw-res', 0))",
      NULL};
  CHECK_OK(dlock_lock_acquire(r, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_INT(th_pg_psql(s, shared_try, out, sizeof out), ==, 0);
  CHECK_STR(out, "t");
  CHECK_INT(psql_try(s, "rw-res"), ==, 'f');
  /* a reader asking for the write side */
  CHECK_RC(dlock_lock_acquire(w, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EDEADLK);
  CHECK_OK(dlock_lock_release(r));
  CHECK_OK(dlock_lock_acquire(w, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_INT(th_pg_psql(s, shared_try, out, sizeof out), ==, 0);
  CHECK_STR(out, "f");
  CHECK_OK(dlock_lock_release(w));
  printf("dlock's read side shares with psql's shared lock; its write side "
         "excludes it\n");
  dlock_lock_free(r);
  dlock_lock_free(w);
  dlock_client_free(c);
  th_pg_stop(s);
}

/* A server statement_timeout shorter than the wait cuts the blocking
 * statement again and again: the wait sends it again each time and gets
 * the lock once psql's session lets it go. */
static void t_statement_timeout_waits_on(void) {
  th_pg_t *s = th_pg_start();
  CHECK(s != NULL);
  th_pg_session_t *q = psql_holds(s, "st-res");
  char url[320];
  snprintf(url, sizeof url, "%s?options=-c%%20statement_timeout%%3D100",
           th_pg_url(s));
  /* no outage grace: a cut statement is not an outage to ride out */
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_outage_grace(o, 0));
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new(&c, url, o));
  dlock_options_free(o);
  dlock_lock_t *l = NULL;
  CHECK_OK(dlock_lock_new(c, "st-res", &l));
  /* several statement timeouts pass within this wait */
  CHECK_RC(dlock_lock_acquire(l, 600, DLOCK_LEASE_WATCHDOG), DLOCK_ETIMEDOUT);
  CHECK_OK(th_pg_session_send(
      q, "SELECT pg_advisory_unlock(hashtextextended('st-res', 0));"));
  CHECK_OK(dlock_lock_acquire(l, 20000, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_pg_session_close(q);
  th_pg_stop(s);
}

/* A multilock of two names, all or nothing: while psql holds one, dlock
 * takes neither; once psql lets go, dlock holds both. */
static void t_multilock(void) {
  th_pg_t *s = th_pg_start();
  CHECK(s != NULL);
  th_pg_session_t *q = psql_holds(s, "ml-b");
  dlock_client_t *c = client_for(th_pg_url(s));
  dlock_lock_t *l[2] = {NULL, NULL};
  CHECK_OK(dlock_lock_new(c, "ml-a", &l[0]));
  CHECK_OK(dlock_lock_new(c, "ml-b", &l[1]));
  dlock_multilock_t *m = NULL;
  CHECK_OK(dlock_multilock_new(&m, l, 2));
  CHECK_RC(dlock_multilock_acquire(m, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  /* nothing held: psql can take the other one */
  CHECK_INT(psql_try(s, "ml-a"), ==, 't');
  th_pg_session_close(q);
  CHECK_OK(dlock_multilock_acquire(m, 20000, DLOCK_LEASE_WATCHDOG));
  CHECK_INT(psql_try(s, "ml-a"), ==, 'f');
  CHECK_INT(psql_try(s, "ml-b"), ==, 'f');
  CHECK_OK(dlock_multilock_release(m));
  CHECK_INT(psql_try(s, "ml-b"), ==, 't');
  dlock_multilock_free(m);
  dlock_lock_free(l[0]);
  dlock_lock_free(l[1]);
  dlock_client_free(c);
  th_pg_stop(s);
}

/* A holder that freezes (SIGSTOP) stops its heartbeats: the server ends
 * its idle session after the lease, and a waiter gets the lock. */
static void t_frozen_holder_loses(void) {
  th_pg_t *s = th_pg_start();
  CHECK(s != NULL);
  int fds[2];
  CHECK(pipe(fds) == 0);
  fflush(stdout);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    dlock_client_t *c = client_for(th_pg_url(s));
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
  dlock_client_t *c = client_for(th_pg_url(s));
  dlock_lock_t *l = NULL;
  CHECK_OK(dlock_lock_new(c, "frozen", &l));
  CHECK_RC(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  CHECK(kill(pid, SIGSTOP) == 0);
  int rc = dlock_lock_acquire(l, 30000, DLOCK_LEASE_WATCHDOG);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  CHECK_OK(rc);
  printf("the frozen holder's session was ended by the server; the waiter "
         "got the lock\n");
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_pg_stop(s);
}

/* A server restart ends every session: the hold is reported lost. */
static void t_restart_reports_lost(void) {
  th_pg_t *s = th_pg_start();
  CHECK(s != NULL);
  atomic_store(&g_lost, 0);
  dlock_client_t *c = client_for(th_pg_url(s));
  dlock_lock_t *l = NULL;
  CHECK_OK(dlock_lock_new(c, "restart", &l));
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_INT(th_pg_kill9(s), ==, 0);
  CHECK_INT(th_pg_up(s), ==, 0);
  bool lost;
  TH_WAIT_FOR(lost, atomic_load(&g_lost) >= 1, 30000);
  CHECKF(lost, "the loss was never reported");
  CHECK_RC_IN(dlock_lock_release(l), DLOCK_ELOST, DLOCK_ENOTOWNER);
  /* the lock is free after the restart, and the client works on */
  CHECK_OK(dlock_lock_acquire(l, 20000, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_pg_stop(s);
}

/* A holding session ended by the server (an administrator's
 * pg_terminate_backend; a restart or a crash alike) is reported lost when
 * its connection closes, not at the next heartbeat: with a 60 s watchdog
 * the first heartbeat would come after 20 s, and the loss is expected
 * well before. */
static void t_terminated_session_told(void) {
  th_pg_t *s = th_pg_start();
  CHECK(s != NULL);
  atomic_store(&g_lost, 0);
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_watchdog_timeout(o, 60000));
  CHECK_OK(dlock_options_set_lost_callback(o, on_lost, NULL));
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new(&c, th_pg_url(s), o));
  dlock_options_free(o);
  dlock_lock_t *l = NULL;
  CHECK_OK(dlock_lock_new(c, "terminated", &l));
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  int64_t t0 = th_now_ms();
  char out[64];
  const char *cmds[] = {
      "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_locks "
      "WHERE locktype = 'advisory' AND granted",
      NULL};
  CHECK_INT(th_pg_psql(s, cmds, out, sizeof out), ==, 0);
  CHECK_STR(out, "1");
  bool lost;
  TH_WAIT_FOR(lost, atomic_load(&g_lost) >= 1, 15000);
  CHECKF(lost, "the loss was not reported before the first heartbeat");
  printf("FIGURE postgres.terminated: the loss reported %lld ms after "
         "pg_terminate_backend was sent\n",
         (long long)(th_now_ms() - t0));
  CHECK_RC(dlock_lock_release(l), DLOCK_ELOST);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_pg_stop(s);
}

/* Fencing tokens grow across a server restart, and the row a resource
 * checks them against (docs/POSTGRES.md) holds the last one. */
static void t_fence_survives_restart(void) {
  th_pg_t *s = th_pg_start();
  CHECK(s != NULL);
  dlock_client_t *c = client_for(th_pg_url(s));
  dlock_lock_t *l = NULL;
  CHECK_OK(dlock_lock_new_kind(c, "fenced-res", DLOCK_FENCED, &l));
  int64_t t1 = 0, t2 = 0, again = 0;
  CHECK_OK(dlock_lock_acquire_fenced(l, 0, DLOCK_LEASE_WATCHDOG, &t1));
  CHECK_OK(dlock_lock_acquire_fenced(l, 0, DLOCK_LEASE_WATCHDOG, &again));
  CHECK_INT(again, ==, t1); /* reentry keeps the token */
  CHECK_OK(dlock_lock_release(l));
  CHECK_OK(dlock_lock_release(l));
  CHECK_INT(th_pg_kill9(s), ==, 0);
  CHECK_INT(th_pg_up(s), ==, 0);
  CHECK_OK(dlock_lock_acquire_fenced(l, 20000, DLOCK_LEASE_WATCHDOG, &t2));
  CHECKF(t2 > t1, "token %lld after %lld across a restart", (long long)t2,
         (long long)t1);
  char out[64], want[32];
  const char *cmds[] = {"SELECT token FROM dlock_fence WHERE key = "
                        "hashtextextended('fenced-res', 0)",
                        NULL};
  CHECK_INT(th_pg_psql(s, cmds, out, sizeof out), ==, 0);
  snprintf(want, sizeof want, "%lld", (long long)t2);
  CHECK_STR(out, want);
  printf("tokens %lld then %lld across a restart; dlock_fence says %s\n",
         (long long)t1, (long long)t2, out);
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_pg_stop(s);
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
  th_pg_t *s = th_pg_start();
  CHECK(s != NULL);
  char url[256];
  dlock_client_t *c = NULL;
  /* wrong password */
  snprintf(url, sizeof url,
           "postgres://postgres:not-the-pw-4711@127.0.0.1:%d/postgres",
           th_pg_port(s));
  expect_line(dlock_client_new(&c, url, NULL), DLOCK_EAUTH, url,
              "password authentication failed", "not-the-pw-4711");
  /* missing database */
  snprintf(url, sizeof url, "postgres://postgres:%s@127.0.0.1:%d/nosuchdb",
           th_pg_password(), th_pg_port(s));
  expect_line(dlock_client_new(&c, url, NULL), DLOCK_ESERVER, "(nosuchdb)",
              "does not exist", th_pg_password());
  /* an unknown URL parameter (libpq parses the URL) */
  expect_line(dlock_client_new(&c, "postgres://127.0.0.1/db?nosuch=1", NULL),
              DLOCK_EURL, "?nosuch=1", "nosuch", NULL);
  /* a server that is not PostgreSQL: a Redis server on the port */
  th_server_t *r = th_server_start(NULL);
  CHECK(r != NULL);
  snprintf(url, sizeof url, "postgres://u:secret-pw-99@127.0.0.1:%d/db",
           r->port);
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 3000));
  int rc = dlock_client_new(&c, url, o);
  dlock_options_free(o);
  CHECKF(rc == DLOCK_EPROTO || rc == DLOCK_EIOTIMEOUT, "%s: %s (%s)", url,
         dlock_err_name(rc), dlock_last_error());
  expect_line(rc, rc, url, "PostgreSQL", "secret-pw-99");
  th_server_stop(r);
  /* names: any length up to the maximum, quotes, and bytes that are not
   * UTF-8 (one line) */
  c = client_for(th_pg_url(s));
  char longname[DLOCK_NAME_MAX + 1];
  memset(longname, 'n', DLOCK_NAME_MAX);
  longname[DLOCK_NAME_MAX] = '\0';
  const char *names[] = {longname, "it's \"quoted\" \\ and\nlined", "ünïcødé"};
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
  expect_line(dlock_lock_acquire(l, 500, DLOCK_LEASE_WATCHDOG), DLOCK_EINVAL,
              "name \"bad\\xff\\xfe\" (wait)", "UTF-8", NULL);
  dlock_lock_free(l);
  /* a kind the backend does not offer: refused before anything is sent */
  CHECK_RC(dlock_lock_new_kind(c, "k", DLOCK_FAIR, &l), DLOCK_ENOTSUP);
  printf("fair -> %s\n", dlock_last_error());
  dlock_client_free(c);
  th_pg_stop(s);
}

/* ------------------------------------------------------ permit semaphores */

/* A permit semaphore of K permits is K slot advisory locks (docs/POSTGRES.md):
 * two permits are taken, a third is refused, psql sees the slots held and
 * the size in dlock_semaphore; a wait ends by its deadline; the state
 * lists both ids; an unknown id is not ours; delete ends it all. */
static void t_permits_layout(void) {
  th_pg_t *s = th_pg_start();
  CHECK(s != NULL);
  dlock_client_t *c = client_for(th_pg_url(s));
  dlock_permit_sem_t *sem = NULL;
  CHECK_OK(dlock_permit_sem_new(c, "pool", &sem));
  int64_t n = -1;
  CHECK_OK(dlock_permit_sem_available(sem, &n)); /* no table yet */
  CHECK_INT(n, ==, 0);
  bool set = false;
  CHECK_OK(dlock_permit_sem_try_set_permits(sem, 2, &set));
  CHECK(set);
  CHECK_OK(dlock_permit_sem_try_set_permits(sem, 5, &set));
  CHECK(!set);
  CHECK_RC(dlock_permit_sem_try_set_permits(sem, 10001, &set), DLOCK_EINVAL);
  printf("10001 permits -> %s\n", dlock_last_error());
  char a[DLOCK_PERMIT_ID_LEN + 1], b[DLOCK_PERMIT_ID_LEN + 1],
      x[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(dlock_permit_sem_acquire(sem, 0, DLOCK_LEASE_WATCHDOG, a));
  CHECK_OK(dlock_permit_sem_acquire(sem, 0, DLOCK_LEASE_WATCHDOG, b));
  CHECK_RC(dlock_permit_sem_acquire(sem, 0, DLOCK_LEASE_WATCHDOG, x),
           DLOCK_EBUSY);
  CHECK_RC(dlock_permit_sem_acquire(sem, 200, DLOCK_LEASE_WATCHDOG, x),
           DLOCK_ETIMEDOUT);
  CHECK_OK(dlock_permit_sem_available(sem, &n));
  CHECK_INT(n, ==, 0);
  /* what psql sees: both slots held, the size in the table */
  char out[64];
  const char *slots[] = {
      "SELECT pg_try_advisory_lock(hashtextextended('pool', 1)) OR "
      "pg_try_advisory_lock(hashtextextended('pool', 2))",
      NULL};
  CHECK_INT(th_pg_psql(s, slots, out, sizeof out), ==, 0);
  CHECK_STR(out, "f");
  const char *size[] = {"SELECT permits FROM dlock_semaphore WHERE key = "
                        "hashtextextended('pool', 0)",
                        NULL};
  CHECK_INT(th_pg_psql(s, size, out, sizeof out), ==, 0);
  CHECK_STR(out, "2");
  dlock_sem_state_t *st = NULL;
  CHECK_OK(dlock_permit_sem_state(sem, &st));
  CHECK_INT(st->available, ==, 0);
  CHECK_INT(st->in_use, ==, 2);
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
  CHECK(valid > 0);
  CHECK_RC(dlock_permit_sem_release(sem, "0123456789abcdef0123456789abcdef"),
           DLOCK_ENOTOWNER);
  CHECK_OK(dlock_permit_sem_release(sem, a));
  CHECK_RC(dlock_permit_sem_release(sem, a), DLOCK_ENOTOWNER);
  CHECK_OK(dlock_permit_sem_available(sem, &n));
  CHECK_INT(n, ==, 1);
  /* a psql session joins: it takes the free slot (a's, the first) by
   * hand, with docs/POSTGRES.md's statement */
  th_pg_session_t *q = th_pg_session_open(s);
  CHECK(q != NULL);
  CHECK_OK(th_pg_session_send(
      q, "SELECT s.i AS slot FROM generate_series(1, (SELECT permits FROM "
         "dlock_semaphore WHERE key = hashtextextended('pool', 0))) s(i) "
         "WHERE pg_try_advisory_lock(hashtextextended('pool', s.i)) LIMIT 1; "
         "SELECT 'end';"));
  char line[128] = "", slot[128] = "";
  for (int i = 0; i < 4 && strcmp(line, "end") != 0; i++) {
    CHECK_OK(th_pg_session_line(q, line, sizeof line, 10000));
    if (!slot[0] && strcmp(line, "end") != 0)
      snprintf(slot, sizeof slot, "%s", line);
  }
  CHECK_STR(slot, "1");
  CHECK_RC(dlock_permit_sem_acquire(sem, 0, DLOCK_LEASE_WATCHDOG, x),
           DLOCK_EBUSY);
  CHECK_OK(dlock_permit_sem_state(sem, &st));
  CHECK_INT(st->in_use, ==, 2);
  bool seen_psql = false;
  for (size_t i = 0; i < st->npermits; i++)
    seen_psql |= strncmp(st->permits[i].id, "pid ", 4) == 0;
  CHECK(seen_psql);
  dlock_sem_state_free(st);
  th_pg_session_close(q); /* its session ends, and its slot */
  CHECK_OK(dlock_permit_sem_acquire(sem, 20000, DLOCK_LEASE_WATCHDOG, x));
  CHECK_OK(dlock_permit_sem_release(sem, x));
  /* delete: the holder's session is ended, its release says lost */
  bool existed = false;
  CHECK_OK(dlock_permit_sem_delete(sem, &existed));
  CHECK(existed);
  CHECK_OK(dlock_permit_sem_available(sem, &n));
  CHECK_INT(n, ==, 0);
  CHECK_RC(dlock_permit_sem_release(sem, b), DLOCK_ELOST);
  CHECK_OK(dlock_permit_sem_delete(sem, &existed));
  CHECK(!existed);
  /* a semaphore that shrinks: a permit still held on a slot above the new
   * size counts as in use, and no slot below is lent past the size */
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
  dlock_permit_sem_free(sh);
  /* counting semaphores and latches are refused with one line */
  dlock_semaphore_t *cs = NULL;
  CHECK_RC(dlock_semaphore_new(c, "counting", &cs), DLOCK_ENOTSUP);
  printf("semaphore -> %s\n", dlock_last_error());
  CHECK(strstr(dlock_last_error(), "postgres"));
  dlock_latch_t *lt = NULL;
  CHECK_RC(dlock_latch_new(c, "latch", &lt), DLOCK_ENOTSUP);
  dlock_permit_sem_free(sem);
  dlock_client_free(c);
  th_pg_stop(s);
}

typedef struct psem_waiter {
  dlock_permit_sem_t *sem;
  int64_t wait_ms;
  char id[DLOCK_PERMIT_ID_LEN + 1];
  atomic_int rc;
  atomic_bool done;
} psem_waiter_t;

static void *psem_wait_main(void *arg) {
  psem_waiter_t *w = arg;
  atomic_store(&w->rc, dlock_permit_sem_acquire(w->sem, w->wait_ms,
                                                DLOCK_LEASE_WATCHDOG, w->id));
  atomic_store(&w->done, true);
  return NULL;
}

/* A waiting thread is woken by another client's release (its NOTIFY): the
 * clients' watchdog is 90 s, so a wait that only looked again on its own
 * bound (a third of it, 30 s) would not be done within 15 s. */
static void t_permit_wait_woken(void) {
  th_pg_t *s = th_pg_start();
  CHECK(s != NULL);
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_watchdog_timeout(o, 90000));
  dlock_client_t *c1 = NULL, *c2 = NULL;
  CHECK_OK(dlock_client_new(&c1, th_pg_url(s), o));
  CHECK_OK(dlock_client_new(&c2, th_pg_url(s), o));
  dlock_options_free(o);
  dlock_permit_sem_t *s1 = NULL, *s2 = NULL;
  CHECK_OK(dlock_permit_sem_new(c1, "woken", &s1));
  CHECK_OK(dlock_permit_sem_new(c2, "woken", &s2));
  CHECK_OK(dlock_permit_sem_try_set_permits(s1, 1, NULL));
  char id[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(dlock_permit_sem_acquire(s1, 0, DLOCK_LEASE_WATCHDOG, id));
  psem_waiter_t w = {.sem = s2, .wait_ms = 60000};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, psem_wait_main, &w) == 0);
  /* it waits (a bounded look: it must not get a permit on its own) */
  bool early;
  TH_WAIT_FOR(early, atomic_load(&w.done), 300);
  CHECK(!early);
  CHECK_OK(dlock_permit_sem_release(s1, id));
  bool done;
  TH_WAIT_FOR(done, atomic_load(&w.done), 15000);
  pthread_join(t, NULL);
  CHECKF(done, "the release did not wake the waiter");
  CHECK_OK(atomic_load(&w.rc));
  CHECK_OK(dlock_permit_sem_release(s2, w.id));
  printf("the waiter was woken by the release\n");
  dlock_permit_sem_free(s1);
  dlock_permit_sem_free(s2);
  dlock_client_free(c1);
  dlock_client_free(c2);
  th_pg_stop(s);
}

/* A server restart ends the holder's session: its permit is reported
 * lost, and a waiter of another client (whose listening connection went
 * too) rides the outage out and gets the permit. */
static void t_permit_restart(void) {
  th_pg_t *s = th_pg_start();
  CHECK(s != NULL);
  atomic_store(&g_lost, 0);
  dlock_client_t *a = client_for(th_pg_url(s)), *b = client_for(th_pg_url(s));
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
  CHECK_INT(th_pg_kill9(s), ==, 0);
  CHECK_INT(th_pg_up(s), ==, 0);
  bool lost, done;
  TH_WAIT_FOR(lost, atomic_load(&g_lost) >= 1, 30000);
  TH_WAIT_FOR(done, atomic_load(&w.done), 40000);
  pthread_join(t, NULL);
  CHECKF(lost, "the permit's loss was never reported");
  CHECK(done);
  CHECK_OK(atomic_load(&w.rc));
  CHECK_RC_IN(dlock_permit_sem_release(sa, id), DLOCK_ELOST, DLOCK_ENOTOWNER);
  CHECK_OK(dlock_permit_sem_release(sb, w.id));
  printf("the holder was told, the waiter got the permit after the restart\n");
  dlock_permit_sem_free(sa);
  dlock_permit_sem_free(sb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_pg_stop(s);
}

/* A holder process killed (its session ends at once) or frozen (the
 * server ends its idle session after the lease): its permit comes back to
 * a waiter. */
static void t_dead_permit_holder(void) {
  th_pg_t *s = th_pg_start();
  CHECK(s != NULL);
  for (int round = 0; round < 2; round++) {
    int fds[2];
    CHECK(pipe(fds) == 0);
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
      close(fds[0]);
      dlock_client_t *c = client_for(th_pg_url(s));
      dlock_permit_sem_t *sem = NULL;
      char id[DLOCK_PERMIT_ID_LEN + 1];
      if (dlock_permit_sem_new(c, "dead-holder", &sem) != 0 ||
          dlock_permit_sem_try_set_permits(sem, 1, NULL) != 0 ||
          dlock_permit_sem_acquire(sem, 0, DLOCK_LEASE_WATCHDOG, id) != 0)
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
    dlock_client_t *c = client_for(th_pg_url(s));
    dlock_permit_sem_t *sem = NULL;
    CHECK_OK(dlock_permit_sem_new(c, "dead-holder", &sem));
    char id[DLOCK_PERMIT_ID_LEN + 1];
    CHECK_RC(dlock_permit_sem_acquire(sem, 0, DLOCK_LEASE_WATCHDOG, id),
             DLOCK_EBUSY);
    CHECK(kill(pid, round == 0 ? SIGKILL : SIGSTOP) == 0);
    int rc = dlock_permit_sem_acquire(sem, 30000, DLOCK_LEASE_WATCHDOG, id);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    CHECK_OK(rc);
    printf("a %s holder's permit came back\n", round ? "frozen" : "killed");
    CHECK_OK(dlock_permit_sem_release(sem, id));
    dlock_permit_sem_free(sem);
    dlock_client_free(c);
  }
  th_pg_stop(s);
}

/* K = 2 permits never have more than two holders: 4 processes take and
 * give back permits, each counting itself in a shared page. */
static void t_permits_bound_processes(void) {
  enum { NPROC = 4, ITERS = 15 };
  th_pg_t *s = th_pg_start();
  CHECK(s != NULL);
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
      dlock_client_t *c = client_for(th_pg_url(s));
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
  th_pg_stop(s);
}

/* `dlock -N 2` on postgres://: two holders run at once, a third is
 * refused (exit 1 with -n), and a run with another limit is a usage
 * error (64) while the semaphore is in use. */
static void t_cli_limit(void) {
#ifndef DLOCK_CLI_PATH
  printf("this build has no dlock command\n");
#else
  th_pg_t *s = th_pg_start();
  CHECK(s != NULL);
  char dir[] = "/tmp/dlock-pgcli-XXXXXX";
  CHECK(mkdtemp(dir));
  char cmd[1400];
  pid_t bg[2];
  for (int i = 0; i < 2; i++) {
    snprintf(cmd, sizeof cmd,
             "exec " DLOCK_CLI_PATH " -u '%s' -N 2 cli-pool sh -c 'touch "
             "%s/in%d; while [ ! -e %s/stop ]; do sleep 0.05; done'",
             th_pg_url(s), dir, i, dir);
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
           th_pg_url(s));
  int st = system(cmd);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1);
  snprintf(cmd, sizeof cmd,
           DLOCK_CLI_PATH " -u '%s' -N 3 -n cli-pool true 2>/dev/null",
           th_pg_url(s));
  st = system(cmd);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 64);
  snprintf(cmd, sizeof cmd, DLOCK_CLI_PATH " -u '%s' --status -N 2 cli-pool",
           th_pg_url(s));
  st = system(cmd);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
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
           th_pg_url(s));
  CHECK_INT(system(cmd), ==, 0);
  printf("dlock -N 2: two ran at once, a third was refused (1), -N 3 was a "
         "usage error (64)\n");
  char rm[200];
  snprintf(rm, sizeof rm, "rm -rf %s", dir);
  CHECK_INT(system(rm), ==, 0);
  th_pg_stop(s);
#endif
}

/* ------------------------------------------- sent operations (async) */

typedef th_async_outcome_t sent_call_t;

/* One async acquire (wait_ms) or release of l as thread 77, run to its
 * callback by this thread, as an event-loop program does. */
static sent_call_t sent_one(dlock_client_t *c, dlock_lock_t *l, bool acquire,
                            int64_t wait_ms, int64_t lease_ms) {
  return th_async_one(c, l, 77, acquire, wait_ms, lease_ms);
}

/* An event-loop program's tries and releases go out from its own thread
 * and their answers are read by the client's loop: on a client warmed up
 * by one blocking pair, async pairs (re-entries, fenced tokens included)
 * start no thread at all, where a pool thread would run each of them
 * otherwise. Explicit leases: no watchdog thread starts meanwhile. */
static void t_sent_no_pool_thread(void) {
  th_pg_t *s = th_pg_start();
  CHECK(s != NULL);
  dlock_client_t *c = client_for(th_pg_url(s));
  dlock_lock_t *l = NULL, *f = NULL;
  CHECK_OK(dlock_lock_new(c, "sent-pairs", &l));
  CHECK_OK(dlock_lock_new_kind(c, "sent-fenced", DLOCK_FENCED, &f));
  int64_t last = 0;
  CHECK_OK(dlock_lock_acquire(l, 0, 30000));
  CHECK_OK(dlock_lock_release(l));
  CHECK_OK(dlock_lock_acquire_fenced(f, 0, 30000, &last));
  CHECK_OK(dlock_lock_release(f));
  int fd = -1;
  CHECK_OK(dlock_client_fd(c, &fd));
  int before = th_thread_count();
  enum { PAIRS = 20 };
  for (int i = 0; i < PAIRS; i++) {
    CHECK_OK(sent_one(c, l, true, 0, 30000).rc);
    CHECK_OK(sent_one(c, l, true, 0, 30000).rc); /* a re-entry */
    CHECK_INT(psql_try(s, "sent-pairs"), ==, 'f');
    CHECK_OK(sent_one(c, l, false, 0, 0).rc);
    CHECK_INT(psql_try(s, "sent-pairs"), ==, 'f'); /* still held once */
    CHECK_OK(sent_one(c, l, false, 0, 0).rc);
    sent_call_t a = sent_one(c, f, true, 0, 30000);
    CHECK_OK(a.rc);
    CHECKF(a.value > last, "token %lld after %lld", (long long)a.value,
           (long long)last);
    last = a.value;
    CHECK_OK(sent_one(c, f, false, 0, 0).rc);
  }
  int after = th_thread_count();
  CHECKF(after == before,
         "%d threads before %d async pairs, %d after: they took a pool "
         "thread",
         before, PAIRS * 3, after);
  CHECK_INT(psql_try(s, "sent-pairs"), ==, 't'); /* free after */
  CHECK_INT(psql_try(s, "sent-fenced"), ==, 't');
  printf("%d async pairs (re-entries and fenced tokens included), no thread "
         "started (%d before and after)\n",
         PAIRS * 3, before);
  dlock_lock_free(f);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_pg_stop(s);
}

/* Ends every dlock session of the server (psql's own spared), waiting for
 * each to end: "n" of them. */
static void terminate_sessions(th_pg_t *s, char *out, int cap) {
  const char *cmds[] = {
      "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM "
      "pg_stat_activity WHERE backend_type = 'client backend' AND pid <> "
      "pg_backend_pid()",
      NULL};
  CHECK_INT(th_pg_psql(s, cmds, out, cap), ==, 0);
}

/* Sent operations meet the server's faults as the blocking ones do: a
 * stopped server fails the try in flight with DLOCK_EIOTIMEOUT (its
 * session is closed, so it holds nothing once the server goes on); idle
 * connections the server ended (terminated, a restart) are replaced; a
 * hold whose session was ended is reported lost by its release; and
 * after each the lock works and is free. */
static void t_sent_faults(void) {
  th_pg_t *s = th_pg_start();
  CHECK(s != NULL);
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 10000)); /* SCRAM, slowed */
  CHECK_OK(dlock_options_set_command_timeout(o, 1000));
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new(&c, th_pg_url(s), o));
  dlock_options_free(o);
  dlock_lock_t *l = NULL;
  CHECK_OK(dlock_lock_new(c, "sent-faults", &l));
  CHECK_OK(sent_one(c, l, true, 0, 30000).rc);
  CHECK_OK(sent_one(c, l, false, 0, 0).rc);

  /* the server stops with the try in flight */
  CHECK_INT(th_pg_pause(s), ==, 0);
  sent_call_t a = sent_one(c, l, true, 0, 30000);
  CHECK_INT(th_pg_resume(s), ==, 0);
  CHECKF(a.rc == DLOCK_EIOTIMEOUT, "a try on a stopped server: %s (%s)",
         dlock_err_name(a.rc), a.detail);
  printf("a try on a stopped server: %s (%s)\n", dlock_err_name(a.rc),
         a.detail);
  /* its session ends as the server goes on: the lock comes free */
  CHECK_OK(sent_one(c, l, true, 20000, 30000).rc);
  CHECK_OK(sent_one(c, l, false, 0, 0).rc);
  CHECK_INT(psql_try(s, "sent-faults"), ==, 't');

  /* idle connections terminated between operations */
  char out[64];
  terminate_sessions(s, out, sizeof out);
  CHECKF(atoi(out) >= 1, "terminated: %s", out);
  CHECK_OK(sent_one(c, l, true, 0, 30000).rc);
  CHECK_INT(psql_try(s, "sent-faults"), ==, 'f');
  /* and the holding one: its release says the lock was lost */
  terminate_sessions(s, out, sizeof out);
  CHECK_RC(sent_one(c, l, false, 0, 0).rc, DLOCK_ELOST);
  CHECK_INT(psql_try(s, "sent-faults"), ==, 't');

  /* a restart between operations */
  CHECK_OK(sent_one(c, l, true, 0, 30000).rc);
  CHECK_OK(sent_one(c, l, false, 0, 0).rc);
  CHECK_INT(th_pg_kill9(s), ==, 0);
  CHECK_INT(th_pg_up(s), ==, 0);
  CHECK_OK(sent_one(c, l, true, 0, 30000).rc);
  CHECK_INT(psql_try(s, "sent-faults"), ==, 'f');
  CHECK_OK(sent_one(c, l, false, 0, 0).rc);
  CHECK_INT(psql_try(s, "sent-faults"), ==, 't');
  CHECK_INT(dlock_client_pending(c), ==, 0);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_pg_stop(s);
}

static const check_case_t cases[] = {
    {"psql_excludes_dlock", t_psql_excludes_dlock},
    {"dlock_excludes_psql", t_dlock_excludes_psql},
    {"read_side_with_psql", t_read_side_with_psql},
    {"statement_timeout_waits_on", t_statement_timeout_waits_on},
    {"multilock", t_multilock},
    {"frozen_holder_loses", t_frozen_holder_loses},
    {"restart_reports_lost", t_restart_reports_lost},
    {"terminated_session_told", t_terminated_session_told},
    {"fence_survives_restart", t_fence_survives_restart},
    {"bad_input", t_bad_input},
    {"permits_layout", t_permits_layout},
    {"permit_wait_woken", t_permit_wait_woken},
    {"dead_permit_holder", t_dead_permit_holder},
    {"permit_restart", t_permit_restart},
    {"permits_bound_processes", t_permits_bound_processes},
    {"cli_limit", t_cli_limit},
    {"sent_no_pool_thread", t_sent_no_pool_thread},
    {"sent_faults", t_sent_faults},
};

CHECK_MAIN(cases)
