/*
 * test_async.c - the async API (dlock.h, "async API") on every backend, by
 * URL.
 *
 * Design note: each case drives its client the way an event-loop program
 * does: one thread starts operations, polls the client's completion
 * descriptor (dlock_client_fd) and runs their callbacks with
 * dlock_client_process. Concurrent waiters of that one thread are told
 * apart by their owner ids (the thread_id argument). The cases assert
 * what such a program observes: that waiters of one name never overlap,
 * that every operation's callback runs exactly once with the outcome the
 * blocking call would return, that a cancelled waiter leaves the
 * server's queue (the lock is not handed to it), and that freeing the
 * client runs the pending callbacks with DLOCK_ECLOSED. ctest runs each
 * case once per backend the build tests (test_async.BACKEND.CASE), as the
 * backend-neutral suite does (tests/harness/backends.h).
 *
 * Every wait is bounded: the loop gives up after its own deadline.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "backends.h"
#include "check.h"
#include "harness.h"

#include <dlock/dlock.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEASE_MS 3000

static th_backend_t *g_backend;

static void start(void) {
  g_backend = th_backend_start();
  CHECKF(g_backend != NULL, "the backend did not start");
  printf("backend %s at %s\n", th_backend_name(g_backend),
         th_backend_url(g_backend));
}

static void stop(void) {
  th_backend_stop(g_backend);
  g_backend = NULL;
}

static dlock_client_t *client(void) {
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_watchdog_timeout(o, LEASE_MS));
  CHECK_OK(dlock_options_set_session_timeout(o, LEASE_MS));
  CHECK_OK(dlock_options_set_async_threads(o, 4));
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new(&c, th_backend_url(g_backend), o));
  dlock_options_free(o);
  return c;
}

/* Runs the client's callbacks as they come until cond() holds or
 * timeout_ms passes; false on the timeout. */
static bool loop_until(dlock_client_t *c, bool (*cond)(void *), void *arg,
                       int64_t timeout_ms) {
  int fd = -1;
  CHECK_OK(dlock_client_fd(c, &fd));
  int64_t deadline = th_now_ms() + timeout_ms;
  while (!cond(arg)) {
    int64_t left = deadline - th_now_ms();
    if (left <= 0)
      return false;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int n = poll(&p, 1, left > 200 ? 200 : (int)left);
    if (n > 0)
      CHECK(dlock_client_process(c) >= 0);
  }
  return true;
}

/* ------------------------------------------------- many waiters, names */

#define WAITERS 40
#define NAMES 4

typedef struct waiter {
  struct crowd *crowd;
  int i;
  dlock_lock_t *lock; /* its name's handle */
  int grants, acquire_calls, release_calls, errors;
} waiter_t;

typedef struct crowd {
  dlock_client_t *c;
  dlock_lock_t *locks[NAMES];
  int holder[NAMES]; /* the waiter holding each name here, or -1 */
  waiter_t w[WAITERS];
  int granted, released, violations;
} crowd_t;

static void on_released(void *ud, int rc, int64_t value) {
  waiter_t *w = ud;
  (void)value;
  w->release_calls++;
  if (rc != 0) {
    fprintf(stderr, "waiter %d: release: %s (%s)\n", w->i, dlock_err_name(rc),
            dlock_last_error());
    w->errors++;
  }
  w->crowd->released++;
}

static void on_acquired(void *ud, int rc, int64_t value) {
  waiter_t *w = ud;
  crowd_t *k = w->crowd;
  (void)value;
  w->acquire_calls++;
  if (rc != 0) {
    fprintf(stderr, "waiter %d: acquire: %s (%s)\n", w->i, dlock_err_name(rc),
            dlock_last_error());
    w->errors++;
    return;
  }
  int name = w->i % NAMES;
  if (k->holder[name] != -1)
    k->violations++;
  k->holder[name] = w->i;
  w->grants++;
  k->granted++;
  /* the section ends here: the name is free for this program as soon as
   * the release is sent (the next grant can only follow it) */
  k->holder[name] = -1;
  CHECK_OK(dlock_lock_release_async(w->lock, 1000 + (uint64_t)w->i, on_released,
                                    w, NULL));
}

static bool crowd_done(void *arg) {
  crowd_t *k = arg;
  int errors = 0;
  for (int i = 0; i < WAITERS; i++)
    errors += k->w[i].errors;
  return k->released + errors >= WAITERS;
}

