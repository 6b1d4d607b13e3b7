/*
 * postgres.c - the PostgreSQL backend: session-level advisory locks.
 *
 *   postgres://[user[:password]@]host[:port][/dbname][?param=value...]
 *   postgresql://...   (libpq's own URI syntax, parsed by libpq)
 *
 * Design note
 * - The URL is parsed by libpq (PQconninfoParse): every libpq parameter
 *   works as libpq documents it. dlock adds, unless the URL sets them:
 *   application_name=dlock, client_encoding=UTF8, TCP keepalives and
 *   tcp_user_timeout from the watchdog lease. dlock_options_set_credentials
 *   overrides the URL's user and password.
 * - The lock of name N is the session-level advisory lock on the 64-bit key
 *   hashtextextended(N, 0), computed by the server, so that
 *   `SELECT pg_advisory_lock(hashtextextended('N', 0))` in psql takes the
 *   same lock (docs/POSTGRES.md).
 * - Advisory locks belong to sessions: every hold (name, owner) keeps the
 *   connection that took it until its release; reentry counts locally on
 *   that hold. Connections not holding nor waiting sit in an idle pool.
 * - The lease is the server's: the statement that takes the lock also sets
 *   idle_session_timeout to the lease (PostgreSQL 14 or later), so a holder
 *   that stops talking for longer than its lease has its session ended by
 *   the server and the lock goes to the next waiter. The core's watchdog
 *   calls lock_renew every third of the lease, which sends `SELECT 1` on
 *   each hold's connection (a heartbeat, resetting the server's idle
 *   clock); a heartbeat that fails closes that connection and reports the
 *   hold gone, so the core reports it lost. The event loop also polls each
 *   idle holding connection: when the server closes it (a restart,
 *   pg_terminate_backend, the idle timeout) the core is asked to renew at
 *   once (dlock__holds_renew_now), so the loss is reported then, not at
 *   the next heartbeat. The release leaves the
 *   timeout (and the owner, the application_name) set: the pool records
 *   each connection's timeout and since when it is idle, lends it only
 *   well within that timeout, and a try on a connection whose timeout and
 *   owner are already the ones wanted sends the bare pg_try_advisory_lock,
 *   so that an uncontended pair costs what the bare two statements cost.
 * - Try (wait 0): pg_try_advisory_lock on a pooled connection. A wait:
 *   the first attempt tries (wait_hot is always false); then the attempt
 *   sends a blocking pg_advisory_lock asynchronously on a connection of
 *   the wait's own and returns 0 with no bound (-1). The event loop polls
 *   the sockets of such pending statements (loop_prepare / loop_dispatch)
 *   and wakes the wait when its statement finished; the next attempt
 *   claims the granted connection with one `SELECT 1` (which restarts the
 *   server's idle clock after the attempt's send time, so the hold's date
 *   is safe). A wait that ends without claiming cancels its statement
 *   with libpq's cancel request and unlocks a grant that raced with it.
 * - Async calls (backend.h's lock_acquire_send, lock_release_send): the
 *   try of a reentrant or fenced lock goes out from the caller's thread on
 *   an idle pooled connection, and a release's unlock on its hold's
 *   connection, without waiting; the event loop polls those sockets (the
 *   first of its set: pg_sent, oldest first), reads the answers with
 *   libpq's non-blocking calls and ends each operation as the blocking one
 *   would (the same statements, results and records: a grant's
 *   connection becomes the hold's, a fenced one after its token statement,
 *   sent by the loop). A statement unanswered by the command timeout ends
 *   in DLOCK_EIOTIMEOUT and its connection is closed (its session, and any
 *   lock it took, end). A send never dials nor waits: no idle connection,
 *   a hold busy with a heartbeat, a wait of the owner's in progress:
 *   DLOCK__SEND_BLOCKS (the core runs the blocking operation on its pool),
 *   and the dialling worker pools a connection for the sends to come. A
 *   connection found closed (a restart) hands over the same way; a fenced
 *   grant whose token statement failed is kept (S_CLAIM) for the blocking
 *   try to go on from.
 * - Kinds: reentrant, fenced and the write side of a read-write lock take
 *   the exclusive advisory lock of the name (one lock for the three); the
 *   read side takes its shared lock (pg_advisory_lock_shared). A thread
 *   never holds both sides (its two sessions would block each other):
 *   DLOCK_EDEADLK. The fair lock, counting semaphores and latches are not
 *   offered: the core refuses them with DLOCK_ENOTSUP (kinds_why) before
 *   anything is sent. A fenced grant raises the name's row of the table
 *   dlock_fence (created on first use) on the holding connection while the
 *   lock is held, so tokens grow with every grant and survive a restart.
 * - Permit semaphores (`dlock -N`): the semaphore N of K permits is the row
 *   of the table dlock_semaphore (its size K; created on first use) and K
 *   slot advisory locks on hashtextextended(N, i), i = 1..K (seed 0 is the
 *   lock N's key). A permit is one slot lock held on a connection of its
 *   own, so it is a hold like a lock's: its session's idle_session_timeout
 *   is the permit's lease, the watchdog's heartbeats keep it (lock_renew,
 *   DLOCK__HK_PERMIT), a killed or frozen holder's permit is freed by the
 *   server, and the session shows the permit id as its application_name
 *   (psem_state lists them). A try is one statement taking the first free
 *   slot (pg_try_advisory_lock over 1..K, LIMIT 1); after a shrink (slots
 *   above K may still be held) a second one takes a slot only while
 *   pg_locks shows fewer than K in use. A release NOTIFYs the
 *   channel dlock_permit with N as payload; a client with permit waits
 *   LISTENs on one connection of its own, which the event loop polls, and
 *   wakes the waits of the name. A permit the server frees (its holder's
 *   session ended) sends nothing: a wait looks again at least every third
 *   of the client's watchdog lease.
 * - Locking: p->mu guards the holds, the waits' states and the sent
 *   statements' list (the idle pool has its own, core/idle.h); it is
 *   never held across I/O. A hold's connection is used by one thread at a
 *   time: a renewal marks the hold busy, and a release waits on p->cond
 *   until it is not. p->lmu guards the listening connection (taken before
 *   mu; held across its I/O by a caller thread, so the loop only tries
 *   it, and a caller that holds it drains the notifications itself).
 */
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/alloc.h"
#include "core/backend.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/idle.h"
#include "core/options.h"
#include "core/wait.h"
#include "postgres/postgres.h"

#define PG_MIN_VERSION 140000
#define PG_KW_MAX 64

static const char *const pg_schemes[] = {"postgres", "postgresql", NULL};

/* The SQL (docs/POSTGRES.md shows it). $1 the name, $2 the lease in ms,
 * $3 the owner, shown as the session's application_name while it holds or
 * waits (pg_stat_activity; dlock_lock_state reads it back). */
/* [0] exclusive (reentrant, fenced, write), [1] shared (read) */
#define SQL_TRY(f)                                                             \
  "SELECT CASE WHEN pg_try_advisory_lock" f "(hashtextextended($1, 0)) "       \
  "THEN set_config('idle_session_timeout', $2, false) IS NOT NULL AND "        \
  "set_config('application_name', $3, false) IS NOT NULL "                     \
  "ELSE false END, pg_backend_pid()"
#define SQL_LOCK(f)                                                            \
  "SELECT set_config('application_name', $3, false), "                         \
  "pg_advisory_lock" f "(hashtextextended($1, 0)), "                           \
  "set_config('idle_session_timeout', $2, false), pg_backend_pid()"
#define SQL_UNLOCK(f)                                                          \
  "SELECT pg_advisory_unlock" f "(hashtextextended($1, 0)), "                  \
  "set_config('idle_session_timeout', '0', false), "                           \
  "set_config('application_name', 'dlock', false)"
static const char *const sql_try[2] = {SQL_TRY(""), SQL_TRY("_shared")};
static const char *const sql_lock[2] = {SQL_LOCK(""), SQL_LOCK("_shared")};
static const char *const sql_unlock[2] = {SQL_UNLOCK(""),
                                          SQL_UNLOCK("_shared")};
/* A try and a release on a connection whose lease and owner are set
 * already (a pooled connection this owner used last with this lease):
 * the settings stay, so the pair costs the bare statements. */
static const char *const sql_try_bare[2] = {
    "SELECT pg_try_advisory_lock(hashtextextended($1, 0)), pg_backend_pid()",
    "SELECT pg_try_advisory_lock_shared(hashtextextended($1, 0)), "
    "pg_backend_pid()"};
static const char *const sql_unlock_keep[2] = {
    "SELECT pg_advisory_unlock(hashtextextended($1, 0))",
    "SELECT pg_advisory_unlock_shared(hashtextextended($1, 0))"};
/* the heartbeat: the server process must be the one that took the lock
 * (a transaction-mode pooler would hand statements to any) */
static const char SQL_BEAT[] = "SELECT pg_backend_pid()";
/* Fencing tokens: one row per fenced name, its token raised by every grant
 * while the lock is held (so grants of a name are serialised), in a table
 * created on first use; a resource checks a token against it
 * (docs/POSTGRES.md). */
static const char SQL_TOKEN[] =
    "INSERT INTO dlock_fence AS f (key, name, token) VALUES "
    "(hashtextextended($1, 0), $1, 1) ON CONFLICT (key) DO UPDATE SET token "
    "= f.token + 1 RETURNING token";
static const char SQL_FENCE_TABLE[] =
    "CREATE TABLE IF NOT EXISTS dlock_fence (key bigint PRIMARY KEY, name "
    "text NOT NULL, token bigint NOT NULL)";
/* pg_locks rows of the lock $1: a bigint key is classid (high 32 bits),
 * objid (low 32 bits) and objsubid 1 */
#define SQL_MATCH                                                              \
  "l.locktype = 'advisory' AND l.objsubid = 1 AND l.database = (SELECT oid "   \
  "FROM pg_database WHERE datname = current_database()) AND l.classid = "      \
  "((hashtextextended($1, 0) >> 32) & 4294967295)::oid AND l.objid = "         \
  "(hashtextextended($1, 0) & 4294967295)::oid"
static const char SQL_LOCKED[] =
    "SELECT count(*) FROM pg_locks l WHERE l.granted AND " SQL_MATCH;
static const char SQL_STATE[] =
    "SELECT l.granted, l.pid, coalesce(a.application_name, ''), l.mode FROM "
    "pg_locks "
    "l LEFT JOIN pg_stat_activity a ON a.pid = l.pid WHERE " SQL_MATCH
    " ORDER BY l.granted DESC, l.waitstart NULLS FIRST LIMIT 101";
/* ends the holding sessions, waiting up to 5 s for each to end */
static const char SQL_FORCE[] =
    "SELECT count(*) FILTER (WHERE pg_terminate_backend(l.pid, 5000)) FROM "
    "pg_locks l WHERE l.granted AND " SQL_MATCH;

typedef struct pg_hold {
  struct pg_hold *next;
  char *name, *owner;
  PGconn *conn; /* NULL once a heartbeat failed: the hold is gone */
  int64_t count;
  bool shared;   /* the read side (a shared advisory lock) */
  long pid;      /* the server process that took the lock */
  int64_t token; /* a fenced lock's token (0: none) */
  int64_t idle;  /* its connection's idle_session_timeout (the lease) */
  bool busy;     /* a renewal is using conn */
  bool broken;   /* the loop saw conn closed: its next heartbeat fails */
  bool permit;   /* a permit of the permit semaphore `name` (owner: its id) */
  int64_t slot;  /* a permit: its slot, 1..K */
} pg_hold;

enum { W_IDLE, W_SENT, W_GRANTED, W_FAILED };

typedef struct pg_wait {
  struct pg_wait *next;
  dlock__wait *w;
  PGconn *conn;
  int state;
  bool got_ok; /* W_SENT: the statement's result came, and said granted */
  long pid;    /* the server process the statement ran on */
  bool got_err;
  char err[200];
  char sqlstate[6]; /* the statement's error, if it failed with one */
  int64_t idle0;    /* conn's idle_session_timeout before the statement */
} pg_wait;

/* A sent operation (lock_acquire_send, lock_release_send): its statement
 * is on a connection of its own, whose answer the event loop reads.
 * S_TRY: a try on a pooled connection; S_TOKEN: a fenced grant's token on
 * the connection the try took the lock on; S_UNLOCK: a release's unlock
 * on its hold's connection. A grant whose token statement failed on a
 * live connection waits as S_CLAIM (p->claims) for the blocking try,
 * which the core runs next, to go on from it (grant). */
enum { S_TRY, S_TOKEN, S_UNLOCK, S_CLAIM };

typedef struct pg_sent {
  struct pg_sent *next;
  PGconn *conn;
  int step;
  /* the try (a release: its kind and name), name and owner in names[] */
  dlock__acquire a;
  int64_t idle;     /* conn's idle_session_timeout (a grant: the lease's) */
  long pid;         /* a grant: the server process that holds it */
  int64_t deadline; /* the statement's answer is due by then */
  bool flushing;    /* part of the statement is still to be written */
  bool first;       /* results_in's state: no result taken yet */
  int rc;           /* the statement's outcome so far */
  char out[48];     /* its first row */
  char err[512];    /* rc's detail */
  dlock__sent_fn done;
  void *arg;
  char names[];
} pg_sent;

