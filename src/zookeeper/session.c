/*
 * session.c - the ZooKeeper backend's session: URL, open and close, the
 * session watcher, the local session timer, the log bridge, the ops table.
 *
 * URL: zookeeper://host[:port][,host[:port]...][/chroot][?base=/path]
 * (zk:// is the same). Port 2181 by default. A lock NAME starting with '/'
 * is a full path (as Curator users write it); any other NAME lives under
 * the base path, /dlock/locks unless ?base= says otherwise.
 *
 * Session: one session per client, asked for with the session timeout
 * option (default 60000 ms, Curator's). open waits for CONNECTED within the
 * connect timeout. When the connection drops the session is SUSPENDED:
 * holds may still be valid and are kept. It is LOST when the server says
 * it expired (on reconnect: dlock__holds_session_lost), or when the core's
 * loss clock (core/session.h) runs out. The backend tells that clock what
 * the server proved: a new session, each answered request (alive until
 * its send time + the negotiated timeout), the connection up (it vouches:
 * the clock is paused) or down (alive until a third of the timeout after
 * the drop: suspended_bound). So the loss is reported before the server
 * can have expired the session and given the lock to anyone else
 * (Curator's own timer waits the whole timeout, which is later than the
 * server's expiry). On LOST every hold is reported, waits
 * are woken to retry, and the dialling worker closes the handle and opens
 * a new session (the old handle never reconnects, so no node of the old
 * session can come back to life).
 *
 * Threads: the watcher runs on libzookeeper's completion thread; it takes
 * z->mu briefly and makes up-calls (poke, wait wakes). loop_prepare runs
 * on the event loop, never blocks, and reports losses with no mutex of
 * ours held; it also ends the sent operations (locks.c) that the loss
 * ended or whose command timeout passed, and wakes the loop by the next
 * such deadline. The handle reset runs on the dialling worker with zh_lock
 * write-locked (callers wait for it on their next request).
 *
 * Logging: libzookeeper's log callback has no context argument, so each
 * backend gets one of LOG_SLOTS trampolines bound to it for the life of its
 * handles; its messages go to dlock__log at the level they carry. A client
 * beyond LOG_SLOTS live ones gets a trampoline that drops messages. Nothing
 * reaches stderr either way.
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/uri.h"
#include "zookeeper/zk.h"

#define DEFAULT_PORT 2181
#define DEFAULT_SESSION_MS 60000
#define DEFAULT_BASE "/dlock/locks"

/* ------------------------------------------------------------- logging */

#define LOG_SLOTS 32
static _Atomic(dlock__zk *) log_slots[LOG_SLOTS];

static void log_route(int slot, const char *msg) {
  dlock__zk *z = slot >= 0 ? atomic_load(&log_slots[slot]) : NULL;
  if (!z || !msg)
    return;
  /* "<time>:<pid>(0x<tid>):ZOO_<LEVEL>@<func>@<line>: <text>" */
  const char *at = strstr(msg, "ZOO_");
  dlock_log_level_t level = DLOCK_LOG_DEBUG;
  if (at) {
    if (strncmp(at, "ZOO_ERROR", 9) == 0)
      level = DLOCK_LOG_ERROR;
    else if (strncmp(at, "ZOO_WARN", 8) == 0)
      level = DLOCK_LOG_WARN;
    /* the library's INFO lines (environment, every connection) are
     * debugging detail for a dlock user */
  }
  const char *text = at ? at : msg;
  size_t n = strcspn(text, "\n");
  dlock__log(z->core, level, "zookeeper: %.*s", (int)n, text);
}

#define TRAMPOLINE(i)                                                          \
  static void log_cb_##i(const char *m) { log_route(i, m); }
TRAMPOLINE(0)
TRAMPOLINE(1)
TRAMPOLINE(2)
TRAMPOLINE(3)
TRAMPOLINE(4)
TRAMPOLINE(5)
TRAMPOLINE(6)
TRAMPOLINE(7)
TRAMPOLINE(8)
TRAMPOLINE(9)
TRAMPOLINE(10)
TRAMPOLINE(11)
TRAMPOLINE(12)
TRAMPOLINE(13)
TRAMPOLINE(14)
TRAMPOLINE(15)
TRAMPOLINE(16)
TRAMPOLINE(17)
TRAMPOLINE(18)
TRAMPOLINE(19)
TRAMPOLINE(20)
TRAMPOLINE(21)
TRAMPOLINE(22)
TRAMPOLINE(23)
TRAMPOLINE(24)
TRAMPOLINE(25)
TRAMPOLINE(26)
TRAMPOLINE(27)
TRAMPOLINE(28)
TRAMPOLINE(29)
TRAMPOLINE(30)
TRAMPOLINE(31)
static void log_drop(const char *m) { (void)m; }

