/*
 * semaphore.c - the counting semaphore (dlock_semaphore_*, Redisson's
 * RSemaphore) and the permit semaphore (dlock_permit_sem_*, Redisson's
 * RPermitExpirableSemaphore). Both keep their available count in the key
 * `name` and announce changes; the backend owns the layout.
 *
 * Waiting (sync.c): the backend wakes the waits a release may satisfy
 * (Redis: the new count it publishes wakes, oldest first, those of this
 * client's waiters whose requests fit in it); the woken retry, and those
 * that lose the race sleep again. A permit semaphore's waiter also
 * never sleeps past the earliest expiry among the permits in use: its own
 * retry is what returns a crashed holder's permit to the count.
 *
 * Permits: ids are 16 random bytes in hex, made here. A permit with a
 * watchdog lease is recorded as a hold (DLOCK__HK_PERMIT, tid 0) that the
 * renewer extends until release; a fixed-lease permit is recorded too (not
 * renewed) so that its release can tell DLOCK_ELOST (it expired) from
 * DLOCK_ENOTOWNER (never ours). Holds live under client->mu; no backend
 * call is made with it held.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/async.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/holds.h"
#include "core/session.h"
#include "core/sync.h"

/* ------------------------------------------------------------ shared */

static int wrongtype(int rc, const dlock__sync *h, const char *fn) {
  if (rc == DLOCK_EWRONGTYPE)
    return dlock__seterr(rc,
                         "%s: key '%.200s' holds a value of another type (not "
                         "a semaphore)",
                         fn, h->name);
  return rc;
}

static int try_set(dlock__sync *h, uint32_t magic, int64_t permits, bool *set,
                   const char *fn) {
  if (set)
    *set = false;
  if (permits < 0)
    return dlock__seterr(DLOCK_EINVAL, "%s: permits must be >= 0", fn);
  int rc = dlock__sync_call_begin(h, magic, "semaphore", fn);
  if (rc)
    return rc;
  bool done = false;
  rc = h->client->ops->sem_set(h->client->be, h->name, permits, &done);
  if (!rc && set)
    *set = done;
  return dlock__sync_call_end(h, wrongtype(rc, h, fn));
}

static int add(dlock__sync *h, uint32_t magic, int64_t n, const char *fn) {
  int rc = dlock__sync_call_begin(h, magic, "semaphore", fn);
  if (rc)
    return rc;
  rc = h->client->ops->sem_add(h->client->be, h->name, n);
  return dlock__sync_call_end(h, wrongtype(rc, h, fn));
}

static int available(dlock__sync *h, uint32_t magic, int64_t *out,
                     const char *fn) {
  if (!out)
    return dlock__seterr(DLOCK_EINVAL, "%s: out is NULL", fn);
  *out = 0;
  int rc = dlock__sync_call_begin(h, magic, "semaphore", fn);
  if (rc)
    return rc;
  rc = h->client->ops->sem_available(h->client->be, h->kind, h->name, out);
  return dlock__sync_call_end(h, wrongtype(rc, h, fn));
}

/* --------------------------------------------------------- semaphore */

static dlock__sync *sem_h(const dlock_semaphore_t *s) {
  return s ? (dlock__sync *)&s->h : NULL;
}

int dlock_semaphore_new(dlock_client_t *c, const char *name,
                        dlock_semaphore_t **out) {
  if (!out)
    return dlock__seterr(DLOCK_EINVAL, "dlock_semaphore_new: out is NULL");
  dlock__sync *h = NULL;
  int rc = dlock__sync_new(c, name, DLOCK__SYNC_SEM, DLOCK__SEM_MAGIC,
                           "dlock_semaphore_new", &h);
  *out = (dlock_semaphore_t *)h;
  return rc;
}

void dlock_semaphore_free(dlock_semaphore_t *s) {
  dlock__sync_free(sem_h(s), DLOCK__SEM_MAGIC, NULL);
}

const char *dlock_semaphore_name(const dlock_semaphore_t *s) {
  if (!s || s->h.magic != DLOCK__SEM_MAGIC)
    return "";
  return s->h.name;
}

int dlock_semaphore_try_set_permits(dlock_semaphore_t *s, int64_t permits,
                                    bool *set) {
  return try_set(sem_h(s), DLOCK__SEM_MAGIC, permits, set,
                 "dlock_semaphore_try_set_permits");
}

