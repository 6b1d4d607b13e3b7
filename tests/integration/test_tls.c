/*
 * test_tls.c - Redis over TLS: rediss:// URLs and the TLS options, against
 * redis-server's own TLS port.
 *
 * Design note
 * - Certificates are made by the `openssl` command in a temp dir of the
 *   test (tests/harness/certs.c): a CA, a server certificate for localhost
 *   and 127.0.0.1 (SAN), a server certificate for another name only
 *   (other.example), a client certificate, and a second, unrelated CA.
 *   EC P-256 keys keep it quick.
 * - Each case starts its own redis-server with "tls-port ${port2}" (the
 *   harness picks the port) and the certificate lines; the plain port
 *   stays open on 127.0.0.1 for the harness's own checks, and the clients
 *   under test use only the TLS port (or, in the mismatch cases, the plain
 *   port on purpose).
 * - What is asserted is what a user sees: the lock works (acquire, a
 *   waiter woken by a release through the pub/sub connection, which is a
 *   TLS conn as well, release), or the call fails with DLOCK_ETLS (or a
 *   timeout) and one line that says why. The mismatch cases bound the time
 *   to fail by the connect timeout plus a margin: a hang is the bug.
 * - The dlock command (next to this test in the build tree; skipped when
 *   not built) is run with --cacert, --tls, --cert/--key, --sni and
 *   --insecure.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "itest.h"

#include "certs.h"

#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>

#define WD DLOCK_LEASE_WATCHDOG
#define CONNECT_MS 3000

static char g_certs[PATH_MAX]; /* the certificates' dir (certs.h) */

static const char *cert(const char *file) { return th_cert(file); }

/* Makes every certificate the cases use, once per process (certs.h). */
static void make_certs(void) {
  if (g_certs[0])
    return;
  const char *dir = th_certs_dir();
  CHECKF(dir, "openssl could not make the test certificates");
  snprintf(g_certs, sizeof g_certs, "%s", dir);
}

/* A redis-server with a TLS port serving `server_cert` (server or other),
 * asking clients for a certificate when auth_clients. */
static th_server_t *tls_server(const char *server_cert, bool auth_clients) {
  make_certs();
  char certl[PATH_MAX + 64], keyl[PATH_MAX + 64], cal[PATH_MAX + 64];
  snprintf(certl, sizeof certl, "tls-cert-file %s/%s.crt", g_certs,
           server_cert);
  snprintf(keyl, sizeof keyl, "tls-key-file %s/%s.key", g_certs,
           server_cert);
  snprintf(cal, sizeof cal, "tls-ca-cert-file %s/ca.crt", g_certs);
  const char *conf[] = {"tls-port ${port2}",
                        certl,
                        keyl,
                        cal,
                        auth_clients ? "tls-auth-clients yes"
                                     : "tls-auth-clients no",
                        NULL};
  th_server_t *s = th_server_start(conf);
  CHECK(s);
  CHECK(s->port2 > 0);
  return s;
}

typedef struct tls_cfg {
  const char *url_fmt; /* one %d: the port; NULL = rediss://127.0.0.1:%d */
  int port;            /* 0 = the TLS port */
  bool tls_switch;     /* dlock_options_set_tls(true) */
  const char *ca, *cert, *key, *sni;
  bool insecure;
} tls_cfg_t;

static int tls_client(th_server_t *s, const tls_cfg_t *cfg,
                      dlock_client_t **out) {
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, CONNECT_MS));
  CHECK_OK(dlock_options_set_command_timeout(o, 5000));
  if (cfg->tls_switch)
    CHECK_OK(dlock_options_set_tls(o, true));
  if (cfg->ca)
    CHECK_OK(dlock_options_set_tls_ca(o, cert(cfg->ca), NULL));
  if (cfg->cert)
    CHECK_OK(dlock_options_set_tls_cert(o, cert(cfg->cert), cert(cfg->key)));
  if (cfg->sni)
    CHECK_OK(dlock_options_set_tls_sni(o, cfg->sni));
  if (cfg->insecure)
    CHECK_OK(dlock_options_set_tls_insecure(o, true));
  char url[128];
  snprintf(url, sizeof url,
           cfg->url_fmt ? cfg->url_fmt : "rediss://127.0.0.1:%d",
           cfg->port ? cfg->port : s->port2);
  *out = NULL;
  int rc = dlock_client_new(out, url, o);
  dlock_options_free(o);
  printf("%-40s -> %s \"%s\"\n", url, dlock_err_name(rc),
         rc ? dlock_last_error() : "");
  return rc;
}

