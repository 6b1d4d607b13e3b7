/*
 * run.c - running a command while holding the lock (RUN mode), or holding
 * it until told to stop (HOLD mode). This is dlock's process supervision.
 *
 * Design note.
 * - One event loop on the main thread waits in poll() on two descriptors and
 *   nothing else: a signalfd (SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGCONT)
 *   and an event pipe. It never wakes on a timer except for a deadline it
 *   has set itself (-w, --kill-after, or the end of a fixed lease for a -v
 *   note).
 * - -w bounds the whole wait: the connect timeout is cut to it, and at -w
 *   (plus CLI_WAIT_GRACE_MS, for the library's own time-out to come first)
 *   the main thread ends dlock whatever step the worker is stuck in
 *   (wait_ran_out): 69 when the backend never answered, else the -E
 *   status. -n: one attempt within the connect timeout.
 * - A grant is never used once it has lapsed (a waiter stopped while
 *   queued is handed the lock, and its lease runs out before it runs
 *   again). dlock_lock_hold_valid, the library's answer by its own clock,
 *   is asked after the first lock of an exclusive kind (no waiting for the
 *   second on a lapsed first), before the command starts (exit 75, one
 *   line, the command not run), and on SIGCONT while it runs (a loss).
 * - The signals are blocked before any thread exists, so the library's
 *   background thread and our worker inherit the mask and the signals reach
 *   only the signalfd. The child gets the original mask back (between
 *   fork and exec), so it sees signals exactly as dlock's caller set them
 *   up; a stop signal the caller ignored (nohup, a script's background
 *   job) is left out of the set and stays ignored for both.
 * - The command dies with dlock (spawn_child). Between fork and exec the
 *   child sets PR_SET_PDEATHSIG(SIGKILL) and then checks that its parent
 *   is still the dlock that forked it (a dlock that died first would
 *   never send the signal: the child exits 75 without exec). It runs in a
 *   process group of its own, and dlock is PR_SET_CHILD_SUBREAPER: the
 *   orphans of the command's tree are adopted by dlock, not init. A
 *   forwarded signal goes to the command's group; a loss (--on-lost
 *   term/kill) signals the group and every adopted orphan. A guard
 *   process (guard_main) waits on a pipe whose only writer is dlock: when
 *   dlock dies, even by SIGKILL, the kernel closes the pipe and the guard
 *   kills the command's group with SIGKILL (the direct child gets its
 *   parent-death signal at the same moment). Measured (die_with_dlock.sh):
 *   command and grandchild gone within 30 ms of kill -9 of dlock. Not
 *   reached: a descendant that left the group (setsid) once dlock is
 *   dead, and the command's own writes in flight (fencing tokens are for
 *   those). In the foreground of a terminal (stdin a terminal whose
 *   foreground group is dlock's), the command stays in dlock's group, as
 *   with timeout --foreground, so that it can read the terminal and ^Z
 *   stops both; there is no guard then, only the parent-death signal.
 * - The wait for the lock runs on a worker thread (connect + acquire), so
 *   SIGINT/SIGTERM still act while the library blocks. Locks are owned per
 *   thread, so the worker acquires "as" the main thread's id and the main
 *   thread releases with the same id. A signal during the wait ends dlock by
 *   that same signal, unless the grant has already happened on the server
 *   (see stop_while_waiting()).
 * - The library reports a lost lock on its background thread; the callback
 *   only writes one byte to the event pipe (non-blocking, never stalls the
 *   library). The worker announces the end of its acquire the same way.
 *   A loss is said in one line: what happened, what was done to the
 *   command, and (unless the backend is unreachable) who holds the lock
 *   now, read after the command was signalled (handle_lost, holder_now).
 * - -v while waiting: a watcher thread (watch_main) started by the worker
 *   says who holds the lock and how many wait ahead, from its own state
 *   reads (1 s in, then every 10 s on a terminal, else on change); the
 *   worker stops it without waiting when its acquire returns, and it is
 *   joined before the client is freed, so it never delays the grant.
 *   Who this dlock is (host, pid, user, command line, start) is recorded
 *   beside the lock for others' --status and -v (who.c).
 * - Signals are forwarded to the child, except one the terminal sent to our
 *   whole process group (si_code SI_KERNEL) while the child is in that group:
 *   it has already received it, and a second copy would make a program that
 *   counts Ctrl-C (a REPL) quit.
 * - Kinds (args.h). An exclusive holder (-x, the default) takes two locks,
 *   in this order: the fenced lock NAME (Redisson's RLock hash plus its
 *   token key, so library and Redisson users of the lock NAME are excluded,
 *   and the child gets DLOCK_TOKEN), then the write side of the read-write
 *   lock NAME:dlock-rw. A -F holder takes the fair lock NAME instead of the
 *   fenced one, then the same write side. A -s holder takes only the read
 *   side of NAME:dlock-rw. So -s holders share with each other and exclude
 *   every -x and -F holder, and no read-write hash ever lands on the key
 *   NAME (a read acquire would take over a lock hash there). Every exclusive
 *   holder takes NAME first and readers never take it, so the order cannot
 *   deadlock. One wait budget (-w) covers both acquires; if the second one
 *   gives up, the first is released. Release goes in the reverse order.
 *   Why one lock cannot do (slots, wake-ups across kinds, starvation):
 *   docs/LAYOUT.md, "Why an exclusive dlock takes two locks".
 * - Several servers or names. Several -u without --all: one Redlock client
 *   (the library's, a majority of the nodes), holding the fenced lock NAME
 *   only (a Redlock has no read-write lock, so no -s). With --all (one
 *   client per server) or -M (several NAMEs): a multilock ("group") of,
 *   per client and name, the fenced lock and, on a one-server client, the
 *   write side of NAME:dlock-rw, taken all or nothing by the library; no
 *   DLOCK_TOKEN (the members' tokens are unrelated). A loss of any member
 *   is the group's loss (--on-lost). A stop signal while a group is being
 *   acquired ends dlock at once: an attempt's partial set is left to its
 *   lease, as after a crash.
 * - DLOCK_TOKEN reaches the child through the environment array given to
 *   execve (built after the grant; setenv() is not safe once threads
 *   run). A fair or shared holder has no token: the variable is then
 *   absent.
 * - Exit status: the child's (128+S when killed by S); 75 when the lock
 *   was lost while it ran (--on-lost term, kill or ignore alike, or found
 *   gone at release), or the grant lapsed before it could start; the -E
 *   status when -n/-w gave up.
 */
#define _GNU_SOURCE

#include "cli.h"
#include "url.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* The library's default connect timeout (dlock_options_new), and how long
 * past -w the main thread lets the library's own time-out come first. */
#define CLI_CONNECT_TIMEOUT_MS 5000
#define CLI_WAIT_GRACE_MS 100

struct run {
  struct cli_ctx *c;
  int sigfd;
  int evr, evw; /* event pipe: 'A' acquire finished, 'G'/'U'/'S' lost */
  sigset_t oldmask;
  bool pipe_was_default; /* SIGPIPE had SIG_DFL before we ignored it */
  uint64_t owner;        /* thread id the lock is held as */
  /* mu guards stopping and published: the main thread sets stopping on a
   * stop signal during the wait; the worker sets published (client and
   * lock are usable by the main thread) unless stopping is already set. */
  pthread_mutex_t mu;
  bool stopping, published;
  /* Written by the worker before it sends 'A'; read after the join (and,
   * once published, the handles by the main thread too). */
  dlock_client_t *client;
  dlock_lock_t *lock; /* fenced or fair NAME; for -s the read side */
  dlock_lock_t *side; /* exclusive kinds: the write side, else NULL */
  dlock_permit_sem_t *sem;               /* -N: the semaphore, else NULL */
  char permit[DLOCK_PERMIT_ID_LEN + 1]; /* -N: the permit held */
  int64_t token;      /* fenced grant's token; 0: none */
  /* several servers (--all) or names (-M): the group and what it owns */
  dlock_multilock_t *multi;
  dlock_lock_t **members;
  size_t nmembers;
  dlock_client_t **clients; /* --all: one per server; clients[0] == client */
  size_t nclients;
  char **side_names; /* -M: NAME:dlock-rw per name */
  int acquire_err;
  bool failed; /* no lock: worker_rc is the exit status */
  int worker_rc;
  int64_t t_start, t_acquired;
  /* the worker's stage: 0 connecting (no answer from the backend yet),
   * 1 acquiring (connected) */
  _Atomic int stage;
  _Atomic bool finished; /* the worker has said all it had to say */
  pthread_t worker;      /* its thread */
  /* Main thread only. */
  pid_t child;
  pid_t pgid;   /* the command's own process group; 0: it shares ours */
  pid_t guard;  /* the guard process (see guard_main), or 0 */
  int guard_fd; /* its pipe's write end, or -1 */
  _Atomic int64_t continued_at; /* when SIGCONT last came (0: never) */
  int64_t lapsed_ms; /* the worker found NAME's grant lapsed that long ago
                        (before taking the second lock); -1: not */
  /* -v while waiting (watch_main): a thread that reads the lock's state
   * and says who holds it; watch_stop (under mu, cv) ends it */
  pthread_t watcher;
  bool watching; /* started, not yet joined */
  bool watch_stop;
  pthread_cond_t cv;
  bool lost;        /* the library reported the hold lost */
  char lost_reason; /* 'G' gone, 'U' unreachable, 'S' session ended */
  int64_t lost_lapsed_ms; /* 'P': its lease ran out that long ago; -1 */
  bool acted;             /* --on-lost signalled the child */
};

