/*
 * async_waiters.c - a thousand lock waiters on one thread and one libuv
 * loop, through libdlock's async API and its libuv adapter.
 *
 * Design note. Each waiter is a small record, not a thread: it asks for
 * its name's lock with dlock_lock_acquire_async() (a wait, the watchdog
 * lease) under an owner id of its own (WAITER_ID_BASE + i: concurrent
 * operations of one thread exclude each other only with distinct ids),
 * and its callback, run on the loop's thread by the adapter, holds the
 * lock for 1 to 5 ms (a uv timer) and releases it with
 * dlock_lock_release_async(). Waiters share one lock handle per name (a
 * handle serves any number of owners). Mutual exclusion is checked in
 * memory: each name has a "holder" slot that must be empty when a grant
 * arrives; a grant that finds it taken is a violation. The slot is
 * emptied before the release is sent, so the next grant, which the server
 * gives only after that release, always finds it empty unless two owners
 * held the name at once.
 *
 * Bounds: every wait has its deadline (WAIT_MS); a guard timer stops the
 * loop if the run has not ended by then, cancelling what is still pending
 * (dlock_op_cancel), and reports the run as failed.
 *
 *   async_waiters [URL [WAITERS [NAMES]]]
 *       (default redis://127.0.0.1:6379, 1000 waiters on 100 names)
 *
 * Prints one summary line; exits 0 when every waiter was granted and
 * released and no grant broke mutual exclusion, else 1.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <uv.h>

#include <dlock/adapters/libuv.h>
#include <dlock/dlock.h>

#define WAIT_MS 30000              /* each waiter's bound on its wait */
#define GUARD_MS (WAIT_MS + 15000) /* the whole run's bound */
#define WAITER_ID_BASE 1000000u    /* above any dlock_thread_id() here */

enum state { WAITING, HOLDING, RELEASING, DONE };

typedef struct waiter {
  int index, name;
  uint64_t owner;
  enum state state;
  dlock_op_t op; /* the operation pending, for a cancel */
  uv_timer_t hold;
  struct run *run;
} waiter_t;

typedef struct run {
  uv_loop_t *loop;
  dlock_client_t *client;
  dlock_libuv_t *adapter;
  dlock_lock_t **locks; /* one per name */
  int *holder;          /* per name: the waiter holding it, or -1 */
  waiter_t *w;
  int waiters, names, done;
  long grants, violations, acquire_errors, release_errors;
  uint64_t t0, t1;
  uv_timer_t guard;
  int timed_out;
} run_t;

static void report_error(const char *what, const waiter_t *w, int rc) {
  static int shown;
  if (shown++ < 5) /* the first few; the summary counts them all */
    fprintf(stderr, "waiter %d: %s: %s: %s\n", w->index, what,
            dlock_err_name(rc),
            dlock_last_error()[0] ? dlock_last_error() : dlock_strerror(rc));
}

static void close_handle(void *h) {
  if (((uv_handle_t *)h)->data && !uv_is_closing((uv_handle_t *)h))
    uv_close((uv_handle_t *)h, NULL);
}

static void finish(waiter_t *w) {
  run_t *r = w->run;
  w->state = DONE;
  w->op = 0;
  close_handle(&w->hold);
  if (++r->done == r->waiters) {
    r->t1 = uv_hrtime();
    /* The last one: stop watching, so that the loop can end. */
    close_handle(&r->guard);
    dlock_libuv_detach(r->adapter, NULL, NULL);
    r->adapter = NULL;
  }
}

static void on_released(void *ud, int rc, int64_t value) {
  waiter_t *w = ud;
  (void)value;
  if (rc != 0) {
    w->run->release_errors++;
    report_error("release", w, rc);
  }
  finish(w);
}

static void on_hold_over(uv_timer_t *t) {
  waiter_t *w = t->data;
  run_t *r = w->run;
  int rc;
  r->holder[w->name] = -1; /* before the release reaches the server */
  w->state = RELEASING;
  rc = dlock_lock_release_async(r->locks[w->name], w->owner, on_released, w,
                                &w->op);
  if (rc != 0) { /* nothing started: no callback will come */
    r->release_errors++;
    report_error("release_async", w, rc);
    finish(w);
  }
}

static void on_granted(void *ud, int rc, int64_t value) {
  waiter_t *w = ud;
  run_t *r = w->run;
  (void)value;
  w->op = 0;
  if (rc != 0) {
    r->acquire_errors++;
    report_error("acquire", w, rc);
    finish(w);
    return;
  }
  r->grants++;
  if (r->holder[w->name] != -1)
    r->violations++;
  r->holder[w->name] = w->index;
  w->state = HOLDING;
  if (r->timed_out) { /* the guard fired: release at once */
    on_hold_over(&w->hold);
    return;
  }
  uv_timer_start(&w->hold, on_hold_over, 1 + (uint64_t)(w->index % 5), 0);
}

/* The run took too long: cancel what is still pending (each callback then
 * runs with DLOCK_ECANCELED or its own outcome) and release what is held,
 * then give that 5 s before stopping the loop. */
