/*
 * session.h - the loss clock of a backend's session (a ZooKeeper session,
 * an etcd lease), kept by the core.
 *
 * A backend without per-hold renewal keeps all of a client's holds alive
 * with one session. It does not judge that session by time itself: it
 * reports what the service confirmed, and the core alone decides, by its
 * own clock and on the event loop, when the session can no longer be
 * vouched for. Then every hold is marked lost and reported (as watchdog
 * holds are by holds.c), and the backend is told (its session_expired
 * operation) so that it stops using the session.
 *
 * What a backend reports, all keyed by its own session id (a stale report
 * about an earlier session is ignored):
 *   begin      a new session of `length` ms (ZooKeeper's negotiated
 *              timeout, an etcd lease's TTL) is in use;
 *   confirm    the service cannot end the session before `until`
 *              (monotonic ms, measured from the send instant of the
 *              request it answered: sent + length for a ZooKeeper reply or
 *              an etcd keep-alive, suspended_at + length / 3 for a
 *              ZooKeeper connection that just dropped);
 *   linked     whether a live connection vouches for the session (a
 *              ZooKeeper connection, whose own pings keep it alive and
 *              whose loss is noticed within a known time): while it does,
 *              the clock is paused; when it drops, the backend may give
 *              the bound that rule implies (a ZooKeeper drop: a third of
 *              the timeout after it), and the clock then runs to that
 *              bound instead of the confirmed one.
 * The loss is reported when that bound less the margin of holds.h (5% of
 * the session's length, at least 5 ms) passes: before the service can
 * give any of its locks to someone else. A hold's validity
 * (dlock_lock_hold_valid) is answered from the confirmed bound alone,
 * which only answers prove: a link's rule assumes the process ran all
 * along, and a process stopped (SIGSTOP) notices its dropped link only
 * once it runs again.
 * dlock__holds_session_lost (backend.h) reports a loss the service itself
 * made known (an expired session, a lease not found).
 */
#ifndef DLOCK_CORE_SESSION_H
#define DLOCK_CORE_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "core/client_base.h"

/* mu held: the moment the session stops being vouched for, DLOCK__NEVER
 * when the clock does not run (no session, linked, or gone already). */
int64_t dlock__session_due_locked(const struct dlock_client *c);
/* mu held: by `now`, has the clock run out? Then every hold is marked lost
 * and the backend is due to be told (dlock__session_tell). */
void dlock__session_expire_locked(struct dlock_client *c, int64_t now);
/* Event loop, without mu: tells the backend of a session the clock ended
 * (its session_expired operation). */
void dlock__session_tell(struct dlock_client *c);
/* For a hold's validity: the moment until which the session is vouched
 * for (*until), or DLOCK_ELOST once it is known to be gone. No detail. */
int dlock__session_valid_until(struct dlock_client *c, int64_t *until);

#endif
