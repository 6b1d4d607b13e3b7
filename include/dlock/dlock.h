/*
 * dlock.h - the one public header of libdlock, distributed locks for C.
 *
 * Model
 * -----
 * A client (dlock_client_t) is a connection to one coordination service
 * (Redis, ZooKeeper or etcd, chosen by the URL's scheme), or, created
 * with dlock_client_new_redlock(), to several independent Redis masters
 * whose majority keeps each lock (Redlock, docs/REDLOCK.md). It owns a
 * small pool of command connections and one background event loop that
 * holds the pub/sub connection (wake-ups), schedules lease renewal and
 * reconnects, and reports lost locks by their deadlines; the round trips
 * those need run on up to three helper threads of the client (renewal,
 * settling of interrupted waits, dialling), started when first needed, so
 * the loop itself never waits on the network (a program that uses the
 * async API also gets a small pool of threads for its operations' round
 * trips; see "async API" below). A lock handle (dlock_lock_t) names one lock
 * on that service. Locks are owned per thread, as a pthread mutex is: the
 * thread that acquired a lock releases it, and acquiring again from the same
 * thread counts up (reentrancy). The owner written to the service is
 * "<client-id>:<thread-id>", the layout Redisson uses, so dlock and Redisson
 * processes exclude each other on the same name.
 *
 * Errors
 * ------
 * Every function that can fail returns 0 (DLOCK_OK) or a negative DLOCK_E*
 * code. Codes are never renumbered; new ones are only added. A human-readable
 * detail of the last failure on the calling thread is available from
 * dlock_last_error() (thread-local, so a client shared between threads never
 * mixes up two threads' messages). The library never prints, aborts, exits
 * or raises signals, whatever the input or the server does.
 *
 * Threads
 * -------
 * Options objects are not thread-safe (build them on one thread). A client
 * and its lock handles may be used from any number of threads at once.
 * Callbacks run on the client's own threads with no library mutex held.
 * The lost callback runs on a thread of its own (one call at a time, in
 * the order the losses were found), off the event loop: it may call any
 * dlock function of its client, a release or an acquire with a wait
 * included, while the client keeps renewing, waking waiters and reporting
 * losses by their deadlines; losses found meanwhile are reported after it
 * returns. The log callback runs on whichever library thread logs, the
 * event loop included, so it must return quickly. Neither may call
 * dlock_client_free() or dlock_lock_free() of its client. Async
 * operations' callbacks run only on the program's own thread, inside
 * dlock_client_process() ("async API" below).
 *
 * Durations are int64_t milliseconds.
 */
#ifndef DLOCK_DLOCK_H
#define DLOCK_DLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(DLOCK_STATIC)
#define DLOCK_EXTERN
#elif defined(__GNUC__)
#define DLOCK_EXTERN __attribute__((visibility("default")))
#else
#define DLOCK_EXTERN
#endif

/* ---------------------------------------------------------------- version */

#define DLOCK_VERSION_MAJOR 0
#define DLOCK_VERSION_MINOR 1
#define DLOCK_VERSION_PATCH 0
#define DLOCK_VERSION_HEX                                                      \
  ((DLOCK_VERSION_MAJOR << 16) | (DLOCK_VERSION_MINOR << 8) |                  \
   DLOCK_VERSION_PATCH)

/* DLOCK_VERSION_HEX of the library actually linked. Any thread. */
DLOCK_EXTERN unsigned dlock_version(void);
/* "MAJOR.MINOR.PATCH" of the library linked; static storage. Any thread. */
DLOCK_EXTERN const char *dlock_version_string(void);
/* The backends of the library linked, space-separated in this order:
 * "redis" (always; with Sentinel, Cluster and Redlock), then "zookeeper"
 * and "etcd" when the build has them (they are optional: a build without
 * one refuses its URLs, see dlock_client_new). Static storage. Any
 * thread. */
DLOCK_EXTERN const char *dlock_backends(void);

/* ----------------------------------------------------------------- errors */

/* X(name, value, message). Values are stable forever.
 * DLOCK_ESYS: a system call the library needs failed for a reason other
 * than memory (getrandom, pipe2, thread creation: a seccomp filter, a
 * descriptor or thread limit); dlock_last_error() names the call and its
 * errno text.
 * DLOCK_ETLS: a TLS connection could not be set up: the server's
 * certificate did not verify (unknown CA, another host name, expired), a
 * CA, certificate or key file could not be read, the server refused the
 * client's certificate, or one side spoke TLS and the other did not;
 * dlock_last_error() says which in one line.
 * DLOCK_ECANCELED: an async operation ended because dlock_op_cancel asked
 * it to (its callback's outcome). */
#define DLOCK_ERRNO_MAP(X)                                                     \
  X(EINVAL, -1, "invalid argument")                                            \
  X(ENOMEM, -2, "out of memory")                                               \
  X(EBUSY, -3, "lock is held by another owner")                                \
  X(ETIMEDOUT, -4, "timed out waiting for the lock")                           \
  X(ENOTOWNER, -5, "lock is not held by this owner")                           \
  X(ELOST, -6, "lock was lost (lease expired or key removed)")                 \
  X(EUNAVAILABLE, -7, "backend unreachable")                                   \
  X(EIOTIMEOUT, -8, "backend did not answer in time")                          \
  X(EAUTH, -9, "authentication refused by the backend")                        \
  X(EPROTO, -10, "unexpected reply from the backend")                          \
  X(EURL, -11, "malformed backend URL")                                        \
  X(EWRONGTYPE, -12, "key holds a value of another type")                      \
  X(ESERVER, -13, "backend reported an error")                                 \
  X(ENOTSUP, -14, "not supported")                                             \
  X(ECLOSED, -15, "client is closed or was created in another process")        \
  X(EBADHANDLE, -16, "handle is not live (freed or corrupted)")              \
  X(EDEADLK, -17, "would deadlock (a read hold cannot become a write hold)") \
  X(ESYS, -18, "system call failed")                                          \
  X(ETLS, -19, "TLS handshake or certificate verification failed")          \
  X(ECANCELED, -20, "operation cancelled")

typedef enum dlock_err {
  DLOCK_OK = 0,
#define DLOCK__ERR_ENUM(name, value, msg) DLOCK_##name = (value),
  DLOCK_ERRNO_MAP(DLOCK__ERR_ENUM)
#undef DLOCK__ERR_ENUM
} dlock_err_t;

/* Static message for a code ("unknown error" for codes not in the table). */
DLOCK_EXTERN const char *dlock_strerror(int err);
/* Static name for a code, e.g. "DLOCK_EBUSY" ("DLOCK_OK" for 0). */
DLOCK_EXTERN const char *dlock_err_name(int err);
/* Detail of the last failed call made by this thread, e.g.
 * "redis://127.0.0.1:6380: connection refused". Valid until this thread's
 * next dlock call. Never NULL; "" when nothing failed yet. Passwords are
 * never included. */
DLOCK_EXTERN const char *dlock_last_error(void);

/* -------------------------------------------------------------- constants */

/* Longest lock name, in bytes. Names are arbitrary non-empty byte strings
 * without NUL of 1..DLOCK_NAME_MAX bytes, except that on Redis (plain,
 * Sentinel, Cluster, Redlock) names beginning with "dlock_lock_" are
 * reserved for dlock's own keys (DLOCK_EINVAL); Spring's layout and the
 * other backends have no such keys and take them. */
