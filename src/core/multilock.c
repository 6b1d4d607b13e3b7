/*
 * multilock.c - several locks taken as one (dlock_multilock_*): all or
 * nothing, by names on one client or on different clients (of any
 * backend, one over several servers included), released together.
 *
 * Acquire never holds some members while it waits for another: it waits
 * for one member while holding nothing, then tries every other member
 * once (no wait). If one of them is held, it releases everything it took
 * in that attempt, backs off for a random moment (so that two contenders
 * that collided do not collide again in step), and waits next for the
 * member that was held. So two callers taking overlapping sets in any
 * orders cannot deadlock, and a partial set is held for one attempt at
 * most (one round of try-once acquires). Members are plain lock handles:
 * each is renewed by its own client's watchdog (members of one client in
 * the same batched renewal) and each loss is reported by its client's lost
 * callback; a multilock release releases every member and reports
 * DLOCK_ELOST if any of them was lost.
 *
 * Threads: a multilock is owned per thread, as its members are (the
 * thread that acquired it releases it). It has no state shared between
 * threads beyond its immutable member list, so it takes no mutex: calls
 * on one multilock must not overlap (dlock.h). `owner` is the thread id
 * whose members `held` marks, set once one is taken and cleared once none
 * is left; a release by another thread id is DLOCK_ENOTOWNER and changes
 * nothing (forgetting the owner's members would leave the owner unable to
 * release them).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/async.h"
#include "core/client.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/id.h"

#define MULTI_MAGIC 0x444c4d4cu /* "DLML" */
/* Back-off after a collision: uniform in [1, BACKOFF_MAX_MS] ms, and never
 * past the deadline. */
#define BACKOFF_MAX_MS 30

struct dlock_multilock {
  uint32_t magic;
  size_t n;
  dlock_lock_t **locks;
  bool *held;     /* this acquire's members, for the owner's release */
  uint64_t owner; /* the thread id whose members `held` marks (0: none) */
};

int dlock_multilock_new(dlock_multilock_t **out, dlock_lock_t *const *locks,
                        size_t n) {
  static const char fn[] = "dlock_multilock_new";
  if (!out)
    return dlock__seterr(DLOCK_EINVAL, "%s: out is NULL", fn);
  *out = NULL;
  if (!locks || n == 0)
    return dlock__seterr(DLOCK_EINVAL, "%s: no locks given", fn);
  for (size_t i = 0; i < n; i++) {
    const dlock_lock_t *l = locks[i];
    if (!l)
      return dlock__seterr(DLOCK_EINVAL, "%s: locks[%zu] is NULL", fn, i);
    if (l->magic != DLOCK__LOCK_MAGIC)
      return dlock__seterr(DLOCK_EBADHANDLE, "%s: locks[%zu] is not live", fn,
                           i);
    for (size_t j = 0; j < i; j++)
      if (locks[j] == l ||
          (locks[j]->client == l->client && strcmp(locks[j]->name, l->name) == 0))
        return dlock__seterr(DLOCK_EINVAL,
                             "%s: locks[%zu] and locks[%zu] are the same lock "
                             "'%.200s' on the same client",
                             fn, j, i, l->name);
  }
  dlock_multilock_t *m = dlock__calloc(1, sizeof *m);
  if (!m || !(m->locks = dlock__calloc(n, sizeof *m->locks)) ||
      !(m->held = dlock__calloc(n, sizeof *m->held))) {
    if (m)
      dlock__free(m->locks);
    dlock__free(m);
    return DLOCK_ENOMEM;
  }
  memcpy(m->locks, locks, n * sizeof *locks);
  m->n = n;
  m->magic = MULTI_MAGIC;
  *out = m;
  return 0;
}

void dlock_multilock_free(dlock_multilock_t *m) {
  if (!m || m->magic != MULTI_MAGIC)
    return;
  m->magic = DLOCK__DEAD_MAGIC;
  dlock__free(m->locks);
  dlock__free(m->held);
  dlock__free(m);
}

size_t dlock_multilock_size(const dlock_multilock_t *m) {
  return m && m->magic == MULTI_MAGIC ? m->n : 0;
}

static bool any_held(const dlock_multilock_t *m) {
  for (size_t i = 0; i < m->n; i++)
    if (m->held[i])
      return true;
  return false;
}

