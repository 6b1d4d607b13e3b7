/*
 * semaphore.c - the permit semaphore on Curator's InterProcessSemaphoreV2
 * layout.
 *
 * Layout: the semaphore is the node P (the name's path, as for locks); each
 * permit in use is a protected EPHEMERAL_SEQUENTIAL child of the container
 * P/leases, `_c_<uuid>-lease-<10 digits>`, whose uuid is the permit id
 * (32 hex digits, written 8-4-4-4-12) and whose data is the owner client's
 * id. Curator does not store the number of permits (every process passes
 * the same maxLeases); dlock keeps it as P's data, in decimal, written by
 * try_set_permits / add_permits (Curator ignores P's data). A permit lives
 * as long as the session that took it: a crashed holder's permit comes
 * back when its session expires; there is no per-permit lease (a fixed
 * lease is DLOCK_ENOTSUP, as for locks).
 *
 * Taking a permit: read the count and list P/leases, leaving watches on
 * both (a release or a larger count wakes the client's waits on P through
 * dlock__zk_semaphore_watcher). Only when there is room, create the lease node
 * and list again, oldest first: the permit is ours when fewer than the
 * count sort before it; otherwise the node is deleted at once (the core's
 * semaphore wait has no "leave": an attempt leaves nothing behind) and
 * the attempt looks again. A node is never made without room, so waiters
 * cannot wake each other in a circle.
 * Curator's waiter instead holds the mutex P/locks while it waits, and
 * keeps its node; both rules admit at most `count` holders together
 * (whoever holds had fewer than count nodes before it when it looked, and
 * nodes only come later or go).
 *
 * Holders and waiters (the state, so --status and the command's size
 * check): Curator 5.9.0's internalAcquire1Lease keeps its node and waits
 * while the leases number more than maxLeases, holding P/locks, so every
 * other Curator node is older than a waiter's; dlock keeps a node only
 * when fewer than the count sort before it. So the first `count` nodes in
 * sequence order hold permits and any beyond them wait (in_use counts the
 * first, waiting the rest).
 *
 * The counting semaphore without owners (dlock_semaphore_*) has no
 * ZooKeeper recipe: sem_acquire and sem_release are DLOCK_ENOTSUP (the kind
 * is not declared, so the core refuses its handles first).
 *
 * Threads: caller threads; watches fire on libzookeeper's completion
 * thread. No state of its own: everything is on the server.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "zookeeper/zk.h"

#define LEASE_MARK "lease-"
#define ROUNDS 4

static int sem_paths(dlock__zk *z, const char *name, char *p, char *leases) {
  int rc = dlock__zk_lock_path(z, name, p, ZK_PATH_MAX);
  if (rc)
    return rc;
  dlock__zk_join(leases, ZK_PATH_MAX, p, "leases");
  return 0;
}

/* 8-4-4-4-12 from 32 hex digits. */
static void id_to_uuid(const char *id, char out[37]) {
  snprintf(out, 37, "%.8s-%.4s-%.4s-%.4s-%.12s", id, id + 8, id + 12,
           id + 16, id + 20);
}

/* The permit id a lease node stands for, or the node's name when it is
 * not protected. */
static char *node_id(const char *child) {
  char id[33];
  size_t n = 0;
  if (strncmp(child, "_c_", 3) == 0 && strlen(child) > 3 + 36) {
    for (const char *c = child + 3; c < child + 3 + 36 && n < 32; c++)
      if (*c != '-')
        id[n++] = *c;
  }
  if (n != 32)
    return dlock__strdup(child);
  id[32] = '\0';
  return dlock__strdup(id);
}

static const char *lease_key(const char *child) {
  const char *k = strstr(child, LEASE_MARK);
  const char *last = NULL;
  while (k) {
    last = k + strlen(LEASE_MARK);
    k = strstr(k + 1, LEASE_MARK);
  }
  return last ? last : child;
}

static int cmp_lease(const void *a, const void *b) {
  return strcmp(lease_key(*(char *const *)a), lease_key(*(char *const *)b));
}

/* The count in P's data: 1 and *count, 0 when P is absent or has none
 * (*version then -1 / P's version), or an error. */
