/*
 * conn.c - RESP connection over a non-blocking socket (see conn.h).
 *
 * Design: every socket is non-blocking from creation; "blocking" calls are
 * loops of non-blocking I/O and poll() bounded by a monotonic deadline, so
 * no call can hang past its deadline whatever the server does. Writes use
 * MSG_NOSIGNAL: a vanished server gives EPIPE, never SIGPIPE. The transport
 * table (struct transport) isolates the byte stream from the RESP logic so
 * that TLS is a second table, not a second code path.
 *
 * TLS. A TLS conn has an SSL object whose BIO is ours (bio_*: send with
 * MSG_NOSIGNAL, recv), so OpenSSL's own socket writes cannot raise
 * SIGPIPE either. tls_read/tls_write map SSL_ERROR_WANT_READ/WANT_WRITE to
 * EAGAIN and record which readiness the stalled call needs (read_wait,
 * write_wait: a TLS read may need the socket writable and a write may need
 * it readable); every wait - the blocking exec's poll, the handshake's,
 * the event loop's through dlock__conn_poll_events - waits for that, with
 * the same deadlines as plain conns. Closing sends no close_notify (a
 * forked child's close must not write into the parent's stream). The
 * handshake runs inside
 * dlock__conn_connect_tls before its deadline. Invariant that makes poll()
 * enough: no decrypted byte stays inside OpenSSL between calls, because
 * read-ahead is off (OpenSSL reads one record at a time) and READ_CHUNK is
 * at least a record's largest plaintext (16384), so every SSL_read
 * consumes its whole record; read_some also drains SSL_pending.
 *
 * A thread may set a watch (conn.h) that the blocking waits call every
 * few ms: wait_fd polls in slices then, and a check that answers nonzero
 * ends the wait as a failure of its own (WAIT_CHECKED).
 *
 * Errors on a side that speaks the other protocol: a TLS client at a plain
 * port sees a non-TLS answer (reported by tls.c) or no answer until the
 * deadline ("TLS handshake timed out"); a plain client at a TLS port has
 * its connection closed or reset before any reply, which is reported with
 * a hint (got_bytes tells a first reply from a later one).
 */
#include "conn.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/fmt.h"

#define READ_CHUNK 16384

typedef struct transport {
  /* > 0 bytes, 0 on orderly close, -1 with errno (EAGAIN = would block) */
  ssize_t (*read)(dlock__conn *c, void *buf, size_t len);
  ssize_t (*write)(dlock__conn *c, const void *buf, size_t len);
} transport;

struct dlock__conn {
  int fd;
  const transport *tp;
  SSL *ssl; /* TLS conns only */
  short read_wait, write_wait; /* poll events a stalled read/write needs */
  bool got_bytes;              /* a byte of a reply ever arrived */
  int tls_rc;                  /* set with the detail when a TLS call failed */
  redisReader *reader;
  char *wbuf;
  size_t wlen, wpos, wcap;
  bool broken;
  uint32_t tag; /* the owner's, e.g. the master generation it was dialled at */
  char peer[300];
  char verified[256]; /* the name the certificate must carry */
};

static ssize_t plain_read(dlock__conn *c, void *buf, size_t len) {
  return recv(c->fd, buf, len, 0);
}

static ssize_t plain_write(dlock__conn *c, const void *buf, size_t len) {
  return send(c->fd, buf, len, MSG_NOSIGNAL);
}

static const transport plain_transport = {plain_read, plain_write};

/* The reason of a failed TLS call, as conn's error: the transport returns
 * -1 with errno EPROTO and tls_rc set. */
static ssize_t tls_failed(dlock__conn *c) {
  char why[400];
  dlock__tls_reason(c->ssl, c->verified, why, sizeof why);
  c->tls_rc = dlock__seterr(DLOCK_ETLS, "%s: TLS: %s", c->peer, why);
  errno = EPROTO;
  return -1;
}

/* Maps SSL_get_error after a call that returned n <= 0; `reading` tells
 * which of the conn's waits a stall belongs to. */
