/*
 * args_fuzz.c - throws random command lines at the dlock argument parser and
 * random strings at its URL helpers, checking invariants, not examples.
 *
 * Design note. The parser (args.c) and the URL helpers (url.c) are pure, so
 * they are linked in directly and run a few hundred thousand times in one
 * process; under the sanitizer builds (DLOCK_ASAN/UBSAN) this is the memory
 * safety check of everything the command does with untrusted input before it
 * talks to a server. Arguments are built from a vocabulary of real options,
 * numbers in every shape and random bytes, so that deep paths are reached.
 * Deterministic (fixed seed; `args_fuzz N SEED` to explore). Built with
 * -DDLOCK_LIBFUZZER it is instead a libFuzzer target over the same checks.
 *
 * Invariants: the parser returns 0 or 64; on 64 the message is one
 * non-empty line of printable ASCII; on 0 the name is 1..CLI_NAME_MAX
 * bytes, the mode agrees with command/-c, the numbers are in range, the
 * kind is one of the three and is shared only when -s (or --shared) was
 * given and neither -F nor -x was. The
 * redacted URL never contains the secret span it replaced (when that span
 * has no '*' and occurs once), cli_one_line never writes past its buffer
 * and hides the secret of a URL in a message by its position.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlock/dlock.h>

#include "args.h"
#include "url.h"

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "args_fuzz: %s:%d: check failed: %s\n", __FILE__,        \
              __LINE__, #cond);                                                \
      abort();                                                                 \
    }                                                                          \
  } while (0)

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(void) {
  uint64_t x = rng_state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return rng_state = x;
}
static size_t pick(size_t n) { return (size_t)(rnd() % n); }

static const char *const vocab[] = {"-u",
                                    "--url",
                                    "--url=redis://127.0.0.1:1",
                                    "redis://:pw@h:1/0",
                                    "-x",
                                    "--exclusive",
                                    "-s",
                                    "--shared",
                                    "-F",
                                    "--fair",
                                    "-N",
                                    "--limit",
                                    "3",
                                    "--all",
                                    "-n",
                                    "--nonblock",
                                    "-w",
                                    "--wait",
                                    "--wait=",
                                    "--timeout",
                                    "--timeout=0.5",
                                    "-E",
                                    "--conflict-exit-code",
                                    "255",
                                    "256",
                                    "-1",
                                    "-l",
                                    "--lease",
                                    "--watchdog",
                                    "--watchdog=0.003",
                                    "--session",
                                    "--session=2.5",
                                    "--on-lost",
                                    "term",
                                    "kill",
                                    "ignore",
                                    "--on-lost=kill",
                                    "--kill-after",
                                    "-c",
                                    "--command",
                                    "-v",
                                    "-vv",
                                    "--verbose",
                                    "--json",
                                    "--status",
                                    "--force-unlock",
                                    "--password-file",
                                    "-h",
                                    "--help",
                                    "--version",
                                    "-V",
                                    "--",
                                    "-",
                                    "",
                                    "NAME",
                                    "lock:{x}",
                                    "0",
                                    "0.",
                                    ".5",
                                    "1.0001",
                                    "99999999999",
                                    "1e3",
                                    "-.5",
                                    "-nvx",
                                    "-w5",
                                    "-E7",
                                    "-nE3",
                                    "-uredis://x",
                                    "sh",
                                    "true",
                                    "--bogus",
                                    "-q",
                                    "---",
                                    "--=",
                                    "=",
                                    "-c'x'",
                                    "rediss://h",
                                    "unix:///tmp/s"};
#define NVOCAB (sizeof vocab / sizeof vocab[0])

/* A random argument in buf (NUL-terminated). */
static void random_arg(char *buf, size_t cap) {
  size_t n, i;
  switch (pick(4)) {
  case 0: /* random bytes */
    n = pick(cap < 40 ? cap : 40);
    for (i = 0; i < n; i++) {
      buf[i] = (char)(pick(255) + 1);
    }
    buf[n] = '\0';
    break;
  case 1: /* a vocabulary word with a random tail */
    snprintf(buf, cap, "%s%c", vocab[pick(NVOCAB)], (char)(pick(94) + 33));
    break;
  default:
    snprintf(buf, cap, "%s", vocab[pick(NVOCAB)]);
    break;
  }
}

