/*
 * cluster.c - Redis Cluster: a backend over one Redis backend per master,
 * each lock name routed to the master that owns its slot.
 *
 *   redis-cluster://[user:password@]host:port[,host:port...]
 *
 * The hosts are seeds: the first that answers gives the slot map (CLUSTER
 * SLOTS), and a Redis backend (redis.c, with its pool, shared connection
 * and pub/sub connection) is opened for every master in it.
 *
 * Routing: every key and channel of one lock, semaphore or latch carries
 * the name's hash tag (docs/LAYOUT.md: the lock key is the name itself,
 * the others are `prefix:{name}`, `{name}:suffix`, or, for a name that has
 * a `{...}` of its own, the name with that tag), so all of them live in one
 * slot: CRC16 (XMODEM) of the tag, mod 16384, as Redis computes it. Each
 * operation is forwarded to the master of that slot, unchanged; a handle's
 * backend state is its node's own (a name never changes node while the
 * map does not change). Renewals are split into one batch per node.
 *
 * Pub/sub: the node backends publish with SPUBLISH and subscribe with
 * SSUBSCRIBE (sharded pub/sub, Redis 7), as Redisson 3.22+ does in a
 * cluster, so wake-ups reach the shard that owns the lock and a Redisson
 * client's waiters; PUBLISH's receiver count in a hand-off is the shard's.
 *
 * Not done: MOVED and ASK (a slot moved after the map was read makes its
 * calls fail with the server's MOVED error until the client is created
 * again), and failover (a master that dies stays in the map).
 *
 * Threads: every operation runs on its caller's thread with no state of
 * its own but the map, which is read-only after open; the loop hooks
 * forward to the nodes' (loop_nfds is the loop's alone).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1 /* memrchr */
#endif
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/wait.h"
#include "redis/redis.h"

#define SLOTS 16384
#define MAX_MASTERS 64
#define MAX_SEEDS 16

typedef struct cluster {
  void *node[MAX_MASTERS]; /* dlock__redis backends */
  char *addr[MAX_MASTERS]; /* "host:port" of each */
  size_t n;
  uint8_t owner[SLOTS]; /* slot -> node index (0xff: nobody) */
  int loop_nfds[MAX_MASTERS];
} cluster;

static const dlock__backend_ops *const RB = &dlock__redis_backend;

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

static void *node_of(const cluster *cl, const char *name) {
  uint8_t i = cl->owner[dlock__redis_key_slot(name)];
  return i < cl->n ? cl->node[i] : NULL;
}

/* The node of `name`, or DLOCK_EUNAVAILABLE for a slot nobody serves. */
#define ROUTE(cl, name, n)                                                     \
  void *n = node_of(cl, name);                                                 \
  if (!n)                                                                      \
    return dlock__seterr(DLOCK_EUNAVAILABLE,                                   \
                         "redis-cluster: no master serves the slot of '%.200s'", \
                         name)

/* ------------------------------------------------------------ open */

static void cl_close(void *be) {
  cluster *cl = be;
  if (!cl)
    return;
  for (size_t i = 0; i < cl->n; i++) {
    RB->close(cl->node[i]);
    dlock__free(cl->addr[i]);
  }
  dlock__free(cl);
}

/* "redis://[userinfo@]host:port" */
static char *node_url(const char *userinfo, size_t ulen, const char *host,
                      size_t hlen, long port) {
  size_t len = 8 + ulen + 1 + hlen + 24;
  char *u = dlock__calloc(1, len);
  if (u)
    snprintf(u, len, "redis://%.*s%s%s%.*s:%ld", (int)ulen, userinfo,
             ulen ? "@" : "", strchr(host, ':') ? "[" : "", (int)hlen, host,
             port);
  if (u && strchr(host, ':')) { /* an IPv6 address: close the bracket */
    size_t at = strlen(u);
    char *colon = strrchr(u, ':');
    memmove(colon + 1, colon, at - (size_t)(colon - u) + 1);
    *colon = ']';
  }
  return u;
}

/* Reads the slot map from one seed (a Redis backend of its own). */
static int read_map(void *seed, redisReply **out) {
  const char *argv[2] = {"CLUSTER", "SLOTS"};
  return dlock__redis_command(seed, 2, argv, out);
}

/* `host` empty: the node does not know its own address (a cluster of one
 * that never met another node); the seed's host, which reached it, is
 * used, as Redis advises clients to. */