/* WAITERS waiters of one thread on NAMES names: each is granted once, no
 * two of a name overlap, and every callback runs once. */
static void t_waiters_exclude(void) {
  start();
  static crowd_t k;
  memset(&k, 0, sizeof k);
  k.c = client();
  for (int n = 0; n < NAMES; n++) {
    char name[32];
    snprintf(name, sizeof name, "async-crowd-%d", n);
    CHECK_OK(dlock_lock_new(k.c, name, &k.locks[n]));
    k.holder[n] = -1;
  }
  for (int i = 0; i < WAITERS; i++) {
    k.w[i] = (waiter_t){.crowd = &k, .i = i, .lock = k.locks[i % NAMES]};
    CHECK_OK(dlock_lock_acquire_async(k.w[i].lock, 1000 + (uint64_t)i, 60000,
                                      DLOCK_LEASE_WATCHDOG, on_acquired,
                                      &k.w[i], NULL));
  }
  CHECKF(loop_until(k.c, crowd_done, &k, 90000),
         "only %d of %d waiters were granted and released in 90 s", k.released,
         WAITERS);
  for (int i = 0; i < WAITERS; i++) {
    CHECKF(k.w[i].errors == 0, "waiter %d failed", i);
    CHECK_INT(k.w[i].grants, ==, 1);
    CHECK_INT(k.w[i].acquire_calls, ==, 1);
    CHECK_INT(k.w[i].release_calls, ==, 1);
  }
  CHECK_INT(k.violations, ==, 0);
  CHECK_INT(dlock_client_pending(k.c), ==, 0);
  /* nothing is held any more */
  for (int n = 0; n < NAMES; n++) {
    bool locked = true;
    CHECK_OK(dlock_lock_is_locked(k.locks[n], &locked));
    CHECK(!locked);
    dlock_lock_free(k.locks[n]);
  }
  printf("%d waiters on %d names: %d grants, %d overlaps\n", WAITERS, NAMES,
         k.granted, k.violations);
  dlock_client_free(k.c);
  stop();
}

/* ------------------------------------------------------------- outcomes */

typedef struct outcome {
  int calls;
  int rc;
  int64_t value;
  char detail[256];
} outcome_t;

static void on_outcome(void *ud, int rc, int64_t value) {
  outcome_t *o = ud;
  o->calls++;
  o->rc = rc;
  o->value = value;
  snprintf(o->detail, sizeof o->detail, "%s", rc ? dlock_last_error() : "");
}

static bool called(void *arg) { return ((outcome_t *)arg)->calls > 0; }

/* A cancelled waiter's callback says DLOCK_ECANCELED, and it has left the
 * queue: the holder's release hands the lock to nobody. */
static void t_cancel_leaves_queue(void) {
  start();
  dlock_client_t *c = client();
  dlock_lock_t *l = NULL;
  CHECK_OK(dlock_lock_new(c, "async-cancel", &l));
  CHECK_OK(dlock_lock_acquire_as(l, 7, 0, DLOCK_LEASE_WATCHDOG));
  outcome_t o = {0};
  dlock_op_t op = 0;
  CHECK_OK(dlock_lock_acquire_async(l, 8, DLOCK_WAIT_FOREVER,
                                    DLOCK_LEASE_WATCHDOG, on_outcome, &o, &op));
  CHECK(op != 0);
  CHECK_INT(dlock_client_pending(c), ==, 1);
  /* let the waiter queue (a bounded pause; the test holds either way) */
  th_sleep_ms(300);
  CHECK_INT(o.calls, ==, 0);
  CHECK_OK(dlock_op_cancel(c, op));
  CHECK(loop_until(c, called, &o, 30000));
  CHECK_INT(o.calls, ==, 1);
  CHECK_RC(o.rc, DLOCK_ECANCELED);
  CHECKF(strstr(o.detail, "async-cancel") != NULL, "detail: %s", o.detail);
  CHECK_RC(dlock_op_cancel(c, op), DLOCK_EINVAL);
  CHECK_INT(dlock_client_pending(c), ==, 0);
  CHECK_OK(dlock_lock_release_as(l, 7));
  bool locked = true;
  CHECK_OK(dlock_lock_is_locked(l, &locked));
  CHECKF(!locked, "the release handed the lock to the cancelled waiter");
  dlock_lock_free(l);
  dlock_client_free(c);
  stop();
}

