/*
 * redlock.c - Redlock (antirez's algorithm) as a backend over N independent
 * Redis backends, one per master. The core sees one backend; each node is
 * a whole Redis backend (src/redis/) with its own connection pool, its own
 * pub/sub connection and the Redisson layout of the lock (RLock,
 * RFencedLock), so Redisson's RedissonRedLock over the same masters and
 * this one exclude each other.
 *
 * A request (acquire, release, renewal) is prepared once
 * (dlock__redis_req), written to a connection of every node at once, and
 * the replies are gathered by one poll() on the calling thread (fanout):
 * each node has its own deadline, its send time plus the per-node timeout,
 * so a frozen node costs at most that timeout, and an acquire stops
 * waiting soon after a majority granted: the other nodes get as long again to
 * answer, at least 2 ms (a request cut off by closing its connection
 * may never run, which would leave the lock on a bare majority). A
 * connection whose reply did not come is closed (its reply may still
 * arrive), never pooled.
 *
 * Dials: a request goes first to the nodes with a pooled connection at
 * hand, then the others are dialled; a node whose dial failed rests for
 * dial_backoff() (its calls fail at once) unless the rest could not make a
 * majority without it.
 *
 * Acquire: granted when a majority (n/2 + 1) grants and the validity
 * lease - elapsed - drift (drift = lease x permille / 1000 + ms, elapsed
 * on the monotonic clock from before the first write) is positive; else it
 * releases on EVERY node (those that refused or did not answer included:
 * a late grant must not stay behind) and returns "held" with a bound that
 * is a random delay (split votes, slow nodes) or the time a majority's
 * holder keeps it; the core's wait retries then, or at once when a release
 * on any node wakes it. Waits queue nowhere (queue_kinds 0): a node's
 * hand-off would give the lock on one node only.
 *
 * Waiting: a wait registers one node wait (core/wait.h, `parent`) with
 * each node's backend; any node's release message wakes the caller's wait.
 *
 * Renewal: one batch to every node at once; an item stays held when a
 * majority renewed it and the round ended within the lease minus drift.
 * Fewer than a majority answering fails the batch (the core then reports
 * the holds lost by their vouching deadline); a majority answering without
 * the item reports it gone.
 *
 * Names and errors are the Redis backend's: check_name refuses the
 * dlock_lock_ space of dlock's own keys (the same on every node), and an
 * acquire that meets a key of another type on a node says so in its terms
 * (dlock__redis_lock_wrongtype). A release is one dlock__release request
 * for every node, with node 0's handle state (the key names are the
 * same everywhere).
 *
 * Options: the per-node timeout and the drift are Redlock's own block of
 * dlock_options_t (dlock__redlock_options_of; the core carries it without
 * knowing it), set by dlock_options_set_redlock_timing (api.c).
 *
 * Threads: every operation runs on its caller's thread (caller threads,
 * the renewal and settling workers) with no mutex of its own; the loop
 * hooks run on the event loop and only forward to the nodes' hooks
 * (loop_nfds is the loop's alone). Node backends lock what they share.
 */
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/id.h"
#include "core/wait.h"
#include "redis/redis.h"
#include "redlock/redlock.h"

#define MAX_NODES DLOCK_REDLOCK_MAX_NODES
#define NODE_ERR 200

typedef struct redlock {
  size_t n, quorum;
  void *node[MAX_NODES]; /* dlock__redis backends */
  int64_t node_timeout_ms;
  int64_t drift_permille, drift_ms;
  int loop_nfds[MAX_NODES]; /* loop thread only: each node's descriptors */
  /* a node whose dial failed is not dialled again before this (monotonic
   * ms): its requests fail at once meanwhile (dial_backoff) */
  _Atomic int64_t dial_after[MAX_NODES];
} redlock;

typedef struct rl_handle {
  size_t n;
  void *bh[MAX_NODES]; /* each node's handle state (may be NULL) */
} rl_handle;

typedef struct rl_wait {
  dlock__wait node[MAX_NODES]; /* node waits: parent = the caller's wait */
  dlock__wait_spec spec[MAX_NODES];
  size_t n;
} rl_wait;

static const dlock__backend_ops *const RB = &dlock__redis_backend;

size_t dlock__redlock_node_count(const void *be) {
  return ((const redlock *)be)->n;
}

/* ------------------------------------------------------------ options */

/* antirez's spec asks for 5-50 ms against a 10 s TTL; the drift is
 * node-redlock's and go-redsync's 0.01 x lease, plus 2 ms */
static const dlock__redlock_options defaults = {
    .node_timeout_ms = 50, .drift_permille = 10, .drift_ms = 2};

static void ro_init(void *block) {
  *(dlock__redlock_options *)block = defaults;
}

static int ro_copy(void *dst, const void *src) {
  *(dlock__redlock_options *)dst = *(const dlock__redlock_options *)src;
  return 0;
}

const dlock__options_ext_type dlock__redlock_options_type = {
    .size = sizeof(dlock__redlock_options),
    .init = ro_init,
    .copy = ro_copy,
};

