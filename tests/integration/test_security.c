/*
 * test_security.c - what one lock name, one password or one id must never
 * give away: names cannot reach each other's keys or channels, passwords
 * stay out of logs, messages, the command's output and its argv, and ids
 * are random version-4 UUIDs taken from getrandom(2).
 *
 * Design note
 * - Names: for each crafted name ('{', '}', ':', the layout's own
 *   prefixes) the test observes on the server, not by formula, every key
 *   and channel the name uses: during a reentrant hold (release latch), a
 *   queued waiter (queue, timeouts, grant channel), and a release that
 *   yields to an outside subscriber (yield key). Client and request ids in
 *   those names are normalised (<id>), since two names sharing the
 *   "dlock_lock_grant:{x}:<id>" family share the channel of any client.
 *   Any key or channel found for two different names is a failure. Two
 *   cases then show what a shared key does: a release of one name handing
 *   that name to a waiter of another, and a lock whose name is another
 *   name's queue key breaking that name's waiters.
 * - Passwords: the log callback at DEBUG records every line while clients
 *   with passwords connect, wait, renew, lose the server and reconnect with
 *   the password changed under them; a server whose AUTH is unknown echoes
 *   the arguments, password included, in its error. The dlock command
 *   (found next to this test in the build tree; skipped when not built) is
 *   run with the password in every URL form, -vv, --status (plain and
 *   JSON) and --force-unlock, and its /proc cmdline read from a child.
 * - Ids: the test executable defines getrandom(), which interposes the C
 *   library's for libdlock.so: a fixed pattern must show up in the client
 *   id and the release request id (so both come from getrandom), a failing
 *   getrandom must fail client creation (no weaker fallback), and 1000
 *   clients get 1000 distinct version-4 ids.
 * - Each case has its own server; the command runs in a temp dir.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "itest.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#define WD DLOCK_LEASE_WATCHDOG

/* ------------------------------------------------- getrandom interposer */

static atomic_int g_rand_mode; /* 0 real, 1 pattern 0xab, 2 ENOSYS */
static atomic_long g_rand_calls;

ssize_t getrandom(void *buf, size_t len, unsigned int flags) {
  atomic_fetch_add(&g_rand_calls, 1);
  switch (atomic_load(&g_rand_mode)) {
  case 1:
    memset(buf, 0xab, len);
    return (ssize_t)len;
  case 2:
    errno = ENOSYS;
    return -1;
  default:
    return (ssize_t)syscall(SYS_getrandom, buf, len, flags);
  }
}

/* 8-4-4-4-12 lowercase hex, version 4, RFC 4122 variant */
static bool is_uuid4(const char *s) {
  if (strlen(s) != 36)
    return false;
  for (int i = 0; i < 36; i++) {
    char ch = s[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (ch != '-')
        return false;
    } else if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) {
      return false;
    }
  }
  return s[14] == '4' && strchr("89ab", s[19]) != NULL;
}

/* ----------------------------------------------------- string sets */

typedef struct strset {
  char **v;
  size_t n, cap;
} strset_t;

static bool set_has(const strset_t *s, const char *x) {
  for (size_t i = 0; i < s->n; i++)
    if (strcmp(s->v[i], x) == 0)
      return true;
  return false;
}

static void set_add(strset_t *s, const char *x) {
  if (set_has(s, x))
    return;
  if (s->n == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 16;
    s->v = realloc(s->v, s->cap * sizeof *s->v);
    CHECK(s->v);
  }
  s->v[s->n] = strdup(x);
  CHECK(s->v[s->n]);
  s->n++;
}

static void set_free(strset_t *s) {
  for (size_t i = 0; i < s->n; i++)
    free(s->v[i]);
  free(s->v);
  memset(s, 0, sizeof *s);
}

/* A name with every UUID in it replaced by "<id>". */
static void normalise_ids(const char *in, size_t len, char *out, size_t n) {
  size_t o = 0;
  for (size_t i = 0; i < len && o + 5 < n;) {
    bool uuid = len - i >= 36;
    for (size_t k = 0; uuid && k < 36; k++) {
      char ch = in[i + k];
      uuid = (k == 8 || k == 13 || k == 18 || k == 23)
                 ? ch == '-'
                 : isxdigit((unsigned char)ch) != 0;
    }
    if (uuid) {
      memcpy(out + o, "<id>", 4);
      o += 4;
      i += 36;
    } else {
      out[o++] = in[i++];
    }
  }
  out[o] = '\0';
}

/* Adds the server's keys (KEYS *) or channels (PUBSUB CHANNELS *). */
static void snapshot(th_server_t *s, bool channels, strset_t *into) {
  redisReply *r = th_redis_cmd(s, channels ? "PUBSUB CHANNELS *" : "KEYS *");
  CHECK(r && r->type == REDIS_REPLY_ARRAY);
  for (size_t i = 0; i < r->elements; i++) {
    char norm[2 * DLOCK_NAME_MAX + 200];
    normalise_ids(r->element[i]->str, r->element[i]->len, norm, sizeof norm);
    set_add(into, norm);
  }
  freeReplyObject(r);
}

/* Keys matching a KEYS pattern. */
static size_t count_matching(th_server_t *s, const char *pattern) {
  redisReply *r = th_redis_cmd(s, "KEYS %s", pattern);
  size_t n = r && r->type == REDIS_REPLY_ARRAY ? r->elements : 0;
  if (r)
    freeReplyObject(r);
  return n;
}

static size_t count_of(th_server_t *s, bool channels) {
  strset_t t = {0};
  snapshot(s, channels, &t);
  size_t n = t.n;
  set_free(&t);
  return n;
}

/* ----------------------------------------------- names: the footprint */

typedef struct footprint {
  const char *name;
  strset_t keys, chans;
} footprint_t;

static dlock_client_t *quiet_client(th_server_t *s) {
  it_client_cfg_t cfg = {0};
  return it_client_cfg(s, &cfg);
}