static int add_master(cluster *cl, const char *userinfo, size_t ulen,
                      const redisReply *host, const char *seed_host,
                      long port, const struct dlock_options *o,
                      struct dlock_client *core, uint8_t *index) {
  const char *hs = host->len ? host->str : seed_host;
  size_t hl = host->len ? host->len : strlen(seed_host);
  char key[300];
  snprintf(key, sizeof key, "%.*s:%ld", (int)hl, hs, port);
  for (size_t i = 0; i < cl->n; i++)
    if (strcmp(cl->addr[i], key) == 0) {
      *index = (uint8_t)i;
      return 0;
    }
  if (cl->n == MAX_MASTERS)
    return dlock__seterr(DLOCK_ENOTSUP, "redis-cluster: more than %d masters",
                         MAX_MASTERS);
  char *url = node_url(userinfo, ulen, hs, hl, port);
  if (!url || !(cl->addr[cl->n] = dlock__strdup(key))) {
    dlock__free(url);
    return DLOCK_ENOMEM;
  }
  int rc = RB->open(&cl->node[cl->n], url, o, core);
  dlock__free(url);
  if (rc) {
    dlock__free(cl->addr[cl->n]);
    cl->addr[cl->n] = NULL;
    return dlock__preferr(rc, "redis-cluster master %s", key);
  }
  dlock__redis *r = cl->node[cl->n];
  r->sharded = true;
  r->publish = "spublish";
  *index = (uint8_t)cl->n++;
  return 0;
}

static int cl_open(void **be, const char *url, const struct dlock_options *o,
                   struct dlock_client *core) {
  *be = NULL;
  const char *p = url + strlen("redis-cluster://");
  if (*p == '\0' || strchr(p, '/') || strchr(p, '?'))
    return dlock__seterr(DLOCK_EURL,
                         "bad URL: expected redis-cluster://[user:password@]"
                         "host:port[,host:port...] (no path)");
  const char *at = strrchr(p, '@');
  const char *userinfo = at ? p : "";
  size_t ulen = at ? (size_t)(at - p) : 0;
  const char *hosts = at ? at + 1 : p;
  cluster *cl = dlock__calloc(1, sizeof *cl);
  if (!cl)
    return DLOCK_ENOMEM;
  memset(cl->owner, 0xff, sizeof cl->owner);
  /* the seeds, in order, until one gives the map */
  redisReply *map = NULL;
  int rc = DLOCK_EURL;
  char first_err[400] = "";
  int seeds = 0;
  char seed_host[256] = "";
  for (const char *h = hosts; *h && !map && seeds < MAX_SEEDS; seeds++) {
    const char *comma = strchr(h, ',');
    size_t hlen = comma ? (size_t)(comma - h) : strlen(h);
    /* the host part ("h:p", "[v6]:p") of this seed, for add_master */
    const char *colon = memrchr(h, ':', hlen);
    size_t host_len = colon ? (size_t)(colon - h) : hlen;
    if (host_len >= 2 && h[0] == '[' && h[host_len - 1] == ']')
      snprintf(seed_host, sizeof seed_host, "%.*s", (int)host_len - 2, h + 1);
    else
      snprintf(seed_host, sizeof seed_host, "%.*s", (int)host_len, h);
    char seed_url[600];
    snprintf(seed_url, sizeof seed_url, "redis://%.*s%s%.*s", (int)ulen,
             userinfo, ulen ? "@" : "", (int)hlen, h);
    void *seed = NULL;
    rc = hlen ? RB->open(&seed, seed_url, o, core)
              : dlock__seterr(DLOCK_EURL, "bad URL: redis-cluster://: an "
                                          "empty host in the seed list");
    if (!rc)
      rc = read_map(seed, &map);
    if (seed)
      RB->close(seed);
    if (rc == DLOCK_EURL || rc == DLOCK_EAUTH || rc == DLOCK_ETLS)
      break; /* the URL or the credentials are wrong: no seed will do */
    if (rc && !first_err[0])
      snprintf(first_err, sizeof first_err, "%s", dlock_last_error());
    h = comma ? comma + 1 : h + hlen;
  }
  if (!map) {
    if (rc != DLOCK_EURL && rc != DLOCK_EAUTH && rc != DLOCK_ETLS)
      rc = dlock__seterr(rc ? rc : DLOCK_EUNAVAILABLE,
                         "redis-cluster: no seed gave the slot map (%s)",
                         first_err);
    cl_close(cl);
    return rc;
  }
  rc = 0;
  if (map->type != REDIS_REPLY_ARRAY || map->elements == 0)
    rc = dlock__seterr(DLOCK_EUNAVAILABLE,
                       "redis-cluster: CLUSTER SLOTS gave no slots (is the "
                       "cluster created?)");
  for (size_t i = 0; !rc && i < map->elements; i++) {
    const redisReply *e = map->element[i];
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
        e->element[0]->type != REDIS_REPLY_INTEGER ||
        e->element[1]->type != REDIS_REPLY_INTEGER ||
        e->element[2]->type != REDIS_REPLY_ARRAY ||
        e->element[2]->elements < 2 ||
        e->element[2]->element[0]->type != REDIS_REPLY_STRING ||
        e->element[2]->element[1]->type != REDIS_REPLY_INTEGER) {
      rc = dlock__seterr(DLOCK_EPROTO, "CLUSTER SLOTS: unexpected reply");
      break;
    }
    long long lo = e->element[0]->integer, hi = e->element[1]->integer;
    if (lo < 0 || hi >= SLOTS || lo > hi) {
      rc = dlock__seterr(DLOCK_EPROTO, "CLUSTER SLOTS: slots %lld-%lld", lo,
                         hi);
      break;
    }
    uint8_t idx = 0;
    rc = add_master(cl, userinfo, ulen, e->element[2]->element[0], seed_host,
                    (long)e->element[2]->element[1]->integer, o, core, &idx);
    for (long long s = lo; !rc && s <= hi; s++)
      cl->owner[s] = idx;
  }
  freeReplyObject(map);
  if (rc) {
    cl_close(cl);
    return rc;
  }
  *be = cl;
  return 0;
}