const dlock__redlock_options *
dlock__redlock_options_of(const struct dlock_options *o) {
  const dlock__redlock_options *r =
      dlock__options_ext_get(o, &dlock__redlock_options_type);
  return r ? r : &defaults;
}

/* ------------------------------------------------------------- random */

static _Atomic uint64_t rnd_state;

/* splitmix64 over a shared counter: cheap, thread-safe, good enough to
 * keep two contenders' retry delays apart */
static uint64_t rnd_next(void) {
  uint64_t z = atomic_fetch_add(&rnd_state, 0x9e3779b97f4a7c15ull);
  if (z == 0) { /* first use: seed */
    uint64_t seed = 0;
    if (dlock__random_bytes(&seed, sizeof seed) != 0)
      seed = (uint64_t)dlock__now_ms() * 2654435761u;
    atomic_store(&rnd_state, seed | 1);
    z = seed;
  }
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static int64_t rnd_between(int64_t lo, int64_t hi) {
  if (hi <= lo)
    return lo;
  return lo + (int64_t)(rnd_next() % (uint64_t)(hi - lo));
}

/* The delay before another attempt after a split vote or a slow node:
 * random, so that contenders that collided do not collide again. */
static int64_t retry_delay(const redlock *rl) {
  int64_t t = rl->node_timeout_ms;
  return rnd_between(t / 2 + 1, 3 * t + 2);
}

static int64_t drift_of(const redlock *rl, int64_t lease) {
  return lease * rl->drift_permille / 1000 + rl->drift_ms;
}

/* ------------------------------------------------------------ fan-out */

typedef struct node_call {
  dlock__conn *conn;
  redisReply *rep; /* the reply (rc 0) */
  int rc;          /* <0: this node failed; err says why */
  bool done;       /* answered or failed */
  bool body;       /* resent as EVAL after NOSCRIPT */
  bool skipped;    /* not sent: the request was not for this node */
  bool sent;       /* failed after the whole request was written */
  int64_t deadline;
  char err[NODE_ERR];
} node_call;

static void call_fail(node_call *x, size_t i, int rc) {
  x->rc = rc;
  x->sent = x->conn && !dlock__conn_want_write(x->conn);
  x->done = true;
  snprintf(x->err, sizeof x->err, "node %zu: %s", i + 1, dlock_last_error());
}

/* How long a node whose dial failed is left alone: ten node timeouts, at
 * least 100 ms and at most 1 s. Each request to it would otherwise pay a
 * dial of up to a node timeout (an unreachable host answers nothing); a
 * majority is enough meanwhile, and a node back up takes part again
 * within this. */
static int64_t dial_backoff(const redlock *rl) {
  int64_t t = 10 * rl->node_timeout_ms;
  return t < 100 ? 100 : t > 1000 ? 1000 : t;
}

/* Decides early from the calls so far: true when the outcome cannot
 * change (the caller then stops reading). */
typedef bool (*decided_fn)(const node_call *calls, size_t n, void *arg);

/* Sends q to every node at once (every node i with only[i], when `only`
 * is given; the others are done, `skipped`) and reads the replies until each node
 * answered or failed (its own deadline: its send time plus the node
 * timeout, no later than `deadline`), or `decided` says the outcome is
 * known. Calls not done by then are failed with DLOCK_EIOTIMEOUT (or left
 * undone when decided). Connections are pooled again only when their
 * exchange is complete. */
static void fanout(redlock *rl, dlock__redis_req *q, node_call *calls,
                   const bool *only, int64_t deadline, decided_fn decided,
                   void *arg) {
  size_t n = rl->n;
  /* nodes in their dial back-off are skipped only while the others can
   * still make a majority; else every node is tried */
  int64_t t0 = dlock__now_ms();
  size_t resting = 0;
  for (size_t i = 0; i < n; i++)
    resting += t0 < atomic_load(&rl->dial_after[i]);
  bool skip_resting = n - resting >= rl->quorum;
  bool early[MAX_NODES] = {false}; /* sent in the first pass */
  /* first the nodes with a connection at hand, so that their requests are
   * on their way while the others are dialled (a dial can take up to the
   * node timeout: an unreachable host answers nothing) */
  for (int pass = 0; pass < 2; pass++) {
    for (size_t i = 0; i < n; i++) {
      node_call *x = &calls[i];
      if (pass == 0) {
        memset(x, 0, sizeof *x);
        if (only && !only[i]) {
          x->done = x->skipped = true;
          continue;
        }
      } else if (x->done || x->conn) {
        continue;
      }
      int64_t now = dlock__now_ms();
      x->deadline = now + rl->node_timeout_ms;
      if (x->deadline > deadline)
        x->deadline = deadline;
      int rc = 0;
      if (pass == 0) {
        x->conn = dlock__redis_pool_take_idle(rl->node[i]);
        if (!x->conn)
          continue; /* dialled in the second pass */
        early[i] = true;
      } else if (skip_resting && now < atomic_load(&rl->dial_after[i])) {
        rc = dlock__seterr(DLOCK_EUNAVAILABLE,
                           "not dialled: its last dial failed less than "
                           "%lld ms ago",
                           (long long)dial_backoff(rl));
      } else {
        /* a dial cut short by the caller's deadline says nothing */
        bool full = x->deadline == now + rl->node_timeout_ms;
        rc = dlock__redis_pool_get_until(rl->node[i], x->deadline, &x->conn);
        if (rc && full) /* the rest counts from the failure */
          atomic_store(&rl->dial_after[i],
                       dlock__now_ms() + dial_backoff(rl));
        else if (!rc)
          atomic_store(&rl->dial_after[i], 0);
      }
      if (!rc)
        rc = dlock__redis_req_append(x->conn, q, false);
      if (!rc)
        rc = dlock__conn_write_some(x->conn);
      if (rc)
        call_fail(x, i, rc);
    }
    if (pass == 0)
      t0 = dlock__now_ms();
  }
  /* the nodes sent to first wait no less for the time the dials took */
  int64_t dialled = dlock__now_ms() - t0;
  for (size_t i = 0; dialled > 0 && i < n; i++) {
    node_call *x = &calls[i];
    if (early[i] && !x->done && x->deadline < deadline)
      x->deadline = x->deadline + dialled < deadline ? x->deadline + dialled
                                                     : deadline;
  }
  struct pollfd pfd[MAX_NODES];
  size_t at[MAX_NODES];
  int64_t start = dlock__now_ms(), grace_end = DLOCK__NEVER;
  for (;;) {
    if (decided && grace_end == DLOCK__NEVER && decided(calls, n, arg)) {
      /* decided: the stragglers get as long again as the decision took
       * (at least 2 ms) to answer, so that a request a healthy node is
       * about to run is not cut off (a server may drop a request whose
       * connection closes before it ran it), then the rest are closed */
      int64_t now = dlock__now_ms();
      grace_end = now + (now - start > 2 ? now - start : 2);
    }
    int64_t now = dlock__now_ms(), until = DLOCK__NEVER;
    if (now >= grace_end)
      break;
    if (grace_end < until)
      until = grace_end;
    nfds_t np = 0;
    for (size_t i = 0; i < n; i++) {
      node_call *x = &calls[i];
      if (x->done)
        continue;
      if (now >= x->deadline) {
        call_fail(x, i,
                  dlock__seterr(DLOCK_EIOTIMEOUT,
                                "no answer within the node timeout (%lld ms)",
                                (long long)rl->node_timeout_ms));
        continue;
      }
      if (x->deadline < until)
        until = x->deadline;
      pfd[np].fd = dlock__conn_fd(x->conn);
      pfd[np].events =
          (short)(POLLIN | (dlock__conn_want_write(x->conn) ? POLLOUT : 0));
      pfd[np].revents = 0;
      at[np++] = i;
    }
    if (np == 0)
      break;
    int r = poll(pfd, np, dlock__poll_timeout(until));
    if (r <= 0)
      continue; /* EINTR or a deadline: looked at above */
    for (nfds_t k = 0; k < np; k++) {
      size_t i = at[k];
      node_call *x = &calls[i];
      if (!pfd[k].revents)
        continue;
      int rc = 0;
      if (pfd[k].revents & POLLOUT)
        rc = dlock__conn_write_some(x->conn);
      if (!rc && (pfd[k].revents & (POLLIN | POLLHUP | POLLERR)))
        rc = dlock__conn_read_some(x->conn);
      redisReply *rep = NULL;
      if (!rc)
        rc = dlock__conn_take_reply(x->conn, &rep);
      if (rc < 0) {
        call_fail(x, i, rc);
        continue;
      }
      if (rc == 0)
        continue; /* no whole reply yet */
      if (dlock__redis_is_noscript(rep) && !x->body) {
        /* the node lost its scripts (restart): send the body, which
         * loads it again, on the same connection */
        freeReplyObject(rep);
        x->body = true;
        int wr = dlock__redis_req_append(x->conn, q, true);
        if (!wr)
          wr = dlock__conn_write_some(x->conn);
        if (wr)
          call_fail(x, i, wr);
        continue;
      }
      x->rep = rep;
      x->done = true;
    }
  }
  for (size_t i = 0; i < n; i++) {
    node_call *x = &calls[i];
    if (!x->conn)
      continue;
    if (x->done && x->rc == 0)
      dlock__redis_pool_put(rl->node[i], x->conn);
    else
      dlock__conn_close(x->conn); /* a reply may still be on its way */
    x->conn = NULL;
  }
}

/* "node 2: ...; node 4: ..." of the failed calls, into buf. */
static void failures(const node_call *calls, size_t n, char *buf,
                     size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < n && used + 1 < len; i++) {
    if (!calls[i].done || calls[i].rc == 0)
      continue;
    int w = snprintf(buf + used, len - used, "%s%s", used ? "; " : "",
                     calls[i].err);
    if (w < 0)
      break;
    used += (size_t)w < len - used ? (size_t)w : len - used - 1;
  }
}

