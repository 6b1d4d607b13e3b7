/*
 * dlock/adapters/libuv.h - runs a dlock client's async callbacks on a libuv
 * loop. Header only: include it after <uv.h> is available and link libuv
 * yourself (pkg-config libuv); libdlock does not depend on libuv. (uv.h
 * wants POSIX declarations: under -std=c11, define _POSIX_C_SOURCE
 * 200809L first.)
 *
 *   dlock_libuv_t *a;
 *   dlock_libuv_attach(client, uv_default_loop(), &a);
 *   dlock_lock_acquire_async(lock, id, 10000, DLOCK_LEASE_WATCHDOG,
 *                            on_done, ud, NULL);
 *   uv_run(uv_default_loop(), UV_RUN_DEFAULT);
 *   ...
 *   dlock_libuv_detach(a, NULL, NULL);   (the loop thread; then:)
 *   dlock_client_free(client);
 *
 * What it does: a uv_poll_t watches the client's completion descriptor
 * (dlock_client_fd) for readability and calls dlock_client_process() when
 * it is readable, so every `done` callback of the client's async
 * operations runs on the loop's thread, inside uv_run. The descriptor is
 * level-triggered: callbacks that complete while others run are picked up
 * on the next turn of the loop.
 *
 * Owners. The client, its lock handles and the loop stay the caller's.
 * dlock_libuv_attach() allocates the adapter (a dlock_libuv_t holding the
 * uv_poll_t); dlock_libuv_detach() stops watching at once and closes the
 * poll handle with uv_close(); the adapter's memory is freed in the close
 * callback, which then calls the caller's `closed` callback, if any: from
 * then on the loop holds nothing of the adapter (uv_loop_close() may
 * succeed, uv_run() may return). The descriptor itself is the client's:
 * the adapter never reads nor closes it.
 *
 * Threads. Attach, detach and uv_run on the loop's thread only (libuv's
 * rule for its handles). A callback run by dlock_client_process() may call
 * dlock_libuv_detach() on its own adapter.
 *
 * Order at the end: detach before dlock_client_free() (the client closes
 * the descriptor that the poll handle watches; detach takes it out of the
 * loop's epoll set at once, so dlock_client_free() may follow right after
 * dlock_libuv_detach() returns, without waiting for `closed`). Operations
 * still pending then end in DLOCK_ECLOSED inside dlock_client_free(), on
 * the freeing thread. One adapter per client; a client may be attached to
 * one loop at a time.
 */
#ifndef DLOCK_ADAPTERS_LIBUV_H
#define DLOCK_ADAPTERS_LIBUV_H

#include <stdlib.h>
#include <uv.h>

#include <dlock/dlock.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Called once the poll handle is closed and the adapter freed. */
typedef void (*dlock_libuv_closed_fn)(void *userdata);

typedef struct dlock_libuv {
  uv_poll_t poll; /* poll.data points back to this adapter */
  dlock_client_t *client;
  dlock_libuv_closed_fn closed;
  void *closed_userdata;
  int detached;
} dlock_libuv_t;

static inline void dlock__libuv_on_readable(uv_poll_t *poll, int status,
                                            int events) {
  dlock_libuv_t *a = (dlock_libuv_t *)poll->data;
  (void)status; /* an error on our own eventfd/pipe: processing is harmless
                   and never blocks, so it runs anyway */
  (void)events;
  if (a->detached)
    return;
  /* May run callbacks that detach this adapter: `a` stays allocated until
   * the close callback, a later step of the loop, so nothing here touches
   * freed memory; nothing touches `a` after this call either. */
  dlock_client_process(a->client);
}

static inline void dlock__libuv_on_close(uv_handle_t *h) {
  dlock_libuv_t *a = (dlock_libuv_t *)h->data;
  dlock_libuv_closed_fn closed = a->closed;
  void *ud = a->closed_userdata;
  free(a);
  if (closed)
    closed(ud);
}

/* Watches `client`'s completion descriptor on `loop`; *out gets the
 * adapter, for dlock_libuv_detach(). Returns 0, or a DLOCK_E* code with
 * *out NULL and nothing attached: DLOCK_EINVAL (a NULL argument), the code
 * of dlock_client_fd() (DLOCK_EBADHANDLE, DLOCK_ECLOSED, ...),
 * DLOCK_ENOMEM, DLOCK_ESYS (libuv refused the descriptor). */
static inline int dlock_libuv_attach(dlock_client_t *client, uv_loop_t *loop,
                                     dlock_libuv_t **out) {
  dlock_libuv_t *a;
  int fd = -1, rc;
  if (out)
    *out = NULL;
  if (!client || !loop || !out)
    return DLOCK_EINVAL;
  if ((rc = dlock_client_fd(client, &fd)) != 0)
    return rc;
  if (!(a = (dlock_libuv_t *)calloc(1, sizeof *a)))
    return DLOCK_ENOMEM;
  a->client = client;
  if (uv_poll_init(loop, &a->poll, fd) != 0) {
    free(a); /* a failed uv_poll_init leaves no handle in the loop */
    return DLOCK_ESYS;
  }
  a->poll.data = a;
  if (uv_poll_start(&a->poll, UV_READABLE, dlock__libuv_on_readable) != 0) {
    a->detached = 1;
    uv_close((uv_handle_t *)&a->poll, dlock__libuv_on_close);
    return DLOCK_ESYS;
  }
  *out = a;
  return 0;
}

/* Stops watching at once and closes the poll handle; `closed` (may be
 * NULL) runs with `userdata` from the loop once the handle is closed and
 * the adapter freed. Accepts NULL. A second detach before `closed` ran
 * does nothing; after it, the adapter is gone (do not use it again). The
 * loop's thread only. */
static inline void dlock_libuv_detach(dlock_libuv_t *a,
                                      dlock_libuv_closed_fn closed,
                                      void *userdata) {
  if (!a || a->detached)
    return;
  a->detached = 1;
  a->closed = closed;
  a->closed_userdata = userdata;
  uv_close((uv_handle_t *)&a->poll, dlock__libuv_on_close);
}

#ifdef __cplusplus
}
#endif

#endif /* DLOCK_ADAPTERS_LIBUV_H */
