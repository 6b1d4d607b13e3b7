/*
 * harness.h - private redis-server instances for dlock's tests.
 *
 * A test starts its own redis-server on a free 127.0.0.1 port, in its own
 * mkdtemp directory, with no persistence unless it asks for it. The harness
 * stops every server it started when the process exits (atexit), when it is
 * sent SIGINT/SIGTERM/SIGHUP, and - through PR_SET_PDEATHSIG - when the test
 * dies any other way (crash, ctest timeout).
 *
 * Threads: start/restart/up should be called from the main thread (the
 * server's death signal is tied to the thread that forked it). The other
 * calls may be made from any thread; th_redis_cmd() serialises on one cached
 * connection per server, th_redis_connect() gives a thread its own.
 *
 * Only the process that started a server ever stops it: a forked child that
 * calls exit() leaves its parent's servers alone.
 */
#ifndef DLOCK_TEST_HARNESS_H
#define DLOCK_TEST_HARNESS_H

#include <hiredis.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct th_server {
  pid_t pid;     /* 0 while the server is down */
  int port;      /* stays the same across restarts */
  int port2;     /* "${port2}" in a config line (e.g. tls-port), or 0 */
  int port3;     /* "${port3}" in a config line (a third port), or 0 */
  char dir[256]; /* the server's temp dir (config, log, data) */
  char url[64];  /* "redis://127.0.0.1:PORT" */
  bool sentinel; /* runs as redis-sentinel (TH_SENTINEL_LINE given) */
  char **conf;   /* extra config lines, copied */
  size_t nconf;
  char *user; /* credentials the harness uses itself (may be NULL) */
  char *password;
  pthread_mutex_t mu; /* guards ctx */
  redisContext *ctx;  /* th_redis_cmd()'s cached connection */
} th_server_t;

/* Starts redis-server with the default config plus `extra` (NULL-terminated
 * array of config lines, may be NULL; later lines override earlier ones).
 * "${dir}" in a line stands for the server's directory (e.g.
 * "unixsocket ${dir}/redis.sock"), "${port2}" for a second free port kept
 * in s->port2 (e.g. "tls-port ${port2}": the harness itself keeps using
 * the plain port). A "requirepass X" line makes the harness
 * AUTH with X. Waits until the
 * server answers (at most 10 s). Returns NULL (after printing why) on
 * failure. */
th_server_t *th_server_start(const char *const *extra);
/* This line among `extra` starts the server in Sentinel mode
 * (redis-server --sentinel; the other lines are sentinel directives such
 * as "sentinel monitor NAME 127.0.0.1 PORT QUORUM"). */
#define TH_SENTINEL_LINE "# dlock harness: sentinel"
/* The master's port a sentinel names for `name` now, or -1. */
int th_sentinel_master_port(th_server_t *sentinel, const char *name);
/* Stops the server (SIGTERM, SIGKILL after 5 s), removes its dir, frees s.
 * Accepts NULL. */
void th_server_stop(th_server_t *s);
/* Credentials the harness itself uses on its connections (ACL setups). */
void th_server_set_auth(th_server_t *s, const char *user, const char *password);

/* Graceful stop, keeping the dir (and any data in it); the port stays ours
 * in the sense that th_server_up() reuses it. 0 or -1. */
int th_server_down(th_server_t *s);
/* SIGKILL and reap; the server is down afterwards. 0 or -1. */
int th_server_kill9(th_server_t *s);
/* Starts the server again on the same port, dir and config, and waits until
 * it answers. 0 or -1. */
int th_server_up(th_server_t *s);
/* th_server_down() then th_server_up(). */
int th_server_restart(th_server_t *s);
/* SIGSTOP / SIGCONT. 0 or -1. */
int th_server_pause(th_server_t *s);
int th_server_resume(th_server_t *s);

/* Formats are hiredis's (%s is one binary-safe argument, %b takes a pointer
 * and a size_t), hence no printf format checking. */
/* Runs one command on the harness's cached connection (reconnecting once if
 * that connection went stale). Returns the reply (free it with
 * freeReplyObject) or NULL when the server could not be reached. */
