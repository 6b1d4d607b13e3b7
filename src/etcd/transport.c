/*
 * transport.c - requests to etcd's gRPC gateway (JSON over HTTP/1.1)
 * through libcurl, replies read with json-c, failover between endpoints.
 *
 * Why the gateway and not gRPC over HTTP/2. etcd 3.4 serves every v3 RPC
 * that the clientv3 concurrency lock uses (KV Range/Txn/DeleteRange, Lease
 * Grant/KeepAlive/Revoke/TimeToLive, Watch) as JSON on its client port
 * (/v3/...), with bytes in base64 and int64 as strings; the watch is a
 * streamed POST of newline-delimited results. Two well-kept Debian
 * libraries do all the protocol work (libcurl: HTTP, keep-alive
 * connections, a multi interface for the streams; json-c: JSON), where
 * gRPC would need nghttp2 plus protobuf-c plus a hand-made gRPC framing
 * layer (length-prefixed messages, trailers, status codes, HTTP/2 flow
 * control for long streams) and generated code for etcd's .proto files.
 * Measured in one run on a private 3-member cluster of this machine
 * (bench/etcd-transport.c; bench/results/2026-11-24/etcd-transport.md):
 * an uncontended acquire+release took 2.9-3.3 ms through the gateway and
 * 2.5-2.7 ms with Go's clientv3 over gRPC on the same members (two
 * requests per pair each; the difference is etcd's JSON decoding and its
 * loopback call to its own gRPC server), and the client CPU per pair was
 * 183 us here against 410-465 us for the Go client. A sixth of the
 * latency, paid inside etcd, does not justify a hand-written gRPC layer:
 * the gateway is the choice.
 *
 * Requests (caller threads; the session thread makes its keep-alive and
 * watch handles with dlock__etcd_easy_new and runs them itself, and runs
 * the sent requests of the async calls, see "sent requests" below): an easy
 * handle is borrowed from a small idle pool together with the multi
 * handle it runs in (pool_mu guards the arrays, the endpoint in use and
 * the auth token, never I/O), so each keeps its HTTP keep-alive
 * connection (in the multi handle's cache); one POST per request, bounded
 * by the command timeout (connect: the connect timeout). A failed
 * exchange moves `cur` to the next endpoint; the request is sent again
 * there when it was never
 * sent (no connection) or is idempotent (`resend`: every request of this
 * backend but the release's delete, whose second answer "deleted 0" would
 * read as a lost lock), while the whole call stays within one command
 * timeout plus one connect timeout, with a short backoff (25 ms doubling)
 * once every endpoint has failed in a row. etcd's "no leader" answer
 * (gRPC Unavailable) counts as a request never applied; "request timed
 * out" and "leader changed" as a lost reply (the proposal may still be
 * applied). An expired auth token is renewed once. A request with no
 * answer after 250 ms is watched by status probes of every member and
 * given up as a lost reply as soon as a new leader is known or its member
 * is found silent (see "a request during an election" below), so an
 * election costs about its own time, not the command timeout.
 *
 * TLS (etcds://): the same requests over HTTPS, libcurl doing the
 * handshake with OpenSSL: the CA file or directory (else the system's
 * store), the client certificate and key, the peer's chain and name
 * verified unless the insecure switch is on; an SNI name becomes the
 * URL's host while CONNECT_TO dials the endpoint, so it is both sent and
 * verified. A TLS failure (handshake, verification, an alert such as TLS
 * 1.3's "certificate required" read after the handshake) moves to the
 * next endpoint like a refused connection; when every endpoint has failed
 * so within one call the call ends at once with DLOCK_ETLS and libcurl's
 * reason plus what to check, as one line (and at its deadline with
 * DLOCK_ETLS too when some refused TLS and the others did not answer).
 * With TLS 1.3 a server that refuses the client's certificate (or its
 * absence) says so after the client's handshake is over: it sends its
 * alert and closes, and its kernel resets the connection when our next
 * bytes arrive (or when any sit unread). The alert still waits in our
 * socket, read by the next receive; but a send after the reset fails
 * ("Broken pipe", "Connection reset", after a "getpeername() failed ...
 * not connected" from libcurl's bookkeeping), and libcurl, its send
 * failed, never reads. HTTP/2, which libcurl would choose by ALPN, sends
 * its preface and then the request, two writes: against etcd 3.4 with
 * --client-cert-auth, the first request of the dlock command without a
 * certificate (ThreadSanitizer build) ended on such a send, naming no
 * alert, 71 times in 100 over HTTP/2 and 0 in 200 over HTTP/1.1 beside a
 * CPU load on both cores. So every request here is HTTP/1.1, one write (headers
 * and body, always under libcurl's 64 KiB for one send), and the reply
 * read after it meets the alert. As a second line: libcurl's error text
 * names only a transfer's first failure, which can be a side effect; after
 * a TLS exchange failed without a reason, the next ones run verbose and
 * read the alert from libcurl's debug messages (on_debug).
 * Each pooled handle keeps its connection, so the handshake is paid once
 * per connection.
 */
#include <curl/curl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "etcd/etcd.h"

/* ------------------------------------------------------------- helpers */

static const char b64chars[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *dlock__etcd_b64(const char *s, size_t n) {
  char *out = dlock__calloc(1, (n + 2) / 3 * 4 + 1);
  if (!out)
    return NULL;
  const unsigned char *p = (const unsigned char *)s;
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)p[i] << 16;
    if (i + 1 < n)
      v |= (uint32_t)p[i + 1] << 8;
    if (i + 2 < n)
      v |= p[i + 2];
    out[o++] = b64chars[(v >> 18) & 63];
    out[o++] = b64chars[(v >> 12) & 63];
    out[o++] = i + 1 < n ? b64chars[(v >> 6) & 63] : '=';
    out[o++] = i + 2 < n ? b64chars[v & 63] : '=';
  }
  out[o] = '\0';
  return out;
}

