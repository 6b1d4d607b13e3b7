/*
 * uri.c - the URL splitter (see uri.h).
 *
 * Design note. Follows RFC 3986 where a backend URL meets it:
 *  - scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ), compared without
 *    regard to case (3.1); only the "scheme://" (hier-part with an
 *    authority) form is taken;
 *  - userinfo ends at an '@' and is split at its first ':' into user and
 *    password (3.2.1), each percent-decoded on demand (2.1); the path,
 *    query and fragment are delimited by '/', '?' and '#' (3.3-3.5);
 *  - an IP-literal host is written in brackets (3.2.2); a port is digits
 *    (3.2.3), here also 1..65535.
 * Deliberate departures, each for the URLs dlock already accepted:
 *  - a comma-separated host list (host[:port],host[:port]...), as the URLs
 *    of a service of several servers write their ensemble: not RFC 3986;
 *  - the userinfo ends at the LAST '@' before the first '/' or '?', so a
 *    password may hold a raw '@', '#' or ':' (RFC 3986 would want them
 *    %-encoded); %00 is refused in a decoded part;
 *  - a reg-name host is checked only for bytes that cannot be in a host
 *    (spaces, controls, non-ASCII, '@', '[', ']'): the resolver judges the
 *    name; the bracketed literal must look like IPv6 (hex, ':' and '.', an
 *    optional %zone);
 *  - the whole URL is at most DLOCK__URI_MAX bytes with no space or control
 *    byte anywhere (no %-encoding of them into the raw string either).
 * Every slice points into the caller's string; nothing is allocated but
 * by dlock__uri_decode_dup. Messages never show the userinfo.
 */
#include "uri.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "alloc.h"
#include "error.h"

/* DLOCK_EURL with the message, followed by the backend's form of URL when
 * its rules ask for it. */
__attribute__((format(printf, 2, 3))) static int
uri_err(const dlock__uri_rules *r, const char *fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (r->example_always)
    return dlock__seterr(DLOCK_EURL, "%s (expected %s)", buf, r->example);
  return dlock__seterr(DLOCK_EURL, "%s", buf);
}

bool dlock__slice_eq(dlock__slice s, const char *str) {
  size_t n = strlen(str);
  return s.n == n && (n == 0 || memcmp(s.p, str, n) == 0);
}

bool dlock__uri_scheme_is(const dlock__uri *u, const char *scheme) {
  size_t n = strlen(scheme);
  return u->scheme.n == n && strncasecmp(u->scheme.p, scheme, n) == 0;
}

static int hexval(int ch) {
  if (ch >= '0' && ch <= '9')
    return ch - '0';
  if (ch >= 'a' && ch <= 'f')
    return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F')
    return ch - 'A' + 10;
  return -1;
}

int dlock__uri_decode(dlock__slice s, char *out, size_t cap, size_t *outlen,
                      const char *what) {
  size_t o = 0;
  for (size_t i = 0; i < s.n; i++) {
    int ch = (unsigned char)s.p[i];
    if (ch == '%') {
      if (i + 2 >= s.n)
        return dlock__seterr(DLOCK_EURL, "bad URL: truncated %%-escape in %s",
                             what);
      int a = hexval((unsigned char)s.p[i + 1]);
      int b = hexval((unsigned char)s.p[i + 2]);
      if (a < 0 || b < 0 || (a == 0 && b == 0))
        return dlock__seterr(DLOCK_EURL, "bad URL: invalid %%-escape in %s",
                             what);
      ch = a * 16 + b;
      i += 2;
    }
    if (o + 1 >= cap)
      return dlock__seterr(DLOCK_EURL, "bad URL: %s longer than %zu bytes",
                           what, cap ? cap - 1 : 0);
    out[o++] = (char)ch;
  }
  if (cap)
    out[o] = '\0';
  if (outlen)
    *outlen = o;
  return 0;
}

char *dlock__uri_decode_dup(dlock__slice s, const char *what, int *rc) {
  char *out = dlock__calloc(s.n + 1, 1);
  if (!out) {
    *rc = DLOCK_ENOMEM;
    return NULL;
  }
  if ((*rc = dlock__uri_decode(s, out, s.n + 1, NULL, what))) {
    dlock__free(out);
    return NULL;
  }
  return out;
}

/* A port: 1..5 digits, 1..65535; -1 otherwise. */
static int parse_port(const char *s, size_t n) {
  if (n == 0 || n > 5)
    return -1;
  int v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9')
      return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v >= 1 && v <= 65535 ? v : -1;
}