static ssize_t tls_result(dlock__conn *c, int n, bool reading) {
  int saved = errno;
  int e = SSL_get_error(c->ssl, n);
  short *wait = reading ? &c->read_wait : &c->write_wait;
  switch (e) {
  case SSL_ERROR_WANT_READ:
    *wait = POLLIN;
    errno = EAGAIN;
    return -1;
  case SSL_ERROR_WANT_WRITE:
    *wait = POLLOUT;
    errno = EAGAIN;
    return -1;
  case SSL_ERROR_ZERO_RETURN:
    ERR_clear_error();
    return 0;
  case SSL_ERROR_SYSCALL:
    if (ERR_peek_error() != 0)
      return tls_failed(c);
    ERR_clear_error();
    if (n == 0 || saved == 0)
      return 0; /* EOF */
    errno = saved;
    return -1;
  default:
    return tls_failed(c);
  }
}

static ssize_t tls_read(dlock__conn *c, void *buf, size_t len) {
  ERR_clear_error();
  int n = SSL_read(c->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
  if (n > 0) {
    c->read_wait = POLLIN;
    return n;
  }
  return tls_result(c, n, true);
}

static ssize_t tls_write(dlock__conn *c, const void *buf, size_t len) {
  ERR_clear_error();
  int n = SSL_write(c->ssl, buf, len > INT32_MAX ? INT32_MAX : (int)len);
  if (n > 0) {
    c->write_wait = POLLOUT;
    return n;
  }
  return tls_result(c, n, false);
}

static const transport tls_transport = {tls_read, tls_write};

/* ------------------------------------------------------- the socket BIO */

static int bio_write(BIO *b, const char *buf, int len) {
  int fd = (int)(intptr_t)BIO_get_data(b);
  BIO_clear_retry_flags(b);
  ssize_t n = send(fd, buf, (size_t)len, MSG_NOSIGNAL);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    BIO_set_retry_write(b);
  return (int)n;
}

static int bio_read(BIO *b, char *buf, int len) {
  int fd = (int)(intptr_t)BIO_get_data(b);
  BIO_clear_retry_flags(b);
  ssize_t n = recv(fd, buf, (size_t)len, 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    BIO_set_retry_read(b);
  return (int)n;
}

static long bio_ctrl(BIO *b, int cmd, long num, void *ptr) {
  (void)b;
  (void)num;
  (void)ptr;
  return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static int bio_create(BIO *b) {
  BIO_set_init(b, 1);
  return 1;
}

static int bio_destroy(BIO *b) {
  (void)b; /* the conn closes the socket */
  return 1;
}

static BIO_METHOD *bio_method;
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;

static void bio_init(void) {
  BIO_METHOD *m =
      BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "dlock socket");
  if (!m)
    return;
  if (!BIO_meth_set_write(m, bio_write) || !BIO_meth_set_read(m, bio_read) ||
      !BIO_meth_set_ctrl(m, bio_ctrl) || !BIO_meth_set_create(m, bio_create) ||
      !BIO_meth_set_destroy(m, bio_destroy)) {
    BIO_meth_free(m);
    return;
  }
  bio_method = m;
}

int dlock__conn_fd(const dlock__conn *c) { return c->fd; }
bool dlock__conn_is_tls(const dlock__conn *c) { return c->ssl != NULL; }
bool dlock__conn_broken(const dlock__conn *c) { return c->broken; }

void dlock__conn_set_broken(dlock__conn *c) { c->broken = true; }

uint32_t dlock__conn_tag(const dlock__conn *c) { return c->tag; }

void dlock__conn_set_tag(dlock__conn *c, uint32_t tag) { c->tag = tag; }
const char *dlock__conn_peer(const dlock__conn *c) { return c->peer; }
bool dlock__conn_want_write(const dlock__conn *c) { return c->wpos < c->wlen; }

static int fail(dlock__conn *c, int code, const char *fmt, const char *what) {
  c->broken = true;
  return dlock__seterr(code, fmt, c->peer, what);
}

/* The calling thread's watch (dlock__conn_watch_set), and the code its
 * check ended the last wait with. */
static _Thread_local dlock__conn_watch tl_watch;
static _Thread_local int tl_watch_rc;

dlock__conn_watch dlock__conn_watch_set(dlock__conn_watch w) {
  dlock__conn_watch prev = tl_watch;
  tl_watch = w;
  return prev;
}

#define WAIT_CHECKED (-2) /* the watch's check ended the wait */

/* Waits for `events` on fd until deadline: 1 ready, 0 timed out,
 * WAIT_CHECKED (tl_watch_rc says with what), -1 error (errno). */
static int wait_fd(int fd, short events, int64_t deadline) {
  bool watched = tl_watch.check && tl_watch.every_ms > 0;
  int64_t next = watched ? dlock__now_ms() + tl_watch.every_ms : DLOCK__NEVER;
  for (int spins = 0; spins < 1000000; spins++) {
    int64_t until = next < deadline ? next : deadline;
    struct pollfd p = {.fd = fd, .events = events};
    int r = poll(&p, 1, dlock__poll_timeout(until));
    if (r > 0)
      return 1;
    if (r < 0 && errno != EINTR)
      return -1;
    int64_t now = dlock__now_ms();
    if (r == 0 && now >= deadline)
      return 0;
    if (watched && now >= next) {
      dlock__conn_watch w = dlock__conn_watch_set((dlock__conn_watch){0});
      int rc = w.check(w.ud);
      dlock__conn_watch_set(w);
      if (rc) {
        tl_watch_rc = rc;
        return WAIT_CHECKED;
      }
      next = dlock__now_ms() + w.every_ms;
    }
  }
  return -1;
}

static void tune_socket(int fd, bool tcp) {
  int one = 1;
  if (tcp) {
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    int idle = 30, intvl = 10, cnt = 3;
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  }
}

/* Non-blocking connect of fd to addr, finished before deadline. */
static int connect_fd(int fd, const struct sockaddr *addr, socklen_t alen,
                      int64_t deadline, const char *peer) {
  if (connect(fd, addr, alen) == 0)
    return 0;
  if (errno != EINPROGRESS && errno != EAGAIN && errno != EINTR)
    goto failed;
  int w = wait_fd(fd, POLLOUT, deadline);
  if (w == 0)
    return dlock__seterr(DLOCK_EIOTIMEOUT, "%s: connect timed out", peer);
  if (w == WAIT_CHECKED)
    return tl_watch_rc;
  if (w < 0)
    goto failed;
  int err = 0;
  socklen_t elen = sizeof err;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0)
    goto failed;
  if (err == 0)
    return 0;
  errno = err;
failed:
  if (errno == ECONNREFUSED)
    return dlock__seterr(DLOCK_EUNAVAILABLE,
                         "%s: connection refused (is redis-server running?)",
                         peer);
  if (errno == ENOENT)
    return dlock__seterr(DLOCK_EUNAVAILABLE, "%s: no such socket", peer);
  return dlock__seterr(DLOCK_EUNAVAILABLE, "%s: connect failed: %s", peer,
                       strerror(errno));
}

/* Replies are parsed by hiredis's reader with its own reply objects, except
 * that an array may announce at most MAX_ARRAY elements: hiredis allocates
 * the whole element vector when the header arrives, so "*2147483647\r\n"
 * alone would cost 16 GiB. dlock's largest replies (a renewal batch, a lock
 * state) have a few hundred elements. hiredis 0.14 does not export its
 * default functions; a reader made the normal way points at them, so they
 * are copied once and createArray is wrapped. */
#define MAX_ARRAY (1 << 20)

static redisReplyObjectFunctions capped_fns;
static void *(*hiredis_create_array)(const redisReadTask *, int);
static bool capped_ok;
static pthread_once_t capped_once = PTHREAD_ONCE_INIT;

static void *capped_create_array(const redisReadTask *task, int elements) {
  if (elements < 0 || elements > MAX_ARRAY)
    return NULL; /* the reader reports an error; the conn is dropped */
  return hiredis_create_array(task, elements);
}

static void capped_init(void) {
  redisReader *r = redisReaderCreate();
  if (!r || !r->fn || !r->fn->createArray) {
    if (r)
      redisReaderFree(r);
    return;
  }
  capped_fns = *r->fn;
  hiredis_create_array = capped_fns.createArray;
  capped_fns.createArray = capped_create_array;
  capped_ok = true;
  redisReaderFree(r);
}

static redisReader *reader_new(void) {
  pthread_once(&capped_once, capped_init);
  return capped_ok ? redisReaderCreateWithFunctions(&capped_fns)
                   : redisReaderCreate();
}

static dlock__conn *conn_alloc(void) {
  dlock__conn *c = dlock__calloc(1, sizeof *c);
  if (!c)
    return NULL;
  c->fd = -1;
  c->tp = &plain_transport;
  c->read_wait = POLLIN;
  c->write_wait = POLLOUT;
  c->reader = reader_new();
  if (!c->reader) {
    dlock__free(c);
    dlock__seterr(DLOCK_ENOMEM, "out of memory creating a reply parser");
    return NULL;
  }
  return c;
}

static int connect_unix(dlock__conn *c, const dlock__endpoint *ep,
                        int64_t deadline) {
  snprintf(c->peer, sizeof c->peer, "unix://%s", ep->path);
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  if (strlen(ep->path) >= sizeof sa.sun_path)
    return dlock__seterr(DLOCK_EURL, "%s: socket path too long", c->peer);
  strcpy(sa.sun_path, ep->path);
  c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (c->fd < 0)
    return dlock__seterr(DLOCK_EUNAVAILABLE, "%s: socket: %s", c->peer,
                         strerror(errno));
  return connect_fd(c->fd, (struct sockaddr *)&sa, sizeof sa, deadline,
                    c->peer);
}

static int connect_tcp(dlock__conn *c, const dlock__endpoint *ep,
                       int64_t deadline) {
  snprintf(c->peer, sizeof c->peer, "%s", ep->display);
  char port[16];
  snprintf(port, sizeof port, "%d", ep->port);
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG;
  int gr = getaddrinfo(ep->host, port, &hints, &res);
  if (gr == EAI_ADDRFAMILY || gr == EAI_NONAME || gr == EAI_NODATA) {
    /* AI_ADDRCONFIG hides ::1 when no interface has IPv6; retry without */
    hints.ai_flags = AI_NUMERICSERV;
    gr = getaddrinfo(ep->host, port, &hints, &res);
  }
  if (gr != 0) {
    if (gr == EAI_NONAME || gr == EAI_NODATA || gr == EAI_FAIL ||
        gr == EAI_AGAIN)
      return dlock__seterr(DLOCK_EUNAVAILABLE, "%s: unknown host (%s)", c->peer,
                           gai_strerror(gr));
    return dlock__seterr(DLOCK_EUNAVAILABLE, "%s: address lookup: %s", c->peer,
                         gai_strerror(gr));
  }
  int rc = 1; /* no address tried yet */
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    int fd =
        socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
               ai->ai_protocol);
    if (fd < 0) {
      rc = dlock__seterr(DLOCK_EUNAVAILABLE, "%s: socket: %s", c->peer,
                         strerror(errno));
      continue;
    }
    tl_watch_rc = 0;
    rc = connect_fd(fd, ai->ai_addr, ai->ai_addrlen, deadline, c->peer);
    if (rc == 0) {
      c->fd = fd;
      tune_socket(fd, true);
      break;
    }
    close(fd);
    if (rc == DLOCK_EIOTIMEOUT || tl_watch_rc) /* out of time, or told */
      break;
  }
  freeaddrinfo(res);
  if (rc == 1)
    rc = dlock__seterr(DLOCK_EUNAVAILABLE, "%s: no usable address", c->peer);
  return rc;
}