static int b64val(char c) {
  const char *p = c ? strchr(b64chars, c) : NULL;
  return p ? (int)(p - b64chars) : -1;
}

char *dlock__etcd_unb64(const char *s, size_t *n) {
  size_t len = strlen(s);
  char *out = dlock__calloc(1, len / 4 * 3 + 4);
  if (!out)
    return NULL;
  size_t o = 0;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] == '=')
      break;
    int v = b64val(s[i]);
    if (v < 0) {
      dlock__free(out);
      return NULL;
    }
    acc = (acc << 6) | (uint32_t)v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[o++] = (char)((acc >> bits) & 0xff);
    }
  }
  out[o] = '\0';
  if (n)
    *n = o;
  return out;
}

json_object *dlock__etcd_get(json_object *o, const char *key) {
  json_object *v = NULL;
  if (!o || !json_object_object_get_ex(o, key, &v))
    return NULL;
  return v;
}

int64_t dlock__etcd_i64(json_object *o, const char *key) {
  json_object *v = dlock__etcd_get(o, key);
  if (!v)
    return 0;
  if (json_object_is_type(v, json_type_string))
    return strtoll(json_object_get_string(v), NULL, 10);
  return json_object_get_int64(v);
}

void dlock__etcd_set_i64(json_object *o, const char *key, int64_t v) {
  char s[24];
  snprintf(s, sizeof s, "%" PRId64, v);
  json_object_object_add(o, key, json_object_new_string(s));
}

void dlock__etcd_set_str(json_object *o, const char *key, const char *v) {
  json_object_object_add(o, key, json_object_new_string(v));
}

char *dlock__etcd_prefix_end(const char *prefix) {
  char *end = dlock__strdup(prefix);
  if (!end)
    return NULL;
  size_t n = strlen(end);
  end[n - 1] = (char)(end[n - 1] + 1); /* prefixes here end with '/' */
  return end;
}

/* ---------------------------------------------------------------- pool */

int dlock__etcd_transport_init(dlock__etcd *e) {
  pthread_mutex_init(&e->pool_mu, NULL);
  return 0;
}

void dlock__etcd_transport_free(dlock__etcd *e) {
  for (int i = 0; i < e->nidle; i++) {
    curl_easy_cleanup(e->idle[i]);
    if (e->idle_multi[i])
      curl_multi_cleanup(e->idle_multi[i]);
  }
  e->nidle = 0;
  if (e->token) {
    memset(e->token, 0, strlen(e->token));
    dlock__free(e->token);
    e->token = NULL;
  }
  pthread_mutex_destroy(&e->pool_mu);
}

/* An idle easy handle and the multi handle it runs in (*m: NULL with one
 * endpoint, or when none could be made: the request then runs with
 * curl_easy_perform, unwatched). */
static CURL *pool_get(dlock__etcd *e, int *idx, char **token, CURLM **m) {
  CURL *h = NULL;
  *m = NULL;
  pthread_mutex_lock(&e->pool_mu);
  if (e->nidle > 0) {
    e->nidle--;
    h = e->idle[e->nidle];
    *m = e->idle_multi[e->nidle];
  }
  *idx = e->cur;
  *token = e->token ? dlock__strdup(e->token) : NULL;
  pthread_mutex_unlock(&e->pool_mu);
  if (!h)
    h = curl_easy_init();
  if (h && !*m && e->nhosts > 1)
    *m = curl_multi_init();
  return h;
}

static void pool_put(dlock__etcd *e, CURL *h, CURLM *m) {
  if (h) {
    pthread_mutex_lock(&e->pool_mu);
    if (e->nidle < ETCD_POOL_MAX) {
      e->idle[e->nidle] = h;
      e->idle_multi[e->nidle] = m;
      e->nidle++;
      h = NULL;
      m = NULL;
    }
    pthread_mutex_unlock(&e->pool_mu);
  }
  if (h)
    curl_easy_cleanup(h);
  if (m)
    curl_multi_cleanup(m);
}

void dlock__etcd_failover(dlock__etcd *e, int idx) {
  pthread_mutex_lock(&e->pool_mu);
  if (e->cur == idx)
    e->cur = (idx + 1) % e->nhosts;
  pthread_mutex_unlock(&e->pool_mu);
}

/* ------------------------------------------------------------- requests */

typedef struct body {
  char *p;
  size_t n;
  bool too_big;
} body_t;

#define BODY_MAX (64u << 20)

static size_t on_body(char *data, size_t size, size_t nmemb, void *ud) {
  body_t *b = ud;
  size_t n = size * nmemb;
  if (b->n + n > BODY_MAX) {
    b->too_big = true;
    return 0;
  }
  char *p = dlock__reallocarray(b->p, b->n + n + 1, 1);
  if (!p)
    return 0;
  memcpy(p + b->n, data, n);
  b->n += n;
  p[b->n] = '\0';
  b->p = p;
  return n;
}

/* The lists an easy handle points to while it runs. */
typedef struct easy_lists {
  struct curl_slist *hdrs;
  struct curl_slist *connect_to; /* TLS with an SNI name */
} easy_lists;

static void lists_free(easy_lists *l) {
  curl_slist_free_all(l->hdrs);
  curl_slist_free_all(l->connect_to);
  l->hdrs = l->connect_to = NULL;
}

