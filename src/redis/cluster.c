/*
 * cluster.c - Redis Cluster: a backend over one Redis backend per master,
 * each lock name routed to the master that owns its slot.
 *
 *   redis-cluster://[user:password@]host:port[,host:port...]
 *
 * The hosts are seeds: the first that answers gives the slot map (CLUSTER
 * SLOTS), and a Redis backend (redis.c, with its pool, shared connection
 * and pub/sub connection) is opened for every master in it. The URL is cut
 * by the core's splitter (core/uri.h), so every seed's syntax is checked
 * before the first is dialled.
 *
 * Routing: every key and channel of one lock, semaphore or latch carries
 * the name's hash tag (docs/LAYOUT.md: the lock key is the name itself,
 * the others are `prefix:{name}`, `{name}:suffix`, or, for a name that has
 * a `{...}` of its own, the name with that tag), so all of them live in one
 * slot: CRC16 (XMODEM) of the tag, mod 16384, as Redis computes it. Each
 * operation is forwarded, unchanged, to the master of that slot (its
 * request struct, dlock__acquire or dlock__release, as it came); handles
 * are the same on every master, and so is check_name, the Redis
 * backend's (no dlock_lock_ names: dlock's own keys). Renewals are one batch
 * per master, split by slot by the master's backend.
 *
 * The map changes (docs/CLUSTER.md): a call answered MOVED goes where it
 * says and the map is read again; ASK sends it once after ASKING;
 * TRYAGAIN (a slot mid-migration) retries it within the command timeout;
 * a call that could not be sent (its master is gone) waits, within the
 * connect timeout, for the map to name another master; a call or dial
 * that a master leaves unanswered for 500 ms reads the map again from the
 * other masters (node_left, the masters' `left` hook: a stopped master's
 * kernel still takes connections and requests) and ends as soon as the
 * map gives that master no slot, so the call is made again where it says.
 * Masters are added as they appear and never removed. A wait is registered with
 * one master (its cwait record, w->route); when the map moves its slot, it is
 * woken, and its next arm or queue check moves it to the new master.
 *
 * Pub/sub: the node backends publish with SPUBLISH and subscribe with
 * SSUBSCRIBE (sharded pub/sub, Redis 7), as Redisson 3.22+ does in a
 * cluster, so wake-ups reach the shard that owns the lock and a Redisson
 * client's waiters; PUBLISH's receiver count in a hand-off is the shard's.
 *
 * Threads: operations run on their callers' threads. The map is an array
 * of atomic bytes (slot -> master index), read without a lock, written
 * under mu (a MOVED also sets its one slot at once); the masters
 * array only grows, each entry set before the count that publishes it.
 * wmu guards the waits' list. The loop hooks forward to the masters' and
 * keep the count they prepared for (loop_n, loop thread only).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* memrchr */
#endif
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/alloc.h"
#include "core/client.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/uri.h"
#include "core/wait.h"
#include "redis/redis.h"

#define SLOTS 16384
#define MAX_MASTERS 64
#define MAX_SEEDS 16
#define NOBODY 0xff
/* Redirections followed by one call before it gives up (a slot moves
 * once; a failover moves many, followed by one map refresh). */
#define MAX_HOPS 5
/* TRYAGAIN (a multi-key call while its slot migrates): pause, then retry,
 * within the command timeout. */
#define TRYAGAIN_MS 20
/* A master that cannot be reached: the map is read again this often,
 * within the connect timeout, until another master serves the slot. */
#define FAILOVER_POLL_MS 200

/* A wait registered with one master (w->route). */
typedef struct cwait {
  dlock__wait *w;
  void *node; /* the master it is registered with; under cl->wmu */
  struct cwait *prev, *next;
} cwait;

typedef struct cluster {
  struct dlock_client *core;
  char *userinfo;      /* "user:password" of the URL, or "" */
  char seed_host[256]; /* the host of the seed that gave the first map */
  /* Masters are added (never removed: a failed one keeps its failed
   * connections) under mu; node[i] and addr[i] are set before n counts
   * them, so readers load n (acquire) and then read below it. */
  pthread_mutex_t mu; /* adding masters, reading the map */
  void *node[MAX_MASTERS]; /* dlock__redis backends */
  char *addr[MAX_MASTERS]; /* "host:port" of each */
  _Atomic size_t n;
  _Atomic uint8_t owner[SLOTS]; /* slot -> node index (NOBODY) */
  uint8_t next_owner[SLOTS];    /* a map being read; under mu */
  _Atomic int64_t asked_at;     /* a slow master's waiter read the map then */
  pthread_mutex_t wmu; /* the waits' list and their nodes */
  cwait *waits;
  int loop_nfds[MAX_MASTERS]; /* the loop thread's (prepare, dispatch) */
  size_t loop_n;
} cluster;

