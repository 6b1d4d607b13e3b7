/*
 * rw.c - the etcd backend's read-write lock, with the layout of etcd's own
 * recipe (3.4 contrib/recipes, 3.5+ client/v3/experimental/recipes:
 * RWMutex), so that Go programs using that recipe and dlock exclude each
 * other on the same name.
 *
 * Layout: under the prefix NAME/, each hold or wait has its own key
 * NAME/read/<unix time in ns> or NAME/write/<unix time in ns>, created on
 * the session's lease if absent (a name already taken by another client
 * gets a new time). A reader holds when no NAME/write/ key has a lower mod
 * revision than its own key; a writer when no key of NAME/ does. Otherwise
 * the waiter watches the newest such key (by mod revision) until it is
 * deleted, then checks again. The token is the key's revision. dlock
 * writes its owner string as the value (the recipe writes "").
 *
 * Threads: every thread has its own key (unlike the mutex, one lease can
 * carry many), so threads of one client need no local turn-taking;
 * reentry is counted here (etcd_rw, under e->mu). A thread that holds one
 * side and asks for the other is refused with DLOCK_EDEADLK: its new key
 * would wait for its own.
 *
 * Every attempt puts its key if absent (a key found with our lease is
 * kept, with its revision): a wait whose key went with a lost lease is
 * refused ("requested lease not found") and attempted again under a new
 * lease by locks.c, re-queued with a new key; it never takes a grant for
 * a key that is gone.
 *
 * A wait that ends without the lock deletes its key (wait_end); a try
 * that finds the lock taken deletes it at once. Release deletes the key
 * (never resent; "deleted 0" means the lease is gone: DLOCK_ELOST).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/wait.h"
#include "etcd/etcd.h"

static const char *side_name(dlock_lock_kind_t k) {
  return k == DLOCK_READ ? "read" : "write";
}

static etcd_rw *rw_find_locked(dlock__etcd *e, const char *name,
                               const char *owner, dlock_lock_kind_t kind) {
  for (etcd_rw *x = e->rws; x; x = x->next)
    if (x->kind == kind && strcmp(x->name, name) == 0 &&
        strcmp(x->owner, owner) == 0)
      return x;
  return NULL;
}

static void rw_drop_locked(dlock__etcd *e, etcd_rw *x) {
  for (etcd_rw **p = &e->rws; *p; p = &(*p)->next)
    if (*p == x) {
      *p = x->next;
      break;
    }
  dlock__free(x->name);
  dlock__free(x->key);
  dlock__free(x);
}

void dlock__etcd_rws_free(dlock__etcd *e) {
  while (e->rws)
    rw_drop_locked(e, e->rws);
}

static char *new_key(const char *name, dlock_lock_kind_t kind) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return dlock__asprintf("%s/%s/%lld", name, side_name(kind),
                         (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
}

/* Puts key on lease if absent. 1 put (or found ours), 0 taken by someone
 * else, <0 error; *rev its revision. */
