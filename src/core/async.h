/*
 * async.h - the client's async operations (the async API of dlock.h).
 *
 * An operation is a record with a run function. It runs on a small pool
 * of the client's threads (dlock_options_set_async_threads), one step
 * after another, the blocking ones (a round trip) included, until it must
 * wait for something that is not a thread's work: a wake-up of its wait,
 * a hand-off, a timer, a cancel. Then it parks (dlock__aop_park) and its
 * thread goes on with other operations; a wait's up-call (wait.h: the
 * wait's notify hook), its timer, a cancel or the client's teardown makes
 * it runnable again and a pool thread calls its run function anew. So a
 * thousand waiting operations are a thousand records, not threads.
 *
 * A sent operation (dlock__aop_start_sent) skips the pool: its caller
 * put its one request on the wire (backend.h lock_*_send) and the
 * reply's handler, on whatever thread read the reply, ends it or hands it
 * to the pool (dlock__aop_resume) for what the send could not do.
 *
 * When it ends, it hands its outcome over (dlock__aop_complete): the
 * outcome waits on the client's completion queue, the completion
 * descriptor becomes readable, and the program's dlock_client_process()
 * runs the callback on its own thread, with no library mutex held.
 *
 * State: the pool, the run queue, the timers (a binary heap by due time),
 * the list of pending operations and the completion queue are all under
 * client->mu, which the wait up-calls hold when they notify: parking
 * checks its condition under that same mutex, so no wake-up is lost
 * between the check and the park. A run function is called without any
 * mutex held, by one pool thread at a time.
 */
#ifndef DLOCK_CORE_ASYNC_H
#define DLOCK_CORE_ASYNC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlock/dlock.h"

struct dlock_client;
typedef struct dlock__aop dlock__aop;

struct dlock__aop {
  struct dlock_client *c;
  dlock_op_t id;
  /* Called on a pool thread without a mutex: advances the operation until
   * it parks (dlock__aop_park returned true) or completes
   * (dlock__aop_complete), after which it must not touch the record. */
  void (*run)(dlock__aop *op);
  /* Frees the record once its callback has run (any thread). */
  void (*free_fn)(dlock__aop *op);
  dlock_done_fn done;
  void *userdata;
  /* An operation that is a step of another (a multilock's wait for one
   * member): instead of queueing its outcome for dlock_client_process,
   * dlock__aop_complete leaves the pending list and hands the record to
   * then(op), on the pool thread, no mutex held; then frees it. */
  void (*then)(dlock__aop *op);
  void *then_arg;
  _Atomic bool cancelled; /* dlock_op_cancel asked it to end */
  /* --- under client->mu --- */
  int where;               /* runnable, running, parked, done */
  int64_t until;           /* parked: when its timer fires (or NEVER) */
  size_t heap_at;          /* parked with a timer: its place in the heap */
  dlock__aop *prev, *next; /* the client's pending operations */
  dlock__aop *qnext;       /* the run queue or the completion queue */
  /* the outcome */
  int rc;
  int64_t value;
  char *errmsg; /* rc < 0: its detail (NULL: none could be kept) */
};
/* An ended operation's detail, for its callback. */
const char *dlock__aop_error(const dlock__aop *op);
/* Frees an ended operation's record and detail (free_fn). */
void dlock__aop_free(dlock__aop *op);

/* Registers op (c, run, free_fn, done and userdata set; the rest zero)
 * and queues it to run; starts a pool thread when none is idle. 0 and
 * *id (id may be NULL), or an error with detail set (op not registered;
 * the caller frees it). */
int dlock__aop_start(struct dlock_client *c, dlock__aop *op, dlock_op_t *id);
/* As dlock__aop_start, but op is not queued to run: its request was (or
 * is about to be) sent by the calling thread (backend.h lock_*_send),
 * and the reply's handler ends it (dlock__aop_complete) or hands it to
 * the pool (dlock__aop_resume). */
int dlock__aop_start_sent(struct dlock_client *c, dlock__aop *op,
                          dlock_op_t *id);
/* A sent op goes on on the pool: queued to run its run function. 0, or
 * the error when no pool thread exists and none could start (op is not
 * queued: the caller completes it). */
int dlock__aop_resume(dlock__aop *op);
/* From op's run function: parks it until `until` (monotonic ms;
 * DLOCK__NEVER: no timer) unless due(op, arg), checked under client->mu,
 * is true already; due must also be true once op is cancelled or the
 * client stops. true: parked, the run function returns at once (the
 * operation runs again when notified or at `until`); false: it goes on. */
bool dlock__aop_park(dlock__aop *op, int64_t until,
                     bool (*due)(dlock__aop *op, void *arg), void *arg);
/* mu held: a parked op is made runnable (a wait's notify hook). */
void dlock__aop_wake_locked(dlock__aop *op);
/* From op's run function: the operation ended with rc (and value); the
 * thread's error detail is kept for its callback. */
void dlock__aop_complete(dlock__aop *op, int rc, int64_t value);
/* A wait notify hook whose notify_arg is the operation parked on it. */
struct dlock__wait;
void dlock__aop_notify(struct dlock__wait *w);

/* An operation that is one blocking call: fn(arg, &value) runs on a pool
 * thread (arg: size bytes, at most DLOCK__AOP_ARG_MAX, copied) and its
 * return is the outcome. The caller has begun a public call, which fn
 * ends. 0, or an error (nothing started: the caller ends its call). */
#define DLOCK__AOP_ARG_MAX 64
typedef int (*dlock__aop_call_fn)(void *arg, int64_t *value);
int dlock__aop_call(struct dlock_client *c, dlock__aop_call_fn fn,
                    const void *arg, size_t size, dlock_done_fn done,
                    void *userdata, dlock_op_t *id);

/* An async acquire of lock l (as dlock_lock_acquire_async) that is a step
 * of another operation: `then` gets its record when it ends (op->rc,
 * op->errmsg; then frees it with op->free_fn). lock.c. */
struct dlock_lock;
int dlock__lock_acquire_then(struct dlock_lock *l, uint64_t tid,
                             int64_t wait_ms, int64_t lease_ms,
                             void (*then)(dlock__aop *), void *arg,
                             dlock_op_t *id);

/* dlock_client_free, mu held, once `stopping` is set: every parked
 * operation runs again (and sees the client stop). */
void dlock__async_wake_all_locked(struct dlock_client *c);
/* dlock_client_free, after the calls in progress have ended: stops the
 * pool and runs the callbacks still waiting, on the calling thread. */
void dlock__async_stop(struct dlock_client *c);
/* Frees what is left (client teardown); forked: no thread exists here. */
void dlock__async_free(struct dlock_client *c, bool forked);

#endif