static const dlock__backend_ops *const RB = &dlock__redis_backend;
static bool node_left(void *ud, dlock__redis *r, bool ask, int64_t deadline);

/* CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0. */
static uint16_t crc16(const char *p, size_t n) {
  uint16_t crc = 0;
  for (size_t i = 0; i < n; i++) {
    crc ^= (uint16_t)((unsigned char)p[i] << 8);
    for (int b = 0; b < 8; b++)
      crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
  }
  return crc;
}

/* Redis's key slot: the part between the first '{' and the next '}' when
 * it is not empty, else the whole key. */
unsigned dlock__redis_key_slot(const char *key) {
  size_t n = strlen(key);
  const char *open = memchr(key, '{', n);
  if (open) {
    const char *close = memchr(open + 1, '}', n - (size_t)(open + 1 - key));
    if (close && close > open + 1)
      return crc16(open + 1, (size_t)(close - open - 1)) % SLOTS;
  }
  return crc16(key, n) % SLOTS;
}

static size_t nodes_now(cluster *cl) {
  return atomic_load_explicit(&cl->n, memory_order_acquire);
}

static void *slot_node(cluster *cl, unsigned slot) {
  uint8_t i = atomic_load_explicit(&cl->owner[slot], memory_order_relaxed);
  return i < nodes_now(cl) ? cl->node[i] : NULL;
}

static void *node_of(cluster *cl, const char *name) {
  return slot_node(cl, dlock__redis_key_slot(name));
}

static int no_master(const char *name) {
  return dlock__seterr(DLOCK_EUNAVAILABLE,
                       "redis-cluster: no master serves the slot of '%.200s'",
                       name);
}

/* ------------------------------------------------------------ open */

static void cl_close(void *be) {
  cluster *cl = be;
  if (!cl)
    return;
  size_t n = nodes_now(cl);
  for (size_t i = 0; i < n; i++) {
    RB->close(cl->node[i]);
    dlock__free(cl->addr[i]);
  }
  dlock__free(cl->userinfo);
  pthread_mutex_destroy(&cl->mu);
  pthread_mutex_destroy(&cl->wmu);
  dlock__free(cl);
}

/* "redis://[userinfo@]host:port" */
static char *node_url(const char *userinfo, const char *host, size_t hlen,
                      long port) {
  size_t ulen = strlen(userinfo);
  bool v6 = memchr(host, ':', hlen) != NULL;
  size_t len = 8 + ulen + 1 + hlen + 2 + 24;
  char *u = dlock__calloc(1, len);
  if (u)
    snprintf(u, len, "redis://%s%s%s%.*s%s:%ld", userinfo, ulen ? "@" : "",
             v6 ? "[" : "", (int)hlen, host, v6 ? "]" : "", port);
  return u;
}

/* The index of master host:port, opened (a Redis backend of its own) and
 * added when new. An empty host: the node does not know its own address
 * (a cluster of one that never met another node); the seed's host, which
 * reached it, is used, as Redis advises clients to. cl->mu held. */
static int master_index(cluster *cl, const char *host, size_t hlen, long port,
                        uint8_t *index) {
  if (hlen == 0 || (hlen == 1 && host[0] == '?')) {
    host = cl->seed_host;
    hlen = strlen(host);
  }
  char key[300];
  snprintf(key, sizeof key, "%.*s:%ld", (int)(hlen > 256 ? 256 : hlen), host,
           port);
  size_t n = nodes_now(cl);
  for (size_t i = 0; i < n; i++)
    if (strcmp(cl->addr[i], key) == 0) {
      *index = (uint8_t)i;
      return 0;
    }
  if (n == MAX_MASTERS)
    return dlock__seterr(DLOCK_ENOTSUP, "redis-cluster: more than %d masters",
                         MAX_MASTERS);
  char *url = node_url(cl->userinfo, host, hlen, port);
  if (!url || !(cl->addr[n] = dlock__strdup(key))) {
    dlock__free(url);
    return DLOCK_ENOMEM;
  }
  int rc = RB->open(&cl->node[n], url, &cl->core->opts, cl->core);
  dlock__free(url);
  if (rc) {
    dlock__free(cl->addr[n]);
    cl->addr[n] = NULL;
    return dlock__preferr(rc, "redis-cluster master %s", key);
  }
  dlock__redis *r = cl->node[n];
  r->sharded = true;
  r->publish = "spublish";
  r->left = node_left;
  r->left_ud = cl;
  *index = (uint8_t)n;
  atomic_store_explicit(&cl->n, n + 1, memory_order_release);
  return 0;
}

