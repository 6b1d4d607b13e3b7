/*
 * mysql.c - the MySQL/MariaDB backend: user-level locks (GET_LOCK), and
 * permit semaphores as slot locks.
 *
 *   mysql://[user[:password]@]host[:port][/database][?socket=/path]
 *   mariadb://...   (the same)
 *
 * Design note
 * - The URL is cut by the core's splitter (core/uri.c); the host, port
 *   (3306), user, password, database and the one parameter `socket` (a
 *   unix socket, instead of TCP) go to MariaDB Connector/C, which reads no
 *   option file. dlock_options_set_credentials overrides the URL's user
 *   and password. Connections speak utf8mb4, with the connect and command
 *   timeouts as the connector's (seconds) and TCP keepalives from the
 *   watchdog lease.
 * - The lock of name N is the user-level lock GET_LOCK(L) where L is N
 *   itself when it has at most 64 characters, else
 *   CONCAT(LEFT(N, 23), '#', LEFT(SHA2(N, 256), 40)), computed by the
 *   server in the statement that locks (docs/MYSQL.md shows the line), so
 *   that `SELECT GET_LOCK('N', 10)` from any client takes the same lock.
 *   The try and the release send a name of at most 64 bytes as it is
 *   (it is its own L): the rule in the statement costs the server a third
 *   of an uncontended pair.
 *   Names must be valid UTF-8 (the connection's character set).
 * - User-level locks belong to sessions: every hold (name, owner) keeps
 *   the connection that took it until its release; reentry counts locally
 *   on that hold. Connections neither holding nor waiting sit in a small
 *   idle pool.
 * - The lease is the server's: before a hold's connection locks, its
 *   session's wait_timeout is set to the lease (seconds, rounded up), so a
 *   holder that stops talking for longer has its session closed by the
 *   server and the lock freed. The core's watchdog calls lock_renew every
 *   third of the lease, which sends `SELECT CONNECTION_ID()` on each
 *   hold's connection (a heartbeat; a different id means a proxy
 *   multiplexes sessions, which session locks cannot survive: ENOTSUP).
 *   A heartbeat that fails closes that connection and reports the hold
 *   gone. The event loop also polls each idle holding connection (its
 *   socket, never reading it): when the server ends the session (a
 *   restart, KILL, wait_timeout) the socket turns readable, and the core
 *   is asked to renew at once (dlock__holds_renew_now), so the heartbeat
 *   that reports the loss runs then, not a third of the lease later. The
 *   pool records each connection's wait_timeout and since when it is
 *   idle, and lends it only well within that timeout; a connection that
 *   has the wanted wait_timeout already skips the SET, so an uncontended
 *   pair costs the bare GET_LOCK and RELEASE_LOCK.
 * - Try (wait 0): GET_LOCK(L, 0) on a pooled connection. A wait: the first
 *   attempt tries (wait_hot is always false); then the attempt sends a
 *   blocking GET_LOCK(L, MY_WAIT_BOUND_S) on a connection of the wait's
 *   own (mysql_send_query, not read) and returns 0 with no bound. The
 *   event loop polls the sockets of such pending statements (loop_prepare
 *   / loop_dispatch) and wakes the wait when its answer arrives; the next
 *   attempt reads it and claims a grant with one `SELECT CONNECTION_ID()`
 *   (restarting the server's idle clock after the attempt's start); an
 *   answer of 0 (the bound passed) or an interrupted statement sends it
 *   again. A wait that ends with its statement pending interrupts it
 *   (`KILL QUERY <id>` from a pooled connection) and reads its answer, so
 *   the statement is over when the wait ends; a grant that raced with the
 *   end is released on its connection.
 * - Sent operations (the async API's tries and releases of reentrant and
 *   fenced locks, backend.h's lock_acquire_send / lock_release_send): a
 *   re-entry counts with no round trip; a try's statement goes out from
 *   the calling thread on a pooled connection that is still open (after
 *   set_lease's SET when its session's wait_timeout is not the lease's),
 *   with mysql_send_query (not read), a release's on the hold's
 *   connection, and the operation joins p->sent. Each statement is a few
 *   hundred bytes on a connection whose last answer was read (the server
 *   read all that was sent): it goes into the socket's empty buffer
 *   without waiting. The loop polls their sockets (loop_prepare, lowering
 *   *until to the earliest deadline) and reads an answer only once all of
 *   it is in the socket's buffer: answer_in walks the packets with
 *   MSG_PEEK (an OK or ERR packet, or a result set through its final
 *   EOF; the connector asks for no CLIENT_DEPRECATE_EOF and the backend
 *   for no compression, so the bytes on the socket are those packets; a
 *   client whose connections speak TLS, whose records hide them, sends
 *   nothing: p->tls), or once the server hung up; the connector's blocking read
 *   then finds every byte it asks for and returns without waiting. The
 *   answer is handled by the blocking path's code (try_answer,
 *   hold_record, release_answer), with no mutex held, on the loop
 *   thread, which sends the operation's next statement if any (the try
 *   after the SET); a fenced grant
 *   sends its token statement next (and the table's creation, when it
 *   is missing), as next_token does. A statement not answered within the
 *   command timeout ends in DLOCK_EIOTIMEOUT and its connection is closed
 *   (a lock it may have taken ends with the session). done runs once:
 *   the operation leaves p->sent, under mu, only in the hands of the one
 *   that ends it (the loop; the close, for any left). To the pool
 *   (DLOCK__SEND_BLOCKS): a name of more than 64 bytes, a wait of the
 *   owner under way, a hold a renewal is using, no open connection
 *   pooled (then the dialling worker pools one for the sends to come),
 *   and a try whose connection turns out closed by the server (nothing
 *   held).
 * - Kinds: reentrant and fenced take the same lock. A fenced grant raises
 *   the name's row of the InnoDB table dlock_fence (created on first use)
 *   on the holding connection while the lock is held, so tokens grow with
 *   every grant and survive a restart. GET_LOCK has no shared mode nor a
 *   visible queue: read-write and fair locks are refused by the core
 *   (DLOCK_ENOTSUP) before anything is sent; so are counting semaphores
 *   and latches, whose counts belong to no session.
 * - Permit semaphores (`dlock -N`): the semaphore N of K permits is the
 *   row of N in the InnoDB table dlock_semaphore (its size; created on
 *   first use) and K slot locks, the user-level locks of `N#permit#i`
 *   (i = 1..K) by LOCKNAME's rule. A permit is one slot lock held on a
 *   connection of its own, a hold like a lock's (wait_timeout the lease,
 *   the watchdog's heartbeats through lock_renew, DLOCK__HK_PERMIT; the
 *   loop watches its socket); the row (N, i) of dlock_permit records its
 *   id and connection, valid while that connection holds the slot, which
 *   is how psem_state names holders (a MEMORY table: a restart frees
 *   every slot, and its writes cost no log flush). A try is one statement
 *   taking the first free slot of 1..16 (a CASE over the slot names the
 *   client writes out); a larger semaphore whose first 16 are in use, or
 *   one that shrank, is scanned by a second (GET_LOCK(.., 0) over the
 *   series 1..K, LIMIT 1; after a shrink only while fewer than K of all
 *   slots are in use). Then the REPLACE of the id on the same connection.
 * - A permit wait (no NOTIFY in MySQL): psem_acquire finds its wait by
 *   (name, permit id: the wait spec's owner); its attempts run one at a
 *   time, on the waiting thread or, for an async acquire, on a pool
 *   thread.
 *   After a failed scan it sends probes: SQL_WAIT on up to MY_PROBES slots
 *   (from the wait's seq mod K), each on a connection of its own, polled
 *   by the loop like a lock wait's. When a watched slot frees (a release,
 *   a holder's session ended) the server grants it and the loop wakes the
 *   wait; its next attempt claims that slot (still one of 1..K) as the
 *   permit, giving back any other probe's grant. A waiter's latency is
 *   thus the server's grant and the claim for a watched slot, and at most
 *   psem_retry_ms (a third of the watchdog lease, >= 100 ms: the next full
 *   scan) for a slot it does not watch (K > MY_PROBES, or slots added
 *   since). wait_end ends pending probes as a lock wait's (KILL QUERY).
 *   A release wakes this client's waits of the name.
 * - State: IS_USED_LOCK gives the holder's connection id (this client's
 *   own holds are shown by owner); waiters are the sessions whose running
 *   statement is dlock's wait statement for the name (PROCESSLIST.INFO).
 * - Locking: p->mu guards the pool, the holds, the waits' states and the
 *   sent operations; it is never held across I/O (but a poll or a peek
 *   that does not wait). A wait's statements are sent, read and ended
 *   only by the thread running its step (one at a time: its own, or an
 *   async wait's pool thread); the loop only marks them answered. A hold's
 *   connection is used by one thread at a time: a renewal marks the hold
 *   busy, and a release waits on p->cond until it is not; the loop polls
 *   only connections of holds not busy and acts on a poll's outcome only
 *   if no renewal took the connection since (a renewal's own answer would
 *   look like news).
 */
#include <errno.h>
#include <mysql.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "core/alloc.h"
#include "core/backend.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/idle.h"
#include "core/options.h"
#include "core/uri.h"
#include "core/wait.h"
#include "mysql/mysql.h"

#define MY_DEFAULT_PORT 3306
/* a waiting GET_LOCK's bound (s): past it the statement answers 0 and is
 * sent again; a wait that ends sooner kills its session */
#define MY_WAIT_BOUND_S 600

static const char *const my_schemes[] = {"mysql", "mariadb", NULL};

/* The lock name as the server computes it (docs/MYSQL.md): %1$s is the
 * quoted name. */
#define LOCKNAME                                                               \
  "IF(CHAR_LENGTH(%1$s) <= 64, %1$s, CONCAT(LEFT(%1$s, 23), '#', "             \
  "LEFT(SHA2(%1$s, 256), 40)))"
/* The try and the release: a name of at most 64 bytes has at most 64
 * characters, so L is the name itself and is sent as it is (the rule in
 * the statement costs the server about a third of a bare pair). */
#define SHORT_NAME(n) (strlen(n) <= 64)
#define SQL_TRY(n)                                                             \
  (SHORT_NAME(n) ? "SELECT GET_LOCK(%1$s, 0), CONNECTION_ID()"                 \
                 : "SELECT GET_LOCK(" LOCKNAME ", 0), CONNECTION_ID()")
#define SQL_RELEASE(n)                                                         \
  (SHORT_NAME(n) ? "SELECT RELEASE_LOCK(%1$s)"                                 \
                 : "SELECT RELEASE_LOCK(" LOCKNAME ")")
static const char SQL_BEAT[] = "SELECT CONNECTION_ID()";
#define MY_STR_(x) #x
#define MY_STR(x) MY_STR_(x)
/* a wait's statement; dlock_lock_state finds waiters by its text */
static const char SQL_WAIT[] =
    "SELECT GET_LOCK(" LOCKNAME
    ", " MY_STR(MY_WAIT_BOUND_S) "), CONNECTION_ID()";
/* Fencing tokens: one row per fenced name, raised by every grant while the
 * lock is held; LAST_INSERT_ID(expr) hands the new token back in the OK
 * packet (mysql_insert_id). */
static const char SQL_TOKEN[] =
    "INSERT INTO dlock_fence (k, name, token) VALUES (UNHEX(SHA2(%1$s, "
    "256)), %1$s, LAST_INSERT_ID(1)) ON DUPLICATE KEY UPDATE token = "
    "LAST_INSERT_ID(token + 1)";
static const char SQL_FENCE_TABLE[] =
    "CREATE TABLE IF NOT EXISTS dlock_fence (k BINARY(32) PRIMARY KEY, name "
    "TEXT NOT NULL, token BIGINT NOT NULL) ENGINE=InnoDB";

typedef struct my_hold {
  struct my_hold *next;
  char *name, *owner;
  MYSQL *conn; /* NULL once a heartbeat failed: the hold is gone */
  int64_t count;
  unsigned long id; /* the server connection that took the lock */
  int64_t token;    /* a fenced lock's token (0: none) */
  int64_t wt;       /* its session's wait_timeout (s) */
  bool permit;      /* a permit of the semaphore `name` (owner: its id) */
  int64_t slot;     /* a permit: its slot, 1..K */
  bool busy;        /* a renewal is using conn */
  /* conn's socket as the loop's last loop_prepare polled it, -1 when not
   * (or when a renewal has used conn since): only a connection idle for
   * the whole poll is judged by what the poll saw */
  int polled_fd;
  bool broken; /* the loop saw the server end it: its heartbeat is due */
} my_hold;

enum { W_IDLE, W_SENT, W_READY };

/* A pending GET_LOCK of a wait: a lock's, or one of a permit wait's
 * probes (the slot it waits for). */
typedef struct my_pending {
  MYSQL *conn;
  int state;
  unsigned long id; /* the session of the pending statement */
  int64_t wt;
  int polled_fd; /* as for a hold: conn's socket as the loop polled it */
  int64_t slot;  /* a probe: its slot */
} my_pending;

/* a permit wait watches at most this many slots at once, each with a
 * GET_LOCK of its own (docs/MYSQL.md) */
#define MY_PROBES 4

