/*
 * options.c - dlock_options_t: defaults, validated setters, deep copy.
 *
 * The settings every backend reads live here; a setting only one backend
 * means lives with that backend (its setter and its block, options.h),
 * and is copied and freed here as an opaque block.
 */
#include "options.h"

#include <string.h>

#include "alloc.h"
#include "error.h"

#define DEFAULT_CONNECT_TIMEOUT_MS 5000
#define DEFAULT_COMMAND_TIMEOUT_MS 5000
#define DEFAULT_WATCHDOG_MS 30000
#define DEFAULT_OUTAGE_GRACE_MS 30000
#define DEFAULT_POOL_SIZE 8
#define DEFAULT_FAIR_THREAD_WAIT_MS 300000
/* A day: longer timeouts are almost certainly a unit mistake. */
#define MAX_TIMEOUT_MS (24LL * 3600 * 1000)

void dlock__options_defaults(struct dlock_options *o) {
  memset(o, 0, sizeof *o);
  o->connect_timeout_ms = DEFAULT_CONNECT_TIMEOUT_MS;
  o->command_timeout_ms = DEFAULT_COMMAND_TIMEOUT_MS;
  o->watchdog_ms = DEFAULT_WATCHDOG_MS;
  o->outage_grace_ms = DEFAULT_OUTAGE_GRACE_MS;
  o->async_threads = 4;
  o->pool_size = DEFAULT_POOL_SIZE;
  o->fair_thread_wait_ms = DEFAULT_FAIR_THREAD_WAIT_MS;
  o->log_level = DLOCK_LOG_WARN;
}

void dlock__free_secret(char *s) {
  if (s) {
    memset(s, 0, strlen(s));
    dlock__free(s);
  }
}

static void ext_free(dlock__options_ext *x) {
  if (x->type->clear)
    x->type->clear(x->block);
  dlock__free(x->block);
  dlock__free(x);
}

/* A block of `type` with its defaults, on no list yet. */
static dlock__options_ext *ext_new(const dlock__options_ext_type *type) {
  dlock__options_ext *x = dlock__calloc(1, sizeof *x);
  if (!x)
    return NULL;
  x->type = type;
  if (!(x->block = dlock__calloc(1, type->size))) {
    dlock__free(x);
    return NULL;
  }
  if (type->init)
    type->init(x->block);
  return x;
}

const void *dlock__options_ext_get(const struct dlock_options *o,
                                   const dlock__options_ext_type *type) {
  for (const dlock__options_ext *x = o->ext; x; x = x->next)
    if (x->type == type)
      return x->block;
  return NULL;
}

void *dlock__options_ext_mut(struct dlock_options *o,
                             const dlock__options_ext_type *type) {
  void *b = (void *)dlock__options_ext_get(o, type);
  if (b)
    return b;
  dlock__options_ext *x = ext_new(type);
  if (!x)
    return NULL;
  x->next = o->ext;
  o->ext = x;
  return x->block;
}

void dlock__options_clear(struct dlock_options *o) {
  while (o->ext) {
    dlock__options_ext *x = o->ext;
    o->ext = x->next;
    ext_free(x);
  }
  dlock__free(o->client_name);
  dlock__free(o->user);
  dlock__free_secret(o->password);
  dlock__free(o->tls_ca_file);
  dlock__free(o->tls_ca_dir);
  dlock__free(o->tls_cert_file);
  dlock__free(o->tls_key_file);
  dlock__free(o->tls_sni);
  dlock__free(o->holder_info);
  dlock__options_defaults(o);
}

int dlock__options_dup(char **dst, const char *src) {
  *dst = NULL;
  if (!src)
    return 0;
  *dst = dlock__strdup(src);
  return *dst ? 0 : DLOCK_ENOMEM;
}