enum ev_kind { EV_SIGNAL, EV_DONE, EV_LOST, EV_TIMEOUT, EV_ERROR };

struct event {
  enum ev_kind kind;
  int signo;
  int code;  /* si_code of a signal */
  char lost; /* 'G' gone, 'U' unreachable, 'S' session ended */
};

static void on_lost(void *userdata, const char *name, uint64_t thread_id,
                    dlock_lost_reason_t reason) {
  struct run *r = userdata;
  char b = reason == DLOCK_LOST_UNREACHABLE ? 'U'
           : reason == DLOCK_LOST_SESSION   ? 'S'
                                            : 'G';
  ssize_t n;
  (void)name;
  (void)thread_id;
  do
    n = write(r->evw, &b, 1);
  while (n < 0 && errno == EINTR);
}

static bool is_group(const struct cli_ctx *c) {
  return c->o->all || c->o->nnames > 1;
}

static void group_free(struct run *r) {
  dlock_multilock_free(r->multi);
  r->multi = NULL;
  for (size_t i = 0; i < r->nmembers; i++)
    dlock_lock_free(r->members[i]);
  free(r->members);
  r->members = NULL;
  r->nmembers = 0;
  for (size_t i = 0; i < r->nclients; i++)
    dlock_client_free(r->clients[i]);
  free(r->clients);
  r->clients = NULL;
  r->nclients = 0;
  r->client = NULL;
  for (int i = 0; r->side_names && i < r->c->o->nnames; i++)
    free(r->side_names[i]);
  free(r->side_names);
  r->side_names = NULL;
}

static int member_open(struct run *r, dlock_client_t *client,
                        const char *name, dlock_lock_kind_t kind) {
  dlock_lock_t *l = NULL;
  int err = dlock_lock_new_kind(client, name, kind, &l);
  if (err != 0)
    return cli_lib_error(r->c, r->c->name_shown, err);
  r->members[r->nmembers++] = l;
  return 0;
}

/* Connects the group's clients and opens its members (see the design
 * note). 0, or an exit status after an error line. */
static int group_open(struct run *r) {
  const struct cli_ctx *c = r->c;
  const struct cli_opts *o = c->o;
  size_t nc = o->all ? (size_t)c->nurls : 1, nn = (size_t)o->nnames;
  int rc = 0;
  r->clients = calloc(nc, sizeof *r->clients);
  r->members = calloc(2 * nc * nn, sizeof *r->members);
  r->side_names = calloc(nn, sizeof *r->side_names);
  if (!r->clients || !r->members || !r->side_names) {
    cli_msg(c, "out of memory");
    return CLI_EX_SOFTWARE;
  }
  for (size_t j = 0; j < nn; j++) {
    r->side_names[j] = malloc(strlen(o->names[j]) + sizeof CLI_SHARED_SUFFIX);
    if (!r->side_names[j]) {
      cli_msg(c, "out of memory");
      return CLI_EX_SOFTWARE;
    }
    strcpy(r->side_names[j], o->names[j]);
    strcat(r->side_names[j], CLI_SHARED_SUFFIX);
  }
  for (size_t k = 0; k < nc && rc == 0; k++) {
    rc = o->all ? cli_connect_url(c, (int)k, false, &r->clients[k])
                : cli_connect(c, &r->clients[k]);
    if (rc == 0)
      r->nclients++;
  }
  for (size_t k = 0; k < r->nclients && rc == 0; k++) {
    dlock_client_t *cl = r->clients[k];
    for (size_t j = 0; j < nn && rc == 0; j++) {
      rc = member_open(r, cl, o->names[j], cli_exclusive_kind(cl, o->names[j]));
      if (rc == 0 && dlock_client_nodes(cl) == 0 &&
          cli_has_kind(c, cl, DLOCK_WRITE))
        rc = member_open(r, cl, r->side_names[j], DLOCK_WRITE);
    }
  }
  if (rc == 0) {
    int err = dlock_multilock_new(&r->multi, r->members, r->nmembers);
    if (err != 0)
      rc = cli_lib_error(c, c->name_shown, err);
  }
  if (r->nclients > 0)
    r->client = r->clients[0];
  return rc;
}

/* -v while waiting: one line on stderr saying who holds the lock, for how
 * long, its lease and how many wait ahead, read with a handle of its own
 * on the worker's client: first 1 s into the wait, then every 10 s on a
 * terminal, or, when stderr is not one, when what it says changes (read
 * every 2 s). A thread apart, so that a slow read never delays the grant:
 * the worker stops it when its acquire returns, and it is joined before
 * the client is freed (watch_join). */
static bool watch_sleep(struct run *r, int64_t until) {
  bool stop;
  pthread_mutex_lock(&r->mu);
  while (!r->watch_stop) {
    int64_t left = until - cli_now_ms();
    struct timespec ts;
    if (left <= 0)
      break;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += left / 1000;
    ts.tv_nsec += (left % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&r->cv, &r->mu, &ts);
  }
  stop = r->watch_stop;
  pthread_mutex_unlock(&r->mu);
  return !stop;
}

/* The number of waiters queued before `me` ("<client-id>:<tid>"), all of
 * them when it is not queued (yet). */
static size_t ahead_of(const dlock_lock_state_t *st, const char *me) {
  size_t n = strlen(me);
  for (size_t i = 0; i < st->nwaiters; i++) {
    const char *w = st->waiters[i];
    if (w != NULL && strncmp(w, me, n) == 0 && (w[n] == '\0' || w[n] == ' '))
      return i;
  }
  return st->nwaiters;
}

static void *watch_main(void *arg) {
  struct run *r = arg;
  const struct cli_ctx *c = r->c;
  bool tty = isatty(STDERR_FILENO) == 1;
  int64_t next = cli_now_ms() + 1000;
  char last[1024] = "", me[128];
  dlock_lock_t *lock = NULL;
  bool shared = c->o->kind == CLI_KIND_SHARED;
  snprintf(me, sizeof me, "%s:%llu", dlock_client_id(r->client),
           (unsigned long long)r->owner);
  if (dlock_lock_new_kind(r->client, shared ? c->shared_name : c->o->name,
                          shared ? DLOCK_READ : cli_main_kind(c), &lock) != 0)
    return NULL;
  while (watch_sleep(r, next)) {
    dlock_lock_state_t *st = NULL;
    char who[1024], line[1400], lease[64] = "";
    next = cli_now_ms() + (tty ? 10000 : 2000);
    if (dlock_lock_state(lock, &st) != 0)
      continue; /* the wait itself reports what matters */
    size_t ahead = ahead_of(st, me);
    bool held = st->nholders > 0 && strcmp(st->kind, "free") != 0;
    if (held) {
      cli_who_line(st->holders[0].owner,
                   st->holder_infos ? st->holder_infos[0] : NULL, who,
                   sizeof who);
      if (st->ttl_ms >= 0)
        snprintf(lease, sizeof lease, "; lease %.1f s left",
                 (double)st->ttl_ms / 1000.0);
      snprintf(line, sizeof line, "'%s' is held by %s%s%s; %zu waiting ahead",
               c->name_shown, who, st->nholders > 1 ? " and others" : "", lease,
               ahead);
    } else {
      snprintf(line, sizeof line, "'%s' is free; %zu waiting ahead",
               c->name_shown, ahead);
    }
    /* what changes the picture: the holder and the queue before us */
    snprintf(who, sizeof who, "%s|%zu",
             held && st->holders[0].owner ? st->holders[0].owner : "", ahead);
    dlock_lock_state_free(st);
    if (!tty && strcmp(who, last) == 0)
      continue;
    snprintf(last, sizeof last, "%s", who);
    pthread_mutex_lock(&r->mu);
    bool stop = r->watch_stop;
    pthread_mutex_unlock(&r->mu);
    if (stop)
      break;
    cli_msg(c, "%s", line);
  }
  dlock_lock_free(lock);
  return NULL;
}