static bool is_ip_literal(const char *name) {
  unsigned char addr[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, name, addr) == 1 ||
         inet_pton(AF_INET6, name, addr) == 1;
}

static int tls_setup_error(dlock__conn *c, const char *what) {
  ERR_clear_error();
  return dlock__seterr(DLOCK_ENOMEM, "%s: TLS: cannot %s", c->peer, what);
}

/* Wraps the connected socket in TLS and runs the handshake before the
 * deadline: SNI and the name to verify are the SNI option's or the host's
 * (no SNI for an IP literal, which is verified as an address). */
static int tls_handshake(dlock__conn *c, const dlock__tls *tls,
                         const char *host, int64_t deadline) {
  pthread_once(&bio_once, bio_init);
  if (!bio_method)
    return tls_setup_error(c, "create the socket BIO method");
  ERR_clear_error();
  if (!(c->ssl = SSL_new(tls->ctx)))
    return tls_setup_error(c, "create a connection");
  BIO *b = BIO_new(bio_method);
  if (!b)
    return tls_setup_error(c, "create a BIO");
  BIO_set_data(b, (void *)(intptr_t)c->fd);
  SSL_set_bio(c->ssl, b, b);
  c->tp = &tls_transport;
  const char *name = tls->sni ? tls->sni : host;
  snprintf(c->verified, sizeof c->verified, "%s", name);
  bool ip = is_ip_literal(name);
  if (!ip && SSL_set_tlsext_host_name(c->ssl, name) != 1)
    return tls_setup_error(c, "set the SNI name");
  if (!tls->insecure) {
    int ok = ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), name)
                : SSL_set1_host(c->ssl, name);
    if (ok != 1)
      return tls_setup_error(c, "set the name to verify");
  }
  SSL_set_connect_state(c->ssl);
  for (int spins = 0; spins < 100000; spins++) {
    ERR_clear_error();
    errno = 0;
    int r = SSL_connect(c->ssl);
    if (r == 1)
      return 0;
    int e = SSL_get_error(c->ssl, r);
    short ev;
    if (e == SSL_ERROR_WANT_READ) {
      ev = POLLIN;
    } else if (e == SSL_ERROR_WANT_WRITE) {
      ev = POLLOUT;
    } else if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0) {
      int saved = errno;
      return dlock__seterr(
          DLOCK_ETLS,
          "%s: TLS: the server %s during the handshake (a plain port? use "
          "redis:// there)",
          c->peer,
          saved && saved != ECONNRESET ? strerror(saved)
                                       : "closed the connection");
    } else {
      char why[400];
      dlock__tls_reason(c->ssl, c->verified, why, sizeof why);
      return dlock__seterr(DLOCK_ETLS, "%s: TLS: %s", c->peer, why);
    }
    int w = wait_fd(c->fd, ev, deadline);
    if (w == WAIT_CHECKED)
      return tl_watch_rc;
    if (w == 0)
      return dlock__seterr(DLOCK_EIOTIMEOUT,
                           "%s: TLS handshake timed out (no TLS answer: a "
                           "plain port? use redis:// there)",
                           c->peer);
    if (w < 0)
      return dlock__seterr(DLOCK_EUNAVAILABLE, "%s: poll: %s", c->peer,
                           strerror(errno));
  }
  return dlock__seterr(DLOCK_ETLS, "%s: TLS handshake did not finish",
                       c->peer);
}

