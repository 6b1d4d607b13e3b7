#!/usr/bin/env bash
# keep-server.sh N CMD... - remembers the server that with-redis.sh just
# started as server N (RL_URL_N, RL_PORT_N, RL_PID_N) and runs CMD, so
# that nested with-redis.sh calls give one test several servers:
#   with-redis.sh -- keep-server.sh 1 with-redis.sh -- keep-server.sh 2 ...
set -u
n=${1:?usage: keep-server.sh N CMD...}
shift
export "RL_URL_$n=$DLOCK_URL" "RL_PORT_$n=$REDIS_PORT" "RL_PID_$n=$REDIS_PID"
exec "$@"
