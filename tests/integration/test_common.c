/*
 * test_common.c - the lock tests every backend must pass, by URL.
 *
 * Design note: these cases use the public API only, against the backend
 * of the run (tests/harness/backends.h: TH_BACKEND=redis|zookeeper|etcd),
 * and assert what a user observes: who gets the lock, in what order, what
 * a second process sees, which code a refused call returns. ctest runs
 * each case once per backend the build has (test_common.BACKEND.CASE).
 * A backend that does not offer a kind must refuse its handle with
 * DLOCK_ENOTSUP naming itself; the `offers` table says which kinds each
 * backend offers, so that a case of a missing kind checks that refusal
 * instead of passing silently, and whether it refuses names in dlock's own
 * key space ("dlock_lock_": the Redis backends, whose keys share the
 * server's one key space with the locks').
 *
 * Exclusion across processes re-executes this binary as
 * `test_common --child URL NAME ITERS FILE`: each child makes its own
 * client and increments a counter in FILE with a read, a sched_yield() and
 * a write while holding the lock; any overlap of two holders loses an
 * increment.
 *
 * Every wait is bounded; the parent reaps its children with a bounded
 * poll and kills them (by PID) if they overrun.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "backends.h"
#include "check.h"
#include "harness.h"

#include <dlock/dlock.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Short enough that a crashed holder's lock comes back within a test,
 * long enough for a loaded machine: the watchdog (Redis) and the session
 * (ZooKeeper session, etcd lease). */
#define LEASE_MS 3000
#define WAIT_MS 30000

static th_backend_t *g_backend;

/* ------------------------------------------------------------ backends */

typedef struct offers {
  const char *backend;
  unsigned lock_kinds; /* bit per dlock_lock_kind_t */
  bool reserves;       /* names beginning with "dlock_lock_" are refused */
} offers_t;

#define K(k) (1u << (k))
static const offers_t offers[] = {
    {.backend = "redis",
     .lock_kinds = K(DLOCK_REENTRANT) | K(DLOCK_FAIR) | K(DLOCK_FENCED) |
                   K(DLOCK_READ) | K(DLOCK_WRITE),
     .reserves = true},
    {.backend = "redis-cluster",
     .lock_kinds = K(DLOCK_REENTRANT) | K(DLOCK_FAIR) | K(DLOCK_FENCED) |
                   K(DLOCK_READ) | K(DLOCK_WRITE),
     .reserves = true},
    {.backend = "sentinel",
     .lock_kinds = K(DLOCK_REENTRANT) | K(DLOCK_FAIR) | K(DLOCK_FENCED) |
                   K(DLOCK_READ) | K(DLOCK_WRITE),
     .reserves = true},
    {.backend = "zookeeper",
     .lock_kinds = K(DLOCK_REENTRANT) | K(DLOCK_FAIR) | K(DLOCK_FENCED) |
                   K(DLOCK_READ) | K(DLOCK_WRITE)},
    {.backend = "etcd",
     .lock_kinds = K(DLOCK_REENTRANT) | K(DLOCK_FAIR) | K(DLOCK_FENCED) |
                   K(DLOCK_READ) | K(DLOCK_WRITE)},
    {.backend = "postgres",
     .lock_kinds =
         K(DLOCK_REENTRANT) | K(DLOCK_FENCED) | K(DLOCK_READ) | K(DLOCK_WRITE)},
    {.backend = "mysql", .lock_kinds = K(DLOCK_REENTRANT) | K(DLOCK_FENCED)},
};

static const offers_t *offered(void) {
  for (size_t i = 0; i < sizeof offers / sizeof offers[0]; i++)
    if (strcmp(offers[i].backend, th_backend_name(g_backend)) == 0)
      return &offers[i];
  static const offers_t none = {0};
  return &none;
}

static unsigned offered_kinds(void) { return offered()->lock_kinds; }

static const char *kind_name(dlock_lock_kind_t k) {
  switch (k) {
  case DLOCK_REENTRANT:
    return "reentrant";
  case DLOCK_FAIR:
    return "fair";
  case DLOCK_FENCED:
    return "fenced";
  case DLOCK_READ:
    return "read";
  case DLOCK_WRITE:
    return "write";
  }
  return "?";
}

static void start(void) {
  g_backend = th_backend_start();
  CHECKF(g_backend != NULL, "the backend did not start");
  printf("backend %s at %s\n", th_backend_name(g_backend),
         th_backend_url(g_backend));
}

