/*
 * latch.c - the count-down latch (dlock_latch_*, Redisson's
 * RCountDownLatch): a count in the key `name`, deleted when it reaches
 * zero; an absent latch counts as zero.
 *
 * Await: one read of the count; if it is above zero, wait (sync.c): the
 * backend wakes every waiter of this client on any change (Redis: any
 * message on the latch's channel, "0" reached zero or "1" a new count);
 * each reads the count again, and those that still see it above zero sleep
 * on. A lost wake-up path (a pub/sub reconnect) wakes them all too, so a
 * message lost with the connection costs one read, not a stranded waiter.
 * There is no expiry to bound the sleep: only a wake-up or the deadline
 * ends it.
 */
#include <inttypes.h>

#include "core/async.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/sync.h"

static dlock__sync *latch_h(const dlock_latch_t *l) {
  return l ? (dlock__sync *)&l->h : NULL;
}

static int begin(dlock__sync *h, const char *fn) {
  return dlock__sync_call_begin(h, DLOCK__LATCH_MAGIC, "latch", fn);
}

static int wrongtype(int rc, const dlock__sync *h, const char *fn) {
  if (rc == DLOCK_EWRONGTYPE)
    return dlock__seterr(rc,
                         "%s: key '%.200s' holds a value of another type (not "
                         "a latch)",
                         fn, h->name);
  return rc;
}

int dlock_latch_new(dlock_client_t *c, const char *name, dlock_latch_t **out) {
  if (!out)
    return dlock__seterr(DLOCK_EINVAL, "dlock_latch_new: out is NULL");
  dlock__sync *h = NULL;
  int rc = dlock__sync_new(c, name, DLOCK__SYNC_LATCH, DLOCK__LATCH_MAGIC,
                           "dlock_latch_new", &h);
  *out = (dlock_latch_t *)h;
  return rc;
}

void dlock_latch_free(dlock_latch_t *l) {
  dlock__sync_free(latch_h(l), DLOCK__LATCH_MAGIC, NULL);
}

const char *dlock_latch_name(const dlock_latch_t *l) {
  if (!l || l->h.magic != DLOCK__LATCH_MAGIC)
    return "";
  return l->h.name;
}

int dlock_latch_try_set_count(dlock_latch_t *l, int64_t count, bool *set) {
  const char *fn = "dlock_latch_try_set_count";
  if (set)
    *set = false;
  if (count < 1)
    return dlock__seterr(DLOCK_EINVAL, "%s: count must be >= 1", fn);
  dlock__sync *h = latch_h(l);
  int rc = begin(h, fn);
  if (rc)
    return rc;
  bool done = false;
  rc = h->client->ops->latch_set(h->client->be, h->name, count, &done);
  if (!rc && set)
    *set = done;
  return dlock__sync_call_end(h, wrongtype(rc, h, fn));
}

typedef struct latch_try {
  dlock__sync *h;
  int64_t wait_ms;
  const char *fn;
} latch_try;

static int count_down_call(void *arg, int64_t *value) {
  latch_try *t = arg;
  (void)value;
  dlock__sync *h = t->h;
  int rc = h->client->ops->latch_count_down(h->client->be, h->name);
  return dlock__sync_call_end(h, wrongtype(rc, h, t->fn));
}

int dlock_latch_count_down(dlock_latch_t *l) {
  latch_try t = {latch_h(l), 0, "dlock_latch_count_down"};
  int rc = begin(t.h, t.fn);
  return rc ? rc : count_down_call(&t, NULL);
}

int dlock_latch_count_down_async(dlock_latch_t *l, dlock_done_fn done,
                                 void *userdata, dlock_op_t *id) {
  latch_try t = {latch_h(l), 0, "dlock_latch_count_down_async"};
  if (id)
    *id = 0;
  if (!done)
    return dlock__seterr(DLOCK_EINVAL, "%s: done is NULL", t.fn);
  int rc = begin(t.h, t.fn);
  if (rc)
    return rc;
  if ((rc = dlock__aop_call(t.h->client, count_down_call, &t, sizeof t, done,
                            userdata, id)) != 0)
    return dlock__sync_call_end(t.h, rc);
  return 0;
}

