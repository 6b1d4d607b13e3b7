/*
 * itest.h - helpers shared by the integration tests (header-only).
 *
 * Clients with small timeouts, Redis-side views of a lock (channel name,
 * subscriber count, owner string), a recorder for the lock-lost callback and
 * a background acquirer ("async"): a thread that acquires a lock, reports
 * when and how, holds it until told to release, and releases it itself
 * (locks are owned per thread); one async try or release run to its
 * callback, the client's callbacks run as an event loop's.
 */
#ifndef DLOCK_TEST_ITEST_H
#define DLOCK_TEST_ITEST_H

#include "check.h"
#include "harness.h"

#include <dlock/dlock.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

/* ---------------------------------------------------------------- clients */

typedef struct it_client_cfg {
  int64_t connect_ms;  /* 0 = 2000 */
  int64_t command_ms;  /* 0 = 2000 */
  int64_t watchdog_ms; /* 0 = library default (30000) */
  int64_t outage_grace_ms; /* 0 = library default (30000); < 0: off */
  dlock_lost_fn lost;
  void *lost_ud;
  const char *url; /* NULL = the server's */
  const char *holder_info; /* dlock_options_set_holder_info, or NULL */
} it_client_cfg_t;

static inline dlock_client_t *it_client_cfg(th_server_t *s,
                                            const it_client_cfg_t *cfg) {
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(
      o, cfg->connect_ms ? cfg->connect_ms : 2000));
  CHECK_OK(dlock_options_set_command_timeout(
      o, cfg->command_ms ? cfg->command_ms : 2000));
  if (cfg->watchdog_ms)
    CHECK_OK(dlock_options_set_watchdog_timeout(o, cfg->watchdog_ms));
  if (cfg->outage_grace_ms)
    CHECK_OK(dlock_options_set_outage_grace(
        o, cfg->outage_grace_ms < 0 ? 0 : cfg->outage_grace_ms));
  if (cfg->lost)
    CHECK_OK(dlock_options_set_lost_callback(o, cfg->lost, cfg->lost_ud));
  if (cfg->holder_info)
    CHECK_OK(dlock_options_set_holder_info(o, cfg->holder_info));
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new(&c, cfg->url ? cfg->url : s->url, o));
  CHECK(c != NULL);
  dlock_options_free(o);
  return c;
}

/* A client with 2 s timeouts and the default 30 s watchdog. */
static inline dlock_client_t *it_client(th_server_t *s) {
  it_client_cfg_t cfg = {0};
  return it_client_cfg(s, &cfg);
}

static inline dlock_lock_t *it_lock(dlock_client_t *c, const char *name) {
  dlock_lock_t *l = NULL;
  CHECK_OK(dlock_lock_new(c, name, &l));
  CHECK(l != NULL);
  return l;
}

/* "<client-id>:<tid>" */
static inline void it_owner(dlock_client_t *c, uint64_t tid, char *buf,
                            size_t n) {
  snprintf(buf, n, "%s:%llu", dlock_client_id(c), (unsigned long long)tid);
}

/* ------------------------------------------------------------ Redis views */

/* Redisson's channel for the reentrant lock `name`. */
static inline void it_channel(const char *name, char *buf, size_t n) {
  if (strchr(name, '{'))
    snprintf(buf, n, "redisson_lock__channel:%s", name);
  else
    snprintf(buf, n, "redisson_lock__channel:{%s}", name);
}

/* Subscribers of a channel (`how`: "NUMSUB", or "SHARDNUMSUB" for a
 * sharded channel), -1 on failure. */
static inline int64_t it_subscribers(th_server_t *s, const char *how,
                                     const char *channel) {
  redisReply *r = th_redis_cmd(s, "PUBSUB %s %s", how, channel);
  int64_t n = -1;
  if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
      r->element[1]->type == REDIS_REPLY_INTEGER)
    n = r->element[1]->integer;
  if (r)
    freeReplyObject(r);
  return n;
}

/* Subscribers of a channel (PUBSUB NUMSUB), -1 on failure. */
static inline int64_t it_numsub(th_server_t *s, const char *channel) {
  return it_subscribers(s, "NUMSUB", channel);
}

/* How many channels matching `pattern` have subscribers (PUBSUB CHANNELS;
 * -1 on failure). */