/* Every key and channel `name` uses, observed on the server. */
static void observe(th_server_t *s, footprint_t *fp) {
  redisReply *r = th_redis_cmd(s, "FLUSHALL");
  CHECK(r);
  freeReplyObject(r);
  dlock_client_t *a = quiet_client(s), *b = quiet_client(s);
  dlock_lock_t *la = it_lock(a, fp->name), *lb = it_lock(b, fp->name);
  /* a partial release writes the release latch */
  CHECK_OK(dlock_lock_acquire(la, 0, WD));
  CHECK_OK(dlock_lock_acquire(la, 0, WD));
  CHECK_OK(dlock_lock_release(la));
  /* a waiter queues and subscribes */
  it_async_t w;
  it_async_start(&w, lb, 10000, WD, true);
  bool ok;
  TH_WAIT_FOR(ok, count_of(s, false) >= 4 && count_of(s, true) >= 2, 5000);
  if (!ok)
    printf("  %s: waiter not seen queued (%zu keys, %zu channels)\n", fp->name,
           count_of(s, false), count_of(s, true));
  snapshot(s, false, &fp->keys);
  snapshot(s, true, &fp->chans);
  /* an outside subscriber on the Redisson channel makes the release
   * yield (the yield key) instead of handing over */
  redisContext *outsider = th_redis_connect(s);
  CHECK(outsider);
  redisReply *chans =
      th_redis_cmd(s, "PUBSUB CHANNELS %s", "redisson_lock__channel*");
  CHECK(chans && chans->type == REDIS_REPLY_ARRAY);
  for (size_t i = 0; i < chans->elements; i++) {
    redisReply *sr =
        redisCommand(outsider, "SUBSCRIBE %b", chans->element[i]->str,
                     (size_t)chans->element[i]->len);
    if (sr)
      freeReplyObject(sr);
  }
  freeReplyObject(chans);
  CHECK_OK(dlock_lock_release(la));
  snapshot(s, false, &fp->keys);
  CHECK(it_async_wait(&w, 10000));
  CHECK_OK(w.rc);
  it_async_finish(&w);
  snapshot(s, false, &fp->keys);
  redisFree(outsider);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
}

static const char *const g_names[] = {
    "x",
    "{x}",
    "{x",
    "x}",
    "}{",
    "{}",
    "a{b}c",
    "a:b",
    ":",
    "=x",
    "={x}",
    "redisson_lock__channel:{x}",
    "redisson_unlock_latch:{x}",
    "x:dlock_lock_queue:{x}",
};
#define NNAMES (sizeof g_names / sizeof g_names[0])

static void t_names_disjoint(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  footprint_t fp[NNAMES];
  memset(fp, 0, sizeof fp);
  for (size_t i = 0; i < NNAMES; i++) {
    fp[i].name = g_names[i];
    observe(s, &fp[i]);
    printf("%-30s %zu keys, %zu channels\n", fp[i].name, fp[i].keys.n,
           fp[i].chans.n);
  }
  int shared = 0, redisson = 0;
  for (size_t i = 0; i < NNAMES; i++) {
    for (size_t j = i + 1; j < NNAMES; j++) {
      for (int kind = 0; kind < 2; kind++) {
        const strset_t *a = kind ? &fp[i].chans : &fp[i].keys;
        const strset_t *b = kind ? &fp[j].chans : &fp[j].keys;
        for (size_t k = 0; k < a->n; k++) {
          if (!set_has(b, a->v[k]))
            continue;
          /* Redisson's own names (its wake channel, its release latches
           * with a random request id) follow Redisson's rule, which maps
           * "x" and "{x}" alike; interop needs them as they are.
           * handoff_stays_on_its_name checks they change nothing. */
          bool layout = strncmp(a->v[k], "redisson_", 9) == 0;
          printf("%s %s \"%s\" by names \"%s\" and \"%s\"\n",
                 layout ? "shared (Redisson's layout)" : "SHARED",
                 kind ? "channel" : "key", a->v[k], fp[i].name, fp[j].name);
          if (layout)
            redisson++;
          else
            shared++;
        }
      }
    }
  }
  printf("%d names, %d keys/channels of Redisson's layout shared\n",
         (int)NNAMES, redisson);
  for (size_t i = 0; i < NNAMES; i++) {
    set_free(&fp[i].keys);
    set_free(&fp[i].chans);
  }
  th_server_stop(s);
  CHECKF(shared == 0,
         "%d of dlock's keys/channels are shared by two different lock "
         "names (see SHARED above)",
         shared);
}

/* "x" and "{x}" are two locks that share Redisson's wake channel: a
 * release of "x" must not hand anything to a waiter of "{x}", nor make
 * "{x}" look acquired while another owner holds it. */
static void t_handoff_stays_on_its_name(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *a = quiet_client(s), *b = quiet_client(s),
                 *c = quiet_client(s);
  dlock_lock_t *ax = it_lock(a, "x"), *bx = it_lock(b, "{x}"),
               *cx = it_lock(c, "{x}");
  CHECK_OK(dlock_lock_acquire(ax, 0, WD)); /* A holds "x" */
  CHECK_OK(dlock_lock_acquire(cx, 0, WD)); /* C holds "{x}" */
  it_async_t w;
  it_async_start(&w, bx, 3000, WD, false); /* B waits for "{x}" */
  CHECK(it_wait_subscribers(s, "{x}", 1, 5000));
  bool queued;
  TH_WAIT_FOR(queued, count_matching(s, "dlock_lock_queue*") >= 1, 5000);
  CHECKF(queued, "the waiter of \"{x}\" never queued");
  CHECK_OK(dlock_lock_release(ax)); /* A releases "x" */
  it_async_wait(&w, 5000);
  char bowner[128];
  it_owner(b, w.tid, bowner, sizeof bowner);
  bool c_holds = false;
  CHECK_OK(dlock_lock_is_held_by_thread(cx, &c_holds));
  int64_t b_on_x = it_hget_int(s, "x", bowner);
  printf("B's wait for \"{x}\": %s after %lld ms; C holds \"{x}\": %d; "
         "B's owner on \"x\": %lld\n",
         dlock_err_name(w.rc), (long long)(w.t_done - w.t_start), c_holds,
         (long long)b_on_x);
  int brc = w.rc;
  it_async_finish(&w);
  CHECK_OK(dlock_lock_release(cx));
  dlock_lock_free(ax);
  dlock_lock_free(bx);
  dlock_lock_free(cx);
  dlock_client_free(a);
  dlock_client_free(b);
  dlock_client_free(c);
  th_server_stop(s);
  CHECKF(b_on_x == -1, "releasing \"x\" made the waiter of \"{x}\" the owner "
                       "of \"x\"");
  CHECKF(!(brc == DLOCK_OK && c_holds),
         "a waiter of \"{x}\" was told it holds \"{x}\" while another owner "
         "holds it (mutual exclusion broken by a release of \"x\")");
  CHECK_RC(brc, DLOCK_ETIMEDOUT);
}

/* Names of dlock's own keys are refused, so no lock can be another lock's
 * queue, timeouts, yield key or grant channel. */
static void t_reserved_names(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = quiet_client(s);
  const char *names[] = {
      "dlock_lock_queue:{x}",         "dlock_lock_queue:={x}",
      "dlock_lock_queue_timeout:{x}", "dlock_lock_yield:{x}",
      "dlock_lock_grant:{x}:id",      "dlock_lock_"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    dlock_lock_t *l = (dlock_lock_t *)s;
    CHECK_RC(dlock_lock_new(c, names[i], &l), DLOCK_EINVAL);
    CHECK(l == NULL);
    CHECK(strstr(dlock_last_error(), "reserved"));
  }
  dlock_client_free(c);
  th_server_stop(s);
}

