/*
 * test_wakeup.c - waiters are woken by the release message, not by polling.
 *
 * Design note: the holder uses the default 30 s watchdog lease, so a waiter
 * that polled on the holder's PTTL would need ~30 s; every case asserts the
 * waiter got the lock well under that (2 s) after the release. That a waiter
 * is waiting is observed on the server (PUBSUB NUMSUB of the lock's channel),
 * not guessed with a sleep. The pub/sub cases kill the waiter's subscriber
 * connection (CLIENT KILL TYPE pubsub) before the release. Waiters are
 * background threads (itest.h's it_async).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "itest.h"

#define WD DLOCK_LEASE_WATCHDOG
#define PROMPT_MS 2000

/* Waits PROMPT_MS for the waiter; if it was not woken, prints what the
 * server shows and how long the waiter really took (up to 35 s, past a
 * 30 s PTTL poll), then fails. */
static void expect_woken(th_server_t *s, it_async_t *w, const char *name,
                         int64_t t_rel, const char *what) {
  if (it_async_wait(w, PROMPT_MS))
    return;
  char ch[256];
  it_channel(name, ch, sizeof ch);
  char *list = th_redis_str(s, "CLIENT LIST TYPE pubsub");
  fprintf(stderr,
          "%s not woken within %d ms; subscribers of %s: %lld; pub/sub "
          "connections:\n%s",
          what, PROMPT_MS, ch, (long long)it_numsub(s, ch),
          list ? list : "(none)\n");
  free(list);
  bool late = it_async_wait(w, 35000);
  fprintf(stderr, "%s: %s\n", what,
          late ? "acquired late" : "still waiting after 35 s");
  if (late)
    fprintf(stderr, "  rc %s, %lld ms after the release\n",
            dlock_err_name(w->rc), (long long)(w->t_done - t_rel));
  CHECKF(false, "%s not woken within %d ms of the release", what, PROMPT_MS);
}

static void t_pubsub_wake(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *a = it_client(s), *b = it_client(s);
  dlock_lock_t *la = it_lock(a, "wake"), *lb = it_lock(b, "wake");
  CHECK_OK(dlock_lock_acquire(la, 0, WD));
  CHECK_INT(th_redis_int(s, "PTTL wake"), >, 20000);
  it_async_t w;
  it_async_start(&w, lb, DLOCK_WAIT_FOREVER, WD, false);
  CHECK(it_wait_subscribers(s, "wake", 1, 5000));
  CHECK(!atomic_load(&w.done));
  int64_t t_rel = th_now_ms();
  CHECK_OK(dlock_lock_release(la));
  CHECKF(it_async_wait(&w, PROMPT_MS), "waiter not woken within %d ms",
         PROMPT_MS);
  CHECK_OK(w.rc);
  printf("waiter acquired %lld ms after release\n",
         (long long)(w.t_done - t_rel));
  char wo[128];
  it_owner(b, w.tid, wo, sizeof wo);
  CHECK_INT(it_hget_int(s, "wake", wo), ==, 1);
  CHECK_OK(it_async_finish(&w));
  CHECK(!it_exists(s, "wake"));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_server_stop(s);
}

