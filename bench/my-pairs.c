/*
 * my-pairs.c - the MySQL/MariaDB backend's uncontended cost against the
 * server's own limit, on one private server in one run (docs/MYSQL.md
 * "Cost"):
 *   - round trips/s of `SELECT 1` on one MariaDB Connector/C connection
 *     (the limit),
 *   - pairs/s of the bare SQL a client needs for a lock: one
 *     `SELECT GET_LOCK(name, 0)` and one `SELECT RELEASE_LOCK(name)` on one
 *     connection (the two-statement floor, about half the limit),
 *   - pairs/s of dlock's two statements for a name of more than 64 bytes
 *     sent bare (the name through the server-side rule for long names,
 *     docs/MYSQL.md; a shorter name is sent as it is),
 *   - dlock's pairs/s: dlock_lock_acquire (wait 0, watchdog lease) and
 *     dlock_lock_release on a mysql:// client,
 *   - dlock's permit pairs/s: dlock_permit_sem_acquire (wait 0, watchdog
 *     lease) and dlock_permit_sem_release on a semaphore of 4 permits.
 * Rounds alternate (limit, floor, dlock's SQL, dlock, permits, limit, ...)
 * so that drift of a shared machine falls on all five; the median round of each
 * is printed as a markdown table with this process's CPU per operation
 * (getrusage: the client's threads, not the server's), and the medians
 * (and ranges) of the ratios dlock / SELECT 1 and dlock / bare pairs
 * formed within each round.
 *
 *   my-pairs-bench [N [ROUNDS (1..99)]]     (default 2000 3)
 */
#define _GNU_SOURCE 1

#include <dlock/dlock.h>
#include <mariadb/mysql.h> /* the connector's (the harness has a mysql.h) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "harness.h"
#include "mysql.h" /* tests/harness: th_my_* */

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* this process's CPU (its threads, not the server), microseconds */
static int64_t cpu_us(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 +
         ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
}

static int64_t t0_cpu;
static double last_cpu; /* the last round's client CPU per operation, us */

static int64_t begin(void) {
  t0_cpu = cpu_us();
  return now_us();
}

static double rate(int n, int64_t t0) {
  int64_t us = now_us() - t0;
  last_cpu = (double)(cpu_us() - t0_cpu) / n;
  return us > 0 ? n * 1e6 / (double)us : 0;
}

/* One statement and its result; 0 or -1 after printing the error. */
static int q(MYSQL *c, const char *sql) {
  if (mysql_real_query(c, sql, (unsigned long)strlen(sql))) {
    fprintf(stderr, "%s: %s\n", sql, mysql_error(c));
    return -1;
  }
  MYSQL_RES *r = mysql_store_result(c);
  if (r)
    mysql_free_result(r);
  return 0;
}

static double round_select(MYSQL *c, int n) {
  int64_t t0 = begin();
  for (int i = 0; i < n; i++)
    if (q(c, "SELECT 1"))
      return 0;
  return rate(n, t0);
}

static double round_floor(MYSQL *c, int n) {
  int64_t t0 = begin();
  for (int i = 0; i < n; i++)
    if (q(c, "SELECT GET_LOCK('bench-floor', 0)") ||
        q(c, "SELECT RELEASE_LOCK('bench-floor')"))
      return 0;
  return rate(n, t0);
}

/* the statements of src/mysql/mysql.c's try and release for a name of
 * more than 64 bytes (70 here): the rule of docs/MYSQL.md, bare */
#define BENCH_N                                                                \
  "'bench-sql-long-name-long-name-long-name-long-name-long-name-seventy-by'"
#define BENCH_L                                                                \
  "IF(CHAR_LENGTH(" BENCH_N ") <= 64, " BENCH_N ", CONCAT(LEFT(" BENCH_N       \
  ", 23), '#', LEFT(SHA2(" BENCH_N ", 256), 40)))"
static double round_dlock_sql(MYSQL *c, int n) {
  int64_t t0 = begin();
  for (int i = 0; i < n; i++)
    if (q(c, "SELECT GET_LOCK(" BENCH_L ", 0), CONNECTION_ID()") ||
        q(c, "SELECT RELEASE_LOCK(" BENCH_L ")"))
      return 0;
  return rate(n, t0);
}