static void watch_start(struct run *r) {
  const struct cli_opts *o = r->c->o;
  if (!o->verbose || r->multi != NULL || r->sem != NULL || r->lock == NULL ||
      o->wait_ms == 0)
    return;
  r->watching = pthread_create(&r->watcher, NULL, watch_main, r) == 0;
}

static void watch_stop(struct run *r) {
  pthread_mutex_lock(&r->mu);
  r->watch_stop = true;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

/* Before the client is freed. */
static void watch_join(struct run *r) {
  if (!r->watching)
    return;
  watch_stop(r);
  pthread_join(r->watcher, NULL);
  r->watching = false;
}

/* Acquires the lock(s) of the selected kind as r->owner (see the design
 * note); 0 or a library error, with everything released on an error. */
static int acquire_all(struct run *r) {
  const struct cli_opts *o = r->c->o;
  int64_t t0 = cli_now_ms(), wait = o->wait_ms;
  int err;
  if (r->multi != NULL)
    return dlock_multilock_acquire_as(r->multi, r->owner, o->wait_ms,
                                      o->lease_ms);
  if (r->sem != NULL)
    return dlock_permit_sem_acquire(r->sem, o->wait_ms, o->lease_ms,
                                    r->permit);
  if (dlock_lock_kind(r->lock) == DLOCK_FENCED)
    err = dlock_lock_acquire_fenced_as(r->lock, r->owner, o->wait_ms,
                                       o->lease_ms, &r->token);
  else
    err = dlock_lock_acquire_as(r->lock, r->owner, o->wait_ms, o->lease_ms);
  if (err != 0 || r->side == NULL)
    return err;
  {
    /* NAME was handed over while this process was stopped and its lease
     * ran out meanwhile: no waiting for the second lock on its behalf */
    int64_t valid = 0;
    if (dlock_lock_hold_valid(r->lock, r->owner, &valid) == DLOCK_ELOST &&
        valid <= 0) {
      r->lapsed_ms = -valid;
      dlock_lock_release_as(r->lock, r->owner);
      return DLOCK_ELOST;
    }
  }
  if (wait > 0) {
    /* what is left of -w; at least a try */
    wait -= cli_now_ms() - t0;
    if (wait <= 0)
      wait = 0;
  }
  err = dlock_lock_acquire_as(r->side, r->owner, wait, o->lease_ms);
  if (err != 0) {
    /* keep the first error for the report; the release is best effort */
    char subject[256];
    int rel;
    snprintf(subject, sizeof subject, "releasing '%s' after a failed wait",
             r->c->name_shown);
    if (err != DLOCK_EBUSY && err != DLOCK_ETIMEDOUT)
      r->worker_rc = cli_lib_error(r->c, r->c->name_shown, err);
    rel = dlock_lock_release_as(r->lock, r->owner);
    if (rel != 0 && rel != DLOCK_ELOST && rel != DLOCK_ENOTOWNER)
      cli_lib_error(r->c, subject, rel);
  }
  return err;
}

static void *worker(void *arg) {
  struct run *r = arg;
  const struct cli_ctx *c = r->c;
  const struct cli_opts *o = c->o;
  int rc = is_group(c) ? group_open(r) : cli_connect(c, &r->client);
  char b = 'A';
  ssize_t n;
  if (rc == 0 && r->multi == NULL) {
    if (o->kind == CLI_KIND_LIMIT) {
      rc = cli_limit_open(c, r->client, &r->sem);
    } else if (o->kind == CLI_KIND_SHARED) {
      rc = cli_lock_new(c, r->client, true, DLOCK_READ, &r->lock);
    } else {
      rc = cli_lock_new(c, r->client, false, cli_main_kind(c), &r->lock);
      /* a backend without read-write locks (etcd's has no -s here, a
       * Redlock has the fenced lock only) has no -s holders to exclude:
       * NAME alone */
      if (rc == 0 && cli_has_kind(c, r->client, DLOCK_WRITE))
        rc = cli_lock_new(c, r->client, true, DLOCK_WRITE, &r->side);
    }
  }
  if (rc != 0) {
    r->failed = true;
    r->worker_rc = rc;
  } else {
    bool stop;
    pthread_mutex_lock(&r->mu);
    stop = r->stopping;
    r->published = !stop;
    pthread_mutex_unlock(&r->mu);
    if (stop) { /* a stop signal came during the connect: no acquire */
      r->failed = true;
      r->worker_rc = CLI_EX_SOFTWARE;
      goto done;
    }
    if (o->verbose && r->multi != NULL)
      cli_msg(c, "connected to %d server(s)%s; acquiring %zu lock(s) all or "
              "nothing ('%s'%s)",
              o->all ? c->nurls : 1, c->nurls > 1 && !o->all ? " (Redlock)" : "",
              r->nmembers, c->name_shown, o->nnames > 1 ? ", ..." : "");
    else if (o->verbose)
      cli_msg(c, "connected to %s%s as client %s; acquiring '%s' (%s)",
              c->url_shown, c->nurls > 1 ? " and more (Redlock)" : "",
              dlock_client_id(r->client), c->name_shown,
              o->kind == CLI_KIND_SHARED  ? "shared"
              : o->kind == CLI_KIND_FAIR  ? "fair, exclusive"
              : o->kind == CLI_KIND_LIMIT ? "one of the semaphore's permits"
                                          : "exclusive, fenced");
    atomic_store(&r->stage, 1);
    watch_start(r);
    r->acquire_err = acquire_all(r);
    watch_stop(r);
    r->failed = r->acquire_err != 0;
    if (r->acquire_err == DLOCK_EBUSY || r->acquire_err == DLOCK_ETIMEDOUT)
      r->worker_rc = o->conflict_exit;
    else if (r->acquire_err == DLOCK_ELOST && r->lapsed_ms >= 0)
      r->worker_rc = CLI_EX_TEMPFAIL; /* the main thread says it */
    else if (r->acquire_err != 0 && r->worker_rc == 0)
      r->worker_rc = cli_lib_error(c, c->name_shown, r->acquire_err);
  }
done:
  /* after its last line: wait_ran_out relies on it */
  atomic_store(&r->finished, true);
  r->t_acquired = cli_now_ms();
  do
    n = write(r->evw, &b, 1);
  while (n < 0 && errno == EINTR);
  return NULL;
}

/* Waits for the next event, or until deadline_ms (monotonic; -1: none). */
static void next_event(struct run *r, int64_t deadline_ms, struct event *ev) {
  for (;;) {
    struct pollfd p[2];
    int timeout = -1, n;
    if (deadline_ms >= 0) {
      int64_t left = deadline_ms - cli_now_ms();
      if (left <= 0) {
        ev->kind = EV_TIMEOUT;
        return;
      }
      timeout = left > INT_MAX ? INT_MAX : (int)left;
    }
    p[0].fd = r->sigfd;
    p[0].events = POLLIN;
    p[1].fd = r->evr;
    p[1].events = POLLIN;
    p[0].revents = p[1].revents = 0;
    n = poll(p, 2, timeout);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      ev->kind = EV_ERROR;
      return;
    }
    if (p[0].revents & POLLIN) {
      struct signalfd_siginfo si;
      ssize_t k = read(r->sigfd, &si, sizeof si);
      if (k == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGCONT)
          atomic_store(&r->continued_at, cli_now_ms());
        ev->kind = EV_SIGNAL;
        ev->signo = (int)si.ssi_signo;
        ev->code = si.ssi_code;
        return;
      }
      if (k < 0 && errno != EAGAIN && errno != EINTR) {
        ev->kind = EV_ERROR;
        return;
      }
    }
    if (p[1].revents & POLLIN) {
      char b;
      ssize_t k = read(r->evr, &b, 1);
      if (k == 1) {
        ev->kind = b == 'A' ? EV_DONE : EV_LOST;
        ev->lost = b;
        return;
      }
      if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
        ev->kind = EV_ERROR;
        return;
      }
    }
    if ((p[0].revents | p[1].revents) & (POLLERR | POLLNVAL)) {
      ev->kind = EV_ERROR;
      return;
    }
  }
}

