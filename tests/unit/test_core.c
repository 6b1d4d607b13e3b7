/*
 * test_core.c - the core's own behaviour on an in-memory backend
 * (fake_backend.h): the session loss clock, waits and their deadlines,
 * without any server; and the idle connection pool of the session-lock
 * backends (core/idle.h), on tokens for connections and given times.
 *
 * Design note: every case uses the public API for what a user does and
 * sees (acquire, release, hold validity, lost callbacks, who gets a lock)
 * and the fake's controls for what a service would report (a confirmed
 * bound, a live connection, a new session, an expiry it announced). Waits
 * for an outcome are bounded; no case asserts how long something took:
 * each checks an outcome that the order of events decides (a loss that
 * must come, one that must not while the clock is paused or extended, the
 * session id the backend is told). Linked against the static library,
 * whose internal up-calls the fake makes.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "check.h"
#include "core/clock.h"
#include "core/idle.h"
#include "fake_backend.h"
#include "harness.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

typedef struct lost_rec {
  _Atomic int n;
  _Atomic int reason;
} lost_rec;

static void on_lost(void *ud, const char *name, uint64_t tid,
                    dlock_lost_reason_t reason) {
  (void)name;
  (void)tid;
  lost_rec *r = ud;
  atomic_store(&r->reason, (int)reason);
  atomic_fetch_add(&r->n, 1);
}

static dlock_lock_t *lock_on(dlock_client_t *c, const char *name) {
  dlock_lock_t *l = NULL;
  CHECK_OK(dlock_lock_new(c, name, &l));
  return l;
}

/* Waits up to 10 s for a first loss report. */
static bool lost_within(lost_rec *r) {
  bool ok = false;
  TH_WAIT_FOR(ok, atomic_load(&r->n) > 0, 10000);
  return ok;
}

/* The session's bound passes with no new confirmation: the hold is
 * reported lost (once, as a session loss), hold_valid and release say so,
 * the backend is told which session ended, and another client can take
 * the lock. */
