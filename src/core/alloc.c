/*
 * alloc.c - overflow-checked allocation (see alloc.h).
 */
#include "alloc.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

/* FOR TESTS ONLY (see alloc.h): never set by the library itself. */
bool (*_Atomic dlock__alloc_fail_hook)(size_t bytes);

static bool injected_failure(size_t n, size_t size) {
  bool (*hook)(size_t) =
      atomic_load_explicit(&dlock__alloc_fail_hook, memory_order_acquire);
  if (!hook || !hook(n * size))
    return false;
  dlock__seterr(DLOCK_ENOMEM, "out of memory allocating %zu bytes (injected)",
                n * size);
  return true;
}

void *dlock__calloc(size_t n, size_t size) {
  if (size != 0 && n > SIZE_MAX / size) {
    dlock__seterr(DLOCK_ENOMEM, "allocation of %zu x %zu bytes overflows", n,
                  size);
    return NULL;
  }
  if (injected_failure(n, size))
    return NULL;
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p)
    dlock__seterr(DLOCK_ENOMEM, "out of memory allocating %zu bytes", n * size);
  return p;
}

void *dlock__reallocarray(void *p, size_t n, size_t size) {
  if (size != 0 && n > SIZE_MAX / size) {
    dlock__seterr(DLOCK_ENOMEM, "allocation of %zu x %zu bytes overflows", n,
                  size);
    return NULL;
  }
  if (injected_failure(n, size))
    return NULL;
  size_t bytes = n * size;
  void *q = realloc(p, bytes ? bytes : 1);
  if (!q)
    dlock__seterr(DLOCK_ENOMEM, "out of memory allocating %zu bytes", n * size);
  return q;
}

char *dlock__strndup(const char *s, size_t len) {
  if (len == SIZE_MAX) {
    dlock__seterr(DLOCK_ENOMEM, "string too long");
    return NULL;
  }
  char *d = dlock__calloc(len + 1, 1);
  if (d && len)
    memcpy(d, s, len);
  return d;
}

char *dlock__strdup(const char *s) { return dlock__strndup(s, strlen(s)); }

char *dlock__asprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) {
    dlock__seterr(DLOCK_ENOMEM, "formatting failed");
    return NULL;
  }
  char *s = dlock__calloc((size_t)n + 1, 1);
  if (!s)
    return NULL;
  va_start(ap, fmt);
  vsnprintf(s, (size_t)n + 1, fmt, ap);
  va_end(ap);
  return s;
}

void dlock__free(void *p) { free(p); }