#define DLOCK_NAME_MAX 1024
/* wait_ms: wait without a deadline. 0 means try once. */
#define DLOCK_WAIT_FOREVER (-1)
/* lease_ms: no fixed lease; the watchdog keeps the lock alive until release. */
#define DLOCK_LEASE_WATCHDOG (-1)
/* Longest fixed lease, in ms (366 days). */
#define DLOCK_LEASE_MAX (366LL * 24 * 3600 * 1000)

/* ---------------------------------------------------------------- options */

typedef struct dlock_options dlock_options_t;

/* Why a held lock was lost (argument of the lost callback). */
typedef enum dlock_lost_reason {
  /* renewal found the key gone or owned by someone else */
  DLOCK_LOST_GONE = 1,
  /* the backend could not be reached for longer than the lease */
  DLOCK_LOST_UNREACHABLE = 2,
  /* the session every hold of the client shares (a ZooKeeper session, an
   * etcd lease) expired or was revoked: every hold on it is reported */
  DLOCK_LOST_SESSION = 3
} dlock_lost_reason_t;

/* Called once per lost hold, on the client's notifying thread (not its
 * event loop; see "Threads" above), with no library mutex held. `name` is valid only during the call. For a permit of a
 * permit semaphore, thread_id is 0. */
typedef void (*dlock_lost_fn)(void *userdata, const char *name,
                              uint64_t thread_id, dlock_lost_reason_t reason);

typedef enum dlock_log_level {
  DLOCK_LOG_ERROR = 0,
  DLOCK_LOG_WARN = 1,
  DLOCK_LOG_INFO = 2,
  DLOCK_LOG_DEBUG = 3
} dlock_log_level_t;

/* Log sink. May be called from any thread that calls into the library and
 * from the background thread; must be thread-safe. `msg` is valid only
 * during the call. */
typedef void (*dlock_log_fn)(void *userdata, dlock_log_level_t level,
                             const char *msg);

/* Creates an options object with defaults: connect timeout 5000 ms, command
 * timeout 5000 ms, watchdog 30000 ms, idle pool 8, no callbacks.
 * Free with dlock_options_free(). Not thread-safe. */
DLOCK_EXTERN int dlock_options_new(dlock_options_t **out);
/* Accepts NULL. */
DLOCK_EXTERN void dlock_options_free(dlock_options_t *opts);
/* TCP/Unix connect plus handshake (AUTH, SELECT, CLIENT SETNAME), > 0. */
DLOCK_EXTERN int dlock_options_set_connect_timeout(dlock_options_t *opts,
                                                   int64_t ms);
/* Bound on one round trip with the server, > 0. */
DLOCK_EXTERN int dlock_options_set_command_timeout(dlock_options_t *opts,
                                                   int64_t ms);
/* Lease used when acquiring with DLOCK_LEASE_WATCHDOG; the background thread
 * renews it every third of its length. >= 3 ms. Default 30000 (Redisson's). */
DLOCK_EXTERN int dlock_options_set_watchdog_timeout(dlock_options_t *opts,
                                                    int64_t ms);
/* Backends whose holds live as long as a session (a ZooKeeper session, an
 * etcd lease): how long the service keeps the session after the client
 * falls silent; every hold of the client is lost when it ends. > 0; the
 * default (0 here) is the backend's own (ZooKeeper 60000, etcd 60000 ms).
 * Redis, whose holds have per-lock leases, ignores it. */
DLOCK_EXTERN int dlock_options_set_session_timeout(dlock_options_t *opts,
                                                   int64_t ms);
/* How long a wait (an acquire with a wait other than 0) keeps trying
 * through an outage: no server could be reached (a restart, a Sentinel or
 * Cluster failover, a Redlock majority that did not answer), so the
 * attempt sent nothing or was undone. It tries again (after 50 ms,
 * doubling to 1 s, at once when the connection comes back) until the
 * outage has lasted this long or its own deadline comes, and then returns
 * the outage's error (DLOCK_EUNAVAILABLE or DLOCK_EIOTIMEOUT). An attempt
 * that may have reached the server (no reply in time, the connection lost
 * after the request went out) is tried again only where the server tells
 * a repeated attempt from a new one (Redis reentrant and fenced locks,
 * whose waits carry their queue entry); elsewhere (semaphores, latches,
 * other kinds) it ends the wait at once, as its outcome is unknown. 0:
 * every failure ends the wait; else 1 .. 86400000. Default 30000. */
DLOCK_EXTERN int dlock_options_set_outage_grace(dlock_options_t *opts,
                                                int64_t ms);
/* Async operations (dlock_lock_acquire_async, ...): how many of the
 * client's threads run their round trips, started when first needed. A
 * waiting operation takes none while it waits. 1 .. 64, default 4. */
DLOCK_EXTERN int dlock_options_set_async_threads(dlock_options_t *opts,
                                                 int n);
/* Redis with replicas: after every script that writes (acquire, release,
 * semaphore and latch changes; not renewals), dlock sends
 * `WAIT <connected replicas> <ms>` in the same pipeline, as Redisson's
 * syncedEval does. When replicas are connected and none acknowledged
 * within `ms`, the call fails with DLOCK_EUNAVAILABLE ("none of the N
 * connected replicas acknowledged ..."); an acquire that had succeeded on
 * the master is rolled back first (released), so the caller holds nothing.
 * The replica count comes from ROLE, asked at most once a second in the
 * same pipeline; with no replica connected (or a server that refuses ROLE
 * or WAIT) nothing is waited for. One acknowledgement is enough: this
 * narrows, but does not close, the window in which a failover loses a
 * granted lock (replication stays asynchronous). 1..86400000 ms, or 0 to
 * turn it off; default 1000 (Redisson's). See docs/REPLICAS.md. */
DLOCK_EXTERN int dlock_options_set_replica_wait(dlock_options_t *opts,
                                                int64_t ms);
/* Redlock clients (dlock_client_new_redlock): how long one node may take
 * to answer one request before it counts as a "no" (> 0; default 50 ms,
 * small against the lease, as antirez's specification asks), and the
 * clock drift allowed for, drift_permille / 1000 x lease + drift_ms
 * (defaults 10 per mille and 2 ms: 0.01 x lease + 2 ms; 0..500 and
 * 0..60000). A grant is kept only while lease - elapsed - drift > 0.
 * Other clients ignore them. */
DLOCK_EXTERN int dlock_options_set_redlock_timing(dlock_options_t *opts,
                                                  int64_t node_timeout_ms,
                                                  int64_t drift_permille,
                                                  int64_t drift_ms);
/* CLIENT SETNAME on every connection (no spaces; NULL clears). Copied. */
DLOCK_EXTERN int dlock_options_set_client_name(dlock_options_t *opts,
                                               const char *name);
/* Who this client is, for status displays of other processes: a text
 * (1 to DLOCK_HOLDER_INFO_MAX bytes of printable UTF-8, no control
 * characters; NULL clears; copied) that the client records on the server
 * beside each lock it holds and each wait it queues, and that
 * dlock_lock_state() of any client reads back (holder_infos,
 * waiter_infos). Stored where the lock's anchor layout leaves room
 * (docs/LAYOUT.md): Redis, a key dlock_holder:{NAME}:<owner> that lives
 * with the hold's lease (reentrant, fenced and fair locks; removed at the
 * full release); ZooKeeper, the lock node's data after the owner line;
 * etcd, the key's value after the owner line. It is readable by anyone
 * who can read the lock: put no secret in it. Unset (the default), nothing
 * beyond the anchors' layout is written. DLOCK_EINVAL for a text too long,
 * empty or not printable UTF-8. */
