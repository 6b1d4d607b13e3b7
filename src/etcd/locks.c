/*
 * locks.c - the etcd backend's lock: clientv3 concurrency.Mutex's layout,
 * so that dlock, `etcdctl lock` and Go's concurrency.Mutex exclude each
 * other on the same name.
 *
 * Layout (etcd 3.4 clientv3/concurrency/mutex.go): the lock named NAME is
 * the key range NAME/ ... ; a contender's key is NAME/<its lease id in
 * lower-case hex>, on its session's lease. One transaction: if the key's
 * create revision is 0 (absent) put it (dlock writes the owner string,
 * "<client-id>:<thread>", as the value, and after a newline the client's
 * holder info when it has one; Go and etcdctl leave the value empty and
 * never read it) and read the oldest key of the range (by create
 * revision), else read the key and the oldest key. The contender owns the
 * lock when the oldest key is its own. Otherwise it reads the newest key
 * created before its own (max_create_revision = own - 1) and watches it,
 * from the revision after that read, until it is deleted; then it checks
 * again (another older key may remain). The fencing token is the key's
 * create revision: etcd's revision only grows, and the owner's key is the
 * oldest of the range, so each new owner's key was created after every
 * earlier owner's key was.
 *
 * Threads of one client. One lease = one key per name, and Go's second
 * Lock on the same session is a no-op (both goroutines "hold" it). dlock
 * owns locks per thread, so the client keeps one entry per name
 * (etcd_entry, under e->mu): the thread using the key (holding or waiting
 * on it) and its reentry count. Another thread of the same client waits
 * locally, without a request, and is woken (all local waiters of the name;
 * the first to claim the entry goes on, the others find it taken again
 * without a request) when the key is deleted by a release or an abandoned
 * wait. A thread that waits locally is not queued in etcd meanwhile: the
 * order is FIFO between clients, not between the threads of one client.
 * Reentry is counted here, without a request.
 *
 * Waits: every wait registers (etcd_reg) before its first attempt. An
 * attempt that finds an older key stores the key to watch and the
 * revision in the registration; the session thread (session.c) opens the
 * stream and wakes the wait when the key is deleted. The attempt returns
 * 0 with the lease TTL as the bound (a stream to a member that hangs
 * without closing its connection cannot strand a waiter longer). A wait
 * that ends without the lock (timeout, error) deletes its key (the entry
 * is still its own while the delete runs, so another thread of the client
 * cannot adopt the key meanwhile).
 *
 * A lost lease (session.c) is found by the keep-alive or by the put of
 * an attempt ("requested lease not found"): either way the holds on it
 * are reported lost and every wait attempts again under a new lease,
 * with a new key, so at the back of the queue.
 *
 * The async calls' try and release (backend.h's lock_*_send) are the
 * same requests on the session thread, with the same halves of the
 * blocking functions: see "sent requests" below.
 *
 * Release deletes the key (never sent twice: a second "deleted 0" would
 * read as a lost lock; the core retries once and reads "not owner" on its
 * retry as done). "deleted 0" on the first try means the key was gone:
 * the lease expired or was revoked (DLOCK_ELOST from the core).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/wait.h"
#include "etcd/etcd.h"

char *dlock__etcd_key(const char *name, int64_t lease) {
  return dlock__asprintf("%s/%" PRIx64, name, (uint64_t)lease);
}

/* ------------------------------------------------------------ entries */

static etcd_entry *entry_find_locked(dlock__etcd *e, const char *name) {
  for (etcd_entry *x = e->entries; x; x = x->next)
    if (strcmp(x->name, name) == 0)
      return x;
  return NULL;
}

static etcd_entry *entry_get_locked(dlock__etcd *e, const char *name) {
  etcd_entry *x = entry_find_locked(e, name);
  if (x)
    return x;
  x = dlock__calloc(1, sizeof *x);
  if (!x || !(x->name = dlock__strdup(name))) {
    dlock__free(x);
    return NULL;
  }
  x->next = e->entries;
  e->entries = x;
  return x;
}

static void entry_clear(etcd_entry *x) {
  x->owner[0] = '\0';
  x->held = false;
  x->count = 0;
  x->rev = 0;
}

void dlock__etcd_entries_free(dlock__etcd *e) {
  while (e->entries) {
    etcd_entry *x = e->entries;
    e->entries = x->next;
    dlock__free(x->name);
    dlock__free(x);
  }
}

/* Wakes this client's other waits on `name`: its key is free here. */
static void wake_local_locked(dlock__etcd *e, const char *name,
                              const char *except_owner) {
  for (etcd_reg *r = e->regs; r; r = r->next) {
    const dlock__wait_spec *s = r->w->spec;
    if (!s->sync && strcmp(s->name, name) == 0 &&
        strcmp(s->owner, except_owner) != 0)
      dlock__wait_wake(r->w);
  }
}

etcd_reg *dlock__etcd_reg_find_locked(dlock__etcd *e, const char *name,
                                      const char *owner) {
  for (etcd_reg *r = e->regs; r; r = r->next) {
    const dlock__wait_spec *s = r->w->spec;
    if (!s->sync && strcmp(s->name, name) == 0 && strcmp(s->owner, owner) == 0)
      return r;
  }
  return NULL;
}

/* --------------------------------------------------------------- requests */

