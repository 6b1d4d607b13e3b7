/*
 * backend.h - the one interface between the core and a coordination service.
 *
 * The core (client, locks, waits, renewer) never builds a backend command;
 * it calls these operations. A backend keeps its own connections (Redis: a
 * pool for caller threads, which may call any lock_* operation
 * concurrently, and one pub/sub connection driven by the event loop's
 * hooks) and whatever its waits need (core/wait.h).
 *
 * Return conventions: 0 or a positive outcome as documented, negative
 * DLOCK_E* on failure with the thread's error detail set, in the user's
 * terms: the core passes a backend's detail on (an acquire's
 * DLOCK_EWRONGTYPE included: Redis words the server's WRONGTYPE itself).
 * An operation on a lock with more than a few arguments takes one request
 * struct (dlock__acquire, dlock__release), so that a field added later
 * does not touch every backend's signature.
 *
 * Registration: a backend is one dlock__backend_ops value, with the URL
 * schemes it serves, named in the build's list (src/backends.c, one line);
 * the client picks it by the URL's scheme (core/registry.c) and hands it
 * the whole URL, which the backend parses itself.
 * open, close, lock_acquire, lock_release, wait_begin and wait_end are
 * required; so, for a backend that offers any lock kind, is
 * lock_leave, and for each sync kind it declares, the operations of that
 * kind (docs/BACKENDS.md has the table). A backend without lock_renew
 * keeps its holds alive itself, with one session (a ZooKeeper session, an
 * etcd lease): the core then renews nothing per hold; the backend reports
 * what the service confirmed of its session (dlock__session_begin,
 * _confirm, _linked) and the core's loss clock decides when it is lost
 * (core/session.h); a loss the service makes known (an expired session)
 * the backend reports with dlock__holds_session_lost. ping, check_name,
 * lock_force_release, lock_query, lock_state and the loop hooks may be
 * NULL (check_name: the backend takes every name the core accepts; Redis
 * refuses its own keys' "dlock_lock_" space), and `lock_kinds` /
 * `sync_kinds` say which objects the backend offers: the core answers a
 * call that needs a missing one with DLOCK_ENOTSUP naming the backend and
 * the operation (dlock__need_op), before anything is sent.
 * docs/BACKENDS.md tells how a backend is written and what each side
 * promises the other.
 */
#ifndef DLOCK_CORE_BACKEND_H
#define DLOCK_CORE_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/options.h"
#include "dlock/dlock.h"

struct dlock_client;

/* What a hold renews: a lock field (reentrant, fair and fenced locks share
 * one), the write side or the read side of a read-write lock, or a leased
 * permit of a permit semaphore. */
typedef enum dlock__hold_kind {
  DLOCK__HK_LOCK = 0,
  DLOCK__HK_WRITE = 1,
  DLOCK__HK_READ = 2,
  DLOCK__HK_PERMIT = 3
} dlock__hold_kind;

/* One entry of a batched renewal: the lease of `name` held by `owner`
 * (for a permit: the permit id). */
typedef struct dlock__renewal {
  dlock__hold_kind kind;
  const char *name;
  const char *owner;
  int result; /* out: 1 renewed, 0 gone (lock lost) */
} dlock__renewal;


typedef enum dlock__lock_query {
  DLOCK__Q_LOCKED,   /* 1 if anyone holds it */
  DLOCK__Q_HELD,     /* 1 if `owner` holds it */
  DLOCK__Q_COUNT,    /* owner's reentry count */
  DLOCK__Q_REMAINING /* lease left: ms, -1 no expiry, -2 free */
} dlock__lock_query;

/* A waiter's entry in the backend's wait queue, through which a release
 * hands the lock straight to the oldest live waiter. */
typedef struct dlock__queue_entry {
  uint64_t seq;       /* tells this wait from the owner's other waits */
  int64_t ttl_ms;     /* the entry expires unless refreshed within this */
  bool queued;        /* an earlier attempt of this wait already queued it */
} dlock__queue_entry;