int dlock__conn_connect(dlock__conn **out, const dlock__endpoint *ep,
                        int64_t deadline) {
  return dlock__conn_connect_tls(out, ep, NULL, deadline);
}

int dlock__conn_connect_tls(dlock__conn **out, const dlock__endpoint *ep,
                            const dlock__tls *tls, int64_t deadline) {
  *out = NULL;
  dlock__conn *c = conn_alloc();
  if (!c)
    return DLOCK_ENOMEM;
  int rc = ep->kind == DLOCK__EP_UNIX ? connect_unix(c, ep, deadline)
                                      : connect_tcp(c, ep, deadline);
  if (!rc && tls) {
    if (ep->kind == DLOCK__EP_UNIX)
      rc = dlock__seterr(DLOCK_ENOTSUP, "%s: TLS over a Unix socket is not "
                                        "supported",
                         c->peer);
    else
      rc = tls_handshake(c, tls, ep->host, deadline);
  }
  if (rc) {
    dlock__conn_close(c);
    return rc;
  }
  *out = c;
  return 0;
}

void dlock__conn_close(dlock__conn *c) {
  if (!c)
    return;
  if (c->ssl) {
    /* no close_notify: a forked child freeing its copy of a client must
     * not write into the parent's TLS stream; the server takes the close
     * of the socket as the end */
    SSL_free(c->ssl);
    ERR_clear_error();
  }
  if (c->fd >= 0)
    close(c->fd);
  if (c->reader)
    redisReaderFree(c->reader);
  dlock__free(c->wbuf);
  dlock__free(c);
}

