/*
 * client.c - the client: creation, teardown, and its event loop.
 *
 * The event loop (one background thread per client) owns every timer and
 * drives the backend's descriptors (Redis: its pub/sub connection). It
 * sleeps in poll() on the wake pipe, the backend's descriptors and the next
 * deadline (a lease to renew, a hold's vouching deadline, an unresolved
 * wait to settle, whatever the backend asked for), and each turn:
 *   1. marks lost every hold it can no longer vouch for;
 *   2. hands due chores to the workers (worker.h): a renewal pass, a
 *      settling pass, the report of losses (the lost callbacks run on the
 *      notifying worker, one at a time and in order, with no mutex held,
 *      so that a callback that releases or acquires never stalls the
 *      loop); the backend may hand the dialling worker a connect;
 *   3. lets the backend prepare (loop_prepare) and, after poll(), handle
 *      what its descriptors reported (loop_dispatch); neither blocks.
 * It never waits on the network, so a loss is reported by its deadline
 * whatever round trip is pending, and an idle client sleeps in poll() with
 * no timer. It never holds client->mu across I/O or callbacks. All signals
 * are blocked in it and in the workers, so the application's signal
 * handlers never run there.
 *
 * Fork: a child process inherits no background thread, so every call on a
 * client created before fork() returns DLOCK_ECLOSED in the child; the
 * child's dlock_client_free() only closes descriptors and frees memory.
 *
 * This file is the top of the core: the client's creation, teardown and
 * loop call into every module. What the modules use of a client (checks,
 * call accounting, the poke, the log) is in client_base.c, below them.
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
#include "core/async.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/fmt.h"
#include "core/holds.h"
#include "core/session.h"
#include "core/wait.h"

/* -------------------------------------------------- background thread */

static void drain_pipe(int fd) {
  char buf[256];
  for (int i = 0; i < 64; i++) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < (ssize_t)sizeof buf)
      return;
  }
}

int dlock__client_run_dial(struct dlock_client *c, void (*fn)(void *),
                           void *arg) {
  return dlock__worker_submit(&c->dial_worker, fn, arg);
}

static void renew_job(void *arg) { dlock__renewer_run(arg); }
static void settle_job(void *arg) { dlock__unresolved_run(arg); }

/* Reports the losses marked so far; a loss marked after its last look
 * pokes the loop, which hands it another report. */
static void report_job(void *arg) {
  struct dlock_client *c = arg;
  dlock__holds_report_lost(c);
  pthread_mutex_lock(&c->mu);
  c->report_busy = false;
  bool again = c->lost_pending;
  pthread_mutex_unlock(&c->mu);
  if (again)
    dlock__client_poke(c);
}

/* Hands the due chores to their workers; returns when the loop must look
 * again. mu held. */
static int64_t chores_locked(struct dlock_client *c, int64_t now) {
  dlock__holds_expire_locked(c, now);
  dlock__session_expire_locked(c, now);
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
  if (dlock__session_due_locked(c) < until)
    until = dlock__session_due_locked(c);
  if (!c->renew_busy && c->renew_due < until)
    until = c->renew_due;
  if (!c->settle_busy && c->unresolved_due < until)
    until = c->unresolved_due;
  return until;
}

/* The event loop. Each turn: report losses, hand due chores to the
 * workers, let the backend prepare its descriptors and deadlines (Redis:
 * dial the watch connection off-thread, write subscriptions without
 * blocking), sleep in poll() until a descriptor, a poke or the next
 * deadline, and hand the backend what poll() saw. Nothing here waits on
 * the network. */
/* A backend's descriptors: over several servers one each, and on
 * PostgreSQL and MySQL one per hold and per statement in flight (a
 * program holding hundreds of locks); those beyond are polled every 100
 * ms. 8 KiB of the loop thread's stack. */
#define LOOP_FDS 1024

