/*
 * redis.h - the Redis backend's private state, shared by redis.c (commands,
 * scripts, the connection pool), locks.c, sync.c and channels.c (waits and
 * the pub/sub connection).
 */
#ifndef DLOCK_REDIS_REDIS_H
#define DLOCK_REDIS_REDIS_H

#include <pthread.h>
#include <stdatomic.h>

#include "core/backend.h"
#include "net/conn.h"
#include "redis/scripts.h"
#include "redis/url.h"

/* The master found through Redis Sentinel (sentinel.c). */
typedef struct dlock__redis_sentinel dlock__redis_sentinel;

/* What the Redis backend offers (and Redis Cluster's, cluster.c, with
 * it): every lock kind, semaphores and latches, dlock's hand-off queue. */
#define DLOCK__REDIS_LOCK_KINDS                                                \
  ((1u << DLOCK_REENTRANT) | (1u << DLOCK_FAIR) | (1u << DLOCK_FENCED) |      \
   (1u << DLOCK_READ) | (1u << DLOCK_WRITE))
#define DLOCK__REDIS_SYNC_KINDS                                                \
  ((1u << DLOCK__SYNC_SEM) | (1u << DLOCK__SYNC_PERMIT) |                     \
   (1u << DLOCK__SYNC_LATCH))
#define DLOCK__REDIS_QUEUE_KINDS                                               \
  ((1u << DLOCK_REENTRANT) | (1u << DLOCK_FENCED) | (1u << DLOCK_READ) |      \
   (1u << DLOCK_WRITE))

/* The pipelined connection that caller threads share (mux.c). */
typedef struct dlock__redis_mux dlock__redis_mux;

/* The waits' channels and the watch connection's state (channels.c). */
typedef struct dlock__redis_watch dlock__redis_watch;

typedef struct dlock__redis {
  struct dlock_client *core; /* for up-calls; outlives us */
  char client_id[40];        /* names this client's grant channels */
  dlock__endpoint ep_parsed; /* from the URL given to open */
  const dlock__endpoint *ep; /* = &ep_parsed */
  int64_t connect_timeout_ms;
  int64_t command_timeout_ms;
  /* how long a release's unlock latch lives, formatted once at open
   * (dlock__redis_latch_ms): 2 x (command + connect timeout), 10-60 s */
  char latch_ms[24];
  char *user;        /* AUTH user, or NULL */
  char *password;    /* AUTH password, or NULL */
  char *client_name; /* CLIENT SETNAME, or NULL */
  char *holder_info; /* dlock_options_set_holder_info, or NULL */
  /* the spring layout's registry key (spring.c), NULL for Redisson's */
  char *spring_registry;
  int db;
  int pool_size;
  const char *publish; /* "publish" (or "spublish" for sharded pub/sub) */
  bool sharded; /* a cluster node: SPUBLISH, SSUBSCRIBE (set before use) */
  dlock__tls *tls;     /* TLS settings, NULL for plain connections */
  int64_t replica_wait_ms;     /* WAIT's timeout after write scripts; 0 off */
  _Atomic int replicas;        /* connected replicas, from ROLE (-1: none
                                  known: a replica, ROLE refused) */
  _Atomic int64_t replicas_at; /* when ROLE was last asked (monotonic ms) */
  _Atomic bool wait_refused;   /* WAIT is unknown or refused: never sent */

  pthread_mutex_t pool_mu; /* protects idle[] and nidle only */
  dlock__conn **idle;
  int nidle;

  dlock__redis_mux *mux; /* scripts without WAIT; NULL: pipelining off */
  /* redis-sentinel:// (NULL otherwise): the master's address changes with
   * failovers; master_gen counts its changes, and every connection is
   * tagged with the generation it was dialled at */
  dlock__redis_sentinel *sentinel;
  _Atomic uint32_t master_gen;
  /* a Redis Cluster's master (cluster.c; NULL otherwise): true when the
   * cluster serves none of its slots there any more; `ask`: read the map
   * again first (rate-limited there). Never blocks when !ask. */
  bool (*left)(void *ud, struct dlock__redis *r, bool ask, int64_t deadline);
  void *left_ud;
  _Atomic int pooled_busy; /* scripts on pooled connections now */

  dlock__conn *watch; /* the event loop thread only */
  /* the event loop thread only: where loop_prepare put the watch
   * connection's and the shared connection's descriptors (-1: not) */
  int loop_watch_at, loop_mux_at;
  pthread_mutex_t wmu; /* guards *ws but its loop-only fields (channels.c) */
  dlock__redis_watch *ws;
} dlock__redis;

