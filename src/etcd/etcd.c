/*
 * etcd.c - the etcd backend: its URL, open and close, and the operations
 * table. The transport (gRPC gateway, libcurl, json-c, failover) is in
 * transport.c, the session (lease, keep-alive, watch streams: the
 * backend's thread) in session.c, the lock in locks.c.
 *
 *   etcd://[user:password@]host[:port][,host[:port]...][/]
 *
 * Every listed endpoint is a member of one cluster; requests go to one of
 * them and move to the next when it fails. The port defaults to 2379.
 * etcds:// (or dlock_options_set_tls) speaks HTTPS to the same client
 * ports with the TLS options of the Redis side (CA file or directory,
 * client certificate and key, SNI name, the insecure switch; transport.c
 * hands them to libcurl); their files are checked here, at open, so a
 * missing one is DLOCK_ETLS naming its path. A user and password (in the URL
 * or dlock_options_set_credentials) go through etcd's auth: Authenticate
 * gives a token that every request carries.
 *
 * open grants the session's lease (its round trip checks the cluster) and
 * starts the backend's thread; close stops the thread, then revokes the
 * lease (as concurrency.Session.Close: the keys of this client's locks and
 * waits go at once) and frees everything.
 *
 * What it offers: reentrant, fair (the same lock: etcd's queue is FIFO by
 * create revision) and fenced locks (token: the key's create revision),
 * and read-write locks with the recipe's layout (rw.c). Semaphores and
 * latches are DLOCK_ENOTSUP (sync_kinds 0: etcd has no recipe for them).
 * No per-hold renewal (lock_renew NULL): the session keeps every hold
 * alive, and its loss is dlock__holds_session_lost.
 */
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/options.h"
#include "core/uri.h"
#include "etcd/etcd.h"

#define ETCD_MAX_ENDPOINTS 16
#define ETCD_DEFAULT_PORT 2379
#define ETCD_DEFAULT_TTL_S 60

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

static void etcd_free(dlock__etcd *e) {
  if (!e)
    return;
  for (int i = 0; i < e->nhosts; i++)
    dlock__free(e->hosts[i]);
  dlock__free(e->hosts);
  if (e->password) {
    memset(e->password, 0, strlen(e->password));
    dlock__free(e->password);
  }
  dlock__free(e->user);
  dlock__free(e->tls_ca_file);
  dlock__free(e->tls_ca_dir);
  dlock__free(e->tls_cert_file);
  dlock__free(e->tls_key_file);
  dlock__free(e->tls_sni);
  dlock__etcd_entries_free(e);
  dlock__etcd_rws_free(e);
  dlock__etcd_transport_free(e);
  pthread_cond_destroy(&e->session_cv);
  pthread_mutex_destroy(&e->mu);
  dlock__free(e);
}

static void etcd_close(void *be) {
  dlock__etcd *e = be;
  if (!e)
    return;
  dlock__etcd_session_stop(e);
  dlock__etcd_session_revoke(e);
  etcd_free(e);
}

static bool host_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
}

/* etcd:// or etcds:// (the registry chose this backend by the scheme),
 * cut by the core's splitter; this reads the endpoints and the
 * credentials (percent-decoded), and refuses a path, query or fragment. */