typedef struct pg {
  struct dlock_client *core;
  int64_t connect_timeout_ms, command_timeout_ms;
  const char *kw[PG_KW_MAX + 1];
  const char *val[PG_KW_MAX + 1];
  char *owned[PG_KW_MAX * 2]; /* strings kw/val point to */
  int nowned;
  char where[160]; /* host:port/db, for messages */
  char *password;  /* scrubbed from messages */
  pthread_mutex_t mu;
  pthread_cond_t cond;
  /* idle connections, each with its idle_session_timeout (core/idle.h:
   * one idle too long for it is closed, not lent) */
  dlock__idle_pool idle;
  pg_hold *holds;
  /* connections of holds whose heartbeat failed, closed only at the next
   * renewal pass (or close): closing at once could end the session on the
   * server (its FIN may get through where the heartbeat did not) before
   * the core has reported the hold lost */
  PGconn *doomed[16];
  int ndoomed;
  pg_wait *waits;
  /* permit semaphores: the connection that LISTENs on dlock_permit (NULL
   * none), used under lmu (taken before mu; the loop only tries it), its
   * socket for the loop (under mu, -1 none), and how many permit waits
   * there are (under mu) */
  pthread_mutex_t lmu;
  PGconn *lsn;
  int lsn_fd;
  int nsync;
  int64_t psem_retry_ms; /* a permit wait retries at least this often */
  /* sent statements, oldest first (under mu; callers append, only the
   * loop removes), the tail's link, and how many of them the loop polls
   * as the first descriptors of its set (the loop's own) */
  pg_sent *sents, **sents_tail;
  int npolled;
  bool poked;       /* a send poked the loop since its last prepare */
  pg_sent *claims;  /* S_CLAIM grants (under mu) */
  bool dial_queued; /* the dialling worker dials a connection (under mu) */
} pg;

static void quiet_notices(void *arg, const char *msg) {
  (void)arg;
  (void)msg;
}

/* libpq's message on one line: newlines become "; ", no trailing space. */
static void one_line(const char *in, char *out, size_t cap) {
  size_t o = 0;
  bool sep = false;
  for (const char *s = in ? in : ""; *s && o + 3 < cap; s++) {
    if (*s == '\n' || *s == '\r' || *s == '\t') {
      sep = o > 0;
      continue;
    }
    if (sep) {
      out[o++] = ';';
      out[o++] = ' ';
      sep = false;
    }
    if (*s == ' ' && o > 0 && out[o - 1] == ' ')
      continue;
    out[o++] = *s;
  }
  while (o > 0 && (out[o - 1] == ' ' || out[o - 1] == ';'))
    o--;
  out[o] = '\0';
}

static int pg_err(pg *p, int code, const char *what, const char *libpq_msg) {
  char line[400];
  one_line(libpq_msg, line, sizeof line);
  dlock__seterr(code, "postgres %s: %s%s%s", p->where, what,
                line[0] ? ": " : "", line);
  if (p->password && p->password[0])
    dlock__scrub_error(p->password);
  return code;
}

/* The code a failed connection attempt gets, from libpq's text. */
static int connect_code(const char *msg) {
  if (!msg)
    return DLOCK_EUNAVAILABLE;
  if (strstr(msg, "password authentication failed") ||
      strstr(msg, "no password supplied") ||
      strstr(msg, "authentication failed") ||
      strstr(msg, "no pg_hba.conf entry"))
    return DLOCK_EAUTH;
  if (strstr(msg, "does not exist"))
    return DLOCK_ESERVER;
  if (strstr(msg, "SSL") && strstr(msg, "certificate"))
    return DLOCK_ETLS;
  if (strstr(msg, "invalid response to SSL negotiation") ||
      strstr(msg, "expected authentication request") ||
      strstr(msg, "unsupported frontend protocol") ||
      strstr(msg, "invalid length of startup packet") ||
      strstr(msg, "received invalid response") ||
      strstr(msg, "unexpected message from server") ||
      strstr(msg, "server closed the connection unexpectedly"))
    return DLOCK_EPROTO;
  return DLOCK_EUNAVAILABLE;
}

/* ------------------------------------------------------------ connections */

static int wait_socket(PGconn *c, short ev, int64_t deadline) {
  struct pollfd pfd = {.fd = PQsocket(c), .events = ev};
  if (pfd.fd < 0)
    return -1;
  for (;;) {
    int t = dlock__poll_timeout(deadline);
    int n = poll(&pfd, 1, t);
    if (n > 0)
      return 1;
    if (n == 0)
      return 0;
  }
}

static int dial(pg *p, PGconn **out) {
  *out = NULL;
  int64_t deadline = dlock__deadline_after(p->connect_timeout_ms);
  PGconn *c = PQconnectStartParams(p->kw, p->val, 0);
  if (!c)
    return dlock__seterr(DLOCK_ENOMEM, "postgres: out of memory");
  if (PQstatus(c) == CONNECTION_BAD) {
    int code = connect_code(PQerrorMessage(c));
    pg_err(p, code, "cannot connect", PQerrorMessage(c));
    PQfinish(c);
    return code;
  }
  PostgresPollingStatusType st = PGRES_POLLING_WRITING;
  while (st != PGRES_POLLING_OK) {
    if (st == PGRES_POLLING_FAILED) {
      int code = connect_code(PQerrorMessage(c));
      const char *msg = PQerrorMessage(c);
      pg_err(p, code,
             code == DLOCK_EPROTO ? "cannot connect (is it a PostgreSQL "
                                    "server?)"
                                  : "cannot connect",
             msg);
      PQfinish(c);
      return code;
    }
    int r = wait_socket(c, st == PGRES_POLLING_READING ? POLLIN : POLLOUT,
                        deadline);
    if (r == 0) {
      PQfinish(c);
      dlock__seterr(DLOCK_EIOTIMEOUT,
                    "postgres %s: no answer within the connect timeout "
                    "(%lld ms; is it a PostgreSQL server?)",
                    p->where, (long long)p->connect_timeout_ms);
      dlock__err_set_unsent(true);
      return DLOCK_EIOTIMEOUT;
    }
    st = PQconnectPoll(c);
  }
  PQsetNoticeProcessor(c, quiet_notices, NULL);
  if (PQserverVersion(c) < PG_MIN_VERSION) {
    int v = PQserverVersion(c);
    PQfinish(c);
    return dlock__seterr(DLOCK_ENOTSUP,
                         "postgres %s: the server is version %d.%d; dlock "
                         "needs PostgreSQL 14 or later (idle_session_timeout "
                         "enforces the lease)",
                         p->where, v / 10000, v % 10000);
  }
  if (PQsetnonblocking(c, 1) != 0) {
    PQfinish(c);
    return dlock__seterr(DLOCK_ESYS, "postgres: cannot make the connection "
                                     "non-blocking");
  }
  *out = c;
  return 0;
}

static void conn_close(void *c) { PQfinish(c); }

static bool conn_usable(void *c) { return PQstatus(c) == CONNECTION_OK; }

/* An idle connection (pooled or new). *fresh tells which; *idle is its
 * idle_session_timeout (0 on a new one). */
static int conn_get(pg *p, PGconn **out, bool *fresh, int64_t *idle) {
  PGconn *c = dlock__idle_take(&p->idle, dlock__now_ms(), idle);
  *fresh = c == NULL;
  if (c) {
    *out = c;
    return 0;
  }
  int rc = dial(p, out);
  if (rc)
    dlock__err_set_unsent(true);
  return rc;
}

/* Pools c, whose idle_session_timeout is `idle` ms (0 none; -1 unknown:
 * then it is closed). */
static void conn_put(pg *p, PGconn *c, int64_t idle) {
  if (!c)
    return;
  if (idle < 0 || PQstatus(c) != CONNECTION_OK ||
      PQtransactionStatus(c) != PQTRANS_IDLE) {
    PQfinish(c);
    return;
  }
  dlock__idle_put(&p->idle, c, idle, dlock__now_ms());
}

/* Puts sql on c without waiting: 0 all of it written, 1 some left for
 * PQflush, or the error (the connection is broken). */
static int send_start(pg *p, PGconn *c, const char *sql, int n,
                      const char *const *vals) {
  int f = -1;
  if (PQsendQueryParams(c, sql, n, NULL, vals, NULL, NULL, 0))
    f = PQflush(c);
  return f < 0 ? pg_err(p, DLOCK_EUNAVAILABLE, "connection lost",
                        PQerrorMessage(c))
               : f;
}

/* Sends sql on c (non-blocking), flushing by deadline. */
static int send_sql(pg *p, PGconn *c, const char *sql, int n,
                    const char *const *vals, int64_t deadline) {
  int f = send_start(p, c, sql, n, vals);
  while (f == 1) {
    int r = wait_socket(c, POLLOUT | POLLIN, deadline);
    if (r == 0)
      return dlock__seterr(DLOCK_EIOTIMEOUT,
                           "postgres %s: could not send within %lld ms",
                           p->where, (long long)p->command_timeout_ms);
    if ((r > 0 && !PQconsumeInput(c)) || (f = PQflush(c)) < 0)
      return pg_err(p, DLOCK_EUNAVAILABLE, "connection lost",
                    PQerrorMessage(c));
  }
  return f;
}

/* A statement's answer did not come by its deadline. */
static int no_answer(pg *p) {
  return dlock__seterr(DLOCK_EIOTIMEOUT,
                       "postgres %s: no answer within %lld ms", p->where,
                       (long long)p->command_timeout_ms);
}

/* The code of a statement's error result. */
static int result_error(pg *p, const PGresult *r) {
  const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
  const char *msg = PQresultErrorMessage(r);
  if (state && (strcmp(state, "22021") == 0 || strcmp(state, "22P05") == 0))
    return pg_err(p, DLOCK_EINVAL,
                  "the lock name is not valid text in the database's "
                  "encoding (names must be UTF-8)",
                  msg);
  if (state && strncmp(state, "57P", 3) == 0)
    return pg_err(p, DLOCK_EUNAVAILABLE, "the server ended the session", msg);
  if (state && strcmp(state, "42883") == 0)
    return pg_err(p, DLOCK_ENOTSUP,
                  "the server lacks a function dlock needs (PostgreSQL 14 or "
                  "later)",
                  msg);
  return pg_err(p, DLOCK_ESERVER, "statement failed", msg);
}

/* Reads every result of the statement in flight by deadline, keeping the
 * first that has rows in *res (the caller clears it; NULL if none): the
 * statements whose answer is a table (states, listings). */
static int read_rows(pg *p, PGconn *c, int64_t deadline, PGresult **res) {
  int rc = 0;
  *res = NULL;
  while (rc == 0) {
    while (rc == 0 && PQisBusy(c)) {
      int r = wait_socket(c, POLLIN, deadline);
      if (r == 0)
        rc = no_answer(p);
      else if (r < 0 || !PQconsumeInput(c))
        rc =
            pg_err(p, DLOCK_EUNAVAILABLE, "connection lost", PQerrorMessage(c));
    }
    if (rc)
      break;
    PGresult *r = PQgetResult(c);
    if (!r)
      break;
    if (!*res && PQresultStatus(r) == PGRES_TUPLES_OK)
      *res = r;
    else {
      if (!*res)
        rc = result_error(p, r);
      PQclear(r);
    }
  }
  return rc;
}

/* Takes the results of the statement in flight that libpq has read:
 * false while more are due; true once the statement is complete, *rc then
 * its outcome (the first result's error, or a lost connection) and val
 * the first row of the first result, its columns joined by '|' ('\0' if
 * none). *first and *rc carry the state from call to call (at the start:
 * true and 0). */
static bool results_in(pg *p, PGconn *c, bool *first, int *rc, char *val,
                       size_t cap) {
  while (!PQisBusy(c)) {
    PGresult *res = PQgetResult(c);
    if (!res) {
      if (*rc == 0 && PQstatus(c) != CONNECTION_OK)
        *rc =
            pg_err(p, DLOCK_EUNAVAILABLE, "connection lost", PQerrorMessage(c));
      return true;
    }
    ExecStatusType st = PQresultStatus(res);
    if (*first && *rc == 0) {
      if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
        if (val && cap && PQntuples(res) > 0 && PQnfields(res) > 0)
          for (int f = 0, o = 0; f < PQnfields(res) && o + 1 < (int)cap; f++) {
            int w = snprintf(val + o, cap - (size_t)o, "%s%s", f ? "|" : "",
                             PQgetvalue(res, 0, f));
            o += w > 0 ? w : 0;
          }
      } else {
        *rc = result_error(p, res);
      }
      *first = false;
    }
    PQclear(res);
  }
  return false;
}

/* Reads every result of the statement in flight by deadline (results_in
 * says what *val gets). */
static int read_result(pg *p, PGconn *c, int64_t deadline, char *val,
                       size_t cap) {
  int rc = 0;
  bool first = true;
  if (val && cap)
    val[0] = '\0';
  while (!results_in(p, c, &first, &rc, val, cap)) {
    int r = wait_socket(c, POLLIN, deadline);
    if (r == 0)
      return no_answer(p);
    if (r < 0 || !PQconsumeInput(c))
      return pg_err(p, DLOCK_EUNAVAILABLE, "connection lost",
                    PQerrorMessage(c));
  }
  return rc;
}

