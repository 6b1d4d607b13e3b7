/*
 * sentinel.c - th_sentinels_*: a master, a replica and three sentinels
 * (see sentinel.h). Each is a harness server; a sentinel is started with
 * TH_SENTINEL_LINE among its config lines, which makes the harness run it
 * as redis-server --sentinel.
 */
#include "sentinel.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* In sync, as both sides see it: the master lists the replica online (it
 * counts in ROLE, which sizes dlock's WAIT). */
static bool replica_linked(th_sentinels_t *t) {
  return th_info_has(t->replica, "replication", "master_link_status:up",
                     NULL) &&
         th_info_has(t->master, "replication", "state=online", NULL);
}

/* How many other sentinels s knows of (they find each other through the
 * master's hello channel); -1 when it does not answer. */
static int sentinels_known(th_server_t *s) {
  redisContext *c = th_redis_connect(s);
  if (!c)
    return -1;
  redisReply *r = redisCommand(c, "SENTINEL SENTINELS %s", TH_SENTINEL_MASTER);
  int n = r && r->type == REDIS_REPLY_ARRAY ? (int)r->elements : -1;
  if (r)
    freeReplyObject(r);
  redisFree(c);
  return n;
}

static th_sentinels_t *start(const char *data_pw, const char *sentinel_pw,
                             const char *const *data_extra,
                             const char *const *sentinel_extra,
                             const char *tls_dir);

th_sentinels_t *th_sentinels_start(void) {
  return th_sentinels_start_auth(NULL, NULL);
}

th_sentinels_t *th_sentinels_start_auth(const char *data_pw,
                                        const char *sentinel_pw) {
  return th_sentinels_start_conf(data_pw, sentinel_pw, NULL, NULL);
}

/* Appends the NULL-terminated `extra` to conf (of n lines, room for max). */
static size_t add_lines(const char **conf, size_t n, size_t max,
                        const char *const *extra) {
  for (size_t i = 0; extra && extra[i] && n + 1 < max; i++)
    conf[n++] = extra[i];
  conf[n] = NULL;
  return n;
}

th_sentinels_t *th_sentinels_start_conf(const char *data_pw,
                                        const char *sentinel_pw,
                                        const char *const *data_extra,
                                        const char *const *sentinel_extra) {
  return start(data_pw, sentinel_pw, data_extra, sentinel_extra, NULL);
}

th_sentinels_t *th_sentinels_start_tls(const char *certs_dir) {
  return start(NULL, NULL, NULL, NULL, certs_dir);
}

/* tls_dir: every node also has a TLS port (port2) with the certificates
 * there, the sentinels monitor and name the master's TLS port, the replica
 * replicates over TLS, and the URL lists the sentinels' TLS ports. */