static double round_dlock(dlock_lock_t *l, int n) {
  int64_t t0 = begin();
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
  int64_t t0 = begin();
  for (int i = 0; i < n; i++) {
    if (dlock_permit_sem_acquire(sem, 0, DLOCK_LEASE_WATCHDOG, id) != 0 ||
        dlock_permit_sem_release(sem, id) != 0) {
      fprintf(stderr, "dlock permit: %s\n", dlock_last_error());
      return 0;
    }
  }
  return rate(n, t0);
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2000;
  int rounds = argc > 2 ? atoi(argv[2]) : 3;
  if (n < 1 || n > 10000000 || rounds < 1 || rounds > 99) {
    fprintf(stderr, "usage: my-pairs-bench [N [ROUNDS (1..99)]]\n");
    return 2;
  }
  if (!th_my_available()) {
    fprintf(stderr, "my-pairs-bench: no mariadbd (apt-get install "
                    "mariadb-server)\n");
    return 1;
  }
  th_my_t *s = th_my_start();
  if (!s)
    return 1;
  MYSQL *c = mysql_init(NULL);
  unsigned proto = MYSQL_PROTOCOL_TCP;
  if (c) {
    mysql_optionsv(c, MYSQL_OPT_PROTOCOL, &proto);
    mysql_optionsv(c, MYSQL_SET_CHARSET_NAME, "utf8mb4");
  }
  dlock_client_t *cl = NULL;
  dlock_lock_t *l = NULL;
  dlock_permit_sem_t *sem = NULL;
  if (!c ||
      !mysql_real_connect(c, "127.0.0.1", "dlock", th_my_password(), "dlock",
                          (unsigned)th_my_port(s), NULL, 0) ||
      dlock_client_new(&cl, th_my_url(s), NULL) != 0 ||
      dlock_lock_new(cl, "bench-dlock", &l) != 0 ||
      dlock_permit_sem_new(cl, "bench-permits", &sem) != 0 ||
      dlock_permit_sem_try_set_permits(sem, 4, NULL) != 0) {
    fprintf(stderr, "setup: %s %s\n", c ? mysql_error(c) : "out of memory",
            dlock_last_error());
    th_my_stop(s);
    return 1;
  }
  /* per measure (select, floor, dlock's SQL, dlock, permits) and round:
   * rate and client CPU per operation */
  double v[5][99], cpu[5][99], rf[99], rs[99];
  round_dlock(l, n / 10 + 1); /* warm: the pooled connection */
  round_permit(sem, n / 10 + 1);
  int bad = 0;
  for (int r = 0; r < rounds; r++) {
    v[0][r] = round_select(c, n);
    cpu[0][r] = last_cpu;
    v[1][r] = round_floor(c, n);
    cpu[1][r] = last_cpu;
    v[2][r] = round_dlock_sql(c, n);
    cpu[2][r] = last_cpu;
    v[3][r] = round_dlock(l, n);
    cpu[3][r] = last_cpu;
    v[4][r] = round_permit(sem, n);
    cpu[4][r] = last_cpu;
    for (int k = 0; k < 5; k++)
      bad |= v[k][r] == 0;
    rf[r] = v[1][r] > 0 ? v[3][r] / v[1][r] : 0; /* within one round */
    rs[r] = v[0][r] > 0 ? v[3][r] / v[0][r] : 0;
  }
  for (int k = 0; k < 5; k++) {
    qsort(v[k], (size_t)rounds, sizeof v[k][0], cmp);
    qsort(cpu[k], (size_t)rounds, sizeof cpu[k][0], cmp);
  }
  qsort(rf, (size_t)rounds, sizeof rf[0], cmp);
  qsort(rs, (size_t)rounds, sizeof rs[0], cmp);
  int m = rounds / 2;
  double S = v[0][m], F = v[1][m], Q = v[2][m], D = v[3][m], P = v[4][m];
  if (!bad && S > 0 && F > 0) {
    printf("| measure (median of %d rounds of %d) | per second | vs SELECT 1 "
           "| client CPU per operation |\n| --- | --- | --- | --- |\n",
           rounds, n);
    printf("| SELECT 1 round trips, one connection | %.0f | 1.00 | %.1f us "
           "|\n",
           S, cpu[0][m]);
    printf("| bare SQL pairs (GET_LOCK 0 + RELEASE_LOCK) | %.0f | %.2f | %.1f "
           "us |\n",
           F, F / S, cpu[1][m]);
    printf("| dlock's statements for names over 64 bytes (the rule), bare "
           "| %.0f | %.2f | %.1f us |\n",
           Q, Q / S, cpu[2][m]);
    printf("| dlock pairs (acquire wait 0 + release) | %.0f | %.2f (%.2f of "
           "the bare pairs) | %.1f us |\n",
           D, D / S, D / F, cpu[3][m]);
    printf("| dlock permit pairs (permit acquire wait 0 + release, 4 "
           "permits) | %.0f | %.2f (%.2f of the bare pairs) | %.1f us |\n",
           P, P / S, P / F, cpu[4][m]);
    printf("| per round, median (min-max): dlock / SELECT 1 | | %.2f "
           "(%.2f-%.2f) | |\n",
           rs[m], rs[0], rs[rounds - 1]);
    printf("| per round, median (min-max): dlock / bare pairs | | %.2f "
           "(%.2f-%.2f) | |\n",
           rf[m], rf[0], rf[rounds - 1]);
  }
  dlock_permit_sem_free(sem);
  dlock_lock_free(l);
  dlock_client_free(cl);
  mysql_close(c);
  th_my_stop(s);
  return bad ? 1 : 0;
}
