/*
 * lock.c - every lock kind behind the public dlock_lock_* API: reentrant,
 * fair, fenced, and the read and write sides of a read-write lock. They
 * share the wait discipline below; the backend knows each kind's layout.
 *
 * Kinds differ in three ways here: who may be handed a lock (reentrant,
 * fenced and write waiters queue for a hand-off; a fair waiter is queued by
 * the server in arrival order and woken alone on its own channel; read
 * waiters register as waiting, so that releases let them in first, but
 * race when woken), what their hold is called (lock, read or write side),
 * and what a grant returns (a fenced lock's token).
 *
 * Acquire with a wait: register the wait with the backend first
 * (core/wait.h; Redis: on the lock's channel and this client's hand-off
 * channel), then attempt. An attempt made while the wake-up path is armed
 * also queues the waiter on the server (kinds in the backend's
 * queue_kinds), so that a release hands it the lock directly: the release
 * makes it the owner and the backend grants the wait, which returns
 * without another round trip. If the path was not yet armed, the first
 * attempt does not queue; the waiter waits until it is and attempts again
 * (queuing then). Between attempts it sleeps until a grant, a "try again"
 * from the backend (Redis: a release message on Redisson's channel, from a
 * Redisson holder or a force release; a pub/sub reconnect), the holder's
 * remaining lease (a safety net for a crashed holder or a lost message,
 * never a poll interval), the refresh of its queue entry, or its deadline. A
 * waiter that gives up leaves the queue; if a release had handed it the lock
 * just before, it keeps it. A contended acquisition thus costs one queuing
 * attempt and the release that hands over: two round trips, with no herd of
 * retries.
 *
 * Backend errors end the wait at once: a wait never hides an unreachable
 * server behind its deadline.
 *
 * A backend whose server knows one owner per client (client_owner: Spring
 * Integration's RedisLockRegistry layout) gets the rest from here, as the
 * registry's local ReentrantLock gives it: each name has a gate that one
 * thread of the client holds from its attempt until its last release (or
 * until the attempt fails); another thread's attempt is refused here
 * without a round trip and waits, woken when the gate is left (a release
 * that frees the lock, or drops a lost hold) or by the server's release
 * message. Re-entries go to the server (its obtain restarts the lease, as
 * the registry's does) and count up here; releases but the last only
 * count down here.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/async.h"
#include "core/client.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/holds.h"
#include "core/session.h"
#include "core/wait.h"

/* Validates the handle and enters a call on its client (see
 * dlock__call_begin); every success is paired with call_end(l). */
static int call_begin(const dlock_lock_t *l, const char *fn) {
  if (!l)
    return dlock__seterr(DLOCK_EINVAL, "%s: lock is NULL", fn);
  if (l->magic != DLOCK__LOCK_MAGIC)
    return dlock__seterr(DLOCK_EBADHANDLE, "%s: lock handle is not live", fn);
  return dlock__call_begin(l->client, fn);
}

static int call_end(const dlock_lock_t *l, int rc) {
  dlock__call_end(l->client);
  return rc;
}

int dlock__lock_call_begin(const dlock_lock_t *l, const char *fn) {
  return call_begin(l, fn);
}

int dlock__lock_call_end(const dlock_lock_t *l, int rc) {
  return call_end(l, rc);
}

int dlock_lock_new_kind(dlock_client_t *c, const char *name,
                        dlock_lock_kind_t kind, dlock_lock_t **out) {
  if (!out)
    return dlock__seterr(DLOCK_EINVAL, "dlock_lock_new: out is NULL");
  *out = NULL;
  int rc = dlock__client_check(c, "dlock_lock_new");
  if (!rc)
    rc = dlock__check_name(c, name, "dlock_lock_new");
  if (!rc && ((int)kind < DLOCK_REENTRANT || kind > DLOCK_WRITE))
    rc = dlock__seterr(DLOCK_EINVAL, "dlock_lock_new: unknown lock kind %d",
                       (int)kind);
  static const char *const kind_names[] = {
      "reentrant locks", "fair locks", "fenced locks",
      "read-write locks (read side)", "read-write locks (write side)"};
  if (!rc)
    rc = dlock__need_kind(c, c->ops->lock_kinds & (1u << kind),
                          kind_names[kind]);
  if (rc)
    return rc;
  dlock_lock_t *l = dlock__calloc(1, sizeof *l);
  if (!l || !(l->name = dlock__strdup(name))) {
    dlock__free(l);
    return DLOCK_ENOMEM;
  }
  if (c->ops->handle_open &&
      (rc = c->ops->handle_open(c->be, kind, l->name, &l->bh)) != 0) {
    dlock__free(l->name);
    dlock__free(l);
    return rc;
  }
  l->magic = DLOCK__LOCK_MAGIC;
  l->kind = kind;
  l->client = c;
  pthread_mutex_lock(&c->mu);
  l->next = c->locks;
  if (c->locks)
    c->locks->prev = l;
  c->locks = l;
  pthread_mutex_unlock(&c->mu);
  *out = l;
  return 0;
}

int dlock_lock_new(dlock_client_t *c, const char *name, dlock_lock_t **out) {
  return dlock_lock_new_kind(c, name, DLOCK_REENTRANT, out);
}

dlock_lock_kind_t dlock_lock_kind(const dlock_lock_t *l) {
  if (!l || l->magic != DLOCK__LOCK_MAGIC)
    return DLOCK_REENTRANT;
  return l->kind;
}

/* The hold a lock of this kind keeps (reentrant, fair and fenced locks of
 * one name are one lock on the server, so they share one). */
static dlock__hold_kind hold_kind(dlock_lock_kind_t kind) {
  return kind == DLOCK_READ    ? DLOCK__HK_READ
         : kind == DLOCK_WRITE ? DLOCK__HK_WRITE
                               : DLOCK__HK_LOCK;
}

/* Waits on the server: reentrant, fenced and write waiters queue for a
 * hand-off, readers register as waiting (never handed the lock). */
static bool has_handoff(const dlock_lock_t *l) {
  return (l->client->ops->queue_kinds & (1u << l->kind)) != 0;
}

/* A wait that may be handed the lock (its grant must be resolved). */
static bool takes_grants(const dlock_lock_t *l) {
  return has_handoff(l) && l->kind != DLOCK_READ;
}

/* ------------------------------------------- gates (client_owner) */

/* A client_owner backend's gate of one lock name: the thread that holds
 * it or tries it on the server (client->gates, under mu; client.c frees
 * what is left at teardown). */
typedef struct dlock__gate {
  uint64_t tid;
} dlock__gate;

static bool client_owner(const dlock_lock_t *l) {
  return l->client->ops->client_owner;
}

/* mu held. 0: tid has the gate of name now (*had: it had it before); 1:
 * another thread (*other) has it; DLOCK_ENOMEM. */
static int gate_enter_locked(struct dlock_client *c, const char *name,
                             uint64_t tid, bool *had, uint64_t *other) {
  size_t n = strlen(name);
  dlock__gate *g = dlock__map_get(&c->gates, name, n);
  *had = false;
  if (g && g->tid != tid) {
    *other = g->tid;
    return 1;
  }
  if (g) {
    *had = true;
    return 0;
  }
  if (!(g = dlock__calloc(1, sizeof *g)))
    return DLOCK_ENOMEM;
  g->tid = tid;
  if (dlock__map_put(&c->gates, name, n, g)) {
    dlock__free(g);
    return DLOCK_ENOMEM;
  }
  return 0;
}

/* mu held: tid leaves the gate of name, if it has it; with `wake`, the
 * client's waits on name try again. */
static void gate_leave_locked(struct dlock_client *c, const char *name,
                              uint64_t tid, bool wake) {
  size_t n = strlen(name);
  dlock__gate *g = dlock__map_get(&c->gates, name, n);
  if (!g || g->tid != tid)
    return;
  dlock__free(dlock__map_del(&c->gates, name, n));
  if (wake)
    dlock__waits_wake_lock_locked(c, name);
}

/* Before an attempt on a client_owner lock. 0: this thread has the gate
 * (*had: since before); 1: another thread of the client has it (*other),
 * the attempt is refused here and *pttl is that thread's lease (the
 * longest a sleep can last without news: its release wakes us); or an
 * error. */
static int gate_attempt(dlock_lock_t *l, uint64_t tid, bool *had,
                        uint64_t *other, int64_t *pttl) {
  struct dlock_client *c = l->client;
  pthread_mutex_lock(&c->mu);
  int g = gate_enter_locked(c, l->name, tid, had, other);
  if (g == 1) {
    dlock__hold *h =
        dlock__hold_find_locked(c, DLOCK__HK_LOCK, l->name, *other, NULL);
    *pttl = h && h->count > 0 ? h->lease_ms : c->opts.watchdog_ms;
  }
  pthread_mutex_unlock(&c->mu);
  return g;
}

/* After an attempt with outcome rc: one that did not acquire leaves the
 * gate, unless the thread had it before (a hold of its own, lost or
 * not). Nobody is woken: the others would only meet the server's
 * holder, and its release wakes them. */
