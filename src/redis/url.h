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

#include "core/uri.h"
#include "net/endpoint.h"

/* 0, DLOCK_EURL, DLOCK_EINVAL, DLOCK_ENOMEM (detail set); *ep is all-zero
 * on failure. Schemes are read without regard to case. */
int dlock__redis_url_parse(const char *url, dlock__endpoint *ep);

/* A bare TCP endpoint for one host of a split URL (no credentials, db 0),
 * displayed "redis://host:port". 0 or DLOCK_ENOMEM. */
int dlock__redis_endpoint_of_host(const dlock__uri_host *h,
                                  dlock__endpoint *ep);

#endif