json_object *dlock__etcd_range_req(const char *key_b64, const char *end_b64,
                                   const char *order, const char *target,
                                   int64_t limit, int64_t max_create_rev,
                                   int64_t max_mod_rev) {
  json_object *r = json_object_new_object();
  dlock__etcd_set_str(r, "key", key_b64);
  if (end_b64)
    dlock__etcd_set_str(r, "range_end", end_b64);
  if (order) {
    dlock__etcd_set_str(r, "sort_order", order);
    dlock__etcd_set_str(r, "sort_target", target);
  }
  if (limit)
    dlock__etcd_set_i64(r, "limit", limit);
  if (max_create_rev)
    dlock__etcd_set_i64(r, "max_create_revision", max_create_rev);
  if (max_mod_rev)
    dlock__etcd_set_i64(r, "max_mod_revision", max_mod_rev);
  return r;
}

static json_object *range_req(const char *key_b64, const char *end_b64,
                              const char *order, int64_t limit,
                              int64_t max_create_rev) {
  return dlock__etcd_range_req(key_b64, end_b64, order, "CREATE", limit,
                               max_create_rev, 0);
}

typedef struct names {
  char *key, *key_b64;     /* this owner's key */
  char *pfx_b64, *end_b64; /* the lock's range */
} names_t;

static void names_free(names_t *n) {
  dlock__free(n->key);
  dlock__free(n->key_b64);
  dlock__free(n->pfx_b64);
  dlock__free(n->end_b64);
}

static int names_make(const char *name, int64_t lease, names_t *n) {
  memset(n, 0, sizeof *n);
  char *pfx = dlock__asprintf("%s/", name);
  char *end = pfx ? dlock__etcd_prefix_end(pfx) : NULL;
  if (pfx && end) {
    n->pfx_b64 = dlock__etcd_b64(pfx, strlen(pfx));
    n->end_b64 = dlock__etcd_b64(end, strlen(end));
  }
  if (lease) {
    n->key = dlock__etcd_key(name, lease);
    n->key_b64 = n->key ? dlock__etcd_b64(n->key, strlen(n->key)) : NULL;
  }
  dlock__free(pfx);
  dlock__free(end);
  if (!n->pfx_b64 || !n->end_b64 || (lease && !n->key_b64)) {
    names_free(n);
    return DLOCK_ENOMEM;
  }
  return 0;
}

/* The kvs array of a range response (NULL or empty: none). */
json_object *dlock__etcd_first_kv(json_object *range_resp) {
  json_object *kvs = dlock__etcd_get(range_resp, "kvs");
  if (!kvs || json_object_array_length(kvs) == 0)
    return NULL;
  return json_object_array_get_idx(kvs, 0);
}

/* The DeleteRange of one key (NULL: no memory). */
static json_object *delete_req(const char *key_b64) {
  json_object *req = json_object_new_object();
  if (req)
    dlock__etcd_set_str(req, "key", key_b64);
  return req;
}

int dlock__etcd_delete(dlock__etcd *e, const char *key_b64, bool resend,
                       int64_t *deleted) {
  json_object *req = delete_req(key_b64), *rep = NULL;
  if (!req)
    return DLOCK_ENOMEM;
  int rc = dlock__etcd_call(e, "/v3/kv/deleterange", req, resend, &rep);
  if (!rc && deleted)
    *deleted = dlock__etcd_i64(rep, "deleted");
  json_object_put(rep);
  return rc;
}

/* ms left on a lease; -1 when it has none (or it is unknown). */
static json_object *lease_left_req(int64_t lease) {
  json_object *req = json_object_new_object();
  if (req)
    dlock__etcd_set_i64(req, "ID", lease);
  return req;
}

/* A TimeToLive reply (NULL: none) in ms; -1 when none. */
static int64_t lease_left_reply(json_object *rep) {
  int64_t ttl = dlock__etcd_i64(rep, "TTL");
  return ttl > 0 ? ttl * 1000 : -1;
}

int64_t dlock__etcd_lease_left(dlock__etcd *e, int64_t lease) {
  json_object *req = lease ? lease_left_req(lease) : NULL, *rep = NULL;
  if (!req)
    return -1;
  int64_t ms = -1;
  if (dlock__etcd_call(e, "/v3/lease/timetolive", req, true, &rep) == 0)
    ms = lease_left_reply(rep);
  json_object_put(rep);
  return ms;
}

/* abandon's first half: 1 when the entry of name is owner's unfinished
 * attempt, with *b64 its key to delete (NULL: no memory); else 0, and
 * nothing is to be done. */
static int abandon_key(dlock__etcd *e, const char *name, const char *owner,
                       char **b64) {
  *b64 = NULL;
  pthread_mutex_lock(&e->mu);
  etcd_entry *x = entry_find_locked(e, name);
  bool ours = x && strcmp(x->owner, owner) == 0 && !x->held;
  int64_t lease = ours ? x->lease : 0;
  pthread_mutex_unlock(&e->mu);
  if (!ours)
    return 0;
  char *key = dlock__etcd_key(name, lease);
  *b64 = key ? dlock__etcd_b64(key, strlen(key)) : NULL;
  dlock__free(key);
  return 1;
}

/* abandon's second half, after the delete (rc, its error detail): frees
 * the entry and wakes the other local waiters. The error detail is left
 * as the delete's. */
static void abandon_end(dlock__etcd *e, const char *name, const char *owner,
                        int rc) {
  if (rc)
    dlock__log(e->core, DLOCK_LOG_INFO,
               "etcd: removing the key of an abandoned wait on '%.200s' "
               "failed (%s); it goes with the session's lease",
               name, dlock_last_error());
  pthread_mutex_lock(&e->mu);
  etcd_entry *x = entry_find_locked(e, name);
  if (x && strcmp(x->owner, owner) == 0 && !x->held) {
    entry_clear(x);
    wake_local_locked(e, name, owner);
  }
  pthread_mutex_unlock(&e->mu);
}

