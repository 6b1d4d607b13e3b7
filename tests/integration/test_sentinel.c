/*
 * test_sentinel.c - a master found through Redis Sentinel, and a failover.
 *
 * Design note: each case starts a master, one replica and three sentinels
 * (redis-server --sentinel, through the harness: free 127.0.0.1 ports,
 * stopped by PID) monitoring it with a 2 s down-after and a quorum of 2,
 * and a client on redis-sentinel://s1,s2,s3/NAME. What a user would
 * observe is asserted: locks land on the master the sentinels name, bad
 * URLs and an unknown master name are refused with one clear error, and
 * when the master is killed: a lock taken (with WAIT, the replica
 * connected) before the kill is still held on the promoted replica and
 * its holder can release it, a waiter (one call, riding out the failover)
 * is woken by that release and acquires, and new acquisitions work; the time
 * from the kill to the first new acquisition is printed; a holder whose lock
 * the new master lacks is told (lost callback, DLOCK_ELOST). Main thread plus
 * one waiter thread; every wait is bounded.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "itest.h"
#include "certs.h"
#include "sentinel.h"

#define MASTER TH_SENTINEL_MASTER

static dlock_client_t *sentinel_client(const char *url, int64_t connect_ms) {
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, connect_ms));
  CHECK_OK(dlock_options_set_command_timeout(o, 2000));
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new(&c, url, o));
  dlock_options_free(o);
  return c;
}

static void t_basic(void) {
  th_sentinels_t *tp = th_sentinels_start();
  CHECK(tp);
  th_sentinels_t t = *tp;
  printf("url: %s\n", t.url);
  dlock_client_t *c = sentinel_client(t.url, 2000);
  dlock_lock_t *l = it_lock(c, "sent-basic");
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_INT(it_exists(t.master, "sent-basic"), ==, 1);
  CHECK_OK(dlock_lock_release(l));
  CHECK_INT(it_exists(t.master, "sent-basic"), ==, 0);
  /* the other kinds on the same master */
  dlock_lock_t *f = NULL, *w = NULL;
  CHECK_OK(dlock_lock_new_kind(c, "sent-fair", DLOCK_FAIR, &f));
  CHECK_OK(dlock_lock_new_kind(c, "sent-rw", DLOCK_WRITE, &w));
  CHECK_OK(dlock_lock_acquire(f, 1000, 10000));
  CHECK_OK(dlock_lock_acquire(w, 1000, 10000));
  CHECK_OK(dlock_lock_release(w));
  CHECK_OK(dlock_lock_release(f));
  dlock_lock_free(f);
  dlock_lock_free(w);
  dlock_lock_free(l);
  dlock_client_free(c);

#ifdef DLOCK_CLI_PATH
  /* the command, with the URL as it is */
  char cmd[1200], out[256] = "";
  snprintf(cmd, sizeof cmd,
           DLOCK_CLI_PATH " -u '%s' sent-cli sh -c 'echo "
                          "\"$DLOCK_TOKEN\"'",
           t.url);
  FILE *p = popen(cmd, "r");
  CHECK(p);
  CHECK(fgets(out, sizeof out, p) != NULL);
  CHECK_INT(pclose(p), ==, 0);
  printf("dlock -u %s: token %s", t.url, out);
  CHECK(atoll(out) > 0);
#endif

  /* an unknown master name, bad URLs: one clear error each */
  char bad[600];
  snprintf(bad, sizeof bad, "redis-sentinel://127.0.0.1:%d/nosuchmaster",
           t.sent[0]->port);
  dlock_client_t *x = NULL;
  int rc = dlock_client_new(&x, bad, NULL);
  printf("unknown master: %s (%s)\n", dlock_err_name(rc), dlock_last_error());
  CHECK_RC(rc, DLOCK_EURL);
  CHECK(x == NULL);
  CHECK(strstr(dlock_last_error(), "nosuchmaster"));
  CHECK_RC(dlock_client_new(&x, "redis-sentinel://127.0.0.1:1", NULL),
           DLOCK_EURL);
  CHECK(strstr(dlock_last_error(), "master name"));
  CHECK_RC(dlock_client_new(&x, "redis-sentinel://127.0.0.1:1,/m", NULL),
           DLOCK_EURL);
  th_sentinels_stop(tp);
}

typedef struct waiter {
  dlock_client_t *c;
  int rc;
  char err[512];
  int64_t got_at;
  pthread_t th;
} waiter_t;

static void *waiter_main(void *arg) {
  waiter_t *w = arg;
  dlock_lock_t *l = it_lock(w->c, "sent-held");
  /* one call: the wait rides out the failover (an attempt in flight when
   * the master dies is repeated, as the server tells a repeated attempt
   * of a reentrant lock's wait from a new one) */
  w->rc = dlock_lock_acquire(l, 60000, 10000);
  w->got_at = th_now_ms();
  snprintf(w->err, sizeof w->err, "%s", dlock_last_error());
  if (w->rc == DLOCK_OK)
    dlock_lock_release(l);
  dlock_lock_free(l);
  return NULL;
}

