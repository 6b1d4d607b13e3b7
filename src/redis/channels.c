/*
 * channels.c - how the Redis backend wakes waiters: pub/sub channels on one
 * watch connection per client, Redisson's wake messages, and dlock's
 * hand-off grants. It serves the core's wait interface (core/wait.h) and
 * the event loop's hooks (loop_prepare / loop_dispatch).
 *
 * A wait registers on its channel (Redisson's channel of the lock, or a
 * fair waiter's own; a semaphore's or latch's) BEFORE retrying the attempt
 * that failed, so a release between the failed attempt and the
 * subscription cannot be missed. Arming a wait asks for the channel's
 * subscription; an idle channel stays subscribed for a linger period, so a
 * busy lock is not re-subscribed for every wait.
 *
 * Wake rules (Redisson's): message "1" wakes every lock waiter of the
 * channel in this client; any other message wakes, by the waiter's mode,
 * one lock waiter per lock, the oldest not already woken (Redisson's layout
 * gives "x" and "{x}" one channel, so one channel may serve two locks),
 * every latch waiter, or, oldest first, the semaphore waiters whose wants
 * fit in the count the message announces. A waiter that ends with an
 * unused wake passes it on to a waiter of the same lock.
 *
 * Hand-off: a lock channel may have a companion grant channel (one per lock
 * and client) on which a release announces that it made a queued waiter
 * the owner, "<tid>:<seq>[:<token>]". That waiter alone is granted. Both
 * names are subscribed and unsubscribed together; the channel is armed when
 * both are confirmed. A refused grant channel only disables hand-off.
 *
 * The watch connection is a conn like the pool's (conn.c: plain or TLS on
 * one path; the loop polls for what dlock__conn_poll_events says). It is
 * dialled on the client's dialling worker (the
 * loop never waits on the network) and then belongs to the loop thread,
 * which writes (UN)SUBSCRIBE without blocking and reads the pushes (this
 * file's "protocol" part turns them into events). A lost
 * connection disarms every wait (each retries: messages may have been
 * lost) and is dialled again: at once after a connection that worked, else
 * after a backoff doubling from 50 ms to 2 s.
 *
 * Threads and locks: r->wmu guards every channel, registration and the
 * watch state shared with the dialling job; the loop-only fields are marked.
 * Up-calls to the core (wait.h) are made with wmu held, which the lock
 * order allows (backend mutex, then client->mu); wmu is never held across
 * network I/O other than the loop's non-blocking writes and reads.
 */
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdatomic.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/map.h"
#include "core/wait.h"
#include "redis/redis.h"

#define CHAN_LINGER_MS 5000
#define BACKOFF_MIN_MS 50
#define BACKOFF_MAX_MS 2000
#define SUB_BATCH 256

typedef enum chan_state {
  CH_UNSUB,    /* not subscribed */
  CH_SUBBING,  /* SUBSCRIBE sent */
  CH_SUBBED,   /* confirmed */
  CH_UNSUBBING /* UNSUBSCRIBE sent */
} chan_state;

/* How a message (other than "1", which wakes every lock waiter) wakes. */
typedef enum wake_mode {
  WAKE_LOCK,  /* one waiter per lock and client (Redisson's "0") */
  WAKE_ALL,   /* every message wakes every such waiter (latches) */
  WAKE_COUNT  /* the payload counts permits: those whose wants fit */
} wake_mode;

typedef struct rwait rwait;

typedef struct rchan {
  char *name;
  size_t len;
  char *grant; /* companion grant channel, or NULL */
  size_t glen;
  chan_state state;
  int pending;  /* confirmations still expected in SUBBING / UNSUBBING */
  int nwaiters; /* registered waits */
  int nwanting; /* of them, those that armed it */
  rwait *head, *tail; /* FIFO */
  int64_t idle_since; /* when the last wanting wait left */
  int err;            /* subscription refused: code, until unused */
  char *errmsg;
  bool no_handoff; /* the grant channel was refused: no queuing */
  bool moved; /* a cluster slot that left the node: not subscribed again
                 here until unused */
} rchan;

struct rwait {
  rwait *prev, *next;
  rchan *chan;
  dlock__wait *w;
  const char *lock;  /* the lock's name (wake-ups are per lock; the
                        handle's, which outlives the wait) */
  const char *grant; /* this lock's grant channel, or NULL */
  char *grant_owned; /* = grant when made for this wait (no handle) */
  wake_mode mode;
  bool wants; /* counted in chan->nwanting */
};

/* One (UN)SUBSCRIBE command in flight (loop thread). Redis answers in
 * order: k confirmations for k names, or one error. */
typedef struct sub_cmd {
  bool subscribe;
  bool grants;
  size_t left;
  size_t n;
  char **names; /* copies: a refusal may come after the channel was freed */
} sub_cmd;

struct dlock__redis_watch {
  /* --- under r->wmu --- */
  dlock__map chans; /* name (and grant name) -> rchan */
  /* channels in chans, also read without wmu: with none, no wait of this
   * client watches anything (wait_hot, watching answer at once) */
  _Atomic size_t nchans;
  bool up;          /* the watch connection is established */
  bool dialing;     /* the dialling worker is connecting */
  bool dial_done;   /* ... and finished: dialed or dial_rc/dial_err */
  int dial_rc;
  char dial_err[256];
  dlock__conn *dialed;
  /* Sentinel: a check of the master is running on the dialling worker */
  _Atomic bool checking;
  /* --- loop thread only --- */
  int64_t retry_at, backoff, linger_at;
  int64_t check_at; /* Sentinel: when the master is checked next */
  bool proven; /* this connection confirmed a subscription */
  sub_cmd *fifo;
  size_t fifo_head, fifo_len, fifo_cap;
};