/* One round of contention on `name`: A holds, B waits (queued), A
 * releases, B gets the lock and releases. 0, or the step that failed. */
static const char *contend(th_server_t *s, const char *name, int *code) {
  dlock_client_t *a = quiet_client(s), *b = quiet_client(s);
  dlock_lock_t *la = it_lock(a, name), *lb = it_lock(b, name);
  const char *failed = NULL;
  it_async_t w;
  memset(&w, 0, sizeof w);
  bool started = false;
  if ((*code = dlock_lock_acquire(la, 0, WD)) != 0) {
    failed = "A's acquire";
    goto out;
  }
  it_async_start(&w, lb, 5000, WD, true);
  started = true;
  if (!it_wait_subscribers(s, name, 1, 5000)) {
    failed = "B never waited";
    goto out;
  }
  if ((*code = dlock_lock_release(la)) != 0) {
    failed = "A's release";
    dlock_lock_force_release(la, NULL);
    goto out;
  }
  if (!it_async_wait(&w, 6000) || (*code = w.rc) != 0)
    failed = "B's wait";
out:
  if (started) {
    int rel = it_async_finish(&w);
    if (!failed && rel != 0) {
      *code = rel;
      failed = "B's release";
    }
  }
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  return failed;
}

/* Every key another lock uses during a hold and a wait (observed on the
 * server), taken as a lock name: refused, or held without breaking that
 * other lock. */
static void t_keys_as_names(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  const char *victims[] = {"x", "{x}"};
  int bad = 0, refused = 0, held = 0;
  for (size_t v = 0; v < 2; v++) {
    /* the victim's keys while held twice (latch) and waited for */
    dlock_client_t *a = quiet_client(s), *b = quiet_client(s);
    dlock_lock_t *la = it_lock(a, victims[v]), *lb = it_lock(b, victims[v]);
    CHECK_OK(dlock_lock_acquire(la, 0, WD));
    CHECK_OK(dlock_lock_acquire(la, 0, WD));
    CHECK_OK(dlock_lock_release(la));
    it_async_t w;
    it_async_start(&w, lb, 10000, WD, true);
    bool queued;
    TH_WAIT_FOR(queued, count_matching(s, "dlock_lock_queue*") >= 1, 5000);
    CHECK(queued);
    redisReply *keys = th_redis_cmd(s, "KEYS *");
    CHECK(keys && keys->type == REDIS_REPLY_ARRAY);
    CHECK_OK(dlock_lock_release(la));
    CHECK(it_async_wait(&w, 10000));
    CHECK_OK(w.rc);
    it_async_finish(&w);
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_free(a);
    dlock_client_free(b);
    /* each of them as the name of a lock */
    dlock_client_t *d = quiet_client(s);
    for (size_t k = 0; k < keys->elements; k++) {
      const char *key = keys->element[k]->str;
      if (strcmp(key, victims[v]) == 0)
        continue;
      dlock_lock_t *dl = NULL;
      int rc = dlock_lock_new(d, key, &dl);
      if (rc == DLOCK_EINVAL) {
        refused++;
        printf("\"%s\" (a key of \"%s\"): refused as a name\n", key,
               victims[v]);
        continue;
      }
      CHECK_OK(rc);
      rc = dlock_lock_acquire(dl, 0, WD);
      if (rc == DLOCK_EWRONGTYPE) {
        /* the key is there, of another type: the name is taken, nothing
         * can be done to the other lock through it */
        printf("\"%s\" (a key of \"%s\"): occupied (%s)\n", key, victims[v],
               dlock_err_name(rc));
        refused++;
        dlock_lock_free(dl);
        continue;
      }
      int code = 0;
      const char *step =
          rc ? "the other lock's acquire" : contend(s, victims[v], &code);
      printf("\"%s\" (a key of \"%s\") held as a lock: %s%s%s\n", key,
             victims[v], step ? step : "no effect", step ? " failed with " : "",
             step ? dlock_err_name(rc ? rc : code) : "");
      if (step)
        bad++;
      else
        held++;
      if (rc == 0 && dlock_lock_release(dl) != 0)
        dlock_lock_force_release(dl, NULL);
      dlock_lock_free(dl);
    }
    dlock_client_free(d);
    freeReplyObject(keys);
    redisReply *r = th_redis_cmd(s, "FLUSHALL");
    if (r)
      freeReplyObject(r);
  }
  printf("%d keys refused or occupied, %d held as locks without effect\n",
         refused, held);
  th_server_stop(s);
  CHECKF(bad == 0,
         "%d lock(s) named after another lock's key broke that lock (see "
         "above)",
         bad);
}

/* Every crafted name held at once; releasing one works and leaves the
 * others' holds and leases as they were. */
static void t_locking_one_leaves_others(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  dlock_client_t *c = quiet_client(s);
  dlock_lock_t *l[NNAMES];
  for (size_t i = 0; i < NNAMES; i++) {
    l[i] = it_lock(c, g_names[i]);
    CHECK_OK(dlock_lock_acquire(l[i], 0, 600000));
  }
  char owner[128];
  it_owner(c, dlock_thread_id(), owner, sizeof owner);
  for (size_t i = 0; i < NNAMES; i++)
    CHECKF(it_hget_int(s, g_names[i], owner) == 1, "%s not held", g_names[i]);
  int bad = 0;
  for (size_t i = 0; i < NNAMES; i++) {
    int rc = dlock_lock_release(l[i]);
    if (rc != DLOCK_OK) {
      printf("release of \"%s\" with the others held: %s (\"%s\")\n",
             g_names[i], dlock_err_name(rc), dlock_last_error());
      bad++;
      CHECK_OK(dlock_lock_force_release(l[i], NULL));
    }
    CHECKF(!it_exists(s, g_names[i]), "%s still there", g_names[i]);
    for (size_t j = i + 1; j < NNAMES; j++) {
      CHECKF(it_hget_int(s, g_names[j], owner) == 1,
             "releasing \"%s\" changed \"%s\"", g_names[i], g_names[j]);
      int64_t pttl = th_redis_int(s, "PTTL %s", g_names[j]);
      CHECKF(pttl > 500000, "releasing \"%s\" changed the lease of \"%s\"",
             g_names[i], g_names[j]);
    }
  }
  CHECK_INT(it_lock_keys(s), ==, 0);
  for (size_t i = 0; i < NNAMES; i++)
    dlock_lock_free(l[i]);
  dlock_client_free(c);
  th_server_stop(s);
  CHECKF(bad == 0, "%d release(s) failed because of another name's lock", bad);
}

