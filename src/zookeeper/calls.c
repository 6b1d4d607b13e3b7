/*
 * calls.c - one ZooKeeper request, bounded by the command timeout.
 *
 * libzookeeper-mt's synchronous calls wait for their answer as long as the
 * connection lasts (up to two thirds of the session timeout on a silent
 * server), so every request here is asynchronous: the caller sends it and
 * sleeps on a per-call condition variable until the completion (on the
 * library's completion thread) fills the result, or until its deadline.
 *
 * Threads and lifetime: a call is shared by the caller and the completion,
 * with a reference count of 2 under call->mu; whoever drops the last
 * reference frees it, so a caller that gave up (DLOCK_EIOTIMEOUT) leaves
 * the call to the completion. The handle is read-locked (z->zh_lock) only
 * while the request is handed to the library, never while waiting.
 *
 * Two requests in one round trip (dlock__zk_create_and_list): both are handed
 * to the library under one read lock, the create first. ZooKeeper answers
 * one session's requests in the order it sent them, and serves a read
 * only after the session's earlier writes have been applied, so the list
 * sees the node the create made.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "zookeeper/zk.h"

typedef struct zk_call {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int refs; /* caller + completion */
  bool done;
  zk_result res;
} zk_call;

void dlock__zk_result_clear(zk_result *r) {
  dlock__free(r->path);
  for (int i = 0; r->children && i < r->nchildren; i++)
    dlock__free(r->children[i]);
  dlock__free(r->children);
  dlock__free(r->data);
  memset(r, 0, sizeof *r);
}

static zk_call *call_new(void) {
  zk_call *c = dlock__calloc(1, sizeof *c);
  if (!c)
    return NULL;
  pthread_mutex_init(&c->mu, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&c->cv, &attr);
  pthread_condattr_destroy(&attr);
  c->refs = 2;
  return c;
}

/* Drops one reference (mu held on entry; released here). */
static void call_put_locked(zk_call *c) {
  bool last = --c->refs == 0;
  pthread_mutex_unlock(&c->mu);
  if (last) {
    dlock__zk_result_clear(&c->res);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    dlock__free(c);
  }
}

static void call_finish_locked(zk_call *c, int rc) {
  c->res.rc = rc;
  c->done = true;
  pthread_cond_signal(&c->cv);
  call_put_locked(c);
}

/* ------------------------------------------------------- completions */

static void on_string_stat(int rc, const char *value, const struct Stat *stat,
                           const void *data) {
  zk_call *c = (zk_call *)data;
  pthread_mutex_lock(&c->mu);
  if (rc == ZOK) {
    if (stat)
      c->res.stat = *stat;
    if (value && !(c->res.path = dlock__strdup(value)))
      rc = ZSYSTEMERROR;
  }
  call_finish_locked(c, rc);
}

static void on_void(int rc, const void *data) {
  zk_call *c = (zk_call *)data;
  pthread_mutex_lock(&c->mu);
  call_finish_locked(c, rc);
}

static void on_stat(int rc, const struct Stat *stat, const void *data) {
  zk_call *c = (zk_call *)data;
  pthread_mutex_lock(&c->mu);
  if (rc == ZOK && stat)
    c->res.stat = *stat;
  call_finish_locked(c, rc);
}

static void on_data(int rc, const char *value, int len,
                    const struct Stat *stat, const void *data) {
  zk_call *c = (zk_call *)data;
  pthread_mutex_lock(&c->mu);
  if (rc == ZOK) {
    if (stat)
      c->res.stat = *stat;
    if (len < 0)
      len = 0;
    c->res.data = dlock__strndup(value ? value : "", (size_t)len);
    c->res.data_len = len;
    if (!c->res.data)
      rc = ZSYSTEMERROR;
  }
  call_finish_locked(c, rc);
}