static bool is_stop_signal(int signo) {
  return signo == SIGINT || signo == SIGTERM || signo == SIGHUP;
}

/* Ends dlock by `signo`, as if we had not caught it (the shell then sees
 * the usual 128+S and a script loop stops on Ctrl-C). */
static _Noreturn void die_by_signal(int signo) {
  sigset_t one;
  fflush(stderr);
  signal(signo, SIG_DFL);
  sigemptyset(&one);
  sigaddset(&one, signo);
  /* Only this thread unblocks it, so raise() is delivered here. */
  pthread_sigmask(SIG_UNBLOCK, &one, NULL);
  raise(signo);
  _exit(128 + signo);
}

static const char *lost_reason(char b) {
  return b == 'U'   ? "the backend was unreachable for longer than the lease"
         : b == 'P' ? "its lease ran out while this process was stopped"
         : b == 'S' ? "the client's session with the service ended (expired "
                      "or revoked), which freed the lock"
                    : "its key was removed or taken by another owner";
}

static double secs(int64_t ms) { return (double)ms / 1000.0; }

/* What keeps the hold alive, for -v: on ZooKeeper and etcd the client's
 * session as the service granted it (a ZooKeeper server clamps the
 * timeout to [2, 20] ticks, an etcd server raises a TTL below its
 * minimum), on Redis the lease of -l or the renewed one of --session. */
static void hold_terms(struct run *r, char *how, size_t n) {
  const struct cli_opts *o = r->c->o;
  int64_t asked = o->watchdog_ms > 0 ? o->watchdog_ms : CLI_SESSION_MS;
  int64_t ms = 0;
  if (dlock_client_session_timeout(r->client, &ms) == 0 && ms > 0) {
    if (strncasecmp(r->c->url, "etcd", 4) == 0)
      snprintf(how, n, "etcd lease TTL %.3f s, kept alive every %.3f s",
               secs(ms), secs(ms / 3));
    else
      snprintf(how, n,
               "ZooKeeper session timeout %.3f s (negotiated; "
               "asked for %.3f s)",
               secs(ms), secs(asked));
  } else if (o->lease_ms > 0) {
    snprintf(how, n, "fixed lease of %.3f s, never renewed", secs(o->lease_ms));
  } else {
    int64_t wd = o->watchdog_ms > 0 ? o->watchdog_ms : CLI_SESSION_REDIS_MS;
    snprintf(how, n, "lease %.3f s, renewed every %.3f s", secs(wd),
             secs(wd / 3));
  }
}

/* Releases the hold and frees the client. Problems are reported, never
 * turned into the exit status: the command's outcome is what matters, and
 * the lease expires by itself. */
/* A release found a renewed hold gone: the lock was lost at some point
 * (taken, removed by --force-unlock) without the renewer noticing first.
 * That is a loss like any other (exit 75), said once. */
static void lost_at_release(struct run *r) {
  if (r->c->o->lease_ms > 0 || r->lost)
    return;
  r->lost = true;
  r->lost_reason = 'G';
}

/* After a loss the server still answers (the key was removed or taken, or
 * the lease ran out while this process was stopped): who holds the lock
 * now, as "; another owner holds it now: WHO" or "; it is free now", for
 * the end of the loss line, read after the command was told (a slow
 * server must not delay that). "" when the state cannot be read or the
 * lock NAME is still this owner's (an exclusive kind's other lock was the
 * one lost). */
static void holder_now(struct run *r, char *out, size_t n) {
  const struct cli_ctx *c = r->c;
  dlock_lock_t *l = NULL;
  dlock_lock_state_t *st = NULL;
  char me[128], who[1024];
  out[0] = '\0';
  if (r->client == NULL || r->lock == NULL || r->multi != NULL ||
      r->sem != NULL)
    return;
  if (dlock_lock_new_kind(
          r->client,
          c->o->kind == CLI_KIND_SHARED ? c->shared_name : c->o->name,
          c->o->kind == CLI_KIND_SHARED ? DLOCK_READ : cli_main_kind(c),
          &l) != 0)
    return;
  snprintf(me, sizeof me, "%s:%llu", dlock_client_id(r->client),
           (unsigned long long)r->owner);
  if (dlock_lock_state(l, &st) == 0) {
    bool held = st->nholders > 0 && strcmp(st->kind, "free") != 0;
    if (!held) {
      snprintf(out, n, "; it is free now");
    } else if (st->holders[0].owner == NULL ||
               strncmp(st->holders[0].owner, me, strlen(me)) != 0) {
      cli_who_line(st->holders[0].owner,
                   st->holder_infos ? st->holder_infos[0] : NULL, who,
                   sizeof who);
      snprintf(out, n, "; another owner holds it now: %s", who);
    }
    dlock_lock_state_free(st);
  }
  dlock_lock_free(l);
}

static void release_one(struct run *r, dlock_lock_t *lock) {
  const struct cli_ctx *c = r->c;
  int err = dlock_lock_release_as(lock, r->owner);
  if (err == 0) {
    if (c->o->verbose)
      cli_msg(c, "released '%s'%s", c->name_shown,
              lock == r->side ? " (write side)" : "");
  } else if (err == DLOCK_ELOST || err == DLOCK_ENOTOWNER) {
    /* Expected after a fixed lease ran out: worth a line with -v only; a
     * loss already reported is not reported again. */
    char now[1200] = "";
    if (c->o->lease_ms <= 0 && !r->lost)
      holder_now(r, now, sizeof now);
    if ((c->o->lease_ms <= 0 && !r->lost) || c->o->verbose > 0)
      cli_msg(c, "'%s' was no longer ours at release (%s%s)", c->name_shown,
              c->o->lease_ms > 0 ? "its fixed lease had run out"
                                 : "the lock was lost",
              now);
    lost_at_release(r);
  } else {
    char subject[256];
    snprintf(subject, sizeof subject, "releasing '%s'", c->name_shown);
    cli_lib_error(c, subject, err);
    cli_msg(c, "'%s' will expire by itself when its lease runs out",
            c->name_shown);
  }
}

/* -N: gives the permit back (problems reported as for a lock). */
static void release_permit(struct run *r) {
  const struct cli_ctx *c = r->c;
  int err = dlock_permit_sem_release(r->sem, r->permit);
  if (err == 0) {
    if (c->o->verbose)
      cli_msg(c, "released permit %s of '%s'", r->permit, c->name_shown);
  } else if (err == DLOCK_ELOST || err == DLOCK_ENOTOWNER) {
    if ((c->o->lease_ms <= 0 && !r->lost) || c->o->verbose > 0)
      cli_msg(c, "the permit of '%s' was no longer ours at release (%s)",
              c->name_shown,
              c->o->lease_ms > 0 ? "its fixed lease had run out"
                                 : "it was lost");
    lost_at_release(r);
  } else {
    char subject[256];
    snprintf(subject, sizeof subject, "releasing a permit of '%s'",
             c->name_shown);
    cli_lib_error(c, subject, err);
    cli_msg(c, "the permit comes back by itself when its lease runs out");
  }
}

static void release_and_close(struct run *r) {
  const struct cli_ctx *c = r->c;
  if (r->lost && r->lost_reason == 'U') {
    /* With an unreachable backend a release would only cost a command
     * timeout: what is still held expires with its lease once the client
     * stops renewing it, below. Except an exclusive kind's second lock
     * whose lease the server confirmed within the lease (the first lapsed
     * while this process was stopped, the second was taken since): left
     * to its lease, it would keep everyone out for one. */
    int64_t valid;
    if (r->side != NULL &&
        dlock_lock_hold_valid(r->side, r->owner, &valid) == 0)
      release_one(r, r->side);
    if (c->o->verbose)
      cli_msg(c, "not releasing '%s': it was lost", c->name_shown);
    goto close;
  }
  /* A hold lost while the server answers may be one of an exclusive
   * kind's two locks: the other is still ours and is released now (left
   * to its lease, it would keep -s holders and the next exclusive one out
   * for a lease). The lost one answers DLOCK_ELOST, said with -v only. */
  if (r->sem != NULL) {
    release_permit(r);
    goto close;
  }
  if (r->multi != NULL) {
    int err = dlock_multilock_release_as(r->multi, r->owner);
    if (err == 0 && c->o->verbose)
      cli_msg(c, "released the %zu locks of '%s'%s", r->nmembers,
              c->name_shown, c->o->nnames > 1 ? " and the other names" : "");
    else if ((err == DLOCK_ELOST || err == DLOCK_ENOTOWNER) &&
             ((c->o->lease_ms <= 0 && !r->lost) || c->o->verbose > 0))
      cli_msg(c, "a lock of '%s' was no longer ours at release (%s)",
              c->name_shown,
              c->o->lease_ms > 0 ? "its fixed lease had run out"
                                 : "it was lost");
    if (err == DLOCK_ELOST || err == DLOCK_ENOTOWNER)
      lost_at_release(r);
    else if (err != 0 && err != DLOCK_ELOST && err != DLOCK_ENOTOWNER) {
      char subject[256];
      snprintf(subject, sizeof subject, "releasing '%s'", c->name_shown);
      cli_lib_error(c, subject, err);
    }
    goto close;
  }
  if (r->side != NULL)
    release_one(r, r->side);
  release_one(r, r->lock);
close:
  watch_join(r);
  if (r->clients != NULL) {
    group_free(r);
    return;
  }
  dlock_permit_sem_free(r->sem);
  r->sem = NULL;
  dlock_lock_free(r->side);
  dlock_lock_free(r->lock);
  dlock_client_free(r->client);
  r->side = NULL;
  r->lock = NULL;
  r->client = NULL;
}

