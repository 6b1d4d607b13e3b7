/*
 * main.c - the dlock command: flock(1) for a fleet (docs/dlock.1 is the contract).
 *
 * Design note. main() turns argv and the environment into a cli_ctx and
 * hands it to one of three modes: run/hold (run.c), status/force-unlock
 * (status.c). Parsing lives in args.c (pure, fuzzable); this file does the
 * parts that touch the outside world before any thread exists: the backend
 * URL ($DLOCK_URL, default redis://127.0.0.1:6379), the password (URL, or
 * --password-file, or $DLOCK_PASSWORD), scrubbing the URL's password out of
 * argv in place so `ps` cannot show it, and the library options. Secrets
 * never reach a message: URLs are shown with their password as "***"
 * (url.c, by its position in the URL), the library's details never hold
 * one, and the password variables are removed from the environment the
 * command gets (run.c).
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dlock/dlock.h>

#include "args.h"
#include "cli.h"
#include "url.h"

#define DEFAULT_URL "redis://127.0.0.1:6379"
#define PASSWORD_MAX 4096

static const char usage_text[] =
    "Usage: dlock [options] NAME COMMAND [ARG...]\n"
    "       dlock [options] NAME -c 'SHELL COMMAND'\n"
    "       dlock [options] NAME                 hold until SIGINT/SIGTERM\n"
    "       dlock [options] --status NAME        who holds it (exit 0 held, "
    "1 free)\n"
    "       dlock [options] --force-unlock NAME  administrator's release\n"
    "\n"
    "Run a command while holding a distributed lock on Redis, ZooKeeper or\n"
    "etcd, so that it runs on one machine at a time. The URL picks the\n"
    "backend; each keeps the layout of the client its users already run, so\n"
    "they and dlock exclude each other on the same NAME: Redisson's RLock\n"
    "(Redis), Curator's InterProcessMutex (ZooKeeper), etcdctl lock (etcd).\n"
    "\n"
    "Options:\n"
    "  -u, --url URL            backend (default: $DLOCK_URL, else\n"
    "                           " DEFAULT_URL "); repeat it for\n"
    "                           a Redlock over an odd number of independent\n"
    "                           masters (a majority must grant; -x only)\n"
    "      --all                with several -u: every server must grant\n"
    "                           (a multilock across them)\n"
    "  -M, --multi              several NAMEs, taken all or nothing:\n"
    "                           dlock -M NAME1 NAME2 ... -- COMMAND (-x only)\n"
    "  -x, --exclusive          exclusive lock (the default), with a fencing\n"
    "                           token in DLOCK_TOKEN\n"
    "  -s, --shared             shared lock: any number of -s holders at "
    "once;\n"
    "                           they exclude every exclusive (-x, -F) holder\n"
    "                           of NAME and are excluded by it\n"
    "  -F, --fair               exclusive lock served in arrival order (no\n"
    "                           DLOCK_TOKEN); not with -s\n"
    "  -N, --limit N            semaphore: at most N holders at once; a\n"
    "                           crashed holder's permit comes back when its\n"
    "                           lease runs out (no DLOCK_TOKEN); not with\n"
    "                           -x, -s or -F\n"
    "  -n, --nonblock           fail at once if the lock is held\n"
    "  -w, --wait SECS          wait at most SECS (decimals allowed; alias\n"
    "      --timeout SECS       --timeout); default: wait forever\n"
    "  -E, --conflict-exit-code N\n"
    "                           exit status when -n or -w gives up (default "
    "1)\n"
    "  -l, --lease SECS         fixed lease, never renewed: the lock expires\n"
    "                           after SECS even if the command still runs\n"
    "      --session SECS       how long a crashed or silent dlock keeps the\n"
    "      --watchdog SECS      lock from others (alias, Redisson's word):\n"
    "                           Redis's renewed lease (default 30, renewed\n"
    "                           every third); ZooKeeper's session timeout and\n"
    "                           etcd's lease TTL (default 10)\n"
    "      --on-lost ACTION     if the lock is lost while the command runs:\n"
    "                           term (default: SIGTERM, then SIGKILL after\n"
    "                           --kill-after), kill, or ignore\n"
    "      --kill-after SECS    grace between SIGTERM and SIGKILL (default "
    "10)\n"
    "  -c, --command CMD        run CMD with /bin/sh -c\n"
    "  -v, --verbose            report time waited, who holds the lock and\n"
    "                           how many wait ahead (every 10 s on a\n"
    "                           terminal, else when it changes), owner,\n"
    "                           renewals, loss (-vv: library debug messages\n"
    "                           too)\n"
    "      --no-cmdline         leave the command line out of the holder\n"
    "                           identity stored beside the lock (host, pid,\n"
    "                           user and start time stay; see --status)\n"
    "      --status             show the lock: kind, holders, lease left,\n"
    "                           waiters, token; with -s the shared lock's\n"
    "                           view, with -F the fair queue and deadlines,\n"
    "                           with -N the permits free and in use\n"
    "      --json               with --status: one JSON object\n"
    "      --force-unlock       delete the lock whoever holds it (with -s:\n"
    "                           only the shared lock; with -F: the fair one;\n"
    "                           with -N: the semaphore)\n"
    "      --password-file FILE read the password from FILE's first line\n"
    "      --sentinel-user USER redis-sentinel://: the sentinels' own ACL "
    "user\n"
    "      --sentinel-password-file FILE\n"
    "                           redis-sentinel://: the sentinels' own\n"
    "                           password, from FILE's first line (the URL's\n"
    "                           is the data nodes')\n"
    "      --tls                TLS for a redis:// or etcd:// URL too\n"
    "                           (rediss:// and etcds:// URLs always use\n"
    "                           TLS); the server's certificate\n"
    "                           and host name are verified\n"
    "      --cacert FILE        trust the CAs in FILE (PEM) instead of the\n"
    "                           system's store\n"
    "      --cacertdir DIR      trust the CAs in DIR (openssl rehash)\n"
    "      --cert FILE          client certificate (PEM), with --key, for\n"
    "                           servers that verify clients\n"
    "      --key FILE           its private key (PEM, not encrypted)\n"
    "      --sni NAME           server name to send and verify instead of\n"
    "                           the URL's host\n"
    "      --insecure           FOR TESTS ONLY: do not verify the server's\n"
    "                           certificate or name\n"
    "      --layout NAME        Redis key layout: redisson (the default) or\n"
    "                           spring (Spring Integration's\n"
    "                           RedisLockRegistry: -x only, no DLOCK_TOKEN)\n"
    "      --registry KEY       the spring layout's registry key (the\n"
    "                           RedisLockRegistry's registryKey); or\n"
    "                           ?layout=spring&registry=KEY in the URL\n"
    "  -h, --help               this text\n"
    "  -V, --version            version of dlock and libdlock\n"
    "\n"
    "Kinds on the server: an exclusive holder takes the fenced lock NAME (the\n"
    "RLock hash NAME plus its token), a -F holder the fair lock NAME, and "
    "both\n"
    "then the write side of the read-write lock NAME:dlock-rw, whose read "
    "side\n"
    "-s takes. So -s, -x and -F holders of one NAME all exclude each other as\n"
    "flock(1)'s -s and -x do, and plain dlock still excludes library and\n"
    "Redisson users of the lock NAME. Library and Redisson users who want to\n"
    "share with -s must use the read-write lock NAME:dlock-rw (a read-write\n"
    "lock on the key NAME itself would break the lock there). NAME is at most\n"
    "1015 bytes.\n"
    "\n"
    "-N takes one permit of the permit semaphore NAME (Redisson's\n"
    "RPermitExpirableSemaphore layout), created with N permits by the first\n"
    "holder; a holder giving another N is refused (exit 64) until\n"
    "'dlock --force-unlock -N N NAME' deletes the semaphore.\n"
    "\n"
    "URLs (the scheme picks the backend):\n"
    "  redis://[[user]:password@]host[:port][/db]    (port 6379, db 0)\n"
    "  rediss://...                                  (the same over TLS)\n"
    "  unix:///path/redis.sock[?db=N]\n"
    "  redis-sentinel://[[user]:password@]host:port[,host:port...]/master"
    "[/db]\n"
    "      the master the sentinels name, followed across failovers\n"
    "  redis-cluster://[[user]:password@]host:port[,host:port...]\n"
    "      seeds of a Redis Cluster; each NAME goes to its slot's master\n"
    "  zookeeper://host[:port][,host[:port]...][/chroot][?base=/path], zk://\n"
    "      ZooKeeper (port 2181); NAME is a path under base (/dlock/locks)\n"
    "      unless it starts with '/'; no -l\n"
    "  etcd://[user:password@]host[:port][,host[:port]...], etcds:// (TLS)\n"
    "      etcd (port 2379); the command also gets ETCD_LOCK_KEY and\n"
    "      ETCD_LOCK_REV; no -N, and -l has no effect\n"
    "  postgres://[user[:password]@]host[:port][/db][?param=...], "
    "postgresql://\n"
    "      PostgreSQL 14+ (libpq's URI): the advisory lock on\n"
    "      hashtextextended(NAME, 0); -N: slot locks\n"
    "      hashtextextended(NAME, i)\n"
    "  mysql://[user[:password]@]host[:port][/db][?socket=/path], mariadb://\n"
    "      MySQL/MariaDB: GET_LOCK(NAME) (names over 64 characters mapped,\n"
    "      docs/MYSQL.md); -N: slot locks NAME#permit#i; no -r/-w\n"
    "Redis holds have leases that dlock renews; ZooKeeper and etcd holds\n"
    "last as long as dlock's session, which ends --session SECS (default\n"
    "10) after dlock falls silent. man dlock says what each backend\n"
    "promises.\n"
    "A password is never printed and is hidden from ps.\n"
    "\n"
    "Environment:\n"
    "  DLOCK_URL       backend when -u is not given\n"
    "  DLOCK_PASSWORD  password when neither the URL nor --password-file has "
    "one\n"
    "  DLOCK_SENTINEL_PASSWORD  the sentinels' password when\n"
    "                  --sentinel-password-file is not given\n"
    "  The command gets DLOCK_NAME (the lock's name) and, for an exclusive\n"
    "  lock (-x, the default), DLOCK_TOKEN: a decimal fencing token greater\n"
    "  than every earlier grant's of NAME (-v prints it). -s and -F holders\n"
    "  get no DLOCK_TOKEN (an inherited one is removed).\n"
    "\n"
    "SIGINT, SIGTERM and SIGHUP are forwarded to the command's process\n"
    "group; the lock is released after it exits. The command dies with dlock.\n"
    "\n"
    "Exit status: the command's (128+S if killed by signal S); 1 (or -E) when\n"
    "-n/-w gave up; 64 usage error or a kind the backend does not offer;\n"
    "69 backend unreachable, auth refused or timed out; 70 internal error;\n"
    "75 the lock was lost while the command ran (whatever --on-lost), or the\n"
    "grant lapsed before the command could start (dlock was stopped).\n";

/* The TLS flags into the library's options; 0, or -1 after a message. */
static int set_tls_options(struct cli_ctx *c, const struct cli_opts *o) {
  const char *flag = NULL;
  if (o->tls && dlock_options_set_tls(c->dopts, true) != 0)
    flag = "--tls";
  else if ((o->tls_cacert || o->tls_cacertdir) &&
           dlock_options_set_tls_ca(c->dopts, o->tls_cacert,
                                    o->tls_cacertdir) != 0)
    flag = o->tls_cacert ? "--cacert" : "--cacertdir";
  else if (o->tls_cert &&
           dlock_options_set_tls_cert(c->dopts, o->tls_cert, o->tls_key) != 0)
    flag = "--cert";
  else if (o->tls_sni && dlock_options_set_tls_sni(c->dopts, o->tls_sni) != 0)
    flag = "--sni";
  else if (o->tls_insecure &&
           dlock_options_set_tls_insecure(c->dopts, true) != 0)
    flag = "--insecure";
  if (flag == NULL)
    return 0;
  char detail[300];
  cli_printable(dlock_last_error(), 250, detail, sizeof detail);
  cli_msg(c, "%s: %s", flag, detail);
  return -1;
}