static void on_strings_stat(int rc, const struct String_vector *v,
                            const struct Stat *stat, const void *data) {
  zk_call *c = (zk_call *)data;
  pthread_mutex_lock(&c->mu);
  if (rc == ZOK) {
    if (stat)
      c->res.stat = *stat;
    int n = v ? v->count : 0;
    c->res.children = n ? dlock__calloc((size_t)n, sizeof(char *)) : NULL;
    if (n && !c->res.children)
      rc = ZSYSTEMERROR;
    for (int i = 0; rc == ZOK && i < n; i++) {
      if (!(c->res.children[i] = dlock__strdup(v->data[i])))
        rc = ZSYSTEMERROR;
      else
        c->res.nchildren = i + 1;
    }
  }
  call_finish_locked(c, rc);
}

/* ------------------------------------------------------------ errors */

int dlock__zk_error(dlock__zk *z, int zrc, const char *what, const char *path) {
  int code;
  if (zrc == ZCONNECTIONLOSS || zrc == ZOPERATIONTIMEOUT || zrc == ZCLOSING ||
      zrc == ZSESSIONEXPIRED || zrc == ZINVALIDSTATE ||
      zrc == ZSESSIONMOVED)
    code = DLOCK_EUNAVAILABLE;
  else if (zrc == ZNOAUTH || zrc == ZAUTHFAILED)
    code = DLOCK_EAUTH;
  else if (zrc == ZBADARGUMENTS)
    code = DLOCK_EINVAL;
  else if (zrc == ZSYSTEMERROR)
    code = DLOCK_ENOMEM;
  else
    code = DLOCK_ESERVER;
  return dlock__seterr(code, "zookeeper %s: %s '%.300s': %s", z->display,
                       what, path, zerror(zrc));
}

/* ------------------------------------------------------------- sends */

typedef enum {
  OP_CREATE,
  OP_DELETE,
  OP_CHILDREN,
  OP_GET,
  OP_EXISTS,
  OP_SET
} zk_op;

typedef struct zk_args {
  zk_op op;
  const char *path;
  const char *data;
  int flags;
  watcher_fn watcher;
  void *watch_ctx;
  int version;
} zk_args;

static int send_locked(zhandle_t *zh, zk_call *c, const zk_args *a) {
  switch (a->op) {
  case OP_CREATE:
    return zoo_acreate2(zh, a->path, a->data, a->data ? (int)strlen(a->data) : -1,
                        &ZOO_OPEN_ACL_UNSAFE, a->flags, on_string_stat, c);
  case OP_DELETE:
    return zoo_adelete(zh, a->path, -1, on_void, c);
  case OP_CHILDREN:
    if (a->watcher)
      return zoo_awget_children2(zh, a->path, a->watcher, a->watch_ctx,
                                 on_strings_stat, c);
    return zoo_aget_children2(zh, a->path, 0, on_strings_stat, c);
  case OP_EXISTS:
    if (a->watcher)
      return zoo_awexists(zh, a->path, a->watcher, a->watch_ctx, on_stat, c);
    return zoo_aexists(zh, a->path, 0, on_stat, c);
  case OP_SET:
    return zoo_aset(zh, a->path, a->data, (int)strlen(a->data), a->version,
                    on_stat, c);
  case OP_GET:
    if (a->watcher)
      return zoo_awget(zh, a->path, a->watcher, a->watch_ctx, on_data, c);
    return zoo_aget(zh, a->path, 0, on_data, c);
  }
  return ZBADARGUMENTS;
}

static const char *op_name(zk_op op) {
  return op == OP_CREATE     ? "create"
         : op == OP_DELETE   ? "delete"
         : op == OP_CHILDREN ? "list children of"
         : op == OP_SET      ? "write"
         : op == OP_EXISTS   ? "look for"
                             : "read";
}

/* An answer from the server to a request sent at `sent` (not a connection
 * or session failure) proves the session alive then: the server cannot
 * expire it before sent + its timeout, which the core's loss clock is told
 * (core/session.h). Pings are not seen, so this bound can be older than
 * the session's truth; the connection itself vouches while it is up. */
