/*
 * fake_backend.h - an in-memory backend for the core's own tests.
 *
 * Design note: the core (client, locks, waits, the session loss clock) is
 * tested here without any server. The fake is a session backend, as
 * ZooKeeper and etcd are: it has no lock_renew, so its holds live with its
 * session, and the core's loss clock (core/session.h) decides when that
 * session is lost from what the fake reports. The test drives those
 * reports by hand (fake_confirm, fake_link, fake_new_session,
 * fake_service_ends_session) and observes what a user would: lost
 * callbacks, dlock_lock_hold_valid, the codes of acquire and release, and
 * which client gets a lock.
 *
 * "Servers" are named by the URL (fake://NAME): clients opened on one name
 * share its locks. Reentrant locks only (the one kind it declares); a
 * release wakes every wait of the name, and each woken waiter attempts
 * again (no hand-off queue, as etcd). When the core's clock ends a session
 * (session_expired) or the test ends it on the "server" side, the server
 * drops every lock of that session, as a real service would at expiry.
 */
#ifndef DLOCK_TESTS_FAKE_BACKEND_H
#define DLOCK_TESTS_FAKE_BACKEND_H

#include <stdbool.h>
#include <stdint.h>

#include "core/backend.h"
#include "dlock/dlock.h"

extern const dlock__backend_ops fake_backend_ops;

typedef struct fake_be fake_be;

/* Opens a client on the fake server NAME (fake://NAME) with a session of
 * session_ms, and its lost callback (may be NULL). The session is
 * confirmed at open for session_ms from then. */
dlock_client_t *fake_client(const char *name, int64_t session_ms,
                            dlock_lost_fn lost, void *ud);
/* The fake backend of a client from fake_client. */
fake_be *fake_of(dlock_client_t *c);
/* The service proved the current session alive until `until` (monotonic
 * ms), or a given session id (fake_confirm_sid). */
void fake_confirm(fake_be *b, int64_t until);
void fake_confirm_sid(fake_be *b, int64_t sid, int64_t until);
/* A live connection does (or no longer does) vouch for the session; a
 * dropped one may give the bound its own rule implies (fake_drop). */
void fake_link(fake_be *b, bool linked);
void fake_drop(fake_be *b, int64_t grace);
/* The current session's id; a new session (its locks dropped), returning
 * the old id. */
int64_t fake_sid(fake_be *b);
int64_t fake_new_session(fake_be *b);
/* The service itself ended the session (an expiry it announced). */
void fake_service_ends_session(fake_be *b);
/* How many times the core told the fake a session expired, and the id it
 * named last. */
int fake_expired_calls(fake_be *b, int64_t *last_sid);
/* The next n lock attempts fail with DLOCK_EUNAVAILABLE, as a server that
 * is down does: having sent nothing (unsent: no connection could be had)
 * or with an unknown outcome. */
void fake_fail_attempts(fake_be *b, int n, bool unsent);
/* How many lock attempts this client made. */
int fake_attempts(fake_be *b);

#endif
