/*
 * scripts.h - the Lua scripts of the Redis backend, embedded at build time
 * from the .lua files in src/redis/scripts (cmake/embed_scripts.cmake) with the
 * SHA1 that EVALSHA needs.
 */
#ifndef DLOCK_REDIS_SCRIPTS_H
#define DLOCK_REDIS_SCRIPTS_H

#include <stddef.h>

typedef struct dlock__script {
  const char *name;
  const char *body;
  size_t len;
  const char *sha; /* 40 hex digits */
} dlock__script;

extern const dlock__script dlock__script_lock_acquire;
extern const dlock__script dlock__script_lock_release;
extern const dlock__script dlock__script_lock_force_release;
extern const dlock__script dlock__script_lock_leave;
extern const dlock__script dlock__script_lock_renew;
extern const dlock__script dlock__script_lock_state;
extern const dlock__script dlock__script_token_raise;
extern const dlock__script dlock__script_fair_acquire;
extern const dlock__script dlock__script_fair_leave;
extern const dlock__script dlock__script_fair_release;
extern const dlock__script dlock__script_rw_leave;
extern const dlock__script dlock__script_rw_read_acquire;
extern const dlock__script dlock__script_rw_read_release;
extern const dlock__script dlock__script_rw_read_renew;
extern const dlock__script dlock__script_rw_write_acquire;
extern const dlock__script dlock__script_rw_write_release;
extern const dlock__script dlock__script_permit_renew;
extern const dlock__script dlock__script_sem_set;
extern const dlock__script dlock__script_sem_add;
extern const dlock__script dlock__script_sem_acquire;
extern const dlock__script dlock__script_sem_release;
extern const dlock__script dlock__script_psem_acquire;
extern const dlock__script dlock__script_psem_release;
extern const dlock__script dlock__script_psem_state;
extern const dlock__script dlock__script_latch_set;
extern const dlock__script dlock__script_latch_count_down;
extern const dlock__script dlock__script_latch_delete;
extern const dlock__script dlock__script_spring_acquire;
extern const dlock__script dlock__script_spring_release;
extern const dlock__script dlock__script_spring_renew;
extern const dlock__script dlock__script_spring_state;

#endif