#define DLOCK_HOLDER_INFO_MAX 512
DLOCK_EXTERN int dlock_options_set_holder_info(dlock_options_t *opts,
                                               const char *text);
/* Redis key layout: "redisson" (the default: Redisson's layout with
 * dlock's wait queue, docs/LAYOUT.md) or "spring" (Spring Integration's
 * RedisLockRegistry: the STRING <registry>:<name> holding the client's id,
 * so that a Spring application and dlock exclude each other on one lock;
 * see docs/LAYOUT.md, "Spring Integration's layout"). NULL clears (the
 * URL's ?layout= decides, else Redisson's). The URL may say it instead:
 * redis://host/?layout=spring&registry=KEY (redis://, rediss://, unix://,
 * redis-sentinel://); a URL and options that both name a layout or a
 * registry key must agree (else DLOCK_EINVAL at dlock_client_new). With
 * the spring layout a client offers one kind, the plain exclusive lock
 * (DLOCK_REENTRANT: re-entries and the exclusion of the client's own
 * threads are counted in the client, as the registry does, since the
 * server stores one id per client); every other kind, semaphores and
 * latches are DLOCK_ENOTSUP, before anything is sent. Redis Cluster and
 * Redlock clients keep Redisson's layout (DLOCK_ENOTSUP). DLOCK_EINVAL for
 * another name. */
DLOCK_EXTERN int dlock_options_set_layout(dlock_options_t *opts,
                                          const char *layout);
/* The spring layout's registry key (RedisLockRegistry's registryKey: it
 * has no default, so the spring layout needs one, here or as the URL's
 * ?registry=): 1 to DLOCK_SPRING_REGISTRY_MAX bytes without control
 * characters; NULL clears; copied. DLOCK_EINVAL otherwise. */
#define DLOCK_SPRING_REGISTRY_MAX 512
DLOCK_EXTERN int dlock_options_set_spring_registry(dlock_options_t *opts,
                                                   const char *registry_key);
/* ACL user and password, overriding those in the URL. Either may be NULL
 * (user NULL = the default user). Copied. */
DLOCK_EXTERN int dlock_options_set_credentials(dlock_options_t *opts,
                                               const char *user,
                                               const char *password);
/* redis-sentinel:// URLs: the sentinels' own ACL user and password (the
 * URL's and dlock_options_set_credentials' are the data nodes'). Either may
 * be NULL (user NULL = the default user; both NULL: no AUTH). Copied. */
DLOCK_EXTERN int dlock_options_set_sentinel_credentials(dlock_options_t *opts,
                                                        const char *user,
                                                        const char *password);
/* How many command connections the client keeps (1..1024). Redis: up to
 * this many calls at once each have a connection of their own; calls
 * beyond that share one pipelined connection rather than dial more.
 * PostgreSQL, MySQL: every hold has a connection of its own; one its
 * release gives back is kept while the session timeout it was left with
 * allows (up to 1024), one without such a timeout up to this many. */
DLOCK_EXTERN int dlock_options_set_pool_size(dlock_options_t *opts, int n);
/* Fair locks: how long a queued waiter keeps its place without coming back
 * (a crashed waiter loses it after this), > 0. Default 300000 (Redisson's).
 * A live waiter keeps its place however long it waits. An acquire with a
 * finite wait uses its wait instead, as Redisson does. */
DLOCK_EXTERN int dlock_options_set_fair_thread_wait(dlock_options_t *opts,
                                                    int64_t ms);
DLOCK_EXTERN int dlock_options_set_lost_callback(dlock_options_t *opts,
                                                 dlock_lost_fn fn,
                                                 void *userdata);
DLOCK_EXTERN int dlock_options_set_log_callback(dlock_options_t *opts,
                                                dlock_log_fn fn, void *userdata,
                                                dlock_log_level_t max_level);

/* TLS (Redis and etcd). A rediss:// URL turns TLS on;
 * dlock_options_set_tls(opts, true) does so for a redis:// URL too (as
 * redis-cli's --tls); etcds:// and etcd:// likewise (docs/ETCD.md). Every
 * connection of the client then speaks TLS 1.2 or later through OpenSSL,
 * the pub/sub connection included. By default the server's certificate
 * must chain to a CA of the system's store (OpenSSL's default paths) and
 * name the URL's host: a DNS name is matched against the certificate's
 * DNS names, an IP literal against its IP addresses. The files below are
 * read when dlock_client_new() runs (a missing, unreadable or malformed
 * file is DLOCK_ETLS there, naming the file); the options only copy the
 * paths. A TLS failure while connecting (certificate not verified, name
 * mismatch, client certificate refused, a plain server behind a rediss://
 * URL) is DLOCK_ETLS with one line saying which; a TLS client at a plain
 * port may also get DLOCK_EIOTIMEOUT after the connect timeout ("TLS
 * handshake timed out"). TLS over unix:// is DLOCK_ENOTSUP. Setting any
 * of these options does not by itself turn TLS on. */
/* Turns TLS on (true) for redis:// URLs; false (the default) leaves plain
 * redis:// URLs plain. A rediss:// URL uses TLS either way. */
DLOCK_EXTERN int dlock_options_set_tls(dlock_options_t *opts, bool enable);
/* The CAs trusted to sign the server's certificate, instead of the
 * system's store: a PEM file (redis-cli's --cacert) and/or a directory of
 * hashed PEM files as made by `openssl rehash` (--cacertdir). Both NULL
 * (the default) restores the system's store. Non-empty paths of at most
 * 4096 bytes; copied. */
DLOCK_EXTERN int dlock_options_set_tls_ca(dlock_options_t *opts,
                                          const char *ca_file,
                                          const char *ca_dir);
/* A client certificate (PEM, optionally followed by its chain) and its
 * private key (PEM, not encrypted: an encrypted key is refused rather than
 * prompted for), for servers that verify clients (Redis's
 * tls-auth-clients). Give both or neither (NULL, NULL: no client
 * certificate, the default); one without the other is DLOCK_EINVAL.
 * Copied. */
DLOCK_EXTERN int dlock_options_set_tls_cert(dlock_options_t *opts,
                                            const char *cert_file,
                                            const char *key_file);
/* The server name sent as SNI and verified against the certificate,
 * instead of the URL's host (for a server reached by address or through a
 * tunnel whose certificate carries its DNS name). NULL (the default): the
 * URL's host, sent as SNI unless it is an IP literal. 1..253 printable
 * ASCII bytes without spaces; copied. */
DLOCK_EXTERN int dlock_options_set_tls_sni(dlock_options_t *opts,
                                           const char *server_name);
/* FOR TESTS ONLY: true turns off the verification of the server's
 * certificate and name, so anyone on the path can read and change the
 * traffic, password included. Default false; never turned on by anything
 * but this call (the command's --insecure). */
DLOCK_EXTERN int dlock_options_set_tls_insecure(dlock_options_t *opts,
                                                bool insecure);

/* ----------------------------------------------------------------- client */

typedef struct dlock_client dlock_client_t;

