/*
 * report.c - one stderr line per failure, and the exit status that goes
 * with it (docs/dlock.1, EXIT STATUS).
 *
 * Design note. Secrets are hidden by their position, never by searching
 * for their text (a search for the password "p" also turned "zookeeper"
 * into "zoo***er"): the command shows URLs as cli_url_redact() makes them,
 * the library's details never hold a password, and every line passes
 * through cli_one_line(), which also masks the userinfo secret of any
 * URL-shaped piece by its place after "://". Lines are built in a buffer
 * and written with one fputs so that lines from the background thread (log
 * callback) and the main thread do not interleave mid-line. The library's
 * detail text is per thread, so a failure is reported by the thread that
 * made the call.
 */
#define _POSIX_C_SOURCE 200809L

#include "cli.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "url.h"

int64_t cli_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* out_mu orders lines and guards muted (cli_mute). */
static pthread_mutex_t out_mu = PTHREAD_MUTEX_INITIALIZER;
static bool muted;

/* One line: "dlock: " and the formatted text made one line with its URLs'
 * secrets masked (cli_one_line), written whole; dropped while muted unless
 * `always`. */
static void vemit(bool always, const char *fmt, va_list ap) {
  char text[2048], line[2048];
  vsnprintf(text, sizeof text, fmt, ap);
  memcpy(line, "dlock: ", 7);
  cli_one_line(text, line + 7, sizeof line - 8);
  size_t n = strlen(line);
  line[n] = '\n';
  line[n + 1] = '\0';
  pthread_mutex_lock(&out_mu);
  if (always || !muted)
    fputs(line, stderr);
  pthread_mutex_unlock(&out_mu);
}

void cli_mute(bool on) {
  pthread_mutex_lock(&out_mu);
  muted = on;
  pthread_mutex_unlock(&out_mu);
}

void cli_msg_final(const struct cli_ctx *c, const char *fmt, ...) {
  (void)c;
  va_list ap;
  va_start(ap, fmt);
  vemit(true, fmt, ap);
  va_end(ap);
}

void cli_msg(const struct cli_ctx *c, const char *fmt, ...) {
  (void)c;
  va_list ap;
  va_start(ap, fmt);
  vemit(false, fmt, ap);
  va_end(ap);
}

int cli_exit_for(int err) {
  switch (err) {
  case DLOCK_EUNAVAILABLE:
  case DLOCK_EIOTIMEOUT:
  case DLOCK_EAUTH:
  case DLOCK_ESERVER:
  case DLOCK_EPROTO:
  case DLOCK_EWRONGTYPE:
  case DLOCK_ETLS:
    return CLI_EX_UNAVAILABLE;
  /* what was asked for does not exist on this backend (-N on etcd, TLS
   * over a Unix socket, credentials for ZooKeeper): a usage error, the
   * same on every backend */
  case DLOCK_ENOTSUP:
  case DLOCK_EURL:
  case DLOCK_EINVAL:
    return CLI_EX_USAGE;
  default:
    return CLI_EX_SOFTWARE;
  }
}

/* The server a URL names, for a hint: by its scheme. */
static const char *server_kind(const char *url) {
  static const struct {
    const char *scheme, *hint;
  } kinds[] = {
      {"zookeeper://", " (is the ZooKeeper server running?)"},
      {"zk://", " (is the ZooKeeper server running?)"},
      {"etcd://", " (is etcd running?)"},
      {"etcds://", " (is etcd running?)"},
      {"postgres://", " (is PostgreSQL running?)"},
      {"postgresql://", " (is PostgreSQL running?)"},
      {"mysql://", " (is the MySQL/MariaDB server running?)"},
      {"mariadb://", " (is the MySQL/MariaDB server running?)"},
      {"redis-sentinel://", " (are the sentinels running?)"},
      {"redis-cluster://", " (are the cluster's nodes running?)"},
  };
  for (size_t i = 0; url != NULL && i < sizeof kinds / sizeof kinds[0]; i++)
    if (strncasecmp(url, kinds[i].scheme, strlen(kinds[i].scheme)) == 0)
      return kinds[i].hint;
  return " (is redis-server running?)";
}