/* A wait that runs out says DLOCK_ETIMEDOUT with its detail readable in
 * the callback; a try on a free fenced lock passes its token; bad
 * arguments start nothing. */
static void t_outcomes(void) {
  start();
  dlock_client_t *c = client();
  dlock_lock_t *l = NULL;
  CHECK_OK(dlock_lock_new_kind(c, "async-outcomes", DLOCK_FENCED, &l));
  outcome_t got = {0};
  CHECK_OK(dlock_lock_acquire_async(l, 21, 0, DLOCK_LEASE_WATCHDOG, on_outcome,
                                    &got, NULL));
  CHECK(loop_until(c, called, &got, 30000));
  CHECK_OK(got.rc);
  CHECKF(got.value > 0, "fencing token %lld", (long long)got.value);
  outcome_t late = {0};
  CHECK_OK(dlock_lock_acquire_async(l, 22, 300, DLOCK_LEASE_WATCHDOG,
                                    on_outcome, &late, NULL));
  CHECK(loop_until(c, called, &late, 30000));
  CHECK_RC(late.rc, DLOCK_ETIMEDOUT);
  CHECKF(strstr(late.detail, "async-outcomes") != NULL, "detail: %s",
         late.detail);
  outcome_t rel = {0};
  CHECK_OK(dlock_lock_release_async(l, 21, on_outcome, &rel, NULL));
  CHECK(loop_until(c, called, &rel, 30000));
  CHECK_OK(rel.rc);
  outcome_t none = {0};
  CHECK_OK(dlock_lock_release_async(l, 21, on_outcome, &none, NULL));
  CHECK(loop_until(c, called, &none, 30000));
  CHECK_RC(none.rc, DLOCK_ENOTOWNER);
  /* refused before anything starts: no callback */
  outcome_t bad = {0};
  CHECK_RC(dlock_lock_acquire_async(l, 23, -5, DLOCK_LEASE_WATCHDOG, on_outcome,
                                    &bad, NULL),
           DLOCK_EINVAL);
  CHECK_RC(dlock_lock_acquire_async(l, 23, 0, 0, on_outcome, &bad, NULL),
           DLOCK_EINVAL);
  CHECK_RC(dlock_lock_acquire_async(l, 23, 0, DLOCK_LEASE_WATCHDOG, NULL, &bad,
                                    NULL),
           DLOCK_EINVAL);
  CHECK_RC(dlock_lock_acquire_async(NULL, 23, 0, DLOCK_LEASE_WATCHDOG,
                                    on_outcome, &bad, NULL),
           DLOCK_EINVAL);
  CHECK_RC(dlock_lock_release_async(NULL, 23, on_outcome, &bad, NULL),
           DLOCK_EINVAL);
  CHECK_RC(dlock_op_cancel(c, 987654321), DLOCK_EINVAL);
  CHECK_RC(dlock_op_cancel(NULL, 1), DLOCK_EINVAL);
  CHECK_RC(dlock_client_fd(c, NULL), DLOCK_EINVAL);
  CHECK_INT(dlock_client_process(c), ==, 0);
  CHECK_INT(bad.calls, ==, 0);
  CHECK_INT(dlock_client_pending(c), ==, 0);
  dlock_lock_free(l);
  dlock_client_free(c);
  stop();
}

/* Freeing the client while a wait cannot be granted ends it with
 * DLOCK_ECLOSED, and its callback runs before dlock_client_free returns. */
static void t_free_ends_wait(void) {
  start();
  dlock_client_t *holder = client();
  dlock_client_t *c = client();
  dlock_lock_t *h = NULL, *l = NULL;
  CHECK_OK(dlock_lock_new(holder, "async-free-wait", &h));
  CHECK_OK(dlock_lock_new(c, "async-free-wait", &l));
  CHECK_OK(dlock_lock_acquire(h, 0, DLOCK_LEASE_WATCHDOG));
  outcome_t o = {0};
  CHECK_OK(dlock_lock_acquire_async(
      l, 41, DLOCK_WAIT_FOREVER, DLOCK_LEASE_WATCHDOG, on_outcome, &o, NULL));
  th_sleep_ms(200);
  dlock_client_free(c);
  CHECK_INT(o.calls, ==, 1);
  CHECK_RC(o.rc, DLOCK_ECLOSED);
  CHECK_OK(dlock_lock_release(h));
  dlock_lock_free(h);
  dlock_client_free(holder);
  stop();
}

