/*
 * etcd.c - start, kill, restart, pause and stop private etcd clusters.
 *
 * Design note
 * - A member is a child process running /usr/bin/etcd (or $TH_ETCD_SERVER)
 *   with every address on 127.0.0.1: a client port and a peer port found
 *   by binding port 0, a data dir <root>/mN.etcd and a log <root>/mN.log
 *   in the cluster's mkdtemp root. A restart (th_etcd_up) runs the same
 *   command line: with its data dir present, etcd rejoins as the member it
 *   was.
 * - TLS (th_etcd_start_tls): the client URLs are https:// with the given
 *   certificate and key (and, for mutual TLS, --trusted-ca-file and
 *   --client-cert-auth: etcd 3.4 asks every client for a certificate
 *   once it has a trusted CA file); the
 *   harness's own requests use the CA and, for mutual TLS, a client
 *   certificate. Peers stay plain http (all on loopback).
 * - Readiness is a condition: GET /health answers {"health":"true"} (the
 *   member has a leader), polled every 20 ms within a bound, watching for
 *   an early exit of the child. If a port was taken meanwhile the member
 *   exits at once and the whole start is retried with new ports.
 * - The leader: POST /v3/maintenance/status to each running member; the
 *   member whose own id is the leader id it reports.
 * - Between fork and exec only async-signal-safe calls; PR_SET_PDEATHSIG
 *   kills a member when the test dies; the member has its own process
 *   group (a Ctrl-C reaches the test, which stops it).
 * - Cleanup: a registry of live pids. atexit() stops every cluster (only
 *   in the process that started it); SIGINT/SIGTERM/SIGHUP SIGKILL and reap
 *   the members (async-signal-safe calls), then chain to the handler that
 *   was there before (harness.c's) or re-raise.
 * - Locks: g_mu guards the registry; the signal handler reads plain pids.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "etcd.h"
#include "harness.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define TH_ETCD_MAX 3
#define TH_ETCD_READY_MS 20000
#define TH_ETCD_REG 24

typedef struct th_member {
  pid_t pid; /* 0 while down */
  int client_port, peer_port;
} th_member_t;

struct th_etcd {
  int n;
  char root[256];
  char url[256];
  char endpoints[256];
  char cluster[512]; /* --initial-cluster */
  char token[64];
  th_member_t m[TH_ETCD_MAX];
  bool tls; /* client ports speak HTTPS (th_etcd_start_tls) */
  char cert[256], key[256], ca[256];
  bool client_cert_auth;
  char client_cert[256], client_key[256]; /* the harness's own requests */
};

/* ------------------------------------------------------------ registry */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static volatile pid_t g_pids[TH_ETCD_REG];
static th_etcd_t *g_clusters[8];
static pid_t g_owner;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static struct sigaction g_old[3];

static void pid_add(pid_t p) {
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < TH_ETCD_REG; i++)
    if (g_pids[i] == 0) {
      g_pids[i] = p;
      break;
    }
  pthread_mutex_unlock(&g_mu);
}

static void pid_remove(pid_t p) {
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < TH_ETCD_REG; i++)
    if (g_pids[i] == p)
      g_pids[i] = 0;
  pthread_mutex_unlock(&g_mu);
}

static void on_signal(int sig) {
  if (getpid() == g_owner) {
    for (int i = 0; i < TH_ETCD_REG; i++) {
      pid_t p = g_pids[i];
      if (p > 0) {
        kill(p, SIGKILL);
        waitpid(p, NULL, 0);
      }
    }
  }
  th_signal_pass_on(sig, g_old);
}

static void stop_all(void) {
  if (getpid() != g_owner)
    return;
  for (int i = 0; i < 8; i++) {
    pthread_mutex_lock(&g_mu);
    th_etcd_t *e = g_clusters[i];
    pthread_mutex_unlock(&g_mu);
    if (e)
      th_etcd_stop(e);
  }
}

static void init_once(void) {
  g_owner = getpid();
  curl_global_init(CURL_GLOBAL_DEFAULT);
  atexit(stop_all);
  th_signals_install(on_signal, g_old);
}

/* ---------------------------------------------------------------- http */

typedef struct buf {
  char *p;
  size_t n;
} buf_t;

