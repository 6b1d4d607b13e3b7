/*
 * locks.c - Curator's lock recipes on ZooKeeper: InterProcessMutex for the
 * reentrant, fair and fenced kinds, InterProcessReadWriteLock for the read
 * and write sides.
 *
 * Layout (Curator's, so that Curator processes and dlock exclude each
 * other on the same path): the lock is a container node P (the lock
 * name's path, dlock__zk_lock_path); each contender creates one protected
 * EPHEMERAL_SEQUENTIAL child
 *     P/_c_<uuid>-lock-<10 digits>        mutex
 *     P/_c_<uuid>-__READ__<10 digits>     read side
 *     P/_c_<uuid>-__WRIT__<10 digits>     write side
 * with the owner "<client-id>:<tid>" as data, followed by a newline and
 * the client's holder info when it has one (Curator writes the host's
 * address; only __REVOKE__ means anything to it). Children sort by the
 * digits after the last marker. A mutex or write node holds when it is
 * first, and otherwise watches the node just before it; a read node holds
 * when no write node is before it, and otherwise watches the first write
 * node. A thread holding the write side takes the read side with a plain
 * EPHEMERAL node named with its write node's digits (Curator's
 * downgrade); a thread holding the read side that asks for the write side
 * gets DLOCK_EDEADLK (Curator would wait for itself forever).
 *
 * Reentrancy is the client's, per owner, as Curator's per thread: the node
 * table (z->nodes) counts re-entries; a release deletes the node when the
 * count reaches 0. Fencing token: the node's czxid (see docs/ZOOKEEPER.md:
 * holders of one lock hold in sequence order, which is creation order, and
 * zxids grow with every write of the ensemble).
 *
 * An acquire's first create is sent together with the listing of the
 * lock's children (dlock__zk_create_and_list: ZooKeeper answers them in order),
 * so an uncontended acquire costs one round trip, as the release does.
 *
 * Protected creates: a create whose answer was lost (connection loss or
 * our own timeout) is looked for among the children by its `_c_<uuid>-`
 * prefix before anything is created again, so that no orphan node of ours
 * can queue ahead of us or, worse, hold the lock unknown to us.
 *
 * Sent operations (the async calls' tries and releases, backend.h
 * lock_*_send): the same steps, carried from answer to answer by the
 * completions of sent requests instead of a sleeping thread, for the
 * common case only (section "sent operations" below); the rest is left to
 * the blocking operation, from the node table as the sent part left it.
 *
 * Threads: caller threads, the settling worker (leave, release), and for
 * the sent operations libzookeeper's completion thread and the event loop
 * (their deadline, the session's loss). A node record is used by its
 * owner's thread (or its owner's sent operation); its fields are read and
 * written under z->mu, and requests are made without it. A session loss
 * marks every record lost (dlock__zk_nodes_forget_locked) without freeing it,
 * so that a thread in the middle of an attempt never touches freed memory.
 * An attempt that was under way at the loss may create its node on the
 * new session after the mark: that record is live again (node_made_locked),
 * so that the wait goes on with that one node rather than starting over
 * behind it (its own orphan would then block it and everyone else).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/id.h"
#include "zookeeper/zk.h"

#define PATH_MAX_ZK ZK_PATH_MAX
#define MAX_ROUNDS 16 /* one attempt's retries (races with deletes) */
#define STATE_MAX 100 /* nodes listed by lock_state */

static const char MUTEX_MARK[] = "lock-";
static const char READ_MARK[] = "__READ__";
static const char WRITE_MARK[] = "__WRIT__";

static zk_side side_of(dlock_lock_kind_t kind) {
  return kind == DLOCK_READ    ? ZK_READ
         : kind == DLOCK_WRITE ? ZK_WRITE
                               : ZK_MUTEX;
}

static const char *mark_of(zk_side side) {
  return side == ZK_READ    ? READ_MARK
         : side == ZK_WRITE ? WRITE_MARK
                            : MUTEX_MARK;
}

/* ---------------------------------------------------------- node table */

typedef struct zk_sent zk_sent;

typedef struct zk_node_ext {
  zk_node n;
  bool lost;     /* its session ended */
  bool unsure;   /* a create may have happened without our knowing */
  zk_sent *sent; /* a sent operation in flight on it, or NULL */
} zk_node_ext;

static zk_node_ext *ext(zk_node *n) { return (zk_node_ext *)n; }

/* mu held: n->path was just made (or found) by the server, through the
 * handle of generation `gen`. When that is the handle in use and its
 * session is live and came after a loss (the loss was handled:
 * lost_handled is cleared by the reset), the node is of the new session:
 * a mark of the old session's loss, set while this attempt ran, no longer
 * applies (else the next attempt would start over and queue a second node
 * behind this one, which nobody would delete). A node made through an
 * older handle keeps the mark: it goes with that session. */
static void node_made_locked(dlock__zk *z, zk_node *n, uint64_t gen) {
  if (ext(n)->lost && n->count == 0 && gen == z->gen && z->live &&
      !z->expired && !z->lost_handled)
    ext(n)->lost = false;
}

static zk_node *node_find_locked(dlock__zk *z, zk_side side, const char *name,
                                 const char *owner) {
  for (zk_node *n = z->nodes; n; n = n->next)
    if (n->side == side && strcmp(n->name, name) == 0 &&
        strcmp(n->owner, owner) == 0)
      return n;
  return NULL;
}

static zk_node *node_add_locked(dlock__zk *z, zk_side side, const char *name,
                                const char *owner) {
  zk_node_ext *e = dlock__calloc(1, sizeof *e);
  if (!e)
    return NULL;
  zk_node *n = &e->n;
  n->side = side;
  if (!(n->name = dlock__strdup(name)) || !(n->owner = dlock__strdup(owner)) ||
      dlock__uuid(n->uuid)) {
    dlock__free(n->name);
    dlock__free(n->owner);
    dlock__free(e);
    return NULL;
  }
  n->next = z->nodes;
  z->nodes = n;
  return n;
}

static void sent_detach_locked(zk_sent *o);

static void node_remove_locked(dlock__zk *z, zk_node *n) {
  if (ext(n)->sent)
    sent_detach_locked(ext(n)->sent);
  for (zk_node **p = &z->nodes; *p; p = &(*p)->next)
    if (*p == n) {
      *p = n->next;
      break;
    }
  dlock__free(n->name);
  dlock__free(n->owner);
  dlock__free(n->path);
  dlock__free(ext(n));
}

/* A record whose session ended starts over (a new protected id). */
static void node_restart_locked(zk_node *n) {
  dlock__free(n->path);
  n->path = NULL;
  n->count = 0;
  n->czxid = 0;
  n->releasing = false;
  ext(n)->lost = false;
  ext(n)->unsure = false;
  dlock__uuid(n->uuid);
}

static void sent_end_all_locked(dlock__zk *z);

void dlock__zk_nodes_forget_locked(dlock__zk *z) {
  for (zk_node *n = z->nodes; n; n = n->next)
    ext(n)->lost = true;
  sent_end_all_locked(z); /* (their outcomes: dlock__zk_sent_report) */
}

void dlock__zk_nodes_free_locked(dlock__zk *z) {
  while (z->nodes)
    node_remove_locked(z, z->nodes);
}

/* mu held: n's node was made (or found) by the server, as r says: its
 * path and token are taken from r. */
static void node_created_locked(dlock__zk *z, zk_node *n, zk_result *r) {
  dlock__free(n->path);
  n->path = r->path;
  r->path = NULL;
  n->czxid = r->stat.czxid;
  ext(n)->unsure = false;
  node_made_locked(z, n, r->gen);
}