/* The failure's detail is one line containing `want`. */
static void check_line(const char *want) {
  const char *e = dlock_last_error();
  CHECKF(strstr(e, want), "\"%s\" does not say \"%s\"", e, want);
  CHECKF(!strchr(e, '\n'), "the detail is not one line: \"%s\"", e);
}

/* A lock, a waiter in another client woken by the release (over the TLS
 * pub/sub connection), and the release. */
static void check_locks(th_server_t *s, dlock_client_t *a, dlock_client_t *b,
                        const char *name) {
  dlock_lock_t *la = it_lock(a, name), *lb = it_lock(b, name);
  CHECK_OK(dlock_lock_acquire(la, 0, WD));
  CHECK(it_exists(s, name));
  it_async_t w;
  it_async_start(&w, lb, 30000, WD, false);
  CHECKF(it_wait_subscribers(s, name, 1, 10000),
         "the waiter did not subscribe over TLS");
  CHECK(!atomic_load(&w.done));
  CHECK_OK(dlock_lock_release(la));
  /* the watchdog lease is 30 s: only the wake-up message gets the waiter
   * in before the wait's 30 s */
  CHECKF(it_async_wait(&w, 20000), "the waiter was not woken");
  CHECKF(w.rc == DLOCK_OK, "waiter: %s %s", dlock_err_name(w.rc), w.err);
  CHECK_OK(it_async_finish(&w));
  CHECK(!it_exists(s, name));
  dlock_lock_free(la);
  dlock_lock_free(lb);
}

/* ---------------------------------------------------------------- cases */

static void t_verified_locks_work(void) {
  th_server_t *s = tls_server("server", false);
  dlock_client_t *a = NULL, *b = NULL;
  tls_cfg_t cfg = {.ca = "ca.crt"};
  CHECK_OK(tls_client(s, &cfg, &a));
  /* by name too: the certificate carries DNS:localhost */
  tls_cfg_t byname = {.url_fmt = "rediss://localhost:%d", .ca = "ca.crt"};
  CHECK_OK(tls_client(s, &byname, &b));
  CHECK_OK(dlock_client_ping(a));
  check_locks(s, a, b, "tls-lock");
  dlock_client_free(a);
  dlock_client_free(b);
  th_server_stop(s);
}

/* A waiter of another kind woken over TLS pub/sub: fair (its own channel
 * and the hand-off), a writer behind a reader, a latch. */
typedef struct latch_waiter {
  dlock_latch_t *latch;
  atomic_int done;
  int rc;
} latch_waiter_t;

static void *latch_waiter_main(void *arg) {
  latch_waiter_t *w = arg;
  w->rc = dlock_latch_await(w->latch, 20000);
  atomic_store(&w->done, 1);
  return NULL;
}

static void waiter_woken(th_server_t *s, dlock_lock_t *holder,
                         dlock_lock_t *waiter, const char *pattern) {
  it_async_t w;
  it_async_start(&w, waiter, 30000, WD, true);
  bool ok;
  TH_WAIT_FOR(ok, it_channels(s, pattern) >= 1, 10000);
  CHECKF(ok, "no waiter subscribed to %s", pattern);
  CHECK(!atomic_load(&w.done));
  CHECK_OK(dlock_lock_release(holder));
  CHECKF(it_async_wait(&w, 20000), "the waiter on %s was not woken", pattern);
  CHECKF(w.rc == DLOCK_OK, "waiter: %s %s", dlock_err_name(w.rc), w.err);
  it_async_finish(&w);
}