static int check(const dlock_multilock_t *m, const char *fn) {
  if (!m)
    return dlock__seterr(DLOCK_EINVAL, "%s: multilock is NULL", fn);
  if (m->magic != MULTI_MAGIC)
    return dlock__seterr(DLOCK_EBADHANDLE, "%s: multilock is not live", fn);
  return 0;
}

/* A member's release settled it (released, or it was no longer ours):
 * anything else (the backend unreachable, say) leaves the hold in place,
 * renewed, and a later release must retry it. */
static bool release_settled(int rc) {
  return rc == 0 || rc == DLOCK_ELOST || rc == DLOCK_ENOTOWNER;
}

/* Releases what this attempt took, keeping the caller's error detail.
 * 0, or the first error of a release that did not settle (that member stays
 * marked held, for dlock_multilock_release to retry). */
static int release_taken(dlock_multilock_t *m, uint64_t tid, const char *fn) {
  char saved[512];
  snprintf(saved, sizeof saved, "%s", dlock_last_error());
  int failed = 0;
  char detail[512] = "";
  for (size_t i = m->n; i-- > 0;) {
    if (!m->held[i])
      continue;
    int r = dlock_lock_release_as(m->locks[i], tid);
    if (release_settled(r)) {
      m->held[i] = false;
    } else if (!failed) {
      failed = r;
      snprintf(detail, sizeof detail,
               "%s: member %zu ('%.200s') could not be released (%s); "
               "dlock_multilock_release retries it",
               fn, i, m->locks[i]->name, dlock_last_error());
    }
  }
  if (!any_held(m))
    m->owner = 0;
  if (failed)
    return dlock__seterr(failed, "%s", detail);
  dlock__seterr(0, "%s", saved);
  return 0;
}

static int64_t backoff_ms(int64_t deadline) {
  uint32_t r = 0;
  if (dlock__random_bytes(&r, sizeof r) != 0)
    r = (uint32_t)dlock__now_ms();
  int64_t ms = 1 + (int64_t)(r % BACKOFF_MAX_MS);
  int64_t now = dlock__now_ms();
  if (deadline != DLOCK__NEVER && now + ms > deadline)
    ms = deadline > now ? deadline - now : 0;
  return ms;
}

static void backoff(int64_t deadline) { dlock__sleep_ms(backoff_ms(deadline)); }

static int acquire_check(dlock_multilock_t *m, uint64_t tid, int64_t wait_ms,
                         int64_t lease_ms, const char *fn) {
  int rc = check(m, fn);
  if (!rc && tid == 0)
    rc = dlock__seterr(DLOCK_EINVAL, "%s: thread id 0 is not valid", fn);
  if (!rc)
    rc = dlock__check_wait(wait_ms, fn);
  if (!rc)
    rc = dlock__check_lease(lease_ms, fn);
  if (rc)
    return rc;
  for (size_t i = 0; i < m->n; i++)
    if (m->held[i])
      return dlock__seterr(DLOCK_EINVAL,
                           "%s: this multilock is held already (release it "
                           "first; multilocks do not count re-entries)",
                           fn);
  return 0;
}

/* What is left of the wait until `deadline`, as a wait_ms. */
static int64_t wait_left(int64_t wait_ms, int64_t deadline) {
  int64_t now = dlock__now_ms();
  return wait_ms == 0               ? 0
         : deadline == DLOCK__NEVER ? DLOCK_WAIT_FOREVER
         : deadline > now           ? deadline - now
                                    : 0;
}

/* One attempt, after the wait for member `first` ended with rc_first:
 * every other member is tried once. 0 all are held; 1 member *busy was
 * held by another owner (what this attempt took is released); else the
 * error (nothing held, unless a release failed: see release_taken). */
