/*
 * waiters.c - wait registry and channel subscriptions (see waiters.h).
 *
 * Invariants (under client->mu):
 *  - a channel with waiters is never freed; a channel the background thread
 *    may be (un)subscribing (any state but UNSUB) is freed only by that
 *    thread, so it may use channel names after dropping mu; an unused
 *    channel in UNSUB state is freed by whoever sees it unused;
 *  - w->woken is set by a wake and cleared by the waiter that consumes it;
 *  - a channel in SUBBED state has had a confirmed SUBSCRIBE since the last
 *    pub/sub (re)connect.
 */
#include "core/waiters.h"

#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/holds.h"

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

/* Wakes the oldest waiter of `lock` not already woken. */
static void wake_first(dlock__chan *ch, const char *lock) {
  for (dlock__waiter *w = ch->head; w; w = w->next) {
    if (!w->woken && strcmp(w->lock, lock) == 0) {
      wake(w);
      return;
    }
  }
}

/* A release message of a lock: wakes one waiter of each lock on the
 * channel. */
static void wake_one_per_lock(dlock__chan *ch) {
  for (dlock__waiter *w = ch->head; w; w = w->next) {
    if (w->mode != DLOCK__WAKE_LOCK)
      continue;
    bool seen = false; /* an older waiter of this lock was considered */
    for (dlock__waiter *o = ch->head; o != w; o = o->next)
      if (o->mode == DLOCK__WAKE_LOCK && strcmp(o->lock, w->lock) == 0) {
        seen = true;
        break;
      }
    if (!seen)
      wake_first(ch, w->lock);
  }
}

/* A message on a channel, by each waiter's mode: lock waiters wake all on
 * "1" (Redisson's read-unlock) and one per lock otherwise; latch waiters
 * all wake; semaphore waiters wake, oldest first, while the permits they ask
 * for fit in the count the payload announces (all when it is not a number;
 * the losers of the race sleep again). A waiter that asks for more than is
 * left is passed over, so it cannot use up a wake-up that a smaller request
 * behind it could have used; one already woken takes nothing from the
 * count, so a burst of releases over-wakes rather than strands anyone. */
static void wake_on_message(dlock__chan *ch, const char *p, size_t n) {
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
  for (dlock__waiter *w = ch->head; w; w = w->next) {
    if (w->mode == DLOCK__WAKE_ALL || (one && w->mode == DLOCK__WAKE_LOCK))
      wake(w);
    else if (w->mode == DLOCK__WAKE_COUNT && !w->woken &&
             (!number || w->need <= count)) {
      if (number)
        count -= w->need;
      wake(w);
    }
  }
}

static void chan_free(struct dlock_client *c, dlock__chan *ch) {
  dlock__map_del(&c->chans, ch->name, ch->len);
  if (ch->grant)
    dlock__map_del(&c->chans, ch->grant, ch->glen);
  dlock__free(ch->name);
  dlock__free(ch->grant);
  dlock__free(ch->errmsg);
  dlock__free(ch);
}

static dlock__chan *chan_new(struct dlock_client *c, const char *channel,
                             const char *grant) {
  dlock__chan *ch = dlock__calloc(1, sizeof *ch);
  if (!ch)
    return NULL;
  ch->len = strlen(channel);
  ch->glen = grant ? strlen(grant) : 0;
  ch->state = DLOCK__CH_UNSUB;
  if (!(ch->name = dlock__strndup(channel, ch->len)) ||
      (grant && !(ch->grant = dlock__strndup(grant, ch->glen))) ||
      dlock__map_put(&c->chans, channel, ch->len, ch)) {
    dlock__free(ch->name);
    dlock__free(ch->grant);
    dlock__free(ch);
    return NULL;
  }
  if (grant && dlock__map_put(&c->chans, grant, ch->glen, ch)) {
    dlock__map_del(&c->chans, channel, ch->len);
    dlock__free(ch->name);
    dlock__free(ch->grant);
    dlock__free(ch);
    return NULL;
  }
  return ch;
}

/* Parses a decimal field of p[*i..n) ending at n or at ':'; false when
 * empty, too long or not digits. */
