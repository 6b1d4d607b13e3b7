/*
 * wait.h - a thread waiting for a lock, a semaphore or a latch, in terms any
 * backend can serve.
 *
 * A waiting caller thread owns one dlock__wait. It asks its backend to
 * register it (wait_begin) and to arm the backend's wake-up path
 * (wait_arm: Redis subscribes a channel; a watch-the-predecessor backend
 * would arm its watch with the attempt itself), then retries its attempt
 * each time the backend says one of:
 *   - try again  (dlock__wait_wake: a release, a watch that fired, a
 *                 reconnect after which a message may have been lost);
 *   - granted    (dlock__wait_grant: a release handed this wait the lock,
 *                 with its fencing token; the caller returns at once);
 *   - failed     (dlock__wait_fail: the wake-up path was refused);
 *   - ready      (dlock__wait_set_ready: the wake-up path is armed, or no
 *                 longer is), which usually also counts as "try again".
 * Between attempts it sleeps on its condition variable for at most the
 * time its last attempt bounded (the holder's lease, its deadline).
 *
 * The backend keeps whatever it needs (channels, watches, queues) in its
 * own registration (w->reg) under its own mutex, and calls the up-calls
 * below from any of its threads (the event loop, a library thread of its
 * own) with its mutex held or not: an up-call only takes client->mu, and
 * the core never calls a backend with client->mu held (lock order: backend
 * mutex, then client->mu).
 *
 * The client keeps every live wait on a list, so that dlock_client_free()
 * can wake them all.
 */
#ifndef DLOCK_CORE_WAIT_H
#define DLOCK_CORE_WAIT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/backend.h"

struct dlock_client;

typedef struct dlock__wait {
  struct dlock_client *c;
  const dlock__wait_spec *spec; /* what it waits for; outlives the wait */
  void *reg;                    /* the backend's registration */
  pthread_cond_t cond;
  struct dlock__wait *prev, *next; /* client->waits, under client->mu */
  /* A node wait of a backend over several servers, each served by a
   * backend of its own: set by that backend on the wait it registers
   * with one server's backend for the caller's wait `parent`. Nobody sleeps on
   * a node wait: its wakes and failures wake the parent (one node's failure
   * only makes the parent try again), its readiness makes the parent ready, and
   * its grants count as wakes. */
  struct dlock__wait *parent;
  /* A backend over several servers that registers the wait with one of
   * them at a time (the one that serves the name now, which may change)
   * keeps its own record of which one here. */
  void *route;
  /* --- under client->mu --- */
  bool woken;    /* try again; cleared by the waiter that consumes it */
  bool ready;    /* the backend's wake-up path is armed */
  bool granted;  /* a release handed this wait the lock */
  int64_t token; /* the fencing token its grant carried (0: none) */
  int err;       /* the wait cannot go on: code, and detail in errmsg */
  char errmsg[320];
  /* A wait nobody sleeps on (an async operation's, core/async.h): called,
   * mu held, wherever the condition is signalled, so that the operation
   * parked on this wait runs again. Set under mu after dlock__wait_begin;
   * NULL for a thread's wait. */
  void (*notify)(struct dlock__wait *w);
  void *notify_arg;
} dlock__wait;

/* Caller side (mu NOT held). begin registers the wait with the backend;
 * nothing is armed yet, so an acquire that succeeds at once costs
 * nothing. */
int dlock__wait_begin(struct dlock_client *c, dlock__wait *w,
                      const dlock__wait_spec *spec);
/* Asks for the wake-up path and keeps it while the wait lasts. With
 * only_if_ready, does so only when it is armed already (atomically with
 * that check). Returns whether it is armed now. */
bool dlock__wait_arm(dlock__wait *w, bool only_if_ready);
/* True when an attempt may queue on the server for a hand-off now. */
bool dlock__wait_can_queue(dlock__wait *w);
/* 0, or the failure (with detail set) the backend reported. */
int dlock__wait_error(dlock__wait *w);
/* Whether a release handed this wait the lock, and its token. */
bool dlock__wait_granted(dlock__wait *w);
int64_t dlock__wait_grant_token(dlock__wait *w);
/* Sleeps until armed (true), granted, failed, the client stops, or the
 * deadline (false). */
