/*
 * zk.h - the ZooKeeper backend's private state (libzookeeper-mt).
 *
 * One backend = one ZooKeeper session (one zhandle_t, with the library's
 * own I/O and completion threads). Every hold of the client is an
 * ephemeral node of that session, so holds live exactly as long as the
 * session: there is no per-hold renewal (lock_renew is NULL).
 *
 * Files: session.c (URL, open/close, the session watcher, the local
 * session timer, the log bridge, the ops table), calls.c (one bounded
 * asynchronous request and its completion), locks.c (Curator's lock
 * layouts: acquire, release, leave, state), semaphore.c (the permit
 * semaphore on InterProcessSemaphoreV2's layout), waits.c (waits woken by
 * a watch on the predecessor node or on a semaphore's leases).
 *
 * Locks: z->mu guards the node table, the wait list and the session
 * fields below; it is never held across a request, a wait up-call that
 * might block, or the user's code. z->zh_lock (a rwlock) guards the
 * zhandle pointer: callers read-lock it to issue a request, the session
 * reset (dialling worker) write-locks it to replace the handle. Order:
 * zh_lock, then mu, then client->mu (inside the up-calls).
 */
#ifndef DLOCK_ZOOKEEPER_ZK_H
#define DLOCK_ZOOKEEPER_ZK_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <zookeeper/zookeeper.h>

#include "core/backend.h"
#include "core/wait.h"

/* Which of a lock's node kinds: a mutex node (`lock-`: reentrant, fair,
 * fenced) or a read-write lock's read or write node. */
typedef enum zk_side { ZK_MUTEX = 0, ZK_READ = 1, ZK_WRITE = 2 } zk_side;

/* A node this client created for an owner: waiting (count 0) or held. */
typedef struct zk_node {
  struct zk_node *next;
  zk_side side;
  char *name;     /* the lock's dlock name */
  char *owner;    /* "<client-id>:<tid>" */
  char *path;     /* the node's full path, NULL until created */
  char uuid[37];  /* protection id: the name starts `_c_<uuid>-` */
  int64_t czxid;  /* creation zxid: the fencing token */
  int64_t count;  /* reentry count; 0 while waiting */
  bool releasing; /* count fell to 0; the delete is not confirmed */
} zk_node;

/* A registered wait (waits.c). */
typedef struct zk_wait {
  struct zk_wait *next;
  uint64_t id; /* the watch's context: a number, never a pointer */
  dlock__wait *w;
} zk_wait;

typedef struct dlock__zk {
  struct dlock_client *core;
  pid_t pid;           /* the process that opened it (close after fork leaks) */
  char hosts[1024];    /* "h:p,h:p[/chroot]" for zookeeper_init */
  char display[1024];  /* for messages */
  char base[512];      /* where relative names live */
  int session_timeout; /* ms asked for */
  int64_t connect_timeout, command_timeout, watchdog_ms;
  /* dlock_options_set_holder_info: written after the owner line of each
   * lock node's data; "" none */
  char holder_info[DLOCK_HOLDER_INFO_MAX + 1];
  int log_slot; /* the log trampoline of this backend, -1: none */

  pthread_rwlock_t zh_lock;
  zhandle_t *zh; /* under zh_lock */

  pthread_mutex_t mu;
  pthread_cond_t cond; /* state changes */
  /* --- under mu --- */
  zhandle_t *closing; /* a handle being closed: its events are ignored */
  int state;          /* last session state seen (ZOO_*_STATE) */
  bool live;          /* the session was established */
  bool expired;       /* the server said so (the handle is dead) */
  bool clock_lost;    /* the core's loss clock ended it (core/session.h) */
  bool lost_handled;  /* holds were reported lost for this session */
  bool reset_busy;    /* a new handle is being made */
  /* the handle's generation: +1 at each reset (written with zh_lock held
   * for writing and mu; read under either) */
  uint64_t gen;
  int64_t session_id;
  int64_t negotiated;   /* session timeout the server granted, ms */
  int64_t suspended_at; /* monotonic ms the connection dropped; 0: up */
  zk_node *nodes;
  /* sent operations in flight, oldest first, and those ended whose done
   * is still to run (locks.c) */
  struct zk_sent *sent_head, *sent_tail, *sent_ended;
  zk_wait *waits;
  uint64_t next_wait_id;
} dlock__zk;

/* ---------------------------------------------------------- calls.c */

