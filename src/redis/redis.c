/*
 * redis.c - the Redis backend: connection pool, handshake, running scripts,
 * and the operations table. The lock operations are in locks.c, those of
 * semaphores and latches in sync.c, waits and pub/sub in channels.c.
 *
 * Connections: caller threads borrow a connection from a small idle pool
 * (pool_mu guards only the idle array, never I/O) and return it after one
 * round trip; when the pool is empty a new connection is dialled, and extra
 * ones are closed on return, so callers never wait for each other. An idle
 * connection whose peer has closed it (server restarted) is discarded
 * before use, so a restart costs one reconnect, not a failed call.
 *
 * Sentinel (redis-sentinel://, sentinel.c): the address dialled is the
 * master the sentinels name; each dial checks ROLE and rides through a
 * failover within its connect timeout; connections carry the master's
 * generation and those of an older one are closed, not reused; a script
 * refused READONLY (a demoted master) is sent once more; a dial or request
 * still waiting for a master that the sentinels no longer name ends at
 * once (master_watch: a stopped master would hold it to its deadline; a
 * Cluster's masters have the same watch, through cluster.c's hook),
 * and a request made before a failover waits for the new master's
 * replicas as far as they are known, not the old master's (WAIT).
 *
 * TLS (rediss:// or the options' switch): one OpenSSL context per client
 * (net/tls.c), built at open so a bad CA or certificate file is reported
 * there; every connection, the pub/sub one included, is a TLS conn made
 * from it by dlock__redis_dial.
 *
 * Replicas: a script that writes is followed, in the same pipeline, by
 * WAIT <connected replicas> <replica_wait_ms> when replicas are connected;
 * the count comes from ROLE, piggybacked on a script's pipeline at most
 * once a second (so the WAIT of one call uses the count of an earlier
 * one). None acknowledged: the call fails (dlock__redis_script) or the
 * caller rolls its acquire back (dlock__redis_script_synced). A server
 * that refuses WAIT (a proxy, a managed service, ACL) is never asked again;
 * one that refuses ROLE counts as having no replicas.
 *
 * Scripts go by EVALSHA; on NOSCRIPT (restarted or failed-over server) the
 * same connection resends them as EVAL, which also loads them again.
 *
 * Retrying: a script is re-sent here (once, on a fresh connection, when
 * the first connection broke) only when re-sending is harmless: queue
 * leaves and state reads (callers pass retry_safe). Acquire is never
 * re-sent (a second HINCRBY would count a hold twice), nor is a force
 * release (a second DEL could delete the lock of an owner who took it
 * meanwhile); release is retried by the core with the same request id
 * (see lock.c).
 */
#include "redis/redis.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/fmt.h"
#include "core/id.h"
#include "redis/options.h"


/* ------------------------------------------------------------ utilities */

char *dlock__redis_prefixed(const char *prefix, const char *name) {
  if (strchr(name, '{'))
    return dlock__concat(3, (const char *[]){prefix, ":", name});
  return dlock__concat(4, (const char *[]){prefix, ":{", name, "}"});
}

/* Redisson's rule above maps "x" and "{x}" to the same string: harmless for
 * its channel (a spurious wake-up), fatal for a hand-off queue. dlock's own
 * keys and channels keep the slot but separate the two families: a name
 * with a '{' gets "prefix:=name" (its own hash tag decides the slot), one
 * without gets "prefix:{name}"; the character after the colon tells them
 * apart, so the mapping is one-to-one. */
char *dlock__redis_suffixed(const char *name, const char *suffix) {
  if (strchr(name, '{'))
    return dlock__concat(3, (const char *[]){name, ":", suffix});
  return dlock__concat(4, (const char *[]){"{", name, "}:", suffix});
}

char *dlock__redis_own_key(const char *prefix, const char *name) {
  if (strchr(name, '{'))
    return dlock__concat(3, (const char *[]){prefix, ":=", name});
  return dlock__concat(4, (const char *[]){prefix, ":{", name, "}"});
}

static bool starts_with(const redisReply *r, const char *p) {
  size_t n = strlen(p);
  return r->len >= n && memcmp(r->str, p, n) == 0;
}

/* The calling thread's last redirection (dlock__redis_redirect_take). */
static _Thread_local dlock__redis_redirect tl_redirect;
/* Set by the cluster for the calling thread's next request (ASK). */
static _Thread_local bool tl_asking;

void dlock__redis_redirect_take(dlock__redis_redirect *out) {
  *out = tl_redirect;
  tl_redirect.kind = DLOCK__RD_NONE;
}

void dlock__redis_set_asking(bool asking) { tl_asking = asking; }

/* "MOVED <slot> <host>:<port>" / "ASK ...": noted for the cluster. */
static bool note_redirect(const redisReply *reply) {
  bool moved = starts_with(reply, "MOVED "), ask = starts_with(reply, "ASK ");
  if (!moved && !ask) {
    if (starts_with(reply, "TRYAGAIN"))
      tl_redirect.kind = DLOCK__RD_TRYAGAIN;
    return false;
  }
  char buf[300];
  snprintf(buf, sizeof buf, "%.*s", reply->len > 299 ? 299 : (int)reply->len,
           reply->str);
  unsigned slot = 0;
  char addr[sizeof tl_redirect.addr];
  if (sscanf(buf + (moved ? 6 : 4), "%u %271s", &slot, addr) != 2 ||
      slot >= 16384)
    return false;
  tl_redirect.kind = moved ? DLOCK__RD_MOVED : DLOCK__RD_ASK;
  tl_redirect.slot = slot;
  memcpy(tl_redirect.addr, addr, sizeof addr);
  return true;
}