/* Makes room for `more` bytes at the end of the output buffer. */
static int wbuf_reserve(dlock__conn *c, size_t more) {
  if (c->wpos == c->wlen)
    c->wpos = c->wlen = 0;
  size_t need = c->wlen + more;
  if (need <= c->wcap)
    return 0;
  size_t cap = c->wcap ? c->wcap : 4096;
  while (cap < need)
    cap *= 2;
  char *nb = dlock__reallocarray(c->wbuf, cap, 1);
  if (!nb)
    return DLOCK_ENOMEM;
  c->wbuf = nb;
  c->wcap = cap;
  return 0;
}

/* "<mark><n>\r\n" at p; returns the bytes written. */
static size_t resp_header(char *p, char mark, size_t n) {
  p[0] = mark;
  size_t k = 1 + dlock__fmt_u64(p + 1, n);
  p[k] = '\r';
  p[k + 1] = '\n';
  return k + 2;
}

/* A RESP array of bulk strings, written straight into the output buffer
 * (hiredis 0.14's formatter went through sprintf for every length, most
 * of a pair's instructions). Replies are still parsed by hiredis. */
int dlock__conn_append(dlock__conn *c, int argc, const char **argv,
                       const size_t *argvlen) {
  if (c->broken)
    return dlock__seterr(DLOCK_EUNAVAILABLE, "%s: connection is broken",
                         c->peer);
  if (argc < 0)
    return dlock__seterr(DLOCK_EINVAL, "negative argument count");
  /* every header is at most 1 + 20 digits + CRLF */
  size_t total = 24;
  for (int i = 0; i < argc; i++) {
    if (argvlen[i] > SIZE_MAX / 2 - total - 26)
      return dlock__seterr(DLOCK_ENOMEM, "command too long");
    total += 24 + argvlen[i] + 2;
  }
  if (wbuf_reserve(c, total))
    return dlock__seterr(DLOCK_ENOMEM, "out of memory formatting a command");
  char *p = c->wbuf + c->wlen;
  p += resp_header(p, '*', (size_t)argc);
  for (int i = 0; i < argc; i++) {
    p += resp_header(p, '$', argvlen[i]);
    memcpy(p, argv[i], argvlen[i]);
    p += argvlen[i];
    *p++ = '\r';
    *p++ = '\n';
  }
  c->wlen = (size_t)(p - c->wbuf);
  return 0;
}

