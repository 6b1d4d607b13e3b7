/*
 * fault_worker.c - a lock-using client process for the fault suite.
 *
 * Design note. The fault tests fork/exec this program so that holders and
 * waiters are real, separate processes that can be killed, paused and cut
 * off. It uses libdlock only through the public API and writes every hold
 * through the fenced resource (fence.h): grant -> token -> fence_begin ->
 * writes -> fence_end -> release.
 *
 * --kind reentrant|fair|fenced|read|write|rw picks the lock kind (default
 * reentrant). The token is the lock's own fencing token for `fenced`
 * (dlock_lock_acquire_fenced, drawn with the grant), an INCR on the lock
 * server for the other kinds (--token-server names it where the URL does
 * not: a cluster's master of the lock's slot). Read holds are shared holds for the checker
 * (fence_begin_as/fence_write_as): their "writes" are reads. `rw` (contend
 * only) takes the read or the write side of each lock at random, per cycle.
 * `permit --limit N` holds permits of the permit semaphore of each name
 * (created with N permits by try_set_permits, first come): the resource is
 * given capacity N (fence_set_capacity), the token is the INCR one (a
 * permit has none), a holder leaves the resource's open set right before
 * it releases (fence_leave), and there is no re-entry. A permit's lost callback
 * carries no thread id: hold mode (one permit) takes it as its own; a
 * contend thread learns of a lost permit from its release (DLOCK_ELOST).
 * A hold is a handle_t, a lock handle or a permit semaphore handle with the
 * permit it holds, so both modes run one code path for every kind.
 *
 * Two modes:
 *   hold     one lock, held by the main thread. Acquires at start, then
 *            writes every --write-every ms and obeys one-word commands on
 *            stdin: release, acquire, ping, quit (EOF = quit). --hold-ms
 *            releases and quits by itself after that long.
 *   contend  --threads threads share one client and loop over the locks of
 *            --name (comma-separated) for --duration ms or --iters
 *            iterations: mostly waiting acquires, some try-once, some
 *            re-entrant, some with a fixed lease, a few long holds that
 *            need renewals, and every --churn iterations a short-lived
 *            client of its own (client lifecycle).
 *
 * Everything the test needs is printed on stdout, one line per event, each
 * line written with one write(2) (the lost callback prints from the
 * library's background thread): READY, ACQUIRED, ACQFAIL, WRITE, LOST,
 * RELEASED, PING, RSS, LOG (library warnings), DONE. Times are CLOCK_MONOTONIC
 * microseconds, shared with the test process.
 *
 * Threads: main (hold mode: everything; contend: supervisor), contend
 * threads, the library's background thread (lost callback: atomics and one
 * write only). The process dies with its parent (PR_SET_PDEATHSIG) and
 * after --max-life ms at the latest (alarm), so no run leaves it behind.
 */
#define _GNU_SOURCE 1
#include "fence.h"

#include <dlock/dlock.h>
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define MAX_LOCKS 16
#define MAX_THREADS 32
#define KIND_RW 100 /* contend: the read or the write side, at random */
#define KIND_PERMIT 101 /* permits of a permit semaphore (--limit N) */

static struct cfg {
  const char *url, *tag, *mode;
  char res_host[64];
  int res_port;
  char lock_host[64];
  int lock_port;
  char *locks[MAX_LOCKS];
  int nlocks;
  int64_t watchdog_ms, lease_ms, wait_ms, connect_ms, command_ms;
  int64_t write_every_ms, hold_ms, duration_ms, max_life_ms, rss_at_ms;
  int64_t fair_thread_wait_ms;
  int64_t session_ms; /* ZooKeeper session, etcd lease TTL (0: default) */
  int threads, iters, retry, churn, log_level, limit;
  bool stop_on_lost;
  int kind; /* a dlock_lock_kind_t, KIND_RW or KIND_PERMIT */
} cfg = {.lease_ms = DLOCK_LEASE_WATCHDOG,
         .wait_ms = DLOCK_WAIT_FOREVER,
         .connect_ms = 2000,
         .command_ms = 2000,
         .write_every_ms = 50,
         .max_life_ms = 120000,
         .threads = 1,
         .log_level = DLOCK_LOG_WARN,
         .retry = 0};

/* One line to stdout in one write(2). */
__attribute__((format(printf, 1, 2))) static void emit(const char *fmt, ...) {
  char buf[1024];
  int n = snprintf(buf, sizeof buf, "%s ", cfg.tag);
  va_list ap;
  va_start(ap, fmt);
  n += vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
  va_end(ap);
  if (n > (int)sizeof buf - 2)
    n = (int)sizeof buf - 2;
  buf[n++] = '\n';
  for (int off = 0; off < n;) {
    ssize_t w = write(1, buf + off, (size_t)(n - off));
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      break;
    off += (int)w;
  }
}

__attribute__((noreturn, format(printf, 1, 2))) static void die(const char *fmt,
                                                                ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "fault_worker %s: %s (last error: %s)\n", cfg.tag, buf,
          dlock_last_error());
  emit("FATAL %s", buf);
  exit(3);
}

static bool is_backend_err(int rc) {
  return rc == DLOCK_EUNAVAILABLE || rc == DLOCK_EIOTIMEOUT ||
         rc == DLOCK_ESERVER || rc == DLOCK_EPROTO;
}

