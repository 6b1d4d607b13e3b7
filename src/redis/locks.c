/*
 * locks.c - the lock operations of the Redis backend, every kind, in
 * Redisson's layout (REDIS-LAYOUT.md) plus dlock's hand-off queue
 * (docs/LAYOUT.md).
 *
 * Kinds and their scripts:
 *   reentrant, fenced  lock_acquire / lock_release / lock_leave: the RLock
 *                      hash, dlock's wait queue, and for a fenced lock the
 *                      token key redisson_lock_token:{name};
 *   fair               fair_acquire / fair_release / fair_leave: the
 *                      RFairLock queue (LIST) and deadlines (ZSET), one
 *                      wake channel per waiting owner;
 *   read, write        rw_*: the RReadWriteLock hash with a mode field, one
 *                      timeout key per read hold; dlock's writer queue
 *                      (hand-off as for the reentrant lock, in its own
 *                      dlock_lock_rw_* keys) and waiting-reader registry.
 * Every kind renews through one batched call per kind, all pipelined in
 * one round trip (lock_renew, rw_read_renew, permit_renew).
 * Holder info (dlock_options_set_holder_info): a client that has it passes
 * the key dlock_holder:{name}:<owner> and its text as extra arguments of
 * the reentrant, fenced and fair scripts (acquire writes it with the lease
 * or beside the queue entry, renewal extends it, the full release deletes
 * it); a client without it sends exactly the arguments it sent before, and
 * nothing is written. lock_state reads it for every holder and waiter.
 *
 * Retrying: only idempotent scripts are re-sent after a broken connection
 * (leave, state). Acquire is never re-sent (a second HINCRBY would count a
 * hold twice); release is retried by the core with the same request id.
 *
 * Names: dlock's own keys and channels all begin with "dlock_lock_", so
 * check_name refuses a lock, semaphore or latch named so (it could be
 * another lock's queue, yield key or grant channel); the cluster and
 * Redlock backends, whose nodes hold the same keys, use it too.
 *
 * A key of another type: the server's WRONGTYPE names a command, so an
 * acquire says what it means ("the key holds a value of another type (not
 * a lock)", dlock__redis_lock_wrongtype), unless the script already said
 * which kind of lock is in the way (OTHERKIND, marked worded); the core
 * passes the detail on as it is.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/fmt.h"
#include "core/id.h"
#include "redis/redis.h"

#define LOCK_CHANNEL_PREFIX "redisson_lock__channel"
#define RW_CHANNEL_PREFIX "redisson_rwlock"
#define LATCH_PREFIX "redisson_unlock_latch"
#define TOKEN_PREFIX "redisson_lock_token"
#define FAIR_QUEUE_PREFIX "redisson_lock_queue"
#define FAIR_TIMEOUT_PREFIX "redisson_lock_timeout"
#define QUEUE_PREFIX "dlock_lock_queue"
#define QUEUE_TIMEOUT_PREFIX "dlock_lock_queue_timeout"
#define GRANT_PREFIX "dlock_lock_grant"
#define YIELD_PREFIX "dlock_lock_yield"
#define RW_QUEUE_PREFIX "dlock_lock_rw_queue"
#define RW_QUEUE_TIMEOUT_PREFIX "dlock_lock_rw_queue_timeout"
#define RW_GRANT_PREFIX "dlock_lock_rw_grant"
#define RW_YIELD_PREFIX "dlock_lock_rw_yield"
#define RW_READERS_PREFIX "dlock_lock_rw_readers"
#define RW_READTURN_PREFIX "dlock_lock_rw_readturn"
/* holder info (dlock_options_set_holder_info): HOLDER_PREFIX:{name}:<owner> */
#define HOLDER_PREFIX "dlock_holder"
/* How long dlock writers let registered readers in first after a write
 * release woke them (rw_write_acquire.lua). */
#define READTURN_MS "1000"
/* At most one release per this period leaves the lock to a race instead of
 * handing it over, when outsiders may be waiting (lock_release.lua). */
#define YIELD_PERIOD_MS "50"
#define MAX_ARGS DLOCK__REDIS_MAX_ARGS
/* A reader held back for a queued writer looks again at least this often:
 * nothing is published when that writer dies while queued. */
#define RW_HELD_BACK_RECHECK_MS "1000"
/* What every dlock_lock_* prefix above (and redis.c's probe channel)
 * begins with. */
#define RESERVED_PREFIX "dlock_lock_"

/* Every key and channel name one operation may need; unused ones stay
 * NULL. Built by keys_make, freed by keys_clear. */
typedef struct lock_keys {
  char *channel;  /* wake channel (fair: the base, ":<owner>" appended) */
  char *queue;    /* dlock_lock_queue (read-write: dlock_lock_rw_queue), or
                     the fair lock's LIST */
  char *timeouts; /* dlock_lock_queue_timeout (dlock_lock_rw_queue_timeout),
                     or the fair lock's ZSET */
  char *token;    /* fenced: redisson_lock_token:{name} */
  char *grant;    /* dlock_lock_grant:{name} (dlock_lock_rw_grant:{name}),
                     ":<client-id>" appended */
  char *yield;    /* dlock_lock_yield:{name} (dlock_lock_rw_yield:{name}) */
  char *rw_mine;  /* read side: {name}:<owner>:rwlock_timeout */
  char *rw_base;  /* read side: {name} */
  char *readers;  /* read-write: dlock_lock_rw_readers:{name} */
  char *readturn; /* read-write: dlock_lock_rw_readturn:{name} */
  bool borrowed;  /* all but rw_mine belong to a handle (redis_handle) */
} lock_keys;

/* What a lock handle keeps (handle_open): every owner-independent name
 * its operations use, built once. */
typedef struct redis_handle {
  lock_keys keys;      /* KM_ALL but rw_mine */
  char *grant_channel; /* this client's grant channel (not fair), or NULL */
  char *latch_prefix;  /* redisson_unlock_latch:{name} */
} redis_handle;

/* The wait queue's member for a wait of a->owner: "<owner>:<seq>:<lease
 * ms>", with ":f" for a fenced waiter (docs/LAYOUT.md); the release that
 * hands over reads the lease and the grant channel's client id from it. */
static void queue_member(char *buf, size_t n, const dlock__acquire *a,
                         uint64_t seq) {
  size_t o = strlen(a->owner);
  if (o + 2 * DLOCK__I64_BUF + 4 > n) { /* owners are short: never */
    buf[0] = '\0';
    return;
  }
  char *p = buf;
  memcpy(p, a->owner, o);
  p += o;
  *p++ = ':';
  p += dlock__fmt_u64(p, seq);
  *p++ = ':';
  p += dlock__fmt_i64(p, a->lease_ms);
  memcpy(p, a->kind == DLOCK_FENCED ? ":f" : "", a->kind == DLOCK_FENCED ? 3 : 1);
}

static void keys_clear(lock_keys *k) {
  char **all[] = {&k->channel, &k->queue,   &k->timeouts, &k->token,
                  &k->grant,   &k->yield,   &k->rw_mine,  &k->rw_base,
                  &k->readers, &k->readturn};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    if (!k->borrowed || all[i] == &k->rw_mine)
      dlock__free(*all[i]);
    *all[i] = NULL;
  }
}

static bool is_rw(dlock_lock_kind_t kind) {
  return kind == DLOCK_READ || kind == DLOCK_WRITE;
}

/* What an operation needs of lock_keys (keys_make builds only these: an
 * uncontended acquire formats three names, not eight). */
enum {
  KM_CHANNEL = 1,  /* channel */
  KM_QUEUE = 2,    /* queue, timeouts */
  KM_TOKEN = 4,    /* token (fenced) */
  KM_HANDOFF = 8,  /* grant, yield: what a release hands over with */
  KM_READERS = 16, /* read-write: readers, readturn */
  KM_MINE = 32,    /* read-write: rw_mine (needs the owner), rw_base */
  KM_ALL = 63
};

/* A read hold's timeout key, {name}:<owner>:rwlock_timeout (fresh; NULL
 * when out of memory). */
static char *rw_mine_key(const char *name, const char *owner) {
  char *sfx = dlock__concat(2, (const char *[]){owner, ":rwlock_timeout"});
  char *key = sfx ? dlock__redis_suffixed(name, sfx) : NULL;
  dlock__free(sfx);
  return key;
}

/* The read holds' base, {name} (the name itself when it has a '{'). */
static char *rw_base_key(const char *name) {
  return strchr(name, '{') ? dlock__strdup(name)
                           : dlock__concat(3, (const char *[]){"{", name, "}"});
}

/* Sets *slot to a fresh string unless it is not wanted; false when out of
 * memory. */
