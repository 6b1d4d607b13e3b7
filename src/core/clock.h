/*
 * clock.h - the monotonic clock every duration and deadline uses.
 *
 * Deadlines are absolute CLOCK_MONOTONIC milliseconds; DLOCK__NEVER is a
 * deadline that never comes. No wall clock: where a wire layout holds
 * absolute times (fair-lock deadlines, queue expiries), the scripts take
 * them from the server's TIME.
 */
#ifndef DLOCK_CORE_CLOCK_H
#define DLOCK_CORE_CLOCK_H

#include <stdint.h>
#include <time.h>

#define DLOCK__NEVER INT64_MAX

static inline int64_t dlock__now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* now + ms, saturating; ms < 0 means never. */
static inline int64_t dlock__deadline_after(int64_t ms) {
  if (ms < 0)
    return DLOCK__NEVER;
  int64_t now = dlock__now_ms();
  return ms > DLOCK__NEVER - now ? DLOCK__NEVER : now + ms;
}

/* Milliseconds left until deadline (0 when past), clamped to int for poll. */
static inline int dlock__poll_timeout(int64_t deadline) {
  if (deadline == DLOCK__NEVER)
    return -1;
  int64_t left = deadline - dlock__now_ms();
  if (left <= 0)
    return 0;
  return left > 0x7fffffff ? 0x7fffffff : (int)left;
}

/* Sleeps ms milliseconds (resumed after a signal). */
static inline void dlock__sleep_ms(int64_t ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (ms > 0 && nanosleep(&ts, &ts) != 0) {
  }
}

/* Fills *ts with the CLOCK_MONOTONIC time of `deadline` (for condvars). */
static inline void dlock__deadline_timespec(int64_t deadline,
                                            struct timespec *ts) {
  ts->tv_sec = (time_t)(deadline / 1000);
  ts->tv_nsec = (long)(deadline % 1000) * 1000000L;
}

#endif
