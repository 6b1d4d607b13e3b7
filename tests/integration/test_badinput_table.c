/*
 * test_badinput_table.c - the bad-input table: every public function of
 * dlock.h with NULLs, bad names, bad durations, dead or forged handles,
 * bad URLs, and servers that answer with errors, each row stating the code
 * and (part of) the message the caller must get.
 *
 * Design note
 * - Table driven: a row is (function, input, thunk, argument, number,
 *   expected code, expected message part). A row group is one case of the
 *   case table below, hence one ctest test with its own redis-server,
 *   configured as the group needs (renamed commands, ACL users, a replica
 *   of nothing, maxmemory, a long script). Rows of a group run in order
 *   and may build on each other (hold, revoke, release).
 * - A row passes when the thunk returns the expected code and, for an
 *   error, dlock_last_error() is one non-empty line containing the
 *   expected part. A thunk checks outputs too (out-parameters left NULL,
 *   "" instead of NULL strings) and returns WRONG with a reason when they
 *   are off. Every row of a group runs even after a failure, so one run
 *   shows every broken row; the group fails at the end.
 * - `test_badinput_table --markdown [GROUP...]` prints the rows with the
 *   code and message observed (ports and ids normalised): the table of
 *   docs/BAD-INPUT.md.
 * - Use after free is undefined behaviour in C. The rows that reuse a
 *   freed handle (the library promises DLOCK_EBADHANDLE while the memory
 *   is still mapped, via the handles' magic) run only in builds without
 *   ASan/TSan and outside valgrind, where the allocator keeps freed memory
 *   mapped and nothing else allocates between the free and the call.
 *   Forged handles (zeroed memory, a dead magic) are defined and run
 *   everywhere.
 * - Single threaded apart from the library's own threads.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include "itest.h"

#include <ctype.h>
#include <limits.h>

#define WD DLOCK_LEASE_WATCHDOG
#define WRONG (-1000) /* a thunk's verdict: outputs were wrong */

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define BT_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) ||     \
    __has_feature(memory_sanitizer)
#define BT_SANITIZED 1
#endif
#endif
#ifndef BT_SANITIZED
#define BT_SANITIZED 0
#endif

/* ---------------------------------------------------------------- rows */

typedef struct tctx {
  th_server_t *s;
  dlock_client_t *c;
  dlock_lock_t *l;
  dlock_options_t *o;
  char url[512];         /* a URL rows may use */
  char why[512];         /* what a thunk found wrong */
  const char *arg;       /* the row's argument */
  int64_t num;           /* the row's number */
  redisContext *blocker; /* the long script's connection (busy group) */
} tctx_t;

typedef int (*thunk_fn)(tctx_t *x);

typedef struct row {
  const char *fn;    /* the function under test */
  const char *input; /* what is wrong with the call */
  thunk_fn call;
  const char *arg;
  int64_t num;
  int want;        /* expected code */
  const char *msg; /* part of dlock_last_error() expected (errors only) */
} row_t;

#define ROW(fn, input, call, arg, num, want, msg)                              \
  { fn, input, call, arg, num, want, msg }

static bool g_markdown;

static int wrong(tctx_t *x, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int wrong(tctx_t *x, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(x->why, sizeof x->why, fmt, ap);
  va_end(ap);
  return WRONG;
}

/* The message with what varies from run to run replaced: ports, client
 * ids, socket dirs. */
static void normalise(const char *in, char *out, size_t n) {
  size_t o = 0;
  for (size_t i = 0; in[i] && o + 16 < n;) {
    /* 8-4-4-4-12 hex: a client id */
    bool uuid = strlen(in + i) >= 36;
    for (size_t k = 0; uuid && k < 36; k++) {
      char ch = in[i + k];
      uuid = (k == 8 || k == 13 || k == 18 || k == 23)
                 ? ch == '-'
                 : isxdigit((unsigned char)ch);
    }
    if (uuid) {
      o += (size_t)snprintf(out + o, n - o, "<client-id>");
      i += 36;
      if (in[i] == ':' && isdigit((unsigned char)in[i + 1])) {
        o += (size_t)snprintf(out + o, n - o, ":<tid>");
        for (i++; isdigit((unsigned char)in[i]);)
          i++;
      }
      continue;
    }
    if (strncmp(in + i, "127.0.0.1:", 10) == 0 &&
        isdigit((unsigned char)in[i + 10])) {
      o += (size_t)snprintf(out + o, n - o, "127.0.0.1:PORT");
      i += 10;
      while (isdigit((unsigned char)in[i]))
        i++;
      continue;
    }
    char ch = in[i++];
    out[o++] = ch == '|' ? '/' : ch;
  }
  out[o] = '\0';
}

static const char *printable(const char *s, char *buf, size_t n) {
  size_t o = 0;
  for (size_t i = 0; s && s[i] && o + 6 < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch == '|')
      o += (size_t)snprintf(buf + o, n - o, "\\|");
    else if (ch >= 0x20 && ch < 0x7f)
      buf[o++] = (char)ch;
    else
      o += (size_t)snprintf(buf + o, n - o, "\\x%02x", ch);
  }
  buf[o] = '\0';
  return buf;
}

/* Runs the rows in order; returns how many failed. */
static int run_rows(tctx_t *x, const char *group, const row_t *rows, size_t n) {
  int failed = 0;
  if (g_markdown)
    printf("\n### %s\n\n| function | input | code | message |\n"
           "| --- | --- | --- | --- |\n",
           group);
  for (size_t i = 0; i < n; i++) {
    const row_t *r = &rows[i];
    x->arg = r->arg;
    x->num = r->num;
    x->why[0] = '\0';
    int rc = r->call(x);
    char msg[600];
    snprintf(msg, sizeof msg, "%s", dlock_last_error());
    bool ok = rc == r->want;
    if (ok && rc != 0) {
      ok = msg[0] != '\0' && !strchr(msg, '\n') &&
           (!r->msg || strstr(msg, r->msg));
    }
    if (g_markdown) {
      char m[700], in[300];
      normalise(rc ? msg : "", m, sizeof m);
      printf("| `%s` | %s | %s%s | %s |\n", r->fn,
             printable(r->input, in, sizeof in),
             rc == WRONG ? "wrong output" : dlock_err_name(rc),
             ok ? "" : " (FAILS)", rc == WRONG ? x->why : m);
    } else {
      printf("%s %s(%s): %s%s \"%s\"\n", ok ? "ok  " : "FAIL", r->fn, r->input,
             rc == WRONG ? "wrong output: " : dlock_err_name(rc),
             rc == WRONG ? x->why : "", msg);
      if (!ok)
        printf("     wanted %s with \"%s\"\n", dlock_err_name(r->want),
               r->msg ? r->msg : "");
    }
    if (!ok)
      failed++;
  }
  return failed;
}

#define RUN_ROWS(x, group, rows)                                               \
  run_rows(x, group, rows, sizeof(rows) / sizeof(rows)[0])

/* A group ends: in markdown mode failures are shown, not fatal. */
static void group_done(const char *group, int failed) {
  if (g_markdown)
    return;
  CHECKF(failed == 0, "%s: %d row(s) failed (see above)", group, failed);
}

/* --------------------------------------------------------------- setup */

static dlock_client_t *client_for(const char *url) {
  dlock_options_t *o = NULL;
  CHECK_OK(dlock_options_new(&o));
  CHECK_OK(dlock_options_set_connect_timeout(o, 2000));
  CHECK_OK(dlock_options_set_command_timeout(o, 2000));
  dlock_client_t *c = NULL;
  CHECK_OK(dlock_client_new(&c, url, o));
  dlock_options_free(o);
  return c;
}

static void setup(tctx_t *x, const char *const *conf) {
  memset(x, 0, sizeof *x);
  x->s = th_server_start(conf);
  CHECK(x->s);
  x->c = client_for(x->s->url);
  x->l = it_lock(x->c, "bt");
  CHECK_OK(dlock_options_new(&x->o));
}

static void teardown(tctx_t *x) {
  dlock_options_free(x->o);
  dlock_lock_free(x->l);
  dlock_client_free(x->c);
  th_server_stop(x->s);
}

/* ------------------------------------------------------------- thunks */

#define THUNK(name, expr)                                                      \
  static int name(tctx_t *x) {                                                 \
    (void)x;                                                                   \
    return (expr);                                                             \
  }

/* options */
THUNK(t_opts_new_null, dlock_options_new(NULL))
THUNK(t_connect_null, dlock_options_set_connect_timeout(NULL, 1000))
THUNK(t_command_null, dlock_options_set_command_timeout(NULL, 1000))
THUNK(t_watchdog_null, dlock_options_set_watchdog_timeout(NULL, 1000))
THUNK(t_session_null, dlock_options_set_session_timeout(NULL, 1000))
THUNK(t_client_name_null_opts, dlock_options_set_client_name(NULL, "n"))
THUNK(t_credentials_null_opts, dlock_options_set_credentials(NULL, "u", "p"))
THUNK(t_pool_null, dlock_options_set_pool_size(NULL, 2))
THUNK(t_lost_null, dlock_options_set_lost_callback(NULL, it_lost_cb, NULL))
THUNK(t_log_null,
      dlock_options_set_log_callback(NULL, NULL, NULL, DLOCK_LOG_WARN))
THUNK(t_client_name_null, dlock_options_set_client_name(x->o, NULL))
THUNK(t_credentials_nulls, dlock_options_set_credentials(x->o, NULL, NULL))
THUNK(t_credentials_no_user, dlock_options_set_credentials(x->o, NULL, "pw"))
THUNK(t_lost_fn_null, dlock_options_set_lost_callback(x->o, NULL, NULL))
THUNK(t_log_fn_null,
      dlock_options_set_log_callback(x->o, NULL, NULL, DLOCK_LOG_DEBUG))
THUNK(t_connect_ms, dlock_options_set_connect_timeout(x->o, x->num))
THUNK(t_command_ms, dlock_options_set_command_timeout(x->o, x->num))
THUNK(t_watchdog_ms, dlock_options_set_watchdog_timeout(x->o, x->num))
THUNK(t_session_ms, dlock_options_set_session_timeout(x->o, x->num))
THUNK(t_fair_wait_ms, dlock_options_set_fair_thread_wait(x->o, x->num))
THUNK(t_pool_n, dlock_options_set_pool_size(x->o, (int)x->num))
THUNK(t_log_level, dlock_options_set_log_callback(x->o, NULL, NULL,
                                                  (dlock_log_level_t)x->num))
THUNK(t_client_name, dlock_options_set_client_name(x->o, x->arg))
THUNK(t_holder_info_null_opts, dlock_options_set_holder_info(NULL, "i"))
THUNK(t_holder_info, dlock_options_set_holder_info(x->o, x->arg))
THUNK(t_layout_null_opts, dlock_options_set_layout(NULL, "spring"))
THUNK(t_layout, dlock_options_set_layout(x->o, x->arg))
THUNK(t_spring_registry, dlock_options_set_spring_registry(x->o, x->arg))
THUNK(t_credentials_user, dlock_options_set_credentials(x->o, x->arg, "pw"))
THUNK(t_credentials_pw, dlock_options_set_credentials(x->o, NULL, x->arg))
THUNK(t_credentials_user_only,
      dlock_options_set_credentials(x->o, x->arg, NULL))

THUNK(t_sentinel_creds_null_opts,
      dlock_options_set_sentinel_credentials(NULL, "u", "p"))
THUNK(t_sentinel_creds_nulls,
      dlock_options_set_sentinel_credentials(x->o, NULL, NULL))
THUNK(t_sentinel_creds_user_only,
      dlock_options_set_sentinel_credentials(x->o, x->arg, NULL))
THUNK(t_sentinel_creds_empty,
      dlock_options_set_sentinel_credentials(x->o, NULL, x->arg))

THUNK(t_replica_wait_null, dlock_options_set_replica_wait(NULL, 1000))
THUNK(t_replica_wait_ms, dlock_options_set_replica_wait(x->o, x->num))
THUNK(t_tls_null, dlock_options_set_tls(NULL, true))
THUNK(t_tls_ca_null_opts, dlock_options_set_tls_ca(NULL, "/ca.pem", NULL))
THUNK(t_tls_cert_null_opts,
      dlock_options_set_tls_cert(NULL, "/c.pem", "/k.pem"))
THUNK(t_tls_sni_null_opts, dlock_options_set_tls_sni(NULL, "redis.example"))
THUNK(t_tls_insecure_null, dlock_options_set_tls_insecure(NULL, true))
THUNK(t_tls_ca_nulls, dlock_options_set_tls_ca(x->o, NULL, NULL))
THUNK(t_tls_cert_nulls, dlock_options_set_tls_cert(x->o, NULL, NULL))
THUNK(t_tls_sni_null, dlock_options_set_tls_sni(x->o, NULL))
THUNK(t_tls_ca_file, dlock_options_set_tls_ca(x->o, x->arg, NULL))
THUNK(t_tls_ca_dir, dlock_options_set_tls_ca(x->o, NULL, x->arg))
THUNK(t_tls_cert_only, dlock_options_set_tls_cert(x->o, x->arg, NULL))
THUNK(t_tls_key_only, dlock_options_set_tls_cert(x->o, NULL, x->arg))
THUNK(t_tls_cert_file, dlock_options_set_tls_cert(x->o, x->arg, "/k.pem"))
THUNK(t_tls_sni, dlock_options_set_tls_sni(x->o, x->arg))

static int t_tls_ca_long(tctx_t *x) {
  static char path[4098];
  memset(path, 'p', sizeof path);
  path[0] = '/';
  path[x->num] = '\0';
  return dlock_options_set_tls_ca(x->o, path, NULL);
}

static int t_tls_sni_long(tctx_t *x) {
  char name[300];
  memset(name, 'n', sizeof name);
  name[x->num] = '\0';
  return dlock_options_set_tls_sni(x->o, name);
}

/* dlock_client_new over TLS with the CA file x->arg: the file is read
 * when the client is created, before anything is dialled */
static int t_client_new_tls_ca(tctx_t *x) {
  dlock_options_t *o = NULL;
  int rc = dlock_options_new(&o);
  if (!rc)
    rc = dlock_options_set_tls_ca(o, x->arg, NULL);
  if (rc) {
    dlock_options_free(o);
    return wrong(x, "options refused");
  }
  dlock_client_t *c = (dlock_client_t *)x; /* must become NULL */
  rc = dlock_client_new(&c, "rediss://127.0.0.1:1", o);
  dlock_options_free(o);
  if (rc == 0) {
    dlock_client_free(c);
    return 0;
  }
  return c == NULL ? rc : wrong(x, "*out not NULL after a failure");
}

static int t_options_free_null(tctx_t *x) {
  (void)x;
  dlock_options_free(NULL);
  return 0;
}