static bool want_key(char **slot, bool wanted, char *(*make)(const char *,
                                                             const char *),
                     const char *prefix, const char *name) {
  if (!wanted)
    return true;
  *slot = make(prefix, name);
  return *slot != NULL;
}

/* The keys of `name` for `kind` that `mask` asks for (KM_*); owner is
 * needed by KM_MINE only. */
static int keys_make(lock_keys *k, dlock_lock_kind_t kind, const char *name,
                     const char *owner, unsigned mask);

/* The same, borrowing the names a handle built once (bh may be NULL). */
static int keys_get(lock_keys *k, const void *bh, dlock_lock_kind_t kind,
                    const char *name, const char *owner, unsigned mask) {
  const redis_handle *h = bh;
  if (!h)
    return keys_make(k, kind, name, owner, mask);
  *k = h->keys;
  k->borrowed = true;
  k->rw_mine = NULL;
  if (is_rw(kind) && (mask & KM_MINE) && owner &&
      !(k->rw_mine = rw_mine_key(name, owner)))
    return DLOCK_ENOMEM;
  return 0;
}

/* The string slots of a handle, in one order. */
static size_t handle_slots(redis_handle *h, char ***out) {
  char **all[] = {&h->keys.channel,  &h->keys.queue,    &h->keys.timeouts,
                  &h->keys.token,    &h->keys.grant,    &h->keys.yield,
                  &h->keys.rw_base,  &h->keys.readers,  &h->keys.readturn,
                  &h->grant_channel, &h->latch_prefix};
  size_t n = sizeof all / sizeof all[0];
  for (size_t i = 0; i < n; i++)
    out[i] = all[i];
  return n;
}

#define HANDLE_SLOTS 11

/* A copy of h in one allocation, the names after the struct (a handle
 * lives as long as the user's lock handle, often with the lock held: one
 * block instead of a dozen keeps its memory near the names' own size). */
static redis_handle *handle_pack(redis_handle *h) {
  char **slots[HANDLE_SLOTS];
  size_t n = handle_slots(h, slots), total = sizeof *h;
  for (size_t i = 0; i < n; i++)
    if (*slots[i])
      total += strlen(*slots[i]) + 1;
  redis_handle *p = dlock__calloc(1, total);
  if (!p)
    return NULL;
  *p = *h;
  p->keys.borrowed = true; /* keys_clear never frees the packed names */
  p->keys.rw_mine = NULL;
  char **pslots[HANDLE_SLOTS];
  handle_slots(p, pslots);
  char *at = (char *)(p + 1);
  for (size_t i = 0; i < n; i++) {
    if (!*slots[i])
      continue;
    size_t len = strlen(*slots[i]) + 1;
    memcpy(at, *slots[i], len);
    *pslots[i] = at;
    at += len;
  }
  return p;
}

/* Frees a handle built name by name (before packing). */
static void handle_free_unpacked(redis_handle *h) {
  keys_clear(&h->keys);
  dlock__free(h->grant_channel);
  dlock__free(h->latch_prefix);
  dlock__free(h);
}

int dlock__redis_handle_open(void *be, dlock_lock_kind_t kind,
                             const char *name, void **out) {
  dlock__redis *r = be;
  *out = NULL;
  redis_handle *h = dlock__calloc(1, sizeof *h);
  if (!h)
    return DLOCK_ENOMEM;
  int rc = keys_make(&h->keys, kind, name, NULL, KM_ALL);
  if (!rc && is_rw(kind) && !h->keys.rw_base &&
      !(h->keys.rw_base = rw_base_key(name)))
    rc = DLOCK_ENOMEM;
  if (!rc && kind != DLOCK_FAIR &&
      !(h->grant_channel =
            dlock__redis_lock_grant_channel(r, kind, name, r->client_id)))
    rc = DLOCK_ENOMEM;
  if (!rc && !(h->latch_prefix = dlock__redis_prefixed(LATCH_PREFIX, name)))
    rc = DLOCK_ENOMEM;
  redis_handle *packed = rc ? NULL : handle_pack(h);
  if (!rc && !packed)
    rc = DLOCK_ENOMEM;
  handle_free_unpacked(h);
  if (rc)
    return rc;
  *out = packed;
  return 0;
}

int dlock__redis_handle_plain(const char *channel, void **out) {
  redis_handle h;
  memset(&h, 0, sizeof h);
  h.keys.channel = (char *)channel; /* copied by handle_pack */
  *out = handle_pack(&h);
  return *out ? 0 : DLOCK_ENOMEM;
}

void dlock__redis_handle_close(void *bh) {
  dlock__free(bh); /* one block: the struct and its names (handle_pack) */
}

const char *dlock__redis_handle_channel(const void *bh) {
  const redis_handle *h = bh;
  return h ? h->keys.channel : NULL;
}

const char *dlock__redis_handle_grant(const void *bh) {
  const redis_handle *h = bh;
  return h ? h->grant_channel : NULL;
}

static int keys_make(lock_keys *k, dlock_lock_kind_t kind, const char *name,
                     const char *owner, unsigned mask) {
  memset(k, 0, sizeof *k);
  char *(*own)(const char *, const char *) = dlock__redis_own_key;
  char *(*red)(const char *, const char *) = dlock__redis_prefixed;
  bool ok;
  if (is_rw(kind)) {
    ok = want_key(&k->channel, mask & KM_CHANNEL, red, RW_CHANNEL_PREFIX,
                  name) &&
         want_key(&k->queue, mask & KM_QUEUE, own, RW_QUEUE_PREFIX, name) &&
         want_key(&k->timeouts, mask & KM_QUEUE, own, RW_QUEUE_TIMEOUT_PREFIX,
                  name) &&
         want_key(&k->grant, mask & KM_HANDOFF, own, RW_GRANT_PREFIX, name) &&
         want_key(&k->yield, mask & KM_HANDOFF, own, RW_YIELD_PREFIX, name) &&
         want_key(&k->readers, mask & (KM_READERS | KM_HANDOFF), own,
                  RW_READERS_PREFIX, name) &&
         want_key(&k->readturn, mask & (KM_READERS | KM_HANDOFF), own,
                  RW_READTURN_PREFIX, name);
    if (ok && (mask & KM_MINE) && owner)
      ok = (k->rw_mine = rw_mine_key(name, owner)) != NULL &&
           (k->rw_base = rw_base_key(name)) != NULL;
  } else if (kind == DLOCK_FAIR) {
    ok = want_key(&k->channel, mask & KM_CHANNEL, red, LOCK_CHANNEL_PREFIX,
                  name) &&
         want_key(&k->queue, mask & KM_QUEUE, red, FAIR_QUEUE_PREFIX, name) &&
         want_key(&k->timeouts, mask & KM_QUEUE, red, FAIR_TIMEOUT_PREFIX,
                  name);
  } else {
    ok = want_key(&k->channel, mask & KM_CHANNEL, red, LOCK_CHANNEL_PREFIX,
                  name) &&
         want_key(&k->queue, mask & KM_QUEUE, own, QUEUE_PREFIX, name) &&
         want_key(&k->timeouts, mask & KM_QUEUE, own, QUEUE_TIMEOUT_PREFIX,
                  name) &&
         want_key(&k->grant, mask & KM_HANDOFF, own, GRANT_PREFIX, name) &&
         want_key(&k->yield, mask & KM_HANDOFF, own, YIELD_PREFIX, name) &&
         want_key(&k->token, mask & KM_TOKEN, red, TOKEN_PREFIX, name);
  }
  if (!ok) {
    keys_clear(k);
    return DLOCK_ENOMEM;
  }
  return 0;
}

/* "<owner>:write", the write side's field. */
static int write_field(char *buf, size_t len, const char *owner) {
  size_t n = strlen(owner);
  if (n + sizeof ":write" > len)
    return dlock__seterr(DLOCK_EINVAL, "owner too long");
  memcpy(buf, owner, n);
  memcpy(buf + n, ":write", sizeof ":write");
  return 0;
}

/* The holder-info key of owner's hold of name (redis.h), own_key's rule:
 * the lock's slot. */
const char *dlock__redis_holder_key(const char *name, const char *owner,
                                    char *buf, size_t n) {
  bool brace = strchr(name, '{') != NULL;
  size_t pl = sizeof HOLDER_PREFIX - 1, nl = strlen(name), ol = strlen(owner);
  if (pl + nl + ol + 5 > n)
    return NULL;
  char *p = buf;
  memcpy(p, HOLDER_PREFIX, pl);
  p += pl;
  memcpy(p, brace ? ":=" : ":{", 2);
  p += 2;
  memcpy(p, name, nl);
  p += nl;
  if (!brace)
    *p++ = '}';
  *p++ = ':';
  memcpy(p, owner, ol + 1);
  return buf;
}

