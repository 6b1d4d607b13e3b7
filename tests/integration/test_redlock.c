/*
 * test_redlock.c - Redlock over five real redis-server processes, and the
 * multilock.
 *
 * Design note: every case starts five servers (th_server_start x5) and a
 * Redlock client over them (dlock_client_new_redlock). What a user would
 * observe is asserted: mutual exclusion (racy GET/SET increments on node
 * 1 from forked processes, each with its own client, as test_mutex does),
 * grants with two nodes killed, a clean failure with three killed and no
 * lock key left on the live nodes, an acquire that completes while one
 * node is frozen (SIGSTOP) in less than the command timeout, the validity
 * check (three nodes frozen past the lease, then resumed: a majority
 * grants too late and every node is released), renewal with a minority
 * and a majority gone (the lost callback), wake-up by a release instead of
 * the holder's lease, fencing tokens, bad input, and multilocks that two
 * processes take in opposite orders without deadlock. Children are
 * re-executed (`test_redlock --child ...`) so each builds its own client.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "itest.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/socket.h>

#define N 5
#define NAME "redlock"
#define COUNTER "redlock-counter"
#define ACQ_WAIT_MS 30000

static th_server_t *srv[N];

static void start_all(void) {
  for (int i = 0; i < N; i++) {
    srv[i] = th_server_start(NULL);
    CHECK(srv[i]);
  }
}

static void stop_all(void) {
  for (int i = 0; i < N; i++)
    th_server_stop(srv[i]);
}

typedef struct rl_cfg {
  int64_t node_timeout_ms; /* 0: the default */
  int64_t command_ms;      /* 0: 2000 */
  int64_t watchdog_ms;     /* 0: the default */
  int64_t connect_ms;      /* 0: 2000 */
  it_lost_t *lost;
} rl_cfg_t;

static dlock_client_t *rl_client_ports(const int *ports, const rl_cfg_t *cfg) {
  char urls[N][64];
  const char *u[N];
  for (int i = 0; i < N; i++) {
    snprintf(urls[i], sizeof urls[i], "redis://127.0.0.1:%d", ports[i]);
    u[i] = urls[i];
  }
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(
      o, cfg && cfg->connect_ms ? cfg->connect_ms : 2000));
  CHECK_OK(dlock_options_set_command_timeout(
      o, cfg && cfg->command_ms ? cfg->command_ms : 2000));
  if (cfg && cfg->node_timeout_ms)
    CHECK_OK(dlock_options_set_redlock_timing(o, cfg->node_timeout_ms, 10, 2));
  if (cfg && cfg->watchdog_ms)
    CHECK_OK(dlock_options_set_watchdog_timeout(o, cfg->watchdog_ms));
  if (cfg && cfg->lost)
    CHECK_OK(dlock_options_set_lost_callback(o, it_lost_cb, cfg->lost));
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new_redlock(&c, u, N, o));
  dlock_options_free(o);
  CHECK_INT(dlock_client_nodes(c), ==, N);
  return c;
}

static dlock_client_t *rl_client(const rl_cfg_t *cfg) {
  int ports[N];
  for (int i = 0; i < N; i++)
    ports[i] = srv[i]->port;
  return rl_client_ports(ports, cfg);
}

/* How many live nodes (of those listed alive) have the lock key. */
static int held_on(const char *name, const bool *alive) {
  int n = 0;
  for (int i = 0; i < N; i++)
    if ((!alive || alive[i]) && it_exists(srv[i], name))
      n++;
  return n;
}

/* -------------------------------------------------- mutual exclusion */

static redisContext *counter_conn(int port) {
  struct timeval tv = {.tv_sec = 5, .tv_usec = 0};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
  CHECK(c && !c->err);
  redisSetTimeout(c, tv);
  return c;
}

/* child: ITERS PORT1..PORT5; racy increments on node 1 under the lock.
 * Its node timeout is 1 s, not the default 50 ms: what is tested here is
 * exclusion, and a majority that does not answer within the node timeout
 * fails an acquire at once (DLOCK_EUNAVAILABLE, docs/REDLOCK.md), which
 * five servers and four processes beside a CPU load on both cores did
 * under ASan ("2 of 5 nodes answered", once in a suite run). */