int dlock__redis_error(const redisReply *reply, const char *what) {
  const char *msg = reply->str ? reply->str : "";
  int n = reply->len > 300 ? 300 : (int)reply->len;
  int code = DLOCK_ESERVER;
  if (note_redirect(reply))
    return dlock__seterr(code, "%s: %.*s (a Redis Cluster node: use a "
                               "redis-cluster:// URL)",
                         what, n, msg);
  if (strstr(msg, "WRONGTYPE"))
    code = DLOCK_EWRONGTYPE;
  else if (starts_with(reply, "NOAUTH") || starts_with(reply, "WRONGPASS") ||
           starts_with(reply, "NOPERM") ||
           starts_with(reply, "ERR invalid password") ||
           starts_with(reply, "ERR AUTH") ||
           starts_with(reply, "ERR Client sent AUTH"))
    code = DLOCK_EAUTH;
  else if (starts_with(reply, "LOADING") || starts_with(reply, "BUSY") ||
           starts_with(reply, "MASTERDOWN") ||
           starts_with(reply, "CLUSTERDOWN") || starts_with(reply, "TRYAGAIN"))
    code = DLOCK_EUNAVAILABLE;
  return dlock__seterr(code, "%s: %.*s", what, n, msg);
}

/* Formats one command from a NULL-free argv of C strings. */
int dlock__redis_append_cmd(dlock__conn *c, int argc, const char **argv) {
  size_t lens[DLOCK__REDIS_MAX_ARGS * 2];
  if (argc > (int)(sizeof lens / sizeof lens[0]))
    return dlock__seterr(DLOCK_EINVAL, "too many arguments");
  for (int i = 0; i < argc; i++)
    lens[i] = strlen(argv[i]);
  return dlock__conn_append(c, argc, argv, lens);
}

/* ------------------------------------------------- a master that is slow */

/* Sentinel or a Cluster's master: a wait for the master's answer (a
 * dial's connect and handshake, a request's reply) checks every
 * MASTER_CHECK_MS whether the service names another master now (the
 * sentinels another address; the cluster's map none of this node's slots),
 * and ends at once when it does (a stopped master's kernel still accepts
 * connections and requests, which would otherwise wait out their whole
 * timeout). Once it has waited MASTER_SLOW_MS, the waiter asks the service
 * itself (at most every 500 ms in the client:
 * dlock__redis_sentinel_recheck, cluster.c's hook), so a client that only
 * holds locks, whose event loop does not check, learns of the failover
 * too. The service's own answers are read with no such check (tl_checking:
 * asking a cluster's other masters must not ask again). */
#define MASTER_CHECK_MS 100
#define MASTER_SLOW_MS 500

static _Thread_local bool tl_checking;

bool dlock__redis_master_left(dlock__redis *r, uint32_t gen, bool ask,
                              int64_t deadline) {
  if (tl_checking)
    return false;
  tl_checking = true;
  bool left = false;
  if (r->sentinel) {
    if (ask && atomic_load(&r->master_gen) == gen)
      dlock__redis_sentinel_recheck(r, deadline);
    left = atomic_load(&r->master_gen) != gen;
  } else if (r->left) {
    left = r->left(r->left_ud, r, ask, deadline);
  }
  tl_checking = false;
  return left;
}

typedef struct master_watch {
  dlock__redis *r;
  uint32_t gen; /* the master generation the conn was dialled at */
  int64_t slow_at, deadline;
  char peer[300];
} master_watch;

static int master_check(void *ud) {
  master_watch *x = ud;
  dlock__redis *r = x->r;
  if (!dlock__redis_master_left(r, x->gen, dlock__now_ms() >= x->slow_at,
                                x->deadline))
    return 0;
  if (!r->sentinel)
    return dlock__seterr(DLOCK_EUNAVAILABLE,
                         "%s: no answer, and the cluster serves its slots "
                         "elsewhere now",
                         r->ep->display);
  return dlock__seterr(DLOCK_EUNAVAILABLE,
                       "%s: no answer from %s, and the sentinels name "
                       "another master now",
                       dlock__redis_sentinel_display(r->sentinel), x->peer);
}

/* Starts watching (Sentinel, a Cluster's master); returns the watch to put
 * back. */
static dlock__conn_watch master_watch_begin(dlock__redis *r, master_watch *x,
                                            uint32_t gen, int64_t deadline,
                                            const char *peer) {
  if ((!r->sentinel && !r->left) || tl_checking)
    return dlock__conn_watch_set((dlock__conn_watch){0});
  x->r = r;
  x->gen = gen;
  x->slow_at = dlock__now_ms() + MASTER_SLOW_MS;
  x->deadline = deadline;
  snprintf(x->peer, sizeof x->peer, "%s", peer);
  return dlock__conn_watch_set((dlock__conn_watch){
      .check = master_check, .ud = x, .every_ms = MASTER_CHECK_MS});
}

int dlock__redis_exec(dlock__redis *r, dlock__conn *c, int64_t deadline,
                      size_t n, redisReply **rep) {
  master_watch x;
  dlock__conn_watch prev =
      master_watch_begin(r, &x, dlock__conn_tag(c), deadline, "the master");
  int rc = dlock__conn_exec(c, deadline, n, rep);
  dlock__conn_watch_set(prev);
  return rc;
}

/* ----------------------------------------------------------- handshake */

/* Connects to ep and runs the handshake before deadline; `role`: also
 * asks ROLE and refuses a server that is not a master. */