/* One acquire attempt of a lock of any kind. */
typedef struct dlock__acquire {
  void *bh; /* the handle's backend state (handle_open), or NULL */
  dlock_lock_kind_t kind;
  const char *name;
  const char *owner; /* "<client-id>:<tid>" */
  int64_t lease_ms;
  /* reentrant, fenced and write: queue for a hand-off; read: register as a
   * waiting reader (NULL: don't) */
  const dlock__queue_entry *q;
  int64_t thread_wait_ms; /* fair: how long the queue keeps a silent waiter */
  bool try_once;          /* fair: do not join the queue on failure */
  /* the thread holds this lock already: the attempt adds a count to a
   * hold on the server, so a backend that undoes a failed attempt (one
   * over several servers) must undo only where it knows the attempt
   * counted */
  bool reentry;
} dlock__acquire;

/* One release of a lock of any kind. */
typedef struct dlock__release {
  void *bh; /* the handle's backend state (handle_open), or NULL */
  dlock_lock_kind_t kind;
  const char *name;
  const char *owner; /* "<client-id>:<tid>" */
  /* the hold's lease: what a count left behind keeps (a re-entered lock,
   * a read side under a write hold) */
  int64_t lease_ms;
  /* makes a retried release idempotent: a retry with the same id is
   * taken as the first attempt's */
  const char *request_id;
} dlock__release;

/* The objects of sync_* operations. A semaphore and a permit semaphore
 * share their count key and channel (Redisson's layout); a permit semaphore
 * also has the ZSET of permits in use. */
typedef enum dlock__sync_kind {
  DLOCK__SYNC_SEM = 0,    /* counting semaphore (RSemaphore) */
  DLOCK__SYNC_PERMIT = 1, /* permit semaphore (RPermitExpirableSemaphore) */
  DLOCK__SYNC_LATCH = 2   /* count-down latch (RCountDownLatch) */
} dlock__sync_kind;

/* What a wait waits for (core/wait.h). */
typedef struct dlock__wait_spec {
  void *bh;                    /* the handle's backend state, or NULL */
  bool sync;                   /* a semaphore or latch, not a lock */
  dlock_lock_kind_t lock_kind; /* a lock's kind */
  dlock__sync_kind sync_kind;  /* a semaphore's or latch's kind */
  const char *name;
  /* a lock's wait: "<client-id>:<tid>" of the waiting thread; a permit
   * semaphore's: the permit id its acquire asks for (its attempts may run
   * on any thread: async ones on the pool's); NULL for the other sync
   * kinds */
  const char *owner;
  uint64_t tid, seq; /* a hand-off names the wait by these */
  int64_t need;      /* a semaphore: the permits wanted */
} dlock__wait_spec;

struct dlock__wait;
struct pollfd;

/* A sent operation's outcome (lock_acquire_send, lock_release_send). */
typedef void (*dlock__sent_fn)(void *arg, int rc, int64_t x, int64_t y);
#define DLOCK__SEND_BLOCKS 100

/* Release outcomes. */
#define DLOCK__REL_DOWN 0     /* count went down, still held */
#define DLOCK__REL_FREED 1    /* fully released, waiters notified */
#define DLOCK__REL_NOTOWNER 2 /* owner holds nothing */

