/*
 * harness.c - start, stop, restart, pause and talk to private redis-servers.
 *
 * Design note
 * - A server is a child process running `redis-server <dir>/redis.conf`,
 *   bound to 127.0.0.1 on a port found by binding port 0; if another process
 *   grabs the port before redis-server binds it, the start is retried with a
 *   new port. Readiness is a condition: a connect + PING that answers (not
 *   -LOADING), polled every 10 ms for at most 10 s, watching for an early
 *   exit of the child on each round.
 * - Between fork and exec the child makes only async-signal-safe calls
 *   (the test may be multithreaded): it resets its signal mask and a few
 *   dispositions, asks for SIGKILL when its parent thread dies
 *   (PR_SET_PDEATHSIG: no server outlives a crashed or timed-out test),
 *   redirects stdio and closes every other descriptor so it never keeps the
 *   test's sockets open.
 * - Cleanup: a registry of live servers. atexit() stops them (only in the
 *   process that started them, so a forked child's exit() is harmless);
 *   on SIGINT/SIGTERM/SIGHUP the handler SIGKILLs and reaps them and removes
 *   their dirs with async-signal-safe calls only (kill, waitpid, openat,
 *   getdents64, unlinkat), then re-raises. Stopping is SIGTERM (+SIGCONT, in
 * case it was paused), then SIGKILL after a 5 s bound; the pid is always
 * reaped.
 * - The fault proxy (th_proxy_*) is one poll() thread forwarding byte
 *   pairs; the test flips atomic flags (drop replies, blackhole, reset) and
 *   pokes it through a pipe.
 * - Each server dir holds harness.pid (the test's pid); the first start in
 *   a process removes dirs older than a minute whose test is gone (a test
 *   killed by SIGKILL leaves its dir behind).
 * - Locks: g_reg_mu guards the registry (never held across a wait);
 *   th_server_t.mu guards the cached hiredis connection of th_redis_cmd().
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TH_MAX_SERVERS 32
#define TH_READY_MS 10000
#define TH_STOP_MS 5000

/* ------------------------------------------------------------- registry */

static pthread_mutex_t g_reg_mu = PTHREAD_MUTEX_INITIALIZER;
static th_server_t *g_servers[TH_MAX_SERVERS]; /* guarded by g_reg_mu */
/* Read by the signal handler: plain pids, written under g_reg_mu. */
static volatile pid_t g_pids[TH_MAX_SERVERS];
/* Server dirs, for the signal handler (written under g_reg_mu before the
 * slot is used, cleared after). */
static char g_dirs[TH_MAX_SERVERS][256];
static pid_t g_owner_pid;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void th_atexit(void) {
  if (getpid() != g_owner_pid)
    return;
  for (;;) {
    th_server_t *s = NULL;
    pthread_mutex_lock(&g_reg_mu);
    for (int i = 0; i < TH_MAX_SERVERS && !s; i++)
      s = g_servers[i];
    pthread_mutex_unlock(&g_reg_mu);
    if (!s)
      break;
    th_server_stop(s);
  }
}

/* Async-signal-safe removal of a directory tree at most `depth` levels deep
 * (a server dir holds files and appendonlydir/): open, getdents64,
 * unlinkat only. */
struct th_dirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

static void rm_tree_at(int parent, const char *name, int depth) {
  int fd =
      openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    char buf[4096] __attribute__((aligned(8)));
    for (int rounds = 0; rounds < 1000; rounds++) {
      long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
      if (n <= 0)
        break;
      for (long off = 0; off < n;) {
        struct th_dirent64 *d = (struct th_dirent64 *)(buf + off);
        off += d->d_reclen;
        const char *e = d->d_name;
        if (e[0] == '.' && (e[1] == '\0' || (e[1] == '.' && e[2] == '\0')))
          continue;
        if (d->d_type == DT_DIR) {
          if (depth > 0)
            rm_tree_at(fd, e, depth - 1);
        } else {
          unlinkat(fd, e, 0);
        }
      }
    }
    close(fd);
  }
  unlinkat(parent, name, AT_REMOVEDIR);
}

static const int g_fatal_sigs[3] = {SIGINT, SIGTERM, SIGHUP};

void th_signals_install(void (*handler)(int), struct sigaction *old) {
  for (int i = 0; i < 3; i++) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sigaction(g_fatal_sigs[i], &sa, &old[i]);
  }
}

