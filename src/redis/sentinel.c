/*
 * sentinel.c - a Redis master found through Redis Sentinel, and followed
 * across failovers.
 *
 *   redis-sentinel://[user:password@]host:port[,host:port...]/master-name[/db]
 *
 * (Lettuce's form.) The user and password are the data nodes' (AUTH on the
 * master); the sentinels' own credentials, when they have any, are set
 * apart (dlock_options_set_sentinel_credentials), as Redis keeps them
 * apart.
 *
 * Finding the master: the sentinels are asked in the order given
 * (SENTINEL GET-MASTER-ADDR-BY-NAME), the first that answers with an
 * address wins and is asked first next time. Every connection dialled to
 * the master checks ROLE in its handshake (redis.c): a server that is not a
 * master, or one that cannot be reached, makes the dial ask the sentinels
 * again and retry until its deadline, so a call made during a failover
 * waits for the new master for up to the connect timeout instead of
 * failing; and a dial that succeeds after one failed asks them once more
 * before it is used (a killed old master restarted answers ROLE as a
 * master until the sentinels demote it).
 *
 * Following a failover: the master's address has a generation
 * (`master_gen`), raised whenever the sentinels name another address.
 * Connections are tagged with the generation they were dialled at; a pooled
 * connection of an older one is closed instead of reused, the shared
 * pipelined connection is ended, and the event loop redials the pub/sub
 * connection on the new master, which makes every waiter retry (a message
 * published on the new master never reaches a subscription on the old
 * one). The client learns of a failover four ways: a dial that finds no
 * master, a script answered READONLY (the old master, demoted), a check
 * of the sentinels once a second from the dialling worker while the
 * client has waits (SENTINEL_CHECK_MS, channels.c), which catches a
 * demoted master that nobody writes to, and any wait for the master's
 * answer (a dial's handshake, a request, the shared connection's oldest
 * request) that lasts over 500 ms: it asks the sentinels, at most every
 * SENTINEL_RECHECK_MS in the client (dlock__redis_sentinel_recheck). A
 * stopped master (SIGSTOP, a frozen VM) is the case for the last: its
 * kernel still accepts connections and requests, which would wait out
 * their whole timeouts. Every such wait also checks master_gen every
 * 100 ms and ends (DLOCK_EUNAVAILABLE, the conn broken) as soon as the
 * sentinels name another master (redis.c, conn.h's watch), so the
 * requests pending on the old master move to the new one within about
 * half a second of the sentinels' switch. dlock does not subscribe to the
 * sentinels' +switch-master: the checks cost one command each and no
 * connection of its own.
 *
 * Threads: any caller thread (dial, resolve), the dialling worker (the
 * periodic check). `mu` guards the address and the sentinel order.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "redis/redis.h"

#define MAX_SENTINELS 16

#define SENTINEL_TIMEOUT_MS 1000 /* one sentinel's answer, at most */
/* a slow master's waiters ask the sentinels at most this often */
#define SENTINEL_RECHECK_MS 500

struct dlock__redis_sentinel {
  dlock__endpoint sentinels[MAX_SENTINELS];
  int n;
  int first; /* the one that answered last */
  char *master_name;
  char *user, *password; /* the sentinels' own credentials, or NULL */
  pthread_mutex_t mu;
  char *host; /* the master's address, NULL before the first answer */
  int port;
  _Atomic int64_t asked_at; /* when the sentinels were last asked */
  char display[200];
};

void dlock__redis_sentinel_free(dlock__redis_sentinel *s) {
  if (!s)
    return;
  for (int i = 0; i < s->n; i++)
    dlock__endpoint_clear(&s->sentinels[i]);
  dlock__free(s->master_name);
  dlock__free(s->user);
  if (s->password) {
    memset(s->password, 0, strlen(s->password));
    dlock__free(s->password);
  }
  dlock__free(s->host);
  pthread_mutex_destroy(&s->mu);
  dlock__free(s);
}

bool dlock__redis_is_sentinel_url(const char *url) {
  return strncasecmp(url, "redis-sentinel://", 17) == 0;
}