static void t_failover(void) {
  static atomic_int lost_count;
  th_sentinels_t *tp = th_sentinels_start();
  CHECK(tp);
  th_sentinels_t t = *tp;
  /* connect timeout above the failover's few seconds: calls made during
   * it wait for the new master */
  dlock_client_t *c = sentinel_client(t.url, 15000);
  dlock_client_t *c2 = sentinel_client(t.url, 15000);
  /* a holder whose lock the new master will not have, on a 12 s watchdog:
   * longer than the failover (4.7 s under valgrind), so only the lock's
   * absence can end it */
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 15000));
  CHECK_OK(dlock_options_set_watchdog_timeout(o, 12000));
  CHECK_OK(dlock_options_set_lost_callback(o, it_count_lost, &lost_count));
  dlock_client_t *c3 = NULL;
  CHECK_OK(dlock_client_new(&c3, t.url, o));
  dlock_options_free(o);
  dlock_lock_t *gone = it_lock(c3, "sent-gone");
  CHECK_OK(dlock_lock_acquire(gone, 0, DLOCK_LEASE_WATCHDOG));
  dlock_lock_t *held = it_lock(c, "sent-held");
  CHECK_OK(dlock_lock_acquire(held, 0, DLOCK_LEASE_WATCHDOG));
  /* WAIT acknowledged by the replica before the grant returned */
  CHECK_INT(it_exists(t.replica, "sent-held"), ==, 1);
  waiter_t w = {.c = c2};
  CHECK(pthread_create(&w.th, NULL, waiter_main, &w) == 0);
  th_sleep_ms(300); /* the waiter is waiting (scenario pace) */

  int64_t t_kill = th_now_ms();
  CHECK(th_server_kill9(t.master) == 0);
  dlock_lock_t *fresh = it_lock(c, "sent-fresh");
  int64_t t_ok = -1;
  int tries = 0;
  while (th_now_ms() - t_kill < 30000 && tries < 1000) {
    tries++;
    if (dlock_lock_acquire(fresh, 0, 10000) == DLOCK_OK) {
      t_ok = th_now_ms();
      break;
    }
    th_sleep_ms(50);
  }
  CHECKF(t_ok > 0, "no acquisition within 30 s of the kill: %s",
         dlock_last_error());
  printf("FIGURE sentinel.failover: first acquisition %lld ms after the "
         "master was killed (down-after 2000 ms), %d tries\n",
         (long long)(t_ok - t_kill), tries);
  CHECK_OK(dlock_lock_release(fresh));
  int promoted = th_sentinel_master_port(t.sent[0], MASTER);
  CHECK_INT(promoted, ==, t.replica->port);
  /* the lock taken before the kill survived on the promoted replica */
  CHECK_INT(it_exists(t.replica, "sent-held"), ==, 1);
  bool mine = false;
  CHECK_OK(dlock_lock_is_held_by_thread(held, &mine));
  CHECK(mine);
  /* a grant the new master lacks (as one that had not reached the
   * replica when the master died; here deleted there): its holder's next
   * renewal, on the new master, finds it gone and reports it lost */
  int64_t t_del = th_now_ms();
  CHECK_INT(th_redis_int(t.replica, "DEL %s", "sent-gone"), ==, 1);
  bool told = false;
  TH_WAIT_FOR(told, atomic_load(&lost_count) == 1, 20000);
  CHECKF(told, "the holder of a lock the new master lacks was not told");
  printf("FIGURE sentinel.lost: reported lost %lld ms after it vanished "
         "from the new master (12 s watchdog)\n",
         (long long)(th_now_ms() - t_del));
  CHECK_RC(dlock_lock_release(gone), DLOCK_ELOST);
  dlock_lock_free(gone);
  dlock_client_free(c3);
  /* its release reaches the new master and wakes the waiter */
  int64_t t_rel = th_now_ms();
  CHECK_OK(dlock_lock_release(held));
  pthread_join(w.th, NULL);
  CHECKF(w.rc == DLOCK_OK, "the waiter: %s (%s)", dlock_err_name(w.rc), w.err);
  printf("FIGURE sentinel.waiter: woken and granted %lld ms after the "
         "release on the new master\n",
         (long long)(w.got_at - t_rel));
  CHECK_INT(w.got_at - t_rel, <, 5000);
  dlock_lock_free(fresh);
  dlock_lock_free(held);
  dlock_client_free(c2);
  dlock_client_free(c);
  th_sentinels_stop(tp);
}

