/*
 * url.c - Redis URLs into endpoints (see url.h), on the core's splitter.
 *
 * Design note: core/uri.c cuts the URL (scheme, userinfo, one host, path,
 * query, fragment) and checks what every backend shares (length, control
 * bytes, host and port syntax); this file reads what Redis gives meaning
 * to: the scheme (redis, rediss, unix; any case), "user:password" (a ':'
 * is required, a user needs a password), the path as a database number or
 * a Unix socket path, and ?db=N. Strict on purpose: anything unexpected is
 * DLOCK_EURL with a message that says which part is wrong, since a
 * silently misread URL points a fleet at the wrong server. Messages never
 * echo the userinfo.
 */
#include "redis/url.h"

#include <string.h>
#include <strings.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/uri.h"

/* A decimal in [lo, hi]; -1 on failure. */
static long parse_num(const char *s, size_t len, long lo, long hi) {
  if (len == 0 || len > 10)
    return -1;
  long v = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9')
      return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v < lo || v > hi ? -1 : v;
}

/* Query string: db=N; layout= and registry= choose the key layout and
 * are read by spring.c (dlock__redis_layout), so they pass here. */
static int parse_query(const dlock__uri *u, dlock__endpoint *ep) {
  dlock__uri_query q;
  int rc;
  dlock__uri_query_begin(&q, u);
  while ((rc = dlock__uri_query_next(&q)) == 1) {
    if (strcmp(q.key, "db") == 0 && q.value[0]) {
      long db = parse_num(q.value, strlen(q.value), 0, 1000000);
      if (db < 0)
        return dlock__seterr(DLOCK_EURL, "bad URL: db must be a number");
      ep->db = (int)db;
    } else if (strcmp(q.key, "layout") == 0 || strcmp(q.key, "registry") == 0) {
      continue;
    } else {
      return dlock__seterr(DLOCK_EURL,
                           "bad URL: unknown parameter '%.*s' (db=N, "
                           "layout=redisson|spring, registry=KEY)",
                           (int)(q.raw.n > 64 ? 64 : q.raw.n), q.raw.p);
    }
  }
  return rc;
}

static int no_fragment(const dlock__uri *u) {
  if (u->has_fragment)
    return dlock__seterr(DLOCK_EURL,
                         "bad URL: a '#' fragment means nothing to Redis");
  return 0;
}

static int parse_unix(const char *url, dlock__endpoint *ep) {
  static const dlock__uri_rules rules = {.example = "unix:///path",
                                         .default_port = 0,
                                         .min_hosts = 0,
                                         .max_hosts = 0};
  /* the path must be absolute: nothing between "//" and it */
  if (url[7] != '/')
    return dlock__seterr(DLOCK_EURL,
                         "bad URL: unix:// needs an absolute path, as in "
                         "unix:///run/redis.sock");
  dlock__uri u;
  int rc = dlock__uri_split(url, &rules, &u);
  if (rc)
    return rc;
  if ((rc = no_fragment(&u)))
    return rc;
  if (u.path.n < 2)
    return dlock__seterr(DLOCK_EURL, "bad URL: empty socket path");
  if (u.path.n >= 108)
    return dlock__seterr(DLOCK_EURL,
                         "bad URL: socket path longer than 107 bytes");
  ep->kind = DLOCK__EP_UNIX;
  if (!(ep->path = dlock__strndup(u.path.p, u.path.n)))
    return DLOCK_ENOMEM;
  if ((rc = parse_query(&u, ep)))
    return rc;
  ep->display = dlock__asprintf("unix://%s", ep->path);
  return ep->display ? 0 : DLOCK_ENOMEM;
}

static int parse_userinfo(const dlock__uri *u, dlock__endpoint *ep) {
  int rc = 0;
  if (!u->has_password)
    return dlock__seterr(
        DLOCK_EURL, "bad URL: credentials need a ':' as in "
                    "redis://user:password@host or redis://:password@host");
  if (u->user.n &&
      !(ep->user = dlock__uri_decode_dup(u->user, "user or password", &rc)))
    return rc;
  if (u->password.n) {
    if (!(ep->password =
              dlock__uri_decode_dup(u->password, "user or password", &rc)))
      return rc;
  } else if (u->user.n) {
    return dlock__seterr(DLOCK_EURL, "bad URL: user given without password");
  }
  return 0;
}

