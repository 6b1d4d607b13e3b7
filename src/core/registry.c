/*
 * registry.c - choosing a backend by a URL's scheme.
 *
 * The core names no backend: the build's list (src/backends.c) holds the
 * backends compiled in, each declaring the schemes it serves in its
 * dlock__backend_ops, and those left out (-DDLOCK_WITH_ZOOKEEPER=OFF, or
 * their libraries missing), with their schemes and how to get them. The
 * scan here asks the list: the scheme is what precedes "://", compared
 * without regard to case (RFC 3986 3.1); the backend parses the rest. A
 * left-out backend's URL fails with DLOCK_EURL and the line that says how
 * to get it; an unknown scheme's message lists the schemes the build has.
 */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/backend.h"
#include "core/client_base.h"
#include "core/error.h"
#include "core/uri.h"

#define SCHEME_MAX 32

/* "a://, b://, ..." of the backends built, into buf. */
static void known_schemes(const dlock__registry *r, char *buf, size_t cap) {
  size_t used = 0;
  buf[0] = '\0';
  for (size_t b = 0; b < r->nbuilt; b++)
    for (const char *const *s = r->built[b]->schemes; s && *s; s++) {
      int w = snprintf(buf + used, cap - used, "%s%s://", used ? ", " : "", *s);
      if (w > 0 && (size_t)w < cap - used)
        used += (size_t)w;
    }
}

static bool scheme_is(const char *url, size_t n, const char *scheme) {
  return strlen(scheme) == n && strncasecmp(url, scheme, n) == 0;
}

const dlock__backend_ops *dlock__registry_find(const dlock__registry *r,
                                               const char *url) {
  char known[256];
  known_schemes(r, known, sizeof known);
  /* what is wrong with any URL, whatever its backend */
  size_t len = strnlen(url, DLOCK__URI_MAX + 1);
  if (len == 0) {
    dlock__seterr(DLOCK_EURL,
                  "bad URL: empty (expected SCHEME://...; this build has %s)",
                  known);
    return NULL;
  }
  if (len > DLOCK__URI_MAX) {
    dlock__seterr(DLOCK_EURL, "bad URL: longer than %d bytes", DLOCK__URI_MAX);
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
                  "bad URL: expected SCHEME://... (this build has %s)", known);
    return NULL;
  }
  for (size_t b = 0; b < r->nbuilt; b++)
    for (const char *const *s = r->built[b]->schemes; s && *s; s++)
      if (scheme_is(url, n, *s))
        return r->built[b];
  for (size_t b = 0; b < r->nabsent; b++)
    for (const char *const *s = r->absent[b].schemes; *s; s++)
      if (scheme_is(url, n, *s)) {
        dlock__seterr(DLOCK_EURL, "this build has no %s backend: %s",
                      r->absent[b].name, r->absent[b].how);
        return NULL;
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

int dlock__need_kind(const struct dlock_client *c, bool present,
                     const char *what) {
  if (present || !c->ops->kinds_why)
    return dlock__need_op(c, present, what);
  return dlock__seterr(DLOCK_ENOTSUP, "%s are not offered: %s", what,
                       c->ops->kinds_why);
}

int dlock__need_op(const struct dlock_client *c, bool present,
                   const char *what) {
  if (present)
    return 0;
  return dlock__seterr(DLOCK_ENOTSUP, "the %s backend does not support %s",
                       c->ops->name, what);
}
