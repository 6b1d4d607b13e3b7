/*
 * session.c - the etcd backend's session (one lease per client, as
 * concurrency.NewSession) and its own thread, which keeps the lease alive
 * and carries the watch streams of waiting threads.
 *
 * The lease: granted by open (that is open's round trip) with the
 * session timeout rounded up to whole seconds (default 60 s), and again,
 * lazily, by the first acquire after a loss. Every key this client makes
 * lives on it, so nothing is renewed per hold (lock_renew is NULL).
 *
 * The thread (etcd_thread) runs a libcurl multi handle:
 * - keep-alive: one POST /v3/lease/keepalive every TTL/3 (a failed one is
 *   sent again to the next endpoint after TTL/10, at most 200 ms). A reply
 *   with a TTL confirms the lease until its send time + the TTL, which the
 *   core's loss clock is told (core/session.h); a reply without one, or
 *   "lease not found", means the lease is gone. The core alone gives the
 *   lease up by time, when it was not confirmed by that bound less its
 *   margin (5%, at least 5 ms), so that a loss is reported before the
 *   server can give the locks to anyone else, whatever request is stuck;
 *   it then calls session_expired. A loss marks the lease dead, calls
 *   dlock__holds_session_lost (the core reports every hold lost), and
 *   wakes every wait: their keys went with
 *   the lease, so they attempt again under a new one (at the back of the
 *   queue: a new key has a new create revision). A request that writes on
 *   the lease and is refused with "requested lease not found" (revoked or
 *   expired before a keep-alive told us) is the same loss
 *   (dlock__etcd_session_lost), and the acquire that met it attempts again
 *   under a new lease rather than failing the wait.
 * - watches: a waiting thread's attempt that finds an older key sets, in
 *   its registration (etcd_reg), the predecessor's key and the revision
 *   after the one its read saw; the thread opens one POST /v3/watch stream
 *   per such wait, reads its newline-delimited results with json-c, and on
 *   a DELETE of the key (or a cancelled or failed stream: events may have
 *   been missed) wakes that wait alone (dlock__wait_wake) and closes the
 *   stream. No polling, no herd: a release wakes only the next key's
 *   owner.
 *   A keep-alive that a member fails to answer also ends the streams on
 *   that member (their waits attempt again, on the next endpoint): a
 *   stopped member keeps its connections open without delivering. With
 *   each keep-alive, a member that carries streams but not the keep-alive
 *   is asked its status (within min(TTL/3, 1 s)); no answer ends its
 *   streams the same way, so a waiter whose predecessor's stream is on a
 *   stopped member learns of the release within about TTL/3 + 1 s, not
 *   at its TTL bound.
 * - sent requests (transport.c's dlock__etcd_send, for the async calls'
 *   tries and releases: locks.c): a caller queues an easy handle under
 *   mu and wakes the thread, which adds it to its multi handle; when the
 *   transfer ends (reply, failure, or CURLOPT_TIMEOUT_MS, the command
 *   timeout, which libcurl's own timers enforce inside curl_multi_poll)
 *   the thread runs its handler, with no mutex held; a handler never
 *   waits (a follow-up request is sent the same way). At stop, each one
 *   left ends with DLOCK_ECLOSED. This thread rather than the client's
 *   event loop (loop_prepare / loop_dispatch with
 *   curl_multi_socket_action): it already drives a multi handle, whose
 *   connection cache the sent requests share with the keep-alives, and
 *   libcurl keeps the deadline; the loop would need a second multi handle
 *   with socket and timer callbacks mapped onto its few descriptors, for
 *   no fewer thread hops (either way one thread of the library reads the
 *   reply and queues the outcome for the program's thread).
 * The thread sleeps in curl_multi_poll until the next keep-alive; callers
 * interrupt it with curl_multi_wakeup.
 *
 * Locks: e->mu guards the lease fields, the registrations (and
 * reg->watch / watch->reg, the link between a wait and its stream), the
 * queue of sent requests and `stop`; the thread alone touches the multi handle, the easy handles of
 * streams and their buffers. The wait up-calls are made with e->mu held
 * (lock order: e->mu, then client->mu); dlock__holds_session_lost without.
 */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/holds.h"