/* Sentinels with a password of their own and data nodes with another:
 * each goes where it belongs (the URL's or dlock_options_set_credentials'
 * to the data nodes, dlock_options_set_sentinel_credentials' to the
 * sentinels, or the command's --sentinel-password-file); a missing or
 * wrong sentinel password is one clear DLOCK_EAUTH. */
static void t_passwords(void) {
  th_sentinels_t *t = th_sentinels_start_auth("data-pw", "sent-pw");
  CHECK(t);
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 2000));
  CHECK_OK(dlock_options_set_credentials(o, NULL, "data-pw"));
  dlock_client_t *c = NULL;
  /* no sentinel password: the sentinels refuse */
  int rc = dlock_client_new(&c, t->url, o);
  printf("no sentinel password: %s \"%s\"\n", dlock_err_name(rc),
         dlock_last_error());
  CHECK_RC(rc, DLOCK_EAUTH);
  CHECK(c == NULL);
  CHECK(!strchr(dlock_last_error(), '\n'));
  /* a wrong one */
  CHECK_OK(dlock_options_set_sentinel_credentials(o, NULL, "wrong"));
  rc = dlock_client_new(&c, t->url, o);
  printf("wrong sentinel password: %s \"%s\"\n", dlock_err_name(rc),
         dlock_last_error());
  CHECK_RC(rc, DLOCK_EAUTH);
  CHECK(strstr(dlock_last_error(), "sentinel"));
  /* the right one: locks work on the master */
  CHECK_OK(dlock_options_set_sentinel_credentials(o, NULL, "sent-pw"));
  CHECK_OK(dlock_client_new(&c, t->url, o));
  dlock_lock_t *l = it_lock(c, "sent-pw-lock");
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_INT(it_exists(t->master, "sent-pw-lock"), ==, 1);
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  /* the data password given for the sentinels too does not open them */
  CHECK_OK(dlock_options_set_sentinel_credentials(o, NULL, NULL));
  CHECK_OK(dlock_options_set_credentials(o, NULL, "sent-pw"));
  CHECK_RC(dlock_client_new(&c, t->url, o), DLOCK_EAUTH);
  dlock_options_free(o);

#ifdef DLOCK_CLI_PATH
  /* the command: the data password from $DLOCK_PASSWORD, the sentinels'
   * from a file */
  char dir[] = "/tmp/dlock-sentpw-XXXXXX";
  CHECK(mkdtemp(dir));
  char file[64];
  snprintf(file, sizeof file, "%s/pw", dir);
  FILE *f = fopen(file, "w");
  CHECK(f);
  fputs("sent-pw\n", f);
  fclose(f);
  char cmd[1400];
  snprintf(cmd, sizeof cmd,
           "DLOCK_PASSWORD=data-pw " DLOCK_CLI_PATH
           " -u '%s' --sentinel-password-file %s sent-cli-pw true",
           t->url, file);
  CHECK_INT(system(cmd), ==, 0);
  /* without it: refused, exit 69 (unavailable) or 77 (permission) */
  snprintf(cmd, sizeof cmd,
           "DLOCK_PASSWORD=data-pw " DLOCK_CLI_PATH
           " -u '%s' sent-cli-pw true 2>/dev/null",
           t->url);
  int st = system(cmd);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0);
  printf("dlock without the sentinels' password: exit %d\n",
         WEXITSTATUS(st));
  /* the flag on a URL that has no sentinels: a usage error */
  snprintf(cmd, sizeof cmd,
           DLOCK_CLI_PATH " -u redis://127.0.0.1:1 --sentinel-user u x true "
                          "2>/dev/null");
  st = system(cmd);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 64);
  unlink(file);
  rmdir(dir);
#endif
  th_sentinels_stop(t);
}

/* ACL users: docs/ACL.md's rule on the data nodes, and a sentinel user
 * that may only ask for the master's address. Locks work; a sentinel user
 * without that permission is refused with one line naming it. */
