/*
 * waiters.c - wait registry and channel subscriptions (see waiters.h).
 *
 * Invariants (under client->mu):
 *  - a channel with waiters is never freed; only the background thread
 *    frees channels, so it may use channel names after dropping mu;
 *  - w->woken is set by a wake and cleared by the waiter that consumes it;
 *  - a channel in SUBBED state has had a confirmed SUBSCRIBE since the last
 *    pub/sub (re)connect.
 */
#include "core/waiters.h"

#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"

/* How long an idle channel stays subscribed, so that a contended lock is not
 * re-subscribed for every wait. */
#define CHAN_LINGER_MS 5000

static void wake(dlock__waiter *w) {
  w->woken = true;
  pthread_cond_signal(&w->cond);
}

static void wake_all(dlock__chan *ch) {
  for (dlock__waiter *w = ch->head; w; w = w->next)
    wake(w);
}

/* Wakes the oldest waiter not already woken. */
static void wake_one(dlock__chan *ch) {
  for (dlock__waiter *w = ch->head; w; w = w->next) {
    if (!w->woken) {
      wake(w);
      return;
    }
  }
}

static void chan_free(struct dlock_client *c, dlock__chan *ch) {
  dlock__map_del(&c->chans, ch->name, ch->len);
  dlock__free(ch->name);
  dlock__free(ch);
}

int dlock__waiter_begin(struct dlock_client *c, dlock__waiter *w,
                        const char *channel) {
  memset(w, 0, sizeof *w);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&w->cond, &attr);
  pthread_condattr_destroy(&attr);
  size_t len = strlen(channel);
  pthread_mutex_lock(&c->mu);
  dlock__chan *ch = dlock__map_get(&c->chans, channel, len);
  if (!ch) {
    ch = dlock__calloc(1, sizeof *ch);
    if (!ch || !(ch->name = dlock__strndup(channel, len)) ||
        dlock__map_put(&c->chans, channel, len, ch)) {
      if (ch)
        dlock__free(ch->name);
      dlock__free(ch);
      pthread_mutex_unlock(&c->mu);
      pthread_cond_destroy(&w->cond);
      return DLOCK_ENOMEM;
    }
    ch->len = len;
    ch->state = DLOCK__CH_UNSUB;
  }
  w->chan = ch;
  w->prev = ch->tail;
  if (ch->tail)
    ch->tail->next = w;
  else
    ch->head = w;
  ch->tail = w;
  ch->nwaiters++;
  bool poke = ch->state != DLOCK__CH_SUBBED;
  pthread_mutex_unlock(&c->mu);
  if (poke)
    dlock__client_poke(c);
  return 0;
}

bool dlock__waiter_await_subscription(struct dlock_client *c,
                                      dlock__waiter *w, int64_t deadline) {
  struct timespec ts;
  dlock__deadline_timespec(deadline, &ts);
  pthread_mutex_lock(&c->mu);
  while (w->chan->state != DLOCK__CH_SUBBED && !c->stopping &&
         dlock__now_ms() < deadline) {
    if (deadline == DLOCK__NEVER)
      pthread_cond_wait(&w->cond, &c->mu);
    else
      pthread_cond_timedwait(&w->cond, &c->mu, &ts);
  }
  bool ok = w->chan->state == DLOCK__CH_SUBBED;
  /* the retry that follows sees everything a pending wake announced */
  w->woken = false;
  pthread_mutex_unlock(&c->mu);
  return ok;
}

bool dlock__waiter_sleep(struct dlock_client *c, dlock__waiter *w,
                         int64_t until) {
  struct timespec ts;
  dlock__deadline_timespec(until, &ts);
  pthread_mutex_lock(&c->mu);
  while (!w->woken && !c->stopping && dlock__now_ms() < until) {
    if (until == DLOCK__NEVER)
      pthread_cond_wait(&w->cond, &c->mu);
    else
      pthread_cond_timedwait(&w->cond, &c->mu, &ts);
  }
  bool woken = w->woken;
  w->woken = false;
  pthread_mutex_unlock(&c->mu);
  return woken;
}

void dlock__waiter_end(struct dlock_client *c, dlock__waiter *w) {
  pthread_mutex_lock(&c->mu);
  dlock__chan *ch = w->chan;
  if (w->prev)
    w->prev->next = w->next;
  else
    ch->head = w->next;
  if (w->next)
    w->next->prev = w->prev;
  else
    ch->tail = w->prev;
  ch->nwaiters--;
  if (w->woken)
    wake_one(ch); /* pass an unconsumed wake on */
  if (ch->nwaiters == 0)
    ch->idle_since = dlock__now_ms();
  pthread_mutex_unlock(&c->mu);
  pthread_cond_destroy(&w->cond);
}