static long rss_kb(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long pages = 0, res = 0;
  if (!f)
    return -1;
  if (fscanf(f, "%ld %ld", &pages, &res) != 2)
    res = -1;
  fclose(f);
  return res < 0 ? -1 : res * (sysconf(_SC_PAGESIZE) / 1024);
}

/* --------------------------------------------------------- lost callback */

/* Contend threads register their thread id here so the callback can flag
 * the right one; hold mode uses slot 0. */
typedef struct slot {
  _Atomic uint64_t tid;
  _Atomic int64_t lost_us; /* 0 = not lost since the flag was cleared */
  atomic_int lost_reason;
} slot_t;

static slot_t slots[MAX_THREADS];
static atomic_int nlost;

static void on_lost(void *ud, const char *name, uint64_t tid,
                    dlock_lost_reason_t reason) {
  (void)ud;
  int64_t now = fence_now_us();
  atomic_fetch_add(&nlost, 1);
  /* a permit (tid 0) is slot 0's in hold mode, unattributed in contend */
  bool permit_of_hold = tid == 0 && strcmp(cfg.mode, "hold") == 0;
  for (int i = 0; i < MAX_THREADS; i++) {
    if ((permit_of_hold && i == 0) ||
        (tid != 0 && atomic_load(&slots[i].tid) == tid)) {
      int64_t zero = 0;
      atomic_compare_exchange_strong(&slots[i].lost_us, &zero, now);
      atomic_store(&slots[i].lost_reason, (int)reason);
    }
  }
  emit("LOST lock=%s tid=%llu reason=%s t=%lld", name, (unsigned long long)tid,
       reason == DLOCK_LOST_GONE          ? "gone"
       : reason == DLOCK_LOST_UNREACHABLE ? "unreachable"
                                          : "session",
       (long long)now);
}

/* Library warnings and errors, for the test's diagnostics. */
static void on_log(void *ud, dlock_log_level_t level, const char *msg) {
  (void)ud;
  static const char *const names[] = {"error", "warn", "info", "debug"};
  emit("LOG %s t=%lld %s", names[level <= DLOCK_LOG_DEBUG ? level : 3],
       (long long)fence_now_us(), msg);
}

/* ---------------------------------------------------------------- setup */

static dlock_client_t *new_client(void) {
  dlock_options_t *o = NULL;
  if (dlock_options_new(&o) != 0)
    die("options");
  /* 0: the library's defaults (the dlock command's) */
  if (cfg.connect_ms > 0)
    dlock_options_set_connect_timeout(o, cfg.connect_ms);
  if (cfg.command_ms > 0)
    dlock_options_set_command_timeout(o, cfg.command_ms);
  if (cfg.watchdog_ms > 0 &&
      dlock_options_set_watchdog_timeout(o, cfg.watchdog_ms) != 0)
    die("bad --watchdog");
  if (cfg.fair_thread_wait_ms > 0 &&
      dlock_options_set_fair_thread_wait(o, cfg.fair_thread_wait_ms) != 0)
    die("bad --fair-thread-wait");
  if (cfg.session_ms > 0 &&
      dlock_options_set_session_timeout(o, cfg.session_ms) != 0)
    die("bad --session");
  dlock_options_set_lost_callback(o, on_lost, NULL);
  dlock_options_set_log_callback(o, on_log, NULL,
                                 (dlock_log_level_t)cfg.log_level);
  char name[64];
  snprintf(name, sizeof name, "fault-%s", cfg.tag);
  dlock_options_set_client_name(o, name);
  dlock_client_t *c = NULL;
  int rc = -1;
  /* the server may be starting or cut off: a bounded number of tries */
  for (int i = 0; i <= cfg.retry; i++) {
    rc = dlock_client_new(&c, cfg.url, o);
    if (rc == 0 || !is_backend_err(rc))
      break;
    struct timespec ts = {0, 50 * 1000000L};
    nanosleep(&ts, NULL);
  }
  dlock_options_free(o);
  if (rc != 0)
    die("dlock_client_new(%s): %s", cfg.url, dlock_err_name(rc));
  return c;
}

/* The lock server, directly (token INCRs). Reconnects once on failure. */
typedef struct tokensrc {
  redisContext *ctx;
} tokensrc_t;

static int64_t next_token(tokensrc_t *t, const char *lock) {
  for (int attempt = 0; attempt < 2; attempt++) {
    if (!t->ctx) {
      struct timeval tv = {.tv_sec = 5, .tv_usec = 0};
      t->ctx = redisConnectWithTimeout(cfg.lock_host, cfg.lock_port, tv);
      if (!t->ctx || t->ctx->err) {
        if (t->ctx)
          redisFree(t->ctx);
        t->ctx = NULL;
        continue;
      }
      redisSetTimeout(t->ctx, tv);
    }
    int64_t tok = fence_token_next(t->ctx, lock);
    if (tok > 0)
      return tok;
    redisFree(t->ctx);
    t->ctx = NULL;
  }
  return -1;
}

/* One hold: a lock handle, or a permit semaphore handle and the id of the
 * permit it holds ("" when none). */
