/*
 * bench_records.h - worker records (one per acquisition) and their analysis.
 *
 * A record is what one worker saw of one hold: the CLOCK_MONOTONIC instant
 * taken right after the acquire returned and the one taken right before the
 * release was sent. Because the server-side hold starts before the first and
 * ends after the second, two recorded intervals that overlap prove two real
 * holds overlapped (no false positives).
 */
#ifndef DLOCK_BENCH_RECORDS_H
#define DLOCK_BENCH_RECORDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct bench_rec {
  int32_t worker;
  int64_t acq_ns;
  int64_t rel_ns;
} bench_rec_t;

/* A growable array with a hard cap (so a run is bounded in memory). */
typedef struct bench_recs {
  bench_rec_t *v;
  size_t n;
  size_t cap;
  size_t max; /* push fails beyond this many */
} bench_recs_t;

void bench_recs_init(bench_recs_t *r, size_t max);
void bench_recs_free(bench_recs_t *r);
/* 0, or -1 when full or out of memory. */
int bench_recs_push(bench_recs_t *r, int32_t worker, int64_t acq_ns,
                    int64_t rel_ns);
/* Appends all of src. 0 or -1. */
int bench_recs_append(bench_recs_t *r, const bench_rec_t *src, size_t n);

/* Writes "worker,acquire_ns,release_ns" then one line per record. 0 or -1. */
int bench_recs_write(const bench_recs_t *r, const char *path);

/* What the records of one run say. Durations in ns. */
typedef struct bench_stats {
  size_t n;       /* acquisitions */
  int nworkers;   /* workers the run had (some may have none) */
  double seconds; /* run length used for rates */
  double per_sec; /* acquisitions per second */
  size_t ngaps;   /* hand-offs (consecutive holds of one lock) */
  int64_t gap_p50, gap_p99, gap_max;
  size_t nxgaps; /* hand-offs between different workers */
  int64_t xgap_p50, xgap_p99, xgap_max;
  int64_t worst_wait; /* longest time any worker waited for the lock */
  size_t overlaps;    /* holds that began before the previous one ended */
  double jain;        /* Jain's fairness index over per-worker counts */
} bench_stats_t;

/* Analyses n records of workers 0..nworkers-1 run in [start_ns, end_ns].
 * per_worker_lock: each worker had its own lock (hand-offs and overlaps are
 * then computed per worker); otherwise all shared one lock. Sorts r->v.
 * 0, or -1 out of memory. */
int bench_analyse(bench_recs_t *r, int nworkers, int64_t start_ns,
                  int64_t end_ns, bool per_worker_lock, bench_stats_t *out);

/* One human-readable line (and a header) for a stats record. */
void bench_stats_header(FILE *f);
void bench_stats_print(FILE *f, const char *label, const bench_stats_t *s);

#endif /* DLOCK_BENCH_RECORDS_H */
