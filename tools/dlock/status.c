/*
 * status.c - `dlock --status NAME` and `dlock --force-unlock NAME`.
 *
 * Design note. Both are one connection, one library call, one answer on
 * stdout; they run on the main thread with default signal dispositions (an
 * interrupted query has nothing to clean up). --status exits 0 when the lock
 * is held and 1 when it is free, like `test`, so scripts can branch on it.
 * Names and owners are arbitrary bytes: the plain output escapes anything
 * unprintable, the JSON output escapes per RFC 8259 and turns bytes that are
 * not UTF-8 into U+FFFD, so the output is always one valid JSON object.
 * Which locks a view reads, per kind, is described above cli_status().
 * Each holder and waiter that recorded an identity (who.c) gets a "who:"
 * line, and in JSON "info" and "who" fields (and the "queue" array of
 * waiters): fields are only added, never renamed.
 * With several -u (a Redlock, or --all) --status shows each server's own
 * view, one client per server (status_nodes), and --force-unlock breaks
 * the lock on each server in turn.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void cli_json_string(FILE *f, const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  fputc('"', f);
  while (*p != '\0') {
    unsigned char c = *p;
    size_t need = 0, k;
    if (c == '"' || c == '\\') {
      fputc('\\', f);
      fputc(c, f);
      p++;
      continue;
    }
    if (c < 0x20 || c == 0x7f) {
      fprintf(f, "\\u%04x", c);
      p++;
      continue;
    }
    if (c < 0x80) {
      fputc(c, f);
      p++;
      continue;
    }
    /* UTF-8: accept well-formed sequences only (no overlongs, no
     * surrogates, nothing above U+10FFFF). */
    if (c >= 0xc2 && c <= 0xdf)
      need = 1;
    else if (c >= 0xe0 && c <= 0xef)
      need = 2;
    else if (c >= 0xf0 && c <= 0xf4)
      need = 3;
    for (k = 1; k <= need; k++)
      if ((p[k] & 0xc0) != 0x80)
        break;
    if (need > 0 && k > need && !(c == 0xe0 && p[1] < 0xa0) &&
        !(c == 0xed && p[1] >= 0xa0) && !(c == 0xf0 && p[1] < 0x90) &&
        !(c == 0xf4 && p[1] >= 0x90)) {
      fwrite(p, 1, need + 1, f);
      p += need + 1;
    } else {
      fputs("\\ufffd", f);
      p++;
    }
  }
  fputc('"', f);
}

/* One view of the lock: which key it reads and what it found. */
struct view {
  const char *key;  /* NAME, or NAME:dlock-rw */
  const char *what; /* "exclusive", "fair" or "shared" */
  dlock_lock_state_t *st;
  bool held;
};

/* What keeps a hold whose key has no expiry (ttl -1): on ZooKeeper and
 * PostgreSQL and MySQL the holder's session, which the service ends when the
 * client stops; on Redis nothing but a release. */
static const char *no_expiry_means(const char *url) {
  if (url &&
      (strncasecmp(url, "zk", 2) == 0 || strncasecmp(url, "zookeeper", 9) == 0))
    return "the holder's ZooKeeper session (its node is ephemeral)";
  if (url && (strncasecmp(url, "postgres", 8) == 0 ||
              strncasecmp(url, "mysql", 5) == 0 ||
              strncasecmp(url, "mariadb", 7) == 0))
    return "the holder's database session (the server ends it when the "
           "holder stops for longer than its lease)";
  return "none (the key has no expiry)";
}
static void print_plain(const struct cli_ctx *c, const struct view *v) {
  const dlock_lock_state_t *st = v->st;
  char *buf;
  size_t cap = 4 * DLOCK_NAME_MAX + 64, i;
  buf = malloc(cap);
  if (buf == NULL)
    return;
  cli_printable(c->o->name, DLOCK_NAME_MAX, buf, cap);
  printf("lock:    %s\n", buf);
  if (strcmp(v->key, c->o->name) != 0) {
    cli_printable(v->key, DLOCK_NAME_MAX + 16, buf, cap);
    printf("key:     %s (the read-write lock of -s)\n", buf);
  }
  printf("kind:    %s\n", v->held ? st->kind : "free");
  for (i = 0; v->held && i < st->nholders; i++) {
    cli_printable(st->holders[i].owner ? st->holders[i].owner : "?",
                  DLOCK_NAME_MAX, buf, cap);
    if (st->holders[i].side != NULL)
      printf("holder:  %s (count %lld, %s)\n", buf,
             (long long)st->holders[i].count, st->holders[i].side);
    else
      printf("holder:  %s (count %lld)\n", buf,
             (long long)st->holders[i].count);
    cli_who_print(st->holders[i].owner,
              st->holder_infos ? st->holder_infos[i] : NULL);
  }
  if (v->held) {
    if (st->ttl_ms >= 0)
      printf("lease:   %lld ms left\n", (long long)st->ttl_ms);
    else
      printf("lease:   %s\n", no_expiry_means(c->url));
  }
  for (i = 0; i < st->nwaiters; i++) {
    cli_printable(st->waiters[i] ? st->waiters[i] : "?", DLOCK_NAME_MAX, buf,
                  cap);
    if (st->waiter_deadlines_ms != NULL)
      printf("waiter:  %s (queued %zu, keeps its place for %lld ms)\n", buf,
             i + 1, (long long)st->waiter_deadlines_ms[i]);
    else
      printf("waiter:  %s (queued %zu)\n", buf, i + 1);
    cli_who_print(st->waiters[i], st->waiter_infos ? st->waiter_infos[i] : NULL);
  }
  if (st->token > 0)
    printf("token:   %lld (the last fencing token granted)\n",
           (long long)st->token);
  free(buf);
}