/* ------------------------------------------------- semaphores, latches */

typedef struct tally {
  int ok, failed;
} tally_t;

static void on_tally(void *ud, int rc, int64_t value) {
  tally_t *t = ud;
  (void)value;
  if (rc == 0)
    t->ok++;
  else
    t->failed++;
}

typedef struct want {
  tally_t *t;
  int n;
} want_t;

static bool reached(void *arg) {
  want_t *w = arg;
  return w->t->ok + w->t->failed >= w->n;
}

/* A backend without semaphores or latches refuses their handles with
 * DLOCK_ENOTSUP naming itself; then the case has nothing more to test. */
static bool refused(int rc, const char *what) {
  if (rc != DLOCK_ENOTSUP)
    return false;
  CHECKF(strstr(dlock_last_error(), th_backend_name(g_backend)) != NULL,
         "the refusal does not name the backend: %s", dlock_last_error());
  printf("%s offers no %s: DLOCK_ENOTSUP (%s)\n", th_backend_name(g_backend),
         what, dlock_last_error());
  return true;
}

/* Three async acquires of a semaphore of two permits: two are granted,
 * the third waits until an async release gives one back. Three async
 * awaits of a latch of two are all released by two async count-downs. */
static void t_semaphore_latch(void) {
  start();
  dlock_client_t *c = client();
  dlock_semaphore_t *s = NULL;
  int rc = dlock_semaphore_new(c, "async-sem", &s);
  if (!refused(rc, "semaphores")) {
    CHECK_OK(rc);
    CHECK_OK(dlock_semaphore_try_set_permits(s, 2, NULL));
    tally_t got = {0};
    for (int i = 0; i < 3; i++)
      CHECK_OK(
          dlock_semaphore_acquire_async(s, 1, 60000, on_tally, &got, NULL));
    want_t two = {&got, 2}, three = {&got, 3};
    CHECK(loop_until(c, reached, &two, 30000));
    /* the third waits (a bounded look: it must not come on its own) */
    CHECK(!loop_until(c, reached, &three, 300));
    CHECK_INT(got.ok, ==, 2);
    tally_t rel = {0};
    CHECK_OK(dlock_semaphore_release_async(s, 1, on_tally, &rel, NULL));
    /* the waiter may be told before the release's own callback runs */
    want_t released = {&rel, 1};
    CHECK(loop_until(c, reached, &three, 30000));
    CHECK(loop_until(c, reached, &released, 30000));
    CHECK_INT(got.ok, ==, 3);
    CHECK_INT(rel.ok, ==, 1);
    CHECK_RC(dlock_semaphore_acquire_async(s, 0, 0, on_tally, &got, NULL),
             DLOCK_EINVAL);
    dlock_semaphore_free(s);
  }
  dlock_latch_t *l = NULL;
  rc = dlock_latch_new(c, "async-latch", &l);
  if (!refused(rc, "latches")) {
    CHECK_OK(rc);
    CHECK_OK(dlock_latch_try_set_count(l, 2, NULL));
    tally_t opened = {0}, downs = {0};
    for (int i = 0; i < 3; i++)
      CHECK_OK(dlock_latch_await_async(l, 60000, on_tally, &opened, NULL));
    want_t one_down = {&downs, 1}, all = {&opened, 3};
    CHECK_OK(dlock_latch_count_down_async(l, on_tally, &downs, NULL));
    CHECK(loop_until(c, reached, &one_down, 30000));
    CHECK(!loop_until(c, reached, &all, 300));
    CHECK_INT(opened.ok + opened.failed, ==, 0);
    CHECK_OK(dlock_latch_count_down_async(l, on_tally, &downs, NULL));
    /* the awaits may be told before the count-down's own callback runs */
    want_t two_downs = {&downs, 2};
    CHECK(loop_until(c, reached, &all, 30000));
    CHECK(loop_until(c, reached, &two_downs, 30000));
    CHECK_INT(opened.ok, ==, 3);
    CHECK_INT(downs.ok, ==, 2);
    dlock_latch_free(l);
  }
  CHECK_INT(dlock_client_pending(c), ==, 0);
  dlock_client_free(c);
  stop();
}

