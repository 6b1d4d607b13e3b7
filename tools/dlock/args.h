/*
 * args.h - the dlock command's argument parser (see args.c).
 *
 * The parser is pure: it reads argv, fills a struct and, on a usage error,
 * writes a one-line message into a caller buffer. It never prints, exits,
 * allocates or touches the environment, so it can be fuzzed on its own.
 */
#ifndef DLOCK_CLI_ARGS_H
#define DLOCK_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <dlock/dlock.h>

/* sysexits.h values the command's contract (docs/dlock.1) promises. */
#define CLI_EX_USAGE 64
#define CLI_EX_UNAVAILABLE 69
#define CLI_EX_SOFTWARE 70
#define CLI_EX_TEMPFAIL 75

enum cli_mode {
  CLI_MODE_RUN,          /* NAME COMMAND... or NAME -c CMD */
  CLI_MODE_HOLD,         /* NAME alone: hold until SIGINT/SIGTERM */
  CLI_MODE_STATUS,       /* --status NAME */
  CLI_MODE_FORCE_UNLOCK, /* --force-unlock NAME */
  CLI_MODE_HELP,
  CLI_MODE_VERSION
};

enum cli_on_lost { CLI_LOST_TERM, CLI_LOST_KILL, CLI_LOST_IGNORE };

/* Which lock the options select (see the mapping in args.c). */
enum cli_kind {
  CLI_KIND_EXCLUSIVE, /* default, -x: fenced lock NAME + write side of the
                         read-write lock NAME CLI_SHARED_SUFFIX */
  CLI_KIND_FAIR,      /* -F: fair lock NAME + the same write side */
  CLI_KIND_SHARED,    /* -s: read side of the read-write lock NAME
                         CLI_SHARED_SUFFIX */
  CLI_KIND_LIMIT      /* -N LIMIT: a permit of the permit semaphore NAME */
};

/* Largest -N. */
#define CLI_LIMIT_MAX 1000000

/* The read-write lock that -s shares and exclusive holders exclude lives
 * under NAME with this suffix: Redisson's read-write layout and its lock
 * layout cannot share one key (a read acquire would take over a held
 * lock's hash). */
#define CLI_SHARED_SUFFIX ":dlock-rw"
/* Longest NAME the command accepts (the suffixed name must fit). */
#define CLI_NAME_MAX (DLOCK_NAME_MAX - (int)(sizeof CLI_SHARED_SUFFIX - 1))

/* Most -u URLs (a Redlock's nodes, or --all's servers). */
#define CLI_URLS_MAX 15

struct cli_opts {
  enum cli_mode mode;
  const char *name;          /* the lock name (points into argv) */
  char *url;                 /* -u argument (points into argv), or NULL */
  char *urls[CLI_URLS_MAX];  /* every -u, in order (urls[0] == url) */
  int nurls;
  bool all;                  /* --all: every -u server, not a majority */
  char *const *names;        /* -M: NAME... (names[0] == name) */
  int nnames;                /* 1 without -M */
  char *const *command;      /* COMMAND ARG... (NULL-terminated argv tail) */
  const char *shell_command; /* -c CMD, or NULL */
  const char *password_file; /* --password-file, or NULL */
  /* redis-sentinel://: the sentinels' own user and password file */
  const char *sentinel_user;          /* --sentinel-user, or NULL */
  const char *sentinel_password_file; /* --sentinel-password-file, or NULL */
  int64_t wait_ms;           /* -1 = forever, 0 = -n, else -w */
  int64_t lease_ms;          /* -1 = watchdog lease, else -l */
  int64_t watchdog_ms;       /* --session (--watchdog), 0 = default */
  int64_t kill_after_ms;     /* --kill-after, default 10000 */
  int conflict_exit;         /* -E, default 1 */
  enum cli_on_lost on_lost;  /* --on-lost, default term */
  enum cli_kind kind;        /* -x (default), -F, -s, -N */
  long limit;                /* -N */
  int verbose;               /* number of -v */
  bool json;                 /* --json */
  bool no_cmdline;           /* --no-cmdline: no command in the identity */
  /* TLS, redis-cli's names (point into argv, or NULL / false) */
  bool tls;              /* --tls: TLS for redis:// and etcd:// too */
  bool tls_insecure;     /* --insecure */
  const char *tls_cacert, *tls_cacertdir; /* --cacert, --cacertdir */
  const char *tls_cert, *tls_key;         /* --cert, --key */
  const char *tls_sni;                    /* --sni */
  /* Redis key layout: --layout redisson|spring, --registry KEY (Spring
   * Integration's RedisLockRegistry key); NULL: the URL's, else
   * Redisson's */
  const char *layout, *registry;
};

/* --session's defaults: Redis's renewed lease is Redisson's watchdog
 * (30 s, renewed every 10 s); a ZooKeeper session and an etcd lease are
 * 10 s (etcdctl lock's --ttl), so a killed holder keeps others out for
 * seconds, not the library's minute. */
#define CLI_SESSION_REDIS_MS 30000
#define CLI_SESSION_MS 10000

/* Longest number of seconds any option accepts (about 31 years). */
#define CLI_SECS_MAX 1000000000LL

/*
 * Parses argv[1..argc-1]; argv[argc] must be NULL (as for main()). Returns 0
 * and fills *o, or returns CLI_EX_USAGE and writes a one-line message
 * (without the "dlock: " prefix, printable ASCII only) into err[errlen].
 * Pointers stored in *o point into argv.
 */
int cli_parse(int argc, char **argv, struct cli_opts *o, char *err,
              size_t errlen);

/* Parses decimal seconds ("5", "0.25", ".5", "2.") into milliseconds,
 * rounding a fraction of a millisecond up. 0 on success; -1 when not a
 * number, -2 when negative, -3 when above CLI_SECS_MAX. */
int cli_parse_secs(const char *s, int64_t *ms);

/* Copies at most `max` bytes of `s` into out[outlen] as printable ASCII
 * (other bytes as \xHH), NUL-terminated, with "..." when cut. */
void cli_printable(const char *s, size_t max, char *out, size_t outlen);

#endif /* DLOCK_CLI_ARGS_H */