/* Opens the backend as its `open` does, but without the round trip that
 * checks the server (a Redlock node that is down when the client is
 * created: it is dialled at each request, as a broken connection is). */
int dlock__redis_open_unchecked(void **be, const char *url,
                                const struct dlock_options *o,
                                struct dlock_client *core);
/* Opens the backend as its `open` does, for the ops table of a layout:
 * Redisson's (spring false) refuses a URL or options that ask for the
 * spring layout (Redlock's nodes), spring.c's (true) keeps its registry
 * key. */
int dlock__redis_open_layout(void **be, const char *url,
                             const struct dlock_options *o,
                             struct dlock_client *core, bool spring);
void dlock__redis_close(void *be);
int dlock__redis_ping(void *be);
/* spring.c: the spring layout's wake channel of name (caller frees). */
char *dlock__redis_spring_channel(const dlock__redis *r, const char *name);
/* A lock handle with a wake channel only (no grant channel: no
 * hand-off), as channels.c reads handles (locks.c). */
int dlock__redis_handle_plain(const char *channel, void **bh);
/* Connects and runs the handshake (AUTH, SELECT, CLIENT SETNAME) within
 * the connect timeout, or sooner when `deadline` (monotonic ms) is. */
int dlock__redis_dial(dlock__redis *r, bool select_db, int64_t deadline,
                      dlock__conn **out);
/* Maps an error reply to a code and detail ("<what>: <server message>"). */
int dlock__redis_error(const redisReply *reply, const char *what);
/* Redisson's `prefix:{name}` (or `prefix:name` when name has a '{'), for
 * the keys and channels Redisson shares. Caller frees. */
char *dlock__redis_prefixed(const char *prefix, const char *name);
/* Redisson's suffixName: `{name}:suffix`, or `name:suffix` when name has a
 * '{'. Caller frees. */
char *dlock__redis_suffixed(const char *name, const char *suffix);
/* dlock's own keys and channels: `prefix:{name}`, or `prefix:=name` when
 * name has a '{' (one-to-one, same cluster slot as the lock). */
char *dlock__redis_own_key(const char *prefix, const char *name);
/* The holder-info key dlock_holder:{name}:<owner> (for a permit, its id),
 * built in buf[n]; NULL when it does not fit (the info is a courtesy,
 * never a reason to fail). dlock__redis_info_key: the same, NULL too when
 * the client records no info. */
const char *dlock__redis_holder_key(const char *name, const char *owner,
                                    char *buf, size_t n);
/* Whether the client records holder info (a request prepared for several
 * nodes, Redlock's, carries it then). */
bool dlock__redis_has_holder_info(const void *be);
const char *dlock__redis_info_key(const dlock__redis *r, const char *name,
                                  const char *owner, char *buf, size_t n);

/* What a cluster node answered instead of running a call (cluster.c
 * follows it): MOVED or ASK <slot> <host:port>, TRYAGAIN (a slot being
 * migrated), or no connection to send it on (nothing reached the node).
 * Noted per thread by dlock__redis_error and the request path. */
typedef enum dlock__redis_redirect_kind {
  DLOCK__RD_NONE,
  DLOCK__RD_MOVED,
  DLOCK__RD_ASK,
  DLOCK__RD_TRYAGAIN,
  DLOCK__RD_UNSENT
} dlock__redis_redirect_kind;
typedef struct dlock__redis_redirect {
  dlock__redis_redirect_kind kind;
  unsigned slot;
  char addr[272]; /* "host:port" */
} dlock__redis_redirect;
/* The calling thread's last redirection, then clears it. */
void dlock__redis_redirect_take(dlock__redis_redirect *out);
/* The calling thread's next request is sent after ASKING (one request). */
void dlock__redis_set_asking(bool asking);

/* Redis Cluster's slot of a key (cluster.c): CRC16 of its hash tag. */
unsigned dlock__redis_key_slot(const char *key);