typedef struct my_wait {
  struct my_wait *next;
  dlock__wait *w;
  /* [0] a lock wait's statement; a permit wait's probes */
  my_pending q[MY_PROBES];
} my_wait;

/* A sent operation (lock_acquire_send, lock_release_send): the statement
 * of its step on a connection of its own, answered to the loop. */
enum { S_LEASE, S_TRY, S_TOKEN, S_TABLE, S_RELEASE };

typedef struct my_sent {
  struct my_sent *next;
  MYSQL *conn;
  int step;
  int64_t wt;       /* conn's session wait_timeout */
  int64_t deadline; /* the statement's answer is due by then */
  int polled_fd;    /* as for a hold: conn's socket as the loop polled it */
  unsigned long id; /* an acquire's: the session that took the lock */
  bool table_made;  /* a fenced grant's: dlock_fence was created */
  dlock__acquire a; /* an acquire's (name and owner owned); a release's name */
  dlock__sent_fn done;
  void *arg;
} my_sent;

typedef struct my {
  struct dlock_client *core;
  int64_t connect_timeout_ms, command_timeout_ms, watchdog_ms;
  char *host, *user, *password, *db, *socket;
  unsigned port;
  char where[200]; /* host:port/db, for messages */
  /* the connections speak TLS (the connector's default or the server's
   * demand): answer_in cannot see a sent statement's answer through it,
   * so nothing is sent that way (the pool runs the blocking calls) */
  bool tls;
  pthread_mutex_t mu;
  pthread_cond_t cond;
  /* idle connections, each with its wait_timeout (core/idle.h: one idle
   * too long for it is closed, not lent) */
  dlock__idle_pool idle;
  my_hold *holds;
  MYSQL *doomed[16]; /* closed at the next renewal pass (see postgres.c) */
  int ndoomed;
  my_wait *waits;
  int64_t psem_retry_ms; /* a permit wait scans all slots this often */
  my_sent *sent;         /* sent operations whose statement is out */
  bool dial_queued;      /* the dialling worker pools one for the sends */
  int64_t dial_lease_ms; /* ... whose session has this lease */
} my;

static pthread_once_t lib_once = PTHREAD_ONCE_INIT;
static int lib_rc;
static void lib_init(void) { lib_rc = mysql_library_init(0, NULL, NULL); }

/* The connector's message on one line. */
static void one_line(const char *in, char *out, size_t cap) {
  size_t o = 0;
  for (const char *s = in ? in : ""; *s && o + 1 < cap; s++)
    out[o++] = (*s == '\n' || *s == '\r' || *s == '\t') ? ' ' : *s;
  while (o > 0 && out[o - 1] == ' ')
    o--;
  out[o] = '\0';
}

static int my_err(my *p, int code, const char *what, MYSQL *c) {
  char line[400];
  one_line(c ? mysql_error(c) : "", line, sizeof line);
  dlock__seterr(code, "mysql %s: %s%s%s", p->where, what, line[0] ? ": " : "",
                line);
  if (p->password && p->password[0])
    dlock__scrub_error(p->password);
  return code;
}

static bool lost_errno(unsigned e) {
  return e == 2006 || e == 2013 || e == 2055 || e == 2014 || e == 2000;
}

/* The code of a failed statement. */
static int sql_error(my *p, MYSQL *c) {
  unsigned e = mysql_errno(c);
  if (lost_errno(e))
    return my_err(p, DLOCK_EUNAVAILABLE, "connection lost", c);
  if (e == 1046)
    return my_err(p, DLOCK_EINVAL,
                  "fenced locks and permit semaphores need a database in "
                  "the URL (mysql://host/database) for their tables "
                  "(dlock_fence, dlock_semaphore)",
                  c);
  if (e == 1213 || e == 3058)
    return my_err(p, DLOCK_EDEADLK, "the server found a deadlock", c);
  if (e == 1142 || e == 1044 || e == 1045 || e == 1227)
    return my_err(p, DLOCK_EAUTH, "not permitted", c);
  return my_err(p, DLOCK_ESERVER, "statement failed", c);
}

static int connect_code(unsigned e) {
  switch (e) {
  case 1045: /* access denied */
  case 1044: /* no access to the database */
  case 1698:
  case 2059: /* authentication plugin */
  case 1251:
    return DLOCK_EAUTH;
  case 1049: /* unknown database */
    return DLOCK_ESERVER;
  case 2013: /* lost during the handshake */
  case 2027: /* malformed packet */
  case 2012: /* handshake error */
  case 2007: /* protocol mismatch */
  case 2054:
    return DLOCK_EPROTO;
  case 2026:
    return DLOCK_ETLS;
  default:
    return DLOCK_EUNAVAILABLE;
  }
}

static unsigned secs(int64_t ms) {
  int64_t s = (ms + 999) / 1000;
  return s < 1 ? 1 : s > 31536000 ? 31536000 : (unsigned)s;
}

/* ------------------------------------------------------------ connections */

