/*
 * fuzz_url.c - libFuzzer target for the URL splitter, dlock__uri_split()
 * (src/core/uri.c), and the Redis URL parser on it,
 * dlock__redis_url_parse() (src/redis/url.c), linked from the library's
 * objects.
 *
 * Design note: the input is the URL (cut at its first NUL, as a C caller
 * would pass it). Besides memory safety (ASan/UBSan), each run checks what
 * the parser promises, so a wrong-but-harmless parse is caught too:
 *  - the result is 0, DLOCK_EURL or DLOCK_ENOTSUP (nothing else can happen
 *    for a non-NULL string without memory pressure), with a one-line detail
 *    on failure and the endpoint left all-zero;
 *  - on success the fields are in range (port 1..65535, db 0..1000000, host
 *    1..255 bytes without spaces, socket path absolute and < 108 bytes) and
 *    the display form is exactly "redis[s]://[user@]host:port" (brackets for an
 *    IPv6 host) or "unix://path": never the password;
 *  - the detail of a failure never shows the URL's password when that
 *    password is distinctive (>= 4 bytes, found once in the URL);
 *  - the display form of a URL without a user parses back to the same host,
 *    port and path;
 *  - the splitter, under a one-host and a host-list rule set: 0 or
 *    DLOCK_EURL with one line; on success every slice lies inside the URL
 *    and they follow one another in order (scheme, userinfo, hosts, path,
 *    query, fragment), hosts are 1..16 with ports 1..65535, and the same
 *    URL splits the same way twice.
 * No threads, no I/O.
 */
#define _GNU_SOURCE 1

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/uri.h"
#include "dlock/dlock.h"
#include "redis/url.h"

#define FCHECK(cond)                                                           \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "fuzz_url: %s:%d: check failed: %s\n", __FILE__,         \
              __LINE__, #cond);                                                \
      abort();                                                                 \
    }                                                                          \
  } while (0)

static size_t occurrences(const char *hay, const char *needle, size_t nlen) {
  size_t n = 0;
  if (nlen == 0)
    return 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
    n++;
  return n;
}

/* The raw password span of a redis:// URL, found the way the URL grammar
 * defines it (userinfo ends at the last '@' of the authority, the password
 * follows the first ':' of the userinfo); NULL when there is none. */
static char *raw_password(const char *url) {
  if (strncmp(url, "redis://", 8) != 0)
    return NULL;
  const char *auth = url + 8;
  size_t alen = strcspn(auth, "/?");
  const char *at = NULL;
  for (size_t i = 0; i < alen; i++)
    if (auth[i] == '@')
      at = auth + i;
  if (!at)
    return NULL;
  const char *colon = memchr(auth, ':', (size_t)(at - auth));
  if (!colon)
    return NULL;
  return strndup(colon + 1, (size_t)(at - colon - 1));
}

/* Another password of the same shape: every letter and digit moved to the
 * next one of its kind (hex digits stay hex digits), the rest kept. A
 * password found in a message is an echo only if the other one is found in
 * the message for the other URL too; otherwise the message's own words
 * happened to contain it. */
static void other_password(char *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char c = p[i];
    if (c >= '0' && c <= '9')
      p[i] = (char)('0' + (c - '0' + 1) % 10);
    else if (c >= 'a' && c <= 'f')
      p[i] = (char)('a' + (c - 'a' + 1) % 6);
    else if (c >= 'A' && c <= 'F')
      p[i] = (char)('A' + (c - 'A' + 1) % 6);
    else if (c >= 'g' && c <= 'z')
      p[i] = (char)('g' + (c - 'g' + 1) % 20);
    else if (c >= 'G' && c <= 'Z')
      p[i] = (char)('G' + (c - 'G' + 1) % 20);
  }
}

static void check_all_zero(const dlock__endpoint *ep) {
  FCHECK(ep->host == NULL && ep->path == NULL && ep->user == NULL &&
         ep->password == NULL && ep->display == NULL && ep->port == 0 &&
         ep->db == 0);
}

