/*
 * fproc.c - child processes of a fault test (fproc.h).
 *
 * Design note. fork + execvp with three descriptors: the child's stdin is a
 * pipe from us, its stdout a pipe to us (non-blocking on our side), its
 * stderr ours (so ctest shows what it says). The child asks for SIGKILL
 * when we die (the worker sets PR_SET_PDEATHSIG itself; here it is set
 * between fork and exec for any program). Lines are split as they arrive
 * and kept forever with their arrival time: tests are short, and looking
 * back is how a test finds a LOST line that came before the line it waited
 * for. A registry of live children lets an atexit handler kill the ones a
 * failed CHECK left behind, by pid (or by the group fproc made for them).
 * Main thread only.
 */
#define _GNU_SOURCE 1
#include "fproc.h"

#include <errno.h>
#include <grp.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_CHILDREN 64

static fproc_t *live[MAX_CHILDREN];
static bool atexit_set;

int64_t fproc_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void kill_all(void) {
  for (int i = 0; i < MAX_CHILDREN; i++) {
    fproc_t *p = live[i];
    if (p && p->pid > 0) {
      kill(p->own_group ? -p->pid : p->pid, SIGKILL);
      waitpid(p->pid, NULL, 0);
      p->pid = 0;
    }
  }
}

static void reg(fproc_t *p, bool add) {
  for (int i = 0; i < MAX_CHILDREN; i++) {
    if (add && !live[i]) {
      live[i] = p;
      return;
    }
    if (!add && live[i] == p) {
      live[i] = NULL;
      return;
    }
  }
}

fproc_t *fproc_start(char *const argv[], const char *tag, bool own_group) {
  return fproc_start_gid(argv, tag, own_group, (gid_t)-1);
}

fproc_t *fproc_start_gid(char *const argv[], const char *tag, bool own_group,
                         gid_t gid) {
  if (!atexit_set) {
    atexit(kill_all);
    atexit_set = true;
  }
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0)
    return NULL;
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    return NULL;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(in[0]);
    close(in[1]);
    close(out[0]);
    close(out[1]);
    return NULL;
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
      _exit(126);
    if (own_group)
      setpgid(0, 0);
    if (gid != (gid_t)-1 && (setgroups(0, NULL) != 0 || setgid(gid) != 0)) {
      fprintf(stderr, "fproc: setgid %d: %s\n", (int)gid, strerror(errno));
      _exit(126);
    }
    dup2(in[0], 0);
    dup2(out[1], 1);
    /* a clean signal state for the program */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    execvp(argv[0], argv);
    fprintf(stderr, "fproc: exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  if (own_group)
    setpgid(pid, pid); /* both sides, whichever runs first */
  close(in[0]);
  close(out[1]);
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  fproc_t *p = calloc(1, sizeof *p);
  if (!p) {
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(in[1]);
    close(out[0]);
    return NULL;
  }
  p->pid = pid;
  p->own_group = own_group;
  p->in_fd = in[1];
  p->out_fd = out[0];
  snprintf(p->tag, sizeof p->tag, "%s", tag);
  reg(p, true);
  return p;
}

int fproc_send(fproc_t *p, const char *line) {
  if (p->in_fd < 0)
    return -1;
  char buf[512];
  int n = snprintf(buf, sizeof buf, "%s\n", line);
  void (*old)(int) = signal(SIGPIPE, SIG_IGN);
  ssize_t w = write(p->in_fd, buf, (size_t)n);
  signal(SIGPIPE, old);
  return w == n ? 0 : -1;
}

void fproc_close_stdin(fproc_t *p) {
  if (p->in_fd >= 0)
    close(p->in_fd);
  p->in_fd = -1;
}

static void add_line(fproc_t *p, const char *s, size_t n) {
  if (p->nlines == p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 64;
    char **nl = realloc(p->lines, cap * sizeof *nl);
    int64_t *nt = realloc(p->line_us, cap * sizeof *nt);
    if (nl)
      p->lines = nl;
    if (nt)
      p->line_us = nt;
    if (!nl || !nt)
      return;
    p->cap = cap;
  }
  char *c = malloc(n + 1);
  if (!c)
    return;
  memcpy(c, s, n);
  c[n] = '\0';
  p->line_us[p->nlines] = fproc_now_us();
  p->lines[p->nlines++] = c;
}

/* Reads what is there now; false at EOF. */
static bool drain(fproc_t *p) {
  for (;;) {
    char buf[4096];
    ssize_t r = read(p->out_fd, buf, sizeof buf);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0)
      return true; /* EAGAIN */
    if (r == 0) {
      if (p->npartial)
        add_line(p, p->partial, p->npartial);
      p->npartial = 0;
      close(p->out_fd);
      p->out_fd = -1;
      return false;
    }
    for (ssize_t i = 0; i < r; i++) {
      if (buf[i] == '\n' || p->npartial == sizeof p->partial - 1) {
        add_line(p, p->partial, p->npartial);
        p->npartial = 0;
        if (buf[i] == '\n')
          continue;
      }
      p->partial[p->npartial++] = buf[i];
    }
  }
}