#include "core/wait.h"
#include "core/worker.h"
#include "etcd/etcd.h"

struct etcd_watch {
  etcd_reg *reg; /* NULL once the wait ended or moved on (under mu) */
  CURL *h;
  int idx;   /* endpoint */
  char *req; /* the request body (kept for libcurl) */
  char *buf; /* bytes of a result line not complete yet */
  size_t n;
  bool fired; /* the key was deleted, or the stream is useless */
  bool done;  /* the transfer ended */
  etcd_watch *next;
};

typedef struct ka_state {
  CURL *h;
  int idx;
  int64_t sent;
  int64_t lease;
  char *req;
  char *buf;
  size_t n;
} ka_state;

/* A status request to a member that carries watch streams but is not
 * the one the keep-alive went to (see the note at the top). */
typedef struct wprobe {
  CURL *h;
  int idx;
} wprobe_t;

static size_t on_discard(char *data, size_t size, size_t nmemb, void *ud) {
  (void)data;
  (void)ud;
  return size * nmemb;
}

void dlock__etcd_session_poke(dlock__etcd *e) {
  if (e->multi)
    curl_multi_wakeup(e->multi);
}

void dlock__etcd_watch_detach_locked(etcd_reg *r) {
  if (r->watch) {
    r->watch->reg = NULL;
    r->watch = NULL;
  }
}

/* ----------------------------------------------------------------- lease */

int dlock__etcd_session_lease(dlock__etcd *e, int64_t *lease) {
  pthread_mutex_lock(&e->mu);
  while (e->granting && !e->stop)
    pthread_cond_wait(&e->session_cv, &e->mu);
  if (e->lease_live) {
    *lease = e->lease;
    pthread_mutex_unlock(&e->mu);
    return 0;
  }
  e->granting = true;
  int64_t old = e->lease; /* a lost lease, or 0 */
  pthread_mutex_unlock(&e->mu);

  if (old) {
    /* a loss declared here (no confirmation in time) may find the lease
     * still alive on the server: its keys would stand in our own way */
    json_object *rq = json_object_new_object(), *rp = NULL;
    dlock__etcd_set_i64(rq, "ID", old);
    if (dlock__etcd_call(e, "/v3/lease/revoke", rq, true, &rp) != 0)
      dlock__log(e->core, DLOCK_LOG_DEBUG,
                 "etcd: revoking the lost lease %llx: %s",
                 (unsigned long long)old, dlock_last_error());
    json_object_put(rp);
  }
  json_object *req = json_object_new_object(), *rep = NULL;
  int64_t sent = dlock__now_ms();
  int rc = DLOCK_ENOMEM;
  if (req) {
    json_object_object_add(req, "TTL", json_object_new_int64(e->ttl_s));
    rc = dlock__etcd_call(e, "/v3/lease/grant", req, true, &rep);
  }
  int64_t id = rc ? 0 : dlock__etcd_i64(rep, "ID");
  int64_t ttl = rc ? 0 : dlock__etcd_i64(rep, "TTL");
  if (!rc && (id == 0 || ttl <= 0)) {
    const char *err = json_object_get_string(dlock__etcd_get(rep, "error"));
    rc = dlock__seterr(DLOCK_EPROTO, "%s: lease grant gave no lease (%s)",
                       e->display, err ? err : "no ID or TTL");
  }
  json_object_put(rep);
  pthread_mutex_lock(&e->mu);
  if (!rc) {
    e->lease = id;
    e->lease_live = true;
    e->lease_ttl_ms = ttl * 1000;
    e->next_keepalive = sent + e->lease_ttl_ms / 3;
    *lease = id;
  }
  e->granting = false;
  pthread_cond_broadcast(&e->session_cv);
  pthread_mutex_unlock(&e->mu);
  if (!rc) {
    dlock__session_begin(e->core, id, ttl * 1000);
    dlock__session_confirm(e->core, id, sent + ttl * 1000);
    dlock__log(e->core, DLOCK_LOG_DEBUG, "etcd: session lease %llx, TTL %lld s",
               (unsigned long long)id, (long long)ttl);
    dlock__etcd_session_poke(e);
  }
  return rc;
}