static void t_session_bound_passes(void) {
  lost_rec rec = {0};
  dlock_client_t *a = fake_client("bound", 60000, on_lost, &rec);
  dlock_client_t *b = fake_client("bound", 60000, NULL, NULL);
  CHECK(a && b);
  fake_be *fa = fake_of(a);
  fake_new_session(fa); /* no bound yet: the clock waits for one */
  int64_t sid = fake_sid(fa);
  dlock_lock_t *la = lock_on(a, "x"), *lb = lock_on(b, "x");
  CHECK_OK(dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_RC(dlock_lock_acquire(lb, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  /* the only proof, past already less the margin (5% of 60 s) */
  fake_confirm(fa, th_now_ms() + 200);
  CHECK(lost_within(&rec));
  CHECK_INT(atomic_load(&rec.reason), ==, DLOCK_LOST_SESSION);
  int64_t v = 0;
  CHECK_RC(dlock_lock_hold_valid(la, dlock_thread_id(), &v), DLOCK_ELOST);
  int64_t told = 0;
  bool ok = false;
  TH_WAIT_FOR(ok, fake_expired_calls(fa, &told) == 1, 10000);
  CHECK(ok);
  CHECK_INT(told, ==, sid);
  CHECK_RC(dlock_lock_release(la), DLOCK_ELOST);
  CHECK_OK(dlock_lock_acquire(lb, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(lb));
  th_sleep_ms(100);
  CHECK_INT(atomic_load(&rec.n), ==, 1); /* reported once */
  CHECK_INT(fake_expired_calls(fa, NULL), ==, 1);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
}

/* While a live connection vouches for the session, a bound in the past
 * costs nothing; once the connection drops, the clock runs and the loss
 * comes. */
static void t_link_pauses_clock(void) {
  lost_rec rec = {0};
  dlock_client_t *a = fake_client("link", 60000, on_lost, &rec);
  CHECK(a);
  fake_be *fa = fake_of(a);
  fake_new_session(fa); /* no bound yet */
  fake_link(fa, true);
  dlock_lock_t *la = lock_on(a, "x");
  CHECK_OK(dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG));
  fake_confirm(fa, th_now_ms() + 50);
  th_sleep_ms(500); /* well past the bound: the link vouches */
  CHECK_INT(atomic_load(&rec.n), ==, 0);
  CHECK_INT(fake_expired_calls(fa, NULL), ==, 0);
  fake_link(fa, false);
  CHECK(lost_within(&rec));
  CHECK_RC(dlock_lock_release(la), DLOCK_ELOST);
  dlock_lock_free(la);
  dlock_client_free(a);
}

/* A dropped link runs the clock to the bound its own rule gives, not to
 * the confirmed one, either way; a hold's validity keeps to what answers
 * proved (a link's rule assumes the process ran all along, which a
 * stopped process cannot know). */
static void t_drop_grace(void) {
  lost_rec rec = {0};
  dlock_client_t *a = fake_client("grace", 60000, on_lost, &rec);
  CHECK(a);
  fake_be *fa = fake_of(a);
  dlock_lock_t *la = lock_on(a, "x");
  fake_new_session(fa);
  fake_link(fa, true);
  CHECK_OK(dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG));
  /* proven long ago (lapsed less the 3 s margin); the drop's rule gives
   * ten minutes: no loss yet, but the hold is not vouched for */
  fake_confirm(fa, th_now_ms() + 100);
  fake_drop(fa, th_now_ms() + 600000);
  th_sleep_ms(300);
  CHECK_INT(atomic_load(&rec.n), ==, 0);
  int64_t v = 0;
  CHECK_RC(dlock_lock_hold_valid(la, dlock_thread_id(), &v), DLOCK_ELOST);
  CHECK_INT(v, <=, 0);
  /* linked again, then dropped with a rule already past: lost, however
   * far the confirmed bound */
  fake_link(fa, true);
  fake_confirm(fa, th_now_ms() + 600000);
  CHECK_OK(dlock_lock_hold_valid(la, dlock_thread_id(), &v));
  fake_drop(fa, th_now_ms() + 100);
  CHECK(lost_within(&rec));
  CHECK_RC(dlock_lock_release(la), DLOCK_ELOST);
  dlock_lock_free(la);
  dlock_client_free(a);
}

/* A later confirmation moves the bound on; one about an earlier session
 * is ignored. */
static void t_confirmations(void) {
  lost_rec rec = {0};
  dlock_client_t *a = fake_client("confirm", 60000, on_lost, &rec);
  CHECK(a);
  fake_be *fa = fake_of(a);
  dlock_lock_t *la = lock_on(a, "x");
  fake_new_session(fa); /* no bound yet */
  CHECK_OK(dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG));
  /* the clock keeps a margin of 5% of the 60 s session (3 s): this first
   * bound stops vouching 2 s from now */
  int64_t now = th_now_ms();
  fake_confirm(fa, now + 5000);
  fake_confirm(fa, now + 600000); /* extends */
  fake_confirm(fa, now + 100);    /* earlier: proves less, changes nothing */
  th_sleep_ms(2500);
  CHECK_INT(atomic_load(&rec.n), ==, 0);
  int64_t v = 0;
  CHECK_OK(dlock_lock_hold_valid(la, dlock_thread_id(), &v));
  CHECK_INT(v, >, 60000);
  CHECK_OK(dlock_lock_release(la));
  /* the next session's only bound is short: a far one about the session
   * before must not keep it */
  int64_t prev = fake_new_session(fa);
  CHECK_OK(dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG));
  fake_confirm_sid(fa, prev, th_now_ms() + 600000);
  fake_confirm(fa, th_now_ms() + 200);
  CHECKF(lost_within(&rec),
         "a confirmation about an earlier session kept the new one");
  dlock_lock_free(la);
  dlock_client_free(a);
}

/* The service itself announces the end of the session: every hold is
 * lost at once, whatever bound was confirmed, and a new session serves
 * again. */
