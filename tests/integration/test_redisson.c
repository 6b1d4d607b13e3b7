/*
 * test_redisson.c - dlock and a Redisson client share locks.
 *
 * Design note: "Redisson" here is the harness's hiredis connection running
 * the RLock scripts as REDIS-LAYOUT.md describes them (written for this test
 * from that page): acquire = HINCRBY owner + PEXPIRE when free or ours, else
 * PTTL; release = HINCRBY -1, and on reaching 0 DEL + PUBLISH "0" on
 * redisson_lock__channel:{name}. The owner is "<uuid>:1" as a Java thread 1
 * would write it. A Redisson waiter is a hiredis SUBSCRIBE connection reading
 * the channel with a bounded timeout.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "itest.h"

#define WD DLOCK_LEASE_WATCHDOG
#define RS_OWNER "5c0f8a52-2f2e-4a8e-9a57-0d3a8b7e6c11:1"
#define PROMPT_MS 2000

static const char RS_ACQUIRE[] =
    "if (redis.call('exists', KEYS[1]) == 0) or "
    "(redis.call('hexists', KEYS[1], ARGV[2]) == 1) then "
    "redis.call('hincrby', KEYS[1], ARGV[2], 1); "
    "redis.call('pexpire', KEYS[1], ARGV[1]); "
    "return nil; "
    "end; "
    "return redis.call('pttl', KEYS[1]);";

static const char RS_RELEASE[] =
    "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then "
    "return nil; "
    "end; "
    "local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); "
    "if (counter > 0) then "
    "redis.call('pexpire', KEYS[1], ARGV[2]); "
    "return 0; "
    "end; "
    "redis.call('del', KEYS[1]); "
    "redis.call(ARGV[4], KEYS[2], ARGV[1]); "
    "return 1;";

/* Redisson acquire: -1 when acquired (nil reply), else the holder's PTTL. */
static int64_t rs_acquire(th_server_t *s, const char *name, int64_t lease,
                          const char *owner) {
  redisReply *r = th_redis_cmd(s, "EVAL %s 1 %s %lld %s", RS_ACQUIRE, name,
                               (long long)lease, owner);
  CHECK(r);
  int64_t v = INT64_MIN;
  if (r->type == REDIS_REPLY_NIL)
    v = -1;
  else if (r->type == REDIS_REPLY_INTEGER)
    v = r->integer;
  freeReplyObject(r);
  CHECK(v != INT64_MIN);
  return v;
}

/* Redisson release: 1 released, 0 count went down, -1 not the owner. */
static int64_t rs_release(th_server_t *s, const char *name, const char *owner) {
  char ch[256];
  it_channel(name, ch, sizeof ch);
  redisReply *r = th_redis_cmd(s, "EVAL %s 2 %s %s 0 30000 %s PUBLISH",
                               RS_RELEASE, name, ch, owner);
  CHECK(r);
  int64_t v = INT64_MIN;
  if (r->type == REDIS_REPLY_NIL)
    v = -1;
  else if (r->type == REDIS_REPLY_INTEGER)
    v = r->integer;
  freeReplyObject(r);
  CHECK(v != INT64_MIN);
  return v;
}

/* A subscriber connection on the lock's channel (a waiting Redisson). */
static redisContext *rs_subscribe(th_server_t *s, const char *name) {
  char ch[256];
  it_channel(name, ch, sizeof ch);
  redisContext *c = th_redis_connect(s);
  CHECK(c);
  redisReply *r = redisCommand(c, "SUBSCRIBE %s", ch);
  CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 3);
  CHECK_STR(r->element[0]->str, "subscribe");
  freeReplyObject(r);
  struct timeval tv = {.tv_sec = PROMPT_MS / 1000, .tv_usec = 0};
  redisSetTimeout(c, tv);
  return c;
}

/* Next message on the subscription; CHECKs channel, returns the payload
 * (malloc'd) or fails after PROMPT_MS. */
static char *rs_next_message(redisContext *c, const char *name) {
  char ch[256];
  it_channel(name, ch, sizeof ch);
  void *v = NULL;
  int rc = redisGetReply(c, &v);
  redisReply *r = v;
  CHECKF(rc == REDIS_OK && r, "no message on %s within %d ms", ch, PROMPT_MS);
  CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 3);
  CHECK_STR(r->element[0]->str, "message");
  CHECK_STR(r->element[1]->str, ch);
  char *payload = strdup(r->element[2]->str);
  freeReplyObject(r);
  return payload;
}