/* Creates a client for `url` and checks it by connecting once (so a wrong
 * address or password is reported here, not at the first lock).
 *   redis://[[user]:password@]host[:port][/db]   (default port 6379, db 0)
 *   redis://[::1]:6379/0                          (IPv6 literal)
 *   rediss://...                                  (the same over TLS: see
 *                                                 the TLS options above)
 *   unix:///path/to/redis.sock[?db=N]
 *   zookeeper://host[:port][,host[:port]...][/chroot][?base=/path], zk://
 *       (default port 2181; Curator's layouts, docs/ZOOKEEPER.md: the
 *       client is one session of dlock_options_set_session_timeout)
 *   etcd://[user:password@]host[:port][,host[:port]...], etcds:// (TLS)
 *       (default port 2379; the members of one etcd cluster, docs/ETCD.md:
 *       the client is one session, a lease of
 *       dlock_options_set_session_timeout)
 * Redis user and password may be percent-encoded. `opts` may be NULL
 * (defaults) and is copied: it may be freed right after the call. On
 * success *out owns a client to be freed with dlock_client_free(); on
 * failure *out is NULL. Redlock clients are made by
 * dlock_client_new_redlock. A scheme this build has no backend for is
 * DLOCK_EURL naming the schemes it has; the ZooKeeper and etcd backends
 * are optional (dlock_backends), and a build without one answers its URLs
 * with DLOCK_EURL and "this build has no zookeeper backend: rebuild with
 * -DDLOCK_WITH_ZOOKEEPER=ON (needs libzookeeper-mt-dev)" (etcd: the same
 * with DLOCK_WITH_ETCD, libcurl4-openssl-dev and libjson-c-dev). An operation
 * or object the backend does not offer is DLOCK_ENOTSUP, naming both, before
 * anything is sent. Errors: DLOCK_EINVAL, DLOCK_EURL, DLOCK_EUNAVAILABLE,
 * DLOCK_EIOTIMEOUT, DLOCK_EAUTH, DLOCK_ESERVER, DLOCK_ENOMEM, DLOCK_ESYS
 * (getrandom, pipe2 or the background thread's creation failed), DLOCK_ETLS. */
DLOCK_EXTERN int dlock_client_new(dlock_client_t **out, const char *url,
                                  const dlock_options_t *opts);
/* Creates a Redlock client over n independent Redis masters (n odd, 1 to
 * 15; each URL as for dlock_client_new, redis:// or unix://; no two
 * alike). Every lock of this client is a Redlock (antirez's algorithm,
 * docs/REDLOCK.md): each request goes to every node at once, and a lock
 * is granted when a majority (n/2 + 1) grants it within the validity
 * lease - elapsed - drift (dlock_options_set_redlock_timing); otherwise it
 * is released on every node and tried again after a random delay within
 * the wait. Waiting is woken by a release on any node. The watchdog
 * renews on every node at once and keeps a hold only while a majority
 * renews it in time; otherwise the hold is reported lost. Each node holds
 * the Redisson layout of the lock (RLock, RFencedLock), so Redisson's
 * RedissonRedLock over the same masters excludes it, and vice versa.
 * Kinds: DLOCK_REENTRANT and DLOCK_FENCED (a fenced token is the largest
 * of the granting majority's counters: it grows with every grant seen by
 * a majority, but is no consensus token; see docs/REDLOCK.md); other
 * kinds, semaphores and latches are DLOCK_ENOTSUP. Each node is checked
 * once at creation, as by dlock_client_new: a majority must answer (a
 * node that is down is only logged, and tried again at each request);
 * a bad URL or password on any node is an error.
 * Ownership, threads and freeing as for dlock_client_new.
 * Errors: as dlock_client_new; DLOCK_EINVAL for a NULL list or an even,
 * zero or too large n. */
#define DLOCK_REDLOCK_MAX_NODES 15
DLOCK_EXTERN int dlock_client_new_redlock(dlock_client_t **out,
                                          const char *const *urls, size_t n,
                                          const dlock_options_t *opts);
/* A Redlock client's node count (0 for any other client). */
DLOCK_EXTERN size_t dlock_client_nodes(const dlock_client_t *client);
/* Stops the background thread and closes every connection. Locks still held
 * are not released: watchdog leases stop being renewed and expire on the
 * server (etcd: the session's lease is revoked, so they go at once). Calls in progress on other threads end first: a waiting acquire
 * returns DLOCK_ECLOSED at its next step, and this function waits for them
 * (each is bounded by its network timeouts). No call may start once it has
 * begun. Lock handles left over are freed here. Accepts NULL. Must not be
 * called from a callback. In a child process after fork() it only frees. */
DLOCK_EXTERN void dlock_client_free(dlock_client_t *client);
/* The client id (a random UUID, 36 characters). Lives as long as the client. */
DLOCK_EXTERN const char *dlock_client_id(const dlock_client_t *client);
/* One round trip (PING) to the server. */
DLOCK_EXTERN int dlock_client_ping(dlock_client_t *client);
/* Backends whose holds live as long as a session (ZooKeeper, etcd): *ms
 * is the session's length as the service granted it, without a round trip:
 * ZooKeeper's negotiated session timeout (the server keeps it within
 * [2, 20] ticks), etcd's granted lease TTL; until the service has granted
 * one, the length asked for. DLOCK_ENOTSUP on Redis, whose holds have
 * per-lock leases (dlock_options_set_watchdog_timeout). */
DLOCK_EXTERN int dlock_client_session_timeout(dlock_client_t *client,
                                              int64_t *ms);
/* The calling thread's number, the "<thread-id>" part of an owner: a
 * decimal integer on the server, as Redisson's Java thread id. Assigned on
 * the thread's first call from a process-wide counter (1, 2, ...), the same
 * for the thread's whole life and never given to another thread of the
 * process, even after the thread ends (unlike a Linux TID, which the kernel
 * recycles: a new thread with a dead thread's TID would own its locks).
 * Never 0. After fork() the calling thread keeps its number in the child
 * and the child's new threads count on from it; the child's own clients
 * have new client ids, so no owner repeats. Numbers passed to the *_as
 * calls are the caller's to keep apart from these. Any thread. */
DLOCK_EXTERN uint64_t dlock_thread_id(void);

/* --------------------------------------------------------- reentrant lock */

typedef struct dlock_lock dlock_lock_t;

/* A handle on the reentrant lock `name` (Redisson RLock layout). Creating a
 * handle does not touch the server. Handles are cheap; several handles on the
 * same name in one client share their state. Any thread. */
DLOCK_EXTERN int dlock_lock_new(dlock_client_t *client, const char *name,
                                dlock_lock_t **out);

/* The kinds of lock that share the dlock_lock_* calls. Each speaks the
 * Redisson layout of the same name (RLock, RFairLock, RFencedLock,
 * RReadWriteLock's two sides). */
typedef enum dlock_lock_kind {
  /* reentrant mutex (dlock_lock_new) */
  DLOCK_REENTRANT = 0,
  /* waiters are served in strict arrival order across processes; a waiter
   * that gives up leaves the queue at once, a crashed one loses its place
   * after the fair thread-wait (dlock_options_set_fair_thread_wait) */
  DLOCK_FAIR = 1,
  /* the reentrant lock plus a fencing token, a number that grows with every
   * grant (re-entries included): see dlock_lock_acquire_fenced() */
  DLOCK_FENCED = 2,
  /* the read side of the read-write lock `name`: any number of readers,
   * each read hold with its own lease. A thread holding the write side may
   * also take the read side (downgrade); a reader asking for the write side
   * gets DLOCK_EDEADLK at once (no upgrade). While a dlock writer waits, a
   * thread that holds no read hold yet does not join the readers holding
   * the lock (a holder re-enters freely): it gets in right after that
   * writer (a writer that dies while queued holds it back about 1 s more).
   * So a stream of readers cannot starve writers; but a thread that
   * holds a read hold and waits for another thread's new read hold on the
   * same lock can deadlock behind a waiting writer, as with any
   * writer-preferring read-write lock. Redisson's readers do not hold back
   * for dlock writers. */
  DLOCK_READ = 3,
  /* the write side of the read-write lock `name`: one writer, no readers
   * (except the writer's own read holds). Waiting writers are handed the
   * lock in arrival order, as reentrant waiters are; a write release with
   * readers waiting lets them in first (every reader wakes), so writers
   * cannot starve readers; new readers wait behind a waiting writer (see
   * DLOCK_READ), so readers cannot starve writers either. */
  DLOCK_WRITE = 4
} dlock_lock_kind_t;

