/*
 * zk.c - start, stop, kill, restart and pause private ZooKeeper members.
 *
 * Design note
 * - An ensemble is one mkdtemp directory `dlock-zk-XXXXXX` with a
 *   directory per member (m1, m2, m3: zoo.cfg, data/myid, zk.log). A member
 *   is a child process `java ... QuorumPeerMain <dir>/zoo.cfg` with a small
 *   heap and the client JIT only (fast start on a loaded machine); its
 *   stdout and stderr (slf4j-simple's log) go to zk.log.
 * - Ports: 3 per member (client, peer, election), each found by binding
 *   port 0 and checked distinct; if a member fails to bind (another process
 *   took the port meanwhile) the whole start is retried with new ports, at
 *   most 3 times.
 * - Readiness is a condition: the 4lw `srvr` command on the client port
 *   answers with a "Mode:" line (a member outside a quorum answers "not
 *   currently serving"), polled every 50 ms up to a deadline, watching for
 *   an early exit of the JVM on every round.
 * - Between fork and exec the child makes only async-signal-safe calls:
 *   signal mask and dispositions reset, its own process group,
 *   PR_SET_PDEATHSIG(SIGKILL) so no JVM outlives the test, stdio
 *   redirected, every other descriptor closed.
 * - Cleanup: a registry of live ensembles (g_mu). atexit() stops them in
 *   the process that started them (a forked child's exit is harmless); a
 *   SIGINT/SIGTERM/SIGHUP handler SIGKILLs the member pids it can read
 *   (plain volatile slots) and chains to the handler it replaced, or
 *   re-raises. Members are stopped with SIGKILL (+SIGCONT for a paused
 *   one): the data is disposable and a JVM's orderly shutdown is slow.
 * - Locks: g_mu guards the registry only, never held across a wait.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "zk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define ZK_MAX_MEMBERS 3
#define ZK_MAX_ENSEMBLES 8
#define ZK_START_MS 90000 /* three JVMs on a busy 2-core machine */
#define ZK_UP_MS 60000
#define ZK_REAP_MS 5000

typedef struct zk_member {
  volatile pid_t pid; /* 0 while down */
  int client, peer, election;
  char dir[300];
} zk_member;

struct th_zk {
  int n;
  zk_member m[ZK_MAX_MEMBERS];
  char dir[256];
  char url[256];
};

/* ------------------------------------------------------------- registry */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static th_zk_t *g_live[ZK_MAX_ENSEMBLES]; /* under g_mu; read by the handler */
static pid_t g_owner;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static struct sigaction g_old[3];

static void zk_atexit(void) {
  if (getpid() != g_owner)
    return;
  for (;;) {
    th_zk_t *z = NULL;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < ZK_MAX_ENSEMBLES && !z; i++)
      z = g_live[i];
    pthread_mutex_unlock(&g_mu);
    if (!z)
      break;
    th_zk_stop(z);
  }
}

static void zk_on_signal(int sig) {
  if (getpid() == g_owner) {
    for (int e = 0; e < ZK_MAX_ENSEMBLES; e++) {
      th_zk_t *z = g_live[e];
      for (int i = 0; z && i < z->n; i++) {
        pid_t p = z->m[i].pid;
        if (p > 0) {
          kill(p, SIGKILL);
          waitpid(p, NULL, 0);
        }
      }
    }
  }
  th_signal_pass_on(sig, g_old);
}

static void zk_init_once(void) {
  g_owner = getpid();
  atexit(zk_atexit);
  th_signals_install(zk_on_signal, g_old);
}

static void reg_add(th_zk_t *z) {
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < ZK_MAX_ENSEMBLES; i++)
    if (!g_live[i]) {
      g_live[i] = z;
      break;
    }
  pthread_mutex_unlock(&g_mu);
}

static void reg_remove(th_zk_t *z) {
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < ZK_MAX_ENSEMBLES; i++)
    if (g_live[i] == z)
      g_live[i] = NULL;
  pthread_mutex_unlock(&g_mu);
}

/* ------------------------------------------------------------- helpers */

static const char *java_path(void) {
  const char *j = getenv("TH_JAVA");
  if (j && *j)
    return j;
  if (access("/usr/bin/java", X_OK) == 0)
    return "/usr/bin/java";
  return "java";
}

