/*
 * dlock-bench.c - benchmarks of libdlock, through its public API only.
 *
 * Design note
 * -----------
 * Every scenario is built from one loop, the worker loop: sleep until a
 * common start instant, then until the end instant: acquire (waiting at most
 * until the end instant), take CLOCK_MONOTONIC, busy-wait the hold time,
 * take CLOCK_MONOTONIC, release. Each pass leaves one record
 * `worker,acquire_ns,release_ns`. CLOCK_MONOTONIC is one clock for every
 * process on the machine, so records of several processes (and of other
 * programs that follow the same loop, see bench/compare) merge into one
 * timeline.
 *
 * Modes:
 *   no scenario word   one worker process (optionally T threads) writing its
 *                      records to --records; the building block for external
 *                      harnesses;
 *   uncontended        one thread, one lock;
 *   contended          W forked processes on one lock, for each hold time;
 *                      --kind picks the lock kind (reentrant, fair,
 *                      fenced, write);
 *   readers            R forked processes on the read side of one
 *                      read-write lock (holds overlap by design, so
 *                      overlaps are checked per reader), then the same
 *                      loop on the reentrant lock, in one run;
 *   semaphore          W forked processes on one semaphore of P permits,
 *                      then on a permit semaphore (watchdog lease), same
 *                      loop (a permit is the "lock"); overlaps are checked
 *                      per process, and the holders at once are counted in
 *                      a MAP_SHARED page (up after the acquire returned,
 *                      down before the release is sent, so never above the
 *                      real count): above P fails the run;
 *   latch              R rounds: this process sets a fresh latch to 1, W
 *                      forked waiters await it (a shared page tells them
 *                      the round and collects their wake instants), and
 *                      once PUBSUB NUMSUB shows all W subscribed to its
 *                      channel (at most 2 s) it counts down; the release
 *                      latency is each wake minus count_down's return;
 *   threads            T threads of one client on one lock, then on T locks;
 *   renewal            one client holding K watchdog locks: server commands,
 *                      read events and client CPU per renewal cycle;
 *   memory             client heap/RSS and server memory per held lock;
 *   tls                the uncontended loop on --url (plain) and on
 *                      --tls-url (TLS, verified with --cacert unless
 *                      --insecure), alternated three times in one run;
 *                      prints each side's pairs/s and the ratio.
 * A rediss:// --url works in every scenario (--cacert, --insecure apply);
 * the server counts then go missing (bench_redis speaks plain RESP).
 * Any other backend's URL (etcd://, zookeeper://) works in the scenarios
 * its backend supports, without server counts; `latch` waits for
 * Redisson's pub/sub channel and `tls` compares two Redis ports, so both
 * are Redis only.
 *
 * Threads and processes: worker threads share one client (that is the
 * library's model) and write only their own record buffer; the main thread
 * merges buffers after joining. `contended` (and `readers`, `semaphore`,
 * `latch`) fork before any client exists in this process (a client does
 * not survive fork; a semaphore's set-up client is freed before the fork);
 * children hand their records back through a shared anonymous mapping and
 * are reaped, or killed by PID after a bound.
 *
 * Bounds: every loop ends by count (records per worker, iterations, latch
 * rounds) and by time (the end instant; each acquire waits at most until
 * it; every latch round and every poll of a shared counter has a
 * deadline).
 */
#define _GNU_SOURCE
#include <dlock/dlock.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_records.h"
#include "bench_redis.h"

#define MAX_LIST 16
#define MAX_WORKERS 256
#define MAX_RECORDS (2u << 20) /* per worker */
#define MAX_ITER (64u << 20)   /* loop passes per worker, whatever happens */
#define MAX_LOCKS 1000000
#define MAX_ROUNDS 10000 /* latch rounds */
#define REAP_GRACE_NS (30 * NS_PER_S)
#define NS_PER_S 1000000000LL
#define NS_PER_MS 1000000LL

/* ------------------------------------------------------------ options */

typedef struct config {
  const char *scenario;
  const char *url;
  const char *name;
  const char *records;
  const char *csv;
  int64_t hold_us[MAX_LIST];
  int nhold;
  double seconds;
  int64_t start_ns;
  bool have_start;
  int worker;
  int workers;
  int threads;
  bool distinct;
  long locks[MAX_LIST];
  int nlocks;
  int64_t watchdog_ms;
  int cycles;
  dlock_lock_kind_t kind; /* contended: --kind */
  int readers;            /* readers: --readers R */
  int permits;            /* semaphore: --permits P */
  int waiters;            /* latch: --waiters W */
  int rounds;             /* latch: --rounds R */
  const char *tls_url;    /* tls: --tls-url URL */
  const char *cacert;     /* --cacert FILE for TLS URLs */
  bool insecure;          /* --insecure: no TLS verification */
  const char *holder_info; /* --holder-info TEXT, or NULL */
} config_t;

static const char *const KIND_NAMES[] = {"reentrant", "fair", "fenced",
                                         "read", "write"};

static void usage(FILE *f) {
  fputs(
      "usage:\n"
      "  dlock-bench --url URL --name NAME --hold-us H --seconds D\n"
      "              [--start-ns T] [--worker I] [--threads T [--distinct]]\n"
      "              --records FILE\n"
      "      one worker of the loop (acquire, hold H us busy, release) for D\n"
      "      seconds from CLOCK_MONOTONIC instant T (default: now); writes\n"
      "      `worker,acquire_ns,release_ns` lines to FILE.\n"
      "  dlock-bench SCENARIO [options]\n"
      "      uncontended  one thread, one lock (pairs per second)\n"
      "      contended    --workers W (8) processes on one lock, --hold-us\n"
      "                   list (default 0,1000), --kind reentrant|fair|\n"
      "                   fenced|write (default reentrant)\n"
      "      readers      --readers R (8) processes read-acquiring one\n"
      "                   read-write lock, then the same on the reentrant\n"
      "                   lock (--hold-us H, default 0)\n"
      "      semaphore    --workers W (8) processes on a semaphore of\n"
      "                   --permits P (2), then on a permit semaphore\n"
      "                   (watchdog lease), --hold-us H (1000)\n"
      "      latch        --waiters W (8) processes await a latch of count 1\n"
      "                   that this process counts down, --rounds R (100)\n"
      "      threads      --threads T (8) threads on one lock, then on T "
      "locks\n"
      "      renewal      one client holding --locks K list (1,100,10000)\n"
      "                   watchdog locks, --watchdog-ms (600), --cycles (10)\n"
      "      memory       client and server bytes per held lock, --locks K\n"
      "      tls          uncontended pairs/s on --url (plain) against\n"
      "                   --tls-url URL (rediss://), alternated 3 times\n"
      "                   (10000)\n"
      "options: --url URL (default $DLOCK_URL, else redis://127.0.0.1:6379)\n"
      "         --name NAME (default dlock-bench)  --seconds D (default 3)\n"
      "         --records FILE (merged records)  --csv FILE (append\n"
      "         scenario,case,metric,value rows)\n"
      "         --cacert FILE (CA for TLS URLs)  --insecure (no TLS\n"
      "         verification; tests only)\n"
      "         --holder-info TEXT (dlock_options_set_holder_info)\n",
      f);
}

static int parse_list(const char *s, int64_t *out, int max) {
  int n = 0;
  const char *p = s;
  while (*p && n < max) {
    char *end = NULL;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (end == p || errno || v < 0)
      return -1;
    out[n++] = v;
    if (*end == ',')
      end++;
    else if (*end)
      return -1;
    p = end;
  }
  return *p ? -1 : n;
}

/* An integer option in [lo, hi] into *out: 0, or -1 (not a whole number,
 * or out of range). */
static int int_arg(const char *s, int lo, int hi, int *out) {
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end || errno || v < lo || v > hi)
    return -1;
  *out = (int)v;
  return 0;
}

