/*
 * holds.h - what this client holds, and the renewer that keeps it alive.
 *
 * A hold is one owner's (name, thread) grip on a lock: its local reentry
 * count, its lease, whether the watchdog renews it, and whether it was lost.
 * The server is the truth; the hold record exists to renew watchdog leases,
 * to tell a lost lock (DLOCK_ELOST) from one never held (DLOCK_ENOTOWNER),
 * and to keep a release's request id across a user's retry.
 *
 * The renewer runs on the client's renewal worker (worker.h): every due
 * watchdog lease of the client goes to the backend in one batched call
 * (one round trip), and holds that the server no longer has are marked
 * lost. So are holds the client can no longer vouch for: the server's
 * lease runs at least until last_ok + lease (last_ok = when the last
 * confirmed renewal was sent), and a hold not confirmed again by
 * last_ok + lease - margin (margin 5% of the lease, at least 5 ms) is
 * marked lost then by the event loop, whatever round trip is in flight,
 * before the server can give the lock to anyone else. Every loss is
 * reported by the event loop thread (the lost callback), once.
 */
#ifndef DLOCK_CORE_HOLDS_H
#define DLOCK_CORE_HOLDS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/client_base.h"

typedef struct dlock__hold {
  char *name;
  size_t name_cap;  /* room in name: a kept record's name is overwritten */
  uint64_t tid;     /* owner thread (0 for a permit) */
  char *permit;     /* a permit's id, else NULL (out of line: rare) */
  int64_t token;    /* fenced lock: the token of the latest grant */
  int64_t count;    /* local reentry count */
  int64_t lease_ms; /* lease given on the last acquire */
  dlock__hold_kind kind;
  bool watchdog;    /* renewed by the background thread */
  bool releasing;   /* a release is in flight: a renewal that finds the key
                       gone is that release, not a loss */
  bool lost;
  bool lost_reported; /* the lost callback was called for it */
  dlock_lost_reason_t lost_reason;
  uint64_t gen;       /* changes every time the hold is created */
  int64_t next_renew; /* monotonic ms */
  int64_t last_ok;    /* when the server last confirmed the lease */
  char release_id[DLOCK__UUID_LEN + 1]; /* kept while a release is unsure */
} dlock__hold;

/* A wait that ended while it may still have been queued on the server,
 * and whose leave could not be done (backend error): a release may yet
 * hand it the lock. It is resolved by the same thread's next acquire of the
 * lock (which then claims the grant instead of counting a second hold), or
 * by the background thread when the grant message arrives or on a timer
 * (it leaves the queue, and releases a grant so it passes on). */
typedef struct dlock__unresolved {
  char *name;
  dlock_lock_kind_t kind; /* reentrant, fenced or write */
  uint64_t tid;
  uint64_t seq;
  int64_t lease_ms;
  int64_t expires; /* monotonic ms: past this nothing can be pending */
  int64_t next_try;
  bool grant_seen; /* a grant message for it arrived */
  bool busy;       /* someone is resolving it (see unresolved_cv) */
} dlock__unresolved;

/* mu held for all *_locked calls. A hold is found by (kind, name, tid),
 * or for a permit by (DLOCK__HK_PERMIT, name, permit id) with tid 0. */
dlock__hold *dlock__hold_find_locked(struct dlock_client *c,
                                     dlock__hold_kind kind, const char *name,
                                     uint64_t tid, const char *permit);
/* Makes sure the record of (kind, name, tid) exists before an acquire is
 * sent, so that recording a grant cannot run out of memory with the lock
 * held on the server. NULL: out of memory (nothing was sent). A record
 * still at count 0 after a failed acquire is dropped by unreserve. */
dlock__hold *dlock__hold_reserve_locked(struct dlock_client *c,
                                        dlock__hold_kind kind,
                                        const char *name, uint64_t tid);
void dlock__hold_unreserve_locked(struct dlock_client *c,
                                  dlock__hold_kind kind, const char *name,
                                  uint64_t tid);
/* Records a successful acquire (count up, lease, watchdog) and returns the
 * hold (NULL: out of memory). `since` is a monotonic time no later than the
 * moment the server granted the lease. */