int dlock_semaphore_add_permits(dlock_semaphore_t *s, int64_t n) {
  return add(sem_h(s), DLOCK__SEM_MAGIC, n, "dlock_semaphore_add_permits");
}

typedef struct sem_try {
  dlock__sync *h;
  int64_t permits;
  int64_t wait_ms;
  const char *fn;
} sem_try;

static int sem_attempt(void *ctx, int64_t *bound) {
  sem_try *t = ctx;
  *bound = -1; /* permits come back by release only: no expiry to wait for */
  return t->h->client->ops->sem_acquire(t->h->client->be, t->h->name,
                                        t->permits);
}

/* The acquire's outcome (1 taken, 0 not in time, or the error), worded,
 * and the call's end. */
static int sem_finish(void *ctx, int rc, int64_t *value) {
  sem_try *t = ctx;
  dlock__sync *h = t->h;
  (void)value;
  if (rc == 0)
    rc = dlock__seterr(t->wait_ms == 0 ? DLOCK_EBUSY : DLOCK_ETIMEDOUT,
                       "semaphore '%.200s': %s %" PRId64 " permit(s)", h->name,
                       t->wait_ms == 0 ? "fewer available than"
                                       : "timed out waiting for",
                       t->permits);
  return dlock__sync_call_end(h, rc == 1 ? 0 : wrongtype(rc, h, t->fn));
}

/* The checks of an acquire and its call's start. */
static int sem_begin(dlock_semaphore_t *s, int64_t permits, int64_t wait_ms,
                     const char *fn, sem_try *t) {
  if (permits < 1)
    return dlock__seterr(DLOCK_EINVAL, "%s: permits must be >= 1", fn);
  int rc = dlock__check_wait(wait_ms, fn);
  if (rc)
    return rc;
  dlock__sync *h = sem_h(s);
  if ((rc = dlock__sync_call_begin(h, DLOCK__SEM_MAGIC, "semaphore", fn)))
    return rc;
  *t = (sem_try){h, permits, wait_ms, fn};
  return 0;
}

int dlock_semaphore_acquire(dlock_semaphore_t *s, int64_t permits,
                            int64_t wait_ms) {
  sem_try t = {0};
  int rc = sem_begin(s, permits, wait_ms, "dlock_semaphore_acquire", &t);
  if (rc)
    return rc;
  int64_t deadline = dlock__deadline_after(wait_ms);
  int64_t bound;
  dlock__err_set_unsent(false);
  rc = sem_attempt(&t, &bound);
  /* an outage does not end a wait (dlock__wait_retry) */
  if ((rc == 0 || dlock__sync_rides_out(rc, deadline)) && wait_ms != 0)
    rc = dlock__sync_wait(t.h, permits, NULL, deadline, sem_attempt, &t);
  return sem_finish(&t, rc, NULL);
}

int dlock_semaphore_acquire_async(dlock_semaphore_t *s, int64_t permits,
                                  int64_t wait_ms, dlock_done_fn done,
                                  void *userdata, dlock_op_t *id) {
  const char *fn = "dlock_semaphore_acquire_async";
  if (id)
    *id = 0;
  if (!done)
    return dlock__seterr(DLOCK_EINVAL, "%s: done is NULL", fn);
  sem_try t = {0};
  int rc = sem_begin(s, permits, wait_ms, fn, &t);
  if (rc)
    return rc;
  if ((rc = dlock__sync_async(t.h, permits, NULL, wait_ms, sem_attempt,
                              sem_finish, &t, sizeof t, done, userdata, id)) !=
      0)
    return dlock__sync_call_end(t.h, rc);
  return 0;
}

static int sem_release_call(void *arg, int64_t *value) {
  sem_try *t = arg;
  (void)value;
  dlock__sync *h = t->h;
  int rc = h->client->ops->sem_release(h->client->be, h->name, t->permits);
  return dlock__sync_call_end(h, wrongtype(rc, h, t->fn));
}

static int sem_release_begin(dlock_semaphore_t *s, int64_t permits,
                             const char *fn, sem_try *t) {
  if (permits < 1)
    return dlock__seterr(DLOCK_EINVAL, "%s: permits must be >= 1", fn);
  dlock__sync *h = sem_h(s);
  int rc = dlock__sync_call_begin(h, DLOCK__SEM_MAGIC, "semaphore", fn);
  if (!rc)
    *t = (sem_try){h, permits, 0, fn};
  return rc;
}

