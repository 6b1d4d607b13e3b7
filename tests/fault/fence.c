/*
 * fence.c - the fenced resource and the mutual-exclusion checker (fence.h).
 *
 * Design note. The resource lives in its own redis-server. Per lock it
 * keeps three keys: fence:max:{lock} (highest token seen), fence:data:{lock}
 * (the protected data: the last accepted writer) and fence:log:{lock} (a
 * list of records, in the order the resource executed them):
 *
 *   B <holder> <token> <acq_us> ok|refused      hold begins
 *   W <holder> <token> <sent_us> ok|refused     write
 *   E <holder> <token> <end_us> <outcome>       hold ends
 *
 * Begin and write go through one Lua script, so the token check and the
 * write are one atomic step on the resource: a token below the maximum is
 * refused, equal or higher is accepted (and raises the maximum). Nothing is
 * shared between threads: each thread opens its own fence_t.
 *
 * Shared holds (the read side of a read-write lock) log S (begin) and R (a
 * read) instead of B and W. Readers hold together, each with its own token,
 * so a shared record is checked against fence:maxw:{lock}, the highest token
 * of an exclusive record only: a reader is refused once a writer with a
 * higher token has been seen, never because of another reader. It still
 * raises fence:max, so a stale writer is refused after a later reader.
 * Locks with exclusive holds only behave exactly as before.
 *
 * Capacity (fence:cap:{lock}, absent = 1). Above 1, begins and writes are
 * checked against fence:open:{lock}, a sorted set of the open holds (holder
 * -> token; a begin adds, fence_leave or an end removes): refused when N
 * open holds have a higher token. Holders leave the set before they
 * release (their end record comes after the release, with its outcome), so
 * the set never names a hold that was already given back, and a refusal
 * means N + 1 holders, one of them stale. The analysis then counts, at each grant, the holds still
 * open (a violation when N untold ones were), and calls a write stale when
 * N holds granted after its own were open when it was sent.
 *
 * The analysis rebuilds holds from the log (a holder's records arrive in
 * its program order) and checks two things on the holders' shared monotonic
 * clock:
 *   overlap: a hold granted before an earlier hold of the same lock ended
 *            (sessions sorted by grant time, a sweep over the latest end);
 *            for a shared hold only earlier exclusive holds count;
 *   stale write accepted: an accepted write sent after a later hold had
 *            been granted (for a shared hold's read: a later exclusive
 *            hold). Grant times, not tokens, decide "later", so a
 *            token drawn out of order (the interim INCR token) cannot hide
 *            a stale write.
 * A correct lock makes both impossible: a holder stamps its end before it
 * calls release, and the next holder stamps its grant after its acquire
 * returned.
 */
#define _GNU_SOURCE 1
#include "fence.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct fence {
  redisContext *ctx;
};

static const char FENCE_LUA[] =
    "local max = tonumber(redis.call('get', KEYS[1]) or '0')\n"
    "local cap = tonumber(redis.call('get', KEYS[5]) or '1')\n"
    "local t = tonumber(ARGV[2])\n"
    "local shared = ARGV[1] == 'S' or ARGV[1] == 'R'\n"
    "local ok\n"
    "if shared then\n"
    "  ok = t >= tonumber(redis.call('get', KEYS[4]) or '0')\n"
    "elseif cap > 1 then\n"
    "  ok = redis.call('zcount', KEYS[6], '(' .. ARGV[2], '+inf') < cap\n"
    "  if ok and ARGV[1] == 'B' then\n"
    "    redis.call('zadd', KEYS[6], ARGV[2], ARGV[3])\n"
    "  end\n"
    "else\n"
    "  ok = t >= max\n"
    "  if ok then redis.call('set', KEYS[4], ARGV[2]) end\n"
    "end\n"
    "if ok then\n"
    "  if t > max then redis.call('set', KEYS[1], ARGV[2]) end\n"
    "  if ARGV[1] == 'W' then\n"
    "    redis.call('set', KEYS[3], ARGV[3] .. ' ' .. ARGV[2])\n"
    "  end\n"
    "end\n"
    "redis.call('rpush', KEYS[2], ARGV[1] .. ' ' .. ARGV[3] .. ' ' ..\n"
    "  ARGV[2] .. ' ' .. ARGV[4] .. ' ' .. (ok and 'ok' or 'refused'))\n"
    "if ok then return 1 end\n"
    "return 0\n";