typedef struct dlock__backend_ops {
  const char *name;              /* "redis": for messages */
  const char *const *schemes;    /* URL schemes it serves, NULL-terminated */
  unsigned lock_kinds;           /* bit (1u << kind) per dlock_lock_kind_t */
  unsigned sync_kinds;           /* bit (1u << kind) per dlock__sync_kind */
  /* lock kinds whose waits queue on the server (dlock__acquire.q): a
   * release hands a queued waiter the lock (all but DLOCK_READ) or lets
   * registered readers in first (DLOCK_READ) */
  unsigned queue_kinds;
  /* the fair lock's queue drops a waiter that stays silent for its
   * thread-wait (Redisson's RFairLock): a fair wait comes back within a
   * third of it to keep its place. ZooKeeper and etcd queue by sequence
   * or revision for as long as the session lives, with no such expiry. */
  bool fair_queue_expires;
  /* The server knows one owner per client, not per thread (Spring
   * Integration's RedisLockRegistry layout: the key holds the client's
   * id). The core then keeps the rest of the lock's state itself, as the
   * registry's local ReentrantLock does: one thread of the client at a
   * time holds or tries a name (its "gate"; the others wait for it, woken
   * by its release), re-entries are counted without a round trip, and only
   * the last release reaches the server. */
  bool client_owner;
  /* Optional: why the kinds and objects left out of lock_kinds and
   * sync_kinds are missing, for the DLOCK_ENOTSUP message (NULL: "the
   * <name> backend does not support ..."). */
  const char *kinds_why;
  /* Parses url (DLOCK_EURL with the part that is wrong, never echoing a
   * password) and opens the backend, checking it with one round trip.
   * `core` is the client, for the up-calls below and in core/wait.h,
   * which a backend may make from any of its threads; it outlives the
   * backend. */
  int (*open)(void **be, const char *url, const struct dlock_options *opts,
              struct dlock_client *core);
  void (*close)(void *be);
  int (*ping)(void *be);
  /* Optional (NULL: every name the core accepts will do): refuses a name
   * this backend cannot give a lock, semaphore or latch, with DLOCK_EINVAL
   * and a detail beginning with `fn` (the public call). Called when a
   * handle is created, after the core's own checks (1..DLOCK_NAME_MAX
   * bytes); no round trip. Redis: names in the space of dlock's own keys
   * ("dlock_lock_"), which could be another lock's queue or channel. */
  int (*check_name)(void *be, const char *name, const char *fn);

  /* Per lock handle (optional): what the backend can prepare once for
   * (kind, name), such as key and channel names, so that each acquire,
   * release and wait does not build them again. handle_open returns 0 and
   * *bh (NULL allowed), or an error; handle_close frees it and needs no
   * backend (it may run after close). Operations get it as `bh`, and must
   * also work with bh NULL (the settling worker has no handle). */
  int (*handle_open)(void *be, dlock_lock_kind_t kind, const char *name,
                     void **bh);
  void (*handle_close)(void *bh);
  /* 1 acquired (or re-entered, or handed over while queued), *token = the
   * fencing token for a fenced lock; 0 held by another, *pttl = ms to wait
   * at most before retrying (the holder's lease, or for a fair lock the
   * waiter's estimated turn; -1 no bound); DLOCK_EDEADLK when a reader
   * asks for the write side. A fair attempt that fails queues the owner;
   * a reentrant, fenced or write one with a->q queues (or refreshes) its
   * entry; a read one with a->q registers as a waiting reader. */
  int (*lock_acquire)(void *be, const dlock__acquire *a, int64_t *pttl,
                      int64_t *token);
  /* A waiter gives up: removes its queue entry (the wait `seq` of
   * a->owner for reentrant, fenced and write; the owner for fair, seq 0)
   * or a reader's registration (always 0). 1 when the lock had already been handed
   * to it (the caller owns it now, with a fresh a->lease_ms, and *token
   * is its fencing token for a fenced lock), else 0. */
  int (*lock_leave)(void *be, const dlock__acquire *a, uint64_t seq,
                    int64_t *token);
  /* DLOCK__REL_*; r->request_id makes a retried release idempotent. */
  int (*lock_release)(void *be, const dlock__release *r);
  /* Optional: the non-blocking halves of lock_acquire (a try: a->q NULL,
   * try_once) and lock_release, for the async calls (Redis: on its
   * pipelined connection). send puts the request on its way and returns
   * at once: 0, and done(arg, rc, x, y) runs exactly once later (it may
   * run before send returns), with rc what the blocking operation returns
   * (acquire: x the pttl, y the token) and the thread's error detail set,
   * or DLOCK__SEND_BLOCKS when the blocking operation is to finish it:
   * nothing of it took effect, or what did is kept in the backend's own
   * state, from which the blocking operation, run next on the pool,
   * goes on (ZooKeeper: a create whose answer was lost); done runs on
   * a thread of the backend or of the event loop, with no core mutex
   * held, must not block, and runs within the bound the blocking
   * operation keeps (the command timeout: a silent server's request ends
   * in DLOCK_EIOTIMEOUT then, which loop_prepare's deadline can enforce).
   * DLOCK__SEND_BLOCKS returned: it cannot go
   * out without blocking now (no connection yet, replicas to WAIT for, a
   * kind or topology it does not send this way); nothing was sent, and
   * the core runs the blocking operation on its pool instead. */
  int (*lock_acquire_send)(void *be, const dlock__acquire *a,
                           dlock__sent_fn done, void *arg);
  int (*lock_release_send)(void *be, const dlock__release *r,
                           dlock__sent_fn done, void *arg);
  int (*lock_force_release)(void *be, dlock_lock_kind_t kind, const char *name,
                            bool *deleted);
  /* Renews every item in as few round trips as the backend allows, giving
   * up at `deadline` (monotonic ms). A failure of the whole batch is
   * returned; item results are then unset. */
  int (*lock_renew)(void *be, dlock__renewal *items, size_t n, int64_t lease_ms,
                    int64_t deadline);
  int (*lock_query)(void *be, dlock_lock_kind_t kind, const char *name,
                    const char *owner, dlock__lock_query q, int64_t *out);
  int (*lock_state)(void *be, dlock_lock_kind_t kind, const char *name,
                    dlock_lock_state_t **out);
  /* Optional (NULL: none): "NAME=VALUE" variables describing owner's hold
   * of name for a command run under it (dlock_lock_hold_env), as a
   * NULL-terminated array of dlock__alloc'd strings, or *out NULL. No
   * round trip. */
  int (*lock_hold_env)(void *be, dlock_lock_kind_t kind, const char *name,
                       const char *owner, char ***out);
  /* Optional, for a backend without lock_renew: the session's length as
   * the service granted it (a ZooKeeper session's negotiated timeout, an
   * etcd lease's granted TTL), or the length asked for while none is
   * granted yet. No round trip, no error detail. Backs
   * dlock_client_session_timeout. */
  int (*session_length)(void *be, int64_t *ms);
  /* Required for a backend without lock_renew: the core's loss clock
   * (core/session.h) ended session `sid`, which the backend reported with
   * dlock__session_begin; every hold was marked lost. The backend stops
   * using that session (a new one for the next acquire). On the event
   * loop, no mutex of the core held; it must not block. */
  void (*session_expired)(void *be, int64_t sid);

  /* Waiting (core/wait.h), from caller threads. wait_begin registers
   * w (w->spec says what for; the backend keeps its state in w->reg) and
   * arms nothing yet; wait_arm asks for the wake-up path (with
   * only_if_ready: only if it is armed already) and returns whether it is
   * armed (optional: NULL when each attempt arms its own path, a watch,
   * so a wait is always armed); wait_can_queue tells whether an attempt
   * may queue for a hand-off now (optional: NULL, whenever the kind
   * queues at all, queue_kinds); wait_end unregisters (a wake the waiter did
   * not use, dlock__wait_is_woken and not granted once no more wakes can reach
   * it, goes to another waiter of the object). The backend reports through the
   * up-calls of wait.h. */
  int (*wait_begin)(void *be, struct dlock__wait *w);
  /* Optional: false when no wait of this client watches what spec names
   * (its wake-up path is down), so that a first attempt before
   * registering cannot miss a wake-up nor lose a chance to queue. */
  bool (*wait_hot)(void *be, const dlock__wait_spec *spec);
  bool (*wait_arm)(void *be, struct dlock__wait *w, bool only_if_ready);
  bool (*wait_can_queue)(void *be, struct dlock__wait *w);
  void (*wait_end)(void *be, struct dlock__wait *w);

  /* The event loop (client.c), loop thread only; both may be NULL (a
   * backend with threads of its own). loop_prepare fills at most max
   * descriptors to poll and may lower *until (a deadline it needs);
   * it must not block. loop_dispatch gets them back after poll(). */
  int (*loop_prepare)(void *be, int64_t now, struct pollfd *fds, int max,
                      int64_t *until);
  void (*loop_dispatch)(void *be, int64_t now, const struct pollfd *fds,
                        int n);

  /* Semaphores and latches (sync.c in the Redis backend) */
  /* Semaphore or permit semaphore: sets the count to `permits` if the key
   * does not exist (and announces it); *set tells whether it did. */
  int (*sem_set)(void *be, const char *name, int64_t permits, bool *set);
  /* Adds n permits (n may be negative); announces when permits were added
   * and some are available. */
  int (*sem_add)(void *be, const char *name, int64_t n);
  /* 1 when `permits` were taken, 0 when fewer are available. */
  int (*sem_acquire)(void *be, const char *name, int64_t permits);
  /* Gives back `permits` and announces the new count. */
  int (*sem_release)(void *be, const char *name, int64_t permits);
  /* Permits available now (0 when absent); for a permit semaphore,
   * permits whose lease ran out count as available. */
  int (*sem_available)(void *be, dlock__sync_kind kind, const char *name,
                       int64_t *out);
  /* Deletes the semaphore's keys; *existed tells whether there were any. */
  int (*sem_delete)(void *be, dlock__sync_kind kind, const char *name,
                    bool *existed);
  /* Permit semaphore: first returns expired permits to the count, then
   * takes one permit under `id` for lease_ms (expiry on the server's
   * clock). 1 taken; 0 none free, *retry_in_ms = ms until the earliest
   * expiry among the permits in use, -1 when none is in use. */
  int (*psem_acquire)(void *be, const char *name, const char *id,
                      int64_t lease_ms, int64_t *retry_in_ms);
  /* 1 released (the permit was in use and unexpired), 0 unknown id (never
   * issued, released already, or expired and returned). */
  int (*psem_release)(void *be, const char *name, const char *id);
  int (*psem_state)(void *be, const char *name, dlock_sem_state_t **out);
  /* Latch: sets the count if the latch does not exist; *set tells. */
  int (*latch_set)(void *be, const char *name, int64_t count, bool *set);
  /* Counts down by one; at zero deletes the latch and announces it. */
  int (*latch_count_down)(void *be, const char *name);
  /* The count (0 when the latch does not exist). */
  int (*latch_count)(void *be, const char *name, int64_t *out);
  /* Deletes the latch, releasing its waiters; *existed tells. */
  int (*latch_delete)(void *be, const char *name, bool *existed);
} dlock__backend_ops;