/* Events read from the watch connection. */
typedef enum watch_event {
  W_MESSAGE,      /* payload published on channel */
  W_SUBSCRIBED,   /* the channel is now watched */
  W_UNSUBSCRIBED, /* the channel is no longer watched */
  W_REFUSED       /* the server refused the pending subscriptions: code and
                     payload = its message */
} watch_event;

typedef void (*watch_fn)(void *ud, watch_event ev, int code,
                         const char *channel, size_t chlen,
                         const char *payload, size_t plen);

/* ------------------------------------------------------------ protocol */

static void watch_disconnect(dlock__redis *r) {
  dlock__conn_close(r->watch);
  r->watch = NULL;
}

static int watch_flush(dlock__redis *r) {
  if (!r->watch)
    return dlock__seterr(DLOCK_EUNAVAILABLE, "pub/sub connection is closed");
  return dlock__conn_write_some(r->watch);
}

/* One SUBSCRIBE or UNSUBSCRIBE command with the n names (kept small; the
 * FIFO counts on one command per call to match the answers), written
 * without blocking: the rest goes when the socket is writable. */
static int watch_subscribe(dlock__redis *r, bool subscribe,
                           const char *const *chans, const size_t *lens,
                           size_t n) {
  if (!r->watch)
    return dlock__seterr(DLOCK_EUNAVAILABLE, "pub/sub connection is closed");
  const char **argv = dlock__calloc(n + 1, sizeof *argv);
  size_t *argl = dlock__calloc(n + 1, sizeof *argl);
  int rc = DLOCK_ENOMEM;
  if (argv && argl) {
    argv[0] = r->sharded ? (subscribe ? "SSUBSCRIBE" : "SUNSUBSCRIBE")
                         : (subscribe ? "SUBSCRIBE" : "UNSUBSCRIBE");
    argl[0] = strlen(argv[0]);
    for (size_t i = 0; i < n; i++) {
      argv[i + 1] = chans[i];
      argl[i + 1] = lens[i];
    }
    rc = dlock__conn_append(r->watch, (int)n + 1, argv, argl);
  }
  dlock__free((void *)argv);
  dlock__free(argl);
  return rc ? rc : dlock__conn_write_some(r->watch);
}

static bool str_is(const redisReply *e, const char *s) {
  return e->type == REDIS_REPLY_STRING && e->len == strlen(s) &&
         memcmp(e->str, s, e->len) == 0;
}

/* Reads what arrived and reports each push as an event; < 0 when the
 * connection died (after delivering what was parsed). */
static int watch_read(dlock__redis *r, watch_fn fn, void *ud) {
  if (!r->watch)
    return dlock__seterr(DLOCK_EUNAVAILABLE, "pub/sub connection is closed");
  int rc = dlock__conn_read_some(r->watch);
  /* deliver what was parsed even when the read then failed */
  for (int guard = 0; guard < 100000; guard++) {
    redisReply *m = NULL;
    int t = dlock__conn_take_reply(r->watch, &m);
    if (t < 0)
      return t;
    if (t == 0)
      break;
    if (m->type == REDIS_REPLY_ERROR) {
      /* only SUBSCRIBE can be refused (ACL channel rules, NOPERM): the
       * connection stays good, the pending channels fail */
      int e = dlock__redis_error(
          m, r->sharded ? "SSUBSCRIBE refused" : "SUBSCRIBE refused");
      const char *msg = dlock_last_error();
      fn(ud, W_REFUSED, e, NULL, 0, msg, strlen(msg));
      freeReplyObject(m);
      continue;
    }
    if (m->type == REDIS_REPLY_ARRAY && m->elements == 3 &&
        m->element[1]->type == REDIS_REPLY_STRING) {
      const redisReply *kind = m->element[0], *ch = m->element[1],
                       *pl = m->element[2];
      /* sharded pub/sub (a cluster node) names its pushes with an "s" */
      if ((str_is(kind, "message") || str_is(kind, "smessage")) &&
          pl->type == REDIS_REPLY_STRING)
        fn(ud, W_MESSAGE, 0, ch->str, ch->len, pl->str, pl->len);
      else if (str_is(kind, "subscribe") || str_is(kind, "ssubscribe"))
        fn(ud, W_SUBSCRIBED, 0, ch->str, ch->len, NULL, 0);
      else if (str_is(kind, "unsubscribe") || str_is(kind, "sunsubscribe"))
        fn(ud, W_UNSUBSCRIBED, 0, ch->str, ch->len, NULL, 0);
    }
    freeReplyObject(m);
  }
  return rc;
}

/* ------------------------------------------------------------ wake-ups */

static bool is_woken(const rwait *x) { return dlock__wait_is_woken(x->w); }

static void set_ready_all(rchan *ch, bool ready, bool wake) {
  for (rwait *x = ch->head; x; x = x->next)
    dlock__wait_set_ready(x->w, ready, wake);
}

static void fail_all(rchan *ch) {
  for (rwait *x = ch->head; x; x = x->next)
    dlock__wait_fail(x->w, ch->err, ch->errmsg);
}

/* Wakes the oldest waiter of `lock` (a lock, or a semaphore passing on a
 * wake) not already woken. */
static void wake_first(rchan *ch, const char *lock) {
  for (rwait *x = ch->head; x; x = x->next) {
    if (strcmp(x->lock, lock) == 0 && !is_woken(x)) {
      dlock__wait_wake(x->w);
      return;
    }
  }
}