int dlock_semaphore_release(dlock_semaphore_t *s, int64_t permits) {
  sem_try t = {0};
  int rc = sem_release_begin(s, permits, "dlock_semaphore_release", &t);
  return rc ? rc : sem_release_call(&t, NULL);
}

int dlock_semaphore_release_async(dlock_semaphore_t *s, int64_t permits,
                                  dlock_done_fn done, void *userdata,
                                  dlock_op_t *id) {
  const char *fn = "dlock_semaphore_release_async";
  if (id)
    *id = 0;
  if (!done)
    return dlock__seterr(DLOCK_EINVAL, "%s: done is NULL", fn);
  sem_try t = {0};
  int rc = sem_release_begin(s, permits, fn, &t);
  if (rc)
    return rc;
  if ((rc = dlock__aop_call(t.h->client, sem_release_call, &t, sizeof t, done,
                            userdata, id)) != 0)
    return dlock__sync_call_end(t.h, rc);
  return 0;
}

int dlock_semaphore_available(dlock_semaphore_t *s, int64_t *out) {
  return available(sem_h(s), DLOCK__SEM_MAGIC, out,
                   "dlock_semaphore_available");
}

static int delete_sem(dlock__sync *h, uint32_t magic, bool *existed,
                      const char *fn) {
  if (existed)
    *existed = false;
  int rc = dlock__sync_call_begin(h, magic, "semaphore", fn);
  if (rc)
    return rc;
  bool was = false;
  rc = h->client->ops->sem_delete(h->client->be, h->kind, h->name, &was);
  if (!rc && existed)
    *existed = was;
  return dlock__sync_call_end(h, rc);
}

int dlock_semaphore_delete(dlock_semaphore_t *s, bool *existed) {
  return delete_sem(sem_h(s), DLOCK__SEM_MAGIC, existed,
                    "dlock_semaphore_delete");
}

/* -------------------------------------------------- permit semaphore */

static dlock__sync *psem_h(const dlock_permit_sem_t *s) {
  return s ? (dlock__sync *)&s->h : NULL;
}

int dlock_permit_sem_new(dlock_client_t *c, const char *name,
                         dlock_permit_sem_t **out) {
  if (!out)
    return dlock__seterr(DLOCK_EINVAL, "dlock_permit_sem_new: out is NULL");
  dlock__sync *h = NULL;
  int rc = dlock__sync_new(c, name, DLOCK__SYNC_PERMIT, DLOCK__PSEM_MAGIC,
                           "dlock_permit_sem_new", &h);
  *out = (dlock_permit_sem_t *)h;
  return rc;
}

/* The last permit semaphore handle on `name` is gone (mu held): its
 * permits are forgotten, so watchdog permits stop being renewed and
 * expire on the server, as a lock's holds do when its last handle goes. */
static void drop_orphan_permits_locked(struct dlock_client *c,
                                       const char *name) {
  for (dlock__sync *o = c->syncs; o; o = o->next)
    if (o->magic == DLOCK__PSEM_MAGIC && strcmp(o->name, name) == 0)
      return;
  dlock__holds_drop_locked(c, name, true);
}

void dlock_permit_sem_free(dlock_permit_sem_t *s) {
  dlock__sync_free(psem_h(s), DLOCK__PSEM_MAGIC, drop_orphan_permits_locked);
}

const char *dlock_permit_sem_name(const dlock_permit_sem_t *s) {
  if (!s || s->h.magic != DLOCK__PSEM_MAGIC)
    return "";
  return s->h.name;
}

int dlock_permit_sem_try_set_permits(dlock_permit_sem_t *s, int64_t permits,
                                     bool *set) {
  return try_set(psem_h(s), DLOCK__PSEM_MAGIC, permits, set,
                 "dlock_permit_sem_try_set_permits");
}

int dlock_permit_sem_add_permits(dlock_permit_sem_t *s, int64_t n) {
  return add(psem_h(s), DLOCK__PSEM_MAGIC, n, "dlock_permit_sem_add_permits");
}

typedef struct psem_try {
  dlock__sync *h;
  const char *id; /* the permit id this acquire asks for */
  int64_t lease;
  int64_t since; /* when the attempt that took the permit was sent */
  int64_t wait_ms;
  bool watchdog;
  const char *fn;
} psem_try;

static int psem_attempt(void *ctx, int64_t *bound) {
  psem_try *t = ctx;
  t->since = dlock__now_ms();
  return t->h->client->ops->psem_acquire(t->h->client->be, t->h->name, t->id,
                                         t->lease, bound);
}

