/*
 * async-bench.c - the async API against the blocking one, on one private
 * server in one run (docs/ASYNC.md "Cost"): redis-server, or the backend
 * that $TH_BACKEND names (zookeeper, etcd, postgres, mysql: started by the
 * test harness, tests/harness/backends.h):
 *   - pairs/s: uncontended acquire (wait 0, watchdog) + release pairs, by
 *     8 threads of the blocking API (each on its own name) and by one
 *     program thread of the async API keeping IN_FLIGHT chains going
 *     (each chain on its own name: its release's callback starts its next
 *     acquire), driven by poll() on the completion descriptor and
 *     dlock_client_process(); rounds alternate (blocking, async,
 *     blocking, ...) so drift of a shared machine falls on both, and the
 *     median round of each is printed with their ratio; then the same
 *     with one pair at a time (1 blocking thread, 1 async chain): the
 *     latency a blocking call would have if it waited on the async
 *     operation (the reply read by the loop, then passed on);
 *   - waiters: W async waiters on one loop thread, on N names that another
 *     client holds: the client's heap (mallinfo2) and resident memory per
 *     waiter once every waiter is queued on the server, then the time
 *     from the holders' release until every waiter has been granted and
 *     has released (Redis only: it counts the queues in Redis's layout).
 *
 *   async-bench [SECONDS [ROUNDS [WAITERS [THREADS]]]]
 *       (default 2 3 10000 8: THREADS is the async pool's size)
 */
#define _GNU_SOURCE 1

#include <dlock/dlock.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends.h"
#include "harness.h"

#define BLOCKING_THREADS 8
#define IN_FLIGHT 64
#define NAMES 100

static const char *g_url;
static int g_async_threads = 8;
/* operations of the pairs rounds that failed: a round with failures
 * measured fewer chains than it says, so the run fails */
static atomic_long g_failed;

static dlock_client_t *client(void) {
  dlock_options_t *o = NULL;
  dlock_client_t *c = NULL;
  if (dlock_options_new(&o) ||
      dlock_options_set_async_threads(o, g_async_threads) ||
      dlock_client_new(&c, g_url, o)) {
    fprintf(stderr, "client: %s\n", dlock_last_error());
    exit(1);
  }
  dlock_options_free(o);
  return c;
}

/* ------------------------------------------------------- blocking pairs */

typedef struct bthread {
  dlock_client_t *c;
  int i;
  int64_t end;
  long pairs;
  pthread_t th;
} bthread_t;

static void *blocking_main(void *arg) {
  bthread_t *t = arg;
  char name[32];
  snprintf(name, sizeof name, "bench-b-%d", t->i);
  dlock_lock_t *l = NULL;
  if (dlock_lock_new(t->c, name, &l))
    return NULL;
  while (th_now_ms() < t->end) {
    if (dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG) ||
        dlock_lock_release(l)) {
      fprintf(stderr, "blocking pair: %s\n", dlock_last_error());
      g_failed++;
      break;
    }
    t->pairs++;
  }
  dlock_lock_free(l);
  return NULL;
}

static double round_blocking(dlock_client_t *c, int seconds, int nthreads) {
  bthread_t t[BLOCKING_THREADS];
  int64_t t0 = th_now_ms(), end = t0 + seconds * 1000;
  for (int i = 0; i < nthreads; i++) {
    t[i] = (bthread_t){.c = c, .i = i, .end = end};
    pthread_create(&t[i].th, NULL, blocking_main, &t[i]);
  }
  long pairs = 0;
  for (int i = 0; i < nthreads; i++) {
    pthread_join(t[i].th, NULL);
    pairs += t[i].pairs;
  }
  return pairs * 1000.0 / (double)(th_now_ms() - t0);
}

/* ---------------------------------------------------------- async pairs */

typedef struct chain {
  dlock_lock_t *l;
  uint64_t tid;
  int64_t end;
  long *pairs;
  int *live;
} chain_t;

static void chain_acquired(void *ud, int rc, int64_t value);

static void chain_next(chain_t *ch) {
  if (th_now_ms() >= ch->end) {
    (*ch->live)--;
    return;
  }
  if (dlock_lock_acquire_async(ch->l, ch->tid, 0, DLOCK_LEASE_WATCHDOG,
                               chain_acquired, ch, NULL)) {
    fprintf(stderr, "acquire_async: %s\n", dlock_last_error());
    g_failed++;
    (*ch->live)--;
  }
}

static void chain_released(void *ud, int rc, int64_t value) {
  chain_t *ch = ud;
  (void)value;
  if (rc) {
    fprintf(stderr, "async release: %s\n", dlock_last_error());
    g_failed++;
    (*ch->live)--;
    return;
  }
  (*ch->pairs)++;
  chain_next(ch);
}

