/*
 * client.c - the client: creation, teardown, and its event loop.
 *
 * The event loop (one background thread per client) owns the pub/sub
 * (watch) connection and every timer. It sleeps in poll() on the wake pipe,
 * the watch socket and the next deadline (a lease to renew, a hold's
 * vouching deadline, an unresolved wait to settle, reconnect backoff,
 * channel linger), and each turn:
 *   1. marks lost every hold it can no longer vouch for and reports the
 *      losses (lost callbacks run here, with no mutex held);
 *   2. hands due chores to the workers (worker.h): a renewal pass, a
 *      settling pass, a dial of the watch connection (with exponential
 *      backoff: first retry at once, then 50 ms doubling to 2 s);
 *   3. sends SUBSCRIBE/UNSUBSCRIBE for channels that changed (written
 *      without blocking; the rest when the socket is writable);
 *   4. delivers what the watch connection read.
 * It never waits on the network, so a loss is reported by its deadline
 * whatever round trip is pending, and an idle client sleeps in poll() with
 * no timer. It never holds client->mu across I/O or callbacks. All signals
 * are blocked in it and in the workers, so the application's signal
 * handlers never run there.
 *
 * Fork: a child process inherits no background thread, so every call on a
 * client created before fork() returns DLOCK_ECLOSED in the child; the
 * child's dlock_client_free() only closes descriptors and frees memory.
 */
#include "core/client.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/holds.h"
#include "core/waiters.h"

#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 2000

/* ------------------------------------------------------------------ fork */

static _Atomic unsigned fork_generation;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void on_fork_child(void) { atomic_fetch_add(&fork_generation, 1); }
static void register_fork(void) { pthread_atfork(NULL, NULL, on_fork_child); }

static unsigned fork_gen(void) {
  pthread_once(&fork_once, register_fork);
  return atomic_load(&fork_generation);
}

int dlock__client_check(const struct dlock_client *c, const char *fn) {
  if (!c)
    return dlock__seterr(DLOCK_EINVAL, "%s: client is NULL", fn);
  if (c->magic != DLOCK__CLIENT_MAGIC)
    return dlock__seterr(DLOCK_EBADHANDLE, "%s: client handle is not live", fn);
  if (c->fork_gen != fork_gen())
    return dlock__seterr(DLOCK_ECLOSED,
                         "%s: client was created before fork(); create a new "
                         "client in this process",
                         fn);
  return 0;
}

int dlock__call_begin(struct dlock_client *c, const char *fn) {
  int rc = dlock__client_check(c, fn);
  if (rc)
    return rc;
  pthread_mutex_lock(&c->mu);
  if (c->stopping)
    rc = dlock__seterr(DLOCK_ECLOSED, "%s: the client is being freed", fn);
  else
    c->calls++;
  pthread_mutex_unlock(&c->mu);
  return rc;
}

void dlock__call_end(struct dlock_client *c) {
  pthread_mutex_lock(&c->mu);
  if (--c->calls == 0 && c->stopping)
    pthread_cond_broadcast(&c->calls_done);
  pthread_mutex_unlock(&c->mu);
}

bool dlock__client_stopping(struct dlock_client *c) {
  pthread_mutex_lock(&c->mu);
  bool s = c->stopping;
  pthread_mutex_unlock(&c->mu);
  return s;
}

/* -------------------------------------------------------------- helpers */

void dlock__client_poke(struct dlock_client *c) {
  char b = 1;
  ssize_t n = write(c->wake_wr, &b, 1); /* full pipe: already poked */
  (void)n;
}

/* dlock's own keys (wait queues, grant channels) all begin with this; an
 * object of such a name could be another lock's bookkeeping. */
#define DLOCK__RESERVED_PREFIX "dlock_lock_"

int dlock__check_wait(int64_t wait_ms, const char *fn) {
  if (wait_ms < 0 && wait_ms != DLOCK_WAIT_FOREVER)
    return dlock__seterr(DLOCK_EINVAL,
                         "%s: wait must be >= 0 or DLOCK_WAIT_FOREVER", fn);
  return 0;
}