const char *dlock__redis_info_key(const dlock__redis *r, const char *name,
                                  const char *owner, char *buf, size_t n) {
  return r->holder_info ? dlock__redis_holder_key(name, owner, buf, n) : NULL;
}

bool dlock__redis_has_holder_info(const void *be) {
  return ((const dlock__redis *)be)->holder_info != NULL;
}

/* ------------------------------------------------------------ channels */

char *dlock__redis_lock_channel(void *be, dlock_lock_kind_t kind,
                                const char *name, const char *owner) {
  if (be && ((dlock__redis *)be)->spring_registry)
    return dlock__redis_spring_channel(be, name);
  if (is_rw(kind))
    return dlock__redis_prefixed(RW_CHANNEL_PREFIX, name);
  char *base = dlock__redis_prefixed(LOCK_CHANNEL_PREFIX, name);
  if (kind != DLOCK_FAIR || !base)
    return base;
  char *ch = dlock__concat(3, (const char *[]){base, ":", owner});
  dlock__free(base);
  return ch;
}

char *dlock__redis_lock_grant_channel(void *be, dlock_lock_kind_t kind,
                                      const char *name, const char *client_id) {
  (void)be;
  char *prefix =
      dlock__redis_own_key(is_rw(kind) ? RW_GRANT_PREFIX : GRANT_PREFIX, name);
  char *ch =
      prefix ? dlock__concat(3, (const char *[]){prefix, ":", client_id}) : NULL;
  dlock__free(prefix);
  return ch;
}

/* ------------------------------------------------------------- acquire */

/* Reads a fenced reply {-1, token} (or {1, token} from a leave). */
static bool token_reply(const redisReply *rep, int64_t *token) {
  if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
      rep->element[1]->type != REDIS_REPLY_INTEGER ||
      rep->element[1]->integer < 0)
    return false;
  *token = rep->element[1]->integer;
  return true;
}

/* One acquire script; *unsynced as dlock__redis_script_synced. */
static int lock_acquire_once(void *be, const dlock__acquire *a, int64_t *pttl,
                             int64_t *token, int *unsynced) {
  char lease[24], ttl[24], tw[24], wfield[128], member[160] = "";
  dlock__fmt_i64(lease, a->lease_ms);
  if (a->q)
    queue_member(member, sizeof member, a, a->q->seq);
  lock_keys k;
  unsigned km_token = a->kind == DLOCK_FENCED ? KM_TOKEN : 0;
  /* a reader asks about queued writers' grant subscriptions */
  unsigned km_grant = a->kind == DLOCK_READ ? KM_HANDOFF : 0;
  int rc = keys_get(&k, a->bh, a->kind, a->name, a->owner,
                     KM_QUEUE | km_token | KM_READERS | KM_MINE | km_grant);
  if (rc)
    return rc;
  /* holder info: the key of the hold's field (a write hold's field is
   * "<owner>:write", so its key is too) */
  char ibuf[DLOCK_NAME_MAX + 160];
  if (a->kind == DLOCK_WRITE &&
      (rc = write_field(wfield, sizeof wfield, a->owner))) {
    keys_clear(&k);
    return rc;
  }
  const char *ikey = dlock__redis_info_key(
      be, a->name, a->kind == DLOCK_WRITE ? wfield : a->owner, ibuf,
      sizeof ibuf);
  redisReply *rep = NULL;
  switch (a->kind) {
  case DLOCK_FAIR: {
    dlock__fmt_i64(tw, a->thread_wait_ms);
    const char *argv[MAX_ARGS] = {0,
                                  0,
                                  0,
                                  a->name,
                                  k.queue,
                                  k.timeouts,
                                  lease,
                                  a->owner,
                                  tw,
                                  "1",
                                  a->try_once ? "1" : "0",
                                  ikey,
                                  ((dlock__redis *)be)->holder_info};
    rc =
        dlock__redis_script_synced(be, &dlock__script_fair_acquire, 3,
                                   ikey ? 13 : 11, argv, false, &rep, unsynced);
    break;
  }
  case DLOCK_READ: {
    /* a waiting reader registers (a->q), so that releases know */
    if ((rc = write_field(wfield, sizeof wfield, a->owner)))
      break;
    dlock__fmt_i64(ttl, a->q ? a->q->ttl_ms : 0);
    const char *argv[MAX_ARGS] = {0,
                                  0,
                                  0,
                                  a->name,
                                  k.rw_mine,
                                  k.readers,
                                  k.queue,
                                  k.timeouts,
                                  k.readturn,
                                  lease,
                                  a->owner,
                                  wfield,
                                  member,
                                  ttl,
                                  k.grant,
                                  RW_HELD_BACK_RECHECK_MS,
                                  ((dlock__redis *)be)->publish,
                                  ikey,
                                  ((dlock__redis *)be)->holder_info};
    rc = dlock__redis_script_synced(be, &dlock__script_rw_read_acquire, 6,
                                    ikey ? 19 : 17, argv, false, &rep,
                                    unsynced);
    break;
  }
  case DLOCK_WRITE: {
    if ((rc = write_field(wfield, sizeof wfield, a->owner)))
      break;
    dlock__fmt_i64(ttl, a->q ? a->q->ttl_ms : 0);
    const char *argv[MAX_ARGS] = {0,
                                  0,
                                  0,
                                  a->name,
                                  k.rw_mine,
                                  k.queue,
                                  k.timeouts,
                                  k.readers,
                                  k.readturn,
                                  lease,
                                  wfield,
                                  a->owner,
                                  member,
                                  ttl,
                                  a->q && a->q->queued ? "1" : "0",
                                  ikey,
                                  ((dlock__redis *)be)->holder_info};
    rc = dlock__redis_script_synced(be, &dlock__script_rw_write_acquire, 6,
                                    ikey ? 17 : 15, argv, false, &rep,
                                    unsynced);
    break;
  }
  default: {
    dlock__fmt_i64(ttl, a->q ? a->q->ttl_ms : 0);
    const char *argv[MAX_ARGS] = {0,
                                  0,
                                  0,
                                  a->name,
                                  k.queue,
                                  k.timeouts,
                                  lease,
                                  a->owner,
                                  member,
                                  ttl,
                                  a->q && a->q->queued ? "1" : "0",
                                  a->kind == DLOCK_FENCED ? k.token : "",
                                  ikey,
                                  ((dlock__redis *)be)->holder_info};
    rc =
        dlock__redis_script_synced(be, &dlock__script_lock_acquire, 3,
                                   ikey ? 14 : 12, argv, false, &rep, unsynced);
    break;
  }
  }
  keys_clear(&k);
  if (rc)
    return rc;
  if (a->kind == DLOCK_FENCED && rep->type != REDIS_REPLY_INTEGER) {
    if (!token_reply(rep, token))
      return dlock__redis_unexpected(rep, "fenced lock acquire");
    freeReplyObject(rep);
    return 1;
  }
  if (rep->type == REDIS_REPLY_NIL && a->kind != DLOCK_FENCED) {
    freeReplyObject(rep);
    return 1;
  }
  if (is_rw(a->kind) &&
      (rep->type == REDIS_REPLY_STRING || rep->type == REDIS_REPLY_STATUS)) {
    bool deadlock = strcmp(rep->str, "DEADLOCK") == 0;
    bool other = strcmp(rep->str, "OTHERKIND") == 0;
    freeReplyObject(rep);
    if (deadlock && a->kind == DLOCK_WRITE)
      return dlock__seterr(DLOCK_EDEADLK,
                           "write lock '%.200s': this thread holds its read "
                           "side; a read hold cannot be upgraded (release it "
                           "first)",
                           a->name);
    if (other) {
      dlock__seterr(DLOCK_EWRONGTYPE,
                    "read-write lock '%.200s': the key holds a lock of "
                    "another kind (reentrant, fenced or fair)",
                    a->name);
      dlock__err_set_worded();
      return DLOCK_EWRONGTYPE;
    }
    return dlock__seterr(DLOCK_EPROTO, "lock acquire: unexpected reply");
  }
  if (rep->type != REDIS_REPLY_INTEGER || rep->integer < -2)
    return dlock__redis_unexpected(rep, "lock acquire");
  *pttl = rep->integer;
  freeReplyObject(rep);
  return 0;
}