static size_t on_body(char *data, size_t size, size_t nmemb, void *ud) {
  buf_t *b = ud;
  size_t n = size * nmemb;
  char *p = realloc(b->p, b->n + n + 1);
  if (!p)
    return 0;
  memcpy(p + b->n, data, n);
  b->n += n;
  p[b->n] = '\0';
  b->p = p;
  return n;
}

/* GET (body NULL) or POST body to http://127.0.0.1:port/path; the parsed
 * JSON reply or NULL. */
static json_object *http_json(const th_etcd_t *e, int port, const char *path,
                              const char *body, long timeout_ms) {
  CURL *h = curl_easy_init();
  if (!h)
    return NULL;
  char url[128];
  snprintf(url, sizeof url, "%s://127.0.0.1:%d%s", e->tls ? "https" : "http",
           port, path);
  if (e->tls) {
    curl_easy_setopt(h, CURLOPT_CAINFO, e->ca);
    if (e->client_cert_auth) {
      curl_easy_setopt(h, CURLOPT_SSLCERT, e->client_cert);
      curl_easy_setopt(h, CURLOPT_SSLKEY, e->client_key);
    }
  }
  buf_t b = {0};
  curl_easy_setopt(h, CURLOPT_URL, url);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
  if (body)
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
  CURLcode rc = curl_easy_perform(h);
  curl_easy_cleanup(h);
  json_object *j = NULL;
  if (rc == CURLE_OK && b.p)
    j = json_tokener_parse(b.p);
  free(b.p);
  return j;
}

static bool member_healthy(const th_etcd_t *e, int i) {
  json_object *j = http_json(e, e->m[i].client_port, "/health", NULL, 1000);
  json_object *v = NULL;
  bool ok = j && json_object_object_get_ex(j, "health", &v) &&
            strcmp(json_object_get_string(v), "true") == 0;
  json_object_put(j);
  return ok;
}

/* ------------------------------------------------------------ members */

static const char *etcd_exe(void) {
  const char *env = getenv("TH_ETCD_SERVER");
  return env && *env ? env : "/usr/bin/etcd";
}

