/*
 * test_pipeline.c - many threads on one client: requests beyond the
 * connection pool share one pipelined connection (src/redis/mux.c).
 *
 * Design note: a client with a pool of one connection and 16 threads, so
 * that nearly every request goes on the shared connection. What a user
 * would observe is asserted: each thread gets its own answers (every
 * thread reads a permit semaphore of its own whose count is unique, and a
 * reply handed to the wrong request would show another thread's count),
 * each thread's locks exclude and re-enter as usual, the client opens a
 * handful of connections rather than one per thread (the server's
 * total_connections_received), and a server killed with every thread in
 * flight fails the calls in flight with an error, never a wrong answer,
 * after which the same client works again on the restarted server.
 * Threads: main (servers, checks) and the workers; every loop is bounded
 * by a count and a deadline.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "itest.h"

#define THREADS 16
#define BASE 100 /* thread i's semaphore has BASE + i permits */

/* command_ms: generous where no call may fail (a slow machine, valgrind:
 * sixteen threads queue on one connection) */
static dlock_client_t *pool_of_one(th_server_t *s, int64_t command_ms) {
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_pool_size(o, 1));
  CHECK_OK(dlock_options_set_connect_timeout(o, 1000));
  CHECK_OK(dlock_options_set_command_timeout(o, command_ms));
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new(&c, s->url, o));
  dlock_options_free(o);
  return c;
}

static int64_t connections_received(th_server_t *s) {
  redisContext *c = th_redis_connect(s);
  CHECK(c);
  redisReply *r = redisCommand(c, "INFO stats");
  CHECK(r && r->type == REDIS_REPLY_STRING);
  const char *p = strstr(r->str, "total_connections_received:");
  CHECK(p);
  int64_t v = strtoll(p + strlen("total_connections_received:"), NULL, 10);
  freeReplyObject(r);
  redisFree(c);
  return v;
}

typedef struct worker {
  dlock_client_t *c;
  int i;
  _Atomic int64_t until; /* deadline of the loop (monotonic ms) */
  int iters;     /* at most this many rounds */
  bool tolerate; /* errors are expected (the server is killed) */
  /* results */
  int rounds, ok_reads, errors, wrong;
  int64_t last_wrong;
  _Atomic int ok_after; /* successful reads after `mark` */
  _Atomic int64_t *mark; /* set by main when the server is back */
  pthread_t th;
} worker_t;

static void *worker_main(void *arg) {
  worker_t *w = arg;
  char name[64];
  snprintf(name, sizeof name, "pipe-sem-%d", w->i);
  dlock_permit_sem_t *sem = NULL;
  CHECK_OK(dlock_permit_sem_new(w->c, name, &sem));
  snprintf(name, sizeof name, "pipe-lock-%d", w->i);
  dlock_lock_t *l = it_lock(w->c, name);
  int64_t want = BASE + w->i;
  bool set = false;
  for (; w->rounds < w->iters && th_now_ms() < atomic_load(&w->until); w->rounds++) {
    if (!set) {
      bool done = false;
      int rc = dlock_permit_sem_try_set_permits(sem, want, &done);
      if (rc) {
        w->errors++;
        CHECKF(w->tolerate, "thread %d: set: %s", w->i, dlock_last_error());
        th_sleep_ms(10); /* the server is down: the scenario's pace */
        continue;
      }
      set = true;
    }
    int64_t got = -1;
    int rc = dlock_permit_sem_available(sem, &got);
    if (rc) {
      w->errors++;
      CHECKF(w->tolerate, "thread %d: available: %s", w->i,
             dlock_last_error());
      set = false; /* a restarted server has lost it */
      continue;
    }
    if (got == want) {
      w->ok_reads++;
      if (w->mark && atomic_load(w->mark) &&
          th_now_ms() >= atomic_load(w->mark))
        atomic_fetch_add(&w->ok_after, 1);
    } else if (got == 0 && w->tolerate) {
      set = false; /* the restarted server is empty */
    } else {
      w->wrong++;
      w->last_wrong = got;
    }
    if (!w->tolerate) {
      /* the lock: a try, a re-entry, then both releases */
      CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
      CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
      int64_t count = 0;
      CHECK_OK(dlock_lock_hold_count(l, &count));
      CHECK_INT(count, ==, 2);
      CHECK_OK(dlock_lock_release(l));
      CHECK_OK(dlock_lock_release(l));
    }
  }
  dlock_lock_free(l);
  dlock_permit_sem_free(sem);
  return NULL;
}

