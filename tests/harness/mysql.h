/*
 * mysql.h - private MariaDB servers for dlock's tests.
 *
 * A test starts one server of Debian's mariadb-server (/usr/sbin/mariadbd,
 * or $TH_MARIADBD) on a free 127.0.0.1 port, its data directory, unix
 * socket and log inside one mkdtemp directory. The data directory is a
 * copy of a template made once by mariadb-install-db (per user, under
 * /tmp). Every start runs an init file that makes the database `dlock` and
 * the user `dlock` (password th_my_password(), every privilege), whom
 * th_my_url names.
 *
 * When the test runs as root the server runs as `nobody` (setpriv). The
 * harness stops every server it started by PID at exit, on
 * SIGINT/SIGTERM/SIGHUP, and (parent death signal) when the test dies.
 * Threads: main thread only.
 */
#ifndef DLOCK_TEST_MYSQL_H
#define DLOCK_TEST_MYSQL_H

typedef struct th_my th_my_t;

/* 1 when mariadbd is installed (else tests skip). */
int th_my_available(void);
/* NULL after printing why (and the log's tail) on stderr. */
th_my_t *th_my_start(void);
/* "mysql://dlock:PASSWORD@127.0.0.1:PORT/dlock" */
const char *th_my_url(const th_my_t *s);
int th_my_port(const th_my_t *s);
const char *th_my_password(void);
/* SIGKILL the server and reap it. 0/-1. */
int th_my_kill9(th_my_t *s);
/* Starts it again on its port and data. 0/-1. */
int th_my_up(th_my_t *s);
/* SIGSTOP (returning once the server has stopped) / SIGCONT the server.
 * 0/-1. */
int th_my_pause(th_my_t *s);
int th_my_resume(th_my_t *s);
/* Runs the `mariadb` client (-N -B) with sql; output (trimmed) into out;
 * the client's exit status. */
int th_my_sql(th_my_t *s, const char *sql, char *out, int cap);
/* Starts `mariadb` in the background on a pipe (its own session): the
 * caller writes statements and reads result lines. */
typedef struct th_my_session th_my_session_t;
th_my_session_t *th_my_session_open(th_my_t *s);
int th_my_session_send(th_my_session_t *q, const char *sql);
/* One line of output (without its newline) within ms, or -1. */
int th_my_session_line(th_my_session_t *q, char *out, int cap, int ms);
void th_my_session_close(th_my_session_t *q);
/* Stops the server (SIGTERM, then SIGKILL), removes the directory, frees
 * s. Accepts NULL. */
void th_my_stop(th_my_t *s);

#endif