/* The owner's unfinished attempt ends: deletes its key (while the entry
 * is still its own), then frees the entry and wakes the other local
 * waiters. */
static void abandon(dlock__etcd *e, const char *name, const char *owner) {
  char *b64 = NULL;
  if (!abandon_key(e, name, owner, &b64))
    return;
  /* the error being returned (if any) is kept */
  char saved[512];
  snprintf(saved, sizeof saved, "%s", dlock_last_error());
  int rc = b64 ? dlock__etcd_delete(e, b64, true, NULL) : DLOCK_ENOMEM;
  dlock__free(b64);
  abandon_end(e, name, owner, rc);
  dlock__seterr(0, "%s", saved);
}

/* ---------------------------------------------------------------- acquire */

/* What entry_claim found. */
#define CLAIM_SEND 2 /* the entry is the owner's: the transaction is to go */

/* An attempt's local half under `lease`: 0, another thread of this
 * client uses the key (a try's *pttl: the lease's TTL); 1, re-entered
 * (*token); CLAIM_SEND, the entry is the owner's now (*ttl_ms: the
 * lease's TTL); or DLOCK_ENOMEM. */
static int entry_claim(dlock__etcd *e, const dlock__acquire *a, int64_t lease,
                       int64_t *pttl, int64_t *token, int64_t *ttl_ms) {
  pthread_mutex_lock(&e->mu);
  etcd_entry *x = entry_get_locked(e, a->name);
  if (!x) {
    pthread_mutex_unlock(&e->mu);
    return DLOCK_ENOMEM;
  }
  bool mine = strcmp(x->owner, a->owner) == 0;
  if (x->owner[0] && x->lease == lease && !mine) {
    /* a local release or abandon wakes a wait; a try is told the lease
     * of the holder, which is ours */
    if (a->try_once)
      *pttl = e->lease_ttl_ms;
    pthread_mutex_unlock(&e->mu);
    return 0;
  }
  if (mine && x->held && x->lease == lease) {
    x->count++;
    *token = x->rev;
    pthread_mutex_unlock(&e->mu);
    return 1;
  }
  if (!mine || x->lease != lease) {
    entry_clear(x);
    snprintf(x->owner, sizeof x->owner, "%s", a->owner);
    x->lease = lease;
  }
  *ttl_ms = e->lease_ttl_ms;
  pthread_mutex_unlock(&e->mu);
  return CLAIM_SEND;
}

/* The transaction of concurrency.Mutex.tryAcquire for owner's key n->key
 * under `lease` (NULL: no memory). */
static json_object *try_txn(dlock__etcd *e, const dlock__acquire *a,
                            int64_t lease, const names_t *n) {
  json_object *txn = json_object_new_object();
  json_object *cmp = json_object_new_object();
  dlock__etcd_set_str(cmp, "target", "CREATE");
  dlock__etcd_set_str(cmp, "key", n->key_b64);
  dlock__etcd_set_i64(cmp, "create_revision", 0);
  dlock__etcd_set_str(cmp, "result", "EQUAL");
  json_object *cmps = json_object_new_array();
  json_object_array_add(cmps, cmp);
  json_object_object_add(txn, "compare", cmps);
  /* the value: the owner, and the holder info on a line after it */
  char data[256 + DLOCK_HOLDER_INFO_MAX];
  int dlen = snprintf(data, sizeof data, "%s%s%s", a->owner,
                      e->holder_info[0] ? "\n" : "", e->holder_info);
  char *val = dlock__etcd_b64(data, dlen > 0 ? (size_t)dlen : 0);
  json_object *put = json_object_new_object();
  dlock__etcd_set_str(put, "key", n->key_b64);
  dlock__etcd_set_str(put, "value", val ? val : "");
  dlock__etcd_set_i64(put, "lease", lease);
  dlock__free(val);
  json_object *succ = json_object_new_array(), *fail = json_object_new_array();
  json_object *op = json_object_new_object();
  json_object_object_add(op, "request_put", put);
  json_object_array_add(succ, op);
  op = json_object_new_object();
  json_object_object_add(op, "request_range",
                         range_req(n->pfx_b64, n->end_b64, "ASCEND", 1, 0));
  json_object_array_add(succ, op);
  op = json_object_new_object();
  json_object_object_add(op, "request_range",
                         range_req(n->key_b64, NULL, NULL, 0, 0));
  json_object_array_add(fail, op);
  op = json_object_new_object();
  json_object_object_add(op, "request_range",
                         range_req(n->pfx_b64, n->end_b64, "ASCEND", 1, 0));
  json_object_array_add(fail, op);
  json_object_object_add(txn, "success", succ);
  json_object_object_add(txn, "failure", fail);
  return txn;
}

/* The transaction's reply: *my_rev our key's create revision, *got
 * whether it is the oldest, *owner_lease the oldest key's lease; or
 * DLOCK_EPROTO. */
