/*
 * cluster.h - a Redis Cluster for the tests: three masters (no replicas),
 * each a harness server (harness.c: free 127.0.0.1 ports, stopped by PID)
 * with cluster-enabled, joined by `redis-cli --cluster create`.
 *
 * th_cluster_start returns once every node says cluster_state:ok (at most
 * 20 s). Main thread only, as the harness's servers.
 */
#ifndef DLOCK_TEST_CLUSTER_H
#define DLOCK_TEST_CLUSTER_H

#include "harness.h"

#define TH_CLUSTER_MASTERS 3

typedef struct th_cluster {
  th_server_t *node[TH_CLUSTER_MASTERS];
  /* "redis-cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3" */
  char url[256];
} th_cluster_t;

/* NULL (after printing why) on failure. */
th_cluster_t *th_cluster_start(void);
/* Stops every node; accepts NULL. */
void th_cluster_stop(th_cluster_t *c);

#endif
