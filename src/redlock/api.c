/*
 * api.c - Redlock's public calls: its timing option, creating a Redlock
 * client, its number of nodes, and one node's own view of a lock.
 *
 * Design note. The core knows no backend by name: a Redlock client is a
 * core client opened with the Redlock backend (dlock__client_open) and
 * the nodes' URLs joined one a line (a URL has no control character: the
 * registry refuses them), which rl_open splits again. The node calls find
 * the Redlock state through the core's accessors
 * (dlock__client_backend_of, dlock__lock_call_begin), so a client of
 * another backend answers as before: 0 nodes, and "not a Redlock client".
 * Redlock's timing is a block of its own in dlock_options_t
 * (core/options.h, dlock__redlock_options_type), set by
 * dlock_options_set_redlock_timing and read by rl_open.
 */
#include <string.h>

#include "backends.h"
#include "core/alloc.h"
#include "core/client.h"
#include "core/error.h"
#include "redis/redis.h"
#include "redlock/redlock.h"

int dlock_options_set_redlock_timing(dlock_options_t *opts,
                                     int64_t node_timeout_ms,
                                     int64_t drift_permille, int64_t drift_ms) {
  if (!opts)
    return dlock__seterr(DLOCK_EINVAL,
                         "dlock_options_set_redlock_timing: opts is NULL");
  int rc = dlock__options_check_ms("Redlock node timeout", node_timeout_ms, 1);
  if (!rc && (drift_permille < 0 || drift_permille > 500))
    rc = dlock__seterr(DLOCK_EINVAL,
                       "Redlock drift must be from 0 to 500 per mille of the "
                       "lease (got %lld)",
                       (long long)drift_permille);
  if (!rc && (drift_ms < 0 || drift_ms > 60000))
    rc = dlock__seterr(DLOCK_EINVAL,
                       "Redlock fixed drift must be from 0 to 60000 ms (got "
                       "%lld)",
                       (long long)drift_ms);
  dlock__redlock_options *r =
      rc ? NULL : dlock__options_ext_mut(opts, &dlock__redlock_options_type);
  if (!rc && !r)
    rc = DLOCK_ENOMEM;
  if (!rc) {
    r->node_timeout_ms = node_timeout_ms;
    r->drift_permille = drift_permille;
    r->drift_ms = drift_ms;
  }
  return rc;
}

int dlock_client_new_redlock(dlock_client_t **out, const char *const *urls,
                             size_t n, const dlock_options_t *opts) {
  static const char fn[] = "dlock_client_new_redlock";
  if (!out)
    return dlock__seterr(DLOCK_EINVAL, "%s: out is NULL", fn);
  *out = NULL;
  if (!urls)
    return dlock__seterr(DLOCK_EINVAL, "%s: urls is NULL", fn);
  if (n == 0 || n % 2 == 0 || n > DLOCK_REDLOCK_MAX_NODES)
    return dlock__seterr(DLOCK_EINVAL,
                         "%s: the number of nodes must be odd, from 1 to %d "
                         "(got %zu): a majority of an even number tolerates "
                         "no more failures than one node fewer",
                         fn, DLOCK_REDLOCK_MAX_NODES, n);
  size_t len = 1;
  for (size_t i = 0; i < n; i++) {
    if (!urls[i])
      return dlock__seterr(DLOCK_EINVAL, "%s: urls[%zu] is NULL", fn, i);
    const dlock__backend_ops *ops = dlock__backend_for_url(urls[i]);
    if (!ops)
      return dlock__preferr(DLOCK_EURL, "node %zu", i + 1);
    if (ops != &dlock__redis_backend)
      return dlock__seterr(DLOCK_EURL,
                           "%s: node %zu: a Redlock node must be a Redis "
                           "master (redis:// or unix://)",
                           fn, i + 1);
    for (size_t j = 0; j < i; j++)
      if (strcmp(urls[i], urls[j]) == 0)
        return dlock__seterr(DLOCK_EINVAL,
                             "%s: nodes %zu and %zu are the same URL: a "
                             "Redlock needs independent masters",
                             fn, j + 1, i + 1);
    len += strlen(urls[i]) + 1;
  }
  char *joined = dlock__calloc(1, len);
  if (!joined)
    return DLOCK_ENOMEM;
  char *p = joined;
  for (size_t i = 0; i < n; i++) {
    size_t k = strlen(urls[i]);
    memcpy(p, urls[i], k);
    p += k;
    *p++ = i + 1 < n ? '\n' : '\0';
  }
  int rc = dlock__client_open(out, &dlock__redlock_backend, joined, opts);
  dlock__free(joined);
  return rc;
}

size_t dlock_client_nodes(const dlock_client_t *c) {
  if (dlock__client_check(c, "dlock_client_nodes"))
    return 0;
  const void *rl = dlock__client_backend_of(c, &dlock__redlock_backend);
  return rl ? dlock__redlock_node_count(rl) : 0;
}

int dlock_lock_node_state(dlock_lock_t *l, size_t node,
                          dlock_lock_state_t **out) {
  if (!out)
    return dlock__seterr(DLOCK_EINVAL, "dlock_lock_node_state: out is NULL");
  *out = NULL;
  int rc = dlock__lock_call_begin(l, "dlock_lock_node_state");
  if (rc)
    return rc;
  void *rl = dlock__client_backend_of(l->client, &dlock__redlock_backend);
  if (!rl)
    return dlock__lock_call_end(l, dlock__seterr(DLOCK_EINVAL,
                                                 "dlock_lock_node_state: the "
                                                 "client is not a Redlock "
                                                 "client"));
  return dlock__lock_call_end(
      l, dlock__redlock_node_state(rl, node, l->kind, l->name, out));
}
