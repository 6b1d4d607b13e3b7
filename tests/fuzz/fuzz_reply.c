/*
 * fuzz_reply.c - libFuzzer target for every reply the library reads: a
 * fake server on a Unix socket answers the library's commands with the
 * fuzzer's bytes while the public API runs a short program of calls.
 *
 * Design note
 * - Why a fake server: a real redis-server only sends well-formed replies.
 *   This one sends whatever the input says - wrong types, nested and
 *   oversized arrays, huge integers, error lines, truncated frames, data
 *   nobody asked for, pub/sub pushes, closed connections - to the whole
 *   reading path: src/net/conn.c over hiredis's redisReader, the reply
 *   checks of src/redis/redis.c (handshake, scripts, queries, state,
 *   renewal) and the pub/sub reader of src/redis/watch.c with the wait
 *   bookkeeping of src/redis/channels.c behind it.
 * - Input: byte 0 flags (credentials, db, client name, short watchdog,
 *   lock name with braces, and in the top two bits the lock kind:
 *   reentrant, fenced, fair, or read with a write handle beside it), byte 1 the program length (1..8), then that
 *   many op bytes (ping, acquire/release in several forms, queries, state,
 *   a pause), then records: [ctl][len lo][len hi][payload]. Each command the
 *   server receives (on any connection) takes the next record as its
 *   answer. ctl bit 0: close that connection after sending; bit 1: a push,
 *   sent to the pub/sub connection before the next answer is taken. In a
 *   payload, \x01 k stands for argument k of the command being answered as
 *   a bulk string, \x02 k for argument k of the last (UN)SUBSCRIBE (channel
 *   names carry the random client id), \x03 for the hand-off payload
 *   "<tid>:<seq>" of the last queued acquire (so grants can reach a real
 *   waiter). When the server has been quiet for 10 ms it sends the next
 *   record anyway, to the connection it answered last (the rest of a
 *   truncated reply, or stray data). With no record left it closes
 *   everything and stops listening, so every call ends quickly with a
 *   backend error (a wait rides out that outage for 50 ms at most: the
 *   client's outage grace).
 * - Threads: the server is one poll() thread per input, started before the
 *   client and joined after dlock_client_free(); it shares nothing with the
 *   library. The program runs on the fuzzer's thread.
 * - Checks besides the sanitizers: every call returns 0 or a code of the
 *   table (acquire never a positive value), failed creation leaves *out
 *   NULL, counts are >= 0, a state snapshot is self-consistent, and log
 *   messages are bounded single strings. Timeouts are short (connect
 *   100 ms, command 60 ms) so an input costs milliseconds.
 */
#define _GNU_SOURCE 1

#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "dlock/dlock.h"

#define FCHECK(cond)                                                           \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "fuzz_reply: %s:%d: check failed: %s\n", __FILE__,       \
              __LINE__, #cond);                                                \
      abort();                                                                 \
    }                                                                          \
  } while (0)

#define MAX_CONNS 16
#define IDLE_MS 10
#define PASSWORD "fz-secret-PW-9"

/* ------------------------------------------------------------ utilities */

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

typedef struct buf {
  char *p;
  size_t n, cap;
} buf_t;

static void buf_add(buf_t *b, const void *d, size_t n) {
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + n)
      cap *= 2;
    char *np = realloc(b->p, cap);
    FCHECK(np != NULL);
    b->p = np;
    b->cap = cap;
  }
  memcpy(b->p + b->n, d, n);
  b->n += n;
}

static void buf_bulk(buf_t *b, const char *s, size_t n) {
  char hdr[32];
  int h = snprintf(hdr, sizeof hdr, "$%zu\r\n", n);
  buf_add(b, hdr, (size_t)h);
  buf_add(b, s, n);
  buf_add(b, "\r\n", 2);
}

/* ---------------------------------------------------------- fake server */

typedef struct record {
  uint8_t ctl;
  const uint8_t *p;
  size_t n;
} record_t;

#define CTL_CLOSE 1
#define CTL_PUSH 2

typedef struct conn {
  int fd;
  redisReader *rd;
  bool pubsub;
} conn_t;

typedef struct server {
  char path[108];
  int lfd;
  int wake[2];
  pthread_t th;
  const record_t *recs;
  size_t nrecs, next;
  conn_t conns[MAX_CONNS];
  int nconns;
  int last; /* index of the connection answered last, or -1 */
  int64_t last_activity;
  char grant[64]; /* "<tid>:<seq>" of the last queued acquire */
  char *sub[8];   /* arguments of the last (UN)SUBSCRIBE */
  size_t sublen[8], nsub;
  /* the command being answered */
  redisReply *cmd;
} server_t;

