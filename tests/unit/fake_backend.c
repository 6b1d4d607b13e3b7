/*
 * fake_backend.c - the in-memory session backend of fake_backend.h.
 *
 * One global list of named servers, each with its own mutex, its locks
 * (name, owner, count, the session that holds it) and its registered
 * waits. Wake-ups are made with the server's mutex held, as a backend may
 * (lock order: backend mutex, then client->mu). Nothing blocks: every
 * operation is answered from memory at once. It has no check_name: every
 * name the core accepts is a lock.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "fake_backend.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/client.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/wait.h"

typedef struct fake_lock {
  struct fake_lock *next;
  char *name, *owner;
  int64_t count;
  fake_be *be;
  int64_t sid;
} fake_lock;

typedef struct fake_wait {
  struct fake_wait *next;
  dlock__wait *w;
} fake_wait;

typedef struct fake_server {
  struct fake_server *next;
  char *name;
  int refs;
  fake_lock *locks;
  fake_wait *waits;
} fake_server;

struct fake_be {
  fake_server *srv;
  struct dlock_client *core;
  int64_t length;
  _Atomic int64_t sid;
  _Atomic int expired_calls;
  _Atomic int64_t expired_sid;
  _Atomic int fail_left;    /* attempts still to fail (fake_fail_attempts) */
  _Atomic bool fail_unsent; /* ...sending nothing */
  _Atomic int attempts;     /* attempts made (fake_attempts) */
};

/* One mutex for every fake server: tests are small. */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static fake_server *g_servers;
static _Atomic int64_t g_next_sid = 1;

static fake_server *server_get_locked(const char *name) {
  for (fake_server *s = g_servers; s; s = s->next)
    if (strcmp(s->name, name) == 0) {
      s->refs++;
      return s;
    }
  fake_server *s = calloc(1, sizeof *s);
  if (!s || !(s->name = strdup(name))) {
    free(s);
    return NULL;
  }
  s->refs = 1;
  s->next = g_servers;
  g_servers = s;
  return s;
}

static void lock_free(fake_lock *l) {
  free(l->name);
  free(l->owner);
  free(l);
}

static void wake_name_locked(fake_server *s, const char *name) {
  for (fake_wait *fw = s->waits; fw; fw = fw->next)
    if (strcmp(fw->w->spec->name, name) == 0)
      dlock__wait_wake(fw->w);
}

/* g_mu held: every lock of session sid of b goes, and their waiters are
 * woken (the service expired the session). */
static void drop_session_locked(fake_be *b, int64_t sid) {
  fake_server *s = b->srv;
  for (fake_lock **p = &s->locks; *p;) {
    fake_lock *l = *p;
    if (l->be == b && l->sid == sid) {
      *p = l->next;
      wake_name_locked(s, l->name);
      lock_free(l);
    } else {
      p = &l->next;
    }
  }
}

static fake_lock *find_locked(fake_server *s, const char *name) {
  for (fake_lock *l = s->locks; l; l = l->next)
    if (strcmp(l->name, name) == 0)
      return l;
  return NULL;
}

/* ----------------------------------------------------------------- ops */

static int fake_open(void **out, const char *url,
                     const struct dlock_options *opts,
                     struct dlock_client *core) {
  if (strncmp(url, "fake://", 7) != 0 || !url[7])
    return dlock__seterr(DLOCK_EURL, "bad URL: expected fake://NAME");
  fake_be *b = calloc(1, sizeof *b);
  if (!b)
    return DLOCK_ENOMEM;
  pthread_mutex_lock(&g_mu);
  b->srv = server_get_locked(url + 7);
  pthread_mutex_unlock(&g_mu);
  if (!b->srv) {
    free(b);
    return DLOCK_ENOMEM;
  }
  b->core = core;
  b->length = opts->session_timeout_ms > 0 ? opts->session_timeout_ms : 1000;
  int64_t sid = atomic_fetch_add(&g_next_sid, 1);
  atomic_store(&b->sid, sid);
  dlock__session_begin(core, sid, b->length);
  dlock__session_confirm(core, sid, dlock__now_ms() + b->length);
  *out = b;
  return 0;
}

