/*
 * backends.c - the backends this build has, and the public calls that
 * choose among them by URL (dlock_client_new, dlock_backends).
 *
 * Design note. This file is where the library is put together: the one
 * place that names every backend. The core's registry scans the list
 * below by scheme (each backend declares its schemes in its
 * dlock__backend_ops) and never names a backend itself; a backend over
 * other backends (Redlock) opens its client through the core
 * (dlock__client_open) and is no entry here, as no one URL names it.
 *
 * Adding a backend: its folder under src/, its build lines (and, if it
 * needs a library of its own, a DLOCK_WITH_* option in
 * cmake/backends.cmake, which defines DLOCK_HAVE_* when it is built), its
 * line in `built` below, and for an optional backend its line in `absent`
 * (its schemes and how to get it, for a build without it) and its word in
 * dlock_backends().
 */
#include "backends.h"

#include "core/client.h"
#include "core/error.h"
#include "redis/redis.h"
#ifdef DLOCK_HAVE_ZOOKEEPER
#include "zookeeper/zk.h"
#endif
#ifdef DLOCK_HAVE_ETCD
#include "etcd/etcd.h"
#endif
#ifdef DLOCK_HAVE_POSTGRES
#include "postgres/postgres.h"
#endif
#ifdef DLOCK_HAVE_MYSQL
#include "mysql/mysql.h"
#endif

static const dlock__backend_ops *const built[] = {
    &dlock__redis_backend,     &dlock__redis_cluster_backend,
#ifdef DLOCK_HAVE_ZOOKEEPER
    &dlock__zookeeper_backend,
#endif
#ifdef DLOCK_HAVE_ETCD
    &dlock__etcd_backend,
#endif
#ifdef DLOCK_HAVE_POSTGRES
    &dlock__postgres_backend,
#endif
#ifdef DLOCK_HAVE_MYSQL
    &dlock__mysql_backend,
#endif
};

#if !defined(DLOCK_HAVE_ZOOKEEPER) || !defined(DLOCK_HAVE_ETCD) ||             \
    !defined(DLOCK_HAVE_POSTGRES) || !defined(DLOCK_HAVE_MYSQL)
static const dlock__backend_absent absent[] = {
#ifndef DLOCK_HAVE_ZOOKEEPER
    {"zookeeper", (const char *const[]){"zookeeper", "zk", NULL},
     "rebuild with -DDLOCK_WITH_ZOOKEEPER=ON (needs libzookeeper-mt-dev)"},
#endif
#ifndef DLOCK_HAVE_ETCD
    {"etcd", (const char *const[]){"etcd", "etcds", NULL},
     "rebuild with -DDLOCK_WITH_ETCD=ON (needs libcurl4-openssl-dev and "
     "libjson-c-dev)"},
#endif
#ifndef DLOCK_HAVE_POSTGRES
    {"postgres", (const char *const[]){"postgres", "postgresql", NULL},
     "rebuild with -DDLOCK_WITH_POSTGRES=ON (needs libpq-dev)"},
#endif
#ifndef DLOCK_HAVE_MYSQL
    {"mysql", (const char *const[]){"mysql", "mariadb", NULL},
     "rebuild with -DDLOCK_WITH_MYSQL=ON (needs libmariadb-dev)"},
#endif
};
#define ABSENT absent
#define NABSENT (sizeof absent / sizeof absent[0])
#else
#define ABSENT NULL
#define NABSENT 0
#endif

static const dlock__registry registry = {
    .built = built,
    .nbuilt = sizeof built / sizeof built[0],
    .absent = ABSENT,
    .nabsent = NABSENT,
};

const dlock__backend_ops *dlock__backend_for_url(const char *url) {
  return dlock__registry_find(&registry, url);
}

const char *dlock_backends(void) {
  return "redis"
#ifdef DLOCK_HAVE_ZOOKEEPER
         " zookeeper"
#endif
#ifdef DLOCK_HAVE_ETCD
         " etcd"
#endif
#ifdef DLOCK_HAVE_POSTGRES
         " postgres"
#endif
#ifdef DLOCK_HAVE_MYSQL
         " mysql"
#endif
      ;
}

int dlock_client_new(dlock_client_t **out, const char *url,
                     const dlock_options_t *opts) {
  if (!out)
    return dlock__seterr(DLOCK_EINVAL, "dlock_client_new: out is NULL");
  *out = NULL;
  if (!url)
    return dlock__seterr(DLOCK_EINVAL, "dlock_client_new: url is NULL");
  const dlock__backend_ops *ops = dlock__backend_for_url(url);
  if (!ops)
    return DLOCK_EURL;
  /* a Redis URL's key layout picks its backend (Spring Integration's) */
  int rc = dlock__redis_pick_layout(&ops, url, opts);
  if (rc)
    return rc;
  return dlock__client_open(out, ops, url, opts);
}