static void t_every_kind_over_tls(void) {
  th_server_t *s = tls_server("server", false);
  dlock_client_t *a = NULL, *b = NULL;
  tls_cfg_t cfg = {.ca = "ca.crt"};
  CHECK_OK(tls_client(s, &cfg, &a));
  CHECK_OK(tls_client(s, &cfg, &b));
  dlock_lock_t *fa = NULL, *fb = NULL, *ra = NULL, *wb = NULL;
  CHECK_OK(dlock_lock_new_kind(a, "tls-fair", DLOCK_FAIR, &fa));
  CHECK_OK(dlock_lock_new_kind(b, "tls-fair", DLOCK_FAIR, &fb));
  CHECK_OK(dlock_lock_acquire(fa, 0, WD));
  waiter_woken(s, fa, fb, "redisson_lock__channel:{tls-fair}:*");
  CHECK_OK(dlock_lock_new_kind(a, "tls-rw", DLOCK_READ, &ra));
  CHECK_OK(dlock_lock_new_kind(b, "tls-rw", DLOCK_WRITE, &wb));
  CHECK_OK(dlock_lock_acquire(ra, 0, WD));
  waiter_woken(s, ra, wb, "redisson_rwlock:{tls-rw}");
  dlock_latch_t *la = NULL, *lb = NULL;
  CHECK_OK(dlock_latch_new(a, "tls-latch", &la));
  CHECK_OK(dlock_latch_new(b, "tls-latch", &lb));
  bool set = false;
  CHECK_OK(dlock_latch_try_set_count(la, 1, &set));
  latch_waiter_t lw = {.latch = lb};
  pthread_t th;
  CHECK(pthread_create(&th, NULL, latch_waiter_main, &lw) == 0);
  bool ok;
  TH_WAIT_FOR(ok,
              it_numsub(s, "redisson_countdownlatch__channel__{tls-latch}") >=
                  1,
              10000);
  CHECK(ok);
  CHECK_OK(dlock_latch_count_down(la));
  TH_WAIT_FOR(ok, atomic_load(&lw.done), 20000);
  CHECKF(ok, "the latch waiter was not woken");
  pthread_join(th, NULL);
  CHECK_OK(lw.rc);
  dlock_latch_free(la);
  dlock_latch_free(lb);
  dlock_lock_free(fa);
  dlock_lock_free(fb);
  dlock_lock_free(ra);
  dlock_lock_free(wb);
  dlock_client_free(a);
  dlock_client_free(b);
  th_server_stop(s);
}

static void t_tls_switch_on_redis_url(void) {
  th_server_t *s = tls_server("server", false);
  dlock_client_t *a = NULL, *b = NULL;
  tls_cfg_t cfg = {.url_fmt = "redis://127.0.0.1:%d",
                   .tls_switch = true,
                   .ca = "ca.crt"};
  CHECK_OK(tls_client(s, &cfg, &a));
  CHECK_OK(tls_client(s, &cfg, &b));
  check_locks(s, a, b, "tls-switch");
  dlock_client_free(a);
  dlock_client_free(b);
  th_server_stop(s);
}

static void t_wrong_ca(void) {
  th_server_t *s = tls_server("server", false);
  dlock_client_t *c = NULL;
  tls_cfg_t cfg = {.ca = "otherca.crt"};
  CHECK_RC(tls_client(s, &cfg, &c), DLOCK_ETLS);
  CHECK(c == NULL);
  check_line("certificate verify failed: ");
  check_line("check the CA file");
  /* no CA given: the system's store, which does not know the test CA */
  tls_cfg_t sys = {0};
  CHECK_RC(tls_client(s, &sys, &c), DLOCK_ETLS);
  check_line("certificate verify failed: ");
  th_server_stop(s);
}

static void t_wrong_host_name(void) {
  /* the certificate names other.example only */
  th_server_t *s = tls_server("other", false);
  dlock_client_t *c = NULL;
  tls_cfg_t ip = {.ca = "ca.crt"};
  CHECK_RC(tls_client(s, &ip, &c), DLOCK_ETLS);
  check_line("not for '127.0.0.1'");
  tls_cfg_t name = {.url_fmt = "rediss://localhost:%d", .ca = "ca.crt"};
  CHECK_RC(tls_client(s, &name, &c), DLOCK_ETLS);
  check_line("not for 'localhost'");
  /* the SNI name is the name verified */
  tls_cfg_t sni = {.ca = "ca.crt", .sni = "other.example"};
  CHECK_OK(tls_client(s, &sni, &c));
  CHECK_OK(dlock_client_ping(c));
  dlock_client_free(c);
  tls_cfg_t wrongsni = {.ca = "ca.crt", .sni = "another.example"};
  CHECK_RC(tls_client(s, &wrongsni, &c), DLOCK_ETLS);
  check_line("not for 'another.example'");
  th_server_stop(s);
}

