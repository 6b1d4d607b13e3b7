/*
 * mysql.c - start, kill, restart, pause and stop private MariaDB servers.
 *
 * Design note
 * - A server is a child process running Debian's mariadbd with
 *   --no-defaults (no option file is read), bound to 127.0.0.1 on a port
 *   found by binding port 0, its unix socket, pid file and data directory
 *   inside the server's mkdtemp root, its log <root>/server.log. Small
 *   InnoDB buffers and no binary log: a test's data is small.
 * - The data directory is copied (cp -a) from a template that
 *   mariadb-install-db made once per user (/tmp/dlock-my-template-<uid>),
 *   built in a temporary directory and renamed into place, so concurrent
 *   tests agree on one. The server's --init-file creates the database and
 *   user the URL names at every start.
 * - Root: the server runs as `nobody` through setpriv, which also keeps
 *   the parent death signal; the directories are chowned to that user.
 * - Readiness is a condition: a Connector/C login succeeds, tried every
 *   20 ms within a bound, watching for an early exit (a port taken
 *   meanwhile: the start is retried on a new port).
 * - Cleanup: a registry of live servers, stopped at exit (only in the
 *   process that started them) or killed and reaped on a signal.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "mysql.h"
#include "harness.h"

#include <errno.h>
#include <ftw.h>
#include <mariadb/mysql.h> /* the connector's (this folder has a mysql.h) */
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

#define TH_MY_READY_MS 60000
#define TH_MY_REG 8
#define TH_MY_PASSWORD "dlock-test-pw"

struct th_my {
  pid_t pid; /* 0 while down */
  int port;
  char root[128];
  char url[256];
};

static th_my_t *g_servers[TH_MY_REG];
static pid_t g_owner;
static struct sigaction g_old[3];
static bool g_init;

static const char *server_path(void) {
  const char *b = getenv("TH_MARIADBD");
  return b && *b ? b : "/usr/sbin/mariadbd";
}

int th_my_available(void) { return access(server_path(), X_OK) == 0; }

const char *th_my_password(void) { return TH_MY_PASSWORD; }

static void on_signal(int sig) {
  if (getpid() == g_owner)
    for (int i = 0; i < TH_MY_REG; i++) {
      th_my_t *s = g_servers[i];
      if (s && s->pid > 0) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
      }
    }
  th_signal_pass_on(sig, g_old);
}

static void stop_all(void) {
  if (getpid() != g_owner)
    return;
  for (int i = 0; i < TH_MY_REG; i++)
    if (g_servers[i])
      th_my_stop(g_servers[i]);
}

static void init_once(void) {
  if (g_init)
    return;
  g_init = true;
  g_owner = getpid();
  atexit(stop_all);
  th_signals_install(on_signal, g_old);
}

static bool as_nobody(uid_t *uid, gid_t *gid) {
  if (geteuid() != 0)
    return false;
  struct passwd *pw = getpwnam("nobody");
  *uid = pw ? pw->pw_uid : 65534;
  *gid = pw ? pw->pw_gid : 65534;
  return true;
}

/* Runs path with args, as nobody when root, output to log. With `wait`,
 * the exit status; else the pid (-1 on failure). */
