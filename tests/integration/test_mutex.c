/*
 * test_mutex.c - mutual exclusion between threads and between processes.
 *
 * Design note: every worker increments a counter in Redis with a GET, a
 * sched_yield() and a SET - deliberately not atomic - while holding the
 * lock. Any overlap of two holders loses an increment, so the final count
 * equals the number of increments only if the lock excluded. Threads also
 * check an in-process "inside" counter. Each worker thread has its own
 * hiredis connection for the counter. The process case re-executes this
 * binary as `test_mutex --child PORT THREADS ITERS` (fork+exec, so each
 * child builds its own client from scratch); the parent waits for them with
 * a bounded poll on waitpid.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "itest.h"

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>

#define NAME "mutex"
#define COUNTER "mutex-counter"
/* each acquire may wait this long; a stuck lock fails with ETIMEDOUT rather
 * than hanging until the ctest timeout */
#define ACQ_WAIT_MS 30000

typedef struct worker {
  dlock_lock_t *lock; /* shared handle, or NULL: own client + handle */
  th_server_t *srv;
  int port;
  int iters;
  atomic_int *inside;
  pthread_t th;
} worker_t;

static redisContext *counter_conn(int port) {
  struct timeval tv = {.tv_sec = 5, .tv_usec = 0};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
  CHECK(c && !c->err);
  redisSetTimeout(c, tv);
  return c;
}

static void *worker_main(void *arg) {
  worker_t *w = arg;
  dlock_client_t *own = NULL;
  dlock_lock_t *l = w->lock;
  if (!l) {
    char url[64];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d", w->port);
    dlock_options_t *o = NULL;
    CHECK_OK(dlock_options_new(&o));
    CHECK_OK(dlock_options_set_command_timeout(o, 5000));
    CHECK_OK(dlock_client_new(&own, url, o));
    dlock_options_free(o);
    CHECK_OK(dlock_lock_new(own, NAME, &l));
  }
  redisContext *rc = counter_conn(w->port);
  for (int i = 0; i < w->iters; i++) {
    CHECK_OK(dlock_lock_acquire(l, ACQ_WAIT_MS, DLOCK_LEASE_WATCHDOG));
    if (w->inside)
      CHECKF(atomic_fetch_add(w->inside, 1) == 0,
             "two threads inside the lock at once");
    redisReply *r = redisCommand(rc, "GET " COUNTER);
    CHECK(r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL));
    long long v = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
    freeReplyObject(r);
    sched_yield();
    r = redisCommand(rc, "SET " COUNTER " %lld", v + 1);
    CHECK(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    if (w->inside)
      atomic_fetch_sub(w->inside, 1);
    CHECK_OK(dlock_lock_release(l));
  }
  redisFree(rc);
  if (own) {
    dlock_lock_free(l);
    dlock_client_free(own);
  }
  return NULL;
}

static void run_threads(int port, dlock_lock_t *shared, int nthreads,
                        int iters) {
  worker_t w[16];
  atomic_int inside = 0;
  CHECK(nthreads <= 16);
  for (int i = 0; i < nthreads; i++) {
    w[i] = (worker_t){
        .lock = shared, .port = port, .iters = iters, .inside = &inside};
    CHECK(pthread_create(&w[i].th, NULL, worker_main, &w[i]) == 0);
  }
  for (int i = 0; i < nthreads; i++)
    pthread_join(w[i].th, NULL);
}

static int64_t counter(th_server_t *s) {
  char *v = th_redis_str(s, "GET " COUNTER);
  CHECK(v);
  int64_t n = strtoll(v, NULL, 10);
  free(v);
  return n;
}

