/*
 * test_etcd.c - the etcd backend against a real 3-member etcd cluster
 * (tests/harness/etcd.c), and against etcd's own lock client (etcdctl).
 *
 * Design note: every case starts its own cluster. Waiters are threads with
 * clients of their own (a client is one session, one lease: one key per
 * lock), or forked processes re-executing this binary (`--child ...`), so
 * each has its own client from scratch. A waiter's wake-up is asserted by
 * its outcome, never by a sleep: its wait (30 s) is far beyond the time a
 * watch takes and far below the lease TTL (60 s) that bounds a waiter's
 * sleep when no watch fires, so a waiter that only woke by its bound would
 * fail. Each loop is bounded in count and time (TH_WAIT_FOR).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "certs.h"
#include "check.h"
#include "etcd.h"
#include "harness.h"

#include "async_one.h" /* after check.h and harness.h */

#include <dirent.h>
#include <dlock/dlock.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define WAIT_MS 30000
#define ETCDCTL "/usr/bin/etcdctl"

static const char *g_exe;

/* ---------------------------------------------------------------- helpers */

static dlock_client_t *client_ttl(const char *url, int64_t session_ms,
                                  dlock_lost_fn lost, void *ud) {
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 2000));
  CHECK_OK(dlock_options_set_command_timeout(o, 3000));
  if (session_ms)
    CHECK_OK(dlock_options_set_session_timeout(o, session_ms));
  if (lost)
    CHECK_OK(dlock_options_set_lost_callback(o, lost, ud));
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new(&c, url, o));
  dlock_options_free(o);
  return c;
}

static dlock_client_t *client(const char *url) {
  return client_ttl(url, 0, NULL, NULL);
}

static dlock_lock_t *lock_kind(dlock_client_t *c, const char *name,
                               dlock_lock_kind_t kind) {
  dlock_lock_t *l = NULL;
  CHECK_OK(dlock_lock_new_kind(c, name, kind, &l));
  return l;
}

static dlock_lock_state_t *state(dlock_lock_t *l) {
  dlock_lock_state_t *st = NULL;
  CHECK_OK(dlock_lock_state(l, &st));
  return st;
}

static size_t nwaiters(dlock_lock_t *l) {
  dlock_lock_state_t *st = state(l);
  size_t n = st->nwaiters;
  dlock_lock_state_free(st);
  return n;
}

static int64_t state_token(dlock_lock_t *l) {
  dlock_lock_state_t *st = state(l);
  int64_t t = st->token;
  dlock_lock_state_free(st);
  return t;
}

/* A thread that acquires `name` on a client of its own, notes when and
 * with which token, holds until told, releases. */
typedef struct waiter {
  const char *url, *name;
  dlock_lock_kind_t kind;
  int64_t wait_ms;
  atomic_int rc; /* 1 while running */
  atomic_bool release;
  atomic_llong token, got_at;
  atomic_int order; /* its place among the waiters that got the lock */
  atomic_int *counter;
  struct lost_rec *lost; /* counts its losses (set before it starts) */
  pthread_t th;
} waiter_t;

static void on_lost(void *ud, const char *name, uint64_t tid,
                    dlock_lost_reason_t reason);

static void *waiter_main(void *arg) {
  waiter_t *w = arg;
  dlock_client_t *c = client_ttl(w->url, 0, w->lost ? on_lost : NULL, w->lost);
  dlock_lock_t *l = lock_kind(c, w->name, w->kind);
  int64_t tok = 0;
  int rc =
      w->kind == DLOCK_FENCED
          ? dlock_lock_acquire_fenced(l, w->wait_ms, DLOCK_LEASE_WATCHDOG, &tok)
          : dlock_lock_acquire(l, w->wait_ms, DLOCK_LEASE_WATCHDOG);
  if (rc == 0) {
    atomic_store(&w->got_at, th_now_ms());
    atomic_store(&w->token, tok);
    if (w->counter)
      atomic_store(&w->order, atomic_fetch_add(w->counter, 1) + 1);
    bool ok = false;
    TH_WAIT_FOR(ok, atomic_load(&w->release), 60000);
    (void)ok;
    rc = dlock_lock_release(l);
  }
  atomic_store(&w->rc, rc == 0 ? 0 : rc);
  dlock_lock_free(l);
  dlock_client_free(c);
  return NULL;
}

static void waiter_start(waiter_t *w, const char *url, const char *name,
                         dlock_lock_kind_t kind, int64_t wait_ms) {
  memset(w, 0, sizeof *w);
  w->url = url;
  w->name = name;
  w->kind = kind;
  w->wait_ms = wait_ms;
  atomic_store(&w->rc, 1);
  CHECK(pthread_create(&w->th, NULL, waiter_main, w) == 0);
}

static int waiter_join(waiter_t *w) {
  atomic_store(&w->release, true);
  pthread_join(w->th, NULL);
  return atomic_load(&w->rc);
}

static th_etcd_t *cluster(int n) {
  th_etcd_t *e = th_etcd_start(n);
  CHECKF(e != NULL, "could not start a %d-member etcd cluster", n);
  return e;
}

/* ------------------------------------------------------------------ cases */

static void t_basic(void) {
  th_etcd_t *e = cluster(3);
  dlock_client_t *c = client(th_etcd_url(e));
  dlock_lock_t *l = lock_kind(c, "basic", DLOCK_REENTRANT);
  bool b = true;
  CHECK_OK(dlock_lock_is_locked(l, &b));
  CHECK(!b);
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG)); /* reentry */
  int64_t n = 0;
  CHECK_OK(dlock_lock_hold_count(l, &n));
  CHECK_INT(n, ==, 2);
  CHECK_OK(dlock_lock_is_held_by_thread(l, &b));
  CHECK(b);
  dlock_lock_state_t *st = state(l);
  CHECK_INT(st->nholders, ==, 1);
  CHECK(strstr(st->holders[0].owner, dlock_client_id(c)) != NULL);
  CHECK(strstr(st->holders[0].owner, "key=basic/") != NULL);
  int64_t ttl = st->ttl_ms;
  CHECKF(ttl > 0 && ttl <= 60000, "ttl %lld", (long long)ttl);
  dlock_lock_state_free(st);
  CHECK_OK(dlock_lock_release(l));
  CHECK_OK(dlock_lock_is_locked(l, &b));
  CHECK(b); /* still held once */
  CHECK_OK(dlock_lock_release(l));
  CHECK_OK(dlock_lock_is_locked(l, &b));
  CHECK(!b);
  CHECK_RC(dlock_lock_release(l), DLOCK_ENOTOWNER);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_etcd_stop(e);
}

