/*
 * zk.h - private ZooKeeper ensembles for dlock's tests.
 *
 * A test starts a standalone server (1 member) or a 3-member ensemble of
 * Debian's `zookeeper` package (one JVM per member, QuorumPeerMain), on free
 * 127.0.0.1 ports (client, peer, election; no admin server), each member in
 * its own directory under one mkdtemp directory, logging there. The harness
 * stops every member it started by PID when the process exits (atexit), on
 * SIGINT/SIGTERM/SIGHUP, and - through PR_SET_PDEATHSIG - when the test
 * dies any other way. Member logs reach the test's stderr only when a start
 * fails.
 *
 * Servers tick every 200 ms and accept session timeouts from 400 ms to
 * 120 s, so that a test can expire a session within a few seconds.
 *
 * Threads: start and up from the main thread (the death signal is tied to
 * the thread that forked the JVM); the other calls from any one thread.
 * Only the process that started an ensemble stops it.
 *
 * Environment: TH_JAVA (default /usr/bin/java or `java` on PATH),
 * TH_ZK_CLASSPATH (default /usr/share/java/zookeeper.jar plus slf4j-simple
 * for the logs).
 */
#ifndef DLOCK_TEST_ZK_H
#define DLOCK_TEST_ZK_H

typedef struct th_zk th_zk_t;

/* 1 (standalone) or 3 members; waits until every member serves (4lw
 * `srvr` answers with a mode). NULL after printing why (and the members'
 * log tails) on stderr. */
th_zk_t *th_zk_start(int members);
/* "zookeeper://127.0.0.1:P1[,127.0.0.1:P2,127.0.0.1:P3]" */
const char *th_zk_url(const th_zk_t *z);
int th_zk_members(const th_zk_t *z);
/* The client port of member i (-1 if i is out of range). */
int th_zk_port(const th_zk_t *z, int i);
/* Index of the member that says it leads (a standalone server leads), -1
 * when none does. */
int th_zk_leader(th_zk_t *z);
/* SIGKILL member i and reap it. 0/-1. */
int th_zk_kill9(th_zk_t *z, int i);
/* Starts member i again on its ports and dir, and waits (at most 60 s)
 * until it serves. 0/-1. */
int th_zk_up(th_zk_t *z, int i);
/* SIGSTOP / SIGCONT member i. 0/-1. th_zk_pause returns once every thread
 * of the member's JVM has stopped (its /proc state 'T'; at most 10 s), so
 * that nothing sent after it is answered before th_zk_resume. */
int th_zk_pause(th_zk_t *z, int i);
int th_zk_resume(th_zk_t *z, int i);
/* Kills every member, removes the directory, frees z. Accepts NULL. */
void th_zk_stop(th_zk_t *z);

#endif