/* The child's environment: ours plus DLOCK_TOKEN when there is a token
 * (DLOCK_TOKEN itself was removed from ours before any thread started),
 * plus the variables the backend's own lock tool sets for a hold
 * (dlock_lock_hold_env: etcd's ETCD_LOCK_KEY and ETCD_LOCK_REV), which
 * replace inherited ones of the same names. NULL when out of memory. The
 * strings are environ's, *tokvar and *extra: free the array, *tokvar and
 * (dlock_env_free) *extra. */
static bool env_named(const char *var, char **vars) {
  for (size_t i = 0; vars && vars[i]; i++) {
    size_t n = strcspn(vars[i], "=");
    if (strncmp(var, vars[i], n) == 0 && var[n] == '=')
      return true;
  }
  return false;
}

static char **child_env(const struct run *r, char **tokvar, char ***extra) {
  size_t n = 0, i, m = 0, k = 0;
  char **env;
  *tokvar = NULL;
  *extra = NULL;
  if (r->lock != NULL &&
      dlock_lock_hold_env(r->lock, r->owner, extra) == DLOCK_ENOMEM)
    return NULL;
  while (environ[n] != NULL)
    n++;
  while (*extra != NULL && (*extra)[m] != NULL)
    m++;
  env = calloc(n + m + 2, sizeof *env);
  if (env == NULL) {
    dlock_env_free(*extra);
    *extra = NULL;
    return NULL;
  }
  for (i = 0; i < n; i++)
    if (!env_named(environ[i], *extra))
      env[k++] = environ[i];
  for (i = 0; i < m; i++)
    env[k++] = (*extra)[i];
  if (r->token > 0) {
    *tokvar = malloc(48);
    if (*tokvar == NULL) {
      free(env);
      dlock_env_free(*extra);
      *extra = NULL;
      return NULL;
    }
    snprintf(*tokvar, 48, "DLOCK_TOKEN=%lld", (long long)r->token);
    env[k++] = *tokvar;
  }
  env[k] = NULL;
  return env;
}

/* The command's process, between fork and exec: only async-signal-safe
 * calls (dlock has threads). The parent-death signal is set first, then
 * the parent is checked: a dlock that died before prctl() would never
 * send it, so the command must not start. An exec failure's errno goes
 * to the parent through errfd (close-on-exec: EOF means exec worked). */
static _Noreturn void child_exec(const struct run *r, pid_t parent, bool own,
                                 int errfd, const char *path, char *const *argv,
                                 char **env) {
  int e;
  ssize_t n;
  if (own)
    setpgid(0, 0);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
    _exit(CLI_EX_TEMPFAIL);
  if (r->pipe_was_default) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &sa, NULL);
  }
  sigprocmask(SIG_SETMASK, &r->oldmask, NULL);
  if (path != NULL)
    execve(path, argv, env);
  else
    execvpe(argv[0], argv, env);
  e = errno;
  do
    n = write(errfd, &e, sizeof e);
  while (n < 0 && errno == EINTR);
  _exit(127);
}

/* The guard: a process of its own that outlives a killed dlock just long
 * enough to kill the command's process group. It waits on a pipe whose
 * only writer is dlock: a byte means dlock is done (exit quietly), EOF
 * means dlock died (the kernel closed its end), whatever killed it. It
 * closes every other descriptor (no connection of dlock's stays open in
 * it) and ignores the signals a terminal or a forwarded stop would send. */
static _Noreturn void guard_main(int rfd, pid_t pgid) {
  static const int ign[] = {SIGINT,  SIGTERM, SIGHUP,  SIGQUIT,
                            SIGTSTP, SIGTTIN, SIGTTOU, SIGPIPE};
  struct sigaction sa;
  sigset_t none;
  char b;
  ssize_t n;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_IGN;
  for (size_t i = 0; i < sizeof ign / sizeof ign[0]; i++)
    sigaction(ign[i], &sa, NULL);
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  if (rfd != 3) {
    dup2(rfd, 3);
    rfd = 3;
  }
  for (int fd = 0; fd < rfd; fd++)
    close(fd);
  if (close_range(4, ~0U, 0) != 0)
    for (int fd = 4; fd < 1024; fd++)
      close(fd);
  prctl(PR_SET_NAME, "dlock-guard");
  do
    n = read(rfd, &b, 1);
  while (n < 0 && errno == EINTR);
  if (n == 0)
    kill(-pgid, SIGKILL);
  _exit(0);
}

/* Starts the guard of the command's group r->pgid (a failure only costs
 * that protection: said with -v). */
static void guard_start(struct run *r) {
  int fds[2];
  pid_t g;
  if (pipe2(fds, O_CLOEXEC) != 0)
    return;
  g = fork();
  if (g == 0)
    guard_main(fds[0], r->pgid);
  close(fds[0]);
  if (g < 0) {
    close(fds[1]);
    if (r->c->o->verbose)
      cli_msg(r->c, "cannot start the guard process: %s", strerror(errno));
    return;
  }
  r->guard = g;
  r->guard_fd = fds[1];
}

/* dlock is done with the command: the guard exits without killing. */
static void guard_end(struct run *r) {
  ssize_t n;
  if (r->guard_fd < 0)
    return;
  do
    n = write(r->guard_fd, "q", 1);
  while (n < 0 && errno == EINTR);
  close(r->guard_fd);
  r->guard_fd = -1;
  if (r->guard > 0) {
    pid_t w;
    do
      w = waitpid(r->guard, NULL, 0);
    while (w < 0 && errno == EINTR);
    r->guard = 0;
  }
}

/* Sends `sig` to the command: to its whole process group when it has its
 * own, and (tree: on a loss) to the orphans of its tree that dlock, their
 * subreaper, adopted after their parents died. */
static void signal_command(struct run *r, int sig, bool tree) {
  if (r->pgid > 0 && kill(-r->pgid, sig) == 0) {
    /* sent to the group */
  } else if (r->child > 0) {
    kill(r->child, sig);
  }
  if (!tree)
    return;
  /* orphans are adopted by the thread group's leader (our main thread):
   * its children file lists them, with the command and the guard */
  char path[64], buf[4096];
  snprintf(path, sizeof path, "/proc/self/task/%ld/children", (long)getpid());
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0)
    return;
  buf[n] = '\0';
  for (char *p = buf, *end; *p != '\0'; p = end) {
    long pid = strtol(p, &end, 10);
    if (end == p)
      break;
    if (pid > 0 && pid != r->child && pid != r->guard)
      kill((pid_t)pid, sig);
  }
}

/* Starts the command (see the design note): its own process group unless
 * dlock runs in the foreground of a terminal, the parent-death signal, the
 * original signal mask, and a guard. 0, or an exit status after a line. */