/* TLS: HTTPS with verification of the peer's chain and of its name (the
 * host, or the SNI name) unless insecure. An SNI name becomes the URL's
 * host, and CONNECT_TO dials the endpoint: libcurl then sends that name
 * and verifies the certificate against it. */
static void setup_tls(dlock__etcd *e, CURL *h, int idx, const char *path,
                      char *url, size_t urllen, easy_lists *l) {
  curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https");
  curl_easy_setopt(h, CURLOPT_SSLVERSION, (long)CURL_SSLVERSION_TLSv1_2);
  curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, e->tls_insecure ? 0L : 1L);
  curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, e->tls_insecure ? 0L : 2L);
  if (e->tls_ca_file)
    curl_easy_setopt(h, CURLOPT_CAINFO, e->tls_ca_file);
  if (e->tls_ca_dir)
    curl_easy_setopt(h, CURLOPT_CAPATH, e->tls_ca_dir);
  if (e->tls_cert_file) {
    curl_easy_setopt(h, CURLOPT_SSLCERT, e->tls_cert_file);
    curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
    curl_easy_setopt(h, CURLOPT_SSLKEY, e->tls_key_file);
    curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    curl_easy_setopt(h, CURLOPT_KEYPASSWD, ""); /* never prompts */
  }
  if (e->tls_sni) {
    const char *hp = e->hosts[idx];
    const char *port = strrchr(hp, ':');
    snprintf(url, urllen, "https://%s%s%s", e->tls_sni, port, path);
    char *to = dlock__asprintf("::%s", hp); /* any host:port -> hp */
    if (to) {
      l->connect_to = curl_slist_append(NULL, to);
      dlock__free(to);
    }
    curl_easy_setopt(h, CURLOPT_CONNECT_TO, l->connect_to);
  } else {
    snprintf(url, urllen, "https://%s%s", e->hosts[idx], path);
    curl_easy_setopt(h, CURLOPT_CONNECT_TO, NULL);
  }
}

static void setup(dlock__etcd *e, CURL *h, int idx, const char *path,
                  const char *token, easy_lists *l) {
  char url[600];
  l->hdrs = l->connect_to = NULL;
  if (e->tls) {
    setup_tls(e, h, idx, path, url, sizeof url, l);
  } else {
    snprintf(url, sizeof url, "http://%s%s", e->hosts[idx], path);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http");
  }
  curl_easy_setopt(h, CURLOPT_URL, url);
  /* HTTP/1.1 over TLS too (libcurl would pick HTTP/2 by ALPN): the
   * request then leaves in one write, which keeps the server's TLS 1.3
   * refusal readable (see the note at the top) */
  curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)e->connect_timeout_ms);
  curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
  l->hdrs = curl_slist_append(NULL, "Content-Type: application/json");
  if (token) {
    char *a = dlock__asprintf("Authorization: %s", token);
    if (a) {
      l->hdrs = curl_slist_append(l->hdrs, a);
      dlock__free(a);
    }
  }
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, l->hdrs);
}

void *dlock__etcd_easy_new(dlock__etcd *e, const char *path, int *idx) {
  CURL *h = curl_easy_init();
  easy_lists *l = dlock__calloc(1, sizeof *l);
  if (!h || !l) {
    if (h)
      curl_easy_cleanup(h);
    dlock__free(l);
    return NULL;
  }
  char *token = NULL;
  pthread_mutex_lock(&e->pool_mu);
  *idx = e->cur;
  token = e->token ? dlock__strdup(e->token) : NULL;
  pthread_mutex_unlock(&e->pool_mu);
  setup(e, h, *idx, path, token, l);
  curl_easy_setopt(h, CURLOPT_PRIVATE, l); /* freed with the handle */
  dlock__free(token);
  return h;
}

void *dlock__etcd_easy_new_at(dlock__etcd *e, const char *path, int idx) {
  CURL *h = curl_easy_init();
  easy_lists *l = dlock__calloc(1, sizeof *l);
  if (!h || !l || idx < 0 || idx >= e->nhosts) {
    if (h)
      curl_easy_cleanup(h);
    dlock__free(l);
    return NULL;
  }
  pthread_mutex_lock(&e->pool_mu);
  char *token = e->token ? dlock__strdup(e->token) : NULL;
  pthread_mutex_unlock(&e->pool_mu);
  setup(e, h, idx, path, token, l);
  curl_easy_setopt(h, CURLOPT_PRIVATE, l); /* freed with the handle */
  dlock__free(token);
  return h;
}

void dlock__etcd_easy_free(void *h) {
  if (!h)
    return;
  easy_lists *l = NULL;
  curl_easy_getinfo(h, CURLINFO_PRIVATE, (char **)&l);
  curl_easy_cleanup(h);
  if (l) {
    lists_free(l);
    dlock__free(l);
  }
}

/* A libcurl failure that is TLS's: the handshake, the verification, the
 * files, or the server's alert read after the handshake (TLS 1.3 sends
 * "certificate required" then). */
static bool tls_failure(CURLcode cc, const char *detail) {
  switch (cc) {
  case CURLE_SSL_CONNECT_ERROR:
  case CURLE_PEER_FAILED_VERIFICATION:
  case CURLE_SSL_CERTPROBLEM:
  case CURLE_SSL_CIPHER:
  case CURLE_SSL_CACERT_BADFILE:
  case CURLE_SSL_ISSUER_ERROR:
  case CURLE_SSL_CLIENTCERT:
  case CURLE_SSL_ENGINE_NOTFOUND:
  case CURLE_SSL_ENGINE_SETFAILED:
  case CURLE_SSL_ENGINE_INITFAILED:
  case CURLE_SSL_CRL_BADFILE:
  case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
  case CURLE_SSL_INVALIDCERTSTATUS:
  case CURLE_USE_SSL_FAILED:
    return true;
  case CURLE_RECV_ERROR:
  case CURLE_SEND_ERROR:
    return strstr(detail, "alert") != NULL;
  default:
    return false;
  }
}