static int txn_reply(dlock__etcd *e, const char *name, json_object *rep,
                     int64_t *my_rev, bool *got, int64_t *owner_lease) {
  json_object *succeeded = dlock__etcd_get(rep, "succeeded");
  json_object *resps = dlock__etcd_get(rep, "responses");
  json_object *r0 = resps && json_object_array_length(resps) == 2
                        ? json_object_array_get_idx(resps, 0)
                        : NULL;
  json_object *r1 = r0 ? json_object_array_get_idx(resps, 1) : NULL;
  *my_rev = 0;
  if (succeeded && json_object_get_boolean(succeeded))
    *my_rev = dlock__etcd_i64(dlock__etcd_get(rep, "header"), "revision");
  else if (r0)
    *my_rev = dlock__etcd_i64(
        dlock__etcd_first_kv(dlock__etcd_get(r0, "response_range")),
        "create_revision");
  json_object *okv =
      r1 ? dlock__etcd_first_kv(dlock__etcd_get(r1, "response_range")) : NULL;
  int64_t owner_rev = dlock__etcd_i64(okv, "create_revision");
  *owner_lease = dlock__etcd_i64(okv, "lease");
  *got = owner_rev == *my_rev;
  if (*my_rev <= 0 || owner_rev <= 0)
    return dlock__seterr(DLOCK_EPROTO,
                         "%s: lock '%.200s': unexpected transaction reply",
                         e->display, name);
  return 0;
}

/* The grant of our key (create revision my_rev) under `lease` is
 * recorded: 1 and *token; or an error: the lease was lost meanwhile
 * (*regrant: attempt again under a new one), or the session ended. */
static int grant_record(dlock__etcd *e, const dlock__acquire *a, int64_t lease,
                        int64_t my_rev, int64_t *token, bool *regrant) {
  pthread_mutex_lock(&e->mu);
  etcd_entry *x = entry_find_locked(e, a->name);
  bool still = x && strcmp(x->owner, a->owner) == 0 && x->lease == lease;
  /* a lease lost meanwhile was reported before this hold was recorded:
   * the grant is not used, and the caller attempts again */
  bool live = e->lease_live && e->lease == lease;
  if (still && live) {
    x->held = true;
    x->count = 1;
    x->rev = my_rev;
  }
  pthread_mutex_unlock(&e->mu);
  if (still && !live) {
    *regrant = true;
    return dlock__seterr(DLOCK_EUNAVAILABLE,
                         "%s: lock '%.200s': the session's lease was lost "
                         "during the acquire",
                         e->display, a->name);
  }
  if (!still)
    return dlock__seterr(DLOCK_EUNAVAILABLE,
                         "%s: lock '%.200s': the session ended during the "
                         "acquire",
                         e->display, a->name);
  *token = my_rev;
  return 1;
}

/* One attempt under the session's lease (*used: its id); *regrant: the
 * lease was lost under it, attempt again. */
static int acquire_once(dlock__etcd *e, const dlock__acquire *a, int64_t *pttl,
                        int64_t *token, int64_t *used, bool *regrant) {
  *pttl = -1;
  int64_t lease = 0;
  int rc = dlock__etcd_session_lease(e, &lease);
  if (rc)
    return rc;
  *used = lease;

  /* the name's local entry: reentry, or another thread of ours on it */
  int64_t ttl_ms = 0;
  rc = entry_claim(e, a, lease, pttl, token, &ttl_ms);
  if (rc != CLAIM_SEND)
    return rc;

  names_t n;
  if ((rc = names_make(a->name, lease, &n)) != 0) {
    abandon(e, a->name, a->owner);
    return rc;
  }
  json_object *rep = NULL;
  rc = dlock__etcd_call(e, "/v3/kv/txn", try_txn(e, a, lease, &n), true, &rep);
  int64_t my_rev = 0, owner_lease = 0;
  bool got = false;
  if (!rc)
    rc = txn_reply(e, a->name, rep, &my_rev, &got, &owner_lease);
  json_object_put(rep);
  rep = NULL;
  if (!rc && !got && a->try_once) {
    /* concurrency.Mutex.TryLock (3.5): held by another, remove our key */
    int64_t left = dlock__etcd_lease_left(e, owner_lease);
    abandon(e, a->name, a->owner);
    *pttl = left;
    names_free(&n);
    return 0;
  }
  if (!rc && !got) {
    /* waitDeletes: the newest key created before ours */
    json_object *get =
        range_req(n.pfx_b64, n.end_b64, "DESCEND", 1, my_rev - 1);
    rc = dlock__etcd_call(e, "/v3/kv/range", get, true, &rep);
    json_object *pred = rc ? NULL : dlock__etcd_first_kv(rep);
    if (!rc && !pred) {
      got = true; /* every older key is gone */
    } else if (!rc) {
      const char *pkey = json_object_get_string(dlock__etcd_get(pred, "key"));
      int64_t hrev =
          dlock__etcd_i64(dlock__etcd_get(rep, "header"), "revision");
      pthread_mutex_lock(&e->mu);
      etcd_reg *r = dlock__etcd_reg_find_locked(e, a->name, a->owner);
      if (r && pkey) {
        dlock__etcd_watch_detach_locked(r); /* an earlier predecessor's */
        dlock__free(r->watch_key_b64);
        r->watch_key_b64 = dlock__strdup(pkey);
        r->watch_from = hrev + 1;
      }
      pthread_mutex_unlock(&e->mu);
      dlock__etcd_session_poke(e);
      *pttl = ttl_ms > 0 ? ttl_ms : -1;
    }
    json_object_put(rep);
  }
  names_free(&n);
  if (rc) {
    if (a->try_once)
      abandon(e, a->name, a->owner);
    /* a wait's key is removed by wait_end */
    return rc;
  }
  if (!got)
    return 0;
  rc = grant_record(e, a, lease, my_rev, token, regrant);
  if (*regrant)
    *used = 0;
  return rc;
}