static bool ipv6_ok(const char *s, size_t n) {
  size_t colons = 0, i = 0;
  for (; i < n && s[i] != '%'; i++) {
    if (s[i] == ':')
      colons++;
    else if (hexval((unsigned char)s[i]) < 0 && s[i] != '.')
      return false;
  }
  if (colons < 2)
    return false;
  if (i < n) { /* %zone (RFC 6874 writes %25zone): unreserved bytes */
    if (i + 1 >= n)
      return false;
    for (i++; i < n; i++) {
      unsigned char ch = (unsigned char)s[i];
      if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') ||
            (ch >= 'A' && ch <= 'Z') || ch == '-' || ch == '.' || ch == '_' ||
            ch == '~' || ch == '%'))
        return false;
    }
  }
  return true;
}

/* One host[:port] item of the list, s[0..n). */
static int split_host(const char *s, size_t n, const dlock__uri_rules *r,
                      dlock__uri_host *h) {
  const char *portp = NULL;
  size_t portlen = 0;
  if (n && s[0] == '[') {
    const char *rb = memchr(s, ']', n);
    if (!rb)
      return uri_err(r, "bad URL: missing ']' after IPv6 host");
    h->name.p = s + 1;
    h->name.n = (size_t)(rb - s - 1);
    h->ipv6 = true;
    size_t left = n - (size_t)(rb + 1 - s);
    if (left) {
      if (rb[1] != ':')
        return uri_err(r, "bad URL: junk after IPv6 host");
      portp = rb + 2;
      portlen = left - 1;
    }
    if (!ipv6_ok(h->name.p, h->name.n))
      return uri_err(r, "bad URL: not an IPv6 address in brackets");
  } else {
    const char *colon = memchr(s, ':', n);
    h->name.p = s;
    h->name.n = colon ? (size_t)(colon - s) : n;
    if (colon) {
      portp = colon + 1;
      portlen = n - h->name.n - 1;
    }
    if (h->name.n == 0)
      return uri_err(r, "bad URL: no host");
    for (size_t i = 0; i < h->name.n; i++) {
      unsigned char ch = (unsigned char)s[i];
      if (ch <= ' ' || ch >= 0x7f || ch == '@' || ch == '[' || ch == ']')
        return uri_err(r, "bad URL: invalid character in host");
    }
  }
  if (h->name.n > 255)
    return uri_err(r, "bad URL: host name too long");
  h->port = r->default_port;
  if (portp) {
    int port = parse_port(portp, portlen);
    if (port < 0)
      return uri_err(r, "bad URL: port must be a number from 1 to 65535");
    h->port = port;
    h->has_port = true;
  }
  return 0;
}

static int split_hosts(const char *s, size_t n, const dlock__uri_rules *r,
                       dlock__uri *u) {
  u->authority_hosts.p = s;
  u->authority_hosts.n = n;
  if (n == 0) {
    if (r->min_hosts == 0)
      return 0;
    return uri_err(r, "bad URL: no host");
  }
  size_t max = r->max_hosts;
  if (max > DLOCK__URI_MAX_HOSTS)
    max = DLOCK__URI_MAX_HOSTS;
  const char *end = s + n;
  while (s <= end) {
    const char *comma = memchr(s, ',', (size_t)(end - s));
    const char *ie = comma ? comma : end;
    if (u->nhosts == max) {
      if (max == 0)
        return uri_err(r, "bad URL: no host expected (%s)", r->example);
      if (max == 1)
        return dlock__seterr(
            DLOCK_EURL, "bad URL: one host only, not a list (%s)", r->example);
      if (r->list_noun)
        return uri_err(r, "bad URL: more than %zu %ss", max, r->list_noun);
      return uri_err(r, "bad URL: more than %zu hosts", max);
    }
    if (ie == s) {
      if (r->list_scheme && r->list_noun)
        return uri_err(r, "bad URL: %s: an empty host in the %s list",
                       r->list_scheme, r->list_noun);
      return uri_err(r, "bad URL: an empty host in the list");
    }
    int rc = split_host(s, (size_t)(ie - s), r, &u->hosts[u->nhosts]);
    if (rc)
      return rc;
    u->nhosts++;
    if (!comma)
      break;
    s = comma + 1;
  }
  if (u->nhosts < r->min_hosts)
    return uri_err(r, "bad URL: fewer than %zu hosts", r->min_hosts);
  return 0;
}

