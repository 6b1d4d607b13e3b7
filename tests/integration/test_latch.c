/*
 * test_latch.c - the count-down latch against a real redis-server.
 *
 * Design note: waiters are threads of this process and one forked child
 * process (forked before the parent starts any thread, for TSan), which
 * reports in a MAP_SHARED page when its await returned and with what. The
 * "not before zero" check is necessarily a bounded observation (nobody
 * returned within 500 ms of the count reaching 1); the release at zero is
 * checked with a generous 2 s bound. "Redisson" in the interop cases is
 * the harness's hiredis connection running RCountDownLatch scripts written
 * for this test from REDIS-LAYOUT.md (not Redisson's code), and a hiredis
 * subscriber standing for a Redisson awaiter.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "itest.h"

#include <sys/mman.h>

#define PROMPT_MS 2000
#define NWAITERS 4

/* GET key as an integer (INT64_MIN when absent or not a number). */
static int64_t get_int(th_server_t *s, const char *key) {
  char *v = th_redis_str(s, "GET %s", key);
  int64_t n = v ? strtoll(v, NULL, 10) : INT64_MIN;
  free(v);
  return n;
}

static dlock_latch_t *it_latch(dlock_client_t *c, const char *name) {
  dlock_latch_t *l = NULL;
  CHECK_OK(dlock_latch_new(c, name, &l));
  CHECK(l != NULL);
  return l;
}

static void latch_channel(const char *name, char *buf, size_t n) {
  snprintf(buf, n, "redisson_countdownlatch__channel__{%s}", name);
}

static bool wait_latch_subscribers(th_server_t *s, const char *name,
                                   int64_t min, int64_t timeout_ms) {
  char ch[256];
  latch_channel(name, ch, sizeof ch);
  bool ok;
  TH_WAIT_FOR(ok, it_numsub(s, ch) >= min, timeout_ms);
  return ok;
}

/* ------------------------------------------------------------ waiters */

typedef struct awaiter {
  dlock_latch_t *l;
  int64_t wait_ms;
  pthread_t th;
  atomic_int done;
  int rc;
  int64_t t_done;
} awaiter;

static void *awaiter_main(void *arg) {
  awaiter *a = arg;
  a->rc = dlock_latch_await(a->l, a->wait_ms);
  a->t_done = th_now_ms();
  atomic_store(&a->done, 1);
  return NULL;
}

static void awaiter_start(awaiter *a, dlock_latch_t *l, int64_t wait_ms) {
  memset(a, 0, sizeof *a);
  a->l = l;
  a->wait_ms = wait_ms;
  CHECK(pthread_create(&a->th, NULL, awaiter_main, a) == 0);
}

typedef struct child_report {
  atomic_int started; /* the child's client is up and about to await */
  atomic_int done;
  int rc;
} child_report;

typedef struct child_ctx {
  th_server_t *s;
  const char *name;
  child_report *rep;
} child_ctx;

static void await_child(void *arg) {
  child_ctx *x = arg;
  dlock_client_t *c = it_client(x->s);
  dlock_latch_t *l = it_latch(c, x->name);
  atomic_store(&x->rep->started, 1);
  x->rep->rc = dlock_latch_await(l, 15000);
  atomic_store(&x->rep->done, 1);
  dlock_latch_free(l);
  dlock_client_free(c);
}