/* One line for a TLS failure: libcurl's detail and what to check. */
static void tls_why(CURLcode cc, const char *detail, const char *host,
                    char *why, size_t whylen) {
  const char *hint = "";
  /* "OpenSSL SSL_read: OpenSSL/3.0.19: error:0A000412:SSL routines::sslv3
   * alert bad certificate, errno 0" -> "sslv3 alert bad certificate" */
  const char *reason = detail, *p;
  while ((p = strstr(reason, "::")) != NULL)
    reason = p + 2;
  size_t rlen = strlen(reason);
  p = strstr(reason, ", errno ");
  if (p)
    rlen = (size_t)(p - reason);
  if (cc == CURLE_PEER_FAILED_VERIFICATION) {
    if (strstr(detail, "subject name") || strstr(detail, "host name") ||
        strstr(detail, "IP address"))
      hint = " (the server's certificate does not name this host: see "
             "--sni / dlock_options_set_tls_sni)";
    else
      hint = " (no trusted CA signed the server's certificate: check the CA "
             "file or directory)";
  } else if (strstr(detail, "certificate required") ||
             strstr(detail, "handshake failure") ||
             strstr(detail, "bad certificate")) {
    hint = " (does the server require a client certificate? give a "
           "certificate and key)";
  } else if (strcasestr(detail, "unknown ca")) {
    hint = " (the server refused the client certificate)";
  } else if (strstr(detail, "wrong version number") ||
             strstr(detail, "packet length too long")) {
    hint = " (the server does not speak TLS: use etcd:// there)";
  }
  snprintf(why, whylen, "TLS: %s: %.*s%s", host, (int)rlen, reason, hint);
}

/* libcurl keeps the first failure message of a transfer in the error
 * buffer. When the server ends a TLS 1.3 connection right after the
 * handshake (it refused the client certificate), a slow client can meet
 * the closed socket in an earlier step ("getpeername() failed ... not
 * connected") and the alert that says why comes second, seen only by the
 * debug callback. So after a TLS exchange that failed without naming an
 * alert, the next exchanges (until one succeeds) run verbose, and this
 * callback keeps the first message that names an alert. */
typedef struct {
  char text[CURL_ERROR_SIZE];
} alert_seen;

static int on_debug(CURL *h, curl_infotype type, char *data, size_t size,
                    void *arg) {
  (void)h;
  alert_seen *a = arg;
  if (type != CURLINFO_TEXT || a->text[0])
    return 0;
  size_t n = size < sizeof a->text - 1 ? size : sizeof a->text - 1;
  memcpy(a->text, data, n);
  a->text[n] = '\0';
  if (!strstr(a->text, "alert") || strstr(a->text, "close notify"))
    a->text[0] = '\0'; /* a closing server's farewell says nothing */
  else
    a->text[strcspn(a->text, "\r\n")] = '\0';
  return 0;
}

/* ------------------------------------------- a request during an election
 *
 * A request that a member takes in while its leader dies (or stops) is
 * never answered: the proposal went to the old leader, and the member
 * waits for it until its own request timeout (5 s + two elections), or
 * until the command timeout ends it here. The election is over in about
 * one election timeout. So a request that has had no answer for
 * PROBE_AFTER_MS is watched: every endpoint is asked for its status
 * (/v3/maintenance/status, answered by the member itself, no consensus)
 * with short timeouts, the request still running beside the probes on the
 * same multi handle. It is given up as a lost reply (X_LOST: sent again
 * where that is safe, else DLOCK_EIOTIMEOUT, as at a timeout) as soon as
 *  - a member reports a leader at a raft term above the highest term our
 *    replies had carried when it was sent (an election happened since: a
 *    proposal of the old term is gone), or
 *  - the member we sent it to has not answered two probe rounds in a row
 *    while another member reports a leader (a stopped member keeps its
 *    connections open and answers nothing), for a request that may be
 *    sent again;
 * and the endpoint in use becomes the leader's (the member whose own id is
 * the leader id that it reports). A slow member under load answers its
 * status and keeps the request: only an election or a silent member ends
 * it early. */
#define PROBE_AFTER_MS 250
#define PROBE_EVERY_MS 150
#define PROBE_TIMEOUT_MS 500
#define PROBE_MAX 16

void dlock__etcd_saw_term(dlock__etcd *e, json_object *header) {
  int64_t t = dlock__etcd_i64(header, "raft_term");
  int64_t old = atomic_load(&e->term);
  while (t > old && !atomic_compare_exchange_weak(&e->term, &old, t))
    ;
}

typedef struct probe {
  CURL *h; /* the status request under way, or NULL */
  body_t b;
  int64_t next;    /* when to ask again */
  bool has_leader; /* its last answer named a leader */
  int silent;      /* probes in a row without an answer */
} probe_t;

/* A probe handle for endpoint i (its lists freed with it). */
static CURL *probe_new(dlock__etcd *e, int i, probe_t *p) {
  CURL *h = dlock__etcd_easy_new_at(e, "/v3/maintenance/status", i);
  if (!h)
    return NULL;
  curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)PROBE_TIMEOUT_MS);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)PROBE_TIMEOUT_MS);
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, "{}");
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &p->b);
  return h;
}