static int dial_at(dlock__redis *r, const dlock__endpoint *ep, bool select_db,
                   bool role, int64_t deadline, dlock__conn **out) {
  dlock__conn *c = NULL;
  int rc = dlock__conn_connect_tls(&c, ep, r->tls, deadline);
  if (rc)
    return rc;
  size_t n = 0;
  const char *what[4];
  char db[16];
  if (r->password) {
    const char *a[3] = {"AUTH", r->user ? r->user : r->password, r->password};
    rc = dlock__redis_append_cmd(c, r->user ? 3 : 2, a);
    what[n++] = "AUTH";
  }
  if (!rc && select_db && r->db != 0) {
    snprintf(db, sizeof db, "%d", r->db);
    const char *a[2] = {"SELECT", db};
    rc = dlock__redis_append_cmd(c, 2, a);
    what[n++] = "SELECT";
  }
  if (!rc && r->client_name) {
    const char *a[3] = {"CLIENT", "SETNAME", r->client_name};
    rc = dlock__redis_append_cmd(c, 3, a);
    what[n++] = "CLIENT SETNAME";
  }
  if (!rc && role) {
    const char *a[1] = {"ROLE"};
    rc = dlock__redis_append_cmd(c, 1, a);
    what[n++] = "ROLE";
  }
  if (!rc && n > 0) {
    redisReply *rep[4] = {NULL, NULL, NULL, NULL};
    rc = dlock__conn_exec(c, deadline, n, rep);
    for (size_t i = 0; i < n && rep[0]; i++) {
      if (!rc && rep[i]->type == REDIS_REPLY_ERROR) {
        char ctx[400];
        snprintf(ctx, sizeof ctx, "%s: %s refused", ep->display, what[i]);
        rc = dlock__redis_error(rep[i], ctx);
        if (i == 0 && r->password)
          rc = DLOCK_EAUTH;
      } else if (!rc && role && i == n - 1 &&
                 (rep[i]->type != REDIS_REPLY_ARRAY || rep[i]->elements < 1 ||
                  rep[i]->element[0]->type != REDIS_REPLY_STRING ||
                  strcmp(rep[i]->element[0]->str, "master") != 0)) {
        rc = dlock__seterr(DLOCK_EUNAVAILABLE, "%s:%d is not a master (%s)",
                           ep->host, ep->port,
                           rep[i]->type == REDIS_REPLY_ARRAY &&
                                   rep[i]->elements > 0 &&
                                   rep[i]->element[0]->type ==
                                       REDIS_REPLY_STRING
                               ? rep[i]->element[0]->str
                               : "ROLE answered otherwise");
      }
      freeReplyObject(rep[i]);
    }
  }
  if (rc) {
    dlock__scrub_error(r->password); /* servers may echo AUTH's arguments */
    dlock__conn_close(c);
    return rc;
  }
  *out = c;
  return 0;
}

int dlock__redis_dial(dlock__redis *r, bool select_db, int64_t until,
                      dlock__conn **out) {
  *out = NULL;
  int64_t deadline = dlock__deadline_after(r->connect_timeout_ms);
  if (until < deadline)
    deadline = until;
  if (!r->sentinel) {
    master_watch x;
    dlock__conn_watch prev = master_watch_begin(r, &x, 0, deadline, "");
    int rc = dial_at(r, r->ep, select_db, false, deadline, out);
    dlock__conn_watch_set(prev);
    return rc;
  }
  /* through the sentinels: the master they name, checked by ROLE; during
   * a failover, ask them again until the deadline */
  char why[400] = "";
  bool failed = false; /* a dial of this call failed: a failover is on */
  for (;;) {
    dlock__endpoint ep;
    char host[256];
    uint32_t gen = 0;
    int rc = dlock__redis_sentinel_master(r, &ep, host, sizeof host, &gen);
    if (!rc) {
      char peer[300];
      snprintf(peer, sizeof peer, "%s:%d", host, ep.port);
      master_watch x;
      dlock__conn_watch prev = master_watch_begin(r, &x, gen, deadline, peer);
      rc = dial_at(r, &ep, select_db, true, deadline, out);
      dlock__conn_watch_set(prev);
      /* after a failed dial, the one that answered as a master is checked
       * with the sentinels: an old master restarted (a master until the
       * sentinels demote it) may be where the client's last answer
       * pointed, though the sentinels name another master now */
      if (!rc && failed && !dlock__redis_sentinel_resolve(r, deadline) &&
          atomic_load(&r->master_gen) != gen) {
        dlock__conn_close(*out);
        *out = NULL;
        rc = dlock__seterr(DLOCK_EUNAVAILABLE,
                           "%s answered as a master, but the sentinels name "
                           "another one",
                           peer);
      }
      if (!rc) {
        dlock__conn_set_tag(*out, gen);
        return 0;
      }
      if (rc == DLOCK_EAUTH || rc == DLOCK_ETLS || rc == DLOCK_ENOMEM)
        return rc;
      failed = true;
      snprintf(why, sizeof why, "%s", dlock_last_error());
    }
    if (dlock__now_ms() >= deadline)
      return dlock__seterr(rc ? rc : DLOCK_EIOTIMEOUT,
                           "%s: no master within the connect timeout (%s)",
                           dlock__redis_sentinel_display(r->sentinel), why);
    int src = dlock__redis_sentinel_resolve(r, deadline);
    if (src == DLOCK_EAUTH || src == DLOCK_ETLS || src == DLOCK_ENOMEM ||
        src == DLOCK_EURL)
      return src;
    if (src) /* the sentinels' reason says more than the dial's */
      snprintf(why, sizeof why, "%s", dlock_last_error());
    if (atomic_load(&r->master_gen) == gen) {
      /* the sentinels still name the same one (they have not failed over
       * yet): a pause, then again */
      int64_t nap = deadline - dlock__now_ms();
      dlock__sleep_ms(nap > 100 ? 100 : nap > 0 ? nap : 0);
    }
  }
}

/* ---------------------------------------------------------------- pool */

int dlock__redis_pool_get_until(dlock__redis *r, int64_t until, dlock__conn **out) {
  dlock__conn *c = dlock__redis_pool_take_idle(r);
  if (!c)
    return dlock__redis_dial(r, true, until, out);
  *out = c;
  return 0;
}