int dlock__etcd_lock_acquire(void *be, const dlock__acquire *a, int64_t *pttl,
                             int64_t *token) {
  dlock__etcd *e = be;
  /* a lease that etcd no longer has (revoked, expired before a keep-alive
   * said so) refuses the put: that is the session's loss (holds reported
   * lost), and the attempt is made again under a new lease, so that a
   * wait goes on (its key went with the old lease: it queues at the back).
   * Bounded: a lease refused as soon as it is granted is an error. */
  for (int tries = 0;; tries++) {
    int64_t used = 0;
    bool regrant = false;
    int rc = a->kind == DLOCK_READ || a->kind == DLOCK_WRITE
                 ? dlock__etcd_rw_acquire(e, a, pttl, token, &used)
                 : acquire_once(e, a, pttl, token, &used, &regrant);
    if (rc >= 0 || tries == 2)
      return rc;
    if (regrant)
      continue;
    if (!used || !dlock__etcd_lease_refused(rc))
      return rc;
    dlock__log(e->core, DLOCK_LOG_INFO,
               "etcd: lock '%.200s': the session's lease %llx is gone (%s); "
               "attempting again under a new lease",
               a->name, (unsigned long long)used, dlock_last_error());
    dlock__etcd_session_lost(e, used, "etcd refused a request on it");
  }
}

int dlock__etcd_lock_leave(void *be, const dlock__acquire *a, uint64_t seq,
                           int64_t *token) {
  /* nothing is queued for a hand-off: a wait that gives up removes its key
   * in wait_end */
  (void)be;
  (void)a;
  (void)seq;
  (void)token;
  return 0;
}

/* ---------------------------------------------------------------- release */

#define RELEASE_SEND 3 /* release_claim: the key is to be deleted */

/* A release's local half: DLOCK__REL_NOTOWNER or DLOCK__REL_DOWN
 * answered here, or RELEASE_SEND with *b64 the key to delete; or
 * DLOCK_ENOMEM. */
static int release_claim(dlock__etcd *e, const dlock__release *rel,
                         char **b64) {
  /* no lease per hold (the session's lease keeps it) and no request id (a
   * retry finds the entry still held and deletes again) */
  pthread_mutex_lock(&e->mu);
  etcd_entry *x = entry_find_locked(e, rel->name);
  if (!x || strcmp(x->owner, rel->owner) != 0 || !x->held) {
    pthread_mutex_unlock(&e->mu);
    return DLOCK__REL_NOTOWNER;
  }
  if (x->count > 1) {
    x->count--;
    pthread_mutex_unlock(&e->mu);
    return DLOCK__REL_DOWN;
  }
  int64_t lease = x->lease;
  pthread_mutex_unlock(&e->mu);
  char *key = dlock__etcd_key(rel->name, lease);
  *b64 = key ? dlock__etcd_b64(key, strlen(key)) : NULL;
  dlock__free(key);
  return *b64 ? RELEASE_SEND : DLOCK_ENOMEM;
}

/* After the delete of the release's key (`deleted` keys): the entry is
 * freed and the other local waiters woken. */
static int release_end(dlock__etcd *e, const dlock__release *rel,
                       int64_t deleted) {
  pthread_mutex_lock(&e->mu);
  etcd_entry *x = entry_find_locked(e, rel->name);
  if (x && strcmp(x->owner, rel->owner) == 0) {
    entry_clear(x);
    wake_local_locked(e, rel->name, rel->owner);
  }
  pthread_mutex_unlock(&e->mu);
  return deleted > 0 ? DLOCK__REL_FREED : DLOCK__REL_NOTOWNER;
}

int dlock__etcd_lock_release(void *be, const dlock__release *rel) {
  dlock__etcd *e = be;
  if (rel->kind == DLOCK_READ || rel->kind == DLOCK_WRITE)
    return dlock__etcd_rw_release(e, rel->kind, rel->name, rel->owner);
  char *b64 = NULL;
  int rc = release_claim(e, rel, &b64);
  if (rc != RELEASE_SEND)
    return rc;
  int64_t deleted = 0;
  rc = dlock__etcd_delete(e, b64, false, &deleted);
  dlock__free(b64);
  if (rc)
    return rc; /* still held here: the core's retry deletes again */
  return release_end(e, rel, deleted);
}

/* The oldest key of the lock (its owner), or NULL; *rep keeps it. */
static int owner_kv(dlock__etcd *e, const char *name, json_object **rep,
                    json_object **kv, int64_t limit) {
  names_t n;
  int rc = names_make(name, 0, &n);
  if (rc)
    return rc;
  rc = dlock__etcd_call(e, "/v3/kv/range",
                        range_req(n.pfx_b64, n.end_b64, "ASCEND", limit, 0),
                        true, rep);
  names_free(&n);
  if (!rc)
    *kv = dlock__etcd_first_kv(*rep);
  return rc;
}

int dlock__etcd_lock_force_release(void *be, dlock_lock_kind_t kind,
                                   const char *name, bool *deleted) {
  dlock__etcd *e = be;
  if (kind == DLOCK_READ || kind == DLOCK_WRITE)
    return dlock__etcd_rw_force_release(e, name, deleted);
  json_object *rep = NULL, *kv = NULL;
  int rc = owner_kv(e, name, &rep, &kv, 1);
  *deleted = false;
  if (!rc && kv) {
    const char *k = json_object_get_string(dlock__etcd_get(kv, "key"));
    int64_t n = 0;
    rc = k ? dlock__etcd_delete(e, k, false, &n) : DLOCK_EPROTO;
    *deleted = n > 0;
  }
  json_object_put(rep);
  return rc;
}

