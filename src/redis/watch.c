/*
 * watch.c - the Redis pub/sub connection of a client: writing
 * (UN)SUBSCRIBE without blocking and turning what it reads into
 * dlock__watch_event callbacks. channels.c decides what to subscribe and
 * dials it (on the client's dialling worker); from then on the event loop
 * thread owns it completely. Any failure is returned; channels.c then
 * closes it, disarms every wait (messages may have been lost) and dials
 * again.
 */
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/error.h"
#include "redis/redis.h"

void dlock__redis_watch_disconnect(void *be) {
  dlock__redis *r = be;
  dlock__conn_close(r->watch);
  r->watch = NULL;
}

int dlock__redis_watch_flush(void *be) {
  dlock__redis *r = be;
  if (!r->watch)
    return dlock__seterr(DLOCK_EUNAVAILABLE, "pub/sub connection is closed");
  return dlock__conn_write_some(r->watch);
}

/* One SUBSCRIBE or UNSUBSCRIBE command with the n names (the core keeps n
 * small and counts on one command per call to match the answers). */
int dlock__redis_watch_subscribe(void *be, bool subscribe,
                                 const char *const *chans, const size_t *lens,
                                 size_t n) {
  dlock__redis *r = be;
  if (!r->watch)
    return dlock__seterr(DLOCK_EUNAVAILABLE, "pub/sub connection is closed");
  const char **argv = dlock__calloc(n + 1, sizeof *argv);
  size_t *argl = dlock__calloc(n + 1, sizeof *argl);
  int rc = DLOCK_ENOMEM;
  if (argv && argl) {
    argv[0] = subscribe ? "SUBSCRIBE" : "UNSUBSCRIBE";
    argl[0] = strlen(argv[0]);
    for (size_t i = 0; i < n; i++) {
      argv[i + 1] = chans[i];
      argl[i + 1] = lens[i];
    }
    rc = dlock__conn_append(r->watch, (int)n + 1, argv, argl);
  }
  dlock__free((void *)argv);
  dlock__free(argl);
  return rc ? rc : dlock__conn_write_some(r->watch);
}

static bool str_is(const redisReply *e, const char *s) {
  return e->type == REDIS_REPLY_STRING && e->len == strlen(s) &&
         memcmp(e->str, s, e->len) == 0;
}

int dlock__redis_watch_read(void *be, dlock__watch_fn fn, void *ud) {
  dlock__redis *r = be;
  if (!r->watch)
    return dlock__seterr(DLOCK_EUNAVAILABLE, "pub/sub connection is closed");
  int rc = dlock__conn_read_some(r->watch);
  /* deliver what was parsed even when the read then failed */
  for (int guard = 0; guard < 100000; guard++) {
    redisReply *m = NULL;
    int t = dlock__conn_take_reply(r->watch, &m);
    if (t < 0)
      return t;
    if (t == 0)
      break;
    if (m->type == REDIS_REPLY_ERROR) {
      /* only SUBSCRIBE can be refused (ACL channel rules, NOPERM): the
       * connection stays good, the pending channels fail */
      int e = dlock__redis_error(m, "SUBSCRIBE refused");
      const char *msg = dlock_last_error();
      fn(ud, DLOCK__W_REFUSED, e, NULL, 0, msg, strlen(msg));
      freeReplyObject(m);
      continue;
    }
    if (m->type == REDIS_REPLY_ARRAY && m->elements == 3 &&
        m->element[1]->type == REDIS_REPLY_STRING) {
      const redisReply *kind = m->element[0], *ch = m->element[1],
                       *pl = m->element[2];
      if (str_is(kind, "message") && pl->type == REDIS_REPLY_STRING)
        fn(ud, DLOCK__W_MESSAGE, 0, ch->str, ch->len, pl->str, pl->len);
      else if (str_is(kind, "subscribe"))
        fn(ud, DLOCK__W_SUBSCRIBED, 0, ch->str, ch->len, NULL, 0);
      else if (str_is(kind, "unsubscribe"))
        fn(ud, DLOCK__W_UNSUBSCRIBED, 0, ch->str, ch->len, NULL, 0);
    }
    freeReplyObject(m);
  }
  return rc;
}
