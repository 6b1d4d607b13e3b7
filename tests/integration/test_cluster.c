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

#include "certs.h"
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

/* A client whose watchdog lease is `ms` (renewed every third of it). */
static dlock_client_t *watchdog_client(const char *url, int64_t ms) {
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_watchdog_timeout(o, ms));
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

/* Subscribers of a sharded channel on one node (PUBSUB SHARDNUMSUB). */
static int64_t shard_subscribers(th_server_t *s, const char *chan) {
  return it_subscribers(s, "SHARDNUMSUB", chan);
}

/* A thread that acquires `name` (waiting up to 20 s, or wait_ms when
 * keep), records when, and releases it (keep: holds it, in w->l). */
typedef struct waiter {
  dlock_client_t *c;
  const char *name;
  int64_t wait_ms;
  bool keep;
  int rc;
  int64_t at;
  atomic_int done;
  dlock_lock_t *l;
  pthread_t th;
} waiter_t;

static void *waiter_main(void *arg) {
  waiter_t *w = arg;
  dlock_lock_t *l = it_lock(w->c, w->name);
  w->rc = dlock_lock_acquire(l, w->keep ? w->wait_ms : 20000, 10000);
  w->at = th_now_ms();
  atomic_store_explicit(&w->done, 1, memory_order_release);
  if (w->keep) {
    w->l = l;
    return NULL;
  }
  if (w->rc == DLOCK_OK)
    dlock_lock_release(l);
  dlock_lock_free(l);
  return NULL;
}

/* A semaphore of two permits taken and given back, a latch counted down
 * and awaited: both on whatever master their names fall. */
static void sem_and_latch(dlock_client_t *a, const char *sem,
                          const char *latch) {
  dlock_semaphore_t *s = NULL;
  CHECK_OK(dlock_semaphore_new(a, sem, &s));
  bool set = false;
  CHECK_OK(dlock_semaphore_try_set_permits(s, 2, &set));
  CHECK_OK(dlock_semaphore_acquire(s, 2, 1000));
  CHECK_OK(dlock_semaphore_release(s, 2));
  dlock_semaphore_free(s);
  dlock_latch_t *l = NULL;
  CHECK_OK(dlock_latch_new(a, latch, &l));
  CHECK_OK(dlock_latch_try_set_count(l, 1, &set));
  CHECK_OK(dlock_latch_count_down(l));
  CHECK_OK(dlock_latch_await(l, 1000));
  dlock_latch_free(l);
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
  sem_and_latch(a, "cl-sem", "cl-latch");
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
  /* every seed is checked before the first is dialled */
  char bad[300];
  snprintf(bad, sizeof bad, "%s,", t->url);
  CHECK_RC(dlock_client_new(&x, bad, NULL), DLOCK_EURL);
  CHECK(strstr(dlock_last_error(),
               "redis-cluster://: an empty host in the seed list"));
  snprintf(bad, sizeof bad, "%s,127.0.0.1:70000", t->url);
  CHECK_RC(dlock_client_new(&x, bad, NULL), DLOCK_EURL);
  CHECK(strstr(dlock_last_error(), "port must be a number from 1 to 65535"));
  CHECK_RC(dlock_client_new(&x, "Redis-Cluster://127.0.0.1:1#f", NULL),
           DLOCK_EURL);
  CHECK(strstr(dlock_last_error(), "no path"));
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

  /* holder info on a cluster node: its key is in the lock's slot (a plain
   * name and one with its own hash tag), written by the acquire, read by
   * the state script, renewed, deleted by the release */
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_holder_info(o, "who"));
  CHECK_OK(dlock_options_set_watchdog_timeout(o, 600));
  dlock_client_t *ci = NULL;
  CHECK_OK(dlock_client_new(&ci, url, o));
  dlock_options_free(o);
  const char *names[] = {"cl-info", "{cl}info"};
  for (int i = 0; i < 2; i++) {
    dlock_lock_t *li = it_lock(ci, names[i]);
    CHECK_OK(dlock_lock_acquire(li, 0, DLOCK_LEASE_WATCHDOG));
    dlock_lock_state_t *st = NULL;
    CHECK_OK(dlock_lock_state(li, &st));
    CHECK_INT(st->nholders, ==, 1);
    CHECK(st->holder_infos != NULL);
    CHECK_STR(st->holder_infos[0], "who");
    dlock_lock_state_free(st);
    /* past two 600 ms leases: renewed with the lock */
    int64_t last = th_redis_int(s, "PTTL %s", names[i]);
    int renewals = 0;
    for (int k = 0; k < 500 && renewals < 3; k++) {
      th_sleep_ms(10);
      int64_t now = th_redis_int(s, "PTTL %s", names[i]);
      if (now > last)
        renewals++;
      last = now;
    }
    CHECK_INT(renewals, ==, 3);
    st = NULL;
    CHECK_OK(dlock_lock_state(li, &st));
    CHECK(st->holder_infos != NULL);
    CHECK_STR(st->holder_infos[0], "who");
    dlock_lock_state_free(st);
    CHECK_OK(dlock_lock_release(li));
    CHECK_INT(th_redis_int(s, "EVAL %s 0",
                           "return #redis.call('keys', 'dlock_holder*')"),
              ==, 0);
    dlock_lock_free(li);
  }
  dlock_client_free(ci);
  dlock_client_free(c);
  th_server_stop(s);
}

