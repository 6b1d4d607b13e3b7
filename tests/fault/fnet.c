/*
 * fnet.c - private network namespace, iptables, and a delaying relay
 * (fnet.h).
 *
 * Design note. The namespace is made with unshare(CLONE_NEWNET) and its lo
 * brought up with SIOCSIFFLAGS, so no external tool is needed for that;
 * iptables is run as a child (bounded wait) only for the rules. The relay
 * is one thread in poll(): per connection pair and direction a FIFO of
 * chunks, each with the time it may be written (arrival + delay, never
 * earlier than the chunk before it, so order is kept and a "lost" chunk
 * holds back the ones behind it, as TCP's in-order delivery does). poll()
 * sleeps until readable/writable descriptors or the earliest due chunk.
 * The pair table and queues belong to the relay thread; the test thread
 * only sets the stop flag (atomic) and pokes a pipe. Stats are atomics.
 */
#define _GNU_SOURCE 1
#include "fnet.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int fnet_enter(char *why, size_t n) {
  if (unshare(CLONE_NEWNET) != 0) {
    snprintf(why, n, "unshare(CLONE_NEWNET): %s", strerror(errno));
    return -1;
  }
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
  if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) != 0) {
    snprintf(why, n, "lo flags: %s", strerror(errno));
    if (s >= 0)
      close(s);
    return -1;
  }
  ifr.ifr_flags |= IFF_UP;
  if (ioctl(s, SIOCSIFFLAGS, &ifr) != 0) {
    snprintf(why, n, "lo up: %s", strerror(errno));
    close(s);
    return -1;
  }
  close(s);
  return 0;
}

static const char *iptables_path(void) {
  static const char *const dirs[] = {"/usr/sbin", "/sbin", "/usr/bin", "/bin",
                                     "/usr/local/sbin"};
  static char path[256];
  struct stat st;
  for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
    snprintf(path, sizeof path, "%s/iptables", dirs[i]);
    if (stat(path, &st) == 0 && (st.st_mode & S_IXUSR))
      return path;
  }
  return NULL;
}

/* Runs iptables with args; quiet: keep its stderr to ourselves; out (may
 * be NULL): its stdout. */
static int run_iptables(const char *args, bool quiet, char *out, size_t n) {
  const char *exe = iptables_path();
  if (!exe)
    return -1;
  char buf[512];
  snprintf(buf, sizeof buf, "%s", args);
  char *argv[40];
  int argc = 0;
  argv[argc++] = (char *)exe;
  argv[argc++] = "-w";
  argv[argc++] = "5";
  for (char *save = NULL, *t = strtok_r(buf, " ", &save); t && argc < 39;
       t = strtok_r(NULL, " ", &save))
    argv[argc++] = t;
  argv[argc] = NULL;
  int pfd[2] = {-1, -1};
  if (out && pipe2(pfd, O_CLOEXEC) != 0)
    return -1;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    if (out)
      dup2(pfd[1], 1);
    if (quiet) {
      int dn = open("/dev/null", O_WRONLY);
      if (dn >= 0) {
        dup2(dn, 2);
        if (!out)
          dup2(dn, 1);
      }
    }
    execv(exe, argv);
    _exit(127);
  }
  size_t got = 0;
  if (out) {
    close(pfd[1]);
    fcntl(pfd[0], F_SETFL, O_NONBLOCK);
    out[0] = '\0';
  }
  int64_t deadline = now_us() + 15 * 1000000LL;
  for (;;) {
    int st;
    if (out) {
      ssize_t r;
      while (got + 1 < n && (r = read(pfd[0], out + got, n - 1 - got)) > 0)
        got += (size_t)r;
      out[got] = '\0';
    }
    pid_t r = waitpid(pid, &st, WNOHANG);
    if (r == pid) {
      if (out) {
        ssize_t rr;
        while (got + 1 < n && (rr = read(pfd[0], out + got, n - 1 - got)) > 0)
          got += (size_t)rr;
        out[got] = '\0';
        close(pfd[0]);
      }
      if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return 0;
      if (!quiet)
        fprintf(stderr, "fnet: iptables %s: status 0x%x\n", args, st);
      return -1;
    }
    if (now_us() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
      if (out)
        close(pfd[0]);
      fprintf(stderr, "fnet: iptables %s: no answer in 15 s\n", args);
      return -1;
    }
    struct timespec ts = {0, 5 * 1000000L};
    nanosleep(&ts, NULL);
  }
}

