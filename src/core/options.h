/*
 * options.h - the options object (public dlock_options_t) and its defaults.
 *
 * A client copies the options at creation (dlock__options_copy), so the
 * caller may free or reuse its object at once.
 */
#ifndef DLOCK_CORE_OPTIONS_H
#define DLOCK_CORE_OPTIONS_H

#include "dlock/dlock.h"

struct dlock_options {
  int64_t connect_timeout_ms;
  int64_t command_timeout_ms;
  int64_t watchdog_ms;
  int64_t session_timeout_ms; /* 0: the backend's default */
  int64_t outage_grace_ms;    /* how long a wait rides out an outage */
  int64_t fair_thread_wait_ms;
  int64_t redlock_node_timeout_ms; /* Redlock: one node's answer, > 0 */
  int64_t redlock_drift_permille;  /* Redlock: drift per 1000 of a lease */
  int64_t redlock_drift_ms;        /* Redlock: drift added, >= 0 */
  int pool_size;
  char *client_name;
  bool credentials_set;
  char *user;
  char *password;
  char *sentinel_user; /* redis-sentinel://: the sentinels' own AUTH */
  char *sentinel_password;
  dlock_lost_fn lost_fn;
  void *lost_ud;
  dlock_log_fn log_fn;
  void *log_ud;
  dlock_log_level_t log_level;
  /* TLS (Redis): on for rediss:// URLs whatever `tls` says */
  bool tls;
  bool tls_insecure;
  char *tls_ca_file, *tls_ca_dir; /* both NULL: the system's store */
  char *tls_cert_file, *tls_key_file;
  char *tls_sni;
  int64_t replica_wait_ms; /* WAIT after write scripts; 0: off */
  /* recorded beside each hold and queued wait (docs/LAYOUT.md); NULL:
   * nothing extra is written */
  char *holder_info;
  /* Redis key layout (dlock_options_set_layout): NULL unset (the URL's
   * ?layout=, else Redisson's), "redisson" or "spring" */
  char *layout;
  char *spring_registry; /* the spring layout's registry key, or NULL */
};

/* A spring registry key of n bytes: 0 or DLOCK_EINVAL with detail. */
int dlock__check_spring_registry(const char *key, size_t n);

void dlock__options_defaults(struct dlock_options *o);
/* Deep copy of src (or defaults when src is NULL) into dst. */
int dlock__options_copy(struct dlock_options *dst,
                        const struct dlock_options *src);
/* Frees what dst owns (not dst itself). */
void dlock__options_clear(struct dlock_options *o);

#endif