/* ------------------------------------------------------------- children */

static const char *after_last(const char *s, const char *mark) {
  const char *found = NULL, *p = s;
  size_t len = strlen(mark);
  while ((p = strstr(p, mark)) != NULL) {
    found = p + len;
    p += 1;
  }
  return found;
}

/* The text children sort by (Curator's fixForSorting). */
static const char *sort_key(const char *child, bool rw) {
  if (!rw) {
    const char *k = after_last(child, MUTEX_MARK);
    return k ? k : child;
  }
  const char *r = after_last(child, READ_MARK);
  const char *w = after_last(child, WRITE_MARK);
  const char *k = r && w ? (r > w ? r : w) : r ? r : w;
  return k ? k : child;
}

static int cmp_mutex(const void *a, const void *b) {
  return strcmp(sort_key(*(char *const *)a, false),
                sort_key(*(char *const *)b, false));
}

static int cmp_rw(const void *a, const void *b) {
  return strcmp(sort_key(*(char *const *)a, true),
                sort_key(*(char *const *)b, true));
}

static bool is_write(const char *child) {
  return strstr(child, WRITE_MARK) != NULL;
}

/* Where the node `mine` stands among a lock's sorted children: *me its
 * index (-1: not there); true when it holds, else *watch is the node it
 * waits for (the one before it; for a read node the first write node). */
static bool node_holds(const zk_result *kids, zk_side side, const char *mine,
                       int *me, int *watch) {
  int first_write = -1;
  *me = -1;
  for (int i = 0; i < kids->nchildren; i++) {
    if (*me < 0 && strcmp(kids->children[i], mine) == 0)
      *me = i;
    if (first_write < 0 && side != ZK_MUTEX && is_write(kids->children[i]))
      first_write = i;
  }
  if (side == ZK_READ) {
    bool holds = first_write < 0 || first_write > *me;
    *watch = holds ? -1 : first_write;
    return holds;
  }
  *watch = *me - 1;
  return *me == 0;
}

static int check_and_sort(dlock__zk *z, const char *dir, bool rw,
                          const char *name, zk_result *r);

/* Lists and sorts the lock's children. ZNONODE: an empty list. */
static int list_sorted(dlock__zk *z, const char *dir, bool rw, const char *name,
                       zk_result *r) {
  int rc = dlock__zk_children(z, dir, r);
  if (rc)
    return rc;
  return check_and_sort(z, dir, rw, name, r);
}

/* A listing's answer, checked (ZNONODE: empty; nodes of the other kind of
 * lock: DLOCK_EWRONGTYPE) and sorted; cleared on an error. */
static int check_and_sort(dlock__zk *z, const char *dir, bool rw,
                          const char *name, zk_result *r) {
  int rc;
  if (r->rc == ZNONODE) {
    r->rc = ZOK;
    return 0;
  }
  if (r->rc != ZOK) {
    rc = dlock__zk_error(z, r->rc, "list children of", dir);
    dlock__zk_result_clear(r);
    return rc;
  }
  for (int i = 0; i < r->nchildren; i++) {
    const char *c = r->children[i];
    bool rw_node = strstr(c, READ_MARK) || strstr(c, WRITE_MARK);
    bool mutex_node = !rw_node && strstr(c, MUTEX_MARK);
    if ((rw && mutex_node) || (!rw && rw_node)) {
      dlock__zk_result_clear(r);
      dlock__seterr(DLOCK_EWRONGTYPE,
                    "lock '%.200s': %s holds nodes of another kind of "
                    "lock (%s)",
                    name, dir,
                    rw ? "a mutex's lock- nodes"
                       : "a read-write lock's __READ__/__WRIT__ nodes");
      dlock__err_set_worded();
      return DLOCK_EWRONGTYPE;
    }
  }
  if (r->nchildren > 1)
    qsort(r->children, (size_t)r->nchildren, sizeof(char *),
          rw ? cmp_rw : cmp_mutex);
  return 0;
}

void dlock__zk_join(char *out, size_t size, const char *dir,
                    const char *child) {
  int n = snprintf(out, size, "%s/%s", dir, child);
  if (n < 0 || (size_t)n >= size)
    out[size - 1] = '\0';
}

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

/* ------------------------------------------------------------- creates */

/* Curator's creatingParentContainersIfNeeded. */
int dlock__zk_make_parents(dlock__zk *z, const char *dir) {
  char p[PATH_MAX_ZK];
  size_t len = strlen(dir);
  if (len >= sizeof p)
    return dlock__seterr(DLOCK_EINVAL, "path too long: %.200s", dir);
  for (size_t i = 1; i <= len; i++) {
    if (i < len && dir[i] != '/')
      continue;
    memcpy(p, dir, i);
    p[i] = '\0';
    zk_result r;
    int rc = dlock__zk_create(z, p, NULL, ZOO_CONTAINER, &r);
    if (rc)
      return rc;
    int zrc = r.rc;
    dlock__zk_result_clear(&r);
    if (zrc != ZOK && zrc != ZNODEEXISTS)
      return dlock__zk_error(z, zrc, "create", p);
  }
  return 0;
}

/* Deletes the node of a lost session's wait, best effort (ZNONODE: the
 * server had expired that session already). */
static void drop_stale(dlock__zk *z, const char *name, const char *path) {
  zk_result r;
  int rc = dlock__zk_delete(z, path, &r);
  int zrc = rc ? ZOK : r.rc;
  if (!rc)
    dlock__zk_result_clear(&r);
  if (rc || (zrc != ZOK && zrc != ZNONODE))
    dlock__log(z->core, DLOCK_LOG_INFO,
               "lock '%.200s': the node %.300s of the lost session could not "
               "be removed (%s); it goes when the server expires that "
               "session",
               name, path, rc ? dlock_last_error() : zerror(zrc));
  else if (zrc == ZOK)
    dlock__log(z->core, DLOCK_LOG_DEBUG,
               "lock '%.200s': removed the node %.300s of the lost session",
               name, path);
}

/* Looks for our protected node among dir's children: 1 found (path and
 * czxid set under mu), 0 not there, or an error. */
static int find_protected(dlock__zk *z, zk_node *n, const char *dir) {
  zk_result r;
  int rc = dlock__zk_children(z, dir, &r);
  if (rc)
    return rc;
  if (r.rc == ZNONODE) {
    dlock__zk_result_clear(&r);
    return 0;
  }
  if (r.rc != ZOK) {
    rc = dlock__zk_error(z, r.rc, "list children of", dir);
    dlock__zk_result_clear(&r);
    return rc;
  }
  char prefix[64];
  snprintf(prefix, sizeof prefix, "_c_%s-", n->uuid);
  char path[PATH_MAX_ZK];
  path[0] = '\0';
  for (int i = 0; i < r.nchildren; i++)
    if (strncmp(r.children[i], prefix, strlen(prefix)) == 0)
      dlock__zk_join(path, sizeof path, dir, r.children[i]);
  dlock__zk_result_clear(&r);
  if (!path[0])
    return 0;
  if ((rc = dlock__zk_get(z, path, NULL, NULL, &r)))
    return rc;
  int zrc = r.rc;
  int64_t czxid = r.stat.czxid;
  int64_t eowner = r.stat.ephemeralOwner;
  uint64_t gen = r.gen;
  dlock__zk_result_clear(&r);
  if (zrc == ZNONODE)
    return 0;
  if (zrc != ZOK)
    return dlock__zk_error(z, zrc, "read", path);
  pthread_mutex_lock(&z->mu);
  bool ours = gen == z->gen && eowner == z->session_id;
  pthread_mutex_unlock(&z->mu);
  if (!ours) {
    /* made by a create of a session given up since (its answer lost, the
     * server keeping that session until it expires it): not ours to use,
     * it goes with that session; removed now, it holds up nobody */
    drop_stale(z, n->name, path);
    return 0;
  }
  char *copy = dlock__strdup(path);
  if (!copy)
    return DLOCK_ENOMEM;
  pthread_mutex_lock(&z->mu);
  dlock__free(n->path);
  n->path = copy;
  n->czxid = czxid;
  ext(n)->unsure = false;
  node_made_locked(z, n, gen);
  pthread_mutex_unlock(&z->mu);
  return 1;
}

