/*
 * backends.h - any backend the suite can run against, started by name.
 *
 * The backend-neutral suite (tests/integration/test_common.c) asks for
 * "the backend of this run" and gets a URL; ctest runs each of its cases
 * once per backend, naming it in TH_BACKEND (redis, sentinel, cluster,
 * zookeeper, etcd, postgres, mysql) and
 * the member count in TH_MEMBERS (ZooKeeper and etcd; default 1). The
 * servers are real processes started by the backend's own harness
 * (harness.c, zk.c, etcd.c), on free loopback ports, stopped by PID.
 *
 * A build without a backend's server or client library leaves that
 * backend out of the suite (CMake decides); asking for it here anyway
 * prints why and returns NULL.
 *
 * Threads: start and stop from the main thread.
 */
#ifndef DLOCK_TEST_BACKENDS_H
#define DLOCK_TEST_BACKENDS_H

#include <stdbool.h>

typedef struct th_backend th_backend_t;

/* Starts the backend named by $TH_BACKEND (default "redis"). NULL after
 * printing why. */
th_backend_t *th_backend_start(void);
/* "redis", "sentinel", "redis-cluster", "zookeeper", "etcd", "postgres",
 * "mysql" (the backend's own name, which its refusals carry) */
const char *th_backend_name(const th_backend_t *b);
/* The URL a client of this backend is created with. */
const char *th_backend_url(const th_backend_t *b);
/* Stops every process of the backend; accepts NULL. */
void th_backend_stop(th_backend_t *b);

#endif