static void on_log(void *userdata, dlock_log_level_t level, const char *msg) {
  static const char *const names[] = {"error", "warn", "info", "debug"};
  const char *ln = (unsigned)level < 4 ? names[level] : "log";
  cli_msg(userdata, "[%s] %s", ln, msg);
}

/* First line of FILE (without CR/LF) into a fresh string, or NULL with
 * errno set (EINVAL for an empty password). */
static char *read_password_file(const char *path) {
  char *buf = malloc(PASSWORD_MAX + 1);
  size_t n = 0, i;
  int fd;
  if (buf == NULL)
    return NULL;
  fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    free(buf);
    return NULL;
  }
  while (n < PASSWORD_MAX) {
    ssize_t k = read(fd, buf + n, PASSWORD_MAX - n);
    if (k < 0 && errno == EINTR)
      continue;
    if (k < 0) {
      int e = errno;
      close(fd);
      free(buf);
      errno = e;
      return NULL;
    }
    if (k == 0)
      break;
    n += (size_t)k;
    if (memchr(buf, '\n', n) != NULL)
      break;
  }
  close(fd);
  for (i = 0; i < n && buf[i] != '\n' && buf[i] != '\0'; i++)
    ;
  if (i > 0 && buf[i - 1] == '\r')
    i--;
  buf[i] = '\0';
  if (i == 0) {
    free(buf);
    errno = EINVAL;
    return NULL;
  }
  return buf;
}

