/*
 * bench_records.c - record buffers, the records file, and the analysis.
 *
 * Design: records are collected per worker thread (no sharing while the
 * clock runs) and merged afterwards. The analysis sorts them by acquire time
 * (per worker first when every worker had its own lock) and walks them once:
 * a hold that begins before the latest end seen so far is an overlap; the
 * distance from one hold's end to the next hold's start on the same lock is
 * a hand-off gap; the distance from a worker's previous release (or the
 * start instant) to its next acquire is that worker's wait. Percentiles are
 * nearest-rank on sorted copies. Single-threaded; no global state.
 */
#include "bench_records.h"

#include <stdlib.h>
#include <string.h>

void bench_recs_init(bench_recs_t *r, size_t max) {
  memset(r, 0, sizeof *r);
  r->max = max;
}

void bench_recs_free(bench_recs_t *r) {
  free(r->v);
  memset(r, 0, sizeof *r);
}

static int grow(bench_recs_t *r, size_t need) {
  if (need <= r->cap)
    return 0;
  if (need > r->max)
    return -1;
  size_t nc = r->cap ? r->cap : 1024;
  while (nc < need)
    nc = nc > r->max / 2 ? r->max : nc * 2;
  bench_rec_t *v = realloc(r->v, nc * sizeof *v);
  if (!v)
    return -1;
  r->v = v;
  r->cap = nc;
  return 0;
}

int bench_recs_push(bench_recs_t *r, int32_t worker, int64_t acq_ns,
                    int64_t rel_ns) {
  if (grow(r, r->n + 1))
    return -1;
  r->v[r->n].worker = worker;
  r->v[r->n].acq_ns = acq_ns;
  r->v[r->n].rel_ns = rel_ns;
  r->n++;
  return 0;
}

int bench_recs_append(bench_recs_t *r, const bench_rec_t *src, size_t n) {
  if (n == 0)
    return 0;
  if (grow(r, r->n + n))
    return -1;
  memcpy(r->v + r->n, src, n * sizeof *src);
  r->n += n;
  return 0;
}

int bench_recs_write(const bench_recs_t *r, const char *path) {
  FILE *f = fopen(path, "w");
  if (!f)
    return -1;
  fputs("worker,acquire_ns,release_ns\n", f);
  for (size_t i = 0; i < r->n; i++)
    fprintf(f, "%d,%lld,%lld\n", (int)r->v[i].worker, (long long)r->v[i].acq_ns,
            (long long)r->v[i].rel_ns);
  int bad = ferror(f);
  if (fclose(f) != 0 || bad)
    return -1;
  return 0;
}

static int by_acq(const void *a, const void *b) {
  const bench_rec_t *x = a, *y = b;
  return (x->acq_ns > y->acq_ns) - (x->acq_ns < y->acq_ns);
}