/* -------------------------------------------------------------- admin */

static void rl_close(void *be) {
  redlock *rl = be;
  if (!rl)
    return;
  for (size_t i = 0; i < rl->n; i++)
    if (rl->node[i])
      RB->close(rl->node[i]);
  dlock__free(rl);
}

static int rl_open(void **be, const char *urls, const struct dlock_options *o,
                   struct dlock_client *core) {
  *be = NULL;
  redlock *rl = dlock__calloc(1, sizeof *rl);
  if (!rl)
    return DLOCK_ENOMEM;
  const dlock__redlock_options *ro = dlock__redlock_options_of(o);
  rl->node_timeout_ms = ro->node_timeout_ms;
  rl->drift_permille = ro->drift_permille;
  rl->drift_ms = ro->drift_ms;
  const char *p = urls;
  int rc = 0;
  size_t down = 0;
  char first_down[NODE_ERR] = "";
  while (!rc && *p) {
    const char *end = strchr(p, '\n');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (rl->n == MAX_NODES) {
      rc = dlock__seterr(DLOCK_EINVAL, "redlock: more than %d nodes",
                         MAX_NODES);
      break;
    }
    char *url = dlock__calloc(1, len + 1);
    if (!url) {
      rc = DLOCK_ENOMEM;
      break;
    }
    memcpy(url, p, len);
    rc = RB->open(&rl->node[rl->n], url, o, core);
    if (rc == DLOCK_EUNAVAILABLE || rc == DLOCK_EIOTIMEOUT) {
      /* down now: a majority may still be up (checked below) */
      if (!down++)
        snprintf(first_down, sizeof first_down, "node %zu: %s", rl->n + 1,
                 dlock_last_error());
      rc = dlock__redis_open_unchecked(&rl->node[rl->n], url, o, core);
    }
    dlock__free(url);
    if (rc)
      dlock__preferr(rc, "redlock node %zu", rl->n + 1);
    else
      rl->n++;
    p = end ? end + 1 : p + len;
  }
  if (!rc && rl->n == 0)
    rc = dlock__seterr(DLOCK_EINVAL, "redlock: no nodes");
  if (!rc && down > rl->n - (rl->n / 2 + 1))
    rc = dlock__seterr(DLOCK_EUNAVAILABLE,
                       "redlock: %zu of %zu nodes are down, a majority must "
                       "be up (%s)",
                       down, rl->n, first_down);
  else if (!rc && down)
    dlock__log(core, DLOCK_LOG_WARN,
               "redlock: %zu of %zu nodes are down (%s); they are tried at "
               "each request",
               down, rl->n, first_down);
  if (rc) {
    rl_close(rl);
    return rc;
  }
  rl->quorum = rl->n / 2 + 1;
  *be = rl;
  return 0;
}

