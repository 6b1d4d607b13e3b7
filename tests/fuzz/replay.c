/*
 * replay.c - main() for a fuzz target built without libFuzzer.
 *
 * Design note: every target in this folder defines only
 * LLVMFuzzerTestOneInput(). Linked with this file instead of libFuzzer it
 * becomes a plain program that feeds it each file named on the command line
 * (a directory stands for every regular file in it, in name order), so the
 * seed corpora and the inputs of crashes found earlier run in every build
 * of the normal suite (gcc, ASan+UBSan, TSan, release). Single threaded;
 * the exit status is 0 when every input ran (a bug shows up as a sanitizer
 * report or a crash), 2 when an input could not be read.
 */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: cannot open %s\n", path);
    return -1;
  }
  size_t cap = 4096, len = 0;
  uint8_t *buf = malloc(cap);
  for (;;) {
    if (!buf) {
      fclose(f);
      fprintf(stderr, "replay: out of memory reading %s\n", path);
      return -1;
    }
    len += fread(buf + len, 1, cap - len, f);
    if (len < cap)
      break;
    cap *= 2;
    uint8_t *nb = realloc(buf, cap);
    if (!nb)
      free(buf);
    buf = nb;
  }
  int err = ferror(f);
  fclose(f);
  if (err) {
    free(buf);
    fprintf(stderr, "replay: read error on %s\n", path);
    return -1;
  }
  /* an exact-size copy, so a read past the input is caught by ASan */
  uint8_t *exact = malloc(len ? len : 1);
  if (!exact) {
    free(buf);
    return -1;
  }
  memcpy(exact, buf, len);
  free(buf);
  LLVMFuzzerTestOneInput(exact, len);
  free(exact);
  return 0;
}

static int by_name(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_dir(const char *dir, int *count) {
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "replay: cannot open directory %s\n", dir);
    return -1;
  }
  char **names = NULL;
  size_t n = 0, cap = 0;
  int rc = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.')
      continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      char **nn = realloc(names, cap * sizeof *names);
      if (!nn) {
        rc = -1;
        break;
      }
      names = nn;
    }
    size_t l = strlen(dir) + strlen(e->d_name) + 2;
    if (!(names[n] = malloc(l))) {
      rc = -1;
      break;
    }
    snprintf(names[n], l, "%s/%s", dir, e->d_name);
    n++;
  }
  closedir(d);
  if (n)
    qsort(names, n, sizeof *names, by_name);
  for (size_t i = 0; i < n; i++) {
    struct stat st;
    if (rc == 0 && stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
      if (run_file(names[i]) != 0)
        rc = -1;
      else
        (*count)++;
    }
    free(names[i]);
  }
  free(names);
  return rc;
}

int main(int argc, char **argv) {
  int count = 0, rc = 0;
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (int i = 1; i < argc && rc == 0; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      fprintf(stderr, "replay: no such file or directory: %s\n", argv[i]);
      rc = -1;
    } else if (S_ISDIR(st.st_mode)) {
      rc = run_dir(argv[i], &count);
    } else if (run_file(argv[i]) == 0) {
      count++;
    } else {
      rc = -1;
    }
  }
  printf("replay: %d input(s) ran\n", count);
  return rc == 0 ? 0 : 2;
}