/* The last idle connection, or NULL. */
static dlock__conn *pool_pop(dlock__redis *r) {
  dlock__conn *c = NULL;
  pthread_mutex_lock(&r->pool_mu);
  if (r->nidle > 0)
    c = r->idle[--r->nidle];
  pthread_mutex_unlock(&r->pool_mu);
  return c;
}

dlock__conn *dlock__redis_pool_take_idle(dlock__redis *r) {
  for (;;) {
    dlock__conn *c = pool_pop(r);
    if (!c || (!dlock__redis_conn_stale(r, c) && !dlock__conn_peer_closed(c)))
      return c;
    dlock__conn_close(c); /* closed by the server, or to an old master */
  }
}

static int pool_get(dlock__redis *r, dlock__conn **out) {
  return dlock__redis_pool_get_until(r, DLOCK__NEVER, out);
}

void dlock__redis_pool_put(dlock__redis *r, dlock__conn *c) {
  if (!c)
    return;
  if (dlock__conn_broken(c) || dlock__redis_conn_stale(r, c)) {
    dlock__conn_close(c);
    return;
  }
  pthread_mutex_lock(&r->pool_mu);
  if (r->nidle < r->pool_size) {
    r->idle[r->nidle++] = c;
    c = NULL;
  }
  pthread_mutex_unlock(&r->pool_mu);
  dlock__conn_close(c);
}

/* Closes every idle pooled connection. */
static void pool_flush(dlock__redis *r) {
  dlock__conn *c;
  while ((c = pool_pop(r)) != NULL)
    dlock__conn_close(c);
}

bool dlock__redis_is_readonly(const redisReply *rep) {
  return rep && rep->type == REDIS_REPLY_ERROR && starts_with(rep, "READONLY");
}

bool dlock__redis_saw_replies(dlock__redis *r, dlock__conn *c,
                              redisReply **rep, size_t n) {
  if (!r->sentinel)
    return false;
  for (size_t i = 0; i < n; i++) {
    if (!dlock__redis_is_readonly(rep[i]))
      continue;
    /* the server was demoted: nothing of it is reused, and the sentinels
     * are asked now (a dial asks them again until the new master is up) */
    if (c)
      dlock__conn_set_broken(c);
    else if (r->mux)
      dlock__redis_mux_end(r->mux);
    pool_flush(r);
    dlock__redis_sentinel_resolve(r,
                                  dlock__deadline_after(r->connect_timeout_ms));
    return true;
  }
  return false;
}

/* Runs one request of `want` replies, written by `append`: on a pooled
 * connection, or on the shared pipelined one when pool_size requests hold
 * pooled connections already (rather than dial one more) and the request
 * may share it (`may_share`: nothing that holds a connection on the
 * server, such as WAIT). On failure no reply is returned; `*broke`: the
 * connection broke, so a resend goes on a fresh one. */
static int request(dlock__redis *r, bool may_share,
                   int (*append)(dlock__conn *c, void *arg), void *arg,
                   size_t want, int64_t budget_ms, redisReply **rep,
                   bool *broke) {
  /* ASK (cluster): ASKING, then the request, on one connection of our
   * own; ASKING's reply is dropped */
  bool asking = tl_asking;
  tl_asking = false;
  bool counted = r->mux && may_share && !asking;
  if (counted && atomic_fetch_add(&r->pooled_busy, 1) >= r->pool_size) {
    atomic_fetch_sub(&r->pooled_busy, 1);
    int rc = dlock__redis_mux_exec(r, r->mux, append, arg, want, budget_ms,
                                   rep);
    *broke = rc < 0;
    if (!rc)
      dlock__redis_saw_replies(r, NULL, rep, want);
    return rc;
  }
  dlock__conn *c = NULL;
  redisReply *all[8];
  if (asking && want + 1 > sizeof all / sizeof all[0])
    asking = false; /* never: requests are at most three commands */
  int rc = pool_get(r, &c);
  if (rc) {
    tl_redirect.kind = DLOCK__RD_UNSENT; /* no connection: nothing sent */
    dlock__err_set_unsent(true);
  }
  if (!rc && asking) {
    const char *a[1] = {"ASKING"};
    rc = dlock__redis_append_cmd(c, 1, a);
  }
  if (!rc)
    rc = append(c, arg);
  if (!rc)
    rc = dlock__redis_exec(r, c, dlock__deadline_after(budget_ms),
                           want + (asking ? 1 : 0), asking ? all : rep);
  if (!rc && asking) {
    freeReplyObject(all[0]);
    memcpy(rep, all + 1, want * sizeof *rep);
  }
  if (!rc)
    dlock__redis_saw_replies(r, c, rep, want);
  *broke = rc && c && dlock__conn_broken(c);
  dlock__redis_pool_put(r, c);
  if (counted)
    atomic_fetch_sub(&r->pooled_busy, 1);
  return rc;
}

typedef struct cmd_req {
  int argc;
  const char **argv;
} cmd_req;

static int cmd_append(dlock__conn *c, void *arg) {
  cmd_req *q = arg;
  return dlock__redis_append_cmd(c, q->argc, q->argv);
}

/* One plain command, in one round trip. */
int dlock__redis_command(dlock__redis *r, int argc, const char **argv,
                   redisReply **reply) {
  cmd_req q = {argc, argv};
  bool broke = false;
  int rc = request(r, true, cmd_append, &q, 1, r->command_timeout_ms, reply,
                   &broke);
  if (!rc && (*reply)->type == REDIS_REPLY_ERROR) {
    rc = dlock__redis_error(*reply, argv[0]);
    freeReplyObject(*reply);
    *reply = NULL;
  }
  return rc;
}

/* Appends EVALSHA (or EVAL when `body`) of script s. argv[0..2] are
 * reserved for the command, the sha/body and numkeys. */
