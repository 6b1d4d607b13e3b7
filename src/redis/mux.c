/*
 * mux.c - one pipelined connection that the caller threads of a client
 * share for their scripts (dlock__redis_mux_exec).
 *
 * Why. With a connection per busy thread, T threads on T locks cost the
 * server one read and one write per request on T sockets; on one shared
 * connection the server reads the requests that arrived together in one
 * read and answers them in one write, and the client needs no pool of T
 * connections. Redis answers a connection's requests in the order it got
 * them, so the replies are matched to requests by order alone.
 *
 * How (leader/follower). Under `mu` a caller appends its commands to the
 * connection's output, queues a slot (the number of replies it expects) at
 * the tail of the FIFO, and writes at once what the output holds. Then
 * exactly one waiting thread, the leader, waits in poll() (without `mu`)
 * for the socket; when it is readable the leader, under `mu`, reads, hands
 * each whole reply to the oldest slot, wakes each slot's thread once its
 * replies are complete, and goes on until its own slot is complete; then
 * it passes the lead to the thread of the oldest slot left. The other
 * threads sleep on their slot's condition variable. Every conn call is
 * made under `mu`, so a TLS connection's OpenSSL object is never used by
 * two threads at once; only the poll() is outside it, and only the leader
 * polls. A leader's poll wakes at least every LEADER_TICK_MS to send what
 * a writer could not (a full socket buffer) and to see a failed conn.
 *
 * Failures. A broken connection (read or write error, closed by the server,
 * a protocol error) and a slot whose deadline passed both end the
 * connection: every slot still queued fails with the error (the outcome of
 * its request is unknown, as on a pooled connection that broke), and the
 * next request dials a new one. The oldest slot has the nearest deadline
 * (requests wait the same command timeout), so the leader, who serves it,
 * is the one that sees it pass; the conn is closed only when nobody polls
 * it (no leader), so that no thread polls a closed descriptor.
 *
 * Sentinel: the leader ends the connection (its slots fail) as soon as it
 * was dialled at an older master than the one the sentinels name, and
 * asks the sentinels itself when the oldest slot has waited MUX_SLOW_MS
 * (a stopped master keeps requests unanswered, see sentinel.c).
 *
 * Sent requests (dlock__redis_mux_send: the async calls' tries and
 * releases, backend.h's lock_*_send). No thread waits on such a slot: its
 * reply is handed to its `done` function. Whoever reads the connection
 * (a leader, or the event loop, which polls it while sent slots are
 * queued: dlock__redis_mux_loop_prepare / _dispatch) delivers it, and
 * the slot goes on the `fired` list; every thread that releases `mu`
 * after changing the slots runs the fired functions first, with no mutex
 * held (run_fired). A leader hands the lead to the oldest slot that has
 * a thread; the loop enforces a sent slot's deadline when it is the
 * oldest. A send never dials: with no connection up it answers
 * DLOCK__SEND_BLOCKS (its request goes the blocking way) and has the
 * client's dialling worker dial one for the sends to come.
 *
 * Requests that block the connection on the server (WAIT for replicas) do
 * not come here: they go on a pooled connection of their own (redis.c).
 *
 * Threads: any caller thread, and the event loop. `mu` guards everything
 * here.
 */
#include "redis/redis.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"

#define LEADER_TICK_MS 50
#define MUX_SLOW_MS 500 /* Sentinel: the sentinels are asked after this */
#define MUX_MAX_REPLIES 3

typedef struct mux_slot {
  struct mux_slot *next;
  size_t want, got;
  redisReply *rep[MUX_MAX_REPLIES];
  int rc;    /* <0: failed (err says why) */
  bool done; /* complete or failed */
  char err[300];
  int64_t sent_at, deadline;
  pthread_cond_t cv;
  /* a sent slot: no thread waits; done gets its reply (or failure) */
  dlock__redis_mux_done on_reply;
  void *done_arg;
  struct mux_slot *fnext; /* the fired list */
} mux_slot;

