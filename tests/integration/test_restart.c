/*
 * test_restart.c - the server goes away (stop, restart, kill -9, SIGSTOP)
 * while the client waits for or holds a lock.
 *
 * Design note: clients use small connect/command timeouts (500 ms) so every
 * call must come back within a small bound; each case asserts that bound
 * ("nothing hangs"), an error code from the documented set while the server
 * is away, and that the same client works again once the server is back.
 * A wait rides out an outage within its deadline and the client's outage
 * grace (the server back in time: the waiter gets the lock), and gives up
 * with the outage's error after it.
 * The harness restarts the server on the same port; without persistence a
 * restart empties it (the lock is gone), with AOF (appendfsync always) the
 * lock survives. Restarts are done from the main thread (harness rule);
 * waiters are background threads.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "itest.h"

#define WD DLOCK_LEASE_WATCHDOG
#define SMALL_MS 500

static dlock_client_t *grace_client(th_server_t *s, int64_t watchdog_ms,
                                    it_lost_t *lost, int64_t grace_ms) {
  it_client_cfg_t cfg = {.connect_ms = SMALL_MS,
                         .command_ms = SMALL_MS,
                         .watchdog_ms = watchdog_ms,
                         .outage_grace_ms = grace_ms,
                         .lost = lost ? it_lost_cb : NULL,
                         .lost_ud = lost};
  return it_client_cfg(s, &cfg);
}

static dlock_client_t *small_client(th_server_t *s, int64_t watchdog_ms,
                                    it_lost_t *lost) {
  return grace_client(s, watchdog_ms, lost, 0);
}

/* The client works again: PING answers within 5 s (a few failures on stale
 * connections are tolerated and reported). */
static void wait_client_back(dlock_client_t *c) {
  int fails = 0, rc = -1;
  int64_t end = th_now_ms() + 5000;
  for (int i = 0; i < 200 && th_now_ms() < end; i++) {
    rc = dlock_client_ping(c);
    if (rc == 0)
      break;
    fails++;
    th_sleep_ms(20);
  }
  if (fails)
    printf("note: %d ping(s) failed after the server came back (last %s)\n",
           fails, dlock_err_name(rc));
  CHECK_OK(rc);
}

/* After the fault: the client works again and L can be taken and given
 * back at once; then L, C and the server are freed. */
static void lock_works_again(th_server_t *s, dlock_client_t *c,
                             dlock_lock_t *l) {
  wait_client_back(c);
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

/* A lock held by a foreign owner for 30 s (Redisson layout). */
static void foreign_hold(th_server_t *s, const char *name) {
  CHECK_INT(th_redis_int(s, "HSET %s %s 1", name, "foreign-owner:1"), ==, 1);
  CHECK_INT(th_redis_int(s, "PEXPIRE %s 30000", name), ==, 1);
}

static void t_calls_while_down(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = small_client(s, 0, NULL);
  dlock_lock_t *l = it_lock(c, "down");
  CHECK_INT(th_server_down(s), ==, 0);
  int64_t t0 = th_now_ms();
  int rc = dlock_lock_acquire(l, 0, WD);
  int64_t took = th_now_ms() - t0;
  printf("acquire while down: %s after %lld ms (\"%s\")\n", dlock_err_name(rc),
         (long long)took, dlock_last_error());
  CHECK_RC_IN(rc, DLOCK_EUNAVAILABLE, DLOCK_EIOTIMEOUT);
  CHECK_INT(took, <, 2 * SMALL_MS + 1500);
  t0 = th_now_ms();
  rc = dlock_lock_acquire(l, 1000, WD);
  CHECK_RC_IN(rc, DLOCK_EUNAVAILABLE, DLOCK_EIOTIMEOUT);
  CHECK_INT(th_now_ms() - t0, <, 1000 + 2 * SMALL_MS + 1500);
  t0 = th_now_ms();
  CHECK_RC_IN(dlock_client_ping(c), DLOCK_EUNAVAILABLE, DLOCK_EIOTIMEOUT);
  bool b;
  CHECK_RC_IN(dlock_lock_is_locked(l, &b), DLOCK_EUNAVAILABLE,
              DLOCK_EIOTIMEOUT);
  CHECK_RC_IN(dlock_lock_release(l), DLOCK_ENOTOWNER, DLOCK_EUNAVAILABLE,
              DLOCK_EIOTIMEOUT);
  CHECK_INT(th_now_ms() - t0, <, 3 * (2 * SMALL_MS + 500));
  /* a new client is refused at creation */
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, SMALL_MS));
  dlock_client_t *c2 = (dlock_client_t *)&o; /* must be reset to NULL */
  CHECK_RC(dlock_client_new(&c2, s->url, o), DLOCK_EUNAVAILABLE);
  CHECK(c2 == NULL);
  dlock_options_free(o);

  CHECK_INT(th_server_up(s), ==, 0);
  lock_works_again(s, c, l);
}