int dlock__redis_append_script(dlock__conn *c, const dlock__script *s, bool body,
                         int nkeys, int argc, const char **argv, size_t *lens) {
  char nk[DLOCK__I64_BUF];
  dlock__fmt_i64(nk, nkeys);
  argv[0] = body ? "EVAL" : "EVALSHA";
  lens[0] = strlen(argv[0]);
  argv[1] = body ? s->body : s->sha;
  lens[1] = body ? s->len : 40;
  argv[2] = nk;
  lens[2] = strlen(nk);
  return dlock__conn_append(c, argc, argv, lens);
}

bool dlock__redis_is_noscript(const redisReply *rep) {
  return rep->type == REDIS_REPLY_ERROR && starts_with(rep, "NOSCRIPT");
}

/* ------------------------------------------------------- replica sync */

/* Scripts that only read: no WAIT after them. */
static bool script_reads_only(const dlock__script *s) {
  return s == &dlock__script_lock_state || s == &dlock__script_psem_state;
}

#define REPLICAS_REFRESH_MS 1000

/* The replica count in a ROLE reply of a master; -1 for anything else (a
 * replica, an error such as NOPERM). */
static int role_replicas(const redisReply *rep) {
  if (rep->type != REDIS_REPLY_ARRAY || rep->elements < 3 ||
      rep->element[0]->type != REDIS_REPLY_STRING ||
      strcmp(rep->element[0]->str, "master") != 0 ||
      rep->element[2]->type != REDIS_REPLY_ARRAY)
    return -1;
  return rep->element[2]->elements > 1000000
             ? 1000000
             : (int)rep->element[2]->elements;
}

/* Records a ROLE answer; a refused ROLE (ACL, a proxy) is not asked
 * again: no replicas are known then. */
static void note_role(dlock__redis *r, const redisReply *rep) {
  atomic_store(&r->replicas, role_replicas(rep));
  atomic_store(&r->replicas_at, rep->type == REDIS_REPLY_ERROR
                                    ? INT64_MAX / 2
                                    : dlock__now_ms());
}

/* Asks ROLE now: the replicas connected to the master (-1: unknown).
 * A call whose WAIT counted the replicas of the master before a failover
 * (the count was taken before its connection found the new master) asks
 * the new master whether it has any to wait for. */
static int replicas_now(dlock__redis *r) {
  redisReply *rep = NULL;
  const char *argv[1] = {"ROLE"};
  char saved[400];
  snprintf(saved, sizeof saved, "%s", dlock_last_error());
  int rc = dlock__redis_command(r, 1, argv, &rep);
  dlock__seterr(0, "%s", saved);
  if (rc)
    return -1;
  note_role(r, rep);
  int n = role_replicas(rep);
  freeReplyObject(rep);
  return n;
}

void dlock__redis_new_master(dlock__redis *r) {
  atomic_store(&r->replicas, 0);
  atomic_store(&r->replicas_at, INT64_MIN / 2);
}

int dlock__redis_unsynced(dlock__redis *r, const char *what, int n) {
  return dlock__seterr(DLOCK_EUNAVAILABLE,
                       "%s: %s: none of the %d connected replica%s "
                       "acknowledged the write within %lld ms (WAIT); "
                       "nothing is held",
                       r->ep->display, what, n, n == 1 ? "" : "s",
                       (long long)r->replica_wait_ms);
}

bool dlock__redis_script_alone(dlock__redis *r) {
  if (r->replica_wait_ms <= 0 || atomic_load(&r->wait_refused))
    return true;
  /* no replica known to wait for, by a ROLE recent enough that the
   * blocking path would not ask it again */
  return atomic_load(&r->replicas) <= 0 &&
         dlock__now_ms() - atomic_load(&r->replicas_at) < REPLICAS_REFRESH_MS;
}

/* One request: [ROLE] EVALSHA|EVAL [WAIT n T]. */
typedef struct script_req {
  dlock__redis *r;
  const dlock__script *s;
  bool body, role;
  int wait_n;    /* WAIT's count (0: no WAIT), as known when q was made */
  int wait_sent; /* the count sent (see script_append) */
  uint32_t gen;  /* the master generation when q was made (Sentinel) */
  int nkeys, argc;
  const char **argv;
  size_t *lens;
} script_req;

static int script_append(dlock__conn *c, void *arg) {
  script_req *q = arg;
  int rc = 0;
  if (q->role) {
    const char *a[1] = {"ROLE"};
    rc = dlock__redis_append_cmd(c, 1, a);
  }
  if (!rc)
    rc = dlock__redis_append_script(c, q->s, q->body, q->nkeys, q->argc,
                                    q->argv, q->lens);
  /* a connection to a master newer than q (dialled by this request, in a
   * failover) waits for the replicas of that master, as far as they are
   * known (none until its first ROLE): the old master's count would make
   * WAIT on the new one, whose replicas are not connected yet, wait out
   * its whole timeout */
  q->wait_sent = q->wait_n;
  if (q->wait_n > 0 && q->r->sentinel && dlock__conn_tag(c) != q->gen) {
    int known = atomic_load(&q->r->replicas);
    q->wait_sent = known > 0 ? known : 0;
  }
  if (!rc && q->wait_n > 0) {
    char wn[DLOCK__I64_BUF], wt[DLOCK__I64_BUF];
    dlock__fmt_i64(wn, q->wait_sent);
    dlock__fmt_i64(wt, q->r->replica_wait_ms);
    const char *a[3] = {"WAIT", wn, wt};
    rc = dlock__redis_append_cmd(c, 3, a);
  }
  return rc;
}

/* Runs q (request(): a request that sends WAIT never shares the
 * pipelined connection, which WAIT would hold up on the server); `*broke`
 * as request's. *reply is the script's; *acked WAIT's answer (-1 when
 * none was sent or it failed). */