struct dlock__redis_mux {
  pthread_mutex_t mu;
  dlock__conn *conn; /* NULL: none yet, or closed after a failure */
  bool conn_failed;  /* failed, to be closed by whoever polls it next */
  bool leader;       /* a thread is reading (or about to) */
  bool dialing;
  uint64_t dials;     /* dials finished */
  int dial_rc;        /* the last one's outcome, and why it failed */
  char dial_err[300];
  pthread_cond_t dial_cv;
  mux_slot *head, *tail;
  size_t nsent;                 /* sent slots queued */
  bool dial_queued;             /* a dial for sends is on the dialling worker */
  mux_slot *fired, *fired_tail; /* sent slots ended, done not yet run */
};

int dlock__redis_mux_new(dlock__redis_mux **out) {
  dlock__redis_mux *m = dlock__calloc(1, sizeof *m);
  if (!m)
    return DLOCK_ENOMEM;
  pthread_mutex_init(&m->mu, NULL);
  pthread_cond_init(&m->dial_cv, NULL);
  *out = m;
  return 0;
}

void dlock__redis_mux_free(dlock__redis_mux *m) {
  if (!m)
    return;
  /* no caller is inside: the client is being freed. The mutex and the
   * condition variable are not destroyed: in a forked child a parent's
   * thread may be recorded as waiting on them, and glibc's destroy would
   * wait for it forever (the core skips its own for the same reason) */
  dlock__conn_close(m->conn);
  dlock__free(m);
}

/* A slot's replies are complete, or it failed (it has left the queue):
 * its thread is woken, or a sent slot goes on the fired list. */
static void slot_ended_locked(dlock__redis_mux *m, mux_slot *s) {
  if (!s->on_reply) {
    pthread_cond_signal(&s->cv);
    return;
  }
  m->nsent--;
  s->fnext = NULL;
  if (m->fired_tail)
    m->fired_tail->fnext = s;
  else
    m->fired = s;
  m->fired_tail = s;
}

/* Takes the fired list (mu held), to run it once mu is released. */
static mux_slot *take_fired_locked(dlock__redis_mux *m) {
  mux_slot *f = m->fired;
  m->fired = m->fired_tail = NULL;
  return f;
}

/* Runs the done functions of the fired slots `f` (no mutex held) and
 * frees them; the thread's error detail is as it was before. */
static void run_fired(mux_slot *f) {
  if (!f)
    return;
  char saved[300];
  snprintf(saved, sizeof saved, "%s", dlock_last_error());
  while (f) {
    mux_slot *s = f;
    f = s->fnext;
    if (s->rc < 0) {
      dlock__seterr(s->rc, "%s", s->err);
      s->on_reply(s->done_arg, s->rc, NULL);
    } else {
      s->on_reply(s->done_arg, 0, s->rep[0]);
    }
    dlock__free(s);
  }
  dlock__seterr(0, "%s", saved);
}

/* Unlocks mu, then runs what fired under it. */
static void unlock_and_fire(dlock__redis_mux *m) {
  mux_slot *f = take_fired_locked(m);
  pthread_mutex_unlock(&m->mu);
  run_fired(f);
}

/* Fails every queued slot with rc and the current error; the conn is
 * closed now when nobody polls it, else by the leader when it wakes. */
static void fail_all_locked(dlock__redis_mux *m, int rc) {
  const char *why = dlock_last_error();
  mux_slot *next;
  for (mux_slot *s = m->head; s; s = next) {
    next = s->next;
    for (size_t i = 0; i < s->got; i++)
      freeReplyObject(s->rep[i]);
    s->got = 0;
    s->rc = rc;
    s->done = true;
    snprintf(s->err, sizeof s->err, "%s", why);
    slot_ended_locked(m, s);
  }
  m->head = m->tail = NULL;
  m->conn_failed = true;
  if (!m->leader) {
    dlock__conn_close(m->conn);
    m->conn = NULL;
    m->conn_failed = false;
  }
}

/* Hands whole replies to the oldest slots; <0 after failing them all. */
static int deliver_locked(dlock__redis_mux *m) {
  for (;;) {
    redisReply *rep = NULL;
    int t = dlock__conn_take_reply(m->conn, &rep);
    if (t < 0) {
      fail_all_locked(m, t);
      return t;
    }
    if (t == 0)
      return 0;
    mux_slot *s = m->head;
    if (!s) { /* a reply nobody asked for: the stream is out of step */
      freeReplyObject(rep);
      int rc = dlock__seterr(DLOCK_EPROTO, "%s: a reply came that no request "
                                           "was waiting for",
                             dlock__conn_peer(m->conn));
      fail_all_locked(m, rc);
      return rc;
    }
    s->rep[s->got++] = rep;
    if (s->got == s->want) {
      m->head = s->next;
      if (!m->head)
        m->tail = NULL;
      s->done = true;
      slot_ended_locked(m, s);
    }
  }
}