/* Creates n's node under dir: `<dir>/_c_<uuid>-<mark><suffix>`, sequential
 * unless suffix is given (a downgrade's read node). With kids, the create
 * is sent together with a listing of dir (dlock__zk_create_and_list): *listed
 * says whether *kids holds that listing (then the caller's to clear). */
#define NODE_DATA_MAX (256 + DLOCK_HOLDER_INFO_MAX)

/* The path of n's node under dir, `<dir>/_c_<uuid>-<mark><suffix>`
 * (sequential unless suffix is given), into path (PATH_MAX_ZK bytes), and
 * its data into data (NODE_DATA_MAX): the owner, and the holder info on a
 * line after it. */
static int node_request(const dlock__zk *z, const zk_node *n, const char *dir,
                        const char *suffix, char *path, char *data) {
  int len = snprintf(path, PATH_MAX_ZK, "%s/_c_%s-%s%s", dir, n->uuid,
                     mark_of(n->side), suffix ? suffix : "");
  if (len < 0 || (size_t)len >= PATH_MAX_ZK)
    return dlock__seterr(DLOCK_EINVAL, "lock path too long: %.200s", dir);
  snprintf(data, NODE_DATA_MAX, "%s%s%s", n->owner,
           z->holder_info[0] ? "\n" : "", z->holder_info);
  return 0;
}

static int create_node(dlock__zk *z, zk_node *n, const char *dir,
                       const char *suffix, zk_result *kids, bool *listed) {
  if (listed)
    *listed = false;
  char path[PATH_MAX_ZK], d[NODE_DATA_MAX];
  int rc = node_request(z, n, dir, suffix, path, d);
  if (rc)
    return rc;
  int flags = suffix ? ZOO_EPHEMERAL : ZOO_EPHEMERAL_SEQUENTIAL;
  for (int round = 0; round < 4; round++) {
    pthread_mutex_lock(&z->mu);
    bool unsure = ext(n)->unsure;
    pthread_mutex_unlock(&z->mu);
    if (unsure) { /* an earlier create may have made it */
      int found = find_protected(z, n, dir);
      if (found != 0)
        return found < 0 ? found : 0;
    }
    zk_result r;
    if (kids) {
      rc = dlock__zk_create_and_list(z, path, d, flags, dir, &r, kids);
      if (!rc && r.rc == ZOK && kids->rc == ZOK)
        *listed = true;
      else if (!rc)
        dlock__zk_result_clear(kids);
    } else {
      rc = dlock__zk_create(z, path, d, flags, &r);
    }
    if (rc == DLOCK_EIOTIMEOUT) { /* sent; the answer did not come */
      pthread_mutex_lock(&z->mu);
      ext(n)->unsure = true;
      pthread_mutex_unlock(&z->mu);
      return rc;
    }
    if (rc)
      return rc;
    if (r.rc == ZOK) {
      pthread_mutex_lock(&z->mu);
      node_created_locked(z, n, &r);
      pthread_mutex_unlock(&z->mu);
      dlock__zk_result_clear(&r);
      return 0;
    }
    int zrc = r.rc;
    dlock__zk_result_clear(&r);
    if (zrc == ZNONODE) {
      if ((rc = dlock__zk_make_parents(z, dir)))
        return rc;
    } else if (zrc == ZCONNECTIONLOSS || zrc == ZOPERATIONTIMEOUT) {
      pthread_mutex_lock(&z->mu);
      ext(n)->unsure = true;
      pthread_mutex_unlock(&z->mu);
    } else if (zrc == ZNODEEXISTS && suffix) {
      /* our own downgrade node from an earlier, unsure create */
      char *copy = dlock__strdup(path);
      if (!copy)
        return DLOCK_ENOMEM;
      pthread_mutex_lock(&z->mu);
      dlock__free(n->path);
      n->path = copy;
      pthread_mutex_unlock(&z->mu);
      return 0;
    } else {
      return dlock__zk_error(z, zrc, "create", path);
    }
  }
  return dlock__seterr(DLOCK_EUNAVAILABLE,
                       "zookeeper %s: could not create a node under "
                       "'%.300s' (the connection kept failing)",
                       z->display, dir);
}

/* mu held: the delete of n's node at path was answered zrc: 0 and the
 * record forgotten (ZNONODE counts as deleted), or the error (the record
 * stays, for a retry). */
static int node_deleted_locked(dlock__zk *z, zk_node *n, int zrc,
                               const char *path) {
  if (zrc != ZOK && zrc != ZNONODE)
    return dlock__zk_error(z, zrc, "delete", path);
  node_remove_locked(z, n);
  return 0;
}

/* Deletes n's node (and forgets the record): 0, or an error (the record
 * stays, for a retry). ZNONODE counts as deleted. */
static int drop_node(dlock__zk *z, zk_node *n, const char *dir) {
  pthread_mutex_lock(&z->mu);
  char *path = n->path ? dlock__strdup(n->path) : NULL;
  bool unsure = ext(n)->unsure;
  pthread_mutex_unlock(&z->mu);
  if (!path && unsure && dir) {
    int found = find_protected(z, n, dir);
    if (found < 0)
      return found;
    pthread_mutex_lock(&z->mu);
    path = n->path ? dlock__strdup(n->path) : NULL;
    pthread_mutex_unlock(&z->mu);
  }
  int rc = 0;
  int zrc = ZOK;
  if (path) {
    zk_result r;
    rc = dlock__zk_delete(z, path, &r);
    zrc = rc ? ZOK : r.rc;
    if (!rc)
      dlock__zk_result_clear(&r);
  }
  if (!rc) {
    pthread_mutex_lock(&z->mu);
    rc = node_deleted_locked(z, n, zrc, path);
    pthread_mutex_unlock(&z->mu);
  }
  dlock__free(path);
  return rc;
}

/* ------------------------------------------------------------ handles */

int dlock__zk_handle_open(void *be, dlock_lock_kind_t kind, const char *name,
                          void **bh) {
  (void)kind;
  char dir[PATH_MAX_ZK];
  *bh = NULL;
  return dlock__zk_lock_path(be, name, dir, sizeof dir);
}

/* ------------------------------------------------------------ acquire */

static int lease_check(dlock__zk *z, const dlock__acquire *a) {
  if (a->lease_ms == z->watchdog_ms)
    return 0;
  return dlock__seterr(DLOCK_ENOTSUP,
                       "lock '%.200s': the zookeeper backend does not "
                       "support fixed leases (%lld ms): a hold lasts until "
                       "its release or the end of the client's session; "
                       "acquire with DLOCK_LEASE_WATCHDOG",
                       a->name, (long long)a->lease_ms);
}

/* A thread holding the write side takes the read side (Curator's
 * downgrade): a plain ephemeral read node named with the write node's
 * digits, which sorts with it. */
static int downgrade(dlock__zk *z, zk_node *n, const char *dir,
                     const char *write_path, int64_t *token) {
  const char *digits = sort_key(base_name(write_path), true);
  int rc = create_node(z, n, dir, digits, NULL, NULL);
  if (rc)
    return rc;
  pthread_mutex_lock(&z->mu);
  n->count = 1;
  *token = 0;
  pthread_mutex_unlock(&z->mu);
  return 1;
}