/* ------------------------------------------------------------ passwords */

typedef struct logcap {
  pthread_mutex_t mu;
  const char *secrets[4];
  int lines, leaks;
  char leak[600];
} logcap_t;

static void log_cb(void *ud, dlock_log_level_t level, const char *msg) {
  (void)level;
  logcap_t *lc = ud;
  pthread_mutex_lock(&lc->mu);
  lc->lines++;
  for (int i = 0; i < 4 && lc->secrets[i]; i++) {
    if (strstr(msg, lc->secrets[i])) {
      lc->leaks++;
      snprintf(lc->leak, sizeof lc->leak, "%s", msg);
    }
  }
  pthread_mutex_unlock(&lc->mu);
}

static int client_logged(const char *url, const char *user, const char *pw,
                         logcap_t *lc, int64_t watchdog, dlock_client_t **out) {
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 1000));
  CHECK_OK(dlock_options_set_command_timeout(o, 1000));
  if (watchdog)
    CHECK_OK(dlock_options_set_watchdog_timeout(o, watchdog));
  if (pw)
    CHECK_OK(dlock_options_set_credentials(o, user, pw));
  CHECK_OK(dlock_options_set_log_callback(o, log_cb, lc, DLOCK_LOG_DEBUG));
  int rc = dlock_client_new(out, url, o);
  dlock_options_free(o);
  return rc;
}

static bool has_secret(const char *text, const logcap_t *lc) {
  for (int i = 0; i < 4 && lc->secrets[i]; i++)
    if (strstr(text, lc->secrets[i]))
      return true;
  return false;
}

/* The password through every code path that logs: connect, wait (pub/sub),
 * renewals, a server restart, the password changed under a live client
 * (reconnects refused), a lost lock. */
static void t_password_not_in_logs(void) {
  const char *conf[] = {"requirepass Old-Pw-31a", NULL};
  th_server_t *s = th_server_start(conf);
  CHECK(s);
  logcap_t lc = {.mu = PTHREAD_MUTEX_INITIALIZER,
                 .secrets = {"Old-Pw-31a", "New-Pw-77b"}};
  char url[256];
  snprintf(url, sizeof url, "redis://default:Old-Pw-31a@127.0.0.1:%d", s->port);
  dlock_client_t *a, *b;
  CHECK_OK(client_logged(url, NULL, NULL, &lc, 300, &a));
  CHECK_OK(client_logged(s->url, NULL, "Old-Pw-31a", &lc, 300, &b));
  dlock_lock_t *la = it_lock(a, "pw"), *lb = it_lock(b, "pw");
  CHECK_OK(dlock_lock_acquire(la, 0, WD));
  it_async_t w;
  it_async_start(&w, lb, 10000, WD, true);
  CHECK(it_wait_subscribers(s, "pw", 1, 5000));
  CHECK(it_wait_renewed(s, "pw", 2000));
  CHECK(th_server_restart(s) == 0); /* pub/sub and pool connections drop */
  /* the server kept no data: the hold may be gone */
  CHECK_RC_IN(dlock_lock_release(la), DLOCK_OK, DLOCK_ELOST, DLOCK_ENOTOWNER);
  CHECK(it_async_wait(&w, 10000));
  it_async_finish(&w);
  /* the password changes under live clients: every reconnect is refused */
  char *ok = th_redis_str(s, "CONFIG SET requirepass %s", "New-Pw-77b");
  CHECK_STR(ok, "OK");
  free(ok);
  th_server_set_auth(s, NULL, "New-Pw-77b");
  redisReply *r = th_redis_cmd(s, "CLIENT KILL TYPE normal");
  if (r)
    freeReplyObject(r);
  r = th_redis_cmd(s, "CLIENT KILL TYPE pubsub");
  if (r)
    freeReplyObject(r);
  int rc = dlock_lock_acquire(la, 300, WD);
  printf("acquire after the password changed: %s (\"%s\")\n",
         dlock_err_name(rc), dlock_last_error());
  CHECK(!has_secret(dlock_last_error(), &lc));
  rc = dlock_client_ping(b);
  CHECK_RC(rc, DLOCK_EAUTH);
  CHECK(!has_secret(dlock_last_error(), &lc));
  dlock_lock_free(la);
  dlock_lock_free(lb);
  dlock_client_free(a);
  dlock_client_free(b);
  /* a client with the new password; its lock is lost when the key goes */
  it_lost_t lost;
  it_lost_init(&lost);
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_credentials(o, "default", "New-Pw-77b"));
  CHECK_OK(dlock_options_set_watchdog_timeout(o, 300));
  CHECK_OK(dlock_options_set_log_callback(o, log_cb, &lc, DLOCK_LOG_DEBUG));
  CHECK_OK(dlock_options_set_lost_callback(o, it_lost_cb, &lost));
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new(&c, s->url, o));
  dlock_options_free(o);
  dlock_lock_t *lcx = it_lock(c, "pw2");
  CHECK_OK(dlock_lock_acquire(lcx, 0, WD));
  CHECK_INT(th_redis_int(s, "DEL pw2"), ==, 1);
  CHECK(it_lost_wait(&lost, 1, 5000));
  CHECK_RC(dlock_lock_release(lcx), DLOCK_ELOST);
  dlock_lock_free(lcx);
  dlock_client_free(c);
  printf("%d log lines checked\n", lc.lines);
  CHECK(lc.lines > 0);
  CHECKF(lc.leaks == 0, "a log line shows a password: \"%s\"", lc.leak);
  th_server_stop(s);
}

/* A server that does not know AUTH (renamed away; proxies and old
 * servers answer alike) echoes the command's arguments in its error:
 * the library must not pass the password on in its message or log. */
static void t_password_not_echoed_by_server(void) {
  const char *conf[] = {"rename-command AUTH \"\"", NULL};
  th_server_t *s = th_server_start(conf);
  CHECK(s);
  logcap_t lc = {.mu = PTHREAD_MUTEX_INITIALIZER, .secrets = {"Echo-Pw-5150"}};
  char url[256];
  dlock_client_t *c = NULL;
  const struct {
    const char *url_fmt, *user, *pw;
  } cases[] = {
      {"redis://:Echo-Pw-5150@127.0.0.1:%d", NULL, NULL},
      {"redis://alice:Echo-Pw-5150@127.0.0.1:%d", NULL, NULL},
      {"redis://127.0.0.1:%d", NULL, "Echo-Pw-5150"},
      {"redis://127.0.0.1:%d", "alice", "Echo-Pw-5150"},
  };
  int leaks = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(url, sizeof url, cases[i].url_fmt, s->port);
    int rc = client_logged(url, cases[i].user, cases[i].pw, &lc, 0, &c);
    printf("case %zu: %s \"%s\"\n", i, dlock_err_name(rc), dlock_last_error());
    CHECK_RC_IN(rc, DLOCK_EAUTH, DLOCK_ESERVER);
    if (has_secret(dlock_last_error(), &lc))
      leaks++;
  }
  th_server_stop(s);
  CHECKF(leaks == 0 && lc.leaks == 0,
         "the server's echo of AUTH put the password into %d error "
         "message(s) and %d log line(s)",
         leaks, lc.leaks);
}

