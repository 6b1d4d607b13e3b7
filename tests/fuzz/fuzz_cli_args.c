/*
 * fuzz_cli_args.c - libFuzzer target for the dlock command's argument
 * parsing (tools/dlock/args.c) and its URL handling (tools/dlock/url.c),
 * together with the library's URL parser the command hands the URL to.
 *
 * Design note: the input is a command line, arguments separated by NUL
 * bytes (at most 64). The target runs what main() does with it before it
 * touches the network - cli_parse(), then, for the URL (-u, or the first
 * argument when there is none), the secret span, argv scrubbing,
 * redaction, password/user extraction and dlock__redis_url_parse() - and
 * checks:
 *  - the parser returns 0 or 64; a usage message is one non-empty line of
 *    printable ASCII and never shows a password found in any argument
 *    (dlock(1): "A password is never printed");
 *  - on success the options are in range and consistent with the mode;
 *  - every seconds value that parses lies in 0..CLI_SECS_MAX s;
 *  - whenever the library would use a password from the URL, the command
 *    knows it: cli_url_has_password() agrees, the span scrubbed from argv
 *    covers the library's password, the scrubbed argument and the
 *    redacted URL no longer contain it, and cli_one_line() hides it (by
 *    its position) in a message that quotes the URL;
 *  - cli_printable() output is printable and bounded.
 * Pure functions only: no threads, no I/O.
 */
#define _GNU_SOURCE 1

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "args.h"
#include "dlock/dlock.h"
#include "redis/url.h"
#include "url.h"

#define FCHECK(cond)                                                           \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "fuzz_cli_args: %s:%d: check failed: %s\n", __FILE__,    \
              __LINE__, #cond);                                                \
      abort();                                                                 \
    }                                                                          \
  } while (0)

#define MAX_ARGS 64

static size_t occurrences(const char *hay, const char *needle) {
  size_t n = 0, nl = strlen(needle);
  if (nl == 0)
    return 0;
  for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
    n++;
  return n;
}

/* A password worth looking for in output: long enough not to match by
 * chance, free of the redaction mark, found once in the whole input. */
static bool distinctive(const char *secret, const char *whole) {
  return strlen(secret) >= 4 && !strchr(secret, '*') && !strchr(secret, '\\') &&
         occurrences(whole, secret) == 1;
}

static bool has_control(const char *s) {
  for (; *s != '\0'; s++)
    if ((unsigned char)*s < 0x20 || *s == 0x7f)
      return true;
  return false;
}

/* FUZZ_SKIP=name,...: leave out the named checks, to look past a finding
 * already reported while it is being fixed (never set in CI). */
static bool skip(const char *check) {
  const char *s = getenv("FUZZ_SKIP");
  return s && strstr(s, check);
}

/* Another password of the same shape: every letter and digit moved to the
 * next one of its kind (hex digits stay hex digits), the rest kept. A
 * password found in a message is an echo only if the other one is found in
 * the message for the other URL too; otherwise the message's own words
 * happened to contain it. */
static void other_password(char *p, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char c = p[i];
    if (c >= '0' && c <= '9')
      p[i] = (char)('0' + (c - '0' + 1) % 10);
    else if (c >= 'a' && c <= 'f')
      p[i] = (char)('a' + (c - 'a' + 1) % 6);
    else if (c >= 'A' && c <= 'F')
      p[i] = (char)('A' + (c - 'A' + 1) % 6);
    else if (c >= 'g' && c <= 'z')
      p[i] = (char)('g' + (c - 'g' + 1) % 20);
    else if (c >= 'G' && c <= 'Z')
      p[i] = (char)('G' + (c - 'G' + 1) % 20);
  }
}

static void check_printable_line(const char *s, size_t cap) {
  size_t n = strnlen(s, cap);
  FCHECK(n > 0 && n < cap);
  for (size_t i = 0; i < n; i++)
    FCHECK(s[i] >= 0x20 && s[i] < 0x7f);
}

/* argv[i] holds a password at [off, off+len) that the usage message
 * contains: parse again with another password of the same shape; if the
 * message now shows that one, and did not before (other arguments may hold
 * the same letters by chance), the parser echoes passwords. */