void th_signal_pass_on(int sig, const struct sigaction *old) {
  for (int i = 0; i < 3; i++) {
    if (g_fatal_sigs[i] != sig)
      continue;
    if (old[i].sa_handler != SIG_DFL && old[i].sa_handler != SIG_IGN &&
        !(old[i].sa_flags & SA_SIGINFO)) {
      old[i].sa_handler(sig);
      return;
    }
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

static void th_on_signal(int sig) {
  if (getpid() == g_owner_pid) {
    for (int i = 0; i < TH_MAX_SERVERS; i++) {
      pid_t p = g_pids[i];
      if (p > 0) {
        kill(p, SIGKILL);
        waitpid(p, NULL, 0);
      }
      if (g_dirs[i][0] == '/')
        rm_tree_at(AT_FDCWD, g_dirs[i], 2);
    }
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

static void th_init_once(void) {
  g_owner_pid = getpid();
  atexit(th_atexit);
  const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
    struct sigaction old;
    if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL) {
      struct sigaction sa;
      memset(&sa, 0, sizeof sa);
      sa.sa_handler = th_on_signal;
      sigemptyset(&sa.sa_mask);
      sigaction(sigs[i], &sa, NULL);
    }
  }
}

static int reg_add(th_server_t *s) {
  int rc = -1;
  pthread_mutex_lock(&g_reg_mu);
  for (int i = 0; i < TH_MAX_SERVERS; i++) {
    if (!g_servers[i]) {
      snprintf(g_dirs[i], sizeof g_dirs[i], "%s", s->dir);
      g_servers[i] = s;
      rc = 0;
      break;
    }
  }
  pthread_mutex_unlock(&g_reg_mu);
  return rc;
}

static void reg_remove(th_server_t *s) {
  pthread_mutex_lock(&g_reg_mu);
  for (int i = 0; i < TH_MAX_SERVERS; i++) {
    if (g_servers[i] == s) {
      g_servers[i] = NULL;
      g_pids[i] = 0;
      g_dirs[i][0] = '\0';
    }
  }
  pthread_mutex_unlock(&g_reg_mu);
}

static void reg_set_pid(th_server_t *s, pid_t pid) {
  pthread_mutex_lock(&g_reg_mu);
  for (int i = 0; i < TH_MAX_SERVERS; i++)
    if (g_servers[i] == s)
      g_pids[i] = pid;
  pthread_mutex_unlock(&g_reg_mu);
}

/* ---------------------------------------------------------------- time */

int th_children(pid_t ppid, pid_t *pids, char (*comms)[16], int max) {
  DIR *d = opendir("/proc");
  if (!d)
    return 0;
  int n = 0;
  struct dirent *de;
  while (n < max && (de = readdir(d)) != NULL) {
    if (de->d_name[0] < '1' || de->d_name[0] > '9')
      continue;
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%.20s/stat", de->d_name);
    FILE *f = fopen(path, "r");
    if (!f)
      continue;
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = '\0';
    /* pid (comm) state ppid ... ; comm may hold spaces: use the last ')' */
    char *open = strchr(buf, '('), *close = strrchr(buf, ')');
    int parent = 0;
    if (!open || !close || close < open ||
        sscanf(close + 1, " %*c %d", &parent) != 1 || parent != ppid)
      continue;
    *close = '\0';
    if (comms)
      snprintf(comms[n], sizeof comms[n], "%.15s", open + 1);
    pids[n++] = (pid_t)atoi(de->d_name);
  }
  closedir(d);
  return n;
}

int64_t th_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void th_sleep_ms(int64_t ms) {
  if (ms <= 0)
    return;
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* --------------------------------------------------------------- ports */

int th_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -1;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

/* ------------------------------------------------------------ helpers */

static char *xstrdup(const char *s) {
  if (!s)
    return NULL;
  char *d = strdup(s);
  if (!d) {
    fprintf(stderr, "harness: out of memory\n");
    abort();
  }
  return d;
}

static int find_redis_server(char *out, size_t outsz) {
  const char *env = getenv("TH_REDIS_SERVER");
  if (env && *env) {
    snprintf(out, outsz, "%s", env);
    return access(out, X_OK) == 0 ? 0 : -1;
  }
  const char *path = getenv("PATH");
  if (!path || !*path)
    path = "/usr/local/bin:/usr/bin:/bin";
  const char *p = path;
  while (*p) {
    const char *colon = strchr(p, ':');
    size_t n = colon ? (size_t)(colon - p) : strlen(p);
    if (n > 0 && n + sizeof "/redis-server" < outsz) {
      snprintf(out, outsz, "%.*s/redis-server", (int)n, p);
      if (access(out, X_OK) == 0)
        return 0;
    }
    p += n;
    if (*p == ':')
      p++;
  }
  return -1;
}

static void print_tail(const char *dir, const char *file) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  char buf[2048];
  if (fseek(f, -(long)(sizeof buf - 1), SEEK_END) != 0)
    rewind(f);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  fprintf(stderr, "harness: --- %s ---\n%s\nharness: --- end ---\n", path, buf);
}

static bool file_contains(const char *dir, const char *file,
                          const char *needle) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  FILE *f = fopen(path, "r");
  if (!f)
    return false;
  char line[1024];
  bool found = false;
  for (int i = 0; i < 100000 && fgets(line, sizeof line, f); i++) {
    if (strstr(line, needle)) {
      found = true;
      break;
    }
  }
  fclose(f);
  return found;
}

static int write_conf(th_server_t *s) {
  char path[512];
  snprintf(path, sizeof path, "%s/redis.conf", s->dir);
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, "harness: %s: %s\n", path, strerror(errno));
    return -1;
  }
  fprintf(f,
          "bind 127.0.0.1\n"
          "port %d\n"
          "dir %s\n"
          "daemonize no\n"
          "save \"\"\n"
          "appendonly no\n"
          "logfile %s/redis.log\n"
          "enable-debug-command local\n",
          s->port, s->dir, s->dir);
  for (size_t i = 0; i < s->nconf; i++) {
    /* "${dir}" stands for the server's directory, "${port2}" and
     * "${port3}" for the second and third ports */
    const char *line = s->conf[i], *at;
    while ((at = strstr(line, "${")) != NULL) {
      if (strncmp(at, "${dir}", 6) == 0) {
        fprintf(f, "%.*s%s", (int)(at - line), line, s->dir);
        line = at + 6;
      } else if (strncmp(at, "${port2}", 8) == 0 ||
                 strncmp(at, "${port3}", 8) == 0) {
        fprintf(f, "%.*s%d", (int)(at - line), line,
                at[6] == '2' ? s->port2 : s->port3);
        line = at + 8;
      } else {
        fprintf(f, "%.*s", (int)(at - line) + 2, line);
        line = at + 2;
      }
    }
    fprintf(f, "%s\n", line);
  }
  int rc = fclose(f) == 0 ? 0 : -1;
  return rc;
}