/* ------------------------------------------------ the dlock command */

static bool g_cli_found;
static char g_cli[PATH_MAX];

static bool find_cli(void) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0)
    return false;
  self[n] = '\0';
  /* BUILD/tests/test_security -> BUILD/tools/dlock/dlock */
  snprintf(g_cli, sizeof g_cli, "%s/../tools/dlock/dlock", dirname(self));
  g_cli_found = access(g_cli, X_OK) == 0;
  return g_cli_found;
}

typedef struct cli_run {
  int status;
  char out[8192], err[8192];
} cli_run_t;

static void slurp(const char *path, char *buf, size_t n) {
  buf[0] = '\0';
  FILE *f = fopen(path, "r");
  if (!f)
    return;
  size_t got = fread(buf, 1, n - 1, f);
  buf[got] = '\0';
  fclose(f);
}

/* Runs the command (argv[0] is replaced by its path) with `env` added,
 * output to files in dir; at most 20 s. */
static void run_cli(const char *dir, char **argv, char **env, cli_run_t *res) {
  char outp[PATH_MAX], errp[PATH_MAX];
  snprintf(outp, sizeof outp, "%s/out", dir);
  snprintf(errp, sizeof errp, "%s/err", dir);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, outp, O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  posix_spawn_file_actions_addopen(&fa, 2, errp, O_WRONLY | O_CREAT | O_TRUNC,
                                   0600);
  extern char **environ;
  char *envp[64];
  size_t ne = 0;
  for (char **e = environ; *e && ne < 50; e++)
    if (strncmp(*e, "DLOCK_", 6) != 0)
      envp[ne++] = *e;
  for (char **e = env; e && *e && ne < 63; e++)
    envp[ne++] = *e;
  envp[ne] = NULL;
  argv[0] = g_cli;
  pid_t pid;
  CHECK(posix_spawn(&pid, g_cli, &fa, NULL, argv, envp) == 0);
  posix_spawn_file_actions_destroy(&fa);
  bool ok;
  int st = 0;
  TH_WAIT_FOR(ok, waitpid(pid, &st, WNOHANG) == pid, 20000);
  if (!ok) {
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
  }
  CHECKF(ok, "the command did not finish");
  res->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  slurp(outp, res->out, sizeof res->out);
  slurp(errp, res->err, sizeof res->err);
}

static int cli_leaks(const char *what, const cli_run_t *r, const char *pw,
                     int want_status) {
  int bad = 0;
  printf("%-44s exit %d\n", what, r->status);
  if (want_status >= 0 && r->status != want_status) {
    printf("  FAIL: exit %d, wanted %d; stderr: %s\n", r->status, want_status,
           r->err);
    bad++;
  }
  if (strstr(r->out, pw)) {
    printf("  FAIL: password on stdout: %s\n", r->out);
    bad++;
  }
  if (strstr(r->err, pw)) {
    printf("  FAIL: password on stderr: %s\n", r->err);
    bad++;
  }
  return bad;
}

static void t_cli_password(void) {
  if (!find_cli()) {
    printf("skipped: no dlock command next to this test (%s)\n", g_cli);
    return;
  }
  const char *pw = "Cli-Pw-8e1f";
  const char *conf[] = {"requirepass Cli-Pw-8e1f", NULL};
  th_server_t *s = th_server_start(conf);
  CHECK(s);
  char dir[] = "/tmp/dlock-sec-XXXXXX";
  CHECK(mkdtemp(dir));
  char url[256], eq[300], attached[300], envurl[300], cmdline[256],
      script[1024];
  snprintf(url, sizeof url, "redis://:%s@127.0.0.1:%d", pw, s->port);
  snprintf(eq, sizeof eq, "--url=%s", url);
  snprintf(attached, sizeof attached, "-u%s", url);
  snprintf(envurl, sizeof envurl, "DLOCK_URL=%s", url);
  snprintf(cmdline, sizeof cmdline, "%s/cmdline", dir);
  snprintf(script, sizeof script,
           "tr '\\0' ' ' </proc/$PPID/cmdline >'%s'; ps -o args= -p $PPID "
           ">>'%s' 2>/dev/null; true",
           cmdline, cmdline);
  cli_run_t r;
  int bad = 0;
  char buf[8192];
  /* argv as seen from the child, for each URL form */
  const char *forms[] = {"-u", eq, attached};
  for (int f = 0; f < 3; f++) {
    /* "-u URL -v" or "--url=URL -v -v" or "-uURL -v -v" */
    char *argv[] = {NULL, (char *)forms[f], f == 0 ? url : "-v",
                    "-v", "sec-cli",        "sh",
                    "-c", script,           NULL};
    run_cli(dir, argv, NULL, &r);
    char what[64];
    snprintf(what, sizeof what, "run, URL given as %s",
             f == 0   ? "-u URL"
             : f == 1 ? "--url=URL"
                      : "-uURL");
    bad += cli_leaks(what, &r, pw, 0);
    slurp(cmdline, buf, sizeof buf);
    CHECKF(buf[0], "the child could not read the command's cmdline");
    if (strstr(buf, pw)) {
      printf("  FAIL: password in /proc/PID/cmdline or ps: %s\n", buf);
      bad++;
    }
  }
  /* -vv (library DEBUG log), --status plain and JSON while held,
   * --force-unlock, DLOCK_URL */
  CHECK_INT(th_redis_int(s, "HSET %s %s 1", "sec-held", "someone:1"), ==, 1);
  CHECK_INT(th_redis_int(s, "PEXPIRE %s 60000", "sec-held"), ==, 1);
  {
    char *argv[] = {NULL, "-vv", "-u", url, "-n", "sec-held", "true", NULL};
    run_cli(dir, argv, NULL, &r);
    bad += cli_leaks("-vv -n on a held lock", &r, pw, 1);
  }
  {
    char *argv[] = {NULL, "-vv", "-u", url, "--status", "sec-held", NULL};
    run_cli(dir, argv, NULL, &r);
    bad += cli_leaks("--status (plain)", &r, pw, -1);
  }
  {
    char *argv[] = {NULL, "-u", url, "--status", "--json", "sec-held", NULL};
    run_cli(dir, argv, NULL, &r);
    bad += cli_leaks("--status --json", &r, pw, -1);
  }
  {
    char *argv[] = {NULL, "-vv", "--status", "sec-held", NULL};
    char *env[] = {envurl, NULL};
    run_cli(dir, argv, env, &r);
    bad += cli_leaks("--status with DLOCK_URL", &r, pw, -1);
  }
  {
    char *argv[] = {NULL, "-vv", "-u", url, "--force-unlock", "sec-held", NULL};
    run_cli(dir, argv, NULL, &r);
    bad += cli_leaks("--force-unlock", &r, pw, 0);
  }
  /* a wrong password, and one the server never sees (bad port) */
  {
    char wrong[300];
    snprintf(wrong, sizeof wrong, "redis://:Wrong-%s@127.0.0.1:%d", pw,
             s->port);
    char *argv[] = {NULL, "-vv", "-u", wrong, "sec-cli", "true", NULL};
    run_cli(dir, argv, NULL, &r);
    bad += cli_leaks("-vv with a wrong password", &r, pw, 69);
  }
  {
    char badport[300];
    snprintf(badport, sizeof badport, "redis://:%s@127.0.0.1:99999", pw);
    char *argv[] = {NULL, "-u", badport, "sec-cli", "true", NULL};
    run_cli(dir, argv, NULL, &r);
    bad += cli_leaks("a bad port", &r, pw, 64);
  }
  /* usage errors that quote an argument holding a URL */
  {
    char typo[300];
    snprintf(typo, sizeof typo, "--urll=%s", url);
    char *argv[] = {NULL, typo, "sec-cli", "true", NULL};
    run_cli(dir, argv, NULL, &r);
    bad += cli_leaks("a mistyped --url= option", &r, pw, 64);
  }
  {
    char *argv[] = {NULL, "-w", url, "sec-cli", "true", NULL};
    run_cli(dir, argv, NULL, &r);
    bad += cli_leaks("the URL given where -w wants seconds", &r, pw, 64);
  }
  char rm[PATH_MAX + 16];
  snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
  CHECK(system(rm) == 0);
  th_server_stop(s);
  CHECKF(bad == 0, "%d password leak(s) or wrong exits by the command", bad);
}

