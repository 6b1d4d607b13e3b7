/*
 * test_cluster.c - Redis Cluster: names routed to the master of their slot.
 *
 * Design note: each case starts a 3-master cluster (tests/harness/cluster.c:
 * cluster-enabled redis-servers joined by redis-cli --cluster create, free
 * 127.0.0.1 ports, stopped by PID) and clients on redis-cluster://seeds.
 * What a user would observe is asserted: for names whose slots fall on each
 * of the three masters, the lock lands on that master and nowhere else, a
 * waiter on another client is woken by the release (sharded pub/sub on the
 * owning shard) and acquires, a fair lock, a semaphore and a latch work
 * there too; the dlock command takes the URL; bad URLs are refused with
 * one clear error. The backend-neutral
 * suite also runs on a cluster (test_common.cluster.*). Main thread plus
 * one waiter thread; every wait is bounded.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "cluster.h"
#include "itest.h"

static dlock_client_t *cluster_client(const char *url) {
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 3000));
  CHECK_OK(dlock_options_set_command_timeout(o, 3000));
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new(&c, url, o));
  dlock_options_free(o);
  return c;
}

/* The node (0..2) that has key `name`, -1 when none, -2 when several. */
static int holder_node(th_cluster_t *t, const char *name) {
  int at = -1;
  for (int i = 0; i < TH_CLUSTER_MASTERS; i++) {
    redisContext *c = th_redis_connect(t->node[i]);
    CHECK(c);
    redisReply *r = redisCommand(c, "EXISTS %s", name);
    /* a node that does not own the slot answers MOVED */
    bool here = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;
    if (r)
      freeReplyObject(r);
    redisFree(c);
    if (here)
      at = at == -1 ? i : -2;
  }
  return at;
}

typedef struct waiter {
  dlock_client_t *c;
  const char *name;
  int rc;
  int64_t at;
  pthread_t th;
} waiter_t;

static void *waiter_main(void *arg) {
  waiter_t *w = arg;
  dlock_lock_t *l = it_lock(w->c, w->name);
  w->rc = dlock_lock_acquire(l, 20000, 10000);
  w->at = th_now_ms();
  if (w->rc == DLOCK_OK)
    dlock_lock_release(l);
  dlock_lock_free(l);
  return NULL;
}

static void t_every_master(void) {
  th_cluster_t *t = th_cluster_start();
  CHECK(t);
  printf("url: %s\n", t->url);
  dlock_client_t *a = cluster_client(t->url), *b = cluster_client(t->url);
  bool seen[TH_CLUSTER_MASTERS] = {false};
  int covered = 0;
  for (int k = 0; k < 64 && covered < TH_CLUSTER_MASTERS; k++) {
    char name[32];
    snprintf(name, sizeof name, "cl-lock-%d", k);
    dlock_lock_t *l = it_lock(a, name);
    CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
    int node = holder_node(t, name);
    CHECKF(node >= 0, "'%s' is on %d nodes' view (-1 none, -2 several)", name,
           node);
    if (!seen[node]) {
      seen[node] = true;
      covered++;
      /* a waiter on another client, woken by the release */
      waiter_t w = {.c = b, .name = name};
      CHECK(pthread_create(&w.th, NULL, waiter_main, &w) == 0);
      th_sleep_ms(200); /* it is waiting (scenario pace) */
      int64_t t0 = th_now_ms();
      CHECK_OK(dlock_lock_release(l));
      pthread_join(w.th, NULL);
      CHECK_RC(w.rc, DLOCK_OK);
      printf("'%s' on master %d: waiter granted %lld ms after the release\n",
             name, node, (long long)(w.at - t0));
      CHECK_INT(w.at - t0, <, 5000);
    } else {
      CHECK_OK(dlock_lock_release(l));
    }
    dlock_lock_free(l);
  }
  CHECK_INT(covered, ==, TH_CLUSTER_MASTERS);

  /* the other kinds, on whatever master their names fall */
  dlock_lock_t *f = NULL;
  CHECK_OK(dlock_lock_new_kind(a, "cl-fair", DLOCK_FAIR, &f));
  CHECK_OK(dlock_lock_acquire(f, 1000, 10000));
  CHECK_OK(dlock_lock_release(f));
  dlock_lock_free(f);
  dlock_semaphore_t *s = NULL;
  CHECK_OK(dlock_semaphore_new(a, "cl-sem", &s));
  bool set = false;
  CHECK_OK(dlock_semaphore_try_set_permits(s, 2, &set));
  CHECK_OK(dlock_semaphore_acquire(s, 2, 1000));
  CHECK_OK(dlock_semaphore_release(s, 2));
  dlock_semaphore_free(s);
  dlock_latch_t *latch = NULL;
  CHECK_OK(dlock_latch_new(a, "cl-latch", &latch));
  CHECK_OK(dlock_latch_try_set_count(latch, 1, &set));
  CHECK_OK(dlock_latch_count_down(latch));
  CHECK_OK(dlock_latch_await(latch, 1000));
  dlock_latch_free(latch);
  dlock_client_free(b);
  dlock_client_free(a);

#ifdef DLOCK_CLI_PATH
  /* the command, with the URL as it is */
  char cmd[600], out[128] = "";
  snprintf(cmd, sizeof cmd,
           DLOCK_CLI_PATH " -u '%s' cl-cli sh -c 'echo \"$DLOCK_TOKEN\"'",
           t->url);
  FILE *p = popen(cmd, "r");
  CHECK(p);
  CHECK(fgets(out, sizeof out, p) != NULL);
  CHECK_INT(pclose(p), ==, 0);
  printf("dlock -u %s: token %s", t->url, out);
  CHECK(atoll(out) > 0);
#endif

  /* bad URLs: one clear error each */
  dlock_client_t *x = NULL;
  CHECK_RC(dlock_client_new(&x, "redis-cluster://127.0.0.1:1/0", NULL),
           DLOCK_EURL);
  CHECK(strstr(dlock_last_error(), "no path"));
  CHECK_RC(dlock_client_new(&x, "redis-cluster://", NULL), DLOCK_EURL);
  CHECK(x == NULL);
  th_cluster_stop(t);
}