pid_t th_spawn(const char *exe, char *const argv[], const char *log,
               const char *who) {
  int outfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  int nullfd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (outfd < 0 || nullfd < 0) {
    fprintf(stderr, "%s: open %s: %s\n", who, log, strerror(errno));
    if (outfd >= 0)
      close(outfd);
    if (nullfd >= 0)
      close(nullfd);
    return -1;
  }
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "%s: fork: %s\n", who, strerror(errno));
    close(outfd);
    close(nullfd);
    return -1;
  }
  if (pid == 0) {
    /* child: async-signal-safe calls only */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGTERM, &dfl, NULL);
    sigaction(SIGINT, &dfl, NULL);
    sigaction(SIGHUP, &dfl, NULL);
    sigaction(SIGPIPE, &dfl, NULL);
    /* its own process group: a signal to the test's group (Ctrl-C, a
     * timeout) reaches the test, whose handler stops the server and
     * removes its dir; the server never dies first */
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(127);
    dup2(nullfd, 0);
    dup2(outfd, 1);
    dup2(outfd, 2);
    if (close_range(3, ~0U, 0) != 0) {
      long max = sysconf(_SC_OPEN_MAX);
      if (max < 0 || max > 65536)
        max = 65536;
      for (int fd = 3; fd < max; fd++)
        close(fd);
    }
    if (strchr(exe, '/'))
      execv(exe, argv);
    else
      execvp(exe, argv);
    _exit(127);
  }
  close(outfd);
  close(nullfd);
  return pid;
}

