/*
 * test_unit.c - the pure parts of the public API, no server needed.
 *
 * Design note: the version functions, the error table (every code of
 * DLOCK_ERRNO_MAP has its message and "DLOCK_<name>", unknown codes get a
 * fallback), the thread-local last-error buffer, the options setters'
 * validation, dlock_client_new's argument and URL checks (malformed URLs
 * fail before any network I/O), dlock_thread_id() (never 0, never reused
 * by a later thread, kept across fork()) and the NULL-accepting free
 * functions. Linked against the static library.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "check.h"

#include <limits.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

static void t_version(void) {
  CHECK_INT(dlock_version(), ==, DLOCK_VERSION_HEX);
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", DLOCK_VERSION_MAJOR,
           DLOCK_VERSION_MINOR, DLOCK_VERSION_PATCH);
  CHECK_STR(dlock_version_string(), want);
}

static void t_errors(void) {
  struct {
    int code;
    const char *name, *msg;
  } table[] = {
#define ROW(name, value, msg) {value, "DLOCK_" #name, msg},
      DLOCK_ERRNO_MAP(ROW)
#undef ROW
  };
  size_t n = sizeof table / sizeof table[0];
  CHECK_INT(n, ==, 20);
  for (size_t i = 0; i < n; i++) {
    CHECK_STR(dlock_strerror(table[i].code), table[i].msg);
    CHECK_STR(dlock_err_name(table[i].code), table[i].name);
    /* values are stable: -1 .. -20 in table order */
    CHECK_INT(table[i].code, ==, -(int)(i + 1));
  }
  CHECK_STR(dlock_err_name(DLOCK_OK), "DLOCK_OK");
  CHECK(dlock_strerror(DLOCK_OK) != NULL);
  CHECK(strcmp(dlock_strerror(DLOCK_OK), "unknown error") != 0);
  CHECK_STR(dlock_err_name(DLOCK_EBUSY), "DLOCK_EBUSY");
  CHECK_STR(dlock_strerror(DLOCK_ELOST),
            "lock was lost (lease expired or key removed)");
  CHECK_INT(DLOCK_ESYS, ==, -18);
  CHECK_STR(dlock_err_name(DLOCK_ESYS), "DLOCK_ESYS");
  CHECK_STR(dlock_strerror(DLOCK_ESYS), "system call failed");
  CHECK_INT(DLOCK_ETLS, ==, -19);
  CHECK_STR(dlock_err_name(DLOCK_ETLS), "DLOCK_ETLS");
  CHECK_INT(DLOCK_ECANCELED, ==, -20);
  CHECK_STR(dlock_err_name(DLOCK_ECANCELED), "DLOCK_ECANCELED");
}

static void t_err_unknown(void) {
  const int unknown[] = {-21, -100, 1, 42, INT_MIN, INT_MAX};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    CHECK_STR(dlock_strerror(unknown[i]), "unknown error");
    const char *name = dlock_err_name(unknown[i]);
    CHECK(name != NULL && name[0] != '\0');
    CHECK(strcmp(name, "DLOCK_OK") != 0);
  }
}

static void *fresh_thread(void *arg) {
  char *out = arg;
  const char *e = dlock_last_error();
  snprintf(out, 256, "%s", e ? e : "(null)");
  return NULL;
}

static void t_last_error_thread_local(void) {
  const char *e = dlock_last_error();
  CHECK(e != NULL);
  CHECK_STR(e, "");
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_RC(dlock_options_set_connect_timeout(o, 0), DLOCK_EINVAL);
  e = dlock_last_error();
  CHECK(e != NULL);
  printf("after EINVAL: \"%s\"\n", e);
  dlock_client_t *c = NULL;
  CHECK_RC(dlock_client_new(&c, "http://x", NULL), DLOCK_EURL);
  e = dlock_last_error();
  CHECKF(e && e[0], "no detail for a malformed URL");
  /* another thread has its own, empty buffer */
  char other[256] = "unset";
  pthread_t th;
  CHECK(pthread_create(&th, NULL, fresh_thread, other) == 0);
  pthread_join(th, NULL);
  CHECK_STR(other, "");
  /* and this thread's detail is still there */
  CHECK(dlock_last_error()[0] != '\0');
  dlock_options_free(o);
}

