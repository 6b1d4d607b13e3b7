/*
 * test_replicas.c - WAIT after write scripts, against a real master and a
 * real replica (dlock_options_set_replica_wait).
 *
 * Design note
 * - Each case starts a master and a replica of it ("replicaof"), both by
 *   the harness on loopback, and waits (bounded) until the master lists
 *   the replica online; clients are created after that, so their first
 *   ROLE sees it.
 * - Acknowledged: right after an acquire returns, the replica has the key
 *   (WAIT returned only once the replica had the write).
 * - Not acknowledged: the replica is paused (SIGSTOP); the master still
 *   counts it as connected, WAIT times out with 0, the acquire fails with
 *   one line naming the replicas, and the master no longer has the key
 *   (rolled back). The same with the switch off succeeds.
 * - Single threaded apart from the library's threads.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "itest.h"

#define WD DLOCK_LEASE_WATCHDOG

typedef struct pair {
  th_server_t *master, *replica;
} pair_t;

static bool replica_online(th_server_t *master) {
  return th_info_has(master, "replication", "connected_slaves:1",
                     "state=online");
}

static void pair_start(pair_t *p) {
  p->master = th_server_start(NULL);
  CHECK(p->master);
  char line[64];
  snprintf(line, sizeof line, "replicaof 127.0.0.1 %d", p->master->port);
  const char *conf[] = {line, NULL};
  p->replica = th_server_start(conf);
  CHECK(p->replica);
  bool ok;
  TH_WAIT_FOR(ok, replica_online(p->master), 20000);
  CHECKF(ok, "the replica did not come online");
}

static void pair_stop(pair_t *p) {
  th_server_resume(p->replica);
  th_server_stop(p->replica);
  th_server_stop(p->master);
}

static dlock_client_t *client(th_server_t *s, int64_t replica_wait_ms) {
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_replica_wait(o, replica_wait_ms));
  CHECK_OK(dlock_options_set_command_timeout(o, 5000));
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new(&c, s->url, o));
  dlock_options_free(o);
  return c;
}

static void t_acknowledged(void) {
  pair_t p;
  pair_start(&p);
  dlock_client_t *c = client(p.master, 5000);
  const dlock_lock_kind_t kinds[] = {DLOCK_REENTRANT, DLOCK_FENCED,
                                     DLOCK_FAIR, DLOCK_WRITE, DLOCK_READ};
  const char *names[] = {"rp-reentrant", "rp-fenced", "rp-fair", "rp-write",
                         "rp-read"};
  for (int i = 0; i < 5; i++) {
    dlock_lock_t *l = NULL;
    CHECK_OK(dlock_lock_new_kind(c, names[i], kinds[i], &l));
    CHECK_OK(dlock_lock_acquire(l, 0, WD));
    /* WAIT returned: the replica has the hold already */
    CHECKF(it_exists(p.replica, names[i]), "%s: not on the replica",
           names[i]);
    CHECK_OK(dlock_lock_release(l));
    CHECKF(!it_exists(p.replica, names[i]),
           "%s: the release is not on the replica", names[i]);
    dlock_lock_free(l);
  }
  dlock_semaphore_t *sem = NULL;
  CHECK_OK(dlock_semaphore_new(c, "rp-sem", &sem));
  bool set = false;
  CHECK_OK(dlock_semaphore_try_set_permits(sem, 2, &set));
  CHECK_OK(dlock_semaphore_acquire(sem, 1, 0));
  char *v = th_redis_str(p.replica, "GET %s", "rp-sem");
  CHECK(v && strcmp(v, "1") == 0);
  free(v);
  dlock_semaphore_free(sem);
  dlock_client_free(c);
  pair_stop(&p);
}

static void t_none_acknowledged_rolls_back(void) {
  pair_t p;
  pair_start(&p);
  /* c waits 300 ms for the paused replica; calls made while the replica
   * runs go through patient (5 s): on a loaded machine a running replica's
   * acknowledgement can take longer than 300 ms */
  dlock_client_t *c = client(p.master, 300);
  dlock_client_t *patient = client(p.master, 5000);
  dlock_client_t *off = client(p.master, 0);
  dlock_semaphore_t *setup = NULL;
  CHECK_OK(dlock_semaphore_new(patient, "rp-sem", &setup));
  bool set = false;
  CHECK_OK(dlock_semaphore_try_set_permits(setup, 2, &set));
  dlock_semaphore_free(setup);
  dlock_semaphore_t *sem = NULL;
  CHECK_OK(dlock_semaphore_new(c, "rp-sem", &sem));
  CHECK(th_server_pause(p.replica) == 0);
  dlock_lock_t *l = it_lock(c, "rp-lost");
  int rc = dlock_lock_acquire(l, 0, WD);
  printf("acquire, replica paused: %s \"%s\"\n", dlock_err_name(rc),
         dlock_last_error());
  CHECK_RC(rc, DLOCK_EUNAVAILABLE);
  CHECK(strstr(dlock_last_error(),
               "none of the 1 connected replica acknowledged"));
  CHECK(!strchr(dlock_last_error(), '\n'));
  CHECKF(!it_exists(p.master, "rp-lost"), "the acquire was not rolled back");
  bool held = true;
  CHECK_OK(dlock_lock_is_held_by_thread(l, &held));
  CHECK(!held);
  rc = dlock_semaphore_acquire(sem, 1, 0);
  printf("semaphore acquire, replica paused: %s \"%s\"\n", dlock_err_name(rc),
         dlock_last_error());
  CHECK_RC(rc, DLOCK_EUNAVAILABLE);
  char *v = th_redis_str(p.master, "GET %s", "rp-sem");
  CHECKF(v && strcmp(v, "2") == 0, "permits not given back: %s",
         v ? v : "(nil)");
  free(v);
  /* the off switch: no WAIT, the acquire succeeds */
  dlock_lock_t *lo = it_lock(off, "rp-lost");
  CHECK_OK(dlock_lock_acquire(lo, 0, WD));
  CHECK(it_exists(p.master, "rp-lost"));
  CHECK_OK(dlock_lock_release(lo));
  dlock_lock_free(lo);
  /* the replica back: acquires work again */
  CHECK(th_server_resume(p.replica) == 0);
  dlock_lock_t *lp = it_lock(patient, "rp-lost");
  CHECK_OK(dlock_lock_acquire(lp, 0, WD));
  CHECK(it_exists(p.replica, "rp-lost"));
  CHECK_OK(dlock_lock_release(lp));
  dlock_lock_free(lp);
  dlock_lock_free(l);
  dlock_semaphore_free(sem);
  dlock_client_free(c);
  dlock_client_free(patient);
  dlock_client_free(off);
  pair_stop(&p);
}

static const check_case_t cases[] = {
    {"acknowledged", t_acknowledged},
    {"none_acknowledged_rolls_back", t_none_acknowledged_rolls_back},
};

CHECK_MAIN(cases)
