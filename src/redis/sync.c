/*
 * sync.c - semaphores, permit semaphores and count-down latches in the
 * Redis backend, in Redisson's layout (REDIS-LAYOUT.md):
 *
 *   semaphore         string `name` = available permits; channel
 *                     redisson_sc:{name}, payload the new count;
 *   permit semaphore  the same, plus ZSET {name}:timeout: permit id ->
 *                     expiry in ms on the server's clock (the renewer's
 *                     permit_renew.lua extends it with ZADD XX). Ids cross
 *                     this file as 32 hex digits; the scripts store the 16
 *                     bytes they spell (Redisson's member) and list members
 *                     as hex again (include/permit_id.lua);
 *   latch             string `name` = count; channel
 *                     redisson_countdownlatch__channel__{name}, payload "0"
 *                     (reached zero) or "1" (a new count).
 *
 * Every write that changes what a waiter may do publishes on the channel,
 * through r->publish, so one script serves sharded pub/sub too.
 *
 * Retrying: only read-only scripts and commands are re-sent after a broken
 * connection (state, available, count). Nothing that changes a count is
 * re-sent here: a second DECRBY or INCRBY would count twice.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "redis/redis.h"

#define SEM_CHANNEL_PREFIX "redisson_sc"
#define LATCH_CHANNEL_PREFIX "redisson_countdownlatch__channel__"
#define PERMIT_SUFFIX "timeout"
/* Most permits a state lists (dlock.h promises at most 100). */
#define STATE_MAX_PERMITS "100"
#define MAX_ARGS DLOCK__REDIS_MAX_ARGS

char *dlock__redis_sync_channel(void *be, dlock__sync_kind kind,
                                const char *name) {
  (void)be;
  if (kind == DLOCK__SYNC_LATCH)
    /* Redisson always adds the braces here, '{' in the name or not */
    return dlock__asprintf(LATCH_CHANNEL_PREFIX "{%s}", name);
  return dlock__redis_prefixed(SEM_CHANNEL_PREFIX, name);
}

/* An integer reply, or DLOCK_EPROTO. Frees rep. */
static int int_reply(redisReply *rep, const char *what, int64_t *out) {
  if (rep->type != REDIS_REPLY_INTEGER)
    return dlock__redis_unexpected(rep, what);
  *out = rep->integer;
  freeReplyObject(rep);
  return 0;
}

/* A 0/1 reply as a flag, or DLOCK_EPROTO. Frees rep. */
static int flag_reply(redisReply *rep, const char *what, bool *out) {
  int64_t v = 0;
  int rc = int_reply(rep, what, &v);
  if (rc)
    return rc;
  if (v != 0 && v != 1)
    return dlock__seterr(DLOCK_EPROTO, "%s: unexpected reply %" PRId64, what,
                         v);
  *out = v == 1;
  return 0;
}

/* A decimal count held in a string key: 0 when absent. */
static int get_count(dlock__redis *r, const char *name, const char *what,
                     int64_t *out) {
  const char *argv[2] = {"GET", name};
  redisReply *rep = NULL;
  int rc = dlock__redis_command(r, 2, argv, &rep);
  if (rc)
    return rc;
  if (rep->type == REDIS_REPLY_NIL) {
    *out = 0;
  } else if (rep->type == REDIS_REPLY_STRING) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(rep->str, &end, 10);
    if (!end || end == rep->str || *end || errno == ERANGE) {
      rc = dlock__seterr(DLOCK_EWRONGTYPE,
                         "%s: key '%.200s' does not hold a number", what, name);
      freeReplyObject(rep);
      return rc;
    }
    *out = v;
  } else {
    return dlock__redis_unexpected(rep, what);
  }
  freeReplyObject(rep);
  return 0;
}

/* Runs a script whose keys are `name` and its channel of `kind`, then
 * `nargs` arguments; the integer reply goes to *out. */
static int run_on_channel(dlock__redis *r, const dlock__script *s,
                          dlock__sync_kind kind, const char *name,
                          const char *const *args, int nargs, int64_t *out) {
  char *ch = dlock__redis_sync_channel(r, kind, name);
  if (!ch)
    return DLOCK_ENOMEM;
  const char *argv[MAX_ARGS] = {0, 0, 0, name, ch};
  for (int i = 0; i < nargs; i++)
    argv[5 + i] = args[i];
  redisReply *rep = NULL;
  int rc = dlock__redis_script(r, s, 2, 5 + nargs, argv, false, &rep);
  dlock__free(ch);
  if (rc)
    return rc;
  return int_reply(rep, s->name, out);
}