/* The result of one request. */
typedef struct zk_result {
  int rc;           /* ZOK or a ZooKeeper error */
  struct Stat stat; /* create2, get, children2 */
  char *path;       /* create2: the created path (free it) */
  char **children;  /* children2 (free with dlock__zk_result_clear) */
  int nchildren;
  char *data; /* get: the data, NUL-terminated */
  int data_len;
  uint64_t gen; /* the handle generation (z->gen) it was sent on */
} zk_result;

void dlock__zk_result_clear(zk_result *r);

/* Where a sent request's answer goes (dlock__zk_send_*). */
typedef void (*dlock__zk_then_fn)(void *arg, int index, zk_result *res);

/* Each waits until the session is connected (bounded by the command
 * timeout), sends one request and waits for its answer until the command
 * timeout. 0 with *out filled (out->rc may be a ZooKeeper error such as
 * ZNONODE), or DLOCK_EUNAVAILABLE / DLOCK_EIOTIMEOUT / DLOCK_ENOMEM with
 * detail set (connection loss: out->rc = ZCONNECTIONLOSS, also returned
 * as 0 for dlock__zk_create, whose caller recovers it). */
int dlock__zk_create(dlock__zk *z, const char *path, const char *data,
                     int flags, zk_result *out);
int dlock__zk_delete(dlock__zk *z, const char *path, zk_result *out);
int dlock__zk_children(dlock__zk *z, const char *path, zk_result *out);
/* A create of path and a list of dir's children, sent together (one round
 * trip; the list is answered after the create, so it shows the new node).
 * Returns as dlock__zk_create, with *created as its *out; *kids is the list's
 * answer, to be used only when created->rc and kids->rc are both ZOK (an
 * unanswered or failed list: kids->rc is a ZooKeeper error; list again).
 * Both results are the caller's to clear. */
int dlock__zk_create_and_list(dlock__zk *z, const char *path, const char *data,
                              int flags, const char *dir, zk_result *created,
                              zk_result *kids);
/* getData; with watcher, leaves a watch whose context is watch_ctx. */
int dlock__zk_get(dlock__zk *z, const char *path, watcher_fn watcher,
                  void *watch_ctx, zk_result *out);
/* getChildren leaving a child watch; exists (ZNONODE leaves a watch for
 * the creation too); setData with a version (-1: any). */
int dlock__zk_children_watch(dlock__zk *z, const char *path, watcher_fn watcher,
                             void *watch_ctx, zk_result *out);
int dlock__zk_exists(dlock__zk *z, const char *path, watcher_fn watcher,
                     void *watch_ctx, zk_result *out);
int dlock__zk_set(dlock__zk *z, const char *path, const char *data, int version,
                  zk_result *out);
/* A ZooKeeper error as a dlock error with detail "<what> <path>: ...". */
int dlock__zk_error(dlock__zk *z, int zrc, const char *what, const char *path);
/* DLOCK_EIOTIMEOUT: <what> <path> had no answer within the command timeout. */
int dlock__zk_timeout_error(dlock__zk *z, const char *what, const char *path);

/* Sent requests (the async calls' sent operations, locks.c): handed to
 * the library without waiting, and only if the handle is not being
 * replaced or closed at that moment. Each returns how many of its
 * requests went (create_and_list: 0, 1 the create only, or 2); for each,
 * then(arg, index, res) runs once later, in the order sent (create_and_list:
 * index 0 the create, 1 the list; delete: `index`), on libzookeeper's
 * completion thread or on the thread closing the handle (then res->rc is
 * ZCLOSING, and a request sent from there is refused); *res, with the
 * handle's generation, is then's to clear. *zrc says why a request did
 * not go. */
int dlock__zk_send_create_and_list(dlock__zk *z, const char *path,
                                   const char *data, int flags, const char *dir,
                                   dlock__zk_then_fn then, void *arg, int *zrc);
int dlock__zk_send_delete(dlock__zk *z, const char *path,
                          dlock__zk_then_fn then, void *arg, int index,
                          int *zrc);

/* -------------------------------------------------------- session.c */

/* mu held: the session is connected and in use (not given up). */
bool dlock__zk_usable_locked(const dlock__zk *z);
/* Waits until the session is connected, at most until `deadline`. */
bool dlock__zk_await_connected(dlock__zk *z, int64_t deadline);
/* The path of lock `name` (DLOCK_EINVAL for a name ZooKeeper refuses). */
int dlock__zk_lock_path(const dlock__zk *z, const char *name, char *out,
                        size_t size);