static int t_holder_info_long(tctx_t *x) {
  char info[600];
  memset(info, 'i', sizeof info);
  info[x->num] = '\0';
  return dlock_options_set_holder_info(x->o, info);
}

static int t_client_name_long(tctx_t *x) {
  char name[300];
  memset(name, 'n', sizeof name);
  name[x->num] = '\0';
  return dlock_options_set_client_name(x->o, name);
}

/* client */
static int t_client_new_null_out(tctx_t *x) {
  return dlock_client_new(NULL, x->s->url, NULL);
}

static int t_client_new_url(tctx_t *x) {
  dlock_client_t *c = (dlock_client_t *)x; /* must become NULL */
  const char *url = x->arg ? x->arg : x->url;
  int rc = dlock_client_new(&c, url, NULL);
  if (rc == 0) {
    dlock_client_free(c);
    return 0;
  }
  return c == NULL ? rc : wrong(x, "*out not NULL after a failure");
}

static int t_client_new_null_url(tctx_t *x) {
  x->arg = NULL;
  dlock_client_t *c = (dlock_client_t *)x;
  int rc = dlock_client_new(&c, NULL, NULL);
  return c == NULL ? rc : wrong(x, "*out not NULL after a failure");
}

static int t_client_new_long_url(tctx_t *x) {
  char *url = malloc(5000);
  CHECK(url);
  snprintf(url, 5000, "redis://127.0.0.1:%d/0?db=0", x->s->port);
  size_t n = strlen(url);
  memset(url + n, '&', 4100 - n);
  url[4100] = '\0';
  dlock_client_t *c = (dlock_client_t *)x;
  int rc = dlock_client_new(&c, url, NULL);
  free(url);
  if (rc == 0)
    dlock_client_free(c);
  return rc != 0 && c != NULL ? wrong(x, "*out not NULL after a failure") : rc;
}

static int t_client_new_long_socket(tctx_t *x) {
  char url[300] = "unix:///";
  memset(url + 8, 's', 200);
  url[208] = '\0';
  dlock_client_t *c = (dlock_client_t *)x;
  int rc = dlock_client_new(&c, url, NULL);
  return rc != 0 && c != NULL ? wrong(x, "*out not NULL after a failure") : rc;
}

static int t_client_free_null(tctx_t *x) {
  (void)x;
  dlock_client_free(NULL);
  return 0;
}

static int t_client_id_null(tctx_t *x) {
  const char *id = dlock_client_id(NULL);
  return id && id[0] == '\0' ? 0 : wrong(x, "not \"\"");
}

THUNK(t_ping_null, dlock_client_ping(NULL))
THUNK(t_ping, dlock_client_ping(x->c))
THUNK(t_client_session_null, dlock_client_session_timeout(NULL, NULL))
static int t_client_session_null_ms(tctx_t *x) {
  return dlock_client_session_timeout(x->c, NULL);
}
/* Redis has no session: DLOCK_ENOTSUP, and *ms is 0, not left as it was */
static int t_client_session_redis(tctx_t *x) {
  int64_t ms = 12345;
  int rc = dlock_client_session_timeout(x->c, &ms);
  if (ms != 0)
    return wrong(x, "*ms is %lld, not 0", (long long)ms);
  return rc;
}

/* lock handles */
static int t_lock_new_null_client(tctx_t *x) {
  dlock_lock_t *l = (dlock_lock_t *)x;
  int rc = dlock_lock_new(NULL, "bt", &l);
  return l == NULL ? rc : wrong(x, "*out not NULL after a failure");
}

static int t_lock_new_null_name(tctx_t *x) {
  dlock_lock_t *l = (dlock_lock_t *)x;
  int rc = dlock_lock_new(x->c, NULL, &l);
  return l == NULL ? rc : wrong(x, "*out not NULL after a failure");
}

THUNK(t_lock_new_null_out, dlock_lock_new(x->c, "bt", NULL))

static int t_lock_new_kind(tctx_t *x) {
  dlock_lock_t *l = (dlock_lock_t *)x;
  int rc = dlock_lock_new_kind(x->c, "bt", (dlock_lock_kind_t)x->num, &l);
  if (rc)
    return l == NULL ? rc : wrong(x, "*out not NULL after a failure");
  rc = dlock_lock_kind(l) == (dlock_lock_kind_t)x->num ? 0 : wrong(x, "kind");
  dlock_lock_free(l);
  return rc;
}

static int t_lock_kind_null(tctx_t *x) {
  return dlock_lock_kind(NULL) == DLOCK_REENTRANT ? 0 : wrong(x, "kind");
}

static int64_t g_token;
THUNK(t_fenced_null, dlock_lock_acquire_fenced(NULL, 0, DLOCK_LEASE_WATCHDOG,
                                               &g_token))
THUNK(t_fenced_null_token,
      dlock_lock_acquire_fenced(x->l, 0, DLOCK_LEASE_WATCHDOG, NULL))
THUNK(t_fenced_wrong_kind,
      dlock_lock_acquire_fenced(x->l, 0, DLOCK_LEASE_WATCHDOG, &g_token))
THUNK(t_fenced_as_tid0, dlock_lock_acquire_fenced_as(
                            x->l, 0, 0, DLOCK_LEASE_WATCHDOG, &g_token))

static int t_lock_free_null(tctx_t *x) {
  (void)x;
  dlock_lock_free(NULL);
  return 0;
}

static int t_lock_name_null(tctx_t *x) {
  const char *n = dlock_lock_name(NULL);
  return n && n[0] == '\0' ? 0 : wrong(x, "not \"\"");
}

static int t_state_free_null(tctx_t *x) {
  (void)x;
  dlock_lock_state_free(NULL);
  return 0;
}

static bool g_b;
static int64_t g_v;

THUNK(t_acquire_null, dlock_lock_acquire(NULL, 0, WD))
THUNK(t_release_null, dlock_lock_release(NULL))
THUNK(t_acquire_as_null, dlock_lock_acquire_as(NULL, 5, 0, WD))
THUNK(t_release_as_null, dlock_lock_release_as(NULL, 5))
THUNK(t_force_null, dlock_lock_force_release(NULL, &g_b))
THUNK(t_force_null_out, dlock_lock_force_release(x->l, NULL))
THUNK(t_locked_null, dlock_lock_is_locked(NULL, &g_b))
THUNK(t_locked_null_out, dlock_lock_is_locked(x->l, NULL))
THUNK(t_held_null, dlock_lock_is_held_by_thread(NULL, &g_b))
THUNK(t_held_null_out, dlock_lock_is_held_by_thread(x->l, NULL))
THUNK(t_count_null, dlock_lock_hold_count(NULL, &g_v))
THUNK(t_count_null_out, dlock_lock_hold_count(x->l, NULL))
THUNK(t_remaining_null, dlock_lock_remaining_lease(NULL, &g_v))
THUNK(t_remaining_null_out, dlock_lock_remaining_lease(x->l, NULL))
THUNK(t_valid_null, dlock_lock_hold_valid(NULL, 1, &g_v))
THUNK(t_valid_null_out, dlock_lock_hold_valid(x->l, 1, NULL))
THUNK(t_valid_not_held, dlock_lock_hold_valid(x->l, 987654321, &g_v))

static int t_state_null(tctx_t *x) {
  (void)x;
  dlock_lock_state_t *st = (dlock_lock_state_t *)x;
  int rc = dlock_lock_state(NULL, &st);
  return st == NULL ? rc : wrong(x, "*out not NULL after a failure");
}

THUNK(t_state_null_out, dlock_lock_state(x->l, NULL))

static int t_hold_env_null(tctx_t *x) {
  char **env = (char **)x;
  int rc = dlock_lock_hold_env(NULL, 1, &env);
  return env == NULL ? rc : wrong(x, "*out not NULL after a failure");
}

THUNK(t_hold_env_null_out, dlock_lock_hold_env(x->l, 1, NULL))

static int t_hold_env_tid0(tctx_t *x) {
  char **env = (char **)x;
  int rc = dlock_lock_hold_env(x->l, 0, &env);
  return env == NULL ? rc : wrong(x, "*out not NULL after a failure");
}

static int t_hold_env_none(tctx_t *x) {
  /* Redis has no lock tool's variables: none, even for a hold */
  char **env = (char **)x;
  int rc = dlock_lock_acquire(x->l, 0, WD);
  if (rc == 0)
    rc = dlock_lock_hold_env(x->l, dlock_thread_id(), &env);
  if (rc == 0 && env != NULL)
    rc = wrong(x, "variables from the Redis backend");
  dlock_lock_release(x->l);
  return rc;
}

static int t_env_free_null(tctx_t *x) {
  (void)x;
  dlock_env_free(NULL);
  return 0;
}

/* calls on the row's lock */
THUNK(t_acquire, dlock_lock_acquire(x->l, 0, WD))
THUNK(t_acquire_wait_ms, dlock_lock_acquire(x->l, x->num, WD))
THUNK(t_acquire_lease_ms, dlock_lock_acquire(x->l, 0, x->num))
THUNK(t_acquire_as_wait_ms, dlock_lock_acquire_as(x->l, 5, x->num, WD))
THUNK(t_acquire_as_lease_ms, dlock_lock_acquire_as(x->l, 5, 0, x->num))
THUNK(t_acquire_as_tid, dlock_lock_acquire_as(x->l, (uint64_t)x->num, 0, WD))
THUNK(t_acquire_as, dlock_lock_acquire_as(x->l, 77, 0, WD))
THUNK(t_release, dlock_lock_release(x->l))
THUNK(t_release_as_tid, dlock_lock_release_as(x->l, (uint64_t)x->num))
THUNK(t_release_as, dlock_lock_release_as(x->l, 77))
THUNK(t_force, dlock_lock_force_release(x->l, &g_b))
THUNK(t_locked, dlock_lock_is_locked(x->l, &g_b))
THUNK(t_held, dlock_lock_is_held_by_thread(x->l, &g_b))
THUNK(t_count, dlock_lock_hold_count(x->l, &g_v))
THUNK(t_remaining, dlock_lock_remaining_lease(x->l, &g_v))

static int t_state(tctx_t *x) {
  dlock_lock_state_t *st = (dlock_lock_state_t *)x;
  int rc = dlock_lock_state(x->l, &st);
  if (rc == 0) {
    dlock_lock_state_free(st);
    return 0;
  }
  return st == NULL ? rc : wrong(x, "*out not NULL after a failure");
}

/* A wait on a lock held elsewhere must not hide a backend error behind
 * its deadline (num = wait ms). */
static int t_acquire_wait_fast(tctx_t *x) {
  int64_t t0 = th_now_ms();
  int rc = dlock_lock_acquire(x->l, x->num, WD);
  int64_t took = th_now_ms() - t0;
  if (rc != 0 && rc != DLOCK_ETIMEDOUT && took >= x->num)
    return wrong(x, "%s only after %lld ms (the wait hid it)",
                 dlock_err_name(rc), (long long)took);
  return rc;
}

/* A full-length lease is written as asked. */
static int t_acquire_max_lease(tctx_t *x) {
  int rc = dlock_lock_acquire(x->l, 0, DLOCK_LEASE_MAX);
  if (rc)
    return rc;
  int64_t pttl = th_redis_int(x->s, "PTTL %s", dlock_lock_name(x->l));
  int rel = dlock_lock_release(x->l);
  if (pttl < DLOCK_LEASE_MAX - 60000 || pttl > DLOCK_LEASE_MAX)
    return wrong(x, "PTTL %lld, not about DLOCK_LEASE_MAX", (long long)pttl);
  return rel;
}

/* wait INT64_MAX on a free lock: acquired at once */
static int t_acquire_wait_max(tctx_t *x) {
  int rc = dlock_lock_acquire(x->l, INT64_MAX, WD);
  if (rc)
    return rc;
  return dlock_lock_release(x->l);
}

/* A name: the handle, a hold, the server's key byte for byte, the
 * queries, the state, the release, and nothing left behind. */
static int t_name_round_trip(tctx_t *x) {
  const char *name = x->arg;
  size_t len = strlen(name);
  dlock_lock_t *l = NULL;
  int rc = dlock_lock_new(x->c, name, &l);
  if (rc)
    return rc;
  if (strcmp(dlock_lock_name(l), name) != 0) {
    dlock_lock_free(l);
    return wrong(x, "dlock_lock_name() differs");
  }
  if ((rc = dlock_lock_acquire(l, 0, 10000)) != 0) {
    dlock_lock_free(l);
    return rc;
  }
  redisReply *r = th_redis_cmd(x->s, "TYPE %b", name, len);
  bool hash = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "hash") == 0;
  if (r)
    freeReplyObject(r);
  bool locked = false;
  int64_t count = 0;
  dlock_lock_state_t *st = NULL;
  int q = dlock_lock_is_locked(l, &locked);
  if (!q)
    q = dlock_lock_hold_count(l, &count);
  if (!q)
    q = dlock_lock_state(l, &st);
  bool st_ok = st && strcmp(st->name, name) == 0 && st->nholders == 1 &&
               st->holders[0].count == 1;
  dlock_lock_state_free(st);
  rc = dlock_lock_release(l);
  dlock_lock_free(l);
  if (q)
    return q;
  if (rc)
    return rc;
  if (!hash)
    return wrong(x, "no hash under the exact name");
  if (!locked || count != 1 || !st_ok)
    return wrong(x, "queries disagree (locked %d, count %lld, state %d)",
                 locked, (long long)count, st_ok);
  if (it_lock_keys(x->s) != 0)
    return wrong(x, "keys left behind");
  return 0;
}

static int t_name_long(tctx_t *x) {
  char *name = malloc((size_t)x->num + 1);
  CHECK(name);
  memset(name, 'n', (size_t)x->num);
  name[x->num] = '\0';
  x->arg = name;
  int rc = t_name_round_trip(x);
  free(name);
  return rc;
}

static int t_name_new(tctx_t *x) {
  dlock_lock_t *l = (dlock_lock_t *)x;
  const char *name = x->arg;
  char *big = NULL;
  if (!name) {
    big = malloc((size_t)x->num + 1);
    CHECK(big);
    memset(big, 'n', (size_t)x->num);
    big[x->num] = '\0';
    name = big;
  }
  int rc = dlock_lock_new(x->c, name, &l);
  free(big);
  if (rc == 0) {
    dlock_lock_free(l);
    return 0;
  }
  return l == NULL ? rc : wrong(x, "*out not NULL after a failure");
}

/* error table */
static int t_strerror(tctx_t *x) {
  const char *m = dlock_strerror((int)x->num);
  return m && strcmp(m, x->arg) == 0 ? 0 : wrong(x, "\"%s\"", m ? m : "NULL");
}

