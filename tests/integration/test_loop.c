/*
 * test_loop.c - the client's background loop: what a user observes of its
 * scheduling (when a lost lock is reported, how much CPU a release costs,
 * when an unresolved wait is settled) and of what it does after a grant
 * (how a grant by message is dated, a grant the client could not record).
 *
 * Design note: each case builds the situation in which one duty of the
 * background thread is delayed or done wrong, with a real redis-server
 * (SIGSTOP for an outage: the server's clock runs on, and a lease it gave
 * ends at its time however long it stays stopped), the harness's fault
 * proxy (requests dropped, replies still flowing) or the fault suite's
 * delaying relay (tests/fault/fnet.h). Bounds are the library's own
 * promises (a lost lock is reported before the server could give it to
 * anyone else: by the last confirmed lease + watchdog), measured from a
 * moment the test knows to be no earlier than the server's, so that a
 * correct implementation keeps a margin of over a second. Callback and
 * return times are taken on the monotonic clock (th_now_ms).
 *
 * This executable links the static library: grant_survives_oom reaches the
 * test-only allocation hook (src/core/alloc.h), which the shared library
 * does not export.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "itest.h"

#include "fnet.h"

#include <sys/resource.h>

#define WD DLOCK_LEASE_WATCHDOG

/* the test-only hook of src/core/alloc.h (hidden; static library only) */
extern bool (*_Atomic dlock__alloc_fail_hook)(size_t bytes);

static int64_t queue_len(th_server_t *s, const char *name) {
  return th_redis_int(s, "ZCARD dlock_lock_queue:{%s}", name);
}

/* ------------------------------------------------------------ case 1 */

/* A holder and a dozen waits of the same client that end during an
 * outage: their leaves fail, so they become unresolved waits, which the
 * background thread retries (a leave each, bounded by the command timeout)
 * while the holder's lease runs out. The holder must still be told by the
 * end of its lease on the server. */
#define R_WAITERS 16
#define R_WATCHDOG_MS 6000
#define R_COMMAND_MS 500

static int count_queued(th_server_t *s, int n) {
  int queued = 0;
  for (int i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "res-w-%d", i);
    queued += queue_len(s, name) == 1;
  }
  return queued;
}