static int attempt_rest(dlock_multilock_t *m, uint64_t tid, int64_t wait_ms,
                        int64_t lease_ms, size_t first, int rc_first,
                        size_t *busy, const char *fn) {
  if (rc_first == DLOCK_EBUSY && wait_ms != 0)
    return dlock__seterr(DLOCK_ETIMEDOUT,
                         "%s: member %zu ('%.200s') was held by another "
                         "owner for the rest of the wait",
                         fn, first, m->locks[first]->name);
  if (rc_first)
    return rc_first;
  m->held[first] = true;
  m->owner = tid;
  *busy = m->n;
  for (size_t i = 0; i < m->n && *busy == m->n; i++) {
    if (i == first)
      continue;
    int rc = dlock_lock_acquire_as(m->locks[i], tid, 0, lease_ms);
    if (rc == 0)
      m->held[i] = true;
    else if (rc == DLOCK_EBUSY)
      *busy = i;
    else {
      dlock__preferr(rc, "%s: member %zu ('%.200s')", fn, i, m->locks[i]->name);
      int rel = release_taken(m, tid, fn);
      return rel ? rel : rc;
    }
  }
  if (*busy == m->n)
    return 0;
  int rc = release_taken(m, tid, fn);
  if (rc)
    return rc;
  if (wait_ms == 0)
    return dlock__seterr(DLOCK_EBUSY,
                         "%s: member %zu ('%.200s') is held by another "
                         "owner",
                         fn, *busy, m->locks[*busy]->name);
  return 1;
}

/* After an attempt found member `busy` held: DLOCK_ETIMEDOUT once the
 * deadline has passed, else 0 (back off, then wait for that member). */
static int past_deadline(dlock_multilock_t *m, int64_t deadline, size_t busy,
                         unsigned attempt, const char *fn) {
  if (deadline != DLOCK__NEVER && dlock__now_ms() >= deadline)
    return dlock__seterr(DLOCK_ETIMEDOUT,
                         "%s: member %zu ('%.200s') was still held by "
                         "another owner after %u attempts",
                         fn, busy, m->locks[busy]->name, attempt);
  return 0;
}

static int acquire(dlock_multilock_t *m, uint64_t tid, int64_t wait_ms,
                   int64_t lease_ms, const char *fn) {
  int rc = acquire_check(m, tid, wait_ms, lease_ms, fn);
  if (rc)
    return rc;
  int64_t deadline = wait_ms == DLOCK_WAIT_FOREVER ? DLOCK__NEVER
                                                   : dlock__deadline_after(wait_ms);
  size_t first = 0, busy = 0;
  for (unsigned attempt = 1;; attempt++) {
    /* wait for one member holding nothing, then every other one, once */
    rc = dlock_lock_acquire_as(m->locks[first], tid,
                               wait_left(wait_ms, deadline), lease_ms);
    rc = attempt_rest(m, tid, wait_ms, lease_ms, first, rc, &busy, fn);
    if (rc != 1)
      return rc;
    if ((rc = past_deadline(m, deadline, busy, attempt, fn)))
      return rc;
    backoff(deadline);
    first = busy;
  }
}

/* ------------------------------------------------ the async driver
 *
 * The same attempts as acquire(), on the async pool of the first
 * member's client (core/async.h): the wait for one member is that
 * member's own async acquire, run as a step (dlock__lock_acquire_then);
 * the multilock's operation parks until it ends, then tries the other
 * members once on its pool thread, and parks for the back-off between
 * attempts. A cancel is passed on to the member's wait; a member granted
 * all the same is given back, and the outcome is DLOCK_ECANCELED. */
typedef struct multi_aop {
  dlock__aop op;
  dlock_multilock_t *m;
  uint64_t tid;
  int64_t wait_ms, lease_ms, deadline;
  size_t first;
  unsigned attempt;
  bool waiting;  /* a member's wait is in flight */
  bool backing;  /* parked for the back-off */
  int64_t until; /* the back-off's end */
  dlock_op_t member_op;
  /* the member's outcome, written under the client's mu before
   * member_done is set */
  _Atomic bool member_done;
  int member_rc;
  char member_err[512];
} multi_aop;

static const char async_fn[] = "dlock_multilock_acquire_async";
static int release(dlock_multilock_t *m, uint64_t tid, const char *fn);

static void member_then(dlock__aop *inner) {
  multi_aop *o = inner->then_arg;
  struct dlock_client *c = o->op.c;
  pthread_mutex_lock(&c->mu);
  o->member_rc = inner->rc;
  snprintf(o->member_err, sizeof o->member_err, "%s",
           inner->rc < 0 ? dlock__aop_error(inner) : "");
  atomic_store(&o->member_done, true);
  dlock__aop_wake_locked(&o->op);
  pthread_mutex_unlock(&c->mu);
  dlock__aop_free(inner);
}

