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
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"

#define KEY_MAX (1 + DLOCK_NAME_MAX + 1 + 40)

/* kind byte, name, NUL, then the tid's bytes or the permit id */
static size_t hold_key(char *buf, dlock__hold_kind kind, const char *name,
                       uint64_t tid, const char *permit) {
  size_t n = strlen(name);
  buf[0] = (char)kind;
  memcpy(buf + 1, name, n);
  buf[n + 1] = '\0';
  if (permit && permit[0]) {
    size_t p = strnlen(permit, 39);
    memcpy(buf + n + 2, permit, p);
    return n + 2 + p;
  }
  memcpy(buf + n + 2, &tid, sizeof tid);
  return n + 2 + sizeof tid;
}

static void hold_free(dlock__hold *h) {
  if (h) {
    dlock__free(h->name);
    dlock__free(h->permit);
    dlock__free(h);
  }
}

dlock__hold *dlock__hold_find_locked(struct dlock_client *c,
                                     dlock__hold_kind kind, const char *name,
                                     uint64_t tid, const char *permit) {
  char key[KEY_MAX];
  return dlock__map_get(&c->holds, key, hold_key(key, kind, name, tid, permit));
}

static _Atomic uint64_t next_gen; /* shared by all clients */

static int64_t vouch_until(const struct dlock_client *c, const dlock__hold *h);
static bool live_watchdog(const dlock__hold *h);

/* The record of (kind, name, tid or permit), made at count 0 if absent;
 * NULL when out of memory. */
static dlock__hold *hold_get_or_make(struct dlock_client *c,
                                     dlock__hold_kind kind, const char *name,
                                     uint64_t tid, const char *permit) {
  char key[KEY_MAX];
  size_t klen = hold_key(key, kind, name, tid, permit);
  dlock__hold *h = dlock__map_get(&c->holds, key, klen);
  if (h)
    return h;
  /* a record removed earlier is reused when its name fits: an acquire and
   * release of a cold lock then allocate nothing */
  size_t nlen = klen - 2 - (permit && permit[0] ? strnlen(permit, 39)
                                                  : sizeof tid);
  h = c->spare_hold;
  if (h && h->name_cap > nlen) {
    char *buf = h->name;
    size_t cap = h->name_cap;
    c->spare_hold = NULL;
    memset(h, 0, sizeof *h);
    h->name = buf;
    h->name_cap = cap;
    memcpy(h->name, name, nlen + 1);
  } else {
    h = dlock__calloc(1, sizeof *h);
    if (h && (h->name = dlock__strdup(name)))
      h->name_cap = nlen + 1;
  }
  if (!h || !h->name ||
      (permit && permit[0] && !(h->permit = dlock__strdup(permit))) ||
      dlock__map_put(&c->holds, key, klen, h)) {
    if (h) {
      dlock__free(h->name);
      dlock__free(h->permit);
    }
    dlock__free(h);
    return NULL;
  }
  h->kind = kind;
  h->tid = tid;
  h->gen = ++next_gen;
  return h; /* count 0: holds nothing yet, renewed by nobody */
}

dlock__hold *dlock__hold_reserve_locked(struct dlock_client *c,
                                        dlock__hold_kind kind,
                                        const char *name, uint64_t tid) {
  return hold_get_or_make(c, kind, name, tid, NULL);
}

void dlock__hold_unreserve_locked(struct dlock_client *c,
                                  dlock__hold_kind kind, const char *name,
                                  uint64_t tid) {
  dlock__hold *h = dlock__hold_find_locked(c, kind, name, tid, NULL);
  if (h && h->count == 0 && !h->lost)
    dlock__hold_remove_locked(c, h);
}

/* One live watchdog hold's deadlines count (mu held): the client's next
 * renewal and vouching deadlines come no later than this hold's, and the
 * loop is poked when they moved earlier. O(1): a deadline is only ever
 * lowered here, so one left earlier than needed (its hold released since)
 * costs the loop a wake-up that finds nothing due, and the full scan
 * there (dlock__holds_schedule_locked) sets it right. */