int dlock__check_lease(int64_t lease_ms, const char *fn) {
  if ((lease_ms <= 0 && lease_ms != DLOCK_LEASE_WATCHDOG) ||
      lease_ms > DLOCK_LEASE_MAX)
    return dlock__seterr(DLOCK_EINVAL,
                         "%s: lease must be 1..DLOCK_LEASE_MAX ms or "
                         "DLOCK_LEASE_WATCHDOG",
                         fn);
  return 0;
}

int dlock__check_name(const char *name, const char *fn) {
  if (!name)
    return dlock__seterr(DLOCK_EINVAL, "%s: name is NULL", fn);
  size_t n = strnlen(name, DLOCK_NAME_MAX + 1);
  if (n == 0)
    return dlock__seterr(DLOCK_EINVAL, "%s: name is empty", fn);
  if (n > DLOCK_NAME_MAX)
    return dlock__seterr(DLOCK_EINVAL, "%s: name is longer than %d bytes", fn,
                         DLOCK_NAME_MAX);
  if (strncmp(name, DLOCK__RESERVED_PREFIX,
              sizeof DLOCK__RESERVED_PREFIX - 1) == 0)
    return dlock__seterr(DLOCK_EINVAL,
                         "%s: names beginning with \"" DLOCK__RESERVED_PREFIX
                         "\" are reserved for dlock's own keys",
                         fn);
  return 0;
}

void dlock__log(struct dlock_client *c, dlock_log_level_t level,
                const char *fmt, ...) {
  if (!c->opts.log_fn || level > c->opts.log_level)
    return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  c->opts.log_fn(c->opts.log_ud, level, msg);
}

void dlock__owner(const struct dlock_client *c, uint64_t tid, char *buf,
                  size_t len) {
  snprintf(buf, len, "%s:%llu", c->id, (unsigned long long)tid);
}

/* -------------------------------------------------- background thread */

/* One (UN)SUBSCRIBE command in flight. Redis answers commands in order:
 * a SUBSCRIBE with k names gets k confirmations or one error, so the
 * oldest command in flight is the one an answer belongs to. */
typedef struct sub_cmd {
  bool subscribe;
  bool grants; /* a SUBSCRIBE of grant channels */
  size_t left; /* confirmations still due */
  size_t n;
  const char **names; /* copies, owned */
} sub_cmd;

typedef struct bg_state {
  struct dlock_client *c;
  int64_t retry_at; /* next watch connect attempt */
  int64_t backoff;
  int64_t linger_at;
  bool proven; /* this watch connection confirmed a subscription */
  sub_cmd *fifo;
  size_t fifo_head, fifo_len, fifo_cap;
} bg_state;

static void cmd_free(sub_cmd *cmd) {
  for (size_t i = 0; cmd->names && i < cmd->n; i++)
    dlock__free((void *)cmd->names[i]);
  dlock__free((void *)cmd->names);
  cmd->names = NULL;
}

static void fifo_clear(bg_state *s) {
  for (size_t i = 0; i < s->fifo_len; i++)
    cmd_free(&s->fifo[(s->fifo_head + i) % s->fifo_cap]);
  s->fifo_head = s->fifo_len = 0;
}

static int fifo_push(bg_state *s, bool subscribe, bool grants,
                     const char *const *names, size_t n) {
  if (s->fifo_len == s->fifo_cap) {
    size_t nc = s->fifo_cap ? s->fifo_cap * 2 : 16;
    sub_cmd *f = dlock__calloc(nc, sizeof *f);
    if (!f)
      return DLOCK_ENOMEM;
    for (size_t i = 0; i < s->fifo_len; i++)
      f[i] = s->fifo[(s->fifo_head + i) % s->fifo_cap];
    dlock__free(s->fifo);
    s->fifo = f;
    s->fifo_head = 0;
    s->fifo_cap = nc;
  }
  sub_cmd *cmd = &s->fifo[(s->fifo_head + s->fifo_len) % s->fifo_cap];
  /* copies: a refusal may come after the channel was freed (its waiters
   * gave up on the first refusal of the pair) */
  cmd->n = n;
  cmd->names = dlock__calloc(n, sizeof *cmd->names);
  if (!cmd->names)
    return DLOCK_ENOMEM;
  for (size_t i = 0; i < n; i++)
    if (!(cmd->names[i] = dlock__strdup(names[i]))) {
      cmd_free(cmd);
      return DLOCK_ENOMEM;
    }
  cmd->subscribe = subscribe;
  cmd->grants = grants;
  cmd->left = n;
  s->fifo_len++;
  return 0;
}