typedef struct handle {
  dlock_lock_t *l;
  dlock_permit_sem_t *sem;
  char permit[DLOCK_PERMIT_ID_LEN + 1];
} handle_t;

static bool is_shared(const handle_t *h) {
  return h->l && dlock_lock_kind(h->l) == DLOCK_READ;
}

/* The --kind value of a handle (a dlock_lock_kind_t or KIND_PERMIT). */
static int handle_kind(const handle_t *h) {
  return h->sem ? KIND_PERMIT : (int)dlock_lock_kind(h->l);
}

/* The token of a hold just granted: the fenced lock's own (fenced >= 1),
 * else an INCR on the lock server. -1 on failure. */
static int64_t hold_token(tokensrc_t *t, const char *lock, int64_t fenced) {
  if (fenced > 0)
    return fenced;
  return next_token(t, lock);
}

static dlock_lock_kind_t kind_of(uint64_t *rnd);

/* A handle of the configured kind, or of `kind` when >= 0 (rw: a side
 * drawn from *rnd). */
static int handle_new(dlock_client_t *c, const char *name, uint64_t *rnd,
                      int kind, handle_t *out) {
  memset(out, 0, sizeof *out);
  if (kind < 0)
    kind = cfg.kind == KIND_PERMIT ? KIND_PERMIT : (int)kind_of(rnd);
  if (kind == KIND_PERMIT)
    return dlock_permit_sem_new(c, name, &out->sem);
  return dlock_lock_new_kind(c, name, (dlock_lock_kind_t)kind, &out->l);
}

static void handle_free(handle_t *h) {
  dlock_lock_free(h->l);
  dlock_permit_sem_free(h->sem);
  memset(h, 0, sizeof *h);
}

/* Acquire of any kind; a fenced lock's token goes to *token (else 0). */
static int acquire_once(handle_t *h, int64_t wait_ms, int64_t lease_ms,
                        int64_t *token) {
  *token = 0;
  if (h->sem)
    return dlock_permit_sem_acquire(h->sem, wait_ms, lease_ms, h->permit);
  if (dlock_lock_kind(h->l) == DLOCK_FENCED)
    return dlock_lock_acquire_fenced(h->l, wait_ms, lease_ms, token);
  return dlock_lock_acquire(h->l, wait_ms, lease_ms);
}

/* One release call; a permit handle gives back its permit (and forgets
 * it unless the reply was a backend error, which is retried). */
static int release_once(handle_t *h) {
  if (!h->sem)
    return dlock_lock_release(h->l);
  if (!h->permit[0])
    return DLOCK_ENOTOWNER;
  int rc = dlock_permit_sem_release(h->sem, h->permit);
  if (!is_backend_err(rc))
    h->permit[0] = '\0';
  return rc;
}

/* The permit semaphores get --limit permits (if they do not exist yet) and
 * the resource the same capacity. */
static void permits_setup(dlock_client_t *c) {
  if (cfg.kind != KIND_PERMIT)
    return;
  fence_t *f = fence_open(cfg.res_host, cfg.res_port);
  if (!f)
    die("resource unreachable");
  for (int i = 0; i < cfg.nlocks; i++) {
    handle_t h;
    if (handle_new(c, cfg.locks[i], NULL, KIND_PERMIT, &h) != 0)
      die("dlock_permit_sem_new");
    int rc = dlock_permit_sem_try_set_permits(h.sem, cfg.limit, NULL);
    handle_free(&h);
    if (rc != 0)
      die("try_set_permits(%s, %d): %s", cfg.locks[i], cfg.limit,
          dlock_err_name(rc));
    if (fence_set_capacity(f, cfg.locks[i], cfg.limit) != 0)
      die("resource capacity");
  }
  fence_close(f);
}

/* Acquire with a bounded number of retries after backend errors (the API
 * returns those at once; retrying is the caller's policy). */
static int acquire(handle_t *l, int64_t wait_ms, int64_t lease_ms,
                   int *errors, int64_t *token) {
  int rc = -1;
  int64_t t0 = fence_now_us();
  for (int i = 0;; i++) {
    int64_t w = wait_ms;
    if (wait_ms > 0) {
      w = wait_ms - (fence_now_us() - t0) / 1000;
      if (w <= 0) {
        return DLOCK_ETIMEDOUT;
      }
    }
    rc = acquire_once(l, w, lease_ms, token);
    if (!is_backend_err(rc) || i >= cfg.retry)
      return rc;
    (*errors)++;
    emit("ACQERR rc=%s err=\"%s\"", dlock_err_name(rc), dlock_last_error());
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
  }
}

/* Release with up to two retries after backend errors (the library keeps
 * the request id, so a retry never releases twice). */
static int release(handle_t *l) {
  int rc = -1;
  for (int i = 0; i < 3; i++) {
    rc = release_once(l);
    if (!is_backend_err(rc))
      break;
  }
  return rc;
}

static const char *outcome_of(int rc, bool lost, char *buf, size_t n) {
  if (lost || rc == DLOCK_ELOST)
    return "lost";
  if (rc == 0)
    return "ok";
  snprintf(buf, n, "err:%s", dlock_err_name(rc));
  return buf;
}

/* ------------------------------------------------------------ hold mode */