/* A handle on a lock of the given kind. The same name must be used with one
 * family only: reentrant and fenced share a lock (a fenced and a reentrant
 * handle on one name exclude each other), read and write are the two sides
 * of one lock, and a fair lock must not share its name with the others. */
DLOCK_EXTERN int dlock_lock_new_kind(dlock_client_t *client, const char *name,
                                     dlock_lock_kind_t kind,
                                     dlock_lock_t **out);
/* The handle's kind (DLOCK_REENTRANT for a handle that is not live). */
DLOCK_EXTERN dlock_lock_kind_t dlock_lock_kind(const dlock_lock_t *lock);
/* Frees the handle (accepts NULL). Holds taken through it stay on the server
 * and, when no other handle on the same name remains, are no longer renewed
 * (they expire after their lease). */
DLOCK_EXTERN void dlock_lock_free(dlock_lock_t *lock);
/* The lock's name (owned by the handle). */
DLOCK_EXTERN const char *dlock_lock_name(const dlock_lock_t *lock);

/* Acquires the lock for the calling thread.
 *   wait_ms:  0 = try once (DLOCK_EBUSY if held), > 0 = wait at most that
 *             long (DLOCK_ETIMEDOUT), DLOCK_WAIT_FOREVER = no deadline.
 *   lease_ms: > 0 = fixed lease, the lock expires after it unless released;
 *             DLOCK_LEASE_WATCHDOG = the client's watchdog timeout, renewed
 *             in the background until release.
 * Re-acquiring from the owning thread counts up and resets the lease.
 *
 * Waiting never polls the server. A waiting thread queues on the server and
 * a release hands the lock straight to the oldest live dlock waiter (it
 * becomes the owner and is told by a message), so waiters are served in
 * arrival order with one round trip per hand-off. Redisson clients (and a
 * dlock waiter whose client cannot subscribe to the hand-off channel) are
 * not in that queue; they are woken by the releases that find no queued
 * dlock waiter and, while any may be waiting, by one release in every 50 ms
 * that is left open to a race instead of handed over, so they are never
 * starved. A wait may return up to one command timeout after wait_ms (the
 * last round trip is not cut short). Backend errors are returned at once (a
 * wait does not hide them); if such an error leaves it unknown whether the
 * lock was handed to this thread, the client settles it in the background
 * (a lock handed over that nobody takes is released to the next waiter),
 * and this thread's next acquire of the same lock claims it instead. */
DLOCK_EXTERN int dlock_lock_acquire(dlock_lock_t *lock, int64_t wait_ms,
                                    int64_t lease_ms);
/* Releases one hold of the calling thread. 0 when released (or the count
 * went down), DLOCK_ENOTOWNER when this thread holds no hold,
 * DLOCK_ELOST when this thread held it but the lease ran out or the key was
 * removed (the hold is forgotten; the lock may belong to someone else now).
 * A release whose reply is lost is retried once by the library with the same
 * request id, and a retry by the caller after an error reuses that id: a
 * retry within 10 s (2 x (command + connect timeout), at most 60 s) gets the
 * first attempt's outcome, and never releases twice. */
DLOCK_EXTERN int dlock_lock_release(dlock_lock_t *lock);
/* The same for an explicit owner thread id (hand-offs between threads: one
 * thread acquires with owner X, another releases with owner X). */
DLOCK_EXTERN int dlock_lock_acquire_as(dlock_lock_t *lock, uint64_t thread_id,
                                       int64_t wait_ms, int64_t lease_ms);
DLOCK_EXTERN int dlock_lock_release_as(dlock_lock_t *lock, uint64_t thread_id);

/* Acquire of a DLOCK_FENCED lock that also returns its fencing token: a
 * number greater than that of every earlier grant of this lock (to any
 * owner, re-entries included). Pass it to the storage the critical section
 * writes, so that it can refuse a stale holder (one whose lease ran out
 * during a pause). DLOCK_EINVAL on a handle of another kind. */
DLOCK_EXTERN int dlock_lock_acquire_fenced(dlock_lock_t *lock, int64_t wait_ms,
                                           int64_t lease_ms, int64_t *token);
DLOCK_EXTERN int dlock_lock_acquire_fenced_as(dlock_lock_t *lock,
                                              uint64_t thread_id,
                                              int64_t wait_ms,
                                              int64_t lease_ms, int64_t *token);

/* Deletes the lock whoever holds it and wakes its waiters. *was_locked (may
 * be NULL) tells whether there was anything to delete. */
DLOCK_EXTERN int dlock_lock_force_release(dlock_lock_t *lock, bool *was_locked);

/* Queries; each is one round trip and reports the server's truth. */
DLOCK_EXTERN int dlock_lock_is_locked(dlock_lock_t *lock, bool *out);
DLOCK_EXTERN int dlock_lock_is_held_by_thread(dlock_lock_t *lock, bool *out);
/* The calling thread's reentry count (0 when it holds nothing). */
DLOCK_EXTERN int dlock_lock_hold_count(dlock_lock_t *lock, int64_t *out);
/* Remaining lease in ms; -2 when the lock is free, -1 when the key has no
 * expiry (not set by dlock or Redisson). */
DLOCK_EXTERN int dlock_lock_remaining_lease(dlock_lock_t *lock, int64_t *out);
/* How much longer this client can vouch, by its own monotonic clock and
 * without a round trip, that thread_id's hold of the lock is still valid:
 * the server confirmed the lease in reply to a request sent at S (the
 * grant's request, or the latest confirmed renewal), so it holds until
 * S + lease, less the 5% margin the renewer keeps. On ZooKeeper and etcd
 * the lease is the client's session (an etcd lease: its latest confirmed
 * keep-alive; a ZooKeeper session: its latest answered request, so an
 * idle session's bound is early, never late). 0 with *valid_ms > 0;
 * DLOCK_ELOST when the hold was lost or can no longer be vouched for, with
 * *valid_ms <= 0 when its lease lapsed by the clock (minus the ms since
 * then), > 0 when it was lost otherwise (the key removed, the session
 * ended) that long before its lease would have run out; DLOCK_ENOTOWNER
 * when the thread holds nothing. For acting on a hold that
 * may have aged: a process stopped (SIGSTOP, a frozen VM) between the
 * grant and its use. A positive answer is a promise of the client's
 * clock, not of the server's state: pair it with fencing tokens where
 * writes matter. Thread-safe; the handle stays the caller's. */
DLOCK_EXTERN int dlock_lock_hold_valid(dlock_lock_t *lock, uint64_t thread_id,
                                       int64_t *valid_ms);

/* A snapshot of the lock's state on the server, for status displays. */
typedef struct dlock_holder {
  const char *owner; /* "<client-id>:<thread-id>" as written on the server */
  int64_t count;     /* reentry count */
  const char *side;  /* read-write lock: "read" or "write"; else NULL */
} dlock_holder_t;