static void stop(void) {
  th_backend_stop(g_backend);
  g_backend = NULL;
}

static dlock_client_t *client_for(const char *url, dlock_lost_fn lost,
                                  void *ud) {
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 5000));
  CHECK_OK(dlock_options_set_command_timeout(o, 5000));
  CHECK_OK(dlock_options_set_watchdog_timeout(o, LEASE_MS));
  CHECK_OK(dlock_options_set_session_timeout(o, LEASE_MS));
  if (lost)
    CHECK_OK(dlock_options_set_lost_callback(o, lost, ud));
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new(&c, url, o));
  dlock_options_free(o);
  return c;
}

static dlock_client_t *client(void) {
  return client_for(th_backend_url(g_backend), NULL, NULL);
}

/* A handle of `kind`, or NULL after checking the backend's refusal when it
 * does not offer that kind (the case then has nothing more to test). */
static dlock_lock_t *handle(dlock_client_t *c, const char *name,
                            dlock_lock_kind_t kind) {
  dlock_lock_t *l = NULL;
  int rc = dlock_lock_new_kind(c, name, kind, &l);
  if (offered_kinds() & K(kind)) {
    CHECK_OK(rc);
    return l;
  }
  CHECK_RC(rc, DLOCK_ENOTSUP);
  CHECK(l == NULL);
  CHECKF(strstr(dlock_last_error(), th_backend_name(g_backend)) != NULL,
         "the refusal does not name the backend: %s", dlock_last_error());
  printf("%s offers no %s lock: DLOCK_ENOTSUP (%s)\n",
         th_backend_name(g_backend), kind_name(kind), dlock_last_error());
  return NULL;
}

/* ------------------------------------------------- a thread that acquires */

typedef struct acquirer {
  dlock_lock_t *lock;
  int64_t wait_ms;
  bool fenced;
  /* out */
  atomic_int rc;
  atomic_bool done;
  int64_t token;
  int64_t done_at;
  /* the acquirer holds until told, then releases (locks are per thread) */
  atomic_bool release;
  atomic_int release_rc;
  atomic_bool released;
  /* a shared ticket: the order in which acquirers got the lock */
  atomic_int *order;
  int my_order;
  pthread_t th;
} acquirer_t;

static void *acquirer_main(void *arg) {
  acquirer_t *a = arg;
  int rc;
  if (a->fenced)
    rc = dlock_lock_acquire_fenced(a->lock, a->wait_ms, DLOCK_LEASE_WATCHDOG,
                                   &a->token);
  else
    rc = dlock_lock_acquire(a->lock, a->wait_ms, DLOCK_LEASE_WATCHDOG);
  if (rc == 0 && a->order)
    a->my_order = atomic_fetch_add(a->order, 1);
  a->done_at = th_now_ms();
  atomic_store(&a->rc, rc);
  atomic_store(&a->done, true);
  if (rc != 0)
    return NULL;
  bool told;
  TH_WAIT_FOR(told, atomic_load(&a->release), 60000);
  (void)told;
  atomic_store(&a->release_rc, dlock_lock_release(a->lock));
  atomic_store(&a->released, true);
  return NULL;
}

static void acquirer_start(acquirer_t *a, dlock_lock_t *l, int64_t wait_ms) {
  a->lock = l;
  a->wait_ms = wait_ms;
  atomic_store(&a->rc, 1);
  CHECK(pthread_create(&a->th, NULL, acquirer_main, a) == 0);
}

static bool acquirer_wait(acquirer_t *a, int64_t timeout_ms) {
  bool ok;
  TH_WAIT_FOR(ok, atomic_load(&a->done), timeout_ms);
  return ok;
}

/* Tells a holder to release, and joins it. */
static void acquirer_finish(acquirer_t *a) {
  atomic_store(&a->release, true);
  pthread_join(a->th, NULL);
}

/* Waits until the lock's state shows `n` waiters (the observable sign that
 * they queue in that order). */
static bool waiters_at_least(dlock_lock_t *l, size_t n, int64_t timeout_ms) {
  bool ok = false;
  int64_t until = th_now_ms() + timeout_ms;
  while (!ok && th_now_ms() < until) {
    dlock_lock_state_t *st = NULL;
    if (dlock_lock_state(l, &st) == 0) {
      ok = st->nwaiters >= n;
      dlock_lock_state_free(st);
    }
    if (!ok)
      th_sleep_ms(10);
  }
  return ok;
}