static child_report *shared_report(void) {
  child_report *r = mmap(NULL, sizeof *r, PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(r != MAP_FAILED);
  memset(r, 0, sizeof *r);
  return r;
}

/* RCountDownLatch, from REDIS-LAYOUT.md: count down = DECR; <= 0 -> DEL;
 * == 0 -> publish "0"; set count = SET NX and publish "1". */
static const char RS_COUNT_DOWN[] =
    "local v = redis.call('decr', KEYS[1]); "
    "if v <= 0 then redis.call('del', KEYS[1]); end; "
    "if v == 0 then redis.call(ARGV[2], KEYS[2], ARGV[1]); end; "
    "return v;";
static const char RS_SET_COUNT[] =
    "if redis.call('exists', KEYS[1]) == 0 then "
    "redis.call('set', KEYS[1], ARGV[2]); "
    "redis.call(ARGV[3], KEYS[2], ARGV[1]); return 1; end; return 0;";

static int64_t rs_count_down(th_server_t *s, const char *name) {
  char ch[256];
  latch_channel(name, ch, sizeof ch);
  redisReply *r =
      th_redis_cmd(s, "EVAL %s 2 %s %s 0 PUBLISH", RS_COUNT_DOWN, name, ch);
  CHECK(r && r->type == REDIS_REPLY_INTEGER);
  int64_t v = r->integer;
  freeReplyObject(r);
  return v;
}

static int64_t rs_set_count(th_server_t *s, const char *name, int count) {
  char ch[256];
  latch_channel(name, ch, sizeof ch);
  redisReply *r = th_redis_cmd(s, "EVAL %s 2 %s %s 1 %d PUBLISH", RS_SET_COUNT,
                               name, ch, count);
  CHECK(r && r->type == REDIS_REPLY_INTEGER);
  int64_t v = r->integer;
  freeReplyObject(r);
  return v;
}

/* Threads and a child process are released exactly when the count
 * reaches zero, not before. `redisson`: the count is set and counted down
 * by the Redisson scripts instead of dlock. */
static void run_release_at_zero(const char *name, bool redisson) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  /* the count is set before any waiter starts (no thread yet: fork) */
  if (redisson) {
    CHECK_INT(rs_set_count(s, name, 2), ==, 1);
  } else {
    char *ok = th_redis_str(s, "SET %s 2", name);
    CHECK(ok);
    free(ok);
  }
  child_report *rep = shared_report();
  child_ctx x = {.s = s, .name = name, .rep = rep};
  pid_t pid = it_spawn(await_child, &x);

  dlock_client_t *c = it_client(s);
  dlock_latch_t *l = it_latch(c, name);
  int64_t n = -1;
  CHECK_OK(dlock_latch_count(l, &n));
  CHECK_INT(n, ==, 2);
  awaiter a[NWAITERS];
  for (int i = 0; i < NWAITERS; i++)
    awaiter_start(&a[i], l, 15000);
  bool ok;
  TH_WAIT_FOR(ok, atomic_load(&rep->started), 10000);
  CHECK(ok);
  /* both clients (this one and the child's) are subscribed */
  CHECK(wait_latch_subscribers(s, name, 2, 5000));

  if (redisson)
    CHECK_INT(rs_count_down(s, name), ==, 1);
  else
    CHECK_OK(dlock_latch_count_down(l));
  CHECK_OK(dlock_latch_count(l, &n));
  CHECK_INT(n, ==, 1);
  th_sleep_ms(500);
  for (int i = 0; i < NWAITERS; i++)
    CHECKF(!atomic_load(&a[i].done), "waiter %d returned (rc %d) at count 1", i,
           a[i].rc);
  CHECKF(!atomic_load(&rep->done), "the child's await returned at count 1");

  int64_t t_zero = th_now_ms();
  if (redisson)
    CHECK_INT(rs_count_down(s, name), ==, 0);
  else
    CHECK_OK(dlock_latch_count_down(l));
  TH_WAIT_FOR(ok, atomic_load(&rep->done), PROMPT_MS);
  CHECKF(ok, "the child was not released at zero");
  CHECK_OK(rep->rc);
  int64_t slowest = 0;
  for (int i = 0; i < NWAITERS; i++) {
    TH_WAIT_FOR(ok, atomic_load(&a[i].done), PROMPT_MS);
    CHECKF(ok, "waiter %d was not released at zero", i);
    CHECK_OK(a[i].rc);
    if (a[i].t_done - t_zero > slowest)
      slowest = a[i].t_done - t_zero;
    pthread_join(a[i].th, NULL);
  }
  printf("%d threads released within %lld ms of zero\n", NWAITERS,
         (long long)slowest);
  CHECK_INT(slowest, <, PROMPT_MS);
  CHECK(it_child_ok(it_spawn_wait(pid, 10000)));
  CHECK(!it_exists(s, name)); /* zero deletes the latch */
  CHECK_OK(dlock_latch_count(l, &n));
  CHECK_INT(n, ==, 0);
  dlock_latch_free(l);
  dlock_client_free(c);
  munmap(rep, sizeof *rep);
  th_server_stop(s);
}

