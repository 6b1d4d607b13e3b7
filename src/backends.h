/*
 * backends.h - this build's backends (backends.c), for the calls outside
 * the core that pick one by URL.
 */
#ifndef DLOCK_BACKENDS_H
#define DLOCK_BACKENDS_H

#include "core/backend.h"

/* The backend of this build serving url's scheme, or NULL with DLOCK_EURL
 * set (dlock__registry_find). */
const dlock__backend_ops *dlock__backend_for_url(const char *url);

#endif