static void t_same_client_wake(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = it_client(s);
  dlock_lock_t *l = it_lock(c, "samewake");
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  it_async_t w;
  it_async_start(&w, l, DLOCK_WAIT_FOREVER, WD, false);
  CHECK(it_wait_subscribers(s, "samewake", 1, 5000));
  CHECK(!atomic_load(&w.done));
  int64_t t_rel = th_now_ms();
  CHECK_OK(dlock_lock_release(l));
  CHECKF(it_async_wait(&w, PROMPT_MS), "waiter not woken within %d ms",
         PROMPT_MS);
  CHECK_OK(w.rc);
  printf("waiter acquired %lld ms after release\n",
         (long long)(w.t_done - t_rel));
  CHECK_OK(it_async_finish(&w));
  CHECK(!it_exists(s, "samewake"));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

/* Four waiters in two clients; each releases at once after acquiring, so
 * each release must wake the next one. */
static void t_many_waiters(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *a = it_client(s), *b = it_client(s), *h = it_client(s);
  dlock_lock_t *la = it_lock(a, "many"), *lb = it_lock(b, "many"),
               *lh = it_lock(h, "many");
  CHECK_OK(dlock_lock_acquire(lh, 0, WD));
  it_async_t w[4];
  for (int i = 0; i < 4; i++)
    it_async_start(&w[i], i % 2 ? lb : la, 20000, WD, true);
  CHECK(it_wait_subscribers(s, "many", 2, 5000));
  int64_t t_rel = th_now_ms();
  CHECK_OK(dlock_lock_release(lh));
  for (int i = 0; i < 4; i++) {
    CHECKF(it_async_wait(&w[i], 2 * PROMPT_MS), "waiter %d not woken", i);
    CHECK_OK(w[i].rc);
  }
  int64_t last = 0;
  for (int i = 0; i < 4; i++) {
    CHECK_OK(it_async_finish(&w[i]));
    if (w[i].t_done - t_rel > last)
      last = w[i].t_done - t_rel;
  }
  printf("all 4 waiters served within %lld ms of the first release\n",
         (long long)last);
  CHECK(!it_exists(s, "many"));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_lock_free(lh);
  dlock_client_free(a);
  dlock_client_free(b);
  dlock_client_free(h);
  th_server_stop(s);
}

/* ids of the current pub/sub connections (at most max); returns the count */
static int pubsub_ids(th_server_t *s, long long *ids, int max) {
  char *list = th_redis_str(s, "CLIENT LIST TYPE pubsub");
  CHECK(list);
  int n = 0;
  for (char *p = list; n < max && (p = strstr(p, "id=")) != NULL; p += 3)
    if (p == list || p[-1] == '\n')
      ids[n++] = strtoll(p + 3, NULL, 10);
  free(list);
  return n;
}

/* true when a pub/sub connection not among old[0..nold) exists */
static bool new_pubsub_conn(th_server_t *s, const long long *old, int nold) {
  long long now[64];
  int n = pubsub_ids(s, now, 64);
  for (int i = 0; i < n; i++) {
    bool seen = false;
    for (int j = 0; j < nold; j++)
      seen = seen || now[i] == old[j];
    if (!seen)
      return true;
  }
  return false;
}

static void killed_case(bool wait_resubscribe) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *a = it_client(s), *b = it_client(s);
  dlock_lock_t *la = it_lock(a, "killed"), *lb = it_lock(b, "killed");
  CHECK_OK(dlock_lock_acquire(la, 0, WD));
  it_async_t w;
  it_async_start(&w, lb, DLOCK_WAIT_FOREVER, WD, false);
  CHECK(it_wait_subscribers(s, "killed", 1, 5000));
  long long old[64];
  int nold = pubsub_ids(s, old, 64);
  int64_t killed = th_redis_int(s, "CLIENT KILL TYPE pubsub");
  CHECK_INT(killed, >=, 1);
  if (wait_resubscribe) {
    bool ok;
    TH_WAIT_FOR(ok,
                new_pubsub_conn(s, old, nold) &&
                    it_wait_subscribers(s, "killed", 1, 0),
                5000);
    CHECKF(ok, "the waiter's client did not subscribe again within 5 s");
  }
  CHECK(!atomic_load(&w.done));
  int64_t t_rel = th_now_ms();
  CHECK_OK(dlock_lock_release(la));
  expect_woken(s, &w, "killed", t_rel,
               "waiter whose pub/sub connection was killed");
  CHECK_OK(w.rc);
  printf("waiter acquired %lld ms after release\n",
         (long long)(w.t_done - t_rel));
  CHECK_OK(it_async_finish(&w));
  CHECK(!it_exists(s, "killed"));
  /* the client's pub/sub works again: a second wait is woken too */
  CHECK_OK(dlock_lock_acquire(la, 0, WD));
  it_async_start(&w, lb, DLOCK_WAIT_FOREVER, WD, false);
  CHECK(it_wait_subscribers(s, "killed", 1, 5000));
  t_rel = th_now_ms();
  CHECK_OK(dlock_lock_release(la));
  expect_woken(s, &w, "killed", t_rel, "second waiter (after the kill)");
  CHECK_OK(w.rc);
  CHECK_OK(it_async_finish(&w));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_server_stop(s);
}

static void t_pubsub_killed_release_now(void) { killed_case(false); }

static void t_pubsub_killed_release_after_resubscribe(void) {
  killed_case(true);
}

static const check_case_t cases[] = {
    {"pubsub_wake", t_pubsub_wake},
    {"same_client_wake", t_same_client_wake},
    {"many_waiters", t_many_waiters},
    {"pubsub_killed_release_now", t_pubsub_killed_release_now},
    {"pubsub_killed_release_after_resubscribe",
     t_pubsub_killed_release_after_resubscribe},
};

CHECK_MAIN(cases)