static void on_guard(uv_timer_t *t) {
  run_t *r = t->data;
  int i;
  if (r->timed_out) {
    fprintf(stderr, "async_waiters: %zu operations still pending: giving up\n",
            dlock_client_pending(r->client));
    uv_stop(r->loop);
    return;
  }
  r->timed_out = 1;
  fprintf(stderr,
          "async_waiters: not done after %d ms (%d of %d finished, "
          "%zu operations pending): cancelling\n",
          GUARD_MS, r->done, r->waiters, dlock_client_pending(r->client));
  for (i = 0; i < r->waiters; i++) {
    if (r->w[i].state == WAITING && r->w[i].op)
      dlock_op_cancel(r->client, r->w[i].op);
    else if (r->w[i].state == HOLDING) {
      uv_timer_stop(&r->w[i].hold);
      on_hold_over(&r->w[i].hold);
    }
  }
  uv_timer_start(t, on_guard, 5000, 0);
}

static int fail(const char *what, int err) {
  fprintf(stderr, "async_waiters: %s: %s: %s\n", what, dlock_err_name(err),
          dlock_last_error()[0] ? dlock_last_error() : dlock_strerror(err));
  return 1;
}

static int parse_count(const char *s, int min, int max, int *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < min || v > max)
    return -1;
  *out = (int)v;
  return 0;
}

int main(int argc, char **argv) {
  const char *url = argc > 1 ? argv[1] : "redis://127.0.0.1:6379";
  run_t r;
  uv_loop_t loop;
  int err, i, rc = 1;
  double ms;

  memset(&r, 0, sizeof r);
  r.waiters = 1000;
  r.names = 100;
  if ((argc > 2 && parse_count(argv[2], 1, 100000, &r.waiters) != 0) ||
      (argc > 3 && parse_count(argv[3], 1, 100000, &r.names) != 0) ||
      argc > 4) {
    fprintf(stderr, "usage: async_waiters [URL [WAITERS [NAMES]]] "
                    "(1..100000 each)\n");
    return 2;
  }
  if (uv_loop_init(&loop) != 0) {
    fprintf(stderr, "async_waiters: uv_loop_init failed\n");
    return 1;
  }
  r.loop = &loop;
  r.locks = calloc((size_t)r.names, sizeof *r.locks);
  r.holder = malloc((size_t)r.names * sizeof *r.holder);
  r.w = calloc((size_t)r.waiters, sizeof *r.w);
  if (!r.locks || !r.holder || !r.w) {
    fprintf(stderr, "async_waiters: out of memory\n");
    goto out;
  }

  if ((err = dlock_client_new(&r.client, url, NULL)) != 0) {
    fail("connect", err);
    goto out;
  }
  for (i = 0; i < r.names; i++) {
    char name[64];
    /* the pid keeps two runs on one server apart */
    snprintf(name, sizeof name, "async-waiters:%ld:%d", (long)getpid(), i);
    if ((err = dlock_lock_new(r.client, name, &r.locks[i])) != 0) {
      fail("lock handle", err);
      goto out;
    }
    r.holder[i] = -1;
  }
  if ((err = dlock_libuv_attach(r.client, &loop, &r.adapter)) != 0) {
    fail("attach", err);
    goto out;
  }
  uv_timer_init(&loop, &r.guard);
  r.guard.data = &r;
  uv_timer_start(&r.guard, on_guard, GUARD_MS, 0);

  r.t0 = uv_hrtime();
  for (i = 0; i < r.waiters; i++) {
    waiter_t *w = &r.w[i];
    w->index = i;
    w->name = i % r.names;
    w->owner = WAITER_ID_BASE + (uint64_t)i;
    w->run = &r;
    uv_timer_init(&loop, &w->hold);
    w->hold.data = w;
    err = dlock_lock_acquire_async(r.locks[w->name], w->owner, WAIT_MS,
                                   DLOCK_LEASE_WATCHDOG, on_granted, w, &w->op);
    if (err != 0) { /* nothing started */
      r.acquire_errors++;
      report_error("acquire_async", w, err);
      finish(w);
    }
  }
  uv_run(&loop, UV_RUN_DEFAULT);

  if (!r.t1)
    r.t1 = uv_hrtime();
  ms = (double)(r.t1 - r.t0) / 1e6;
  printf("waiters=%d names=%d grants=%ld violations=%ld acquire_errors=%ld "
         "release_errors=%ld elapsed_ms=%.1f grants_per_s=%.0f\n",
         r.waiters, r.names, r.grants, r.violations, r.acquire_errors,
         r.release_errors, ms, ms > 0 ? (double)r.grants * 1000.0 / ms : 0.0);
  rc = (r.grants == r.waiters && r.violations == 0 && r.release_errors == 0 &&
        !r.timed_out)
           ? 0
           : 1;

out:
  /* Detach before dlock_client_free; close every handle still open and
   * let the loop run their closes. */
  dlock_libuv_detach(r.adapter, NULL, NULL);
  r.adapter = NULL;
  if (r.w)
    for (i = 0; i < r.waiters; i++)
      close_handle(&r.w[i].hold);
  close_handle(&r.guard);
  uv_run(&loop, UV_RUN_DEFAULT);
  /* Normally nothing is pending here. After a stopped loop,
   * dlock_client_free ends what is (DLOCK_ECLOSED, the callbacks run here,
   * with every handle closed) and frees the lock handles, which must stay
   * live until then. */
  if (r.locks && r.client && dlock_client_pending(r.client) == 0)
    for (i = 0; i < r.names; i++) {
      dlock_lock_free(r.locks[i]);
      r.locks[i] = NULL;
    }
  if (r.client)
    r.timed_out = 1; /* late callbacks: release nothing through the loop */
  dlock_client_free(r.client);
  if (uv_loop_close(&loop) != 0)
    fprintf(stderr, "async_waiters: the loop still had handles\n");
  free(r.w);
  free(r.holder);
  free(r.locks);
  return rc;
}