static int parse_args(int argc, char **argv, config_t *c) {
  memset(c, 0, sizeof *c);
  c->url = getenv("DLOCK_URL");
  if (!c->url || !*c->url)
    c->url = "redis://127.0.0.1:6379";
  c->name = "dlock-bench";
  c->seconds = -1;
  c->workers = 8;
  c->threads = -1;
  c->watchdog_ms = 600;
  c->cycles = 10;
  c->readers = 8;
  c->permits = 2;
  c->waiters = 8;
  c->rounds = 100;
  int first = 1;
  if (argc > 1 && argv[1][0] != '-') {
    c->scenario = argv[1];
    first = 2;
  }
  enum {
    O_URL = 1,
    O_NAME,
    O_HOLD,
    O_SECONDS,
    O_START,
    O_WORKER,
    O_RECORDS,
    O_WORKERS,
    O_THREADS,
    O_DISTINCT,
    O_LOCKS,
    O_WATCHDOG,
    O_CYCLES,
    O_CSV,
    O_KIND,
    O_READERS,
    O_PERMITS,
    O_WAITERS,
    O_ROUNDS,
    O_TLS_URL,
    O_CACERT,
    O_INSECURE,
    O_HOLDER_INFO,
    O_HELP
  };
  static const struct option opts[] = {
      {"url", required_argument, NULL, O_URL},
      {"name", required_argument, NULL, O_NAME},
      {"hold-us", required_argument, NULL, O_HOLD},
      {"seconds", required_argument, NULL, O_SECONDS},
      {"start-ns", required_argument, NULL, O_START},
      {"worker", required_argument, NULL, O_WORKER},
      {"records", required_argument, NULL, O_RECORDS},
      {"workers", required_argument, NULL, O_WORKERS},
      {"threads", required_argument, NULL, O_THREADS},
      {"distinct", no_argument, NULL, O_DISTINCT},
      {"locks", required_argument, NULL, O_LOCKS},
      {"watchdog-ms", required_argument, NULL, O_WATCHDOG},
      {"cycles", required_argument, NULL, O_CYCLES},
      {"csv", required_argument, NULL, O_CSV},
      {"kind", required_argument, NULL, O_KIND},
      {"readers", required_argument, NULL, O_READERS},
      {"permits", required_argument, NULL, O_PERMITS},
      {"waiters", required_argument, NULL, O_WAITERS},
      {"rounds", required_argument, NULL, O_ROUNDS},
      {"tls-url", required_argument, NULL, O_TLS_URL},
      {"cacert", required_argument, NULL, O_CACERT},
      {"insecure", no_argument, NULL, O_INSECURE},
      {"holder-info", required_argument, NULL, O_HOLDER_INFO},
      {"help", no_argument, NULL, O_HELP},
      {NULL, 0, NULL, 0}};
  optind = first;
  int o;
  int64_t tmp[MAX_LIST];
  /* the whole-number options: option, range, field */
  const struct {
    int opt, lo, hi;
    int *field;
  } ints[] = {{O_WORKERS, 1, MAX_WORKERS, &c->workers},
              {O_THREADS, 1, MAX_WORKERS, &c->threads},
              {O_CYCLES, 1, 10000, &c->cycles},
              {O_READERS, 1, MAX_WORKERS, &c->readers},
              {O_PERMITS, 1, MAX_WORKERS, &c->permits},
              {O_WAITERS, 1, MAX_WORKERS, &c->waiters},
              {O_ROUNDS, 1, MAX_ROUNDS, &c->rounds}};
  while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    char *end = NULL;
    size_t ik = 0;
    while (ik < sizeof ints / sizeof ints[0] && ints[ik].opt != o)
      ik++;
    if (ik < sizeof ints / sizeof ints[0]) {
      if (int_arg(optarg, ints[ik].lo, ints[ik].hi, ints[ik].field))
        return -1;
      continue;
    }
    switch (o) {
    case O_URL:
      c->url = optarg;
      break;
    case O_NAME:
      c->name = optarg;
      break;
    case O_HOLD:
      c->nhold = parse_list(optarg, c->hold_us, MAX_LIST);
      if (c->nhold <= 0)
        return -1;
      break;
    case O_SECONDS:
      c->seconds = strtod(optarg, &end);
      if (end == optarg || *end || !(c->seconds > 0 && c->seconds <= 3600))
        return -1;
      break;
    case O_START:
      errno = 0;
      c->start_ns = strtoll(optarg, &end, 10);
      if (end == optarg || *end || errno || c->start_ns <= 0)
        return -1;
      c->have_start = true;
      break;
    case O_WORKER:
      c->worker = atoi(optarg);
      if (c->worker < 0 || c->worker > 1000000)
        return -1;
      break;
    case O_RECORDS:
      c->records = optarg;
      break;
    case O_DISTINCT:
      c->distinct = true;
      break;
    case O_LOCKS: {
      int n = parse_list(optarg, tmp, MAX_LIST);
      if (n <= 0)
        return -1;
      for (int i = 0; i < n; i++) {
        if (tmp[i] < 1 || tmp[i] > MAX_LOCKS)
          return -1;
        c->locks[i] = (long)tmp[i];
      }
      c->nlocks = n;
      break;
    }
    case O_WATCHDOG:
      c->watchdog_ms = atoll(optarg);
      if (c->watchdog_ms < 3)
        return -1;
      break;
    case O_CSV:
      c->csv = optarg;
      break;
    case O_TLS_URL:
      c->tls_url = optarg;
      break;
    case O_CACERT:
      c->cacert = optarg;
      break;
    case O_INSECURE:
      c->insecure = true;
      break;
    case O_HOLDER_INFO:
      c->holder_info = optarg;
      break;
    case O_KIND: {
      int k = -1;
      for (int i = 0; i < 5; i++)
        if (strcmp(optarg, KIND_NAMES[i]) == 0 && i != DLOCK_READ)
          k = i;
      if (k < 0)
        return -1;
      c->kind = (dlock_lock_kind_t)k;
      break;
    }
    case O_HELP:
      usage(stdout);
      exit(0);
    default:
      return -1;
    }
  }
  return optind == argc ? 0 : -1;
}

/* --------------------------------------------------------------- clock */

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

/* Sleeps until CLOCK_MONOTONIC instant t (returns at once if past). */
static void sleep_until(int64_t t) {
  struct timespec ts = {(time_t)(t / NS_PER_S), (long)(t % NS_PER_S)};
  for (int i = 0; i < 1000; i++)
    if (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != EINTR)
      return;
}

static void sleep_ms(int64_t ms) { sleep_until(now_ns() + ms * NS_PER_MS); }

/* ------------------------------------------------------------- csv out */

static FILE *csv_file;

static void csv_row(const char *scenario, const char *kase, const char *metric,
                    double value) {
  if (csv_file)
    fprintf(csv_file, "%s,%s,%s,%.6g\n", scenario, kase, metric, value);
}

static void csv_stats(const char *scenario, const char *kase,
                      const bench_stats_t *s) {
  csv_row(scenario, kase, "acquisitions", (double)s->n);
  csv_row(scenario, kase, "acq_per_s", s->per_sec);
  csv_row(scenario, kase, "gap_p50_us", (double)s->gap_p50 / 1e3);
  csv_row(scenario, kase, "gap_p99_us", (double)s->gap_p99 / 1e3);
  csv_row(scenario, kase, "gap_max_us", (double)s->gap_max / 1e3);
  csv_row(scenario, kase, "xgap_p50_us", (double)s->xgap_p50 / 1e3);
  csv_row(scenario, kase, "xgap_p99_us", (double)s->xgap_p99 / 1e3);
  csv_row(scenario, kase, "xgap_max_us", (double)s->xgap_max / 1e3);
  csv_row(scenario, kase, "worst_wait_ms", (double)s->worst_wait / 1e6);
  csv_row(scenario, kase, "overlaps", (double)s->overlaps);
  csv_row(scenario, kase, "jain", s->jain);
}

/* ------------------------------------------------------- worker loop */

/* What the loop acquires: a lock of some kind, one permit of a semaphore,
 * or one permit of a permit semaphore (watchdog lease). */
typedef enum target { TGT_LOCK = 0, TGT_SEM, TGT_PSEM } target_t;
static const char *const TARGET_NAMES[] = {"lock", "plain", "permit"};

/* Holders at once, counted by the forked workers in a MAP_SHARED page:
 * up right after an acquire returned, down right before the release is
 * sent, so the count never exceeds the real holders. */
typedef struct held_count {
  atomic_int held, peak;
  atomic_long over; /* acquisitions that made held exceed the permits */
} held_count_t;