static int read_count(dlock__zk *z, const char *p, watcher_fn watcher,
                      int64_t *count, int *version) {
  zk_result r;
  int rc = dlock__zk_get(z, p, watcher, NULL, &r);
  if (rc)
    return rc;
  *count = 0;
  *version = -1;
  if (r.rc == ZNONODE) {
    dlock__zk_result_clear(&r);
    if (watcher) { /* to hear of its creation */
      if ((rc = dlock__zk_exists(z, p, watcher, NULL, &r)) != 0)
        return rc;
      dlock__zk_result_clear(&r);
    }
    return 0;
  }
  if (r.rc != ZOK) {
    rc = dlock__zk_error(z, r.rc, "read", p);
    dlock__zk_result_clear(&r);
    return rc;
  }
  *version = r.stat.version;
  char *end = NULL;
  long long v = r.data_len > 0 ? strtoll(r.data, &end, 10) : 0;
  bool ok = r.data_len > 0 && end && *end == '\0';
  dlock__zk_result_clear(&r);
  if (!ok)
    return 0;
  *count = v;
  return 1;
}

/* Leases sorted oldest first (ZNONODE: none). */
static int list_leases(dlock__zk *z, const char *leases, watcher_fn watcher,
                       zk_result *r) {
  int rc = watcher ? dlock__zk_children_watch(z, leases, watcher, NULL, r)
                   : dlock__zk_children(z, leases, r);
  if (rc)
    return rc;
  if (r->rc == ZNONODE) {
    r->rc = ZOK;
    if (watcher) { /* hear of its creation */
      zk_result e;
      if ((rc = dlock__zk_exists(z, leases, watcher, NULL, &e)) != 0) {
        dlock__zk_result_clear(r);
        return rc;
      }
      dlock__zk_result_clear(&e);
    }
    return 0;
  }
  if (r->rc != ZOK) {
    rc = dlock__zk_error(z, r->rc, "list children of", leases);
    dlock__zk_result_clear(r);
    return rc;
  }
  if (r->nchildren > 1)
    qsort(r->children, (size_t)r->nchildren, sizeof(char *), cmp_lease);
  return 0;
}

int dlock__zk_sem_set(void *be, const char *name, int64_t permits,
                      bool *set) {
  dlock__zk *z = be;
  char p[ZK_PATH_MAX], leases[ZK_PATH_MAX], text[32];
  int rc = sem_paths(z, name, p, leases);
  if (rc)
    return rc;
  snprintf(text, sizeof text, "%" PRId64, permits);
  *set = false;
  for (int round = 0; round < ROUNDS; round++) {
    int64_t count;
    int version;
    int has = read_count(z, p, NULL, &count, &version);
    if (has < 0)
      return has;
    if (has == 1)
      return 0; /* set already */
    zk_result r;
    if (version >= 0) /* P exists without a count (made by Curator) */
      rc = dlock__zk_set(z, p, text, version, &r);
    else
      rc = dlock__zk_create(z, p, text, 0, &r);
    if (rc)
      return rc;
    int zrc = r.rc;
    dlock__zk_result_clear(&r);
    if (zrc == ZOK) {
      *set = true;
      return 0;
    }
    if (zrc == ZNONODE && version < 0) {
      char parent[ZK_PATH_MAX];
      snprintf(parent, sizeof parent, "%s", p);
      char *slash = strrchr(parent, '/');
      if (slash && slash != parent) {
        *slash = '\0';
        if ((rc = dlock__zk_make_parents(z, parent)))
          return rc;
      }
      continue;
    }
    if (zrc != ZNODEEXISTS && zrc != ZBADVERSION && zrc != ZNONODE)
      return dlock__zk_error(z, zrc, version >= 0 ? "write" : "create", p);
  }
  return dlock__seterr(DLOCK_EUNAVAILABLE,
                       "permit semaphore '%.200s': its count kept changing",
                       name);
}