/* Answers from a majority (each node asked in turn). */
static int rl_ping(void *be) {
  redlock *rl = be;
  size_t ok = 0;
  char first[NODE_ERR] = "";
  int frc = 0;
  for (size_t i = 0; i < rl->n; i++) {
    int rc = RB->ping(rl->node[i]);
    if (!rc)
      ok++;
    else if (!frc) {
      frc = rc;
      snprintf(first, sizeof first, "node %zu: %s", i + 1, dlock_last_error());
    }
  }
  if (ok >= rl->quorum)
    return 0;
  return dlock__seterr(frc ? frc : DLOCK_EUNAVAILABLE,
                       "redlock: %zu of %zu nodes answered (a majority is "
                       "%zu): %s",
                       ok, rl->n, rl->quorum, first);
}

static int rl_handle_open(void *be, dlock_lock_kind_t kind, const char *name,
                          void **out) {
  redlock *rl = be;
  *out = NULL;
  rl_handle *h = dlock__calloc(1, sizeof *h);
  if (!h)
    return DLOCK_ENOMEM;
  for (size_t i = 0; i < rl->n; i++) {
    int rc = RB->handle_open(rl->node[i], kind, name, &h->bh[i]);
    if (rc) {
      for (size_t j = 0; j < i; j++)
        if (h->bh[j])
          RB->handle_close(h->bh[j]);
      dlock__free(h);
      return rc;
    }
    h->n++;
  }
  *out = h;
  return 0;
}

static void rl_handle_close(void *bh) {
  rl_handle *h = bh;
  if (!h)
    return;
  for (size_t i = 0; i < h->n; i++)
    if (h->bh[i])
      RB->handle_close(h->bh[i]);
  dlock__free(h);
}

static void *node_bh(const void *bh, size_t i) {
  const rl_handle *h = bh;
  return h && i < h->n ? h->bh[i] : NULL;
}

/* ------------------------------------------------------------ release */

typedef struct release_sum {
  size_t freed, down, notowner, failed;
} release_sum;

/* Releases on every node at once (those with only[i], when given),
 * waiting for each (a release must reach every node it can). */
