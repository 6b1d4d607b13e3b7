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
 * this client; any other message wakes one, the oldest not already woken.
 * A waiter that leaves with an unconsumed wake passes it on.
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

typedef struct dlock__chan {
  char *name;
  size_t len;
  dlock__chan_state state;
  int nwaiters;
  dlock__waiter *head, *tail; /* FIFO */
  int64_t idle_since;         /* when the last waiter left */
} dlock__chan;

struct dlock__waiter {
  dlock__waiter *prev, *next;
  dlock__chan *chan;
  pthread_cond_t cond;
  bool woken;
};

/* Caller side. */
int dlock__waiter_begin(struct dlock_client *c, dlock__waiter *w,
                        const char *channel);
/* Waits until the channel is subscribed (true) or the deadline (false). */
bool dlock__waiter_await_subscription(struct dlock_client *c,
                                      dlock__waiter *w, int64_t deadline);
/* Sleeps until woken or `until`; true when woken. */
bool dlock__waiter_sleep(struct dlock_client *c, dlock__waiter *w,
                         int64_t until);
void dlock__waiter_end(struct dlock_client *c, dlock__waiter *w);

/* Background side (mu held). */
void dlock__chans_on_event_locked(struct dlock_client *c,
                                  dlock__watch_event ev, const char *ch,
                                  size_t chlen, const char *payload,
                                  size_t plen);
void dlock__chans_on_disconnect_locked(struct dlock_client *c);
bool dlock__chans_wanted_locked(struct dlock_client *c);
/* Lists channels to (un)subscribe now, marking them as sent. Arrays are
 * allocated (caller frees the arrays, not the names: they live until the
 * background thread frees the channel). Returns the next linger deadline. */
int64_t dlock__chans_collect_locked(struct dlock_client *c, int64_t now,
                                    const char ***subs, size_t **sublens,
                                    size_t *nsubs, const char ***unsubs,
                                    size_t **unsublens, size_t *nunsubs);
void dlock__chans_free_all_locked(struct dlock_client *c);

#endif
