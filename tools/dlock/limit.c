/*
 * limit.c - `dlock -N LIMIT NAME`: at most LIMIT holders at once, as
 * `consul lock -n` does, on the permit semaphore NAME (Redisson's
 * RPermitExpirableSemaphore layout, so a Java process using the semaphore
 * NAME counts against the same limit).
 *
 * Design note. Each holder takes one permit with a lease: the watchdog's
 * (renewed while the command runs) or -l's (never renewed), so a crashed
 * holder's permit comes back when its lease runs out. The first holder
 * creates the semaphore with LIMIT permits; later ones check that the
 * semaphore's size (free permits plus permits in use) is LIMIT, and refuse
 * to run with another limit (a silent mismatch would let more holders in
 * than some of them asked for): `dlock --force-unlock -N LIMIT NAME` deletes
 * the semaphore so that a new limit can take over. The size comes from the
 * state call's exact in-use count, not its list (capped at 100), and the
 * refusal suggests --force-unlock only when nobody holds a permit (it would
 * delete the holders' permits). This file also holds the
 * semaphore's --status and --force-unlock; run.c holds the permit.
 */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Permits in all (free plus in use, both counted exactly by the state
 * call) and how many are in use. */
static int sem_size(const struct cli_ctx *c, dlock_permit_sem_t *sem,
                    int64_t *size, int64_t *in_use) {
  dlock_sem_state_t *st = NULL;
  int err = dlock_permit_sem_state(sem, &st);
  if (err != 0)
    return cli_lib_error(c, c->name_shown, err);
  *size = st->available + st->in_use;
  *in_use = st->in_use;
  dlock_sem_state_free(st);
  return 0;
}

int cli_limit_open(const struct cli_ctx *c, dlock_client_t *client,
                   dlock_permit_sem_t **out) {
  dlock_permit_sem_t *sem = NULL;
  bool created = false;
  int64_t size = 0, in_use = 0;
  int rc, err = dlock_permit_sem_new(client, c->o->name, &sem);
  *out = NULL;
  if (err != 0)
    return cli_lib_error(c, c->name_shown, err);
  err = dlock_permit_sem_try_set_permits(sem, c->o->limit, &created);
  if (err != 0) {
    dlock_permit_sem_free(sem);
    return cli_lib_error(c, c->name_shown, err);
  }
  if (!created) {
    rc = sem_size(c, sem, &size, &in_use);
    if (rc == 0 && size != c->o->limit && in_use == 0) {
      cli_msg(c,
              "'%s' is a semaphore of %lld permits, not %ld, and nobody holds "
              "one: give -N %lld, or delete it with 'dlock --force-unlock -N "
              "%ld %s'",
              c->name_shown, (long long)size, c->o->limit, (long long)size,
              c->o->limit, c->name_shown);
      rc = CLI_EX_USAGE;
    } else if (rc == 0 && size != c->o->limit) {
      /* --force-unlock now would take the permits of running holders */
      cli_msg(c,
              "'%s' is a semaphore of %lld permits, not %ld, in use by %lld "
              "holder%s: give -N %lld, or wait until nobody holds a permit "
              "('dlock --status -N %lld %s'); --force-unlock now would delete "
              "their permits",
              c->name_shown, (long long)size, c->o->limit, (long long)in_use,
              in_use == 1 ? "" : "s", (long long)size, (long long)size,
              c->name_shown);
      rc = CLI_EX_USAGE;
    }
    if (rc != 0) {
      dlock_permit_sem_free(sem);
      return rc;
    }
  }
  if (c->o->verbose)
    cli_msg(c, "semaphore '%s' of %ld permits%s", c->name_shown, c->o->limit,
            created ? " (created)" : "");
  *out = sem;
  return 0;
}