static void t_try_refused(void) {
  th_etcd_t *e = cluster(3);
  dlock_client_t *a = client(th_etcd_url(e)), *b = client(th_etcd_url(e));
  dlock_lock_t *la = lock_kind(a, "try", DLOCK_REENTRANT);
  dlock_lock_t *lb = lock_kind(b, "try", DLOCK_REENTRANT);
  CHECK_OK(dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_RC(dlock_lock_acquire(lb, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  CHECK(strstr(dlock_last_error(), "held by another") != NULL);
  /* a refused try leaves no key behind */
  CHECK_INT(nwaiters(la), ==, 0);
  /* a timed wait that gives up removes its key too */
  CHECK_RC(dlock_lock_acquire(lb, 300, DLOCK_LEASE_WATCHDOG), DLOCK_ETIMEDOUT);
  CHECK_INT(nwaiters(la), ==, 0);
  CHECK_OK(dlock_lock_release(la));
  CHECK_OK(dlock_lock_acquire(lb, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(lb));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_etcd_stop(e);
}

static void t_waiter_woken(void) {
  th_etcd_t *e = cluster(3);
  dlock_client_t *c = client(th_etcd_url(e));
  dlock_lock_t *l = lock_kind(c, "wake", DLOCK_REENTRANT);
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  waiter_t w;
  waiter_start(&w, th_etcd_url(e), "wake", DLOCK_REENTRANT, WAIT_MS);
  bool ok = false;
  TH_WAIT_FOR(ok, nwaiters(l) == 1, 10000);
  CHECK(ok);
  CHECK_INT(atomic_load(&w.got_at), ==, 0);
  int64_t released = th_now_ms();
  CHECK_OK(dlock_lock_release(l));
  TH_WAIT_FOR(ok, atomic_load(&w.got_at) != 0 || atomic_load(&w.rc) != 1,
              WAIT_MS + 5000);
  CHECK(ok);
  CHECKF(atomic_load(&w.got_at) != 0, "the waiter failed: %d",
         atomic_load(&w.rc));
  printf("woken %lld ms after the release\n",
         (long long)(atomic_load(&w.got_at) - released));
  CHECK_INT(waiter_join(&w), ==, 0);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_etcd_stop(e);
}

typedef struct local_arg {
  dlock_lock_t *l;
  int iters;
  atomic_int *inside;
  long long *counter;
  int rc;
} local_arg_t;

static void *local_main(void *arg) {
  local_arg_t *a = arg;
  for (int i = 0; i < a->iters && a->rc == 0; i++) {
    a->rc = dlock_lock_acquire(a->l, WAIT_MS, DLOCK_LEASE_WATCHDOG);
    if (a->rc)
      break;
    if (atomic_fetch_add(a->inside, 1) != 0)
      a->rc = -1000;
    long long v = *a->counter;
    sched_yield();
    *a->counter = v + 1;
    atomic_fetch_sub(a->inside, 1);
    int rc = dlock_lock_release(a->l);
    if (!a->rc)
      a->rc = rc;
  }
  return NULL;
}

static void t_threads_one_client(void) {
  /* threads of one client share its lease, hence its key: they take turns
   * on it, each owning the lock in its own right */
  th_etcd_t *e = cluster(1);
  dlock_client_t *c = client(th_etcd_url(e));
  dlock_lock_t *l = lock_kind(c, "local", DLOCK_REENTRANT);
  atomic_int inside = 0;
  long long counter = 0;
  local_arg_t args[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    args[i] = (local_arg_t){
        .l = l, .iters = 25, .inside = &inside, .counter = &counter};
    CHECK(pthread_create(&th[i], NULL, local_main, &args[i]) == 0);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    CHECKF(args[i].rc == 0, "thread %d: %d", i, args[i].rc);
  }
  CHECK_INT(counter, ==, 100);
  /* a thread that does not hold it cannot release it */
  CHECK_RC(dlock_lock_release(l), DLOCK_ENOTOWNER);
  bool b = true;
  CHECK_OK(dlock_lock_is_locked(l, &b));
  CHECK(!b);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_etcd_stop(e);
}

static void t_fencing(void) {
  /* the token is the key's create revision: it grows with every grant */
  th_etcd_t *e = cluster(3);
  dlock_client_t *a = client(th_etcd_url(e)), *b = client(th_etcd_url(e));
  dlock_lock_t *la = lock_kind(a, "fence", DLOCK_FENCED);
  dlock_lock_t *lb = lock_kind(b, "fence", DLOCK_FENCED);
  int64_t prev = 0;
  for (int i = 0; i < 4; i++) {
    dlock_lock_t *l = i % 2 ? lb : la;
    int64_t t = 0, t2 = 0;
    CHECK_OK(dlock_lock_acquire_fenced(l, WAIT_MS, DLOCK_LEASE_WATCHDOG, &t));
    CHECK_INT(t, >, prev);
    CHECK_INT(state_token(l), ==, t);
    /* reentry keeps the token */
    CHECK_OK(dlock_lock_acquire_fenced(l, 0, DLOCK_LEASE_WATCHDOG, &t2));
    CHECK_INT(t2, ==, t);
    CHECK_OK(dlock_lock_release(l));
    CHECK_OK(dlock_lock_release(l));
    prev = t;
  }
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_etcd_stop(e);
}

/* ------------------------------------------------------------- processes */

#define PROCS 4
#define PROC_ITERS 15

/* `--child-counter URL FILE ITERS`: increments the number in FILE under
 * the lock "proc", non-atomically (read, yield, write). */
static int child_counter(const char *url, const char *file, int iters) {
  dlock_client_t *c = client(url);
  dlock_lock_t *l = lock_kind(c, "proc", DLOCK_REENTRANT);
  for (int i = 0; i < iters; i++) {
    CHECK_OK(dlock_lock_acquire(l, WAIT_MS, DLOCK_LEASE_WATCHDOG));
    FILE *f = fopen(file, "r+");
    CHECK(f);
    long long v = 0;
    if (fscanf(f, "%lld", &v) != 1)
      v = 0;
    sched_yield();
    rewind(f);
    fprintf(f, "%lld\n", v + 1);
    CHECK(fclose(f) == 0);
    CHECK_OK(dlock_lock_release(l));
  }
  dlock_lock_free(l);
  dlock_client_free(c);
  return 0;
}

static pid_t spawn_self(char *const argv[]) {
  pid_t p = fork();
  CHECK(p >= 0);
  if (p == 0) {
    execv(g_exe, argv);
    _exit(127);
  }
  return p;
}

/* Waits for pid within ms; its exit status, or -1 (killed then). */
static int reap_within(pid_t pid, int64_t ms) {
  int st = 0;
  bool ok = false;
  TH_WAIT_FOR(ok, waitpid(pid, &st, WNOHANG) == pid, ms);
  if (!ok) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return -1;
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void t_processes(void) {
  th_etcd_t *e = cluster(3);
  char file[] = "/tmp/dlock-etcd-counter-XXXXXX";
  int fd = mkstemp(file);
  CHECK(fd >= 0);
  CHECK(write(fd, "0\n", 2) == 2);
  close(fd);
  char iters[16];
  snprintf(iters, sizeof iters, "%d", PROC_ITERS);
  pid_t pids[PROCS];
  for (int i = 0; i < PROCS; i++) {
    char *argv[] = {
        (char *)g_exe, "--child-counter", (char *)th_etcd_url(e), file, iters,
        NULL};
    pids[i] = spawn_self(argv);
  }
  for (int i = 0; i < PROCS; i++)
    CHECK_INT(reap_within(pids[i], 90000), ==, 0);
  FILE *f = fopen(file, "r");
  CHECK(f);
  long long v = 0;
  CHECK(fscanf(f, "%lld", &v) == 1);
  fclose(f);
  unlink(file);
  CHECK_INT(v, ==, PROCS * PROC_ITERS);
  th_etcd_stop(e);
}

/* ------------------------------------------------------------------ order */

static void t_fifo(void) {
  /* waiters get the lock in the order they asked: by create revision */
  th_etcd_t *e = cluster(3);
  dlock_client_t *c = client(th_etcd_url(e));
  dlock_lock_t *l = lock_kind(c, "fifo", DLOCK_FENCED);
  int64_t t0 = 0;
  CHECK_OK(dlock_lock_acquire_fenced(l, 0, DLOCK_LEASE_WATCHDOG, &t0));
  waiter_t w[3];
  atomic_int counter = 0;
  bool ok = false;
  for (int i = 0; i < 3; i++) {
    waiter_start(&w[i], th_etcd_url(e), "fifo", DLOCK_FENCED, WAIT_MS);
    w[i].counter = &counter;
    atomic_store(&w[i].release, true); /* each releases once it has it */
    TH_WAIT_FOR(ok, nwaiters(l) == (size_t)i + 1, 10000);
    CHECK(ok);
  }
  dlock_lock_state_t *st = state(l);
  CHECK_INT(st->nwaiters, ==, 3);
  printf("holder: %s\n", st->holders[0].owner);
  for (size_t i = 0; i < st->nwaiters; i++)
    printf("waiter %zu: %s\n", i, st->waiters[i]);
  dlock_lock_state_free(st);
  CHECK_OK(dlock_lock_release(l));
  for (int i = 0; i < 3; i++) {
    pthread_join(w[i].th, NULL);
    CHECK_INT(atomic_load(&w[i].rc), ==, 0);
    CHECK_INT(atomic_load(&w[i].order), ==, i + 1);
    CHECK_INT(atomic_load(&w[i].token), >,
              i ? atomic_load(&w[i - 1].token) : t0);
  }
  dlock_lock_free(l);
  dlock_client_free(c);
  th_etcd_stop(e);
}

/* ------------------------------------------------------------------ lease */

typedef struct lost_rec {
  atomic_int n;
  atomic_int reason;
} lost_rec_t;

static void on_lost(void *ud, const char *name, uint64_t tid,
                    dlock_lost_reason_t reason) {
  (void)name;
  (void)tid;
  lost_rec_t *r = ud;
  atomic_store(&r->reason, (int)reason);
  atomic_fetch_add(&r->n, 1);
}

/* `--child-hold URL NAME SESSION_MS`: holds the fenced lock NAME on a
 * session of SESSION_MS, prints "held <token>", waits until its lost
 * callback reports the session's end, checks that the release says
 * DLOCK_ELOST, prints "lost". */
static int child_hold(const char *url, const char *name, int64_t session_ms) {
  lost_rec_t rec = {0};
  dlock_client_t *c = client_ttl(url, session_ms, on_lost, &rec);
  dlock_lock_t *l = lock_kind(c, name, DLOCK_FENCED);
  int64_t tok = 0;
  CHECK_OK(dlock_lock_acquire_fenced(l, WAIT_MS, DLOCK_LEASE_WATCHDOG, &tok));
  printf("held %lld\n", (long long)tok);
  fflush(stdout);
  bool ok = false;
  TH_WAIT_FOR(ok, atomic_load(&rec.n) > 0, 60000);
  CHECK(ok);
  CHECK_INT(atomic_load(&rec.reason), ==, DLOCK_LOST_SESSION);
  CHECK_RC(dlock_lock_release(l), DLOCK_ELOST);
  printf("lost\n");
  fflush(stdout);
  dlock_lock_free(l);
  dlock_client_free(c);
  return 0;
}

static pid_t spawn_self_out(char *const argv[], int *out_fd) {
  int p[2];
  CHECK(pipe2(p, O_CLOEXEC) == 0);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    dup2(p[1], 1);
    execv(g_exe, argv);
    _exit(127);
  }
  close(p[1]);
  *out_fd = p[0];
  return pid;
}

/* Reads one line from fd within ms (a byte at a time); false on EOF or
 * timeout. */
static bool read_line(int fd, char *buf, size_t len, int64_t ms) {
  int64_t until = th_now_ms() + ms;
  size_t n = 0;
  while (n + 1 < len) {
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int64_t left = until - th_now_ms();
    if (left <= 0 || poll(&pfd, 1, (int)left) <= 0)
      return false;
    char ch;
    if (read(fd, &ch, 1) != 1)
      return false;
    if (ch == '\n')
      break;
    buf[n++] = ch;
  }
  buf[n] = '\0';
  return true;
}

static void t_lease_expiry(void) {
  /* a holder paused past its lease's TTL: the next waiter gets the lock
   * with a higher revision; the resumed holder is told (lost callback,
   * DLOCK_ELOST on release) */
  th_etcd_t *e = cluster(3);
  int fd = -1;
  char *argv[] = {(char *)g_exe, "--child-hold", (char *)th_etcd_url(e),
                  "expiry",      "2000",         NULL};
  pid_t child = spawn_self_out(argv, &fd);
  char line[128];
  CHECK(read_line(fd, line, sizeof line, 20000));
  long long held_tok = 0;
  CHECK(sscanf(line, "held %lld", &held_tok) == 1);
  waiter_t w;
  waiter_start(&w, th_etcd_url(e), "expiry", DLOCK_FENCED, WAIT_MS);
  dlock_client_t *c = client(th_etcd_url(e));
  dlock_lock_t *l = lock_kind(c, "expiry", DLOCK_FENCED);
  bool ok = false;
  TH_WAIT_FOR(ok, nwaiters(l) == 1, 10000);
  CHECK(ok);
  CHECK(kill(child, SIGSTOP) == 0);
  int64_t stopped = th_now_ms();
  TH_WAIT_FOR(ok, atomic_load(&w.got_at) != 0 || atomic_load(&w.rc) != 1,
              WAIT_MS);
  CHECK(ok);
  CHECKF(atomic_load(&w.got_at) != 0, "waiter failed: %d", atomic_load(&w.rc));
  printf("the waiter got it %lld ms after the holder stopped\n",
         (long long)(atomic_load(&w.got_at) - stopped));
  CHECK_INT(atomic_load(&w.token), >, held_tok);
  CHECK(kill(child, SIGCONT) == 0);
  CHECK(read_line(fd, line, sizeof line, 30000));
  CHECK_STR(line, "lost");
  CHECK_INT(reap_within(child, 20000), ==, 0);
  close(fd);
  CHECK_INT(waiter_join(&w), ==, 0);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_etcd_stop(e);
}

static void t_session_kept_alive(void) {
  /* a hold outlives several TTLs of its session's lease: the keep-alive
   * comes in time, and no loss is reported */
  th_etcd_t *e = cluster(3);
  lost_rec_t rec = {0};
  dlock_client_t *c = client_ttl(th_etcd_url(e), 2000, on_lost, &rec);
  dlock_lock_t *l = lock_kind(c, "kept", DLOCK_REENTRANT);
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  int64_t t0 = th_now_ms();
  bool ok = false;
  TH_WAIT_FOR(ok, th_now_ms() - t0 > 7000 || atomic_load(&rec.n) > 0, 8000);
  CHECK(ok); /* one of the two, within the bound */
  CHECK_INT(atomic_load(&rec.n), ==, 0);
  bool held = false;
  CHECK_OK(dlock_lock_is_held_by_thread(l, &held));
  CHECK(held);
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_etcd_stop(e);
}

static void t_lease_revoked(void) {
  /* the session's lease revoked from outside: every hold is lost at once,
   * and the client goes on with a new lease */
  th_etcd_t *e = cluster(1);
  lost_rec_t rec = {0};
  dlock_client_t *c = client_ttl(th_etcd_url(e), 3000, on_lost, &rec);
  dlock_lock_t *l = lock_kind(c, "revoked", DLOCK_FENCED);
  int64_t t1 = 0, t2 = 0;
  CHECK_OK(dlock_lock_acquire_fenced(l, 0, DLOCK_LEASE_WATCHDOG, &t1));
  dlock_lock_state_t *st = state(l);
  const char *lp = strstr(st->holders[0].owner, "lease=");
  CHECK(lp);
  char cmd[512];
  snprintf(cmd, sizeof cmd,
           "ETCDCTL_API=3 " ETCDCTL " --endpoints=%s lease revoke %s "
           ">/dev/null",
           th_etcd_endpoints(e), lp + 6);
  dlock_lock_state_free(st);
  CHECK(system(cmd) == 0);
  bool ok = false;
  TH_WAIT_FOR(ok, atomic_load(&rec.n) > 0, 10000); /* the TTL/3 keep-alive */
  CHECK(ok);
  CHECK_INT(atomic_load(&rec.reason), ==, DLOCK_LOST_SESSION);
  CHECK_RC(dlock_lock_release(l), DLOCK_ELOST);
  CHECK_OK(dlock_lock_acquire_fenced(l, 0, DLOCK_LEASE_WATCHDOG, &t2));
  CHECK_INT(t2, >, t1);
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_etcd_stop(e);
}

/* The lease (hex) in a state entry "<owner> key=... lease=<hex>". */
static void revoke_lease_of(th_etcd_t *e, const char *entry) {
  const char *lp = strstr(entry, "lease=");
  CHECKF(lp, "no lease in '%s'", entry);
  char cmd[512];
  snprintf(cmd, sizeof cmd,
           "ETCDCTL_API=3 " ETCDCTL " --endpoints=%s lease revoke %.40s "
           ">/dev/null",
           th_etcd_endpoints(e), lp + 6);
  CHECK(system(cmd) == 0);
}

/* The lease of the first waiter of l, revoked. */
static void revoke_waiter_lease(th_etcd_t *e, dlock_lock_t *l) {
  dlock_lock_state_t *st = state(l);
  CHECK_INT(st->nwaiters, ==, 1);
  revoke_lease_of(e, st->waiters[0]);
  dlock_lock_state_free(st);
}

static void t_wait_lease_revoked(void) {
  /* a waiter's lease revoked while another client holds: the wait goes on
   * (its key went with the lease; the next attempt is made under a new
   * lease) and it gets the lock at the release; it held nothing, so no
   * loss is reported */
  th_etcd_t *e = cluster(1);
  dlock_client_t *h = client(th_etcd_url(e));
  dlock_lock_t *hl = lock_kind(h, "wrevoked", DLOCK_FENCED);
  int64_t t1 = 0;
  CHECK_OK(dlock_lock_acquire_fenced(hl, 0, DLOCK_LEASE_WATCHDOG, &t1));
  lost_rec_t rec = {0};
  waiter_t w;
  memset(&w, 0, sizeof w);
  w.url = th_etcd_url(e);
  w.name = "wrevoked";
  w.kind = DLOCK_FENCED;
  w.wait_ms = WAIT_MS;
  w.lost = &rec;
  atomic_store(&w.rc, 1);
  CHECK(pthread_create(&w.th, NULL, waiter_main, &w) == 0);
  bool ok = false;
  TH_WAIT_FOR(ok, nwaiters(hl) == 1, 10000);
  CHECK(ok);
  revoke_waiter_lease(e, hl);
  /* its key went with its lease; it is still waiting */
  CHECK_INT(nwaiters(hl), ==, 0);
  CHECK_INT(atomic_load(&w.rc), ==, 1);
  CHECK_OK(dlock_lock_release(hl));
  TH_WAIT_FOR(ok, atomic_load(&w.got_at) != 0 || atomic_load(&w.rc) != 1,
              WAIT_MS + 5000);
  CHECK(ok);
  CHECKF(atomic_load(&w.got_at) != 0, "the waiter gave up: %d",
         atomic_load(&w.rc));
  CHECK_INT(atomic_load(&w.token), >, t1);
  CHECK_INT(waiter_join(&w), ==, 0);
  CHECK_INT(atomic_load(&rec.n), ==, 0);
  dlock_lock_free(hl);
  dlock_client_free(h);
  th_etcd_stop(e);
}

/* Lost callback that counts the losses of "mine" and of any other name. */
typedef struct names_lost {
  atomic_int mine, other;
} names_lost_t;

static void on_lost_names(void *ud, const char *name, uint64_t tid,
                          dlock_lost_reason_t reason) {
  (void)tid;
  (void)reason;
  names_lost_t *r = ud;
  atomic_fetch_add(strcmp(name, "mine") == 0 ? &r->mine : &r->other, 1);
}

typedef struct shared_waiter {
  dlock_lock_t *l;
  atomic_int rc; /* 1 while waiting */
  int release_rc;
  char err[256];
} shared_waiter_t;

static void *shared_waiter_main(void *arg) {
  shared_waiter_t *w = arg;
  int rc = dlock_lock_acquire(w->l, WAIT_MS, DLOCK_LEASE_WATCHDOG);
  snprintf(w->err, sizeof w->err, "%s", rc ? dlock_last_error() : "");
  if (rc == 0)
    w->release_rc = dlock_lock_release(w->l);
  atomic_store(&w->rc, rc);
  return NULL;
}

static void t_hold_and_wait_lease_revoked(void) {
  /* one client holds "mine" in one thread and waits for "theirs" (held by
   * another client) in another, on the same lease; the lease revoked: the
   * hold is reported lost (and its release says DLOCK_ELOST), the wait
   * goes on under a new lease and gets "theirs" at its release */
  th_etcd_t *e = cluster(1);
  names_lost_t rec = {0};
  dlock_client_t *c = client_ttl(th_etcd_url(e), 0, on_lost_names, &rec);
  dlock_client_t *h = client(th_etcd_url(e));
  dlock_lock_t *mine = lock_kind(c, "mine", DLOCK_FENCED);
  dlock_lock_t *theirs = lock_kind(c, "theirs", DLOCK_FENCED);
  dlock_lock_t *hl = lock_kind(h, "theirs", DLOCK_FENCED);
  CHECK_OK(dlock_lock_acquire(mine, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_acquire(hl, 0, DLOCK_LEASE_WATCHDOG));
  shared_waiter_t w = {.l = theirs};
  atomic_store(&w.rc, 1);
  pthread_t th;
  CHECK(pthread_create(&th, NULL, shared_waiter_main, &w) == 0);
  bool ok = false;
  TH_WAIT_FOR(ok, nwaiters(hl) == 1, 10000);
  CHECK(ok);
  dlock_lock_state_t *st = state(mine);
  CHECK_INT(st->nholders, ==, 1);
  revoke_lease_of(e, st->holders[0].owner);
  dlock_lock_state_free(st);
  CHECK_INT(nwaiters(hl), ==, 0);
  CHECK_OK(dlock_lock_release(hl));
  pthread_join(th, NULL);
  CHECKF(atomic_load(&w.rc) == 0, "the wait ended with %d: %s",
         atomic_load(&w.rc), w.err);
  CHECK_INT(w.release_rc, ==, 0);
  /* the attempt that met the revoked lease reported the hold lost */
  TH_WAIT_FOR(ok, atomic_load(&rec.mine) > 0, 10000);
  CHECK(ok);
  CHECK_RC(dlock_lock_release(mine), DLOCK_ELOST);
  CHECK_INT(atomic_load(&rec.other), ==, 0);
  dlock_lock_free(mine);
  dlock_lock_free(theirs);
  dlock_lock_free(hl);
  dlock_client_free(h);
  dlock_client_free(c);
  th_etcd_stop(e);
}

/* ----------------------------------------------------------------- faults */

static void t_leader_killed(void) {
  /* the leader dies while a lock is held and waited for */
  th_etcd_t *e = cluster(3);
  dlock_client_t *c = client(th_etcd_url(e));
  dlock_lock_t *l = lock_kind(c, "leader", DLOCK_FENCED);
  int64_t t1 = 0;
  CHECK_OK(dlock_lock_acquire_fenced(l, 0, DLOCK_LEASE_WATCHDOG, &t1));
  waiter_t w;
  waiter_start(&w, th_etcd_url(e), "leader", DLOCK_FENCED, WAIT_MS);
  bool ok = false;
  TH_WAIT_FOR(ok, nwaiters(l) == 1, 10000);
  CHECK(ok);
  int leader = th_etcd_leader(e);
  CHECK(leader >= 0);
  CHECK_OK(th_etcd_kill9(e, leader));
  TH_WAIT_FOR(ok, th_etcd_leader(e) >= 0, 20000);
  CHECK(ok);
  CHECK_INT(atomic_load(&w.got_at), ==, 0);
  CHECK_OK(dlock_lock_release(l));
  TH_WAIT_FOR(ok, atomic_load(&w.got_at) != 0 || atomic_load(&w.rc) != 1,
              WAIT_MS + 5000);
  CHECK(ok);
  CHECKF(atomic_load(&w.got_at) != 0, "waiter failed: %d", atomic_load(&w.rc));
  CHECK_INT(atomic_load(&w.token), >, t1);
  CHECK_INT(waiter_join(&w), ==, 0);
  /* and the member comes back */
  CHECK_OK(th_etcd_up(e, leader));
  int64_t t2 = 0;
  CHECK_OK(dlock_lock_acquire_fenced(l, WAIT_MS, DLOCK_LEASE_WATCHDOG, &t2));
  CHECK_INT(t2, >, atomic_load(&w.token));
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_etcd_stop(e);
}

static void t_member_killed(void) {
  /* the member the client talks to (the first listed) dies: requests,
   * keep-alives and watches move to the others */
  th_etcd_t *e = cluster(3);
  lost_rec_t rec = {0};
  dlock_client_t *c = client_ttl(th_etcd_url(e), 3000, on_lost, &rec);
  dlock_lock_t *l = lock_kind(c, "member", DLOCK_REENTRANT);
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(l));
  CHECK_OK(th_etcd_kill9(e, 0));
  CHECK_OK(dlock_lock_acquire(l, WAIT_MS, DLOCK_LEASE_WATCHDOG));
  waiter_t w;
  waiter_start(&w, th_etcd_url(e), "member", DLOCK_REENTRANT, WAIT_MS);
  bool ok = false;
  TH_WAIT_FOR(ok, nwaiters(l) == 1, 10000);
  CHECK(ok);
  /* longer than the session's TTL: the keep-alive found another member */
  int64_t t0 = th_now_ms();
  TH_WAIT_FOR(ok, th_now_ms() - t0 > 4000 || atomic_load(&rec.n) > 0, 5000);
  CHECK_INT(atomic_load(&rec.n), ==, 0);
  CHECK_OK(dlock_lock_release(l));
  TH_WAIT_FOR(ok, atomic_load(&w.got_at) != 0 || atomic_load(&w.rc) != 1,
              WAIT_MS + 5000);
  CHECK(ok && atomic_load(&w.got_at) != 0);
  CHECK_INT(waiter_join(&w), ==, 0);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_etcd_stop(e);
}

static void t_watch_member_paused(void) {
  /* a waiter's watch stream sits on a member that stops answering: the
   * waiter still gets the lock within its wait (50 s), shorter than its
   * lease's TTL (60 s) that bounds its sleep, because its session's
   * keep-alive to that member fails and restarts the stream elsewhere */
  th_etcd_t *e = cluster(3);
  dlock_client_t *c = client(th_etcd_url(e));
  dlock_lock_t *l = lock_kind(c, "wpaused", DLOCK_REENTRANT);
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  waiter_t w;
  waiter_start(&w, th_etcd_url(e), "wpaused", DLOCK_REENTRANT, 50000);
  bool ok = false;
  TH_WAIT_FOR(ok, nwaiters(l) == 1, 10000);
  CHECK(ok);
  CHECK_OK(th_etcd_pause(e, 0)); /* both clients talk to member 0 */
  int64_t t0 = th_now_ms();
  CHECK_OK(dlock_lock_release(l));
  TH_WAIT_FOR(ok, atomic_load(&w.got_at) != 0 || atomic_load(&w.rc) != 1,
              55000);
  CHECK(ok);
  CHECKF(atomic_load(&w.got_at) != 0, "waiter failed: %d", atomic_load(&w.rc));
  printf("the waiter got it %lld ms after the release\n",
         (long long)(atomic_load(&w.got_at) - t0));
  CHECK_INT(waiter_join(&w), ==, 0);
  CHECK_OK(th_etcd_resume(e, 0));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_etcd_stop(e);
}

static void t_member_paused(void) {
  /* the member the client talks to stops answering (SIGSTOP: its port
   * still accepts): requests time out there and move on, the session
   * survives, a waiter is still woken */
  th_etcd_t *e = cluster(3);
  lost_rec_t rec = {0};
  dlock_client_t *c = client_ttl(th_etcd_url(e), 4000, on_lost, &rec);
  dlock_lock_t *l = lock_kind(c, "paused", DLOCK_REENTRANT);
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(l));
  CHECK_OK(th_etcd_pause(e, 0));
  CHECK_OK(dlock_lock_acquire(l, WAIT_MS, DLOCK_LEASE_WATCHDOG));
  waiter_t w;
  waiter_start(&w, th_etcd_url(e), "paused", DLOCK_REENTRANT, WAIT_MS);
  bool ok = false;
  TH_WAIT_FOR(ok, nwaiters(l) == 1, 20000);
  CHECK(ok);
  int64_t t0 = th_now_ms(); /* past the session's TTL */
  TH_WAIT_FOR(ok, th_now_ms() - t0 > 5000 || atomic_load(&rec.n) > 0, 6000);
  CHECK_INT(atomic_load(&rec.n), ==, 0);
  CHECK_OK(dlock_lock_release(l));
  TH_WAIT_FOR(ok, atomic_load(&w.got_at) != 0 || atomic_load(&w.rc) != 1,
              WAIT_MS + 5000);
  CHECK(ok && atomic_load(&w.got_at) != 0);
  CHECK_INT(waiter_join(&w), ==, 0);
  CHECK_OK(th_etcd_resume(e, 0));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_etcd_stop(e);
}

/* ----------------------------------------------- sent operations (async)
 *
 * An async try and release of a reentrant or fenced lock go out as sent
 * requests on the session thread (locks.c, "sent requests"): no pool
 * thread starts for them. */

/* An async try (wait 0) or release of l by this thread, run to its
 * callback: its rc, its detail printed on failure (*token: the try's
 * value). */
static int try_async(dlock_client_t *c, dlock_lock_t *l, int64_t *token) {
  th_async_outcome_t o = th_async_one(c, l, 0, true, 0, DLOCK_LEASE_WATCHDOG);
  if (token)
    *token = o.value;
  if (o.rc)
    fprintf(stderr, "try: %s: %s\n", dlock_err_name(o.rc), o.detail);
  return o.rc;
}

static int release_async(dlock_client_t *c, dlock_lock_t *l) {
  th_async_outcome_t o = th_async_one(c, l, 0, false, 0, 0);
  if (o.rc)
    fprintf(stderr, "release: %s: %s\n", dlock_err_name(o.rc), o.detail);
  return o.rc;
}

static dlock_client_t *client_cmd(const char *url, int64_t command_ms) {
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, command_ms < 1000 ? command_ms
                                                                  : 1000));
  CHECK_OK(dlock_options_set_command_timeout(o, command_ms));
  CHECK_OK(dlock_options_set_async_threads(o, 2));
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new(&c, url, o));
  dlock_options_free(o);
  return c;
}

