/*
 * test_semaphore.c - the counting semaphore and the permit semaphore,
 * against a real redis-server.
 *
 * Design note: the bound tests run 4 forked processes x 2 threads that
 * take and give back permits in a bounded loop; each holder counts itself
 * in a MAP_SHARED page (an atomic counter of holders inside, and the
 * highest value it reached), so an overlap beyond N permits is seen
 * whichever process caused it. Children are forked before the parent
 * starts any thread (TSan). "Redisson" in the interop cases is the
 * harness's hiredis connection running RSemaphore and
 * RPermitExpirableSemaphore scripts written for this test from
 * REDIS-LAYOUT.md (not Redisson's code). Timing assertions use generous
 * bounds (2 s) only.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "itest.h"

#include <poll.h>
#include <sys/mman.h>

#define WD DLOCK_LEASE_WATCHDOG
#define PROMPT_MS 2000
#define NPROC 4
#define NTHREAD 2
#define ITERS 12
#define PERMITS 3

/* ------------------------------------------------------------ helpers */

/* GET key as an integer (INT64_MIN when absent or not a number). */
static int64_t get_int(th_server_t *s, const char *key) {
  char *v = th_redis_str(s, "GET %s", key);
  int64_t n = v ? strtoll(v, NULL, 10) : INT64_MIN;
  free(v);
  return n;
}

static dlock_semaphore_t *it_sem(dlock_client_t *c, const char *name) {
  dlock_semaphore_t *s = NULL;
  CHECK_OK(dlock_semaphore_new(c, name, &s));
  CHECK(s != NULL);
  return s;
}

static dlock_permit_sem_t *it_psem(dlock_client_t *c, const char *name) {
  dlock_permit_sem_t *s = NULL;
  CHECK_OK(dlock_permit_sem_new(c, name, &s));
  CHECK(s != NULL);
  return s;
}

static void sem_channel(const char *name, char *buf, size_t n) {
  snprintf(buf, n, "redisson_sc:{%s}", name);
}

/* Waits (bounded) until the semaphore's channel has >= min subscribers. */
static bool wait_sem_subscribers(th_server_t *s, const char *name, int64_t min,
                                 int64_t timeout_ms) {
  char ch[256];
  sem_channel(name, ch, sizeof ch);
  bool ok;
  TH_WAIT_FOR(ok, it_numsub(s, ch) >= min, timeout_ms);
  return ok;
}

/* EVAL + EVALSHA calls the server has run so far (INFO commandstats). */
static int64_t script_calls(th_server_t *s) {
  char *info = th_redis_str(s, "INFO commandstats");
  CHECK(info);
  int64_t n = 0;
  const char *keys[] = {"cmdstat_eval:calls=", "cmdstat_evalsha:calls="};
  for (int i = 0; i < 2; i++) {
    const char *p = strstr(info, keys[i]);
    if (p)
      n += strtoll(p + strlen(keys[i]), NULL, 10);
  }
  free(info);
  return n;
}

static bool is_permit_id(const char *id) {
  if (strlen(id) != DLOCK_PERMIT_ID_LEN)
    return false;
  for (size_t i = 0; i < DLOCK_PERMIT_ID_LEN; i++)
    if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
      return false;
  return true;
}

/* A permit id's 16 raw bytes, the member Redisson 3.52 stores (its
 * ByteBufUtil.decodeHexDump of the 32 hex digits). */
static void raw_id(const char *hex, char out[16]) {
  for (int i = 0; i < 16; i++) {
    unsigned v = 0;
    sscanf(hex + 2 * i, "%2x", &v);
    out[i] = (char)v;
  }
}

/* ----------------------------------------------- bound across processes */

typedef struct shared {
  atomic_int inside; /* holders in their critical section now */
  atomic_int max;    /* the most ever inside at once */
  atomic_int entries;
  atomic_int errors;
} shared_t;

typedef struct bound_ctx {
  th_server_t *s;
  const char *name;
  bool permit; /* permit semaphore (watchdog permits) or plain */
  shared_t *sh;
  dlock_client_t *c;
  dlock_semaphore_t *sem;
  dlock_permit_sem_t *psem;
} bound_ctx;

static void enter_leave(shared_t *sh) {
  int n = atomic_fetch_add(&sh->inside, 1) + 1;
  int m = atomic_load(&sh->max);
  while (n > m && !atomic_compare_exchange_weak(&sh->max, &m, n))
    ;
  atomic_fetch_add(&sh->entries, 1);
  th_sleep_ms(5); /* hold the permit a little, so holders overlap */
  atomic_fetch_sub(&sh->inside, 1);
}

static void *bound_thread(void *arg) {
  bound_ctx *x = arg;
  int64_t stop = th_now_ms() + 15000;
  for (int i = 0; i < ITERS && th_now_ms() < stop; i++) {
    char id[DLOCK_PERMIT_ID_LEN + 1];
    int rc = x->permit ? dlock_permit_sem_acquire(x->psem, 8000, WD, id)
                       : dlock_semaphore_acquire(x->sem, 1, 8000);
    if (rc != 0) {
      fprintf(stderr, "acquire: %s: %s\n", dlock_err_name(rc),
              dlock_last_error());
      atomic_fetch_add(&x->sh->errors, 1);
      continue;
    }
    enter_leave(x->sh);
    rc = x->permit ? dlock_permit_sem_release(x->psem, id)
                   : dlock_semaphore_release(x->sem, 1);
    if (rc != 0) {
      fprintf(stderr, "release: %s: %s\n", dlock_err_name(rc),
              dlock_last_error());
      atomic_fetch_add(&x->sh->errors, 1);
    }
  }
  return NULL;
}

static void bound_child(void *arg) {
  bound_ctx *x = arg;
  x->c = it_client(x->s);
  if (x->permit)
    x->psem = it_psem(x->c, x->name);
  else
    x->sem = it_sem(x->c, x->name);
  pthread_t th[NTHREAD];
  for (int i = 0; i < NTHREAD; i++)
    CHECK(pthread_create(&th[i], NULL, bound_thread, x) == 0);
  for (int i = 0; i < NTHREAD; i++)
    pthread_join(th[i], NULL);
  dlock_permit_sem_free(x->psem);
  dlock_semaphore_free(x->sem);
  dlock_client_free(x->c);
}

