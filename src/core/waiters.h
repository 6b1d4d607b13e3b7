/*
 * waiters.h - threads waiting for a lock, and the channels that wake them.
 *
 * A waiter registers on its lock's channel BEFORE retrying the acquire that
 * failed, so a release between the failed attempt and the subscription can't
 * be missed. The background thread subscribes channels that have waiters
 * (and keeps an idle channel for a linger period so that a busy lock is not
 * re-subscribed for every wait), delivers messages, and on a pub/sub
 * reconnect wakes every waiter, since messages may have been lost.
 *
 * Wake rules (Redisson's): message "1" wakes every waiter of the channel in
 * this client; any other message wakes, by the waiter's mode, one lock
 * waiter per lock, the oldest not already woken (Redisson's layout gives "x"
 * and "{x}" the same channel, so one channel may serve two locks), every
 * latch waiter, or as many semaphore waiters as the message counts. A waiter that leaves with an unconsumed
 * wake passes it on to a waiter of the same lock.
 *
 * Hand-off: a channel may have a companion grant channel (one per lock and
 * client) on which a release announces that it made a queued waiter the
 * owner, with payload "<tid>:<seq>". That waiter alone is woken, marked
 * granted, and returns without another round trip. Both names are
 * subscribed and unsubscribed together; the channel counts as subscribed
 * when both are confirmed.
 *
 * All functions take client->mu themselves unless named *_locked.
 */
#ifndef DLOCK_CORE_WAITERS_H
#define DLOCK_CORE_WAITERS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/client.h"

typedef enum dlock__chan_state {
  DLOCK__CH_UNSUB,    /* not subscribed */
  DLOCK__CH_SUBBING,  /* SUBSCRIBE sent */
  DLOCK__CH_SUBBED,   /* confirmed */
  DLOCK__CH_UNSUBBING /* UNSUBSCRIBE sent */
} dlock__chan_state;

typedef struct dlock__waiter dlock__waiter;

/* How a message on its channel (other than "1", which wakes everyone)
 * wakes a waiter. */
typedef enum dlock__wake_mode {
  /* a lock: one waiter per lock and client (Redisson's "0") */
  DLOCK__WAKE_LOCK = 0,
  /* every message wakes every such waiter (latches) */
  DLOCK__WAKE_ALL = 1,
  /* the payload is the count of permits available: wakes, oldest first,
   * the waiters whose wants fit in it (semaphores) */
  DLOCK__WAKE_COUNT = 2
} dlock__wake_mode;

typedef struct dlock__chan {
  char *name;
  size_t len;
  char *grant; /* companion grant channel, or NULL */
  size_t glen;
  dlock__chan_state state;
  int pending;  /* confirmations still expected in SUBBING / UNSUBBING */
  int nwaiters; /* registered waiters */
  int nwanting; /* of them, those that need the subscription */
  dlock__waiter *head, *tail; /* FIFO */
  int64_t idle_since;         /* when the last wanting waiter left */
  int err;                    /* subscription refused: code, until unused */
  char *errmsg;
  bool no_handoff; /* the grant channel was refused: no queuing */
} dlock__chan;

struct dlock__waiter {
  dlock__waiter *prev, *next;
  dlock__chan *chan;
  const char *lock;  /* the lock's name (wake-ups are per lock) */
  const char *grant; /* this lock's grant channel, or NULL */
  pthread_cond_t cond;
  uint64_t tid, seq; /* match a grant's "<tid>:<seq>" */
  bool woken;
  bool wants;         /* counted in chan->nwanting */
  dlock__wake_mode mode;
  int64_t need;       /* DLOCK__WAKE_COUNT: permits this waiter asks for */
  bool granted;       /* a release handed this waiter the lock */
  int64_t grant_token; /* the fencing token its grant carried (0: none) */
  int64_t granted_at; /* when its grant message was read (monotonic ms) */
};

/* Caller side. grant may be NULL (no hand-off); need is the permits a
 * DLOCK__WAKE_COUNT waiter asks for (ignored by the other modes).
 * Registering does not subscribe anything: an acquire that succeeds at once
 * costs no SUBSCRIBE. */
int dlock__waiter_begin(struct dlock_client *c, dlock__waiter *w,
                        const char *lock, const char *channel,
                        const char *grant, uint64_t tid, uint64_t seq,
                        dlock__wake_mode mode, int64_t need);
/* Asks for the channel's subscription and keeps it while this waiter is
 * registered. With only_if_subscribed, does so only when the channel is
 * already subscribed (atomically with that check). Returns whether it is
 * subscribed now. */
bool dlock__waiter_want(struct dlock_client *c, dlock__waiter *w,
                        bool only_if_subscribed);
/* True when the channel is subscribed (checked without waiting). */
bool dlock__waiter_subscribed(struct dlock_client *c, dlock__waiter *w);
/* 0, or the error (with detail set) if the server refused the channel. */
int dlock__waiter_error(struct dlock_client *c, dlock__waiter *w);
/* True when an attempt may queue for a hand-off now: subscribed, grant
 * channel included. */
bool dlock__waiter_can_queue(struct dlock_client *c, dlock__waiter *w);
/* When a release handed this waiter the lock (the monotonic ms its message
 * was read), or 0 when none did. */
int64_t dlock__waiter_granted(struct dlock_client *c, dlock__waiter *w);
/* The fencing token a grant carried (0 when none, or not granted). */
int64_t dlock__waiter_grant_token(struct dlock_client *c, dlock__waiter *w);
/* Waits until the channel is subscribed (true) or the deadline (false). */
bool dlock__waiter_await_subscription(struct dlock_client *c, dlock__waiter *w,
                                      int64_t deadline);
/* Sleeps until woken or `until`; true when woken. */
bool dlock__waiter_sleep(struct dlock_client *c, dlock__waiter *w,
                         int64_t until);
void dlock__waiter_end(struct dlock_client *c, dlock__waiter *w);

/* True when this client is subscribed to `channel` now. */
bool dlock__client_watching(struct dlock_client *c, const char *channel);

/* Background side (mu held). */
void dlock__chans_on_event_locked(struct dlock_client *c, dlock__watch_event ev,
                                  const char *ch, size_t chlen,
                                  const char *payload, size_t plen);
/* The server refused one SUBSCRIBE command for these names (main channels,
 * or grant channels when `grants`). */
void dlock__chans_refused_locked(struct dlock_client *c, int code,
                                 const char *msg, const char *const *names,
                                 size_t n, bool grants);
void dlock__chans_on_disconnect_locked(struct dlock_client *c);
bool dlock__chans_wanted_locked(struct dlock_client *c);

/* Channel names to send, in three lists: main channels to subscribe, their
 * grant channels to subscribe (a separate command, so that a refused grant
 * channel only disables hand-off), and names to unsubscribe. The arrays are
 * allocated (free with dlock__chans_lists_free); the names live until the
 * background thread frees the channel. */
typedef struct dlock__name_list {
  const char **names;
  size_t *lens;
  size_t n, cap;
} dlock__name_list;

typedef struct dlock__chan_lists {
  dlock__name_list subs, grants, unsubs;
} dlock__chan_lists;

/* Fills the lists, marking channels as sent; returns the next linger
 * deadline. */
int64_t dlock__chans_collect_locked(struct dlock_client *c, int64_t now,
                                    dlock__chan_lists *out);
void dlock__chans_lists_free(dlock__chan_lists *l);
void dlock__chans_free_all_locked(struct dlock_client *c);

#endif