static const log_callback_fn log_cbs[LOG_SLOTS] = {
    log_cb_0,  log_cb_1,  log_cb_2,  log_cb_3,  log_cb_4,  log_cb_5,  log_cb_6,
    log_cb_7,  log_cb_8,  log_cb_9,  log_cb_10, log_cb_11, log_cb_12, log_cb_13,
    log_cb_14, log_cb_15, log_cb_16, log_cb_17, log_cb_18, log_cb_19, log_cb_20,
    log_cb_21, log_cb_22, log_cb_23, log_cb_24, log_cb_25, log_cb_26, log_cb_27,
    log_cb_28, log_cb_29, log_cb_30, log_cb_31};

static int log_slot_take(dlock__zk *z) {
  for (int i = 0; i < LOG_SLOTS; i++) {
    dlock__zk *none = NULL;
    if (atomic_compare_exchange_strong(&log_slots[i], &none, z))
      return i;
  }
  return -1;
}

static log_callback_fn log_cb(const dlock__zk *z) {
  return z->log_slot >= 0 ? log_cbs[z->log_slot] : log_drop;
}

/* ----------------------------------------------------------------- URL */

static bool path_ok(const char *p) {
  /* ZooKeeper's rules: absolute, no empty, "." or ".." component, no
   * trailing '/' (except "/" itself), printable */
  if (p[0] != '/')
    return false;
  if (p[1] == '\0')
    return true;
  for (const char *c = p; *c; c++) {
    if ((unsigned char)*c < 0x20 || *c == 0x7f)
      return false;
    if (*c == '/') {
      const char *next = c + 1;
      size_t len = strcspn(next, "/");
      if (len == 0)
        return false;
      if ((len == 1 && next[0] == '.') ||
          (len == 2 && next[0] == '.' && next[1] == '.'))
        return false;
    }
  }
  return true;
}

#define ZK_URL_FORM                                                            \
  "zookeeper://host[:port][,host[:port]...][/chroot][?base=/path]"

static int url_error(const char *what) {
  return dlock__seterr(DLOCK_EURL, "bad URL: %s (expected " ZK_URL_FORM ")",
                       what);
}

/* zookeeper:// or zk:// (the registry chose this backend by the scheme),
 * cut by the core's splitter; this reads the host list, the chroot and
 * ?base=. */
static int parse_url(dlock__zk *z, const char *url) {
  static const dlock__uri_rules rules = {.example = ZK_URL_FORM,
                                         .default_port = DEFAULT_PORT,
                                         .min_hosts = 1,
                                         .max_hosts = DLOCK__URI_MAX_HOSTS,
                                         .example_always = true};
  dlock__uri u;
  int rc = dlock__uri_split(url, &rules, &u);
  if (rc)
    return rc;
  if (u.has_userinfo)
    return dlock__seterr(DLOCK_ENOTSUP,
                         "bad URL: the zookeeper backend does not support "
                         "credentials in the URL yet (digest or SASL "
                         "authentication)");
  char hosts[1024];
  size_t used = 0;
  for (size_t i = 0; i < u.nhosts; i++) {
    const dlock__uri_host *h = &u.hosts[i];
    if (!h->ipv6)
      for (size_t k = 0; k < h->name.n; k++)
        if (!(isalnum((unsigned char)h->name.p[k]) ||
              strchr(".-_", h->name.p[k])))
          return url_error("bad character in a host name");
    int w = snprintf(hosts + used, sizeof hosts - used, "%s%s%.*s%s:%d",
                     i ? "," : "", h->ipv6 ? "[" : "", (int)h->name.n,
                     h->name.p, h->ipv6 ? "]" : "", h->port);
    if (w < 0 || (size_t)w >= sizeof hosts - used)
      return url_error("host list too long");
    used += (size_t)w;
  }
  /* chroot */
  char chroot[512] = "";
  if (u.path.n) {
    size_t len = u.path.n;
    if (len >= sizeof chroot)
      return url_error("chroot too long");
    memcpy(chroot, u.path.p, len);
    chroot[len] = '\0';
    if (len > 1 && chroot[len - 1] == '/')
      chroot[--len] = '\0';
    if (len > 1 && !path_ok(chroot))
      return url_error("bad chroot path (empty, '.' or '..' component)");
    if (len == 1)
      chroot[0] = '\0';
  }
  snprintf(z->base, sizeof z->base, "%s", DEFAULT_BASE);
  if (u.has_fragment)
    return url_error("a fragment ('#') means nothing here");
  dlock__uri_query q;
  dlock__uri_query_begin(&q, &u);
  while ((rc = dlock__uri_query_next(&q)) == 1) {
    if (strcmp(q.key, "base") != 0 || !q.has_value)
      return url_error("unknown query parameter (only base=/path)");
    size_t vl = strlen(q.value);
    if (vl >= sizeof z->base)
      return url_error("base path too long");
    memcpy(z->base, q.value, vl + 1);
    size_t bl = strlen(z->base);
    if (bl > 1 && z->base[bl - 1] == '/')
      z->base[bl - 1] = '\0';
    if (!path_ok(z->base))
      return url_error("base must be an absolute ZooKeeper path "
                       "(?base=/path)");
  }
  if (rc)
    return rc;
  int full = snprintf(z->hosts, sizeof z->hosts, "%s%s", hosts, chroot);
  if (full < 0 || (size_t)full >= sizeof z->hosts)
    return url_error("host list too long");
  int shown = snprintf(z->display, sizeof z->display, "zookeeper://%s%s", hosts,
                       chroot);
  if (shown < 0 || (size_t)shown >= sizeof z->display)
    return url_error("host list too long");
  return 0;
}