static th_sentinels_t *start(const char *data_pw, const char *sentinel_pw,
                             const char *const *data_extra,
                             const char *const *sentinel_extra,
                             const char *tls_dir) {
  th_sentinels_t *t = calloc(1, sizeof *t);
  if (!t)
    return NULL;
  char cert[600], key[600], ca[600];
  const char *tls[] = {"tls-port ${port2}", cert, key, ca,
                       "tls-auth-clients no", "tls-replication yes", NULL};
  if (tls_dir) {
    snprintf(cert, sizeof cert, "tls-cert-file %s/server.crt", tls_dir);
    snprintf(key, sizeof key, "tls-key-file %s/server.key", tls_dir);
    snprintf(ca, sizeof ca, "tls-ca-cert-file %s/ca.crt", tls_dir);
    data_extra = sentinel_extra = tls;
  }
  char requirepass[160] = "", masterauth[160] = "", authpass[200] = "",
       sentpass[160] = "", sentreq[160] = "";
  if (data_pw) {
    snprintf(requirepass, sizeof requirepass, "requirepass %s", data_pw);
    snprintf(masterauth, sizeof masterauth, "masterauth %s", data_pw);
    snprintf(authpass, sizeof authpass, "sentinel auth-pass %s %s",
             TH_SENTINEL_MASTER, data_pw);
  }
  if (sentinel_pw) {
    snprintf(sentreq, sizeof sentreq, "requirepass %s", sentinel_pw);
    snprintf(sentpass, sizeof sentpass, "sentinel sentinel-pass %s",
             sentinel_pw);
  }
  /* a data node: its password, and the master's for a replica (a
   * promoted replica's old master becomes its replica) */
  const char *mconf[12] = {requirepass, masterauth};
  add_lines(mconf, data_pw ? 2 : 0, 12, data_extra);
  t->master = th_server_start(mconf);
  if (!t->master)
    goto failed;
  char replicaof[64];
  snprintf(replicaof, sizeof replicaof, "replicaof 127.0.0.1 %d",
           tls_dir ? t->master->port2 : t->master->port);
  const char *rconf[12] = {replicaof, requirepass, masterauth};
  add_lines(rconf, data_pw ? 3 : 1, 12, data_extra);
  if (!(t->replica = th_server_start(rconf)))
    goto failed;
  char monitor[128];
  snprintf(monitor, sizeof monitor, "sentinel monitor %s 127.0.0.1 %d 2",
           TH_SENTINEL_MASTER, tls_dir ? t->master->port2 : t->master->port);
  const char *sconf[16] = {
      TH_SENTINEL_LINE, monitor,
      /* above the sentinels' 1 s ping period (sentinel.h) */
      "sentinel down-after-milliseconds " TH_SENTINEL_MASTER " 2000",
      "sentinel failover-timeout " TH_SENTINEL_MASTER " 5000",
      "sentinel parallel-syncs " TH_SENTINEL_MASTER " 1"};
  size_t ns = 5;
  if (data_pw)
    sconf[ns++] = authpass;
  if (sentinel_pw) {
    sconf[ns++] = sentreq;
    sconf[ns++] = sentpass;
  }
  add_lines(sconf, ns, 16, sentinel_extra);
  size_t used = (size_t)snprintf(t->url, sizeof t->url, "redis-sentinel://");
  for (int i = 0; i < TH_SENTINELS; i++) {
    if (!(t->sent[i] = th_server_start(sconf)))
      goto failed;
    used += (size_t)snprintf(t->url + used, sizeof t->url - used,
                             "%s127.0.0.1:%d", i ? "," : "",
                             tls_dir ? t->sent[i]->port2 : t->sent[i]->port);
  }
  snprintf(t->url + used, sizeof t->url - used, "/%s", TH_SENTINEL_MASTER);
  int64_t until = th_now_ms() + 20000;
  while (!replica_linked(t) && th_now_ms() < until)
    th_sleep_ms(50);
  if (!replica_linked(t)) {
    fprintf(stderr, "th_sentinels_start: the replica did not sync\n");
    goto failed;
  }
  for (int i = 0; i < TH_SENTINELS; i++) {
    while (sentinels_known(t->sent[i]) < TH_SENTINELS - 1 &&
           th_now_ms() < until)
      th_sleep_ms(100);
    if (sentinels_known(t->sent[i]) != TH_SENTINELS - 1) {
      fprintf(stderr, "th_sentinels_start: sentinel %d knows %d others\n", i,
              sentinels_known(t->sent[i]));
      goto failed;
    }
  }
  return t;
failed:
  th_sentinels_stop(t);
  return NULL;
}

void th_sentinels_stop(th_sentinels_t *t) {
  if (!t)
    return;
  for (int i = 0; i < TH_SENTINELS; i++)
    th_server_stop(t->sent[i]);
  th_server_stop(t->replica);
  th_server_stop(t->master);
  free(t);
}

/* Prints one log's lines that contain any of the needles, prefixed. */
static void print_matching(const char *path, const char *who,
                           const char *const *needles, FILE *out) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(out, "  %s: no log (%s)\n", who, strerror(errno));
    return;
  }
  char line[1024];
  for (int i = 0; i < 200000 && fgets(line, sizeof line, f); i++)
    for (const char *const *n = needles; *n; n++)
      if (strstr(line, *n)) {
        fprintf(out, "  %s %s", who, line);
        break;
      }
  fclose(f);
}

void th_sentinels_events(const th_sentinels_t *t, FILE *out) {
  /* the sentinels' events ("+sdown", "+switch-master", ...) and the
   * data nodes' whole logs (a few dozen lines at the default level) */
  static const char *const sent_needles[] = {" +", " -", NULL};
  static const char *const node_needles[] = {"", NULL}; /* all */
  char path[512], who[32];
  for (int i = 0; i < TH_SENTINELS; i++) {
    if (!t->sent[i])
      continue;
    snprintf(path, sizeof path, "%s/redis.log", t->sent[i]->dir);
    snprintf(who, sizeof who, "S%d", i);
    print_matching(path, who, sent_needles, out);
  }
  const th_server_t *nodes[2] = {t->master, t->replica};
  for (int i = 0; i < 2; i++) {
    if (!nodes[i])
      continue;
    snprintf(path, sizeof path, "%s/redis.log", nodes[i]->dir);
    snprintf(who, sizeof who, "N%d:%d", i, nodes[i]->port);
    print_matching(path, who, node_needles, out);
  }
  fflush(out);
}