static void wake_one_per_lock(rchan *ch) {
  for (rwait *x = ch->head; x; x = x->next) {
    if (x->mode != WAKE_LOCK)
      continue;
    bool seen = false; /* an older waiter of this lock was considered */
    for (rwait *o = ch->head; o != x; o = o->next)
      if (o->mode == WAKE_LOCK && strcmp(o->lock, x->lock) == 0) {
        seen = true;
        break;
      }
    if (!seen)
      wake_first(ch, x->lock);
  }
}

/* A message on a channel, by each waiter's mode. A semaphore waiter that
 * asks for more than is left is passed over, so it cannot use up a wake-up
 * a smaller request behind it could have used; one already woken takes
 * nothing from the count, so a burst of releases over-wakes rather than
 * strands anyone. */
static void wake_on_message(rchan *ch, const char *p, size_t n) {
  bool one = n == 1 && p[0] == '1';
  if (!one)
    wake_one_per_lock(ch);
  int64_t count = 0;
  bool number = n > 0 && n < 19;
  for (size_t i = 0; number && i < n; i++) {
    if (p[i] < '0' || p[i] > '9')
      number = false;
    else
      count = count * 10 + (p[i] - '0');
  }
  for (rwait *x = ch->head; x; x = x->next) {
    if (x->mode == WAKE_ALL || (one && x->mode == WAKE_LOCK)) {
      dlock__wait_wake(x->w);
    } else if (x->mode == WAKE_COUNT && !is_woken(x)) {
      int64_t need = x->w->spec->need > 0 ? x->w->spec->need : 1;
      if (number && need > count)
        continue;
      if (number)
        count -= need;
      dlock__wait_wake(x->w);
    }
  }
}

/* Parses a decimal field of p[*i..n) ending at n or at ':'. */
static bool grant_field(const char *p, size_t n, size_t *i, uint64_t *out) {
  size_t j = *i;
  uint64_t v = 0;
  for (; *i < n && *i - j < 19 && p[*i] >= '0' && p[*i] <= '9'; (*i)++)
    v = v * 10 + (uint64_t)(p[*i] - '0');
  *out = v;
  return *i > j && (*i == n || p[*i] == ':');
}

/* "<tid>:<seq>[:<token>]" -> the matching wait of ch, granted. */
static void deliver_grant(dlock__redis *r, rchan *ch, const char *p,
                          size_t n) {
  uint64_t tid = 0, seq = 0, token = 0;
  size_t i = 0;
  if (!grant_field(p, n, &i, &tid) || i == n)
    return;
  i++;
  if (!grant_field(p, n, &i, &seq))
    return;
  if (i < n && (++i, !grant_field(p, n, &i, &token) || i != n))
    return;
  for (rwait *x = ch->head; x; x = x->next) {
    const dlock__wait_spec *sp = x->w->spec;
    if (!sp->sync && sp->tid == tid && sp->seq == seq) {
      dlock__wait_grant(x->w, (int64_t)token);
      return;
    }
  }
  /* no such wait: it already took the lock (its attempt or leave found the
   * grant), or it ended without learning the outcome: an unresolved wait,
   * which the core settles */
  dlock__wait_orphan_grant(r->core, tid, seq);
}

/* ------------------------------------------------------------ channels */

static void chan_free(dlock__redis_watch *ws, rchan *ch) {
  atomic_fetch_sub(&ws->nchans, 1);
  dlock__map_del(&ws->chans, ch->name, ch->len);
  if (ch->grant)
    dlock__map_del(&ws->chans, ch->grant, ch->glen);
  dlock__free(ch->name);
  dlock__free(ch->grant);
  dlock__free(ch->errmsg);
  dlock__free(ch);
}

static rchan *chan_new(dlock__redis_watch *ws, char *name, char *grant) {
  rchan *ch = dlock__calloc(1, sizeof *ch);
  if (!ch)
    return NULL;
  ch->name = name;
  ch->len = strlen(name);
  ch->grant = grant;
  ch->glen = grant ? strlen(grant) : 0;
  ch->state = CH_UNSUB;
  if (dlock__map_put(&ws->chans, ch->name, ch->len, ch)) {
    dlock__free(ch);
    return NULL;
  }
  if (grant && dlock__map_put(&ws->chans, grant, ch->glen, ch)) {
    dlock__map_del(&ws->chans, ch->name, ch->len);
    dlock__free(ch);
    return NULL;
  }
  atomic_fetch_add(&ws->nchans, 1);
  return ch;
}

/* The channel names a wait uses: borrowed from its handle when it has
 * one, else made here (*name_owned, *grant_owned, to free). */
static int wait_names(dlock__redis *r, const dlock__wait_spec *sp,
                      const char **name, const char **grant,
                      char **name_owned, char **grant_owned,
                      wake_mode *mode) {
  *name = *grant = NULL;
  *name_owned = *grant_owned = NULL;
  if (sp->sync) {
    *mode = sp->sync_kind == DLOCK__SYNC_LATCH ? WAKE_ALL : WAKE_COUNT;
    *name = *name_owned = dlock__redis_sync_channel(r, sp->sync_kind, sp->name);
    return *name ? 0 : DLOCK_ENOMEM;
  }
  *mode = WAKE_LOCK;
  if (sp->bh && sp->lock_kind != DLOCK_FAIR) {
    *name = dlock__redis_handle_channel(sp->bh);
    /* NULL for a layout without hand-off (spring.c) */
    *grant = dlock__redis_handle_grant(sp->bh);
    return *name ? 0 : DLOCK_ENOMEM;
  }
  *name = *name_owned =
      dlock__redis_lock_channel(r, sp->lock_kind, sp->name, sp->owner);
  if (!*name)
    return DLOCK_ENOMEM;
  if (sp->lock_kind == DLOCK_FAIR)
    return 0;
  /* readers subscribe to the grant channel too, though never handed the
   * lock: a release tells a registered reader's client is alive by it */
  if (sp->bh) {
    *grant = dlock__redis_handle_grant(sp->bh);
  } else {
    *grant = *grant_owned = dlock__redis_lock_grant_channel(
        r, sp->lock_kind, sp->name, r->client_id);
  }
  if (!*grant) {
    dlock__free(*name_owned);
    *name = *name_owned = NULL;
    return DLOCK_ENOMEM;
  }
  return 0;
}

