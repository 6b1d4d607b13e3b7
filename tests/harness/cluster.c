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

th_cluster_t *th_cluster_start(void) {
  th_cluster_t *t = calloc(1, sizeof *t);
  if (!t)
    return NULL;
  const char *conf[] = {"cluster-enabled yes",
                        "cluster-config-file ${dir}/nodes.conf",
                        "cluster-node-timeout 2000",
                        /* the bus port: a free one (port + 10000 may not
                         * exist) */
                        "cluster-port ${port2}", NULL};
  size_t used = (size_t)snprintf(t->url, sizeof t->url, "redis-cluster://");
  char cmd[1024];
  size_t cu = (size_t)snprintf(cmd, sizeof cmd, "redis-cli --cluster create");
  for (int i = 0; i < TH_CLUSTER_MASTERS; i++) {
    if (!(t->node[i] = th_server_start(conf)))
      goto failed;
    used += (size_t)snprintf(t->url + used, sizeof t->url - used,
                             "%s127.0.0.1:%d", i ? "," : "",
                             t->node[i]->port);
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
  int64_t until = th_now_ms() + 20000;
  for (int i = 0; i < TH_CLUSTER_MASTERS; i++) {
    while (!cluster_ok(t->node[i]) && th_now_ms() < until)
      th_sleep_ms(50);
    if (!cluster_ok(t->node[i])) {
      fprintf(stderr, "th_cluster_start: node %d is not ok\n", i);
      goto failed;
    }
  }
  return t;
failed:
  th_cluster_stop(t);
  return NULL;
}

void th_cluster_stop(th_cluster_t *t) {
  if (!t)
    return;
  for (int i = 0; i < TH_CLUSTER_MASTERS; i++)
    th_server_stop(t->node[i]);
  free(t);
}
