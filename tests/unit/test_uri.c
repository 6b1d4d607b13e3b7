/*
 * test_uri.c - the URL splitter every backend's URL parser builds on
 * (src/core/uri.c), table-driven, no server.
 *
 * Design note: each row is a URL and what the splitter must make of it
 * under a backend's rules (hosts allowed, default port): the scheme, the
 * raw user and password, every host and port, path, query, fragment; or
 * DLOCK_EURL with a part of the one-line message, which must never show
 * the userinfo. Then percent-decoding, query iteration, scheme case, and
 * the Redis parser on top of it (any case of scheme). Linked against the
 * static library, whose internal functions it calls.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "check.h"

#include "core/uri.h"
#include "redis/redis.h"
#include "redis/url.h"

static const dlock__uri_rules one = {.example = "redis://host:port",
                                     .default_port = 6379,
                                     .min_hosts = 1,
                                     .max_hosts = 1};
static const dlock__uri_rules list = {.example = "zk://host:port,...",
                                      .default_port = 2181,
                                      .min_hosts = 1,
                                      .max_hosts = 16};
static const dlock__uri_rules none = {.example = "unix:///path",
                                      .max_hosts = 0};

static const dlock__uri_rules sent = {.example = "redis-sentinel://...",
                                      .default_port = 6379,
                                      .min_hosts = 1,
                                      .max_hosts = 16,
                                      .list_scheme = "redis-sentinel://",
                                      .list_noun = "sentinel"};

static bool sl(dlock__slice s, const char *want) {
  return dlock__slice_eq(s, want);
}

typedef struct good_row {
  const dlock__uri_rules *rules;
  const char *url, *scheme, *user, *password; /* NULL: absent */
  const char *hosts;                          /* "h:p,h:p" as parsed */
  const char *path, *query, *fragment;        /* NULL: absent */
} good_row;

#define G(rules, url, scheme, user, pw, hosts, path, query, frag)              \
  { &rules, url, scheme, user, pw, hosts, path, query, frag }

static const good_row good[] = {
    G(one, "redis://127.0.0.1", "redis", NULL, NULL, "127.0.0.1:6379", NULL,
      NULL, NULL),
    G(one, "REDIS://Host:1", "REDIS", NULL, NULL, "Host:1", NULL, NULL, NULL),
    G(one, "redis://h:65535/3?db=2#x", "redis", NULL, NULL, "h:65535", "/3",
      "db=2", "x"),
    G(one, "rediss://u:p%40ss@h", "rediss", "u", "p%40ss", "h:6379", NULL, NULL,
      NULL),
    G(one, "redis://:pw@h", "redis", "", "pw", "h:6379", NULL, NULL, NULL),
    G(one, "redis://user@h", "redis", "user", NULL, "h:6379", NULL, NULL, NULL),
    /* the last '@' ends the userinfo; a raw '#' or ':' stays in it */
    G(one, "redis://u:a@b#c:d@h:7", "redis", "u", "a@b#c:d", "h:7", NULL, NULL,
      NULL),
    G(one, "redis://[::1]:6380", "redis", NULL, NULL, "::1:6380", NULL, NULL,
      NULL),
    G(one, "redis://[fe80::1%25eth0]", "redis", NULL, NULL,
      "fe80::1%25eth0:6379", NULL, NULL, NULL),
    G(one, "redis://[::ffff:127.0.0.1]", "redis", NULL, NULL,
      "::ffff:127.0.0.1:6379", NULL, NULL, NULL),
    G(list, "zk://a:1,b,[::1]:3/chroot/x?base=/y", "zk", NULL, NULL,
      "a:1,b:2181,::1:3", "/chroot/x", "base=/y", NULL),
    G(list, "Etcd+X.1-2://h?", "Etcd+X.1-2", NULL, NULL, "h:2181", NULL, "",
      NULL),
    G(list, "zk://h#", "zk", NULL, NULL, "h:2181", NULL, NULL, ""),
    G(none, "unix:///run/r.sock?db=1", "unix", NULL, NULL, "", "/run/r.sock",
      "db=1", NULL),
};

typedef struct bad_row {
  const dlock__uri_rules *rules;
  const char *url, *msg; /* msg: a part of the error line */
} bad_row;

#define B(rules, url, msg)                                                     \
  { &rules, url, msg }