/* The checks of a permit acquire, its call's start and its id (into
 * id, DLOCK__HEX_ID_LEN + 1 bytes). */
static int psem_begin(dlock_permit_sem_t *s, int64_t wait_ms, int64_t lease_ms,
                      const char *fn, char *id, psem_try *t) {
  int rc = dlock__check_wait(wait_ms, fn);
  if (rc)
    return rc;
  if ((rc = dlock__check_lease(lease_ms, fn)))
    return rc;
  dlock__sync *h = psem_h(s);
  if ((rc = dlock__sync_call_begin(h, DLOCK__PSEM_MAGIC, "permit semaphore",
                                   fn)))
    return rc;
  if ((rc = dlock__hex_id(id)))
    return dlock__sync_call_end(h, rc);
  bool watchdog = lease_ms == DLOCK_LEASE_WATCHDOG;
  *t = (psem_try){.h = h,
                  .id = id,
                  .lease = watchdog ? h->client->opts.watchdog_ms : lease_ms,
                  .wait_ms = wait_ms,
                  .watchdog = watchdog,
                  .fn = fn};
  return 0;
}

/* The acquire's outcome (1 taken, 0 not in time, or the error): the
 * permit recorded as a hold, the detail worded, the call ended. */
static int psem_finish(void *ctx, int rc, int64_t *value) {
  psem_try *t = ctx;
  dlock__sync *h = t->h;
  struct dlock_client *c = h->client;
  (void)value;
  if (rc == 0)
    rc = dlock__seterr(t->wait_ms == 0 ? DLOCK_EBUSY : DLOCK_ETIMEDOUT,
                       "permit semaphore '%.200s': %s", h->name,
                       t->wait_ms == 0 ? "no permit available"
                                       : "timed out waiting for a permit");
  if (rc < 0)
    return dlock__sync_call_end(h, wrongtype(rc, h, t->fn));
  pthread_mutex_lock(&c->mu);
  dlock__hold *hd = dlock__hold_acquired_locked(
      c, DLOCK__HK_PERMIT, h->name, 0, t->id, t->lease, t->watchdog, t->since);
  pthread_mutex_unlock(&c->mu);
  if (!hd && t->watchdog) {
    /* it would never be renewed: give it back rather than lose it later */
    c->ops->psem_release(c->be, h->name, t->id);
    return dlock__sync_call_end(h, DLOCK_ENOMEM);
  }
  return dlock__sync_call_end(h, 0);
}

int dlock_permit_sem_acquire(dlock_permit_sem_t *s, int64_t wait_ms,
                             int64_t lease_ms, char *id) {
  const char *fn = "dlock_permit_sem_acquire";
  if (!id)
    return dlock__seterr(DLOCK_EINVAL, "%s: id is NULL", fn);
  id[0] = '\0';
  char pid[DLOCK__HEX_ID_LEN + 1];
  psem_try t;
  int rc = psem_begin(s, wait_ms, lease_ms, fn, pid, &t);
  if (rc)
    return rc;
  int64_t deadline = dlock__deadline_after(wait_ms);
  int64_t bound;
  dlock__err_set_unsent(false);
  rc = psem_attempt(&t, &bound);
  /* an outage does not end a wait (dlock__wait_retry) */
  if ((rc == 0 || dlock__sync_rides_out(rc, deadline)) && wait_ms != 0)
    rc = dlock__sync_wait(t.h, 1, t.id, deadline, psem_attempt, &t);
  if ((rc = psem_finish(&t, rc, NULL)) == 0)
    memcpy(id, pid, sizeof pid);
  return rc;
}

/* An async permit acquire's own part, handed to the operation as its
 * userdata: the user's callback, and the permit id (the operation's
 * attempts point at it; it outlives them). */
typedef struct psem_async {
  dlock_permit_done_fn done;
  void *userdata;
  char id[DLOCK__HEX_ID_LEN + 1];
} psem_async;

static void psem_async_done(void *userdata, int rc, int64_t value) {
  psem_async *a = userdata;
  (void)value;
  a->done(a->userdata, rc, rc == 0 ? a->id : NULL);
  dlock__free(a);
}

