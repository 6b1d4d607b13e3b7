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
 * (not at its next heartbeat), and bad input gets one clear line. Every wait is
 * bounded. Without mariadbd every case exits 77 (skipped).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "check.h"
#include "harness.h"
#include "mysql.h"

#include <dlock/dlock.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
  th_my_stop(s);
}

static const check_case_t cases[] = {
    {"client_excludes_dlock", t_client_excludes_dlock},
    {"kinds", t_kinds},
    {"frozen_holder_loses", t_frozen_holder_loses},
    {"terminated_session_told", t_terminated_session_told},
    {"bad_input", t_bad_input},
};

CHECK_MAIN(cases)
