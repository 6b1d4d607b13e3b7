/*
 * dlock_interop.c - a line-driven dlock client for the Java interop suite
 * (tests/interop/java). It shows the library's behaviour where the dlock
 * command's naming gets in the way (`dlock -s NAME` is the read side of
 * NAME:dlock-rw, see docs/LAYOUT.md) or where the command has no verb
 * (latches, the plain semaphore, permit ids).
 *
 *   dlock_interop URL
 *
 * reads one command per line on stdin and answers one line on stdout, all on
 * the main thread (so every lock has the owner <client-id>:<thread-id> of
 * that thread):
 *
 *   lock NAME WAIT_MS        acquire the reentrant lock NAME (DLOCK_REENTRANT)
 *   read NAME WAIT_MS        acquire the read side of NAME (DLOCK_READ)
 *   write NAME WAIT_MS       acquire the write side of NAME (DLOCK_WRITE)
 *   fair NAME WAIT_MS        acquire the fair lock NAME (DLOCK_FAIR)
 *   fenced NAME WAIT_MS      acquire the fenced lock NAME (DLOCK_FENCED);
 *                            answers "ok TOKEN"
 *   unlock NAME | unread NAME | unwrite NAME | unfair NAME | unfenced NAME
 *                            release one hold
 *   latch-set NAME N         try_set_count
 *   latch-down NAME          count_down
 *   latch-await NAME WAIT_MS await
 *   latch-count NAME         count
 *   sem-set NAME N           semaphore: try_set_permits
 *   sem-acquire NAME WAIT_MS semaphore: take one permit
 *   sem-release NAME         semaphore: give one permit back
 *   sem-avail NAME           semaphore: permits available
 *   psem-set NAME N          permit semaphore: try_set_permits
 *   psem-acquire NAME LEASE_MS  permit semaphore: take one permit now (no
 *                            wait) with that lease; answers "ok ID"
 *   psem-release NAME ID     permit semaphore: give back the permit ID
 *                            (32 hex digits; any client's, Redisson's too)
 *   psem-avail NAME          permit semaphore: permits available
 *   psem-delete NAME         permit semaphore: delete it
 *   multi N1,N2,... WAIT_MS  acquire the reentrant locks N1, N2... as one
 *                            multilock (dlock_multilock_*, all or nothing)
 *   unmulti N1,N2,...        release that multilock
 *   hammer NAME MS           the reentrant lock NAME: acquire (waiting up
 *                            to 10 s) and release back to back for MS ms;
 *                            answers "ok COUNT" (acquisitions)
 *   count KIND NAME N FILE   a mixed race: N times take KIND on NAME
 *                            (lock, fair, fenced, write: that lock; sem:
 *                            one permit of the semaphore; psem: one permit
 *                            of the permit semaphore; each waiting up to
 *                            10 s), add 1 to the decimal count in FILE
 *                            (read, then rewrite) and append the line
 *                            "dlock TOKEN" (0 for kinds without tokens) to
 *                            FILE.log, then give it back; answers "ok N"
 *                            or the first error
 *   id                       the client id
 *
 * DLOCK_INTEROP_SESSION_MS in the environment, when set, is the client's
 * session timeout (dlock_options_set_session_timeout: the etcd lease's
 * TTL, the ZooKeeper session's), for the conformance steps where a holder's
 * session runs out.
 *
 * WAIT_MS: 0 = try once. Leases are the watchdog's. Answers: "ok [VALUE]"
 * or "err <DLOCK_E...> <message>". EOF on stdin releases nothing
 * explicitly: the client is freed, so holds expire with their lease.
 */
#define _POSIX_C_SOURCE 200809L
#include <dlock/dlock.h>

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_LOCKS 64

struct named {
  char name[256];
  dlock_lock_kind_t kind;
  dlock_lock_t *lock;
};

static struct named locks[MAX_LOCKS];
static int nlocks;

static dlock_lock_t *get_lock(dlock_client_t *c, const char *name,
                              dlock_lock_kind_t kind) {
  for (int i = 0; i < nlocks; i++)
    if (locks[i].kind == kind && strcmp(locks[i].name, name) == 0)
      return locks[i].lock;
  if (nlocks == MAX_LOCKS || strlen(name) >= sizeof locks[0].name)
    return NULL;
  dlock_lock_t *l = NULL;
  if (dlock_lock_new_kind(c, name, kind, &l) != 0)
    return NULL;
  snprintf(locks[nlocks].name, sizeof locks[nlocks].name, "%s", name);
  locks[nlocks].kind = kind;
  locks[nlocks].lock = l;
  nlocks++;
  return l;
}

#define MAX_MULTI 16
#define MULTI_MEMBERS 8