/* A cluster of one master that never met another node: CLUSTER SLOTS
 * names it with an empty address, and the client uses the seed's. */
static void t_single_master(void) {
  const char *conf[] = {"cluster-enabled yes",
                        "cluster-config-file ${dir}/nodes.conf",
                        "cluster-port ${port2}", NULL};
  th_server_t *s = th_server_start(conf);
  CHECK(s);
  redisReply *r = th_redis_cmd(s, "CLUSTER ADDSLOTSRANGE 0 16383");
  CHECK(r && r->type == REDIS_REPLY_STATUS);
  freeReplyObject(r);
  int64_t until = th_now_ms() + 10000;
  for (;;) {
    r = th_redis_cmd(s, "CLUSTER INFO");
    bool ok = r && r->type == REDIS_REPLY_STRING &&
              strstr(r->str, "cluster_state:ok");
    if (r)
      freeReplyObject(r);
    if (ok || th_now_ms() > until)
      break;
    th_sleep_ms(50);
  }
  char url[64];
  snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%d", s->port);
  dlock_client_t *c = cluster_client(url);
  dlock_lock_t *l = it_lock(c, "cl-single");
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  CHECK(it_exists(s, "cl-single"));
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

/* Two names on one master in different slots, held past several leases:
 * the watchdog renews both (a script's keys must share one slot, so a
 * node's renewals are split by slot). */
static void t_renew_many_slots(void) {
  th_cluster_t *t = th_cluster_start();
  CHECK(t);
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_watchdog_timeout(o, 1000));
  dlock_client_t *a = NULL;
  CHECK_OK(dlock_client_new(&a, t->url, o));
  dlock_options_free(o);
  /* four names on master 0 (distinct names: distinct slots) */
  dlock_lock_t *held[4];
  char names[4][32];
  int got = 0;
  for (int k = 0; k < 200 && got < 4; k++) {
    snprintf(names[got], sizeof names[got], "cl-renew-%d", k);
    dlock_lock_t *l = it_lock(a, names[got]);
    CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
    if (holder_node(t, names[got]) == 0) {
      held[got++] = l;
    } else {
      CHECK_OK(dlock_lock_release(l));
      dlock_lock_free(l);
    }
  }
  CHECK_INT(got, ==, 4);
  th_sleep_ms(3500); /* three and a half leases (scenario pace) */
  for (int i = 0; i < 4; i++) {
    CHECKF(it_exists(t->node[0], names[i]), "'%s' expired: not renewed",
           names[i]);
    CHECK_OK(dlock_lock_release(held[i]));
    dlock_lock_free(held[i]);
  }
  dlock_client_free(a);
  th_cluster_stop(t);
}

static const check_case_t cases[] = {
    {"every_master", t_every_master},
    {"renew_many_slots", t_renew_many_slots},
    {"single_master", t_single_master},
};

CHECK_MAIN(cases)