void dlock__redis_mux_end(dlock__redis_mux *m) {
  pthread_mutex_lock(&m->mu);
  if (m->conn && !m->conn_failed) {
    char why[300];
    snprintf(why, sizeof why, "%s", dlock_last_error());
    fail_all_locked(m, dlock__seterr(DLOCK_EUNAVAILABLE,
                                     "%s: the connection was ended (the "
                                     "server is no longer the master)",
                                     dlock__conn_peer(m->conn)));
    dlock__seterr(0, "%s", why);
  }
  unlock_and_fire(m);
}

/* The connection, dialled when there is none; called with mu held. */
static int conn_locked(dlock__redis *r, dlock__redis_mux *m) {
  /* dialled at an older master (Sentinel): nothing more is sent on it;
   * what is in flight fails, as on a broken connection */
  if (m->conn && !m->conn_failed && dlock__redis_conn_stale(r, m->conn)) {
    char why[300];
    snprintf(why, sizeof why, "%s", dlock_last_error());
    fail_all_locked(m, dlock__seterr(DLOCK_EUNAVAILABLE,
                                     "%s: the master changed",
                                     dlock__conn_peer(m->conn)));
    dlock__seterr(0, "%s", why);
  }
  /* a dial under way: its outcome is this caller's too (a failed dial is
   * not repeated by every waiter in turn) */
  uint64_t dials = m->dials;
  bool waited = false;
  while (m->dialing || (m->conn_failed && m->leader)) {
    waited = waited || m->dialing;
    pthread_cond_wait(&m->dial_cv, &m->mu);
  }
  if (m->conn)
    return 0;
  if (waited && m->dials != dials && m->dial_rc)
    return dlock__seterr(m->dial_rc, "%s", m->dial_err);
  m->dialing = true;
  pthread_mutex_unlock(&m->mu);
  dlock__conn *c = NULL;
  int rc = dlock__redis_dial(r, true, DLOCK__NEVER, &c);
  pthread_mutex_lock(&m->mu);
  m->dialing = false;
  m->conn = c;
  m->dials++;
  m->dial_rc = rc;
  snprintf(m->dial_err, sizeof m->dial_err, "%s", rc ? dlock_last_error() : "");
  pthread_cond_broadcast(&m->dial_cv);
  return rc;
}

/* Leads: reads for every slot until `me` is done. Called and returns with
 * mu held and m->leader set by the caller; clears it. */
static void lead_locked(dlock__redis *r, dlock__redis_mux *m, mux_slot *me) {
  while (!me->done) {
    if (m->conn_failed)
      break; /* me was failed with the rest */
    int64_t now = dlock__now_ms();
    uint32_t gen = dlock__conn_tag(m->conn);
    if ((r->sentinel || r->left) &&
        dlock__redis_master_left(r, gen, false, 0)) {
      /* the service names another master now; the old one may be
       * stopped, and would keep its requests until their deadline */
      fail_all_locked(m, dlock__seterr(DLOCK_EUNAVAILABLE,
                                       "%s: no answer, and another master "
                                       "serves it now",
                                       dlock__conn_peer(m->conn)));
      break;
    }
    if ((r->sentinel || r->left) && now - m->head->sent_at >= MUX_SLOW_MS) {
      /* the oldest request waits long: is the service failing over?
       * (asked without mu, at most every 500 ms in the client) */
      int64_t d = m->head->deadline;
      pthread_mutex_unlock(&m->mu);
      bool left = dlock__redis_master_left(r, gen, true, d);
      pthread_mutex_lock(&m->mu);
      if (m->conn_failed)
        break;
      if (left)
        continue;
    }
    if (now >= m->head->deadline) {
      fail_all_locked(m, dlock__seterr(DLOCK_EIOTIMEOUT,
                                       "%s: the server did not answer in time",
                                       dlock__conn_peer(m->conn)));
      break;
    }
    int64_t until = m->head->deadline;
    if (until > now + LEADER_TICK_MS)
      until = now + LEADER_TICK_MS;
    struct pollfd p = {.fd = dlock__conn_fd(m->conn),
                       .events = dlock__conn_poll_events(m->conn)};
    unlock_and_fire(m);
    int n = poll(&p, 1, dlock__poll_timeout(until));
    int perr = errno;
    pthread_mutex_lock(&m->mu);
    if (m->conn_failed)
      break;
    if (n < 0 && perr != EINTR) {
      fail_all_locked(m, dlock__seterr(DLOCK_EUNAVAILABLE, "%s: poll: %s",
                                       dlock__conn_peer(m->conn),
                                       strerror(perr)));
      break;
    }
    int rc = 0;
    if (dlock__conn_want_write(m->conn))
      rc = dlock__conn_write_some(m->conn);
    if (!rc && n > 0)
      rc = dlock__conn_read_some(m->conn);
    if (rc) {
      fail_all_locked(m, rc);
      break;
    }
    deliver_locked(m);
  }
  m->leader = false;
  if (m->conn_failed) { /* failed while this thread polled: close it now */
    dlock__conn_close(m->conn);
    m->conn = NULL;
    m->conn_failed = false;
    pthread_cond_broadcast(&m->dial_cv);
  } else {
    /* the oldest slot that has a thread leads next; with sent slots
     * only, the event loop reads for them */
    mux_slot *s = m->head;
    while (s && s->on_reply)
      s = s->next;
    if (s)
      pthread_cond_signal(&s->cv);
  }
}

