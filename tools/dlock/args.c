/*
 * args.c - parses the dlock command line (docs/dlock.1) into struct cli_opts.
 *
 * Design note. A small hand-written parser instead of getopt_long: getopt
 * keeps global state (optind) and GNU getopt permutes argv, while dlock must
 * stop at the lock NAME exactly as flock(1) stops at its file: everything
 * after NAME is the command, except a `-c CMD` right after it. Keeping the
 * parser free of globals, I/O and allocation lets a fuzzer call it in a loop.
 *
 * Grammar: options (short clusters "-nv", "-w5", "-w 5"; long "--wait=5",
 * "--wait 5"; "--" ends them), then NAME, then either "-c CMD" or COMMAND
 * ARG... verbatim. "-c CMD" may also come before NAME. With -M (--multi)
 * several NAMEs come first, up to a "--" that is then required before the
 * command: `dlock -M a b c -- cmd` (a multilock of the names). Every rule
 * that the contract states about combinations is checked here, so main()
 * only deals with the outside world.
 *
 * Several servers. An odd number of -u makes a Redlock (a majority of the
 * servers must grant); with --all, every server must (a multilock across
 * them), and the number may be even. Both serve the exclusive kind only.
 *
 * Kinds. -x (the default) and -F are exclusive, -s is shared; -x and -s, and
 * -F and -s, exclude each other (64). With --status and --force-unlock the
 * same options select which lock is shown or broken. What each kind takes
 * on the server is run.c's business (see its design note).
 *
 * Leases. -l SECS is a fixed lease, never renewed. --session SECS (alias
 * --watchdog, Redisson's word) is the one length that says how long a
 * crashed or silent dlock keeps others out, on every backend: Redis's
 * renewed lease, ZooKeeper's session timeout, etcd's lease TTL; main.c
 * hands it to the library and picks the defaults (CLI_SESSION_*). One
 * option, not one per backend: it means the same thing everywhere (how
 * long a crashed holder blocks others); not -l, which keeps its meaning of
 * a fixed lease; not "watchdog" alone, a Redisson mechanism that ZooKeeper
 * and etcd do not have, where the length is their session's.
 *
 * Messages are one line of printable ASCII: user text is passed through
 * cli_printable() before it is quoted back.
 */
#include "args.h"
#include "url.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <dlock/dlock.h>

enum opt_id {
  O_URL,
  O_ALL,
  O_EXCLUSIVE,
  O_SHARED,
  O_FAIR,
  O_LIMIT,
  O_NONBLOCK,
  O_WAIT,
  O_CONFLICT,
  O_LEASE,
  O_WATCHDOG,
  O_ON_LOST,
  O_KILL_AFTER,
  O_COMMAND,
  O_VERBOSE,
  O_JSON,
  O_NO_CMDLINE,
  O_STATUS,
  O_FORCE_UNLOCK,
  O_PASSWORD_FILE,
  O_SENTINEL_USER,
  O_SENTINEL_PASSWORD_FILE,
  O_TLS,
  O_CACERT,
  O_CACERTDIR,
  O_CERT,
  O_KEY,
  O_SNI,
  O_LAYOUT,
  O_REGISTRY,
  O_INSECURE,
  O_MULTI,
  O_HELP,
  O_VERSION
};

struct optdef {
  const char *lng; /* long name without "--" */
  char shrt;       /* short letter, or 0 */
  bool has_arg;
  enum opt_id id;
};