static void t_insecure_switch(void) {
  th_server_t *s = tls_server("other", false);
  dlock_client_t *a = NULL, *b = NULL;
  /* wrong name and an unknown CA: only the switch lets it through */
  tls_cfg_t cfg = {.ca = "otherca.crt", .insecure = true};
  CHECK_OK(tls_client(s, &cfg, &a));
  tls_cfg_t nothing = {.insecure = true};
  CHECK_OK(tls_client(s, &nothing, &b));
  check_locks(s, a, b, "tls-insecure");
  dlock_client_free(a);
  dlock_client_free(b);
  /* and it is not the default */
  tls_cfg_t dflt = {0};
  CHECK_RC(tls_client(s, &dflt, &a), DLOCK_ETLS);
  th_server_stop(s);
}

static void t_mutual_tls(void) {
  th_server_t *s = tls_server("server", true);
  dlock_client_t *a = NULL, *b = NULL, *c = NULL;
  tls_cfg_t with = {.ca = "ca.crt", .cert = "client.crt", .key = "client.key"};
  CHECK_OK(tls_client(s, &with, &a));
  CHECK_OK(tls_client(s, &with, &b));
  check_locks(s, a, b, "tls-mutual");
  dlock_client_free(a);
  dlock_client_free(b);
  /* no client certificate: the server refuses (TLS 1.3 tells after the
   * handshake, at the first reply) */
  tls_cfg_t without = {.ca = "ca.crt"};
  CHECK_RC(tls_client(s, &without, &c), DLOCK_ETLS);
  CHECK(c == NULL);
  check_line("client certificate");
  /* a certificate the server's CA did not sign */
  tls_cfg_t foreign = {.ca = "ca.crt", .cert = "otherca.crt",
                       .key = "otherca.key"};
  CHECK_RC(tls_client(s, &foreign, &c), DLOCK_ETLS);
  th_server_stop(s);
}

static void t_unreadable_files(void) {
  th_server_t *s = tls_server("server", false);
  dlock_client_t *c = NULL;
  tls_cfg_t noca = {.ca = "missing-ca.crt"};
  CHECK_RC(tls_client(s, &noca, &c), DLOCK_ETLS);
  check_line("cannot read the CA file");
  check_line("missing-ca.crt': No such file or directory");
  tls_cfg_t nocert = {.ca = "ca.crt", .cert = "missing.crt",
                      .key = "client.key"};
  CHECK_RC(tls_client(s, &nocert, &c), DLOCK_ETLS);
  check_line("cannot read the certificate");
  tls_cfg_t nokey = {.ca = "ca.crt", .cert = "client.crt",
                     .key = "missing.key"};
  CHECK_RC(tls_client(s, &nokey, &c), DLOCK_ETLS);
  check_line("cannot read the private key");
  /* a file that is not PEM */
  tls_cfg_t junk = {.ca = "client.ext"};
  CHECK_RC(tls_client(s, &junk, &c), DLOCK_ETLS);
  check_line("cannot load the CA file");
  tls_cfg_t mismatch = {.ca = "ca.crt", .cert = "client.crt",
                        .key = "server.key"};
  CHECK_RC(tls_client(s, &mismatch, &c), DLOCK_ETLS);
  check_line("does not match");
  /* a Unix socket cannot do TLS */
  tls_cfg_t unix_tls = {.url_fmt = "unix:///tmp/none-%d.sock",
                        .tls_switch = true,
                        .ca = "ca.crt"};
  CHECK_RC(tls_client(s, &unix_tls, &c), DLOCK_ENOTSUP);
  th_server_stop(s);
}

