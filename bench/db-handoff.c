/*
 * db-handoff.c - contended hand-off of one lock name between processes on
 * PostgreSQL and on MySQL/MariaDB: dlock against a client that sends the
 * same SQL by hand (bench/peers/python_db_worker.py: psycopg 3, PyMySQL),
 * on one private server per database, in one run (docs/POSTGRES.md and
 * docs/MYSQL.md "Cost", bench/README.md).
 *
 * Coordinator (the default mode): starts a private server with the test
 * harness (tests/harness/pg.c, mysql.c), then per repetition runs the
 * peers one after the other, their order alternating between
 * repetitions: W worker processes of one peer contend for one name for
 * D seconds from a common start instant. Each worker loops: a blocking
 * acquire, the critical section, a release. The critical section is a
 * counter in a shared file (count, last holder, the holder inside): a
 * worker that finds another one inside counts an overlap, and the final
 * count must equal the sum of every worker's sections, so a run that did
 * not exclude is reported as failed. Reported per database and peer
 * (medians over the repetitions): acquisitions/s, hand-offs between
 * workers/s (sections whose previous holder was another worker), the
 * fewest and most acquisitions of one worker, the workers' CPU per
 * acquisition (getrusage in each worker over its loop); and the median of
 * the per-repetition ratios dlock / Python.
 *
 * Worker (`--worker`): one process, one dlock client (dlock_lock_acquire
 * with the time left as its wait, watchdog lease; dlock_lock_release). A
 * section is counted when it starts before the end instant; the loop ends
 * at the end instant or after MAX sections, and each wait ends at the end
 * instant plus a grace of 5 s (the others stop too). The coordinator kills
 * (by PID) a worker still running 30 s after the end.
 *
 *   db-handoff-bench [--db postgres,mysql] [--workers W] [--seconds D]
 *                    [--reps R] [--python PY --peer SCRIPT]
 *   db-handoff-bench --worker URL NAME FILE ID START_MS END_MS MAX
 *
 * Without --python only dlock runs. Times are CLOCK_REALTIME ms (shared by
 * the processes of one machine).
 */
#define _GNU_SOURCE 1

#include <dlock/dlock.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#ifdef TH_HAVE_POSTGRES
#include "pg.h"
#endif
#ifdef TH_HAVE_MYSQL
#include "mysql.h"
#endif

#define MAX_WORKERS 32
#define MAX_REPS 15
#define GRACE_MS 5000
#define KILL_AFTER_MS 30000

static int64_t real_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* this process's CPU, all its threads, microseconds */
static int64_t cpu_us(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 +
         ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
}

static void sleep_until(int64_t t) {
  for (int i = 0; i < 100000; i++) {
    int64_t left = t - real_ms();
    if (left <= 0)
      return;
    th_sleep_ms(left > 50 ? 50 : left);
  }
}

/* ------------------------------------------------------------- the worker */

/* The shared record: count, last holder, holder inside (0: none). */
typedef struct {
  uint64_t count, last, inside;
} rec_t;

