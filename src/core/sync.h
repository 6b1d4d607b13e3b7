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
 * wait with the backend (need: the permits a semaphore waiter asks for),
 * waits until its wake-up path is armed, attempts again, and then sleeps
 * until a wake-up, the bound or the deadline before each further attempt.
 * Never polls. An attempt that fails in an outage is made again while the
 * deadline is ahead (dlock__wait_retry). 1 done, 0 the deadline passed,
 * <0 error. */
int dlock__sync_wait(dlock__sync *h, int64_t need, int64_t deadline,
                     dlock__sync_attempt_fn attempt, void *ctx);

#endif
