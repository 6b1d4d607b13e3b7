/*
 * cli.h - what the parts of the dlock command share once argv is parsed:
 * the resolved backend (and how to show it), the library options,
 * and the helpers that turn a library error into one stderr line and an
 * exit status (report.c), run a command under the lock (run.c), and show
 * or break a lock (status.c).
 *
 * Every kind the options select is one or two locks on the server (args.h,
 * enum cli_kind): the "main" lock NAME (fenced, or fair with -F) that
 * exclusive holders take first, and the read-write lock NAME:dlock-rw whose
 * write side they take next and whose read side -s takes. -N takes a
 * permit of the permit semaphore NAME instead (limit.c).
 */
#ifndef DLOCK_CLI_H
#define DLOCK_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <dlock/dlock.h>

#include "args.h"

struct cli_ctx {
  const struct cli_opts *o;
  const char *url;       /* the backend URL in use */
  const char *url_shown; /* the same with the password as "***" */
  /* every server (several -u: a Redlock's nodes or --all's servers);
   * urls[0] == url; nurls >= 1 */
  const char *urls[CLI_URLS_MAX];
  const char *urls_shown[CLI_URLS_MAX];
  int nurls;
  dlock_options_t *dopts; /* library options (owned by main) */
  char name_shown[160];   /* NAME as printable ASCII, bounded */
  char *shared_name;      /* NAME CLI_SHARED_SUFFIX (owned by main) */
};

/* Prints "dlock: <formatted>\n" to stderr on one line (cli_one_line).
 * `c` may be NULL (nothing to hide yet). Thread-safe. */
void cli_msg(const struct cli_ctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Mutes cli_msg (on: later lines, from any thread, are dropped) or not;
 * cli_msg_final prints whatever the mute. For a last line while another
 * thread may still report (run.c, wait_ran_out). */
void cli_mute(bool on);
void cli_msg_final(const struct cli_ctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The exit status for a library error code (docs/dlock.1): 69 for the backend's
 * refusals, 64 for a bad URL or argument, 70 for the rest. */
int cli_exit_for(int err);

/* Prints one line for a failed library call made by THIS thread
 * (dlock_last_error() is per thread), with a hint on what to do, and returns
 * the exit status. `subject` (may be NULL) leads the line when the library's
 * detail does not already name the backend. */
/* False when the backend does not offer `kind` (a backend without
 * read-write locks: an exclusive holder then takes NAME alone). */
bool cli_has_kind(const struct cli_ctx *c, dlock_client_t *client,
                  dlock_lock_kind_t kind);
int cli_lib_error(const struct cli_ctx *c, const char *subject, int err);

/* Connects: to the one server, or with several -u and no --all to all
 * of them as one Redlock client. 0, or an exit status after an error
 * line. */
int cli_connect(const struct cli_ctx *c, dlock_client_t **client);
/* Connects to server i alone (--all, per-node status). Same returns;
 * `quiet`: no error line (the caller reports). */
int cli_connect_url(const struct cli_ctx *c, int i, bool quiet,
                    dlock_client_t **client);

/* The kind of an exclusive (-x) lock on this client: fenced, or the plain
 * lock where the layout offers no other (Redis's spring layout: no
 * DLOCK_TOKEN then). cli_lock_new applies it to DLOCK_FENCED. */
dlock_lock_kind_t cli_exclusive_kind(dlock_client_t *client, const char *name);

/* The library kind of the main lock NAME for the selected kind: fenced for
 * -x, fair for -F; for -s there is none (returns DLOCK_READ, the kind of
 * the read-write lock's side it takes). */
dlock_lock_kind_t cli_main_kind(const struct cli_ctx *c);

/* A handle on NAME (shared_rw false) with `kind`, or on the read-write lock
 * NAME CLI_SHARED_SUFFIX (shared_rw true; kind DLOCK_READ or DLOCK_WRITE).
 * 0, or an exit status after an error line. */
int cli_lock_new(const struct cli_ctx *c, dlock_client_t *client,
                 bool shared_rw, dlock_lock_kind_t kind, dlock_lock_t **lock);

/* Monotonic clock in milliseconds. */
int64_t cli_now_ms(void);

/* run.c: RUN and HOLD modes; returns the exit status. */
int cli_run(struct cli_ctx *c);

/* status.c: --status and --force-unlock; return the exit status. */
int cli_status(struct cli_ctx *c);
int cli_force_unlock(struct cli_ctx *c);
/* One JSON string (RFC 8259 escapes; bytes that are not UTF-8 become
 * U+FFFD). */
void cli_json_string(FILE *f, const char *s);

/* limit.c: -N. Opens the permit semaphore NAME, creating it with -N's
 * permits or checking that it has that many (0, or an exit status after an
 * error line); and its --status and --force-unlock. */
int cli_limit_open(const struct cli_ctx *c, dlock_client_t *client,
                   dlock_permit_sem_t **out);
int cli_limit_status(struct cli_ctx *c);
int cli_limit_force_unlock(struct cli_ctx *c);

/* who.c: the holder identity (see its design note). */
#define CLI_WHO_CMD_MAX 200
struct cli_who {
  char host[72];
  char user[40];
  char cmd[CLI_WHO_CMD_MAX + 8];
  long long pid;      /* -1: none */
  long long since_ms; /* wall clock, ms since the epoch; -1: none */
};
/* Wall-clock ms since the epoch. */
int64_t cli_wall_ms(void);
/* Builds this dlock's identity and sets it on c->dopts (RUN and HOLD
 * modes, before any thread); 0, or -1 after a line (dlock runs anyway). */
int cli_who_set(struct cli_ctx *c);
/* Parses an info dlock wrote; false for anything else (NULL included). */
bool cli_who_parse(const char *info, struct cli_who *w);
/* One printable phrase for a holder or waiter: "pid P on HOST (user U,
 * command 'C', started N s ago)", or the owner id with the raw info or
 * "(no identity recorded)". */
void cli_who_line(const char *owner, const char *info, char *out, size_t cap);
/* The parsed identity as a JSON object, or null. */
void cli_who_json(FILE *f, const char *info);
/* --status: the identity a holder or waiter recorded, on a "  who:" line
 * of its own under it (nothing when none was recorded: the owner line says
 * it all); --json: its ,"info":..,"who":.. fields (the text or null, and
 * the parsed identity when dlock recorded it, or null). */
void cli_who_print(const char *owner, const char *info);
void cli_who_print_json(const char *info);

#endif /* DLOCK_CLI_H */