static bool grant_field(const char *p, size_t n, size_t *i, uint64_t *out) {
  size_t j = *i;
  uint64_t v = 0;
  for (; *i < n && *i - j < 19 && p[*i] >= '0' && p[*i] <= '9'; (*i)++)
    v = v * 10 + (uint64_t)(p[*i] - '0');
  *out = v;
  return *i > j && (*i == n || p[*i] == ':');
}

/* "<tid>:<seq>[:<token>]" -> the matching waiter of ch, marked granted and
 * woken (with the fencing token the release drew for it, if any). */
static void deliver_grant(struct dlock_client *c, dlock__chan *ch,
                          const char *p, size_t n) {
  uint64_t tid = 0, seq = 0, token = 0;
  size_t i = 0;
  if (!grant_field(p, n, &i, &tid) || i == n)
    return;
  i++;
  if (!grant_field(p, n, &i, &seq))
    return;
  if (i < n && (++i, !grant_field(p, n, &i, &token) || i != n))
    return;
  for (dlock__waiter *w = ch->head; w; w = w->next) {
    if (w->tid == tid && w->seq == seq) {
      w->granted = true;
      w->grant_token = (int64_t)token;
      w->granted_at = dlock__now_ms();
      wake(w);
      return;
    }
  }
  /* no such waiter: it already took the lock (its attempt or leave found
   * the grant), or it ended without learning the outcome of its wait: the
   * latter is an unresolved wait, which the background thread settles */
  dlock__unresolved_grant_locked(c, tid, seq);
}

int dlock__waiter_begin(struct dlock_client *c, dlock__waiter *w,
                        const char *lock, const char *channel,
                        const char *grant, uint64_t tid, uint64_t seq,
                        dlock__wake_mode mode, int64_t need) {
  memset(w, 0, sizeof *w);
  w->mode = mode;
  w->need = need > 0 ? need : 1;
  w->lock = lock;
  w->grant = grant;
  w->tid = tid;
  w->seq = seq;
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&w->cond, &attr);
  pthread_condattr_destroy(&attr);
  size_t len = strlen(channel);
  pthread_mutex_lock(&c->mu);
  dlock__chan *ch = dlock__map_get(&c->chans, channel, len);
  if (!ch && !(ch = chan_new(c, channel, grant))) {
    pthread_mutex_unlock(&c->mu);
    pthread_cond_destroy(&w->cond);
    return DLOCK_ENOMEM;
  }
  w->chan = ch;
  w->prev = ch->tail;
  if (ch->tail)
    ch->tail->next = w;
  else
    ch->head = w;
  ch->tail = w;
  ch->nwaiters++;
  pthread_mutex_unlock(&c->mu);
  return 0;
}

bool dlock__waiter_want(struct dlock_client *c, dlock__waiter *w,
                        bool only_if_subscribed) {
  pthread_mutex_lock(&c->mu);
  dlock__chan *ch = w->chan;
  bool sub = ch->state == DLOCK__CH_SUBBED;
  if ((sub || !only_if_subscribed) && !w->wants) {
    w->wants = true;
    ch->nwanting++;
  }
  pthread_mutex_unlock(&c->mu);
  if (!sub && !only_if_subscribed)
    dlock__client_poke(c);
  return sub;
}

bool dlock__waiter_subscribed(struct dlock_client *c, dlock__waiter *w) {
  pthread_mutex_lock(&c->mu);
  bool ok = w->chan->state == DLOCK__CH_SUBBED;
  pthread_mutex_unlock(&c->mu);
  return ok;
}

bool dlock__client_watching(struct dlock_client *c, const char *channel) {
  pthread_mutex_lock(&c->mu);
  dlock__chan *ch = dlock__map_get(&c->chans, channel, strlen(channel));
  bool on = ch && ch->state == DLOCK__CH_SUBBED;
  pthread_mutex_unlock(&c->mu);
  return on;
}

int dlock__waiter_error(struct dlock_client *c, dlock__waiter *w) {
  pthread_mutex_lock(&c->mu);
  int rc = w->chan->err;
  if (rc)
    dlock__seterr(rc, "%s", w->chan->errmsg ? w->chan->errmsg : "");
  pthread_mutex_unlock(&c->mu);
  return rc;
}