static int spawn_child(struct run *r) {
  const struct cli_ctx *c = r->c;
  char *sh_argv[4];
  char *const *argv;
  char **env, *tokvar, **extra;
  const char *path = NULL, *what;
  int errfds[2] = {-1, -1}, err = 0;
  pid_t parent = getpid(), pid;
  bool own;
  ssize_t n;

  env = child_env(r, &tokvar, &extra);
  if (env == NULL) {
    cli_msg(c, "cannot start the command: out of memory");
    return CLI_EX_SOFTWARE;
  }
  if (c->o->shell_command != NULL) {
    sh_argv[0] = "sh";
    sh_argv[1] = "-c";
    sh_argv[2] = (char *)c->o->shell_command;
    sh_argv[3] = NULL;
    argv = sh_argv;
    path = what = "/bin/sh";
  } else {
    /* execvpe: the PATH search, and a script without "#!" runs with
     * /bin/sh, as posix_spawnp and the shells do */
    argv = c->o->command;
    what = argv[0];
  }
  /* A command in dlock's place in the foreground of a terminal must be
   * able to read it and be stopped by ^Z with dlock: it keeps dlock's
   * process group there (as timeout --foreground does). */
  own = !(isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp());
  if (pipe2(errfds, O_CLOEXEC) != 0) {
    err = errno;
    pid = -1;
  } else {
    pid = fork();
    if (pid == 0)
      child_exec(r, parent, own, errfds[1], path, argv, env);
    if (pid < 0)
      err = errno;
    close(errfds[1]);
  }
  free(env);
  free(tokvar);
  dlock_env_free(extra);
  if (pid > 0) {
    int e = 0;
    r->child = pid;
    if (own) {
      /* also here: whichever of the two runs first, the group exists
       * before anyone signals it (EACCES: the child has exec'd, having
       * done it itself) */
      setpgid(pid, pid);
      r->pgid = pid;
    }
    do
      n = read(errfds[0], &e, sizeof e);
    while (n < 0 && errno == EINTR);
    close(errfds[0]);
    if (n != (ssize_t)sizeof e) {
      if (own)
        guard_start(r);
      return 0;
    }
    err = e;
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
      ;
    r->child = 0;
    r->pgid = 0;
  } else if (errfds[0] >= 0) {
    close(errfds[0]);
  }
  {
    char shown[160];
    cli_printable(what, 120, shown, sizeof shown);
    if (err == ENOENT) {
      cli_msg(c, "%s: command not found", shown);
      return 127;
    }
    if (err == EACCES || err == ENOEXEC || err == EISDIR || err == ENOTDIR ||
        err == ELOOP || err == ENAMETOOLONG) {
      cli_msg(c, "%s: %s", shown, strerror(err));
      return 126;
    }
    cli_msg(c, "cannot start %s: %s", shown, strerror(err));
    return CLI_EX_SOFTWARE;
  }
}

/* The locks held, for a validity check: 0..n of them into out[]. */
static size_t held_locks(const struct run *r, dlock_lock_t **out, size_t max) {
  size_t n = 0;
  if (r->multi != NULL) {
    for (size_t i = 0; i < r->nmembers && n < max; i++)
      out[n++] = r->members[i];
    return n;
  }
  if (r->lock != NULL && n < max)
    out[n++] = r->lock;
  if (r->side != NULL && n < max)
    out[n++] = r->side;
  return n;
}

/*
 * Has the grant lapsed by the client's own clock (dlock_lock_hold_valid:
 * some lock's lease not confirmed within the lease, or its session
 * unconfirmed for longer than its timeout)? False when every lock is
 * good, or lost for another reason (the lost callback tells that), or the
 * backend cannot say. A -N permit is checked the same way
 * (dlock_permit_sem_permit_valid; confirmed by the permits the server
 * lists). True with
 * *lapsed_ms = how long ago it lapsed. `confirm`: a lapse by the clock is
 * checked against the server first (one round trip): a ZooKeeper
 * session's bound counts only requests, not its pings, so it can lapse by
 * the clock while the session lives.
 */
/* Whether the server lists the permit `id` as in use (false when it
 * cannot be read). */
static bool permit_listed(struct run *r, const char *id) {
  dlock_sem_state_t *st = NULL;
  bool found = false;
  if (dlock_permit_sem_state(r->sem, &st) != 0)
    return false;
  for (size_t i = 0; i < st->npermits && !found; i++)
    found = st->permits[i].id && strcmp(st->permits[i].id, id) == 0;
  dlock_sem_state_free(st);
  return found;
}

static bool grant_lapsed(struct run *r, bool confirm, int64_t *lapsed_ms) {
  dlock_lock_t *locks[64];
  size_t n = held_locks(r, locks, 64);
  *lapsed_ms = 0;
  if (r->sem != NULL && r->permit[0]) {
    int64_t valid = 0;
    int err = dlock_permit_sem_permit_valid(r->sem, r->permit, &valid);
    if (err == DLOCK_ELOST && valid <= 0 &&
        !(confirm && permit_listed(r, r->permit))) {
      *lapsed_ms = -valid;
      return true;
    }
  }
  for (size_t i = 0; i < n; i++) {
    int64_t valid = 0;
    bool held = false;
    int err = dlock_lock_hold_valid(locks[i], r->owner, &valid);
    if (err != DLOCK_ELOST || valid > 0)
      continue;
    if (confirm && dlock_lock_is_held_by_thread(locks[i], &held) == 0 && held)
      continue;
    *lapsed_ms = -valid;
    return true;
  }
  return false;
}

/* A grant that lapsed before the command started: one line, the locks
 * still ours released, 75. */
static void say_lapsed(const struct run *r, int64_t lapsed) {
  const struct cli_ctx *c = r->c;
  cli_msg(c,
          "'%s': the grant lapsed before the command could start (its lease "
          "ran out %.1f s ago: %s); not running it",
          c->name_shown, secs(lapsed),
          atomic_load(&r->continued_at) > 0
              ? "this process was stopped"
              : "this process was stopped or starved");
}

static int lapsed_before_start(struct run *r, int64_t lapsed) {
  say_lapsed(r, lapsed);
  r->lost = true;
  r->lost_reason = 'P';
  release_and_close(r);
  return CLI_EX_TEMPFAIL;
}

/* SIGCHLD: reaps every child that ended (the command, the guard, orphans
 * of the command's tree adopted by dlock). True when the command ended,
 * its wait status in *status. */
static bool reap(struct run *r, int *status) {
  bool done = false;
  for (int i = 0; i < 4096; i++) {
    int st;
    pid_t w = waitpid(-1, &st, WNOHANG);
    if (w < 0 && errno == EINTR)
      continue;
    if (w < 0 && errno == ECHILD)
      return true; /* nothing left (cannot happen while the command runs) */
    if (w <= 0)
      break;
    if (w == r->child) {
      *status = st;
      done = true;
    } else if (w == r->guard) {
      r->guard = 0;
    }
  }
  return done;
}

/* Reports a lost hold and applies --on-lost. */
static void handle_lost(struct run *r, char reason, int64_t *kill_deadline) {
  const struct cli_ctx *c = r->c;
  const struct cli_opts *o = c->o;
  char why[160], act[160], now[1200] = "";
  /* An exclusive hold is two locks: their losses are one event. */
  if (r->lost)
    return;
  r->lost = true;
  r->lost_reason = reason;
  if (reason == 'P' && r->lost_lapsed_ms >= 0)
    snprintf(why, sizeof why,
             "its lease ran out %.1f s ago, while this process was stopped",
             secs(r->lost_lapsed_ms));
  else
    snprintf(why, sizeof why, "%s", lost_reason(reason));
  /* the command is told first; then one line says it all */
  if (r->child <= 0) {
    snprintf(act, sizeof act, "%s",
             o->on_lost == CLI_LOST_IGNORE ? "; --on-lost ignore: still waiting"
                                           : "");
  } else {
    switch (o->on_lost) {
    case CLI_LOST_TERM:
      signal_command(r, SIGTERM, true);
      r->acted = true;
      *kill_deadline = cli_now_ms() + o->kill_after_ms;
      snprintf(act, sizeof act,
               "; sending SIGTERM to the command (SIGKILL in %.3g s)",
               secs(o->kill_after_ms));
      break;
    case CLI_LOST_KILL:
      signal_command(r, SIGKILL, true);
      r->acted = true;
      snprintf(act, sizeof act, "; killing the command");
      break;
    case CLI_LOST_IGNORE:
      snprintf(act, sizeof act,
               "; --on-lost ignore: the command keeps "
               "running without the lock");
      break;
    }
  }
  if (reason != 'U')
    holder_now(r, now, sizeof now);
  cli_msg(c, "lost lock '%s': %s%s%s", c->name_shown, why, act, now);
}

/*
 * A stop signal while the worker waits for the lock. The library cannot
 * cancel a wait, so normally dlock just ends by the signal. But the grant
 * may already have happened on the server, the worker not having told us
 * yet: then the worker is about to return, so we let it, and release before
 * ending (HOLD mode: exit 0, as for a signal after the grant). Only a grant
 * still in flight at the moment of the check is left to expire with its
 * lease, as after a crash.
 */