typedef struct hold_state {
  dlock_client_t *c;
  handle_t l;
  fence_t *f;
  tokensrc_t ts;
  char holder[64];
  bool held;
  int64_t token, acq_us;
  int grants, writes_ok, writes_refused, elost, errors;
} hold_state_t;

static void hold_acquire(hold_state_t *h) {
  const char *lock = cfg.locks[0];
  int errors = 0;
  int64_t t0 = fence_now_us();
  atomic_store(&slots[0].lost_us, 0);
  int64_t ftoken = 0;
  emit("ACQUIRING t=%lld", (long long)t0);
  int rc = acquire(&h->l, cfg.wait_ms, cfg.lease_ms, &errors, &ftoken);
  h->errors += errors;
  int64_t now = fence_now_us();
  if (rc != 0) {
    emit("ACQFAIL rc=%s waited_ms=%lld errors=%d err=\"%s\"",
         dlock_err_name(rc), (long long)(now - t0) / 1000, errors,
         dlock_last_error());
    return;
  }
  h->acq_us = now;
  h->token = hold_token(&h->ts, lock, ftoken);
  if (h->token < 0)
    die("token INCR failed");
  int b = fence_begin_as(h->f, lock, h->holder, h->token, h->acq_us,
                         is_shared(&h->l));
  if (b == FENCE_ERROR)
    die("resource unreachable");
  h->held = true;
  h->grants++;
  emit("ACQUIRED lock=%s holder=%s token=%lld t=%lld waited_ms=%lld "
       "errors=%d begin=%s tid=%llu kind=%d permit=%s",
       lock, h->holder, (long long)h->token, (long long)h->acq_us,
       (long long)(now - t0) / 1000, errors, b ? "ok" : "refused",
       (unsigned long long)dlock_thread_id(), handle_kind(&h->l),
       h->l.permit[0] ? h->l.permit : "-");
}

/* WRITE's t is when the answer came, sent= when the write began (a
 * process stopped in between reports it only when resumed) */
static void hold_write(hold_state_t *h) {
  int64_t sent = fence_now_us();
  int w = fence_write_as(h->f, cfg.locks[0], h->holder, h->token,
                         is_shared(&h->l));
  if (w == FENCE_ERROR)
    die("resource unreachable");
  if (w)
    h->writes_ok++;
  else
    h->writes_refused++;
  emit("WRITE %s token=%lld t=%lld sent=%lld", w ? "ok" : "refused",
       (long long)h->token, (long long)fence_now_us(), (long long)sent);
}

static void hold_release(hold_state_t *h) {
  if (!h->held) {
    int rc = release_once(&h->l);
    emit("RELEASED rc=%s t=%lld took_ms=0 held=0", dlock_err_name(rc),
         (long long)fence_now_us());
    return;
  }
  int64_t lost_us = atomic_load(&slots[0].lost_us);
  int64_t called = fence_now_us(), end = called;
  if (cfg.stop_on_lost && lost_us)
    end = lost_us;
  if (h->l.sem && fence_leave(h->f, cfg.locks[0], h->holder) != 0)
    die("resource unreachable");
  int rc = release(&h->l);
  int64_t done = fence_now_us();
  char buf[64];
  lost_us = atomic_load(&slots[0].lost_us);
  const char *oc = outcome_of(rc, lost_us != 0, buf, sizeof buf);
  if (fence_end(h->f, cfg.locks[0], h->holder, h->token, end, oc) != 0)
    die("resource unreachable");
  if (rc == DLOCK_ELOST)
    h->elost++;
  h->held = false;
  emit("RELEASED rc=%s t=%lld called=%lld took_ms=%lld held=1 err=\"%s\"",
       dlock_err_name(rc), (long long)done, (long long)called,
       (long long)(done - called) / 1000, rc ? dlock_last_error() : "");
}

