/*
 * registry.c - the backends this build has, chosen by URL scheme.
 *
 * Adding a backend: its folder under src/, its build lines (and, if it
 * needs a library of its own, a DLOCK_WITH_* option in
 * cmake/backends.cmake, which defines DLOCK_HAVE_* when it is built), one
 * line in `backends` below, and for an optional backend one line in
 * `optional`. The scheme is what precedes "://" (compared without regard to
 * case, as RFC 3986 asks); the backend parses the rest.
 *
 * A backend left out of the build (-DDLOCK_WITH_ZOOKEEPER=OFF, or its
 * libraries missing) is not compiled at all; its schemes stay known here,
 * so that its URLs fail with DLOCK_EURL and one line saying how to get it
 * rather than as an unknown scheme.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/backend.h"
#include "core/client.h"
#include "core/error.h"

static const dlock__backend_ops *const backends[] = {
    &dlock__redis_backend,         /* redis://, rediss://, unix://,
                                      redis-sentinel:// */
    &dlock__redis_cluster_backend, /* redis-cluster:// */
#ifdef DLOCK_HAVE_ZOOKEEPER
    &dlock__zookeeper_backend, /* zookeeper://, zk:// */
#endif
#ifdef DLOCK_HAVE_ETCD
    &dlock__etcd_backend, /* etcd://, etcds:// */
#endif
#ifdef DLOCK_HAVE_POSTGRES
    &dlock__postgres_backend, /* postgres://, postgresql:// */
#endif
};

#ifdef DLOCK_HAVE_ZOOKEEPER
#define HAVE_ZOOKEEPER true
#else
#define HAVE_ZOOKEEPER false
#endif
#ifdef DLOCK_HAVE_ETCD
#define HAVE_ETCD true
#else
#define HAVE_ETCD false
#endif
#ifdef DLOCK_HAVE_POSTGRES
#define HAVE_POSTGRES true
#else
#define HAVE_POSTGRES false
#endif

/* The backends a build may leave out: their schemes, and what a build
 * without them tells the user. */
static const struct optional {
  const char *name;
  bool built;
  const char *schemes[3];
  const char *option;
  const char *packages;
} optional[] = {
    {"zookeeper",
     HAVE_ZOOKEEPER,
     {"zookeeper", "zk", NULL},
     "DLOCK_WITH_ZOOKEEPER",
     "libzookeeper-mt-dev"},
    {"etcd",
     HAVE_ETCD,
     {"etcd", "etcds", NULL},
     "DLOCK_WITH_ETCD",
     "libcurl4-openssl-dev and libjson-c-dev"},
    {"postgres",
     HAVE_POSTGRES,
     {"postgres", "postgresql", NULL},
     "DLOCK_WITH_POSTGRES",
     "libpq-dev"},
};

const char *dlock_backends(void) {
  return "redis"
#ifdef DLOCK_HAVE_ZOOKEEPER
         " zookeeper"
#endif
#ifdef DLOCK_HAVE_ETCD
         " etcd"
#endif
#ifdef DLOCK_HAVE_POSTGRES
         " postgres"
#endif
      ;
}

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
    dlock__seterr(DLOCK_EURL, "bad URL: expected SCHEME://..., for example "
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
  for (size_t b = 0; b < sizeof optional / sizeof optional[0]; b++) {
    const struct optional *o = &optional[b];
    for (const char *const *s = o->schemes; !o->built && *s; s++)
      if (strlen(*s) == n && strncasecmp(url, *s, n) == 0) {
        dlock__seterr(DLOCK_EURL,
                      "this build has no %s backend: rebuild with -D%s=ON "
                      "(needs %s)",
                      o->name, o->option, o->packages);
        return NULL;
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
  dlock__seterr(DLOCK_EURL, "bad URL: unknown scheme '%s' (this build has %s)",
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