bool fnet_have_iptables(char *why, size_t n) {
  if (!iptables_path()) {
    snprintf(why, n, "no iptables binary (Debian package iptables)");
    return false;
  }
  if (run_iptables("-S OUTPUT", true, NULL, 0) != 0) {
    snprintf(why, n, "iptables does not work here (no netfilter?)");
    return false;
  }
  return true;
}

int fnet_iptables(const char *args) {
  return run_iptables(args, false, NULL, 0);
}

int fnet_iptables_out(const char *args, char *out, size_t n) {
  return run_iptables(args, false, out, n);
}

/* ---------------------------------------------------------------- relay */

#define RELAY_PAIRS 64

typedef struct chunk {
  struct chunk *next;
  int64_t due;
  size_t len, off;
  char data[];
} chunk_t;

typedef struct dir {
  chunk_t *head, *tail;
  int64_t last_due;
} dir_t;

typedef struct pair {
  int fd[2];  /* 0 client side, 1 server side; -1 unused */
  dir_t q[2]; /* q[i]: bytes read from fd[i], to be written to fd[1-i] */
} pair_t;

struct fnet_relay {
  int listen_fd, wake[2], target, port;
  int64_t delay_us, rto_us;
  double loss;
  uint64_t rnd;
  atomic_bool stop;
  _Atomic int64_t chunks, lost;
  pthread_t th;
  pair_t pairs[RELAY_PAIRS];
};

static void dir_clear(dir_t *d) {
  while (d->head) {
    chunk_t *c = d->head;
    d->head = c->next;
    free(c);
  }
  d->tail = NULL;
  d->last_due = 0;
}

static void pair_close(pair_t *p) {
  for (int i = 0; i < 2; i++) {
    if (p->fd[i] >= 0)
      close(p->fd[i]);
    p->fd[i] = -1;
    dir_clear(&p->q[i]);
  }
}

static double rnd01(fnet_relay_t *r) {
  uint64_t x = r->rnd;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  r->rnd = x;
  return (double)(x >> 11) / 9007199254740992.0;
}

/* Reads from p->fd[i] into its queue; -1 on EOF/error. */
static int relay_read(fnet_relay_t *r, pair_t *p, int i) {
  char buf[16384];
  ssize_t n = read(p->fd[i], buf, sizeof buf);
  if (n < 0)
    return errno == EINTR || errno == EAGAIN ? 0 : -1;
  if (n == 0)
    return -1;
  chunk_t *c = malloc(sizeof *c + (size_t)n);
  if (!c)
    return -1;
  memcpy(c->data, buf, (size_t)n);
  c->len = (size_t)n;
  c->off = 0;
  c->next = NULL;
  int64_t due = now_us() + r->delay_us;
  if (r->loss > 0 && rnd01(r) * 100.0 < r->loss) {
    due += r->rto_us;
    atomic_fetch_add(&r->lost, 1);
  }
  dir_t *d = &p->q[i];
  if (due < d->last_due)
    due = d->last_due;
  c->due = d->last_due = due;
  if (d->tail)
    d->tail->next = c;
  else
    d->head = c;
  d->tail = c;
  atomic_fetch_add(&r->chunks, 1);
  return 0;
}

/* Writes the due chunks of queue i to p->fd[1-i]; -1 on error. */
static int relay_flush(pair_t *p, int i, int64_t now) {
  dir_t *d = &p->q[i];
  while (d->head && d->head->due <= now) {
    chunk_t *c = d->head;
    ssize_t w = write(p->fd[1 - i], c->data + c->off, c->len - c->off);
    if (w < 0)
      return errno == EAGAIN || errno == EINTR ? 0 : -1;
    c->off += (size_t)w;
    if (c->off < c->len)
      return 0;
    d->head = c->next;
    if (!d->head)
      d->tail = NULL;
    free(c);
  }
  return 0;
}