static void run_bound(bool permit) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  const char *name = permit ? "pbound" : "sbound";
  shared_t *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(sh != MAP_FAILED);
  memset(sh, 0, sizeof *sh);
  /* the layout's count key, written directly: the parent starts no thread
   * (no client) before forking */
  CHECK_INT(th_redis_int(s, "EXISTS %s", name), ==, 0);
  char *ok = th_redis_str(s, "SET %s %d", name, PERMITS);
  CHECK(ok);
  free(ok);
  bound_ctx x = {.s = s, .name = name, .permit = permit, .sh = sh};
  pid_t pids[NPROC];
  for (int i = 0; i < NPROC; i++)
    pids[i] = it_spawn(bound_child, &x);
  for (int i = 0; i < NPROC; i++)
    CHECKF(it_child_ok(it_spawn_wait(pids[i], 30000)), "child %d failed", i);
  printf("%d entries, at most %d holders at once (%d permits)\n",
         atomic_load(&sh->entries), atomic_load(&sh->max), PERMITS);
  CHECK_INT(atomic_load(&sh->errors), ==, 0);
  CHECK_INT(atomic_load(&sh->entries), ==, NPROC * NTHREAD * ITERS);
  CHECK_INT(atomic_load(&sh->max), <=, PERMITS);
  CHECKF(atomic_load(&sh->max) == PERMITS,
         "never %d holders at once: the test did not contend", PERMITS);
  /* every permit came back */
  dlock_client_t *c = it_client(s);
  int64_t n = -1;
  if (permit) {
    dlock_permit_sem_t *p = it_psem(c, name);
    CHECK_OK(dlock_permit_sem_available(p, &n));
    CHECK_INT(th_redis_int(s, "ZCARD {%s}:timeout", name), ==, 0);
    dlock_permit_sem_free(p);
  } else {
    dlock_semaphore_t *q = it_sem(c, name);
    CHECK_OK(dlock_semaphore_available(q, &n));
    dlock_semaphore_free(q);
  }
  CHECK_INT(n, ==, PERMITS);
  dlock_client_free(c);
  munmap(sh, sizeof *sh);
  th_server_stop(s);
}

static void t_sem_bound_processes(void) { run_bound(false); }
static void t_psem_bound_processes(void) { run_bound(true); }

/* --------------------------------------------------- background waiter */

typedef struct sem_waiter {
  dlock_semaphore_t *sem;
  dlock_permit_sem_t *psem;
  int64_t permits; /* a semaphore waiter's request */
  int64_t wait_ms;
  pthread_t th;
  atomic_int done;
  int rc;
  int64_t t_done;
  char id[DLOCK_PERMIT_ID_LEN + 1];
} sem_waiter;

static void *sem_waiter_main(void *arg) {
  sem_waiter *w = arg;
  w->rc = w->psem ? dlock_permit_sem_acquire(w->psem, w->wait_ms, WD, w->id)
                  : dlock_semaphore_acquire(w->sem, w->permits, w->wait_ms);
  w->t_done = th_now_ms();
  atomic_store(&w->done, 1);
  return NULL;
}

/* permits: a semaphore waiter's request (a permit waiter asks for one). */
static void sem_waiter_start(sem_waiter *w, dlock_semaphore_t *sem,
                             dlock_permit_sem_t *psem, int64_t permits,
                             int64_t wait_ms) {
  memset(w, 0, sizeof *w);
  w->sem = sem;
  w->psem = psem;
  w->permits = permits;
  w->wait_ms = wait_ms;
  CHECK(pthread_create(&w->th, NULL, sem_waiter_main, w) == 0);
}

static bool sem_waiter_wait(sem_waiter *w, int64_t timeout_ms) {
  bool ok;
  TH_WAIT_FOR(ok, atomic_load(&w->done), timeout_ms);
  return ok;
}

/* ----------------------------------------------------------- semaphore */

static void t_sem_try_once_busy(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_semaphore_t *q = it_sem(c, "sbusy");
  CHECK_STR(dlock_semaphore_name(q), "sbusy");
  int64_t n = -1;
  CHECK_OK(dlock_semaphore_available(q, &n));
  CHECK_INT(n, ==, 0); /* absent: no permits */
  CHECK_RC(dlock_semaphore_acquire(q, 1, 0), DLOCK_EBUSY);
  bool set = false;
  CHECK_OK(dlock_semaphore_try_set_permits(q, 1, &set));
  CHECK(set);
  CHECK_OK(dlock_semaphore_try_set_permits(q, 5, &set));
  CHECK(!set);
  CHECK_INT(get_int(s, "sbusy"), ==, 1);
  CHECK_OK(dlock_semaphore_acquire(q, 1, 0));
  CHECK_RC(dlock_semaphore_acquire(q, 1, 0), DLOCK_EBUSY);
  CHECK_OK(dlock_semaphore_available(q, &n));
  CHECK_INT(n, ==, 0);
  CHECK_OK(dlock_semaphore_release(q, 1));
  CHECK_OK(dlock_semaphore_available(q, &n));
  CHECK_INT(n, ==, 1);
  CHECK_RC(dlock_semaphore_acquire(q, 2, 0), DLOCK_EBUSY);
  CHECK_OK(dlock_semaphore_add_permits(q, 2));
  CHECK_OK(dlock_semaphore_acquire(q, 2, 0));
  CHECK_OK(dlock_semaphore_available(q, &n));
  CHECK_INT(n, ==, 1);
  CHECK_OK(dlock_semaphore_add_permits(q, -3));
  CHECK_OK(dlock_semaphore_available(q, &n));
  CHECK_INT(n, ==, -2);
  CHECK_RC(dlock_semaphore_acquire(q, 1, 0), DLOCK_EBUSY);
  bool existed = false;
  CHECK_OK(dlock_semaphore_delete(q, &existed));
  CHECK(existed);
  CHECK_OK(dlock_semaphore_delete(q, &existed));
  CHECK(!existed);
  CHECK(!it_exists(s, "sbusy"));
  /* a key of another type */
  CHECK_INT(th_redis_int(s, "HSET shash f 1"), ==, 1);
  dlock_semaphore_t *h = it_sem(c, "shash");
  CHECK_RC(dlock_semaphore_acquire(h, 1, 0), DLOCK_EWRONGTYPE);
  dlock_semaphore_free(h);
  dlock_semaphore_free(q);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_sem_timeout(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_semaphore_t *q = it_sem(c, "stimeout");
  CHECK_OK(dlock_semaphore_try_set_permits(q, 0, NULL));
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_semaphore_acquire(q, 1, 300), DLOCK_ETIMEDOUT);
  int64_t took = th_now_ms() - t0;
  printf("timed out after %lld ms (wait 300)\n", (long long)took);
  CHECK_INT(took, >=, 290);
  CHECK_INT(took, <, 300 + PROMPT_MS);
  /* one permit is not two */
  CHECK_OK(dlock_semaphore_release(q, 1));
  CHECK_RC(dlock_semaphore_acquire(q, 2, 200), DLOCK_ETIMEDOUT);
  CHECK_OK(dlock_semaphore_acquire(q, 1, 200));
  dlock_semaphore_free(q);
  dlock_client_free(c);
  th_server_stop(s);
}