static int script_roundtrip(dlock__redis *r, script_req *q, redisReply **reply,
                            int64_t *acked, bool *broke) {
  *acked = -1;
  *broke = false;
  size_t n = (q->role ? 1 : 0) + 1 + (q->wait_n > 0 ? 1 : 0);
  size_t script_at = q->role ? 1 : 0;
  redisReply *rep[3] = {NULL, NULL, NULL};
  int64_t budget =
      r->command_timeout_ms + (q->wait_n > 0 ? r->replica_wait_ms : 0);
  int rc = request(r, q->wait_n == 0, script_append, q, n, budget, rep,
                   broke);
  if (rc)
    return rc;
  if (q->role) {
    note_role(r, rep[0]);
    freeReplyObject(rep[0]);
  }
  *reply = rep[script_at];
  if (q->wait_n > 0) {
    redisReply *w = rep[script_at + 1];
    if (w->type == REDIS_REPLY_INTEGER)
      *acked = w->integer;
    else /* a proxy or managed service without WAIT, or ACL: stop asking */
      atomic_store(&r->wait_refused, true);
    freeReplyObject(w);
  }
  return 0;
}

/* Runs one script; `retry_safe` allows one resend on a fresh connection if
 * the first connection broke (only for idempotent scripts). argv[3..] hold
 * keys then args (C strings); argv[0..2] are filled here. A script that
 * writes is followed by WAIT when replicas are connected (see
 * dlock_options_set_replica_wait). */
int dlock__redis_script_synced(dlock__redis *r, const dlock__script *s,
                               int nkeys, int argc, const char **argv,
                               bool retry_safe, redisReply **reply,
                               int *unsynced) {
  size_t lens[DLOCK__REDIS_MAX_ARGS];
  *unsynced = 0;
  if (argc > DLOCK__REDIS_MAX_ARGS)
    return dlock__seterr(DLOCK_EINVAL, "too many script arguments");
  for (int i = 3; i < argc; i++)
    lens[i] = strlen(argv[i]);
  bool sync = r->replica_wait_ms > 0 && !script_reads_only(s) &&
              !atomic_load(&r->wait_refused);
  int rc = 0;
  int64_t acked = -1;
  uint32_t gen0 = atomic_load(&r->master_gen);
  script_req q = {.r = r, .s = s, .nkeys = nkeys, .argc = argc,
                  .argv = argv, .lens = lens};
  for (int attempt = 0; attempt < 2; attempt++) {
    q.body = false;
    q.role = sync && dlock__now_ms() - atomic_load(&r->replicas_at) >=
                         REPLICAS_REFRESH_MS;
    q.gen = atomic_load(&r->master_gen);
    q.wait_n = sync ? atomic_load(&r->replicas) : 0;
    bool broke = false;
    rc = script_roundtrip(r, &q, reply, &acked, &broke);
    if (!rc && dlock__redis_is_noscript(*reply)) {
      /* the server lost its scripts (restart): the body loads it again */
      freeReplyObject(*reply);
      *reply = NULL;
      q.body = true;
      q.role = false;
      rc = script_roundtrip(r, &q, reply, &acked, &broke);
    }
    /* a demoted master refused the script's first write: nothing of it
     * ran, so it is sent once more, to the master the sentinels name */
    if (!rc && r->sentinel && attempt == 0 &&
        dlock__redis_is_readonly(*reply)) {
      freeReplyObject(*reply);
      *reply = NULL;
      continue;
    }
    if (!rc || !retry_safe || !broke)
      break;
  }
  if (!rc && (*reply)->type == REDIS_REPLY_ERROR) {
    rc = dlock__redis_error(*reply, s->name);
    freeReplyObject(*reply);
    *reply = NULL;
  }
  if (!rc && q.wait_sent > 0 && acked == 0 &&
      !(r->sentinel && atomic_load(&r->master_gen) != gen0 &&
        replicas_now(r) == 0))
    *unsynced = q.wait_sent;
  return rc;
}

int dlock__redis_script(dlock__redis *r, const dlock__script *s, int nkeys,
                        int argc, const char **argv, bool retry_safe,
                        redisReply **reply) {
  int unsynced = 0;
  int rc = dlock__redis_script_synced(r, s, nkeys, argc, argv, retry_safe,
                                      reply, &unsynced);
  if (!rc && unsynced > 0) {
    freeReplyObject(*reply);
    *reply = NULL;
    rc = dlock__redis_unsynced(r, s->name, unsynced);
  }
  return rc;
}

/* ------------------------------------------------ prepared requests */

int dlock__redis_req_set(dlock__redis_req *q, const dlock__script *s,
                         int nkeys, int argc, const char **argv) {
  memset(q, 0, sizeof *q);
  size_t bytes = 0;
  for (int i = 3; i < argc; i++)
    bytes += strlen(argv[i]) + 1;
  size_t head = (size_t)argc * (sizeof *q->argv + sizeof *q->lens);
  char *mem = dlock__calloc(1, head + bytes);
  if (!mem)
    return DLOCK_ENOMEM;
  q->argv = (const char **)(void *)mem;
  q->lens = (size_t *)(void *)(mem + (size_t)argc * sizeof *q->argv);
  char *p = mem + head;
  for (int i = 3; i < argc; i++) {
    size_t n = strlen(argv[i]);
    memcpy(p, argv[i], n + 1);
    q->argv[i] = p;
    q->lens[i] = n;
    p += n + 1;
  }
  q->s = s;
  q->nkeys = nkeys;
  q->argc = argc;
  return 0;
}

int dlock__redis_req_append(dlock__conn *c, dlock__redis_req *q, bool body) {
  if (!q->s) /* a plain command: argv[3..] */
    return dlock__conn_append(c, q->argc - 3, q->argv + 3, q->lens + 3);
  return dlock__redis_append_script(c, q->s, body, q->nkeys, q->argc, q->argv,
                                    q->lens);
}

