/*
 * map.c - chained hash map (see map.h). Word-at-a-time hashing, doubling
 * at load 1; one removed entry is kept for reuse (map.h).
 */
#include "map.h"

#include <stdint.h>
#include <string.h>

#include "alloc.h"
#include "error.h"

/* Eight bytes at a time (keys are a lock name plus a thread number: tens
 * of bytes, hashed on every acquire and release): each word is mixed in by
 * a multiply and a shift, the tail byte by byte, as FNV-1a would. */
static size_t hash_bytes(const void *key, size_t klen) {
  const unsigned char *p = key;
  uint64_t h = 1469598103934665603ULL ^ (uint64_t)klen;
  for (; klen >= 8; klen -= 8, p += 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    h = (h ^ w) * 0x9e3779b97f4a7c15ULL;
    h ^= h >> 32;
  }
  for (; klen > 0; klen--, p++) {
    h ^= *p;
    h *= 1099511628211ULL;
  }
  return (size_t)(h ^ (h >> 29));
}

void dlock__map_init(dlock__map *m) { memset(m, 0, sizeof *m); }

void dlock__map_clear(dlock__map *m) {
  for (size_t i = 0; i < m->nbuckets; i++) {
    dlock__map_entry *e = m->buckets[i];
    while (e) {
      dlock__map_entry *n = e->next;
      dlock__free(e);
      e = n;
    }
  }
  dlock__free(m->buckets);
  dlock__free(m->spare);
  dlock__map_init(m);
}

static dlock__map_entry **find_slot(const dlock__map *m, const void *key,
                                    size_t klen, size_t h) {
  dlock__map_entry **pp = &m->buckets[h & (m->nbuckets - 1)];
  while (*pp) {
    if ((*pp)->hash == h && (*pp)->klen == klen &&
        memcmp((*pp)->key, key, klen) == 0)
      return pp;
    pp = &(*pp)->next;
  }
  return pp;
}

void *dlock__map_get(const dlock__map *m, const void *key, size_t klen) {
  if (!m->nbuckets)
    return NULL;
  dlock__map_entry **pp = find_slot(m, key, klen, hash_bytes(key, klen));
  return *pp ? (*pp)->value : NULL;
}

static int grow(dlock__map *m) {
  size_t n = m->nbuckets ? m->nbuckets * 2 : 16;
  dlock__map_entry **b = dlock__calloc(n, sizeof *b);
  if (!b)
    return DLOCK_ENOMEM;
  for (size_t i = 0; i < m->nbuckets; i++) {
    dlock__map_entry *e = m->buckets[i];
    while (e) {
      dlock__map_entry *next = e->next;
      e->next = b[e->hash & (n - 1)];
      b[e->hash & (n - 1)] = e;
      e = next;
    }
  }
  dlock__free(m->buckets);
  m->buckets = b;
  m->nbuckets = n;
  return 0;
}

int dlock__map_put(dlock__map *m, const void *key, size_t klen, void *value) {
  if (m->count >= m->nbuckets) {
    int rc = grow(m);
    if (rc)
      return rc;
  }
  size_t h = hash_bytes(key, klen);
  dlock__map_entry **pp = find_slot(m, key, klen, h);
  if (*pp) {
    (*pp)->value = value;
    return 0;
  }
  dlock__map_entry *e = m->spare;
  if (e && e->cap >= klen) {
    m->spare = NULL;
  } else {
    if (!(e = dlock__calloc(1, sizeof *e + klen + 1)))
      return DLOCK_ENOMEM;
    e->cap = klen;
  }
  e->next = NULL;
  e->hash = h;
  e->klen = klen;
  e->value = value;
  memcpy(e->key, key, klen);
  e->key[klen] = '\0';
  *pp = e;
  m->count++;
  return 0;
}

void *dlock__map_del(dlock__map *m, const void *key, size_t klen) {
  if (!m->nbuckets)
    return NULL;
  dlock__map_entry **pp = find_slot(m, key, klen, hash_bytes(key, klen));
  dlock__map_entry *e = *pp;
  if (!e)
    return NULL;
  void *v = e->value;
  *pp = e->next;
  if (!m->spare || m->spare->cap < e->cap) {
    dlock__free(m->spare);
    m->spare = e;
  } else {
    dlock__free(e);
  }
  m->count--;
  return v;
}

static dlock__map_entry *scan(const dlock__map *m, size_t from,
                              size_t *cursor) {
  for (size_t i = from; i < m->nbuckets; i++) {
    if (m->buckets[i]) {
      *cursor = i;
      return m->buckets[i];
    }
  }
  *cursor = m->nbuckets;
  return NULL;
}

dlock__map_entry *dlock__map_first(const dlock__map *m, size_t *cursor) {
  return scan(m, 0, cursor);
}

dlock__map_entry *dlock__map_next(const dlock__map *m, dlock__map_entry *e,
                                  size_t *cursor) {
  if (e->next)
    return e->next;
  return scan(m, *cursor + 1, cursor);
}