#define DLOCK__REDIS_MAX_ARGS 24
/* Most items renewed by one script call. */
#define DLOCK__REDIS_RENEW_BATCH 500

/* Commands and scripts (redis.c). A command or script runs on a pooled
 * connection in one round trip; an error reply becomes a code with detail.
 * Script argv[0..2] are filled in; argv[3..] hold keys, then arguments.
 * `retry_safe`: one resend on a fresh connection if the first one broke
 * (idempotent scripts only). */
int dlock__redis_command(dlock__redis *r, int argc, const char **argv,
                         redisReply **reply);
int dlock__redis_script(dlock__redis *r, const dlock__script *s, int nkeys,
                        int argc, const char **argv, bool retry_safe,
                        redisReply **reply);
/* The same, for acquires that roll back: when the script ran but none of
 * the connected replicas acknowledged it, returns 0 with the reply and
 * *unsynced = the number of replicas waited for (else 0); the caller
 * undoes what it took and returns dlock__redis_unsynced(). */
int dlock__redis_script_synced(dlock__redis *r, const dlock__script *s,
                               int nkeys, int argc, const char **argv,
                               bool retry_safe, redisReply **reply,
                               int *unsynced);
/* DLOCK_EUNAVAILABLE: "<what>: none of the <n> connected replicas ...". */
int dlock__redis_unsynced(dlock__redis *r, const char *what, int n);
/* r's server has just become a master (a Sentinel failover, a Cluster
 * slot moved to it): the replicas counted before are not its own. Its
 * writes wait for none until the next write asks ROLE (in the same
 * pipeline): a stale count would make WAIT on it wait out replica_wait. */
void dlock__redis_new_master(dlock__redis *r);
int dlock__redis_append_cmd(dlock__conn *c, int argc, const char **argv);
int dlock__redis_append_script(dlock__conn *c, const dlock__script *s,
                               bool body, int nkeys, int argc,
                               const char **argv, size_t *lens);
bool dlock__redis_is_noscript(const redisReply *rep);
int dlock__redis_pool_get_until(dlock__redis *r, int64_t until,
                                dlock__conn **out);
void dlock__redis_pool_put(dlock__redis *r, dlock__conn *c);
/* An idle pooled connection that is still open, or NULL (never dials). */
dlock__conn *dlock__redis_pool_take_idle(dlock__redis *r);
/* DLOCK_EPROTO "<what>: unexpected reply"; frees rep. */
int dlock__redis_unexpected(redisReply *rep, const char *what);

/* One script call prepared apart from any connection, so that one thread
 * can send it to several servers at once and read the replies as they
 * come (Redlock, src/redlock/): the script, its keys and arguments, copied
 * into one allocation. */
typedef struct dlock__redis_req {
  const dlock__script *s;
  int nkeys, argc;
  const char **argv; /* argc entries; [0..2] are filled by req_append */
  size_t *lens;
} dlock__redis_req;

/* Copies argv[3..argc) (keys, then arguments; C strings). With s NULL the
 * request is the plain command argv[3..argc). */
int dlock__redis_req_set(dlock__redis_req *q, const dlock__script *s,
                         int nkeys, int argc, const char **argv);
/* Appends EVALSHA (or EVAL with the body, after a NOSCRIPT) to c. */
int dlock__redis_req_append(dlock__conn *c, dlock__redis_req *q, bool body);
void dlock__redis_req_clear(dlock__redis_req *q);

/* locks.c: every lock kind */
char *dlock__redis_lock_channel(void *be, dlock_lock_kind_t kind,
                                const char *name, const char *owner);
char *dlock__redis_lock_grant_channel(void *be, dlock_lock_kind_t kind,
                                      const char *name, const char *client_id);
int dlock__redis_lock_acquire(void *be, const dlock__acquire *a, int64_t *pttl,
                              int64_t *token);
int dlock__redis_lock_leave(void *be, const dlock__acquire *a, uint64_t seq,
                            int64_t *token);
int dlock__redis_lock_release(void *be, const dlock__release *rel);
/* The backend's check_name: refuses names in dlock's own key space
 * ("dlock_lock_"); Cluster and Redlock use it as well. */