struct multi {
  char names[256]; /* the comma-separated list, as given */
  dlock_multilock_t *m;
};

static struct multi multis[MAX_MULTI];
static int nmultis;

/* The multilock over the reentrant locks named in list (comma-separated),
 * made on first use; NULL for a bad list or when the tables are full. */
static dlock_multilock_t *get_multi(dlock_client_t *c, const char *list) {
  for (int i = 0; i < nmultis; i++)
    if (strcmp(multis[i].names, list) == 0)
      return multis[i].m;
  if (nmultis == MAX_MULTI || strlen(list) >= sizeof multis[0].names)
    return NULL;
  char copy[256];
  snprintf(copy, sizeof copy, "%s", list);
  dlock_lock_t *members[MULTI_MEMBERS];
  size_t n = 0;
  char *save = NULL;
  for (char *tok = strtok_r(copy, ",", &save); tok;
       tok = strtok_r(NULL, ",", &save)) {
    if (n == MULTI_MEMBERS)
      return NULL;
    if ((members[n] = get_lock(c, tok, DLOCK_REENTRANT)) == NULL)
      return NULL;
    n++;
  }
  dlock_multilock_t *m = NULL;
  if (n == 0 || dlock_multilock_new(&m, members, n) != 0)
    return NULL;
  snprintf(multis[nmultis].names, sizeof multis[nmultis].names, "%s", list);
  multis[nmultis].m = m;
  nmultis++;
  return m;
}

static void answer(int rc, const char *value) {
  if (rc == 0)
    printf("ok%s%s\n", value ? " " : "", value ? value : "");
  else
    printf("err %s %s\n", dlock_err_name(rc), dlock_last_error());
  fflush(stdout);
}

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Contention from this process: the reentrant lock taken and released back
 * to back for ms milliseconds (bounded by count too). */
static void hammer(dlock_client_t *c, const char *name, long long ms) {
  dlock_lock_t *l = get_lock(c, name, DLOCK_REENTRANT);
  if (l == NULL) {
    answer(DLOCK_EINVAL, NULL);
    return;
  }
  long long until = now_ms() + ms, count = 0;
  int rc = 0;
  for (long i = 0; i < 10000000 && now_ms() < until; i++) {
    if ((rc = dlock_lock_acquire(l, 10000, DLOCK_LEASE_WATCHDOG)) != 0)
      break;
    count++;
    if ((rc = dlock_lock_release(l)) != 0)
      break;
  }
  char buf[32];
  snprintf(buf, sizeof buf, "%lld", count);
  answer(rc, buf);
}

/* FILE's count plus one, rewritten; false when it cannot be read or
 * written. Only under the kind raced on, so no other writer meanwhile. */
static bool bump(const char *file) {
  FILE *f = fopen(file, "r+");
  if (f == NULL)
    return false;
  long long v = 0;
  bool ok = fscanf(f, "%lld", &v) == 1 && fseek(f, 0, SEEK_SET) == 0 &&
            fprintf(f, "%lld\n", v + 1) > 0;
  return fclose(f) == 0 && ok;
}

static bool append_token(const char *file, int64_t token) {
  char path[600];
  snprintf(path, sizeof path, "%s.log", file);
  FILE *f = fopen(path, "a");
  if (f == NULL)
    return false;
  bool ok = fprintf(f, "dlock %lld\n", (long long)token) > 0;
  return fclose(f) == 0 && ok;
}