dlock__hold *dlock__hold_acquired_locked(struct dlock_client *c,
                                         dlock__hold_kind kind,
                                         const char *name, uint64_t tid,
                                         const char *permit, int64_t lease_ms,
                                         bool watchdog, int64_t since);
void dlock__hold_remove_locked(struct dlock_client *c, dlock__hold *h);
/* Forgets every hold of `name`: its permits (permits true) or its lock
 * holds (false). They are no longer renewed. */
void dlock__holds_drop_locked(struct dlock_client *c, const char *name,
                              bool permits);
void dlock__holds_free_all_locked(struct dlock_client *c);

int dlock__unresolved_add_locked(struct dlock_client *c, dlock_lock_kind_t kind,
                                 const char *name, uint64_t tid, uint64_t seq,
                                 int64_t lease_ms,
                                 int64_t expires);
dlock__unresolved *dlock__unresolved_find_locked(struct dlock_client *c,
                                                 dlock_lock_kind_t kind,
                                                 const char *name,
                                                 uint64_t tid);
void dlock__unresolved_remove_locked(struct dlock_client *c,
                                     dlock__unresolved *u);
/* Caller thread, mu NOT held: resolves this thread's unresolved wait on
 * `name`, if any, before a new acquire. 1 when it turned out to hold the
 * lock (claimed now with lease_ms; *token = its fencing token for a fenced
 * lock), 0 when nothing is pending, <0 on error (the wait stays
 * unresolved). */
int dlock__unresolved_resolve_own(struct dlock_client *c,
                                  dlock_lock_kind_t kind, const char *name,
                                  uint64_t tid, int64_t lease_ms,
                                  int64_t *token);
/* A grant message nobody waits for: flags the matching unresolved wait. */
void dlock__unresolved_grant_locked(struct dlock_client *c, uint64_t tid,
                                    uint64_t seq);
void dlock__unresolved_free_all_locked(struct dlock_client *c);

/* How long before the end of a lease of lease_ms the client stops
 * vouching for it: 5% of it, at least 5 ms. */
static inline int64_t dlock__vouch_margin(int64_t lease_ms) {
  return lease_ms / 20 < 5 ? 5 : lease_ms / 20;
}
/* Until when (monotonic ms) the client vouches for h's lease by its own
 * clock: a watchdog hold until its last confirmation + the watchdog lease
 * less the margin, a fixed lease until its grant's send time + the lease
 * less the margin (mu held). Holds of a backend without lock_renew live
 * with its session instead (core/session.h). */
int64_t dlock__hold_vouch_until_locked(const struct dlock_client *c,
                                       const dlock__hold *h);
/* Recomputes renew_due and vouch_due (mu held); pokes the loop when
 * either moved earlier. */
void dlock__holds_schedule_locked(struct dlock_client *c);
/* A release of h begins / ends (h NULL: it was removed meanwhile). While
 * one is in flight, h is neither renewed nor expired: the release settles
 * it either way. */
void dlock__hold_release_begin_locked(struct dlock_client *c, dlock__hold *h);
void dlock__hold_release_end_locked(struct dlock_client *c, dlock__hold *h);
/* Loop thread, mu held: marks lost every watchdog hold that can no longer
 * be vouched for at `now` (whatever round trip is still in flight). */
void dlock__holds_expire_locked(struct dlock_client *c, int64_t now);
/* Loop thread, mu NOT held: calls the lost callback once for every hold
 * marked lost and not yet reported. */
void dlock__holds_report_lost(struct dlock_client *c);
/* mu held: every hold of the client is lost with its session (see
 * dlock__holds_session_lost in backend.h, which takes mu itself). */
void dlock__holds_session_lost_locked(struct dlock_client *c,
                                      dlock_lost_reason_t reason);
/* dlock__holds_session_lost (declared in backend.h, an up-call): the
 * backend's session ended; mu NOT held. */

/* Renewal worker, mu NOT held: renews what is due, then clears
 * renew_busy and reschedules. */
void dlock__renewer_run(struct dlock_client *c);
/* Settling worker, mu NOT held: resolves what is due, then clears
 * settle_busy and reschedules. */
void dlock__unresolved_run(struct dlock_client *c);

#endif