static void schedule_one_locked(struct dlock_client *c, dlock__hold *h) {
  if (!live_watchdog(h))
    return;
  bool earlier = false;
  if (h->next_renew < c->renew_due) {
    c->renew_due = h->next_renew;
    earlier = true;
  }
  if (vouch_until(c, h) < c->vouch_due) {
    c->vouch_due = vouch_until(c, h);
    earlier = true;
  }
  if (earlier)
    dlock__client_poke(c);
}

dlock__hold *dlock__hold_acquired_locked(struct dlock_client *c,
                                         dlock__hold_kind kind,
                                         const char *name, uint64_t tid,
                                         const char *permit, int64_t lease_ms,
                                         bool watchdog, int64_t since) {
  dlock__hold *h = hold_get_or_make(c, kind, name, tid, permit);
  int64_t now = since;
  if (!h)
    return NULL;
  if (h->lost) {
    /* re-acquired after a loss: a fresh hold */
    h->count = 0;
    h->lost = false;
    h->lost_reported = false;
    h->watchdog = false;
    h->gen = ++next_gen;
  }
  h->count++;
  h->lease_ms = lease_ms;
  /* a backend without per-hold renewal keeps its holds alive with its
   * session, and reports the session's end (dlock__holds_session_lost) */
  h->watchdog = (h->watchdog || watchdog) && c->ops->lock_renew != NULL;
  h->last_ok = now;
  h->release_id[0] = '\0';
  if (h->watchdog) {
    h->next_renew = now + c->opts.watchdog_ms / 3;
    schedule_one_locked(c, h);
  }
  return h;
}

void dlock__hold_remove_locked(struct dlock_client *c, dlock__hold *h) {
  char key[KEY_MAX];
  dlock__map_del(&c->holds, key,
                 hold_key(key, h->kind, h->name, h->tid, h->permit));
  dlock__free(h->permit);
  h->permit = NULL;
  if (!c->spare_hold || c->spare_hold->name_cap < h->name_cap) {
    hold_free(c->spare_hold);
    c->spare_hold = h;
  } else {
    hold_free(h);
  }
}

void dlock__holds_drop_locked(struct dlock_client *c, const char *name,
                              bool permits) {
  size_t cur;
  dlock__map_entry *e = dlock__map_first(&c->holds, &cur);
  while (e) {
    dlock__hold *h = e->value;
    e = dlock__map_next(&c->holds, e, &cur);
    if ((h->kind == DLOCK__HK_PERMIT) == permits && strcmp(h->name, name) == 0)
      dlock__hold_remove_locked(c, h);
  }
}

void dlock__holds_free_all_locked(struct dlock_client *c) {
  size_t cur;
  for (dlock__map_entry *e = dlock__map_first(&c->holds, &cur); e;
       e = dlock__map_next(&c->holds, e, &cur)) {
    hold_free(e->value);
  }
  hold_free(c->spare_hold);
  c->spare_hold = NULL;
  dlock__map_clear(&c->holds);
}

typedef struct renew_item {
  uint64_t gen;
  dlock__hold_kind kind;
  uint64_t tid;
  char owner[80];
  char permit[40];
} renew_item;

/* Renewed by the watchdog and still counting: neither lost nor being
 * released (a release in flight settles the hold either way). */
static bool live_watchdog(const dlock__hold *h) {
  return h->watchdog && !h->lost && !h->releasing;
}