/* ---------------------------------------------------------- locks.c */

int dlock__zk_handle_open(void *be, dlock_lock_kind_t kind, const char *name,
                          void **bh);
int dlock__zk_lock_acquire(void *be, const dlock__acquire *a, int64_t *pttl,
                           int64_t *token);
int dlock__zk_lock_leave(void *be, const dlock__acquire *a, uint64_t seq,
                         int64_t *token);
int dlock__zk_lock_release(void *be, const dlock__release *rel);
int dlock__zk_lock_force_release(void *be, dlock_lock_kind_t kind,
                                 const char *name, bool *deleted);
int dlock__zk_lock_query(void *be, dlock_lock_kind_t kind, const char *name,
                         const char *owner, dlock__lock_query q, int64_t *out);
int dlock__zk_lock_state(void *be, dlock_lock_kind_t kind, const char *name,
                         dlock_lock_state_t **out);
/* Creates every missing ancestor of dir, and dir, as containers. */
int dlock__zk_make_parents(dlock__zk *z, const char *dir);
/* dir/child into out (cut short when too long: then no such node). */
void dlock__zk_join(char *out, size_t size, const char *dir, const char *child);
#define ZK_PATH_MAX 1200
/* Forgets every node (the session that owned them ended), and ends every
 * sent operation in flight (DLOCK_EUNAVAILABLE, reported by
 * dlock__zk_sent_report); mu held. */
void dlock__zk_nodes_forget_locked(dlock__zk *z);
/* Frees the node table (the backend's close); mu held. */
void dlock__zk_nodes_free_locked(dlock__zk *z);
/* backend.h lock_acquire_send, lock_release_send. */
int dlock__zk_lock_acquire_send(void *be, const dlock__acquire *a,
                                dlock__sent_fn done, void *arg);
int dlock__zk_lock_release_send(void *be, const dlock__release *rel,
                                dlock__sent_fn done, void *arg);
/* Runs the done of each sent operation ended meanwhile (no mutex held). */
void dlock__zk_sent_report(dlock__zk *z);
/* The event loop: ends the sent operations whose deadline has passed
 * (DLOCK_EIOTIMEOUT) and lowers *until to the next deadline. */
void dlock__zk_sent_expire(dlock__zk *z, int64_t now, int64_t *until);
/* A forked child's close: frees the sent operations, whose answers and
 * done belong to the parent. */
void dlock__zk_sent_drop(dlock__zk *z);

/* ------------------------------------------------------ semaphore.c */

int dlock__zk_sem_set(void *be, const char *name, int64_t permits, bool *set);
int dlock__zk_sem_add(void *be, const char *name, int64_t n);
int dlock__zk_sem_acquire(void *be, const char *name, int64_t permits);
int dlock__zk_sem_release(void *be, const char *name, int64_t permits);
int dlock__zk_sem_available(void *be, dlock__sync_kind kind, const char *name,
                            int64_t *out);
int dlock__zk_sem_delete(void *be, dlock__sync_kind kind, const char *name,
                         bool *existed);
int dlock__zk_psem_acquire(void *be, const char *name, const char *id,
                           int64_t lease_ms, int64_t *retry_in_ms);
int dlock__zk_psem_release(void *be, const char *name, const char *id);
int dlock__zk_psem_state(void *be, const char *name, dlock_sem_state_t **out);

/* ---------------------------------------------------------- waits.c */

int dlock__zk_wait_begin(void *be, dlock__wait *w);
void dlock__zk_wait_end(void *be, dlock__wait *w);
/* The watch context of the registered wait of (owner, seq), or 0. */
uint64_t dlock__zk_wait_watch_id(dlock__zk *z, const char *owner, uint64_t seq);
/* The watcher set on a predecessor: wakes the wait it names. */
void dlock__zk_predecessor_watcher(zhandle_t *zh, int type, int state,
                                   const char *path, void *ctx);
/* The watcher set on a semaphore's count and leases: wakes every wait of
 * this client on the semaphore the path names. */
void dlock__zk_semaphore_watcher(zhandle_t *zh, int type, int state,
                                 const char *path, void *ctx);
/* Wakes every wait (mu held): a reconnect or a new session. */
void dlock__zk_waits_wake_all_locked(dlock__zk *z);

/* The backend (registered in src/backends.c). */
extern const dlock__backend_ops dlock__zookeeper_backend;

#endif
