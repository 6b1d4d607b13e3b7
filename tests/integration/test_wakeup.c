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

#include <signal.h>
#include <sys/wait.h>

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

/* dlock's own wait queue (a ZSET beside the lock; not part of Redisson's
 * layout). Only used to order the setup of a case; -1 if absent. */
static int64_t queued(th_server_t *s, const char *name) {
  char key[256];
  snprintf(key, sizeof key, "dlock_lock_queue:{%s}", name);
  return th_redis_int(s, "ZCARD %s", key);
}

/* A waiter that gave up (deadline) is not handed the lock afterwards: the
 * lock is free right after the holder's release. */
static void t_timed_out_waiter_not_handed_lock(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *a = it_client(s), *b = it_client(s), *c = it_client(s);
  dlock_lock_t *la = it_lock(a, "gaveup"), *lb = it_lock(b, "gaveup"),
               *lc = it_lock(c, "gaveup");
  CHECK_OK(dlock_lock_acquire(la, 0, WD));
  for (int i = 0; i < 3; i++) /* three waits that give up, one by one */
    CHECK_RC(dlock_lock_acquire(lb, 300, WD), DLOCK_ETIMEDOUT);
  CHECK_OK(dlock_lock_release(la));
  bool locked = true;
  CHECK_OK(dlock_lock_is_locked(lc, &locked));
  if (locked) {
    redisReply *r = th_redis_cmd(s, "HGETALL gaveup");
    fprintf(stderr, "held after release by %s\n",
            r && r->elements ? r->element[0]->str : "?");
    if (r)
      freeReplyObject(r);
  }
  CHECKF(!locked, "the lock went to a waiter that had given up");
  CHECK_OK(dlock_lock_acquire(lc, 0, WD));
  CHECK_OK(dlock_lock_release(lc));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_lock_free(lc);
  dlock_client_free(a);
  dlock_client_free(b);
  dlock_client_free(c);
  th_server_stop(s);
}

/* child: --waiter PORT NAME: waits for the lock forever (until killed) */
static int waiter_child(int port, const char *name) {
  char url[64];
  snprintf(url, sizeof url, "redis://127.0.0.1:%d", port);
  dlock_client_t *c = NULL;
  if (dlock_client_new(&c, url, NULL) != 0)
    return 3;
  dlock_lock_t *l = NULL;
  if (dlock_lock_new(c, name, &l) != 0)
    return 3;
  int rc = dlock_lock_acquire(l, DLOCK_WAIT_FOREVER, WD);
  printf("child waiter returned %s\n", dlock_err_name(rc));
  return 4; /* it was meant to be killed while waiting */
}

static pid_t spawn_waiter(th_server_t *s, const char *name) {
  char port[16];
  snprintf(port, sizeof port, "%d", s->port);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    char *argv[] = {"test_wakeup", "--waiter", port, (char *)name, NULL};
    execv("/proc/self/exe", argv);
    _exit(127);
  }
  return pid;
}

static void kill_and_reap(pid_t pid) {
  kill(pid, SIGKILL);
  int st;
  bool ok;
  TH_WAIT_FOR(ok, waitpid(pid, &st, WNOHANG) == pid, 5000);
  CHECKF(ok, "waiter process %d did not die", (int)pid);
}

/* A waiting process is killed; the lock must not be handed to it. Another
 * waiter queued behind it gets the lock promptly, and with nobody else
 * waiting the lock is simply free. */
static void t_killed_waiter_process_skipped(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *a = it_client(s), *d = it_client(s);
  dlock_lock_t *la = it_lock(a, "victim"), *ld = it_lock(d, "victim");
  CHECK_OK(dlock_lock_acquire(la, 0, WD));
  pid_t child = spawn_waiter(s, "victim");
  CHECK(it_wait_subscribers(s, "victim", 1, 5000));
  bool ok;
  TH_WAIT_FOR(ok, queued(s, "victim") == 1, 2000); /* best effort */
  it_async_t w;
  it_async_start(&w, ld, 20000, WD, false);
  CHECK(it_wait_subscribers(s, "victim", 2, 5000));
  TH_WAIT_FOR(ok, queued(s, "victim") == 2, 2000);
  printf("dlock's queue %s both waiters\n", ok ? "shows" : "does not show");
  kill_and_reap(child);
  int64_t t_rel = th_now_ms();
  CHECK_OK(dlock_lock_release(la));
  expect_woken(s, &w, "victim", t_rel, "waiter behind a killed one");
  CHECK_OK(w.rc);
  printf("waiter behind the killed one acquired %lld ms after release\n",
         (long long)(w.t_done - t_rel));
  CHECK_OK(it_async_finish(&w));

  /* only the killed waiter was queued */
  CHECK_OK(dlock_lock_acquire(la, 0, WD));
  child = spawn_waiter(s, "victim");
  TH_WAIT_FOR(ok, queued(s, "victim") == 1, 5000);
  printf("dlock's queue %s the waiter\n", ok ? "shows" : "does not show");
  CHECK(it_wait_subscribers(s, "victim", 1, 5000));
  kill_and_reap(child);
  CHECK_OK(dlock_lock_release(la));
  bool locked = true;
  CHECK_OK(dlock_lock_is_locked(ld, &locked));
  CHECKF(!locked, "the lock went to a killed waiter");
  CHECK_OK(dlock_lock_acquire(ld, 0, WD));
  CHECK_OK(dlock_lock_release(ld));
  dlock_lock_free(la);
  dlock_lock_free(ld);
  dlock_client_free(a);
  dlock_client_free(d);
  th_server_stop(s);
}