static void gate_after(dlock_lock_t *l, uint64_t tid, bool had, int rc) {
  if (rc == 1 || had)
    return;
  pthread_mutex_lock(&l->client->mu);
  gate_leave_locked(l->client, l->name, tid, false);
  pthread_mutex_unlock(&l->client->mu);
}

/* Forgets the holds of `name` unless another handle still names it. */
static void drop_orphan_holds_locked(struct dlock_client *c, const char *name) {
  for (dlock_lock_t *o = c->locks; o; o = o->next)
    if (strcmp(o->name, name) == 0)
      return;
  dlock__holds_drop_locked(c, name, false);
  dlock__free(dlock__map_del(&c->gates, name, strlen(name)));
}

void dlock_lock_free(dlock_lock_t *l) {
  if (!l || l->magic != DLOCK__LOCK_MAGIC)
    return;
  struct dlock_client *c = l->client;
  l->magic = DLOCK__DEAD_MAGIC;
  if (c->magic == DLOCK__CLIENT_MAGIC) {
    /* in a forked child the mutex may be held by a thread that is not
     * there: this copy of the client has no other user, so skip it */
    bool forked = dlock__client_check(c, "dlock_lock_free") == DLOCK_ECLOSED;
    if (!forked)
      pthread_mutex_lock(&c->mu);
    if (l->prev)
      l->prev->next = l->next;
    else
      c->locks = l->next;
    if (l->next)
      l->next->prev = l->prev;
    drop_orphan_holds_locked(c, l->name);
    if (!forked)
      pthread_mutex_unlock(&c->mu);
  }
  if (l->bh && c->ops->handle_close)
    c->ops->handle_close(l->bh);
  dlock__free(l->name);
  dlock__free(l);
}

const char *dlock_lock_name(const dlock_lock_t *l) {
  if (!l || l->magic != DLOCK__LOCK_MAGIC)
    return "";
  return l->name;
}

static int record_acquired(dlock_lock_t *l, uint64_t tid, int64_t lease,
                           bool watchdog, int64_t since, int64_t token) {
  struct dlock_client *c = l->client;
  pthread_mutex_lock(&c->mu);
  dlock__hold *h = dlock__hold_acquired_locked(
      c, hold_kind(l->kind), l->name, tid, NULL, lease, watchdog, since);
  if (h && token)
    h->token = token;
  pthread_mutex_unlock(&c->mu);
  return h ? 0 : DLOCK_ENOMEM;
}

static int busy_error(const dlock_lock_t *l, int code, int64_t pttl) {
  if (code == DLOCK_EBUSY)
    return dlock__seterr(code,
                         "lock '%.200s' is held by another owner (%" PRId64
                         " ms of lease left)",
                         l->name, pttl);
  return dlock__seterr(code, "timed out waiting for lock '%.200s'", l->name);
}

/* A queue entry lives at most this long without a refresh; a waiter
 * refreshes it (with its next attempt) after half of it. */
#define QUEUE_ENTRY_MAX_MS 60000
/* Grace past the waiter's deadline, so a hand-off at the last moment is
 * still found by its leave. */
#define QUEUE_ENTRY_GRACE_MS 2000

static _Atomic uint64_t wait_seq; /* tells one wait from the next */

typedef struct wait_ctx {
  dlock_lock_t *l;
  uint64_t tid, seq;
  const char *owner;
  int64_t lease;
  int64_t deadline;
  int64_t thread_wait; /* fair: how long the queue keeps us without news */
  bool watchdog;       /* the lease is the watchdog's (renewed) */
  bool reentry;        /* the thread held the lock when the wait began */
  int64_t token;       /* fenced: the token of the grant */
  dlock__wait_spec spec;
  dlock__queue_entry q;
  int64_t refresh_at;   /* when the queue entry wants refreshing */
  int64_t since;        /* when the attempt that got the lock was sent */
  int64_t refused_at;   /* when the last attempt the server refused was
                           sent: a grant by message came after it */
  int64_t entry_until;  /* the queue entry cannot outlive this */
  dlock__outage outage; /* attempts failed in a row in an outage */
  /* the wait's step machine (wait_step) */
  int state;     /* a wait_state: the action issued last */
  bool armed;    /* the wake-up path was armed by this wait */
  bool after_ok; /* where an answered attempt leads (wait_ok) */
  int64_t pttl;  /* the holder's lease left, by the last answer (-1: none) */
  const _Atomic bool *cancel; /* an async wait's cancel flag, or NULL */
  /* last: dlock__wait_begin sets it up, so a wait that ends before it
   * registers (its cold first attempt got the lock) never clears it */
  dlock__wait w;
} wait_ctx;

/* A fair wait that must come back to keep its place in the queue. */
static bool refreshes_fair(const dlock_lock_t *l) {
  return l->kind == DLOCK_FAIR && l->client->ops->fair_queue_expires;
}

/* One attempt; queues (or refreshes) the entry when `queue`. Once a wait
 * may have queued, every later attempt carries its entry (subscribed or
 * not), so that the server can tell a grant to it from a second hold and
 * drop the entry when the lock is taken. */
static int attempt(wait_ctx *x, bool queue, int64_t *pttl) {
  struct dlock_client *c = x->l->client;
  queue = has_handoff(x->l) && (queue || x->q.queued);
  if (dlock__client_stopping(c))
    return dlock__seterr(DLOCK_ECLOSED, "the client is being freed");
  int64_t now = dlock__now_ms();
  /* the server is told whether an EARLIER attempt may have queued this
   * wait (x->q.queued: only then can a grant to it be waiting to be
   * claimed); after this attempt it may hold an entry, whatever the
   * reply */
  if (queue) {
    int64_t left =
        x->deadline == DLOCK__NEVER ? QUEUE_ENTRY_MAX_MS : x->deadline - now;
    if (left > QUEUE_ENTRY_MAX_MS)
      left = QUEUE_ENTRY_MAX_MS;
    x->q.ttl_ms = (left > 0 ? left : 0) + QUEUE_ENTRY_GRACE_MS;
    x->entry_until = now + x->q.ttl_ms + x->lease;
  }
  x->since = now;
  bool had = false;
  uint64_t other = 0;
  if (client_owner(x->l)) {
    int g = gate_attempt(x->l, x->tid, &had, &other, pttl);
    if (g)
      return g == 1 ? 0 : g;
  }
  dlock__acquire a = {.bh = x->l->bh,
                      .kind = x->l->kind,
                      .name = x->l->name,
                      .owner = x->owner,
                      .lease_ms = x->lease,
                      .q = queue ? &x->q : NULL,
                      .thread_wait_ms = x->thread_wait,
                      .reentry = x->reentry};
  int rc = c->ops->lock_acquire(c->be, &a, pttl, &x->token);
  if (client_owner(x->l))
    gate_after(x->l, x->tid, had, rc);
  if (queue)
    x->q.queued = true;
  if (rc == 0)
    x->refused_at = now;
  if (rc == 0 && queue)
    x->refresh_at = now + x->q.ttl_ms / 2;
  /* a fair waiter that waits longer than thread-wait comes back within a
   * third of it, so that the queue keeps its place (a dead one stops) */
  if (rc == 0 && refreshes_fair(x->l))
    x->refresh_at = x->deadline - now > x->thread_wait
                        ? now + x->thread_wait / 3
                        : DLOCK__NEVER;
  return rc;
}

/* Whether attempts of this wait may be repeated after one whose outcome is
 * unknown (the connection lost after the request went out, no reply in
 * time): a reentrant or fenced lock with a hand-off queue, whose every
 * attempt after the first carries the wait's queue entry and the mark that
 * it may have queued. The server then tells a hold this wait got (a
 * grant, or the lost attempt's own) from a second one, and claims it with
 * its count unchanged (lock_acquire.lua). A thread that held the lock
 * when the wait began could not be told apart, so its waits are not. */
static bool repeatable_for(const dlock_lock_t *l, bool reentry) {
  return has_handoff(l) && !reentry &&
         (l->kind == DLOCK_REENTRANT || l->kind == DLOCK_FENCED);
}

static bool repeatable(const wait_ctx *x) {
  return repeatable_for(x->l, x->reentry);
}

/* After a failed attempt: an outage of unknown outcome that a repeatable
 * wait can ride out all the same (the next attempt carries the entry). */
static void note_failure(wait_ctx *x, int rc) {
  if ((rc == DLOCK_EUNAVAILABLE || rc == DLOCK_EIOTIMEOUT) && repeatable(x)) {
    x->q.queued = true;
    dlock__err_set_unsent(true);
  }
}