static void check_ok(const dlock__endpoint *ep) {
  char want[700];
  FCHECK(ep->display != NULL);
  FCHECK(ep->db >= 0 && ep->db <= 1000000);
  if (ep->kind == DLOCK__EP_TCP) {
    FCHECK(ep->host != NULL && ep->path == NULL);
    size_t hl = strlen(ep->host);
    FCHECK(hl >= 1 && hl <= 255);
    for (size_t i = 0; i < hl; i++) {
      unsigned char ch = (unsigned char)ep->host[i];
      FCHECK(ch > ' ' && ch < 0x7f && ch != '@' && ch != '[' && ch != ']' &&
             ch != '/' && ch != '?');
    }
    FCHECK(ep->port >= 1 && ep->port <= 65535);
    FCHECK(ep->user == NULL || ep->user[0] != '\0');
    FCHECK(ep->password == NULL || ep->password[0] != '\0');
    /* a user never comes without a password */
    FCHECK(ep->user == NULL || ep->password != NULL);
    bool v6 = strchr(ep->host, ':') != NULL;
    if (!ep->user) {
      snprintf(want, sizeof want, "%s://%s%s%s:%d",
               ep->tls ? "rediss" : "redis", v6 ? "[" : "", ep->host,
               v6 ? "]" : "", ep->port);
      FCHECK(strcmp(ep->display, want) == 0);
    } else {
      /* the user may be up to 4096 bytes: compare piecewise */
      size_t ul = strlen(ep->user);
      const char *scheme = ep->tls ? "rediss://" : "redis://";
      size_t sl = strlen(scheme);
      FCHECK(strncmp(ep->display, scheme, sl) == 0);
      FCHECK(strncmp(ep->display + sl, ep->user, ul) == 0);
      snprintf(want, sizeof want, "@%s%s%s:%d", v6 ? "[" : "", ep->host,
               v6 ? "]" : "", ep->port);
      FCHECK(strcmp(ep->display + sl + ul, want) == 0);
    }
  } else {
    FCHECK(ep->kind == DLOCK__EP_UNIX);
    FCHECK(ep->path != NULL && ep->host == NULL);
    FCHECK(ep->path[0] == '/' && strlen(ep->path) >= 2 &&
           strlen(ep->path) < 108);
    FCHECK(strncmp(ep->display, "unix://", 7) == 0 &&
           strcmp(ep->display + 7, ep->path) == 0);
    FCHECK(ep->user == NULL && ep->password == NULL);
  }
}

/* The display form of an endpoint without a user parses back to it. */
static void check_round_trip(const dlock__endpoint *ep) {
  if (ep->user)
    return;
  dlock__endpoint again;
  int rc = dlock__redis_url_parse(ep->display, &again);
  FCHECK(rc == 0);
  FCHECK(again.kind == ep->kind);
  if (ep->kind == DLOCK__EP_TCP) {
    FCHECK(strcmp(again.host, ep->host) == 0);
    FCHECK(again.port == ep->port);
    FCHECK(again.password == NULL && again.user == NULL);
  } else {
    FCHECK(strcmp(again.path, ep->path) == 0);
  }
  FCHECK(again.db == 0);
  dlock__endpoint_clear(&again);
}

static bool inside(dlock__slice s, const char *url, size_t len) {
  return s.n == 0 || (s.p >= url && s.p + s.n <= url + len);
}