int dlock__redis_check_name(void *be, const char *name, const char *fn);
/* rc, with a DLOCK_EWRONGTYPE detail not yet worded (the server's
 * WRONGTYPE, naming a command) said in the user's terms: the key `name`
 * holds a value of another type, not a lock. For lock_acquire (Redis,
 * Spring's layout, Redlock). */
int dlock__redis_lock_wrongtype(int rc, const char *name);
int dlock__redis_handle_open(void *be, dlock_lock_kind_t kind,
                             const char *name, void **bh);
void dlock__redis_handle_close(void *bh);
/* A handle's wake channel (not fair) and grant channel, or NULL. */
const char *dlock__redis_handle_channel(const void *bh);
const char *dlock__redis_handle_grant(const void *bh);
int dlock__redis_lock_force_release(void *be, dlock_lock_kind_t kind,
                                    const char *name, bool *deleted);
int dlock__redis_lock_renew(void *be, dlock__renewal *items, size_t n,
                            int64_t lease_ms, int64_t deadline);
int dlock__redis_lock_query(void *be, dlock_lock_kind_t kind, const char *name,
                            const char *owner, dlock__lock_query q,
                            int64_t *out);
/* The same query as a request and a reply parser (takes the reply), for
 * Redlock's fan-out. */
int dlock__redis_lock_query_req(dlock_lock_kind_t kind, const char *name,
                                const char *owner, dlock__lock_query q,
                                dlock__redis_req *req);
int dlock__redis_lock_query_reply(dlock__lock_query q, redisReply *rep,
                                  int64_t *out);
int dlock__redis_lock_state(void *be, dlock_lock_kind_t kind, const char *name,
                            dlock_lock_state_t **out);

/* The reentrant and fenced lock's acquire (never queued: a->q is
 * ignored), release and renewal as requests and reply parsers, for
 * Redlock. The parsers take the reply (freed) and return as
 * dlock__redis_lock_acquire, _release and _renew do. */
int dlock__redis_lock_acquire_req(void *be, const dlock__acquire *a,
                                  dlock__redis_req *q);
int dlock__redis_lock_acquire_reply(const dlock__acquire *a, redisReply *rep,
                                    int64_t *pttl, int64_t *token);
/* own_waits: one server's release, which tells the script whether this
 * client is subscribed to the lock's channel (Redlock's: false). */
int dlock__redis_lock_release_req(void *be, const dlock__release *rel,
                                  bool own_waits, dlock__redis_req *q);
/* backend.h's lock_acquire_send / lock_release_send (locks.c). */
int dlock__redis_lock_acquire_send(void *be, const dlock__acquire *a,
                                   dlock__sent_fn done, void *arg);
int dlock__redis_lock_release_send(void *be, const dlock__release *rel,
                                   dlock__sent_fn done, void *arg);
int dlock__redis_lock_release_reply(redisReply *rep);
/* Raises the fenced lock's token counter to at least `token`. */
int dlock__redis_token_raise_req(const char *name, int64_t token,
                                 dlock__redis_req *q);
/* Items of kind DLOCK__HK_LOCK only; results go to items[i].result. */
int dlock__redis_lock_renew_req(const dlock__renewal *items, size_t n,
                                int64_t lease_ms, bool info,
                                dlock__redis_req *q);
int dlock__redis_lock_renew_reply(redisReply *rep, size_t n, int *results);

/* sync.c: semaphores, permit semaphores, count-down latches */
char *dlock__redis_sync_channel(void *be, dlock__sync_kind kind,
                                const char *name);
int dlock__redis_sem_set(void *be, const char *name, int64_t permits,
                         bool *set);
int dlock__redis_sem_add(void *be, const char *name, int64_t n);
int dlock__redis_sem_acquire(void *be, const char *name, int64_t permits);
int dlock__redis_sem_release(void *be, const char *name, int64_t permits);
int dlock__redis_sem_available(void *be, dlock__sync_kind kind,
                               const char *name, int64_t *out);
int dlock__redis_sem_delete(void *be, dlock__sync_kind kind, const char *name,
                            bool *existed);
int dlock__redis_psem_acquire(void *be, const char *name, const char *id,
                              int64_t lease_ms, int64_t *retry_in_ms);