static inline int64_t it_channels(th_server_t *s, const char *pattern) {
  redisReply *r = th_redis_cmd(s, "PUBSUB CHANNELS %s", pattern);
  int64_t n = r && r->type == REDIS_REPLY_ARRAY ? (int64_t)r->elements : -1;
  if (r)
    freeReplyObject(r);
  return n;
}

/* A connection subscribed to every channel by pattern (PSUBSCRIBE *), as a
 * monitoring tool would be: PUBLISH then counts a receiver on every
 * channel. Free it with redisFree(). */
static inline redisContext *it_pattern_monitor(th_server_t *s) {
  redisContext *mon = th_redis_connect(s);
  CHECK(mon);
  redisReply *r = redisCommand(mon, "PSUBSCRIBE *");
  CHECK(r && r->type == REDIS_REPLY_ARRAY);
  freeReplyObject(r);
  return mon;
}

/* Waits (bounded) until the lock's channel has >= min subscribers: the
 * observable sign that a waiter is waiting. */
static inline bool it_wait_subscribers(th_server_t *s, const char *name,
                                       int64_t min, int64_t timeout_ms) {
  char ch[DLOCK_NAME_MAX + 64];
  it_channel(name, ch, sizeof ch);
  bool ok;
  TH_WAIT_FOR(ok, it_numsub(s, ch) >= min, timeout_ms);
  return ok;
}

/* HGET name field as an integer; -1 when absent, INT64_MIN on error. */
static inline int64_t it_hget_int(th_server_t *s, const char *name,
                                  const char *field) {
  redisReply *r = th_redis_cmd(s, "HGET %s %s", name, field);
  int64_t v = INT64_MIN;
  if (r && r->type == REDIS_REPLY_NIL)
    v = -1;
  else if (r && r->type == REDIS_REPLY_STRING)
    v = strtoll(r->str, NULL, 10);
  if (r)
    freeReplyObject(r);
  return v;
}

/* A lost callback that prints the loss and counts it in *(atomic_int *)ud
 * (dlock_options_set_lost_callback(o, it_count_lost, &counter)). */
static inline void it_count_lost(void *ud, const char *name, uint64_t tid,
                                 dlock_lost_reason_t reason) {
  (void)tid;
  printf("lost: '%s' (reason %d)\n", name, (int)reason);
  atomic_fetch_add((atomic_int *)ud, 1);
}

/* docs/ACL.md's rule for lock names that start with "app:" (and hold no
 * '{'), word for word: one server, and what a cluster adds. */
#define IT_ACL_COMMANDS                                                        \
  "-@all +evalsha +eval +ping +subscribe +unsubscribe +exists +hexists "     \
  "+hget +pttl +get +publish +pubsub|numsub +time +type +del +set +incr "    \
  "+incrby +decr +decrby +hset +hdel +hgetall +hincrby +hkeys +hlen "        \
  "+pexpire +rpush +lpop +lindex +lrange +lrem +zadd +zcount +zincrby "      \
  "+zrange +zrangebyscore +zrem +zremrangebyscore +zscore +role +wait"
#define IT_ACL_PATTERNS                                                        \
  "resetkeys ~app:* ~{app:* ~redisson_*{app:* ~dlock_lock_*{app:* "           \
  "resetchannels &redisson_*{app:* &dlock_lock_*{app:*"
#define IT_ACL_CLUSTER                                                         \
  "+cluster|slots +asking +ssubscribe +sunsubscribe +spublish "              \
  "+pubsub|shardnumsub"

static inline bool it_exists(th_server_t *s, const char *name) {
  return th_redis_int(s, "EXISTS %s", name) == 1;
}

/* Keys in the database other than release latches
 * (redisson_unlock_latch:{name}:<request-id>, REDIS-LAYOUT.md's idempotent
 * release), which must carry a short expiry. -1 on failure. */
static inline int64_t it_lock_keys(th_server_t *s) {
  redisReply *r = th_redis_cmd(s, "KEYS *");
  if (!r || r->type != REDIS_REPLY_ARRAY) {
    if (r)
      freeReplyObject(r);
    return -1;
  }
  int64_t n = 0;
  for (size_t i = 0; i < r->elements; i++) {
    const char *k = r->element[i]->str;
    if (strncmp(k, "redisson_unlock_latch:", 22) == 0) {
      int64_t pttl = th_redis_int(s, "PTTL %s", k);
      CHECKF(pttl == -2 || (pttl > 0 && pttl <= 60000),
             "release latch %s has PTTL %lld", k, (long long)pttl);
    } else {
      n++;
    }
  }
  freeReplyObject(r);
  return n;
}