/* Cancelled, or its client is being freed: the operation ends. */
static bool ending(dlock__aop *op) {
  return atomic_load(&op->cancelled) || dlock__client_stopping(op->c);
}

static int ended(dlock__aop *op) {
  return atomic_load(&op->cancelled)
             ? dlock__seterr(DLOCK_ECANCELED, "%s: cancelled", async_fn)
             : dlock__seterr(DLOCK_ECLOSED, "the client is being freed");
}

static bool member_due(dlock__aop *op, void *arg) {
  multi_aop *o = arg;
  return atomic_load(&o->member_done) || ending(op);
}

static bool member_only_due(dlock__aop *op, void *arg) {
  (void)op;
  return atomic_load(&((multi_aop *)arg)->member_done);
}

static bool backoff_due(dlock__aop *op, void *arg) {
  return ending(op) || dlock__now_ms() >= ((multi_aop *)arg)->until;
}

static void multi_finish(multi_aop *o, int rc) {
  dlock__call_end(o->op.c);
  dlock__aop_complete(&o->op, rc, 0);
}

static void multi_run(dlock__aop *op) {
  multi_aop *o = (multi_aop *)op;
  dlock_multilock_t *m = o->m;
  for (;;) {
    if (!o->waiting) {
      if (o->backing && !backoff_due(op, o) &&
          dlock__aop_park(op, o->until, backoff_due, o))
        return;
      o->backing = false;
      if (ending(op)) {
        multi_finish(o, ended(op));
        return;
      }
      atomic_store(&o->member_done, false);
      int rc = dlock__lock_acquire_then(
          m->locks[o->first], o->tid, wait_left(o->wait_ms, o->deadline),
          o->lease_ms, member_then, o, &o->member_op);
      if (rc) {
        multi_finish(o, rc);
        return;
      }
      o->waiting = true;
    }
    /* the member's wait ends (its then wakes this operation) */
    if (dlock__aop_park(op, DLOCK__NEVER, member_due, o))
      return;
    if (ending(op) && !member_only_due(op, o)) {
      /* passed on; its end wakes this operation */
      dlock_op_cancel(m->locks[o->first]->client, o->member_op);
      if (dlock__aop_park(op, DLOCK__NEVER, member_only_due, o))
        return;
    }
    o->waiting = false;
    int rc = o->member_rc;
    if (rc)
      dlock__seterr(rc, "%s", o->member_err);
    if (ending(op)) {
      if (rc == 0) { /* granted all the same: given back */
        m->held[o->first] = true;
        m->owner = o->tid;
        release_taken(m, o->tid, async_fn);
      }
      multi_finish(o, ended(op));
      return;
    }
    size_t busy = 0;
    rc = attempt_rest(m, o->tid, o->wait_ms, o->lease_ms, o->first, rc, &busy,
                      async_fn);
    if (rc == 1)
      rc = past_deadline(m, o->deadline, busy, o->attempt, async_fn);
    else if (rc == 0) {
      multi_finish(o, 0);
      return;
    }
    if (rc) { /* an error, or the deadline passed */
      multi_finish(o, rc);
      return;
    }
    o->attempt++;
    o->first = busy;
    o->backing = true;
    o->until = dlock__now_ms() + backoff_ms(o->deadline);
  }
}

static void multi_free(dlock__aop *op) { dlock__free(op); }

int dlock_multilock_acquire_async(dlock_multilock_t *m, uint64_t tid,
                                  int64_t wait_ms, int64_t lease_ms,
                                  dlock_done_fn done, void *userdata,
                                  dlock_op_t *id) {
  if (id)
    *id = 0;
  if (!done)
    return dlock__seterr(DLOCK_EINVAL, "%s: done is NULL", async_fn);
  if (tid == 0)
    tid = dlock_thread_id();
  int rc = acquire_check(m, tid, wait_ms, lease_ms, async_fn);
  if (rc)
    return rc;
  struct dlock_client *c = m->locks[0]->client;
  if ((rc = dlock__call_begin(c, async_fn)))
    return rc;
  multi_aop *o = dlock__calloc(1, sizeof *o);
  if (!o) {
    dlock__call_end(c);
    return DLOCK_ENOMEM;
  }
  o->m = m;
  o->tid = tid;
  o->wait_ms = wait_ms;
  o->lease_ms = lease_ms;
  o->deadline = wait_ms == DLOCK_WAIT_FOREVER ? DLOCK__NEVER
                                              : dlock__deadline_after(wait_ms);
  o->attempt = 1;
  o->op.run = multi_run;
  o->op.free_fn = multi_free;
  o->op.done = done;
  o->op.userdata = userdata;
  if ((rc = dlock__aop_start(c, &o->op, id))) {
    dlock__free(o);
    dlock__call_end(c);
  }
  return rc;
}