static const char *hint_for(const struct cli_ctx *c, int err) {
  switch (err) {
  case DLOCK_EUNAVAILABLE:
    return server_kind(c != NULL ? c->url : NULL);
  case DLOCK_EIOTIMEOUT:
    return " (no answer in time: is the address right and the server "
           "healthy?)";
  case DLOCK_EAUTH:
    return " (check the password: in the URL, DLOCK_PASSWORD or "
           "--password-file)";
  case DLOCK_EURL:
    return " (expected redis://[[user]:password@]host[:port][/db], "
           "unix:///path/redis.sock, zookeeper://host[:port][,...], "
           "etcd://host:port[,host:port...] or "
           "postgres://[user@]host[:port]/db or "
           "mysql://[user@]host[:port]/db)";
  case DLOCK_EWRONGTYPE:
    return " (that key is not a lock: choose another NAME)";
  case DLOCK_ENOMEM:
    return "";
  default:
    return "";
  }
}

int cli_lib_error(const struct cli_ctx *c, const char *subject, int err) {
  const char *detail = dlock_last_error();
  const char *lead = subject;
  const char *hint = hint_for(c, err);
  if (detail == NULL || detail[0] == '\0')
    detail = dlock_strerror(err);
  /* The library's detail usually starts with the URL, without its
   * userinfo; ours shows the user and "***" for the password, so that the
   * user sees which credentials were used. */
  if (lead == NULL && c != NULL) {
    const char *sep = strstr(detail, "://");
    const char *colon = strstr(detail, ": ");
    lead = c->url_shown;
    if (sep != NULL && colon != NULL && sep < colon &&
        strcspn(detail, " ") > (size_t)(sep - detail))
      detail = colon + 2; /* the library's URL, without userinfo */
    else
      detail += cli_url_peer_prefix(c->url, detail); /* "host:port: " */
  }
  /* The library may already say what to do, in parentheses. */
  if (detail[0] != '\0' && detail[strlen(detail) - 1] == ')')
    hint = "";
  if (lead != NULL)
    cli_msg(c, "%s: %s%s", lead, detail, hint);
  else
    cli_msg(c, "%s%s", detail, hint);
  return cli_exit_for(err);
}

int cli_connect(const struct cli_ctx *c, dlock_client_t **client) {
  int err;
  *client = NULL;
  if (c->nurls > 1 && !c->o->all)
    err = dlock_client_new_redlock(client, c->urls, (size_t)c->nurls,
                                   c->dopts);
  else
    err = dlock_client_new(client, c->url, c->dopts);
  if (err != 0)
    return cli_lib_error(c, NULL, err);
  return 0;
}

int cli_connect_url(const struct cli_ctx *c, int i, bool quiet,
                    dlock_client_t **client) {
  int err;
  *client = NULL;
  err = dlock_client_new(client, c->urls[i], c->dopts);
  if (err != 0)
    return quiet ? cli_exit_for(err) : cli_lib_error(c, NULL, err);
  return 0;
}

dlock_lock_kind_t cli_main_kind(const struct cli_ctx *c) {
  switch (c->o->kind) {
  case CLI_KIND_FAIR:
    return DLOCK_FAIR;
  case CLI_KIND_SHARED:
    return DLOCK_READ;
  case CLI_KIND_EXCLUSIVE:
  default:
    return DLOCK_FENCED;
  }
}

bool cli_has_kind(const struct cli_ctx *c, dlock_client_t *client,
                  dlock_lock_kind_t kind) {
  dlock_lock_t *l = NULL;
  int err = dlock_lock_new_kind(client, c->shared_name, kind, &l);
  dlock_lock_free(l);
  return err != DLOCK_ENOTSUP;
}

dlock_lock_kind_t cli_exclusive_kind(dlock_client_t *client, const char *name) {
  dlock_lock_t *l = NULL;
  int err = dlock_lock_new_kind(client, name, DLOCK_FENCED, &l);
  dlock_lock_free(l);
  return err == DLOCK_ENOTSUP ? DLOCK_REENTRANT : DLOCK_FENCED;
}

int cli_lock_new(const struct cli_ctx *c, dlock_client_t *client,
                 bool shared_rw, dlock_lock_kind_t kind, dlock_lock_t **lock) {
  int err;
  *lock = NULL;
  if (kind == DLOCK_FENCED && !shared_rw)
    kind = cli_exclusive_kind(client, c->o->name);
  err = dlock_lock_new_kind(client, shared_rw ? c->shared_name : c->o->name,
                            kind, lock);
  if (err != 0)
    return cli_lib_error(c, c->name_shown, err);
  return 0;
}