/* Forks and execs redis-server; sets s->pid. */
static int spawn(th_server_t *s) {
  char exe[PATH_MAX];
  if (find_redis_server(exe, sizeof exe) != 0) {
    fprintf(stderr, "harness: redis-server not found (PATH or "
                    "TH_REDIS_SERVER)\n");
    return -1;
  }
  char conf[512], out[512];
  snprintf(conf, sizeof conf, "%s/redis.conf", s->dir);
  snprintf(out, sizeof out, "%s/redis.out", s->dir);
  char sentinel[] = "--sentinel";
  char *argv[] = {exe, conf, s->sentinel ? sentinel : NULL, NULL};
  pid_t pid = th_spawn(exe, argv, out, "harness");
  if (pid < 0)
    return -1;
  s->pid = pid;
  reg_set_pid(s, pid);
  return 0;
}

static void drop_ctx(th_server_t *s) {
  pthread_mutex_lock(&s->mu);
  if (s->ctx) {
    redisFree(s->ctx);
    s->ctx = NULL;
  }
  pthread_mutex_unlock(&s->mu);
}

/* Waits for the pid to exit, at most ms; true when reaped. */
static bool reap_within(pid_t pid, int64_t ms) {
  int64_t deadline = th_now_ms() + ms;
  for (;;) {
    int st;
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD))
      return true;
    if (r < 0 && errno != EINTR)
      return true;
    if (th_now_ms() >= deadline)
      return false;
    th_sleep_ms(5);
  }
}

static int stop_process(th_server_t *s, int sig) {
  if (s->pid <= 0)
    return 0;
  pid_t pid = s->pid;
  kill(pid, sig);
  if (sig != SIGKILL)
    kill(pid, SIGCONT);
  if (!reap_within(pid, TH_STOP_MS)) {
    fprintf(stderr, "harness: redis-server %d ignored signal %d, killing\n",
            (int)pid, sig);
    kill(pid, SIGKILL);
    kill(pid, SIGCONT);
    if (!reap_within(pid, TH_STOP_MS)) {
      fprintf(stderr, "harness: redis-server %d did not die\n", (int)pid);
    }
  }
  s->pid = 0;
  reg_set_pid(s, 0);
  drop_ctx(s);
  return 0;
}

static redisContext *connect_ctx(th_server_t *s, int64_t connect_ms,
                                 int64_t io_ms) {
  struct timeval tv = {.tv_sec = connect_ms / 1000,
                       .tv_usec = (connect_ms % 1000) * 1000};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
  if (!c)
    return NULL;
  if (c->err) {
    redisFree(c);
    return NULL;
  }
  struct timeval io = {.tv_sec = io_ms / 1000,
                       .tv_usec = (io_ms % 1000) * 1000};
  redisSetTimeout(c, io);
  return c;
}

/* 1 = ready, 0 = not yet. With auth, a failing AUTH that is not -LOADING
 * still means the server is up. */
static int probe(th_server_t *s) {
  redisContext *c = connect_ctx(s, 200, 1000);
  if (!c)
    return 0;
  int ready = 0;
  redisReply *r = redisCommand(c, "PING");
  if (r) {
    if (r->type == REDIS_REPLY_STATUS)
      ready = 1;
    else if (r->type == REDIS_REPLY_ERROR)
      ready = strncmp(r->str, "LOADING", 7) != 0;
    freeReplyObject(r);
  }
  if (ready && (s->password || s->user)) {
    /* a NOAUTH PING says nothing about LOADING: check after AUTH */
    r = s->user ? redisCommand(c, "AUTH %s %s", s->user,
                               s->password ? s->password : "")
                : redisCommand(c, "AUTH %s", s->password);
    if (!r)
      ready = 0;
    else {
      if (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "LOADING", 7) == 0)
        ready = 0;
      freeReplyObject(r);
    }
    if (ready) {
      r = redisCommand(c, "PING");
      if (!r ||
          (r->type == REDIS_REPLY_ERROR && strncmp(r->str, "LOADING", 7) == 0))
        ready = 0;
      if (r)
        freeReplyObject(r);
    }
  }
  redisFree(c);
  return ready;
}

/* Spawns and waits until ready. 0 ok, 1 early exit (port taken?), -1 other
 * failure. */