/* A waiting attempt that meets a dropped connection (a leader election, a
 * member restarting) tries again instead of failing the wait, as Curator's
 * retry loop does. While the session lives its node, if it was created,
 * keeps its place (a protected create finds it again), and the reconnect
 * wakes every waiter. Once the session is lost (the server said so, or
 * the local session timer ran out: an election that outlasts the session,
 * as a stopped leader's does until the followers give up on it) the wait
 * goes on too: the holds were reported lost, a new session is being made,
 * and the next attempt queues a new node on it (at the back); meanwhile a
 * call fails with "not connected" or "closing", which is no refusal. The
 * wait ends on its deadline, a grant or a real refusal; the 200 ms bound
 * is only a safety net. A try, which must not leave a node behind, fails
 * at once as before. */
static int retry_later(dlock__zk *z, const dlock__acquire *a, int rc,
                       int64_t *pttl) {
  if (!a->q || (rc != DLOCK_EUNAVAILABLE && rc != DLOCK_EIOTIMEOUT))
    return rc;
  pthread_mutex_lock(&z->mu);
  bool alive = z->live && !z->expired && !z->lost_handled;
  pthread_mutex_unlock(&z->mu);
  dlock__log(z->core, DLOCK_LOG_INFO, "lock '%.200s': %s; waiting for %s",
             a->name, dlock_last_error(),
             alive ? "the connection to come back" : "a new session");
  *pttl = 200;
  return 0;
}

static int acquire_once(dlock__zk *z, const dlock__acquire *a, int64_t *pttl,
                        int64_t *token);

int dlock__zk_lock_acquire(void *be, const dlock__acquire *a, int64_t *pttl,
                           int64_t *token) {
  dlock__zk *z = be;
  int rc = acquire_once(z, a, pttl, token);
  return rc < 0 ? retry_later(z, a, rc, pttl) : rc;
}

static int acquire_once(dlock__zk *z, const dlock__acquire *a, int64_t *pttl,
                        int64_t *token) {
  int rc = lease_check(z, a);
  if (rc)
    return rc;
  char dir[PATH_MAX_ZK];
  if ((rc = dlock__zk_lock_path(z, a->name, dir, sizeof dir)))
    return rc;
  zk_side side = side_of(a->kind);
  bool rw = side != ZK_MUTEX;
  char *write_path = NULL;

  pthread_mutex_lock(&z->mu);
  zk_node *n = node_find_locked(z, side, a->name, a->owner);
  if (n && ext(n)->lost && n->count == 0 && n->path) {
    /* a wait's node of a session we gave up (the local timer) may still
     * be queued on the server, which expires that session only a session
     * timeout after a new leader took over: removed, it no longer holds
     * up the waiters behind it */
    char *stale = n->path;
    n->path = NULL;
    pthread_mutex_unlock(&z->mu);
    drop_stale(z, a->name, stale);
    dlock__free(stale);
    pthread_mutex_lock(&z->mu);
    n = node_find_locked(z, side, a->name, a->owner);
  }
  if (n && ext(n)->lost)
    node_restart_locked(n);
  if (n && n->count > 0) {
    n->count++;
    *token = n->czxid;
    pthread_mutex_unlock(&z->mu);
    return 1;
  }
  if (side == ZK_WRITE) {
    zk_node *r = node_find_locked(z, ZK_READ, a->name, a->owner);
    if (r && r->count > 0 && !ext(r)->lost) {
      pthread_mutex_unlock(&z->mu);
      return dlock__seterr(DLOCK_EDEADLK,
                           "lock '%.200s': this owner holds the read side; "
                           "it cannot take the write side (release the "
                           "read side first)",
                           a->name);
    }
  } else if (side == ZK_READ) {
    zk_node *w = node_find_locked(z, ZK_WRITE, a->name, a->owner);
    if (w && w->count > 0 && !ext(w)->lost && w->path)
      write_path = dlock__strdup(w->path);
  }
  if (!n && !(n = node_add_locked(z, side, a->name, a->owner))) {
    pthread_mutex_unlock(&z->mu);
    dlock__free(write_path);
    return DLOCK_ENOMEM;
  }
  pthread_mutex_unlock(&z->mu);

  if (write_path) {
    rc = downgrade(z, n, dir, write_path, token);
    dlock__free(write_path);
    if (rc < 0) {
      pthread_mutex_lock(&z->mu);
      bool unsure = ext(n)->unsure;
      if (!unsure)
        node_remove_locked(z, n);
      pthread_mutex_unlock(&z->mu);
    }
    return rc;
  }

  for (int round = 0; round < MAX_ROUNDS; round++) {
    pthread_mutex_lock(&z->mu);
    bool created = n->path != NULL;
    pthread_mutex_unlock(&z->mu);
    /* a first create brings the listing along (one round trip less) */
    zk_result kids;
    bool listed = false;
    if (!created && (rc = create_node(z, n, dir, NULL, &kids, &listed)) != 0)
      goto failed;
    if (listed && (rc = check_and_sort(z, dir, rw, a->name, &kids)) != 0)
      goto failed;
    if (!listed && (rc = list_sorted(z, dir, rw, a->name, &kids)) != 0)
      goto failed;
    pthread_mutex_lock(&z->mu);
    int me, watch;
    bool holds = node_holds(&kids, side, base_name(n->path), &me, &watch);
    if (me < 0 && listed) { /* never expected (see calls.c): list again */
      pthread_mutex_unlock(&z->mu);
      dlock__zk_result_clear(&kids);
      continue;
    }
    if (me < 0) { /* our node is gone (force release, or the session) */
      dlock__free(n->path);
      n->path = NULL;
      pthread_mutex_unlock(&z->mu);
      dlock__zk_result_clear(&kids);
      continue;
    }
    if (holds && ext(n)->lost) {
      /* the node is of a session given up while this attempt ran (made
       * before the loss, or through the old handle before the reset): no
       * grant, it goes with that session. A wait attempts again at once
       * (its next attempt deletes that node and queues a new one); a try
       * leaves. */
      pthread_mutex_unlock(&z->mu);
      dlock__zk_result_clear(&kids);
      if (!a->q) {
        if ((rc = drop_node(z, n, dir)) != 0)
          return rc;
        return dlock__seterr(DLOCK_EUNAVAILABLE,
                             "zookeeper %s: lock '%.200s': the session was "
                             "lost during the acquire",
                             z->display, a->name);
      }
      *pttl = 1;
      return 0;
    }
    if (holds) {
      n->count = 1;
      *token = n->czxid;
      pthread_mutex_unlock(&z->mu);
      dlock__zk_result_clear(&kids);
      return 1;
    }
    pthread_mutex_unlock(&z->mu);
    if (!a->q) { /* no wait: leave at once */
      dlock__zk_result_clear(&kids);
      if ((rc = drop_node(z, n, dir)) != 0)
        return rc;
      *pttl = -1;
      return 0;
    }
    char pred[PATH_MAX_ZK];
    dlock__zk_join(pred, sizeof pred, dir, kids.children[watch]);
    dlock__zk_result_clear(&kids);
    uint64_t id = dlock__zk_wait_watch_id(z, a->owner, a->q->seq);
    zk_result r;
    rc = dlock__zk_get(z, pred, id ? dlock__zk_predecessor_watcher : NULL,
                       (void *)(uintptr_t)id, &r);
    if (rc)
      return rc; /* the node stays: the wait leaves, or comes back */
    int zrc = r.rc;
    dlock__zk_result_clear(&r);
    if (zrc == ZNONODE)
      continue; /* gone meanwhile: look again */
    if (zrc != ZOK)
      return dlock__zk_error(z, zrc, "watch", pred);
    /* -1: a deletion wakes us; without a registered wait (never the
     * case through the core), look again within a second */
    *pttl = id ? -1 : 1000;
    return 0;
  }
  *pttl = 50; /* the children kept changing under us: try again soon */
  return 0;

failed:
  if (!a->q) { /* a try: nothing of ours must stay behind */
    pthread_mutex_lock(&z->mu);
    bool keep = ext(n)->unsure || n->path;
    pthread_mutex_unlock(&z->mu);
    if (!keep || drop_node(z, n, dir) != 0) {
      pthread_mutex_lock(&z->mu);
      if (!ext(n)->unsure && !n->path)
        node_remove_locked(z, n);
      pthread_mutex_unlock(&z->mu);
    }
  }
  return rc;
}