int dlock__redis_lock_acquire(void *be, const dlock__acquire *a, int64_t *pttl,
                              int64_t *token) {
  int unsynced = 0;
  int rc = lock_acquire_once(be, a, pttl, token, &unsynced);
  if (rc != 1 || unsynced == 0)
    return dlock__redis_lock_wrongtype(rc, a->name);
  /* taken on the master, but no replica has it: give it back, so that a
   * failover cannot leave two holders (this release's own WAIT may fail
   * too; the lease bounds the key then) */
  char req[DLOCK__UUID_LEN + 1];
  int urc = dlock__uuid(req);
  dlock__release rel = {.bh = a->bh,
                        .kind = a->kind,
                        .name = a->name,
                        .owner = a->owner,
                        .lease_ms = a->lease_ms,
                        .request_id = req};
  if (!urc)
    dlock__redis_lock_release(be, &rel);
  return dlock__redis_unsynced(be, "lock acquire", unsynced);
}

int dlock__redis_lock_leave(void *be, const dlock__acquire *a, uint64_t seq,
                            int64_t *token) {
  dlock__redis *r = be;
  char member[160];
  queue_member(member, sizeof member, a, seq);
  char lease[24], tw[24], wfield[128];
  dlock__fmt_i64(lease, a->lease_ms);
  lock_keys k;
  unsigned km_token = a->kind == DLOCK_FENCED ? KM_TOKEN : 0;
  int rc = keys_get(&k, a->bh, a->kind, a->name, NULL,
                     KM_CHANNEL | KM_QUEUE | km_token | KM_READERS);
  if (rc)
    return rc;
  redisReply *rep = NULL;
  if (is_rw(a->kind)) {
    /* a writer leaves the queue (keeping a grant that raced), a reader its
     * registration */
    wfield[0] = '\0';
    if (a->kind == DLOCK_WRITE &&
        (rc = write_field(wfield, sizeof wfield, a->owner))) {
      keys_clear(&k);
      return rc;
    }
    const char *argv[MAX_ARGS] = {
        0,         0,         0,      a->name, k.queue, k.timeouts,
        k.readers, k.channel, wfield, member,  lease,   r->publish};
    rc = dlock__redis_script(r, &dlock__script_rw_leave, 5, 12, argv, true,
                             &rep);
  } else if (a->kind == DLOCK_FAIR) {
    dlock__fmt_i64(tw, a->thread_wait_ms);
    const char *argv[MAX_ARGS] = {0,         0,        0,  a->name,   k.queue,
                                  k.timeouts, k.channel, a->owner, tw,
                                  r->publish};
    rc = dlock__redis_script(r, &dlock__script_fair_leave, 4, 10, argv, true,
                             &rep);
  } else {
    const char *argv[MAX_ARGS] = {
        0,        0,      0,     a->name,
        k.queue,  k.timeouts, a->owner, member,
        lease,    a->kind == DLOCK_FENCED ? k.token : ""};
    rc = dlock__redis_script(r, &dlock__script_lock_leave, 3, 10, argv, true,
                             &rep);
  }
  keys_clear(&k);
  if (rc)
    return rc;
  if (rep->type == REDIS_REPLY_ARRAY && token_reply(rep, token)) {
    freeReplyObject(rep);
    return 1;
  }
  if (rep->type != REDIS_REPLY_INTEGER)
    return dlock__redis_unexpected(rep, "lock leave");
  rc = rep->integer == 1;
  freeReplyObject(rep);
  return rc;
}

/* ------------------------------------------------------------- names */

int dlock__redis_check_name(void *be, const char *name, const char *fn) {
  (void)be;
  if (strncmp(name, RESERVED_PREFIX, sizeof RESERVED_PREFIX - 1) == 0)
    return dlock__seterr(DLOCK_EINVAL,
                         "%s: names beginning with \"" RESERVED_PREFIX
                         "\" are reserved for dlock's own keys",
                         fn);
  return 0;
}

int dlock__redis_lock_wrongtype(int rc, const char *name) {
  if (rc != DLOCK_EWRONGTYPE || dlock__err_worded())
    return rc;
  dlock__seterr(rc,
                "lock '%.200s': the key holds a value of another type (not a "
                "lock)",
                name);
  dlock__err_set_worded();
  return rc;
}

/* ------------------------------------------------------------- release */

/* How long a release's latch lives: past the core's own retry (a reconnect
 * plus a round trip) and a prompt retry by the user (dlock_lock_release). */
void dlock__redis_latch_ms(dlock__redis *r) {
  int64_t latch = 2 * (r->command_timeout_ms + r->connect_timeout_ms);
  if (latch < 10000)
    latch = 10000;
  if (latch > 60000)
    latch = 60000;
  dlock__fmt_i64(r->latch_ms, latch);
}

static int release_outcome(redisReply *rep, bool counted) {
  int rc;
  if (rep->type == REDIS_REPLY_NIL)
    rc = DLOCK__REL_NOTOWNER;
  else if (counted && rep->type == REDIS_REPLY_INTEGER && rep->integer >= 0)
    rc = rep->integer == 0 ? DLOCK__REL_FREED : DLOCK__REL_DOWN;
  else if (rep->type == REDIS_REPLY_INTEGER &&
           (rep->integer == 0 || rep->integer == 1))
    rc = rep->integer == 1 ? DLOCK__REL_FREED : DLOCK__REL_DOWN;
  else
    return dlock__redis_unexpected(rep, "lock release");
  freeReplyObject(rep);
  return rc;
}

/* The keys and arguments of lock_release.lua (a reentrant or fenced
 * lock's release) into argv[3..]; its argc. */
static int release_argv(const char **argv, const dlock__redis *r,
                        const lock_keys *k, const char *name, const char *owner,
                        const char *latch_key, const char *lease, bool watching,
                        const char *ikey) {
  const char *a[] = {
      name,       k->channel,  latch_key, k->queue,        k->timeouts,
      k->yield,   k->token,    "0",       lease,           owner,
      r->publish, r->latch_ms, k->grant,  YIELD_PERIOD_MS, watching ? "1" : "0",
      ikey};
  size_t n = sizeof a / sizeof a[0] - (ikey ? 0 : 1);
  argv[0] = argv[1] = argv[2] = NULL;
  memcpy(argv + 3, a, n * sizeof a[0]);
  return (int)(3 + n);
}

int dlock__redis_lock_release(void *be, const dlock__release *rel) {
  dlock__redis *r = be;
  void *bh = rel->bh;
  dlock_lock_kind_t kind = rel->kind;
  const char *name = rel->name, *owner = rel->owner;
  const char *request_id = rel->request_id;
  char lease[24], wfield[128];
  const char *latch = r->latch_ms;
  dlock__fmt_i64(lease, rel->lease_ms);
  lock_keys k;
  int rc = keys_get(&k, bh, kind, name, owner, KM_ALL);
  if (rc)
    return rc;
  /* this client is subscribed to the lock's wake channel, so it is not an
   * outsider that a release should yield to (a fair waiter's channel is
   * its own: no such question) */
  bool watching =
      kind != DLOCK_FAIR && k.channel && dlock__redis_watching(r, k.channel);
  const redis_handle *h = bh;
  char *latch_prefix =
      h ? h->latch_prefix : dlock__redis_prefixed(LATCH_PREFIX, name);
  /* the latch key on the stack (one per release: no allocation) */
  char latch_buf[DLOCK_NAME_MAX + 128];
  char *latch_key = NULL;
  if (latch_prefix) {
    size_t pl = strlen(latch_prefix), rl = strlen(request_id);
    if (pl + 1 + rl < sizeof latch_buf) {
      memcpy(latch_buf, latch_prefix, pl);
      latch_buf[pl] = ':';
      memcpy(latch_buf + pl + 1, request_id, rl + 1);
      latch_key = latch_buf;
    } else {
      latch_key =
          dlock__concat(3, (const char *[]){latch_prefix, ":", request_id});
    }
  }
  if (!h)
    dlock__free(latch_prefix);
  redisReply *rep = NULL;
  char ibuf[DLOCK_NAME_MAX + 160];
  /* a write hold's info key is its field's, "<owner>:write" */
  if (kind == DLOCK_WRITE && !rc)
    rc = write_field(wfield, sizeof wfield, owner);
  const char *ikey = dlock__redis_info_key(
      r, name, kind == DLOCK_WRITE ? wfield : owner, ibuf, sizeof ibuf);
  if (rc) {
  } else if (!latch_key) {
    rc = DLOCK_ENOMEM;
  } else if (kind == DLOCK_READ) {
    const char *argv[MAX_ARGS] = {0,
                                  0,
                                  0,
                                  name,
                                  k.channel,
                                  k.rw_mine,
                                  k.rw_base,
                                  latch_key,
                                  k.queue,
                                  k.timeouts,
                                  k.yield,
                                  k.readers,
                                  "0",
                                  owner,
                                  r->publish,
                                  latch,
                                  k.grant,
                                  YIELD_PERIOD_MS,
                                  watching ? "1" : "0",
                                  ikey};
    rc = dlock__redis_script(r, &dlock__script_rw_read_release, 9,
                             ikey ? 20 : 19, argv, false, &rep);
    if (!rc)
      rc = release_outcome(rep, true);
  } else if (kind == DLOCK_WRITE) {
    {
      const char *argv[MAX_ARGS] = {0,
                                    0,
                                    0,
                                    name,
                                    k.channel,
                                    latch_key,
                                    k.queue,
                                    k.timeouts,
                                    k.yield,
                                    k.readers,
                                    k.readturn,
                                    "1",
                                    lease,
                                    wfield,
                                    r->publish,
                                    latch,
                                    k.grant,
                                    YIELD_PERIOD_MS,
                                    watching ? "1" : "0",
                                    READTURN_MS,
                                    ikey};
      rc = dlock__redis_script(r, &dlock__script_rw_write_release, 8,
                               ikey ? 21 : 20, argv, false, &rep);
      if (!rc)
        rc = release_outcome(rep, false);
    }
  } else if (kind == DLOCK_FAIR) {
    const char *argv[MAX_ARGS] = {
        0,         0,   0,     name,  k.queue,    k.timeouts, k.channel,
        latch_key, "0", lease, owner, r->publish, latch,      ikey};
    rc = dlock__redis_script(r, &dlock__script_fair_release, 5, ikey ? 14 : 13,
                             argv, false, &rep);
    if (!rc)
      rc = release_outcome(rep, false);
  } else {
    const char *argv[MAX_ARGS];
    int argc = release_argv(argv, r, &k, name, owner, latch_key, lease,
                            watching, ikey);
    /* no resend here: the core retries with the same request id, knowing
     * that a retry answered "not owner" means the first one released */
    rc = dlock__redis_script(r, &dlock__script_lock_release, 7, argc, argv,
                             false, &rep);
    if (!rc)
      rc = release_outcome(rep, false);
  }
  keys_clear(&k);
  if (latch_key != latch_buf)
    dlock__free(latch_key);
  return rc;
}

