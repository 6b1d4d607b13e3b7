/*
 * redlock.h - the Redlock backend (redlock.c) and what its public calls
 * (api.c) ask of it.
 */
#ifndef DLOCK_REDLOCK_REDLOCK_H
#define DLOCK_REDLOCK_REDLOCK_H

#include <stddef.h>

#include "core/backend.h"
#include "core/options.h"

/* Redlock's own settings (dlock_options_set_redlock_timing), a block of
 * dlock_options_t (core/options.h). */
typedef struct dlock__redlock_options {
  int64_t node_timeout_ms; /* one node's answer, > 0 */
  int64_t drift_permille;  /* drift per 1000 of a lease */
  int64_t drift_ms;        /* drift added, >= 0 */
} dlock__redlock_options;

/* The block's type (defaults, copy), for the setter. */
extern const dlock__options_ext_type dlock__redlock_options_type;
/* o's Redlock settings, or their defaults when none was set. */
const dlock__redlock_options *
dlock__redlock_options_of(const struct dlock_options *o);

/* Redlock over several Redis masters: not in the registry, as no one URL
 * names it; dlock_client_new_redlock opens it with the nodes' URLs one a
 * line (dlock__client_open). */
extern const dlock__backend_ops dlock__redlock_backend;
size_t dlock__redlock_node_count(const void *be);
/* One node's own view of a lock (node from 0). */
int dlock__redlock_node_state(void *be, size_t node, dlock_lock_kind_t kind,
                              const char *name, dlock_lock_state_t **out);

#endif