/* A monitor subscribed to every channel by pattern (PSUBSCRIBE *) makes
 * PUBLISH count a receiver on every channel. A grant to a killed waiter's
 * client must still count as unheard: the lock is free after the release,
 * not left with the dead waiter for its lease. */
static int monitored_waiter_child(void *arg) {
  dlock_client_t *c = it_client(arg);
  dlock_lock_t *l = it_lock(c, "monitored");
  int rc = dlock_lock_acquire(l, DLOCK_WAIT_FOREVER, WD);
  printf("child waiter returned %s\n", dlock_err_name(rc));
  return 4; /* it was meant to be killed while waiting */
}

static void t_pattern_monitor_killed_waiter(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  /* a forked child, not a re-executed one: this test runs under valgrind
   * too; forked before any thread (TSan) */
  it_child_t ch;
  it_child_fork(&ch, monitored_waiter_child, s);
  redisContext *mon = it_pattern_monitor(s);
  dlock_client_t *a = it_client(s), *d = it_client(s);
  dlock_lock_t *la = it_lock(a, "monitored"), *ld = it_lock(d, "monitored");
  CHECK_OK(dlock_lock_acquire(la, 0, WD));
  it_child_go(&ch);
  bool ok;
  TH_WAIT_FOR(ok, queued(s, "monitored") == 1, 5000);
  CHECK(ok);
  kill(ch.pid, SIGKILL);
  CHECK_INT(it_child_wait(&ch, 5000), ==, -1);
  /* the server has dropped the killed client's subscriptions */
  TH_WAIT_FOR(ok, it_channels(s, "dlock_lock_grant:*") == 0, 5000);
  CHECK(ok);
  CHECK_OK(dlock_lock_release(la));
  bool locked = true;
  CHECK_OK(dlock_lock_is_locked(ld, &locked));
  CHECKF(!locked, "the lock went to a killed waiter (PTTL %lld)",
         (long long)th_redis_int(s, "PTTL monitored"));
  CHECK_OK(dlock_lock_acquire(ld, 0, WD));
  CHECK_OK(dlock_lock_release(ld));
  dlock_lock_free(la);
  dlock_lock_free(ld);
  dlock_client_free(a);
  dlock_client_free(d);
  redisFree(mon);
  th_server_stop(s);
}

/* A Redisson waiter (subscribed to the lock's channel) and dlock waiters
 * on a dlock-held lock: dlock may serve its own waiters first, but once
 * they are done the release message reaches Redisson. */
static void t_redisson_waiter_woken_after_dlock_waiters(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *a = it_client(s), *b = it_client(s);
  dlock_lock_t *la = it_lock(a, "mixed"), *lb = it_lock(b, "mixed");
  CHECK_OK(dlock_lock_acquire(la, 0, WD));
  char ch[64];
  it_channel("mixed", ch, sizeof ch);
  redisContext *sub = th_redis_connect(s);
  CHECK(sub);
  redisReply *r = redisCommand(sub, "SUBSCRIBE %s", ch);
  CHECK(r && r->type == REDIS_REPLY_ARRAY);
  freeReplyObject(r);
  it_async_t w;
  it_async_start(&w, lb, 20000, WD, true); /* acquires, releases at once */
  CHECK(it_wait_subscribers(s, "mixed", 2, 5000));
  CHECK_OK(dlock_lock_release(la));
  CHECKF(it_async_wait(&w, PROMPT_MS), "dlock waiter not served");
  CHECK_OK(w.rc);
  CHECK_OK(it_async_finish(&w));
  /* the last release had no dlock waiter to serve: Redisson hears "0" */
  struct timeval tv = {.tv_sec = PROMPT_MS / 1000, .tv_usec = 0};
  redisSetTimeout(sub, tv);
  void *v = NULL;
  CHECKF(redisGetReply(sub, &v) == REDIS_OK && v,
         "no release message for the Redisson waiter");
  r = v;
  CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 3);
  CHECK_STR(r->element[2]->str, "0");
  freeReplyObject(r);
  CHECK(!it_exists(s, "mixed"));
  redisFree(sub);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_server_stop(s);
}

static const check_case_t cases[] = {
    {"pubsub_wake", t_pubsub_wake},
    {"same_client_wake", t_same_client_wake},
    {"many_waiters", t_many_waiters},
    {"pubsub_killed_release_now", t_pubsub_killed_release_now},
    {"pubsub_killed_release_after_resubscribe",
     t_pubsub_killed_release_after_resubscribe},
    {"timed_out_waiter_not_handed_lock", t_timed_out_waiter_not_handed_lock},
    {"killed_waiter_process_skipped", t_killed_waiter_process_skipped},
    {"pattern_monitor_killed_waiter", t_pattern_monitor_killed_waiter},
    {"redisson_waiter_woken_after_dlock_waiters",
     t_redisson_waiter_woken_after_dlock_waiters},
};

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "--waiter") == 0)
    return waiter_child(atoi(argv[2]), argv[3]);
  return check_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
