/*
 * options.h - the options object (public dlock_options_t) and its defaults.
 *
 * A client copies the options at creation (dlock__options_copy), so the
 * caller may free or reuse its object at once.
 */
#ifndef DLOCK_CORE_OPTIONS_H
#define DLOCK_CORE_OPTIONS_H

#include "dlock/dlock.h"

/* A backend's own settings (what only one backend means, such as the
 * credentials of its discovery servers): a block of the backend's own
 * type, kept in the
 * options under that type, so that the core copies and frees it without
 * knowing what is in it. The backend's public setters (in its folder)
 * fill it through dlock__options_ext_mut; its open reads it through
 * dlock__options_ext_get, with its defaults when the user set none. */
typedef struct dlock__options_ext_type {
  size_t size; /* of the block */
  /* the defaults into a zeroed block */
  void (*init)(void *block);
  /* a deep copy of src into a block that init filled: 0 or DLOCK_ENOMEM
   * (dst is then cleared as it stands) */
  int (*copy)(void *dst, const void *src);
  /* frees what the block owns, not the block (NULL: it owns nothing) */
  void (*clear)(void *block);
} dlock__options_ext_type;

typedef struct dlock__options_ext {
  const dlock__options_ext_type *type;
  void *block;
  struct dlock__options_ext *next;
} dlock__options_ext;

struct dlock_options {
  int64_t connect_timeout_ms;
  int64_t command_timeout_ms;
  int64_t watchdog_ms;
  int64_t session_timeout_ms; /* 0: the backend's default */
  int64_t outage_grace_ms;    /* how long a wait rides out an outage */
  int async_threads;          /* the async operations' pool (async.c) */
  int64_t fair_thread_wait_ms;
  int pool_size;
  char *client_name;
  bool credentials_set;
  char *user;
  char *password;
  dlock_lost_fn lost_fn;
  void *lost_ud;
  dlock_log_fn log_fn;
  void *log_ud;
  dlock_log_level_t log_level;
  /* TLS, for the backends that speak it: on for a URL whose scheme asks
   * for it whatever `tls` says */
  bool tls;
  bool tls_insecure;
  char *tls_ca_file, *tls_ca_dir; /* both NULL: the system's store */
  char *tls_cert_file, *tls_key_file;
  char *tls_sni;
  /* recorded beside each hold and queued wait (docs/LAYOUT.md); NULL:
   * nothing extra is written */
  char *holder_info;
  dlock__options_ext *ext; /* backends' own settings, one block a type */
};

void dlock__options_defaults(struct dlock_options *o);
/* Deep copy of src (or defaults when src is NULL) into dst. */
int dlock__options_copy(struct dlock_options *dst,
                        const struct dlock_options *src);
/* Frees what dst owns (not dst itself). */
void dlock__options_clear(struct dlock_options *o);

/* o's block of `type`, or NULL when no setting of it was made (the
 * backend then applies its defaults). */
const void *dlock__options_ext_get(const struct dlock_options *o,
                                   const dlock__options_ext_type *type);
/* o's block of `type`, added with its defaults when absent; NULL when it
 * cannot be (DLOCK_ENOMEM). For a backend's public setter, which checks
 * its arguments first. */
void *dlock__options_ext_mut(struct dlock_options *o,
                             const dlock__options_ext_type *type);

/* For backends' setters: the rules the core's setters follow. */
/* ms within [min, a day], else DLOCK_EINVAL "<what> must be from ...". */
int dlock__options_check_ms(const char *what, int64_t ms, int64_t min);
/* A copy of src into *dst (NULL for NULL): 0 or DLOCK_ENOMEM. */
int dlock__options_dup(char **dst, const char *src);
/* Replaces *u and *p with copies of user and password, with the rules
 * every pair of credentials follows (NULL or non-empty; a user needs a
 * password); the old password is wiped. */
int dlock__options_set_credentials(char **u, char **p, const char *user,
                                   const char *password);
/* Wipes and frees a secret (NULL: nothing). */
void dlock__free_secret(char *s);

#endif
