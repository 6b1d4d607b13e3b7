/*
 * test_reentrant.c - the reentrant lock as a user sees it.
 *
 * Design note: every case starts its own redis-server and checks both the
 * library's answers and the server's state (HGET/PTTL/EXISTS through the
 * harness's own connection): re-entry counts, ownership per thread, fixed
 * lease expiry and the ELOST that follows, wait timeouts, explicit-owner
 * hand-offs, force release waking a waiter, the state snapshot, client ids,
 * handles sharing state, and a dead thread's TID given to a new thread
 * (in a private PID namespace, as root; skipped where not permitted).
 * Threads: the main thread plus short-lived helper threads; every wait is
 * bounded.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "itest.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>

#define WD DLOCK_LEASE_WATCHDOG

static void t_reentry(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_lock_t *l = it_lock(c, "reentry");
  CHECK_STR(dlock_lock_name(l), "reentry");
  char owner[128];
  it_owner(c, dlock_thread_id(), owner, sizeof owner);

  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  /* re-entry never waits, whatever the wait */
  int64_t t0 = th_now_ms();
  CHECK_OK(dlock_lock_acquire(l, DLOCK_WAIT_FOREVER, WD));
  CHECK_OK(dlock_lock_acquire(l, 5000, 20000));
  CHECK_INT(th_now_ms() - t0, <, 2500);
  int64_t n = -1;
  CHECK_OK(dlock_lock_hold_count(l, &n));
  CHECK_INT(n, ==, 3);
  CHECK_INT(it_hget_int(s, "reentry", owner), ==, 3);
  CHECK_INT(th_redis_int(s, "HLEN reentry"), ==, 1);
  bool b = false;
  CHECK_OK(dlock_lock_is_held_by_thread(l, &b));
  CHECK(b);
  CHECK_OK(dlock_lock_is_locked(l, &b));
  CHECK(b);

  CHECK_OK(dlock_lock_release(l));
  CHECK_OK(dlock_lock_hold_count(l, &n));
  CHECK_INT(n, ==, 2);
  CHECK_INT(it_hget_int(s, "reentry", owner), ==, 2);
  CHECK_OK(dlock_lock_release(l));
  CHECK_INT(it_hget_int(s, "reentry", owner), ==, 1);
  CHECK_OK(dlock_lock_release(l));
  CHECK(!it_exists(s, "reentry"));
  CHECK_OK(dlock_lock_hold_count(l, &n));
  CHECK_INT(n, ==, 0);
  CHECK_OK(dlock_lock_is_locked(l, &b));
  CHECK(!b);
  CHECK_OK(dlock_lock_is_held_by_thread(l, &b));
  CHECK(!b);
  CHECK_RC(dlock_lock_release(l), DLOCK_ENOTOWNER);

  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_reentry_resets_lease(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_lock_t *l = it_lock(c, "relse");
  CHECK_OK(dlock_lock_acquire(l, 0, 1000));
  int64_t pttl = th_redis_int(s, "PTTL relse");
  CHECK_INT(pttl, >, 0);
  CHECK_INT(pttl, <=, 1000);
  CHECK_OK(dlock_lock_acquire(l, 0, 20000));
  pttl = th_redis_int(s, "PTTL relse");
  CHECK_INT(pttl, >, 10000);
  CHECK_INT(pttl, <=, 20000);
  int64_t rem = 0;
  CHECK_OK(dlock_lock_remaining_lease(l, &rem));
  CHECK_INT(rem, >, 10000);
  CHECK_INT(rem, <=, 20000);
  int64_t n = 0;
  CHECK_OK(dlock_lock_hold_count(l, &n));
  CHECK_INT(n, ==, 2);
  CHECK_OK(dlock_lock_release(l));
  CHECK(it_exists(s, "relse"));
  CHECK_OK(dlock_lock_release(l));
  CHECK(!it_exists(s, "relse"));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

/* Another thread of the same client is another owner. */
typedef struct other_thread {
  dlock_lock_t *lock;
  int release_rc, acquire_rc, count_rc, held_rc, locked_rc;
  int64_t count;
  bool held, locked;
} other_thread_t;

static void *other_main(void *arg) {
  other_thread_t *o = arg;
  o->release_rc = dlock_lock_release(o->lock);
  o->count_rc = dlock_lock_hold_count(o->lock, &o->count);
  o->held_rc = dlock_lock_is_held_by_thread(o->lock, &o->held);
  o->locked_rc = dlock_lock_is_locked(o->lock, &o->locked);
  o->acquire_rc = dlock_lock_acquire(o->lock, 0, WD);
  return NULL;
}

static void t_not_owner_thread(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_lock_t *l = it_lock(c, "notowner");
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  other_thread_t o = {.lock = l, .count = -1, .held = true};
  pthread_t th;
  CHECK(pthread_create(&th, NULL, other_main, &o) == 0);
  pthread_join(th, NULL);
  CHECK_RC(o.release_rc, DLOCK_ENOTOWNER);
  CHECK_OK(o.count_rc);
  CHECK_INT(o.count, ==, 0);
  CHECK_OK(o.held_rc);
  CHECK(!o.held);
  CHECK_OK(o.locked_rc);
  CHECK(o.locked);
  CHECK_RC(o.acquire_rc, DLOCK_EBUSY);
  /* the failed release by the other thread changed nothing */
  char owner[128];
  it_owner(c, dlock_thread_id(), owner, sizeof owner);
  CHECK_INT(it_hget_int(s, "notowner", owner), ==, 1);
  CHECK_OK(dlock_lock_release(l));
  CHECK(!it_exists(s, "notowner"));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_lease_expiry(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_lock_t *l = it_lock(c, "lease");
  int64_t t0 = th_now_ms();
  CHECK_OK(dlock_lock_acquire(l, 0, 300));
  int64_t pttl = th_redis_int(s, "PTTL lease");
  CHECK_INT(pttl, >, 0);
  CHECK_INT(pttl, <=, 300);
  bool gone;
  TH_WAIT_FOR(gone, !it_exists(s, "lease"), 3000);
  CHECK(gone);
  int64_t took = th_now_ms() - t0;
  CHECK_INT(took, >=, 250);
  bool b = true;
  CHECK_OK(dlock_lock_is_locked(l, &b));
  CHECK(!b);
  CHECK_RC(dlock_lock_release(l), DLOCK_ELOST);
  /* the hold is forgotten after ELOST */
  CHECK_RC(dlock_lock_release(l), DLOCK_ENOTOWNER);
  int64_t n = -1;
  CHECK_OK(dlock_lock_hold_count(l, &n));
  CHECK_INT(n, ==, 0);
  /* and the lock works again */
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_lease_expiry_then_other_owner(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *a = it_client(s), *b = it_client(s);
  dlock_lock_t *la = it_lock(a, "lease2"), *lb = it_lock(b, "lease2");
  CHECK_OK(dlock_lock_acquire(la, 0, 300));
  bool ok;
  TH_WAIT_FOR(ok, !it_exists(s, "lease2"), 3000);
  CHECK(ok);
  CHECK_OK(dlock_lock_acquire(lb, 0, WD));
  char bo[128];
  it_owner(b, dlock_thread_id(), bo, sizeof bo);
  CHECK_INT(it_hget_int(s, "lease2", bo), ==, 1);
  /* A's release must report the loss and leave B's hold alone */
  CHECK_RC(dlock_lock_release(la), DLOCK_ELOST);
  CHECK_INT(it_hget_int(s, "lease2", bo), ==, 1);
  CHECK_INT(th_redis_int(s, "HLEN lease2"), ==, 1);
  bool held = false;
  CHECK_OK(dlock_lock_is_held_by_thread(lb, &held));
  CHECK(held);
  CHECK_OK(dlock_lock_is_held_by_thread(la, &held));
  CHECK(!held);
  CHECK_OK(dlock_lock_release(lb));
  CHECK(!it_exists(s, "lease2"));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_server_stop(s);
}

static void t_wait_timeout(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *a = it_client(s), *b = it_client(s);
  dlock_lock_t *la = it_lock(a, "wto"), *lb = it_lock(b, "wto");
  CHECK_OK(dlock_lock_acquire(lb, 0, WD));
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_acquire(la, 400, WD), DLOCK_ETIMEDOUT);
  int64_t took = th_now_ms() - t0;
  printf("wait 400 ms timed out after %lld ms\n", (long long)took);
  CHECK_INT(took, >=, 350);
  CHECK_INT(took, <=, 400 + 1500);
  /* with a fixed lease too */
  t0 = th_now_ms();
  CHECK_RC(dlock_lock_acquire(la, 300, 10000), DLOCK_ETIMEDOUT);
  took = th_now_ms() - t0;
  CHECK_INT(took, >=, 250);
  CHECK_INT(took, <=, 300 + 1500);
  /* the timed-out waiter holds nothing and the holder is untouched */
  int64_t n = -1;
  CHECK_OK(dlock_lock_hold_count(la, &n));
  CHECK_INT(n, ==, 0);
  CHECK_RC(dlock_lock_release(la), DLOCK_ENOTOWNER);
  char bo[128];
  it_owner(b, dlock_thread_id(), bo, sizeof bo);
  CHECK_INT(it_hget_int(s, "wto", bo), ==, 1);
  CHECK_OK(dlock_lock_release(lb));
  /* free now: a waiting acquire succeeds at once */
  t0 = th_now_ms();
  CHECK_OK(dlock_lock_acquire(la, 5000, WD));
  CHECK_INT(th_now_ms() - t0, <, 2500);
  CHECK_OK(dlock_lock_release(la));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_server_stop(s);
}

static void t_wait_zero_busy(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *a = it_client(s), *b = it_client(s);
  dlock_lock_t *la = it_lock(a, "busy"), *lb = it_lock(b, "busy");
  CHECK_OK(dlock_lock_acquire(lb, 0, WD));
  for (int i = 0; i < 20; i++) {
    int64_t t0 = th_now_ms();
    CHECK_RC(dlock_lock_acquire(la, 0, WD), DLOCK_EBUSY);
    CHECK_RC(dlock_lock_acquire(la, 0, 5000), DLOCK_EBUSY);
    CHECK_INT(th_now_ms() - t0, <, 2500);
  }
  CHECK_INT(th_redis_int(s, "HLEN busy"), ==, 1);
  CHECK_OK(dlock_lock_release(lb));
  CHECK_OK(dlock_lock_acquire(la, 0, WD));
  CHECK_OK(dlock_lock_release(la));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_server_stop(s);
}

static void t_acquire_as(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s), *other = it_client(s);
  dlock_lock_t *l = it_lock(c, "as"), *lo = it_lock(other, "as");
  char owner[128];
  it_owner(c, 777, owner, sizeof owner);
  CHECK_OK(dlock_lock_acquire_as(l, 777, 0, WD));
  CHECK_INT(it_hget_int(s, "as", owner), ==, 1);
  CHECK_OK(dlock_lock_acquire_as(l, 777, 0, WD));
  CHECK_INT(it_hget_int(s, "as", owner), ==, 2);
  /* the calling thread is not owner 777 */
  int64_t n = -1;
  CHECK_OK(dlock_lock_hold_count(l, &n));
  CHECK_INT(n, ==, 0);
  bool held = true;
  CHECK_OK(dlock_lock_is_held_by_thread(l, &held));
  CHECK(!held);
  CHECK_RC(dlock_lock_release(l), DLOCK_ENOTOWNER);
  CHECK_RC(dlock_lock_release_as(l, 778), DLOCK_ENOTOWNER);
  CHECK_RC(dlock_lock_acquire(l, 0, WD), DLOCK_EBUSY);
  /* the same thread id in another client is another owner */
  CHECK_RC(dlock_lock_acquire_as(lo, 777, 0, WD), DLOCK_EBUSY);
  CHECK_RC(dlock_lock_release_as(lo, 777), DLOCK_ENOTOWNER);
  CHECK_OK(dlock_lock_release_as(l, 777));
  CHECK_INT(it_hget_int(s, "as", owner), ==, 1);
  CHECK_OK(dlock_lock_release_as(l, 777));
  CHECK(!it_exists(s, "as"));
  CHECK_RC(dlock_lock_release_as(l, 777), DLOCK_ENOTOWNER);
  dlock_lock_free(l);
  dlock_lock_free(lo);
  dlock_client_free(c);
  dlock_client_free(other);
  th_server_stop(s);
}

typedef struct handoff {
  dlock_lock_t *lock;
  uint64_t id;
  int rc;
} handoff_t;

static void *handoff_acquire(void *arg) {
  handoff_t *h = arg;
  h->rc = dlock_lock_acquire_as(h->lock, h->id, 0, WD);
  return NULL;
}

static void *handoff_release(void *arg) {
  handoff_t *h = arg;
  h->rc = dlock_lock_release_as(h->lock, h->id);
  return NULL;
}

static void t_acquire_as_handoff(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_client_cfg_t cfg = {.watchdog_ms = 600};
  dlock_client_t *c = it_client_cfg(s, &cfg);
  dlock_lock_t *l = it_lock(c, "handoff");
  handoff_t h = {.lock = l, .id = 4242, .rc = -999};
  pthread_t th;
  CHECK(pthread_create(&th, NULL, handoff_acquire, &h) == 0);
  pthread_join(th, NULL);
  CHECK_OK(h.rc);
  char owner[128];
  it_owner(c, 4242, owner, sizeof owner);
  CHECK_INT(it_hget_int(s, "handoff", owner), ==, 1);
  /* the acquiring thread is gone; the watchdog keeps the hold alive for
   * more than two leases */
  int64_t end = th_now_ms() + 1500;
  for (int i = 0; i < 100 && th_now_ms() < end; i++) {
    int64_t pttl = th_redis_int(s, "PTTL handoff");
    CHECKF(pttl > 0, "PTTL %lld after the acquiring thread exited",
           (long long)pttl);
    th_sleep_ms(100);
  }
  h.rc = -999;
  CHECK(pthread_create(&th, NULL, handoff_release, &h) == 0);
  pthread_join(th, NULL);
  CHECK_OK(h.rc);
  CHECK(!it_exists(s, "handoff"));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_force_release_wakes_waiter(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *a = it_client(s), *b = it_client(s), *admin = it_client(s);
  dlock_lock_t *la = it_lock(a, "force"), *lb = it_lock(b, "force"),
               *lx = it_lock(admin, "force");
  CHECK_OK(dlock_lock_acquire(la, 0, WD));
  it_async_t w;
  it_async_start(&w, lb, DLOCK_WAIT_FOREVER, WD, false);
  CHECK(it_wait_subscribers(s, "force", 1, 5000));
  CHECK(!atomic_load(&w.done));
  bool was = false;
  int64_t t0 = th_now_ms();
  CHECK_OK(dlock_lock_force_release(lx, &was));
  CHECK(was);
  CHECKF(it_async_wait(&w, 2000), "waiter not woken by force release");
  CHECK_OK(w.rc);
  printf("waiter acquired %lld ms after force release\n",
         (long long)(w.t_done - t0));
  char wo[128];
  it_owner(b, w.tid, wo, sizeof wo);
  CHECK_INT(it_hget_int(s, "force", wo), ==, 1);
  /* the old holder learns it lost the lock */
  CHECK_RC(dlock_lock_release(la), DLOCK_ELOST);
  CHECK_INT(it_hget_int(s, "force", wo), ==, 1);
  CHECK_OK(it_async_finish(&w));
  CHECK(!it_exists(s, "force"));
  was = true;
  CHECK_OK(dlock_lock_force_release(lx, &was));
  CHECK(!was);
  CHECK_OK(dlock_lock_force_release(lx, NULL));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_lock_free(lx);
  dlock_client_free(a);
  dlock_client_free(b);
  dlock_client_free(admin);
  th_server_stop(s);
}

static void t_state(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_lock_t *l = it_lock(c, "st");
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  dlock_lock_state_t *st = NULL;
  CHECK_OK(dlock_lock_state(l, &st));
  CHECK(st);
  CHECK_STR(st->name, "st");
  CHECK_STR(st->kind, "reentrant");
  CHECK_INT(st->ttl_ms, >, 20000);
  CHECK_INT(st->ttl_ms, <=, 30000);
  CHECK_INT(st->nholders, ==, 1);
  char owner[128];
  it_owner(c, dlock_thread_id(), owner, sizeof owner);
  CHECK_STR(st->holders[0].owner, owner);
  CHECK_INT(st->holders[0].count, ==, 2);
  dlock_lock_state_free(st);
  CHECK_OK(dlock_lock_release(l));
  CHECK_OK(dlock_lock_release(l));

  st = NULL;
  CHECK_OK(dlock_lock_state(l, &st));
  CHECK(st);
  CHECK_STR(st->name, "st");
  CHECK_STR(st->kind, "free");
  CHECK_INT(st->nholders, ==, 0);
  CHECK_INT(st->ttl_ms, ==, -2);
  dlock_lock_state_free(st);

  /* a holder written by someone else (Redisson layout) */
  redisReply *r = th_redis_cmd(s, "HSET st %s 3", "abc:1");
  CHECK(r && r->type == REDIS_REPLY_INTEGER);
  freeReplyObject(r);
  CHECK_INT(th_redis_int(s, "PEXPIRE st 9000"), ==, 1);
  st = NULL;
  CHECK_OK(dlock_lock_state(l, &st));
  CHECK_STR(st->kind, "reentrant");
  CHECK_INT(st->nholders, ==, 1);
  CHECK_STR(st->holders[0].owner, "abc:1");
  CHECK_INT(st->holders[0].count, ==, 3);
  CHECK_INT(st->ttl_ms, >, 0);
  CHECK_INT(st->ttl_ms, <=, 9000);
  dlock_lock_state_free(st);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static bool is_uuid(const char *u) {
  if (!u || strlen(u) != 36)
    return false;
  for (int i = 0; i < 36; i++) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (u[i] != '-')
        return false;
    } else if (!isxdigit((unsigned char)u[i])) {
      return false;
    }
  }
  return true;
}

static void t_client_identity(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_client_name(o, "dlock-test-client"));
  dlock_client_t *a = NULL, *b = NULL;
  CHECK_OK(dlock_client_new(&a, s->url, o));
  CHECK_OK(dlock_client_new(&b, s->url, NULL));
  dlock_options_free(o);
  const char *ia = dlock_client_id(a), *ib = dlock_client_id(b);
  CHECKF(is_uuid(ia), "client id \"%s\" is not a UUID", ia ? ia : "(null)");
  CHECKF(is_uuid(ib), "client id \"%s\" is not a UUID", ib ? ib : "(null)");
  CHECK(strcmp(ia, ib) != 0);
  /* a random (version 4, RFC 4122 variant) UUID */
  CHECKF(ia[14] == '4' && strchr("89abAB", ia[19]),
         "client id \"%s\" is not a version-4 UUID", ia);
  CHECK_OK(dlock_client_ping(a));
  CHECK_OK(dlock_client_ping(b));
  /* the id stays the same for the client's life */
  CHECK_STR(dlock_client_id(a), ia);
  char *list = th_redis_str(s, "CLIENT LIST");
  CHECK(list);
  CHECKF(strstr(list, "name=dlock-test-client "),
         "no connection named dlock-test-client in CLIENT LIST:\n%s", list);
  free(list);
  dlock_client_free(a);
  dlock_client_free(b);
  th_server_stop(s);
}

