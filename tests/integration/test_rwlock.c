/*
 * test_rwlock.c - the read-write lock (DLOCK_READ / DLOCK_WRITE) and the
 * fenced lock (DLOCK_FENCED) as a user sees them.
 *
 * Design note: overlap is observed, not assumed: readers meet inside the
 * lock (each waits, bounded, until the others are in), and the writer's
 * exclusion is checked with a shared in-section counter whose maximum is
 * recorded. Fencing tokens are collected from threads and processes and
 * must strictly increase in grant order. The "Redisson" side runs the
 * RReadWriteLock scripts as REDIS-LAYOUT.md describes them, written for this
 * test. Every wait is bounded.
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

static dlock_lock_t *kind_lock(dlock_client_t *c, const char *name,
                               dlock_lock_kind_t kind) {
  dlock_lock_t *l = NULL;
  CHECK_OK(dlock_lock_new_kind(c, name, kind, &l));
  CHECK(dlock_lock_kind(l) == kind);
  return l;
}

/* ---------------------------------------------------------- read-write */

typedef struct shared {
  atomic_int inside_readers;
  atomic_int inside_writers;
  atomic_int max_readers;
  atomic_int violations; /* a writer met anyone inside */
  atomic_int met;        /* readers that saw all the others inside */
} shared_t;

static shared_t *shared_new(void) {
  shared_t *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(sh != MAP_FAILED);
  memset(sh, 0, sizeof *sh);
  return sh;
}

static void note_max(atomic_int *max, int v) {
  int m = atomic_load(max);
  while (v > m && !atomic_compare_exchange_weak(max, &m, v))
    ;
}

typedef struct reader {
  dlock_lock_t *l;
  shared_t *sh;
  int expect; /* readers that must be inside together */
  int rc;
  pthread_t th;
} reader_t;

static void *reader_main(void *arg) {
  reader_t *r = arg;
  r->rc = dlock_lock_acquire(r->l, 10000, WD);
  if (r->rc != DLOCK_OK)
    return NULL;
  int now = atomic_fetch_add(&r->sh->inside_readers, 1) + 1;
  note_max(&r->sh->max_readers, now);
  if (atomic_load(&r->sh->inside_writers) > 0)
    atomic_fetch_add(&r->sh->violations, 1);
  bool all;
  TH_WAIT_FOR(all, atomic_load(&r->sh->inside_readers) >= r->expect, 5000);
  if (all)
    atomic_fetch_add(&r->sh->met, 1);
  th_sleep_ms(20);
  atomic_fetch_sub(&r->sh->inside_readers, 1);
  r->rc = dlock_lock_release(r->l);
  return NULL;
}

/* Readers in several clients hold the read side at the same time. */
static void t_readers_overlap(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  enum { N = 4 };
  dlock_client_t *c[N];
  reader_t r[N];
  shared_t *sh = shared_new();
  for (int i = 0; i < N; i++) {
    c[i] = it_client(s);
    r[i] = (reader_t){.l = kind_lock(c[i], "rw-overlap", DLOCK_READ),
                      .sh = sh,
                      .expect = N};
    CHECK(pthread_create(&r[i].th, NULL, reader_main, &r[i]) == 0);
  }
  for (int i = 0; i < N; i++) {
    pthread_join(r[i].th, NULL);
    CHECK_OK(r[i].rc);
  }
  printf("readers inside at once: %d of %d\n", atomic_load(&sh->max_readers),
         N);
  CHECK_INT(atomic_load(&sh->met), ==, N); /* all were in together */
  CHECK_INT(atomic_load(&sh->max_readers), ==, N);
  CHECK(!it_exists(s, "rw-overlap"));
  CHECK_INT(it_lock_keys(s), ==, 0);
  for (int i = 0; i < N; i++) {
    dlock_lock_free(r[i].l);
    dlock_client_free(c[i]);
  }
  munmap(sh, sizeof *sh);
  th_server_stop(s);
}

/* One child: a loop of read or write holds, counting what it meets. */
static void rw_child(th_server_t *s, shared_t *sh, bool writer, int rounds) {
  dlock_client_t *c = it_client(s);
  dlock_lock_t *l =
      kind_lock(c, "rw-excl", writer ? DLOCK_WRITE : DLOCK_READ);
  int bad = 0;
  for (int i = 0; i < rounds; i++) {
    if (dlock_lock_acquire(l, 20000, WD) != DLOCK_OK) {
      bad++;
      break;
    }
    if (writer) {
      if (atomic_fetch_add(&sh->inside_writers, 1) != 0 ||
          atomic_load(&sh->inside_readers) != 0)
        atomic_fetch_add(&sh->violations, 1);
      usleep(2000);
      if (atomic_load(&sh->inside_readers) != 0)
        atomic_fetch_add(&sh->violations, 1);
      atomic_fetch_sub(&sh->inside_writers, 1);
    } else {
      int n = atomic_fetch_add(&sh->inside_readers, 1) + 1;
      note_max(&sh->max_readers, n);
      if (atomic_load(&sh->inside_writers) != 0)
        atomic_fetch_add(&sh->violations, 1);
      usleep(2000);
      atomic_fetch_sub(&sh->inside_readers, 1);
    }
    if (dlock_lock_release(l) != DLOCK_OK)
      bad++;
  }
  dlock_lock_free(l);
  dlock_client_free(c);
  _exit(bad ? 1 : 0);
}

/* Writers exclude readers and each other; readers still share. Processes:
 * 2 writers and 4 readers. */
static void t_writer_excludes(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  shared_t *sh = shared_new();
  enum { NP = 6 };
  pid_t pid[NP];
  for (int i = 0; i < NP; i++) {
    pid[i] = fork();
    CHECK(pid[i] >= 0);
    if (pid[i] == 0)
      rw_child(s, sh, i < 2, 40);
  }
  for (int i = 0; i < NP; i++) {
    int st = 0;
    bool ok;
    TH_WAIT_FOR(ok, waitpid(pid[i], &st, WNOHANG) == pid[i], 60000);
    if (!ok)
      kill(pid[i], SIGKILL), waitpid(pid[i], &st, 0);
    CHECKF(ok && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d status %d",
           i, st);
  }
  printf("violations %d, most readers inside at once %d\n",
         atomic_load(&sh->violations), atomic_load(&sh->max_readers));
  CHECK_INT(atomic_load(&sh->violations), ==, 0);
  CHECK_INT(atomic_load(&sh->max_readers), >=, 2);
  CHECK(!it_exists(s, "rw-excl"));
  munmap(sh, sizeof *sh);
  th_server_stop(s);
}

/* A writer may take the read side (downgrade) and keeps it after releasing
 * the write side; readers from elsewhere then get in, writers do not. */