/* Two names on one master in different slots, held past several leases:
 * the watchdog renews both (a script's keys must share one slot, so a
 * node's renewals are split by slot). */
static void t_renew_many_slots(void) {
  th_cluster_t *t = th_cluster_start();
  CHECK(t);
  dlock_client_t *a = watchdog_client(t->url, 1000);
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

/* Two names of one slot that master `node` serves, "{<prefix>N}held" and
 * "{<prefix>N}fresh" (48 bytes each). */
static void two_names_on(th_cluster_t *t, int node, const char *prefix,
                         char *held, char *fresh) {
  char tag[24] = "";
  for (int k = 0; k < 500 && !tag[0]; k++) {
    char probe[48];
    snprintf(probe, sizeof probe, "{%s%d}", prefix, k);
    redisReply *r = th_redis_cmd(t->node[node], "EXISTS %s", probe);
    if (r && r->type == REDIS_REPLY_INTEGER) /* no MOVED: it is here */
      snprintf(tag, sizeof tag, "%s%d", prefix, k);
    if (r)
      freeReplyObject(r);
  }
  CHECK(tag[0]);
  snprintf(held, 48, "{%s}held", tag);
  snprintf(fresh, 48, "{%s}fresh", tag);
}

/* The node id of a cluster node (CLUSTER MYID). Caller frees. */
static char *node_id(th_server_t *s) {
  char *id = th_redis_str(s, "CLUSTER MYID");
  CHECK(id && strlen(id) == 40);
  return id;
}

static void setslot_node(th_cluster_t *t, unsigned slot, const char *id) {
  for (int i = 0; i < TH_CLUSTER_MASTERS; i++) {
    redisReply *r = th_redis_cmd(t->node[i], "CLUSTER SETSLOT %u NODE %s",
                                 slot, id);
    CHECK(r && r->type == REDIS_REPLY_STATUS);
    freeReplyObject(r);
  }
}

/* Moves every key of `slot` from master `from` to master `to` (MIGRATE). */
static void migrate_keys(th_cluster_t *t, unsigned slot, int from, int to) {
  redisReply *keys = th_redis_cmd(t->node[from],
                                  "CLUSTER GETKEYSINSLOT %u 1000", slot);
  CHECK(keys && keys->type == REDIS_REPLY_ARRAY);
  for (size_t i = 0; i < keys->elements; i++) {
    redisReply *m = th_redis_cmd(t->node[from], "MIGRATE 127.0.0.1 %d %s 0 "
                                                "5000",
                                 t->node[to]->port, keys->element[i]->str);
    CHECKF(m && m->type == REDIS_REPLY_STATUS, "MIGRATE %s: %s",
           keys->element[i]->str, m && m->str ? m->str : "(no reply)");
    freeReplyObject(m);
  }
  printf("migrated %zu keys of slot %u\n", keys->elements, slot);
  freeReplyObject(keys);
}

/* A slot moved from master 0 to master 1 as redis-cli --cluster reshard
 * moves it (IMPORTING, MIGRATING, MIGRATE, SETSLOT NODE) while one client
 * holds a lock of it on the watchdog and another waits for that lock; a
 * third acquires a new lock of the slot mid-migration (ASK). The holder's
 * renewals follow the slot (the lock outlives its lease on the new
 * master), the waiter's subscription moves there (SHARDNUMSUB), and the
 * release wakes it. */
static void t_slot_migrated(void) {
  th_cluster_t *t = th_cluster_start();
  CHECK(t);
  char held[48], fresh[48];
  two_names_on(t, 0, "mig", held, fresh);
  redisReply *sr = th_redis_cmd(t->node[0], "CLUSTER KEYSLOT %s", held);
  CHECK(sr && sr->type == REDIS_REPLY_INTEGER);
  unsigned slot = (unsigned)sr->integer;
  freeReplyObject(sr);

  dlock_client_t *a = watchdog_client(t->url, 3000);
  dlock_client_t *b = cluster_client(t->url), *c = cluster_client(t->url);
  dlock_lock_t *l = it_lock(a, held);
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  waiter_t w = {.c = b, .name = held};
  CHECK(pthread_create(&w.th, NULL, waiter_main, &w) == 0);
  char chan[80];
  /* the name has a hash tag: Redisson's channel is prefix:name */
  snprintf(chan, sizeof chan, "redisson_lock__channel:%s", held);
  bool ok = false;
  TH_WAIT_FOR(ok, shard_subscribers(t->node[0], chan) == 1, 10000);
  CHECKF(ok, "the waiter is not subscribed on master 0");

  char *src = node_id(t->node[0]), *dst = node_id(t->node[1]);
  redisReply *r = th_redis_cmd(t->node[1], "CLUSTER SETSLOT %u IMPORTING %s",
                               slot, src);
  CHECK(r && r->type == REDIS_REPLY_STATUS);
  freeReplyObject(r);
  r = th_redis_cmd(t->node[0], "CLUSTER SETSLOT %u MIGRATING %s", slot, dst);
  CHECK(r && r->type == REDIS_REPLY_STATUS);
  freeReplyObject(r);
  /* mid-migration: a new lock of the slot is a call of several keys that
   * neither side runs until the migration ends (TRYAGAIN); it is retried
   * and lands on master 1 */
  waiter_t f = {.c = c, .name = fresh, .wait_ms = 0, .keep = true};
  CHECK(pthread_create(&f.th, NULL, waiter_main, &f) == 0);
  th_sleep_ms(300); /* scenario pace: the migration takes a while */
  migrate_keys(t, slot, 0, 1);
  /* the held lock's key is on master 1 now, the slot still master 0's: a
   * query is sent on (ASK) */
  dlock_lock_t *lq = it_lock(c, held);
  bool locked = false;
  CHECK_OK(dlock_lock_is_locked(lq, &locked));
  CHECK(locked);
  dlock_lock_free(lq);
  setslot_node(t, slot, dst);
  pthread_join(f.th, NULL);
  CHECK_RC(f.rc, DLOCK_OK);
  CHECKF(holder_node(t, fresh) == 1, "'%s' is not on master 1", fresh);
  free(src);
  free(dst);
  int64_t moved_at = th_now_ms();

  /* more than a lease later the holder's lock is still there, renewed on
   * master 1; the waiter followed it */
  th_sleep_ms(4000); /* scenario pace: past the 3 s lease */
  CHECKF(it_exists(t->node[1], held), "the lock was not renewed on master 1");
  TH_WAIT_FOR(ok, shard_subscribers(t->node[1], chan) == 1, 10000);
  CHECKF(ok, "the waiter did not move to master 1");
  CHECK_INT(atomic_load_explicit(&w.done, memory_order_acquire), ==, 0);
  int64_t t0 = th_now_ms();
  CHECK_OK(dlock_lock_release(l));
  pthread_join(w.th, NULL);
  CHECK_RC(w.rc, DLOCK_OK);
  printf("slot %u moved %lld ms before the release; waiter granted %lld ms "
         "after it\n",
         slot, (long long)(t0 - moved_at), (long long)(w.at - t0));
  CHECK_INT(w.at - t0, <, 10000);
  bool was = false;
  CHECK_OK(dlock_lock_force_release(f.l, &was));
  CHECK(was);
  dlock_lock_free(f.l);
  dlock_lock_free(l);
  dlock_client_free(c);
  dlock_client_free(b);
  dlock_client_free(a);
  th_cluster_stop(t);
}

/* A master killed (SIGKILL) while a lock of its slots is held (acquired
 * with WAIT, so its replica has it) and waited for: its replica takes
 * over; the first new acquisition of the slot is timed from the kill; the
 * held lock is still held on the new master and is not reported lost; the
 * release there wakes the waiter, which acquires. */
static void t_master_failover(void) {
  static atomic_int lost_count;
  th_cluster_t *t = th_cluster_start_replicated();
  CHECK(t);
  char held[48], fresh[48];
  two_names_on(t, 0, "fo", held, fresh);
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 3000));
  CHECK_OK(dlock_options_set_command_timeout(o, 3000));
  CHECK_OK(dlock_options_set_lost_callback(o, it_count_lost, &lost_count));
  dlock_client_t *a = NULL;
  CHECK_OK(dlock_client_new(&a, t->url, o));
  dlock_options_free(o);
  dlock_client_t *b = cluster_client(t->url), *c = cluster_client(t->url);
  dlock_lock_t *l = it_lock(a, held);
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  /* acquired with WAIT: the replica has it already (READONLY: a cluster
   * replica answers reads of its master's slots; the harness's connection
   * is kept) */
  redisReply *ro = th_redis_cmd(t->replica[0], "READONLY");
  CHECK(ro && ro->type == REDIS_REPLY_STATUS);
  freeReplyObject(ro);
  CHECKF(th_redis_int(t->replica[0], "EXISTS %s", held) == 1,
         "the replica lacks the lock");
  /* one call: the wait rides out the failover (dlock_options_set_outage_grace) */
  waiter_t w = {.c = b, .name = held};
  CHECK(pthread_create(&w.th, NULL, waiter_main, &w) == 0);
  char chan[80];
  snprintf(chan, sizeof chan, "redisson_lock__channel:%s", held);
  bool ok = false;
  TH_WAIT_FOR(ok, shard_subscribers(t->node[0], chan) == 1, 10000);
  CHECKF(ok, "the waiter is not subscribed on master 0");

  CHECK(th_server_kill9(t->node[0]) == 0);
  int64_t killed = th_now_ms();
  /* the first acquisition of the slot after the kill (each attempt rides
   * through the failover for up to its connect timeout) */
  dlock_lock_t *lf = it_lock(c, fresh);
  int rc = -1, tries = 0;
  int64_t until = killed + 30000;
  while (rc != DLOCK_OK && th_now_ms() < until && tries < 100) {
    rc = dlock_lock_acquire(lf, 0, 30000);
    tries++;
    if (rc != DLOCK_OK)
      printf("acquire after the kill: %s \"%s\"\n", dlock_err_name(rc),
             dlock_last_error());
    if (rc != DLOCK_OK && rc != DLOCK_EUNAVAILABLE)
      break;
  }
  CHECK_RC(rc, DLOCK_OK);
  printf("FIGURE cluster.failover: %lld ms from the master's kill to the "
         "first acquisition of its slot (%d attempts)\n",
         (long long)(th_now_ms() - killed), tries);
  char *role = th_redis_str(t->replica[0], "INFO %s", "replication");
  CHECKF(role && strstr(role, "role:master"), "the replica was not promoted");
  free(role);
  CHECKF(it_exists(t->replica[0], held),
         "the held lock did not survive the failover");
  CHECK_OK(dlock_lock_release(lf));
  dlock_lock_free(lf);
  /* the client's ping asks the masters that serve the slots now */
  CHECK_OK(dlock_client_ping(c));

  /* the holder releases on the new master; the waiter gets it */
  CHECK_INT(atomic_load_explicit(&w.done, memory_order_acquire), ==, 0);
  int64_t t0 = th_now_ms();
  CHECK_OK(dlock_lock_release(l));
  pthread_join(w.th, NULL);
  CHECK_RC(w.rc, DLOCK_OK);
  printf("waiter granted %lld ms after the release\n",
         (long long)(w.at - t0));
  CHECK_INT(w.at - t0, <, 10000);
  CHECK_INT(atomic_load(&lost_count), ==, 0);
  dlock_lock_free(l);
  dlock_client_free(c);
  dlock_client_free(b);
  dlock_client_free(a);
  th_cluster_stop(t);
}