static int run(const char *path, const char *const *args, const char *log,
               bool wait) {
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
  pid_t pid = th_spawn(prog, (char *const *)argv, log, "th_my");
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
    fprintf(stderr, "th_my: chown %s: %s\n", path, strerror(errno));
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

static int template_dir(char *out, size_t cap) {
  char parent[128];
  snprintf(parent, sizeof parent, "/tmp/dlock-my-template-%u",
           (unsigned)geteuid());
  snprintf(out, cap, "%s/data", parent);
  char marker[300];
  snprintf(marker, sizeof marker, "%s/mysql/user.frm", out);
  if (access(marker, R_OK) == 0)
    return 0;
  char tmp[128] = "/tmp/dlock-my-tmpl-XXXXXX";
  if (!mkdtemp(tmp)) {
    fprintf(stderr, "th_my: mkdtemp: %s\n", strerror(errno));
    return -1;
  }
  give_to_nobody(tmp);
  char data[200], log[200], datadir[220];
  snprintf(data, sizeof data, "%s/data", tmp);
  snprintf(log, sizeof log, "%s/install.log", tmp);
  snprintf(datadir, sizeof datadir, "--datadir=%s", data);
  const char *args[] = {"--no-defaults",
                        datadir,
                        "--auth-root-authentication-method=normal",
                        "--skip-test-db",
                        "--skip-name-resolve",
                        NULL};
  /* its temporary tables in its own directory: concurrent installs would
   * collide in /tmp */
  const char *old = getenv("TMPDIR");
  char *saved = old ? strdup(old) : NULL;
  setenv("TMPDIR", tmp, 1);
  int st = run("/usr/bin/mariadb-install-db", args, log, true);
  if (saved) {
    setenv("TMPDIR", saved, 1);
    free(saved);
  } else {
    unsetenv("TMPDIR");
  }
  if (st != 0) {
    fprintf(stderr, "th_my: mariadb-install-db failed (status %d)\n", st);
    log_tail(log);
    rm_tree(tmp);
    return -1;
  }
  if (rename(tmp, parent) != 0) /* another test made it first */
    rm_tree(tmp);
  return access(marker, R_OK) == 0 ? 0 : -1;
}

static int spawn_server(th_my_t *s) {
  char datadir[220], port[32], sock[220], pidf[220], init[220], log[200],
      tmpdir[220];
  snprintf(tmpdir, sizeof tmpdir, "--tmpdir=%s", s->root);
  snprintf(datadir, sizeof datadir, "--datadir=%s/data", s->root);
  snprintf(port, sizeof port, "--port=%d", s->port);
  snprintf(sock, sizeof sock, "--socket=%s/sock", s->root);
  snprintf(pidf, sizeof pidf, "--pid-file=%s/pid", s->root);
  snprintf(init, sizeof init, "--init-file=%s/init.sql", s->root);
  snprintf(log, sizeof log, "%s/server.log", s->root);
  const char *args[] = {"--no-defaults",
                        datadir,
                        port,
                        "--bind-address=127.0.0.1",
                        sock,
                        pidf,
                        init,
                        tmpdir,
                        "--skip-name-resolve",
                        "--skip-log-bin",
                        "--innodb-buffer-pool-size=16M",
                        "--innodb-log-file-size=8M",
                        "--innodb-flush-log-at-trx-commit=2",
                        "--max-connections=100",
                        "--performance-schema=OFF",
                        NULL};
  pid_t pid = run(server_path(), args, log, false);
  if (pid < 0)
    return -1;
  s->pid = pid;
  return 0;
}

static int await_ready(th_my_t *s) {
  int64_t deadline = th_now_ms() + TH_MY_READY_MS;
  while (th_now_ms() < deadline) {
    MYSQL *m = mysql_init(NULL);
    unsigned ct = 2, proto = MYSQL_PROTOCOL_TCP;
    mysql_optionsv(m, MYSQL_OPT_CONNECT_TIMEOUT, &ct);
    mysql_optionsv(m, MYSQL_OPT_PROTOCOL, &proto);
    bool ok = mysql_real_connect(m, "127.0.0.1", "dlock", TH_MY_PASSWORD,
                                 "dlock", (unsigned)s->port, NULL, 0) != NULL;
    mysql_close(m);
    if (ok)
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

th_my_t *th_my_start(void) {
  init_once();
  char tmpl[200];
  if (template_dir(tmpl, sizeof tmpl) != 0)
    return NULL;
  th_my_t *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  snprintf(s->root, sizeof s->root, "/tmp/dlock-my-XXXXXX");
  if (!mkdtemp(s->root)) {
    fprintf(stderr, "th_my: mkdtemp: %s\n", strerror(errno));
    free(s);
    return NULL;
  }
  give_to_nobody(s->root);
  char data[200], init[200];
  snprintf(data, sizeof data, "%s/data", s->root);
  snprintf(init, sizeof init, "%s/init.sql", s->root);
  char *const cp[] = {"cp", "-a", tmpl, data, NULL};
  FILE *f = fopen(init, "w");
  if (f) {
    fprintf(f,
            "CREATE DATABASE IF NOT EXISTS dlock;\n"
            "CREATE USER IF NOT EXISTS 'dlock'@'%%' IDENTIFIED BY '%s';\n"
            "GRANT ALL ON *.* TO 'dlock'@'%%';\n",
            TH_MY_PASSWORD);
    fclose(f);
    give_to_nobody(init);
  }
  if (!f || th_run_command(cp) != 0) {
    fprintf(stderr, "th_my: cannot copy %s\n", tmpl);
    rm_tree(s->root);
    free(s);
    return NULL;
  }
  int slot = -1;
  for (int i = 0; i < TH_MY_REG; i++)
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
      snprintf(s->url, sizeof s->url, "mysql://dlock:%s@127.0.0.1:%d/dlock",
               TH_MY_PASSWORD, s->port);
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
  fprintf(stderr, "th_my: the server did not start\n");
  log_tail(log);
  th_my_stop(s);
  return NULL;
}

const char *th_my_url(const th_my_t *s) { return s->url; }
int th_my_port(const th_my_t *s) { return s->port; }

int th_my_kill9(th_my_t *s) {
  if (!s->pid)
    return -1;
  kill(s->pid, SIGKILL);
  waitpid(s->pid, NULL, 0);
  s->pid = 0;
  return 0;
}

int th_my_up(th_my_t *s) {
  if (s->pid)
    return -1;
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

int th_my_pause(th_my_t *s) {
  if (!s->pid || kill(s->pid, SIGSTOP) != 0)
    return -1;
  /* kill() returns before every thread of the server has stopped (one
   * may still answer a statement): the parent is told once all have */
  int st = 0;
  return waitpid(s->pid, &st, WUNTRACED) == s->pid && WIFSTOPPED(st) ? 0 : -1;
}

int th_my_resume(th_my_t *s) {
  return s->pid && kill(s->pid, SIGCONT) == 0 ? 0 : -1;
}

void th_my_stop(th_my_t *s) {
  if (!s)
    return;
  if (s->pid > 0) {
    kill(s->pid, SIGCONT);
    kill(s->pid, SIGTERM);
    int64_t deadline = th_now_ms() + 10000;
    bool reaped = false;
    while (th_now_ms() < deadline) {
      pid_t r = waitpid(s->pid, NULL, WNOHANG);
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
  for (int i = 0; i < TH_MY_REG; i++)
    if (g_servers[i] == s)
      g_servers[i] = NULL;
  free(s);
}

/* ------------------------------------------------------- the mariadb client */

static void client_argv(th_my_t *s, const char **argv, char *port, size_t cap) {
  snprintf(port, cap, "--port=%d", s->port);
  int n = 0;
  argv[n++] = "mariadb";
  argv[n++] = "--no-defaults";
  argv[n++] = "--protocol=TCP";
  argv[n++] = "--host=127.0.0.1";
  argv[n++] = port;
  argv[n++] = "--user=dlock";
  argv[n++] = "--connect-timeout=5";
  argv[n++] = "-N";
  argv[n++] = "-B";
  argv[n++] = "-n"; /* unbuffered: each result as it comes */
  argv[n++] = "dlock";
  argv[n] = NULL;
}

int th_my_sql(th_my_t *s, const char *sql, char *out, int cap) {
  int fds[2];
  if (pipe(fds) != 0)
    return -1;
  const char *argv[24];
  char port[32];
  client_argv(s, argv, port, sizeof port);
  int n = 0;
  while (argv[n])
    n++;
  argv[n++] = "-e";
  argv[n++] = sql;
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
    setenv("MYSQL_PWD", TH_MY_PASSWORD, 1);
    execvp("mariadb", (char *const *)argv);
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

struct th_my_session {
  pid_t pid;
  int in, out;
  char buf[4096];
  int used;
};

th_my_session_t *th_my_session_open(th_my_t *s) {
  int in[2], out[2];
  if (pipe(in) != 0)
    return NULL;
  if (pipe(out) != 0) {
    close(in[0]);
    close(in[1]);
    return NULL;
  }
  const char *argv[24];
  char port[32];
  client_argv(s, argv, port, sizeof port);
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
    setenv("MYSQL_PWD", TH_MY_PASSWORD, 1);
    execvp("mariadb", (char *const *)argv);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  th_my_session_t *q = calloc(1, sizeof *q);
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

int th_my_session_send(th_my_session_t *q, const char *sql) {
  size_t n = strlen(sql);
  if (write(q->in, sql, n) != (ssize_t)n || write(q->in, "\n", 1) != 1)
    return -1;
  return 0;
}

int th_my_session_line(th_my_session_t *q, char *out, int cap, int ms) {
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

void th_my_session_close(th_my_session_t *q) {
  if (!q)
    return;
  close(q->in); /* the client ends at EOF, its session with it */
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