static int put_new(dlock__etcd *e, const char *key, const char *owner,
                   int64_t lease, int64_t *rev) {
  char *k64 = dlock__etcd_b64(key, strlen(key));
  /* the value: the owner, and the holder info on a line after it */
  char data[256 + DLOCK_HOLDER_INFO_MAX];
  int dlen = snprintf(data, sizeof data, "%s%s%s", owner,
                      e->holder_info[0] ? "\n" : "", e->holder_info);
  char *v64 = dlock__etcd_b64(data, dlen > 0 ? (size_t)dlen : 0);
  if (!k64 || !v64) {
    dlock__free(k64);
    dlock__free(v64);
    return DLOCK_ENOMEM;
  }
  json_object *txn = json_object_new_object();
  json_object *cmp = json_object_new_object();
  dlock__etcd_set_str(cmp, "target", "MOD");
  dlock__etcd_set_str(cmp, "key", k64);
  dlock__etcd_set_i64(cmp, "mod_revision", 0);
  dlock__etcd_set_str(cmp, "result", "EQUAL");
  json_object *cmps = json_object_new_array();
  json_object_array_add(cmps, cmp);
  json_object_object_add(txn, "compare", cmps);
  json_object *put = json_object_new_object();
  dlock__etcd_set_str(put, "key", k64);
  dlock__etcd_set_str(put, "value", v64);
  dlock__etcd_set_i64(put, "lease", lease);
  json_object *op = json_object_new_object();
  json_object_object_add(op, "request_put", put);
  json_object *succ = json_object_new_array();
  json_object_array_add(succ, op);
  op = json_object_new_object();
  json_object_object_add(op, "request_range",
                         dlock__etcd_range_req(k64, NULL, NULL, NULL, 0, 0, 0));
  json_object *fail = json_object_new_array();
  json_object_array_add(fail, op);
  json_object_object_add(txn, "success", succ);
  json_object_object_add(txn, "failure", fail);
  dlock__free(k64);
  dlock__free(v64);
  json_object *rep = NULL;
  int rc = dlock__etcd_call(e, "/v3/kv/txn", txn, true, &rep);
  if (rc)
    return rc;
  json_object *ok = dlock__etcd_get(rep, "succeeded");
  if (ok && json_object_get_boolean(ok)) {
    *rev = dlock__etcd_i64(dlock__etcd_get(rep, "header"), "revision");
    rc = 1;
  } else {
    /* a resent put of ours, or another client's key of the same time */
    json_object *resps = dlock__etcd_get(rep, "responses");
    json_object *r0 = resps && json_object_array_length(resps) > 0
                          ? json_object_array_get_idx(resps, 0)
                          : NULL;
    json_object *kv =
        dlock__etcd_first_kv(dlock__etcd_get(r0, "response_range"));
    rc = kv && dlock__etcd_i64(kv, "lease") == lease ? 1 : 0;
    if (rc)
      *rev = dlock__etcd_i64(kv, "mod_revision");
  }
  json_object_put(rep);
  return rc;
}

/* The key blocking a side's key of revision rev (b64, caller frees) and
 * the read's header revision; *blocker NULL: none. */
static int find_blocker(dlock__etcd *e, const char *name,
                        dlock_lock_kind_t kind, int64_t rev, char **blocker,
                        int64_t *blocker_lease, int64_t *hrev) {
  *blocker = NULL;
  char *pfx =
      dlock__asprintf("%s/%s", name, kind == DLOCK_READ ? "write/" : "");
  char *end = pfx ? dlock__etcd_prefix_end(pfx) : NULL;
  char *p64 = pfx ? dlock__etcd_b64(pfx, strlen(pfx)) : NULL;
  char *e64 = end ? dlock__etcd_b64(end, strlen(end)) : NULL;
  dlock__free(pfx);
  dlock__free(end);
  if (!p64 || !e64) {
    dlock__free(p64);
    dlock__free(e64);
    return DLOCK_ENOMEM;
  }
  json_object *rep = NULL;
  int rc = dlock__etcd_call(
      e, "/v3/kv/range",
      dlock__etcd_range_req(p64, e64, "DESCEND", "MOD", 1, 0, rev - 1), true,
      &rep);
  dlock__free(p64);
  dlock__free(e64);
  if (rc)
    return rc;
  json_object *kv = dlock__etcd_first_kv(rep);
  *hrev = dlock__etcd_i64(dlock__etcd_get(rep, "header"), "revision");
  if (kv) {
    const char *k = json_object_get_string(dlock__etcd_get(kv, "key"));
    *blocker = k ? dlock__strdup(k) : NULL;
    *blocker_lease = dlock__etcd_i64(kv, "lease");
    if (!*blocker)
      rc = DLOCK_ENOMEM;
  }
  json_object_put(rep);
  return rc;
}

void dlock__etcd_rw_abandon(dlock__etcd *e, dlock_lock_kind_t kind,
                            const char *name, const char *owner) {
  pthread_mutex_lock(&e->mu);
  etcd_rw *x = rw_find_locked(e, name, owner, kind);
  char *key = x && !x->held ? dlock__strdup(x->key) : NULL;
  pthread_mutex_unlock(&e->mu);
  if (!key)
    return;
  char saved[512];
  snprintf(saved, sizeof saved, "%s", dlock_last_error());
  char *k64 = dlock__etcd_b64(key, strlen(key));
  if (!k64 || dlock__etcd_delete(e, k64, true, NULL) != 0)
    dlock__log(e->core, DLOCK_LOG_INFO,
               "etcd: removing the key of an abandoned %s wait on '%.200s' "
               "failed (%s); it goes with the session's lease",
               side_name(kind), name, dlock_last_error());
  dlock__free(k64);
  dlock__free(key);
  dlock__seterr(0, "%s", saved);
  pthread_mutex_lock(&e->mu);
  x = rw_find_locked(e, name, owner, kind);
  if (x && !x->held)
    rw_drop_locked(e, x);
  pthread_mutex_unlock(&e->mu);
}