static void t_handles_share_state(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_client_cfg_t cfg = {.watchdog_ms = 600};
  dlock_client_t *c = it_client_cfg(s, &cfg);
  dlock_lock_t *h1 = it_lock(c, "shared"), *h2 = it_lock(c, "shared");
  CHECK_OK(dlock_lock_acquire(h1, 0, WD));
  int64_t n = 0;
  CHECK_OK(dlock_lock_hold_count(h2, &n));
  CHECK_INT(n, ==, 1);
  CHECK_OK(dlock_lock_acquire(h2, 0, WD));
  CHECK_OK(dlock_lock_hold_count(h1, &n));
  CHECK_INT(n, ==, 2);
  CHECK_OK(dlock_lock_release(h2));
  CHECK_OK(dlock_lock_release(h2));
  CHECK(!it_exists(s, "shared"));
  CHECK_OK(dlock_lock_hold_count(h1, &n));
  CHECK_INT(n, ==, 0);

  /* freeing one handle keeps the hold renewed while another handle lives */
  CHECK_OK(dlock_lock_acquire(h1, 0, WD));
  dlock_lock_free(h1);
  int64_t end = th_now_ms() + 1500;
  for (int i = 0; i < 100 && th_now_ms() < end; i++) {
    CHECKF(th_redis_int(s, "PTTL shared") > 0,
           "hold expired although a handle on the name remains");
    th_sleep_ms(100);
  }
  CHECK_OK(dlock_lock_release(h2));
  CHECK(!it_exists(s, "shared"));
  dlock_lock_free(h2);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_remaining_lease_values(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_lock_t *l = it_lock(c, "rl");
  int64_t v = 0;
  CHECK_OK(dlock_lock_remaining_lease(l, &v));
  CHECK_INT(v, ==, -2);
  CHECK_INT(th_redis_int(s, "HSET rl %s 1", "x:1"), ==, 1);
  CHECK_OK(dlock_lock_remaining_lease(l, &v));
  CHECK_INT(v, ==, -1);
  CHECK_INT(th_redis_int(s, "DEL rl"), ==, 1);
  CHECK_OK(dlock_lock_acquire(l, 0, 5000));
  CHECK_OK(dlock_lock_remaining_lease(l, &v));
  CHECK_INT(v, >, 0);
  CHECK_INT(v, <=, 5000);
  CHECK_OK(dlock_lock_release(l));
  CHECK_OK(dlock_lock_remaining_lease(l, &v));
  CHECK_INT(v, ==, -2);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

/* A wake-up that finds the lock still held (someone published "0" while it
 * is held, or another waiter won) must not end the wait early. */
static void t_spurious_wake_keeps_waiting(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *a = it_client(s), *b = it_client(s);
  dlock_lock_t *la = it_lock(a, "spur"), *lb = it_lock(b, "spur");
  CHECK_OK(dlock_lock_acquire(la, 0, WD));
  it_async_t w;
  it_async_start(&w, lb, 1500, WD, false);
  CHECK(it_wait_subscribers(s, "spur", 1, 5000));
  char ch[64];
  it_channel("spur", ch, sizeof ch);
  for (int i = 0; i < 5; i++) {
    CHECK_INT(th_redis_int(s, "PUBLISH %s 0", ch), >=, 1);
    th_sleep_ms(50);
  }
  CHECKF(it_async_wait(&w, 1500 + 1500), "waiter did not time out");
  int64_t took = w.t_done - w.t_start;
  printf("woken 5 times while held, gave up after %lld ms\n", (long long)took);
  CHECK_RC(w.rc, DLOCK_ETIMEDOUT);
  CHECK_INT(took, >=, 1400);
  CHECK_INT(took, <=, 1500 + 1000);
  CHECK_INT(it_async_finish(&w), ==, -999);
  CHECK_OK(dlock_lock_release(la));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_server_stop(s);
}

/* ------------------------------------------- a dead thread's kernel id */

/* A thread of the TID-reuse case and what it saw. */
typedef struct reuse_thread {
  dlock_lock_t *lock;
  pid_t tid;   /* kernel thread id */
  uint64_t id; /* dlock_thread_id() */
  int acquire_rc, held_rc;
  bool held;
} reuse_thread_t;

/* Takes the lock (watchdog lease) and ends without releasing it. */
static void *reuse_holder(void *arg) {
  reuse_thread_t *t = arg;
  t->tid = gettid();
  t->id = dlock_thread_id();
  t->acquire_rc = dlock_lock_acquire(t->lock, 0, WD);
  return NULL;
}

/* Tries the lock once and asks whether it holds it. */
static void *reuse_newcomer(void *arg) {
  reuse_thread_t *t = arg;
  t->tid = gettid();
  t->id = dlock_thread_id();
  t->acquire_rc = dlock_lock_acquire(t->lock, 0, WD);
  t->held_rc = dlock_lock_is_held_by_thread(t->lock, &t->held);
  return NULL;
}

/* pid 1 of a fresh PID namespace, where only our threads take ids, so
 * writing ns_last_pid decides the next thread's TID. 77 = skipped. */
static int reuse_child(th_server_t *s) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  int fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    printf("skipped: /proc/sys/kernel/ns_last_pid: %s\n", strerror(errno));
    return 77;
  }
  dlock_client_t *c = it_client(s);
  dlock_lock_t *l = it_lock(c, "reused-tid");
  reuse_thread_t a = {.lock = l}, b = {.lock = l};
  pthread_t th;
  CHECK(pthread_create(&th, NULL, reuse_holder, &a) == 0);
  pthread_join(th, NULL);
  CHECK_OK(a.acquire_rc);
  char num[32];
  int n = snprintf(num, sizeof num, "%d", (int)a.tid - 1);
  if (write(fd, num, (size_t)n) != n) {
    printf("skipped: writing /proc/sys/kernel/ns_last_pid: %s\n",
           strerror(errno));
    return 77;
  }
  close(fd);
  CHECK(pthread_create(&th, NULL, reuse_newcomer, &b) == 0);
  pthread_join(th, NULL);
  CHECKF(b.tid == a.tid, "thread B got TID %d, not dead thread A's %d",
         (int)b.tid, (int)a.tid);
  printf("thread A (TID %d, id %llu) ended holding; thread B got TID %d, "
         "id %llu\n",
         (int)a.tid, (unsigned long long)a.id, (int)b.tid,
         (unsigned long long)b.id);
  CHECK_RC(b.acquire_rc, DLOCK_EBUSY);
  CHECK_OK(b.held_rc);
  CHECKF(!b.held, "thread B is told it holds dead thread A's lock");
  CHECK(b.id != a.id);
  /* A's hold is untouched, under A's number */
  char owner[128];
  it_owner(c, a.id, owner, sizeof owner);
  CHECK_INT(it_hget_int(s, "reused-tid", owner), ==, 1);
  CHECK_OK(dlock_lock_release_as(l, a.id));
  CHECK(!it_exists(s, "reused-tid"));
  dlock_lock_free(l);
  dlock_client_free(c);
  return 0;
}

