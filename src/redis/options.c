/*
 * options.c - the Redis backend's own settings: their defaults, their
 * public setters (dlock_options_set_sentinel_credentials,
 * dlock_options_set_replica_wait), and how the core copies and frees them
 * (a block of dlock_options_t, core/options.h).
 */
#include "redis/options.h"

#include "core/error.h"

#define DEFAULT_REPLICA_WAIT_MS 1000 /* Redisson's slavesSyncTimeout */

static const dlock__redis_options defaults = {.replica_wait_ms =
                                                  DEFAULT_REPLICA_WAIT_MS};

static void ro_init(void *block) { *(dlock__redis_options *)block = defaults; }

static int ro_copy(void *dst, const void *src) {
  dlock__redis_options *d = dst;
  const dlock__redis_options *s = src;
  d->replica_wait_ms = s->replica_wait_ms;
  return dlock__options_dup(&d->sentinel_user, s->sentinel_user) ||
                 dlock__options_dup(&d->sentinel_password, s->sentinel_password)
             ? DLOCK_ENOMEM
             : 0;
}

static void ro_clear(void *block) {
  dlock__redis_options *r = block;
  dlock__free_secret(r->sentinel_user);
  dlock__free_secret(r->sentinel_password);
}

static const dlock__options_ext_type redis_options = {
    .size = sizeof(dlock__redis_options),
    .init = ro_init,
    .copy = ro_copy,
    .clear = ro_clear,
};

const dlock__redis_options *
dlock__redis_options_of(const struct dlock_options *o) {
  const dlock__redis_options *r = dlock__options_ext_get(o, &redis_options);
  return r ? r : &defaults;
}

int dlock_options_set_sentinel_credentials(dlock_options_t *opts,
                                           const char *user,
                                           const char *password) {
  if (!opts)
    return dlock__seterr(DLOCK_EINVAL,
                         "dlock_options_set_sentinel_credentials: opts is "
                         "NULL");
  dlock__redis_options *r = dlock__options_ext_mut(opts, &redis_options);
  if (!r)
    return DLOCK_ENOMEM;
  return dlock__options_set_credentials(&r->sentinel_user,
                                        &r->sentinel_password, user, password);
}

int dlock_options_set_replica_wait(dlock_options_t *opts, int64_t ms) {
  if (!opts)
    return dlock__seterr(DLOCK_EINVAL,
                         "dlock_options_set_replica_wait: opts is NULL");
  int rc =
      ms == 0 ? 0
              : dlock__options_check_ms("replica wait (0 turns it off)", ms, 1);
  dlock__redis_options *r =
      rc ? NULL : dlock__options_ext_mut(opts, &redis_options);
  if (!rc && !r)
    rc = DLOCK_ENOMEM;
  if (!rc)
    r->replica_wait_ms = ms;
  return rc;
}