typedef struct multi_rel {
  dlock_multilock_t *m;
  uint64_t tid;
  struct dlock_client *c;
} multi_rel;

static int multi_rel_call(void *arg, int64_t *value) {
  multi_rel *r = arg;
  (void)value;
  int rc = release(r->m, r->tid, "dlock_multilock_release_async");
  dlock__call_end(r->c);
  return rc;
}

int dlock_multilock_release_async(dlock_multilock_t *m, uint64_t tid,
                                  dlock_done_fn done, void *userdata,
                                  dlock_op_t *id) {
  static const char fn[] = "dlock_multilock_release_async";
  if (id)
    *id = 0;
  if (!done)
    return dlock__seterr(DLOCK_EINVAL, "%s: done is NULL", fn);
  int rc = check(m, fn);
  if (rc)
    return rc;
  multi_rel r = {m, tid ? tid : dlock_thread_id(), m->locks[0]->client};
  if ((rc = dlock__call_begin(r.c, fn)))
    return rc;
  if ((rc = dlock__aop_call(r.c, multi_rel_call, &r, sizeof r, done, userdata,
                            id)))
    dlock__call_end(r.c);
  return rc;
}

int dlock_multilock_acquire(dlock_multilock_t *m, int64_t wait_ms,
                            int64_t lease_ms) {
  return acquire(m, dlock_thread_id(), wait_ms, lease_ms,
                 "dlock_multilock_acquire");
}

int dlock_multilock_acquire_as(dlock_multilock_t *m, uint64_t thread_id,
                               int64_t wait_ms, int64_t lease_ms) {
  return acquire(m, thread_id, wait_ms, lease_ms, "dlock_multilock_acquire_as");
}

static int release(dlock_multilock_t *m, uint64_t tid, const char *fn) {
  int rc = check(m, fn);
  if (!rc && tid == 0)
    rc = dlock__seterr(DLOCK_EINVAL, "%s: thread id 0 is not valid", fn);
  if (rc)
    return rc;
  if (any_held(m) && m->owner != tid)
    return dlock__seterr(DLOCK_ENOTOWNER,
                         "%s: this multilock is held by another thread",
                         fn);
  bool any = false;
  int first_err = 0, lost = 0;
  char detail[512] = "";
  for (size_t i = m->n; i-- > 0;) {
    if (!m->held[i])
      continue;
    any = true;
    int r = dlock_lock_release_as(m->locks[i], tid);
    if (release_settled(r))
      m->held[i] = false; /* else kept: a retry releases it */
    if (r == DLOCK_ELOST && !lost) {
      lost = r;
      snprintf(detail, sizeof detail, "%s: member %zu: %s", fn, i,
               dlock_last_error());
    } else if (r && r != DLOCK_ELOST && !first_err) {
      first_err = r;
      if (!lost)
        snprintf(detail, sizeof detail, "%s: member %zu: %s", fn, i,
                 dlock_last_error());
    }
  }
  if (!any_held(m))
    m->owner = 0;
  if (!any)
    return dlock__seterr(DLOCK_ENOTOWNER,
                         "%s: this multilock is not held (by this thread)", fn);
  if (lost)
    return dlock__seterr(DLOCK_ELOST, "%s", detail);
  if (first_err)
    return dlock__seterr(first_err, "%s", detail);
  return 0;
}

int dlock_multilock_release(dlock_multilock_t *m) {
  return release(m, dlock_thread_id(), "dlock_multilock_release");
}

int dlock_multilock_release_as(dlock_multilock_t *m, uint64_t thread_id) {
  return release(m, thread_id, "dlock_multilock_release_as");
}