void dlock__etcd_session_revoke(dlock__etcd *e) {
  pthread_mutex_lock(&e->mu);
  int64_t id = e->lease_live ? e->lease : 0;
  e->lease_live = false;
  pthread_mutex_unlock(&e->mu);
  if (!id)
    return;
  json_object *req = json_object_new_object(), *rep = NULL;
  dlock__etcd_set_i64(req, "ID", id);
  if (dlock__etcd_call(e, "/v3/lease/revoke", req, true, &rep) != 0)
    dlock__log(e->core, DLOCK_LOG_INFO,
               "etcd: revoking lease %llx at close failed (%s); its keys go "
               "when it expires",
               (unsigned long long)id, dlock_last_error());
  json_object_put(rep);
}

/* mu held: the lease is gone; true when the core must be told. */
static bool lose_lease_locked(dlock__etcd *e, const char *why) {
  if (!e->lease_live)
    return false;
  e->lease_live = false;
  for (etcd_reg *r = e->regs; r; r = r->next)
    dlock__wait_wake(r->w);
  dlock__log(e->core, DLOCK_LOG_WARN, "etcd: session lease %llx lost: %s",
             (unsigned long long)e->lease, why);
  return true;
}

void dlock__etcd_session_lost(dlock__etcd *e, int64_t lease, const char *why) {
  pthread_mutex_lock(&e->mu);
  bool lost = e->lease == lease && lose_lease_locked(e, why);
  pthread_mutex_unlock(&e->mu);
  if (lost)
    dlock__holds_session_lost(e->core, DLOCK_LOST_SESSION);
}

bool dlock__etcd_lease_refused(int rc) {
  return rc == DLOCK_ESERVER && strstr(dlock_last_error(), "lease not found");
}

/* backend.h, session_expired: the core's loss clock gave lease `sid` up. */
void dlock__etcd_session_expired(void *be, int64_t sid) {
  dlock__etcd_session_lost(be, sid, "not confirmed within its TTL");
}

/* backend.h, session_length: the TTL the latest grant gave. */
int dlock__etcd_session_length(void *be, int64_t *ms) {
  dlock__etcd *e = be;
  pthread_mutex_lock(&e->mu);
  *ms = e->lease_ttl_ms > 0 ? e->lease_ttl_ms : e->ttl_s * 1000;
  pthread_mutex_unlock(&e->mu);
  return 0;
}

/* --------------------------------------------------------------- buffers */

static bool append(char **buf, size_t *n, const char *data, size_t len) {
  if (*n + len > (16u << 20))
    return false;
  char *p = dlock__reallocarray(*buf, *n + len + 1, 1);
  if (!p)
    return false;
  memcpy(p + *n, data, len);
  *n += len;
  p[*n] = '\0';
  *buf = p;
  return true;
}

static size_t on_ka_body(char *data, size_t size, size_t nmemb, void *ud) {
  ka_state *k = ud;
  return append(&k->buf, &k->n, data, size * nmemb) ? size * nmemb : 0;
}

/* One result of a watch stream. */
static void watch_result(etcd_watch *w, json_object *j) {
  json_object *res = dlock__etcd_get(j, "result");
  if (!res) { /* {"error": ...} */
    w->fired = true;
    return;
  }
  json_object *canceled = dlock__etcd_get(res, "canceled");
  if ((canceled && json_object_get_boolean(canceled)) ||
      dlock__etcd_i64(res, "compact_revision") > 0) {
    w->fired = true;
    return;
  }
  json_object *events = dlock__etcd_get(res, "events");
  size_t n = events ? json_object_array_length(events) : 0;
  for (size_t i = 0; i < n; i++) {
    const char *type = json_object_get_string(
        dlock__etcd_get(json_object_array_get_idx(events, i), "type"));
    if (type && strcmp(type, "DELETE") == 0)
      w->fired = true;
  }
}

