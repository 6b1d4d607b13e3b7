/*
 * session.c - the core's loss clock for a backend's session (session.h).
 *
 * The record lives in the client under its mutex. Confirmations only move
 * the bound forward (a late reply to an earlier request proves less than
 * one already counted). The event loop asks for the due moment with its
 * other deadlines (client.c, chores_locked); when the clock runs out it
 * marks every hold lost under the mutex, exactly as a watchdog hold's
 * vouching deadline does, and tells the backend afterwards, without the
 * mutex, so that the report of the loss never waits on the backend.
 */
#include "core/session.h"

#include "core/client_base.h"
#include "core/clock.h"
#include "core/holds.h"

/* mu held: is `sid` the session the clock follows? */
static bool current(const struct dlock_client *c, int64_t sid) {
  return c->session.begun && c->session.sid == sid;
}

void dlock__session_begin(struct dlock_client *c, int64_t sid, int64_t length) {
  pthread_mutex_lock(&c->mu);
  c->session = (dlock__session_clock){.begun = true,
                                      .linked = false,
                                      .sid = sid,
                                      .length = length,
                                      .until = DLOCK__NEVER,
                                      .grace = DLOCK__NEVER};
  pthread_mutex_unlock(&c->mu);
}

void dlock__session_confirm(struct dlock_client *c, int64_t sid,
                            int64_t until) {
  bool poke = false;
  pthread_mutex_lock(&c->mu);
  if (current(c, sid) && !c->session.gone) {
    if (c->session.until == DLOCK__NEVER || until > c->session.until) {
      poke = c->session.until == DLOCK__NEVER;
      c->session.until = until;
    }
  }
  pthread_mutex_unlock(&c->mu);
  if (poke) /* the first bound: the loop's next deadline may be earlier */
    dlock__client_poke(c);
}

void dlock__session_linked(struct dlock_client *c, int64_t sid, bool linked,
                           int64_t grace) {
  bool poke = false;
  pthread_mutex_lock(&c->mu);
  if (current(c, sid) && c->session.linked != linked) {
    c->session.linked = linked;
    c->session.grace = linked ? DLOCK__NEVER : grace;
    poke = !linked; /* the clock runs again */
  }
  pthread_mutex_unlock(&c->mu);
  if (poke)
    dlock__client_poke(c);
}

/* mu held: the moment the service's bound, less the margin, is past. */
static int64_t vouched_until(const struct dlock_client *c) {
  if (c->session.until == DLOCK__NEVER)
    return DLOCK__NEVER;
  return c->session.until - dlock__vouch_margin(c->session.length);
}

int64_t dlock__session_due_locked(const struct dlock_client *c) {
  if (!c->session.begun || c->session.linked || c->session.gone)
    return DLOCK__NEVER;
  if (c->session.grace != DLOCK__NEVER) /* a dropped link's own rule */
    return c->session.grace - dlock__vouch_margin(c->session.length);
  return vouched_until(c);
}

void dlock__session_expire_locked(struct dlock_client *c, int64_t now) {
  if (now < dlock__session_due_locked(c))
    return;
  c->session.gone = true;
  c->session.expired = true;
  dlock__holds_session_lost_locked(c, DLOCK_LOST_SESSION);
}

void dlock__session_tell(struct dlock_client *c) {
  pthread_mutex_lock(&c->mu);
  bool tell = c->session.expired;
  int64_t sid = c->session.sid;
  c->session.expired = false;
  pthread_mutex_unlock(&c->mu);
  if (tell && c->ops->session_expired)
    c->ops->session_expired(c->be, sid);
}

int dlock__session_valid_until(struct dlock_client *c, int64_t *until) {
  pthread_mutex_lock(&c->mu);
  bool gone = !c->session.begun || c->session.gone;
  /* no bound yet (nothing answered): nothing to vouch with */
  *until = c->session.until == DLOCK__NEVER ? 0 : vouched_until(c);
  pthread_mutex_unlock(&c->mu);
  return gone ? DLOCK_ELOST : 0;
}
