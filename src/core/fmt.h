/*
 * fmt.h - text for the hot paths without the printf family.
 *
 * An acquire+release pair formats a dozen key names, numbers and ids; with
 * snprintf and asprintf that was most of the client's instructions per
 * pair (callgrind). These do the same with memcpy and a digit loop.
 * Messages and anything off the hot path keep using snprintf.
 */
#ifndef DLOCK_CORE_FMT_H
#define DLOCK_CORE_FMT_H

#include <stddef.h>
#include <stdint.h>

/* Longest decimal text of a 64-bit integer, with sign, plus the NUL. */
#define DLOCK__I64_BUF 21

/* Writes the decimal text of v and a NUL into buf (DLOCK__I64_BUF bytes
 * at least); returns its length. */
size_t dlock__fmt_u64(char *buf, uint64_t v);
size_t dlock__fmt_i64(char *buf, int64_t v);
/* Lower-case hex of n bytes into out (2n + 1 bytes, NUL-terminated). */
void dlock__fmt_hex(char *out, const unsigned char *in, size_t n);
/* A fresh NUL-terminated concatenation of the n strings (NULL: out of
 * memory, detail set). */
char *dlock__concat(size_t n, const char *const *parts);

#endif
