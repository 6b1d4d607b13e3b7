/*
 * etcd.h - private etcd clusters for dlock's tests.
 *
 * A test starts a cluster of 1 or 3 members of Debian's etcd-server
 * (/usr/bin/etcd, or $TH_ETCD_SERVER), each on two free 127.0.0.1 ports
 * (client and peer) with its data and log in one mkdtemp directory. The
 * harness stops every member it started when the process exits (atexit),
 * on SIGINT/SIGTERM/SIGHUP, and - through PR_SET_PDEATHSIG - when the test
 * dies any other way. Timeouts are tuned for fast tests (heartbeat 50 ms,
 * election 500 ms).
 *
 * Threads: start/up should be called from the main thread (a member's
 * death signal is tied to the thread that forked it); the other calls may
 * be made from any thread, one at a time per cluster.
 */
#ifndef DLOCK_TEST_ETCD_H
#define DLOCK_TEST_ETCD_H

#include <stdbool.h>
#include <stdint.h>

typedef struct th_etcd th_etcd_t;

/* 1 or 3 members; NULL after printing why. Waits until every member
 * answers /health with a leader (at most 20 s). */
th_etcd_t *th_etcd_start(int members);
/* TLS on the client ports (peers stay plain: one host). Paths are copied.
 * The harness's own requests trust ca_file and, with client_cert_auth,
 * present client_cert_file/client_key_file. */
typedef struct th_etcd_tls {
  const char *cert_file, *key_file; /* the members' certificate and key */
  const char *ca_file; /* the CA the harness trusts; with client_cert_auth
                        * also the members' --trusted-ca-file */
  bool client_cert_auth; /* --client-cert-auth */
  const char *client_cert_file, *client_key_file;
} th_etcd_tls_t;
th_etcd_t *th_etcd_start_tls(int members, const th_etcd_tls_t *tls);
/* "etcd://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3" (client ports;
 * "etcds://" with TLS). */
const char *th_etcd_url(const th_etcd_t *e);
int th_etcd_members(const th_etcd_t *e);
/* Member i's client port. */
int th_etcd_client_port(const th_etcd_t *e, int i);
/* "http://127.0.0.1:P1,..." (https:// with TLS) of the members, for
 * etcdctl --endpoints. */
const char *th_etcd_endpoints(const th_etcd_t *e);
/* Index of the leader as the running members see it, -1 if none. */
int th_etcd_leader(th_etcd_t *e);
/* SIGKILL member i and reap it. 0 or -1. */
int th_etcd_kill9(th_etcd_t *e, int i);
/* Restarts member i on its ports and data dir, waits until it serves. */
int th_etcd_up(th_etcd_t *e, int i);
/* SIGSTOP / SIGCONT member i. 0 or -1. */
int th_etcd_pause(th_etcd_t *e, int i);
int th_etcd_resume(th_etcd_t *e, int i);
/* Stops every member, removes the directory, frees e. Accepts NULL. */
void th_etcd_stop(th_etcd_t *e);

#endif