static void t_threads_one_client(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_lock_t *l = it_lock(c, NAME);
  int64_t t0 = th_now_ms();
  run_threads(s->port, l, 8, 200);
  printf("8 threads x 200 in one client: %lld ms\n",
         (long long)(th_now_ms() - t0));
  CHECK_INT(counter(s), ==, 8 * 200);
  CHECK(!it_exists(s, NAME));
  /* nothing left behind for good but the counter */
  CHECK_INT(it_persistent_keys(s), ==, 1);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_threads_many_clients(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  int64_t t0 = th_now_ms();
  run_threads(s->port, NULL, 8, 200);
  printf("8 threads x 200, a client each: %lld ms\n",
         (long long)(th_now_ms() - t0));
  CHECK_INT(counter(s), ==, 8 * 200);
  CHECK(!it_exists(s, NAME));
  /* nothing left behind for good but the counter */
  CHECK_INT(it_persistent_keys(s), ==, 1);
  th_server_stop(s);
}

/* One pooled connection for 8 threads: waiters must not sit on it. */
static void t_threads_pool_of_one(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_pool_size(o, 1));
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new(&c, s->url, o));
  dlock_options_free(o);
  dlock_lock_t *l = it_lock(c, NAME);
  int64_t t0 = th_now_ms();
  run_threads(s->port, l, 8, 100);
  printf("8 threads x 100, pool of 1: %lld ms\n",
         (long long)(th_now_ms() - t0));
  CHECK_INT(counter(s), ==, 8 * 100);
  CHECK(!it_exists(s, NAME));
  /* nothing left behind for good but the counter */
  CHECK_INT(it_persistent_keys(s), ==, 1);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

/* A Redisson-like participant: acquire script (REDIS-LAYOUT.md); when held,
 * wait for a message on the lock's channel for at most the PTTL it got
 * back, as Redisson does; release script publishes "0". */
static const char RS_ACQUIRE[] =
    "if (redis.call('exists', KEYS[1]) == 0) or "
    "(redis.call('hexists', KEYS[1], ARGV[2]) == 1) then "
    "redis.call('hincrby', KEYS[1], ARGV[2], 1); "
    "redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; "
    "return redis.call('pttl', KEYS[1]);";
static const char RS_RELEASE[] =
    "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end; "
    "local c = redis.call('hincrby', KEYS[1], ARGV[3], -1); "
    "if (c > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; end; "
    "redis.call('del', KEYS[1]); redis.call(ARGV[4], KEYS[2], ARGV[1]); "
    "return 1;";
#define RS_OWNER "0d6c1a52-7a55-4a43-9f0e-5b9c1f0f4a21:1"

typedef struct rs_worker {
  int port, iters;
  int64_t longest_wait_ms;
  pthread_t th;
} rs_worker_t;