/* Linux reuses a dead thread's TID. A new thread that gets it must not
 * inherit the dead thread's hold: it is refused the lock and does not hold
 * it (a thread's number is never reused, as a Java thread id is not). */
static void t_dead_thread_id_not_reused(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  fflush(stdout);
  fflush(stderr);
  /* the namespace is entered by a child, never by this process: a process
   * whose new children land in a namespace whose init has gone cannot
   * fork again (LeakSanitizer's exit check among others) */
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (unshare(CLONE_NEWPID) != 0) {
      printf("skipped: unshare(CLONE_NEWPID): %s\n", strerror(errno));
      fflush(stdout);
      _exit(77);
    }
    pid_t init = fork(); /* pid 1 of the new namespace */
    if (init < 0)
      _exit(1);
    if (init == 0) {
      int rc = reuse_child(s);
      fflush(stdout);
      _exit(rc);
    }
    int st = 0;
    while (waitpid(init, &st, 0) < 0 && errno == EINTR)
      ;
    _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 1);
  }
  int st = it_spawn_wait(pid, 20000);
  CHECKF(WIFEXITED(st), "child died (status 0x%x)", st);
  if (WEXITSTATUS(st) != 77)
    CHECKF(WEXITSTATUS(st) == 0, "child failed (status %d)", WEXITSTATUS(st));
  th_server_stop(s);
}