#define SENT_PAIRS 40

static void t_sent_no_pool_thread(void) {
  /* warmed up by one blocking pair, a client's async tries (granted,
   * re-entered, refused) and releases start no thread: no pool thread
   * carries them */
  th_etcd_t *e = cluster(1);
  dlock_client_t *c = client_cmd(th_etcd_url(e), 3000);
  dlock_client_t *other = client_cmd(th_etcd_url(e), 3000);
  dlock_lock_t *l = lock_kind(c, "sent", DLOCK_FENCED);
  dlock_lock_t *busy = lock_kind(c, "sent-busy", DLOCK_REENTRANT);
  dlock_lock_t *obusy = lock_kind(other, "sent-busy", DLOCK_REENTRANT);
  CHECK_OK(dlock_lock_acquire(obusy, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(l));
  CHECK_RC(dlock_lock_acquire(busy, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  int fd = -1;
  CHECK_OK(dlock_client_fd(c, &fd));
  int before = th_thread_count();
  int64_t last = 0;
  for (int i = 0; i < SENT_PAIRS; i++) {
    int64_t token = 0, again = 0;
    CHECK_OK(try_async(c, l, &token));
    CHECKF(token > last, "token %lld after %lld", (long long)token,
           (long long)last);
    last = token;
    CHECK_OK(try_async(c, l, &again)); /* re-entered: the same hold */
    CHECK_INT(again, ==, token);
    CHECK_OK(release_async(c, l));
    CHECK_OK(release_async(c, l));
  }
  CHECK_RC(release_async(c, l), DLOCK_ENOTOWNER);
  th_async_outcome_t o =
      th_async_one(c, busy, 0, true, 0, DLOCK_LEASE_WATCHDOG);
  CHECK_INT(o.rc, ==, DLOCK_EBUSY);
  CHECKF(strstr(o.detail, "held by another") != NULL, "%s", o.detail);
  CHECK_INT(th_thread_count(), ==, before);
  /* the refused try left no key behind: no waiter on the holder */
  CHECK_INT(nwaiters(obusy), ==, 0);
  bool b = true;
  CHECK_OK(dlock_lock_is_locked(l, &b));
  CHECK(!b);
  CHECK_OK(dlock_lock_release(obusy));
  dlock_lock_free(l);
  dlock_lock_free(busy);
  dlock_lock_free(obusy);
  dlock_client_free(other);
  dlock_client_free(c);
  th_etcd_stop(e);
}

/* Another client finds `name` free, and takes and releases it (sent). */
static void check_free(th_etcd_t *e, const char *name) {
  dlock_client_t *c = client_cmd(th_etcd_url(e), 3000);
  dlock_lock_t *l = lock_kind(c, name, DLOCK_REENTRANT);
  bool b = true;
  CHECK_OK(dlock_lock_is_locked(l, &b));
  CHECKF(!b, "'%s' is still locked", name);
  CHECK_OK(try_async(c, l, NULL));
  CHECK_OK(release_async(c, l));
  dlock_lock_free(l);
  dlock_client_free(c);
}

static void t_sent_server_paused(void) {
  /* the server stops answering (SIGSTOP) while a sent try is under way:
   * its callback says DLOCK_EIOTIMEOUT, after the command timeout; once
   * the server runs again the lock works, and is free once the client
   * is gone. The timed-out try's transaction and the delete of its key
   * wait in the stopped server's sockets and may still be applied when
   * it resumes, as the blocking try's would (docs/ETCD.md, "Async
   * calls"): the delete, applied after the next grant, takes that hold's
   * key (its release then says DLOCK_ELOST); the put, applied after the
   * delete, leaves a key on the client's lease, which its close
   * revokes. */
  th_etcd_t *e = cluster(1);
  dlock_client_t *c = client_cmd(th_etcd_url(e), 1000);
  dlock_lock_t *l = lock_kind(c, "sent-paused", DLOCK_REENTRANT);
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(l));
  CHECK_OK(th_etcd_pause(e, 0));
  th_async_outcome_t o = th_async_one(c, l, 0, true, 0, DLOCK_LEASE_WATCHDOG);
  int rc = o.rc;
  CHECK_OK(th_etcd_resume(e, 0));
  CHECKF(rc == DLOCK_EIOTIMEOUT, "%s: %s", dlock_err_name(rc), o.detail);
  CHECK_OK(dlock_client_ping(c)); /* the server answers again */
  CHECK_OK(try_async(c, l, NULL));
  rc = release_async(c, l);
  CHECKF(rc == 0 || rc == DLOCK_ELOST, "%s: %s", dlock_err_name(rc),
         dlock_last_error());
  dlock_lock_free(l);
  dlock_client_free(c);
  check_free(e, "sent-paused");
  th_etcd_stop(e);
}

static void t_sent_server_restarted(void) {
  /* the server restarts between sent operations (its connections gone):
   * the next sent try and release still work, and leave the lock free */
  th_etcd_t *e = cluster(1);
  dlock_client_t *c = client_cmd(th_etcd_url(e), 3000);
  dlock_lock_t *l = lock_kind(c, "sent-restart", DLOCK_REENTRANT);
  CHECK_OK(try_async(c, l, NULL));
  CHECK_OK(release_async(c, l));
  for (int round = 0; round < 2; round++) {
    CHECK_OK(th_etcd_kill9(e, 0));
    CHECK_OK(th_etcd_up(e, 0));
    int rc = try_async(c, l, NULL);
    CHECKF(rc == 0, "round %d: %s: %s", round, dlock_err_name(rc),
           dlock_last_error());
    /* and between the try and its release */
    CHECK_OK(th_etcd_kill9(e, 0));
    CHECK_OK(th_etcd_up(e, 0));
    CHECK_OK(release_async(c, l));
  }
  check_free(e, "sent-restart"); /* while c lives: nothing lingers */
  dlock_lock_free(l);
  dlock_client_free(c);
  th_etcd_stop(e);
}

static void t_sent_server_down(void) {
  /* the server down (killed): a sent try and a sent release cannot
   * connect and hand over to the blocking calls, whose answer
   * (DLOCK_EUNAVAILABLE) they give; the hold is kept, and once the server
   * is back its release and the try work */
  th_etcd_t *e = cluster(1);
  dlock_client_t *c = client_cmd(th_etcd_url(e), 500);
  dlock_lock_t *held = lock_kind(c, "sent-down-held", DLOCK_REENTRANT);
  dlock_lock_t *l = lock_kind(c, "sent-down", DLOCK_FENCED);
  CHECK_OK(try_async(c, held, NULL));
  CHECK_OK(th_etcd_kill9(e, 0));
  int rc = release_async(c, held);
  CHECKF(rc == DLOCK_EUNAVAILABLE, "release: %s", dlock_err_name(rc));
  rc = try_async(c, l, NULL);
  CHECKF(rc == DLOCK_EUNAVAILABLE, "try: %s", dlock_err_name(rc));
  CHECK_OK(th_etcd_up(e, 0));
  CHECK_OK(dlock_client_ping(c));
  bool b = false;
  CHECK_OK(dlock_lock_is_held_by_thread(held, &b));
  CHECK(b);
  CHECK_OK(release_async(c, held));
  CHECK_OK(try_async(c, l, NULL));
  CHECK_OK(release_async(c, l));
  check_free(e, "sent-down-held");
  check_free(e, "sent-down");
  dlock_lock_free(held);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_etcd_stop(e);
}

/* -------------------------------------------------------------- bad input */

static void t_bad_url(void) {
  th_etcd_t *e = cluster(1);
  struct {
    const char *url;
    int code;
    const char *says;
  } rows[] = {
      {"etcd://", DLOCK_EURL,
       "no host (expected etcd://[user:password@]host[:port]"},
      {"etcd://127.0.0.1:0", DLOCK_EURL, "port must be a number from 1"},
      {"etcd://127.0.0.1:99999", DLOCK_EURL, "port must be a number from 1"},
      {"etcd://127.0.0.1:2379,", DLOCK_EURL, "an empty host in the list"},
      {"ETCDS://127.0.0.1:2379#f", DLOCK_EURL, "no path or query"},
      {"etcd://[::1%eth0]:2379", DLOCK_EURL, "bad character in an IPv6"},
      {"etcd://u:p%zz@127.0.0.1:2379", DLOCK_EURL, "invalid %-escape"},
      {"etcd://:pw@127.0.0.1:2379", DLOCK_EURL, "credentials must be"},
      {"etcd://127.0.0.1:2379/x", DLOCK_EURL, "no path"},
      {"etcd://host!:2379", DLOCK_EURL, "bad character"},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    dlock_client_t *c = NULL;
    int rc = dlock_client_new(&c, rows[i].url, NULL);
    CHECKF(rc == rows[i].code, "%s: %s (%s)", rows[i].url, dlock_strerror(rc),
           dlock_last_error());
    CHECKF(strstr(dlock_last_error(), rows[i].says) != NULL, "%s: %s",
           rows[i].url, dlock_last_error());
    CHECK(c == NULL);
  }
  /* nobody listens there */
  char url[64];
  snprintf(url, sizeof url, "etcd://127.0.0.1:%d", th_free_port());
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 500));
  CHECK_OK(dlock_options_set_command_timeout(o, 500));
  dlock_client_t *c = NULL;
  CHECK_RC(dlock_client_new(&c, url, o), DLOCK_EUNAVAILABLE);
  dlock_options_free(o);
  /* kinds etcd does not offer, named */
  c = client(th_etcd_url(e));
  dlock_latch_t *lt = NULL;
  CHECK_RC(dlock_latch_new(c, "latch", &lt), DLOCK_ENOTSUP);
  CHECK(strstr(dlock_last_error(), "etcd") != NULL);
  dlock_semaphore_t *s = NULL;
  CHECK_RC(dlock_semaphore_new(c, "sem", &s), DLOCK_ENOTSUP);
  CHECK(strstr(dlock_last_error(), "etcd") != NULL);
  dlock_client_free(c);
  th_etcd_stop(e);
}