static void check_parse(int argc, char **argv) {
  struct cli_opts o;
  char err[512];
  size_t i;
  int rc;
  memset(err, 'X', sizeof err);
  rc = cli_parse(argc, argv, &o, err, sizeof err);
  CHECK(rc == 0 || rc == CLI_EX_USAGE);
  if (rc != 0) {
    size_t len = strlen(err);
    CHECK(len > 0 && len < sizeof err);
    for (i = 0; i < len; i++)
      CHECK(err[i] >= 0x20 && err[i] < 0x7f);
    return;
  }
  if (o.mode == CLI_MODE_HELP || o.mode == CLI_MODE_VERSION)
    return;
  CHECK(o.name != NULL);
  CHECK(strlen(o.name) >= 1 && strlen(o.name) <= CLI_NAME_MAX);
  CHECK(o.kind == CLI_KIND_EXCLUSIVE || o.kind == CLI_KIND_FAIR ||
        o.kind == CLI_KIND_SHARED || o.kind == CLI_KIND_LIMIT);
  CHECK(o.kind != CLI_KIND_LIMIT || (o.limit >= 1 && o.limit <= CLI_LIMIT_MAX));
  {
    /* options end at NAME (or at "--" before it) */
    bool s = false, f = false, x = false, n = false;
    for (i = 1; i < (size_t)argc && argv[i] != o.name; i++) {
      const char *a = argv[i];
      if (strcmp(a, "--") == 0)
        break;
      if (strcmp(a, "--shared") == 0)
        s = true;
      else if (strcmp(a, "--fair") == 0)
        f = true;
      else if (strcmp(a, "--exclusive") == 0)
        x = true;
      else if (strncmp(a, "--limit", 7) == 0)
        n = true;
      else if (a[0] == '-' && a[1] != '-') {
        /* a short cluster up to its first option with a value */
        for (const char *q = a + 1; *q != '\0'; q++) {
          if (strchr("uNwElc", *q) != NULL) {
            n = n || *q == 'N';
            if (q[1] == '\0')
              i++; /* its value is the next argument */
            break;
          }
          s = s || *q == 's';
          f = f || *q == 'F';
          x = x || *q == 'x';
        }
      } else if (a[0] == '-' && strchr(a, '=') == NULL &&
                 (strcmp(a, "--url") == 0 || strcmp(a, "--limit") == 0 ||
                  strcmp(a, "--wait") == 0 || strcmp(a, "--timeout") == 0 ||
                  strcmp(a, "--conflict-exit-code") == 0 ||
                  strcmp(a, "--lease") == 0 || strcmp(a, "--watchdog") == 0 ||
                  strcmp(a, "--session") == 0 || strcmp(a, "--on-lost") == 0 ||
                  strcmp(a, "--kill-after") == 0 ||
                  strcmp(a, "--command") == 0 ||
                  strcmp(a, "--password-file") == 0)) {
        i++; /* its value is the next argument */
      }
    }
    CHECK(!(s && (f || x)));
    CHECK(!(n && (s || f || x)));
    CHECK((o.kind == CLI_KIND_LIMIT) == n);
    CHECK((o.kind == CLI_KIND_SHARED) == s);
    CHECK((o.kind == CLI_KIND_FAIR) == (f && !s));
  }
  CHECK(o.conflict_exit >= 0 && o.conflict_exit <= 255);
  CHECK(o.wait_ms == DLOCK_WAIT_FOREVER ||
        (o.wait_ms >= 0 && o.wait_ms <= CLI_SECS_MAX * 1000));
  CHECK(o.lease_ms == DLOCK_LEASE_WATCHDOG || o.lease_ms >= 1);
  CHECK(o.watchdog_ms == 0 || o.watchdog_ms >= 3);
  CHECK(o.kill_after_ms >= 0);
  CHECK(!(o.command != NULL && o.shell_command != NULL));
  if (o.mode == CLI_MODE_RUN)
    CHECK(o.command != NULL || o.shell_command != NULL);
  if (o.mode == CLI_MODE_HOLD || o.mode == CLI_MODE_STATUS ||
      o.mode == CLI_MODE_FORCE_UNLOCK)
    CHECK(o.command == NULL && o.shell_command == NULL);
  if (o.json)
    CHECK(o.mode == CLI_MODE_STATUS);
  if (o.command != NULL) {
    CHECK(o.command > argv && o.command < argv + argc);
    CHECK(o.command[argc - (o.command - argv)] == NULL);
  }
}