/* One handle of any target and the permit it holds. */
typedef struct holder {
  dlock_lock_t *lock;
  dlock_semaphore_t *sem;
  dlock_permit_sem_t *psem;
  char permit[DLOCK_PERMIT_ID_LEN + 1];
} holder_t;

typedef struct worker {
  pthread_t thread;
  dlock_client_t *client;
  char lock_name[DLOCK_NAME_MAX + 1];
  int id;
  dlock_lock_kind_t kind;
  target_t target;
  int permits;          /* a semaphore's permits (count checked) */
  held_count_t *count;  /* NULL: not counted */
  int64_t hold_ns;
  int64_t start_ns;
  int64_t end_ns;
  bench_recs_t recs;
  int err; /* first failure (0: none) */
  char errmsg[256];
  int64_t late_ns; /* how late the worker reached the start instant */
} worker_t;

static void worker_fail(worker_t *w, const char *what, int rc) {
  if (w->err)
    return;
  w->err = rc ? rc : -1;
  snprintf(w->errmsg, sizeof w->errmsg, "worker %d: %s: %s (%s)", w->id, what,
           rc ? dlock_err_name(rc) : "failed", dlock_last_error());
}

static int holder_open(const worker_t *w, holder_t *h) {
  memset(h, 0, sizeof *h);
  if (w->target == TGT_SEM)
    return dlock_semaphore_new(w->client, w->lock_name, &h->sem);
  if (w->target == TGT_PSEM)
    return dlock_permit_sem_new(w->client, w->lock_name, &h->psem);
  return dlock_lock_new_kind(w->client, w->lock_name, w->kind, &h->lock);
}

static int holder_acquire(holder_t *h, int64_t wait_ms) {
  if (h->sem)
    return dlock_semaphore_acquire(h->sem, 1, wait_ms);
  if (h->psem)
    return dlock_permit_sem_acquire(h->psem, wait_ms, DLOCK_LEASE_WATCHDOG,
                                    h->permit);
  int64_t token = 0;
  if (dlock_lock_kind(h->lock) == DLOCK_FENCED)
    return dlock_lock_acquire_fenced(h->lock, wait_ms, DLOCK_LEASE_WATCHDOG,
                                     &token);
  return dlock_lock_acquire(h->lock, wait_ms, DLOCK_LEASE_WATCHDOG);
}

static int holder_release(holder_t *h) {
  if (h->sem)
    return dlock_semaphore_release(h->sem, 1);
  if (h->psem)
    return dlock_permit_sem_release(h->psem, h->permit);
  return dlock_lock_release(h->lock);
}

static void holder_close(holder_t *h) {
  dlock_lock_free(h->lock);
  dlock_semaphore_free(h->sem);
  dlock_permit_sem_free(h->psem);
  memset(h, 0, sizeof *h);
}

/* The shared count of holders: one more (checked against the permits). */
static void count_up(worker_t *w) {
  if (!w->count)
    return;
  int n = atomic_fetch_add(&w->count->held, 1) + 1;
  if (n > w->permits)
    atomic_fetch_add(&w->count->over, 1);
  int peak = atomic_load(&w->count->peak);
  for (int i = 0; i < 1000 && n > peak; i++)
    if (atomic_compare_exchange_weak(&w->count->peak, &peak, n))
      break;
}

static void count_down(worker_t *w) {
  if (w->count)
    atomic_fetch_sub(&w->count->held, 1);
}

/* The loop. Runs on its own thread (or process); touches only *w (and the
 * shared count, atomically). */
static void *worker_run(void *arg) {
  worker_t *w = arg;
  holder_t h;
  int rc = holder_open(w, &h);
  if (rc) {
    worker_fail(w, "handle_new", rc);
    return NULL;
  }
  int64_t t0 = now_ns();
  w->late_ns = t0 > w->start_ns ? t0 - w->start_ns : 0;
  sleep_until(w->start_ns);
  for (uint32_t iter = 0; iter < MAX_ITER; iter++) {
    int64_t now = now_ns();
    if (now >= w->end_ns)
      break;
    int64_t wait_ms = (w->end_ns - now + NS_PER_MS - 1) / NS_PER_MS;
    rc = holder_acquire(&h, wait_ms);
    if (rc == DLOCK_ETIMEDOUT)
      break; /* the run ended while waiting */
    if (rc) {
      worker_fail(w, "acquire", rc);
      break;
    }
    int64_t acq = now_ns();
    count_up(w);
    int64_t rel = acq;
    /* busy hold: bounded by time, and by count in case the clock stalls */
    for (uint32_t spin = 0; rel - acq < w->hold_ns && spin < 2000000000u;
         spin++)
      rel = now_ns();
    count_down(w);
    rc = holder_release(&h);
    if (rc) {
      worker_fail(w, "release", rc);
      break;
    }
    if (bench_recs_push(&w->recs, w->id, acq, rel)) {
      fprintf(stderr, "dlock-bench: worker %d: record buffer full (%zu)\n",
              w->id, w->recs.n);
      break;
    }
  }
  holder_close(&h);
  return NULL;
}

/* Runs n workers as threads of this process on `client`; joins them. */
static int run_threads(worker_t *ws, int n) {
  int started = 0, rc = 0;
  for (; started < n; started++) {
    if (pthread_create(&ws[started].thread, NULL, worker_run, &ws[started])) {
      fprintf(stderr, "dlock-bench: cannot start thread %d\n", started);
      rc = -1;
      break;
    }
  }
  for (int i = 0; i < started; i++)
    pthread_join(ws[i].thread, NULL);
  for (int i = 0; i < started; i++) {
    if (ws[i].err) {
      fprintf(stderr, "dlock-bench: %s\n", ws[i].errmsg);
      rc = -1;
    }
  }
  return rc;
}

static int merge(worker_t *ws, int n, bench_recs_t *all) {
  for (int i = 0; i < n; i++)
    if (bench_recs_append(all, ws[i].recs.v, ws[i].recs.n))
      return -1;
  return 0;
}

static int new_client_at(const config_t *c, const char *url,
                         int64_t watchdog_ms, dlock_client_t **out) {
  dlock_options_t *o = NULL;
  int rc = dlock_options_new(&o);
  if (!rc && watchdog_ms > 0)
    rc = dlock_options_set_watchdog_timeout(o, watchdog_ms);
  if (!rc && c->cacert)
    rc = dlock_options_set_tls_ca(o, c->cacert, NULL);
  if (!rc && c->insecure)
    rc = dlock_options_set_tls_insecure(o, true);
  if (!rc && c->holder_info)
    rc = dlock_options_set_holder_info(o, c->holder_info);
  if (!rc)
    rc = dlock_client_new(out, url, o);
  dlock_options_free(o);
  if (rc)
    fprintf(stderr, "dlock-bench: cannot connect to %s: %s (%s)\n", url,
            dlock_err_name(rc), dlock_last_error());
  return rc;
}

static int new_client(const config_t *c, int64_t watchdog_ms,
                      dlock_client_t **out) {
  return new_client_at(c, c->url, watchdog_ms, out);
}

static void worker_setup(worker_t *w, dlock_client_t *client,
                         const char *lock_name, int id, int64_t hold_us,
                         int64_t start, int64_t end) {
  memset(w, 0, sizeof *w);
  w->client = client;
  snprintf(w->lock_name, sizeof w->lock_name, "%s", lock_name);
  w->id = id;
  w->hold_ns = hold_us * 1000;
  w->start_ns = start;
  w->end_ns = end;
  bench_recs_init(&w->recs, MAX_RECORDS);
}

static void workers_free(worker_t *ws, int n) {
  for (int i = 0; i < n; i++)
    bench_recs_free(&ws[i].recs);
  free(ws);
}

/* ------------------------------------------------------- worker mode */

