/*
 * url.c - finding and hiding the secret in a backend URL.
 *
 * Design note. Two needs, two rules.
 *   - Reading a URL (its user and password, to pair a user with a password
 *     from elsewhere; the URL without its userinfo; the address a message
 *     leads with): the library's own splitter (core/uri.h, with rules that
 *     fit every backend: any number of hosts, no default port), so that the
 *     command reads a URL exactly as the library will. A URL it cannot
 *     split, or whose user does not decode, is left as it is: the library
 *     then refuses it with its own message.
 *   - Hiding the secret (a password is never printed back, docs/dlock.1;
 *     argv is scrubbed in place, `ps` must not show it): deliberately
 *     broader than any parser, as it must also hide the secret of a URL the
 *     library refuses and of URL-shaped text inside messages. The userinfo
 *     runs from "://" to the LAST '@' (host, port and db never contain '@',
 *     a password may, even a '/' or '?' by mistake), and a lone userinfo
 *     without ':' is hidden as well. For unix:// a path right after "://"
 *     means there is no userinfo. Hiding too much in a message costs
 *     nothing; hiding too little leaks a credential.
 * Everything here is pure and bounded.
 */
#define _POSIX_C_SOURCE 200809L

#include "url.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/uri.h"

/* The library's splitter with rules every backend's URL meets; false when
 * the URL does not split. */
static bool split(const char *url, dlock__uri *u) {
  static const dlock__uri_rules any = {.example = "SCHEME://...",
                                       .max_hosts = DLOCK__URI_MAX_HOSTS};
  return dlock__uri_split(url, &any, u) == 0;
}

/* A percent-decoded copy of s (malloc'd); NULL when it does not decode
 * (a bad escape, %00) or out of memory. */
static char *decoded(dlock__slice s) {
  char *out = malloc(s.n + 1);
  if (out != NULL && dlock__uri_decode(s, out, s.n + 1, NULL, "userinfo")) {
    free(out);
    out = NULL;
  }
  return out;
}

/* Locates the userinfo for hiding (the broad rule): [*start, *end). */
static bool userinfo(const char *url, size_t *start, size_t *end) {
  const char *sep = strstr(url, "://");
  const char *rest, *at;
  if (sep == NULL)
    return false;
  rest = sep + 3;
  if (*rest == '/')
    return false; /* unix:///path: no authority at all */
  at = strrchr(rest, '@');
  if (at == NULL)
    return false;
  *start = (size_t)(rest - url);
  *end = (size_t)(at - url);
  return true;
}

bool cli_url_secret_span(const char *url, size_t *off, size_t *len) {
  size_t s, e;
  const char *colon;
  if (!userinfo(url, &s, &e))
    return false;
  colon = memchr(url + s, ':', e - s);
  if (colon != NULL)
    s = (size_t)(colon - url) + 1;
  if (e <= s)
    return false;
  *off = s;
  *len = e - s;
  return true;
}

bool cli_url_has_password(const char *url) {
  dlock__uri u;
  return split(url, &u) && u.has_password && u.password.n > 0;
}

char *cli_url_redact(const char *url) {
  size_t off, len, n = strlen(url);
  char *out;
  if (!cli_url_secret_span(url, &off, &len)) {
    out = malloc(n + 1);
    if (out != NULL)
      memcpy(out, url, n + 1);
    return out;
  }
  out = malloc(n - len + 4);
  if (out == NULL)
    return NULL;
  memcpy(out, url, off);
  memcpy(out + off, "***", 3);
  memcpy(out + off + 3, url + off + len, n - off - len + 1);
  return out;
}

char *cli_url_user(const char *url) {
  dlock__uri u;
  if (!split(url, &u) || u.user.n == 0)
    return NULL;
  return decoded(u.user);
}

char *cli_url_password(const char *url) {
  dlock__uri u;
  if (!split(url, &u) || !u.has_password || u.password.n == 0)
    return NULL;
  return decoded(u.password);
}

