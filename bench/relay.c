/*
 * relay.c - a TCP relay on a free 127.0.0.1 port to a server on
 * 127.0.0.1, holding every chunk a fixed delay in each direction: the
 * network delay that loopback lacks (this kernel has no netem qdisc), for
 * benchmarks that compare clients by round trips (bench/redlock.sh
 * --delay-ms).
 *
 *   relay TARGET_PORT DELAY_MS
 *
 * Prints its own port on one line, then forwards until SIGTERM or SIGINT.
 * The forwarding is the fault suite's relay (tests/fault/fnet.c), one
 * thread; this file only runs it as a process.
 */
#define _GNU_SOURCE 1
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fnet.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig) {
  (void)sig;
  stop = 1;
}

int main(int argc, char **argv) {
  if (argc != 3 || atoi(argv[1]) <= 0 || atoi(argv[2]) < 0) {
    fprintf(stderr, "usage: relay TARGET_PORT DELAY_MS\n");
    return 64;
  }
  struct sigaction sa = {.sa_handler = on_signal};
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  fnet_relay_t *r = fnet_relay_start(atoi(argv[1]), atoi(argv[2]), 0, 0);
  if (!r) {
    fprintf(stderr, "relay: cannot start\n");
    return 69;
  }
  printf("%d\n", fnet_relay_port(r));
  fflush(stdout);
  while (!stop)
    pause();
  fnet_relay_stop(r);
  return 0;
}