static int run_hold(void) {
  hold_state_t h = {0};
  snprintf(h.holder, sizeof h.holder, "%s", cfg.tag);
  h.f = fence_open(cfg.res_host, cfg.res_port);
  if (!h.f)
    die("resource unreachable");
  h.c = new_client();
  atomic_store(&slots[0].tid, dlock_thread_id());
  permits_setup(h.c);
  if (handle_new(h.c, cfg.locks[0], NULL, -1, &h.l) != 0)
    die("handle_new");
  emit("READY pid=%d client=%s tid=%llu", (int)getpid(), dlock_client_id(h.c),
       (unsigned long long)dlock_thread_id());
  hold_acquire(&h);
  int64_t next_write = fence_now_us() + cfg.write_every_ms * 1000;
  int64_t auto_end =
      cfg.hold_ms > 0 ? fence_now_us() + cfg.hold_ms * 1000 : INT64_MAX;
  char line[256];
  size_t have = 0;
  bool quit = false;
  while (!quit) {
    int64_t now = fence_now_us();
    bool writing =
        h.held && !(cfg.stop_on_lost && atomic_load(&slots[0].lost_us));
    if (writing && now >= next_write) {
      hold_write(&h);
      next_write = fence_now_us() + cfg.write_every_ms * 1000;
      continue;
    }
    if (h.held && now >= auto_end) {
      hold_release(&h);
      break;
    }
    int64_t until = writing ? next_write : INT64_MAX;
    if (h.held && auto_end < until)
      until = auto_end;
    int timeout = until == INT64_MAX ? 1000 : (int)((until - now) / 1000 + 1);
    struct pollfd p = {.fd = 0, .events = POLLIN};
    int n = poll(&p, 1, timeout);
    if (n < 0 && errno != EINTR)
      die("poll: %s", strerror(errno));
    if (n <= 0)
      continue;
    ssize_t r = read(0, line + have, sizeof line - 1 - have);
    if (r <= 0) { /* EOF: the test is gone or done with us */
      if (h.held)
        hold_release(&h);
      break;
    }
    have += (size_t)r;
    line[have] = '\0';
    char *nl;
    while ((nl = strchr(line, '\n')) != NULL) {
      *nl = '\0';
      if (strcmp(line, "release") == 0) {
        hold_release(&h);
      } else if (strcmp(line, "acquire") == 0) {
        if (!h.held) {
          hold_acquire(&h);
          next_write = fence_now_us() + cfg.write_every_ms * 1000;
          auto_end =
              cfg.hold_ms > 0 ? fence_now_us() + cfg.hold_ms * 1000 : INT64_MAX;
        }
      } else if (strcmp(line, "write") == 0) {
        if (h.held)
          hold_write(&h);
      } else if (strcmp(line, "ping") == 0) {
        int64_t t0 = fence_now_us();
        int rc = dlock_client_ping(h.c);
        emit("PING rc=%s took_ms=%lld", dlock_err_name(rc),
             (long long)(fence_now_us() - t0) / 1000);
      } else if (strcmp(line, "quit") == 0) {
        if (h.held)
          hold_release(&h);
        quit = true;
      } else if (line[0]) {
        emit("BADCMD %s", line);
      }
      size_t used = (size_t)(nl - line) + 1;
      memmove(line, nl + 1, have - used + 1);
      have -= used;
    }
    if (have == sizeof line - 1)
      have = 0; /* garbage without newline */
  }
  int64_t t0 = fence_now_us();
  handle_free(&h.l);
  dlock_client_free(h.c);
  int64_t freed_ms = (fence_now_us() - t0) / 1000;
  if (h.ts.ctx)
    redisFree(h.ts.ctx);
  fence_close(h.f);
  emit("DONE grants=%d writes_ok=%d writes_refused=%d lost=%d elost=%d "
       "errors=%d free_ms=%lld",
       h.grants, h.writes_ok, h.writes_refused, atomic_load(&nlost), h.elost,
       h.errors, (long long)freed_ms);
  return 0;
}

/* --------------------------------------------------------- contend mode */

typedef struct contender {
  int idx;
  pthread_t th;
  dlock_client_t *c;
  uint64_t rnd;
  int64_t end_us;
  /* results */
  long grants, busy, timeouts, errors, elost, lost, writes_ok, writes_refused,
      churned, reentries, reads;
  int64_t max_wait_us;
  int failed;
} contender_t;

static uint64_t rnd_next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

/* One hold of `l` by thread `me` using client handle l; returns 0, or -1
 * when something the test must see went wrong (printed). */
static int one_cycle(contender_t *me, handle_t *l, const char *lock,
                     fence_t *f, tokensrc_t *ts, const char *holder,
                     int64_t wait_ms, int64_t lease_ms, int64_t hold_us,
                     bool reenter) {
  int errors = 0;
  int64_t t0 = fence_now_us();
  atomic_store(&slots[me->idx].lost_us, 0);
  int64_t ftoken = 0;
  bool shared = is_shared(l);
  int rc = acquire(l, wait_ms, lease_ms, &errors, &ftoken);
  me->errors += errors;
  int64_t acq = fence_now_us();
  if (rc == DLOCK_EBUSY) {
    me->busy++;
    return 0;
  }
  if (rc == DLOCK_ETIMEDOUT) {
    me->timeouts++;
    return 0;
  }
  if (is_backend_err(rc)) {
    me->errors++;
    return 0;
  }
  if (rc != 0) {
    emit("ERROR acquire %s: %s (%s)", lock, dlock_err_name(rc),
         dlock_last_error());
    return -1;
  }
  if (acq - t0 > me->max_wait_us)
    me->max_wait_us = acq - t0;
  me->grants++;
  if (shared)
    me->reads++;
  int64_t token = hold_token(ts, lock, ftoken);
  if (token < 0) {
    emit("ERROR token INCR failed");
    return -1;
  }
  if (fence_begin_as(f, lock, holder, token, acq, shared) == FENCE_ERROR)
    return -1;
  if (reenter && l->sem)
    reenter = false; /* a permit is not re-entrant */
  if (reenter) {
    int64_t inner = 0;
    rc = acquire_once(l, 0, lease_ms, &inner);
    if (rc != 0 && !is_backend_err(rc)) {
      emit("ERROR re-entry of %s: %s", lock, dlock_err_name(rc));
      return -1;
    }
    if (rc == 0 && ftoken > 0 && inner <= ftoken) {
      emit("ERROR re-entry of fenced %s: token %lld not above %lld", lock,
           (long long)inner, (long long)ftoken);
      return -1;
    }
    if (rc == 0)
      me->reentries++;
    else
      reenter = false;
  }
  int64_t hold_end = fence_now_us() + hold_us;
  for (int w = 0;; w++) {
    if (atomic_load(&slots[me->idx].lost_us))
      break; /* told: stop writing */
    int r = fence_write_as(f, lock, holder, token, shared);
    if (r == FENCE_ERROR)
      return -1;
    if (r)
      me->writes_ok++;
    else
      me->writes_refused++;
    if (w >= 1 && fence_now_us() >= hold_end)
      break;
    if (hold_us > 2000) {
      struct timespec st = {0, 1000 * 1000L}; /* the work under the lock */
      nanosleep(&st, NULL);
    }
  }
  int64_t end = fence_now_us();
  int64_t lost_us = atomic_load(&slots[me->idx].lost_us);
  if (lost_us)
    end = lost_us;
  if (l->sem && fence_leave(f, lock, holder) != 0)
    return -1;
  if (reenter) {
    rc = release(l);
    if (rc != 0 && rc != DLOCK_ELOST) {
      emit("ERROR inner release of %s: %s", lock, dlock_err_name(rc));
      return -1;
    }
  }
  rc = release(l);
  lost_us = atomic_load(&slots[me->idx].lost_us);
  if (lost_us) {
    me->lost++;
    if (lost_us < end)
      end = lost_us;
  }
  char buf[64];
  if (rc == DLOCK_ELOST)
    me->elost++;
  if (fence_end(f, lock, holder, token, end,
                outcome_of(rc, lost_us != 0, buf, sizeof buf)) != 0)
    return -1;
  if (rc != 0 && rc != DLOCK_ELOST) {
    emit("RELERR lock=%s rc=%s err=\"%s\"", lock, dlock_err_name(rc),
         dlock_last_error());
    if (!is_backend_err(rc))
      return -1;
  }
  return 0;
}