typedef struct permits {
  int ok, failed, null_ids;
  char ids[4][40];
} permits_t;

static void on_permit(void *ud, int rc, const char *id) {
  permits_t *p = ud;
  if (rc != 0) {
    p->failed++;
    p->null_ids += id == NULL;
    return;
  }
  if (p->ok < 4)
    snprintf(p->ids[p->ok], sizeof p->ids[0], "%s", id ? id : "(null)");
  p->ok++;
}

static bool permits_reached(void *arg) {
  want_t *w = arg;
  permits_t *p = (permits_t *)w->t;
  return p->ok + p->failed >= w->n;
}

/* Three async acquires of a permit semaphore of two: two get permits
 * (with distinct ids), the third waits until an async release of one of
 * them; the ids release, and an id not in use is refused in the
 * callback, a malformed one at the call. */
static void t_permits(void) {
  start();
  dlock_client_t *c = client();
  dlock_permit_sem_t *s = NULL;
  int rc = dlock_permit_sem_new(c, "async-permits", &s);
  if (!refused(rc, "permit semaphores")) {
    CHECK_OK(rc);
    CHECK_OK(dlock_permit_sem_try_set_permits(s, 2, NULL));
    permits_t got = {0};
    for (int i = 0; i < 3; i++)
      CHECK_OK(dlock_permit_sem_acquire_async(s, 60000, DLOCK_LEASE_WATCHDOG,
                                              on_permit, &got, NULL));
    want_t two = {(tally_t *)&got, 2}, three = {(tally_t *)&got, 3};
    CHECK(loop_until(c, permits_reached, &two, 30000));
    /* the third waits (a bounded look: it must not come on its own) */
    CHECK(!loop_until(c, permits_reached, &three, 300));
    CHECK_INT(got.ok, ==, 2);
    CHECKF(strcmp(got.ids[0], got.ids[1]) != 0, "two permits share id %s",
           got.ids[0]);
    tally_t rel = {0};
    CHECK_OK(
        dlock_permit_sem_release_async(s, got.ids[0], on_tally, &rel, NULL));
    want_t released = {&rel, 1};
    CHECK(loop_until(c, permits_reached, &three, 30000));
    CHECK(loop_until(c, reached, &released, 30000));
    CHECK_INT(got.ok, ==, 3);
    CHECK_INT(rel.ok, ==, 1);
    CHECKF(strcmp(got.ids[2], got.ids[0]) != 0 &&
               strcmp(got.ids[2], got.ids[1]) != 0,
           "the waiter's permit %s repeats an id", got.ids[2]);
    /* the released id again: not in use any more */
    tally_t again = {0};
    CHECK_OK(
        dlock_permit_sem_release_async(s, got.ids[0], on_tally, &again, NULL));
    want_t again_done = {&again, 1};
    CHECK(loop_until(c, reached, &again_done, 30000));
    CHECK_INT(again.failed, ==, 1);
    tally_t rest = {0};
    CHECK_OK(
        dlock_permit_sem_release_async(s, got.ids[1], on_tally, &rest, NULL));
    CHECK_OK(
        dlock_permit_sem_release_async(s, got.ids[2], on_tally, &rest, NULL));
    want_t rest_done = {&rest, 2};
    CHECK(loop_until(c, reached, &rest_done, 30000));
    CHECK_INT(rest.ok, ==, 2);
    int64_t avail = -1;
    CHECK_OK(dlock_permit_sem_available(s, &avail));
    CHECK_INT(avail, ==, 2);
    /* a try with none left fails in the callback, with no id */
    permits_t full = {0};
    for (int i = 0; i < 3; i++)
      CHECK_OK(dlock_permit_sem_acquire_async(s, 0, DLOCK_LEASE_WATCHDOG,
                                              on_permit, &full, NULL));
    want_t tried = {(tally_t *)&full, 3};
    CHECK(loop_until(c, permits_reached, &tried, 30000));
    CHECK_INT(full.ok, ==, 2);
    CHECK_INT(full.failed, ==, 1);
    CHECK_INT(full.null_ids, ==, 1);
    for (int i = 0; i < 2; i++)
      CHECK_OK(dlock_permit_sem_release(s, full.ids[i]));
    permits_t none = {0};
    tally_t bad = {0};
    CHECK_RC(
        dlock_permit_sem_release_async(s, "not-an-id", on_tally, &bad, NULL),
        DLOCK_EINVAL);
    CHECK_RC(dlock_permit_sem_acquire_async(s, 0, DLOCK_LEASE_WATCHDOG, NULL,
                                            &none, NULL),
             DLOCK_EINVAL);
    CHECK_RC(dlock_permit_sem_acquire_async(NULL, 0, DLOCK_LEASE_WATCHDOG,
                                            on_permit, &none, NULL),
             DLOCK_EINVAL);
    CHECK_INT(bad.ok + bad.failed + none.ok + none.failed, ==, 0);
    dlock_permit_sem_free(s);
  }
  CHECK_INT(dlock_client_pending(c), ==, 0);
  dlock_client_free(c);
  stop();
}