static void t_service_ends_session(void) {
  lost_rec rec = {0};
  dlock_client_t *a = fake_client("ends", 60000, on_lost, &rec);
  CHECK(a);
  fake_be *fa = fake_of(a);
  dlock_lock_t *la = lock_on(a, "x");
  CHECK_OK(dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG));
  fake_confirm(fa, th_now_ms() + 600000);
  fake_service_ends_session(fa);
  CHECK(lost_within(&rec));
  int64_t v = 0;
  CHECK_RC(dlock_lock_hold_valid(la, dlock_thread_id(), &v), DLOCK_ELOST);
  CHECK_INT(fake_expired_calls(fa, NULL), ==, 0); /* not the clock's */
  fake_new_session(fa);
  fake_confirm(fa, th_now_ms() + 600000);
  CHECK_OK(dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_hold_valid(la, dlock_thread_id(), &v));
  CHECK_OK(dlock_lock_release(la));
  dlock_lock_free(la);
  dlock_client_free(a);
}

typedef struct waiter {
  dlock_lock_t *l;
  int64_t wait_ms;
  _Atomic int rc;
  _Atomic bool done;
} waiter;

static void *waiter_main(void *arg) {
  waiter *w = arg;
  int rc = dlock_lock_acquire(w->l, w->wait_ms, DLOCK_LEASE_WATCHDOG);
  atomic_store(&w->rc, rc);
  if (rc == 0)
    dlock_lock_release(w->l);
  atomic_store(&w->done, true);
  return NULL;
}

/* A waiter sleeps while the lock is held and gets it when the holder
 * releases it; a waiter whose deadline passes first gets DLOCK_ETIMEDOUT
 * and leaves nothing behind. */
static void t_wait_woken_or_times_out(void) {
  dlock_client_t *a = fake_client("wait", 60000, NULL, NULL);
  dlock_client_t *b = fake_client("wait", 60000, NULL, NULL);
  CHECK(a && b);
  dlock_lock_t *la = lock_on(a, "x"), *lb = lock_on(b, "x");
  CHECK_OK(dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG));
  waiter w = {.l = lb, .wait_ms = 200};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, waiter_main, &w) == 0);
  pthread_join(t, NULL);
  CHECK_RC(atomic_load(&w.rc), DLOCK_ETIMEDOUT);
  w = (waiter){.l = lb, .wait_ms = 30000};
  CHECK(pthread_create(&t, NULL, waiter_main, &w) == 0);
  th_sleep_ms(100);
  CHECK(!atomic_load(&w.done)); /* the lock is held: it waits */
  CHECK_OK(dlock_lock_release(la));
  bool ok = false;
  TH_WAIT_FOR(ok, atomic_load(&w.done), 10000);
  CHECK(ok);
  pthread_join(t, NULL);
  CHECK_RC(atomic_load(&w.rc), DLOCK_OK);
  CHECK_OK(dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(la));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
}

/* A wait rides out an outage in which its attempts send nothing (the
 * backoff of dlock__wait_retry) and gets the free lock once the server
 * answers; a failure whose outcome is unknown ends the wait at once, as
 * does any failure of an acquire that does not wait. */
static void t_wait_rides_out_outage(void) {
  dlock_client_t *a = fake_client("outage", 60000, NULL, NULL);
  CHECK(a);
  fake_be *b = fake_of(a);
  dlock_lock_t *l = lock_on(a, "x");
  fake_fail_attempts(b, 3, true);
  int before = fake_attempts(b);
  CHECK_OK(dlock_lock_acquire(l, 30000, DLOCK_LEASE_WATCHDOG));
  CHECK(fake_attempts(b) - before == 4); /* three failed, the fourth got it */
  CHECK_OK(dlock_lock_release(l));
  fake_fail_attempts(b, 1, false);
  before = fake_attempts(b);
  CHECK_RC(dlock_lock_acquire(l, 30000, DLOCK_LEASE_WATCHDOG),
           DLOCK_EUNAVAILABLE);
  CHECK(fake_attempts(b) - before == 1);
  fake_fail_attempts(b, 1, true);
  CHECK_RC(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EUNAVAILABLE);
  fake_fail_attempts(b, 0, false);
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(a);
}

/* ------------------------------------------------------------ async */

typedef struct outcome {
  int calls, rc;
} outcome;

static void on_done(void *ud, int rc, int64_t value) {
  (void)value;
  outcome *o = ud;
  o->calls++;
  o->rc = rc;
}

