/*
 * holds.h - what this client holds, and the renewer that keeps it alive.
 *
 * A hold is one owner's (name, thread) grip on a lock: its local reentry
 * count, its lease, whether the watchdog renews it, and whether it was lost.
 * The server is the truth; the hold record exists to renew watchdog leases,
 * to tell a lost lock (DLOCK_ELOST) from one never held (DLOCK_ENOTOWNER),
 * and to keep a release's request id across a user's retry.
 *
 * The renewer runs on the background thread: every due watchdog lease of
 * the client goes to the backend in one batched call (one round trip), and
 * holds that the server no longer has, or that could not be renewed for a
 * whole lease, are marked lost and reported through the lost callback.
 */
#ifndef DLOCK_CORE_HOLDS_H
#define DLOCK_CORE_HOLDS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/client.h"

typedef struct dlock__hold {
  char *name;
  uint64_t tid;
  int64_t count;    /* local reentry count */
  int64_t lease_ms; /* lease given on the last acquire */
  bool watchdog;    /* renewed by the background thread */
  bool lost;
  dlock_lost_reason_t lost_reason;
  uint64_t gen;       /* changes every time the hold is created */
  int64_t next_renew; /* monotonic ms */
  int64_t last_ok;    /* when the server last confirmed the lease */
  char release_id[DLOCK__UUID_LEN + 1]; /* kept while a release is unsure */
} dlock__hold;

/* mu held for all *_locked calls. */
dlock__hold *dlock__hold_find_locked(struct dlock_client *c, const char *name,
                                     uint64_t tid);
/* Records a successful acquire (count up, lease, watchdog). */
int dlock__hold_acquired_locked(struct dlock_client *c, const char *name,
                                uint64_t tid, int64_t lease_ms,
                                bool watchdog);
void dlock__hold_remove_locked(struct dlock_client *c, dlock__hold *h);
void dlock__holds_free_all_locked(struct dlock_client *c);

/* Background thread, mu NOT held: renews what is due. */
void dlock__renewer_run(struct dlock_client *c);

#endif