static void t_redisson_blocks_dlock(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  CHECK_INT(rs_acquire(s, "rlock", 30000, RS_OWNER), ==, -1);
  dlock_client_t *c = it_client(s);
  dlock_lock_t *l = it_lock(c, "rlock");
  CHECK_RC(dlock_lock_acquire(l, 0, WD), DLOCK_EBUSY);
  bool b = false;
  CHECK_OK(dlock_lock_is_locked(l, &b));
  CHECK(b);
  CHECK_OK(dlock_lock_is_held_by_thread(l, &b));
  CHECK(!b);
  int64_t n = -1;
  CHECK_OK(dlock_lock_hold_count(l, &n));
  CHECK_INT(n, ==, 0);
  dlock_lock_state_t *st = NULL;
  CHECK_OK(dlock_lock_state(l, &st));
  CHECK_STR(st->kind, "reentrant");
  CHECK_INT(st->nholders, ==, 1);
  CHECK_STR(st->holders[0].owner, RS_OWNER);
  CHECK_INT(st->holders[0].count, ==, 1);
  CHECK_INT(st->ttl_ms, >, 20000);
  dlock_lock_state_free(st);
  CHECK_RC(dlock_lock_release(l), DLOCK_ENOTOWNER);
  CHECK_INT(it_hget_int(s, "rlock", RS_OWNER), ==, 1);
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_acquire(l, 300, WD), DLOCK_ETIMEDOUT);
  CHECK_INT(th_now_ms() - t0, <, 300 + 1500);
  /* Redisson re-enters its own lock while dlock waits out */
  CHECK_INT(rs_acquire(s, "rlock", 30000, RS_OWNER), ==, -1);
  CHECK_INT(it_hget_int(s, "rlock", RS_OWNER), ==, 2);
  CHECK_INT(rs_release(s, "rlock", RS_OWNER), ==, 0);
  CHECK_INT(rs_release(s, "rlock", RS_OWNER), ==, 1);
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_redisson_release_wakes_dlock(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  CHECK_INT(rs_acquire(s, "rwake", 30000, RS_OWNER), ==, -1);
  dlock_client_t *c = it_client(s);
  dlock_lock_t *l = it_lock(c, "rwake");
  it_async_t w;
  it_async_start(&w, l, DLOCK_WAIT_FOREVER, WD, false);
  CHECK(it_wait_subscribers(s, "rwake", 1, 5000));
  CHECK(!atomic_load(&w.done));
  int64_t t_rel = th_now_ms();
  CHECK_INT(rs_release(s, "rwake", RS_OWNER), ==, 1);
  CHECKF(it_async_wait(&w, PROMPT_MS),
         "dlock waiter not woken by Redisson's release within %d ms",
         PROMPT_MS);
  CHECK_OK(w.rc);
  printf("dlock waiter acquired %lld ms after Redisson's release\n",
         (long long)(w.t_done - t_rel));
  /* now Redisson is the one that has to wait */
  CHECK_INT(rs_acquire(s, "rwake", 30000, RS_OWNER), >, 0);
  CHECK_OK(it_async_finish(&w));
  CHECK_INT(rs_acquire(s, "rwake", 30000, RS_OWNER), ==, -1);
  CHECK_INT(rs_release(s, "rwake", RS_OWNER), ==, 1);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

/* A Redisson holder with a fixed lease that ends without any release
 * message: the dlock waiter must not sleep past the holder's PTTL. */
static void t_redisson_lease_expiry_wakes_dlock(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  /* the clock starts before the lease does (creating the client can take
   * a while, under valgrind more than 100 ms) */
  int64_t t0 = th_now_ms();
  CHECK_INT(rs_acquire(s, "rexp", 500, RS_OWNER), ==, -1);
  dlock_client_t *c = it_client(s);
  dlock_lock_t *l = it_lock(c, "rexp");
  CHECK_OK(dlock_lock_acquire(l, 10000, WD));
  int64_t took = th_now_ms() - t0;
  printf("acquired %lld ms after a 500 ms Redisson lease began\n",
         (long long)took);
  CHECK_INT(took, >=, 400);
  CHECK_INT(took, <, 500 + 1500);
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_dlock_looks_like_redisson(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_lock_t *l = it_lock(c, "looks");
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  char owner[128];
  it_owner(c, dlock_thread_id(), owner, sizeof owner);
  char *type = th_redis_str(s, "TYPE looks");
  CHECK_STR(type, "hash");
  free(type);
  redisReply *r = th_redis_cmd(s, "HGETALL looks");
  CHECK(r && r->type == REDIS_REPLY_ARRAY);
  CHECK_INT(r->elements, ==, 2);
  CHECK_STR(r->element[0]->str, owner);
  CHECK_STR(r->element[1]->str, "1");
  freeReplyObject(r);
  int64_t pttl = th_redis_int(s, "PTTL looks");
  CHECK_INT(pttl, >, 25000);
  CHECK_INT(pttl, <=, 30000);
  /* only the lock key exists: no side keys (release latches aside) */
  CHECK_INT(it_lock_keys(s), ==, 1);
  /* Redisson sees it held by someone else, with the lease left */
  int64_t left = rs_acquire(s, "looks", 30000, RS_OWNER);
  CHECK_INT(left, >, 25000);
  CHECK_INT(left, <=, 30000);
  CHECK_INT(rs_release(s, "looks", RS_OWNER), ==, -1);
  /* re-entry is the same field counting up */
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_INT(it_hget_int(s, "looks", owner), ==, 2);
  CHECK_INT(th_redis_int(s, "HLEN looks"), ==, 1);
  CHECK_OK(dlock_lock_release(l));
  CHECK_INT(it_hget_int(s, "looks", owner), ==, 1);
  CHECK_OK(dlock_lock_release(l));
  CHECK_INT(it_lock_keys(s), ==, 0);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_dlock_release_wakes_redisson(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_lock_t *l = it_lock(c, "dwake");
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_INT(rs_acquire(s, "dwake", 30000, RS_OWNER), >, 0);
  redisContext *sub = rs_subscribe(s, "dwake");
  CHECK_OK(dlock_lock_release(l));
  char *msg = rs_next_message(sub, "dwake");
  CHECK_STR(msg, "0");
  free(msg);
  CHECK_INT(rs_acquire(s, "dwake", 30000, RS_OWNER), ==, -1);
  CHECK_INT(rs_release(s, "dwake", RS_OWNER), ==, 1);
  msg = rs_next_message(sub, "dwake");
  CHECK_STR(msg, "0");
  free(msg);
  /* a partial release (re-entry) publishes nothing: the next message is
   * the marker we send ourselves */
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_OK(dlock_lock_release(l));
  char ch[256];
  it_channel("dwake", ch, sizeof ch);
  CHECK_INT(th_redis_int(s, "PUBLISH %s marker", ch), >=, 1);
  msg = rs_next_message(sub, "dwake");
  CHECK_STR(msg, "marker");
  free(msg);
  CHECK_OK(dlock_lock_release(l));
  msg = rs_next_message(sub, "dwake");
  CHECK_STR(msg, "0");
  free(msg);
  redisFree(sub);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_braces_in_name(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  const char *name = "order{42}:lock";
  redisContext *sub = rs_subscribe(s, name); /* redisson_lock__channel:NAME */
  dlock_client_t *c = it_client(s);
  dlock_lock_t *l = it_lock(c, name);
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  char *type = th_redis_str(s, "TYPE %s", name);
  CHECK_STR(type, "hash");
  free(type);
  CHECK_INT(rs_acquire(s, name, 30000, RS_OWNER), >, 0);
  CHECK_OK(dlock_lock_release(l));
  char *msg = rs_next_message(sub, name);
  CHECK_STR(msg, "0");
  free(msg);
  /* and a Redisson release on that channel wakes a dlock waiter */
  CHECK_INT(rs_acquire(s, name, 30000, RS_OWNER), ==, -1);
  it_async_t w;
  it_async_start(&w, l, DLOCK_WAIT_FOREVER, WD, false);
  CHECK(it_wait_subscribers(s, name, 2, 5000)); /* ours and dlock's */
  CHECK_INT(rs_release(s, name, RS_OWNER), ==, 1);
  CHECKF(it_async_wait(&w, PROMPT_MS), "waiter on %s not woken", name);
  CHECK_OK(w.rc);
  CHECK_OK(it_async_finish(&w));
  redisFree(sub);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_force_release_publishes(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  CHECK_INT(rs_acquire(s, "frel", 30000, RS_OWNER), ==, -1);
  redisContext *sub = rs_subscribe(s, "frel");
  dlock_client_t *c = it_client(s);
  dlock_lock_t *l = it_lock(c, "frel");
  bool was = false;
  CHECK_OK(dlock_lock_force_release(l, &was));
  CHECK(was);
  CHECK(!it_exists(s, "frel"));
  char *msg = rs_next_message(sub, "frel");
  CHECK_STR(msg, "0");
  free(msg);
  /* Redisson's own release now finds nothing to release */
  CHECK_INT(rs_release(s, "frel", RS_OWNER), ==, -1);
  /* nothing to delete: no message (the next one is our marker) */
  CHECK_OK(dlock_lock_force_release(l, &was));
  CHECK(!was);
  char ch[256];
  it_channel("frel", ch, sizeof ch);
  CHECK_INT(th_redis_int(s, "PUBLISH %s marker", ch), >=, 1);
  msg = rs_next_message(sub, "frel");
  CHECK_STR(msg, "marker");
  free(msg);
  redisFree(sub);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

/* dlock threads taking the lock in a loop, and a Redisson client wanting
 * it once: REDIS-LAYOUT.md says the two wake each other. Redisson waits on
 * the channel for at most the PTTL it got (here capped at 200 ms so the
 * case stays short) and retries; it must get the lock within a few
 * seconds, not only once every dlock thread has stopped. */
typedef struct looper {
  th_server_t *srv;
  dlock_lock_t *lock;
  atomic_int *stop;
  long count;
  pthread_t th;
} looper_t;

static void *looper_main(void *arg) {
  looper_t *lp = arg;
  redisContext *work = th_redis_connect(lp->srv);
  CHECK(work);
  int64_t end = th_now_ms() + 15000;
  while (!atomic_load(lp->stop) && th_now_ms() < end) {
    CHECK_OK(dlock_lock_acquire(lp->lock, 30000, WD));
    lp->count++;
    /* a little work under the lock, so the other threads are queued */
    redisReply *r = redisCommand(work, "INCR busy-work");
    CHECK(r && r->type == REDIS_REPLY_INTEGER);
    freeReplyObject(r);
    CHECK_OK(dlock_lock_release(lp->lock));
    /* a little work outside the lock too, as any program does: a thread
     * that takes the lock again the instant it let it go wins every race
     * against a waiter one round trip away, dlock's own or Redisson's
     * (a loaded CI machine made the emulated Redisson lose 62 of 62) */
    th_sleep_ms(1);
  }
  redisFree(work);
  return NULL;
}

static void t_redisson_not_starved(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_lock_t *l = it_lock(c, "busy");
  atomic_int stop = 0;
  looper_t lp[4];
  for (int i = 0; i < 4; i++) {
    lp[i] = (looper_t){.srv = s, .lock = l, .stop = &stop};
    CHECK(pthread_create(&lp[i].th, NULL, looper_main, &lp[i]) == 0);
  }
  redisContext *sub = rs_subscribe(s, "busy");
  int64_t t0 = th_now_ms();
  int tries = 0, messages = 0;
  bool got = false;
  while (!got && th_now_ms() - t0 < 3000 && tries < 1000) {
    int64_t pttl = rs_acquire(s, "busy", 30000, RS_OWNER);
    tries++;
    if (pttl == -1) {
      got = true;
      break;
    }
    int64_t wait = pttl < 200 ? (pttl > 0 ? pttl : 1) : 200;
    struct timeval tv = {.tv_sec = 0, .tv_usec = wait * 1000};
    redisSetTimeout(sub, tv);
    void *v = NULL;
    if (redisGetReply(sub, &v) == REDIS_OK && v) {
      messages++;
      freeReplyObject(v);
    } else {
      redisFree(sub); /* a timed-out hiredis context is dead */
      sub = rs_subscribe(s, "busy");
    }
  }
  int64_t took = th_now_ms() - t0;
  if (got)
    CHECK_INT(rs_release(s, "busy", RS_OWNER), ==, 1);
  atomic_store(&stop, 1);
  long total = 0;
  for (int i = 0; i < 4; i++) {
    pthread_join(lp[i].th, NULL);
    total += lp[i].count;
  }
  printf("Redisson %s after %lld ms (%d tries, %d release messages); dlock "
         "threads took the lock %ld times meanwhile\n",
         got ? "got the lock" : "still waiting", (long long)took, tries,
         messages, total);
  CHECKF(got, "a Redisson client was starved for 3 s by dlock waiters");
  redisFree(sub);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static const check_case_t cases[] = {
    {"redisson_blocks_dlock", t_redisson_blocks_dlock},
    {"redisson_release_wakes_dlock", t_redisson_release_wakes_dlock},
    {"redisson_lease_expiry_wakes_dlock", t_redisson_lease_expiry_wakes_dlock},
    {"dlock_looks_like_redisson", t_dlock_looks_like_redisson},
    {"dlock_release_wakes_redisson", t_dlock_release_wakes_redisson},
    {"braces_in_name", t_braces_in_name},
    {"force_release_publishes", t_force_release_publishes},
    {"redisson_not_starved", t_redisson_not_starved},
};

CHECK_MAIN(cases)