/* ----------------------------------------------------------- semaphore */

/* A script that sets `name` to n if it is absent and announces it on the
 * kind's channel (sem_set, latch_set): *set = whether it did. */
static int set_if_absent(dlock__redis *r, const dlock__script *s,
                         dlock__sync_kind kind, const char *name, int64_t n,
                         bool *set) {
  char num[24];
  snprintf(num, sizeof num, "%" PRId64, n);
  const char *args[2] = {num, r->publish};
  int64_t v = 0;
  int rc = run_on_channel(r, s, kind, name, args, 2, &v);
  if (!rc)
    *set = v == 1;
  return rc;
}

int dlock__redis_sem_set(void *be, const char *name, int64_t permits,
                         bool *set) {
  return set_if_absent(be, &dlock__script_sem_set, DLOCK__SYNC_SEM, name,
                       permits, set);
}

int dlock__redis_sem_add(void *be, const char *name, int64_t n) {
  dlock__redis *r = be;
  char a[24];
  snprintf(a, sizeof a, "%" PRId64, n);
  const char *args[2] = {a, r->publish};
  int64_t v = 0;
  return run_on_channel(r, &dlock__script_sem_add, DLOCK__SYNC_SEM, name, args,
                        2, &v);
}

int dlock__redis_sem_acquire(void *be, const char *name, int64_t permits) {
  dlock__redis *r = be;
  char n[24];
  snprintf(n, sizeof n, "%" PRId64, permits);
  const char *argv[MAX_ARGS] = {0, 0, 0, name, n};
  redisReply *rep = NULL;
  int unsynced = 0;
  int rc = dlock__redis_script_synced(r, &dlock__script_sem_acquire, 1, 5,
                                      argv, false, &rep, &unsynced);
  bool taken = false;
  if (!rc)
    rc = flag_reply(rep, "semaphore acquire", &taken);
  if (!rc && taken && unsynced > 0) {
    /* no replica has the permits: give them back (see locks.c) */
    dlock__redis_sem_release(r, name, permits);
    return dlock__redis_unsynced(r, "semaphore acquire", unsynced);
  }
  return rc ? rc : taken;
}

int dlock__redis_sem_release(void *be, const char *name, int64_t permits) {
  dlock__redis *r = be;
  char n[24];
  snprintf(n, sizeof n, "%" PRId64, permits);
  const char *args[2] = {n, r->publish};
  int64_t v = 0;
  return run_on_channel(r, &dlock__script_sem_release, DLOCK__SYNC_SEM, name,
                        args, 2, &v);
}

/* {name}:timeout, the permit semaphore's ZSET */
static char *permit_key(const char *name) {
  return dlock__redis_suffixed(name, PERMIT_SUFFIX);
}

/* Runs psem_state with at most `limit` permits listed; validates the shape
 * {available, {id...}, {ms...}, in use} and returns the reply. */
static int psem_state_reply(dlock__redis *r, const char *name,
                            const char *limit, redisReply **out) {
  char *tk = permit_key(name);
  if (!tk)
    return DLOCK_ENOMEM;
  const char *argv[MAX_ARGS] = {0, 0, 0, name, tk, limit};
  redisReply *rep = NULL;
  int rc =
      dlock__redis_script(r, &dlock__script_psem_state, 2, 6, argv, true, &rep);
  dlock__free(tk);
  if (rc)
    return rc;
  if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 4 ||
      rep->element[0]->type != REDIS_REPLY_INTEGER ||
      rep->element[1]->type != REDIS_REPLY_ARRAY ||
      rep->element[2]->type != REDIS_REPLY_ARRAY ||
      rep->element[3]->type != REDIS_REPLY_INTEGER ||
      rep->element[3]->integer < (long long)rep->element[1]->elements ||
      rep->element[1]->elements != rep->element[2]->elements)
    return dlock__redis_unexpected(rep, "permit semaphore state");
  for (size_t i = 0; i < rep->element[1]->elements; i++)
    if (rep->element[1]->element[i]->type != REDIS_REPLY_STRING ||
        rep->element[2]->element[i]->type != REDIS_REPLY_INTEGER)
      return dlock__redis_unexpected(rep, "permit semaphore state");
  *out = rep;
  return 0;
}