static int child_main(int iters, const int *ports) {
  rl_cfg_t cfg = {.node_timeout_ms = 1000};
  dlock_client_t *c = rl_client_ports(ports, &cfg);
  dlock_lock_t *l = it_lock(c, NAME);
  redisContext *rc = counter_conn(ports[0]);
  for (int i = 0; i < iters; i++) {
    CHECK_OK(dlock_lock_acquire(l, ACQ_WAIT_MS, DLOCK_LEASE_WATCHDOG));
    redisReply *r = redisCommand(rc, "GET " COUNTER);
    CHECK(r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL));
    long long v = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
    freeReplyObject(r);
    sched_yield();
    r = redisCommand(rc, "SET " COUNTER " %lld", v + 1);
    CHECK(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    CHECK_OK(dlock_lock_release(l));
  }
  redisFree(rc);
  dlock_lock_free(l);
  dlock_client_free(c);
  return 0;
}

#define NPROC 4
#define PROC_ITERS 60

static void t_processes(void) {
  start_all();
  char iters[16], ports[N][16];
  snprintf(iters, sizeof iters, "%d", PROC_ITERS);
  for (int i = 0; i < N; i++)
    snprintf(ports[i], sizeof ports[i], "%d", srv[i]->port);
  pid_t pids[NPROC];
  fflush(stdout);
  fflush(stderr);
  for (int p = 0; p < NPROC; p++) {
    pids[p] = fork();
    CHECK(pids[p] >= 0);
    if (pids[p] == 0) {
      char *argv[] = {"test_redlock", "--child", iters,    ports[0],
                      ports[1],       ports[2],  ports[3], ports[4],
                      NULL};
      execv("/proc/self/exe", argv);
      _exit(127);
    }
  }
  int failed = 0;
  for (int p = 0; p < NPROC; p++)
    if (!it_child_ok(it_spawn_wait(pids[p], 90000)))
      failed++;
  CHECK_INT(failed, ==, 0);
  char *v = th_redis_str(srv[0], "GET " COUNTER);
  CHECK(v);
  CHECK_INT(strtoll(v, NULL, 10), ==, NPROC * PROC_ITERS);
  free(v);
  CHECK_INT(held_on(NAME, NULL), ==, 0);
  stop_all();
}

/* ------------------------------------------------------- node failures */

static void t_two_down_still_granted(void) {
  start_all();
  dlock_client_t *c = rl_client(NULL);
  dlock_lock_t *l = it_lock(c, NAME);
  CHECK(th_server_kill9(srv[1]) == 0);
  CHECK(th_server_kill9(srv[3]) == 0);
  bool alive[N] = {true, false, true, false, true};
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_INT(held_on(NAME, alive), ==, 3);
  bool held = false;
  CHECK_OK(dlock_lock_is_held_by_thread(l, &held));
  CHECK(held);
  CHECK_OK(dlock_lock_release(l));
  CHECK_INT(held_on(NAME, alive), ==, 0);
  /* and again with a wait, through the wake-up path of three nodes */
  CHECK_OK(dlock_lock_acquire(l, 5000, 10000));
  CHECK_OK(dlock_lock_release(l));
  /* a client created now, with two nodes down, works on the majority */
  dlock_client_t *c2 = rl_client(NULL);
  dlock_lock_t *l2 = it_lock(c2, NAME);
  CHECK_OK(dlock_lock_acquire(l2, 0, 10000));
  CHECK_RC(dlock_lock_acquire(l, 0, 10000), DLOCK_EBUSY);
  CHECK_OK(dlock_lock_release(l2));
  dlock_lock_free(l2);
  dlock_client_free(c2);
  /* with three down, creating one fails */
  CHECK(th_server_kill9(srv[0]) == 0);
  const char *u[N];
  for (int i = 0; i < N; i++)
    u[i] = srv[i]->url;
  dlock_client_t *c3 = NULL;
  CHECK_RC(dlock_client_new_redlock(&c3, u, N, NULL), DLOCK_EUNAVAILABLE);
  CHECK(strstr(dlock_last_error(), "3 of 5 nodes are down"));
  CHECK(c3 == NULL);
  dlock_lock_free(l);
  dlock_client_free(c);
  stop_all();
}

