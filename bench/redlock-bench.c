/*
 * redlock-bench.c - Redlock acquire+release latency over N Redis masters,
 * beside a one-server lock and a sequential baseline, in one process and
 * one run.
 *
 *   redlock-bench [--iters K] [--warmup W] URL1 URL2 ... URLn   (n odd)
 *
 * Cases, each K uncontended acquire+release pairs on one thread after W
 * warm-up pairs, interleaved in rounds of 100 so that machine noise falls
 * on every case alike:
 *   single      dlock_lock_acquire/release of a reentrant lock on URL1;
 *   redlock     the same on a Redlock client over every URL (all nodes at
 *               once, majority, validity);
 *   sequential  what Redisson's RedissonRedLock does: one one-server client
 *               per URL, the lock taken on each node one after another,
 *               then released one after another (no validity check).
 * Prints per case the median, p90, p99 and mean of one pair in
 * microseconds, and the ratios redlock/single and sequential/redlock (by
 * medians). Uses the public API only. Single threaded besides the
 * library's own threads.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <dlock/dlock.h>

#define MAXN DLOCK_REDLOCK_MAX_NODES
#define ROUND 100

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void die(const char *what, int rc) {
  fprintf(stderr, "redlock-bench: %s: %s (%s)\n", what, dlock_err_name(rc),
          dlock_last_error());
  exit(1);
}

typedef struct kase {
  const char *name;
  int64_t *ns;
  size_t n;
} kase_t;

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static double pct(const kase_t *k, double p) {
  size_t i = (size_t)(p * (double)(k->n - 1));
  return (double)k->ns[i] / 1000.0;
}

int main(int argc, char **argv) {
  int iters = 5000, warmup = 500, a = 1;
  for (; a < argc && strncmp(argv[a], "--", 2) == 0; a += 2) {
    if (a + 1 >= argc)
      break;
    if (strcmp(argv[a], "--iters") == 0)
      iters = atoi(argv[a + 1]);
    else if (strcmp(argv[a], "--warmup") == 0)
      warmup = atoi(argv[a + 1]);
  }
  int n = argc - a;
  if (n < 1 || n > MAXN || n % 2 == 0 || iters < ROUND) {
    fprintf(stderr, "usage: redlock-bench [--iters K>=%d] [--warmup W] URL1 "
                    "... URLn (n odd, <= %d)\n",
            ROUND, MAXN);
    return 64;
  }
  const char *const *urls = (const char *const *)&argv[a];
  dlock_options_t *o = NULL;
  dlock_options_new(&o);
  dlock_client_t *single = NULL, *rl = NULL, *seq[MAXN];
  int rc;
  if ((rc = dlock_client_new(&single, urls[0], o)))
    die("single client", rc);
  if ((rc = dlock_client_new_redlock(&rl, urls, (size_t)n, o)))
    die("redlock client", rc);
  for (int i = 0; i < n; i++)
    if ((rc = dlock_client_new(&seq[i], urls[i], o)))
      die("sequential client", rc);
  dlock_options_free(o);
  dlock_lock_t *ls = NULL, *lr = NULL, *lq[MAXN];
  if ((rc = dlock_lock_new(single, "bench-single", &ls)) ||
      (rc = dlock_lock_new(rl, "bench-redlock", &lr)))
    die("lock", rc);
  for (int i = 0; i < n; i++)
    if ((rc = dlock_lock_new(seq[i], "bench-sequential", &lq[i])))
      die("lock", rc);

  kase_t k[3] = {{"single", NULL, 0}, {"redlock", NULL, 0},
                 {"sequential", NULL, 0}};
  for (int c = 0; c < 3; c++)
    if (!(k[c].ns = calloc((size_t)iters, sizeof *k[c].ns)))
      return 70;
  const int64_t lease = 10000;
  for (int done = -warmup; done < iters; done += ROUND) {
    for (int c = 0; c < 3; c++) {
      for (int r = 0; r < ROUND; r++) {
        int64_t t0 = now_ns();
        if (c == 0) {
          if ((rc = dlock_lock_acquire(ls, 0, lease)) ||
              (rc = dlock_lock_release(ls)))
            die("single", rc);
        } else if (c == 1) {
          if ((rc = dlock_lock_acquire(lr, 0, lease)) ||
              (rc = dlock_lock_release(lr)))
            die("redlock", rc);
        } else {
          for (int i = 0; i < n; i++)
            if ((rc = dlock_lock_acquire(lq[i], 0, lease)))
              die("sequential acquire", rc);
          for (int i = 0; i < n; i++)
            if ((rc = dlock_lock_release(lq[i])))
              die("sequential release", rc);
        }
        int64_t t = now_ns() - t0;
        if (done + r >= 0 && done + r < iters)
          k[c].ns[k[c].n++] = t;
      }
    }
  }
  printf("nodes %d, %d pairs per case (acquire + release, uncontended, one "
         "thread)\n",
         n, iters);
  printf("%-11s %10s %10s %10s %10s\n", "case", "median_us", "p90_us",
         "p99_us", "mean_us");
  double med[3];
  for (int c = 0; c < 3; c++) {
    double sum = 0;
    for (size_t i = 0; i < k[c].n; i++)
      sum += (double)k[c].ns[i];
    qsort(k[c].ns, k[c].n, sizeof *k[c].ns, cmp_i64);
    med[c] = pct(&k[c], 0.5);
    printf("%-11s %10.1f %10.1f %10.1f %10.1f\n", k[c].name, med[c],
           pct(&k[c], 0.9), pct(&k[c], 0.99), sum / (double)k[c].n / 1000.0);
  }
  printf("redlock/single      %.2f (target < 1.5)\n", med[1] / med[0]);
  printf("sequential/redlock  %.2f (target > 3)\n", med[2] / med[1]);
  for (int i = 0; i < n; i++) {
    dlock_lock_free(lq[i]);
    dlock_client_free(seq[i]);
  }
  dlock_lock_free(ls);
  dlock_lock_free(lr);
  dlock_client_free(single);
  dlock_client_free(rl);
  for (int c = 0; c < 3; c++)
    free(k[c].ns);
  return 0;
}