static const struct optdef optdefs[] = {
    {"url", 'u', true, O_URL},
    {"all", 0, false, O_ALL},
    {"exclusive", 'x', false, O_EXCLUSIVE},
    {"shared", 's', false, O_SHARED},
    {"fair", 'F', false, O_FAIR},
    {"limit", 'N', true, O_LIMIT},
    {"nonblock", 'n', false, O_NONBLOCK},
    {"wait", 'w', true, O_WAIT},
    {"timeout", 0, true, O_WAIT},
    {"conflict-exit-code", 'E', true, O_CONFLICT},
    {"lease", 'l', true, O_LEASE},
    {"session", 0, true, O_WATCHDOG},
    {"watchdog", 0, true, O_WATCHDOG},
    {"on-lost", 0, true, O_ON_LOST},
    {"kill-after", 0, true, O_KILL_AFTER},
    {"command", 'c', true, O_COMMAND},
    {"verbose", 'v', false, O_VERBOSE},
    {"json", 0, false, O_JSON},
    {"no-cmdline", 0, false, O_NO_CMDLINE},
    {"status", 0, false, O_STATUS},
    {"force-unlock", 0, false, O_FORCE_UNLOCK},
    {"password-file", 0, true, O_PASSWORD_FILE},
    {"sentinel-user", 0, true, O_SENTINEL_USER},
    {"sentinel-password-file", 0, true, O_SENTINEL_PASSWORD_FILE},
    {"tls", 0, false, O_TLS},
    {"cacert", 0, true, O_CACERT},
    {"cacertdir", 0, true, O_CACERTDIR},
    {"cert", 0, true, O_CERT},
    {"key", 0, true, O_KEY},
    {"sni", 0, true, O_SNI},
    {"layout", 0, true, O_LAYOUT},
    {"registry", 0, true, O_REGISTRY},
    {"insecure", 0, false, O_INSECURE},
    {"multi", 'M', false, O_MULTI},
    {"help", 'h', false, O_HELP},
    {"version", 'V', false, O_VERSION},
};
#define NOPTDEFS (sizeof optdefs / sizeof optdefs[0])

/* What the options said, before the final consistency checks. */
struct seen {
  bool nonblock, wait, lease, watchdog, status, force_unlock, json;
  bool exclusive, shared, fair, limit, multi;
};

void cli_printable(const char *s, size_t max, char *out, size_t outlen) {
  static const char hex[] = "0123456789abcdef";
  size_t o = 0, i;
  if (outlen == 0)
    return;
  for (i = 0; s[i] != '\0'; i++) {
    unsigned char c = (unsigned char)s[i];
    if (i >= max) {
      if (o + 4 <= outlen) {
        memcpy(out + o, "...", 3);
        o += 3;
      }
      break;
    }
    if (c >= 0x20 && c < 0x7f) {
      if (o + 2 > outlen)
        break;
      out[o++] = (char)c;
    } else {
      if (o + 5 > outlen)
        break;
      out[o++] = '\\';
      out[o++] = 'x';
      out[o++] = hex[c >> 4];
      out[o++] = hex[c & 15];
    }
  }
  out[o] = '\0';
}

/* An argument quoted back in a usage message: URL secrets hidden on the
 * whole argument first (the printable form is cut at `max`, which could cut
 * a URL before the '@' that tells where its secret ends), then printable. */
static void quote_arg(const char *arg, size_t max, char *out, size_t outlen) {
  char buf[1024];
  size_t n = strlen(arg);
  if (n >= sizeof buf) {
    /* longer than any message shows: keep the head, hidden as a whole */
    memcpy(buf, arg, sizeof buf - 1);
    buf[sizeof buf - 1] = '\0';
  } else {
    memcpy(buf, arg, n + 1);
  }
  cli_redact_url_arg(buf);
  if (strstr(buf, "://") != NULL && strchr(buf, '@') == NULL &&
      strlen(buf) > max) {
    /* a URL cut short of its '@' may still hold a secret: do not show it */
    snprintf(out, outlen, "%s", "(a URL)");
    return;
  }
  cli_printable(buf, max, out, outlen);
}

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  if (errlen > 0) {
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    /* a message may quote an argument that is a URL given in the wrong
     * place: never echo its password */
    cli_redact_urls_in_text(err);
  }
  return CLI_EX_USAGE;
}

int cli_parse_secs(const char *s, int64_t *ms) {
  const char *p = s;
  int64_t whole = 0, frac = 0;
  int ndigits = 0, nfrac = 0;
  bool round_up = false, too_big = false;

  if (*p == '-') {
    /* "-1" and "-.5" are negative numbers; "-x" is not a number at all. */
    return ((p[1] >= '0' && p[1] <= '9') || p[1] == '.') ? -2 : -1;
  }
  for (; *p >= '0' && *p <= '9'; p++, ndigits++) {
    if (whole > CLI_SECS_MAX)
      too_big = true;
    else
      whole = whole * 10 + (*p - '0');
  }
  if (*p == '.') {
    for (p++; *p >= '0' && *p <= '9'; p++, ndigits++, nfrac++) {
      if (nfrac < 3)
        frac = frac * 10 + (*p - '0');
      else if (*p != '0')
        round_up = true;
    }
    for (; nfrac < 3; nfrac++)
      frac *= 10;
  }
  if (ndigits == 0 || *p != '\0')
    return -1;
  if (too_big || whole > CLI_SECS_MAX ||
      (whole == CLI_SECS_MAX && (frac > 0 || round_up)))
    return -3;
  *ms = whole * 1000 + frac + (round_up ? 1 : 0);
  return 0;
}

