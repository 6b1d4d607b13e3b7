/*
 * pg-pairs.c - the PostgreSQL backend's uncontended cost against the
 * server's own limit, on one private server in one run (docs/POSTGRES.md
 * "Cost"):
 *   - round trips/s of `SELECT 1` on one libpq connection (the limit),
 *   - pairs/s of the bare SQL a client needs for a lock: one
 *     pg_try_advisory_lock and one pg_advisory_unlock on one connection
 *     (the two-statement floor, about half the limit),
 *   - pairs/s of dlock's statements that also set the lease and owner (a
 *     connection's first hold), sent bare,
 *   - dlock's pairs/s: dlock_lock_acquire (wait 0, watchdog lease) and
 *     dlock_lock_release,
 *   - dlock's permit pairs/s: dlock_permit_sem_acquire (wait 0, watchdog
 *     lease) and dlock_permit_sem_release on a semaphore of 4 permits.
 * Rounds alternate (limit, floor, dlock, limit, ...) so that drift of a
 * shared machine falls on all three; the median round of each is printed.
 *
 *   pg-pairs-bench [N [ROUNDS]]     (default 2000 3)
 */
#define _GNU_SOURCE 1

#include <dlock/dlock.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "pg.h"

static double rate(int n, int64_t t0) {
  int64_t ms = th_now_ms() - t0;
  return ms > 0 ? n * 1000.0 / (double)ms : 0;
}

static double round_select(PGconn *c, int n) {
  int64_t t0 = th_now_ms();
  for (int i = 0; i < n; i++)
    PQclear(PQexec(c, "SELECT 1"));
  return rate(n, t0);
}

static double round_floor(PGconn *c, int n) {
  const char *v[1] = {"bench-floor"};
  int64_t t0 = th_now_ms();
  for (int i = 0; i < n; i++) {
    PQclear(PQexecParams(c,
                         "SELECT pg_try_advisory_lock(hashtextextended($1, "
                         "0))",
                         1, NULL, v, NULL, NULL, 0));
    PQclear(PQexecParams(c,
                         "SELECT pg_advisory_unlock(hashtextextended($1, 0))",
                         1, NULL, v, NULL, NULL, 0));
  }
  return rate(n, t0);
}

/* dlock's statements that set the lease and owner (a connection's first
 * hold, src/postgres/postgres.c), bare */
static double round_dlock_sql(PGconn *c, int n) {
  const char *v[3] = {"bench-sql", "30000", "bench:1"};
  int64_t t0 = th_now_ms();
  for (int i = 0; i < n; i++) {
    PQclear(PQexecParams(
        c,
        "SELECT CASE WHEN pg_try_advisory_lock(hashtextextended($1, 0)) "
        "THEN set_config('idle_session_timeout', $2, false) IS NOT NULL AND "
        "set_config('application_name', $3, false) IS NOT NULL "
        "ELSE false END, pg_backend_pid()",
        3, NULL, v, NULL, NULL, 0));
    PQclear(PQexecParams(c,
                         "SELECT pg_advisory_unlock(hashtextextended($1, 0)), "
                         "set_config('idle_session_timeout', '0', false), "
                         "set_config('application_name', 'dlock', false)",
                         1, NULL, v, NULL, NULL, 0));
  }
  return rate(n, t0);
}

static double round_dlock(dlock_lock_t *l, int n) {
  int64_t t0 = th_now_ms();
  for (int i = 0; i < n; i++) {
    if (dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG) != 0 ||
        dlock_lock_release(l) != 0) {
      fprintf(stderr, "dlock: %s\n", dlock_last_error());
      return 0;
    }
  }
  return rate(n, t0);
}

static double round_permit(dlock_permit_sem_t *sem, int n) {
  char id[DLOCK_PERMIT_ID_LEN + 1];
  int64_t t0 = th_now_ms();
  for (int i = 0; i < n; i++) {
    if (dlock_permit_sem_acquire(sem, 0, DLOCK_LEASE_WATCHDOG, id) != 0 ||
        dlock_permit_sem_release(sem, id) != 0) {
      fprintf(stderr, "dlock permit: %s\n", dlock_last_error());
      return 0;
    }
  }
  return rate(n, t0);
}

static void quiet(void *arg, const char *msg) {
  (void)arg;
  (void)msg;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2000;
  int rounds = argc > 2 ? atoi(argv[2]) : 3;
  if (n < 1 || rounds < 1 || rounds > 15) {
    fprintf(stderr, "usage: pg-pairs-bench [N [ROUNDS (1..15)]]\n");
    return 2;
  }
  th_pg_t *s = th_pg_start();
  if (!s)
    return 1;
  PGconn *c = PQconnectdb(th_pg_url(s));
  PQsetNoticeProcessor(c, quiet, NULL);
  dlock_client_t *cl = NULL;
  dlock_lock_t *l = NULL;
  dlock_permit_sem_t *sem = NULL;
  if (PQstatus(c) != CONNECTION_OK ||
      dlock_client_new(&cl, th_pg_url(s), NULL) != 0 ||
      dlock_lock_new(cl, "bench-dlock", &l) != 0 ||
      dlock_permit_sem_new(cl, "bench-permits", &sem) != 0 ||
      dlock_permit_sem_try_set_permits(sem, 4, NULL) != 0) {
    fprintf(stderr, "setup: %s %s\n", PQerrorMessage(c), dlock_last_error());
    return 1;
  }
  double sel[15], flo[15], dl[15], ds[15], pm[15];
  round_dlock(l, n / 10 + 1); /* warm: the pooled connection */
  round_permit(sem, n / 10 + 1);
  for (int r = 0; r < rounds; r++) {
    sel[r] = round_select(c, n);
    flo[r] = round_floor(c, n);
    ds[r] = round_dlock_sql(c, n);
    dl[r] = round_dlock(l, n);
    pm[r] = round_permit(sem, n);
  }
  qsort(sel, (size_t)rounds, sizeof sel[0], cmp);
  qsort(flo, (size_t)rounds, sizeof flo[0], cmp);
  qsort(dl, (size_t)rounds, sizeof dl[0], cmp);
  qsort(ds, (size_t)rounds, sizeof ds[0], cmp);
  qsort(pm, (size_t)rounds, sizeof pm[0], cmp);
  double S = sel[rounds / 2], F = flo[rounds / 2], D = dl[rounds / 2],
         Q = ds[rounds / 2], P = pm[rounds / 2];
  printf("| measure (median of %d rounds of %d) | per second | vs SELECT 1 "
         "|\n| --- | --- | --- |\n",
         rounds, n);
  printf("| SELECT 1 round trips, one connection | %.0f | 1.00 |\n", S);
  printf("| bare SQL pairs (try lock + unlock) | %.0f | %.2f |\n", F, F / S);
  printf("| dlock's statements that set the lease and owner, bare | %.0f | "
         "%.2f |\n",
         Q, Q / S);
  printf("| dlock pairs (acquire wait 0 + release) | %.0f | %.2f (%.2f of "
         "the bare pairs) |\n",
         D, D / S, D / F);
  printf("| dlock permit pairs (permit acquire wait 0 + release, 4 permits) "
         "| %.0f | %.2f |\n",
         P, P / S);
  dlock_permit_sem_free(sem);
  dlock_lock_free(l);
  dlock_client_free(cl);
  PQfinish(c);
  th_pg_stop(s);
  return 0;
}
