/*
 * pg.c - start, kill, restart, pause and stop private PostgreSQL servers.
 *
 * Design note
 * - A server is a child process running Debian's postgres binary with
 *   listen_addresses=127.0.0.1 on a port found by binding port 0, its unix
 *   socket and data directory inside the server's mkdtemp root, its log
 *   <root>/server.log. fsync is off (a test's data need not survive the
 *   machine). A restart (th_pg_up) runs the same command line.
 * - The data directory is copied (cp -a) from a template that initdb made
 *   once per user: /tmp/dlock-pg-template-<uid>, built in a temporary
 *   directory and renamed into place, so concurrent tests agree on one.
 *   initdb sets the superuser `postgres`'s password; host connections
 *   need it (scram-sha-256), local ones are trusted.
 * - Root: PostgreSQL will not run as root, so initdb and the server run
 *   as `nobody` through setpriv (util-linux), which also keeps the parent
 *   death signal; the directories are chowned to that user.
 * - Readiness is a condition: libpq's PQping says the server accepts
 *   connections, polled every 20 ms within a bound, watching for an early
 *   exit (a port taken meanwhile: the start is retried on a new port).
 * - Pause: SIGSTOP of the postmaster and of each of its children (every
 *   backend is a session of its own, so no process group holds them all),
 *   recorded so that a kill or the signal handler continues them: a
 *   stopped backend would outlive its killed postmaster.
 * - Cleanup: a registry of live servers. atexit() stops them (only in the
 *   process that started them); SIGINT/SIGTERM/SIGHUP SIGKILL and reap
 *   them, then chain to the handler that was there before.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "pg.h"
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libpq-fe.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define TH_PG_READY_MS 30000
#define TH_PG_REG 8
#define TH_PG_PASSWORD "dlock-test-pw"

#define TH_PG_PAUSED 128

struct th_pg {
  pid_t pid;                  /* 0 while down */
  pid_t paused[TH_PG_PAUSED]; /* the server processes th_pg_pause stopped */
  int npaused;
  int port;
  char root[128];
  char url[256];
};

static th_pg_t *g_servers[TH_PG_REG];
static void cont_children(th_pg_t *s);
static pid_t g_owner;
static struct sigaction g_old[3];
static bool g_init;

static const char *bindir(void) {
  const char *b = getenv("TH_PG_BIN");
  return b && *b ? b : "/usr/lib/postgresql/15/bin";
}

const char *th_pg_password(void) { return TH_PG_PASSWORD; }

static void on_signal(int sig) {
  if (getpid() == g_owner)
    for (int i = 0; i < TH_PG_REG; i++) {
      th_pg_t *s = g_servers[i];
      if (s && s->pid > 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        cont_children(s);
      }
    }
  th_signal_pass_on(sig, g_old);
}

static void stop_all(void) {
  if (getpid() != g_owner)
    return;
  for (int i = 0; i < TH_PG_REG; i++)
    if (g_servers[i])
      th_pg_stop(g_servers[i]);
}

static void init_once(void) {
  if (g_init)
    return;
  g_init = true;
  g_owner = getpid();
  atexit(stop_all);
  th_signals_install(on_signal, g_old);
}

/* Running as root: the user the server runs as. */
static bool as_nobody(uid_t *uid, gid_t *gid) {
  if (geteuid() != 0)
    return false;
  struct passwd *pw = getpwnam("nobody");
  *uid = pw ? pw->pw_uid : 65534;
  *gid = pw ? pw->pw_gid : 65534;
  return true;
}

/* Runs exe (in bindir) with args, as nobody when root; its output to log.
 * With `wait`, the exit status; else the pid (-1 on failure). */
static int run(const char *exe, const char *const *args, const char *log,
               bool wait) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", bindir(), exe);
  const char *argv[48];
  int n = 0;
  uid_t uid;
  gid_t gid;
  char reuid[32], regid[32];
  const char *prog = path;
  if (as_nobody(&uid, &gid)) {
    snprintf(reuid, sizeof reuid, "--reuid=%u", (unsigned)uid);
    snprintf(regid, sizeof regid, "--regid=%u", (unsigned)gid);
    prog = "setpriv";
    argv[n++] = "setpriv";
    argv[n++] = reuid;
    argv[n++] = regid;
    argv[n++] = "--clear-groups";
    argv[n++] = "--pdeathsig=KILL";
    argv[n++] = "--";
  }
  argv[n++] = path;
  for (int i = 0; args[i] && n < 47; i++)
    argv[n++] = args[i];
  argv[n] = NULL;
  pid_t pid = th_spawn(prog, (char *const *)argv, log, "th_pg");
  if (pid < 0 || !wait)
    return pid;
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void give_to_nobody(const char *path) {
  uid_t uid;
  gid_t gid;
  if (as_nobody(&uid, &gid) && chown(path, uid, gid) != 0)
    fprintf(stderr, "th_pg: chown %s: %s\n", path, strerror(errno));
}