static void chain_acquired(void *ud, int rc, int64_t value) {
  chain_t *ch = ud;
  (void)value;
  if (rc ||
      dlock_lock_release_async(ch->l, ch->tid, chain_released, ch, NULL)) {
    fprintf(stderr, "async acquire: %s\n", dlock_last_error());
    g_failed++;
    (*ch->live)--;
  }
}

/* Runs callbacks until *live drops to 0 (bounded by deadline). */
static void drive(dlock_client_t *c, int *live, int64_t deadline) {
  int fd = -1;
  dlock_client_fd(c, &fd);
  while (*live > 0 && th_now_ms() < deadline) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 100) > 0)
      dlock_client_process(c);
  }
}

static double round_async(dlock_client_t *c, int seconds, int inflight) {
  static dlock_lock_t *locks[IN_FLIGHT];
  static chain_t ch[IN_FLIGHT];
  if (!locks[0])
    for (int i = 0; i < IN_FLIGHT; i++) {
      char name[32];
      snprintf(name, sizeof name, "bench-a-%d", i);
      if (dlock_lock_new(c, name, &locks[i]))
        exit(1);
    }
  long pairs = 0;
  int live = inflight;
  int64_t t0 = th_now_ms(), end = t0 + seconds * 1000;
  for (int i = 0; i < inflight; i++) {
    ch[i] = (chain_t){.l = locks[i],
                      .tid = 5000 + (uint64_t)i,
                      .end = end,
                      .pairs = &pairs,
                      .live = &live};
    chain_next(&ch[i]);
  }
  drive(c, &live, end + 30000);
  return pairs * 1000.0 / (double)(th_now_ms() - t0);
}

/* -------------------------------------------------------------- waiters */

typedef struct crowd {
  int granted, released, failed;
} crowd_t;

typedef struct waiter {
  crowd_t *k;
  dlock_lock_t *l;
  uint64_t tid;
} waiter_t;

static void waiter_released(void *ud, int rc, int64_t value) {
  waiter_t *w = ud;
  (void)value;
  if (rc)
    w->k->failed++;
  else
    w->k->released++;
}

static void waiter_acquired(void *ud, int rc, int64_t value) {
  waiter_t *w = ud;
  (void)value;
  if (rc) {
    fprintf(stderr, "waiter: %s\n", dlock_last_error());
    w->k->failed++;
    return;
  }
  w->k->granted++;
  if (dlock_lock_release_async(w->l, w->tid, waiter_released, w, NULL))
    w->k->failed++;
}

static long rss_kib(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, rss = 0;
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
      rss = 0;
    fclose(f);
  }
  return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

