/*
 * spring.c - the Redis backend in Spring Integration's RedisLockRegistry
 * layout (docs/LAYOUT.md, "Spring Integration's layout"), so that a Spring
 * application and a dlock process exclude each other on one lock name.
 *
 * Design note: the layout is the Redis backend with other lock scripts.
 * The connections, the pub/sub watch and the waits are the Redis
 * backend's (redis.c, channels.c: one dlock__redis, its be); only the
 * lock operations differ, so this file is an ops table that reuses every
 * other operation. Its server state is Spring's: the STRING
 * <registry>:<name> holding this client's id (a UUID per client, as one
 * registry instance) with the lease as PX; the obtain, renew and unlock
 * scripts do what Spring's do (unlock UNLINKs and PUBLISHes the key's name
 * on <registry>-channel:<registry>:<name>, which wakes Spring's
 * PUB_SUB_LOCK waiters). A wait subscribes that channel, so Spring's
 * release wakes it, and otherwise sleeps for the holder's PTTL, never a
 * poll interval. The server knows one owner per client, so the core keeps
 * the threads of the client apart and counts re-entries (client_owner,
 * core/lock.c), as the registry's local ReentrantLock does. One kind only,
 * the plain exclusive lock: the layout has no room for a count, a queue,
 * a token or permits (kinds_why says so in every DLOCK_ENOTSUP).
 *
 * Names: no check_name. The layout has none of dlock's own dlock_lock_*
 * keys (every key is under the registry's), so such a name is a lock like
 * any other here; a key of another type under <registry>:<name> is worded
 * as the Redis backend words it (dlock__redis_lock_wrongtype).
 *
 * Selection: ?layout=spring&registry=KEY in the URL, or
 * dlock_options_set_layout / dlock_options_set_spring_registry; the
 * client picks this ops table when either asks (dlock__redis_layout), and
 * the registry key has no default (Spring's constructor requires one).
 */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/fmt.h"
#include "core/uri.h"
#include "redis/options.h"
#include "redis/redis.h"

#define CHANNEL_INFIX "-channel:"
/* <registry>:<name>, and the channel <registry>-channel:<registry>:<name> */
#define KEY_MAX (DLOCK_SPRING_REGISTRY_MAX + 1 + DLOCK_NAME_MAX + 1)
#define CHANNEL_MAX (DLOCK_SPRING_REGISTRY_MAX + sizeof CHANNEL_INFIX + KEY_MAX)

/* ------------------------------------------------------------- layout */

/* The value of `key` in the URL's query (raw, the first one), decoded
 * into out[cap]; 1 found, 0 absent, DLOCK_EURL. */
static int query_value(const char *url, const char *key, char *out,
                       size_t cap) {
  const char *q = strchr(url, '?');
  if (!q)
    return 0;
  const char *end = strchr(q, '#');
  dlock__uri u;
  memset(&u, 0, sizeof u);
  u.has_query = true;
  u.query.p = q + 1;
  u.query.n = end ? (size_t)(end - q - 1) : strlen(q + 1);
  dlock__uri_query it;
  dlock__uri_query_begin(&it, &u);
  int rc;
  while ((rc = dlock__uri_query_next(&it)) == 1) {
    if (strcmp(it.key, key) != 0)
      continue;
    snprintf(out, cap, "%s", it.value);
    return 1;
  }
  return rc;
}

int dlock__redis_layout(const char *url, const struct dlock_options *opts,
                        bool *spring, char **registry) {
  const dlock__redis_options *o = dlock__redis_options_of(opts);
  *spring = false;
  if (registry)
    *registry = NULL;
  char layout[64] = "", reg[1024] = "";
  int has_layout = query_value(url, "layout", layout, sizeof layout);
  int has_reg =
      has_layout < 0 ? 0 : query_value(url, "registry", reg, sizeof reg);
  if (has_layout < 0 || has_reg < 0)
    return has_layout < 0 ? has_layout : has_reg;
  if (has_layout && strcmp(layout, "spring") != 0 &&
      strcmp(layout, "redisson") != 0)
    return dlock__seterr(DLOCK_EURL,
                         "bad URL: unknown layout '%.64s' (layout=redisson "
                         "or layout=spring)",
                         layout);
  if (has_layout && o->layout && strcmp(layout, o->layout) != 0)
    return dlock__seterr(DLOCK_EINVAL,
                         "the URL says layout=%s but the options say %s",
                         layout, o->layout);
  const char *chosen = has_layout ? layout : o->layout;
  *spring = chosen && strcmp(chosen, "spring") == 0;
  if (has_reg && o->spring_registry && strcmp(reg, o->spring_registry) != 0)
    return dlock__seterr(DLOCK_EINVAL,
                         "the URL's registry=%.64s and the options' spring "
                         "registry key %.64s differ",
                         reg, o->spring_registry);
  const char *key = has_reg ? reg : o->spring_registry;
  if (!*spring && key)
    return dlock__seterr(DLOCK_EINVAL,
                         "a spring registry key is given but the layout is "
                         "Redisson's (add layout=spring)");
  if (!*spring)
    return 0;
  if (!key)
    return dlock__seterr(DLOCK_EINVAL,
                         "the spring layout needs the registry key "
                         "(RedisLockRegistry's registryKey: ?registry=KEY "
                         "or dlock_options_set_spring_registry)");
  int rc = dlock__check_spring_registry(key, strlen(key));
  if (rc)
    return rc;
  if (registry && !(*registry = dlock__strdup(key)))
    return DLOCK_ENOMEM;
  return 0;
}