int dlock__zk_sem_add(void *be, const char *name, int64_t n) {
  dlock__zk *z = be;
  char p[ZK_PATH_MAX], leases[ZK_PATH_MAX];
  int rc = sem_paths(z, name, p, leases);
  if (rc)
    return rc;
  for (int round = 0; round < 16; round++) {
    int64_t count = 0;
    int version = -1;
    int has = read_count(z, p, NULL, &count, &version);
    if (has < 0)
      return has;
    if (version < 0) { /* absent: created with n, as Redisson's INCRBY */
      bool set = false;
      if ((rc = dlock__zk_sem_set(z, name, n, &set)) != 0 || set)
        return rc;
      continue;
    }
    char text[32];
    snprintf(text, sizeof text, "%" PRId64, count + n);
    zk_result r;
    if ((rc = dlock__zk_set(z, p, text, version, &r)))
      return rc;
    int zrc = r.rc;
    dlock__zk_result_clear(&r);
    if (zrc == ZOK)
      return 0;
    if (zrc != ZBADVERSION && zrc != ZNONODE)
      return dlock__zk_error(z, zrc, "write", p);
  }
  return dlock__seterr(DLOCK_EUNAVAILABLE,
                       "permit semaphore '%.200s': its count kept changing",
                       name);
}

int dlock__zk_sem_acquire(void *be, const char *name, int64_t permits) {
  (void)be;
  (void)permits;
  return dlock__seterr(DLOCK_ENOTSUP,
                       "semaphore '%.200s': the zookeeper backend has no "
                       "counting semaphore without owners (use a permit "
                       "semaphore)",
                       name);
}

int dlock__zk_sem_release(void *be, const char *name, int64_t permits) {
  return dlock__zk_sem_acquire(be, name, permits);
}

int dlock__zk_sem_available(void *be, dlock__sync_kind kind, const char *name,
                            int64_t *out) {
  (void)kind;
  dlock__zk *z = be;
  char p[ZK_PATH_MAX], leases[ZK_PATH_MAX];
  int rc = sem_paths(z, name, p, leases);
  if (rc)
    return rc;
  int64_t count;
  int version;
  if ((rc = read_count(z, p, NULL, &count, &version)) < 0)
    return rc;
  zk_result r;
  if ((rc = list_leases(z, leases, NULL, &r)))
    return rc;
  int64_t left = count - r.nchildren;
  dlock__zk_result_clear(&r);
  *out = left > 0 ? left : 0;
  return 0;
}

/* Deletes path and its children (two levels: P/leases/x, P/locks/x). */
static int delete_tree(dlock__zk *z, const char *path, int depth,
                       bool *existed) {
  zk_result r;
  int rc = dlock__zk_children(z, path, &r);
  if (rc)
    return rc;
  if (r.rc == ZOK && depth > 0) {
    for (int i = 0; i < r.nchildren && !rc; i++) {
      char child[ZK_PATH_MAX];
      dlock__zk_join(child, sizeof child, path, r.children[i]);
      rc = delete_tree(z, child, depth - 1, NULL);
    }
  }
  dlock__zk_result_clear(&r);
  if (rc)
    return rc;
  if ((rc = dlock__zk_delete(z, path, &r)))
    return rc;
  int zrc = r.rc;
  dlock__zk_result_clear(&r);
  if (zrc == ZOK && existed)
    *existed = true;
  if (zrc != ZOK && zrc != ZNONODE)
    return dlock__zk_error(z, zrc, "delete", path);
  return 0;
}

int dlock__zk_sem_delete(void *be, dlock__sync_kind kind, const char *name,
                         bool *existed) {
  (void)kind;
  dlock__zk *z = be;
  char p[ZK_PATH_MAX], leases[ZK_PATH_MAX];
  int rc = sem_paths(z, name, p, leases);
  if (rc)
    return rc;
  *existed = false;
  return delete_tree(z, p, 2, existed);
}

/* Looks for the lease node of `uuid`: 1 (path set), 0, or an error. */
static int find_lease(dlock__zk *z, const char *leases, const char *uuid,
                      char *path) {
  zk_result r;
  int rc = list_leases(z, leases, NULL, &r);
  if (rc)
    return rc;
  char prefix[48];
  snprintf(prefix, sizeof prefix, "_c_%s-", uuid);
  int found = 0;
  for (int i = 0; i < r.nchildren && !found; i++)
    if (strncmp(r.children[i], prefix, strlen(prefix)) == 0) {
      dlock__zk_join(path, ZK_PATH_MAX, leases, r.children[i]);
      found = 1;
    }
  dlock__zk_result_clear(&r);
  return found;
}