static void t_lost_reported_by_deadline_while_resolving(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_lost_t lost;
  it_lost_init(&lost);
  it_client_cfg_t cfg = {.connect_ms = R_COMMAND_MS,
                         .command_ms = R_COMMAND_MS,
                         .watchdog_ms = R_WATCHDOG_MS,
                         .lost = it_lost_cb,
                         .lost_ud = &lost};
  dlock_client_t *a = it_client_cfg(s, &cfg), *b = it_client(s);
  dlock_lock_t *hold = it_lock(a, "res-hold");
  dlock_lock_t *wa[R_WAITERS], *wb[R_WAITERS];
  for (int i = 0; i < R_WAITERS; i++) {
    char name[32];
    snprintf(name, sizeof name, "res-w-%d", i);
    wa[i] = it_lock(a, name);
    wb[i] = it_lock(b, name);
    CHECK_OK(dlock_lock_acquire(wb[i], 0, 60000));
  }
  CHECK_OK(dlock_lock_acquire(hold, 0, WD));
  /* just after a renewal, so that the outage starts well into a renewal
   * interval (the correct report then comes well before the bound) */
  CHECKF(it_wait_renewed(s, "res-hold", R_WATCHDOG_MS),
         "no renewal of the holder's lease");
  int64_t t_r = th_now_ms();
  /* the waits end 300 ms into the outage */
  it_async_t w[R_WAITERS];
  for (int i = 0; i < R_WAITERS; i++)
    it_async_start(&w[i], wa[i], 1800, WD, true);
  int queued = 0;
  bool ok;
  TH_WAIT_FOR(ok, (queued = count_queued(s, R_WAITERS)) == R_WAITERS, 1400);
  (void)ok; /* the waits end with an error either way: queued or not */
  printf("%d of %d waits queued %lld ms after the renewal\n", queued,
         R_WAITERS, (long long)(th_now_ms() - t_r));
  int64_t now = th_now_ms();
  if (now < t_r + 1500)
    th_sleep_ms(t_r + 1500 - now); /* the scenario: the outage starts here */
  CHECK(th_server_pause(s) == 0);
  int64_t t_stop = th_now_ms();
  /* the server's lease ends at the latest t_stop + watchdog: no renewal
   * can have been confirmed after the server stopped */
  int64_t bound = t_stop + R_WATCHDOG_MS;
  bool got = it_lost_wait(&lost, 1, R_WATCHDOG_MS + R_WAITERS * 2 * R_COMMAND_MS +
                                        10000);
  int64_t at = lost.at_ms;
  int failed = 0;
  for (int i = 0; i < R_WAITERS; i++) {
    if (!it_async_wait(&w[i], 10000))
      continue;
    failed += w[i].rc != DLOCK_OK;
  }
  printf("%d waits ended with an error during the outage\n", failed);
  CHECK(th_server_resume(s) == 0);
  CHECKF(got, "no lost callback within %d ms of the outage",
         R_WATCHDOG_MS + R_WAITERS * 2 * R_COMMAND_MS + 10000);
  printf("lost callback %lld ms after the server stopped (bound: %d ms, the "
         "watchdog)\n",
         (long long)(at - t_stop), R_WATCHDOG_MS);
  CHECK_INT(lost.reason, ==, DLOCK_LOST_UNREACHABLE);
  CHECKF(at <= bound,
         "the holder was told %lld ms after the server stopped, %lld ms past "
         "the end of its lease there (watchdog %d ms)",
         (long long)(at - t_stop), (long long)(at - bound), R_WATCHDOG_MS);
  for (int i = 0; i < R_WAITERS; i++) {
    it_async_finish(&w[i]);
    dlock_lock_free(wa[i]);
    dlock_lock_free(wb[i]);
  }
  dlock_lock_free(hold);
  dlock_client_free(a);
  dlock_client_free(b);
  th_server_stop(s);
}

/* ------------------------------------------------------------ case 2 */

/* A release that waits for its reply (the server stopped) while a renewal
 * of the same hold falls due: the background thread must sleep, not spin
 * until the release returns. */
#define S_WATCHDOG_MS 1500
#define S_COMMAND_MS 1500