static int parse_tcp(const char *url, bool tls, dlock__endpoint *ep) {
  static const dlock__uri_rules rules = {.example = "redis://host:port",
                                         .default_port = 6379,
                                         .min_hosts = 1,
                                         .max_hosts = 1};
  dlock__uri u;
  int rc = dlock__uri_split(url, &rules, &u);
  if (rc)
    return rc;
  ep->kind = DLOCK__EP_TCP;
  ep->tls = tls;
  if (u.has_userinfo && (rc = parse_userinfo(&u, ep)))
    return rc;
  if ((rc = no_fragment(&u)))
    return rc;
  const dlock__uri_host *h = &u.hosts[0];
  ep->port = h->port;
  if (!(ep->host = dlock__strndup(h->name.p, h->name.n)))
    return DLOCK_ENOMEM;
  if (u.path.n > 1) {
    long db = parse_num(u.path.p + 1, u.path.n - 1, 0, 1000000);
    if (db < 0)
      return dlock__seterr(DLOCK_EURL,
                           "bad URL: path must be a database number, as in "
                           "redis://host:6379/0");
    ep->db = (int)db;
  }
  if ((rc = parse_query(&u, ep)))
    return rc;
  int v6 = memchr(ep->host, ':', h->name.n) != NULL;
  ep->display = dlock__asprintf(
      "%s://%s%s%s%s%s:%d", tls ? "rediss" : "redis", ep->user ? ep->user : "",
      ep->user ? "@" : "", v6 ? "[" : "", ep->host, v6 ? "]" : "", ep->port);
  return ep->display ? 0 : DLOCK_ENOMEM;
}

int dlock__redis_endpoint_of_host(const dlock__uri_host *h,
                                  dlock__endpoint *ep) {
  memset(ep, 0, sizeof *ep);
  ep->kind = DLOCK__EP_TCP;
  ep->port = h->port;
  if (!(ep->host = dlock__strndup(h->name.p, h->name.n)))
    return DLOCK_ENOMEM;
  ep->display = dlock__asprintf("redis://%s%s%s:%d", h->ipv6 ? "[" : "",
                                ep->host, h->ipv6 ? "]" : "", ep->port);
  if (ep->display)
    return 0;
  dlock__endpoint_clear(ep);
  return DLOCK_ENOMEM;
}

int dlock__redis_url_parse(const char *url, dlock__endpoint *ep) {
  static const dlock__uri_rules any = {.example =
                                           "redis://host:port or unix:///path",
                                       .default_port = 0,
                                       .min_hosts = 0,
                                       .max_hosts = DLOCK__URI_MAX_HOSTS};
  memset(ep, 0, sizeof *ep);
  dlock__uri u;
  /* the shared checks first (NULL, empty, length, control bytes, scheme) */
  int rc = dlock__uri_split(url, &any, &u);
  if (rc == 0) {
    if (dlock__uri_scheme_is(&u, "redis"))
      rc = parse_tcp(url, false, ep);
    else if (dlock__uri_scheme_is(&u, "rediss"))
      rc = parse_tcp(url, true, ep);
    else if (dlock__uri_scheme_is(&u, "unix"))
      rc = parse_unix(url, ep);
    else /* the registry sent another scheme here: a programming error */
      rc = dlock__seterr(DLOCK_EURL,
                         "bad URL: unknown scheme '%.*s' (expected redis:// "
                         "or unix://)",
                         (int)u.scheme.n, u.scheme.p);
  } else if (url && strncasecmp(url, "unix://", 7) == 0 && url[7] != '/' &&
             rc == DLOCK_EURL) {
    /* "unix://relative": say what unix:// wants, not what the host is */
    rc = parse_unix(url, ep);
  }
  if (rc)
    dlock__endpoint_clear(ep);
  return rc;
}