/* An async multilock waits for the member another owner holds and gets
 * both once it is released; a cancelled one ends with DLOCK_ECANCELED
 * and leaves nothing held or queued. */
static void t_multilock(void) {
  start();
  dlock_client_t *c = client();
  dlock_lock_t *a = NULL, *b = NULL;
  CHECK_OK(dlock_lock_new(c, "async-multi-a", &a));
  CHECK_OK(dlock_lock_new(c, "async-multi-b", &b));
  dlock_lock_t *both[] = {a, b};
  dlock_multilock_t *m = NULL;
  CHECK_OK(dlock_multilock_new(&m, both, 2));
  CHECK_OK(dlock_lock_acquire_as(b, 7, 0, DLOCK_LEASE_WATCHDOG));
  outcome_t got = {0};
  CHECK_OK(dlock_multilock_acquire_async(m, 8, 60000, DLOCK_LEASE_WATCHDOG,
                                         on_outcome, &got, NULL));
  CHECK(!loop_until(c, called, &got, 300));
  CHECK_OK(dlock_lock_release_as(b, 7));
  CHECK(loop_until(c, called, &got, 30000));
  CHECKF(got.rc == 0, "multilock: %s (%s)", dlock_err_name(got.rc), got.detail);
  bool locked = false;
  CHECK_OK(dlock_lock_is_locked(a, &locked));
  CHECK(locked);
  CHECK_OK(dlock_lock_is_locked(b, &locked));
  CHECK(locked);
  outcome_t rel = {0};
  CHECK_OK(dlock_multilock_release_async(m, 8, on_outcome, &rel, NULL));
  CHECK(loop_until(c, called, &rel, 30000));
  CHECK_OK(rel.rc);
  /* cancelled while it waits for a member */
  CHECK_OK(dlock_lock_acquire_as(a, 7, 0, DLOCK_LEASE_WATCHDOG));
  outcome_t gone = {0};
  dlock_op_t op = 0;
  CHECK_OK(dlock_multilock_acquire_async(
      m, 9, DLOCK_WAIT_FOREVER, DLOCK_LEASE_WATCHDOG, on_outcome, &gone, &op));
  th_sleep_ms(300);
  CHECK_OK(dlock_op_cancel(c, op));
  CHECK(loop_until(c, called, &gone, 30000));
  CHECK_RC(gone.rc, DLOCK_ECANCELED);
  CHECK_OK(dlock_lock_release_as(a, 7));
  CHECK_OK(dlock_lock_is_locked(a, &locked));
  CHECKF(!locked, "a member was handed to the cancelled multilock");
  CHECK_OK(dlock_lock_is_locked(b, &locked));
  CHECK(!locked);
  CHECK_INT(dlock_client_pending(c), ==, 0);
  dlock_multilock_free(m);
  dlock_lock_free(a);
  dlock_lock_free(b);
  dlock_client_free(c);
  stop();
}

static const check_case_t cases[] = {
    {"waiters_exclude", t_waiters_exclude},
    {"cancel_leaves_queue", t_cancel_leaves_queue},
    {"outcomes", t_outcomes},
    {"free_ends_wait", t_free_ends_wait},
    {"semaphore_latch", t_semaphore_latch},
    {"permits", t_permits},
    {"multilock", t_multilock},
};

int main(int argc, char **argv) {
  return check_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