static void probe_end(CURLM *m, probe_t *p) {
  curl_multi_remove_handle(m, p->h);
  dlock__etcd_easy_free(p->h);
  p->h = NULL;
  dlock__free(p->b.p);
  memset(&p->b, 0, sizeof p->b);
}

/* Runs h (a request to endpoint idx) to its end, or gives it up as above:
 * then *moved is set, *to is the leader's endpoint (or -1) and `why` says
 * what happened. Each endpoint is probed again PROBE_EVERY_MS after its
 * last probe ended, so a silent one does not hold the others back. A
 * request that must not be sent twice (resend false: a release) is given
 * up only for an election: a member slow to answer its status under load
 * could be taken for a stopped one, and the release would then fail. */
static CURLcode perform_watched(dlock__etcd *e, CURL *h, CURLM *m, int idx,
                                bool resend, char *why, size_t whylen,
                                bool *moved, int *to) {
  *moved = false;
  *to = -1;
  if (!m)
    return curl_easy_perform(h);
  curl_multi_add_handle(m, h);
  int n = e->nhosts < PROBE_MAX ? e->nhosts : PROBE_MAX;
  probe_t probes[PROBE_MAX];
  memset(probes, 0, sizeof probes);
  int64_t term0 = atomic_load(&e->term);
  int64_t first = dlock__now_ms() + PROBE_AFTER_MS;
  for (int i = 0; i < n; i++)
    probes[i].next = first;
  CURLcode cc = CURLE_OK;
  bool done = false;
  while (!done && !*moved) {
    int running = 0;
    curl_multi_perform(m, &running);
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(m, &left)) != NULL) {
      if (msg->msg != CURLMSG_DONE)
        continue;
      /* msg lives in its easy handle: copied before a probe's is freed */
      CURL *ended = msg->easy_handle;
      CURLcode result = msg->data.result;
      if (ended == h) {
        cc = result;
        done = true;
        continue;
      }
      for (int i = 0; i < n; i++) {
        probe_t *p = &probes[i];
        if (p->h != ended)
          continue;
        long status = 0;
        curl_easy_getinfo(p->h, CURLINFO_RESPONSE_CODE, &status);
        json_object *j = result == CURLE_OK && status == 200 && p->b.p
                             ? json_tokener_parse(p->b.p)
                             : NULL;
        const char *self = json_object_get_string(
            dlock__etcd_get(dlock__etcd_get(j, "header"), "member_id"));
        const char *leader =
            json_object_get_string(dlock__etcd_get(j, "leader"));
        int64_t term = dlock__etcd_i64(j, "raftTerm");
        p->has_leader = leader && strcmp(leader, "0") != 0;
        p->silent = j ? 0 : p->silent + 1;
        if (p->has_leader && term0 == 0)
          term0 = term; /* no reply seen yet: this answer is the base */
        if (p->has_leader && self && strcmp(self, leader) == 0)
          *to = i;
        if (!done && !*moved && p->has_leader && term > term0) {
          *moved = true;
          snprintf(why, whylen,
                   "%s: no answer, and a leader was elected since it was "
                   "sent (raft term %" PRId64 " -> %" PRId64 ")",
                   e->hosts[idx], term0, term);
        }
        json_object_put(j);
        probe_end(m, p);
        p->next = dlock__now_ms() + PROBE_EVERY_MS;
        break;
      }
    }
    if (done || *moved)
      break;
    /* silent for two probes while another member has a leader */
    bool leader_known = false;
    for (int i = 0; i < n; i++)
      leader_known |= i != idx && probes[i].has_leader;
    if (resend && idx < n && probes[idx].silent >= 2 && leader_known) {
      *moved = true;
      snprintf(why, whylen,
               "%s: no answer, and it does not answer its status while "
               "another member has a leader",
               e->hosts[idx]);
      break;
    }
    int64_t now = dlock__now_ms(), wake = now + 100;
    for (int i = 0; i < n; i++) {
      probe_t *p = &probes[i];
      if (!p->h && now >= p->next) {
        p->h = probe_new(e, i, p);
        if (p->h)
          curl_multi_add_handle(m, p->h);
        else
          p->next = now + PROBE_EVERY_MS;
      }
      if (!p->h && p->next < wake)
        wake = p->next;
    }
    curl_multi_poll(m, NULL, 0, (int)(wake > now ? wake - now : 0), NULL);
  }
  for (int i = 0; i < n; i++)
    if (probes[i].h)
      probe_end(m, &probes[i]);
  curl_multi_remove_handle(m, h); /* its connection stays in m's cache */
  return done ? cc : CURLE_OPERATION_TIMEDOUT;
}

/* What one exchange gave. */
enum {
  X_OK,
  X_UNSENT,
  X_LOST,
  X_UNAVAILABLE,
  X_AUTH_EXPIRED,
  X_AUTH,
  X_TLS,
  X_ERROR,
  X_MOVED /* given up in an election (perform_watched): as X_LOST, the
           * endpoint in use already moved to the leader */
};

/* What an exchange with endpoint idx that ended (cc, its HTTP status,
 * its body, libcurl's detail, an alert the debug callback saw) gave:
 * X_OK with *out the reply, or another X_* with `why` saying what
 * happened. Shared by the blocking exchange and the sent requests. */