int dlock__options_copy(struct dlock_options *dst,
                        const struct dlock_options *src) {
  if (!src) {
    dlock__options_defaults(dst);
    return 0;
  }
  *dst = *src;
  dst->client_name = dst->user = dst->password = NULL;
  dst->tls_ca_file = dst->tls_ca_dir = NULL;
  dst->tls_cert_file = dst->tls_key_file = dst->tls_sni = NULL;
  dst->holder_info = NULL;
  dst->ext = NULL;
  if (dlock__options_dup(&dst->client_name, src->client_name) ||
      dlock__options_dup(&dst->user, src->user) ||
      dlock__options_dup(&dst->password, src->password) ||
      dlock__options_dup(&dst->tls_ca_file, src->tls_ca_file) ||
      dlock__options_dup(&dst->tls_ca_dir, src->tls_ca_dir) ||
      dlock__options_dup(&dst->tls_cert_file, src->tls_cert_file) ||
      dlock__options_dup(&dst->tls_key_file, src->tls_key_file) ||
      dlock__options_dup(&dst->tls_sni, src->tls_sni) ||
      dlock__options_dup(&dst->holder_info, src->holder_info))
    goto nomem;
  /* the backends' blocks, in their order */
  dlock__options_ext **tail = &dst->ext;
  for (const dlock__options_ext *x = src->ext; x; x = x->next) {
    dlock__options_ext *y = ext_new(x->type);
    if (!y)
      goto nomem;
    *tail = y;
    tail = &y->next;
    if (x->type->copy(y->block, x->block))
      goto nomem;
  }
  return 0;
nomem:
  dlock__options_clear(dst);
  return DLOCK_ENOMEM;
}

int dlock_options_new(dlock_options_t **out) {
  if (!out)
    return dlock__seterr(DLOCK_EINVAL, "dlock_options_new: out is NULL");
  *out = dlock__calloc(1, sizeof **out);
  if (!*out)
    return DLOCK_ENOMEM;
  dlock__options_defaults(*out);
  return 0;
}

void dlock_options_free(dlock_options_t *opts) {
  if (!opts)
    return;
  dlock__options_clear(opts);
  dlock__free(opts);
}

int dlock__options_check_ms(const char *what, int64_t ms, int64_t min) {
  if (ms < min || ms > MAX_TIMEOUT_MS)
    return dlock__seterr(
        DLOCK_EINVAL, "%s must be from %lld to %lld ms (got %lld)", what,
        (long long)min, (long long)MAX_TIMEOUT_MS, (long long)ms);
  return 0;
}

#define NEED_OPTS(fn)                                                          \
  do {                                                                         \
    if (!opts)                                                                 \
      return dlock__seterr(DLOCK_EINVAL, fn ": opts is NULL");                 \
  } while (0)

int dlock_options_set_connect_timeout(dlock_options_t *opts, int64_t ms) {
  NEED_OPTS("dlock_options_set_connect_timeout");
  int rc = dlock__options_check_ms("connect timeout", ms, 1);
  if (!rc)
    opts->connect_timeout_ms = ms;
  return rc;
}

int dlock_options_set_command_timeout(dlock_options_t *opts, int64_t ms) {
  NEED_OPTS("dlock_options_set_command_timeout");
  int rc = dlock__options_check_ms("command timeout", ms, 1);
  if (!rc)
    opts->command_timeout_ms = ms;
  return rc;
}

int dlock_options_set_watchdog_timeout(dlock_options_t *opts, int64_t ms) {
  NEED_OPTS("dlock_options_set_watchdog_timeout");
  int rc = dlock__options_check_ms("watchdog timeout", ms, 3);
  if (!rc)
    opts->watchdog_ms = ms;
  return rc;
}

int dlock_options_set_session_timeout(dlock_options_t *opts, int64_t ms) {
  NEED_OPTS("dlock_options_set_session_timeout");
  int rc = dlock__options_check_ms("session timeout", ms, 1);
  if (!rc)
    opts->session_timeout_ms = ms;
  return rc;
}

int dlock_options_set_outage_grace(dlock_options_t *opts, int64_t ms) {
  NEED_OPTS("dlock_options_set_outage_grace");
  int rc =
      ms == 0 ? 0
              : dlock__options_check_ms("outage grace (0 turns it off)", ms, 1);
  if (!rc)
    opts->outage_grace_ms = ms;
  return rc;
}

int dlock_options_set_async_threads(dlock_options_t *opts, int n) {
  NEED_OPTS("dlock_options_set_async_threads");
  if (n < 1 || n > 64)
    return dlock__seterr(DLOCK_EINVAL,
                         "async threads: %d is out of range (1 .. 64)", n);
  opts->async_threads = n;
  return 0;
}