int dlock__redis_wait_begin(void *be, dlock__wait *w) {
  dlock__redis *r = be;
  dlock__redis_watch *ws = r->ws;
  rwait *x = dlock__calloc(1, sizeof *x);
  if (!x)
    return DLOCK_ENOMEM;
  const char *name = NULL, *grant = NULL;
  char *name_owned = NULL;
  int rc = wait_names(r, w->spec, &name, &grant, &name_owned,
                      &x->grant_owned, &x->mode);
  if (rc) {
    dlock__free(x);
    return rc;
  }
  x->lock = w->spec->name;
  x->grant = grant;
  x->w = w;
  pthread_mutex_lock(&r->wmu);
  rchan *ch = dlock__map_get(&ws->chans, name, strlen(name));
  if (!ch) {
    /* the channel keeps copies of its names: it outlives this wait */
    char *cn = name_owned ? name_owned : dlock__strdup(name);
    char *cg = grant ? dlock__strdup(grant) : NULL;
    if (cn == name_owned)
      name_owned = NULL;
    if (!cn || (grant && !cg) || !(ch = chan_new(ws, cn, cg))) {
      pthread_mutex_unlock(&r->wmu);
      dlock__free(cn);
      dlock__free(cg);
      dlock__free(name_owned);
      dlock__free(x->grant_owned);
      dlock__free(x);
      return DLOCK_ENOMEM;
    }
  }
  dlock__free(name_owned);
  x->chan = ch;
  x->prev = ch->tail;
  if (ch->tail)
    ch->tail->next = x;
  else
    ch->head = x;
  ch->tail = x;
  ch->nwaiters++;
  w->reg = x;
  if (ch->state == CH_SUBBED)
    dlock__wait_set_ready(w, true, false);
  else if (ch->err) /* refused: so is this wait, until the channel is idle */
    dlock__wait_fail(w, ch->err, ch->errmsg);
  pthread_mutex_unlock(&r->wmu);
  return 0;
}

bool dlock__redis_wait_hot(void *be, const dlock__wait_spec *sp) {
  dlock__redis *r = be;
  const char *name = dlock__redis_handle_channel(sp->bh);
  if (sp->sync || sp->lock_kind == DLOCK_FAIR || !name)
    return true; /* no name without building one: register first */
  if (atomic_load(&r->ws->nchans) == 0)
    return false; /* as if read under wmu an instant earlier */
  pthread_mutex_lock(&r->wmu);
  rchan *ch = dlock__map_get(&r->ws->chans, name, strlen(name));
  bool hot = ch && (ch->state != CH_UNSUB || ch->nwaiters > 0);
  pthread_mutex_unlock(&r->wmu);
  return hot;
}

bool dlock__redis_wait_arm(void *be, dlock__wait *w, bool only_if_ready) {
  dlock__redis *r = be;
  rwait *x = w->reg;
  pthread_mutex_lock(&r->wmu);
  rchan *ch = x->chan;
  bool sub = ch->state == CH_SUBBED;
  if ((sub || !only_if_ready) && !x->wants) {
    x->wants = true;
    ch->nwanting++;
  }
  pthread_mutex_unlock(&r->wmu);
  if (!sub && !only_if_ready)
    dlock__client_poke(r->core);
  return sub;
}

bool dlock__redis_wait_can_queue(void *be, dlock__wait *w) {
  dlock__redis *r = be;
  rwait *x = w->reg;
  pthread_mutex_lock(&r->wmu);
  /* the channel may have been created for another lock sharing Redisson's
   * channel: hand-off only through this lock's own grant channel */
  rchan *ch = x->chan;
  bool ok = ch->state == CH_SUBBED && ch->grant && x->grant &&
            strcmp(ch->grant, x->grant) == 0 && !ch->no_handoff;
  pthread_mutex_unlock(&r->wmu);
  return ok;
}

void dlock__redis_wait_end(void *be, dlock__wait *w) {
  dlock__redis *r = be;
  rwait *x = w->reg;
  pthread_mutex_lock(&r->wmu);
  rchan *ch = x->chan;
  if (x->prev)
    x->prev->next = x->next;
  else
    ch->head = x->next;
  if (x->next)
    x->next->prev = x->prev;
  else
    ch->tail = x->prev;
  ch->nwaiters--;
  /* unlinked under wmu, under which every wake happens: whether it holds
   * an unused wake is final now, and such a wake goes to the next waiter
   * of the same lock or semaphore */
  if (dlock__wait_is_woken(w) && !dlock__wait_granted(w))
    wake_first(ch, x->lock);
  if (x->wants && --ch->nwanting == 0) {
    ch->idle_since = dlock__now_ms();
    ch->err = 0; /* the next waiter may try the subscription again */
    ch->moved = false;
  }
  if (ch->nwaiters == 0 && ch->nwanting == 0 && ch->state == CH_UNSUB)
    chan_free(r->ws, ch);
  pthread_mutex_unlock(&r->wmu);
  dlock__free(x->grant_owned);
  dlock__free(x);
  w->reg = NULL;
}