static void t_three_down_fails_cleanly(void) {
  start_all();
  dlock_client_t *c = rl_client(NULL);
  dlock_lock_t *l = it_lock(c, NAME);
  CHECK(th_server_kill9(srv[0]) == 0);
  CHECK(th_server_kill9(srv[2]) == 0);
  CHECK(th_server_kill9(srv[4]) == 0);
  bool alive[N] = {false, true, false, true, false};
  int64_t t0 = th_now_ms();
  int rc = dlock_lock_acquire(l, 3000, DLOCK_LEASE_WATCHDOG);
  int64_t took = th_now_ms() - t0;
  printf("three of five down: %s (%s) after %lld ms\n", dlock_err_name(rc),
         dlock_last_error(), (long long)took);
  CHECK_RC(rc, DLOCK_EUNAVAILABLE);
  CHECK(strstr(dlock_last_error(), "2 of 5 nodes answered"));
  /* within the wait (plus one round of node timeouts and slack) */
  CHECK_INT(took, <, 3000 + 2000);
  /* nothing left held on the live nodes */
  CHECK_INT(held_on(NAME, alive), ==, 0);
  /* a release cannot learn anything from a minority either */
  CHECK_RC(dlock_lock_release(l), DLOCK_EUNAVAILABLE);
  dlock_lock_free(l);
  dlock_client_free(c);
  stop_all();
}

/* A port on 127.0.0.1 whose connects hang, as an unreachable host's do:
 * a listener with a full accept queue (backlog 0, filled by connections
 * nobody accepts), so the kernel drops further SYNs. fds[0] is the
 * listener, fds[1..2] the fillers; close them all to end it. */
