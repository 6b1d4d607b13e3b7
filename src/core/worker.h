/*
 * worker.h - a thread that runs a client's blocking chores off its event
 * loop.
 *
 * The client's background loop (client.c) must never block on a round
 * trip: a lost lock is reported by its deadline whatever else is pending.
 * The exchanges that do block (a batch of lease renewals, settling the
 * waits whose outcome is unknown, dialling the wake-up connection) are
 * handed to workers, one per kind of chore, so that a slow chore of one
 * kind never delays another: renewals never wait behind a hundred
 * unresolved waits during an outage.
 *
 * A worker runs one job at a time, in order. Its thread starts with the
 * first job (a client that never waits or renews starts none) with every
 * signal blocked, and stops at dlock__worker_stop(), which waits for the
 * job in progress (each is bounded by its own network deadlines) and drops
 * the queued ones unrun.
 *
 * Threads: submit and stop from any thread; jobs run on the worker's.
 * worker->mu guards the queue only and is never held while a job runs.
 */
#ifndef DLOCK_CORE_WORKER_H
#define DLOCK_CORE_WORKER_H

#include <pthread.h>
#include <stdbool.h>

typedef void (*dlock__job_fn)(void *arg);

typedef struct dlock__job {
  dlock__job_fn fn;
  void *arg;
  struct dlock__job *next;
} dlock__job;

typedef struct dlock__worker {
  const char *name; /* for messages: "renewal", "settling", "dialling" */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  /* --- under mu --- */
  dlock__job *head, *tail;
  bool started, stopping;
  pthread_t thread;
} dlock__worker;

/* pthread_create with every signal blocked in the new thread, so the
 * application's handlers never run on the library's threads. */
int dlock__thread_start(pthread_t *t, void *(*fn)(void *), void *arg);

void dlock__worker_init(dlock__worker *w, const char *name);
/* Queues fn(arg); starts the thread if needed. 0, or DLOCK_ENOMEM,
 * DLOCK_ESYS (no thread) or DLOCK_ECLOSED (stopping), with detail set;
 * the job is then not queued. */
int dlock__worker_submit(dlock__worker *w, dlock__job_fn fn, void *arg);
/* Stops the thread (waiting for the running job) and frees the queue. */
void dlock__worker_stop(dlock__worker *w);
/* In a forked child: forgets the thread (it does not exist there). */
void dlock__worker_forget(dlock__worker *w);

#endif