static sub_cmd *fifo_front(bg_state *s) {
  return s->fifo_len ? &s->fifo[s->fifo_head] : NULL;
}

static void fifo_pop(bg_state *s) {
  cmd_free(&s->fifo[s->fifo_head]);
  s->fifo_head = (s->fifo_head + 1) % s->fifo_cap;
  s->fifo_len--;
}

static void on_watch_event(void *ud, dlock__watch_event ev, int code,
                           const char *ch, size_t chlen, const char *payload,
                           size_t plen) {
  bg_state *s = ud;
  struct dlock_client *c = s->c;
  sub_cmd *front = fifo_front(s);
  if (ev == DLOCK__W_REFUSED) {
    dlock__log(c, DLOCK_LOG_ERROR, "%.*s", (int)plen, payload);
    if (!front)
      return;
    char msg[400];
    snprintf(msg, sizeof msg, "%.*s", (int)plen, payload);
    pthread_mutex_lock(&c->mu);
    dlock__chans_refused_locked(c, code, msg, front->names, front->n,
                                front->grants);
    pthread_mutex_unlock(&c->mu);
    fifo_pop(s);
    return;
  }
  if ((ev == DLOCK__W_SUBSCRIBED || ev == DLOCK__W_UNSUBSCRIBED) && front) {
    if (ev == DLOCK__W_SUBSCRIBED)
      s->proven = true;
    if (--front->left == 0)
      fifo_pop(s);
  }
  pthread_mutex_lock(&c->mu);
  dlock__chans_on_event_locked(c, ev, ch, chlen, payload, plen);
  pthread_mutex_unlock(&c->mu);
}

static void watch_down(struct dlock_client *c, bg_state *s, const char *why) {
  c->ops->watch_disconnect(c->be);
  fifo_clear(s);
  pthread_mutex_lock(&c->mu);
  bool was_up = c->watch_up;
  c->watch_up = false;
  if (was_up) /* subscriptions are gone and messages may have been lost */
    dlock__chans_on_disconnect_locked(c);
  pthread_mutex_unlock(&c->mu);
  if (was_up)
    dlock__log(c, DLOCK_LOG_WARN,
               "pub/sub connection lost (%s); waiters retry and it "
               "reconnects",
               why);
  if (was_up && s->proven) {
    /* a connection that worked: reconnect at once */
    s->retry_at = dlock__now_ms();
    s->backoff = BACKOFF_MIN_MS;
  } else {
    /* never confirmed a subscription (refused, or accepted then dropped,
     * as a full server does): back off, doubling */
    s->retry_at = dlock__now_ms() + s->backoff;
    s->backoff =
        s->backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : s->backoff * 2;
  }
  s->proven = false;
}

/* Dial worker: connects the watch connection. The loop touches the watch
 * connection only while c->dialing is false, and reads the result after
 * taking mu, so the connection is handed over whole. */
static void dial_job(void *arg) {
  struct dlock_client *c = arg;
  int rc = c->ops->watch_connect(
      c->be, dlock__deadline_after(c->opts.connect_timeout_ms));
  pthread_mutex_lock(&c->mu);
  c->dial_rc = rc;
  snprintf(c->dial_err, sizeof c->dial_err, "%s", rc ? dlock_last_error() : "");
  c->dial_done = true;
  pthread_mutex_unlock(&c->mu);
  dlock__client_poke(c);
}

/* Starts a dial when channels are wanted and it is time; takes the result
 * of a finished one. Never blocks. */