static int release_all(redlock *rl, const dlock__release *r, const bool *only,
                       release_sum *sum, node_call *calls) {
  dlock__redis_req q;
  memset(sum, 0, sizeof *sum);
  /* every node's keys are the same names: one request serves them all */
  dlock__release r0 = *r;
  r0.bh = node_bh(r->bh, 0);
  int rc = dlock__redis_lock_release_req(rl->node[0], &r0, false, &q);
  if (rc)
    return rc;
  fanout(rl, &q, calls, only, DLOCK__NEVER, NULL, NULL);
  dlock__redis_req_clear(&q);
  for (size_t i = 0; i < rl->n; i++) {
    node_call *x = &calls[i];
    if (x->skipped)
      continue;
    if (x->rc || !x->rep) {
      sum->failed++;
      continue;
    }
    int out = dlock__redis_lock_release_reply(x->rep);
    x->rep = NULL;
    if (out == DLOCK__REL_FREED)
      sum->freed++;
    else if (out == DLOCK__REL_DOWN)
      sum->down++;
    else if (out == DLOCK__REL_NOTOWNER)
      sum->notowner++;
    else {
      call_fail(x, i, out);
      sum->failed++;
    }
  }
  return 0;
}

static int rl_lock_release(void *be, const dlock__release *r) {
  redlock *rl = be;
  node_call calls[MAX_NODES];
  release_sum s;
  int rc = release_all(rl, r, NULL, &s, calls);
  if (rc)
    return rc;
  if (s.failed >= rl->quorum) { /* the core retries with the same id */
    char why[600];
    failures(calls, rl->n, why, sizeof why);
    return dlock__seterr(DLOCK_EUNAVAILABLE,
                         "redlock release: %zu of %zu nodes failed: %s",
                         s.failed, rl->n, why);
  }
  /* the nodes that answered decide: a majority of them no longer had it
   * (expired, or never granted there) is a hold that was lost */
  if (s.notowner > s.freed + s.down)
    return DLOCK__REL_NOTOWNER;
  return s.down > s.freed ? DLOCK__REL_DOWN : DLOCK__REL_FREED;
}

/* After an attempt that failed: releases whatever it may have taken on
 * any node (a node that did not answer may have granted). Best effort: a
 * node that fails here lets the lease expire.
 *
 * A re-entry (a->reentry) adds a count to the thread's hold; a release
 * where it did not count would take the hold's own count instead, and the
 * thread would hold the lock on fewer nodes than it believes (below a
 * majority, another client could take it). So a re-entry is undone only
 * where it may have counted (`counted`): the nodes that granted it and
 * those that failed to answer after the whole request was written (or
 * were not waited for); never where it surely did not (a refusal, an
 * error reply, a request that could not be sent). */
static void undo_attempt(redlock *rl, const dlock__acquire *a,
                         const bool *counted) {
  char id[DLOCK__UUID_LEN + 1];
  if (dlock__uuid(id))
    snprintf(id, sizeof id, "redlock-%llx", (unsigned long long)rnd_next());
  char saved[512];
  snprintf(saved, sizeof saved, "%s", dlock_last_error());
  node_call calls[MAX_NODES];
  release_sum s;
  dlock__release r = {.bh = a->bh,
                      .kind = a->kind,
                      .name = a->name,
                      .owner = a->owner,
                      .lease_ms = a->lease_ms,
                      .request_id = id};
  release_all(rl, &r, a->reentry ? counted : NULL, &s, calls);
  dlock__seterr(0, "%s", saved);
}

/* ------------------------------------------------------------ acquire */

typedef struct acquire_tally {
  const redlock *rl;
  const dlock__acquire *a;
} acquire_tally;

/* Decided once a majority granted. An attempt that fails waits for every
 * node (or its timeout) instead: its release on every node must come after
 * each node's acquire, and a release sent on another connection while the
 * acquire is still on its way could overtake it and leave a grant behind
 * until its lease ends. */