static int blackhole(int fds[3]) {
  fds[0] = socket(AF_INET, SOCK_STREAM, 0);
  CHECK(fds[0] >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  CHECK(bind(fds[0], (struct sockaddr *)&a, sizeof a) == 0);
  CHECK(listen(fds[0], 0) == 0);
  socklen_t len = sizeof a;
  CHECK(getsockname(fds[0], (struct sockaddr *)&a, &len) == 0);
  for (int i = 1; i < 3; i++) {
    fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    CHECK(fds[i] >= 0);
    connect(fds[i], (struct sockaddr *)&a, sizeof a); /* EINPROGRESS */
  }
  th_sleep_ms(50); /* the fillers' handshakes (scenario setup) */
  return ntohs(a.sin_port);
}

/* Two of five nodes unreachable (connects hang): the first request pays
 * their dials (a node timeout each, after the others' requests are sent);
 * later ones do not dial them again before the back-off ends, so a run of
 * acquires and releases costs about what it costs on three nodes. */
static void t_unreachable_nodes(void) {
  for (int i = 0; i < 3; i++) {
    srv[i] = th_server_start(NULL);
    CHECK(srv[i]);
  }
  int holes[2][3];
  int ports[N] = {srv[0]->port, blackhole(holes[0]), srv[1]->port,
                  blackhole(holes[1]), srv[2]->port};
  rl_cfg_t cfg = {.node_timeout_ms = 100, .connect_ms = 300};
  dlock_client_t *c = rl_client_ports(ports, &cfg);
  dlock_lock_t *l = it_lock(c, NAME);
  enum { PAIRS = 20 };
  int64_t t0 = th_now_ms();
  for (int i = 0; i < PAIRS; i++) {
    CHECK_OK(dlock_lock_acquire(l, 0, 10000));
    CHECK_OK(dlock_lock_release(l));
  }
  int64_t took = th_now_ms() - t0;
  printf("%d acquire+release pairs with two of five nodes unreachable: "
         "%lld ms (dialling them at each request: at least %d ms)\n",
         PAIRS, (long long)took, PAIRS * 2 * 2 * 100);
  /* the back-off (1 s at a 100 ms node timeout) allows a few re-dials */
  CHECK_INT(took, <, PAIRS * 2 * 2 * 100 / 2);
  int live[N] = {0, -1, 1, -1, 2};
  for (int i = 0; i < N; i++)
    if (live[i] >= 0)
      CHECK_INT(it_exists(srv[live[i]], NAME), ==, 0);
  dlock_lock_free(l);
  dlock_client_free(c);
  for (int h = 0; h < 2; h++)
    for (int i = 0; i < 3; i++)
      close(holes[h][i]);
  for (int i = 0; i < 3; i++)
    th_server_stop(srv[i]);
}

static void t_frozen_node(void) {
  start_all();
  /* a command timeout far above the node timeout: an acquire bounded by
   * the frozen node would take the former */
  rl_cfg_t cfg = {.node_timeout_ms = 200, .command_ms = 10000};
  dlock_client_t *c = rl_client(&cfg);
  dlock_lock_t *l = it_lock(c, NAME);
  CHECK(th_server_pause(srv[2]) == 0);
  int64_t t0 = th_now_ms();
  CHECK_OK(dlock_lock_acquire(l, 0, 20000));
  int64_t took = th_now_ms() - t0;
  printf("acquire with one node frozen: %lld ms\n", (long long)took);
  CHECK_INT(took, <, 5000);
  /* queries ask every node at once, each within the node timeout */
  t0 = th_now_ms();
  bool locked = false;
  int64_t count = 0;
  CHECK_OK(dlock_lock_is_locked(l, &locked));
  CHECK(locked);
  CHECK_OK(dlock_lock_hold_count(l, &count));
  CHECK_INT(count, ==, 1);
  took = th_now_ms() - t0;
  printf("two queries with one node frozen: %lld ms\n", (long long)took);
  CHECK_INT(took, <, 5000);
  t0 = th_now_ms();
  CHECK_OK(dlock_lock_release(l));
  took = th_now_ms() - t0;
  printf("release with one node frozen: %lld ms\n", (long long)took);
  CHECK_INT(took, <, 5000);
  bool alive[N] = {true, true, false, true, true};
  CHECK_INT(held_on(NAME, alive), ==, 0);
  CHECK(th_server_resume(srv[2]) == 0);
  /* the frozen node executed the acquire it got late, and then the
   * release (sent after it on another connection) or not: either way it
   * expires within the lease; the lock is free for a majority now */
  CHECK_OK(dlock_lock_acquire(l, 5000, 10000));
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  stop_all();
}

typedef struct resumer {
  int64_t after_ms;
  pthread_t th;
} resumer_t;

static void *resume_main(void *arg) {
  resumer_t *r = arg;
  th_sleep_ms(r->after_ms); /* the delay under test, not a wait */
  for (int i = 2; i < N; i++)
    th_server_resume(srv[i]);
  return NULL;
}

/* Three nodes frozen for longer than the lease: their grants arrive after
 * the validity ran out, so the majority's grant is refused and every node
 * is released. */
static void t_validity_refused(void) {
  start_all();
  rl_cfg_t cfg = {.node_timeout_ms = 3000, .command_ms = 10000};
  dlock_client_t *c = rl_client(&cfg);
  dlock_lock_t *l = it_lock(c, NAME);
  for (int i = 2; i < N; i++)
    CHECK(th_server_pause(srv[i]) == 0);
  resumer_t r = {.after_ms = 400};
  CHECK(pthread_create(&r.th, NULL, resume_main, &r) == 0);
  int rc = dlock_lock_acquire(l, 0, 200);
  printf("lease 200 ms, majority answering after 400 ms: %s (%s)\n",
         dlock_err_name(rc), dlock_last_error());
  pthread_join(r.th, NULL);
  CHECK_RC(rc, DLOCK_EBUSY);
  /* released on every node, the late ones included */
  CHECK_INT(held_on(NAME, NULL), ==, 0);
  /* a lease that can never be valid is refused before anything is sent */
  CHECK_RC(dlock_lock_acquire(l, 0, 2), DLOCK_EINVAL);
  CHECK(strstr(dlock_last_error(), "drift"));
  dlock_lock_free(l);
  dlock_client_free(c);
  stop_all();
}

/* --------------------------------------------------------------- renewal */

static void t_renewal_minority_gone(void) {
  start_all();
  it_lost_t lost;
  it_lost_init(&lost);
  rl_cfg_t cfg = {.watchdog_ms = 900, .lost = &lost};
  dlock_client_t *c = rl_client(&cfg);
  dlock_lock_t *l = it_lock(c, NAME);
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  CHECK(th_server_kill9(srv[0]) == 0);
  CHECK(th_server_kill9(srv[4]) == 0);
  /* renewed on the live nodes, several times over a few leases */
  for (int k = 0; k < 3; k++)
    CHECK(it_wait_renewed(srv[2], NAME, 5000));
  CHECK_INT(it_lost_count(&lost), ==, 0);
  bool held = false;
  CHECK_OK(dlock_lock_is_held_by_thread(l, &held));
  CHECK(held);
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  stop_all();
}

static void t_renewal_majority_gone(void) {
  start_all();
  it_lost_t lost;
  it_lost_init(&lost);
  rl_cfg_t cfg = {.watchdog_ms = 900, .lost = &lost};
  dlock_client_t *c = rl_client(&cfg);
  dlock_lock_t *l = it_lock(c, NAME);
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  int64_t t0 = th_now_ms();
  CHECK(th_server_kill9(srv[0]) == 0);
  CHECK(th_server_kill9(srv[1]) == 0);
  CHECK(th_server_kill9(srv[4]) == 0);
  CHECK(it_lost_wait(&lost, 1, 10000));
  printf("majority gone: reported lost after %lld ms (reason %d)\n",
         (long long)(th_now_ms() - t0), (int)lost.reason);
  CHECK(strcmp(lost.name, NAME) == 0);
  CHECK_INT(lost.reason, ==, DLOCK_LOST_UNREACHABLE);
  /* as with one server down: the release cannot reach a majority */
  CHECK_RC(dlock_lock_release(l), DLOCK_EUNAVAILABLE);
  /* the majority comes back: the hold is gone (reported lost), and the
   * lock can be taken again once the minority's copies expire */
  CHECK(th_server_up(srv[0]) == 0);
  CHECK(th_server_up(srv[1]) == 0);
  CHECK_OK(dlock_lock_acquire(l, 10000, 5000));
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  stop_all();
}

/* ------------------------------------------------------ waits and kinds */

/* A waiter is woken by the release, long before the holder's lease. */
static void t_wait_woken_by_release(void) {
  start_all();
  dlock_client_t *c = rl_client(NULL);
  dlock_client_t *c2 = rl_client(NULL);
  dlock_lock_t *l = it_lock(c, NAME);
  dlock_lock_t *l2 = it_lock(c2, NAME);
  CHECK_OK(dlock_lock_acquire(l, 0, 60000));
  it_async_t a;
  it_async_start(&a, l2, 20000, 60000, true);
  /* the waiter subscribed on the nodes before the release */
  char ch[128];
  it_channel(NAME, ch, sizeof ch);
  bool ok;
  TH_WAIT_FOR(ok, it_numsub(srv[0], ch) >= 1 && it_numsub(srv[4], ch) >= 1,
              10000);
  CHECK(ok);
  CHECK(!atomic_load(&a.done));
  CHECK_OK(dlock_lock_release(l));
  CHECK(it_async_wait(&a, 25000));
  CHECK_OK(a.rc);
  CHECK_OK(it_async_finish(&a));
  CHECK_INT(held_on(NAME, NULL), ==, 0);
  dlock_lock_free(l);
  dlock_lock_free(l2);
  dlock_client_free(c);
  dlock_client_free(c2);
  stop_all();
}

static void t_fenced_tokens(void) {
  start_all();
  dlock_client_t *c = rl_client(NULL);
  dlock_lock_t *l = NULL;
  CHECK_OK(dlock_lock_new_kind(c, NAME, DLOCK_FENCED, &l));
  /* each node counts its own grants; the token is the largest of the
   * granting majority's counters */
  for (int i = 0; i < N; i++)
    th_redis_int(srv[i], "SET redisson_lock_token:{" NAME "} %d", 40 + i % 2);
  int64_t t1 = 0, t2 = 0;
  CHECK_OK(dlock_lock_acquire_fenced(l, 0, 10000, &t1));
  CHECK_INT(t1, ==, 42);
  CHECK_OK(dlock_lock_release(l));
  /* a node far ahead, and two nodes down: any two majorities share a node,
   * so every later token is larger whichever majority grants */
  th_redis_int(srv[1], "SET redisson_lock_token:{" NAME "} 100");
  int64_t last = t1;
  for (int k = 0; k < 5; k++) {
    CHECK_OK(dlock_lock_acquire_fenced(l, 0, 10000, &t2));
    CHECK_INT(t2, >, last);
    last = t2;
    CHECK_OK(dlock_lock_release(l));
    if (k == 2) {
      CHECK(th_server_kill9(srv[1]) == 0);
      CHECK(th_server_kill9(srv[4]) == 0);
    }
  }
  /* a reentrant handle on the same name is excluded by it */
  dlock_client_t *c2 = rl_client(NULL);
  dlock_lock_t *r = it_lock(c2, NAME);
  CHECK_OK(dlock_lock_acquire_fenced(l, 0, 10000, &t1));
  CHECK_RC(dlock_lock_acquire(r, 0, 10000), DLOCK_EBUSY);
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(r);
  dlock_client_free(c2);
  dlock_lock_free(l);
  dlock_client_free(c);
  stop_all();
}

static void t_bad_input(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = NULL;
  const char *two[2] = {s->url, "redis://127.0.0.1:1"};
  CHECK_RC(dlock_client_new_redlock(&c, two, 2, NULL), DLOCK_EINVAL);
  CHECK(strstr(dlock_last_error(), "odd"));
  CHECK(c == NULL);
  CHECK_RC(dlock_client_new_redlock(&c, NULL, 3, NULL), DLOCK_EINVAL);
  const char *dup[3] = {s->url, s->url, s->url};
  CHECK_RC(dlock_client_new_redlock(&c, dup, 3, NULL), DLOCK_EINVAL);
  CHECK(strstr(dlock_last_error(), "same URL"));
  const char *bad[1] = {"zk://127.0.0.1:2181"};
  CHECK_RC(dlock_client_new_redlock(&c, bad, 1, NULL), DLOCK_EURL);
  /* one node alone is a (degenerate) Redlock */
  const char *one[1] = {s->url};
  CHECK_OK(dlock_client_new_redlock(&c, one, 1, NULL));
  dlock_lock_t *l = NULL;
  CHECK_RC(dlock_lock_new_kind(c, NAME, DLOCK_FAIR, &l), DLOCK_ENOTSUP);
  CHECK(strstr(dlock_last_error(), "redlock"));
  dlock_semaphore_t *sem = NULL;
  CHECK_RC(dlock_semaphore_new(c, NAME, &sem), DLOCK_ENOTSUP);
  dlock_client_free(c);
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_RC(dlock_options_set_redlock_timing(o, 0, 10, 2), DLOCK_EINVAL);
  CHECK_RC(dlock_options_set_redlock_timing(o, 50, -1, 2), DLOCK_EINVAL);
  CHECK_RC(dlock_options_set_redlock_timing(o, 50, 10, -2), DLOCK_EINVAL);
  dlock_options_free(o);
  th_server_stop(s);
}

/* Nodes restarted without persistence (the harness's servers keep no
 * data) while a lock is held: the holder keeps a majority while at most
 * two of five come back empty, and another client cannot get one; once a
 * third comes back empty, the other client gets a majority while the
 * first still believes it holds the lock. This is the hazard that
 * docs/REDLOCK.md's delayed restart (or appendfsync always) prevents. */
static void t_restart_without_persistence(void) {
  start_all();
  /* The case starts from a lock on all five nodes: a node timeout as long
   * as the command timeout, so that a node slow to answer on a loaded
   * machine is still asked (with the default, a first dial slower than the
   * node timeout left one node out, and the premise failed). */
  rl_cfg_t cfg = {.node_timeout_ms = 2000};
  dlock_client_t *a = rl_client(&cfg), *b = rl_client(&cfg);
  dlock_lock_t *la = it_lock(a, NAME), *lb = it_lock(b, NAME);
  CHECK_OK(dlock_lock_acquire(la, 0, 60000));
  /* the acquire returned with a majority; the others answer at once */
  bool all5;
  TH_WAIT_FOR(all5, held_on(NAME, NULL) == N, 5000);
  CHECK(all5);
  CHECK(th_server_restart(srv[0]) == 0);
  CHECK(th_server_restart(srv[1]) == 0);
  CHECK(!it_exists(srv[0], NAME) && !it_exists(srv[1], NAME));
  CHECK_RC(dlock_lock_acquire(lb, 0, 60000), DLOCK_EBUSY);
  /* b's failed attempt released what it got on the empty nodes */
  CHECK(!it_exists(srv[0], NAME) && !it_exists(srv[1], NAME));
  CHECK(th_server_restart(srv[2]) == 0);
  CHECK_OK(dlock_lock_acquire(lb, 0, 60000));
  bool a_thinks = false;
  CHECK_OK(dlock_lock_is_held_by_thread(la, &a_thinks));
  printf("three of five restarted empty: the second client holds the lock; "
         "the first, asked, says held=%d (the majority answers for the "
         "second)\n",
         (int)a_thinks);
  CHECK(!a_thinks); /* a query asks the majority, which is b's now */
  CHECK_OK(dlock_lock_release(lb));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  stop_all();
}

/* ------------------------------------------------------------ multilock */

#define MCOUNTER "multi-counter"

/* child: ORDER(0|1) ITERS PORT0 PORT1; three locks on two single-node
 * clients, x and z on node 1, y on node 2, taken in one order or the
 * reverse, with racy increments under them */
static int mchild_main(int reverse, int iters, int port0, int port1) {
  char u0[64], u1[64];
  snprintf(u0, sizeof u0, "redis://127.0.0.1:%d", port0);
  snprintf(u1, sizeof u1, "redis://127.0.0.1:%d", port1);
  dlock_client_t *a = NULL, *b = NULL;
  CHECK_OK(dlock_client_new(&a, u0, NULL));
  CHECK_OK(dlock_client_new(&b, u1, NULL));
  dlock_lock_t *x = it_lock(a, "mx"), *y = it_lock(b, "my"),
               *z = it_lock(a, "mz");
  dlock_lock_t *fwd[3] = {x, y, z}, *rev[3] = {z, y, x};
  dlock_multilock_t *m = NULL;
  CHECK_OK(dlock_multilock_new(&m, reverse ? rev : fwd, 3));
  redisContext *rc = counter_conn(port0);
  for (int i = 0; i < iters; i++) {
    CHECK_OK(dlock_multilock_acquire(m, ACQ_WAIT_MS, DLOCK_LEASE_WATCHDOG));
    redisReply *r = redisCommand(rc, "GET " MCOUNTER);
    CHECK(r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_NIL));
    long long v = r->type == REDIS_REPLY_STRING ? strtoll(r->str, NULL, 10) : 0;
    freeReplyObject(r);
    sched_yield();
    r = redisCommand(rc, "SET " MCOUNTER " %lld", v + 1);
    CHECK(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
    CHECK_OK(dlock_multilock_release(m));
  }
  redisFree(rc);
  dlock_multilock_free(m);
  dlock_lock_free(x);
  dlock_lock_free(y);
  dlock_lock_free(z);
  dlock_client_free(a);
  dlock_client_free(b);
  return 0;
}

#define MITERS 150

static void t_multilock_opposite_orders(void) {
  th_server_t *s0 = th_server_start(NULL), *s1 = th_server_start(NULL);
  CHECK(s0 && s1);
  char iters[16], p0[16], p1[16];
  snprintf(iters, sizeof iters, "%d", MITERS);
  snprintf(p0, sizeof p0, "%d", s0->port);
  snprintf(p1, sizeof p1, "%d", s1->port);
  pid_t pids[2];
  fflush(stdout);
  fflush(stderr);
  for (int p = 0; p < 2; p++) {
    pids[p] = fork();
    CHECK(pids[p] >= 0);
    if (pids[p] == 0) {
      char *argv[] = {"test_redlock", "--mchild", p ? "1" : "0", iters, p0,
                      p1,             NULL};
      execv("/proc/self/exe", argv);
      _exit(127);
    }
  }
  int failed = 0;
  for (int p = 0; p < 2; p++)
    if (!it_child_ok(it_spawn_wait(pids[p], 90000)))
      failed++;
  CHECK_INT(failed, ==, 0);
  char *v = th_redis_str(s0, "GET " MCOUNTER);
  CHECK(v);
  CHECK_INT(strtoll(v, NULL, 10), ==, 2 * MITERS);
  free(v);
  CHECK(!it_exists(s0, "mx") && !it_exists(s0, "mz") && !it_exists(s1, "my"));
  th_server_stop(s0);
  th_server_stop(s1);
}

/* All or nothing: with one member held elsewhere, nothing is held after a
 * failed attempt; once it is free, every member is taken and released. */
static void t_multilock_all_or_nothing(void) {
  start_all();
  it_lost_t lost;
  it_lost_init(&lost);
  rl_cfg_t cfg = {.lost = &lost, .watchdog_ms = 900};
  dlock_client_t *rl = rl_client(&cfg); /* a Redlock member */
  dlock_client_t *one = it_client(srv[0]);
  dlock_client_t *other = it_client(srv[0]);
  dlock_lock_t *a = it_lock(rl, "ma"), *b = it_lock(one, "mb"),
               *c = it_lock(one, "mc");
  dlock_lock_t *b2 = it_lock(other, "mb");
  dlock_lock_t *set[3] = {a, b, c};
  dlock_multilock_t *m = NULL;
  CHECK_RC(dlock_multilock_new(&m, (dlock_lock_t *[]){b, c, b}, 3),
           DLOCK_EINVAL);
  CHECK(m == NULL);
  CHECK_OK(dlock_multilock_new(&m, set, 3));
  CHECK_INT(dlock_multilock_size(m), ==, 3);
  CHECK_OK(dlock_lock_acquire(b2, 0, 60000));
  CHECK_RC(dlock_multilock_acquire(m, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  CHECK(strstr(dlock_last_error(), "'mb'"));
  CHECK_INT(held_on("ma", NULL), ==, 0);
  CHECK(!it_exists(srv[0], "mc"));
  CHECK_RC(dlock_multilock_acquire(m, 300, DLOCK_LEASE_WATCHDOG),
           DLOCK_ETIMEDOUT);
  CHECK_INT(held_on("ma", NULL), ==, 0);
  CHECK(!it_exists(srv[0], "mc"));
  CHECK_RC(dlock_multilock_release(m), DLOCK_ENOTOWNER);
  CHECK_OK(dlock_lock_release(b2));
  CHECK_OK(dlock_multilock_acquire(m, 5000, DLOCK_LEASE_WATCHDOG));
  CHECK_INT(held_on("ma", NULL), ==, N);
  CHECK(it_exists(srv[0], "mb") && it_exists(srv[0], "mc"));
  CHECK_OK(dlock_multilock_release(m));
  CHECK_INT(held_on("ma", NULL), ==, 0);
  CHECK(!it_exists(srv[0], "mb") && !it_exists(srv[0], "mc"));
  /* a member lost: the release releases the others and says so */
  CHECK_OK(dlock_multilock_acquire(m, 5000, DLOCK_LEASE_WATCHDOG));
  for (int i = 0; i < N; i++)
    th_redis_int(srv[i], "DEL ma");
  CHECK(it_lost_wait(&lost, 1, 10000));
  CHECK_RC(dlock_multilock_release(m), DLOCK_ELOST);
  CHECK(strstr(dlock_last_error(), "ma"));
  CHECK(!it_exists(srv[0], "mb") && !it_exists(srv[0], "mc"));
  dlock_multilock_free(m);
  dlock_lock_free(a);
  dlock_lock_free(b);
  dlock_lock_free(c);
  dlock_lock_free(b2);
  dlock_client_free(rl);
  dlock_client_free(one);
  dlock_client_free(other);
  stop_all();
}

/* A member whose release fails (its server frozen) stays held and
 * renewed; the multilock's next release retries it and frees it. */
static void t_multilock_release_retried(void) {
  th_server_t *s1 = th_server_start(NULL), *s2 = th_server_start(NULL);
  CHECK(s1 && s2);
  it_client_cfg_t cfg = {.command_ms = 500};
  dlock_client_t *c1 = it_client_cfg(s1, &cfg), *c2 = it_client_cfg(s2, &cfg);
  dlock_lock_t *a = it_lock(c1, "ra"), *b = it_lock(c2, "rb");
  dlock_multilock_t *m = NULL;
  CHECK_OK(dlock_multilock_new(&m, (dlock_lock_t *[]){a, b}, 2));
  CHECK_OK(dlock_multilock_acquire(m, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_INT(th_server_pause(s2), ==, 0);
  int rc = dlock_multilock_release(m);
  CHECK_RC_IN(rc, DLOCK_EIOTIMEOUT, DLOCK_EUNAVAILABLE);
  printf("release with a member's server frozen: %s (%s)\n",
         dlock_err_name(rc), dlock_last_error());
  CHECK_INT(th_server_resume(s2), ==, 0);
  CHECK(!it_exists(s1, "ra")); /* the other member was released */
  CHECK(it_exists(s2, "rb"));  /* still held, not forgotten */
  /* acquiring a partly held multilock is refused; the release retries */
  CHECK_RC(dlock_multilock_acquire(m, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EINVAL);
  CHECK_OK(dlock_multilock_release(m));
  CHECK(!it_exists(s2, "rb"));
  CHECK_RC(dlock_multilock_release(m), DLOCK_ENOTOWNER);
  dlock_multilock_free(m);
  dlock_lock_free(a);
  dlock_lock_free(b);
  dlock_client_free(c1);
  dlock_client_free(c2);
  th_server_stop(s1);
  th_server_stop(s2);
}

static const check_case_t cases[] = {
    {"processes", t_processes},
    {"two_down_still_granted", t_two_down_still_granted},
    {"three_down_fails_cleanly", t_three_down_fails_cleanly},
    {"frozen_node", t_frozen_node},
    {"unreachable_nodes", t_unreachable_nodes},
    {"validity_refused", t_validity_refused},
    {"renewal_minority_gone", t_renewal_minority_gone},
    {"renewal_majority_gone", t_renewal_majority_gone},
    {"wait_woken_by_release", t_wait_woken_by_release},
    {"fenced_tokens", t_fenced_tokens},
    {"bad_input", t_bad_input},
    {"restart_without_persistence", t_restart_without_persistence},
    {"multilock_opposite_orders", t_multilock_opposite_orders},
    {"multilock_all_or_nothing", t_multilock_all_or_nothing},
    {"multilock_release_retried", t_multilock_release_retried},
};

int main(int argc, char **argv) {
  if (argc == 3 + N && strcmp(argv[1], "--child") == 0) {
    int ports[N];
    for (int i = 0; i < N; i++)
      ports[i] = atoi(argv[3 + i]);
    return child_main(atoi(argv[2]), ports);
  }
  if (argc == 6 && strcmp(argv[1], "--mchild") == 0)
    return mchild_main(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]),
                       atoi(argv[5]));
  return check_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