/* Decimal integer in [lo, hi]; false when not one. */
static bool parse_int(const char *s, long lo, long hi, long *out) {
  long v = 0;
  const char *p = s;
  if (*p == '\0')
    return false;
  for (; *p != '\0'; p++) {
    if (*p < '0' || *p > '9')
      return false;
    v = v * 10 + (*p - '0');
    if (v > hi)
      return false;
  }
  if (v < lo)
    return false;
  *out = v;
  return true;
}

/* A seconds option: value checked against a floor (in ms). */
static int opt_secs(const char *spelled, const char *value, int64_t min_ms,
                    const char *min_text, int64_t *out, char *err,
                    size_t errlen) {
  char pv[64];
  int64_t ms = 0;
  int rc = cli_parse_secs(value, &ms);
  quote_arg(value, 40, pv, sizeof pv);
  if (rc == -1)
    return fail(err, errlen,
                "%s: '%s' is not a number of seconds (use e.g. 5 or 0.25)",
                spelled, pv);
  if (rc == -2)
    return fail(err, errlen, "%s: '%s' is negative; give seconds >= 0", spelled,
                pv);
  if (rc == -3)
    return fail(err, errlen, "%s: '%s' is too large (at most %lld seconds)",
                spelled, pv, (long long)CLI_SECS_MAX);
  if (ms < min_ms)
    return fail(err, errlen, "%s: '%s' is too small (%s)", spelled, pv,
                min_text);
  *out = ms;
  return 0;
}