static bool acquire_decided(const node_call *calls, size_t n, void *arg) {
  const acquire_tally *t = arg;
  size_t yes = 0;
  for (size_t i = 0; i < n; i++) {
    const node_call *x = &calls[i];
    /* a lock acquire's grant is nil, or an array (fenced) */
    if (x->done && !x->rc &&
        (x->rep->type == REDIS_REPLY_NIL || x->rep->type == REDIS_REPLY_ARRAY))
      yes++;
  }
  return yes >= t->rl->quorum;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* Nodes that did not grant the token `best` itself (a smaller one, or no
 * grant at all). */
static size_t lagging_tokens(const int64_t *toks, size_t n, int64_t best) {
  size_t lag = 0;
  for (size_t i = 0; i < n; i++)
    if (toks[i] != best)
      lag++;
  return lag;
}

static bool majority_ok(const node_call *calls, size_t n, void *arg) {
  const redlock *rl = arg;
  size_t ok = 0;
  for (size_t i = 0; i < n; i++)
    ok += calls[i].done && calls[i].rc == 0;
  return ok >= rl->quorum;
}

/* Raises the token counter to `token` on every node at once; 0 when a
 * majority confirmed. */
static int raise_token(redlock *rl, const char *name, int64_t token) {
  dlock__redis_req q;
  int rc = dlock__redis_token_raise_req(name, token, &q);
  if (rc)
    return rc;
  node_call calls[MAX_NODES];
  fanout(rl, &q, calls, NULL, DLOCK__NEVER, majority_ok, rl);
  dlock__redis_req_clear(&q);
  size_t ok = 0;
  for (size_t i = 0; i < rl->n; i++) {
    node_call *x = &calls[i];
    if (x->rep) {
      ok += x->rep->type == REDIS_REPLY_INTEGER && x->rep->integer >= token;
      freeReplyObject(x->rep);
      x->rep = NULL;
    }
  }
  return ok >= rl->quorum ? 0 : DLOCK_EUNAVAILABLE;
}

static int rl_lock_acquire(void *be, const dlock__acquire *a0, int64_t *pttl,
                           int64_t *token) {
  redlock *rl = be;
  dlock__acquire a = *a0;
  a.q = NULL; /* never queued: see the note at the top */
  int64_t drift = drift_of(rl, a.lease_ms);
  if (a.lease_ms <= drift)
    return dlock__seterr(DLOCK_EINVAL,
                         "redlock: a lease of %lld ms is not longer than the "
                         "clock drift allowed for (%lld ms): no grant could "
                         "ever be valid",
                         (long long)a.lease_ms, (long long)drift);
  dlock__acquire na = a;
  na.bh = node_bh(a.bh, 0);
  dlock__redis_req q;
  int rc = dlock__redis_lock_acquire_req(rl->node[0], &na, &q);
  if (rc)
    return rc;
  node_call calls[MAX_NODES];
  acquire_tally t = {rl, &a};
  int64_t start = dlock__now_ms();
  fanout(rl, &q, calls, NULL, DLOCK__NEVER, acquire_decided, &t);
  int64_t elapsed = dlock__now_ms() - start;
  dlock__redis_req_clear(&q);

  size_t granted = 0, refused = 0, failed = 0;
  int64_t best_token = 0, held[MAX_NODES], toks[MAX_NODES];
  bool counted[MAX_NODES]; /* the attempt may have counted there */
  int hard = 0; /* an error no retry can cure (wrong type) */
  for (size_t i = 0; i < rl->n; i++) {
    node_call *x = &calls[i];
    toks[i] = -1;
    counted[i] = !x->done || (x->rc && x->sent);
    if (!x->done)
      continue; /* decided without it: its grant, if any, is undone or ours */
    if (x->rc) {
      failed++;
      continue;
    }
    int64_t p = -1, tok = 0;
    int out = dlock__redis_lock_acquire_reply(&na, x->rep, &p, &tok);
    x->rep = NULL;
    toks[i] = out == 1 ? tok : -1;
    if (out == 1) {
      counted[i] = true;
      granted++;
      if (tok > best_token)
        best_token = tok;
    } else if (out == 0) {
      held[refused++] = p < 0 ? INT64_MAX : p;
    } else {
      call_fail(x, i, out);
      failed++;
      if (out == DLOCK_EWRONGTYPE)
        hard = out;
    }
  }
  if (granted >= rl->quorum && a.kind == DLOCK_FENCED &&
      lagging_tokens(toks, rl->n, best_token) > rl->n - rl->quorum) {
    /* fewer than a majority counted up to the token: raise it on a
     * majority before it is handed out, or a later majority without the
     * node that was ahead could hand out a smaller one */
    if (raise_token(rl, a.name, best_token) != 0)
      granted = 0; /* no valid token: the attempt failed */
    elapsed = dlock__now_ms() - start;
  }
  int64_t validity = a.lease_ms - elapsed - drift;
  if (granted >= rl->quorum && validity > 0) {
    *token = best_token;
    return 1;
  }
  char why[600];
  failures(calls, rl->n, why, sizeof why);
  undo_attempt(rl, &a, counted);
  if (hard) /* said as a single node's would be */
    return dlock__redis_lock_wrongtype(dlock__seterr(hard, "redlock: %s", why),
                                       a.name);
  if (failed > rl->n - rl->quorum) {
    dlock__seterr(DLOCK_EUNAVAILABLE,
                  "redlock: %zu of %zu nodes answered, a majority is %zu (%s)",
                  rl->n - failed, rl->n, rl->quorum, why);
    /* undone on every node: a wait tries again (dlock__wait_retry) */
    dlock__err_set_unsent(true);
    return DLOCK_EUNAVAILABLE;
  }
  if (refused >= rl->quorum) {
    /* a majority has a holder: past the quorum-th shortest of their leases
     * fewer than a majority can still refuse (a safety net: a release on
     * any node wakes the wait first) */
    qsort(held, refused, sizeof held[0], cmp_i64);
    int64_t bound = held[refused - rl->quorum];
    *pttl = bound == INT64_MAX ? -1 : bound + retry_delay(rl);
  } else {
    /* a split vote, a slow node, or a grant that came too late to be
     * valid: try again after a random delay */
    *pttl = retry_delay(rl);
  }
  return 0;
}

/* ------------------------------------------------------------- renew */

static int rl_lock_renew(void *be, dlock__renewal *items, size_t n,
                         int64_t lease_ms, int64_t deadline) {
  redlock *rl = be;
  if (n == 0)
    return 0;
  int *votes = dlock__calloc(n, sizeof *votes);
  int *res = dlock__calloc(n, sizeof *res);
  dlock__redis_req q;
  int rc = !votes || !res ? DLOCK_ENOMEM
                          : dlock__redis_lock_renew_req(
                             items, n, lease_ms,
                             dlock__redis_has_holder_info(rl->node[0]), &q);
  if (rc) {
    dlock__free(votes);
    dlock__free(res);
    return rc;
  }
  node_call calls[MAX_NODES];
  int64_t start = dlock__now_ms();
  fanout(rl, &q, calls, NULL, deadline, NULL, NULL);
  int64_t elapsed = dlock__now_ms() - start;
  dlock__redis_req_clear(&q);
  size_t answered = 0;
  for (size_t i = 0; i < rl->n; i++) {
    node_call *x = &calls[i];
    if (x->rc || !x->rep)
      continue;
    int out = dlock__redis_lock_renew_reply(x->rep, n, res);
    x->rep = NULL;
    if (out) {
      call_fail(x, i, out);
      continue;
    }
    answered++;
    for (size_t k = 0; k < n; k++)
      votes[k] += res[k];
  }
  char why[600];
  failures(calls, rl->n, why, sizeof why);
  if (answered < rl->quorum) {
    rc = dlock__seterr(DLOCK_EUNAVAILABLE,
                       "redlock renewal: %zu of %zu nodes answered, a "
                       "majority is %zu (%s)",
                       answered, rl->n, rl->quorum, why);
  } else if (lease_ms - elapsed - drift_of(rl, lease_ms) <= 0) {
    rc = dlock__seterr(DLOCK_EIOTIMEOUT,
                       "redlock renewal: took %lld ms, longer than the lease "
                       "allows",
                       (long long)elapsed);
  } else {
    for (size_t k = 0; k < n; k++)
      items[k].result = (size_t)votes[k] >= rl->quorum;
  }
  dlock__free(votes);
  dlock__free(res);
  return rc;
}

/* ------------------------------------------------------------- others */

static int rl_lock_leave(void *be, const dlock__acquire *a, uint64_t seq,
                         int64_t *token) {
  (void)be, (void)a, (void)seq, (void)token;
  return 0; /* nothing queues on a Redlock */
}

static int rl_lock_force_release(void *be, dlock_lock_kind_t kind,
                                 const char *name, bool *deleted) {
  redlock *rl = be;
  size_t ok = 0;
  int frc = 0;
  char first[NODE_ERR] = "";
  *deleted = false;
  for (size_t i = 0; i < rl->n; i++) {
    bool d = false;
    int rc = RB->lock_force_release(rl->node[i], kind, name, &d);
    if (!rc) {
      ok++;
      *deleted = *deleted || d;
    } else if (!frc) {
      frc = rc;
      snprintf(first, sizeof first, "node %zu: %s", i + 1, dlock_last_error());
    }
  }
  if (ok >= rl->quorum)
    return 0;
  return dlock__seterr(frc, "redlock force release: %zu of %zu nodes did it "
                            "(%s)",
                       ok, rl->n, first);
}

/* The majority's view: the quorum-th largest of the answers (at least a
 * majority of the nodes report this much or more), each node asked in
 * turn. */
static int rl_lock_query(void *be, dlock_lock_kind_t kind, const char *name,
                         const char *owner, dlock__lock_query qq,
                         int64_t *out) {
  redlock *rl = be;
  int64_t v[MAX_NODES];
  size_t got = 0;
  int frc = 0;
  char first[NODE_ERR] = "";
  /* every node at once, each within the node timeout; decided once a
   * majority answered (the others get the fan-out's grace) */
  dlock__redis_req q;
  int rc = dlock__redis_lock_query_req(kind, name, owner, qq, &q);
  if (rc)
    return rc;
  node_call calls[MAX_NODES];
  fanout(rl, &q, calls, NULL, DLOCK__NEVER, majority_ok, rl);
  dlock__redis_req_clear(&q);
  for (size_t i = 0; i < rl->n; i++) {
    node_call *x = &calls[i];
    if (!x->done)
      continue; /* decided without it */
    if (!x->rc) {
      rc = dlock__redis_lock_query_reply(qq, x->rep, &v[got]);
      x->rep = NULL;
      if (rc)
        call_fail(x, i, rc);
      else
        got++;
    }
    if (x->rc && !frc) {
      frc = x->rc;
      snprintf(first, sizeof first, "%s", x->err);
    }
  }
  if (got < rl->quorum)
    return dlock__seterr(frc, "redlock: %zu of %zu nodes answered (%s)", got,
                         rl->n, first);
  /* -1 (no expiry) ranks above every lease */
  for (size_t i = 0; i < got; i++)
    if (qq == DLOCK__Q_REMAINING && v[i] == -1)
      v[i] = INT64_MAX;
  qsort(v, got, sizeof v[0], cmp_i64);
  *out = v[got - rl->quorum];
  if (*out == INT64_MAX)
    *out = -1;
  return 0;
}

/* The first answering node's state (dlock_lock_node_state shows each). */
static int rl_lock_state(void *be, dlock_lock_kind_t kind, const char *name,
                         dlock_lock_state_t **out) {
  redlock *rl = be;
  int rc = DLOCK_EUNAVAILABLE;
  for (size_t i = 0; i < rl->n; i++)
    if ((rc = RB->lock_state(rl->node[i], kind, name, out)) == 0)
      return 0;
  return rc;
}

int dlock__redlock_node_state(void *be, size_t i, dlock_lock_kind_t kind,
                              const char *name, dlock_lock_state_t **out) {
  redlock *rl = be;
  if (i >= rl->n)
    return dlock__seterr(DLOCK_EINVAL, "node %zu: this Redlock has %zu nodes",
                         i + 1, rl->n);
  return RB->lock_state(rl->node[i], kind, name, out);
}

/* ---------------------------------------------------------------- waits */

static int rl_wait_begin(void *be, dlock__wait *w) {
  redlock *rl = be;
  rl_wait *x = dlock__calloc(1, sizeof *x);
  if (!x)
    return DLOCK_ENOMEM;
  for (size_t i = 0; i < rl->n; i++) {
    x->spec[i] = *w->spec;
    x->spec[i].bh = node_bh(w->spec->bh, i);
    dlock__wait *nw = &x->node[i];
    nw->c = w->c;
    nw->spec = &x->spec[i];
    nw->parent = w;
    int rc = RB->wait_begin(rl->node[i], nw);
    if (rc) {
      for (size_t j = 0; j < x->n; j++)
        RB->wait_end(rl->node[j], &x->node[j]);
      dlock__free(x);
      return rc;
    }
    x->n++;
  }
  w->reg = x;
  return 0;
}

static bool rl_wait_hot(void *be, const dlock__wait_spec *spec) {
  redlock *rl = be;
  for (size_t i = 0; i < rl->n; i++) {
    dlock__wait_spec s = *spec;
    s.bh = node_bh(spec->bh, i);
    if (RB->wait_hot(rl->node[i], &s))
      return true;
  }
  return false;
}

static bool rl_wait_arm(void *be, dlock__wait *w, bool only_if_ready) {
  redlock *rl = be;
  rl_wait *x = w->reg;
  bool any = false;
  for (size_t i = 0; i < x->n; i++)
    any = RB->wait_arm(rl->node[i], &x->node[i], only_if_ready) || any;
  return any;
}

static bool rl_wait_can_queue(void *be, dlock__wait *w) {
  (void)be, (void)w;
  return false;
}

static void rl_wait_end(void *be, dlock__wait *w) {
  redlock *rl = be;
  rl_wait *x = w->reg;
  if (!x)
    return;
  for (size_t i = 0; i < x->n; i++)
    RB->wait_end(rl->node[i], &x->node[i]);
  dlock__free(x);
  w->reg = NULL;
}

/* ------------------------------------------------------- the event loop */

static int rl_loop_prepare(void *be, int64_t now, struct pollfd *fds, int max,
                           int64_t *until) {
  redlock *rl = be;
  return dlock__redis_loop_prepare_nodes(rl->node, rl->n, rl->loop_nfds, now,
                                         fds, max, until);
}

static void rl_loop_dispatch(void *be, int64_t now, const struct pollfd *fds,
                             int n) {
  redlock *rl = be;
  dlock__redis_loop_dispatch_nodes(rl->node, rl->n, rl->loop_nfds, now, fds, n);
}

static const char *const rl_schemes[] = {NULL};

const dlock__backend_ops dlock__redlock_backend = {
    .name = "redlock",
    .schemes = rl_schemes,
    .lock_kinds = (1u << DLOCK_REENTRANT) | (1u << DLOCK_FENCED),
    .sync_kinds = 0,
    .queue_kinds = 0,
    .open = rl_open,
    .close = rl_close,
    .ping = rl_ping,
    .check_name = dlock__redis_check_name, /* the same keys on every node */
    .handle_open = rl_handle_open,
    .handle_close = rl_handle_close,
    .lock_acquire = rl_lock_acquire,
    .lock_leave = rl_lock_leave,
    .lock_release = rl_lock_release,
    .lock_force_release = rl_lock_force_release,
    .lock_renew = rl_lock_renew,
    .lock_query = rl_lock_query,
    .lock_state = rl_lock_state,
    .wait_begin = rl_wait_begin,
    .wait_hot = rl_wait_hot,
    .wait_arm = rl_wait_arm,
    .wait_can_queue = rl_wait_can_queue,
    .wait_end = rl_wait_end,
    .loop_prepare = rl_loop_prepare,
    .loop_dispatch = rl_loop_dispatch,
};
