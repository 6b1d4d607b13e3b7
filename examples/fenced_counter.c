/*
 * fenced_counter.c - a fenced lock guarding a write to another store.
 *
 * Design note. A lease-based lock cannot stop a holder that was paused (GC,
 * SIGSTOP, a stalled VM) past its lease from writing after someone else got
 * the lock. A fenced lock gives every grant a larger token; the store keeps
 * the largest token it has accepted and refuses writes that carry a smaller
 * one. Here the "store" is a Redis hash {value, token} updated by one Lua
 * script that does exactly that check, so a stale holder's write is refused
 * by the store itself, whatever the holder believes.
 *
 *   fenced_counter [URL [NAME]]  (default redis://127.0.0.1:6379, "example")
 *
 * Each run adds 1 to the counter under the lock, with its token; run many at
 * once and the counter counts every run exactly once.
 */
#define _POSIX_C_SOURCE 200809L

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <dlock/dlock.h>
#include <hiredis/hiredis.h>

/* The store's side of fencing: write only with a token no smaller than the
 * largest seen. Returns the new value, or an error reply for a stale token. */
static const char FENCED_INCR[] =
    "local seen = tonumber(redis.call('hget', KEYS[1], 'token') or '0') "
    "if tonumber(ARGV[1]) < seen then "
    "  return redis.error_reply('STALE token ' .. ARGV[1] .. ' < ' .. seen) "
    "end "
    "redis.call('hset', KEYS[1], 'token', ARGV[1]) "
    "return redis.call('hincrby', KEYS[1], 'value', 1)";

int main(int argc, char **argv) {
  const char *url = argc > 1 ? argv[1] : "redis://127.0.0.1:6379";
  const char *name = argc > 2 ? argv[2] : "example";
  dlock_client_t *client = NULL;
  int rc = dlock_client_new(&client, url, NULL);
  if (rc != 0) {
    fprintf(stderr, "fenced_counter: %s\n", dlock_last_error());
    return 1;
  }
  dlock_lock_t *lock = NULL;
  rc = dlock_lock_new_kind(client, name, DLOCK_FENCED, &lock);
  int64_t token = 0;
  if (rc == 0)
    rc = dlock_lock_acquire_fenced(lock, 30000, DLOCK_LEASE_WATCHDOG, &token);
  if (rc != 0) {
    fprintf(stderr, "fenced_counter: %s: %s\n", dlock_err_name(rc),
            dlock_last_error());
    dlock_lock_free(lock);
    dlock_client_free(client);
    return 1;
  }

  /* The store: here the same Redis (host and port from the URL would be
   * parsed in a real program; this example assumes a plain TCP URL). */
  char host[256] = "127.0.0.1";
  int port = 6379;
  if (strncmp(url, "redis://", 8) == 0)
    sscanf(url + 8, "%255[^:/]:%d", host, &port);
  redisContext *store = redisConnect(host, port);
  int status = 1;
  if (store != NULL && store->err == 0) {
    char key[300], tok[32];
    snprintf(key, sizeof key, "%s:counter", name);
    snprintf(tok, sizeof tok, "%" PRId64, token);
    redisReply *r = redisCommand(store, "EVAL %s 1 %s %s", FENCED_INCR, key,
                                 tok);
    if (r != NULL && r->type == REDIS_REPLY_INTEGER) {
      printf("token %" PRId64 ": counter is now %lld\n", token, r->integer);
      status = 0;
    } else {
      printf("token %" PRId64 ": write refused: %s\n", token,
             r != NULL && r->str != NULL ? r->str : "no reply");
    }
    freeReplyObject(r);
  } else {
    fprintf(stderr, "fenced_counter: cannot reach the store\n");
  }
  if (store != NULL)
    redisFree(store);

  rc = dlock_lock_release(lock);
  if (rc != 0)
    fprintf(stderr, "fenced_counter: release: %s\n", dlock_last_error());
  dlock_lock_free(lock);
  dlock_client_free(client);
  return status;
}