static const bad_row bad[] = {
    B(one, "", "bad URL: empty (expected redis://host:port)"),
    B(one, "redis://h h", "space or control character"),
    B(one, "redis://h\x01", "space or control character"),
    B(one, "redis://h\x7f", "space or control character"),
    B(one, "redis:/h", "expected redis://host:port"),
    B(one, "://h", "expected redis://host:port"),
    B(one, "1redis://h", "expected redis://host:port"),
    B(one, "re dis://h", "space"),
    B(one, "redis_x://h", "expected redis://host:port"),
    B(one, "redis://", "bad URL: no host"),
    B(one, "redis://:secretpw@", "bad URL: no host"),
    B(one, "redis://h:", "port must be a number from 1 to 65535"),
    B(one, "redis://h:0", "port must be a number from 1 to 65535"),
    B(one, "redis://h:65536", "port must be a number from 1 to 65535"),
    B(one, "redis://h:99999999999", "port must be a number from 1 to 65535"),
    B(one, "redis://h:-1", "port must be a number from 1 to 65535"),
    B(one, "redis://h:1x", "port must be a number from 1 to 65535"),
    B(one, "redis://[::1", "missing ']' after IPv6 host"),
    B(one, "redis://[::1]x", "junk after IPv6 host"),
    B(one, "redis://[]", "not an IPv6 address in brackets"),
    B(one, "redis://[host]", "not an IPv6 address in brackets"),
    B(one, "redis://[::1%]", "not an IPv6 address in brackets"),
    B(one, "redis://a]b", "invalid character in host"),
    B(one, "redis://h\xc3\xa9", "invalid character in host"),
    B(one, "redis://a,b", "one host only, not a list (redis://host:port)"),
    B(list, "zk://a,,b", "an empty host in the list"),
    B(list, "zk://a,", "an empty host in the list"),
    B(list, "zk://,a", "an empty host in the list"),
    B(list, "zk://a,b:0", "port must be a number from 1 to 65535"),
    B(list, "zk://a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q", "more than 16 hosts"),
    B(sent, "redis-sentinel://a,/m",
      "bad URL: redis-sentinel://: an empty host in the sentinel list"),
    B(sent, "redis-sentinel://a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q/m",
      "bad URL: more than 16 sentinels"),
    B(none, "unix://h/x", "no host expected (unix:///path)"),
};

static void t_split_good(void) {
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    const good_row *g = &good[i];
    dlock__uri u;
    int rc = dlock__uri_split(g->url, g->rules, &u);
    CHECKF(rc == 0, "%s: %s", g->url, dlock_last_error());
    CHECKF(sl(u.scheme, g->scheme), "%s: scheme", g->url);
    CHECKF(u.has_userinfo == (g->user != NULL), "%s: userinfo", g->url);
    if (g->user)
      CHECKF(sl(u.user, g->user), "%s: user '%.*s'", g->url, (int)u.user.n,
             u.user.p);
    CHECKF(u.has_password == (g->password != NULL), "%s: password?", g->url);
    if (g->password)
      CHECKF(sl(u.password, g->password), "%s: password", g->url);
    char hosts[256] = "";
    size_t off = 0;
    for (size_t k = 0; k < u.nhosts; k++)
      off += (size_t)snprintf(hosts + off, sizeof hosts - off, "%s%.*s:%d",
                              k ? "," : "", (int)u.hosts[k].name.n,
                              u.hosts[k].name.p, u.hosts[k].port);
    CHECKF(strcmp(hosts, g->hosts) == 0, "%s: hosts '%s'", g->url, hosts);
    CHECKF(u.path.n == (g->path ? strlen(g->path) : 0) &&
               (!g->path || sl(u.path, g->path)),
           "%s: path '%.*s'", g->url, (int)u.path.n, u.path.p);
    CHECKF(u.has_query == (g->query != NULL), "%s: query?", g->url);
    if (g->query)
      CHECKF(sl(u.query, g->query), "%s: query", g->url);
    CHECKF(u.has_fragment == (g->fragment != NULL), "%s: fragment?", g->url);
    if (g->fragment)
      CHECKF(sl(u.fragment, g->fragment), "%s: fragment", g->url);
  }
  /* brackets mark IPv6, and has_port what was written */
  dlock__uri u;
  CHECK_OK(dlock__uri_split("zk://[::1],h:5", &list, &u));
  CHECK(u.hosts[0].ipv6 && !u.hosts[0].has_port);
  CHECK(!u.hosts[1].ipv6 && u.hosts[1].has_port);
}

