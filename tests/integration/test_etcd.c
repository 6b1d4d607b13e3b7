/*
 * test_etcd.c - the etcd backend against a real 3-member etcd cluster
 * (tests/harness/etcd.c), and against etcd's own lock client (etcdctl).
 *
 * Design note: every case starts its own cluster. Waiters are threads with
 * clients of their own (a client is one session, one lease: one key per
 * lock), or forked processes re-executing this binary (`--child ...`), so
 * each has its own client from scratch. A waiter's wake-up is asserted by
 * its outcome, never by a sleep: its wait (30 s) is far beyond the time a
 * watch takes and far below the lease TTL (60 s) that bounds a waiter's
 * sleep when no watch fires, so a waiter that only woke by its bound would
 * fail. Each loop is bounded in count and time (TH_WAIT_FOR).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "check.h"
#include "etcd.h"
#include "harness.h"

#include <dlock/dlock.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define WAIT_MS 30000
#define ETCDCTL "/usr/bin/etcdctl"

static const char *g_exe;

/* ---------------------------------------------------------------- helpers */

static dlock_client_t *client_ttl(const char *url, int64_t session_ms,
                                  dlock_lost_fn lost, void *ud) {
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 2000));
  CHECK_OK(dlock_options_set_command_timeout(o, 3000));
  if (session_ms)
    CHECK_OK(dlock_options_set_session_timeout(o, session_ms));
  if (lost)
    CHECK_OK(dlock_options_set_lost_callback(o, lost, ud));
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new(&c, url, o));
  dlock_options_free(o);
  return c;
}

static dlock_client_t *client(const char *url) {
  return client_ttl(url, 0, NULL, NULL);
}

static dlock_lock_t *lock_kind(dlock_client_t *c, const char *name,
                               dlock_lock_kind_t kind) {
  dlock_lock_t *l = NULL;
  CHECK_OK(dlock_lock_new_kind(c, name, kind, &l));
  return l;
}

static dlock_lock_state_t *state(dlock_lock_t *l) {
  dlock_lock_state_t *st = NULL;
  CHECK_OK(dlock_lock_state(l, &st));
  return st;
}

static size_t nwaiters(dlock_lock_t *l) {
  dlock_lock_state_t *st = state(l);
  size_t n = st->nwaiters;
  dlock_lock_state_free(st);
  return n;
}

static int64_t state_token(dlock_lock_t *l) {
  dlock_lock_state_t *st = state(l);
  int64_t t = st->token;
  dlock_lock_state_free(st);
  return t;
}

/* A thread that acquires `name` on a client of its own, notes when and
 * with which token, holds until told, releases. */
typedef struct waiter {
  const char *url, *name;
  dlock_lock_kind_t kind;
  int64_t wait_ms;
  atomic_int rc; /* 1 while running */
  atomic_bool release;
  atomic_llong token, got_at;
  atomic_int order; /* its place among the waiters that got the lock */
  atomic_int *counter;
  pthread_t th;
} waiter_t;

static void *waiter_main(void *arg) {
  waiter_t *w = arg;
  dlock_client_t *c = client(w->url);
  dlock_lock_t *l = lock_kind(c, w->name, w->kind);
  int64_t tok = 0;
  int rc = w->kind == DLOCK_FENCED
               ? dlock_lock_acquire_fenced(l, w->wait_ms, DLOCK_LEASE_WATCHDOG,
                                           &tok)
               : dlock_lock_acquire(l, w->wait_ms, DLOCK_LEASE_WATCHDOG);
  if (rc == 0) {
    atomic_store(&w->got_at, th_now_ms());
    atomic_store(&w->token, tok);
    if (w->counter)
      atomic_store(&w->order, atomic_fetch_add(w->counter, 1) + 1);
    bool ok = false;
    TH_WAIT_FOR(ok, atomic_load(&w->release), 60000);
    (void)ok;
    rc = dlock_lock_release(l);
  }
  atomic_store(&w->rc, rc == 0 ? 0 : rc);
  dlock_lock_free(l);
  dlock_client_free(c);
  return NULL;
}