static void t_acl(void) {
  const char *data[] = {"user locker on >acl-pw " IT_ACL_COMMANDS
                        " " IT_ACL_PATTERNS, NULL};
  const char *sent[] = {
      "user sentreader on >s-pw -@all +sentinel|get-master-addr-by-name",
      "user sentnone on >s-pw -@all", NULL};
  th_sentinels_t *t = th_sentinels_start_conf(NULL, NULL, data, sent);
  CHECK(t);
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 2000));
  CHECK_OK(dlock_options_set_credentials(o, "locker", "acl-pw"));
  CHECK_OK(dlock_options_set_sentinel_credentials(o, "sentreader", "s-pw"));
  dlock_client_t *a = NULL, *b = NULL;
  CHECK_OK(dlock_client_new(&a, t->url, o));
  CHECK_OK(dlock_client_new(&b, t->url, o));
  dlock_lock_t *la = it_lock(a, "app:sent"), *lb = it_lock(b, "app:sent");
  CHECK_OK(dlock_lock_acquire(la, 0, DLOCK_LEASE_WATCHDOG));
  it_async_t w;
  it_async_start(&w, lb, 20000, DLOCK_LEASE_WATCHDOG, false);
  bool ok;
  TH_WAIT_FOR(ok, it_channels(t->master,
                              "redisson_lock__channel:{app:sent}") >= 1,
              10000);
  CHECK(ok);
  CHECK_OK(dlock_lock_release(la));
  CHECK(it_async_wait(&w, 15000));
  CHECKF(w.rc == DLOCK_OK, "waiter: %s %s", dlock_err_name(w.rc), w.err);
  CHECK_OK(it_async_finish(&w));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(b);
  dlock_client_free(a);
  CHECK_OK(dlock_options_set_sentinel_credentials(o, "sentnone", "s-pw"));
  int rc = dlock_client_new(&a, t->url, o);
  printf("sentinel user without the permission: %s \"%s\"\n",
         dlock_err_name(rc), dlock_last_error());
  CHECK_RC(rc, DLOCK_EAUTH);
  CHECK(strstr(dlock_last_error(), "get-master-addr-by-name"));
  dlock_options_free(o);
  th_sentinels_stop(t);
}

/* Sentinels, master and replica with TLS ports: the client reaches the
 * sentinels and the master they name over TLS only (the URL lists the
 * sentinels' TLS ports, and they name the master's), verifying the
 * certificates with the test CA; without the CA, one clear TLS error. */
static void t_tls(void) {
  const char *dir = th_certs_dir();
  CHECKF(dir, "openssl could not make the test certificates");
  th_sentinels_t *t = th_sentinels_start_tls(dir);
  CHECK(t);
  CHECK_INT(th_sentinel_master_port(t->sent[0], MASTER), ==, t->master->port2);
  char ca[600];
  snprintf(ca, sizeof ca, "%s/ca.crt", dir);
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 3000));
  CHECK_OK(dlock_options_set_tls(o, true));
  dlock_client_t *c = NULL;
  /* the system's CAs do not know the test CA */
  int rc = dlock_client_new(&c, t->url, o);
  printf("without the CA: %s \"%s\"\n", dlock_err_name(rc),
         dlock_last_error());
  CHECK_RC(rc, DLOCK_ETLS);
  CHECK(!strchr(dlock_last_error(), '\n'));
  CHECK_OK(dlock_options_set_tls_ca(o, ca, NULL));
  CHECK_OK(dlock_client_new(&c, t->url, o));
  dlock_options_free(o);
  dlock_lock_t *l = it_lock(c, "sent-tls");
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_INT(it_exists(t->master, "sent-tls"), ==, 1);
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  th_sentinels_stop(t);
}

/* A Redlock whose first node is a Sentinel-managed master
 * (redis-sentinel://) and whose other two are plain servers: granted on all
 * three, the first on the master the sentinels name. */
static void t_redlock_node(void) {
  th_sentinels_t *t = th_sentinels_start();
  CHECK(t);
  th_server_t *p1 = th_server_start(NULL), *p2 = th_server_start(NULL);
  CHECK(p1 && p2);
  const char *urls[] = {t->url, p1->url, p2->url};
  /* The case checks the lock on every node, the Sentinel-managed one too:
   * a node timeout long enough for its first resolution through the
   * sentinels on a loaded machine (with the 50 ms default the acquire
   * returned on the two plain nodes' majority before it, once under ASan
   * at a load of 14). */
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_redlock_timing(o, 2000, 10, 2));
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new_redlock(&c, urls, 3, o));
  dlock_options_free(o);
  dlock_lock_t *l = it_lock(c, "sent-redlock");
  CHECK_OK(dlock_lock_acquire(l, 0, DLOCK_LEASE_WATCHDOG));
  CHECK_INT(it_exists(t->master, "sent-redlock"), ==, 1);
  CHECK_INT(it_exists(p1, "sent-redlock"), ==, 1);
  CHECK_INT(it_exists(p2, "sent-redlock"), ==, 1);
  CHECK_OK(dlock_lock_release(l));
  CHECK_INT(it_exists(t->master, "sent-redlock"), ==, 0);
  dlock_lock_free(l);
  dlock_client_free(c);
  th_server_stop(p2);
  th_server_stop(p1);
  th_sentinels_stop(t);
}

static const check_case_t cases[] = {
    {"redlock_node", t_redlock_node},
    {"acl", t_acl},
    {"tls", t_tls},
    {"basic", t_basic},
    {"passwords", t_passwords},
    {"failover", t_failover},
};

CHECK_MAIN(cases)