/* count KIND NAME N FILE: the mixed race's dlock side. */
static void count_verb(dlock_client_t *c, const char *line) {
  char kind_s[16] = "", name[256] = "", file[512] = "";
  long long n = 0;
  if (sscanf(line, "count %15s %255s %lld %511s", kind_s, name, &n, file) !=
          4 ||
      n < 0 || n > 100000) {
    printf("err usage %s", line);
    fflush(stdout);
    return;
  }
  dlock_lock_t *l = NULL;
  dlock_semaphore_t *sem = NULL;
  dlock_permit_sem_t *psem = NULL;
  int rc = 0;
  if (strcmp(kind_s, "sem") == 0)
    rc = dlock_semaphore_new(c, name, &sem);
  else if (strcmp(kind_s, "psem") == 0)
    rc = dlock_permit_sem_new(c, name, &psem);
  else {
    dlock_lock_kind_t kind = strcmp(kind_s, "lock") == 0     ? DLOCK_REENTRANT
                             : strcmp(kind_s, "fair") == 0   ? DLOCK_FAIR
                             : strcmp(kind_s, "fenced") == 0 ? DLOCK_FENCED
                             : strcmp(kind_s, "write") == 0  ? DLOCK_WRITE
                                                             : DLOCK_READ;
    if (kind == DLOCK_READ || (l = get_lock(c, name, kind)) == NULL)
      rc = DLOCK_EINVAL;
  }
  long long done = 0;
  bool torn = false;
  for (; rc == 0 && done < n; done++) {
    int64_t token = 0;
    char id[DLOCK_PERMIT_ID_LEN + 1];
    if (sem)
      rc = dlock_semaphore_acquire(sem, 1, 10000);
    else if (psem)
      rc = dlock_permit_sem_acquire(psem, 10000, DLOCK_LEASE_WATCHDOG, id);
    else if (strcmp(kind_s, "fenced") == 0)
      rc = dlock_lock_acquire_fenced(l, 10000, DLOCK_LEASE_WATCHDOG, &token);
    else
      rc = dlock_lock_acquire(l, 10000, DLOCK_LEASE_WATCHDOG);
    if (rc != 0)
      break;
    torn = !bump(file) || !append_token(file, token);
    int rel = sem    ? dlock_semaphore_release(sem, 1)
              : psem ? dlock_permit_sem_release(psem, id)
                     : dlock_lock_release(l);
    if (torn) {
      /* a count that is not a number was being rewritten by another
       * holder: two at once */
      printf("err DLOCK_EINVAL increment %lld: cannot read or rewrite the "
             "count in %s (another holder writing it at the same time?)\n",
             done + 1, file);
      fflush(stdout);
      break;
    }
    rc = rel;
  }
  char buf[32];
  snprintf(buf, sizeof buf, "%lld", done);
  if (!torn)
    answer(rc, buf);
  if (sem)
    dlock_semaphore_free(sem);
  if (psem)
    dlock_permit_sem_free(psem);
}

/* The plain semaphore (RSemaphore): one permit per acquire and release. */
static void semaphore_verb(dlock_client_t *c, const char *verb,
                           const char *name, long long n, const char *line) {
  dlock_semaphore_t *sem = NULL;
  int rc = dlock_semaphore_new(c, name, &sem);
  if (rc != 0) {
    answer(rc, NULL);
    return;
  }
  char buf[64];
  if (strcmp(verb, "sem-set") == 0) {
    bool set = false;
    rc = dlock_semaphore_try_set_permits(sem, n, &set);
    answer(rc, set ? "set" : "unchanged");
  } else if (strcmp(verb, "sem-acquire") == 0) {
    answer(dlock_semaphore_acquire(sem, 1, n), NULL);
  } else if (strcmp(verb, "sem-release") == 0) {
    answer(dlock_semaphore_release(sem, 1), NULL);
  } else if (strcmp(verb, "sem-avail") == 0) {
    int64_t v = 0;
    rc = dlock_semaphore_available(sem, &v);
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    answer(rc, buf);
  } else {
    printf("err usage %s", line);
    fflush(stdout);
  }
  dlock_semaphore_free(sem);
}