static void check_split(const char *url, const dlock__uri_rules *rules) {
  dlock__uri u;
  int rc = dlock__uri_split(url, rules, &u);
  FCHECK(rc == 0 || rc == DLOCK_EURL);
  if (rc) {
    const char *err = dlock_last_error();
    FCHECK(strncmp(err, "bad URL: ", 9) == 0 && strchr(err, '\n') == NULL);
    return;
  }
  size_t len = strlen(url);
  FCHECK(u.scheme.p == url && u.scheme.n > 0 && inside(u.scheme, url, len));
  FCHECK(u.nhosts >= rules->min_hosts && u.nhosts <= rules->max_hosts);
  const char *at = url + u.scheme.n + 3;
  if (u.has_userinfo) {
    FCHECK(u.user.p == at && inside(u.user, url, len));
    FCHECK(!u.has_password || inside(u.password, url, len));
  }
  for (size_t i = 0; i < u.nhosts; i++) {
    const dlock__uri_host *h = &u.hosts[i];
    FCHECK(h->name.n >= 1 && h->name.n <= 255 && inside(h->name, url, len));
    FCHECK(h->name.p >= at);
    at = h->name.p + h->name.n;
    FCHECK(h->port >= 1 && h->port <= 65535);
    FCHECK(!memchr(h->name.p, ',', h->name.n));
    FCHECK(h->ipv6 || !memchr(h->name.p, ':', h->name.n));
  }
  if (u.path.n) {
    FCHECK(u.path.p[0] == '/' && inside(u.path, url, len) && u.path.p >= at);
    at = u.path.p + u.path.n;
  }
  if (u.has_query) {
    FCHECK(u.query.p[-1] == '?' && inside(u.query, url, len) && u.query.p > at);
    at = u.query.p + u.query.n;
  }
  if (u.has_fragment)
    FCHECK(u.fragment.p[-1] == '#' &&
           u.fragment.p + u.fragment.n == url + len && u.fragment.p > at);
  dlock__uri_query q;
  dlock__uri_query_begin(&q, &u);
  for (int i = 0; i < 4096 && (rc = dlock__uri_query_next(&q)) == 1; i++)
    FCHECK(strlen(q.key) < sizeof q.key && strlen(q.value) < sizeof q.value);
  FCHECK(rc == 0 || rc == 1 || rc == DLOCK_EURL);
  dlock__uri again;
  FCHECK(dlock__uri_split(url, rules, &again) == 0);
  FCHECK(memcmp(&u, &again, sizeof u) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *url = malloc(size + 1);
  if (!url)
    return 0;
  memcpy(url, data, size);
  url[size] = '\0';

  static const dlock__uri_rules one = {.example = "redis://host:port",
                                       .default_port = 6379,
                                       .min_hosts = 1,
                                       .max_hosts = 1};
  static const dlock__uri_rules many = {.example = "zk://host,...",
                                        .default_port = 2181,
                                        .min_hosts = 0,
                                        .max_hosts = 16};
  check_split(url, &one);
  check_split(url, &many);

  dlock__endpoint ep;
  memset(&ep, 0xa5, sizeof ep); /* the parser must set every field */
  int rc = dlock__redis_url_parse(url, &ep);
  FCHECK(rc == 0 || rc == DLOCK_EURL || rc == DLOCK_ENOTSUP);
  if (rc == 0) {
    check_ok(&ep);
    check_round_trip(&ep);
  } else {
    check_all_zero(&ep);
    const char *err = dlock_last_error();
    FCHECK(err[0] != '\0' && strchr(err, '\n') == NULL);
    char *pw = raw_password(url);
    if (pw && strlen(pw) >= 4 && occurrences(url, pw, strlen(pw)) == 1 &&
        strstr(err, pw)) {
      /* the same URL with another password of the same shape */
      char *url2 = strdup(url);
      FCHECK(url2 != NULL);
      char *at = strstr(url2 + 8, pw);
      FCHECK(at != NULL);
      other_password(at, strlen(pw));
      char *pw2 = strndup(at, strlen(pw));
      dlock__endpoint ep2;
      if (dlock__redis_url_parse(url2, &ep2) != 0 && strcmp(pw, pw2) != 0)
        FCHECK(strstr(dlock_last_error(), pw2) == NULL);
      dlock__endpoint_clear(&ep2);
      free(pw2);
      free(url2);
    }
    free(pw);
  }
  dlock__endpoint_clear(&ep);
  check_all_zero(&ep);
  free(url);
  return 0;
}