void fproc_pump(fproc_t *p, int64_t timeout_ms) {
  if (p->out_fd < 0)
    return;
  struct pollfd fd = {.fd = p->out_fd, .events = POLLIN};
  int n = poll(&fd, 1, (int)timeout_ms);
  if (n > 0)
    drain(p);
}

const char *fproc_expect(fproc_t *p, const char *needle, size_t *from,
                         int64_t timeout_ms) {
  int64_t deadline = fproc_now_us() + timeout_ms * 1000;
  size_t i = from ? *from : 0;
  for (;;) {
    for (; i < p->nlines; i++) {
      if (strstr(p->lines[i], needle)) {
        if (from)
          *from = i + 1;
        return p->lines[i];
      }
    }
    int64_t left = (deadline - fproc_now_us()) / 1000;
    if (left <= 0 || p->out_fd < 0) {
      if (p->out_fd >= 0)
        drain(p);
      for (; i < p->nlines; i++)
        if (strstr(p->lines[i], needle)) {
          if (from)
            *from = i + 1;
          return p->lines[i];
        }
      return NULL;
    }
    fproc_pump(p, left > 50 ? 50 : left);
  }
}

int64_t fproc_line_time(const fproc_t *p, size_t idx) {
  return idx < p->nlines ? p->line_us[idx] : INT64_MIN;
}

size_t fproc_count(const fproc_t *p, const char *needle) {
  size_t n = 0;
  for (size_t i = 0; i < p->nlines; i++)
    if (strstr(p->lines[i], needle))
      n++;
  return n;
}

const char *fproc_field_str(const char *line, const char *key, char *buf,
                            size_t n) {
  buf[0] = '\0';
  size_t kl = strlen(key);
  for (const char *s = line; (s = strstr(s, key)) != NULL; s += kl) {
    if ((s == line || s[-1] == ' ') && s[kl] == '=') {
      const char *v = s + kl + 1;
      size_t len = strcspn(v, " ");
      if (len >= n)
        len = n - 1;
      memcpy(buf, v, len);
      buf[len] = '\0';
      return buf;
    }
  }
  return buf;
}

int64_t fproc_field(const char *line, const char *key) {
  char buf[64];
  fproc_field_str(line, key, buf, sizeof buf);
  if (!buf[0])
    return INT64_MIN;
  return strtoll(buf, NULL, 10);
}

bool fproc_wait_exit(fproc_t *p, int64_t timeout_ms) {
  int64_t deadline = fproc_now_us() + timeout_ms * 1000;
  for (;;) {
    if (p->pid <= 0)
      return true;
    int st;
    pid_t r = waitpid(p->pid, &st, WNOHANG);
    if (r == p->pid) {
      p->status = st;
      p->exited = true;
      /* the group fproc made must not outlive its leader: note and stop
       * whatever is left in it (the dlock command's child) */
      if (p->own_group && kill(-p->pid, 0) == 0) {
        p->group_leftover = true;
        kill(-p->pid, SIGKILL);
      }
      p->pid = 0;
      reg(p, false);
      if (p->out_fd >= 0)
        fproc_pump(p, 0);
      return true;
    }
    if (fproc_now_us() >= deadline)
      return false;
    /* read its output meanwhile, so a chatty child never blocks */
    if (p->out_fd >= 0)
      fproc_pump(p, 5);
    else {
      struct timespec ts = {0, 5 * 1000000L};
      nanosleep(&ts, NULL);
    }
  }
}

int fproc_signal(fproc_t *p, int sig) {
  if (p->pid <= 0)
    return -1;
  return kill(p->own_group ? -p->pid : p->pid, sig);
}

void fproc_dump(const fproc_t *p) {
  fprintf(stderr, "---- %s: %zu lines ----\n", p->tag, p->nlines);
  for (size_t i = 0; i < p->nlines; i++)
    fprintf(stderr, "  %s\n", p->lines[i]);
}

void fproc_free(fproc_t *p) {
  if (!p)
    return;
  if (p->pid > 0) {
    kill(p->own_group ? -p->pid : p->pid, SIGKILL);
    waitpid(p->pid, NULL, 0);
    p->pid = 0;
  }
  reg(p, false);
  if (p->in_fd >= 0)
    close(p->in_fd);
  if (p->out_fd >= 0)
    close(p->out_fd);
  for (size_t i = 0; i < p->nlines; i++)
    free(p->lines[i]);
  free(p->lines);
  free(p->line_us);
  free(p);
}