static int delete_lease(dlock__zk *z, const char *path) {
  zk_result r;
  int rc = dlock__zk_delete(z, path, &r);
  if (rc)
    return rc;
  int zrc = r.rc;
  dlock__zk_result_clear(&r);
  if (zrc != ZOK && zrc != ZNONODE)
    return dlock__zk_error(z, zrc, "delete", path);
  return zrc == ZOK;
}

/* Creates our lease node (protected: a create whose answer was lost is
 * looked for before another is made). 0 with path set, or an error. */
static int create_lease(dlock__zk *z, const char *leases, const char *uuid,
                        const char *owner, char *path) {
  char want[ZK_PATH_MAX];
  int len = snprintf(want, sizeof want, "%s/_c_%s-" LEASE_MARK, leases, uuid);
  if (len < 0 || (size_t)len >= sizeof want)
    return dlock__seterr(DLOCK_EINVAL, "semaphore path too long: %.200s",
                         leases);
  /* the data: the owner, and the holder info on a line after it */
  char data[256 + DLOCK_HOLDER_INFO_MAX];
  const char *d = owner;
  if (z->holder_info[0]) {
    snprintf(data, sizeof data, "%s\n%s", owner, z->holder_info);
    d = data;
  }
  bool unsure = false;
  for (int round = 0; round < ROUNDS; round++) {
    if (unsure) {
      int found = find_lease(z, leases, uuid, path);
      if (found != 0)
        return found < 0 ? found : 0;
    }
    zk_result r;
    int rc = dlock__zk_create(z, want, d, ZOO_EPHEMERAL_SEQUENTIAL, &r);
    if (rc == DLOCK_EIOTIMEOUT) { /* it may be there: look once more */
      int found = find_lease(z, leases, uuid, path);
      if (found > 0 && delete_lease(z, path) < 0)
        return rc;
      return rc;
    }
    if (rc)
      return rc;
    int zrc = r.rc;
    if (zrc == ZOK)
      snprintf(path, ZK_PATH_MAX, "%s", r.path);
    dlock__zk_result_clear(&r);
    if (zrc == ZOK)
      return 0;
    if (zrc == ZNONODE) {
      if ((rc = dlock__zk_make_parents(z, leases)))
        return rc;
    } else if (zrc == ZCONNECTIONLOSS || zrc == ZOPERATIONTIMEOUT) {
      unsure = true;
    } else {
      return dlock__zk_error(z, zrc, "create", want);
    }
  }
  return dlock__seterr(DLOCK_EUNAVAILABLE,
                       "zookeeper %s: could not create a lease under "
                       "'%.300s' (the connection kept failing)",
                       z->display, leases);
}

int dlock__zk_psem_acquire(void *be, const char *name, const char *id,
                           int64_t lease_ms, int64_t *retry_in_ms) {
  dlock__zk *z = be;
  if (lease_ms != z->watchdog_ms)
    return dlock__seterr(DLOCK_ENOTSUP,
                         "permit semaphore '%.200s': the zookeeper backend "
                         "does not support fixed leases (%lld ms): a permit "
                         "lasts until its release or the end of the "
                         "client's session; acquire with "
                         "DLOCK_LEASE_WATCHDOG",
                         name, (long long)lease_ms);
  char p[ZK_PATH_MAX], leases[ZK_PATH_MAX], mine[ZK_PATH_MAX], uuid[37];
  int rc = sem_paths(z, name, p, leases);
  if (rc)
    return rc;
  id_to_uuid(id, uuid);
  for (int round = 0; round < ROUNDS; round++) {
    /* look first, leaving watches: a node is made only when there seems
     * to be room, so that waiters never wake each other in a circle with
     * nodes made and deleted for nothing */
    int64_t count;
    int version;
    if ((rc = read_count(z, p, dlock__zk_semaphore_watcher, &count, &version)) <
        0)
      return rc;
    zk_result r;
    if ((rc = list_leases(z, leases, dlock__zk_semaphore_watcher, &r)))
      return rc;
    bool room = r.nchildren < count;
    dlock__zk_result_clear(&r);
    if (!room) {
      *retry_in_ms = -1; /* a release or a new count wakes us */
      return 0;
    }
    if ((rc = create_lease(z, leases, uuid, "dlock", mine)))
      return rc;
    if ((rc = list_leases(z, leases, NULL, &r))) {
      delete_lease(z, mine);
      return rc;
    }
    const char *base = strrchr(mine, '/') + 1;
    int me = -1;
    for (int i = 0; i < r.nchildren && me < 0; i++)
      if (strcmp(r.children[i], base) == 0)
        me = i;
    dlock__zk_result_clear(&r);
    if (me >= 0 && me < count)
      return 1;
    /* others came first: give the place back, look again */
    if ((rc = delete_lease(z, mine)) < 0)
      return rc;
  }
  *retry_in_ms = 50; /* the leases kept changing under us */
  return 0;
}