int dlock_options_set_fair_thread_wait(dlock_options_t *opts, int64_t ms) {
  NEED_OPTS("dlock_options_set_fair_thread_wait");
  int rc = dlock__options_check_ms("fair thread-wait", ms, 1);
  if (!rc)
    opts->fair_thread_wait_ms = ms;
  return rc;
}

int dlock_options_set_client_name(dlock_options_t *opts, const char *name) {
  NEED_OPTS("dlock_options_set_client_name");
  char *copy = NULL;
  if (name) {
    size_t n = strlen(name);
    if (n == 0 || n > 256)
      return dlock__seterr(DLOCK_EINVAL, "client name must be 1 to 256 bytes");
    for (size_t i = 0; i < n; i++) {
      unsigned char ch = (unsigned char)name[i];
      if (ch <= ' ' || ch >= 0x7f)
        return dlock__seterr(DLOCK_EINVAL,
                             "client name must be printable ASCII without "
                             "spaces");
    }
    if (!(copy = dlock__strdup(name)))
      return DLOCK_ENOMEM;
  }
  dlock__free(opts->client_name);
  opts->client_name = copy;
  return 0;
}

/* Printable UTF-8 (no control characters, no bytes that are not UTF-8):
 * what a status display can show as it is. */
static bool printable_utf8(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    unsigned char c = p[i];
    size_t need = 0;
    if (c < 0x20 || c == 0x7f)
      return false;
    if (c < 0x80) {
      i++;
      continue;
    }
    if (c >= 0xc2 && c <= 0xdf)
      need = 1;
    else if (c >= 0xe0 && c <= 0xef)
      need = 2;
    else if (c >= 0xf0 && c <= 0xf4)
      need = 3;
    else
      return false;
    for (size_t k = 1; k <= need; k++)
      if (i + k >= n || (p[i + k] & 0xc0) != 0x80)
        return false;
    if ((c == 0xe0 && p[i + 1] < 0xa0) || (c == 0xed && p[i + 1] >= 0xa0) ||
        (c == 0xf0 && p[i + 1] < 0x90) || (c == 0xf4 && p[i + 1] >= 0x90))
      return false;
    i += need + 1;
  }
  return true;
}

int dlock_options_set_holder_info(dlock_options_t *opts, const char *text) {
  NEED_OPTS("dlock_options_set_holder_info");
  char *copy = NULL;
  if (text) {
    size_t n = strlen(text);
    if (n == 0 || n > DLOCK_HOLDER_INFO_MAX)
      return dlock__seterr(DLOCK_EINVAL,
                           "holder info must be 1 to %d bytes (got %zu)",
                           DLOCK_HOLDER_INFO_MAX, n);
    if (!printable_utf8(text, n))
      return dlock__seterr(DLOCK_EINVAL,
                           "holder info must be printable UTF-8 (no control "
                           "characters, no newline)");
    if (!(copy = dlock__strdup(text)))
      return DLOCK_ENOMEM;
  }
  dlock__free(opts->holder_info);
  opts->holder_info = copy;
  return 0;
}

int dlock__options_set_credentials(char **u, char **p, const char *user,
                                   const char *password) {
  char *nu = NULL, *np = NULL;
  if ((user && !*user) || (password && !*password))
    return dlock__seterr(DLOCK_EINVAL,
                         "user and password must be NULL or non-empty");
  if (user && !password)
    return dlock__seterr(DLOCK_EINVAL, "a user needs a password");
  if (dlock__options_dup(&nu, user) || dlock__options_dup(&np, password)) {
    dlock__free(nu);
    dlock__free_secret(np);
    return DLOCK_ENOMEM;
  }
  dlock__free(*u);
  dlock__free_secret(*p);
  *u = nu;
  *p = np;
  return 0;
}

int dlock_options_set_credentials(dlock_options_t *opts, const char *user,
                                  const char *password) {
  NEED_OPTS("dlock_options_set_credentials");
  int rc = dlock__options_set_credentials(&opts->user, &opts->password, user,
                                          password);
  if (!rc)
    opts->credentials_set = true;
  return rc;
}

int dlock_options_set_pool_size(dlock_options_t *opts, int n) {
  NEED_OPTS("dlock_options_set_pool_size");
  if (n < 1 || n > 1024)
    return dlock__seterr(DLOCK_EINVAL, "pool size must be from 1 to 1024");
  opts->pool_size = n;
  return 0;
}

