/*
 * async.c - the pool that runs async operations, their timers and
 * parking, the completion queue and its descriptor, and the public calls
 * that drive them from a program's loop (dlock_client_fd, _process,
 * _pending, dlock_op_cancel). See async.h for the model.
 *
 * The engine (one per client, made on first use) keeps, under client->mu:
 *   - the run queue (FIFO) that the pool threads take operations from;
 *   - a binary min-heap of parked operations by their timer;
 *   - the list of pending operations (started, callback not yet run), for
 *     cancel by id and for teardown;
 *   - the completion queue, and a pipe whose read end is the completion
 *     descriptor: one byte is written when the queue stops being empty,
 *     and dlock_client_process drains it as it takes the queue, both
 *     under the mutex, so the descriptor is readable exactly while
 *     callbacks wait.
 * A pool thread sleeps on the engine's condition until an operation is
 * runnable or the earliest timer is due. Threads start as operations need
 * them, up to the option's count, with every signal blocked.
 */
#define _GNU_SOURCE 1

#include "core/async.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/client_base.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/wait.h"
#include "core/worker.h"

/* AOP_SENT: its request is on the backend's way (lock_*_send), and no
 * pool thread has it; the reply's handler goes on with it. */
enum { AOP_RUNNABLE = 1, AOP_RUNNING, AOP_PARKED, AOP_DONE, AOP_SENT };

#define ASYNC_THREADS_MAX 64

typedef struct dlock__async {
  pthread_cond_t cv; /* a pool thread has work (client->mu) */
  pthread_t threads[ASYNC_THREADS_MAX];
  int nthreads, idle, max;
  bool stopping;
  dlock__aop *runq, *runq_tail;
  dlock__aop **heap;
  size_t nheap, capheap;
  dlock__aop *pending; /* started, callback not run */
  size_t npending;
  dlock__aop *doneq, *doneq_tail;
  int fd_rd, fd_wr;
  bool signalled; /* a byte is in the pipe */
  int draining;   /* dlock_client_process calls running callbacks */
  uint64_t next_id;
} dlock__async;

/* ---------------------------------------------------------------- heap */

static void heap_set(dlock__async *a, size_t i, dlock__aop *op) {
  a->heap[i] = op;
  op->heap_at = i;
}

static void heap_up(dlock__async *a, size_t i) {
  dlock__aop *op = a->heap[i];
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (a->heap[p]->until <= op->until)
      break;
    heap_set(a, i, a->heap[p]);
    i = p;
  }
  heap_set(a, i, op);
}

static void heap_down(dlock__async *a, size_t i) {
  dlock__aop *op = a->heap[i];
  for (;;) {
    size_t l = 2 * i + 1, m = i;
    int64_t best = op->until;
    if (l < a->nheap && a->heap[l]->until < best)
      m = l, best = a->heap[l]->until;
    if (l + 1 < a->nheap && a->heap[l + 1]->until < best)
      m = l + 1;
    if (m == i)
      break;
    heap_set(a, i, a->heap[m]);
    i = m;
  }
  heap_set(a, i, op);
}

static bool heap_push(dlock__async *a, dlock__aop *op) {
  if (a->nheap == a->capheap) {
    size_t cap = a->capheap ? 2 * a->capheap : 64;
    dlock__aop **h = dlock__reallocarray(a->heap, cap, sizeof *h);
    if (!h)
      return false;
    a->heap = h;
    a->capheap = cap;
  }
  heap_set(a, a->nheap++, op);
  heap_up(a, a->nheap - 1);
  return true;
}

static void heap_remove(dlock__async *a, dlock__aop *op) {
  size_t i = op->heap_at;
  dlock__aop *last = a->heap[--a->nheap];
  if (i == a->nheap)
    return;
  heap_set(a, i, last);
  heap_up(a, i);
  heap_down(a, last->heap_at);
}

/* ---------------------------------------------------------- the engine */

static void runq_push_locked(dlock__async *a, dlock__aop *op) {
  op->where = AOP_RUNNABLE;
  op->qnext = NULL;
  if (a->runq_tail)
    a->runq_tail->qnext = op;
  else
    a->runq = op;
  a->runq_tail = op;
  if (a->idle > 0)
    pthread_cond_signal(&a->cv);
}

/* A parked op leaves its timer and runs again (mu held). */
static void unpark_locked(dlock__async *a, dlock__aop *op) {
  if (op->until != DLOCK__NEVER)
    heap_remove(a, op);
  runq_push_locked(a, op);
}

static void *pool_main(void *arg);

/* mu held: a thread for the queued work, when none is idle and the pool
 * may grow. The first thread's failure is an error; a later one's only
 * means fewer threads. */