static int mode_worker(const config_t *c) {
  if (!c->records || c->seconds <= 0) {
    fprintf(stderr, "dlock-bench: worker mode needs --seconds and "
                    "--records\n");
    return 2;
  }
  int nt = c->threads > 0 ? c->threads : 1;
  int64_t hold = c->nhold > 0 ? c->hold_us[0] : 0;
  dlock_client_t *client = NULL;
  if (new_client(c, 0, &client))
    return 1;
  int64_t start = c->have_start ? c->start_ns : now_ns();
  int64_t end = start + (int64_t)(c->seconds * 1e9);
  worker_t *ws = calloc((size_t)nt, sizeof *ws);
  if (!ws) {
    dlock_client_free(client);
    return 1;
  }
  for (int t = 0; t < nt; t++) {
    int id = nt == 1 ? c->worker : c->worker * nt + t;
    char name[DLOCK_NAME_MAX + 1];
    if (c->distinct)
      snprintf(name, sizeof name, "%.900s:%d", c->name, id);
    else
      snprintf(name, sizeof name, "%s", c->name);
    worker_setup(&ws[t], client, name, id, hold, start, end);
  }
  int rc = run_threads(ws, nt);
  int64_t late = 0;
  for (int t = 0; t < nt; t++)
    if (ws[t].late_ns > late)
      late = ws[t].late_ns;
  if (late > 0 && c->have_start)
    fprintf(stderr,
            "dlock-bench: worker %d: reached the start instant %.1f ms "
            "late\n",
            c->worker, (double)late / 1e6);
  bench_recs_t all;
  bench_recs_init(&all, (size_t)nt * MAX_RECORDS);
  if (merge(ws, nt, &all) || bench_recs_write(&all, c->records)) {
    fprintf(stderr, "dlock-bench: cannot write %s\n", c->records);
    rc = -1;
  }
  bench_recs_free(&all);
  workers_free(ws, nt);
  dlock_client_free(client);
  return rc ? 1 : 0;
}

/* ------------------------------------------------------------ scenarios */

typedef struct snap {
  bench_redis_t *r;
  bench_info_t before, after;
  bool ok;
} snap_t;

/* The server counts (INFO deltas) exist for Redis only. */
static bool url_is_redis(const char *url) {
  return strncasecmp(url, "redis://", 8) == 0 ||
         strncasecmp(url, "rediss://", 9) == 0 ||
         strncasecmp(url, "unix://", 7) == 0;
}

static void snap_begin(snap_t *s, const config_t *c) {
  memset(s, 0, sizeof *s);
  char err[256];
  if (!url_is_redis(c->url))
    return; /* etcd, ZooKeeper: no server counts, nothing to say */
  if (bench_redis_open(c->url, &s->r, err, sizeof err)) {
    fprintf(stderr, "dlock-bench: %s (no server counts)\n", err);
    return;
  }
  s->ok = bench_redis_info(s->r, &s->before) == 0;
}

static void snap_end(snap_t *s) {
  if (s->ok)
    s->ok = bench_redis_info(s->r, &s->after) == 0;
  bench_redis_close(s->r);
  s->r = NULL;
}

/* Prints one case: stats, then server counts per acquisition. */
static void report_case(const char *scenario, const char *kase,
                        const bench_stats_t *st, const snap_t *s) {
  char label[128];
  snprintf(label, sizeof label, "%s %s", scenario, kase);
  bench_stats_print(stdout, label, st);
  csv_stats(scenario, kase, st);
  if (s && s->ok && st->n > 0) {
    double n = (double)st->n;
    double scripts = (double)bench_info_scripts(&s->before, &s->after) / n;
    double calls = (double)bench_info_calls(&s->before, &s->after) / n;
    double usec = (double)bench_info_script_usec(&s->before, &s->after) / n;
    printf("%-28s   per acquisition: %.2f scripts, %.2f server calls "
           "(inside scripts included), %.1f us of server time in scripts\n",
           "", scripts, calls, usec);
    csv_row(scenario, kase, "scripts_per_acq", scripts);
    csv_row(scenario, kase, "server_calls_per_acq", calls);
    csv_row(scenario, kase, "script_usec_per_acq", usec);
  }
}

static int write_records(const config_t *c, bench_recs_t *all,
                         const char *suffix) {
  if (!c->records)
    return 0;
  char path[4096];
  snprintf(path, sizeof path, "%s%s", c->records, suffix);
  if (bench_recs_write(all, path)) {
    fprintf(stderr, "dlock-bench: cannot write %s\n", path);
    return -1;
  }
  return 0;
}

static int scen_uncontended(const config_t *c) {
  dlock_client_t *client = NULL;
  if (new_client(c, 0, &client))
    return 1;
  snap_t s;
  snap_begin(&s, c);
  int64_t start = now_ns() + 100 * NS_PER_MS;
  int64_t end = start + (int64_t)(c->seconds * 1e9);
  worker_t *w = calloc(1, sizeof *w);
  if (!w) {
    dlock_client_free(client);
    return 1;
  }
  char name[DLOCK_NAME_MAX + 1];
  snprintf(name, sizeof name, "%.900s:uncontended", c->name);
  worker_setup(w, client, name, 0, c->nhold ? c->hold_us[0] : 0, start, end);
  int rc = run_threads(w, 1);
  snap_end(&s);
  bench_stats_t st;
  bench_analyse(&w->recs, 1, start, end, false, &st);
  bench_stats_header(stdout);
  report_case("uncontended", "1 thread", &st, &s);
  printf("uncontended: %.1f acquire+release pairs per second\n", st.per_sec);
  if (write_records(c, &w->recs, ""))
    rc = -1;
  workers_free(w, 1);
  dlock_client_free(client);
  return rc || st.overlaps ? 1 : 0;
}

/* One uncontended pass of c->seconds on `url`: pairs per second, or < 0. */
static double uncontended_pass(const config_t *c, const char *url,
                               const char *kase) {
  dlock_client_t *client = NULL;
  if (new_client_at(c, url, 0, &client))
    return -1;
  int64_t start = now_ns() + 100 * NS_PER_MS;
  int64_t end = start + (int64_t)(c->seconds * 1e9);
  worker_t *w = calloc(1, sizeof *w);
  if (!w) {
    dlock_client_free(client);
    return -1;
  }
  char name[DLOCK_NAME_MAX + 1];
  snprintf(name, sizeof name, "%.900s:tls-cost", c->name);
  worker_setup(w, client, name, 0, c->nhold ? c->hold_us[0] : 0, start, end);
  int rc = run_threads(w, 1);
  bench_stats_t st;
  bench_analyse(&w->recs, 1, start, end, false, &st);
  report_case("tls", kase, &st, NULL);
  workers_free(w, 1);
  dlock_client_free(client);
  return rc || st.overlaps ? -1 : st.per_sec;
}

/* Plain against TLS, alternated so that drift of the machine's load falls
 * on both sides alike. */
static int scen_tls(const config_t *c) {
  if (!c->tls_url) {
    fprintf(stderr, "dlock-bench: tls needs --tls-url rediss://...\n");
    return 2;
  }
  enum { ALTERNATIONS = 3 };
  double plain = 0, tls = 0;
  bench_stats_header(stdout);
  for (int i = 0; i < ALTERNATIONS; i++) {
    double p = uncontended_pass(c, c->url, "plain");
    double t = uncontended_pass(c, c->tls_url, "tls");
    if (p <= 0 || t <= 0)
      return 1;
    plain += p / ALTERNATIONS;
    tls += t / ALTERNATIONS;
  }
  printf("tls: plain %.1f pairs/s, TLS %.1f pairs/s, TLS/plain %.3f\n",
         plain, tls, tls / plain);
  csv_row("tls", "plain", "pairs_per_sec", plain);
  csv_row("tls", "tls", "pairs_per_sec", tls);
  csv_row("tls", "ratio", "tls_over_plain", tls / plain);
  return 0;
}

/* Waits for n forked children (bounded by `deadline`); whoever is left
 * then is killed by its PID. 1 when a child failed or had to be killed. */
static int reap(pid_t *pids, int n, int64_t deadline, const char *what) {
  int left = n, failed = 0;
  for (int i = 0; left > 0 && i < 1000000 && now_ns() < deadline; i++) {
    for (int k = 0; k < n; k++) {
      if (pids[k] <= 0)
        continue;
      int st = 0;
      if (waitpid(pids[k], &st, WNOHANG) == pids[k]) {
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
          failed = 1;
        pids[k] = 0;
        left--;
      }
    }
    if (left > 0)
      sleep_ms(10);
  }
  for (int k = 0; k < n; k++) {
    if (pids[k] > 0) {
      fprintf(stderr, "dlock-bench: %s %d (pid %d) overran; killing it\n",
              what, k, (int)pids[k]);
      kill(pids[k], SIGKILL);
      waitpid(pids[k], NULL, 0);
      failed = 1;
    }
  }
  return failed;
}