/* ------------------------------------------------- the wait as steps
 *
 * The wait of an acquisition is a step machine: wait_step() is given what
 * just happened (an event) and returns what to do next (an action); it
 * never blocks, sleeps or sends anything itself. The blocking driver
 * (wait_loop) does each action on the caller's thread and feeds its
 * outcome back; another driver (an event loop's) can do the same actions
 * without blocking, with the same logic.
 *
 * States (the action issued last, whose outcome is awaited):
 *   START        nothing yet;
 *   PROBE        a hot lock's wake-up path kept if armed already (a
 *                lingering subscription), before its first attempt
 *                -> ARMED armed;
 *   ARM          the wake-up path asked for, and kept while the wait
 *                lasts -> ARMED;
 *   AWAIT_READY  until the path is armed, bounded by the command timeout
 *                and the deadline -> READY (then its failure ends the wait);
 *   ATTEMPT      one attempt (can_queue: whether it may queue now)
 *                -> ATTEMPTED rc, pttl;
 *   RETRY        an outage's backoff (dlock__wait_retry_plan: 50 ms
 *                doubling to 1 s, within the outage grace and the deadline;
 *                a wake cuts it short) -> WOKEN, then the attempt again
 *                unless a grant came meanwhile;
 *   SLEEP        until a wake, a grant, the holder's lease (a safety net),
 *                the queue entry's refresh or the deadline -> WOKEN;
 *   DONE         rc: 1 acquired (by an attempt, or granted by message),
 *                else the error (detail set).
 * Events: START, ARMED armed, ATTEMPTED rc pttl, READY, WOKEN woken.
 * The order is the one the wait always had: a hot lock arms only if armed
 * already and attempts at once; a cold one (whose plain attempt came
 * before the wait was registered) and one not armed then arm, await
 * readiness, and attempt (queuing); then sleep and attempt until done,
 * a grant by message checked after every sleep.
 *
 * An attempt's error detail (dlock_last_error, and whether the failure sent
 * nothing: dlock__err_unsent) is the thread's: a driver runs the step that
 * takes an ATTEMPTED event with the detail of that attempt in place. */
typedef enum {
  WS_START,
  WS_PROBE,
  WS_ARM,
  WS_AWAIT_READY,
  WS_ATTEMPT,
  WS_RETRY,
  WS_SLEEP,
  WS_DONE
} wait_state;

typedef enum {
  WAIT_EV_START,
  WAIT_EV_ARMED,
  WAIT_EV_ATTEMPTED,
  WAIT_EV_READY,
  WAIT_EV_WOKEN
} wait_event_kind;

typedef struct wait_event {
  wait_event_kind kind;
  bool armed;   /* ARMED: the path is armed now */
  int rc;       /* ATTEMPTED: 1 acquired, 0 refused, < 0 failed */
  int64_t pttl; /* ATTEMPTED: the holder's lease left (-1: none) */
  bool woken;   /* WOKEN: by a wake (else the time came) */
} wait_event;

typedef enum {
  WAIT_DO_ARM,
  WAIT_DO_AWAIT_READY,
  WAIT_DO_ATTEMPT,
  WAIT_DO_RETRY_AFTER,
  WAIT_DO_SLEEP,
  WAIT_DO_DONE
} wait_action_kind;

typedef struct wait_action {
  wait_action_kind kind;
  bool only_if_ready; /* ARM */
  bool can_queue;     /* ATTEMPT */
  int64_t until;      /* AWAIT_READY, RETRY_AFTER, SLEEP (monotonic ms) */
  int rc;             /* DONE */
} wait_action;

static wait_action wait_done(wait_ctx *x, int rc) {
  x->state = WS_DONE;
  return (wait_action){.kind = WAIT_DO_DONE, .rc = rc};
}

/* An async wait that dlock_op_cancel asked to end makes no further
 * attempt and arms nothing: it ends, and leaves as one that timed out. */
static bool cancelled(const wait_ctx *x) {
  return x->cancel && atomic_load(x->cancel);
}

static wait_action wait_cancelled(wait_ctx *x) {
  return wait_done(x, dlock__seterr(DLOCK_ECANCELED,
                                    "the wait for lock '%.200s' was cancelled",
                                    x->l->name));
}

static wait_action wait_attempt(wait_ctx *x) {
  if (cancelled(x))
    return wait_cancelled(x);
  x->state = WS_ATTEMPT;
  return (wait_action){.kind = WAIT_DO_ATTEMPT,
                       .can_queue = dlock__wait_can_queue(&x->w)};
}

/* Arms the path and awaits it, even if it came up meanwhile, so that this
 * waiter counts among those that keep it up. */
static wait_action wait_arm(wait_ctx *x) {
  if (cancelled(x))
    return wait_cancelled(x);
  x->state = WS_ARM;
  x->armed = true;
  return (wait_action){.kind = WAIT_DO_ARM, .only_if_ready = false};
}

/* The head of the wait proper: done, or a sleep. */
static wait_action wait_next(wait_ctx *x) {
  if (dlock__wait_granted(&x->w))
    return wait_done(x, 1);
  if (cancelled(x))
    return wait_cancelled(x);
  int64_t now = dlock__now_ms();
  if (now >= x->deadline)
    return wait_done(x, busy_error(x->l, DLOCK_ETIMEDOUT, x->pttl));
  /* Safety net for a crashed holder or a lost message: never sleep past
   * the holder's lease. pttl < 0: the key has no expiry (or vanished):
   * sleep to the deadline unless woken. */
  int64_t until = x->deadline;
  int64_t nap = x->pttl > 0 ? x->pttl : 1;
  if (x->pttl >= 0 && nap < until - now) /* no overflow on a huge PTTL */
    until = now + nap;
  if ((x->q.queued || refreshes_fair(x->l)) && x->refresh_at < until)
    until = x->refresh_at;
  x->state = WS_SLEEP;
  return (wait_action){.kind = WAIT_DO_SLEEP, .until = until};
}

/* An attempt was answered (refused), or a grant came during an outage's
 * backoff: a wait whose path is not armed yet arms it (once), else it
 * sleeps. */
static wait_action wait_ok(wait_ctx *x) {
  return x->armed ? wait_next(x) : wait_arm(x);
}

static wait_action wait_step(wait_ctx *x, const wait_event *ev) {
  switch ((wait_state)x->state) {
  case WS_START:
    if (x->pttl < -1) {
      /* a hot lock, already watching (a lingering subscription): this
       * attempt can queue */
      x->pttl = -1;
      x->state = WS_PROBE;
      return (wait_action){.kind = WAIT_DO_ARM, .only_if_ready = true};
    }
    /* an attempt was made before the wait was registered (a cold lock):
     * it refused with that bound, or failed in an outage */
    return wait_arm(x);
  case WS_PROBE:
    x->armed = ev->armed;
    return wait_attempt(x);
  case WS_ARM: {
    struct dlock_client *c = x->l->client;
    int64_t sub_deadline = dlock__deadline_after(c->opts.command_timeout_ms);
    if (sub_deadline > x->deadline)
      sub_deadline = x->deadline;
    x->state = WS_AWAIT_READY;
    return (wait_action){.kind = WAIT_DO_AWAIT_READY, .until = sub_deadline};
  }
  case WS_AWAIT_READY: {
    int rc = dlock__wait_error(&x->w);
    return rc ? wait_done(x, rc) : wait_attempt(x);
  }
  case WS_ATTEMPT: {
    int rc = ev->rc;
    x->pttl = ev->pttl;
    if (rc < 0)
      note_failure(x, rc);
    if (rc >= 0) {
      dlock__wait_recovered(&x->w, &x->outage);
      return rc == 1 ? wait_done(x, 1) : wait_ok(x);
    }
    /* an outage is ridden out (dlock__wait_retry) */
    int64_t until;
    if (!dlock__wait_retry_plan(&x->w, rc, x->deadline, &x->outage, &until))
      return wait_done(x, rc);
    x->state = WS_RETRY;
    return (wait_action){.kind = WAIT_DO_RETRY_AFTER, .until = until};
  }
  case WS_RETRY:
    return dlock__wait_granted(&x->w) ? wait_ok(x) : wait_attempt(x);
  case WS_SLEEP:
    return dlock__wait_granted(&x->w) ? wait_done(x, 1) : wait_attempt(x);
  case WS_DONE:
    break;
  }
  return wait_done(x, dlock__seterr(DLOCK_EINVAL,
                                    "lock '%.200s': a step "
                                    "of a wait that has ended",
                                    x->l->name));
}

/* The actions any driver does at once, on its own thread: arming (which
 * only asks the backend for the path) and an attempt (one round trip). */
static bool act_now(wait_ctx *x, const wait_action *act, wait_event *ev) {
  if (act->kind == WAIT_DO_ARM) {
    *ev = (wait_event){.kind = WAIT_EV_ARMED,
                       .armed = dlock__wait_arm(&x->w, act->only_if_ready)};
    return true;
  }
  if (act->kind == WAIT_DO_ATTEMPT) {
    int64_t p = x->pttl;
    dlock__err_set_unsent(false);
    int rc = attempt(x, act->can_queue, &p);
    *ev = (wait_event){.kind = WAIT_EV_ATTEMPTED, .rc = rc, .pttl = p};
    return true;
  }
  return false;
}

/* The blocking driver: each action on the caller's thread, from where
 * wait_open left the wait. */
