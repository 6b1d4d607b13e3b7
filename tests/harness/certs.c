/*
 * certs.c - the tests' certificates (certs.h), made by the openssl command.
 *
 * Design note: one shell script run by system() makes every file in a
 * mkdtemp directory; atexit removes it, only in the process that made it
 * (a forked child's exit leaves it). g_mu guards the first creation.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "certs.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_dir[PATH_MAX];
static pid_t g_owner;
static int g_state; /* 0 not tried, 1 made, -1 failed */

static void remove_certs(void) {
  if (g_state == 1 && getpid() == g_owner) {
    char rm[PATH_MAX + 16];
    snprintf(rm, sizeof rm, "rm -rf '%s'", g_dir);
    if (system(rm) != 0)
      fprintf(stderr, "certs: could not remove %s\n", g_dir);
  }
}

static int make(void) {
  snprintf(g_dir, sizeof g_dir, "/tmp/dlock-certs-XXXXXX");
  if (!mkdtemp(g_dir)) {
    perror("certs: mkdtemp");
    return -1;
  }
  g_owner = getpid();
  atexit(remove_certs);
  char cmd[8192];
  snprintf(
      cmd, sizeof cmd,
      "set -e; cd '%s'\n"
      "key() { openssl genpkey -algorithm EC -pkeyopt "
      "ec_paramgen_curve:P-256 -out \"$1\" 2>/dev/null; }\n"
      "ca() { key $1.key; openssl req -x509 -new -key $1.key -days 2 "
      "-subj \"/CN=$2\" -out $1.crt; }\n"
      /* sign NAME CN EXT [CA]: NAME.crt signed by CA (default ca) */
      "sign() { key $1.key; openssl req -new -key $1.key -subj \"/CN=$2\" "
      "-out $1.csr; printf '%%s\\n' \"$3\" >$1.ext; c=${4:-ca}; openssl "
      "x509 -req -in $1.csr -CA $c.crt -CAkey $c.key -CAcreateserial -days "
      "2 -extfile $1.ext -out $1.crt 2>/dev/null; }\n"
      "ca ca dlock-test-ca\n"
      "ca otherca dlock-unrelated-ca\n"
      "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n"
      "extendedKeyUsage=serverAuth,clientAuth\\n' >server.ext0\n"
      "sign server localhost \"$(cat server.ext0)\"\n"
      "sign other other.example 'subjectAltName=DNS:other.example'\n"
      "sign client dlock-client 'extendedKeyUsage=clientAuth'\n"
      "sign otherclient dlock-other-client 'extendedKeyUsage=clientAuth' "
      "otherca\n",
      g_dir);
  int rc = system(cmd);
  if (rc != 0) {
    fprintf(stderr, "certs: openssl could not make the test certificates "
                    "(%d)\n",
            rc);
    return -1;
  }
  return 1;
}

const char *th_certs_dir(void) {
  pthread_mutex_lock(&g_mu);
  if (g_state == 0)
    g_state = make();
  int st = g_state;
  pthread_mutex_unlock(&g_mu);
  return st == 1 ? g_dir : NULL;
}

const char *th_cert(const char *file) {
  static _Thread_local char paths[8][PATH_MAX + 64];
  static _Thread_local int next;
  const char *dir = th_certs_dir();
  char *p = paths[next++ % 8];
  snprintf(p, PATH_MAX + 64, "%s/%s", dir ? dir : "/nonexistent", file);
  return p;
}