static void *contender_main(void *arg) {
  contender_t *me = arg;
  atomic_store(&slots[me->idx].tid, dlock_thread_id());
  char holder[64];
  snprintf(holder, sizeof holder, "%s.%d", cfg.tag, me->idx);
  fence_t *f = fence_open(cfg.res_host, cfg.res_port);
  if (!f) {
    me->failed = 1;
    return NULL;
  }
  tokensrc_t ts = {0};
  /* [side][lock]: side 1 is the read side, used by rw only */
  handle_t locks[2][MAX_LOCKS];
  memset(locks, 0, sizeof locks);
  for (int i = 0; i < cfg.nlocks; i++) {
    if (cfg.kind == KIND_RW) {
      if (handle_new(me->c, cfg.locks[i], NULL, DLOCK_WRITE, &locks[0][i]) !=
              0 ||
          handle_new(me->c, cfg.locks[i], NULL, DLOCK_READ, &locks[1][i]) != 0)
        me->failed = 1;
    } else if (handle_new(me->c, cfg.locks[i], NULL, -1, &locks[0][i]) != 0) {
      me->failed = 1;
    }
  }
  for (int it = 0; !me->failed && (cfg.iters <= 0 || it < cfg.iters); it++) {
    if (fence_now_us() >= me->end_us)
      break;
    int k = (int)(rnd_next(&me->rnd) % (uint64_t)cfg.nlocks);
    int dice = (int)(rnd_next(&me->rnd) % 1000);
    int64_t wait = cfg.wait_ms, lease = cfg.lease_ms, hold_us = 0;
    bool reenter = false;
    if (dice < 50)
      wait = 0; /* try once */
    else if (dice < 100)
      reenter = true;
    else if (dice < 150 && cfg.lease_ms == DLOCK_LEASE_WATCHDOG)
      lease = 20000; /* a fixed lease well above any hold */
    if (me->idx == 0 && it % 300 == 299 && cfg.watchdog_ms > 0) {
      /* now and then a hold that needs a renewal: 0.6 x the watchdog
       * (renewed every third of it) */
      wait = cfg.wait_ms;
      lease = DLOCK_LEASE_WATCHDOG;
      hold_us = cfg.watchdog_ms * 600;
    }
    if (cfg.churn > 0 && it > 0 && it % cfg.churn == 0) {
      /* a client of its own, used once and freed (client lifecycle) */
      dlock_client_t *tmp = new_client();
      handle_t tl;
      if (handle_new(tmp, cfg.locks[k], &me->rnd, -1, &tl) != 0)
        me->failed = 1;
      else if (one_cycle(me, &tl, cfg.locks[k], f, &ts, holder, cfg.wait_ms,
                         DLOCK_LEASE_WATCHDOG, 0, false) != 0)
        me->failed = 1;
      handle_free(&tl);
      dlock_client_free(tmp);
      me->churned++;
      continue;
    }
    int side = cfg.kind == KIND_RW ? (int)(rnd_next(&me->rnd) % 2) : 0;
    if (one_cycle(me, &locks[side][k], cfg.locks[k], f, &ts, holder, wait,
                  lease, hold_us, reenter) != 0)
      me->failed = 1;
    /* now and then a fresh handle on the same lock (handle lifecycle) */
    if (dice >= 990) {
      int kd = handle_kind(&locks[side][k]);
      handle_free(&locks[side][k]);
      if (handle_new(me->c, cfg.locks[k], NULL, kd, &locks[side][k]) != 0)
        me->failed = 1;
    }
  }
  for (int i = 0; i < cfg.nlocks; i++) {
    handle_free(&locks[0][i]);
    handle_free(&locks[1][i]);
  }
  if (ts.ctx)
    redisFree(ts.ctx);
  fence_close(f);
  return NULL;
}