/* End of a hold: the log record, and the hold leaves the open set (used
 * with a capacity above 1 only; ZREM of a missing member does nothing). */
static const char FENCE_END_LUA[] =
    "redis.call('zrem', KEYS[2], ARGV[1])\n"
    "return redis.call('rpush', KEYS[1], ARGV[2])\n";

int64_t fence_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void keyname(char *buf, size_t n, const char *what, const char *lock) {
  snprintf(buf, n, "fence:%s:{%s}", what, lock);
}

fence_t *fence_open(const char *host, int port) {
  struct timeval tv = {.tv_sec = 5, .tv_usec = 0};
  redisContext *c = redisConnectWithTimeout(host, port, tv);
  if (!c || c->err) {
    fprintf(stderr, "fence: connect %s:%d: %s\n", host, port,
            c ? c->errstr : "out of memory");
    if (c)
      redisFree(c);
    return NULL;
  }
  redisSetTimeout(c, tv);
  fence_t *f = calloc(1, sizeof *f);
  if (!f) {
    redisFree(c);
    return NULL;
  }
  f->ctx = c;
  return f;
}

void fence_close(fence_t *f) {
  if (!f)
    return;
  redisFree(f->ctx);
  free(f);
}

static int fenced(fence_t *f, const char *kind, const char *lock,
                  const char *holder, int64_t token, int64_t stamp) {
  char kmax[1200], klog[1200], kdata[1200], kmaxw[1200], kcap[1200],
      kopen[1200];
  keyname(kmax, sizeof kmax, "max", lock);
  keyname(klog, sizeof klog, "log", lock);
  keyname(kdata, sizeof kdata, "data", lock);
  keyname(kmaxw, sizeof kmaxw, "maxw", lock);
  keyname(kcap, sizeof kcap, "cap", lock);
  keyname(kopen, sizeof kopen, "open", lock);
  redisReply *r = redisCommand(
      f->ctx, "EVAL %s 6 %s %s %s %s %s %s %s %lld %s %lld", FENCE_LUA, kmax,
      klog, kdata, kmaxw, kcap, kopen, kind, (long long)token, holder,
      (long long)stamp);
  int rc = FENCE_ERROR;
  if (r && r->type == REDIS_REPLY_INTEGER)
    rc = r->integer == 1 ? FENCE_ACCEPTED : FENCE_REFUSED;
  else
    fprintf(stderr, "fence: %s: %s\n", kind,
            r && r->type == REDIS_REPLY_ERROR ? r->str : f->ctx->errstr);
  if (r)
    freeReplyObject(r);
  return rc;
}

/* 0 when r is a reply of `type`, else -1 (said on stderr); frees r. */
static int reply_is(fence_t *f, redisReply *r, int type, const char *what) {
  int rc = r && r->type == type ? 0 : -1;
  if (rc)
    fprintf(stderr, "fence: %s: %s\n", what,
            r && r->type == REDIS_REPLY_ERROR ? r->str : f->ctx->errstr);
  if (r)
    freeReplyObject(r);
  return rc;
}

int fence_set_capacity(fence_t *f, const char *lock, int capacity) {
  if (capacity < 1)
    return -1;
  char kcap[1200];
  keyname(kcap, sizeof kcap, "cap", lock);
  return reply_is(f, redisCommand(f->ctx, "SET %s %d", kcap, capacity),
                  REDIS_REPLY_STATUS, "capacity");
}