/* Shared-memory slot through which a forked worker returns its records. */
typedef struct slot {
  size_t n;
  int err;
  char errmsg[256];
  int64_t late_ns;
  bench_rec_t v[];
} slot_t;

/* One forked run: W processes on one lock of `kind`, or on one semaphore
 * of `permits` permits (target). */
typedef struct run {
  const char *scenario;
  int W;
  target_t target;
  dlock_lock_kind_t kind;
  int permits;
  int64_t hold_us;
  /* holds overlap by design (readers, semaphores): overlaps are checked
   * per worker */
  bool per_worker;
} run_t;

/* A semaphore run starts from a fresh semaphore of r->permits permits,
 * made by this process before it forks (its client is freed by then). */
static int sem_setup(const config_t *c, const run_t *r, const char *name) {
  if (r->target == TGT_LOCK)
    return 0;
  dlock_client_t *client = NULL;
  if (new_client(c, 0, &client))
    return -1;
  int rc;
  if (r->target == TGT_SEM) {
    dlock_semaphore_t *sem = NULL;
    rc = dlock_semaphore_new(client, name, &sem);
    if (!rc)
      rc = dlock_semaphore_delete(sem, NULL);
    if (!rc)
      rc = dlock_semaphore_try_set_permits(sem, r->permits, NULL);
    dlock_semaphore_free(sem);
  } else {
    dlock_permit_sem_t *sem = NULL;
    rc = dlock_permit_sem_new(client, name, &sem);
    if (!rc)
      rc = dlock_permit_sem_delete(sem, NULL);
    if (!rc)
      rc = dlock_permit_sem_try_set_permits(sem, r->permits, NULL);
    dlock_permit_sem_free(sem);
  }
  if (rc)
    fprintf(stderr, "dlock-bench: cannot set up %s: %s (%s)\n", name,
            dlock_err_name(rc), dlock_last_error());
  dlock_client_free(client);
  return rc ? -1 : 0;
}

/* W forked processes on one lock or semaphore (the contended, readers and
 * semaphore scenarios). For a semaphore, the holders at once are counted
 * in a shared page; *count gets the result. */