typedef struct dlock_lock_state {
  const char *name;
  /* "reentrant", "fair", "fenced", "read" or "write" (a read-write lock in
   * that mode), "spring" (the spring layout: its one holder's owner is a
   * client id, its count 1, as the layout keeps none), or "free" when
   * nobody holds it */
  const char *kind;
  int64_t ttl_ms; /* as dlock_lock_remaining_lease() */
  size_t nholders;
  dlock_holder_t *holders; /* nholders entries */
  /* Waiters queued on the server, oldest first (at most 100): for a fair
   * lock its queue, for a reentrant or fenced lock the dlock waiters queued
   * for a hand-off, for a read-write lock its queued dlock writers. */
  size_t nwaiters;
  const char **waiters; /* their owners */
  /* fair lock: for each waiter, ms until it loses its place unless it comes
   * back (its deadline in the queue); NULL for other kinds */
  int64_t *waiter_deadlines_ms;
  int64_t token; /* fenced lock: the last token granted (0: none); else 0 */
  /* Added later (the struct only grows at its end). What each holder and
   * each waiter recorded with dlock_options_set_holder_info(), parallel to
   * holders and waiters; an entry is NULL where nothing was recorded (a
   * client without it, Redisson, Curator, etcdctl). The arrays may be NULL
   * when no entry has any. On Redis a queue entry whose waiter went away
   * without leaving (its entry expired, or its client has no subscriber on
   * its grant channel: the process died) is not listed in waiters. */
  const char **holder_infos;
  const char **waiter_infos;
} dlock_lock_state_t;

/* Reads the state; *out is freed with dlock_lock_state_free(). */
DLOCK_EXTERN int dlock_lock_state(dlock_lock_t *lock, dlock_lock_state_t **out);
DLOCK_EXTERN void dlock_lock_state_free(dlock_lock_state_t *state);
/* A Redlock client's lock: the state on node `node` alone (0 ..
 * dlock_client_nodes() - 1), for status displays that show each node's
 * view. (dlock_lock_state of a Redlock shows the first node that answers;
 * the queries above report what a majority of the nodes reports.)
 * DLOCK_EINVAL for a client that is not a Redlock or a node out of range. */
DLOCK_EXTERN int dlock_lock_node_state(dlock_lock_t *lock, size_t node,
                                       dlock_lock_state_t **out);

/* -------------------------------------------------------------- multilock */

/* Several locks taken as one, all or nothing (Redisson's RedissonMultiLock,
 * without its partial holds): lock handles by names on one client or on
 * different clients, of any kinds (a Redlock client's locks included).
 * Acquiring never holds some members while waiting for another: it waits
 * for one member holding nothing, then tries each other member once; if
 * one is held, it releases what it took, backs off for a random moment (up
 * to 30 ms) and waits for that member next. Two callers taking
 * overlapping sets in opposite orders therefore never deadlock, and a
 * partial set is held for one attempt at most. Each member is renewed by
 * its client's watchdog and a loss is reported by that client's lost
 * callback; dlock_multilock_release releases every member together. */
typedef struct dlock_multilock dlock_multilock_t;

/* A multilock over locks[0..n) (n >= 1; the array is copied, the handles
 * are borrowed: they must outlive the multilock and may not be freed
 * while it is held). Two handles on the same name of the same client are
 * DLOCK_EINVAL. Two handles on the same name of different clients of one
 * server are two owners of one lock, which the multilock can never hold
 * both of (its waits end in DLOCK_ETIMEDOUT, or never with
 * DLOCK_WAIT_FOREVER): the library cannot tell whether two clients reach
 * one server, so do not build such a set. Touches no server. Free with
 * dlock_multilock_free. */
DLOCK_EXTERN int dlock_multilock_new(dlock_multilock_t **out,
                                     dlock_lock_t *const *locks, size_t n);
/* Frees the multilock, not its members nor their holds. Accepts NULL. */
DLOCK_EXTERN void dlock_multilock_free(dlock_multilock_t *m);
/* Its number of members (0 for a handle that is not live). */
DLOCK_EXTERN size_t dlock_multilock_size(const dlock_multilock_t *m);
/* Takes every member for the calling thread. wait_ms and lease_ms as for
 * dlock_lock_acquire, for the whole set (each member's lease starts when
 * that member is taken, within one attempt of the others). DLOCK_EBUSY
 * (wait 0) or DLOCK_ETIMEDOUT naming a member that was held; a backend
 * error of any member is returned at once, with nothing held - unless
 * releasing a member this attempt took failed too (the backend
 * unreachable): that error is returned, the member stays held (renewed),
 * and dlock_multilock_release retries it. A multilock object serves one
 * thread at a time and does not count re-entries: acquiring it while held
 * (wholly or in part) is DLOCK_EINVAL. */
DLOCK_EXTERN int dlock_multilock_acquire(dlock_multilock_t *m, int64_t wait_ms,
                                         int64_t lease_ms);
/* Releases every member (from the thread that acquired it). 0; or
 * DLOCK_ELOST when any member had been lost (every other member is
 * released all the same); DLOCK_ENOTOWNER when it is not held, or held by
 * another thread id (nothing is released then: the owner still can); else
 * the first member's error: a member whose release failed that way (not
 * released, not lost) stays held, and calling this again retries it with
 * the same request id, as dlock_lock_release does. */
DLOCK_EXTERN int dlock_multilock_release(dlock_multilock_t *m);
/* The same for an explicit owner thread id (as dlock_lock_acquire_as). */
DLOCK_EXTERN int dlock_multilock_acquire_as(dlock_multilock_t *m,
                                            uint64_t thread_id,
                                            int64_t wait_ms, int64_t lease_ms);
DLOCK_EXTERN int dlock_multilock_release_as(dlock_multilock_t *m,
                                            uint64_t thread_id);

/* Environment variables that the backend's own lock tool gives a command
 * run under the lock, for thread_id's hold of `lock` (etcd:
 * ETCD_LOCK_KEY, the holder's key, and ETCD_LOCK_REV, its create
 * revision, as `etcdctl lock NAME -- command` sets them; Redis: none).
 * *out is a NULL-terminated array of "NAME=VALUE" strings, or NULL when
 * there are none (or the thread holds nothing); free it with
 * dlock_env_free(). No round trip: the client's own record of the hold.
 * Any thread. */
DLOCK_EXTERN int dlock_lock_hold_env(dlock_lock_t *lock, uint64_t thread_id,
                                     char ***out);
DLOCK_EXTERN void dlock_env_free(char **env);

/* -------------------------------------------------------------- semaphore */

/* A counting semaphore without owners (Redisson RSemaphore layout): the
 * key holds the number of available permits. Any thread may release what
 * another acquired, and nothing comes back by itself if a holder crashes;
 * use the permit semaphore below for that. */
typedef struct dlock_semaphore dlock_semaphore_t;

DLOCK_EXTERN int dlock_semaphore_new(dlock_client_t *client, const char *name,
                                     dlock_semaphore_t **out);
DLOCK_EXTERN void dlock_semaphore_free(dlock_semaphore_t *sem);
DLOCK_EXTERN const char *dlock_semaphore_name(const dlock_semaphore_t *sem);
/* Creates the semaphore with `permits` (>= 0) if it does not exist yet;
 * *set (may be NULL) tells whether this call created it. */
DLOCK_EXTERN int dlock_semaphore_try_set_permits(dlock_semaphore_t *sem,
                                                 int64_t permits, bool *set);
/* Adds n permits (n < 0 removes them; the count may go negative). */
DLOCK_EXTERN int dlock_semaphore_add_permits(dlock_semaphore_t *sem, int64_t n);
/* Takes `permits` (>= 1) permits; wait_ms as for locks (DLOCK_EBUSY,
 * DLOCK_ETIMEDOUT). A semaphore that does not exist has no permits. */