/* Collects due holds into items/ren (allocated); returns how many. */
static size_t collect_due(struct dlock_client *c, int64_t now,
                          renew_item **items, dlock__renewal **ren) {
  int64_t horizon = now + c->opts.watchdog_ms / 6;
  size_t n = 0, cur;
  for (dlock__map_entry *e = dlock__map_first(&c->holds, &cur); e;
       e = dlock__map_next(&c->holds, e, &cur)) {
    dlock__hold *h = e->value;
    if (live_watchdog(h) && h->next_renew <= horizon)
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
    /* out of memory: try again a little later instead of spinning */
    for (dlock__map_entry *e = dlock__map_first(&c->holds, &cur); e;
         e = dlock__map_next(&c->holds, e, &cur)) {
      dlock__hold *h = e->value;
      if (live_watchdog(h) && h->next_renew <= horizon)
        h->next_renew = now + 50;
    }
    return 0;
  }
  size_t i = 0;
  for (dlock__map_entry *e = dlock__map_first(&c->holds, &cur); e && i < n;
       e = dlock__map_next(&c->holds, e, &cur)) {
    dlock__hold *h = e->value;
    if (!(live_watchdog(h) && h->next_renew <= horizon))
      continue;
    renew_item *it = &(*items)[i];
    it->gen = h->gen;
    it->kind = h->kind;
    it->tid = h->tid;
    snprintf(it->permit, sizeof it->permit, "%s", h->permit ? h->permit : "");
    if (h->kind == DLOCK__HK_PERMIT)
      snprintf(it->owner, sizeof it->owner, "%s", it->permit);
    else
      dlock__owner(c, h->tid, it->owner, sizeof it->owner);
    (*ren)[i].kind = h->kind;
    (*ren)[i].name = dlock__strdup(h->name);
    (*ren)[i].owner = (*items)[i].owner;
    if (!(*ren)[i].name)
      break;
    i++;
  }
  return i;
}

/* The moment past which the client can no longer vouch for h's lease. */
static int64_t vouch_until(const struct dlock_client *c, const dlock__hold *h) {
  int64_t lease = c->opts.watchdog_ms;
  return h->last_ok + lease - dlock__vouch_margin(lease);
}

int64_t dlock__hold_vouch_until_locked(const struct dlock_client *c,
                                       const dlock__hold *h) {
  if (h->watchdog)
    return vouch_until(c, h);
  return h->last_ok + h->lease_ms - dlock__vouch_margin(h->lease_ms);
}

void dlock__holds_schedule_locked(struct dlock_client *c) {
  int64_t renew = DLOCK__NEVER, vouch = DLOCK__NEVER;
  size_t cur;
  for (dlock__map_entry *e = dlock__map_first(&c->holds, &cur); e;
       e = dlock__map_next(&c->holds, e, &cur)) {
    dlock__hold *h = e->value;
    if (!live_watchdog(h))
      continue;
    if (h->next_renew < renew)
      renew = h->next_renew;
    if (vouch_until(c, h) < vouch)
      vouch = vouch_until(c, h);
  }
  bool earlier = renew < c->renew_due || vouch < c->vouch_due;
  c->renew_due = renew;
  c->vouch_due = vouch;
  if (earlier)
    dlock__client_poke(c);
}

void dlock__hold_release_begin_locked(struct dlock_client *c, dlock__hold *h) {
  (void)c;
  h->releasing = true; /* a renewal that meets our release is not a loss */
}

void dlock__hold_release_end_locked(struct dlock_client *c, dlock__hold *h) {
  /* its renewal and vouching deadline count again (or it is gone: the
   * deadlines it set may stay early, see schedule_one_locked) */
  if (h) {
    h->releasing = false;
    schedule_one_locked(c, h);
  }
}

static void note_lost(struct dlock_client *c, dlock__hold *h,
                      dlock_lost_reason_t why) {
  h->lost = true;
  h->lost_reason = why;
  h->lost_reported = false;
  c->lost_pending = true;
}

void dlock__holds_expire_locked(struct dlock_client *c, int64_t now) {
  if (now < c->vouch_due)
    return;
  size_t cur;
  for (dlock__map_entry *e = dlock__map_first(&c->holds, &cur); e;
       e = dlock__map_next(&c->holds, e, &cur)) {
    dlock__hold *h = e->value;
    if (live_watchdog(h) && now >= vouch_until(c, h))
      note_lost(c, h, DLOCK_LOST_UNREACHABLE);
  }
  dlock__holds_schedule_locked(c);
}

/* One lost hold to report, copied out of the registry. */
typedef struct lost_note {
  char name[DLOCK_NAME_MAX + 1];
  uint64_t tid;
  dlock_lost_reason_t reason;
} lost_note;

