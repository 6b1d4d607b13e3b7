/*
 * dlock/adapters/libevent.h - runs a dlock client's async callbacks on a
 * libevent event_base. Header only: link libevent yourself (pkg-config
 * libevent); libdlock does not depend on it.
 *
 *   dlock_libevent_t *a;
 *   dlock_libevent_attach(client, base, &a);
 *   dlock_lock_acquire_async(lock, id, 10000, DLOCK_LEASE_WATCHDOG,
 *                            on_done, ud, NULL);
 *   event_base_dispatch(base);
 *   ...
 *   dlock_libevent_detach(a);            (the loop thread; then:)
 *   dlock_client_free(client);
 *
 * What it does: one event (EV_READ | EV_PERSIST, level-triggered) watches
 * the client's completion descriptor (dlock_client_fd) and calls
 * dlock_client_process() when it is readable, so every `done` callback of
 * the client's async operations runs on the loop's thread, inside
 * event_base_dispatch / event_base_loop. Callbacks that complete while
 * others run are picked up on the next turn of the loop.
 *
 * Owners. The client, its lock handles and the event_base stay the
 * caller's. dlock_libevent_attach() allocates the adapter and its event;
 * dlock_libevent_detach() deletes and frees both before it returns (no
 * close callback is needed: libevent frees an event at once). The
 * descriptor is the client's: the adapter never reads nor closes it.
 *
 * Threads. Attach, detach and the loop on the base's thread only. A
 * callback run by dlock_client_process() may call dlock_libevent_detach()
 * on its own adapter.
 *
 * Order at the end: detach before dlock_client_free() (the client closes
 * the descriptor the event watches) and before event_base_free(). Operations
 * still pending then end in DLOCK_ECLOSED inside dlock_client_free(), on
 * the freeing thread. One adapter per client.
 */
#ifndef DLOCK_ADAPTERS_LIBEVENT_H
#define DLOCK_ADAPTERS_LIBEVENT_H

#include <stdlib.h>

#include <event2/event.h>

#include <dlock/dlock.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dlock_libevent {
  struct event *ev;
  dlock_client_t *client;
} dlock_libevent_t;

static inline void dlock__libevent_on_readable(evutil_socket_t fd, short what,
                                               void *arg) {
  /* Read what is needed before the callbacks run: one of them may detach
   * (free) the adapter, and nothing touches it after this call. */
  dlock_client_t *client = ((dlock_libevent_t *)arg)->client;
  (void)fd;
  (void)what;
  dlock_client_process(client);
}

/* Watches `client`'s completion descriptor on `base`; *out gets the
 * adapter, for dlock_libevent_detach(). Returns 0, or a DLOCK_E* code with
 * *out NULL and nothing attached: DLOCK_EINVAL (a NULL argument), the code
 * of dlock_client_fd() (DLOCK_EBADHANDLE, DLOCK_ECLOSED, ...),
 * DLOCK_ENOMEM, DLOCK_ESYS (libevent refused the event). */
static inline int dlock_libevent_attach(dlock_client_t *client,
                                        struct event_base *base,
                                        dlock_libevent_t **out) {
  dlock_libevent_t *a;
  int fd = -1, rc;
  if (out)
    *out = NULL;
  if (!client || !base || !out)
    return DLOCK_EINVAL;
  if ((rc = dlock_client_fd(client, &fd)) != 0)
    return rc;
  if (!(a = (dlock_libevent_t *)calloc(1, sizeof *a)))
    return DLOCK_ENOMEM;
  a->client = client;
  a->ev =
      event_new(base, fd, EV_READ | EV_PERSIST, dlock__libevent_on_readable, a);
  if (!a->ev) {
    free(a);
    return DLOCK_ENOMEM;
  }
  if (event_add(a->ev, NULL) != 0) {
    event_free(a->ev);
    free(a);
    return DLOCK_ESYS;
  }
  *out = a;
  return 0;
}

/* Stops watching and frees the adapter before it returns. Accepts NULL.
 * The base's thread only. */
static inline void dlock_libevent_detach(dlock_libevent_t *a) {
  if (!a)
    return;
  event_free(a->ev); /* deletes it from the base first */
  free(a);
}

#ifdef __cplusplus
}
#endif

#endif /* DLOCK_ADAPTERS_LIBEVENT_H */