bool dlock__redis_watching(dlock__redis *r, const char *channel) {
  if (atomic_load(&r->ws->nchans) == 0)
    return false;
  pthread_mutex_lock(&r->wmu);
  rchan *ch = dlock__map_get(&r->ws->chans, channel, strlen(channel));
  bool on = ch && ch->state == CH_SUBBED;
  pthread_mutex_unlock(&r->wmu);
  return on;
}

/* Channels are in the map under one or two names; these walks visit each
 * channel once, under its main name, and collect first so that freeing a
 * channel (two map entries) never disturbs the walk. wmu held. */
static size_t main_chans(dlock__redis_watch *ws, rchan ***out) {
  size_t n = 0, cur;
  *out = ws->chans.count ? dlock__calloc(ws->chans.count, sizeof **out) : NULL;
  if (!*out)
    return 0;
  for (dlock__map_entry *e = dlock__map_first(&ws->chans, &cur); e;
       e = dlock__map_next(&ws->chans, e, &cur)) {
    rchan *ch = e->value;
    if (e->klen == ch->len && memcmp(e->key, ch->name, ch->len) == 0)
      (*out)[n++] = ch;
  }
  return n;
}

static bool wanted_locked(dlock__redis_watch *ws) {
  size_t cur;
  for (dlock__map_entry *e = dlock__map_first(&ws->chans, &cur); e;
       e = dlock__map_next(&ws->chans, e, &cur)) {
    rchan *ch = e->value;
    if (ch->nwanting > 0 || ch->state != CH_UNSUB)
      return true;
  }
  return false;
}

/* ------------------------------------------------- subscription FIFO */

static void cmd_free(sub_cmd *cmd) {
  for (size_t i = 0; cmd->names && i < cmd->n; i++)
    dlock__free(cmd->names[i]);
  dlock__free(cmd->names);
  cmd->names = NULL;
}

static void fifo_clear(dlock__redis_watch *ws) {
  for (size_t i = 0; i < ws->fifo_len; i++)
    cmd_free(&ws->fifo[(ws->fifo_head + i) % ws->fifo_cap]);
  ws->fifo_head = ws->fifo_len = 0;
}

static int fifo_push(dlock__redis_watch *ws, bool subscribe, bool grants,
                     const char *const *names, size_t n) {
  if (ws->fifo_len == ws->fifo_cap) {
    size_t nc = ws->fifo_cap ? ws->fifo_cap * 2 : 16;
    sub_cmd *f = dlock__calloc(nc, sizeof *f);
    if (!f)
      return DLOCK_ENOMEM;
    for (size_t i = 0; i < ws->fifo_len; i++)
      f[i] = ws->fifo[(ws->fifo_head + i) % ws->fifo_cap];
    dlock__free(ws->fifo);
    ws->fifo = f;
    ws->fifo_head = 0;
    ws->fifo_cap = nc;
  }
  sub_cmd *cmd = &ws->fifo[(ws->fifo_head + ws->fifo_len) % ws->fifo_cap];
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
  ws->fifo_len++;
  return 0;
}

static sub_cmd *fifo_front(dlock__redis_watch *ws) {
  return ws->fifo_len ? &ws->fifo[ws->fifo_head] : NULL;
}

static void fifo_pop(dlock__redis_watch *ws) {
  cmd_free(&ws->fifo[ws->fifo_head]);
  ws->fifo_head = (ws->fifo_head + 1) % ws->fifo_cap;
  ws->fifo_len--;
}

/* --------------------------------------------------- watch connection */

/* The connection is gone: every armed wait retries, and it is dialled
 * again. Loop thread. */
static void watch_down(dlock__redis *r, const char *why) {
  dlock__redis_watch *ws = r->ws;
  watch_disconnect(r);
  fifo_clear(ws);
  pthread_mutex_lock(&r->wmu);
  bool was_up = ws->up;
  ws->up = false;
  if (was_up) { /* subscriptions are gone and messages may have been lost */
    rchan **all;
    size_t n = main_chans(ws, &all);
    for (size_t i = 0; i < n; i++) {
      rchan *ch = all[i];
      ch->state = CH_UNSUB;
      ch->pending = 0;
      if (ch->nwaiters == 0 && ch->nwanting == 0)
        chan_free(ws, ch);
      else
        set_ready_all(ch, false, true);
    }
    dlock__free(all);
  }
  pthread_mutex_unlock(&r->wmu);
  if (was_up)
    dlock__log(r->core, DLOCK_LOG_WARN,
                     "pub/sub connection lost (%s); waiters retry and it "
                     "reconnects",
                     why);
  if (was_up && ws->proven) {
    ws->retry_at = dlock__now_ms(); /* a connection that worked: at once */
    ws->backoff = BACKOFF_MIN_MS;
  } else {
    /* never confirmed a subscription (refused, or accepted then dropped,
     * as a full server does): back off, doubling */
    ws->retry_at = dlock__now_ms() + ws->backoff;
    ws->backoff =
        ws->backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : ws->backoff * 2;
  }
  ws->proven = false;
}