/* The index of the master "host:port" (a MOVED or ASK target). */
static int master_at(cluster *cl, const char *addr, uint8_t *index) {
  const char *colon = strrchr(addr, ':');
  if (!colon || colon[1] == '\0')
    return dlock__seterr(DLOCK_EPROTO, "redis-cluster: bad address '%.200s'",
                         addr);
  const char *host = addr;
  size_t hlen = (size_t)(colon - addr);
  if (hlen >= 2 && host[0] == '[' && host[hlen - 1] == ']') {
    host++;
    hlen -= 2;
  }
  pthread_mutex_lock(&cl->mu);
  int rc = master_index(cl, host, hlen, strtol(colon + 1, NULL, 10), index);
  pthread_mutex_unlock(&cl->mu);
  return rc;
}

/* Takes the slot map a CLUSTER SLOTS reply gives; slots it does not name
 * are served by nobody. Whether any owner changed. cl->mu held. */
static int apply_map(cluster *cl, const redisReply *map, bool *changed) {
  if (map->type != REDIS_REPLY_ARRAY || map->elements == 0)
    return dlock__seterr(DLOCK_EUNAVAILABLE,
                         "redis-cluster: CLUSTER SLOTS gave no slots (is the "
                         "cluster created?)");
  uint8_t *next = cl->next_owner;
  memset(next, NOBODY, SLOTS);
  for (size_t i = 0; i < map->elements; i++) {
    const redisReply *e = map->element[i];
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
        e->element[0]->type != REDIS_REPLY_INTEGER ||
        e->element[1]->type != REDIS_REPLY_INTEGER ||
        e->element[2]->type != REDIS_REPLY_ARRAY ||
        e->element[2]->elements < 2 ||
        e->element[2]->element[0]->type != REDIS_REPLY_STRING ||
        e->element[2]->element[1]->type != REDIS_REPLY_INTEGER)
      return dlock__seterr(DLOCK_EPROTO, "CLUSTER SLOTS: unexpected reply");
    long long lo = e->element[0]->integer, hi = e->element[1]->integer;
    if (lo < 0 || hi >= SLOTS || lo > hi)
      return dlock__seterr(DLOCK_EPROTO, "CLUSTER SLOTS: slots %lld-%lld", lo,
                           hi);
    const redisReply *host = e->element[2]->element[0];
    uint8_t idx = 0;
    int rc = master_index(cl, host->str, host->len,
                          (long)e->element[2]->element[1]->integer, &idx);
    if (rc)
      return rc;
    memset(next + lo, idx, (size_t)(hi - lo + 1));
  }
  *changed = false;
  size_t moved = 0;
  uint8_t from = NOBODY, to = NOBODY;
  uint64_t gained = 0; /* the masters given slots they did not serve */
  for (size_t s = 0; s < SLOTS; s++) {
    uint8_t was = atomic_load_explicit(&cl->owner[s], memory_order_relaxed);
    if (was != next[s]) {
      atomic_store_explicit(&cl->owner[s], next[s], memory_order_relaxed);
      if (next[s] != NOBODY)
        gained |= UINT64_C(1) << next[s];
      if (moved++ == 0) {
        from = was;
        to = next[s];
      }
    }
  }
  *changed = moved > 0;
  /* a replica promoted in a failover: its replicas are not its old
   * master's, which its backend may still count (WAIT would wait out
   * replica_wait on every write until ROLE is asked again) */
  for (size_t k = 0; k < MAX_MASTERS; k++)
    if (gained & (UINT64_C(1) << k))
      dlock__redis_new_master(cl->node[k]);
  /* said once per change (a failover, a resharding), as Sentinel's new
   * master is: the first moved slot's old and new master */
  if (moved > 0 && from != NOBODY)
    dlock__log(cl->core, DLOCK_LOG_INFO,
               "redis-cluster: the map moved %zu slot%s, from %s to %s%s",
               moved, moved == 1 ? "" : "s", cl->addr[from],
               to == NOBODY ? "nobody" : cl->addr[to],
               moved > 1 ? " (the first of them)" : "");
  return 0;
}

/* Wakes every wait whose slot is served by another master now: it comes
 * back, follows (wait_follow) and retries there. */
static void waits_follow_map(cluster *cl) {
  pthread_mutex_lock(&cl->wmu);
  for (cwait *x = cl->waits; x; x = x->next)
    if (node_of(cl, x->w->spec->name) != x->node)
      dlock__wait_wake(x->w);
  pthread_mutex_unlock(&cl->wmu);
}

/* Reads the map again, from `first` when it answers, else from the other
 * masters in turn but `avoid` (one that could not be reached: a frozen
 * host would cost a connect timeout). The error of the last one asked when
 * none answers. */