#define LOST_BATCH 16

void dlock__holds_report_lost(struct dlock_client *c) {
  lost_note notes[LOST_BATCH];
  for (int rounds = 0; rounds < 1 << 20; rounds++) {
    size_t n = 0, cur;
    pthread_mutex_lock(&c->mu);
    if (c->lost_pending) {
      for (dlock__map_entry *e = dlock__map_first(&c->holds, &cur);
           e && n < LOST_BATCH; e = dlock__map_next(&c->holds, e, &cur)) {
        dlock__hold *h = e->value;
        if (!h->lost || h->lost_reported)
          continue;
        h->lost_reported = true;
        snprintf(notes[n].name, sizeof notes[n].name, "%s", h->name);
        notes[n].tid = h->tid;
        notes[n].reason = h->lost_reason;
        n++;
      }
      if (n < LOST_BATCH)
        c->lost_pending = false;
    }
    dlock_lost_fn fn = c->opts.lost_fn;
    void *ud = c->opts.lost_ud;
    pthread_mutex_unlock(&c->mu);
    if (n == 0)
      return;
    for (size_t i = 0; i < n; i++) {
      dlock__log(c, DLOCK_LOG_WARN, "lock '%.200s' (thread %llu) lost: %s",
                 notes[i].name, (unsigned long long)notes[i].tid,
                 notes[i].reason == DLOCK_LOST_GONE
                     ? "the server no longer has it (gone, or owned by "
                       "someone else)"
                 : notes[i].reason == DLOCK_LOST_SESSION
                     ? "its session ended"
                     : "its lease could not be confirmed in time (backend "
                       "unreachable)");
      if (fn)
        fn(ud, notes[i].name, notes[i].tid, notes[i].reason);
    }
  }
}

void dlock__holds_renew_now(struct dlock_client *c) {
  pthread_mutex_lock(&c->mu);
  int64_t now = dlock__now_ms();
  size_t cur;
  for (dlock__map_entry *e = dlock__map_first(&c->holds, &cur); e;
       e = dlock__map_next(&c->holds, e, &cur)) {
    dlock__hold *h = e->value;
    if (live_watchdog(h) && h->next_renew > now)
      h->next_renew = now;
  }
  dlock__holds_schedule_locked(c); /* pokes the loop: renew_due is now */
  pthread_mutex_unlock(&c->mu);
}

void dlock__holds_session_lost(struct dlock_client *c,
                               dlock_lost_reason_t reason) {
  pthread_mutex_lock(&c->mu);
  c->session.gone = true; /* until the backend begins a new one */
  dlock__holds_session_lost_locked(c, reason);
  pthread_mutex_unlock(&c->mu);
  dlock__client_poke(c); /* the loop reports them */
}

void dlock__holds_session_lost_locked(struct dlock_client *c,
                                      dlock_lost_reason_t reason) {
  size_t cur;
  for (dlock__map_entry *e = dlock__map_first(&c->holds, &cur); e;
       e = dlock__map_next(&c->holds, e, &cur)) {
    dlock__hold *h = e->value;
    /* count 0: a record reserved by an acquire still waiting, which holds
     * nothing to lose (the wait goes on under the next session) */
    if (h->count > 0 && !h->lost && !h->releasing)
      note_lost(c, h, reason);
  }
  dlock__holds_schedule_locked(c);
}