static void *bg_main(void *arg) {
  struct dlock_client *c = arg;
  for (;;) {
    int64_t now = dlock__now_ms();
    pthread_mutex_lock(&c->mu);
    bool stop = dlock__client_stopping(c);
    int64_t until = stop ? 0 : chores_locked(c, now);
    bool lost = false;
    if (!stop && c->lost_pending && !c->report_busy) {
      c->report_busy = true;
      if (dlock__worker_submit(&c->notify_worker, report_job, c) != 0) {
        c->report_busy = false;
        lost = true; /* no thread for it: reported here, as a last resort */
      }
    }
    pthread_mutex_unlock(&c->mu);
    if (stop)
      break;
    if (lost)
      dlock__holds_report_lost(c);
    dlock__session_tell(c); /* a session the clock ended, if any */

    struct pollfd p[1 + LOOP_FDS];
    p[0].fd = c->wake_rd;
    p[0].events = POLLIN;
    p[0].revents = 0;
    int nbe = c->ops->loop_prepare
                  ? c->ops->loop_prepare(c->be, now, p + 1, LOOP_FDS, &until)
                  : 0;
    int r = poll(p, (nfds_t)(1 + nbe), dlock__poll_timeout(until));
    if (r < 0 && errno != EINTR)
      dlock__log(c, DLOCK_LOG_ERROR, "poll: %s", strerror(errno));
    if (r <= 0)
      continue;
    if (p[0].revents)
      drain_pipe(c->wake_rd);
    if (nbe > 0 && c->ops->loop_dispatch)
      c->ops->loop_dispatch(c->be, dlock__now_ms(), p + 1, nbe);
  }
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
    dlock__worker_forget(&c->notify_worker);
  } else { /* each waits for its job in progress, bounded by deadlines */
    dlock__worker_stop(&c->renew_worker);
    dlock__worker_stop(&c->settle_worker);
    dlock__worker_stop(&c->dial_worker);
    dlock__worker_stop(&c->notify_worker);
  }
  if (c->be)
    c->ops->close(c->be);
  if (!forked)
    pthread_mutex_lock(&c->mu);
  struct dlock_lock *l = c->locks;
  while (l) {
    struct dlock_lock *next = l->next;
    l->magic = DLOCK__DEAD_MAGIC;
    if (l->bh && c->ops->handle_close)
      c->ops->handle_close(l->bh);
    dlock__free(l->name);
    dlock__free(l);
    l = next;
  }
  dlock__sync *y = c->syncs;
  while (y) {
    dlock__sync *next = y->next;
    y->magic = DLOCK__DEAD_MAGIC;
    dlock__free(y->name);
    dlock__free(y);
    y = next;
  }
  dlock__holds_free_all_locked(c);
  dlock__unresolved_free_all_locked(c);
  /* the client_owner gates left (lock.c's records of a plain struct) */
  size_t i = 0;
  for (dlock__map_entry *e = dlock__map_first(&c->gates, &i); e;
       e = dlock__map_next(&c->gates, e, &i))
    dlock__free(e->value);
  dlock__map_clear(&c->gates);
  dlock__async_free(c, forked);
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

int dlock__client_open(dlock_client_t **out, const dlock__backend_ops *ops,
                       const char *url, const dlock_options_t *opts) {
  struct dlock_client *c = dlock__calloc(1, sizeof *c);
  if (!c)
    return DLOCK_ENOMEM;
  c->magic = DLOCK__CLIENT_MAGIC;
  c->fork_gen = dlock__fork_gen();
  c->wake_rd = c->wake_wr = -1;
  c->renew_due = DLOCK__NEVER;
  c->vouch_due = DLOCK__NEVER;
  c->unresolved_due = DLOCK__NEVER;
  dlock__worker_init(&c->renew_worker, "renewal");
  dlock__worker_init(&c->settle_worker, "settling");
  dlock__worker_init(&c->dial_worker, "dialling");
  dlock__worker_init(&c->notify_worker, "notifying");
  pthread_mutex_init(&c->mu, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&c->calls_done, &attr);
  pthread_cond_init(&c->unresolved_cv, &attr);
  pthread_condattr_destroy(&attr);
  dlock__map_init(&c->holds);
  dlock__map_init(&c->unresolved);
  dlock__map_init(&c->gates);
  int rc = dlock__options_copy(&c->opts, opts);
  if (rc) {
    dlock__options_defaults(&c->opts);
    client_destroy(c, false);
    return rc;
  }
  int fds[2];
  c->ops = ops;
  if ((rc = dlock__uuid(c->id)) || (rc = dlock__reqids_init(&c->reqids)))
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
  if (c->fork_gen != dlock__fork_gen()) {
    /* forked child: no background thread here; close and free only */
    client_destroy(c, true);
    return;
  }
  pthread_mutex_lock(&c->mu);
  atomic_fetch_or(&c->callstate, 1);
  /* wake every waiter so that none sleeps on a dying client */
  dlock__waits_wake_all_locked(c);
  dlock__async_wake_all_locked(c);
  /* calls in progress see `stopping` at their next step; wait for them
   * (each is bounded by its own network deadlines) before freeing */
  while ((atomic_load(&c->callstate) >> 1) > 0)
    pthread_cond_wait(&c->calls_done, &c->mu);
  pthread_mutex_unlock(&c->mu);
  /* async operations ended with the calls; their callbacks run here */
  dlock__async_stop(c);
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

int dlock_client_session_timeout(dlock_client_t *c, int64_t *ms) {
  int rc = dlock__call_begin(c, "dlock_client_session_timeout");
  if (rc)
    return rc;
  if (ms == NULL)
    rc =
        dlock__seterr(DLOCK_EINVAL, "dlock_client_session_timeout: ms is NULL");
  else if (*ms = 0, !(rc = dlock__need_op(c, c->ops->session_length != NULL,
                                          "dlock_client_session_timeout")))
    rc = c->ops->session_length(c->be, ms);
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