int dlock__redis_pick_layout(const dlock__backend_ops **ops, const char *url,
                             const struct dlock_options *opts) {
  struct dlock_options none;
  if (!opts) {
    dlock__options_defaults(&none);
    opts = &none;
  }
  bool redis = *ops == &dlock__redis_backend, spring = false;
  if (redis || *ops == &dlock__redis_cluster_backend) {
    int rc = dlock__redis_layout(url, opts, &spring, NULL);
    if (rc)
      return rc;
  } else {
    const char *layout = dlock__redis_options_of(opts)->layout;
    spring = layout && strcmp(layout, "spring") == 0;
  }
  if (spring && !redis)
    return dlock__seterr(DLOCK_ENOTSUP,
                         "the spring layout is a layout of Redis (redis://, "
                         "rediss://, unix://, redis-sentinel://); the %s "
                         "backend keeps its own",
                         (*ops)->name);
  if (spring)
    *ops = &dlock__redis_spring_backend;
  return 0;
}

/* <registry>:<name> into buf[KEY_MAX]. */
static const char *spring_key(const dlock__redis *r, const char *name,
                              char *buf) {
  snprintf(buf, KEY_MAX, "%s:%s", r->spring_registry, name);
  return buf;
}

/* <registry>-channel:<registry>:<name> into buf[CHANNEL_MAX]. */
static const char *spring_channel(const dlock__redis *r, const char *name,
                                  char *buf) {
  snprintf(buf, CHANNEL_MAX, "%s" CHANNEL_INFIX "%s:%s", r->spring_registry,
           r->spring_registry, name);
  return buf;
}

char *dlock__redis_spring_channel(const dlock__redis *r, const char *name) {
  char buf[CHANNEL_MAX];
  return dlock__strdup(spring_channel(r, name, buf));
}

/* ------------------------------------------------------------ handles */

static int spring_handle_open(void *be, dlock_lock_kind_t kind,
                              const char *name, void **bh) {
  (void)kind;
  char buf[CHANNEL_MAX];
  return dlock__redis_handle_plain(spring_channel(be, name, buf), bh);
}

/* ------------------------------------------------------------- locks */

static int spring_release(void *be, const dlock__release *rel);

static int spring_acquire(void *be, const dlock__acquire *a, int64_t *pttl,
                          int64_t *token) {
  dlock__redis *r = be;
  (void)token;
  char key[KEY_MAX], lease[24];
  dlock__fmt_i64(lease, a->lease_ms);
  const char *argv[6] = {0,    0, 0, spring_key(r, a->name, key), r->client_id,
                         lease};
  redisReply *rep = NULL;
  int unsynced = 0;
  int rc = dlock__redis_script_synced(r, &dlock__script_spring_acquire, 1, 6,
                                      argv, false, &rep, &unsynced);
  if (rc) /* a key of another type is no Spring lock */
    return dlock__redis_lock_wrongtype(rc, a->name);
  if (rep->type == REDIS_REPLY_INTEGER && rep->integer >= -2) {
    *pttl = rep->integer;
    freeReplyObject(rep);
    return 0;
  }
  if (rep->type != REDIS_REPLY_NIL)
    return dlock__redis_unexpected(rep, "spring lock acquire");
  freeReplyObject(rep);
  if (unsynced == 0)
    return 1;
  /* taken on the master, but no replica has it: give it back */
  dlock__release rel = {.bh = a->bh,
                        .kind = a->kind,
                        .name = a->name,
                        .owner = a->owner,
                        .lease_ms = a->lease_ms,
                        .request_id = ""};
  spring_release(be, &rel);
  return dlock__redis_unsynced(be, "lock acquire", unsynced);
}