void dlock__renewer_run(struct dlock_client *c) {
  renew_item *items = NULL;
  dlock__renewal *ren = NULL;
  int64_t lease = c->opts.watchdog_ms;
  int64_t retry = lease / 12 < 50 ? 50 : lease / 12;

  pthread_mutex_lock(&c->mu);
  int64_t sent = dlock__now_ms();
  size_t n = collect_due(c, sent, &items, &ren);
  /* give up when the first of these leases can no longer be vouched for:
   * past that, waiting longer only delays telling the holder (the loop
   * reports it lost at that moment anyway) */
  int64_t deadline = DLOCK__NEVER;
  for (size_t i = 0; i < n; i++) {
    dlock__hold *h = dlock__hold_find_locked(
        c, items[i].kind, ren[i].name, items[i].tid, items[i].permit);
    if (h && vouch_until(c, h) < deadline)
      deadline = vouch_until(c, h);
  }
  pthread_mutex_unlock(&c->mu);
  if (n > 0) {
    if (deadline <= sent)
      deadline = sent + 1;
    int rc = c->ops->lock_renew(c->be, ren, n, lease, deadline);
    if (rc)
      dlock__log(c, DLOCK_LOG_WARN, "renewal of %zu lease(s) failed: %s", n,
                 dlock_last_error());
    else
      dlock__log(c, DLOCK_LOG_DEBUG, "renewed %zu lease(s) in %lld ms", n,
                 (long long)(dlock__now_ms() - sent));

    pthread_mutex_lock(&c->mu);
    int64_t now = dlock__now_ms();
    for (size_t i = 0; i < n; i++) {
      dlock__hold *h = dlock__hold_find_locked(
          c, items[i].kind, ren[i].name, items[i].tid, items[i].permit);
      if (!h || h->gen != items[i].gen || h->lost)
        continue;
      if (rc == 0 && ren[i].result == 1) {
        h->last_ok = sent;
        h->next_renew = sent + lease / 3;
      } else if (rc == 0) {
        /* gone: unless it is our own release that got there first */
        if (!h->releasing)
          note_lost(c, h, DLOCK_LOST_GONE);
      } else if (now >= vouch_until(c, h)) {
        if (!h->releasing)
          note_lost(c, h, DLOCK_LOST_UNREACHABLE);
      } else {
        h->next_renew =
            now + retry < vouch_until(c, h) ? now + retry : vouch_until(c, h);
      }
    }
    pthread_mutex_unlock(&c->mu);
    for (size_t i = 0; i < n; i++)
      dlock__free((void *)ren[i].name);
  }
  pthread_mutex_lock(&c->mu);
  c->renew_busy = false;
  c->renew_due = DLOCK__NEVER; /* recomputed below, and the loop told */
  dlock__holds_schedule_locked(c);
  pthread_mutex_unlock(&c->mu);
  dlock__client_poke(c);
  dlock__free(items);
  dlock__free(ren);
}

/* ------------------------------------------------------ unresolved waits */

#define UNRESOLVED_RETRY_MS 1000

/* Unresolved waits are keyed like holds: the write side of a read-write
 * lock apart from the reentrant lock of the same name. */
static dlock__hold_kind unresolved_hk(dlock_lock_kind_t kind) {
  return kind == DLOCK_WRITE ? DLOCK__HK_WRITE : DLOCK__HK_LOCK;
}

int dlock__unresolved_add_locked(struct dlock_client *c, dlock_lock_kind_t kind,
                                 const char *name, uint64_t tid, uint64_t seq,
                                 int64_t lease_ms,
                                 int64_t expires) {
  char key[KEY_MAX];
  size_t klen = hold_key(key, unresolved_hk(kind), name, tid, NULL);
  dlock__unresolved *u = dlock__map_get(&c->unresolved, key, klen);
  if (u && u->busy)
    return 0; /* being resolved: it covers the same queue entry */
  if (!u) {
    u = dlock__calloc(1, sizeof *u);
    if (!u || !(u->name = dlock__strdup(name)) ||
        dlock__map_put(&c->unresolved, key, klen, u)) {
      if (u)
        dlock__free(u->name);
      dlock__free(u);
      return DLOCK_ENOMEM;
    }
    atomic_fetch_add(&c->nunresolved, 1);
  }
  u->kind = kind;
  u->tid = tid;
  u->seq = seq;
  u->lease_ms = lease_ms;
  u->expires = expires;
  u->next_try = dlock__now_ms() + UNRESOLVED_RETRY_MS;
  u->grant_seen = false;
  if (u->next_try < c->unresolved_due) {
    c->unresolved_due = u->next_try;
    dlock__client_poke(c);
  }
  return 0;
}