int dlock__etcd_rw_acquire(dlock__etcd *e, const dlock__acquire *a,
                           int64_t *pttl, int64_t *token, int64_t *used) {
  *pttl = -1;
  int64_t lease = 0;
  int rc = dlock__etcd_session_lease(e, &lease);
  if (rc)
    return rc;
  *used = lease;
  dlock_lock_kind_t other = a->kind == DLOCK_READ ? DLOCK_WRITE : DLOCK_READ;
  pthread_mutex_lock(&e->mu);
  etcd_rw *o = rw_find_locked(e, a->name, a->owner, other);
  if (o && o->held && o->lease == lease) {
    pthread_mutex_unlock(&e->mu);
    return dlock__seterr(DLOCK_EDEADLK,
                         "lock '%.200s': this thread holds the %s side; etcd's "
                         "read-write layout cannot give it the %s side too "
                         "(its key would wait for its own)",
                         a->name, side_name(other), side_name(a->kind));
  }
  etcd_rw *x = rw_find_locked(e, a->name, a->owner, a->kind);
  if (x && x->lease != lease) { /* from a lost session */
    rw_drop_locked(e, x);
    x = NULL;
  }
  if (x && x->held) {
    x->count++;
    *token = x->rev;
    pthread_mutex_unlock(&e->mu);
    return 1;
  }
  if (!x) {
    x = dlock__calloc(1, sizeof *x);
    if (!x || !(x->name = dlock__strdup(a->name)) ||
        !(x->key = new_key(a->name, a->kind))) {
      if (x) {
        dlock__free(x->name);
        dlock__free(x);
      }
      pthread_mutex_unlock(&e->mu);
      return DLOCK_ENOMEM;
    }
    snprintf(x->owner, sizeof x->owner, "%s", a->owner);
    x->kind = a->kind;
    x->lease = lease;
    x->next = e->rws;
    e->rws = x;
  }
  int64_t rev = x->rev;
  char *key = dlock__strdup(x->key);
  int64_t ttl_ms = e->lease_ttl_ms;
  pthread_mutex_unlock(&e->mu);
  if (!key)
    return DLOCK_ENOMEM;

  /* every attempt puts the key if absent: a wait's key may have gone with
   * a lease lost since the last attempt (the put is then refused, "lease
   * not found", and the caller attempts again under a new lease); a key
   * still there is found as ours and keeps its revision */
  bool placed = false;
  for (int tries = 0; !placed && tries < 5 && rc == 0; tries++) {
    int put = put_new(e, key, a->owner, lease, &rev);
    if (put < 0) {
      rc = put;
    } else if (put == 1) {
      placed = true;
    } else { /* the name is taken: another time */
      char *k = new_key(a->name, a->kind);
      if (!k) {
        rc = DLOCK_ENOMEM;
        break;
      }
      dlock__free(key);
      key = k;
      pthread_mutex_lock(&e->mu);
      x = rw_find_locked(e, a->name, a->owner, a->kind);
      if (x) {
        char *old = x->key;
        x->key = dlock__strdup(k);
        if (x->key)
          dlock__free(old);
        else
          x->key = old;
      }
      pthread_mutex_unlock(&e->mu);
    }
  }
  if (!rc && !placed)
    rc = dlock__seterr(DLOCK_ESERVER, "lock '%.200s': no free key name",
                       a->name);
  if (!rc) {
    pthread_mutex_lock(&e->mu);
    x = rw_find_locked(e, a->name, a->owner, a->kind);
    if (x)
      x->rev = rev;
    pthread_mutex_unlock(&e->mu);
  }
  char *blocker = NULL;
  int64_t blocker_lease = 0, hrev = 0;
  if (!rc)
    rc = find_blocker(e, a->name, a->kind, rev, &blocker, &blocker_lease,
                      &hrev);
  dlock__free(key);
  if (rc) {
    if (a->try_once)
      dlock__etcd_rw_abandon(e, a->kind, a->name, a->owner);
    return rc;
  }
  if (blocker && a->try_once) {
    dlock__free(blocker);
    *pttl = dlock__etcd_lease_left(e, blocker_lease);
    dlock__etcd_rw_abandon(e, a->kind, a->name, a->owner);
    return 0;
  }
  if (blocker) {
    pthread_mutex_lock(&e->mu);
    etcd_reg *r = dlock__etcd_reg_find_locked(e, a->name, a->owner);
    if (r) {
      dlock__etcd_watch_detach_locked(r);
      dlock__free(r->watch_key_b64);
      r->watch_key_b64 = blocker;
      r->watch_from = hrev + 1;
      blocker = NULL;
    }
    pthread_mutex_unlock(&e->mu);
    dlock__free(blocker);
    dlock__etcd_session_poke(e);
    *pttl = ttl_ms > 0 ? ttl_ms : -1;
    return 0;
  }
  pthread_mutex_lock(&e->mu);
  x = rw_find_locked(e, a->name, a->owner, a->kind);
  bool still = x && x->lease == lease;
  if (still) {
    x->held = true;
    x->count = 1;
  }
  pthread_mutex_unlock(&e->mu);
  if (!still)
    return dlock__seterr(DLOCK_EUNAVAILABLE,
                         "%s: lock '%.200s': the session ended during the "
                         "acquire",
                         e->display, a->name);
  *token = rev;
  return 1;
}