static int exec_sql(pg *p, PGconn *c, const char *sql, int n,
                    const char *const *vals, int64_t deadline, char *val,
                    size_t cap) {
  int rc = send_sql(p, c, sql, n, vals, deadline);
  if (rc == 0)
    rc = read_result(p, c, deadline, val, cap);
  return rc;
}

static int64_t cmd_deadline(pg *p) {
  return dlock__deadline_after(p->command_timeout_ms);
}

/* One statement on a pooled connection, given back after (closed when the
 * statement failed: its state is unknown). */
static int exec_pooled(pg *p, const char *sql, int n, const char *const *vals,
                       int64_t deadline, char *val, size_t cap) {
  PGconn *c;
  bool fresh;
  int64_t idle;
  int rc = conn_get(p, &c, &fresh, &idle);
  if (rc)
    return rc;
  rc = exec_sql(p, c, sql, n, vals, deadline, val, cap);
  if (rc)
    PQfinish(c);
  else
    conn_put(p, c, idle);
  return rc;
}

/* The idle_session_timeout a lease sets (its maximum is INT_MAX ms). */
static int64_t lease_idle(int64_t lease_ms) {
  return lease_ms > 2147483647 ? 2147483647 : lease_ms < 1 ? 1 : lease_ms;
}

static void lease_text(int64_t lease_ms, char *buf, size_t cap) {
  snprintf(buf, cap, "%lld", (long long)lease_idle(lease_ms));
}

/* ------------------------------------------------------------ bookkeeping */

static bool is_shared(dlock_lock_kind_t k) { return k == DLOCK_READ; }

static pg_hold *hold_find(pg *p, const char *name, const char *owner,
                          bool shared, pg_hold ***link) {
  for (pg_hold **hp = &p->holds; *hp; hp = &(*hp)->next)
    if (!(*hp)->permit && (*hp)->shared == shared &&
        strcmp((*hp)->name, name) == 0 && strcmp((*hp)->owner, owner) == 0) {
      if (link)
        *link = hp;
      return *hp;
    }
  return NULL;
}

static pg_hold *permit_find(pg *p, const char *name, const char *id,
                            pg_hold ***link) {
  for (pg_hold **hp = &p->holds; *hp; hp = &(*hp)->next)
    if ((*hp)->permit && strcmp((*hp)->name, name) == 0 &&
        strcmp((*hp)->owner, id) == 0) {
      if (link)
        *link = hp;
      return *hp;
    }
  return NULL;
}

static void hold_free(pg_hold *h) {
  if (!h)
    return;
  dlock__free(h->name);
  dlock__free(h->owner);
  dlock__free(h);
}

/* Records the hold (name, owner) of a lock granted on c, in server
 * process pid, its fencing token tok (0 none) and c's
 * idle_session_timeout idle (the lease). */
static int hold_add(pg *p, const char *name, const char *owner, bool shared,
                    PGconn *c, long pid, int64_t tok, int64_t idle) {
  pg_hold *h = dlock__calloc(1, sizeof *h);
  char *n = dlock__strdup(name), *o = dlock__strdup(owner);
  if (!h || !n || !o) {
    dlock__free(h);
    dlock__free(n);
    dlock__free(o);
    return DLOCK_ENOMEM;
  }
  h->name = n;
  h->owner = o;
  h->conn = c;
  h->count = 1;
  h->shared = shared;
  h->pid = pid;
  h->token = tok;
  h->idle = idle;
  pthread_mutex_lock(&p->mu);
  h->next = p->holds;
  p->holds = h;
  pthread_mutex_unlock(&p->mu);
  return 0;
}

static pg_wait *wait_find(pg *p, const char *name, const char *owner) {
  for (pg_wait *r = p->waits; r; r = r->next)
    if (!r->w->spec->sync && strcmp(r->w->spec->name, name) == 0 &&
        strcmp(r->w->spec->owner, owner) == 0)
      return r;
  return NULL;
}

/* Unlocks (if granted) and pools a connection whose hold nobody claims. */
static void give_back(pg *p, PGconn *c, const char *name, bool shared,
                      bool granted, int64_t idle) {
  if (!c)
    return;
  if (granted) {
    const char *v[1] = {name};
    char out[8];
    if (exec_sql(p, c, sql_unlock[shared], 1, v, cmd_deadline(p), out,
                 sizeof out) != 0) {
      PQfinish(c); /* the session ends, and the lock with it */
      return;
    }
    idle = 0; /* the unlock reset it */
  }
  conn_put(p, c, idle);
}

/* ------------------------------------------------------------ operations */

/* A statement of this connection ran in another server process than the
 * one that took the lock: something between dlock and PostgreSQL (a
 * transaction-mode pooler such as PgBouncer) shares server sessions, and
 * session locks cannot be kept through it. */
static int pooler_error(pg *p, const char *name) {
  return dlock__seterr(DLOCK_ENOTSUP,
                       "postgres %s: lock '%.200s': the server session "
                       "changed under the connection (a transaction-mode "
                       "pooler such as PgBouncer?); advisory locks need a "
                       "direct or session-mode connection",
                       p->where, name);
}

/* A try's statement on c, whose idle_session_timeout is idle: the bare
 * one when c's lease and owner are the ones wanted already. v (3) gets
 * its parameters, *n how many; lease (32 bytes) holds the lease's text. */
static const char *try_sql(const dlock__acquire *a, PGconn *c, int64_t idle,
                           char *lease, const char **v, int *n) {
  lease_text(a->lease_ms, lease, 32);
  v[0] = a->name;
  v[1] = lease;
  v[2] = a->owner;
  const char *app = PQparameterStatus(c, "application_name");
  bool set =
      idle != lease_idle(a->lease_ms) || !app || strcmp(app, a->owner) != 0;
  *n = set ? 3 : 1;
  return set ? sql_try[is_shared(a->kind)] : sql_try_bare[is_shared(a->kind)];
}

/* A try's answer ("granted|pid"): whether it was granted, and *pid. */
static bool try_answer(const char *out, long *pid) {
  const char *bar = strchr(out, '|');
  *pid = bar ? atol(bar + 1) : 0;
  return out[0] == 't';
}

static int try_lock(pg *p, const dlock__acquire *a, PGconn *c, int64_t idle,
                    bool *got, long *pid) {
  char lease[32], out[48] = "";
  const char *v[3];
  int n;
  const char *sql = try_sql(a, c, idle, lease, v, &n);
  int rc = exec_sql(p, c, sql, n, v, cmd_deadline(p), out, sizeof out);
  *got = try_answer(out, pid) && rc == 0;
  return rc;
}

/* A fenced grant's token, raised on the holding connection; the table is
 * created on first use (a concurrent creation is taken as done). */
static int next_token(pg *p, PGconn *c, const char *name, int64_t *token) {
  const char *v[1] = {name};
  char out[32];
  for (int round = 0;; round++) {
    int rc = exec_sql(p, c, SQL_TOKEN, 1, v, cmd_deadline(p), out, sizeof out);
    if (rc == 0) {
      *token = atoll(out);
      return 0;
    }
    if (round > 0 || !strstr(dlock_last_error(), "dlock_fence") ||
        PQstatus(c) != CONNECTION_OK)
      return rc;
    char ignored[8];
    rc = exec_sql(p, c, SQL_FENCE_TABLE, 0, NULL, cmd_deadline(p), ignored,
                  sizeof ignored);
    if (rc && PQstatus(c) != CONNECTION_OK)
      return rc;
  }
}

/* A grant on c: a fenced lock gets its token, then the hold is recorded
 * (c's idle_session_timeout: idle). On failure the lock is given up (the
 * connection unlocked or closed). */
static int grant(pg *p, const dlock__acquire *a, PGconn *c, long pid,
                 int64_t idle, int64_t *token) {
  int64_t tok = 0;
  if (a->kind == DLOCK_FENCED) {
    int rc = next_token(p, c, a->name, &tok);
    if (rc) {
      char saved[512];
      snprintf(saved, sizeof saved, "%s", dlock_last_error());
      give_back(p, c, a->name, false, true, 0);
      return dlock__seterr(rc, "%s", saved);
    }
  }
  if (hold_add(p, a->name, a->owner, is_shared(a->kind), c, pid, tok, idle) !=
      0) {
    give_back(p, c, a->name, is_shared(a->kind), true, 0);
    return dlock__seterr(DLOCK_ENOMEM, "postgres: out of memory");
  }
  if (token)
    *token = tok;
  return 1;
}

/* The end of a try (a lock's or a permit's) that failed with rc on c, a
 * pooled connection (`fresh`: dialled for it) in round 0 or 1 of the
 * try: its session ends, holding nothing. TRY_AGAIN when c was a pooled
 * connection the server had closed (a restart) and this was round 0: once
 * more on a new one; else the try's result: rc (a failure that sent
 * nothing marked so, for the wait to ride it out), or "connection lost"
 * when the second round's connection was lost too. */
#define TRY_AGAIN 1
static int try_failed(pg *p, PGconn *c, bool fresh, int rc, int round) {
  bool lost = PQstatus(c) != CONNECTION_OK;
  PQfinish(c);
  if (lost && !fresh)
    return round == 0 ? TRY_AGAIN
                      : dlock__seterr(DLOCK_EUNAVAILABLE,
                                      "postgres %s: connection lost", p->where);
  if (rc == DLOCK_EUNAVAILABLE || rc == DLOCK_EIOTIMEOUT)
    dlock__err_set_unsent(true);
  return rc;
}

/* What an acquire decides from this client's records alone (mu held): 1
 * a re-entry (the session holds it; counted here, *token the hold's),
 * DLOCK_EDEADLK (this thread holds the other side: its session and a new
 * one would block each other), or ASK_SERVER. A hold whose session was
 * lost is forgotten. */
#define ASK_SERVER 2
static int acquire_local_locked(pg *p, const dlock__acquire *a,
                                int64_t *token) {
  bool shared = is_shared(a->kind);
  pg_hold *other = hold_find(p, a->name, a->owner, !shared, NULL);
  if (other && other->conn)
    return dlock__seterr(
        DLOCK_EDEADLK,
        shared ? "lock '%.200s': this thread holds the write side; the "
                 "postgres backend cannot add the read side (release the "
                 "write side first)"
               : "lock '%.200s': this thread holds the read side; a reader "
                 "cannot take the write side",
        a->name);
  pg_hold **link = NULL;
  pg_hold *h = hold_find(p, a->name, a->owner, shared, &link);
  if (h && !h->conn) { /* a hold whose session was lost: forget it */
    *link = h->next;
    hold_free(h);
    return ASK_SERVER;
  }
  if (!h)
    return ASK_SERVER;
  /* reentry, also while a heartbeat is in flight on it (busy) */
  h->count++;
  if (token)
    *token = h->token;
  return 1;
}

/* The S_CLAIM grant of (name, owner) taken from the list (mu held), or
 * NULL. */
static pg_sent *claim_take_locked(pg *p, const dlock__acquire *a) {
  for (pg_sent **sp = &p->claims; *sp; sp = &(*sp)->next)
    if ((*sp)->a.kind == a->kind && strcmp((*sp)->a.name, a->name) == 0 &&
        strcmp((*sp)->a.owner, a->owner) == 0) {
      pg_sent *s = *sp;
      *sp = s->next;
      return s;
    }
  return NULL;
}