static void conn_close(server_t *s, int i) {
  close(s->conns[i].fd);
  redisReaderFree(s->conns[i].rd);
  s->conns[i] = s->conns[--s->nconns];
  if (s->last == i)
    s->last = -1;
  else if (s->last == s->nconns)
    s->last = i;
}

static void close_all(server_t *s) {
  while (s->nconns > 0)
    conn_close(s, s->nconns - 1);
  if (s->lfd >= 0) {
    close(s->lfd);
    s->lfd = -1;
    unlink(s->path);
  }
}

static void send_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w <= 0)
      return; /* the client is not reading or is gone: drop the rest */
    p += w;
    n -= (size_t)w;
  }
}

/* Expands the templates of a payload for the command s->cmd. */
static void expand(server_t *s, const record_t *r, buf_t *out) {
  for (size_t i = 0; i < r->n; i++) {
    uint8_t ch = r->p[i];
    if (ch == 1 && i + 1 < r->n && s->cmd && s->cmd->elements > 0) {
      const redisReply *a = s->cmd->element[r->p[++i] % s->cmd->elements];
      buf_bulk(out, a->str ? a->str : "", a->str ? a->len : 0);
    } else if (ch == 2 && i + 1 < r->n && s->nsub > 0) {
      size_t k = r->p[++i] % s->nsub;
      buf_bulk(out, s->sub[k], s->sublen[k]);
    } else if (ch == 3) {
      buf_bulk(out, s->grant, strlen(s->grant));
    } else {
      buf_add(out, &ch, 1);
    }
  }
}

static int find_conn(const server_t *s, int fd) {
  for (int k = 0; k < s->nconns; k++)
    if (s->conns[k].fd == fd)
      return k;
  return -1;
}

/* Sends record r to the connection on fd (or, for a push, to the pub/sub
 * one). Connections are found by fd each time: closing one moves another
 * into its slot. */
static void send_record(server_t *s, const record_t *r, int fd) {
  int i = find_conn(s, fd);
  if (r->ctl & CTL_PUSH) {
    i = -1;
    for (int k = 0; k < s->nconns; k++)
      if (s->conns[k].pubsub)
        i = k;
  }
  if (i < 0)
    return;
  buf_t b = {0};
  expand(s, r, &b);
  send_all(s->conns[i].fd, b.p ? b.p : "", b.n);
  free(b.p);
  if (!(r->ctl & CTL_PUSH))
    s->last = i;
  if (r->ctl & CTL_CLOSE)
    conn_close(s, i);
}

static void sub_clear(server_t *s) {
  for (size_t k = 0; k < s->nsub; k++)
    free(s->sub[k]);
  s->nsub = 0;
}

static bool arg_is(const redisReply *a, const char *s) {
  return a->type == REDIS_REPLY_STRING && a->len == strlen(s) &&
         strncasecmp(a->str, s, a->len) == 0;
}

/* Notes what later answers may refer to: the pub/sub connection, and the
 * hand-off payload of a queued acquire (member "<cid>:<tid>:<seq>:<ms>",
 * argument 8 of the acquire script's EVALSHA/EVAL). */
static void note_command(server_t *s, int i, const redisReply *cmd) {
  if (cmd->type != REDIS_REPLY_ARRAY || cmd->elements == 0)
    return;
  const redisReply *a0 = cmd->element[0];
  if (arg_is(a0, "SUBSCRIBE") || arg_is(a0, "UNSUBSCRIBE")) {
    s->conns[i].pubsub = true;
    sub_clear(s);
    for (size_t k = 0; k < cmd->elements && k < 8; k++) {
      const redisReply *a = cmd->element[k];
      size_t n = a->str ? a->len : 0;
      FCHECK((s->sub[k] = malloc(n + 1)) != NULL);
      memcpy(s->sub[k], a->str ? a->str : "", n);
      s->sub[k][n] = '\0';
      s->sublen[k] = n;
      s->nsub = k + 1;
    }
  }
  if ((arg_is(a0, "EVALSHA") || arg_is(a0, "EVAL")) && cmd->elements == 11 &&
      cmd->element[8]->type == REDIS_REPLY_STRING && cmd->element[8]->len > 0) {
    const char *m = cmd->element[8]->str;
    const char *c1 = strchr(m, ':');
    const char *c3 = c1 ? strrchr(m, ':') : NULL;
    if (c1 && c3 && c3 > c1 + 1 && (size_t)(c3 - c1 - 1) < sizeof s->grant)
      snprintf(s->grant, sizeof s->grant, "%.*s", (int)(c3 - c1 - 1), c1 + 1);
  }
}

