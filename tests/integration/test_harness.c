/*
 * test_harness.c - the test harness tests itself, without libdlock.
 *
 * Design note: each case starts real redis-servers through harness.h and
 * checks what the other tests rely on: the default config (no persistence,
 * loopback only), extra config lines, AUTH by the harness, restarts on the
 * same port (data kept only with AOF), kill -9 then up, SIGSTOP/SIGCONT, and
 * that a forked child exiting does not stop its parent's server. Single
 * threaded.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#define CHECK_NO_DLOCK 1

#include "check.h"
#include "harness.h"

#include <errno.h>
#include <sys/stat.h>

static bool answers(int port, int64_t timeout_ms) {
  struct timeval tv = {.tv_sec = 0, .tv_usec = 200000};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
  if (!c || c->err) {
    if (c)
      redisFree(c);
    return false;
  }
  struct timeval io = {.tv_sec = timeout_ms / 1000,
                       .tv_usec = (timeout_ms % 1000) * 1000};
  redisSetTimeout(c, io);
  redisReply *r = redisCommand(c, "PING");
  bool ok = r != NULL;
  if (r)
    freeReplyObject(r);
  redisFree(c);
  return ok;
}

static void config_is(th_server_t *s, const char *key, const char *want) {
  redisReply *r = th_redis_cmd(s, "CONFIG GET %s", key);
  CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
  CHECK_STR(r->element[1]->str, want);
  freeReplyObject(r);
}

static void t_start_stop(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  CHECK(s->pid > 0 && s->port > 0);
  char url[64];
  snprintf(url, sizeof url, "redis://127.0.0.1:%d", s->port);
  CHECK_STR(s->url, url);
  char *pong = th_redis_str(s, "PING");
  CHECK_STR(pong, "PONG");
  free(pong);
  config_is(s, "save", "");
  config_is(s, "appendonly", "no");
  config_is(s, "bind", "127.0.0.1");
  char dir[256];
  snprintf(dir, sizeof dir, "%s", s->dir);
  struct stat st;
  CHECK(stat(dir, &st) == 0 && S_ISDIR(st.st_mode));
  int port = s->port;
  int64_t t0 = th_now_ms();
  th_server_stop(s);
  CHECK_INT(th_now_ms() - t0, <, 5000);
  CHECK(!answers(port, 500));
  CHECK(stat(dir, &st) != 0 && errno == ENOENT);
}

static void t_extra_conf(void) {
  const char *conf[] = {"maxmemory 12345678", "appendonly yes",
                        "appendfsync always", NULL};
  th_server_t *s = th_server_start(conf);
  CHECK(s);
  config_is(s, "maxmemory", "12345678");
  config_is(s, "appendonly", "yes");
  config_is(s, "appendfsync", "always");
  th_server_stop(s);
}

static void t_requirepass(void) {
  const char *conf[] = {"requirepass s3cret", NULL};
  th_server_t *s = th_server_start(conf);
  CHECK(s);
  char *pong = th_redis_str(s, "PING");
  CHECK_STR(pong, "PONG");
  free(pong);
  struct timeval tv = {.tv_sec = 2, .tv_usec = 0};
  redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
  CHECK(c && !c->err);
  redisReply *r = redisCommand(c, "PING");
  CHECK(r && r->type == REDIS_REPLY_ERROR && strstr(r->str, "NOAUTH"));
  freeReplyObject(r);
  redisFree(c);
  redisContext *mine = th_redis_connect(s);
  CHECK(mine);
  r = redisCommand(mine, "PING");
  CHECK(r && r->type == REDIS_REPLY_STATUS);
  freeReplyObject(r);
  redisFree(mine);
  th_server_stop(s);
}

static void t_restart_keeps_port(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  int port = s->port;
  pid_t pid = s->pid;
  char *ok = th_redis_str(s, "SET k v");
  CHECK_STR(ok, "OK");
  free(ok);
  CHECK_INT(th_server_restart(s), ==, 0);
  CHECK_INT(s->port, ==, port);
  CHECK(s->pid > 0 && s->pid != pid);
  /* no persistence: the key is gone; the cached connection reconnects */
  redisReply *r = th_redis_cmd(s, "GET k");
  CHECK(r && r->type == REDIS_REPLY_NIL);
  freeReplyObject(r);
  th_server_stop(s);
}

static void t_aof_survives_restart(void) {
  const char *conf[] = {"appendonly yes", "appendfsync always", NULL};
  th_server_t *s = th_server_start(conf);
  CHECK(s);
  char *ok = th_redis_str(s, "SET k v");
  CHECK_STR(ok, "OK");
  free(ok);
  CHECK_INT(th_server_restart(s), ==, 0);
  char *v = th_redis_str(s, "GET k");
  CHECK_STR(v, "v");
  free(v);
  th_server_stop(s);
}

static void t_kill9_and_up(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  CHECK_INT(th_server_kill9(s), ==, 0);
  CHECK_INT(s->pid, ==, 0);
  CHECK(th_redis_cmd(s, "PING") == NULL);
  CHECK(!answers(s->port, 500));
  CHECK_INT(th_server_up(s), ==, 0);
  char *pong = th_redis_str(s, "PING");
  CHECK_STR(pong, "PONG");
  free(pong);
  th_server_stop(s);
}

static void t_pause_resume(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  CHECK_INT(th_server_pause(s), ==, 0);
  int64_t t0 = th_now_ms();
  CHECK(!answers(s->port, 300));
  CHECK_INT(th_now_ms() - t0, <, 3000);
  CHECK_INT(th_server_resume(s), ==, 0);
  CHECK(answers(s->port, 2000));
  /* stopping a paused server works too */
  CHECK_INT(th_server_pause(s), ==, 0);
  t0 = th_now_ms();
  th_server_stop(s);
  CHECK_INT(th_now_ms() - t0, <, 5000);
}

static void t_many_servers(void) {
  th_server_t *a = th_server_start(NULL), *b = th_server_start(NULL),
              *c = th_server_start(NULL);
  CHECK(a && b && c);
  CHECK(a->port != b->port && b->port != c->port && a->port != c->port);
  CHECK(th_redis_int(a, "INCR x") == 1);
  CHECK(th_redis_int(b, "INCR x") == 1);
  CHECK(th_redis_int(c, "INCR x") == 1);
  th_server_stop(b);
  CHECK(th_redis_int(a, "INCR x") == 2);
  th_server_stop(a);
  th_server_stop(c);
}

static void t_forked_child_exit(void) {
  th_server_t *s = th_server_start(NULL);
  CHECK(s);
  fflush(stdout);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0)
    exit(0); /* runs the inherited atexit handler: must not stop s */
  int st;
  CHECK(waitpid(pid, &st, 0) == pid);
  CHECK(answers(s->port, 2000));
  th_server_stop(s);
}

static const check_case_t cases[] = {
    {"start_stop", t_start_stop},
    {"extra_conf", t_extra_conf},
    {"requirepass", t_requirepass},
    {"restart_keeps_port", t_restart_keeps_port},
    {"aof_survives_restart", t_aof_survives_restart},
    {"kill9_and_up", t_kill9_and_up},
    {"pause_resume", t_pause_resume},
    {"many_servers", t_many_servers},
    {"forked_child_exit", t_forked_child_exit},
};

CHECK_MAIN(cases)
