/*
 * with_etcd.c - runs a command next to a private etcd cluster (1 or 3
 * members) started by the test harness (etcd.h), then stops it.
 *
 *   th_with_etcd [--members 1|3] -- COMMAND [ARG...]
 *
 * The command gets DLOCK_ETCD_URL (etcd://127.0.0.1:P1[,...], dlock's URL)
 * and DLOCK_ETCD_ENDPOINTS (http://127.0.0.1:P1[,...], etcdctl's and Go
 * clientv3's endpoints). Exit status: the command's (128+S when killed by
 * S), 70 when the cluster did not start. The members are stopped by PID
 * whatever happens (etcd.h).
 */
#define _GNU_SOURCE 1
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "etcd.h"
#include "harness.h"

int main(int argc, char **argv) {
  int members = 3, i = 1;
  if (i + 1 < argc && strcmp(argv[i], "--members") == 0) {
    members = atoi(argv[i + 1]);
    i += 2;
  }
  if (i < argc && strcmp(argv[i], "--") == 0)
    i++;
  if (i >= argc) {
    fprintf(stderr,
            "usage: th_with_etcd [--members 1|3] -- COMMAND [ARG...]\n");
    return 64;
  }
  th_etcd_t *e = th_etcd_start(members);
  if (!e)
    return 70;
  setenv("DLOCK_ETCD_URL", th_etcd_url(e), 1);
  setenv("DLOCK_ETCD_ENDPOINTS", th_etcd_endpoints(e), 1);
  int rc = th_run_command(argv + i);
  th_etcd_stop(e);
  return rc;
}