static int outcome(dlock__etcd *e, CURLcode cc, long status, const char *body,
                   char *detail, const char *alert, bool diagnose, int idx,
                   json_object **out, char *why, size_t whylen) {
  if (cc != CURLE_OK) {
    if (!detail[0])
      snprintf(detail, CURL_ERROR_SIZE, "%s", curl_easy_strerror(cc));
    if (alert[0] && !strstr(detail, "alert"))
      snprintf(detail, CURL_ERROR_SIZE, "%s", alert);
    if (e->tls && tls_failure(cc, detail)) {
      tls_why(cc, detail, e->hosts[idx], why, whylen);
      return X_TLS;
    }
    /* a failure that may hide an alert (not a refused connection, a
     * missing host or a timeout, which never come from TLS) */
    if (e->tls && !diagnose && cc != CURLE_COULDNT_CONNECT &&
        cc != CURLE_COULDNT_RESOLVE_HOST && cc != CURLE_OPERATION_TIMEDOUT)
      atomic_store(&e->tls_diagnose, true);
    snprintf(why, whylen, "%s: %s", e->hosts[idx], detail);
    return cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST
               ? X_UNSENT
               : X_LOST;
  }
  if (diagnose) /* the handshake worked: nothing to diagnose */
    atomic_store(&e->tls_diagnose, false);
  json_object *j = body ? json_tokener_parse(body) : NULL;
  if (status == 200 && j) {
    dlock__etcd_saw_term(e, dlock__etcd_get(j, "header"));
    *out = j;
    return X_OK;
  }
  const char *msg =
      j ? json_object_get_string(dlock__etcd_get(j, "error")) : NULL;
  int64_t code = j ? dlock__etcd_i64(j, "code") : 0;
  snprintf(why, whylen, "%s: %s", e->hosts[idx],
           msg ? msg : "unreadable reply");
  int x;
  /* "timed out" and "leader changed": the proposal may still be applied
   * (as a lost reply); "no leader": it was not */
  if (msg && (strstr(msg, "timed out") || strstr(msg, "leader changed")))
    x = X_LOST;
  else if (code == 14 ||
           (msg && (strstr(msg, "no leader") || strstr(msg, "not capable"))))
    x = X_UNAVAILABLE;
  else if (msg && strstr(msg, "invalid auth token") && e->user)
    x = X_AUTH_EXPIRED;
  else if ((msg && (strstr(msg, "user name is empty") ||
                    strstr(msg, "permission denied") ||
                    strstr(msg, "authentication failed") ||
                    strstr(msg, "invalid auth token"))) ||
           code == 16 || code == 7)
    x = X_AUTH;
  else
    x = X_ERROR;
  json_object_put(j);
  return x;
}

static int exchange(dlock__etcd *e, const char *path, const char *req,
                    bool resend, int64_t timeout_ms, json_object **out,
                    int *idx, char *why, size_t whylen) {
  char *token = NULL;
  CURLM *m = NULL;
  CURL *h = pool_get(e, idx, &token, &m);
  if (!h) {
    dlock__free(token);
    snprintf(why, whylen, "out of memory");
    return X_ERROR;
  }
  easy_lists lists;
  body_t b = {0};
  char detail[CURL_ERROR_SIZE] = "";
  setup(e, h, *idx, path, token, &lists);
  dlock__free(token);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, detail);
  curl_easy_setopt(h, CURLOPT_TIMEOUT_MS,
                   (long)(timeout_ms > 0 ? timeout_ms : 1));
  curl_easy_setopt(h, CURLOPT_POSTFIELDS, req);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
  alert_seen alert = {{0}};
  bool diagnose = e->tls && atomic_load(&e->tls_diagnose);
  if (diagnose) {
    curl_easy_setopt(h, CURLOPT_DEBUGFUNCTION, on_debug);
    curl_easy_setopt(h, CURLOPT_DEBUGDATA, &alert);
    curl_easy_setopt(h, CURLOPT_VERBOSE, 1L);
  }
  bool moved = false;
  int to = -1;
  CURLcode cc =
      perform_watched(e, h, m, *idx, resend, why, whylen, &moved, &to);
  long status = 0;
  curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
  curl_easy_setopt(h, CURLOPT_CONNECT_TO, NULL);
  curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
  if (diagnose) {
    curl_easy_setopt(h, CURLOPT_VERBOSE, 0L);
    curl_easy_setopt(h, CURLOPT_DEBUGFUNCTION, NULL);
    curl_easy_setopt(h, CURLOPT_DEBUGDATA, NULL);
  }
  lists_free(&lists);
  int x;
  if (moved) {
    /* why says what happened; the member we sent to is left */
    curl_easy_cleanup(h);
    h = NULL;
    if (m)
      curl_multi_cleanup(m);
    m = NULL;
    x = X_LOST;
    if (to >= 0 && to != *idx) {
      pthread_mutex_lock(&e->pool_mu);
      e->cur = to;
      pthread_mutex_unlock(&e->pool_mu);
      x = X_MOVED;
    }
  } else {
    x = outcome(e, cc, status, b.p, detail, alert.text, diagnose, *idx, out,
                why, whylen);
    if (cc != CURLE_OK) {
      curl_easy_cleanup(h); /* its connection is in an unknown state */
      h = NULL;
      if (m)
        curl_multi_cleanup(m);
      m = NULL;
    }
  }
  dlock__free(b.p);
  pool_put(e, h, m);
  return x;
}

