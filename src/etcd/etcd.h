/*
 * etcd.h - the etcd backend's private state, shared by etcd.c (URL, open,
 * close, the operations table), transport.c (requests to the gRPC gateway
 * with failover), session.c (the lease, its keep-alive, the watch streams:
 * the backend's own thread), locks.c (concurrency.Mutex's layout, waits,
 * state) and rw.c (the RWMutex recipe's layout).
 *
 * Lock order: e->mu (session, lock table, waits), then client->mu (the
 * up-calls); e->pool_mu is a leaf. No mutex is held across a request.
 */
#ifndef DLOCK_ETCD_ETCD_H
#define DLOCK_ETCD_ETCD_H

#include <json-c/json.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/backend.h"

struct dlock__wait;
typedef struct etcd_watch etcd_watch;
typedef struct etcd_reg etcd_reg;
typedef struct etcd_entry etcd_entry;
typedef struct etcd_rw etcd_rw;
typedef struct etcd_sent etcd_sent;

#define ETCD_POOL_MAX 8

typedef struct dlock__etcd {
  struct dlock_client *core; /* for up-calls; outlives us */
  char **hosts;              /* "host:port" of each endpoint */
  int nhosts;
  char display[160]; /* "etcd://h1:p1,..." for messages */
  int64_t connect_timeout_ms;
  int64_t command_timeout_ms;
  int64_t ttl_s; /* the lease TTL asked for (seconds) */
  /* dlock_options_set_holder_info: after the owner line of each lock
   * key's value; "" none */
  char holder_info[DLOCK_HOLDER_INFO_MAX + 1];
  char *user, *password;
  /* TLS (etcds:// or dlock_options_set_tls): read-only after open */
  bool tls;
  bool tls_insecure;              /* no verification (tests only) */
  char *tls_ca_file, *tls_ca_dir; /* both NULL: the system's store */
  char *tls_cert_file, *tls_key_file;
  char *tls_sni; /* name to send and verify instead of the host */

  pthread_mutex_t pool_mu;   /* guards idle[], idle_multi[], nidle, cur and
                              * token */
  void *idle[ETCD_POOL_MAX]; /* CURL easy handles with live connections */
  /* the CURLM each of them runs in (NULL with one endpoint): the multi
   * handle keeps the connections, so each handle keeps its own */
  void *idle_multi[ETCD_POOL_MAX];
  int nidle;
  int cur;     /* index of the endpoint in use */
  char *token; /* auth token (Authorization header), or NULL */
  /* a TLS exchange failed without saying why (transport.c): the next
   * exchanges collect libcurl's messages until one succeeds */
  _Atomic bool tls_diagnose;
  /* the highest raft term a reply has carried (its header's raft_term):
   * a member that reports a higher one has elected a leader since */
  _Atomic int64_t term;

  /* --- guarded by mu --- */
  pthread_mutex_t mu;
  pthread_cond_t session_cv; /* a grant in progress ended */
  int64_t lease;        /* the session's lease id, 0 before the first grant */
  bool lease_live;      /* granted and not known to be gone */
  bool granting;        /* a thread is granting a new lease */
  int64_t lease_ttl_ms; /* as granted */
  int64_t next_keepalive;
  etcd_entry *entries; /* one per lock name this client uses */
  etcd_rw *rws;        /* read-write holds and waits (rw.c) */
  etcd_reg *regs;      /* live waits */
  etcd_sent *sent_q;   /* sent requests for the session thread to start */
  bool stop;

  /* the session thread (session.c) */
  pthread_t thread;
  bool thread_started;
  void *multi; /* CURLM, the thread's */
} dlock__etcd;

/* A name's local state: one lease = one key per name, so the threads of
 * this client take turns on the key (owner is the thread using it: holding
 * or waiting). Guarded by mu. */
struct etcd_entry {
  char *name;
  char owner[64]; /* "" when nobody here uses the key */
  bool held;
  int64_t count; /* reentry count */
  int64_t lease; /* the lease the key was made with */
  int64_t rev;   /* the key's create revision (the fencing token) */
  etcd_entry *next;
};

/* A thread's hold or wait on one side of a read-write lock: its own key
 * NAME/read/<ns> or NAME/write/<ns>. Guarded by mu. */
struct etcd_rw {
  char *name;
  char owner[64];
  dlock_lock_kind_t kind; /* DLOCK_READ or DLOCK_WRITE */
  char *key;
  int64_t lease;
  int64_t rev; /* its create (= mod) revision, 0 before the put */
  int64_t count;
  bool held;
  etcd_rw *next;
};

/* A live wait (core/wait.h) and what it watches. Guarded by mu, but for
 * the stream's buffer (the session thread's). */
