/*
 * wait.c - waits and their up-calls (see wait.h).
 *
 * Every field a waiter and its backend share is under client->mu; the
 * waiter sleeps on its own condition variable with that mutex. The backend
 * is called with no core mutex held.
 */
#include "core/wait.h"

#include <stdio.h>
#include <string.h>

#include "core/client_base.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/holds.h"

int dlock__wait_begin(struct dlock_client *c, dlock__wait *w,
                      const dlock__wait_spec *spec) {
  memset(w, 0, sizeof *w);
  w->c = c;
  w->spec = spec;
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&w->cond, &attr);
  pthread_condattr_destroy(&attr);
  int rc = c->ops->wait_begin(c->be, w);
  if (rc) {
    pthread_cond_destroy(&w->cond);
    return rc;
  }
  pthread_mutex_lock(&c->mu);
  w->next = c->waits;
  if (c->waits)
    c->waits->prev = w;
  c->waits = w;
  pthread_mutex_unlock(&c->mu);
  return 0;
}

/* A backend without wait_arm arms each wait's wake-up path with the
 * attempt itself (a ZooKeeper or etcd watch): always armed. */
bool dlock__wait_arm(dlock__wait *w, bool only_if_ready) {
  const dlock__backend_ops *ops = w->c->ops;
  return ops->wait_arm ? ops->wait_arm(w->c->be, w, only_if_ready) : true;
}

/* Without wait_can_queue, queueing depends on the kind alone
 * (queue_kinds). */
bool dlock__wait_can_queue(dlock__wait *w) {
  const dlock__backend_ops *ops = w->c->ops;
  return ops->wait_can_queue ? ops->wait_can_queue(w->c->be, w) : true;
}

int dlock__wait_error(dlock__wait *w) {
  pthread_mutex_lock(&w->c->mu);
  int rc = w->err;
  if (rc)
    dlock__seterr(rc, "%s", w->errmsg);
  pthread_mutex_unlock(&w->c->mu);
  return rc;
}

bool dlock__wait_granted(dlock__wait *w) {
  pthread_mutex_lock(&w->c->mu);
  bool g = w->granted;
  pthread_mutex_unlock(&w->c->mu);
  return g;
}

int64_t dlock__wait_grant_token(dlock__wait *w) {
  pthread_mutex_lock(&w->c->mu);
  int64_t t = w->granted ? w->token : 0;
  pthread_mutex_unlock(&w->c->mu);
  return t;
}

/* One sleep on w's condition until `deadline` (mu held). */
static void sleep_step(dlock__wait *w, int64_t deadline,
                       const struct timespec *ts) {
  if (deadline == DLOCK__NEVER)
    pthread_cond_wait(&w->cond, &w->c->mu);
  else
    pthread_cond_timedwait(&w->cond, &w->c->mu, ts);
}

bool dlock__wait_ready_due_locked(dlock__wait *w, int64_t deadline) {
  return w->ready || w->granted || w->err || dlock__client_stopping(w->c) ||
         dlock__now_ms() >= deadline;
}

bool dlock__wait_sleep_due_locked(dlock__wait *w, int64_t until) {
  return w->woken || w->granted || dlock__client_stopping(w->c) ||
         dlock__now_ms() >= until;
}

/* await_ready's end (mu held) */
static bool ready_end_locked(dlock__wait *w) {
  /* the retry that follows sees everything a pending wake announced */
  w->woken = false;
  return w->ready;
}

static bool sleep_end_locked(dlock__wait *w) {
  bool woken = w->woken;
  w->woken = false;
  return woken;
}

bool dlock__wait_ready_end(dlock__wait *w) {
  pthread_mutex_lock(&w->c->mu);
  bool ok = ready_end_locked(w);
  pthread_mutex_unlock(&w->c->mu);
  return ok;
}

bool dlock__wait_sleep_end(dlock__wait *w) {
  pthread_mutex_lock(&w->c->mu);
  bool woken = sleep_end_locked(w);
  pthread_mutex_unlock(&w->c->mu);
  return woken;
}

bool dlock__wait_await_ready(dlock__wait *w, int64_t deadline) {
  struct dlock_client *c = w->c;
  struct timespec ts;
  dlock__deadline_timespec(deadline, &ts);
  pthread_mutex_lock(&c->mu);
  while (!dlock__wait_ready_due_locked(w, deadline))
    sleep_step(w, deadline, &ts);
  bool ok = ready_end_locked(w);
  pthread_mutex_unlock(&c->mu);
  return ok;
}

bool dlock__wait_sleep(dlock__wait *w, int64_t until) {
  struct dlock_client *c = w->c;
  struct timespec ts;
  dlock__deadline_timespec(until, &ts);
  pthread_mutex_lock(&c->mu);
  while (!dlock__wait_sleep_due_locked(w, until))
    sleep_step(w, until, &ts);
  bool woken = sleep_end_locked(w);
  pthread_mutex_unlock(&c->mu);
  return woken;
}

bool dlock__wait_outage(int rc) {
  return (rc == DLOCK_EUNAVAILABLE || rc == DLOCK_EIOTIMEOUT) &&
         dlock__err_unsent();
}