static int run_contend(void) {
  static contender_t th[MAX_THREADS];
  dlock_client_t *c = new_client();
  permits_setup(c);
  emit("READY pid=%d client=%s", (int)getpid(), dlock_client_id(c));
  int64_t start = fence_now_us();
  int64_t end = cfg.duration_ms > 0 ? start + cfg.duration_ms * 1000
                                    : start + cfg.max_life_ms * 1000;
  for (int i = 0; i < cfg.threads; i++) {
    th[i] = (contender_t){.idx = i,
                          .c = c,
                          .end_us = end,
                          .rnd = (uint64_t)getpid() * 2654435761u + 7919u * i};
    if (pthread_create(&th[i].th, NULL, contender_main, &th[i]) != 0)
      die("pthread_create");
  }
  if (cfg.rss_at_ms > 0) {
    int64_t at = start + cfg.rss_at_ms * 1000;
    struct timespec ts = {at / 1000000, (at % 1000000) * 1000};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
           EINTR) {
    }
    emit("RSS kb=%ld t_ms=%lld at=mark", rss_kb(),
         (long long)(fence_now_us() - start) / 1000);
  }
  contender_t sum = {0};
  long min_grants = -1;
  int failed = 0;
  for (int i = 0; i < cfg.threads; i++) {
    pthread_join(th[i].th, NULL);
    sum.grants += th[i].grants;
    sum.busy += th[i].busy;
    sum.timeouts += th[i].timeouts;
    sum.errors += th[i].errors;
    sum.elost += th[i].elost;
    sum.lost += th[i].lost;
    sum.writes_ok += th[i].writes_ok;
    sum.writes_refused += th[i].writes_refused;
    sum.churned += th[i].churned;
    sum.reentries += th[i].reentries;
    sum.reads += th[i].reads;
    if (min_grants < 0 || th[i].grants < min_grants)
      min_grants = th[i].grants;
    if (th[i].max_wait_us > sum.max_wait_us)
      sum.max_wait_us = th[i].max_wait_us;
    failed += th[i].failed;
  }
  emit("RSS kb=%ld t_ms=%lld at=end", rss_kb(),
       (long long)(fence_now_us() - start) / 1000);
  dlock_client_free(c);
  emit("DONE grants=%ld busy=%ld timeouts=%ld errors=%ld elost=%ld lost=%ld "
       "lostcb=%d writes_ok=%ld writes_refused=%ld churned=%ld reentries=%ld "
       "max_wait_ms=%lld failed=%d reads=%ld min_thread_grants=%ld",
       sum.grants, sum.busy, sum.timeouts, sum.errors, sum.elost, sum.lost,
       atomic_load(&nlost), sum.writes_ok, sum.writes_refused, sum.churned,
       sum.reentries, (long long)sum.max_wait_us / 1000, failed, sum.reads,
       min_grants);
  return failed ? 4 : 0;
}

/* ----------------------------------------------------------------- main */

static void usage(void) {
  fprintf(stderr,
          "usage: fault_worker --url URL --resource HOST:PORT --tag TAG "
          "--name LOCK[,LOCK...] [options] hold|contend\n"
          "  --watchdog MS --lease MS --wait MS --connect-timeout MS\n"
          "  --command-timeout MS --write-every MS --hold-ms MS --retry N\n"
          "  --stop-on-lost --threads N --iters N --duration MS --churn N\n"
          "  --rss-at MS --max-life MS --log-level 0..3\n"
          "  --kind reentrant|fair|fenced|read|write|rw (rw: contend only)\n"
          "  --kind permit --limit N (permits of a permit semaphore)\n"
          "  --fair-thread-wait MS\n"
          "  --session MS (ZooKeeper session, etcd lease TTL)\n"
          "  --token-server HOST:PORT (the Redis of the INCR tokens; default:\n"
          "    a redis:// URL's server; needed with any other URL)\n");
  exit(64);
}

static void parse_hostport(const char *s, char *host, size_t n, int *port) {
  const char *colon = strrchr(s, ':');
  if (!colon || (size_t)(colon - s) >= n)
    usage();
  memcpy(host, s, (size_t)(colon - s));
  host[colon - s] = '\0';
  *port = atoi(colon + 1);
}

static int parse_kind(const char *s) {
  static const struct {
    const char *name;
    int kind;
  } kinds[] = {{"reentrant", DLOCK_REENTRANT}, {"fair", DLOCK_FAIR},
               {"fenced", DLOCK_FENCED},       {"read", DLOCK_READ},
               {"write", DLOCK_WRITE},         {"rw", KIND_RW},
               {"permit", KIND_PERMIT}};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (strcmp(s, kinds[i].name) == 0)
      return kinds[i].kind;
  return -1;
}

