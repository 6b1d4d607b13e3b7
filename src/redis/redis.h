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
  dlock__endpoint ep_parsed; /* from the URL given to open */
  const dlock__endpoint *ep; /* = &ep_parsed */
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
/* Redisson's suffixName: `{name}:suffix`, or `name:suffix` when name has a
 * '{'. Caller frees. */
char *dlock__redis_suffixed(const char *name, const char *suffix);
/* dlock's own keys and channels: `prefix:{name}`, or `prefix:=name` when
 * name has a '{' (one-to-one, same cluster slot as the lock). */
char *dlock__redis_own_key(const char *prefix, const char *name);

#define DLOCK__REDIS_MAX_ARGS 24
/* Most items renewed by one script call. */
#define DLOCK__REDIS_RENEW_BATCH 500

/* Commands and scripts (redis.c). A command or script runs on a pooled
 * connection in one round trip; an error reply becomes a code with detail.
 * Script argv[0..2] are filled in; argv[3..] hold keys, then arguments.
 * `retry_safe`: one resend on a fresh connection if the first one broke
 * (idempotent scripts only). */
int dlock__redis_command(dlock__redis *r, int argc, const char **argv,
                         redisReply **reply);
int dlock__redis_script(dlock__redis *r, const dlock__script *s, int nkeys,
                        int argc, const char **argv, bool retry_safe,
                        redisReply **reply);
int dlock__redis_append_cmd(dlock__conn *c, int argc, const char **argv);
int dlock__redis_append_script(dlock__conn *c, const dlock__script *s,
                               bool body, int nkeys, int argc,
                               const char **argv, size_t *lens);
bool dlock__redis_is_noscript(const redisReply *rep);
int dlock__redis_pool_get_until(dlock__redis *r, int64_t until,
                                dlock__conn **out);
void dlock__redis_pool_put(dlock__redis *r, dlock__conn *c);
/* DLOCK_EPROTO "<what>: unexpected reply"; frees rep. */
int dlock__redis_unexpected(redisReply *rep, const char *what);

/* locks.c: every lock kind */
char *dlock__redis_lock_channel(void *be, dlock_lock_kind_t kind,
                                const char *name, const char *owner);
char *dlock__redis_lock_grant_channel(void *be, dlock_lock_kind_t kind,
                                      const char *name, const char *client_id);
int dlock__redis_lock_acquire(void *be, const dlock__acquire *a, int64_t *pttl,
                              int64_t *token);
int dlock__redis_lock_leave(void *be, const dlock__acquire *a, uint64_t seq,
                            int64_t *token);
int dlock__redis_lock_release(void *be, dlock_lock_kind_t kind,
                              const char *name, const char *owner,
                              int64_t lease_ms, const char *request_id,
                              bool watching);
int dlock__redis_lock_force_release(void *be, dlock_lock_kind_t kind,
                                    const char *name, bool *deleted);
int dlock__redis_lock_renew(void *be, dlock__renewal *items, size_t n,
                            int64_t lease_ms, int64_t deadline);
int dlock__redis_lock_query(void *be, dlock_lock_kind_t kind, const char *name,
                            const char *owner, dlock__lock_query q,
                            int64_t *out);
int dlock__redis_lock_state(void *be, dlock_lock_kind_t kind, const char *name,
                            dlock_lock_state_t **out);

/* sync.c: semaphores, permit semaphores, count-down latches */
char *dlock__redis_sync_channel(void *be, dlock__sync_kind kind,
                                const char *name);
int dlock__redis_sem_set(void *be, const char *name, int64_t permits,
                         bool *set);
int dlock__redis_sem_add(void *be, const char *name, int64_t n);
int dlock__redis_sem_acquire(void *be, const char *name, int64_t permits);
int dlock__redis_sem_release(void *be, const char *name, int64_t permits);
int dlock__redis_sem_available(void *be, dlock__sync_kind kind,
                               const char *name, int64_t *out);
int dlock__redis_sem_delete(void *be, dlock__sync_kind kind, const char *name,
                            bool *existed);
int dlock__redis_psem_acquire(void *be, const char *name, const char *id,
                              int64_t lease_ms, int64_t *retry_in_ms);
int dlock__redis_psem_release(void *be, const char *name, const char *id);
int dlock__redis_psem_state(void *be, const char *name,
                            dlock_sem_state_t **out);
int dlock__redis_latch_set(void *be, const char *name, int64_t count,
                           bool *set);
int dlock__redis_latch_count_down(void *be, const char *name);
int dlock__redis_latch_count(void *be, const char *name, int64_t *out);
int dlock__redis_latch_delete(void *be, const char *name, bool *existed);

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