int dlock__redis_psem_release(void *be, const char *name, const char *id);
int dlock__redis_psem_state(void *be, const char *name,
                            dlock_sem_state_t **out);
int dlock__redis_latch_set(void *be, const char *name, int64_t count,
                           bool *set);
int dlock__redis_latch_count_down(void *be, const char *name);
int dlock__redis_latch_count(void *be, const char *name, int64_t *out);
int dlock__redis_latch_delete(void *be, const char *name, bool *existed);

/* channels.c: waits and the event loop's hooks */
int dlock__redis_channels_init(dlock__redis *r);
void dlock__redis_channels_free(dlock__redis *r);
int dlock__redis_wait_begin(void *be, struct dlock__wait *w);
bool dlock__redis_wait_hot(void *be, const dlock__wait_spec *spec);
bool dlock__redis_wait_arm(void *be, struct dlock__wait *w,
                           bool only_if_ready);
bool dlock__redis_wait_can_queue(void *be, struct dlock__wait *w);
void dlock__redis_wait_end(void *be, struct dlock__wait *w);
int dlock__redis_loop_prepare(void *be, int64_t now, struct pollfd *fds,
                              int max, int64_t *until);
void dlock__redis_loop_dispatch(void *be, int64_t now,
                                const struct pollfd *fds, int n);
/* True when this client is subscribed to `channel` now. */
bool dlock__redis_watching(dlock__redis *r, const char *channel);

/* mux.c: the shared pipelined connection. exec appends a request
 * (`append` writes its commands to the conn) and returns its `want`
 * replies (at most 3) within timeout_ms; on failure no reply is returned
 * and the outcome of the request is unknown. */
int dlock__redis_mux_new(dlock__redis_mux **out);
void dlock__redis_mux_free(dlock__redis_mux *m);
int dlock__redis_mux_exec(dlock__redis *r, dlock__redis_mux *m,
                          int (*append)(dlock__conn *c, void *arg), void *arg,
                          size_t want, int64_t timeout_ms,
                          redisReply **replies);

/* Whether the master that r's connections of generation gen reach is no
 * longer the one to use (Sentinel: another is named; a Cluster's master:
 * it serves no slot now); `ask`: ask the service first (rate-limited). */
bool dlock__redis_master_left(dlock__redis *r, uint32_t gen, bool ask,
                              int64_t deadline);
/* dlock__conn_exec on a connection of r: through Sentinel, a wait for a
 * master that the sentinels no longer name ends at once
 * (DLOCK_EUNAVAILABLE, the conn broken) instead of at the deadline. */
int dlock__redis_exec(dlock__redis *r, dlock__conn *c, int64_t deadline,
                      size_t n, redisReply **rep);
/* READONLY: a replica (a demoted master) refused a write. */
bool dlock__redis_is_readonly(const redisReply *rep);
/* Looks at a round trip's replies: through Sentinel, a READONLY one means
 * the master was demoted: c (or, when NULL, the shared connection) is not
 * used again, the idle pool is emptied and the sentinels are asked.
 * True when it saw one. */
bool dlock__redis_saw_replies(dlock__redis *r, dlock__conn *c,
                              redisReply **rep, size_t n);
/* Ends the shared connection (its requests in flight fail). */
void dlock__redis_mux_end(dlock__redis_mux *m);
/* A sent request (one reply, mux.c "Sent requests"): appended and
 * written now, without blocking; on_reply(arg, 0, reply) (the caller
 * frees the reply) or on_reply(arg, rc, NULL) with the thread's detail
 * set runs exactly once later, maybe before send returns, with no mutex
 * of the mux held. DLOCK__SEND_BLOCKS: no connection is up (nothing was
 * sent; the dialling worker dials one); <0: nothing was sent. */
typedef void (*dlock__redis_mux_done)(void *arg, int rc, redisReply *reply);
int dlock__redis_mux_send(dlock__redis *r, dlock__redis_mux *m,
                          int (*append)(dlock__conn *c, void *arg), void *arg,
                          int64_t timeout_ms, dlock__redis_mux_done on_reply,
                          void *done_arg);
/* True when a writing script goes alone now, with neither ROLE nor WAIT
 * (no replica to wait for, or waiting is off): as a sent request can. */