/* ------------------------------------------------------------------ ACL */

#define ACL_RULE IT_ACL_COMMANDS " " IT_ACL_PATTERNS

static dlock_client_t *acl_client(th_server_t *s, const char *user) {
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_credentials(o, user, "acl-pw"));
  CHECK_OK(dlock_options_set_connect_timeout(o, 3000));
  CHECK_OK(dlock_options_set_command_timeout(o, 3000));
  dlock_client_t *c = NULL;
  int rc = dlock_client_new(&c, s->url, o);
  dlock_options_free(o);
  CHECKF(rc == 0, "client as %s: %s %s", user, dlock_err_name(rc),
         dlock_last_error());
  return c;
}

/* A waiter on another thread for a semaphore permit or a latch. */
typedef struct sync_waiter {
  dlock_semaphore_t *sem;
  dlock_latch_t *latch;
  pthread_t th;
  atomic_int done;
  int rc;
} sync_waiter_t;

static void *sync_waiter_main(void *arg) {
  sync_waiter_t *w = arg;
  w->rc = w->sem ? dlock_semaphore_acquire(w->sem, 1, 20000)
                 : dlock_latch_await(w->latch, 20000);
  atomic_store(&w->done, 1);
  return NULL;
}

static int sync_waiter_run(sync_waiter_t *w, th_server_t *s,
                           const char *channel, void (*wake)(void *),
                           void *arg) {
  CHECK(pthread_create(&w->th, NULL, sync_waiter_main, w) == 0);
  bool ok;
  TH_WAIT_FOR(ok, it_numsub(s, channel) >= 1 || atomic_load(&w->done),
              10000);
  CHECKF(ok && !atomic_load(&w->done), "the waiter did not wait on %s",
         channel);
  wake(arg);
  TH_WAIT_FOR(ok, atomic_load(&w->done), 15000);
  CHECKF(ok, "the waiter on %s was not woken", channel);
  pthread_join(w->th, NULL);
  return w->rc;
}

static void release_one(void *sem) {
  CHECK_OK(dlock_semaphore_release(sem, 1));
}
static void count_down(void *latch) {
  CHECK_OK(dlock_latch_count_down(latch));
}

/* One lock kind: A holds, B waits (subscribed), A releases, B gets it. */
static void acl_lock_kind(th_server_t *s, dlock_client_t *a, dlock_client_t *b,
                          dlock_lock_kind_t kind, const char *name,
                          const char *channel) {
  dlock_lock_t *la = NULL, *lb = NULL;
  CHECK_OK(dlock_lock_new_kind(a, name, kind, &la));
  CHECK_OK(dlock_lock_new_kind(b, name, kind, &lb));
  CHECK_OK(dlock_lock_acquire(la, 0, WD));
  bool locked = false;
  CHECK_OK(dlock_lock_is_locked(la, &locked));
  CHECK(locked);
  int64_t n = 0;
  CHECK_OK(dlock_lock_hold_count(la, &n));
  CHECK_OK(dlock_lock_remaining_lease(la, &n));
  dlock_lock_state_t *st = NULL;
  CHECK_OK(dlock_lock_state(la, &st));
  dlock_lock_state_free(st);
  it_async_t w;
  it_async_start(&w, lb, 20000, WD, false);
  bool ok;
  TH_WAIT_FOR(ok, it_channels(s, channel) >= 1, 10000);
  CHECKF(ok, "%s: no waiter subscribed to %s", name, channel);
  CHECK(!atomic_load(&w.done));
  CHECK_OK(dlock_lock_release(la));
  CHECKF(it_async_wait(&w, 15000), "%s: the waiter was not woken", name);
  CHECKF(w.rc == DLOCK_OK, "%s: %s %s", name, dlock_err_name(w.rc), w.err);
  CHECK_OK(it_async_finish(&w));
  bool was = false;
  CHECK_OK(dlock_lock_acquire(la, 0, WD));
  CHECK_OK(dlock_lock_force_release(la, &was));
  CHECK(was);
  dlock_lock_free(la);
  dlock_lock_free(lb);
  printf("%-28s every call works under the rule\n", name);
}

/* A user with exactly docs/ACL.md's rule uses every kind; a name outside
 * the rule's prefix is refused with NOPERM. */