bool dlock__wait_await_ready(dlock__wait *w, int64_t deadline);
/* Sleeps until woken or `until`; true when woken. */
bool dlock__wait_sleep(dlock__wait *w, int64_t until);
/* The two sleeps' conditions, for a driver that parks instead of sleeping
 * (mu held; never sleep): true when dlock__wait_await_ready, or
 * dlock__wait_sleep, would return now. */
bool dlock__wait_ready_due_locked(dlock__wait *w, int64_t deadline);
bool dlock__wait_sleep_due_locked(dlock__wait *w, int64_t until);
/* What those sleeps do as they return (mu NOT held): await_ready's result
 * (whether armed), and sleep's (whether woken), the wake consumed. */
bool dlock__wait_ready_end(dlock__wait *w);
bool dlock__wait_sleep_end(dlock__wait *w);
void dlock__wait_end(dlock__wait *w);

/* A streak of attempts failed in an outage (zero it at the wait's start). */
typedef struct dlock__outage {
  int failures;  /* in a row */
  int64_t since; /* when the first of them failed (monotonic ms) */
} dlock__outage;

/* A wait rides out an outage: an attempt that failed with rc, where the
 * failure sent nothing or left nothing behind (dlock__err_unsent: no
 * connection could be had while a server restarts or a master fails
 * over; an attempt undone on every server of a backend over several) and is one
 * a service recovers from (unreachable, no answer), is made again while the
 * deadline is ahead and the outage is younger than the client's outage
 * grace (dlock_options_set_outage_grace): this sleeps until the next try
 * (50 ms, doubling to 1 s; a wake such as a reconnect or a release cuts it
 * short) and returns true; else false, and the wait ends with rc and its
 * detail. A failure that may have reached the server ends the wait as
 * ever: its outcome is unknown, and a second attempt could count twice.
 * The first failure of a streak is logged (warning), and so is the
 * recovery (info). */
bool dlock__wait_retry(dlock__wait *w, int rc, int64_t deadline,
                       dlock__outage *o);
/* dlock__wait_retry without its sleep (for a wait driven as steps,
 * lock.c): the same decision, streak and log line; on true, the next try
 * is due at *until (the caller sleeps until then, a wake cutting it
 * short). Sleeps never. */
bool dlock__wait_retry_plan(dlock__wait *w, int rc, int64_t deadline,
                            dlock__outage *o, int64_t *until);
/* Whether rc is a failure dlock__wait_retry would ride out. */
bool dlock__wait_outage(int rc);
/* After a successful attempt: logs the end of a streak of failures. */
void dlock__wait_recovered(dlock__wait *w, dlock__outage *o);

/* Up-calls, from any backend thread. */
void dlock__wait_wake(dlock__wait *w);
void dlock__wait_grant(dlock__wait *w, int64_t token);
void dlock__wait_fail(dlock__wait *w, int code, const char *msg);
/* wake: also count it as "try again" (a change that may follow a lost
 * message). false for a wait registered on a path already armed, and for
 * a path given up while no wait had armed it (those waits arm it, finding
 * it down, before they sleep). */
void dlock__wait_set_ready(dlock__wait *w, bool ready, bool wake);
/* True while a wake of w is not yet consumed by its waiter (a backend that
 * wakes "the oldest waiter not already woken" asks this). */
bool dlock__wait_is_woken(dlock__wait *w);
/* A grant for (tid, seq) reached this client after its wait had ended:
 * the unresolved wait it belongs to is settled now (holds.h). */
void dlock__wait_orphan_grant(struct dlock_client *c, uint64_t tid,
                              uint64_t seq);

/* Wakes every lock wait of `name` of this client (mu held): a
 * client_owner backend's gate of the name was left (lock.c). */
void dlock__waits_wake_lock_locked(struct dlock_client *c, const char *name);
/* dlock_client_free(): wakes every wait (mu held). */
void dlock__waits_wake_all_locked(struct dlock_client *c);

#endif
