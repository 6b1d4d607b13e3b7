/*
 * client_base.c - what every module of the core uses of a client, below all of
 * them: the checks of a client handle and of a call's arguments, the
 * accounting of calls in progress (which dlock_client_free waits for),
 * the event loop's poke, the log, and the owner string. The client's
 * life and its loop (client.c) sit above every module; these services sit
 * below, so that no module reaches up into client.c.
 */
#include "core/client_base.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fmt.h"

/* ------------------------------------------------------------------ fork */

static _Atomic unsigned fork_generation;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void) { atomic_fetch_add(&fork_generation, 1); }
static void register_fork(void) { pthread_atfork(NULL, NULL, on_fork_child); }

unsigned dlock__fork_gen(void) {
  pthread_once(&fork_once, register_fork);
  return atomic_load(&fork_generation);
}

int dlock__client_check(const struct dlock_client *c, const char *fn) {
  if (!c)
    return dlock__seterr(DLOCK_EINVAL, "%s: client is NULL", fn);
  if (c->magic != DLOCK__CLIENT_MAGIC)
    return dlock__seterr(DLOCK_EBADHANDLE, "%s: client handle is not live", fn);
  if (c->fork_gen != dlock__fork_gen())
    return dlock__seterr(DLOCK_ECLOSED,
                         "%s: client was created before fork(); create a new "
                         "client in this process",
                         fn);
  return 0;
}

int dlock__call_begin(struct dlock_client *c, const char *fn) {
  int rc = dlock__client_check(c, fn);
  if (rc)
    return rc;
  /* no mutex on the call path: calls and the stopping bit share one
   * atomic word (callstate: calls x 2 | stopping). The call counts itself
   * and sees in the same step whether dlock_client_free has begun */
  if (atomic_fetch_add(&c->callstate, 2) & 1) {
    dlock__call_end(c);
    rc = dlock__seterr(DLOCK_ECLOSED, "%s: the client is being freed", fn);
  }
  return rc;
}

void dlock__call_end(struct dlock_client *c) {
  uint64_t s = atomic_load(&c->callstate);
  while (!(s & 1)) {
    /* not stopping: uncount; once this succeeds c is not touched again */
    if (atomic_compare_exchange_weak(&c->callstate, &s, s - 2))
      return;
  }
  /* stopping: dlock_client_free waits under mu until the count is 0, so
   * the client lives until this thread unlocks */
  pthread_mutex_lock(&c->mu);
  if (atomic_fetch_sub(&c->callstate, 2) == 3)
    pthread_cond_broadcast(&c->calls_done);
  pthread_mutex_unlock(&c->mu);
}

bool dlock__client_stopping(struct dlock_client *c) {
  return atomic_load(&c->callstate) & 1;
}

/* -------------------------------------------------------------- helpers */

void dlock__client_poke(struct dlock_client *c) {
  char b = 1;
  ssize_t n = write(c->wake_wr, &b, 1); /* full pipe: already poked */
  (void)n;
}

int dlock__check_wait(int64_t wait_ms, const char *fn) {
  if (wait_ms < 0 && wait_ms != DLOCK_WAIT_FOREVER)
    return dlock__seterr(DLOCK_EINVAL,
                         "%s: wait must be >= 0 or DLOCK_WAIT_FOREVER", fn);
  return 0;
}

int dlock__check_lease(int64_t lease_ms, const char *fn) {
  if ((lease_ms <= 0 && lease_ms != DLOCK_LEASE_WATCHDOG) ||
      lease_ms > DLOCK_LEASE_MAX)
    return dlock__seterr(DLOCK_EINVAL,
                         "%s: lease must be 1..DLOCK_LEASE_MAX ms or "
                         "DLOCK_LEASE_WATCHDOG",
                         fn);
  return 0;
}

int dlock__check_name(struct dlock_client *c, const char *name,
                      const char *fn) {
  if (!name)
    return dlock__seterr(DLOCK_EINVAL, "%s: name is NULL", fn);
  size_t n = strnlen(name, DLOCK_NAME_MAX + 1);
  if (n == 0)
    return dlock__seterr(DLOCK_EINVAL, "%s: name is empty", fn);
  if (n > DLOCK_NAME_MAX)
    return dlock__seterr(DLOCK_EINVAL, "%s: name is longer than %d bytes", fn,
                         DLOCK_NAME_MAX);
  /* what else a name may not be is the backend's (Redis: its own keys) */
  return c->ops->check_name ? c->ops->check_name(c->be, name, fn) : 0;
}

void dlock__log(struct dlock_client *c, dlock_log_level_t level,
                const char *fmt, ...) {
  if (!c->opts.log_fn || level > c->opts.log_level)
    return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  c->opts.log_fn(c->opts.log_ud, level, msg);
}

void dlock__owner(const struct dlock_client *c, uint64_t tid, char *buf,
                  size_t len) {
  /* "<client-id>:<tid>", without printf (hot path) */
  size_t n = strlen(c->id);
  if (n + 1 + DLOCK__I64_BUF > len) {
    snprintf(buf, len, "%s:%llu", c->id, (unsigned long long)tid);
    return;
  }
  memcpy(buf, c->id, n);
  buf[n] = ':';
  dlock__fmt_u64(buf + n + 1, tid);
}