/* Keys without an expiry (what a crashed or sloppy client would leave
 * behind for good). -1 on failure. */
static inline int64_t it_persistent_keys(th_server_t *s) {
  redisReply *r = th_redis_cmd(s, "KEYS *");
  if (!r || r->type != REDIS_REPLY_ARRAY) {
    if (r)
      freeReplyObject(r);
    return -1;
  }
  int64_t n = 0;
  for (size_t i = 0; i < r->elements; i++)
    if (th_redis_int(s, "PTTL %s", r->element[i]->str) == -1)
      n++;
  freeReplyObject(r);
  return n;
}

/* Waits (bounded) for a renewal of `name` after this call: a PTTL higher
 * than the first sample minus the time since, by more than 100 ms. */
static inline bool it_wait_renewed(th_server_t *s, const char *name,
                                   int64_t timeout_ms) {
  int64_t t1 = th_now_ms();
  int64_t p1 = th_redis_int(s, "PTTL %s", name);
  if (p1 <= 0)
    return false;
  bool ok;
  TH_WAIT_FOR(ok,
              th_redis_int(s, "PTTL %s", name) > p1 - (th_now_ms() - t1) + 100,
              timeout_ms);
  return ok;
}

/* ------------------------------------------------------- lost callback */

typedef struct it_lost {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int count;
  char name[DLOCK_NAME_MAX + 1];
  uint64_t tid;
  dlock_lost_reason_t reason;
  int64_t at_ms;
} it_lost_t;

static inline void it_lost_init(it_lost_t *l) {
  memset(l, 0, sizeof *l);
  pthread_mutex_init(&l->mu, NULL);
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(&l->cv, &a);
  pthread_condattr_destroy(&a);
}

static inline void it_lost_cb(void *ud, const char *name, uint64_t tid,
                              dlock_lost_reason_t reason) {
  it_lost_t *l = ud;
  pthread_mutex_lock(&l->mu);
  l->count++;
  snprintf(l->name, sizeof l->name, "%s", name ? name : "(null)");
  l->tid = tid;
  l->reason = reason;
  l->at_ms = th_now_ms();
  pthread_cond_broadcast(&l->cv);
  pthread_mutex_unlock(&l->mu);
}

/* Waits until the callback ran at least n times; false after timeout_ms. */
static inline bool it_lost_wait(it_lost_t *l, int n, int64_t timeout_ms) {
  struct timespec dl;
  clock_gettime(CLOCK_MONOTONIC, &dl);
  dl.tv_sec += timeout_ms / 1000;
  dl.tv_nsec += (timeout_ms % 1000) * 1000000;
  if (dl.tv_nsec >= 1000000000) {
    dl.tv_sec++;
    dl.tv_nsec -= 1000000000;
  }
  pthread_mutex_lock(&l->mu);
  int rc = 0;
  while (l->count < n && rc == 0)
    rc = pthread_cond_timedwait(&l->cv, &l->mu, &dl);
  bool ok = l->count >= n;
  pthread_mutex_unlock(&l->mu);
  return ok;
}

static inline int it_lost_count(it_lost_t *l) {
  pthread_mutex_lock(&l->mu);
  int n = l->count;
  pthread_mutex_unlock(&l->mu);
  return n;
}

/* ------------------------------------------------ background acquirer */

typedef struct it_async {
  dlock_lock_t *lock;
  int64_t wait_ms, lease_ms;
  bool release_at_once; /* release right after acquiring */
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool go_release;     /* guarded by mu */
  atomic_int done;     /* acquire returned */
  atomic_int finished; /* thread is about to exit */
  int rc, release_rc;
  uint64_t tid;
  int64_t t_start, t_done;
  char err[512];
} it_async_t;

static inline void *it_async_main(void *arg) {
  it_async_t *a = arg;
  a->tid = dlock_thread_id();
  a->t_start = th_now_ms();
  a->rc = dlock_lock_acquire(a->lock, a->wait_ms, a->lease_ms);
  a->t_done = th_now_ms();
  snprintf(a->err, sizeof a->err, "%s", dlock_last_error());
  atomic_store(&a->done, 1);
  a->release_rc = -999;
  if (a->rc == DLOCK_OK) {
    if (!a->release_at_once) {
      pthread_mutex_lock(&a->mu);
      while (!a->go_release)
        pthread_cond_wait(&a->cv, &a->mu);
      pthread_mutex_unlock(&a->mu);
    }
    a->release_rc = dlock_lock_release(a->lock);
  }
  atomic_store(&a->finished, 1);
  return NULL;
}