static dlock_lock_kind_t kind_of(uint64_t *rnd) {
  if (cfg.kind != KIND_RW)
    return (dlock_lock_kind_t)cfg.kind;
  return rnd && rnd_next(rnd) % 2 ? DLOCK_READ : DLOCK_WRITE;
}

int main(int argc, char **argv) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1)
    return 5; /* the parent is already gone */
  static const struct option opts[] = {
      {"url", required_argument, 0, 'u'},
      {"resource", required_argument, 0, 'r'},
      {"tag", required_argument, 0, 't'},
      {"name", required_argument, 0, 'n'},
      {"watchdog", required_argument, 0, 'W'},
      {"lease", required_argument, 0, 'L'},
      {"wait", required_argument, 0, 'w'},
      {"connect-timeout", required_argument, 0, 'C'},
      {"command-timeout", required_argument, 0, 'T'},
      {"write-every", required_argument, 0, 'e'},
      {"hold-ms", required_argument, 0, 'H'},
      {"retry", required_argument, 0, 'R'},
      {"stop-on-lost", no_argument, 0, 's'},
      {"threads", required_argument, 0, 'j'},
      {"iters", required_argument, 0, 'i'},
      {"duration", required_argument, 0, 'd'},
      {"churn", required_argument, 0, 'c'},
      {"rss-at", required_argument, 0, 'm'},
      {"max-life", required_argument, 0, 'M'},
      {"log-level", required_argument, 0, 'g'},
      {"kind", required_argument, 0, 'k'},
      {"fair-thread-wait", required_argument, 0, 'F'},
      {"limit", required_argument, 0, 'N'},
      {"token-server", required_argument, 0, 'S'},
      {"session", required_argument, 0, 'E'},
      {0, 0, 0, 0}};
  int o;
  char *names = NULL;
  while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (o) {
    case 'u':
      cfg.url = optarg;
      break;
    case 'r':
      parse_hostport(optarg, cfg.res_host, sizeof cfg.res_host, &cfg.res_port);
      break;
    case 'S':
      parse_hostport(optarg, cfg.lock_host, sizeof cfg.lock_host,
                     &cfg.lock_port);
      break;
    case 'E':
      cfg.session_ms = atoll(optarg);
      break;
    case 't':
      cfg.tag = optarg;
      break;
    case 'n':
      names = optarg;
      break;
    case 'W':
      cfg.watchdog_ms = atoll(optarg);
      break;
    case 'L':
      cfg.lease_ms = atoll(optarg);
      break;
    case 'w':
      cfg.wait_ms = atoll(optarg);
      break;
    case 'C':
      cfg.connect_ms = atoll(optarg);
      break;
    case 'T':
      cfg.command_ms = atoll(optarg);
      break;
    case 'e':
      cfg.write_every_ms = atoll(optarg);
      break;
    case 'H':
      cfg.hold_ms = atoll(optarg);
      break;
    case 'R':
      cfg.retry = atoi(optarg);
      break;
    case 's':
      cfg.stop_on_lost = true;
      break;
    case 'j':
      cfg.threads = atoi(optarg);
      break;
    case 'i':
      cfg.iters = atoi(optarg);
      break;
    case 'd':
      cfg.duration_ms = atoll(optarg);
      break;
    case 'c':
      cfg.churn = atoi(optarg);
      break;
    case 'm':
      cfg.rss_at_ms = atoll(optarg);
      break;
    case 'M':
      cfg.max_life_ms = atoll(optarg);
      break;
    case 'g':
      cfg.log_level = atoi(optarg);
      break;
    case 'F':
      cfg.fair_thread_wait_ms = atoll(optarg);
      break;
    case 'N':
      cfg.limit = atoi(optarg);
      break;
    case 'k':
      cfg.kind = parse_kind(optarg);
      if (cfg.kind < 0)
        usage();
      break;
    default:
      usage();
    }
  }
  if (optind != argc - 1 || !cfg.url || !cfg.tag || !names || !cfg.res_port ||
      cfg.threads < 1 || cfg.threads > MAX_THREADS || cfg.write_every_ms < 1 ||
      (cfg.kind == KIND_PERMIT) != (cfg.limit >= 1))
    usage();
  cfg.mode = argv[optind];
  for (char *save = NULL, *tok = strtok_r(names, ",", &save); tok;
       tok = strtok_r(NULL, ",", &save)) {
    if (cfg.nlocks == MAX_LOCKS)
      usage();
    cfg.locks[cfg.nlocks++] = tok;
  }
  if (!cfg.nlocks)
    usage();
  /* the Redis of the token INCRs: --token-server, else a redis:// URL's
   * (a cluster's is the master of the lock's slot: the test names it) */
  if (!cfg.lock_port && strncmp(cfg.url, "redis://", 8) != 0)
    usage();
  if (!cfg.lock_port)
    parse_hostport(cfg.url + 8, cfg.lock_host, sizeof cfg.lock_host,
                   &cfg.lock_port);
  alarm((unsigned)((cfg.max_life_ms + 999) / 1000));
  signal(SIGPIPE, SIG_IGN);
  if (strcmp(cfg.mode, "hold") == 0 && cfg.kind != KIND_RW)
    return run_hold();
  if (strcmp(cfg.mode, "contend") == 0)
    return run_contend();
  usage();
}