int dlock__etcd_lock_query(void *be, dlock_lock_kind_t kind, const char *name,
                           const char *owner, dlock__lock_query q,
                           int64_t *out) {
  dlock__etcd *e = be;
  if (kind == DLOCK_READ || kind == DLOCK_WRITE)
    return dlock__etcd_rw_query(e, kind, name, owner, q, out);
  json_object *rep = NULL, *kv = NULL;
  int rc = owner_kv(e, name, &rep, &kv, 1);
  if (rc)
    return rc;
  int64_t rev = dlock__etcd_i64(kv, "create_revision");
  int64_t lease = dlock__etcd_i64(kv, "lease");
  json_object_put(rep);
  pthread_mutex_lock(&e->mu);
  etcd_entry *x = entry_find_locked(e, name);
  bool mine =
      kv && x && x->held && strcmp(x->owner, owner) == 0 && x->rev == rev;
  int64_t count = mine ? x->count : 0;
  pthread_mutex_unlock(&e->mu);
  switch (q) {
  case DLOCK__Q_LOCKED:
    *out = kv ? 1 : 0;
    break;
  case DLOCK__Q_HELD:
    *out = mine ? 1 : 0;
    break;
  case DLOCK__Q_COUNT:
    *out = count;
    break;
  case DLOCK__Q_REMAINING:
    *out = !kv ? -2 : dlock__etcd_lease_left(e, lease);
    break;
  }
  return 0;
}

/* "<owner> key=<key> rev=<create revision> lease=<hex>" */
char *dlock__etcd_describe(json_object *kv, char **info) {
  const char *k64 = json_object_get_string(dlock__etcd_get(kv, "key"));
  const char *v64 = json_object_get_string(dlock__etcd_get(kv, "value"));
  char *key = k64 ? dlock__etcd_unb64(k64, NULL) : NULL;
  char *val = v64 ? dlock__etcd_unb64(v64, NULL) : NULL;
  char *nl = val ? strchr(val, '\n') : NULL;
  if (info)
    *info = NULL;
  if (nl) {
    *nl = '\0';
    if (info && nl[1] && strlen(nl + 1) <= DLOCK_HOLDER_INFO_MAX)
      *info = dlock__strdup(nl + 1);
  }
  char *s =
      dlock__asprintf("%s key=%s rev=%" PRId64 " lease=%" PRIx64,
                      val && *val ? val : "(no owner recorded)",
                      key ? key : "?", dlock__etcd_i64(kv, "create_revision"),
                      (uint64_t)dlock__etcd_i64(kv, "lease"));
  dlock__free(key);
  dlock__free(val);
  return s;
}

int dlock__etcd_lock_state(void *be, dlock_lock_kind_t kind, const char *name,
                           dlock_lock_state_t **out) {
  dlock__etcd *e = be;
  if (kind == DLOCK_READ || kind == DLOCK_WRITE)
    return dlock__etcd_rw_state(e, name, out);
  json_object *rep = NULL, *kv = NULL;
  int rc = owner_kv(e, name, &rep, &kv, 101);
  if (rc)
    return rc;
  json_object *kvs = dlock__etcd_get(rep, "kvs");
  size_t n = kvs ? json_object_array_length(kvs) : 0;
  dlock_lock_state_t *st = dlock__calloc(1, sizeof *st);
  if (!st || !(st->holders = dlock__calloc(1, sizeof *st->holders)) ||
      !(st->waiters = dlock__calloc(n ? n : 1, sizeof *st->waiters)) ||
      !(st->holder_infos = dlock__calloc(1, sizeof(char *))) ||
      !(st->waiter_infos = dlock__calloc(n ? n : 1, sizeof(char *))) ||
      !(st->name = dlock__strdup(name))) {
    json_object_put(rep);
    dlock_lock_state_free(st);
    return DLOCK_ENOMEM;
  }
  st->kind = n == 0                 ? "free"
             : kind == DLOCK_FAIR   ? "fair"
             : kind == DLOCK_FENCED ? "fenced"
                                    : "reentrant";
  st->ttl_ms = -2;
  for (size_t i = 0; i < n; i++) {
    json_object *k = json_object_array_get_idx(kvs, i);
    char *info = NULL;
    char *d = dlock__etcd_describe(k, &info);
    if (!d) {
      dlock__free(info);
      continue;
    }
    if (i == 0)
      st->holder_infos[0] = info;
    else
      st->waiter_infos[st->nwaiters] = info;
    if (i == 0) {
      st->holders[0].owner = d;
      st->holders[0].count = 1;
      st->nholders = 1;
      st->token =
          kind == DLOCK_FENCED ? dlock__etcd_i64(k, "create_revision") : 0;
      st->ttl_ms = dlock__etcd_lease_left(e, dlock__etcd_i64(k, "lease"));
    } else {
      st->waiters[st->nwaiters++] = d;
    }
  }
  json_object_put(rep);
  *out = st;
  return 0;
}

