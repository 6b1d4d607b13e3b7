/*
 * test_zookeeper.c - the ZooKeeper backend against real ZooKeeper servers
 * started by the harness (tests/harness/zk.c): one standalone server per
 * case, or a 3-member ensemble where a case needs a leader to kill.
 *
 * What a user would observe: who holds the lock (a shared counter file
 * incremented under it by several processes), what a second client is told
 * (EBUSY, the queue in lock_state), the order in which waiters get the lock,
 * fencing tokens, the read-write rules, a session that expires (the lost
 * callback, DLOCK_ELOST, the next waiter served), a leader that dies while
 * a lock is held, the async calls' sent tries and releases (no pool
 * thread; a silent server, a restart). The layout is read with
 * libzookeeper itself, to check that it is Curator's.
 */
#define _GNU_SOURCE
#include "itest.h"
#include "zk.h"

#include "async_one.h" /* after check.h and harness.h (itest.h) */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <regex.h>
#include <sys/stat.h>
#include <zookeeper/zookeeper.h>

/* TSan: libzookeeper_mt 3.8.0 (not instrumented) formats endpoint names
 * with sprintf into one global buffer from every handle's I/O thread (a
 * race inside the library between two clients of one process, garbling
 * its log text only). dlock itself never calls sprintf. */
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void) { return "race_top:vsprintf\n"; }

#define WAIT_LONG 60000 /* an acquire's wait: far past any test bound */

/* ------------------------------------------------------------- helpers */

typedef struct zk_cfg {
  int64_t session_ms; /* 0: the default (60 s) */
  int64_t command_ms; /* 0: 10 s */
  dlock_lost_fn lost;
  void *lost_ud;
  dlock_log_fn log;
  void *log_ud;
} zk_cfg_t;

static dlock_client_t *zk_client_cfg(const char *url, const zk_cfg_t *cfg) {
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 10000));
  CHECK_OK(dlock_options_set_command_timeout(
      o, cfg && cfg->command_ms ? cfg->command_ms : 10000));
  if (cfg && cfg->session_ms)
    CHECK_OK(dlock_options_set_session_timeout(o, cfg->session_ms));
  if (cfg && cfg->lost)
    CHECK_OK(dlock_options_set_lost_callback(o, cfg->lost, cfg->lost_ud));
  if (cfg && cfg->log)
    CHECK_OK(dlock_options_set_log_callback(o, cfg->log, cfg->log_ud,
                                            DLOCK_LOG_DEBUG));
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new(&c, url, o));
  dlock_options_free(o);
  return c;
}

static dlock_client_t *zk_client(const th_zk_t *z) {
  return zk_client_cfg(th_zk_url(z), NULL);
}

static dlock_lock_t *zk_lock(dlock_client_t *c, const char *name,
                             dlock_lock_kind_t kind) {
  dlock_lock_t *l = NULL;
  CHECK_OK(dlock_lock_new_kind(c, name, kind, &l));
  return l;
}

/* Waiters queued on the server (lock_state), or -1 on an error. */
static long queued(dlock_lock_t *l) {
  dlock_lock_state_t *st = NULL;
  if (dlock_lock_state(l, &st) != 0)
    return -1;
  long n = (long)st->nwaiters;
  dlock_lock_state_free(st);
  return n;
}

static long holders(dlock_lock_t *l) {
  dlock_lock_state_t *st = NULL;
  if (dlock_lock_state(l, &st) != 0)
    return -1;
  long n = (long)st->nholders;
  dlock_lock_state_free(st);
  return n;
}

/* A raw libzookeeper session, to read the layout as any client would. */
static void quiet_log(const char *m) { (void)m; }

static zhandle_t *raw_connect(const th_zk_t *z) {
  char hosts[64];
  snprintf(hosts, sizeof hosts, "127.0.0.1:%d", th_zk_port(z, 0));
  zhandle_t *zh =
      zookeeper_init2(hosts, NULL, 10000, NULL, NULL, 0, quiet_log);
  CHECK(zh);
  bool ok;
  TH_WAIT_FOR(ok, zoo_state(zh) == ZOO_CONNECTED_STATE, 20000);
  CHECK(ok);
  return zh;
}

static int raw_children(zhandle_t *zh, const char *path,
                        struct String_vector *v) {
  memset(v, 0, sizeof *v);
  return zoo_get_children(zh, path, 0, v);
}

/* ------------------------------------------------- a background acquirer */

typedef struct bg {
  pthread_t th;
  dlock_lock_t *l;
  int64_t wait_ms;
  atomic_int state; /* 0 waiting, 1 acquired, 2 failed, 3 released */
  atomic_int rc;
  atomic_int release_now;
  int64_t token;
  int order; /* filled in by the test's order recorder */
} bg_t;

static atomic_int g_order;

static void *bg_main(void *arg) {
  bg_t *b = arg;
  int rc = dlock_lock_kind(b->l) == DLOCK_FENCED
               ? dlock_lock_acquire_fenced(b->l, b->wait_ms,
                                           DLOCK_LEASE_WATCHDOG, &b->token)
               : dlock_lock_acquire(b->l, b->wait_ms, DLOCK_LEASE_WATCHDOG);
  atomic_store(&b->rc, rc);
  if (rc != 0) {
    atomic_store(&b->state, 2);
    return NULL;
  }
  b->order = atomic_fetch_add(&g_order, 1) + 1;
  atomic_store(&b->state, 1);
  bool ok;
  TH_WAIT_FOR(ok, atomic_load(&b->release_now), 60000);
  (void)ok;
  atomic_store(&b->rc, dlock_lock_release(b->l));
  atomic_store(&b->state, 3);
  return NULL;
}

static void bg_start(bg_t *b, dlock_lock_t *l, int64_t wait_ms) {
  memset(b, 0, sizeof *b);
  b->l = l;
  b->wait_ms = wait_ms;
  CHECK(pthread_create(&b->th, NULL, bg_main, b) == 0);
}

/* ---------------------------------------------------------------- cases */

/* The harness itself: an ensemble elects a leader, elects another when it
 * is killed, and takes the old one back. */
static void t_harness_ensemble(void) {
  int64_t t0 = th_now_ms();
  th_zk_t *z = th_zk_start(3);
  CHECK(z);
  printf("3 members serving after %lld ms\n", (long long)(th_now_ms() - t0));
  CHECK_INT(th_zk_members(z), ==, 3);
  CHECK(strncmp(th_zk_url(z), "zookeeper://127.0.0.1:", 22) == 0);
  int leader = th_zk_leader(z);
  CHECK(leader >= 0);
  CHECK_INT(th_zk_kill9(z, leader), ==, 0);
  int next = -1;
  bool ok;
  t0 = th_now_ms();
  TH_WAIT_FOR(ok, (next = th_zk_leader(z)) >= 0, 30000);
  CHECK(ok);
  CHECK(next != leader);
  printf("a new leader after %lld ms\n", (long long)(th_now_ms() - t0));
  t0 = th_now_ms();
  CHECK_INT(th_zk_up(z, leader), ==, 0);
  printf("the old leader serving again after %lld ms\n",
         (long long)(th_now_ms() - t0));
  CHECK_INT(th_zk_pause(z, next), ==, 0);
  CHECK_INT(th_zk_resume(z, next), ==, 0);
  th_zk_stop(z);
  th_zk_stop(NULL);
}

/* Bad URLs are refused with a clear code; an address where nothing
 * listens is DLOCK_EUNAVAILABLE within the connect timeout. */
static void t_bad_url(void) {
  static const struct {
    const char *url;
    int rc;
    const char *says;
  } bad[] = {
      {"zookeeper://", DLOCK_EURL, "no host"},
      {"zookeeper://127.0.0.1:0", DLOCK_EURL, "port"},
      {"zookeeper://127.0.0.1:70000", DLOCK_EURL, "port"},
      {"zookeeper://127.0.0.1:x", DLOCK_EURL, "port"},
      {"zookeeper://127.0.0.1:2181,,127.0.0.1:2182", DLOCK_EURL, "empty"},
      {"zookeeper://127.0.0.1:2181/a//b", DLOCK_EURL, "chroot"},
      {"zookeeper://127.0.0.1:2181?base=relative", DLOCK_EURL, "base"},
      {"zookeeper://127.0.0.1:2181?color=red", DLOCK_EURL, "query"},
      {"zookeeper://user:pw@127.0.0.1:2181", DLOCK_ENOTSUP, "credentials"},
      {"ZK://127.0.0.1:2181#x", DLOCK_EURL, "fragment"},
      {"zk://h$t:2181", DLOCK_EURL, "bad character in a host name"},
      {"zk://[h]:2181", DLOCK_EURL, "not an IPv6 address in brackets"},
      {"zk://127.0.0.1?base=%2Fa%2F..", DLOCK_EURL, "base must be"},
      {"zk://127.0.0.1?base=%zz", DLOCK_EURL, "%-escape in a query"},
      {"zk://127.0.0.1:1,", DLOCK_EURL,
       "an empty host in the list (expected zookeeper://host"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dlock_client_t *c = NULL;
    int rc = dlock_client_new(&c, bad[i].url, NULL);
    CHECKF(rc == bad[i].rc, "%s: got %s want %s", bad[i].url,
           dlock_err_name(rc), dlock_err_name(bad[i].rc));
    CHECKF(strstr(dlock_last_error(), bad[i].says), "%s: \"%s\"",
           bad[i].url, dlock_last_error());
    CHECK(!strstr(dlock_last_error(), "pw"));
    CHECK(c == NULL);
  }
  int port = th_free_port();
  char url[64];
  snprintf(url, sizeof url, "zk://127.0.0.1:%d", port);
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 1000));
  dlock_client_t *c = NULL;
  CHECK_RC(dlock_client_new(&c, url, o), DLOCK_EUNAVAILABLE);
  CHECK(strstr(dlock_last_error(), "connect timeout"));
  dlock_options_free(o);
}