char *cli_url_without_userinfo(const char *url) {
  size_t n = strlen(url);
  char *out = malloc(n + 1), *user;
  dlock__uri u;
  if (out == NULL)
    return NULL;
  memcpy(out, url, n + 1);
  if (!split(url, &u) || !u.has_userinfo)
    return out;
  if (u.user.n > 0) { /* a user that does not decode: left for the library */
    if ((user = decoded(u.user)) == NULL)
      return out;
    free(user);
  }
  /* the userinfo runs from after "://" to its '@' */
  size_t s = u.scheme.n + 3;
  size_t e = u.has_password ? (size_t)(u.password.p + u.password.n - url)
                            : (size_t)(u.user.p + u.user.n - url);
  if (e >= n || url[e] != '@')
    return out;
  memmove(out + s, out + e + 1, n - e); /* skips "userinfo@" and its NUL */
  return out;
}

size_t cli_url_peer_prefix(const char *url, const char *detail) {
  dlock__uri u;
  const char *hp;
  size_t hlen, k;
  if (!split(url, &u))
    return 0;
  hp = u.authority_hosts.p;
  hlen = u.authority_hosts.n;
  if (hlen == 0 || strncmp(detail, hp, hlen) != 0)
    return 0;
  k = hlen;
  if (detail[k] == ':' && memchr(hp, ':', hlen) == NULL) {
    /* "host" in the URL, "host:6379" in the message */
    size_t d = k + 1;
    while (detail[d] >= '0' && detail[d] <= '9')
      d++;
    if (d > k + 1)
      k = d;
  }
  if (detail[k] == ':' && detail[k + 1] == ' ')
    return k + 2;
  return 0;
}

static bool has_scheme(const char *url, const char *scheme) {
  size_t i;
  for (i = 0; scheme[i] != '\0'; i++) {
    char c = url[i];
    if (c >= 'A' && c <= 'Z')
      c = (char)(c - 'A' + 'a');
    if (c != scheme[i])
      return false;
  }
  return true;
}

bool cli_url_is_tls(const char *url) {
  return has_scheme(url, "rediss://") || has_scheme(url, "etcds://");
}

static void redact_urls(char *text, bool whole);

void cli_one_line(const char *in, char *out, size_t outlen) {
  /* the whole text first (a cut could separate a secret from its '@'),
   * while a control byte still ends a URL as it did in the text */
  char *t = strdup(in);
  size_t n;
  if (outlen == 0)
    return;
  if (t == NULL) {
    snprintf(out, outlen, "(message withheld: out of memory)");
    return;
  }
  redact_urls(t, false);
  n = strlen(t);
  if (n >= outlen)
    n = outlen - 1;
  memcpy(out, t, n);
  out[n] = '\0';
  free(t);
  for (char *p = out; *p != '\0'; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f)
      *p = ' ';
}

/* Ends a URL-shaped token inside free text: the quotes and spaces a
 * message puts around it. The URL's own delimiters ('/', '?', '#') do not
 * end it: a password may hold them by mistake, and hiding too much is the
 * safe error (argv scrubbing also reaches to the last '@'). */
static bool ends_authority(char ch, bool whole) {
  return ch == '\0' || (!whole && (ch == ' ' || ch == '\'' || ch == '"' ||
                                   ch == '\n' || ch == '\t'));
}

void cli_redact_urls_in_text(char *text) { redact_urls(text, false); }

void cli_redact_url_arg(char *arg) { redact_urls(arg, true); }

static void redact_urls(char *text, bool whole) {
  static const char mask[] = "***";
  char *p = text;
  for (int guard = 0; guard < 64 && (p = strstr(p, "://")) != NULL; guard++) {
    char *auth = p + 3, *at = NULL, *q = auth;
    for (; !ends_authority(*q, whole); q++)
      if (*q == '@')
        at = q; /* the userinfo ends at the authority's last '@' */
    if (at == NULL || at == auth) {
      p = auth;
      continue;
    }
    char *colon = memchr(auth, ':', (size_t)(at - auth));
    char *sec = colon != NULL ? colon + 1 : auth;
    if (sec >= at) {
      p = at;
      continue;
    }
    size_t seclen = (size_t)(at - sec), rest = strlen(at) + 1;
    if (seclen >= sizeof mask - 1) { /* the text only shrinks */
      memcpy(sec, mask, sizeof mask - 1);
      memmove(sec + sizeof mask - 1, at, rest);
      p = sec + sizeof mask - 1;
    } else {
      memset(sec, '*', seclen); /* shorter than the mask: hide in place */
      p = at;
    }
  }
}