int dlock__etcd_lock_hold_env(void *be, dlock_lock_kind_t kind,
                              const char *name, const char *owner,
                              char ***out) {
  dlock__etcd *e = be;
  *out = NULL;
  if (kind == DLOCK_READ || kind == DLOCK_WRITE)
    return 0; /* etcdctl has no read-write lock: nothing to mirror */
  pthread_mutex_lock(&e->mu);
  etcd_entry *x = entry_find_locked(e, name);
  bool held = x && x->held && strcmp(x->owner, owner) == 0;
  int64_t lease = held ? x->lease : 0, rev = held ? x->rev : 0;
  pthread_mutex_unlock(&e->mu);
  if (!held)
    return 0;
  char **env = dlock__calloc(3, sizeof *env);
  char *key = dlock__etcd_key(name, lease);
  if (env && key) {
    env[0] = dlock__asprintf("ETCD_LOCK_KEY=%s", key);
    env[1] = dlock__asprintf("ETCD_LOCK_REV=%" PRId64, rev);
  }
  dlock__free(key);
  if (!env || !env[0] || !env[1]) {
    if (env) {
      dlock__free(env[0]);
      dlock__free(env[1]);
    }
    dlock__free(env);
    return DLOCK_ENOMEM;
  }
  *out = env;
  return 0;
}

/* ------------------------------------------ sent requests (async calls)
 *
 * lock_acquire_send / lock_release_send (backend.h): the try of a
 * reentrant or fenced lock and the release of a reentrant, fair or
 * fenced one, on the session thread's multi handle (transport.c's
 * dlock__etcd_send), with the blocking operation's own halves: the local
 * entry first (re-entry and a name another thread of this client uses
 * are answered at once, without a request), the same transaction and the
 * same reading of its reply; a refused try then asks the holder's lease
 * for its TTL and deletes its own key, one request after the other, as
 * the blocking try does. Only under a live lease (none, or a grant under
 * way: the blocking operation grants). What the blocking operation
 * would go on with (a request not sent, a failed connection, no leader,
 * an expired token, a lease etcd no longer has) ends in
 * DLOCK__SEND_BLOCKS: a try's entry is freed (a try the core cancels
 * before its blocking run must not leave the name taken here), and the
 * blocking acquire claims it anew and sends the transaction again (it is
 * idempotent: a key the lost one put is found and taken, or removed on a
 * refusal); a release's entry is still held, and the blocking release
 * deletes the key. A silent endpoint
 * ends in DLOCK_EIOTIMEOUT at the command timeout: a try then removes
 * its key first, as the blocking try does after an error. */

typedef struct sent_lock {
  dlock__etcd *e;
  char *name;
  char owner[64];
  int64_t lease;
  int rc;        /* a try's outcome once its key is removed (0: refused) */
  int64_t pttl;  /* a refused try's: the holder's lease's TTL */
  char err[512]; /* rc's detail, kept across the delete */
  dlock__sent_fn done;
  void *arg;
} sent_lock;

static sent_lock *sent_new(dlock__etcd *e, const char *name, const char *owner,
                           dlock__sent_fn done, void *arg) {
  if (strlen(owner) >= sizeof((sent_lock *)0)->owner)
    return NULL;
  sent_lock *s = dlock__calloc(1, sizeof *s);
  if (s && !(s->name = dlock__strdup(name))) {
    dlock__free(s);
    return NULL;
  }
  if (s) {
    snprintf(s->owner, sizeof s->owner, "%s", owner);
    s->e = e;
    s->done = done;
    s->arg = arg;
  }
  return s;
}

static void sent_free(sent_lock *s) {
  dlock__free(s->name);
  dlock__free(s);
}

/* done runs last: it may free what arg points to. */
static void sent_finish(sent_lock *s, int rc, int64_t x, int64_t y) {
  if (rc == DLOCK__SEND_BLOCKS) /* the blocking acquire claims it anew */
    abandon_end(s->e, s->name, s->owner, 0);
  dlock__sent_fn done = s->done;
  void *arg = s->arg;
  sent_free(s);
  done(arg, rc, x, y);
}

static void try_removed(dlock__etcd *e, void *arg, int rc, json_object *rep) {
  (void)rep;
  sent_lock *s = arg;
  abandon_end(e, s->name, s->owner, rc);
  dlock__seterr(0, "%s", s->err);
  sent_finish(s, s->rc, s->pttl, 0);
}

/* The try ends with s->rc (and its detail), its key removed first (the
 * blocking try's abandon). */
static void try_remove(dlock__etcd *e, sent_lock *s) {
  snprintf(s->err, sizeof s->err, "%s", dlock_last_error());
  char *b64 = NULL;
  if (!abandon_key(e, s->name, s->owner, &b64)) {
    sent_finish(s, s->rc, s->pttl, 0);
    return;
  }
  json_object *req = b64 ? delete_req(b64) : NULL;
  dlock__free(b64);
  int rc =
      req ? dlock__etcd_send(e, "/v3/kv/deleterange", req, true, try_removed, s)
          : DLOCK_ENOMEM;
  if (rc == DLOCK__SEND_BLOCKS) /* the blocking try removes it */
    sent_finish(s, DLOCK__SEND_BLOCKS, 0, 0);
  else if (rc)
    try_removed(e, s, rc, NULL);
}

static void try_ttl_read(dlock__etcd *e, void *arg, int rc, json_object *rep) {
  sent_lock *s = arg;
  s->pttl = rc ? -1 : lease_left_reply(rep);
  s->rc = 0;
  try_remove(e, s);
}