static int parse_url(dlock__etcd *e, const char *url, char **user,
                     char **password) {
  static const dlock__uri_rules rules = {
      .example = "etcd://[user:password@]host[:port][,host[:port]...]",
      .default_port = ETCD_DEFAULT_PORT,
      .min_hosts = 1,
      .max_hosts = ETCD_MAX_ENDPOINTS,
      .list_noun = "endpoint",
      .example_always = true};
  *user = *password = NULL;
  dlock__uri u;
  int rc = dlock__uri_split(url, &rules, &u);
  if (rc)
    return rc;
  if (dlock__uri_scheme_is(&u, "etcds"))
    e->tls = true;
  if (u.path.n > 1 || u.has_query || u.has_fragment)
    return dlock__seterr(DLOCK_EURL,
                         "bad etcd URL: no path or query expected after the "
                         "endpoints (etcd://host:port[,host:port...])");
  if (u.has_userinfo) {
    if (!u.has_password || u.user.n == 0)
      return dlock__seterr(DLOCK_EURL,
                           "bad etcd URL: credentials must be user:password@");
    if (!(*user = dlock__uri_decode_dup(u.user, "user or password", &rc)) ||
        !(*password =
              dlock__uri_decode_dup(u.password, "user or password", &rc)))
      return rc;
  }
  e->hosts = dlock__calloc(ETCD_MAX_ENDPOINTS, sizeof *e->hosts);
  if (!e->hosts)
    return DLOCK_ENOMEM;
  size_t dl = (size_t)snprintf(e->display, sizeof e->display, "%s://",
                               e->tls ? "etcds" : "etcd");
  for (size_t i = 0; i < u.nhosts; i++) {
    const dlock__uri_host *h = &u.hosts[i];
    for (size_t k = 0; k < h->name.n; k++) {
      char c = h->name.p[k];
      if (h->ipv6 && !(host_char(c) || c == ':'))
        return dlock__seterr(DLOCK_EURL,
                             "bad etcd URL: bad character in an IPv6 host");
      if (!h->ipv6 && !host_char(c))
        return dlock__seterr(DLOCK_EURL,
                             "bad etcd URL: bad character '%c' in a host "
                             "(expected host[:port][,host[:port]...])",
                             c);
    }
    if (!(e->hosts[e->nhosts] =
              dlock__asprintf("%s%.*s%s:%d", h->ipv6 ? "[" : "", (int)h->name.n,
                              h->name.p, h->ipv6 ? "]" : "", h->port)))
      return DLOCK_ENOMEM;
    if (dl < sizeof e->display)
      dl += (size_t)snprintf(e->display + dl, sizeof e->display - dl, "%s%s",
                             e->nhosts ? "," : "", e->hosts[e->nhosts]);
    e->nhosts++;
  }
  return 0;
}