static int refresh(cluster *cl, void *first, void *avoid) {
  const char *argv[2] = {"CLUSTER", "SLOTS"};
  bool changed = false;
  int rc = DLOCK_EUNAVAILABLE;
  pthread_mutex_lock(&cl->mu);
  size_t n = nodes_now(cl);
  for (size_t k = 0; k <= n; k++) {
    void *via = k == 0 ? first : cl->node[k - 1];
    if (!via || (k > 0 && via == first) || via == avoid)
      continue;
    redisReply *map = NULL;
    rc = dlock__redis_command(via, 2, argv, &map);
    if (!rc) {
      rc = apply_map(cl, map, &changed);
      freeReplyObject(map);
    }
    if (!rc)
      break;
  }
  pthread_mutex_unlock(&cl->mu);
  if (changed)
    waits_follow_map(cl);
  return rc;
}

/* Whether any slot of the map is served by `node`. */
static bool serves_any(cluster *cl, void *node) {
  size_t n = nodes_now(cl);
  size_t k = 0;
  while (k < n && cl->node[k] != node)
    k++;
  if (k == n)
    return true; /* not one of ours: nothing to say */
  for (unsigned s = 0; s < SLOTS; s++)
    if (atomic_load_explicit(&cl->owner[s], memory_order_relaxed) == k)
      return true;
  return false;
}

/* The masters' `left` hook (redis.h): a request or dial that waits long
 * on a master (one stopped keeps them unanswered) reads the map again from
 * the other masters, at most every LEFT_ASK_MS in the client and never
 * while another thread reads it (mu is not waited for: the thread that
 * holds it may be this one, and its reading updates the map anyway); the
 * master is left when the map gives it no slot. */
#define LEFT_ASK_MS 500
static bool node_left(void *ud, dlock__redis *r, bool ask, int64_t deadline) {
  (void)deadline; /* the reading is bounded by the other masters' timeouts */
  cluster *cl = ud;
  int64_t now = dlock__now_ms(), at = atomic_load(&cl->asked_at);
  if (ask && now - at >= LEFT_ASK_MS &&
      atomic_compare_exchange_strong(&cl->asked_at, &at, now) &&
      pthread_mutex_trylock(&cl->mu) == 0) {
    pthread_mutex_unlock(&cl->mu);
    char saved[512];
    snprintf(saved, sizeof saved, "%s", dlock_last_error());
    bool unsent = dlock__err_unsent();
    refresh(cl, NULL, r);
    dlock__seterr(0, "%s", saved);
    dlock__err_set_unsent(unsent);
  }
  return !serves_any(cl, r);
}

/* Reads the slot map from one seed (a Redis backend of its own). */
static int read_map_from(void *seed, redisReply **out) {
  const char *argv[2] = {"CLUSTER", "SLOTS"};
  return dlock__redis_command(seed, 2, argv, out);
}

static int cl_open(void **be, const char *url, const struct dlock_options *o,
                   struct dlock_client *core) {
  *be = NULL;
  static const dlock__uri_rules rules = {
      .example = "redis-cluster://[user:password@]host:port[,host:port...]",
      .default_port = 6379,
      .min_hosts = 1,
      .max_hosts = DLOCK__URI_MAX_HOSTS,
      .list_scheme = "redis-cluster://",
      .list_noun = "seed"};
  dlock__uri u;
  int rc = dlock__uri_split(url, &rules, &u);
  if (rc)
    return rc;
  if (u.path.n || u.has_query || u.has_fragment)
    return dlock__seterr(DLOCK_EURL,
                         "bad URL: expected redis-cluster://[user:password@]"
                         "host:port[,host:port...] (no path)");
  /* the userinfo as written, passed on to every node's redis:// URL */
  const char *p = url + u.scheme.n + 3;
  size_t ulen = u.has_userinfo ? (size_t)(u.authority_hosts.p - 1 - p) : 0;
  cluster *cl = dlock__calloc(1, sizeof *cl);
  if (!cl)
    return DLOCK_ENOMEM;
  if (!(cl->userinfo = dlock__strndup(p, ulen))) {
    dlock__free(cl);
    return DLOCK_ENOMEM;
  }
  cl->core = core;
  pthread_mutex_init(&cl->mu, NULL);
  pthread_mutex_init(&cl->wmu, NULL);
  for (size_t s = 0; s < SLOTS; s++)
    atomic_init(&cl->owner[s], NOBODY);
  /* the seeds, in order, until one gives the map */
  redisReply *map = NULL;
  rc = DLOCK_EURL;
  char first_err[400] = "";
  for (size_t i = 0; i < u.nhosts && !map && i < MAX_SEEDS; i++) {
    const dlock__uri_host *h = &u.hosts[i];
    /* the host part of this seed, for master_index */
    snprintf(cl->seed_host, sizeof cl->seed_host, "%.*s", (int)h->name.n,
             h->name.p);
    char seed_url[600];
    snprintf(seed_url, sizeof seed_url, "redis://%s%s%s%.*s%s:%d", cl->userinfo,
             ulen ? "@" : "", h->ipv6 ? "[" : "", (int)h->name.n, h->name.p,
             h->ipv6 ? "]" : "", h->port);
    void *seed = NULL;
    rc = RB->open(&seed, seed_url, o, core);
    memset(seed_url, 0, sizeof seed_url); /* it held the password */
    if (!rc)
      rc = read_map_from(seed, &map);
    if (seed)
      RB->close(seed);
    if (rc == DLOCK_EURL || rc == DLOCK_EAUTH || rc == DLOCK_ETLS)
      break; /* the URL or the credentials are wrong: no seed will do */
    if (rc && !first_err[0])
      snprintf(first_err, sizeof first_err, "%s", dlock_last_error());
  }
  if (!map) {
    if (rc != DLOCK_EURL && rc != DLOCK_EAUTH && rc != DLOCK_ETLS)
      rc = dlock__seterr(rc ? rc : DLOCK_EUNAVAILABLE,
                         "redis-cluster: no seed gave the slot map (%s)",
                         first_err);
    cl_close(cl);
    return rc;
  }
  bool changed = false;
  pthread_mutex_lock(&cl->mu);
  rc = apply_map(cl, map, &changed);
  pthread_mutex_unlock(&cl->mu);
  freeReplyObject(map);
  if (rc) {
    cl_close(cl);
    return rc;
  }
  *be = cl;
  return 0;
}