struct etcd_reg {
  struct dlock__wait *w;
  char *watch_key_b64; /* the predecessor's key to watch, or NULL */
  int64_t watch_from;  /* revision to watch from */
  etcd_watch *watch;   /* the stream serving it (session thread's) */
  etcd_reg *next;
};

/* transport.c */
int dlock__etcd_transport_init(dlock__etcd *e);
void dlock__etcd_transport_free(dlock__etcd *e);
/* POSTs req (consumed) to path on the endpoint in use, failing over to the
 * others; *out = the reply object (put it), or an error with detail.
 * `resend`: the request may be sent again after a reply was lost
 * (idempotent); otherwise only a request never sent is retried. */
int dlock__etcd_call(dlock__etcd *e, const char *path, json_object *req,
                     bool resend, json_object **out);
/* A sent request's outcome (on the session thread, no mutex held): rc 0
 * and rep (the reply, put after the call); DLOCK__SEND_BLOCKS when the
 * blocking call is to go on (not sent, no leader, a connection that
 * failed: what it would send again, fail over or renew); or an error
 * with detail: DLOCK_EIOTIMEOUT (no answer in the command timeout, or a
 * lost reply to a request that is not sent again), DLOCK_ESERVER (etcd
 * refused it), DLOCK_ECLOSED (the client closes). */
typedef void (*dlock__etcd_sent_fn)(dlock__etcd *e, void *arg, int rc,
                                    json_object *rep);
/* Sends req (consumed) to path on the endpoint in use without waiting:
 * 0, and fn(e, arg, ...) runs exactly once on the session thread; or
 * DLOCK__SEND_BLOCKS / DLOCK_ENOMEM, nothing sent, fn never runs. */
int dlock__etcd_send(dlock__etcd *e, const char *path, json_object *req,
                     bool resend, dlock__etcd_sent_fn fn, void *arg);
/* The session thread's side: mu held, the queued requests join *list
 * and e->multi; a transfer of e->multi that ended is one of *list's
 * (then its handler ran: true); at stop, each of *list and the queue
 * ends with DLOCK_ECLOSED. */
void dlock__etcd_sends_take_locked(dlock__etcd *e, etcd_sent **list);
bool dlock__etcd_sends_ended(dlock__etcd *e, etcd_sent **list, void *h,
                             int result);
void dlock__etcd_sends_close(dlock__etcd *e, etcd_sent **list);
/* A reply's header.raft_term (JSON) raises e->term to it. */
void dlock__etcd_saw_term(dlock__etcd *e, json_object *header);
/* Lets an easy handle set up for e (URL of endpoint `idx`, timeouts, auth
 * header) be used by the session thread. Returns the CURL* or NULL. */
void *dlock__etcd_easy_new(dlock__etcd *e, const char *path, int *idx);
/* The same for endpoint idx (NULL when out of range). */
void *dlock__etcd_easy_new_at(dlock__etcd *e, const char *path, int idx);
void dlock__etcd_easy_free(void *h);
/* The endpoint after `idx` becomes the one in use (when idx still is). */
void dlock__etcd_failover(dlock__etcd *e, int idx);
/* Authenticates (user/password set) and keeps the token. */
int dlock__etcd_authenticate(dlock__etcd *e);

/* base64 and JSON helpers (transport.c) */
char *dlock__etcd_b64(const char *s, size_t n);
char *dlock__etcd_unb64(const char *s, size_t *n);
/* An int64 field given as a string (the gateway's form) or number; 0 when
 * absent. */
int64_t dlock__etcd_i64(json_object *o, const char *key);
json_object *dlock__etcd_get(json_object *o, const char *key);
void dlock__etcd_set_i64(json_object *o, const char *key, int64_t v);
void dlock__etcd_set_str(json_object *o, const char *key, const char *v);
/* "<prefix>\x00..." range end of a prefix (the last byte plus one). */
char *dlock__etcd_prefix_end(const char *prefix);

/* session.c */
int dlock__etcd_session_start(dlock__etcd *e);
void dlock__etcd_session_stop(dlock__etcd *e);
/* The live lease id (granting one if there is none); error with detail. */
int dlock__etcd_session_lease(dlock__etcd *e, int64_t *lease);
/* Wakes the session thread (new watch, stop). */
void dlock__etcd_session_poke(dlock__etcd *e);
/* mu held: r's stream (if any) is no longer wanted; the thread closes
 * it. */
void dlock__etcd_watch_detach_locked(etcd_reg *r);
/* The lease `lease` is gone (etcd refused a request on it): as a loss
 * seen by the keep-alive, when it is still the session's lease (holds
 * reported lost, waits woken). Call without mu. */
