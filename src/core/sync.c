/*
 * sync.c - handles and waiting shared by semaphores, permit semaphores and
 * latches (see sync.h).
 *
 * Handles: one struct for the three kinds, linked in client->syncs under
 * client->mu so that dlock_client_free() frees those left over; the magic
 * says which public type a handle is, so a latch passed as a semaphore is
 * DLOCK_EBADHANDLE, not a crash.
 *
 * Waiting: the discipline of lock.c without its hand-off queue. The caller
 * made one attempt that failed; the wait registers with the backend, arms
 * its wake-up path, waits until it is armed (at most one command timeout),
 * and only then attempts again, so a release between the failed attempt
 * and the arming cannot be missed. Afterwards it sleeps until the backend
 * says "try again" (Redis: semaphores wake, oldest first, the waiters whose
 * wants fit in the new count; latches wake all; a reconnect wakes all), the
 * attempt's bound (a permit semaphore's earliest expiry) or the deadline.
 * Threads: any caller thread; client->mu is taken only inside the wait and
 * handle-list calls, never across a backend call.
 */
#include "core/sync.h"

#include <stdatomic.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"

int dlock__sync_new(struct dlock_client *c, const char *name,
                    dlock__sync_kind kind, uint32_t magic, const char *fn,
                    dlock__sync **out) {
  *out = NULL;
  int rc = dlock__client_check(c, fn);
  if (!rc)
    rc = dlock__check_name(name, fn);
  static const char *const kind_names[] = {
      "semaphores", "permit semaphores", "count-down latches"};
  if (!rc)
    rc = dlock__need_kind(c, c->ops->sync_kinds & (1u << kind),
                          kind_names[kind]);
  if (rc)
    return rc;
  dlock__sync *h = dlock__calloc(1, sizeof *h);
  if (!h || !(h->name = dlock__strdup(name))) {
    dlock__free(h);
    return DLOCK_ENOMEM;
  }
  h->magic = magic;
  h->kind = kind;
  h->client = c;
  pthread_mutex_lock(&c->mu);
  h->next = c->syncs;
  if (c->syncs)
    c->syncs->prev = h;
  c->syncs = h;
  pthread_mutex_unlock(&c->mu);
  *out = h;
  return 0;
}

void dlock__sync_free(dlock__sync *h, uint32_t magic,
                      void (*name_gone)(struct dlock_client *c,
                                        const char *name)) {
  if (!h || h->magic != magic)
    return;
  struct dlock_client *c = h->client;
  if (c->magic == DLOCK__CLIENT_MAGIC) {
    /* in a forked child the mutex may be held by a thread that is not
     * there: this copy of the client has no other user, so skip it */
    bool forked = dlock__client_check(c, "free") == DLOCK_ECLOSED;
    if (!forked)
      pthread_mutex_lock(&c->mu);
    /* under mu: other threads read the magic of the handles on the list
     * (drop_orphan_permits_locked) */
    h->magic = DLOCK__DEAD_MAGIC;
    if (h->prev)
      h->prev->next = h->next;
    else
      c->syncs = h->next;
    if (h->next)
      h->next->prev = h->prev;
    if (name_gone)
      name_gone(c, h->name);
    if (!forked)
      pthread_mutex_unlock(&c->mu);
  } else {
    h->magic = DLOCK__DEAD_MAGIC;
  }
  dlock__free(h->name);
  dlock__free(h);
}

int dlock__sync_call_begin(const dlock__sync *h, uint32_t magic,
                           const char *what, const char *fn) {
  if (!h)
    return dlock__seterr(DLOCK_EINVAL, "%s: %s is NULL", fn, what);
  if (h->magic != magic)
    return dlock__seterr(DLOCK_EBADHANDLE, "%s: %s handle is not live", fn,
                         what);
  return dlock__call_begin(h->client, fn);
}

int dlock__sync_call_end(const dlock__sync *h, int rc) {
  dlock__call_end(h->client);
  return rc;
}

static _Atomic uint64_t wait_seq; /* tells one wait from the next */

bool dlock__sync_rides_out(int rc, int64_t deadline) {
  return dlock__wait_outage(rc) && dlock__now_ms() < deadline;
}

int dlock__sync_wait(dlock__sync *h, int64_t need, int64_t deadline,
                     dlock__sync_attempt_fn attempt, void *ctx) {
  struct dlock_client *c = h->client;
  dlock__wait w;
  dlock__wait_spec spec = {.sync = true,
                           .sync_kind = h->kind,
                           .name = h->name,
                           .tid = dlock_thread_id(),
                           .seq = atomic_fetch_add(&wait_seq, 1) + 1,
                           .need = need > 0 ? need : 1};
  int rc = dlock__wait_begin(c, &w, &spec);
  if (rc)
    return rc;
  if (!dlock__wait_arm(&w, false)) {
    int64_t sub_deadline = dlock__deadline_after(c->opts.command_timeout_ms);
    if (sub_deadline > deadline)
      sub_deadline = deadline;
    /* not subscribed by then: attempt anyway; the confirmation, when it
     * comes, wakes this waiter for another attempt */
    dlock__wait_await_ready(&w, sub_deadline);
    rc = dlock__wait_error(&w);
  }
  dlock__outage outage = {0, 0}; /* attempts failed in an outage */
  while (rc == 0) {
    if (dlock__client_stopping(c)) {
      rc = dlock__seterr(DLOCK_ECLOSED, "the client is being freed");
      break;
    }
    int64_t bound = -1;
    dlock__err_set_unsent(false);
    if ((rc = attempt(ctx, &bound)) != 0) {
      if (!dlock__wait_retry(&w, rc, deadline, &outage))
        break;
      rc = 0; /* rode out: try again */
      continue;
    }
    dlock__wait_recovered(&w, &outage);
    int64_t now = dlock__now_ms();
    if (now >= deadline)
      break;
    int64_t until = deadline;
    if (bound >= 0 && bound < until - now) /* no overflow on a huge bound */
      until = now + (bound > 0 ? bound : 1);
    dlock__wait_sleep(&w, until);
  }
  dlock__wait_end(&w);
  return rc;
}