int dlock__zk_lock_leave(void *be, const dlock__acquire *a, uint64_t seq,
                         int64_t *token) {
  (void)seq;
  (void)token;
  dlock__zk *z = be;
  char dir[PATH_MAX_ZK];
  int rc = dlock__zk_lock_path(z, a->name, dir, sizeof dir);
  if (rc)
    return rc;
  pthread_mutex_lock(&z->mu);
  zk_node *n = node_find_locked(z, side_of(a->kind), a->name, a->owner);
  if (n && ext(n)->lost) {
    node_remove_locked(z, n);
    n = NULL;
  }
  bool waiting = n && n->count == 0 && !n->releasing;
  pthread_mutex_unlock(&z->mu);
  if (!waiting)
    return 0;
  /* giving up deletes our place; if we had just become first, the lock
   * passes on to the next in line, as if we had released it */
  rc = drop_node(z, n, dir);
  return rc < 0 ? rc : 0;
}

/* A release's step on the node table (mu held), n its record (or NULL):
 * a DLOCK__REL_* outcome when no round trip is needed, else REL_DELETE
 * with the node's path in path (PATH_MAX_ZK bytes): the record is then
 * marked releasing, so that a retry deletes again. rel->request_id is not
 * needed: a retry finds its record still releasing; the session keeps
 * the hold, not a lease. */
#define REL_DELETE 3
static int release_begin_locked(dlock__zk *z, zk_node *n, char *path) {
  if (n && ext(n)->lost) {
    node_remove_locked(z, n);
    n = NULL;
  }
  if (!n || (n->count == 0 && !n->releasing))
    return DLOCK__REL_NOTOWNER;
  if (n->count > 1) {
    n->count--;
    return DLOCK__REL_DOWN;
  }
  n->count = 0;
  n->releasing = true;
  if (!n->path)
    return DLOCK_ENOMEM;
  snprintf(path, PATH_MAX_ZK, "%s", n->path);
  return REL_DELETE;
}

/* mu held: the release's delete was answered zrc. ZNONODE: someone
 * deleted it (a force release, the session's end); on the core's retry
 * that means our first delete went through. */
static int release_answered_locked(dlock__zk *z, zk_node *n, int zrc,
                                   const char *path) {
  int rc = node_deleted_locked(z, n, zrc, path);
  if (rc)
    return rc; /* the record stays releasing: the retry deletes again */
  return zrc == ZOK ? DLOCK__REL_FREED : DLOCK__REL_NOTOWNER;
}

int dlock__zk_lock_release(void *be, const dlock__release *rel) {
  dlock__zk *z = be;
  char path[PATH_MAX_ZK];
  pthread_mutex_lock(&z->mu);
  zk_node *n = node_find_locked(z, side_of(rel->kind), rel->name, rel->owner);
  int out = release_begin_locked(z, n, path);
  pthread_mutex_unlock(&z->mu);
  if (out != REL_DELETE)
    return out;
  zk_result r;
  int rc = dlock__zk_delete(z, path, &r);
  if (rc)
    return rc; /* the record stays releasing: the retry deletes again */
  int zrc = r.rc;
  dlock__zk_result_clear(&r);
  pthread_mutex_lock(&z->mu);
  out = release_answered_locked(z, n, zrc, path);
  pthread_mutex_unlock(&z->mu);
  return out;
}

/* ------------------------------------------ sent operations (async calls)
 *
 * lock_acquire_send / lock_release_send (backend.h): the common case of a
 * try of a reentrant or fenced lock and of a mutex's release, carried by
 * the completions of sent requests (calls.c) instead of a sleeping
 * thread, keeping the node table as the blocking path does:
 *   acquire: a re-entry counts at once; a first attempt (no record, or a
 *   fresh one) sends its create with the listing (one round trip): first
 *   child, held (its czxid the token); else its node is deleted (a second
 *   round trip) and the try refused;
 *   release: a count above 1 goes down at once; the last one's delete is
 *   sent, and its answer ends it as the blocking release's does.
 * Everything else is the blocking operation's, from the record as it
 * stands (DLOCK__SEND_BLOCKS): a record waiting, unsure, releasing or
 * lost, the session not usable, a handle being replaced, missing parents
 * (ZNONODE), a create whose answer was lost (the record unsure), a
 * listing that failed, a delete that could not go.
 *
 * An operation ends exactly once, under z->mu (`ended`), by whichever
 * comes first: its last answer, its deadline (the command timeout, kept by
 * the event loop: dlock__zk_sent_expire; an unanswered create leaves the
 * record unsure, as create_node's timeout does), the session's loss or
 * the backend's close (dlock__zk_nodes_forget_locked: DLOCK_EUNAVAILABLE,
 * as a blocking request cut by them). Its done runs after z->mu is
 * released. An answer that comes after the end touches nothing but its
 * own result and the operation's reference count: the operation is freed
 * by whoever drops the last reference (one per answer to come, one until
 * done has run). Its record points back at it (zk_node_ext.sent), so that
 * nothing else sends on that record meanwhile and a record removed under
 * it is detached rather than left dangling. */

enum { SENT_CREATE = 0, SENT_LIST = 1, SENT_DELETE = 2 }; /* answer indexes */

struct zk_sent {
  zk_sent *prev, *next; /* z->sent_head..tail, oldest first; then ended */
  dlock__zk *z;
  zk_node *n; /* its record; NULL once detached */
  dlock__sent_fn done;
  void *arg;
  int refs;  /* answers to come, + 1 until done has run */
  int phase; /* the answer it waits for */
  bool release;
  bool listed; /* the listing went with the create */
  bool ended;
  int64_t deadline;
  int rc;        /* an end by the deadline or the session's loss */
  char why[512]; /* (the loss's detail) */
  char dir[PATH_MAX_ZK];
  char path[PATH_MAX_ZK]; /* the node to create, then to delete */
};

static zk_sent *sent_new(dlock__zk *z, dlock__sent_fn done, void *arg) {
  zk_sent *o = dlock__reallocarray(NULL, 1, sizeof *o);
  if (!o)
    return NULL;
  o->prev = o->next = NULL;
  o->z = z;
  o->n = NULL;
  o->done = done;
  o->arg = arg;
  o->refs = 1;
  o->phase = SENT_CREATE;
  o->release = o->listed = o->ended = false;
  o->deadline = 0;
  o->rc = 0;
  o->why[0] = o->dir[0] = o->path[0] = '\0';
  return o;
}

static void sent_detach_locked(zk_sent *o) {
  if (o->n)
    ext(o->n)->sent = NULL;
  o->n = NULL;
}

