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
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void json_string(FILE *f, const char *s) {
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

static void print_plain(const struct cli_ctx *c, const dlock_lock_state_t *st,
                        bool held) {
  char *buf;
  size_t cap = 4 * DLOCK_NAME_MAX + 8, i;
  buf = malloc(cap);
  if (buf == NULL)
    return;
  cli_printable(c->o->name, DLOCK_NAME_MAX, buf, cap);
  printf("lock:    %s\n", buf);
  printf("kind:    %s\n", held ? st->kind : "free");
  for (i = 0; held && i < st->nholders; i++) {
    cli_printable(st->holders[i].owner ? st->holders[i].owner : "?",
                  DLOCK_NAME_MAX, buf, cap);
    printf("holder:  %s (count %lld)\n", buf, (long long)st->holders[i].count);
  }
  if (held) {
    if (st->ttl_ms >= 0)
      printf("lease:   %lld ms left\n", (long long)st->ttl_ms);
    else
      printf("lease:   none (the key has no expiry)\n");
  }
  for (i = 0; i < st->nwaiters; i++) {
    cli_printable(st->waiters[i] ? st->waiters[i] : "?", DLOCK_NAME_MAX, buf,
                  cap);
    printf("waiter:  %s (queued %zu)\n", buf, i + 1);
  }
  free(buf);
}

static void print_json(const struct cli_ctx *c, const dlock_lock_state_t *st,
                       bool held) {
  size_t i;
  fputs("{\"name\":", stdout);
  json_string(stdout, c->o->name);
  fputs(",\"kind\":", stdout);
  json_string(stdout, held ? st->kind : "free");
  printf(",\"held\":%s,\"lease_ms\":", held ? "true" : "false");
  if (held && st->ttl_ms >= 0)
    printf("%lld", (long long)st->ttl_ms);
  else
    fputs("null", stdout);
  fputs(",\"holders\":[", stdout);
  for (i = 0; held && i < st->nholders; i++) {
    fputs(i ? ",{\"owner\":" : "{\"owner\":", stdout);
    json_string(stdout, st->holders[i].owner ? st->holders[i].owner : "");
    printf(",\"count\":%lld}", (long long)st->holders[i].count);
  }
  fputs("],\"waiters\":[", stdout);
  for (i = 0; i < st->nwaiters; i++) {
    if (i)
      fputc(',', stdout);
    json_string(stdout, st->waiters[i] ? st->waiters[i] : "");
  }
  fputs("]}\n", stdout);
}

int cli_status(struct cli_ctx *c) {
  dlock_client_t *client;
  dlock_lock_t *lock;
  dlock_lock_state_t *st = NULL;
  bool held;
  int rc = cli_connect(c, &client, &lock), err;
  if (rc != 0)
    return rc;
  err = dlock_lock_state(lock, &st);
  if (err != 0) {
    rc = cli_lib_error(c, c->name_shown, err);
  } else {
    held =
        st->nholders > 0 && st->kind != NULL && strcmp(st->kind, "free") != 0;
    if (c->o->json)
      print_json(c, st, held);
    else
      print_plain(c, st, held);
    if (fflush(stdout) != 0)
      rc = CLI_EX_SOFTWARE;
    else
      rc = held ? 0 : 1;
    dlock_lock_state_free(st);
  }
  dlock_lock_free(lock);
  dlock_client_free(client);
  return rc;
}

int cli_force_unlock(struct cli_ctx *c) {
  dlock_client_t *client;
  dlock_lock_t *lock;
  bool was = false;
  int rc = cli_connect(c, &client, &lock), err;
  if (rc != 0)
    return rc;
  err = dlock_lock_force_release(lock, &was);
  if (err != 0) {
    rc = cli_lib_error(c, c->name_shown, err);
  } else {
    printf("%s: %s\n", c->name_shown,
           was ? "unlocked (it was held)" : "was not locked");
    rc = fflush(stdout) != 0 ? CLI_EX_SOFTWARE : 0;
  }
  dlock_lock_free(lock);
  dlock_client_free(client);
  return rc;
}
