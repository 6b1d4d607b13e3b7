/*
 * options.h - the Redis backend's own settings, kept in dlock_options_t as
 * a block of this backend (core/options.h): the sentinels' credentials,
 * the replica wait and the key layout. Their public setters are in
 * options.c.
 */
#ifndef DLOCK_REDIS_OPTIONS_H
#define DLOCK_REDIS_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "core/options.h"

typedef struct dlock__redis_options {
  char *sentinel_user; /* redis-sentinel://: the sentinels' own AUTH */
  char *sentinel_password;
  int64_t replica_wait_ms; /* WAIT after write scripts; 0: off */
  /* key layout (dlock_options_set_layout): NULL unset (the URL's
   * ?layout=, else Redisson's), "redisson" or "spring" */
  char *layout;
  char *spring_registry; /* the spring layout's registry key, or NULL */
} dlock__redis_options;

/* A spring registry key of n bytes: 0 or DLOCK_EINVAL with detail. */
int dlock__check_spring_registry(const char *key, size_t n);

/* o's Redis settings, or their defaults when none was set. */
const dlock__redis_options *
dlock__redis_options_of(const struct dlock_options *o);

#endif