static int pg_lock_acquire(void *be, const dlock__acquire *a, int64_t *pttl,
                           int64_t *token) {
  pg *p = be;
  if (token)
    *token = 0;
  *pttl = -1;
  if (a->kind == DLOCK_FAIR)
    return dlock__seterr(DLOCK_ENOTSUP,
                         "the postgres backend has no fair lock");
  bool shared = is_shared(a->kind);
  pthread_mutex_lock(&p->mu);
  int local = acquire_local_locked(p, a, token);
  pg_sent *claim = local == ASK_SERVER ? claim_take_locked(p, a) : NULL;
  if (local != ASK_SERVER || claim) {
    pthread_mutex_unlock(&p->mu);
    if (!claim)
      return local;
    /* a sent try's grant whose token statement failed: on from there */
    PGconn *c = claim->conn;
    long pid = claim->pid;
    int64_t idle = claim->idle;
    dlock__free(claim);
    return grant(p, a, c, pid, idle, token);
  }
  pg_wait *r = wait_find(p, a->name, a->owner);
  if (r && r->state == W_SENT) {
    pthread_mutex_unlock(&p->mu);
    return 0;
  }
  if (r && r->state == W_FAILED) {
    PGconn *c = r->conn;
    r->conn = NULL;
    r->state = W_IDLE;
    char err[sizeof r->err], state[sizeof r->sqlstate];
    memcpy(err, r->err, sizeof err);
    memcpy(state, r->sqlstate, sizeof state);
    r->sqlstate[0] = '\0';
    int64_t idle0 = r->idle0;
    pthread_mutex_unlock(&p->mu);
    if (state[0]) {
      /* the statement failed, its session lives (and holds nothing from
       * it: its set_config calls were undone with it) */
      conn_put(p, c, idle0);
      /* the server's statement_timeout or lock_timeout cut the wait
       * short: wait again */
      if (strcmp(state, "57014") == 0 || strcmp(state, "55P03") == 0) {
        *pttl = 0;
        return 0;
      }
      if (strcmp(state, "40P01") == 0)
        return dlock__seterr(DLOCK_EDEADLK,
                             "%s (the server found this wait in a "
                             "deadlock)",
                             err);
      return dlock__seterr(DLOCK_ESERVER, "%s", err);
    }
    if (c)
      PQfinish(c);
    /* the session that waited is gone, and with it whatever it had
     * queued: the wait may go on as if nothing had been sent */
    dlock__seterr(DLOCK_EUNAVAILABLE, "%s", err);
    dlock__err_set_unsent(true);
    return DLOCK_EUNAVAILABLE;
  }
  if (r && r->state == W_GRANTED) {
    PGconn *c = r->conn;
    long pid = r->pid;
    r->conn = NULL;
    r->state = W_IDLE;
    pthread_mutex_unlock(&p->mu);
    /* claim: one round trip restarts the server's idle clock after this
     * attempt's start, from which the core dates the hold */
    char out[32];
    int rc =
        exec_sql(p, c, SQL_BEAT, 0, NULL, cmd_deadline(p), out, sizeof out);
    if (rc != 0) {
      PQfinish(c); /* its session, and the grant, are gone: wait again */
      *pttl = 0;
      return 0;
    }
    if (atol(out) != pid) {
      PQfinish(c);
      return pooler_error(p, a->name);
    }
    return grant(p, a, c, pid, lease_idle(a->lease_ms), token);
  }
  pthread_mutex_unlock(&p->mu);

  if (r) {
    /* within a wait: the server's queue does the waiting */
    PGconn *c;
    bool fresh;
    int64_t idle0;
    int rc = conn_get(p, &c, &fresh, &idle0);
    if (rc)
      return rc;
    char lease[32];
    lease_text(a->lease_ms, lease, sizeof lease);
    const char *v[3] = {a->name, lease, a->owner};
    rc = send_sql(p, c, sql_lock[shared], 3, v, cmd_deadline(p));
    if (rc) {
      PQfinish(c); /* its session ends: nothing stays queued */
      dlock__err_set_unsent(true);
      return rc;
    }
    pthread_mutex_lock(&p->mu);
    r->conn = c;
    r->idle0 = idle0;
    r->state = W_SENT;
    r->got_ok = r->got_err = false;
    pthread_mutex_unlock(&p->mu);
    dlock__client_poke(p->core);
    return 0;
  }

  /* a try */
  for (int round = 0;; round++) {
    PGconn *c;
    bool fresh, got = false;
    long pid = 0;
    int64_t idle;
    int rc = conn_get(p, &c, &fresh, &idle);
    if (rc)
      return rc;
    rc = try_lock(p, a, c, idle, &got, &pid);
    if (rc == 0 && got)
      return grant(p, a, c, pid, lease_idle(a->lease_ms), token);
    if (rc == 0) {
      conn_put(p, c, idle);
      return 0;
    }
    if ((rc = try_failed(p, c, fresh, rc, round)) != TRY_AGAIN)
      return rc;
  }
}

static int pg_lock_leave(void *be, const dlock__acquire *a, uint64_t seq,
                         int64_t *token) {
  (void)be;
  (void)a;
  (void)seq;
  if (token)
    *token = 0;
  return 0; /* a wait's statement is cancelled by wait_end */
}

/* A release's first half: DLOCK__REL_DOWN (one count less),
 * DLOCK__REL_NOTOWNER (no hold, or its session was lost), or UNLOCK: the
 * hold is gone from the records, and the unlock statement is to go on its
 * connection *c (idle_session_timeout *idle). A hold whose connection a
 * renewal is using is waited for, unless `wait` is false:
 * DLOCK__SEND_BLOCKS then. No request id and no lease: a retry finds the
 * hold gone, "not owner", which the core takes as the first attempt's
 * release, and the connection keeps the hold. */
#define UNLOCK 3
static int release_take(pg *p, const dlock__release *rel, bool wait, PGconn **c,
                        int64_t *idle) {
  const char *name = rel->name, *owner = rel->owner;
  bool shared = is_shared(rel->kind);
  pthread_mutex_lock(&p->mu);
  pg_hold **link = NULL;
  pg_hold *h = hold_find(p, name, owner, shared, &link);
  while (h && h->busy && wait) {
    pthread_cond_wait(&p->cond, &p->mu);
    h = hold_find(p, name, owner, shared, &link);
  }
  int out = !h                        ? DLOCK__REL_NOTOWNER
            : h->busy                 ? DLOCK__SEND_BLOCKS
            : h->conn && h->count > 1 ? DLOCK__REL_DOWN
                                      : UNLOCK;
  if (out == DLOCK__REL_DOWN)
    h->count--;
  if (out == UNLOCK)
    *link = h->next;
  pthread_mutex_unlock(&p->mu);
  if (out != UNLOCK)
    return out;
  *c = h->conn;
  *idle = h->idle;
  hold_free(h);
  return *c ? UNLOCK : DLOCK__REL_NOTOWNER; /* its session was lost */
}

/* A release's second half: the unlock statement on c ended with rc, its
 * answer out. c goes back to the pool, or is closed when it failed. */
static int release_end(pg *p, PGconn *c, int64_t idle, int rc,
                       const char *out) {
  if (rc) {
    /* the server had closed the session (terminated, restarted): the lock
     * went with it before this release; otherwise (no answer) the session
     * ends now, and the core's retry finds no hold: released */
    bool closed = rc == DLOCK_EUNAVAILABLE && PQstatus(c) == CONNECTION_BAD;
    PQfinish(c);
    return closed ? DLOCK__REL_NOTOWNER : rc;
  }
  conn_put(p, c, idle);
  return out[0] == 't' ? DLOCK__REL_FREED : DLOCK__REL_NOTOWNER;
}

static int pg_lock_release(void *be, const dlock__release *rel) {
  pg *p = be;
  PGconn *c;
  int64_t idle;
  int out = release_take(p, rel, true, &c, &idle);
  if (out != UNLOCK)
    return out;
  const char *v[1] = {rel->name};
  char val[8] = "";
  /* the lease and owner settings stay for the connection's next hold */
  int rc = exec_sql(p, c, sql_unlock_keep[is_shared(rel->kind)], 1, v,
                    cmd_deadline(p), val, sizeof val);
  return release_end(p, c, idle, rc, val);
}

static int pg_lock_renew(void *be, dlock__renewal *items, size_t n,
                         int64_t lease_ms, int64_t deadline) {
  (void)lease_ms;
  pg *p = be;
  int64_t cap = cmd_deadline(p);
  if (deadline > cap)
    deadline = cap;
  PGconn *old[16];
  pthread_mutex_lock(&p->mu);
  int nold = p->ndoomed;
  memcpy(old, p->doomed, sizeof old);
  p->ndoomed = 0;
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < nold; i++)
    PQfinish(old[i]);
  for (size_t i = 0; i < n; i++) {
    pthread_mutex_lock(&p->mu);
    pg_hold *h = items[i].kind == DLOCK__HK_PERMIT
                     ? permit_find(p, items[i].name, items[i].owner, NULL)
                     : hold_find(p, items[i].name, items[i].owner,
                                 items[i].kind == DLOCK__HK_READ, NULL);
    if (!h || !h->conn || h->busy) {
      items[i].result = h && h->conn ? 1 : 0;
      pthread_mutex_unlock(&p->mu);
      continue;
    }
    h->busy = true;
    PGconn *c = h->conn;
    pthread_mutex_unlock(&p->mu);
    char out[32];
    int rc = exec_sql(p, c, SQL_BEAT, 0, NULL, deadline, out, sizeof out);
    if (rc == 0 && atol(out) != h->pid)
      rc = pooler_error(p, items[i].name);
    pthread_mutex_lock(&p->mu);
    h->busy = false;
    if (rc) {
      /* no heartbeat: this client can no longer vouch for the session; the
       * server ends it (closed, or idle past the lease) */
      h->conn = NULL;
      if (p->ndoomed < (int)(sizeof p->doomed / sizeof p->doomed[0])) {
        p->doomed[p->ndoomed++] = c;
        c = NULL;
      }
    }
    items[i].result = rc ? 0 : 1;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->mu);
    if (rc) {
      dlock__log(p->core, DLOCK_LOG_WARN,
                 "postgres: heartbeat of %s '%.200s' failed (%s): the "
                 "hold is lost",
                 items[i].kind == DLOCK__HK_PERMIT ? "a permit of" : "lock",
                 items[i].name, dlock_last_error());
      if (c)
        PQfinish(c);
    }
  }
  return 0;
}

static int pg_lock_query(void *be, dlock_lock_kind_t kind, const char *name,
                         const char *owner, dlock__lock_query q, int64_t *out) {
  pg *p = be;
  if (q == DLOCK__Q_HELD || q == DLOCK__Q_COUNT) {
    pthread_mutex_lock(&p->mu);
    pg_hold *h =
        owner ? hold_find(p, name, owner, is_shared(kind), NULL) : NULL;
    *out = h && h->conn ? (q == DLOCK__Q_HELD ? 1 : h->count) : 0;
    pthread_mutex_unlock(&p->mu);
    return 0;
  }
  const char *v[1] = {name};
  char val[32];
  int rc = exec_pooled(p, SQL_LOCKED, 1, v, cmd_deadline(p), val, sizeof val);
  if (rc)
    return rc;
  bool locked = atoll(val) > 0;
  if (q == DLOCK__Q_LOCKED)
    *out = locked;
  else /* REMAINING: the server keeps no expiry date, only idle time */
    *out = locked ? -1 : -2;
  return 0;
}

/* A session's owner as dlock_lock_state shows it: the owner a dlock
 * client set as its application_name, else "pid N (application)". */
static char *owner_of(const char *pid, const char *app) {
  if (strlen(app) >= 38 && strchr(app, ':'))
    return dlock__strdup(app);
  return dlock__asprintf("pid %s (%s)", pid, app[0] ? app : "?");
}

static int pg_lock_state(void *be, dlock_lock_kind_t kind, const char *name,
                         dlock_lock_state_t **out) {
  pg *p = be;
  bool any_shared = false;
  *out = NULL;
  PGconn *c;
  bool fresh;
  int64_t idle;
  int rc = conn_get(p, &c, &fresh, &idle);
  if (rc)
    return rc;
  const char *v[1] = {name};
  rc = send_sql(p, c, SQL_STATE, 1, v, cmd_deadline(p));
  PGresult *res = NULL;
  if (rc == 0)
    rc = read_rows(p, c, cmd_deadline(p), &res);
  if (rc) {
    PQclear(res);
    PQfinish(c);
    return rc;
  }
  conn_put(p, c, idle);
  if (!res)
    return dlock__seterr(DLOCK_EPROTO, "postgres %s: no rows", p->where);
  int rows = PQntuples(res);
  dlock_lock_state_t *st = dlock__calloc(1, sizeof *st);
  if (st) {
    st->name = dlock__strdup(name);
    st->holders = dlock__calloc((size_t)rows + 1, sizeof *st->holders);
    st->waiters = dlock__calloc((size_t)rows + 1, sizeof *st->waiters);
  }
  if (!st || !st->name || !st->holders || !st->waiters) {
    PQclear(res);
    dlock_lock_state_free(st);
    return dlock__seterr(DLOCK_ENOMEM, "postgres: out of memory");
  }
  for (int i = 0; i < rows; i++) {
    bool granted = PQgetvalue(res, i, 0)[0] == 't';
    bool sh = strcmp(PQgetvalue(res, i, 3), "ShareLock") == 0;
    char *o = owner_of(PQgetvalue(res, i, 1), PQgetvalue(res, i, 2));
    if (!o)
      break;
    if (granted) {
      st->holders[st->nholders].owner = o;
      st->holders[st->nholders].count = 1;
      if (kind == DLOCK_READ || kind == DLOCK_WRITE)
        st->holders[st->nholders].side = sh ? "read" : "write";
      any_shared |= sh;
      pthread_mutex_lock(&p->mu);
      pg_hold *h = hold_find(p, name, o, sh, NULL);
      if (h)
        st->holders[st->nholders].count = h->count;
      pthread_mutex_unlock(&p->mu);
      st->nholders++;
    } else if (st->nwaiters < 100) {
      st->waiters[st->nwaiters++] = o;
    } else {
      dlock__free(o);
    }
  }
  PQclear(res);
  st->kind = !st->nholders                               ? "free"
             : any_shared                                ? "read"
             : kind == DLOCK_READ || kind == DLOCK_WRITE ? "write"
             : kind == DLOCK_FENCED                      ? "fenced"
                                                         : "reentrant";
  st->ttl_ms = st->nholders ? -1 : -2;
  *out = st;
  return 0;
}