/* mu held: o goes in flight on record n, until its deadline. */
static void sent_begin_locked(dlock__zk *z, zk_sent *o, zk_node *n, int phase,
                              int answers) {
  o->n = n;
  ext(n)->sent = o;
  o->phase = phase;
  o->refs += answers;
  o->deadline = dlock__deadline_after(z->command_timeout);
  o->prev = z->sent_tail;
  if (z->sent_tail)
    z->sent_tail->next = o;
  else
    z->sent_head = o;
  z->sent_tail = o;
}

/* mu held: o is no longer in flight (its done is the caller's to run). */
static void sent_end_locked(dlock__zk *z, zk_sent *o) {
  o->ended = true;
  sent_detach_locked(o);
  if (o->prev)
    o->prev->next = o->next;
  else
    z->sent_head = o->next;
  if (o->next)
    o->next->prev = o->prev;
  else
    z->sent_tail = o->prev;
  o->prev = o->next = NULL;
}

/* mu held on entry, released here: drops k references to o, freeing it
 * with the last. */
static void sent_drop_unlock(dlock__zk *z, zk_sent *o, int k) {
  o->refs -= k;
  bool last = o->refs == 0;
  pthread_mutex_unlock(&z->mu);
  if (last)
    dlock__free(o);
}

static void sent_put_unlock(dlock__zk *z, zk_sent *o) {
  sent_drop_unlock(z, o, 1);
}

/* mu held on entry, released here: o ends with (rc, x, y), the thread's
 * error detail set for an error; its done runs. */
static void sent_finish_unlock(dlock__zk *z, zk_sent *o, int rc, int64_t x,
                               int64_t y) {
  sent_end_locked(z, o);
  dlock__sent_fn done = o->done;
  void *arg = o->arg;
  sent_put_unlock(z, o);
  done(arg, rc, x, y);
}

/* mu held: o ends at once (its outcome: dlock__zk_sent_report). */
static void sent_end_later_locked(dlock__zk *z, zk_sent *o, int rc) {
  o->rc = rc;
  sent_end_locked(z, o);
  o->next = z->sent_ended;
  z->sent_ended = o;
}

static void sent_end_all_locked(dlock__zk *z) {
  while (z->sent_head) {
    zk_sent *o = z->sent_head;
    snprintf(o->why, sizeof o->why,
             "zookeeper %.150s: lock '%.200s': the session was lost during the "
             "%s",
             z->display, o->n ? o->n->name : "?",
             o->release ? "release" : "acquire");
    sent_end_later_locked(z, o, DLOCK_EUNAVAILABLE);
  }
}

static const char *sent_what(const zk_sent *o) {
  return o->phase == SENT_CREATE ? "create"
         : o->phase == SENT_LIST ? "list children of"
                                 : "delete";
}

void dlock__zk_sent_report(dlock__zk *z) {
  pthread_mutex_lock(&z->mu);
  zk_sent *o = z->sent_ended;
  z->sent_ended = NULL;
  pthread_mutex_unlock(&z->mu);
  while (o) {
    zk_sent *next = o->next;
    if (o->rc == DLOCK_EIOTIMEOUT)
      dlock__zk_timeout_error(z, sent_what(o),
                              o->phase == SENT_LIST ? o->dir : o->path);
    else if (o->rc != DLOCK__SEND_BLOCKS)
      dlock__seterr(o->rc, "%s", o->why);
    o->done(o->arg, o->rc, -1, 0);
    pthread_mutex_lock(&z->mu);
    sent_put_unlock(z, o);
    o = next;
  }
}

void dlock__zk_sent_drop(dlock__zk *z) {
  pthread_mutex_lock(&z->mu);
  while (z->sent_head)
    sent_end_later_locked(z, z->sent_head, DLOCK_ECLOSED);
  zk_sent *o = z->sent_ended;
  z->sent_ended = NULL;
  pthread_mutex_unlock(&z->mu);
  while (o) { /* a forked child's: their answers never come */
    zk_sent *next = o->next;
    dlock__free(o);
    o = next;
  }
}

void dlock__zk_sent_expire(dlock__zk *z, int64_t now, int64_t *until) {
  pthread_mutex_lock(&z->mu);
  while (z->sent_head && z->sent_head->deadline <= now) {
    zk_sent *o = z->sent_head;
    if (o->phase == SENT_CREATE && o->n)
      ext(o->n)->unsure = true; /* sent; the answer did not come */
    /* a try's node may exist (its create, or its listing or delete,
     * unanswered): the blocking try, run next, finds it by its prefix and
     * deletes it or holds with it, as after its own timeout; a release
     * stays `releasing`, for the core's second release */
    sent_end_later_locked(z, o,
                          o->release ? DLOCK_EIOTIMEOUT : DLOCK__SEND_BLOCKS);
  }
  /* the oldest's deadline; without one, a look at least every command
   * timeout, so that an operation sent meanwhile is seen by its own */
  int64_t next = z->sent_head ? z->sent_head->deadline
                              : dlock__deadline_after(z->command_timeout);
  if (next < *until)
    *until = next;
  bool ended = z->sent_ended != NULL;
  pthread_mutex_unlock(&z->mu);
  if (ended)
    dlock__zk_sent_report(z);
}

/* The create's answer (mu held): 0 with *more when the listing's comes
 * next, else the outcome. */
static int sent_created_locked(dlock__zk *z, zk_sent *o, zk_result *res,
                               bool *more) {
  zk_node *n = o->n;
  int zrc = res->rc;
  if (zrc == ZOK) {
    node_created_locked(z, n, res);
    if (!o->listed)
      return DLOCK__SEND_BLOCKS; /* (it lists) */
    o->phase = SENT_LIST;
    *more = true;
    return 0;
  }
  if (zrc == ZNONODE) /* the blocking operation makes the parents */
    return DLOCK__SEND_BLOCKS;
  if (zrc == ZCONNECTIONLOSS || zrc == ZOPERATIONTIMEOUT) {
    ext(n)->unsure = true; /* its create looks for the node first */
    return DLOCK__SEND_BLOCKS;
  }
  int rc = zrc == ZSYSTEMERROR
               ? dlock__seterr(DLOCK_ENOMEM, "out of memory reading a reply")
               : dlock__zk_error(z, zrc, "create", o->path);
  if (!ext(n)->unsure && !n->path) /* a try leaves nothing behind */
    node_remove_locked(z, n);
  return rc;
}

/* The listing's answer (mu held): 1 held (*token), 0 with *more when the
 * node's delete is to be sent (a refusal), else DLOCK__SEND_BLOCKS. */
static int sent_listed_locked(dlock__zk *z, zk_sent *o, zk_result *res,
                              int64_t *token, bool *more) {
  zk_node *n = o->n;
  if (res->rc != ZOK || !n->path || ext(n)->lost ||
      check_and_sort(z, o->dir, false, n->name, res) != 0)
    return DLOCK__SEND_BLOCKS; /* (it lists again) */
  int me, watch;
  bool holds = node_holds(res, ZK_MUTEX, base_name(n->path), &me, &watch);
  if (me < 0)
    return DLOCK__SEND_BLOCKS;
  if (holds) {
    n->count = 1;
    *token = n->czxid;
    return 1;
  }
  snprintf(o->path, sizeof o->path, "%s", n->path);
  o->phase = SENT_DELETE;
  *more = true;
  return 0;
}