static void t_restart_during_wait(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  foreign_hold(s, "rwait");
  dlock_client_t *c = small_client(s, 0, NULL);
  dlock_lock_t *l = it_lock(c, "rwait");
  it_async_t w;
  it_async_start(&w, l, 4000, WD, false);
  CHECK(it_wait_subscribers(s, "rwait", 1, 5000));
  int64_t t0 = th_now_ms();
  CHECK_INT(th_server_restart(s), ==, 0); /* the restart empties it */
  printf("server restarted in %lld ms\n", (long long)(th_now_ms() - t0));
  CHECKF(it_async_wait(&w, 4000 + 2 * SMALL_MS + 2000),
         "waiter hung after a server restart");
  printf("waiter returned %s %lld ms after the restart began (\"%s\")\n",
         dlock_err_name(w.rc), (long long)(w.t_done - t0), w.err);
  /* Either the wait saw the connection drop (an error at once) or it
   * retried after the pub/sub reconnect and found the lock free; it must
   * not sleep until its deadline. */
  CHECK_RC_IN(w.rc, DLOCK_OK, DLOCK_EUNAVAILABLE, DLOCK_EIOTIMEOUT);
  CHECK_INT(w.t_done - w.t_start, <, 4000 - 200);
  int rel = it_async_finish(&w);
  if (w.rc == DLOCK_OK)
    CHECK_OK(rel);
  lock_works_again(s, c, l);
}

static void t_down_during_wait(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  foreign_hold(s, "dwait");
  dlock_client_t *c = small_client(s, 0, NULL);
  dlock_lock_t *l = it_lock(c, "dwait");
  it_async_t w;
  it_async_start(&w, l, 3000, WD, false);
  CHECK(it_wait_subscribers(s, "dwait", 1, 5000));
  CHECK_INT(th_server_down(s), ==, 0);
  CHECKF(it_async_wait(&w, 3000 + 2 * SMALL_MS + 2000),
         "waiter hung with the server down");
  printf("waiter returned %s after %lld ms (\"%s\")\n", dlock_err_name(w.rc),
         (long long)(w.t_done - w.t_start), w.err);
  CHECK_RC_IN(w.rc, DLOCK_EUNAVAILABLE, DLOCK_EIOTIMEOUT, DLOCK_ETIMEDOUT);
  CHECK_INT(it_async_finish(&w), ==, -999);
  CHECK_INT(th_server_up(s), ==, 0);
  lock_works_again(s, c, l);
}

/* The server goes down for about a second under a waiter (a restart, a
 * failover): the wait rides it out and gets the lock, which the restart
 * emptied; the outage is no error to its caller. */