static void t_protocol_mismatch(void) {
  th_server_t *s = tls_server("server", false);
  dlock_client_t *c = NULL;
  /* plain client at the TLS port */
  tls_cfg_t plain = {.url_fmt = "redis://127.0.0.1:%d"};
  int64_t t0 = th_now_ms();
  int rc = tls_client(s, &plain, &c);
  int64_t took = th_now_ms() - t0;
  CHECK_RC_IN(rc, DLOCK_EUNAVAILABLE, DLOCK_EIOTIMEOUT);
  check_line("a TLS port?");
  CHECKF(took < CONNECT_MS + 5000 + 5000, "took %lld ms", (long long)took);
  /* TLS client at the plain port */
  tls_cfg_t tls = {.port = s->port, .ca = "ca.crt"};
  t0 = th_now_ms();
  rc = tls_client(s, &tls, &c);
  took = th_now_ms() - t0;
  CHECK_RC_IN(rc, DLOCK_ETLS, DLOCK_EIOTIMEOUT);
  check_line("a plain port?");
  CHECKF(took < CONNECT_MS + 5000, "took %lld ms", (long long)took);
  th_server_stop(s);
}

/* A child that frees its copy of a TLS client (after fork) leaves the
 * parent's connections working: nothing is written into their streams. */
static void t_fork_child_frees(void) {
  th_server_t *s = tls_server("server", false);
  dlock_client_t *a = NULL, *b = NULL;
  tls_cfg_t cfg = {.ca = "ca.crt"};
  CHECK_OK(tls_client(s, &cfg, &a));
  CHECK_OK(tls_client(s, &cfg, &b));
  dlock_lock_t *l = it_lock(a, "tls-fork");
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_OK(dlock_lock_release(l));
  char *info = th_redis_str(s, "INFO %s", "stats");
  CHECK(info);
  const char *tc = strstr(info, "total_connections_received:");
  CHECK(tc);
  long before = atol(tc + strlen("total_connections_received:"));
  free(info);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    dlock_lock_free(l);
    dlock_client_free(a);
    _exit(0);
  }
  int st = 0;
  CHECK(it_waitpid_bounded(pid, 10000, &st));
  CHECK(it_child_ok(st));
  /* the pooled connection, idle during the fork, is used as it is: no
   * new connection reaches the server */
  CHECK_OK(dlock_client_ping(a));
  info = th_redis_str(s, "INFO %s", "stats");
  CHECK(info);
  tc = strstr(info, "total_connections_received:");
  CHECK(tc);
  long after = atol(tc + strlen("total_connections_received:"));
  free(info);
  CHECKF(after == before, "%ld connection(s) dialled again after the child "
                          "freed its copy", after - before);
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  check_locks(s, a, b, "tls-fork2");
  dlock_client_free(a);
  dlock_client_free(b);
  th_server_stop(s);
}

/* ------------------------------------------------ the dlock command */

static char g_cli[PATH_MAX];

static bool find_cli(void) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0)
    return false;
  self[n] = '\0';
  snprintf(g_cli, sizeof g_cli, "%s/../tools/dlock/dlock", dirname(self));
  return access(g_cli, X_OK) == 0;
}

/* Runs the command (argv[0] is set here), stderr to a file; its exit
 * status, and its stderr in err. At most 20 s. */
static int run_cli(char **argv, char *err, size_t errlen) {
  char errp[PATH_MAX + 16];
  snprintf(errp, sizeof errp, "%s/cli.err", g_certs);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 2, errp, O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  extern char **environ;
  char *envp[64];
  size_t ne = 0;
  for (char **e = environ; *e && ne < 63; e++)
    if (strncmp(*e, "DLOCK_", 6) != 0)
      envp[ne++] = *e;
  envp[ne] = NULL;
  argv[0] = g_cli;
  pid_t pid;
  CHECK(posix_spawn(&pid, g_cli, &fa, NULL, argv, envp) == 0);
  posix_spawn_file_actions_destroy(&fa);
  int st = 0;
  bool ok = it_waitpid_bounded(pid, 20000, &st);
  CHECKF(ok, "the command did not finish");
  err[0] = '\0';
  FILE *f = fopen(errp, "r");
  if (f) {
    size_t got = fread(err, 1, errlen - 1, f);
    err[got] = '\0';
    fclose(f);
  }
  int status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  printf("dlock -> exit %d %s", status, err);
  if (!err[0])
    printf("\n");
  return status;
}