/* Up-calls a backend may make, from any thread, with its own mutexes held
 * or not (they take client->mu at most; see also core/wait.h). */
/* Interrupts the event loop's poll(): it calls loop_prepare again. */
void dlock__client_poke(struct dlock_client *c);
/* Runs fn(arg) on the client's dialling worker (a blocking connect off the
 * event loop); 0, or an error with detail set (fn then never runs). */
int dlock__client_run_dial(struct dlock_client *c, void (*fn)(void *),
                           void *arg);
/* A link a hold depends on broke (its holding connection closed by the
 * server, say): every watchdog hold of the client is renewed now instead
 * of at its next period, so that the one whose renewal fails is reported
 * lost at once. Takes client->mu; never call it with a mutex the renewal
 * path takes. */
void dlock__holds_renew_now(struct dlock_client *c);
/* The backend's session (a ZooKeeper session, an etcd lease) ended: every
 * hold of the client is lost, reported once each by the event loop (an
 * acquire still waiting holds nothing: it is not reported). */
void dlock__holds_session_lost(struct dlock_client *c,
                               dlock_lost_reason_t reason);
/* The loss clock of a backend's session (core/session.h), from any
 * thread, with the backend's own mutexes held or not: a new session `sid`
 * of `length` ms is in use; the service cannot end session `sid` before
 * `until` (monotonic ms, from a send instant); a live connection does (or
 * no longer does) vouch for session `sid` (when it drops: `grace`, the
 * bound the link's own rule gives, or DLOCK__NEVER to run to the
 * confirmed one). Reports about any session but the latest begun are
 * ignored. */
