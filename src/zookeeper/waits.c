/*
 * waits.c - waits of the ZooKeeper backend: a waiter is woken by a watch
 * on the node just before its own (Curator's rule), never by polling.
 *
 * A wait registers (wait_begin) with a number of its own; an attempt that
 * finds the lock taken leaves a getData watch on its predecessor whose
 * context is that number (never a pointer: a watch outlives the wait when
 * the predecessor is never deleted, and then finds nothing to wake). The
 * watch fires on libzookeeper's completion thread, which looks the number
 * up under z->mu and calls dlock__wait_wake; the waiter's next attempt
 * finds its node first and owns the lock. The path is armed with the
 * attempt itself, so the backend has no wait_arm (a wait is armed at once)
 * nor wait_can_queue (every attempt may queue: its node is its place in
 * the queue).
 *
 * A reconnect within the session (the library sets its watches again) and
 * a new session wake every wait once, so that none sleeps on a watch that
 * died with its session.
 *
 * Lock order: z->mu, then client->mu (inside the up-calls).
 */
#include "core/alloc.h"
#include "zookeeper/zk.h"

#include <stdio.h>
#include <string.h>

int dlock__zk_wait_begin(void *be, dlock__wait *w) {
  dlock__zk *z = be;
  zk_wait *r = dlock__calloc(1, sizeof *r);
  if (!r)
    return DLOCK_ENOMEM;
  r->w = w;
  pthread_mutex_lock(&z->mu);
  r->id = ++z->next_wait_id;
  r->next = z->waits;
  z->waits = r;
  pthread_mutex_unlock(&z->mu);
  w->reg = r;
  return 0;
}

void dlock__zk_wait_end(void *be, dlock__wait *w) {
  dlock__zk *z = be;
  zk_wait *r = w->reg;
  pthread_mutex_lock(&z->mu);
  for (zk_wait **p = &z->waits; *p; p = &(*p)->next)
    if (*p == r) {
      *p = r->next;
      break;
    }
  pthread_mutex_unlock(&z->mu);
  /* an unused wake needs no passing on: each waiter watches its own
   * predecessor, so no other wait depends on this one's wake */
  dlock__free(r);
  w->reg = NULL;
}

uint64_t dlock__zk_wait_watch_id(dlock__zk *z, const char *owner,
                                 uint64_t seq) {
  uint64_t id = 0;
  pthread_mutex_lock(&z->mu);
  for (zk_wait *r = z->waits; r && !id; r = r->next)
    if (!r->w->spec->sync && r->w->spec->seq == seq &&
        strcmp(r->w->spec->owner, owner) == 0)
      id = r->id;
  pthread_mutex_unlock(&z->mu);
  return id;
}

void dlock__zk_predecessor_watcher(zhandle_t *zh, int type, int state,
                                   const char *path, void *ctx) {
  (void)type;
  (void)state;
  (void)path;
  dlock__zk *z = (dlock__zk *)zoo_get_context(zh);
  uint64_t id = (uint64_t)(uintptr_t)ctx;
  if (!z || !id)
    return;
  /* any event (deleted, changed, a session event) is worth a new look */
  pthread_mutex_lock(&z->mu);
  for (zk_wait *r = z->waits; r; r = r->next)
    if (r->id == id) {
      dlock__wait_wake(r->w);
      break;
    }
  pthread_mutex_unlock(&z->mu);
}

void dlock__zk_waits_wake_all_locked(dlock__zk *z) {
  for (zk_wait *r = z->waits; r; r = r->next)
    dlock__wait_wake(r->w);
}

void dlock__zk_semaphore_watcher(zhandle_t *zh, int type, int state,
                                 const char *path, void *ctx) {
  (void)state;
  (void)ctx;
  dlock__zk *z = (dlock__zk *)zoo_get_context(zh);
  if (!z)
    return;
  /* the semaphore's path: P itself (its count) or P/leases */
  char sem[ZK_PATH_MAX];
  snprintf(sem, sizeof sem, "%s", path ? path : "");
  size_t n = strlen(sem);
  if (n > 7 && strcmp(sem + n - 7, "/leases") == 0)
    sem[n - 7] = '\0';
  bool all = type == ZOO_SESSION_EVENT || !sem[0];
  pthread_mutex_lock(&z->mu);
  for (zk_wait *r = z->waits; r; r = r->next) {
    const dlock__wait_spec *spec = r->w->spec;
    char p[ZK_PATH_MAX];
    if (!spec->sync)
      continue;
    if (all || (dlock__zk_lock_path(z, spec->name, p, sizeof p) == 0 &&
                strcmp(p, sem) == 0))
      dlock__wait_wake(r->w);
  }
  pthread_mutex_unlock(&z->mu);
}
