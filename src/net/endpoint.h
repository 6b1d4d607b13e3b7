/*
 * endpoint.h - where a connection goes: a TCP host and port or a Unix
 * socket path, with the Redis session settings a URL carries (SELECT
 * index, AUTH user and password, TLS). Filled by a backend's URL parser
 * (src/redis/url.c), read by net/conn.c. The display form never holds a
 * password.
 */
#ifndef DLOCK_NET_ENDPOINT_H
#define DLOCK_NET_ENDPOINT_H

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

/* Frees the strings (the password wiped first) and zeroes *ep. */
void dlock__endpoint_clear(dlock__endpoint *ep);

#endif
