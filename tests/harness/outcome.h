/*
 * outcome.h - async calls in tests (header only): the record a
 * dlock_done_fn fills (th_on_outcome), and a loop that runs a client's
 * callbacks, as a program's event loop would, until a condition holds
 * (th_loop_until). Include after check.h and harness.h.
 */
#ifndef DLOCK_TEST_OUTCOME_H
#define DLOCK_TEST_OUTCOME_H

#include <dlock/dlock.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* One operation's outcome: its callback's calls, rc, value and detail. */
typedef struct th_outcome {
  int calls;
  int rc;
  int64_t value;
  char detail[256];
} th_outcome_t;

static inline void th_on_outcome(void *ud, int rc, int64_t value) {
  th_outcome_t *o = ud;
  o->calls++;
  o->rc = rc;
  o->value = value;
  snprintf(o->detail, sizeof o->detail, "%s", rc ? dlock_last_error() : "");
}

/* cond for th_loop_until: the outcome (a th_outcome_t) came. */
static inline bool th_called(void *arg) {
  return ((th_outcome_t *)arg)->calls > 0;
}

/* Runs the client's callbacks as they come until cond() holds or
 * timeout_ms passes; false on the timeout. */
static inline bool th_loop_until(dlock_client_t *c, bool (*cond)(void *),
                                 void *arg, int64_t timeout_ms) {
  int fd = -1;
  CHECK_OK(dlock_client_fd(c, &fd));
  int64_t deadline = th_now_ms() + timeout_ms;
  while (!cond(arg)) {
    int64_t left = deadline - th_now_ms();
    if (left <= 0)
      return false;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int n = poll(&p, 1, left > 200 ? 200 : (int)left);
    if (n > 0)
      CHECK(dlock_client_process(c) >= 0);
  }
  return true;
}

#endif
