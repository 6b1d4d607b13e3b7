/*
 * redis.c - the Redis backend: connection pool, handshake, scripts and the
 * reentrant-lock operations in Redisson's layout (REDIS-LAYOUT.md).
 *
 * Connections: caller threads borrow a connection from a small idle pool
 * (pool_mu guards only the idle array, never I/O) and return it after one
 * round trip; when the pool is empty a new connection is dialled, and extra
 * ones are closed on return, so callers never wait for each other. An idle
 * connection whose peer has closed it (server restarted) is discarded
 * before use, so a restart costs one reconnect, not a failed call.
 *
 * Scripts go by EVALSHA; on NOSCRIPT (restarted or failed-over server) the
 * same connection resends them as EVAL, which also loads them again.
 *
 * Retrying: a request whose reply is lost is only re-sent here when
 * re-sending is harmless (force release, queue leave, state). Acquire is
 * never re-sent (a second HINCRBY would count a hold twice); release is
 * retried by the core with the same request id (see lock.c).
 */
#include "redis/redis.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/id.h"

#define MAX_ARGS 24
#define RENEW_BATCH 500
#define LOCK_CHANNEL_PREFIX "redisson_lock__channel"
#define LATCH_PREFIX "redisson_unlock_latch"
#define QUEUE_PREFIX "dlock_lock_queue"
#define QUEUE_TIMEOUT_PREFIX "dlock_lock_queue_timeout"
#define GRANT_PREFIX "dlock_lock_grant"
#define YIELD_PREFIX "dlock_lock_yield"
/* At most one release per this period leaves the lock to a race instead of
 * handing it over, when outsiders may be waiting (lock_release.lua). */
#define YIELD_PERIOD_MS "50"

/* ------------------------------------------------------------ utilities */

char *dlock__redis_prefixed(const char *prefix, const char *name) {
  if (strchr(name, '{'))
    return dlock__asprintf("%s:%s", prefix, name);
  return dlock__asprintf("%s:{%s}", prefix, name);
}

/* Redisson's rule above maps "x" and "{x}" to the same string: harmless for
 * its channel (a spurious wake-up), fatal for a hand-off queue. dlock's own
 * keys and channels keep the slot but separate the two families: a name
 * with a '{' gets "prefix:=name" (its own hash tag decides the slot), one
 * without gets "prefix:{name}"; the character after the colon tells them
 * apart, so the mapping is one-to-one. */
char *dlock__redis_own_key(const char *prefix, const char *name) {
  if (strchr(name, '{'))
    return dlock__asprintf("%s:=%s", prefix, name);
  return dlock__asprintf("%s:{%s}", prefix, name);
}

static bool starts_with(const redisReply *r, const char *p) {
  size_t n = strlen(p);
  return r->len >= n && memcmp(r->str, p, n) == 0;
}