int dlock__etcd_rw_release(dlock__etcd *e, dlock_lock_kind_t kind,
                           const char *name, const char *owner) {
  pthread_mutex_lock(&e->mu);
  etcd_rw *x = rw_find_locked(e, name, owner, kind);
  if (!x || !x->held) {
    pthread_mutex_unlock(&e->mu);
    return DLOCK__REL_NOTOWNER;
  }
  if (x->count > 1) {
    x->count--;
    pthread_mutex_unlock(&e->mu);
    return DLOCK__REL_DOWN;
  }
  char *k64 = dlock__etcd_b64(x->key, strlen(x->key));
  pthread_mutex_unlock(&e->mu);
  if (!k64)
    return DLOCK_ENOMEM;
  int64_t deleted = 0;
  int rc = dlock__etcd_delete(e, k64, false, &deleted);
  dlock__free(k64);
  if (rc)
    return rc;
  pthread_mutex_lock(&e->mu);
  x = rw_find_locked(e, name, owner, kind);
  if (x)
    rw_drop_locked(e, x);
  pthread_mutex_unlock(&e->mu);
  return deleted > 0 ? DLOCK__REL_FREED : DLOCK__REL_NOTOWNER;
}

/* ----------------------------------------------------------- state */

/* The read-write keys of NAME/ by revision; holders: the leading readers,
 * or the first key when it is a writer's. */
typedef struct rw_view {
  json_object *rep;
  json_object *kvs[101];
  bool is_write[101];
  size_t n, nholders;
} rw_view;

static int rw_read(dlock__etcd *e, const char *name, rw_view *v) {
  memset(v, 0, sizeof *v);
  char *pfx = dlock__asprintf("%s/", name);
  char *end = pfx ? dlock__etcd_prefix_end(pfx) : NULL;
  char *p64 = pfx ? dlock__etcd_b64(pfx, strlen(pfx)) : NULL;
  char *e64 = end ? dlock__etcd_b64(end, strlen(end)) : NULL;
  int rc = p64 && e64 ? dlock__etcd_call(e, "/v3/kv/range",
                                         dlock__etcd_range_req(p64, e64,
                                                               "ASCEND", "MOD",
                                                               0, 0, 0),
                                         true, &v->rep)
                      : DLOCK_ENOMEM;
  size_t plen = pfx ? strlen(pfx) : 0;
  dlock__free(pfx);
  dlock__free(end);
  dlock__free(p64);
  dlock__free(e64);
  if (rc)
    return rc;
  json_object *kvs = dlock__etcd_get(v->rep, "kvs");
  size_t n = kvs ? json_object_array_length(kvs) : 0;
  bool writer_seen = false;
  for (size_t i = 0; i < n && v->n < 101; i++) {
    json_object *kv = json_object_array_get_idx(kvs, i);
    const char *k64 = json_object_get_string(dlock__etcd_get(kv, "key"));
    char *key = k64 ? dlock__etcd_unb64(k64, NULL) : NULL;
    bool rd = key && strncmp(key + plen, "read/", 5) == 0;
    bool wr = key && strncmp(key + plen, "write/", 6) == 0;
    dlock__free(key);
    if (!rd && !wr)
      continue; /* not the recipe's (a mutex key on the same name) */
    if (!writer_seen && (rd || v->n == 0))
      v->nholders = v->n + 1;
    if (wr)
      writer_seen = true;
    v->is_write[v->n] = wr;
    v->kvs[v->n++] = kv;
  }
  return 0;
}