int dlock_permit_sem_acquire_async(dlock_permit_sem_t *s, int64_t wait_ms,
                                   int64_t lease_ms, dlock_permit_done_fn done,
                                   void *userdata, dlock_op_t *op) {
  const char *fn = "dlock_permit_sem_acquire_async";
  if (op)
    *op = 0;
  if (!done)
    return dlock__seterr(DLOCK_EINVAL, "%s: done is NULL", fn);
  psem_async *a = dlock__calloc(1, sizeof *a);
  if (!a)
    return DLOCK_ENOMEM;
  a->done = done;
  a->userdata = userdata;
  psem_try t;
  int rc = psem_begin(s, wait_ms, lease_ms, fn, a->id, &t);
  if (!rc &&
      (rc = dlock__sync_async(t.h, 1, t.id, wait_ms, psem_attempt, psem_finish,
                              &t, sizeof t, psem_async_done, a, op)) != 0)
    rc = dlock__sync_call_end(t.h, rc);
  if (rc)
    dlock__free(a);
  return rc;
}

static bool valid_id(const char *id) {
  for (size_t i = 0; i < DLOCK__HEX_ID_LEN; i++)
    if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
      return false; /* also stops at a NUL before 32 */
  return id[DLOCK__HEX_ID_LEN] == '\0';
}

/* Checks a permit call's id and begins the call on the semaphore's
 * handle (*h); 0 or the error (detail set). */
static int permit_call_begin(dlock_permit_sem_t *s, const char *id,
                             const char *fn, dlock__sync **h) {
  if (!id)
    return dlock__seterr(DLOCK_EINVAL, "%s: id is NULL", fn);
  if (!valid_id(id))
    return dlock__seterr(DLOCK_EINVAL,
                         "%s: a permit id is %d lowercase hex digits", fn,
                         DLOCK__HEX_ID_LEN);
  *h = psem_h(s);
  return dlock__sync_call_begin(*h, DLOCK__PSEM_MAGIC, "permit semaphore", fn);
}

int dlock_permit_sem_permit_valid(dlock_permit_sem_t *s, const char *id,
                                  int64_t *valid_ms) {
  const char *fn = "dlock_permit_sem_permit_valid";
  if (!valid_ms)
    return dlock__seterr(DLOCK_EINVAL, "%s: valid_ms is NULL", fn);
  *valid_ms = 0;
  dlock__sync *h = NULL;
  int rc = permit_call_begin(s, id, fn, &h);
  if (rc)
    return rc;
  struct dlock_client *c = h->client;
  int64_t until = 0;
  pthread_mutex_lock(&c->mu);
  dlock__hold *hd =
      dlock__hold_find_locked(c, DLOCK__HK_PERMIT, h->name, 0, id);
  bool held = hd != NULL;
  bool lost = hd && hd->lost;
  if (held && c->ops->lock_renew)
    until = dlock__hold_vouch_until_locked(c, hd);
  pthread_mutex_unlock(&c->mu);
  if (!held)
    return dlock__sync_call_end(
        h, dlock__seterr(DLOCK_ENOTOWNER,
                         "permit %s of '%.200s' is not held by this client",
                         id, h->name));
  if (!c->ops->lock_renew) {
    if (dlock__session_valid_until(c, &until) != 0)
      lost = true;
  }
  *valid_ms = until - dlock__now_ms();
  if (lost && *valid_ms > 0)
    rc = dlock__seterr(DLOCK_ELOST,
                       "permit %s of '%.200s' was lost (%lld ms before its "
                       "lease would have run out)",
                       id, h->name, (long long)*valid_ms);
  else if (*valid_ms <= 0)
    rc = dlock__seterr(DLOCK_ELOST,
                       "permit %s of '%.200s': its lease was last confirmed "
                       "too long ago (lapsed %lld ms ago)",
                       id, h->name, (long long)-*valid_ms);
  return dlock__sync_call_end(h, rc);
}

/* A permit's release, its call begun (permit_call_begin): sends it,
 * updates the permit's hold, and ends the call. */
