/*
 * async_libevent.c - a few lock waiters on a libevent loop, through
 * libdlock's async API and its libevent adapter; also a cancel.
 *
 * Design note. One thread runs one event_base with the client attached
 * (include/dlock/adapters/libevent.h), so every callback below runs on
 * it. A first owner (the blocker) takes the lock; while it holds, an
 * acquire with no deadline is started and cancelled at once: since the
 * blocker releases only after that acquire's callback has run, it cannot
 * have been granted, and its callback must say DLOCK_ECANCELED. Then
 * WAITERS more owners queue for the same name; each holds for 2 ms (an
 * evtimer) and releases, and a "holder" slot checks that no two of them
 * hold at once. The last release's callback detaches the adapter from
 * inside a callback, which lets event_base_dispatch return. Owner ids are
 * distinct per operation (ID_BASE + n): concurrent operations of one thread
 * exclude each other only with distinct ids.
 *
 *   async_libevent [URL]      (default redis://127.0.0.1:6379)
 *
 * Prints one summary line; exits 0 when the cancel and every grant went
 * as described, else 1.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include <dlock/adapters/libevent.h>
#include <dlock/dlock.h>

#define WAITERS 5
#define WAIT_MS 20000
#define GUARD_S 40
#define ID_BASE 2000000u /* above any dlock_thread_id() here */

typedef struct run {
  struct event_base *base;
  dlock_client_t *client;
  dlock_libevent_t *adapter;
  dlock_lock_t *lock;
  struct event *hold[WAITERS + 1]; /* [WAITERS]: the blocker's */
  struct event *guard;
  int holder;  /* -1: none */
  int stopped; /* the loop is over: late callbacks touch no event */
  int grants, violations, released, errors;
  int cancel_rc;       /* the cancelled acquire's outcome (1: not yet) */
  int cancel_again_rc; /* dlock_op_cancel once its callback had run */
  dlock_op_t cancel_op;
} run_t;

typedef struct waiter {
  run_t *run;
  int index; /* 0..WAITERS-1, WAITERS for the blocker */
} waiter_t;

static waiter_t waiters[WAITERS + 1];

static uint64_t owner_of(const waiter_t *w) {
  return ID_BASE + (uint64_t)w->index;
}

static void note_error(run_t *r, const char *what, int rc) {
  r->errors++;
  fprintf(stderr, "async_libevent: %s: %s: %s\n", what, dlock_err_name(rc),
          dlock_last_error()[0] ? dlock_last_error() : dlock_strerror(rc));
}

static void end_run(run_t *r) {
  /* From inside a dlock callback: the adapter may be detached here. */
  dlock_libevent_detach(r->adapter);
  r->adapter = NULL;
  event_del(r->guard);
}

static void on_released(void *ud, int rc, int64_t value) {
  waiter_t *w = ud;
  run_t *r = w->run;
  (void)value;
  if (r->stopped)
    return;
  if (rc != 0)
    note_error(r, "release", rc);
  if (++r->released == WAITERS + 1)
    end_run(r);
}

static void on_hold_over(evutil_socket_t fd, short what, void *ud) {
  waiter_t *w = ud;
  run_t *r = w->run;
  int rc;
  (void)fd;
  (void)what;
  r->holder = -1;
  rc = dlock_lock_release_async(r->lock, owner_of(w), on_released, w, NULL);
  if (rc != 0) {
    note_error(r, "release_async", rc);
    if (++r->released == WAITERS + 1)
      end_run(r);
  }
}

static void on_granted(void *ud, int rc, int64_t value) {
  waiter_t *w = ud;
  run_t *r = w->run;
  struct timeval two_ms = {0, 2000};
  (void)value;
  if (r->stopped)
    return;
  if (rc != 0) {
    note_error(r, "acquire", rc);
    if (++r->released == WAITERS + 1)
      end_run(r);
    return;
  }
  r->grants++;
  if (r->holder != -1)
    r->violations++;
  r->holder = w->index;
  if (w->index != WAITERS) /* the blocker holds until the cancel is seen */
    evtimer_add(r->hold[w->index], &two_ms);
}

static void start_acquire(run_t *r, waiter_t *w) {
  int rc = dlock_lock_acquire_async(r->lock, owner_of(w), WAIT_MS,
                                    DLOCK_LEASE_WATCHDOG, on_granted, w, NULL);
  if (rc != 0) {
    note_error(r, "acquire_async", rc);
    if (++r->released == WAITERS + 1)
      end_run(r);
  }
}

/* The cancelled acquire's callback: the blocker still holds, so this can
 * only be the cancel. Then the waiters queue and the blocker lets go. */