static void fake_close(void *be) {
  fake_be *b = be;
  pthread_mutex_lock(&g_mu);
  drop_session_locked(b, atomic_load(&b->sid));
  fake_server *s = b->srv;
  if (--s->refs == 0) {
    for (fake_server **p = &g_servers; *p; p = &(*p)->next)
      if (*p == s) {
        *p = s->next;
        break;
      }
    free(s->name);
    free(s);
  }
  pthread_mutex_unlock(&g_mu);
  free(b);
}

static int fake_acquire(void *be, const dlock__acquire *a, int64_t *pttl,
                        int64_t *token) {
  fake_be *b = be;
  *token = 0;
  atomic_fetch_add(&b->attempts, 1);
  if (atomic_load(&b->fail_left) > 0) {
    atomic_fetch_sub(&b->fail_left, 1);
    int rc = dlock__seterr(DLOCK_EUNAVAILABLE, "fake: the server is down");
    dlock__err_set_unsent(atomic_load(&b->fail_unsent));
    return rc;
  }
  pthread_mutex_lock(&g_mu);
  fake_lock *l = find_locked(b->srv, a->name);
  int rc = 0;
  if (!l) {
    l = calloc(1, sizeof *l);
    if (!l || !(l->name = strdup(a->name)) || !(l->owner = strdup(a->owner))) {
      if (l)
        lock_free(l);
      pthread_mutex_unlock(&g_mu);
      return dlock__seterr(DLOCK_ENOMEM, "fake: out of memory");
    }
    l->be = b;
    l->sid = atomic_load(&b->sid);
    l->count = 1;
    l->next = b->srv->locks;
    b->srv->locks = l;
    rc = 1;
  } else if (strcmp(l->owner, a->owner) == 0) {
    l->count++;
    rc = 1;
  } else {
    *pttl = -1; /* no bound: a release wakes the waiters */
  }
  pthread_mutex_unlock(&g_mu);
  return rc;
}

static int fake_leave(void *be, const dlock__acquire *a, uint64_t seq,
                      int64_t *token) {
  (void)be;
  (void)a;
  (void)seq;
  *token = 0;
  return 0; /* no queue: nothing was ever handed over */
}

static int fake_release(void *be, const dlock__release *rel) {
  const char *name = rel->name, *owner = rel->owner;
  fake_be *b = be;
  pthread_mutex_lock(&g_mu);
  int rc = DLOCK__REL_NOTOWNER;
  for (fake_lock **p = &b->srv->locks; *p; p = &(*p)->next) {
    fake_lock *l = *p;
    if (strcmp(l->name, name) != 0 || strcmp(l->owner, owner) != 0)
      continue;
    if (--l->count > 0) {
      rc = DLOCK__REL_DOWN;
    } else {
      *p = l->next;
      wake_name_locked(b->srv, name);
      lock_free(l);
      rc = DLOCK__REL_FREED;
    }
    break;
  }
  pthread_mutex_unlock(&g_mu);
  return rc;
}

static int fake_wait_begin(void *be, dlock__wait *w) {
  fake_be *b = be;
  fake_wait *fw = calloc(1, sizeof *fw);
  if (!fw)
    return dlock__seterr(DLOCK_ENOMEM, "fake: out of memory");
  fw->w = w;
  w->reg = fw;
  pthread_mutex_lock(&g_mu);
  fw->next = b->srv->waits;
  b->srv->waits = fw;
  pthread_mutex_unlock(&g_mu);
  return 0;
}

static void fake_wait_end(void *be, dlock__wait *w) {
  fake_be *b = be;
  pthread_mutex_lock(&g_mu);
  for (fake_wait **p = &b->srv->waits; *p; p = &(*p)->next)
    if (*p == w->reg) {
      *p = (*p)->next;
      break;
    }
  pthread_mutex_unlock(&g_mu);
  free(w->reg);
  w->reg = NULL;
}