static int connect_target(int port) {
  int u = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (u < 0)
    return -1;
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons((uint16_t)port);
  if (connect(u, (struct sockaddr *)&a, sizeof a) != 0) {
    close(u);
    return -1;
  }
  int one = 1;
  setsockopt(u, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(u, F_SETFL, O_NONBLOCK);
  return u;
}

static void *relay_main(void *arg) {
  fnet_relay_t *r = arg;
  while (!atomic_load(&r->stop)) {
    struct pollfd fds[2 + 2 * RELAY_PAIRS];
    int map[2 + 2 * RELAY_PAIRS];
    int n = 0;
    int64_t now = now_us(), next_due = INT64_MAX;
    fds[n] = (struct pollfd){.fd = r->wake[0], .events = POLLIN};
    map[n++] = -1;
    fds[n] = (struct pollfd){.fd = r->listen_fd, .events = POLLIN};
    map[n++] = -2;
    for (int k = 0; k < RELAY_PAIRS; k++) {
      pair_t *p = &r->pairs[k];
      if (p->fd[0] < 0)
        continue;
      for (int i = 0; i < 2; i++) {
        short ev = POLLIN;
        const chunk_t *h = p->q[1 - i].head; /* what waits to go to fd[i] */
        if (h && h->due <= now)
          ev |= POLLOUT;
        else if (h && h->due < next_due)
          next_due = h->due;
        fds[n] = (struct pollfd){.fd = p->fd[i], .events = ev};
        map[n++] = 2 * k + i;
      }
    }
    int timeout = 1000;
    if (next_due != INT64_MAX) {
      int64_t ms = (next_due - now + 999) / 1000;
      timeout = ms < 0 ? 0 : ms > 1000 ? 1000 : (int)ms;
    }
    if (poll(fds, (nfds_t)n, timeout) < 0 && errno != EINTR)
      break;
    now = now_us();
    for (int k = 0; k < n; k++) {
      if (map[k] == -1) {
        if (fds[k].revents) {
          char b[64];
          while (read(r->wake[0], b, sizeof b) > 0) {
          }
        }
        continue;
      }
      if (map[k] == -2) {
        if (!(fds[k].revents & POLLIN))
          continue;
        int c = accept4(r->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0)
          continue;
        int slot = -1;
        for (int i = 0; i < RELAY_PAIRS && slot < 0; i++)
          if (r->pairs[i].fd[0] < 0)
            slot = i;
        int u = slot < 0 ? -1 : connect_target(r->target);
        if (u < 0) {
          close(c);
          continue;
        }
        int one = 1;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        r->pairs[slot].fd[0] = c;
        r->pairs[slot].fd[1] = u;
        continue;
      }
      pair_t *p = &r->pairs[map[k] / 2];
      int i = map[k] % 2;
      if (p->fd[0] < 0)
        continue; /* closed earlier in this round */
      int rc = 0;
      if (fds[k].revents & (POLLIN | POLLHUP | POLLERR))
        rc = relay_read(r, p, i);
      if (rc == 0)
        rc = relay_flush(p, 1 - i, now);
      if (rc < 0)
        pair_close(p);
    }
  }
  for (int k = 0; k < RELAY_PAIRS; k++)
    pair_close(&r->pairs[k]);
  return NULL;
}

fnet_relay_t *fnet_relay_start(int target_port, int64_t delay_ms,
                               double loss_pct, int64_t rto_ms) {
  fnet_relay_t *r = calloc(1, sizeof *r);
  if (!r)
    return NULL;
  r->target = target_port;
  r->delay_us = delay_ms * 1000;
  r->loss = loss_pct;
  r->rto_us = rto_ms * 1000;
  r->rnd = (uint64_t)now_us() | 1;
  for (int k = 0; k < RELAY_PAIRS; k++)
    r->pairs[k].fd[0] = r->pairs[k].fd[1] = -1;
  r->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (r->listen_fd < 0 ||
      bind(r->listen_fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      listen(r->listen_fd, 64) != 0 ||
      getsockname(r->listen_fd, (struct sockaddr *)&a, &len) != 0 ||
      pipe2(r->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    fprintf(stderr, "fnet: relay: %s\n", strerror(errno));
    if (r->listen_fd >= 0)
      close(r->listen_fd);
    free(r);
    return NULL;
  }
  r->port = ntohs(a.sin_port);
  if (pthread_create(&r->th, NULL, relay_main, r) != 0) {
    close(r->listen_fd);
    close(r->wake[0]);
    close(r->wake[1]);
    free(r);
    return NULL;
  }
  return r;
}

int fnet_relay_port(const fnet_relay_t *r) { return r->port; }

void fnet_relay_stats(fnet_relay_t *r, int64_t *chunks, int64_t *lost) {
  *chunks = atomic_load(&r->chunks);
  *lost = atomic_load(&r->lost);
}

void fnet_relay_stop(fnet_relay_t *r) {
  if (!r)
    return;
  atomic_store(&r->stop, true);
  ssize_t w = write(r->wake[1], "x", 1);
  (void)w;
  pthread_join(r->th, NULL);
  close(r->listen_fd);
  close(r->wake[0]);
  close(r->wake[1]);
  free(r);
}