int dlock__redis_lock_force_release(void *be, dlock_lock_kind_t kind,
                                    const char *name, bool *deleted) {
  dlock__redis *r = be;
  lock_keys k;
  int rc = keys_make(&k, kind, name, NULL, KM_CHANNEL | KM_QUEUE);
  if (rc)
    return rc;
  /* a read-write lock wakes everyone; a fair lock its head only */
  const char *argv[MAX_ARGS] = {0,         0,
                                0,         name,
                                k.channel, kind == DLOCK_FAIR ? k.queue : NULL,
                                NULL,      NULL};
  int nkeys = kind == DLOCK_FAIR ? 3 : 2;
  argv[3 + nkeys] = is_rw(kind) ? "1" : "0";
  argv[4 + nkeys] = r->publish;
  redisReply *rep = NULL;
  /* never re-sent: if the first DEL ran and a waiter then took the lock,
   * a second one would delete the new owner's lock */
  rc = dlock__redis_script(r, &dlock__script_lock_force_release, nkeys,
                           5 + nkeys, argv, false, &rep);
  keys_clear(&k);
  if (rc)
    return rc;
  if (rep->type != REDIS_REPLY_INTEGER)
    return dlock__redis_unexpected(rep, "force release");
  *deleted = rep->integer == 1;
  freeReplyObject(rep);
  return 0;
}

/* --------------------------------------------------------------- renew */

/* Renewal: the items of each kind go in batches of RENEW_BATCH, one script
 * call per batch, and every batch of every kind in one pipelined round
 * trip. NOSCRIPT batches are resent as EVAL in a second round trip on the
 * same connection. */
#define RENEW_BATCH DLOCK__REDIS_RENEW_BATCH

typedef struct renew_batch {
  const dlock__script *script;
  dlock__renewal **items; /* points into the caller's array */
  size_t n;
  char **owned; /* strings built for this batch (keys, fields) */
  size_t nowned;
} renew_batch;

static const dlock__script *renew_script(dlock__hold_kind kind) {
  switch (kind) {
  case DLOCK__HK_READ:
    return &dlock__script_rw_read_renew;
  case DLOCK__HK_PERMIT:
    return &dlock__script_permit_renew;
  default:
    return &dlock__script_lock_renew;
  }
}

static char *own(renew_batch *b, char *s) {
  if (s)
    b->owned[b->nowned++] = s;
  return s;
}

/* Formats one batch's EVALSHA (or EVAL). Layouts:
 *   lock/write: KEYS name...,            ARGV lease, field...
 *   read:       KEYS (name, prefix)...,  ARGV lease, owner...
 *   permit:     KEYS {name}:timeout...,  ARGV lease, permit id...
 *               (with holder info: then each permit's info key) */
static int renew_append(dlock__conn *c, renew_batch *b, const char *lease,
                        bool info, bool body, const char **argv, size_t *lens) {
  size_t n = b->n, nk = b->script == &dlock__script_rw_read_renew ? 2 * n : n;
  if (!b->nowned) {
    for (size_t i = 0; i < n; i++) {
      dlock__renewal *it = b->items[i];
      const char *key = it->name, *key2 = NULL, *arg = it->owner;
      if (it->kind == DLOCK__HK_WRITE) {
        arg = own(b, dlock__asprintf("%s:write", it->owner));
      } else if (it->kind == DLOCK__HK_PERMIT) {
        key = own(b, dlock__redis_suffixed(it->name, "timeout"));
      } else if (it->kind == DLOCK__HK_READ) {
        key2 = own(b, rw_mine_key(it->name, it->owner));
        if (!key2)
          return DLOCK_ENOMEM;
      }
      if (!key || !arg)
        return DLOCK_ENOMEM;
      if (info && it->kind == DLOCK__HK_PERMIT) {
        char buf[DLOCK_NAME_MAX + 160];
        const char *ik = dlock__redis_holder_key(it->name, it->owner, buf, sizeof buf);
        if (!(argv[3 + nk + 1 + n + i] = own(b, dlock__strdup(ik ? ik : ""))))
          return DLOCK_ENOMEM;
      }
      if (key2) {
        argv[3 + 2 * i] = key;
        argv[3 + 2 * i + 1] = key2;
      } else {
        argv[3 + i] = key;
      }
      argv[3 + nk + 1 + i] = arg;
    }
    argv[3 + nk] = lease;
  }
  size_t argc = 3 + nk + 1 + n;
  /* a client with holder info renews its info keys with the locks and
   * permits (a permit's key named here: the script has only the ZSET) */
  if (info && (b->script == &dlock__script_lock_renew ||
               b->script == &dlock__script_rw_read_renew))
    argv[argc++] = "1";
  if (info && b->script == &dlock__script_permit_renew)
    argc += n; /* the permits' info keys, built with the batch */
  for (size_t i = 3; i < argc; i++)
    lens[i] = strlen(argv[i]);
  return dlock__redis_append_script(c, b->script, body, (int)nk, (int)argc,
                                    argv, lens);
}

static int renew_results(redisReply *rep, renew_batch *b) {
  if (rep->type == REDIS_REPLY_ERROR)
    return dlock__redis_error(rep, "lock renew");
  if (rep->type != REDIS_REPLY_ARRAY || rep->elements != b->n)
    return dlock__seterr(DLOCK_EPROTO, "lock renew: unexpected reply");
  for (size_t i = 0; i < b->n; i++)
    b->items[i]->result = rep->element[i]->type == REDIS_REPLY_INTEGER &&
                          rep->element[i]->integer == 1;
  return 0;
}

/* Orders renewals of one kind by their name's cluster slot. */
static int by_slot(const void *a, const void *b) {
  unsigned sa = dlock__redis_key_slot((*(dlock__renewal *const *)a)->name);
  unsigned sb = dlock__redis_key_slot((*(dlock__renewal *const *)b)->name);
  return sa < sb ? -1 : sa > sb;
}

/* Splits items into batches by script; returns how many (0: no memory).
 * On a cluster node (`by_slots`) a batch also holds one slot only: a
 * script's keys must share a slot there, and one node owns many. */