/* Dialling worker: connects, then hands the connection to the loop. */
static void dial_job(void *arg) {
  dlock__redis *r = arg;
  dlock__conn *conn = NULL;
  int rc = dlock__redis_dial(
      r, false, dlock__deadline_after(r->connect_timeout_ms), &conn);
  pthread_mutex_lock(&r->wmu);
  r->ws->dial_rc = rc;
  snprintf(r->ws->dial_err, sizeof r->ws->dial_err, "%s",
           rc ? dlock_last_error() : "");
  r->ws->dialed = conn;
  r->ws->dial_done = true;
  pthread_mutex_unlock(&r->wmu);
  dlock__client_poke(r->core);
}

/* Takes a finished dial; starts one when channels are wanted and it is
 * time. Loop thread; never blocks. */
static void watch_maintain(dlock__redis *r, int64_t now) {
  dlock__redis_watch *ws = r->ws;
  pthread_mutex_lock(&r->wmu);
  bool done = ws->dial_done, wanted = wanted_locked(ws);
  int rc = ws->dial_rc;
  char err[sizeof ws->dial_err];
  memcpy(err, ws->dial_err, sizeof err);
  dlock__conn *conn = ws->dialed;
  if (done) {
    ws->dial_done = ws->dialing = false;
    ws->dialed = NULL;
    if (rc == 0)
      ws->up = true;
  }
  bool start = !done && !ws->up && !ws->dialing && wanted && now >= ws->retry_at;
  if (start)
    ws->dialing = true;
  pthread_mutex_unlock(&r->wmu);
  if (done) {
    if (rc == 0) {
      r->watch = conn;
    } else {
      dlock__log(r->core, DLOCK_LOG_INFO, "pub/sub connect failed: %s", err);
      watch_down(r, "connect failed");
    }
    return;
  }
  if (start && dlock__client_run_dial(r->core, dial_job, r) != 0) {
    pthread_mutex_lock(&r->wmu);
    ws->dialing = false;
    pthread_mutex_unlock(&r->wmu);
    watch_down(r, dlock_last_error());
  }
}

/* Sentinel: how often the master is checked while waits exist (a demoted
 * master that is still up breaks no connection). */
#define SENTINEL_CHECK_MS 1000

/* Dialling worker: asks the sentinels (master_gen rises on a change). */
static void sentinel_check_job(void *arg) {
  dlock__redis *r = arg;
  dlock__redis_sentinel_resolve(r,
                                dlock__deadline_after(r->connect_timeout_ms));
  atomic_store(&r->ws->checking, false);
  dlock__client_poke(r->core);
}

/* Sentinel, loop thread: a watch connection to an old master goes down
 * (its waiters retry, and it is dialled again, on the new master); while
 * waits exist the master is checked every SENTINEL_CHECK_MS. */
static void sentinel_follow(dlock__redis *r, int64_t now, bool wanted,
                            int64_t *until) {
  dlock__redis_watch *ws = r->ws;
  if (r->watch && dlock__redis_conn_stale(r, r->watch))
    watch_down(r, "the master changed (Sentinel)");
  if (!wanted)
    return;
  if (now >= ws->check_at && !atomic_load(&ws->checking)) {
    ws->check_at = now + SENTINEL_CHECK_MS;
    atomic_store(&ws->checking, true);
    if (dlock__client_run_dial(r->core, sentinel_check_job, r) != 0)
      atomic_store(&ws->checking, false);
  }
  if (ws->check_at < *until)
    *until = ws->check_at;
}

/* Sends one list of names as commands of at most SUB_BATCH. */
static int send_list(dlock__redis *r, bool subscribe, bool grants,
                     const char **names, const size_t *lens, size_t n) {
  /* sharded: one name per command, as names of different slots cannot
   * share one (CROSSSLOT) */
  size_t batch = r->sharded ? 1 : SUB_BATCH;
  for (size_t at = 0; at < n; at += batch) {
    size_t k = n - at < batch ? n - at : batch;
    int rc =
        watch_subscribe(r, subscribe, names + at, lens + at, k);
    if (!rc)
      rc = fifo_push(r->ws, subscribe, grants, names + at, k);
    if (rc)
      return rc;
  }
  return 0;
}

typedef struct name_list {
  const char **names;
  size_t *lens;
  size_t n, cap;
} name_list;

static int list_push(name_list *l, const char *name, size_t len) {
  if (l->n == l->cap) {
    size_t nc = l->cap ? l->cap * 2 : 16;
    const char **a = dlock__reallocarray((void *)l->names, nc, sizeof *a);
    if (!a)
      return -1;
    l->names = a;
    size_t *ls = dlock__reallocarray(l->lens, nc, sizeof *ls);
    if (!ls)
      return -1;
    l->lens = ls;
    l->cap = nc;
  }
  l->names[l->n] = name;
  l->lens[l->n] = len;
  l->n++;
  return 0;
}

static void list_free(name_list *l) {
  dlock__free((void *)l->names);
  dlock__free(l->lens);
}

/* Sends the subscription changes; notes the next linger deadline. Names
 * are copied into the commands while wmu is held, so channels freed
 * meanwhile are harmless. Loop thread. */