static int rm_entry(const char *p, const struct stat *st, int flag,
                    struct FTW *f) {
  (void)st;
  (void)flag;
  (void)f;
  remove(p);
  return 0;
}

static void rm_tree(const char *dir) {
  nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void log_tail(const char *log) {
  FILE *f = fopen(log, "r");
  if (!f)
    return;
  fseek(f, 0, SEEK_END);
  long sz = ftell(f);
  fseek(f, sz > 3000 ? sz - 3000 : 0, SEEK_SET);
  char buf[3001];
  size_t n = fread(buf, 1, 3000, f);
  buf[n] = '\0';
  fclose(f);
  fprintf(stderr, "--- %s (tail) ---\n%s\n---\n", log, buf);
}

/* The template data directory, made by initdb once per user. */
static int template_dir(char *out, size_t cap) {
  snprintf(out, cap, "/tmp/dlock-pg-template-%u-15/data", (unsigned)geteuid());
  char ver[300];
  snprintf(ver, sizeof ver, "%s/PG_VERSION", out);
  if (access(ver, R_OK) == 0)
    return 0;
  char tmp[128] = "/tmp/dlock-pg-tmpl-XXXXXX";
  if (!mkdtemp(tmp)) {
    fprintf(stderr, "th_pg: mkdtemp: %s\n", strerror(errno));
    return -1;
  }
  give_to_nobody(tmp);
  char pw[200], data[200], log[200];
  snprintf(pw, sizeof pw, "%s/pw", tmp);
  snprintf(data, sizeof data, "%s/data", tmp);
  snprintf(log, sizeof log, "%s/initdb.log", tmp);
  FILE *f = fopen(pw, "w");
  if (!f) {
    rm_tree(tmp);
    return -1;
  }
  fprintf(f, "%s\n", TH_PG_PASSWORD);
  fclose(f);
  give_to_nobody(pw);
  char pwfile[220];
  snprintf(pwfile, sizeof pwfile, "--pwfile=%s", pw);
  const char *args[] = {"-D",
                        data,
                        "-U",
                        "postgres",
                        pwfile,
                        "--auth-local=trust",
                        "--auth-host=scram-sha-256",
                        "-E",
                        "UTF8",
                        "--no-locale",
                        "--no-sync",
                        NULL};
  int st = run("initdb", args, log, true);
  if (st != 0) {
    fprintf(stderr, "th_pg: initdb failed (status %d)\n", st);
    log_tail(log);
    rm_tree(tmp);
    return -1;
  }
  remove(pw);
  char parent[200];
  snprintf(parent, sizeof parent, "/tmp/dlock-pg-template-%u-15",
           (unsigned)geteuid());
  if (rename(tmp, parent) != 0) /* another test made it first */
    rm_tree(tmp);
  return access(ver, R_OK) == 0 ? 0 : -1;
}

static int spawn_server(th_pg_t *s) {
  char data[200], log[200], port[16];
  snprintf(data, sizeof data, "%s/data", s->root);
  snprintf(log, sizeof log, "%s/server.log", s->root);
  snprintf(port, sizeof port, "%d", s->port);
  const char *args[] = {"-D", data,
                        "-p", port,
                        "-k", s->root,
                        "-c", "listen_addresses=127.0.0.1",
                        "-c", "fsync=off",
                        "-c", "full_page_writes=off",
                        "-c", "shared_buffers=16MB",
                        "-c", "max_connections=200",
                        "-c", "logging_collector=off",
                        NULL};
  pid_t pid = run("postgres", args, log, false);
  if (pid < 0)
    return -1;
  s->pid = pid;
  return 0;
}

static int await_ready(th_pg_t *s) {
  char conninfo[200];
  snprintf(conninfo, sizeof conninfo,
           "host=127.0.0.1 port=%d dbname=postgres connect_timeout=2", s->port);
  int64_t deadline = th_now_ms() + TH_PG_READY_MS;
  while (th_now_ms() < deadline) {
    if (PQping(conninfo) == PQPING_OK)
      return 0;
    int st;
    if (waitpid(s->pid, &st, WNOHANG) == s->pid) {
      s->pid = 0;
      return -1;
    }
    th_sleep_ms(20);
  }
  return -1;
}

th_pg_t *th_pg_start(void) {
  init_once();
  char tmpl[200];
  if (template_dir(tmpl, sizeof tmpl) != 0)
    return NULL;
  th_pg_t *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  snprintf(s->root, sizeof s->root, "/tmp/dlock-pg-XXXXXX");
  if (!mkdtemp(s->root)) {
    fprintf(stderr, "th_pg: mkdtemp: %s\n", strerror(errno));
    free(s);
    return NULL;
  }
  give_to_nobody(s->root);
  char data[200];
  snprintf(data, sizeof data, "%s/data", s->root);
  char *const cp[] = {"cp", "-a", tmpl, data, NULL};
  if (th_run_command(cp) != 0) {
    fprintf(stderr, "th_pg: cannot copy %s\n", tmpl);
    rm_tree(s->root);
    free(s);
    return NULL;
  }
  int slot = -1;
  for (int i = 0; i < TH_PG_REG; i++)
    if (!g_servers[i]) {
      slot = i;
      break;
    }
  if (slot < 0) {
    rm_tree(s->root);
    free(s);
    return NULL;
  }
  g_servers[slot] = s;
  for (int attempt = 0; attempt < 3; attempt++) {
    s->port = th_free_port();
    if (spawn_server(s) == 0 && await_ready(s) == 0) {
      snprintf(s->url, sizeof s->url,
               "postgres://postgres:%s@127.0.0.1:%d/postgres", TH_PG_PASSWORD,
               s->port);
      return s;
    }
    if (s->pid > 0) {
      kill(s->pid, SIGKILL);
      waitpid(s->pid, NULL, 0);
      s->pid = 0;
    }
  }
  char log[200];
  snprintf(log, sizeof log, "%s/server.log", s->root);
  fprintf(stderr, "th_pg: the server did not start\n");
  log_tail(log);
  th_pg_stop(s);
  return NULL;
}

const char *th_pg_url(const th_pg_t *s) { return s->url; }
int th_pg_port(const th_pg_t *s) { return s->port; }

/* SIGSTOPs every child of the postmaster (the server processes: each
 * backend is a session of its own, out of the postmaster's process group,
 * so a signal to the group would miss them) and records them in s. */
static void stop_children(th_pg_t *s) {
  pid_t pids[TH_PG_PAUSED];
  int n = th_children(s->pid, pids, NULL, TH_PG_PAUSED);
  for (int i = 0; i < n; i++)
    if (kill(pids[i], SIGSTOP) == 0)
      s->paused[s->npaused++] = pids[i];
}

/* SIGCONTs the children stop_children stopped (async-signal-safe: the
 * signal handler calls it, so that no server process stays stopped once
 * its postmaster is killed). */
static void cont_children(th_pg_t *s) {
  for (int i = 0; i < s->npaused; i++)
    kill(s->paused[i], SIGCONT);
  s->npaused = 0;
}

int th_pg_kill9(th_pg_t *s) {
  if (!s->pid)
    return -1;
  kill(s->pid, SIGKILL);
  waitpid(s->pid, NULL, 0);
  s->pid = 0;
  cont_children(s); /* they see their postmaster gone, and exit */
  return 0;
}

int th_pg_up(th_pg_t *s) {
  if (s->pid)
    return -1;
  /* a killed postmaster's children exit on their own; its pid file and
   * shared memory are checked by the new one */
  for (int i = 0; i < 3; i++) {
    if (spawn_server(s) == 0 && await_ready(s) == 0)
      return 0;
    if (s->pid > 0) {
      kill(s->pid, SIGKILL);
      waitpid(s->pid, NULL, 0);
      s->pid = 0;
    }
    th_sleep_ms(500);
  }
  return -1;
}

int th_pg_pause(th_pg_t *s) {
  if (!s->pid || s->npaused > 0 || kill(s->pid, SIGSTOP) != 0)
    return -1;
  stop_children(s); /* the postmaster first: it starts none meanwhile */
  return 0;
}

int th_pg_resume(th_pg_t *s) {
  if (!s->pid)
    return -1;
  cont_children(s);
  return kill(s->pid, SIGCONT) == 0 ? 0 : -1;
}

void th_pg_stop(th_pg_t *s) {
  if (!s)
    return;
  if (s->pid > 0) {
    th_pg_resume(s);
    kill(s->pid, SIGINT); /* fast shutdown */
    int64_t deadline = th_now_ms() + 10000;
    bool reaped = false;
    while (th_now_ms() < deadline) {
      int st;
      pid_t r = waitpid(s->pid, &st, WNOHANG);
      if (r == s->pid || (r < 0 && errno == ECHILD)) {
        reaped = true;
        break;
      }
      th_sleep_ms(10);
    }
    if (!reaped) {
      kill(s->pid, SIGKILL);
      waitpid(s->pid, NULL, 0);
    }
    s->pid = 0;
  }
  rm_tree(s->root);
  for (int i = 0; i < TH_PG_REG; i++)
    if (g_servers[i] == s)
      g_servers[i] = NULL;
  free(s);
}

/* ---------------------------------------------------------------- psql */

static void psql_env(void) {
  setenv("PGPASSWORD", TH_PG_PASSWORD, 1);
  setenv("PGCONNECT_TIMEOUT", "5", 1);
}

int th_pg_psql(th_pg_t *s, const char *const *cmds, char *out, int cap) {
  int fds[2];
  if (pipe(fds) != 0)
    return -1;
  char path[256];
  snprintf(path, sizeof path, "%s/psql", bindir());
  const char *argv[40];
  int n = 0;
  argv[n++] = "psql";
  argv[n++] = "-X";
  argv[n++] = "-A";
  argv[n++] = "-t";
  argv[n++] = "-q";
  argv[n++] = "-v";
  argv[n++] = "ON_ERROR_STOP=1";
  argv[n++] = "-d";
  argv[n++] = s->url;
  for (int i = 0; cmds[i] && n < 37; i++) {
    argv[n++] = "-c";
    argv[n++] = cmds[i];
  }
  argv[n] = NULL;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    psql_env();
    execv(path, (char *const *)argv);
    _exit(127);
  }
  close(fds[1]);
  int used = 0;
  for (;;) {
    char buf[512];
    ssize_t r = read(fds[0], buf, sizeof buf);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    for (ssize_t i = 0; i < r && used + 1 < cap; i++)
      out[used++] = buf[i];
  }
  close(fds[0]);
  while (used > 0 && (out[used - 1] == '\n' || out[used - 1] == ' '))
    used--;
  if (cap > 0)
    out[used] = '\0';
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

struct th_pg_session {
  pid_t pid;
  int in, out;
  char buf[4096];
  int used;
};

th_pg_session_t *th_pg_session_open(th_pg_t *s) {
  int in[2], out[2];
  if (pipe(in) != 0)
    return NULL;
  if (pipe(out) != 0) {
    close(in[0]);
    close(in[1]);
    return NULL;
  }
  char path[256];
  snprintf(path, sizeof path, "%s/psql", bindir());
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[0]);
    close(in[1]);
    close(out[0]);
    close(out[1]);
    psql_env();
    execl(path, "psql", "-X", "-A", "-t", "-q", "-d", s->url, (char *)NULL);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  th_pg_session_t *q = calloc(1, sizeof *q);
  if (pid < 0 || !q) {
    close(in[1]);
    close(out[0]);
    free(q);
    return NULL;
  }
  q->pid = pid;
  q->in = in[1];
  q->out = out[0];
  return q;
}

