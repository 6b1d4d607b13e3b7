/*
 * with_topologies.c - runs a command next to a Sentinel-managed master and
 * a Redis Cluster, both started by the test harness (sentinel.h: a master,
 * a replica, three sentinels; cluster.h: three masters), then stops them.
 *
 *   th_with_topologies -- COMMAND [ARG...]
 *
 * The command gets:
 *   DLOCK_SENTINEL_URL    redis-sentinel://127.0.0.1:S1,...:S3/dlockmaster
 *   DLOCK_SENTINEL_ADDRS  redis://127.0.0.1:S1,redis://...:S3 (the sentinels,
 *                         as Redisson's addSentinelAddress takes them)
 *   DLOCK_SENTINEL_MASTER the master's name
 *   DLOCK_CLUSTER_URL     redis-cluster://127.0.0.1:P1,...:P3
 *   DLOCK_CLUSTER_ADDRS   redis://127.0.0.1:P1,... (Redisson's node addresses)
 * Exit status: the command's (128+S when killed by S), 70 when a topology
 * did not start. Every server is stopped by PID whatever happens.
 */
#define _GNU_SOURCE 1
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cluster.h"
#include "sentinel.h"

/* "redis://127.0.0.1:P1,redis://127.0.0.1:P2,..." from the ports. */
static void addrs(char *out, size_t n, th_server_t *const *servers, int k) {
  size_t used = 0;
  out[0] = '\0';
  for (int i = 0; i < k && used < n; i++)
    used += (size_t)snprintf(out + used, n - used, "%sredis://127.0.0.1:%d",
                             i ? "," : "", servers[i]->port);
}

int main(int argc, char **argv) {
  int i = 1;
  if (i < argc && strcmp(argv[i], "--") == 0)
    i++;
  if (i >= argc) {
    fprintf(stderr, "usage: th_with_topologies -- COMMAND [ARG...]\n");
    return 64;
  }
  th_sentinels_t *s = th_sentinels_start();
  th_cluster_t *c = s ? th_cluster_start() : NULL;
  if (!s || !c) {
    th_cluster_stop(c);
    th_sentinels_stop(s);
    return 70;
  }
  char buf[512];
  setenv("DLOCK_SENTINEL_URL", s->url, 1);
  addrs(buf, sizeof buf, s->sent, TH_SENTINELS);
  setenv("DLOCK_SENTINEL_ADDRS", buf, 1);
  setenv("DLOCK_SENTINEL_MASTER", TH_SENTINEL_MASTER, 1);
  setenv("DLOCK_CLUSTER_URL", c->url, 1);
  addrs(buf, sizeof buf, c->node, TH_CLUSTER_MASTERS);
  setenv("DLOCK_CLUSTER_ADDRS", buf, 1);
  int rc = th_run_command(argv + i);
  th_cluster_stop(c);
  th_sentinels_stop(s);
  return rc;
}