bool dlock__wait_retry_plan(dlock__wait *w, int rc, int64_t deadline,
                            dlock__outage *o, int64_t *until_out) {
  int64_t grace = w->c->opts.outage_grace_ms;
  if (!dlock__wait_outage(rc) || grace <= 0 || dlock__client_stopping(w->c))
    return false;
  int64_t now = dlock__now_ms();
  if (o->failures == 0)
    o->since = now;
  if (now - o->since >= grace) {
    dlock__preferr(rc, "the backend unreachable for %lld ms",
                   (long long)(now - o->since));
    return false;
  }
  if (now >= deadline)
    return false;
  if (++o->failures == 1)
    dlock__log(w->c, DLOCK_LOG_WARN,
               "'%.200s': %s; trying again while the wait lasts (for up to "
               "%lld ms of outage)",
               w->spec->name, dlock_last_error(), (long long)grace);
  int64_t backoff = 1000;
  if (o->failures <= 5)
    backoff = 50LL << (o->failures - 1); /* 50, 100, 200, 400, 800 */
  int64_t until = now + backoff;
  if (until > o->since + grace)
    until = o->since + grace;
  if (until > deadline)
    until = deadline;
  *until_out = until;
  return true;
}

bool dlock__wait_retry(dlock__wait *w, int rc, int64_t deadline,
                       dlock__outage *o) {
  int64_t until;
  if (!dlock__wait_retry_plan(w, rc, deadline, o, &until))
    return false;
  dlock__wait_sleep(w, until);
  return true;
}

void dlock__wait_recovered(dlock__wait *w, dlock__outage *o) {
  if (o->failures > 0)
    dlock__log(w->c, DLOCK_LOG_INFO,
               "'%.200s': the backend answers again after %lld ms (%d failed "
               "attempts)",
               w->spec->name, (long long)(dlock__now_ms() - o->since),
               o->failures);
  o->failures = 0;
}

void dlock__wait_end(dlock__wait *w) {
  struct dlock_client *c = w->c;
  pthread_mutex_lock(&c->mu);
  if (w->prev)
    w->prev->next = w->next;
  else
    c->waits = w->next;
  if (w->next)
    w->next->prev = w->prev;
  pthread_mutex_unlock(&c->mu);
  /* the backend passes on a wake this waiter did not use, once it has
   * unregistered it (so that no wake can arrive after the decision) */
  c->ops->wait_end(c->be, w);
  pthread_cond_destroy(&w->cond);
}

/* ------------------------------------------------------------ up-calls */

/* Wakes whoever waits on w (mu held): the thread sleeping on its
 * condition, or the async operation parked on it. */
static void signal_locked(dlock__wait *w) {
  pthread_cond_signal(&w->cond);
  if (w->notify)
    w->notify(w);
}

/* The wait a node wait stands for (mu held): its parent's wake state is
 * the one that counts. */
static dlock__wait *waker(dlock__wait *w) { return w->parent ? w->parent : w; }

void dlock__wait_wake(dlock__wait *w) {
  pthread_mutex_lock(&w->c->mu);
  w = waker(w);
  w->woken = true;
  signal_locked(w);
  pthread_mutex_unlock(&w->c->mu);
}

void dlock__wait_grant(dlock__wait *w, int64_t token) {
  pthread_mutex_lock(&w->c->mu);
  if (w->parent) { /* a node's hand-off is only a wake for the parent */
    w = w->parent;
    w->woken = true;
    signal_locked(w);
    pthread_mutex_unlock(&w->c->mu);
    return;
  }
  w->granted = true;
  w->token = token;
  w->woken = true;
  signal_locked(w);
  pthread_mutex_unlock(&w->c->mu);
}

void dlock__wait_fail(dlock__wait *w, int code, const char *msg) {
  pthread_mutex_lock(&w->c->mu);
  w->err = code;
  snprintf(w->errmsg, sizeof w->errmsg, "%s", msg ? msg : "");
  w = waker(w);
  w->woken = true;
  signal_locked(w);
  pthread_mutex_unlock(&w->c->mu);
}

void dlock__wait_set_ready(dlock__wait *w, bool ready, bool wake) {
  pthread_mutex_lock(&w->c->mu);
  w->ready = ready;
  if (w->parent && ready) { /* one armed node is enough to be woken */
    w->parent->ready = true;
    signal_locked(w->parent);
  }
  w = waker(w);
  /* armed: retry (a release may have come before); disarmed: messages may
   * have been lost, retry too */
  if (wake) {
    w->woken = true;
    signal_locked(w);
  }
  pthread_mutex_unlock(&w->c->mu);
}

bool dlock__wait_is_woken(dlock__wait *w) {
  pthread_mutex_lock(&w->c->mu);
  bool woken = waker(w)->woken;
  pthread_mutex_unlock(&w->c->mu);
  return woken;
}

void dlock__wait_orphan_grant(struct dlock_client *c, uint64_t tid,
                              uint64_t seq) {
  pthread_mutex_lock(&c->mu);
  dlock__unresolved_grant_locked(c, tid, seq);
  pthread_mutex_unlock(&c->mu);
}

void dlock__waits_wake_lock_locked(struct dlock_client *c, const char *name) {
  for (dlock__wait *w = c->waits; w; w = w->next)
    if (!w->parent && !w->spec->sync && strcmp(w->spec->name, name) == 0) {
      w->woken = true;
      signal_locked(w);
    }
}

void dlock__waits_wake_all_locked(struct dlock_client *c) {
  for (dlock__wait *w = c->waits; w; w = w->next)
    signal_locked(w);
}
