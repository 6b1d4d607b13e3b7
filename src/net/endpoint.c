/*
 * endpoint.c - freeing an endpoint (see endpoint.h); the password is wiped
 * before its memory goes back.
 */
#include "net/endpoint.h"

#include <string.h>

#include "core/alloc.h"

void dlock__endpoint_clear(dlock__endpoint *ep) {
  if (!ep)
    return;
  dlock__free(ep->host);
  dlock__free(ep->path);
  dlock__free(ep->user);
  if (ep->password) {
    memset(ep->password, 0, strlen(ep->password));
    dlock__free(ep->password);
  }
  dlock__free(ep->display);
  memset(ep, 0, sizeof *ep);
}