/* Applies one option. `spelled` is how the user wrote it ("-w", "--wait"). */
static int apply(const struct optdef *d, const char *spelled, char *value,
                 struct cli_opts *o, struct seen *sn, char *err,
                 size_t errlen) {
  char pv[64];
  long n;
  switch (d->id) {
  case O_URL:
    if (o->nurls == CLI_URLS_MAX)
      return fail(err, errlen, "%s given more than %d times", spelled,
                  CLI_URLS_MAX);
    if (value[0] == '\0')
      return fail(err, errlen, "%s: empty URL", spelled);
    if (o->url == NULL)
      o->url = value;
    o->urls[o->nurls++] = value;
    return 0;
  case O_ALL:
    o->all = true;
    return 0;
  case O_MULTI:
    sn->multi = true;
    return 0;
  case O_EXCLUSIVE:
    sn->exclusive = true;
    return 0;
  case O_SHARED:
    sn->shared = true;
    return 0;
  case O_FAIR:
    sn->fair = true;
    return 0;
  case O_LIMIT:
    if (!parse_int(value, 1, CLI_LIMIT_MAX, &n)) {
      quote_arg(value, 40, pv, sizeof pv);
      return fail(err, errlen,
                  "%s: '%s' is not a number of holders (1..%d)", spelled, pv,
                  CLI_LIMIT_MAX);
    }
    sn->limit = true;
    o->limit = n;
    return 0;
  case O_NONBLOCK:
    sn->nonblock = true;
    o->wait_ms = 0;
    return 0;
  case O_WAIT:
    sn->wait = true;
    return opt_secs(spelled, value, 0, "", &o->wait_ms, err, errlen);
  case O_CONFLICT:
    if (!parse_int(value, 0, 255, &n)) {
      quote_arg(value, 40, pv, sizeof pv);
      return fail(err, errlen, "%s: '%s' is not an exit status (0..255)",
                  spelled, pv);
    }
    o->conflict_exit = (int)n;
    return 0;
  case O_LEASE:
    sn->lease = true;
    return opt_secs(spelled, value, 1, "the lease must be at least 0.001 s",
                    &o->lease_ms, err, errlen);
  case O_WATCHDOG:
    sn->watchdog = true;
    return opt_secs(spelled, value, 3, "the session needs at least 0.003 s",
                    &o->watchdog_ms, err, errlen);
  case O_ON_LOST:
    if (strcmp(value, "term") == 0)
      o->on_lost = CLI_LOST_TERM;
    else if (strcmp(value, "kill") == 0)
      o->on_lost = CLI_LOST_KILL;
    else if (strcmp(value, "ignore") == 0)
      o->on_lost = CLI_LOST_IGNORE;
    else {
      quote_arg(value, 40, pv, sizeof pv);
      return fail(err, errlen, "%s: '%s' is not one of term, kill, ignore",
                  spelled, pv);
    }
    return 0;
  case O_KILL_AFTER:
    return opt_secs(spelled, value, 0, "", &o->kill_after_ms, err, errlen);
  case O_COMMAND:
    if (o->shell_command != NULL)
      return fail(err, errlen, "%s given twice", spelled);
    o->shell_command = value;
    return 0;
  case O_VERBOSE:
    if (o->verbose < 100)
      o->verbose++;
    return 0;
  case O_JSON:
    sn->json = true;
    return 0;
  case O_NO_CMDLINE:
    o->no_cmdline = true;
    return 0;
  case O_STATUS:
    sn->status = true;
    return 0;
  case O_FORCE_UNLOCK:
    sn->force_unlock = true;
    return 0;
  case O_PASSWORD_FILE:
    if (value[0] == '\0')
      return fail(err, errlen, "%s: empty file name", spelled);
    o->password_file = value;
    return 0;
  case O_SENTINEL_USER:
    if (value[0] == '\0')
      return fail(err, errlen, "%s: empty user name", spelled);
    o->sentinel_user = value;
    return 0;
  case O_SENTINEL_PASSWORD_FILE:
    if (value[0] == '\0')
      return fail(err, errlen, "%s: empty file name", spelled);
    o->sentinel_password_file = value;
    return 0;
  case O_TLS:
    o->tls = true;
    return 0;
  case O_INSECURE:
    o->tls_insecure = true;
    return 0;
  case O_CACERT:
  case O_CACERTDIR:
  case O_CERT:
  case O_KEY:
  case O_SNI: {
    const char **slot = d->id == O_CACERT      ? &o->tls_cacert
                        : d->id == O_CACERTDIR ? &o->tls_cacertdir
                        : d->id == O_CERT      ? &o->tls_cert
                        : d->id == O_KEY       ? &o->tls_key
                                               : &o->tls_sni;
    if (value[0] == '\0')
      return fail(err, errlen, "%s: empty value", spelled);
    if (*slot != NULL)
      return fail(err, errlen, "%s given twice", spelled);
    *slot = value;
    return 0;
  }
  case O_LAYOUT:
    if (strcmp(value, "redisson") != 0 && strcmp(value, "spring") != 0)
      return fail(err, errlen,
                  "%s: unknown layout (expected redisson or spring)", spelled);
    if (o->layout != NULL)
      return fail(err, errlen, "%s given twice", spelled);
    o->layout = value;
    return 0;
  case O_REGISTRY:
    if (value[0] == '\0')
      return fail(err, errlen, "%s: empty registry key", spelled);
    if (o->registry != NULL)
      return fail(err, errlen, "%s given twice", spelled);
    o->registry = value;
    return 0;
  case O_HELP:
    o->mode = CLI_MODE_HELP;
    return 0;
  case O_VERSION:
    o->mode = CLI_MODE_VERSION;
    return 0;
  }
  return fail(err, errlen, "internal error: unhandled option");
}

static const struct optdef *find_long(const char *name, size_t len) {
  size_t k;
  for (k = 0; k < NOPTDEFS; k++)
    if (strlen(optdefs[k].lng) == len && memcmp(optdefs[k].lng, name, len) == 0)
      return &optdefs[k];
  return NULL;
}

static const struct optdef *find_short(char c) {
  size_t k;
  for (k = 0; k < NOPTDEFS; k++)
    if (optdefs[k].shrt != 0 && optdefs[k].shrt == c)
      return &optdefs[k];
  return NULL;
}