static int pg_lock_force_release(void *be, dlock_lock_kind_t kind,
                                 const char *name, bool *deleted) {
  (void)kind;
  pg *p = be;
  *deleted = false;
  const char *v[1] = {name};
  char val[32];
  /* the holder's session ends: allow for its five seconds */
  int64_t deadline = dlock__deadline_after(p->command_timeout_ms + 5000);
  int rc = exec_pooled(p, SQL_FORCE, 1, v, deadline, val, sizeof val);
  if (rc)
    return rc;
  *deleted = atoll(val) > 0;
  return 0;
}

static int pg_ping(void *be) {
  char out[8];
  return exec_pooled(be, SQL_BEAT, 0, NULL, cmd_deadline(be), out, sizeof out);
}

/* ------------------------------------------------------------ permits */

/* The permit semaphore NAME (docs/POSTGRES.md): its size in a row of the
 * table dlock_semaphore (created on first use), permits in use as slot
 * advisory locks on hashtextextended(NAME, i) for slot i = 1..K, each held
 * by its holder's session; a release NOTIFYs the channel dlock_permit with
 * NAME as payload. `slots` is the largest size the semaphore had: slots
 * beyond the size (after it shrank) still count as in use. */
#define PSEM_MAX 10000
static const char SQL_SEM_TABLE[] =
    "CREATE TABLE IF NOT EXISTS dlock_semaphore (key bigint PRIMARY KEY, "
    "name text NOT NULL, permits bigint NOT NULL, slots bigint NOT NULL)";
/* slot locks granted among slots 1..d.slots of the semaphore $1 */
#define SQL_SLOT_MATCH(seed)                                                   \
  "l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted AND l.database = " \
  "(SELECT oid FROM pg_database WHERE datname = current_database()) AND "      \
  "l.classid = ((hashtextextended($1, " seed ") >> 32) & 4294967295)::oid "    \
  "AND l.objid = (hashtextextended($1, " seed ") & 4294967295)::oid"
#define SQL_IN_USE                                                             \
  "(SELECT count(*) FROM generate_series(1, d.slots) s(j), pg_locks l "        \
  "WHERE " SQL_SLOT_MATCH("s.j") ")"
/* $1 name, $2 lease (ms), $3 permit id: the first free slot of 1..K, taken
 * on this session, unless the semaphore shrank (slots > K); a row
 * (slot or NULL, set, pid, shrank) when the semaphore exists */
static const char SQL_PSEM_TRY[] =
    "SELECT t.i, CASE WHEN t.i IS NOT NULL THEN set_config("
    "'idle_session_timeout', $2, false) IS NOT NULL AND set_config("
    "'application_name', $3, false) IS NOT NULL END, pg_backend_pid(), "
    "d.slots > d.permits FROM dlock_semaphore d LEFT JOIN LATERAL (SELECT s.i "
    "FROM generate_series(1, CASE WHEN d.slots <= d.permits THEN d.permits "
    "ELSE 0 END) s(i) WHERE pg_try_advisory_lock(hashtextextended($1, s.i)) "
    "LIMIT 1) t ON true WHERE d.key = hashtextextended($1, 0)";
/* a semaphore that shrank: a slot of 1..K only while fewer than K are in
 * use on all its slots (slot, timeout, id, pid; no row: none) */
static const char SQL_PSEM_TRY_SHRUNK[] =
    "SELECT s.i, set_config('idle_session_timeout', $2, false), "
    "set_config('application_name', $3, false), pg_backend_pid() FROM "
    "generate_series(1, (SELECT CASE WHEN d.slots <= d.permits OR " SQL_IN_USE
    " < d.permits THEN d.permits ELSE 0 END FROM dlock_semaphore d WHERE d.key "
    "= hashtextextended($1, 0))) s(i) WHERE "
    "pg_try_advisory_lock(hashtextextended($1, s.i)) LIMIT 1";
/* $1 name, $2 slot */
static const char SQL_PSEM_RELEASE[] =
    "SELECT pg_advisory_unlock(hashtextextended($1, $2::bigint)), "
    "pg_notify('dlock_permit', $1)";
static const char SQL_PSEM_SET[] =
    "WITH i AS (INSERT INTO dlock_semaphore (key, name, permits, slots) VALUES "
    "(hashtextextended($1, 0), $1, $2::bigint, $2::bigint) ON CONFLICT (key) "
    "DO NOTHING RETURNING 1) SELECT (SELECT count(*) FROM i), (SELECT "
    "pg_notify('dlock_permit', $1) FROM i)";
static const char SQL_PSEM_ADD[] =
    "WITH u AS (INSERT INTO dlock_semaphore AS d (key, name, permits, slots) "
    "VALUES (hashtextextended($1, 0), $1, $2::bigint, greatest($2::bigint, 0)) "
    "ON CONFLICT (key) DO UPDATE SET permits = d.permits + $2::bigint, slots = "
    "greatest(d.slots, d.permits + $2::bigint) RETURNING permits, slots) "
    "SELECT (SELECT permits FROM u), (SELECT slots FROM u), (SELECT "
    "pg_notify('dlock_permit', $1) FROM u WHERE $2::bigint > 0)";
/* the size and the permits in use (no row: no semaphore) */
static const char SQL_PSEM_COUNT[] =
    "SELECT d.permits, " SQL_IN_USE " FROM dlock_semaphore d WHERE d.key = "
    "hashtextextended($1, 0)";
/* the holders: slot, pid, application_name (the permit id of a dlock
 * holder) */
static const char SQL_PSEM_HOLDERS[] =
    "SELECT s.j, l.pid, coalesce(a.application_name, '') FROM dlock_semaphore "
    "d, generate_series(1, d.slots) s(j), pg_locks l LEFT JOIN "
    "pg_stat_activity a ON a.pid = l.pid WHERE d.key = hashtextextended($1, "
    "0) AND " SQL_SLOT_MATCH("s.j") " ORDER BY s.j LIMIT 100";
/* deletes the row and ends the holders' sessions (5 s for each) */
static const char SQL_PSEM_DELETE[] =
    "WITH d AS (DELETE FROM dlock_semaphore WHERE key = hashtextextended($1, "
    "0) RETURNING slots) SELECT (SELECT count(*) FROM d), (SELECT count(*) "
    "FILTER (WHERE pg_terminate_backend(l.pid, 5000)) FROM d, "
    "generate_series(1, d.slots) s(j), pg_locks l WHERE " SQL_SLOT_MATCH(
        "s.j") "), pg_notify('dlock_permit', $1)";

/* Whether the last error says the table dlock_semaphore is missing (no
 * semaphore was ever made in this database). */
static bool no_sem_table(void) {
  const char *e = dlock_last_error();
  return strstr(e, "dlock_semaphore") && strstr(e, "does not exist");
}

/* One statement on a pooled connection; a missing table is created and
 * the statement run once more when `create`, else *absent is set (the
 * statement's error cleared). */
static int sem_exec(pg *p, const char *sql, int n, const char *const *vals,
                    bool create, bool *absent, char *val, size_t cap) {
  if (absent)
    *absent = false;
  for (int round = 0;; round++) {
    int rc = exec_pooled(p, sql, n, vals, cmd_deadline(p), val, cap);
    if (rc != DLOCK_ESERVER || !no_sem_table() || round > 0)
      return rc;
    if (!create) {
      if (absent)
        *absent = true;
      dlock__seterr(DLOCK_OK, "%s", "");
      return 0;
    }
    char ignored[8];
    rc = exec_pooled(p, SQL_SEM_TABLE, 0, NULL, cmd_deadline(p), ignored,
                     sizeof ignored);
    /* a concurrent creation: its table is there now */
    if (rc && rc != DLOCK_ESERVER)
      return rc;
  }
}

static int check_permits(int64_t n) {
  if (n > PSEM_MAX || n < -PSEM_MAX)
    return dlock__seterr(DLOCK_EINVAL,
                         "the postgres backend keeps one advisory lock per "
                         "permit: a semaphore has at most %d permits",
                         PSEM_MAX);
  return 0;
}

static int pg_sem_set(void *be, const char *name, int64_t permits, bool *set) {
  pg *p = be;
  *set = false;
  int rc = check_permits(permits);
  if (rc)
    return rc;
  char n[32], out[48];
  snprintf(n, sizeof n, "%lld", (long long)permits);
  const char *v[2] = {name, n};
  rc = sem_exec(p, SQL_PSEM_SET, 2, v, true, NULL, out, sizeof out);
  if (rc == 0)
    *set = atoll(out) > 0;
  return rc;
}

static int pg_sem_add(void *be, const char *name, int64_t n) {
  pg *p = be;
  int rc = check_permits(n);
  if (rc)
    return rc;
  char nb[32], out[64];
  snprintf(nb, sizeof nb, "%lld", (long long)n);
  const char *v[2] = {name, nb};
  rc = sem_exec(p, SQL_PSEM_ADD, 2, v, true, NULL, out, sizeof out);
  if (rc == 0 && strchr(out, '|') && atoll(strchr(out, '|') + 1) > PSEM_MAX) {
    /* grown past the bound: take the permits back */
    snprintf(nb, sizeof nb, "%lld", (long long)-n);
    sem_exec(p, SQL_PSEM_ADD, 2, v, true, NULL, out, sizeof out);
    return check_permits(PSEM_MAX + 1);
  }
  return rc;
}

static int pg_sem_counting(void *be, const char *name, int64_t permits) {
  (void)be;
  (void)name;
  (void)permits;
  return dlock__seterr(DLOCK_ENOTSUP,
                       "the postgres backend has no counting semaphores");
}

static int pg_sem_available(void *be, dlock__sync_kind kind, const char *name,
                            int64_t *out) {
  pg *p = be;
  *out = 0;
  if (kind != DLOCK__SYNC_PERMIT)
    return pg_sem_counting(be, name, 0);
  char val[64];
  const char *v[1] = {name};
  bool absent;
  int rc = sem_exec(p, SQL_PSEM_COUNT, 1, v, false, &absent, val, sizeof val);
  if (rc || absent || !val[0])
    return rc;
  const char *bar = strchr(val, '|');
  int64_t left = atoll(val) - (bar ? atoll(bar + 1) : 0);
  *out = left > 0 ? left : 0;
  return 0;
}

static int pg_sem_delete(void *be, dlock__sync_kind kind, const char *name,
                         bool *existed) {
  pg *p = be;
  *existed = false;
  if (kind != DLOCK__SYNC_PERMIT)
    return pg_sem_counting(be, name, 0);
  char val[64];
  const char *v[1] = {name};
  bool absent;
  int rc = sem_exec(p, SQL_PSEM_DELETE, 1, v, false, &absent, val, sizeof val);
  if (rc == 0 && !absent)
    *existed = atoll(val) > 0;
  return rc;
}

/* Wakes the permit waits of `name` (NULL: all of them). */
static void wake_permit_waits(pg *p, const char *name) {
  pthread_mutex_lock(&p->mu);
  for (pg_wait *r = p->waits; r; r = r->next)
    if (r->w->spec->sync && (!name || strcmp(r->w->spec->name, name) == 0))
      dlock__wait_wake(r->w);
  pthread_mutex_unlock(&p->mu);
}

/* The notifications that came on the listener (lmu held). */
static void drain_notifies(pg *p) {
  PGnotify *n;
  while ((n = PQnotifies(p->lsn)) != NULL) {
    wake_permit_waits(p, n->extra ? n->extra : "");
    PQfreemem(n);
  }
}

/* The listener is up, dialled (and every permit wait woken: a release
 * while it was down was not heard) if it is not. 0 or an error. */
static int ensure_listener(pg *p) {
  pthread_mutex_lock(&p->lmu);
  if (p->lsn && PQstatus(p->lsn) == CONNECTION_OK) {
    pthread_mutex_unlock(&p->lmu);
    return 0;
  }
  if (p->lsn) {
    pthread_mutex_lock(&p->mu);
    p->lsn_fd = -1;
    pthread_mutex_unlock(&p->mu);
    PQfinish(p->lsn);
    p->lsn = NULL;
  }
  PGconn *c;
  int rc = dial(p, &c);
  if (rc == 0) {
    char out[8];
    rc = exec_sql(p, c, "LISTEN dlock_permit", 0, NULL, cmd_deadline(p), out,
                  sizeof out);
    if (rc)
      PQfinish(c);
  }
  if (rc == 0) {
    p->lsn = c;
    pthread_mutex_lock(&p->mu);
    p->lsn_fd = PQsocket(c);
    pthread_mutex_unlock(&p->mu);
    drain_notifies(p);
  }
  pthread_mutex_unlock(&p->lmu);
  if (rc == 0) {
    wake_permit_waits(p, NULL);
    dlock__client_poke(p->core);
  }
  return rc;
}

/* The loop saw the listener readable (mu not held): its notifications
 * wake the waits they name; a listener the server closed is dropped and
 * every permit wait woken (the next attempt dials a new one). A caller
 * thread using it (lmu taken) drains it itself. */
