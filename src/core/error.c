/*
 * error.c - the error table (from DLOCK_ERRNO_MAP) and per-thread detail.
 */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define DLOCK__ERRBUF 512
static _Thread_local char errbuf[DLOCK__ERRBUF];
static _Thread_local bool err_unsent; /* the failure sent nothing */
static _Thread_local bool err_worded; /* the detail is in the user's terms */

const char *dlock_strerror(int err) {
  switch (err) {
  case 0:
    return "success";
#define X(name, value, msg)                                                    \
  case value:                                                                  \
    return msg;
    DLOCK_ERRNO_MAP(X)
#undef X
  default:
    return "unknown error";
  }
}

const char *dlock_err_name(int err) {
  switch (err) {
  case 0:
    return "DLOCK_OK";
#define X(name, value, msg)                                                    \
  case value:                                                                  \
    return "DLOCK_" #name;
    DLOCK_ERRNO_MAP(X)
#undef X
  default:
    return "DLOCK_E?";
  }
}

const char *dlock_last_error(void) { return errbuf; }

void dlock__err_set_unsent(bool unsent) { err_unsent = unsent; }
bool dlock__err_unsent(void) { return err_unsent; }
void dlock__err_set_worded(void) { err_worded = true; }
bool dlock__err_worded(void) { return err_worded; }

int dlock__seterr(int code, const char *fmt, ...) {
  va_list ap;
  err_unsent = false;
  err_worded = false;
  va_start(ap, fmt);
  vsnprintf(errbuf, sizeof errbuf, fmt, ap);
  va_end(ap);
  return code;
}

int dlock__preferr(int code, const char *fmt, ...) {
  char prefix[256];
  char old[DLOCK__ERRBUF];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  memcpy(old, errbuf, sizeof old);
  const char *rest = old[0] ? old : dlock_strerror(code);
  size_t plen = strlen(prefix);
  /* "<prefix>: <rest>", cut to the buffer */
  memcpy(errbuf, prefix, plen);
  memcpy(errbuf + plen, ": ", 2);
  size_t room = sizeof errbuf - plen - 3;
  size_t rlen = strnlen(rest, room);
  memcpy(errbuf + plen + 2, rest, rlen);
  errbuf[plen + 2 + rlen] = '\0';
  return code;
}

void dlock__scrub_error(const char *secret) {
  if (!secret || !*secret)
    return;
  size_t n = strlen(secret);
  char out[DLOCK__ERRBUF];
  size_t o = 0;
  for (const char *p = errbuf; *p && o + 1 < sizeof out;) {
    if (strncmp(p, secret, n) == 0) {
      for (const char *m = "***"; *m && o + 1 < sizeof out; m++)
        out[o++] = *m;
      p += n;
    } else {
      out[o++] = *p++;
    }
  }
  out[o] = '\0';
  memcpy(errbuf, out, o + 1);
}