/* Field names of the first version (name, kind, held, lease_ms, holders
 * with owner and count, waiters) keep their meaning; the rest were added
 * with the lock kinds. */
static void print_json(const struct cli_ctx *c, const struct view *v) {
  const dlock_lock_state_t *st = v->st;
  size_t i;
  fputs("{\"name\":", stdout);
  cli_json_string(stdout, c->o->name);
  fputs(",\"key\":", stdout);
  cli_json_string(stdout, v->key);
  fputs(",\"view\":", stdout);
  cli_json_string(stdout, v->what);
  fputs(",\"kind\":", stdout);
  cli_json_string(stdout, v->held ? st->kind : "free");
  printf(",\"held\":%s,\"lease_ms\":", v->held ? "true" : "false");
  if (v->held && st->ttl_ms >= 0)
    printf("%lld", (long long)st->ttl_ms);
  else
    fputs("null", stdout);
  fputs(",\"holders\":[", stdout);
  for (i = 0; v->held && i < st->nholders; i++) {
    fputs(i ? ",{\"owner\":" : "{\"owner\":", stdout);
    cli_json_string(stdout, st->holders[i].owner ? st->holders[i].owner : "");
    printf(",\"count\":%lld,\"side\":", (long long)st->holders[i].count);
    if (st->holders[i].side != NULL)
      cli_json_string(stdout, st->holders[i].side);
    else
      fputs("null", stdout);
    cli_who_print_json(st->holder_infos ? st->holder_infos[i] : NULL);
    fputc('}', stdout);
  }
  fputs("],\"waiters\":[", stdout);
  for (i = 0; i < st->nwaiters; i++) {
    if (i)
      fputc(',', stdout);
    cli_json_string(stdout, st->waiters[i] ? st->waiters[i] : "");
  }
  fputs("],\"waiter_deadlines_ms\":", stdout);
  if (st->waiter_deadlines_ms != NULL) {
    fputc('[', stdout);
    for (i = 0; i < st->nwaiters; i++)
      printf("%s%lld", i ? "," : "", (long long)st->waiter_deadlines_ms[i]);
    fputc(']', stdout);
  } else {
    fputs("null", stdout);
  }
  fputs(",\"token\":", stdout);
  if (st->token > 0)
    printf("%lld", (long long)st->token);
  else
    fputs("null", stdout);
  /* added with holder identities: each waiter with its position */
  fputs(",\"queue\":[", stdout);
  for (i = 0; i < st->nwaiters; i++) {
    fputs(i ? ",{\"owner\":" : "{\"owner\":", stdout);
    cli_json_string(stdout, st->waiters[i] ? st->waiters[i] : "");
    printf(",\"position\":%zu", i + 1);
    cli_who_print_json(st->waiter_infos ? st->waiter_infos[i] : NULL);
    fputc('}', stdout);
  }
  fputs("]}\n", stdout);
}