/* A waiter sleeps without polling and wakes at the release. */
static void t_sem_wakes_on_release(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_semaphore_t *q = it_sem(c, "swake");
  CHECK_OK(dlock_semaphore_try_set_permits(q, 0, NULL));
  sem_waiter w;
  sem_waiter_start(&w, q, NULL, 1, DLOCK_WAIT_FOREVER);
  CHECK(wait_sem_subscribers(s, "swake", 1, 5000));
  /* the waiter's retry after subscribing is its last call until a wake */
  th_sleep_ms(300);
  int64_t before = script_calls(s);
  th_sleep_ms(1000);
  int64_t during = script_calls(s) - before;
  printf("script calls during 1 s of waiting: %lld\n", (long long)during);
  CHECK_INT(during, ==, 0);
  CHECK(!atomic_load(&w.done));
  int64_t t_rel = th_now_ms();
  CHECK_OK(dlock_semaphore_release(q, 1));
  CHECKF(sem_waiter_wait(&w, PROMPT_MS), "waiter not woken by the release");
  CHECK_OK(w.rc);
  printf("woken %lld ms after the release\n", (long long)(w.t_done - t_rel));
  CHECK_INT(w.t_done - t_rel, <, PROMPT_MS);
  pthread_join(w.th, NULL);
  int64_t n = -1;
  CHECK_OK(dlock_semaphore_available(q, &n));
  CHECK_INT(n, ==, 0);
  dlock_semaphore_free(q);
  dlock_client_free(c);
  th_server_stop(s);
}

/* A release of n permits wakes n waiters of one client at once. */
static void t_sem_release_wakes_many(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_semaphore_t *q = it_sem(c, "smany");
  CHECK_OK(dlock_semaphore_try_set_permits(q, 0, NULL));
  sem_waiter w[3];
  for (int i = 0; i < 3; i++)
    sem_waiter_start(&w[i], q, NULL, 1, 10000);
  CHECK(wait_sem_subscribers(s, "smany", 1, 5000));
  /* the third never gets a permit; the first two do */
  CHECK_OK(dlock_semaphore_release(q, 2));
  int got = 0;
  bool ok;
  TH_WAIT_FOR(ok,
              atomic_load(&w[0].done) + atomic_load(&w[1].done) +
                      atomic_load(&w[2].done) >=
                  2,
              PROMPT_MS);
  CHECKF(ok, "two waiters not woken by a release of two permits");
  for (int i = 0; i < 3; i++)
    if (atomic_load(&w[i].done) && w[i].rc == 0)
      got++;
  CHECK_INT(got, ==, 2);
  CHECK_OK(dlock_semaphore_release(q, 1));
  for (int i = 0; i < 3; i++) {
    CHECK(sem_waiter_wait(&w[i], PROMPT_MS));
    CHECK_OK(w[i].rc);
    pthread_join(w[i].th, NULL);
  }
  dlock_semaphore_free(q);
  dlock_client_free(c);
  th_server_stop(s);
}

/* A release too small for the oldest waiter's request wakes a younger one
 * whose request fits, instead of spending the wake-up on the one that
 * cannot use it (which would leave the younger asleep until its deadline:
 * nothing else is released here). */
static void t_sem_mixed_requests(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_semaphore_t *q = it_sem(c, "smixed");
  CHECK_OK(dlock_semaphore_try_set_permits(q, 0, NULL));
  sem_waiter big, small;
  sem_waiter_start(&big, q, NULL, 3, 10000);
  CHECK(wait_sem_subscribers(s, "smixed", 1, 5000));
  th_sleep_ms(200); /* its retry after subscribing is done: it sleeps */
  int64_t before = script_calls(s);
  sem_waiter_start(&small, q, NULL, 1, 10000);
  bool ok; /* the younger's attempt, and its retry once registered */
  TH_WAIT_FOR(ok, script_calls(s) >= before + 2, 5000);
  CHECK(ok);
  th_sleep_ms(200);
  CHECK(!atomic_load(&big.done) && !atomic_load(&small.done));
  CHECK_OK(dlock_semaphore_release(q, 1));
  CHECKF(sem_waiter_wait(&small, PROMPT_MS),
         "the 1-permit waiter was not woken by a release of 1 permit");
  CHECK_OK(small.rc);
  pthread_join(small.th, NULL);
  CHECK(!atomic_load(&big.done));
  CHECK_OK(dlock_semaphore_release(q, 3));
  CHECKF(sem_waiter_wait(&big, PROMPT_MS), "the 3-permit waiter not woken");
  CHECK_OK(big.rc);
  pthread_join(big.th, NULL);
  int64_t n = -1;
  CHECK_OK(dlock_semaphore_available(q, &n));
  CHECK_INT(n, ==, 0);
  dlock_semaphore_free(q);
  dlock_client_free(c);
  th_server_stop(s);
}

/* ------------------------------------------------------ permit semaphore */

typedef struct killed_ctx {
  th_server_t *s;
  int fds[2]; /* the child reports its acquire on this pipe */
} killed_ctx;