static void check_echo(int argc, char **argv, int i, size_t off, size_t len,
                       const char *first_err) {
  char *saved = argv[i];
  char *copy = strdup(saved);
  FCHECK(copy != NULL);
  other_password(copy + off, len);
  char *other = strndup(copy + off, len);
  FCHECK(other != NULL);
  argv[i] = copy;
  struct cli_opts o;
  char err[512];
  if (strcmp(other, saved + off) != 0 &&
      cli_parse(argc, argv, &o, err, sizeof err) != 0)
    FCHECK(strstr(err, other) == NULL || strstr(first_err, other) != NULL);
  argv[i] = saved;
  free(other);
  free(copy);
}

static void check_options(int argc, char **argv, const struct cli_opts *o) {
  if (o->mode == CLI_MODE_HELP || o->mode == CLI_MODE_VERSION)
    return;
  FCHECK(o->name != NULL);
  size_t nl = strlen(o->name);
  FCHECK(nl >= 1 && nl <= CLI_NAME_MAX);
  FCHECK(o->wait_ms == DLOCK_WAIT_FOREVER ||
         (o->wait_ms >= 0 && o->wait_ms <= CLI_SECS_MAX * 1000));
  FCHECK(o->lease_ms == DLOCK_LEASE_WATCHDOG ||
         (o->lease_ms >= 1 && o->lease_ms <= CLI_SECS_MAX * 1000));
  FCHECK(o->watchdog_ms == 0 ||
         (o->watchdog_ms >= 3 && o->watchdog_ms <= CLI_SECS_MAX * 1000));
  FCHECK(o->kill_after_ms >= 0 && o->kill_after_ms <= CLI_SECS_MAX * 1000);
  FCHECK(o->conflict_exit >= 0 && o->conflict_exit <= 255);
  FCHECK(o->on_lost == CLI_LOST_TERM || o->on_lost == CLI_LOST_KILL ||
         o->on_lost == CLI_LOST_IGNORE);
  FCHECK(!(o->command && o->shell_command));
  switch (o->mode) {
  case CLI_MODE_RUN:
    FCHECK(o->command || o->shell_command);
    break;
  case CLI_MODE_HOLD:
  case CLI_MODE_STATUS:
  case CLI_MODE_FORCE_UNLOCK:
    FCHECK(!o->command && !o->shell_command);
    break;
  default:
    FCHECK(0);
  }
  if (o->json)
    FCHECK(o->mode == CLI_MODE_STATUS);
  if (o->command) {
    /* the command is a tail of argv, NULL-terminated */
    FCHECK(o->command > argv && o->command < argv + argc);
    FCHECK(o->command[argc - (o->command - argv)] == NULL);
  }
  /* pointers into argv, as documented */
  bool in_argv = o->url == NULL;
  for (int i = 1; i < argc && !in_argv; i++)
    in_argv = o->url >= argv[i] && o->url <= argv[i] + strlen(argv[i]);
  FCHECK(in_argv);
}

/* The library's password span of a redis:// or rediss:// URL (userinfo
 * up to the last '@' of the authority, password after its first ':'), or
 * false. */
static bool lib_password_span(const char *url, size_t *off, size_t *len) {
  const char *auth;
  if (strncasecmp(url, "redis://", 8) == 0) /* schemes: any case */
    auth = url + 8;
  else if (strncasecmp(url, "rediss://", 9) == 0)
    auth = url + 9;
  else
    return false;
  size_t alen = strcspn(auth, "/?");
  const char *at = NULL;
  for (size_t i = 0; i < alen; i++)
    if (auth[i] == '@')
      at = auth + i;
  if (!at)
    return false;
  const char *colon = memchr(auth, ':', (size_t)(at - auth));
  if (!colon || colon + 1 == at)
    return false;
  *off = (size_t)(colon + 1 - url);
  *len = (size_t)(at - colon - 1);
  return true;
}