void dlock__etcd_session_lost(dlock__etcd *e, int64_t lease, const char *why);
/* rc (with the thread's last error) is etcd's "requested lease not
 * found": the lease the request wrote on is gone. */
bool dlock__etcd_lease_refused(int rc);
/* Best effort: revokes the lease (client close). */
void dlock__etcd_session_revoke(dlock__etcd *e);

/* locks.c */
int dlock__etcd_lock_acquire(void *be, const dlock__acquire *a, int64_t *pttl,
                             int64_t *token);
int dlock__etcd_lock_leave(void *be, const dlock__acquire *a, uint64_t seq,
                           int64_t *token);
int dlock__etcd_lock_release(void *be, const dlock__release *rel);
/* backend.h's lock_acquire_send / lock_release_send */
int dlock__etcd_lock_acquire_send(void *be, const dlock__acquire *a,
                                  dlock__sent_fn done, void *arg);
int dlock__etcd_lock_release_send(void *be, const dlock__release *rel,
                                  dlock__sent_fn done, void *arg);
int dlock__etcd_lock_force_release(void *be, dlock_lock_kind_t kind,
                                   const char *name, bool *deleted);
int dlock__etcd_lock_query(void *be, dlock_lock_kind_t kind, const char *name,
                           const char *owner, dlock__lock_query q,
                           int64_t *out);
int dlock__etcd_lock_state(void *be, dlock_lock_kind_t kind, const char *name,
                           dlock_lock_state_t **out);
/* backend.h, session_expired: the core's loss clock gave lease `sid` up
 * (it is lost as by dlock__etcd_session_lost). */
void dlock__etcd_session_expired(void *be, int64_t sid);
/* The lease's granted TTL (backend.h, session_length). */
int dlock__etcd_session_length(void *be, int64_t *ms);
int dlock__etcd_lock_hold_env(void *be, dlock_lock_kind_t kind,
                              const char *name, const char *owner, char ***out);
int dlock__etcd_wait_begin(void *be, struct dlock__wait *w);
void dlock__etcd_wait_end(void *be, struct dlock__wait *w);
void dlock__etcd_entries_free(dlock__etcd *e);
/* Shared by locks.c and rw.c. A Range request object; order NULL: no
 * sort; 0: no limit / no bound. */
json_object *dlock__etcd_range_req(const char *key_b64, const char *end_b64,
                                   const char *order, const char *target,
                                   int64_t limit, int64_t max_create_rev,
                                   int64_t max_mod_rev);
/* The first kv of a range response, or NULL. */
json_object *dlock__etcd_first_kv(json_object *range_resp);
int dlock__etcd_delete(dlock__etcd *e, const char *key_b64, bool resend,
                       int64_t *deleted);
/* ms left on a lease; -1 when none or unknown (one round trip). */
int64_t dlock__etcd_lease_left(dlock__etcd *e, int64_t lease);
/* "<owner> key=<key> rev=<create revision> lease=<hex>" of a kv (the
 * value's first line is the owner); *info (info may be NULL) gets what
 * follows that line (a dlock client's holder info), or NULL. */
char *dlock__etcd_describe(json_object *kv, char **info);
/* mu held: the live wait of owner on name, or NULL. */
etcd_reg *dlock__etcd_reg_find_locked(dlock__etcd *e, const char *name,
                                      const char *owner);

/* rw.c: read-write lock (etcd's recipes RWMutex layout) */
/* *used: the lease the attempt was made under (0: none) */
int dlock__etcd_rw_acquire(dlock__etcd *e, const dlock__acquire *a,
                           int64_t *pttl, int64_t *token, int64_t *used);
int dlock__etcd_rw_release(dlock__etcd *e, dlock_lock_kind_t kind,
                           const char *name, const char *owner);
int dlock__etcd_rw_force_release(dlock__etcd *e, const char *name,
                                 bool *deleted);
int dlock__etcd_rw_query(dlock__etcd *e, dlock_lock_kind_t kind,
                         const char *name, const char *owner,
                         dlock__lock_query q, int64_t *out);
int dlock__etcd_rw_state(dlock__etcd *e, const char *name,
                         dlock_lock_state_t **out);
/* A wait on a side ends: its key goes unless it holds. */
void dlock__etcd_rw_abandon(dlock__etcd *e, dlock_lock_kind_t kind,
                            const char *name, const char *owner);
void dlock__etcd_rws_free(dlock__etcd *e);

/* The key of `name` under `lease`: "<name>/<lease in hex>". Caller frees. */
char *dlock__etcd_key(const char *name, int64_t lease);

/* The backend (registered in src/backends.c). */
extern const dlock__backend_ops dlock__etcd_backend;

#endif