void dlock__session_begin(struct dlock_client *c, int64_t sid, int64_t length);
void dlock__session_confirm(struct dlock_client *c, int64_t sid, int64_t until);
void dlock__session_linked(struct dlock_client *c, int64_t sid, bool linked,
                           int64_t grace);
/* The user's log callback, if any, at `level` or below. Never call it with
 * a mutex of the backend held: the callback is the user's code. */
void dlock__log(struct dlock_client *c, dlock_log_level_t level,
                const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The registry (core/registry.c): the scheme scan over a build's list of
 * backends. The list itself is the build's (src/backends.c): the backends
 * compiled in, and those left out with how to get them, so that their URLs
 * fail with that line rather than as an unknown scheme. */
typedef struct dlock__backend_absent {
  const char *name;           /* for "this build has no <name> backend" */
  const char *const *schemes; /* its URL schemes, NULL-terminated */
  const char *how;            /* "rebuild with -D...=ON (needs ...)" */
} dlock__backend_absent;

typedef struct dlock__registry {
  const dlock__backend_ops *const *built;
  size_t nbuilt;
  const dlock__backend_absent *absent;
  size_t nabsent;
} dlock__registry;

/* The backend of r serving url's scheme (compared without regard to
 * case), or NULL with DLOCK_EURL set: a URL bad whatever its backend, a
 * backend left out, or an unknown scheme (naming the schemes r has). */
const dlock__backend_ops *dlock__registry_find(const dlock__registry *r,
                                               const char *url);

#endif
