/*
 * url.h - Redis URLs parsed into endpoints, on the core's splitter
 * (core/uri.h).
 *
 *   redis://[[user]:password@]host[:port][/db][?db=N]
 *   rediss://...  the same over TLS
 *   unix:///path/to/socket[?db=N]
 */
#ifndef DLOCK_REDIS_URL_H
#define DLOCK_REDIS_URL_H

#include "net/endpoint.h"

/* 0, DLOCK_EURL, DLOCK_EINVAL, DLOCK_ENOMEM (detail set); *ep is all-zero
 * on failure. Schemes are read without regard to case. */
int dlock__redis_url_parse(const char *url, dlock__endpoint *ep);

#endif