static int spawn(th_etcd_t *e, int i) {
  th_member_t *m = &e->m[i];
  char name[16], data[320], log[320], lc[64], lp[64];
  snprintf(name, sizeof name, "m%d", i);
  snprintf(data, sizeof data, "%s/m%d.etcd", e->root, i);
  snprintf(log, sizeof log, "%s/m%d.log", e->root, i);
  snprintf(lc, sizeof lc, "%s://127.0.0.1:%d", e->tls ? "https" : "http",
           m->client_port);
  snprintf(lp, sizeof lp, "http://127.0.0.1:%d", m->peer_port);
  const char *exe = etcd_exe();
  char *argv[] = {(char *)exe,
                  "--name", name,
                  "--data-dir", data,
                  "--listen-client-urls", lc,
                  "--advertise-client-urls", lc,
                  "--listen-peer-urls", lp,
                  "--initial-advertise-peer-urls", lp,
                  "--initial-cluster", e->cluster,
                  "--initial-cluster-state", "new",
                  "--initial-cluster-token", e->token,
                  "--heartbeat-interval", "50",
                  "--election-timeout", "500",
                  "--snapshot-count", "10000",
                  "--logger", "zap",
                  "--log-outputs", "stderr",
                  NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  if (e->tls) {
    size_t a = 0;
    while (argv[a])
      a++;
    argv[a++] = "--cert-file";
    argv[a++] = e->cert;
    argv[a++] = "--key-file";
    argv[a++] = e->key;
    if (e->client_cert_auth) { /* etcd 3.4: a trusted CA file asks
                                  * clients for certificates */
      argv[a++] = "--trusted-ca-file";
      argv[a++] = e->ca;
      argv[a++] = "--client-cert-auth";
    }
  }
  pid_t pid = th_spawn(exe, argv, log, "etcd harness");
  if (pid < 0)
    return -1;
  m->pid = pid;
  pid_add(pid);
  return 0;
}

static void reap(th_etcd_t *e, int i, int sig) {
  th_member_t *m = &e->m[i];
  if (m->pid <= 0)
    return;
  kill(m->pid, SIGCONT);
  kill(m->pid, sig);
  int64_t until = th_now_ms() + 5000;
  for (;;) {
    pid_t r = waitpid(m->pid, NULL, WNOHANG);
    if (r == m->pid || (r < 0 && errno != EINTR))
      break;
    if (th_now_ms() >= until) {
      kill(m->pid, SIGKILL);
      waitpid(m->pid, NULL, 0);
      break;
    }
    th_sleep_ms(10);
  }
  pid_remove(m->pid);
  m->pid = 0;
}

static bool exited(th_etcd_t *e, int i) {
  th_member_t *m = &e->m[i];
  if (m->pid <= 0)
    return true;
  int st;
  if (waitpid(m->pid, &st, WNOHANG) == m->pid) {
    pid_remove(m->pid);
    m->pid = 0;
    return true;
  }
  return false;
}

static void print_log(const th_etcd_t *e, int i) {
  char path[320];
  snprintf(path, sizeof path, "%s/m%d.log", e->root, i);
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  char b[3000];
  if (fseek(f, -(long)(sizeof b - 1), SEEK_END) != 0)
    rewind(f);
  size_t n = fread(b, 1, sizeof b - 1, f);
  b[n] = '\0';
  fclose(f);
  fprintf(stderr, "etcd harness: --- %s ---\n%s\n--- end ---\n", path, b);
}

/* Waits until the members in [from, to) serve; false if one exited or the
 * bound passed. */
static bool wait_serving(th_etcd_t *e, int from, int to, bool quiet) {
  int64_t until = th_now_ms() + TH_ETCD_READY_MS;
  for (;;) {
    bool all = true;
    for (int i = from; i < to; i++) {
      if (exited(e, i)) {
        if (!quiet) {
          fprintf(stderr, "etcd harness: member %d exited early\n", i);
          print_log(e, i);
        }
        return false;
      }
      if (!member_healthy(e, i))
        all = false;
    }
    if (all)
      return true;
    if (th_now_ms() >= until) {
      fprintf(stderr, "etcd harness: cluster not serving after %d ms\n",
              TH_ETCD_READY_MS);
      for (int i = from; i < to; i++)
        print_log(e, i);
      return false;
    }
    th_sleep_ms(20);
  }
}

static int rm_entry(const char *path, const struct stat *sb, int flag,
                    struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

/* ------------------------------------------------------------- public */

static bool start_once(th_etcd_t *e) {
  size_t u = 0, p = 0, c = 0;
  u += (size_t)snprintf(e->url + u, sizeof e->url - u, "%s://",
                        e->tls ? "etcds" : "etcd");
  for (int i = 0; i < e->n; i++) {
    e->m[i].client_port = th_free_port();
    e->m[i].peer_port = th_free_port();
    if (e->m[i].client_port <= 0 || e->m[i].peer_port <= 0 ||
        e->m[i].client_port == e->m[i].peer_port)
      return false;
    u += (size_t)snprintf(e->url + u, sizeof e->url - u, "%s127.0.0.1:%d",
                          i ? "," : "", e->m[i].client_port);
    p += (size_t)snprintf(e->endpoints + p, sizeof e->endpoints - p,
                          "%s%s://127.0.0.1:%d", i ? "," : "",
                          e->tls ? "https" : "http", e->m[i].client_port);
    c += (size_t)snprintf(e->cluster + c, sizeof e->cluster - c,
                          "%sm%d=http://127.0.0.1:%d", i ? "," : "", i,
                          e->m[i].peer_port);
  }
  for (int i = 0; i < e->n; i++) {
    char data[320];
    snprintf(data, sizeof data, "%s/m%d.etcd", e->root, i);
    nftw(data, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  }
  for (int i = 0; i < e->n; i++)
    if (spawn(e, i) != 0)
      return false;
  return wait_serving(e, 0, e->n, true);
}

th_etcd_t *th_etcd_start(int members) {
  return th_etcd_start_tls(members, NULL);
}

th_etcd_t *th_etcd_start_tls(int members, const th_etcd_tls_t *tls) {
  pthread_once(&g_once, init_once);
  if (members != 1 && members != 3) {
    fprintf(stderr, "etcd harness: members must be 1 or 3, not %d\n",
            members);
    return NULL;
  }
  if (access(etcd_exe(), X_OK) != 0) {
    fprintf(stderr, "etcd harness: %s not found (install etcd-server, or "
                    "set TH_ETCD_SERVER)\n",
            etcd_exe());
    return NULL;
  }
  th_etcd_t *e = calloc(1, sizeof *e);
  if (!e)
    return NULL;
  e->n = members;
  if (tls) {
    e->tls = true;
    snprintf(e->cert, sizeof e->cert, "%s", tls->cert_file);
    snprintf(e->key, sizeof e->key, "%s", tls->key_file);
    snprintf(e->ca, sizeof e->ca, "%s", tls->ca_file);
    e->client_cert_auth = tls->client_cert_auth;
    if (tls->client_cert_auth) {
      snprintf(e->client_cert, sizeof e->client_cert, "%s",
               tls->client_cert_file);
      snprintf(e->client_key, sizeof e->client_key, "%s",
               tls->client_key_file);
    }
  }
  snprintf(e->root, sizeof e->root, "/tmp/dlock-etcd-XXXXXX");
  if (!mkdtemp(e->root)) {
    fprintf(stderr, "etcd harness: mkdtemp: %s\n", strerror(errno));
    free(e);
    return NULL;
  }
  snprintf(e->token, sizeof e->token, "dlock-test-%d-%s", (int)getpid(),
           strrchr(e->root, '-') + 1);
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < 8; i++)
    if (!g_clusters[i]) {
      g_clusters[i] = e;
      break;
    }
  pthread_mutex_unlock(&g_mu);
  for (int attempt = 0; attempt < 3; attempt++) {
    if (start_once(e))
      return e;
    for (int i = 0; i < e->n; i++)
      reap(e, i, SIGKILL);
    fprintf(stderr, "etcd harness: start attempt %d failed\n", attempt + 1);
  }
  for (int i = 0; i < e->n; i++)
    print_log(e, i);
  th_etcd_stop(e);
  return NULL;
}

const char *th_etcd_url(const th_etcd_t *e) { return e->url; }
const char *th_etcd_endpoints(const th_etcd_t *e) { return e->endpoints; }
int th_etcd_members(const th_etcd_t *e) { return e->n; }
int th_etcd_client_port(const th_etcd_t *e, int i) {
  return i >= 0 && i < e->n ? e->m[i].client_port : -1;
}

static bool json_u64(json_object *o, const char *k1, const char *k2,
                     unsigned long long *out) {
  json_object *v = NULL;
  if (!json_object_object_get_ex(o, k1, &v))
    return false;
  if (k2 && !json_object_object_get_ex(v, k2, &v))
    return false;
  const char *s = json_object_get_string(v);
  if (!s)
    return false;
  *out = strtoull(s, NULL, 10);
  return true;
}

int th_etcd_leader(th_etcd_t *e) {
  for (int i = 0; i < e->n; i++) {
    if (e->m[i].pid <= 0)
      continue;
    json_object *j =
        http_json(e, e->m[i].client_port, "/v3/maintenance/status", "{}", 1000);
    unsigned long long self = 0, leader = 0;
    bool ok = j && json_u64(j, "header", "member_id", &self) &&
              json_u64(j, "leader", NULL, &leader);
    json_object_put(j);
    if (!ok || leader == 0)
      continue;
    if (self == leader)
      return i;
  }
  return -1;
}

int th_etcd_kill9(th_etcd_t *e, int i) {
  if (!e || i < 0 || i >= e->n || e->m[i].pid <= 0)
    return -1;
  reap(e, i, SIGKILL);
  return 0;
}

int th_etcd_up(th_etcd_t *e, int i) {
  if (!e || i < 0 || i >= e->n)
    return -1;
  if (e->m[i].pid > 0)
    return 0;
  if (spawn(e, i) != 0)
    return -1;
  return wait_serving(e, i, i + 1, false) ? 0 : -1;
}

int th_etcd_pause(th_etcd_t *e, int i) {
  if (!e || i < 0 || i >= e->n || e->m[i].pid <= 0)
    return -1;
  return kill(e->m[i].pid, SIGSTOP) == 0 ? 0 : -1;
}

int th_etcd_resume(th_etcd_t *e, int i) {
  if (!e || i < 0 || i >= e->n || e->m[i].pid <= 0)
    return -1;
  return kill(e->m[i].pid, SIGCONT) == 0 ? 0 : -1;
}

void th_etcd_stop(th_etcd_t *e) {
  if (!e)
    return;
  for (int i = 0; i < e->n; i++)
    reap(e, i, SIGTERM);
  nftw(e->root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < 8; i++)
    if (g_clusters[i] == e)
      g_clusters[i] = NULL;
  pthread_mutex_unlock(&g_mu);
  free(e);
}