/* A user with docs/ACL.md's rule plus its cluster line, on every master:
 * each kind works (a waiter on another client woken by the release, the
 * semaphore and the latch), and without +ssubscribe a wait fails with one
 * line naming it. */
static void t_acl(void) {
  const char *conf[] = {"user locker on >acl-pw " IT_ACL_COMMANDS
                        " " IT_ACL_CLUSTER " " IT_ACL_PATTERNS,
                        "user nossub on >acl-pw " IT_ACL_COMMANDS
                        " " IT_ACL_CLUSTER " -ssubscribe " IT_ACL_PATTERNS,
                        NULL};
  th_cluster_t *t = th_cluster_start_conf(conf);
  CHECK(t);
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_credentials(o, "locker", "acl-pw"));
  CHECK_OK(dlock_options_set_command_timeout(o, 3000));
  dlock_client_t *a = NULL, *b = NULL;
  CHECK_OK(dlock_client_new(&a, t->url, o));
  CHECK_OK(dlock_client_new(&b, t->url, o));
  const dlock_lock_kind_t kinds[] = {DLOCK_REENTRANT, DLOCK_FENCED,
                                     DLOCK_FAIR, DLOCK_WRITE};
  const char *names[] = {"app:reentrant", "app:fenced", "app:fair",
                         "app:rw"};
  const char *chans[] = {"redisson_lock__channel:{app:reentrant}",
                         "redisson_lock__channel:{app:fenced}", NULL,
                         "redisson_rwlock:{app:rw}"};
  for (int i = 0; i < 4; i++) {
    dlock_lock_t *la = NULL, *lb = NULL;
    CHECK_OK(dlock_lock_new_kind(a, names[i], kinds[i], &la));
    CHECK_OK(dlock_lock_new_kind(b, names[i], kinds[i], &lb));
    CHECK_OK(dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG));
    int node = holder_node(t, names[i]);
    CHECK(node >= 0);
    it_async_t w;
    it_async_start(&w, lb, 20000, DLOCK_LEASE_WATCHDOG, false);
    bool ok = true;
    if (chans[i]) /* a fair waiter's channel is its own */
      TH_WAIT_FOR(ok, shard_subscribers(t->node[node], chans[i]) >= 1, 10000);
    else
      th_sleep_ms(200); /* scenario pace: it is waiting */
    CHECKF(ok, "%s: the waiter is not subscribed", names[i]);
    CHECK_OK(dlock_lock_release(la));
    CHECKF(it_async_wait(&w, 15000), "%s: the waiter was not woken",
           names[i]);
    CHECKF(w.rc == DLOCK_OK, "%s: %s %s", names[i], dlock_err_name(w.rc),
           w.err);
    CHECK_OK(it_async_finish(&w));
    dlock_lock_free(la);
    dlock_lock_free(lb);
    printf("%-16s works under the rule (master %d)\n", names[i], node);
  }
  sem_and_latch(a, "app:sem", "app:latch");
  /* outside the prefix: refused */
  dlock_lock_t *other = it_lock(a, "other");
  CHECK_RC(dlock_lock_acquire(other, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EAUTH);
  dlock_lock_free(other);
  dlock_client_free(b);
  dlock_client_free(a);
  /* no SSUBSCRIBE: the first wait says so */
  CHECK_OK(dlock_options_set_credentials(o, "nossub", "acl-pw"));
  CHECK_OK(dlock_client_new(&a, t->url, o));
  CHECK_OK(dlock_client_new(&b, t->url, o));
  dlock_lock_t *la = it_lock(a, "app:x"), *lb = it_lock(b, "app:x");
  CHECK_OK(dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG));
  int rc = dlock_lock_acquire(lb, 2000, DLOCK_LEASE_WATCHDOG);
  printf("without +ssubscribe: %s \"%s\"\n", dlock_err_name(rc),
         dlock_last_error());
  CHECK_RC(rc, DLOCK_EAUTH);
  CHECK(strstr(dlock_last_error(), "ssubscribe"));
  CHECK(!strchr(dlock_last_error(), '\n'));
  CHECK_OK(dlock_lock_release(la));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(b);
  dlock_client_free(a);
  dlock_options_free(o);
  th_cluster_stop(t);
}