/* Reads one view: `shared_rw` selects NAME:dlock-rw. 0 or an exit status. */
static int read_view(const struct cli_ctx *c, dlock_client_t *client,
                     bool shared_rw, dlock_lock_kind_t kind, struct view *v) {
  dlock_lock_t *lock;
  int rc = cli_lock_new(c, client, shared_rw, kind, &lock), err;
  if (rc != 0)
    return rc;
  v->key = shared_rw ? c->shared_name : c->o->name;
  v->what = shared_rw ? "shared" : kind == DLOCK_FAIR ? "fair" : "exclusive";
  v->st = NULL;
  err = dlock_lock_state(lock, &v->st);
  dlock_lock_free(lock);
  if (err != 0)
    return cli_lib_error(c, c->name_shown, err);
  v->held = v->st->nholders > 0 && v->st->kind != NULL &&
            strcmp(v->st->kind, "free") != 0;
  return 0;
}

/*
 * Views: plain --status reads the fenced lock NAME (holders, dlock's queue
 * of waiters, the token); when that is free it also reads the read-write
 * lock NAME:dlock-rw and shows it instead if -s holders hold it, so "free"
 * (exit 1) means that an exclusive dlock would get the lock at once. -F
 * reads the fair lock NAME (its queue with each waiter's deadline), -s the
 * read-write lock (readers, or the exclusive holder's write side).
 */
/*
 * Several -u (a Redlock, or --all): each server's own view of the lock NAME
 * (fenced), one line (or one JSON object) per server, read with a client of
 * its own so that a server that is down shows as such. Held (exit 0) when a
 * majority holds it for one owner (every server with --all).
 */
static int status_nodes(struct cli_ctx *c) {
  int held_by_first = 0, answered = 0;
  char first_owner[256] = "";
  if (c->o->json)
    fputs("{\"name\":", stdout);
  if (c->o->json) {
    cli_json_string(stdout, c->o->name);
    printf(",\"mode\":\"%s\",\"nodes\":[", c->o->all ? "all" : "redlock");
  } else {
    char nm[160];
    cli_printable(c->o->name, 120, nm, sizeof nm);
    printf("lock:    %s (%s over %d servers)\n", nm,
           c->o->all ? "every server" : "Redlock, a majority", c->nurls);
  }
  for (int i = 0; i < c->nurls; i++) {
    dlock_client_t *client = NULL;
    dlock_lock_t *lock = NULL;
    dlock_lock_state_t *st = NULL;
    int err = cli_connect_url(c, i, true, &client) == 0 ? 0 : -1;
    char why[256] = "";
    if (err != 0)
      snprintf(why, sizeof why, "%s", dlock_last_error());
    if (err == 0 && (err = dlock_lock_new_kind(
                         client, c->o->name,
                         cli_exclusive_kind(client, c->o->name), &lock)) == 0)
      err = dlock_lock_state(lock, &st);
    if (err != 0 && why[0] == '\0')
      snprintf(why, sizeof why, "%s", dlock_last_error());
    bool held = err == 0 && st->nholders > 0 && st->kind != NULL &&
                strcmp(st->kind, "free") != 0;
    const char *owner = held && st->holders[0].owner ? st->holders[0].owner
                                                      : "";
    if (err == 0)
      answered++;
    if (held && first_owner[0] == '\0')
      snprintf(first_owner, sizeof first_owner, "%s", owner);
    if (held && strcmp(owner, first_owner) == 0)
      held_by_first++;
    if (c->o->json) {
      printf("%s{\"url\":", i ? "," : "");
      cli_json_string(stdout, c->urls_shown[i]);
      printf(",\"up\":%s,\"held\":%s", err == 0 ? "true" : "false",
             held ? "true" : "false");
      fputs(",\"owner\":", stdout);
      if (held)
        cli_json_string(stdout, owner);
      else
        fputs("null", stdout);
      cli_who_print_json(held && st->holder_infos ? st->holder_infos[0]
                                                  : NULL);
      fputs(",\"lease_ms\":", stdout);
      if (held && st->ttl_ms >= 0)
        printf("%lld", (long long)st->ttl_ms);
      else
        fputs("null", stdout);
      fputs(",\"token\":", stdout);
      if (err == 0 && st->token > 0)
        printf("%lld", (long long)st->token);
      else
        fputs("null", stdout);
      fputs(",\"error\":", stdout);
      if (err != 0)
        cli_json_string(stdout, why);
      else
        fputs("null", stdout);
      fputc('}', stdout);
    } else {
      char ow[160];
      cli_printable(owner, 120, ow, sizeof ow);
      if (err != 0)
        printf("node %d:  %s: unreachable (%s)\n", i + 1, c->urls_shown[i],
               why);
      else if (held)
        printf("node %d:  %s: held by %s (count %lld, %lld ms left, token "
               "%lld)\n",
               i + 1, c->urls_shown[i], ow, (long long)st->holders[0].count,
               (long long)st->ttl_ms, (long long)st->token);
      if (held)
        cli_who_print(owner, st->holder_infos ? st->holder_infos[0] : NULL);
      else
        printf("node %d:  %s: free (token %lld)\n", i + 1, c->urls_shown[i],
               (long long)st->token);
    }
    dlock_lock_state_free(st);
    dlock_lock_free(lock);
    dlock_client_free(client);
  }
  int need = c->o->all ? c->nurls : c->nurls / 2 + 1;
  bool held = held_by_first >= need;
  if (c->o->json)
    printf("],\"held\":%s}\n", held ? "true" : "false");
  else
    printf("held:    %s (%d of %d servers hold it for one owner; %d "
           "needed)\n",
           held ? "yes" : "no", held_by_first, c->nurls, need);
  if (fflush(stdout) != 0)
    return CLI_EX_SOFTWARE;
  if (answered == 0)
    return CLI_EX_UNAVAILABLE;
  return held ? 0 : 1;
}

