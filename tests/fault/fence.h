/*
 * fence.h - a fenced test resource and the mutual-exclusion checker of the
 * fault suite.
 *
 * The resource is a key in a redis-server of its own (the "resource
 * server", never the lock server, so faults injected on the lock server do
 * not touch the evidence). Every holder of a lock writes through it:
 *
 *   fence_begin(token)  right after the acquire returned: records the
 *                       holder's interval start and shows the resource the
 *                       token, so a stale holder is refused from then on;
 *   fence_write(token)  a write to the protected data;
 *   fence_end(outcome)  right before the release (or when the holder learnt
 *                       it had lost the lock): records the interval end.
 *
 * The resource refuses a begin or write whose token is lower than the
 * highest token it has seen for that lock (a Lua script, so the check and
 * the write are one atomic step), and appends every call, accepted or
 * refused, to a log list. fence_analyze() reads the log back and reports
 * overlapping holds and stale writes that were accepted.
 *
 * Exclusive and shared holds. Holds of a mutex and of a read-write lock's
 * write side are exclusive (fence_begin/fence_write); the read side's are
 * shared (fence_begin_as/fence_write_as with shared = true): a shared hold
 * may overlap other shared holds, never an exclusive one.
 *
 * Capacity. A resource may allow N holders at once (the permits of a
 * semaphore): fence_set_capacity(N), once, before the first hold. With N
 * above 1 the resource keeps the set of open holds (begun, not left or
 * ended) and
 * refuses a begin or write whose token is below the tokens of N open
 * holds; the checker asks "at most N holders at once" instead of
 * exclusion, and a write is stale when N holds granted after its own were
 * open when it was sent. N = 1 (the default) is the exclusive/shared
 * semantics above, unchanged. A permit has no fencing token of its own: its
 * holder draws the interim token below, so the resource can only refuse the
 * oldest of N + 1 (a holder paused past its lease is refused once N later
 * holds are open).
 *
 * Tokens. The checker takes the token as an argument. A DLOCK_FENCED
 * holder passes the lock's own fencing token (dlock_lock_acquire_fenced,
 * Redisson's RFencedLock layout: drawn in the grant script, so in grant
 * order). Holders of the other kinds call fence_token_next() right after
 * acquiring: an INCR of fault_fence_token:{name} on the lock server.
 * That token is NOT atomic with the grant: a holder paused between its
 * grant and its INCR can draw a token above the next holder's. The checker
 * detects what that would cause (a stale write accepted), which is why its
 * stale-write rule uses grant times, not token order.
 *
 * Timestamps are CLOCK_MONOTONIC microseconds taken by the holders (all
 * processes run on one machine, where that clock is shared).
 */
#ifndef DLOCK_FAULT_FENCE_H
#define DLOCK_FAULT_FENCE_H

#include <hiredis.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* CLOCK_MONOTONIC in microseconds. */
int64_t fence_now_us(void);

/* ------------------------------------------------------- holder side */

enum {
  FENCE_ACCEPTED = 1,
  FENCE_REFUSED = 0,
  FENCE_ERROR = -1 /* resource unreachable or bad reply */
};

/* A connection to the resource server (one per thread). */
typedef struct fence fence_t;

/* Connects to the resource server at host:port (5 s timeouts). NULL on
 * failure (reason on stderr). */
fence_t *fence_open(const char *host, int port);
void fence_close(fence_t *f);

/* Start of a hold of `lock` by `holder` (a short id without spaces, unique
 * per thread), granted at acq_us, fenced by `token`. */
int fence_begin(fence_t *f, const char *lock, const char *holder, int64_t token,
                int64_t acq_us);
/* A write to the protected data; stamped with fence_now_us() before it is
 * sent. */
int fence_write(fence_t *f, const char *lock, const char *holder,
                int64_t token);
/* The same for a shared hold (a reader of a read-write lock): begin logs
 * S, write logs R (a read of the protected data). A shared record is
 * refused only when its token is below the highest token of an exclusive
 * record, so readers holding together do not refuse one another. */
int fence_begin_as(fence_t *f, const char *lock, const char *holder,
                   int64_t token, int64_t acq_us, bool shared);
int fence_write_as(fence_t *f, const char *lock, const char *holder,
                   int64_t token, bool shared);
/* Lets `lock` have n >= 1 holders at once (see Capacity above). 0 or -1. */
int fence_set_capacity(fence_t *f, const char *lock, int n);
/* Capacity above 1: the holder is about to release; its hold stops
 * counting against the others' begins and writes (it is still open for the
 * checker until fence_end). Call it right before the release. 0 or -1. */
int fence_leave(fence_t *f, const char *lock, const char *holder);
/* End of the hold at end_us. outcome: "ok" (released), "lost" (told by
 * ELOST or the lost callback), "killed" (written by the test for a holder
 * it killed), or "err:<code>" (release failed, fate unknown). 0 or -1. */
int fence_end(fence_t *f, const char *lock, const char *holder, int64_t token,
              int64_t end_us, const char *outcome);

/* The interim token source: INCR fault_fence_token:{lock} on the lock
 * server (a connection of the caller's). Returns the token (>= 1) or -1. */
int64_t fence_token_next(redisContext *lock_server, const char *lock);
/* The token key's name for `lock` (for key-leak checks). */
void fence_token_key(const char *lock, char *buf, size_t n);

/* -------------------------------------------------------- checker side */

typedef struct fence_report {
  int64_t sessions;       /* holds begun */
  int64_t open;           /* holds without an end record */
  int64_t begins_refused; /* begins whose token was already stale */
  int64_t writes_ok, writes_refused;
  /* holds that began while an earlier hold of the same lock had not
   * ended: `overlaps` where the earlier holder was never told it lost the
   * lock (a violation), `overlaps_lost` where it was (outcome "lost": the
   * documented limit of a lease-based lock, e.g. a paused holder) */
  int64_t overlaps, overlaps_lost;
  /* shared holds (readers); shared holds that began while another shared
   * hold was open (allowed: shows readers did hold together) */
  int64_t shared_sessions, shared_overlaps;
  /* accepted writes made after a later hold of the same lock had been
   * granted (the harm fencing must prevent) */
  int64_t stale_accepted;
  int64_t max_token;
  /* the resource's capacity (1: exclusive); with a capacity above 1, the
   * most holds whose holder was not told that were open at once (0 with
   * capacity 1) */
  int64_t capacity, max_holders;
  char first_problem[256]; /* "" or a description of the first violation */
} fence_report_t;

/* Reads lock's log from the resource server and checks it. 0 or -1. */
int fence_analyze(redisContext *resource, const char *lock,
                  fence_report_t *out);
/* Adds b into a (counts; capacity and max_holders: the larger;
 * first_problem kept from a if set). */
void fence_report_add(fence_report_t *a, const fence_report_t *b);

#endif /* DLOCK_FAULT_FENCE_H */