/* Three masters with TLS ports and tls-cluster on: the client reaches the
 * seeds over TLS, reads a map that names TLS ports, and locks on every
 * master over TLS only, verifying the certificates with the test CA;
 * without the CA, one clear TLS error. */
static void t_tls(void) {
  const char *dir = th_certs_dir();
  CHECKF(dir, "openssl could not make the test certificates");
  th_cluster_t *t = th_cluster_start_tls(dir);
  CHECK(t);
  char ca[600];
  snprintf(ca, sizeof ca, "%s/ca.crt", dir);
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 3000));
  CHECK_OK(dlock_options_set_tls(o, true));
  dlock_client_t *c = NULL;
  int rc = dlock_client_new(&c, t->url, o);
  printf("without the CA: %s \"%s\"\n", dlock_err_name(rc),
         dlock_last_error());
  CHECK_RC(rc, DLOCK_ETLS);
  CHECK_OK(dlock_options_set_tls_ca(o, ca, NULL));
  CHECK_OK(dlock_client_new(&c, t->url, o));
  dlock_options_free(o);
  bool seen[TH_CLUSTER_MASTERS] = {false};
  int covered = 0;
  for (int k = 0; k < 64 && covered < TH_CLUSTER_MASTERS; k++) {
    char name[32];
    snprintf(name, sizeof name, "cl-tls-%d", k);
    dlock_lock_t *l = it_lock(c, name);
    CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
    int node = holder_node(t, name);
    CHECK(node >= 0);
    covered += !seen[node];
    seen[node] = true;
    CHECK_OK(dlock_lock_release(l));
    dlock_lock_free(l);
  }
  CHECK_INT(covered, ==, TH_CLUSTER_MASTERS);
  dlock_client_free(c);
  th_cluster_stop(t);
}