/* One "--name[=value]" argument at argv[*i]; advances *i past its value. */
static int parse_long(int argc, char **argv, int *i, struct cli_opts *o,
                      struct seen *sn, char *err, size_t errlen) {
  char *a = argv[*i] + 2;
  char *eq = strchr(a, '=');
  size_t len = eq ? (size_t)(eq - a) : strlen(a);
  const struct optdef *d = find_long(a, len);
  char spelled[48], pv[64];
  char *value = NULL;

  if (d == NULL) {
    quote_arg(argv[*i], 40, pv, sizeof pv);
    return fail(err, errlen, "unknown option '%s' (see dlock --help)", pv);
  }
  snprintf(spelled, sizeof spelled, "--%s", d->lng);
  if (d->has_arg) {
    if (eq != NULL)
      value = eq + 1;
    else if (*i + 1 < argc)
      value = argv[++*i];
    else
      return fail(err, errlen, "%s needs a value", spelled);
  } else if (eq != NULL) {
    return fail(err, errlen, "%s takes no value", spelled);
  }
  return apply(d, spelled, value, o, sn, err, errlen);
}

/* One cluster of short options ("-nv", "-w5", "-w 5") at argv[*i]. */
static int parse_short(int argc, char **argv, int *i, struct cli_opts *o,
                       struct seen *sn, char *err, size_t errlen) {
  char *a = argv[*i];
  size_t j;
  for (j = 1; a[j] != '\0'; j++) {
    const struct optdef *d = find_short(a[j]);
    char spelled[3] = {'-', a[j], '\0'};
    char *value = NULL;
    int rc;
    if (d == NULL) {
      char pc[8];
      char one[2] = {a[j], '\0'};
      cli_printable(one, 1, pc, sizeof pc);
      return fail(err, errlen, "unknown option '-%s' (see dlock --help)", pc);
    }
    if (d->has_arg) {
      if (a[j + 1] != '\0')
        value = &a[j + 1];
      else if (*i + 1 < argc)
        value = argv[++*i];
      else
        return fail(err, errlen, "%s needs a value", spelled);
    }
    rc = apply(d, spelled, value, o, sn, err, errlen);
    if (rc != 0 || d->has_arg || o->mode == CLI_MODE_HELP ||
        o->mode == CLI_MODE_VERSION)
      return rc;
  }
  return 0;
}

static bool is_dash_c(const char *a) {
  return strcmp(a, "-c") == 0 || strcmp(a, "--command") == 0;
}

