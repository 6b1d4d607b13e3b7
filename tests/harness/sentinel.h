/*
 * sentinel.h - a Sentinel-managed master for the tests: one master, one
 * replica and three sentinels (redis-server --sentinel) monitoring it with
 * a quorum of 2 and a 2 s down-after, each a harness server (harness.c:
 * free 127.0.0.1 ports, stopped by PID).
 *
 * Why not 1 s: a sentinel pings each instance once a second and, after a
 * failover, reconnects to the new master only a second after its last
 * attempt on the old one, while it dates the new master's first ping from
 * the switch. With a down-after of 1 s a sentinel can call the healthy new
 * master down in the very tick its first ping is sent, and the others'
 * "down" answers about the old master (kept for 5 s) make that an
 * objective down at once: a second failover, and the grants made on the
 * new master before a replica had them are gone.
 *
 * th_sentinels_start returns once the replica is in sync and every
 * sentinel knows the two others (only then can a failover happen), at most
 * 20 s. Main thread only, as the harness's servers.
 */
#ifndef DLOCK_TEST_SENTINEL_H
#define DLOCK_TEST_SENTINEL_H

#include "harness.h"

#define TH_SENTINELS 3
#define TH_SENTINEL_MASTER "dlockmaster"

typedef struct th_sentinels {
  th_server_t *master, *replica, *sent[TH_SENTINELS];
  /* "redis-sentinel://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/dlockmaster" */
  char url[512];
} th_sentinels_t;

/* NULL (after printing why) on failure. */
th_sentinels_t *th_sentinels_start(void);
/* The same with passwords (either may be NULL): data_pw for the master
 * and the replica (requirepass, masterauth; the sentinels' auth-pass),
 * sentinel_pw for the sentinels (requirepass, sentinel-pass). The harness
 * AUTHs its own connections with them. */
th_sentinels_t *th_sentinels_start_auth(const char *data_pw,
                                        const char *sentinel_pw);
/* The same, with extra config lines (NULL-terminated, or NULL) for the
 * data nodes and for the sentinels. */
th_sentinels_t *th_sentinels_start_conf(const char *data_pw,
                                        const char *sentinel_pw,
                                        const char *const *data_extra,
                                        const char *const *sentinel_extra);
/* The same over TLS: every node has a TLS port too, with certs_dir's
 * server.crt/.key and ca.crt (certs.h); the sentinels name the master's
 * TLS port, the replica replicates over TLS, and url lists the sentinels'
 * TLS ports. The harness itself keeps the plain ports. */
th_sentinels_t *th_sentinels_start_tls(const char *certs_dir);
/* Stops every server of it; accepts NULL. */
void th_sentinels_stop(th_sentinels_t *t);

/* Prints, for a failed run, what the sentinels logged as events (+sdown,
 * +switch-master, ...) and the data nodes' role changes, in log order per
 * process. */
void th_sentinels_events(const th_sentinels_t *t, FILE *out);

#endif