/* Holder info (dlock_options_set_holder_info) on Redis: a client without it
 * writes nothing beyond Redisson's layout; with it, its text lives in
 * dlock_holder:{NAME}:<owner> with the lease, is read back for the holder
 * and for a queued waiter (whose text the hand-off makes the holder's), is
 * renewed by the watchdog and deleted by the full release; a fair lock's
 * too. */
typedef struct hi_wait {
  dlock_lock_t *l;
  uint64_t tid;
  int rc;
} hi_wait_t;

static void *hi_waiter(void *arg) {
  hi_wait_t *w = arg;
  w->rc = dlock_lock_acquire_as(w->l, w->tid, 20000, WD);
  return NULL;
}

static int64_t holder_keys(th_server_t *s) {
  return th_redis_int(s, "EVAL %s 0",
                      "return #redis.call('keys', 'dlock_holder:*')");
}

static void t_holder_info(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_client_cfg_t ca = {.holder_info = "A: pid 1 on h"};
  it_client_cfg_t cc = {.holder_info = "C: caf\xc3\xa9"};
  dlock_client_t *a = it_client_cfg(s, &ca), *b = it_client(s),
                 *c = it_client_cfg(s, &cc);
  dlock_lock_t *la = it_lock(a, "hi"), *lb = it_lock(b, "hi"),
               *lc = it_lock(c, "hi");
  dlock_lock_state_t *st = NULL;
  char owner[128], key[256];

  /* without it, nothing is written beyond the anchor's layout */
  CHECK_OK(dlock_lock_acquire(lb, 0, WD));
  CHECK_INT(holder_keys(s), ==, 0);
  CHECK_OK(dlock_lock_state(lb, &st));
  CHECK_INT(st->nholders, ==, 1);
  CHECK(st->holder_infos == NULL || st->holder_infos[0] == NULL);
  dlock_lock_state_free(st);
  CHECK_OK(dlock_lock_release(lb));

  /* with it: beside the lock, with the lease */
  CHECK_OK(dlock_lock_acquire(la, 0, WD));
  it_owner(a, dlock_thread_id(), owner, sizeof owner);
  snprintf(key, sizeof key, "dlock_holder:{hi}:%s", owner);
  char *v = th_redis_str(s, "GET %s", key);
  CHECK_STR(v, "A: pid 1 on h");
  free(v);
  CHECK_INT(th_redis_int(s, "PTTL %s", key), >, 0);
  CHECK_INT(th_redis_int(s, "PTTL %s", key), <=, 30000);
  st = NULL;
  CHECK_OK(dlock_lock_state(lb, &st));
  CHECK(st->holder_infos != NULL);
  CHECK_STR(st->holder_infos[0], "A: pid 1 on h");
  dlock_lock_state_free(st);

  /* a queued waiter's text; the hand-off makes it the holder's */
  hi_wait_t w = {lc, 4242, 1};
  pthread_t th;
  CHECK(pthread_create(&th, NULL, hi_waiter, &w) == 0);
  size_t nw = 0;
  for (int i = 0; i < 1000 && nw == 0; i++) {
    st = NULL;
    CHECK_OK(dlock_lock_state(lb, &st));
    nw = st->nwaiters;
    if (nw == 0) {
      dlock_lock_state_free(st);
      th_sleep_ms(10);
    }
  }
  CHECK_INT(nw, ==, 1);
  CHECK(st->waiter_infos != NULL);
  CHECK_STR(st->waiter_infos[0], "C: caf\xc3\xa9");
  dlock_lock_state_free(st);
  CHECK_OK(dlock_lock_release(la));
  CHECK_INT(th_redis_int(s, "EXISTS %s", key), ==, 0);
  pthread_join(th, NULL);
  CHECK_OK(w.rc);
  st = NULL;
  CHECK_OK(dlock_lock_state(lb, &st));
  CHECK_INT(st->nholders, ==, 1);
  CHECK(st->holder_infos != NULL);
  CHECK_STR(st->holder_infos[0], "C: caf\xc3\xa9");
  dlock_lock_state_free(st);
  CHECK_OK(dlock_lock_release_as(lc, 4242));
  CHECK_INT(holder_keys(s), ==, 0);

  /* a fair lock's: written at the grant, deleted by the release */
  dlock_lock_t *fa = NULL;
  CHECK_OK(dlock_lock_new_kind(a, "hf", DLOCK_FAIR, &fa));
  CHECK_OK(dlock_lock_acquire(fa, 0, WD));
  snprintf(key, sizeof key, "dlock_holder:{hf}:%s", owner);
  v = th_redis_str(s, "GET %s", key);
  CHECK_STR(v, "A: pid 1 on h");
  free(v);
  st = NULL;
  CHECK_OK(dlock_lock_state(fa, &st));
  CHECK(st->holder_infos != NULL);
  CHECK_STR(st->holder_infos[0], "A: pid 1 on h");
  dlock_lock_state_free(st);
  CHECK_OK(dlock_lock_release(fa));
  CHECK_INT(holder_keys(s), ==, 0);
  dlock_lock_free(fa);

  /* a read-write lock's sides: a write hold's text under its field's name
   * (<owner>:write), a read hold's under the owner; each read back for its
   * holder, deleted when the owner's last hold of that side ends (their
   * renewal is checked below) */
  dlock_lock_t *wa = NULL, *ra = NULL, *rc_ = NULL;
  CHECK_OK(dlock_lock_new_kind(a, "hrw", DLOCK_WRITE, &wa));
  CHECK_OK(dlock_lock_new_kind(a, "hrw", DLOCK_READ, &ra));
  CHECK_OK(dlock_lock_new_kind(c, "hrw", DLOCK_READ, &rc_));
  CHECK_OK(dlock_lock_acquire(wa, 0, WD));
  snprintf(key, sizeof key, "dlock_holder:{hrw}:%s:write", owner);
  v = th_redis_str(s, "GET %s", key);
  CHECK_STR(v, "A: pid 1 on h");
  free(v);
  st = NULL;
  CHECK_OK(dlock_lock_state(wa, &st));
  CHECK_INT(st->nholders, ==, 1);
  CHECK(st->holder_infos != NULL);
  CHECK_STR(st->holder_infos[0], "A: pid 1 on h");
  dlock_lock_state_free(st);
  CHECK_OK(dlock_lock_release(wa));
  CHECK_INT(holder_keys(s), ==, 0);
  CHECK_OK(dlock_lock_acquire(ra, 0, WD));
  CHECK_OK(dlock_lock_acquire_as(rc_, 4343, 0, WD));
  char cowner[128], ckey[256];
  it_owner(c, 4343, cowner, sizeof cowner);
  snprintf(key, sizeof key, "dlock_holder:{hrw}:%s", owner);
  snprintf(ckey, sizeof ckey, "dlock_holder:{hrw}:%s", cowner);
  st = NULL;
  CHECK_OK(dlock_lock_state(ra, &st));
  CHECK_INT(st->nholders, ==, 2);
  CHECK(st->holder_infos != NULL);
  for (size_t i = 0; i < st->nholders; i++)
    CHECK_STR(st->holder_infos[i], strcmp(st->holders[i].owner, owner) == 0
                                       ? "A: pid 1 on h"
                                       : "C: caf\xc3\xa9");
  dlock_lock_state_free(st);
  CHECK_OK(dlock_lock_release(ra));
  CHECK_INT(th_redis_int(s, "EXISTS %s", key), ==, 0);
  CHECK_INT(th_redis_int(s, "EXISTS %s", ckey), ==, 1);
  CHECK_OK(dlock_lock_release_as(rc_, 4343));
  CHECK_INT(holder_keys(s), ==, 0);
  dlock_lock_free(wa);
  dlock_lock_free(ra);
  dlock_lock_free(rc_);

  /* renewed with the lock: after three renewals of a 600 ms lease the
   * text is still there */
  it_client_cfg_t cd = {.holder_info = "D", .watchdog_ms = 600};
  dlock_client_t *d = it_client_cfg(s, &cd);
  dlock_lock_t *ld = it_lock(d, "hr");
  CHECK_OK(dlock_lock_acquire(ld, 0, WD));
  it_owner(d, dlock_thread_id(), owner, sizeof owner);
  snprintf(key, sizeof key, "dlock_holder:{hr}:%s", owner);
  int renewals = 0;
  int64_t last = th_redis_int(s, "PTTL hr");
  for (int i = 0; i < 1000 && renewals < 3; i++) {
    th_sleep_ms(10);
    int64_t now = th_redis_int(s, "PTTL hr");
    if (now > last)
      renewals++;
    last = now;
  }
  CHECK_INT(renewals, ==, 3);
  CHECK_INT(th_redis_int(s, "EXISTS %s", key), ==, 1);
  CHECK_OK(dlock_lock_release(ld));
  CHECK_INT(th_redis_int(s, "EXISTS %s", key), ==, 0);
  dlock_lock_free(ld);
  /* both sides' texts are renewed with their holds: a TTL set far out by
   * hand comes back to the lease at the next renewal */
  const dlock_lock_kind_t sides[2] = {DLOCK_READ, DLOCK_WRITE};
  for (int i = 0; i < 2; i++) {
    dlock_lock_t *lr = NULL;
    CHECK_OK(dlock_lock_new_kind(d, "hrr", sides[i], &lr));
    CHECK_OK(dlock_lock_acquire(lr, 0, WD));
    snprintf(key, sizeof key, "dlock_holder:{hrr}:%s%s", owner,
             sides[i] == DLOCK_WRITE ? ":write" : "");
    CHECK_INT(th_redis_int(s, "PEXPIRE %s 100000", key), ==, 1);
    bool renewed;
    TH_WAIT_FOR(renewed, th_redis_int(s, "PTTL %s", key) <= 600, 5000);
    CHECKF(renewed, "the %s side's text was not renewed with its hold",
           sides[i] == DLOCK_WRITE ? "write" : "read");
    CHECK_OK(dlock_lock_release(lr));
    CHECK_INT(th_redis_int(s, "EXISTS %s", key), ==, 0);
    dlock_lock_free(lr);
  }
  dlock_client_free(d);

  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_lock_free(lc);
  dlock_client_free(a);
  dlock_client_free(b);
  dlock_client_free(c);
  th_server_stop(s);
}

static const check_case_t cases[] = {
    {"reentry", t_reentry},
    {"reentry_resets_lease", t_reentry_resets_lease},
    {"not_owner_thread", t_not_owner_thread},
    {"lease_expiry", t_lease_expiry},
    {"lease_expiry_then_other_owner", t_lease_expiry_then_other_owner},
    {"wait_timeout", t_wait_timeout},
    {"wait_zero_busy", t_wait_zero_busy},
    {"acquire_as", t_acquire_as},
    {"acquire_as_handoff", t_acquire_as_handoff},
    {"force_release_wakes_waiter", t_force_release_wakes_waiter},
    {"state", t_state},
    {"holder_info", t_holder_info},
    {"client_identity", t_client_identity},
    {"handles_share_state", t_handles_share_state},
    {"remaining_lease_values", t_remaining_lease_values},
    {"spurious_wake_keeps_waiting", t_spurious_wake_keeps_waiting},
    {"dead_thread_id_not_reused", t_dead_thread_id_not_reused},
};

CHECK_MAIN(cases)