int dlock__zk_lock_path(const dlock__zk *z, const char *name, char *out,
                        size_t size) {
  int n;
  if (name[0] == '/')
    n = snprintf(out, size, "%s", name);
  else
    n = snprintf(out, size, "%s/%s", strcmp(z->base, "/") ? z->base : "", name);
  if (n < 0 || (size_t)n >= size)
    return dlock__seterr(DLOCK_EINVAL, "lock name '%.200s' is too long", name);
  if (!path_ok(out) || strcmp(out, "/") == 0 ||
      strcmp(out, "/zookeeper") == 0 || strncmp(out, "/zookeeper/", 11) == 0)
    return dlock__seterr(
        DLOCK_EINVAL,
        "lock name '%.200s' is not a valid ZooKeeper path for a lock (path "
        "'%.300s': no empty, '.' or '..' component, no trailing '/', not "
        "/ or under /zookeeper)",
        name, out);
  return 0;
}

/* ------------------------------------------------------------- session */

bool dlock__zk_usable_locked(const dlock__zk *z) {
  /* a session given up (lost_handled) is not used again even if its
   * handle reconnects before the reset replaces it: nodes made on it would
   * go when it is closed */
  return z->state == ZOO_CONNECTED_STATE && !z->expired && !z->lost_handled;
}

bool dlock__zk_await_connected(dlock__zk *z, int64_t deadline) {
  struct timespec ts;
  dlock__deadline_timespec(deadline, &ts);
  pthread_mutex_lock(&z->mu);
  while (!dlock__zk_usable_locked(z) && dlock__now_ms() < deadline)
    pthread_cond_timedwait(&z->cond, &z->mu, &ts);
  bool ok = dlock__zk_usable_locked(z);
  pthread_mutex_unlock(&z->mu);
  return ok;
}

/* How long a suspended session (connection lost, session maybe alive) is
 * sure to live. libzookeeper pings after a third of the session timeout T
 * of silence and declares the connection dead after two thirds without a
 * packet, so it notices a loss at most 2T/3 after its last packet from the
 * server, whose reply proves the server heard us shortly before: the
 * server cannot expire the session earlier than T/3 (less a round trip)
 * after we notice. The core's loss clock (core/session.h) runs to that,
 * less its margin (5% of T), and gives the holds up then, before anyone
 * else can be given the lock. (This assumes the process ran all along: a
 * stopped one notices only once it runs again, so a hold's validity is
 * answered from answered requests alone.) */
static int64_t suspended_bound(int64_t suspended_at, int64_t timeout) {
  return suspended_at + timeout / 3;
}

