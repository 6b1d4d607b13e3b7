/*
 * client.h - the client's life: creation (dlock__client_open), teardown
 * and its event loop (client.c); and the lock handles' call brackets
 * (lock.c). The client object itself, and what every module uses of it,
 * is client_base.h's.
 */
#ifndef DLOCK_CORE_CLIENT_H
#define DLOCK_CORE_CLIENT_H

#include "core/client_base.h"

/* Creates a client of backend `ops` and opens the backend with url and a
 * copy of opts: the public calls that create clients build on it
 * (dlock_client_new, which picks ops by the URL's scheme; a backend's own
 * entry point, such as one over several servers that gets their URLs
 * joined). 0 and *out, or an error with detail set. */
int dlock__client_open(dlock_client_t **out, const dlock__backend_ops *ops,
                       const char *url, const dlock_options_t *opts);
/* The backend state of c when c is a client of backend `ops`, else NULL
 * (for a backend's own public calls). c must be checked. */
static inline void *dlock__client_backend_of(const struct dlock_client *c,
                                             const dlock__backend_ops *ops) {
  return c->ops == ops ? c->be : NULL;
}
/* Brackets a public call on a lock handle (lock.c): checks the handle,
 * then dlock__call_begin on its client; _end returns rc. */
int dlock__lock_call_begin(const struct dlock_lock *l, const char *fn);
int dlock__lock_call_end(const struct dlock_lock *l, int rc);
#endif
