#!/usr/bin/env bash
# Usage errors and refusals the same on every backend: what the backend
# does not offer (-N on etcd, credentials on ZooKeeper) is a usage error
# (64), a refused connection's hint names the backend's server, and the
# command's environment holds no password variable.
#
#   backend_usage.sh DLOCK [redis|zookeeper|etcd]
. "$(dirname "$0")/common.bash"

backend=${1:-redis}
use_backend "$backend"
name=cli-usage

"$DLOCK" -w abc "$name" true 2>"$T/a.err"
expect "$backend: -w abc: 64" 64 $?
expect_true "$backend: -w abc: one line" one_line "$T/a.err"

case $backend in
etcd)
  "$DLOCK" -N 2 "$name" true 2>"$T/n.err"
  expect "etcd: -N 2 (no permit semaphores): 64" 64 $?
  expect_true "etcd: -N 2: one line" one_line "$T/n.err"
  expect_grep "etcd: -N 2: says what is missing" "permit" "$T/n.err"
  ;;
zookeeper)
  "$DLOCK" -u "zookeeper://u:Sekrit-4@${DLOCK_URL#zookeeper://}" "$name" true \
    2>"$T/n.err"
  expect "zookeeper: credentials in the URL (not offered): 64" 64 $?
  expect_true "zookeeper: credentials: one line" one_line "$T/n.err"
  expect_no_grep "zookeeper: credentials: password not shown" "Sekrit-4" \
    "$T/n.err"
  ;;
redis)
  "$DLOCK" -u "unix://$T/no.sock" --tls "$name" true 2>"$T/n.err"
  expect "redis: TLS over a Unix socket (not offered): 64" 64 $?
  expect_true "redis: TLS over a Unix socket: one line" one_line "$T/n.err"
  ;;
esac

# A refused connection (port 1 on loopback: nothing listens there).
scheme=${DLOCK_URL%%://*}
"$DLOCK" -u "$scheme://127.0.0.1:1" "$name" true 2>"$T/r.err"
expect "$backend: refused connection: 69" 69 $?
expect_true "$backend: refused connection: one line" one_line "$T/r.err"
case $backend in
redis) expect_grep "redis: the hint names redis-server" "redis-server" "$T/r.err" ;;
*) expect_no_grep "$backend: the hint does not name redis-server" \
  "redis-server" "$T/r.err" ;;
esac
[ $backend = zookeeper ] &&
  expect_grep "zookeeper: the hint names ZooKeeper" "ZooKeeper" "$T/r.err"

# No password variable reaches the command.
DLOCK_SENTINEL_PASSWORD=Sekrit-5 "$DLOCK" "$name" env >"$T/env.out"
expect "$backend: the command ran" 0 $?
expect_grep "$backend: the command has DLOCK_NAME" "DLOCK_NAME=$name" "$T/env.out"
expect_no_grep "$backend: no DLOCK_SENTINEL_PASSWORD in its environment" \
  "Sekrit-5" "$T/env.out"

finish
