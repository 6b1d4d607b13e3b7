/*
 * test_postgres.c - the PostgreSQL backend against a private server.
 *
 * Design note: each case starts its own server (tests/harness/pg.c) and
 * asserts what a user sees: psql and dlock exclude each other on the same
 * advisory lock (the one-liner of docs/POSTGRES.md), a frozen holder's
 * session is ended by the server once its lease passes (the next waiter
 * gets the lock), a server restart is reported as a loss, and bad input
 * gets one clear line. Every wait is bounded.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "check.h"
#include "harness.h"
#include "pg.h"

#include <dlock/dlock.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
};

CHECK_MAIN(cases)
