/*
 * holds.c - hold registry and the batched renewer (see holds.h).
 *
 * Scheduling: a watchdog hold is due every watchdog/3. A renewal pass takes
 * every hold due within the next watchdog/6 as well, so holds converge onto
 * one shared schedule and one round trip renews them all. A failed pass
 * (backend unreachable) is retried after watchdog/12 (at least 50 ms); a
 * hold whose lease was not confirmed for a whole lease is lost.
 *
 * Races: the pass copies (name, owner, gen) under mu, renews without mu, and
 * applies results only to holds whose gen still matches, so a hold released
 * (and maybe re-acquired) meanwhile is not marked lost by a stale answer.
 */
#include "core/holds.h"

#include <stdatomic.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"

#define KEY_MAX (DLOCK_NAME_MAX + 1 + sizeof(uint64_t))

static size_t hold_key(char *buf, const char *name, uint64_t tid) {
  size_t n = strlen(name);
  memcpy(buf, name, n);
  buf[n] = '\0';
  memcpy(buf + n + 1, &tid, sizeof tid);
  return n + 1 + sizeof tid;
}

dlock__hold *dlock__hold_find_locked(struct dlock_client *c, const char *name,
                                     uint64_t tid) {
  char key[KEY_MAX];
  return dlock__map_get(&c->holds, key, hold_key(key, name, tid));
}

static _Atomic uint64_t next_gen; /* shared by all clients */

int dlock__hold_acquired_locked(struct dlock_client *c, const char *name,
                                uint64_t tid, int64_t lease_ms,
                                bool watchdog) {
  char key[KEY_MAX];
  size_t klen = hold_key(key, name, tid);
  dlock__hold *h = dlock__map_get(&c->holds, key, klen);
  int64_t now = dlock__now_ms();
  if (!h) {
    h = dlock__calloc(1, sizeof *h);
    if (!h || !(h->name = dlock__strdup(name)) ||
        dlock__map_put(&c->holds, key, klen, h)) {
      if (h)
        dlock__free(h->name);
      dlock__free(h);
      return DLOCK_ENOMEM;
    }
    h->tid = tid;
    h->gen = ++next_gen;
  }
  if (h->lost) {
    /* re-acquired after a loss: a fresh hold */
    h->count = 0;
    h->lost = false;
    h->watchdog = false;
    h->gen = ++next_gen;
  }
  h->count++;
  h->lease_ms = lease_ms;
  h->watchdog = h->watchdog || watchdog;
  h->last_ok = now;
  h->release_id[0] = '\0';
  if (h->watchdog) {
    h->next_renew = now + c->opts.watchdog_ms / 3;
    if (h->next_renew < c->renew_due) {
      c->renew_due = h->next_renew;
      dlock__client_poke(c);
    }
  }
  return 0;
}

void dlock__hold_remove_locked(struct dlock_client *c, dlock__hold *h) {
  char key[KEY_MAX];
  dlock__map_del(&c->holds, key, hold_key(key, h->name, h->tid));
  dlock__free(h->name);
  dlock__free(h);
}

void dlock__holds_free_all_locked(struct dlock_client *c) {
  size_t cur;
  for (dlock__map_entry *e = dlock__map_first(&c->holds, &cur); e;
       e = dlock__map_next(&c->holds, e, &cur)) {
    dlock__hold *h = e->value;
    dlock__free(h->name);
    dlock__free(h);
  }
  dlock__map_clear(&c->holds);
}

typedef struct renew_item {
  uint64_t gen;
  uint64_t tid;
  char owner[64];
} renew_item;

typedef struct lost_note {
  char *name;
  uint64_t tid;
  dlock_lost_reason_t reason;
} lost_note;

/* Collects due holds into items/ren (allocated); returns how many. */
static size_t collect_due(struct dlock_client *c, int64_t now,
                          renew_item **items, dlock__renewal **ren) {
  int64_t horizon = now + c->opts.watchdog_ms / 6;
  size_t n = 0, cur;
  for (dlock__map_entry *e = dlock__map_first(&c->holds, &cur); e;
       e = dlock__map_next(&c->holds, e, &cur)) {
    dlock__hold *h = e->value;
    if (h->watchdog && !h->lost && h->next_renew <= horizon)
      n++;
  }
  *items = NULL;
  *ren = NULL;
  if (n == 0)
    return 0;
  *items = dlock__calloc(n, sizeof **items);
  *ren = dlock__calloc(n, sizeof **ren);
  if (!*items || !*ren) {
    dlock__free(*items);
    dlock__free(*ren);
    *items = NULL;
    *ren = NULL;
    return 0;
  }
  size_t i = 0;
  for (dlock__map_entry *e = dlock__map_first(&c->holds, &cur); e && i < n;
       e = dlock__map_next(&c->holds, e, &cur)) {
    dlock__hold *h = e->value;
    if (!(h->watchdog && !h->lost && h->next_renew <= horizon))
      continue;
    (*items)[i].gen = h->gen;
    (*items)[i].tid = h->tid;
    dlock__owner(c, h->tid, (*items)[i].owner, sizeof(*items)[i].owner);
    (*ren)[i].name = dlock__strdup(h->name);
    (*ren)[i].owner = (*items)[i].owner;
    if (!(*ren)[i].name)
      break;
    i++;
  }
  return i;
}