static void t_cli_tls(void) {
  if (!find_cli()) {
    printf("skipped: no dlock command next to this test (%s)\n", g_cli);
    return;
  }
  th_server_t *s = tls_server("server", true);
  char url[128], plain_url[128], err[4096];
  snprintf(url, sizeof url, "rediss://127.0.0.1:%d", s->port2);
  snprintf(plain_url, sizeof plain_url, "redis://localhost:%d", s->port2);
  char *ca = strdup(cert("ca.crt")), *crt = strdup(cert("client.crt")),
       *key = strdup(cert("client.key")), *oca = strdup(cert("otherca.crt"));
  /* the command runs while it holds the lock: the key exists then */
  char check_cmd[256];
  snprintf(check_cmd, sizeof check_cmd,
           "test \"$DLOCK_NAME\" = cli-tls && test -n \"$DLOCK_TOKEN\"");
  {
    char *argv[] = {NULL,  "-u",    url,    "--cacert", ca,       "--cert",
                    crt,   "--key", key,    "cli-tls",  "-c",     check_cmd,
                    NULL};
    CHECK_INT(run_cli(argv, err, sizeof err), ==, 0);
  }
  {
    /* --tls makes redis:// speak TLS; --sni names the host to verify */
    char *argv[] = {NULL,  "--tls", "-u",    plain_url, "--cacert", ca,
                    "--cert", crt,  "--key", key,       "--sni",    "localhost",
                    "cli-tls", "true", NULL};
    CHECK_INT(run_cli(argv, err, sizeof err), ==, 0);
  }
  {
    /* the wrong CA: exit 69, one line */
    char *argv[] = {NULL,  "-u",    url, "--cacert", oca, "--cert",
                    crt,   "--key", key, "cli-tls",  "true", NULL};
    CHECK_INT(run_cli(argv, err, sizeof err), ==, 69);
    CHECKF(strstr(err, "certificate verify failed"), "stderr: %s", err);
    CHECKF(strchr(err, '\n') == err + strlen(err) - 1, "not one line: %s",
           err);
  }
  {
    /* --insecure accepts it */
    char *argv[] = {NULL,  "-u",    url, "--cacert",  oca, "--insecure",
                    "--cert", crt, "--key", key, "cli-tls", "true", NULL};
    CHECK_INT(run_cli(argv, err, sizeof err), ==, 0);
  }
  {
    /* no client certificate */
    char *argv[] = {NULL, "-u", url, "--cacert", ca, "cli-tls", "true", NULL};
    CHECK_INT(run_cli(argv, err, sizeof err), ==, 69);
    CHECKF(strstr(err, "client certificate"), "stderr: %s", err);
  }
  {
    /* --cert without --key */
    char *argv[] = {NULL, "-u", url, "--cert", crt, "cli-tls", "true", NULL};
    CHECK_INT(run_cli(argv, err, sizeof err), ==, 64);
  }
  {
    /* --status over TLS */
    char *argv[] = {NULL,  "-u",  url,      "--cacert", ca,
                    "--cert", crt, "--key", key,        "--status",
                    "cli-tls", NULL};
    CHECK_INT(run_cli(argv, err, sizeof err), ==, 1); /* free */
  }
  free(ca);
  free(crt);
  free(key);
  free(oca);
  th_server_stop(s);
}

static const check_case_t cases[] = {
    {"verified_locks_work", t_verified_locks_work},
    {"every_kind_over_tls", t_every_kind_over_tls},
    {"tls_switch_on_redis_url", t_tls_switch_on_redis_url},
    {"wrong_ca", t_wrong_ca},
    {"wrong_host_name", t_wrong_host_name},
    {"insecure_switch", t_insecure_switch},
    {"mutual_tls", t_mutual_tls},
    {"unreadable_files", t_unreadable_files},
    {"protocol_mismatch", t_protocol_mismatch},
    {"fork_child_frees", t_fork_child_frees},
    {"cli_tls", t_cli_tls},
};

CHECK_MAIN(cases)