int dlock__uri_split(const char *url, const dlock__uri_rules *r,
                     dlock__uri *u) {
  memset(u, 0, sizeof *u);
  if (!url)
    return dlock__seterr(DLOCK_EINVAL, "URL is NULL");
  size_t len = strnlen(url, DLOCK__URI_MAX + 1);
  if (len == 0)
    return dlock__seterr(DLOCK_EURL, "bad URL: empty (expected %s)",
                         r->example);
  if (len > DLOCK__URI_MAX)
    return uri_err(r, "bad URL: longer than %d bytes", DLOCK__URI_MAX);
  for (size_t i = 0; i < len; i++) {
    unsigned char ch = (unsigned char)url[i];
    if (ch <= ' ' || ch == 0x7f)
      return uri_err(r, "bad URL: contains a space or control character");
  }
  /* scheme "://" */
  size_t i = 0;
  while (i < len &&
         ((url[i] >= 'a' && url[i] <= 'z') ||
          (url[i] >= 'A' && url[i] <= 'Z') ||
          (i > 0 && ((url[i] >= '0' && url[i] <= '9') || url[i] == '+' ||
                     url[i] == '-' || url[i] == '.'))))
    i++;
  if (i == 0 || i > 32 || len - i < 3 || memcmp(url + i, "://", 3) != 0)
    return dlock__seterr(DLOCK_EURL, "bad URL: expected %s", r->example);
  u->scheme.p = url;
  u->scheme.n = i;
  const char *auth = url + i + 3;
  const char *end = url + len;
  /* userinfo: up to the last '@' before the first '/' or '?' */
  size_t span = strcspn(auth, "/?");
  const char *at = NULL;
  for (size_t k = 0; k < span; k++)
    if (auth[k] == '@')
      at = auth + k;
  const char *hosts = auth;
  if (at) {
    u->has_userinfo = true;
    const char *colon = memchr(auth, ':', (size_t)(at - auth));
    u->user.p = auth;
    u->user.n = colon ? (size_t)(colon - auth) : (size_t)(at - auth);
    if (colon) {
      u->has_password = true;
      u->password.p = colon + 1;
      u->password.n = (size_t)(at - colon - 1);
    }
    hosts = at + 1;
  }
  size_t hlen = strcspn(hosts, "/?#");
  int rc = split_hosts(hosts, hlen, r, u);
  if (rc)
    return rc;
  const char *t = hosts + hlen;
  if (t < end && *t == '/') {
    size_t plen = strcspn(t, "?#");
    u->path.p = t;
    u->path.n = plen;
    t += plen;
  }
  if (t < end && *t == '?') {
    size_t qlen = strcspn(t + 1, "#");
    u->has_query = true;
    u->query.p = t + 1;
    u->query.n = qlen;
    t += 1 + qlen;
  }
  if (t < end && *t == '#') {
    u->has_fragment = true;
    u->fragment.p = t + 1;
    u->fragment.n = (size_t)(end - t - 1);
  }
  return 0;
}

void dlock__uri_query_begin(dlock__uri_query *it, const dlock__uri *u) {
  memset(it, 0, sizeof *it);
  if (u->has_query) { /* else both stay NULL: no arithmetic on NULL */
    it->p = u->query.p;
    it->end = u->query.p + u->query.n;
  }
}

int dlock__uri_query_next(dlock__uri_query *it) {
  while (it->p && it->p < it->end) {
    const char *amp = memchr(it->p, '&', (size_t)(it->end - it->p));
    const char *pe = amp ? amp : it->end;
    const char *s = it->p;
    it->p = amp ? amp + 1 : it->end;
    if (pe == s)
      continue;
    it->raw.p = s;
    it->raw.n = (size_t)(pe - s);
    const char *eq = memchr(s, '=', (size_t)(pe - s));
    dlock__slice k = {s, eq ? (size_t)(eq - s) : (size_t)(pe - s)};
    dlock__slice v = {eq ? eq + 1 : pe, eq ? (size_t)(pe - eq - 1) : 0};
    it->has_value = eq != NULL;
    int rc = dlock__uri_decode(k, it->key, sizeof it->key, NULL,
                               "a query parameter's name");
    if (!rc)
      rc = dlock__uri_decode(v, it->value, sizeof it->value, NULL,
                             "a query parameter's value");
    return rc ? rc : 1;
  }
  return 0;
}
