/*
 * tls.c - a client's TLS settings as one OpenSSL context (see tls.h).
 *
 * Design note. The context is built once when the client opens (CA store,
 * client certificate and key, verification mode) and is read-only
 * afterwards: OpenSSL lets any number of threads create connections from
 * one configured SSL_CTX, so the pool's callers and the event loop's
 * dialling worker share it without a lock. The per-connection parts (the
 * SSL object, SNI, the name to verify, the handshake) live in conn.c.
 *
 * Verification is on unless the insecure switch was set: the peer's chain
 * must lead to a trusted CA (the given file or directory, else the
 * system's default store) and the certificate must name the host (DNS
 * names) or address (IP literals) the client dialled, or the SNI name
 * when one was set. Files are read when the client opens; a missing or
 * unreadable file is reported then with its path, never later.
 *
 * OpenSSL's error queue is per thread and shared with the application:
 * every failure here takes its reason from the queue and clears it, so no
 * stale entry leaks into the application's own OpenSSL calls. An encrypted
 * private key is refused with a message instead of OpenSSL's default of
 * prompting on the terminal (the library never reads stdin).
 */
#include "net/tls.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "core/alloc.h"
#include "core/error.h"

/* Never prompts: an encrypted key cannot be loaded. */
static int no_passphrase(char *buf, int size, int rwflag, void *ud) {
  (void)buf;
  (void)size;
  (void)rwflag;
  (void)ud;
  return 0;
}

static const char *queue_reason(char *buf, size_t len) {
  unsigned long e = ERR_peek_last_error();
  const char *r = e ? ERR_reason_error_string(e) : NULL;
  if (r)
    snprintf(buf, len, "%s", r);
  else if (e)
    snprintf(buf, len, "OpenSSL error 0x%lx", e);
  else
    snprintf(buf, len, "no detail from OpenSSL");
  return buf;
}

static bool is_issuer_error(long v) {
  return v == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY ||
         v == X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN ||
         v == X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT ||
         v == X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT ||
         v == X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE;
}

void dlock__tls_reason(SSL *ssl, const char *verified_name, char *buf,
                       size_t len) {
  char why[200];
  unsigned long e = ERR_peek_last_error();
  int reason = e ? ERR_GET_REASON(e) : 0;
  queue_reason(why, sizeof why);
  if (ssl && reason == SSL_R_CERTIFICATE_VERIFY_FAILED) {
    long v = SSL_get_verify_result(ssl);
    const char *vs = X509_verify_cert_error_string(v);
    if (v == X509_V_ERR_HOSTNAME_MISMATCH ||
        v == X509_V_ERR_IP_ADDRESS_MISMATCH)
      snprintf(buf, len,
               "certificate verify failed: %s: the server's certificate is "
               "not for '%s'",
               vs, verified_name ? verified_name : "?");
    else if (is_issuer_error(v))
      snprintf(buf, len,
               "certificate verify failed: %s (no trusted CA signed the "
               "server's certificate: check the CA file or directory)",
               vs);
    else
      snprintf(buf, len, "certificate verify failed: %s", vs);
  } else if (reason == SSL_R_WRONG_VERSION_NUMBER ||
             reason == SSL_R_PACKET_LENGTH_TOO_LONG ||
             reason == SSL_R_RECORD_LENGTH_MISMATCH ||
             reason == SSL_R_UNKNOWN_PROTOCOL) {
    snprintf(buf, len,
             "the server does not speak TLS (%s): a plain port? use "
             "redis:// there",
             why);
  } else if (reason == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED ||
             reason == SSL_R_PEER_DID_NOT_RETURN_A_CERTIFICATE) {
    snprintf(buf, len,
             "the server requires a client certificate (%s): give a "
             "certificate and key",
             why);
  } else if (reason == SSL_R_SSLV3_ALERT_BAD_CERTIFICATE ||
             reason == SSL_R_TLSV1_ALERT_UNKNOWN_CA ||
             reason == SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN) {
    snprintf(buf, len, "the server refused the client certificate (%s)", why);
  } else {
    snprintf(buf, len, "%s", why);
  }
  ERR_clear_error();
}

