/*
 * etcd-transport.c - the measurement behind the etcd backend's transport
 * choice (src/etcd/transport.c, docs/ETCD.md "Transport"): uncontended
 * acquire+release latency and client CPU per pair, on one private 3-member
 * cluster in one run, of
 *   - dlock on the gRPC gateway (JSON over HTTP/1.1, libcurl + json-c),
 *   - Go's clientv3 concurrency.Mutex over gRPC (HTTP/2, protobuf), when
 *     $ETCD_GO_BENCH names the binary built from bench/etcd-transport/
 *     (`cd bench/etcd-transport && go build -o gobench .`).
 * Rounds alternate (dlock, Go, dlock, Go...) so that drift of a shared
 * machine falls on both. CPU is the client process's user+system time
 * (every thread, the backend's own included), divided by the pairs.
 *
 *   etcd-transport-bench [PAIRS [ROUNDS]]     (default 300 2)
 */
#define _GNU_SOURCE 1

#include <dlock/dlock.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "etcd.h"
#include "harness.h"

static int64_t cpu_us(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 +
         ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
}

static int dlock_round(const char *url, int pairs) {
  dlock_client_t *c = NULL;
  dlock_lock_t *l = NULL;
  if (dlock_client_new(&c, url, NULL) != 0 ||
      dlock_lock_new(c, "bench-dlock", &l) != 0) {
    fprintf(stderr, "dlock: %s\n", dlock_last_error());
    return 1;
  }
  for (int i = 0; i < 20; i++) {
    dlock_lock_acquire(l, 5000, DLOCK_LEASE_WATCHDOG);
    dlock_lock_release(l);
  }
  int64_t c0 = cpu_us(), t0 = th_now_ms();
  for (int i = 0; i < pairs; i++) {
    if (dlock_lock_acquire(l, 5000, DLOCK_LEASE_WATCHDOG) != 0 ||
        dlock_lock_release(l) != 0) {
      fprintf(stderr, "dlock: %s\n", dlock_last_error());
      return 1;
    }
  }
  int64_t ms = th_now_ms() - t0, cpu = cpu_us() - c0;
  printf("dlock (gateway): %d pairs, %.0f us/pair, CPU %.0f us/pair\n", pairs,
         ms * 1000.0 / pairs, (double)cpu / pairs);
  dlock_lock_free(l);
  dlock_client_free(c);
  return 0;
}

int main(int argc, char **argv) {
  int pairs = argc > 1 ? atoi(argv[1]) : 300;
  int rounds = argc > 2 ? atoi(argv[2]) : 2;
  const char *go = getenv("ETCD_GO_BENCH");
  th_etcd_t *e = th_etcd_start(3);
  if (!e)
    return 1;
  char endpoints[300];
  snprintf(endpoints, sizeof endpoints, "%s", th_etcd_endpoints(e));
  for (char *p; (p = strstr(endpoints, "http://")) != NULL;)
    memmove(p, p + 7, strlen(p + 7) + 1);
  printf("3-member etcd 3.4 on 127.0.0.1 (%s)\n", endpoints);
  fflush(stdout);
  int rc = 0;
  for (int r = 0; r < rounds && rc == 0; r++) {
    rc = dlock_round(th_etcd_url(e), pairs);
    fflush(stdout);
    if (rc == 0 && go && *go) {
      char cmd[600];
      snprintf(cmd, sizeof cmd, "'%s' '%s' %d", go, endpoints, pairs);
      rc = system(cmd) == 0 ? 0 : 1;
    } else if (rc == 0 && r == 0) {
      printf("(Go clientv3: skipped, ETCD_GO_BENCH not set)\n");
    }
  }
  th_etcd_stop(e);
  return rc;
}