static int by_worker_acq(const void *a, const void *b) {
  const bench_rec_t *x = a, *y = b;
  if (x->worker != y->worker)
    return (x->worker > y->worker) - (x->worker < y->worker);
  return by_acq(a, b);
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

/* Nearest-rank percentile of a sorted array (p in 0..100). */
static int64_t pct(const int64_t *v, size_t n, double p) {
  if (n == 0)
    return 0;
  size_t rank = (size_t)(p / 100.0 * (double)n + 0.999999);
  if (rank < 1)
    rank = 1;
  if (rank > n)
    rank = n;
  return v[rank - 1];
}

int bench_analyse(bench_recs_t *r, int nworkers, int64_t start_ns,
                  int64_t end_ns, bool per_worker_lock, bench_stats_t *out) {
  memset(out, 0, sizeof *out);
  out->n = r->n;
  out->nworkers = nworkers;
  out->seconds = (double)(end_ns - start_ns) / 1e9;
  if (out->seconds > 0)
    out->per_sec = (double)r->n / out->seconds;
  int64_t *gaps = malloc((r->n + 1) * sizeof *gaps);
  int64_t *xgaps = malloc((r->n + 1) * sizeof *xgaps);
  size_t *counts = calloc(nworkers > 0 ? (size_t)nworkers : 1, sizeof *counts);
  if (!gaps || !xgaps || !counts) {
    free(gaps);
    free(xgaps);
    free(counts);
    return -1;
  }

  /* hand-offs and overlaps, lock by lock */
  qsort(r->v, r->n, sizeof *r->v, per_worker_lock ? by_worker_acq : by_acq);
  int64_t last_end = INT64_MIN;
  for (size_t i = 0; i < r->n; i++) {
    const bench_rec_t *c = &r->v[i];
    bool same_lock =
        i > 0 && (!per_worker_lock || r->v[i - 1].worker == c->worker);
    if (!same_lock)
      last_end = INT64_MIN;
    if (same_lock) {
      if (c->acq_ns < last_end) {
        out->overlaps++;
      } else {
        int64_t g = c->acq_ns - r->v[i - 1].rel_ns;
        gaps[out->ngaps++] = g;
        if (r->v[i - 1].worker != c->worker)
          xgaps[out->nxgaps++] = g;
      }
    }
    if (c->rel_ns > last_end)
      last_end = c->rel_ns;
  }
  qsort(gaps, out->ngaps, sizeof *gaps, cmp_i64);
  qsort(xgaps, out->nxgaps, sizeof *xgaps, cmp_i64);
  out->gap_p50 = pct(gaps, out->ngaps, 50);
  out->gap_p99 = pct(gaps, out->ngaps, 99);
  out->gap_max = out->ngaps ? gaps[out->ngaps - 1] : 0;
  out->xgap_p50 = pct(xgaps, out->nxgaps, 50);
  out->xgap_p99 = pct(xgaps, out->nxgaps, 99);
  out->xgap_max = out->nxgaps ? xgaps[out->nxgaps - 1] : 0;

  /* waits and fairness, worker by worker */
  if (!per_worker_lock)
    qsort(r->v, r->n, sizeof *r->v, by_worker_acq);
  size_t i = 0;
  for (int w = 0; w < nworkers; w++) {
    int64_t prev = start_ns, worst = 0;
    while (i < r->n && r->v[i].worker < w)
      i++;
    for (; i < r->n && r->v[i].worker == w; i++) {
      counts[w]++;
      if (r->v[i].acq_ns - prev > worst)
        worst = r->v[i].acq_ns - prev;
      prev = r->v[i].rel_ns;
    }
    if (end_ns - prev > worst)
      worst = end_ns - prev; /* still waiting when the run ended */
    if (worst > out->worst_wait)
      out->worst_wait = worst;
  }
  double sum = 0, sumsq = 0;
  for (int w = 0; w < nworkers; w++) {
    sum += (double)counts[w];
    sumsq += (double)counts[w] * (double)counts[w];
  }
  out->jain = sumsq > 0 ? sum * sum / ((double)nworkers * sumsq) : 0;
  free(gaps);
  free(xgaps);
  free(counts);
  return 0;
}

void bench_stats_header(FILE *f) {
  fprintf(f, "%-28s %9s %11s %9s %9s %10s %9s %9s %10s %10s %8s %6s\n", "case",
          "acquired", "acq/s", "gap p50", "gap p99", "gap max", "xgap p50",
          "xgap p99", "xgap max", "worst wait", "overlaps", "jain");
  fprintf(f, "%-28s %9s %11s %9s %9s %10s %9s %9s %10s %10s %8s %6s\n", "", "",
          "", "us", "us", "us", "us", "us", "us", "ms", "", "");
}

void bench_stats_print(FILE *f, const char *label, const bench_stats_t *s) {
  fprintf(f,
          "%-28s %9zu %11.1f %9.1f %9.1f %10.1f %9.1f %9.1f %10.1f %10.2f "
          "%8zu %6.3f\n",
          label, s->n, s->per_sec, (double)s->gap_p50 / 1e3,
          (double)s->gap_p99 / 1e3, (double)s->gap_max / 1e3,
          (double)s->xgap_p50 / 1e3, (double)s->xgap_p99 / 1e3,
          (double)s->xgap_max / 1e3, (double)s->worst_wait / 1e6, s->overlaps,
          s->jain);
}
