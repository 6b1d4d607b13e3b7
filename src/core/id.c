/*
 * id.c - UUIDs, request ids and permit ids from getrandom(2), and the
 * calling thread's number.
 *
 * Design note. A thread's number (the "<thread-id>" of an owner) is drawn
 * from one process-wide atomic counter on the thread's first call and kept
 * in thread-local storage, so it is never 0 and never given to another
 * thread of the process: Linux TIDs are recycled, and a new thread that got
 * a dead thread's TID would re-enter that thread's holds (Redisson's Java
 * thread ids are never reused either). It is a decimal integer on the wire,
 * as Redisson's. After fork() the child's thread keeps its number and the
 * child's counter goes on from the parent's; numbers of the two processes
 * may then coincide, but never within a client: clients made before the
 * fork are unusable in the child, and a new client has a new client id.
 */
#include "id.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "error.h"
#include "fmt.h"

int dlock__random_bytes(void *buf, size_t n) {
  unsigned char *p = buf;
  int tries = 0;
  while (n > 0) {
    ssize_t r = getrandom(p, n, 0);
    if (r < 0) {
      if (errno == EINTR && ++tries < 100)
        continue;
      return dlock__seterr(DLOCK_ESYS, "getrandom: %s", strerror(errno));
    }
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

int dlock__uuid(char out[DLOCK__UUID_LEN + 1]) {
  unsigned char b[16];
  int rc = dlock__random_bytes(b, sizeof b);
  if (rc)
    return rc;
  b[6] = (unsigned char)((b[6] & 0x0f) | 0x40); /* version 4 */
  b[8] = (unsigned char)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
  /* 8-4-4-4-12 hex digits (no printf: one per release, on the hot path) */
  static const unsigned char groups[5] = {4, 2, 2, 2, 6};
  char *p = out;
  const unsigned char *in = b;
  for (int g = 0; g < 5; g++) {
    if (g)
      *p++ = '-';
    dlock__fmt_hex(p, in, groups[g]);
    p += 2 * groups[g];
    in += groups[g];
  }
  *p = '\0';
  return 0;
}

int dlock__reqids_init(dlock__reqids *r) {
  char u[DLOCK__UUID_LEN + 1];
  unsigned char b[8];
  int rc = dlock__uuid(u);
  if (rc == 0)
    rc = dlock__random_bytes(b, sizeof b);
  if (rc)
    return rc;
  memcpy(r->prefix, u, sizeof r->prefix);
  memcpy(&r->base, b, sizeof r->base);
  atomic_init(&r->next, 0);
  return 0;
}

void dlock__reqid(dlock__reqids *r, char out[DLOCK__UUID_LEN + 1]) {
  uint64_t v = r->base + atomic_fetch_add_explicit(&r->next, 1,
                                                   memory_order_relaxed);
  unsigned char b[6];
  for (int i = 5; i >= 0; i--, v >>= 8)
    b[i] = (unsigned char)v;
  memcpy(out, r->prefix, sizeof r->prefix);
  dlock__fmt_hex(out + sizeof r->prefix, b, sizeof b);
  out[DLOCK__UUID_LEN] = '\0';
}

int dlock__hex_id(char out[DLOCK__HEX_ID_LEN + 1]) {
  unsigned char b[DLOCK__HEX_ID_LEN / 2];
  int rc = dlock__random_bytes(b, sizeof b);
  if (rc)
    return rc;
  dlock__fmt_hex(out, b, sizeof b);
  return 0;
}

static _Atomic uint64_t last_thread_id;
static _Thread_local uint64_t my_thread_id;

uint64_t dlock_thread_id(void) {
  if (!my_thread_id)
    my_thread_id = atomic_fetch_add(&last_thread_id, 1) + 1;
  return my_thread_id;
}