static int64_t cpu_ms(void) {
  struct rusage ru;
  CHECK(getrusage(RUSAGE_SELF, &ru) == 0);
  return (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
}

static void t_release_no_spin(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_client_cfg_t cfg = {.connect_ms = S_COMMAND_MS,
                         .command_ms = S_COMMAND_MS,
                         .watchdog_ms = S_WATCHDOG_MS};
  dlock_client_t *c = it_client_cfg(s, &cfg);
  dlock_lock_t *l = it_lock(c, "spin");
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  int64_t t_acq = th_now_ms();
  CHECK(th_server_pause(s) == 0);
  int64_t cpu0 = cpu_ms(), t0 = th_now_ms();
  int rc = dlock_lock_release(l);
  int64_t t1 = th_now_ms(), cpu1 = cpu_ms();
  CHECK(th_server_resume(s) == 0);
  int64_t elapsed = t1 - t0, cpu = cpu1 - cpu0;
  printf("release: %s after %lld ms (a renewal was due %lld ms after the "
         "acquire); process CPU time during it: %lld ms (%.0f%%)\n",
         dlock_err_name(rc), (long long)elapsed,
         (long long)(S_WATCHDOG_MS / 3), (long long)cpu,
         elapsed > 0 ? 100.0 * (double)cpu / (double)elapsed : 0.0);
  CHECK(rc != DLOCK_OK);
  /* the renewal fell due during the release */
  CHECK_INT(t1, >, t_acq + S_WATCHDOG_MS / 3 + 200);
  CHECKF(cpu * 10 < elapsed * 3,
         "the process used %lld ms of CPU during a %lld ms release that only "
         "waited for the network",
         (long long)cpu, (long long)elapsed);
  dlock_lock_release(l); /* whatever became of it; not the point here */
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

/* ------------------------------------------------------------ case 3 */

/* A waiter whose connections all go through a relay that holds every
 * chunk D ms each way is handed the lock by a release; the grant message
 * reaches it D ms after the server made it the owner. The server then
 * stops: the new holder must be told by the end of the lease the server
 * gave it, which began no later than the release's reply. */
#define G_DELAY_MS 1200
#define G_WATCHDOG_MS 3000

static void t_grant_dated_from_attempt(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  fnet_relay_t *relay = fnet_relay_start(s->port, G_DELAY_MS, 0, 0);
  CHECK(relay);
  char url[64];
  snprintf(url, sizeof url, "redis://127.0.0.1:%d", fnet_relay_port(relay));
  it_lost_t lost;
  it_lost_init(&lost);
  it_client_cfg_t cfg = {.connect_ms = 4 * G_DELAY_MS + 2000,
                         .command_ms = 4 * G_DELAY_MS + 2000,
                         .watchdog_ms = G_WATCHDOG_MS,
                         .lost = it_lost_cb,
                         .lost_ud = &lost,
                         .url = url};
  dlock_client_t *far = it_client_cfg(s, &cfg), *near = it_client(s);
  dlock_lock_t *lf = it_lock(far, "dated"), *ln = it_lock(near, "dated");
  CHECK_OK(dlock_lock_acquire(ln, 0, 60000));
  it_async_t w;
  it_async_start(&w, lf, 60000, WD, false);
  char grant[256];
  snprintf(grant, sizeof grant, "dlock_lock_grant:{dated}:%s",
           dlock_client_id(far));
  bool ok;
  TH_WAIT_FOR(ok, queue_len(s, "dated") == 1 && it_numsub(s, grant) >= 1,
              8 * G_DELAY_MS + 10000);
  CHECKF(ok, "the waiter was not queued and subscribed to its grant channel");
  th_sleep_ms(500); /* the scenario: the holder keeps the lock a while */
  int64_t t_rel0 = th_now_ms();
  CHECK_OK(dlock_lock_release(ln));
  int64_t t_rel1 = th_now_ms();
  /* one more round trip, so that the server has written out the grant
   * message too (it writes to its clients after the script, in its event
   * loop; the release's reply may go out first) */
  CHECK(it_exists(s, "dated"));
  CHECK(th_server_pause(s) == 0);
  /* the server made the waiter the owner before the release's reply: its
   * lease there ends by t_rel1 + watchdog */
  int64_t bound = t_rel1 + G_WATCHDOG_MS;
  bool granted = it_async_wait(&w, 4 * G_DELAY_MS + 5000);
  bool got = it_lost_wait(&lost, 1, G_DELAY_MS + G_WATCHDOG_MS + 10000);
  CHECK(th_server_resume(s) == 0);
  CHECKF(granted, "the waiter did not return after the hand-off");
  printf("release took %lld ms; the waiter returned %s %lld ms after it\n",
         (long long)(t_rel1 - t_rel0), dlock_err_name(w.rc),
         (long long)(w.t_done - t_rel1));
  CHECK_OK(w.rc);
  CHECKF(got, "no lost callback");
  printf("lost callback %lld ms after the release returned (bound: %d ms, "
         "the watchdog)\n",
         (long long)(lost.at_ms - t_rel1), G_WATCHDOG_MS);
  CHECKF(lost.at_ms <= bound,
         "the new holder was told %lld ms after the hand-off, %lld ms past the "
         "end of the lease the server gave it (watchdog %d ms)",
         (long long)(lost.at_ms - t_rel1), (long long)(lost.at_ms - bound),
         G_WATCHDOG_MS);
  it_async_finish(&w);
  dlock_lock_free(lf);
  dlock_lock_free(ln);
  dlock_client_free(far);
  dlock_client_free(near);
  fnet_relay_stop(relay);
  th_server_stop(s);
}

/* ------------------------------------------------------------ case 4 */

/* A wait ends while the client's requests do not get through (its leave
 * fails: an unresolved wait); the same thread's next acquire tries to
 * resolve it, and fails too. Meanwhile a release hands the lock to that
 * ended wait. Once requests flow again, the background thread must settle
 * it (leave, find the grant, release it) so that the next waiter, another
 * thread of the same client, gets the lock. */
#define U_COMMAND_MS 400

typedef struct own_retry {
  dlock_lock_t *l;
  uint64_t tid;
  atomic_int step; /* 1: the wait returned; 2: the retry returned */
  int rc1, rc2;
  int64_t t0, t1, t2;
  char err1[512];
} own_retry_t;

static void *own_retry_main(void *arg) {
  own_retry_t *o = arg;
  o->tid = dlock_thread_id();
  o->t0 = th_now_ms();
  o->rc1 = dlock_lock_acquire(o->l, 1500, 30000);
  o->t1 = th_now_ms();
  snprintf(o->err1, sizeof o->err1, "%s", dlock_last_error());
  atomic_store(&o->step, 1);
  o->rc2 = dlock_lock_acquire(o->l, 0, 30000);
  o->t2 = th_now_ms();
  atomic_store(&o->step, 2);
  return NULL;
}

static void t_unresolved_due_wakes_loop(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  th_proxy_t *p = th_proxy_start(s->port);
  CHECK(p);
  it_client_cfg_t cfg = {.connect_ms = U_COMMAND_MS,
                         .command_ms = U_COMMAND_MS,
                         .url = th_proxy_url(p)};
  dlock_client_t *c = it_client_cfg(s, &cfg), *b = it_client(s);
  dlock_lock_t *l1 = it_lock(c, "wake"), *l2 = it_lock(c, "wake"),
               *lb = it_lock(b, "wake");
  CHECK_OK(dlock_lock_acquire(lb, 0, 60000));
  own_retry_t o;
  memset(&o, 0, sizeof o);
  o.l = l1;
  pthread_t th;
  CHECK(pthread_create(&th, NULL, own_retry_main, &o) == 0);
  bool ok;
  char grant[256];
  snprintf(grant, sizeof grant, "dlock_lock_grant:{wake}:%s",
           dlock_client_id(c));
  TH_WAIT_FOR(ok, queue_len(s, "wake") == 1 && it_numsub(s, grant) >= 1, 1000);
  CHECKF(ok, "the first waiter was not queued");
  /* the next waiter, queued behind it; its wait keeps the lock's channels
   * in use (no linger timer) */
  it_async_t w2;
  it_async_start(&w2, l2, 60000, 30000, false);
  TH_WAIT_FOR(ok, queue_len(s, "wake") == 2, 1500);
  CHECKF(ok, "the second waiter was not queued");
  CHECKF(atomic_load(&o.step) == 0, "the first wait ended too early");
  th_proxy_drop_requests(p, true);
  TH_WAIT_FOR(ok, atomic_load(&o.step) >= 1, 1500 + 3 * U_COMMAND_MS + 2000);
  CHECKF(ok, "the first wait did not end");
  printf("first wait: %s after %lld ms (\"%s\")\n", dlock_err_name(o.rc1),
         (long long)(o.t1 - o.t0), o.err1);
  CHECK(o.rc1 != DLOCK_OK);
  th_sleep_ms(150); /* the scenario: its retry's leave is on its way */
  CHECK_OK(dlock_lock_release(lb));
  char owner[128];
  it_owner(c, o.tid, owner, sizeof owner);
  int64_t handed = it_hget_int(s, "wake", owner);
  printf("the release handed the lock to the wait that ended: %s (retry "
         "still running: %s)\n",
         handed == 1 ? "yes" : "no", atomic_load(&o.step) == 1 ? "yes" : "no");
  CHECKF(handed == 1, "scenario not reached: the release did not hand the "
                      "lock to the ended wait");
  TH_WAIT_FOR(ok, atomic_load(&o.step) == 2, 3 * U_COMMAND_MS + 2000);
  CHECKF(ok, "the retry did not return");
  printf("retry: %s after %lld ms\n", dlock_err_name(o.rc2),
         (long long)(o.t2 - o.t1));
  CHECK(o.rc2 != DLOCK_OK);
  th_proxy_drop_requests(p, false);
  int64_t t_heal = th_now_ms();
  bool got = it_async_wait(&w2, 5000);
  int64_t pttl = th_redis_int(s, "PTTL wake");
  int64_t still = it_hget_int(s, "wake", owner);
  if (got)
    printf("next waiter: %s %lld ms after requests flowed again\n",
           dlock_err_name(w2.rc), (long long)(w2.t_done - t_heal));
  CHECKF(got,
         "the unresolved wait was not settled within 5 s of requests flowing "
         "again: the lock is still with the wait that ended (%s, PTTL %lld "
         "ms) and the next waiter waits",
         still == 1 ? "yes" : "no", (long long)pttl);
  CHECK_OK(w2.rc);
  CHECK_OK(it_async_finish(&w2));
  pthread_join(th, NULL);
  dlock_lock_free(l1);
  dlock_lock_free(l2);
  dlock_lock_free(lb);
  dlock_client_free(c);
  dlock_client_free(b);
  th_proxy_stop(p);
  th_server_stop(s);
}

/* ------------------------------------------------------------ case 5 */

/* The k-th allocation made by the acquiring thread fails. Whatever the
 * acquire then returns must match the server: an error leaves the lock
 * free (no hold nobody renews or releases), success holds it. */
static pthread_t oom_thread;
static atomic_bool oom_armed;
static atomic_int oom_left;
static atomic_bool oom_fired;

static bool oom_hook(size_t bytes) {
  (void)bytes;
  if (!atomic_load(&oom_armed) || !pthread_equal(pthread_self(), oom_thread))
    return false;
  if (atomic_fetch_sub(&oom_left, 1) != 1)
    return false;
  atomic_store(&oom_armed, false);
  atomic_store(&oom_fired, true);
  return true;
}

static void oom_sweep(th_server_t *s, dlock_client_t *c, const char *prefix,
                      int64_t wait_ms) {
  int k;
  for (k = 1; k <= 300; k++) {
    char name[64];
    snprintf(name, sizeof name, "%s-%d", prefix, k);
    dlock_lock_t *l = it_lock(c, name);
    oom_thread = pthread_self();
    atomic_store(&oom_fired, false);
    atomic_store(&oom_left, k);
    atomic_store(&oom_armed, true);
    int rc = dlock_lock_acquire(l, wait_ms, WD);
    atomic_store(&oom_armed, false);
    char err[512];
    snprintf(err, sizeof err, "%s", dlock_last_error());
    bool fired = atomic_load(&oom_fired);
    if (rc == DLOCK_OK) {
      CHECKF(it_exists(s, name), "%s: acquire returned 0 with allocation %d "
                                 "failing, but the key is absent", name, k);
      CHECK_OK(dlock_lock_release(l));
      CHECK(!it_exists(s, name));
    } else {
      bool gone;
      TH_WAIT_FOR(gone, !it_exists(s, name), 2000);
      char owner[128];
      it_owner(c, dlock_thread_id(), owner, sizeof owner);
      CHECKF(gone,
             "%s: allocation %d of the acquire failed, the acquire returned "
             "%s (\"%s\"), yet the server holds the lock for it (count "
             "%lld, PTTL %lld ms) and nobody renews or releases it",
             name, k, dlock_err_name(rc), err,
             (long long)it_hget_int(s, name, owner),
             (long long)th_redis_int(s, "PTTL %s", name));
    }
    dlock_lock_free(l);
    if (!fired)
      break; /* fewer than k allocations: every one has been failed */
  }
  printf("%s: every one of %d allocations failed in turn, acquire and "
         "server agreed\n",
         prefix, k - 1);
  CHECK_INT(k, >, 1);
  CHECK_INT(k, <=, 300);
}

static void t_grant_survives_oom(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  /* a first acquire outside the sweep: scripts loaded, a connection made */
  dlock_lock_t *w = it_lock(c, "oom-warm");
  CHECK_OK(dlock_lock_acquire(w, 0, WD));
  CHECK_OK(dlock_lock_release(w));
  dlock_lock_free(w);
  atomic_store(&dlock__alloc_fail_hook, oom_hook);
  oom_sweep(s, c, "oom-try", 0);
  oom_sweep(s, c, "oom-wait", 2000);
  atomic_store(&dlock__alloc_fail_hook, NULL);
  CHECK_INT(it_lock_keys(s), ==, 0);
  dlock_client_free(c);
  th_server_stop(s);
}

/* ------------------------------------------------------------ case 6 */

/* A grant by message long after the waiter's last attempt: the holder has
 * a fixed 5 s lease (so the waiter, bounded by it, sleeps ~5 s between
 * attempts) and releases after 2 s; the waiter's own lease is the 1 s
 * watchdog. Its grant must count from when the server made it, not from
 * that old attempt: it is held like any other grant (no lost callback
 * while it is renewed), and released with DLOCK_OK. */
static void t_late_grant_not_lost(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_lost_t lost;
  it_lost_init(&lost);
  it_client_cfg_t cfg = {
      .watchdog_ms = 1000, .lost = it_lost_cb, .lost_ud = &lost};
  dlock_client_t *h = it_client(s), *w = it_client_cfg(s, &cfg);
  dlock_lock_t *lh = it_lock(h, "late-grant"), *lw = it_lock(w, "late-grant");
  CHECK_OK(dlock_lock_acquire(lh, 0, 5000));
  it_async_t a;
  it_async_start(&a, lw, 20000, WD, false);
  bool queued;
  TH_WAIT_FOR(queued, queue_len(s, "late-grant") == 1, 3000);
  CHECKF(queued, "the waiter did not queue");
  /* the scenario: the waiter's last attempt is about 2 s old when the
   * holder releases (its next one is due at the holder's lease, 5 s) */
  struct timespec nap = {2, 0};
  nanosleep(&nap, NULL);
  int64_t released = th_now_ms();
  CHECK_OK(dlock_lock_release(lh));
  CHECK(it_async_wait(&a, 5000));
  CHECK_OK(a.rc);
  printf("granted %lld ms after the release\n",
         (long long)(a.t_done - released));
  /* held for three watchdog leases: renewed, never reported lost */
  bool early = it_lost_wait(&lost, 1, 3000);
  printf("lost callbacks while held: %d\n", it_lost_count(&lost));
  CHECKF(!early, "a grant by message was reported lost %lld ms after the "
                 "release",
         (long long)(lost.at_ms - released));
  CHECK_INT(it_async_finish(&a), ==, DLOCK_OK);
  dlock_lock_free(lh);
  dlock_lock_free(lw);
  dlock_client_free(w);
  dlock_client_free(h);
  th_server_stop(s);
}

static const check_case_t cases[] = {
    {"lost_reported_by_deadline_while_resolving",
     t_lost_reported_by_deadline_while_resolving},
    {"release_no_spin", t_release_no_spin},
    {"grant_dated_from_attempt", t_grant_dated_from_attempt},
    {"unresolved_due_wakes_loop", t_unresolved_due_wakes_loop},
    {"grant_survives_oom", t_grant_survives_oom},
    {"late_grant_not_lost", t_late_grant_not_lost},
};

CHECK_MAIN(cases)