static void waiters(th_server_t *s, int n) {
  dlock_client_t *holder = client();
  dlock_client_t *c = client();
  dlock_lock_t *hl[NAMES], *wl[NAMES];
  for (int i = 0; i < NAMES; i++) {
    char name[32];
    snprintf(name, sizeof name, "bench-w-%d", i);
    if (dlock_lock_new(holder, name, &hl[i]) ||
        dlock_lock_new(c, name, &wl[i]) ||
        dlock_lock_acquire_as(hl[i], 1, 0, DLOCK_LEASE_WATCHDOG)) {
      fprintf(stderr, "holder: %s\n", dlock_last_error());
      exit(1);
    }
  }
  waiter_t *w = calloc((size_t)n, sizeof *w);
  crowd_t k = {0};
  /* the client's first async call makes its pool: count from after it */
  int fd = -1;
  dlock_client_fd(c, &fd);
  struct mallinfo2 m0 = mallinfo2();
  long rss0 = rss_kib();
  int64_t t0 = th_now_ms();
  for (int i = 0; i < n; i++) {
    w[i] = (waiter_t){.k = &k, .l = wl[i % NAMES], .tid = 100000 + (uint64_t)i};
    if (dlock_lock_acquire_async(w[i].l, w[i].tid, 120000, DLOCK_LEASE_WATCHDOG,
                                 waiter_acquired, &w[i], NULL)) {
      fprintf(stderr, "acquire_async: %s\n", dlock_last_error());
      exit(1);
    }
  }
  int64_t started = th_now_ms() - t0;
  /* every waiter queued on the server: the queues' lengths (Redisson's
   * layout: redisson_lock_queue:{NAME}) add up to n, or 60 s passed */
  long queued = 0;
  int64_t deadline = th_now_ms() + 60000;
  while (th_now_ms() < deadline) {
    queued = 0;
    for (int i = 0; i < NAMES; i++) {
      char key[64];
      snprintf(key, sizeof key, "dlock_lock_queue:{bench-w-%d}", i);
      queued += th_redis_int(s, "ZCARD %s", key);
    }
    if (queued >= n)
      break;
    usleep(100 * 1000);
  }
  int64_t parked = th_now_ms() - t0;
  struct mallinfo2 m1 = mallinfo2();
  long rss1 = rss_kib();
  printf("waiters: %d on %d names started in %lld ms, %ld queued on the "
         "server after %lld ms; client heap %.0f bytes/waiter, RSS %.0f "
         "bytes/waiter\n",
         n, NAMES, (long long)started, queued, (long long)parked,
         (double)(m1.uordblks - m0.uordblks) / n,
         (double)(rss1 - rss0) * 1024.0 / n);
  int64_t r0 = th_now_ms();
  for (int i = 0; i < NAMES; i++)
    dlock_lock_release_as(hl[i], 1);
  int live = 1;
  deadline = th_now_ms() + 300000;
  while (k.released + k.failed < n && th_now_ms() < deadline) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 100) > 0)
      dlock_client_process(c);
  }
  (void)live;
  int64_t ms = th_now_ms() - r0;
  printf("waiters: %d granted and released %d (%d failed) in %lld ms after "
         "the holders' release: %.0f hand-offs/s\n",
         k.granted, k.released, k.failed, (long long)ms,
         ms > 0 ? k.released * 1000.0 / (double)ms : 0.0);
  for (int i = 0; i < NAMES; i++) {
    dlock_lock_free(hl[i]);
    dlock_lock_free(wl[i]);
  }
  dlock_client_free(c);
  dlock_client_free(holder);
  free(w);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int seconds = argc > 1 ? atoi(argv[1]) : 2;
  int rounds = argc > 2 ? atoi(argv[2]) : 3;
  int nwaiters = argc > 3 ? atoi(argv[3]) : 10000;
  if (argc > 4)
    g_async_threads = atoi(argv[4]);
  if (seconds < 1 || seconds > 60 || rounds < 1 || rounds > 15 ||
      nwaiters < 0 || nwaiters > 100000 || g_async_threads < 1 ||
      g_async_threads > 64) {
    fprintf(stderr, "usage: async-bench [SECONDS 1..60 [ROUNDS 1..15 "
                    "[WAITERS 0..100000 [THREADS 1..64]]]]\n");
    return 2;
  }
  const char *which = getenv("TH_BACKEND");
  bool redis = !which || !*which || strcmp(which, "redis") == 0;
  th_server_t *s = NULL;
  th_backend_t *other = NULL;
  char url[64];
  if (redis) {
    const char *extra[] = {"maxclients 20000", NULL};
    if (!(s = th_server_start(extra)))
      return 1;
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", s->port);
    g_url = url;
  } else {
    if (!(other = th_backend_start()))
      return 1;
    g_url = th_backend_url(other);
  }
  printf("backend %s at %s\n", redis ? "redis" : th_backend_name(other), g_url);
  dlock_client_t *c = client();
  double b[15], a[15], b1[15], a1[15];
  for (int r = 0; r < rounds; r++) {
    b[r] = round_blocking(c, seconds, BLOCKING_THREADS);
    a[r] = round_async(c, seconds, IN_FLIGHT);
    b1[r] = round_blocking(c, seconds, 1);
    a1[r] = round_async(c, seconds, 1);
    printf("round %d: blocking %d threads %.0f pairs/s, async 1 thread "
           "(%d in flight, %d pool threads) %.0f pairs/s; one at a time: "
           "blocking %.0f, async %.0f\n",
           r + 1, BLOCKING_THREADS, b[r], IN_FLIGHT, g_async_threads, a[r],
           b1[r], a1[r]);
  }
  qsort(b, (size_t)rounds, sizeof b[0], cmp_double);
  qsort(a, (size_t)rounds, sizeof a[0], cmp_double);
  qsort(b1, (size_t)rounds, sizeof b1[0], cmp_double);
  qsort(a1, (size_t)rounds, sizeof a1[0], cmp_double);
  printf("median: blocking %.0f pairs/s, async %.0f pairs/s, async/blocking "
         "%.2f\n",
         b[rounds / 2], a[rounds / 2], a[rounds / 2] / b[rounds / 2]);
  /* one pair at a time: what a blocking call made as a wait on the async
   * operation would cost at best (its reply read by the loop, its
   * completion passed to the caller's thread) against the blocking call
   * that reads its own reply */
  printf("median, one at a time: blocking 1 thread %.0f pairs/s, async 1 in "
         "flight %.0f pairs/s, async/blocking %.2f\n",
         b1[rounds / 2], a1[rounds / 2], a1[rounds / 2] / b1[rounds / 2]);
  dlock_client_free(c);
  if (nwaiters > 0 && redis)
    waiters(s, nwaiters);
  else if (nwaiters > 0)
    printf("waiters: measured on redis only (it counts Redis's queues)\n");
  th_server_stop(s);
  th_backend_stop(other);
  if (g_failed)
    fprintf(stderr,
            "async-bench: %ld operations of the pairs rounds failed: "
            "their figures are not valid\n",
            (long)g_failed);
  return g_failed ? 1 : 0;
}
