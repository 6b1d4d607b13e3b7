/*
 * url.c - backend URL parser (see url.h).
 *
 * Strict on purpose: anything unexpected is DLOCK_EURL with a message that
 * says which part is wrong, since a silently misread URL points a fleet at
 * the wrong server. Error messages never echo the userinfo part.
 */
#include "url.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "alloc.h"
#include "error.h"

#define URL_MAX 4096

void dlock__endpoint_clear(dlock__endpoint *ep) {
  if (!ep)
    return;
  dlock__free(ep->host);
  dlock__free(ep->path);
  dlock__free(ep->user);
  if (ep->password) {
    memset(ep->password, 0, strlen(ep->password));
    dlock__free(ep->password);
  }
  dlock__free(ep->display);
  memset(ep, 0, sizeof *ep);
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

/* Percent-decodes s[0..len) into a fresh string; NULL on a bad escape. */
static char *pct_decode(const char *s, size_t len, int *rc) {
  char *out = dlock__calloc(len + 1, 1);
  if (!out) {
    *rc = DLOCK_ENOMEM;
    return NULL;
  }
  size_t o = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] == '%') {
      if (i + 2 >= len) {
        dlock__free(out);
        *rc = dlock__seterr(DLOCK_EURL, "bad URL: truncated %%-escape in "
                                        "user or password");
        return NULL;
      }
      int a = hexval((unsigned char)s[i + 1]);
      int b = hexval((unsigned char)s[i + 2]);
      if (a < 0 || b < 0 || (a == 0 && b == 0)) {
        dlock__free(out);
        *rc = dlock__seterr(DLOCK_EURL,
                            "bad URL: invalid %%-escape in user or password");
        return NULL;
      }
      out[o++] = (char)(a * 16 + b);
      i += 2;
    } else {
      out[o++] = s[i];
    }
  }
  return out;
}

