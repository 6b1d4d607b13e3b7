/*
 * backends.c - th_backend_*: one entry point over each backend's harness.
 *
 * Design note: a table of the backends this build tests, each a start and
 * a stop over its own harness (harness.c for Redis, sentinel.c for a
 * Sentinel-managed master, cluster.c for a Redis Cluster; zk.c, etcd.c and
 * pg.c, mysql.c when TH_HAVE_ZOOKEEPER / TH_HAVE_ETCD / TH_HAVE_POSTGRES /
 * TH_HAVE_MYSQL are defined
 * by the build). The choice is
 * read from the environment so that ctest can run one test binary once per
 * backend. Single threaded (main thread).
 */
#include "backends.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "harness.h"
#include "sentinel.h"
#ifdef TH_HAVE_ZOOKEEPER
#include "zk.h"
#endif
#ifdef TH_HAVE_ETCD
#include "etcd.h"
#endif
#ifdef TH_HAVE_POSTGRES
#include "pg.h"
#endif
#ifdef TH_HAVE_MYSQL
#include "mysql.h"
#endif

struct th_backend {
  const char *name;
  void *impl;
  void (*stop)(void *impl);
  char url[512];
};

static void stop_redis(void *impl) { th_server_stop(impl); }

static int members(void) {
  const char *m = getenv("TH_MEMBERS");
  int n = m ? atoi(m) : 1;
  return n > 0 ? n : 1;
}

th_backend_t *th_backend_start(void) {
  const char *name = getenv("TH_BACKEND");
  if (!name || !*name)
    name = "redis";
  th_backend_t *b = calloc(1, sizeof *b);
  if (!b)
    return NULL;
  const char *url = NULL;
  if (strcmp(name, "redis") == 0) {
    th_server_t *s = th_server_start(NULL);
    if (s) {
      b->name = "redis";
      b->impl = s;
      b->stop = stop_redis;
      url = s->url;
    }
  } else if (strcmp(name, "cluster") == 0) {
    th_cluster_t *t = th_cluster_start();
    if (t) {
      b->name = "redis-cluster";
      b->impl = t;
      b->stop = (void (*)(void *))th_cluster_stop;
      url = t->url;
    }
  } else if (strcmp(name, "sentinel") == 0) {
    th_sentinels_t *t = th_sentinels_start();
    if (t) {
      b->name = "sentinel";
      b->impl = t;
      b->stop = (void (*)(void *))th_sentinels_stop;
      url = t->url;
    }
  }
#ifdef TH_HAVE_ZOOKEEPER
  else if (strcmp(name, "zookeeper") == 0) {
    th_zk_t *z = th_zk_start(members());
    if (z) {
      b->name = "zookeeper";
      b->impl = z;
      b->stop = (void (*)(void *))th_zk_stop;
      url = th_zk_url(z);
    }
  }
#endif
#ifdef TH_HAVE_ETCD
  else if (strcmp(name, "etcd") == 0) {
    th_etcd_t *e = th_etcd_start(members());
    if (e) {
      b->name = "etcd";
      b->impl = e;
      b->stop = (void (*)(void *))th_etcd_stop;
      url = th_etcd_url(e);
    }
  }
#endif
#ifdef TH_HAVE_POSTGRES
  else if (strcmp(name, "postgres") == 0) {
    th_pg_t *p = th_pg_start();
    if (p) {
      b->name = "postgres";
      b->impl = p;
      b->stop = (void (*)(void *))th_pg_stop;
      url = th_pg_url(p);
    }
  }
#endif
#ifdef TH_HAVE_MYSQL
  else if (strcmp(name, "mysql") == 0) {
    th_my_t *m = th_my_start();
    if (m) {
      b->name = "mysql";
      b->impl = m;
      b->stop = (void (*)(void *))th_my_stop;
      url = th_my_url(m);
    }
  }
#endif
  else {
    fprintf(stderr,
            "th_backend_start: no backend \"%s\" in this build "
            "(members %d)\n",
            name, members());
  }
  if (!url || strlen(url) >= sizeof b->url) {
    if (b->impl)
      b->stop(b->impl);
    free(b);
    return NULL;
  }
  strcpy(b->url, url);
  return b;
}

const char *th_backend_name(const th_backend_t *b) { return b->name; }
const char *th_backend_url(const th_backend_t *b) { return b->url; }

void th_backend_stop(th_backend_t *b) {
  if (!b)
    return;
  b->stop(b->impl);
  free(b);
}