DLOCK_EXTERN int dlock_semaphore_acquire(dlock_semaphore_t *sem,
                                         int64_t permits, int64_t wait_ms);
/* Gives back `permits` (>= 1) permits and wakes waiters. */
DLOCK_EXTERN int dlock_semaphore_release(dlock_semaphore_t *sem,
                                         int64_t permits);
/* Permits available now (0 when the semaphore does not exist). */
DLOCK_EXTERN int dlock_semaphore_available(dlock_semaphore_t *sem,
                                           int64_t *out);
/* Deletes the semaphore; *existed (may be NULL) tells if there was one. */
DLOCK_EXTERN int dlock_semaphore_delete(dlock_semaphore_t *sem, bool *existed);

/* --------------------------------------------------- permit semaphore */

/* A semaphore whose permits are leased (Redisson
 * RPermitExpirableSemaphore layout): each acquired permit has an id and an
 * expiry, and a permit whose holder crashed comes back when its lease runs
 * out. With DLOCK_LEASE_WATCHDOG the client renews the permit until it is
 * released, so only a crashed (or cut off) holder's permit expires. */
typedef struct dlock_permit_sem dlock_permit_sem_t;

/* A permit id: 32 lowercase hex digits (16 random bytes) and a NUL, the
 * text Redisson's RPermitExpirableSemaphore gives and takes for a permit
 * (on Redis both store the 16 bytes themselves, docs/LAYOUT.md), so an id
 * passes between a C and a Java process as this text: either side may
 * release the other's permit by it. */
#define DLOCK_PERMIT_ID_LEN 32

DLOCK_EXTERN int dlock_permit_sem_new(dlock_client_t *client, const char *name,
                                      dlock_permit_sem_t **out);
DLOCK_EXTERN void dlock_permit_sem_free(dlock_permit_sem_t *sem);
DLOCK_EXTERN const char *dlock_permit_sem_name(const dlock_permit_sem_t *sem);
DLOCK_EXTERN int dlock_permit_sem_try_set_permits(dlock_permit_sem_t *sem,
                                                  int64_t permits, bool *set);
DLOCK_EXTERN int dlock_permit_sem_add_permits(dlock_permit_sem_t *sem,
                                              int64_t n);
/* Takes one permit for lease_ms (> 0, or DLOCK_LEASE_WATCHDOG) and writes
 * its id to id[DLOCK_PERMIT_ID_LEN + 1]. Waiting wakes on releases and on
 * the earliest expiry among the permits in use. */
DLOCK_EXTERN int dlock_permit_sem_acquire(dlock_permit_sem_t *sem,
                                          int64_t wait_ms, int64_t lease_ms,
                                          char *id);
/* Gives back the permit `id`. DLOCK_ELOST when this client acquired it but
 * it expired (or was reclaimed) before the release; DLOCK_ENOTOWNER when
 * the id is unknown; DLOCK_EINVAL when `id` is not 32 lowercase hex
 * digits. Any client may release an id it was given (ids are not tied to
 * a thread or a client). */
DLOCK_EXTERN int dlock_permit_sem_release(dlock_permit_sem_t *sem,
                                          const char *id);
/* Whether the permit `id`, which this client acquired, is still good by
 * the client's own clock, with no round trip: as dlock_lock_hold_valid
 * for a lock (a renewed permit: its lease confirmed within the lease,
 * timed from before the request was sent; a fixed lease: from its
 * acquire; ZooKeeper: the client's session). 0 with *valid_ms > 0;
 * DLOCK_ELOST when it lapsed (*valid_ms <= 0: that long ago) or was lost
 * otherwise (*valid_ms > 0); DLOCK_ENOTOWNER when this client holds no
 * such permit; DLOCK_EINVAL for a malformed id. For acting on a permit
 * that may have aged (a process stopped between the grant and its use).
 * Thread-safe. */
DLOCK_EXTERN int dlock_permit_sem_permit_valid(dlock_permit_sem_t *sem,
                                               const char *id,
                                               int64_t *valid_ms);
/* Permits available now, counting expired ones as available. */
DLOCK_EXTERN int dlock_permit_sem_available(dlock_permit_sem_t *sem,
                                            int64_t *out);

/* Deletes the semaphore and its permits in use (their holders' releases
 * then report DLOCK_ELOST); *existed (may be NULL) tells if there was one. */
DLOCK_EXTERN int dlock_permit_sem_delete(dlock_permit_sem_t *sem,
                                         bool *existed);

typedef struct dlock_permit {
  const char *id;
  int64_t expires_in_ms; /* -1: never */
} dlock_permit_t;

typedef struct dlock_sem_state {
  const char *name;
  int64_t available; /* permits free now (expired ones included) */
  size_t npermits;   /* permits listed below (at most 100 of those in use) */
  dlock_permit_t *permits;
  int64_t in_use; /* permits in use in all (exact; >= npermits) */
  /* Waiters the server shows, not counted in in_use: on ZooKeeper the lease
   * nodes beyond the permits (a Curator InterProcessSemaphoreV2 waiter keeps
   * its node while it waits); 0 on Redis, whose waiters leave no key. */
  int64_t waiting;
  /* For each of permits[0..npermits): the holder info its client recorded
   * (dlock_options_set_holder_info), or NULL (none recorded, e.g. a
   * Redisson or Curator holder). */
  const char **permit_infos;
} dlock_sem_state_t;

DLOCK_EXTERN int dlock_permit_sem_state(dlock_permit_sem_t *sem,
                                        dlock_sem_state_t **out);
DLOCK_EXTERN void dlock_sem_state_free(dlock_sem_state_t *state);

/* ------------------------------------------------------ count-down latch */

/* A count-down latch (Redisson RCountDownLatch layout): waiters are released
 * when the count reaches zero. A latch that does not exist counts as zero. */
typedef struct dlock_latch dlock_latch_t;

DLOCK_EXTERN int dlock_latch_new(dlock_client_t *client, const char *name,
                                 dlock_latch_t **out);
DLOCK_EXTERN void dlock_latch_free(dlock_latch_t *latch);
DLOCK_EXTERN const char *dlock_latch_name(const dlock_latch_t *latch);
/* Sets the count (>= 1) if the latch does not exist (or reached zero);
 * *set (may be NULL) tells whether this call set it. */
DLOCK_EXTERN int dlock_latch_try_set_count(dlock_latch_t *latch, int64_t count,
                                           bool *set);
/* Counts down by one; at zero the latch is deleted and every waiter is
 * released. Counting down a latch at zero does nothing. */
DLOCK_EXTERN int dlock_latch_count_down(dlock_latch_t *latch);
DLOCK_EXTERN int dlock_latch_count(dlock_latch_t *latch, int64_t *out);
/* Waits until the count is zero: 0 then, DLOCK_ETIMEDOUT (or DLOCK_EBUSY
 * with wait_ms 0) when it is not by the deadline. */
DLOCK_EXTERN int dlock_latch_await(dlock_latch_t *latch, int64_t wait_ms);
/* Deletes the latch (which then counts as zero, so its waiters are
 * released); *existed (may be NULL) tells if there was one. */
DLOCK_EXTERN int dlock_latch_delete(dlock_latch_t *latch, bool *existed);

/* ------------------------------------------------------------- async API */

