/*
 * options.c - the Redis backend's own settings: their defaults, their
 * public setters (dlock_options_set_sentinel_credentials,
 * dlock_options_set_replica_wait, dlock_options_set_layout,
 * dlock_options_set_spring_registry), and how the core copies and frees them
 * (a block of dlock_options_t, core/options.h).
 */
#include "redis/options.h"

#include <string.h>

#include "core/alloc.h"
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
                 dlock__options_dup(&d->sentinel_password,
                                    s->sentinel_password) ||
                 dlock__options_dup(&d->layout, s->layout) ||
                 dlock__options_dup(&d->spring_registry, s->spring_registry)
             ? DLOCK_ENOMEM
             : 0;
}

static void ro_clear(void *block) {
  dlock__redis_options *r = block;
  dlock__free_secret(r->sentinel_user);
  dlock__free_secret(r->sentinel_password);
  dlock__free(r->layout);
  dlock__free(r->spring_registry);
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

int dlock_options_set_layout(dlock_options_t *opts, const char *layout) {
  if (!opts)
    return dlock__seterr(DLOCK_EINVAL,
                         "dlock_options_set_layout: opts is NULL");
  char *copy = NULL;
  if (layout) {
    if (strcmp(layout, "redisson") != 0 && strcmp(layout, "spring") != 0)
      return dlock__seterr(DLOCK_EINVAL,
                           "unknown layout '%.64s' (expected redisson or "
                           "spring)",
                           layout);
    if (!(copy = dlock__strdup(layout)))
      return DLOCK_ENOMEM;
  }
  dlock__redis_options *r = dlock__options_ext_mut(opts, &redis_options);
  if (!r) {
    dlock__free(copy);
    return DLOCK_ENOMEM;
  }
  dlock__free(r->layout);
  r->layout = copy;
  return 0;
}

int dlock__check_spring_registry(const char *key, size_t n) {
  if (n == 0 || n > DLOCK_SPRING_REGISTRY_MAX)
    return dlock__seterr(DLOCK_EINVAL,
                         "the spring registry key must be 1 to %d bytes (got "
                         "%zu)",
                         DLOCK_SPRING_REGISTRY_MAX, n);
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)key[i];
    if (ch < 0x20 || ch == 0x7f)
      return dlock__seterr(DLOCK_EINVAL,
                           "the spring registry key must have no control "
                           "characters");
  }
  return 0;
}

int dlock_options_set_spring_registry(dlock_options_t *opts, const char *key) {
  if (!opts)
    return dlock__seterr(DLOCK_EINVAL,
                         "dlock_options_set_spring_registry: opts is NULL");
  char *copy = NULL;
  if (key) {
    int rc = dlock__check_spring_registry(key, strnlen(key, 4096));
    if (rc)
      return rc;
    if (!(copy = dlock__strdup(key)))
      return DLOCK_ENOMEM;
  }
  dlock__redis_options *r = dlock__options_ext_mut(opts, &redis_options);
  if (!r) {
    dlock__free(copy);
    return DLOCK_ENOMEM;
  }
  dlock__free(r->spring_registry);
  r->spring_registry = copy;
  return 0;
}