static void waiter_start(waiter_t *w, const char *url, const char *name,
                         dlock_lock_kind_t kind, int64_t wait_ms) {
  memset(w, 0, sizeof *w);
  w->url = url;
  w->name = name;
  w->kind = kind;
  w->wait_ms = wait_ms;
  atomic_store(&w->rc, 1);
  CHECK(pthread_create(&w->th, NULL, waiter_main, w) == 0);
}

static int waiter_join(waiter_t *w) {
  atomic_store(&w->release, true);
  pthread_join(w->th, NULL);
  return atomic_load(&w->rc);
}

static th_etcd_t *cluster(int n) {
  th_etcd_t *e = th_etcd_start(n);
  CHECKF(e != NULL, "could not start a %d-member etcd cluster", n);
  return e;
}

/* ------------------------------------------------------------------ cases */

static void t_basic(void) {
  th_etcd_t *e = cluster(3);
  dlock_client_t *c = client(th_etcd_url(e));
  dlock_lock_t *l = lock_kind(c, "basic", DLOCK_REENTRANT);
  bool b = true;
  CHECK_OK(dlock_lock_is_locked(l, &b));
  CHECK(!b);
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG)); /* reentry */
  int64_t n = 0;
  CHECK_OK(dlock_lock_hold_count(l, &n));
  CHECK_INT(n, ==, 2);
  CHECK_OK(dlock_lock_is_held_by_thread(l, &b));
  CHECK(b);
  dlock_lock_state_t *st = state(l);
  CHECK_INT(st->nholders, ==, 1);
  CHECK(strstr(st->holders[0].owner, dlock_client_id(c)) != NULL);
  CHECK(strstr(st->holders[0].owner, "key=basic/") != NULL);
  int64_t ttl = st->ttl_ms;
  CHECKF(ttl > 0 && ttl <= 60000, "ttl %lld", (long long)ttl);
  dlock_lock_state_free(st);
  CHECK_OK(dlock_lock_release(l));
  CHECK_OK(dlock_lock_is_locked(l, &b));
  CHECK(b); /* still held once */
  CHECK_OK(dlock_lock_release(l));
  CHECK_OK(dlock_lock_is_locked(l, &b));
  CHECK(!b);
  CHECK_RC(dlock_lock_release(l), DLOCK_ENOTOWNER);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_etcd_stop(e);
}