static void watch_sync(dlock__redis *r, int64_t now) {
  dlock__redis_watch *ws = r->ws;
  name_list subs = {0}, grants = {0}, unsubs = {0};
  int64_t next = DLOCK__NEVER;
  int rc = 0;
  pthread_mutex_lock(&r->wmu);
  if (!ws->up) {
    pthread_mutex_unlock(&r->wmu);
    ws->linger_at = DLOCK__NEVER;
    return;
  }
  rchan **all;
  size_t n = main_chans(ws, &all);
  for (size_t i = 0; i < n; i++) {
    rchan *ch = all[i];
    if (ch->nwanting > 0 && ch->state == CH_UNSUB && !ch->err &&
        !ch->moved) {
      size_t before = subs.n;
      if (list_push(&subs, ch->name, ch->len))
        continue;
      if (ch->grant && list_push(&grants, ch->grant, ch->glen)) {
        subs.n = before;
        continue;
      }
      ch->state = CH_SUBBING;
      ch->pending = ch->grant ? 2 : 1;
      ch->no_handoff = false;
    } else if (ch->nwanting == 0 && ch->state == CH_SUBBED) {
      int64_t expiry = ch->idle_since + CHAN_LINGER_MS;
      if (expiry <= now) {
        size_t before = unsubs.n;
        if (list_push(&unsubs, ch->name, ch->len) ||
            (ch->grant && list_push(&unsubs, ch->grant, ch->glen))) {
          unsubs.n = before;
          continue;
        }
        ch->state = CH_UNSUBBING;
        ch->pending = ch->grant ? 2 : 1;
        /* waits registered meanwhile (none armed it) are no longer armed */
        set_ready_all(ch, false, false);
      } else if (expiry < next) {
        next = expiry;
      }
    } else if (ch->nwaiters == 0 && ch->nwanting == 0 &&
               ch->state == CH_UNSUB) {
      chan_free(ws, ch);
    }
  }
  dlock__free(all);
  /* written while wmu is held: the names are live channels' names, and
   * the writes never block (the rest is flushed when writable) */
  rc = send_list(r, true, false, subs.names, subs.lens, subs.n);
  if (!rc)
    rc = send_list(r, true, true, grants.names, grants.lens, grants.n);
  if (!rc)
    rc = send_list(r, false, false, unsubs.names, unsubs.lens, unsubs.n);
  pthread_mutex_unlock(&r->wmu);
  list_free(&subs);
  list_free(&grants);
  list_free(&unsubs);
  ws->linger_at = next;
  if (rc)
    watch_down(r, dlock_last_error());
}

/* The server refused one SUBSCRIBE command. For main channels the waits
 * fail with its message; for grant channels the channel works on without
 * hand-off. wmu held. */
static void refused_locked(dlock__redis *r, int code, const char *msg,
                           const sub_cmd *cmd) {
  for (size_t i = 0; i < cmd->n; i++) {
    rchan *ch =
        dlock__map_get(&r->ws->chans, cmd->names[i], strlen(cmd->names[i]));
    if (!ch || ch->state != CH_SUBBING)
      continue;
    if (cmd->grants) {
      ch->no_handoff = true;
      if (--ch->pending <= 0) {
        ch->state = CH_SUBBED;
        set_ready_all(ch, true, true);
      }
      continue;
    }
    /* the grant channel's SUBSCRIBE, sent after this one, is answered on
     * its own; stop counting on either */
    ch->state = CH_UNSUB;
    ch->pending = 0;
    if (strstr(msg, ": MOVED ")) {
      /* a cluster slot that left this node: its waiters retry, and the
       * cluster moves them to the slot's new master */
      ch->moved = true;
      set_ready_all(ch, false, true);
      continue;
    }
    ch->err = code ? code : DLOCK_ESERVER;
    dlock__free(ch->errmsg);
    if (code == DLOCK_EAUTH)
      ch->errmsg = dlock__asprintf(
          "%s (the ACL user needs pub/sub access to %s)", msg, ch->name);
    else
      ch->errmsg = dlock__strdup(msg);
    fail_all(ch);
  }
}

/* One event read from the watch connection. Loop thread. */
static void on_watch_event(void *ud, watch_event ev, int code,
                           const char *name, size_t len, const char *payload,
                           size_t plen) {
  dlock__redis *r = ud;
  dlock__redis_watch *ws = r->ws;
  sub_cmd *front = fifo_front(ws);
  if (ev == W_REFUSED) {
    dlock__log(r->core, DLOCK_LOG_ERROR, "%.*s", (int)plen, payload);
    if (!front)
      return;
    char msg[400];
    snprintf(msg, sizeof msg, "%.*s", (int)plen, payload);
    pthread_mutex_lock(&r->wmu);
    refused_locked(r, code, msg, front);
    pthread_mutex_unlock(&r->wmu);
    fifo_pop(ws);
    return;
  }
  pthread_mutex_lock(&r->wmu);
  rchan *ch = dlock__map_get(&ws->chans, name, len);
  /* Redis Cluster drops the sharded subscriptions of a slot that leaves
   * the node, with an SUNSUBSCRIBE nobody asked for: no command of ours
   * is answered by it */
  bool dropped = ev == W_UNSUBSCRIBED && ch && ch->state != CH_UNSUBBING;
  if ((ev == W_SUBSCRIBED || ev == W_UNSUBSCRIBED) && front && !dropped) {
    if (ev == W_SUBSCRIBED)
      ws->proven = true;
    if (--front->left == 0)
      fifo_pop(ws);
  }
  if (dropped) {
    if (ch->state == CH_SUBBED) {
      /* the waiters retry (where the cluster now sends them) */
      ch->state = CH_UNSUB;
      ch->pending = 0;
      set_ready_all(ch, false, true);
    }
    pthread_mutex_unlock(&r->wmu);
    return;
  }
  if (ch) {
    bool is_grant =
        ch->grant && len == ch->glen && memcmp(name, ch->grant, len) == 0;
    switch (ev) {
    case W_MESSAGE:
      if (is_grant)
        deliver_grant(r, ch, payload, plen);
      else
        wake_on_message(ch, payload, plen);
      break;
    case W_SUBSCRIBED:
      if (ch->state == CH_SUBBING && --ch->pending <= 0) {
        ch->state = CH_SUBBED;
        /* waits registered before a reconnect retry now; new ones were
         * waiting for this */
        set_ready_all(ch, true, true);
      }
      break;
    case W_UNSUBSCRIBED:
      if (ch->state == CH_UNSUBBING && --ch->pending <= 0) {
        ch->state = CH_UNSUB;
        if (ch->nwaiters == 0 && ch->nwanting == 0)
          chan_free(ws, ch);
      }
      break;
    case W_REFUSED:
      break;
    }
  }
  pthread_mutex_unlock(&r->wmu);
}

