/*
 * conn.h - one connection to a RESP server: socket, deadlines, parser.
 *
 * A conn is a non-blocking socket (TCP or Unix) behind a small transport
 * table (plain, or TLS through OpenSSL on the same path), an
 * output buffer into which commands are written as RESP directly (no
 * printf), and a hiredis redisReader that parses the replies.
 *
 * Two ways to drive it:
 *  - blocking with a deadline: dlock__conn_exec() flushes what was appended
 *    and reads N replies, waiting in poll() until the deadline;
 *  - non-blocking: dlock__conn_write_some() / dlock__conn_read_some() /
 *    dlock__conn_take_reply() and dlock__conn_fd(), so that one thread can
 *    write to several servers at once and gather replies with one poll()
 *    (Redlock, Cluster fan-out, and the pub/sub listener use this).
 *
 * A conn is used by one thread at a time (the pool hands it out). Any I/O
 * or protocol failure marks it broken; a broken conn is only good for
 * dlock__conn_close().
 */
#ifndef DLOCK_NET_CONN_H
#define DLOCK_NET_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "net/endpoint.h"
#include "net/tls.h"

typedef struct dlock__conn dlock__conn;

/* Connects to ep before deadline (monotonic ms). Errors:
 * DLOCK_EUNAVAILABLE (refused, unknown host, ...), DLOCK_EIOTIMEOUT. */
int dlock__conn_connect(dlock__conn **out, const dlock__endpoint *ep,
                        int64_t deadline);
/* The same over TLS when tls is not NULL: the handshake (certificate and
 * name verification unless tls is insecure) ends before the deadline too.
 * More errors: DLOCK_ETLS (detail says why), DLOCK_ENOTSUP (a Unix
 * socket). tls must outlive the conn. */
int dlock__conn_connect_tls(dlock__conn **out, const dlock__endpoint *ep,
                            const dlock__tls *tls, int64_t deadline);
void dlock__conn_close(dlock__conn *c);

/* Appends one command (argument vector) to the output buffer. */
int dlock__conn_append(dlock__conn *c, int argc, const char **argv,
                       const size_t *argvlen);
/* Flushes the output, then reads n replies into replies[0..n) (each to be
 * freed with freeReplyObject). On failure no reply is returned and the conn
 * is broken. */
int dlock__conn_exec(dlock__conn *c, int64_t deadline, size_t n,
                     redisReply **replies);

/* A check that the calling thread's blocking waits (connect, the TLS
 * handshake, dlock__conn_exec) make every `every_ms` while they wait for
 * the server: a nonzero return (an error code, its message set by the
 * check) ends the wait with that code, and the conn is broken (a request
 * sent on it has an unknown outcome). The check runs with no watch set.
 * Scoped: set it, wait, put the previous one back (the one set returns
 * it). Used by Sentinel (redis.c): a wait on a master the sentinels no
 * longer name ends at once, not at its deadline. */
typedef struct dlock__conn_watch {
  int (*check)(void *ud);
  void *ud;
  int64_t every_ms;
} dlock__conn_watch;
dlock__conn_watch dlock__conn_watch_set(dlock__conn_watch w);

/* Non-blocking primitives. write_some: 0 when all is written or it would
 * block (check dlock__conn_want_write), <0 on error. read_some: reads what
 * the socket has, 0 or <0 (closed, error). take_reply: 1 and *out when a
 * whole reply is buffered, 0 when none, <0 on a protocol error. */
int dlock__conn_write_some(dlock__conn *c);
bool dlock__conn_want_write(const dlock__conn *c);
int dlock__conn_read_some(dlock__conn *c);
int dlock__conn_take_reply(dlock__conn *c, redisReply **out);
int dlock__conn_fd(const dlock__conn *c);
/* The poll events to wait for before the next read_some / write_some:
 * POLLIN, plus POLLOUT while output is pending - or, on a TLS conn, what
 * OpenSSL said the stalled call needs (a read may need POLLOUT). Call both
 * write_some (when want_write) and read_some on any readiness. */
short dlock__conn_poll_events(const dlock__conn *c);
bool dlock__conn_is_tls(const dlock__conn *c);
bool dlock__conn_broken(const dlock__conn *c);
/* Marks it broken: it will be closed, never reused (a server that answers
 * as it should not, e.g. a demoted master). */
void dlock__conn_set_broken(dlock__conn *c);
/* A number its owner keeps with it (0 at connect). */
uint32_t dlock__conn_tag(const dlock__conn *c);
void dlock__conn_set_tag(dlock__conn *c, uint32_t tag);
/* True when the peer already closed or reset the connection (checked
 * without blocking); used before reusing an idle pooled conn. */
bool dlock__conn_peer_closed(dlock__conn *c);
/* "host:port" or the socket path, for messages. */
const char *dlock__conn_peer(const dlock__conn *c);

#endif
