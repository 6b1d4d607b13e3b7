/*
 * worker.c - a thread for blocking chores (see worker.h).
 */
#include "core/worker.h"

#include <signal.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

void dlock__worker_init(dlock__worker *w, const char *name) {
  memset(w, 0, sizeof *w);
  w->name = name;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
}

int dlock__thread_start(pthread_t *t, void *(*fn)(void *), void *arg) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int err = pthread_create(t, NULL, fn, arg);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return err;
}

static void *worker_main(void *arg) {
  dlock__worker *w = arg;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (!w->head && !w->stopping)
      pthread_cond_wait(&w->cv, &w->mu);
    if (w->stopping)
      break;
    dlock__job *j = w->head;
    w->head = j->next;
    if (!w->head)
      w->tail = NULL;
    pthread_mutex_unlock(&w->mu);
    j->fn(j->arg);
    dlock__free(j);
    pthread_mutex_lock(&w->mu);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

int dlock__worker_submit(dlock__worker *w, dlock__job_fn fn, void *arg) {
  dlock__job *j = dlock__calloc(1, sizeof *j);
  if (!j)
    return DLOCK_ENOMEM;
  j->fn = fn;
  j->arg = arg;
  pthread_mutex_lock(&w->mu);
  if (w->stopping) {
    pthread_mutex_unlock(&w->mu);
    dlock__free(j);
    return dlock__seterr(DLOCK_ECLOSED, "the client is being freed");
  }
  if (!w->started) {
    int err = dlock__thread_start(&w->thread, worker_main, w);
    if (err) {
      pthread_mutex_unlock(&w->mu);
      dlock__free(j);
      return dlock__seterr(DLOCK_ESYS, "cannot start the %s thread: "
                                       "pthread_create: %s",
                           w->name, strerror(err));
    }
    w->started = true;
  }
  if (w->tail)
    w->tail->next = j;
  else
    w->head = j;
  w->tail = j;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
  return 0;
}

static void drop_queue(dlock__worker *w) {
  while (w->head) {
    dlock__job *j = w->head;
    w->head = j->next;
    dlock__free(j);
  }
  w->tail = NULL;
}

void dlock__worker_stop(dlock__worker *w) {
  pthread_mutex_lock(&w->mu);
  w->stopping = true;
  bool started = w->started;
  pthread_t t = w->thread;
  w->started = false;
  pthread_cond_signal(&w->cv);
  pthread_mutex_unlock(&w->mu);
  if (started) /* join outside the lock */
    pthread_join(t, NULL);
  pthread_mutex_lock(&w->mu);
  drop_queue(w);
  pthread_mutex_unlock(&w->mu);
  pthread_mutex_destroy(&w->mu);
  pthread_cond_destroy(&w->cv);
}

void dlock__worker_forget(dlock__worker *w) {
  drop_queue(w);
  w->started = false;
}