int dlock__redis_sentinel_parse(const char *url, const char *user,
                                const char *password,
                                dlock__redis_sentinel **out,
                                dlock__endpoint *data) {
  /* a sentinel written without a port is at Sentinel's port, 26379
   * (Lettuce's default too); 6379 is the data nodes' */
  static const dlock__uri_rules rules = {
      .example = "redis-sentinel://host:port[,host:port...]/master-name",
      .default_port = 26379,
      .min_hosts = 1,
      .max_hosts = MAX_SENTINELS,
      .list_scheme = "redis-sentinel://",
      .list_noun = "sentinel"};
  *out = NULL;
  memset(data, 0, sizeof *data);
  dlock__uri u;
  int rc = dlock__uri_split(url, &rules, &u);
  if (rc)
    return rc;
  /* master name and db: "/name" or "/name/db" */
  if (u.path.n < 2 || u.path.p[1] == '/')
    return dlock__seterr(DLOCK_EURL,
                         "bad URL: redis-sentinel://[user:password@]host:port"
                         "[,host:port...]/master-name[/db]: no master name");
  const char *name = u.path.p + 1;
  const char *name_end = memchr(name, '/', u.path.n - 1);
  size_t nlen = name_end ? (size_t)(name_end - name) : u.path.n - 1;
  if (!name_end && u.has_fragment)
    return dlock__seterr(DLOCK_EURL,
                         "bad URL: a '#' fragment means nothing to Redis");
  dlock__redis_sentinel *s = dlock__calloc(1, sizeof *s);
  if (!s)
    return DLOCK_ENOMEM;
  pthread_mutex_init(&s->mu, NULL);
  if (!(s->master_name = dlock__strndup(name, nlen)))
    rc = DLOCK_ENOMEM;
  /* the data nodes' endpoint: the first sentinel's address stands in until
   * the master is known; it carries the user, password, db and query, read
   * by the Redis URL parser from "redis://" + userinfo@host + the rest */
  if (!rc) {
    const char *auth = url + u.scheme.n + 3;
    const char *first = u.authority_hosts.p;
    const char *comma =
        memchr(first, ',', u.authority_hosts.n); /* end of the first host */
    size_t flen = comma ? (size_t)(comma - first) : u.authority_hosts.n;
    /* "/db[?query]", or the query right after the master's name */
    const char *rest = name_end ? name_end : u.has_query ? u.query.p - 1 : "";
    char *part = dlock__asprintf("redis://%.*s%.*s%s", (int)(first - auth),
                                 auth, (int)flen, first, rest);
    if (!part) {
      rc = DLOCK_ENOMEM;
    } else {
      rc = dlock__redis_url_parse(part, data);
      memset(part, 0, strlen(part)); /* it held the password */
      dlock__free(part);
    }
  }
  /* the sentinels */
  for (size_t i = 0; !rc && i < u.nhosts; i++) {
    rc = dlock__redis_endpoint_of_host(&u.hosts[i], &s->sentinels[s->n]);
    if (!rc)
      s->n++;
  }
  if (!rc && ((user && !(s->user = dlock__strdup(user))) ||
              (password && !(s->password = dlock__strdup(password)))))
    rc = DLOCK_ENOMEM;
  if (!rc)
    snprintf(s->display, sizeof s->display, "redis-sentinel://%s/%s",
             s->sentinels[0].display + 8, s->master_name);
  if (rc) {
    dlock__redis_sentinel_free(s);
    dlock__endpoint_clear(data);
    return rc;
  }
  *out = s;
  return 0;
}

const char *dlock__redis_sentinel_display(const dlock__redis_sentinel *s) {
  return s->display;
}

/* Asks one sentinel for the master's address. */
static int ask(dlock__redis *r, dlock__redis_sentinel *s, int i,
               int64_t deadline, char *host, size_t hostlen, int *port) {
  int64_t d = dlock__deadline_after(SENTINEL_TIMEOUT_MS);
  if (d > deadline)
    d = deadline;
  dlock__conn *c = NULL;
  int rc = dlock__conn_connect_tls(&c, &s->sentinels[i], r->tls, d);
  if (rc)
    return rc;
  size_t n = 0;
  if (s->password) {
    const char *a[3] = {"AUTH", s->user ? s->user : s->password, s->password};
    rc = dlock__redis_append_cmd(c, s->user ? 3 : 2, a);
    n++;
  }
  const char *a[3] = {"SENTINEL", "GET-MASTER-ADDR-BY-NAME", s->master_name};
  if (!rc)
    rc = dlock__redis_append_cmd(c, 3, a);
  n++;
  redisReply *rep[2] = {NULL, NULL};
  if (!rc)
    rc = dlock__conn_exec(c, d, n, rep);
  dlock__conn_close(c);
  if (rc)
    return rc;
  redisReply *auth = n == 2 ? rep[0] : NULL, *addr = rep[n - 1];
  if (auth && auth->type == REDIS_REPLY_ERROR) {
    rc = dlock__redis_error(auth, "sentinel AUTH refused");
    if (rc != DLOCK_EAUTH)
      rc = DLOCK_EAUTH;
  } else if (addr->type == REDIS_REPLY_ERROR) {
    rc = dlock__redis_error(addr, "SENTINEL GET-MASTER-ADDR-BY-NAME");
    if (rc == DLOCK_EAUTH && !auth) { /* say where the password goes */
      char was[400];
      snprintf(was, sizeof was, "%s", dlock_last_error());
      dlock__seterr(rc, "%s (the sentinels' own password: "
                        "dlock_options_set_sentinel_credentials, or dlock "
                        "--sentinel-password-file)",
                    was);
    }
  } else if (addr->type == REDIS_REPLY_NIL) {
    rc = dlock__seterr(DLOCK_EUNAVAILABLE,
                       "the sentinel knows no master named '%s'",
                       s->master_name);
    *port = -1; /* tells resolve: an answer, not a failure to answer */
  } else if (addr->type != REDIS_REPLY_ARRAY || addr->elements != 2 ||
             addr->element[0]->type != REDIS_REPLY_STRING ||
             addr->element[1]->type != REDIS_REPLY_STRING ||
             addr->element[0]->len >= hostlen) {
    rc = dlock__seterr(DLOCK_EPROTO, "SENTINEL GET-MASTER-ADDR-BY-NAME: "
                                     "unexpected reply");
  } else {
    snprintf(host, hostlen, "%s", addr->element[0]->str);
    *port = atoi(addr->element[1]->str);
    if (*port <= 0 || *port > 65535)
      rc = dlock__seterr(DLOCK_EPROTO, "SENTINEL GET-MASTER-ADDR-BY-NAME: "
                                       "port '%s'",
                         addr->element[1]->str);
  }
  for (size_t k = 0; k < n; k++)
    freeReplyObject(rep[k]);
  return rc;
}