void dlock__redis_req_clear(dlock__redis_req *q) {
  dlock__free((void *)q->argv);
  memset(q, 0, sizeof *q);
}

int dlock__redis_unexpected(redisReply *rep, const char *what) {
  int rc = dlock__seterr(DLOCK_EPROTO, "%s: unexpected reply type %d", what,
                         rep ? rep->type : -1);
  freeReplyObject(rep);
  return rc;
}

/* ------------------------------------------------------- backend: admin */

static void redis_close(void *be) {
  dlock__redis *r = be;
  if (!r)
    return;
  dlock__redis_channels_free(r); /* and the watch connection */
  dlock__redis_mux_free(r->mux);
  dlock__redis_sentinel_free(r->sentinel);
  for (int i = 0; i < r->nidle; i++)
    dlock__conn_close(r->idle[i]);
  dlock__free(r->idle);
  pthread_mutex_destroy(&r->pool_mu);
  dlock__free(r->user);
  if (r->password) {
    memset(r->password, 0, strlen(r->password));
    dlock__free(r->password);
  }
  dlock__free(r->client_name);
  dlock__free(r->holder_info);
  dlock__free(r->spring_registry);
  dlock__tls_free(r->tls); /* after every conn above */
  dlock__endpoint_clear(&r->ep_parsed);
  dlock__free(r);
}

static int redis_ping(void *be) {
  redisReply *rep = NULL;
  const char *argv[] = {"PING"};
  int rc = dlock__redis_command(be, 1, argv, &rep);
  if (rc)
    return rc;
  if (rep->type != REDIS_REPLY_STATUS)
    return dlock__redis_unexpected(rep, "PING");
  freeReplyObject(rep);
  return 0;
}

/* An ACL user without PUBLISH could lock and release, but no release would
 * wake a waiter (the scripts publish best effort, see lock_release.lua):
 * waits would last until leases ran out. So open fails then, naming the
 * command. PUBLISH to a channel of dlock's reserved family, which no lock
 * uses and nobody hears; a refusal of that channel (not of the command)
 * means the command is allowed. Other errors (a renamed PUBLISH) keep the
 * best-effort behaviour. */
static int probe_publish(dlock__redis *r) {
  const char *argv[] = {r->publish, "dlock_lock_probe", ""};
  redisReply *rep = NULL;
  dlock__conn *c = NULL;
  int rc = dlock__redis_pool_get_until(r, DLOCK__NEVER, &c);
  if (!rc)
    rc = dlock__redis_append_cmd(c, 3, argv);
  if (!rc)
    rc = dlock__redis_exec(r, c, dlock__deadline_after(r->command_timeout_ms),
                           1, &rep);
  dlock__redis_pool_put(r, c);
  if (rc)
    return rc;
  if (rep->type == REDIS_REPLY_ERROR && starts_with(rep, "NOPERM") &&
      !strstr(rep->str, "channel")) {
    int n = rep->len > 200 ? 200 : (int)rep->len;
    rc = dlock__seterr(DLOCK_EAUTH,
                       "%s: PUBLISH refused: %.*s (dlock needs PUBLISH to "
                       "wake waiters; see docs/ACL.md)",
                       r->ep->display, n, rep->str);
  }
  freeReplyObject(rep);
  return rc;
}

/* The first ROLE, so that the first write already waits for replicas. A
 * refusal (NOPERM, a proxy) counts as no replicas, as in the pipeline. */
static void learn_replicas(dlock__redis *r) {
  redisReply *rep = NULL;
  const char *argv[] = {"ROLE"};
  dlock__conn *c = NULL;
  int rc = dlock__redis_pool_get_until(r, DLOCK__NEVER, &c);
  if (!rc)
    rc = dlock__redis_append_cmd(c, 1, argv);
  if (!rc)
    rc = dlock__redis_exec(r, c, dlock__deadline_after(r->command_timeout_ms),
                           1, &rep);
  dlock__redis_pool_put(r, c);
  if (rc)
    return; /* the first write asks again */
  note_role(r, rep);
  freeReplyObject(rep);
}