/* The permit semaphore (RPermitExpirableSemaphore): ids pass as text. */
static void permit_verb(dlock_client_t *c, const char *verb, const char *name,
                        const char *line) {
  dlock_permit_sem_t *sem = NULL;
  int rc = dlock_permit_sem_new(c, name, &sem);
  if (rc != 0) {
    answer(rc, NULL);
    return;
  }
  char arg[128] = "";
  sscanf(line, "%*s %*s %127s", arg);
  char buf[64];
  if (strcmp(verb, "psem-set") == 0) {
    bool set = false;
    rc = dlock_permit_sem_try_set_permits(sem, atoll(arg), &set);
    answer(rc, set ? "set" : "unchanged");
  } else if (strcmp(verb, "psem-acquire") == 0) {
    char id[DLOCK_PERMIT_ID_LEN + 1];
    rc = dlock_permit_sem_acquire(sem, 0, atoll(arg), id);
    answer(rc, rc == 0 ? id : NULL);
  } else if (strcmp(verb, "psem-release") == 0) {
    answer(dlock_permit_sem_release(sem, arg), NULL);
  } else if (strcmp(verb, "psem-delete") == 0) {
    bool existed = false;
    rc = dlock_permit_sem_delete(sem, &existed);
    answer(rc, existed ? "deleted" : "absent");
  } else if (strcmp(verb, "psem-avail") == 0) {
    int64_t v = 0;
    rc = dlock_permit_sem_available(sem, &v);
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    answer(rc, buf);
  } else {
    printf("err usage %s", line);
    fflush(stdout);
  }
  dlock_permit_sem_free(sem);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: dlock_interop URL\n");
    return 64;
  }
  dlock_client_t *c = NULL;
  dlock_options_t *o = NULL;
  const char *session = getenv("DLOCK_INTEROP_SESSION_MS");
  if (dlock_options_new(&o) != 0 ||
      (session &&
       dlock_options_set_session_timeout(o, strtoll(session, NULL, 10)) != 0) ||
      dlock_client_new(&c, argv[1], o) != 0) {
    fprintf(stderr, "dlock_interop: %s\n", dlock_last_error());
    dlock_options_free(o);
    return 69;
  }
  dlock_options_free(o);
  char line[1024];
  while (fgets(line, sizeof line, stdin) != NULL) {
    char verb[32] = "", name[256] = "";
    long long n = 0;
    int fields = sscanf(line, "%31s %255s %lld", verb, name, &n);
    char buf[64];
    int rc = DLOCK_EINVAL;
    if (fields >= 1 && strcmp(verb, "id") == 0) {
      answer(0, dlock_client_id(c));
      continue;
    }
    if (fields >= 1 && strcmp(verb, "count") == 0) {
      count_verb(c, line);
      continue;
    }
    if (fields < 2) {
      printf("err usage %s", line);
      fflush(stdout);
      continue;
    }
    dlock_lock_kind_t kind = DLOCK_REENTRANT;
    bool is_lock = true, release = false;
    if (strcmp(verb, "lock") == 0 || strcmp(verb, "unlock") == 0)
      kind = DLOCK_REENTRANT;
    else if (strcmp(verb, "read") == 0 || strcmp(verb, "unread") == 0)
      kind = DLOCK_READ;
    else if (strcmp(verb, "write") == 0 || strcmp(verb, "unwrite") == 0)
      kind = DLOCK_WRITE;
    else if (strcmp(verb, "fair") == 0 || strcmp(verb, "unfair") == 0)
      kind = DLOCK_FAIR;
    else if (strcmp(verb, "fenced") == 0 || strcmp(verb, "unfenced") == 0)
      kind = DLOCK_FENCED;
    else
      is_lock = false;
    if (is_lock) {
      release = strncmp(verb, "un", 2) == 0;
      dlock_lock_t *l = get_lock(c, name, kind);
      if (l == NULL) {
        answer(DLOCK_EINVAL, NULL);
        continue;
      }
      if (kind == DLOCK_FENCED && !release) {
        int64_t token = 0;
        rc = dlock_lock_acquire_fenced(l, n, DLOCK_LEASE_WATCHDOG, &token);
        snprintf(buf, sizeof buf, "%lld", (long long)token);
        answer(rc, rc == 0 ? buf : NULL);
        continue;
      }
      rc = release ? dlock_lock_release(l)
                   : dlock_lock_acquire(l, n, DLOCK_LEASE_WATCHDOG);
      answer(rc, NULL);
      continue;
    }
    if (strcmp(verb, "multi") == 0 || strcmp(verb, "unmulti") == 0) {
      dlock_multilock_t *m = get_multi(c, name);
      if (m == NULL)
        answer(DLOCK_EINVAL, NULL);
      else
        answer(verb[0] == 'u' ? dlock_multilock_release(m)
                              : dlock_multilock_acquire(m, n,
                                                        DLOCK_LEASE_WATCHDOG),
               NULL);
      continue;
    }
    if (strcmp(verb, "hammer") == 0) {
      hammer(c, name, n);
      continue;
    }
    if (strncmp(verb, "psem-", 5) == 0) {
      permit_verb(c, verb, name, line);
      continue;
    }
    if (strncmp(verb, "sem-", 4) == 0) {
      semaphore_verb(c, verb, name, n, line);
      continue;
    }
    dlock_latch_t *latch = NULL;
    rc = dlock_latch_new(c, name, &latch);
    if (rc != 0) {
      answer(rc, NULL);
      continue;
    }
    if (strcmp(verb, "latch-set") == 0) {
      bool set = false;
      rc = dlock_latch_try_set_count(latch, n, &set);
      answer(rc, set ? "set" : "unchanged");
    } else if (strcmp(verb, "latch-down") == 0) {
      answer(dlock_latch_count_down(latch), NULL);
    } else if (strcmp(verb, "latch-await") == 0) {
      answer(dlock_latch_await(latch, n), NULL);
    } else if (strcmp(verb, "latch-count") == 0) {
      int64_t v = 0;
      rc = dlock_latch_count(latch, &v);
      snprintf(buf, sizeof buf, "%lld", (long long)v);
      answer(rc, buf);
    } else {
      printf("err usage %s", line);
      fflush(stdout);
    }
    dlock_latch_free(latch);
  }
  for (int i = 0; i < nmultis; i++)
    dlock_multilock_free(multis[i].m);
  for (int i = 0; i < nlocks; i++)
    dlock_lock_free(locks[i].lock);
  dlock_client_free(c);
  return 0;
}