void dlock__chans_on_event_locked(struct dlock_client *c,
                                  dlock__watch_event ev, const char *name,
                                  size_t len, const char *payload,
                                  size_t plen) {
  dlock__chan *ch = dlock__map_get(&c->chans, name, len);
  if (!ch)
    return;
  switch (ev) {
  case DLOCK__W_MESSAGE:
    if (plen == 1 && payload[0] == '1')
      wake_all(ch);
    else
      wake_one(ch);
    break;
  case DLOCK__W_SUBSCRIBED:
    if (ch->state == DLOCK__CH_SUBBING) {
      ch->state = DLOCK__CH_SUBBED;
      /* waiters registered before a reconnect retry now; new ones are
       * waiting for this state and retry anyway */
      wake_all(ch);
    }
    break;
  case DLOCK__W_UNSUBSCRIBED:
    if (ch->state == DLOCK__CH_UNSUBBING) {
      ch->state = DLOCK__CH_UNSUB;
      if (ch->nwaiters == 0)
        chan_free(c, ch);
    }
    break;
  }
}

void dlock__chans_on_disconnect_locked(struct dlock_client *c) {
  size_t cur;
  dlock__map_entry *e = dlock__map_first(&c->chans, &cur);
  while (e) {
    dlock__chan *ch = e->value;
    e = dlock__map_next(&c->chans, e, &cur);
    ch->state = DLOCK__CH_UNSUB;
    if (ch->nwaiters == 0)
      chan_free(c, ch);
    else
      wake_all(ch);
  }
}

bool dlock__chans_wanted_locked(struct dlock_client *c) {
  size_t cur;
  for (dlock__map_entry *e = dlock__map_first(&c->chans, &cur); e;
       e = dlock__map_next(&c->chans, e, &cur)) {
    dlock__chan *ch = e->value;
    if (ch->nwaiters > 0 || ch->state != DLOCK__CH_UNSUB)
      return true;
  }
  return false;
}

static int push(const char ***arr, size_t **lens, size_t *n, size_t *cap,
                dlock__chan *ch) {
  if (*n == *cap) {
    size_t nc = *cap ? *cap * 2 : 16;
    const char **a = dlock__reallocarray((void *)*arr, nc, sizeof **arr);
    if (!a)
      return -1;
    *arr = a;
    size_t *l = dlock__reallocarray(*lens, nc, sizeof **lens);
    if (!l)
      return -1;
    *lens = l;
    *cap = nc;
  }
  (*arr)[*n] = ch->name;
  (*lens)[*n] = ch->len;
  (*n)++;
  return 0;
}

int64_t dlock__chans_collect_locked(struct dlock_client *c, int64_t now,
                                    const char ***subs, size_t **sublens,
                                    size_t *nsubs, const char ***unsubs,
                                    size_t **unsublens, size_t *nunsubs) {
  size_t capsub = 0, capunsub = 0, cur;
  int64_t next = DLOCK__NEVER;
  *subs = *unsubs = NULL;
  *sublens = *unsublens = NULL;
  *nsubs = *nunsubs = 0;
  dlock__map_entry *e = dlock__map_first(&c->chans, &cur);
  while (e) {
    dlock__chan *ch = e->value;
    e = dlock__map_next(&c->chans, e, &cur);
    if (ch->nwaiters > 0 && ch->state == DLOCK__CH_UNSUB) {
      if (push(subs, sublens, nsubs, &capsub, ch) == 0)
        ch->state = DLOCK__CH_SUBBING;
    } else if (ch->nwaiters == 0 && ch->state == DLOCK__CH_SUBBED) {
      int64_t expiry = ch->idle_since + CHAN_LINGER_MS;
      if (expiry <= now) {
        if (push(unsubs, unsublens, nunsubs, &capunsub, ch) == 0)
          ch->state = DLOCK__CH_UNSUBBING;
      } else if (expiry < next) {
        next = expiry;
      }
    } else if (ch->nwaiters == 0 && ch->state == DLOCK__CH_UNSUB) {
      chan_free(c, ch);
    }
  }
  return next;
}

void dlock__chans_free_all_locked(struct dlock_client *c) {
  size_t cur;
  dlock__map_entry *e = dlock__map_first(&c->chans, &cur);
  while (e) {
    dlock__chan *ch = e->value;
    e = dlock__map_next(&c->chans, e, &cur);
    chan_free(c, ch);
  }
  dlock__map_clear(&c->chans);
}