static void note_answer(dlock__zk *z, int64_t sent, int zrc) {
  if (zrc == ZCONNECTIONLOSS || zrc == ZOPERATIONTIMEOUT || zrc == ZCLOSING ||
      zrc == ZSESSIONEXPIRED || zrc == ZINVALIDSTATE || zrc == ZSESSIONMOVED)
    return;
  pthread_mutex_lock(&z->mu);
  bool live = z->live && !z->expired;
  int64_t sid = z->session_id, timeout = z->negotiated;
  pthread_mutex_unlock(&z->mu);
  if (live && timeout > 0)
    dlock__session_confirm(z->core, sid, sent + timeout);
}

static int run(dlock__zk *z, const zk_args *a, zk_result *out) {
  memset(out, 0, sizeof *out);
  int64_t deadline = dlock__deadline_after(z->command_timeout);
  if (!dlock__zk_await_connected(z, deadline))
    return dlock__seterr(DLOCK_EUNAVAILABLE,
                         "zookeeper %s: not connected (no server answered "
                         "within the command timeout, %lld ms)",
                         z->display, (long long)z->command_timeout);
  zk_call *c = call_new();
  if (!c)
    return DLOCK_ENOMEM;
  /* held from before the send: the completion sees the call whole */
  int64_t sent = dlock__now_ms();
  pthread_mutex_lock(&c->mu);
  pthread_rwlock_rdlock(&z->zh_lock);
  uint64_t gen = z->gen;
  int rc = z->zh ? send_locked(z->zh, c, a) : ZINVALIDSTATE;
  pthread_rwlock_unlock(&z->zh_lock);
  if (rc != ZOK) {
    c->refs = 1; /* the completion will never run */
    call_put_locked(c);
    return dlock__zk_error(z, rc, op_name(a->op), a->path);
  }
  struct timespec ts;
  dlock__deadline_timespec(deadline, &ts);
  while (!c->done && dlock__now_ms() < deadline)
    pthread_cond_timedwait(&c->cv, &c->mu, &ts);
  if (!c->done) {
    call_put_locked(c);
    return dlock__seterr(DLOCK_EIOTIMEOUT,
                         "zookeeper %s: %s '%.300s': no answer within the "
                         "command timeout (%lld ms)",
                         z->display, op_name(a->op), a->path,
                         (long long)z->command_timeout);
  }
  *out = c->res;
  out->gen = gen;
  memset(&c->res, 0, sizeof c->res);
  call_put_locked(c);
  note_answer(z, sent, out->rc);
  if (out->rc == ZSYSTEMERROR) {
    dlock__zk_result_clear(out);
    return dlock__seterr(DLOCK_ENOMEM, "out of memory reading a reply");
  }
  return 0;
}

int dlock__zk_create(dlock__zk *z, const char *path, const char *data,
                     int flags, zk_result *out) {
  zk_args a = {.op = OP_CREATE, .path = path, .data = data, .flags = flags};
  return run(z, &a, out);
}

int dlock__zk_delete(dlock__zk *z, const char *path, zk_result *out) {
  zk_args a = {.op = OP_DELETE, .path = path};
  return run(z, &a, out);
}

int dlock__zk_children(dlock__zk *z, const char *path, zk_result *out) {
  zk_args a = {.op = OP_CHILDREN, .path = path};
  return run(z, &a, out);
}

int dlock__zk_children_watch(dlock__zk *z, const char *path, watcher_fn watcher,
                             void *watch_ctx, zk_result *out) {
  zk_args a = {.op = OP_CHILDREN,
               .path = path,
               .watcher = watcher,
               .watch_ctx = watch_ctx};
  return run(z, &a, out);
}

int dlock__zk_exists(dlock__zk *z, const char *path, watcher_fn watcher,
                     void *watch_ctx, zk_result *out) {
  zk_args a = {
      .op = OP_EXISTS, .path = path, .watcher = watcher, .watch_ctx = watch_ctx};
  return run(z, &a, out);
}

int dlock__zk_set(dlock__zk *z, const char *path, const char *data, int version,
                  zk_result *out) {
  zk_args a = {.op = OP_SET, .path = path, .data = data, .version = version};
  return run(z, &a, out);
}