static void listener_read(pg *p) {
  if (pthread_mutex_trylock(&p->lmu) != 0)
    return;
  if (p->lsn) {
    if (!PQconsumeInput(p->lsn) || PQstatus(p->lsn) != CONNECTION_OK) {
      pthread_mutex_lock(&p->mu);
      p->lsn_fd = -1;
      pthread_mutex_unlock(&p->mu);
      PQfinish(p->lsn);
      p->lsn = NULL;
      pthread_mutex_unlock(&p->lmu);
      wake_permit_waits(p, NULL);
      return;
    }
    drain_notifies(p);
  }
  pthread_mutex_unlock(&p->lmu);
}

static int pg_psem_acquire(void *be, const char *name, const char *id,
                           int64_t lease_ms, int64_t *retry_in_ms) {
  pg *p = be;
  /* a permit the server frees by ending its holder's session sends no
   * notification: a wait looks again at least this often */
  *retry_in_ms = p->psem_retry_ms;
  pthread_mutex_lock(&p->mu);
  bool waiting = p->nsync > 0;
  pthread_mutex_unlock(&p->mu);
  /* the wake-up path before the attempt, so no release goes unheard; a
   * listener that cannot be had leaves the waits to their bound */
  if (waiting && ensure_listener(p) != 0)
    dlock__log(p->core, DLOCK_LOG_WARN,
               "postgres: cannot listen for permit releases (%s): waits "
               "look again every %lld ms",
               dlock_last_error(), (long long)p->psem_retry_ms);
  char lease[32], out[200];
  lease_text(lease_ms, lease, sizeof lease);
  const char *v[3] = {name, lease, id};
  for (int round = 0;; round++) {
    PGconn *c;
    bool fresh;
    int64_t idle;
    int rc = conn_get(p, &c, &fresh, &idle);
    if (rc)
      return rc;
    rc = exec_sql(p, c, SQL_PSEM_TRY, 3, v, cmd_deadline(p), out, sizeof out);
    /* slot|set|pid|shrank: the pid, and whether the slow try is needed */
    const char *f2 = rc == 0 ? strchr(out, '|') : NULL;
    const char *f3 = f2 ? strchr(f2 + 1, '|') : NULL;
    const char *f4 = f3 ? strchr(f3 + 1, '|') : NULL;
    long pid = f3 ? atol(f3 + 1) : 0;
    if (rc == 0 && out[0] == '|' && f4 && f4[1] == 't') {
      rc = exec_sql(p, c, SQL_PSEM_TRY_SHRUNK, 3, v, cmd_deadline(p), out,
                    sizeof out);
      /* slot|timeout|id|pid */
      const char *bar = rc == 0 ? strrchr(out, '|') : NULL;
      pid = bar ? atol(bar + 1) : 0;
    }
    if (rc == 0 && out[0] && out[0] != '|') {
      int64_t slot = atoll(out);
      pg_hold *h = dlock__calloc(1, sizeof *h);
      char *n = dlock__strdup(name), *o = dlock__strdup(id);
      if (!h || !n || !o) {
        dlock__free(h);
        dlock__free(n);
        dlock__free(o);
        PQfinish(c); /* its session ends, and the permit with it */
        return dlock__seterr(DLOCK_ENOMEM, "postgres: out of memory");
      }
      h->name = n;
      h->owner = o;
      h->conn = c;
      h->count = 1;
      h->pid = pid;
      h->permit = true;
      h->slot = slot;
      h->idle = lease_idle(lease_ms);
      pthread_mutex_lock(&p->mu);
      h->next = p->holds;
      p->holds = h;
      pthread_mutex_unlock(&p->mu);
      return 1;
    }
    if (rc == 0 || (rc == DLOCK_ESERVER && no_sem_table() &&
                    PQstatus(c) == CONNECTION_OK)) {
      /* none free (no row or no table: no semaphore, no permits) */
      conn_put(p, c, idle);
      if (rc)
        dlock__seterr(DLOCK_OK, "%s", "");
      return 0;
    }
    if ((rc = try_failed(p, c, fresh, rc, round)) != TRY_AGAIN)
      return rc;
  }
}

static int pg_psem_release(void *be, const char *name, const char *id) {
  pg *p = be;
  pthread_mutex_lock(&p->mu);
  pg_hold **link = NULL;
  pg_hold *h = permit_find(p, name, id, &link);
  while (h && h->busy) {
    pthread_cond_wait(&p->cond, &p->mu);
    h = permit_find(p, name, id, &link);
  }
  if (!h) {
    pthread_mutex_unlock(&p->mu);
    return 0;
  }
  *link = h->next;
  pthread_mutex_unlock(&p->mu);
  PGconn *c = h->conn;
  int64_t idle = h->idle, slot = h->slot;
  hold_free(h);
  if (!c)
    return 0; /* its session was lost, and the permit with it */
  char sb[32], out[32];
  snprintf(sb, sizeof sb, "%lld", (long long)slot);
  const char *v[2] = {name, sb};
  int rc =
      exec_sql(p, c, SQL_PSEM_RELEASE, 2, v, cmd_deadline(p), out, sizeof out);
  if (rc) {
    /* as a lock's release: a session the server closed had lost the
     * permit; one that did not answer ends now */
    bool closed = rc == DLOCK_EUNAVAILABLE && PQstatus(c) == CONNECTION_BAD;
    PQfinish(c);
    return closed ? 0 : rc;
  }
  conn_put(p, c, idle);
  return out[0] == 't' ? 1 : 0;
}

/* A permit id as dlock_permit_sem_state lists it: the id a dlock holder
 * shows as its application_name, else "pid N (application)". */
static char *permit_of(const char *pid, const char *app) {
  size_t n = strlen(app);
  bool hex = n == 32;
  for (size_t i = 0; hex && i < n; i++)
    hex = (app[i] >= '0' && app[i] <= '9') || (app[i] >= 'a' && app[i] <= 'f');
  return hex ? dlock__strdup(app)
             : dlock__asprintf("pid %s (%s)", pid, app[0] ? app : "?");
}

/* Rows of one statement on a pooled connection: 0 and *res (NULL when the
 * table dlock_semaphore is missing), or an error. */
static int rows_pooled(pg *p, const char *sql, int n, const char *const *vals,
                       PGresult **out) {
  *out = NULL;
  PGconn *c;
  bool fresh;
  int64_t idle;
  int rc = conn_get(p, &c, &fresh, &idle);
  if (rc)
    return rc;
  rc = send_sql(p, c, sql, n, vals, cmd_deadline(p));
  PGresult *res = NULL;
  if (rc == 0)
    rc = read_rows(p, c, cmd_deadline(p), &res);
  if (rc == DLOCK_ESERVER && no_sem_table() && PQstatus(c) == CONNECTION_OK &&
      !PQisBusy(c)) {
    conn_put(p, c, idle);
    PQclear(res);
    dlock__seterr(DLOCK_OK, "%s", "");
    return 0;
  }
  if (rc) {
    PQclear(res);
    PQfinish(c);
    return rc;
  }
  conn_put(p, c, idle);
  if (!res)
    return dlock__seterr(DLOCK_EPROTO, "postgres %s: no rows", p->where);
  *out = res;
  return 0;
}

static int pg_psem_state(void *be, const char *name, dlock_sem_state_t **out) {
  pg *p = be;
  *out = NULL;
  int64_t avail = 0, in_use = 0;
  char val[64];
  const char *v[1] = {name};
  bool absent;
  int rc = sem_exec(p, SQL_PSEM_COUNT, 1, v, false, &absent, val, sizeof val);
  if (rc)
    return rc;
  if (!absent && val[0]) {
    const char *bar = strchr(val, '|');
    in_use = bar ? atoll(bar + 1) : 0;
    avail = atoll(val) - in_use > 0 ? atoll(val) - in_use : 0;
  }
  PGresult *res = NULL;
  if (!absent && val[0] && in_use > 0 &&
      (rc = rows_pooled(p, SQL_PSEM_HOLDERS, 1, v, &res)) != 0)
    return rc;
  int rows = res ? PQntuples(res) : 0;
  dlock_sem_state_t *st = dlock__calloc(1, sizeof *st);
  if (st) {
    st->name = dlock__strdup(name);
    st->permits = dlock__calloc((size_t)rows + 1, sizeof *st->permits);
  }
  if (!st || !st->name || !st->permits) {
    PQclear(res);
    dlock_sem_state_free(st);
    return dlock__seterr(DLOCK_ENOMEM, "postgres: out of memory");
  }
  st->available = avail;
  /* the list may see a holder the count did not (or not one it did) */
  st->in_use = in_use > rows ? in_use : rows;
  for (int i = 0; i < rows; i++) {
    char *id = permit_of(PQgetvalue(res, i, 1), PQgetvalue(res, i, 2));
    if (!id)
      break;
    st->permits[st->npermits].id = id;
    st->permits[st->npermits].expires_in_ms = -1;
    st->npermits++;
  }
  PQclear(res);
  *out = st;
  return 0;
}

/* ------------------------------------------------------------ waits */

static int pg_wait_begin(void *be, dlock__wait *w) {
  pg *p = be;
  bool sync = w->spec->sync;
  if (sync && w->spec->sync_kind != DLOCK__SYNC_PERMIT)
    return dlock__seterr(DLOCK_ENOTSUP, "the postgres backend has no counting "
                                        "semaphores or latches");
  pg_wait *r = dlock__calloc(1, sizeof *r);
  if (!r)
    return DLOCK_ENOMEM;
  r->w = w;
  w->reg = r;
  pthread_mutex_lock(&p->mu);
  r->next = p->waits;
  p->waits = r;
  if (sync)
    p->nsync++;
  pthread_mutex_unlock(&p->mu);
  /* a lock's wake-up path is the statement the next attempt sends; a
   * permit's is the listener (without it, the wait's bound) */
  if (sync && ensure_listener(p) != 0)
    dlock__log(p->core, DLOCK_LOG_WARN,
               "postgres: cannot listen for permit releases (%s): waits "
               "look again every %lld ms",
               dlock_last_error(), (long long)p->psem_retry_ms);
  dlock__wait_set_ready(w, true, false);
  return 0;
}

static bool pg_wait_hot(void *be, const dlock__wait_spec *spec) {
  (void)be;
  (void)spec;
  return false; /* always try once before waiting */
}

/* Cancels a pending lock statement; true when it had been granted all the
 * same (the caller then unlocks). The connection is finished on failure
 * (*c NULL). */
static bool cancel_pending(pg *p, PGconn **c) {
  PGcancel *k = PQgetCancel(*c);
  char errbuf[256];
  if (k) {
    PQcancel(k, errbuf, sizeof errbuf);
    PQfreeCancel(k);
  }
  char out[8];
  int rc = read_result(p, *c, cmd_deadline(p), out, sizeof out);
  if (rc == 0)
    return true; /* granted before the cancel arrived */
  if (PQstatus(*c) != CONNECTION_OK || PQisBusy(*c) ||
      PQtransactionStatus(*c) != PQTRANS_IDLE) {
    PQfinish(*c);
    *c = NULL;
  }
  return false;
}

static void pg_wait_end(void *be, dlock__wait *w) {
  pg *p = be;
  pg_wait *r = w->reg;
  if (!r)
    return;
  pthread_mutex_lock(&p->mu);
  for (pg_wait **rp = &p->waits; *rp; rp = &(*rp)->next)
    if (*rp == r) {
      *rp = r->next;
      break;
    }
  if (w->spec->sync)
    p->nsync--;
  PGconn *c = r->conn;
  int state = r->state;
  bool got_ok = r->got_ok, got_err = r->got_err;
  int64_t idle0 = r->idle0;
  pthread_mutex_unlock(&p->mu);
  w->reg = NULL;
  char err[sizeof r->err];
  memcpy(err, r->err, sizeof err);
  dlock__free(r);
  if (!c)
    return;
  /* the wait's outcome keeps its own error detail */
  char saved[512];
  snprintf(saved, sizeof saved, "%s", dlock_last_error());
  bool unsent = dlock__err_unsent(), worded = dlock__err_worded();
  if (state == W_GRANTED) {
    give_back(p, c, w->spec->name, is_shared(w->spec->lock_kind), true, 0);
  } else if (state == W_SENT) {
    bool granted = got_ok;
    if (!got_ok && !got_err)
      granted = cancel_pending(p, &c);
    else if (!PQisBusy(c)) /* drain what is left */
      granted = read_result(p, c, cmd_deadline(p), NULL, 0) == 0 && got_ok;
    if (c)
      give_back(p, c, w->spec->name, is_shared(w->spec->lock_kind), granted,
                idle0);
  } else {
    PQfinish(c);
  }
  (void)err;
  dlock__seterr(DLOCK_OK, "%s", saved);
  dlock__err_set_unsent(unsent);
  if (worded)
    dlock__err_set_worded();
}

/* ------------------------------------------------------------ sent */

/* lock_acquire_send and lock_release_send (backend.h): the try of a
 * reentrant or fenced lock on a pooled connection, and a release on its
 * hold's connection, put on the wire from the caller's thread; the event
 * loop reads the answer (pg_loop_prepare / pg_loop_dispatch: a sent
 * statement's socket is polled, its deadline enforced) and ends the
 * operation as the blocking one would, with the same statements, the same
 * records and the same errors (results_in, try_answer, try_failed, grant's
 * hold_add, release_end). A send never dials: with no idle connection it
 * answers DLOCK__SEND_BLOCKS, and the dialling worker pools one for the
 * sends to come. */

