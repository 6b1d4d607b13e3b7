/*
 * options.h - the Redis backend's own settings, kept in dlock_options_t as
 * a block of this backend (core/options.h): the sentinels' credentials and
 * the replica wait. Their public setters are in options.c.
 */
#ifndef DLOCK_REDIS_OPTIONS_H
#define DLOCK_REDIS_OPTIONS_H

#include <stdint.h>

#include "core/options.h"

typedef struct dlock__redis_options {
  char *sentinel_user; /* redis-sentinel://: the sentinels' own AUTH */
  char *sentinel_password;
  int64_t replica_wait_ms; /* WAIT after write scripts; 0: off */
} dlock__redis_options;

/* o's Redis settings, or their defaults when none was set. */
const dlock__redis_options *
dlock__redis_options_of(const struct dlock_options *o);

#endif