static int grow_locked(struct dlock_client *c, dlock__async *a) {
  if (a->idle > 0 || a->nthreads >= a->max)
    return 0;
  int rc = dlock__thread_start(&a->threads[a->nthreads], pool_main, c);
  if (rc)
    return a->nthreads == 0 ? rc : 0;
  a->nthreads++;
  return 0;
}

static void *pool_main(void *arg) {
  struct dlock_client *c = arg;
  pthread_mutex_lock(&c->mu);
  dlock__async *a = c->async;
  for (;;) {
    int64_t now = dlock__now_ms();
    while (a->nheap > 0 && a->heap[0]->until <= now)
      unpark_locked(a, a->heap[0]);
    dlock__aop *op = a->runq;
    if (op) {
      a->runq = op->qnext;
      if (!a->runq)
        a->runq_tail = NULL;
      op->where = AOP_RUNNING;
      /* more work queued and nobody idle: another thread may help */
      if (a->runq && a->idle == 0)
        grow_locked(c, a);
      pthread_mutex_unlock(&c->mu);
      op->run(op);
      pthread_mutex_lock(&c->mu);
      continue;
    }
    if (a->stopping)
      break;
    a->idle++;
    if (a->nheap > 0) {
      struct timespec ts;
      dlock__deadline_timespec(a->heap[0]->until, &ts);
      pthread_cond_timedwait(&a->cv, &c->mu, &ts);
    } else {
      pthread_cond_wait(&a->cv, &c->mu);
    }
    a->idle--;
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

/* The engine of c, made on first use (mu held). */
static int engine_locked(struct dlock_client *c, dlock__async **out) {
  if (c->async) {
    *out = c->async;
    return 0;
  }
  dlock__async *a = dlock__calloc(1, sizeof *a);
  if (!a)
    return DLOCK_ENOMEM;
  int fds[2];
  if (pipe2(fds, O_NONBLOCK | O_CLOEXEC) != 0) {
    int e = errno;
    dlock__free(a);
    return dlock__seterr(DLOCK_ESYS, "pipe2 for the completion descriptor: %s",
                         strerror(e));
  }
  a->fd_rd = fds[0];
  a->fd_wr = fds[1];
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&a->cv, &attr);
  pthread_condattr_destroy(&attr);
  a->max = c->opts.async_threads > 0 ? c->opts.async_threads : 4;
  if (a->max > ASYNC_THREADS_MAX)
    a->max = ASYNC_THREADS_MAX;
  c->async = a;
  *out = a;
  return 0;
}

/* Registers op as pending (mu held); queued to run when `run`. */
static int start_locked(struct dlock_client *c, dlock__aop *op, dlock_op_t *id,
                        bool run) {
  dlock__async *a = NULL;
  int rc = engine_locked(c, &a);
  if (!rc && a->stopping)
    rc = dlock__seterr(DLOCK_ECLOSED, "the client is being freed");
  if (!rc && run && a->nthreads == 0)
    rc = grow_locked(c, a);
  if (rc)
    return rc;
  op->c = c;
  op->id = ++a->next_id;
  op->until = DLOCK__NEVER;
  op->next = a->pending;
  if (a->pending)
    a->pending->prev = op;
  a->pending = op;
  if (!op->then) /* a step of another operation is not the program's */
    a->npending++;
  if (id)
    *id = op->id;
  if (run) {
    runq_push_locked(a, op);
    grow_locked(c, a);
  } else {
    op->where = AOP_SENT;
  }
  return 0;
}

int dlock__aop_start(struct dlock_client *c, dlock__aop *op, dlock_op_t *id) {
  pthread_mutex_lock(&c->mu);
  int rc = start_locked(c, op, id, true);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

int dlock__aop_start_sent(struct dlock_client *c, dlock__aop *op,
                          dlock_op_t *id) {
  pthread_mutex_lock(&c->mu);
  int rc = start_locked(c, op, id, false);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

int dlock__aop_resume(dlock__aop *op) {
  struct dlock_client *c = op->c;
  pthread_mutex_lock(&c->mu);
  dlock__async *a = c->async;
  int rc = a->nthreads == 0 ? grow_locked(c, a) : 0;
  if (!rc) {
    runq_push_locked(a, op);
    grow_locked(c, a);
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

bool dlock__aop_park(dlock__aop *op, int64_t until,
                     bool (*due)(dlock__aop *op, void *arg), void *arg) {
  struct dlock_client *c = op->c;
  pthread_mutex_lock(&c->mu);
  dlock__async *a = c->async;
  if (due(op, arg)) {
    pthread_mutex_unlock(&c->mu);
    return false;
  }
  op->until = until;
  if (until != DLOCK__NEVER && !heap_push(a, op)) {
    /* a timer that cannot be kept for want of memory: the operation goes
     * on at once, a poll rather than a loss */
    op->until = DLOCK__NEVER;
    pthread_mutex_unlock(&c->mu);
    return false;
  }
  op->where = AOP_PARKED;
  /* an earlier timer than an idle thread sleeps to, maybe */
  if (until != DLOCK__NEVER && a->idle > 0)
    pthread_cond_signal(&a->cv);
  pthread_mutex_unlock(&c->mu);
  return true;
}

void dlock__aop_wake_locked(dlock__aop *op) {
  if (op->where == AOP_PARKED)
    unpark_locked(op->c->async, op);
}

void dlock__aop_notify(dlock__wait *w) {
  if (w->notify_arg)
    dlock__aop_wake_locked(w->notify_arg);
}

const char *dlock__aop_error(const dlock__aop *op) {
  return op->errmsg ? op->errmsg : "(its detail was lost: out of memory)";
}

void dlock__aop_free(dlock__aop *op) {
  dlock__free(op->errmsg);
  op->free_fn(op);
}

/* op leaves the pending list (mu held). */
static void unlist_locked(dlock__async *a, dlock__aop *op) {
  if (op->prev)
    op->prev->next = op->next;
  else
    a->pending = op->next;
  if (op->next)
    op->next->prev = op->prev;
  op->prev = op->next = NULL;
  if (!op->then)
    a->npending--;
}

static void signal_locked(dlock__async *a);

void dlock__aop_complete(dlock__aop *op, int rc, int64_t value) {
  struct dlock_client *c = op->c;
  op->rc = rc;
  op->value = value;
  /* kept only for a failure: a waiting record carries no message buffer */
  op->errmsg = rc < 0 ? dlock__strdup(dlock_last_error()) : NULL;
  pthread_mutex_lock(&c->mu);
  dlock__async *a = c->async;
  op->where = AOP_DONE;
  if (op->then) {
    unlist_locked(a, op);
    pthread_mutex_unlock(&c->mu);
    op->then(op);
    return;
  }
  op->qnext = NULL;
  if (a->doneq_tail)
    a->doneq_tail->qnext = op;
  else
    a->doneq = op;
  a->doneq_tail = op;
  /* a process call running callbacks takes it before it returns */
  if (!a->draining)
    signal_locked(a);
  pthread_mutex_unlock(&c->mu);
}

void dlock__async_wake_all_locked(struct dlock_client *c) {
  dlock__async *a = c->async;
  if (!a)
    return;
  for (dlock__aop *op = a->pending; op; op = op->next)
    if (op->where == AOP_PARKED)
      unpark_locked(a, op);
}

/* The descriptor becomes readable (mu held), if it is not already. */
static void signal_locked(dlock__async *a) {
  if (a->signalled)
    return;
  char b = 1;
  /* a full pipe is readable already; nothing else can fail here */
  if (write(a->fd_wr, &b, 1) == 1 || errno == EAGAIN)
    a->signalled = true;
}

/* Takes the completion queue (mu held), draining the descriptor. */
static dlock__aop *take_done_locked(dlock__async *a) {
  dlock__aop *list = a->doneq;
  a->doneq = a->doneq_tail = NULL;
  /* taken: no longer pending (its callback runs now, once) */
  for (dlock__aop *op = list; op; op = op->qnext)
    unlist_locked(a, op);
  if (a->signalled) {
    char buf[64];
    while (read(a->fd_rd, buf, sizeof buf) > 0)
      ;
    a->signalled = false;
  }
  return list;
}

/* Runs the callbacks of `list` on this thread, no mutex held. */
static int run_callbacks(dlock__aop *list) {
  int n = 0;
  while (list) {
    dlock__aop *op = list;
    list = op->qnext;
    if (op->rc < 0)
      dlock__seterr(op->rc, "%s", dlock__aop_error(op));
    op->done(op->userdata, op->rc, op->value);
    dlock__aop_free(op);
    n++;
  }
  return n;
}

void dlock__async_stop(struct dlock_client *c) {
  pthread_mutex_lock(&c->mu);
  dlock__async *a = c->async;
  if (!a) {
    pthread_mutex_unlock(&c->mu);
    return;
  }
  a->stopping = true;
  pthread_cond_broadcast(&a->cv);
  int n = a->nthreads;
  pthread_mutex_unlock(&c->mu);
  for (int i = 0; i < n; i++)
    pthread_join(a->threads[i], NULL);
  pthread_mutex_lock(&c->mu);
  a->nthreads = 0;
  dlock__aop *list = take_done_locked(a);
  pthread_mutex_unlock(&c->mu);
  run_callbacks(list);
}

void dlock__async_free(struct dlock_client *c, bool forked) {
  dlock__async *a = c->async;
  if (!a)
    return;
  /* after dlock__async_stop nothing is pending; in a forked child the
   * records are dropped unrun (their threads are the parent's) */
  if (forked) {
    dlock__aop *op = a->pending;
    while (op) {
      dlock__aop *next = op->next;
      dlock__aop_free(op);
      op = next;
    }
  } else {
    pthread_cond_destroy(&a->cv);
  }
  close(a->fd_rd);
  close(a->fd_wr);
  dlock__free(a->heap);
  dlock__free(a);
  c->async = NULL;
}

/* ------------------------------------------------ one blocking call */

typedef struct call_aop {
  dlock__aop op;
  dlock__aop_call_fn fn;
  _Alignas(max_align_t) unsigned char arg[DLOCK__AOP_ARG_MAX];
} call_aop;

static void call_run(dlock__aop *op) {
  call_aop *o = (call_aop *)op;
  int64_t value = 0;
  int rc = o->fn(o->arg, &value);
  dlock__aop_complete(op, rc, rc == 0 ? value : 0);
}

static void call_free(dlock__aop *op) { dlock__free(op); }

int dlock__aop_call(struct dlock_client *c, dlock__aop_call_fn fn,
                    const void *arg, size_t size, dlock_done_fn done,
                    void *userdata, dlock_op_t *id) {
  call_aop *o = size <= DLOCK__AOP_ARG_MAX ? dlock__calloc(1, sizeof *o) : NULL;
  if (!o)
    return DLOCK_ENOMEM;
  o->fn = fn;
  memcpy(o->arg, arg, size);
  o->op.run = call_run;
  o->op.free_fn = call_free;
  o->op.done = done;
  o->op.userdata = userdata;
  int rc = dlock__aop_start(c, &o->op, id);
  if (rc)
    dlock__free(o);
  return rc;
}

/* ------------------------------------------------------- public calls */

int dlock_client_fd(dlock_client_t *c, int *fd) {
  int rc = dlock__client_check(c, "dlock_client_fd");
  if (rc)
    return rc;
  if (!fd)
    return dlock__seterr(DLOCK_EINVAL, "dlock_client_fd: fd is NULL");
  pthread_mutex_lock(&c->mu);
  dlock__async *a = NULL;
  rc = engine_locked(c, &a);
  if (!rc)
    *fd = a->fd_rd;
  pthread_mutex_unlock(&c->mu);
  return rc;
}

/* Rounds of callbacks one dlock_client_process call runs at most: the
 * completions of operations that its callbacks started come back within
 * the same call (no descriptor wake-up each), but a chain that never ends
 * does not keep the program's loop from its other work. */
#define PROCESS_ROUNDS 16

int dlock_client_process(dlock_client_t *c) {
  int rc = dlock__client_check(c, "dlock_client_process");
  if (rc)
    return rc;
  int n = 0;
  pthread_mutex_lock(&c->mu);
  dlock__async *a = c->async;
  if (!a) {
    pthread_mutex_unlock(&c->mu);
    return 0;
  }
  a->draining++;
  for (int round = 0; round < PROCESS_ROUNDS && a->doneq; round++) {
    dlock__aop *list = take_done_locked(a);
    pthread_mutex_unlock(&c->mu);
    n += run_callbacks(list);
    pthread_mutex_lock(&c->mu);
  }
  /* under the same hold as the last look at the queue: a completion
   * from now on signals the descriptor itself */
  a->draining--;
  if (a->doneq && !a->draining)
    signal_locked(a); /* rounds left over: readable again */
  pthread_mutex_unlock(&c->mu);
  return n;
}

size_t dlock_client_pending(dlock_client_t *c) {
  if (dlock__client_check(c, "dlock_client_pending"))
    return 0;
  pthread_mutex_lock(&c->mu);
  size_t n = c->async ? c->async->npending : 0;
  pthread_mutex_unlock(&c->mu);
  return n;
}

int dlock_op_cancel(dlock_client_t *c, dlock_op_t id) {
  int rc = dlock__client_check(c, "dlock_op_cancel");
  if (rc)
    return rc;
  pthread_mutex_lock(&c->mu);
  dlock__aop *op = c->async ? c->async->pending : NULL;
  while (op && op->id != id)
    op = op->next;
  if (op) {
    atomic_store(&op->cancelled, true);
    dlock__aop_wake_locked(op);
  }
  pthread_mutex_unlock(&c->mu);
  if (!op)
    return dlock__seterr(DLOCK_EINVAL,
                         "dlock_op_cancel: no operation %llu is pending (its "
                         "callback has run, or it never existed)",
                         (unsigned long long)id);
  return 0;
}