static void killed_child(void *arg) {
  killed_ctx *k = arg;
  close(k->fds[0]);
  dlock_client_t *c = it_client(k->s);
  dlock_permit_sem_t *p = it_psem(c, "pkilled");
  char id[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(dlock_permit_sem_acquire(p, 0, 500, id));
  CHECK(write(k->fds[1], "a", 1) == 1);
  th_sleep_ms(20000); /* killed long before this */
}

/* A holder killed with its permit: the permit comes back after its lease
 * (no release message is ever sent) and a waiter gets it. */
static void t_psem_killed_holder(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  char *ok = th_redis_str(s, "SET pkilled 1");
  CHECK(ok);
  free(ok);
  killed_ctx k = {.s = s};
  CHECK(pipe(k.fds) == 0);
  pid_t pid = it_spawn(killed_child, &k);
  close(k.fds[1]);
  struct pollfd pf = {.fd = k.fds[0], .events = POLLIN};
  CHECKF(poll(&pf, 1, 10000) == 1, "child did not report its acquire");
  char b;
  CHECK(read(k.fds[0], &b, 1) == 1);
  int64_t t_acq = th_now_ms();
  CHECK(kill(pid, SIGKILL) == 0);
  int st = it_spawn_wait(pid, 5000);
  CHECK(WIFSIGNALED(st));
  close(k.fds[0]);
  CHECK_INT(th_redis_int(s, "ZCARD {pkilled}:timeout"), ==, 1);

  dlock_client_t *c = it_client(s);
  dlock_permit_sem_t *p = it_psem(c, "pkilled");
  char id[DLOCK_PERMIT_ID_LEN + 1];
  int rc = dlock_permit_sem_acquire(p, 0, 5000, id);
  if (th_now_ms() - t_acq < 400) /* still within the dead holder's lease */
    CHECK_RC(rc, DLOCK_EBUSY);
  else if (rc == 0)
    CHECK_OK(dlock_permit_sem_release(p, id));
  CHECK_OK(dlock_permit_sem_acquire(p, 5000, 5000, id));
  int64_t took = th_now_ms() - t_acq;
  printf("permit regained %lld ms after the killed holder's 500 ms lease "
         "began\n",
         (long long)took);
  CHECK_INT(took, >=, 400);
  CHECK_INT(took, <, 500 + PROMPT_MS);
  CHECK(is_permit_id(id));
  CHECK_INT(th_redis_int(s, "ZCARD {pkilled}:timeout"), ==, 1);
  CHECK_OK(dlock_permit_sem_release(p, id));
  int64_t n = -1;
  CHECK_OK(dlock_permit_sem_available(p, &n));
  CHECK_INT(n, ==, 1);
  dlock_permit_sem_free(p);
  dlock_client_free(c);
  th_server_stop(s);
}

/* A watchdog permit outlives many watchdog periods: the client renews its
 * expiry on the server until release, and nothing is reported lost. (A
 * 1 s watchdog: a 300 ms one left too little room for a renewal on a
 * machine loaded past its cores, where the permit then did expire.) */
static void t_psem_watchdog_renewed(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_lost_t lost;
  it_lost_init(&lost);
  it_client_cfg_t cfg = {
      .watchdog_ms = 1000, .lost = it_lost_cb, .lost_ud = &lost};
  dlock_client_t *c = it_client_cfg(s, &cfg);
  dlock_client_t *other = it_client(s);
  dlock_permit_sem_t *p = it_psem(c, "pwd");
  dlock_permit_sem_t *q = it_psem(other, "pwd");
  CHECK_OK(dlock_permit_sem_try_set_permits(p, 1, NULL));
  char id[DLOCK_PERMIT_ID_LEN + 1], id2[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(dlock_permit_sem_acquire(p, 0, WD, id));
  int64_t t0 = th_now_ms();
  int checks = 0;
  while (th_now_ms() - t0 < 3000) { /* 3 watchdog periods */
    dlock_sem_state_t *st = NULL;
    CHECK_OK(dlock_permit_sem_state(q, &st));
    CHECKF(st->npermits == 1, "permit gone %lld ms into a 1000 ms watchdog",
           (long long)(th_now_ms() - t0));
    CHECK_STR(st->permits[0].id, id);
    CHECK_INT(st->permits[0].expires_in_ms, >, 0);
    CHECK_INT(st->permits[0].expires_in_ms, <=, 1000);
    CHECK_INT(st->available, ==, 0);
    dlock_sem_state_free(st);
    CHECK_RC(dlock_permit_sem_acquire(q, 0, 5000, id2), DLOCK_EBUSY);
    /* vouched for by the client's clock: within one lease */
    int64_t valid = 0;
    CHECK_OK(dlock_permit_sem_permit_valid(p, id, &valid));
    CHECK_INT(valid, >, 0);
    CHECK_INT(valid, <=, 1000);
    checks++;
    th_sleep_ms(50);
  }
  printf("permit alive through %d checks over 3000 ms\n", checks);
  CHECK_INT(it_lost_count(&lost), ==, 0);
  CHECK_OK(dlock_permit_sem_release(p, id));
  CHECK_OK(dlock_permit_sem_acquire(q, 0, 5000, id2));
  CHECK_OK(dlock_permit_sem_release(q, id2));
  dlock_permit_sem_free(q);
  dlock_permit_sem_free(p);
  dlock_client_free(other);
  dlock_client_free(c);
  th_server_stop(s);
}

/* A watchdog permit whose entry vanishes is reported lost (thread id 0)
 * and its release says DLOCK_ELOST. */
static void t_psem_watchdog_lost(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_lost_t lost;
  it_lost_init(&lost);
  it_client_cfg_t cfg = {
      .watchdog_ms = 300, .lost = it_lost_cb, .lost_ud = &lost};
  dlock_client_t *c = it_client_cfg(s, &cfg);
  dlock_permit_sem_t *p = it_psem(c, "plost");
  CHECK_OK(dlock_permit_sem_try_set_permits(p, 1, NULL));
  char id[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(dlock_permit_sem_acquire(p, 0, WD, id));
  CHECK_INT(th_redis_int(s, "DEL {plost}:timeout"), ==, 1);
  CHECKF(it_lost_wait(&lost, 1, 3000), "lost permit not reported");
  CHECK_STR(lost.name, "plost");
  CHECK_INT(lost.tid, ==, 0);
  CHECK_INT(lost.reason, ==, DLOCK_LOST_GONE);
  int64_t valid = 0;
  CHECK_RC(dlock_permit_sem_permit_valid(p, id, &valid), DLOCK_ELOST);
  CHECK_RC(dlock_permit_sem_release(p, id), DLOCK_ELOST);
  dlock_permit_sem_free(p);
  dlock_client_free(c);
  th_server_stop(s);
}

/* dlock_permit_sem_permit_valid answers by the client's clock: a fixed
 * lease's permit is good until its lease has run, then lapsed (ELOST,
 * *valid_ms <= 0); an id this client does not hold, a malformed id and a
 * NULL out-pointer are refused. */
static void t_psem_permit_valid(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_permit_sem_t *p = it_psem(c, "pvalid");
  CHECK_OK(dlock_permit_sem_try_set_permits(p, 2, NULL));
  char id[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(dlock_permit_sem_acquire(p, 0, 400, id));
  int64_t valid = 0;
  CHECK_OK(dlock_permit_sem_permit_valid(p, id, &valid));
  CHECK_INT(valid, >, 0);
  CHECK_INT(valid, <=, 400);
  int rc = 0;
  TH_WAIT_FOR(rc, dlock_permit_sem_permit_valid(p, id, &valid) == DLOCK_ELOST,
              3000);
  CHECKF(rc, "a 400 ms permit still vouched for after 3 s");
  CHECK_INT(valid, <=, 0);
  CHECK_RC(dlock_permit_sem_permit_valid(p, "0123456789abcdef0123456789abcdef",
                                         &valid),
           DLOCK_ENOTOWNER);
  CHECK_RC(dlock_permit_sem_permit_valid(p, "xyz", &valid), DLOCK_EINVAL);
  CHECK_RC(dlock_permit_sem_permit_valid(p, id, NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_permit_sem_permit_valid(NULL, id, &valid), DLOCK_EINVAL);
  dlock_permit_sem_free(p);
  dlock_client_free(c);
  th_server_stop(s);
}

/* Holder info of permits: a client with it writes dlock_holder:{name}:<id>
 * beside each permit, with the permit's lease, renewed with it and deleted
 * at the release; the state returns it per permit. A client without it
 * writes nothing, and its permits have none. */
static void t_psem_holder_info(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_watchdog_timeout(o, 600));
  CHECK_OK(dlock_options_set_holder_info(o, "{\"who\":\"permit-test\"}"));
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new(&c, s->url, o));
  dlock_options_free(o);
  dlock_client_t *plain = it_client(s);
  dlock_permit_sem_t *p = it_psem(c, "pinfo");
  dlock_permit_sem_t *q = it_psem(plain, "pinfo");
  CHECK_OK(dlock_permit_sem_try_set_permits(p, 2, NULL));
  char id[DLOCK_PERMIT_ID_LEN + 1], id2[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(dlock_permit_sem_acquire(p, 0, WD, id));
  CHECK_OK(dlock_permit_sem_acquire(q, 0, WD, id2));
  char key[128], key2[128];
  snprintf(key, sizeof key, "dlock_holder:{pinfo}:%s", id);
  snprintf(key2, sizeof key2, "dlock_holder:{pinfo}:%s", id2);
  CHECK(it_exists(s, key));
  CHECK(!it_exists(s, key2));
  /* renewed with the permit: a TTL set far out by hand comes back to the
   * lease at the next renewal */
  CHECK_INT(th_redis_int(s, "PEXPIRE %s 100000", key), ==, 1);
  bool renewed;
  TH_WAIT_FOR(renewed, th_redis_int(s, "PTTL %s", key) <= 600, 5000);
  CHECKF(renewed, "the permit's info key was not renewed with it");
  dlock_sem_state_t *st = NULL;
  CHECK_OK(dlock_permit_sem_state(q, &st));
  CHECK_INT(st->npermits, ==, 2);
  CHECK(st->permit_infos != NULL);
  for (size_t i = 0; i < st->npermits; i++) {
    if (strcmp(st->permits[i].id, id) == 0)
      CHECK_STR(st->permit_infos[i], "{\"who\":\"permit-test\"}");
    else
      CHECK(st->permit_infos[i] == NULL);
  }
  dlock_sem_state_free(st);
  CHECK_OK(dlock_permit_sem_release(p, id));
  CHECK(!it_exists(s, key));
  CHECK_OK(dlock_permit_sem_release(q, id2));
  dlock_permit_sem_free(q);
  dlock_permit_sem_free(p);
  dlock_client_free(plain);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_psem_release_outcomes(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_permit_sem_t *p = it_psem(c, "prel");
  CHECK_OK(dlock_permit_sem_try_set_permits(p, 1, NULL));
  char id[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(dlock_permit_sem_acquire(p, 0, 200, id));
  CHECK(is_permit_id(id));
  int64_t n = -1;
  CHECK_OK(dlock_permit_sem_available(p, &n));
  CHECK_INT(n, ==, 0);
  /* expired permits count as available before anyone reclaims them */
  bool ok;
  TH_WAIT_FOR(ok, dlock_permit_sem_available(p, &n) == 0 && n == 1, 3000);
  CHECKF(ok, "the 200 ms permit did not expire");
  CHECK_INT(th_redis_int(s, "ZCARD {prel}:timeout"), ==, 1); /* not yet */
  CHECK_RC(dlock_permit_sem_release(p, id), DLOCK_ELOST);
  CHECK_INT(th_redis_int(s, "ZCARD {prel}:timeout"), ==, 0);
  CHECK_INT(get_int(s, "prel"), ==, 1); /* counted back once */
  CHECK_RC(dlock_permit_sem_release(p, id), DLOCK_ENOTOWNER);
  CHECK_RC(dlock_permit_sem_release(p, "00112233445566778899aabbccddeeff"),
           DLOCK_ENOTOWNER);
  CHECK_RC(dlock_permit_sem_release(p, "xyz"), DLOCK_EINVAL);
  CHECK_RC(dlock_permit_sem_release(p, "00112233445566778899AABBCCDDEEFF"),
           DLOCK_EINVAL);
  CHECK_RC(dlock_permit_sem_release(p, "00112233445566778899aabbccddeef"),
           DLOCK_EINVAL);
  CHECK_RC(dlock_permit_sem_release(p, "00112233445566778899aabbccddeeff0"),
           DLOCK_EINVAL);
  CHECK_OK(dlock_permit_sem_acquire(p, 0, 10000, id));
  CHECK_OK(dlock_permit_sem_release(p, id));
  CHECK_RC(dlock_permit_sem_release(p, id), DLOCK_ENOTOWNER);
  CHECK_OK(dlock_permit_sem_available(p, &n));
  CHECK_INT(n, ==, 1);
  dlock_permit_sem_free(p);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_psem_state(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_permit_sem_t *p = it_psem(c, "pstate");
  CHECK_STR(dlock_permit_sem_name(p), "pstate");
  dlock_sem_state_t *st = NULL;
  CHECK_OK(dlock_permit_sem_state(p, &st));
  CHECK_STR(st->name, "pstate");
  CHECK_INT(st->available, ==, 0);
  CHECK_INT(st->npermits, ==, 0);
  CHECK_INT(st->in_use, ==, 0);
  dlock_sem_state_free(st);
  CHECK_OK(dlock_permit_sem_try_set_permits(p, 3, NULL));
  char a[DLOCK_PERMIT_ID_LEN + 1], b[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(dlock_permit_sem_acquire(p, 0, 10000, a));
  CHECK_OK(dlock_permit_sem_acquire(p, 0, WD, b));
  CHECK(strcmp(a, b) != 0);
  CHECK_OK(dlock_permit_sem_state(p, &st));
  CHECK_INT(st->available, ==, 1);
  CHECK_INT(st->npermits, ==, 2);
  CHECK_INT(st->in_use, ==, 2);
  /* soonest expiry first: the 10 s permit, then the 30 s watchdog one */
  CHECK_STR(st->permits[0].id, a);
  CHECK_STR(st->permits[1].id, b);
  CHECK_INT(st->permits[0].expires_in_ms, >, 10000 - PROMPT_MS);
  CHECK_INT(st->permits[0].expires_in_ms, <=, 10000);
  CHECK_INT(st->permits[1].expires_in_ms, >, 30000 - PROMPT_MS);
  CHECK_INT(st->permits[1].expires_in_ms, <=, 30000);
  dlock_sem_state_free(st);
  /* the layout: {name}:timeout scores are server-time expiries */
  redisReply *t = th_redis_cmd(s, "TIME");
  CHECK(t && t->type == REDIS_REPLY_ARRAY && t->elements == 2);
  int64_t now = strtoll(t->element[0]->str, NULL, 10) * 1000 +
                strtoll(t->element[1]->str, NULL, 10) / 1000;
  freeReplyObject(t);
  char raw[16];
  raw_id(a, raw);
  char *score = th_redis_str(s, "ZSCORE {pstate}:timeout %b", raw, sizeof raw);
  CHECK(score);
  int64_t left = strtoll(score, NULL, 10) - now;
  free(score);
  CHECK_INT(left, >, 10000 - PROMPT_MS);
  CHECK_INT(left, <=, 10000);
  CHECK_INT(get_int(s, "pstate"), ==, 1);
  CHECK_OK(dlock_permit_sem_release(p, a));
  CHECK_OK(dlock_permit_sem_release(p, b));
  CHECK_OK(dlock_permit_sem_state(p, &st));
  CHECK_INT(st->available, ==, 3);
  CHECK_INT(st->npermits, ==, 0);
  CHECK_INT(st->in_use, ==, 0);
  dlock_sem_state_free(st);
  dlock_sem_state_free(NULL);
  dlock_permit_sem_free(p);
  dlock_client_free(c);
  th_server_stop(s);
}

/* ------------------------------------------------------------- Redisson */

/* RSemaphore, from REDIS-LAYOUT.md: acquire n = GET >= n -> DECRBY n;
 * release n = INCRBY n, publish the new count. */
static const char RS_SEM_ACQUIRE[] =
    "local v = redis.call('get', KEYS[1]); "
    "if v ~= false and tonumber(v) >= tonumber(ARGV[1]) then "
    "redis.call('decrby', KEYS[1], ARGV[1]); return 1; end; "
    "return 0;";
static const char RS_SEM_RELEASE[] =
    "local v = redis.call('incrby', KEYS[1], ARGV[1]); "
    "redis.call(ARGV[2], KEYS[2], v); return v;";
/* RPermitExpirableSemaphore, from REDIS-LAYOUT.md: reclaim expired ids,
 * take a permit, ZADD id expiry; release = ZREM id, INCRBY, publish. The
 * id is sent as Redisson 3.52 sends it: 16 raw bytes (rs_psem_*). */
static const char RS_PSEM_ACQUIRE[] =
    "local t = redis.call('time'); "
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000); "
    "local ex = redis.call('zrangebyscore', KEYS[2], 0, now); "
    "if #ex > 0 then redis.call('zrem', KEYS[2], unpack(ex)); "
    "local v = redis.call('incrby', KEYS[1], #ex); "
    "redis.call(ARGV[3], KEYS[3], v); end; "
    "local v = redis.call('get', KEYS[1]); "
    "if v ~= false and tonumber(v) >= 1 then "
    "redis.call('decrby', KEYS[1], 1); "
    "redis.call('zadd', KEYS[2], now + tonumber(ARGV[2]), ARGV[1]); "
    "return 1; end; return 0;";
static const char RS_PSEM_RELEASE[] =
    "if redis.call('zrem', KEYS[2], ARGV[1]) == 0 then return 0; end; "
    "local v = redis.call('incrby', KEYS[1], 1); "
    "redis.call(ARGV[2], KEYS[3], v); return 1;";

static int64_t rs_eval_int(redisReply *r) {
  CHECK(r);
  CHECKF(r->type == REDIS_REPLY_INTEGER, "reply type %d: %s", r->type,
         r->type == REDIS_REPLY_ERROR ? r->str : "");
  int64_t v = r->integer;
  freeReplyObject(r);
  return v;
}

static int64_t rs_sem_acquire(th_server_t *s, const char *name, int n) {
  return rs_eval_int(
      th_redis_cmd(s, "EVAL %s 1 %s %d", RS_SEM_ACQUIRE, name, n));
}

static void rs_sem_release(th_server_t *s, const char *name, int n) {
  char ch[256];
  sem_channel(name, ch, sizeof ch);
  rs_eval_int(th_redis_cmd(s, "EVAL %s 2 %s %s %d PUBLISH", RS_SEM_RELEASE,
                           name, ch, n));
}

static int64_t rs_psem_acquire(th_server_t *s, const char *name, const char *id,
                               int64_t lease) {
  char ch[256], tk[256];
  sem_channel(name, ch, sizeof ch);
  snprintf(tk, sizeof tk, "{%s}:timeout", name);
  char raw[16];
  raw_id(id, raw);
  return rs_eval_int(th_redis_cmd(s, "EVAL %s 3 %s %s %s %b %lld PUBLISH",
                                  RS_PSEM_ACQUIRE, name, tk, ch, raw,
                                  sizeof raw, (long long)lease));
}

static int64_t rs_psem_release(th_server_t *s, const char *name,
                               const char *id) {
  char ch[256], tk[256];
  sem_channel(name, ch, sizeof ch);
  snprintf(tk, sizeof tk, "{%s}:timeout", name);
  char raw[16];
  raw_id(id, raw);
  return rs_eval_int(th_redis_cmd(s, "EVAL %s 3 %s %s %s %b PUBLISH",
                                  RS_PSEM_RELEASE, name, tk, ch, raw,
                                  sizeof raw));
}

static void t_sem_redisson(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_semaphore_t *q = it_sem(c, "srs");
  CHECK_OK(dlock_semaphore_try_set_permits(q, 1, NULL));
  /* Redisson holds the only permit; dlock waits; Redisson's release
   * wakes it */
  CHECK_INT(rs_sem_acquire(s, "srs", 1), ==, 1);
  CHECK_RC(dlock_semaphore_acquire(q, 1, 0), DLOCK_EBUSY);
  sem_waiter w;
  sem_waiter_start(&w, q, NULL, 1, DLOCK_WAIT_FOREVER);
  CHECK(wait_sem_subscribers(s, "srs", 1, 5000));
  CHECK(!atomic_load(&w.done));
  int64_t t_rel = th_now_ms();
  rs_sem_release(s, "srs", 1);
  CHECKF(sem_waiter_wait(&w, PROMPT_MS),
         "dlock waiter not woken by Redisson's release");
  CHECK_OK(w.rc);
  printf("woken %lld ms after Redisson's release\n",
         (long long)(w.t_done - t_rel));
  pthread_join(w.th, NULL);
  /* dlock holds it: Redisson cannot take it until dlock releases */
  CHECK_INT(rs_sem_acquire(s, "srs", 1), ==, 0);
  CHECK_OK(dlock_semaphore_release(q, 1));
  CHECK_INT(rs_sem_acquire(s, "srs", 1), ==, 1);
  rs_sem_release(s, "srs", 1);
  dlock_semaphore_free(q);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_psem_redisson(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_permit_sem_t *p = it_psem(c, "prs");
  CHECK_OK(dlock_permit_sem_try_set_permits(p, 1, NULL));
  const char *rsid = "0123456789abcdef0123456789abcdef";
  CHECK_INT(rs_psem_acquire(s, "prs", rsid, 30000), ==, 1);
  dlock_sem_state_t *st = NULL;
  CHECK_OK(dlock_permit_sem_state(p, &st));
  CHECK_INT(st->npermits, ==, 1);
  CHECK_STR(st->permits[0].id, rsid);
  dlock_sem_state_free(st);
  sem_waiter w;
  sem_waiter_start(&w, NULL, p, 1, DLOCK_WAIT_FOREVER);
  CHECK(wait_sem_subscribers(s, "prs", 1, 5000));
  CHECK(!atomic_load(&w.done));
  int64_t t_rel = th_now_ms();
  CHECK_INT(rs_psem_release(s, "prs", rsid), ==, 1);
  CHECKF(sem_waiter_wait(&w, PROMPT_MS),
         "dlock waiter not woken by Redisson's release");
  CHECK_OK(w.rc);
  printf("woken %lld ms after Redisson's release\n",
         (long long)(w.t_done - t_rel));
  pthread_join(w.th, NULL);
  CHECK(is_permit_id(w.id));
  /* dlock's permit is in Redisson's ZSET; Redisson must wait for it */
  char raw[16];
  raw_id(w.id, raw);
  CHECK(th_redis_int(s, "ZRANK {prs}:timeout %b", raw, sizeof raw) == 0);
  CHECK_INT(rs_psem_acquire(s, "prs", rsid, 30000), ==, 0);
  CHECK_OK(dlock_permit_sem_release(p, w.id));
  CHECK_INT(rs_psem_acquire(s, "prs", rsid, 30000), ==, 1);
  /* and Redisson releasing what dlock acquired (ids are shared) */
  CHECK_INT(rs_psem_release(s, "prs", rsid), ==, 1);
  char id[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(dlock_permit_sem_acquire(p, 0, 10000, id));
  CHECK_INT(rs_psem_release(s, "prs", id), ==, 1);
  int64_t n = -1;
  CHECK_OK(dlock_permit_sem_available(p, &n));
  CHECK_INT(n, ==, 1);
  /* Redisson's permit without a lease (score 922337203685477) is listed
   * with no expiry (-1), not as a lease of millennia */
  raw_id(rsid, raw);
  CHECK_INT(th_redis_int(s, "DECR prs"), ==, 0);
  CHECK_INT(
      th_redis_int(s, "ZADD {prs}:timeout 922337203685477 %b", raw, sizeof raw),
      ==, 1);
  CHECK_OK(dlock_permit_sem_state(p, &st));
  CHECK_INT(st->npermits, ==, 1);
  CHECK_STR(st->permits[0].id, rsid);
  CHECK_INT(st->permits[0].expires_in_ms, ==, -1);
  dlock_sem_state_free(st);
  CHECK_OK(dlock_permit_sem_release(p, rsid));
  /* a permit written by an earlier dlock (the member is the 32 hex digits
   * themselves) is listed and released by its id all the same */
  CHECK_INT(th_redis_int(s, "DECR prs"), ==, 0);
  CHECK_INT(th_redis_int(s, "ZADD {prs}:timeout 99999999999999 %s", rsid), ==,
            1);
  CHECK_OK(dlock_permit_sem_state(p, &st));
  CHECK_INT(st->npermits, ==, 1);
  CHECK_STR(st->permits[0].id, rsid);
  dlock_sem_state_free(st);
  CHECK_OK(dlock_permit_sem_release(p, rsid));
  CHECK_INT(th_redis_int(s, "ZCARD {prs}:timeout"), ==, 0);
  CHECK_OK(dlock_permit_sem_available(p, &n));
  CHECK_INT(n, ==, 1);
  dlock_permit_sem_free(p);
  dlock_client_free(c);
  th_server_stop(s);
}

/* ------------------------------------------------------------ bad input */

static void t_sem_badinput(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_semaphore_t *q = NULL;
  dlock_permit_sem_t *p = NULL;
  CHECK_RC(dlock_semaphore_new(c, "x", NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_semaphore_new(NULL, "x", &q), DLOCK_EINVAL);
  CHECK(q == NULL);
  CHECK_RC(dlock_semaphore_new(c, NULL, &q), DLOCK_EINVAL);
  CHECK_RC(dlock_semaphore_new(c, "", &q), DLOCK_EINVAL);
  CHECK_RC(dlock_semaphore_new(c, "dlock_lock_queue:{x}", &q), DLOCK_EINVAL);
  char big[DLOCK_NAME_MAX + 2];
  memset(big, 'n', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  CHECK_RC(dlock_semaphore_new(c, big, &q), DLOCK_EINVAL);
  CHECK_RC(dlock_permit_sem_new(c, big, &p), DLOCK_EINVAL);
  CHECK_RC(dlock_permit_sem_new(c, "x", NULL), DLOCK_EINVAL);
  CHECK(p == NULL);
  big[DLOCK_NAME_MAX] = '\0';
  CHECK_OK(dlock_semaphore_new(c, big, &q));
  dlock_semaphore_free(q);

  q = it_sem(c, "sbad");
  p = it_psem(c, "pbad");
  int64_t n;
  bool b;
  char id[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_RC(dlock_semaphore_acquire(NULL, 1, 0), DLOCK_EINVAL);
  CHECK_RC(dlock_semaphore_acquire(q, 0, 0), DLOCK_EINVAL);
  CHECK_RC(dlock_semaphore_acquire(q, -1, 0), DLOCK_EINVAL);
  CHECK_RC(dlock_semaphore_acquire(q, 1, -2), DLOCK_EINVAL);
  CHECK_RC(dlock_semaphore_release(q, 0), DLOCK_EINVAL);
  CHECK_RC(dlock_semaphore_release(NULL, 1), DLOCK_EINVAL);
  CHECK_RC(dlock_semaphore_try_set_permits(q, -1, &b), DLOCK_EINVAL);
  CHECK_RC(dlock_semaphore_try_set_permits(NULL, 1, &b), DLOCK_EINVAL);
  CHECK_RC(dlock_semaphore_available(q, NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_semaphore_available(NULL, &n), DLOCK_EINVAL);
  CHECK_RC(dlock_semaphore_add_permits(NULL, 1), DLOCK_EINVAL);
  CHECK_RC(dlock_semaphore_delete(NULL, &b), DLOCK_EINVAL);
  CHECK_RC(dlock_permit_sem_acquire(p, 0, WD, NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_permit_sem_acquire(NULL, 0, WD, id), DLOCK_EINVAL);
  CHECK_RC(dlock_permit_sem_acquire(p, -2, WD, id), DLOCK_EINVAL);
  CHECK_RC(dlock_permit_sem_acquire(p, 0, 0, id), DLOCK_EINVAL);
  CHECK_RC(dlock_permit_sem_acquire(p, 0, -2, id), DLOCK_EINVAL);
  CHECK_RC(dlock_permit_sem_acquire(p, 0, DLOCK_LEASE_MAX + 1, id),
           DLOCK_EINVAL);
  CHECK_RC(dlock_permit_sem_release(p, NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_permit_sem_release(NULL, "0123456789abcdef0123456789abcdef"),
           DLOCK_EINVAL);
  CHECK_RC(dlock_permit_sem_try_set_permits(p, -5, NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_permit_sem_available(p, NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_permit_sem_state(p, NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_permit_sem_state(NULL, NULL), DLOCK_EINVAL);
  /* a handle of another type is refused, not misread */
  CHECK_RC(dlock_semaphore_acquire((dlock_semaphore_t *)p, 1, 0),
           DLOCK_EBADHANDLE);
  CHECK_RC(dlock_permit_sem_available((dlock_permit_sem_t *)q, &n),
           DLOCK_EBADHANDLE);
  CHECK_STR(dlock_semaphore_name(NULL), "");
  CHECK_STR(dlock_permit_sem_name((dlock_permit_sem_t *)q), "");
  dlock_semaphore_free(NULL);
  dlock_permit_sem_free(NULL);
  dlock_semaphore_free((dlock_semaphore_t *)p); /* ignored: not a semaphore */
  CHECK_STR(dlock_permit_sem_name(p), "pbad");
  /* handles left over are freed with the client (ASan checks) */
  dlock_client_free(c);
  th_server_stop(s);
}

static const check_case_t cases[] = {
    {"sem_bound_processes", t_sem_bound_processes},
    {"sem_try_once_busy", t_sem_try_once_busy},
    {"sem_timeout", t_sem_timeout},
    {"sem_wakes_on_release", t_sem_wakes_on_release},
    {"sem_release_wakes_many", t_sem_release_wakes_many},
    {"sem_mixed_requests", t_sem_mixed_requests},
    {"sem_redisson", t_sem_redisson},
    {"sem_badinput", t_sem_badinput},
    {"psem_bound_processes", t_psem_bound_processes},
    {"psem_killed_holder", t_psem_killed_holder},
    {"psem_watchdog_renewed", t_psem_watchdog_renewed},
    {"psem_watchdog_lost", t_psem_watchdog_lost},
    {"psem_permit_valid", t_psem_permit_valid},
    {"psem_holder_info", t_psem_holder_info},
    {"psem_release_outcomes", t_psem_release_outcomes},
    {"psem_state", t_psem_state},
    {"psem_redisson", t_psem_redisson},
};

CHECK_MAIN(cases)