static void session_watcher(zhandle_t *zh, int type, int state,
                            const char *path, void *ctx) {
  (void)path;
  (void)ctx;
  if (type != ZOO_SESSION_EVENT)
    return;
  dlock__zk *z = (dlock__zk *)zoo_get_context(zh);
  if (!z)
    return;
  bool poke = false, began = false, linked = false, unlinked = false;
  const char *say = NULL;
  pthread_mutex_lock(&z->mu);
  if (zh == z->closing) { /* a handle being closed */
    pthread_mutex_unlock(&z->mu);
    return;
  }
  int was = z->state;
  z->state = state;
  if (state == ZOO_CONNECTED_STATE) {
    const clientid_t *id = zoo_client_id(zh);
    int64_t sid = id ? id->client_id : 0;
    if (z->live && sid != z->session_id)
      say = "new session";
    began = !z->live || sid != z->session_id;
    linked = true;
    z->session_id = sid;
    z->negotiated = zoo_recv_timeout(zh);
    z->live = true;
    if (z->suspended_at)
      say = say ? say : "reconnected within the session";
    z->suspended_at = 0;
    /* a wait may have missed nothing (watches are set again by the
     * library), but one more attempt is cheap and certain */
    dlock__zk_waits_wake_all_locked(z);
  } else if (state == ZOO_EXPIRED_SESSION_STATE ||
             state == ZOO_AUTH_FAILED_STATE) {
    z->expired = true;
    poke = true;
    say = state == ZOO_EXPIRED_SESSION_STATE ? "session expired"
                                             : "authentication failed";
  } else if (was == ZOO_CONNECTED_STATE && z->live && !z->suspended_at) {
    z->suspended_at = dlock__now_ms();
    unlinked = true; /* the core's loss clock runs */
    say = "connection lost (suspended: holds kept until the session "
          "timeout)";
  }
  pthread_cond_broadcast(&z->cond);
  int64_t sid = z->session_id, suspended_at = z->suspended_at;
  int64_t timeout = z->negotiated > 0 ? z->negotiated : z->session_timeout;
  pthread_mutex_unlock(&z->mu);
  if (began)
    dlock__session_begin(z->core, sid, timeout);
  if (linked)
    dlock__session_linked(z->core, sid, true, DLOCK__NEVER);
  if (unlinked)
    dlock__session_linked(z->core, sid, false,
                          suspended_bound(suspended_at, timeout));
  if (say)
    dlock__log(z->core,
               state == ZOO_CONNECTED_STATE ? DLOCK_LOG_INFO : DLOCK_LOG_WARN,
               "zookeeper %s: session 0x%llx: %s", z->display,
               (unsigned long long)sid, say);
  if (poke)
    dlock__client_poke(z->core);
}

static zhandle_t *handle_new(dlock__zk *z) {
  errno = 0;
  return zookeeper_init2(z->hosts, session_watcher, z->session_timeout, NULL, z,
                         0, log_cb(z));
}

/* The dialling worker: replaces a dead session's handle with a new one. */
static void reset_job(void *arg) {
  dlock__zk *z = arg;
  pthread_rwlock_wrlock(&z->zh_lock);
  zhandle_t *old = z->zh;
  pthread_mutex_lock(&z->mu);
  z->closing = old; /* the old handle's last events are ignored */
  z->zh = NULL;
  pthread_mutex_unlock(&z->mu);
  if (old)
    zookeeper_close(old); /* its threads are gone when this returns */
  /* the new session's state is set before its handle exists: the handle's
   * watcher may report CONNECTED before handle_new even returns (a fast
   * server), and that must not be overwritten with "connecting" */
  pthread_mutex_lock(&z->mu);
  z->gen++;          /* what is sent from now on goes on the new session */
  z->closing = NULL; /* (a new handle may reuse its address) */
  z->state = ZOO_CONNECTING_STATE;
  z->live = false;
  z->expired = false;
  z->clock_lost = false;
  z->lost_handled = false;
  z->suspended_at = 0;
  pthread_mutex_unlock(&z->mu);
  zhandle_t *zh = handle_new(z);
  pthread_mutex_lock(&z->mu);
  z->zh = zh;
  if (!zh)
    z->expired = true;
  z->reset_busy = false;
  pthread_cond_broadcast(&z->cond);
  pthread_mutex_unlock(&z->mu);
  pthread_rwlock_unlock(&z->zh_lock);
  if (!zh)
    dlock__log(z->core, DLOCK_LOG_ERROR,
               "zookeeper %s: cannot make a new session handle: %s", z->display,
               strerror(errno));
}