int dlock__etcd_call(dlock__etcd *e, const char *path, json_object *req,
                     bool resend, json_object **out) {
  *out = NULL;
  const char *body =
      json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
  int64_t start = dlock__now_ms();
  int64_t deadline = start + e->command_timeout_ms + e->connect_timeout_ms;
  char why[400] = "", last_tls[400] = "";
  int failed_in_row = 0, backoff = 25, tls_failed = 0;
  bool reauthed = false;
  int rc = 0;
  for (;;) {
    int64_t now = dlock__now_ms();
    int64_t left = deadline - now;
    if (left <= 0 && last_tls[0]) {
      /* some endpoints refused TLS, the others did not answer */
      rc = dlock__seterr(DLOCK_ETLS,
                         "%s (no other endpoint answered in "
                         "time)",
                         last_tls);
      break;
    }
    if (left <= 0) {
      /* etcd closes a plain HTTP connection to a TLS port at once */
      bool tls_port = !e->tls && strstr(why, "Empty reply from server");
      rc = dlock__seterr(DLOCK_EUNAVAILABLE,
                         "%s: no etcd endpoint answered %s in time "
                         "(last: %s)%s",
                         e->display, path, why,
                         tls_port ? " (a TLS port? use etcds:// there)" : "");
      break;
    }
    int idx = 0;
    int64_t t = left < e->command_timeout_ms ? left : e->command_timeout_ms;
    int x = exchange(e, path, body, resend, t, out, &idx, why, sizeof why);
    if (x == X_OK)
      break;
    if (x == X_ERROR) {
      rc = dlock__seterr(DLOCK_ESERVER, "etcd %s: %s", path, why);
      break;
    }
    if (x == X_TLS)
      snprintf(last_tls, sizeof last_tls, "%s", why);
    if (x == X_TLS && ++tls_failed >= e->nhosts) {
      /* every endpoint refused the TLS exchange: a setting, not a fault */
      rc = dlock__seterr(DLOCK_ETLS, "%s", why);
      break;
    }
    if (x == X_AUTH) {
      rc = dlock__seterr(DLOCK_EAUTH, "etcd %s: %s%s", path, why,
                         e->user ? ""
                                 : " (the cluster has auth enabled: "
                                   "give user:password@ in the URL)");
      break;
    }
    if (x == X_AUTH_EXPIRED) {
      if (reauthed || dlock__etcd_authenticate(e) != 0) {
        rc = reauthed ? dlock__seterr(DLOCK_EAUTH, "etcd %s: %s", path, why)
                      : DLOCK_EAUTH;
        break;
      }
      reauthed = true;
      continue;
    }
    if ((x == X_LOST || x == X_MOVED) && !resend) {
      rc = dlock__seterr(DLOCK_EIOTIMEOUT,
                         "etcd %s: no answer (%s); it may have been applied",
                         path, why);
      if (x == X_LOST)
        dlock__etcd_failover(e, idx);
      break;
    }
    if (x != X_MOVED)
      dlock__etcd_failover(e, idx);
    if (++failed_in_row >= e->nhosts) {
      int64_t rest = deadline - dlock__now_ms();
      dlock__sleep_ms(backoff < rest ? backoff : (rest > 0 ? rest : 0));
      if (backoff < 400)
        backoff *= 2;
      failed_in_row = 0;
    }
  }
  json_object_put(req);
  return rc;
}

int dlock__etcd_authenticate(dlock__etcd *e) {
  if (!e->user)
    return 0;
  json_object *req = json_object_new_object();
  dlock__etcd_set_str(req, "name", e->user);
  dlock__etcd_set_str(req, "password", e->password ? e->password : "");
  const char *body =
      json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
  char why[400] = "";
  int rc = DLOCK_EUNAVAILABLE;
  for (int i = 0; i < e->nhosts; i++) {
    json_object *rep = NULL;
    int idx = 0;
    /* no token on this request */
    pthread_mutex_lock(&e->pool_mu);
    char *old = e->token;
    e->token = NULL;
    pthread_mutex_unlock(&e->pool_mu);
    if (old) {
      memset(old, 0, strlen(old));
      dlock__free(old);
    }
    int x = exchange(e, "/v3/auth/authenticate", body, true,
                     e->command_timeout_ms, &rep, &idx, why, sizeof why);
    if (x == X_OK) {
      const char *t = json_object_get_string(dlock__etcd_get(rep, "token"));
      char *tok = t ? dlock__strdup(t) : NULL;
      json_object_put(rep);
      if (!tok) {
        rc = dlock__seterr(DLOCK_EAUTH,
                           "%s: etcd gave no auth token (is auth enabled?)",
                           e->display);
        break;
      }
      pthread_mutex_lock(&e->pool_mu);
      e->token = tok;
      pthread_mutex_unlock(&e->pool_mu);
      rc = 0;
      break;
    }
    if (x == X_ERROR || x == X_AUTH || x == X_AUTH_EXPIRED) {
      rc = dlock__seterr(DLOCK_EAUTH, "%s: authentication refused (%s)",
                         e->display, why);
      break;
    }
    dlock__etcd_failover(e, idx);
    rc = dlock__seterr(x == X_TLS ? DLOCK_ETLS : DLOCK_EUNAVAILABLE,
                       "%s: authentication: %s", e->display, why);
  }
  json_object_put(req);
  if (rc)
    dlock__scrub_error(e->password);
  return rc;
}

/* ------------------------------------------------------- sent requests
 *
 * dlock__etcd_send (the async calls' tries and releases, backend.h's
 * lock_*_send): the request's easy handle is queued for the session
 * thread, which adds it to its multi handle (the one that carries the
 * keep-alive and the watch streams, and keeps their connections), and,
 * when the transfer ends, runs its handler there with no mutex held. One
 * POST to the endpoint in use, bounded by the command timeout; no
 * failover, no election probes, no second send: what the blocking call
 * would do about a failure is left to it (DLOCK__SEND_BLOCKS), but for a
 * silent endpoint (DLOCK_EIOTIMEOUT at the command timeout) and a lost
 * reply to a request that must not be sent twice (DLOCK_EIOTIMEOUT, as
 * the blocking call says it), and etcd's own refusals (DLOCK_ESERVER). */