int dlock__redis_error(const redisReply *reply, const char *what) {
  const char *msg = reply->str ? reply->str : "";
  int n = reply->len > 300 ? 300 : (int)reply->len;
  int code = DLOCK_ESERVER;
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
static int append_cmd(dlock__conn *c, int argc, const char **argv) {
  size_t lens[MAX_ARGS * 2];
  if (argc > (int)(sizeof lens / sizeof lens[0]))
    return dlock__seterr(DLOCK_EINVAL, "too many arguments");
  for (int i = 0; i < argc; i++)
    lens[i] = strlen(argv[i]);
  return dlock__conn_append(c, argc, argv, lens);
}

/* ----------------------------------------------------------- handshake */

int dlock__redis_dial(dlock__redis *r, bool select_db, int64_t until,
                      dlock__conn **out) {
  *out = NULL;
  int64_t deadline = dlock__deadline_after(r->connect_timeout_ms);
  if (until < deadline)
    deadline = until;
  dlock__conn *c = NULL;
  int rc = dlock__conn_connect(&c, r->ep, deadline);
  if (rc)
    return rc;
  size_t n = 0;
  const char *what[3];
  char db[16];
  if (r->password) {
    const char *a[3] = {"AUTH", r->user ? r->user : r->password, r->password};
    rc = append_cmd(c, r->user ? 3 : 2, a);
    what[n++] = "AUTH";
  }
  if (!rc && select_db && r->db != 0) {
    snprintf(db, sizeof db, "%d", r->db);
    const char *a[2] = {"SELECT", db};
    rc = append_cmd(c, 2, a);
    what[n++] = "SELECT";
  }
  if (!rc && r->client_name) {
    const char *a[3] = {"CLIENT", "SETNAME", r->client_name};
    rc = append_cmd(c, 3, a);
    what[n++] = "CLIENT SETNAME";
  }
  if (!rc && n > 0) {
    redisReply *rep[3] = {NULL, NULL, NULL};
    rc = dlock__conn_exec(c, deadline, n, rep);
    for (size_t i = 0; i < n && rep[0]; i++) {
      if (!rc && rep[i]->type == REDIS_REPLY_ERROR) {
        char ctx[400];
        snprintf(ctx, sizeof ctx, "%s: %s refused", r->ep->display, what[i]);
        rc = dlock__redis_error(rep[i], ctx);
        if (i == 0 && r->password)
          rc = DLOCK_EAUTH;
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

/* ---------------------------------------------------------------- pool */

static int pool_get_until(dlock__redis *r, int64_t until, dlock__conn **out) {
  for (;;) {
    dlock__conn *c = NULL;
    pthread_mutex_lock(&r->pool_mu);
    if (r->nidle > 0)
      c = r->idle[--r->nidle];
    pthread_mutex_unlock(&r->pool_mu);
    if (!c)
      return dlock__redis_dial(r, true, until, out);
    if (!dlock__conn_peer_closed(c)) {
      *out = c;
      return 0;
    }
    dlock__conn_close(c);
  }
}

static int pool_get(dlock__redis *r, dlock__conn **out) {
  return pool_get_until(r, DLOCK__NEVER, out);
}

static void pool_put(dlock__redis *r, dlock__conn *c) {
  if (!c)
    return;
  if (dlock__conn_broken(c)) {
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

/* Runs n commands already appended to c in one round trip. */
static int roundtrip(dlock__redis *r, dlock__conn *c, size_t n,
                     redisReply **rep) {
  return dlock__conn_exec(c, dlock__deadline_after(r->command_timeout_ms), n,
                          rep);
}

/* One plain command on a pooled connection. */
static int command(dlock__redis *r, int argc, const char **argv,
                   redisReply **reply) {
  dlock__conn *c = NULL;
  int rc = pool_get(r, &c);
  if (!rc)
    rc = append_cmd(c, argc, argv);
  if (!rc)
    rc = roundtrip(r, c, 1, reply);
  pool_put(r, c);
  if (!rc && (*reply)->type == REDIS_REPLY_ERROR) {
    rc = dlock__redis_error(*reply, argv[0]);
    freeReplyObject(*reply);
    *reply = NULL;
  }
  return rc;
}

/* Appends EVALSHA (or EVAL when `body`) of script s. argv[0..2] are
 * reserved for the command, the sha/body and numkeys. */
static int append_script(dlock__conn *c, const dlock__script *s, bool body,
                         int nkeys, int argc, const char **argv, size_t *lens) {
  char nk[16];
  snprintf(nk, sizeof nk, "%d", nkeys);
  argv[0] = body ? "EVAL" : "EVALSHA";
  lens[0] = strlen(argv[0]);
  argv[1] = body ? s->body : s->sha;
  lens[1] = body ? s->len : 40;
  argv[2] = nk;
  lens[2] = strlen(nk);
  return dlock__conn_append(c, argc, argv, lens);
}

static bool is_noscript(const redisReply *rep) {
  return rep->type == REDIS_REPLY_ERROR && starts_with(rep, "NOSCRIPT");
}

/* Runs one script; `retry_safe` allows one resend on a fresh connection if
 * the first connection broke (only for idempotent scripts). argv[3..] hold
 * keys then args (C strings); argv[0..2] are filled here. */
static int script(dlock__redis *r, const dlock__script *s, int nkeys, int argc,
                  const char **argv, bool retry_safe, redisReply **reply) {
  size_t lens[MAX_ARGS];
  if (argc > MAX_ARGS)
    return dlock__seterr(DLOCK_EINVAL, "too many script arguments");
  for (int i = 3; i < argc; i++)
    lens[i] = strlen(argv[i]);
  int rc = 0;
  for (int attempt = 0; attempt < 2; attempt++) {
    dlock__conn *c = NULL;
    rc = pool_get(r, &c);
    if (rc)
      return rc;
    rc = append_script(c, s, false, nkeys, argc, argv, lens);
    if (!rc)
      rc = roundtrip(r, c, 1, reply);
    if (!rc && is_noscript(*reply)) {
      freeReplyObject(*reply);
      *reply = NULL;
      rc = append_script(c, s, true, nkeys, argc, argv, lens);
      if (!rc)
        rc = roundtrip(r, c, 1, reply);
    }
    bool broke = rc && dlock__conn_broken(c);
    pool_put(r, c);
    if (!rc || !retry_safe || !broke)
      break;
  }
  if (!rc && (*reply)->type == REDIS_REPLY_ERROR) {
    rc = dlock__redis_error(*reply, s->name);
    freeReplyObject(*reply);
    *reply = NULL;
  }
  return rc;
}

static int unexpected(redisReply *rep, const char *what) {
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
  dlock__redis_watch_disconnect(r);
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
  dlock__free(r);
}

static int redis_ping(void *be) {
  redisReply *rep = NULL;
  const char *argv[] = {"PING"};
  int rc = command(be, 1, argv, &rep);
  if (rc)
    return rc;
  if (rep->type != REDIS_REPLY_STATUS)
    return unexpected(rep, "PING");
  freeReplyObject(rep);
  return 0;
}

static int redis_open(void **be, const dlock__endpoint *ep,
                      const struct dlock_options *o) {
  *be = NULL;
  dlock__redis *r = dlock__calloc(1, sizeof *r);
  if (!r)
    return DLOCK_ENOMEM;
  pthread_mutex_init(&r->pool_mu, NULL);
  r->ep = ep;
  r->connect_timeout_ms = o->connect_timeout_ms;
  r->command_timeout_ms = o->command_timeout_ms;
  r->db = ep->db;
  r->pool_size = o->pool_size;
  r->publish = "publish";
  const char *user = o->credentials_set ? o->user : ep->user;
  const char *pass = o->credentials_set ? o->password : ep->password;
  int rc = 0;
  if ((user && !(r->user = dlock__strdup(user))) ||
      (pass && !(r->password = dlock__strdup(pass))) ||
      (o->client_name && !(r->client_name = dlock__strdup(o->client_name))) ||
      !(r->idle = dlock__calloc((size_t)r->pool_size, sizeof *r->idle)))
    rc = DLOCK_ENOMEM;
  if (!rc) {
    /* dial once so a bad address or password is reported now */
    dlock__conn *c = NULL;
    rc = dlock__redis_dial(r, true, DLOCK__NEVER, &c);
    if (!rc) {
      pool_put(r, c);
      rc = redis_ping(r);
      if (rc)
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

/* -------------------------------------------------------- backend: lock */

static char *redis_lock_channel(void *be, const char *name) {
  (void)be;
  return dlock__redis_prefixed(LOCK_CHANNEL_PREFIX, name);
}

/* The per-lock key names of dlock's wait queue (same cluster slot). */
typedef struct queue_keys {
  char *queue, *timeouts;
} queue_keys;

static int queue_keys_make(queue_keys *k, const char *name) {
  k->queue = dlock__redis_own_key(QUEUE_PREFIX, name);
  k->timeouts = dlock__redis_own_key(QUEUE_TIMEOUT_PREFIX, name);
  return k->queue && k->timeouts ? 0 : DLOCK_ENOMEM;
}

static void queue_keys_clear(queue_keys *k) {
  dlock__free(k->queue);
  dlock__free(k->timeouts);
}

static char *redis_lock_grant_channel(void *be, const char *name,
                                      const char *client_id) {
  (void)be;
  char *prefix = dlock__redis_own_key(GRANT_PREFIX, name);
  char *ch = prefix ? dlock__asprintf("%s:%s", prefix, client_id) : NULL;
  dlock__free(prefix);
  return ch;
}

static int redis_lock_acquire(void *be, const char *name, const char *owner,
                              int64_t lease_ms, const dlock__queue_entry *q,
                              int64_t *pttl) {
  char lease[24], ttl[24];
  snprintf(lease, sizeof lease, "%" PRId64, lease_ms);
  snprintf(ttl, sizeof ttl, "%" PRId64, q ? q->ttl_ms : 0);
  queue_keys k;
  int rc = queue_keys_make(&k, name);
  redisReply *rep = NULL;
  if (!rc) {
    const char *argv[MAX_ARGS] = {0,
                                  0,
                                  0,
                                  name,
                                  k.queue,
                                  k.timeouts,
                                  lease,
                                  owner,
                                  q ? q->member : "",
                                  ttl,
                                  q && q->queued ? "1" : "0"};
    rc = script(be, &dlock__script_lock_acquire, 3, 11, argv, false, &rep);
  }
  queue_keys_clear(&k);
  if (rc)
    return rc;
  if (rep->type == REDIS_REPLY_NIL) {
    freeReplyObject(rep);
    return 1;
  }
  if (rep->type != REDIS_REPLY_INTEGER)
    return unexpected(rep, "lock acquire");
  *pttl = rep->integer;
  freeReplyObject(rep);
  return 0;
}

static int redis_lock_leave(void *be, const char *name, const char *owner,
                            const char *member, int64_t lease_ms) {
  char lease[24];
  snprintf(lease, sizeof lease, "%" PRId64, lease_ms);
  queue_keys k;
  int rc = queue_keys_make(&k, name);
  redisReply *rep = NULL;
  if (!rc) {
    const char *argv[MAX_ARGS] = {0,          0,     0,      name, k.queue,
                                  k.timeouts, owner, member, lease};
    rc = script(be, &dlock__script_lock_leave, 3, 9, argv, true, &rep);
  }
  queue_keys_clear(&k);
  if (rc)
    return rc;
  if (rep->type != REDIS_REPLY_INTEGER)
    return unexpected(rep, "lock leave");
  rc = rep->integer == 1;
  freeReplyObject(rep);
  return rc;
}

static int redis_lock_release(void *be, const char *name, const char *owner,
                              int64_t lease_ms, const char *request_id,
                              bool watching) {
  dlock__redis *r = be;
  char lease[24], latch_ms[24];
  snprintf(lease, sizeof lease, "%" PRId64, lease_ms);
  /* the latch must outlive the core's own retry (a reconnect plus a round
   * trip) and a prompt retry by the user; see dlock_lock_release() */
  int64_t latch = 2 * (r->command_timeout_ms + r->connect_timeout_ms);
  if (latch < 10000)
    latch = 10000;
  if (latch > 60000)
    latch = 60000;
  snprintf(latch_ms, sizeof latch_ms, "%" PRId64, latch);
  char *channel = dlock__redis_prefixed(LOCK_CHANNEL_PREFIX, name);
  char *latch_prefix = dlock__redis_prefixed(LATCH_PREFIX, name);
  char *grant = dlock__redis_own_key(GRANT_PREFIX, name);
  char *yield = dlock__redis_own_key(YIELD_PREFIX, name);
  char *latch_key =
      latch_prefix ? dlock__asprintf("%s:%s", latch_prefix, request_id) : NULL;
  queue_keys k;
  int rc = queue_keys_make(&k, name);
  if (!rc && (!channel || !latch_key || !grant || !yield))
    rc = DLOCK_ENOMEM;
  if (!rc) {
    const char *argv[MAX_ARGS] = {0,
                                  0,
                                  0,
                                  name,
                                  channel,
                                  latch_key,
                                  k.queue,
                                  k.timeouts,
                                  yield,
                                  "0",
                                  lease,
                                  owner,
                                  r->publish,
                                  latch_ms,
                                  grant,
                                  YIELD_PERIOD_MS,
                                  watching ? "1" : "0"};
    redisReply *rep = NULL;
    /* no resend here: the core retries with the same request id, knowing
     * that a retry answered "not owner" means the first one released */
    rc = script(r, &dlock__script_lock_release, 6, 17, argv, false, &rep);
    if (!rc) {
      if (rep->type == REDIS_REPLY_NIL)
        rc = DLOCK__REL_NOTOWNER;
      else if (rep->type == REDIS_REPLY_INTEGER &&
               (rep->integer == 0 || rep->integer == 1))
        rc = rep->integer == 1 ? DLOCK__REL_FREED : DLOCK__REL_DOWN;
      else
        rep = (rc = unexpected(rep, "lock release"), NULL);
      if (rep)
        freeReplyObject(rep);
    }
  }
  queue_keys_clear(&k);
  dlock__free(grant);
  dlock__free(yield);
  dlock__free(channel);
  dlock__free(latch_prefix);
  dlock__free(latch_key);
  return rc;
}

static int redis_lock_force_release(void *be, const char *name, bool *deleted) {
  dlock__redis *r = be;
  char *channel = dlock__redis_prefixed(LOCK_CHANNEL_PREFIX, name);
  if (!channel)
    return DLOCK_ENOMEM;
  const char *argv[MAX_ARGS] = {0, 0, 0, name, channel, "0", r->publish};
  redisReply *rep = NULL;
  /* never re-sent: if the first DEL ran and a waiter then took the lock,
   * a second one would delete the new owner's lock */
  int rc =
      script(r, &dlock__script_lock_force_release, 2, 7, argv, false, &rep);
  dlock__free(channel);
  if (rc)
    return rc;
  if (rep->type != REDIS_REPLY_INTEGER)
    return unexpected(rep, "force release");
  *deleted = rep->integer == 1;
  freeReplyObject(rep);
  return 0;
}

/* Renewal: every batch of RENEW_BATCH locks is one EVALSHA, and all batches
 * go in one pipelined round trip. NOSCRIPT batches are resent as EVAL in a
 * second round trip on the same connection. */
static int renew_append(dlock__conn *c, dlock__renewal *items, size_t n,
                        const char *lease, bool body, const char **argv,
                        size_t *lens) {
  size_t argc = 3 + n + 1 + n;
  for (size_t i = 0; i < n; i++) {
    argv[3 + i] = items[i].name;
    lens[3 + i] = strlen(items[i].name);
    argv[3 + n + 1 + i] = items[i].owner;
    lens[3 + n + 1 + i] = strlen(items[i].owner);
  }
  argv[3 + n] = lease;
  lens[3 + n] = strlen(lease);
  return append_script(c, &dlock__script_lock_renew, body, (int)n, (int)argc,
                       argv, lens);
}

static int renew_results(redisReply *rep, dlock__renewal *items, size_t n) {
  if (rep->type == REDIS_REPLY_ERROR)
    return dlock__redis_error(rep, "lock renew");
  if (rep->type != REDIS_REPLY_ARRAY || rep->elements != n)
    return dlock__seterr(DLOCK_EPROTO, "lock renew: unexpected reply");
  for (size_t i = 0; i < n; i++)
    items[i].result = rep->element[i]->type == REDIS_REPLY_INTEGER &&
                      rep->element[i]->integer == 1;
  return 0;
}

static int redis_lock_renew(void *be, dlock__renewal *items, size_t n,
                            int64_t lease_ms, int64_t deadline) {
  dlock__redis *r = be;
  if (n == 0)
    return 0;
  size_t nb = (n + RENEW_BATCH - 1) / RENEW_BATCH;
  char lease[24];
  snprintf(lease, sizeof lease, "%" PRId64, lease_ms);
  const char **argv = dlock__calloc(4 + 2 * RENEW_BATCH, sizeof *argv);
  size_t *lens = dlock__calloc(4 + 2 * RENEW_BATCH, sizeof *lens);
  redisReply **rep = dlock__calloc(nb, sizeof *rep);
  dlock__conn *c = NULL;
  int64_t cmd_deadline = dlock__deadline_after(r->command_timeout_ms);
  if (deadline > cmd_deadline)
    deadline = cmd_deadline;
  int rc =
      (!argv || !lens || !rep) ? DLOCK_ENOMEM : pool_get_until(r, deadline, &c);
  for (size_t b = 0; !rc && b < nb; b++) {
    size_t k =
        n - b * RENEW_BATCH < RENEW_BATCH ? n - b * RENEW_BATCH : RENEW_BATCH;
    rc = renew_append(c, items + b * RENEW_BATCH, k, lease, false, argv, lens);
  }
  if (!rc)
    rc = dlock__conn_exec(c, deadline, nb, rep);
  for (size_t b = 0; !rc && b < nb; b++) {
    size_t k =
        n - b * RENEW_BATCH < RENEW_BATCH ? n - b * RENEW_BATCH : RENEW_BATCH;
    if (is_noscript(rep[b])) {
      freeReplyObject(rep[b]);
      rep[b] = NULL;
      rc = renew_append(c, items + b * RENEW_BATCH, k, lease, true, argv, lens);
      if (!rc)
        rc = dlock__conn_exec(c, deadline, 1, &rep[b]);
    }
    if (!rc)
      rc = renew_results(rep[b], items + b * RENEW_BATCH, k);
  }
  pool_put(r, c);
  for (size_t b = 0; rep && b < nb; b++)
    freeReplyObject(rep[b]);
  dlock__free(rep);
  dlock__free(argv);
  dlock__free(lens);
  return rc;
}

static int redis_lock_query(void *be, const char *name, const char *owner,
                            dlock__lock_query q, int64_t *out) {
  const char *argv[3];
  int argc = 2;
  argv[1] = name;
  switch (q) {
  case DLOCK__Q_LOCKED:
    argv[0] = "EXISTS";
    break;
  case DLOCK__Q_HELD:
    argv[0] = "HEXISTS";
    argv[2] = owner;
    argc = 3;
    break;
  case DLOCK__Q_COUNT:
    argv[0] = "HGET";
    argv[2] = owner;
    argc = 3;
    break;
  case DLOCK__Q_REMAINING:
  default:
    argv[0] = "PTTL";
    break;
  }
  redisReply *rep = NULL;
  int rc = command(be, argc, argv, &rep);
  if (rc)
    return rc;
  /* only the shapes and ranges each command can answer: EXISTS and
   * HEXISTS 0/1, PTTL >= -2, HGET a decimal count or nil */
  bool flag = q == DLOCK__Q_LOCKED || q == DLOCK__Q_HELD;
  if (rep->type == REDIS_REPLY_INTEGER && q != DLOCK__Q_COUNT) {
    if ((flag && (rep->integer < 0 || rep->integer > 1)) ||
        (!flag && rep->integer < -2))
      return unexpected(rep, argv[0]);
    *out = rep->integer;
  } else if (q == DLOCK__Q_COUNT && rep->type == REDIS_REPLY_NIL) {
    *out = 0;
  } else if (q == DLOCK__Q_COUNT && rep->type == REDIS_REPLY_STRING) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(rep->str, &end, 10);
    if (!end || end == rep->str || *end || v < 0 || errno == ERANGE)
      return unexpected(rep, "hold count");
    *out = v;
  } else {
    return unexpected(rep, argv[0]);
  }
  freeReplyObject(rep);
  return 0;
}

static int state_fail(dlock_lock_state_t *st, redisReply *rep, int rc) {
  dlock_lock_state_free(st);
  freeReplyObject(rep);
  return rc;
}

static int redis_lock_state(void *be, const char *name,
                            dlock_lock_state_t **out) {
  queue_keys k;
  int rc = queue_keys_make(&k, name);
  redisReply *rep = NULL;
  if (!rc) {
    const char *argv[MAX_ARGS] = {0, 0, 0, name, k.queue};
    rc = script(be, &dlock__script_lock_state, 2, 5, argv, true, &rep);
  }
  queue_keys_clear(&k);
  if (rc)
    return rc;
  if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 4 ||
      rep->element[0]->type != REDIS_REPLY_STRING ||
      rep->element[1]->type != REDIS_REPLY_INTEGER ||
      rep->element[2]->type != REDIS_REPLY_ARRAY ||
      rep->element[2]->elements % 2 != 0 ||
      rep->element[3]->type != REDIS_REPLY_ARRAY)
    return unexpected(rep, "lock state");
  const char *type = rep->element[0]->str;
  if (strcmp(type, "none") != 0 && strcmp(type, "hash") != 0) {
    rc = dlock__seterr(DLOCK_EWRONGTYPE,
                       "lock state: key '%.200s' holds a %s, not a lock", name,
                       type);
    freeReplyObject(rep);
    return rc;
  }
  const redisReply *fields = rep->element[2], *queue = rep->element[3];
  size_t nh = fields->elements / 2, nq = queue->elements;
  dlock_lock_state_t *st = dlock__calloc(1, sizeof *st);
  if (!st || !(st->holders = dlock__calloc(nh ? nh : 1, sizeof *st->holders)) ||
      !(st->waiters = dlock__calloc(nq ? nq : 1, sizeof *st->waiters)) ||
      !(st->name = dlock__strdup(name)))
    return state_fail(st, rep, DLOCK_ENOMEM);
  st->kind = strcmp(type, "none") == 0 ? "free" : "reentrant";
  st->ttl_ms = rep->element[1]->integer;
  for (size_t i = 0; i < nh; i++) {
    const redisReply *f = fields->element[2 * i],
                     *v = fields->element[2 * i + 1];
    if (f->type != REDIS_REPLY_STRING)
      continue;
    char *owner = dlock__strndup(f->str, f->len);
    if (!owner)
      return state_fail(st, rep, DLOCK_ENOMEM);
    st->holders[st->nholders].owner = owner;
    st->holders[st->nholders].count =
        v->type == REDIS_REPLY_STRING ? strtoll(v->str, NULL, 10) : 0;
    st->nholders++;
  }
  for (size_t i = 0; i < nq; i++) {
    const redisReply *m = queue->element[i];
    if (m->type != REDIS_REPLY_STRING)
      continue;
    /* member "<client-id>:<tid>:<seq>:<lease>": the owner is the first two */
    const char *c1 = memchr(m->str, ':', m->len);
    const char *c2 =
        c1 ? memchr(c1 + 1, ':', m->len - (size_t)(c1 + 1 - m->str)) : NULL;
    size_t olen = c2 ? (size_t)(c2 - m->str) : m->len;
    char *owner = dlock__strndup(m->str, olen);
    if (!owner)
      return state_fail(st, rep, DLOCK_ENOMEM);
    st->waiters[st->nwaiters++] = owner;
  }
  freeReplyObject(rep);
  *out = st;
  return 0;
}

const dlock__backend_ops dlock__redis_backend = {
    .name = "redis",
    .open = redis_open,
    .close = redis_close,
    .ping = redis_ping,
    .lock_channel = redis_lock_channel,
    .lock_grant_channel = redis_lock_grant_channel,
    .lock_acquire = redis_lock_acquire,
    .lock_leave = redis_lock_leave,
    .lock_release = redis_lock_release,
    .lock_force_release = redis_lock_force_release,
    .lock_renew = redis_lock_renew,
    .lock_query = redis_lock_query,
    .lock_state = redis_lock_state,
    .watch_connect = dlock__redis_watch_connect,
    .watch_disconnect = dlock__redis_watch_disconnect,
    .watch_fd = dlock__redis_watch_fd,
    .watch_want_write = dlock__redis_watch_want_write,
    .watch_flush = dlock__redis_watch_flush,
    .watch_subscribe = dlock__redis_watch_subscribe,
    .watch_read = dlock__redis_watch_read,
};