static int64_t earliest_due(struct dlock_client *c) {
  int64_t due = DLOCK__NEVER;
  size_t cur;
  for (dlock__map_entry *e = dlock__map_first(&c->holds, &cur); e;
       e = dlock__map_next(&c->holds, e, &cur)) {
    dlock__hold *h = e->value;
    if (h->watchdog && !h->lost && h->next_renew < due)
      due = h->next_renew;
  }
  return due;
}

void dlock__renewer_run(struct dlock_client *c) {
  renew_item *items = NULL;
  dlock__renewal *ren = NULL;
  int64_t lease = c->opts.watchdog_ms;
  int64_t retry = lease / 12 < 50 ? 50 : lease / 12;

  pthread_mutex_lock(&c->mu);
  int64_t sent = dlock__now_ms();
  size_t n = collect_due(c, sent, &items, &ren);
  /* give up when the first of these leases runs out: past that, waiting
   * longer for the server only delays telling the holder it lost it */
  int64_t expiry = DLOCK__NEVER;
  for (size_t i = 0; i < n; i++) {
    dlock__hold *h = dlock__hold_find_locked(c, ren[i].name, items[i].tid);
    if (h && h->last_ok + lease < expiry)
      expiry = h->last_ok + lease;
  }
  pthread_mutex_unlock(&c->mu);
  if (expiry <= sent)
    expiry = sent + 1;

  int rc = n ? c->ops->lock_renew(c->be, ren, n, lease, expiry) : 0;
  if (rc)
    dlock__log(c, DLOCK_LOG_WARN, "renewal of %zu lease(s) failed: %s", n,
               dlock_last_error());
  else if (n)
    dlock__log(c, DLOCK_LOG_DEBUG, "renewed %zu lease(s) in %lld ms", n,
               (long long)(dlock__now_ms() - sent));

  lost_note *lost = n ? dlock__calloc(n, sizeof *lost) : NULL;
  size_t nlost = 0;
  pthread_mutex_lock(&c->mu);
  int64_t now = dlock__now_ms();
  for (size_t i = 0; i < n; i++) {
    dlock__hold *h = dlock__hold_find_locked(c, ren[i].name, items[i].tid);
    if (!h || h->gen != items[i].gen || h->lost)
      continue;
    bool gone = false;
    dlock_lost_reason_t why = DLOCK_LOST_GONE;
    if (rc == 0 && ren[i].result == 1) {
      h->last_ok = sent;
      h->next_renew = sent + lease / 3;
    } else if (rc == 0) {
      gone = true;
    } else if (now - h->last_ok >= lease) {
      gone = true;
      why = DLOCK_LOST_UNREACHABLE;
    } else {
      h->next_renew = now + retry;
    }
    if (gone) {
      h->lost = true;
      h->lost_reason = why;
      if (lost && (lost[nlost].name = dlock__strdup(h->name))) {
        lost[nlost].tid = h->tid;
        lost[nlost].reason = why;
        nlost++;
      }
    }
  }
  c->renew_due = earliest_due(c);
  dlock_lost_fn fn = c->opts.lost_fn;
  void *ud = c->opts.lost_ud;
  pthread_mutex_unlock(&c->mu);

  for (size_t i = 0; i < nlost; i++) {
    dlock__log(c, DLOCK_LOG_WARN, "lock '%.200s' (thread %llu) lost: %s",
               lost[i].name, (unsigned long long)lost[i].tid,
               lost[i].reason == DLOCK_LOST_GONE
                   ? "the key is gone or owned by someone else"
                   : "the backend was unreachable for a whole lease");
    if (fn)
      fn(ud, lost[i].name, lost[i].tid, lost[i].reason);
    dlock__free(lost[i].name);
  }
  for (size_t i = 0; i < n; i++)
    dlock__free((void *)ren[i].name);
  dlock__free(lost);
  dlock__free(items);
  dlock__free(ren);
}