static void watch_maintain(struct dlock_client *c, bg_state *s, int64_t now) {
  pthread_mutex_lock(&c->mu);
  bool wanted = dlock__chans_wanted_locked(c);
  bool up = c->watch_up, dialing = c->dialing, done = c->dial_done;
  int rc = c->dial_rc;
  char err[sizeof c->dial_err];
  memcpy(err, c->dial_err, sizeof err);
  if (done) {
    c->dialing = c->dial_done = false;
    if (rc == 0)
      c->watch_up = true;
  }
  pthread_mutex_unlock(&c->mu);
  if (done) {
    if (rc) {
      dlock__log(c, DLOCK_LOG_INFO, "pub/sub connect failed: %s", err);
      watch_down(c, s, "connect failed");
    }
    return;
  }
  if (up || dialing || !wanted || now < s->retry_at)
    return;
  pthread_mutex_lock(&c->mu);
  c->dialing = true;
  pthread_mutex_unlock(&c->mu);
  if (dlock__worker_submit(&c->dial_worker, dial_job, c) != 0) {
    pthread_mutex_lock(&c->mu);
    c->dialing = false;
    pthread_mutex_unlock(&c->mu);
    watch_down(c, s, dlock_last_error());
  }
}

#define SUB_BATCH 256

/* Sends one list as commands of at most SUB_BATCH names, noting each. */
static int send_list(struct dlock_client *c, bg_state *s, bool subscribe,
                     bool grants, const dlock__name_list *l) {
  for (size_t at = 0; at < l->n; at += SUB_BATCH) {
    size_t k = l->n - at < SUB_BATCH ? l->n - at : SUB_BATCH;
    int rc = c->ops->watch_subscribe(c->be, subscribe, l->names + at,
                                     l->lens + at, k);
    if (!rc)
      rc = fifo_push(s, subscribe, grants, l->names + at, k);
    if (rc)
      return rc;
  }
  return 0;
}

/* Sends the subscription changes and notes the next linger deadline. */
static void watch_sync(struct dlock_client *c, bg_state *s, int64_t now) {
  dlock__chan_lists lists;
  pthread_mutex_lock(&c->mu);
  if (!c->watch_up) {
    pthread_mutex_unlock(&c->mu);
    return;
  }
  s->linger_at = dlock__chans_collect_locked(c, now, &lists);
  pthread_mutex_unlock(&c->mu);
  int rc = send_list(c, s, true, false, &lists.subs);
  if (!rc)
    rc = send_list(c, s, true, true, &lists.grants);
  if (!rc)
    rc = send_list(c, s, false, false, &lists.unsubs);
  dlock__chans_lists_free(&lists);
  if (rc)
    watch_down(c, s, dlock_last_error());
}

static void drain_pipe(int fd) {
  char buf[256];
  for (int i = 0; i < 64; i++) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < (ssize_t)sizeof buf)
      return;
  }
}

static void renew_job(void *arg) { dlock__renewer_run(arg); }
static void settle_job(void *arg) { dlock__unresolved_run(arg); }

/* Hands the due chores to their workers; returns when the loop must look
 * again. mu held. */
static int64_t chores_locked(struct dlock_client *c, int64_t now) {
  dlock__holds_expire_locked(c, now);
  if (!c->renew_busy && c->renew_due <= now) {
    c->renew_busy = true;
    if (dlock__worker_submit(&c->renew_worker, renew_job, c) != 0) {
      c->renew_busy = false;
      c->renew_due = now + 50; /* try again shortly; holds expire meanwhile */
    }
  }
  if (!c->settle_busy && c->unresolved_due <= now) {
    c->settle_busy = true;
    if (dlock__worker_submit(&c->settle_worker, settle_job, c) != 0) {
      c->settle_busy = false;
      c->unresolved_due = now + 1000;
    }
  }
  int64_t until = c->vouch_due;
  if (!c->renew_busy && c->renew_due < until)
    until = c->renew_due;
  if (!c->settle_busy && c->unresolved_due < until)
    until = c->unresolved_due;
  return until;
}

/* The event loop. Each turn: report losses, hand due chores to the
 * workers, keep the watch connection (dial off-thread, subscriptions
 * written without blocking), deliver what it read, and sleep in poll()
 * until a descriptor, a poke or the next deadline. Nothing here waits on
 * the network. */