static int cl_ping(void *be) {
  cluster *cl = be;
  for (size_t i = 0; i < cl->n; i++) {
    int rc = RB->ping(cl->node[i]);
    if (rc)
      return dlock__preferr(rc, "redis-cluster master %s", cl->addr[i]);
  }
  return 0;
}

/* ------------------------------------------------------------ locks */

static int cl_handle_open(void *be, dlock_lock_kind_t kind, const char *name,
                          void **bh) {
  ROUTE((cluster *)be, name, n);
  return RB->handle_open(n, kind, name, bh);
}

static void cl_handle_close(void *bh) { RB->handle_close(bh); }

static int cl_lock_acquire(void *be, const dlock__acquire *a, int64_t *pttl,
                           int64_t *token) {
  ROUTE((cluster *)be, a->name, n);
  return RB->lock_acquire(n, a, pttl, token);
}

static int cl_lock_leave(void *be, const dlock__acquire *a, uint64_t seq,
                         int64_t *token) {
  ROUTE((cluster *)be, a->name, n);
  return RB->lock_leave(n, a, seq, token);
}

static int cl_lock_release(void *be, void *bh, dlock_lock_kind_t kind,
                           const char *name, const char *owner,
                           int64_t lease_ms, const char *request_id) {
  ROUTE((cluster *)be, name, n);
  return RB->lock_release(n, bh, kind, name, owner, lease_ms, request_id);
}

static int cl_lock_force_release(void *be, dlock_lock_kind_t kind,
                                 const char *name, bool *deleted) {
  ROUTE((cluster *)be, name, n);
  return RB->lock_force_release(n, kind, name, deleted);
}

/* One batch per node: the items of each node are copied out, renewed, and
 * their results copied back. */
static int cl_lock_renew(void *be, dlock__renewal *items, size_t n,
                         int64_t lease_ms, int64_t deadline) {
  cluster *cl = be;
  dlock__renewal *part = dlock__calloc(n ? n : 1, sizeof *part);
  size_t *from = dlock__calloc(n ? n : 1, sizeof *from);
  int rc = part && from ? 0 : DLOCK_ENOMEM;
  for (size_t k = 0; !rc && k < cl->n; k++) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
      if (node_of(cl, items[i].name) == cl->node[k]) {
        part[m] = items[i];
        from[m++] = i;
      }
    if (m == 0)
      continue;
    int r = RB->lock_renew(cl->node[k], part, m, lease_ms, deadline);
    for (size_t j = 0; j < m; j++)
      items[from[j]].result = part[j].result;
    if (r && !rc)
      rc = r; /* the other nodes' items are still renewed */
  }
  for (size_t i = 0; !rc && i < n; i++)
    if (!node_of(cl, items[i].name))
      rc = dlock__seterr(DLOCK_EUNAVAILABLE, "redis-cluster: no master serves "
                                             "the slot of '%.200s'",
                         items[i].name);
  dlock__free(part);
  dlock__free(from);
  return rc;
}