static void *rs_main(void *arg) {
  rs_worker_t *w = arg;
  redisContext *cmd = counter_conn(w->port), *sub = counter_conn(w->port);
  char ch[64];
  it_channel(NAME, ch, sizeof ch);
  redisReply *r = redisCommand(sub, "SUBSCRIBE %s", ch);
  CHECK(r && r->type == REDIS_REPLY_ARRAY);
  freeReplyObject(r);
  for (int i = 0; i < w->iters; i++) {
    int64_t t0 = th_now_ms();
    for (int round = 0;; round++) {
      CHECKF(round < 10000 && th_now_ms() - t0 < 60000,
             "Redisson participant starved for %lld ms",
             (long long)(th_now_ms() - t0));
      r = redisCommand(cmd, "EVAL %s 1 %s 30000 %s", RS_ACQUIRE, NAME,
                       RS_OWNER);
      CHECK(r);
      bool got = r->type == REDIS_REPLY_NIL;
      int64_t pttl = r->type == REDIS_REPLY_INTEGER ? r->integer : 100;
      CHECK(got || r->type == REDIS_REPLY_INTEGER);
      freeReplyObject(r);
      if (got)
        break;
      /* Redisson: sleep on the subscription at most the holder's PTTL */
      if (pttl < 1)
        pttl = 1;
      struct timeval tv = {.tv_sec = pttl / 1000,
                           .tv_usec = (pttl % 1000) * 1000};
      redisSetTimeout(sub, tv);
      void *v = NULL;
      if (redisGetReply(sub, &v) == REDIS_OK && v) {
        freeReplyObject(v);
      } else {
        /* timed out: hiredis marks the context failed; resubscribe */
        redisFree(sub);
        sub = counter_conn(w->port);
        r = redisCommand(sub, "SUBSCRIBE %s", ch);
        CHECK(r && r->type == REDIS_REPLY_ARRAY);
        freeReplyObject(r);
      }
    }
    if (th_now_ms() - t0 > w->longest_wait_ms)
      w->longest_wait_ms = th_now_ms() - t0;
    r = redisCommand(cmd, "GET " COUNTER);
    CHECK(r);
    long long v = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
    freeReplyObject(r);
    sched_yield();
    r = redisCommand(cmd, "SET " COUNTER " %lld", v + 1);
    CHECK(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    r = redisCommand(cmd, "EVAL %s 2 %s %s 0 30000 %s PUBLISH", RS_RELEASE,
                     NAME, ch, RS_OWNER);
    CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
    freeReplyObject(r);
  }
  redisFree(cmd);
  redisFree(sub);
  return NULL;
}

/* dlock threads and a Redisson participant on one lock: they exclude each
 * other, and neither side starves the other. */
static void t_mixed_with_redisson(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_lock_t *l = it_lock(c, NAME);
  rs_worker_t rs = {.port = s->port, .iters = 50};
  CHECK(pthread_create(&rs.th, NULL, rs_main, &rs) == 0);
  int64_t t0 = th_now_ms();
  run_threads(s->port, l, 4, 100);
  pthread_join(rs.th, NULL);
  printf("4 dlock threads x 100 + Redisson x 50: %lld ms; Redisson's "
         "longest wait %lld ms\n",
         (long long)(th_now_ms() - t0), (long long)rs.longest_wait_ms);
  CHECK_INT(counter(s), ==, 4 * 100 + 50);
  CHECK(!it_exists(s, NAME));
  CHECK_INT(it_persistent_keys(s), ==, 1);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

/* child: PORT THREADS ITERS; one client shared by its threads */
static int child_main(int port, int nthreads, int iters) {
  char url[64];
  snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new(&c, url, NULL));
  dlock_lock_t *l = NULL;
  CHECK_OK(dlock_lock_new(c, NAME, &l));
  run_threads(port, l, nthreads, iters);
  dlock_lock_free(l);
  dlock_client_free(c);
  return 0;
}

#define NPROC 4
#define PROC_THREADS 2
#define PROC_ITERS 100

static void t_processes(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  char port[16], threads[16], iters[16];
  snprintf(port, sizeof port, "%d", s->port);
  snprintf(threads, sizeof threads, "%d", PROC_THREADS);
  snprintf(iters, sizeof iters, "%d", PROC_ITERS);
  pid_t pids[NPROC];
  int64_t t0 = th_now_ms();
  fflush(stdout);
  fflush(stderr);
  for (int i = 0; i < NPROC; i++) {
    pids[i] = fork();
    CHECK(pids[i] >= 0);
    if (pids[i] == 0) {
      char *argv[] = {"test_mutex", "--child", port, threads, iters, NULL};
      execv("/proc/self/exe", argv);
      _exit(127);
    }
  }
  int done = 0, failed = 0;
  int64_t deadline = th_now_ms() + 90000;
  while (done < NPROC && th_now_ms() < deadline) {
    for (int i = 0; i < NPROC; i++) {
      if (pids[i] <= 0)
        continue;
      int st;
      pid_t r = waitpid(pids[i], &st, WNOHANG);
      if (r == pids[i]) {
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
          fprintf(stderr, "child %d failed (status 0x%x)\n", (int)r, st);
          failed++;
        }
        pids[i] = 0;
        done++;
      }
    }
    th_sleep_ms(10);
  }
  for (int i = 0; i < NPROC; i++) {
    if (pids[i] > 0) {
      kill(pids[i], SIGKILL);
      waitpid(pids[i], NULL, 0);
    }
  }
  CHECKF(done == NPROC, "%d of %d children still running after 90 s",
         NPROC - done, NPROC);
  CHECK_INT(failed, ==, 0);
  printf("%d processes x %d threads x %d: %lld ms\n", NPROC, PROC_THREADS,
         PROC_ITERS, (long long)(th_now_ms() - t0));
  CHECK_INT(counter(s), ==, NPROC * PROC_THREADS * PROC_ITERS);
  CHECK(!it_exists(s, NAME));
  /* nothing left behind for good but the counter */
  CHECK_INT(it_persistent_keys(s), ==, 1);
  th_server_stop(s);
}

static const check_case_t cases[] = {
    {"threads_one_client", t_threads_one_client},
    {"threads_many_clients", t_threads_many_clients},
    {"threads_pool_of_one", t_threads_pool_of_one},
    {"processes", t_processes},
    {"mixed_with_redisson", t_mixed_with_redisson},
};

int main(int argc, char **argv) {
  if (argc == 5 && strcmp(argv[1], "--child") == 0)
    return child_main(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]));
  return check_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