/* The server dropped the connection before its first reply: on a plain
 * conn the usual cause is a TLS port, on a TLS conn a server that wants a
 * client certificate (TLS 1.3 refuses it after the handshake). */
static int first_reply_lost(dlock__conn *c, const char *how) {
  c->broken = true;
  if (c->ssl)
    return dlock__seterr(DLOCK_ETLS,
                         "%s: TLS: connection %s by the server before any "
                         "reply (does it want a client certificate? give a "
                         "certificate and key)",
                         c->peer, how);
  return dlock__seterr(DLOCK_EUNAVAILABLE,
                       "%s: connection %s by the server before any reply (a "
                       "TLS port? use rediss:// there)",
                       c->peer, how);
}

int dlock__conn_write_some(dlock__conn *c) {
  if (c->broken)
    return dlock__seterr(DLOCK_EUNAVAILABLE, "%s: connection is broken",
                         c->peer);
  while (c->wpos < c->wlen) {
    ssize_t n = c->tp->write(c, c->wbuf + c->wpos, c->wlen - c->wpos);
    if (n > 0) {
      c->wpos += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 0;
    if (c->tls_rc) {
      c->broken = true;
      return c->tls_rc;
    }
    if (!c->got_bytes && n < 0 && errno == ECONNRESET)
      return first_reply_lost(c, "reset");
    return fail(c, DLOCK_EUNAVAILABLE, "%s: write failed: %s",
                n < 0 ? strerror(errno) : "short write");
  }
  c->wpos = c->wlen = 0;
  return 0;
}

int dlock__conn_read_some(dlock__conn *c) {
  if (c->broken)
    return dlock__seterr(DLOCK_EUNAVAILABLE, "%s: connection is broken",
                         c->peer);
  char buf[READ_CHUNK];
  for (int i = 0; i < 64; i++) {
    ssize_t n = c->tp->read(c, buf, sizeof buf);
    if (n > 0) {
      c->got_bytes = true;
      if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK)
        return fail(c, DLOCK_ENOMEM, "%s: %s", "reply buffer failed");
      /* a short plain read drained the socket; TLS reads go on until
       * OpenSSL would block (a record is often shorter than buf) */
      if ((size_t)n < sizeof buf && !c->ssl)
        return 0;
      continue;
    }
    if (n == 0 && !c->got_bytes)
      return first_reply_lost(c, "closed");
    if (n == 0)
      return fail(c, DLOCK_EUNAVAILABLE, "%s: %s",
                  "connection closed by the server");
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return 0;
    if (c->tls_rc) {
      c->broken = true;
      return c->tls_rc;
    }
    if (errno == ECONNRESET && !c->got_bytes)
      return first_reply_lost(c, "reset");
    return fail(c, DLOCK_EUNAVAILABLE, "%s: read failed: %s", strerror(errno));
  }
  return 0;
}