int dlock__redis_sentinel_resolve(dlock__redis *r, int64_t deadline) {
  dlock__redis_sentinel *s = r->sentinel;
  pthread_mutex_lock(&s->mu);
  int first = s->first;
  pthread_mutex_unlock(&s->mu);
  char host[256], why[400] = "";
  int port = 0, rc = DLOCK_EUNAVAILABLE, auth_rc = 0, unknown = 0, asked = 0;
  atomic_store(&s->asked_at, dlock__now_ms());
  for (int k = 0; k < s->n; k++) {
    int i = (first + k) % s->n;
    port = 0;
    rc = ask(r, s, i, deadline, host, sizeof host, &port);
    asked++;
    unknown += rc && port == -1;
    if (!rc) {
      pthread_mutex_lock(&s->mu);
      s->first = i;
      bool changed = !s->host || strcmp(s->host, host) != 0 || s->port != port;
      char *copy = changed ? dlock__strdup(host) : NULL;
      if (changed && copy) {
        dlock__free(s->host);
        s->host = copy;
        s->port = port;
        dlock__redis_new_master(r);
        atomic_fetch_add(&r->master_gen, 1);
      }
      pthread_mutex_unlock(&s->mu);
      if (changed && !copy)
        return DLOCK_ENOMEM;
      if (changed)
        dlock__log(r->core, DLOCK_LOG_INFO, "%s: the master is %s:%d",
                   s->display, host, port);
      return 0;
    }
    /* a refused password or certificate: asking again will not help */
    if (rc == DLOCK_EAUTH || rc == DLOCK_ETLS)
      auth_rc = rc;
    if (!why[0]) {
      const char *d = s->sentinels[i].display, *e = dlock_last_error();
      bool named = strncmp(e, d, strlen(d)) == 0; /* it says which already */
      snprintf(why, sizeof why, "%s%s%s", named ? "" : d, named ? "" : ": ",
               e);
    }
    if (dlock__now_ms() >= deadline)
      break;
  }
  /* every sentinel answered that it knows no such master: the URL names it
   * wrongly, and waiting for a failover would not help */
  if (unknown == asked)
    return dlock__seterr(DLOCK_EURL,
                         "%s: no sentinel knows a master named '%s'",
                         s->display, s->master_name);
  return dlock__seterr(auth_rc ? auth_rc : DLOCK_EUNAVAILABLE,
                       "%s: no sentinel named the master (%s)", s->display,
                       why);
}

void dlock__redis_sentinel_recheck(dlock__redis *r, int64_t deadline) {
  dlock__redis_sentinel *s = r->sentinel;
  int64_t now = dlock__now_ms(), at = atomic_load(&s->asked_at);
  if (now - at < SENTINEL_RECHECK_MS ||
      !atomic_compare_exchange_strong(&s->asked_at, &at, now))
    return; /* asked lately, or being asked by another thread */
  char saved[400];
  snprintf(saved, sizeof saved, "%s", dlock_last_error());
  bool unsent = dlock__err_unsent(), worded = dlock__err_worded();
  dlock__redis_sentinel_resolve(r, deadline);
  dlock__seterr(0, "%s", saved);
  dlock__err_set_unsent(unsent);
  if (worded)
    dlock__err_set_worded();
}

int dlock__redis_sentinel_master(dlock__redis *r, dlock__endpoint *ep,
                                 char *host, size_t hostlen,
                                 uint32_t *gen) {
  dlock__redis_sentinel *s = r->sentinel;
  pthread_mutex_lock(&s->mu);
  bool known = s->host != NULL;
  if (known) {
    snprintf(host, hostlen, "%s", s->host);
    *ep = *r->ep; /* the data nodes' user, password and db */
    ep->kind = DLOCK__EP_TCP;
    ep->host = host;
    ep->port = s->port;
    ep->display = s->display;
    *gen = atomic_load(&r->master_gen);
  }
  pthread_mutex_unlock(&s->mu);
  return known ? 0
               : dlock__seterr(DLOCK_EUNAVAILABLE,
                               "%s: the master is not known yet", s->display);
}