static pg_sent *sent_new(const dlock__acquire *a, dlock__sent_fn done,
                         void *arg) {
  size_t nl = strlen(a->name) + 1, ol = strlen(a->owner) + 1;
  pg_sent *s = dlock__calloc(1, sizeof *s + nl + ol);
  if (!s)
    return NULL;
  s->a = *a;
  s->a.bh = NULL;
  s->a.name = memcpy(s->names, a->name, nl);
  s->a.owner = memcpy(s->names + nl, a->owner, ol);
  s->done = done;
  s->arg = arg;
  return s;
}

/* Ends s: done(rc, x, y), with no mutex held, the error detail set. */
static void sent_end(pg_sent *s, int rc, int64_t x, int64_t y) {
  dlock__sent_fn done = s->done;
  void *arg = s->arg;
  dlock__free(s);
  done(arg, rc, x, y);
}

/* Puts s's next statement on its connection and hands it to the loop
 * (poked, unless a poke since its last prepare is pending): 0, or the
 * error of a send that failed (s is not listed then). */
static int sent_go(pg *p, pg_sent *s, const char *sql, int n,
                   const char *const *vals) {
  int f = send_start(p, s->conn, sql, n, vals);
  if (f < 0)
    return f;
  s->flushing = f == 1;
  s->first = true;
  s->rc = 0;
  s->out[0] = s->err[0] = '\0';
  s->deadline = cmd_deadline(p);
  s->next = NULL;
  pthread_mutex_lock(&p->mu);
  *p->sents_tail = s;
  p->sents_tail = &s->next;
  bool poke = !p->poked;
  p->poked = true;
  pthread_mutex_unlock(&p->mu);
  if (poke) /* the loop polls s's socket from its next round on */
    dlock__client_poke(p->core);
  return 0;
}

/* The dialling worker: a pooled connection for the sends to come. */
static void dial_job(void *arg) {
  pg *p = arg;
  char saved[512];
  snprintf(saved, sizeof saved, "%s", dlock_last_error());
  PGconn *c;
  if (dial(p, &c) == 0) /* a failure: the next send without one asks again */
    conn_put(p, c, 0);
  pthread_mutex_lock(&p->mu);
  p->dial_queued = false;
  pthread_mutex_unlock(&p->mu);
  dlock__seterr(DLOCK_OK, "%s", saved);
}

/* A pooled connection for a sent try, or NULL: none is idle (the dialling
 * worker is asked for one). One the server closed while it was idle (a
 * restart, its session terminated) is closed, and the next one taken. */
static PGconn *sent_conn(pg *p, int64_t *idle) {
  for (;;) {
    PGconn *c = dlock__idle_take(&p->idle, dlock__now_ms(), idle);
    pthread_mutex_lock(&p->mu);
    bool dial = !c && !p->dial_queued;
    p->dial_queued |= dial;
    pthread_mutex_unlock(&p->mu);
    if (dial && dlock__client_run_dial(p->core, dial_job, p) != 0) {
      pthread_mutex_lock(&p->mu);
      p->dial_queued = false;
      pthread_mutex_unlock(&p->mu);
    }
    if (!c)
      return NULL;
    /* an idle connection says something only when its session ends (the
     * server's FATAL, then the end of the stream: read apart) */
    struct pollfd pfd = {.fd = PQsocket(c), .events = POLLIN};
    bool ok = true;
    for (int i = 0; ok && i < 3 && poll(&pfd, 1, 0) > 0; i++)
      ok = PQconsumeInput(c) && PQstatus(c) == CONNECTION_OK && !PQisBusy(c);
    if (ok)
      return c;
    PQfinish(c);
  }
}

static int pg_lock_acquire_send(void *be, const dlock__acquire *a,
                                dlock__sent_fn done, void *arg) {
  pg *p = be;
  if (a->kind != DLOCK_REENTRANT && a->kind != DLOCK_FENCED)
    return DLOCK__SEND_BLOCKS;
  pg_sent *s = sent_new(a, done, arg);
  if (!s)
    return dlock__seterr(DLOCK_ENOMEM, "postgres: out of memory");
  int64_t tok = 0;
  pthread_mutex_lock(&p->mu);
  int local = acquire_local_locked(p, a, &tok);
  /* a wait of this owner's, or a grant to claim: the blocking try's */
  if (local == ASK_SERVER &&
      (wait_find(p, a->name, a->owner) || p->claims != NULL))
    local = DLOCK__SEND_BLOCKS;
  pthread_mutex_unlock(&p->mu);
  if (local == ASK_SERVER) {
    char lease[32];
    const char *v[3];
    int n;
    while ((s->conn = sent_conn(p, &s->idle)) != NULL) {
      s->step = S_TRY;
      const char *sql = try_sql(&s->a, s->conn, s->idle, lease, v, &n);
      if (sent_go(p, s, sql, n, v) == 0)
        return 0;
      PQfinish(s->conn); /* broken, and nothing sent: the next one */
    }
    local = DLOCK__SEND_BLOCKS;
  }
  dlock__free(s);
  if (local == DLOCK__SEND_BLOCKS)
    return local;
  done(arg, local, -1, tok); /* a re-entry, or EDEADLK */
  return 0;
}

static int pg_lock_release_send(void *be, const dlock__release *r,
                                dlock__sent_fn done, void *arg) {
  pg *p = be;
  dlock__acquire a = {.kind = r->kind, .name = r->name, .owner = r->owner};
  pg_sent *s = sent_new(&a, done, arg);
  if (!s)
    return dlock__seterr(DLOCK_ENOMEM, "postgres: out of memory");
  int out = release_take(p, r, false, &s->conn, &s->idle);
  if (out == UNLOCK) {
    s->step = S_UNLOCK;
    const char *v[1] = {r->name};
    int rc = sent_go(p, s, sql_unlock_keep[is_shared(r->kind)], 1, v);
    if (rc == 0)
      return 0;
    out = release_end(p, s->conn, s->idle, rc, "");
  }
  dlock__free(s);
  if (out == DLOCK__SEND_BLOCKS)
    return out;
  done(arg, out, 0, 0);
  return 0;
}

/* s's connection was ready (or s is overdue): true once its statement is
 * complete (s->rc, s->out, s->err). */
static bool sent_read(pg *p, pg_sent *s) {
  int f = s->flushing ? PQflush(s->conn) : 0;
  s->flushing = f == 1;
  if (f < 0 || !PQconsumeInput(s->conn)) {
    s->rc = pg_err(p, DLOCK_EUNAVAILABLE, "connection lost",
                   PQerrorMessage(s->conn));
    snprintf(s->err, sizeof s->err, "%s", dlock_last_error());
    return true;
  }
  bool complete =
      results_in(p, s->conn, &s->first, &s->rc, s->out, sizeof s->out);
  if (s->rc && !s->err[0])
    snprintf(s->err, sizeof s->err, "%s", dlock_last_error());
  return complete;
}

/* s's statement is complete, or failed (s->rc: an overdue one
 * DLOCK_EIOTIMEOUT): its next statement goes out, or it ends as the
 * blocking operation would. On the loop's thread, no mutex held. */
static void sent_next(pg *p, pg_sent *s) {
  int rc = s->rc;
  PGconn *c = s->conn;
  if (rc)
    dlock__seterr(rc, "%s", s->err);
  if (s->step == S_UNLOCK) {
    sent_end(s, release_end(p, c, s->idle, rc, s->out), 0, 0);
    return;
  }
  if (s->step == S_TRY) {
    if (rc) { /* its session ends, holding nothing */
      rc = try_failed(p, c, false, rc, 0);
      sent_end(s, rc == TRY_AGAIN ? DLOCK__SEND_BLOCKS : rc, -1, 0);
      return;
    }
    if (!try_answer(s->out, &s->pid)) {
      conn_put(p, c, s->idle);
      sent_end(s, 0, -1, 0);
      return;
    }
    s->idle = lease_idle(s->a.lease_ms);
    if (s->a.kind == DLOCK_FENCED) {
      s->step = S_TOKEN;
      const char *v[1] = {s->a.name};
      if ((rc = sent_go(p, s, SQL_TOKEN, 1, v)) == 0)
        return;
    }
  }
  if (rc && PQstatus(c) == CONNECTION_OK && !PQisBusy(c)) {
    /* the token statement failed (the table dlock_fence missing, say):
     * the blocking try goes on from this grant (claim_take_locked) */
    dlock__sent_fn done = s->done;
    void *arg = s->arg;
    s->step = S_CLAIM;
    pthread_mutex_lock(&p->mu);
    s->next = p->claims;
    p->claims = s; /* from here on, s is the claimer's */
    pthread_mutex_unlock(&p->mu);
    done(arg, DLOCK__SEND_BLOCKS, 0, 0);
    return;
  }
  if (rc) { /* lost (nothing is held then), or no answer */
    bool lost = PQstatus(c) != CONNECTION_OK;
    PQfinish(c);
    sent_end(s, lost ? DLOCK__SEND_BLOCKS : rc, -1, 0);
    return;
  }
  int64_t tok = s->step == S_TOKEN ? atoll(s->out) : 0;
  if (hold_add(p, s->a.name, s->a.owner, false, c, s->pid, tok, s->idle)) {
    PQfinish(c); /* its session ends, and the lock with it */
    sent_end(s, dlock__seterr(DLOCK_ENOMEM, "postgres: out of memory"), -1, 0);
    return;
  }
  sent_end(s, 1, -1, tok);
}

/* Goes on with each of list (sent statements the loop took out of
 * p->sents) whose statement is complete; one that is not goes back to the
 * head of the list, or, `overdue`, ends in DLOCK_EIOTIMEOUT. */
static void sents_run(pg *p, pg_sent *list, bool overdue) {
  pg_sent *back = NULL, **bt = &back;
  while (list) {
    pg_sent *s = list;
    list = s->next;
    s->next = NULL;
    if (!sent_read(p, s) && !overdue) {
      *bt = s;
      bt = &s->next;
      continue;
    }
    if (!s->rc && PQisBusy(s->conn)) { /* overdue: as a silent server's */
      s->rc = no_answer(p);
      snprintf(s->err, sizeof s->err, "%s", dlock_last_error());
    }
    sent_next(p, s);
  }
  if (back) {
    pthread_mutex_lock(&p->mu);
    *bt = p->sents;
    if (!p->sents)
      p->sents_tail = bt;
    p->sents = back;
    pthread_mutex_unlock(&p->mu);
  }
}

/* ------------------------------------------------------------ the loop */

/* Adds fd to the loop's poll set for events; false when the set is
 * full. */
static bool poll_add(struct pollfd *fds, int *n, int max, int fd,
                     short events) {
  if (*n == max)
    return false;
  fds[*n].fd = fd;
  fds[*n].events = events;
  fds[*n].revents = 0;
  (*n)++;
  return true;
}

/* Adds c's socket to the loop's poll set for reading. */
static bool poll_in(struct pollfd *fds, int *n, int max, PGconn *c) {
  return poll_add(fds, n, max, PQsocket(c), POLLIN);
}

static int pg_loop_prepare(void *be, int64_t now, struct pollfd *fds, int max,
                           int64_t *until) {
  pg *p = be;
  int64_t swept = dlock__idle_sweep(&p->idle, now);
  if (swept < *until)
    *until = swept;
  int n;
  bool more;
  pthread_mutex_lock(&p->mu);
  p->poked = false; /* what is sent from here on pokes again */
  for (;;) {
    /* sent statements first, the oldest first; the overdue ones end */
    n = 0;
    more = false;
    pg_sent *over = NULL, **ot = &over, **sp = &p->sents;
    while (*sp) {
      pg_sent *s = *sp;
      if (now >= s->deadline) {
        *sp = s->next;
        *ot = s;
        ot = &s->next;
        continue;
      }
      more = more || !poll_add(fds, &n, max, PQsocket(s->conn),
                               s->flushing ? POLLIN | POLLOUT : POLLIN);
      if (s->deadline < *until)
        *until = s->deadline;
      sp = &s->next;
    }
    p->sents_tail = sp;
    p->npolled = n;
    if (!over)
      break;
    *ot = NULL;
    pthread_mutex_unlock(&p->mu);
    sents_run(p, over, true); /* may send a next statement: look again */
    pthread_mutex_lock(&p->mu);
  }
  for (pg_wait *r = p->waits; r && !more; r = r->next)
    if (r->state == W_SENT && r->conn)
      more = !poll_in(fds, &n, max, r->conn);
  /* an idle holding connection says something only when the server ends
   * the session (a restart, pg_terminate_backend, its idle timeout) */
  for (pg_hold *h = p->holds; h && !more; h = h->next)
    if (h->conn && !h->busy && !h->broken)
      more = !poll_in(fds, &n, max, h->conn);
  if (p->lsn_fd >= 0 && !more)
    more = !poll_add(fds, &n, max, p->lsn_fd, POLLIN);
  pthread_mutex_unlock(&p->mu);
  if (more) { /* more than the loop polls: look again soon */
    int64_t soon = now + 100;
    if (soon < *until)
      *until = soon;
  }
  return n;
}