static size_t renew_plan(dlock__renewal *items, size_t n, bool by_slots,
                         renew_batch **out, dlock__renewal ***order) {
  const dlock__hold_kind kinds[] = {DLOCK__HK_LOCK, DLOCK__HK_WRITE,
                                    DLOCK__HK_READ, DLOCK__HK_PERMIT};
  *out = dlock__calloc(n + 4, sizeof **out);
  *order = dlock__calloc(n, sizeof **order);
  if (!*out || !*order)
    return 0;
  size_t nb = 0, at = 0;
  for (size_t k = 0; k < 4; k++) {
    size_t start = at;
    for (size_t i = 0; i < n; i++)
      if (items[i].kind == kinds[k])
        (*order)[at++] = &items[i];
    if (by_slots && at - start > 1)
      qsort(*order + start, at - start, sizeof **order, by_slot);
    for (size_t s = start; s < at;) {
      renew_batch *b = &(*out)[nb++];
      b->script = renew_script(kinds[k]);
      b->items = *order + s;
      size_t m = 1;
      unsigned slot = by_slots ? dlock__redis_key_slot(b->items[0]->name) : 0;
      while (s + m < at && m < RENEW_BATCH &&
             (!by_slots || dlock__redis_key_slot(b->items[m]->name) == slot))
        m++;
      b->n = m;
      s += m;
      b->owned = dlock__calloc(2 * b->n + 1, sizeof *b->owned);
      if (!b->owned)
        return 0;
    }
  }
  return nb;
}

int dlock__redis_lock_renew(void *be, dlock__renewal *items, size_t n,
                            int64_t lease_ms, int64_t deadline) {
  dlock__redis *r = be;
  if (n == 0)
    return 0;
  char lease[24];
  dlock__fmt_i64(lease, lease_ms);
  renew_batch *b = NULL;
  dlock__renewal **order = NULL;
  size_t nb = renew_plan(items, n, r->sharded, &b, &order);
  size_t args = 4 + 3 * RENEW_BATCH;
  const char **argv = dlock__calloc(nb ? nb * args : 1, sizeof *argv);
  size_t *lens = dlock__calloc(args, sizeof *lens);
  redisReply **rep = dlock__calloc(nb ? nb : 1, sizeof *rep);
  dlock__conn *c = NULL;
  int64_t cmd_deadline = dlock__deadline_after(r->command_timeout_ms);
  if (deadline > cmd_deadline)
    deadline = cmd_deadline;
  int rc = (!nb || !argv || !lens || !rep)
               ? DLOCK_ENOMEM
               : dlock__redis_pool_get_until(r, deadline, &c);
  for (size_t i = 0; !rc && i < nb; i++)
    rc = renew_append(c, &b[i], lease, r->holder_info != NULL, false,
                      argv + i * args, lens);
  if (!rc)
    rc = dlock__redis_exec(r, c, deadline, nb, rep);
  if (!rc)
    dlock__redis_saw_replies(r, c, rep, nb); /* a demoted master */
  for (size_t i = 0; !rc && i < nb; i++) {
    if (dlock__redis_is_noscript(rep[i])) {
      freeReplyObject(rep[i]);
      rep[i] = NULL;
      rc = renew_append(c, &b[i], lease, r->holder_info != NULL, true,
                        argv + i * args, lens);
      if (!rc)
        rc = dlock__redis_exec(r, c, deadline, 1, &rep[i]);
    }
    if (!rc)
      rc = renew_results(rep[i], &b[i]);
  }
  if (c)
    dlock__redis_pool_put(r, c);
  for (size_t i = 0; b && i < nb; i++) {
    for (size_t j = 0; b[i].owned && j < b[i].nowned; j++)
      dlock__free(b[i].owned[j]);
    dlock__free(b[i].owned);
    if (rep)
      freeReplyObject(rep[i]);
  }
  dlock__free(b);
  dlock__free(order);
  dlock__free(rep);
  dlock__free(argv);
  dlock__free(lens);
  return rc;
}

/* --------------------------------------------------------------- query */

/* The command of a query into argv[0..2]; its length. */
static int query_cmd(dlock_lock_kind_t kind, const char *name,
                     const char *owner, dlock__lock_query q, char *wfield,
                     size_t wlen, const char **argv, int *argc) {
  if (kind == DLOCK_WRITE) {
    int rc = write_field(wfield, wlen, owner);
    if (rc)
      return rc;
    owner = wfield;
  }
  *argc = 2;
  argv[1] = name;
  switch (q) {
  case DLOCK__Q_LOCKED:
    argv[0] = "EXISTS";
    break;
  case DLOCK__Q_HELD:
    argv[0] = "HEXISTS";
    argv[2] = owner;
    *argc = 3;
    break;
  case DLOCK__Q_COUNT:
    argv[0] = "HGET";
    argv[2] = owner;
    *argc = 3;
    break;
  case DLOCK__Q_REMAINING:
  default:
    argv[0] = "PTTL";
    break;
  }
  return 0;
}

int dlock__redis_lock_query_reply(dlock__lock_query q, redisReply *rep,
                                  int64_t *out) {
  const char *what = q == DLOCK__Q_LOCKED  ? "EXISTS"
                     : q == DLOCK__Q_HELD  ? "HEXISTS"
                     : q == DLOCK__Q_COUNT ? "HGET"
                                           : "PTTL";
  if (rep->type == REDIS_REPLY_ERROR) {
    int rc = dlock__redis_error(rep, what);
    freeReplyObject(rep);
    return rc;
  }
  /* only the shapes and ranges each command can answer: EXISTS and
   * HEXISTS 0/1, PTTL >= -2, HGET a decimal count or nil */
  bool flag = q == DLOCK__Q_LOCKED || q == DLOCK__Q_HELD;
  if (rep->type == REDIS_REPLY_INTEGER && q != DLOCK__Q_COUNT) {
    if ((flag && (rep->integer < 0 || rep->integer > 1)) ||
        (!flag && rep->integer < -2))
      return dlock__redis_unexpected(rep, what);
    *out = rep->integer;
  } else if (q == DLOCK__Q_COUNT && rep->type == REDIS_REPLY_NIL) {
    *out = 0;
  } else if (q == DLOCK__Q_COUNT && rep->type == REDIS_REPLY_STRING) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(rep->str, &end, 10);
    if (!end || end == rep->str || *end || v < 0 || errno == ERANGE)
      return dlock__redis_unexpected(rep, "hold count");
    *out = v;
  } else {
    return dlock__redis_unexpected(rep, what);
  }
  freeReplyObject(rep);
  return 0;
}

int dlock__redis_lock_query_req(dlock_lock_kind_t kind, const char *name,
                                const char *owner, dlock__lock_query q,
                                dlock__redis_req *req) {
  char wfield[128];
  const char *cmd[3];
  int n = 0;
  int rc = query_cmd(kind, name, owner, q, wfield, sizeof wfield, cmd, &n);
  if (rc)
    return rc;
  const char *argv[6] = {NULL, NULL, NULL, cmd[0], cmd[1], n > 2 ? cmd[2] : NULL};
  return dlock__redis_req_set(req, NULL, 0, 3 + n, argv);
}

int dlock__redis_lock_query(void *be, dlock_lock_kind_t kind, const char *name,
                            const char *owner, dlock__lock_query q,
                            int64_t *out) {
  char wfield[128];
  const char *argv[3];
  int argc = 0;
  int rc = query_cmd(kind, name, owner, q, wfield, sizeof wfield, argv, &argc);
  if (rc)
    return rc;
  redisReply *rep = NULL;
  rc = dlock__redis_command(be, argc, argv, &rep);
  if (rc)
    return rc;
  return dlock__redis_lock_query_reply(q, rep, out);
}

/* --------------------------------------------------------------- state */

static int state_fail(dlock_lock_state_t *st, redisReply *rep, int rc) {
  dlock_lock_state_free(st);
  freeReplyObject(rep);
  return rc;
}

static const char *kind_label(dlock_lock_kind_t kind) {
  switch (kind) {
  case DLOCK_FAIR:
    return "fair";
  case DLOCK_FENCED:
    return "fenced";
  default:
    return "reentrant";
  }
}

/* Adds the holders in a hash's fields; a read-write lock's "mode" field is
 * not a holder, and its writer's field loses its ":write". */
static int state_holders(dlock_lock_state_t *st, const redisReply *fields,
                         const redisReply *infos, bool rw) {
  size_t nh = fields->elements / 2;
  for (size_t i = 0; i < nh; i++) {
    const redisReply *f = fields->element[2 * i],
                     *v = fields->element[2 * i + 1];
    if (f->type != REDIS_REPLY_STRING || (rw && strcmp(f->str, "mode") == 0))
      continue;
    size_t len = f->len;
    const char *side = NULL;
    if (rw) {
      side = "read";
      if (len > 6 && memcmp(f->str + len - 6, ":write", 6) == 0) {
        side = "write";
        len -= 6;
      }
    }
    char *owner = dlock__strndup(f->str, len);
    if (!owner)
      return DLOCK_ENOMEM;
    if (i < infos->elements && infos->element[i]->type == REDIS_REPLY_STRING &&
        !(st->holder_infos[st->nholders] =
              dlock__strndup(infos->element[i]->str, infos->element[i]->len))) {
      dlock__free(owner);
      return DLOCK_ENOMEM;
    }
    dlock_holder_t *h = &st->holders[st->nholders++];
    h->owner = owner;
    h->side = side;
    h->count = v->type == REDIS_REPLY_STRING ? strtoll(v->str, NULL, 10) : 0;
  }
  return 0;
}