static void t_release_at_zero(void) { run_release_at_zero("lzero", false); }

static void t_redisson_count_down_releases(void) {
  run_release_at_zero("lrs", true);
}

/* ------------------------------------------------------------- basics */

static void t_absent_returns_at_once(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_latch_t *l = it_latch(c, "labsent");
  CHECK_STR(dlock_latch_name(l), "labsent");
  int64_t t0 = th_now_ms();
  CHECK_OK(dlock_latch_await(l, 5000));
  CHECK_OK(dlock_latch_await(l, 0));
  CHECK_OK(dlock_latch_await(l, DLOCK_WAIT_FOREVER));
  int64_t took = th_now_ms() - t0;
  printf("three awaits of an absent latch took %lld ms\n", (long long)took);
  CHECK_INT(took, <, PROMPT_MS);
  int64_t n = -1;
  CHECK_OK(dlock_latch_count(l, &n));
  CHECK_INT(n, ==, 0);
  /* counting down an absent latch leaves nothing behind */
  CHECK_OK(dlock_latch_count_down(l));
  CHECK(!it_exists(s, "labsent"));
  dlock_latch_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_await_timeout(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_latch_t *l = it_latch(c, "ltimeout");
  CHECK_OK(dlock_latch_try_set_count(l, 1, NULL));
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_latch_await(l, 300), DLOCK_ETIMEDOUT);
  int64_t took = th_now_ms() - t0;
  printf("timed out after %lld ms (wait 300)\n", (long long)took);
  CHECK_INT(took, >=, 290);
  CHECK_INT(took, <, 300 + PROMPT_MS);
  CHECK_RC(dlock_latch_await(l, 0), DLOCK_EBUSY);
  CHECK_OK(dlock_latch_count_down(l));
  CHECK_OK(dlock_latch_await(l, 0));
  dlock_latch_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_set_count_and_delete(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_latch_t *l = it_latch(c, "lset");
  bool set = false;
  CHECK_OK(dlock_latch_try_set_count(l, 3, &set));
  CHECK(set);
  CHECK_OK(dlock_latch_try_set_count(l, 7, &set));
  CHECK(!set);
  int64_t n = -1;
  CHECK_OK(dlock_latch_count(l, &n));
  CHECK_INT(n, ==, 3);
  CHECK_INT(get_int(s, "lset"), ==, 3);
  for (int i = 2; i >= 0; i--) {
    CHECK_OK(dlock_latch_count_down(l));
    CHECK_OK(dlock_latch_count(l, &n));
    CHECK_INT(n, ==, i);
  }
  CHECK(!it_exists(s, "lset"));
  /* reached zero: it can be set again */
  CHECK_OK(dlock_latch_try_set_count(l, 2, &set));
  CHECK(set);
  /* a waiter is released by a delete too (an absent latch is zero) */
  awaiter a;
  awaiter_start(&a, l, 10000);
  CHECK(wait_latch_subscribers(s, "lset", 1, 5000));
  bool existed = false;
  CHECK_OK(dlock_latch_delete(l, &existed));
  CHECK(existed);
  bool ok;
  TH_WAIT_FOR(ok, atomic_load(&a.done), PROMPT_MS);
  CHECKF(ok, "waiter not released by the delete");
  CHECK_OK(a.rc);
  pthread_join(a.th, NULL);
  CHECK_OK(dlock_latch_delete(l, &existed));
  CHECK(!existed);
  /* a key of another type */
  CHECK_INT(th_redis_int(s, "HSET lhash f 1"), ==, 1);
  dlock_latch_t *h = it_latch(c, "lhash");
  CHECK_RC(dlock_latch_await(h, 0), DLOCK_EWRONGTYPE);
  CHECK_RC(dlock_latch_count(h, &n), DLOCK_EWRONGTYPE);
  dlock_latch_free(h);
  dlock_latch_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

/* dlock counting down wakes a Redisson awaiter (a subscriber reading "0"),
 * and Redisson's set count is what dlock reads. */
static void t_dlock_count_down_tells_redisson(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  CHECK_INT(rs_set_count(s, "ltell", 1), ==, 1);
  CHECK_INT(rs_set_count(s, "ltell", 5), ==, 0);
  dlock_client_t *c = it_client(s);
  dlock_latch_t *l = it_latch(c, "ltell");
  int64_t n = -1;
  CHECK_OK(dlock_latch_count(l, &n));
  CHECK_INT(n, ==, 1);
  char ch[256];
  latch_channel("ltell", ch, sizeof ch);
  redisContext *sub = th_redis_connect(s);
  CHECK(sub);
  redisReply *r = redisCommand(sub, "SUBSCRIBE %s", ch);
  CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 3);
  freeReplyObject(r);
  struct timeval tv = {.tv_sec = PROMPT_MS / 1000, .tv_usec = 0};
  redisSetTimeout(sub, tv);
  CHECK_OK(dlock_latch_count_down(l));
  void *v = NULL;
  CHECKF(redisGetReply(sub, &v) == REDIS_OK && v,
         "no message on %s within %d ms", ch, PROMPT_MS);
  r = v;
  CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 3);
  CHECK_STR(r->element[0]->str, "message");
  CHECK_STR(r->element[1]->str, ch);
  CHECK_STR(r->element[2]->str, "0");
  freeReplyObject(r);
  /* dlock's set count announces "1", Redisson's new-count message */
  CHECK_OK(dlock_latch_try_set_count(l, 4, NULL));
  v = NULL;
  CHECK(redisGetReply(sub, &v) == REDIS_OK && v);
  r = v;
  CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 3);
  CHECK_STR(r->element[2]->str, "1");
  freeReplyObject(r);
  redisFree(sub);
  CHECK_INT(get_int(s, "ltell"), ==, 4);
  dlock_latch_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_latch_badinput(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_latch_t *l = NULL;
  CHECK_RC(dlock_latch_new(c, "x", NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_latch_new(NULL, "x", &l), DLOCK_EINVAL);
  CHECK(l == NULL);
  CHECK_RC(dlock_latch_new(c, NULL, &l), DLOCK_EINVAL);
  CHECK_RC(dlock_latch_new(c, "", &l), DLOCK_EINVAL);
  CHECK_RC(dlock_latch_new(c, "dlock_lock_grant:{x}", &l), DLOCK_EINVAL);
  l = it_latch(c, "lbad");
  int64_t n;
  bool b;
  CHECK_RC(dlock_latch_try_set_count(l, 0, &b), DLOCK_EINVAL);
  CHECK_RC(dlock_latch_try_set_count(l, -3, &b), DLOCK_EINVAL);
  CHECK_RC(dlock_latch_try_set_count(NULL, 3, &b), DLOCK_EINVAL);
  CHECK_RC(dlock_latch_await(l, -2), DLOCK_EINVAL);
  CHECK_RC(dlock_latch_await(NULL, 0), DLOCK_EINVAL);
  CHECK_RC(dlock_latch_count(l, NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_latch_count(NULL, &n), DLOCK_EINVAL);
  CHECK_RC(dlock_latch_count_down(NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_latch_delete(NULL, &b), DLOCK_EINVAL);
  dlock_semaphore_t *q = NULL;
  CHECK_OK(dlock_semaphore_new(c, "lbad", &q));
  CHECK_RC(dlock_latch_count_down((dlock_latch_t *)q), DLOCK_EBADHANDLE);
  CHECK_STR(dlock_latch_name((dlock_latch_t *)q), "");
  CHECK_STR(dlock_latch_name(NULL), "");
  dlock_latch_free(NULL);
  dlock_latch_free((dlock_latch_t *)q); /* ignored: not a latch */
  CHECK_STR(dlock_semaphore_name(q), "lbad");
  CHECK(!it_exists(s, "lbad"));
  /* handles left over are freed with the client (ASan checks) */
  dlock_client_free(c);
  th_server_stop(s);
}

static const check_case_t cases[] = {
    {"release_at_zero", t_release_at_zero},
    {"redisson_count_down_releases", t_redisson_count_down_releases},
    {"absent_returns_at_once", t_absent_returns_at_once},
    {"await_timeout", t_await_timeout},
    {"set_count_and_delete", t_set_count_and_delete},
    {"dlock_count_down_tells_redisson", t_dlock_count_down_tells_redisson},
    {"latch_badinput", t_latch_badinput},
};

CHECK_MAIN(cases)
