/*
 * async_one.h - one async lock operation run to its callback by the
 * calling thread, as an event-loop program runs it (poll() on the
 * client's completion descriptor, dlock_client_process), for the tests of
 * sent operations, and the count of the process's threads they check.
 * Header-only, as check.h, whose CHECK macros it uses: include check.h and
 * harness.h first. Every wait is bounded.
 */
#ifndef DLOCK_TEST_ASYNC_ONE_H
#define DLOCK_TEST_ASYNC_ONE_H

#include <dirent.h>
#include <dlock/dlock.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct th_async_outcome {
  int calls, rc;
  int64_t value;
  char detail[300]; /* the error's detail, on failure */
} th_async_outcome_t;

/* A dlock_done_fn for a th_async_outcome_t. */
static inline void th_async_note(void *ud, int rc, int64_t value) {
  th_async_outcome_t *o = ud;
  o->calls++;
  o->rc = rc;
  o->value = value;
  snprintf(o->detail, sizeof o->detail, "%s", rc ? dlock_last_error() : "");
}

/* One async acquire (wait_ms, lease_ms) or release of l as thread tid,
 * run to its callback (within 30 s): its outcome. */
static inline th_async_outcome_t th_async_one(dlock_client_t *c,
                                              dlock_lock_t *l, uint64_t tid,
                                              bool acquire, int64_t wait_ms,
                                              int64_t lease_ms) {
  th_async_outcome_t o = {0};
  CHECK_OK(acquire ? dlock_lock_acquire_async(l, tid, wait_ms, lease_ms,
                                              th_async_note, &o, NULL)
                   : dlock_lock_release_async(l, tid, th_async_note, &o, NULL));
  int fd = -1;
  CHECK_OK(dlock_client_fd(c, &fd));
  int64_t deadline = th_now_ms() + 30000;
  while (o.calls == 0 && th_now_ms() < deadline) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 200) > 0)
      CHECK(dlock_client_process(c) >= 0);
  }
  CHECK_INT(o.calls, ==, 1);
  return o;
}

/* The threads of this process (entries of /proc/self/task): a sent
 * operation starts none, where a pool thread would run it otherwise. */
static inline int th_thread_count(void) {
  DIR *d = opendir("/proc/self/task");
  CHECK(d != NULL);
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

#endif
