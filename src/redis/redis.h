/*
 * redis.h - the Redis backend's private state, shared by redis.c (commands,
 * scripts, the connection pool) and watch.c (the pub/sub connection).
 */
#ifndef DLOCK_REDIS_REDIS_H
#define DLOCK_REDIS_REDIS_H

#include <pthread.h>

#include "core/backend.h"
#include "net/conn.h"
#include "redis/scripts.h"

typedef struct dlock__redis {
  const dlock__endpoint *ep; /* owned by the client, outlives us */
  int64_t connect_timeout_ms;
  int64_t command_timeout_ms;
  char *user;        /* AUTH user, or NULL */
  char *password;    /* AUTH password, or NULL */
  char *client_name; /* CLIENT SETNAME, or NULL */
  int db;
  int pool_size;
  const char *publish; /* "publish" (or "spublish" for sharded pub/sub) */

  pthread_mutex_t pool_mu; /* protects idle[] and nidle only */
  dlock__conn **idle;
  int nidle;

  dlock__conn *watch; /* background thread only */
} dlock__redis;

/* Connects and runs the handshake (AUTH, SELECT, CLIENT SETNAME) within
 * the connect timeout, or sooner when `deadline` (monotonic ms) is. */
int dlock__redis_dial(dlock__redis *r, bool select_db, int64_t deadline,
                      dlock__conn **out);
/* Maps an error reply to a code and detail ("<what>: <server message>"). */
int dlock__redis_error(const redisReply *reply, const char *what);
/* Redisson's `prefix:{name}` (or `prefix:name` when name has a '{'), for
 * the keys and channels Redisson shares. Caller frees. */
char *dlock__redis_prefixed(const char *prefix, const char *name);
/* dlock's own keys and channels: `prefix:{name}`, or `prefix:=name` when
 * name has a '{' (one-to-one, same cluster slot as the lock). */
char *dlock__redis_own_key(const char *prefix, const char *name);

/* watch.c */
int dlock__redis_watch_connect(void *be, int64_t deadline);
void dlock__redis_watch_disconnect(void *be);
int dlock__redis_watch_fd(void *be);
bool dlock__redis_watch_want_write(void *be);
int dlock__redis_watch_flush(void *be);
int dlock__redis_watch_subscribe(void *be, bool subscribe,
                                 const char *const *chans, const size_t *lens,
                                 size_t n);
int dlock__redis_watch_read(void *be, dlock__watch_fn fn, void *ud);

#endif