/* Pings the masters that serve slots now (one that failed and was
 * replaced serves none). */
static int cl_ping(void *be) {
  cluster *cl = be;
  size_t n = nodes_now(cl);
  bool serves[MAX_MASTERS] = {false};
  for (size_t s = 0; s < SLOTS; s++) {
    uint8_t i = atomic_load_explicit(&cl->owner[s], memory_order_relaxed);
    if (i < n)
      serves[i] = true;
  }
  for (size_t i = 0; i < n; i++) {
    if (!serves[i])
      continue;
    int rc = RB->ping(cl->node[i]);
    if (rc)
      return dlock__preferr(rc, "redis-cluster master %s", cl->addr[i]);
  }
  return 0;
}

/* ------------------------------------------------------------ routing */

/* One call's way to the master of its name: the map's, then wherever the
 * cluster redirects it (MOVED: the map is read again; ASK: that master
 * once, after ASKING), or, when its master cannot be reached (nothing was
 * sent), the master the map names after a failover, within the connect
 * timeout. Every retry is of a call that did not run. */
typedef struct route {
  cluster *cl;
  const char *name;
  void *node;
  int rc;
  int hops;
  bool started;
  int64_t until;          /* ASK and TRYAGAIN are followed until then */
  int64_t failover_until; /* 0: not waiting for a failover */
} route;