static int fork_run(const config_t *c, const run_t *run, bool *overlap,
                    bench_stats_t *out, held_count_t *count) {
  const char *scenario = run->scenario;
  int W = run->W;
  dlock_lock_kind_t kind = run->kind;
  int64_t hold_us = run->hold_us;
  size_t cap = (size_t)(c->seconds * 200000.0) + 1024;
  if (cap > MAX_RECORDS)
    cap = MAX_RECORDS;
  size_t slot_bytes = sizeof(slot_t) + cap * sizeof(bench_rec_t);
  slot_bytes = (slot_bytes + 4095) & ~(size_t)4095;
  unsigned char *shm =
      mmap(NULL, slot_bytes * (size_t)W, PROT_READ | PROT_WRITE,
           MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (shm == MAP_FAILED) {
    perror("dlock-bench: mmap");
    return -1;
  }
  char name[DLOCK_NAME_MAX + 1], kind_sfx[32] = "";
  if (run->target != TGT_LOCK)
    snprintf(kind_sfx, sizeof kind_sfx, ":%s", TARGET_NAMES[run->target]);
  else if (kind != DLOCK_REENTRANT || strcmp(scenario, "contended") != 0)
    snprintf(kind_sfx, sizeof kind_sfx, ":%s", KIND_NAMES[kind]);
  snprintf(name, sizeof name, "%.900s:%s:%" PRId64 "%s", c->name, scenario,
           hold_us, kind_sfx);
  held_count_t *shared_count = NULL;
  if (run->target != TGT_LOCK) {
    shared_count = mmap(NULL, sizeof *shared_count, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared_count == MAP_FAILED || sem_setup(c, run, name)) {
      if (shared_count == MAP_FAILED)
        perror("dlock-bench: mmap");
      else
        munmap(shared_count, sizeof *shared_count);
      munmap(shm, slot_bytes * (size_t)W);
      return -1;
    }
    atomic_init(&shared_count->held, 0);
    atomic_init(&shared_count->peak, 0);
    atomic_init(&shared_count->over, 0);
  }
  snap_t s;
  snap_begin(&s, c);
  int64_t start = now_ns() + 300 * NS_PER_MS + W * 30 * NS_PER_MS;
  int64_t end = start + (int64_t)(c->seconds * 1e9);
  pid_t pids[MAX_WORKERS];
  int nstarted = 0;
  fflush(NULL);
  for (; nstarted < W; nstarted++) {
    pid_t pid = fork();
    if (pid < 0) {
      perror("dlock-bench: fork");
      break;
    }
    if (pid == 0) {
      slot_t *sl = (slot_t *)(shm + slot_bytes * (size_t)nstarted);
      dlock_client_t *client = NULL;
      if (new_client(c, 0, &client))
        _exit(1);
      worker_t *w = calloc(1, sizeof *w);
      if (!w)
        _exit(1);
      worker_setup(w, client, name, nstarted, hold_us, start, end);
      w->kind = kind;
      w->target = run->target;
      w->permits = run->permits;
      w->count = shared_count;
      w->recs.max = cap;
      worker_run(w);
      sl->n = w->recs.n < cap ? w->recs.n : cap;
      memcpy(sl->v, w->recs.v, sl->n * sizeof *sl->v);
      sl->err = w->err;
      sl->late_ns = w->late_ns;
      snprintf(sl->errmsg, sizeof sl->errmsg, "%s", w->errmsg);
      dlock_client_free(client);
      _exit(w->err ? 1 : 0);
    }
    pids[nstarted] = pid;
  }
  /* reap, bounded in time; whoever is left is killed by its PID */
  int failed = nstarted < W;
  if (reap(pids, nstarted, end + REAP_GRACE_NS, "worker"))
    failed = 1;
  snap_end(&s);
  bench_recs_t all;
  bench_recs_init(&all, (size_t)W * cap);
  int64_t late = 0;
  for (int k = 0; k < nstarted; k++) {
    slot_t *sl = (slot_t *)(shm + slot_bytes * (size_t)k);
    if (sl->err)
      fprintf(stderr, "dlock-bench: %s\n", sl->errmsg);
    if (sl->late_ns > late)
      late = sl->late_ns;
    if (bench_recs_append(&all, sl->v, sl->n < cap ? sl->n : cap))
      failed = 1;
  }
  munmap(shm, slot_bytes * (size_t)W);
  if (late > 0)
    fprintf(stderr, "dlock-bench: a worker reached the start %.1f ms late\n",
            (double)late / 1e6);
  bench_stats_t st;
  bench_analyse(&all, W, start, end, run->per_worker, &st);
  char kase[96];
  if (run->target != TGT_LOCK)
    snprintf(kase, sizeof kase, "P=%d W=%d H=%" PRId64 "us %s", run->permits, W,
             hold_us, TARGET_NAMES[run->target]);
  else if (strcmp(scenario, "readers") == 0)
    snprintf(kase, sizeof kase, "R=%d H=%" PRId64 "us %s", W, hold_us,
             KIND_NAMES[kind]);
  else
    snprintf(kase, sizeof kase, "W=%d H=%" PRId64 "us%s%s", W, hold_us,
             kind_sfx[0] ? " " : "", kind_sfx[0] ? KIND_NAMES[kind] : "");
  report_case(scenario, kase, &st, &s);
  char suffix[64];
  snprintf(suffix, sizeof suffix, ".H%" PRId64 "%s", hold_us, kind_sfx);
  for (char *p = suffix; *p; p++)
    if (*p == ':')
      *p = '.';
  if (write_records(c, &all, suffix))
    failed = 1;
  bench_recs_free(&all);
  if (st.overlaps)
    *overlap = true;
  if (out)
    *out = st;
  if (shared_count) {
    if (count) {
      atomic_init(&count->held, atomic_load(&shared_count->held));
      atomic_init(&count->peak, atomic_load(&shared_count->peak));
      atomic_init(&count->over, atomic_load(&shared_count->over));
    }
    munmap(shared_count, sizeof *shared_count);
  }
  return failed ? -1 : 0;
}

static int scen_contended(const config_t *c) {
  static const int64_t defaults[] = {0, 1000};
  const int64_t *holds = c->nhold ? c->hold_us : defaults;
  int nh = c->nhold ? c->nhold : 2;
  int rc = 0;
  bool overlap = false;
  bench_stats_header(stdout);
  for (int i = 0; i < nh; i++) {
    run_t r = {.scenario = "contended",
               .W = c->workers,
               .kind = c->kind,
               .hold_us = holds[i]};
    if (fork_run(c, &r, &overlap, NULL, NULL))
      rc = 1;
  }
  return rc || overlap ? 1 : 0;
}

/* R readers on one read-write lock, then R processes on the reentrant
 * lock with the same loop: what sharing buys. */
static int scen_readers(const config_t *c) {
  int R = c->readers;
  int64_t hold = c->nhold ? c->hold_us[0] : 0;
  bench_stats_t st[2];
  static const dlock_lock_kind_t kinds[2] = {DLOCK_READ, DLOCK_REENTRANT};
  bool overlap = false;
  int rc = 0;
  bench_stats_header(stdout);
  for (int i = 0; i < 2; i++) {
    memset(&st[i], 0, sizeof st[i]);
    run_t r = {.scenario = "readers",
               .W = R,
               .kind = kinds[i],
               .hold_us = hold,
               .per_worker = i == 0};
    if (fork_run(c, &r, &overlap, &st[i], NULL))
      rc = 1;
  }
  for (int i = 0; i < 2; i++) {
    char kase[64];
    snprintf(kase, sizeof kase, "R=%d H=%" PRId64 "us %s", R, hold,
             KIND_NAMES[kinds[i]]);
    printf("readers: %-9s %10.1f acquisitions/s in total, %9.1f per "
           "process (R=%d)\n",
           KIND_NAMES[kinds[i]], st[i].per_sec, st[i].per_sec / R, R);
    csv_row("readers", kase, "acq_per_s_per_process", st[i].per_sec / R);
  }
  if (st[1].per_sec > 0)
    printf("readers: read side / reentrant = %.2f\n",
           st[0].per_sec / st[1].per_sec);
  return rc || overlap ? 1 : 0;
}

/* W processes on a semaphore of P permits, then on a permit semaphore
 * (watchdog lease), with the same loop: acquisitions/s, worst wait, Jain,
 * and the holders at once (never above P, or the run fails). */
static int scen_semaphore(const config_t *c) {
  int P = c->permits, W = c->workers;
  int64_t hold = c->nhold ? c->hold_us[0] : 1000;
  static const target_t targets[2] = {TGT_SEM, TGT_PSEM};
  bench_stats_t st[2];
  held_count_t cnt[2];
  bool overlap = false;
  int rc = 0;
  bench_stats_header(stdout);
  for (int i = 0; i < 2; i++) {
    memset(&st[i], 0, sizeof st[i]);
    memset(&cnt[i], 0, sizeof cnt[i]);
    run_t r = {.scenario = "semaphore",
               .W = W,
               .target = targets[i],
               .permits = P,
               .hold_us = hold,
               .per_worker = true};
    if (fork_run(c, &r, &overlap, &st[i], &cnt[i]))
      rc = 1;
  }
  for (int i = 0; i < 2; i++) {
    char kase[64];
    snprintf(kase, sizeof kase, "P=%d W=%d H=%" PRId64 "us %s", P, W, hold,
             TARGET_NAMES[targets[i]]);
    long over = atomic_load(&cnt[i].over);
    int peak = atomic_load(&cnt[i].peak);
    printf("semaphore: %-9s %10.1f acquisitions/s, worst wait %.1f ms, "
           "Jain %.3f, at most %d of %d permits held at once%s\n",
           TARGET_NAMES[targets[i]], st[i].per_sec,
           (double)st[i].worst_wait / 1e6, st[i].jain, peak, P,
           over ? " (VIOLATED)" : "");
    csv_row("semaphore", kase, "peak_holders", (double)peak);
    csv_row("semaphore", kase, "over_permits", (double)over);
    if (over) {
      fprintf(stderr,
              "dlock-bench: %ld acquisitions of the %s found more than %d "
              "holders\n",
              over, TARGET_NAMES[targets[i]], P);
      rc = 1;
    }
  }
  return rc || overlap ? 1 : 0;
}

/* The latch scenario's shared page: the round the main process has armed,
 * the waiters that reached it, and every wake-up instant. */
typedef struct latch_shm {
  atomic_int armed;  /* rounds armed so far (round r is armed at r + 1) */
  atomic_int failed; /* waiters that failed */
  atomic_int ready[MAX_ROUNDS];
  atomic_int woke[MAX_ROUNDS];
  int64_t wake_ns[]; /* [waiter * rounds + round]; 0: did not wake */
} latch_shm_t;

static void latch_name(const config_t *c, int round, char *buf, size_t n) {
  snprintf(buf, n, "%.900s:latch:%d", c->name, round);
}

/* Polls *v (bounded by `deadline`) until it reaches `want`. */
static bool await_counter(atomic_int *v, int want, int64_t deadline) {
  for (uint32_t i = 0; i < 100000000u; i++) {
    if (atomic_load(v) >= want)
      return true;
    if (now_ns() >= deadline)
      return false;
    struct timespec ts = {0, 50000}; /* 50 us */
    nanosleep(&ts, NULL);
  }
  return false;
}

/* One waiter process: for each round, wait for it to be armed, say so,
 * await the latch and stamp the wake-up. */
static void latch_waiter(const config_t *c, latch_shm_t *shm, int me,
                         int64_t deadline) {
  dlock_client_t *client = NULL;
  if (new_client(c, 0, &client)) {
    atomic_fetch_add(&shm->failed, 1);
    return;
  }
  for (int r = 0; r < c->rounds; r++) {
    if (!await_counter(&shm->armed, r + 1, deadline))
      break;
    char name[DLOCK_NAME_MAX + 1];
    latch_name(c, r, name, sizeof name);
    dlock_latch_t *l = NULL;
    int rc = dlock_latch_new(client, name, &l);
    atomic_fetch_add(&shm->ready[r], 1);
    int64_t left_ms = (deadline - now_ns()) / NS_PER_MS;
    if (!rc)
      rc = dlock_latch_await(l, left_ms > 1 ? left_ms : 1);
    int64_t t = now_ns();
    dlock_latch_free(l);
    if (rc) {
      fprintf(stderr, "dlock-bench: latch waiter %d round %d: %s (%s)\n", me,
              r, dlock_err_name(rc), dlock_last_error());
      atomic_fetch_add(&shm->failed, 1);
      break;
    }
    shm->wake_ns[(size_t)me * (size_t)c->rounds + (size_t)r] = t;
    atomic_fetch_add(&shm->woke[r], 1);
  }
  dlock_client_free(client);
}

static int cmp_i64_asc(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* R rounds: this process sets a fresh latch to 1, W waiter processes
 * await it, and once every waiter is subscribed to its channel this
 * process counts down. Release latency: from count_down's return to each
 * waiter's wake-up (CLOCK_MONOTONIC, shared by the processes). */
static int scen_latch(const config_t *c) {
  int W = c->waiters, R = c->rounds;
  size_t bytes =
      sizeof(latch_shm_t) + (size_t)W * (size_t)R * sizeof(int64_t);
  latch_shm_t *shm = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shm == MAP_FAILED) {
    perror("dlock-bench: mmap");
    return 1;
  }
  /* the whole run is bounded: 10 s per round at most, 60 s for a start */
  int64_t deadline = now_ns() + 60 * NS_PER_S + (int64_t)R * 10 * NS_PER_S;
  pid_t pids[MAX_WORKERS];
  int nstarted = 0, rc = 0;
  fflush(NULL);
  for (; nstarted < W; nstarted++) {
    pid_t pid = fork();
    if (pid < 0) {
      perror("dlock-bench: fork");
      rc = 1;
      break;
    }
    if (pid == 0) {
      latch_waiter(c, shm, nstarted, deadline);
      _exit(0);
    }
    pids[nstarted] = pid;
  }
  dlock_client_t *client = NULL;
  bench_redis_t *srv = NULL;
  char err[256];
  if (!rc && new_client(c, 0, &client))
    rc = 1;
  if (!rc && bench_redis_open(c->url, &srv, err, sizeof err)) {
    fprintf(stderr, "dlock-bench: %s\n", err);
    rc = 1;
  }
  int64_t *cd_ret = calloc((size_t)R, sizeof *cd_ret);
  int64_t *lat = calloc((size_t)W * (size_t)R, sizeof *lat);
  if (!cd_ret || !lat)
    rc = 1;
  int64_t t0 = now_ns(), cd_call_max = 0;
  int rounds = 0, unconfirmed = 0;
  for (int r = 0; !rc && r < R; r++) {
    char name[DLOCK_NAME_MAX + 1], chan[DLOCK_NAME_MAX + 64];
    latch_name(c, r, name, sizeof name);
    dlock_latch_t *l = NULL;
    bool set = false;
    int lrc = dlock_latch_new(client, name, &l);
    if (!lrc)
      lrc = dlock_latch_try_set_count(l, 1, &set);
    if (lrc || !set) {
      fprintf(stderr, "dlock-bench: latch round %d: cannot set the count: "
                      "%s\n",
              r, lrc ? dlock_err_name(lrc) : "already set");
      dlock_latch_free(l);
      rc = 1;
      break;
    }
    atomic_store(&shm->armed, r + 1);
    int64_t bound = now_ns() + 10 * NS_PER_S;
    if (bound > deadline)
      bound = deadline;
    bool ok = await_counter(&shm->ready[r], W, bound);
    /* every waiter subscribed to the latch's channel (Redisson's layout;
     * one pub/sub connection per waiter process), or 2 s */
    snprintf(chan, sizeof chan, "redisson_countdownlatch__channel__{%s}",
             name);
    long long subs = 0;
    int64_t sub_bound = now_ns() + 2 * NS_PER_S;
    for (uint32_t i = 0; ok && i < 1000000u; i++) {
      if (bench_redis_numsub(srv, chan, &subs) || subs >= W ||
          now_ns() >= sub_bound)
        break;
      struct timespec ts = {0, 50000};
      nanosleep(&ts, NULL);
    }
    if (subs < W)
      unconfirmed++;
    int64_t cd0 = now_ns();
    lrc = ok ? dlock_latch_count_down(l) : DLOCK_ETIMEDOUT;
    cd_ret[r] = now_ns();
    if (cd_ret[r] - cd0 > cd_call_max)
      cd_call_max = cd_ret[r] - cd0;
    dlock_latch_free(l);
    if (lrc || !await_counter(&shm->woke[r], W, bound) ||
        atomic_load(&shm->failed)) {
      fprintf(stderr, "dlock-bench: latch round %d: %s\n", r,
              lrc ? dlock_err_name(lrc) : "not every waiter woke");
      rc = 1;
      break;
    }
    rounds++;
  }
  int64_t elapsed = now_ns() - t0;
  /* let the waiters go (a failed run stops arming rounds: they time out
   * at the deadline at the latest, or are killed below) */
  atomic_store(&shm->armed, R + 1);
  if (reap(pids, nstarted, now_ns() + (rc ? 2 : 30) * NS_PER_S,
           "latch waiter"))
    rc = 1;
  size_t n = 0;
  for (int r = 0; lat && r < rounds; r++)
    for (int w = 0; w < W; w++)
      lat[n++] = shm->wake_ns[(size_t)w * (size_t)R + (size_t)r] - cd_ret[r];
  if (n) {
    qsort(lat, n, sizeof *lat, cmp_i64_asc);
    double p50 = (double)lat[(n - 1) / 2] / 1e3;
    double p99 = (double)lat[(size_t)((double)(n - 1) * 0.99)] / 1e3;
    double mx = (double)lat[n - 1] / 1e3, mn = (double)lat[0] / 1e3;
    double per_s = elapsed > 0 ? rounds * 1e9 / (double)elapsed : 0;
    printf("latch: W=%d waiters, %d rounds, %.1f rounds/s\n", W, rounds,
           per_s);
    printf("latch: release latency (count_down return -> waiter awake) "
           "p50 %.1f us, p99 %.1f us, max %.1f us, min %.1f us "
           "(%zu wake-ups; slowest count_down call %.1f us)\n",
           p50, p99, mx, mn, n, (double)cd_call_max / 1e3);
    if (unconfirmed)
      printf("latch: %d rounds counted down before every waiter was seen "
             "subscribed (2 s bound)\n",
             unconfirmed);
    char kase[64];
    snprintf(kase, sizeof kase, "W=%d", W);
    csv_row("latch", kase, "rounds", rounds);
    csv_row("latch", kase, "rounds_per_s", per_s);
    csv_row("latch", kase, "release_p50_us", p50);
    csv_row("latch", kase, "release_p99_us", p99);
    csv_row("latch", kase, "release_max_us", mx);
    csv_row("latch", kase, "release_min_us", mn);
  }
  free(cd_ret);
  free(lat);
  bench_redis_close(srv);
  dlock_client_free(client);
  munmap(shm, bytes);
  return rc || rounds < R ? 1 : 0;
}

static int scen_threads(const config_t *c) {
  int T = c->threads > 0 ? c->threads : 8;
  int64_t hold = c->nhold ? c->hold_us[0] : 0;
  dlock_client_t *client = NULL;
  if (new_client(c, 0, &client))
    return 1;
  int rc = 0;
  bool overlap = false;
  bench_stats_header(stdout);
  for (int distinct = 0; distinct < 2; distinct++) {
    worker_t *ws = calloc((size_t)T, sizeof *ws);
    if (!ws) {
      rc = 1;
      break;
    }
    snap_t s;
    snap_begin(&s, c);
    int64_t start = now_ns() + 100 * NS_PER_MS;
    int64_t end = start + (int64_t)(c->seconds * 1e9);
    for (int t = 0; t < T; t++) {
      char name[DLOCK_NAME_MAX + 1];
      if (distinct)
        snprintf(name, sizeof name, "%.900s:threads:%d", c->name, t);
      else
        snprintf(name, sizeof name, "%.900s:threads", c->name);
      worker_setup(&ws[t], client, name, t, hold, start, end);
    }
    if (run_threads(ws, T))
      rc = 1;
    snap_end(&s);
    bench_recs_t all;
    bench_recs_init(&all, (size_t)T * MAX_RECORDS);
    if (merge(ws, T, &all))
      rc = 1;
    bench_stats_t st;
    bench_analyse(&all, T, start, end, distinct, &st);
    char kase[64];
    snprintf(kase, sizeof kase, "T=%d %s", T, distinct ? "locks" : "one lock");
    report_case("threads", kase, &st, &s);
    if (write_records(c, &all, distinct ? ".distinct" : ".one"))
      rc = 1;
    if (st.overlaps)
      overlap = true;
    bench_recs_free(&all);
    workers_free(ws, T);
  }
  dlock_client_free(client);
  return rc || overlap ? 1 : 0;
}

/* Acquires k watchdog locks NAME:tag:i on client; handles go to *out. */
static int hold_many(const config_t *c, dlock_client_t *client, const char *tag,
                     long k, dlock_lock_t ***out) {
  dlock_lock_t **locks = calloc((size_t)k, sizeof *locks);
  *out = locks;
  if (!locks)
    return -1;
  for (long i = 0; i < k; i++) {
    char name[DLOCK_NAME_MAX + 1];
    snprintf(name, sizeof name, "%.900s:%s:%ld", c->name, tag, i);
    int rc = dlock_lock_new(client, name, &locks[i]);
    if (!rc)
      rc = dlock_lock_acquire(locks[i], 5000, DLOCK_LEASE_WATCHDOG);
    if (rc) {
      fprintf(stderr, "dlock-bench: lock %ld of %ld: %s (%s)\n", i, k,
              dlock_err_name(rc), dlock_last_error());
      return -1;
    }
  }
  return 0;
}

static void release_many(dlock_lock_t **locks, long k) {
  for (long i = 0; locks && i < k; i++) {
    if (locks[i])
      dlock_lock_release(locks[i]);
    dlock_lock_free(locks[i]);
  }
  free(locks);
}

static double cpu_seconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static int scen_renewal(const config_t *c) {
  static const long defaults[] = {1, 100, 10000};
  const long *ks = c->nlocks ? c->locks : defaults;
  int nk = c->nlocks ? c->nlocks : 3;
  int64_t cycle_ms = c->watchdog_ms / 3;
  int rc = 0;
  printf("renewal: watchdog %" PRId64 " ms (a cycle every %" PRId64
         " ms), %d cycles measured per K\n",
         c->watchdog_ms, cycle_ms, c->cycles);
  printf("%8s %10s %12s %14s %12s %14s %10s\n", "K", "cycles", "scripts/cyc",
         "srv calls/cyc", "reads/cyc", "cpu us/cyc", "lost");
  for (int i = 0; i < nk && !rc; i++) {
    long k = ks[i];
    dlock_client_t *client = NULL;
    if (new_client(c, c->watchdog_ms, &client))
      return 1;
    dlock_lock_t **locks = NULL;
    char tag[32];
    snprintf(tag, sizeof tag, "renew%ld", k);
    if (hold_many(c, client, tag, k, &locks)) {
      release_many(locks, k);
      dlock_client_free(client);
      return 1;
    }
    sleep_ms(cycle_ms); /* let the schedule settle */
    snap_t s;
    snap_begin(&s, c);
    double cpu0 = cpu_seconds();
    int64_t t0 = now_ns();
    sleep_ms(cycle_ms * c->cycles);
    int64_t t1 = now_ns();
    double cpu1 = cpu_seconds();
    snap_end(&s);
    /* every lock must still be ours */
    long lost = 0;
    for (long j = 0; j < k; j++) {
      bool held = false;
      if (dlock_lock_is_held_by_thread(locks[j], &held) || !held)
        lost++;
    }
    double cycles = (double)(t1 - t0) / (double)(cycle_ms * NS_PER_MS);
    if (!s.ok) {
      fprintf(stderr, "dlock-bench: no INFO counts\n");
      rc = 1;
    } else {
      double scripts = (double)bench_info_scripts(&s.before, &s.after);
      double calls = (double)bench_info_calls(&s.before, &s.after);
      /* the second snapshot's own command is one read event */
      double reads = (double)(s.after.reads - s.before.reads - 1);
      double cpu_us = (cpu1 - cpu0) * 1e6;
      printf("%8ld %10.1f %12.2f %14.1f %12.2f %14.1f %10ld\n", k, cycles,
             scripts / cycles, calls / cycles, reads / cycles, cpu_us / cycles,
             lost);
      char kase[32];
      snprintf(kase, sizeof kase, "K=%ld", k);
      csv_row("renewal", kase, "watchdog_ms", (double)c->watchdog_ms);
      csv_row("renewal", kase, "cycles", cycles);
      csv_row("renewal", kase, "scripts_per_cycle", scripts / cycles);
      csv_row("renewal", kase, "server_calls_per_cycle", calls / cycles);
      csv_row("renewal", kase, "reads_per_cycle", reads / cycles);
      csv_row("renewal", kase, "client_cpu_us_per_cycle", cpu_us / cycles);
      csv_row("renewal", kase, "lost", (double)lost);
    }
    if (lost)
      rc = 1;
    release_many(locks, k);
    dlock_client_free(client);
  }
  return rc;
}

typedef struct mem {
  long long heap; /* bytes in use from malloc (arena + mmapped) */
  long long rss;  /* resident bytes */
} mem_t;

static mem_t mem_now(void) {
  mem_t m = {0, 0};
#if defined(__GLIBC__) &&                                                      \
    (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  struct mallinfo2 mi = mallinfo2();
  m.heap = (long long)(mi.uordblks + mi.hblkhd);
#endif
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) {
    long long size = 0, res = 0;
    if (fscanf(f, "%lld %lld", &size, &res) == 2)
      m.rss = res * sysconf(_SC_PAGESIZE);
    fclose(f);
  }
  return m;
}

static int scen_memory(const config_t *c) {
  long k = c->nlocks ? c->locks[0] : 10000;
  dlock_client_t *client = NULL;
  if (new_client(c, 0, &client))
    return 1;
  if (dlock_client_ping(client)) {
    dlock_client_free(client);
    return 1;
  }
  snap_t s;
  snap_begin(&s, c);
  mem_t m0 = mem_now();
  dlock_lock_t **locks = NULL;
  int rc = hold_many(c, client, "mem", k, &locks) ? 1 : 0;
  mem_t m1 = mem_now();
  snap_end(&s);
  bench_info_t held = s.after;
  /* after releasing: what the server keeps per release (unlock latches) */
  release_many(locks, rc ? 0 : k);
  locks = NULL;
  snap_t s2;
  snap_begin(&s2, c);
  snap_end(&s2);
  if (!rc) {
    double heap = (double)(m1.heap - m0.heap) / (double)k;
    double rss = (double)(m1.rss - m0.rss) / (double)k;
    printf("memory: K=%ld held locks\n", k);
    printf("  client heap bytes per held lock   %10.1f\n", heap);
    printf("  client RSS bytes per held lock    %10.1f\n", rss);
    char kase[32];
    snprintf(kase, sizeof kase, "K=%ld", k);
    csv_row("memory", kase, "client_heap_bytes_per_lock", heap);
    csv_row("memory", kase, "client_rss_bytes_per_lock", rss);
    if (s.ok) {
      double srv =
          (double)(held.used_memory - s.before.used_memory) / (double)k;
      printf("  server bytes per held lock        %10.1f\n", srv);
      printf("  server keys per held lock         %10.2f\n",
             (double)(held.keys - s.before.keys) / (double)k);
      csv_row("memory", kase, "server_bytes_per_lock", srv);
      csv_row("memory", kase, "server_keys_per_lock",
              (double)(held.keys - s.before.keys) / (double)k);
    }
    if (s.ok && s2.ok) {
      double left =
          (double)(s2.after.used_memory - s.before.used_memory) / (double)k;
      double keys = (double)(s2.after.keys - s.before.keys) / (double)k;
      printf("  server bytes left per release     %10.1f (%.2f keys: "
             "unlock latches until they expire)\n",
             left, keys);
      csv_row("memory", kase, "server_bytes_left_per_release", left);
      csv_row("memory", kase, "server_keys_left_per_release", keys);
    }
  }
  dlock_client_free(client);
  return rc;
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv) {
  config_t c;
  if (parse_args(argc, argv, &c)) {
    usage(stderr);
    return 2;
  }
  if (c.csv) {
    csv_file = fopen(c.csv, "a");
    if (!csv_file) {
      perror(c.csv);
      return 2;
    }
  }
  if (c.seconds <= 0 && c.scenario)
    c.seconds = 3;
  int rc;
  if (!c.scenario)
    rc = mode_worker(&c);
  else if (strcmp(c.scenario, "uncontended") == 0)
    rc = scen_uncontended(&c);
  else if (strcmp(c.scenario, "contended") == 0)
    rc = scen_contended(&c);
  else if (strcmp(c.scenario, "readers") == 0)
    rc = scen_readers(&c);
  else if (strcmp(c.scenario, "semaphore") == 0)
    rc = scen_semaphore(&c);
  else if (strcmp(c.scenario, "latch") == 0)
    rc = scen_latch(&c);
  else if (strcmp(c.scenario, "threads") == 0)
    rc = scen_threads(&c);
  else if (strcmp(c.scenario, "renewal") == 0)
    rc = scen_renewal(&c);
  else if (strcmp(c.scenario, "memory") == 0)
    rc = scen_memory(&c);
  else if (strcmp(c.scenario, "tls") == 0)
    rc = scen_tls(&c);
  else {
    fprintf(stderr, "dlock-bench: unknown scenario '%s'\n", c.scenario);
    usage(stderr);
    rc = 2;
  }
  if (csv_file && fclose(csv_file) != 0)
    rc = rc ? rc : 1;
  return rc;
}