/* For programs built on an event loop (libuv, libevent, their own epoll):
 * start an operation, go on, and have a callback told its outcome, with
 * no thread parked per waiter.
 *
 * An async call checks its arguments, starts the operation and returns 0
 * at once; its `done` callback then runs exactly once, with the outcome
 * the blocking call would have returned (0 or a DLOCK_E* code;
 * dlock_last_error() holds its detail during the callback) and a value (a
 * fenced lock's token, else 0). A call that returns an error starts
 * nothing, and its callback never runs.
 *
 * Where callbacks run: only inside dlock_client_process(), on the thread
 * that calls it, with no library mutex held, so a callback may call any
 * dlock function of its client (another async call, a release, a blocking
 * call), but not dlock_client_free() or dlock_lock_free(). The client's
 * descriptor (dlock_client_fd) is readable while callbacks are waiting to
 * run: watch it in the program's loop and call dlock_client_process()
 * when it is (include/dlock/adapters/libuv.h and libevent.h do that).
 *
 * How it runs: a waiting operation is a record, not a thread. It sleeps
 * until the backend's wake-up path, a hand-off, its timer or a cancel
 * moves it; the round trips themselves (an attempt, a release) run on a
 * small pool of the client's threads (dlock_options_set_async_threads),
 * the same steps as the blocking calls take. Where the backend can send
 * the whole operation without blocking (Redis: a try, a wait's first
 * attempt and a release of a reentrant or fenced lock), the call itself
 * puts it on the wire, and the client's event loop reads the answer: no
 * pool thread takes part (docs/ASYNC.md).
 *
 * Owners: each async acquire names its owner's thread id, as the _as
 * calls do (0: the calling thread's, dlock_thread_id()). Acquires with the
 * same id re-enter each other's hold, as one thread's do; give concurrent
 * operations of one loop thread distinct ids to have them exclude each
 * other (any number other than the program's dlock_thread_id() values).
 *
 * dlock_client_free() ends every operation still pending with
 * DLOCK_ECLOSED and runs their callbacks (and those already waiting) on
 * the freeing thread before it returns. A lock handle must stay live
 * while an operation on it is pending. */

/* An operation in flight, for dlock_op_cancel. Never 0. */
typedef uint64_t dlock_op_t;

/* An async operation's outcome: rc 0 or DLOCK_E*, value a fenced lock's
 * token (else 0). */
typedef void (*dlock_done_fn)(void *userdata, int rc, int64_t value);

/* dlock_lock_acquire_as (or _fenced_as, on a DLOCK_FENCED handle: the
 * token is the callback's value) without blocking; any lock kind. *op
 * (may be NULL) gets the operation's id. Errors (nothing started): as
 * dlock_lock_acquire for the arguments, DLOCK_EINVAL for a NULL done,
 * DLOCK_ECLOSED, DLOCK_ENOMEM, DLOCK_ESYS (no thread could be started). */
DLOCK_EXTERN int dlock_lock_acquire_async(dlock_lock_t *lock,
                                          uint64_t thread_id, int64_t wait_ms,
                                          int64_t lease_ms, dlock_done_fn done,
                                          void *userdata, dlock_op_t *op);
/* dlock_lock_release_as without blocking (thread_id 0: the calling
 * thread's). */
DLOCK_EXTERN int dlock_lock_release_async(dlock_lock_t *lock,
                                          uint64_t thread_id,
                                          dlock_done_fn done, void *userdata,
                                          dlock_op_t *op);
/* dlock_semaphore_acquire and _release without blocking. A semaphore has
 * no owner: any operation may release what another acquired. */
DLOCK_EXTERN int dlock_semaphore_acquire_async(dlock_semaphore_t *sem,
                                               int64_t permits, int64_t wait_ms,
                                               dlock_done_fn done,
                                               void *userdata, dlock_op_t *op);
DLOCK_EXTERN int dlock_semaphore_release_async(dlock_semaphore_t *sem,
                                               int64_t permits,
                                               dlock_done_fn done,
                                               void *userdata, dlock_op_t *op);
/* A permit semaphore's acquire outcome: rc 0 and the permit's id (valid
 * during the callback only: copy it to release the permit later), or a
 * DLOCK_E* code and NULL. */
typedef void (*dlock_permit_done_fn)(void *userdata, int rc,
                                     const char *permit_id);
/* dlock_permit_sem_acquire and _release without blocking (the id a
 * release names is copied by the call). */
DLOCK_EXTERN int dlock_permit_sem_acquire_async(dlock_permit_sem_t *sem,
                                                int64_t wait_ms,
                                                int64_t lease_ms,
                                                dlock_permit_done_fn done,
                                                void *userdata, dlock_op_t *op);
DLOCK_EXTERN int dlock_permit_sem_release_async(dlock_permit_sem_t *sem,
                                                const char *permit_id,
                                                dlock_done_fn done,
                                                void *userdata, dlock_op_t *op);
/* dlock_latch_await and _count_down without blocking. */
DLOCK_EXTERN int dlock_latch_await_async(dlock_latch_t *latch, int64_t wait_ms,
                                         dlock_done_fn done, void *userdata,
                                         dlock_op_t *op);
DLOCK_EXTERN int dlock_latch_count_down_async(dlock_latch_t *latch,
                                              dlock_done_fn done,
                                              void *userdata, dlock_op_t *op);
/* dlock_multilock_acquire_as and _release_as without blocking (thread_id
 * 0: the calling thread's). The operation runs on the async threads of
 * the first member's client; a member's wait is that member's own async
 * acquire. A cancel passes on to the member being waited for; a member
 * granted all the same is released again before the callback runs with
 * DLOCK_ECANCELED. Calls on one multilock must not overlap (an async one
 * counts until its callback has run). */
DLOCK_EXTERN int dlock_multilock_acquire_async(
    dlock_multilock_t *m, uint64_t thread_id, int64_t wait_ms, int64_t lease_ms,
    dlock_done_fn done, void *userdata, dlock_op_t *op);
DLOCK_EXTERN int dlock_multilock_release_async(dlock_multilock_t *m,
                                               uint64_t thread_id,
                                               dlock_done_fn done,
                                               void *userdata, dlock_op_t *op);
/* Asks operation `op` to end. 0 when it is still pending: its callback
 * runs once, with DLOCK_ECANCELED if the cancel ended it, or with its own
 * outcome if it finished first (an acquire whose attempt was already on
 * the wire may still succeed: the lock is then held and is to be
 * released). A waiting acquire leaves the server's queue before its
 * callback runs. DLOCK_EINVAL when no operation `op` is pending (its
 * callback has run or is being run by dlock_client_process, or it never
 * existed). Any thread. */
DLOCK_EXTERN int dlock_op_cancel(dlock_client_t *client, dlock_op_t op);
/* The client's completion descriptor in *fd: readable while callbacks are
 * waiting to run (level-triggered: it stays readable until
 * dlock_client_process runs them). Owned by the client; do not read or
 * close it. The same descriptor for the client's whole life. */
DLOCK_EXTERN int dlock_client_fd(dlock_client_t *client, int *fd);
/* Runs the callbacks of the operations that have completed, in the order
 * they completed, on the calling thread; returns how many ran (0 when
 * none was waiting), or an error. Never blocks on the network.
 * Operations that complete while it runs (those its callbacks started,
 * say) have their callbacks run by the same call, for up to 16 rounds;
 * what is left keeps the descriptor readable for the next call. */
DLOCK_EXTERN int dlock_client_process(dlock_client_t *client);
/* The number of operations started and whose callback has not run yet. */
DLOCK_EXTERN size_t dlock_client_pending(dlock_client_t *client);

#ifdef __cplusplus
}
#endif
#endif /* DLOCK_DLOCK_H */