static int fake_session_length(void *be, int64_t *ms) {
  *ms = ((fake_be *)be)->length;
  return 0;
}

static void fake_session_expired(void *be, int64_t sid) {
  fake_be *b = be;
  atomic_store(&b->expired_sid, sid);
  atomic_fetch_add(&b->expired_calls, 1);
  /* the service ends it too, a little later in real life: the fake ends
   * it at once, so another client can take its locks */
  pthread_mutex_lock(&g_mu);
  drop_session_locked(b, sid);
  pthread_mutex_unlock(&g_mu);
}

static const char *const fake_schemes[] = {"fake", NULL};

const dlock__backend_ops fake_backend_ops = {
    .name = "fake",
    .schemes = fake_schemes,
    .lock_kinds = 1u << DLOCK_REENTRANT,
    .open = fake_open,
    .close = fake_close,
    .lock_acquire = fake_acquire,
    .lock_leave = fake_leave,
    .lock_release = fake_release,
    .session_length = fake_session_length,
    .session_expired = fake_session_expired,
    .wait_begin = fake_wait_begin,
    .wait_end = fake_wait_end,
};

/* ------------------------------------------------------- test controls */

dlock_client_t *fake_client(const char *name, int64_t session_ms,
                            dlock_lost_fn lost, void *ud) {
  dlock_options_t *o = NULL;
  if (dlock_options_new(&o) != 0)
    return NULL;
  dlock_options_set_session_timeout(o, session_ms);
  if (lost)
    dlock_options_set_lost_callback(o, lost, ud);
  char url[128];
  snprintf(url, sizeof url, "fake://%s", name);
  dlock_client_t *c = NULL;
  int rc = dlock__client_open(&c, &fake_backend_ops, url, o);
  dlock_options_free(o);
  return rc == 0 ? c : NULL;
}

fake_be *fake_of(dlock_client_t *c) { return c->be; }

void fake_confirm(fake_be *b, int64_t until) {
  dlock__session_confirm(b->core, atomic_load(&b->sid), until);
}

void fake_confirm_sid(fake_be *b, int64_t sid, int64_t until) {
  dlock__session_confirm(b->core, sid, until);
}

void fake_link(fake_be *b, bool linked) {
  dlock__session_linked(b->core, atomic_load(&b->sid), linked, DLOCK__NEVER);
}

void fake_drop(fake_be *b, int64_t grace) {
  dlock__session_linked(b->core, atomic_load(&b->sid), false, grace);
}

int64_t fake_sid(fake_be *b) { return atomic_load(&b->sid); }

int64_t fake_new_session(fake_be *b) {
  int64_t old = atomic_load(&b->sid), sid = atomic_fetch_add(&g_next_sid, 1);
  pthread_mutex_lock(&g_mu);
  drop_session_locked(b, old);
  atomic_store(&b->sid, sid);
  pthread_mutex_unlock(&g_mu);
  dlock__session_begin(b->core, sid, b->length);
  return old;
}

void fake_service_ends_session(fake_be *b) {
  pthread_mutex_lock(&g_mu);
  drop_session_locked(b, atomic_load(&b->sid));
  pthread_mutex_unlock(&g_mu);
  dlock__holds_session_lost(b->core, DLOCK_LOST_SESSION);
}

int fake_expired_calls(fake_be *b, int64_t *last_sid) {
  if (last_sid)
    *last_sid = atomic_load(&b->expired_sid);
  return atomic_load(&b->expired_calls);
}

void fake_fail_attempts(fake_be *b, int n, bool unsent) {
  atomic_store(&b->fail_unsent, unsent);
  atomic_store(&b->fail_left, n);
}

int fake_attempts(fake_be *b) { return atomic_load(&b->attempts); }