static void print_plain(const struct cli_ctx *c, const dlock_sem_state_t *st) {
  size_t cap = 4 * DLOCK_NAME_MAX + 64, i;
  char *buf = malloc(cap);
  if (buf == NULL)
    return;
  cli_printable(c->o->name, DLOCK_NAME_MAX, buf, cap);
  printf("lock:    %s\n", buf);
  printf("kind:    %s\n", st->in_use > 0 ? "semaphore" : "free");
  if (st->waiting > 0)
    printf("permits: %lld free, %lld in use, %lld waiting\n",
           (long long)st->available, (long long)st->in_use,
           (long long)st->waiting);
  else
    printf("permits: %lld free, %lld in use\n", (long long)st->available,
           (long long)st->in_use);
  for (i = 0; i < st->npermits; i++) {
    if (st->permits[i].expires_in_ms >= 0)
      printf("holder:  permit %s (%lld ms of lease left)\n", st->permits[i].id,
             (long long)st->permits[i].expires_in_ms);
    else
      printf("holder:  permit %s (no lease)\n", st->permits[i].id);
    cli_who_print(st->permits[i].id,
                  st->permit_infos ? st->permit_infos[i] : NULL);
  }
  free(buf);
}

static void print_json(const struct cli_ctx *c, const dlock_sem_state_t *st) {
  size_t i;
  fputs("{\"name\":", stdout);
  cli_json_string(stdout, c->o->name);
  fputs(",\"key\":", stdout);
  cli_json_string(stdout, c->o->name);
  printf(",\"view\":\"limit\",\"kind\":\"%s\",\"held\":%s,\"available\":%lld,"
         "\"in_use\":%lld,\"waiting\":%lld,\"permits\":[",
         st->in_use > 0 ? "semaphore" : "free",
         st->in_use > 0 ? "true" : "false", (long long)st->available,
         (long long)st->in_use, (long long)st->waiting);
  for (i = 0; i < st->npermits; i++) {
    fputs(i ? ",{\"id\":" : "{\"id\":", stdout);
    cli_json_string(stdout, st->permits[i].id);
    printf(",\"lease_ms\":%lld", (long long)st->permits[i].expires_in_ms);
    cli_who_print_json(st->permit_infos ? st->permit_infos[i] : NULL);
    fputs("}", stdout);
  }
  fputs("]}\n", stdout);
}

int cli_limit_status(struct cli_ctx *c) {
  dlock_client_t *client;
  dlock_permit_sem_t *sem = NULL;
  dlock_sem_state_t *st = NULL;
  int rc = cli_connect(c, &client), err;
  if (rc != 0)
    return rc;
  err = dlock_permit_sem_new(client, c->o->name, &sem);
  if (err == 0)
    err = dlock_permit_sem_state(sem, &st);
  if (err != 0) {
    rc = cli_lib_error(c, c->name_shown, err);
  } else {
    if (c->o->json)
      print_json(c, st);
    else
      print_plain(c, st);
    rc = fflush(stdout) != 0 ? CLI_EX_SOFTWARE : st->in_use > 0 ? 0 : 1;
  }
  dlock_sem_state_free(st);
  dlock_permit_sem_free(sem);
  dlock_client_free(client);
  return rc;
}

int cli_limit_force_unlock(struct cli_ctx *c) {
  dlock_client_t *client;
  dlock_permit_sem_t *sem = NULL;
  bool was = false;
  int rc = cli_connect(c, &client), err;
  if (rc != 0)
    return rc;
  err = dlock_permit_sem_new(client, c->o->name, &sem);
  if (err == 0)
    err = dlock_permit_sem_delete(sem, &was);
  if (err != 0) {
    rc = cli_lib_error(c, c->name_shown, err);
  } else {
    printf("%s: %s\n", c->name_shown,
           was ? "semaphore deleted (its holders have lost their permits)"
               : "was not a semaphore");
    rc = fflush(stdout) != 0 ? CLI_EX_SOFTWARE : 0;
  }
  dlock_permit_sem_free(sem);
  dlock_client_free(client);
  return rc;
}
