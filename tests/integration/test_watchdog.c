/*
 * test_watchdog.c - watchdog renewal and lost-lock detection.
 *
 * Design note: clients use a short watchdog (600 ms, renewed about every
 * 200 ms) so that "several leases" fit in about two seconds. The cases watch
 * the key's PTTL from the harness connection and try to take the lock from a
 * second client; lost-lock cases remove or replace the key behind the
 * holder's back and wait (condition variable, bounded) for the lost callback,
 * which runs on the client's background thread.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "itest.h"

#define WD DLOCK_LEASE_WATCHDOG
#define WATCHDOG_MS 600

static void t_keepalive(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_lost_t lost;
  it_lost_init(&lost);
  it_client_cfg_t cfg = {
      .watchdog_ms = WATCHDOG_MS, .lost = it_lost_cb, .lost_ud = &lost};
  dlock_client_t *a = it_client_cfg(s, &cfg), *b = it_client(s);
  dlock_lock_t *la = it_lock(a, "wd"), *lb = it_lock(b, "wd");
  CHECK_OK(dlock_lock_acquire(la, 0, WD));
  int64_t pttl = th_redis_int(s, "PTTL wd");
  CHECK_INT(pttl, >, 0);
  CHECK_INT(pttl, <=, WATCHDOG_MS);
  /* hold for more than three leases */
  int64_t start = th_now_ms(), min_pttl = WATCHDOG_MS;
  int samples = 0;
  for (int i = 0; i < 200 && th_now_ms() - start < 2000; i++) {
    pttl = th_redis_int(s, "PTTL wd");
    CHECKF(pttl > 0 && pttl <= WATCHDOG_MS,
           "PTTL %lld after %lld ms of holding", (long long)pttl,
           (long long)(th_now_ms() - start));
    if (pttl < min_pttl)
      min_pttl = pttl;
    if (i % 5 == 0)
      CHECK_RC(dlock_lock_acquire(lb, 0, WD), DLOCK_EBUSY);
    samples++;
    th_sleep_ms(50);
  }
  printf("%d samples over %lld ms, lowest PTTL %lld ms\n", samples,
         (long long)(th_now_ms() - start), (long long)min_pttl);
  CHECK_INT(th_now_ms() - start, >=, 2000);
  int64_t n = 0;
  CHECK_OK(dlock_lock_hold_count(la, &n));
  CHECK_INT(n, ==, 1);
  CHECK_OK(dlock_lock_release(la));
  CHECK(!it_exists(s, "wd"));
  CHECK_INT(it_lost_count(&lost), ==, 0);
  CHECK_OK(dlock_lock_acquire(lb, 0, WD));
  CHECK_OK(dlock_lock_release(lb));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_server_stop(s);
}