static void t_downgrade(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *a = it_client(s), *b = it_client(s);
  dlock_lock_t *w = kind_lock(a, "rw-down", DLOCK_WRITE);
  dlock_lock_t *r = kind_lock(a, "rw-down", DLOCK_READ);
  dlock_lock_t *br = kind_lock(b, "rw-down", DLOCK_READ);
  dlock_lock_t *bw = kind_lock(b, "rw-down", DLOCK_WRITE);
  CHECK_OK(dlock_lock_acquire(w, 0, WD));
  CHECK_OK(dlock_lock_acquire(w, 0, WD)); /* write re-entry */
  CHECK_RC(dlock_lock_acquire(br, 0, WD), DLOCK_EBUSY);
  CHECK_OK(dlock_lock_acquire(r, 0, WD)); /* downgrade */
  dlock_lock_state_t *st = NULL;
  CHECK_OK(dlock_lock_state(r, &st));
  CHECK_STR(st->kind, "write");
  CHECK_INT(st->nholders, ==, 2);
  dlock_lock_state_free(st);
  CHECK_OK(dlock_lock_release(w));
  CHECK_OK(dlock_lock_release(w)); /* write side gone, read side kept */
  CHECK_OK(dlock_lock_state(r, &st));
  CHECK_STR(st->kind, "read");
  CHECK_INT(st->nholders, ==, 1);
  CHECK_STR(st->holders[0].side, "read");
  dlock_lock_state_free(st);
  bool held = false;
  CHECK_OK(dlock_lock_is_held_by_thread(r, &held));
  CHECK(held);
  CHECK_OK(dlock_lock_acquire(br, 0, WD)); /* another reader gets in */
  /* no writer does: both hold the read side, and neither may upgrade */
  CHECK_RC(dlock_lock_acquire(bw, 0, WD), DLOCK_EDEADLK);
  CHECK_RC(dlock_lock_acquire(w, 0, WD), DLOCK_EDEADLK);
  CHECK_OK(dlock_lock_release(br));
  CHECK_OK(dlock_lock_release(r));
  CHECK(!it_exists(s, "rw-down"));
  CHECK_OK(dlock_lock_acquire(bw, 0, WD));
  CHECK_OK(dlock_lock_release(bw));
  dlock_lock_free(w);
  dlock_lock_free(r);
  dlock_lock_free(br);
  dlock_lock_free(bw);
  dlock_client_free(a);
  dlock_client_free(b);
  th_server_stop(s);
}

/* A reader asking for the write side gets DLOCK_EDEADLK at once, even with
 * a long wait, and keeps its read hold. */
static void t_upgrade_refused(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *a = it_client(s);
  dlock_lock_t *r = kind_lock(a, "rw-up", DLOCK_READ);
  dlock_lock_t *w = kind_lock(a, "rw-up", DLOCK_WRITE);
  CHECK_OK(dlock_lock_acquire(r, 0, WD));
  int64_t t0 = th_now_ms();
  CHECK_RC(dlock_lock_acquire(w, 5000, WD), DLOCK_EDEADLK);
  CHECK_INT(th_now_ms() - t0, <, 2000);
  CHECK(strstr(dlock_last_error(), "upgrade") != NULL);
  CHECK_RC(dlock_lock_acquire(w, 0, WD), DLOCK_EDEADLK);
  int64_t n = 0;
  CHECK_OK(dlock_lock_hold_count(r, &n));
  CHECK_INT(n, ==, 1);
  CHECK_OK(dlock_lock_release(r));
  CHECK_OK(dlock_lock_acquire(w, 0, WD)); /* fine once the read is gone */
  CHECK_OK(dlock_lock_release(w));
  dlock_lock_free(r);
  dlock_lock_free(w);
  dlock_client_free(a);
  th_server_stop(s);
}

/* Each read hold has its own lease: a reader whose lease runs out does not
 * take another reader's hold with it, and the other reader's watchdog does
 * not keep the expired one alive. */