static const char *class_path(void) {
  const char *cp = getenv("TH_ZK_CLASSPATH");
  if (cp && *cp)
    return cp;
  if (access("/usr/share/java/slf4j-simple.jar", R_OK) == 0)
    return "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar";
  return "/usr/share/java/zookeeper.jar";
}

static void print_tail(const zk_member *m) {
  char path[400];
  snprintf(path, sizeof path, "%s/zk.log", m->dir);
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  static char buf[8192];
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  long from = size > (long)sizeof buf - 1 ? size - (long)sizeof buf + 1 : 0;
  fseek(f, from, SEEK_SET);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  fprintf(stderr, "---- tail of %s ----\n%s\n----\n", path, buf);
}

/* Sends a 4lw command to 127.0.0.1:port and reads the answer (at most
 * out_size - 1 bytes, within 2 s). Bytes read, or -1. */
static int four_letter(int port, const char *cmd, char *out, size_t out_size) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return -1;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons((uint16_t)port);
  int64_t deadline = th_now_ms() + 2000;
  size_t got = 0;
  if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 &&
      errno != EINPROGRESS)
    goto fail;
  struct pollfd p = {.fd = fd, .events = POLLOUT};
  if (poll(&p, 1, 2000) != 1)
    goto fail;
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0)
    goto fail;
  if (send(fd, cmd, strlen(cmd), MSG_NOSIGNAL) != (ssize_t)strlen(cmd))
    goto fail;
  while (got + 1 < out_size) {
    int64_t left = deadline - th_now_ms();
    if (left <= 0)
      break;
    p = (struct pollfd){.fd = fd, .events = POLLIN};
    if (poll(&p, 1, (int)left) != 1)
      break;
    ssize_t r = recv(fd, out + got, out_size - 1 - got, 0);
    if (r <= 0)
      break;
    got += (size_t)r;
  }
  out[got] = '\0';
  close(fd);
  return (int)got;
fail:
  close(fd);
  return -1;
}

/* The member's mode ("leader", "follower", "standalone"), or "" when it
 * does not serve. */
static void member_mode(const zk_member *m, char *mode, size_t size) {
  char buf[2048];
  mode[0] = '\0';
  if (m->pid <= 0 || four_letter(m->client, "srvr", buf, sizeof buf) <= 0)
    return;
  const char *at = strstr(buf, "Mode: ");
  if (!at)
    return;
  at += 6;
  size_t n = strcspn(at, "\r\n");
  if (n >= size)
    n = size - 1;
  memcpy(mode, at, n);
  mode[n] = '\0';
}

static bool reaped(zk_member *m) {
  if (m->pid <= 0)
    return true;
  int st;
  pid_t r = waitpid(m->pid, &st, WNOHANG);
  if (r == m->pid || (r < 0 && errno == ECHILD)) {
    m->pid = 0;
    return true;
  }
  return false;
}

static int write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "zk harness: %s: %s\n", path, strerror(errno));
    return -1;
  }
  fputs(text, f);
  return fclose(f) == 0 ? 0 : -1;
}

static int write_member(th_zk_t *z, int i) {
  zk_member *m = &z->m[i];
  char path[420], text[2048];
  snprintf(path, sizeof path, "%s/data", m->dir);
  if (mkdir(m->dir, 0700) != 0 && errno != EEXIST)
    return -1;
  if (mkdir(path, 0700) != 0 && errno != EEXIST)
    return -1;
  snprintf(path, sizeof path, "%s/data/myid", m->dir);
  snprintf(text, sizeof text, "%d\n", i + 1);
  if (write_file(path, text))
    return -1;
  int n = snprintf(text, sizeof text,
                   "tickTime=200\n"
                   "initLimit=50\n"
                   "syncLimit=25\n"
                   "dataDir=%s/data\n"
                   "clientPort=%d\n"
                   "clientPortAddress=127.0.0.1\n"
                   "admin.enableServer=false\n"
                   "4lw.commands.whitelist=*\n"
                   "minSessionTimeout=400\n"
                   "maxSessionTimeout=120000\n"
                   "forceSync=no\n"
                   "autopurge.purgeInterval=0\n",
                   m->dir, m->client);
  for (int k = 0; z->n > 1 && k < z->n; k++)
    n += snprintf(text + n, sizeof text - (size_t)n,
                  "server.%d=127.0.0.1:%d:%d\n", k + 1, z->m[k].peer,
                  z->m[k].election);
  snprintf(path, sizeof path, "%s/zoo.cfg", m->dir);
  return write_file(path, text);
}