/* A readable regular file, or DLOCK_ETLS naming it. */
static int check_file(const char *what, const char *path) {
  FILE *f = fopen(path, "r");
  if (!f)
    return dlock__seterr(DLOCK_ETLS, "TLS: cannot read the %s '%s': %s", what,
                         path, strerror(errno));
  fclose(f);
  return 0;
}

static int load_error(const char *what, const char *path) {
  char why[200];
  queue_reason(why, sizeof why);
  ERR_clear_error();
  return dlock__seterr(DLOCK_ETLS, "TLS: cannot load the %s '%s': %s", what,
                       path, why);
}

static int configure(dlock__tls *t, const dlock__tls_config *cfg) {
  SSL_CTX *ctx = t->ctx;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  /* write_some retries from a buffer that may have grown or moved */
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
                            SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
#ifdef SSL_OP_IGNORE_UNEXPECTED_EOF
  /* a server closing without close_notify reads as a closed connection
   * (RESP replies delimit themselves, so a cut reply is still seen) */
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
#endif
  SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);
  SSL_CTX_set_verify(ctx, cfg->insecure ? SSL_VERIFY_NONE : SSL_VERIFY_PEER,
                     NULL);
  int rc;
  if (cfg->ca_file || cfg->ca_dir) {
    if (cfg->ca_file && (rc = check_file("CA file", cfg->ca_file)))
      return rc;
    if (cfg->ca_dir && (rc = check_file("CA directory", cfg->ca_dir)))
      return rc;
    if (SSL_CTX_load_verify_locations(ctx, cfg->ca_file, cfg->ca_dir) != 1)
      return load_error(cfg->ca_file ? "CA file" : "CA directory",
                        cfg->ca_file ? cfg->ca_file : cfg->ca_dir);
  } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
    char why[200];
    queue_reason(why, sizeof why);
    ERR_clear_error();
    return dlock__seterr(DLOCK_ETLS,
                         "TLS: cannot use the system's CA store: %s", why);
  }
  if (cfg->cert_file) {
    if ((rc = check_file("certificate", cfg->cert_file)) ||
        (rc = check_file("private key", cfg->key_file)))
      return rc;
    if (SSL_CTX_use_certificate_chain_file(ctx, cfg->cert_file) != 1)
      return load_error("certificate", cfg->cert_file);
    if (SSL_CTX_use_PrivateKey_file(ctx, cfg->key_file, SSL_FILETYPE_PEM) !=
            1 &&
        ERR_GET_REASON(ERR_peek_last_error()) != X509_R_KEY_VALUES_MISMATCH)
      return load_error("private key (PEM, not encrypted)", cfg->key_file);
    if (SSL_CTX_check_private_key(ctx) != 1) {
      ERR_clear_error();
      return dlock__seterr(DLOCK_ETLS,
                           "TLS: the private key '%s' does not match the "
                           "certificate '%s'",
                           cfg->key_file, cfg->cert_file);
    }
  }
  return 0;
}

int dlock__tls_new(dlock__tls **out, const dlock__tls_config *cfg) {
  *out = NULL;
  dlock__tls *t = dlock__calloc(1, sizeof *t);
  if (!t)
    return DLOCK_ENOMEM;
  t->insecure = cfg->insecure;
  if (cfg->sni && !(t->sni = dlock__strdup(cfg->sni))) {
    dlock__tls_free(t);
    return DLOCK_ENOMEM;
  }
  ERR_clear_error();
  t->ctx = SSL_CTX_new(TLS_client_method());
  if (!t->ctx) {
    ERR_clear_error();
    dlock__tls_free(t);
    return dlock__seterr(DLOCK_ENOMEM, "TLS: cannot create an SSL context");
  }
  int rc = configure(t, cfg);
  if (rc) {
    dlock__tls_free(t);
    return rc;
  }
  *out = t;
  return 0;
}

void dlock__tls_free(dlock__tls *t) {
  if (!t)
    return;
  SSL_CTX_free(t->ctx);
  dlock__free(t->sni);
  dlock__free(t);
}