int dlock__etcd_rw_state(dlock__etcd *e, const char *name,
                         dlock_lock_state_t **out) {
  rw_view v;
  int rc = rw_read(e, name, &v);
  if (rc)
    return rc;
  dlock_lock_state_t *st = dlock__calloc(1, sizeof *st);
  if (!st ||
      !(st->holders = dlock__calloc(v.nholders ? v.nholders : 1,
                                    sizeof *st->holders)) ||
      !(st->waiters = dlock__calloc(v.n ? v.n : 1, sizeof *st->waiters)) ||
      !(st->holder_infos =
            dlock__calloc(v.nholders ? v.nholders : 1, sizeof(char *))) ||
      !(st->waiter_infos = dlock__calloc(v.n ? v.n : 1, sizeof(char *))) ||
      !(st->name = dlock__strdup(name))) {
    json_object_put(v.rep);
    dlock_lock_state_free(st);
    return DLOCK_ENOMEM;
  }
  st->kind = v.nholders == 0 ? "free" : v.is_write[0] ? "write" : "read";
  st->ttl_ms = -2;
  for (size_t i = 0; i < v.n; i++) {
    char *info = NULL;
    char *d = dlock__etcd_describe(v.kvs[i], &info);
    if (!d) {
      dlock__free(info);
      continue;
    }
    if (i < v.nholders)
      st->holder_infos[st->nholders] = info;
    else
      st->waiter_infos[st->nwaiters] = info;
    if (i < v.nholders) {
      dlock_holder_t *h = &st->holders[st->nholders++];
      h->owner = d;
      h->count = 1;
      h->side = v.is_write[i] ? "write" : "read";
      if (i == 0)
        st->ttl_ms =
            dlock__etcd_lease_left(e, dlock__etcd_i64(v.kvs[i], "lease"));
    } else {
      st->waiters[st->nwaiters++] = d;
    }
  }
  json_object_put(v.rep);
  *out = st;
  return 0;
}

int dlock__etcd_rw_query(dlock__etcd *e, dlock_lock_kind_t kind,
                         const char *name, const char *owner,
                         dlock__lock_query q, int64_t *out) {
  rw_view v;
  int rc = rw_read(e, name, &v);
  if (rc)
    return rc;
  pthread_mutex_lock(&e->mu);
  etcd_rw *x = rw_find_locked(e, name, owner, kind);
  int64_t rev = x && x->held ? x->rev : 0, count = x ? x->count : 0;
  pthread_mutex_unlock(&e->mu);
  bool mine = false;
  for (size_t i = 0; i < v.nholders && rev; i++)
    if (dlock__etcd_i64(v.kvs[i], "mod_revision") == rev)
      mine = true;
  int64_t first_lease =
      v.nholders ? dlock__etcd_i64(v.kvs[0], "lease") : 0;
  json_object_put(v.rep);
  switch (q) {
  case DLOCK__Q_LOCKED:
    *out = v.nholders > 0;
    break;
  case DLOCK__Q_HELD:
    *out = mine;
    break;
  case DLOCK__Q_COUNT:
    *out = mine ? count : 0;
    break;
  case DLOCK__Q_REMAINING:
    *out = v.nholders ? dlock__etcd_lease_left(e, first_lease) : -2;
    break;
  }
  return 0;
}

int dlock__etcd_rw_force_release(dlock__etcd *e, const char *name,
                                 bool *deleted) {
  rw_view v;
  *deleted = false;
  int rc = rw_read(e, name, &v);
  for (size_t i = 0; !rc && i < v.nholders; i++) {
    const char *k = json_object_get_string(dlock__etcd_get(v.kvs[i], "key"));
    int64_t n = 0;
    rc = k ? dlock__etcd_delete(e, k, false, &n) : DLOCK_EPROTO;
    if (n > 0)
      *deleted = true;
  }
  json_object_put(v.rep);
  return rc;
}