bool dlock__waiter_can_queue(struct dlock_client *c, dlock__waiter *w) {
  pthread_mutex_lock(&c->mu);
  /* the channel may have been created for another lock sharing Redisson's
   * channel: hand-off only through this lock's own grant channel */
  bool ok = w->chan->state == DLOCK__CH_SUBBED && w->chan->grant && w->grant &&
            strcmp(w->chan->grant, w->grant) == 0 && !w->chan->no_handoff;
  pthread_mutex_unlock(&c->mu);
  return ok;
}

int64_t dlock__waiter_grant_token(struct dlock_client *c, dlock__waiter *w) {
  pthread_mutex_lock(&c->mu);
  int64_t t = w->granted ? w->grant_token : 0;
  pthread_mutex_unlock(&c->mu);
  return t;
}

int64_t dlock__waiter_granted(struct dlock_client *c, dlock__waiter *w) {
  pthread_mutex_lock(&c->mu);
  int64_t g = w->granted ? w->granted_at : 0;
  pthread_mutex_unlock(&c->mu);
  return g;
}

bool dlock__waiter_await_subscription(struct dlock_client *c, dlock__waiter *w,
                                      int64_t deadline) {
  struct timespec ts;
  dlock__deadline_timespec(deadline, &ts);
  pthread_mutex_lock(&c->mu);
  while (w->chan->state != DLOCK__CH_SUBBED && !w->granted && !w->chan->err &&
         !c->stopping && dlock__now_ms() < deadline) {
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
  while (!w->woken && !w->granted && !c->stopping && dlock__now_ms() < until) {
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
  if (w->woken && !w->granted)
    wake_first(ch, w->lock); /* pass an unconsumed wake on */
  if (w->wants && --ch->nwanting == 0) {
    ch->idle_since = dlock__now_ms();
    ch->err = 0; /* the next waiter may try the subscription again */
  }
  if (ch->nwaiters == 0 && ch->nwanting == 0 && ch->state == DLOCK__CH_UNSUB)
    chan_free(c, ch);
  pthread_mutex_unlock(&c->mu);
  pthread_cond_destroy(&w->cond);
}

void dlock__chans_on_event_locked(struct dlock_client *c, dlock__watch_event ev,
                                  const char *name, size_t len,
                                  const char *payload, size_t plen) {
  dlock__chan *ch = dlock__map_get(&c->chans, name, len);
  if (!ch)
    return;
  bool is_grant =
      ch->grant && len == ch->glen && memcmp(name, ch->grant, len) == 0;
  switch (ev) {
  case DLOCK__W_MESSAGE:
    if (is_grant)
      deliver_grant(c, ch, payload, plen);
    else
      wake_on_message(ch, payload, plen);
    break;
  case DLOCK__W_SUBSCRIBED:
    if (ch->state == DLOCK__CH_SUBBING && --ch->pending <= 0) {
      ch->state = DLOCK__CH_SUBBED;
      /* waiters registered before a reconnect retry now; new ones are
       * waiting for this state and retry anyway */
      wake_all(ch);
    }
    break;
  case DLOCK__W_REFUSED:
    break;
  case DLOCK__W_UNSUBSCRIBED:
    if (ch->state == DLOCK__CH_UNSUBBING && --ch->pending <= 0) {
      ch->state = DLOCK__CH_UNSUB;
      if (ch->nwaiters == 0 && ch->nwanting == 0)
        chan_free(c, ch);
    }
    break;
  }
}

/* Channels are in the map under one or two names; these walks visit each
 * channel once, under its main name, and collect first so that freeing a
 * channel (two map entries) never disturbs the walk. */
static size_t main_chans(struct dlock_client *c, dlock__chan ***out) {
  size_t n = 0, cur;
  *out = c->chans.count ? dlock__calloc(c->chans.count, sizeof **out) : NULL;
  if (!*out)
    return 0;
  for (dlock__map_entry *e = dlock__map_first(&c->chans, &cur); e;
       e = dlock__map_next(&c->chans, e, &cur)) {
    dlock__chan *ch = e->value;
    if (e->klen == ch->len && memcmp(e->key, ch->name, ch->len) == 0)
      (*out)[n++] = ch;
  }
  return n;
}

/* The server refused one SUBSCRIBE command. For main channels the waits
 * fail with the server's message; for grant channels the channel works on
 * without hand-off (its waiters do not queue). */
void dlock__chans_refused_locked(struct dlock_client *c, int code,
                                 const char *msg, const char *const *names,
                                 size_t n, bool grants) {
  for (size_t i = 0; i < n; i++) {
    dlock__chan *ch = dlock__map_get(&c->chans, names[i], strlen(names[i]));
    if (!ch || ch->state != DLOCK__CH_SUBBING)
      continue;
    if (grants) {
      ch->no_handoff = true;
      if (--ch->pending <= 0) {
        ch->state = DLOCK__CH_SUBBED;
        wake_all(ch);
      }
      continue;
    }
    /* the grant channel's SUBSCRIBE, sent after this one, is answered on
     * its own; stop counting on either */
    ch->state = DLOCK__CH_UNSUB;
    ch->pending = 0;
    ch->err = code ? code : DLOCK_ESERVER;
    dlock__free(ch->errmsg);
    if (code == DLOCK_EAUTH)
      ch->errmsg = dlock__asprintf(
          "%s (the ACL user needs pub/sub access to %s)", msg, ch->name);
    else
      ch->errmsg = dlock__strdup(msg);
    wake_all(ch);
  }
}

void dlock__chans_on_disconnect_locked(struct dlock_client *c) {
  dlock__chan **all;
  size_t n = main_chans(c, &all);
  for (size_t i = 0; i < n; i++) {
    dlock__chan *ch = all[i];
    ch->state = DLOCK__CH_UNSUB;
    ch->pending = 0;
    if (ch->nwaiters == 0 && ch->nwanting == 0)
      chan_free(c, ch);
    else
      wake_all(ch);
  }
  dlock__free(all);
}

bool dlock__chans_wanted_locked(struct dlock_client *c) {
  size_t cur;
  for (dlock__map_entry *e = dlock__map_first(&c->chans, &cur); e;
       e = dlock__map_next(&c->chans, e, &cur)) {
    dlock__chan *ch = e->value;
    if (ch->nwanting > 0 || ch->state != DLOCK__CH_UNSUB)
      return true;
  }
  return false;
}

static int list_push(dlock__name_list *l, const char *name, size_t len) {
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

void dlock__chans_lists_free(dlock__chan_lists *l) {
  dlock__name_list *all[3] = {&l->subs, &l->grants, &l->unsubs};
  for (int i = 0; i < 3; i++) {
    dlock__free((void *)all[i]->names);
    dlock__free(all[i]->lens);
  }
  memset(l, 0, sizeof *l);
}

int64_t dlock__chans_collect_locked(struct dlock_client *c, int64_t now,
                                    dlock__chan_lists *out) {
  int64_t next = DLOCK__NEVER;
  memset(out, 0, sizeof *out);
  dlock__chan **all;
  size_t n = main_chans(c, &all);
  for (size_t i = 0; i < n; i++) {
    dlock__chan *ch = all[i];
    if (ch->nwanting > 0 && ch->state == DLOCK__CH_UNSUB && !ch->err) {
      size_t before = out->subs.n;
      if (list_push(&out->subs, ch->name, ch->len))
        continue;
      if (ch->grant && list_push(&out->grants, ch->grant, ch->glen)) {
        out->subs.n = before;
        continue;
      }
      ch->state = DLOCK__CH_SUBBING;
      ch->pending = ch->grant ? 2 : 1;
      ch->no_handoff = false;
    } else if (ch->nwanting == 0 && ch->state == DLOCK__CH_SUBBED) {
      int64_t expiry = ch->idle_since + CHAN_LINGER_MS;
      if (expiry <= now) {
        size_t before = out->unsubs.n;
        if (list_push(&out->unsubs, ch->name, ch->len) ||
            (ch->grant && list_push(&out->unsubs, ch->grant, ch->glen))) {
          out->unsubs.n = before;
          continue;
        }
        ch->state = DLOCK__CH_UNSUBBING;
        ch->pending = ch->grant ? 2 : 1;
      } else if (expiry < next) {
        next = expiry;
      }
    } else if (ch->nwaiters == 0 && ch->nwanting == 0 &&
               ch->state == DLOCK__CH_UNSUB) {
      chan_free(c, ch);
    }
  }
  dlock__free(all);
  return next;
}

void dlock__chans_free_all_locked(struct dlock_client *c) {
  dlock__chan **all;
  size_t n = main_chans(c, &all);
  for (size_t i = 0; i < n; i++)
    chan_free(c, all[i]);
  dlock__free(all);
  dlock__map_clear(&c->chans);
}