int dlock__redis_lock_state(void *be, dlock_lock_kind_t kind, const char *name,
                            dlock_lock_state_t **out) {
  lock_keys k;
  int rc = keys_make(&k, kind, name, NULL,
                     KM_QUEUE | KM_TOKEN | (kind == DLOCK_FAIR ? 0 : KM_HANDOFF));
  if (rc)
    return rc;
  redisReply *rep = NULL;
  const char *label = is_rw(kind)            ? "rw"
                      : kind == DLOCK_FAIR   ? "fair"
                      : kind == DLOCK_FENCED ? "fenced"
                                             : "lock";
  const char *third = kind == DLOCK_FAIR ? k.timeouts : k.token;
  char *iprefix = dlock__redis_own_key(HOLDER_PREFIX, name);
  if (!iprefix) {
    keys_clear(&k);
    return DLOCK_ENOMEM;
  }
  bool fair = kind == DLOCK_FAIR;
  const char *argv[MAX_ARGS] = {0,
                                0,
                                0,
                                name,
                                k.queue,
                                third,
                                label,
                                iprefix,
                                fair ? "" : k.timeouts,
                                fair ? "" : k.grant,
                                fair ? "" : ((dlock__redis *)be)->publish};
  int nkeys = is_rw(kind) ? 2 : 3; /* read-write: its queued writers */
  if (is_rw(kind)) {
    argv[5] = label;
    argv[6] = iprefix;
    argv[7] = k.timeouts;
    argv[8] = k.grant;
    argv[9] = ((dlock__redis *)be)->publish;
  }
  rc = dlock__redis_script(be, &dlock__script_lock_state, nkeys, 8 + nkeys,
                           argv, true, &rep);
  keys_clear(&k);
  dlock__free(iprefix);
  if (rc)
    return rc;
  if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 8 ||
      rep->element[0]->type != REDIS_REPLY_STRING ||
      rep->element[1]->type != REDIS_REPLY_INTEGER ||
      rep->element[2]->type != REDIS_REPLY_ARRAY ||
      rep->element[2]->elements % 2 != 0 ||
      rep->element[3]->type != REDIS_REPLY_ARRAY ||
      rep->element[4]->type != REDIS_REPLY_ARRAY ||
      rep->element[5]->type != REDIS_REPLY_INTEGER ||
      rep->element[6]->type != REDIS_REPLY_ARRAY ||
      rep->element[7]->type != REDIS_REPLY_ARRAY)
    return dlock__redis_unexpected(rep, "lock state");
  const char *type = rep->element[0]->str;
  if (strcmp(type, "none") != 0 && strcmp(type, "hash") != 0) {
    rc = dlock__seterr(DLOCK_EWRONGTYPE,
                       "lock state: key '%.200s' holds a %s, not a lock", name,
                       type);
    freeReplyObject(rep);
    return rc;
  }
  const redisReply *fields = rep->element[2], *queue = rep->element[3],
                   *dl = rep->element[4];
  size_t nh = fields->elements / 2, nq = queue->elements;
  dlock_lock_state_t *st = dlock__calloc(1, sizeof *st);
  if (!st || !(st->holders = dlock__calloc(nh ? nh : 1, sizeof *st->holders)) ||
      !(st->waiters = dlock__calloc(nq ? nq : 1, sizeof *st->waiters)) ||
      !(st->holder_infos = dlock__calloc(nh ? nh : 1, sizeof(char *))) ||
      !(st->waiter_infos = dlock__calloc(nq ? nq : 1, sizeof(char *))) ||
      !(st->name = dlock__strdup(name)) ||
      (kind == DLOCK_FAIR &&
       !(st->waiter_deadlines_ms =
             dlock__calloc(nq ? nq : 1, sizeof *st->waiter_deadlines_ms))))
    return state_fail(st, rep, DLOCK_ENOMEM);
  st->ttl_ms = rep->element[1]->integer;
  st->token = rep->element[5]->integer;
  if (strcmp(type, "none") == 0) {
    st->kind = "free";
  } else if (is_rw(kind)) {
    st->kind = "read";
    for (size_t i = 0; i + 1 < fields->elements; i += 2)
      if (fields->element[i]->type == REDIS_REPLY_STRING &&
          strcmp(fields->element[i]->str, "mode") == 0 &&
          fields->element[i + 1]->type == REDIS_REPLY_STRING &&
          strcmp(fields->element[i + 1]->str, "write") == 0)
        st->kind = "write";
  } else {
    st->kind = kind_label(kind);
  }
  if ((rc = state_holders(st, fields, rep->element[6], is_rw(kind))))
    return state_fail(st, rep, rc);
  const redisReply *winfo = rep->element[7];
  for (size_t i = 0; i < nq; i++) {
    const redisReply *m = queue->element[i];
    if (m->type != REDIS_REPLY_STRING)
      continue;
    size_t olen = m->len;
    if (kind != DLOCK_FAIR) {
      /* member "<client-id>:<tid>:<seq>:<lease>": the owner is the first
       * two fields */
      const char *c1 = memchr(m->str, ':', m->len);
      const char *c2 =
          c1 ? memchr(c1 + 1, ':', m->len - (size_t)(c1 + 1 - m->str)) : NULL;
      olen = c2 ? (size_t)(c2 - m->str) : m->len;
    }
    char *owner = dlock__strndup(m->str, olen);
    if (!owner)
      return state_fail(st, rep, DLOCK_ENOMEM);
    if (i < winfo->elements && winfo->element[i]->type == REDIS_REPLY_STRING &&
        !(st->waiter_infos[st->nwaiters] =
              dlock__strndup(winfo->element[i]->str, winfo->element[i]->len))) {
      dlock__free(owner);
      return state_fail(st, rep, DLOCK_ENOMEM);
    }
    if (st->waiter_deadlines_ms)
      st->waiter_deadlines_ms[st->nwaiters] =
          i < dl->elements && dl->element[i]->type == REDIS_REPLY_INTEGER
              ? dl->element[i]->integer
              : 0;
    st->waiters[st->nwaiters++] = owner;
  }
  freeReplyObject(rep);
  *out = st;
  return 0;
}

/* -------------------------------------------- requests for Redlock */

int dlock__redis_lock_acquire_req(void *be, const dlock__acquire *a,
                                  dlock__redis_req *q) {
  if (a->kind != DLOCK_REENTRANT && a->kind != DLOCK_FENCED)
    return dlock__seterr(DLOCK_ENOTSUP, "redlock: %s locks are not offered",
                         a->kind == DLOCK_FAIR ? "fair" : "read-write");
  char lease[24];
  dlock__fmt_i64(lease, a->lease_ms);
  lock_keys k;
  int rc = keys_get(&k, a->bh, a->kind, a->name, a->owner,
                    KM_QUEUE | (a->kind == DLOCK_FENCED ? KM_TOKEN : 0));
  if (rc)
    return rc;
  /* no queue member: exactly Redisson's acquire (lock_acquire.lua), and
   * the holder info where the client has it */
  char ibuf[DLOCK_NAME_MAX + 160];
  const char *ikey = dlock__redis_info_key(be, a->name, a->owner, ibuf,
                                           sizeof ibuf);
  const char *argv[MAX_ARGS] = {0,
                                0,
                                0,
                                a->name,
                                k.queue,
                                k.timeouts,
                                lease,
                                a->owner,
                                "",
                                "0",
                                "0",
                                a->kind == DLOCK_FENCED ? k.token : "",
                                ikey,
                                ((dlock__redis *)be)->holder_info};
  rc = dlock__redis_req_set(q, &dlock__script_lock_acquire, 3, ikey ? 14 : 12,
                            argv);
  keys_clear(&k);
  return rc;
}

int dlock__redis_lock_acquire_reply(const dlock__acquire *a, redisReply *rep,
                                    int64_t *pttl, int64_t *token) {
  if (rep->type == REDIS_REPLY_ERROR) {
    int rc = dlock__redis_error(rep, "lock acquire");
    freeReplyObject(rep);
    return rc;
  }
  if (a->kind == DLOCK_FENCED && rep->type != REDIS_REPLY_INTEGER) {
    if (!token_reply(rep, token))
      return dlock__redis_unexpected(rep, "fenced lock acquire");
    freeReplyObject(rep);
    return 1;
  }
  if (rep->type == REDIS_REPLY_NIL && a->kind != DLOCK_FENCED) {
    freeReplyObject(rep);
    return 1;
  }
  if (rep->type != REDIS_REPLY_INTEGER || rep->integer < -2)
    return dlock__redis_unexpected(rep, "lock acquire");
  *pttl = rep->integer;
  freeReplyObject(rep);
  return 0;
}