dlock__unresolved *dlock__unresolved_find_locked(struct dlock_client *c,
                                                 dlock_lock_kind_t kind,
                                                 const char *name,
                                                 uint64_t tid) {
  if (c->unresolved.count == 0)
    return NULL;
  char key[KEY_MAX];
  return dlock__map_get(&c->unresolved, key,
                        hold_key(key, unresolved_hk(kind), name, tid, NULL));
}

void dlock__unresolved_remove_locked(struct dlock_client *c,
                                     dlock__unresolved *u) {
  char key[KEY_MAX];
  dlock__map_del(&c->unresolved, key,
                 hold_key(key, unresolved_hk(u->kind), u->name, u->tid, NULL));
  atomic_fetch_sub(&c->nunresolved, 1);
  dlock__free(u->name);
  dlock__free(u);
}

void dlock__unresolved_grant_locked(struct dlock_client *c, uint64_t tid,
                                    uint64_t seq) {
  size_t cur;
  for (dlock__map_entry *e = dlock__map_first(&c->unresolved, &cur); e;
       e = dlock__map_next(&c->unresolved, e, &cur)) {
    dlock__unresolved *u = e->value;
    if (u->tid == tid && u->seq == seq) {
      u->grant_seen = true;
      c->unresolved_due = dlock__now_ms();
      dlock__client_poke(c);
      return;
    }
  }
}

void dlock__unresolved_free_all_locked(struct dlock_client *c) {
  size_t cur;
  for (dlock__map_entry *e = dlock__map_first(&c->unresolved, &cur); e;
       e = dlock__map_next(&c->unresolved, e, &cur)) {
    dlock__unresolved *u = e->value;
    dlock__free(u->name);
    dlock__free(u);
  }
  dlock__map_clear(&c->unresolved);
  atomic_store(&c->nunresolved, 0);
}

/* Marks u busy and copies what resolving it needs; mu held. */
typedef struct resolve_job {
  char *name;
  dlock_lock_kind_t kind;
  uint64_t tid;
  uint64_t seq;
  int64_t lease_ms;
} resolve_job;

static int job_take_locked(dlock__unresolved *u, resolve_job *j) {
  if (!(j->name = dlock__strdup(u->name)))
    return DLOCK_ENOMEM;
  u->busy = true;
  j->kind = u->kind;
  j->tid = u->tid;
  j->seq = u->seq;
  j->lease_ms = u->lease_ms;
  return 0;
}

/* Applies a resolution outcome; mu held. rc < 0 keeps it for a retry. */
static void job_done_locked(struct dlock_client *c, resolve_job *j, int rc) {
  dlock__unresolved *u =
      dlock__unresolved_find_locked(c, j->kind, j->name, j->tid);
  if (u) {
    if (rc >= 0) {
      dlock__unresolved_remove_locked(c, u);
    } else {
      u->busy = false;
      u->grant_seen = false;
      u->next_try = dlock__now_ms() + UNRESOLVED_RETRY_MS;
      if (u->next_try < c->unresolved_due) {
        c->unresolved_due = u->next_try;
        dlock__client_poke(c); /* the loop sleeps until the old time */
      }
    }
  }
  pthread_cond_broadcast(&c->unresolved_cv);
  dlock__free(j->name);
}

