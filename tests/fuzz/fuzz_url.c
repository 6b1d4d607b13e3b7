/*
 * fuzz_url.c - libFuzzer target for the backend URL parser,
 * dlock__url_parse() (src/core/url.c), linked from the library's objects.
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
 *    port and path.
 * No threads, no I/O.
 */
#define _GNU_SOURCE 1

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/url.h"
#include "dlock/dlock.h"

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
  int rc = dlock__url_parse(ep->display, &again);
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *url = malloc(size + 1);
  if (!url)
    return 0;
  memcpy(url, data, size);
  url[size] = '\0';

  dlock__endpoint ep;
  memset(&ep, 0xa5, sizeof ep); /* the parser must set every field */
  int rc = dlock__url_parse(url, &ep);
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
      if (dlock__url_parse(url2, &ep2) != 0 && strcmp(pw, pw2) != 0)
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