static int t_err_name(tctx_t *x) {
  const char *m = dlock_err_name((int)x->num);
  return m && strcmp(m, x->arg) == 0 ? 0 : wrong(x, "\"%s\"", m ? m : "NULL");
}

static int t_every_code(tctx_t *x) {
  for (int code = -20; code <= 0; code++) {
    const char *m = dlock_strerror(code), *n = dlock_err_name(code);
    if (!m || !n || !m[0] || strcmp(m, "unknown error") == 0 ||
        strncmp(n, "DLOCK_", 6) != 0 || strcmp(n, "DLOCK_E?") == 0)
      return wrong(x, "code %d has no message or name", code);
  }
  return 0;
}

static int t_version(tctx_t *x) {
  char want[32];
  snprintf(want, sizeof want, "%d.%d.%d", DLOCK_VERSION_MAJOR,
           DLOCK_VERSION_MINOR, DLOCK_VERSION_PATCH);
  if (dlock_version() != DLOCK_VERSION_HEX ||
      strcmp(dlock_version_string(), want) != 0)
    return wrong(x, "version %x \"%s\"", dlock_version(),
                 dlock_version_string());
  return 0;
}

static int t_backends(tctx_t *x) {
  const char *b = dlock_backends();
  if (!b || strncmp(b, "redis", 5) != 0 || b != dlock_backends())
    return wrong(x, "backends \"%s\"", b ? b : "(null)");
  return 0;
}

static int t_thread_id(tctx_t *x) {
  return dlock_thread_id() != 0 ? 0 : wrong(x, "thread id 0");
}

static int t_last_error(tctx_t *x) {
  return dlock_last_error() != NULL ? 0 : wrong(x, "NULL");
}

/* forged handles: memory that is not a handle */
static uint64_t g_junk[128];

static int t_forged(tctx_t *x) {
  /* num: 0 = zeroed memory, 1 = the library's dead magic */
  memset(g_junk, 0, sizeof g_junk);
  if (x->num == 1)
    g_junk[0] = 0xdeadd10cu;
  dlock_lock_t *l = (dlock_lock_t *)g_junk;
  dlock_client_t *c = (dlock_client_t *)g_junk;
  int rc = dlock_lock_acquire(l, 0, WD);
  if (rc != DLOCK_EBADHANDLE)
    return rc;
  const int calls[] = {
      dlock_lock_release(l),          dlock_lock_acquire_as(l, 5, 0, WD),
      dlock_lock_release_as(l, 5),    dlock_lock_force_release(l, &g_b),
      dlock_lock_is_locked(l, &g_b),  dlock_lock_is_held_by_thread(l, &g_b),
      dlock_lock_hold_count(l, &g_v), dlock_lock_remaining_lease(l, &g_v),
      dlock_client_ping(c),
  };
  for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++)
    if (calls[i] != DLOCK_EBADHANDLE)
      return wrong(x, "call %zu gave %s", i, dlock_err_name(calls[i]));
  dlock_lock_state_t *st = (dlock_lock_state_t *)x;
  if (dlock_lock_state(l, &st) != DLOCK_EBADHANDLE || st != NULL)
    return wrong(x, "dlock_lock_state");
  dlock_lock_t *nl = (dlock_lock_t *)x;
  if (dlock_lock_new(c, "bt", &nl) != DLOCK_EBADHANDLE || nl != NULL)
    return wrong(x, "dlock_lock_new");
  if (strcmp(dlock_lock_name(l), "") != 0 ||
      strcmp(dlock_client_id(c), "") != 0)
    return wrong(x, "name or id not \"\"");
  dlock_lock_free(l);   /* ignored */
  dlock_client_free(c); /* ignored */
  for (size_t i = 0; i < sizeof g_junk / sizeof g_junk[0]; i++)
    if (g_junk[i] != (i == 0 && x->num == 1 ? 0xdeadd10cu : 0))
      return wrong(x, "the library wrote into memory that is not a handle");
  /* leaves the "not live" message of the last call */
  return dlock_lock_acquire(l, 0, WD);
}

/* use after free (gated, see the design note) */
static int t_freed_lock(tctx_t *x) {
  dlock_lock_t *l = it_lock(x->c, "bt-freed");
  dlock_lock_free(l);
  int rc = dlock_lock_acquire(l, 0, WD);
  int rc2 = dlock_lock_release(l);
  int rc3 = dlock_lock_is_locked(l, &g_b);
  const char *name = dlock_lock_name(l);
  dlock_lock_free(l); /* a second free is ignored */
  if (rc2 != DLOCK_EBADHANDLE || rc3 != DLOCK_EBADHANDLE ||
      strcmp(name, "") != 0)
    return wrong(x, "release %s, is_locked %s", dlock_err_name(rc2),
                 dlock_err_name(rc3));
  return rc == DLOCK_EBADHANDLE ? dlock_lock_acquire(l, 0, WD) : rc;
}

static int t_freed_client(tctx_t *x) {
  dlock_client_t *c = client_for(x->s->url);
  dlock_lock_t *l = it_lock(c, "bt-orphan");
  dlock_client_free(c); /* frees l too, as documented */
  int rc_lock = dlock_lock_acquire(l, 0, WD);
  dlock_lock_t *nl = (dlock_lock_t *)x;
  int rc_new = dlock_lock_new(c, "bt", &nl);
  const char *id = dlock_client_id(c);
  dlock_client_free(c); /* ignored */
  if (rc_lock != DLOCK_EBADHANDLE || rc_new != DLOCK_EBADHANDLE || nl != NULL ||
      strcmp(id, "") != 0)
    return wrong(x, "lock %s, lock_new %s", dlock_err_name(rc_lock),
                 dlock_err_name(rc_new));
  return dlock_client_ping(c);
}

/* server-side actions */
static int t_redis(tctx_t *x) {
  redisReply *r = th_redis_cmd(x->s, x->arg);
  bool ok = r && r->type != REDIS_REPLY_ERROR;
  if (r)
    freeReplyObject(r);
  return ok ? 0 : wrong(x, "%s failed", x->arg);
}

/* A holder (not us) of the row lock, for waits: 30 s. */
static int t_hold_elsewhere(tctx_t *x) {
  const char *n = dlock_lock_name(x->l);
  if (th_redis_int(x->s, "HSET %s %s 1", n, "someone:1") != 1 ||
      th_redis_int(x->s, "PEXPIRE %s 30000", n) != 1)
    return wrong(x, "could not plant a holder");
  return 0;
}

static int t_client_as_dlk(tctx_t *x) {
  snprintf(x->url, sizeof x->url, "redis://dlk:dlk-pw@127.0.0.1:%d",
           x->s->port);
  dlock_lock_free(x->l);
  dlock_client_free(x->c);
  x->c = client_for(x->url);
  x->l = it_lock(x->c, "bt");
  return 0;
}

/* ---------------------------------------------------------- row groups */

static void g_null_args(void) {
  tctx_t x;
  setup(&x, NULL);
  static const row_t rows[] = {
      ROW("dlock_options_new", "out NULL", t_opts_new_null, NULL, 0,
          DLOCK_EINVAL, "out is NULL"),
      ROW("dlock_options_free", "NULL (accepted)", t_options_free_null, NULL, 0,
          DLOCK_OK, NULL),
      ROW("dlock_options_set_connect_timeout", "opts NULL", t_connect_null,
          NULL, 0, DLOCK_EINVAL, "opts is NULL"),
      ROW("dlock_options_set_command_timeout", "opts NULL", t_command_null,
          NULL, 0, DLOCK_EINVAL, "opts is NULL"),
      ROW("dlock_options_set_watchdog_timeout", "opts NULL", t_watchdog_null,
          NULL, 0, DLOCK_EINVAL, "opts is NULL"),
      ROW("dlock_options_set_session_timeout", "opts NULL", t_session_null,
          NULL, 0, DLOCK_EINVAL, "opts is NULL"),
      ROW("dlock_options_set_client_name", "opts NULL", t_client_name_null_opts,
          NULL, 0, DLOCK_EINVAL, "opts is NULL"),
      ROW("dlock_options_set_client_name", "name NULL (clears)",
          t_client_name_null, NULL, 0, DLOCK_OK, NULL),
      ROW("dlock_options_set_credentials", "opts NULL", t_credentials_null_opts,
          NULL, 0, DLOCK_EINVAL, "opts is NULL"),
      ROW("dlock_options_set_credentials", "user and password NULL",
          t_credentials_nulls, NULL, 0, DLOCK_OK, NULL),
      ROW("dlock_options_set_credentials", "user NULL, password set",
          t_credentials_no_user, NULL, 0, DLOCK_OK, NULL),
      ROW("dlock_options_set_credentials", "user set, password NULL",
          t_credentials_user_only, "alice", 0, DLOCK_EINVAL,
          "a user needs a password"),
      ROW("dlock_options_set_sentinel_credentials", "opts NULL",
          t_sentinel_creds_null_opts, NULL, 0, DLOCK_EINVAL, "opts is NULL"),
      ROW("dlock_options_set_sentinel_credentials",
          "user and password NULL (no AUTH)", t_sentinel_creds_nulls, NULL, 0,
          DLOCK_OK, NULL),
      ROW("dlock_options_set_sentinel_credentials", "user set, password NULL",
          t_sentinel_creds_user_only, "alice", 0, DLOCK_EINVAL,
          "a user needs a password"),
      ROW("dlock_options_set_sentinel_credentials", "password \"\"",
          t_sentinel_creds_empty, "", 0, DLOCK_EINVAL, "non-empty"),
      ROW("dlock_options_set_pool_size", "opts NULL", t_pool_null, NULL, 0,
          DLOCK_EINVAL, "opts is NULL"),
      ROW("dlock_options_set_lost_callback", "opts NULL", t_lost_null, NULL, 0,
          DLOCK_EINVAL, "opts is NULL"),
      ROW("dlock_options_set_lost_callback", "fn NULL (clears)", t_lost_fn_null,
          NULL, 0, DLOCK_OK, NULL),
      ROW("dlock_options_set_log_callback", "opts NULL", t_log_null, NULL, 0,
          DLOCK_EINVAL, "opts is NULL"),
      ROW("dlock_options_set_log_callback", "fn NULL (clears)", t_log_fn_null,
          NULL, 0, DLOCK_OK, NULL),
      ROW("dlock_options_set_replica_wait", "opts NULL", t_replica_wait_null,
          NULL, 0, DLOCK_EINVAL, "opts is NULL"),
      ROW("dlock_options_set_tls", "opts NULL", t_tls_null, NULL, 0,
          DLOCK_EINVAL, "opts is NULL"),
      ROW("dlock_options_set_tls_ca", "opts NULL", t_tls_ca_null_opts, NULL, 0,
          DLOCK_EINVAL, "opts is NULL"),
      ROW("dlock_options_set_tls_ca", "file and dir NULL (system store)",
          t_tls_ca_nulls, NULL, 0, DLOCK_OK, NULL),
      ROW("dlock_options_set_tls_cert", "opts NULL", t_tls_cert_null_opts, NULL,
          0, DLOCK_EINVAL, "opts is NULL"),
      ROW("dlock_options_set_tls_cert", "cert and key NULL (none)",
          t_tls_cert_nulls, NULL, 0, DLOCK_OK, NULL),
      ROW("dlock_options_set_tls_cert", "key NULL", t_tls_cert_only, "/c.pem",
          0, DLOCK_EINVAL, "give both or neither"),
      ROW("dlock_options_set_tls_cert", "cert NULL", t_tls_key_only, "/k.pem",
          0, DLOCK_EINVAL, "give both or neither"),
      ROW("dlock_options_set_tls_sni", "opts NULL", t_tls_sni_null_opts, NULL,
          0, DLOCK_EINVAL, "opts is NULL"),
      ROW("dlock_options_set_tls_sni", "name NULL (the URL's host)",
          t_tls_sni_null, NULL, 0, DLOCK_OK, NULL),
      ROW("dlock_options_set_tls_insecure", "opts NULL", t_tls_insecure_null,
          NULL, 0, DLOCK_EINVAL, "opts is NULL"),
      ROW("dlock_client_new", "out NULL", t_client_new_null_out, NULL, 0,
          DLOCK_EINVAL, "out is NULL"),
      ROW("dlock_client_new", "url NULL", t_client_new_null_url, NULL, 0,
          DLOCK_EINVAL, "url is NULL"),
      ROW("dlock_client_free", "NULL (accepted)", t_client_free_null, NULL, 0,
          DLOCK_OK, NULL),
      ROW("dlock_client_id", "NULL: \"\"", t_client_id_null, NULL, 0, DLOCK_OK,
          NULL),
      ROW("dlock_client_ping", "client NULL", t_ping_null, NULL, 0,
          DLOCK_EINVAL, "client is NULL"),
      ROW("dlock_client_session_timeout", "client NULL", t_client_session_null,
          NULL, 0, DLOCK_EINVAL, "client is NULL"),
      ROW("dlock_client_session_timeout", "ms NULL", t_client_session_null_ms,
          NULL, 0, DLOCK_EINVAL, "ms is NULL"),
      ROW("dlock_client_session_timeout", "Redis (no session)",
          t_client_session_redis, NULL, 0, DLOCK_ENOTSUP, "does not support"),
      ROW("dlock_lock_new", "client NULL", t_lock_new_null_client, NULL, 0,
          DLOCK_EINVAL, "client is NULL"),
      ROW("dlock_lock_new", "name NULL", t_lock_new_null_name, NULL, 0,
          DLOCK_EINVAL, "name is NULL"),
      ROW("dlock_lock_new", "out NULL", t_lock_new_null_out, NULL, 0,
          DLOCK_EINVAL, "out is NULL"),
      ROW("dlock_lock_new_kind", "kind 99", t_lock_new_kind, NULL, 99,
          DLOCK_EINVAL, "unknown lock kind 99"),
      ROW("dlock_lock_new_kind", "kind -1", t_lock_new_kind, NULL, -1,
          DLOCK_EINVAL, "unknown lock kind -1"),
      ROW("dlock_lock_new_kind", "DLOCK_WRITE", t_lock_new_kind, NULL,
          DLOCK_WRITE, DLOCK_OK, NULL),
      ROW("dlock_lock_kind", "NULL: DLOCK_REENTRANT", t_lock_kind_null, NULL, 0,
          DLOCK_OK, NULL),
      ROW("dlock_lock_acquire_fenced", "lock NULL", t_fenced_null, NULL, 0,
          DLOCK_EINVAL, "lock is NULL"),
      ROW("dlock_lock_acquire_fenced", "token NULL", t_fenced_null_token, NULL,
          0, DLOCK_EINVAL, "token is NULL"),
      ROW("dlock_lock_acquire_fenced", "a reentrant lock", t_fenced_wrong_kind,
          NULL, 0, DLOCK_EINVAL, "is not a fenced lock"),
      ROW("dlock_lock_acquire_fenced_as",
          "thread id 0, reentrant lock (kind checked first)", t_fenced_as_tid0,
          NULL, 0, DLOCK_EINVAL, "not a fenced lock"),
      ROW("dlock_lock_free", "NULL (accepted)", t_lock_free_null, NULL, 0,
          DLOCK_OK, NULL),
      ROW("dlock_lock_name", "NULL: \"\"", t_lock_name_null, NULL, 0, DLOCK_OK,
          NULL),
      ROW("dlock_lock_acquire", "lock NULL", t_acquire_null, NULL, 0,
          DLOCK_EINVAL, "lock is NULL"),
      ROW("dlock_lock_release", "lock NULL", t_release_null, NULL, 0,
          DLOCK_EINVAL, "lock is NULL"),
      ROW("dlock_lock_acquire_as", "lock NULL", t_acquire_as_null, NULL, 0,
          DLOCK_EINVAL, "lock is NULL"),
      ROW("dlock_lock_release_as", "lock NULL", t_release_as_null, NULL, 0,
          DLOCK_EINVAL, "lock is NULL"),
      ROW("dlock_lock_force_release", "lock NULL", t_force_null, NULL, 0,
          DLOCK_EINVAL, "lock is NULL"),
      ROW("dlock_lock_force_release", "was_locked NULL (accepted)",
          t_force_null_out, NULL, 0, DLOCK_OK, NULL),
      ROW("dlock_lock_is_locked", "lock NULL", t_locked_null, NULL, 0,
          DLOCK_EINVAL, "lock is NULL"),
      ROW("dlock_lock_is_locked", "out NULL", t_locked_null_out, NULL, 0,
          DLOCK_EINVAL, "out is NULL"),
      ROW("dlock_lock_is_held_by_thread", "lock NULL", t_held_null, NULL, 0,
          DLOCK_EINVAL, "lock is NULL"),
      ROW("dlock_lock_is_held_by_thread", "out NULL", t_held_null_out, NULL, 0,
          DLOCK_EINVAL, "out is NULL"),
      ROW("dlock_lock_hold_count", "lock NULL", t_count_null, NULL, 0,
          DLOCK_EINVAL, "lock is NULL"),
      ROW("dlock_lock_hold_count", "out NULL", t_count_null_out, NULL, 0,
          DLOCK_EINVAL, "out is NULL"),
      ROW("dlock_lock_remaining_lease", "lock NULL", t_remaining_null, NULL, 0,
          DLOCK_EINVAL, "lock is NULL"),
      ROW("dlock_lock_remaining_lease", "out NULL", t_remaining_null_out, NULL,
          0, DLOCK_EINVAL, "out is NULL"),
      ROW("dlock_lock_hold_valid", "lock NULL", t_valid_null, NULL, 0,
          DLOCK_EINVAL, "lock is NULL"),
      ROW("dlock_lock_hold_valid", "valid_ms NULL", t_valid_null_out, NULL, 0,
          DLOCK_EINVAL, "valid_ms is NULL"),
      ROW("dlock_lock_hold_valid", "thread holds nothing", t_valid_not_held,
          NULL, 0, DLOCK_ENOTOWNER, "is not held by thread 987654321"),
      ROW("dlock_lock_state", "lock NULL", t_state_null, NULL, 0, DLOCK_EINVAL,
          "lock is NULL"),
      ROW("dlock_lock_state", "out NULL", t_state_null_out, NULL, 0,
          DLOCK_EINVAL, "out is NULL"),
      ROW("dlock_lock_state_free", "NULL (accepted)", t_state_free_null, NULL,
          0, DLOCK_OK, NULL),
      ROW("dlock_lock_hold_env", "lock NULL", t_hold_env_null, NULL, 0,
          DLOCK_EINVAL, "lock is NULL"),
      ROW("dlock_lock_hold_env", "out NULL", t_hold_env_null_out, NULL, 0,
          DLOCK_EINVAL, "out is NULL"),
      ROW("dlock_lock_hold_env", "thread id 0", t_hold_env_tid0, NULL, 0,
          DLOCK_EINVAL, "thread id 0"),
      ROW("dlock_lock_hold_env", "Redis: no variables", t_hold_env_none, NULL,
          0, DLOCK_OK, NULL),
      ROW("dlock_env_free", "NULL (accepted)", t_env_free_null, NULL, 0,
          DLOCK_OK, NULL),
  };
  int failed = RUN_ROWS(&x, "null_args", rows);
  /* none of it touched the server or broke the handle */
  CHECK_INT(it_lock_keys(x.s), ==, 0);
  CHECK_OK(dlock_lock_acquire(x.l, 0, WD));
  CHECK_OK(dlock_lock_release(x.l));
  teardown(&x);
  group_done("null_args", failed);
}

