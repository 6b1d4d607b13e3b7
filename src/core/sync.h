/*
 * sync.h - what semaphores, permit semaphores and latches share: their
 * handles (one struct, dlock__sync, told apart by its magic) and the wait
 * for a change of the object (core/wait.h).
 */
#ifndef DLOCK_CORE_SYNC_H
#define DLOCK_CORE_SYNC_H

#include <stdint.h>

#include "core/client.h"
#include "core/wait.h"

/* Creates a handle of `kind` with `magic` and links it into the client's
 * list. 0 or DLOCK_E* (*out NULL then). */
int dlock__sync_new(struct dlock_client *c, const char *name,
                    dlock__sync_kind kind, uint32_t magic, const char *fn,
                    dlock__sync **out);
/* Unlinks and frees the handle; a handle not live with `magic` is ignored.
 * `name_gone` (may be NULL) runs with client->mu held after the unlink. */
void dlock__sync_free(dlock__sync *h, uint32_t magic,
                      void (*name_gone)(struct dlock_client *c,
                                        const char *name));
/* Validates the handle (NULL: DLOCK_EINVAL, bad magic: DLOCK_EBADHANDLE)
 * and enters a call on its client; pair a success with sync_call_end. */
int dlock__sync_call_begin(const dlock__sync *h, uint32_t magic,
                           const char *what, const char *fn);
int dlock__sync_call_end(const dlock__sync *h, int rc);

/* One attempt of a wait: 1 done, 0 not yet (*bound_ms = the longest the
 * waiter may sleep before trying again, -1 for no bound), <0 error. */
typedef int (*dlock__sync_attempt_fn)(void *ctx, int64_t *bound_ms);

/* Whether a first attempt's failure rc (made before dlock__sync_wait,
 * with the unsent mark cleared before it) should start the wait anyway:
 * an outage, with the deadline ahead. */
bool dlock__sync_rides_out(int rc, int64_t deadline);

/* Waits for the attempt to succeed, after one that failed: registers a
 * wait with the backend (need: the permits a semaphore waiter asks for;
 * owner: a permit semaphore waiter's permit id, which outlives the wait,
 * else NULL),
 * waits until its wake-up path is armed, attempts again, and then sleeps
 * until a wake-up, the bound or the deadline before each further attempt.
 * Never polls. An attempt that fails in an outage is made again while the
 * deadline is ahead (dlock__wait_retry). 1 done, 0 the deadline passed,
 * <0 error. */
int dlock__sync_wait(dlock__sync *h, int64_t need, const char *owner,
                     int64_t deadline, dlock__sync_attempt_fn attempt,
                     void *ctx);

/* The outcome of an async attempt-and-wait (1 done, 0 not in time, <0 an
 * error), made the public code with its detail; it ends the call begun
 * for the operation (dlock__sync_call_end). *value: the callback's value. */
typedef int (*dlock__sync_finish_fn)(void *ctx, int rc, int64_t *value);
/* The most bytes of context an async attempt-and-wait copies. */
#define DLOCK__SYNC_CTX_MAX 64
/* The async counterpart of one attempt and, when it does not succeed and
 * wait_ms is not 0, dlock__sync_wait: started on the client's async pool
 * (core/async.h), with ctx (ctx_size bytes, copied into the operation)
 * handed to attempt and finish; `done` gets finish's outcome. The caller
 * has begun a call (dlock__sync_call_begin), which finish ends. 0, or an
 * error (nothing started: the caller ends its call). */
int dlock__sync_async(dlock__sync *h, int64_t need, const char *owner,
                      int64_t wait_ms, dlock__sync_attempt_fn attempt,
                      dlock__sync_finish_fn finish, const void *ctx,
                      size_t ctx_size, dlock_done_fn done, void *userdata,
                      dlock_op_t *id);

#endif