int dlock_options_set_lost_callback(dlock_options_t *opts, dlock_lost_fn fn,
                                    void *userdata) {
  NEED_OPTS("dlock_options_set_lost_callback");
  opts->lost_fn = fn;
  opts->lost_ud = userdata;
  return 0;
}

int dlock_options_set_log_callback(dlock_options_t *opts, dlock_log_fn fn,
                                   void *userdata,
                                   dlock_log_level_t max_level) {
  NEED_OPTS("dlock_options_set_log_callback");
  if ((int)max_level < DLOCK_LOG_ERROR || (int)max_level > DLOCK_LOG_DEBUG)
    return dlock__seterr(DLOCK_EINVAL, "log level out of range");
  opts->log_fn = fn;
  opts->log_ud = userdata;
  opts->log_level = max_level;
  return 0;
}

/* ------------------------------------------------------------------ TLS */

#define TLS_PATH_MAX 4096

/* NULL, or a non-empty path of at most TLS_PATH_MAX bytes. */
static int check_path(const char *what, const char *path) {
  if (path && (!*path || strnlen(path, TLS_PATH_MAX + 1) > TLS_PATH_MAX))
    return dlock__seterr(DLOCK_EINVAL,
                         "%s must be NULL or a path of 1 to %d bytes", what,
                         TLS_PATH_MAX);
  return 0;
}

/* Replaces two owned strings with copies of a and b, all or nothing. */
static int set_pair(char **dst_a, char **dst_b, const char *a, const char *b) {
  char *ca = NULL, *cb = NULL;
  if (dlock__options_dup(&ca, a) || dlock__options_dup(&cb, b)) {
    dlock__free(ca);
    dlock__free(cb);
    return DLOCK_ENOMEM;
  }
  dlock__free(*dst_a);
  dlock__free(*dst_b);
  *dst_a = ca;
  *dst_b = cb;
  return 0;
}

int dlock_options_set_tls(dlock_options_t *opts, bool enable) {
  NEED_OPTS("dlock_options_set_tls");
  opts->tls = enable;
  return 0;
}

int dlock_options_set_tls_ca(dlock_options_t *opts, const char *ca_file,
                             const char *ca_dir) {
  NEED_OPTS("dlock_options_set_tls_ca");
  int rc = check_path("the CA file", ca_file);
  if (!rc)
    rc = check_path("the CA directory", ca_dir);
  if (!rc)
    rc = set_pair(&opts->tls_ca_file, &opts->tls_ca_dir, ca_file, ca_dir);
  return rc;
}

int dlock_options_set_tls_cert(dlock_options_t *opts, const char *cert_file,
                               const char *key_file) {
  NEED_OPTS("dlock_options_set_tls_cert");
  if (!cert_file != !key_file)
    return dlock__seterr(DLOCK_EINVAL,
                         "a client certificate needs its key and a key its "
                         "certificate (give both or neither)");
  int rc = check_path("the certificate file", cert_file);
  if (!rc)
    rc = check_path("the key file", key_file);
  if (!rc)
    rc = set_pair(&opts->tls_cert_file, &opts->tls_key_file, cert_file,
                  key_file);
  return rc;
}

int dlock_options_set_tls_sni(dlock_options_t *opts, const char *server_name) {
  NEED_OPTS("dlock_options_set_tls_sni");
  char *copy = NULL;
  if (server_name) {
    size_t n = strnlen(server_name, 256);
    if (n == 0 || n > 253)
      return dlock__seterr(DLOCK_EINVAL,
                           "the TLS server name must be 1 to 253 bytes");
    for (size_t i = 0; i < n; i++) {
      unsigned char ch = (unsigned char)server_name[i];
      if (ch <= ' ' || ch >= 0x7f)
        return dlock__seterr(DLOCK_EINVAL,
                             "the TLS server name must be printable ASCII "
                             "without spaces");
    }
    if (!(copy = dlock__strdup(server_name)))
      return DLOCK_ENOMEM;
  }
  dlock__free(opts->tls_sni);
  opts->tls_sni = copy;
  return 0;
}

int dlock_options_set_tls_insecure(dlock_options_t *opts, bool insecure) {
  NEED_OPTS("dlock_options_set_tls_insecure");
  opts->tls_insecure = insecure;
  return 0;
}
