/*
 * check.h - the smallest test framework that does the job.
 *
 * CHECK* macros print "file:line: what failed" plus, for dlock calls, the
 * error's name and dlock_last_error() of the failing thread, then exit(1)
 * (the harness stops its servers from atexit). A test executable holds
 * several cases; `exe CASE` runs one (that is what ctest does, so each case
 * is its own process with its own server), `exe --list` lists them, and `exe`
 * alone runs every case, each in a forked child.
 *
 * Define CHECK_NO_DLOCK before including to use it without libdlock.
 */
#ifndef DLOCK_TEST_CHECK_H
#define DLOCK_TEST_CHECK_H

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef CHECK_NO_DLOCK
#include <dlock/dlock.h>
#endif

__attribute__((format(printf, 3, 4), noreturn)) static inline void
check_fail(const char *file, int line, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
#ifndef CHECK_NO_DLOCK
  fprintf(stderr, "%s:%d: CHECK failed: %s\n  last error: \"%s\"\n", file, line,
          msg, dlock_last_error());
#else
  fprintf(stderr, "%s:%d: CHECK failed: %s\n", file, line, msg);
#endif
  fflush(stderr);
  fflush(stdout);
  exit(1);
}

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond))                                                               \
      check_fail(__FILE__, __LINE__, "%s", #cond);                             \
  } while (0)

#define CHECKF(cond, ...)                                                      \
  do {                                                                         \
    if (!(cond))                                                               \
      check_fail(__FILE__, __LINE__, __VA_ARGS__);                             \
  } while (0)

/* a op b, both as integers */
#define CHECK_INT(a, op, b)                                                    \
  do {                                                                         \
    long long ca_ = (long long)(a), cb_ = (long long)(b);                      \
    if (!(ca_ op cb_))                                                         \
      check_fail(__FILE__, __LINE__, "%s %s %s (%lld vs %lld)", #a, #op, #b,   \
                 ca_, cb_);                                                    \
  } while (0)

#define CHECK_STR(a, b)                                                        \
  do {                                                                         \
    const char *ca_ = (a), *cb_ = (b);                                         \
    if (!ca_ || !cb_ || strcmp(ca_, cb_) != 0)                                 \
      check_fail(__FILE__, __LINE__, "%s == %s (\"%s\" vs \"%s\")", #a, #b,    \
                 ca_ ? ca_ : "(null)", cb_ ? cb_ : "(null)");                  \
  } while (0)

#ifndef CHECK_NO_DLOCK
/* expr returns the dlock code want */
#define CHECK_RC(expr, want)                                                   \
  do {                                                                         \
    int cg_ = (expr), cw_ = (want);                                            \
    if (cg_ != cw_)                                                            \
      check_fail(__FILE__, __LINE__, "%s: got %s (%d), want %s (%d)", #expr,   \
                 dlock_err_name(cg_), cg_, dlock_err_name(cw_), cw_);          \
  } while (0)
#define CHECK_OK(expr) CHECK_RC(expr, DLOCK_OK)

/* rc is one of the listed codes (the list ends with -999 internally) */
static inline int check_rc_in(int rc, const int *codes) {
  for (int i = 0; codes[i] != -999; i++)
    if (codes[i] == rc)
      return 1;
  return 0;
}
#define CHECK_RC_IN(rc, ...)                                                   \
  do {                                                                         \
    int cr_ = (rc);                                                            \
    const int cl_[] = {__VA_ARGS__, -999};                                     \
    if (!check_rc_in(cr_, cl_))                                                \
      check_fail(__FILE__, __LINE__, "%s: got %s (%d), want one of %s", #rc,   \
                 dlock_err_name(cr_), cr_, #__VA_ARGS__);                      \
  } while (0)
#endif

typedef struct check_case {
  const char *name;
  void (*fn)(void);
} check_case_t;

static inline int check_main(int argc, char **argv, const check_case_t *cases,
                             size_t n) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc >= 2 && strcmp(argv[1], "--list") == 0) {
    for (size_t i = 0; i < n; i++)
      printf("%s\n", cases[i].name);
    return 0;
  }
  if (argc >= 2) {
    for (size_t i = 0; i < n; i++) {
      if (strcmp(argv[1], cases[i].name) == 0) {
        printf("== %s\n", cases[i].name);
        cases[i].fn();
        printf("== %s: ok\n", cases[i].name);
        return 0;
      }
    }
    fprintf(stderr, "%s: no case \"%s\" (try --list)\n", argv[0], argv[1]);
    return 2;
  }
  int failed = 0;
  for (size_t i = 0; i < n; i++) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
      perror("fork");
      return 1;
    }
    if (pid == 0) {
      printf("== %s\n", cases[i].name);
      cases[i].fn();
      printf("== %s: ok\n", cases[i].name);
      exit(0);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) < 0)
      st = 1;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      printf("== %s: FAILED\n", cases[i].name);
      failed++;
    }
  }
  printf("%d of %zu cases failed\n", failed, n);
  return failed ? 1 : 0;
}

#define CHECK_MAIN(cases)                                                      \
  int main(int argc, char **argv) {                                            \
    return check_main(argc, argv, cases, sizeof(cases) / sizeof(cases[0]));    \
  }

#endif /* DLOCK_TEST_CHECK_H */