/* A pending statement's connection is readable: its outcome, if complete. */
static void pending_read(pg_wait *r) {
  PGconn *c = r->conn;
  if (!PQconsumeInput(c)) {
    r->state = W_FAILED;
    char line[150];
    one_line(PQerrorMessage(c), line, sizeof line);
    snprintf(r->err, sizeof r->err,
             "postgres: connection lost while "
             "waiting (%s)",
             line);
    return;
  }
  while (!PQisBusy(c)) {
    PGresult *res = PQgetResult(c);
    if (!res) {
      if (r->got_ok) {
        r->state = W_GRANTED;
      } else {
        r->state = W_FAILED;
        if (!r->err[0])
          snprintf(r->err, sizeof r->err, "postgres: the wait ended");
      }
      return;
    }
    if (!r->got_ok && !r->got_err) {
      if (PQresultStatus(res) == PGRES_TUPLES_OK) {
        r->got_ok = true;
        if (PQntuples(res) > 0 && PQnfields(res) > 3)
          r->pid = atol(PQgetvalue(res, 0, 3));
      } else {
        r->got_err = true;
        const char *st = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        snprintf(r->sqlstate, sizeof r->sqlstate, "%s", st ? st : "");
        char line[150];
        one_line(PQresultErrorMessage(res), line, sizeof line);
        snprintf(r->err, sizeof r->err, "postgres: waiting failed: %s", line);
      }
    }
    PQclear(res);
  }
}

static void pg_loop_dispatch(void *be, int64_t now, const struct pollfd *fds,
                             int n) {
  (void)now;
  pg *p = be;
  /* the first npolled descriptors are sent statements', in the list's
   * order (only the loop removes from it) */
  pg_sent *ready = NULL, **rt = &ready;
  pthread_mutex_lock(&p->mu);
  pg_sent **sp = &p->sents;
  for (int i = 0; i < p->npolled && *sp; i++) {
    pg_sent *s = *sp;
    if (fds[i].revents && fds[i].fd == PQsocket(s->conn)) {
      *sp = s->next;
      *rt = s;
      rt = &s->next;
    } else {
      sp = &s->next;
    }
  }
  if (!*sp)
    p->sents_tail = sp;
  *rt = NULL;
  pthread_mutex_unlock(&p->mu);
  if (ready)
    sents_run(p, ready, false);
  bool broke = false, heard = false;
  pthread_mutex_lock(&p->mu);
  for (int i = p->npolled; i < n; i++) {
    if (!fds[i].revents)
      continue;
    if (p->lsn_fd >= 0 && fds[i].fd == p->lsn_fd) {
      heard = true;
      continue;
    }
    bool found = false;
    for (pg_wait *r = p->waits; r; r = r->next) {
      if (r->state != W_SENT || !r->conn || PQsocket(r->conn) != fds[i].fd)
        continue;
      pending_read(r);
      if (r->state != W_SENT)
        dlock__wait_wake(r->w);
      found = true;
      break;
    }
    /* a holding connection not in use (a renewal marks it busy under mu
     * before it touches it): the server closed it, or sent its reason
     * first (FATAL) and closes next */
    for (pg_hold *h = p->holds; h && !found; h = h->next) {
      if (!h->conn || h->busy || h->broken || PQsocket(h->conn) != fds[i].fd)
        continue;
      if (!PQconsumeInput(h->conn) || PQstatus(h->conn) == CONNECTION_BAD) {
        h->broken = true;
        broke = true;
      }
      break;
    }
  }
  pthread_mutex_unlock(&p->mu);
  if (heard)
    listener_read(p);
  if (broke) /* its heartbeat fails now, and the core reports the loss */
    dlock__holds_renew_now(p->core);
}

/* ------------------------------------------------------------ open, close */

static void pg_free(pg *p) {
  if (!p)
    return;
  /* sent operations still in flight (the core waits for them before it
   * closes, so none should be): their sessions end, and so do they */
  while (p->sents) {
    pg_sent *s = p->sents;
    p->sents = s->next;
    PQfinish(s->conn);
    sent_end(s, dlock__seterr(DLOCK_ECLOSED, "the client is being freed"), -1,
             0);
  }
  while (p->claims) {
    pg_sent *s = p->claims;
    p->claims = s->next;
    PQfinish(s->conn);
    dlock__free(s);
  }
  dlock__idle_destroy(&p->idle);
  for (int i = 0; i < p->ndoomed; i++)
    PQfinish(p->doomed[i]);
  while (p->holds) {
    pg_hold *h = p->holds;
    p->holds = h->next;
    if (h->conn)
      PQfinish(h->conn); /* the session ends, and its locks with it */
    hold_free(h);
  }
  while (p->waits) {
    pg_wait *r = p->waits;
    p->waits = r->next;
    if (r->conn)
      PQfinish(r->conn);
    dlock__free(r);
  }
  if (p->lsn)
    PQfinish(p->lsn);
  for (int i = 0; i < p->nowned; i++)
    dlock__free(p->owned[i]);
  dlock__free(p->password);
  pthread_mutex_destroy(&p->mu);
  pthread_mutex_destroy(&p->lmu);
  pthread_cond_destroy(&p->cond);
  dlock__free(p);
}

static const char *own(pg *p, char *s) {
  if (!s || p->nowned >= (int)(sizeof p->owned / sizeof p->owned[0])) {
    dlock__free(s);
    return NULL;
  }
  p->owned[p->nowned++] = s;
  return s;
}

/* Sets keyword kw to val unless the URL set it (or `force`). */
static int set_kw(pg *p, int *n, const char *kw, const char *val, bool force) {
  for (int i = 0; i < *n; i++)
    if (strcmp(p->kw[i], kw) == 0) {
      if (force)
        p->val[i] = own(p, dlock__strdup(val));
      return p->val[i] ? 0 : DLOCK_ENOMEM;
    }
  if (*n >= PG_KW_MAX)
    return dlock__seterr(DLOCK_EURL, "bad URL: too many parameters");
  p->kw[*n] = own(p, dlock__strdup(kw));
  p->val[*n] = own(p, dlock__strdup(val));
  if (!p->kw[*n] || !p->val[*n])
    return DLOCK_ENOMEM;
  (*n)++;
  return 0;
}

/* The password of a URL's userinfo, to scrub from libpq's messages. */
static char *url_password(const char *url) {
  const char *s = strstr(url, "://");
  if (!s)
    return NULL;
  s += 3;
  const char *end = s + strcspn(s, "/?#");
  const char *at = NULL;
  for (const char *q = s; q < end; q++)
    if (*q == '@')
      at = q;
  if (!at)
    return NULL;
  const char *colon = memchr(s, ':', (size_t)(at - s));
  if (!colon || colon + 1 >= at)
    return NULL;
  return dlock__strndup(colon + 1, (size_t)(at - colon - 1));
}

static int parse_url(pg *p, const char *url, const struct dlock_options *o) {
  /* libpq knows its schemes in lower case only */
  const char *sep = strstr(url, "://");
  size_t slen = sep ? (size_t)(sep - url) : 0;
  char *copy = dlock__strdup(url);
  if (!copy)
    return DLOCK_ENOMEM;
  for (size_t i = 0; i < slen; i++)
    if (copy[i] >= 'A' && copy[i] <= 'Z')
      copy[i] = (char)(copy[i] - 'A' + 'a');
  p->password = url_password(url);
  char *errmsg = NULL;
  PQconninfoOption *opts = PQconninfoParse(copy, &errmsg);
  dlock__free(copy);
  if (!opts) {
    char line[300];
    one_line(errmsg ? errmsg : "out of memory", line, sizeof line);
    if (errmsg)
      PQfreemem(errmsg);
    dlock__seterr(DLOCK_EURL, "bad URL: %s", line);
    if (p->password && p->password[0])
      dlock__scrub_error(p->password);
    return DLOCK_EURL;
  }
  int n = 0, rc = 0;
  for (PQconninfoOption *it = opts; it->keyword && rc == 0; it++)
    if (it->val)
      rc = set_kw(p, &n, it->keyword, it->val, true);
  PQconninfoFree(opts);
  if (rc)
    return rc;
  char buf[32];
  int64_t lease_s = (o->watchdog_ms + 999) / 1000;
  if (lease_s < 3)
    lease_s = 3;
  rc = set_kw(p, &n, "application_name", "dlock", false);
  if (!rc)
    rc = set_kw(p, &n, "client_encoding", "UTF8", false);
  if (!rc)
    rc = set_kw(p, &n, "keepalives", "1", false);
  snprintf(buf, sizeof buf, "%lld", (long long)(lease_s / 3));
  if (!rc)
    rc = set_kw(p, &n, "keepalives_idle", buf, false);
  if (!rc)
    rc = set_kw(p, &n, "keepalives_interval", "1", false);
  if (!rc)
    rc = set_kw(p, &n, "keepalives_count", "3", false);
  snprintf(buf, sizeof buf, "%lld", (long long)o->watchdog_ms);
  if (!rc)
    rc = set_kw(p, &n, "tcp_user_timeout", buf, false);
  if (!rc && o->credentials_set && o->user)
    rc = set_kw(p, &n, "user", o->user, true);
  if (!rc && o->credentials_set && o->password) {
    rc = set_kw(p, &n, "password", o->password, true);
    dlock__free(p->password);
    p->password = dlock__strdup(o->password);
  }
  if (rc)
    return rc;
  p->kw[n] = NULL;
  p->val[n] = NULL;
  const char *host = "localhost", *port = "5432", *db = NULL, *user = NULL;
  for (int i = 0; i < n; i++) {
    if (strcmp(p->kw[i], "host") == 0 || strcmp(p->kw[i], "hostaddr") == 0)
      host = p->val[i];
    else if (strcmp(p->kw[i], "port") == 0)
      port = p->val[i];
    else if (strcmp(p->kw[i], "dbname") == 0)
      db = p->val[i];
    else if (strcmp(p->kw[i], "user") == 0)
      user = p->val[i];
  }
  snprintf(p->where, sizeof p->where, "%.60s:%.10s/%.60s", host, port,
           db     ? db
           : user ? user
                  : "");
  return 0;
}

static int pg_open(void **be, const char *url, const struct dlock_options *o,
                   struct dlock_client *core) {
  *be = NULL;
  pg *p = dlock__calloc(1, sizeof *p);
  if (!p)
    return DLOCK_ENOMEM;
  pthread_mutex_init(&p->mu, NULL);
  pthread_mutex_init(&p->lmu, NULL);
  dlock__idle_init(&p->idle, o->pool_size, conn_close, conn_usable);
  p->lsn_fd = -1;
  p->sents_tail = &p->sents;
  p->psem_retry_ms = o->watchdog_ms / 3 > 100 ? o->watchdog_ms / 3 : 100;
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_cond_init(&p->cond, &attr);
  pthread_condattr_destroy(&attr);
  p->core = core;
  p->connect_timeout_ms = o->connect_timeout_ms;
  p->command_timeout_ms = o->command_timeout_ms;
  int rc = parse_url(p, url, o);
  if (rc) {
    pg_free(p);
    return rc;
  }
  PGconn *c;
  rc = dial(p, &c);
  if (rc) {
    pg_free(p);
    return rc;
  }
  conn_put(p, c, 0);
  *be = p;
  return 0;
}

static void pg_close(void *be) { pg_free(be); }

const dlock__backend_ops dlock__postgres_backend = {
    .name = "postgres",
    .schemes = pg_schemes,
    .lock_kinds = (1u << DLOCK_REENTRANT) | (1u << DLOCK_FENCED) |
                  (1u << DLOCK_READ) | (1u << DLOCK_WRITE),
    .sync_kinds = 1u << DLOCK__SYNC_PERMIT,
    .queue_kinds = 0,
    .kinds_why =
        "the postgres backend offers reentrant, fenced and read-write locks "
        "and permit semaphores: its advisory locks show no queue order (no "
        "fair lock), and a counting semaphore's or a latch's count has no "
        "session to hold it",
    .open = pg_open,
    .close = pg_close,
    .ping = pg_ping,
    .lock_acquire = pg_lock_acquire,
    .lock_leave = pg_lock_leave,
    .lock_release = pg_lock_release,
    .lock_acquire_send = pg_lock_acquire_send,
    .lock_release_send = pg_lock_release_send,
    .lock_renew = pg_lock_renew,
    .lock_force_release = pg_lock_force_release,
    .lock_query = pg_lock_query,
    .lock_state = pg_lock_state,
    .wait_begin = pg_wait_begin,
    .wait_hot = pg_wait_hot,
    .wait_end = pg_wait_end,
    .loop_prepare = pg_loop_prepare,
    .loop_dispatch = pg_loop_dispatch,
    .sem_set = pg_sem_set,
    .sem_add = pg_sem_add,
    .sem_acquire = pg_sem_counting,
    .sem_release = pg_sem_counting,
    .sem_available = pg_sem_available,
    .sem_delete = pg_sem_delete,
    .psem_acquire = pg_psem_acquire,
    .psem_release = pg_psem_release,
    .psem_state = pg_psem_state,
};