int th_pg_session_send(th_pg_session_t *q, const char *sql) {
  size_t n = strlen(sql);
  if (write(q->in, sql, n) != (ssize_t)n || write(q->in, "\n", 1) != 1)
    return -1;
  return 0;
}

int th_pg_session_line(th_pg_session_t *q, char *out, int cap, int ms) {
  int64_t deadline = th_now_ms() + ms;
  for (;;) {
    char *nl = memchr(q->buf, '\n', (size_t)q->used);
    if (nl) {
      int len = (int)(nl - q->buf);
      snprintf(out, (size_t)cap, "%.*s", len, q->buf);
      memmove(q->buf, nl + 1, (size_t)(q->used - len - 1));
      q->used -= len + 1;
      return 0;
    }
    int64_t left = deadline - th_now_ms();
    if (left <= 0 || q->used >= (int)sizeof q->buf)
      return -1;
    struct pollfd p = {.fd = q->out, .events = POLLIN};
    if (poll(&p, 1, (int)left) <= 0)
      continue;
    ssize_t r = read(q->out, q->buf + q->used, sizeof q->buf - (size_t)q->used);
    if (r <= 0)
      return -1;
    q->used += (int)r;
  }
}

void th_pg_session_close(th_pg_session_t *q) {
  if (!q)
    return;
  close(q->in); /* psql ends at EOF, its session with it */
  int64_t deadline = th_now_ms() + 5000;
  for (;;) {
    pid_t r = waitpid(q->pid, NULL, WNOHANG);
    if (r == q->pid || (r < 0 && errno != EINTR))
      break;
    if (th_now_ms() >= deadline) {
      kill(q->pid, SIGKILL);
      waitpid(q->pid, NULL, 0);
      break;
    }
    th_sleep_ms(10);
  }
  close(q->out);
  free(q);
}
