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

static void backoff(int64_t deadline) {
  uint32_t r = 0;
  if (dlock__random_bytes(&r, sizeof r) != 0)
    r = (uint32_t)dlock__now_ms();
  int64_t ms = 1 + (int64_t)(r % BACKOFF_MAX_MS);
  int64_t now = dlock__now_ms();
  if (deadline != DLOCK__NEVER && now + ms > deadline)
    ms = deadline > now ? deadline - now : 0;
  dlock__sleep_ms(ms);
}

static int acquire(dlock_multilock_t *m, uint64_t tid, int64_t wait_ms,
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
  int64_t deadline = wait_ms == DLOCK_WAIT_FOREVER ? DLOCK__NEVER
                                                   : dlock__deadline_after(wait_ms);
  size_t first = 0;
  for (unsigned attempt = 1;; attempt++) {
    /* wait for one member holding nothing */
    int64_t now = dlock__now_ms();
    int64_t w = wait_ms == 0                ? 0
                : deadline == DLOCK__NEVER ? DLOCK_WAIT_FOREVER
                : deadline > now           ? deadline - now
                                           : 0;
    rc = dlock_lock_acquire_as(m->locks[first], tid, w, lease_ms);
    if (rc == DLOCK_EBUSY && wait_ms != 0)
      return dlock__seterr(DLOCK_ETIMEDOUT,
                           "%s: member %zu ('%.200s') was held by another "
                           "owner for the rest of the wait",
                           fn, first, m->locks[first]->name);
    if (rc)
      return rc;
    m->held[first] = true;
    m->owner = tid;
    /* then every other one, once */
    size_t busy = m->n;
    for (size_t i = 0; i < m->n && busy == m->n; i++) {
      if (i == first)
        continue;
      rc = dlock_lock_acquire_as(m->locks[i], tid, 0, lease_ms);
      if (rc == 0)
        m->held[i] = true;
      else if (rc == DLOCK_EBUSY)
        busy = i;
      else {
        dlock__preferr(rc, "%s: member %zu ('%.200s')", fn, i,
                       m->locks[i]->name);
        int rel = release_taken(m, tid, fn);
        return rel ? rel : rc;
      }
    }
    if (busy == m->n)
      return 0;
    if ((rc = release_taken(m, tid, fn)))
      return rc;
    if (wait_ms == 0)
      return dlock__seterr(DLOCK_EBUSY,
                           "%s: member %zu ('%.200s') is held by another "
                           "owner",
                           fn, busy, m->locks[busy]->name);
    if (deadline != DLOCK__NEVER && dlock__now_ms() >= deadline)
      return dlock__seterr(DLOCK_ETIMEDOUT,
                           "%s: member %zu ('%.200s') was still held by "
                           "another owner after %u attempts",
                           fn, busy, m->locks[busy]->name, attempt);
    backoff(deadline);
    first = busy;
  }
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