static void try_answered(dlock__etcd *e, void *arg, int rc, json_object *rep) {
  sent_lock *s = arg;
  if (dlock__etcd_lease_refused(rc))
    dlock__etcd_session_lost(e, s->lease, "etcd refused a request on it");
  if (rc == DLOCK__SEND_BLOCKS || dlock__etcd_lease_refused(rc)) {
    sent_finish(s, DLOCK__SEND_BLOCKS, 0, 0);
    return;
  }
  int64_t my_rev = 0, owner_lease = 0;
  bool got = false;
  if (!rc)
    rc = txn_reply(e, s->name, rep, &my_rev, &got, &owner_lease);
  if (rc) {
    s->rc = rc;
    try_remove(e, s);
    return;
  }
  if (got) {
    const dlock__acquire a = {.name = s->name, .owner = s->owner};
    int64_t token = 0;
    bool regrant = false;
    rc = grant_record(e, &a, s->lease, my_rev, &token, &regrant);
    sent_finish(s, regrant ? DLOCK__SEND_BLOCKS : rc, -1, token);
    return;
  }
  /* held by another: its lease's TTL, then our key goes */
  json_object *req = owner_lease ? lease_left_req(owner_lease) : NULL;
  rc = req ? dlock__etcd_send(e, "/v3/lease/timetolive", req, true,
                              try_ttl_read, s)
           : DLOCK_ENOMEM;
  if (rc)
    try_ttl_read(e, s, rc, NULL);
}

int dlock__etcd_lock_acquire_send(void *be, const dlock__acquire *a,
                                  dlock__sent_fn done, void *arg) {
  dlock__etcd *e = be;
  if ((a->kind != DLOCK_REENTRANT && a->kind != DLOCK_FENCED) || a->q ||
      !a->try_once)
    return DLOCK__SEND_BLOCKS;
  pthread_mutex_lock(&e->mu);
  bool live = e->lease_live && !e->granting && !e->stop;
  int64_t lease = e->lease;
  pthread_mutex_unlock(&e->mu);
  if (!live)
    return DLOCK__SEND_BLOCKS; /* the blocking acquire grants one */
  int64_t pttl = -1, token = 0, ttl_ms = 0;
  int rc = entry_claim(e, a, lease, &pttl, &token, &ttl_ms);
  if (rc == 0 || rc == 1) {
    done(arg, rc, pttl, token);
    return 0;
  }
  if (rc < 0)
    return rc;
  /* the entry is the owner's: a send that does not go out frees it for
   * the blocking acquire, which claims it anew */
  sent_lock *s = sent_new(e, a->name, a->owner, done, arg);
  names_t n;
  if (!s || names_make(a->name, lease, &n) != 0) {
    if (s)
      sent_free(s);
    abandon_end(e, a->name, a->owner, 0);
    return DLOCK__SEND_BLOCKS;
  }
  s->lease = lease;
  json_object *txn = try_txn(e, a, lease, &n);
  names_free(&n);
  rc = dlock__etcd_send(e, "/v3/kv/txn", txn, true, try_answered, s);
  if (rc) {
    sent_free(s);
    abandon_end(e, a->name, a->owner, 0);
    return DLOCK__SEND_BLOCKS;
  }
  return 0;
}

static void release_answered(dlock__etcd *e, void *arg, int rc,
                             json_object *rep) {
  sent_lock *s = arg;
  if (!rc) {
    const dlock__release r = {.name = s->name, .owner = s->owner};
    rc = release_end(e, &r, dlock__etcd_i64(rep, "deleted"));
  }
  sent_finish(s, rc, 0, 0);
}

int dlock__etcd_lock_release_send(void *be, const dlock__release *rel,
                                  dlock__sent_fn done, void *arg) {
  dlock__etcd *e = be;
  if (rel->kind == DLOCK_READ || rel->kind == DLOCK_WRITE)
    return DLOCK__SEND_BLOCKS;
  char *b64 = NULL;
  int rc = release_claim(e, rel, &b64);
  if (rc != RELEASE_SEND) {
    if (rc >= 0)
      done(arg, rc, 0, 0);
    return rc < 0 ? rc : 0;
  }
  /* still held here: a delete that does not go out is the blocking
   * release's */
  sent_lock *s = sent_new(e, rel->name, rel->owner, done, arg);
  json_object *req = s ? delete_req(b64) : NULL;
  dlock__free(b64);
  rc = req ? dlock__etcd_send(e, "/v3/kv/deleterange", req, false,
                              release_answered, s)
           : DLOCK_ENOMEM;
  if (rc) {
    if (s)
      sent_free(s);
    return DLOCK__SEND_BLOCKS;
  }
  return 0;
}

/* ------------------------------------------------------------------ waits */

int dlock__etcd_wait_begin(void *be, struct dlock__wait *w) {
  dlock__etcd *e = be;
  etcd_reg *r = dlock__calloc(1, sizeof *r);
  if (!r)
    return DLOCK_ENOMEM;
  r->w = w;
  w->reg = r;
  pthread_mutex_lock(&e->mu);
  r->next = e->regs;
  e->regs = r;
  pthread_mutex_unlock(&e->mu);
  return 0;
}

void dlock__etcd_wait_end(void *be, struct dlock__wait *w) {
  dlock__etcd *e = be;
  etcd_reg *r = w->reg;
  const dlock__wait_spec *s = w->spec;
  pthread_mutex_lock(&e->mu);
  for (etcd_reg **p = &e->regs; *p; p = &(*p)->next)
    if (*p == r) {
      *p = r->next;
      break;
    }
  bool had_watch = r->watch != NULL;
  dlock__etcd_watch_detach_locked(r);
  pthread_mutex_unlock(&e->mu);
  if (had_watch)
    dlock__etcd_session_poke(e);
  dlock__free(r->watch_key_b64);
  dlock__free(r);
  w->reg = NULL;
  if (s->sync)
    return;
  if (s->lock_kind == DLOCK_READ || s->lock_kind == DLOCK_WRITE)
    dlock__etcd_rw_abandon(e, s->lock_kind, s->name, s->owner);
  else
    abandon(e, s->name, s->owner);
}