int dlock__conn_take_reply(dlock__conn *c, redisReply **out) {
  void *r = NULL;
  *out = NULL;
  if (redisReaderGetReply(c->reader, &r) != REDIS_OK) {
    c->broken = true;
    return dlock__seterr(DLOCK_EPROTO, "%s: protocol error: %s", c->peer,
                         c->reader->errstr);
  }
  if (!r)
    return 0;
  *out = r;
  return 1;
}

int dlock__conn_exec(dlock__conn *c, int64_t deadline, size_t n,
                     redisReply **replies) {
  size_t got = 0;
  int rc = 0;
  for (size_t i = 0; i < n; i++)
    replies[i] = NULL;
  /* write everything */
  while (dlock__conn_want_write(c)) {
    if ((rc = dlock__conn_write_some(c)))
      goto failed;
    if (!dlock__conn_want_write(c))
      break;
    int w = wait_fd(c->fd, c->write_wait, deadline);
    if (w == WAIT_CHECKED) {
      c->broken = true;
      rc = tl_watch_rc;
      goto failed;
    }
    if (w == 0) {
      rc = fail(c, DLOCK_EIOTIMEOUT, "%s: %s",
                "timed out writing to the server");
      goto failed;
    }
    if (w < 0) {
      rc = fail(c, DLOCK_EUNAVAILABLE, "%s: poll: %s", strerror(errno));
      goto failed;
    }
  }
  /* gather n replies */
  while (got < n) {
    int t = dlock__conn_take_reply(c, &replies[got]);
    if (t < 0) {
      rc = t;
      goto failed;
    }
    if (t == 1) {
      got++;
      continue;
    }
    int w = wait_fd(c->fd, c->read_wait, deadline);
    if (w == WAIT_CHECKED) {
      c->broken = true;
      rc = tl_watch_rc;
      goto failed;
    }
    if (w == 0) {
      rc = fail(c, DLOCK_EIOTIMEOUT, "%s: %s",
                "the server did not answer in time");
      goto failed;
    }
    if (w < 0) {
      rc = fail(c, DLOCK_EUNAVAILABLE, "%s: poll: %s", strerror(errno));
      goto failed;
    }
    if ((rc = dlock__conn_read_some(c)))
      goto failed;
  }
  return 0;
failed:
  for (size_t i = 0; i < got; i++) {
    freeReplyObject(replies[i]);
    replies[i] = NULL;
  }
  return rc;
}

bool dlock__conn_peer_closed(dlock__conn *c) {
  if (c->broken)
    return true;
  struct pollfd p = {.fd = c->fd, .events = POLLIN};
  if (poll(&p, 1, 0) <= 0)
    return false;
  if (p.revents & (POLLERR | POLLHUP | POLLNVAL))
    return true;
  char ch;
  if (c->ssl) {
    /* TLS records that carry no data (a TLS 1.3 session ticket) are
     * consumed here; data or a close alert makes the conn unusable */
    ERR_clear_error();
    int pn = SSL_peek(c->ssl, &ch, 1);
    int e = pn > 0 ? SSL_ERROR_NONE : SSL_get_error(c->ssl, pn);
    ERR_clear_error();
    return e != SSL_ERROR_WANT_READ;
  }
  ssize_t n = recv(c->fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
  /* data pending on an idle conn is unexpected too: treat as unusable */
  return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
}

short dlock__conn_poll_events(const dlock__conn *c) {
  return (short)(c->read_wait |
                 (dlock__conn_want_write(c) ? c->write_wait : 0));
}
