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

#include "async_one.h"

#include <poll.h>
#include <string.h>

#define THREADS 16
#define BASE 100 /* thread i's semaphore has BASE + i permits */

/* command_ms: generous where no call may fail (a slow machine, valgrind:
 * sixteen threads queue on one connection) */
static void log_sink(void *ud, dlock_log_level_t level, const char *msg);

static dlock_client_t *pool_of_one(th_server_t *s, int64_t command_ms) {
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_log_callback(o, log_sink, NULL, DLOCK_LOG_INFO));
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

/* ------------------------------------------------ sent requests (async)
 *
 * The async API's tries and releases go on the shared connection from the
 * program's thread, their replies read by the event loop or by a blocking
 * caller leading the connection (mux.c "Sent requests"). */

#define CHAINS 32
#define CHAIN_ROUNDS 20

typedef struct chain {
  dlock_lock_t *l;
  int i, rounds, acquired, released, errors;
  char last_error[200];
} chain_t;

static void chain_step(chain_t *ch);

static void chain_note(chain_t *ch, int rc) {
  if (rc) {
    ch->errors++;
    snprintf(ch->last_error, sizeof ch->last_error, "%s", dlock_last_error());
  }
}

static void chain_released(void *ud, int rc, int64_t value) {
  (void)value;
  chain_t *ch = ud;
  chain_note(ch, rc);
  ch->released += rc == 0;
  if (++ch->rounds < CHAIN_ROUNDS)
    chain_step(ch);
}

static void chain_acquired(void *ud, int rc, int64_t value) {
  (void)value;
  chain_t *ch = ud;
  chain_note(ch, rc);
  if (rc) {
    ch->rounds = CHAIN_ROUNDS; /* the chain stops */
    return;
  }
  ch->acquired++;
  int r = dlock_lock_release_async(ch->l, 0, chain_released, ch, NULL);
  chain_note(ch, r);
}

static void chain_step(chain_t *ch) {
  int rc = dlock_lock_acquire_async(ch->l, 0, 0, DLOCK_LEASE_WATCHDOG,
                                    chain_acquired, ch, NULL);
  chain_note(ch, rc);
  if (rc)
    ch->rounds = CHAIN_ROUNDS;
}

/* Runs the client's callbacks until every chain is over (bounded). */
static bool chains_run(dlock_client_t *c, chain_t *ch, int n, int64_t ms) {
  int fd = -1;
  CHECK_OK(dlock_client_fd(c, &fd));
  int64_t deadline = th_now_ms() + ms;
  for (;;) {
    int over = 0;
    for (int i = 0; i < n; i++)
      over += ch[i].rounds >= CHAIN_ROUNDS;
    if (over == n)
      return true;
    int64_t left = deadline - th_now_ms();
    if (left <= 0)
      return false;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, left > 200 ? 200 : (int)left) > 0)
      CHECK(dlock_client_process(c) >= 0);
  }
}

/* Async chains and blocking threads on one client of one pooled
 * connection: their requests interleave on the shared connection, read
 * by the loop and by blocking leaders in turn; every answer is the right
 * one (a reply handed to the wrong request fails a check: an acquire's
 * nil, a release's 1 and a semaphore's count differ). */
static void t_async_sent_share(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = pool_of_one(s, 10000);
  enum { BLOCKERS = 4 };
  worker_t w[BLOCKERS];
  memset(w, 0, sizeof w);
  for (int i = 0; i < BLOCKERS; i++) {
    w[i].c = c;
    w[i].i = i;
    w[i].iters = 200;
    atomic_store(&w[i].until, th_now_ms() + 30000);
    CHECK(pthread_create(&w[i].th, NULL, worker_main, &w[i]) == 0);
  }
  chain_t ch[CHAINS];
  memset(ch, 0, sizeof ch);
  for (int i = 0; i < CHAINS; i++) {
    char name[32];
    snprintf(name, sizeof name, "sent-chain-%d", i);
    ch[i].i = i;
    ch[i].l = it_lock(c, name);
    chain_step(&ch[i]);
  }
  CHECK(chains_run(c, ch, CHAINS, 60000));
  for (int i = 0; i < BLOCKERS; i++)
    pthread_join(w[i].th, NULL);
  int pairs = 0;
  for (int i = 0; i < CHAINS; i++) {
    CHECKF(ch[i].errors == 0, "chain %d: %d errors, the last: %s", i,
           ch[i].errors, ch[i].last_error);
    CHECK_INT(ch[i].acquired, ==, CHAIN_ROUNDS);
    CHECK_INT(ch[i].released, ==, CHAIN_ROUNDS);
    pairs += ch[i].released;
    bool locked = true;
    CHECK_OK(dlock_lock_is_locked(ch[i].l, &locked));
    CHECK(!locked);
  }
  for (int i = 0; i < BLOCKERS; i++)
    CHECKF(w[i].wrong == 0 && w[i].errors == 0,
           "blocking thread %d: %d wrong answers, %d errors", i, w[i].wrong,
           w[i].errors);
  CHECK_INT(dlock_client_pending(c), ==, 0);
  printf("%d async pairs and %d blocking threads on one connection: every "
         "answer the caller's own\n",
         pairs, BLOCKERS);
  for (int i = 0; i < CHAINS; i++)
    dlock_lock_free(ch[i].l);
  dlock_client_free(c);
  th_server_stop(s);
}