int cli_parse(int argc, char **argv, struct cli_opts *o, char *err,
              size_t errlen) {
  struct seen sn;
  int i = 1, rc;

  memset(o, 0, sizeof *o);
  memset(&sn, 0, sizeof sn);
  o->mode = CLI_MODE_RUN;
  o->wait_ms = DLOCK_WAIT_FOREVER;
  o->lease_ms = DLOCK_LEASE_WATCHDOG;
  o->kill_after_ms = 10000;
  o->conflict_exit = 1;
  o->on_lost = CLI_LOST_TERM;
  if (errlen > 0)
    err[0] = '\0';

  /* Options, up to NAME. */
  while (i < argc && argv[i] != NULL) {
    char *a = argv[i];
    if (a[0] != '-' || a[1] == '\0')
      break; /* NAME ("-" alone is a name) */
    if (strcmp(a, "--") == 0) {
      i++;
      break;
    }
    if (a[1] == '-')
      rc = parse_long(argc, argv, &i, o, &sn, err, errlen);
    else
      rc = parse_short(argc, argv, &i, o, &sn, err, errlen);
    if (rc != 0)
      return rc;
    if (o->mode == CLI_MODE_HELP || o->mode == CLI_MODE_VERSION)
      return 0;
    i++;
  }

  if (i >= argc || argv[i] == NULL)
    return fail(err, errlen,
                "missing lock NAME (usage: dlock [options] NAME [COMMAND "
                "[ARG...]]; see dlock --help)");
  o->names = &argv[i];
  o->nnames = 1;
  if (sn.multi) /* NAME... up to "--" (or the end) */
    while (i + o->nnames < argc && argv[i + o->nnames] != NULL &&
           strcmp(argv[i + o->nnames], "--") != 0)
      o->nnames++;
  for (int k = 0; k < o->nnames; k++) {
    const char *nm = argv[i + k];
    if (nm[0] == '\0')
      return fail(err, errlen, "the lock NAME must not be empty");
    if (strlen(nm) > CLI_NAME_MAX)
      return fail(err, errlen, "the lock NAME is longer than %d bytes",
                  CLI_NAME_MAX);
    for (int j = 0; j < k; j++)
      if (strcmp(argv[i + j], nm) == 0)
        return fail(err, errlen, "-M: a NAME is given twice");
  }
  o->name = argv[i];
  i += o->nnames;
  if (sn.multi && i < argc && argv[i] != NULL)
    i++; /* the "--" that ends the names */

  /* After NAME: "-c CMD", or COMMAND ARG... verbatim. */
  if (i < argc && argv[i] != NULL && is_dash_c(argv[i])) {
    if (o->shell_command != NULL)
      return fail(err, errlen, "-c given twice");
    if (i + 1 >= argc || argv[i + 1] == NULL)
      return fail(err, errlen, "-c needs a shell command");
    if (i + 2 < argc && argv[i + 2] != NULL)
      return fail(err, errlen,
                  "-c takes one shell command string; put its arguments "
                  "inside the quotes");
    o->shell_command = argv[i + 1];
  } else if (i < argc && argv[i] != NULL) {
    o->command = &argv[i];
  }

  if (sn.status && sn.force_unlock)
    return fail(err, errlen, "--status and --force-unlock exclude each other");
  if ((sn.status || sn.force_unlock) &&
      (o->command != NULL || o->shell_command != NULL))
    return fail(err, errlen, "%s takes a lock NAME only, no command",
                sn.status ? "--status" : "--force-unlock");
  if (sn.json && !sn.status)
    return fail(err, errlen, "--json goes with --status");
  if (sn.shared && sn.fair)
    return fail(err, errlen,
                "-F and -s exclude each other: a fair lock is exclusive (use "
                "-F for an exclusive lock served in arrival order, -s for a "
                "shared one)");
  if (sn.shared && sn.exclusive)
    return fail(err, errlen, "-x and -s exclude each other");
  if (sn.limit && (sn.shared || sn.fair || sn.exclusive))
    return fail(err, errlen,
                "-N takes a permit of the semaphore NAME; it does not go with "
                "%s",
                sn.shared ? "-s" : sn.fair ? "-F" : "-x");
  if (sn.nonblock && sn.wait)
    return fail(err, errlen, "-n and -w exclude each other");
  if (sn.lease && sn.watchdog)
    return fail(err, errlen,
                "-l and --session (--watchdog) exclude each other (a fixed "
                "lease is never renewed)");
  if (o->command != NULL && o->shell_command != NULL)
    return fail(err, errlen,
                "give either -c 'SHELL COMMAND' or COMMAND [ARG...], not both");
  if ((o->tls_cert != NULL) != (o->tls_key != NULL))
    return fail(err, errlen,
                "%s needs %s: a client certificate goes with its key",
                o->tls_cert ? "--cert" : "--key",
                o->tls_cert ? "--key" : "--cert");

  if (o->all && o->nurls < 2)
    return fail(err, errlen,
                "--all goes with several -u (every server must grant)");
  if (o->nurls > 1 && !o->all && o->nurls % 2 == 0)
    return fail(err, errlen,
                "%d -u servers: a Redlock needs an odd number (a majority of "
                "an even number tolerates no more failures than one server "
                "fewer); add or drop one, or give --all",
                o->nurls);
  if ((o->nurls > 1 || sn.multi) && (sn.shared || sn.fair || sn.limit) &&
      !sn.status && !sn.force_unlock)
    return fail(err, errlen,
                "%s: several servers and -M serve the exclusive kind only",
                sn.shared ? "-s" : sn.fair ? "-F" : "-N");
  if (sn.multi && (sn.status || sn.force_unlock))
    return fail(err, errlen, "%s takes one NAME: give it once per name",
                sn.status ? "--status" : "--force-unlock");
  o->json = sn.json;
  o->kind = sn.limit    ? CLI_KIND_LIMIT
            : sn.shared ? CLI_KIND_SHARED
            : sn.fair   ? CLI_KIND_FAIR
                        : CLI_KIND_EXCLUSIVE;
  if (sn.status)
    o->mode = CLI_MODE_STATUS;
  else if (sn.force_unlock)
    o->mode = CLI_MODE_FORCE_UNLOCK;
  else if (o->command != NULL || o->shell_command != NULL)
    o->mode = CLI_MODE_RUN;
  else
    o->mode = CLI_MODE_HOLD;
  return 0;
}