int dlock__redis_lock_release_req(void *be, const dlock__release *rel,
                                  bool own_waits, dlock__redis_req *q) {
  dlock__redis *r = be;
  void *bh = rel->bh;
  dlock_lock_kind_t kind = rel->kind;
  const char *name = rel->name, *owner = rel->owner;
  const char *request_id = rel->request_id;
  if (kind != DLOCK_REENTRANT && kind != DLOCK_FENCED)
    return dlock__seterr(DLOCK_ENOTSUP, "redlock: only reentrant and fenced "
                                        "locks are offered");
  char lease[24];
  dlock__fmt_i64(lease, rel->lease_ms);
  lock_keys k;
  int rc = keys_get(&k, bh, kind, name, owner, KM_ALL);
  if (rc)
    return rc;
  const redis_handle *h = bh;
  char *latch_prefix =
      h ? h->latch_prefix : dlock__redis_prefixed(LATCH_PREFIX, name);
  char *latch_key =
      latch_prefix
          ? dlock__concat(3, (const char *[]){latch_prefix, ":", request_id})
          : NULL;
  if (!h)
    dlock__free(latch_prefix);
  if (!latch_key) {
    keys_clear(&k);
    return DLOCK_ENOMEM;
  }
  /* nobody queues on a Redlock: "watching" is moot, and a release always
   * wakes the lock's channel (Redisson's "0"); one server's release
   * (own_waits) says whether this client is subscribed to the channel,
   * as lock_release does */
  bool watching = own_waits && k.channel && dlock__redis_watching(r, k.channel);
  char ibuf[DLOCK_NAME_MAX + 160];
  const char *argv[MAX_ARGS];
  int argc =
      release_argv(argv, r, &k, name, owner, latch_key, lease, watching,
                   dlock__redis_info_key(r, name, owner, ibuf, sizeof ibuf));
  rc = dlock__redis_req_set(q, &dlock__script_lock_release, 7, argc, argv);
  keys_clear(&k);
  dlock__free(latch_key);
  return rc;
}

int dlock__redis_lock_release_reply(redisReply *rep) {
  if (rep->type == REDIS_REPLY_ERROR) {
    int rc = dlock__redis_error(rep, "lock release");
    freeReplyObject(rep);
    return rc;
  }
  return release_outcome(rep, false);
}

int dlock__redis_lock_renew_req(const dlock__renewal *items, size_t n,
                                int64_t lease_ms, bool info,
                                dlock__redis_req *q) {
  /* lock_renew.lua: KEYS names, ARGV lease then one owner per key (then
   * '1' to renew the holders' info keys too) */
  size_t argc = 3 + n + 1 + n;
  const char **argv = dlock__calloc(argc + 1, sizeof *argv);
  if (!argv)
    return DLOCK_ENOMEM;
  char lease[24];
  dlock__fmt_i64(lease, lease_ms);
  for (size_t i = 0; i < n; i++) {
    argv[3 + i] = items[i].name;
    argv[3 + n + 1 + i] = items[i].owner;
  }
  argv[3 + n] = lease;
  if (info)
    argv[argc++] = "1";
  int rc = dlock__redis_req_set(q, &dlock__script_lock_renew, (int)n,
                                (int)argc, argv);
  dlock__free(argv);
  return rc;
}

int dlock__redis_lock_renew_reply(redisReply *rep, size_t n, int *results) {
  int rc = 0;
  if (rep->type == REDIS_REPLY_ERROR)
    rc = dlock__redis_error(rep, "lock renew");
  else if (rep->type != REDIS_REPLY_ARRAY || rep->elements != n)
    rc = dlock__seterr(DLOCK_EPROTO, "lock renew: unexpected reply");
  for (size_t i = 0; !rc && i < n; i++)
    results[i] = rep->element[i]->type == REDIS_REPLY_INTEGER &&
                 rep->element[i]->integer == 1;
  freeReplyObject(rep);
  return rc;
}

int dlock__redis_token_raise_req(const char *name, int64_t token,
                                 dlock__redis_req *q) {
  char *key = dlock__redis_prefixed(TOKEN_PREFIX, name);
  if (!key)
    return DLOCK_ENOMEM;
  char t[24];
  dlock__fmt_i64(t, token);
  const char *argv[5] = {0, 0, 0, key, t};
  int rc = dlock__redis_req_set(q, &dlock__script_token_raise, 1, 5, argv);
  dlock__free(key);
  return rc;
}

/* ----------------------------------------- sent requests (async calls)
 *
 * lock_acquire_send / lock_release_send (backend.h): a try of a reentrant
 * or fenced lock and its release, as the prepared requests above, on the
 * shared pipelined connection without waiting (mux.c). Only where one
 * script is the whole operation: not through Sentinel (a demoted master's
 * READONLY is resent to the new one), nor with replicas to WAIT for or a
 * ROLE due (the blocking path, taken then, asks it). A
 * NOSCRIPT answer sends the script's body, as the blocking path does. */

typedef struct sent_op {
  dlock__redis *r;
  dlock__redis_req q;
  bool body;    /* sent with the script's body (after a NOSCRIPT) */
  bool release; /* else an acquire */
  dlock_lock_kind_t kind;
  dlock__sent_fn done;
  void *arg;
} sent_op;

static bool sendable(dlock__redis *r, dlock_lock_kind_t kind) {
  return r->mux && !r->sentinel && !r->left &&
         (kind == DLOCK_REENTRANT || kind == DLOCK_FENCED) &&
         dlock__redis_script_alone(r);
}

static int sent_append(dlock__conn *c, void *arg) {
  sent_op *o = arg;
  return dlock__redis_req_append(c, &o->q, o->body);
}

static void sent_free(sent_op *o) {
  dlock__redis_req_clear(&o->q);
  dlock__free(o);
}

static void sent_reply(void *arg, int rc, redisReply *rep) {
  sent_op *o = arg;
  if (!rc && dlock__redis_is_noscript(rep) && !o->body) {
    /* the server lost its scripts (a restart): the body loads it */
    freeReplyObject(rep);
    o->body = true;
    rc = dlock__redis_mux_send(o->r, o->r->mux, sent_append, o,
                               o->r->command_timeout_ms, sent_reply, o);
    if (rc == 0)
      return;
    o->done(o->arg, rc, 0, 0); /* nothing of it ran */
    sent_free(o);
    return;
  }
  int64_t pttl = -1, token = 0;
  if (!rc && o->release) {
    rc = dlock__redis_lock_release_reply(rep);
  } else if (!rc) {
    dlock__acquire a = {.kind = o->kind, .name = o->q.argv[3]};
    rc = dlock__redis_lock_wrongtype(
        dlock__redis_lock_acquire_reply(&a, rep, &pttl, &token), a.name);
  }
  o->done(o->arg, rc, pttl, token);
  sent_free(o);
}

static int send_op(dlock__redis *r, sent_op *o) {
  o->r = r;
  int rc = dlock__redis_mux_send(r, r->mux, sent_append, o,
                                 r->command_timeout_ms, sent_reply, o);
  if (rc) /* nothing was sent, and nothing will run */
    sent_free(o);
  return rc;
}

int dlock__redis_lock_acquire_send(void *be, const dlock__acquire *a,
                                   dlock__sent_fn done, void *arg) {
  dlock__redis *r = be;
  if (!sendable(r, a->kind) || a->q)
    return DLOCK__SEND_BLOCKS;
  sent_op *o = dlock__calloc(1, sizeof *o);
  if (!o)
    return DLOCK_ENOMEM;
  o->kind = a->kind;
  o->done = done;
  o->arg = arg;
  int rc = dlock__redis_lock_acquire_req(be, a, &o->q);
  if (rc) {
    dlock__free(o);
    return rc;
  }
  return send_op(r, o);
}

int dlock__redis_lock_release_send(void *be, const dlock__release *rel,
                                   dlock__sent_fn done, void *arg) {
  dlock__redis *r = be;
  if (!sendable(r, rel->kind))
    return DLOCK__SEND_BLOCKS;
  sent_op *o = dlock__calloc(1, sizeof *o);
  if (!o)
    return DLOCK_ENOMEM;
  o->release = true;
  o->kind = rel->kind;
  o->done = done;
  o->arg = arg;
  int rc = dlock__redis_lock_release_req(be, rel, true, &o->q);
  if (rc) {
    dlock__free(o);
    return rc;
  }
  return send_op(r, o);
}