bool dlock__redis_script_alone(dlock__redis *r);
/* The event loop's part: while sent requests are queued, the shared
 * connection's descriptor (0 or 1 filled) and the oldest one's deadline;
 * then it reads what came, hands the replies over and fails the queue
 * when the oldest sent request is past its deadline. */
struct pollfd;
int dlock__redis_mux_loop_prepare(dlock__redis_mux *m, int64_t now,
                                  struct pollfd *fd, int64_t *until);
void dlock__redis_mux_loop_dispatch(dlock__redis_mux *m, int64_t now,
                                    const struct pollfd *fd);

/* sentinel.c */
bool dlock__redis_is_sentinel_url(const char *url);
/* Parses a redis-sentinel:// URL: the sentinels, the master's name, and
 * into *data the data nodes' user, password and db (its address stands in
 * until the master is known). user/password: the sentinels' own. */
int dlock__redis_sentinel_parse(const char *url, const char *user,
                                const char *password,
                                dlock__redis_sentinel **out,
                                dlock__endpoint *data);
void dlock__redis_sentinel_free(dlock__redis_sentinel *s);
const char *dlock__redis_sentinel_display(const dlock__redis_sentinel *s);
/* Asks the sentinels for the master (raises master_gen when it moved). */
int dlock__redis_sentinel_resolve(dlock__redis *r, int64_t deadline);
/* The same, unless any thread asked them within the last 500 ms: for
 * callers that wait on a master that does not answer (it may be stopped,
 * and the sentinels may have named another one meanwhile). The caller's
 * last error is kept. */
void dlock__redis_sentinel_recheck(dlock__redis *r, int64_t deadline);
/* The master's endpoint as known now (ep borrows host[] and r->ep's
 * credentials), and its generation; DLOCK_EUNAVAILABLE when unknown. */
int dlock__redis_sentinel_master(dlock__redis *r, dlock__endpoint *ep,
                                 char *host, size_t hostlen, uint32_t *gen);
/* True when c was dialled at an older master than the current one. */
static inline bool dlock__redis_conn_stale(dlock__redis *r,
                                           const dlock__conn *c) {
  return r->sentinel && dlock__conn_tag(c) != atomic_load(&r->master_gen);
}

/* The event loop's hooks over several Redis backends (Redlock's nodes, a
 * cluster's masters): each node's descriptors follow the previous node's;
 * nfds[i] keeps how many node i used, for the dispatch. Loop thread. */
int dlock__redis_loop_prepare_nodes(void *const *nodes, size_t n, int *nfds,
                                    int64_t now, struct pollfd *fds, int max,
                                    int64_t *until);
void dlock__redis_loop_dispatch_nodes(void *const *nodes, size_t n,
                                      const int *nfds, int64_t now,
                                      const struct pollfd *fds, int nfd);

/* Sets r->latch_ms from the timeouts (locks.c). */
void dlock__redis_latch_ms(dlock__redis *r);

/* The backends (registered in src/backends.c): one server (redis://,
 * rediss://, unix://, redis-sentinel://) and a Redis Cluster. */
extern const dlock__backend_ops dlock__redis_backend;
extern const dlock__backend_ops dlock__redis_cluster_backend;
/* Redis in Spring Integration's RedisLockRegistry layout (spring.c):
 * chosen for a Redis URL by its layout, not by a scheme. */
extern const dlock__backend_ops dlock__redis_spring_backend;
/* The layout a Redis URL's query (layout=, registry=) and the options ask
 * for: 0 with *spring, and *registry (a copy, or NULL when registry is
 * NULL) for the spring layout's key; DLOCK_EURL or DLOCK_EINVAL with
 * detail for an unknown layout, a missing or bad registry key, or a URL
 * and options that disagree. */
int dlock__redis_layout(const char *url, const struct dlock_options *o,
                        bool *spring, char **registry);
/* The backend a client of *ops (found by url's scheme) opens with, under
 * the layout the URL or opts (NULL: none set) ask for: the spring layout
 * turns the plain Redis backend into dlock__redis_spring_backend, and is
 * DLOCK_ENOTSUP (with detail) for any other backend. */
int dlock__redis_pick_layout(const dlock__backend_ops **ops, const char *url,
                             const struct dlock_options *opts);

#endif