static int spawn(zk_member *m) {
  char conf[420], log[420];
  snprintf(conf, sizeof conf, "%s/zoo.cfg", m->dir);
  snprintf(log, sizeof log, "%s/zk.log", m->dir);
  const char *java = java_path();
  char *argv[] = {(char *)java,
                  "-Xmx128m",
                  "-Xms16m",
                  "-Xss512k",
                  "-XX:+UseSerialGC",
                  "-XX:TieredStopAtLevel=1",
                  "-XX:-UsePerfData",
                  "-Djava.awt.headless=true",
                  "-Dzookeeper.admin.enableServer=false",
                  "-Dorg.slf4j.simpleLogger.showDateTime=true",
                  "-cp",
                  (char *)class_path(),
                  "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                  conf,
                  NULL};
  pid_t pid = th_spawn(java, argv, log, "zk harness");
  if (pid < 0)
    return -1;
  m->pid = pid;
  return 0;
}

static void kill_member(zk_member *m) {
  pid_t pid = m->pid;
  if (pid <= 0)
    return;
  kill(pid, SIGKILL);
  kill(pid, SIGCONT);
  int64_t deadline = th_now_ms() + ZK_REAP_MS;
  while (!reaped(m) && th_now_ms() < deadline)
    th_sleep_ms(5);
  if (m->pid > 0) {
    fprintf(stderr, "zk harness: member %d did not die\n", (int)pid);
    m->pid = 0;
  }
}

/* Waits until every member in `which` (bit per member) serves, or one
 * exits, or the deadline. */