static int spawn_and_wait(th_server_t *s) {
  if (write_conf(s) != 0 || spawn(s) != 0)
    return -1;
  int64_t deadline = th_now_ms() + TH_READY_MS;
  for (int round = 0; round < 100000; round++) {
    int st;
    pid_t r = waitpid(s->pid, &st, WNOHANG);
    if (r == s->pid) {
      s->pid = 0;
      reg_set_pid(s, 0);
      return 1;
    }
    if (probe(s))
      return 0;
    if (th_now_ms() >= deadline)
      break;
    th_sleep_ms(10);
  }
  fprintf(stderr, "harness: redis-server on port %d not ready after %d ms\n",
          s->port, TH_READY_MS);
  print_tail(s->dir, "redis.log");
  stop_process(s, SIGKILL);
  return -1;
}

static int rm_entry(const char *path, const struct stat *sb, int flag,
                    struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

static void free_server(th_server_t *s) {
  for (size_t i = 0; i < s->nconf; i++)
    free(s->conf[i]);
  free(s->conf);
  free(s->user);
  free(s->password);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

/* ------------------------------------------------------------ lifecycle */

/* Removes server dirs left behind by harness processes that are gone (a
 * test killed by SIGKILL, e.g. a ctest timeout, cannot clean up after
 * itself). A dir counts as stale only with an owner file naming a pid that
 * no longer exists and when older than a minute. Once per process. */
static pthread_once_t g_sweep_once = PTHREAD_ONCE_INIT;
static char g_tmp[160];

static void sweep_stale_dirs(void) {
  DIR *d = opendir(g_tmp);
  if (!d)
    return;
  struct dirent *e;
  for (int n = 0; n < 10000 && (e = readdir(d)) != NULL; n++) {
    if (strncmp(e->d_name, "dlock-test-", 11) != 0)
      continue;
    char dir[512], owner[600];
    snprintf(dir, sizeof dir, "%s/%s", g_tmp, e->d_name);
    snprintf(owner, sizeof owner, "%s/harness.pid", dir);
    struct stat st;
    if (stat(owner, &st) != 0 || time(NULL) - st.st_mtime < 60)
      continue;
    FILE *f = fopen(owner, "r");
    long pid = 0;
    if (f) {
      if (fscanf(f, "%ld", &pid) != 1)
        pid = 0;
      fclose(f);
    }
    if (pid > 0 && kill((pid_t)pid, 0) != 0 && errno == ESRCH)
      nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  }
  closedir(d);
}

th_server_t *th_server_start(const char *const *extra) {
  pthread_once(&g_once, th_init_once);
  th_server_t *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  pthread_mutex_init(&s->mu, NULL);
  size_t n = 0;
  while (extra && extra[n])
    n++;
  s->conf = calloc(n + 1, sizeof *s->conf);
  if (!s->conf) {
    free_server(s);
    return NULL;
  }
  for (size_t i = 0; i < n; i++) {
    s->conf[i] = xstrdup(extra[i]);
    if (strcmp(extra[i], TH_SENTINEL_LINE) == 0)
      s->sentinel = true;
    if (strncmp(extra[i], "requirepass ", 12) == 0) {
      free(s->password);
      s->password = xstrdup(extra[i] + 12);
    }
  }
  s->nconf = n;

  const char *tmp = getenv("TMPDIR");
  if (!tmp || !*tmp || strlen(tmp) > 150)
    tmp = "/tmp";
  snprintf(g_tmp, sizeof g_tmp, "%s", tmp);
  pthread_once(&g_sweep_once, sweep_stale_dirs);
  snprintf(s->dir, sizeof s->dir, "%s/dlock-test-XXXXXX", tmp);
  if (!mkdtemp(s->dir)) {
    fprintf(stderr, "harness: mkdtemp %s: %s\n", s->dir, strerror(errno));
    free_server(s);
    return NULL;
  }
  char owner[300];
  snprintf(owner, sizeof owner, "%s/harness.pid", s->dir);
  FILE *of = fopen(owner, "w");
  if (of) {
    fprintf(of, "%ld\n", (long)getpid());
    fclose(of);
  }
  if (reg_add(s) != 0) {
    fprintf(stderr, "harness: too many servers\n");
    rmdir(s->dir);
    free_server(s);
    return NULL;
  }
  for (int attempt = 0; attempt < 8; attempt++) {
    s->port = th_free_port();
    if (s->port <= 0) {
      fprintf(stderr, "harness: no free port: %s\n", strerror(errno));
      break;
    }
    snprintf(s->url, sizeof s->url, "redis://127.0.0.1:%d", s->port);
    s->port2 = s->port3 = 0; /* picked again with each attempt */
    for (size_t i = 0; i < s->nconf && !s->port2; i++)
      if (strstr(s->conf[i], "${port2}")) {
        s->port2 = th_free_port();
        if (s->port2 == s->port)
          s->port2 = th_free_port();
      }
    for (size_t i = 0; i < s->nconf && !s->port3; i++)
      if (strstr(s->conf[i], "${port3}")) {
        s->port3 = th_free_port();
        while (s->port3 == s->port || s->port3 == s->port2)
          s->port3 = th_free_port();
      }
    int rc = spawn_and_wait(s);
    if (rc == 0)
      return s;
    if (rc < 0)
      break;
    if (!file_contains(s->dir, "redis.log", "Address already in use")) {
      fprintf(stderr, "harness: redis-server exited at start\n");
      print_tail(s->dir, "redis.log");
      print_tail(s->dir, "redis.out");
      break;
    }
    /* port taken between our probe and redis' bind: try another one */
    char log[512];
    snprintf(log, sizeof log, "%s/redis.log", s->dir);
    unlink(log);
  }
  th_server_stop(s);
  return NULL;
}

void th_server_stop(th_server_t *s) {
  if (!s)
    return;
  stop_process(s, SIGTERM);
  reg_remove(s);
  if (s->dir[0])
    nftw(s->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  free_server(s);
}

void th_server_set_auth(th_server_t *s, const char *user,
                        const char *password) {
  pthread_mutex_lock(&s->mu);
  free(s->user);
  free(s->password);
  s->user = xstrdup(user);
  s->password = xstrdup(password);
  if (s->ctx) {
    redisFree(s->ctx);
    s->ctx = NULL;
  }
  pthread_mutex_unlock(&s->mu);
}

int th_server_down(th_server_t *s) { return stop_process(s, SIGTERM); }

int th_server_kill9(th_server_t *s) { return stop_process(s, SIGKILL); }

int th_server_up(th_server_t *s) {
  if (s->pid > 0)
    return 0;
  /* The port is normally free at once (redis sets SO_REUSEADDR); if some
   * other process took it meanwhile, retry for a bounded while. */
  for (int attempt = 0; attempt < 20; attempt++) {
    int rc = spawn_and_wait(s);
    if (rc == 0)
      return 0;
    if (rc < 0)
      return -1;
    if (!file_contains(s->dir, "redis.log", "Address already in use")) {
      fprintf(stderr, "harness: redis-server exited at restart\n");
      print_tail(s->dir, "redis.log");
      return -1;
    }
    th_sleep_ms(100);
  }
  fprintf(stderr, "harness: port %d stayed busy\n", s->port);
  return -1;
}

int th_server_restart(th_server_t *s) {
  if (th_server_down(s) != 0)
    return -1;
  return th_server_up(s);
}

int th_server_pause(th_server_t *s) {
  return s->pid > 0 && kill(s->pid, SIGSTOP) == 0 ? 0 : -1;
}

int th_server_resume(th_server_t *s) {
  return s->pid > 0 && kill(s->pid, SIGCONT) == 0 ? 0 : -1;
}

/* ------------------------------------------------------------ commands */

static int auth_ctx(redisContext *c, const char *user, const char *password) {
  if (!user && !password)
    return 0;
  redisReply *r =
      user ? redisCommand(c, "AUTH %s %s", user, password ? password : "")
           : redisCommand(c, "AUTH %s", password);
  int ok = r && r->type == REDIS_REPLY_STATUS;
  if (r)
    freeReplyObject(r);
  return ok ? 0 : -1;
}

redisContext *th_redis_connect(th_server_t *s) {
  redisContext *c = connect_ctx(s, 2000, 5000);
  if (!c)
    return NULL;
  pthread_mutex_lock(&s->mu);
  char *user = xstrdup(s->user), *pass = xstrdup(s->password);
  pthread_mutex_unlock(&s->mu);
  int rc = auth_ctx(c, user, pass);
  free(user);
  free(pass);
  if (rc != 0) {
    redisFree(c);
    return NULL;
  }
  return c;
}

static redisReply *vcmd(th_server_t *s, const char *fmt, va_list ap) {
  redisReply *r = NULL;
  pthread_mutex_lock(&s->mu);
  for (int attempt = 0; attempt < 2 && !r; attempt++) {
    bool fresh = false;
    if (!s->ctx) {
      s->ctx = connect_ctx(s, 2000, 5000);
      if (!s->ctx)
        break;
      if (auth_ctx(s->ctx, s->user, s->password) != 0) {
        redisFree(s->ctx);
        s->ctx = NULL;
        break;
      }
      fresh = true;
    }
    va_list cp;
    va_copy(cp, ap);
    r = redisvCommand(s->ctx, fmt, cp);
    va_end(cp);
    if (!r) {
      redisFree(s->ctx);
      s->ctx = NULL;
      if (fresh)
        break; /* a new connection failed: the server is not there */
    }
  }
  pthread_mutex_unlock(&s->mu);
  return r;
}

redisReply *th_redis_cmd(th_server_t *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = vcmd(s, fmt, ap);
  va_end(ap);
  return r;
}

int64_t th_redis_int(th_server_t *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = vcmd(s, fmt, ap);
  va_end(ap);
  int64_t v = INT64_MIN;
  if (r && r->type == REDIS_REPLY_INTEGER)
    v = r->integer;
  if (r)
    freeReplyObject(r);
  return v;
}

int th_run_command(char *const argv[]) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    return 70;
  }
  if (pid == 0) {
    execvp(argv[0], argv);
    perror(argv[0]);
    _exit(127);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

bool th_info_has(th_server_t *s, const char *section, const char *a,
                 const char *b) {
  char *info = th_redis_str(s, "INFO %s", section);
  bool ok = info && strstr(info, a) && (!b || strstr(info, b));
  free(info);
  return ok;
}

char *th_redis_str(th_server_t *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = vcmd(s, fmt, ap);
  va_end(ap);
  char *v = NULL;
  if (r && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS))
    v = xstrdup(r->str);
  if (r)
    freeReplyObject(r);
  return v;
}

/* --------------------------------------------------------------- proxy */

#define TH_PROXY_PAIRS 64

struct th_proxy {
  int listen_fd, wake[2], target;
  char url[64];
  atomic_bool drop, dropreq, hole, reset, stop;
  pthread_t th;
  int cli[TH_PROXY_PAIRS], up[TH_PROXY_PAIRS]; /* -1 = unused; thread only */
};

static void proxy_close_pair(th_proxy_t *p, int i) {
  if (p->cli[i] >= 0)
    close(p->cli[i]);
  if (p->up[i] >= 0)
    close(p->up[i]);
  p->cli[i] = p->up[i] = -1;
}

/* Copies what is readable on `from` to `to` (or drops it); -1 on EOF. */
static int proxy_pump(int from, int to, bool drop) {
  char buf[16384];
  ssize_t n = read(from, buf, sizeof buf);
  if (n <= 0)
    return n < 0 && (errno == EINTR || errno == EAGAIN) ? 0 : -1;
  if (drop)
    return 0;
  for (ssize_t off = 0; off < n;) {
    ssize_t w = write(to, buf + off, (size_t)(n - off));
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    off += w;
  }
  return 0;
}

static void *proxy_main(void *arg) {
  th_proxy_t *p = arg;
  while (!atomic_load(&p->stop)) {
    struct pollfd fds[2 + 2 * TH_PROXY_PAIRS];
    int map[2 + 2 * TH_PROXY_PAIRS];
    int n = 0;
    bool hole = atomic_load(&p->hole);
    if (atomic_exchange(&p->reset, false))
      for (int i = 0; i < TH_PROXY_PAIRS; i++)
        proxy_close_pair(p, i);
    fds[n] = (struct pollfd){.fd = p->wake[0], .events = POLLIN};
    map[n++] = -1;
    fds[n] = (struct pollfd){.fd = p->listen_fd, .events = POLLIN};
    map[n++] = -2;
    for (int i = 0; i < TH_PROXY_PAIRS && !hole; i++) {
      if (p->cli[i] < 0)
        continue;
      fds[n] = (struct pollfd){.fd = p->cli[i], .events = POLLIN};
      map[n++] = 2 * i;
      fds[n] = (struct pollfd){.fd = p->up[i], .events = POLLIN};
      map[n++] = 2 * i + 1;
    }
    if (poll(fds, (nfds_t)n, 1000) < 0 && errno != EINTR)
      break;
    for (int k = 0; k < n; k++) {
      if (!fds[k].revents)
        continue;
      if (map[k] == -1) {
        char b[64];
        while (read(p->wake[0], b, sizeof b) > 0) {
        }
      } else if (map[k] == -2) {
        int c = accept4(p->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
          continue;
        int slot = -1;
        for (int i = 0; i < TH_PROXY_PAIRS && slot < 0; i++)
          if (p->cli[i] < 0)
            slot = i;
        int u = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons((uint16_t)p->target);
        if (slot < 0 || u < 0 ||
            connect(u, (struct sockaddr *)&a, sizeof a) != 0) {
          close(c);
          if (u >= 0)
            close(u);
          continue;
        }
        p->cli[slot] = c;
        p->up[slot] = u;
      } else {
        int i = map[k] / 2;
        bool from_up = map[k] % 2;
        if (p->cli[i] < 0)
          continue; /* closed earlier in this round */
        int rc =
            from_up ? proxy_pump(p->up[i], p->cli[i], atomic_load(&p->drop))
                    : proxy_pump(p->cli[i], p->up[i], atomic_load(&p->dropreq));
        if (rc < 0)
          proxy_close_pair(p, i);
      }
    }
  }
  for (int i = 0; i < TH_PROXY_PAIRS; i++)
    proxy_close_pair(p, i);
  return NULL;
}

static void proxy_poke(th_proxy_t *p) {
  ssize_t rc = write(p->wake[1], "x", 1);
  (void)rc;
}

th_proxy_t *th_proxy_start(int target_port) {
  th_proxy_t *p = calloc(1, sizeof *p);
  if (!p)
    return NULL;
  p->target = target_port;
  for (int i = 0; i < TH_PROXY_PAIRS; i++)
    p->cli[i] = p->up[i] = -1;
  p->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (p->listen_fd < 0 || bind(p->listen_fd, (struct sockaddr *)&a, sizeof a) ||
      listen(p->listen_fd, 64) ||
      getsockname(p->listen_fd, (struct sockaddr *)&a, &len) ||
      pipe2(p->wake, O_CLOEXEC | O_NONBLOCK)) {
    fprintf(stderr, "harness: proxy: %s\n", strerror(errno));
    if (p->listen_fd >= 0)
      close(p->listen_fd);
    free(p);
    return NULL;
  }
  snprintf(p->url, sizeof p->url, "redis://127.0.0.1:%d", ntohs(a.sin_port));
  if (pthread_create(&p->th, NULL, proxy_main, p) != 0) {
    close(p->listen_fd);
    close(p->wake[0]);
    close(p->wake[1]);
    free(p);
    return NULL;
  }
  return p;
}

int th_proxy_port(const th_proxy_t *p) {
  return atoi(strrchr(p->url, ':') + 1);
}

const char *th_proxy_url(const th_proxy_t *p) { return p->url; }

void th_proxy_drop_replies(th_proxy_t *p, bool on) {
  atomic_store(&p->drop, on);
  proxy_poke(p);
}

void th_proxy_drop_requests(th_proxy_t *p, bool on) {
  atomic_store(&p->dropreq, on);
  proxy_poke(p);
}

void th_proxy_blackhole(th_proxy_t *p, bool on) {
  atomic_store(&p->hole, on);
  proxy_poke(p);
}

void th_proxy_reset(th_proxy_t *p) {
  atomic_store(&p->reset, true);
  proxy_poke(p);
}

void th_proxy_stop(th_proxy_t *p) {
  if (!p)
    return;
  atomic_store(&p->stop, true);
  proxy_poke(p);
  pthread_join(p->th, NULL);
  close(p->listen_fd);
  close(p->wake[0]);
  close(p->wake[1]);
  free(p);
}

int th_sentinel_master_port(th_server_t *sentinel, const char *name) {
  redisContext *c = th_redis_connect(sentinel);
  if (!c)
    return -1;
  redisReply *r =
      redisCommand(c, "SENTINEL GET-MASTER-ADDR-BY-NAME %s", name);
  int port = -1;
  if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
      r->element[1]->type == REDIS_REPLY_STRING)
    port = atoi(r->element[1]->str);
  if (r)
    freeReplyObject(r);
  redisFree(c);
  return port;
}