static int zk_loop_prepare(void *be, int64_t now, struct pollfd *fds, int max,
                           int64_t *until) {
  (void)fds;
  (void)max;
  dlock__zk *z = be;
  bool lost = false, reset = false, expired = false;
  int64_t sid = 0;
  pthread_mutex_lock(&z->mu);
  if (!z->lost_handled && z->live && (z->expired || z->clock_lost)) {
    lost = true;
    expired = z->expired;
    z->lost_handled = true;
    sid = z->session_id;
    dlock__zk_nodes_forget_locked(z);
  }
  if (z->lost_handled && !z->reset_busy && z->zh) {
    z->reset_busy = true;
    reset = true;
  }
  pthread_mutex_unlock(&z->mu);
  if (lost) {
    dlock__log(z->core, DLOCK_LOG_WARN,
               "zookeeper %s: session 0x%llx lost (%s): every hold of this "
               "client is lost",
               z->display, (unsigned long long)sid,
               expired ? "expired"
                       : "no server reached within the "
                         "session timeout");
    if (expired) /* (the core's clock marked them itself) */
      dlock__holds_session_lost(z->core, DLOCK_LOST_SESSION);
    pthread_mutex_lock(&z->mu);
    dlock__zk_waits_wake_all_locked(z);
    pthread_mutex_unlock(&z->mu);
    dlock__zk_sent_report(z); /* the sent operations the loss ended */
  }
  /* a sent operation's deadline: the blocking call's command timeout */
  dlock__zk_sent_expire(z, now, until);
  if (reset && dlock__client_run_dial(z->core, reset_job, z) != 0) {
    pthread_mutex_lock(&z->mu);
    z->reset_busy = false; /* tried again on the next turn */
    pthread_mutex_unlock(&z->mu);
    if (now + 1000 < *until)
      *until = now + 1000;
  }
  return 0;
}

static void zk_close(void *be) {
  dlock__zk *z = be;
  if (!z)
    return;
  if (z->pid == getpid()) {
    pthread_rwlock_wrlock(&z->zh_lock);
    zhandle_t *zh = z->zh;
    pthread_mutex_lock(&z->mu);
    z->closing = zh;
    z->zh = NULL;
    pthread_mutex_unlock(&z->mu);
    if (zh)
      zookeeper_close(zh); /* deletes this session's nodes at once */
    pthread_rwlock_unlock(&z->zh_lock);
  } /* else: a forked child; the library's threads are not here: leak */
  if (z->log_slot >= 0)
    atomic_store(&log_slots[z->log_slot], NULL);
  /* every answer has come (zookeeper_close ran the last completions): a
   * sent operation still in flight ends here, and the records go */
  pthread_mutex_lock(&z->mu);
  dlock__zk_nodes_forget_locked(z);
  dlock__zk_nodes_free_locked(z);
  pthread_mutex_unlock(&z->mu);
  if (z->pid == getpid())
    dlock__zk_sent_report(z);
  else
    dlock__zk_sent_drop(z);
  pthread_rwlock_destroy(&z->zh_lock);
  pthread_mutex_destroy(&z->mu);
  pthread_cond_destroy(&z->cond);
  dlock__free(z);
}

static int zk_open(void **be, const char *url, const struct dlock_options *opts,
                   struct dlock_client *core) {
  *be = NULL;
  dlock__zk *z = dlock__calloc(1, sizeof *z);
  if (!z)
    return DLOCK_ENOMEM;
  z->core = core;
  z->pid = getpid();
  z->log_slot = -1;
  pthread_rwlock_init(&z->zh_lock, NULL);
  pthread_mutex_init(&z->mu, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&z->cond, &attr);
  pthread_condattr_destroy(&attr);
  int rc = parse_url(z, url);
  if (!rc && opts->credentials_set)
    rc = dlock__seterr(DLOCK_ENOTSUP,
                       "the zookeeper backend does not support credentials "
                       "yet (digest or SASL authentication): the ensemble "
                       "must accept unauthenticated clients");
  if (rc) {
    zk_close(z);
    return rc;
  }
  z->session_timeout = opts->session_timeout_ms > 0
                           ? (int)(opts->session_timeout_ms > 0x7fffffff
                                       ? 0x7fffffff
                                       : opts->session_timeout_ms)
                           : DEFAULT_SESSION_MS;
  z->connect_timeout = opts->connect_timeout_ms;
  z->command_timeout = opts->command_timeout_ms;
  z->watchdog_ms = opts->watchdog_ms;
  if (opts->holder_info)
    snprintf(z->holder_info, sizeof z->holder_info, "%s", opts->holder_info);
  z->state = ZOO_CONNECTING_STATE;
  z->log_slot = log_slot_take(z);
  pthread_rwlock_wrlock(&z->zh_lock);
  z->zh = handle_new(z);
  pthread_rwlock_unlock(&z->zh_lock);
  if (!z->zh) {
    rc = dlock__seterr(DLOCK_EUNAVAILABLE,
                       "zookeeper %s: cannot start a session: %s", z->display,
                       errno ? strerror(errno) : "zookeeper_init failed");
    zk_close(z);
    return rc;
  }
  if (!dlock__zk_await_connected(z,
                                 dlock__deadline_after(z->connect_timeout))) {
    pthread_mutex_lock(&z->mu);
    bool auth = z->state == ZOO_AUTH_FAILED_STATE;
    pthread_mutex_unlock(&z->mu);
    rc = dlock__seterr(auth ? DLOCK_EAUTH : DLOCK_EUNAVAILABLE,
                       "zookeeper %s: %s", z->display,
                       auth ? "authentication failed"
                            : "no server of the ensemble established a "
                              "session within the connect timeout");
    if (!auth)
      dlock__preferr(rc, "unreachable");
    zk_close(z);
    return rc;
  }
  *be = z;
  return 0;
}