static void t_options_validation(void) {
  CHECK_RC(dlock_options_new(NULL), DLOCK_EINVAL);
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK(o != NULL);

  CHECK_RC(dlock_options_set_connect_timeout(o, 0), DLOCK_EINVAL);
  CHECK_RC(dlock_options_set_connect_timeout(o, -1), DLOCK_EINVAL);
  CHECK_RC(dlock_options_set_connect_timeout(o, INT64_MIN), DLOCK_EINVAL);
  CHECK_OK(dlock_options_set_connect_timeout(o, 1));
  CHECK_OK(dlock_options_set_connect_timeout(o, 5000));

  CHECK_RC(dlock_options_set_command_timeout(o, 0), DLOCK_EINVAL);
  CHECK_RC(dlock_options_set_command_timeout(o, -5), DLOCK_EINVAL);
  CHECK_OK(dlock_options_set_command_timeout(o, 1));

  CHECK_RC(dlock_options_set_watchdog_timeout(o, 2), DLOCK_EINVAL);
  CHECK_RC(dlock_options_set_watchdog_timeout(o, 0), DLOCK_EINVAL);
  CHECK_RC(dlock_options_set_watchdog_timeout(o, -1), DLOCK_EINVAL);
  CHECK_OK(dlock_options_set_watchdog_timeout(o, 3));
  CHECK_OK(dlock_options_set_watchdog_timeout(o, 30000));

  CHECK_RC(dlock_options_set_pool_size(o, 0), DLOCK_EINVAL);
  CHECK_RC(dlock_options_set_pool_size(o, -1), DLOCK_EINVAL);
  CHECK_RC(dlock_options_set_pool_size(o, 1025), DLOCK_EINVAL);
  CHECK_OK(dlock_options_set_pool_size(o, 1));
  CHECK_OK(dlock_options_set_pool_size(o, 1024));

  CHECK_RC(dlock_options_set_client_name(o, "has space"), DLOCK_EINVAL);
  CHECK_OK(dlock_options_set_client_name(o, "no-space"));
  CHECK_OK(dlock_options_set_client_name(o, NULL));

  CHECK_OK(dlock_options_set_credentials(o, NULL, NULL));
  CHECK_OK(dlock_options_set_credentials(o, "alice", "pw"));
  CHECK_OK(dlock_options_set_credentials(o, NULL, "pw"));

  CHECK_OK(dlock_options_set_lost_callback(o, NULL, NULL));
  CHECK_OK(dlock_options_set_log_callback(o, NULL, NULL, DLOCK_LOG_ERROR));

  /* NULL options object */
  CHECK_RC(dlock_options_set_connect_timeout(NULL, 10), DLOCK_EINVAL);
  CHECK_RC(dlock_options_set_command_timeout(NULL, 10), DLOCK_EINVAL);
  CHECK_RC(dlock_options_set_watchdog_timeout(NULL, 10), DLOCK_EINVAL);
  CHECK_RC(dlock_options_set_client_name(NULL, "x"), DLOCK_EINVAL);
  CHECK_RC(dlock_options_set_credentials(NULL, "u", "p"), DLOCK_EINVAL);
  CHECK_RC(dlock_options_set_pool_size(NULL, 4), DLOCK_EINVAL);
  CHECK_RC(dlock_options_set_lost_callback(NULL, NULL, NULL), DLOCK_EINVAL);
  CHECK_RC(dlock_options_set_log_callback(NULL, NULL, NULL, DLOCK_LOG_INFO),
           DLOCK_EINVAL);
  dlock_options_free(o);
}