static void t_acl_minimal_rule(void) {
  const char *conf[] = {"user locker on >acl-pw " ACL_RULE, NULL};
  th_server_t *s = th_server_start(conf);
  CHECK(s);
  dlock_client_t *a = acl_client(s, "locker"), *b = acl_client(s, "locker");
  CHECK_OK(dlock_client_ping(a));
  acl_lock_kind(s, a, b, DLOCK_REENTRANT, "app:reentrant",
                "redisson_lock__channel:{app:reentrant}");
  acl_lock_kind(s, a, b, DLOCK_FENCED, "app:fenced",
                "redisson_lock__channel:{app:fenced}");
  acl_lock_kind(s, a, b, DLOCK_FAIR, "app:fair",
                "redisson_lock__channel:{app:fair}:*");
  acl_lock_kind(s, a, b, DLOCK_WRITE, "app:rw",
                "redisson_rwlock:{app:rw}");
  {
    /* a writer waits for a reader */
    dlock_lock_t *r = NULL, *wr = NULL;
    CHECK_OK(dlock_lock_new_kind(a, "app:rw3", DLOCK_READ, &r));
    CHECK_OK(dlock_lock_new_kind(b, "app:rw3", DLOCK_WRITE, &wr));
    CHECK_OK(dlock_lock_acquire(r, 0, WD));
    it_async_t w;
    it_async_start(&w, wr, 20000, WD, true);
    bool ok;
    TH_WAIT_FOR(ok, it_channels(s, "redisson_rwlock:{app:rw3}") >= 1, 10000);
    CHECK(ok);
    CHECK_OK(dlock_lock_release(r));
    CHECK(it_async_wait(&w, 15000));
    CHECKF(w.rc == DLOCK_OK, "writer: %s %s", dlock_err_name(w.rc), w.err);
    it_async_finish(&w);
    dlock_lock_free(r);
    dlock_lock_free(wr);
  }
  {
    dlock_semaphore_t *sa = NULL, *sb = NULL;
    CHECK_OK(dlock_semaphore_new(a, "app:sem", &sa));
    CHECK_OK(dlock_semaphore_new(b, "app:sem", &sb));
    bool set = false;
    CHECK_OK(dlock_semaphore_try_set_permits(sa, 1, &set));
    CHECK(set);
    CHECK_OK(dlock_semaphore_acquire(sa, 1, 0));
    sync_waiter_t w = {.sem = sb};
    CHECK_OK(sync_waiter_run(&w, s, "redisson_sc:{app:sem}", release_one, sa));
    CHECK_OK(dlock_semaphore_add_permits(sa, 1));
    int64_t n = 0;
    CHECK_OK(dlock_semaphore_available(sa, &n));
    CHECK_OK(dlock_semaphore_delete(sa, &set));
    dlock_semaphore_free(sa);
    dlock_semaphore_free(sb);
    printf("%-28s every call works under the rule\n", "app:sem");
  }
  {
    dlock_permit_sem_t *p = NULL;
    CHECK_OK(dlock_permit_sem_new(a, "app:psem", &p));
    bool set = false;
    CHECK_OK(dlock_permit_sem_try_set_permits(p, 1, &set));
    char id[DLOCK_PERMIT_ID_LEN + 1];
    CHECK_OK(dlock_permit_sem_acquire(p, 0, 10000, id));
    dlock_sem_state_t *st = NULL;
    CHECK_OK(dlock_permit_sem_state(p, &st));
    dlock_sem_state_free(st);
    CHECK_OK(dlock_permit_sem_release(p, id));
    CHECK_OK(dlock_permit_sem_delete(p, &set));
    dlock_permit_sem_free(p);
    printf("%-28s every call works under the rule\n", "app:psem");
  }
  {
    dlock_latch_t *la = NULL, *lb = NULL;
    CHECK_OK(dlock_latch_new(a, "app:latch", &la));
    CHECK_OK(dlock_latch_new(b, "app:latch", &lb));
    bool set = false;
    CHECK_OK(dlock_latch_try_set_count(la, 1, &set));
    CHECK(set);
    sync_waiter_t w = {.latch = lb};
    CHECK_OK(sync_waiter_run(&w, s,
                             "redisson_countdownlatch__channel__{app:latch}",
                             count_down, la));
    int64_t n = 0;
    CHECK_OK(dlock_latch_count(la, &n));
    CHECK_OK(dlock_latch_delete(la, &set));
    dlock_latch_free(la);
    dlock_latch_free(lb);
    printf("%-28s every call works under the rule\n", "app:latch");
  }
  /* the rule confines the user to its names */
  dlock_lock_t *other = it_lock(a, "other");
  CHECK_RC(dlock_lock_acquire(other, 0, WD), DLOCK_EAUTH);
  printf("outside the prefix: \"%s\"\n", dlock_last_error());
  CHECK(strstr(dlock_last_error(), "NOPERM"));
  dlock_lock_free(other);
  /* nothing left but the fenced lock's token (kept for good, by design),
   * once the releases' yield marks (PX 50 ms) have run out */
  bool clean;
  TH_WAIT_FOR(clean, it_lock_keys(s) == 1, 2000);
  CHECKF(clean, "%lld keys left", (long long)it_lock_keys(s));
  CHECK(it_exists(s, "redisson_lock_token:{app:fenced}"));
  dlock_client_free(a);
  dlock_client_free(b);
  th_server_stop(s);
}

/* The rule minus one permission: the call that needs it fails with one
 * line naming what is missing. */