static void keepalive(my *p, MYSQL *c) {
  if (p->socket)
    return;
  int fd = (int)mysql_get_socket(c);
  if (fd < 0)
    return;
  int on = 1, idle = (int)secs(p->watchdog_ms / 3), intvl = 1, cnt = 3;
  unsigned ut = (unsigned)(p->watchdog_ms > 0 ? p->watchdog_ms : 30000);
  (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  (void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ut, sizeof ut);
}

static int dial(my *p, MYSQL **out) {
  *out = NULL;
  pthread_once(&lib_once, lib_init);
  if (lib_rc)
    return dlock__seterr(DLOCK_ESYS, "mysql: the connector did not start");
  MYSQL *c = mysql_init(NULL);
  if (!c)
    return dlock__seterr(DLOCK_ENOMEM, "mysql: out of memory");
  unsigned ct = secs(p->connect_timeout_ms), rt = secs(p->command_timeout_ms);
  mysql_optionsv(c, MYSQL_OPT_CONNECT_TIMEOUT, &ct);
  mysql_optionsv(c, MYSQL_OPT_READ_TIMEOUT, &rt);
  mysql_optionsv(c, MYSQL_OPT_WRITE_TIMEOUT, &rt);
  mysql_optionsv(c, MYSQL_SET_CHARSET_NAME, "utf8mb4");
  unsigned proto = p->socket ? MYSQL_PROTOCOL_SOCKET : MYSQL_PROTOCOL_TCP;
  mysql_optionsv(c, MYSQL_OPT_PROTOCOL, &proto);
  if (!mysql_real_connect(c, p->socket ? NULL : p->host, p->user, p->password,
                          p->db, p->port, p->socket, 0)) {
    unsigned e = mysql_errno(c);
    int code = connect_code(e);
    /* reset during the handshake (ECONNRESET): a server that is starting
     * or stopping, not one that speaks another protocol */
    if (e == 2013 && strstr(mysql_error(c), "system error: 104"))
      code = DLOCK_EUNAVAILABLE;
    my_err(p, code,
           code == DLOCK_EPROTO ? "cannot connect (is it a MySQL or MariaDB "
                                  "server?)"
           : e == 1049          ? "cannot connect (no such database)"
                                : "cannot connect",
           c);
    mysql_close(c);
    return code;
  }
  keepalive(p, c);
  *out = c;
  return 0;
}

static void conn_close(void *c) { mysql_close(c); }

/* An idle connection (pooled or new); *wt its session's wait_timeout (0:
 * the server's default). */
static int conn_get(my *p, MYSQL **out, bool *fresh, int64_t *wt) {
  int64_t ms = 0;
  MYSQL *c = dlock__idle_take(&p->idle, dlock__now_ms(), &ms);
  *wt = ms / 1000;
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

static void conn_put(my *p, MYSQL *c, int64_t wt) {
  if (!c)
    return;
  if (wt < 0) {
    mysql_close(c);
    return;
  }
  dlock__idle_put(&p->idle, c, wt * 1000, dlock__now_ms());
}

/* The answer of the statement whose result was read on c: the first
 * row's columns joined by '|' into out (NULL as "NULL"; "" when there is
 * no row). */
static int stored_row(my *p, MYSQL *c, char *out, size_t cap) {
  MYSQL_RES *r = mysql_store_result(c);
  if (!r)
    return mysql_field_count(c) ? sql_error(p, c) : 0;
  MYSQL_ROW row = mysql_fetch_row(r);
  unsigned nf = mysql_num_fields(r);
  size_t o = 0;
  for (unsigned f = 0; row && out && f < nf && o + 1 < cap; f++) {
    int w = snprintf(out + o, cap - o, "%s%s", f ? "|" : "",
                     row[f] ? row[f] : "NULL");
    o += w > 0 ? (size_t)w : 0;
  }
  mysql_free_result(r);
  return 0;
}

/* One statement; its first row into out (stored_row). */
static int exec_sql(my *p, MYSQL *c, const char *sql, char *out, size_t cap) {
  if (out && cap)
    out[0] = '\0';
  if (mysql_real_query(c, sql, (unsigned long)strlen(sql)))
    return sql_error(p, c);
  return stored_row(p, c, out, cap);
}

/* The statement fmt with %1$s the name quoted for c (an SQL literal). */
static char *with_name(MYSQL *c, const char *fmt, const char *name) {
  size_t n = strlen(name);
  char *q = dlock__calloc(1, 2 * n + 3);
  if (!q)
    return NULL;
  q[0] = '\'';
  unsigned long w = mysql_real_escape_string(c, q + 1, name, n);
  q[w + 1] = '\'';
  q[w + 2] = '\0';
  char *sql = dlock__asprintf(fmt, q);
  dlock__free(q);
  return sql;
}

static int exec_named(my *p, MYSQL *c, const char *fmt, const char *name,
                      char *out, size_t cap) {
  char *sql = with_name(c, fmt, name);
  if (!sql)
    return dlock__seterr(DLOCK_ENOMEM, "mysql: out of memory");
  int rc = exec_sql(p, c, sql, out, cap);
  dlock__free(sql);
  return rc;
}

/* One statement on a pooled connection (closed when it failed). */
static int exec_pooled(my *p, const char *fmt, const char *name, char *out,
                       size_t cap) {
  for (int round = 0; round < 2; round++) {
    MYSQL *c;
    bool fresh;
    int64_t wt;
    int rc = conn_get(p, &c, &fresh, &wt);
    if (rc)
      return rc;
    rc = name ? exec_named(p, c, fmt, name, out, cap)
              : exec_sql(p, c, fmt, out, cap);
    if (rc == 0) {
      conn_put(p, c, wt);
      return 0;
    }
    bool lost = lost_errno(mysql_errno(c));
    mysql_close(c);
    if (!lost || fresh) /* a pooled connection the server had closed */
      return rc;
  }
  return DLOCK_EUNAVAILABLE;
}

/* Sets c's session wait_timeout to the lease unless it has it. */
/* The statement that sets a session's wait_timeout to `want` (s). */
static void lease_sql(char *sql, size_t cap, int64_t want) {
  snprintf(sql, cap, "SET SESSION wait_timeout = %lld", (long long)want);
}

static int set_lease(my *p, MYSQL *c, int64_t *wt, int64_t lease_ms) {
  int64_t want = secs(lease_ms);
  if (*wt == want)
    return 0;
  char sql[64];
  lease_sql(sql, sizeof sql, want);
  int rc = exec_sql(p, c, sql, NULL, 0);
  *wt = rc ? -1 : want;
  return rc;
}

/* ------------------------------------------------------------ bookkeeping */

static bool valid_utf8(const char *s) {
  const unsigned char *u = (const unsigned char *)s;
  while (*u) {
    int n = *u < 0x80         ? 0
            : (*u >> 5) == 6  ? 1
            : (*u >> 4) == 14 ? 2
            : (*u >> 3) == 30 ? 3
                              : -1;
    if (n < 0 || (n == 1 && *u < 0xc2) || (n == 3 && *u > 0xf4))
      return false;
    for (int i = 1; i <= n; i++)
      if ((u[i] & 0xc0) != 0x80)
        return false;
    u += n + 1;
  }
  return true;
}

static int check_name(const char *name) {
  if (!valid_utf8(name))
    return dlock__seterr(DLOCK_EINVAL,
                         "the mysql backend needs lock names in UTF-8 (the "
                         "connection's character set, utf8mb4)");
  return 0;
}

static my_hold *hold_find(my *p, const char *name, const char *owner,
                          my_hold ***link) {
  for (my_hold **hp = &p->holds; *hp; hp = &(*hp)->next)
    if (!(*hp)->permit && strcmp((*hp)->name, name) == 0 &&
        strcmp((*hp)->owner, owner) == 0) {
      if (link)
        *link = hp;
      return *hp;
    }
  return NULL;
}

/* The permit `id` of the semaphore `name` this client holds. */
static my_hold *permit_find(my *p, const char *name, const char *id,
                            my_hold ***link) {
  for (my_hold **hp = &p->holds; *hp; hp = &(*hp)->next)
    if ((*hp)->permit && strcmp((*hp)->name, name) == 0 &&
        strcmp((*hp)->owner, id) == 0) {
      if (link)
        *link = hp;
      return *hp;
    }
  return NULL;
}

/* A new hold (its kind's fields set) takes name n and owner o (owned),
 * its connection c (server connection id, wait_timeout wt), one count,
 * and joins the holds. */
static void hold_add(my *p, my_hold *h, char *n, char *o, MYSQL *c,
                     unsigned long id, int64_t wt) {
  h->name = n;
  h->owner = o;
  h->conn = c;
  h->count = 1;
  h->id = id;
  h->wt = wt;
  h->polled_fd = -1;
  pthread_mutex_lock(&p->mu);
  h->next = p->holds;
  p->holds = h;
  pthread_mutex_unlock(&p->mu);
}

static void hold_free(my_hold *h) {
  if (!h)
    return;
  dlock__free(h->name);
  dlock__free(h->owner);
  dlock__free(h);
}

static my_wait *wait_find(my *p, const char *name, const char *owner) {
  for (my_wait *r = p->waits; r; r = r->next)
    if (!r->w->spec->sync && strcmp(r->w->spec->name, name) == 0 &&
        strcmp(r->w->spec->owner, owner) == 0)
      return r;
  return NULL;
}

/* Releases a lock nobody claims and pools its connection. */
static void give_back(my *p, MYSQL *c, const char *name, int64_t wt) {
  char out[16];
  if (exec_named(p, c, SQL_RELEASE(name), name, out, sizeof out) != 0) {
    mysql_close(c);
    return;
  }
  conn_put(p, c, wt);
}

/* A statement ran on another server connection than the one that locked:
 * a proxy shares sessions, and session locks cannot be kept through it. */
static int proxy_error(my *p, const char *name) {
  return dlock__seterr(DLOCK_ENOTSUP,
                       "mysql %s: lock '%.200s': the server connection "
                       "changed under the client (a proxy that multiplexes "
                       "sessions?); user-level locks need a direct "
                       "connection",
                       p->where, name);
}

/* A fenced grant's token, raised on the holding connection; the table is
 * created on first use. */
static int next_token(my *p, MYSQL *c, const char *name, int64_t *token) {
  for (int round = 0;; round++) {
    int rc = exec_named(p, c, SQL_TOKEN, name, NULL, 0);
    if (rc == 0) {
      *token = (int64_t)mysql_insert_id(c);
      return 0;
    }
    if (round > 0 || mysql_errno(c) != 1146) /* no such table */
      return rc;
    rc = exec_sql(p, c, SQL_FENCE_TABLE, NULL, 0);
    if (rc)
      return rc;
  }
}

/* The hold of a's name and owner on c, which took the lock (session id,
 * wait_timeout wt; tok a fenced lock's token): 1, or DLOCK_ENOMEM (c
 * left to the caller). */
static int hold_record(my *p, const dlock__acquire *a, MYSQL *c,
                       unsigned long id, int64_t wt, int64_t tok) {
  my_hold *h = dlock__calloc(1, sizeof *h);
  char *n = dlock__strdup(a->name), *o = dlock__strdup(a->owner);
  if (!h || !n || !o) {
    dlock__free(h);
    dlock__free(n);
    dlock__free(o);
    return dlock__seterr(DLOCK_ENOMEM, "mysql: out of memory");
  }
  h->token = tok;
  hold_add(p, h, n, o, c, id, wt);
  return 1;
}

/* mu held: a hold of a's name and owner whose session lives counts one
 * more (reentry: the session holds it; 1, *token its token); one whose
 * session was lost is forgotten (0). */
static int reenter_locked(my *p, const dlock__acquire *a, int64_t *token) {
  my_hold **link = NULL;
  my_hold *h = hold_find(p, a->name, a->owner, &link);
  if (h && h->conn) {
    h->count++;
    *token = h->token;
    return 1;
  }
  if (h) {
    *link = h->next;
    hold_free(h);
  }
  return 0;
}

/* A grant on c: a fenced lock gets its token, then the hold is recorded.
 * On failure the lock is given up. */
static int grant(my *p, const dlock__acquire *a, MYSQL *c, unsigned long id,
                 int64_t wt, int64_t *token) {
  int64_t tok = 0;
  if (a->kind == DLOCK_FENCED) {
    int rc = next_token(p, c, a->name, &tok);
    if (rc) {
      char saved[512];
      snprintf(saved, sizeof saved, "%s", dlock_last_error());
      if (lost_errno(mysql_errno(c)))
        mysql_close(c);
      else
        give_back(p, c, a->name, wt);
      return dlock__seterr(rc, "%s", saved);
    }
  }
  int rc = hold_record(p, a, c, id, wt, tok);
  if (rc < 0) {
    give_back(p, c, a->name, wt);
    return rc;
  }
  if (token)
    *token = tok;
  return 1;
}

/* A try's answer (rc the statement's outcome, out its row "got|connection
 * id") on c: granted, 1 and *id the connection id; refused, c is pooled
 * (0); failed, c is closed (the error; *lost: the server had closed the
 * connection, so the try may go again on another). */
static int try_answer(my *p, MYSQL *c, int64_t wt, int rc, const char *out,
                      unsigned long *id, bool *lost) {
  *lost = false;
  if (rc == 0 && strncmp(out, "1|", 2) == 0) {
    *id = strtoul(out + 2, NULL, 10);
    return 1;
  }
  if (rc == 0) {
    conn_put(p, c, wt);
    return 0;
  }
  *lost = lost_errno(mysql_errno(c));
  mysql_close(c); /* a failed try's session ends: it holds nothing */
  return rc;
}

/* ------------------------------------------------------------ operations */

/* The pending GET_LOCK's answer on c: 1 granted, 0 not (the bound
 * passed, or the statement was interrupted), or an error. */
static int read_pending(my *p, MYSQL *c, unsigned long *id) {
  if (mysql_read_query_result(c))
    return sql_error(p, c);
  MYSQL_RES *r = mysql_store_result(c);
  if (!r)
    return sql_error(p, c);
  MYSQL_ROW row = mysql_fetch_row(r);
  int got = row && row[0] && strcmp(row[0], "1") == 0;
  if (row && row[1])
    *id = strtoul(row[1], NULL, 10);
  mysql_free_result(r);
  return got;
}

/* Sends a wait's blocking GET_LOCK of `name` (SQL_WAIT) on a connection
 * of its own, whose session's wait_timeout is the lease (the lock's once
 * granted), into q (idle, of a registered wait: its fields change under
 * mu). 0, or an error (nothing stays queued: its session ended). */
static int pending_send(my *p, my_pending *q, const char *name,
                        int64_t lease_ms) {
  MYSQL *c;
  bool fresh;
  int64_t wt;
  int rc = conn_get(p, &c, &fresh, &wt);
  if (rc)
    return rc;
  rc = set_lease(p, c, &wt, lease_ms);
  char *sql = rc ? NULL : with_name(c, SQL_WAIT, name);
  if (!rc && !sql)
    rc = dlock__seterr(DLOCK_ENOMEM, "mysql: out of memory");
  if (!rc && mysql_send_query(c, sql, (unsigned long)strlen(sql)))
    rc = sql_error(p, c);
  dlock__free(sql);
  if (rc) {
    mysql_close(c); /* its session ends: nothing stays queued */
    dlock__err_set_unsent(true);
    return rc;
  }
  pthread_mutex_lock(&p->mu);
  q->conn = c;
  q->wt = wt;
  q->id = mysql_thread_id(c);
  q->state = W_SENT;
  q->polled_fd = -1; /* polled from the next loop_prepare on */
  pthread_mutex_unlock(&p->mu);
  return 0;
}

static int my_lock_acquire(void *be, const dlock__acquire *a, int64_t *pttl,
                           int64_t *token) {
  my *p = be;
  if (token)
    *token = 0;
  *pttl = -1;
  int rc = check_name(a->name);
  if (rc)
    return rc;
  pthread_mutex_lock(&p->mu);
  int64_t tok = 0;
  if (reenter_locked(p, a, &tok) == 1) {
    pthread_mutex_unlock(&p->mu);
    if (token)
      *token = tok;
    return 1;
  }
  my_wait *r = wait_find(p, a->name, a->owner);
  if (r && r->q[0].state == W_SENT) {
    pthread_mutex_unlock(&p->mu);
    return 0;
  }
  if (r && r->q[0].state == W_READY) {
    MYSQL *c = r->q[0].conn;
    int64_t wt = r->q[0].wt;
    unsigned long id = r->q[0].id;
    r->q[0].conn = NULL;
    r->q[0].state = W_IDLE;
    pthread_mutex_unlock(&p->mu);
    unsigned long got_id = 0;
    int got = read_pending(p, c, &got_id);
    if (got < 0) {
      unsigned e = mysql_errno(c);
      if (e == 1317 || e == 1028) { /* interrupted (KILL QUERY): again */
        conn_put(p, c, wt);
        *pttl = 0;
        return 0;
      }
      mysql_close(c);
      if (lost_errno(e)) /* the session is gone with whatever it queued */
        dlock__err_set_unsent(true);
      return got;
    }
    if (got == 0) { /* the bound passed: wait again */
      conn_put(p, c, wt);
      *pttl = 0;
      return 0;
    }
    /* claim: restarts the server's idle clock after this attempt's start */
    char out[32];
    if (exec_sql(p, c, SQL_BEAT, out, sizeof out) != 0) {
      mysql_close(c); /* the session, and the grant, are gone */
      *pttl = 0;
      return 0;
    }
    if (strtoul(out, NULL, 10) != id || got_id != id) {
      mysql_close(c);
      return proxy_error(p, a->name);
    }
    return grant(p, a, c, id, wt, token);
  }
  pthread_mutex_unlock(&p->mu);

  if (r) { /* within a wait: the server's wait does the waiting */
    rc = pending_send(p, &r->q[0], a->name, a->lease_ms);
    if (rc)
      return rc;
    dlock__client_poke(p->core);
    return 0;
  }

  /* a try */
  for (int round = 0; round < 2; round++) {
    MYSQL *c;
    bool fresh;
    int64_t wt;
    rc = conn_get(p, &c, &fresh, &wt);
    if (rc)
      return rc;
    char out[48];
    rc = set_lease(p, c, &wt, a->lease_ms);
    if (!rc)
      rc = exec_named(p, c, SQL_TRY(a->name), a->name, out, sizeof out);
    unsigned long id = 0;
    bool lost;
    rc = try_answer(p, c, wt, rc, out, &id, &lost);
    if (rc == 1)
      return grant(p, a, c, id, wt, token);
    if (rc == 0)
      return 0;
    if (!(lost && !fresh)) {
      if (rc == DLOCK_EUNAVAILABLE)
        dlock__err_set_unsent(true);
      return rc;
    }
  }
  return dlock__seterr(DLOCK_EUNAVAILABLE, "mysql %s: connection lost",
                       p->where);
}

static int my_lock_leave(void *be, const dlock__acquire *a, uint64_t seq,
                         int64_t *token) {
  (void)be;
  (void)a;
  (void)seq;
  if (token)
    *token = 0;
  return 0; /* a wait's statement is ended by wait_end */
}

/* release_take: the hold's RELEASE_LOCK is to be sent on *c */
#define MY_RELEASE_SEND 101

/* A release's first half: the hold of rel's name and owner counts one
 * less (DLOCK__REL_DOWN), or leaves the holds with its connection,
 * *c and *wt (MY_RELEASE_SEND), or is not there or lost its session
 * (DLOCK__REL_NOTOWNER). A hold a renewal is using is waited for
 * (`wait`), else DLOCK__SEND_BLOCKS. */
static int release_take(my *p, const dlock__release *rel, bool wait, MYSQL **c,
                        int64_t *wt) {
  pthread_mutex_lock(&p->mu);
  my_hold **link = NULL;
  my_hold *h = hold_find(p, rel->name, rel->owner, &link);
  while (h && h->busy && wait) {
    pthread_cond_wait(&p->cond, &p->mu);
    h = hold_find(p, rel->name, rel->owner, &link);
  }
  if (!h || h->busy) {
    pthread_mutex_unlock(&p->mu);
    return h ? DLOCK__SEND_BLOCKS : DLOCK__REL_NOTOWNER;
  }
  if (h->conn && h->count > 1) {
    h->count--;
    pthread_mutex_unlock(&p->mu);
    return DLOCK__REL_DOWN;
  }
  *link = h->next;
  pthread_mutex_unlock(&p->mu);
  *c = h->conn;
  *wt = h->wt;
  hold_free(h);
  /* no connection: its session was lost */
  return *c ? MY_RELEASE_SEND : DLOCK__REL_NOTOWNER;
}

/* RELEASE_LOCK's answer (rc, out) on c: the connection is pooled, or
 * closed when the statement failed. */
static int release_answer(my *p, MYSQL *c, int64_t wt, int rc,
                          const char *out) {
  if (rc) {
    /* the server had closed the session: the lock went with it; otherwise
     * the session ends now, and the core's retry finds no hold */
    bool closed = rc == DLOCK_EUNAVAILABLE;
    mysql_close(c);
    return closed ? DLOCK__REL_NOTOWNER : rc;
  }
  conn_put(p, c, wt);
  return strcmp(out, "1") == 0 ? DLOCK__REL_FREED : DLOCK__REL_NOTOWNER;
}

static int my_lock_release(void *be, const dlock__release *rel) {
  /* one kind of hold, no lease (the connection keeps it), no request id
   * (a retry finds the hold gone: "not owner", which the core takes as
   * the first attempt's release) */
  my *p = be;
  MYSQL *c;
  int64_t wt;
  int rc = release_take(p, rel, true, &c, &wt);
  if (rc != MY_RELEASE_SEND)
    return rc;
  char out[16];
  rc = exec_named(p, c, SQL_RELEASE(rel->name), rel->name, out, sizeof out);
  return release_answer(p, c, wt, rc, out);
}

static int my_lock_renew(void *be, dlock__renewal *items, size_t n,
                         int64_t lease_ms, int64_t deadline) {
  (void)lease_ms;
  (void)deadline; /* the connector's read timeout bounds each heartbeat */
  my *p = be;
  MYSQL *old[16];
  pthread_mutex_lock(&p->mu);
  int nold = p->ndoomed;
  memcpy(old, p->doomed, sizeof old);
  p->ndoomed = 0;
  pthread_mutex_unlock(&p->mu);
  for (int i = 0; i < nold; i++)
    mysql_close(old[i]);
  for (size_t i = 0; i < n; i++) {
    pthread_mutex_lock(&p->mu);
    my_hold *h = items[i].kind == DLOCK__HK_PERMIT
                     ? permit_find(p, items[i].name, items[i].owner, NULL)
                     : hold_find(p, items[i].name, items[i].owner, NULL);
    if (!h || !h->conn || h->busy) {
      items[i].result = h && h->conn ? 1 : 0;
      pthread_mutex_unlock(&p->mu);
      continue;
    }
    h->busy = true;
    h->polled_fd = -1; /* its answer is no news for the loop */
    MYSQL *c = h->conn;
    pthread_mutex_unlock(&p->mu);
    char out[32];
    int rc = exec_sql(p, c, SQL_BEAT, out, sizeof out);
    if (rc == 0 && strtoul(out, NULL, 10) != h->id)
      rc = proxy_error(p, items[i].name);
    pthread_mutex_lock(&p->mu);
    h->busy = false;
    if (rc) {
      /* no heartbeat: the server ends the session (closed, or idle past
       * wait_timeout); closed later, after the core reported the loss */
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
                 "mysql: heartbeat of %s '%.200s' failed (%s): the hold is "
                 "lost",
                 items[i].kind == DLOCK__HK_PERMIT ? "a permit of" : "lock",
                 items[i].name, dlock_last_error());
      if (c)
        mysql_close(c);
    }
  }
  return 0;
}

static int my_lock_query(void *be, dlock_lock_kind_t kind, const char *name,
                         const char *owner, dlock__lock_query q, int64_t *out) {
  (void)kind;
  my *p = be;
  if (q == DLOCK__Q_HELD || q == DLOCK__Q_COUNT) {
    pthread_mutex_lock(&p->mu);
    my_hold *h = owner ? hold_find(p, name, owner, NULL) : NULL;
    *out = h && h->conn ? (q == DLOCK__Q_HELD ? 1 : h->count) : 0;
    pthread_mutex_unlock(&p->mu);
    return 0;
  }
  int rc = check_name(name);
  if (rc)
    return rc;
  char val[32];
  rc = exec_pooled(p, "SELECT IS_USED_LOCK(" LOCKNAME ")", name, val,
                   sizeof val);
  if (rc)
    return rc;
  bool locked = strcmp(val, "NULL") != 0 && val[0];
  if (q == DLOCK__Q_LOCKED)
    *out = locked;
  else /* REMAINING: the server keeps no expiry date, only idle time */
    *out = locked ? -1 : -2;
  return 0;
}

/* The sessions whose running statement is dlock's wait for name (the
 * server lists no queue of GET_LOCK; a wait by another client's own SQL is
 * not seen): ids and user@host, oldest first, into st->waiters. */
static int state_waiters(my *p, MYSQL *c, const char *name,
                         dlock_lock_state_t *st) {
  char *wait_sql = with_name(c, SQL_WAIT, name);
  char *q = wait_sql ? with_name(c,
                                 "SELECT ID, CONCAT(USER, '@', HOST) FROM "
                                 "information_schema.PROCESSLIST WHERE INFO = "
                                 "%1$s ORDER BY TIME DESC, ID LIMIT 100",
                                 wait_sql)
                     : NULL;
  dlock__free(wait_sql);
  if (!q)
    return dlock__seterr(DLOCK_ENOMEM, "mysql: out of memory");
  int rc =
      mysql_real_query(c, q, (unsigned long)strlen(q)) ? sql_error(p, c) : 0;
  dlock__free(q);
  if (rc)
    return rc;
  MYSQL_RES *r = mysql_store_result(c);
  if (!r)
    return sql_error(p, c);
  MYSQL_ROW row;
  while ((row = mysql_fetch_row(r)) && st->nwaiters < 100) {
    unsigned long id = row[0] ? strtoul(row[0], NULL, 10) : 0;
    char *o = NULL;
    pthread_mutex_lock(&p->mu);
    for (my_wait *w = p->waits; w; w = w->next)
      if (!w->w->spec->sync && w->q[0].conn && w->q[0].id == id) {
        o = dlock__strdup(w->w->spec->owner);
        break;
      }
    pthread_mutex_unlock(&p->mu);
    if (!o)
      o = dlock__asprintf("connection %lu (%s)", id, row[1] ? row[1] : "?");
    if (!o)
      break;
    st->waiters[st->nwaiters++] = o;
  }
  mysql_free_result(r);
  return 0;
}

static int my_lock_state(void *be, dlock_lock_kind_t kind, const char *name,
                         dlock_lock_state_t **out) {
  my *p = be;
  *out = NULL;
  int rc = check_name(name);
  if (rc)
    return rc;
  MYSQL *c;
  bool fresh;
  int64_t wt;
  rc = conn_get(p, &c, &fresh, &wt);
  if (rc)
    return rc;
  char val[400];
  rc = exec_named(p, c,
                  "SELECT IS_USED_LOCK(" LOCKNAME "), (SELECT CONCAT(USER, "
                  "'@', HOST) FROM information_schema.PROCESSLIST WHERE ID = "
                  "IS_USED_LOCK(" LOCKNAME "))",
                  name, val, sizeof val);
  dlock_lock_state_t *st = NULL;
  if (rc == 0) {
    st = dlock__calloc(1, sizeof *st);
    if (st) {
      st->name = dlock__strdup(name);
      st->holders = dlock__calloc(2, sizeof *st->holders);
      st->waiters = dlock__calloc(101, sizeof *st->waiters);
    }
    if (!st || !st->name || !st->holders || !st->waiters)
      rc = dlock__seterr(DLOCK_ENOMEM, "mysql: out of memory");
  }
  if (rc == 0)
    rc = state_waiters(p, c, name, st);
  if (rc) {
    dlock_lock_state_free(st);
    mysql_close(c);
    return rc;
  }
  conn_put(p, c, wt);
  char *bar = strchr(val, '|');
  if (bar)
    *bar++ = '\0';
  bool held = val[0] && strcmp(val, "NULL") != 0;
  if (held) {
    unsigned long id = strtoul(val, NULL, 10);
    char *o = NULL;
    int64_t count = 1;
    pthread_mutex_lock(&p->mu);
    for (my_hold *h = p->holds; h; h = h->next)
      if (!h->permit && h->conn && h->id == id && strcmp(h->name, name) == 0) {
        o = dlock__strdup(h->owner);
        count = h->count;
        break;
      }
    pthread_mutex_unlock(&p->mu);
    if (!o)
      o = dlock__asprintf("connection %lu (%s)", id,
                          bar && strcmp(bar, "NULL") != 0 ? bar : "?");
    if (o) {
      st->holders[0].owner = o;
      st->holders[0].count = count;
      st->nholders = 1;
    }
  }
  st->kind = !st->nholders          ? "free"
             : kind == DLOCK_FENCED ? "fenced"
                                    : "reentrant";
  st->ttl_ms = st->nholders ? -1 : -2;
  *out = st;
  return 0;
}

static int my_lock_force_release(void *be, dlock_lock_kind_t kind,
                                 const char *name, bool *deleted) {
  (void)kind;
  my *p = be;
  *deleted = false;
  int rc = check_name(name);
  if (rc)
    return rc;
  char val[32];
  rc = exec_pooled(p, "SELECT IS_USED_LOCK(" LOCKNAME ")", name, val,
                   sizeof val);
  if (rc || !val[0] || strcmp(val, "NULL") == 0)
    return rc;
  char sql[48], killed[32];
  snprintf(killed, sizeof killed, "%lu", strtoul(val, NULL, 10));
  snprintf(sql, sizeof sql, "KILL %s", killed);
  rc = exec_pooled(p, sql, NULL, NULL, 0);
  if (rc)
    return rc;
  *deleted = true;
  /* KILL returns before the killed session has let its locks go: the
   * call returns once the server no longer shows that session holding
   * the name (10 ms, doubling to 100 ms, within the command timeout), so
   * that an acquire right after it finds the lock free */
  int64_t until = dlock__now_ms() + p->command_timeout_ms;
  for (int64_t pause = 10;; pause = pause < 50 ? pause * 2 : 100) {
    rc = exec_pooled(p, "SELECT IS_USED_LOCK(" LOCKNAME ")", name, val,
                     sizeof val);
    if (rc || strcmp(val, killed) != 0)
      return rc;
    if (dlock__now_ms() + pause > until)
      return dlock__seterr(DLOCK_EIOTIMEOUT,
                           "lock '%.200s': its holder's session (%s) was "
                           "killed, but the server still showed it holding "
                           "the lock after %lld ms",
                           name, killed, (long long)p->command_timeout_ms);
    dlock__sleep_ms(pause);
  }
}

static int my_ping(void *be) {
  char out[32];
  return exec_pooled(be, SQL_BEAT, NULL, out, sizeof out);
}

/* ------------------------------------------------------------ permits */

/* The permit semaphore N (docs/MYSQL.md): its size in the row of N in the
 * table dlock_semaphore (k = UNHEX(SHA2(N, 256)); `slots` is the largest
 * size it had: slots above the size after a shrink may still be held);
 * a permit in use is the user-level lock of slot i (1..K), the lock name
 * of `N#permit#i` by the rule of LOCKNAME, held by its holder's session;
 * the row (k, i) of dlock_permit names the permit id and the connection
 * that took slot i (valid while that connection holds the slot). Both
 * tables are created on first use. */
#define PSEM_MAX 1000
static const char SQL_SEM_TABLE[] =
    "CREATE TABLE IF NOT EXISTS dlock_semaphore (k BINARY(32) PRIMARY KEY, "
    "name TEXT NOT NULL, permits BIGINT NOT NULL, slots BIGINT NOT NULL) "
    "ENGINE=InnoDB";
/* MEMORY: a restart frees every slot, and no log flush per permit */
static const char SQL_PERMIT_TABLE[] =
    "CREATE TABLE IF NOT EXISTS dlock_permit (k BINARY(32) NOT NULL, slot "
    "BIGINT NOT NULL, conn BIGINT UNSIGNED NOT NULL, id VARCHAR(64) NOT NULL, "
    "PRIMARY KEY (k, slot)) ENGINE=MEMORY";
#define SEM_KEY "UNHEX(SHA2(%1$s, 256))"
#define SLOT_STR(i) "CONCAT(%1$s, '#permit#', " i ")"
/* the lock of slot i: LOCKNAME's rule applied to `N#permit#i` */
#define SLOT_LOCK(i)                                                           \
  "IF(CHAR_LENGTH(" SLOT_STR(i) ") <= 64, " SLOT_STR(                          \
      i) ", CONCAT(LEFT(" SLOT_STR(i) ", 23), '#', LEFT(SHA2(" SLOT_STR(i) "," \
                                                                           " " \
                                                                           "2" \
                                                                           "5" \
                                                                           "6" \
                                                                           ")" \
                                                                           "," \
                                                                           " " \
                                                                           "4" \
                                                                           "0" \
                                                                           ")" \
                                                                           ")" \
                                                                           ")"
/* the semaphore's row d, and s its slots 1..d.slots */
#define SQL_SLOTS                                                              \
  "WITH RECURSIVE d AS (SELECT permits, slots FROM dlock_semaphore WHERE k "   \
  "= " SEM_KEY                                                                 \
  "), s(i) AS (SELECT CAST(1 AS SIGNED) UNION ALL SELECT s.i + 1 "             \
  "FROM s, d WHERE s.i < d.slots) "
/* The scan (a try past the fast one, try_slot): the first free slot of 1..K
 * taken on this session, unless the semaphore shrank and K slots of 1..slots
 * are in use (permits|slot or NULL|connection id; no row: no semaphore). No
 * ORDER BY: the scan stops at the first slot GET_LOCK took (LIMIT 1), and a
 * sort would run GET_LOCK on every row first. */
static const char SQL_PSEM_TRY[] =
    SQL_SLOTS "SELECT d.permits, (SELECT s.i FROM s WHERE s.i <= d.permits "
              "AND (d.slots <= d.permits OR (SELECT "
              "COUNT(IS_USED_LOCK(" SLOT_LOCK(
                  "u.i") ")) FROM s u) < d.permits) AND "
                         "GET_LOCK(" SLOT_LOCK("s.i") ", "
                                                      "0) = 1 LIMIT 1), "
                                                      "CONNECTION_ID() "
                                                      "FROM d";
/* the size, and per slot in use: slot, holder's connection, its permit id
 * (NULL: not a dlock holder's), user@host (one row with slot NULL: none in
 * use; no row: no semaphore) */
static const char SQL_PSEM_HOLDERS[] =
    SQL_SLOTS "SELECT d.permits, s.i, IS_USED_LOCK(" SLOT_LOCK(
        "s.i") "), (SELECT p.id FROM dlock_permit p WHERE p.k = " SEM_KEY
               " AND p.slot = s.i AND p.conn = IS_USED_LOCK(" SLOT_LOCK(
                   "s.i") ")), (SELECT CONCAT(USER, '@', HOST) FROM "
                          "information_schema.PROCESSLIST WHERE ID = "
                          "IS_USED_LOCK(" SLOT_LOCK(
                              "s.i") ")) FROM d LEFT JOIN s ON "
                                     "IS_USED_LOCK(" SLOT_LOCK("s.i") ") IS "
                                                                      "NOT "
                                                                      "NULL "
                                                                      "ORDER "
                                                                      "BY s.i";
static const char SQL_PSEM_SET[] =
    "INSERT INTO dlock_semaphore (k, name, permits, slots) VALUES (" SEM_KEY
    ", %1$s, %2$lld, %2$lld) ON DUPLICATE KEY UPDATE k = k";
/* adds n unless the size would pass PSEM_MAX (then nothing changes: 0
 * rows affected); `slots` first, from the size before */
static const char SQL_PSEM_ADD[] =
    "INSERT INTO dlock_semaphore (k, name, permits, slots) VALUES (" SEM_KEY
    ", %1$s, %2$lld, GREATEST(%2$lld, 0)) ON DUPLICATE KEY UPDATE slots = "
    "IF(permits + %2$lld > %3$d, slots, GREATEST(slots, permits + %2$lld)), "
    "permits = IF(permits + %2$lld > %3$d, permits, permits + %2$lld)";

/* The name of slot i of the semaphore `name`, whose lock is LOCKNAME's. */
static char *slot_name(const char *name, int64_t slot) {
  return dlock__asprintf("%s#permit#%lld", name, (long long)slot);
}

/* fmt, whose %1$s is the quoted name, with the other arguments put in
 * first (they are numbers: no quoting). */
static char *sem_sql(const char *fmt, int64_t n) {
  return dlock__asprintf(fmt, "%1$s", (long long)n, PSEM_MAX);
}

/* One statement on a pooled connection, about the semaphore name; a
 * missing table is created and the statement run once more when `create`,
 * else *absent is set (no error). *affected: rows it changed. */
static int sem_exec(my *p, const char *fmt, const char *name, bool create,
                    bool *absent, char *out, size_t cap, uint64_t *affected) {
  if (absent)
    *absent = false;
  for (int round = 0; round < 3; round++) {
    MYSQL *c;
    bool fresh;
    int64_t wt;
    int rc = conn_get(p, &c, &fresh, &wt);
    if (rc)
      return rc;
    rc = exec_named(p, c, fmt, name, out, cap);
    if (rc == 0) {
      if (affected)
        *affected = (uint64_t)mysql_affected_rows(c);
      conn_put(p, c, wt);
      return 0;
    }
    unsigned e = mysql_errno(c);
    if (e == 1146 && round < 2) { /* no such table */
      if (!create) {
        conn_put(p, c, wt);
        if (absent)
          *absent = true;
        dlock__seterr(DLOCK_OK, "%s", "");
        return 0;
      }
      rc = exec_sql(p, c, SQL_SEM_TABLE, NULL, 0);
      if (!rc)
        rc = exec_sql(p, c, SQL_PERMIT_TABLE, NULL, 0);
      if (!rc) {
        conn_put(p, c, wt);
        dlock__seterr(DLOCK_OK, "%s", "");
        continue;
      }
      e = mysql_errno(c);
    }
    mysql_close(c);
    if (!(lost_errno(e) && !fresh) || round > 0)
      return rc;
  }
  return dlock__seterr(DLOCK_EUNAVAILABLE, "mysql %s: connection lost",
                       p->where);
}

static int check_permits(int64_t n) {
  if (n > PSEM_MAX || n < -PSEM_MAX)
    return dlock__seterr(DLOCK_EINVAL,
                         "the mysql backend keeps one user-level lock per "
                         "permit: a semaphore has at most %d permits",
                         PSEM_MAX);
  return 0;
}

/* Wakes this client's permit waits of `name`: a permit of it came free
 * here, or it grew (another client's waits find out by their scans). */
static void wake_permit_waits(my *p, const char *name) {
  pthread_mutex_lock(&p->mu);
  for (my_wait *r = p->waits; r; r = r->next)
    if (r->w->spec->sync && strcmp(r->w->spec->name, name) == 0)
      dlock__wait_wake(r->w);
  pthread_mutex_unlock(&p->mu);
}

static int my_sem_set(void *be, const char *name, int64_t permits, bool *set) {
  my *p = be;
  *set = false;
  int rc = check_name(name);
  if (!rc)
    rc = check_permits(permits);
  if (rc)
    return rc;
  char *sql = sem_sql(SQL_PSEM_SET, permits);
  if (!sql)
    return dlock__seterr(DLOCK_ENOMEM, "mysql: out of memory");
  uint64_t n = 0;
  rc = sem_exec(p, sql, name, true, NULL, NULL, 0, &n);
  dlock__free(sql);
  if (rc == 0 && n == 1) {
    *set = true;
    wake_permit_waits(p, name);
  }
  return rc;
}

static int my_sem_add(void *be, const char *name, int64_t n) {
  my *p = be;
  int rc = check_name(name);
  if (!rc)
    rc = check_permits(n);
  if (rc || n == 0)
    return rc;
  char *sql = sem_sql(SQL_PSEM_ADD, n);
  if (!sql)
    return dlock__seterr(DLOCK_ENOMEM, "mysql: out of memory");
  uint64_t changed = 0;
  rc = sem_exec(p, sql, name, true, NULL, NULL, 0, &changed);
  dlock__free(sql);
  if (rc == 0 && changed == 0) /* it would pass the bound */
    return check_permits(PSEM_MAX + 1);
  if (rc == 0 && n > 0)
    wake_permit_waits(p, name);
  return rc;
}

static int my_sem_counting(void *be, const char *name, int64_t permits) {
  (void)be;
  (void)name;
  (void)permits;
  return dlock__seterr(DLOCK_ENOTSUP,
                       "the mysql backend has no counting semaphores");
}

/* The semaphore's size and holders (SQL_PSEM_HOLDERS): *res NULL when
 * there is no semaphore. */
static int holders(my *p, const char *name, MYSQL_RES **res) {
  *res = NULL;
  int rc = check_name(name);
  if (rc)
    return rc;
  for (int round = 0; round < 2; round++) {
    MYSQL *c;
    bool fresh;
    int64_t wt;
    rc = conn_get(p, &c, &fresh, &wt);
    if (rc)
      return rc;
    char *sql = with_name(c, SQL_PSEM_HOLDERS, name);
    if (!sql) {
      conn_put(p, c, wt);
      return dlock__seterr(DLOCK_ENOMEM, "mysql: out of memory");
    }
    rc = mysql_real_query(c, sql, (unsigned long)strlen(sql)) ? sql_error(p, c)
                                                              : 0;
    dlock__free(sql);
    if (rc == 0) {
      MYSQL_RES *r = mysql_store_result(c);
      if (!r)
        rc = sql_error(p, c);
      else {
        conn_put(p, c, wt);
        if (mysql_num_rows(r) == 0) {
          mysql_free_result(r);
          r = NULL;
        }
        *res = r;
        return 0;
      }
    }
    unsigned e = mysql_errno(c);
    if (e == 1146) { /* no table: no semaphore */
      conn_put(p, c, wt);
      dlock__seterr(DLOCK_OK, "%s", "");
      return 0;
    }
    mysql_close(c);
    if (!(lost_errno(e) && !fresh))
      return rc;
  }
  return dlock__seterr(DLOCK_EUNAVAILABLE, "mysql %s: connection lost",
                       p->where);
}

/* The counts of a holders result: size and slots in use. */
static void holder_counts(MYSQL_RES *r, int64_t *size, int64_t *in_use) {
  *size = *in_use = 0;
  MYSQL_ROW row;
  mysql_data_seek(r, 0);
  while ((row = mysql_fetch_row(r)) != NULL) {
    *size = row[0] ? atoll(row[0]) : 0;
    if (row[1] && row[2])
      (*in_use)++;
  }
  mysql_data_seek(r, 0);
}

static int my_sem_available(void *be, dlock__sync_kind kind, const char *name,
                            int64_t *out) {
  my *p = be;
  *out = 0;
  if (kind != DLOCK__SYNC_PERMIT)
    return my_sem_counting(be, name, 0);
  MYSQL_RES *r = NULL;
  int rc = holders(p, name, &r);
  if (rc || !r)
    return rc;
  int64_t size, in_use;
  holder_counts(r, &size, &in_use);
  mysql_free_result(r);
  *out = size - in_use > 0 ? size - in_use : 0;
  return 0;
}

static int my_sem_delete(void *be, dlock__sync_kind kind, const char *name,
                         bool *existed) {
  my *p = be;
  *existed = false;
  if (kind != DLOCK__SYNC_PERMIT)
    return my_sem_counting(be, name, 0);
  MYSQL_RES *r = NULL;
  int rc = holders(p, name, &r);
  if (rc)
    return rc;
  uint64_t n = 0;
  bool absent;
  rc = sem_exec(p, "DELETE FROM dlock_semaphore WHERE k = " SEM_KEY, name,
                false, &absent, NULL, 0, &n);
  if (rc == 0 && !absent)
    rc = sem_exec(p, "DELETE FROM dlock_permit WHERE k = " SEM_KEY, name, false,
                  NULL, NULL, 0, NULL);
  /* the holders' sessions end, and their permits with them: their
   * releases say DLOCK_ELOST */
  MYSQL_ROW row;
  while (rc == 0 && r && (row = mysql_fetch_row(r)) != NULL) {
    if (!row[1] || !row[2])
      continue;
    char sql[48];
    snprintf(sql, sizeof sql, "KILL %lu", strtoul(row[2], NULL, 10));
    rc = exec_pooled(p, sql, NULL, NULL, 0);
    if (rc && strstr(dlock_last_error(), "Unknown thread"))
      rc = 0; /* it had ended meanwhile */
  }
  if (r)
    mysql_free_result(r);
  if (rc == 0)
    *existed = n > 0;
  return rc;
}

/* Slot `slot` of the semaphore `name`, taken on c (session `id`), becomes
 * the permit `pid`: its id is recorded in dlock_permit (on c: the
 * statement restarts the session's idle clock), then the hold. With
 * `check` (a probe's grant, which came while the wait slept) the slot must
 * still be one of the semaphore's 1..K. 1, 0 (given back), or an error (c
 * closed, the slot with its session). */
static int permit_take(my *p, MYSQL *c, const char *name, int64_t slot,
                       unsigned long id, int64_t wt, const char *pid,
                       bool check) {
  char *sn = slot_name(name, slot);
  char *sql = dlock__asprintf("REPLACE INTO dlock_permit (k, slot, conn, id) "
                              "VALUES (" SEM_KEY ", %2$lld, CONNECTION_ID(), "
                              "'%3$s')",
                              "%1$s", (long long)slot, pid);
  int rc = sn && sql ? 0 : dlock__seterr(DLOCK_ENOMEM, "mysql: out of memory");
  if (!rc && check) {
    char out[32];
    rc = exec_named(p, c,
                    "SELECT permits FROM dlock_semaphore WHERE k = " SEM_KEY,
                    name, out, sizeof out);
    if (!rc && (!out[0] || atoll(out) < slot)) { /* deleted, or shrank */
      give_back(p, c, sn, wt);
      dlock__free(sn);
      dlock__free(sql);
      return 0;
    }
  }
  for (int round = 0; !rc; round++) {
    rc = exec_named(p, c, sql, name, NULL, 0);
    if (!rc || round > 0 || mysql_errno(c) != 1146)
      break;
    rc = exec_sql(p, c, SQL_PERMIT_TABLE, NULL, 0);
  }
  my_hold *h = rc ? NULL : dlock__calloc(1, sizeof *h);
  char *n = h ? dlock__strdup(name) : NULL, *o = n ? dlock__strdup(pid) : NULL;
  if (!rc && !o)
    rc = dlock__seterr(DLOCK_ENOMEM, "mysql: out of memory");
  dlock__free(sn);
  dlock__free(sql);
  if (rc) {
    dlock__free(h);
    dlock__free(n);
    mysql_close(c); /* its session ends, and the slot with it */
    return rc;
  }
  h->permit = true;
  h->slot = slot;
  hold_add(p, h, n, o, c, id, wt);
  return 1;
}

/* The permit wait of `name` whose acquire asks for permit `pid` (the
 * wait's owner, core/sync.c), or NULL (mu held). */
static my_wait *permit_wait_find(my *p, const char *name, const char *pid) {
  for (my_wait *r = p->waits; r; r = r->next)
    if (r->w->spec->sync && r->w->spec->owner &&
        strcmp(r->w->spec->owner, pid) == 0 &&
        strcmp(r->w->spec->name, name) == 0)
      return r;
  return NULL;
}

/* Reads the answers of r's probes that came (the loop saw their sockets
 * readable): the first slot granted becomes the permit `pid` (1), any
 * other is given back. 0 when none did. */
static int probes_claim(my *p, my_wait *r, const char *name, const char *pid) {
  int claimed = 0;
  for (int j = 0; j < MY_PROBES; j++) {
    pthread_mutex_lock(&p->mu);
    my_pending *q = &r->q[j];
    if (q->state != W_READY || !q->conn) {
      pthread_mutex_unlock(&p->mu);
      continue;
    }
    MYSQL *c = q->conn;
    int64_t wt = q->wt, slot = q->slot;
    unsigned long id = q->id;
    q->conn = NULL;
    q->state = W_IDLE;
    pthread_mutex_unlock(&p->mu);
    unsigned long got_id = 0;
    int got = read_pending(p, c, &got_id);
    if (got < 0) {
      unsigned e = mysql_errno(c);
      if (e == 1317 || e == 1028) /* interrupted (KILL QUERY) */
        conn_put(p, c, wt);
      else
        mysql_close(c); /* its session ended, with whatever it had */
      continue;
    }
    if (got == 0) { /* the bound passed */
      conn_put(p, c, wt);
      continue;
    }
    if (claimed || got_id != id) { /* one permit per attempt; a proxy */
      char *sn = slot_name(name, slot);
      if (sn)
        give_back(p, c, sn, wt);
      else
        mysql_close(c);
      dlock__free(sn);
      continue;
    }
    if (permit_take(p, c, name, slot, id, wt, pid, true) == 1)
      claimed = 1;
  }
  return claimed;
}

/* Sends r's probes that are not pending, on slots of 1..k: a blocking
 * GET_LOCK each, on a connection of its own, so the server wakes the wait
 * the moment one of those slots frees. Waits of a semaphore spread over
 * its slots (the first slot is the wait's sequence number mod k). A
 * probe that cannot be sent is left to the wait's scans. */
static void probes_send(my *p, my_wait *r, const char *name, int64_t k,
                        int64_t lease_ms) {
  int n = k < MY_PROBES ? (int)k : MY_PROBES;
  bool sent = false;
  for (int j = 0; j < n; j++) {
    my_pending *q = &r->q[j];
    pthread_mutex_lock(&p->mu);
    bool idle = q->state == W_IDLE && !q->conn;
    pthread_mutex_unlock(&p->mu);
    if (!idle)
      continue;
    int64_t slot = (int64_t)((r->w->spec->seq + (uint64_t)j) % (uint64_t)k) + 1;
    char *sn = slot_name(name, slot);
    if (!sn)
      break;
    q->slot = slot; /* idle: the loop does not look at it */
    int rc = pending_send(p, q, sn, lease_ms);
    dlock__free(sn);
    if (rc) {
      dlock__log(p->core, DLOCK_LOG_WARN,
                 "mysql: permit wait of '%.200s' cannot watch slot %lld "
                 "(%s): it looks again every %lld ms",
                 name, (long long)slot, dlock_last_error(),
                 (long long)p->psem_retry_ms);
      break;
    }
    sent = true;
  }
  if (sent)
    dlock__client_poke(p->core);
}

/* The try's first statement covers slots 1..MY_FAST_SLOTS with the slot
 * lock names written out (a CASE takes the first it can, no series to
 * build): a semaphore that is larger, or that shrank, is scanned by
 * SQL_PSEM_TRY. */
#define MY_FAST_SLOTS 16

/* The quoted lock name of slot i of `name` for c: the slot's name itself
 * when it has at most 64 bytes, else LOCKNAME's rule on it. */
static char *slot_lock_sql(MYSQL *c, const char *name, int64_t i) {
  char *sn = slot_name(name, i);
  if (!sn)
    return NULL;
  char *sql = with_name(c, strlen(sn) <= 64 ? "%1$s" : LOCKNAME, sn);
  dlock__free(sn);
  return sql;
}

/* The fast try: "permits|slot or NULL|connection id|slots" into out, ""
 * when there is no semaphore. */
static int fast_try(my *p, MYSQL *c, const char *name, char *out, size_t cap) {
  size_t len = 0, room = 2048;
  char *sql = dlock__calloc(1, room);
  int rc = sql ? 0 : DLOCK_ENOMEM;
  for (int64_t i = 0; !rc && i <= MY_FAST_SLOTS + 1; i++) {
    char *part = NULL, *lock = NULL;
    if (i == 0)
      part = dlock__strdup("SELECT d.permits, CASE WHEN d.slots > d.permits "
                           "THEN NULL");
    else if (i <= MY_FAST_SLOTS && (lock = slot_lock_sql(c, name, i)))
      part = dlock__asprintf(" WHEN d.permits >= %lld AND GET_LOCK(%s, 0) = 1 "
                             "THEN %lld",
                             (long long)i, lock, (long long)i);
    else if (i > MY_FAST_SLOTS)
      part = with_name(c,
                       " END, CONNECTION_ID(), d.slots FROM dlock_semaphore d "
                       "WHERE d.k = " SEM_KEY,
                       name);
    dlock__free(lock);
    size_t n = part ? strlen(part) : 0;
    if (part && len + n + 1 > room) {
      room = 2 * (len + n + 1);
      char *more = dlock__reallocarray(sql, room, 1);
      if (more)
        sql = more;
      else
        n = 0, dlock__free(part), part = NULL;
    }
    if (!part)
      rc = DLOCK_ENOMEM;
    else
      memcpy(sql + len, part, n + 1), len += n;
    dlock__free(part);
  }
  if (rc) {
    dlock__free(sql);
    return dlock__seterr(DLOCK_ENOMEM, "mysql: out of memory");
  }
  rc = exec_sql(p, c, sql, out, cap);
  dlock__free(sql);
  return rc;
}

/* A try on c: "permits|slot or NULL|connection id" into out ("": no
 * semaphore). */
static int try_slot(my *p, MYSQL *c, const char *name, char *out, size_t cap) {
  int rc = fast_try(p, c, name, out, cap);
  if (rc || !out[0])
    return rc;
  /* permits|slot|id|slots */
  char *f2 = strchr(out, '|'), *f3 = f2 ? strchr(f2 + 1, '|') : NULL;
  char *f4 = f3 ? strchr(f3 + 1, '|') : NULL;
  if (!f4)
    return dlock__seterr(DLOCK_EPROTO,
                         "mysql %s: a try's answer without "
                         "its columns",
                         p->where);
  int64_t permits = atoll(out), slots = atoll(f4 + 1);
  if (strncmp(f2 + 1, "NULL|", 5) != 0 ||
      (slots <= permits && permits <= MY_FAST_SLOTS)) {
    *f4 = '\0';
    return 0;
  }
  return exec_named(p, c, SQL_PSEM_TRY, name, out, cap);
}

static int my_psem_acquire(void *be, const char *name, const char *id,
                           int64_t lease_ms, int64_t *retry_in_ms) {
  my *p = be;
  /* slots a wait does not watch, and a size that grew, are found by its
   * next scan */
  *retry_in_ms = p->psem_retry_ms;
  int rc = check_name(name);
  if (rc)
    return rc;
  pthread_mutex_lock(&p->mu);
  my_wait *r = permit_wait_find(p, name, id);
  pthread_mutex_unlock(&p->mu);
  if (r && probes_claim(p, r, name, id) == 1)
    return 1;
  int64_t k = 0;
  for (int round = 0; round < 2; round++) {
    MYSQL *c;
    bool fresh;
    int64_t wt;
    rc = conn_get(p, &c, &fresh, &wt);
    if (rc)
      return rc;
    char out[96];
    rc = set_lease(p, c, &wt, lease_ms);
    if (!rc)
      rc = try_slot(p, c, name, out, sizeof out);
    if (rc == 0) {
      /* permits|slot|connection id; "" no semaphore */
      char *f2 = strchr(out, '|'), *f3 = f2 ? strchr(f2 + 1, '|') : NULL;
      if (f3 && strncmp(f2 + 1, "NULL|", 5) != 0)
        return permit_take(p, c, name, atoll(f2 + 1), strtoul(f3 + 1, NULL, 10),
                           wt, id, false);
      k = out[0] ? atoll(out) : 0;
      conn_put(p, c, wt);
      break;
    }
    unsigned e = mysql_errno(c);
    if (e == 1146) { /* no table: no semaphore, no permits */
      conn_put(p, c, wt);
      dlock__seterr(DLOCK_OK, "%s", "");
      return 0;
    }
    mysql_close(c); /* a failed try's session ends: it holds nothing */
    if (!(lost_errno(e) && !fresh)) {
      if (rc == DLOCK_EUNAVAILABLE)
        dlock__err_set_unsent(true);
      return rc;
    }
    if (round == 1)
      return dlock__seterr(DLOCK_EUNAVAILABLE, "mysql %s: connection lost",
                           p->where);
  }
  if (r && k > 0)
    probes_send(p, r, name, k, lease_ms);
  return 0;
}

static int my_psem_release(void *be, const char *name, const char *id) {
  my *p = be;
  pthread_mutex_lock(&p->mu);
  my_hold **link = NULL;
  my_hold *h = permit_find(p, name, id, &link);
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
  MYSQL *c = h->conn;
  int64_t wt = h->wt, slot = h->slot;
  hold_free(h);
  if (!c)
    return 0; /* its session was lost, and the permit with it */
  char *sn = slot_name(name, slot);
  if (!sn) {
    mysql_close(c); /* the session ends, and the permit with it */
    return 1;
  }
  char out[16];
  int rc = exec_named(p, c, SQL_RELEASE(sn), sn, out, sizeof out);
  dlock__free(sn);
  if (rc) {
    /* as a lock's release: a session the server closed had lost the
     * permit; one that did not answer ends now */
    bool closed = rc == DLOCK_EUNAVAILABLE;
    mysql_close(c);
    return closed ? 0 : rc;
  }
  conn_put(p, c, wt);
  wake_permit_waits(p, name);
  return strcmp(out, "1") == 0 ? 1 : 0;
}

static int my_psem_state(void *be, const char *name, dlock_sem_state_t **out) {
  my *p = be;
  *out = NULL;
  MYSQL_RES *r = NULL;
  int rc = holders(p, name, &r);
  if (rc)
    return rc;
  int64_t size = 0, in_use = 0;
  if (r)
    holder_counts(r, &size, &in_use);
  dlock_sem_state_t *st = dlock__calloc(1, sizeof *st);
  size_t cap = in_use < 100 ? (size_t)in_use : 100;
  if (st) {
    st->name = dlock__strdup(name);
    st->permits = dlock__calloc(cap + 1, sizeof *st->permits);
  }
  if (!st || !st->name || !st->permits) {
    if (r)
      mysql_free_result(r);
    dlock_sem_state_free(st);
    return dlock__seterr(DLOCK_ENOMEM, "mysql: out of memory");
  }
  st->available = size - in_use > 0 ? size - in_use : 0;
  st->in_use = in_use;
  MYSQL_ROW row;
  while (r && st->npermits < cap && (row = mysql_fetch_row(r)) != NULL) {
    if (!row[1] || !row[2])
      continue;
    /* a dlock holder's permit id; else the session that holds the slot */
    char *id = row[3] ? dlock__strdup(row[3])
                      : dlock__asprintf("connection %s (%s)", row[2],
                                        row[4] ? row[4] : "?");
    if (!id)
      break;
    st->permits[st->npermits].id = id;
    st->permits[st->npermits].expires_in_ms = -1;
    st->npermits++;
  }
  if (r)
    mysql_free_result(r);
  *out = st;
  return 0;
}

/* ------------------------------------------------------------ waits */

static int my_wait_begin(void *be, dlock__wait *w) {
  my *p = be;
  if (w->spec->sync && w->spec->sync_kind != DLOCK__SYNC_PERMIT)
    return dlock__seterr(DLOCK_ENOTSUP, "the mysql backend has no counting "
                                        "semaphores or latches");
  my_wait *r = dlock__calloc(1, sizeof *r);
  if (!r)
    return DLOCK_ENOMEM;
  r->w = w;
  for (int j = 0; j < MY_PROBES; j++)
    r->q[j].polled_fd = -1;
  w->reg = r;
  pthread_mutex_lock(&p->mu);
  r->next = p->waits;
  p->waits = r;
  pthread_mutex_unlock(&p->mu);
  dlock__wait_set_ready(w, true, false);
  return 0;
}

static bool my_wait_hot(void *be, const dlock__wait_spec *spec) {
  (void)be;
  (void)spec;
  return false; /* always try once before waiting */
}

/* Ends a wait's statement before wait_end returns, so that the lock is
 * free for others then: a pending GET_LOCK is interrupted (`KILL QUERY`
 * from a pooled connection) and its answer read on its own connection (the
 * statement is over once it comes); a grant that raced with the end is
 * released there. A connection a kill was sent to is closed after (a kill
 * that came once the statement had ended could cut its next one). */
static void end_wait(my *p, MYSQL *c, unsigned long id, int64_t wt,
                     const char *name, bool pending) {
  if (pending && id) {
    char sql[48];
    snprintf(sql, sizeof sql, "KILL QUERY %lu", id);
    if (exec_pooled(p, sql, NULL, NULL, 0) != 0) {
      mysql_close(c); /* the server ends the statement at its bound */
      return;
    }
  }
  unsigned long got_id = 0;
  int got = read_pending(p, c, &got_id);
  if (got < 0) {
    mysql_close(c);
    return;
  }
  char out[16];
  if (got == 1 && exec_named(p, c, "SELECT RELEASE_LOCK(" LOCKNAME ")", name,
                             out, sizeof out) != 0) {
    mysql_close(c); /* the session ends, and the lock with it */
    return;
  }
  if (pending)
    mysql_close(c);
  else
    conn_put(p, c, wt);
}

static void my_wait_end(void *be, dlock__wait *w) {
  my *p = be;
  my_wait *r = w->reg;
  if (!r)
    return;
  pthread_mutex_lock(&p->mu);
  for (my_wait **rp = &p->waits; *rp; rp = &(*rp)->next)
    if (*rp == r) {
      *rp = r->next;
      break;
    }
  pthread_mutex_unlock(&p->mu);
  w->reg = NULL;
  bool unsent = dlock__err_unsent(), worded = dlock__err_worded();
  char saved[512];
  snprintf(saved, sizeof saved, "%s", dlock_last_error());
  /* off the list: the loop no longer looks at its statements */
  for (int j = 0; j < MY_PROBES; j++) {
    my_pending *q = &r->q[j];
    if (!q->conn)
      continue;
    char *sn = w->spec->sync ? slot_name(w->spec->name, q->slot) : NULL;
    if (w->spec->sync && !sn)
      mysql_close(q->conn); /* its session ends, with what it took */
    else
      end_wait(p, q->conn, q->id, q->wt, sn ? sn : w->spec->name,
               q->state == W_SENT);
    dlock__free(sn);
  }
  dlock__free(r);
  dlock__seterr(DLOCK_OK, "%s", saved);
  dlock__err_set_unsent(unsent);
  if (worded)
    dlock__err_set_worded();
}

/* ------------------------------------------------------------ sent ops */

/* Whether the whole answer to the statement sent on fd is in the socket's
 * buffer (looked at with MSG_PEEK: nothing is consumed), so that the
 * connector's blocking read of it returns without waiting: one OK or ERR
 * packet, or a result set (the column count, as many column definitions,
 * EOF, rows, EOF or ERR). The connector asks for no CLIENT_DEPRECATE_EOF
 * and this backend for no compression nor TLS, so these are the packets
 * on the socket; the answers sent here are well under the buffer (an
 * answer that is not understood, or larger, is never taken as complete:
 * its deadline ends it). */
static bool answer_in(int fd) {
  unsigned char b[4096];
  ssize_t got = recv(fd, b, sizeof b, MSG_PEEK | MSG_DONTWAIT);
  if (got <= 0) /* closed, or failed: the read fails at once */
    return got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
  size_t n = (size_t)got, at = 0;
  uint64_t cols = 0;
  for (int phase = 0; at + 4 <= n;) {
    size_t len = b[at] | (size_t)b[at + 1] << 8 | (size_t)b[at + 2] << 16;
    const unsigned char *q = b + at + 4;
    if (len == 0 || len == 0xffffff || at + 4 + len > n)
      return false;
    at += 4 + len;
    bool err = q[0] == 0xff, eof = q[0] == 0xfe && len < 9;
    if (err && len >= 3 && q[1] == 0xff && q[2] == 0xff)
      continue;       /* a progress report */
    if (phase == 0) { /* OK, ERR, or the column count */
      if (err || q[0] == 0x00)
        return true;
      if (q[0] >= 0xfb)
        return false;
      cols = q[0];
      phase = 1;
    } else if (phase == 1) { /* a column definition */
      phase = --cols == 0 ? 2 : 1;
    } else if (phase == 2) { /* EOF after the definitions */
      phase = 3;
    } else if (err) { /* rows, then EOF or ERR */
      return true;
    } else if (eof) {
      unsigned status = len >= 5 ? q[3] | (unsigned)q[4] << 8 : 0;
      if (!(status & SERVER_MORE_RESULTS_EXIST))
        return true;
      phase = 0;
    }
  }
  return false;
}

/* Whether the pooled connection c is still open: an idle connection has
 * nothing to read unless the server closed it (a restart, KILL, its
 * wait_timeout). */
static bool idle_open(MYSQL *c) {
  struct pollfd q = {.fd = (int)mysql_get_socket(c),
                     .events = POLLIN | POLLRDHUP};
  return q.fd >= 0 && poll(&q, 1, 0) == 0;
}

static void sent_free(my_sent *s) {
  dlock__free((char *)s->a.name);
  dlock__free((char *)s->a.owner);
  dlock__free(s);
}

/* The end of a sent operation (no mutex held): its done runs, once. */
static void sent_end(my_sent *s, int rc, int64_t x, int64_t y) {
  s->done(s->arg, rc, x, y);
  sent_free(s);
}

/* Sends the statement fmt (%1$s the name) on s->conn as s's step, and
 * queues s for the loop, which polls its socket from its next round on
 * (poke: from another thread, the loop is told). 0, or an error (s is not
 * queued, s->conn is as it was). A statement of a few hundred bytes on a
 * connection whose last answer was read (so the server read all that was
 * sent) goes into the socket's empty buffer without waiting. */
static int sent_out(my *p, my_sent *s, const char *fmt, int step, bool poke) {
  char *sql = with_name(s->conn, fmt, s->a.name);
  if (!sql)
    return dlock__seterr(DLOCK_ENOMEM, "mysql: out of memory");
  int rc = mysql_send_query(s->conn, sql, (unsigned long)strlen(sql))
               ? sql_error(p, s->conn)
               : 0;
  dlock__free(sql);
  if (rc)
    return rc;
  s->step = step;
  s->deadline = dlock__deadline_after(p->command_timeout_ms);
  pthread_mutex_lock(&p->mu);
  s->polled_fd = -1;
  s->next = p->sent;
  p->sent = s;
  pthread_mutex_unlock(&p->mu);
  if (poke)
    dlock__client_poke(p->core);
  return 0;
}

/* The answer of s's statement, complete in its socket (answer_in), read
 * on the loop thread (no mutex held), and handled as the blocking
 * operation handles it: the try's (try_answer), a fenced grant's token
 * (next_token's steps: the table created when missing), the release's
 * (release_answer). A token that fails closes the connection: its
 * session ends, and the lock with it. */
static void sent_answer(my *p, my_sent *s) {
  MYSQL *c = s->conn;
  char out[48] = "";
  int rc = mysql_read_query_result(c) ? sql_error(p, c)
                                      : stored_row(p, c, out, sizeof out);
  int64_t tok = 0;
  int next = -1;
  bool lost = false;
  switch (s->step) {
  case S_LEASE: /* set_lease's SET: the try follows */
    if (rc == 0) {
      s->wt = secs(s->a.lease_ms);
      next = S_TRY;
      break;
    }
    rc = try_answer(p, c, -1, rc, out, &s->id, &lost);
    sent_end(s, lost ? DLOCK__SEND_BLOCKS : rc, -1, 0);
    return;
  case S_RELEASE:
    sent_end(s, release_answer(p, c, s->wt, rc, out), 0, 0);
    return;
  case S_TRY:
    rc = try_answer(p, c, s->wt, rc, out, &s->id, &lost);
    if (rc == 1 && s->a.kind == DLOCK_FENCED)
      next = S_TOKEN;
    else if (rc < 0) { /* a lost connection held nothing: the pool's try */
      sent_end(s, lost ? DLOCK__SEND_BLOCKS : rc, -1, 0);
      return;
    }
    break;
  case S_TOKEN:
    if (rc == 0)
      tok = (int64_t)mysql_insert_id(c);
    else if (!s->table_made && mysql_errno(c) == 1146) /* no such table */
      next = S_TABLE;
    rc = rc ? rc : 1;
    break;
  default: /* S_TABLE */
    if (rc == 0) {
      s->table_made = true; /* a second 1146 fails */
      next = S_TOKEN;
    }
    break;
  }
  if (next >= 0) {
    rc = sent_out(p, s,
                  next == S_TRY     ? SQL_TRY(s->a.name)
                  : next == S_TOKEN ? SQL_TOKEN
                                    : SQL_FENCE_TABLE,
                  next, false);
    if (rc == 0)
      return;
    if (next == S_TRY) { /* nothing taken: the pool's try */
      mysql_close(c);
      sent_end(s, DLOCK__SEND_BLOCKS, -1, 0);
      return;
    }
  }
  if (rc == 1)
    rc = hold_record(p, &s->a, c, s->id, s->wt, tok);
  if (rc < 0)
    mysql_close(c); /* the session ends, and the lock with it */
  sent_end(s, rc, -1, rc == 1 ? tok : 0);
}

/* A sent statement the server did not answer by its deadline: the
 * connection's state is unknown, so it is closed (a lock it took ends
 * with its session), as the blocking path's read timeout ends it. */
static void sent_expire(my *p, my_sent *s) {
  mysql_close(s->conn);
  dlock__seterr(DLOCK_EIOTIMEOUT,
                "mysql %s: lock '%.200s': the server did not answer in %lld "
                "ms",
                p->where, s->a.name, (long long)p->command_timeout_ms);
  sent_end(s, DLOCK_EIOTIMEOUT, -1, 0);
}

/* The dialling worker: a pooled connection whose session has the
 * wait_timeout the sends ask for, for the next sends to find. */
static void dial_job(void *arg) {
  my *p = arg;
  char saved[512];
  snprintf(saved, sizeof saved, "%s", dlock_last_error());
  pthread_mutex_lock(&p->mu);
  int64_t lease_ms = p->dial_lease_ms;
  pthread_mutex_unlock(&p->mu);
  MYSQL *c;
  bool fresh;
  int64_t wt;
  if (conn_get(p, &c, &fresh, &wt) == 0) {
    (void)set_lease(p, c, &wt, lease_ms);
    conn_put(p, c, wt); /* closed when the SET failed (wt -1) */
  }
  pthread_mutex_lock(&p->mu);
  p->dial_queued = false;
  pthread_mutex_unlock(&p->mu);
  dlock__seterr(DLOCK_OK, "%s", saved);
}

/* No pooled connection for a send (lease_ms its lease): the dialling
 * worker makes one, once at a time. */
static void dial_ahead(my *p, int64_t lease_ms) {
  pthread_mutex_lock(&p->mu);
  bool go = !p->dial_queued;
  if (go) {
    p->dial_queued = true;
    p->dial_lease_ms = lease_ms;
  }
  pthread_mutex_unlock(&p->mu);
  if (go && dlock__client_run_dial(p->core, dial_job, p) != 0) {
    pthread_mutex_lock(&p->mu);
    p->dial_queued = false;
    pthread_mutex_unlock(&p->mu);
  }
}

/* The try of a reentrant or fenced lock, sent (backend.h): a re-entry
 * counts here, with no round trip; else SQL_TRY goes out on a pooled
 * connection (set_lease's SET first when its wait_timeout differs), and
 * the loop reads its answer (sent_answer). The rest goes to the pool: a
 * name of more than 64 bytes (its statement computes LOCKNAME), a wait
 * of this owner under way, no open connection pooled (one is dialled for
 * the next sends). */
static int my_lock_acquire_send(void *be, const dlock__acquire *a,
                                dlock__sent_fn done, void *arg) {
  my *p = be;
  if (a->q || !SHORT_NAME(a->name) || p->tls)
    return DLOCK__SEND_BLOCKS;
  int rc = check_name(a->name);
  if (rc)
    return rc;
  int64_t tok = 0, want = secs(a->lease_ms), wt = 0;
  pthread_mutex_lock(&p->mu);
  int held = reenter_locked(p, a, &tok);
  bool waiting = !held && wait_find(p, a->name, a->owner);
  pthread_mutex_unlock(&p->mu);
  if (held) {
    done(arg, 1, -1, tok);
    return 0;
  }
  if (waiting)
    return DLOCK__SEND_BLOCKS;
  MYSQL *c = NULL;
  for (int i = 0; !c && i < 4; i++) {
    int64_t ms = 0;
    if (!(c = dlock__idle_take(&p->idle, dlock__now_ms(), &ms)))
      break;
    wt = ms / 1000;
    if (!idle_open(c)) {
      mysql_close(c);
      c = NULL;
    }
  }
  if (!c) {
    dial_ahead(p, a->lease_ms);
    return DLOCK__SEND_BLOCKS;
  }
  my_sent *s = dlock__calloc(1, sizeof *s);
  char *n = dlock__strdup(a->name), *o = dlock__strdup(a->owner);
  if (s) {
    s->a = *a;
    s->a.name = n;
    s->a.owner = o;
    s->a.q = NULL;
    s->conn = c;
    s->wt = wt;
    s->done = done;
    s->arg = arg;
  }
  char lease[64];
  lease_sql(lease, sizeof lease, want);
  if (!s || !n || !o ||
      sent_out(p, s, wt == want ? SQL_TRY(a->name) : lease,
               wt == want ? S_TRY : S_LEASE, true) != 0) {
    /* nothing took effect: what might have, ends with the session */
    mysql_close(c);
    if (s)
      sent_free(s);
    else {
      dlock__free(n);
      dlock__free(o);
    }
    return DLOCK__SEND_BLOCKS;
  }
  return 0;
}

/* The release of a reentrant or fenced lock, sent: a count that stays,
 * and a hold that is gone, answer at once; else SQL_RELEASE goes out on
 * the hold's connection, and the loop reads its answer. A hold that a
 * renewal is using, and a long name, go to the pool. */
static int my_lock_release_send(void *be, const dlock__release *rel,
                                dlock__sent_fn done, void *arg) {
  my *p = be;
  if (!SHORT_NAME(rel->name) || p->tls)
    return DLOCK__SEND_BLOCKS;
  my_sent *s = dlock__calloc(1, sizeof *s);
  char *n = dlock__strdup(rel->name);
  if (!s || !n) {
    dlock__free(s);
    dlock__free(n);
    return DLOCK__SEND_BLOCKS;
  }
  s->a.name = n;
  s->a.kind = rel->kind;
  s->done = done;
  s->arg = arg;
  int out = release_take(p, rel, false, &s->conn, &s->wt);
  if (out == MY_RELEASE_SEND) {
    int rc = sent_out(p, s, SQL_RELEASE(rel->name), S_RELEASE, true);
    if (rc == 0)
      return 0;
    out = release_answer(p, s->conn, s->wt, rc, "");
  }
  if (out == DLOCK__SEND_BLOCKS) {
    sent_free(s);
    return out;
  }
  sent_end(s, out, 0, 0);
  return 0;
}

/* ------------------------------------------------------------ the loop */

/* Adds fd to the loop's poll set for reading; false when the set is
 * full. */
static bool poll_in(struct pollfd *fds, int *n, int max, int fd) {
  if (*n == max)
    return false;
  fds[*n].fd = fd;
  fds[*n].events = POLLIN;
  fds[*n].revents = 0;
  (*n)++;
  return true;
}

static int my_loop_prepare(void *be, int64_t now, struct pollfd *fds, int max,
                           int64_t *until) {
  my *p = be;
  int64_t swept = dlock__idle_sweep(&p->idle, now);
  if (swept < *until)
    *until = swept;
  int n = 0;
  bool more = false;
  my_sent *over = NULL;
  pthread_mutex_lock(&p->mu);
  /* sent statements: polled until their deadline, then ended here */
  for (my_sent **sp = &p->sent; *sp;) {
    my_sent *s = *sp;
    s->polled_fd = -1;
    if (now >= s->deadline) {
      *sp = s->next;
      s->next = over;
      over = s;
      continue;
    }
    if (s->deadline < *until)
      *until = s->deadline;
    int fd = (int)mysql_get_socket(s->conn);
    more = more || !poll_in(fds, &n, max, fd);
    if (!more) {
      fds[n - 1].events |= POLLRDHUP;
      s->polled_fd = fd;
    }
    sp = &s->next;
  }
  for (my_wait *r = p->waits; r; r = r->next)
    for (int j = 0; j < MY_PROBES; j++) {
      my_pending *q = &r->q[j];
      q->polled_fd = -1;
      if (q->state != W_SENT || !q->conn || more)
        continue;
      int fd = (int)mysql_get_socket(q->conn);
      more = !poll_in(fds, &n, max, fd);
      if (!more)
        q->polled_fd = fd;
    }
  /* an idle holding connection says something only when the server ends
   * the session (a restart, KILL, wait_timeout): nothing is sent on it
   * between statements. Only connections no renewal is using are polled
   * (a renewal marks its hold busy under mu before it touches the
   * connection), and the loop never reads them itself. */
  for (my_hold *h = p->holds; h; h = h->next) {
    h->polled_fd = -1;
    if (!h->conn || h->busy || h->broken || more)
      continue;
    int fd = (int)mysql_get_socket(h->conn);
    more = !poll_in(fds, &n, max, fd);
    if (!more)
      h->polled_fd = fd;
  }
  pthread_mutex_unlock(&p->mu);
  while (over) {
    my_sent *s = over;
    over = s->next;
    sent_expire(p, s);
  }
  if (more && now + 100 < *until) /* more than the loop polls */
    *until = now + 100;
  return n;
}

static void my_loop_dispatch(void *be, int64_t now, const struct pollfd *fds,
                             int n) {
  (void)now;
  my *p = be;
  bool broke = false;
  my_sent *answered = NULL;
  pthread_mutex_lock(&p->mu);
  for (int i = 0; i < n; i++) {
    if (!fds[i].revents)
      continue;
    bool found = false;
    /* a sent statement's answer is read once it is all there (or the
     * connection ended: the read fails at once), after mu is released */
    for (my_sent **sp = &p->sent; *sp; sp = &(*sp)->next) {
      my_sent *s = *sp;
      if (s->polled_fd != fds[i].fd)
        continue;
      found = true;
      if ((fds[i].revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)) ||
          answer_in(fds[i].fd)) {
        *sp = s->next;
        s->next = answered;
        answered = s;
      }
      break;
    }
    /* matched by the socket polled: a descriptor closed during the poll
     * (a released hold's connection) may be another connection's now */
    for (my_wait *r = p->waits; r && !found; r = r->next)
      for (int j = 0; j < MY_PROBES && !found; j++) {
        my_pending *q = &r->q[j];
        if (q->state == W_SENT && q->conn && q->polled_fd == fds[i].fd) {
          q->state = W_READY; /* the attempt reads the answer */
          dlock__wait_wake(r->w);
          found = true;
        }
      }
    /* a holding connection idle since loop_prepare (no renewal took it
     * meanwhile: its polled_fd would be -1) that became readable or hung
     * up: the server closed it, or sent its reason first and closes next.
     * Not read here: its heartbeat, due now, finds out and reports. */
    for (my_hold *h = p->holds; h && !found; h = h->next)
      if (h->conn && !h->busy && !h->broken && h->polled_fd == fds[i].fd) {
        h->broken = true; /* not polled again: it would stay readable */
        h->polled_fd = -1;
        broke = true;
        found = true;
      }
  }
  pthread_mutex_unlock(&p->mu);
  while (answered) {
    my_sent *s = answered;
    answered = s->next;
    sent_answer(p, s);
  }
  if (broke)
    dlock__holds_renew_now(p->core);
}

