/*
 * fmt.c - text for the hot paths without the printf family (see fmt.h).
 */
#include "core/fmt.h"

#include <string.h>

#include "core/alloc.h"

size_t dlock__fmt_u64(char *buf, uint64_t v) {
  /* most numbers here are RESP lengths and counts of one or two digits */
  if (v < 10) {
    buf[0] = (char)('0' + v);
    buf[1] = '\0';
    return 1;
  }
  if (v < 100) {
    buf[0] = (char)('0' + v / 10);
    buf[1] = (char)('0' + v % 10);
    buf[2] = '\0';
    return 2;
  }
  char tmp[DLOCK__I64_BUF];
  size_t n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  for (size_t i = 0; i < n; i++)
    buf[i] = tmp[n - 1 - i];
  buf[n] = '\0';
  return n;
}

size_t dlock__fmt_i64(char *buf, int64_t v) {
  if (v >= 0)
    return dlock__fmt_u64(buf, (uint64_t)v);
  buf[0] = '-';
  /* -(v + 1) + 1 avoids overflow at INT64_MIN */
  return 1 + dlock__fmt_u64(buf + 1, (uint64_t)(-(v + 1)) + 1);
}

void dlock__fmt_hex(char *out, const unsigned char *in, size_t n) {
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = hex[in[i] >> 4];
    out[2 * i + 1] = hex[in[i] & 0x0f];
  }
  out[2 * n] = '\0';
}

char *dlock__concat(size_t n, const char *const *parts) {
  size_t lens[8], total = 0;
  if (n > sizeof lens / sizeof lens[0])
    return NULL;
  for (size_t i = 0; i < n; i++) {
    lens[i] = strlen(parts[i]);
    total += lens[i];
  }
  char *s = dlock__calloc(total + 1, 1);
  if (!s)
    return NULL;
  char *p = s;
  for (size_t i = 0; i < n; i++) {
    memcpy(p, parts[i], lens[i]);
    p += lens[i];
  }
  *p = '\0';
  return s;
}