static int spring_leave(void *be, const dlock__acquire *a, uint64_t seq,
                        int64_t *token) {
  (void)be, (void)a, (void)seq, (void)token;
  return 0; /* waits never queue on the server: nothing to leave */
}

static int spring_release(void *be, const dlock__release *rel) {
  dlock__redis *r = be;
  const char *name = rel->name; /* the owner is the client: r->client_id */
  char key[KEY_MAX], ch[CHANNEL_MAX];
  const char *argv[7] = {0,
                         0,
                         0,
                         spring_key(r, name, key),
                         r->client_id,
                         spring_channel(r, name, ch),
                         r->publish};
  redisReply *rep = NULL;
  /* not re-sent here: the core retries, and takes a retry's "not ours"
   * as the first attempt's release */
  int rc = dlock__redis_script(r, &dlock__script_spring_release, 1, 7, argv,
                               false, &rep);
  if (rc)
    return rc;
  if (rep->type == REDIS_REPLY_NIL)
    rc = DLOCK__REL_NOTOWNER;
  else if (rep->type == REDIS_REPLY_INTEGER && rep->integer == 1)
    rc = DLOCK__REL_FREED;
  else
    return dlock__redis_unexpected(rep, "spring lock release");
  freeReplyObject(rep);
  return rc;
}

static int spring_force_release(void *be, dlock_lock_kind_t kind,
                                const char *name, bool *deleted) {
  dlock__redis *r = be;
  (void)kind;
  char key[KEY_MAX], ch[CHANNEL_MAX];
  spring_key(r, name, key);
  /* lock_force_release.lua: DEL, and the key's name on the channel */
  const char *argv[7] = {0,   0,         0, key, spring_channel(r, name, ch),
                         key, r->publish};
  redisReply *rep = NULL;
  int rc = dlock__redis_script(r, &dlock__script_lock_force_release, 2, 7, argv,
                               false, &rep);
  if (rc)
    return rc;
  if (rep->type != REDIS_REPLY_INTEGER)
    return dlock__redis_unexpected(rep, "force release");
  *deleted = rep->integer == 1;
  freeReplyObject(rep);
  return 0;
}

/* Spring's renew script over many keys, one call per batch. */
static int spring_renew(void *be, dlock__renewal *items, size_t n,
                        int64_t lease_ms, int64_t deadline) {
  dlock__redis *r = be;
  (void)deadline; /* each call is bounded by the command timeout */
  char lease[24];
  dlock__fmt_i64(lease, lease_ms);
  int rc = 0;
  for (size_t at = 0; !rc && at < n;) {
    size_t m =
        n - at < DLOCK__REDIS_RENEW_BATCH ? n - at : DLOCK__REDIS_RENEW_BATCH;
    const char **argv = dlock__calloc(3 + m + 2, sizeof *argv);
    char **keys = dlock__calloc(m ? m : 1, sizeof *keys);
    if (!argv || !keys)
      rc = DLOCK_ENOMEM;
    for (size_t i = 0; !rc && i < m; i++) {
      keys[i] =
          dlock__asprintf("%s:%s", r->spring_registry, items[at + i].name);
      if (!keys[i])
        rc = DLOCK_ENOMEM;
      else
        argv[3 + i] = keys[i];
    }
    redisReply *rep = NULL;
    if (!rc) {
      argv[3 + m] = lease;
      argv[4 + m] = r->client_id;
      rc = dlock__redis_script(r, &dlock__script_spring_renew, (int)m,
                               (int)(5 + m), argv, true, &rep);
    }
    if (!rc && (rep->type != REDIS_REPLY_ARRAY || rep->elements != m)) {
      rc = dlock__redis_unexpected(rep, "spring lock renew");
      rep = NULL;
    }
    for (size_t i = 0; !rc && i < m; i++)
      items[at + i].result = rep->element[i]->type == REDIS_REPLY_INTEGER &&
                             rep->element[i]->integer == 1;
    if (rep)
      freeReplyObject(rep);
    for (size_t i = 0; keys && i < m; i++)
      dlock__free(keys[i]);
    dlock__free(keys);
    dlock__free((void *)argv);
    at += m;
  }
  return rc;
}

