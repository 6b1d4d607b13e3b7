/*
 * fproc.h - child processes of a fault test: fault_worker instances and the
 * dlock command, with a pipe to their stdin and one from their stdout.
 *
 * The test talks to a worker in lines: it writes commands ("release\n")
 * and waits, with a bound, for the worker's event lines ("w1 ACQUIRED ...").
 * Every line received is kept, with the time it arrived, so a test can look
 * back. Children are stopped only by their pid (or, for the dlock command
 * and the command it runs, the process group fproc created for it), and
 * every child still running is killed at exit.
 *
 * Threads: main thread only.
 */
#ifndef DLOCK_FAULT_FPROC_H
#define DLOCK_FAULT_FPROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct fproc {
  pid_t pid; /* 0 once reaped */
  bool own_group;
  int in_fd, out_fd; /* -1 when closed */
  char tag[32];
  char **lines; /* every line received, NUL-terminated, without '\n' */
  int64_t *line_us;
  size_t nlines, cap;
  char partial[4096];
  size_t npartial;
  int status; /* wait status once reaped */
  bool exited;
  bool group_leftover; /* own_group: members were left when it exited */
} fproc_t;

/* Starts argv[0] with argv (NULL-terminated). own_group: in a new process
 * group (the dlock command: its child is stopped with it). tag: for
 * messages. NULL on failure. */
fproc_t *fproc_start(char *const argv[], const char *tag, bool own_group);
/* The same, the child running with group id `gid` (and no supplementary
 * groups; (gid_t)-1: unchanged): packet filters can then single out its
 * connections (iptables' owner match), whatever addresses it uses. */
fproc_t *fproc_start_gid(char *const argv[], const char *tag, bool own_group,
                         gid_t gid);

/* Sends one line (a '\n' is appended). 0 or -1. */
int fproc_send(fproc_t *p, const char *line);
/* Closes the child's stdin (a worker in hold mode releases and quits). */
void fproc_close_stdin(fproc_t *p);

/* Reads whatever is available within timeout_ms (0 = just drain). */
void fproc_pump(fproc_t *p, int64_t timeout_ms);
/* Waits for a line containing `needle`, starting at line index *from (the
 * index after the match is stored back, so successive calls walk forward).
 * Returns the line (owned by p) or NULL after timeout_ms. */
const char *fproc_expect(fproc_t *p, const char *needle, size_t *from,
                         int64_t timeout_ms);
/* Arrival time (monotonic us) of the line fproc_expect() last returned at
 * index *from - 1. */
int64_t fproc_line_time(const fproc_t *p, size_t idx);
/* Number of lines so far containing needle. */
size_t fproc_count(const fproc_t *p, const char *needle);

/* key=value field of a line as an integer (INT64_MIN when absent). */
int64_t fproc_field(const char *line, const char *key);
/* key=value field as a string copied into buf ("" when absent). */
const char *fproc_field_str(const char *line, const char *key, char *buf,
                            size_t n);

/* Waits (bounded) for the child to exit; true when it did. */
bool fproc_wait_exit(fproc_t *p, int64_t timeout_ms);
/* Signals the child (its group when own_group). 0 or -1. */
int fproc_signal(fproc_t *p, int sig);
/* Kills (SIGKILL) if still running, reaps, frees. Accepts NULL. */
void fproc_free(fproc_t *p);
/* Prints the child's lines to stderr (diagnostics after a failure). */
void fproc_dump(const fproc_t *p);

/* Monotonic microseconds (same clock as fence_now_us). */
int64_t fproc_now_us(void);

#endif /* DLOCK_FAULT_FPROC_H */