static void t_threads_share(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  int64_t conns0 = connections_received(s);
  dlock_client_t *c = pool_of_one(s, 10000);
  worker_t w[THREADS];
  memset(w, 0, sizeof w);
  for (int i = 0; i < THREADS; i++) {
    w[i].c = c;
    w[i].i = i;
    w[i].iters = 150;
    atomic_store(&w[i].until, th_now_ms() + 20000);
    CHECK(pthread_create(&w[i].th, NULL, worker_main, &w[i]) == 0);
  }
  int total = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(w[i].th, NULL);
    CHECKF(w[i].wrong == 0, "thread %d read %lld, not its own %d", i,
           (long long)w[i].last_wrong, BASE + i);
    CHECK_INT(w[i].rounds, ==, 150);
    total += w[i].ok_reads;
  }
  /* this test's own INFO connection, the client's check connection (its
   * pool of one), the shared connection and the wake-up connection */
  int64_t conns = connections_received(s) - conns0;
  printf("%d threads, pool of 1: %d reads and %d lock rounds x 4 calls, "
         "%lld connections made\n",
         THREADS, total, THREADS * 150, (long long)conns);
  CHECK_INT(total, ==, THREADS * 150);
  CHECK_INT(conns, <=, 5);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_server_killed_in_flight(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = pool_of_one(s, 1000);
  _Atomic int64_t back = 0;
  worker_t w[THREADS];
  memset(w, 0, sizeof w);
  for (int i = 0; i < THREADS; i++) {
    w[i].c = c;
    w[i].i = i;
    w[i].iters = 1000000;
    w[i].tolerate = true;
    w[i].mark = &back;
    atomic_store(&w[i].until, th_now_ms() + 30000);
    CHECK(pthread_create(&w[i].th, NULL, worker_main, &w[i]) == 0);
  }
  th_sleep_ms(300); /* the threads are busy (scenario pace) */
  CHECK(th_server_kill9(s) == 0);
  th_sleep_ms(300); /* down for a while: calls fail */
  CHECK(th_server_up(s) == 0);
  atomic_store(&back, th_now_ms());
  /* run on until every thread has had answers from the new server */
  int64_t until = th_now_ms() + 15000;
  for (;;) {
    int fresh = 0;
    for (int i = 0; i < THREADS; i++)
      fresh += atomic_load(&w[i].ok_after) > 0;
    if (fresh == THREADS || th_now_ms() > until)
      break;
    th_sleep_ms(20);
  }
  for (int i = 0; i < THREADS; i++)
    atomic_store(&w[i].until, 0); /* each loop reads it next round */
  int errors = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(w[i].th, NULL);
    CHECKF(w[i].wrong == 0, "thread %d read %lld, not its own %d", i,
           (long long)w[i].last_wrong, BASE + i);
    CHECKF(atomic_load(&w[i].ok_after) > 0, "thread %d got no answer after the restart",
           i);
    errors += w[i].errors;
  }
  printf("server killed with %d threads in flight: %d calls failed, every "
         "answer was the caller's own, every thread served again after the "
         "restart\n",
         THREADS, errors);
  CHECK_INT(errors, >, 0);
  dlock_client_free(c);
  th_server_stop(s);
}

static const check_case_t cases[] = {
    {"threads_share", t_threads_share},
    {"server_killed_in_flight", t_server_killed_in_flight},
};

CHECK_MAIN(cases)
