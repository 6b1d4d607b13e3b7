/*
 * url.h - backend URLs parsed into endpoints.
 *
 *   redis://[[user]:password@]host[:port][/db][?db=N]
 *   rediss://...  the same over TLS
 *   unix:///path/to/socket[?db=N]
 *
 * The endpoint keeps a display form without the password for messages.
 */
#ifndef DLOCK_CORE_URL_H
#define DLOCK_CORE_URL_H

#include <stdbool.h>

typedef enum dlock__ep_kind { DLOCK__EP_TCP, DLOCK__EP_UNIX } dlock__ep_kind;

typedef struct dlock__endpoint {
  dlock__ep_kind kind;
  char *host;     /* TCP: host name or address (no brackets) */
  int port;       /* TCP */
  char *path;     /* UNIX */
  int db;         /* SELECT index, 0 by default */
  char *user;     /* NULL = default user */
  char *password; /* NULL = no AUTH */
  char *display;  /* e.g. "redis://127.0.0.1:6379", never a password */
  bool tls;       /* rediss:// */
} dlock__endpoint;

/* 0, DLOCK_EURL, DLOCK_ENOTSUP, DLOCK_ENOMEM (detail set). */
int dlock__url_parse(const char *url, dlock__endpoint *ep);
void dlock__endpoint_clear(dlock__endpoint *ep);

#endif