static int wait_loop(wait_ctx *x) {
  wait_event ev = {.kind = WAIT_EV_START};
  for (;;) {
    wait_action act = wait_step(x, &ev);
    if (act_now(x, &act, &ev))
      continue;
    switch (act.kind) {
    case WAIT_DO_AWAIT_READY:
      dlock__wait_await_ready(&x->w, act.until);
      ev = (wait_event){.kind = WAIT_EV_READY};
      break;
    case WAIT_DO_RETRY_AFTER:
    case WAIT_DO_SLEEP:
      ev = (wait_event){.kind = WAIT_EV_WOKEN,
                        .woken = dlock__wait_sleep(&x->w, act.until)};
      break;
    default: /* WAIT_DO_DONE */
      return act.rc;
    }
  }
}

/* A fair waiter that gives up leaves the server's queue at once, so that
 * those behind it are not delayed (best effort: if this fails, its entry
 * expires after thread-wait). The error being returned is kept. */
static void fair_leave(wait_ctx *x, int code) {
  struct dlock_client *c = x->l->client;
  char saved[512];
  snprintf(saved, sizeof saved, "%s", dlock_last_error());
  dlock__acquire a = {.bh = x->l->bh,
                      .kind = DLOCK_FAIR,
                      .name = x->l->name,
                      .owner = x->owner,
                      .lease_ms = x->lease,
                      .thread_wait_ms = x->thread_wait};
  int64_t token = 0;
  if (c->ops->lock_leave(c->be, &a, 0, &token) < 0)
    dlock__log(c, DLOCK_LOG_INFO,
               "fair lock '%.200s': leaving the queue failed (%s); the entry "
               "expires in %lld ms",
               x->l->name, dlock_last_error(), (long long)x->thread_wait);
  dlock__seterr(code, "%s", saved);
}

/* A grant by message is dated from the waiter's last refused attempt
 * (the server granted after it, but when is unknown), and a grant by an
 * attempt from that attempt's start (which may have waited for a
 * connection: a failover's new master). When that date is old, against a
 * watchdog lease (a long wait), the hold could no longer be vouched for and
 * would be reported lost at once: one renewal, sent now, confirms a fresh lease
 * instead (its send time is then the hold's start), given up to that lease to
 * answer. If it cannot (gone, unreachable) in time, the old date stands and the
 * renewer and the loop decide, as for any hold. Fixed leases are never vouched
 * for by the client: they keep the safe date. */
static void confirm_late_grant(wait_ctx *x, bool by_attempt) {
  struct dlock_client *c = x->l->client;
  int64_t sent = dlock__now_ms();
  if (!x->watchdog || !c->ops->lock_renew || sent - x->since <= x->lease / 3)
    return;
  dlock__renewal it = {
      .kind = hold_kind(x->l->kind), .name = x->l->name, .owner = x->owner};
  /* bounded by the moment the old date stops vouching for the hold, so
   * that a loss is still reported by then. When that moment has passed
   * already: a grant by message, whose lease began at a release we cannot
   * date, gets a tenth of the lease; a grant by an attempt that waited
   * (for a failover's new master to be dialled) began its lease when the
   * server ran it, after the dial, and gets the lease from `sent` (a tenth
   * was too short there: such a grant was reported lost the moment it was
   * returned) */
  int64_t deadline = x->since + x->lease - dlock__vouch_margin(x->lease);
  if (deadline < sent + x->lease / 10)
    deadline = by_attempt ? sent + x->lease - dlock__vouch_margin(x->lease)
                          : sent + x->lease / 10;
  /* an unreachable server (a failover's new master not dialled yet) is
   * asked again until then: 50 ms, doubling; the renewal is idempotent,
   * and the lease it confirms started after `sent` */
  int rc, tries = 0;
  for (int64_t pause = 50;; pause *= 2) {
    it.result = 0;
    rc = c->ops->lock_renew(c->be, &it, 1, x->lease, deadline);
    tries++;
    int64_t left = deadline - dlock__now_ms();
    if ((rc != DLOCK_EUNAVAILABLE && rc != DLOCK_EIOTIMEOUT) || left <= pause ||
        dlock__client_stopping(c) || tries >= 16)
      break;
    dlock__sleep_ms(pause);
  }
  if (rc == 0 && it.result == 1) {
    dlock__log(c, DLOCK_LOG_DEBUG,
               "lock '%.200s': a grant %lld ms after the last refused "
               "attempt, its lease confirmed in %lld ms (%d tries)",
               x->l->name, (long long)(sent - x->since),
               (long long)(dlock__now_ms() - sent), tries);
    x->since = sent;
  } else {
    dlock__log(c, DLOCK_LOG_DEBUG,
               "lock '%.200s': a grant %lld ms after the last refused "
               "attempt, its lease not confirmed within %lld ms (%s): dated "
               "from that attempt",
               x->l->name, (long long)(sent - x->since),
               (long long)(deadline - sent),
               rc ? dlock_last_error() : "the server no longer has it");
  }
}

/* An async wait's first attempt, sent (acq_send) at `at` and refused
 * with the holder's lease left `pttl` (rc 0), or failed in an outage the
 * wait rides out (rc < 0; unsent: as dlock__err_unsent said then): the
 * wait's steps go on from there, without a cold attempt of their own. */
typedef struct sent_try {
  int64_t at, pttl;
  int rc;
  bool unsent;
} sent_try;

/* The wait's opening, before its steps (may block: the cold first
 * attempt, unless it was `sent`). true: the wait is registered and its
 * steps are to run (from WS_START, x->pttl set); false: it is over
 * already, with *out (1 acquired, else the error). */
static inline __attribute__((always_inline)) bool
wait_open(wait_ctx *x, int *out, const sent_try *sent) {
  struct dlock_client *c = x->l->client;
  x->seq = atomic_fetch_add(&wait_seq, 1) + 1;
  x->q.seq = x->seq;
  x->spec = (dlock__wait_spec){.bh = x->l->bh,
                               .lock_kind = x->l->kind,
                               .name = x->l->name,
                               .owner = x->owner,
                               .tid = x->tid,
                               .seq = x->seq,
                               .need = 1};
  /* A lock nobody here waits on (the backend says its wake-up path is
   * cold) gets one plain attempt before any wait is registered: an
   * acquire that succeeds at once costs no wait, and one that fails
   * registers and arms before it retries, as ever. A hot lock registers
   * first, so that its first attempt can already queue. */
  int64_t pttl = -2;
  int rc;
  if (sent) {
    pttl = sent->pttl;
    if (sent->rc < 0) { /* as the cold attempt's failure below */
      dlock__err_set_unsent(sent->unsent);
      note_failure(x, sent->rc);
    }
  } else if (c->ops->wait_hot && !c->ops->wait_hot(c->be, &x->spec)) {
    pttl = -1;
    dlock__err_set_unsent(false);
    /* an outage does not end a wait: it goes on (and its first attempt
     * waits for the wake-up path to come up) */
    if ((rc = attempt(x, false, &pttl)) < 0)
      note_failure(x, rc);
    if (rc == 1) {
      confirm_late_grant(x, true); /* a slow attempt (a failover's dial) */
      *out = rc;
      return false;
    }
    if (rc != 0 && !(dlock__wait_outage(rc) && dlock__now_ms() < x->deadline)) {
      *out = rc;
      return false;
    }
  }
  rc = dlock__wait_begin(c, &x->w, &x->spec);
  if (rc) {
    *out = rc;
    return false;
  }
  x->state = WS_START;
  x->pttl = pttl;
  return true;
}

/* The wait's close, after its steps ended with rc: a grant by message, a
 * late grant confirmed, or the queue left; then unregistered. */
static int wait_close(wait_ctx *x, int rc) {
  struct dlock_client *c = x->l->client;
  if (dlock__wait_granted(&x->w)) {
    /* the grant came by message (maybe while the last step failed: the
     * grant stands). Its lease started when the release ran, which was
     * after the server refused our last attempt (a grant would have made
     * that attempt succeed), so that attempt's send time is a safe start;
     * the moment the message was read is not (it can be late). */
    rc = 1;
    x->since = x->refused_at;
    x->token = dlock__wait_grant_token(&x->w);
    confirm_late_grant(x, false);
  } else if (rc == 1) {
    /* granted by an attempt, dated from its start: one that took long (a
     * connection dialled to a failover's new master first) is confirmed
     * as a late grant is */
    confirm_late_grant(x, true);
  } else if (rc != 1 && x->l->kind == DLOCK_FAIR) {
    fair_leave(x, rc);
  } else if (rc != 1 && x->q.queued) {
    /* leave the queue; a hand-off that raced with giving up is kept */
    char saved[512];
    snprintf(saved, sizeof saved, "%s", dlock_last_error());
    int64_t sent = dlock__now_ms();
    dlock__acquire a = {.bh = x->l->bh,
                        .kind = x->l->kind,
                        .name = x->l->name,
                        .owner = x->owner,
                        .lease_ms = x->lease};
    int left = c->ops->lock_leave(c->be, &a, x->seq, &x->token);
    if (left == 1) {
      rc = 1;
      x->since = sent;
    } else {
      if (left < 0 && takes_grants(x->l)) {
        /* the outcome of this wait is unknown: settle it later (a
         * reader's registration just expires) */
        pthread_mutex_lock(&c->mu);
        dlock__unresolved_add_locked(c, x->l->kind, x->l->name, x->tid, x->seq,
                                     x->lease, x->entry_until);
        pthread_mutex_unlock(&c->mu);
      }
      dlock__seterr(rc, "%s", saved);
    }
  }
  dlock__wait_end(&x->w);
  return rc;
}