int dlock__redis_sem_available(void *be, dlock__sync_kind kind,
                               const char *name, int64_t *out) {
  dlock__redis *r = be;
  if (kind != DLOCK__SYNC_PERMIT)
    return get_count(r, name, "semaphore available", out);
  redisReply *rep = NULL;
  int rc = psem_state_reply(r, name, "0", &rep);
  if (rc)
    return rc;
  *out = rep->element[0]->integer;
  freeReplyObject(rep);
  return 0;
}

int dlock__redis_sem_delete(void *be, dlock__sync_kind kind, const char *name,
                            bool *existed) {
  char *tk = NULL;
  if (kind == DLOCK__SYNC_PERMIT && !(tk = permit_key(name)))
    return DLOCK_ENOMEM;
  const char *argv[3] = {"DEL", name, tk};
  redisReply *rep = NULL;
  int rc = dlock__redis_command(be, tk ? 3 : 2, argv, &rep);
  dlock__free(tk);
  if (rc)
    return rc;
  int64_t v = 0;
  if ((rc = int_reply(rep, "DEL", &v)))
    return rc;
  *existed = v > 0;
  return 0;
}

/* ---------------------------------------------------- permit semaphore */

int dlock__redis_psem_acquire(void *be, const char *name, const char *id,
                              int64_t lease_ms, int64_t *retry_in_ms) {
  dlock__redis *r = be;
  char lease[24];
  snprintf(lease, sizeof lease, "%" PRId64, lease_ms);
  char *tk = permit_key(name);
  char *ch = dlock__redis_sync_channel(r, DLOCK__SYNC_PERMIT, name);
  int rc = 0, unsynced = 0;
  redisReply *rep = NULL;
  if (!tk || !ch) {
    rc = DLOCK_ENOMEM;
  } else {
    char ibuf[DLOCK_NAME_MAX + 160];
    const char *ik = dlock__redis_info_key(r, name, id, ibuf, sizeof ibuf);
    const char *argv[MAX_ARGS] = {0,  0,     0,          name, tk,
                                  ch, id,    lease,      r->publish,
                                  ik, ik ? r->holder_info : NULL};
    rc = dlock__redis_script_synced(r, &dlock__script_psem_acquire, 3,
                                    ik ? 11 : 9, argv, false, &rep,
                                    &unsynced);
  }
  dlock__free(tk);
  dlock__free(ch);
  if (rc)
    return rc;
  if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
      rep->element[0]->type != REDIS_REPLY_INTEGER ||
      rep->element[1]->type != REDIS_REPLY_INTEGER ||
      (rep->element[0]->integer != 0 && rep->element[0]->integer != 1) ||
      rep->element[1]->integer < -1)
    return dlock__redis_unexpected(rep, "permit semaphore acquire");
  int taken = (int)rep->element[0]->integer;
  *retry_in_ms = rep->element[1]->integer;
  freeReplyObject(rep);
  if (taken && unsynced > 0) {
    dlock__redis_psem_release(r, name, id); /* see sem_acquire */
    return dlock__redis_unsynced(r, "permit semaphore acquire", unsynced);
  }
  return taken;
}

int dlock__redis_psem_release(void *be, const char *name, const char *id) {
  dlock__redis *r = be;
  char *tk = permit_key(name);
  char *ch = dlock__redis_sync_channel(r, DLOCK__SYNC_PERMIT, name);
  int rc = 0;
  redisReply *rep = NULL;
  if (!tk || !ch) {
    rc = DLOCK_ENOMEM;
  } else {
    char ibuf[DLOCK_NAME_MAX + 160];
    const char *ik = dlock__redis_info_key(r, name, id, ibuf, sizeof ibuf);
    const char *argv[MAX_ARGS] = {0, 0, 0, name, tk, ch, id, r->publish, ik};
    rc = dlock__redis_script(r, &dlock__script_psem_release, 3, ik ? 9 : 8,
                             argv, false, &rep);
  }
  dlock__free(tk);
  dlock__free(ch);
  bool released = false;
  if (!rc)
    rc = flag_reply(rep, "permit semaphore release", &released);
  return rc ? rc : released;
}