static int worker(char **a) {
  const char *url = a[0], *name = a[1], *file = a[2];
  uint64_t id = strtoull(a[3], NULL, 10);
  int64_t start = strtoll(a[4], NULL, 10), end = strtoll(a[5], NULL, 10);
  long max = strtol(a[6], NULL, 10);
  int fd = open(file, O_RDWR);
  if (fd < 0 || id == 0 || max < 1) {
    fprintf(stderr, "worker: bad arguments or %s: %s\n", file, strerror(errno));
    return 2;
  }
  dlock_client_t *c = NULL;
  dlock_lock_t *l = NULL, *warm = NULL;
  char warm_name[300];
  snprintf(warm_name, sizeof warm_name, "%s:warm:%llu", name,
           (unsigned long long)id);
  if (dlock_client_new(&c, url, NULL) != 0 ||
      dlock_lock_new(c, name, &l) != 0 ||
      dlock_lock_new(c, warm_name, &warm) != 0 ||
      dlock_lock_acquire(warm, 0, DLOCK_LEASE_WATCHDOG) != 0 ||
      dlock_lock_release(warm) != 0) {
    fprintf(stderr, "worker %llu: %s\n", (unsigned long long)id,
            dlock_last_error());
    return 1;
  }
  int64_t late = real_ms() - start;
  sleep_until(start);
  int64_t cpu0 = cpu_us();
  long acq = 0, cross = 0, sections = 0, overlaps = 0;
  int rc = 0;
  while (sections < max) {
    int64_t now = real_ms();
    if (now >= end)
      break;
    rc = dlock_lock_acquire(l, end + GRACE_MS - now, DLOCK_LEASE_WATCHDOG);
    if (rc != 0)
      break;
    int64_t in = real_ms();
    rec_t r;
    if (pread(fd, &r, sizeof r, 0) != (ssize_t)sizeof r) {
      rc = -1;
      dlock_lock_release(l);
      break;
    }
    overlaps += r.inside != 0;
    bool other = r.last != 0 && r.last != id;
    r.count++;
    r.last = id;
    r.inside = id;
    ssize_t w = pwrite(fd, &r, sizeof r, 0);
    uint64_t zero = 0;
    ssize_t w2 = pwrite(fd, &zero, sizeof zero, offsetof(rec_t, inside));
    sections++;
    if (in < end) {
      acq++;
      cross += other;
    }
    int rr = dlock_lock_release(l);
    if (w != (ssize_t)sizeof r || w2 != (ssize_t)sizeof zero || rr != 0) {
      rc = rr ? rr : -1;
      break;
    }
  }
  if (rc != 0)
    fprintf(stderr, "worker %llu: %s: %s\n", (unsigned long long)id,
            dlock_strerror(rc),
            rc == -1 ? strerror(errno) : dlock_last_error());
  printf("RESULT acq %ld cross %ld sections %ld overlaps %ld late %lld cpu_us "
         "%lld\n",
         acq, cross, sections, overlaps, (long long)(late > 0 ? late : 0),
         (long long)(cpu_us() - cpu0));
  fflush(stdout);
  dlock_lock_free(warm);
  dlock_lock_free(l);
  dlock_client_free(c);
  close(fd);
  return rc != 0;
}

/* -------------------------------------------------------- the coordinator */

typedef struct {
  double acq, cross;     /* per second */
  double cpu;            /* the workers' CPU per section, us */
  long min_acq, max_acq; /* of one worker */
  bool ok;
} run_t;

static const char *exe_self;
static const char *python, *peer;
static int workers = 4, reps = 3;
static int64_t seconds = 3;