/* Answers one command from the connection on fd with the next record(s). */
static void answer(server_t *s, int fd, redisReply *cmd) {
  s->cmd = cmd;
  int i = find_conn(s, fd);
  if (i >= 0)
    note_command(s, i, cmd);
  while (s->next < s->nrecs && (s->recs[s->next].ctl & CTL_PUSH))
    send_record(s, &s->recs[s->next++], fd);
  if (s->next >= s->nrecs) {
    close_all(s); /* nothing left to say */
  } else {
    send_record(s, &s->recs[s->next++], fd);
  }
  s->cmd = NULL;
  s->last_activity = now_ms();
}

static void read_conn(server_t *s, int i) {
  char tmp[16384];
  ssize_t n = recv(s->conns[i].fd, tmp, sizeof tmp, MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
    conn_close(s, i);
    return;
  }
  if (n < 0)
    return;
  conn_t *c = &s->conns[i];
  int fd = c->fd;
  if (redisReaderFeed(c->rd, tmp, (size_t)n) != REDIS_OK) {
    conn_close(s, i);
    return;
  }
  for (;;) {
    /* the connection may have moved or closed while answering */
    int k = find_conn(s, fd);
    if (k < 0)
      return;
    void *r = NULL;
    if (redisReaderGetReply(s->conns[k].rd, &r) != REDIS_OK) {
      conn_close(s, k);
      return;
    }
    if (!r)
      return;
    answer(s, fd, r);
    freeReplyObject(r);
  }
}

static void *server_main(void *arg) {
  server_t *s = arg;
  s->last_activity = now_ms();
  for (;;) {
    struct pollfd p[MAX_CONNS + 2];
    int n = 0;
    p[n++] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
    int lidx = -1;
    if (s->lfd >= 0) {
      lidx = n;
      p[n++] = (struct pollfd){.fd = s->lfd, .events = POLLIN};
    }
    int first = n;
    for (int i = 0; i < s->nconns; i++)
      p[n++] = (struct pollfd){.fd = s->conns[i].fd, .events = POLLIN};
    int r = poll(p, (nfds_t)n, 5);
    if (r < 0 && errno != EINTR)
      break;
    if (p[0].revents)
      break;
    if (r > 0) {
      /* remember the fds first: answering may close and reorder conns */
      int fds[MAX_CONNS], ready[MAX_CONNS], nready = 0;
      for (int i = 0; i < s->nconns; i++)
        if (p[first + i].revents) {
          fds[nready] = s->conns[i].fd;
          ready[nready++] = 1;
        }
      for (int j = 0; j < nready; j++) {
        for (int i = 0; i < s->nconns; i++)
          if (ready[j] && s->conns[i].fd == fds[j]) {
            read_conn(s, i);
            break;
          }
      }
      if (lidx >= 0 && s->lfd >= 0 && p[lidx].revents) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) {
          if (s->nconns >= MAX_CONNS) {
            close(fd);
          } else {
            s->conns[s->nconns].fd = fd;
            s->conns[s->nconns].rd = redisReaderCreate();
            s->conns[s->nconns].pubsub = false;
            FCHECK(s->conns[s->nconns].rd != NULL);
            s->nconns++;
          }
        }
      }
    }
    /* quiet for a while: the rest of a truncated reply, or stray data */
    if (now_ms() - s->last_activity >= IDLE_MS && s->last >= 0 &&
        s->next < s->nrecs) {
      send_record(s, &s->recs[s->next++], s->conns[s->last].fd);
      s->last_activity = now_ms();
    }
  }
  close_all(s);
  sub_clear(s);
  return NULL;
}

static char g_dir[64];

static void remove_dir(void) {
  if (g_dir[0])
    rmdir(g_dir);
}