/* Processes increment a counter file under the lock; none is lost. */
#define PROCS 4
#define ITERS 25

static int child_counter(const char *url, const char *file) {
  dlock_client_t *c = zk_client_cfg(url, NULL);
  dlock_lock_t *l = zk_lock(c, "counter", DLOCK_REENTRANT);
  for (int i = 0; i < ITERS; i++) {
    CHECK_OK(dlock_lock_acquire(l, WAIT_LONG, DLOCK_LEASE_WATCHDOG));
    FILE *f = fopen(file, "r+");
    CHECK(f);
    long v = 0;
    if (fscanf(f, "%ld", &v) != 1)
      v = 0;
    rewind(f);
    sched_yield();
    fprintf(f, "%ld\n", v + 1);
    CHECK(fclose(f) == 0);
    CHECK_OK(dlock_lock_release(l));
  }
  dlock_lock_free(l);
  dlock_client_free(c);
  return 0;
}

static void t_exclusion_processes(void) {
  th_zk_t *z = th_zk_start(1);
  CHECK(z);
  char dir[] = "/tmp/dlock-zkcount-XXXXXX";
  CHECK(mkdtemp(dir));
  char file[128];
  snprintf(file, sizeof file, "%s/counter", dir);
  FILE *f = fopen(file, "w");
  CHECK(f);
  fprintf(f, "0\n");
  fclose(f);
  fflush(stdout);
  fflush(stderr);
  pid_t pids[PROCS];
  int64_t t0 = th_now_ms();
  for (int i = 0; i < PROCS; i++) {
    pids[i] = fork();
    CHECK(pids[i] >= 0);
    if (pids[i] == 0) {
      char *argv[] = {"test_zookeeper", "--counter-child",
                      (char *)th_zk_url(z), file, NULL};
      execv("/proc/self/exe", argv);
      _exit(127);
    }
  }
  int done = 0, failed = 0;
  int64_t deadline = th_now_ms() + 120000;
  while (done < PROCS && th_now_ms() < deadline) {
    for (int i = 0; i < PROCS; i++) {
      int st;
      if (pids[i] > 0 && waitpid(pids[i], &st, WNOHANG) == pids[i]) {
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
          failed++;
        pids[i] = 0;
        done++;
      }
    }
    th_sleep_ms(10);
  }
  for (int i = 0; i < PROCS; i++)
    if (pids[i] > 0) {
      kill(pids[i], SIGKILL);
      waitpid(pids[i], NULL, 0);
    }
  CHECK_INT(done, ==, PROCS);
  CHECK_INT(failed, ==, 0);
  printf("%d processes x %d acquire/increment/release: %lld ms\n", PROCS,
         ITERS, (long long)(th_now_ms() - t0));
  f = fopen(file, "r");
  long v = -1;
  CHECK(f && fscanf(f, "%ld", &v) == 1);
  fclose(f);
  CHECK_INT(v, ==, PROCS * ITERS);
  unlink(file);
  rmdir(dir);
  /* nothing of the processes is left: no holder, no waiter */
  dlock_client_t *c = zk_client(z);
  dlock_lock_t *l = zk_lock(c, "counter", DLOCK_REENTRANT);
  CHECK_INT(holders(l), ==, 0);
  CHECK_INT(queued(l), ==, 0);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_zk_stop(z);
}

/* Re-entry counts per thread; another client is refused meanwhile; a
 * try-once refusal leaves no node behind. */
