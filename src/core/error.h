/*
 * error.h - error codes and the per-thread error detail.
 *
 * Internal functions return 0 or a negative DLOCK_E* code, and whoever first
 * detects a failure writes its detail with dlock__seterr(), which returns the
 * code so that `return dlock__seterr(DLOCK_EINVAL, "...")` reads naturally.
 * The detail buffer is thread-local: a client shared between threads never
 * mixes two threads' messages. Messages must never include a password.
 */
#ifndef DLOCK_CORE_ERROR_H
#define DLOCK_CORE_ERROR_H

#include <stdbool.h>

#include "dlock/dlock.h"

int dlock__seterr(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Marks the thread's current failure as one that sent nothing to the
 * server (no connection could be had), whose effects the backend undid, or
 * whose repetition the server tells apart (a lock wait's attempts carrying
 * its queue entry): the same request can be made again as if it had never
 * been tried. Every
 * dlock__seterr clears the mark (a failure is taken as possibly sent
 * unless its backend says otherwise); dlock__preferr keeps it. */
void dlock__err_set_unsent(bool unsent);
bool dlock__err_unsent(void);
/* Marks the thread's current failure detail as already telling the user
 * what it means (e.g. which kind of lock is in the way of a DLOCK_EWRONGTYPE)
 * so that a later step that words a bare server error keeps it instead of
 * rewording it (the Redis backend's acquire: dlock__redis_lock_wrongtype).
 * Every dlock__seterr clears the mark; dlock__preferr keeps it. */
void dlock__err_set_worded(void);
bool dlock__err_worded(void);
/* Prefixes the current detail with "<prefix>: " and returns code. */
int dlock__preferr(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Replaces every occurrence of `secret` in the thread's error detail with
 * "***" (a server may echo a command's arguments, a password included, in
 * its error text). NULL or "" does nothing. */
void dlock__scrub_error(const char *secret);

#endif