static void on_cancelled(void *ud, int rc, int64_t value) {
  run_t *r = ud;
  struct timeval two_ms = {0, 2000};
  int i;
  (void)value;
  r->cancel_rc = rc;
  if (r->stopped)
    return;
  for (i = 0; i < WAITERS; i++)
    start_acquire(r, &waiters[i]);
  evtimer_add(r->hold[WAITERS], &two_ms);
}

static void on_blocker_granted(void *ud, int rc, int64_t value) {
  waiter_t *w = ud;
  run_t *r = w->run;
  on_granted(ud, rc, value);
  if (rc != 0 || r->stopped)
    return;
  rc = dlock_lock_acquire_async(r->lock, ID_BASE + 1000, DLOCK_WAIT_FOREVER,
                                DLOCK_LEASE_WATCHDOG, on_cancelled, r,
                                &r->cancel_op);
  if (rc != 0) {
    note_error(r, "acquire_async (to cancel)", rc);
    on_cancelled(r, rc, 0);
    return;
  }
  if ((rc = dlock_op_cancel(r->client, r->cancel_op)) != 0)
    note_error(r, "op_cancel", rc);
}

static void on_guard(evutil_socket_t fd, short what, void *ud) {
  run_t *r = ud;
  (void)fd;
  (void)what;
  fprintf(stderr, "async_libevent: not done after %d s: giving up\n", GUARD_S);
  r->errors++;
  event_base_loopbreak(r->base);
}

int main(int argc, char **argv) {
  const char *url = argc > 1 ? argv[1] : "redis://127.0.0.1:6379";
  struct timeval guard = {GUARD_S, 0};
  run_t r;
  char name[64];
  int err, i, ok;

  memset(&r, 0, sizeof r);
  r.holder = -1;
  r.cancel_rc = 1;
  r.cancel_again_rc = 1;
  if (!(r.base = event_base_new())) {
    fprintf(stderr, "async_libevent: event_base_new failed\n");
    return 1;
  }
  if ((err = dlock_client_new(&r.client, url, NULL)) != 0) {
    note_error(&r, "connect", err);
    event_base_free(r.base);
    return 1;
  }
  snprintf(name, sizeof name, "async-libevent:%ld", (long)getpid());
  if ((err = dlock_lock_new(r.client, name, &r.lock)) != 0 ||
      (err = dlock_libevent_attach(r.client, r.base, &r.adapter)) != 0) {
    note_error(&r, "lock handle or attach", err);
    dlock_client_free(r.client);
    event_base_free(r.base);
    return 1;
  }
  for (i = 0; i <= WAITERS; i++) {
    waiters[i].run = &r;
    waiters[i].index = i;
    r.hold[i] = evtimer_new(r.base, on_hold_over, &waiters[i]);
  }
  r.guard = evtimer_new(r.base, on_guard, &r);
  evtimer_add(r.guard, &guard);

  err = dlock_lock_acquire_async(r.lock, owner_of(&waiters[WAITERS]), WAIT_MS,
                                 DLOCK_LEASE_WATCHDOG, on_blocker_granted,
                                 &waiters[WAITERS], NULL);
  if (err != 0)
    note_error(&r, "acquire_async (blocker)", err);
  else
    event_base_dispatch(r.base);

  if (r.cancel_op)
    r.cancel_again_rc = dlock_op_cancel(r.client, r.cancel_op);
  ok = r.errors == 0 && r.grants == WAITERS + 1 && r.violations == 0 &&
       r.cancel_rc == DLOCK_ECANCELED && r.cancel_again_rc == DLOCK_EINVAL &&
       dlock_client_pending(r.client) == 0;
  printf("waiters=%d grants=%d violations=%d cancel=%s cancel_again=%s "
         "pending=%zu errors=%d\n",
         WAITERS + 1, r.grants, r.violations,
         r.cancel_rc == 1 ? "none" : dlock_err_name(r.cancel_rc),
         r.cancel_again_rc == 1 ? "none" : dlock_err_name(r.cancel_again_rc),
         dlock_client_pending(r.client), r.errors);

  r.stopped = 1;
  dlock_libevent_detach(r.adapter); /* NULL unless the guard fired */
  for (i = 0; i <= WAITERS; i++)
    event_free(r.hold[i]);
  event_free(r.guard);
  if (dlock_client_pending(r.client) == 0)
    dlock_lock_free(r.lock); /* else dlock_client_free frees it */
  dlock_client_free(r.client);
  event_base_free(r.base);
  return ok ? 0 : 1;
}
