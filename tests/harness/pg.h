/*
 * pg.h - private PostgreSQL servers for dlock's tests.
 *
 * A test starts one server of Debian's postgresql package
 * (/usr/lib/postgresql/15/bin, or $TH_PG_BIN) on a free 127.0.0.1 port, its
 * data directory and unix socket inside one mkdtemp directory, logging
 * there. The data directory is a copy of a template made once by initdb
 * (per user, under /tmp), so a start costs a copy and the server's start,
 * not an initdb. Host connections need the password (scram-sha-256) of the
 * superuser `postgres`; th_pg_url carries it.
 *
 * PostgreSQL refuses to run as root: when the test runs as root (a CI
 * root), initdb and the server run as the unprivileged user `nobody`
 * (setpriv), owning the temporary directory.
 *
 * The harness stops every server it started by PID when the process exits
 * (atexit), on SIGINT/SIGTERM/SIGHUP, and - through PR_SET_PDEATHSIG -
 * when the test dies any other way. Threads: main thread only.
 */
#ifndef DLOCK_TEST_PG_H
#define DLOCK_TEST_PG_H

typedef struct th_pg th_pg_t;

/* NULL after printing why (and the log's tail) on stderr. */
th_pg_t *th_pg_start(void);
/* "postgres://postgres:PASSWORD@127.0.0.1:PORT/postgres" */
const char *th_pg_url(const th_pg_t *s);
int th_pg_port(const th_pg_t *s);
/* The superuser's password. */
const char *th_pg_password(void);
/* SIGKILL the server and reap it (its children exit with it). 0/-1. */
int th_pg_kill9(th_pg_t *s);
/* Starts it again on its port and data, waiting until it answers. 0/-1. */
int th_pg_up(th_pg_t *s);
/* SIGSTOP / SIGCONT the postmaster and every server process it started
 * (its children, the sessions' backends included), so that a paused
 * server answers no connection, old or new. 0/-1. */
int th_pg_pause(th_pg_t *s);
int th_pg_resume(th_pg_t *s);
/* Runs psql -X -A -t -v ON_ERROR_STOP=1 against the server with each -c
 * command of cmds (NULL-terminated); its output (trimmed) goes into out.
 * psql's exit status (0 ok). */
int th_pg_psql(th_pg_t *s, const char *const *cmds, char *out, int cap);
/* Starts `psql` in the background on a pipe: the caller writes commands
 * with th_pg_session_send and reads lines with th_pg_session_line. */
typedef struct th_pg_session th_pg_session_t;
th_pg_session_t *th_pg_session_open(th_pg_t *s);
int th_pg_session_send(th_pg_session_t *q, const char *sql);
/* One line of output (without its newline) within ms, or -1. */
int th_pg_session_line(th_pg_session_t *q, char *out, int cap, int ms);
void th_pg_session_close(th_pg_session_t *q);
/* Stops the server (fast shutdown, then SIGKILL), removes the directory,
 * frees s. Accepts NULL. */
void th_pg_stop(th_pg_t *s);

#endif