static int zk_ping(void *be) {
  dlock__zk *z = be;
  zk_result r;
  int rc = dlock__zk_get(z, "/", NULL, NULL, &r);
  if (!rc && r.rc != ZOK)
    rc = dlock__zk_error(z, r.rc, "read", "/");
  dlock__zk_result_clear(&r);
  return rc;
}

/* backend.h, session_expired: the core's loss clock ended session sid;
 * the next loop_prepare forgets it and has a new handle made. */
static void zk_session_expired(void *be, int64_t sid) {
  dlock__zk *z = be;
  pthread_mutex_lock(&z->mu);
  if (z->live && z->session_id == sid)
    z->clock_lost = true;
  pthread_mutex_unlock(&z->mu);
}

/* backend.h, session_length: what the server negotiated, once it has. */
static int zk_session_length(void *be, int64_t *ms) {
  dlock__zk *z = be;
  pthread_mutex_lock(&z->mu);
  *ms = z->negotiated > 0 ? z->negotiated : z->session_timeout;
  pthread_mutex_unlock(&z->mu);
  return 0;
}

static const char *const zk_schemes[] = {"zookeeper", "zk", NULL};

#define ALL_LOCK_KINDS                                                         \
  ((1u << DLOCK_REENTRANT) | (1u << DLOCK_FAIR) | (1u << DLOCK_FENCED) |       \
   (1u << DLOCK_READ) | (1u << DLOCK_WRITE))

const dlock__backend_ops dlock__zookeeper_backend = {
    .name = "zookeeper",
    .schemes = zk_schemes,
    .lock_kinds = ALL_LOCK_KINDS,
    .sync_kinds = 1u << DLOCK__SYNC_PERMIT,
    .queue_kinds = ALL_LOCK_KINDS,
    .open = zk_open,
    .close = zk_close,
    .ping = zk_ping,
    .handle_open = dlock__zk_handle_open,
    .handle_close = NULL,
    .lock_acquire = dlock__zk_lock_acquire,
    .lock_leave = dlock__zk_lock_leave,
    .session_length = zk_session_length,
    .lock_release = dlock__zk_lock_release,
    .lock_acquire_send = dlock__zk_lock_acquire_send,
    .lock_release_send = dlock__zk_lock_release_send,
    .lock_force_release = dlock__zk_lock_force_release,
    .lock_renew = NULL,
    .session_expired = zk_session_expired,
    .lock_query = dlock__zk_lock_query,
    .lock_state = dlock__zk_lock_state,
    .wait_begin = dlock__zk_wait_begin,
    .wait_hot = NULL,
    .wait_end = dlock__zk_wait_end,
    .loop_prepare = zk_loop_prepare,
    .loop_dispatch = NULL,
    .sem_set = dlock__zk_sem_set,
    .sem_add = dlock__zk_sem_add,
    .sem_acquire = dlock__zk_sem_acquire,
    .sem_release = dlock__zk_sem_release,
    .sem_available = dlock__zk_sem_available,
    .sem_delete = dlock__zk_sem_delete,
    .psem_acquire = dlock__zk_psem_acquire,
    .psem_release = dlock__zk_psem_release,
    .psem_state = dlock__zk_psem_state,
};