int dlock__zk_get(dlock__zk *z, const char *path, watcher_fn watcher,
                  void *watch_ctx, zk_result *out) {
  zk_args a = {
      .op = OP_GET, .path = path, .watcher = watcher, .watch_ctx = watch_ctx};
  return run(z, &a, out);
}

/* Waits for c's answer until deadline (c->mu held on entry and on return):
 * true when it came. */
static bool call_wait_locked(zk_call *c, int64_t deadline) {
  struct timespec ts;
  dlock__deadline_timespec(deadline, &ts);
  while (!c->done && dlock__now_ms() < deadline)
    pthread_cond_timedwait(&c->cv, &c->mu, &ts);
  return c->done;
}

int dlock__zk_create_and_list(dlock__zk *z, const char *path, const char *data,
                              int flags, const char *dir, zk_result *created,
                              zk_result *kids) {
  memset(created, 0, sizeof *created);
  memset(kids, 0, sizeof *kids);
  kids->rc = ZOPERATIONTIMEOUT; /* until the list's answer comes */
  int64_t deadline = dlock__deadline_after(z->command_timeout);
  if (!dlock__zk_await_connected(z, deadline))
    return dlock__seterr(DLOCK_EUNAVAILABLE,
                         "zookeeper %s: not connected (no server answered "
                         "within the command timeout, %lld ms)",
                         z->display, (long long)z->command_timeout);
  zk_call *cc = call_new(), *lc = call_new();
  if (!cc || !lc) {
    if (cc) {
      pthread_mutex_lock(&cc->mu);
      cc->refs = 1;
      call_put_locked(cc);
    }
    if (lc) {
      pthread_mutex_lock(&lc->mu);
      lc->refs = 1;
      call_put_locked(lc);
    }
    return DLOCK_ENOMEM;
  }
  zk_args ca = {.op = OP_CREATE, .path = path, .data = data, .flags = flags};
  zk_args la = {.op = OP_CHILDREN, .path = dir};
  int64_t sent = dlock__now_ms();
  pthread_mutex_lock(&cc->mu);
  pthread_mutex_lock(&lc->mu);
  pthread_rwlock_rdlock(&z->zh_lock);
  uint64_t gen = z->gen;
  int rc = z->zh ? send_locked(z->zh, cc, &ca) : ZINVALIDSTATE;
  int lrc = rc == ZOK ? send_locked(z->zh, lc, &la) : rc;
  pthread_rwlock_unlock(&z->zh_lock);
  if (lrc != ZOK) {
    lc->refs = 1; /* its completion will never run */
    call_put_locked(lc);
    lc = NULL;
  } else {
    pthread_mutex_unlock(&lc->mu);
  }
  if (rc != ZOK) {
    cc->refs = 1;
    call_put_locked(cc);
    return dlock__zk_error(z, rc, "create", path);
  }
  if (!call_wait_locked(cc, deadline)) {
    call_put_locked(cc);
    if (lc) {
      pthread_mutex_lock(&lc->mu);
      call_put_locked(lc);
    }
    return dlock__seterr(DLOCK_EIOTIMEOUT,
                         "zookeeper %s: create '%.300s': no answer within the "
                         "command timeout (%lld ms)",
                         z->display, path, (long long)z->command_timeout);
  }
  *created = cc->res;
  created->gen = gen;
  memset(&cc->res, 0, sizeof cc->res);
  call_put_locked(cc);
  note_answer(z, sent, created->rc);
  if (lc) { /* the list: its answer follows the create's */
    pthread_mutex_lock(&lc->mu);
    if (call_wait_locked(lc, deadline)) {
      *kids = lc->res;
      kids->gen = gen;
      memset(&lc->res, 0, sizeof lc->res);
    }
    call_put_locked(lc);
  }
  if (kids->rc == ZSYSTEMERROR) { /* a partial list: not one to use */
    dlock__zk_result_clear(kids);
    kids->rc = ZSYSTEMERROR;
  }
  if (created->rc == ZSYSTEMERROR) {
    dlock__zk_result_clear(created);
    dlock__zk_result_clear(kids);
    return dlock__seterr(DLOCK_ENOMEM, "out of memory reading a reply");
  }
  return 0;
}