/* Whether to make (another) try of the call at rt->node. */
static bool route_go(route *rt) {
  cluster *cl = rt->cl;
  dlock__redis_redirect rd;
  if (!rt->started) {
    rt->started = true;
    dlock__redis_redirect_take(&rd); /* a stale note of an earlier call */
    rt->node = node_of(cl, rt->name);
    if (!rt->node)
      rt->rc = no_master(rt->name);
    return rt->node != NULL;
  }
  dlock__redis_redirect_take(&rd);
  dlock__redis_set_asking(false);
  if (rt->rc == 0)
    return false;
  /* MOVED reads the map again: a few are enough; the others are bounded
   * by time (ASK alternates with TRYAGAIN while a slot migrates) */
  if (rd.kind == DLOCK__RD_MOVED && rt->hops++ >= MAX_HOPS)
    return false;
  int64_t now = dlock__now_ms();
  if (!rt->until)
    rt->until = now + cl->core->opts.command_timeout_ms;
  char saved[512];
  snprintf(saved, sizeof saved, "%s", dlock_last_error());
  int code = rt->rc;
  uint8_t idx = 0;
  void *next = NULL;
  switch (rd.kind) {
  case DLOCK__RD_MOVED:
    if (master_at(cl, rd.addr, &idx) != 0)
      break;
    next = cl->node[idx];
    atomic_store_explicit(&cl->owner[rd.slot], idx, memory_order_relaxed);
    /* one slot seldom moves alone (a failover, a resharding) */
    refresh(cl, next, NULL);
    next = node_of(cl, rt->name) ? node_of(cl, rt->name) : next;
    break;
  case DLOCK__RD_ASK:
    if (now >= rt->until || master_at(cl, rd.addr, &idx) != 0)
      break;
    next = cl->node[idx];
    dlock__redis_set_asking(true);
    break;
  case DLOCK__RD_TRYAGAIN:
    /* a call of several keys while its slot migrates: Redis runs it on
     * neither side until the migration ends (within the command timeout) */
    if (now < rt->until) {
      dlock__sleep_ms(TRYAGAIN_MS);
      next = node_of(cl, rt->name);
    }
    break;
  case DLOCK__RD_UNSENT: {
    /* the master is gone: if a replica takes its place within the connect
     * timeout, the call goes there (a refused password or certificate is
     * not a failover) */
    if (code != DLOCK_EUNAVAILABLE && code != DLOCK_EIOTIMEOUT)
      break;
    if (!rt->failover_until)
      rt->failover_until = now + cl->core->opts.connect_timeout_ms;
    while (now < rt->failover_until) {
      refresh(cl, NULL, rt->node);
      void *n = node_of(cl, rt->name);
      if (n && n != rt->node) {
        next = n;
        break;
      }
      dlock__sleep_ms(FAILOVER_POLL_MS);
      now = dlock__now_ms();
    }
    break;
  }
  case DLOCK__RD_NONE:
    break;
  }
  if (!next) {
    dlock__redis_set_asking(false);
    dlock__seterr(code, "%s", saved);
    return false;
  }
  rt->node = next;
  /* what the map's reading noted is not the next call's */
  dlock__redis_redirect_take(&rd);
  return true;
}

/* Runs `call` (an expression that uses rt.node) at the master of `nm`,
 * following the cluster; returns its result. */
#define ROUTED(be, nm, call)                                                   \
  do {                                                                         \
    route rt = {.cl = (be), .name = (nm)};                                     \
    while (route_go(&rt))                                                      \
      rt.rc = (call);                                                          \
    return rt.rc;                                                              \
  } while (0)

/* ------------------------------------------------------------ locks */

static int cl_handle_open(void *be, dlock_lock_kind_t kind, const char *name,
                          void **bh) {
  /* a handle's names are the same on every master */
  void *n = node_of(be, name);
  cluster *cl = be;
  if (!n && nodes_now(cl) > 0)
    n = cl->node[0];
  return n ? RB->handle_open(n, kind, name, bh) : no_master(name);
}

static void cl_handle_close(void *bh) { RB->handle_close(bh); }

static int cl_lock_acquire(void *be, const dlock__acquire *a, int64_t *pttl,
                           int64_t *token) {
  ROUTED(be, a->name, RB->lock_acquire(rt.node, a, pttl, token));
}

static int cl_lock_leave(void *be, const dlock__acquire *a, uint64_t seq,
                         int64_t *token) {
  ROUTED(be, a->name, RB->lock_leave(rt.node, a, seq, token));
}

static int cl_lock_release(void *be, const dlock__release *r) {
  ROUTED(be, r->name, RB->lock_release(rt.node, r));
}

static int cl_lock_force_release(void *be, dlock_lock_kind_t kind,
                                 const char *name, bool *deleted) {
  ROUTED(be, name, RB->lock_force_release(rt.node, kind, name, deleted));
}

/* Renews the items (not yet done) whose master is node k: copied out,
 * renewed in one pipeline, results copied back. */
static int renew_at(cluster *cl, size_t k, dlock__renewal *items, size_t n,
                    bool *done, dlock__renewal *part, size_t *from,
                    int64_t lease_ms, int64_t deadline) {
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (!done[i] && node_of(cl, items[i].name) == cl->node[k]) {
      part[m] = items[i];
      from[m++] = i;
    }
  if (m == 0)
    return 0;
  int r = RB->lock_renew(cl->node[k], part, m, lease_ms, deadline);
  for (size_t j = 0; !r && j < m; j++) {
    items[from[j]].result = part[j].result;
    done[from[j]] = true;
  }
  return r;
}

/* One pipeline per master. A master that answered MOVED (a slot moved),
 * or could not be reached, makes the map be read again; the items whose
 * master changed are renewed once more, at the new one. */