int fence_begin(fence_t *f, const char *lock, const char *holder, int64_t token,
                int64_t acq_us) {
  return fence_begin_as(f, lock, holder, token, acq_us, false);
}

int fence_write(fence_t *f, const char *lock, const char *holder,
                int64_t token) {
  return fence_write_as(f, lock, holder, token, false);
}

int fence_begin_as(fence_t *f, const char *lock, const char *holder,
                   int64_t token, int64_t acq_us, bool shared) {
  return fenced(f, shared ? "S" : "B", lock, holder, token, acq_us);
}

int fence_write_as(fence_t *f, const char *lock, const char *holder,
                   int64_t token, bool shared) {
  return fenced(f, shared ? "R" : "W", lock, holder, token, fence_now_us());
}

int fence_end(fence_t *f, const char *lock, const char *holder, int64_t token,
              int64_t end_us, const char *outcome) {
  char klog[1200], kopen[1200];
  keyname(klog, sizeof klog, "log", lock);
  keyname(kopen, sizeof kopen, "open", lock);
  char rec[256];
  snprintf(rec, sizeof rec, "E %s %lld %lld %s", holder, (long long)token,
           (long long)end_us, outcome);
  return reply_is(f,
                  redisCommand(f->ctx, "EVAL %s 2 %s %s %s %s", FENCE_END_LUA,
                               klog, kopen, holder, rec),
                  REDIS_REPLY_INTEGER, "end");
}

int fence_leave(fence_t *f, const char *lock, const char *holder) {
  char kopen[1200];
  keyname(kopen, sizeof kopen, "open", lock);
  return reply_is(f, redisCommand(f->ctx, "ZREM %s %s", kopen, holder),
                  REDIS_REPLY_INTEGER, "leave");
}

void fence_token_key(const char *lock, char *buf, size_t n) {
  snprintf(buf, n, "fault_fence_token:{%s}", lock);
}

int64_t fence_token_next(redisContext *lock_server, const char *lock) {
  char k[1200];
  fence_token_key(lock, k, sizeof k);
  redisReply *r = redisCommand(lock_server, "INCR %s", k);
  int64_t t = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
  if (r)
    freeReplyObject(r);
  return t;
}

/* ------------------------------------------------------------ analysis */

typedef struct session {
  char holder[64];
  int64_t token, acq, end;
  bool lost;    /* outcome "lost": the holder was told */
  bool closed;  /* has an end record */
  bool shared;  /* a shared (read) hold */
  /* earliest grant after this one that excludes it (INT64_MAX: none): any
   * grant for an exclusive hold, an exclusive grant for a shared one */
  int64_t next;
  size_t rank; /* position in grant order */
} session_t;

typedef struct wrec {
  size_t sess; /* index into sessions, SIZE_MAX: outside any hold */
  int64_t sent;
  bool ok;
} wrec_t;

typedef struct vec {
  void *v;
  size_t n, cap, size;
} vec_t;

static void *vec_push(vec_t *a) {
  if (a->n == a->cap) {
    size_t cap = a->cap ? a->cap * 2 : 256;
    void *nv = realloc(a->v, cap * a->size);
    if (!nv)
      return NULL;
    a->v = nv;
    a->cap = cap;
  }
  void *p = (char *)a->v + a->n * a->size;
  memset(p, 0, a->size);
  a->n++;
  return p;
}

/* holder -> its open session (linear: holders are a few hundred at most) */
typedef struct open_map {
  char holder[64];
  size_t sess; /* SIZE_MAX when none open */
} open_map_t;

static open_map_t *open_find(vec_t *m, const char *holder) {
  open_map_t *e = m->v;
  for (size_t i = 0; i < m->n; i++)
    if (strcmp(e[i].holder, holder) == 0)
      return &e[i];
  open_map_t *n = vec_push(m);
  if (n) {
    snprintf(n->holder, sizeof n->holder, "%s", holder);
    n->sess = SIZE_MAX;
  }
  return n;
}