/* how many times the library said an async wait went on after its
 * first attempt failed */
static atomic_int g_wait_went_on;

static void log_sink(void *ud, dlock_log_level_t level, const char *msg) {
  (void)ud;
  (void)level;
  if (strstr(msg, "the wait goes on"))
    atomic_fetch_add(&g_wait_went_on, 1);
}

/* Sent requests meet the server's faults as the blocking calls do: lost
 * scripts are loaded again, a connection the server closed while idle is
 * replaced, and a stopped server fails the request in flight at its
 * deadline; then the client goes on. */
static void t_async_sent_faults(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = pool_of_one(s, 500);
  dlock_lock_t *l = it_lock(c, "sent-faults");
  /* twice: the first may go through the pool while the shared
   * connection is dialled */
  for (int i = 0; i < 2; i++) {
    CHECK_OK(th_async_one(c, l, 77, true, 0, DLOCK_LEASE_WATCHDOG).rc);
    CHECK_OK(th_async_one(c, l, 77, false, 0, 0).rc);
  }
  /* the server forgets its scripts: NOSCRIPT, then the body */
  th_redis_int(s, "SCRIPT FLUSH");
  CHECK_OK(th_async_one(c, l, 77, true, 0, DLOCK_LEASE_WATCHDOG).rc);
  bool locked = false;
  CHECK_OK(dlock_lock_is_locked(l, &locked));
  CHECK(locked);
  CHECK_OK(th_async_one(c, l, 77, false, 0, 0).rc);
  /* every client connection is closed while idle */
  redisReply *r = th_redis_cmd(s, "CLIENT KILL TYPE normal");
  freeReplyObject(r);
  CHECK_OK(th_async_one(c, l, 77, true, 0, DLOCK_LEASE_WATCHDOG).rc);
  CHECK_OK(th_async_one(c, l, 77, false, 0, 0).rc);
  /* a stopped server: the try in flight fails at its deadline (500 ms),
   * with an error that says so; its outcome is unknown, so its lease is
   * short */
  CHECK(th_server_pause(s) == 0);
  th_async_outcome_t o = th_async_one(c, l, 77, true, 0, 1000);
  CHECK(th_server_resume(s) == 0);
  CHECKF(o.rc == DLOCK_EIOTIMEOUT || o.rc == DLOCK_EUNAVAILABLE,
         "a try on a stopped server: %d (%s)", o.rc, o.detail);
  printf("a try on a stopped server: %s (%s)\n", dlock_err_name(o.rc),
         o.detail);
  dlock_lock_t *l2 = it_lock(c, "sent-faults-after");
  CHECK_OK(th_async_one(c, l2, 77, true, 0, DLOCK_LEASE_WATCHDOG).rc);
  CHECK_OK(th_async_one(c, l2, 77, false, 0, 0).rc);
  /* a wait whose first attempt is sent to a stopped server rides the
   * outage out, as a blocking wait does: the attempt fails at its
   * deadline, the wait goes on, and it takes the lock once the server is
   * back */
  int fd = -1;
  CHECK_OK(dlock_client_fd(c, &fd));
  dlock_lock_t *l3 = it_lock(c, "sent-faults-wait");
  CHECK(th_server_pause(s) == 0);
  int went_on = atomic_load(&g_wait_went_on);
  th_async_outcome_t w = {0};
  CHECK_OK(dlock_lock_acquire_async(l3, 78, 20000, DLOCK_LEASE_WATCHDOG,
                                    th_async_note, &w, NULL));
  int64_t deadline = th_now_ms() + 15000;
  while (w.calls == 0 && atomic_load(&g_wait_went_on) == went_on &&
         th_now_ms() < deadline) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 50) > 0)
      CHECK(dlock_client_process(c) >= 0);
  }
  CHECK(th_server_resume(s) == 0);
  CHECKF(w.calls == 0, "the wait ended with the attempt: %s (%s)",
         dlock_err_name(w.rc), w.detail);
  CHECK(atomic_load(&g_wait_went_on) > went_on);
  deadline = th_now_ms() + 20000;
  while (w.calls == 0 && th_now_ms() < deadline) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 200) > 0)
      CHECK(dlock_client_process(c) >= 0);
  }
  CHECKF(w.calls == 1 && w.rc == 0, "the wait after the outage: %s (%s)",
         dlock_err_name(w.rc), w.detail);
  CHECK_OK(dlock_lock_release_as(l3, 78));
  dlock_lock_free(l3);
  CHECK_INT(dlock_client_pending(c), ==, 0);
  dlock_lock_free(l2);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static const check_case_t cases[] = {
    {"threads_share", t_threads_share},
    {"server_killed_in_flight", t_server_killed_in_flight},
    {"async_sent_share", t_async_sent_share},
    {"async_sent_faults", t_async_sent_faults},
};

CHECK_MAIN(cases)