/* ------------------------------------------------------------ open, close */

static void my_free(my *p) {
  if (!p)
    return;
  /* a sent operation still out (the core's teardown waits for their
   * ends, so normally none) ends here, its session with it */
  while (p->sent) {
    my_sent *s = p->sent;
    p->sent = s->next;
    mysql_close(s->conn);
    dlock__seterr(DLOCK_ECLOSED, "mysql %s: the client was closed", p->where);
    sent_end(s, DLOCK_ECLOSED, -1, 0);
  }
  dlock__idle_destroy(&p->idle);
  for (int i = 0; i < p->ndoomed; i++)
    mysql_close(p->doomed[i]);
  while (p->holds) {
    my_hold *h = p->holds;
    p->holds = h->next;
    if (h->conn)
      mysql_close(h->conn); /* the session ends, and its locks with it */
    hold_free(h);
  }
  while (p->waits) {
    my_wait *r = p->waits;
    p->waits = r->next;
    for (int j = 0; j < MY_PROBES; j++)
      if (r->q[j].conn)
        mysql_close(r->q[j].conn);
    dlock__free(r);
  }
  dlock__free(p->host);
  dlock__free(p->user);
  dlock__free(p->password);
  dlock__free(p->db);
  dlock__free(p->socket);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cond);
  dlock__free(p);
}