redisReply *th_redis_cmd(th_server_t *s, const char *fmt, ...);
/* Integer reply of a command, or INT64_MIN on any other reply/failure. */
int64_t th_redis_int(th_server_t *s, const char *fmt, ...);
/* String/status reply as a malloc'd string (free it), NULL otherwise. */
char *th_redis_str(th_server_t *s, const char *fmt, ...);
/* Runs argv (NULL-terminated, found on PATH) as a child and waits for it:
 * its exit status, 128+S when killed by signal S, 70 when it could not be
 * forked (127 from the child when it could not be run). For the th_with_*
 * launchers. */
int th_run_command(char *const argv[]);
/* INFO `section` of s holds `a`, and `b` too when not NULL. */
bool th_info_has(th_server_t *s, const char *section, const char *a,
                 const char *b);
/* A new connection of the caller's own (authenticated, 5 s timeouts), or
 * NULL. Free with redisFree(). */
redisContext *th_redis_connect(th_server_t *s);

/* ------------------------------------------------------ fault proxy */

/* A TCP proxy on 127.0.0.1 in front of a server, for faults a real server
 * will not produce on demand: replies that never arrive after the command
 * ran (drop_replies), commands that never arrive (drop_requests), or a
 * network that swallows everything in both
 * directions (blackhole). One background thread; connections are accepted
 * and forwarded until th_proxy_stop(). */
typedef struct th_proxy th_proxy_t;
th_proxy_t *th_proxy_start(int target_port);
/* The proxy's port and "redis://127.0.0.1:PORT". */
int th_proxy_port(const th_proxy_t *p);
const char *th_proxy_url(const th_proxy_t *p);
/* Server->client bytes are read and thrown away while set. */
void th_proxy_drop_replies(th_proxy_t *p, bool on);
/* Client->server bytes are read and thrown away while set (commands that
 * never arrive; the connection stays up). */
void th_proxy_drop_requests(th_proxy_t *p, bool on);
/* Nothing is forwarded either way while set (bytes stay queued in the
 * kernel and flow again once cleared). */
void th_proxy_blackhole(th_proxy_t *p, bool on);
/* Closes every proxied connection (both sides), like a network reset. */
void th_proxy_reset(th_proxy_t *p);
void th_proxy_stop(th_proxy_t *p);

/* Forks and execs exe (a path, or a name looked up in PATH) with argv, its
 * stdout and stderr appended to `log`, stdin /dev/null, in its own process
 * group, killed with the test (PR_SET_PDEATHSIG), no other descriptor
 * inherited. The pid, or -1 after printing why (prefixed by `who`). The
 * caller owns the pid: it stops and reaps it. Used by every backend's
 * harness (Redis, ZooKeeper, etcd). */
pid_t th_spawn(const char *exe, char *const argv[], const char *log,
               const char *who);

/* For a backend harness that stops its servers when the test is
 * interrupted: installs handler for SIGINT, SIGTERM and SIGHUP, keeping
 * the handlers it replaces in old[3]; the handler, after its clean-up,
 * calls th_signal_pass_on, which hands the signal to the handler installed
 * before (another harness's) or dies of it. */
struct sigaction;
void th_signals_install(void (*handler)(int), struct sigaction *old /* [3] */);
void th_signal_pass_on(int sig, const struct sigaction *old /* [3] */);

/* The processes whose parent is ppid (a /proc scan): up to max of their
 * pids into pids, and their command names (/proc's comm) into comms
 * unless it is NULL. How many were found. */
int th_children(pid_t ppid, pid_t *pids, char (*comms)[16], int max);

/* A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0). */
int th_free_port(void);
/* Monotonic milliseconds. */
int64_t th_now_ms(void);
/* Sleeps ms milliseconds (for short poll loops only). */
void th_sleep_ms(int64_t ms);

/* Polls `cond` every 5 ms until it holds or timeout_ms passes; sets `ok`. */
#define TH_WAIT_FOR(ok, cond, timeout_ms)                                      \
  do {                                                                         \
    int64_t th_deadline_ = th_now_ms() + (timeout_ms);                         \
    for (;;) {                                                                 \
      if (cond) {                                                              \
        (ok) = true;                                                           \
        break;                                                                 \
      }                                                                        \
      if (th_now_ms() >= th_deadline_) {                                       \
        (ok) = false;                                                          \
        break;                                                                 \
      }                                                                        \
      th_sleep_ms(5);                                                          \
    }                                                                          \
  } while (0)

#endif /* DLOCK_TEST_HARNESS_H */