/* The holder info recorded beside each listed permit (one MGET: the keys
 * share the semaphore's slot). Best effort: a status display does without
 * it when it cannot be read. */
static void read_permit_infos(dlock__redis *r, dlock_sem_state_t *st) {
  size_t n = st->npermits;
  if (n == 0)
    return;
  const char **argv = dlock__calloc(n + 1, sizeof *argv);
  char **keys = dlock__calloc(n, sizeof *keys);
  const char **infos = dlock__calloc(n, sizeof *infos);
  redisReply *rep = NULL;
  bool ok = argv && keys && infos;
  for (size_t i = 0; ok && i < n; i++) {
    char buf[DLOCK_NAME_MAX + 160];
    const char *k = dlock__redis_holder_key(st->name, st->permits[i].id, buf, sizeof buf);
    ok = k && (keys[i] = dlock__strdup(k)) != NULL;
    argv[i + 1] = keys[i];
  }
  if (ok) {
    argv[0] = "MGET";
    ok = dlock__redis_command(r, (int)n + 1, argv, &rep) == 0 &&
         rep->type == REDIS_REPLY_ARRAY && rep->elements == n;
  }
  for (size_t i = 0; ok && i < n; i++) {
    const redisReply *e = rep->element[i];
    if (e->type == REDIS_REPLY_STRING &&
        !(infos[i] = dlock__strndup(e->str, e->len)))
      ok = false;
  }
  if (ok) {
    st->permit_infos = infos;
    infos = NULL;
  }
  for (size_t i = 0; infos && i < n; i++)
    dlock__free((void *)infos[i]);
  dlock__free(infos);
  for (size_t i = 0; keys && i < n; i++)
    dlock__free(keys[i]);
  dlock__free(keys);
  dlock__free(argv);
  if (rep)
    freeReplyObject(rep);
}

int dlock__redis_psem_state(void *be, const char *name,
                            dlock_sem_state_t **out) {
  redisReply *rep = NULL;
  int rc = psem_state_reply(be, name, STATE_MAX_PERMITS, &rep);
  if (rc)
    return rc;
  const redisReply *ids = rep->element[1], *left = rep->element[2];
  size_t n = ids->elements;
  dlock_sem_state_t *st = dlock__calloc(1, sizeof *st);
  if (!st || !(st->name = dlock__strdup(name)) ||
      !(st->permits = dlock__calloc(n ? n : 1, sizeof *st->permits))) {
    dlock_sem_state_free(st);
    freeReplyObject(rep);
    return DLOCK_ENOMEM;
  }
  st->available = rep->element[0]->integer;
  st->in_use = rep->element[3]->integer;
  for (size_t i = 0; i < n; i++) {
    char *id = dlock__strndup(ids->element[i]->str, ids->element[i]->len);
    if (!id) {
      dlock_sem_state_free(st);
      freeReplyObject(rep);
      return DLOCK_ENOMEM;
    }
    st->permits[i].id = id;
    st->permits[i].expires_in_ms = left->element[i]->integer;
    st->npermits++;
  }
  freeReplyObject(rep);
  read_permit_infos(be, st);
  *out = st;
  return 0;
}

/* --------------------------------------------------------------- latch */

int dlock__redis_latch_set(void *be, const char *name, int64_t count,
                           bool *set) {
  return set_if_absent(be, &dlock__script_latch_set, DLOCK__SYNC_LATCH, name,
                       count, set);
}

int dlock__redis_latch_count_down(void *be, const char *name) {
  dlock__redis *r = be;
  const char *args[1] = {r->publish};
  int64_t v = 0;
  return run_on_channel(r, &dlock__script_latch_count_down, DLOCK__SYNC_LATCH,
                        name, args, 1, &v);
}

int dlock__redis_latch_count(void *be, const char *name, int64_t *out) {
  int rc = get_count(be, name, "latch count", out);
  if (!rc && *out < 0)
    *out = 0; /* counted below zero by hand: as good as zero */
  return rc;
}

int dlock__redis_latch_delete(void *be, const char *name, bool *existed) {
  dlock__redis *r = be;
  const char *args[1] = {r->publish};
  int64_t v = 0;
  int rc = run_on_channel(r, &dlock__script_latch_delete, DLOCK__SYNC_LATCH,
                          name, args, 1, &v);
  if (!rc)
    *existed = v == 1;
  return rc;
}
