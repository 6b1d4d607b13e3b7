/*
 * uri.h - the one URL splitter every backend's URL parser builds on.
 *
 *   scheme://[user[:password]@]host[:port][,host[:port]...][/path][?query][#fragment]
 *
 * dlock__uri_split() cuts a URL into slices of the caller's string (no
 * allocation); the backend then reads the parts it understands and refuses
 * the rest. Errors are DLOCK_EURL with one "bad URL: ..." line that never
 * shows the userinfo. See uri.c for the RFC 3986 rules followed and where
 * this departs from them.
 */
#ifndef DLOCK_CORE_URI_H
#define DLOCK_CORE_URI_H

#include <stdbool.h>
#include <stddef.h>

#define DLOCK__URI_MAX 4096     /* bytes in a URL */
#define DLOCK__URI_MAX_HOSTS 64 /* hosts in one list */

typedef struct dlock__slice {
  const char *p; /* into the URL; not NUL-terminated */
  size_t n;
} dlock__slice;

typedef struct dlock__uri_host {
  dlock__slice name; /* without the brackets of an IPv6 literal */
  int port;          /* 1..65535; the rules' default when not given */
  bool ipv6;         /* was written in brackets */
  bool has_port;
} dlock__uri_host;

typedef struct dlock__uri {
  dlock__slice scheme; /* as written; compare with dlock__uri_scheme_is */
  bool has_userinfo;   /* an '@' was present */
  bool has_password;   /* a ':' in the userinfo */
  dlock__slice user;   /* raw (still %-encoded); decode with _decode */
  dlock__slice password;
  size_t nhosts;
  dlock__uri_host hosts[DLOCK__URI_MAX_HOSTS];
  dlock__slice authority_hosts; /* the host list as written, for messages */
  dlock__slice path;            /* from the '/' on, raw; n = 0 when absent */
  bool has_query;
  dlock__slice query; /* after the '?', raw */
  bool has_fragment;
  dlock__slice fragment; /* after the '#' */
} dlock__uri;

/* What a backend allows; the splitter enforces it. */
typedef struct dlock__uri_rules {
  const char *example; /* "redis://host:port", shown in some messages */
  int default_port;    /* given to hosts written without one (0: none) */
  size_t min_hosts;    /* 0: an empty authority is fine (unix:///path) */
  size_t max_hosts;    /* 1 for a single host, <= DLOCK__URI_MAX_HOSTS */
  /* Optional, for a host list's messages: the scheme and what the hosts
   * are, as in "bad URL: SCHEME://: an empty host in the NOUN list" and
   * "bad URL: more than 16 NOUNs" (NULL: "hosts"). */
  const char *list_scheme, *list_noun;
  /* Every message about the URL's form ends with " (expected EXAMPLE)". */
  bool example_always;
} dlock__uri_rules;

/* Splits url into *u. 0 or DLOCK_EURL / DLOCK_EINVAL (detail set). */
int dlock__uri_split(const char *url, const dlock__uri_rules *rules,
                     dlock__uri *u);

/* Whether u's scheme is `scheme`, without regard to case (RFC 3986 3.1). */
bool dlock__uri_scheme_is(const dlock__uri *u, const char *scheme);

/* Whether a slice equals a NUL-terminated string exactly. */
bool dlock__slice_eq(dlock__slice s, const char *str);

/* Percent-decodes s into out[cap] (NUL-terminated). %00, a bad or
 * truncated escape, or more than cap-1 bytes are DLOCK_EURL naming `what`
 * (e.g. "user or password"), never the text. Returns 0 or DLOCK_EURL. */
int dlock__uri_decode(dlock__slice s, char *out, size_t cap, size_t *outlen,
                      const char *what);

/* The same into a fresh string (dlock__free; NULL with *rc set). */
char *dlock__uri_decode_dup(dlock__slice s, const char *what, int *rc);

/* Query parameters, '&'-separated key=value pairs, percent-decoded. */
typedef struct dlock__uri_query {
  const char *p, *end;
  dlock__slice raw; /* the current pair as written, for messages */
  char key[64];
  char value[1024];
  bool has_value; /* an '=' was present */
} dlock__uri_query;

void dlock__uri_query_begin(dlock__uri_query *it, const dlock__uri *u);
/* 1 with it->key/value set, 0 at the end, DLOCK_EURL on a bad escape or a
 * key or value too long. Empty pairs ("a=1&&b=2") are skipped. */
int dlock__uri_query_next(dlock__uri_query *it);

#endif