static int parse_url(my *p, const char *url, const struct dlock_options *o) {
  static const dlock__uri_rules rules = {
      .example = "mysql://[user[:password]@]host[:port][/database]"
                 "[?socket=/path]",
      .default_port = MY_DEFAULT_PORT,
      .min_hosts = 0,
      .max_hosts = 1,
      .example_always = true};
  dlock__uri u;
  int rc = dlock__uri_split(url, &rules, &u);
  if (rc)
    return rc;
  if (u.has_fragment)
    return dlock__seterr(DLOCK_EURL, "bad mysql URL: no #fragment expected");
  if (u.has_userinfo) {
    if (!(p->user = dlock__uri_decode_dup(u.user, "user or password", &rc)))
      return rc;
    if (u.has_password && !(p->password = dlock__uri_decode_dup(
                                u.password, "user or password", &rc)))
      return rc;
  }
  if (u.path.n > 1) {
    dlock__slice d = {u.path.p + 1, u.path.n - 1};
    if (memchr(d.p, '/', d.n))
      return dlock__seterr(DLOCK_EURL,
                           "bad mysql URL: the path is one database name "
                           "(mysql://host/database)");
    if (!(p->db = dlock__uri_decode_dup(d, "database", &rc)))
      return rc;
  }
  dlock__uri_query it;
  dlock__uri_query_begin(&it, &u);
  while ((rc = dlock__uri_query_next(&it)) == 1) {
    if (strcmp(it.key, "socket") == 0 && it.value[0] == '/') {
      dlock__free(p->socket);
      if (!(p->socket = dlock__strdup(it.value)))
        return DLOCK_ENOMEM;
    } else {
      return dlock__seterr(DLOCK_EURL,
                           "bad mysql URL: unknown parameter '%.*s' (known: "
                           "socket=/absolute/path)",
                           (int)(it.raw.n > 60 ? 60 : it.raw.n), it.raw.p);
    }
  }
  if (rc < 0)
    return rc;
  if (u.nhosts == 0 && !p->socket)
    return dlock__seterr(DLOCK_EURL,
                         "bad mysql URL: no host (expected mysql://host[:port]"
                         "/database or ?socket=/path)");
  if (u.nhosts > 0 &&
      !(p->host = dlock__strndup(u.hosts[0].name.p, u.hosts[0].name.n)))
    return DLOCK_ENOMEM;
  p->port = u.nhosts > 0 ? (unsigned)u.hosts[0].port : 0;
  if (o->credentials_set) {
    dlock__free(p->user);
    dlock__free(p->password);
    p->user = o->user ? dlock__strdup(o->user) : NULL;
    p->password = o->password ? dlock__strdup(o->password) : NULL;
  }
  if (p->socket)
    snprintf(p->where, sizeof p->where, "%.120s/%.60s", p->socket,
             p->db ? p->db : "");
  else
    snprintf(p->where, sizeof p->where, "%.100s:%u/%.60s", p->host, p->port,
             p->db ? p->db : "");
  return 0;
}