static bool server_start(server_t *s, const record_t *recs, size_t n) {
  memset(s, 0, sizeof *s);
  s->recs = recs;
  s->nrecs = n;
  s->last = -1;
  s->lfd = -1;
  if (!g_dir[0]) {
    snprintf(g_dir, sizeof g_dir, "/tmp/dlock-fuzz-XXXXXX");
    FCHECK(mkdtemp(g_dir) != NULL);
    atexit(remove_dir);
  }
  snprintf(s->path, sizeof s->path, "%s/s.sock", g_dir);
  unlink(s->path);
  s->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  FCHECK(s->lfd >= 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", s->path);
  FCHECK(bind(s->lfd, (struct sockaddr *)&sa, sizeof sa) == 0);
  FCHECK(listen(s->lfd, 16) == 0);
  FCHECK(pipe2(s->wake, O_CLOEXEC) == 0);
  FCHECK(pthread_create(&s->th, NULL, server_main, s) == 0);
  return true;
}

static void server_stop(server_t *s) {
  char b = 1;
  FCHECK(write(s->wake[1], &b, 1) == 1);
  pthread_join(s->th, NULL);
  close(s->wake[0]);
  close(s->wake[1]);
}

/* ------------------------------------------------------------ the client */

static atomic_int g_log_lines;

static void on_log(void *ud, dlock_log_level_t level, const char *msg) {
  (void)ud;
  FCHECK(level >= DLOCK_LOG_ERROR && level <= DLOCK_LOG_DEBUG);
  FCHECK(msg != NULL && strnlen(msg, 4096) < 4096);
  atomic_fetch_add(&g_log_lines, 1);
}

static void on_lost(void *ud, const char *name, uint64_t tid,
                    dlock_lost_reason_t reason) {
  (void)ud;
  (void)tid;
  FCHECK(name != NULL && name[0] != '\0');
  FCHECK(reason == DLOCK_LOST_GONE || reason == DLOCK_LOST_UNREACHABLE);
}

static bool g_verbose; /* FUZZ_VERBOSE=1: print each call's outcome */

/* FUZZ_SKIP=name,...: leave out the named checks, to look past a finding
 * already reported while it is being fixed (never set in CI). */
static bool skip(const char *check) {
  const char *s = getenv("FUZZ_SKIP");
  return s && strstr(s, check);
}

/* A code of the table (or 0). */
static void check_code(int rc) {
  if (g_verbose)
    fprintf(stderr, "  -> %s \"%s\"\n", dlock_err_name(rc), dlock_last_error());
  FCHECK(rc <= 0);
  FCHECK(rc == 0 || strcmp(dlock_err_name(rc), "DLOCK_E?") != 0);
  FCHECK(strnlen(dlock_last_error(), 4096) < 4096);
}

static void check_state(const dlock_lock_state_t *st, const char *name) {
  FCHECK(st != NULL && st->name != NULL && strcmp(st->name, name) == 0);
  FCHECK(st->kind != NULL &&
         (strcmp(st->kind, "free") == 0 || strcmp(st->kind, "reentrant") == 0 ||
          strcmp(st->kind, "fenced") == 0 || strcmp(st->kind, "fair") == 0 ||
          strcmp(st->kind, "read") == 0 || strcmp(st->kind, "write") == 0));
  FCHECK(st->nholders == 0 || st->holders != NULL);
  for (size_t i = 0; i < st->nholders; i++)
    FCHECK(st->holders[i].owner != NULL);
  FCHECK(st->nwaiters == 0 || st->waiters != NULL);
  for (size_t i = 0; i < st->nwaiters; i++)
    FCHECK(st->waiters[i] != NULL);
}

#define F_PASSWORD 0x01
#define F_USER 0x02
#define F_DB 0x04
#define F_NAME 0x08
#define F_WATCHDOG 0x10
#define F_BRACES 0x20
#define F_KIND_SHIFT 6

static void run_op(dlock_lock_t *l, dlock_lock_t *other, uint8_t op,
                   const char *name) {
  bool b = false;
  int64_t v = 0;
  int rc;
  if (g_verbose)
    fprintf(stderr, " op %d\n", op % 11);
  switch (op % 11) {
  case 0:
    if (dlock_lock_kind(l) == DLOCK_FENCED) {
      v = -1;
      rc = dlock_lock_acquire_fenced(l, 0, 1000, &v);
      check_code(rc);
      FCHECK(rc != 0 || v >= 0);
    } else {
      rc = dlock_lock_acquire(l, 0, 1000);
      check_code(rc);
    }
    break;
  case 1:
    rc = dlock_lock_acquire(l, 30, DLOCK_LEASE_WATCHDOG);
    check_code(rc);
    break;
  case 2:
    rc = dlock_lock_acquire(l, DLOCK_WAIT_FOREVER, 500);
    check_code(rc);
    break;
  case 3:
    check_code(dlock_lock_release(l));
    break;
  case 4:
    rc = dlock_lock_force_release(l, &b);
    check_code(rc);
    break;
  case 5:
    check_code(dlock_lock_is_locked(l, &b));
    check_code(dlock_lock_is_held_by_thread(l, &b));
    break;
  case 6:
    rc = dlock_lock_hold_count(l, &v);
    check_code(rc);
    if (rc == 0 && !skip("negative-count"))
      FCHECK(v >= 0);
    check_code(dlock_lock_remaining_lease(l, &v));
    break;
  case 7: {
    dlock_lock_state_t *st = NULL;
    rc = dlock_lock_state(l, &st);
    check_code(rc);
    if (rc == 0)
      check_state(st, name);
    else
      FCHECK(st == NULL);
    dlock_lock_state_free(st);
    break;
  }
  case 8:
    check_code(dlock_lock_acquire_as(other, 7, 20, DLOCK_LEASE_WATCHDOG));
    check_code(dlock_lock_release_as(other, 7));
    break;
  case 9:
    sleep_ms(12); /* the background thread's turn: renewals, pushes */
    break;
  default:
    break;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  g_verbose = getenv("FUZZ_VERBOSE") != NULL;
  if (size < 2)
    return 0;
  uint8_t flags = data[0];
  size_t nops = (size_t)(data[1] % 8) + 1;
  if (size < 2 + nops)
    return 0;
  const uint8_t *ops = data + 2;
  /* the records */
  record_t recs[256];
  size_t nrecs = 0;
  for (size_t at = 2 + nops; at < size && nrecs < 256;) {
    uint8_t ctl = data[at++];
    size_t len = 0;
    if (at < size)
      len = data[at++];
    if (at < size)
      len |= (size_t)data[at++] << 8;
    if (len > size - at)
      len = size - at;
    recs[nrecs++] = (record_t){ctl, data + at, len};
    at += len;
  }

  server_t srv;
  server_start(&srv, recs, nrecs);
  char url[200];
  snprintf(url, sizeof url, "unix://%s%s", srv.path,
           (flags & F_DB) ? "?db=3" : "");

  dlock_options_t *o = NULL;
  FCHECK(dlock_options_new(&o) == 0);
  FCHECK(dlock_options_set_connect_timeout(o, 100) == 0);
  FCHECK(dlock_options_set_command_timeout(o, 60) == 0);
  FCHECK(dlock_options_set_pool_size(o, 2) == 0);
  /* a wait rides out an outage for this long (the server gone at the end
   * of the input), so that every call still ends quickly */
  FCHECK(dlock_options_set_outage_grace(o, 50) == 0);
  FCHECK(dlock_options_set_log_callback(o, on_log, NULL, DLOCK_LOG_DEBUG) == 0);
  FCHECK(dlock_options_set_lost_callback(o, on_lost, NULL) == 0);
  if (flags & F_PASSWORD)
    FCHECK(dlock_options_set_credentials(o, (flags & F_USER) ? "fz-user" : NULL,
                                         PASSWORD) == 0);
  if (flags & F_NAME)
    FCHECK(dlock_options_set_client_name(o, "fz-client") == 0);
  if (flags & F_WATCHDOG)
    FCHECK(dlock_options_set_watchdog_timeout(o, 30) == 0);

  dlock_client_t *c = (dlock_client_t *)&srv; /* must be overwritten */
  int rc = dlock_client_new(&c, url, o);
  dlock_options_free(o);
  check_code(rc);
  if (rc != 0) {
    FCHECK(c == NULL);
    server_stop(&srv);
    return 0;
  }
  FCHECK(c != NULL);
  const char *name = (flags & F_BRACES) ? "a{fz}b" : "fz";
  static const dlock_lock_kind_t kinds[4] = {DLOCK_REENTRANT, DLOCK_FENCED,
                                            DLOCK_FAIR, DLOCK_READ};
  dlock_lock_kind_t kind = kinds[(flags >> F_KIND_SHIFT) & 3];
  dlock_lock_t *l = NULL, *other = NULL;
  FCHECK(dlock_lock_new_kind(c, name, kind, &l) == 0);
  FCHECK(dlock_lock_new_kind(c, name, kind == DLOCK_READ ? DLOCK_WRITE : kind,
                             &other) == 0);
  for (size_t i = 0; i < nops; i++) {
    if (ops[i] % 11 == 10)
      check_code(dlock_client_ping(c));
    else
      run_op(l, other, ops[i], name);
  }
  dlock_lock_free(other);
  dlock_lock_free(l);
  dlock_client_free(c);
  server_stop(&srv);
  return 0;
}