static void t_client_new_args(void) {
  CHECK_RC(dlock_client_new(NULL, "redis://127.0.0.1:1", NULL), DLOCK_EINVAL);
  dlock_client_t *c = (dlock_client_t *)&c;
  CHECK_RC(dlock_client_new(&c, NULL, NULL), DLOCK_EINVAL);
  CHECK(c == NULL);
}

static void t_bad_urls(void) {
  const char *bad[] = {
      "",
      "http://x",
      "redis://host:99999",
      "redis://:@",
      "garbage",
      "redis://",
      "redis://127.0.0.1:",
      "redis://127.0.0.1:abc",
      "redis://127.0.0.1:-1",
      "redis://127.0.0.1:6379/notadb",
      "redis://[::1",
      "unix://",
      "redis:/127.0.0.1",
      "redis://127.0.0.1:65536",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    dlock_client_t *c = (dlock_client_t *)&c;
    int rc = dlock_client_new(&c, bad[i], NULL);
    CHECKF(rc == DLOCK_EURL, "URL \"%s\": got %s, want DLOCK_EURL", bad[i],
           dlock_err_name(rc));
    CHECKF(c == NULL, "URL \"%s\": *out not NULL after failure", bad[i]);
    CHECK(dlock_last_error() != NULL);
  }
}

static void *id_thread(void *arg) {
  uint64_t *out = arg;
  out[0] = dlock_thread_id();
  out[1] = dlock_thread_id();
  return NULL;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Nonzero, the same for the life of a thread, and never given to another
 * thread of the process: threads created and joined one after the other
 * (the kernel may hand a later one a dead one's TID) all differ. */
static void t_thread_id(void) {
  enum { N = 2000 };
  static uint64_t ids[N + 1];
  uint64_t me = dlock_thread_id();
  CHECK(me != 0);
  CHECK_INT(dlock_thread_id(), ==, me);
  ids[N] = me;
  for (int i = 0; i < N; i++) {
    uint64_t out[2] = {0, 0};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, id_thread, out) == 0);
    pthread_join(th, NULL);
    CHECKF(out[0] != 0, "thread %d got id 0", i);
    CHECKF(out[0] == out[1], "thread %d: id changed from %llu to %llu", i,
           (unsigned long long)out[0], (unsigned long long)out[1]);
    ids[i] = out[0];
  }
  qsort(ids, N + 1, sizeof ids[0], cmp_u64);
  for (int i = 1; i <= N; i++)
    CHECKF(ids[i] != ids[i - 1], "id %llu given to two threads",
           (unsigned long long)ids[i]);
}

/* fork(): the child's thread keeps its number (the child's clients are new
 * clients with new client ids, so no owner string repeats), and a thread
 * the child starts gets a number no thread of the parent had before the
 * fork. Forked before this process starts any thread. */
static void t_thread_id_fork(void) {
  uint64_t me = dlock_thread_id();
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    CHECK_INT(dlock_thread_id(), ==, me);
    uint64_t out[2] = {0, 0};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, id_thread, out) == 0);
    pthread_join(th, NULL);
    CHECK(out[0] != 0 && out[0] != me);
    _exit(0);
  }
  int st = 0;
  CHECK(waitpid(pid, &st, 0) == pid);
  CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child failed (status 0x%x)",
         st);
  CHECK_INT(dlock_thread_id(), ==, me);
}

static void t_free_null(void) {
  dlock_options_free(NULL);
  dlock_client_free(NULL);
  dlock_lock_free(NULL);
  dlock_lock_state_free(NULL);
}

static const check_case_t cases[] = {
    {"version", t_version},
    {"errors", t_errors},
    {"err_unknown", t_err_unknown},
    {"last_error_thread_local", t_last_error_thread_local},
    {"options_validation", t_options_validation},
    {"client_new_args", t_client_new_args},
    {"bad_urls", t_bad_urls},
    {"thread_id", t_thread_id},
    {"thread_id_fork", t_thread_id_fork},
    {"free_null", t_free_null},
};

CHECK_MAIN(cases)
