/*
 * conn.c - RESP connection over a non-blocking socket (see conn.h).
 *
 * Design: every socket is non-blocking from creation; "blocking" calls are
 * loops of non-blocking I/O and poll() bounded by a monotonic deadline, so
 * no call can hang past its deadline whatever the server does. Writes use
 * MSG_NOSIGNAL: a vanished server gives EPIPE, never SIGPIPE. The transport
 * table (struct transport) isolates the byte stream from the RESP logic so
 * that TLS is a second table, not a second code path.
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
#include <unistd.h>

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
  redisReader *reader;
  char *wbuf;
  size_t wlen, wpos, wcap;
  bool broken;
  char peer[300];
};

static ssize_t plain_read(dlock__conn *c, void *buf, size_t len) {
  return recv(c->fd, buf, len, 0);
}

static ssize_t plain_write(dlock__conn *c, const void *buf, size_t len) {
  return send(c->fd, buf, len, MSG_NOSIGNAL);
}

static const transport plain_transport = {plain_read, plain_write};

int dlock__conn_fd(const dlock__conn *c) { return c->fd; }
bool dlock__conn_broken(const dlock__conn *c) { return c->broken; }
const char *dlock__conn_peer(const dlock__conn *c) { return c->peer; }
bool dlock__conn_want_write(const dlock__conn *c) { return c->wpos < c->wlen; }

static int fail(dlock__conn *c, int code, const char *fmt, const char *what) {
  c->broken = true;
  return dlock__seterr(code, fmt, c->peer, what);
}

/* Waits for `events` on fd until deadline: 1 ready, 0 timed out, <0 error. */
static int wait_fd(int fd, short events, int64_t deadline) {
  for (int spins = 0; spins < 1000000; spins++) {
    struct pollfd p = {.fd = fd, .events = events};
    int r = poll(&p, 1, dlock__poll_timeout(deadline));
    if (r > 0)
      return 1;
    if (r == 0)
      return 0;
    if (errno != EINTR)
      return -1;
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
    rc = connect_fd(fd, ai->ai_addr, ai->ai_addrlen, deadline, c->peer);
    if (rc == 0) {
      c->fd = fd;
      tune_socket(fd, true);
      break;
    }
    close(fd);
    if (rc == DLOCK_EIOTIMEOUT)
      break;
  }
  freeaddrinfo(res);
  if (rc == 1)
    rc = dlock__seterr(DLOCK_EUNAVAILABLE, "%s: no usable address", c->peer);
  return rc;
}

int dlock__conn_connect(dlock__conn **out, const dlock__endpoint *ep,
                        int64_t deadline) {
  *out = NULL;
  dlock__conn *c = conn_alloc();
  if (!c)
    return DLOCK_ENOMEM;
  int rc = ep->kind == DLOCK__EP_UNIX ? connect_unix(c, ep, deadline)
                                      : connect_tcp(c, ep, deadline);
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
      if (redisReaderFeed(c->reader, buf, (size_t)n) != REDIS_OK)
        return fail(c, DLOCK_ENOMEM, "%s: %s", "reply buffer failed");
      if ((size_t)n < sizeof buf)
        return 0;
      continue;
    }
    if (n == 0)
      return fail(c, DLOCK_EUNAVAILABLE, "%s: %s",
                  "connection closed by the server");
    if (errno == EINTR)
      continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return 0;
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
    int w = wait_fd(c->fd, POLLOUT, deadline);
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
    int w = wait_fd(c->fd, POLLIN, deadline);
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
  ssize_t n = recv(c->fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
  /* data pending on an idle conn is unexpected too: treat as unusable */
  return n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
}
