/*
 * silent.c - a server that accepts connections and never answers, for the
 * command's tests of -w against a silent backend.
 *
 *   silent PORTFILE [SECONDS]
 *
 * Listens on 127.0.0.1 on a free port, writes the port to PORTFILE (via a
 * temporary file and rename, so a reader never sees half of it), then
 * accepts every connection, keeps it open and reads nothing from it. Exits
 * after SECONDS (default 60) by alarm(), so a test that forgets it does not
 * leave it running; the test stops it by PID sooner.
 */
#define _POSIX_C_SOURCE 200809L

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv) {
  struct sockaddr_in a;
  socklen_t len = sizeof a;
  char tmp[4096];
  int fd, secs = argc > 2 ? atoi(argv[2]) : 60;
  FILE *f;
  if (argc < 2 || secs <= 0) {
    fprintf(stderr, "usage: silent PORTFILE [SECONDS]\n");
    return 64;
  }
  alarm((unsigned)secs);
  fd = socket(AF_INET, SOCK_STREAM, 0);
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      listen(fd, 64) != 0 || getsockname(fd, (struct sockaddr *)&a, &len)) {
    perror("silent: listen");
    return 70;
  }
  snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
  f = fopen(tmp, "w");
  if (f == NULL || fprintf(f, "%d\n", ntohs(a.sin_port)) < 0 ||
      fclose(f) != 0 || rename(tmp, argv[1]) != 0) {
    perror("silent: port file");
    return 70;
  }
  for (int n = 0; n < 100000; n++) {
    int c = accept(fd, NULL, NULL);
    if (c < 0)
      continue; /* kept open (never read) until we exit */
  }
  return 0;
}
