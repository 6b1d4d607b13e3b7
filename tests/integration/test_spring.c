/*
 * test_spring.c - the spring layout (Spring Integration's RedisLockRegistry)
 * of the Redis backend, as a user sees it, on real redis-servers.
 *
 * Design note: each case starts its own redis-server and checks the
 * library's answers against the server's state as Spring reads it (GET and
 * PTTL of <registry>:<name>, messages on <registry>-channel:...): exclusion
 * across clients, the client's threads taking turns (the server knows one
 * id per client), re-entries counted in the client, renewal, a loss
 * reported when another id takes the key, waking on Spring's unlock
 * message (a publish made here as Spring's unlock script makes it), the
 * state snapshot, kinds the layout has no room for (DLOCK_ENOTSUP before
 * anything is written) and bad layout input. The Java suite
 * (tests/interop/spring) runs the real RedisLockRegistry against dlock.
 * Every wait is bounded; leases are long where a wake-up is what is
 * checked, so that only the message can explain it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "itest.h"

#define WD DLOCK_LEASE_WATCHDOG
#define REG "reg"

static dlock_client_t *spring_client(th_server_t *s, int64_t watchdog_ms,
                                     it_lost_t *lost) {
  char url[256];
  snprintf(url, sizeof url, "%s/?layout=spring&registry=" REG, s->url);
  it_client_cfg_t cfg = {.url = url,
                         .watchdog_ms = watchdog_ms,
                         .lost = lost ? it_lost_cb : NULL,
                         .lost_ud = lost};
  return it_client_cfg(s, &cfg);
}

/* GET reg:<name>, or "" when absent (static buffer: one at a time). */
static const char *holder(th_server_t *s, const char *name) {
  static char buf[128];
  char *v = th_redis_str(s, "GET " REG ":%s", name);
  snprintf(buf, sizeof buf, "%s", v ? v : "");
  free(v);
  return buf;
}

static void t_exclusion_across_clients(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *a = spring_client(s, 0, NULL), *b = spring_client(s, 0, NULL);
  dlock_lock_t *la = it_lock(a, "job"), *lb = it_lock(b, "job");
  CHECK_OK(dlock_lock_acquire(la, 0, WD));
  /* Spring's layout: a string holding the client id, with the lease */
  CHECK_STR(holder(s, "job"), dlock_client_id(a));
  CHECK_INT(th_redis_int(s, "PTTL " REG ":job"), >, 0);
  CHECK_INT(th_redis_int(s, "DBSIZE"), ==, 1);
  CHECK_RC(dlock_lock_acquire(lb, 0, WD), DLOCK_EBUSY);
  bool locked = false;
  CHECK_OK(dlock_lock_is_locked(lb, &locked));
  CHECK(locked);
  CHECK_OK(dlock_lock_release(la));
  CHECK(!it_exists(s, REG ":job"));
  CHECK_OK(dlock_lock_acquire(lb, 0, 5000));
  CHECK_STR(holder(s, "job"), dlock_client_id(b));
  int64_t pttl = th_redis_int(s, "PTTL " REG ":job");
  CHECK_INT(pttl, >, 0);
  CHECK_INT(pttl, <=, 5000);
  CHECK_RC(dlock_lock_release(la), DLOCK_ENOTOWNER);
  CHECK_OK(dlock_lock_release(lb));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_server_stop(s);
}