/* One acquisition, blocking or async: what its steps share. */
typedef struct acq {
  dlock_lock_t *l;
  uint64_t tid;
  int64_t wait_ms;
  bool watchdog;
  bool waited; /* x was set up (the wait path), whatever its outcome */
  int64_t lease, thread_wait;
  int64_t since, tok;
  char owner[64];
  wait_ctx x;
} acq;

/* acquire_begin: the wait is registered, its steps are to run */
#define ACQ_WAIT 2

static inline __attribute__((always_inline)) int
acquire_check(dlock_lock_t *l, uint64_t tid, int64_t wait_ms, int64_t lease_ms,
              const char *fn) {
  int rc = dlock__check_wait(wait_ms, fn);
  if (!rc)
    rc = dlock__check_lease(lease_ms, fn);
  if (rc)
    return rc;
  if (tid == 0)
    return dlock__seterr(DLOCK_EINVAL, "%s: thread id 0 is not valid", fn);
  (void)l;
  return 0;
}

static inline __attribute__((always_inline)) void
acquire_init(acq *a, dlock_lock_t *l, uint64_t tid, int64_t wait_ms,
             int64_t lease_ms) {
  struct dlock_client *c = l->client;
  /* x is zeroed only on the wait path (acquire_begin): a try does not
   * pay for clearing a wait's state */
  a->l = l;
  a->tid = tid;
  a->wait_ms = wait_ms;
  a->waited = false;
  a->since = a->tok = 0;
  a->watchdog = lease_ms == DLOCK_LEASE_WATCHDOG;
  a->lease = a->watchdog ? c->opts.watchdog_ms : lease_ms;
  dlock__owner(c, tid, a->owner, sizeof a->owner);
  /* Redisson's rule: a finite wait is also how long the fair queue keeps
   * this waiter's place without news */
  a->thread_wait = wait_ms > 0 ? wait_ms : c->opts.fair_thread_wait_ms;
}

/* The request of a try (wait 0, or a wait's first attempt sent alone). */
static inline __attribute__((always_inline)) dlock__acquire
try_request(const acq *a, bool reentry) {
  const dlock_lock_t *l = a->l;
  return (dlock__acquire){.bh = l->bh,
                          .kind = l->kind,
                          .name = l->name,
                          .owner = a->owner,
                          .lease_ms = a->lease,
                          .thread_wait_ms = a->thread_wait,
                          .try_once = true,
                          .reentry = reentry};
}

/* Everything before the wait's steps (may block: claiming an earlier
 * wait's grant, a try, the cold first attempt): ACQ_WAIT when the steps
 * are to run, else the outcome (1 acquired, 0 never, or the error). */
static inline __attribute__((always_inline)) int
acquire_begin(acq *a, const sent_try *sent) {
  dlock_lock_t *l = a->l;
  struct dlock_client *c = l->client;
  uint64_t tid = a->tid;
  a->since = dlock__now_ms();
  /* the hold's record exists before the server can grant anything, so
   * that a grant is never left unrecorded (held, but neither renewed nor
   * released) for want of memory */
  pthread_mutex_lock(&c->mu);
  dlock__hold *h =
      dlock__hold_reserve_locked(c, hold_kind(l->kind), l->name, tid);
  bool reentry = h && h->count > 0 && !h->lost;
  pthread_mutex_unlock(&c->mu);
  if (!h)
    return DLOCK_ENOMEM;

  /* an earlier wait of this thread whose outcome is unknown comes first:
   * if it was handed the lock, this acquire claims that grant */
  int rc = takes_grants(l) ? dlock__unresolved_resolve_own(
                                 c, l->kind, l->name, tid, a->lease, &a->tok)
                           : 0;
  if (rc != 0)
    return rc;
  if (a->wait_ms == 0) {
    int64_t pttl = -1;
    a->since = dlock__now_ms();
    dlock__acquire at = try_request(a, reentry);
    bool had = false;
    uint64_t other = 0;
    int g = client_owner(l) ? gate_attempt(l, tid, &had, &other, &pttl) : 0;
    if (g == 1)
      return dlock__seterr(DLOCK_EBUSY,
                           "lock '%.200s' is held by another thread of this "
                           "client (thread %llu): the layout has one owner "
                           "per client, whose threads take turns",
                           l->name, (unsigned long long)other);
    if (g < 0)
      return g;
    rc = c->ops->lock_acquire(c->be, &at, &pttl, &a->tok);
    if (client_owner(l))
      gate_after(l, tid, had, rc);
    return rc == 0 ? busy_error(l, DLOCK_EBUSY, pttl) : rc;
  }
  wait_ctx *x = &a->x;
  /* all but w (see wait_ctx); an async wait sets its cancel flag after */
  memset(x, 0, offsetof(wait_ctx, w));
  x->l = l;
  x->tid = tid;
  x->owner = a->owner;
  x->lease = a->lease;
  x->thread_wait = a->thread_wait;
  x->watchdog = a->watchdog;
  x->reentry = reentry;
  x->deadline = dlock__deadline_after(a->wait_ms);
  if (sent)
    x->since = x->refused_at = sent->at;
  a->waited = true;
  return wait_open(x, &rc, sent) ? ACQ_WAIT : rc;
}

/* After the outcome rc (1 acquired, else the error): the hold recorded
 * or its reservation dropped, and the call ended. 0 or the error; *token
 * (may be NULL) the grant's token. */
static inline __attribute__((always_inline)) int acquire_end(acq *a, int rc,
                                                             int64_t *token) {
  dlock_lock_t *l = a->l;
  struct dlock_client *c = l->client;
  if (a->waited) {
    a->since = a->x.since;
    a->tok = a->x.token;
  }
  if (rc < 0) {
    pthread_mutex_lock(&c->mu);
    dlock__hold_unreserve_locked(c, hold_kind(l->kind), l->name, a->tid);
    pthread_mutex_unlock(&c->mu);
    return call_end(l, rc); /* the backend's detail, in its terms */
  }
  if (token)
    *token = a->tok;
  return call_end(
      l, record_acquired(l, a->tid, a->lease, a->watchdog, a->since, a->tok));
}

static int acquire(dlock_lock_t *l, uint64_t tid, int64_t wait_ms,
                   int64_t lease_ms, int64_t *token, const char *fn) {
  int rc = acquire_check(l, tid, wait_ms, lease_ms, fn);
  if (rc || (rc = call_begin(l, fn)) != 0)
    return rc;
  acq a;
  acquire_init(&a, l, tid, wait_ms, lease_ms);
  rc = acquire_begin(&a, NULL);
  if (rc == ACQ_WAIT)
    rc = wait_close(&a.x, wait_loop(&a.x));
  return acquire_end(&a, rc, token);
}

/* ------------------------------------------------ the async driver
 *
 * The same steps as acquire(), driven by the client's async pool
 * (core/async.h): acquire_begin and the actions done at once (arming, an
 * attempt) run on a pool thread; a wait for readiness, a sleep and an
 * outage's backoff park the operation instead of a thread, until the
 * wait's notify hook, the timer or a cancel makes it run again. */
typedef struct acq_op {
  dlock__aop op;
  acq a;
  bool stepping;   /* the wait is registered; its steps run */
  wait_action act; /* the action it is parked on */
  bool sent_refused; /* its first attempt was sent and refused (or failed
                        in an outage): `sent` */
  bool reentry;      /* the thread held the lock at the send */
  /* its sent part handed it to the pool (acq_sent): what went out is
   * finished by acquire_begin there, even after a cancel (whose steps
   * then leave), so that nothing the request did is left unknown */
  bool handed;
  sent_try sent;
} acq_op;

static bool ready_due(dlock__aop *op, void *arg) {
  acq_op *o = arg;
  return atomic_load(&op->cancelled) ||
         dlock__wait_ready_due_locked(&o->a.x.w, o->act.until);
}

static bool sleep_due(dlock__aop *op, void *arg) {
  acq_op *o = arg;
  return atomic_load(&op->cancelled) ||
         dlock__wait_sleep_due_locked(&o->a.x.w, o->act.until);
}

/* The event that ends the parked action, as the blocking sleeps return. */
static wait_event resumed(acq_op *o) {
  if (o->act.kind == WAIT_DO_AWAIT_READY) {
    dlock__wait_ready_end(&o->a.x.w);
    return (wait_event){.kind = WAIT_EV_READY};
  }
  return (wait_event){.kind = WAIT_EV_WOKEN,
                      .woken = dlock__wait_sleep_end(&o->a.x.w)};
}

static void acq_finish(acq_op *o, int rc) {
  int64_t token = 0;
  rc = acquire_end(&o->a, rc, &token);
  dlock__aop_complete(&o->op, rc, rc == 0 ? token : 0);
}