/* redis-sentinel://: the sentinels' own user and password
 * (--sentinel-user, --sentinel-password-file or $DLOCK_SENTINEL_PASSWORD);
 * the flags are refused on other URLs. *pw_out: the password read from the
 * file (the caller frees it). */
static int set_sentinel_credentials(struct cli_ctx *c,
                                    const struct cli_opts *o,
                                    const char *url, char **pw_out) {
  const char *env_pw = getenv("DLOCK_SENTINEL_PASSWORD");
  const char *pw = NULL;
  bool sentinel = strncmp(url, "redis-sentinel://", 17) == 0;
  if (!sentinel) {
    if (o->sentinel_user || o->sentinel_password_file) {
      cli_msg(c, "%s: only for redis-sentinel:// URLs",
              o->sentinel_user ? "--sentinel-user"
                               : "--sentinel-password-file");
      return -1;
    }
    return 0;
  }
  if (o->sentinel_password_file) {
    char pf[160];
    cli_printable(o->sentinel_password_file, 120, pf, sizeof pf);
    if ((*pw_out = read_password_file(o->sentinel_password_file)) == NULL) {
      cli_msg(c, "--sentinel-password-file %s: %s", pf,
              errno == EINVAL ? "empty first line" : strerror(errno));
      return -1;
    }
    pw = *pw_out;
  } else if (env_pw != NULL && env_pw[0] != '\0') {
    pw = env_pw;
  }
  if ((o->sentinel_user || pw) &&
      dlock_options_set_sentinel_credentials(c->dopts, o->sentinel_user,
                                             pw) != 0) {
    cli_msg(c, "the library refused the sentinels' credentials: %s",
            dlock_last_error());
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  struct cli_opts o;
  struct cli_ctx c;
  char err[512];
  char *url = NULL, *shown = NULL;
  char *file_pw = NULL, *user = NULL, *sentinel_pw = NULL;
  const char *env_pw = NULL, *pw = NULL, *env_url;
  size_t off, len;
  int rc = 0;

  if (cli_parse(argc, argv, &o, err, sizeof err) != 0) {
    fprintf(stderr, "dlock: %s\n", err);
    return CLI_EX_USAGE;
  }
  if (o.mode == CLI_MODE_HELP) {
    fputs(usage_text, stdout);
    return fflush(stdout) == 0 ? 0 : CLI_EX_SOFTWARE;
  }
  if (o.mode == CLI_MODE_VERSION) {
    printf("dlock %d.%d.%d (libdlock %s)\n", DLOCK_VERSION_MAJOR,
           DLOCK_VERSION_MINOR, DLOCK_VERSION_PATCH, dlock_version_string());
    return fflush(stdout) == 0 ? 0 : CLI_EX_SOFTWARE;
  }

  memset(&c, 0, sizeof c);
  c.o = &o;
  cli_printable(o.name, 120, c.name_shown, sizeof c.name_shown);
  c.shared_name = malloc(strlen(o.name) + sizeof CLI_SHARED_SUFFIX);
  if (c.shared_name == NULL) {
    fprintf(stderr, "dlock: out of memory\n");
    return CLI_EX_SOFTWARE;
  }
  strcpy(c.shared_name, o.name);
  strcat(c.shared_name, CLI_SHARED_SUFFIX);

  /* The backend, and its secret out of argv. */
  env_url = getenv("DLOCK_URL");
  url = strdup(o.url != NULL                           ? o.url
               : env_url != NULL && env_url[0] != '\0' ? env_url
                                                       : DEFAULT_URL);
  if (url == NULL) {
    fprintf(stderr, "dlock: out of memory\n");
    rc = CLI_EX_SOFTWARE;
    goto out;
  }
  if (o.url != NULL && cli_url_secret_span(o.url, &off, &len))
    memset(o.url + off, '*', len);
  shown = cli_url_redact(url);
  if (shown == NULL) {
    fprintf(stderr, "dlock: out of memory\n");
    rc = CLI_EX_SOFTWARE;
    goto out;
  }
  c.url = url;
  c.url_shown = shown;
  c.urls[0] = url;
  c.urls_shown[0] = shown;
  c.nurls = 1;
  /* More -u: a Redlock's nodes, or --all's servers; their secrets go out
   * of argv too */
  for (int k = 1; k < o.nurls; k++) {
    char *u = strdup(o.urls[k]);
    char *sh = u ? cli_url_redact(u) : NULL;
    if (sh == NULL) {
      free(u);
      fprintf(stderr, "dlock: out of memory\n");
      rc = CLI_EX_SOFTWARE;
      goto out;
    }
    if (cli_url_secret_span(o.urls[k], &off, &len))
      memset(o.urls[k] + off, '*', len);
    c.urls[c.nurls] = u;
    c.urls_shown[c.nurls++] = sh;
  }

  if (!cli_url_is_tls(url) && !o.tls &&
      (o.tls_cacert || o.tls_cacertdir || o.tls_cert || o.tls_sni ||
       o.tls_insecure)) {
    cli_msg(&c, "%s is a TLS option, but TLS is off: use a rediss:// or "
                "etcds:// URL, or --tls",
            o.tls_cacert      ? "--cacert"
            : o.tls_cacertdir ? "--cacertdir"
            : o.tls_cert      ? "--cert"
            : o.tls_sni       ? "--sni"
                              : "--insecure");
    rc = CLI_EX_USAGE;
    goto out;
  }

  /* The password: the URL's, or --password-file, or $DLOCK_PASSWORD. */
  env_pw = getenv("DLOCK_PASSWORD");
  if (o.password_file != NULL) {
    char pf[160];
    cli_printable(o.password_file, 120, pf, sizeof pf);
    if (cli_url_has_password(url)) {
      cli_msg(&c, "the URL has a password and --password-file gives "
                  "another: keep one");
      rc = CLI_EX_USAGE;
      goto out;
    }
    file_pw = read_password_file(o.password_file);
    if (file_pw == NULL) {
      cli_msg(&c, "--password-file %s: %s", pf,
              errno == EINVAL ? "empty first line" : strerror(errno));
      rc = CLI_EX_USAGE;
      goto out;
    }
    pw = file_pw;
  } else if (!cli_url_has_password(url) && env_pw != NULL &&
             env_pw[0] != '\0') {
    pw = env_pw;
  }

  /* Library options. */
  if (dlock_options_new(&c.dopts) != 0) {
    cli_msg(&c, "out of memory");
    rc = CLI_EX_SOFTWARE;
    goto out;
  }
  /* --session: Redis's renewed lease, ZooKeeper's session, etcd's lease */
  if (dlock_options_set_watchdog_timeout(
          c.dopts, o.watchdog_ms > 0 ? o.watchdog_ms : CLI_SESSION_REDIS_MS) ||
      dlock_options_set_session_timeout(
          c.dopts, o.watchdog_ms > 0 ? o.watchdog_ms : CLI_SESSION_MS)) {
    cli_msg(&c, "--session: the library refused %lld ms",
            (long long)o.watchdog_ms);
    rc = CLI_EX_USAGE;
    goto out;
  }
  if (pw != NULL) {
    /* "redis://alice@host" + a password from elsewhere: the user goes with
     * the password through the options, the URL loses its userinfo. */
    char *bare = cli_url_without_userinfo(url);
    user = cli_url_user(url);
    if (bare == NULL) {
      cli_msg(&c, "out of memory");
      rc = CLI_EX_SOFTWARE;
      goto out;
    }
    free(url);
    c.url = c.urls[0] = url = bare;
    if (dlock_options_set_credentials(c.dopts, user, pw) != 0) {
      cli_msg(&c, "the library refused the credentials");
      rc = CLI_EX_USAGE;
      goto out;
    }
  }
  if (set_sentinel_credentials(&c, &o, url, &sentinel_pw) != 0) {
    rc = CLI_EX_USAGE;
    goto out;
  }
  if (set_tls_options(&c, &o) != 0) {
    rc = CLI_EX_USAGE;
    goto out;
  }
  if ((o.layout && dlock_options_set_layout(c.dopts, o.layout) != 0) ||
      (o.registry &&
       dlock_options_set_spring_registry(c.dopts, o.registry) != 0)) {
    cli_msg(&c, "%s", dlock_last_error());
    rc = CLI_EX_USAGE;
    goto out;
  }

  dlock_options_set_client_name(c.dopts, "dlock-cli");
  if (o.verbose > 0)
    dlock_options_set_log_callback(
        c.dopts, on_log, &c, o.verbose > 1 ? DLOCK_LOG_DEBUG : DLOCK_LOG_INFO);

  switch (o.mode) {
  case CLI_MODE_STATUS:
    rc = c.o->kind == CLI_KIND_LIMIT ? cli_limit_status(&c) : cli_status(&c);
    break;
  case CLI_MODE_FORCE_UNLOCK:
    rc = c.o->kind == CLI_KIND_LIMIT ? cli_limit_force_unlock(&c)
                                     : cli_force_unlock(&c);
    break;
  default:
    rc = cli_run(&c);
    break;
  }

out:
  for (int k = 1; k < c.nurls; k++) {
    free((char *)c.urls[k]);
    free((char *)c.urls_shown[k]);
  }
  dlock_options_free(c.dopts);
  free(user);
  free(file_pw);
  free(sentinel_pw);
  free(shown);
  free(url);
  free(c.shared_name);
  fflush(stdout);
  return rc;
}