/* Semaphores, permit semaphores and latches: every function's NULL
 * handle, and each out-of-range number (test_semaphore.sem_badinput and
 * test_latch.latch_badinput go further). */
static dlock_semaphore_t *g_sem;
static dlock_permit_sem_t *g_psem;
static dlock_latch_t *g_latch;
static char g_id[DLOCK_PERMIT_ID_LEN + 1];

static int t_sem_new(tctx_t *x) {
  dlock_semaphore_t *s = (dlock_semaphore_t *)x;
  int rc = dlock_semaphore_new(x->num ? x->c : NULL, x->arg, &s);
  if (rc == 0)
    dlock_semaphore_free(s);
  return rc || !s ? rc : 0;
}
THUNK(t_sem_new_out, dlock_semaphore_new(x->c, "bt", NULL))
THUNK(t_sem_acquire_null, dlock_semaphore_acquire(NULL, 1, 0))
THUNK(t_sem_acquire_n, dlock_semaphore_acquire(g_sem, x->num, 0))
THUNK(t_sem_acquire_wait, dlock_semaphore_acquire(g_sem, 1, x->num))
THUNK(t_sem_release_null, dlock_semaphore_release(NULL, 1))
THUNK(t_sem_release_n, dlock_semaphore_release(g_sem, x->num))
THUNK(t_sem_set_null, dlock_semaphore_try_set_permits(NULL, 1, &g_b))
THUNK(t_sem_set_n, dlock_semaphore_try_set_permits(g_sem, x->num, &g_b))
THUNK(t_sem_add_null, dlock_semaphore_add_permits(NULL, 1))
THUNK(t_sem_avail_null, dlock_semaphore_available(NULL, &g_v))
THUNK(t_sem_avail_out, dlock_semaphore_available(g_sem, NULL))
THUNK(t_sem_delete_null, dlock_semaphore_delete(NULL, &g_b))
static int t_sem_name_null(tctx_t *x) {
  const char *n = dlock_semaphore_name(NULL);
  return n && n[0] == '\0' ? 0 : wrong(x, "not \"\"");
}
static int t_sem_free_null(tctx_t *x) {
  (void)x;
  dlock_semaphore_free(NULL);
  dlock_permit_sem_free(NULL);
  dlock_latch_free(NULL);
  dlock_sem_state_free(NULL);
  return 0;
}
THUNK(t_psem_new_out, dlock_permit_sem_new(x->c, "bt", NULL))
static int t_psem_new_client(tctx_t *x) {
  dlock_permit_sem_t *p = (dlock_permit_sem_t *)x;
  int rc = dlock_permit_sem_new(NULL, "bt", &p);
  return p == NULL ? rc : wrong(x, "*out not NULL after a failure");
}
THUNK(t_psem_acquire_null, dlock_permit_sem_acquire(NULL, 0, WD, g_id))
THUNK(t_psem_acquire_id, dlock_permit_sem_acquire(g_psem, 0, WD, NULL))
THUNK(t_psem_acquire_lease, dlock_permit_sem_acquire(g_psem, 0, x->num, g_id))
THUNK(t_psem_release_null,
      dlock_permit_sem_release(NULL, "0123456789abcdef0123456789abcdef"))
THUNK(t_psem_release_id, dlock_permit_sem_release(g_psem, x->arg))
THUNK(t_psem_state_null, dlock_permit_sem_state(g_psem, NULL))
THUNK(t_psem_delete_null, dlock_permit_sem_delete(NULL, &g_b))
THUNK(t_latch_new_out, dlock_latch_new(x->c, "bt", NULL))
static int t_latch_new_name(tctx_t *x) {
  dlock_latch_t *l = (dlock_latch_t *)x;
  int rc = dlock_latch_new(x->c, x->arg, &l);
  if (rc == 0)
    dlock_latch_free(l);
  return l == NULL || rc == 0 ? rc : wrong(x, "*out not NULL after a failure");
}
THUNK(t_latch_set_null, dlock_latch_try_set_count(NULL, 1, &g_b))
THUNK(t_latch_set_n, dlock_latch_try_set_count(g_latch, x->num, &g_b))
THUNK(t_latch_down_null, dlock_latch_count_down(NULL))
THUNK(t_latch_count_out, dlock_latch_count(g_latch, NULL))
THUNK(t_latch_await_null, dlock_latch_await(NULL, 0))
THUNK(t_latch_await_wait, dlock_latch_await(g_latch, x->num))
THUNK(t_latch_delete_null, dlock_latch_delete(NULL, &g_b))

static void g_sync_objects(void) {
  tctx_t x;
  setup(&x, NULL);
  CHECK_OK(dlock_semaphore_new(x.c, "bt-sem", &g_sem));
  CHECK_OK(dlock_permit_sem_new(x.c, "bt-psem", &g_psem));
  CHECK_OK(dlock_latch_new(x.c, "bt-latch", &g_latch));
  static const row_t rows[] = {
      ROW("dlock_semaphore_new", "client NULL", t_sem_new, "bt", 0,
          DLOCK_EINVAL, "client is NULL"),
      ROW("dlock_semaphore_new", "name NULL", t_sem_new, NULL, 1, DLOCK_EINVAL,
          "name is NULL"),
      ROW("dlock_semaphore_new", "name empty", t_sem_new, "", 1, DLOCK_EINVAL,
          "name is empty"),
      ROW("dlock_semaphore_new", "out NULL", t_sem_new_out, NULL, 0,
          DLOCK_EINVAL, "out is NULL"),
      ROW("dlock_semaphore_name/free, dlock_permit_sem_free, "
          "dlock_latch_free, dlock_sem_state_free",
          "NULL (accepted)", t_sem_free_null, NULL, 0, DLOCK_OK, NULL),
      ROW("dlock_semaphore_name", "NULL: \"\"", t_sem_name_null, NULL, 0,
          DLOCK_OK, NULL),
      ROW("dlock_semaphore_acquire", "semaphore NULL", t_sem_acquire_null,
          NULL, 0, DLOCK_EINVAL, "is NULL"),
      ROW("dlock_semaphore_acquire", "permits 0", t_sem_acquire_n, NULL, 0,
          DLOCK_EINVAL, "permits"),
      ROW("dlock_semaphore_acquire", "permits -1", t_sem_acquire_n, NULL, -1,
          DLOCK_EINVAL, "permits"),
      ROW("dlock_semaphore_acquire", "wait_ms -2", t_sem_acquire_wait, NULL,
          -2, DLOCK_EINVAL, "wait"),
      ROW("dlock_semaphore_acquire", "no such semaphore: no permits",
          t_sem_acquire_n, NULL, 1, DLOCK_EBUSY, NULL),
      ROW("dlock_semaphore_release", "semaphore NULL", t_sem_release_null,
          NULL, 0, DLOCK_EINVAL, "is NULL"),
      ROW("dlock_semaphore_release", "permits 0", t_sem_release_n, NULL, 0,
          DLOCK_EINVAL, "permits"),
      ROW("dlock_semaphore_try_set_permits", "semaphore NULL", t_sem_set_null,
          NULL, 0, DLOCK_EINVAL, "is NULL"),
      ROW("dlock_semaphore_try_set_permits", "permits -1", t_sem_set_n, NULL,
          -1, DLOCK_EINVAL, "permits"),
      ROW("dlock_semaphore_add_permits", "semaphore NULL", t_sem_add_null,
          NULL, 0, DLOCK_EINVAL, "is NULL"),
      ROW("dlock_semaphore_available", "semaphore NULL", t_sem_avail_null,
          NULL, 0, DLOCK_EINVAL, "is NULL"),
      ROW("dlock_semaphore_available", "out NULL", t_sem_avail_out, NULL, 0,
          DLOCK_EINVAL, "out is NULL"),
      ROW("dlock_semaphore_delete", "semaphore NULL", t_sem_delete_null, NULL,
          0, DLOCK_EINVAL, "is NULL"),
      ROW("dlock_permit_sem_new", "client NULL", t_psem_new_client, NULL, 0,
          DLOCK_EINVAL, "client is NULL"),
      ROW("dlock_permit_sem_new", "out NULL", t_psem_new_out, NULL, 0,
          DLOCK_EINVAL, "out is NULL"),
      ROW("dlock_permit_sem_acquire", "semaphore NULL", t_psem_acquire_null,
          NULL, 0, DLOCK_EINVAL, "is NULL"),
      ROW("dlock_permit_sem_acquire", "id NULL", t_psem_acquire_id, NULL, 0,
          DLOCK_EINVAL, "id is NULL"),
      ROW("dlock_permit_sem_acquire", "lease_ms 0", t_psem_acquire_lease, NULL,
          0, DLOCK_EINVAL, "lease"),
      ROW("dlock_permit_sem_acquire", "no such semaphore: no permits",
          t_psem_acquire_lease, NULL, 1000, DLOCK_EBUSY, NULL),
      ROW("dlock_permit_sem_release", "semaphore NULL", t_psem_release_null,
          NULL, 0, DLOCK_EINVAL, "is NULL"),
      ROW("dlock_permit_sem_release", "id NULL", t_psem_release_id, NULL, 0,
          DLOCK_EINVAL, "id"),
      ROW("dlock_permit_sem_release", "id not 32 hex digits",
          t_psem_release_id, "abc", 0, DLOCK_EINVAL, "id"),
      ROW("dlock_permit_sem_release", "id in upper case",
          t_psem_release_id, "0123456789ABCDEF0123456789ABCDEF", 0,
          DLOCK_EINVAL, "id"),
      ROW("dlock_permit_sem_release", "unknown id", t_psem_release_id,
          "0123456789abcdef0123456789abcdef", 0, DLOCK_ENOTOWNER, NULL),
      ROW("dlock_permit_sem_state", "out NULL", t_psem_state_null, NULL, 0,
          DLOCK_EINVAL, "out is NULL"),
      ROW("dlock_permit_sem_delete", "semaphore NULL", t_psem_delete_null,
          NULL, 0, DLOCK_EINVAL, "is NULL"),
      ROW("dlock_latch_new", "out NULL", t_latch_new_out, NULL, 0,
          DLOCK_EINVAL, "out is NULL"),
      ROW("dlock_latch_new", "reserved name", t_latch_new_name,
          "dlock_lock_x", 0, DLOCK_EINVAL, "reserved"),
      ROW("dlock_latch_try_set_count", "latch NULL", t_latch_set_null, NULL, 0,
          DLOCK_EINVAL, "is NULL"),
      ROW("dlock_latch_try_set_count", "count 0", t_latch_set_n, NULL, 0,
          DLOCK_EINVAL, "count"),
      ROW("dlock_latch_count_down", "latch NULL", t_latch_down_null, NULL, 0,
          DLOCK_EINVAL, "is NULL"),
      ROW("dlock_latch_count", "out NULL", t_latch_count_out, NULL, 0,
          DLOCK_EINVAL, "out is NULL"),
      ROW("dlock_latch_await", "latch NULL", t_latch_await_null, NULL, 0,
          DLOCK_EINVAL, "is NULL"),
      ROW("dlock_latch_await", "wait_ms -2", t_latch_await_wait, NULL, -2,
          DLOCK_EINVAL, "wait"),
      ROW("dlock_latch_await", "no such latch: counts as zero",
          t_latch_await_wait, NULL, 0, DLOCK_OK, NULL),
      ROW("dlock_latch_delete", "latch NULL", t_latch_delete_null, NULL, 0,
          DLOCK_EINVAL, "is NULL"),
  };
  int failed = RUN_ROWS(&x, "sync_objects", rows);
  /* none of it left a key behind */
  CHECK_INT(it_lock_keys(x.s), ==, 0);
  dlock_semaphore_free(g_sem);
  dlock_permit_sem_free(g_psem);
  dlock_latch_free(g_latch);
  teardown(&x);
  group_done("sync_objects", failed);
}

