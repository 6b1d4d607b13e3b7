/*
 * registry.c - the backends this build has, chosen by URL scheme.
 *
 * Adding a backend: its folder under src/, its build lines, and one line in
 * `backends` below. The scheme is what precedes "://" (compared without
 * regard to case, as RFC 3986 asks); the backend parses the rest.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/backend.h"
#include "core/client.h"
#include "core/error.h"

static const dlock__backend_ops *const backends[] = {
    &dlock__redis_backend,     /* redis://, rediss://, unix://,
                                  redis-sentinel:// */
    &dlock__redis_cluster_backend, /* redis-cluster:// */
    &dlock__zookeeper_backend, /* zookeeper://, zk:// */
    &dlock__etcd_backend,      /* etcd://, etcds:// */
};

#define NBACKENDS (sizeof backends / sizeof backends[0])
#define SCHEME_MAX 32

#define URL_MAX 4096

const dlock__backend_ops *dlock__backend_for_url(const char *url) {
  /* what is wrong with any URL, whatever its backend */
  size_t len = strnlen(url, URL_MAX + 1);
  if (len == 0) {
    dlock__seterr(DLOCK_EURL, "bad URL: empty (expected SCHEME://..., for "
                              "example redis://127.0.0.1:6379)");
    return NULL;
  }
  if (len > URL_MAX) {
    dlock__seterr(DLOCK_EURL, "bad URL: longer than %d bytes", URL_MAX);
    return NULL;
  }
  for (size_t i = 0; i < len; i++) {
    unsigned char ch = (unsigned char)url[i];
    if (ch <= ' ' || ch == 0x7f) {
      dlock__seterr(DLOCK_EURL,
                    "bad URL: contains a space or control character");
      return NULL;
    }
  }
  const char *sep = strstr(url, "://");
  size_t n = sep ? (size_t)(sep - url) : 0;
  if (!sep || n == 0 || n > SCHEME_MAX) {
    dlock__seterr(DLOCK_EURL,
                  "bad URL: expected SCHEME://..., for example "
                  "redis://127.0.0.1:6379 or unix:///path");
    return NULL;
  }
  char known[256] = "";
  size_t used = 0;
  for (size_t b = 0; b < NBACKENDS; b++) {
    for (const char *const *s = backends[b]->schemes; s && *s; s++) {
      if (strlen(*s) == n && strncasecmp(url, *s, n) == 0)
        return backends[b];
      int w = snprintf(known + used, sizeof known - used, "%s%s://",
                       used ? ", " : "", *s);
      if (w > 0 && (size_t)w < sizeof known - used)
        used += (size_t)w;
    }
  }
  char scheme[SCHEME_MAX + 1];
  size_t shown = 0;
  for (size_t i = 0; i < n; i++) /* never echo more than a scheme's chars */
    if ((url[i] >= 'a' && url[i] <= 'z') || (url[i] >= 'A' && url[i] <= 'Z') ||
        (url[i] >= '0' && url[i] <= '9') || url[i] == '+' || url[i] == '-' ||
        url[i] == '.')
      scheme[shown++] = url[i];
  scheme[shown] = '\0';
  dlock__seterr(DLOCK_EURL,
                "bad URL: unknown scheme '%s' (this build has %s)",
                scheme, known);
  return NULL;
}

int dlock__need_op(const struct dlock_client *c, bool present,
                   const char *what) {
  if (present)
    return 0;
  return dlock__seterr(DLOCK_ENOTSUP, "the %s backend does not support %s",
                       c->ops->name, what);
}