static void *bg_main(void *arg) {
  struct dlock_client *c = arg;
  bg_state s;
  memset(&s, 0, sizeof s);
  s.c = c;
  s.backoff = BACKOFF_MIN_MS;
  s.linger_at = DLOCK__NEVER;
  for (;;) {
    int64_t now = dlock__now_ms();
    pthread_mutex_lock(&c->mu);
    bool stop = c->stopping;
    int64_t until = stop ? 0 : chores_locked(c, now);
    bool lost = c->lost_pending;
    pthread_mutex_unlock(&c->mu);
    if (stop)
      break;
    if (lost)
      dlock__holds_report_lost(c);

    watch_maintain(c, &s, now);
    watch_sync(c, &s, now);

    pthread_mutex_lock(&c->mu);
    bool wanted = dlock__chans_wanted_locked(c);
    bool up = c->watch_up, dialing = c->dialing;
    pthread_mutex_unlock(&c->mu);
    if (s.linger_at < until)
      until = s.linger_at;
    if (wanted && !up && !dialing && s.retry_at < until)
      until = s.retry_at;
    struct pollfd p[2];
    p[0].fd = c->wake_rd;
    p[0].events = POLLIN;
    p[1].fd = up ? c->ops->watch_fd(c->be) : -1;
    p[1].events = (short)(POLLIN | (up && c->ops->watch_want_write(c->be)
                                        ? POLLOUT
                                        : 0));
    int nfds = p[1].fd >= 0 ? 2 : 1;
    int r = poll(p, (nfds_t)nfds, dlock__poll_timeout(until));
    if (r < 0 && errno != EINTR)
      dlock__log(c, DLOCK_LOG_ERROR, "poll: %s", strerror(errno));
    if (r <= 0)
      continue;
    if (p[0].revents)
      drain_pipe(c->wake_rd);
    if (nfds == 2 && p[1].revents) {
      int rc = 0;
      if (p[1].revents & POLLOUT)
        rc = c->ops->watch_flush(c->be);
      if (!rc && (p[1].revents & (POLLIN | POLLERR | POLLHUP)))
        rc = c->ops->watch_read(c->be, on_watch_event, &s);
      if (rc)
        watch_down(c, &s, dlock_last_error());
    }
  }
  fifo_clear(&s);
  dlock__free(s.fifo);
  return NULL;
}

/* ------------------------------------------------------------ public API */

/* Frees everything. `forked`: in a child after fork(), where client->mu
 * may have been held by a thread that does not exist here; it is not
 * touched (the child's copy of this client has no other user). */
static void client_destroy(struct dlock_client *c, bool forked) {
  if (forked) { /* their threads do not exist here */
    dlock__worker_forget(&c->renew_worker);
    dlock__worker_forget(&c->settle_worker);
    dlock__worker_forget(&c->dial_worker);
  } else { /* each waits for its job in progress, bounded by deadlines */
    dlock__worker_stop(&c->renew_worker);
    dlock__worker_stop(&c->settle_worker);
    dlock__worker_stop(&c->dial_worker);
  }
  if (c->be)
    c->ops->close(c->be);
  if (!forked)
    pthread_mutex_lock(&c->mu);
  struct dlock_lock *l = c->locks;
  while (l) {
    struct dlock_lock *next = l->next;
    l->magic = DLOCK__DEAD_MAGIC;
    dlock__free(l->name);
    dlock__free(l->channel);
    dlock__free(l->grant);
    dlock__free(l);
    l = next;
  }
  dlock__sync *y = c->syncs;
  while (y) {
    dlock__sync *next = y->next;
    y->magic = DLOCK__DEAD_MAGIC;
    dlock__free(y->name);
    dlock__free(y->channel);
    dlock__free(y);
    y = next;
  }
  dlock__holds_free_all_locked(c);
  dlock__chans_free_all_locked(c);
  dlock__unresolved_free_all_locked(c);
  if (!forked) {
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->calls_done);
    pthread_cond_destroy(&c->unresolved_cv);
  }
  if (c->wake_rd >= 0)
    close(c->wake_rd);
  if (c->wake_wr >= 0)
    close(c->wake_wr);
  dlock__options_clear(&c->opts);
  c->magic = DLOCK__DEAD_MAGIC;
  dlock__free(c);
}

