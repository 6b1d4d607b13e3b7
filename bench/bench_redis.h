/*
 * bench_redis.h - the benchmark's own view of the server: INFO snapshots
 * (command counts, memory, read events) and channel subscriber counts over a
 * separate hiredis connection.
 * This is measurement plumbing only; locks go through libdlock's public API.
 */
#ifndef DLOCK_BENCH_REDIS_H
#define DLOCK_BENCH_REDIS_H

#include <stddef.h>

#define BENCH_MAX_CMDS 256

typedef struct bench_info {
  size_t ncmds;
  struct {
    char name[64];
    long long calls;
    long long usec; /* server time in the command (a script's includes
                       the commands it ran) */
  } cmds[BENCH_MAX_CMDS];
  long long used_memory; /* INFO memory used_memory */
  long long reads;       /* INFO stats total_reads_processed */
  long long keys;        /* sum of keys= over the keyspace lines */
} bench_info_t;

typedef struct bench_redis bench_redis_t;

/* Connects to the server named by a dlock URL (redis://[[user]:pass@]host
 * [:port][/db] or unix:///path). 0, or -1 with a message in err. */
int bench_redis_open(const char *url, bench_redis_t **out, char *err,
                     size_t errlen);
void bench_redis_close(bench_redis_t *r);
/* One `INFO commandstats stats memory keyspace` round trip. 0 or -1. */
int bench_redis_info(bench_redis_t *r, bench_info_t *out);

/* PUBSUB NUMSUB of one channel: connections subscribed to it. 0 or -1. */
int bench_redis_numsub(bench_redis_t *r, const char *channel,
                       long long *out);

/* Calls of one command between two snapshots (0 when absent). */
long long bench_info_delta(const bench_info_t *a, const bench_info_t *b,
                           const char *name);
/* Script calls (eval, evalsha and their _ro forms, fcall) between two. */
long long bench_info_scripts(const bench_info_t *a, const bench_info_t *b);
/* All command calls between two snapshots, those made inside scripts
 * included, except `info` itself (the snapshots' own command). */
long long bench_info_calls(const bench_info_t *a, const bench_info_t *b);
/* Server microseconds spent in scripts (EVAL, EVALSHA, ...) between a and
 * b: the server's CPU for a script-driven client's acquisitions. */
long long bench_info_script_usec(const bench_info_t *a, const bench_info_t *b);

#endif /* DLOCK_BENCH_REDIS_H */