/* async calls: refused before anything starts (no callback ever runs) */
static void never_done(void *ud, int rc, int64_t value) {
  (void)rc;
  (void)value;
  (*(int *)ud)++;
}
static int g_async_calls;
THUNK(t_async_acq_null,
      dlock_lock_acquire_async(NULL, 0, 0, DLOCK_LEASE_WATCHDOG, never_done,
                               &g_async_calls, NULL))
THUNK(t_async_acq_done_null,
      dlock_lock_acquire_async(x->l, 0, 0, DLOCK_LEASE_WATCHDOG, NULL, NULL,
                               NULL))
THUNK(t_async_acq_wait,
      dlock_lock_acquire_async(x->l, 0, x->num, DLOCK_LEASE_WATCHDOG,
                               never_done, &g_async_calls, NULL))
THUNK(t_async_acq_lease,
      dlock_lock_acquire_async(x->l, 0, 0, x->num, never_done, &g_async_calls,
                               NULL))
THUNK(t_async_rel_null,
      dlock_lock_release_async(NULL, 0, never_done, &g_async_calls, NULL))
THUNK(t_async_sem_null, dlock_semaphore_acquire_async(NULL, 1, 0, never_done,
                                                      &g_async_calls, NULL))
static void never_permit(void *ud, int rc, const char *id) {
  (void)rc;
  (void)id;
  (*(int *)ud)++;
}
THUNK(t_async_psem_null,
      dlock_permit_sem_acquire_async(NULL, 0, DLOCK_LEASE_WATCHDOG,
                                     never_permit, &g_async_calls, NULL))
THUNK(t_async_psem_rel_id,
      dlock_permit_sem_release_async(NULL, x->arg, never_done, &g_async_calls,
                                     NULL))
THUNK(t_async_latch_null,
      dlock_latch_await_async(NULL, 0, never_done, &g_async_calls, NULL))
THUNK(t_async_multi_null,
      dlock_multilock_acquire_async(NULL, 0, 0, DLOCK_LEASE_WATCHDOG,
                                    never_done, &g_async_calls, NULL))
THUNK(t_async_cancel_null, dlock_op_cancel(NULL, 1))
THUNK(t_async_cancel_unknown, dlock_op_cancel(x->c, (dlock_op_t)x->num))
THUNK(t_async_fd_null, dlock_client_fd(x->c, NULL))
THUNK(t_async_process_null, dlock_client_process(NULL))
THUNK(t_async_threads, dlock_options_set_async_threads(x->o, (int)x->num))
THUNK(t_async_threads_null, dlock_options_set_async_threads(NULL, 4))

static int t_async_none_ran(tctx_t *x) {
  int n = dlock_client_process(x->c);
  if (n != 0 || g_async_calls != 0)
    return wrong(x, "%d callbacks ran, %d of them refused calls'", n,
                 g_async_calls);
  return dlock_client_pending(x->c) == 0 ? 0 : wrong(x, "pending");
}

static void g_async(void) {
  tctx_t x;
  setup(&x, NULL);
  static const row_t rows[] = {
      ROW("dlock_lock_acquire_async", "lock NULL", t_async_acq_null, NULL, 0,
          DLOCK_EINVAL, "lock is NULL"),
      ROW("dlock_lock_acquire_async", "done NULL", t_async_acq_done_null, NULL,
          0, DLOCK_EINVAL, "done is NULL"),
      ROW("dlock_lock_acquire_async", "wait -5", t_async_acq_wait, NULL, -5,
          DLOCK_EINVAL, "wait"),
      ROW("dlock_lock_acquire_async", "lease 0", t_async_acq_lease, NULL, 0,
          DLOCK_EINVAL, "lease"),
      ROW("dlock_lock_release_async", "lock NULL", t_async_rel_null, NULL, 0,
          DLOCK_EINVAL, "lock is NULL"),
      ROW("dlock_semaphore_acquire_async", "semaphore NULL", t_async_sem_null,
          NULL, 0, DLOCK_EINVAL, "semaphore is NULL"),
      ROW("dlock_permit_sem_acquire_async", "permit semaphore NULL",
          t_async_psem_null, NULL, 0, DLOCK_EINVAL, "permit semaphore is NULL"),
      ROW("dlock_permit_sem_release_async", "id \"12ab\" (not 32 hex digits)",
          t_async_psem_rel_id, "12ab", 0, DLOCK_EINVAL,
          "a permit id is 32 lowercase hex digits"),
      ROW("dlock_latch_await_async", "latch NULL", t_async_latch_null, NULL, 0,
          DLOCK_EINVAL, "latch is NULL"),
      ROW("dlock_multilock_acquire_async", "multilock NULL", t_async_multi_null,
          NULL, 0, DLOCK_EINVAL, "multilock is NULL"),
      ROW("dlock_op_cancel", "client NULL", t_async_cancel_null, NULL, 0,
          DLOCK_EINVAL, "client is NULL"),
      ROW("dlock_op_cancel", "an operation never started",
          t_async_cancel_unknown, NULL, 424242, DLOCK_EINVAL,
          "no operation 424242 is pending"),
      ROW("dlock_client_fd", "fd NULL", t_async_fd_null, NULL, 0, DLOCK_EINVAL,
          "fd is NULL"),
      ROW("dlock_client_process", "client NULL", t_async_process_null, NULL, 0,
          DLOCK_EINVAL, "client is NULL"),
      ROW("dlock_options_set_async_threads", "0", t_async_threads, NULL, 0,
          DLOCK_EINVAL, "out of range (1 .. 64)"),
      ROW("dlock_options_set_async_threads", "65", t_async_threads, NULL, 65,
          DLOCK_EINVAL, "out of range (1 .. 64)"),
      ROW("dlock_options_set_async_threads", "opts NULL", t_async_threads_null,
          NULL, 0, DLOCK_EINVAL, "opts is NULL"),
      ROW("dlock_client_process", "after the refused calls: no callback ran",
          t_async_none_ran, NULL, 0, DLOCK_OK, NULL),
  };
  int failed = RUN_ROWS(&x, "async", rows);
  teardown(&x);
  group_done("async", failed);
}

static void g_codes(void) {
  tctx_t x;
  memset(&x, 0, sizeof x);
  static const row_t rows[] = {
      ROW("dlock_strerror", "every code -20..0", t_every_code, NULL, 0,
          DLOCK_OK, NULL),
      ROW("dlock_strerror", "1 (not a code)", t_strerror, "unknown error", 1,
          DLOCK_OK, NULL),
      ROW("dlock_strerror", "-21 (not yet a code)", t_strerror, "unknown error",
          -21, DLOCK_OK, NULL),
      ROW("dlock_strerror", "INT_MIN", t_strerror, "unknown error", INT_MIN,
          DLOCK_OK, NULL),
      ROW("dlock_strerror", "INT_MAX", t_strerror, "unknown error", INT_MAX,
          DLOCK_OK, NULL),
      ROW("dlock_err_name", "-21", t_err_name, "DLOCK_E?", -21, DLOCK_OK, NULL),
      ROW("dlock_err_name", "INT_MIN", t_err_name, "DLOCK_E?", INT_MIN,
          DLOCK_OK, NULL),
      ROW("dlock_err_name", "0", t_err_name, "DLOCK_OK", 0, DLOCK_OK, NULL),
      ROW("dlock_last_error", "before any failure: never NULL", t_last_error,
          NULL, 0, DLOCK_OK, NULL),
      ROW("dlock_version", "matches the header", t_version, NULL, 0, DLOCK_OK,
          NULL),
      ROW("dlock_backends", "never NULL, \"redis\" first", t_backends, NULL, 0,
          DLOCK_OK, NULL),
      ROW("dlock_thread_id", "never 0", t_thread_id, NULL, 0, DLOCK_OK, NULL),
  };
  group_done("codes", RUN_ROWS(&x, "codes", rows));
}

static void g_handles(void) {
  tctx_t x;
  setup(&x, NULL);
  static const row_t rows[] = {
      ROW("every handle function", "zeroed memory as a handle", t_forged, NULL,
          0, DLOCK_EBADHANDLE, "handle is not live"),
      ROW("every handle function", "memory with the dead magic", t_forged, NULL,
          1, DLOCK_EBADHANDLE, "handle is not live"),
  };
  static const row_t uaf_rows[] = {
      ROW("dlock_lock_acquire/release/is_locked/name/free",
          "lock handle used after dlock_lock_free()", t_freed_lock, NULL, 0,
          DLOCK_EBADHANDLE, "lock handle is not live"),
      ROW("dlock_client_ping/lock_new/client_id/client_free, lock calls",
          "client used after dlock_client_free(), and its lock handle",
          t_freed_client, NULL, 0, DLOCK_EBADHANDLE,
          "client handle is not live"),
  };
  int failed = RUN_ROWS(&x, "handles", rows);
  const char *pre = getenv("LD_PRELOAD");
  bool valgrind = pre && strstr(pre, "vgpreload");
  if (BT_SANITIZED || valgrind)
    printf("use-after-free rows skipped (%s: reusing freed memory is "
           "undefined and reported by the tool)\n",
           valgrind ? "valgrind" : "sanitizer build");
  else
    failed += RUN_ROWS(&x, "handles (use after free)", uaf_rows);
  CHECK_INT(it_lock_keys(x.s), ==, 0);
  teardown(&x);
  group_done("handles", failed);
}

static void g_names(void) {
  tctx_t x;
  setup(&x, NULL);
  static const row_t rows[] = {
      ROW("dlock_lock_new", "name \"\"", t_name_new, "", 0, DLOCK_EINVAL,
          "name is empty"),
      ROW("dlock_lock_new", "DLOCK_NAME_MAX+1 bytes", t_name_new, NULL,
          DLOCK_NAME_MAX + 1, DLOCK_EINVAL, "longer than 1024 bytes"),
      ROW("dlock_lock_new", "100000 bytes", t_name_new, NULL, 100000,
          DLOCK_EINVAL, "longer than 1024 bytes"),
      ROW("lock_new, acquire, queries, state, release", "DLOCK_NAME_MAX bytes",
          t_name_long, NULL, DLOCK_NAME_MAX, DLOCK_OK, NULL),
      ROW("lock_new, acquire, queries, state, release", "one byte", t_name_long,
          NULL, 1, DLOCK_OK, NULL),
      ROW("lock_new, acquire, queries, state, release",
          "invalid UTF-8 \\xff\\xfe\\x80", t_name_round_trip, "\xff\xfe\x80", 0,
          DLOCK_OK, NULL),
      ROW("lock_new, acquire, queries, state, release",
          "truncated UTF-8 \\xc3 and overlong \\xc0\\xaf", t_name_round_trip,
          "a\xc3-\xc0\xaf", 0, DLOCK_OK, NULL),
      ROW("lock_new, acquire, queries, state, release", "control bytes",
          t_name_round_trip, "\x01\x02\t\r\n\x7f", 0, DLOCK_OK, NULL),
      ROW("lock_new, acquire, queries, state, release", "\"{\"",
          t_name_round_trip, "{", 0, DLOCK_OK, NULL),
      ROW("lock_new, acquire, queries, state, release", "\"}\"",
          t_name_round_trip, "}", 0, DLOCK_OK, NULL),
      ROW("lock_new, acquire, queries, state, release", "\"{}\"",
          t_name_round_trip, "{}", 0, DLOCK_OK, NULL),
      ROW("lock_new, acquire, queries, state, release", "\"}{\"",
          t_name_round_trip, "}{", 0, DLOCK_OK, NULL),
      ROW("lock_new, acquire, queries, state, release", "\"a{b}c\"",
          t_name_round_trip, "a{b}c", 0, DLOCK_OK, NULL),
      ROW("lock_new, acquire, queries, state, release", "\"{x}\"",
          t_name_round_trip, "{x}", 0, DLOCK_OK, NULL),
      ROW("lock_new, acquire, queries, state, release", "\"{{x}}\"",
          t_name_round_trip, "{{x}}", 0, DLOCK_OK, NULL),
      ROW("lock_new, acquire, queries, state, release",
          "\"redisson_lock__channel:{x}\"", t_name_round_trip,
          "redisson_lock__channel:{x}", 0, DLOCK_OK, NULL),
      ROW("dlock_lock_new", "\"dlock_lock_queue:{x}\" (reserved prefix)",
          t_name_new, "dlock_lock_queue:{x}", 0, DLOCK_EINVAL,
          "reserved for dlock's own keys"),
      ROW("dlock_lock_new", "\"dlock_lock_queue_timeout:{x}\"", t_name_new,
          "dlock_lock_queue_timeout:{x}", 0, DLOCK_EINVAL,
          "reserved for dlock's own keys"),
      ROW("dlock_lock_new", "\"dlock_lock_grant:{x}:id\"", t_name_new,
          "dlock_lock_grant:{x}:id", 0, DLOCK_EINVAL,
          "reserved for dlock's own keys"),
      ROW("dlock_lock_new", "\"dlock_lock_\"", t_name_new, "dlock_lock_", 0,
          DLOCK_EINVAL, "reserved for dlock's own keys"),
      ROW("lock_new, acquire, queries, state, release",
          "\"dlock_lock\" (not the reserved prefix)", t_name_round_trip,
          "dlock_lock", 0, DLOCK_OK, NULL),
      ROW("lock_new, acquire, queries, state, release",
          "\"DLOCK_LOCK_X\" (prefix is case-sensitive)", t_name_round_trip,
          "DLOCK_LOCK_X", 0, DLOCK_OK, NULL),
      ROW("lock_new, acquire, queries, state, release",
          "\"x:dlock_lock_queue:{x}\" (prefix inside)", t_name_round_trip,
          "x:dlock_lock_queue:{x}", 0, DLOCK_OK, NULL),
      ROW("lock_new, acquire, queries, state, release",
          "\"redisson_unlock_latch:{x}:id\"", t_name_round_trip,
          "redisson_unlock_latch:{x}:id", 0, DLOCK_OK, NULL),
      ROW("lock_new, acquire, queries, state, release", "\"={x}\"",
          t_name_round_trip, "={x}", 0, DLOCK_OK, NULL),
      ROW("lock_new, acquire, queries, state, release", "\"%s%n%x\"",
          t_name_round_trip, "%s%n%x", 0, DLOCK_OK, NULL),
      ROW("lock_new, acquire, queries, state, release", "\"*\" and \"?\"",
          t_name_round_trip, "*?[a]", 0, DLOCK_OK, NULL),
  };
  int failed = RUN_ROWS(&x, "names", rows);
  teardown(&x);
  group_done("names", failed);
}