static int cl_lock_renew(void *be, dlock__renewal *items, size_t n,
                         int64_t lease_ms, int64_t deadline) {
  cluster *cl = be;
  dlock__renewal *part = dlock__calloc(n ? n : 1, sizeof *part);
  size_t *from = dlock__calloc(n ? n : 1, sizeof *from);
  bool *done = dlock__calloc(n ? n : 1, sizeof *done);
  int rc = part && from && done ? 0 : DLOCK_ENOMEM;
  for (int pass = 0; !rc && pass < 2; pass++) {
    bool moved = false;
    int first = 0;
    size_t nn = nodes_now(cl);
    for (size_t k = 0; k < nn; k++) {
      dlock__redis_redirect rd;
      dlock__redis_redirect_take(&rd);
      int r = renew_at(cl, k, items, n, done, part, from, lease_ms, deadline);
      dlock__redis_redirect_take(&rd);
      if (r && (rd.kind == DLOCK__RD_MOVED || rd.kind == DLOCK__RD_UNSENT))
        moved = true;
      if (r && !first)
        first = r; /* the other masters' items are still renewed */
    }
    if (!moved || pass == 1) {
      rc = first;
      break;
    }
    char saved[512];
    snprintf(saved, sizeof saved, "%s", dlock_last_error());
    if (refresh(cl, NULL, NULL) != 0) {
      rc = dlock__seterr(first, "%s", saved);
      break;
    }
  }
  for (size_t i = 0; !rc && i < n; i++)
    if (!done[i])
      rc = node_of(cl, items[i].name) ? DLOCK_EUNAVAILABLE
                                      : no_master(items[i].name);
  dlock__free(part);
  dlock__free(from);
  dlock__free(done);
  return rc;
}

static int cl_lock_query(void *be, dlock_lock_kind_t kind, const char *name,
                         const char *owner, dlock__lock_query q,
                         int64_t *out) {
  ROUTED(be, name, RB->lock_query(rt.node, kind, name, owner, q, out));
}

static int cl_lock_state(void *be, dlock_lock_kind_t kind, const char *name,
                         dlock_lock_state_t **out) {
  ROUTED(be, name, RB->lock_state(rt.node, kind, name, out));
}

/* ------------------------------------------------------------ waits */

/* A wait is registered with the master of its name. When the map moves
 * that name (waits_follow_map wakes it), its next arm or queue check moves
 * the registration to the new master, armed: releases are published
 * there. wait_end uses the master it is registered with, whatever the map
 * says by then. */
static int cl_wait_begin(void *be, dlock__wait *w) {
  cluster *cl = be;
  void *n = node_of(cl, w->spec->name);
  if (!n)
    return no_master(w->spec->name);
  cwait *x = dlock__calloc(1, sizeof *x);
  if (!x)
    return DLOCK_ENOMEM;
  x->w = w;
  x->node = n;
  w->route = x;
  int rc = RB->wait_begin(n, w);
  if (rc) {
    w->route = NULL;
    dlock__free(x);
    return rc;
  }
  pthread_mutex_lock(&cl->wmu);
  x->next = cl->waits;
  if (cl->waits)
    cl->waits->prev = x;
  cl->waits = x;
  pthread_mutex_unlock(&cl->wmu);
  return 0;
}

/* The master w is registered with now (NULL: none), after moving it to
 * its name's master if the map changed. Caller thread. */
static void *wait_follow(cluster *cl, dlock__wait *w) {
  cwait *x = w->route;
  void *now = node_of(cl, w->spec->name);
  void *was = x->node;
  if (!now || now == was)
    return was;
  if (was)
    RB->wait_end(was, w);
  /* not armed at the new master until it confirms */
  dlock__wait_set_ready(w, false, false);
  int rc = RB->wait_begin(now, w);
  pthread_mutex_lock(&cl->wmu);
  x->node = rc ? NULL : now;
  pthread_mutex_unlock(&cl->wmu);
  if (rc)
    return NULL;
  RB->wait_arm(now, w, false);
  return now;
}

static bool cl_wait_hot(void *be, const dlock__wait_spec *spec) {
  void *n = node_of(be, spec->name);
  return n && RB->wait_hot(n, spec);
}

static bool cl_wait_arm(void *be, dlock__wait *w, bool only_if_ready) {
  void *n = wait_follow(be, w);
  return n && RB->wait_arm(n, w, only_if_ready);
}

static bool cl_wait_can_queue(void *be, dlock__wait *w) {
  void *n = wait_follow(be, w);
  return n && RB->wait_can_queue(n, w);
}

static void cl_wait_end(void *be, dlock__wait *w) {
  cluster *cl = be;
  cwait *x = w->route;
  if (!x)
    return;
  pthread_mutex_lock(&cl->wmu);
  if (x->prev)
    x->prev->next = x->next;
  else
    cl->waits = x->next;
  if (x->next)
    x->next->prev = x->prev;
  void *n = x->node;
  pthread_mutex_unlock(&cl->wmu);
  if (n)
    RB->wait_end(n, w);
  w->route = NULL;
  dlock__free(x);
}