/* A multilock of three names on three masters of one cluster client: all
 * taken at once (each on its own master), kept from another client's
 * multilock of the same names, released together. */
static void t_multilock(void) {
  th_cluster_t *t = th_cluster_start();
  CHECK(t);
  dlock_client_t *a = cluster_client(t->url), *b = cluster_client(t->url);
  char names[TH_CLUSTER_MASTERS][32];
  bool seen[TH_CLUSTER_MASTERS] = {false};
  int got = 0;
  for (int k = 0; k < 64 && got < TH_CLUSTER_MASTERS; k++) {
    char n[32];
    snprintf(n, sizeof n, "cl-multi-%d", k);
    /* the master of the name: the one whose EXISTS is not a MOVED */
    for (int i = 0; i < TH_CLUSTER_MASTERS; i++)
      if (!seen[i] && th_redis_int(t->node[i], "EXISTS %s", n) == 0) {
        seen[i] = true;
        snprintf(names[got++], sizeof names[0], "%s", n);
      }
  }
  CHECK_INT(got, ==, TH_CLUSTER_MASTERS);
  dlock_lock_t *la[TH_CLUSTER_MASTERS], *lb[TH_CLUSTER_MASTERS];
  for (int i = 0; i < TH_CLUSTER_MASTERS; i++) {
    la[i] = it_lock(a, names[i]);
    lb[i] = it_lock(b, names[i]);
  }
  dlock_multilock_t *ma = NULL, *mb = NULL;
  CHECK_OK(dlock_multilock_new(&ma, la, TH_CLUSTER_MASTERS));
  CHECK_OK(dlock_multilock_new(&mb, lb, TH_CLUSTER_MASTERS));
  CHECK_OK(dlock_multilock_acquire(ma, 0, DLOCK_LEASE_WATCHDOG));
  bool on[TH_CLUSTER_MASTERS] = {false};
  for (int i = 0; i < TH_CLUSTER_MASTERS; i++) {
    int node = holder_node(t, names[i]);
    CHECK(node >= 0);
    on[node] = true;
  }
  CHECK(on[0] && on[1] && on[2]);
  CHECK_RC(dlock_multilock_acquire(mb, 0, DLOCK_LEASE_WATCHDOG), DLOCK_EBUSY);
  for (int i = 0; i < TH_CLUSTER_MASTERS; i++) /* all or nothing */
    CHECK_INT(holder_node(t, names[i]), >=, 0);
  CHECK_OK(dlock_multilock_release(ma));
  for (int i = 0; i < TH_CLUSTER_MASTERS; i++)
    CHECK_INT(holder_node(t, names[i]), ==, -1);
  CHECK_OK(dlock_multilock_acquire(mb, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_OK(dlock_multilock_release(mb));
  dlock_multilock_free(ma);
  dlock_multilock_free(mb);
  for (int i = 0; i < TH_CLUSTER_MASTERS; i++) {
    dlock_lock_free(la[i]);
    dlock_lock_free(lb[i]);
  }
  dlock_client_free(b);
  dlock_client_free(a);
  th_cluster_stop(t);
}

static const check_case_t cases[] = {
    {"multilock", t_multilock},
    {"tls", t_tls},
    {"acl", t_acl},
    {"master_failover", t_master_failover},
    {"slot_migrated", t_slot_migrated},
    {"every_master", t_every_master},
    {"renew_many_slots", t_renew_many_slots},
    {"single_master", t_single_master},
};

CHECK_MAIN(cases)