static int spring_query(void *be, dlock_lock_kind_t kind, const char *name,
                        const char *owner, dlock__lock_query q, int64_t *out) {
  dlock__redis *r = be;
  (void)kind, (void)owner;
  char key[KEY_MAX];
  spring_key(r, name, key);
  const char *cmd = q == DLOCK__Q_LOCKED      ? "EXISTS"
                    : q == DLOCK__Q_REMAINING ? "PTTL"
                                              : "GET";
  const char *argv[2] = {cmd, key};
  redisReply *rep = NULL;
  int rc = dlock__redis_command(r, 2, argv, &rep);
  if (rc)
    return rc;
  if (q == DLOCK__Q_HELD || q == DLOCK__Q_COUNT) {
    /* this client's id or not; the core knows which thread and how many
     * times (client_owner) */
    if (rep->type != REDIS_REPLY_NIL && rep->type != REDIS_REPLY_STRING)
      return dlock__redis_unexpected(rep, "GET");
    *out =
        rep->type == REDIS_REPLY_STRING && strcmp(rep->str, r->client_id) == 0;
  } else if (rep->type == REDIS_REPLY_INTEGER && rep->integer >= -2) {
    *out = rep->integer;
  } else {
    return dlock__redis_unexpected(rep, cmd);
  }
  freeReplyObject(rep);
  return 0;
}

static int spring_state(void *be, dlock_lock_kind_t kind, const char *name,
                        dlock_lock_state_t **out) {
  dlock__redis *r = be;
  (void)kind;
  char key[KEY_MAX];
  const char *argv[4] = {0, 0, 0, spring_key(r, name, key)};
  redisReply *rep = NULL;
  int rc = dlock__redis_script(r, &dlock__script_spring_state, 1, 4, argv, true,
                               &rep);
  if (rc)
    return rc;
  if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 3 ||
      rep->element[0]->type != REDIS_REPLY_STRING ||
      rep->element[1]->type != REDIS_REPLY_STRING ||
      rep->element[2]->type != REDIS_REPLY_INTEGER)
    return dlock__redis_unexpected(rep, "spring lock state");
  const char *type = rep->element[0]->str;
  if (strcmp(type, "none") != 0 && strcmp(type, "string") != 0) {
    rc = dlock__seterr(DLOCK_EWRONGTYPE,
                       "lock state: key '%.200s' holds a %s, not a Spring "
                       "lock (a string)",
                       key, type);
    freeReplyObject(rep);
    return rc;
  }
  bool held = strcmp(type, "string") == 0;
  dlock_lock_state_t *st = dlock__calloc(1, sizeof *st);
  if (!st || !(st->name = dlock__strdup(name)) ||
      !(st->holders = dlock__calloc(1, sizeof *st->holders)) ||
      !(st->waiters = dlock__calloc(1, sizeof *st->waiters)) ||
      (held && !(st->holders[0].owner = dlock__strndup(
                     rep->element[1]->str, rep->element[1]->len)))) {
    dlock_lock_state_free(st);
    freeReplyObject(rep);
    return DLOCK_ENOMEM;
  }
  st->kind = held ? "spring" : "free";
  st->ttl_ms = rep->element[2]->integer;
  if (held) {
    st->nholders = 1;
    st->holders[0].count = 1; /* the layout keeps no count */
  }
  freeReplyObject(rep);
  *out = st;
  return 0;
}

static int spring_open(void **be, const char *url,
                       const struct dlock_options *o,
                       struct dlock_client *core) {
  return dlock__redis_open_layout(be, url, o, core, true);
}

const dlock__backend_ops dlock__redis_spring_backend = {
    .name = "redis (spring layout)",
    .schemes = NULL, /* chosen by the layout, not by a scheme */
    .lock_kinds = 1u << DLOCK_REENTRANT,
    .sync_kinds = 0,
    .queue_kinds = 0,
    .client_owner = true,
    .kinds_why =
        "the spring layout (Spring Integration's RedisLockRegistry) has one "
        "kind, the plain exclusive lock: its key holds a client id, with no "
        "room for a count, a queue, a token or permits",
    .open = spring_open,
    .close = dlock__redis_close,
    .ping = dlock__redis_ping,
    .handle_open = spring_handle_open,
    .handle_close = dlock__redis_handle_close,
    .lock_acquire = spring_acquire,
    .lock_leave = spring_leave,
    .lock_release = spring_release,
    .lock_force_release = spring_force_release,
    .lock_renew = spring_renew,
    .lock_query = spring_query,
    .lock_state = spring_state,
    .wait_begin = dlock__redis_wait_begin,
    .wait_hot = dlock__redis_wait_hot,
    .wait_arm = dlock__redis_wait_arm,
    .wait_can_queue = dlock__redis_wait_can_queue,
    .wait_end = dlock__redis_wait_end,
    .loop_prepare = dlock__redis_loop_prepare,
    .loop_dispatch = dlock__redis_loop_dispatch,
};