static void g_durations(void) {
  tctx_t x;
  setup(&x, NULL);
  static const row_t rows[] = {
      ROW("dlock_lock_acquire", "wait_ms INT64_MIN", t_acquire_wait_ms, NULL,
          INT64_MIN, DLOCK_EINVAL, "wait must be >= 0"),
      ROW("dlock_lock_acquire", "wait_ms -2", t_acquire_wait_ms, NULL, -2,
          DLOCK_EINVAL, "wait must be >= 0"),
      ROW("dlock_lock_acquire", "wait_ms INT64_MAX (free lock)",
          t_acquire_wait_max, NULL, 0, DLOCK_OK, NULL),
      ROW("dlock_lock_acquire", "lease_ms INT64_MIN", t_acquire_lease_ms, NULL,
          INT64_MIN, DLOCK_EINVAL, "lease must be 1..DLOCK_LEASE_MAX"),
      ROW("dlock_lock_acquire", "lease_ms -2", t_acquire_lease_ms, NULL, -2,
          DLOCK_EINVAL, "lease must be 1..DLOCK_LEASE_MAX"),
      ROW("dlock_lock_acquire", "lease_ms 0", t_acquire_lease_ms, NULL, 0,
          DLOCK_EINVAL, "lease must be 1..DLOCK_LEASE_MAX"),
      ROW("dlock_lock_acquire", "lease_ms DLOCK_LEASE_MAX+1",
          t_acquire_lease_ms, NULL, DLOCK_LEASE_MAX + 1, DLOCK_EINVAL,
          "lease must be 1..DLOCK_LEASE_MAX"),
      ROW("dlock_lock_acquire", "lease_ms INT64_MAX", t_acquire_lease_ms, NULL,
          INT64_MAX, DLOCK_EINVAL, "lease must be 1..DLOCK_LEASE_MAX"),
      ROW("dlock_lock_acquire", "lease_ms DLOCK_LEASE_MAX (written as is)",
          t_acquire_max_lease, NULL, 0, DLOCK_OK, NULL),
      ROW("dlock_lock_acquire_as", "wait_ms INT64_MIN", t_acquire_as_wait_ms,
          NULL, INT64_MIN, DLOCK_EINVAL, "wait must be >= 0"),
      ROW("dlock_lock_acquire_as", "lease_ms DLOCK_LEASE_MAX+1",
          t_acquire_as_lease_ms, NULL, DLOCK_LEASE_MAX + 1, DLOCK_EINVAL,
          "lease must be 1..DLOCK_LEASE_MAX"),
      ROW("dlock_lock_acquire_as", "lease_ms INT64_MIN", t_acquire_as_lease_ms,
          NULL, INT64_MIN, DLOCK_EINVAL, "lease must be 1..DLOCK_LEASE_MAX"),
      ROW("dlock_lock_acquire_as", "thread id 0", t_acquire_as_tid, NULL, 0,
          DLOCK_EINVAL, "thread id 0 is not valid"),
      ROW("dlock_lock_release_as", "thread id 0", t_release_as_tid, NULL, 0,
          DLOCK_EINVAL, "thread id 0 is not valid"),
      ROW("dlock_lock_release_as", "thread id UINT64_MAX (never held)",
          t_release_as_tid, NULL, -1, DLOCK_ENOTOWNER, "not held"),
  };
  int failed = RUN_ROWS(&x, "durations", rows);
  CHECK_INT(it_lock_keys(x.s), ==, 0);
  teardown(&x);
  group_done("durations", failed);
}

static void g_options(void) {
  tctx_t x;
  memset(&x, 0, sizeof x);
  CHECK_OK(dlock_options_new(&x.o));
  static const row_t rows[] = {
      ROW("dlock_options_set_connect_timeout", "0", t_connect_ms, NULL, 0,
          DLOCK_EINVAL, "connect timeout must be from 1 to 86400000 ms"),
      ROW("dlock_options_set_connect_timeout", "INT64_MIN", t_connect_ms, NULL,
          INT64_MIN, DLOCK_EINVAL, "connect timeout must be"),
      ROW("dlock_options_set_connect_timeout", "INT64_MAX", t_connect_ms, NULL,
          INT64_MAX, DLOCK_EINVAL, "connect timeout must be"),
      ROW("dlock_options_set_connect_timeout", "a day + 1 ms", t_connect_ms,
          NULL, 86400001, DLOCK_EINVAL, "connect timeout must be"),
      ROW("dlock_options_set_connect_timeout", "a day", t_connect_ms, NULL,
          86400000, DLOCK_OK, NULL),
      ROW("dlock_options_set_command_timeout", "-1", t_command_ms, NULL, -1,
          DLOCK_EINVAL, "command timeout must be"),
      ROW("dlock_options_set_command_timeout", "INT64_MAX", t_command_ms, NULL,
          INT64_MAX, DLOCK_EINVAL, "command timeout must be"),
      ROW("dlock_options_set_watchdog_timeout", "2", t_watchdog_ms, NULL, 2,
          DLOCK_EINVAL, "watchdog timeout must be from 3"),
      ROW("dlock_options_set_watchdog_timeout", "INT64_MIN", t_watchdog_ms,
          NULL, INT64_MIN, DLOCK_EINVAL, "watchdog timeout must be"),
      ROW("dlock_options_set_watchdog_timeout", "DLOCK_LEASE_MAX+1",
          t_watchdog_ms, NULL, DLOCK_LEASE_MAX + 1, DLOCK_EINVAL,
          "watchdog timeout must be"),
      ROW("dlock_options_set_watchdog_timeout", "3", t_watchdog_ms, NULL, 3,
          DLOCK_OK, NULL),
      ROW("dlock_options_set_session_timeout", "0", t_session_ms, NULL, 0,
          DLOCK_EINVAL, "session timeout must be from 1"),
      ROW("dlock_options_set_session_timeout", "DLOCK_LEASE_MAX+1",
          t_session_ms, NULL, DLOCK_LEASE_MAX + 1, DLOCK_EINVAL,
          "session timeout must be"),
      ROW("dlock_options_set_session_timeout", "60000", t_session_ms, NULL,
          60000, DLOCK_OK, NULL),
      ROW("dlock_options_set_fair_thread_wait", "0", t_fair_wait_ms, NULL, 0,
          DLOCK_EINVAL, "fair thread-wait must be"),
      ROW("dlock_options_set_fair_thread_wait", "INT64_MAX", t_fair_wait_ms,
          NULL, INT64_MAX, DLOCK_EINVAL, "fair thread-wait must be"),
      ROW("dlock_options_set_fair_thread_wait", "1000", t_fair_wait_ms, NULL,
          1000, DLOCK_OK, NULL),
      ROW("dlock_options_set_pool_size", "0", t_pool_n, NULL, 0, DLOCK_EINVAL,
          "pool size must be from 1 to 1024"),
      ROW("dlock_options_set_pool_size", "1025", t_pool_n, NULL, 1025,
          DLOCK_EINVAL, "pool size must be from 1 to 1024"),
      ROW("dlock_options_set_pool_size", "INT_MIN", t_pool_n, NULL, INT_MIN,
          DLOCK_EINVAL, "pool size must be from 1 to 1024"),
      ROW("dlock_options_set_pool_size", "INT_MAX", t_pool_n, NULL, INT_MAX,
          DLOCK_EINVAL, "pool size must be from 1 to 1024"),
      ROW("dlock_options_set_log_callback", "level -1", t_log_level, NULL, -1,
          DLOCK_EINVAL, "log level out of range"),
      ROW("dlock_options_set_log_callback", "level 4", t_log_level, NULL, 4,
          DLOCK_EINVAL, "log level out of range"),
      ROW("dlock_options_set_client_name", "\"\"", t_client_name, "", 0,
          DLOCK_EINVAL, "client name must be 1 to 256 bytes"),
      ROW("dlock_options_set_client_name", "257 bytes", t_client_name_long,
          NULL, 257, DLOCK_EINVAL, "client name must be 1 to 256 bytes"),
      ROW("dlock_options_set_client_name", "256 bytes", t_client_name_long,
          NULL, 256, DLOCK_OK, NULL),
      ROW("dlock_options_set_holder_info", "opts NULL", t_holder_info_null_opts,
          NULL, 0, DLOCK_EINVAL, "opts is NULL"),
      ROW("dlock_options_set_holder_info", "NULL (clears)", t_holder_info, NULL,
          0, DLOCK_OK, NULL),
      ROW("dlock_options_set_holder_info", "\"\"", t_holder_info, "", 0,
          DLOCK_EINVAL, "holder info must be 1 to 512 bytes"),
      ROW("dlock_options_set_holder_info", "513 bytes", t_holder_info_long,
          NULL, 513, DLOCK_EINVAL, "holder info must be 1 to 512 bytes"),
      ROW("dlock_options_set_holder_info", "512 bytes", t_holder_info_long,
          NULL, 512, DLOCK_OK, NULL),
      ROW("dlock_options_set_holder_info", "a newline", t_holder_info, "a\nb",
          0, DLOCK_EINVAL, "printable UTF-8"),
      ROW("dlock_options_set_holder_info", "not UTF-8 \\xff", t_holder_info,
          "a\xff", 0, DLOCK_EINVAL, "printable UTF-8"),
      ROW("dlock_options_set_holder_info", "UTF-8 \\xc3\\xa9", t_holder_info,
          "caf\xc3\xa9", 0, DLOCK_OK, NULL),
      ROW("dlock_options_set_layout", "opts NULL", t_layout_null_opts, NULL, 0,
          DLOCK_EINVAL, "opts is NULL"),
      ROW("dlock_options_set_layout", "\"zk\"", t_layout, "zk", 0, DLOCK_EINVAL,
          "unknown layout 'zk' (expected redisson or spring)"),
      ROW("dlock_options_set_layout", "\"redisson\"", t_layout, "redisson", 0,
          DLOCK_OK, NULL),
      ROW("dlock_options_set_layout", "NULL (clears)", t_layout, NULL, 0,
          DLOCK_OK, NULL),
      ROW("dlock_options_set_spring_registry", "\"\"", t_spring_registry, "", 0,
          DLOCK_EINVAL, "the spring registry key must be 1 to 512 bytes"),
      ROW("dlock_options_set_spring_registry", "a newline", t_spring_registry,
          "a\nb", 0, DLOCK_EINVAL, "no control characters"),
      ROW("dlock_options_set_spring_registry", "NULL (clears)",
          t_spring_registry, NULL, 0, DLOCK_OK, NULL),
      ROW("dlock_options_set_client_name", "with a space", t_client_name, "a b",
          0, DLOCK_EINVAL, "printable ASCII without spaces"),
      ROW("dlock_options_set_client_name", "non-ASCII \\xc3\\xa9",
          t_client_name, "caf\xc3\xa9", 0, DLOCK_EINVAL,
          "printable ASCII without spaces"),
      ROW("dlock_options_set_client_name", "newline", t_client_name, "a\nb", 0,
          DLOCK_EINVAL, "printable ASCII without spaces"),
      ROW("dlock_options_set_credentials", "user \"\"", t_credentials_user, "",
          0, DLOCK_EINVAL, "must be NULL or non-empty"),
      ROW("dlock_options_set_credentials", "password \"\"", t_credentials_pw,
          "", 0, DLOCK_EINVAL, "must be NULL or non-empty"),
      ROW("dlock_options_set_replica_wait", "0 (off)", t_replica_wait_ms, NULL,
          0, DLOCK_OK, NULL),
      ROW("dlock_options_set_replica_wait", "-1", t_replica_wait_ms, NULL, -1,
          DLOCK_EINVAL, "replica wait (0 turns it off) must be from 1"),
      ROW("dlock_options_set_replica_wait", "a day + 1 ms", t_replica_wait_ms,
          NULL, 86400001, DLOCK_EINVAL,
          "replica wait (0 turns it off) must be"),
      ROW("dlock_options_set_replica_wait", "INT64_MIN", t_replica_wait_ms,
          NULL, INT64_MIN, DLOCK_EINVAL,
          "replica wait (0 turns it off) must be"),
      ROW("dlock_options_set_replica_wait", "1000", t_replica_wait_ms, NULL,
          1000, DLOCK_OK, NULL),
      ROW("dlock_options_set_tls_ca", "file \"\"", t_tls_ca_file, "", 0,
          DLOCK_EINVAL, "CA file must be NULL or a path of 1 to 4096 bytes"),
      ROW("dlock_options_set_tls_ca", "dir \"\"", t_tls_ca_dir, "", 0,
          DLOCK_EINVAL, "CA directory must be NULL or a path"),
      ROW("dlock_options_set_tls_ca", "file of 4097 bytes", t_tls_ca_long, NULL,
          4097, DLOCK_EINVAL, "a path of 1 to 4096 bytes"),
      ROW("dlock_options_set_tls_ca", "file of 4096 bytes", t_tls_ca_long, NULL,
          4096, DLOCK_OK, NULL),
      ROW("dlock_options_set_tls_cert", "cert \"\"", t_tls_cert_file, "", 0,
          DLOCK_EINVAL, "certificate file must be NULL or a path"),
      ROW("dlock_options_set_tls_sni", "\"\"", t_tls_sni, "", 0, DLOCK_EINVAL,
          "server name must be 1 to 253 bytes"),
      ROW("dlock_options_set_tls_sni", "254 bytes", t_tls_sni_long, NULL, 254,
          DLOCK_EINVAL, "server name must be 1 to 253 bytes"),
      ROW("dlock_options_set_tls_sni", "253 bytes", t_tls_sni_long, NULL, 253,
          DLOCK_OK, NULL),
      ROW("dlock_options_set_tls_sni", "with a space", t_tls_sni, "a b", 0,
          DLOCK_EINVAL, "printable ASCII without spaces"),
      ROW("dlock_options_set_tls_sni", "non-ASCII \\xc3\\xa9", t_tls_sni,
          "caf\xc3\xa9", 0, DLOCK_EINVAL, "printable ASCII without spaces"),
  };
  int failed = RUN_ROWS(&x, "options", rows);
  dlock_options_free(x.o);
  group_done("options", failed);
}