static void acq_run(dlock__aop *op) {
  acq_op *o = (acq_op *)op;
  wait_ctx *x = &o->a.x;
  wait_event ev;
  if (!o->stepping) {
    int rc = atomic_load(&op->cancelled) && !o->handed
                 ? dlock__seterr(DLOCK_ECANCELED,
                                 "the acquire of lock '%.200s' was cancelled",
                                 o->a.l->name)
                 : acquire_begin(&o->a, o->sent_refused ? &o->sent : NULL);
    if (rc != ACQ_WAIT) {
      acq_finish(o, rc);
      return;
    }
    x->cancel = &op->cancelled;
    struct dlock_client *c = o->a.l->client;
    pthread_mutex_lock(&c->mu);
    x->w.notify = dlock__aop_notify;
    x->w.notify_arg = op;
    pthread_mutex_unlock(&c->mu);
    o->stepping = true;
    ev = (wait_event){.kind = WAIT_EV_START};
  } else {
    ev = resumed(o);
  }
  for (;;) {
    wait_action act = wait_step(x, &ev);
    if (act_now(x, &act, &ev))
      continue;
    if (act.kind == WAIT_DO_DONE) {
      acq_finish(o, wait_close(x, act.rc));
      return;
    }
    o->act = act;
    if (dlock__aop_park(op, act.until,
                        act.kind == WAIT_DO_AWAIT_READY ? ready_due : sleep_due,
                        o))
      return;
    ev = resumed(o);
  }
}

static void aop_free(dlock__aop *op) { dlock__free(op); }

/* The sent path (backend.h lock_acquire_send): a try of a reentrant or
 * fenced lock, or the cold first attempt of a wait for one (wait_open's,
 * on a lock no wait here watches), goes out from the calling thread, and
 * its reply's handler ends the operation where the reply is read, with
 * no pool thread. What needs more than the one request (an earlier
 * wait's outcome to settle, a client-owner gate, a wait refused: its
 * steps) takes the pool, as does a send that cannot go out without
 * blocking (no connection up yet). A wait's grant is not confirmed late
 * (confirm_late_grant): a sent attempt answers within the command
 * timeout, which must then be under a third of the lease. */
static bool acq_sendable(const acq_op *o) {
  const dlock_lock_t *l = o->a.l;
  struct dlock_client *c = l->client;
  return c->ops->lock_acquire_send && !o->op.then && !client_owner(l) &&
         (l->kind == DLOCK_REENTRANT || l->kind == DLOCK_FENCED) &&
         (o->a.wait_ms == 0 || c->opts.command_timeout_ms <= o->a.lease / 3) &&
         atomic_load(&c->nunresolved) == 0;
}

static void acq_to_pool(acq_op *o) {
  int rc = dlock__aop_resume(&o->op);
  if (rc)
    acq_finish(o, rc);
}

static void acq_sent(void *arg, int rc, int64_t pttl, int64_t token) {
  acq_op *o = arg;
  if (rc == DLOCK__SEND_BLOCKS) { /* the blocking operation finishes it */
    o->handed = true;
    acq_to_pool(o);
    return;
  }
  acq *a = &o->a;
  /* an outage does not end a wait (wait_open's cold attempt): one the
   * blocking wait would ride out, with its deadline not passed */
  bool unsent = dlock__err_unsent();
  int64_t left = a->wait_ms == DLOCK_WAIT_FOREVER
                     ? 1
                     : a->wait_ms - (dlock__now_ms() - o->sent.at);
  bool rides = (rc == DLOCK_EUNAVAILABLE || rc == DLOCK_EIOTIMEOUT) &&
               (unsent || repeatable_for(a->l, o->reentry)) && left > 0;
  if (a->wait_ms != 0 && (rc == 0 || rides)) {
    /* refused, or failed so: the wait's steps go on on the pool from
     * this attempt, by the deadline the call set */
    if (rc < 0)
      dlock__log(a->l->client, DLOCK_LOG_INFO,
                 "lock '%.200s': the wait's first attempt failed (%s); the "
                 "wait goes on",
                 a->l->name, dlock_last_error());
    o->sent_refused = true;
    o->sent.pttl = rc == 0 ? pttl : -1;
    o->sent.rc = rc;
    o->sent.unsent = unsent;
    if (a->wait_ms != DLOCK_WAIT_FOREVER)
      a->wait_ms = left > 0 ? left : 1; /* a wait, not a try */
    o->handed = true;
    acq_to_pool(o);
    return;
  }
  if (rc == 0)
    rc = busy_error(o->a.l, DLOCK_EBUSY, pttl);
  o->a.tok = token;
  acq_finish(o, rc);
}

/* acquire_begin's try, sent: the hold's record reserved first, as
 * there. */
static void acq_send(acq_op *o) {
  acq *a = &o->a;
  dlock_lock_t *l = a->l;
  struct dlock_client *c = l->client;
  a->since = o->sent.at = dlock__now_ms();
  if (a->wait_ms != 0) { /* a wait here watches the lock: its steps */
    dlock__wait_spec sp = {.bh = l->bh,
                           .lock_kind = l->kind,
                           .name = l->name,
                           .owner = a->owner,
                           .tid = a->tid,
                           .need = 1};
    if (!c->ops->wait_hot || c->ops->wait_hot(c->be, &sp)) {
      acq_to_pool(o);
      return;
    }
  }
  pthread_mutex_lock(&c->mu);
  dlock__hold *h =
      dlock__hold_reserve_locked(c, hold_kind(l->kind), l->name, a->tid);
  bool reentry = h && h->count > 0 && !h->lost;
  pthread_mutex_unlock(&c->mu);
  if (!h) {
    acq_finish(o, DLOCK_ENOMEM);
    return;
  }
  o->reentry = reentry;
  dlock__acquire at = try_request(a, reentry);
  int rc = c->ops->lock_acquire_send(c->be, &at, acq_sent, o);
  if (rc == DLOCK__SEND_BLOCKS)
    acq_to_pool(o);
  else if (rc < 0)
    acq_finish(o, rc);
}

/* An async acquire: with `done` for the program, or with `then` as a step
 * of another operation (core/async.h). */
static int acquire_async(dlock_lock_t *l, uint64_t tid, int64_t wait_ms,
                         int64_t lease_ms, dlock_done_fn done, void *userdata,
                         void (*then)(dlock__aop *), void *then_arg,
                         dlock_op_t *id, const char *fn) {
  if (id)
    *id = 0;
  if (!done && !then)
    return dlock__seterr(DLOCK_EINVAL, "%s: done is NULL", fn);
  if (tid == 0)
    tid = dlock_thread_id();
  int rc = acquire_check(l, tid, wait_ms, lease_ms, fn);
  if (rc || (rc = call_begin(l, fn)) != 0)
    return rc;
  acq_op *o = dlock__calloc(1, sizeof *o);
  if (!o)
    return call_end(l, DLOCK_ENOMEM);
  acquire_init(&o->a, l, tid, wait_ms, lease_ms);
  o->op.run = acq_run;
  o->op.free_fn = aop_free;
  o->op.done = done;
  o->op.userdata = userdata;
  o->op.then = then;
  o->op.then_arg = then_arg;
  /* the call stays open until the operation ends (acquire_end) */
  bool send = acq_sendable(o);
  rc = send ? dlock__aop_start_sent(l->client, &o->op, id)
            : dlock__aop_start(l->client, &o->op, id);
  if (rc) {
    dlock__free(o);
    return call_end(l, rc);
  }
  if (send) /* its outcome goes to the callback, whatever it is */
    acq_send(o);
  return 0;
}

int dlock_lock_acquire_async(dlock_lock_t *l, uint64_t tid, int64_t wait_ms,
                             int64_t lease_ms, dlock_done_fn done,
                             void *userdata, dlock_op_t *id) {
  return acquire_async(l, tid, wait_ms, lease_ms, done, userdata, NULL, NULL,
                       id, "dlock_lock_acquire_async");
}

int dlock__lock_acquire_then(dlock_lock_t *l, uint64_t tid, int64_t wait_ms,
                             int64_t lease_ms, void (*then)(dlock__aop *),
                             void *arg, dlock_op_t *id) {
  return acquire_async(l, tid, wait_ms, lease_ms, NULL, NULL, then, arg, id,
                       "dlock_multilock_acquire_async");
}

int dlock_lock_acquire(dlock_lock_t *l, int64_t wait_ms, int64_t lease_ms) {
  return acquire(l, dlock_thread_id(), wait_ms, lease_ms, NULL,
                 "dlock_lock_acquire");
}

int dlock_lock_acquire_as(dlock_lock_t *l, uint64_t tid, int64_t wait_ms,
                          int64_t lease_ms) {
  return acquire(l, tid, wait_ms, lease_ms, NULL, "dlock_lock_acquire_as");
}