int dlock__zk_psem_release(void *be, const char *name, const char *id) {
  dlock__zk *z = be;
  char p[ZK_PATH_MAX], leases[ZK_PATH_MAX], path[ZK_PATH_MAX], uuid[37];
  int rc = sem_paths(z, name, p, leases);
  if (rc)
    return rc;
  id_to_uuid(id, uuid);
  int found = find_lease(z, leases, uuid, path);
  if (found <= 0)
    return found;
  return delete_lease(z, path);
}

/* The holder info after the owner line of each listed lease node's data
 * (one getData each; best effort: a status display does without it). */
static void read_lease_infos(dlock__zk *z, const char *leases,
                             const zk_result *kids, dlock_sem_state_t *st) {
  if (st->npermits == 0 ||
      !(st->permit_infos = dlock__calloc(st->npermits, sizeof(char *))))
    return;
  for (size_t i = 0; i < st->npermits; i++) {
    char path[ZK_PATH_MAX];
    dlock__zk_join(path, sizeof path, leases, kids->children[i]);
    zk_result g;
    if (dlock__zk_get(z, path, NULL, NULL, &g) != 0)
      continue;
    const char *nl = g.rc == ZOK && g.data_len > 0
                         ? memchr(g.data, '\n', (size_t)g.data_len)
                         : NULL;
    size_t rest = nl ? (size_t)(g.data_len - (nl - g.data) - 1) : 0;
    if (rest > 0 && rest <= DLOCK_HOLDER_INFO_MAX)
      st->permit_infos[i] = dlock__strndup(nl + 1, rest);
    dlock__zk_result_clear(&g);
  }
}

int dlock__zk_psem_state(void *be, const char *name, dlock_sem_state_t **out) {
  dlock__zk *z = be;
  char p[ZK_PATH_MAX], leases[ZK_PATH_MAX];
  int rc = sem_paths(z, name, p, leases);
  if (rc)
    return rc;
  int64_t count;
  int version, has;
  if ((has = read_count(z, p, NULL, &count, &version)) < 0)
    return has;
  zk_result r;
  if ((rc = list_leases(z, leases, NULL, &r)))
    return rc;
  /* Curator's rule: the first `count` nodes in sequence order hold, the
   * rest wait (without a count, nothing tells them apart: all hold) */
  int64_t holders = r.nchildren;
  if (has > 0 && holders > count)
    holders = count > 0 ? count : 0;
  dlock_sem_state_t *st = dlock__calloc(1, sizeof *st);
  size_t n = holders < 100 ? (size_t)holders : 100;
  if (!st || !(st->name = dlock__strdup(name)) ||
      (n && !(st->permits = dlock__calloc(n, sizeof *st->permits)))) {
    dlock__zk_result_clear(&r);
    dlock_sem_state_free(st);
    return DLOCK_ENOMEM;
  }
  st->in_use = holders;
  st->waiting = r.nchildren - holders;
  st->available = count - r.nchildren > 0 ? count - r.nchildren : 0;
  for (size_t i = 0; i < n; i++) {
    if (!(st->permits[i].id = node_id(r.children[i]))) {
      dlock__zk_result_clear(&r);
      dlock_sem_state_free(st);
      return DLOCK_ENOMEM;
    }
    st->permits[i].expires_in_ms = -1;
    st->npermits = i + 1;
  }
  read_lease_infos(z, leases, &r, st);
  dlock__zk_result_clear(&r);
  *out = st;
  return 0;
}
