/*
 * idle.h - a pool of idle connections that the server ends after a time
 * of their own (PostgreSQL's idle_session_timeout, MySQL's wait_timeout),
 * for the backends whose holds each keep a connection (a session lock).
 *
 * Why it is not bounded by the pool size alone. Each hold keeps its
 * connection, so a program holding 64 locks at once has 64 connections;
 * when it releases them and takes them again (an event loop keeping 64
 * operations in flight), a pool of 8 would close 56 and dial 56 again,
 * each dial a TCP and authentication exchange (SCRAM costs milliseconds)
 * where the try costs one round trip. So every connection given back with
 * a timeout is kept (up to DLOCK__IDLE_MAX), for as long as the server
 * keeps it: one idle for its timeout, less a margin, is closed (taken,
 * swept by the event loop, or dropped as it would be lent), as the server
 * would close it. Connections with no timeout (0) are kept up to `keep`
 * (the client's pool size), as before.
 *
 * Lent newest first: the oldest age out at the bottom.
 *
 * Threads: any; the pool's own mutex guards it, a leaf (nothing is called
 * under it). Connections are closed with close_fn outside it.
 */
#ifndef DLOCK_CORE_IDLE_H
#define DLOCK_CORE_IDLE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define DLOCK__IDLE_MAX 1024

typedef struct dlock__idle_conn {
  void *conn;
  int64_t timeout_ms; /* the server's idle timeout for it, 0 none */
  int64_t since;      /* idle since (monotonic ms) */
} dlock__idle_conn;

typedef struct dlock__idle_pool {
  pthread_mutex_t mu;
  dlock__idle_conn *v; /* oldest first */
  int n, cap;
  int keep; /* connections without a timeout kept */
  void (*close_fn)(void *conn);
  /* optional: false for a connection known to be broken (not lent) */
  bool (*usable)(void *conn);
} dlock__idle_pool;

void dlock__idle_init(dlock__idle_pool *ip, int keep,
                      void (*close_fn)(void *conn), bool (*usable)(void *conn));
/* Closes every pooled connection. */
void dlock__idle_destroy(dlock__idle_pool *ip);
/* The newest usable connection not near its timeout (*timeout_ms set to
 * its timeout), or NULL; what it passes over is closed. */
void *dlock__idle_take(dlock__idle_pool *ip, int64_t now, int64_t *timeout_ms);
/* Pools conn (timeout_ms: the server's idle timeout for it, 0 none), or
 * closes it when the pool has no room for it. */
void dlock__idle_put(dlock__idle_pool *ip, void *conn, int64_t timeout_ms,
                     int64_t now);
/* Closes the connections near their timeout; returns when the next one
 * will be (DLOCK__NEVER: none). For the event loop's prepare hook. */
int64_t dlock__idle_sweep(dlock__idle_pool *ip, int64_t now);

#endif