static void t_wait_rides_out_outage(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  foreign_hold(s, "owait");
  dlock_client_t *c = small_client(s, 0, NULL);
  dlock_lock_t *l = it_lock(c, "owait");
  it_async_t w;
  it_async_start(&w, l, 20000, WD, false);
  CHECK(it_wait_subscribers(s, "owait", 1, 5000));
  int64_t t0 = th_now_ms();
  CHECK_INT(th_server_down(s), ==, 0);
  /* the waiter saw the outage (its pub/sub connection broke, its attempts
   * were refused) and is still waiting */
  th_sleep_ms(1000);
  CHECKF(!atomic_load(&w.done), "the wait ended in the outage: %s (\"%s\")",
         dlock_err_name(w.rc), w.err);
  CHECK_INT(th_server_up(s), ==, 0); /* empty: the foreign hold is gone */
  CHECKF(it_async_wait(&w, 20000), "waiter hung after the server came back");
  printf("waiter returned %s %lld ms after the server went down (\"%s\")\n",
         dlock_err_name(w.rc), (long long)(w.t_done - t0), w.err);
  CHECK_RC(w.rc, DLOCK_OK);
  CHECK_OK(it_async_finish(&w));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

/* A semaphore waiter rides out an outage in which its attempts are refused
 * (it starts with the server down): it gets the permit added once the
 * server is back. (An attempt whose connection broke after it went out
 * would end the wait: a semaphore attempt cannot be repeated safely.) */
typedef struct sem_waiter {
  dlock_semaphore_t *sem;
  atomic_int done;
  int rc;
  char err[256];
} sem_waiter;

static void *sem_wait_main(void *arg) {
  sem_waiter *w = arg;
  w->rc = dlock_semaphore_acquire(w->sem, 1, 20000);
  snprintf(w->err, sizeof w->err, "%s", dlock_last_error());
  atomic_store(&w->done, 1);
  return NULL;
}

static void t_semaphore_wait_rides_out_outage(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = small_client(s, 0, NULL);
  sem_waiter w = {0};
  CHECK_OK(dlock_semaphore_new(c, "osem", &w.sem));
  CHECK_INT(th_server_down(s), ==, 0);
  pthread_t th;
  CHECK_INT(pthread_create(&th, NULL, sem_wait_main, &w), ==, 0);
  th_sleep_ms(1000);
  CHECKF(!atomic_load(&w.done), "the wait ended in the outage: %s (\"%s\")",
         dlock_err_name(w.rc), w.err);
  CHECK_INT(th_server_up(s), ==, 0);
  wait_client_back(c);
  CHECK_OK(dlock_semaphore_add_permits(w.sem, 1));
  pthread_join(th, NULL);
  printf("semaphore waiter returned %s (\"%s\")\n", dlock_err_name(w.rc),
         w.err);
  CHECK_RC(w.rc, DLOCK_OK);
  CHECK_OK(dlock_semaphore_release(w.sem, 1));
  dlock_semaphore_free(w.sem);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_kill9_during_wait(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  foreign_hold(s, "kwait");
  dlock_client_t *c = grace_client(s, 0, NULL, 1500);
  dlock_lock_t *l = it_lock(c, "kwait");
  it_async_t w;
  it_async_start(&w, l, DLOCK_WAIT_FOREVER, WD, false);
  CHECK(it_wait_subscribers(s, "kwait", 1, 5000));
  int64_t t0 = th_now_ms();
  CHECK_INT(th_server_kill9(s), ==, 0);
  /* a wait without deadline does not hide a dead backend: it gives up
   * when the outage outlasts the client's outage grace (1.5 s here) */
  CHECKF(it_async_wait(&w, 10000),
         "wait-forever acquire still blocked 10 s after kill -9");
  printf("waiter returned %s %lld ms after kill -9 (\"%s\")\n",
         dlock_err_name(w.rc), (long long)(w.t_done - t0), w.err);
  CHECK_RC_IN(w.rc, DLOCK_EUNAVAILABLE, DLOCK_EIOTIMEOUT);
  CHECK_INT(it_async_finish(&w), ==, -999);
  CHECK_INT(th_server_up(s), ==, 0);
  lock_works_again(s, c, l);
}

static void t_restart_during_hold(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_lost_t lost;
  it_lost_init(&lost);
  dlock_client_t *c = small_client(s, 600, &lost);
  dlock_lock_t *l = it_lock(c, "rhold");
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  int64_t t0 = th_now_ms();
  CHECK_INT(th_server_restart(s), ==, 0); /* the lock is gone with the data */
  CHECKF(it_lost_wait(&lost, 1, 5000),
         "no lost callback within 5 s of a restart that lost the lock");
  pthread_mutex_lock(&lost.mu);
  printf("lost callback (reason %d) %lld ms after the restart began\n",
         (int)lost.reason, (long long)(lost.at_ms - t0));
  CHECK(lost.reason == DLOCK_LOST_GONE ||
        lost.reason == DLOCK_LOST_UNREACHABLE);
  CHECK_STR(lost.name, "rhold");
  pthread_mutex_unlock(&lost.mu);
  t0 = th_now_ms();
  CHECK_RC(dlock_lock_release(l), DLOCK_ELOST);
  CHECK_INT(th_now_ms() - t0, <, 2 * SMALL_MS + 1500);
  wait_client_back(c);
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_OK(dlock_lock_release(l));
  CHECK_INT(it_lost_count(&lost), ==, 1);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_down_during_hold(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_lost_t lost;
  it_lost_init(&lost);
  dlock_client_t *c = small_client(s, 600, &lost);
  dlock_lock_t *l = it_lock(c, "dhold");
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  int64_t t0 = th_now_ms();
  CHECK_INT(th_server_down(s), ==, 0);
  /* unreachable for longer than the lease: the hold is reported lost */
  CHECKF(it_lost_wait(&lost, 1, 600 + 2 * SMALL_MS + 3000),
         "no lost callback while the server stayed down past the lease");
  pthread_mutex_lock(&lost.mu);
  printf("lost callback (reason %d) %lld ms after the server went down\n",
         (int)lost.reason, (long long)(lost.at_ms - t0));
  CHECK_INT(lost.reason, ==, DLOCK_LOST_UNREACHABLE);
  CHECK_STR(lost.name, "dhold");
  pthread_mutex_unlock(&lost.mu);
  t0 = th_now_ms();
  int rc = dlock_lock_release(l);
  printf("release while down: %s\n", dlock_err_name(rc));
  CHECK_RC_IN(rc, DLOCK_ELOST, DLOCK_EUNAVAILABLE, DLOCK_EIOTIMEOUT);
  CHECK_INT(th_now_ms() - t0, <, 2 * SMALL_MS + 1500);
  CHECK_INT(th_server_up(s), ==, 0);
  wait_client_back(c);
  if (rc != DLOCK_ELOST) /* the hold was not forgotten yet */
    CHECK_RC(dlock_lock_release(l), DLOCK_ELOST);
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  int64_t n = 0;
  CHECK_OK(dlock_lock_hold_count(l, &n));
  CHECK_INT(n, ==, 1);
  CHECK_OK(dlock_lock_release(l));
  CHECK(!it_exists(s, "dhold"));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_hold_survives_aof_restart(void) {
  const char *conf[] = {"appendonly yes", "appendfsync always", NULL};
  th_server_t *s = th_server_start(conf);
  CHECK(s);
  it_lost_t lost;
  it_lost_init(&lost);
  dlock_client_t *c = small_client(s, 3000, &lost);
  dlock_lock_t *l = it_lock(c, "aof");
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  char owner[128];
  it_owner(c, dlock_thread_id(), owner, sizeof owner);
  CHECK_INT(th_server_restart(s), ==, 0);
  CHECK_INT(it_hget_int(s, "aof", owner), ==, 1);
  /* the renewer keeps renewing on the restarted server */
  CHECK_INT(th_redis_int(s, "PTTL aof"), >, 0);
  CHECKF(it_wait_renewed(s, "aof", 4000),
         "no renewal within 4 s after the restart");
  CHECK_INT(it_lost_count(&lost), ==, 0);
  int64_t n = 0;
  CHECK_OK(dlock_lock_hold_count(l, &n));
  CHECK_INT(n, ==, 1);
  CHECK_OK(dlock_lock_release(l));
  CHECK(!it_exists(s, "aof"));
  CHECK_INT(it_lost_count(&lost), ==, 0);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_paused_server(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_client_cfg_t cfg = {.connect_ms = 300, .command_ms = 300};
  dlock_client_t *c = it_client_cfg(s, &cfg);
  dlock_lock_t *l = it_lock(c, "paused"), *l2 = it_lock(c, "other");
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_INT(th_server_pause(s), ==, 0);
  int64_t t0 = th_now_ms();
  int rc = dlock_client_ping(c);
  int64_t took = th_now_ms() - t0;
  printf("ping to a stopped server: %s after %lld ms\n", dlock_err_name(rc),
         (long long)took);
  CHECK_RC(rc, DLOCK_EIOTIMEOUT);
  CHECK_INT(took, >=, 250);
  CHECK_INT(took, <, 300 + 1500);
  t0 = th_now_ms();
  CHECK_RC(dlock_lock_acquire(l2, 0, WD), DLOCK_EIOTIMEOUT);
  CHECK_INT(th_now_ms() - t0, <, 300 + 1500);
  CHECK_INT(th_server_resume(s), ==, 0);
  /* Late replies to the timed-out commands must not be taken for the
   * answers to the next ones. */
  wait_client_back(c);
  bool b = false;
  CHECK_OK(dlock_lock_is_held_by_thread(l, &b));
  CHECK(b);
  /* The timed-out acquire was sent: the server may have run it once it
   * woke up. Its outcome is unknown to the caller, who can find out (the
   * queries report the server's truth) and release it. */
  CHECK_OK(dlock_lock_is_held_by_thread(l2, &b));
  if (b) {
    printf("note: the timed-out acquire took effect when the server woke\n");
    int64_t n2 = 0;
    CHECK_OK(dlock_lock_hold_count(l2, &n2));
    CHECK_INT(n2, ==, 1);
    CHECK_OK(dlock_lock_release(l2));
  }
  CHECK_OK(dlock_lock_is_locked(l2, &b));
  CHECK(!b);
  int64_t n = 0;
  CHECK_OK(dlock_lock_hold_count(l, &n));
  CHECK_INT(n, ==, 1);
  CHECK_OK(dlock_lock_release(l));
  CHECK_OK(dlock_lock_acquire(l2, 0, WD));
  CHECK_OK(dlock_lock_release(l2));
  CHECK_INT(it_lock_keys(s), ==, 0);
  dlock_lock_free(l);
  dlock_lock_free(l2);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_connect_to_paused_server(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  CHECK_INT(th_server_pause(s), ==, 0);
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 300));
  CHECK_OK(dlock_options_set_command_timeout(o, 300));
  dlock_client_t *c = (dlock_client_t *)o;
  int64_t t0 = th_now_ms();
  int rc = dlock_client_new(&c, s->url, o);
  int64_t took = th_now_ms() - t0;
  printf("client_new to a stopped server: %s after %lld ms\n",
         dlock_err_name(rc), (long long)took);
  CHECK_RC_IN(rc, DLOCK_EIOTIMEOUT, DLOCK_EUNAVAILABLE);
  CHECK(c == NULL);
  CHECK_INT(took, <, 300 + 1500);
  CHECK_INT(th_server_resume(s), ==, 0);
  CHECK_OK(dlock_client_new(&c, s->url, o));
  CHECK_OK(dlock_client_ping(c));
  dlock_client_free(c);
  dlock_options_free(o);
  th_server_stop(s);
}

/* A pause shorter than the lease (renewals time out meanwhile) must not
 * lose the hold. */
static void t_brief_pause_keeps_hold(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_lost_t lost;
  it_lost_init(&lost);
  dlock_client_t *c = small_client(s, 3000, &lost);
  dlock_lock_t *l = it_lock(c, "brief");
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_INT(th_server_pause(s), ==, 0);
  th_sleep_ms(1200); /* the scenario: over one renewal interval, < lease */
  CHECK_INT(th_server_resume(s), ==, 0);
  int64_t p1 = th_redis_int(s, "PTTL brief");
  CHECKF(p1 > 0, "hold gone after a 1.2 s pause (PTTL %lld)", (long long)p1);
  CHECKF(it_wait_renewed(s, "brief", 3000),
         "no renewal within 3 s after the pause");
  CHECK_INT(it_lost_count(&lost), ==, 0);
  CHECK_OK(dlock_lock_release(l));
  CHECK(!it_exists(s, "brief"));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

/* A release that timed out against a stopped server is retried once the
 * server is back: it must count once, not twice, whether or not the first
 * attempt ran (test_faults.release_reply_lost makes it run for sure). */
static void t_release_retry_is_idempotent(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_client_cfg_t cfg = {.connect_ms = 300, .command_ms = 300};
  dlock_client_t *c = it_client_cfg(s, &cfg);
  dlock_lock_t *l = it_lock(c, "idem");
  char owner[128];
  it_owner(c, dlock_thread_id(), owner, sizeof owner);
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_INT(it_hget_int(s, "idem", owner), ==, 2);
  CHECK_INT(th_server_pause(s), ==, 0);
  int rc = dlock_lock_release(l);
  CHECK_INT(th_server_resume(s), ==, 0);
  printf("release to a stopped server: %s\n", dlock_err_name(rc));
  CHECK_RC(rc, DLOCK_EIOTIMEOUT);
  /* the server runs the queued first attempt when it wakes up */
  bool applied;
  TH_WAIT_FOR(applied, it_hget_int(s, "idem", owner) == 1, 2000);
  printf("first attempt %s on the server\n",
         applied ? "took effect" : "did not take effect");
  /* the retry must not count again */
  CHECK_OK(dlock_lock_release(l));
  CHECK_INT(it_hget_int(s, "idem", owner), ==, 1);
  int64_t n = 0;
  CHECK_OK(dlock_lock_hold_count(l, &n));
  CHECK_INT(n, ==, 1);
  CHECK_OK(dlock_lock_release(l));
  CHECK(!it_exists(s, "idem"));
  CHECK_RC(dlock_lock_release(l), DLOCK_ENOTOWNER);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static const check_case_t cases[] = {
    {"calls_while_down", t_calls_while_down},
    {"restart_during_wait", t_restart_during_wait},
    {"down_during_wait", t_down_during_wait},
    {"kill9_during_wait", t_kill9_during_wait},
    {"wait_rides_out_outage", t_wait_rides_out_outage},
    {"semaphore_wait_rides_out_outage", t_semaphore_wait_rides_out_outage},
    {"restart_during_hold", t_restart_during_hold},
    {"down_during_hold", t_down_during_hold},
    {"hold_survives_aof_restart", t_hold_survives_aof_restart},
    {"paused_server", t_paused_server},
    {"connect_to_paused_server", t_connect_to_paused_server},
    {"brief_pause_keeps_hold", t_brief_pause_keeps_hold},
    {"release_retry_is_idempotent", t_release_retry_is_idempotent},
};

CHECK_MAIN(cases)