int dlock__redis_loop_prepare(void *be, int64_t now, struct pollfd *fds,
                              int max, int64_t *until) {
  dlock__redis *r = be;
  dlock__redis_watch *ws = r->ws;
  watch_maintain(r, now);
  watch_sync(r, now);
  pthread_mutex_lock(&r->wmu);
  bool wanted = wanted_locked(ws), up = ws->up, dialing = ws->dialing;
  pthread_mutex_unlock(&r->wmu);
  if (r->sentinel) {
    sentinel_follow(r, now, wanted, until);
    pthread_mutex_lock(&r->wmu);
    up = ws->up;
    pthread_mutex_unlock(&r->wmu);
  }
  if (ws->linger_at < *until)
    *until = ws->linger_at;
  if (wanted && !up && !dialing && ws->retry_at < *until)
    *until = ws->retry_at;
  int n = 0;
  r->loop_watch_at = r->loop_mux_at = -1;
  if (up && r->watch && max > n) {
    fds[n].fd = dlock__conn_fd(r->watch);
    fds[n].events = dlock__conn_poll_events(r->watch);
    fds[n].revents = 0;
    r->loop_watch_at = n++;
  }
  /* the shared connection, while sent requests wait for replies */
  if (r->mux && max > n &&
      dlock__redis_mux_loop_prepare(r->mux, now, &fds[n], until))
    r->loop_mux_at = n++;
  return n;
}

static void watch_dispatch(dlock__redis *r, const struct pollfd *fd);

void dlock__redis_loop_dispatch(void *be, int64_t now, const struct pollfd *fds,
                                int n) {
  dlock__redis *r = be;
  if (r->loop_watch_at >= 0 && r->loop_watch_at < n)
    watch_dispatch(r, &fds[r->loop_watch_at]);
  if (r->loop_mux_at >= 0 && r->loop_mux_at < n)
    dlock__redis_mux_loop_dispatch(r->mux, now, &fds[r->loop_mux_at]);
}

static void watch_dispatch(dlock__redis *r, const struct pollfd *fd) {
  if (!fd->revents || !r->watch)
    return;
  /* Sentinel: nothing is read from a master the sentinels no longer name
   * (one stopped and resumed sends the wakes and grants its last commands
   * published, for a lock that the new master may have given since) */
  if (dlock__redis_conn_stale(r, r->watch)) {
    watch_down(r, "the master changed (Sentinel)");
    return;
  }
  /* any readiness drives both directions: over TLS a stalled write may
   * wait for POLLIN and a read for POLLOUT (conn.h); a call that still
   * cannot proceed just reports that it would block */
  int rc = 0;
  if (dlock__conn_want_write(r->watch))
    rc = watch_flush(r);
  if (!rc)
    rc = watch_read(r, on_watch_event, r);
  if (rc)
    watch_down(r, dlock_last_error());
}

int dlock__redis_loop_prepare_nodes(void *const *nodes, size_t n, int *nfds,
                                    int64_t now, struct pollfd *fds, int max,
                                    int64_t *until) {
  int used = 0;
  for (size_t i = 0; i < n; i++) {
    int k = used < max ? dlock__redis_loop_prepare(nodes[i], now, fds + used,
                                                   max - used, until)
                       : 0;
    nfds[i] = k;
    used += k;
  }
  return used;
}

void dlock__redis_loop_dispatch_nodes(void *const *nodes, size_t n,
                                      const int *nfds, int64_t now,
                                      const struct pollfd *fds, int nfd) {
  int at = 0;
  for (size_t i = 0; i < n && at < nfd; i++) {
    if (nfds[i] > 0)
      dlock__redis_loop_dispatch(nodes[i], now, fds + at, nfds[i]);
    at += nfds[i];
  }
}

/* ------------------------------------------------------- life cycle */

int dlock__redis_channels_init(dlock__redis *r) {
  if (!(r->ws = dlock__calloc(1, sizeof *r->ws)))
    return DLOCK_ENOMEM;
  pthread_mutex_init(&r->wmu, NULL);
  dlock__map_init(&r->ws->chans);
  r->ws->backoff = BACKOFF_MIN_MS;
  r->ws->linger_at = DLOCK__NEVER;
  return 0;
}

void dlock__redis_channels_free(dlock__redis *r) {
  watch_disconnect(r);
  dlock__redis_watch *ws = r->ws;
  if (!ws)
    return;
  rchan **all;
  size_t n = main_chans(ws, &all);
  for (size_t i = 0; i < n; i++)
    chan_free(ws, all[i]);
  dlock__free(all);
  dlock__map_clear(&ws->chans);
  fifo_clear(ws);
  dlock__free(ws->fifo);
  dlock__conn_close(ws->dialed);
  dlock__free(ws);
  r->ws = NULL;
  pthread_mutex_destroy(&r->wmu);
}