int dlock_client_new(dlock_client_t **out, const char *url,
                     const dlock_options_t *opts) {
  if (!out)
    return dlock__seterr(DLOCK_EINVAL, "dlock_client_new: out is NULL");
  *out = NULL;
  if (!url)
    return dlock__seterr(DLOCK_EINVAL, "dlock_client_new: url is NULL");
  struct dlock_client *c = dlock__calloc(1, sizeof *c);
  if (!c)
    return DLOCK_ENOMEM;
  c->magic = DLOCK__CLIENT_MAGIC;
  c->fork_gen = fork_gen();
  c->wake_rd = c->wake_wr = -1;
  c->renew_due = DLOCK__NEVER;
  c->vouch_due = DLOCK__NEVER;
  c->unresolved_due = DLOCK__NEVER;
  dlock__worker_init(&c->renew_worker, "renewal");
  dlock__worker_init(&c->settle_worker, "settling");
  dlock__worker_init(&c->dial_worker, "dialling");
  pthread_mutex_init(&c->mu, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&c->calls_done, &attr);
  pthread_cond_init(&c->unresolved_cv, &attr);
  pthread_condattr_destroy(&attr);
  dlock__map_init(&c->holds);
  dlock__map_init(&c->chans);
  dlock__map_init(&c->unresolved);
  int rc = dlock__options_copy(&c->opts, opts);
  if (rc) {
    dlock__options_defaults(&c->opts);
    client_destroy(c, false);
    return rc;
  }
  int fds[2];
  if (!(c->ops = dlock__backend_for_url(url))) {
    rc = DLOCK_EURL;
    goto failed;
  }
  if ((rc = dlock__uuid(c->id)))
    goto failed;
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0) {
    rc = dlock__seterr(DLOCK_ESYS, "pipe2: %s", strerror(errno));
    goto failed;
  }
  c->wake_rd = fds[0];
  c->wake_wr = fds[1];
  if ((rc = c->ops->open(&c->be, url, &c->opts, c)))
    goto failed;
  int err = dlock__thread_start(&c->bg, bg_main, c);
  if (err) {
    rc = dlock__seterr(DLOCK_ESYS,
                       "cannot start the background thread: pthread_create: %s",
                       strerror(err));
    goto failed;
  }
  *out = c;
  return 0;
failed:
  client_destroy(c, false);
  return rc;
}

void dlock_client_free(dlock_client_t *c) {
  if (!c || c->magic != DLOCK__CLIENT_MAGIC)
    return;
  if (c->fork_gen != fork_gen()) {
    /* forked child: no background thread here; close and free only */
    client_destroy(c, true);
    return;
  }
  pthread_mutex_lock(&c->mu);
  c->stopping = true;
  /* wake every waiter so that none sleeps on a dying client */
  size_t cur;
  for (dlock__map_entry *e = dlock__map_first(&c->chans, &cur); e;
       e = dlock__map_next(&c->chans, e, &cur)) {
    dlock__chan *ch = e->value; /* visited twice with a grant name: harmless */
    for (dlock__waiter *w = ch->head; w; w = w->next)
      pthread_cond_signal(&w->cond);
  }
  /* calls in progress see `stopping` at their next step; wait for them
   * (each is bounded by its own network deadlines) before freeing */
  while (c->calls > 0)
    pthread_cond_wait(&c->calls_done, &c->mu);
  pthread_mutex_unlock(&c->mu);
  dlock__client_poke(c);
  pthread_join(c->bg, NULL);
  client_destroy(c, false);
}

const char *dlock_client_id(const dlock_client_t *c) {
  if (dlock__client_check(c, "dlock_client_id"))
    return "";
  return c->id;
}

int dlock_client_ping(dlock_client_t *c) {
  int rc = dlock__call_begin(c, "dlock_client_ping");
  if (rc)
    return rc;
  if (!(rc = dlock__need_op(c, c->ops->ping, "dlock_client_ping")))
    rc = c->ops->ping(c->be);
  dlock__call_end(c);
  return rc;
}

unsigned dlock_version(void) { return DLOCK_VERSION_HEX; }

const char *dlock_version_string(void) {
#define DLOCK__STR2(x) #x
#define DLOCK__STR(x) DLOCK__STR2(x)
  return DLOCK__STR(DLOCK_VERSION_MAJOR) "." DLOCK__STR(
      DLOCK_VERSION_MINOR) "." DLOCK__STR(DLOCK_VERSION_PATCH);
}