static int cl_lock_query(void *be, dlock_lock_kind_t kind, const char *name,
                         const char *owner, dlock__lock_query q,
                         int64_t *out) {
  ROUTE((cluster *)be, name, n);
  return RB->lock_query(n, kind, name, owner, q, out);
}

static int cl_lock_state(void *be, dlock_lock_kind_t kind, const char *name,
                         dlock_lock_state_t **out) {
  ROUTE((cluster *)be, name, n);
  return RB->lock_state(n, kind, name, out);
}

/* ------------------------------------------------------------ waits */

static int cl_wait_begin(void *be, dlock__wait *w) {
  ROUTE((cluster *)be, w->spec->name, n);
  return RB->wait_begin(n, w);
}

static bool cl_wait_hot(void *be, const dlock__wait_spec *spec) {
  void *n = node_of(be, spec->name);
  return n && RB->wait_hot(n, spec);
}

static bool cl_wait_arm(void *be, dlock__wait *w, bool only_if_ready) {
  void *n = node_of(be, w->spec->name);
  return n && RB->wait_arm(n, w, only_if_ready);
}

static bool cl_wait_can_queue(void *be, dlock__wait *w) {
  void *n = node_of(be, w->spec->name);
  return n && RB->wait_can_queue(n, w);
}

static void cl_wait_end(void *be, dlock__wait *w) {
  void *n = node_of(be, w->spec->name);
  if (n)
    RB->wait_end(n, w);
}

static int cl_loop_prepare(void *be, int64_t now, struct pollfd *fds, int max,
                           int64_t *until) {
  cluster *cl = be;
  return dlock__redis_loop_prepare_nodes(cl->node, cl->n, cl->loop_nfds, now,
                                         fds, max, until);
}

static void cl_loop_dispatch(void *be, int64_t now, const struct pollfd *fds,
                             int n) {
  cluster *cl = be;
  dlock__redis_loop_dispatch_nodes(cl->node, cl->n, cl->loop_nfds, now, fds, n);
}

/* ------------------------------------------------------------ sync */

static int cl_sem_set(void *be, const char *name, int64_t permits,
                      bool *set) {
  ROUTE((cluster *)be, name, n);
  return RB->sem_set(n, name, permits, set);
}

static int cl_sem_add(void *be, const char *name, int64_t k) {
  ROUTE((cluster *)be, name, n);
  return RB->sem_add(n, name, k);
}

static int cl_sem_acquire(void *be, const char *name, int64_t permits) {
  ROUTE((cluster *)be, name, n);
  return RB->sem_acquire(n, name, permits);
}

static int cl_sem_release(void *be, const char *name, int64_t permits) {
  ROUTE((cluster *)be, name, n);
  return RB->sem_release(n, name, permits);
}

static int cl_sem_available(void *be, dlock__sync_kind kind, const char *name,
                            int64_t *out) {
  ROUTE((cluster *)be, name, n);
  return RB->sem_available(n, kind, name, out);
}

static int cl_sem_delete(void *be, dlock__sync_kind kind, const char *name,
                         bool *existed) {
  ROUTE((cluster *)be, name, n);
  return RB->sem_delete(n, kind, name, existed);
}

static int cl_psem_acquire(void *be, const char *name, const char *id,
                           int64_t lease_ms, int64_t *retry_in_ms) {
  ROUTE((cluster *)be, name, n);
  return RB->psem_acquire(n, name, id, lease_ms, retry_in_ms);
}

static int cl_psem_release(void *be, const char *name, const char *id) {
  ROUTE((cluster *)be, name, n);
  return RB->psem_release(n, name, id);
}

static int cl_psem_state(void *be, const char *name,
                         dlock_sem_state_t **out) {
  ROUTE((cluster *)be, name, n);
  return RB->psem_state(n, name, out);
}

static int cl_latch_set(void *be, const char *name, int64_t count,
                        bool *set) {
  ROUTE((cluster *)be, name, n);
  return RB->latch_set(n, name, count, set);
}

static int cl_latch_count_down(void *be, const char *name) {
  ROUTE((cluster *)be, name, n);
  return RB->latch_count_down(n, name);
}

static int cl_latch_count(void *be, const char *name, int64_t *out) {
  ROUTE((cluster *)be, name, n);
  return RB->latch_count(n, name, out);
}

static int cl_latch_delete(void *be, const char *name, bool *existed) {
  ROUTE((cluster *)be, name, n);
  return RB->latch_delete(n, name, existed);
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