static int open_backend(void **be, const char *url,
                        const struct dlock_options *o,
                        struct dlock_client *core, bool check, bool spring) {
  *be = NULL;
  dlock__redis *r = dlock__calloc(1, sizeof *r);
  if (!r)
    return DLOCK_ENOMEM;
  pthread_mutex_init(&r->pool_mu, NULL);
  if (dlock__redis_channels_init(r)) {
    redis_close(r);
    return DLOCK_ENOMEM;
  }
  r->core = core; /* no session: each hold is renewed on its own */
  snprintf(r->client_id, sizeof r->client_id, "%s", dlock_client_id(core));
  const dlock__redis_options *ro = dlock__redis_options_of(o);
  int prc = 0;
  if (dlock__redis_is_sentinel_url(url)) {
    prc = dlock__redis_sentinel_parse(url, ro->sentinel_user,
                                      ro->sentinel_password, &r->sentinel,
                                      &r->ep_parsed);
    if (!prc) { /* messages name the sentinels and the master's name */
      char *d = dlock__strdup(dlock__redis_sentinel_display(r->sentinel));
      if (!d)
        prc = DLOCK_ENOMEM;
      else {
        dlock__free(r->ep_parsed.display);
        r->ep_parsed.display = d;
      }
    }
  } else {
    prc = dlock__redis_url_parse(url, &r->ep_parsed);
  }
  if (!prc) {
    bool asked = false;
    prc = dlock__redis_layout(url, o, &asked,
                              spring ? &r->spring_registry : NULL);
    if (!prc && asked && !spring)
      prc = dlock__seterr(DLOCK_ENOTSUP,
                          "the spring layout is not offered here: a Redlock "
                          "keeps Redisson's layout");
  }
  if (prc) {
    redis_close(r);
    return prc;
  }
  const dlock__endpoint *ep = r->ep = &r->ep_parsed;
  r->connect_timeout_ms = o->connect_timeout_ms;
  r->command_timeout_ms = o->command_timeout_ms;
  dlock__redis_latch_ms(r);
  r->db = ep->db;
  r->pool_size = o->pool_size;
  r->publish = "publish";
  r->replica_wait_ms = ro->replica_wait_ms;
  atomic_store(&r->replicas, 0);
  atomic_store(&r->replicas_at, INT64_MIN / 2); /* ROLE at the first write */
  int rc = 0;
  if (ep->tls || o->tls) {
    if (ep->kind == DLOCK__EP_UNIX)
      rc = dlock__seterr(DLOCK_ENOTSUP,
                         "%s: TLS over a Unix socket is not supported",
                         ep->display);
    else
      rc = dlock__tls_new(&r->tls, &(dlock__tls_config){
                                       .ca_file = o->tls_ca_file,
                                       .ca_dir = o->tls_ca_dir,
                                       .cert_file = o->tls_cert_file,
                                       .key_file = o->tls_key_file,
                                       .sni = o->tls_sni,
                                       .insecure = o->tls_insecure,
                                   });
    if (rc) {
      redis_close(r);
      return rc;
    }
  }
  const char *user = o->credentials_set ? o->user : ep->user;
  const char *pass = o->credentials_set ? o->password : ep->password;
  if ((user && !(r->user = dlock__strdup(user))) ||
      (pass && !(r->password = dlock__strdup(pass))) ||
      (o->client_name && !(r->client_name = dlock__strdup(o->client_name))) ||
      (o->holder_info && !(r->holder_info = dlock__strdup(o->holder_info))) ||
      !(r->idle = dlock__calloc((size_t)r->pool_size, sizeof *r->idle)) ||
      dlock__redis_mux_new(&r->mux))
    rc = DLOCK_ENOMEM;
  if (!rc && check) {
    /* dial once so a bad address or password is reported now */
    dlock__conn *c = NULL;
    rc = dlock__redis_dial(r, true, DLOCK__NEVER, &c);
    if (!rc) {
      dlock__redis_pool_put(r, c);
      rc = redis_ping(r);
      if (!rc)
        rc = probe_publish(r);
      if (!rc && r->replica_wait_ms > 0)
        learn_replicas(r);
      /* name the server, unless the detail already leads with it */
      if (rc && strncmp(dlock_last_error(), ep->display,
                        strlen(ep->display)) != 0)
        dlock__preferr(rc, "%s", ep->display);
    }
  }
  if (rc) {
    redis_close(r);
    return rc;
  }
  *be = r;
  return 0;
}

static int redis_open(void **be, const char *url,
                      const struct dlock_options *o,
                      struct dlock_client *core) {
  return open_backend(be, url, o, core, true, false);
}

int dlock__redis_open_unchecked(void **be, const char *url,
                                const struct dlock_options *o,
                                struct dlock_client *core) {
  return open_backend(be, url, o, core, false, false);
}

int dlock__redis_open_layout(void **be, const char *url,
                             const struct dlock_options *o,
                             struct dlock_client *core, bool spring) {
  return open_backend(be, url, o, core, true, spring);
}

void dlock__redis_close(void *be) { redis_close(be); }

int dlock__redis_ping(void *be) { return redis_ping(be); }

static const char *const redis_schemes[] = {"redis", "rediss", "unix",
                                             "redis-sentinel", NULL};

const dlock__backend_ops dlock__redis_backend = {
    .name = "redis",
    .schemes = redis_schemes,
    .lock_kinds = DLOCK__REDIS_LOCK_KINDS,
    .sync_kinds = DLOCK__REDIS_SYNC_KINDS,
    .fair_queue_expires = true,
    .queue_kinds = DLOCK__REDIS_QUEUE_KINDS,
    .open = redis_open,
    .close = redis_close,
    .ping = redis_ping,
    .check_name = dlock__redis_check_name,
    .handle_open = dlock__redis_handle_open,
    .handle_close = dlock__redis_handle_close,
    .lock_acquire = dlock__redis_lock_acquire,
    .lock_leave = dlock__redis_lock_leave,
    .lock_release = dlock__redis_lock_release,
    .lock_acquire_send = dlock__redis_lock_acquire_send,
    .lock_release_send = dlock__redis_lock_release_send,
    .lock_force_release = dlock__redis_lock_force_release,
    .lock_renew = dlock__redis_lock_renew,
    .lock_query = dlock__redis_lock_query,
    .lock_state = dlock__redis_lock_state,
    .wait_begin = dlock__redis_wait_begin,
    .wait_hot = dlock__redis_wait_hot,
    .wait_arm = dlock__redis_wait_arm,
    .wait_can_queue = dlock__redis_wait_can_queue,
    .wait_end = dlock__redis_wait_end,
    .loop_prepare = dlock__redis_loop_prepare,
    .loop_dispatch = dlock__redis_loop_dispatch,
    .sem_set = dlock__redis_sem_set,
    .sem_add = dlock__redis_sem_add,
    .sem_acquire = dlock__redis_sem_acquire,
    .sem_release = dlock__redis_sem_release,
    .sem_available = dlock__redis_sem_available,
    .sem_delete = dlock__redis_sem_delete,
    .psem_acquire = dlock__redis_psem_acquire,
    .psem_release = dlock__redis_psem_release,
    .psem_state = dlock__redis_psem_state,
    .latch_set = dlock__redis_latch_set,
    .latch_count_down = dlock__redis_latch_count_down,
    .latch_count = dlock__redis_latch_count,
    .latch_delete = dlock__redis_latch_delete,
};
