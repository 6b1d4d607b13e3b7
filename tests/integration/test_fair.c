/*
 * test_fair.c - the fair lock (DLOCK_FAIR) as a user sees it.
 *
 * Design note: the order of a fair lock is the server's queue
 * (redisson_lock_queue:{name}); every case starts waiters one at a time and
 * waits until the queue shows each one (LLEN) before starting the next, so
 * the arrival order is known, then checks the order of grants. Waiters in
 * other processes are forked children with their own clients; they report
 * through a shared anonymous mapping. The "Redisson" side of the interop
 * case runs RFairLock's acquire as REDIS-LAYOUT.md describes it, written for
 * this test. Every wait is bounded.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "itest.h"

#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define WD DLOCK_LEASE_WATCHDOG
#define NWAIT 5

static dlock_client_t *fair_client(th_server_t *s, int64_t thread_wait,
                                   int64_t watchdog) {
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 2000));
  CHECK_OK(dlock_options_set_command_timeout(o, 2000));
  if (thread_wait)
    CHECK_OK(dlock_options_set_fair_thread_wait(o, thread_wait));
  if (watchdog)
    CHECK_OK(dlock_options_set_watchdog_timeout(o, watchdog));
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new(&c, s->url, o));
  dlock_options_free(o);
  return c;
}

static dlock_lock_t *fair_lock(dlock_client_t *c, const char *name) {
  dlock_lock_t *l = NULL;
  CHECK_OK(dlock_lock_new_kind(c, name, DLOCK_FAIR, &l));
  CHECK(dlock_lock_kind(l) == DLOCK_FAIR);
  return l;
}

static int64_t queue_len(th_server_t *s, const char *name) {
  return th_redis_int(s, "LLEN redisson_lock_queue:{%s}", name);
}

static bool wait_queue_len(th_server_t *s, const char *name, int64_t n) {
  bool ok;
  TH_WAIT_FOR(ok, queue_len(s, name) == n, 5000);
  return ok;
}

/* Grants recorded in order, shared between processes. */
typedef struct order_log {
  atomic_int n;
  int who[64];
} order_log_t;