static void check_url(char *arg, const char *whole) {
  char *url = strdup(arg);
  FCHECK(url != NULL);
  size_t off = 0, len = 0, loff = 0, llen = 0;
  bool has_span = cli_url_secret_span(url, &off, &len);
  if (has_span)
    FCHECK(len > 0 && off + len <= strlen(url));

  /* what the library would do with it */
  dlock__endpoint ep;
  int rc = dlock__redis_url_parse(url, &ep);
  if (rc == 0 && ep.password) {
    FCHECK(cli_url_has_password(url));
    FCHECK(has_span);
    FCHECK(lib_password_span(url, &loff, &llen));
    FCHECK(off <= loff && loff + llen <= off + len);
    /* the scrubbed argument and the redacted URL hide it */
    char *raw = strndup(url + loff, llen);
    FCHECK(raw != NULL);
    char *scrubbed = strdup(url);
    FCHECK(scrubbed != NULL);
    memset(scrubbed + off, '*', len);
    if (distinctive(raw, whole))
      FCHECK(strstr(scrubbed, raw) == NULL);
    char *shown = cli_url_redact(url);
    FCHECK(shown != NULL);
    if (distinctive(raw, whole))
      FCHECK(strstr(shown, raw) == NULL);
    /* a message that quotes the URL hides its password (a URL in free
     * text ends at a space, quote or control byte: without those) */
    char msg[600], out[700];
    if (strlen(url) < 500 && distinctive(raw, whole) &&
        !strpbrk(url, " '\"<>") && !has_control(url)) {
      snprintf(msg, sizeof msg, "<%s>", url);
      cli_one_line(msg, out, sizeof out);
      FCHECK(strstr(out, raw) == NULL);
    }
    free(shown);
    free(scrubbed);
    free(raw);
  }
  if (rc == 0) {
    /* the URL the command builds when the password comes from elsewhere */
    char *bare = cli_url_without_userinfo(url);
    FCHECK(bare != NULL && strlen(bare) <= strlen(url));
    dlock__endpoint ep2;
    if (dlock__redis_url_parse(bare, &ep2) == 0)
      FCHECK(ep2.password == NULL && ep2.user == NULL);
    dlock__endpoint_clear(&ep2);
    free(bare);
  } else {
    (void)cli_url_peer_prefix(url, dlock_last_error());
  }
  dlock__endpoint_clear(&ep);
  char *user = cli_url_user(url);
  free(user);
  (void)cli_url_is_tls(url);
  free(url);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = malloc(size + 1);
  char *whole = malloc(size + 1);
  char *argv[MAX_ARGS + 2];
  int argc = 1;
  if (!buf || !whole) {
    free(buf);
    free(whole);
    return 0;
  }
  memcpy(buf, data, size);
  buf[size] = '\0';
  /* the whole command line with the separators as spaces, for searches */
  for (size_t i = 0; i < size; i++)
    whole[i] = data[i] ? (char)data[i] : ' ';
  whole[size] = '\0';
  argv[0] = "dlock";
  size_t start = 0;
  for (size_t i = 0; i <= size && argc <= MAX_ARGS; i++) {
    if (buf[i] == '\0') {
      argv[argc++] = buf + start;
      start = i + 1;
    }
  }
  argv[argc] = NULL;

  struct cli_opts o;
  char err[512];
  memset(err, 'X', sizeof err);
  memset(&o, 0, sizeof o);
  int rc = cli_parse(argc, argv, &o, err, sizeof err);
  FCHECK(rc == 0 || rc == CLI_EX_USAGE);
  if (rc != 0) {
    check_printable_line(err, sizeof err);
    /* no password of any argument in the message */
    for (int i = 1; i < argc; i++) {
      size_t off, len;
      if (!cli_url_secret_span(argv[i], &off, &len))
        continue;
      char *secret = strndup(argv[i] + off, len);
      FCHECK(secret != NULL);
      if (distinctive(secret, whole) && !skip("usage-echo") &&
          strstr(err, secret))
        check_echo(argc, argv, i, off, len, err);
      free(secret);
    }
  } else {
    check_options(argc, argv, &o);
  }

  if (rc == 0 && o.url)
    check_url(o.url, whole);
  else if (argc > 1)
    check_url(argv[1], whole);

  for (int i = 1; i < argc; i++) {
    int64_t ms = -42;
    int r = cli_parse_secs(argv[i], &ms);
    FCHECK(r == 0 || r == -1 || r == -2 || r == -3);
    if (r == 0)
      FCHECK(ms >= 0 && ms <= CLI_SECS_MAX * 1000);
    char pr[64];
    cli_printable(argv[i], 12, pr, sizeof pr);
    FCHECK(strlen(pr) < sizeof pr);
    for (size_t k = 0; pr[k]; k++)
      FCHECK(pr[k] >= 0x20 && pr[k] < 0x7f);
  }
  free(buf);
  free(whole);
  return 0;
}
