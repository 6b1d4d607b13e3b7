/*
 * id.c - UUIDs and permit ids from getrandom(2), and the calling thread's id
 * (Linux TID).
 */
#include "id.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "error.h"

int dlock__random_bytes(void *buf, size_t n) {
  unsigned char *p = buf;
  int tries = 0;
  while (n > 0) {
    ssize_t r = getrandom(p, n, 0);
    if (r < 0) {
      if (errno == EINTR && ++tries < 100)
        continue;
      return dlock__seterr(DLOCK_ENOMEM, "getrandom failed: %s",
                           strerror(errno));
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
  snprintf(out, DLOCK__UUID_LEN + 1,
           "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
           "%02x%02x%02x%02x%02x%02x",
           b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10],
           b[11], b[12], b[13], b[14], b[15]);
  return 0;
}

int dlock__hex_id(char out[DLOCK__HEX_ID_LEN + 1]) {
  static const char hex[] = "0123456789abcdef";
  unsigned char b[DLOCK__HEX_ID_LEN / 2];
  int rc = dlock__random_bytes(b, sizeof b);
  if (rc)
    return rc;
  for (size_t i = 0; i < sizeof b; i++) {
    out[2 * i] = hex[b[i] >> 4];
    out[2 * i + 1] = hex[b[i] & 0x0f];
  }
  out[DLOCK__HEX_ID_LEN] = '\0';
  return 0;
}

/* The TID is cached per thread; a forked child's thread has a new TID, so
 * the cache is reset in the child. */
static _Thread_local uint64_t cached_tid;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void reset_tid_in_child(void) { cached_tid = 0; }
static void register_atfork(void) {
  pthread_atfork(NULL, NULL, reset_tid_in_child);
}

uint64_t dlock_thread_id(void) {
  pthread_once(&atfork_once, register_atfork);
  if (!cached_tid)
    cached_tid = (uint64_t)syscall(SYS_gettid);
  return cached_tid;
}