/* The completion of each request of a sent operation. */
static void sent_then(void *arg, int index, zk_result *res) {
  zk_sent *o = arg;
  dlock__zk *z = o->z;
  pthread_mutex_lock(&z->mu);
  if (o->ended || index != o->phase) { /* too late: only its result */
    dlock__zk_result_clear(res);
    sent_put_unlock(z, o); /* this answer's reference */
    return;
  }
  o->refs--; /* this answer's */
  int64_t token = 0;
  bool more = false;
  int rc = DLOCK__SEND_BLOCKS; /* a record removed under it: blocking */
  if (o->n && index == SENT_CREATE)
    rc = sent_created_locked(z, o, res, &more);
  else if (o->n && index == SENT_LIST)
    rc = sent_listed_locked(z, o, res, &token, &more);
  else if (o->n && o->release)
    rc = release_answered_locked(z, o->n, res->rc, o->path);
  else if (o->n) /* a refused try's node went */
    rc = node_deleted_locked(z, o->n, res->rc, o->path);
  dlock__zk_result_clear(res);
  if (!more) {
    sent_finish_unlock(z, o, rc, -1, token);
    return;
  }
  if (o->phase == SENT_LIST) { /* its answer follows */
    pthread_mutex_unlock(&z->mu);
    return;
  }
  o->refs++; /* the delete's answer, to come */
  pthread_mutex_unlock(&z->mu);
  int zrc;
  if (dlock__zk_send_delete(z, o->path, sent_then, o, SENT_DELETE, &zrc) == 1)
    return;
  pthread_mutex_lock(&z->mu);
  if (o->ended) {          /* (the deadline or the loss came meanwhile) */
    sent_put_unlock(z, o); /* the delete's reference */
    return;
  }
  o->refs--; /* the delete's */
  /* the record keeps its node: the blocking try lists and deletes it */
  sent_finish_unlock(z, o, DLOCK__SEND_BLOCKS, -1, 0);
}

/* After a send that did not (all) go: `answers` of the answers counted
 * will never come. 0 when o goes on or has ended (its done ran or runs),
 * else DLOCK__SEND_BLOCKS, o ended without its done and freed. */
static int sent_unsent(dlock__zk *z, zk_sent *o, int answers, bool drop) {
  pthread_mutex_lock(&z->mu);
  if (o->ended || !drop) { /* its done ran or runs, or an answer comes */
    sent_drop_unlock(z, o, answers);
    return 0;
  }
  zk_node *n = o->n;
  sent_end_locked(z, o);
  /* a fresh record of a try that never went: as the blocking try's
   * failure leaves it (forgotten) */
  if (n && !o->release && !n->path && !ext(n)->unsure && n->count == 0)
    node_remove_locked(z, n);
  sent_drop_unlock(z, o, answers + 1); /* (and its own: the last) */
  return DLOCK__SEND_BLOCKS;
}

int dlock__zk_lock_acquire_send(void *be, const dlock__acquire *a,
                                dlock__sent_fn done, void *arg) {
  dlock__zk *z = be;
  if (a->q || (a->kind != DLOCK_REENTRANT && a->kind != DLOCK_FENCED))
    return DLOCK__SEND_BLOCKS;
  int rc = lease_check(z, a);
  if (rc)
    return rc;
  zk_sent *o = sent_new(z, done, arg);
  if (!o)
    return DLOCK_ENOMEM;
  if ((rc = dlock__zk_lock_path(z, a->name, o->dir, sizeof o->dir))) {
    dlock__free(o);
    return rc;
  }
  char data[NODE_DATA_MAX];
  pthread_mutex_lock(&z->mu);
  zk_node *n = node_find_locked(z, ZK_MUTEX, a->name, a->owner);
  if (n && n->count > 0 && !ext(n)->lost) { /* a re-entry */
    n->count++;
    int64_t token = n->czxid;
    pthread_mutex_unlock(&z->mu);
    dlock__free(o);
    done(arg, 1, -1, token);
    return 0;
  }
  if (!dlock__zk_usable_locked(z) ||
      (n && (ext(n)->lost || ext(n)->unsure || ext(n)->sent || n->path ||
             n->releasing))) {
    pthread_mutex_unlock(&z->mu);
    dlock__free(o);
    return DLOCK__SEND_BLOCKS;
  }
  bool added = !n;
  if (added && !(n = node_add_locked(z, ZK_MUTEX, a->name, a->owner)))
    rc = DLOCK_ENOMEM;
  else if ((rc = node_request(z, n, o->dir, NULL, o->path, data)) && added)
    node_remove_locked(z, n);
  if (rc) {
    pthread_mutex_unlock(&z->mu);
    dlock__free(o);
    return rc;
  }
  o->listed = true;
  sent_begin_locked(z, o, n, SENT_CREATE, 2);
  pthread_mutex_unlock(&z->mu);
  int zrc;
  int nsent = dlock__zk_send_create_and_list(
      z, o->path, data, ZOO_EPHEMERAL_SEQUENTIAL, o->dir, sent_then, o, &zrc);
  if (nsent == 2)
    return 0;
  if (nsent == 0)
    return sent_unsent(z, o, 2, true);
  /* the create went, not the listing: the create's answer ends it */
  pthread_mutex_lock(&z->mu);
  o->listed = false;
  if (!o->ended && o->phase == SENT_LIST) { /* (it came already) */
    o->refs--;
    sent_finish_unlock(z, o, DLOCK__SEND_BLOCKS, -1, 0);
    return 0;
  }
  pthread_mutex_unlock(&z->mu);
  return sent_unsent(z, o, 1, false);
}

int dlock__zk_lock_release_send(void *be, const dlock__release *rel,
                                dlock__sent_fn done, void *arg) {
  dlock__zk *z = be;
  if (side_of(rel->kind) != ZK_MUTEX)
    return DLOCK__SEND_BLOCKS;
  zk_sent *o = sent_new(z, done, arg);
  if (!o)
    return DLOCK_ENOMEM;
  o->release = true;
  pthread_mutex_lock(&z->mu);
  zk_node *n = node_find_locked(z, ZK_MUTEX, rel->name, rel->owner);
  if (n && ext(n)->sent) {
    pthread_mutex_unlock(&z->mu);
    dlock__free(o);
    return DLOCK__SEND_BLOCKS;
  }
  int out = release_begin_locked(z, n, o->path);
  if (out != REL_DELETE || !dlock__zk_usable_locked(z)) {
    /* (not usable: the record stays releasing, the blocking release
     * deletes from there) */
    pthread_mutex_unlock(&z->mu);
    dlock__free(o);
    if (out == REL_DELETE)
      return DLOCK__SEND_BLOCKS;
    if (out >= 0)
      done(arg, out, -1, 0);
    return out < 0 ? out : 0;
  }
  sent_begin_locked(z, o, n, SENT_DELETE, 1);
  pthread_mutex_unlock(&z->mu);
  int zrc;
  if (dlock__zk_send_delete(z, o->path, sent_then, o, SENT_DELETE, &zrc) == 1)
    return 0;
  return sent_unsent(z, o, 1, true);
}

/* ------------------------------------------------------- state, admin */

/* Indexes [0, *nholders) of the sorted children hold the lock. */
static int holders_of(const zk_result *kids, bool rw) {
  if (kids->nchildren == 0)
    return 0;
  if (!rw || is_write(kids->children[0]))
    return 1;
  int n = 0;
  while (n < kids->nchildren && !is_write(kids->children[n]))
    n++;
  return n;
}

int dlock__zk_lock_force_release(void *be, dlock_lock_kind_t kind,
                                 const char *name, bool *deleted) {
  dlock__zk *z = be;
  char dir[PATH_MAX_ZK];
  int rc = dlock__zk_lock_path(z, name, dir, sizeof dir);
  if (rc)
    return rc;
  bool rw = side_of(kind) != ZK_MUTEX;
  zk_result kids;
  if ((rc = list_sorted(z, dir, rw, name, &kids)))
    return rc;
  int nh = holders_of(&kids, rw);
  *deleted = false;
  for (int i = 0; i < nh && !rc; i++) {
    char path[PATH_MAX_ZK];
    dlock__zk_join(path, sizeof path, dir, kids.children[i]);
    zk_result r;
    if ((rc = dlock__zk_delete(z, path, &r)))
      break;
    if (r.rc == ZOK)
      *deleted = true;
    else if (r.rc != ZNONODE)
      rc = dlock__zk_error(z, r.rc, "delete", path);
    dlock__zk_result_clear(&r);
  }
  dlock__zk_result_clear(&kids);
  return rc;
}