static int stop_while_waiting(struct run *r, pthread_t th, int signo) {
  bool published, held = false, first = false;
  int64_t deadline;
  pthread_mutex_lock(&r->mu);
  r->stopping = true;
  published = r->published;
  pthread_mutex_unlock(&r->mu);
  if (!published)
    die_by_signal(signo);
  /* -N: whether a permit was granted cannot be asked; one granted in flight
   * comes back when its lease runs out, as after a crash */
  if (r->sem != NULL || r->multi != NULL)
    die_by_signal(signo);
  /* Granted means the last lock of the kind is held (the write side of an
   * exclusive kind is taken after NAME). An exclusive holder still waiting
   * for its write side gives NAME back before ending. */
  if (dlock_lock_is_held_by_thread(r->side ? r->side : r->lock, &held) != 0 ||
      !held) {
    if (r->side != NULL &&
        dlock_lock_is_held_by_thread(r->lock, &first) == 0 && first)
      dlock_lock_release_as(r->lock, r->owner);
    die_by_signal(signo);
  }
  /* Granted: the worker returns within a round trip or so. */
  deadline = cli_now_ms() + 10000;
  for (;;) {
    struct event ev;
    next_event(r, deadline, &ev);
    if (ev.kind == EV_DONE)
      break;
    if (ev.kind == EV_TIMEOUT || ev.kind == EV_ERROR)
      die_by_signal(signo);
  }
  pthread_join(th, NULL);
  if (r->failed)
    die_by_signal(signo);
  release_and_close(r);
  if (r->c->o->mode == CLI_MODE_HOLD)
    return 0;
  die_by_signal(signo);
  return CLI_EX_SOFTWARE; /* not reached */
}

/* -w ran out (plus CLI_WAIT_GRACE_MS, in which the library's own
 * ETIMEDOUT normally comes) with the worker still inside the library: a
 * connect, a session or lease set-up, or a round trip that gets no
 * answer. The library cannot cancel a call, so dlock ends here, saying
 * which: no answer from the backend yet (69), or the wait (the -E
 * status). A grant in flight at this moment is left to its lease, as
 * after a crash. Returns (false) only when the worker has just finished:
 * its outcome then stands. */
static bool wait_ran_out(struct run *r) {
  const struct cli_ctx *c = r->c;
  double w = secs(c->o->wait_ms > 0 ? c->o->wait_ms : CLI_CONNECT_TIMEOUT_MS);
  /* The worker may have ended just now (its lines said, its 'A' not yet
   * read): then its outcome stands. Else it says nothing more, and this
   * line is the last. */
  cli_mute(true);
  if (atomic_load(&r->finished)) {
    cli_mute(false);
    return false;
  }
  /* ended without it: nothing waits for it (thread-leak checkers) */
  pthread_detach(r->worker);
  if (atomic_load(&r->stage) == 0 || c->o->wait_ms == 0) {
    cli_msg_final(
        c,
        "%s: no answer within %s %.3g s (%s; is the server healthy "
        "and the address right?)",
        c->url_shown, c->o->wait_ms > 0 ? "-w" : "the connect timeout of", w,
        atomic_load(&r->stage) == 0 ? "connecting" : "the -n attempt");
    fflush(stderr);
    _exit(CLI_EX_UNAVAILABLE);
  }
  cli_msg_final(c,
                "'%s': gave up after -w %.3g s (the lock is held, or the "
                "server stopped answering)",
                c->name_shown, w);
  fflush(stderr);
  _exit(c->o->conflict_exit);
}

/* HOLD mode: keep the lock until SIGINT/SIGTERM/SIGHUP. */
static int hold(struct run *r) {
  const struct cli_ctx *c = r->c;
  int64_t lease_end = c->o->lease_ms > 0 ? r->t_acquired + c->o->lease_ms : -1;
  int64_t unused = -1;
  if (c->o->verbose)
    cli_msg(c, "holding '%s' until SIGINT or SIGTERM", c->name_shown);
  for (;;) {
    struct event ev;
    next_event(r, lease_end, &ev);
    switch (ev.kind) {
    case EV_SIGNAL:
      if (is_stop_signal(ev.signo)) {
        release_and_close(r);
        return r->lost ? CLI_EX_TEMPFAIL : 0; /* lost at release: 75 */
      }
      break;
    case EV_LOST:
      handle_lost(r, ev.lost, &unused);
      if (c->o->on_lost != CLI_LOST_IGNORE) {
        release_and_close(r);
        return CLI_EX_TEMPFAIL;
      }
      break;
    case EV_TIMEOUT:
      if (c->o->verbose)
        cli_msg(c, "the fixed lease of '%s' has run out; it is free now",
                c->name_shown);
      lease_end = -1;
      break;
    case EV_DONE:
      break;
    case EV_ERROR:
      cli_msg(c, "internal error: waiting for events: %s", strerror(errno));
      release_and_close(r);
      return CLI_EX_SOFTWARE;
    }
  }
}

/* RUN mode: start the command and supervise it until it exits. */
static int supervise(struct run *r) {
  const struct cli_ctx *c = r->c;
  const struct cli_opts *o = c->o;
  int64_t kill_deadline = -1, t_spawn;
  int64_t lease_end = o->lease_ms > 0 ? r->t_acquired + o->lease_ms : -1;
  int status = 0, rc;
  int64_t lapsed;

  /* the last moment to find a lapsed grant before the command starts */
  if (grant_lapsed(r, false, &lapsed))
    return lapsed_before_start(r, lapsed);
  rc = spawn_child(r);
  if (rc != 0) {
    release_and_close(r);
    return rc;
  }
  t_spawn = cli_now_ms();
  for (;;) {
    struct event ev;
    int64_t deadline = kill_deadline;
    if (lease_end >= 0 && (deadline < 0 || lease_end < deadline))
      deadline = lease_end;
    next_event(r, deadline, &ev);
    if (ev.kind == EV_SIGNAL && ev.signo == SIGCHLD) {
      if (reap(r, &status))
        break;
    } else if (ev.kind == EV_SIGNAL && ev.signo == SIGCONT) {
      /* dlock was stopped: a lease that ran out meanwhile is a loss now,
       * not at the library's next turn (a fixed lease -l runs out by
       * design: the command goes on without the lock) */
      if (!r->lost && o->lease_ms <= 0 && grant_lapsed(r, true, &lapsed)) {
        r->lost_lapsed_ms = lapsed;
        handle_lost(r, 'P', &kill_deadline);
      }
    } else if (ev.kind == EV_SIGNAL && is_stop_signal(ev.signo)) {
      bool from_tty = ev.code == SI_KERNEL && getpgid(r->child) == getpgrp();
      if (!from_tty)
        signal_command(r, ev.signo, false);
      if (o->verbose)
        cli_msg(c, "%s %s to the command",
                from_tty ? "the terminal sent" : "forwarded",
                strsignal(ev.signo));
    } else if (ev.kind == EV_LOST) {
      handle_lost(r, ev.lost, &kill_deadline);
    } else if (ev.kind == EV_TIMEOUT) {
      int64_t now = cli_now_ms();
      if (kill_deadline >= 0 && now >= kill_deadline) {
        cli_msg(c, "the command outlived --kill-after; sending SIGKILL");
        signal_command(r, SIGKILL, true);
        kill_deadline = -1;
      }
      if (lease_end >= 0 && now >= lease_end) {
        if (o->verbose)
          cli_msg(c,
                  "the fixed lease of '%s' has run out; the command goes on "
                  "without the lock",
                  c->name_shown);
        lease_end = -1;
      }
    } else if (ev.kind == EV_ERROR) {
      cli_msg(c, "internal error: waiting for the command: %s",
              strerror(errno));
      signal_command(r, SIGKILL, true);
      waitpid(r->child, &status, 0);
      guard_end(r);
      release_and_close(r);
      return CLI_EX_SOFTWARE;
    }
  }

  if (WIFEXITED(status))
    rc = WEXITSTATUS(status);
  else if (WIFSIGNALED(status))
    rc = 128 + WTERMSIG(status);
  else
    rc = CLI_EX_SOFTWARE;
  if (o->verbose) {
    if (WIFSIGNALED(status))
      cli_msg(c, "the command was killed by %s after %.3f s",
              strsignal(WTERMSIG(status)), secs(cli_now_ms() - t_spawn));
    else
      cli_msg(c, "the command exited with status %d after %.3f s", rc,
              secs(cli_now_ms() - t_spawn));
  }
  guard_end(r);
  release_and_close(r);
  /* the lock was lost while the command ran (whatever --on-lost did, and
   * whatever the command's status), or found gone at release: 75 */
  return r->lost ? CLI_EX_TEMPFAIL : rc;
}

