/*
 * tls.h - the TLS settings of a client, built once into an OpenSSL context
 * that every connection of the client shares (see tls.c).
 */
#ifndef DLOCK_NET_TLS_H
#define DLOCK_NET_TLS_H

#include <stdbool.h>

#include <openssl/ssl.h>

/* What the user asked for; every string may be NULL. */
typedef struct dlock__tls_config {
  const char *ca_file;   /* trusted CAs (PEM); with ca_dir NULL too: the */
  const char *ca_dir;    /* system's store */
  const char *cert_file; /* client certificate chain (PEM), mutual TLS */
  const char *key_file;  /* its private key (PEM) */
  const char *sni;       /* name sent and verified instead of the host */
  bool insecure;         /* no certificate or name verification (tests) */
} dlock__tls_config;

typedef struct dlock__tls {
  SSL_CTX *ctx;
  char *sni;     /* NULL: the URL's host */
  bool insecure; /* verification off */
} dlock__tls;

/* Builds the shared context: loads the CAs, the client certificate and
 * key. Errors: DLOCK_ETLS with a line naming the file and the reason,
 * DLOCK_ENOMEM. */
int dlock__tls_new(dlock__tls **out, const dlock__tls_config *cfg);
/* Accepts NULL. Only after every connection using it is closed. */
void dlock__tls_free(dlock__tls *t);

/* The reason of the OpenSSL error at the head of this thread's queue, in
 * words, with the certificate's verification result when `ssl` failed
 * verification; written into buf. Clears the queue. */
void dlock__tls_reason(SSL *ssl, const char *verified_name, char *buf,
                       size_t len);

#endif
