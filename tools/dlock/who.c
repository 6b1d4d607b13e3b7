/*
 * who.c - who holds a lock: the identity dlock records beside each hold and
 * queued wait, and how --status and -v show it.
 *
 * Design note. dlock hands the library one small JSON object as its
 * holder info (dlock_options_set_holder_info), built once before any
 * thread exists: {"host":..,"pid":..,"user":..,"cmd":..,"since_ms":..},
 * "cmd" the command line joined by spaces and cut to CLI_WHO_CMD_MAX bytes
 * (left out with --no-cmdline), "since_ms" the wall-clock time (ms since
 * the epoch) when this dlock started, so also when it started waiting.
 * The library stores it on the server where the anchor layout leaves room
 * (docs/LAYOUT.md) and returns it from dlock_lock_state. The text must be
 * printable UTF-8: control characters and bytes that are not UTF-8 in the
 * command line become '?', so nothing the user typed can break a reader's
 * line or JSON. Reading back, an info that is not such an object (another
 * library user's free text) is shown as it is; a holder with none (a
 * Redisson, Curator or etcdctl client, or a dlock before this) by its owner
 * id alone. The parser reads only flat objects of strings and integers,
 * bounded by the library's DLOCK_HOLDER_INFO_MAX.
 */
#define _GNU_SOURCE

#include "cli.h"

#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int64_t cli_wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Appends s to out (at *at, capacity cap) as the body of a JSON string,
 * at most `max` bytes of s: control characters and bytes that are not
 * UTF-8 as '?', a sequence never cut in two. */
static void put_text(char *out, size_t cap, size_t *at, const char *s,
                     size_t max) {
  const unsigned char *p = (const unsigned char *)s;
  size_t used = 0;
  while (*p != '\0') {
    unsigned char ch = *p;
    size_t need = 0, k;
    if (ch >= 0xc2 && ch <= 0xdf)
      need = 1;
    else if (ch >= 0xe0 && ch <= 0xef)
      need = 2;
    else if (ch >= 0xf0 && ch <= 0xf4)
      need = 3;
    for (k = 1; k <= need; k++)
      if ((p[k] & 0xc0) != 0x80)
        break;
    bool ok = ch >= 0x80 && need > 0 && k > need &&
              !(ch == 0xe0 && p[1] < 0xa0) && !(ch == 0xed && p[1] >= 0xa0) &&
              !(ch == 0xf0 && p[1] < 0x90) && !(ch == 0xf4 && p[1] >= 0x90);
    size_t len = ok ? need + 1 : 1;
    size_t outlen = ok ? len : (ch == '"' || ch == '\\') ? 2 : 1;
    if (used + outlen > max || *at + outlen + 1 >= cap)
      break;
    if (ok) {
      memcpy(out + *at, p, len);
    } else if (ch == '"' || ch == '\\') {
      out[*at] = '\\';
      out[*at + 1] = (char)ch;
    } else {
      out[*at] = ch < 0x20 || ch >= 0x7f ? '?' : (char)ch;
    }
    *at += outlen;
    used += outlen;
    p += len;
  }
  out[*at] = '\0';
}

static void put_raw(char *out, size_t cap, size_t *at, const char *s) {
  size_t n = strlen(s);
  if (*at + n + 1 >= cap)
    return;
  memcpy(out + *at, s, n + 1);
  *at += n;
}