static size_t on_watch_body(char *data, size_t size, size_t nmemb, void *ud) {
  etcd_watch *w = ud;
  size_t len = size * nmemb;
  if (!append(&w->buf, &w->n, data, len))
    return 0;
  char *nl;
  while ((nl = memchr(w->buf, '\n', w->n)) != NULL) {
    *nl = '\0';
    json_object *j = json_tokener_parse(w->buf);
    if (j) {
      watch_result(w, j);
      json_object_put(j);
    }
    size_t used = (size_t)(nl - w->buf) + 1;
    memmove(w->buf, nl + 1, w->n - used + 1);
    w->n -= used;
  }
  return len;
}

/* --------------------------------------------------------------- thread */

static void ka_clear(dlock__etcd *e, ka_state *k) {
  if (k->h) {
    curl_multi_remove_handle(e->multi, k->h);
    dlock__etcd_easy_free(k->h);
  }
  dlock__free(k->req);
  dlock__free(k->buf);
  memset(k, 0, sizeof *k);
}

static void watch_free(dlock__etcd *e, etcd_watch *w) {
  if (w->h) {
    curl_multi_remove_handle(e->multi, w->h);
    dlock__etcd_easy_free(w->h);
  }
  dlock__free(w->req);
  dlock__free(w->buf);
  dlock__free(w);
}

/* mu held: a stream for every registration that wants one. */
static void watches_sync_locked(dlock__etcd *e, etcd_watch **list) {
  for (etcd_reg *r = e->regs; r; r = r->next) {
    if (!r->watch_key_b64 || r->watch)
      continue;
    etcd_watch *w = dlock__calloc(1, sizeof *w);
    if (!w)
      continue;
    json_object *req = json_object_new_object();
    json_object *cr = json_object_new_object();
    dlock__etcd_set_str(cr, "key", r->watch_key_b64);
    dlock__etcd_set_i64(cr, "start_revision", r->watch_from);
    json_object_object_add(req, "create_request", cr);
    w->req = dlock__strdup(
        json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN));
    json_object_put(req);
    w->h = w->req ? dlock__etcd_easy_new(e, "/v3/watch", &w->idx) : NULL;
    if (!w->h) {
      watch_free(e, w);
      dlock__wait_wake(r->w); /* it will try again */
      continue;
    }
    curl_easy_setopt(w->h, CURLOPT_POSTFIELDS, w->req);
    curl_easy_setopt(w->h, CURLOPT_WRITEFUNCTION, on_watch_body);
    curl_easy_setopt(w->h, CURLOPT_WRITEDATA, w);
    /* the stream lives as long as the wait; a dead member is noticed by
     * TCP keep-alive probes and a stall of 3 keep-alive periods */
    curl_easy_setopt(w->h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(w->h, CURLOPT_TCP_KEEPIDLE, 1L);
    curl_easy_setopt(w->h, CURLOPT_TCP_KEEPINTVL, 1L);
    w->reg = r;
    r->watch = w;
    curl_multi_add_handle(e->multi, w->h);
    w->next = *list;
    *list = w;
  }
}

