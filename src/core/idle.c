/*
 * idle.c - the idle connection pool (idle.h): an array, oldest first,
 * under its own mutex; what is closed is collected under it and closed
 * after it is released.
 */
#include "core/idle.h"

#include "core/alloc.h"
#include "core/clock.h"

/* A connection idle since `since` for a server timeout of `ms` is ended
 * by the server soon: lent no more. The margin covers the time to use it
 * and the clocks' difference. */
static int64_t expires_at(const dlock__idle_conn *e) {
  if (e->timeout_ms <= 0)
    return DLOCK__NEVER;
  int64_t margin = e->timeout_ms / 4 > 50 ? e->timeout_ms / 4 : 50;
  return e->since + e->timeout_ms - margin;
}

void dlock__idle_init(dlock__idle_pool *ip, int keep,
                      void (*close_fn)(void *conn),
                      bool (*usable)(void *conn)) {
  pthread_mutex_init(&ip->mu, NULL);
  ip->v = NULL;
  ip->n = ip->cap = 0;
  ip->keep = keep;
  ip->close_fn = close_fn;
  ip->usable = usable;
}

void dlock__idle_destroy(dlock__idle_pool *ip) {
  for (int i = 0; i < ip->n; i++)
    ip->close_fn(ip->v[i].conn);
  dlock__free(ip->v);
  ip->v = NULL;
  ip->n = ip->cap = 0;
  pthread_mutex_destroy(&ip->mu);
}

/* Closes the `n` connections of `doomed`. */
static void close_all(dlock__idle_pool *ip, void **doomed, int n) {
  for (int i = 0; i < n; i++)
    ip->close_fn(doomed[i]);
}

void *dlock__idle_take(dlock__idle_pool *ip, int64_t now, int64_t *timeout_ms) {
  void *doomed[8];
  int ndoomed = 0;
  void *c = NULL;
  *timeout_ms = 0;
  for (;;) {
    pthread_mutex_lock(&ip->mu);
    while (!c && ip->n > 0 && ndoomed < 8) {
      dlock__idle_conn e = ip->v[--ip->n];
      if (now >= expires_at(&e) || (ip->usable && !ip->usable(e.conn))) {
        doomed[ndoomed++] = e.conn;
        continue;
      }
      c = e.conn;
      *timeout_ms = e.timeout_ms;
    }
    bool more = !c && ip->n > 0;
    pthread_mutex_unlock(&ip->mu);
    close_all(ip, doomed, ndoomed);
    ndoomed = 0;
    if (!more)
      return c;
  }
}

void dlock__idle_put(dlock__idle_pool *ip, void *conn, int64_t timeout_ms,
                     int64_t now) {
  if (!conn)
    return;
  pthread_mutex_lock(&ip->mu);
  int untimed = 0;
  if (timeout_ms <= 0)
    for (int i = 0; i < ip->n; i++)
      untimed += ip->v[i].timeout_ms <= 0;
  bool room = timeout_ms > 0 ? ip->n < DLOCK__IDLE_MAX
                             : untimed < ip->keep && ip->n < DLOCK__IDLE_MAX;
  if (room && ip->n == ip->cap) {
    int cap = ip->cap ? ip->cap * 2 : 16;
    dlock__idle_conn *v = dlock__reallocarray(ip->v, (size_t)cap, sizeof *v);
    if (v) {
      ip->v = v;
      ip->cap = cap;
    } else {
      room = false;
    }
  }
  if (room) {
    ip->v[ip->n++] = (dlock__idle_conn){
        .conn = conn, .timeout_ms = timeout_ms, .since = now};
    conn = NULL;
  }
  pthread_mutex_unlock(&ip->mu);
  if (conn)
    ip->close_fn(conn);
}

int64_t dlock__idle_sweep(dlock__idle_pool *ip, int64_t now) {
  void *doomed[16];
  int ndoomed = 0;
  int64_t next = DLOCK__NEVER;
  pthread_mutex_lock(&ip->mu);
  int kept = 0;
  for (int i = 0; i < ip->n; i++) {
    int64_t at = expires_at(&ip->v[i]);
    if (now >= at && ndoomed < 16) {
      doomed[ndoomed++] = ip->v[i].conn;
      continue;
    }
    if (at < next)
      next = now >= at ? now : at; /* left for the next sweep */
    ip->v[kept++] = ip->v[i];
  }
  ip->n = kept;
  pthread_mutex_unlock(&ip->mu);
  close_all(ip, doomed, ndoomed);
  return next;
}
