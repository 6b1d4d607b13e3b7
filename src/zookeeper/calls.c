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
 *
 * Sent requests (dlock__zk_send_*, for the async calls' sent operations,
 * locks.c): the same requests, handed to the library by the same code
 * (issue), with a continuation instead of a sleeper: the completion hands
 * the answer to `then` and frees the call. Nobody waits, so the handle's
 * lock is only tried: a handle being replaced or closed (whose closing
 * thread runs the last completions itself, holding that lock) refuses
 * the request instead of blocking.
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
  int refs; /* caller + completion (a sent call: the completion only) */
  bool done;
  zk_result res;
  /* a sent call: where its answer goes (nobody sleeps on it) */
  dlock__zk_then_fn then;
  void *then_arg;
  int then_index;
  dlock__zk *z;
  int64_t sent_at;
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

static void note_answer(dlock__zk *z, int64_t sent, int zrc);

static void call_finish_locked(zk_call *c, int rc) {
  c->res.rc = rc;
  c->done = true;
  if (!c->then) {
    pthread_cond_signal(&c->cv);
    call_put_locked(c);
    return;
  }
  /* a sent call: its answer goes on (the gen was set when it was sent) */
  zk_result res = c->res;
  memset(&c->res, 0, sizeof c->res);
  dlock__zk_then_fn then = c->then;
  void *arg = c->then_arg;
  int index = c->then_index;
  dlock__zk *z = c->z;
  int64_t sent = c->sent_at;
  call_put_locked(c);
  note_answer(z, sent, res.rc);
  then(arg, index, &res);
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

static void on_data(int rc, const char *value, int len, const struct Stat *stat,
                    const void *data) {
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
      zrc == ZSESSIONEXPIRED || zrc == ZINVALIDSTATE || zrc == ZSESSIONMOVED)
    code = DLOCK_EUNAVAILABLE;
  else if (zrc == ZNOAUTH || zrc == ZAUTHFAILED)
    code = DLOCK_EAUTH;
  else if (zrc == ZBADARGUMENTS)
    code = DLOCK_EINVAL;
  else if (zrc == ZSYSTEMERROR)
    code = DLOCK_ENOMEM;
  else
    code = DLOCK_ESERVER;
  return dlock__seterr(code, "zookeeper %s: %s '%.300s': %s", z->display, what,
                       path, zerror(zrc));
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
    return zoo_acreate2(zh, a->path, a->data,
                        a->data ? (int)strlen(a->data) : -1,
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

/* Hands n requests to the library under one read lock of the handle (for
 * sent calls only tried: nothing waits), calls[i] with args[i], in order,
 * stopping at the first one refused: how many went, *zrc the refusal (ZOK
 * when all went). Each call's mu is held by the caller, so that its
 * completion sees it whole; its result carries the handle's generation. */
static int issue(dlock__zk *z, zk_call *const *calls, const zk_args *args,
                 int n, bool try_lock, int *zrc) {
  *zrc = ZINVALIDSTATE; /* a handle being replaced or closed */
  if (try_lock ? pthread_rwlock_tryrdlock(&z->zh_lock)
               : pthread_rwlock_rdlock(&z->zh_lock))
    return 0;
  int sent = 0;
  *zrc = ZOK;
  for (; sent < n; sent++) {
    calls[sent]->res.gen = z->gen;
    int rc =
        z->zh ? send_locked(z->zh, calls[sent], &args[sent]) : ZINVALIDSTATE;
    if (rc != ZOK) {
      *zrc = rc;
      break;
    }
  }
  pthread_rwlock_unlock(&z->zh_lock);
  return sent;
}

/* A call whose completion will never run (its request was not sent):
 * freed (mu held on entry). */
static void call_drop_locked(zk_call *c) {
  c->refs = 1;
  call_put_locked(c);
}

int dlock__zk_timeout_error(dlock__zk *z, const char *what, const char *path) {
  return dlock__seterr(DLOCK_EIOTIMEOUT,
                       "zookeeper %s: %s '%.300s': no answer within the "
                       "command timeout (%lld ms)",
                       z->display, what, path, (long long)z->command_timeout);
}

static int not_connected(dlock__zk *z) {
  return dlock__seterr(DLOCK_EUNAVAILABLE,
                       "zookeeper %s: not connected (no server answered "
                       "within the command timeout, %lld ms)",
                       z->display, (long long)z->command_timeout);
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

static int run(dlock__zk *z, const zk_args *a, zk_result *out) {
  memset(out, 0, sizeof *out);
  int64_t deadline = dlock__deadline_after(z->command_timeout);
  if (!dlock__zk_await_connected(z, deadline))
    return not_connected(z);
  zk_call *c = call_new();
  if (!c)
    return DLOCK_ENOMEM;
  /* held from before the send: the completion sees the call whole */
  int64_t sent = dlock__now_ms();
  pthread_mutex_lock(&c->mu);
  int rc;
  if (issue(z, &c, a, 1, false, &rc) == 0) {
    call_drop_locked(c);
    return dlock__zk_error(z, rc, op_name(a->op), a->path);
  }
  if (!call_wait_locked(c, deadline)) {
    call_put_locked(c);
    return dlock__zk_timeout_error(z, op_name(a->op), a->path);
  }
  *out = c->res;
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
  zk_args a = {.op = OP_EXISTS,
               .path = path,
               .watcher = watcher,
               .watch_ctx = watch_ctx};
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

int dlock__zk_create_and_list(dlock__zk *z, const char *path, const char *data,
                              int flags, const char *dir, zk_result *created,
                              zk_result *kids) {
  memset(created, 0, sizeof *created);
  memset(kids, 0, sizeof *kids);
  kids->rc = ZOPERATIONTIMEOUT; /* until the list's answer comes */
  int64_t deadline = dlock__deadline_after(z->command_timeout);
  if (!dlock__zk_await_connected(z, deadline))
    return not_connected(z);
  zk_call *calls[2] = {call_new(), call_new()};
  if (!calls[0] || !calls[1]) {
    for (int i = 0; i < 2; i++)
      if (calls[i]) {
        pthread_mutex_lock(&calls[i]->mu);
        call_drop_locked(calls[i]);
      }
    return DLOCK_ENOMEM;
  }
  zk_call *cc = calls[0], *lc = calls[1];
  const zk_args args[2] = {
      {.op = OP_CREATE, .path = path, .data = data, .flags = flags},
      {.op = OP_CHILDREN, .path = dir}};
  int64_t sent = dlock__now_ms();
  pthread_mutex_lock(&cc->mu);
  pthread_mutex_lock(&lc->mu);
  int rc;
  int nsent = issue(z, calls, args, 2, false, &rc);
  if (nsent < 2) { /* the list's completion will never run */
    call_drop_locked(lc);
    lc = NULL;
  } else {
    pthread_mutex_unlock(&lc->mu);
  }
  if (nsent == 0) {
    call_drop_locked(cc);
    return dlock__zk_error(z, rc, "create", path);
  }
  if (!call_wait_locked(cc, deadline)) {
    call_put_locked(cc);
    if (lc) {
      pthread_mutex_lock(&lc->mu);
      call_put_locked(lc);
    }
    return dlock__zk_timeout_error(z, "create", path);
  }
  *created = cc->res;
  memset(&cc->res, 0, sizeof cc->res);
  call_put_locked(cc);
  note_answer(z, sent, created->rc);
  if (lc) { /* the list: its answer follows the create's */
    pthread_mutex_lock(&lc->mu);
    if (call_wait_locked(lc, deadline)) {
      *kids = lc->res;
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

/* ------------------------------------------------------------ sent */

/* Sends n requests (args[i] answered to then(arg, first + i, ...)) without
 * waiting: how many went (their completions will run, in order), *zrc
 * why the first that did not go was refused. */
static int send_calls(dlock__zk *z, const zk_args *args, int n,
                      dlock__zk_then_fn then, void *arg, int first, int *zrc) {
  zk_call *calls[2] = {NULL, NULL};
  int64_t sent = dlock__now_ms();
  int made = 0;
  for (; made < n; made++) {
    if (!(calls[made] = call_new()))
      break;
    calls[made]->refs = 1; /* the completion's only */
    calls[made]->then = then;
    calls[made]->then_arg = arg;
    calls[made]->then_index = first + made;
    calls[made]->z = z;
    calls[made]->sent_at = sent;
    pthread_mutex_lock(&calls[made]->mu);
  }
  int nsent = 0;
  *zrc = ZSYSTEMERROR;
  if (made > 0) {
    int rc;
    nsent = issue(z, calls, args, made, true, &rc);
    if (nsent < made)
      *zrc = rc != ZOK ? rc : ZSYSTEMERROR;
  }
  for (int i = 0; i < made; i++) {
    if (i < nsent)
      pthread_mutex_unlock(&calls[i]->mu);
    else
      call_drop_locked(calls[i]);
  }
  return nsent;
}

int dlock__zk_send_create_and_list(dlock__zk *z, const char *path,
                                   const char *data, int flags, const char *dir,
                                   dlock__zk_then_fn then, void *arg,
                                   int *zrc) {
  const zk_args args[2] = {
      {.op = OP_CREATE, .path = path, .data = data, .flags = flags},
      {.op = OP_CHILDREN, .path = dir}};
  return send_calls(z, args, 2, then, arg, 0, zrc);
}

int dlock__zk_send_delete(dlock__zk *z, const char *path,
                          dlock__zk_then_fn then, void *arg, int index,
                          int *zrc) {
  const zk_args a = {.op = OP_DELETE, .path = path};
  return send_calls(z, &a, 1, then, arg, index, zrc);
}
