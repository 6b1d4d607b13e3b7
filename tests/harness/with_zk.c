/*
 * with_zk.c - runs a command next to a private ZooKeeper server (or a
 * 3-member ensemble) started by the test harness (zk.h), then stops it.
 *
 *   th_with_zk [--members 1|3] -- COMMAND [ARG...]
 *
 * The command gets DLOCK_ZK_URL (zookeeper://127.0.0.1:P[,...]) and
 * DLOCK_ZK_HOSTS (127.0.0.1:P[,...], a ZooKeeper connect string). Exit
 * status: the command's (128+S when killed by S), 70 when the server did
 * not start. The server is stopped by PID whatever happens (zk.h).
 */
#define _GNU_SOURCE 1
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "zk.h"

int main(int argc, char **argv) {
  int members = 1, i = 1;
  if (i + 1 < argc && strcmp(argv[i], "--members") == 0) {
    members = atoi(argv[i + 1]);
    i += 2;
  }
  if (i < argc && strcmp(argv[i], "--") == 0)
    i++;
  if (i >= argc) {
    fprintf(stderr, "usage: th_with_zk [--members 1|3] -- COMMAND [ARG...]\n");
    return 64;
  }
  th_zk_t *z = th_zk_start(members);
  if (!z)
    return 70;
  const char *url = th_zk_url(z);
  setenv("DLOCK_ZK_URL", url, 1);
  setenv("DLOCK_ZK_HOSTS", url + strlen("zookeeper://"), 1);
  int rc = th_run_command(argv + i);
  th_zk_stop(z);
  return rc;
}