static void g_urls(void) {
  tctx_t x;
  memset(&x, 0, sizeof x);
  x.s = th_server_start(NULL);
  CHECK(x.s);
  static const row_t rows[] = {
      ROW("dlock_client_new", "\"\"", t_client_new_url, "", 0, DLOCK_EURL,
          "bad URL: empty"),
      ROW("dlock_client_new", "redis-sentinel:// without a master name",
          t_client_new_url, "redis-sentinel://127.0.0.1:26379", 0, DLOCK_EURL,
          "no master name"),
      ROW("dlock_client_new", "redis-sentinel:// with an empty sentinel",
          t_client_new_url, "redis-sentinel://127.0.0.1:26379,/m", 0,
          DLOCK_EURL, "empty host"),
      ROW("dlock_client_new", "redis-sentinel:// with a bad port",
          t_client_new_url, "redis-sentinel://127.0.0.1:99999/m", 0, DLOCK_EURL,
          "port"),
      ROW("dlock_client_new", "no scheme", t_client_new_url, "127.0.0.1:6379",
          0, DLOCK_EURL, "bad URL"),
      ROW("dlock_client_new", "unknown scheme", t_client_new_url,
          "http://127.0.0.1", 0, DLOCK_EURL, "unknown scheme 'http'"),
      ROW("dlock_client_new", "rediss:// without a host", t_client_new_url,
          "rediss://:6379", 0, DLOCK_EURL, "no host"),
      ROW("dlock_client_new", "rediss:// with a CA file that does not exist",
          t_client_new_tls_ca, "/nonexistent/ca.pem", 0, DLOCK_ETLS,
          "cannot read the CA file '/nonexistent/ca.pem': No such file"),
      ROW("dlock_client_new", "rediss:// with a CA file that is not PEM",
          t_client_new_tls_ca, "/dev/null", 0, DLOCK_ETLS,
          "cannot load the CA file '/dev/null'"),
      ROW("dlock_client_new", "no host", t_client_new_url, "redis://", 0,
          DLOCK_EURL, "no host"),
      ROW("dlock_client_new", "port 0", t_client_new_url, "redis://127.0.0.1:0",
          0, DLOCK_EURL, "port must be a number"),
      ROW("dlock_client_new", "port 65536", t_client_new_url,
          "redis://127.0.0.1:65536", 0, DLOCK_EURL, "port must be a number"),
      ROW("dlock_client_new", "port 99999999999999999999", t_client_new_url,
          "redis://127.0.0.1:99999999999999999999", 0, DLOCK_EURL,
          "port must be a number"),
      ROW("dlock_client_new", "db not a number", t_client_new_url,
          "redis://127.0.0.1/x", 0, DLOCK_EURL, "database number"),
      ROW("dlock_client_new", "unknown parameter", t_client_new_url,
          "redis://127.0.0.1?timeout=1", 0, DLOCK_EURL, "unknown parameter"),
      ROW("dlock_client_new", "layout=spring without registry=",
          t_client_new_url, "redis://127.0.0.1?layout=spring", 0, DLOCK_EINVAL,
          "the spring layout needs the registry key"),
      ROW("dlock_client_new", "unknown layout", t_client_new_url,
          "redis://127.0.0.1?layout=zk", 0, DLOCK_EURL, "unknown layout 'zk'"),
      ROW("dlock_client_new", "space inside", t_client_new_url,
          "redis://127.0.0.1 :6379", 0, DLOCK_EURL, "space or control"),
      ROW("dlock_client_new", "control byte inside", t_client_new_url,
          "redis://127.0.0.1\x01", 0, DLOCK_EURL, "space or control"),
      ROW("dlock_client_new", "bad %-escape in the password", t_client_new_url,
          "redis://:p%zz@127.0.0.1", 0, DLOCK_EURL, "invalid %-escape"),
      ROW("dlock_client_new", "%00 in the password", t_client_new_url,
          "redis://:p%00@127.0.0.1", 0, DLOCK_EURL, "invalid %-escape"),
      ROW("dlock_client_new", "user without password", t_client_new_url,
          "redis://alice:@127.0.0.1", 0, DLOCK_EURL,
          "user given without password"),
      ROW("dlock_client_new", "IPv6 without ']'", t_client_new_url,
          "redis://[::1:6379", 0, DLOCK_EURL, "missing ']'"),
      ROW("dlock_client_new", "relative unix path", t_client_new_url,
          "unix://run/redis.sock", 0, DLOCK_EURL, "absolute path"),
      ROW("dlock_client_new", "unix path of 200 bytes",
          t_client_new_long_socket, NULL, 0, DLOCK_EURL,
          "longer than 107 bytes"),
      ROW("dlock_client_new", "4100-byte URL", t_client_new_long_url, NULL, 0,
          DLOCK_EURL, "longer than 4096 bytes"),
      ROW("dlock_client_new", "unix socket that does not exist",
          t_client_new_url, "unix:///nonexistent/dlock.sock", 0,
          DLOCK_EUNAVAILABLE, "no such socket"),
  };
  int failed = RUN_ROWS(&x, "urls", rows);
  th_server_stop(x.s);
  group_done("urls", failed);
}

/* Every call that runs a script, with the scripts refused (code and
 * message part given); queries and ping keep working. */
#define SCRIPT_ROWS(code, part)                                                \
  ROW("dlock_lock_acquire", "try once", t_acquire, NULL, 0, code, part),       \
      ROW("dlock_lock_acquire", "wait 3000 ms: the error comes at once",       \
          t_acquire_wait_fast, NULL, 3000, code, part),                        \
      ROW("dlock_lock_acquire_as", "thread 77", t_acquire_as, NULL, 0, code,   \
          part),                                                               \
      ROW("dlock_lock_release", "not held", t_release, NULL, 0, code, part),   \
      ROW("dlock_lock_release_as", "thread 77", t_release_as, NULL, 0, code,   \
          part),                                                               \
      ROW("dlock_lock_force_release", "", t_force, NULL, 0, code, part),       \
      ROW("dlock_lock_state", "", t_state, NULL, 0, code, part),               \
      ROW("dlock_lock_is_locked", "(a plain command)", t_locked, NULL, 0,      \
          DLOCK_OK, NULL),                                                     \
      ROW("dlock_lock_hold_count", "(a plain command)", t_count, NULL, 0,      \
          DLOCK_OK, NULL),                                                     \
      ROW("dlock_client_ping", "", t_ping, NULL, 0, DLOCK_OK, NULL)

static void g_server_evalsha_renamed(void) {
  const char *conf[] = {"rename-command EVALSHA \"\"", NULL};
  tctx_t x;
  setup(&x, conf);
  static const row_t rows[] = {
      ROW("(setup)", "lock held by someone else", t_hold_elsewhere, NULL, 0,
          DLOCK_OK, NULL),
      SCRIPT_ROWS(DLOCK_ESERVER, "unknown command 'EVALSHA'"),
  };
  int failed = RUN_ROWS(&x, "server_evalsha_renamed", rows);
  teardown(&x);
  group_done("server_evalsha_renamed", failed);
}

static void g_server_scripts_renamed(void) {
  const char *conf[] = {"rename-command EVALSHA \"\"",
                        "rename-command EVAL \"\"", NULL};
  tctx_t x;
  setup(&x, conf);
  static const row_t rows[] = {
      ROW("(setup)", "lock held by someone else", t_hold_elsewhere, NULL, 0,
          DLOCK_OK, NULL),
      SCRIPT_ROWS(DLOCK_ESERVER, "unknown command"),
  };
  int failed = RUN_ROWS(&x, "server_scripts_renamed", rows);
  teardown(&x);
  group_done("server_scripts_renamed", failed);
}

static void g_acl_denies_scripts(void) {
  const char *conf[] = {
      "user dlk on >dlk-pw ~* &* +@all -evalsha -eval -evalsha_ro -eval_ro",
      NULL};
  tctx_t x;
  setup(&x, conf);
  static const row_t rows[] = {
      ROW("(setup)", "client as ACL user dlk", t_client_as_dlk, NULL, 0,
          DLOCK_OK, NULL),
      ROW("(setup)", "lock held by someone else", t_hold_elsewhere, NULL, 0,
          DLOCK_OK, NULL),
      SCRIPT_ROWS(DLOCK_EAUTH, "NOPERM"),
  };
  int failed = RUN_ROWS(&x, "acl_denies_scripts", rows);
  teardown(&x);
  group_done("acl_denies_scripts", failed);
}

static void g_acl_denies_queries(void) {
  const char *conf[] = {
      "user dlk on >dlk-pw ~* &* +@all -exists -hexists -hget -pttl", NULL};
  tctx_t x;
  setup(&x, conf);
  static const row_t rows[] = {
      ROW("(setup)", "client as ACL user dlk", t_client_as_dlk, NULL, 0,
          DLOCK_OK, NULL),
      ROW("dlock_lock_is_locked", "EXISTS denied", t_locked, NULL, 0,
          DLOCK_EAUTH, "NOPERM"),
      ROW("dlock_lock_is_held_by_thread", "HEXISTS denied", t_held, NULL, 0,
          DLOCK_EAUTH, "NOPERM"),
      ROW("dlock_lock_hold_count", "HGET denied", t_count, NULL, 0, DLOCK_EAUTH,
          "NOPERM"),
      ROW("dlock_lock_remaining_lease", "PTTL denied", t_remaining, NULL, 0,
          DLOCK_EAUTH, "NOPERM"),
      /* the scripts use these commands too: refused inside the script */
      ROW("dlock_lock_acquire", "EXISTS/PTTL denied inside the script",
          t_acquire, NULL, 0, DLOCK_ESERVER, "can't run this command"),
      ROW("dlock_lock_release", "denied inside the script", t_release, NULL, 0,
          DLOCK_ESERVER, "can't run this command"),
      ROW("dlock_client_ping", "", t_ping, NULL, 0, DLOCK_OK, NULL),
  };
  int failed = RUN_ROWS(&x, "acl_denies_queries", rows);
  teardown(&x);
  group_done("acl_denies_queries", failed);
}

static void g_acl_revoked_while_held(void) {
  const char *conf[] = {"user dlk on >dlk-pw ~* &* +@all", NULL};
  tctx_t x;
  setup(&x, conf);
  static const row_t rows[] = {
      ROW("(setup)", "client as ACL user dlk", t_client_as_dlk, NULL, 0,
          DLOCK_OK, NULL),
      ROW("dlock_lock_acquire", "scripts allowed", t_acquire, NULL, 0, DLOCK_OK,
          NULL),
      ROW("(server)", "ACL SETUSER dlk -evalsha -eval", t_redis,
          "ACL SETUSER dlk -evalsha -eval", 0, DLOCK_OK, NULL),
      ROW("dlock_lock_release", "held, scripts now refused", t_release, NULL, 0,
          DLOCK_EAUTH, "NOPERM"),
      ROW("dlock_lock_state", "scripts refused", t_state, NULL, 0, DLOCK_EAUTH,
          "NOPERM"),
      ROW("dlock_lock_is_held_by_thread", "plain command: still held", t_held,
          NULL, 0, DLOCK_OK, NULL),
      ROW("(server)", "ACL SETUSER dlk +evalsha +eval", t_redis,
          "ACL SETUSER dlk +evalsha +eval", 0, DLOCK_OK, NULL),
      ROW("dlock_lock_release", "retried once allowed again", t_release, NULL,
          0, DLOCK_OK, NULL),
      ROW("dlock_lock_release", "a second time", t_release, NULL, 0,
          DLOCK_ENOTOWNER, "not held by this owner"),
  };
  int failed = RUN_ROWS(&x, "acl_revoked_while_held", rows);
  CHECK(!it_exists(x.s, "bt"));
  teardown(&x);
  group_done("acl_revoked_while_held", failed);
}

static void g_server_ping_renamed(void) {
  const char *conf[] = {"rename-command PING \"\"", NULL};
  tctx_t x;
  memset(&x, 0, sizeof x);
  x.s = th_server_start(conf);
  CHECK(x.s);
  snprintf(x.url, sizeof x.url, "%s", x.s->url);
  static const row_t rows[] = {
      ROW("dlock_client_new", "server without PING", t_client_new_url, NULL, 0,
          DLOCK_ESERVER, "unknown command 'PING'"),
  };
  int failed = RUN_ROWS(&x, "server_ping_renamed", rows);
  th_server_stop(x.s);
  group_done("server_ping_renamed", failed);
}

static void g_server_subscribe_renamed(void) {
  const char *conf[] = {"rename-command SUBSCRIBE \"\"", NULL};
  tctx_t x;
  setup(&x, conf);
  static const row_t rows[] = {
      ROW("dlock_lock_acquire", "free lock, no wait needed", t_acquire, NULL, 0,
          DLOCK_OK, NULL),
      ROW("dlock_lock_release", "", t_release, NULL, 0, DLOCK_OK, NULL),
      ROW("(setup)", "lock held by someone else", t_hold_elsewhere, NULL, 0,
          DLOCK_OK, NULL),
      ROW("dlock_lock_acquire", "wait 3000 ms, SUBSCRIBE unknown: at once",
          t_acquire_wait_fast, NULL, 3000, DLOCK_ESERVER,
          "unknown command 'SUBSCRIBE'"),
      ROW("dlock_lock_acquire", "try once (no subscription)", t_acquire, NULL,
          0, DLOCK_EBUSY, "held by another owner"),
  };
  int failed = RUN_ROWS(&x, "server_subscribe_renamed", rows);
  teardown(&x);
  group_done("server_subscribe_renamed", failed);
}