/* Runs callbacks until `pending` is 0 or 20 s pass. */
static bool drain(dlock_client_t *c) {
  int fd = -1;
  CHECK_OK(dlock_client_fd(c, &fd));
  int64_t deadline = th_now_ms() + 20000;
  while (dlock_client_pending(c) > 0 && th_now_ms() < deadline) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 100) > 0)
      CHECK(dlock_client_process(c) >= 0);
  }
  return dlock_client_pending(c) == 0;
}

#define ASYNC_WAITERS 300

/* Many async waiters on a held lock park without polling the backend:
 * those with a short wait end by their timers (DLOCK_ETIMEDOUT), the
 * cancelled ones with DLOCK_ECANCELED, each callback once; then one more
 * gets the lock when it is released. */
static void t_async_park_time_cancel(void) {
  dlock_client_t *a = fake_client("async", 60000, NULL, NULL);
  dlock_client_t *b = fake_client("async", 60000, NULL, NULL);
  CHECK(a && b);
  dlock_lock_t *la = lock_on(a, "x"), *lb = lock_on(b, "x");
  CHECK_OK(dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG));
  static outcome o[ASYNC_WAITERS];
  static dlock_op_t op[ASYNC_WAITERS];
  memset(o, 0, sizeof o);
  int before = fake_attempts(fake_of(b));
  for (int i = 0; i < ASYNC_WAITERS; i++)
    CHECK_OK(dlock_lock_acquire_async(
        lb, 100 + (uint64_t)i, i % 2 ? 100 + i : DLOCK_WAIT_FOREVER,
        DLOCK_LEASE_WATCHDOG, on_done, &o[i], &op[i]));
  CHECK_INT(dlock_client_pending(b), ==, ASYNC_WAITERS);
  for (int i = 0; i < ASYNC_WAITERS; i += 2)
    CHECK_OK(dlock_op_cancel(b, op[i]));
  CHECK(drain(b));
  for (int i = 0; i < ASYNC_WAITERS; i++) {
    CHECK_INT(o[i].calls, ==, 1);
    CHECK_RC(o[i].rc, i % 2 ? DLOCK_ETIMEDOUT : DLOCK_ECANCELED);
  }
  /* parked, not polling: a few attempts each at most (a first one, and
   * one after arming), whatever the time they waited */
  int attempts = fake_attempts(fake_of(b)) - before;
  CHECKF(attempts <= 3 * ASYNC_WAITERS, "%d attempts by %d waiters", attempts,
         ASYNC_WAITERS);
  outcome got = {0};
  CHECK_OK(dlock_lock_acquire_async(lb, 7, 30000, DLOCK_LEASE_WATCHDOG, on_done,
                                    &got, NULL));
  th_sleep_ms(50);
  CHECK_INT(got.calls, ==, 0);
  CHECK_OK(dlock_lock_release(la));
  CHECK(drain(b));
  CHECK_INT(got.calls, ==, 1);
  CHECK_OK(got.rc);
  CHECK_OK(dlock_lock_release_as(lb, 7));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
}

/* An async wait takes the same steps as a blocking one: it rides out an
 * outage whose attempts send nothing (three failed, the fourth got it),
 * and ends at once on one of unknown outcome. */
static void t_async_rides_out_outage(void) {
  dlock_client_t *a = fake_client("async-outage", 60000, NULL, NULL);
  CHECK(a);
  fake_be *b = fake_of(a);
  dlock_lock_t *l = lock_on(a, "x");
  fake_fail_attempts(b, 3, true);
  int before = fake_attempts(b);
  outcome o = {0};
  CHECK_OK(dlock_lock_acquire_async(l, 0, 30000, DLOCK_LEASE_WATCHDOG, on_done,
                                    &o, NULL));
  CHECK(drain(a));
  CHECK_OK(o.rc);
  CHECK(fake_attempts(b) - before == 4);
  CHECK_OK(dlock_lock_release(l));
  fake_fail_attempts(b, 1, false);
  o = (outcome){0};
  CHECK_OK(dlock_lock_acquire_async(l, 0, 30000, DLOCK_LEASE_WATCHDOG, on_done,
                                    &o, NULL));
  CHECK(drain(a));
  CHECK_RC(o.rc, DLOCK_EUNAVAILABLE);
  dlock_lock_free(l);
  dlock_client_free(a);
}