static void *etcd_thread(void *arg) {
  dlock__etcd *e = arg;
  ka_state ka;
  memset(&ka, 0, sizeof ka);
  wprobe_t wp = {NULL, 0};
  etcd_watch *watches = NULL;
  etcd_sent *sends = NULL; /* sent requests under way (transport.c) */
  for (;;) {
    int64_t now = dlock__now_ms();
    /* no timer of ours when idle: libcurl shortens the poll to its own
     * timers, and callers wake us with curl_multi_wakeup */
    int64_t wake_at = now + 60000;
    pthread_mutex_lock(&e->mu);
    if (e->stop) {
      pthread_mutex_unlock(&e->mu);
      break;
    }
    if (e->lease_live) {
      if (!ka.h && now >= e->next_keepalive) {
        json_object *req = json_object_new_object();
        dlock__etcd_set_i64(req, "ID", e->lease);
        ka.req = dlock__strdup(
            json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN));
        json_object_put(req);
        ka.h = ka.req ? dlock__etcd_easy_new(e, "/v3/lease/keepalive", &ka.idx)
                      : NULL;
        if (ka.h) {
          int64_t t = e->lease_ttl_ms / 3;
          if (t > e->command_timeout_ms)
            t = e->command_timeout_ms;
          curl_easy_setopt(ka.h, CURLOPT_POSTFIELDS, ka.req);
          curl_easy_setopt(ka.h, CURLOPT_TIMEOUT_MS, (long)(t > 0 ? t : 1));
          curl_easy_setopt(ka.h, CURLOPT_WRITEFUNCTION, on_ka_body);
          curl_easy_setopt(ka.h, CURLOPT_WRITEDATA, &ka);
          ka.sent = now;
          ka.lease = e->lease;
          curl_multi_add_handle(e->multi, ka.h);
          /* a member with streams that the keep-alive does not reach is
           * asked its status at the same time, within min(t, 1 s) */
          for (etcd_watch *w = watches; w && !wp.h; w = w->next) {
            if (!w->reg || w->idx == ka.idx)
              continue;
            wp.h = dlock__etcd_easy_new_at(e, "/v3/maintenance/status", w->idx);
            if (!wp.h)
              break;
            wp.idx = w->idx;
            curl_easy_setopt(wp.h, CURLOPT_POSTFIELDS, "{}");
            curl_easy_setopt(wp.h, CURLOPT_TIMEOUT_MS,
                             (long)(t < 1000 && t > 0 ? t : 1000));
            curl_easy_setopt(wp.h, CURLOPT_WRITEFUNCTION, on_discard);
            curl_multi_add_handle(e->multi, wp.h);
          }
        } else {
          dlock__free(ka.req);
          ka.req = NULL;
          e->next_keepalive = now + 100;
        }
      }
      if (!ka.h && e->next_keepalive < wake_at)
        wake_at = e->next_keepalive;
    }
    /* streams of ended waits go; wanted ones come */
    for (etcd_watch **p = &watches; *p;) {
      etcd_watch *w = *p;
      if (!w->reg) {
        *p = w->next;
        watch_free(e, w);
      } else {
        p = &w->next;
      }
    }
    watches_sync_locked(e, &watches);
    dlock__etcd_sends_take_locked(e, &sends);
    pthread_mutex_unlock(&e->mu);

    int running = 0;
    curl_multi_perform(e->multi, &running);
    CURLMsg *m;
    int left;
    bool progressed = false; /* a transfer ended: deadlines moved */
    while ((m = curl_multi_info_read(e->multi, &left)) != NULL) {
      if (m->msg != CURLMSG_DONE)
        continue;
      progressed = true;
      /* m lives in its easy handle: read before a sent one is freed */
      if (dlock__etcd_sends_ended(e, &sends, m->easy_handle,
                                  (int)m->data.result))
        continue;
      if (ka.h && m->easy_handle == ka.h) {
        CURLcode cc = m->data.result;
        long status = 0;
        curl_easy_getinfo(ka.h, CURLINFO_RESPONSE_CODE, &status);
        json_object *j =
            cc == CURLE_OK && ka.buf ? json_tokener_parse(ka.buf) : NULL;
        json_object *res = dlock__etcd_get(j, "result");
        const char *err = json_object_get_string(dlock__etcd_get(j, "error"));
        bool gone = (res && dlock__etcd_i64(res, "TTL") <= 0) ||
                    (err && strstr(err, "lease not found"));
        bool ok = res && dlock__etcd_i64(res, "TTL") > 0;
        if (ok)
          dlock__etcd_saw_term(e, dlock__etcd_get(res, "header"));
        json_object_put(j);
        bool lost_now = false, confirmed = false;
        pthread_mutex_lock(&e->mu);
        int64_t ttl_ms = e->lease_ttl_ms;
        if (e->lease_live && e->lease == ka.lease) {
          if (ok) {
            confirmed = true;
            e->next_keepalive = ka.sent + e->lease_ttl_ms / 3;
          } else if (gone) {
            lost_now = lose_lease_locked(e, "etcd no longer has it");
          } else {
            int64_t retry = e->lease_ttl_ms / 10;
            e->next_keepalive = dlock__now_ms() + (retry < 200 ? retry : 200);
          }
        }
        pthread_mutex_unlock(&e->mu);
        if (confirmed)
          dlock__session_confirm(e->core, ka.lease, ka.sent + ttl_ms);
        if (!ok && !gone) {
          dlock__etcd_failover(e, ka.idx);
          /* a member that does not answer a keep-alive may hold streams
           * that will never deliver (a stopped process keeps its
           * connections open): their waits try again elsewhere */
          for (etcd_watch *w = watches; w; w = w->next)
            if (w->idx == ka.idx)
              w->fired = true;
        }
        ka_clear(e, &ka);
        if (lost_now)
          dlock__holds_session_lost(e->core, DLOCK_LOST_SESSION);
        continue;
      }
      if (wp.h && m->easy_handle == wp.h) {
        long status = 0;
        curl_easy_getinfo(wp.h, CURLINFO_RESPONSE_CODE, &status);
        if (m->data.result != CURLE_OK || status != 200)
          for (etcd_watch *w = watches; w; w = w->next)
            if (w->idx == wp.idx)
              w->fired = true; /* its waits attempt again elsewhere */
        curl_multi_remove_handle(e->multi, wp.h);
        dlock__etcd_easy_free(wp.h);
        wp.h = NULL;
        continue;
      }
      for (etcd_watch *w = watches; w; w = w->next)
        if (w->h == m->easy_handle) {
          w->done = true;
          if (m->data.result != CURLE_OK)
            dlock__etcd_failover(e, w->idx);
        }
    }
    /* fired or ended streams wake their wait */
    pthread_mutex_lock(&e->mu);
    for (etcd_watch **p = &watches; *p;) {
      etcd_watch *w = *p;
      if (w->fired || w->done || !w->reg) {
        if (w->reg) {
          etcd_reg *r = w->reg;
          r->watch = NULL;
          dlock__free(r->watch_key_b64);
          r->watch_key_b64 = NULL;
          dlock__wait_wake(r->w);
        }
        *p = w->next;
        watch_free(e, w);
      } else {
        p = &w->next;
      }
    }
    pthread_mutex_unlock(&e->mu);

    if (progressed)
      continue; /* the next keep-alive is due from the new state */
    int64_t wait = wake_at - dlock__now_ms();
    if (wait < 0)
      wait = 0;
    curl_multi_poll(e->multi, NULL, 0, (int)wait, NULL);
  }
  dlock__etcd_sends_close(e, &sends);
  ka_clear(e, &ka);
  if (wp.h) {
    curl_multi_remove_handle(e->multi, wp.h);
    dlock__etcd_easy_free(wp.h);
  }
  pthread_mutex_lock(&e->mu);
  while (watches) {
    etcd_watch *w = watches;
    watches = w->next;
    if (w->reg)
      w->reg->watch = NULL;
    watch_free(e, w);
  }
  pthread_mutex_unlock(&e->mu);
  return NULL;
}

int dlock__etcd_session_start(dlock__etcd *e) {
  e->multi = curl_multi_init();
  if (!e->multi)
    return dlock__seterr(DLOCK_ENOMEM, "etcd: curl_multi_init failed");
  if (dlock__thread_start(&e->thread, etcd_thread, e) != 0) {
    curl_multi_cleanup(e->multi);
    e->multi = NULL;
    return dlock__seterr(DLOCK_ENOMEM, "etcd: cannot start its thread");
  }
  e->thread_started = true;
  return 0;
}

void dlock__etcd_session_stop(dlock__etcd *e) {
  if (!e->thread_started)
    return;
  pthread_mutex_lock(&e->mu);
  e->stop = true;
  pthread_cond_broadcast(&e->session_cv);
  pthread_mutex_unlock(&e->mu);
  curl_multi_wakeup(e->multi);
  pthread_join(e->thread, NULL);
  e->thread_started = false;
  curl_multi_cleanup(e->multi);
  e->multi = NULL;
}