static void t_split_bad(void) {
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const bad_row *b = &bad[i];
    dlock__uri u;
    int rc = dlock__uri_split(b->url, b->rules, &u);
    CHECKF(rc == DLOCK_EURL, "%s: got %s", b->url, dlock_err_name(rc));
    const char *e = dlock_last_error();
    CHECKF(strstr(e, b->msg) != NULL, "%s: '%s' lacks '%s'", b->url, e, b->msg);
    CHECKF(strchr(e, '\n') == NULL, "%s: more than one line", b->url);
    CHECKF(strstr(e, "secretpw") == NULL, "%s: shows the password", b->url);
  }
  CHECK_RC(dlock__uri_split(NULL, &one, &(dlock__uri){0}), DLOCK_EINVAL);
  /* 4096 bytes pass, 4097 do not */
  static char big[4098];
  memcpy(big, "redis://", 8);
  memset(big + 8, 'a', sizeof big - 9);
  big[4096] = '\0';
  dlock__uri u;
  CHECK_RC(dlock__uri_split(big, &one, &u), DLOCK_EURL); /* host > 255 */
  CHECK(strstr(dlock_last_error(), "host name too long") != NULL);
  big[4096] = 'a';
  CHECK_RC(dlock__uri_split(big, &one, &u), DLOCK_EURL);
  CHECK(strstr(dlock_last_error(), "longer than 4096 bytes") != NULL);
}

static void t_decode(void) {
  char out[16];
  size_t n = 0;
  dlock__slice s = {"a%41%2f%7E+b", 12};
  CHECK_OK(dlock__uri_decode(s, out, sizeof out, &n, "x"));
  CHECK_STR(out, "aA/~+b");
  CHECK_INT(n, ==, 6);
  const char *esc[] = {"%", "%4", "a%4", "%zz", "%4g", "%00", "%g4"};
  for (size_t i = 0; i < sizeof esc / sizeof esc[0]; i++) {
    dlock__slice b = {esc[i], strlen(esc[i])};
    CHECK_RC(dlock__uri_decode(b, out, sizeof out, NULL, "user or password"),
             DLOCK_EURL);
    CHECK(strstr(dlock_last_error(), "%-escape in user or password") != NULL);
  }
  dlock__slice lng = {"0123456789abcdef", 16};
  CHECK_RC(dlock__uri_decode(lng, out, sizeof out, NULL, "a name"), DLOCK_EURL);
  CHECK(strstr(dlock_last_error(), "a name longer than 15 bytes") != NULL);
  int rc = 0;
  char *d = dlock__uri_decode_dup(s, "x", &rc);
  CHECK(d != NULL && rc == 0);
  CHECK_STR(d, "aA/~+b");
  free(d);
}

static void t_query(void) {
  dlock__uri u;
  CHECK_OK(dlock__uri_split("zk://h?a=1&&b%3D=x%26y&flag&=v#f", &list, &u));
  dlock__uri_query q;
  dlock__uri_query_begin(&q, &u);
  CHECK_INT(dlock__uri_query_next(&q), ==, 1);
  CHECK_STR(q.key, "a");
  CHECK_STR(q.value, "1");
  CHECK(q.has_value);
  CHECK_INT(dlock__uri_query_next(&q), ==, 1);
  CHECK_STR(q.key, "b=");
  CHECK_STR(q.value, "x&y");
  CHECK(sl(q.raw, "b%3D=x%26y"));
  CHECK_INT(dlock__uri_query_next(&q), ==, 1);
  CHECK_STR(q.key, "flag");
  CHECK(!q.has_value);
  CHECK_INT(dlock__uri_query_next(&q), ==, 1);
  CHECK_STR(q.key, "");
  CHECK_STR(q.value, "v");
  CHECK_INT(dlock__uri_query_next(&q), ==, 0);
  CHECK_INT(dlock__uri_query_next(&q), ==, 0);
  /* no query at all, and a bad escape */
  CHECK_OK(dlock__uri_split("zk://h", &list, &u));
  dlock__uri_query_begin(&q, &u);
  CHECK_INT(dlock__uri_query_next(&q), ==, 0);
  CHECK_OK(dlock__uri_split("zk://h?a=%zz", &list, &u));
  dlock__uri_query_begin(&q, &u);
  CHECK_RC(dlock__uri_query_next(&q), DLOCK_EURL);
  CHECK(strstr(dlock_last_error(), "a query parameter's value") != NULL);
}

static void t_scheme_case(void) {
  dlock__uri u;
  CHECK_OK(dlock__uri_split("ReDiS-Sentinel://h", &list, &u));
  CHECK(dlock__uri_scheme_is(&u, "redis-sentinel"));
  CHECK(dlock__uri_scheme_is(&u, "REDIS-SENTINEL"));
  CHECK(!dlock__uri_scheme_is(&u, "redis"));
  CHECK(!dlock__uri_scheme_is(&u, "redis-sentinelx"));
  /* the Redis parser on top reads every scheme in any case */
  const char *urls[] = {"REDIS://h:1/2", "Rediss://h:1/2", "UNIX:///s?db=2"};
  for (size_t i = 0; i < 3; i++) {
    dlock__endpoint ep;
    CHECKF(dlock__redis_url_parse(urls[i], &ep) == 0, "%s: %s", urls[i],
           dlock_last_error());
    CHECK_INT(ep.db, ==, 2);
    CHECK(ep.tls == (i == 1));
    dlock__endpoint_clear(&ep);
  }
}