static int by_acq(const void *a, const void *b) {
  const session_t *x = *(session_t *const *)a, *y = *(session_t *const *)b;
  return x->acq < y->acq ? -1 : x->acq > y->acq;
}

__attribute__((format(printf, 2, 3))) static void
problem(fence_report_t *r, const char *fmt, ...) {
  if (r->first_problem[0])
    return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->first_problem, sizeof r->first_problem, fmt, ap);
  va_end(ap);
}

/* One log record into the session/write tables. */
static int take_record(const char *line, vec_t *sess, vec_t *writes,
                       vec_t *open, fence_report_t *out) {
  char kind, holder[64], res[64];
  long long token, stamp;
  if (sscanf(line, "%c %63s %lld %lld %63s", &kind, holder, &token, &stamp,
             res) != 5)
    return -1;
  open_map_t *o = open_find(open, holder);
  if (!o)
    return -1;
  if (token > out->max_token)
    out->max_token = token;
  if (kind == 'B' || kind == 'S') {
    if (o->sess != SIZE_MAX)
      problem(out, "%s began a hold (token %lld) with one still open (%lld)",
              holder, token, (long long)((session_t *)sess->v)[o->sess].token);
    session_t *s = vec_push(sess);
    if (!s)
      return -1;
    snprintf(s->holder, sizeof s->holder, "%s", holder);
    s->token = token;
    s->acq = stamp;
    s->end = INT64_MAX;
    s->shared = kind == 'S';
    o->sess = sess->n - 1;
    out->sessions++;
    if (s->shared)
      out->shared_sessions++;
    if (strcmp(res, "ok") != 0)
      out->begins_refused++;
  } else if (kind == 'W' || kind == 'R') {
    wrec_t *w = vec_push(writes);
    if (!w)
      return -1;
    w->sess = o->sess;
    w->sent = stamp;
    w->ok = strcmp(res, "ok") == 0;
    if (w->ok)
      out->writes_ok++;
    else
      out->writes_refused++;
  } else if (kind == 'E') {
    if (o->sess == SIZE_MAX) {
      problem(out, "%s ended a hold (token %lld) it had not begun", holder,
              token);
      return 0;
    }
    session_t *s = &((session_t *)sess->v)[o->sess];
    s->end = stamp;
    s->closed = true;
    s->lost = strcmp(res, "lost") == 0;
    o->sess = SIZE_MAX;
  } else {
    return -1;
  }
  return 0;
}

/* Exclusive and shared holds (capacity 1): the sweep in grant order over
 * the latest end so far, kept apart for holds whose holder was told it
 * lost the lock; then each hold's next excluding grant. */
static void exclusive_sweep(session_t **order, size_t n, fence_report_t *out) {
  /* [0]: every hold, [1]: exclusive holds only. An exclusive hold must
   * begin after every earlier hold ended, a shared one after every
   * earlier exclusive hold ended. */
  int64_t end_told[2] = {INT64_MIN, INT64_MIN};
  int64_t end_silent[2] = {INT64_MIN, INT64_MIN};
  int64_t end_shared = INT64_MIN;
  const session_t *silent_by[2] = {NULL, NULL};
  for (size_t k = 0; k < n; k++) {
    session_t *s = order[k];
    int ref = s->shared ? 1 : 0;
    if (s->acq < end_silent[ref]) {
      out->overlaps++;
      problem(out,
              "%s (token %lld%s) granted %lld us before %s (token %lld) "
              "ended its hold",
              s->holder, (long long)s->token, s->shared ? ", shared" : "",
              (long long)(end_silent[ref] - s->acq),
              silent_by[ref] ? silent_by[ref]->holder : "?",
              silent_by[ref] ? (long long)silent_by[ref]->token : -1LL);
    } else if (s->acq < end_told[ref]) {
      out->overlaps_lost++;
    }
    if (s->shared && s->acq < end_shared)
      out->shared_overlaps++;
    for (int i = 0; i < (s->shared ? 1 : 2); i++) {
      if (s->lost) {
        if (s->end > end_told[i])
          end_told[i] = s->end;
      } else if (s->end > end_silent[i]) {
        end_silent[i] = s->end;
        silent_by[i] = s;
      }
    }
    if (s->shared && s->end > end_shared)
      end_shared = s->end;
  }
  /* the next grant that excludes each hold, from the back */
  int64_t next_any = INT64_MAX, next_excl = INT64_MAX;
  for (size_t k = n; k-- > 0;) {
    session_t *s = order[k];
    s->next = s->shared ? next_excl : next_any;
    next_any = s->acq;
    if (!s->shared)
      next_excl = s->acq;
  }
}