int cli_status(struct cli_ctx *c) {
  dlock_client_t *client;
  struct view v, rw;
  int rc;
  if (c->nurls > 1)
    return status_nodes(c);
  rc = cli_connect(c, &client);
  if (rc != 0)
    return rc;
  memset(&v, 0, sizeof v);
  memset(&rw, 0, sizeof rw);
  if (c->o->kind == CLI_KIND_SHARED)
    rc = read_view(c, client, true, DLOCK_READ, &v);
  else
    rc = read_view(c, client, false, cli_main_kind(c), &v);
  if (rc == 0 && !v.held && c->o->kind == CLI_KIND_EXCLUSIVE &&
      cli_has_kind(c, client, DLOCK_READ)) {
    rc = read_view(c, client, true, DLOCK_READ, &rw);
    if (rc == 0 && rw.held) {
      dlock_lock_state_free(v.st);
      v = rw;
      rw.st = NULL;
    }
  }
  if (rc == 0) {
    if (c->o->json)
      print_json(c, &v);
    else
      print_plain(c, &v);
    if (fflush(stdout) != 0)
      rc = CLI_EX_SOFTWARE;
    else
      rc = v.held ? 0 : 1;
  }
  dlock_lock_state_free(v.st);
  dlock_lock_state_free(rw.st);
  dlock_client_free(client);
  return rc;
}

/* Breaks what the kind takes: the main lock NAME (fenced, or fair with -F)
 * and the read-write lock NAME:dlock-rw; with -s only the latter. */
static int force_unlock_one(struct cli_ctx *c, dlock_client_t *client);

/* With several -u: on every server, each with a client of its own. */
int cli_force_unlock(struct cli_ctx *c) {
  dlock_client_t *client;
  int rc = 0;
  for (int i = 0; i < c->nurls; i++) {
    int one = c->nurls > 1 ? cli_connect_url(c, i, false, &client)
                           : cli_connect(c, &client);
    if (one == 0)
      one = force_unlock_one(c, client);
    if (one != 0 && rc == 0)
      rc = one;
  }
  return rc;
}

static int force_unlock_one(struct cli_ctx *c, dlock_client_t *client) {
  dlock_lock_t *lock = NULL;
  bool was = false, was_rw = false;
  int rc = 0, err = 0;
  if (c->o->kind != CLI_KIND_SHARED) {
    rc = cli_lock_new(c, client, false, cli_main_kind(c), &lock);
    if (rc == 0)
      err = dlock_lock_force_release(lock, &was);
    dlock_lock_free(lock);
    lock = NULL;
  }
  if (rc == 0 && err == 0 && cli_has_kind(c, client, DLOCK_WRITE)) {
    rc = cli_lock_new(c, client, true, DLOCK_WRITE, &lock);
    if (rc == 0)
      err = dlock_lock_force_release(lock, &was_rw);
    dlock_lock_free(lock);
  }
  if (rc == 0 && err != 0) {
    rc = cli_lib_error(c, c->name_shown, err);
  } else if (rc == 0) {
    printf("%s: %s\n", c->name_shown,
           was || was_rw ? "unlocked (it was held)" : "was not locked");
    rc = fflush(stdout) != 0 ? CLI_EX_SOFTWARE : 0;
  }
  dlock_client_free(client);
  return rc;
}