static bool wait_serving(th_zk_t *z, unsigned which, int64_t ms) {
  int64_t deadline = th_now_ms() + ms;
  for (;;) {
    bool all = true;
    for (int i = 0; i < z->n; i++) {
      if (!(which & (1u << i)))
        continue;
      if (reaped(&z->m[i])) {
        fprintf(stderr, "zk harness: member %d exited early\n", i);
        return false;
      }
      char mode[32];
      member_mode(&z->m[i], mode, sizeof mode);
      if (!mode[0])
        all = false;
    }
    if (all)
      return true;
    if (th_now_ms() >= deadline) {
      fprintf(stderr, "zk harness: members not serving after %lld ms\n",
              (long long)ms);
      return false;
    }
    th_sleep_ms(50);
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

static bool pick_ports(th_zk_t *z) {
  int ports[3 * ZK_MAX_MEMBERS];
  int want = 3 * z->n;
  for (int k = 0; k < want; k++) {
    int p = -1;
    for (int tries = 0; tries < 20 && p < 0; tries++) {
      p = th_free_port();
      for (int j = 0; p > 0 && j < k; j++)
        if (ports[j] == p)
          p = -1;
    }
    if (p <= 0)
      return false;
    ports[k] = p;
  }
  for (int i = 0; i < z->n; i++) {
    z->m[i].client = ports[3 * i];
    z->m[i].peer = ports[3 * i + 1];
    z->m[i].election = ports[3 * i + 2];
  }
  return true;
}

/* ------------------------------------------------------------------ API */

th_zk_t *th_zk_start(int members) {
  if (members != 1 && members != 3) {
    fprintf(stderr, "zk harness: members must be 1 or 3, not %d\n", members);
    return NULL;
  }
  pthread_once(&g_once, zk_init_once);
  th_zk_t *z = calloc(1, sizeof *z);
  if (!z)
    return NULL;
  z->n = members;
  const char *tmp = getenv("TMPDIR");
  snprintf(z->dir, sizeof z->dir, "%s/dlock-zk-XXXXXX",
           tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(z->dir)) {
    fprintf(stderr, "zk harness: mkdtemp %s: %s\n", z->dir, strerror(errno));
    free(z);
    return NULL;
  }
  reg_add(z);
  for (int i = 0; i < z->n; i++)
    snprintf(z->m[i].dir, sizeof z->m[i].dir, "%s/m%d", z->dir, i + 1);
  for (int attempt = 0; attempt < 3; attempt++) {
    bool ok = pick_ports(z);
    for (int i = 0; ok && i < z->n; i++)
      ok = write_member(z, i) == 0;
    for (int i = 0; ok && i < z->n; i++)
      ok = spawn(&z->m[i]) == 0;
    if (ok && wait_serving(z, (1u << z->n) - 1, ZK_START_MS)) {
      int n = snprintf(z->url, sizeof z->url, "zookeeper://");
      for (int i = 0; i < z->n; i++)
        n += snprintf(z->url + n, sizeof z->url - (size_t)n, "%s127.0.0.1:%d",
                      i ? "," : "", z->m[i].client);
      return z;
    }
    bool bind_failed = false;
    for (int i = 0; i < z->n; i++) {
      kill_member(&z->m[i]);
      char log[420], line[1024];
      snprintf(log, sizeof log, "%s/zk.log", z->m[i].dir);
      FILE *f = fopen(log, "r");
      while (f && fgets(line, sizeof line, f))
        if (strstr(line, "BindException") || strstr(line, "Address already"))
          bind_failed = true;
      if (f)
        fclose(f);
      if (!bind_failed || attempt == 2)
        print_tail(&z->m[i]);
    }
    if (!bind_failed)
      break;
    for (int i = 0; i < z->n; i++) /* fresh logs and data for the retry */
      nftw(z->m[i].dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  }
  fprintf(stderr, "zk harness: could not start %d member(s) in %s\n",
          members, z->dir);
  th_zk_stop(z);
  return NULL;
}

const char *th_zk_url(const th_zk_t *z) { return z ? z->url : ""; }

int th_zk_members(const th_zk_t *z) { return z ? z->n : 0; }

int th_zk_port(const th_zk_t *z, int i) {
  return z && i >= 0 && i < z->n ? z->m[i].client : -1;
}

int th_zk_leader(th_zk_t *z) {
  for (int i = 0; z && i < z->n; i++) {
    char mode[32];
    member_mode(&z->m[i], mode, sizeof mode);
    if (strcmp(mode, "leader") == 0 || strcmp(mode, "standalone") == 0)
      return i;
  }
  return -1;
}

int th_zk_kill9(th_zk_t *z, int i) {
  if (!z || i < 0 || i >= z->n || z->m[i].pid <= 0)
    return -1;
  kill_member(&z->m[i]);
  return 0;
}

int th_zk_up(th_zk_t *z, int i) {
  if (!z || i < 0 || i >= z->n)
    return -1;
  if (z->m[i].pid > 0 && !reaped(&z->m[i]))
    return -1; /* still running */
  if (spawn(&z->m[i]) != 0)
    return -1;
  if (!wait_serving(z, 1u << i, ZK_UP_MS)) {
    print_tail(&z->m[i]);
    return -1;
  }
  return 0;
}

/* Whether every thread of process pid is stopped (state 'T'). */
static bool all_stopped(pid_t pid) {
  char dir[64];
  snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
  DIR *d = opendir(dir);
  if (!d)
    return false;
  bool all = true;
  struct dirent *e;
  while (all && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    char path[384], buf[512];
    snprintf(path, sizeof path, "%s/%s/stat", dir, e->d_name);
    FILE *f = fopen(path, "r");
    if (!f)
      continue; /* a thread that ended */
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *paren = strrchr(buf, ')'); /* "pid (comm) S ..." */
    if (!paren || paren[1] != ' ' || paren[2] != 'T')
      all = false;
  }
  closedir(d);
  return all;
}

int th_zk_pause(th_zk_t *z, int i) {
  if (!z || i < 0 || i >= z->n || z->m[i].pid <= 0)
    return -1;
  if (kill(z->m[i].pid, SIGSTOP) != 0)
    return -1;
  for (int tries = 0; tries < 1000; tries++) { /* 10 s at most */
    if (all_stopped(z->m[i].pid))
      return 0;
    th_sleep_ms(10);
  }
  return -1;
}

int th_zk_resume(th_zk_t *z, int i) {
  if (!z || i < 0 || i >= z->n || z->m[i].pid <= 0)
    return -1;
  return kill(z->m[i].pid, SIGCONT) == 0 ? 0 : -1;
}

void th_zk_stop(th_zk_t *z) {
  if (!z)
    return;
  if (getpid() == g_owner) {
    for (int i = 0; i < z->n; i++)
      kill_member(&z->m[i]);
    if (z->dir[0] == '/')
      nftw(z->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  }
  reg_remove(z);
  free(z);
}
