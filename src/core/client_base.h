/*
 * client_base.h - the client object every core module shares, and what
 * each of them uses of it (client_base.c; the kind and operation checks:
 * registry.c). The client's life (creation, teardown, the event loop) is
 * client.h's, the module at the top.
 *
 * Lock order: client->mu is the only core mutex, and the last one taken:
 * a backend may make its up-calls (backend.h, wait.h) with its own mutex
 * held, and the core never calls a backend with client->mu held. It is
 * never held across network I/O or user callbacks.
 */
#ifndef DLOCK_CORE_CLIENT_BASE_H
#define DLOCK_CORE_CLIENT_BASE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/backend.h"
#include "core/id.h"
#include "core/map.h"
#include "core/options.h"
#include "core/worker.h"

/* The loss clock of the backend's session (session.h has its rules). */
typedef struct dlock__session_clock {
  bool begun;     /* a session was reported: the clock applies */
  bool linked;    /* a live connection vouches for it: the clock is paused */
  bool gone;      /* lost (by the clock or by the service) */
  bool expired;   /* the clock ran out: the backend is yet to be told */
  int64_t sid;    /* the backend's id of the session */
  int64_t length; /* ms; for the margin */
  int64_t until;  /* the latest bound the service confirmed */
  int64_t grace;  /* since the link dropped: the bound its rule gives */
} dlock__session_clock;

#define DLOCK__CLIENT_MAGIC 0x444c434bu /* "DLCK" */
#define DLOCK__LOCK_MAGIC 0x444c4c4bu   /* "DLLK" */
#define DLOCK__SEM_MAGIC 0x444c534du    /* "DLSM" */
#define DLOCK__PSEM_MAGIC 0x444c5053u   /* "DLPS" */
#define DLOCK__LATCH_MAGIC 0x444c4c54u  /* "DLLT" */
#define DLOCK__DEAD_MAGIC 0xdeadd10cu

struct dlock_lock {
  uint32_t magic;
  struct dlock_client *client;
  dlock_lock_kind_t kind;
  char *name;
  void *bh; /* the backend's state for this handle (handle_open), or NULL */
  struct dlock_lock *prev, *next; /* client's list of handles, under mu */
};

/* A semaphore, permit semaphore or latch handle (sync.c); the magic tells
 * which. The public types are this struct under three names. */
typedef struct dlock__sync {
  uint32_t magic;
  struct dlock_client *client;
  dlock__sync_kind kind;
  char *name;
  struct dlock__sync *prev, *next; /* client's list of handles, under mu */
} dlock__sync;

struct dlock_semaphore {
  dlock__sync h;
};
struct dlock_permit_sem {
  dlock__sync h;
};
struct dlock_latch {
  dlock__sync h;
};

struct dlock_client {
  uint32_t magic;
  unsigned fork_gen; /* fork generation at creation (client.c) */
  char id[DLOCK__UUID_LEN + 1];
  dlock__reqids reqids; /* releases' request ids (any thread) */
  struct dlock_options opts;
  const dlock__backend_ops *ops;
  void *be;

  pthread_t bg;
  int wake_rd, wake_wr; /* pipe that interrupts the background poll() */
  /* blocking chores, off the event loop (worker.h): lease renewals,
   * settling unresolved waits, dialling the wake-up connection, and
   * telling the application of losses (its lost callback may call back
   * into the library, round trips included) */
  dlock__worker renew_worker, settle_worker, dial_worker, notify_worker;

  /* Public calls in progress x 2, plus 1 once dlock_client_free has begun
   * (the "stopping" bit, set under mu too). One atomic word, read and
   * changed without mu on the call path (call_begin/call_end,
   * dlock__client_stopping): a call that uncounts itself while the bit is
   * clear never touches the client again; one that finds it set uncounts
   * under mu, where the freeing thread waits. */
  _Atomic uint64_t callstate;
  /* entries of `unresolved` (changed under mu, read without it by
   * dlock__unresolved_resolve_own's fast path) */
  _Atomic size_t nunresolved;

  pthread_mutex_t mu;
  /* --- everything below is protected by mu --- */
  struct dlock_lock *locks;       /* handles, for cleanup */
  dlock__sync *syncs;             /* semaphore and latch handles, for cleanup */
  dlock__map holds;               /* (name, tid) -> dlock__hold */
  struct dlock__hold *spare_hold; /* the last removed record, for reuse */
  int64_t renew_due;         /* earliest next renewal, DLOCK__NEVER if none */
  int64_t vouch_due;         /* earliest vouching deadline of a hold */
  bool renew_busy;           /* a renewal pass is on the renewal worker */
  bool lost_pending;         /* holds marked lost wait to be reported */
  bool report_busy;          /* a report is on the notifying worker */
  struct dlock__wait *waits; /* live waits, for dlock_client_free */
  dlock__map unresolved;     /* (name, tid) -> dlock__unresolved */
  /* client_owner backends (backend.h): lock name -> the thread (a
   * dlock__gate) that holds it or is trying it on the server */
  dlock__map gates;
  int64_t unresolved_due;       /* next background pass, DLOCK__NEVER if none */
  bool settle_busy;             /* a settling pass is on the settling worker */
  dlock__session_clock session; /* the backend's session (session.h) */
  struct dlock__async *async;   /* async operations (async.c), or NULL */
  pthread_cond_t unresolved_cv; /* an unresolved wait stopped being busy */
  pthread_cond_t calls_done;    /* signalled when calls drops to 0 */
};

/* DLOCK_ENOTSUP for a kind or object the backend leaves out (`what`, as
 * "fair locks"), with the backend's kinds_why when it has one. */
int dlock__need_kind(const struct dlock_client *c, bool present,
                     const char *what);

/* 0 when `present`; else DLOCK_ENOTSUP "the <backend> backend does not
 * support <what>" (for an optional operation the call needs). */
int dlock__need_op(const struct dlock_client *c, bool present,
                   const char *what);
/* The process's fork generation: a client made in another one is
 * unusable here (client_base.c). */
unsigned dlock__fork_gen(void);
/* Validates a client pointer for a public call (magic, fork). */
int dlock__client_check(const struct dlock_client *c, const char *fn);
/* Brackets a public call that uses the network: dlock_client_free() waits
 * for calls in progress to end (they see DLOCK_ECLOSED at their next step)
 * instead of freeing what they use. */
int dlock__call_begin(struct dlock_client *c, const char *fn);
void dlock__call_end(struct dlock_client *c);
/* True while dlock_client_free() is tearing the client down. */
bool dlock__client_stopping(struct dlock_client *c);
/* Checks a lock, semaphore or latch name of client c (checked already):
 * non-empty, at most DLOCK_NAME_MAX bytes, and what the backend's
 * check_name asks (Redis: not in dlock's reserved "dlock_lock_" space). */
int dlock__check_name(struct dlock_client *c, const char *name, const char *fn);
/* wait_ms: >= 0 or DLOCK_WAIT_FOREVER. */
int dlock__check_wait(int64_t wait_ms, const char *fn);
/* lease_ms: 1..DLOCK_LEASE_MAX or DLOCK_LEASE_WATCHDOG. */
int dlock__check_lease(int64_t lease_ms, const char *fn);
/* "<client-id>:<tid>" into buf (at least 64 bytes). */
void dlock__owner(const struct dlock_client *c, uint64_t tid, char *buf,
                  size_t len);

#endif