static int psem_release(dlock__sync *h, const char *id, const char *fn) {
  int rc;
  struct dlock_client *c = h->client;
  pthread_mutex_lock(&c->mu);
  dlock__hold *hd =
      dlock__hold_find_locked(c, DLOCK__HK_PERMIT, h->name, 0, id);
  if (hd) /* a renewal that meets our release is not a loss */
    dlock__hold_release_begin_locked(c, hd);
  pthread_mutex_unlock(&c->mu);

  /* A release whose reply was lost is sent once more; the second one
   * finding the id gone means the first one released it. */
  bool retried = false;
  int out = c->ops->psem_release(c->be, h->name, id);
  if (out == DLOCK_EUNAVAILABLE || out == DLOCK_EIOTIMEOUT) {
    retried = true;
    out = c->ops->psem_release(c->be, h->name, id);
  }

  pthread_mutex_lock(&c->mu);
  hd = dlock__hold_find_locked(c, DLOCK__HK_PERMIT, h->name, 0, id);
  dlock__hold_release_end_locked(c, hd);
  if (out < 0) {
    rc = wrongtype(out, h, fn);
  } else if (out == 0 && !(hd && retried)) {
    rc = hd ? dlock__seterr(DLOCK_ELOST,
                            "permit %s of '%.200s' expired before its release "
                            "(lease ran out, or it was reclaimed)",
                            id, h->name)
            : dlock__seterr(DLOCK_ENOTOWNER,
                            "permit %s of '%.200s' is not in use", id, h->name);
    if (hd)
      dlock__hold_remove_locked(c, hd);
  } else if (hd && hd->lost) {
    /* released, but the client had already reported it lost (its lease
     * could not be confirmed in time): the caller was told; say so again */
    dlock__hold_remove_locked(c, hd);
    rc = dlock__seterr(DLOCK_ELOST,
                       "permit %s of '%.200s' was reported lost before this "
                       "release",
                       id, h->name);
  } else {
    if (hd)
      dlock__hold_remove_locked(c, hd);
    rc = 0;
  }
  pthread_mutex_unlock(&c->mu);
  return dlock__sync_call_end(h, rc);
}

int dlock_permit_sem_release(dlock_permit_sem_t *s, const char *id) {
  const char *fn = "dlock_permit_sem_release";
  dlock__sync *h = NULL;
  int rc = permit_call_begin(s, id, fn, &h);
  return rc ? rc : psem_release(h, id, fn);
}

typedef struct psem_rel {
  dlock__sync *h;
  char id[DLOCK__HEX_ID_LEN + 1];
} psem_rel;

static int psem_release_call(void *arg, int64_t *value) {
  psem_rel *r = arg;
  (void)value;
  return psem_release(r->h, r->id, "dlock_permit_sem_release_async");
}

int dlock_permit_sem_release_async(dlock_permit_sem_t *s, const char *id,
                                   dlock_done_fn done, void *userdata,
                                   dlock_op_t *op) {
  const char *fn = "dlock_permit_sem_release_async";
  if (op)
    *op = 0;
  if (!done)
    return dlock__seterr(DLOCK_EINVAL, "%s: done is NULL", fn);
  psem_rel r = {0};
  int rc = permit_call_begin(s, id, fn, &r.h);
  if (rc)
    return rc;
  memcpy(r.id, id, sizeof r.id);
  if ((rc = dlock__aop_call(r.h->client, psem_release_call, &r, sizeof r, done,
                            userdata, op)) != 0)
    return dlock__sync_call_end(r.h, rc);
  return 0;
}

int dlock_permit_sem_delete(dlock_permit_sem_t *s, bool *existed) {
  return delete_sem(psem_h(s), DLOCK__PSEM_MAGIC, existed,
                    "dlock_permit_sem_delete");
}

int dlock_permit_sem_available(dlock_permit_sem_t *s, int64_t *out) {
  return available(psem_h(s), DLOCK__PSEM_MAGIC, out,
                   "dlock_permit_sem_available");
}

int dlock_permit_sem_state(dlock_permit_sem_t *s, dlock_sem_state_t **out) {
  const char *fn = "dlock_permit_sem_state";
  if (!out)
    return dlock__seterr(DLOCK_EINVAL, "%s: out is NULL", fn);
  *out = NULL;
  dlock__sync *h = psem_h(s);
  int rc = dlock__sync_call_begin(h, DLOCK__PSEM_MAGIC, "permit semaphore", fn);
  if (rc)
    return rc;
  rc = h->client->ops->psem_state(h->client->be, h->name, out);
  return dlock__sync_call_end(h, wrongtype(rc, h, fn));
}

void dlock_sem_state_free(dlock_sem_state_t *st) {
  if (!st)
    return;
  for (size_t i = 0; st->permits && i < st->npermits; i++)
    dlock__free((void *)st->permits[i].id);
  for (size_t i = 0; st->permit_infos && i < st->npermits; i++)
    dlock__free((void *)st->permit_infos[i]);
  dlock__free(st->permit_infos);
  dlock__free(st->permits);
  dlock__free((void *)st->name);
  dlock__free(st);
}
