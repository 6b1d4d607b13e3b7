/*
 * critical_section.c - the smallest useful libdlock program.
 *
 * Design note. One client per process, one handle per lock name; take the
 * lock with a bounded wait and the watchdog lease (renewed in the background
 * while we work, so a long critical section never outlives its lease, and a
 * crash frees the lock within one lease); release from the same thread.
 * Every call's status is checked, and dlock_last_error() says why it failed.
 * The lost callback runs on the library's thread: it only sets a flag that
 * the work loop checks, which is how a real program stops writing once it
 * no longer owns the lock.
 *
 *   critical_section [URL [NAME]]   (default redis://127.0.0.1:6379, "example")
 *
 * Run two at once: the second waits until the first releases.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#include <dlock/dlock.h>

static atomic_bool lost;

static void on_lost(void *userdata, const char *name, uint64_t thread_id,
                    dlock_lost_reason_t reason) {
  (void)userdata;
  (void)thread_id;
  fprintf(stderr, "lost '%s' (%s)\n", name,
          reason == DLOCK_LOST_GONE ? "key gone" : "backend unreachable");
  atomic_store(&lost, true);
}

static int fail(const char *what, int err) {
  fprintf(stderr, "%s: %s: %s\n", what, dlock_err_name(err),
          dlock_last_error()[0] ? dlock_last_error() : dlock_strerror(err));
  return 1;
}

int main(int argc, char **argv) {
  const char *url = argc > 1 ? argv[1] : "redis://127.0.0.1:6379";
  const char *name = argc > 2 ? argv[2] : "example";
  dlock_options_t *opts = NULL;
  dlock_client_t *client = NULL;
  dlock_lock_t *lock = NULL;
  int err, rc = 1, step;

  if ((err = dlock_options_new(&opts)) != 0)
    return fail("options", err);
  dlock_options_set_lost_callback(opts, on_lost, NULL);
  err = dlock_client_new(&client, url, opts);
  dlock_options_free(opts); /* copied by the client */
  if (err != 0)
    return fail("connect", err);
  if ((err = dlock_lock_new(client, name, &lock)) != 0) {
    rc = fail("lock handle", err);
    goto out;
  }

  /* Wait at most 10 s; the watchdog keeps the lease alive while we work. */
  err = dlock_lock_acquire(lock, 10000, DLOCK_LEASE_WATCHDOG);
  if (err == DLOCK_ETIMEDOUT) {
    fprintf(stderr, "'%s' is busy; giving up\n", name);
    goto out;
  }
  if (err != 0) {
    rc = fail("acquire", err);
    goto out;
  }
  printf("holding '%s' as %s:%llu\n", name, dlock_client_id(client),
         (unsigned long long)dlock_thread_id());

  /* The critical section: three steps of work, stopping if the lock goes. */
  for (step = 1; step <= 3 && !atomic_load(&lost); step++) {
    struct timespec ts = {0, 300 * 1000 * 1000};
    printf("  step %d\n", step);
    fflush(stdout);
    nanosleep(&ts, NULL);
  }

  err = dlock_lock_release(lock);
  if (err == DLOCK_ELOST)
    fprintf(stderr, "the lock was lost before the release\n");
  else if (err != 0)
    rc = fail("release", err);
  else {
    printf("released '%s'\n", name);
    rc = atomic_load(&lost) ? 1 : 0;
  }
out:
  dlock_lock_free(lock);
  dlock_client_free(client);
  return rc;
}