/* ---------------------------------------------------------- read-write */

static void t_rw(void) {
  /* the recipe's layout: readers share, a writer waits for them and is
   * woken by the last one's release; readers wait for the writer */
  th_etcd_t *e = cluster(3);
  dlock_client_t *a = client(th_etcd_url(e)), *b = client(th_etcd_url(e));
  dlock_lock_t *ra = lock_kind(a, "rw", DLOCK_READ);
  dlock_lock_t *rb = lock_kind(b, "rw", DLOCK_READ);
  dlock_lock_t *wa = lock_kind(a, "rw", DLOCK_WRITE);
  CHECK_OK(dlock_lock_acquire(ra, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_acquire(ra, 0, DLOCK_LEASE_WATCHDOG)); /* reentry */
  CHECK_OK(dlock_lock_acquire(rb, 0, DLOCK_LEASE_WATCHDOG));
  /* a reader asking for the write side */
  CHECK_RC(dlock_lock_acquire(wa, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EDEADLK);
  waiter_t w;
  waiter_start(&w, th_etcd_url(e), "rw", DLOCK_WRITE, WAIT_MS);
  bool ok = false;
  TH_WAIT_FOR(ok, nwaiters(ra) == 1, 10000);
  CHECK(ok);
  dlock_lock_state_t *st = state(ra);
  CHECK_STR(st->kind, "read");
  CHECK_INT(st->nholders, ==, 2);
  CHECK_STR(st->holders[0].side, "read");
  dlock_lock_state_free(st);
  CHECK_OK(dlock_lock_release(ra));
  CHECK_OK(dlock_lock_release(ra));
  CHECK_INT(atomic_load(&w.got_at), ==, 0); /* b still reads */
  CHECK_OK(dlock_lock_release(rb));
  TH_WAIT_FOR(ok, atomic_load(&w.got_at) != 0 || atomic_load(&w.rc) != 1,
              WAIT_MS + 5000);
  CHECK(ok && atomic_load(&w.got_at) != 0);
  st = state(ra);
  CHECK_STR(st->kind, "write");
  dlock_lock_state_free(st);
  /* the writer holds: a reader is refused, and waits for it */
  CHECK_RC(dlock_lock_acquire(rb, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  CHECK_INT(nwaiters(ra), ==, 0); /* the refused try left no key */
  CHECK_INT(waiter_join(&w), ==, 0);
  CHECK_OK(dlock_lock_acquire(rb, WAIT_MS, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(rb));
  bool locked = true;
  CHECK_OK(dlock_lock_is_locked(rb, &locked));
  CHECK(!locked);
  dlock_lock_free(ra);
  dlock_lock_free(rb);
  dlock_lock_free(wa);
  dlock_client_free(a);
  dlock_client_free(b);
  th_etcd_stop(e);
}

static void t_rw_wait_lease_revoked(void) {
  /* a writer waiting behind a reader, its lease revoked: it waits on
   * under a new lease (with a new key) and gets the write side at the
   * reader's release, holding a real key: another reader is refused */
  th_etcd_t *e = cluster(1);
  dlock_client_t *b = client(th_etcd_url(e));
  dlock_lock_t *rb = lock_kind(b, "rwrev", DLOCK_READ);
  CHECK_OK(dlock_lock_acquire(rb, 0, DLOCK_LEASE_WATCHDOG));
  waiter_t w;
  waiter_start(&w, th_etcd_url(e), "rwrev", DLOCK_WRITE, WAIT_MS);
  bool ok = false;
  TH_WAIT_FOR(ok, nwaiters(rb) == 1, 10000);
  CHECK(ok);
  revoke_waiter_lease(e, rb);
  CHECK_INT(nwaiters(rb), ==, 0);
  CHECK_OK(dlock_lock_release(rb));
  TH_WAIT_FOR(ok, atomic_load(&w.got_at) != 0 || atomic_load(&w.rc) != 1,
              WAIT_MS + 5000);
  CHECK(ok);
  CHECKF(atomic_load(&w.got_at) != 0, "the writer gave up: %d",
         atomic_load(&w.rc));
  dlock_lock_state_t *st = state(rb);
  CHECK_STR(st->kind, "write");
  CHECK_INT(st->nholders, ==, 1);
  dlock_lock_state_free(st);
  CHECK_RC(dlock_lock_acquire(rb, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  CHECK_INT(waiter_join(&w), ==, 0);
  dlock_lock_free(rb);
  dlock_client_free(b);
  th_etcd_stop(e);
}

static void t_rw_shared_command(void) {
  /* the dlock command: -s holders share, an exclusive holder waits */
#ifndef DLOCK_CLI_PATH
  printf("skipped: the dlock command is not built\n");
#else
  th_etcd_t *e = cluster(1);
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           DLOCK_CLI_PATH " -u '%s' -s job " DLOCK_CLI_PATH
                          " -u '%s' -s -n job true",
           th_etcd_url(e), th_etcd_url(e));
  CHECK_INT(system(cmd), ==, 0); /* a shared holder inside a shared one */
  snprintf(cmd, sizeof cmd,
           DLOCK_CLI_PATH " -u '%s' -s job " DLOCK_CLI_PATH
                          " -u '%s' -n job true 2>/dev/null",
           th_etcd_url(e), th_etcd_url(e));
  int st = system(cmd);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1); /* exclusive refused */
  th_etcd_stop(e);
#endif
}

/* ---------------------------------------------------------------- etcdctl */

/* Starts `etcdctl lock NAME` (ETCDCTL_API=3) with its stdout on *out_fd. */
static pid_t etcdctl_lock(th_etcd_t *e, const char *name, int *out_fd) {
  int p[2];
  CHECK(pipe2(p, O_CLOEXEC) == 0);
  char endpoints[300];
  snprintf(endpoints, sizeof endpoints, "--endpoints=%s", th_etcd_endpoints(e));
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    dup2(p[1], 1);
    setenv("ETCDCTL_API", "3", 1);
    execl(ETCDCTL, ETCDCTL, endpoints, "lock", name, (char *)NULL);
    _exit(127);
  }
  close(p[1]);
  *out_fd = p[0];
  return pid;
}

static void t_etcdctl_holds(void) {
  /* etcdctl lock holds: dlock is refused, waits, and gets it when etcdctl
   * lets go */
  th_etcd_t *e = cluster(3);
  int fd = -1;
  pid_t ctl = etcdctl_lock(e, "interop", &fd);
  char line[256];
  CHECK(read_line(fd, line, sizeof line, 20000));
  CHECKF(strncmp(line, "interop/", 8) == 0, "etcdctl printed '%s'", line);
  dlock_client_t *c = client(th_etcd_url(e));
  dlock_lock_t *l = lock_kind(c, "interop", DLOCK_REENTRANT);
  CHECK_RC(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  waiter_t w;
  waiter_start(&w, th_etcd_url(e), "interop", DLOCK_REENTRANT, WAIT_MS);
  bool ok = false;
  TH_WAIT_FOR(ok, nwaiters(l) == 1, 10000);
  CHECK(ok);
  CHECK_INT(atomic_load(&w.got_at), ==, 0);
  CHECK(kill(ctl, SIGTERM) == 0);
  TH_WAIT_FOR(ok, atomic_load(&w.got_at) != 0 || atomic_load(&w.rc) != 1,
              WAIT_MS + 5000);
  CHECK(ok && atomic_load(&w.got_at) != 0);
  reap_within(ctl, 10000);
  close(fd);
  CHECK_INT(waiter_join(&w), ==, 0);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_etcd_stop(e);
}

static void t_dlock_holds(void) {
  /* dlock holds: etcdctl lock waits, and gets it at dlock's release */
  th_etcd_t *e = cluster(3);
  dlock_client_t *c = client(th_etcd_url(e));
  dlock_lock_t *l = lock_kind(c, "interop", DLOCK_REENTRANT);
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  int fd = -1;
  pid_t ctl = etcdctl_lock(e, "interop", &fd);
  bool ok = false;
  TH_WAIT_FOR(ok, nwaiters(l) == 1, 20000);
  CHECK(ok);
  struct pollfd pfd = {.fd = fd, .events = POLLIN};
  CHECKF(poll(&pfd, 1, 0) == 0, "etcdctl got the lock dlock holds");
  CHECK_OK(dlock_lock_release(l));
  char line[256];
  CHECK(read_line(fd, line, sizeof line, WAIT_MS));
  CHECKF(strncmp(line, "interop/", 8) == 0, "etcdctl printed '%s'", line);
  /* now etcdctl holds it */
  CHECK_RC(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  kill(ctl, SIGTERM);
  reap_within(ctl, 10000);
  close(fd);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_etcd_stop(e);
}

/* ------------------------------------------------------------------- auth */

static void t_auth(void) {
  /* etcd's auth: user and password in the URL give a token; a wrong one
   * is DLOCK_EAUTH without the password in the message; no credentials
   * are refused at the first lock request with a hint */
  th_etcd_t *e = cluster(1);
  char cmd[600];
  snprintf(cmd, sizeof cmd,
           "ETCDCTL_API=3 " ETCDCTL " --endpoints=%s user add root "
           "--new-user-password=s3cret --interactive=false >/dev/null && "
           "ETCDCTL_API=3 " ETCDCTL " --endpoints=%s auth enable >/dev/null",
           th_etcd_endpoints(e), th_etcd_endpoints(e));
  CHECK(system(cmd) == 0);
  char good[300], bad[300];
  snprintf(good, sizeof good, "etcd://root:s3cret@%s",
           th_etcd_url(e) + strlen("etcd://"));
  snprintf(bad, sizeof bad, "etcd://root:wrongpw@%s",
           th_etcd_url(e) + strlen("etcd://"));
  dlock_client_t *c = client(good);
  dlock_lock_t *l = lock_kind(c, "auth", DLOCK_FENCED);
  int64_t t = 0;
  CHECK_OK(dlock_lock_acquire_fenced(l, 0, DLOCK_LEASE_WATCHDOG, &t));
  waiter_t w;
  waiter_start(&w, good, "auth", DLOCK_FENCED, WAIT_MS);
  bool ok = false;
  TH_WAIT_FOR(ok, nwaiters(l) == 1, 10000);
  CHECK(ok);
  CHECK_OK(dlock_lock_release(l));
  TH_WAIT_FOR(ok, atomic_load(&w.got_at) != 0 || atomic_load(&w.rc) != 1,
              WAIT_MS + 5000);
  CHECK(ok && atomic_load(&w.got_at) != 0);
  CHECK_INT(waiter_join(&w), ==, 0);
  /* the credentials are percent-decoded, as in every backend's URL */
  char enc[300];
  snprintf(enc, sizeof enc, "etcd://r%%6Fot:s3%%63ret@%s",
           th_etcd_url(e) + strlen("etcd://"));
  dlock_client_t *c2 = client(enc);
  dlock_lock_t *l2 = lock_kind(c2, "auth-enc", DLOCK_FENCED);
  CHECK_OK(dlock_lock_acquire_fenced(l2, 0, DLOCK_LEASE_WATCHDOG, &t));
  CHECK_OK(dlock_lock_release(l2));
  dlock_lock_free(l2);
  dlock_client_free(c2);
  dlock_client_t *x = NULL;
  CHECK_RC(dlock_client_new(&x, bad, NULL), DLOCK_EAUTH);
  CHECK(strstr(dlock_last_error(), "wrongpw") == NULL);
  dlock_client_t *anon = client(th_etcd_url(e));
  dlock_lock_t *la = lock_kind(anon, "auth", DLOCK_FENCED);
  CHECK_RC(dlock_lock_acquire_fenced(la, 0, DLOCK_LEASE_WATCHDOG, &t),
           DLOCK_EAUTH);
  CHECK(strstr(dlock_last_error(), "user:password") != NULL);
  dlock_lock_free(la);
  dlock_client_free(anon);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_etcd_stop(e);
}

/* --------------------------------------------------------------------- Go */

/* The Go locker: the one ctest's test_etcd.go_build made, else
 * tests/interop/go built into dir; false (after saying why) without Go. */
static bool build_go_locker(const char *dir, char *exe, size_t len) {
  if (system("command -v go >/dev/null 2>&1") != 0) {
    /* CI sets DLOCK_REQUIRE_INTEROP=1: there a missing Go is a failure */
    const char *req = getenv("DLOCK_REQUIRE_INTEROP");
    CHECKF(!req || strcmp(req, "1") != 0,
           "no Go toolchain on PATH, and DLOCK_REQUIRE_INTEROP=1");
    printf("skipped: no Go toolchain on PATH (Go interop)\n");
    return false;
  }
  if (access(DLOCK_GO_LOCKER, X_OK) == 0) {
    snprintf(exe, len, "%s", DLOCK_GO_LOCKER);
    return true;
  }
  snprintf(exe, len, "%s/etcd-go-locker", dir);
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "cd '%s' && GOFLAGS=-mod=mod go build -o '%s' . >'%s/build.log' "
           "2>&1",
           DLOCK_GO_INTEROP_DIR, exe, dir);
  int st = system(cmd);
  CHECKF(st == 0, "go build of %s failed (see its log: %s/build.log)",
         DLOCK_GO_INTEROP_DIR, dir);
  return true;
}

/* A scratch directory DIR (a mkdtemp template) for one Go interop case and
 * the locker's path in EXE; false (and nothing left behind) when the case is
 * skipped for want of Go. */
static bool go_workdir_open(char *dir, char *exe, size_t len) {
  CHECK(mkdtemp(dir));
  if (build_go_locker(dir, exe, len))
    return true;
  rmdir(dir);
  return false;
}

/* Removes what go_workdir_open made: the locker it built (not go_build's
 * shared one), the build log and the directory. */
static void go_workdir_close(const char *dir, const char *exe) {
  if (strncmp(exe, dir, strlen(dir)) == 0)
    unlink(exe);
  char log[320];
  snprintf(log, sizeof log, "%s/build.log", dir);
  unlink(log);
  rmdir(dir);
}

/* Starts the Go locker on NAME; its stdin and stdout. */
static pid_t go_locker(const char *exe, th_etcd_t *e, const char *name,
                       const char *mode, int *in_fd, int *out_fd) {
  int in[2], out[2];
  CHECK(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0);
  char endpoints[300];
  snprintf(endpoints, sizeof endpoints, "%s", th_etcd_endpoints(e));
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    execl(exe, exe, endpoints, name, mode, (char *)NULL);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  *in_fd = in[1];
  *out_fd = out[0];
  return pid;
}

static void t_go_interop(void) {
  /* Go's concurrency.Mutex and dlock exclude each other, both ways */
  char dir[] = "/tmp/dlock-go-XXXXXX", exe[300];
  if (!go_workdir_open(dir, exe, sizeof exe))
    return;
  th_etcd_t *e = cluster(3);
  dlock_client_t *c = client(th_etcd_url(e));
  dlock_lock_t *l = lock_kind(c, "gomutex", DLOCK_FENCED);
  int64_t t = 0;
  /* Go holds */
  int in = -1, out = -1;
  pid_t go = go_locker(exe, e, "gomutex", "mutex", &in, &out);
  char line[256], key[200];
  long long rev = 0;
  CHECK(read_line(out, line, sizeof line, 30000));
  CHECKF(sscanf(line, "held %199s %lld", key, &rev) == 2, "Go said '%s'", line);
  CHECK(strncmp(key, "gomutex/", 8) == 0);
  /* the state (`dlock --status`) names Go's holder by its key and create
   * revision, the token dlock would see */
  dlock_lock_state_t *st = state(l);
  CHECK_INT(st->nholders, ==, 1);
  char want[300];
  snprintf(want, sizeof want, "(no owner recorded) key=%s rev=%lld lease=", key,
           rev);
  CHECKF(strncmp(st->holders[0].owner, want, strlen(want)) == 0,
         "the holder is '%s', not '%s...'", st->holders[0].owner, want);
  CHECK_INT(st->token, ==, rev);
  dlock_lock_state_free(st);
  CHECK_RC(dlock_lock_acquire_fenced(l, 0, DLOCK_LEASE_WATCHDOG, &t),
           DLOCK_EBUSY);
  waiter_t w;
  waiter_start(&w, th_etcd_url(e), "gomutex", DLOCK_FENCED, WAIT_MS);
  bool ok = false;
  TH_WAIT_FOR(ok, nwaiters(l) == 1, 10000);
  CHECK(ok);
  CHECK_INT(atomic_load(&w.got_at), ==, 0);
  CHECK(write(in, "\n", 1) == 1);
  CHECK(read_line(out, line, sizeof line, 20000));
  CHECK_STR(line, "released");
  TH_WAIT_FOR(ok, atomic_load(&w.got_at) != 0 || atomic_load(&w.rc) != 1,
              WAIT_MS + 5000);
  CHECK(ok && atomic_load(&w.got_at) != 0);
  CHECK_INT(atomic_load(&w.token), >, rev);
  CHECK_INT(waiter_join(&w), ==, 0);
  CHECK_INT(reap_within(go, 20000), ==, 0);
  close(in);
  close(out);
  /* dlock holds */
  CHECK_OK(dlock_lock_acquire_fenced(l, 0, DLOCK_LEASE_WATCHDOG, &t));
  go = go_locker(exe, e, "gomutex", "mutex", &in, &out);
  TH_WAIT_FOR(ok, nwaiters(l) == 1, 30000);
  CHECK(ok);
  struct pollfd pfd = {.fd = out, .events = POLLIN};
  CHECKF(poll(&pfd, 1, 0) == 0, "Go got the lock dlock holds");
  CHECK_OK(dlock_lock_release(l));
  CHECK(read_line(out, line, sizeof line, WAIT_MS));
  CHECKF(sscanf(line, "held %199s %lld", key, &rev) == 2, "Go said '%s'", line);
  CHECK_INT(rev, >, t);
  CHECK(write(in, "\n", 1) == 1);
  CHECK(read_line(out, line, sizeof line, 20000));
  CHECK_STR(line, "released");
  CHECK_INT(reap_within(go, 20000), ==, 0);
  close(in);
  close(out);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_etcd_stop(e);
  go_workdir_close(dir, exe);
}

static void t_go_interop_rw(void) {
  /* the recipes' RWMutex in Go and dlock's read-write lock: one layout */
  char dir[] = "/tmp/dlock-go-XXXXXX", exe[300];
  if (!go_workdir_open(dir, exe, sizeof exe))
    return;
  th_etcd_t *e = cluster(3);
  dlock_client_t *c = client(th_etcd_url(e));
  dlock_lock_t *r = lock_kind(c, "gorw", DLOCK_READ);
  /* a Go writer holds: a dlock reader is refused, waits, gets it */
  int in = -1, out = -1;
  pid_t go = go_locker(exe, e, "gorw", "write", &in, &out);
  char line[256];
  CHECK(read_line(out, line, sizeof line, 30000));
  CHECK_STR(line, "held - 0");
  CHECK_RC(dlock_lock_acquire(r, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  waiter_t w;
  waiter_start(&w, th_etcd_url(e), "gorw", DLOCK_READ, WAIT_MS);
  bool ok = false;
  TH_WAIT_FOR(ok, nwaiters(r) == 1, 10000);
  CHECK(ok);
  CHECK(write(in, "\n", 1) == 1);
  CHECK(read_line(out, line, sizeof line, 20000));
  CHECK_STR(line, "released");
  TH_WAIT_FOR(ok, atomic_load(&w.got_at) != 0 || atomic_load(&w.rc) != 1,
              WAIT_MS + 5000);
  CHECK(ok && atomic_load(&w.got_at) != 0);
  CHECK_INT(waiter_join(&w), ==, 0);
  CHECK_INT(reap_within(go, 20000), ==, 0);
  close(in);
  close(out);
  /* dlock reads: a Go reader shares it, a Go writer waits for both */
  CHECK_OK(dlock_lock_acquire(r, 0, DLOCK_LEASE_WATCHDOG));
  int in2 = -1, out2 = -1;
  pid_t goread = go_locker(exe, e, "gorw", "read", &in2, &out2);
  CHECK(read_line(out2, line, sizeof line, 30000));
  CHECK_STR(line, "held - 0");
  go = go_locker(exe, e, "gorw", "write", &in, &out);
  TH_WAIT_FOR(ok, nwaiters(r) == 1, 30000);
  CHECK(ok);
  CHECK(write(in2, "\n", 1) == 1);
  CHECK(read_line(out2, line, sizeof line, 20000));
  CHECK_STR(line, "released");
  CHECK_INT(reap_within(goread, 20000), ==, 0);
  struct pollfd pfd = {.fd = out, .events = POLLIN};
  CHECKF(poll(&pfd, 1, 0) == 0, "the Go writer got in beside a dlock reader");
  CHECK_OK(dlock_lock_release(r));
  CHECK(read_line(out, line, sizeof line, WAIT_MS));
  CHECK_STR(line, "held - 0");
  CHECK(write(in, "\n", 1) == 1);
  CHECK(read_line(out, line, sizeof line, 20000));
  CHECK_STR(line, "released");
  CHECK_INT(reap_within(go, 20000), ==, 0);
  close(in);
  close(out);
  close(in2);
  close(out2);
  dlock_lock_free(r);
  dlock_client_free(c);
  th_etcd_stop(e);
  go_workdir_close(dir, exe);
}

static void t_go_conformance(void) {
  /* the layout, step by step: concurrency.Mutex driven by Go (and `etcdctl
   * lock`) on one fresh etcd and dlock (the interop helper) on a twin, their
   * keyspaces dumped,
   * normalised and compared by the Go program (tests/interop/go/conform.go,
   * docs/ETCD.md "Conformance with clientv3"); it prints both dumps of
   * every step and the differences, and exits 0 only when there are none
   * beyond docs/ETCD.md's deliberate ones */
  char dir[] = "/tmp/dlock-go-XXXXXX", exe[300];
  if (!go_workdir_open(dir, exe, sizeof exe))
    return;
  CHECKF(access(DLOCK_INTEROP_HELPER, X_OK) == 0,
         "%s was not built (target dlock_interop)", DLOCK_INTEROP_HELPER);
  th_etcd_t *a = cluster(1), *b = cluster(1);
  char epa[300], epb[300], urlb[300];
  snprintf(epa, sizeof epa, "%s", th_etcd_endpoints(a));
  snprintf(epb, sizeof epb, "%s", th_etcd_endpoints(b));
  snprintf(urlb, sizeof urlb, "%s", th_etcd_url(b));
  fflush(stdout);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    setenv("DLOCK_ETCDCTL", ETCDCTL, 1);
    execl(exe, exe, "conform", epa, epb, urlb, DLOCK_INTEROP_HELPER,
          DLOCK_ETCD_MD, (char *)NULL);
    _exit(127);
  }
  /* bounded: every wait of the program is bounded (20 s) too */
  int rc = reap_within(pid, 90000);
  CHECKF(rc == 0,
         "the Go and dlock states differ (exit status %d; the dumps and the "
         "differences are printed above)",
         rc);
  th_etcd_stop(a);
  th_etcd_stop(b);
  go_workdir_close(dir, exe);
}

static void t_go_race(void) {
  /* a mixed race: two Go goroutines (concurrency.Mutex) and two dlock
   * processes add 1 to one counter file 50 times each under one lock
   * (tests/interop/go/race.go): exactly 200, tokens (create revisions)
   * growing in increment order */
  char dir[] = "/tmp/dlock-go-XXXXXX", exe[300];
  if (!go_workdir_open(dir, exe, sizeof exe))
    return;
  CHECKF(access(DLOCK_INTEROP_HELPER, X_OK) == 0,
         "%s was not built (target dlock_interop)", DLOCK_INTEROP_HELPER);
  th_etcd_t *e = cluster(1);
  char ep[300], url[300];
  snprintf(ep, sizeof ep, "%s", th_etcd_endpoints(e));
  snprintf(url, sizeof url, "%s", th_etcd_url(e));
  fflush(stdout);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    execl(exe, exe, "race", ep, url, DLOCK_INTEROP_HELPER, (char *)NULL);
    _exit(127);
  }
  int rc = reap_within(pid, 90000);
  CHECKF(rc == 0, "the race failed (exit status %d; printed above)", rc);
  th_etcd_stop(e);
  go_workdir_close(dir, exe);
}

/* ---------------------------------------------------------------- command */

static void t_command(void) {
  /* the dlock command with an etcd URL: the child gets DLOCK_TOKEN, and
   * ETCD_LOCK_KEY / ETCD_LOCK_REV as etcdctl lock's exec mode sets them;
   * -n is refused while etcdctl holds the lock; --status shows the holder */
#ifndef DLOCK_CLI_PATH
  printf("skipped: the dlock command is not built\n");
#else
  th_etcd_t *e = cluster(3);
  char cmd[1024], out[512];
  snprintf(cmd, sizeof cmd,
           "ETCD_LOCK_KEY=inherited " DLOCK_CLI_PATH " -u '%s' job sh -c "
           "'echo \"$DLOCK_TOKEN $ETCD_LOCK_KEY $ETCD_LOCK_REV\"'",
           th_etcd_url(e));
  FILE *p = popen(cmd, "r");
  CHECK(p);
  CHECK(fgets(out, sizeof out, p) != NULL);
  CHECK_INT(pclose(p), ==, 0);
  long long tok = 0, rev = 0;
  char key[256];
  CHECKF(sscanf(out, "%lld %255s %lld", &tok, key, &rev) == 3, "got '%s'", out);
  CHECK(tok > 0 && tok == rev);
  CHECKF(strncmp(key, "job/", 4) == 0, "key '%s'", key);
  /* etcdctl holds: -n gives up, --status names the holder */
  int fd = -1;
  pid_t ctl = etcdctl_lock(e, "job", &fd);
  char line[256];
  CHECK(read_line(fd, line, sizeof line, 20000));
  snprintf(cmd, sizeof cmd, DLOCK_CLI_PATH " -u '%s' -n job true 2>/dev/null",
           th_etcd_url(e));
  int st = system(cmd);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1);
  snprintf(cmd, sizeof cmd, DLOCK_CLI_PATH " -u '%s' --status job",
           th_etcd_url(e));
  p = popen(cmd, "r");
  CHECK(p);
  bool named = false;
  while (fgets(out, sizeof out, p))
    if (strstr(out, "holder:") && strstr(out, line))
      named = true;
  CHECK_INT(pclose(p), ==, 0); /* exit 0: held */
  CHECKF(named, "--status did not name etcdctl's key %s", line);
  kill(ctl, SIGTERM);
  reap_within(ctl, 10000);
  close(fd);
  th_etcd_stop(e);
#endif
}

static void t_command_lost(void) {
  /* the session's lease revoked under `dlock NAME COMMAND`: the command is
   * told it lost the lock (--on-lost term: SIGTERM, exit 75) */
#ifndef DLOCK_CLI_PATH
  printf("skipped: the dlock command is not built\n");
#else
  th_etcd_t *e = cluster(1);
  int p[2];
  CHECK(pipe2(p, O_CLOEXEC) == 0);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    dup2(p[1], 1);
    execl(DLOCK_CLI_PATH, DLOCK_CLI_PATH, "-u", th_etcd_url(e), "--on-lost",
          "term", "job", "sh", "-c", "echo \"$ETCD_LOCK_KEY\"; exec sleep 60",
          (char *)NULL);
    _exit(127);
  }
  close(p[1]);
  char key[256];
  CHECK(read_line(p[0], key, sizeof key, 20000));
  const char *hex = strrchr(key, '/');
  CHECKF(hex && strncmp(key, "job/", 4) == 0, "key '%s'", key);
  char cmd[600];
  snprintf(cmd, sizeof cmd,
           "ETCDCTL_API=3 " ETCDCTL " --endpoints=%s lease revoke %s "
           ">/dev/null",
           th_etcd_endpoints(e), hex + 1);
  CHECK(system(cmd) == 0);
  /* the keep-alive (every 20 s with the default 60 s TTL) finds it gone */
  CHECK_INT(reap_within(pid, 40000), ==, 75);
  close(p[0]);
  th_etcd_stop(e);
#endif
}

static void t_command_wait_lease_revoked(void) {
  /* `dlock -w 30 NAME COMMAND` waiting behind a holder, its lease revoked
   * with etcdctl: it waits on under a new lease, and at the release runs
   * its command and exits with its status (0) */
#ifndef DLOCK_CLI_PATH
  printf("skipped: the dlock command is not built\n");
#else
  th_etcd_t *e = cluster(1);
  dlock_client_t *h = client(th_etcd_url(e));
  dlock_lock_t *hl = lock_kind(h, "job", DLOCK_FENCED);
  CHECK_OK(dlock_lock_acquire(hl, 0, DLOCK_LEASE_WATCHDOG));
  int p[2];
  CHECK(pipe2(p, O_CLOEXEC) == 0);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    dup2(p[1], 1);
    execl(DLOCK_CLI_PATH, DLOCK_CLI_PATH, "-u", th_etcd_url(e), "-w", "30",
          "job", "echo", "ran", (char *)NULL);
    _exit(127);
  }
  close(p[1]);
  bool ok = false;
  TH_WAIT_FOR(ok, nwaiters(hl) == 1, 20000);
  CHECK(ok);
  revoke_waiter_lease(e, hl);
  CHECK_INT(nwaiters(hl), ==, 0);
  CHECK_OK(dlock_lock_release(hl));
  char line[64];
  CHECK(read_line(p[0], line, sizeof line, 40000));
  CHECK_STR(line, "ran");
  CHECK_INT(reap_within(pid, 20000), ==, 0);
  close(p[0]);
  dlock_lock_free(hl);
  dlock_client_free(h);
  th_etcd_stop(e);
#endif
}

/* ---------------------------------------------------------------- TLS */

/* A cluster serving TLS with the test CA's certificate for localhost and
 * 127.0.0.1; mutual: clients must show a certificate of that CA. */
static th_etcd_t *tls_cluster(int n, bool mutual) {
  CHECKF(th_certs_dir() != NULL, "openssl could not make certificates");
  char cert[512], key[512], ca[512], ccert[512], ckey[512];
  snprintf(cert, sizeof cert, "%s", th_cert("server.crt"));
  snprintf(key, sizeof key, "%s", th_cert("server.key"));
  snprintf(ca, sizeof ca, "%s", th_cert("ca.crt"));
  snprintf(ccert, sizeof ccert, "%s", th_cert("client.crt"));
  snprintf(ckey, sizeof ckey, "%s", th_cert("client.key"));
  th_etcd_tls_t tls = {.cert_file = cert,
                       .key_file = key,
                       .ca_file = ca,
                       .client_cert_auth = mutual,
                       .client_cert_file = ccert,
                       .client_key_file = ckey};
  th_etcd_t *e = th_etcd_start_tls(n, &tls);
  CHECKF(e != NULL, "could not start a %d-member etcd cluster with TLS", n);
  return e;
}

typedef struct tls_opts {
  const char *ca;         /* a file under th_certs_dir(), or NULL */
  const char *cert, *key; /* likewise */
  const char *sni;
  bool insecure;
  bool tls_switch;
} tls_opts_t;

/* dlock_client_new on url with those options; its code, *out the client
 * (or NULL); prints the outcome. */
static int tls_client(const char *url, const tls_opts_t *t,
                      dlock_client_t **out) {
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 3000));
  CHECK_OK(dlock_options_set_command_timeout(o, 5000));
  if (t->tls_switch)
    CHECK_OK(dlock_options_set_tls(o, true));
  if (t->ca)
    CHECK_OK(dlock_options_set_tls_ca(o, th_cert(t->ca), NULL));
  if (t->cert)
    CHECK_OK(dlock_options_set_tls_cert(o, th_cert(t->cert), th_cert(t->key)));
  if (t->sni)
    CHECK_OK(dlock_options_set_tls_sni(o, t->sni));
  if (t->insecure)
    CHECK_OK(dlock_options_set_tls_insecure(o, true));
  *out = NULL;
  int64_t t0 = th_now_ms();
  int rc = dlock_client_new(out, url, o);
  dlock_options_free(o);
  printf("%s ca=%s cert=%s sni=%s%s -> %s in %lld ms \"%s\"\n", url,
         t->ca ? t->ca : "-", t->cert ? t->cert : "-", t->sni ? t->sni : "-",
         t->insecure ? " insecure" : "", dlock_err_name(rc),
         (long long)(th_now_ms() - t0), rc ? dlock_last_error() : "");
  return rc;
}