static int setup(struct run *r) {
  static const int stops[] = {SIGINT, SIGTERM, SIGHUP};
  sigset_t set;
  struct sigaction sa;
  int fds[2];
  size_t k;

  /* A SIGCHLD ignored by our caller would make the kernel reap the child
   * before we can read its status. */
  signal(SIGCHLD, SIG_DFL);
  /* A closed stderr must not kill us while we hold the lock. */
  if (sigaction(SIGPIPE, NULL, &sa) == 0)
    r->pipe_was_default = sa.sa_handler == SIG_DFL;
  signal(SIGPIPE, SIG_IGN);

  /* A stop signal our caller set to SIG_IGN (nohup, a background job of a
   * script) stays ignored, for us and for the child: Linux queues a blocked
   * signal even when it is ignored, so it must stay out of the set. */
  sigemptyset(&set);
  for (k = 0; k < sizeof stops / sizeof stops[0]; k++)
    if (sigaction(stops[k], NULL, &sa) != 0 || sa.sa_handler != SIG_IGN)
      sigaddset(&set, stops[k]);
  sigaddset(&set, SIGCHLD);
  /* SIGCONT: we were stopped; the holds may have lapsed meanwhile (the
   * process continues whether or not the signal is blocked) */
  sigaddset(&set, SIGCONT);
  if (pthread_sigmask(SIG_BLOCK, &set, &r->oldmask) != 0)
    return -1;
  r->sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (r->sigfd < 0)
    return -1;
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
    return -1;
  r->evr = fds[0];
  r->evw = fds[1];
  return 0;
}

int cli_run(struct cli_ctx *c) {
  struct run r;
  pthread_t th;
  int rc;
  char early_lost = 0;
  int64_t give_up;

  memset(&r, 0, sizeof r);
  r.c = c;
  r.sigfd = r.evr = r.evw = r.guard_fd = -1;
  r.lapsed_ms = -1;
  r.lost_lapsed_ms = -1;

  /* The environment is changed before any thread exists. The token of an
   * outer dlock would be wrong for this lock, so it does not leak in. */
  if (setenv("DLOCK_NAME", c->o->name, 1) != 0) {
    cli_msg(c, "cannot set DLOCK_NAME: %s", strerror(errno));
    return CLI_EX_SOFTWARE;
  }
  unsetenv("DLOCK_TOKEN");
  /* Secrets do not reach the command: the password variables (read by
   * main() and handed to the library's options, which copied them), and
   * DLOCK_URL when it carries a password (a nested dlock then needs
   * --password-file). */
  unsetenv("DLOCK_PASSWORD");
  unsetenv("DLOCK_SENTINEL_PASSWORD");
  {
    const char *u = getenv("DLOCK_URL");
    if (u != NULL && cli_url_secret_span(u, &(size_t){0}, &(size_t){0}))
      unsetenv("DLOCK_URL");
  }
  /* The command's orphans are adopted by dlock, not by init: they can be
   * reaped and signalled (signal_command) */
  if (c->o->mode == CLI_MODE_RUN)
    prctl(PR_SET_CHILD_SUBREAPER, 1);
  if (setup(&r) != 0) {
    cli_msg(c, "internal error: setting up signals: %s", strerror(errno));
    return CLI_EX_SOFTWARE;
  }
  if (dlock_options_set_lost_callback(c->dopts, on_lost, &r) != 0) {
    cli_msg(c, "internal error: cannot set the lost-lock callback");
    return CLI_EX_SOFTWARE;
  }
  pthread_mutex_init(&r.mu, NULL);
  {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r.cv, &ca);
    pthread_condattr_destroy(&ca);
  }
  /* who holds it, for others' --status and -v (before any thread) */
  cli_who_set(c);
  r.owner = dlock_thread_id();
  r.t_start = cli_now_ms();
  /* -w bounds everything (connect, TLS, session and lease set-up, and the
   * wait): the connect timeout is cut to it, and the main thread gives up
   * at the end (wait_ran_out), whatever step the worker is stuck in; -n
   * is one attempt, bounded by the connect timeout */
  if (c->o->wait_ms > 0 && c->o->wait_ms < CLI_CONNECT_TIMEOUT_MS)
    dlock_options_set_connect_timeout(c->dopts, c->o->wait_ms);
  give_up =
      c->o->wait_ms < 0
          ? -1
          : r.t_start + CLI_WAIT_GRACE_MS +
                (c->o->wait_ms > 0 ? c->o->wait_ms : CLI_CONNECT_TIMEOUT_MS);
  if (pthread_create(&th, NULL, worker, &r) != 0) {
    cli_msg(c, "internal error: cannot start a thread");
    return CLI_EX_SOFTWARE;
  }
  r.worker = th;

  /* Waiting for the lock, within -w (or -n's connect timeout): the
   * library bounds each of its steps, and this deadline the whole. */
  for (;;) {
    struct event ev;
    next_event(&r, give_up, &ev);
    if (ev.kind == EV_TIMEOUT && !wait_ran_out(&r))
      give_up = -1; /* the worker is done: its 'A' comes next */
    if (ev.kind == EV_DONE)
      break;
    if (ev.kind == EV_SIGNAL && is_stop_signal(ev.signo))
      return stop_while_waiting(&r, th, ev.signo);
    if (ev.kind == EV_ERROR) {
      cli_msg(c, "internal error: waiting for the lock: %s", strerror(errno));
      return CLI_EX_SOFTWARE;
    }
    /* A lock lost before the grant was complete (the first of an
     * exclusive kind's two, removed while dlock waited for the second)
     * counts once the grant is known. SIGCHLD: none of ours yet. */
    if (ev.kind == EV_LOST)
      early_lost = ev.lost;
  }
  pthread_join(th, NULL);

  if (r.failed) {
    if (r.acquire_err == DLOCK_ELOST && r.lapsed_ms >= 0)
      say_lapsed(&r, r.lapsed_ms);
    if (c->o->verbose &&
        (r.acquire_err == DLOCK_EBUSY || r.acquire_err == DLOCK_ETIMEDOUT))
      cli_msg(c, "'%s' is held by another owner; gave up after %.3f s",
              c->name_shown, secs(r.t_acquired - r.t_start));
    watch_join(&r);
    if (r.clients != NULL) {
      group_free(&r);
      return r.worker_rc;
    }
    dlock_permit_sem_free(r.sem);
    dlock_lock_free(r.side);
    dlock_lock_free(r.lock);
    dlock_client_free(r.client);
    return r.worker_rc;
  }
  if (c->o->verbose) {
    char how[128];
    hold_terms(&r, how, sizeof how);
    cli_msg(c, "acquired '%s' after %.3f s as %s:%llu (%s)", c->name_shown,
            secs(r.t_acquired - r.t_start), dlock_client_id(r.client),
            (unsigned long long)r.owner, how);
    if (r.token > 0)
      cli_msg(c, "fencing token %lld (DLOCK_TOKEN)", (long long)r.token);
    else if (r.sem != NULL)
      cli_msg(c, "permit %s of %ld; no fencing token (DLOCK_TOKEN is not set)",
              r.permit, c->o->limit);
    else if (r.multi != NULL)
      cli_msg(c, "no fencing token: several locks (DLOCK_TOKEN is not set)");
    else
      cli_msg(c, "no fencing token: %s lock (DLOCK_TOKEN is not set)",
              c->o->kind == CLI_KIND_SHARED ? "a shared"
              : c->o->kind == CLI_KIND_FAIR ? "a fair"
                                            : "the layout's plain");
  }

  /* Never start the command (or hold) on a grant that lapsed since it was
   * made: a waiter stopped while queued is handed the lock, and its lease
   * runs out before it runs again. Checked before a loss reported
   * meanwhile, which the library dates and words as an outage. */
  {
    int64_t lapsed;
    if (grant_lapsed(&r, false, &lapsed))
      return lapsed_before_start(&r, lapsed);
  }
  if (early_lost != 0) {
    int64_t unused = -1;
    handle_lost(&r, early_lost, &unused);
    if (c->o->on_lost != CLI_LOST_IGNORE) {
      /* the command has not started: it does not run without the lock */
      release_and_close(&r);
      return CLI_EX_TEMPFAIL;
    }
  }
  if (c->o->mode == CLI_MODE_HOLD)
    rc = hold(&r);
  else
    rc = supervise(&r);
  return rc;
}