int dlock_latch_count(dlock_latch_t *l, int64_t *out) {
  const char *fn = "dlock_latch_count";
  if (!out)
    return dlock__seterr(DLOCK_EINVAL, "%s: out is NULL", fn);
  *out = 0;
  dlock__sync *h = latch_h(l);
  int rc = begin(h, fn);
  if (rc)
    return rc;
  rc = h->client->ops->latch_count(h->client->be, h->name, out);
  return dlock__sync_call_end(h, wrongtype(rc, h, fn));
}

/* 1 when the count is zero (or the latch is absent), else 0. */
static int at_zero(void *ctx, int64_t *bound) {
  latch_try *t = ctx;
  int64_t n = 0;
  *bound = -1;
  int rc = t->h->client->ops->latch_count(t->h->client->be, t->h->name, &n);
  return rc ? rc : n <= 0;
}

/* The await's outcome (1 zero, 0 not in time, or the error), worded, and
 * the call's end. */
static int await_finish(void *ctx, int rc, int64_t *value) {
  latch_try *t = ctx;
  (void)value;
  if (rc == 0)
    rc = dlock__seterr(t->wait_ms == 0 ? DLOCK_EBUSY : DLOCK_ETIMEDOUT,
                       "latch '%.200s': %s", t->h->name,
                       t->wait_ms == 0 ? "the count is not zero"
                                       : "timed out waiting for zero");
  return dlock__sync_call_end(t->h, rc == 1 ? 0 : wrongtype(rc, t->h, t->fn));
}

static int await_begin(dlock_latch_t *l, int64_t wait_ms, const char *fn,
                       latch_try *t) {
  int rc = dlock__check_wait(wait_ms, fn);
  if (rc)
    return rc;
  *t = (latch_try){latch_h(l), wait_ms, fn};
  return begin(t->h, fn);
}

int dlock_latch_await(dlock_latch_t *l, int64_t wait_ms) {
  latch_try t = {0};
  int rc = await_begin(l, wait_ms, "dlock_latch_await", &t);
  if (rc)
    return rc;
  int64_t deadline = dlock__deadline_after(wait_ms);
  int64_t bound;
  dlock__err_set_unsent(false);
  rc = at_zero(&t, &bound);
  /* an outage does not end a wait (dlock__wait_retry) */
  if ((rc == 0 || dlock__sync_rides_out(rc, deadline)) && wait_ms != 0)
    rc = dlock__sync_wait(t.h, 0, NULL, deadline, at_zero, &t);
  return await_finish(&t, rc, NULL);
}

int dlock_latch_await_async(dlock_latch_t *l, int64_t wait_ms,
                            dlock_done_fn done, void *userdata,
                            dlock_op_t *id) {
  const char *fn = "dlock_latch_await_async";
  if (id)
    *id = 0;
  if (!done)
    return dlock__seterr(DLOCK_EINVAL, "%s: done is NULL", fn);
  latch_try t = {0};
  int rc = await_begin(l, wait_ms, fn, &t);
  if (rc)
    return rc;
  if ((rc = dlock__sync_async(t.h, 0, NULL, wait_ms, at_zero, await_finish, &t,
                              sizeof t, done, userdata, id)) != 0)
    return dlock__sync_call_end(t.h, rc);
  return 0;
}

int dlock_latch_delete(dlock_latch_t *l, bool *existed) {
  const char *fn = "dlock_latch_delete";
  if (existed)
    *existed = false;
  dlock__sync *h = latch_h(l);
  int rc = begin(h, fn);
  if (rc)
    return rc;
  bool was = false;
  rc = h->client->ops->latch_delete(h->client->be, h->name, &was);
  if (!rc && existed)
    *existed = was;
  return dlock__sync_call_end(h, wrongtype(rc, h, fn));
}