static void t_try_refused(void) {
  th_etcd_t *e = cluster(3);
  dlock_client_t *a = client(th_etcd_url(e)), *b = client(th_etcd_url(e));
  dlock_lock_t *la = lock_kind(a, "try", DLOCK_REENTRANT);
  dlock_lock_t *lb = lock_kind(b, "try", DLOCK_REENTRANT);
  CHECK_OK(dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_RC(dlock_lock_acquire(lb, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  CHECK(strstr(dlock_last_error(), "held by another") != NULL);
  /* a refused try leaves no key behind */
  CHECK_INT(nwaiters(la), ==, 0);
  /* a timed wait that gives up removes its key too */
  CHECK_RC(dlock_lock_acquire(lb, 300, DLOCK_LEASE_WATCHDOG), DLOCK_ETIMEDOUT);
  CHECK_INT(nwaiters(la), ==, 0);
  CHECK_OK(dlock_lock_release(la));
  CHECK_OK(dlock_lock_acquire(lb, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(lb));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_etcd_stop(e);
}

static void t_waiter_woken(void) {
  th_etcd_t *e = cluster(3);
  dlock_client_t *c = client(th_etcd_url(e));
  dlock_lock_t *l = lock_kind(c, "wake", DLOCK_REENTRANT);
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  waiter_t w;
  waiter_start(&w, th_etcd_url(e), "wake", DLOCK_REENTRANT, WAIT_MS);
  bool ok = false;
  TH_WAIT_FOR(ok, nwaiters(l) == 1, 10000);
  CHECK(ok);
  CHECK_INT(atomic_load(&w.got_at), ==, 0);
  int64_t released = th_now_ms();
  CHECK_OK(dlock_lock_release(l));
  TH_WAIT_FOR(ok, atomic_load(&w.got_at) != 0 || atomic_load(&w.rc) != 1,
              WAIT_MS + 5000);
  CHECK(ok);
  CHECKF(atomic_load(&w.got_at) != 0, "the waiter failed: %d",
         atomic_load(&w.rc));
  printf("woken %lld ms after the release\n",
         (long long)(atomic_load(&w.got_at) - released));
  CHECK_INT(waiter_join(&w), ==, 0);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_etcd_stop(e);
}

typedef struct local_arg {
  dlock_lock_t *l;
  int iters;
  atomic_int *inside;
  long long *counter;
  int rc;
} local_arg_t;

static void *local_main(void *arg) {
  local_arg_t *a = arg;
  for (int i = 0; i < a->iters && a->rc == 0; i++) {
    a->rc = dlock_lock_acquire(a->l, WAIT_MS, DLOCK_LEASE_WATCHDOG);
    if (a->rc)
      break;
    if (atomic_fetch_add(a->inside, 1) != 0)
      a->rc = -1000;
    long long v = *a->counter;
    sched_yield();
    *a->counter = v + 1;
    atomic_fetch_sub(a->inside, 1);
    int rc = dlock_lock_release(a->l);
    if (!a->rc)
      a->rc = rc;
  }
  return NULL;
}

static void t_threads_one_client(void) {
  /* threads of one client share its lease, hence its key: they take turns
   * on it, each owning the lock in its own right */
  th_etcd_t *e = cluster(1);
  dlock_client_t *c = client(th_etcd_url(e));
  dlock_lock_t *l = lock_kind(c, "local", DLOCK_REENTRANT);
  atomic_int inside = 0;
  long long counter = 0;
  local_arg_t args[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    args[i] = (local_arg_t){
        .l = l, .iters = 25, .inside = &inside, .counter = &counter};
    CHECK(pthread_create(&th[i], NULL, local_main, &args[i]) == 0);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    CHECKF(args[i].rc == 0, "thread %d: %d", i, args[i].rc);
  }
  CHECK_INT(counter, ==, 100);
  /* a thread that does not hold it cannot release it */
  CHECK_RC(dlock_lock_release(l), DLOCK_ENOTOWNER);
  bool b = true;
  CHECK_OK(dlock_lock_is_locked(l, &b));
  CHECK(!b);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_etcd_stop(e);
}

static void t_fencing(void) {
  /* the token is the key's create revision: it grows with every grant */
  th_etcd_t *e = cluster(3);
  dlock_client_t *a = client(th_etcd_url(e)), *b = client(th_etcd_url(e));
  dlock_lock_t *la = lock_kind(a, "fence", DLOCK_FENCED);
  dlock_lock_t *lb = lock_kind(b, "fence", DLOCK_FENCED);
  int64_t prev = 0;
  for (int i = 0; i < 4; i++) {
    dlock_lock_t *l = i % 2 ? lb : la;
    int64_t t = 0, t2 = 0;
    CHECK_OK(dlock_lock_acquire_fenced(l, WAIT_MS, DLOCK_LEASE_WATCHDOG, &t));
    CHECK_INT(t, >, prev);
    CHECK_INT(state_token(l), ==, t);
    /* reentry keeps the token */
    CHECK_OK(dlock_lock_acquire_fenced(l, 0, DLOCK_LEASE_WATCHDOG, &t2));
    CHECK_INT(t2, ==, t);
    CHECK_OK(dlock_lock_release(l));
    CHECK_OK(dlock_lock_release(l));
    prev = t;
  }
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_etcd_stop(e);
}

static const check_case_t cases[] = {
    {"basic", t_basic},
    {"try_refused", t_try_refused},
    {"waiter_woken", t_waiter_woken},
    {"threads_one_client", t_threads_one_client},
    {"fencing", t_fencing},
};

int main(int argc, char **argv) {
  g_exe = argv[0];
  return check_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
