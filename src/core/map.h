/*
 * map.h - a small chained hash map from byte-string keys to pointers.
 *
 * Used for the client's hold registry (name+thread -> hold) and its channel
 * registry (channel -> subscription). Not thread-safe: the owner's mutex
 * protects it. Keys are copied; values are borrowed.
 */
#ifndef DLOCK_CORE_MAP_H
#define DLOCK_CORE_MAP_H

#include <stddef.h>

typedef struct dlock__map_entry {
  struct dlock__map_entry *next;
  size_t hash;
  size_t klen;
  size_t cap; /* room for this many key bytes plus a NUL */
  void *value;
  char key[]; /* klen bytes plus a NUL */
} dlock__map_entry;

typedef struct dlock__map {
  dlock__map_entry **buckets;
  size_t nbuckets; /* power of two, or 0 before first insert */
  size_t count;
  /* the last removed entry, kept for the next insert whose key fits: a
   * map whose keys come and go (a hold per acquire) then allocates
   * nothing in the steady state */
  dlock__map_entry *spare;
} dlock__map;

void dlock__map_init(dlock__map *m);
/* Frees the entries (not the values). */
void dlock__map_clear(dlock__map *m);
void *dlock__map_get(const dlock__map *m, const void *key, size_t klen);
/* Inserts or replaces; 0 or DLOCK_ENOMEM. */
int dlock__map_put(dlock__map *m, const void *key, size_t klen, void *value);
/* Removes and returns the value (NULL when absent). */
void *dlock__map_del(dlock__map *m, const void *key, size_t klen);

/* Iteration: for (e = dlock__map_first(m, &i); e; e = dlock__map_next(m, e,
 * &i)). Deleting the current entry during iteration is not allowed. */
dlock__map_entry *dlock__map_first(const dlock__map *m, size_t *cursor);
dlock__map_entry *dlock__map_next(const dlock__map *m, dlock__map_entry *e,
                                  size_t *cursor);

#endif