/* Parses a decimal in [lo, hi] from s[0..len); -1 on failure. */
static long parse_num(const char *s, size_t len, long lo, long hi) {
  if (len == 0 || len > 10)
    return -1;
  long v = 0;
  for (size_t i = 0; i < len; i++) {
    if (!isdigit((unsigned char)s[i]))
      return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v < lo || v > hi ? -1 : v;
}

/* Query string: only db=N is understood. */
static int parse_query(const char *q, size_t len, dlock__endpoint *ep) {
  const char *end = q + len;
  while (q < end) {
    const char *amp = memchr(q, '&', (size_t)(end - q));
    const char *pe = amp ? amp : end;
    if (pe - q > 3 && memcmp(q, "db=", 3) == 0) {
      long db = parse_num(q + 3, (size_t)(pe - q - 3), 0, 1000000);
      if (db < 0)
        return dlock__seterr(DLOCK_EURL, "bad URL: db must be a number");
      ep->db = (int)db;
    } else if (pe != q) {
      return dlock__seterr(DLOCK_EURL,
                           "bad URL: unknown parameter '%.*s' (only db=N)",
                           (int)(pe - q > 64 ? 64 : pe - q), q);
    }
    q = amp ? amp + 1 : end;
  }
  return 0;
}

static int parse_unix(const char *rest, dlock__endpoint *ep) {
  /* rest follows "unix://"; the path must be absolute */
  if (rest[0] != '/')
    return dlock__seterr(DLOCK_EURL,
                         "bad URL: unix:// needs an absolute path, as in "
                         "unix:///run/redis.sock");
  const char *q = strchr(rest, '?');
  size_t plen = q ? (size_t)(q - rest) : strlen(rest);
  if (plen < 2)
    return dlock__seterr(DLOCK_EURL, "bad URL: empty socket path");
  if (plen >= 108)
    return dlock__seterr(DLOCK_EURL,
                         "bad URL: socket path longer than 107 bytes");
  ep->kind = DLOCK__EP_UNIX;
  if (!(ep->path = dlock__strndup(rest, plen)))
    return DLOCK_ENOMEM;
  if (q) {
    int rc = parse_query(q + 1, strlen(q + 1), ep);
    if (rc)
      return rc;
  }
  ep->display = dlock__asprintf("unix://%s", ep->path);
  return ep->display ? 0 : DLOCK_ENOMEM;
}

static int parse_userinfo(const char *s, size_t len, dlock__endpoint *ep) {
  const char *colon = memchr(s, ':', len);
  int rc = 0;
  if (!colon)
    return dlock__seterr(
        DLOCK_EURL, "bad URL: credentials need a ':' as in "
                    "redis://user:password@host or redis://:password@host");
  size_t ulen = (size_t)(colon - s);
  size_t plen = len - ulen - 1;
  if (ulen) {
    if (!(ep->user = pct_decode(s, ulen, &rc)))
      return rc;
  }
  if (plen) {
    if (!(ep->password = pct_decode(colon + 1, plen, &rc)))
      return rc;
  } else if (ulen) {
    return dlock__seterr(DLOCK_EURL, "bad URL: user given without password");
  }
  return 0;
}

static int parse_tcp(const char *rest, dlock__endpoint *ep) {
  ep->kind = DLOCK__EP_TCP;
  ep->port = 6379;
  /* authority runs to the first '/', '?' or the end */
  size_t alen = strcspn(rest, "/?");
  const char *auth = rest;
  const char *tail = rest + alen;
  /* userinfo ends at the last '@' of the authority */
  const char *at = NULL;
  for (size_t i = 0; i < alen; i++)
    if (auth[i] == '@')
      at = auth + i;
  const char *hp = auth;
  size_t hplen = alen;
  if (at) {
    int rc = parse_userinfo(auth, (size_t)(at - auth), ep);
    if (rc)
      return rc;
    hp = at + 1;
    hplen = alen - (size_t)(hp - auth);
  }
  const char *host;
  size_t hlen;
  const char *portp = NULL;
  size_t portlen = 0;
  if (hplen && hp[0] == '[') {
    const char *rb = memchr(hp, ']', hplen);
    if (!rb)
      return dlock__seterr(DLOCK_EURL, "bad URL: missing ']' after IPv6 host");
    host = hp + 1;
    hlen = (size_t)(rb - hp - 1);
    const char *after = rb + 1;
    size_t left = hplen - (size_t)(after - hp);
    if (left) {
      if (after[0] != ':')
        return dlock__seterr(DLOCK_EURL, "bad URL: junk after IPv6 host");
      portp = after + 1;
      portlen = left - 1;
    }
  } else {
    const char *colon = memchr(hp, ':', hplen);
    host = hp;
    hlen = colon ? (size_t)(colon - hp) : hplen;
    if (colon) {
      portp = colon + 1;
      portlen = hplen - hlen - 1;
    }
  }
  if (hlen == 0)
    return dlock__seterr(DLOCK_EURL, "bad URL: no host");
  if (hlen > 255)
    return dlock__seterr(DLOCK_EURL, "bad URL: host name too long");
  for (size_t i = 0; i < hlen; i++) {
    unsigned char ch = (unsigned char)host[i];
    if (ch <= ' ' || ch >= 0x7f || ch == '@' || ch == '[' || ch == ']')
      return dlock__seterr(DLOCK_EURL, "bad URL: invalid character in host");
  }
  if (portp) {
    long port = parse_num(portp, portlen, 1, 65535);
    if (port < 0)
      return dlock__seterr(DLOCK_EURL,
                           "bad URL: port must be a number from 1 to 65535");
    ep->port = (int)port;
  }
  if (!(ep->host = dlock__strndup(host, hlen)))
    return DLOCK_ENOMEM;
  if (*tail == '/') {
    const char *dbp = tail + 1;
    size_t dblen = strcspn(dbp, "?");
    if (dblen) {
      long db = parse_num(dbp, dblen, 0, 1000000);
      if (db < 0)
        return dlock__seterr(DLOCK_EURL,
                             "bad URL: path must be a database number, as in "
                             "redis://host:6379/0");
      ep->db = (int)db;
    }
    tail = dbp + dblen;
  }
  if (*tail == '?') {
    int rc = parse_query(tail + 1, strlen(tail + 1), ep);
    if (rc)
      return rc;
  }
  int v6 = memchr(ep->host, ':', hlen) != NULL;
  ep->display = dlock__asprintf(
      "%s://%s%s%s%s%s:%d", ep->tls ? "rediss" : "redis", ep->user ? ep->user : "", ep->user ? "@" : "",
      v6 ? "[" : "", ep->host, v6 ? "]" : "", ep->port);
  return ep->display ? 0 : DLOCK_ENOMEM;
}

int dlock__url_parse(const char *url, dlock__endpoint *ep) {
  memset(ep, 0, sizeof *ep);
  if (!url)
    return dlock__seterr(DLOCK_EINVAL, "URL is NULL");
  size_t len = strnlen(url, URL_MAX + 1);
  if (len == 0)
    return dlock__seterr(DLOCK_EURL,
                         "bad URL: empty (expected redis://host:port)");
  if (len > URL_MAX)
    return dlock__seterr(DLOCK_EURL, "bad URL: longer than %d bytes", URL_MAX);
  for (size_t i = 0; i < len; i++) {
    unsigned char ch = (unsigned char)url[i];
    if (ch <= ' ' || ch == 0x7f)
      return dlock__seterr(DLOCK_EURL,
                           "bad URL: contains a space or control character");
  }
  int rc;
  /* schemes are case-insensitive (RFC 3986 3.1), as the registry reads them */
  if (strncasecmp(url, "redis://", 8) == 0) {
    rc = parse_tcp(url + 8, ep);
  } else if (strncasecmp(url, "unix://", 7) == 0) {
    rc = parse_unix(url + 7, ep);
  } else if (strncasecmp(url, "rediss://", 9) == 0) {
    ep->tls = true;
    rc = parse_tcp(url + 9, ep);
  } else { /* the registry sent another scheme here: a programming error */
    const char *colon = strstr(url, "://");
    if (colon && colon - url < 16)
      rc = dlock__seterr(DLOCK_EURL,
                         "bad URL: unknown scheme '%.*s' (expected redis:// "
                         "or unix://)",
                         (int)(colon - url), url);
    else
      rc = dlock__seterr(DLOCK_EURL, "bad URL: expected redis://host:port or "
                                     "unix:///path");
  }
  if (rc)
    dlock__endpoint_clear(ep);
  return rc;
}