int dlock__zk_lock_query(void *be, dlock_lock_kind_t kind, const char *name,
                         const char *owner, dlock__lock_query q, int64_t *out) {
  dlock__zk *z = be;
  char dir[PATH_MAX_ZK];
  int rc = dlock__zk_lock_path(z, name, dir, sizeof dir);
  if (rc)
    return rc;
  if (q == DLOCK__Q_COUNT || q == DLOCK__Q_HELD) {
    pthread_mutex_lock(&z->mu);
    zk_node *n = node_find_locked(z, side_of(kind), name, owner);
    int64_t count = n && !ext(n)->lost ? n->count : 0;
    char *path = count > 0 && n->path ? dlock__strdup(n->path) : NULL;
    pthread_mutex_unlock(&z->mu);
    if (count > 0 && path) { /* the server's truth: is the node there? */
      zk_result r;
      rc = dlock__zk_get(z, path, NULL, NULL, &r);
      dlock__free(path);
      if (rc)
        return rc;
      if (r.rc == ZNONODE)
        count = 0;
      else if (r.rc != ZOK)
        rc = dlock__zk_error(z, r.rc, "read", dir);
      dlock__zk_result_clear(&r);
      if (rc)
        return rc;
    } else {
      dlock__free(path);
    }
    *out = q == DLOCK__Q_COUNT ? count : count > 0;
    return 0;
  }
  zk_result kids;
  if ((rc = list_sorted(z, dir, side_of(kind) != ZK_MUTEX, name, &kids)))
    return rc;
  bool locked = kids.nchildren > 0;
  dlock__zk_result_clear(&kids);
  *out = q == DLOCK__Q_LOCKED ? locked : locked ? -1 : -2;
  return 0;
}

/* The owner shown for a node: its data's first line when it is a dlock
 * owner, else its session (a Curator node holds the host's address); and
 * in *info what follows that line (a dlock client's holder info), or NULL.
 */
static char *node_owner(dlock__zk *z, const char *dir, const char *child,
                        int64_t *czxid, char **info) {
  char path[PATH_MAX_ZK];
  dlock__zk_join(path, sizeof path, dir, child);
  zk_result r;
  *czxid = 0;
  *info = NULL;
  if (dlock__zk_get(z, path, NULL, NULL, &r) != 0)
    return dlock__strdup("?");
  char *s;
  const char *nl = r.rc == ZOK && r.data_len > 0
                       ? memchr(r.data, '\n', (size_t)r.data_len)
                       : NULL;
  int olen = nl ? (int)(nl - r.data) : r.data_len;
  bool printable = r.rc == ZOK && olen > 0 && olen < 200;
  for (int i = 0; printable && i < olen; i++)
    if ((unsigned char)r.data[i] < 0x20 || (unsigned char)r.data[i] > 0x7e)
      printable = false;
  if (r.rc != ZOK)
    s = dlock__strdup("(gone)");
  else if (printable && memchr(r.data, ':', (size_t)olen))
    s = dlock__asprintf("%.*s", olen, r.data);
  else
    s = dlock__asprintf("session 0x%llx",
                        (unsigned long long)r.stat.ephemeralOwner);
  if (printable && nl && r.data_len - olen - 1 > 0 &&
      r.data_len - olen - 1 <= DLOCK_HOLDER_INFO_MAX)
    *info = dlock__strndup(nl + 1, (size_t)(r.data_len - olen - 1));
  if (r.rc == ZOK)
    *czxid = r.stat.czxid;
  dlock__zk_result_clear(&r);
  return s;
}

/* One listing of the lock's nodes and a read of each; *vanished tells
 * whether a listed node was gone by the time it was read (its owner is
 * then "(gone)"). */
static int state_once(dlock__zk *z, const char *dir, dlock_lock_kind_t kind,
                      const char *name, dlock_lock_state_t **out,
                      bool *vanished);

int dlock__zk_lock_state(void *be, dlock_lock_kind_t kind, const char *name,
                         dlock_lock_state_t **out) {
  dlock__zk *z = be;
  char dir[PATH_MAX_ZK];
  int rc = dlock__zk_lock_path(z, name, dir, sizeof dir);
  if (rc)
    return rc;
  /* a node listed but deleted before it was read (its owner released
   * between the two round trips) is no holder: list again, a few times
   * at most, rather than show an owner "(gone)" */
  for (int tries = 1;; tries++) {
    bool vanished = false;
    rc = state_once(z, dir, kind, name, out, &vanished);
    if (rc || !vanished || tries >= 4)
      return rc;
    dlock_lock_state_free(*out);
    *out = NULL;
  }
}

static int state_once(dlock__zk *z, const char *dir, dlock_lock_kind_t kind,
                      const char *name, dlock_lock_state_t **out,
                      bool *vanished) {
  int rc;
  bool rw = side_of(kind) != ZK_MUTEX;
  zk_result kids;
  if ((rc = list_sorted(z, dir, rw, name, &kids)))
    return rc;
  dlock_lock_state_t *st = dlock__calloc(1, sizeof *st);
  int n = kids.nchildren < STATE_MAX ? kids.nchildren : STATE_MAX;
  int nh = holders_of(&kids, rw);
  if (!st || !(st->name = dlock__strdup(name)))
    goto oom;
  static const char *const kinds[] = {"reentrant", "fair", "fenced", "read",
                                      "write"};
  st->kind = nh == 0 ? "free"
             : rw    ? (is_write(kids.children[0]) ? "write" : "read")
                     : kinds[kind];
  st->ttl_ms = nh ? -1 : -2;
  if (nh && !(st->holders = dlock__calloc((size_t)nh, sizeof *st->holders)))
    goto oom;
  if (n > nh &&
      !(st->waiters = dlock__calloc((size_t)(n - nh), sizeof(char *))))
    goto oom;
  if (!(st->holder_infos =
            dlock__calloc(nh ? (size_t)nh : 1, sizeof(char *))) ||
      !(st->waiter_infos =
            dlock__calloc(n > nh ? (size_t)(n - nh) : 1, sizeof(char *))))
    goto oom;
  for (int i = 0; i < n; i++) {
    int64_t czxid = 0;
    char *info = NULL;
    char *who = node_owner(z, dir, kids.children[i], &czxid, &info);
    if (!who) {
      dlock__free(info);
      goto oom;
    }
    if (strcmp(who, "(gone)") == 0)
      *vanished = true;
    if (i < nh)
      st->holder_infos[st->nholders] = info;
    else
      st->waiter_infos[st->nwaiters] = info;
    if (i < nh) {
      st->holders[st->nholders].owner = who;
      st->holders[st->nholders].count = 1;
      st->holders[st->nholders].side =
          rw ? (is_write(kids.children[i]) ? "write" : "read") : NULL;
      st->nholders++;
      if (i == 0 && kind == DLOCK_FENCED)
        st->token = czxid;
    } else {
      st->waiters[st->nwaiters++] = who;
    }
  }
  dlock__zk_result_clear(&kids);
  *out = st;
  return 0;
oom:
  dlock__zk_result_clear(&kids);
  dlock_lock_state_free(st);
  return DLOCK_ENOMEM;
}