static void t_acl_missing_permission(void) {
  const char *conf[] = {
      "user noevalsha on >acl-pw " ACL_RULE " -evalsha",
      "user nopublish on >acl-pw " ACL_RULE " -publish",
      "user nosubscribe on >acl-pw " ACL_RULE " -subscribe", NULL};
  th_server_t *s = th_server_start(conf);
  CHECK(s);
  const struct {
    const char *user, *want;
  } cases[] = {
      {.user = "noevalsha", .want = "'evalsha' command"},
      {.user = "nopublish", .want = "'publish' command"},
      {.user = "nosubscribe", .want = "'subscribe' command"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (strcmp(cases[i].user, "nopublish") == 0) {
      /* found when the client opens: no release could wake a waiter */
      dlock_options_t *o = NULL;
      CHECK_OK(dlock_options_new(&o));
      CHECK_OK(dlock_options_set_credentials(o, cases[i].user, "acl-pw"));
      dlock_client_t *c = NULL;
      int rc = dlock_client_new(&c, s->url, o);
      dlock_options_free(o);
      const char *err = dlock_last_error();
      printf("%-12s %s \"%s\"\n", cases[i].user, dlock_err_name(rc), err);
      CHECK_RC(rc, DLOCK_EAUTH);
      CHECKF(strstr(err, cases[i].want), "\"%s\" does not name %s", err,
             cases[i].want);
      CHECK(!strchr(err, '\n'));
      continue;
    }
    dlock_client_t *a = acl_client(s, cases[i].user);
    dlock_client_t *b = acl_client(s, cases[i].user);
    dlock_lock_t *la = it_lock(a, "app:missing"), *lb = it_lock(b,
                                                                 "app:missing");
    int rc = dlock_lock_acquire(la, 0, WD);
    char err[512] = "";
    if (rc == DLOCK_OK) {
      /* a waiter: subscribes, and is woken by the release's publish */
      it_async_t w;
      it_async_start(&w, lb, 8000, WD, true);
      bool ok;
      TH_WAIT_FOR(ok, it_channels(s, "redisson_lock__channel:{app:missing}") >=
                          1 ||
                      atomic_load(&w.done),
                  10000);
      CHECKF(ok, "%s: the waiter neither waited nor ended", cases[i].user);
      int rel = dlock_lock_release(la);
      if (rel) {
        rc = rel;
        snprintf(err, sizeof err, "%s", dlock_last_error());
      }
      CHECK(it_async_wait(&w, 15000));
      if (!rc) {
        rc = w.rc;
        snprintf(err, sizeof err, "%s", w.err);
      }
      it_async_finish(&w);
    } else {
      snprintf(err, sizeof err, "%s", dlock_last_error());
    }
    printf("%-12s %s \"%s\"\n", cases[i].user, dlock_err_name(rc), err);
    CHECKF(rc == DLOCK_EAUTH, "%s: %s", cases[i].user, dlock_err_name(rc));
    CHECKF(strstr(err, cases[i].want), "\"%s\" does not name %s", err,
           cases[i].want);
    CHECK(!strchr(err, '\n'));
    dlock_lock_free(la);
    dlock_lock_free(lb);
    dlock_client_free(a);
    dlock_client_free(b);
    redisReply *r = th_redis_cmd(s, "DEL %s", "app:missing");
    if (r)
      freeReplyObject(r);
  }
  th_server_stop(s);
}

/* ------------------------------------------------------------------ ids */

static void t_ids_from_getrandom(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  /* a pattern from getrandom shows up in the client id */
  atomic_store(&g_rand_calls, 0);
  atomic_store(&g_rand_mode, 1);
  dlock_client_t *c = quiet_client(s);
  atomic_store(&g_rand_mode, 0);
  CHECKF(atomic_load(&g_rand_calls) > 0,
         "getrandom() was not called (or not interposed) for the client id");
  printf("client id with getrandom giving 0xab...: %s\n", dlock_client_id(c));
  CHECK_STR(dlock_client_id(c), "abababab-abab-4bab-abab-abababababab");
  /* and in the request id of a release (the latch of a partial release) */
  dlock_lock_t *l = it_lock(c, "rid");
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  atomic_store(&g_rand_mode, 1);
  int rc = dlock_lock_release(l);
  atomic_store(&g_rand_mode, 0);
  CHECK_OK(rc);
  redisReply *r = th_redis_cmd(s, "KEYS %s", "redisson_unlock_latch:*");
  CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 1);
  printf("latch with getrandom giving 0xab...: %s\n", r->element[0]->str);
  CHECK_STR(r->element[0]->str, "redisson_unlock_latch:{rid}:abababab-abab-"
                                "4bab-abab-abababababab");
  freeReplyObject(r);
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  /* no fallback to a weaker source when getrandom fails */
  atomic_store(&g_rand_mode, 2);
  c = (dlock_client_t *)s;
  rc = dlock_client_new(&c, s->url, NULL);
  char msg[512];
  snprintf(msg, sizeof msg, "%s", dlock_last_error());
  atomic_store(&g_rand_mode, 0);
  printf("getrandom failing: %s (\"%s\")\n", dlock_err_name(rc), msg);
  CHECKF(rc != 0 && c == NULL,
         "a client was created without randomness for its id");
  CHECK(strstr(msg, "getrandom"));
  th_server_stop(s);
}

static int by_string(const void *a, const void *b) {
  return strcmp((const char *)a, (const char *)b);
}

static void t_ids_distinct_uuid4(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  enum { N = 1000 };
  char(*ids)[40] = calloc(N, sizeof *ids);
  CHECK(ids);
  int64_t t0 = th_now_ms();
  for (int i = 0; i < N; i++) {
    dlock_client_t *c = NULL;
    CHECK_OK(dlock_client_new(&c, s->url, NULL));
    snprintf(ids[i], sizeof ids[i], "%s", dlock_client_id(c));
    dlock_client_free(c);
    CHECKF(is_uuid4(ids[i]), "client id \"%s\" is not a version-4 UUID",
           ids[i]);
  }
  printf("%d clients in %lld ms\n", N, (long long)(th_now_ms() - t0));
  qsort(ids, N, sizeof *ids, by_string);
  for (int i = 1; i < N; i++)
    CHECKF(strcmp(ids[i - 1], ids[i]) != 0, "client id %s given twice", ids[i]);
  /* request ids: one per partial release, each in its latch key */
  dlock_client_t *c = quiet_client(s);
  dlock_lock_t *l = it_lock(c, "rids");
  CHECK_OK(dlock_lock_acquire(l, 0, WD));
  for (int i = 0; i < 200; i++) {
    CHECK_OK(dlock_lock_acquire(l, 0, WD));
    CHECK_OK(dlock_lock_release(l));
  }
  redisReply *r = th_redis_cmd(s, "KEYS %s", "redisson_unlock_latch:*");
  CHECK(r && r->type == REDIS_REPLY_ARRAY);
  CHECK_INT(r->elements, ==, 200);
  for (size_t i = 0; i < r->elements; i++) {
    const char *k = r->element[i]->str;
    const char *rid = strrchr(k, ':');
    CHECK(rid && strncmp(k, "redisson_unlock_latch:{rids}:", 29) == 0);
    CHECKF(is_uuid4(rid + 1), "request id \"%s\" is not a version-4 UUID",
           rid + 1);
  }
  freeReplyObject(r);
  CHECK_OK(dlock_lock_release(l));
  dlock_lock_free(l);
  dlock_client_free(c);
  free(ids);
  th_server_stop(s);
}

static const check_case_t cases[] = {
    {"names_disjoint", t_names_disjoint},
    {"handoff_stays_on_its_name", t_handoff_stays_on_its_name},
    {"reserved_names", t_reserved_names},
    {"keys_as_names", t_keys_as_names},
    {"locking_one_leaves_others", t_locking_one_leaves_others},
    {"password_not_in_logs", t_password_not_in_logs},
    {"password_not_echoed_by_server", t_password_not_echoed_by_server},
    {"cli_password", t_cli_password},
    {"ids_from_getrandom", t_ids_from_getrandom},
    {"ids_distinct_uuid4", t_ids_distinct_uuid4},
    {"acl_minimal_rule", t_acl_minimal_rule},
    {"acl_missing_permission", t_acl_missing_permission},
};

CHECK_MAIN(cases)