int dlock__redis_mux_exec(dlock__redis *r, dlock__redis_mux *m,
                          int (*append)(dlock__conn *c, void *arg), void *arg,
                          size_t want, int64_t timeout_ms,
                          redisReply **replies) {
  if (want == 0 || want > MUX_MAX_REPLIES)
    return dlock__seterr(DLOCK_EINVAL, "mux: %zu replies", want);
  mux_slot me;
  memset(&me, 0, sizeof me);
  me.want = want;
  pthread_cond_init(&me.cv, NULL);
  pthread_mutex_lock(&m->mu);
  int rc = conn_locked(r, m);
  if (!rc)
    rc = append(m->conn, arg);
  if (rc) {
    /* nothing of this request was sent; but an append that failed half-way
     * (the second of two commands) would leave the output out of step
     * with the slots, so the conn ends (rare: out of memory, or broken) */
    if (m->conn) {
      char why[300];
      snprintf(why, sizeof why, "%s", dlock_last_error());
      fail_all_locked(m, rc);
      dlock__seterr(rc, "%s", why);
    }
    unlock_and_fire(m);
    pthread_cond_destroy(&me.cv);
    return rc;
  }
  me.sent_at = dlock__now_ms();
  me.deadline = dlock__deadline_after(timeout_ms);
  if (m->tail)
    m->tail->next = &me;
  else
    m->head = &me;
  m->tail = &me;
  rc = dlock__conn_write_some(m->conn);
  if (rc)
    fail_all_locked(m, rc);
  while (!me.done) {
    if (!m->leader) {
      m->leader = true;
      lead_locked(r, m, &me);
    } else {
      pthread_cond_wait(&me.cv, &m->mu);
    }
  }
  unlock_and_fire(m);
  pthread_cond_destroy(&me.cv);
  if (me.rc < 0)
    return dlock__seterr(me.rc, "%s", me.err);
  for (size_t i = 0; i < want; i++)
    replies[i] = me.rep[i];
  return 0;
}

/* ------------------------------------------------------ sent requests */

/* The dialling worker: a connection for the sent requests to come. */
static void dial_job(void *arg) {
  dlock__redis *r = arg;
  dlock__redis_mux *m = r->mux;
  char saved[300];
  snprintf(saved, sizeof saved, "%s", dlock_last_error());
  pthread_mutex_lock(&m->mu);
  m->dial_queued = false;
  conn_locked(r, m); /* a failure: the next send asks again */
  unlock_and_fire(m);
  dlock__seterr(0, "%s", saved);
}