static size_t count(const char *hay, const char *needle, size_t nlen) {
  size_t c = 0;
  const char *p = hay;
  while ((p = strstr(p, needle)) != NULL && nlen > 0) {
    c++;
    p++;
  }
  return c;
}

static void check_url(const char *url) {
  size_t off, len;
  char *r = cli_url_redact(url), *u, *pw;
  char out[64];
  CHECK(r != NULL);
  if (cli_url_secret_span(url, &off, &len)) {
    char *secret = strndup(url + off, len);
    CHECK(secret != NULL && off + len <= strlen(url) && len > 0);
    if (strchr(secret, '*') == NULL && count(url, secret, len) == 1)
      CHECK(strstr(r, secret) == NULL);
    CHECK(strstr(r, "***") != NULL);
    free(secret);
  } else {
    CHECK(strcmp(r, url) == 0);
  }
  free(r);
  u = cli_url_user(url);
  pw = cli_url_password(url);
  if (pw != NULL)
    CHECK(cli_url_has_password(url));
  r = cli_url_without_userinfo(url);
  CHECK(r != NULL && strlen(r) <= strlen(url));
  free(r);
  (void)cli_url_is_tls(url);
  (void)cli_url_peer_prefix(url, url);
  /* A message into a small buffer: one line, bounded. */
  cli_one_line(url, out, sizeof out);
  CHECK(strlen(out) < sizeof out);
  for (const char *q = out; *q != '\0'; q++)
    CHECK((unsigned char)*q >= 0x20 && *q != 0x7f);
  free(u);
  free(pw);
}

static void one_case(const uint8_t *data, size_t size) {
  /* data: NUL-separated arguments; the first is also tried as a URL. */
  char *copy = malloc(size + 1), *argv[66];
  int argc = 1;
  size_t i, start = 0;
  if (copy == NULL)
    return;
  memcpy(copy, data, size);
  copy[size] = '\0';
  argv[0] = "dlock";
  for (i = 0; i <= size && argc < 65; i++)
    if (copy[i] == '\0') {
      argv[argc++] = copy + start;
      start = i + 1;
    }
  argv[argc] = NULL;
  check_parse(argc, argv);
  if (argc > 1)
    check_url(argv[1]);
  free(copy);
}

#ifdef DLOCK_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  one_case(data, size);
  return 0;
}
#else
int main(int argc, char **argv) {
  long iters = argc > 1 ? atol(argv[1]) : 200000, k;
  char bufs[12][64];
  char *args[14];
  if (argc > 2)
    rng_state = strtoull(argv[2], NULL, 10) | 1;
  for (k = 0; k < iters; k++) {
    int n = (int)pick(12), j;
    args[0] = "dlock";
    for (j = 0; j < n; j++) {
      random_arg(bufs[j], sizeof bufs[j]);
      args[j + 1] = bufs[j];
    }
    args[n + 1] = NULL;
    check_parse(n + 1, args);
    if (n > 0)
      check_url(args[1]);
    {
      /* A URL built from parts, with '@' and ':' in odd places. */
      static const char *const parts[] = {
          "redis://", "unix://", "rediss://", "u",     ":",  "@",
          "p@ss",     "%41",     "h",         ":6379", "/0", "?db=1",
          "/",        "[::1]",   "",          "*"};
      char url[128] = "";
      int m = (int)pick(7), q;
      for (q = 0; q < m; q++)
        strncat(url, parts[pick(sizeof parts / sizeof parts[0])],
                sizeof url - strlen(url) - 1);
      check_url(url);
    }
  }
  /* The byte-level entry too, on random buffers. */
  for (k = 0; k < iters / 10; k++) {
    uint8_t data[96];
    size_t size = pick(sizeof data), i;
    for (i = 0; i < size; i++)
      data[i] = (uint8_t)(pick(3) == 0 ? 0 : pick(256));
    one_case(data, size);
  }
  printf("args_fuzz: %ld command lines and URLs, all invariants held\n", iters);
  return 0;
}
#endif
