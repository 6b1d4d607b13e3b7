/*
 * id.h - identities: client UUIDs, request ids and thread ids.
 *
 * Random bytes come from getrandom(2) only (never rand()): client ids and
 * request ids are what separate one owner from another on the server.
 */
#ifndef DLOCK_CORE_ID_H
#define DLOCK_CORE_ID_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define DLOCK__UUID_LEN 36

/* Fills buf with n random bytes; 0 or DLOCK_E*. */
int dlock__random_bytes(void *buf, size_t n);
/* Writes a random (version 4) UUID in text form plus NUL (37 bytes). */
int dlock__uuid(char out[DLOCK__UUID_LEN + 1]);

/* Request ids (the idempotence key of a release, one per release): text
 * UUIDs whose first 24 characters are drawn once per client from
 * getrandom(2) and whose last 12 hex digits are a random 48-bit base plus
 * a per-client counter, so that an id costs no system call and no
 * formatting of random bytes on the release path. Unique within a client
 * for 2^48 releases, and across clients as their random prefixes are. */
typedef struct dlock__reqids {
  char prefix[24]; /* "xxxxxxxx-xxxx-4xxx-yxxx-" of a random UUID */
  uint64_t base;
  _Atomic uint64_t next;
} dlock__reqids;
int dlock__reqids_init(dlock__reqids *r);
void dlock__reqid(dlock__reqids *r, char out[DLOCK__UUID_LEN + 1]);

/* A permit id: 16 random bytes as 32 lowercase hex digits plus NUL. */
#define DLOCK__HEX_ID_LEN 32
int dlock__hex_id(char out[DLOCK__HEX_ID_LEN + 1]);

#endif