static order_log_t *order_log_new(void) {
  order_log_t *o = mmap(NULL, sizeof *o, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(o != MAP_FAILED);
  memset(o, 0, sizeof *o);
  return o;
}

static void order_note(order_log_t *o, int who) {
  int i = atomic_fetch_add(&o->n, 1);
  if (i < 64)
    o->who[i] = who;
}

/* ------------------------------------------------------------ threads */

typedef struct fair_waiter {
  dlock_lock_t *lock;
  order_log_t *log;
  int who;
  int64_t wait_ms;
  int rc;
  int64_t t_done;
  pthread_t th;
  atomic_int done;
} fair_waiter_t;

static void *fair_waiter_main(void *arg) {
  fair_waiter_t *w = arg;
  w->rc = dlock_lock_acquire(w->lock, w->wait_ms, WD);
  w->t_done = th_now_ms();
  if (w->rc == DLOCK_OK) {
    order_note(w->log, w->who);
    th_sleep_ms(20); /* hold a little: the next must really wait */
    CHECK_OK(dlock_lock_release(w->lock));
  }
  atomic_store(&w->done, 1);
  return NULL;
}

static void fair_waiter_start(fair_waiter_t *w, dlock_lock_t *l,
                              order_log_t *log, int who, int64_t wait_ms) {
  memset(w, 0, sizeof *w);
  w->lock = l;
  w->log = log;
  w->who = who;
  w->wait_ms = wait_ms;
  CHECK(pthread_create(&w->th, NULL, fair_waiter_main, w) == 0);
}

static void fair_waiter_join(fair_waiter_t *w) {
  bool ok;
  TH_WAIT_FOR(ok, atomic_load(&w->done), 15000);
  CHECKF(ok, "waiter %d did not finish", w->who);
  pthread_join(w->th, NULL);
}

/* Waiters on threads of one client (each thread is its own owner) are
 * granted in arrival order. */
static void t_order_threads(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = fair_client(s, 0, 0);
  dlock_lock_t *l = fair_lock(c, "fair-threads");
  order_log_t *log = order_log_new();
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  fair_waiter_t w[NWAIT];
  for (int i = 0; i < NWAIT; i++) {
    fair_waiter_start(&w[i], l, log, i, 10000);
    CHECKF(wait_queue_len(s, "fair-threads", i + 1), "waiter %d not queued",
           i);
  }
  CHECK_OK(dlock_lock_release(l));
  for (int i = 0; i < NWAIT; i++)
    fair_waiter_join(&w[i]);
  CHECK_INT(atomic_load(&log->n), ==, NWAIT);
  for (int i = 0; i < NWAIT; i++) {
    CHECK_OK(w[i].rc);
    CHECK_INT(log->who[i], ==, i);
  }
  CHECK_INT(queue_len(s, "fair-threads"), ==, 0);
  CHECK_INT(th_redis_int(s, "EXISTS redisson_lock_timeout:{fair-threads}"),
            ==, 0);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
  munmap(log, sizeof *log);
}

/* A child process: its own client, one fair acquire, note, release. */
typedef struct child_arg {
  th_server_t *s;
  const char *name;
  order_log_t *log;
  int who;
} child_arg_t;

static int child_waiter(void *arg) {
  child_arg_t *a = arg;
  dlock_client_t *c = fair_client(a->s, 0, 0);
  dlock_lock_t *l = fair_lock(c, a->name);
  int rc = dlock_lock_acquire(l, 20000, WD);
  if (rc == DLOCK_OK) {
    order_note(a->log, a->who);
    th_sleep_ms(20);
    rc = dlock_lock_release(l);
  }
  dlock_lock_free(l);
  dlock_client_free(c);
  return rc == DLOCK_OK ? 0 : 10 - rc;
}

/* Waiters in separate processes are granted in arrival order. */
static void t_order_processes(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  order_log_t *log = order_log_new();
  it_child_t ch[NWAIT];
  child_arg_t args[NWAIT];
  for (int i = 0; i < NWAIT; i++) {
    args[i] = (child_arg_t){s, "fair-procs", log, i};
    it_child_fork(&ch[i], child_waiter, &args[i]);
  }
  dlock_client_t *c = fair_client(s, 0, 0);
  dlock_lock_t *l = fair_lock(c, "fair-procs");
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  for (int i = 0; i < NWAIT; i++) {
    it_child_go(&ch[i]);
    CHECKF(wait_queue_len(s, "fair-procs", i + 1), "process %d not queued",
           i);
  }
  CHECK_OK(dlock_lock_release(l));
  for (int i = 0; i < NWAIT; i++)
    CHECK_INT(it_child_wait(&ch[i], 20000), ==, 0);
  CHECK_INT(atomic_load(&log->n), ==, NWAIT);
  printf("grant order:");
  for (int i = 0; i < NWAIT; i++)
    printf(" %d", log->who[i]);
  printf("\n");
  for (int i = 0; i < NWAIT; i++)
    CHECK_INT(log->who[i], ==, i);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
  munmap(log, sizeof *log);
}

/* A waiter that times out leaves the queue at once and the one behind it
 * gets the lock as soon as it is released. */
static void t_timeout_skipped(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = fair_client(s, 0, 0);
  dlock_lock_t *l = fair_lock(c, "fair-skip");
  order_log_t *log = order_log_new();
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  fair_waiter_t quitter, patient;
  fair_waiter_start(&quitter, l, log, 1, 600);
  CHECK(wait_queue_len(s, "fair-skip", 1));
  fair_waiter_start(&patient, l, log, 2, 10000);
  CHECK(wait_queue_len(s, "fair-skip", 2));
  fair_waiter_join(&quitter);
  CHECK_RC(quitter.rc, DLOCK_ETIMEDOUT);
  /* it left: only the patient one is queued, and it moved up */
  CHECK_INT(queue_len(s, "fair-skip"), ==, 1);
  int64_t t_rel = th_now_ms();
  CHECK_OK(dlock_lock_release(l));
  fair_waiter_join(&patient);
  CHECK_OK(patient.rc);
  printf("the one behind got the lock %lld ms after the release\n",
         (long long)(patient.t_done - t_rel));
  CHECK_INT(patient.t_done - t_rel, <, 2000);
  CHECK_INT(atomic_load(&log->n), ==, 1);
  CHECK_INT(log->who[0], ==, 2);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
  munmap(log, sizeof *log);
}

/* Queues for ever (it is killed while queued). */
static int child_dead_waiter(void *arg) {
  child_arg_t *a = arg;
  dlock_client_t *cc = fair_client(a->s, 1000, 0);
  dlock_lock_t *cl = fair_lock(cc, a->name);
  dlock_lock_acquire(cl, DLOCK_WAIT_FOREVER, WD);
  return 3;
}

/* A waiter whose process is killed keeps its place only until its
 * thread-wait runs out; then the next waiter gets the lock. */
static void t_dead_waiter(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  const int64_t tw = 1000;
  /* a short watchdog: the dead waiter's expected turn is the holder's
   * remaining lease when it queued */
  static child_arg_t arg;
  arg = (child_arg_t){s, "fair-dead", NULL, 0};
  it_child_t dead;
  it_child_fork(&dead, child_dead_waiter, &arg);
  dlock_client_t *c = fair_client(s, tw, 600);
  dlock_lock_t *l = fair_lock(c, "fair-dead");
  order_log_t *log = order_log_new();
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  it_child_go(&dead);
  CHECK(wait_queue_len(s, "fair-dead", 1));
  fair_waiter_t next;
  fair_waiter_start(&next, l, log, 2, 15000);
  CHECK(wait_queue_len(s, "fair-dead", 2));
  CHECK(kill(dead.pid, SIGKILL) == 0);
  CHECK_INT(it_child_wait(&dead, 5000), ==, -1);
  int64_t t_rel = th_now_ms();
  CHECK_OK(dlock_lock_release(l));
  fair_waiter_join(&next);
  CHECK_OK(next.rc);
  int64_t took = next.t_done - t_rel;
  printf("next waiter got the lock %lld ms after the release "
         "(thread-wait %lld ms)\n",
         (long long)took, (long long)tw);
  /* the dead head held its place for a while, then lost it: no later than
   * its deadline (holder's remaining lease + thread-wait) plus slack */
  CHECK_INT(took, <, 600 + tw + 2000);
  CHECK_INT(queue_len(s, "fair-dead"), ==, 0);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
  munmap(log, sizeof *log);
}

/* A live waiter keeps its place however long it waits, even past its
 * thread-wait (dlock refreshes its deadline). */
static void t_live_waiter_keeps_place(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  const int64_t tw = 300;
  dlock_client_t *c = fair_client(s, tw, 0);
  dlock_lock_t *l = fair_lock(c, "fair-live");
  order_log_t *log = order_log_new();
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  fair_waiter_t first, second;
  fair_waiter_start(&first, l, log, 1, DLOCK_WAIT_FOREVER);
  CHECK(wait_queue_len(s, "fair-live", 1));
  fair_waiter_start(&second, l, log, 2, DLOCK_WAIT_FOREVER);
  CHECK(wait_queue_len(s, "fair-live", 2));
  th_sleep_ms(5 * tw); /* many thread-waits */
  CHECK_INT(queue_len(s, "fair-live"), ==, 2);
  CHECK_OK(dlock_lock_release(l));
  fair_waiter_join(&first);
  fair_waiter_join(&second);
  CHECK_INT(atomic_load(&log->n), ==, 2);
  CHECK_INT(log->who[0], ==, 1);
  CHECK_INT(log->who[1], ==, 2);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
  munmap(log, sizeof *log);
}

/* Try-once on a held fair lock fails without joining the queue. */
static void t_try_once_not_queued(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *a = fair_client(s, 0, 0), *b = fair_client(s, 0, 0);
  dlock_lock_t *la = fair_lock(a, "fair-try"), *lb = fair_lock(b, "fair-try");
  CHECK_OK(dlock_lock_acquire(la, 0, WD));
  CHECK_OK(dlock_lock_acquire(la, 0, WD)); /* reentrant */
  CHECK_RC(dlock_lock_acquire(lb, 0, WD), DLOCK_EBUSY);
  CHECK_INT(queue_len(s, "fair-try"), ==, 0);
  int64_t n = 0;
  CHECK_OK(dlock_lock_hold_count(la, &n));
  CHECK_INT(n, ==, 2);
  CHECK_OK(dlock_lock_release(la));
  CHECK_OK(dlock_lock_release(la));
  CHECK_OK(dlock_lock_acquire(lb, 0, WD));
  CHECK_OK(dlock_lock_release(lb));
  CHECK_RC(dlock_lock_release(lb), DLOCK_ENOTOWNER);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_server_stop(s);
}

/* The state shows the queue in order with each waiter's deadline. */
static void t_state_queue(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = fair_client(s, 0, 0);
  dlock_lock_t *l = fair_lock(c, "fair-state");
  order_log_t *log = order_log_new();
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  fair_waiter_t w[2];
  for (int i = 0; i < 2; i++) {
    fair_waiter_start(&w[i], l, log, i, 10000);
    CHECK(wait_queue_len(s, "fair-state", i + 1));
  }
  dlock_lock_state_t *st = NULL;
  CHECK_OK(dlock_lock_state(l, &st));
  CHECK_STR(st->kind, "fair");
  CHECK_INT(st->nholders, ==, 1);
  CHECK_INT(st->nwaiters, ==, 2);
  CHECK(st->waiter_deadlines_ms != NULL);
  char owner[128];
  for (int i = 0; i < 2; i++) {
    redisReply *r = th_redis_cmd(s, "LINDEX redisson_lock_queue:{fair-state} %d",
                                 i);
    CHECK(r && r->type == REDIS_REPLY_STRING);
    CHECK_STR(st->waiters[i], r->str);
    freeReplyObject(r);
    /* a finite wait is also the thread-wait: deadlines are in the future
     * and ordered */
    CHECK_INT(st->waiter_deadlines_ms[i], >, 0);
  }
  CHECK_INT(st->waiter_deadlines_ms[1], >, st->waiter_deadlines_ms[0]);
  it_owner(c, dlock_thread_id(), owner, sizeof owner);
  CHECK_STR(st->holders[0].owner, owner);
  dlock_lock_state_free(st);
  CHECK_OK(dlock_lock_release(l));
  for (int i = 0; i < 2; i++)
    fair_waiter_join(&w[i]);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
  munmap(log, sizeof *log);
}

/* ------------------------------------------------------------ Redisson */

/* RFairLock acquire as REDIS-LAYOUT.md describes it (client clock): purge
 * expired heads; free and (queue empty or head is me): take it; mine:
 * count up; queued: my remaining time; else enqueue behind the last. */
static const char RS_FAIR_ACQUIRE[] =
    "while true do "
    "  local h = redis.call('lindex', KEYS[2], 0); "
    "  if h == false then break end; "
    "  local to = tonumber(redis.call('zscore', KEYS[3], h)); "
    "  if to <= tonumber(ARGV[4]) then "
    "    redis.call('zrem', KEYS[3], h); redis.call('lpop', KEYS[2]); "
    "  else break end; "
    "end; "
    "if (redis.call('exists', KEYS[1]) == 0) and "
    "   ((redis.call('exists', KEYS[2]) == 0) or "
    "    (redis.call('lindex', KEYS[2], 0) == ARGV[2])) then "
    "  redis.call('lpop', KEYS[2]); redis.call('zrem', KEYS[3], ARGV[2]); "
    "  local ks = redis.call('zrange', KEYS[3], 0, -1); "
    "  for i = 1, #ks do redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), "
    "ks[i]) end; "
    "  redis.call('hset', KEYS[1], ARGV[2], 1); "
    "  redis.call('pexpire', KEYS[1], ARGV[1]); return nil; "
    "end; "
    "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then "
    "  redis.call('hincrby', KEYS[1], ARGV[2], 1); "
    "  redis.call('pexpire', KEYS[1], ARGV[1]); return nil; "
    "end; "
    "local t = redis.call('zscore', KEYS[3], ARGV[2]); "
    "if t ~= false then "
    "  return tonumber(t) - tonumber(ARGV[3]) - tonumber(ARGV[4]); "
    "end; "
    "local last = redis.call('lindex', KEYS[2], -1); local ttl; "
    "if last ~= false and last ~= ARGV[2] then "
    "  ttl = tonumber(redis.call('zscore', KEYS[3], last)) - "
    "tonumber(ARGV[4]); "
    "else ttl = redis.call('pttl', KEYS[1]); end; "
    "local timeout = ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]); "
    "if redis.call('zadd', KEYS[3], timeout, ARGV[2]) == 1 then "
    "  redis.call('rpush', KEYS[2], ARGV[2]); end; "
    "return ttl;";

/* RFairLock release: full release deletes and wakes the head on
 * redisson_lock__channel:{name}:<head>. */
static const char RS_FAIR_RELEASE[] =
    "if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return nil end; "
    "local n = redis.call('hincrby', KEYS[1], ARGV[1], -1); "
    "if n > 0 then return 0 end; "
    "redis.call('del', KEYS[1]); "
    "local h = redis.call('lindex', KEYS[2], 0); "
    "if h ~= false then redis.call('publish', KEYS[3] .. ':' .. h, '0') end; "
    "return 1;";

#define RS_OWNER "5c0f8a52-2f2e-4a8e-9a57-0d3a8b7e6c11:1"

static int64_t rs_fair_acquire(th_server_t *s, const char *name) {
  redisReply *r = th_redis_cmd(
      s,
      "EVAL %s 3 %s redisson_lock_queue:{%s} redisson_lock_timeout:{%s} 30000 "
      "%s 300000 %lld",
      RS_FAIR_ACQUIRE, name, name, name, RS_OWNER,
      (long long)(time(NULL) * 1000LL));
  CHECK(r);
  int64_t v = r->type == REDIS_REPLY_NIL       ? -1
              : r->type == REDIS_REPLY_INTEGER ? r->integer
                                               : INT64_MIN;
  CHECKF(v != INT64_MIN, "fair acquire reply type %d: %s", r->type,
         r->type == REDIS_REPLY_ERROR ? r->str : "");
  freeReplyObject(r);
  return v;
}

static int64_t rs_fair_release(th_server_t *s, const char *name) {
  redisReply *r =
      th_redis_cmd(s,
                   "EVAL %s 3 %s redisson_lock_queue:{%s} "
                   "redisson_lock__channel:{%s} %s",
                   RS_FAIR_RELEASE, name, name, name, RS_OWNER);
  CHECK(r);
  int64_t v = r->type == REDIS_REPLY_NIL ? -1 : r->integer;
  freeReplyObject(r);
  return v;
}

/* Redisson and dlock waiters share one queue and its order. */
static void t_redisson_interop(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = fair_client(s, 0, 0);
  dlock_lock_t *l = fair_lock(c, "fair-rs");
  order_log_t *log = order_log_new();
  /* Redisson holds; a dlock waiter queues; Redisson's release wakes it on
   * its own channel */
  CHECK_INT(rs_fair_acquire(s, "fair-rs"), ==, -1);
  fair_waiter_t w;
  fair_waiter_start(&w, l, log, 1, 10000);
  CHECK(wait_queue_len(s, "fair-rs", 1));
  /* a Redisson waiter queued behind it is not served first */
  CHECK_INT(rs_fair_acquire(s, "fair-rs"), ==, -1); /* re-entry */
  CHECK_INT(rs_fair_release(s, "fair-rs"), ==, 0);
  int64_t t_rel = th_now_ms();
  CHECK_INT(rs_fair_release(s, "fair-rs"), ==, 1);
  fair_waiter_join(&w);
  CHECK_OK(w.rc);
  printf("Redisson's release woke the dlock waiter in %lld ms\n",
         (long long)(w.t_done - t_rel));
  CHECK_INT(w.t_done - t_rel, <, 2000);
  /* dlock holds; Redisson queues; a later dlock waiter queues behind it;
   * dlock's release makes Redisson the one that can take it */
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_INT(rs_fair_acquire(s, "fair-rs"), >=, 0);
  CHECK_INT(queue_len(s, "fair-rs"), ==, 1);
  fair_waiter_t late;
  fair_waiter_start(&late, l, log, 2, 10000);
  CHECK(wait_queue_len(s, "fair-rs", 2));
  CHECK_OK(dlock_lock_release(l));
  th_sleep_ms(200);
  CHECK(!atomic_load(&late.done)); /* not ahead of Redisson */
  CHECK_INT(rs_fair_acquire(s, "fair-rs"), ==, -1);
  CHECK_INT(rs_fair_release(s, "fair-rs"), ==, 1);
  fair_waiter_join(&late);
  CHECK_OK(late.rc);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
  munmap(log, sizeof *log);
}

static const check_case_t cases[] = {
    {"order_threads", t_order_threads},
    {"order_processes", t_order_processes},
    {"timeout_skipped", t_timeout_skipped},
    {"dead_waiter", t_dead_waiter},
    {"live_waiter_keeps_place", t_live_waiter_keeps_place},
    {"try_once_not_queued", t_try_once_not_queued},
    {"state_queue", t_state_queue},
    {"redisson_interop", t_redisson_interop},
};

CHECK_MAIN(cases)