int dlock__redis_mux_send(dlock__redis *r, dlock__redis_mux *m,
                          int (*append)(dlock__conn *c, void *arg), void *arg,
                          int64_t timeout_ms, dlock__redis_mux_done on_reply,
                          void *done_arg) {
  mux_slot *s = dlock__calloc(1, sizeof *s);
  if (!s)
    return DLOCK_ENOMEM;
  s->want = 1;
  s->on_reply = on_reply;
  s->done_arg = done_arg;
  pthread_mutex_lock(&m->mu);
  /* idle since its last reply: closed by the server meanwhile (a restart,
   * CLIENT KILL, its timeout)? Then nothing is sent into it: a new one is
   * dialled, as a pooled connection would be */
  if (m->conn && !m->head && !m->leader && !m->conn_failed &&
      dlock__conn_peer_closed(m->conn)) {
    dlock__conn_close(m->conn);
    m->conn = NULL;
  }
  if (!m->conn || m->conn_failed || m->dialing ||
      dlock__redis_conn_stale(r, m->conn)) {
    /* no dial on this thread: the dialling worker dials it (once at a
     * time), and this request goes the blocking way */
    bool dial = !m->conn && !m->dialing && !m->dial_queued;
    if (dial)
      m->dial_queued = true;
    pthread_mutex_unlock(&m->mu);
    dlock__free(s);
    if (dial && dlock__client_run_dial(r->core, dial_job, r) != 0) {
      pthread_mutex_lock(&m->mu);
      m->dial_queued = false;
      pthread_mutex_unlock(&m->mu);
    }
    return DLOCK__SEND_BLOCKS;
  }
  int rc = append(m->conn, arg);
  if (rc) { /* as in exec: the output may be out of step, the conn ends */
    char why[300];
    snprintf(why, sizeof why, "%s", dlock_last_error());
    fail_all_locked(m, rc);
    dlock__seterr(rc, "%s", why);
    unlock_and_fire(m);
    dlock__free(s);
    return rc;
  }
  s->sent_at = dlock__now_ms();
  s->deadline = dlock__deadline_after(timeout_ms);
  if (m->tail)
    m->tail->next = s;
  else
    m->head = s;
  m->tail = s;
  /* the loop polls the connection from its next round on */
  bool first = m->nsent++ == 0;
  rc = dlock__conn_write_some(m->conn);
  if (rc)
    fail_all_locked(m, rc); /* s fails with the rest: it fires below */
  unlock_and_fire(m);
  if (first)
    dlock__client_poke(r->core);
  return 0;
}

/* mu held: the oldest request is a sent one past its deadline; nobody
 * else would notice (a leader serves a slot of a thread) */
static void expire_sent_locked(dlock__redis_mux *m, int64_t now) {
  if (!m->head || !m->head->on_reply || now < m->head->deadline || !m->conn ||
      m->conn_failed)
    return;
  char why[300];
  snprintf(why, sizeof why, "%s", dlock_last_error());
  fail_all_locked(m, dlock__seterr(DLOCK_EIOTIMEOUT,
                                   "%s: the server did not answer in time",
                                   dlock__conn_peer(m->conn)));
  dlock__seterr(0, "%s", why);
}

int dlock__redis_mux_loop_prepare(dlock__redis_mux *m, int64_t now,
                                  struct pollfd *fd, int64_t *until) {
  pthread_mutex_lock(&m->mu);
  expire_sent_locked(m, now);
  int n = 0;
  if (m->nsent > 0 && m->conn && !m->conn_failed) {
    fd->fd = dlock__conn_fd(m->conn);
    fd->events = dlock__conn_poll_events(m->conn);
    fd->revents = 0;
    if (m->head->deadline < *until)
      *until = m->head->deadline;
    n = 1;
  }
  unlock_and_fire(m);
  return n;
}

void dlock__redis_mux_loop_dispatch(dlock__redis_mux *m, int64_t now,
                                    const struct pollfd *fd) {
  pthread_mutex_lock(&m->mu);
  /* the connection polled may have ended since (its fd then names
   * another file or none): only the current one is read */
  if (m->conn && !m->conn_failed && fd->revents &&
      fd->fd == dlock__conn_fd(m->conn)) {
    int rc = 0;
    if (dlock__conn_want_write(m->conn))
      rc = dlock__conn_write_some(m->conn);
    if (!rc)
      rc = dlock__conn_read_some(m->conn);
    if (rc)
      fail_all_locked(m, rc);
    else
      deliver_locked(m);
  }
  expire_sent_locked(m, now);
  unlock_and_fire(m);
}