static void t_reentrant_try(void) {
  th_zk_t *z = th_zk_start(1);
  CHECK(z);
  dlock_client_t *a = zk_client(z), *b = zk_client(z);
  dlock_lock_t *la = zk_lock(a, "re", DLOCK_REENTRANT);
  dlock_lock_t *lb = zk_lock(b, "re", DLOCK_REENTRANT);
  CHECK_OK(dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG));
  int64_t n = 0;
  CHECK_OK(dlock_lock_hold_count(la, &n));
  CHECK_INT(n, ==, 2);
  CHECK_RC(dlock_lock_acquire(lb, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  CHECK_INT(holders(lb), ==, 1);
  CHECK_INT(queued(lb), ==, 0); /* the refused try left nothing */
  CHECK_OK(dlock_lock_release(la));
  CHECK_RC(dlock_lock_acquire(lb, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  bool locked = false;
  CHECK_OK(dlock_lock_is_locked(lb, &locked));
  CHECK(locked);
  CHECK_OK(dlock_lock_release(la));
  CHECK_RC(dlock_lock_release(la), DLOCK_ENOTOWNER);
  CHECK_OK(dlock_lock_acquire(lb, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(lb));
  /* a fixed lease means nothing to a session: refused, and said why */
  CHECK_RC(dlock_lock_acquire(la, 0, 5000), DLOCK_ENOTSUP);
  CHECK(strstr(dlock_last_error(), "fixed lease"));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_zk_stop(z);
}

/* A waiter sleeps until the holder releases (its wait is 60 s: only the
 * watch on its predecessor can wake it before the test's bound); waiters
 * get the lock in the order they queued. */
static void t_fifo_wakeup(void) {
  th_zk_t *z = th_zk_start(1);
  CHECK(z);
  dlock_client_t *a = zk_client(z);
  dlock_lock_t *la = zk_lock(a, "fifo", DLOCK_FAIR);
  CHECK_OK(dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG));
  enum { N = 3 };
  dlock_client_t *cs[N];
  dlock_lock_t *ls[N];
  bg_t bs[N];
  bool ok;
  for (int i = 0; i < N; i++) {
    cs[i] = zk_client(z);
    ls[i] = zk_lock(cs[i], "fifo", DLOCK_FAIR);
    bg_start(&bs[i], ls[i], WAIT_LONG);
    TH_WAIT_FOR(ok, queued(la) == i + 1, 20000); /* in line before the next */
    CHECK(ok);
  }
  dlock_lock_state_t *st = NULL;
  CHECK_OK(dlock_lock_state(la, &st));
  CHECK_INT(st->nholders, ==, 1);
  char me[80];
  snprintf(me, sizeof me, "%s:", dlock_client_id(a));
  CHECK(strncmp(st->holders[0].owner, me, strlen(me)) == 0);
  for (int i = 0; i < N; i++) {
    snprintf(me, sizeof me, "%s:", dlock_client_id(cs[i]));
    CHECK(strncmp(st->waiters[i], me, strlen(me)) == 0);
  }
  dlock_lock_state_free(st);
  CHECK_OK(dlock_lock_release(la));
  for (int i = 0; i < N; i++) {
    TH_WAIT_FOR(ok, atomic_load(&bs[i].state) == 1, 20000);
    CHECKF(ok, "waiter %d not woken (state %d, %s)", i,
           atomic_load(&bs[i].state), dlock_err_name(atomic_load(&bs[i].rc)));
    CHECK_INT(bs[i].order, ==, i + 1);
    atomic_store(&bs[i].release_now, 1);
    pthread_join(bs[i].th, NULL);
    CHECK_INT(atomic_load(&bs[i].rc), ==, 0);
  }
  for (int i = 0; i < N; i++) {
    dlock_lock_free(ls[i]);
    dlock_client_free(cs[i]);
  }
  dlock_lock_free(la);
  dlock_client_free(a);
  th_zk_stop(z);
}

/* Fencing tokens (the node's creation zxid) grow from holder to holder,
 * and across locks; a re-entry keeps its token. */
static void t_fenced_tokens(void) {
  th_zk_t *z = th_zk_start(1);
  CHECK(z);
  dlock_client_t *a = zk_client(z), *b = zk_client(z);
  dlock_lock_t *la = zk_lock(a, "fence", DLOCK_FENCED);
  dlock_lock_t *lb = zk_lock(b, "fence", DLOCK_FENCED);
  dlock_lock_t *other = zk_lock(b, "fence-other", DLOCK_FENCED);
  int64_t t1 = 0, t1b = 0, t2 = 0, t3 = 0, t4 = 0;
  CHECK_OK(dlock_lock_acquire_fenced(la, 0, DLOCK_LEASE_WATCHDOG, &t1));
  CHECK(t1 > 0);
  CHECK_OK(dlock_lock_acquire_fenced(la, 0, DLOCK_LEASE_WATCHDOG, &t1b));
  CHECK_INT(t1b, ==, t1);
  dlock_lock_state_t *st = NULL;
  CHECK_OK(dlock_lock_state(la, &st));
  CHECK_INT(st->token, ==, t1);
  CHECK_STR(st->kind, "fenced");
  dlock_lock_state_free(st);
  bg_t w;
  bg_start(&w, lb, WAIT_LONG); /* queued while a holds */
  bool ok;
  TH_WAIT_FOR(ok, queued(la) == 1, 20000);
  CHECK(ok);
  CHECK_OK(dlock_lock_release(la));
  CHECK_OK(dlock_lock_release(la));
  TH_WAIT_FOR(ok, atomic_load(&w.state) == 1, 20000);
  CHECK(ok);
  t2 = w.token;
  CHECK(t2 > t1);
  CHECK_OK(dlock_lock_acquire_fenced(other, 0, DLOCK_LEASE_WATCHDOG, &t3));
  CHECK(t3 > t2); /* one zxid sequence for the whole ensemble */
  atomic_store(&w.release_now, 1);
  pthread_join(w.th, NULL);
  CHECK_INT(atomic_load(&w.rc), ==, 0);
  CHECK_OK(dlock_lock_acquire_fenced(la, 0, DLOCK_LEASE_WATCHDOG, &t4));
  CHECK(t4 > t3);
  CHECK_OK(dlock_lock_release(la));
  CHECK_OK(dlock_lock_release(other));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_lock_free(other);
  dlock_client_free(a);
  dlock_client_free(b);
  th_zk_stop(z);
}

/* Curator's rules: readers share, a writer waits for them and excludes
 * them; the write holder may take the read side (downgrade); a reader
 * asking for the write side is told it would deadlock. */
static void t_read_write(void) {
  th_zk_t *z = th_zk_start(1);
  CHECK(z);
  dlock_client_t *a = zk_client(z), *b = zk_client(z), *w = zk_client(z);
  dlock_lock_t *ra = zk_lock(a, "rw", DLOCK_READ);
  dlock_lock_t *wa = zk_lock(a, "rw", DLOCK_WRITE);
  dlock_lock_t *rb = zk_lock(b, "rw", DLOCK_READ);
  dlock_lock_t *ww = zk_lock(w, "rw", DLOCK_WRITE);
  CHECK_OK(dlock_lock_acquire(ra, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_acquire(rb, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_RC(dlock_lock_acquire(wa, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EDEADLK);
  CHECK_RC(dlock_lock_acquire(ww, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  dlock_lock_state_t *st = NULL;
  CHECK_OK(dlock_lock_state(ra, &st));
  CHECK_STR(st->kind, "read");
  CHECK_INT(st->nholders, ==, 2);
  dlock_lock_state_free(st);
  bg_t bw;
  bg_start(&bw, ww, WAIT_LONG);
  bool ok;
  TH_WAIT_FOR(ok, queued(ra) == 1, 20000);
  CHECK(ok);
  /* a new reader arriving after a queued writer waits behind it
   * (Curator's rule: no writer starves); a re-entry is no new reader */
  dlock_client_t *x = zk_client(z);
  dlock_lock_t *rx = zk_lock(x, "rw", DLOCK_READ);
  CHECK_RC(dlock_lock_acquire(rx, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  CHECK_OK(dlock_lock_acquire(ra, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(ra));
  CHECK_OK(dlock_lock_release(ra));
  dlock_lock_free(rx);
  dlock_client_free(x);
  CHECK_INT(atomic_load(&bw.state), ==, 0);
  CHECK_OK(dlock_lock_release(rb));
  TH_WAIT_FOR(ok, atomic_load(&bw.state) == 1, 20000);
  CHECK(ok);
  CHECK_RC(dlock_lock_acquire(ra, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  CHECK_OK(dlock_lock_state(ra, &st));
  CHECK_STR(st->kind, "write");
  dlock_lock_state_free(st);
  atomic_store(&bw.release_now, 1);
  pthread_join(bw.th, NULL);
  CHECK_INT(atomic_load(&bw.rc), ==, 0);
  /* downgrade: write, then read from the same thread */
  CHECK_OK(dlock_lock_acquire(wa, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_acquire(ra, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(wa));
  CHECK_RC(dlock_lock_acquire(ww, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  CHECK_OK(dlock_lock_acquire(rb, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(rb));
  CHECK_OK(dlock_lock_release(ra));
  CHECK_OK(dlock_lock_acquire(ww, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(ww));
  /* a mutex on a read-write lock's path is another kind of lock */
  CHECK_OK(dlock_lock_acquire(ra, 0, DLOCK_LEASE_WATCHDOG));
  dlock_lock_t *m = zk_lock(b, "rw", DLOCK_REENTRANT);
  CHECK_RC(dlock_lock_acquire(m, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EWRONGTYPE);
  CHECK(strstr(dlock_last_error(), "holds nodes of another kind of lock"));
  CHECK_OK(dlock_lock_release(ra));
  dlock_lock_free(m);
  dlock_lock_free(ra);
  dlock_lock_free(wa);
  dlock_lock_free(rb);
  dlock_lock_free(ww);
  dlock_client_free(a);
  dlock_client_free(b);
  dlock_client_free(w);
  th_zk_stop(z);
}

/* The nodes are Curator's: protected ephemeral sequential children of a
 * container, named `_c_<uuid>-lock-<10 digits>`; full paths are taken as
 * they are, other names go under the base path. */
static void t_curator_layout(void) {
  th_zk_t *z = th_zk_start(1);
  CHECK(z);
  char url[256];
  snprintf(url, sizeof url, "%s?base=/apps/x", th_zk_url(z));
  dlock_client_t *c = zk_client_cfg(url, NULL);
  dlock_lock_t *rel = zk_lock(c, "jobs", DLOCK_REENTRANT);
  dlock_lock_t *full = zk_lock(c, "/curator/locks/jobs", DLOCK_WRITE);
  dlock_lock_t *bad = NULL;
  CHECK_RC(dlock_lock_new(c, "a//b", &bad), DLOCK_EINVAL);
  CHECK_RC(dlock_lock_new(c, "/zookeeper/quota", &bad), DLOCK_EINVAL);
  CHECK_OK(dlock_lock_acquire(rel, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_acquire(full, 0, DLOCK_LEASE_WATCHDOG));
  zhandle_t *zh = raw_connect(z);
  struct String_vector v;
  CHECK_INT(raw_children(zh, "/apps/x/jobs", &v), ==, ZOK);
  CHECK_INT(v.count, ==, 1);
  regex_t re;
  CHECK(regcomp(&re,
                "^_c_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-"
                "[0-9a-f]{12}-lock-[0-9]{10}$",
                REG_EXTENDED | REG_NOSUB) == 0);
  CHECKF(regexec(&re, v.data[0], 0, NULL, 0) == 0, "%s", v.data[0]);
  char path[300];
  snprintf(path, sizeof path, "/apps/x/jobs/%s", v.data[0]);
  struct Stat stat;
  char data[128];
  int len = sizeof data - 1;
  CHECK_INT(zoo_get(zh, path, 0, data, &len, &stat), ==, ZOK);
  CHECK(stat.ephemeralOwner != 0);
  data[len > 0 ? len : 0] = '\0';
  CHECK(strncmp(data, dlock_client_id(c), strlen(dlock_client_id(c))) == 0);
  deallocate_String_vector(&v);
  CHECK_INT(zoo_exists(zh, "/apps/x/jobs", 0, &stat), ==, ZOK);
  CHECK(stat.ephemeralOwner == 0);
  CHECK_INT(raw_children(zh, "/curator/locks/jobs", &v), ==, ZOK);
  CHECK_INT(v.count, ==, 1);
  CHECK(strstr(v.data[0], "-__WRIT__") != NULL);
  deallocate_String_vector(&v);
  regfree(&re);
  /* a node another client made first (as Curator would) comes first */
  CHECK_OK(dlock_lock_release(rel));
  char made[300];
  CHECK_INT(zoo_create(zh,
                       "/apps/x/jobs/_c_0f0f0f0f-0000-4000-8000-"
                       "000000000000-lock-",
                       "10.0.0.1", 8, &ZOO_OPEN_ACL_UNSAFE,
                       ZOO_EPHEMERAL_SEQUENTIAL, made, sizeof made),
            ==, ZOK);
  CHECK_RC(dlock_lock_acquire(rel, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  dlock_lock_state_t *st = NULL;
  CHECK_OK(dlock_lock_state(rel, &st));
  CHECK(strncmp(st->holders[0].owner, "session 0x", 10) == 0);
  dlock_lock_state_free(st);
  bg_t w;
  bg_start(&w, rel, WAIT_LONG);
  bool ok;
  TH_WAIT_FOR(ok, queued(full) >= 0 && queued(rel) == 1, 20000);
  CHECK(ok);
  CHECK_INT(zoo_delete(zh, made, -1), ==, ZOK); /* the other one releases */
  TH_WAIT_FOR(ok, atomic_load(&w.state) == 1, 20000);
  CHECK(ok);
  atomic_store(&w.release_now, 1);
  pthread_join(w.th, NULL);
  CHECK_OK(dlock_lock_release(full));
  zookeeper_close(zh);
  dlock_lock_free(rel);
  dlock_lock_free(full);
  dlock_client_free(c);
  th_zk_stop(z);
}

/* A holder whose session expires (its process stopped past the session
 * timeout): the next waiter gets the lock; the holder, resumed, is told
 * by its lost callback and by DLOCK_ELOST on release. */
static atomic_int g_lost;
static void on_lost(void *ud, const char *name, uint64_t tid,
                    dlock_lost_reason_t why) {
  (void)ud;
  (void)tid;
  if (strcmp(name, "expiry") == 0 && why == DLOCK_LOST_SESSION)
    atomic_fetch_add(&g_lost, 1);
}

static int child_expiry(const char *url, int to_parent, int from_parent) {
  zk_cfg_t cfg = {.session_ms = 2000, .lost = on_lost};
  dlock_client_t *c = zk_client_cfg(url, &cfg);
  dlock_lock_t *l = zk_lock(c, "expiry", DLOCK_REENTRANT);
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  CHECK(write(to_parent, "h", 1) == 1);
  char ch;
  CHECK(read(from_parent, &ch, 1) == 1); /* after SIGSTOP ... SIGCONT */
  bool ok;
  TH_WAIT_FOR(ok, atomic_load(&g_lost) == 1, 30000);
  CHECK(ok);
  CHECK_RC(dlock_lock_release(l), DLOCK_ELOST);
  /* a new session serves this client again */
  CHECK_OK(dlock_lock_acquire(l, 20000, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  return 0;
}

static void t_session_expiry(void) {
  th_zk_t *z = th_zk_start(1);
  CHECK(z);
  int up[2], down[2];
  CHECK(pipe(up) == 0 && pipe(down) == 0);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    char a[16], b[16];
    snprintf(a, sizeof a, "%d", up[1]);
    snprintf(b, sizeof b, "%d", down[0]);
    char *argv[] = {"test_zookeeper", "--expiry-child", (char *)th_zk_url(z),
                    a, b, NULL};
    execv("/proc/self/exe", argv);
    _exit(127);
  }
  char ch;
  CHECK(read(up[0], &ch, 1) == 1);
  dlock_client_t *c = zk_client(z);
  dlock_lock_t *l = zk_lock(c, "expiry", DLOCK_REENTRANT);
  CHECK_RC(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  CHECK(kill(pid, SIGSTOP) == 0);
  /* the waiter is served once the server expires the stopped session */
  CHECK_OK(dlock_lock_acquire(l, 30000, DLOCK_LEASE_WATCHDOG));
  CHECK(kill(pid, SIGCONT) == 0);
  CHECK(write(down[1], "g", 1) == 1);
  /* the child gets its lost callback and ELOST, then waits for us */
  CHECK_OK(dlock_lock_release(l));
  int st = 0;
  bool ok;
  TH_WAIT_FOR(ok, waitpid(pid, &st, WNOHANG) == pid, 60000);
  if (!ok) {
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
  }
  CHECK(ok);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_zk_stop(z);
}

/* `--wait-expiry-child URL`: waits (30 s) for "wexp" on a 2 s session;
 * exit 0 when it got the lock (and released it), 3 when the wait ended
 * otherwise. */
static int child_wait_expiry(const char *url) {
  zk_cfg_t cfg = {.session_ms = 2000};
  dlock_client_t *c = zk_client_cfg(url, &cfg);
  dlock_lock_t *l = zk_lock(c, "wexp", DLOCK_REENTRANT);
  int rc = dlock_lock_acquire(l, 30000, DLOCK_LEASE_WATCHDOG);
  if (rc)
    fprintf(stderr, "child: the wait ended: %s\n", dlock_last_error());
  else
    CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  return rc ? 3 : 0;
}

/* A waiter whose session expires (its process stopped past the session
 * timeout, until the server dropped its node): resumed, it waits on under
 * a new session, with one node (re-queued), and gets the lock at the
 * release; the lock is free after its own release (no node of it left). */
static void t_waiter_session_expiry(void) {
  th_zk_t *z = th_zk_start(1);
  CHECK(z);
  dlock_client_t *c = zk_client(z);
  dlock_lock_t *l = zk_lock(c, "wexp", DLOCK_REENTRANT);
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    char *argv[] = {"test_zookeeper", "--wait-expiry-child",
                    (char *)th_zk_url(z), NULL};
    execv("/proc/self/exe", argv);
    _exit(127);
  }
  bool ok;
  TH_WAIT_FOR(ok, queued(l) == 1, 20000);
  CHECK(ok);
  CHECK(kill(pid, SIGSTOP) == 0);
  TH_WAIT_FOR(ok, queued(l) == 0, 30000); /* the server expired it */
  CHECK(ok);
  CHECK(kill(pid, SIGCONT) == 0);
  TH_WAIT_FOR(ok, queued(l) >= 1, 20000); /* queued again */
  CHECK(ok);
  CHECK_INT(queued(l), ==, 1); /* with one node */
  CHECK_OK(dlock_lock_release(l));
  int st = 0;
  TH_WAIT_FOR(ok, waitpid(pid, &st, WNOHANG) == pid, 60000);
  if (!ok) {
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
  }
  CHECK(ok);
  CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the waiter's status %d", st);
  CHECK_INT(holders(l), ==, 0);
  CHECK_INT(queued(l), ==, 0);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_zk_stop(z);
}

/* The leader dies while a lock is held: the holder keeps it (no loss is
 * reported), and the waiter is served after the release. */
static atomic_int g_any_lost;
static void on_any_lost(void *ud, const char *name, uint64_t tid,
                        dlock_lost_reason_t why) {
  (void)ud;
  (void)name;
  (void)tid;
  (void)why;
  atomic_fetch_add(&g_any_lost, 1);
}

static void t_leader_killed(void) {
  th_zk_t *z = th_zk_start(3);
  CHECK(z);
  zk_cfg_t cfg = {.lost = on_any_lost};
  dlock_client_t *a = zk_client_cfg(th_zk_url(z), &cfg);
  dlock_client_t *b = zk_client_cfg(th_zk_url(z), &cfg);
  dlock_lock_t *la = zk_lock(a, "leader", DLOCK_FENCED);
  dlock_lock_t *lb = zk_lock(b, "leader", DLOCK_FENCED);
  int64_t t1 = 0;
  CHECK_OK(dlock_lock_acquire_fenced(la, 0, DLOCK_LEASE_WATCHDOG, &t1));
  bg_t w;
  bg_start(&w, lb, WAIT_LONG);
  bool ok;
  TH_WAIT_FOR(ok, queued(la) == 1, 20000);
  CHECK(ok);
  int leader = th_zk_leader(z);
  CHECK(leader >= 0);
  CHECK_INT(th_zk_kill9(z, leader), ==, 0);
  TH_WAIT_FOR(ok, th_zk_leader(z) >= 0, 30000);
  CHECK(ok);
  /* still ours, on the new leader's view of the data */
  bool held = false;
  TH_WAIT_FOR(ok, dlock_lock_is_held_by_thread(la, &held) == 0 && held,
              30000);
  CHECK(ok);
  CHECKF(atomic_load(&w.state) == 0,
         "the waiter left its wait while the leader changed: %s",
         dlock_err_name(atomic_load(&w.rc)));
  int rc;
  TH_WAIT_FOR(ok, (rc = dlock_lock_release(la)) != DLOCK_EUNAVAILABLE &&
                      rc != DLOCK_EIOTIMEOUT,
              30000);
  CHECK(ok);
  CHECK_OK(rc);
  TH_WAIT_FOR(ok, atomic_load(&w.state) == 1, 30000);
  CHECK(ok);
  CHECK(w.token > t1);
  atomic_store(&w.release_now, 1);
  pthread_join(w.th, NULL);
  CHECK_INT(atomic_load(&w.rc), ==, 0);
  CHECK_INT(atomic_load(&g_any_lost), ==, 0);
  CHECK_INT(th_zk_up(z, leader), ==, 0);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_zk_stop(z);
}

/* The server stops answering (paused): the session is suspended, and
 * lost once the session timeout has passed without a server, by the
 * client's own timer (as Curator's), before the server could hand the lock
 * to anyone else. A new session serves the client afterwards. */
static atomic_int g_suspended_lost;
static void on_suspended_lost(void *ud, const char *name, uint64_t tid,
                              dlock_lost_reason_t why) {
  (void)ud;
  (void)tid;
  if (strcmp(name, "suspend") == 0 && why == DLOCK_LOST_SESSION)
    atomic_fetch_add(&g_suspended_lost, 1);
}

static void t_suspended_then_lost(void) {
  th_zk_t *z = th_zk_start(1);
  CHECK(z);
  zk_cfg_t cfg = {.session_ms = 2000, .lost = on_suspended_lost};
  dlock_client_t *c = zk_client_cfg(th_zk_url(z), &cfg);
  dlock_lock_t *l = zk_lock(c, "suspend", DLOCK_REENTRANT);
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_INT(th_zk_pause(z, 0), ==, 0);
  bool ok;
  TH_WAIT_FOR(ok, atomic_load(&g_suspended_lost) == 1, 30000);
  if (!ok)
    th_zk_resume(z, 0);
  CHECK(ok);
  /* no round trip needed to know it: the session is gone */
  int64_t v = 0;
  CHECK_RC(dlock_lock_hold_valid(l, dlock_thread_id(), &v), DLOCK_ELOST);
  CHECK_RC(dlock_lock_release(l), DLOCK_ELOST);
  CHECK(strstr(dlock_last_error(), "suspend"));
  CHECK_INT(th_zk_resume(z, 0), ==, 0);
  int rc = -1;
  TH_WAIT_FOR(ok, (rc = dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG)) == 0,
              30000);
  CHECKF(ok, "no new session: %s", dlock_err_name(rc));
  CHECK_OK(dlock_lock_release(l));
  CHECK_INT(atomic_load(&g_suspended_lost), ==, 1);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_zk_stop(z);
}

/* The dlock command on a ZooKeeper URL: the fenced lock with DLOCK_TOKEN,
 * -n refused while a library client holds NAME, --status, and the fixed
 * lease refused with the reason. */
static void cli_path(char *out, size_t size) {
  const char *env = getenv("TH_DLOCK_CLI");
  if (env && *env) {
    snprintf(out, size, "%s", env);
    return;
  }
  char self[512];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  CHECK(n > 0);
  self[n] = '\0';
  char *slash = strrchr(self, '/');
  CHECK(slash);
  *slash = '\0'; /* build/tests */
  snprintf(out, size, "%s/../tools/dlock/dlock", self);
}

/* Runs a shell command line; its output (stdout and stderr) into out. */
static int run_sh(const char *cmd, char *out, size_t size) {
  FILE *p = popen(cmd, "r");
  CHECK(p);
  size_t got = 0;
  while (got + 1 < size) {
    size_t r = fread(out + got, 1, size - 1 - got, p);
    if (r == 0)
      break;
    got += r;
  }
  out[got] = '\0';
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void t_cli(void) {
  th_zk_t *z = th_zk_start(1);
  CHECK(z);
  char cli[600], cmd[1500], out[4096];
  cli_path(cli, sizeof cli);
  CHECKF(access(cli, X_OK) == 0, "no dlock command at %s", cli);
  snprintf(cmd, sizeof cmd,
           "%s -u '%s' job sh -c 'echo token=$DLOCK_TOKEN' 2>&1", cli,
           th_zk_url(z));
  CHECK_INT(run_sh(cmd, out, sizeof out), ==, 0);
  long long token = 0;
  CHECKF(sscanf(out, "token=%lld", &token) == 1 && token > 0, "%s", out);
  dlock_client_t *c = zk_client(z);
  dlock_lock_t *l = zk_lock(c, "job", DLOCK_FENCED);
  int64_t t = 0;
  CHECK_OK(dlock_lock_acquire_fenced(l, 0, DLOCK_LEASE_WATCHDOG, &t));
  CHECK(t > token);
  snprintf(cmd, sizeof cmd, "%s -u '%s' -n job echo ran 2>&1", cli,
           th_zk_url(z));
  CHECK_INT(run_sh(cmd, out, sizeof out), ==, 1);
  CHECKF(!strstr(out, "ran"), "%s", out);
  snprintf(cmd, sizeof cmd, "%s -u '%s' --status job 2>&1", cli,
           th_zk_url(z));
  CHECK_INT(run_sh(cmd, out, sizeof out), ==, 0);
  CHECKF(strstr(out, dlock_client_id(c)), "%s", out);
  CHECK_OK(dlock_lock_release(l));
  CHECK_INT(run_sh(cmd, out, sizeof out), ==, 1);
  snprintf(cmd, sizeof cmd, "%s -u '%s' -l 5 job echo ran 2>&1", cli,
           th_zk_url(z));
  CHECK(run_sh(cmd, out, sizeof out) != 0);
  CHECKF(strstr(out, "fixed lease") && !strstr(out, "ran"), "%s", out);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_zk_stop(z);
}

/* The permit semaphore on InterProcessSemaphoreV2's layout: the count,
 * permits taken up to it, a waiter woken by a release and by added
 * permits (its wait is 60 s), ids that name the lease nodes, delete. */
typedef struct psem_bg {
  pthread_t th;
  dlock_permit_sem_t *s;
  char id[DLOCK_PERMIT_ID_LEN + 1];
  atomic_int state; /* 0 waiting, 1 got it, 2 failed */
} psem_bg_t;

static void *psem_bg_main(void *arg) {
  psem_bg_t *b = arg;
  int rc =
      dlock_permit_sem_acquire(b->s, WAIT_LONG, DLOCK_LEASE_WATCHDOG, b->id);
  atomic_store(&b->state, rc == 0 ? 1 : 2);
  return NULL;
}

static void t_permit_semaphore(void) {
  th_zk_t *z = th_zk_start(1);
  CHECK(z);
  dlock_client_t *a = zk_client(z), *b = zk_client(z);
  dlock_permit_sem_t *sa = NULL, *sb = NULL;
  CHECK_OK(dlock_permit_sem_new(a, "pool", &sa));
  CHECK_OK(dlock_permit_sem_new(b, "pool", &sb));
  bool set = false;
  CHECK_OK(dlock_permit_sem_try_set_permits(sa, 2, &set));
  CHECK(set);
  CHECK_OK(dlock_permit_sem_try_set_permits(sb, 5, &set));
  CHECK(!set);
  char id1[DLOCK_PERMIT_ID_LEN + 1], id2[DLOCK_PERMIT_ID_LEN + 1];
  char id3[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_OK(dlock_permit_sem_acquire(sa, 0, DLOCK_LEASE_WATCHDOG, id1));
  CHECK_OK(dlock_permit_sem_acquire(sb, 0, DLOCK_LEASE_WATCHDOG, id2));
  CHECK_RC(dlock_permit_sem_acquire(sb, 0, DLOCK_LEASE_WATCHDOG, id3),
           DLOCK_EBUSY);
  CHECK_RC(dlock_permit_sem_acquire(sb, 0, 5000, id3), DLOCK_ENOTSUP);
  int64_t avail = -1;
  CHECK_OK(dlock_permit_sem_available(sa, &avail));
  CHECK_INT(avail, ==, 0);
  /* the lease nodes are named by the permit ids */
  zhandle_t *zh = raw_connect(z);
  struct String_vector v;
  CHECK_INT(raw_children(zh, "/dlock/locks/pool/leases", &v), ==, ZOK);
  CHECK_INT(v.count, ==, 2);
  for (int i = 0; i < v.count; i++) {
    char id[40] = "";
    size_t n = 0;
    for (const char *c = v.data[i] + 3; *c && n < 32 && c < v.data[i] + 39;
         c++)
      if (*c != '-')
        id[n++] = *c;
    id[n] = '\0';
    CHECKF(strncmp(v.data[i], "_c_", 3) == 0 &&
               strstr(v.data[i], "-lease-") &&
               (strcmp(id, id1) == 0 || strcmp(id, id2) == 0),
           "%s", v.data[i]);
  }
  deallocate_String_vector(&v);
  dlock_sem_state_t *st = NULL;
  CHECK_OK(dlock_permit_sem_state(sa, &st));
  CHECK_INT(st->in_use, ==, 2);
  CHECK_INT(st->available, ==, 0);
  CHECK_INT(st->permits[0].expires_in_ms, ==, -1);
  dlock_sem_state_free(st);
  /* waiters, woken by a release and by more permits */
  psem_bg_t w1, w2;
  memset(&w1, 0, sizeof w1);
  memset(&w2, 0, sizeof w2);
  w1.s = w2.s = sb;
  CHECK(pthread_create(&w1.th, NULL, psem_bg_main, &w1) == 0);
  CHECK(pthread_create(&w2.th, NULL, psem_bg_main, &w2) == 0);
  CHECK_OK(dlock_permit_sem_release(sa, id1));
  bool ok;
  TH_WAIT_FOR(ok, atomic_load(&w1.state) + atomic_load(&w2.state) == 1,
              20000);
  CHECK(ok);
  CHECK_OK(dlock_permit_sem_add_permits(sa, 1));
  TH_WAIT_FOR(ok, atomic_load(&w1.state) == 1 && atomic_load(&w2.state) == 1,
              20000);
  CHECK(ok);
  pthread_join(w1.th, NULL);
  pthread_join(w2.th, NULL);
  CHECK_OK(dlock_permit_sem_available(sa, &avail));
  CHECK_INT(avail, ==, 0);
  CHECK_RC(dlock_permit_sem_release(sa, id1), DLOCK_ENOTOWNER);
  CHECK_OK(dlock_permit_sem_release(sb, w1.id));
  /* delete: the holders are told at release */
  bool existed = false;
  CHECK_OK(dlock_permit_sem_delete(sa, &existed));
  CHECK(existed);
  CHECK_RC(dlock_permit_sem_release(sb, w2.id), DLOCK_ELOST);
  CHECK_RC(dlock_permit_sem_release(sb, id2), DLOCK_ELOST);
  CHECK_INT(zoo_exists(zh, "/dlock/locks/pool", 0, NULL), ==, ZNONODE);
  zookeeper_close(zh);
  dlock_permit_sem_free(sa);
  dlock_permit_sem_free(sb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_zk_stop(z);
}

/* A queued Curator waiter is not a holder. Curator 5.9.0's
 * InterProcessSemaphoreV2 (internalAcquire1Lease) makes its lease node and
 * keeps it while the leases number more than maxLeases, so with one holder
 * and one waiter on a 1-permit semaphore there are two lease nodes, the
 * waiter's the newer. Made here as Curator makes them (protected,
 * EPHEMERAL_SEQUENTIAL under P/leases): the state counts 1 in use and 1
 * waiting, the command sees a semaphore of 1 permit (busy, not a size
 * mismatch), and the waiter becomes the holder when the holder goes. */
static void t_curator_waiter_not_holder(void) {
  th_zk_t *z = th_zk_start(1);
  CHECK(z);
  dlock_client_t *c = zk_client(z);
  dlock_permit_sem_t *s = NULL;
  CHECK_OK(dlock_permit_sem_new(c, "sem-race", &s));
  bool set = false;
  CHECK_OK(dlock_permit_sem_try_set_permits(s, 1, &set));
  CHECK(set);
  zhandle_t *zh = raw_connect(z);
  const char *leases = "/dlock/locks/sem-race/leases";
  CHECK_INT(zoo_create(zh, leases, NULL, -1, &ZOO_OPEN_ACL_UNSAFE,
                       ZOO_CONTAINER, NULL, 0),
            ==, ZOK);
  const char *uuids[2] = {"11111111-2222-3333-4444-555555555555",
                          "66666666-7777-8888-9999-aaaaaaaaaaaa"};
  char made[2][512];
  for (int i = 0; i < 2; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/_c_%s-lease-", leases, uuids[i]);
    CHECK_INT(zoo_create(zh, path, "127.0.0.1", 9, &ZOO_OPEN_ACL_UNSAFE,
                         ZOO_EPHEMERAL_SEQUENTIAL, made[i], sizeof made[i]),
              ==, ZOK);
  }
  dlock_sem_state_t *st = NULL;
  CHECK_OK(dlock_permit_sem_state(s, &st));
  CHECK_INT(st->in_use, ==, 1);
  CHECK_INT(st->waiting, ==, 1);
  CHECK_INT(st->available, ==, 0);
  CHECK_INT(st->npermits, ==, 1);
  CHECK_STR(st->permits[0].id, "11111111222233334444555555555555");
  dlock_sem_state_free(st);
  char id[DLOCK_PERMIT_ID_LEN + 1];
  CHECK_RC(dlock_permit_sem_acquire(s, 0, DLOCK_LEASE_WATCHDOG, id),
           DLOCK_EBUSY);

  char cli[600], cmd[1500], out[4096];
  cli_path(cli, sizeof cli);
  CHECKF(access(cli, X_OK) == 0, "no dlock command at %s", cli);
  snprintf(cmd, sizeof cmd, "%s -u '%s' -N 1 -n sem-race echo ran 2>&1", cli,
           th_zk_url(z));
  CHECKF(run_sh(cmd, out, sizeof out) == 1, "-N 1 -n: %s", out);
  CHECKF(!strstr(out, "ran") && !strstr(out, "is a semaphore of"), "%s", out);
  snprintf(cmd, sizeof cmd, "%s -u '%s' -N 1 -w 2 sem-race echo ran 2>&1", cli,
           th_zk_url(z));
  CHECKF(run_sh(cmd, out, sizeof out) == 1, "-N 1 -w 2: %s", out);
  CHECKF(!strstr(out, "ran") && !strstr(out, "is a semaphore of"), "%s", out);
  snprintf(cmd, sizeof cmd, "%s -u '%s' -N 1 --status sem-race 2>&1", cli,
           th_zk_url(z));
  CHECKF(run_sh(cmd, out, sizeof out) == 0, "--status: %s", out);
  CHECKF(strstr(out, "permits: 0 free, 1 in use, 1 waiting") &&
             strstr(out, "permit 11111111222233334444555555555555") &&
             !strstr(out, "66666666"),
         "%s", out);
  /* the holder goes: the waiter holds (Curator's waiter, woken by the
   * children watch, would now return its lease) */
  CHECK_INT(zoo_delete(zh, made[0], -1), ==, ZOK);
  CHECK_OK(dlock_permit_sem_state(s, &st));
  CHECK_INT(st->in_use, ==, 1);
  CHECK_INT(st->waiting, ==, 0);
  CHECK_STR(st->permits[0].id, "66666666777788889999aaaaaaaaaaaa");
  dlock_sem_state_free(st);
  CHECK_INT(zoo_delete(zh, made[1], -1), ==, ZOK);
  CHECK_OK(dlock_permit_sem_acquire(s, 0, DLOCK_LEASE_WATCHDOG, id));
  CHECK_OK(dlock_permit_sem_release(s, id));
  zookeeper_close(zh);
  dlock_permit_sem_free(s);
  dlock_client_free(c);
  th_zk_stop(z);
}

/* A create whose answer is lost (the fault proxy drops the server's
 * replies; the session survives): the node was made, unknown to the
 * client, and holds the lock. The client's next attempt finds it by its
 * protected prefix instead of queueing a second node behind it, so it gets
 * the lock, and its release frees it for others. */
static void t_protected_create(void) {
  th_zk_t *z = th_zk_start(1);
  CHECK(z);
  th_proxy_t *px = th_proxy_start(th_zk_port(z, 0));
  CHECK(px);
  char url[96];
  snprintf(url, sizeof url, "zookeeper://127.0.0.1:%d", th_proxy_port(px));
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 10000));
  CHECK_OK(dlock_options_set_command_timeout(o, 1000));
  CHECK_OK(dlock_options_set_session_timeout(o, 20000));
  dlock_client_t *a = NULL;
  CHECK_OK(dlock_client_new(&a, url, o));
  dlock_options_free(o);
  dlock_client_t *b = zk_client(z);
  dlock_lock_t *la = zk_lock(a, "prot", DLOCK_REENTRANT);
  dlock_lock_t *lb = zk_lock(b, "prot", DLOCK_REENTRANT);
  /* the lock's container exists (the lost create must not fail on it) */
  CHECK_OK(dlock_lock_acquire(lb, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(lb));
  th_proxy_drop_replies(px, true);
  int rc = dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG);
  th_proxy_drop_replies(px, false);
  CHECK_RC(rc, DLOCK_EIOTIMEOUT);
  /* the lost create made a node: it holds the lock for a */
  bool ok;
  TH_WAIT_FOR(ok, holders(lb) == 1, 20000);
  CHECK(ok);
  CHECK_RC(dlock_lock_acquire(lb, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  /* a's next attempt finds its node rather than queueing another */
  TH_WAIT_FOR(ok, (rc = dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG)) == 0,
              20000);
  CHECKF(ok, "%s", dlock_err_name(rc));
  CHECK_INT(holders(lb), ==, 1);
  CHECK_INT(queued(lb), ==, 0);
  CHECK_OK(dlock_lock_release(la));
  CHECK_OK(dlock_lock_acquire(lb, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(lb));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_proxy_stop(px);
  th_zk_stop(z);
}

/* libzookeeper's own log lines reach the log callback, never stderr; the
 * kinds ZooKeeper has no recipe for here say so (the permit semaphore is
 * offered). */
static atomic_int g_logs;
static void on_log(void *ud, dlock_log_level_t level, const char *msg) {
  (void)ud;
  (void)level;
  if (strstr(msg, "zookeeper"))
    atomic_fetch_add(&g_logs, 1);
}

static void t_quiet_and_unsupported(void) {
  th_zk_t *z = th_zk_start(1);
  CHECK(z);
  char errfile[] = "/tmp/dlock-zkerr-XXXXXX";
  int fd = mkstemp(errfile);
  CHECK(fd >= 0);
  fflush(stderr);
  int saved = dup(2);
  CHECK(saved >= 0 && dup2(fd, 2) == 2);
  zk_cfg_t cfg = {.log = on_log};
  dlock_client_t *c = zk_client_cfg(th_zk_url(z), &cfg);
  dlock_lock_t *l = zk_lock(c, "quiet", DLOCK_REENTRANT);
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(l));
  dlock_semaphore_t *s = NULL;
  int src = dlock_semaphore_new(c, "sem", &s);
  dlock_latch_t *lt = NULL;
  int lrc = dlock_latch_new(c, "latch", &lt);
  dlock_permit_sem_t *ps = NULL;
  CHECK_OK(dlock_permit_sem_new(c, "psem", &ps));
  dlock_permit_sem_free(ps);
  dlock_lock_free(l);
  dlock_client_free(c);
  /* an unreachable ensemble is logged too, and still not on stderr */
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 500));
  CHECK_OK(dlock_options_set_log_callback(o, on_log, NULL, DLOCK_LOG_DEBUG));
  char url[64];
  snprintf(url, sizeof url, "zookeeper://127.0.0.1:%d", th_free_port());
  dlock_client_t *none = NULL;
  int urc = dlock_client_new(&none, url, o);
  dlock_options_free(o);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  struct stat sb;
  CHECK(fstat(fd, &sb) == 0);
  close(fd);
  unlink(errfile);
  CHECK_INT(sb.st_size, ==, 0);
  CHECK(atomic_load(&g_logs) > 0);
  CHECK_RC(src, DLOCK_ENOTSUP);
  CHECK_RC(lrc, DLOCK_ENOTSUP);
  CHECK_RC(urc, DLOCK_EUNAVAILABLE);
  th_zk_stop(z);
}

/* ------------------------------------------------------------ multilock */

/* The library's multilock (src/core/multilock.c) over ZooKeeper paths: it
 * is backend-neutral, so what matters here is what a user observes of it on
 * this backend. Each contender has its own client (its own session), as
 * two processes would. */

#define ML_ROUNDS 12
#define ML_PATHS 3
static const char *const ml_paths[ML_PATHS] = {"/ml/a", "/ml/b", "/ml/c"};

/* How many contenders believe they hold each path right now. */
static atomic_int ml_inside[ML_PATHS];

typedef struct ml_worker {
  pthread_t th;
  const char *url;
  int order[ML_PATHS]; /* indexes into ml_paths, in this worker's order */
  int n;
  atomic_int rounds;  /* completed rounds */
  atomic_int bad;     /* a path held by two, or a member not held (line) */
  atomic_int rc;      /* the first failing dlock code */
  atomic_int done;
} ml_worker_t;

static void *ml_worker_main(void *arg) {
  ml_worker_t *w = arg;
  dlock_client_t *c = zk_client_cfg(w->url, NULL);
  dlock_lock_t *locks[ML_PATHS];
  for (int i = 0; i < w->n; i++)
    locks[i] = zk_lock(c, ml_paths[w->order[i]], DLOCK_REENTRANT);
  dlock_multilock_t *m = NULL;
  CHECK_OK(dlock_multilock_new(&m, locks, (size_t)w->n));
  for (int r = 0; r < ML_ROUNDS && !atomic_load(&w->rc); r++) {
    int rc = dlock_multilock_acquire(m, WAIT_LONG, DLOCK_LEASE_WATCHDOG);
    if (rc) {
      atomic_store(&w->rc, rc);
      break;
    }
    for (int i = 0; i < w->n; i++)
      if (atomic_fetch_add(&ml_inside[w->order[i]], 1) != 0)
        atomic_store(&w->bad, __LINE__);
    /* the server agrees: every member has its one holder */
    for (int i = 0; i < w->n; i++)
      if (holders(locks[i]) != 1)
        atomic_store(&w->bad, __LINE__);
    for (int i = 0; i < w->n; i++)
      atomic_fetch_sub(&ml_inside[w->order[i]], 1);
    rc = dlock_multilock_release(m);
    if (rc) {
      atomic_store(&w->rc, rc);
      break;
    }
    atomic_fetch_add(&w->rounds, 1);
  }
  dlock_multilock_free(m);
  for (int i = 0; i < w->n; i++)
    dlock_lock_free(locks[i]);
  dlock_client_free(c);
  atomic_store(&w->done, 1);
  return NULL;
}

/* Three contenders, each with its own session, take overlapping sets of
 * paths in opposite orders (a,b,c / c,b,a / c,a), ML_ROUNDS times each:
 * every one finishes (no deadlock: an acquire waits 60 s, the test's bound
 * is far below the sum of such waits), no path is ever held by two of them,
 * and while one holds its set the server shows a holder on every member.
 * Afterwards no node is left under any path. */
static void t_multilock_opposite_orders(void) {
  th_zk_t *z = th_zk_start(1);
  CHECK(z);
  static ml_worker_t ws[3];
  memset(ws, 0, sizeof ws);
  const int orders[3][ML_PATHS] = {{0, 1, 2}, {2, 1, 0}, {2, 0, -1}};
  const int sizes[3] = {3, 3, 2};
  for (int i = 0; i < ML_PATHS; i++)
    atomic_store(&ml_inside[i], 0);
  for (int k = 0; k < 3; k++) {
    ws[k].url = th_zk_url(z);
    ws[k].n = sizes[k];
    memcpy(ws[k].order, orders[k], sizeof ws[k].order);
    CHECK(pthread_create(&ws[k].th, NULL, ml_worker_main, &ws[k]) == 0);
  }
  bool ok;
  TH_WAIT_FOR(ok,
              atomic_load(&ws[0].done) && atomic_load(&ws[1].done) &&
                  atomic_load(&ws[2].done),
              120000);
  CHECKF(ok, "contenders still running after 120 s: rounds %d %d %d",
         atomic_load(&ws[0].rounds), atomic_load(&ws[1].rounds),
         atomic_load(&ws[2].rounds));
  for (int k = 0; k < 3; k++) {
    pthread_join(ws[k].th, NULL);
    CHECKF(atomic_load(&ws[k].rc) == 0, "contender %d: %s", k,
           dlock_err_name(atomic_load(&ws[k].rc)));
    CHECKF(atomic_load(&ws[k].bad) == 0,
           "contender %d: exclusion broken (check at line %d)", k,
           atomic_load(&ws[k].bad));
    CHECK_INT(atomic_load(&ws[k].rounds), ==, ML_ROUNDS);
  }
  zhandle_t *zh = raw_connect(z);
  for (int i = 0; i < ML_PATHS; i++) {
    struct String_vector v;
    int zrc = raw_children(zh, ml_paths[i], &v);
    /* a container node may be gone already: no children either way */
    CHECKF(zrc == ZNONODE || (zrc == ZOK && v.count == 0),
           "%s: rc %d, %d nodes left", ml_paths[i], zrc,
           zrc == ZOK ? v.count : -1);
    if (zrc == ZOK)
      deallocate_String_vector(&v);
  }
  zookeeper_close(zh);
  th_zk_stop(z);
}

/* Nodes directly under path (-1 on an error; 0 when the path is gone). */
static int raw_count(zhandle_t *zh, const char *path) {
  struct String_vector v;
  int zrc = raw_children(zh, path, &v);
  if (zrc == ZNONODE)
    return 0;
  if (zrc != ZOK)
    return -1;
  int n = v.count;
  deallocate_String_vector(&v);
  return n;
}

typedef struct ml_bg {
  pthread_t th;
  dlock_multilock_t *m;
  uint64_t tid; /* the acquiring thread's id, set before it acquires */
  atomic_int rc;
  atomic_int state; /* 0 waiting, 1 done */
} ml_bg_t;

static void *ml_bg_main(void *arg) {
  ml_bg_t *b = arg;
  b->tid = dlock_thread_id();
  atomic_store(&b->rc, dlock_multilock_acquire(b->m, WAIT_LONG,
                                               DLOCK_LEASE_WATCHDOG));
  atomic_store(&b->state, 1);
  return NULL;
}

/* All or nothing, as another session sees it: while one member is held
 * elsewhere, a multilock that gives up (wait 0: EBUSY, a short wait:
 * ETIMEDOUT) leaves no node under any member, and one that waits is queued
 * on the busy member alone, holding none of the others. Once that member
 * is released it holds all three, and only its owner's release lets them
 * go, leaving no node. */
static void t_multilock_all_or_nothing(void) {
  th_zk_t *z = th_zk_start(1);
  CHECK(z);
  dlock_client_t *other = zk_client(z), *mine = zk_client(z);
  dlock_lock_t *blocker = zk_lock(other, "/ml/b", DLOCK_REENTRANT);
  CHECK_OK(dlock_lock_acquire(blocker, 0, DLOCK_LEASE_WATCHDOG));
  dlock_lock_t *ls[ML_PATHS];
  for (int i = 0; i < ML_PATHS; i++)
    ls[i] = zk_lock(mine, ml_paths[i], DLOCK_REENTRANT);
  dlock_multilock_t *m = NULL;
  CHECK_OK(dlock_multilock_new(&m, ls, ML_PATHS));
  zhandle_t *zh = raw_connect(z);

  CHECK_RC(dlock_multilock_acquire(m, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  CHECK(strstr(dlock_last_error(), "/ml/b"));
  CHECK_INT(raw_count(zh, "/ml/a"), ==, 0);
  CHECK_INT(raw_count(zh, "/ml/b"), ==, 1); /* the blocker's node only */
  CHECK_INT(raw_count(zh, "/ml/c"), ==, 0);
  CHECK_RC(dlock_multilock_release(m), DLOCK_ENOTOWNER);

  CHECK_RC(dlock_multilock_acquire(m, 300, DLOCK_LEASE_WATCHDOG),
           DLOCK_ETIMEDOUT);
  CHECK_INT(raw_count(zh, "/ml/a"), ==, 0);
  CHECK_INT(raw_count(zh, "/ml/b"), ==, 1);
  CHECK_INT(raw_count(zh, "/ml/c"), ==, 0);

  /* a waiting multilock: queued on /ml/b, holding neither /ml/a nor
   * /ml/c (the first attempt may take /ml/a before it meets /ml/b; it
   * lets it go before it waits) */
  static ml_bg_t b;
  memset(&b, 0, sizeof b);
  b.m = m;
  CHECK(pthread_create(&b.th, NULL, ml_bg_main, &b) == 0);
  /* (its try of /ml/b while it holds /ml/a also shows as a queued node
   * for a moment: wait for the waiting state itself, which a multilock
   * that kept /ml/a while it waits never reaches) */
  bool ok;
  TH_WAIT_FOR(ok,
              queued(blocker) == 1 && raw_count(zh, "/ml/a") == 0 &&
                  raw_count(zh, "/ml/c") == 0,
              20000);
  CHECK(ok);
  CHECK_INT(atomic_load(&b.state), ==, 0);
  th_sleep_ms(200); /* and it stays so */
  CHECK_INT(queued(blocker), ==, 1);
  CHECK_INT(raw_count(zh, "/ml/a"), ==, 0);
  CHECK_INT(raw_count(zh, "/ml/c"), ==, 0);
  dlock_lock_t *probe_a = zk_lock(other, "/ml/a", DLOCK_REENTRANT);
  CHECK_OK(dlock_lock_acquire(probe_a, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(probe_a));

  CHECK_OK(dlock_lock_release(blocker));
  TH_WAIT_FOR(ok, atomic_load(&b.state) == 1, 30000);
  CHECK(ok);
  pthread_join(b.th, NULL);
  CHECK_OK(atomic_load(&b.rc));
  for (int i = 0; i < ML_PATHS; i++) {
    CHECK_INT(raw_count(zh, ml_paths[i]), ==, 1);
    dlock_lock_t *probe = zk_lock(other, ml_paths[i], DLOCK_REENTRANT);
    CHECK_RC(dlock_lock_acquire(probe, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
    dlock_lock_free(probe);
  }
  /* another thread neither releases it nor takes it again; its owner's
   * release (by thread id: that thread is gone) lets every member go */
  CHECK_RC(dlock_multilock_release(m), DLOCK_ENOTOWNER);
  CHECK_RC(dlock_multilock_acquire(m, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EINVAL);
  for (int i = 0; i < ML_PATHS; i++)
    CHECK_INT(raw_count(zh, ml_paths[i]), ==, 1);
  CHECK_OK(dlock_multilock_release_as(m, b.tid));
  for (int i = 0; i < ML_PATHS; i++)
    CHECK_INT(raw_count(zh, ml_paths[i]), ==, 0);
  CHECK_RC(dlock_multilock_release_as(m, b.tid), DLOCK_ENOTOWNER);
  dlock_multilock_free(m);
  for (int i = 0; i < ML_PATHS; i++)
    dlock_lock_free(ls[i]);
  dlock_client_free(mine);
  zookeeper_close(zh);
  dlock_lock_free(probe_a);
  dlock_lock_free(blocker);
  dlock_client_free(other);
  th_zk_stop(z);
}

/* A waiter whose attempt meets a connection that stopped answering (the
 * server paused: a request times out, the session lives on) keeps waiting
 * instead of failing, and gets the lock once the server answers again and
 * the holder releases. Before: its acquire returned DLOCK_EIOTIMEOUT. */
static void t_waiter_survives_outage(void) {
  th_zk_t *z = th_zk_start(1);
  CHECK(z);
  zk_cfg_t cfg = {.session_ms = 30000, .command_ms = 800};
  dlock_client_t *a = zk_client_cfg(th_zk_url(z), &cfg);
  dlock_client_t *b = zk_client_cfg(th_zk_url(z), &cfg);
  dlock_lock_t *la = zk_lock(a, "outage", DLOCK_REENTRANT);
  dlock_lock_t *lb = zk_lock(b, "outage", DLOCK_REENTRANT);
  CHECK_OK(dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_INT(th_zk_pause(z, 0), ==, 0);
  bg_t w;
  bg_start(&w, lb, 30000); /* its first attempt meets the silent server */
  bool ok;
  /* well past the command timeout: an attempt has timed out by now */
  th_sleep_ms(2500);
  CHECK_INT(atomic_load(&w.state), ==, 0);
  CHECK_INT(th_zk_resume(z, 0), ==, 0);
  int rc;
  TH_WAIT_FOR(ok, (rc = dlock_lock_release(la)) != DLOCK_EUNAVAILABLE &&
                      rc != DLOCK_EIOTIMEOUT,
              20000);
  CHECK(ok);
  CHECK_OK(rc);
  TH_WAIT_FOR(ok, atomic_load(&w.state) != 0, 20000);
  CHECK(ok);
  CHECK_INT(atomic_load(&w.rc), ==, 0);
  CHECK_INT(atomic_load(&w.state), ==, 1);
  atomic_store(&w.release_now, 1);
  pthread_join(w.th, NULL);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_zk_stop(z);
}

/* ------------------------------------------------- sent async operations */

/* An async try (wait 0) or release of l by owner tid: its rc. */
static int async_try(dlock_client_t *c, dlock_lock_t *l, uint64_t tid,
                     int64_t *token) {
  th_async_outcome_t o = th_async_one(c, l, tid, true, 0, DLOCK_LEASE_WATCHDOG);
  if (token)
    *token = o.value;
  return o.rc;
}

static int async_release(dlock_client_t *c, dlock_lock_t *l, uint64_t tid) {
  return th_async_one(c, l, tid, false, 0, 0).rc;
}

/* The async try and release of a reentrant or fenced lock are sent
 * (backend.h lock_*_send): on a client warmed up by one blocking acquire
 * and release, grants (with re-entries), refusals and releases all come
 * without the async pool starting a thread. */
static void t_sent_no_pool_thread(void) {
  th_zk_t *z = th_zk_start(1);
  CHECK(z);
  dlock_client_t *c = zk_client(z);
  dlock_client_t *other = zk_client(z);
  dlock_lock_t *l = zk_lock(c, "sent", DLOCK_FENCED);
  dlock_lock_t *held = zk_lock(c, "sent-held", DLOCK_REENTRANT);
  dlock_lock_t *held_o = zk_lock(other, "sent-held", DLOCK_REENTRANT);
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(l));
  CHECK_OK(dlock_lock_acquire(held_o, 0, DLOCK_LEASE_WATCHDOG));
  int before = th_thread_count();
  int64_t last = 0;
  for (int i = 0; i < 20; i++) {
    uint64_t tid = 5000 + (uint64_t)i;
    int64_t token = 0, again = 0;
    CHECK_INT(async_try(c, l, tid, &token), ==, 0);
    CHECK_INT(token, >, last); /* a fresh node's czxid each time */
    last = token;
    CHECK_INT(async_try(c, l, tid, &again), ==, 0); /* a re-entry */
    CHECK_INT(again, ==, token);
    CHECK_RC(async_try(c, held, tid, NULL), DLOCK_EBUSY);
    CHECK_INT(async_release(c, l, tid), ==, 0);
    CHECK_INT(async_release(c, l, tid), ==, 0);
  }
  int after = th_thread_count();
  printf("threads: %d before 20 x (try, re-entry, refused try, 2 releases), "
         "%d after\n",
         before, after);
  CHECKF(after <= before, "threads: %d before the async calls, %d after",
         before, after);
  /* nothing of ours stayed behind: free here, still held there */
  bool locked = true;
  CHECK_OK(dlock_lock_is_locked(l, &locked));
  CHECK(!locked);
  CHECK_INT(holders(held), ==, 1);
  CHECK_INT(queued(held), ==, 0);
  CHECK_OK(dlock_lock_release(held_o));
  dlock_lock_free(l);
  dlock_lock_free(held);
  dlock_lock_free(held_o);
  dlock_client_free(c);
  dlock_client_free(other);
  th_zk_stop(z);
}

/* A sent try meets a server that stopped answering (SIGSTOP): its
 * callback gets DLOCK_EIOTIMEOUT (by the command timeout, kept by the
 * event loop, well before the connection is declared lost). Once the
 * server runs again, the owner's next acquire finds the node that create
 * made (protected) and holds with it; released, the lock is free. */
static void t_sent_server_stopped(void) {
  th_zk_t *z = th_zk_start(1);
  CHECK(z);
  zk_cfg_t cfg = {.session_ms = 30000, .command_ms = 1000};
  dlock_client_t *c = zk_client_cfg(th_zk_url(z), &cfg);
  dlock_client_t *other = zk_client(z);
  dlock_lock_t *l = zk_lock(c, "sent-stop", DLOCK_REENTRANT);
  dlock_lock_t *lo = zk_lock(other, "sent-stop", DLOCK_REENTRANT);
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(l));
  CHECK_INT(th_zk_pause(z, 0), ==, 0);
  int rc = async_try(c, l, 0, NULL);
  CHECK_INT(th_zk_resume(z, 0), ==, 0);
  CHECKF(rc == DLOCK_EIOTIMEOUT, "the try: %s (%s)", dlock_err_name(rc),
         dlock_last_error());
  bool ok;
  TH_WAIT_FOR(ok, (rc = dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG)) == 0,
              20000);
  CHECKF(ok, "the next acquire: %s", dlock_err_name(rc));
  CHECK_INT(holders(l), ==, 1);
  CHECK_INT(queued(l), ==, 0);
  CHECK_OK(dlock_lock_release(l));
  CHECK_OK(dlock_lock_acquire(lo, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(lo));
  CHECK_INT(async_try(c, l, 0, NULL), ==, 0);
  CHECK_INT(async_release(c, l, 0), ==, 0);
  dlock_lock_free(l);
  dlock_lock_free(lo);
  dlock_client_free(c);
  dlock_client_free(other);
  th_zk_stop(z);
}

/* The server restarts between sent operations (its connection gone): the
 * next try still gets the lock (sent on the reconnected session, or
 * handed to the blocking path while it reconnects), and its release
 * leaves it free. */
static void t_sent_after_restart(void) {
  th_zk_t *z = th_zk_start(1);
  CHECK(z);
  zk_cfg_t cfg = {.session_ms = 30000};
  dlock_client_t *c = zk_client_cfg(th_zk_url(z), &cfg);
  dlock_lock_t *l = zk_lock(c, "sent-restart", DLOCK_FENCED);
  CHECK_INT(async_try(c, l, 0, NULL), ==, 0);
  CHECK_INT(async_release(c, l, 0), ==, 0);
  CHECK_INT(th_zk_kill9(z, 0), ==, 0);
  CHECK_INT(th_zk_up(z, 0), ==, 0);
  int rc = async_try(c, l, 0, NULL);
  CHECKF(rc == 0, "the try after the restart: %s (%s)", dlock_err_name(rc),
         dlock_last_error());
  CHECK_INT(async_release(c, l, 0), ==, 0);
  CHECK_INT(async_try(c, l, 0, NULL), ==, 0);
  CHECK_INT(async_release(c, l, 0), ==, 0);
  dlock_client_t *other = zk_client(z);
  dlock_lock_t *lo = zk_lock(other, "sent-restart", DLOCK_FENCED);
  CHECK_OK(dlock_lock_acquire(lo, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_lock_release(lo));
  dlock_lock_free(l);
  dlock_lock_free(lo);
  dlock_client_free(c);
  dlock_client_free(other);
  th_zk_stop(z);
}

static const check_case_t cases[] = {
    {"harness_ensemble", t_harness_ensemble},
    {"bad_url", t_bad_url},
    {"exclusion_processes", t_exclusion_processes},
    {"reentrant_try", t_reentrant_try},
    {"fifo_wakeup", t_fifo_wakeup},
    {"fenced_tokens", t_fenced_tokens},
    {"read_write", t_read_write},
    {"curator_layout", t_curator_layout},
    {"session_expiry", t_session_expiry},
    {"waiter_session_expiry", t_waiter_session_expiry},
    {"leader_killed", t_leader_killed},
    {"waiter_survives_outage", t_waiter_survives_outage},
    {"suspended_then_lost", t_suspended_then_lost},
    {"cli", t_cli},
    {"permit_semaphore", t_permit_semaphore},
    {"curator_waiter_not_holder", t_curator_waiter_not_holder},
    {"protected_create", t_protected_create},
    {"quiet_and_unsupported", t_quiet_and_unsupported},
    {"multilock_opposite_orders", t_multilock_opposite_orders},
    {"multilock_all_or_nothing", t_multilock_all_or_nothing},
    {"sent_no_pool_thread", t_sent_no_pool_thread},
    {"sent_server_stopped", t_sent_server_stopped},
    {"sent_after_restart", t_sent_after_restart},
};

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "--counter-child") == 0)
    return child_counter(argv[2], argv[3]);
  if (argc == 3 && strcmp(argv[1], "--wait-expiry-child") == 0)
    return child_wait_expiry(argv[2]);
  if (argc == 5 && strcmp(argv[1], "--expiry-child") == 0)
    return child_expiry(argv[2], atoi(argv[3]), atoi(argv[4]));
  return check_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