int cli_who_set(struct cli_ctx *c) {
  const struct cli_opts *o = c->o;
  char info[DLOCK_HOLDER_INFO_MAX + 1], host[256] = "?", num[32];
  size_t at = 0;
  const char *user = NULL;
  struct passwd *pw = getpwuid(geteuid());
  if (pw != NULL && pw->pw_name != NULL)
    user = pw->pw_name;
  if (user == NULL)
    user = getenv("USER");
  if (gethostname(host, sizeof host) != 0)
    snprintf(host, sizeof host, "?");
  host[sizeof host - 1] = '\0';
  put_raw(info, sizeof info, &at, "{\"host\":\"");
  put_text(info, sizeof info, &at, host, 64);
  snprintf(num, sizeof num, "\",\"pid\":%ld", (long)getpid());
  put_raw(info, sizeof info, &at, num);
  put_raw(info, sizeof info, &at, ",\"user\":\"");
  put_text(info, sizeof info, &at, user ? user : "?", 32);
  put_raw(info, sizeof info, &at, "\"");
  if (!o->no_cmdline && (o->shell_command != NULL || o->command != NULL)) {
    /* the command line, words joined by spaces, CLI_WHO_CMD_MAX bytes */
    char cmd[CLI_WHO_CMD_MAX + 8];
    size_t cat = 0;
    cmd[0] = '\0';
    if (o->shell_command != NULL) {
      put_text(cmd, sizeof cmd, &cat, o->shell_command, CLI_WHO_CMD_MAX);
    } else {
      for (size_t i = 0; o->command[i] != NULL; i++) {
        if (i > 0)
          put_raw(cmd, sizeof cmd, &cat, " ");
        if (cat >= CLI_WHO_CMD_MAX)
          break;
        put_text(cmd, sizeof cmd, &cat, o->command[i], CLI_WHO_CMD_MAX - cat);
      }
    }
    put_raw(info, sizeof info, &at, ",\"cmd\":\"");
    put_raw(info, sizeof info, &at, cmd);
    put_raw(info, sizeof info, &at, "\"");
  }
  snprintf(num, sizeof num, ",\"since_ms\":%lld}", (long long)cli_wall_ms());
  put_raw(info, sizeof info, &at, num);
  if (dlock_options_set_holder_info(c->dopts, info) != 0) {
    /* a courtesy to others: never a reason not to run */
    cli_msg(c, "cannot record who holds the lock: %s", dlock_last_error());
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------ reading */

/* Reads a JSON string at *p into out (escapes decoded; \u as '?'). */
static bool read_string(const char **p, char *out, size_t cap) {
  const char *s = *p;
  size_t n = 0;
  if (*s != '"')
    return false;
  s++;
  while (*s != '"') {
    char ch = *s;
    if (ch == '\0')
      return false;
    if (ch == '\\') {
      s++;
      switch (*s) {
      case 'n':
      case 't':
      case 'r':
      case 'b':
      case 'f':
        ch = ' ';
        break;
      case 'u':
        for (int k = 1; k <= 4; k++)
          if (s[k] == '\0')
            return false;
        s += 4;
        ch = '?';
        break;
      case '\0':
        return false;
      default:
        ch = *s;
      }
    }
    if (n + 1 < cap)
      out[n++] = ch;
    s++;
  }
  out[n] = '\0';
  *p = s + 1;
  return true;
}

static void copy(char *d, size_t cap, const char *s) {
  size_t n = strlen(s);
  if (n >= cap)
    n = cap - 1;
  memcpy(d, s, n);
  d[n] = '\0';
}

bool cli_who_parse(const char *info, struct cli_who *w) {
  const char *p = info;
  memset(w, 0, sizeof *w);
  w->pid = -1;
  w->since_ms = -1;
  if (info == NULL || *p != '{')
    return false;
  p++;
  for (int fields = 0; fields < 32; fields++) {
    char key[32], val[CLI_WHO_CMD_MAX * 2 + 8];
    while (*p == ' ')
      p++;
    if (*p == '}')
      return w->host[0] != '\0' || w->pid >= 0;
    if (!read_string(&p, key, sizeof key) || *p++ != ':')
      return false;
    if (*p == '"') {
      if (!read_string(&p, val, sizeof val))
        return false;
      if (strcmp(key, "host") == 0)
        copy(w->host, sizeof w->host, val);
      else if (strcmp(key, "user") == 0)
        copy(w->user, sizeof w->user, val);
      else if (strcmp(key, "cmd") == 0)
        copy(w->cmd, sizeof w->cmd, val);
    } else {
      char *end;
      long long v = strtoll(p, &end, 10);
      if (end == p)
        return false;
      p = end;
      if (strcmp(key, "pid") == 0)
        w->pid = v;
      else if (strcmp(key, "since_ms") == 0)
        w->since_ms = v;
    }
    if (*p == ',')
      p++;
    else if (*p != '}')
      return false;
  }
  return false;
}

void cli_who_line(const char *owner, const char *info, char *out, size_t cap) {
  struct cli_who w;
  char a[160], b[160], d[4 * CLI_WHO_CMD_MAX + 8];
  if (cli_who_parse(info, &w)) {
    size_t at;
    cli_printable(w.host, 64, a, sizeof a);
    cli_printable(w.user, 32, b, sizeof b);
    snprintf(out, cap, "pid %lld on %s (user %s", w.pid, a, b);
    at = strlen(out);
    if (w.cmd[0] != '\0' && at < cap) {
      cli_printable(w.cmd, CLI_WHO_CMD_MAX, d, sizeof d);
      snprintf(out + at, cap - at, ", command '%s'", d);
      at = strlen(out);
    }
    if (w.since_ms > 0 && at < cap) {
      int64_t ago = cli_wall_ms() - w.since_ms;
      snprintf(out + at, cap - at, ", started %.1f s ago",
               (double)(ago > 0 ? ago : 0) / 1000.0);
      at = strlen(out);
    }
    if (at < cap)
      snprintf(out + at, cap - at, ")");
    return;
  }
  cli_printable(owner ? owner : "?", 200, a, sizeof a);
  if (info != NULL) {
    cli_printable(info, DLOCK_HOLDER_INFO_MAX, d, sizeof d);
    snprintf(out, cap, "%s (%s)", a, d);
  } else {
    snprintf(out, cap, "%s (no identity recorded)", a);
  }
}

void cli_who_json(FILE *f, const char *info) {
  struct cli_who w;
  if (!cli_who_parse(info, &w)) {
    fputs("null", f);
    return;
  }
  fputs("{\"host\":", f);
  cli_json_string(f, w.host);
  fprintf(f, ",\"pid\":%lld,\"user\":", w.pid);
  cli_json_string(f, w.user);
  fputs(",\"cmd\":", f);
  if (w.cmd[0] != '\0')
    cli_json_string(f, w.cmd);
  else
    fputs("null", f);
  fputs(",\"since_ms\":", f);
  if (w.since_ms > 0)
    fprintf(f, "%lld", w.since_ms);
  else
    fputs("null", f);
  fputc('}', f);
}

void cli_who_print(const char *owner, const char *info) {
  char line[2048];
  if (info == NULL)
    return;
  cli_who_line(owner, info, line, sizeof line);
  printf("  who:   %s\n", line);
}

void cli_who_print_json(const char *info) {
  fputs(",\"info\":", stdout);
  if (info != NULL)
    cli_json_string(stdout, info);
  else
    fputs("null", stdout);
  fputs(",\"who\":", stdout);
  cli_who_json(stdout, info);
}