static inline void it_async_start(it_async_t *a, dlock_lock_t *l,
                                  int64_t wait_ms, int64_t lease_ms,
                                  bool release_at_once) {
  memset(a, 0, sizeof *a);
  a->lock = l;
  a->wait_ms = wait_ms;
  a->lease_ms = lease_ms;
  a->release_at_once = release_at_once;
  pthread_mutex_init(&a->mu, NULL);
  pthread_cond_init(&a->cv, NULL);
  CHECK(pthread_create(&a->th, NULL, it_async_main, a) == 0);
}

/* Waits until the acquire returned; false after timeout_ms. */
static inline bool it_async_wait(it_async_t *a, int64_t timeout_ms) {
  bool ok;
  TH_WAIT_FOR(ok, atomic_load(&a->done), timeout_ms);
  return ok;
}

/* Lets the thread release (if it holds) and joins it (bounded). Returns the
 * release's code (-999 when it did not hold). */
static inline int it_async_finish(it_async_t *a) {
  pthread_mutex_lock(&a->mu);
  a->go_release = true;
  pthread_cond_broadcast(&a->cv);
  pthread_mutex_unlock(&a->mu);
  bool ok;
  TH_WAIT_FOR(ok, atomic_load(&a->finished), 15000);
  CHECKF(ok, "background acquirer did not finish");
  pthread_join(a->th, NULL);
  return a->release_rc;
}

/* ------------------------------------------------------ child processes */

/* Waits (bounded) for a child of ours to exit, *st = its wait status;
 * false (after killing that pid) when it did not exit in time. */
static inline bool it_waitpid_bounded(pid_t pid, int64_t timeout_ms, int *st) {
  bool ok;
  TH_WAIT_FOR(ok, waitpid(pid, st, WNOHANG) == pid, timeout_ms);
  if (!ok) {
    kill(pid, SIGKILL);
    waitpid(pid, st, 0);
  }
  return ok;
}

/* Runs fn(arg) in a forked child that exits with 0 when fn returns (a
 * failed CHECK exits 1). Fork before the parent starts any thread (a
 * client's background thread included): TSan cannot start threads in a
 * child forked from a threaded process. */
static inline pid_t it_spawn(void (*fn)(void *), void *arg) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    fn(arg);
    fflush(stdout);
    fflush(stderr);
    _exit(0);
  }
  return pid;
}

/* Waits (bounded) for a spawned child; on timeout kills it and fails.
 * Returns the raw wait status. */
static inline int it_spawn_wait(pid_t pid, int64_t timeout_ms) {
  int st = 0;
  CHECKF(it_waitpid_bounded(pid, timeout_ms, &st),
         "child %d did not exit within %lld ms", (int)pid,
         (long long)timeout_ms);
  return st;
}

/* A child that exited with status 0. */
static inline bool it_child_ok(int st) {
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* A child process forked before the parent starts any thread (as above)
 * that runs fn(arg) only once the parent says go (it_child_go), so the
 * parent can set the scene first, and _exits with fn's result. */
typedef struct it_child {
  pid_t pid;
  int go; /* write end of the gate */
} it_child_t;

static inline void it_child_fork(it_child_t *ch, int (*fn)(void *), void *arg) {
  int p[2];
  CHECK(pipe(p) == 0);
  fflush(stdout);
  fflush(stderr);
  ch->pid = fork();
  CHECK(ch->pid >= 0);
  if (ch->pid == 0) {
    close(p[1]);
    char b;
    ssize_t n = read(p[0], &b, 1); /* EOF (parent gone) also ends the wait */
    _exit(n == 1 ? fn(arg) : 99);
  }
  close(p[0]);
  ch->go = p[1];
}

static inline void it_child_go(it_child_t *ch) {
  CHECK(write(ch->go, "g", 1) == 1);
  close(ch->go);
  ch->go = -1;
}

/* Waits (bounded) for a gated child; kills it on timeout. Its exit status,
 * or -1 when it had to be killed or died by a signal. */
static inline int it_child_wait(it_child_t *ch, int64_t timeout_ms) {
  if (ch->go >= 0) {
    close(ch->go);
    ch->go = -1;
  }
  int st = 0;
  if (!it_waitpid_bounded(ch->pid, timeout_ms, &st))
    return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#endif /* DLOCK_TEST_ITEST_H */