int dlock__unresolved_resolve_own(struct dlock_client *c,
                                  dlock_lock_kind_t kind, const char *name,
                                  uint64_t tid, int64_t lease_ms,
                                  int64_t *token) {
  resolve_job j;
  /* an unresolved wait of this owner was added by an earlier call of the
   * owner itself, which this thread sees: none at all, nothing to do */
  if (atomic_load(&c->nunresolved) == 0)
    return 0;
  pthread_mutex_lock(&c->mu);
  dlock__unresolved *u = dlock__unresolved_find_locked(c, kind, name, tid);
  /* wait (bounded) while the background thread is resolving it */
  int64_t deadline = dlock__deadline_after(c->opts.command_timeout_ms * 2);
  struct timespec ts;
  dlock__deadline_timespec(deadline, &ts);
  while (u && u->busy && dlock__now_ms() < deadline) {
    pthread_cond_timedwait(&c->unresolved_cv, &c->mu, &ts);
    u = dlock__unresolved_find_locked(c, kind, name, tid);
  }
  if (!u) {
    pthread_mutex_unlock(&c->mu);
    return 0;
  }
  if (u->busy) {
    pthread_mutex_unlock(&c->mu);
    return dlock__seterr(DLOCK_EIOTIMEOUT,
                         "an earlier wait for '%.200s' is still being "
                         "resolved",
                         name);
  }
  int rc = job_take_locked(u, &j);
  pthread_mutex_unlock(&c->mu);
  if (rc)
    return rc;
  char owner[64];
  dlock__owner(c, tid, owner, sizeof owner);
  /* the caller wants the lock: a grant it never learned of is claimed with
   * the caller's lease instead of being given away */
  dlock__acquire a = {.kind = kind, .name = name, .owner = owner,
                     .lease_ms = lease_ms};
  rc = c->ops->lock_leave(c->be, &a, j.seq, token);
  pthread_mutex_lock(&c->mu);
  job_done_locked(c, &j, rc);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

void dlock__unresolved_run(struct dlock_client *c) {
  enum { MAX_JOBS = 64 };
  resolve_job jobs[MAX_JOBS];
  size_t n = 0, cur;
  pthread_mutex_lock(&c->mu);
  int64_t now = dlock__now_ms();
  dlock__map_entry *e = dlock__map_first(&c->unresolved, &cur);
  while (e) {
    dlock__unresolved *u = e->value;
    e = dlock__map_next(&c->unresolved, e, &cur);
    if (u->busy)
      continue;
    if (now > u->expires) {
      dlock__unresolved_remove_locked(c, u); /* nothing can be pending */
      continue;
    }
    if ((u->grant_seen || now >= u->next_try) && n < MAX_JOBS &&
        job_take_locked(u, &jobs[n]) == 0)
      n++;
  }
  pthread_mutex_unlock(&c->mu);

  for (size_t i = 0; i < n; i++) {
    resolve_job *j = &jobs[i];
    char owner[64], req[DLOCK__UUID_LEN + 1];
    dlock__owner(c, j->tid, owner, sizeof owner);
    dlock__acquire a = {.kind = j->kind,
                        .name = j->name,
                        .owner = owner,
                        .lease_ms = j->lease_ms};
    int64_t token = 0;
    int rc = c->ops->lock_leave(c->be, &a, j->seq, &token);
    if (rc == 1) {
      /* handed a lock nobody waits for any more: release it, so it passes
       * to the next waiter (its count is 1: a grant) */
      dlock__reqid(&c->reqids, req);
      dlock__release r = {.kind = j->kind,
                          .name = j->name,
                          .owner = owner,
                          .lease_ms = j->lease_ms,
                          .request_id = req};
      rc = c->ops->lock_release(c->be, &r);
      dlock__log(c, DLOCK_LOG_INFO,
                 "released '%.200s', handed to a wait that had ended: %s",
                 j->name, rc < 0 ? dlock_last_error() : "done");
    }
    pthread_mutex_lock(&c->mu);
    job_done_locked(c, j, rc < 0 ? rc : 0);
    pthread_mutex_unlock(&c->mu);
  }

  pthread_mutex_lock(&c->mu);
  int64_t due = DLOCK__NEVER;
  for (e = dlock__map_first(&c->unresolved, &cur); e;
       e = dlock__map_next(&c->unresolved, e, &cur)) {
    dlock__unresolved *u = e->value;
    int64_t t = u->grant_seen ? now : u->next_try;
    if (u->expires < t)
      t = u->expires;
    if (!u->busy && t < due)
      due = t;
  }
  c->unresolved_due = due;
  c->settle_busy = false;
  pthread_mutex_unlock(&c->mu);
  dlock__client_poke(c);
}