static int acquire_fenced(dlock_lock_t *l, uint64_t tid, int64_t wait_ms,
                          int64_t lease_ms, int64_t *token, const char *fn) {
  if (!token)
    return dlock__seterr(DLOCK_EINVAL, "%s: token is NULL", fn);
  *token = 0;
  if (l && l->magic == DLOCK__LOCK_MAGIC && l->kind != DLOCK_FENCED)
    return dlock__seterr(DLOCK_EINVAL,
                         "%s: lock '%.200s' is not a fenced lock (create it "
                         "with DLOCK_FENCED)",
                         fn, l->name);
  return acquire(l, tid, wait_ms, lease_ms, token, fn);
}

int dlock_lock_acquire_fenced(dlock_lock_t *l, int64_t wait_ms,
                              int64_t lease_ms, int64_t *token) {
  return acquire_fenced(l, dlock_thread_id(), wait_ms, lease_ms, token,
                        "dlock_lock_acquire_fenced");
}

int dlock_lock_acquire_fenced_as(dlock_lock_t *l, uint64_t tid, int64_t wait_ms,
                                 int64_t lease_ms, int64_t *token) {
  return acquire_fenced(l, tid, wait_ms, lease_ms, token,
                        "dlock_lock_acquire_fenced_as");
}

/* One release, blocking or async: what its parts share. */
typedef struct rel {
  dlock_lock_t *l;
  uint64_t tid;
  bool retry; /* "not owner" means an earlier attempt released it */
  char owner[64], req[DLOCK__UUID_LEN + 1];
  dlock__release r;
} rel;

/* The release's opening (no I/O): true when it ended here (a re-entry
 * counted down without a round trip: outcome 0), else x->r is the
 * request to send. */
static inline __attribute__((always_inline)) bool
release_open(rel *x, dlock_lock_t *l, uint64_t tid) {
  struct dlock_client *c = l->client;
  x->l = l;
  x->tid = tid;
  dlock__owner(c, tid, x->owner, sizeof x->owner);

  /* reuse the request id of an earlier unsure release of this hold */
  pthread_mutex_lock(&c->mu);
  dlock__hold *h =
      dlock__hold_find_locked(c, hold_kind(l->kind), l->name, tid, NULL);
  if (client_owner(l) && h && h->count > 1 && !h->lost && !h->release_id[0]) {
    /* the server holds one id per client: re-entries are ours to count */
    h->count--;
    pthread_mutex_unlock(&c->mu);
    return true;
  }
  int64_t lease = h ? h->lease_ms : c->opts.watchdog_ms;
  bool h_had_id = h && h->release_id[0];
  if (h) /* a renewal that meets our release is not a loss */
    dlock__hold_release_begin_locked(c, h);
  if (h_had_id)
    memcpy(x->req, h->release_id, sizeof x->req);
  else
    x->req[0] = '\0';
  pthread_mutex_unlock(&c->mu);
  if (!x->req[0])
    dlock__reqid(&c->reqids, x->req);

  /* A release whose reply was lost is retried once with the same request
   * id (so is a user's retry after an error: the id is kept in the hold).
   * On a retry "not owner" means the first attempt released the lock. */
  x->retry = h_had_id;
  x->r = (dlock__release){.bh = l->bh,
                          .kind = l->kind,
                          .name = l->name,
                          .owner = x->owner,
                          .lease_ms = lease,
                          .request_id = x->req};
  return false;
}

/* An outcome whose attempt may have gone unheard: sent once more. */
static bool release_resends(int out) {
  return out == DLOCK_EUNAVAILABLE || out == DLOCK_EIOTIMEOUT;
}

/* The release's close, after the backend's outcome `out` (DLOCK__REL_*
 * or an error): the hold's record follows it, and the call ends. */
static inline __attribute__((always_inline)) int release_close(rel *x,
                                                               int out) {
  dlock_lock_t *l = x->l;
  struct dlock_client *c = l->client;
  uint64_t tid = x->tid;
  const char *owner = x->owner;
  int rc;
  if (out == DLOCK__REL_NOTOWNER && x->retry)
    out = DLOCK__REL_FREED;

  pthread_mutex_lock(&c->mu);
  dlock__hold *h =
      dlock__hold_find_locked(c, hold_kind(l->kind), l->name, tid, NULL);
  dlock__hold_release_end_locked(c, h);
  if (out < 0) {
    if (h && out != DLOCK_EWRONGTYPE)
      memcpy(h->release_id, x->req, sizeof x->req); /* a retry reuses it */
    rc = out;
  } else if (out == DLOCK__REL_NOTOWNER) {
    if (h && l->kind == DLOCK_READ && h->count > 1) {
      /* each read hold has its own lease: this one expired, the others
       * may well be alive and stay recorded (and renewed) */
      h->count--;
      h->release_id[0] = '\0';
      rc = dlock__seterr(DLOCK_ELOST,
                         "a read hold of '%.200s' had expired before this "
                         "release; %lld other read hold(s) remain recorded",
                         l->name, (long long)h->count);
    } else if (h) {
      dlock__hold_remove_locked(c, h);
      rc = dlock__seterr(DLOCK_ELOST,
                         "lock '%.200s' was lost before release (lease "
                         "expired or key removed)",
                         l->name);
    } else {
      rc = dlock__seterr(DLOCK_ENOTOWNER,
                         "lock '%.200s' is not held by this owner (%s)",
                         l->name, owner);
    }
  } else if (h && h->lost) {
    const char *why = h->lost_reason == DLOCK_LOST_GONE
                          ? "its key was gone or owned by someone else"
                          : "its lease could not be confirmed in time";
    dlock__hold_remove_locked(c, h); /* frees h: read it before */
    rc = dlock__seterr(DLOCK_ELOST,
                       "lock '%.200s' was reported lost before this release "
                       "(%s)",
                       l->name, why);
  } else if (out == DLOCK__REL_FREED && h && l->kind == DLOCK_READ &&
             h->count > 1) {
    /* a retry that found its hold gone: that hold only */
    h->count--;
    h->release_id[0] = '\0';
    rc = 0;
  } else if (out == DLOCK__REL_FREED) {
    if (h)
      dlock__hold_remove_locked(c, h);
    rc = 0;
  } else { /* DLOCK__REL_DOWN */
    if (h) {
      h->release_id[0] = '\0';
      if (h->count > 1)
        h->count--;
    }
    rc = 0;
  }
  /* the thread's hold is gone (freed, or lost and now forgotten): its
   * gate opens, and the client's other waits on the name try again */
  if (client_owner(l) &&
      !dlock__hold_find_locked(c, hold_kind(l->kind), l->name, tid, NULL))
    gate_leave_locked(c, l->name, tid, true);
  pthread_mutex_unlock(&c->mu);
  return call_end(l, rc);
}

static int release(dlock_lock_t *l, uint64_t tid, const char *fn) {
  if (tid == 0)
    return dlock__seterr(DLOCK_EINVAL, "%s: thread id 0 is not valid", fn);
  int rc = call_begin(l, fn);
  if (rc)
    return rc;
  struct dlock_client *c = l->client;
  rel x;
  if (release_open(&x, l, tid))
    return call_end(l, 0);
  int out = c->ops->lock_release(c->be, &x.r);
  if (release_resends(out)) {
    x.retry = true;
    out = c->ops->lock_release(c->be, &x.r);
  }
  return release_close(&x, out);
}

int dlock_lock_release(dlock_lock_t *l) {
  return release(l, dlock_thread_id(), "dlock_lock_release");
}

int dlock_lock_release_as(dlock_lock_t *l, uint64_t tid) {
  return release(l, tid, "dlock_lock_release_as");
}

/* An async release: sent from the calling thread where the backend can
 * (lock_release_send), its reply's handler ending it; otherwise, and for
 * the resend of an unheard attempt, the blocking operation runs on the
 * pool. */
typedef struct rel_op {
  dlock__aop op;
  rel x;
  dlock_lock_t *l;
  uint64_t tid;
  bool opened; /* release_open ran (else the pool thread runs it) */
  bool resend; /* the pool sends the attempt again (it went unheard) */
} rel_op;

static void rel_run(dlock__aop *op) {
  rel_op *o = (rel_op *)op;
  struct dlock_client *c = o->l->client;
  if (!o->opened && (o->opened = true, release_open(&o->x, o->l, o->tid))) {
    dlock__aop_complete(op, call_end(o->l, 0), 0);
    return;
  }
  if (o->resend)
    o->x.retry = true;
  int out = c->ops->lock_release(c->be, &o->x.r);
  if (!o->resend && release_resends(out)) {
    o->x.retry = true;
    out = c->ops->lock_release(c->be, &o->x.r);
  }
  dlock__aop_complete(op, release_close(&o->x, out), 0);
}

/* On the pool from here (resend: the attempt went unheard). */
static void rel_resume(rel_op *o, bool resend) {
  o->resend = resend;
  int rc = dlock__aop_resume(&o->op);
  if (rc)
    dlock__aop_complete(&o->op, release_close(&o->x, rc), 0);
}

static void rel_sent(void *arg, int out, int64_t x, int64_t y) {
  (void)x;
  (void)y;
  rel_op *o = arg;
  if (out == DLOCK__SEND_BLOCKS)
    rel_resume(o, false);
  else if (release_resends(out))
    rel_resume(o, true);
  else
    dlock__aop_complete(&o->op, release_close(&o->x, out), 0);
}