static void t_reader_expiry_independent(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_client_cfg_t cfg = {.watchdog_ms = 600};
  dlock_client_t *a = it_client_cfg(s, &cfg), *b = it_client(s);
  dlock_lock_t *ra = kind_lock(a, "rw-exp", DLOCK_READ);
  dlock_lock_t *rb = kind_lock(b, "rw-exp", DLOCK_READ);
  dlock_lock_t *wb = kind_lock(b, "rw-exp", DLOCK_WRITE);
  CHECK_OK(dlock_lock_acquire(ra, 0, WD)); /* watchdog-renewed */
  CHECK_OK(dlock_lock_acquire(rb, 0, 400)); /* fixed 400 ms */
  th_sleep_ms(1500);                        /* past b's lease */
  /* a's hold is alive (renewed), so the lock is; b's lease ran out */
  bool held = false;
  CHECK_OK(dlock_lock_is_locked(ra, &held));
  CHECK(held);
  CHECK_RC(dlock_lock_acquire(wb, 0, WD), DLOCK_EBUSY);
  char owner_b[128], key[256];
  it_owner(b, dlock_thread_id(), owner_b, sizeof owner_b);
  snprintf(key, sizeof key, "{rw-exp}:%s:rwlock_timeout:1", owner_b);
  CHECK_INT(th_redis_int(s, "EXISTS %s", key), ==, 0);
  /* a releases: b's expired hold does not keep the lock */
  CHECK_OK(dlock_lock_release(ra));
  CHECK(!it_exists(s, "rw-exp"));
  /* b learns that its hold had run out */
  CHECK_RC(dlock_lock_release(rb), DLOCK_ELOST);
  /* the same while the other reader still holds (b's field is still in the
   * hash, its hold key is not) */
  CHECK_OK(dlock_lock_acquire(ra, 0, WD));
  CHECK_OK(dlock_lock_acquire(rb, 0, 300));
  th_sleep_ms(700);
  CHECK_RC(dlock_lock_release(rb), DLOCK_ELOST);
  CHECK(it_exists(s, "rw-exp"));
  CHECK_OK(dlock_lock_release(ra));
  CHECK(!it_exists(s, "rw-exp"));
  CHECK_OK(dlock_lock_acquire(wb, 0, WD));
  CHECK_OK(dlock_lock_release(wb));
  dlock_lock_free(ra);
  dlock_lock_free(rb);
  dlock_lock_free(wb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_server_stop(s);
}

/* A read release whose reply is lost is retried with the same request id
 * (by the library at once, and by the user): when the newest read hold's
 * own key had expired, the first run must leave a latch like any other
 * partial release, or the retry releases the owner's next hold too. */
static void t_read_release_retry_once(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  th_proxy_t *p = th_proxy_start(s->port);
  CHECK(p);
  it_client_cfg_t cfg = {
      .connect_ms = 300, .command_ms = 300, .url = th_proxy_url(p)};
  dlock_client_t *c = it_client_cfg(s, &cfg), *other = it_client(s);
  /* the server learns the scripts first: a lost NOSCRIPT reply would
   * stop the release from ever running */
  dlock_lock_t *warm = kind_lock(c, "rw-warm", DLOCK_READ);
  CHECK_OK(dlock_lock_acquire(warm, 0, 30000));
  CHECK_OK(dlock_lock_acquire(warm, 0, 30000));
  CHECK_OK(dlock_lock_release(warm));
  CHECK_OK(dlock_lock_release(warm));
  dlock_lock_t *r = kind_lock(c, "rw-retry", DLOCK_READ);
  dlock_lock_t *w = kind_lock(other, "rw-retry", DLOCK_WRITE);
  char owner[128], key1[256], key2[256];
  it_owner(c, dlock_thread_id(), owner, sizeof owner);
  snprintf(key1, sizeof key1, "{rw-retry}:%s:rwlock_timeout:1", owner);
  snprintf(key2, sizeof key2, "{rw-retry}:%s:rwlock_timeout:2", owner);
  CHECK_OK(dlock_lock_acquire(r, 0, 30000));
  CHECK_OK(dlock_lock_acquire(r, 0, 30000));
  CHECK_INT(it_hget_int(s, "rw-retry", owner), ==, 2);
  /* the newest hold's lease runs out */
  CHECK_INT(th_redis_int(s, "PEXPIRE %s 1", key2), ==, 1);
  bool gone;
  TH_WAIT_FOR(gone, th_redis_int(s, "EXISTS %s", key2) == 0, 2000);
  CHECK(gone);
  /* both the first attempt and the library's own retry lose their replies */
  th_proxy_drop_replies(p, true);
  int rc = dlock_lock_release(r);
  th_proxy_drop_replies(p, false);
  CHECKF(rc == DLOCK_EIOTIMEOUT || rc == DLOCK_EUNAVAILABLE,
         "release with lost replies: %s", dlock_err_name(rc));
  bool ran;
  TH_WAIT_FOR(ran, it_hget_int(s, "rw-retry", owner) <= 1, 2000);
  CHECK(ran);
  /* the user retries too (the same request id, kept by the library) */
  rc = dlock_lock_release(r);
  printf("user's retry: %s; read holds on the server: %lld\n",
         dlock_err_name(rc), (long long)it_hget_int(s, "rw-retry", owner));
  /* one hold was released, once: the older one is still held */
  CHECK_INT(it_hget_int(s, "rw-retry", owner), ==, 1);
  CHECK_INT(th_redis_int(s, "EXISTS %s", key1), ==, 1);
  bool held = false;
  CHECK_OK(dlock_lock_is_locked(w, &held));
  CHECK(held);
  CHECK_RC(dlock_lock_acquire(w, 0, WD), DLOCK_EBUSY);
  dlock_lock_free(warm);
  dlock_lock_free(r);
  dlock_lock_free(w);
  dlock_client_free(c);
  dlock_client_free(other);
  th_proxy_stop(p);
  th_server_stop(s);
}

/* A read release whose own hold had expired loses that hold only: the
 * owner's other read holds stay recorded and renewed by the watchdog. */
static void t_expired_read_hold_keeps_others(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_client_cfg_t cfg = {.watchdog_ms = 600};
  dlock_client_t *c = it_client_cfg(s, &cfg);
  dlock_lock_t *r = kind_lock(c, "rw-keep", DLOCK_READ);
  char owner[128], key2[256];
  it_owner(c, dlock_thread_id(), owner, sizeof owner);
  snprintf(key2, sizeof key2, "{rw-keep}:%s:rwlock_timeout:2", owner);
  CHECK_OK(dlock_lock_acquire(r, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_acquire(r, 0, DLOCK_LEASE_WATCHDOG));
  /* the newest hold's lease runs out on the server */
  CHECK_INT(th_redis_int(s, "PEXPIRE %s 1", key2), ==, 1);
  bool gone;
  TH_WAIT_FOR(gone, th_redis_int(s, "EXISTS %s", key2) == 0, 2000);
  CHECK(gone);
  CHECK_RC(dlock_lock_release(r), DLOCK_ELOST);
  /* the older hold lives on: several watchdog periods later it is still
   * held (a hold nobody renews is gone after 600 ms) */
  struct timespec nap = {1, 500000000L}; /* the scenario: 2.5 leases */
  nanosleep(&nap, NULL);
  bool held = false;
  CHECK_OK(dlock_lock_is_held_by_thread(r, &held));
  CHECK(held);
  CHECK_OK(dlock_lock_release(r));
  CHECK_OK(dlock_lock_is_locked(r, &held));
  CHECK(!held);
  dlock_lock_free(r);
  dlock_client_free(c);
  th_server_stop(s);
}

/* A write release wakes every waiting reader; a read release wakes a
 * waiting writer. */
static void t_wakeups(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *a = it_client(s), *b = it_client(s), *c2 = it_client(s);
  dlock_lock_t *w = kind_lock(a, "rw-wake", DLOCK_WRITE);
  dlock_lock_t *rb = kind_lock(b, "rw-wake", DLOCK_READ);
  dlock_lock_t *rc = kind_lock(c2, "rw-wake", DLOCK_READ);
  CHECK_OK(dlock_lock_acquire(w, 0, WD));
  it_async_t x, y;
  it_async_start(&x, rb, 10000, WD, false);
  it_async_start(&y, rc, 10000, WD, false);
  bool ok;
  TH_WAIT_FOR(ok, it_numsub(s, "redisson_rwlock:{rw-wake}") >= 2, 5000);
  CHECK(ok);
  int64_t t_rel = th_now_ms();
  CHECK_OK(dlock_lock_release(w));
  CHECK(it_async_wait(&x, 3000));
  CHECK(it_async_wait(&y, 3000));
  CHECK_OK(x.rc);
  CHECK_OK(y.rc);
  printf("readers woke %lld and %lld ms after the write release\n",
         (long long)(x.t_done - t_rel), (long long)(y.t_done - t_rel));
  CHECK_INT(x.t_done - t_rel, <, 2000);
  CHECK_INT(y.t_done - t_rel, <, 2000);
  /* now the writer waits for both readers */
  it_async_t z;
  it_async_start(&z, w, 10000, WD, true);
  TH_WAIT_FOR(ok, it_numsub(s, "redisson_rwlock:{rw-wake}") >= 1, 5000);
  th_sleep_ms(100);
  CHECK_OK(it_async_finish(&x));
  th_sleep_ms(100);
  CHECK(!atomic_load(&z.done)); /* one reader left */
  t_rel = th_now_ms();
  CHECK_OK(it_async_finish(&y));
  CHECK(it_async_wait(&z, 3000));
  CHECK_OK(z.rc);
  CHECK_INT(z.t_done - t_rel, <, 2000);
  CHECK_OK(it_async_finish(&z));
  dlock_lock_free(w);
  dlock_lock_free(rb);
  dlock_lock_free(rc);
  dlock_client_free(a);
  dlock_client_free(b);
  dlock_client_free(c2);
  th_server_stop(s);
}

/* RReadWriteLock as REDIS-LAYOUT.md describes it: read acquire sets
 * mode=read, the owner's count and a timeout key per hold. */
static const char RS_READ_ACQUIRE[] =
    "local mode = redis.call('hget', KEYS[1], 'mode'); "
    "if mode == false then "
    "  redis.call('hset', KEYS[1], 'mode', 'read'); "
    "  redis.call('hset', KEYS[1], ARGV[2], 1); "
    "  redis.call('set', KEYS[2] .. ':1', 1); "
    "  redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]); "
    "  redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; "
    "if mode == 'read' or (mode == 'write' and "
    "    redis.call('hexists', KEYS[1], ARGV[3]) == 1) then "
    "  local n = redis.call('hincrby', KEYS[1], ARGV[2], 1); "
    "  redis.call('set', KEYS[2] .. ':' .. n, 1); "
    "  redis.call('pexpire', KEYS[2] .. ':' .. n, ARGV[1]); "
    "  local t = redis.call('pttl', KEYS[1]); "
    "  redis.call('pexpire', KEYS[1], math.max(t, ARGV[1])); return nil; end; "
    "return redis.call('pttl', KEYS[1]);";

/* Write release: last hold with only mode left deletes and publishes 1. */
static const char RS_WRITE_ACQUIRE[] =
    "local mode = redis.call('hget', KEYS[1], 'mode'); "
    "if mode == false then "
    "  redis.call('hset', KEYS[1], 'mode', 'write'); "
    "  redis.call('hset', KEYS[1], ARGV[2], 1); "
    "  redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; "
    "return redis.call('pttl', KEYS[1]);";

static const char RS_WRITE_RELEASE[] =
    "if redis.call('hget', KEYS[1], 'mode') ~= 'write' then return nil end; "
    "local n = redis.call('hincrby', KEYS[1], ARGV[1], -1); "
    "if n > 0 then return 0 end; "
    "redis.call('hdel', KEYS[1], ARGV[1]); "
    "if redis.call('hlen', KEYS[1]) == 1 then redis.call('del', KEYS[1]); "
    "redis.call('publish', KEYS[2], '1'); "
    "else redis.call('hset', KEYS[1], 'mode', 'read'); end; return 1;";

#define RS_OWNER "5c0f8a52-2f2e-4a8e-9a57-0d3a8b7e6c11:1"

static redisReply *rs_eval(th_server_t *s, const char *script, const char *k1,
                           const char *k2, const char *a1, const char *a2,
                           const char *a3) {
  redisReply *r = th_redis_cmd(s, "EVAL %s 2 %s %s %s %s %s", script, k1, k2,
                               a1, a2, a3);
  CHECK(r);
  CHECKF(r->type != REDIS_REPLY_ERROR, "script error: %s", r->str);
  return r;
}

static void t_redisson_interop(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_lock_t *r = kind_lock(c, "rw-rs", DLOCK_READ);
  dlock_lock_t *w = kind_lock(c, "rw-rs", DLOCK_WRITE);
  /* Redisson reads; dlock reads along; dlock's writer is refused */
  redisReply *x = rs_eval(s, RS_READ_ACQUIRE, "rw-rs",
                          "{rw-rs}:" RS_OWNER ":rwlock_timeout", "30000",
                          RS_OWNER, RS_OWNER ":write");
  CHECK(x->type == REDIS_REPLY_NIL);
  freeReplyObject(x);
  CHECK_OK(dlock_lock_acquire(r, 0, WD));
  CHECK_OK(dlock_lock_release(r));
  CHECK(it_exists(s, "rw-rs")); /* Redisson's hold keeps it */
  it_async_t a;
  it_async_start(&a, w, 10000, WD, false);
  th_sleep_ms(200);
  CHECK(!atomic_load(&a.done));
  /* Redisson's read release: its count to 0, key gone, publish 0 */
  th_redis_int(s, "HDEL rw-rs %s", RS_OWNER);
  th_redis_int(s, "DEL rw-rs");
  int64_t t_rel = th_now_ms();
  CHECK_INT(th_redis_int(s, "PUBLISH redisson_rwlock:{rw-rs} 0"), >=, 1);
  CHECK(it_async_wait(&a, 3000));
  CHECK_OK(a.rc);
  CHECK_INT(a.t_done - t_rel, <, 2000);
  /* dlock writes: Redisson's read and write are refused; the layout is
   * Redisson's */
  char *mode = th_redis_str(s, "HGET rw-rs mode");
  CHECK(mode);
  CHECK_STR(mode, "write");
  free(mode);
  char wf[160];
  it_owner(c, a.tid, wf, sizeof wf);
  strcat(wf, ":write");
  CHECK_INT(it_hget_int(s, "rw-rs", wf), ==, 1);
  x = rs_eval(s, RS_READ_ACQUIRE, "rw-rs",
              "{rw-rs}:" RS_OWNER ":rwlock_timeout", "30000", RS_OWNER,
              RS_OWNER ":write");
  CHECK(x->type == REDIS_REPLY_INTEGER && x->integer > 0);
  freeReplyObject(x);
  CHECK_OK(it_async_finish(&a));
  /* Redisson writes; dlock's reader waits and wakes on its release */
  x = rs_eval(s, RS_WRITE_ACQUIRE, "rw-rs", "unused", "30000",
              RS_OWNER ":write", "x");
  CHECK(x->type == REDIS_REPLY_NIL);
  freeReplyObject(x);
  it_async_t b;
  it_async_start(&b, r, 10000, WD, true);
  bool ok;
  TH_WAIT_FOR(ok, it_numsub(s, "redisson_rwlock:{rw-rs}") >= 1, 5000);
  CHECK(ok);
  t_rel = th_now_ms();
  x = rs_eval(s, RS_WRITE_RELEASE, "rw-rs", "redisson_rwlock:{rw-rs}",
              RS_OWNER ":write", "x", "y");
  CHECK(x->type == REDIS_REPLY_INTEGER && x->integer == 1);
  freeReplyObject(x);
  CHECK(it_async_wait(&b, 3000));
  CHECK_OK(b.rc);
  CHECK_INT(b.t_done - t_rel, <, 2000);
  it_async_finish(&b);
  dlock_lock_free(r);
  dlock_lock_free(w);
  dlock_client_free(c);
  th_server_stop(s);
}

/* ---------------------------------------------------------------- fenced */

/* Tokens grow with every grant: re-entry, other clients, other processes,
 * and grants by hand-off to queued waiters. */
static void t_fenced_tokens(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *a = it_client(s), *b = it_client(s);
  dlock_lock_t *la = kind_lock(a, "fence", DLOCK_FENCED);
  dlock_lock_t *lb = kind_lock(b, "fence", DLOCK_FENCED);
  int64_t t1 = 0, t2 = 0, t3 = 0;
  CHECK_OK(dlock_lock_acquire_fenced(la, 0, WD, &t1));
  CHECK_OK(dlock_lock_acquire_fenced(la, 0, WD, &t2)); /* re-entry */
  CHECK_INT(t1, >=, 1);
  CHECK_INT(t2, >, t1);
  CHECK_RC(dlock_lock_acquire_fenced(lb, 0, WD, &t3), DLOCK_EBUSY);
  CHECK_INT(t3, ==, 0);
  /* a queued waiter is handed the lock with the next token */
  it_async_t w;
  it_async_start(&w, lb, 10000, WD, false);
  CHECK(it_wait_subscribers(s, "fence", 1, 5000));
  th_sleep_ms(100);
  CHECK_OK(dlock_lock_release(la));
  CHECK_OK(dlock_lock_release(la));
  CHECK(it_async_wait(&w, 3000));
  CHECK_OK(w.rc);
  dlock_lock_state_t *st = NULL;
  CHECK_OK(dlock_lock_state(lb, &st));
  CHECK_STR(st->kind, "fenced");
  printf("tokens: %lld, %lld, then the hand-off's %lld\n", (long long)t1,
         (long long)t2, (long long)st->token);
  CHECK_INT(st->token, >, t2);
  CHECK_INT(st->token, ==, t2 + 1);
  dlock_lock_state_free(st);
  CHECK_OK(it_async_finish(&w));
  /* a fenced handle and a reentrant one exclude each other */
  dlock_lock_t *plain = it_lock(a, "fence");
  CHECK_OK(dlock_lock_acquire(plain, 0, WD));
  CHECK_RC(dlock_lock_acquire_fenced(lb, 0, WD, &t3), DLOCK_EBUSY);
  CHECK_OK(dlock_lock_release(plain));
  /* acquire_fenced on a lock of another kind is refused */
  CHECK_RC(dlock_lock_acquire_fenced(plain, 0, WD, &t3), DLOCK_EINVAL);
  CHECK_RC(dlock_lock_acquire_fenced(lb, 0, WD, NULL), DLOCK_EINVAL);
  dlock_lock_free(plain);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_server_stop(s);
}

/* RFencedLock as REDIS-LAYOUT.md describes it: the RLock acquire plus INCR
 * of redisson_lock_token:{name} on success, {-1, token} or {pttl, -1}. */
static const char RS_FENCED_ACQUIRE[] =
    "if (redis.call('exists', KEYS[1]) == 0) or "
    "(redis.call('hexists', KEYS[1], ARGV[2]) == 1) then "
    "redis.call('hincrby', KEYS[1], ARGV[2], 1); "
    "redis.call('pexpire', KEYS[1], ARGV[1]); "
    "return {-1, redis.call('incr', KEYS[2])}; end; "
    "return {redis.call('pttl', KEYS[1]), -1};";

static int64_t rs_fenced_acquire(th_server_t *s, const char *name) {
  redisReply *r = th_redis_cmd(s, "EVAL %s 2 %s redisson_lock_token:{%s} 30000 %s",
                               RS_FENCED_ACQUIRE, name, name, RS_OWNER);
  CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
  int64_t v = r->element[0]->integer == -1 ? r->element[1]->integer : -1;
  freeReplyObject(r);
  return v;
}

/* dlock and Redisson fenced locks share one token sequence and exclude each
 * other; Redisson's release wakes a dlock waiter, which gets the next
 * token. */
static void t_fenced_redisson(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_lock_t *l = kind_lock(c, "fence-rs", DLOCK_FENCED);
  int64_t t1 = 0, t3 = 0;
  CHECK_OK(dlock_lock_acquire_fenced(l, 0, WD, &t1));
  CHECK_INT(rs_fenced_acquire(s, "fence-rs"), ==, -1); /* held by dlock */
  CHECK_OK(dlock_lock_release(l));
  int64_t t2 = rs_fenced_acquire(s, "fence-rs");
  CHECK_INT(t2, ==, t1 + 1);
  CHECK_RC(dlock_lock_acquire_fenced(l, 0, WD, &t3), DLOCK_EBUSY);
  it_async_t w;
  it_async_start(&w, l, 10000, WD, false);
  CHECK(it_wait_subscribers(s, "fence-rs", 1, 5000));
  /* Redisson's release: DEL, publish 0 on the lock's channel */
  th_redis_int(s, "DEL fence-rs");
  CHECK_INT(th_redis_int(s, "PUBLISH redisson_lock__channel:{fence-rs} 0"), >=,
            1);
  CHECK(it_async_wait(&w, 3000));
  CHECK_OK(w.rc);
  dlock_lock_state_t *st = NULL;
  CHECK_OK(dlock_lock_state(l, &st));
  CHECK_INT(st->token, ==, t2 + 1);
  dlock_lock_state_free(st);
  CHECK_OK(it_async_finish(&w));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

/* Processes: each child takes the lock ROUNDS times and logs its tokens in
 * order; all are distinct, each child's grow, and the last is the count. */
enum { NP = 3, ROUNDS = 20 };
typedef struct fence_arg {
  th_server_t *s;
  int64_t *log;
  int p;
} fence_arg_t;

static int fence_child(void *arg) {
  fence_arg_t *a = arg;
  dlock_client_t *c = it_client(a->s);
  dlock_lock_t *l = kind_lock(c, "fence-p", DLOCK_FENCED);
  int bad = 0;
  for (int i = 0; i < ROUNDS && !bad; i++) {
    int64_t t = 0;
    if (dlock_lock_acquire_fenced(l, 20000, WD, &t) != DLOCK_OK) {
      bad = 1;
      break;
    }
    a->log[a->p * ROUNDS + i] = t;
    bad = dlock_lock_release(l) != DLOCK_OK;
  }
  dlock_lock_free(l);
  dlock_client_free(c);
  return bad;
}

static void t_fenced_tokens_processes(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  int64_t *log = mmap(NULL, sizeof(int64_t) * NP * ROUNDS,
                      PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(log != MAP_FAILED);
  it_child_t ch[NP];
  fence_arg_t args[NP];
  for (int p = 0; p < NP; p++) {
    args[p] = (fence_arg_t){s, log, p};
    it_child_fork(&ch[p], fence_child, &args[p]);
  }
  for (int p = 0; p < NP; p++)
    it_child_go(&ch[p]);
  for (int p = 0; p < NP; p++)
    CHECK_INT(it_child_wait(&ch[p], 60000), ==, 0);
  for (int p = 0; p < NP; p++)
    for (int i = 0; i < ROUNDS; i++) {
      CHECK_INT(log[p * ROUNDS + i], >=, 1);
      if (i)
        CHECK_INT(log[p * ROUNDS + i], >, log[p * ROUNDS + i - 1]);
      for (int q = 0; q < NP * ROUNDS; q++)
        if (q != p * ROUNDS + i)
          CHECK_INT(log[q], !=, log[p * ROUNDS + i]);
    }
  char *tok = th_redis_str(s, "GET redisson_lock_token:{fence-p}");
  CHECK(tok);
  CHECK_INT(strtoll(tok, NULL, 10), ==, NP * ROUNDS);
  free(tok);
  munmap(log, sizeof(int64_t) * NP * ROUNDS);
  th_server_stop(s);
}

/* ----------------------------------------------- writer hand-off queue */

/* dlock's writer queue and reader registry (docs/LAYOUT.md): only used to
 * order the setup of a case. -1 if absent. */
static int64_t rw_zcard(th_server_t *s, const char *key, const char *name) {
  return th_redis_int(s, "ZCARD %s:{%s}", key, name);
}

static bool rw_wait_zcard(th_server_t *s, const char *key, const char *name,
                          int64_t n) {
  bool ok;
  TH_WAIT_FOR(ok, rw_zcard(s, key, name) == n, 5000);
  return ok;
}

/* Three writers queued in a known order get the lock in that order, one
 * release each: the release hands the lock over (with a race, the order
 * would be anyone's and the releaser's own next wait could cut in). */
static void t_write_handoff_order(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  enum { NW = 3 };
  dlock_client_t *a = it_client(s), *c[NW];
  dlock_lock_t *la = kind_lock(a, "rw-order", DLOCK_WRITE), *lw[NW];
  it_async_t w[NW];
  CHECK_OK(dlock_lock_acquire(la, 0, WD));
  for (int i = 0; i < NW; i++) {
    c[i] = it_client(s);
    lw[i] = kind_lock(c[i], "rw-order", DLOCK_WRITE);
    it_async_start(&w[i], lw[i], 20000, WD, false);
    CHECKF(rw_wait_zcard(s, "dlock_lock_rw_queue", "rw-order", i + 1),
           "writer %d did not queue", i);
  }
  int64_t t_rel = th_now_ms();
  CHECK_OK(dlock_lock_release(la));
  for (int i = 0; i < NW; i++) {
    CHECKF(it_async_wait(&w[i], 5000), "writer %d not granted", i);
    CHECK_OK(w[i].rc);
    printf("writer %d got the lock %lld ms after the previous release\n", i,
           (long long)(w[i].t_done - t_rel));
    th_sleep_ms(50);
    for (int j = i + 1; j < NW; j++)
      CHECKF(!atomic_load(&w[j].done), "writer %d got in before writer %d", j,
             i);
    CHECK_INT(rw_zcard(s, "dlock_lock_rw_queue", "rw-order"), ==, NW - 1 - i);
    t_rel = th_now_ms();
    CHECK_OK(it_async_finish(&w[i]));
  }
  CHECK(!it_exists(s, "rw-order"));
  CHECK_INT(it_persistent_keys(s), ==, 0);
  for (int i = 0; i < NW; i++) {
    dlock_lock_free(lw[i]);
    dlock_client_free(c[i]);
  }
  dlock_lock_free(la);
  dlock_client_free(a);
  th_server_stop(s);
}

/* A reader waiting while writers are queued gets in right after the
 * current writer's release (a stream of writer hand-offs cannot starve
 * readers); the writers follow, in order, once it leaves. */
static void t_reader_not_starved(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *a = it_client(s), *b = it_client(s), *c = it_client(s),
                 *d = it_client(s);
  dlock_lock_t *la = kind_lock(a, "rw-starve", DLOCK_WRITE);
  dlock_lock_t *lb = kind_lock(b, "rw-starve", DLOCK_WRITE);
  dlock_lock_t *lc = kind_lock(c, "rw-starve", DLOCK_WRITE);
  dlock_lock_t *ld = kind_lock(d, "rw-starve", DLOCK_READ);
  CHECK_OK(dlock_lock_acquire(la, 0, WD));
  it_async_t wb, wc, rd;
  it_async_start(&wb, lb, 20000, WD, false);
  CHECK(rw_wait_zcard(s, "dlock_lock_rw_queue", "rw-starve", 1));
  it_async_start(&wc, lc, 20000, WD, false);
  CHECK(rw_wait_zcard(s, "dlock_lock_rw_queue", "rw-starve", 2));
  it_async_start(&rd, ld, 20000, WD, false);
  CHECK(rw_wait_zcard(s, "dlock_lock_rw_readers", "rw-starve", 1));
  int64_t t_rel = th_now_ms();
  CHECK_OK(dlock_lock_release(la));
  CHECK(it_async_wait(&rd, 5000));
  CHECK_OK(rd.rc);
  printf("the reader got in %lld ms after the write release\n",
         (long long)(rd.t_done - t_rel));
  th_sleep_ms(100);
  CHECK(!atomic_load(&wb.done));
  CHECK(!atomic_load(&wc.done));
  CHECK_INT(rw_zcard(s, "dlock_lock_rw_readers", "rw-starve"), ==, 0);
  /* the reader's release hands the lock to the first queued writer */
  CHECK_OK(it_async_finish(&rd));
  CHECK(it_async_wait(&wb, 5000));
  CHECK_OK(wb.rc);
  th_sleep_ms(50);
  CHECK(!atomic_load(&wc.done));
  CHECK_OK(it_async_finish(&wb));
  CHECK(it_async_wait(&wc, 5000));
  CHECK_OK(wc.rc);
  CHECK_OK(it_async_finish(&wc));
  CHECK(!it_exists(s, "rw-starve"));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_lock_free(lc);
  dlock_lock_free(ld);
  dlock_client_free(a);
  dlock_client_free(b);
  dlock_client_free(c);
  dlock_client_free(d);
  th_server_stop(s);
}

/* child: waits for the write side forever (until killed) */
typedef struct writer_child_arg {
  th_server_t *s;
  const char *name;
} writer_child_arg;

/* A child process that waits for the write side of arg->name until it is
 * killed. */
static int queued_writer_child(void *arg) {
  writer_child_arg *w = arg;
  dlock_client_t *c = it_client(w->s);
  dlock_lock_t *l = kind_lock(c, w->name, DLOCK_WRITE);
  int rc = dlock_lock_acquire(l, DLOCK_WAIT_FOREVER, WD);
  printf("child writer returned %s\n", dlock_err_name(rc));
  return 4; /* it was meant to be killed while waiting */
}

/* A queued writer process is killed: the release's grant to it reaches
 * nobody (PUBLISH counts no receiver), so it is undone and the writer
 * queued behind it gets the lock at once. */
static void t_killed_writer_skipped(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_child_t ch;
  writer_child_arg wa = {s, "rw-killed"};
  it_child_fork(&ch, queued_writer_child, &wa); /* before any thread */
  dlock_client_t *a = it_client(s), *b = it_client(s);
  dlock_lock_t *la = kind_lock(a, "rw-killed", DLOCK_WRITE);
  dlock_lock_t *lb = kind_lock(b, "rw-killed", DLOCK_WRITE);
  CHECK_OK(dlock_lock_acquire(la, 0, WD));
  it_child_go(&ch);
  CHECK(rw_wait_zcard(s, "dlock_lock_rw_queue", "rw-killed", 1));
  it_async_t w;
  it_async_start(&w, lb, 20000, WD, false);
  CHECK(rw_wait_zcard(s, "dlock_lock_rw_queue", "rw-killed", 2));
  kill(ch.pid, SIGKILL);
  CHECK_INT(it_child_wait(&ch, 5000), ==, -1);
  int64_t t_rel = th_now_ms();
  CHECK_OK(dlock_lock_release(la));
  CHECK(it_async_wait(&w, 5000));
  CHECK_OK(w.rc);
  printf("the writer behind the killed one got the lock %lld ms after the "
         "release\n",
         (long long)(w.t_done - t_rel));
  CHECK_INT(w.t_done - t_rel, <, 3000);
  CHECK_INT(rw_zcard(s, "dlock_lock_rw_queue", "rw-killed"), ==, 0);
  CHECK_OK(it_async_finish(&w));
  CHECK(!it_exists(s, "rw-killed"));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_server_stop(s);
}

/* Three clients on one read-write lock: a reads, b writes, c reads (the
 * cases of readers and a waiting writer). */
typedef struct trio {
  th_server_t *s;
  dlock_client_t *a, *b, *c;
  dlock_lock_t *ra, *wb, *rc;
} trio_t;

static void trio_start(trio_t *t, const char *name) {
  t->s = th_server_start(NULL);
  CHECK(t->s);
  t->a = it_client(t->s);
  t->b = it_client(t->s);
  t->c = it_client(t->s);
  t->ra = kind_lock(t->a, name, DLOCK_READ);
  t->wb = kind_lock(t->b, name, DLOCK_WRITE);
  t->rc = kind_lock(t->c, name, DLOCK_READ);
}

static void trio_stop(trio_t *t) {
  dlock_lock_free(t->ra);
  dlock_lock_free(t->wb);
  dlock_lock_free(t->rc);
  dlock_client_free(t->a);
  dlock_client_free(t->b);
  dlock_client_free(t->c);
  th_server_stop(t->s);
}

/* A new reader does not join the readers who hold the lock while a writer
 * is queued (else a stream of overlapping readers would keep the writer
 * out for good); a holder re-enters freely; the writer gets the lock when
 * the holder leaves, and the reader right after the writer (readers'
 * turn). */
static void t_reader_waits_for_queued_writer(void) {
  trio_t t;
  trio_start(&t, "rw-pref");
  th_server_t *s = t.s;
  dlock_lock_t *ra = t.ra, *wb = t.wb, *rc = t.rc;
  CHECK_OK(dlock_lock_acquire(ra, 0, WD));
  /* with no writer waiting, readers share */
  CHECK_OK(dlock_lock_acquire(rc, 0, WD));
  CHECK_OK(dlock_lock_release(rc));
  it_async_t w, r;
  it_async_start(&w, wb, 20000, WD, false);
  CHECK(rw_wait_zcard(s, "dlock_lock_rw_queue", "rw-pref", 1));
  CHECK_RC(dlock_lock_acquire(rc, 0, WD), DLOCK_EBUSY);
  CHECK_OK(dlock_lock_acquire(ra, 0, WD)); /* re-entry */
  CHECK_OK(dlock_lock_release(ra));
  it_async_start(&r, rc, 20000, WD, false);
  CHECK(rw_wait_zcard(s, "dlock_lock_rw_readers", "rw-pref", 1));
  th_sleep_ms(200);
  CHECKF(!atomic_load(&r.done), "a new reader joined while a writer waited");
  CHECK_OK(dlock_lock_release(ra));
  CHECKF(it_async_wait(&w, 5000), "the writer did not get the lock");
  CHECK_OK(w.rc);
  th_sleep_ms(100);
  CHECK(!atomic_load(&r.done));
  int64_t t_rel = th_now_ms();
  CHECK_OK(it_async_finish(&w));
  CHECKF(it_async_wait(&r, 5000), "the reader did not follow the writer");
  CHECK_OK(r.rc);
  printf("the reader got in %lld ms after the write release\n",
         (long long)(r.t_done - t_rel));
  CHECK_OK(it_async_finish(&r));
  CHECK(!it_exists(s, "rw-pref"));
  trio_stop(&t);
}

/* A downgrade (the writer keeps a read hold and releases its write side)
 * lets the waiting readers join it, though another writer is queued: a
 * readers' turn, as after a write release. */
static void t_downgrade_lets_readers_in(void) {
  trio_t t;
  trio_start(&t, "rw-down");
  th_server_t *s = t.s;
  dlock_lock_t *ra = t.ra, *wb = t.wb, *rc = t.rc;
  dlock_lock_t *wa = kind_lock(t.a, "rw-down", DLOCK_WRITE);
  CHECK_OK(dlock_lock_acquire(wa, 0, WD));
  it_async_t w, r;
  it_async_start(&w, wb, 30000, WD, false);
  CHECK(rw_wait_zcard(s, "dlock_lock_rw_queue", "rw-down", 1));
  it_async_start(&r, rc, 30000, WD, false);
  CHECK(rw_wait_zcard(s, "dlock_lock_rw_readers", "rw-down", 1));
  CHECK_OK(dlock_lock_acquire(ra, 0, WD)); /* downgrade */
  int64_t t_rel = th_now_ms();
  CHECK_OK(dlock_lock_release(wa));
  CHECKF(it_async_wait(&r, 5000), "the reader did not join the downgrade");
  CHECK_OK(r.rc);
  printf("the reader joined %lld ms after the downgrade\n",
         (long long)(r.t_done - t_rel));
  CHECK(!atomic_load(&w.done));
  CHECK_OK(it_async_finish(&r));
  CHECK_OK(dlock_lock_release(ra));
  CHECKF(it_async_wait(&w, 5000), "the queued writer did not follow");
  CHECK_OK(w.rc);
  CHECK_OK(it_async_finish(&w));
  CHECK(!it_exists(s, "rw-down"));
  dlock_lock_free(wa);
  trio_stop(&t);
}

/* A queued writer that gives up lets the readers that held back for it
 * join the holders at once (its leave wakes them). */
static void t_writer_gives_up_readers_join(void) {
  trio_t t;
  trio_start(&t, "rw-gaveup");
  th_server_t *s = t.s;
  dlock_lock_t *ra = t.ra, *wb = t.wb, *rc = t.rc;
  CHECK_OK(dlock_lock_acquire(ra, 0, WD));
  it_async_t w, r;
  it_async_start(&w, wb, 6000, WD, false);
  CHECK(rw_wait_zcard(s, "dlock_lock_rw_queue", "rw-gaveup", 1));
  it_async_start(&r, rc, 30000, WD, false);
  CHECK(rw_wait_zcard(s, "dlock_lock_rw_readers", "rw-gaveup", 1));
  CHECKF(!atomic_load(&w.done), "the writer gave up too soon for the test");
  CHECKF(!atomic_load(&r.done), "a new reader joined while a writer waited");
  CHECKF(it_async_wait(&w, 10000), "the writer did not give up");
  CHECK_RC(w.rc, DLOCK_ETIMEDOUT);
  CHECKF(it_async_wait(&r, 2000),
         "the reader was not let in when the writer left");
  CHECK_OK(r.rc);
  printf("the reader got in %lld ms after the writer gave up\n",
         (long long)(r.t_done - w.t_done));
  it_async_finish(&w);
  CHECK_OK(it_async_finish(&r));
  CHECK_OK(dlock_lock_release(ra));
  CHECK(!it_exists(s, "rw-gaveup"));
  trio_stop(&t);
}

/* Readers do not hold back for a queued writer whose process was killed
 * (its client's grant subscription is gone), though its entry has not
 * expired: a new reader joins at once, and one that was already held back
 * joins within its re-check bound (nothing is published at the kill). */
static void t_reader_ignores_dead_writer(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_child_t ch;
  writer_child_arg wa = {s, "rw-deadw"};
  it_child_fork(&ch, queued_writer_child, &wa); /* before any thread */
  dlock_client_t *a = it_client(s), *c = it_client(s);
  dlock_lock_t *ra = kind_lock(a, "rw-deadw", DLOCK_READ);
  dlock_lock_t *rc = kind_lock(c, "rw-deadw", DLOCK_READ);
  CHECK_OK(dlock_lock_acquire(ra, 0, WD));
  it_child_go(&ch);
  CHECK(rw_wait_zcard(s, "dlock_lock_rw_queue", "rw-deadw", 1));
  CHECK_RC(dlock_lock_acquire(rc, 0, WD), DLOCK_EBUSY);
  dlock_client_t *d = it_client(s);
  dlock_lock_t *rd = kind_lock(d, "rw-deadw", DLOCK_READ);
  it_async_t r;
  it_async_start(&r, rd, 30000, WD, false);
  CHECK(rw_wait_zcard(s, "dlock_lock_rw_readers", "rw-deadw", 1));
  kill(ch.pid, SIGKILL);
  int64_t t_kill = th_now_ms();
  CHECK_INT(it_child_wait(&ch, 5000), ==, -1);
  bool ok; /* the server notices the closed connection */
  TH_WAIT_FOR(ok, dlock_lock_acquire(rc, 0, WD) == DLOCK_OK, 5000);
  CHECKF(ok, "a new reader held back for a killed writer");
  CHECKF(it_async_wait(&r, 5000),
         "a waiting reader still held back for a killed writer");
  CHECK_OK(r.rc);
  printf("the waiting reader got in %lld ms after the kill (re-check bound "
         "1000 ms; its lock's lease: 30 s)\n",
         (long long)(r.t_done - t_kill));
  CHECK_INT(rw_zcard(s, "dlock_lock_rw_queue", "rw-deadw"), ==, 1);
  CHECK_OK(it_async_finish(&r));
  CHECK_OK(dlock_lock_release(rc));
  CHECK_OK(dlock_lock_release(ra));
  dlock_lock_free(ra);
  dlock_lock_free(rc);
  dlock_lock_free(rd);
  dlock_client_free(a);
  dlock_client_free(c);
  dlock_client_free(d);
  th_server_stop(s);
}

/* The write side's hand-off with a PSUBSCRIBE * monitor present (PUBLISH
 * then counts a receiver on every channel): a grant to a killed writer's
 * client is still not left standing. */
static void t_pattern_monitor_killed_writer(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_child_t ch;
  writer_child_arg wa = {s, "rw-mon"};
  it_child_fork(&ch, queued_writer_child, &wa); /* before any thread */
  redisContext *mon = it_pattern_monitor(s);
  dlock_client_t *a = it_client(s);
  dlock_lock_t *la = kind_lock(a, "rw-mon", DLOCK_WRITE);
  CHECK_OK(dlock_lock_acquire(la, 0, WD));
  it_child_go(&ch);
  CHECK(rw_wait_zcard(s, "dlock_lock_rw_queue", "rw-mon", 1));
  kill(ch.pid, SIGKILL);
  CHECK_INT(it_child_wait(&ch, 5000), ==, -1);
  bool ok; /* the server has dropped the killed client's subscriptions */
  TH_WAIT_FOR(ok, it_channels(s, "dlock_lock_rw_grant:*") == 0, 5000);
  CHECK(ok);
  CHECK_OK(dlock_lock_release(la));
  CHECKF(!it_exists(s, "rw-mon"), "the lock went to a killed writer");
  CHECK_OK(dlock_lock_acquire(la, 0, WD));
  CHECK_OK(dlock_lock_release(la));
  dlock_lock_free(la);
  dlock_client_free(a);
  redisFree(mon);
  th_server_stop(s);
}

/* The read-write lock refuses a key that holds another kind of lock (it
 * would otherwise take a reentrant lock's hash for a free read-write lock),
 * and a string key. */
static void t_other_kind_refused(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_lock_t *plain = it_lock(c, "rw-kind");
  dlock_lock_t *r = kind_lock(c, "rw-kind", DLOCK_READ);
  dlock_lock_t *w = kind_lock(c, "rw-kind", DLOCK_WRITE);
  CHECK_OK(dlock_lock_acquire(plain, 0, WD));
  CHECK_RC(dlock_lock_acquire(r, 0, WD), DLOCK_EWRONGTYPE);
  CHECK(strstr(dlock_last_error(), "another kind") != NULL);
  CHECK_RC(dlock_lock_acquire(w, 5000, WD), DLOCK_EWRONGTYPE);
  CHECK(strstr(dlock_last_error(), "another kind") != NULL);
  CHECK_OK(dlock_lock_release(plain)); /* untouched */
  CHECK(!it_exists(s, "rw-kind"));
  CHECK_INT(th_redis_int(s, "SET rw-kind x") == INT64_MIN, ==, 1);
  CHECK_RC(dlock_lock_acquire(r, 0, WD), DLOCK_EWRONGTYPE);
  CHECK(strstr(dlock_last_error(), "another type") != NULL);
  dlock_lock_free(plain);
  dlock_lock_free(r);
  dlock_lock_free(w);
  dlock_client_free(c);
  th_server_stop(s);
}

static const check_case_t cases[] = {
    {"other_kind_refused", t_other_kind_refused},
    {"fenced_tokens_processes", t_fenced_tokens_processes},
    {"fenced_redisson", t_fenced_redisson},
    {"readers_overlap", t_readers_overlap},
    {"writer_excludes", t_writer_excludes},
    {"downgrade", t_downgrade},
    {"upgrade_refused", t_upgrade_refused},
    {"reader_expiry_independent", t_reader_expiry_independent},
    {"read_release_retry_once", t_read_release_retry_once},
    {"expired_read_hold_keeps_others", t_expired_read_hold_keeps_others},
    {"wakeups", t_wakeups},
    {"redisson_interop", t_redisson_interop},
    {"write_handoff_order", t_write_handoff_order},
    {"reader_not_starved", t_reader_not_starved},
    {"killed_writer_skipped", t_killed_writer_skipped},
    {"fenced_tokens", t_fenced_tokens},
    {"reader_waits_for_queued_writer", t_reader_waits_for_queued_writer},
    {"writer_gives_up_readers_join", t_writer_gives_up_readers_join},
    {"downgrade_lets_readers_in", t_downgrade_lets_readers_in},
    {"reader_ignores_dead_writer", t_reader_ignores_dead_writer},
    {"pattern_monitor_killed_writer", t_pattern_monitor_killed_writer},
};

CHECK_MAIN(cases)