static int my_open(void **be, const char *url, const struct dlock_options *o,
                   struct dlock_client *core) {
  *be = NULL;
  my *p = dlock__calloc(1, sizeof *p);
  if (!p)
    return DLOCK_ENOMEM;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cond, NULL);
  dlock__idle_init(&p->idle, o->pool_size, conn_close, NULL);
  p->core = core;
  p->connect_timeout_ms = o->connect_timeout_ms;
  p->command_timeout_ms = o->command_timeout_ms;
  p->watchdog_ms = o->watchdog_ms;
  p->psem_retry_ms = o->watchdog_ms / 3 > 100 ? o->watchdog_ms / 3 : 100;
  int rc = parse_url(p, url, o);
  if (rc) {
    if (p->password && p->password[0])
      dlock__scrub_error(p->password);
    my_free(p);
    return rc;
  }
  MYSQL *c;
  rc = dial(p, &c);
  if (rc) {
    my_free(p);
    return rc;
  }
  p->tls = mysql_get_ssl_cipher(c) != NULL;
  conn_put(p, c, 0);
  *be = p;
  return 0;
}

static void my_close(void *be) { my_free(be); }

const dlock__backend_ops dlock__mysql_backend = {
    .name = "mysql",
    .schemes = my_schemes,
    .lock_kinds = (1u << DLOCK_REENTRANT) | (1u << DLOCK_FENCED),
    .sync_kinds = 1u << DLOCK__SYNC_PERMIT,
    .queue_kinds = 0,
    .kinds_why = "GET_LOCK is exclusive, with no shared mode and no queue "
                 "order a client can see, and a counting semaphore's or a "
                 "latch's count has no session to hold it: the mysql backend "
                 "offers the reentrant and fenced locks (and multilocks of "
                 "them) and permit semaphores",
    .open = my_open,
    .close = my_close,
    .ping = my_ping,
    .lock_acquire = my_lock_acquire,
    .lock_leave = my_lock_leave,
    .lock_release = my_lock_release,
    .lock_acquire_send = my_lock_acquire_send,
    .lock_release_send = my_lock_release_send,
    .lock_renew = my_lock_renew,
    .lock_force_release = my_lock_force_release,
    .lock_query = my_lock_query,
    .lock_state = my_lock_state,
    .wait_begin = my_wait_begin,
    .wait_hot = my_wait_hot,
    .wait_end = my_wait_end,
    .loop_prepare = my_loop_prepare,
    .loop_dispatch = my_loop_dispatch,
    .sem_set = my_sem_set,
    .sem_add = my_sem_add,
    .sem_acquire = my_sem_counting,
    .sem_release = my_sem_counting,
    .sem_available = my_sem_available,
    .sem_delete = my_sem_delete,
    .psem_acquire = my_psem_acquire,
    .psem_release = my_psem_release,
    .psem_state = my_psem_state,
};
