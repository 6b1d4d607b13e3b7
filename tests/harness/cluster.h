/*
 * cluster.h - a Redis Cluster for the tests: three masters, and with
 * th_cluster_start_replicated one replica of each, every node a harness
 * server (harness.c: free 127.0.0.1 ports, stopped by PID) with
 * cluster-enabled, joined by `redis-cli --cluster create`.
 *
 * Both return once every node says cluster_state:ok and every replica's
 * link to its master is up (at most 30 s). node[i] is the master of the
 * i-th third of the slots, replica[i] its replica. Main thread only, as
 * the harness's servers.
 */
#ifndef DLOCK_TEST_CLUSTER_H
#define DLOCK_TEST_CLUSTER_H

#include "harness.h"

#define TH_CLUSTER_MASTERS 3

typedef struct th_cluster {
  th_server_t *node[TH_CLUSTER_MASTERS];
  th_server_t *replica[TH_CLUSTER_MASTERS]; /* NULL without replicas */
  /* "redis-cluster://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3" */
  char url[256];
} th_cluster_t;

/* NULL (after printing why) on failure. */
th_cluster_t *th_cluster_start(void);
th_cluster_t *th_cluster_start_replicated(void);
/* Three masters with `extra` config lines (NULL-terminated) on each. */
th_cluster_t *th_cluster_start_conf(const char *const *extra);
/* Three masters with TLS ports too (certs_dir's server.crt/.key, ca.crt:
 * certs.h) and tls-cluster on, so CLUSTER SLOTS asked over TLS names TLS
 * ports; url lists the TLS ports (the harness keeps the plain ones). */
th_cluster_t *th_cluster_start_tls(const char *certs_dir);
/* Stops every node; accepts NULL. */
void th_cluster_stop(th_cluster_t *c);

#endif