static void t_redis(void) {
  dlock__endpoint ep;
  CHECK_OK(dlock__redis_url_parse("redis://u%3A:p%40w@[::1]:7/3", &ep));
  CHECK_STR(ep.user, "u:");
  CHECK_STR(ep.password, "p@w");
  CHECK_STR(ep.host, "::1");
  CHECK_INT(ep.port, ==, 7);
  CHECK_INT(ep.db, ==, 3);
  CHECK_STR(ep.display, "redis://u:@[::1]:7");
  dlock__endpoint_clear(&ep);
  struct {
    const char *url, *msg;
  } rows[] = {
      {"redis://a,b", "one host only"},
      {"redis://h#frag", "fragment means nothing to Redis"},
      {"redis://u@h", "credentials need a ':'"},
      {"redis://u:@h", "user given without password"},
      {"redis://h?db=x", "db must be a number"},
      {"redis://h?timeout=1",
       "unknown parameter 'timeout=1' (db=N, layout=redisson|spring, "
       "registry=KEY)"},
      {"redis://h/x", "path must be a database number"},
      {"unix://run/s", "unix:// needs an absolute path"},
      {"unix:///", "empty socket path"},
      {"http://h", "unknown scheme 'http'"},
      {"redis://:secretpw%zz@h", "invalid %-escape in user or password"},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    int rc = dlock__redis_url_parse(rows[i].url, &ep);
    CHECKF(rc == DLOCK_EURL, "%s: %s", rows[i].url, dlock_err_name(rc));
    CHECKF(strstr(dlock_last_error(), rows[i].msg) != NULL, "%s: '%s'",
           rows[i].url, dlock_last_error());
    CHECK(strstr(dlock_last_error(), "secretpw") == NULL);
    CHECK(ep.host == NULL && ep.user == NULL && ep.password == NULL &&
          ep.display == NULL);
  }
}

/* redis-sentinel:// on the splitter: the data nodes' endpoint carries the
 * credentials and db, the sentinels are bare; schemes in any case */
static void t_sentinel(void) {
  dlock__redis_sentinel *s = NULL;
  dlock__endpoint data;
  CHECK_OK(dlock__redis_sentinel_parse(
      "Redis-Sentinel://u:p%40w@h1,[::1]:26379/mymaster/2", NULL, NULL, &s,
      &data));
  /* a sentinel without a port is at Sentinel's port, 26379 */
  CHECK_STR(dlock__redis_sentinel_display(s),
            "redis-sentinel://h1:26379/mymaster");
  CHECK_STR(data.user, "u");
  CHECK_STR(data.password, "p@w");
  CHECK_STR(data.host, "h1");
  CHECK_INT(data.db, ==, 2);
  dlock__redis_sentinel_free(s);
  dlock__endpoint_clear(&data);
  struct {
    const char *url, *msg;
  } rows[] = {
      {"redis-sentinel://h:1", "no master name"},
      {"redis-sentinel://h:1/", "no master name"},
      {"redis-sentinel://h:1//0", "no master name"},
      {"redis-sentinel://h:1/m?x", "unknown parameter 'x'"},
      {"redis-sentinel://h:1/m#x", "fragment means nothing to Redis"},
      {"redis-sentinel://h:1,/m", "an empty host in the sentinel list"},
      {"redis-sentinel://h:99999/m", "port must be a number from 1 to 65535"},
      {"redis-sentinel://:secretpw@h/m/x", "path must be a database number"},
      {"redis-sentinel://u@h/m", "credentials need a ':'"},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    int rc = dlock__redis_sentinel_parse(rows[i].url, NULL, NULL, &s, &data);
    CHECKF(rc == DLOCK_EURL, "%s: %s", rows[i].url, dlock_err_name(rc));
    CHECKF(strstr(dlock_last_error(), rows[i].msg) != NULL, "%s: '%s'",
           rows[i].url, dlock_last_error());
    CHECK(strstr(dlock_last_error(), "secretpw") == NULL);
    CHECK(s == NULL && data.host == NULL && data.password == NULL);
  }
}

/* clang-format off */
static const check_case_t cases[] = {
    {"split_good", t_split_good},
    {"split_bad", t_split_bad},
    {"decode", t_decode},
    {"query", t_query},
    {"scheme_case", t_scheme_case},
    {"redis", t_redis},
    {"sentinel", t_sentinel},
};
/* clang-format on */

CHECK_MAIN(cases)