int dlock_lock_release_async(dlock_lock_t *l, uint64_t tid, dlock_done_fn done,
                             void *userdata, dlock_op_t *id) {
  const char *fn = "dlock_lock_release_async";
  if (id)
    *id = 0;
  if (!done)
    return dlock__seterr(DLOCK_EINVAL, "%s: done is NULL", fn);
  int rc = call_begin(l, fn);
  if (rc)
    return rc;
  struct dlock_client *c = l->client;
  rel_op *o = dlock__calloc(1, sizeof *o);
  if (!o)
    return call_end(l, DLOCK_ENOMEM);
  o->op.run = rel_run;
  o->op.free_fn = aop_free;
  o->op.done = done;
  o->op.userdata = userdata;
  o->l = l;
  o->tid = tid ? tid : dlock_thread_id();
  bool send = c->ops->lock_release_send != NULL;
  rc = send ? dlock__aop_start_sent(c, &o->op, id)
            : dlock__aop_start(c, &o->op, id);
  if (rc) {
    dlock__free(o);
    return call_end(l, rc);
  }
  /* started: from here on the outcome goes to the callback */
  if (!send) /* the pool thread opens it (rel_run) */
    return 0;
  o->opened = true;
  if (release_open(&o->x, l, o->tid)) {
    dlock__aop_complete(&o->op, call_end(l, 0), 0);
    return 0;
  }
  rc = c->ops->lock_release_send(c->be, &o->x.r, rel_sent, o);
  if (rc == DLOCK__SEND_BLOCKS)
    rel_resume(o, false);
  else if (rc < 0)
    dlock__aop_complete(&o->op, release_close(&o->x, rc), 0);
  return 0;
}

int dlock_lock_force_release(dlock_lock_t *l, bool *was_locked) {
  int rc = call_begin(l, "dlock_lock_force_release");
  if (rc)
    return rc;
  if ((rc = dlock__need_op(l->client, l->client->ops->lock_force_release,
                           "dlock_lock_force_release")))
    return call_end(l, rc);
  bool deleted = false;
  rc = l->client->ops->lock_force_release(l->client->be, l->kind, l->name,
                                          &deleted);
  if (!rc && was_locked)
    *was_locked = deleted;
  return call_end(l, rc);
}

static int query(dlock_lock_t *l, dlock__lock_query q, int64_t *out,
                 const char *fn) {
  if (!out)
    return dlock__seterr(DLOCK_EINVAL, "%s: out is NULL", fn);
  int rc = call_begin(l, fn);
  if (rc)
    return rc;
  if ((rc = dlock__need_op(l->client, l->client->ops->lock_query, fn)))
    return call_end(l, rc);
  char owner[64];
  dlock__owner(l->client, dlock_thread_id(), owner, sizeof owner);
  rc = l->client->ops->lock_query(l->client->be, l->kind, l->name, owner, q,
                                  out);
  if (!rc && client_owner(l) && (q == DLOCK__Q_HELD || q == DLOCK__Q_COUNT)) {
    /* the server says whether this client holds it; which thread, and
     * how many times, only the client knows */
    struct dlock_client *c = l->client;
    pthread_mutex_lock(&c->mu);
    dlock__hold *h = dlock__hold_find_locked(c, DLOCK__HK_LOCK, l->name,
                                             dlock_thread_id(), NULL);
    int64_t mine = h && !h->lost ? h->count : 0;
    pthread_mutex_unlock(&c->mu);
    if (*out > 0)
      *out = q == DLOCK__Q_HELD ? mine > 0 : mine;
  }
  if (rc == DLOCK_EWRONGTYPE)
    rc = dlock__seterr(rc, "%s: key '%.200s' holds a value of another type", fn,
                       l->name);
  return call_end(l, rc);
}

static int query_bool(dlock_lock_t *l, dlock__lock_query q, bool *out,
                      const char *fn) {
  if (!out)
    return dlock__seterr(DLOCK_EINVAL, "%s: out is NULL", fn);
  int64_t v = 0;
  int rc = query(l, q, &v, fn);
  if (!rc)
    *out = v > 0;
  return rc;
}

int dlock_lock_is_locked(dlock_lock_t *l, bool *out) {
  return query_bool(l, DLOCK__Q_LOCKED, out, "dlock_lock_is_locked");
}

int dlock_lock_is_held_by_thread(dlock_lock_t *l, bool *out) {
  return query_bool(l, DLOCK__Q_HELD, out, "dlock_lock_is_held_by_thread");
}

int dlock_lock_hold_valid(dlock_lock_t *l, uint64_t tid, int64_t *valid_ms) {
  static const char fn[] = "dlock_lock_hold_valid";
  if (!valid_ms)
    return dlock__seterr(DLOCK_EINVAL, "%s: valid_ms is NULL", fn);
  *valid_ms = 0;
  int rc = call_begin(l, fn);
  if (rc)
    return rc;
  struct dlock_client *c = l->client;
  int64_t until = 0;
  pthread_mutex_lock(&c->mu);
  dlock__hold *h =
      dlock__hold_find_locked(c, hold_kind(l->kind), l->name, tid, NULL);
  bool held = h && (h->count > 0 || h->lost);
  bool lost = h && h->lost;
  if (held && c->ops->lock_renew)
    until = dlock__hold_vouch_until_locked(c, h);
  pthread_mutex_unlock(&c->mu);
  if (!held)
    return call_end(l, dlock__seterr(DLOCK_ENOTOWNER,
                                     "lock '%.200s' is not held by thread %llu",
                                     l->name, (unsigned long long)tid));
  if (!c->ops->lock_renew) {
    if (dlock__session_valid_until(c, &until) != 0)
      lost = true;
  }
  *valid_ms = until - dlock__now_ms();
  if (lost && *valid_ms > 0)
    return call_end(l, dlock__seterr(DLOCK_ELOST,
                                     "lock '%.200s' was lost (%lld ms before "
                                     "its lease would have run out)",
                                     l->name, (long long)*valid_ms));
  if (*valid_ms <= 0)
    return call_end(l, dlock__seterr(DLOCK_ELOST,
                                     "lock '%.200s': its lease was last "
                                     "confirmed too long ago (lapsed %lld ms "
                                     "ago)",
                                     l->name, (long long)-*valid_ms));
  return call_end(l, 0);
}

int dlock_lock_hold_count(dlock_lock_t *l, int64_t *out) {
  return query(l, DLOCK__Q_COUNT, out, "dlock_lock_hold_count");
}

int dlock_lock_remaining_lease(dlock_lock_t *l, int64_t *out) {
  return query(l, DLOCK__Q_REMAINING, out, "dlock_lock_remaining_lease");
}

int dlock_lock_state(dlock_lock_t *l, dlock_lock_state_t **out) {
  if (!out)
    return dlock__seterr(DLOCK_EINVAL, "dlock_lock_state: out is NULL");
  *out = NULL;
  int rc = call_begin(l, "dlock_lock_state");
  if (rc)
    return rc;
  if ((rc = dlock__need_op(l->client, l->client->ops->lock_state,
                           "dlock_lock_state")))
    return call_end(l, rc);
  return call_end(
      l, l->client->ops->lock_state(l->client->be, l->kind, l->name, out));
}

int dlock_lock_hold_env(dlock_lock_t *l, uint64_t tid, char ***out) {
  if (!out)
    return dlock__seterr(DLOCK_EINVAL, "dlock_lock_hold_env: out is NULL");
  *out = NULL;
  if (tid == 0)
    return dlock__seterr(DLOCK_EINVAL,
                         "dlock_lock_hold_env: thread id 0 is not valid");
  int rc = call_begin(l, "dlock_lock_hold_env");
  if (rc || !l->client->ops->lock_hold_env)
    return rc ? rc : call_end(l, 0);
  char owner[64];
  dlock__owner(l->client, tid, owner, sizeof owner);
  return call_end(l, l->client->ops->lock_hold_env(l->client->be, l->kind,
                                                   l->name, owner, out));
}

void dlock_env_free(char **env) {
  for (size_t i = 0; env && env[i]; i++)
    dlock__free(env[i]);
  dlock__free(env);
}

void dlock_lock_state_free(dlock_lock_state_t *st) {
  if (!st)
    return;
  for (size_t i = 0; st->holders && i < st->nholders; i++)
    dlock__free((void *)st->holders[i].owner);
  dlock__free(st->holders);
  for (size_t i = 0; st->waiters && i < st->nwaiters; i++)
    dlock__free((void *)st->waiters[i]);
  dlock__free((void *)st->waiters);
  dlock__free(st->waiter_deadlines_ms);
  for (size_t i = 0; st->holder_infos && i < st->nholders; i++)
    dlock__free((void *)st->holder_infos[i]);
  dlock__free((void *)st->holder_infos);
  for (size_t i = 0; st->waiter_infos && i < st->nwaiters; i++)
    dlock__free((void *)st->waiter_infos[i]);
  dlock__free((void *)st->waiter_infos);
  dlock__free((void *)st->name);
  dlock__free(st);
}