/* Capacity cap > 1 (permits of a semaphore): the sweep in grant order
 * keeps the holds still open at each grant. A grant while cap holds whose
 * holders were never told were open is a violation; one that exceeds cap
 * only by counting holds whose holder was told (outcome "lost") is counted
 * apart, as for exclusive holds. max_holders is the peak of untold holds
 * (the new one included). 0 or -1 (out of memory). */
static int capacity_sweep(session_t **order, size_t n, int64_t cap,
                          fence_report_t *out) {
  size_t *open = calloc(n, sizeof *open);
  if (!open)
    return -1;
  size_t nopen = 0;
  for (size_t k = 0; k < n; k++) {
    session_t *s = order[k];
    s->rank = k;
    int64_t silent = 0, told = 0;
    const session_t *by = NULL;
    size_t m = 0;
    for (size_t i = 0; i < nopen; i++) {
      const session_t *o = order[open[i]];
      if (o->end <= s->acq)
        continue;
      open[m++] = open[i];
      if (o->lost) {
        told++;
      } else {
        silent++;
        by = o;
      }
    }
    nopen = m;
    if (silent + 1 > cap) {
      out->overlaps++;
      problem(out,
              "%s (token %lld) granted while %lld holds of capacity %lld were "
              "open (one of them %s, token %lld)",
              s->holder, (long long)s->token, (long long)silent,
              (long long)cap, by ? by->holder : "?",
              by ? (long long)by->token : -1LL);
    } else if (silent + told + 1 > cap) {
      out->overlaps_lost++;
    }
    if (silent + 1 > out->max_holders)
      out->max_holders = silent + 1;
    open[nopen++] = k;
  }
  free(open);
  return 0;
}

/* Capacity mode: a write of hold s sent at `sent` is stale when cap holds
 * granted after s were open then (s's permit went to one of them). */
static bool stale_in_capacity(session_t **order, size_t n, const session_t *s,
                              int64_t sent, int64_t cap) {
  int64_t later = 0;
  for (size_t j = s->rank + 1; j < n && order[j]->acq < sent; j++)
    if (order[j]->end > sent && ++later >= cap)
      return true;
  return false;
}

