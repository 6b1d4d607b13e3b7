/*
 * bench_redis.c - INFO snapshots for the benchmark (see bench_redis.h).
 *
 * Design: one blocking hiredis connection, used only by the main thread
 * between measured phases (and, in the latch scenario, between rounds: the
 * subscriber count of a channel); it parses the few INFO fields the
 * benchmark reports. The URL parser accepts the forms dlock
 * accepts (redis://, unix://) but only what INFO needs: address and
 * credentials (the db is irrelevant to INFO). No global state.
 */
#include "bench_redis.h"

#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

struct bench_redis {
  redisContext *ctx;
};

static int hexval(int c) {
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/* Copies [s, s+n) percent-decoded into out (size cap). */
static void decode(const char *s, size_t n, char *out, size_t cap) {
  size_t o = 0;
  for (size_t i = 0; i < n && o + 1 < cap; i++) {
    if (s[i] == '%' && i + 2 < n && hexval(s[i + 1]) >= 0 &&
        hexval(s[i + 2]) >= 0) {
      out[o++] = (char)(hexval(s[i + 1]) * 16 + hexval(s[i + 2]));
      i += 2;
    } else {
      out[o++] = s[i];
    }
  }
  out[o] = '\0';
}

static void seterr(char *err, size_t errlen, const char *msg, const char *arg) {
  if (err && errlen)
    snprintf(err, errlen, "%s%s", msg, arg ? arg : "");
}

static int do_auth(redisContext *ctx, const char *user, const char *pass) {
  redisReply *rep = user[0] ? redisCommand(ctx, "AUTH %s %s", user, pass)
                            : redisCommand(ctx, "AUTH %s", pass);
  int ok = rep && rep->type != REDIS_REPLY_ERROR;
  if (rep)
    freeReplyObject(rep);
  return ok ? 0 : -1;
}

int bench_redis_open(const char *url, bench_redis_t **out, char *err,
                     size_t errlen) {
  *out = NULL;
  struct timeval tv = {5, 0};
  redisContext *ctx = NULL;
  char user[256] = "", pass[256] = "", host[256] = "";
  if (strncmp(url, "unix://", 7) == 0) {
    const char *p = url + 7;
    size_t n = strcspn(p, "?");
    decode(p, n, host, sizeof host);
    ctx = redisConnectUnixWithTimeout(host, tv);
  } else if (strncmp(url, "redis://", 8) == 0) {
    const char *p = url + 8;
    size_t auth_end = strcspn(p, "/");
    const char *at = NULL;
    for (const char *q = p; q < p + auth_end; q++)
      if (*q == '@')
        at = q;
    if (at) {
      const char *colon = memchr(p, ':', (size_t)(at - p));
      if (colon) {
        decode(p, (size_t)(colon - p), user, sizeof user);
        decode(colon + 1, (size_t)(at - colon - 1), pass, sizeof pass);
      } else {
        decode(p, (size_t)(at - p), pass, sizeof pass);
      }
      p = at + 1;
    }
    int port = 6379;
    const char *end = p + strcspn(p, "/?");
    const char *colon = NULL;
    if (*p == '[') {
      const char *rb = memchr(p, ']', (size_t)(end - p));
      if (!rb) {
        seterr(err, errlen, "bad URL: ", url);
        return -1;
      }
      snprintf(host, sizeof host, "%.*s", (int)(rb - p - 1), p + 1);
      if (rb + 1 < end && rb[1] == ':')
        colon = rb + 1;
    } else {
      colon = memchr(p, ':', (size_t)(end - p));
      size_t hl = colon ? (size_t)(colon - p) : (size_t)(end - p);
      snprintf(host, sizeof host, "%.*s", (int)hl, p);
    }
    if (colon)
      port = atoi(colon + 1);
    if (!host[0] || port <= 0 || port > 65535) {
      seterr(err, errlen, "bad URL: ", url);
      return -1;
    }
    ctx = redisConnectWithTimeout(host, port, tv);
  } else {
    seterr(err, errlen, "unsupported URL (redis:// or unix:// only): ", url);
    return -1;
  }
  if (!ctx || ctx->err) {
    seterr(err, errlen,
           "cannot connect for INFO: ", ctx ? ctx->errstr : "out of memory");
    if (ctx)
      redisFree(ctx);
    return -1;
  }
  redisSetTimeout(ctx, tv);
  if (pass[0] && do_auth(ctx, user, pass)) {
    seterr(err, errlen, "AUTH refused on the INFO connection", NULL);
    redisFree(ctx);
    return -1;
  }
  bench_redis_t *r = calloc(1, sizeof *r);
  if (!r) {
    redisFree(ctx);
    seterr(err, errlen, "out of memory", NULL);
    return -1;
  }
  r->ctx = ctx;
  *out = r;
  return 0;
}

void bench_redis_close(bench_redis_t *r) {
  if (!r)
    return;
  redisFree(r->ctx);
  free(r);
}

int bench_redis_numsub(bench_redis_t *r, const char *channel,
                       long long *out) {
  *out = 0;
  redisReply *rep = redisCommand(r->ctx, "PUBSUB NUMSUB %s", channel);
  int ok = rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
           rep->element[1]->type == REDIS_REPLY_INTEGER;
  if (ok)
    *out = rep->element[1]->integer;
  if (rep)
    freeReplyObject(rep);
  return ok ? 0 : -1;
}

static long long field(const char *text, const char *name) {
  size_t n = strlen(name);
  for (const char *p = text; p && *p; p = strchr(p, '\n')) {
    if (*p == '\n')
      p++;
    if (strncmp(p, name, n) == 0 && p[n] == ':')
      return strtoll(p + n + 1, NULL, 10);
  }
  return 0;
}

int bench_redis_info(bench_redis_t *r, bench_info_t *out) {
  memset(out, 0, sizeof *out);
  redisReply *rep =
      redisCommand(r->ctx, "INFO commandstats stats memory keyspace");
  if (!rep)
    return -1;
  if (rep->type != REDIS_REPLY_STRING && rep->type != REDIS_REPLY_STATUS) {
    freeReplyObject(rep);
    return -1;
  }
  const char *text = rep->str;
  out->used_memory = field(text, "used_memory");
  out->reads = field(text, "total_reads_processed");
  for (const char *p = text; p && *p; p = strchr(p, '\n')) {
    if (*p == '\n')
      p++;
    if (strncmp(p, "cmdstat_", 8) == 0 && out->ncmds < BENCH_MAX_CMDS) {
      const char *name = p + 8;
      size_t nl = strcspn(name, ":\r\n");
      const char *calls = strstr(name, "calls=");
      const char *usec = strstr(name, ",usec=");
      if (nl < sizeof out->cmds[0].name && calls) {
        memcpy(out->cmds[out->ncmds].name, name, nl);
        out->cmds[out->ncmds].name[nl] = '\0';
        out->cmds[out->ncmds].calls = strtoll(calls + 6, NULL, 10);
        out->cmds[out->ncmds].usec = usec ? strtoll(usec + 6, NULL, 10) : 0;
        out->ncmds++;
      }
    } else if (strncmp(p, "db", 2) == 0) {
      const char *k = strstr(p, "keys=");
      const char *eol = strchr(p, '\n');
      if (k && (!eol || k < eol))
        out->keys += strtoll(k + 5, NULL, 10);
    }
  }
  freeReplyObject(rep);
  return 0;
}

static long long calls_of(const bench_info_t *a, const char *name) {
  for (size_t i = 0; i < a->ncmds; i++)
    if (strcmp(a->cmds[i].name, name) == 0)
      return a->cmds[i].calls;
  return 0;
}

long long bench_info_delta(const bench_info_t *a, const bench_info_t *b,
                           const char *name) {
  return calls_of(b, name) - calls_of(a, name);
}

static const char *const script_cmds[] = {"eval",       "evalsha", "eval_ro",
                                          "evalsha_ro", "fcall",   "fcall_ro"};

long long bench_info_scripts(const bench_info_t *a, const bench_info_t *b) {
  long long n = 0;
  for (size_t i = 0; i < sizeof script_cmds / sizeof script_cmds[0]; i++)
    n += bench_info_delta(a, b, script_cmds[i]);
  return n;
}

static long long usec_of(const bench_info_t *a, const char *name) {
  for (size_t i = 0; i < a->ncmds; i++)
    if (strcmp(a->cmds[i].name, name) == 0)
      return a->cmds[i].usec;
  return 0;
}

long long bench_info_script_usec(const bench_info_t *a,
                                 const bench_info_t *b) {
  long long n = 0;
  for (size_t i = 0; i < sizeof script_cmds / sizeof script_cmds[0]; i++)
    n += usec_of(b, script_cmds[i]) - usec_of(a, script_cmds[i]);
  return n;
}

long long bench_info_calls(const bench_info_t *a, const bench_info_t *b) {
  long long n = 0;
  for (size_t i = 0; i < b->ncmds; i++)
    if (strcmp(b->cmds[i].name, "info") != 0)
      n += b->cmds[i].calls - calls_of(a, b->cmds[i].name);
  return n;
}
