/*
 * cluster.c - th_cluster_*: three cluster-enabled redis-servers joined by
 * `redis-cli --cluster create --cluster-yes` (see cluster.h).
 */
#include "cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static bool cluster_ok(th_server_t *s) {
  redisContext *c = th_redis_connect(s);
  if (!c)
    return false;
  redisReply *r = redisCommand(c, "CLUSTER INFO");
  bool ok = r && r->type == REDIS_REPLY_STRING &&
            strstr(r->str, "cluster_state:ok") != NULL;
  if (r)
    freeReplyObject(r);
  redisFree(c);
  return ok;
}

/* A replica whose link to its master is up. */
static bool replica_synced(th_server_t *s) {
  return th_info_has(s, "replication", "role:slave",
                     "master_link_status:up");
}

/* A master that counts its replica online (ROLE lists it: a client's
 * WAIT waits for it). */
static bool replica_online(th_server_t *s) {
  return th_info_has(s, "replication", "connected_slaves:1", "state=online");
}

/* Makes replica[i] a replica of node[i] (CLUSTER REPLICATE). */
static bool replicate(th_cluster_t *t, int i) {
  char *id = th_redis_str(t->node[i], "CLUSTER MYID");
  if (!id)
    return false;
  int64_t until = th_now_ms() + 20000;
  bool ok = false;
  /* the replica must know the master first (gossip after create) */
  while (!ok && th_now_ms() < until) {
    redisReply *r = th_redis_cmd(t->replica[i], "CLUSTER REPLICATE %s", id);
    ok = r && r->type == REDIS_REPLY_STATUS;
    if (!ok && th_now_ms() + 100 >= until)
      fprintf(stderr, "CLUSTER REPLICATE: %s\n", r && r->str ? r->str : "?");
    if (r)
      freeReplyObject(r);
    if (!ok)
      th_sleep_ms(100);
  }
  free(id);
  return ok;
}

/* extra: config lines for every node; tls: the URL lists the TLS ports
 * (port2) instead of the plain ones. */
static th_cluster_t *start(bool replicas, const char *const *extra,
                           bool tls) {
  th_cluster_t *t = calloc(1, sizeof *t);
  if (!t)
    return NULL;
  const char *conf[16] = {"cluster-enabled yes",
                          "cluster-config-file ${dir}/nodes.conf",
                          "cluster-node-timeout 2000",
                          /* the bus port: a free one (port + 10000 may not
                           * exist) */
                          "cluster-port ${port3}"};
  size_t nc = 4;
  for (size_t i = 0; extra && extra[i] && nc + 1 < 16; i++)
    conf[nc++] = extra[i];
  conf[nc] = NULL;
  size_t used = (size_t)snprintf(t->url, sizeof t->url, "redis-cluster://");
  char cmd[1024];
  size_t cu = (size_t)snprintf(cmd, sizeof cmd, "redis-cli --cluster create");
  for (int i = 0; i < TH_CLUSTER_MASTERS; i++) {
    if (!(t->node[i] = th_server_start(conf)))
      goto failed;
    used += (size_t)snprintf(t->url + used, sizeof t->url - used,
                             "%s127.0.0.1:%d", i ? "," : "",
                             tls ? t->node[i]->port2 : t->node[i]->port);
    cu += (size_t)snprintf(cmd + cu, sizeof cmd - cu, " 127.0.0.1:%d",
                           t->node[i]->port);
  }
  snprintf(cmd + cu, sizeof cmd - cu, " --cluster-yes >%s/create.log 2>&1",
           t->node[0]->dir);
  int st = system(cmd);
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "th_cluster_start: redis-cli --cluster create failed "
                    "(%d): see %s/create.log\n",
            st, t->node[0]->dir);
    goto failed;
  }
  /* replicas join the created cluster (MEET), then replicate a master:
   * which one is ours to say, not redis-cli's */
  for (int i = 0; replicas && i < TH_CLUSTER_MASTERS; i++) {
    if (!(t->replica[i] = th_server_start(conf)))
      goto failed;
    redisReply *r = th_redis_cmd(t->replica[i], "CLUSTER MEET 127.0.0.1 %d %d",
                                 t->node[0]->port, t->node[0]->port3);
    bool ok = r && r->type == REDIS_REPLY_STATUS;
    if (r)
      freeReplyObject(r);
    if (!ok) {
      fprintf(stderr, "th_cluster_start: CLUSTER MEET failed\n");
      goto failed;
    }
  }
  for (int i = 0; replicas && i < TH_CLUSTER_MASTERS; i++)
    if (!replicate(t, i)) {
      fprintf(stderr, "th_cluster_start: CLUSTER REPLICATE failed\n");
      goto failed;
    }
  int64_t until = th_now_ms() + 30000;
  for (int i = 0; i < 2 * TH_CLUSTER_MASTERS; i++) {
    th_server_t *s = i < TH_CLUSTER_MASTERS ? t->node[i]
                                            : t->replica[i - TH_CLUSTER_MASTERS];
    if (!s)
      continue;
    bool replica = i >= TH_CLUSTER_MASTERS;
    bool (*linked)(th_server_t *) = !replicas ? NULL
                                    : replica ? replica_synced
                                              : replica_online;
    while (!(cluster_ok(s) && (!linked || linked(s))) && th_now_ms() < until)
      th_sleep_ms(50);
    if (!cluster_ok(s) || (linked && !linked(s))) {
      fprintf(stderr, "th_cluster_start: node %d is not ok\n", i);
      goto failed;
    }
  }
  return t;
failed:
  th_cluster_stop(t);
  return NULL;
}

th_cluster_t *th_cluster_start(void) { return start(false, NULL, false); }

th_cluster_t *th_cluster_start_replicated(void) {
  return start(true, NULL, false);
}

th_cluster_t *th_cluster_start_conf(const char *const *extra) {
  return start(false, extra, false);
}

th_cluster_t *th_cluster_start_tls(const char *certs_dir) {
  char cert[600], key[600], ca[600];
  snprintf(cert, sizeof cert, "tls-cert-file %s/server.crt", certs_dir);
  snprintf(key, sizeof key, "tls-key-file %s/server.key", certs_dir);
  snprintf(ca, sizeof ca, "tls-ca-cert-file %s/ca.crt", certs_dir);
  const char *tls[] = {"tls-port ${port2}", cert, key, ca,
                       "tls-auth-clients no", "tls-replication yes",
                       "tls-cluster yes", NULL};
  return start(false, tls, true);
}

void th_cluster_stop(th_cluster_t *t) {
  if (!t)
    return;
  for (int i = 0; i < TH_CLUSTER_MASTERS; i++) {
    th_server_stop(t->replica[i]);
    th_server_stop(t->node[i]);
  }
  free(t);
}