/* One run of W workers of a peer (0 dlock, 1 Python) against url. */
static run_t run_peer(int which, const char *db, const char *url,
                      const char *dir, int rep) {
  run_t out = {0};
  char file[400], name[64];
  snprintf(file, sizeof file, "%s/counter", dir);
  snprintf(name, sizeof name, "handoff-%d-%d", rep, which);
  rec_t zero = {0, 0, 0};
  int fd = open(file, O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || write(fd, &zero, sizeof zero) != (ssize_t)sizeof zero) {
    fprintf(stderr, "%s: %s\n", file, strerror(errno));
    if (fd >= 0)
      close(fd);
    return out;
  }
  int64_t lead = which == 0 ? 1500 : 3000; /* Python imports its client */
  int64_t start = real_ms() + lead, end = start + seconds * 1000;
  char s_start[32], s_end[32], s_max[32], ids[MAX_WORKERS][16];
  char logs[MAX_WORKERS][420];
  snprintf(s_start, sizeof s_start, "%lld", (long long)start);
  snprintf(s_end, sizeof s_end, "%lld", (long long)end);
  snprintf(s_max, sizeof s_max, "%d", 10000000);
  pid_t pids[MAX_WORKERS];
  int n = 0;
  for (int i = 0; i < workers; i++) {
    snprintf(ids[i], sizeof ids[i], "%d", i + 1);
    snprintf(logs[i], sizeof logs[i], "%s/w%d-%d.log", dir, which, i);
    unlink(logs[i]);
    char *dl[] = {(char *)exe_self, "--worker", (char *)url, name,  file,
                  ids[i],           s_start,    s_end,       s_max, NULL};
    char *py[] = {(char *)python, (char *)peer, "--db", (char *)db,
                  (char *)url,    name,         file,   ids[i],
                  s_start,        s_end,        s_max,  NULL};
    pids[i] = th_spawn(which == 0 ? exe_self : python, which == 0 ? dl : py,
                       logs[i], "db-handoff");
    if (pids[i] < 0)
      break;
    n++;
  }
  bool failed = n < workers;
  int left = n;
  int64_t kill_at = end + KILL_AFTER_MS;
  for (int k = 0; k < 1000000 && left > 0; k++) {
    for (int i = 0; i < n; i++) {
      int st;
      if (pids[i] > 0 && waitpid(pids[i], &st, WNOHANG) == pids[i]) {
        pids[i] = 0;
        left--;
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
          failed = true;
      }
    }
    if (left > 0 && real_ms() >= kill_at) {
      for (int i = 0; i < n; i++)
        if (pids[i] > 0) {
          kill(pids[i], SIGKILL);
          waitpid(pids[i], NULL, 0);
          pids[i] = 0;
          fprintf(stderr,
                  "worker %d killed (still running 30 s after the "
                  "end)\n",
                  i + 1);
        }
      failed = true;
      left = 0;
    }
    if (left > 0)
      th_sleep_ms(20);
  }
  long acq = 0, cross = 0, sections = 0, overlaps = 0, cpu = 0;
  out.min_acq = -1;
  for (int i = 0; i < n; i++) {
    FILE *f = fopen(logs[i], "r");
    char line[512];
    bool got = false;
    while (f && fgets(line, sizeof line, f)) {
      long a, c, s, o, late, u;
      if (sscanf(line,
                 "RESULT acq %ld cross %ld sections %ld overlaps %ld late %ld "
                 "cpu_us %ld",
                 &a, &c, &s, &o, &late, &u) == 6) {
        cpu += u;
        got = true;
        if (late > 0) {
          fprintf(stderr, "  %s worker %d was ready %ld ms after the start\n",
                  which ? "python" : "dlock", i + 1, late);
          failed = true;
        }
        acq += a;
        cross += c;
        sections += s;
        overlaps += o;
        out.min_acq = out.min_acq < 0 || a < out.min_acq ? a : out.min_acq;
        out.max_acq = a > out.max_acq ? a : out.max_acq;
      } else if (failed) {
        fprintf(stderr, "  %s worker %d: %s", which ? "python" : "dlock", i + 1,
                line);
      }
    }
    if (f)
      fclose(f);
    failed |= !got;
  }
  rec_t r = {0};
  if (pread(fd, &r, sizeof r, 0) != (ssize_t)sizeof r)
    failed = true;
  close(fd);
  if (overlaps || (long)r.count != sections) {
    fprintf(stderr,
            "%s %s: EXCLUSION VIOLATED: %ld overlaps, counter %llu, "
            "sections %ld\n",
            db, which ? "python" : "dlock", overlaps,
            (unsigned long long)r.count, sections);
    failed = true;
  }
  out.acq = acq / (double)seconds;
  out.cross = cross / (double)seconds;
  out.cpu = sections > 0 ? (double)cpu / (double)sections : 0;
  out.ok = !failed && acq > 0;
  fprintf(stderr,
          "%s %s rep %d: %s, %.0f acquisitions/s, %.0f hand-offs/s, one "
          "worker %.0f-%.0f/s, client CPU %.0f us per acquisition\n",
          db, which ? "python" : "dlock", rep + 1, out.ok ? "ok" : "FAILED",
          out.acq, out.cross, (double)out.min_acq / (double)seconds,
          (double)out.max_acq / (double)seconds, out.cpu);
  return out;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  if (n == 0)
    return 0;
  qsort(v, (size_t)n, sizeof v[0], cmp);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* All repetitions on one database; prints its rows; 0 when every run
 * succeeded. */
static int bench_db(const char *db, const char *url, const char *dir) {
  int npeers = python ? 2 : 1;
  run_t runs[2][MAX_REPS];
  for (int r = 0; r < reps; r++)
    for (int k = 0; k < npeers; k++) {
      int which = npeers == 2 ? (k + r) % 2 : 0;
      runs[which][r] = run_peer(which, db, url, dir, r);
    }
  int bad = 0;
  double ratio_a[MAX_REPS], ratio_c[MAX_REPS];
  int nr = 0;
  for (int r = 0; r < reps; r++)
    if (npeers == 2 && runs[0][r].ok && runs[1][r].ok && runs[1][r].acq > 0 &&
        runs[1][r].cross > 0) {
      ratio_a[nr] = runs[0][r].acq / runs[1][r].acq;
      ratio_c[nr] = runs[0][r].cross / runs[1][r].cross;
      nr++;
    }
  for (int k = 0; k < npeers; k++) {
    double a[MAX_REPS], c[MAX_REPS], lo[MAX_REPS], hi[MAX_REPS], u[MAX_REPS];
    int m = 0;
    for (int r = 0; r < reps; r++) {
      if (!runs[k][r].ok) {
        bad++;
        continue;
      }
      a[m] = runs[k][r].acq;
      c[m] = runs[k][r].cross;
      lo[m] = (double)runs[k][r].min_acq / (double)seconds;
      hi[m] = (double)runs[k][r].max_acq / (double)seconds;
      u[m] = runs[k][r].cpu;
      m++;
    }
    printf("| %s | %s | %d/%d | %.0f | %.0f | %.0f-%.0f | %.0f us |", db,
           k ? "Python" : "dlock", m, reps, median(a, m), median(c, m),
           median(lo, m), median(hi, m), median(u, m));
    if (k == 0 && nr > 0) {
      double ra = median(ratio_a, nr), rc = median(ratio_c, nr);
      printf(" dlock/Python: acq %.2f (%.2f-%.2f), hand-offs %.2f "
             "(%.2f-%.2f) |\n",
             ra, ratio_a[0], ratio_a[nr - 1], rc, ratio_c[0], ratio_c[nr - 1]);
    } else {
      printf(" |\n");
    }
  }
  fflush(stdout);
  return bad;
}

static void usage(void) {
  fprintf(stderr,
          "usage: db-handoff-bench [--db postgres,mysql] [--workers W "
          "(2..%d)] [--seconds D (1..60)] [--reps R (1..%d)] [--python PY "
          "--peer SCRIPT]\n",
          MAX_WORKERS, MAX_REPS);
}

int main(int argc, char **argv) {
  if (argc == 9 && strcmp(argv[1], "--worker") == 0)
    return worker(argv + 2);
  const char *dbs = "postgres,mysql";
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      usage();
      return 2;
    }
    if (strcmp(argv[i], "--db") == 0)
      dbs = v;
    else if (strcmp(argv[i], "--workers") == 0)
      workers = atoi(v);
    else if (strcmp(argv[i], "--seconds") == 0)
      seconds = atoi(v);
    else if (strcmp(argv[i], "--reps") == 0)
      reps = atoi(v);
    else if (strcmp(argv[i], "--python") == 0)
      python = v;
    else if (strcmp(argv[i], "--peer") == 0)
      peer = v;
    else {
      usage();
      return 2;
    }
    i++;
  }
  if (workers < 2 || workers > MAX_WORKERS || seconds < 1 || seconds > 60 ||
      reps < 1 || reps > MAX_REPS || (!python) != (!peer)) {
    usage();
    return 2;
  }
  static char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) {
    fprintf(stderr, "db-handoff-bench: /proc/self/exe: %s\n", strerror(errno));
    return 1;
  }
  self[n] = '\0';
  exe_self = self;
  char dir[] = "/tmp/db-handoff-XXXXXX";
  if (!mkdtemp(dir)) {
    fprintf(stderr, "mkdtemp: %s\n", strerror(errno));
    return 1;
  }
  printf("%d workers on one name, %lld s per run, %d repetitions%s\n\n",
         workers, (long long)seconds, reps,
         python ? ", peers alternating" : " (no Python peer)");
  printf("| database | peer | runs ok | acquisitions/s | hand-offs between "
         "workers/s | one worker's acquisitions/s (fewest-most) | client CPU "
         "per acquisition | |\n"
         "| --- | --- | --- | --- | --- | --- | --- | --- |\n");
  fflush(stdout);
  int bad = 0, ran = 0;
  if (strstr(dbs, "postgres")) {
#ifdef TH_HAVE_POSTGRES
    th_pg_t *s = th_pg_start();
    if (s) {
      bad += bench_db("postgres", th_pg_url(s), dir);
      th_pg_stop(s);
      ran++;
    } else {
      bad++;
    }
#else
    fprintf(stderr, "db-handoff-bench: built without the PostgreSQL harness\n");
    bad++;
#endif
  }
  if (strstr(dbs, "mysql")) {
#ifdef TH_HAVE_MYSQL
    th_my_t *s = th_my_available() ? th_my_start() : NULL;
    if (s) {
      bad += bench_db("mysql", th_my_url(s), dir);
      th_my_stop(s);
      ran++;
    } else {
      fprintf(stderr, "db-handoff-bench: no MariaDB server\n");
      bad++;
    }
#else
    fprintf(stderr, "db-handoff-bench: built without the MySQL harness\n");
    bad++;
#endif
  }
  for (int which = 0; which < 2; which++)
    for (int i = 0; i < workers; i++) {
      char log[420];
      snprintf(log, sizeof log, "%s/w%d-%d.log", dir, which, i);
      unlink(log);
    }
  char file[400];
  snprintf(file, sizeof file, "%s/counter", dir);
  unlink(file);
  rmdir(dir);
  return bad || !ran ? 1 : 0;
}