/* ------------------------------------------------------------ idle pool */

/* The pool's connections are tokens here; a close is counted. */
static int g_closed;
static void tok_close(void *c) {
  (void)c;
  g_closed++;
}
static bool tok_usable(void *c) { return (uintptr_t)c != 99; }
#define TOK(i) ((void *)(uintptr_t)(i))

/* What a program holding many session locks at once sees: every
 * connection given back with a server timeout is kept beyond the pool
 * size (no dial when it takes them again), lent newest first, and closed
 * once idle near its timeout, whether by the loop's sweep or on the way
 * to a younger one; connections with no timeout stay within the pool
 * size; a broken one is never lent. */
static void t_idle_pool(void) {
  dlock__idle_pool ip;
  g_closed = 0;
  dlock__idle_init(&ip, 2, tok_close, tok_usable);
  int64_t t = 1000, to;
  for (int i = 1; i <= 64; i++) /* 64 holds' connections, 30 s timeout */
    dlock__idle_put(&ip, TOK(i), 30000, t);
  CHECK_INT(g_closed, ==, 0);
  CHECK(dlock__idle_take(&ip, t + 10, &to) == TOK(64));
  CHECK_INT((int)to, ==, 30000);
  dlock__idle_put(&ip, TOK(64), 30000, t + 20);
  /* untimed ones: two kept, the third closed at once */
  dlock__idle_put(&ip, TOK(101), 0, t);
  dlock__idle_put(&ip, TOK(102), 0, t);
  dlock__idle_put(&ip, TOK(103), 0, t);
  CHECK_INT(g_closed, ==, 1);
  /* the sweep: nothing near its timeout yet; the next due at the
   * timeout less its margin (a quarter) from the oldest */
  CHECK_INT((int)dlock__idle_sweep(&ip, t + 100), ==, 1000 + 22500);
  CHECK_INT(g_closed, ==, 1);
  /* past it: the 63 of t go, the one given back at t + 20 stays a
   * little longer, the untimed ones stay */
  int64_t next = dlock__idle_sweep(&ip, t + 22500);
  CHECK_INT(g_closed, ==, 1 + 16); /* at most 16 per sweep: come back now */
  CHECK(next == t + 22500);
  for (int i = 0; i < 8 && g_closed < 1 + 63; i++)
    dlock__idle_sweep(&ip, t + 22500);
  CHECK_INT(g_closed, ==, 1 + 63);
  CHECK(dlock__idle_take(&ip, t + 22500, &to) == TOK(102));
  CHECK_INT((int)to, ==, 0);
  CHECK(dlock__idle_take(&ip, t + 22500, &to) == TOK(101));
  /* 64 is left; taken past its own expiry it is closed, not lent */
  CHECK(dlock__idle_take(&ip, t + 22520, &to) == NULL);
  CHECK_INT(g_closed, ==, 1 + 64);
  CHECK(dlock__idle_sweep(&ip, t) == DLOCK__NEVER);
  /* a broken connection is passed over and closed */
  dlock__idle_put(&ip, TOK(7), 30000, t);
  dlock__idle_put(&ip, TOK(99), 30000, t);
  CHECK(dlock__idle_take(&ip, t, &to) == TOK(7));
  CHECK_INT(g_closed, ==, 1 + 65);
  dlock__idle_put(&ip, TOK(7), 30000, t);
  dlock__idle_destroy(&ip);
  CHECK_INT(g_closed, ==, 1 + 66);
}

/* clang-format off */
static const check_case_t cases[] = {
    {"session_bound_passes", t_session_bound_passes},
    {"link_pauses_clock", t_link_pauses_clock},
    {"drop_grace", t_drop_grace},
    {"confirmations", t_confirmations},
    {"service_ends_session", t_service_ends_session},
    {"wait_woken_or_times_out", t_wait_woken_or_times_out},
    {"wait_rides_out_outage", t_wait_rides_out_outage},
    {"async_park_time_cancel", t_async_park_time_cancel},
    {"async_rides_out_outage", t_async_rides_out_outage},
    {"idle_pool", t_idle_pool},
};
/* clang-format on */

CHECK_MAIN(cases)