static void t_lost_gone(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_lost_t lost;
  it_lost_init(&lost);
  it_client_cfg_t cfg = {
      .watchdog_ms = WATCHDOG_MS, .lost = it_lost_cb, .lost_ud = &lost};
  dlock_client_t *c = it_client_cfg(s, &cfg);
  dlock_lock_t *l = it_lock(c, "gone");
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  uint64_t me = dlock_thread_id();
  int64_t t0 = th_now_ms();
  CHECK_INT(th_redis_int(s, "DEL gone"), ==, 1);
  CHECKF(it_lost_wait(&lost, 1, 3000), "no lost callback within 3 s");
  int64_t after = lost.at_ms - t0;
  printf("lost callback %lld ms after DEL\n", (long long)after);
  /* about one renewal interval (200 ms), with slack for a loaded machine */
  CHECK_INT(after, <, WATCHDOG_MS / 3 + 1000);
  pthread_mutex_lock(&lost.mu);
  CHECK_STR(lost.name, "gone");
  CHECK_INT(lost.tid, ==, me);
  CHECK_INT(lost.reason, ==, DLOCK_LOST_GONE);
  pthread_mutex_unlock(&lost.mu);
  /* renewal never recreates the key */
  CHECK(!it_exists(s, "gone"));
  CHECK_RC(dlock_lock_release(l), DLOCK_ELOST);
  CHECK_RC(dlock_lock_release(l), DLOCK_ENOTOWNER);
  CHECK_INT(it_lost_count(&lost), ==, 1);
  /* the lock can be taken again and renews normally */
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_OK(dlock_lock_release(l));
  CHECK_INT(it_lost_count(&lost), ==, 1);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_lost_stolen(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_lost_t lost;
  it_lost_init(&lost);
  it_client_cfg_t cfg = {
      .watchdog_ms = WATCHDOG_MS, .lost = it_lost_cb, .lost_ud = &lost};
  dlock_client_t *c = it_client_cfg(s, &cfg);
  dlock_lock_t *l = it_lock(c, "stolen");
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  int64_t t0 = th_now_ms();
  /* someone else now owns it (as if our lease had run out) */
  redisReply *r = th_redis_cmd(
      s, "EVAL %s 1 stolen %s",
      "redis.call('del', KEYS[1]); redis.call('hset', KEYS[1], ARGV[1], 1);"
      "return redis.call('pexpire', KEYS[1], 30000)",
      "other-owner:1");
  CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
  freeReplyObject(r);
  CHECKF(it_lost_wait(&lost, 1, 3000), "no lost callback within 3 s");
  CHECK_INT(lost.at_ms - t0, <, WATCHDOG_MS / 3 + 1000);
  CHECK_INT(lost.reason, ==, DLOCK_LOST_GONE);
  /* our renewals did not touch the new owner's lease */
  CHECK_INT(th_redis_int(s, "PTTL stolen"), >, 20000);
  CHECK_RC(dlock_lock_release(l), DLOCK_ELOST);
  CHECK_INT(it_hget_int(s, "stolen", "other-owner:1"), ==, 1);
  CHECK_INT(th_redis_int(s, "HLEN stolen"), ==, 1);
  CHECK_RC(dlock_lock_acquire(l, 0, WD), DLOCK_EBUSY);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_free_client_stops_renewal(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_client_cfg_t cfg = {.watchdog_ms = WATCHDOG_MS};
  dlock_client_t *c = it_client_cfg(s, &cfg);
  dlock_lock_t *l = it_lock(c, "abandoned");
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  dlock_lock_free(l);
  int64_t t0 = th_now_ms();
  dlock_client_free(c);
  /* not released, no longer renewed: it expires after one lease */
  CHECK(it_exists(s, "abandoned") || th_now_ms() - t0 > WATCHDOG_MS);
  bool gone;
  TH_WAIT_FOR(gone, !it_exists(s, "abandoned"), 3000);
  CHECKF(gone, "abandoned lock still renewed after dlock_client_free");
  CHECK_INT(th_now_ms() - t0, <=, WATCHDOG_MS + 1000);
  th_server_stop(s);
}

static void t_fixed_lease_not_renewed(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_client_cfg_t cfg = {.watchdog_ms = WATCHDOG_MS};
  dlock_client_t *c = it_client_cfg(s, &cfg);
  dlock_lock_t *l = it_lock(c, "fixed");
  dlock_lock_t *w = it_lock(c, "watched");
  CHECK_OK(dlock_lock_acquire(w, 0, WD)); /* keeps the renewer busy */
  int64_t t0 = th_now_ms();
  CHECK_OK(dlock_lock_acquire(l, 0, 800));
  bool gone;
  TH_WAIT_FOR(gone, !it_exists(s, "fixed"), 3000);
  CHECKF(gone, "fixed-lease lock renewed past its lease");
  int64_t took = th_now_ms() - t0;
  CHECK_INT(took, >=, 700);
  CHECK_INT(took, <=, 800 + 1000);
  CHECK(it_exists(s, "watched"));
  CHECK_RC(dlock_lock_release(l), DLOCK_ELOST);
  CHECK_OK(dlock_lock_release(w));
  dlock_lock_free(l);
  dlock_lock_free(w);
  dlock_client_free(c);
  th_server_stop(s);
}

/* The lost callback may call back into the library (header: any function
 * but the frees of its own client). */
typedef struct reentrant_cb {
  it_lost_t rec;
  dlock_lock_t *lock;
  int locked_rc, release_rc;
  bool locked;
} reentrant_cb_t;

static void calling_cb(void *ud, const char *name, uint64_t tid,
                       dlock_lost_reason_t reason) {
  reentrant_cb_t *r = ud;
  r->locked_rc = dlock_lock_is_locked(r->lock, &r->locked);
  r->release_rc = dlock_lock_release_as(r->lock, tid);
  it_lost_cb(&r->rec, name, tid, reason);
}

static void t_lost_callback_calls_library(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  reentrant_cb_t r = {.locked = true};
  it_lost_init(&r.rec);
  it_client_cfg_t cfg = {
      .watchdog_ms = WATCHDOG_MS, .lost = calling_cb, .lost_ud = &r};
  dlock_client_t *c = it_client_cfg(s, &cfg);
  dlock_lock_t *l = it_lock(c, "cbcall");
  r.lock = l;
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_INT(th_redis_int(s, "DEL cbcall"), ==, 1);
  CHECKF(it_lost_wait(&r.rec, 1, 3000),
         "lost callback did not complete within 3 s");
  CHECK_OK(r.locked_rc);
  CHECK(!r.locked);
  printf("release_as from the callback: %s\n", dlock_err_name(r.release_rc));
  CHECK_RC_IN(r.release_rc, DLOCK_ELOST, DLOCK_ENOTOWNER);
  /* the client still works */
  CHECK_RC_IN(dlock_lock_release(l), DLOCK_ELOST, DLOCK_ENOTOWNER);
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

/* The lost callback runs off the event loop: it may wait for a lock. Here
 * it waits (up to 10 s) for a lock another client holds on a 30 s
 * watchdog and releases once the callback is waiting: the release's
 * message, which this client's loop must read, wakes it at once. A loop
 * busy running the callback would leave the wait to its 10 s deadline. */
typedef struct waiting_cb {
  it_lost_t rec;
  dlock_lock_t *other;
  atomic_int waiting;
  int rc;
  int64_t waited_ms;
} waiting_cb_t;

static void waiting_cb(void *ud, const char *name, uint64_t tid,
                       dlock_lost_reason_t reason) {
  waiting_cb_t *r = ud;
  atomic_store(&r->waiting, 1);
  int64_t t0 = th_now_ms();
  r->rc = dlock_lock_acquire(r->other, 10000, WD);
  r->waited_ms = th_now_ms() - t0;
  if (r->rc == DLOCK_OK)
    dlock_lock_release(r->other);
  it_lost_cb(&r->rec, name, tid, reason);
}

static void t_lost_callback_waits(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  waiting_cb_t r = {0};
  it_lost_init(&r.rec);
  it_client_cfg_t cfg = {
      .watchdog_ms = WATCHDOG_MS, .lost = waiting_cb, .lost_ud = &r};
  dlock_client_t *c = it_client_cfg(s, &cfg);
  dlock_client_t *c2 = it_client(s);
  dlock_lock_t *victim = it_lock(c, "cbwait-victim");
  r.other = it_lock(c, "cbwait-other");
  dlock_lock_t *held = it_lock(c2, "cbwait-other");
  CHECK_OK(dlock_lock_acquire(held, 0, WD));
  CHECK_OK(dlock_lock_acquire(victim, 0, WD));
  CHECK_INT(th_redis_int(s, "DEL cbwait-victim"), ==, 1);
  bool waiting;
  TH_WAIT_FOR(waiting, atomic_load(&r.waiting) == 1, 5000);
  CHECKF(waiting, "no lost callback within 5 s");
  /* the callback's wait is subscribed (by this client's loop) */
  CHECK(it_wait_subscribers(s, "cbwait-other", 1, 5000));
  CHECK_OK(dlock_lock_release(held));
  CHECKF(it_lost_wait(&r.rec, 1, 15000), "the callback did not return");
  printf("the callback's acquire: %s after %lld ms of waiting\n",
         dlock_err_name(r.rc), (long long)r.waited_ms);
  CHECK_RC(r.rc, DLOCK_OK);
  CHECK_RC(dlock_lock_release(victim), DLOCK_ELOST);
  dlock_lock_free(held);
  dlock_lock_free(victim);
  dlock_lock_free(r.other);
  dlock_client_free(c2);
  dlock_client_free(c);
  th_server_stop(s);
}

/* dlock_client_free frees handles left over; their holds expire. */
static void t_free_client_with_live_handles(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_client_cfg_t cfg = {.watchdog_ms = WATCHDOG_MS};
  dlock_client_t *c = it_client_cfg(s, &cfg);
  dlock_lock_t *a = it_lock(c, "left1"), *b = it_lock(c, "left2");
  CHECK_OK(dlock_lock_acquire(a, 0, WD));
  CHECK_OK(dlock_lock_acquire(b, 0, 60000));
  (void)it_lock(c, "left3");
  int64_t t0 = th_now_ms();
  dlock_client_free(c);
  CHECK_INT(th_now_ms() - t0, <, 3000);
  bool gone;
  TH_WAIT_FOR(gone, !it_exists(s, "left1"), 3000);
  CHECKF(gone, "watchdog hold outlived its client");
  CHECK_INT(th_redis_int(s, "PTTL left2"), >, 50000);
  th_server_stop(s);
}

/* More holds than one renewal batch (Redisson batches 100): all stay. */
#define MANY 150
static void t_many_locks_renewed(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_lost_t lost;
  it_lost_init(&lost);
  it_client_cfg_t cfg = {
      .watchdog_ms = WATCHDOG_MS, .lost = it_lost_cb, .lost_ud = &lost};
  dlock_client_t *c = it_client_cfg(s, &cfg);
  dlock_lock_t *l[MANY];
  for (int i = 0; i < MANY; i++) {
    char name[32];
    snprintf(name, sizeof name, "many-%d", i + 1);
    l[i] = it_lock(c, name);
    CHECK_OK(dlock_lock_acquire(l[i], 0, WD));
  }
  static const char min_pttl[] =
      "local m = 1e12; for i = 1, tonumber(ARGV[1]) do "
      "local p = redis.call('pttl', 'many-' .. i); "
      "if p < m then m = p end end; return m";
  int64_t start = th_now_ms(), lowest = WATCHDOG_MS;
  for (int i = 0; i < 100 && th_now_ms() - start < 1800; i++) {
    int64_t m = th_redis_int(s, "EVAL %s 0 %d", min_pttl, MANY);
    CHECKF(m > 0, "a hold expired (lowest PTTL %lld) after %lld ms",
           (long long)m, (long long)(th_now_ms() - start));
    if (m < lowest)
      lowest = m;
    th_sleep_ms(50);
  }
  printf("%d holds over %lld ms, lowest PTTL %lld ms\n", MANY,
         (long long)(th_now_ms() - start), (long long)lowest);
  CHECK_INT(it_lost_count(&lost), ==, 0);
  for (int i = 0; i < MANY; i++) {
    CHECK_OK(dlock_lock_release(l[i]));
    dlock_lock_free(l[i]);
  }
  CHECK_INT(it_lock_keys(s), ==, 0);
  dlock_client_free(c);
  th_server_stop(s);
}

static const check_case_t cases[] = {
    {"keepalive", t_keepalive},
    {"lost_gone", t_lost_gone},
    {"lost_stolen", t_lost_stolen},
    {"free_client_stops_renewal", t_free_client_stops_renewal},
    {"fixed_lease_not_renewed", t_fixed_lease_not_renewed},
    {"lost_callback_calls_library", t_lost_callback_calls_library},
    {"lost_callback_waits", t_lost_callback_waits},
    {"many_locks_renewed", t_many_locks_renewed},
    {"free_client_with_live_handles", t_free_client_with_live_handles},
};

CHECK_MAIN(cases)
