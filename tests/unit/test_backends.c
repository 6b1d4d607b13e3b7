/*
 * test_backends.c - which backends this build has, as a user sees it.
 *
 * Design note: the build passes DLOCK_EXPECTED_BACKENDS, the list that
 * cmake/backends.cmake decided and printed in its "dlock backends:" line.
 * `listed` (every build) checks that dlock_backends() says the same and
 * that the registry agrees: a URL of a built optional backend reaches that
 * backend's own parser (a URL without a host, refused before any network
 * I/O), a URL of a missing one gets the "rebuild with" line.
 * `absent_zookeeper`, `absent_etcd`, `absent_postgres` and `absent_mysql`
 * are registered only
 * in a build without that backend: each of its schemes, in any case, fails with
 * DLOCK_EURL and exactly the one line that says how to get it, and so does
 * a Redlock node given such a URL. No server needed.
 */
#include "check.h"

#include <stdbool.h>

#ifndef DLOCK_EXPECTED_BACKENDS
#error "the build defines DLOCK_EXPECTED_BACKENDS"
#endif

typedef struct optional {
  const char *name;
  const char *urls[4];    /* a well-formed URL of each scheme */
  const char *no_host[3]; /* URLs the backend itself refuses */
  const char *line;       /* what a build without it says */
} optional_t;

static const optional_t ZOOKEEPER = {
    "zookeeper",
    {"zookeeper://127.0.0.1:2181", "zk://127.0.0.1:2181/chroot",
     "ZK://127.0.0.1:2181", NULL},
    {"zookeeper://", "zk://", NULL},
    "this build has no zookeeper backend: rebuild with "
    "-DDLOCK_WITH_ZOOKEEPER=ON (needs libzookeeper-mt-dev)"};

static const optional_t ETCD = {
    "etcd",
    {"etcd://127.0.0.1:2379", "etcds://127.0.0.1:2379,127.0.0.1:2380",
     "Etcd://127.0.0.1:2379", NULL},
    {"etcd://", "etcds://", NULL},
    "this build has no etcd backend: rebuild with -DDLOCK_WITH_ETCD=ON "
    "(needs libcurl4-openssl-dev and libjson-c-dev)"};

static const optional_t POSTGRES = {
    "postgres",
    {"postgres://127.0.0.1:5432/db", "postgresql://u:p@127.0.0.1/db",
     "PostgreSQL://127.0.0.1", NULL},
    {"postgres://127.0.0.1/db?no_such_parameter=1", "postgresql://[::1", NULL},
    "this build has no postgres backend: rebuild with "
    "-DDLOCK_WITH_POSTGRES=ON (needs libpq-dev)"};

static const optional_t MYSQL = {
    "mysql",
    {"mysql://127.0.0.1:3306/db", "mariadb://u:p@127.0.0.1/db",
     "MySQL://127.0.0.1", NULL},
    {"mysql://127.0.0.1/db?no_such_parameter=1", "mariadb://[::1", NULL},
    "this build has no mysql backend: rebuild with "
    "-DDLOCK_WITH_MYSQL=ON (needs libmariadb-dev)"};

/* Whether the space-separated list has the word. */
static bool listed_in(const char *list, const char *word) {
  size_t n = strlen(word);
  for (const char *p = list; *p;) {
    size_t w = strcspn(p, " ");
    if (w == n && strncmp(p, word, n) == 0)
      return true;
    p += w;
    p += strspn(p, " ");
  }
  return false;
}

/* Every URL of the backend is refused with exactly its line. */
static void check_absent(const optional_t *o) {
  static int not_a_client;
  for (const char *const *u = o->urls; *u; u++) {
    /* must come back NULL */
    dlock_client_t *c = (dlock_client_t *)(void *)&not_a_client;
    CHECK_INT(dlock_client_new(&c, *u, NULL), ==, DLOCK_EURL);
    CHECK(c == NULL);
    CHECK_STR(dlock_last_error(), o->line);
  }
  /* as a Redlock node: the same line, after the node's number */
  const char *nodes[1] = {o->urls[0]};
  dlock_client_t *c = NULL;
  CHECK_INT(dlock_client_new_redlock(&c, nodes, 1, NULL), ==, DLOCK_EURL);
  CHECK(c == NULL);
  CHECK(strstr(dlock_last_error(), o->line) != NULL);
}

/* The backend is there: its own parser answers, not the registry. */
static void check_present(const optional_t *o) {
  for (const char *const *u = o->no_host; *u; u++) {
    dlock_client_t *c = NULL;
    CHECK_INT(dlock_client_new(&c, *u, NULL), ==, DLOCK_EURL);
    CHECK(c == NULL);
    CHECKF(strstr(dlock_last_error(), "this build has no") == NULL &&
               strstr(dlock_last_error(), "unknown scheme") == NULL,
           "%s: %s", *u, dlock_last_error());
  }
}

static void t_listed(void) {
  const char *have = dlock_backends();
  CHECK(have != NULL);
  CHECK_STR(have, DLOCK_EXPECTED_BACKENDS);
  CHECK(strncmp(have, "redis", 5) == 0);
  CHECK(dlock_backends() == have); /* static storage */
  const optional_t *opt[] = {&ZOOKEEPER, &ETCD, &POSTGRES, &MYSQL};
  for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++) {
    printf("%s: %s\n", opt[i]->name,
           listed_in(have, opt[i]->name) ? "built" : "not built");
    if (listed_in(have, opt[i]->name))
      check_present(opt[i]);
    else
      check_absent(opt[i]);
  }
  /* Redis is always there: a redis:// URL without a host is its parser's */
  dlock_client_t *c = NULL;
  CHECK_INT(dlock_client_new(&c, "redis://", NULL), ==, DLOCK_EURL);
  CHECK(strstr(dlock_last_error(), "this build has no") == NULL);
}

static void t_absent_zookeeper(void) {
  CHECK(!listed_in(dlock_backends(), "zookeeper"));
  check_absent(&ZOOKEEPER);
}

static void t_absent_etcd(void) {
  CHECK(!listed_in(dlock_backends(), "etcd"));
  check_absent(&ETCD);
}

static void t_absent_postgres(void) {
  CHECK(!listed_in(dlock_backends(), "postgres"));
  check_absent(&POSTGRES);
}

static void t_absent_mysql(void) {
  CHECK(!listed_in(dlock_backends(), "mysql"));
  check_absent(&MYSQL);
}

static const check_case_t cases[] = {
    {"listed", t_listed},
    {"absent_zookeeper", t_absent_zookeeper},
    {"absent_etcd", t_absent_etcd},
    {"absent_postgres", t_absent_postgres},
    {"absent_mysql", t_absent_mysql},
};

CHECK_MAIN(cases)