/* The failure's detail is one line containing `want`. */
static void check_line(const char *want) {
  const char *d = dlock_last_error();
  CHECKF(strstr(d, want), "\"%s\" does not say \"%s\"", d, want);
  CHECKF(!strchr(d, '\n'), "the detail is not one line: \"%s\"", d);
}

/* a holds, b's waiter (its own client) is woken by the release through
 * its watch stream, which is TLS too. */
static void check_tls_lock(dlock_client_t *a, const char *url,
                           const tls_opts_t *t, const char *name) {
  dlock_lock_t *la = lock_kind(a, name, DLOCK_FENCED);
  int64_t tok = 0;
  CHECK_OK(dlock_lock_acquire_fenced(la, 0, DLOCK_LEASE_WATCHDOG, &tok));
  CHECK(tok > 0);
  dlock_client_t *b = NULL;
  CHECK_OK(tls_client(url, t, &b));
  dlock_lock_t *lb = lock_kind(b, name, DLOCK_FENCED);
  CHECK_RC(dlock_lock_acquire(lb, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  CHECK_OK(dlock_lock_release(la));
  int64_t tok2 = 0;
  CHECK_OK(dlock_lock_acquire_fenced(lb, WAIT_MS, DLOCK_LEASE_WATCHDOG, &tok2));
  CHECK(tok2 > tok);
  CHECK_OK(dlock_lock_release(lb));
  dlock_lock_free(lb);
  dlock_client_free(b);
  dlock_lock_free(la);
}

static void t_tls(void) {
  /* etcds:// against members with --cert-file/--key-file: the right CA
   * works (and a waiter is woken over TLS), the wrong CA, a name not in
   * the certificate and a missing file each fail at once with DLOCK_ETLS
   * and one line; --sni names the host to verify; insecure accepts any */
  th_etcd_t *e = tls_cluster(3, false);
  const char *url = th_etcd_url(e);
  CHECK(strncmp(url, "etcds://", 8) == 0);
  dlock_client_t *c = NULL;
  tls_opts_t ok = {.ca = "ca.crt"};
  CHECK_OK(tls_client(url, &ok, &c));
  check_tls_lock(c, url, &ok, "tls-lock");
  dlock_client_free(c);

  tls_opts_t wrong_ca = {.ca = "otherca.crt"};
  CHECK_RC(tls_client(url, &wrong_ca, &c), DLOCK_ETLS);
  check_line("certificate");
  check_line("check the CA file");
  CHECK(c == NULL);

  tls_opts_t wrong_name = {.ca = "ca.crt", .sni = "other.example"};
  CHECK_RC(tls_client(url, &wrong_name, &c), DLOCK_ETLS);
  check_line("does not name this host");

  tls_opts_t sni = {.ca = "ca.crt", .sni = "localhost"};
  CHECK_OK(tls_client(url, &sni, &c));
  dlock_client_free(c);

  tls_opts_t insecure = {.ca = "otherca.crt", .insecure = true};
  CHECK_OK(tls_client(url, &insecure, &c));
  dlock_client_free(c);

  tls_opts_t missing = {.ca = "no-such-ca.crt"};
  CHECK_RC(tls_client(url, &missing, &c), DLOCK_ETLS);
  check_line("cannot read the CA file");
  check_line("no-such-ca.crt");

  /* the TLS switch turns etcd:// into HTTPS; without it, plain HTTP to a
   * TLS port is refused with a hint */
  char plain[256];
  snprintf(plain, sizeof plain, "etcd://%s", url + strlen("etcds://"));
  tls_opts_t none = {0};
  CHECK(tls_client(plain, &none, &c) != 0);
  check_line("etcds://");
  tls_opts_t sw = {.ca = "ca.crt", .tls_switch = true};
  CHECK_OK(tls_client(plain, &sw, &c));
  dlock_client_free(c);
  th_etcd_stop(e);
}

static void t_tls_mutual(void) {
  /* --client-cert-auth: a certificate of the trusted CA works, none or
   * one of another CA fails with DLOCK_ETLS and one line */
  th_etcd_t *e = tls_cluster(1, true);
  const char *url = th_etcd_url(e);
  dlock_client_t *c = NULL;
  tls_opts_t with = {.ca = "ca.crt", .cert = "client.crt", .key = "client.key"};
  CHECK_OK(tls_client(url, &with, &c));
  check_tls_lock(c, url, &with, "mtls-lock");
  dlock_client_free(c);

  tls_opts_t without = {.ca = "ca.crt"};
  CHECK_RC(tls_client(url, &without, &c), DLOCK_ETLS);
  check_line("TLS");
  check_line("client certificate");
  CHECK(c == NULL);

  tls_opts_t other = {
      .ca = "ca.crt", .cert = "otherclient.crt", .key = "otherclient.key"};
  CHECK_RC(tls_client(url, &other, &c), DLOCK_ETLS);
  check_line("TLS");
  th_etcd_stop(e);
}

static void t_tls_command(void) {
  /* the dlock command on etcds:// with --cacert, --cert and --key (mutual
   * TLS); without a client certificate or with the wrong CA it exits 69
   * with one line */
#ifndef DLOCK_CLI_PATH
  printf("skipped: the dlock command is not built\n");
#else
  th_etcd_t *e = tls_cluster(1, true);
  char ca[512], oca[512], crt[512], key[512];
  snprintf(ca, sizeof ca, "%s", th_cert("ca.crt"));
  snprintf(oca, sizeof oca, "%s", th_cert("otherca.crt"));
  snprintf(crt, sizeof crt, "%s", th_cert("client.crt"));
  snprintf(key, sizeof key, "%s", th_cert("client.key"));
  char cmd[3000], out[512];
  snprintf(cmd, sizeof cmd,
           DLOCK_CLI_PATH " -u '%s' --cacert '%s' --cert '%s' --key '%s' "
                          "job sh -c 'echo \"$DLOCK_TOKEN $ETCD_LOCK_REV\"'",
           th_etcd_url(e), ca, crt, key);
  FILE *p = popen(cmd, "r");
  CHECK(p);
  CHECK(fgets(out, sizeof out, p) != NULL);
  CHECK_INT(pclose(p), ==, 0);
  long long tok = 0, rev = 0;
  CHECKF(sscanf(out, "%lld %lld", &tok, &rev) == 2 && tok > 0 && tok == rev,
         "got '%s'", out);
  const char *bad[2] = {"--cacert '%s' job true 2>&1",
                        "--cacert '%s' --cert '%s' --key '%s' job true 2>&1"};
  for (int i = 0; i < 2; i++) {
    char tail[2048];
    if (i == 0)
      snprintf(tail, sizeof tail, bad[0], ca);
    else
      snprintf(tail, sizeof tail, bad[1], oca, crt, key);
    snprintf(cmd, sizeof cmd, DLOCK_CLI_PATH " -u '%s' %s", th_etcd_url(e),
             tail);
    p = popen(cmd, "r");
    CHECK(p);
    char all[2048] = "";
    size_t got = fread(all, 1, sizeof all - 1, p);
    all[got] = '\0';
    int st = pclose(p);
    printf("dlock %s -> %d: %s", i ? "--cacert otherca" : "no --cert",
           WIFEXITED(st) ? WEXITSTATUS(st) : -1, all);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 69);
    CHECKF(strstr(all, "TLS") != NULL, "stderr: %s", all);
    CHECKF(strchr(all, '\n') == all + strlen(all) - 1, "not one line: %s", all);
    CHECKF(strstr(all, i ? "check the CA file" : "client certificate"),
           "stderr: %s", all);
  }
  th_etcd_stop(e);
#endif
}

static const check_case_t cases[] = {
    {"basic", t_basic},
    {"try_refused", t_try_refused},
    {"waiter_woken", t_waiter_woken},
    {"threads_one_client", t_threads_one_client},
    {"fencing", t_fencing},
    {"processes", t_processes},
    {"fifo", t_fifo},
    {"lease_expiry", t_lease_expiry},
    {"lease_revoked", t_lease_revoked},
    {"wait_lease_revoked", t_wait_lease_revoked},
    {"hold_and_wait_lease_revoked", t_hold_and_wait_lease_revoked},
    {"session_kept_alive", t_session_kept_alive},
    {"leader_killed", t_leader_killed},
    {"member_killed", t_member_killed},
    {"member_paused", t_member_paused},
    {"watch_member_paused", t_watch_member_paused},
    {"bad_url", t_bad_url},
    {"sent_no_pool_thread", t_sent_no_pool_thread},
    {"sent_server_paused", t_sent_server_paused},
    {"sent_server_restarted", t_sent_server_restarted},
    {"sent_server_down", t_sent_server_down},
    {"rw", t_rw},
    {"rw_shared_command", t_rw_shared_command},
    {"rw_wait_lease_revoked", t_rw_wait_lease_revoked},
    {"etcdctl_holds", t_etcdctl_holds},
    {"dlock_holds", t_dlock_holds},
    {"auth", t_auth},
    {"go_interop", t_go_interop},
    {"go_interop_rw", t_go_interop_rw},
    {"go_conformance", t_go_conformance},
    {"go_race", t_go_race},
    {"command", t_command},
    {"command_lost", t_command_lost},
    {"command_wait_lease_revoked", t_command_wait_lease_revoked},
    {"tls", t_tls},
    {"tls_mutual", t_tls_mutual},
    {"tls_command", t_tls_command},
};

int main(int argc, char **argv) {
  g_exe = argv[0];
  if (argc == 5 && strcmp(argv[1], "--child-hold") == 0)
    return child_hold(argv[2], argv[3], atoll(argv[4]));
  if (argc == 5 && strcmp(argv[1], "--child-counter") == 0)
    return child_counter(argv[2], argv[3], atoi(argv[4]));
  return check_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