static void g_server_readonly_replica(void) {
  char line[64];
  snprintf(line, sizeof line, "replicaof 127.0.0.1 %d", th_free_port());
  const char *conf[] = {line, "replica-serve-stale-data yes", NULL};
  tctx_t x;
  setup(&x, conf);
  static const row_t rows[] = {
      ROW("dlock_lock_acquire", "replica of nothing: writes refused", t_acquire,
          NULL, 0, DLOCK_ESERVER, "READONLY"),
      ROW("dlock_lock_acquire", "wait 3000 ms: at once", t_acquire_wait_fast,
          NULL, 3000, DLOCK_ESERVER, "READONLY"),
      ROW("dlock_lock_force_release", "", t_force, NULL, 0, DLOCK_ESERVER,
          "READONLY"),
      ROW("dlock_lock_is_locked", "reads work", t_locked, NULL, 0, DLOCK_OK,
          NULL),
      ROW("dlock_lock_state", "reads work", t_state, NULL, 0, DLOCK_OK, NULL),
  };
  int failed = RUN_ROWS(&x, "server_readonly_replica", rows);
  teardown(&x);
  group_done("server_readonly_replica", failed);
}

static void g_server_oom(void) {
  tctx_t x;
  setup(&x, NULL);
  static const row_t rows[] = {
      ROW("(server)", "CONFIG SET maxmemory 1", t_redis,
          "CONFIG SET maxmemory 1", 0, DLOCK_OK, NULL),
      ROW("dlock_lock_acquire", "server out of memory", t_acquire, NULL, 0,
          DLOCK_ESERVER, "OOM"),
      ROW("dlock_lock_acquire_as", "server out of memory", t_acquire_as, NULL,
          0, DLOCK_ESERVER, "OOM"),
      ROW("dlock_lock_is_locked", "reads work", t_locked, NULL, 0, DLOCK_OK,
          NULL),
      ROW("(server)", "CONFIG SET maxmemory 0", t_redis,
          "CONFIG SET maxmemory 0", 0, DLOCK_OK, NULL),
      ROW("dlock_lock_acquire", "memory back", t_acquire, NULL, 0, DLOCK_OK,
          NULL),
      ROW("dlock_lock_release", "", t_release, NULL, 0, DLOCK_OK, NULL),
  };
  int failed = RUN_ROWS(&x, "server_oom", rows);
  CHECK_INT(it_lock_keys(x.s), ==, 0);
  teardown(&x);
  group_done("server_oom", failed);
}

static bool server_busy(th_server_t *s) {
  redisReply *r = th_redis_cmd(s, "PING");
  bool busy =
      r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "BUSY", 4) == 0;
  if (r)
    freeReplyObject(r);
  return busy;
}

/* A script that never ends, sent on a connection of our own (its reply is
 * never read); the server answers everyone else BUSY. */
static int t_start_busy(tctx_t *x) {
  x->blocker = th_redis_connect(x->s);
  if (!x->blocker)
    return wrong(x, "no connection");
  redisAppendCommand(x->blocker, "EVAL %s 0",
                     "local i = 0 while true do i = i + 1 end");
  int done = 0;
  while (!done)
    if (redisBufferWrite(x->blocker, &done) != REDIS_OK)
      return wrong(x, "could not send the script");
  bool ok;
  TH_WAIT_FOR(ok, server_busy(x->s), 10000);
  return ok ? 0 : wrong(x, "the server never became busy");
}

static int t_stop_busy(tctx_t *x) {
  redisReply *r = th_redis_cmd(x->s, "SCRIPT KILL");
  if (r)
    freeReplyObject(r);
  redisFree(x->blocker);
  x->blocker = NULL;
  bool ok;
  TH_WAIT_FOR(ok, th_redis_int(x->s, "DBSIZE") >= 0, 10000);
  return ok ? 0 : wrong(x, "the server stayed busy");
}

static void g_server_busy_script(void) {
  const char *conf[] = {"busy-reply-threshold 100", NULL};
  tctx_t x;
  setup(&x, conf);
  static const row_t rows[] = {
      ROW("(server)", "a script that runs until killed", t_start_busy, NULL, 0,
          DLOCK_OK, NULL),
      ROW("dlock_client_ping", "server busy", t_ping, NULL, 0,
          DLOCK_EUNAVAILABLE, "BUSY"),
      ROW("dlock_lock_acquire", "server busy", t_acquire, NULL, 0,
          DLOCK_EUNAVAILABLE, "BUSY"),
      ROW("dlock_lock_release", "server busy", t_release, NULL, 0,
          DLOCK_EUNAVAILABLE, "BUSY"),
      ROW("dlock_lock_is_locked", "server busy", t_locked, NULL, 0,
          DLOCK_EUNAVAILABLE, "BUSY"),
      ROW("(server)", "SCRIPT KILL", t_stop_busy, NULL, 0, DLOCK_OK, NULL),
      ROW("dlock_lock_acquire", "after SCRIPT KILL", t_acquire, NULL, 0,
          DLOCK_OK, NULL),
      ROW("dlock_lock_release", "", t_release, NULL, 0, DLOCK_OK, NULL),
  };
  int failed = RUN_ROWS(&x, "server_busy_script", rows);
  teardown(&x);
  group_done("server_busy_script", failed);
}

/* ------------------------------------------- Redlock and multilock */

THUNK(t_rl_timing_null, dlock_options_set_redlock_timing(NULL, 50, 10, 2))
THUNK(t_rl_timing_node, dlock_options_set_redlock_timing(x->o, x->num, 10, 2))
THUNK(t_rl_timing_factor,
      dlock_options_set_redlock_timing(x->o, 50, x->num, 2))
THUNK(t_rl_timing_fixed, dlock_options_set_redlock_timing(x->o, 50, 10, x->num))

/* dlock_client_new_redlock with x->num copies of the server's URL (or of
 * the row's argument), a NULL at index -x->num - 1 when x->num < 0. */
static int t_rl_new(tctx_t *x) {
  const char *urls[4] = {x->s->url, x->arg ? x->arg : x->s->url,
                         "redis://127.0.0.1:1", NULL};
  dlock_client_t *c = NULL;
  size_t n = x->num;
  if (x->num == -2) { /* urls[1] NULL */
    urls[1] = NULL;
    n = 3;
  }
  int rc = dlock_client_new_redlock(&c, urls, n, NULL);
  if (rc != 0 && c != NULL)
    return wrong(x, "*out is not NULL after a failure");
  dlock_client_free(c);
  return rc;
}
THUNK(t_rl_new_out_null, dlock_client_new_redlock(NULL, NULL, 3, NULL))
static int t_rl_new_urls_null(tctx_t *x) {
  dlock_client_t *c = NULL;
  (void)x;
  return dlock_client_new_redlock(&c, NULL, 3, NULL);
}
THUNK(t_rl_nodes_plain, dlock_client_nodes(x->c) == 0 ? 0 : WRONG)
static int t_node_state_plain(tctx_t *x) {
  dlock_lock_state_t *st = NULL;
  int rc = dlock_lock_node_state(x->l, 0, &st);
  dlock_lock_state_free(st);
  return rc;
}
THUNK(t_node_state_out_null, dlock_lock_node_state(x->l, 0, NULL))
THUNK(t_ml_new_out_null, dlock_multilock_new(NULL, &x->l, 1))
static int t_ml_new(tctx_t *x) {
  dlock_multilock_t *m = NULL;
  dlock_lock_t *locks[2] = {x->l, x->num == 1 ? NULL : x->l};
  int rc = dlock_multilock_new(&m, x->num == 0 ? NULL : locks,
                               x->num == 0 ? 0 : 2);
  if (rc != 0 && m != NULL)
    return wrong(x, "*out is not NULL after a failure");
  dlock_multilock_free(m);
  return rc;
}
THUNK(t_ml_acquire_null, dlock_multilock_acquire(NULL, 0, 1000))
THUNK(t_ml_release_null, dlock_multilock_release(NULL))
THUNK(t_ml_size_null, dlock_multilock_size(NULL) == 0 ? 0 : WRONG)
static int t_ml_use(tctx_t *x) {
  dlock_multilock_t *m = NULL;
  int rc = dlock_multilock_new(&m, &x->l, 1);
  if (rc)
    return rc;
  if (strcmp(x->arg, "wait") == 0)
    rc = dlock_multilock_acquire(m, -5, 1000);
  else if (strcmp(x->arg, "lease") == 0)
    rc = dlock_multilock_acquire(m, 0, 0);
  else if (strcmp(x->arg, "tid") == 0)
    rc = dlock_multilock_acquire_as(m, 0, 0, 1000);
  else
    rc = dlock_multilock_release(m);
  dlock_multilock_free(m);
  return rc;
}

static void g_redlock_multilock(void) {
  tctx_t x;
  setup(&x, NULL);
  static const row_t rows[] = {
      ROW("dlock_options_set_redlock_timing", "opts NULL", t_rl_timing_null,
          NULL, 0, DLOCK_EINVAL, "opts is NULL"),
      ROW("dlock_options_set_redlock_timing", "node timeout 0",
          t_rl_timing_node, NULL, 0, DLOCK_EINVAL,
          "Redlock node timeout must be from 1"),
      ROW("dlock_options_set_redlock_timing", "drift 501 per mille",
          t_rl_timing_factor, NULL, 501, DLOCK_EINVAL,
          "Redlock drift must be from 0 to 500"),
      ROW("dlock_options_set_redlock_timing", "fixed drift -1",
          t_rl_timing_fixed, NULL, -1, DLOCK_EINVAL,
          "Redlock fixed drift must be"),
      ROW("dlock_options_set_redlock_timing", "50, 10, 2", t_rl_timing_node,
          NULL, 50, DLOCK_OK, NULL),
      ROW("dlock_client_new_redlock", "out NULL", t_rl_new_out_null, NULL, 0,
          DLOCK_EINVAL, "out is NULL"),
      ROW("dlock_client_new_redlock", "urls NULL", t_rl_new_urls_null, NULL,
          0, DLOCK_EINVAL, "urls is NULL"),
      ROW("dlock_client_new_redlock", "0 nodes", t_rl_new, NULL, 0,
          DLOCK_EINVAL, "must be odd"),
      ROW("dlock_client_new_redlock", "2 nodes", t_rl_new, "redis://h:2", 2,
          DLOCK_EINVAL, "must be odd"),
      ROW("dlock_client_new_redlock", "16 nodes", t_rl_new, NULL, 16,
          DLOCK_EINVAL, "must be odd"),
      ROW("dlock_client_new_redlock", "urls[1] NULL", t_rl_new, NULL, -2,
          DLOCK_EINVAL, "urls[1] is NULL"),
      ROW("dlock_client_new_redlock", "the same URL twice", t_rl_new, NULL, 3,
          DLOCK_EINVAL, "are the same URL"),
      ROW("dlock_client_new_redlock", "a node not Redis", t_rl_new,
          "zk://127.0.0.1:2181", 3, DLOCK_EURL, "node 2"),
      ROW("dlock_client_new_redlock", "two of three nodes down", t_rl_new,
          "redis://127.0.0.1:2", 3, DLOCK_EUNAVAILABLE,
          "2 of 3 nodes are down"),
      ROW("dlock_client_nodes", "a one-server client: 0", t_rl_nodes_plain,
          NULL, 0, DLOCK_OK, NULL),
      ROW("dlock_lock_node_state", "not a Redlock client", t_node_state_plain,
          NULL, 0, DLOCK_EINVAL, "not a Redlock client"),
      ROW("dlock_lock_node_state", "out NULL", t_node_state_out_null, NULL, 0,
          DLOCK_EINVAL, "out is NULL"),
      ROW("dlock_multilock_new", "out NULL", t_ml_new_out_null, NULL, 0,
          DLOCK_EINVAL, "out is NULL"),
      ROW("dlock_multilock_new", "no locks", t_ml_new, NULL, 0, DLOCK_EINVAL,
          "no locks given"),
      ROW("dlock_multilock_new", "locks[1] NULL", t_ml_new, NULL, 1,
          DLOCK_EINVAL, "locks[1] is NULL"),
      ROW("dlock_multilock_new", "one lock twice", t_ml_new, NULL, 2,
          DLOCK_EINVAL, "are the same lock"),
      ROW("dlock_multilock_size", "NULL: 0", t_ml_size_null, NULL, 0,
          DLOCK_OK, NULL),
      ROW("dlock_multilock_acquire", "NULL", t_ml_acquire_null, NULL, 0,
          DLOCK_EINVAL, "multilock is NULL"),
      ROW("dlock_multilock_acquire", "wait -5", t_ml_use, "wait", 0,
          DLOCK_EINVAL, "wait must be"),
      ROW("dlock_multilock_acquire", "lease 0", t_ml_use, "lease", 0,
          DLOCK_EINVAL, "lease must be"),
      ROW("dlock_multilock_acquire_as", "thread id 0", t_ml_use, "tid", 0,
          DLOCK_EINVAL, "thread id 0"),
      ROW("dlock_multilock_release", "NULL", t_ml_release_null, NULL, 0,
          DLOCK_EINVAL, "multilock is NULL"),
      ROW("dlock_multilock_release", "not held", t_ml_use, "release", 0,
          DLOCK_ENOTOWNER, "not held"),
  };
  int failed = RUN_ROWS(&x, "redlock_multilock", rows);
  teardown(&x);
  group_done("redlock_multilock", failed);
}

static const check_case_t cases[] = {
    {"null_args", g_null_args},
    {"codes", g_codes},
    {"sync_objects", g_sync_objects},
    {"handles", g_handles},
    {"names", g_names},
    {"durations", g_durations},
    {"options", g_options},
    {"urls", g_urls},
    {"server_evalsha_renamed", g_server_evalsha_renamed},
    {"server_scripts_renamed", g_server_scripts_renamed},
    {"acl_denies_scripts", g_acl_denies_scripts},
    {"acl_denies_queries", g_acl_denies_queries},
    {"acl_revoked_while_held", g_acl_revoked_while_held},
    {"server_ping_renamed", g_server_ping_renamed},
    {"server_subscribe_renamed", g_server_subscribe_renamed},
    {"server_readonly_replica", g_server_readonly_replica},
    {"server_oom", g_server_oom},
    {"server_busy_script", g_server_busy_script},
    {"redlock_multilock", g_redlock_multilock},
    {"async", g_async},
};

int main(int argc, char **argv) {
  size_t n = sizeof cases / sizeof cases[0];
  if (argc >= 2 && strcmp(argv[1], "--markdown") == 0) {
    g_markdown = true;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (size_t i = 0; i < n; i++) {
      bool wanted = argc == 2;
      for (int k = 2; k < argc; k++)
        wanted = wanted || strcmp(argv[k], cases[i].name) == 0;
      if (wanted)
        cases[i].fn();
    }
    return 0;
  }
  return check_main(argc, argv, cases, n);
}