/* ------------------------------------------------------- the cases */

/* The same thread re-enters and counts; others see it held until the last
 * release; one more release is refused. */
/* dlock_lock_hold_valid, by the client's own clock: a hold just granted is
 * vouched for at most its lease (the watchdog's, or the session's on a
 * backend whose holds live with their session) and more than nothing; a
 * released one belongs to nobody. */
static void t_hold_valid(void) {
  start();
  dlock_client_t *a = client();
  dlock_lock_t *la = handle(a, "common-valid", DLOCK_REENTRANT);
  uint64_t me = dlock_thread_id();
  int64_t v = -1;
  CHECK_RC(dlock_lock_hold_valid(la, me, &v), DLOCK_ENOTOWNER);
  CHECK_OK(dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_hold_valid(la, me, &v));
  printf("vouched for %lld ms of a %d ms lease\n", (long long)v, LEASE_MS);
  CHECK_INT(v, >, 0);
  CHECK_INT(v, <=, LEASE_MS);
  CHECK_OK(dlock_lock_release(la));
  CHECK_RC(dlock_lock_hold_valid(la, me, &v), DLOCK_ENOTOWNER);
  dlock_lock_free(la);
  dlock_client_free(a);
  stop();
}

static void t_reentrant_counts(void) {
  start();
  dlock_client_t *a = client(), *b = client();
  dlock_lock_t *la = handle(a, "common-reentrant", DLOCK_REENTRANT);
  dlock_lock_t *lb = handle(b, "common-reentrant", DLOCK_REENTRANT);
  CHECK_OK(dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG));
  int64_t n = -1;
  CHECK_OK(dlock_lock_hold_count(la, &n));
  CHECK_INT(n, ==, 2);
  bool locked = false, mine = true;
  CHECK_OK(dlock_lock_is_locked(lb, &locked));
  CHECK(locked);
  CHECK_OK(dlock_lock_is_held_by_thread(lb, &mine));
  CHECK(!mine); /* another client's thread */
  CHECK_RC(dlock_lock_acquire(lb, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  CHECK_OK(dlock_lock_release(la));
  CHECK_OK(dlock_lock_hold_count(la, &n));
  CHECK_INT(n, ==, 1);
  CHECK_RC(dlock_lock_acquire(lb, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  CHECK_OK(dlock_lock_release(la));
  CHECK_OK(dlock_lock_is_locked(lb, &locked));
  CHECK(!locked);
  CHECK_RC(dlock_lock_release(la), DLOCK_ENOTOWNER);
  CHECK_OK(dlock_lock_acquire(lb, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(lb));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  stop();
}

/* A lock is per thread: another thread of the same client neither enters
 * nor releases it. */
static void *other_thread_main(void *arg) {
  dlock_lock_t *l = arg;
  int *rcs = calloc(2, sizeof *rcs);
  rcs[0] = dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG);
  rcs[1] = dlock_lock_release(l);
  return rcs;
}

static void t_owned_per_thread(void) {
  start();
  dlock_client_t *c = client();
  dlock_lock_t *l = handle(c, "common-per-thread", DLOCK_REENTRANT);
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  pthread_t th;
  CHECK(pthread_create(&th, NULL, other_thread_main, l) == 0);
  int *rcs = NULL;
  pthread_join(th, (void **)&rcs);
  CHECK(rcs);
  CHECK_RC(rcs[0], DLOCK_EBUSY);
  CHECK_RC(rcs[1], DLOCK_ENOTOWNER);
  free(rcs);
  bool mine = false;
  CHECK_OK(dlock_lock_is_held_by_thread(l, &mine));
  CHECK(mine);
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  stop();
}

static void count_lost(void *ud, const char *name, uint64_t tid,
                       dlock_lost_reason_t reason) {
  (void)name, (void)tid, (void)reason;
  atomic_fetch_add((atomic_int *)ud, 1);
}

/* A bounded wait on a held lock gives up with DLOCK_ETIMEDOUT, no sooner
 * than asked. Should the holder's lease or session run out meanwhile (a
 * server or client starved of CPU for longer than LEASE_MS: seen once on
 * ZooKeeper under ASan on a machine with a load of 12), the waiter may be
 * granted, but only after the holder was told: the round is then not
 * about waiting, and runs again (at most 3 times). */
static void t_wait_times_out(void) {
  start();
  atomic_int lost_a = 0;
  dlock_client_t *a =
      client_for(th_backend_url(g_backend), count_lost, &lost_a);
  dlock_client_t *b = client();
  dlock_lock_t *la = handle(a, "common-timeout", DLOCK_REENTRANT);
  dlock_lock_t *lb = handle(b, "common-timeout", DLOCK_REENTRANT);
  int rc = DLOCK_OK;
  for (int round = 0; round < 3; round++) {
    atomic_store(&lost_a, 0);
    CHECK_OK(dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG));
    int64_t t0 = th_now_ms();
    rc = dlock_lock_acquire(lb, 400, DLOCK_LEASE_WATCHDOG);
    if (rc == DLOCK_ETIMEDOUT) {
      CHECK_INT(th_now_ms() - t0, >=, 400);
      break;
    }
    CHECK_RC(rc, DLOCK_OK);
    CHECKF(atomic_load(&lost_a) > 0,
           "round %d: the waiter was granted while the holder had not "
           "been told of a loss",
           round);
    printf("round %d: the holder's hold was lost (told) during the wait; "
           "again\n",
           round);
    CHECK_OK(dlock_lock_release(lb));
    CHECK_RC(dlock_lock_release(la), DLOCK_ELOST);
  }
  CHECK_RC(rc, DLOCK_ETIMEDOUT);
  /* the refused waiter left nothing behind: the holder's release frees
   * the lock for anyone */
  CHECK_OK(dlock_lock_release(la));
  CHECK_OK(dlock_lock_acquire(lb, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(lb));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  stop();
}

/* A waiter in another client is woken by the release, long before the
 * holder's lease or session could have run out: it does not poll. */
static void woken_by_release(dlock_lock_kind_t kind) {
  start();
  dlock_client_t *a = client(), *b = client();
  dlock_lock_t *la = handle(a, "common-wake", kind);
  if (!la) {
    dlock_client_free(a);
    dlock_client_free(b);
    stop();
    return;
  }
  dlock_lock_t *lb = handle(b, "common-wake", kind);
  CHECK_OK(dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG));
  acquirer_t w = {0};
  acquirer_start(&w, lb, WAIT_MS);
  CHECKF(waiters_at_least(la, 1, 10000), "the waiter never showed waiting");
  CHECK(!atomic_load(&w.done));
  int64_t released_at = th_now_ms();
  CHECK_OK(dlock_lock_release(la));
  CHECKF(acquirer_wait(&w, WAIT_MS), "the waiter was never woken");
  CHECK_OK(atomic_load(&w.rc));
  /* the holder's watchdog would have kept it for ever, and a poll-free
   * waiter has no reason to wait past the release: anything near the
   * wait's end means it was not woken */
  CHECKF(w.done_at - released_at < WAIT_MS / 3,
         "woken %lld ms after the release",
         (long long)(w.done_at - released_at));
  printf("woken %lld ms after the release\n",
         (long long)(w.done_at - released_at));
  acquirer_finish(&w);
  CHECK_OK(atomic_load(&w.release_rc));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  stop();
}

static void t_woken_by_release(void) { woken_by_release(DLOCK_REENTRANT); }
static void t_fair_woken_by_release(void) { woken_by_release(DLOCK_FAIR); }

/* Three waiters that queued one after another get the lock in that order. */
static void t_queue_order(void) {
  start();
  enum { N = 3 };
  dlock_client_t *h = client();
  dlock_lock_t *lh = handle(h, "common-order", DLOCK_FAIR);
  if (!lh) {
    dlock_client_free(h);
    stop();
    return;
  }
  CHECK_OK(dlock_lock_acquire(lh, 0, DLOCK_LEASE_WATCHDOG));
  dlock_client_t *c[N];
  dlock_lock_t *l[N];
  acquirer_t w[N];
  atomic_int order = 0;
  memset(w, 0, sizeof w);
  for (int i = 0; i < N; i++) {
    c[i] = client();
    l[i] = handle(c[i], "common-order", DLOCK_FAIR);
    w[i].order = &order;
    acquirer_start(&w[i], l[i], WAIT_MS);
    CHECKF(waiters_at_least(lh, (size_t)i + 1, 10000),
           "waiter %d never showed in the queue", i);
  }
  CHECK_OK(dlock_lock_release(lh));
  for (int i = 0; i < N; i++) {
    CHECKF(acquirer_wait(&w[i], WAIT_MS), "waiter %d never got the lock", i);
    CHECK_OK(atomic_load(&w[i].rc));
    CHECK_INT(w[i].my_order, ==, i);
    for (int j = i + 1; j < N; j++)
      CHECK(!atomic_load(&w[j].done)); /* the others still wait */
    acquirer_finish(&w[i]);
    CHECK_OK(atomic_load(&w[i].release_rc));
  }
  for (int i = 0; i < N; i++) {
    dlock_lock_free(l[i]);
    dlock_client_free(c[i]);
  }
  dlock_lock_free(lh);
  dlock_client_free(h);
  stop();
}

/* Fencing tokens grow with every grant, whichever client gets it. */
static void t_fencing_tokens_grow(void) {
  start();
  dlock_client_t *a = client(), *b = client();
  dlock_lock_t *la = handle(a, "common-fenced", DLOCK_FENCED);
  if (!la) {
    dlock_client_free(a);
    dlock_client_free(b);
    stop();
    return;
  }
  dlock_lock_t *lb = handle(b, "common-fenced", DLOCK_FENCED);
  int64_t last = 0;
  for (int i = 0; i < 6; i++) {
    dlock_lock_t *l = i % 2 ? lb : la;
    int64_t token = 0;
    CHECK_OK(
        dlock_lock_acquire_fenced(l, WAIT_MS, DLOCK_LEASE_WATCHDOG, &token));
    CHECKF(token > last, "grant %d: token %lld after %lld", i, (long long)token,
           (long long)last);
    last = token;
    CHECK_OK(dlock_lock_release(l));
  }
  /* a handed-over lock carries a greater token too */
  int64_t held = 0;
  CHECK_OK(dlock_lock_acquire_fenced(la, 0, DLOCK_LEASE_WATCHDOG, &held));
  acquirer_t w = {0};
  w.fenced = true;
  acquirer_start(&w, lb, WAIT_MS);
  CHECKF(waiters_at_least(la, 1, 10000), "the waiter never showed waiting");
  CHECK_OK(dlock_lock_release(la));
  CHECK(acquirer_wait(&w, WAIT_MS));
  CHECK_OK(atomic_load(&w.rc));
  CHECKF(w.token > held, "handed over with token %lld after %lld",
         (long long)w.token, (long long)held);
  acquirer_finish(&w);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  stop();
}

/* Readers share; a writer excludes readers and writers. */
static void t_read_write(void) {
  start();
  dlock_client_t *a = client(), *b = client();
  dlock_lock_t *ra = handle(a, "common-rw", DLOCK_READ);
  dlock_lock_t *wa = handle(a, "common-rw", DLOCK_WRITE);
  if (!ra || !wa) {
    dlock_lock_free(ra);
    dlock_lock_free(wa);
    dlock_client_free(a);
    dlock_client_free(b);
    stop();
    return;
  }
  dlock_lock_t *rb = handle(b, "common-rw", DLOCK_READ);
  dlock_lock_t *wb = handle(b, "common-rw", DLOCK_WRITE);
  CHECK_OK(dlock_lock_acquire(ra, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_acquire(rb, 0, DLOCK_LEASE_WATCHDOG)); /* shared */
  /* no upgrade: a reader asking for the write side */
  CHECK_RC(dlock_lock_acquire(wa, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EDEADLK);
  CHECK_OK(dlock_lock_release(rb));
  /* a's read hold keeps b's writer out */
  CHECK_RC(dlock_lock_acquire(wb, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  CHECK_OK(dlock_lock_release(ra));
  CHECK_OK(dlock_lock_acquire(wb, 0, DLOCK_LEASE_WATCHDOG));
  /* the writer keeps other readers and writers out */
  CHECK_RC(dlock_lock_acquire(ra, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  CHECK_RC(dlock_lock_acquire(wa, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  /* a waiting reader is let in by the write release */
  acquirer_t w = {0};
  acquirer_start(&w, ra, WAIT_MS);
  CHECK_OK(dlock_lock_release(wb));
  CHECK(acquirer_wait(&w, WAIT_MS));
  CHECK_OK(atomic_load(&w.rc));
  acquirer_finish(&w);
  CHECK_OK(atomic_load(&w.release_rc));
  dlock_lock_free(ra);
  dlock_lock_free(wa);
  dlock_lock_free(rb);
  dlock_lock_free(wb);
  dlock_client_free(a);
  dlock_client_free(b);
  stop();
}

/* Kinds the backend does not offer are refused with DLOCK_ENOTSUP naming
 * the backend; those it offers give a handle (checked by handle()). */
static void t_kinds_offered_or_refused(void) {
  start();
  dlock_client_t *c = client();
  for (int k = DLOCK_REENTRANT; k <= DLOCK_WRITE; k++)
    dlock_lock_free(handle(c, "common-kinds", (dlock_lock_kind_t)k));
  dlock_client_free(c);
  stop();
}

/* ----------------------------------------------- exclusion across processes */

static int child_main(const char *url, const char *name, int iters,
                      const char *file) {
  dlock_client_t *c = client_for(url, NULL, NULL);
  dlock_lock_t *l = NULL;
  CHECK_OK(dlock_lock_new(c, name, &l));
  int fd = open(file, O_RDWR);
  CHECK(fd >= 0);
  for (int i = 0; i < iters; i++) {
    CHECK_OK(dlock_lock_acquire(l, WAIT_MS, DLOCK_LEASE_WATCHDOG));
    char buf[32] = {0};
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    CHECK(n >= 0);
    long v = strtol(buf, NULL, 10);
    sched_yield();
    int w = snprintf(buf, sizeof buf, "%ld\n", v + 1);
    CHECK(pwrite(fd, buf, (size_t)w, 0) == w);
    CHECK_OK(dlock_lock_release(l));
  }
  close(fd);
  dlock_lock_free(l);
  dlock_client_free(c);
  return 0;
}

static void t_exclusion_processes(void) {
  enum { NPROC = 4, ITERS = 40 };
  start();
  char dir[] = "/tmp/dlock-common-XXXXXX";
  CHECK(mkdtemp(dir));
  char file[128];
  snprintf(file, sizeof file, "%s/counter", dir);
  int fd = open(file, O_CREAT | O_RDWR | O_TRUNC, 0600);
  CHECK(fd >= 0 && write(fd, "0\n", 2) == 2);
  close(fd);
  char exe[4096];
  ssize_t en = readlink("/proc/self/exe", exe, sizeof exe - 1);
  CHECK(en > 0);
  exe[en] = '\0';
  char iters[16];
  snprintf(iters, sizeof iters, "%d", ITERS);
  pid_t pids[NPROC];
  for (int i = 0; i < NPROC; i++) {
    pids[i] = fork();
    CHECK(pids[i] >= 0);
    if (pids[i] == 0) {
      execl(exe, exe, "--child", th_backend_url(g_backend), "common-exclusion",
            iters, file, (char *)NULL);
      _exit(127);
    }
  }
  int done = 0, failed = 0;
  int64_t until = th_now_ms() + 120000;
  while (done < NPROC && th_now_ms() < until) {
    for (int i = 0; i < NPROC; i++) {
      int st;
      if (pids[i] > 0 && waitpid(pids[i], &st, WNOHANG) == pids[i]) {
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
          failed++;
        pids[i] = 0;
        done++;
      }
    }
    th_sleep_ms(10);
  }
  for (int i = 0; i < NPROC; i++)
    if (pids[i] > 0) {
      kill(pids[i], SIGKILL);
      waitpid(pids[i], NULL, 0);
    }
  CHECKF(done == NPROC, "%d children still ran after 120 s", NPROC - done);
  CHECK_INT(failed, ==, 0);
  fd = open(file, O_RDONLY);
  char buf[32] = {0};
  CHECK(fd >= 0 && read(fd, buf, sizeof buf - 1) > 0);
  close(fd);
  CHECK_INT(strtol(buf, NULL, 10), ==, NPROC * ITERS);
  unlink(file);
  rmdir(dir);
  stop();
}

/* A holder that dies without releasing loses the lock when its lease or
 * session runs out, and a waiter then gets it. */
static void t_dead_holder_frees(void) {
  start();
  int fds[2];
  CHECK(pipe(fds) == 0);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    dlock_client_t *c = client();
    dlock_lock_t *l = NULL;
    if (dlock_lock_new(c, "common-dead", &l) ||
        dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG))
      _exit(1);
    char ok = 'h';
    if (write(fds[1], &ok, 1) != 1)
      _exit(1);
    pause(); /* until killed */
    _exit(0);
  }
  close(fds[1]);
  char got = 0;
  CHECK(read(fds[0], &got, 1) == 1 && got == 'h');
  close(fds[0]);
  dlock_client_t *b = client();
  dlock_lock_t *lb = handle(b, "common-dead", DLOCK_REENTRANT);
  CHECK_RC(dlock_lock_acquire(lb, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  CHECK(kill(pid, SIGKILL) == 0);
  CHECK(waitpid(pid, NULL, 0) == pid);
  int64_t t0 = th_now_ms();
  CHECK_OK(dlock_lock_acquire(lb, WAIT_MS, DLOCK_LEASE_WATCHDOG));
  printf("the dead holder's lock came free after %lld ms (lease/session "
         "%d ms)\n",
         (long long)(th_now_ms() - t0), LEASE_MS);
  CHECK_OK(dlock_lock_release(lb));
  dlock_lock_free(lb);
  dlock_client_free(b);
  stop();
}

/* An administrator's forced release frees a held lock; the holder's own
 * release then learns that it no longer held it. */
static void t_force_release(void) {
  start();
  dlock_client_t *a = client(), *b = client();
  dlock_lock_t *la = handle(a, "common-force", DLOCK_REENTRANT);
  dlock_lock_t *lb = handle(b, "common-force", DLOCK_REENTRANT);
  CHECK_OK(dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG));
  bool was = false;
  CHECK_OK(dlock_lock_force_release(lb, &was));
  CHECK(was);
  CHECK_OK(dlock_lock_acquire(lb, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_RC_IN(dlock_lock_release(la), DLOCK_ELOST, DLOCK_ENOTOWNER);
  CHECK_OK(dlock_lock_release(lb));
  CHECK_OK(dlock_lock_force_release(lb, &was));
  CHECK(!was);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  stop();
}

/* Bad names are refused before anything is sent, the same on every
 * backend; a name beginning with "dlock_lock_" only where it could be one
 * of dlock's own keys (Redis), elsewhere it is a lock like any other. */
static void t_bad_names(void) {
  start();
  dlock_client_t *c = client();
  dlock_lock_t *l = NULL;
  CHECK_RC(dlock_lock_new(c, "", &l), DLOCK_EINVAL);
  CHECK(l == NULL);
  char big[DLOCK_NAME_MAX + 2];
  memset(big, 'n', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  CHECK_RC(dlock_lock_new(c, big, &l), DLOCK_EINVAL);
  CHECK(l == NULL);
  CHECK_RC(dlock_lock_new(c, NULL, &l), DLOCK_EINVAL);
  const char *own = "dlock_lock_queue:{common}";
  if (offered()->reserves) {
    CHECK_RC(dlock_lock_new(c, own, &l), DLOCK_EINVAL);
    CHECK(l == NULL);
    CHECK(strstr(dlock_last_error(), "reserved for dlock's own keys"));
  } else {
    CHECK_OK(dlock_lock_new(c, own, &l));
    dlock_client_t *b = client();
    dlock_lock_t *lb = handle(b, own, DLOCK_REENTRANT);
    CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
    CHECK_RC(dlock_lock_acquire(lb, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
    CHECK_OK(dlock_lock_release(l));
    CHECK_OK(dlock_lock_acquire(lb, 0, DLOCK_LEASE_WATCHDOG));
    CHECK_OK(dlock_lock_release(lb));
    dlock_lock_free(lb);
    dlock_lock_free(l);
    dlock_client_free(b);
  }
  dlock_client_free(c);
  stop();
}

static const check_case_t cases[] = {
    {"reentrant_counts", t_reentrant_counts},
    {"hold_valid", t_hold_valid},
    {"owned_per_thread", t_owned_per_thread},
    {"wait_times_out", t_wait_times_out},
    {"woken_by_release", t_woken_by_release},
    {"fair_woken_by_release", t_fair_woken_by_release},
    {"queue_order", t_queue_order},
    {"fencing_tokens_grow", t_fencing_tokens_grow},
    {"read_write", t_read_write},
    {"kinds_offered_or_refused", t_kinds_offered_or_refused},
    {"exclusion_processes", t_exclusion_processes},
    {"dead_holder_frees", t_dead_holder_frees},
    {"force_release", t_force_release},
    {"bad_names", t_bad_names},
};

int main(int argc, char **argv) {
  if (argc == 6 && strcmp(argv[1], "--child") == 0)
    return child_main(argv[2], argv[3], atoi(argv[4]), argv[5]);
  return check_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
