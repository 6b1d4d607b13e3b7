/*
 * alloc.h - the one allocation wrapper of libdlock.
 *
 * Every allocation goes through these so that overflow checks live in one
 * place and so that an out-of-memory condition is a return value, never an
 * abort. They set the thread's error detail on failure.
 */
#ifndef DLOCK_CORE_ALLOC_H
#define DLOCK_CORE_ALLOC_H

#include <stdbool.h>
#include <stddef.h>

/* FOR TESTS ONLY: a failure-injection hook, hidden (not exported from the
 * shared library; a test reaches it by linking the static library). When
 * set, dlock__calloc and dlock__reallocarray call it first with the size
 * asked for, and fail as if out of memory when it returns true. NULL (the
 * default) costs one atomic load per allocation. */
extern bool (*_Atomic dlock__alloc_fail_hook)(size_t bytes);

/* n * size bytes, zeroed; NULL (with DLOCK_ENOMEM detail) on overflow/OOM. */
void *dlock__calloc(size_t n, size_t size);
/* Grows p to n * size bytes; on failure returns NULL and leaves p intact. */
void *dlock__reallocarray(void *p, size_t n, size_t size);
/* Copy of s[0..len) plus a NUL. */
char *dlock__strndup(const char *s, size_t len);
char *dlock__strdup(const char *s);
/* printf into a fresh string. */
char *dlock__asprintf(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));
void dlock__free(void *p);

#endif