/* A readable file, or DLOCK_ETLS naming it (what: "CA file"...). */
static int tls_file(const char *display, const char *what, const char *path,
                    bool dir) {
  if (!path)
    return 0;
  struct stat st;
  if (stat(path, &st) != 0 || access(path, R_OK) != 0)
    return dlock__seterr(DLOCK_ETLS, "%s: TLS: cannot read the %s '%s': %s",
                         display, what, path, strerror(errno));
  if (dir ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
    return dlock__seterr(DLOCK_ETLS, "%s: TLS: the %s '%s' is not a %s",
                         display, what, path, dir ? "directory" : "file");
  return 0;
}

/* Copies the TLS options into e (TLS on for etcds:// or the switch). */
static int tls_setup(dlock__etcd *e, const struct dlock_options *o) {
  if (o->tls && !e->tls) {
    e->tls = true;
    /* "etcd://..." becomes "etcds://..." */
    memmove(e->display + 5, e->display + 4, sizeof e->display - 6);
    e->display[4] = 's';
    e->display[sizeof e->display - 1] = '\0';
  }
  if (!e->tls)
    return 0;
  e->tls_insecure = o->tls_insecure;
  int rc = tls_file(e->display, "CA file", o->tls_ca_file, false);
  if (!rc)
    rc = tls_file(e->display, "CA directory", o->tls_ca_dir, true);
  if (!rc)
    rc = tls_file(e->display, "certificate", o->tls_cert_file, false);
  if (!rc)
    rc = tls_file(e->display, "private key", o->tls_key_file, false);
  if (rc)
    return rc;
  if ((o->tls_ca_file && !(e->tls_ca_file = dlock__strdup(o->tls_ca_file))) ||
      (o->tls_ca_dir && !(e->tls_ca_dir = dlock__strdup(o->tls_ca_dir))) ||
      (o->tls_cert_file &&
       !(e->tls_cert_file = dlock__strdup(o->tls_cert_file))) ||
      (o->tls_key_file &&
       !(e->tls_key_file = dlock__strdup(o->tls_key_file))) ||
      (o->tls_sni && !(e->tls_sni = dlock__strdup(o->tls_sni))))
    return DLOCK_ENOMEM;
  return 0;
}

static int etcd_ping(void *be) {
  json_object *rep = NULL;
  int rc = dlock__etcd_call(be, "/v3/maintenance/status",
                            json_object_new_object(), true, &rep);
  json_object_put(rep);
  return rc;
}

static int etcd_open(void **be, const char *url, const struct dlock_options *o,
                     struct dlock_client *core) {
  *be = NULL;
  pthread_once(&curl_once, curl_init);
  dlock__etcd *e = dlock__calloc(1, sizeof *e);
  if (!e)
    return DLOCK_ENOMEM;
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->session_cv, NULL);
  dlock__etcd_transport_init(e);
  e->core = core;
  e->connect_timeout_ms = o->connect_timeout_ms;
  e->command_timeout_ms = o->command_timeout_ms;
  if (o->holder_info)
    snprintf(e->holder_info, sizeof e->holder_info, "%s", o->holder_info);
  e->ttl_s = o->session_timeout_ms > 0 ? (o->session_timeout_ms + 999) / 1000
                                       : ETCD_DEFAULT_TTL_S;
  char *user = NULL, *password = NULL;
  int rc = parse_url(e, url, &user, &password);
  if (!rc)
    rc = tls_setup(e, o);
  if (!rc && o->credentials_set) {
    dlock__free(user);
    if (password)
      memset(password, 0, strlen(password));
    dlock__free(password);
    user = o->user ? dlock__strdup(o->user) : NULL;
    password = o->password ? dlock__strdup(o->password) : NULL;
  }
  e->user = user;
  e->password = password;
  if (!rc && e->password && !e->user)
    rc = dlock__seterr(DLOCK_EINVAL,
                       "%s: etcd's auth needs a user name with the password",
                       e->display);
  if (!rc && e->user)
    rc = dlock__etcd_authenticate(e);
  if (!rc)
    rc = dlock__etcd_session_start(e);
  if (!rc) {
    int64_t lease = 0;
    rc = dlock__etcd_session_lease(e, &lease);
    if (rc && strncmp(dlock_last_error(), e->display, strlen(e->display)) != 0)
      dlock__preferr(rc, "%s", e->display); /* once */
  }
  if (rc) {
    if (e->password)
      dlock__scrub_error(e->password);
    dlock__etcd_session_stop(e);
    etcd_free(e);
    return rc;
  }
  *be = e;
  return 0;
}

static const char *const etcd_schemes[] = {"etcd", "etcds", NULL};

const dlock__backend_ops dlock__etcd_backend = {
    .name = "etcd",
    .schemes = etcd_schemes,
    .lock_kinds = (1u << DLOCK_REENTRANT) | (1u << DLOCK_FAIR) |
                  (1u << DLOCK_FENCED) | (1u << DLOCK_READ) |
                  (1u << DLOCK_WRITE),
    .sync_kinds = 0,
    .queue_kinds = 0,
    .open = etcd_open,
    .close = etcd_close,
    .ping = etcd_ping,
    .lock_acquire = dlock__etcd_lock_acquire,
    .lock_leave = dlock__etcd_lock_leave,
    .lock_release = dlock__etcd_lock_release,
    .lock_acquire_send = dlock__etcd_lock_acquire_send,
    .lock_release_send = dlock__etcd_lock_release_send,
    .lock_force_release = dlock__etcd_lock_force_release,
    .lock_query = dlock__etcd_lock_query,
    .lock_state = dlock__etcd_lock_state,
    .lock_hold_env = dlock__etcd_lock_hold_env,
    .session_length = dlock__etcd_session_length,
    .session_expired = dlock__etcd_session_expired,
    .wait_begin = dlock__etcd_wait_begin,
    .wait_end = dlock__etcd_wait_end,
};