static void t_threads_take_turns(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = spring_client(s, 0, NULL);
  dlock_lock_t *l = it_lock(c, "turns");
  it_async_t t1;
  it_async_start(&t1, l, 0, WD, false);
  CHECK(it_async_wait(&t1, 10000));
  CHECK_OK(t1.rc);
  /* the server would say "ours" to any thread of this client: the client
   * keeps them apart */
  CHECK_RC(dlock_lock_acquire(l, 0, WD), DLOCK_EBUSY);
  CHECK(strstr(dlock_last_error(), "another thread of this client"));
  bool held = true;
  CHECK_OK(dlock_lock_is_held_by_thread(l, &held));
  CHECK(!held);
  int64_t n = -1;
  CHECK_OK(dlock_lock_hold_count(l, &n));
  CHECK_INT(n, ==, 0);
  /* a waiting thread gets it when the first releases (a 60 s lease: only
   * the release can let it in) */
  it_async_t t2;
  it_async_start(&t2, l, 20000, 60000, false);
  CHECK(!it_async_wait(&t2, 300));
  CHECK_OK(it_async_finish(&t1));
  CHECK(it_async_wait(&t2, 15000));
  CHECK_OK(t2.rc);
  CHECK_STR(holder(s, "turns"), dlock_client_id(c));
  CHECK_OK(it_async_finish(&t2));
  CHECK(!it_exists(s, REG ":turns"));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_reentry(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = spring_client(s, 0, NULL);
  dlock_lock_t *l = it_lock(c, "re");
  CHECK_OK(dlock_lock_acquire(l, 0, 20000));
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_OK(dlock_lock_acquire(l, 1000, WD));
  int64_t n = -1;
  CHECK_OK(dlock_lock_hold_count(l, &n));
  CHECK_INT(n, ==, 3);
  /* one key, one id: the count is the client's */
  CHECK_INT(th_redis_int(s, "DBSIZE"), ==, 1);
  CHECK_STR(holder(s, "re"), dlock_client_id(c));
  CHECK_OK(dlock_lock_release(l));
  CHECK_OK(dlock_lock_release(l));
  CHECK_STR(holder(s, "re"), dlock_client_id(c));
  CHECK_OK(dlock_lock_hold_count(l, &n));
  CHECK_INT(n, ==, 1);
  CHECK_OK(dlock_lock_release(l));
  CHECK(!it_exists(s, REG ":re"));
  CHECK_RC(dlock_lock_release(l), DLOCK_ENOTOWNER);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_renewal_and_loss(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  it_lost_t lost;
  it_lost_init(&lost);
  dlock_client_t *c = spring_client(s, 600, &lost);
  dlock_lock_t *l = it_lock(c, "renewed");
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_INT(th_redis_int(s, "PTTL " REG ":renewed"), <=, 600);
  CHECK(it_wait_renewed(s, REG ":renewed", 5000));
  CHECK(it_wait_renewed(s, REG ":renewed", 5000));
  CHECK_STR(holder(s, "renewed"), dlock_client_id(c));
  CHECK_INT(it_lost_count(&lost), ==, 0);
  /* another registry instance's id takes the key: the hold is lost */
  redisReply *r = th_redis_cmd(s, "SET " REG ":renewed someone-else");
  CHECK(r);
  freeReplyObject(r);
  CHECK(it_lost_wait(&lost, 1, 10000));
  CHECK_STR(lost.name, "renewed");
  CHECK_INT(lost.reason, ==, DLOCK_LOST_GONE);
  CHECK_RC(dlock_lock_release(l), DLOCK_ELOST);
  /* the release forgot the lost hold: the key is the other id's, and
   * another thread now meets the server's holder, not this client's */
  CHECK_STR(holder(s, "renewed"), "someone-else");
  it_async_t t;
  it_async_start(&t, l, 0, WD, true);
  CHECK(it_async_wait(&t, 10000));
  CHECK_RC(t.rc, DLOCK_EBUSY);
  CHECK(!strstr(t.err, "another thread"));
  it_async_finish(&t);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_wakes_on_spring_unlock(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = spring_client(s, 0, NULL);
  dlock_lock_t *l = it_lock(c, "w");
  /* a Spring holder with a 60 s lease */
  redisReply *r = th_redis_cmd(s, "SET " REG ":w spring-id PX 60000");
  CHECK(r);
  freeReplyObject(r);
  it_async_t t;
  it_async_start(&t, l, 30000, WD, true);
  bool subscribed;
  TH_WAIT_FOR(subscribed, it_numsub(s, REG "-channel:" REG ":w") >= 1, 10000);
  CHECK(subscribed);
  CHECK(!atomic_load(&t.done));
  /* Spring's PUB_SUB_LOCK unlock: UNLINK, then the key on the channel */
  r = th_redis_cmd(s, "UNLINK " REG ":w");
  CHECK(r);
  freeReplyObject(r);
  CHECK_INT(th_redis_int(s, "PUBLISH " REG "-channel:" REG ":w " REG ":w"), ==,
            1);
  CHECK(it_async_wait(&t, 20000));
  CHECK_OK(t.rc);
  CHECK_OK(it_async_finish(&t));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_release_publishes(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = spring_client(s, 0, NULL);
  dlock_lock_t *l = it_lock(c, "p");
  redisContext *mon = th_redis_connect(s);
  CHECK(mon);
  redisReply *r = redisCommand(mon, "PSUBSCRIBE " REG "-channel:*");
  CHECK(r && r->type == REDIS_REPLY_ARRAY);
  freeReplyObject(r);
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_OK(dlock_lock_release(l));
  /* what Spring's PUB_SUB_LOCK waiters listen for */
  r = NULL;
  CHECK(redisGetReply(mon, (void **)&r) == REDIS_OK && r);
  CHECK(r->type == REDIS_REPLY_ARRAY && r->elements == 4);
  CHECK_STR(r->element[0]->str, "pmessage");
  CHECK_STR(r->element[2]->str, REG "-channel:" REG ":p");
  CHECK_STR(r->element[3]->str, REG ":p");
  freeReplyObject(r);
  redisFree(mon);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_state_and_force(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = spring_client(s, 0, NULL);
  dlock_lock_t *l = it_lock(c, "st");
  dlock_lock_state_t *st = NULL;
  CHECK_OK(dlock_lock_state(l, &st));
  CHECK_STR(st->kind, "free");
  CHECK_INT(st->nholders, ==, 0);
  dlock_lock_state_free(st);
  redisReply *r = th_redis_cmd(s, "SET " REG ":st spring-id PX 20000");
  CHECK(r);
  freeReplyObject(r);
  CHECK_OK(dlock_lock_state(l, &st));
  CHECK_STR(st->kind, "spring");
  CHECK_INT(st->nholders, ==, 1);
  CHECK_STR(st->holders[0].owner, "spring-id");
  CHECK_INT(st->ttl_ms, >, 0);
  CHECK_INT(st->ttl_ms, <=, 20000);
  dlock_lock_state_free(st);
  bool was = false;
  CHECK_OK(dlock_lock_force_release(l, &was));
  CHECK(was);
  CHECK(!it_exists(s, REG ":st"));
  /* another type under the key is no Spring lock */
  r = th_redis_cmd(s, "HSET " REG ":st a 1");
  CHECK(r);
  freeReplyObject(r);
  CHECK_RC(dlock_lock_state(l, &st), DLOCK_EWRONGTYPE);
  CHECK_RC(dlock_lock_acquire(l, 0, WD), DLOCK_EWRONGTYPE);
  CHECK(strstr(dlock_last_error(), "another type (not a lock)"));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_other_kinds_refused(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = spring_client(s, 0, NULL);
  const dlock_lock_kind_t kinds[] = {DLOCK_FAIR, DLOCK_FENCED, DLOCK_READ,
                                     DLOCK_WRITE};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    dlock_lock_t *l = NULL;
    CHECK_RC(dlock_lock_new_kind(c, "k", kinds[i], &l), DLOCK_ENOTSUP);
    CHECK(l == NULL);
    CHECK(strstr(dlock_last_error(), "spring layout"));
  }
  dlock_semaphore_t *sem = NULL;
  dlock_permit_sem_t *ps = NULL;
  dlock_latch_t *latch = NULL;
  CHECK_RC(dlock_semaphore_new(c, "k", &sem), DLOCK_ENOTSUP);
  CHECK_RC(dlock_permit_sem_new(c, "k", &ps), DLOCK_ENOTSUP);
  CHECK_RC(dlock_latch_new(c, "k", &latch), DLOCK_ENOTSUP);
  CHECK(strstr(dlock_last_error(), "spring layout"));
  CHECK_INT(th_redis_int(s, "DBSIZE"), ==, 0);
  /* the layout has none of dlock's own keys: a name in their space is a
   * lock like any other, under the registry's key */
  dlock_lock_t *own = NULL;
  CHECK_OK(dlock_lock_new(c, "dlock_lock_queue:{k}", &own));
  CHECK_OK(dlock_lock_acquire(own, 0, WD));
  CHECK(it_exists(s, REG ":dlock_lock_queue:{k}"));
  CHECK_OK(dlock_lock_release(own));
  dlock_lock_free(own);
  dlock_client_free(c);
  th_server_stop(s);
}

static void t_bad_layout_input(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  char url[256];
  dlock_client_t *c = NULL;
  snprintf(url, sizeof url, "%s/?layout=spring", s->url);
  CHECK_RC(dlock_client_new(&c, url, NULL), DLOCK_EINVAL);
  CHECK(strstr(dlock_last_error(), "registry key"));
  snprintf(url, sizeof url, "%s/?layout=zk", s->url);
  CHECK_RC(dlock_client_new(&c, url, NULL), DLOCK_EURL);
  CHECK(strstr(dlock_last_error(), "unknown layout"));
  snprintf(url, sizeof url, "%s/?registry=" REG, s->url);
  CHECK_RC(dlock_client_new(&c, url, NULL), DLOCK_EINVAL);
  snprintf(url, sizeof url, "%s/?layout=spring&registry=%%01x", s->url);
  CHECK_RC(dlock_client_new(&c, url, NULL), DLOCK_EINVAL);
  CHECK(c == NULL);

  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_RC(dlock_options_set_layout(o, "zk"), DLOCK_EINVAL);
  CHECK_RC(dlock_options_set_spring_registry(o, ""), DLOCK_EINVAL);
  CHECK_RC(dlock_options_set_spring_registry(o, "a\nb"), DLOCK_EINVAL);
  CHECK_RC(dlock_options_set_layout(NULL, "spring"), DLOCK_EINVAL);
  /* options alone select it */
  CHECK_OK(dlock_options_set_layout(o, "spring"));
  CHECK_OK(dlock_options_set_spring_registry(o, REG));
  CHECK_OK(dlock_client_new(&c, s->url, o));
  dlock_lock_t *l = it_lock(c, "opt");
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_STR(holder(s, "opt"), dlock_client_id(c));
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  c = NULL;
  /* a URL and options that disagree */
  snprintf(url, sizeof url, "%s/?layout=redisson", s->url);
  CHECK_RC(dlock_client_new(&c, url, o), DLOCK_EINVAL);
  snprintf(url, sizeof url, "%s/?registry=other", s->url);
  CHECK_RC(dlock_client_new(&c, url, o), DLOCK_EINVAL);
  /* topologies that keep Redisson's layout */
  const char *nodes[] = {s->url};
  CHECK_RC(dlock_client_new_redlock(&c, nodes, 1, o), DLOCK_ENOTSUP);
  CHECK_RC(dlock_client_new(&c, "redis-cluster://127.0.0.1:1", o),
           DLOCK_ENOTSUP);
  CHECK(c == NULL);
  /* the default stays Redisson's */
  CHECK_OK(dlock_options_set_layout(o, NULL));
  CHECK_OK(dlock_options_set_spring_registry(o, NULL));
  CHECK_OK(dlock_client_new(&c, s->url, o));
  l = it_lock(c, "opt");
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_INT(th_redis_int(s, "HLEN opt"), ==, 1);
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  dlock_options_free(o);
  th_server_stop(s);
}

static const check_case_t cases[] = {
    {"exclusion_across_clients", t_exclusion_across_clients},
    {"threads_take_turns", t_threads_take_turns},
    {"reentry", t_reentry},
    {"renewal_and_loss", t_renewal_and_loss},
    {"wakes_on_spring_unlock", t_wakes_on_spring_unlock},
    {"release_publishes", t_release_publishes},
    {"state_and_force", t_state_and_force},
    {"other_kinds_refused", t_other_kinds_refused},
    {"bad_layout_input", t_bad_layout_input},
};

CHECK_MAIN(cases)
