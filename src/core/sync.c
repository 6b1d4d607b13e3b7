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
 *
 * The wait is a step machine, as a lock's is (lock.c): sync_step() takes
 * what just happened and returns the next action, never blocking itself;
 * dlock__sync_wait is its blocking driver. States (the action issued
 * last): START; ARM (-> ARMED armed); AWAIT_READY, when not armed at once
 * (-> READY, then the path's failure ends the wait); ATTEMPT (-> ATTEMPTED
 * rc, bound); RETRY, an outage's backoff (dlock__wait_retry_plan), and
 * SLEEP, until a wake, the bound or the deadline (both -> WOKEN); DONE rc.
 */
#include "core/sync.h"

#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "core/alloc.h"
#include "core/async.h"
#include "core/clock.h"
#include "core/error.h"

int dlock__sync_new(struct dlock_client *c, const char *name,
                    dlock__sync_kind kind, uint32_t magic, const char *fn,
                    dlock__sync **out) {
  *out = NULL;
  int rc = dlock__client_check(c, fn);
  if (!rc)
    rc = dlock__check_name(c, name, fn);
  static const char *const kind_names[] = {"semaphores", "permit semaphores",
                                           "count-down latches"};
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

typedef enum {
  SS_START,
  SS_ARM,
  SS_AWAIT_READY,
  SS_ATTEMPT,
  SS_RETRY,
  SS_SLEEP,
  SS_DONE
} sync_state;

typedef enum {
  SYNC_EV_START,
  SYNC_EV_ARMED,
  SYNC_EV_READY,
  SYNC_EV_ATTEMPTED,
  SYNC_EV_WOKEN
} sync_event_kind;

typedef struct sync_event {
  sync_event_kind kind;
  bool armed;    /* ARMED */
  int rc;        /* ATTEMPTED: 1 done, 0 not yet, < 0 failed */
  int64_t bound; /* ATTEMPTED: the longest sleep before the next (-1: none) */
} sync_event;

typedef enum {
  SYNC_DO_ARM,
  SYNC_DO_AWAIT_READY,
  SYNC_DO_ATTEMPT,
  SYNC_DO_RETRY_AFTER,
  SYNC_DO_SLEEP,
  SYNC_DO_DONE
} sync_action_kind;

typedef struct sync_action {
  sync_action_kind kind;
  int64_t until; /* AWAIT_READY, RETRY_AFTER, SLEEP (monotonic ms) */
  int rc;        /* DONE */
} sync_action;

typedef struct sync_ctx {
  dlock__wait w;
  int64_t deadline;
  sync_state state;
  dlock__outage outage;       /* attempts failed in an outage */
  const _Atomic bool *cancel; /* an async wait's cancel flag, or NULL */
} sync_ctx;

static sync_action sync_act(sync_ctx *x, sync_state st, sync_action a) {
  x->state = st;
  return a;
}

static sync_action sync_done(sync_ctx *x, int rc) {
  return sync_act(x, SS_DONE, (sync_action){.kind = SYNC_DO_DONE, .rc = rc});
}

static sync_action sync_attempt(sync_ctx *x) {
  if (dlock__client_stopping(x->w.c))
    return sync_done(x,
                     dlock__seterr(DLOCK_ECLOSED, "the client is being freed"));
  if (x->cancel && atomic_load(x->cancel))
    return sync_done(x, dlock__seterr(DLOCK_ECANCELED,
                                      "the wait for '%.200s' was cancelled",
                                      x->w.spec->name));
  return sync_act(x, SS_ATTEMPT, (sync_action){.kind = SYNC_DO_ATTEMPT});
}

static sync_action sync_step(sync_ctx *x, const sync_event *ev) {
  switch (x->state) {
  case SS_START:
    return sync_act(x, SS_ARM, (sync_action){.kind = SYNC_DO_ARM});
  case SS_ARM: {
    if (ev->armed)
      return sync_attempt(x);
    int64_t sub_deadline =
        dlock__deadline_after(x->w.c->opts.command_timeout_ms);
    if (sub_deadline > x->deadline)
      sub_deadline = x->deadline;
    /* not subscribed by then: attempt anyway; the confirmation, when it
     * comes, wakes this waiter for another attempt */
    return sync_act(
        x, SS_AWAIT_READY,
        (sync_action){.kind = SYNC_DO_AWAIT_READY, .until = sub_deadline});
  }
  case SS_AWAIT_READY: {
    int rc = dlock__wait_error(&x->w);
    return rc ? sync_done(x, rc) : sync_attempt(x);
  }
  case SS_ATTEMPT: {
    if (ev->rc != 0) {
      int64_t until;
      if (!dlock__wait_retry_plan(&x->w, ev->rc, x->deadline, &x->outage,
                                  &until))
        return sync_done(x, ev->rc);
      /* rode out: try again */
      return sync_act(
          x, SS_RETRY,
          (sync_action){.kind = SYNC_DO_RETRY_AFTER, .until = until});
    }
    dlock__wait_recovered(&x->w, &x->outage);
    int64_t now = dlock__now_ms();
    if (now >= x->deadline)
      return sync_done(x, 0);
    int64_t until = x->deadline;
    int64_t bound = ev->bound;
    if (bound >= 0 && bound < until - now) /* no overflow on a huge bound */
      until = now + (bound > 0 ? bound : 1);
    return sync_act(x, SS_SLEEP,
                    (sync_action){.kind = SYNC_DO_SLEEP, .until = until});
  }
  case SS_RETRY:
  case SS_SLEEP:
    return sync_attempt(x);
  case SS_DONE:
    break;
  }
  return sync_done(
      x, dlock__seterr(DLOCK_EINVAL, "a step of a wait that has ended"));
}

/* A wait's registration: its spec (which outlives the wait) and begin. */
static int sync_open(dlock__sync *h, sync_ctx *x, dlock__wait_spec *spec,
                     int64_t need, const char *owner, int64_t deadline) {
  memset(x, 0, sizeof *x);
  x->deadline = deadline;
  x->state = SS_START;
  *spec = (dlock__wait_spec){.sync = true,
                             .sync_kind = h->kind,
                             .name = h->name,
                             .owner = owner,
                             .tid = dlock_thread_id(),
                             .seq = atomic_fetch_add(&wait_seq, 1) + 1,
                             .need = need > 0 ? need : 1};
  return dlock__wait_begin(h->client, &x->w, spec);
}

/* The actions any driver does at once: arming and an attempt. */
static bool sync_act_now(sync_ctx *x, const sync_action *act,
                         dlock__sync_attempt_fn attempt, void *ctx,
                         sync_event *ev) {
  if (act->kind == SYNC_DO_ARM) {
    *ev = (sync_event){.kind = SYNC_EV_ARMED,
                       .armed = dlock__wait_arm(&x->w, false)};
    return true;
  }
  if (act->kind == SYNC_DO_ATTEMPT) {
    int64_t bound = -1;
    dlock__err_set_unsent(false);
    int arc = attempt(ctx, &bound);
    *ev = (sync_event){.kind = SYNC_EV_ATTEMPTED, .rc = arc, .bound = bound};
    return true;
  }
  return false;
}

int dlock__sync_wait(dlock__sync *h, int64_t need, const char *owner,
                     int64_t deadline, dlock__sync_attempt_fn attempt,
                     void *ctx) {
  sync_ctx x;
  dlock__wait_spec spec;
  int rc = sync_open(h, &x, &spec, need, owner, deadline);
  if (rc)
    return rc;
  sync_event ev = {.kind = SYNC_EV_START};
  for (;;) {
    sync_action act = sync_step(&x, &ev);
    if (sync_act_now(&x, &act, attempt, ctx, &ev))
      continue;
    if (act.kind == SYNC_DO_DONE) {
      rc = act.rc;
      break;
    }
    if (act.kind == SYNC_DO_AWAIT_READY) {
      dlock__wait_await_ready(&x.w, act.until);
      ev = (sync_event){.kind = SYNC_EV_READY};
    } else { /* RETRY_AFTER, SLEEP */
      dlock__wait_sleep(&x.w, act.until);
      ev = (sync_event){.kind = SYNC_EV_WOKEN};
    }
  }
  dlock__wait_end(&x.w);
  return rc;
}

/* ------------------------------------------------- the async driver
 *
 * One attempt, then the same steps as dlock__sync_wait, driven by the
 * client's async pool (core/async.h): arming and attempts run on a pool
 * thread, and a wait for readiness, a sleep or an outage's backoff parks
 * the operation until its wait's notify hook, its timer or a cancel. */
typedef struct sync_aop {
  dlock__aop op;
  dlock__sync *h;
  int64_t need, wait_ms;
  const char *owner; /* the wait's owner (a permit's id), or NULL */
  dlock__sync_attempt_fn attempt;
  dlock__sync_finish_fn finish;
  bool stepping;   /* the wait is registered; its steps run */
  sync_action act; /* the action it is parked on */
  sync_ctx x;
  dlock__wait_spec spec;
  _Alignas(max_align_t) unsigned char ctx[DLOCK__SYNC_CTX_MAX];
} sync_aop;

static bool sync_due(dlock__aop *op, void *arg) {
  sync_aop *o = arg;
  if (atomic_load(&op->cancelled))
    return true;
  return o->act.kind == SYNC_DO_AWAIT_READY
             ? dlock__wait_ready_due_locked(&o->x.w, o->act.until)
             : dlock__wait_sleep_due_locked(&o->x.w, o->act.until);
}

static sync_event sync_resumed(sync_aop *o) {
  if (o->act.kind == SYNC_DO_AWAIT_READY) {
    dlock__wait_ready_end(&o->x.w);
    return (sync_event){.kind = SYNC_EV_READY};
  }
  dlock__wait_sleep_end(&o->x.w);
  return (sync_event){.kind = SYNC_EV_WOKEN};
}

static void sync_finish(sync_aop *o, int rc) {
  int64_t value = 0;
  rc = o->finish(o->ctx, rc, &value);
  dlock__aop_complete(&o->op, rc, rc == 0 ? value : 0);
}

static void sync_run(dlock__aop *op) {
  sync_aop *o = (sync_aop *)op;
  sync_event ev;
  if (!o->stepping) {
    int64_t deadline = dlock__deadline_after(o->wait_ms);
    int64_t bound;
    dlock__err_set_unsent(false);
    int rc =
        atomic_load(&op->cancelled)
            ? dlock__seterr(DLOCK_ECANCELED, "'%.200s': cancelled", o->h->name)
            : o->attempt(o->ctx, &bound);
    /* an outage does not end a wait (dlock__wait_retry) */
    if (!((rc == 0 || dlock__sync_rides_out(rc, deadline)) &&
          o->wait_ms != 0)) {
      sync_finish(o, rc);
      return;
    }
    if ((rc = sync_open(o->h, &o->x, &o->spec, o->need, o->owner, deadline)) !=
        0) {
      sync_finish(o, rc);
      return;
    }
    o->x.cancel = &op->cancelled;
    pthread_mutex_lock(&o->h->client->mu);
    o->x.w.notify = dlock__aop_notify;
    o->x.w.notify_arg = op;
    pthread_mutex_unlock(&o->h->client->mu);
    o->stepping = true;
    ev = (sync_event){.kind = SYNC_EV_START};
  } else {
    ev = sync_resumed(o);
  }
  for (;;) {
    sync_action act = sync_step(&o->x, &ev);
    if (sync_act_now(&o->x, &act, o->attempt, o->ctx, &ev))
      continue;
    if (act.kind == SYNC_DO_DONE) {
      dlock__wait_end(&o->x.w);
      sync_finish(o, act.rc);
      return;
    }
    o->act = act;
    if (dlock__aop_park(op, act.until, sync_due, o))
      return;
    ev = sync_resumed(o);
  }
}

static void sync_aop_free(dlock__aop *op) { dlock__free(op); }

int dlock__sync_async(dlock__sync *h, int64_t need, const char *owner,
                      int64_t wait_ms, dlock__sync_attempt_fn attempt,
                      dlock__sync_finish_fn finish, const void *ctx,
                      size_t ctx_size, dlock_done_fn done, void *userdata,
                      dlock_op_t *id) {
  sync_aop *o =
      ctx_size <= DLOCK__SYNC_CTX_MAX ? dlock__calloc(1, sizeof *o) : NULL;
  if (!o)
    return DLOCK_ENOMEM;
  o->h = h;
  o->need = need;
  o->owner = owner;
  o->wait_ms = wait_ms;
  o->attempt = attempt;
  o->finish = finish;
  memcpy(o->ctx, ctx, ctx_size);
  o->op.run = sync_run;
  o->op.free_fn = sync_aop_free;
  o->op.done = done;
  o->op.userdata = userdata;
  int rc = dlock__aop_start(h->client, &o->op, id);
  if (rc)
    dlock__free(o);
  return rc;
}