struct etcd_sent {
  CURL *h;
  int idx; /* the endpoint */
  const char *path;
  bool resend;
  char *req;
  body_t b;
  char detail[CURL_ERROR_SIZE];
  dlock__etcd_sent_fn fn;
  void *arg;
  etcd_sent *next;
};

static void sent_free(etcd_sent *s) {
  dlock__etcd_easy_free(s->h);
  dlock__free(s->req);
  dlock__free(s->b.p);
  dlock__free(s);
}

int dlock__etcd_send(dlock__etcd *e, const char *path, json_object *req,
                     bool resend, dlock__etcd_sent_fn fn, void *arg) {
  etcd_sent *s = req ? dlock__calloc(1, sizeof *s) : NULL;
  if (s)
    s->req = dlock__strdup(
        json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN));
  json_object_put(req);
  if (!s || !s->req) {
    dlock__free(s);
    return DLOCK_ENOMEM;
  }
  /* libcurl's diagnosis of a TLS failure is the blocking call's */
  if (!e->thread_started || atomic_load(&e->tls_diagnose) ||
      !(s->h = dlock__etcd_easy_new(e, path, &s->idx))) {
    sent_free(s);
    return DLOCK__SEND_BLOCKS;
  }
  s->path = path;
  s->resend = resend;
  s->fn = fn;
  s->arg = arg;
  curl_easy_setopt(s->h, CURLOPT_ERRORBUFFER, s->detail);
  curl_easy_setopt(
      s->h, CURLOPT_TIMEOUT_MS,
      (long)(e->command_timeout_ms > 0 ? e->command_timeout_ms : 1));
  curl_easy_setopt(s->h, CURLOPT_POSTFIELDS, s->req);
  curl_easy_setopt(s->h, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(s->h, CURLOPT_WRITEDATA, &s->b);
  pthread_mutex_lock(&e->mu);
  bool stop = e->stop;
  if (!stop) {
    s->next = e->sent_q;
    e->sent_q = s;
  }
  pthread_mutex_unlock(&e->mu);
  if (stop) {
    sent_free(s);
    return dlock__seterr(DLOCK_ECLOSED, "etcd %s: the client is closing", path);
  }
  dlock__etcd_session_poke(e);
  return 0;
}

void dlock__etcd_sends_take_locked(dlock__etcd *e, etcd_sent **list) {
  while (e->sent_q) {
    etcd_sent *s = e->sent_q;
    e->sent_q = s->next;
    s->next = *list;
    *list = s;
    curl_multi_add_handle(e->multi, s->h);
  }
}

/* s ended with cc (CURLE_ABORTED_BY_CALLBACK: the client closes): its
 * outcome as the blocking call would give it, to its handler. */
static void sent_end(dlock__etcd *e, etcd_sent *s, CURLcode cc) {
  json_object *rep = NULL;
  int rc = 0;
  if (cc == CURLE_ABORTED_BY_CALLBACK) {
    rc =
        dlock__seterr(DLOCK_ECLOSED, "etcd %s: the client is closing", s->path);
  } else {
    long status = 0;
    curl_easy_getinfo(s->h, CURLINFO_RESPONSE_CODE, &status);
    char why[400] = "";
    int x = outcome(e, cc, status, s->b.p, s->detail, "", false, s->idx, &rep,
                    why, sizeof why);
    bool lost = x == X_LOST && (!s->resend || cc == CURLE_OPERATION_TIMEDOUT);
    if (x == X_ERROR)
      rc = dlock__seterr(DLOCK_ESERVER, "etcd %s: %s", s->path, why);
    else if (lost)
      rc = dlock__seterr(DLOCK_EIOTIMEOUT,
                         "etcd %s: no answer (%s); it may have been applied",
                         s->path, why);
    else if (x != X_OK)
      rc = DLOCK__SEND_BLOCKS; /* the blocking call goes on from here */
    if (x == X_UNSENT || x == X_LOST || x == X_UNAVAILABLE || x == X_TLS)
      dlock__etcd_failover(e, s->idx);
  }
  s->fn(e, s->arg, rc, rep);
  json_object_put(rep);
}

bool dlock__etcd_sends_ended(dlock__etcd *e, etcd_sent **list, void *h,
                             int result) {
  for (etcd_sent **p = list; *p; p = &(*p)->next) {
    etcd_sent *s = *p;
    if (s->h != h)
      continue;
    *p = s->next;
    curl_multi_remove_handle(e->multi, s->h);
    sent_end(e, s, (CURLcode)result);
    sent_free(s);
    return true;
  }
  return false;
}

void dlock__etcd_sends_close(dlock__etcd *e, etcd_sent **list) {
  for (;;) {
    pthread_mutex_lock(&e->mu);
    etcd_sent *q = e->sent_q; /* none comes after stop */
    e->sent_q = NULL;
    pthread_mutex_unlock(&e->mu);
    while (q) {
      etcd_sent *s = q;
      q = s->next;
      s->next = *list;
      *list = s;
      curl_multi_add_handle(e->multi, s->h);
    }
    if (!*list)
      return;
    etcd_sent *s = *list;
    *list = s->next;
    curl_multi_remove_handle(e->multi, s->h);
    sent_end(e, s, CURLE_ABORTED_BY_CALLBACK);
    sent_free(s);
  }
}