int fence_analyze(redisContext *resource, const char *lock,
                  fence_report_t *out) {
  memset(out, 0, sizeof *out);
  char klog[1200];
  keyname(klog, sizeof klog, "log", lock);
  vec_t sess = {.size = sizeof(session_t)}, writes = {.size = sizeof(wrec_t)},
        open = {.size = sizeof(open_map_t)};
  session_t **order = NULL;
  int rc = -1;
  char kcap[1200];
  keyname(kcap, sizeof kcap, "cap", lock);
  redisReply *cr = redisCommand(resource, "GET %s", kcap);
  if (!cr || (cr->type != REDIS_REPLY_STRING && cr->type != REDIS_REPLY_NIL)) {
    fprintf(stderr, "fence: GET %s: %s\n", kcap,
            cr ? "bad reply" : resource->errstr);
    if (cr)
      freeReplyObject(cr);
    goto done;
  }
  out->capacity = cr->type == REDIS_REPLY_STRING ? atoll(cr->str) : 1;
  freeReplyObject(cr);
  if (out->capacity < 1)
    out->capacity = 1;
  const long long chunk = 20000;
  for (long long from = 0;; from += chunk) {
    redisReply *r = redisCommand(resource, "LRANGE %s %lld %lld", klog, from,
                                 from + chunk - 1);
    if (!r || r->type != REDIS_REPLY_ARRAY) {
      fprintf(stderr, "fence: LRANGE %s: %s\n", klog,
              r ? "bad reply" : resource->errstr);
      if (r)
        freeReplyObject(r);
      goto done;
    }
    size_t n = r->elements;
    for (size_t i = 0; i < n; i++) {
      if (r->element[i]->type != REDIS_REPLY_STRING ||
          take_record(r->element[i]->str, &sess, &writes, &open, out) != 0) {
        fprintf(stderr, "fence: bad record in %s: %s\n", klog,
                r->element[i]->type == REDIS_REPLY_STRING ? r->element[i]->str
                                                          : "(not a string)");
        freeReplyObject(r);
        goto done;
      }
    }
    freeReplyObject(r);
    if (n < (size_t)chunk)
      break;
  }
  session_t *S = sess.v;
  for (size_t i = 0; i < sess.n; i++)
    if (!S[i].closed)
      out->open++;
  /* overlaps: a sweep in grant order */
  if (sess.n) {
    order = calloc(sess.n, sizeof *order);
    if (!order)
      goto done;
    for (size_t i = 0; i < sess.n; i++)
      order[i] = &S[i];
    qsort(order, sess.n, sizeof *order, by_acq);
    if (out->capacity > 1) {
      if (capacity_sweep(order, sess.n, out->capacity, out) != 0)
        goto done;
    } else {
      exclusive_sweep(order, sess.n, out);
    }
  }
  /* stale writes: accepted after a later grant (capacity mode: after as
   * many later grants as there are permits, all still open) */
  wrec_t *W = writes.v;
  for (size_t i = 0; i < writes.n; i++) {
    if (!W[i].ok)
      continue;
    if (W[i].sess == SIZE_MAX) {
      out->stale_accepted++;
      problem(out, "a write outside any hold was accepted");
      continue;
    }
    const session_t *s = &S[W[i].sess];
    if (out->capacity > 1) {
      if (stale_in_capacity(order, sess.n, s, W[i].sent, out->capacity)) {
        out->stale_accepted++;
        problem(out,
                "%s (token %lld) wrote while %lld later holds were open, "
                "accepted",
                s->holder, (long long)s->token, (long long)out->capacity);
      }
    } else if (W[i].sent > s->next) {
      out->stale_accepted++;
      problem(out,
              "%s (token %lld) wrote %lld us after a later grant, accepted",
              s->holder, (long long)s->token, (long long)(W[i].sent - s->next));
    }
  }
  rc = 0;
done:
  free(order);
  free(sess.v);
  free(writes.v);
  free(open.v);
  return rc;
}

void fence_report_add(fence_report_t *a, const fence_report_t *b) {
  a->sessions += b->sessions;
  a->open += b->open;
  a->begins_refused += b->begins_refused;
  a->writes_ok += b->writes_ok;
  a->writes_refused += b->writes_refused;
  a->overlaps += b->overlaps;
  a->overlaps_lost += b->overlaps_lost;
  a->shared_sessions += b->shared_sessions;
  a->shared_overlaps += b->shared_overlaps;
  a->stale_accepted += b->stale_accepted;
  if (b->capacity > a->capacity)
    a->capacity = b->capacity;
  if (b->max_holders > a->max_holders)
    a->max_holders = b->max_holders;
  if (b->max_token > a->max_token)
    a->max_token = b->max_token;
  if (!a->first_problem[0] && b->first_problem[0])
    snprintf(a->first_problem, sizeof a->first_problem, "%s", b->first_problem);
}