static int cl_loop_prepare(void *be, int64_t now, struct pollfd *fds, int max,
                           int64_t *until) {
  cluster *cl = be;
  cl->loop_n = nodes_now(cl);
  return dlock__redis_loop_prepare_nodes(cl->node, cl->loop_n, cl->loop_nfds,
                                         now, fds, max, until);
}

static void cl_loop_dispatch(void *be, int64_t now, const struct pollfd *fds,
                             int n) {
  cluster *cl = be;
  dlock__redis_loop_dispatch_nodes(cl->node, cl->loop_n, cl->loop_nfds, now,
                                   fds, n);
}

/* ------------------------------------------------------------ sync */

static int cl_sem_set(void *be, const char *name, int64_t permits,
                      bool *set) {
  ROUTED(be, name, RB->sem_set(rt.node, name, permits, set));
}

static int cl_sem_add(void *be, const char *name, int64_t k) {
  ROUTED(be, name, RB->sem_add(rt.node, name, k));
}

static int cl_sem_acquire(void *be, const char *name, int64_t permits) {
  ROUTED(be, name, RB->sem_acquire(rt.node, name, permits));
}

static int cl_sem_release(void *be, const char *name, int64_t permits) {
  ROUTED(be, name, RB->sem_release(rt.node, name, permits));
}

static int cl_sem_available(void *be, dlock__sync_kind kind, const char *name,
                            int64_t *out) {
  ROUTED(be, name, RB->sem_available(rt.node, kind, name, out));
}

static int cl_sem_delete(void *be, dlock__sync_kind kind, const char *name,
                         bool *existed) {
  ROUTED(be, name, RB->sem_delete(rt.node, kind, name, existed));
}

static int cl_psem_acquire(void *be, const char *name, const char *id,
                           int64_t lease_ms, int64_t *retry_in_ms) {
  ROUTED(be, name, RB->psem_acquire(rt.node, name, id, lease_ms, retry_in_ms));
}

static int cl_psem_release(void *be, const char *name, const char *id) {
  ROUTED(be, name, RB->psem_release(rt.node, name, id));
}

static int cl_psem_state(void *be, const char *name,
                         dlock_sem_state_t **out) {
  ROUTED(be, name, RB->psem_state(rt.node, name, out));
}

static int cl_latch_set(void *be, const char *name, int64_t count,
                        bool *set) {
  ROUTED(be, name, RB->latch_set(rt.node, name, count, set));
}

static int cl_latch_count_down(void *be, const char *name) {
  ROUTED(be, name, RB->latch_count_down(rt.node, name));
}

static int cl_latch_count(void *be, const char *name, int64_t *out) {
  ROUTED(be, name, RB->latch_count(rt.node, name, out));
}

static int cl_latch_delete(void *be, const char *name, bool *existed) {
  ROUTED(be, name, RB->latch_delete(rt.node, name, existed));
}

static const char *const cl_schemes[] = {"redis-cluster", NULL};

const dlock__backend_ops dlock__redis_cluster_backend = {
    .name = "redis-cluster",
    .schemes = cl_schemes,
    .lock_kinds = DLOCK__REDIS_LOCK_KINDS,
    .sync_kinds = DLOCK__REDIS_SYNC_KINDS,
    .fair_queue_expires = true,
    .queue_kinds = DLOCK__REDIS_QUEUE_KINDS,
    .open = cl_open,
    .close = cl_close,
    .ping = cl_ping,
    .check_name = dlock__redis_check_name, /* the same keys on every master */
    .handle_open = cl_handle_open,
    .handle_close = cl_handle_close,
    .lock_acquire = cl_lock_acquire,
    .lock_leave = cl_lock_leave,
    .lock_release = cl_lock_release,
    .lock_force_release = cl_lock_force_release,
    .lock_renew = cl_lock_renew,
    .lock_query = cl_lock_query,
    .lock_state = cl_lock_state,
    .wait_begin = cl_wait_begin,
    .wait_hot = cl_wait_hot,
    .wait_arm = cl_wait_arm,
    .wait_can_queue = cl_wait_can_queue,
    .wait_end = cl_wait_end,
    .loop_prepare = cl_loop_prepare,
    .loop_dispatch = cl_loop_dispatch,
    .sem_set = cl_sem_set,
    .sem_add = cl_sem_add,
    .sem_acquire = cl_sem_acquire,
    .sem_release = cl_sem_release,
    .sem_available = cl_sem_available,
    .sem_delete = cl_sem_delete,
    .psem_acquire = cl_psem_acquire,
    .psem_release = cl_psem_release,
    .psem_state = cl_psem_state,
    .latch_set = cl_latch_set,
    .latch_count_down = cl_latch_count_down,
    .latch_count = cl_latch_count,
    .latch_delete = cl_latch_delete,
};
