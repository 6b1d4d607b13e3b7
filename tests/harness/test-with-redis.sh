#!/usr/bin/env bash
# test-with-redis.sh WITH_REDIS - checks with-redis.sh's documented interface:
# exported variables, --conf lines, exit status, stdin, cleanup of the server
# and its directory, usage errors, and signal forwarding. Every wait is
# bounded.
set -u
W=${1:?usage: test-with-redis.sh path/to/with-redis.sh}
fails=0
fail() {
  echo "FAIL: $*" >&2
  fails=$((fails + 1))
}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-with-redis-XXXXXX")
trap 'rm -rf -- "$tmp"' EXIT

# gone PID: true once PID has exited (at most 5 s)
gone() {
  local i=0
  while [ $i -lt 500 ]; do
    kill -0 "$1" 2>/dev/null || return 0
    sleep 0.01
    i=$((i + 1))
  done
  return 1
}

# 1. variables, ping, exit status, cleanup
"$W" -- sh -c 'echo "$DLOCK_URL $REDIS_PORT $REDIS_PID $REDIS_DIR" >"$0";
  $REDIS_CLI ping >"$0.ping"; exit 7' "$tmp/env"
rc=$?
[ $rc -eq 7 ] || fail "exit status: got $rc, want 7"
read -r url port pid dir <"$tmp/env"
[ "$url" = "redis://127.0.0.1:$port" ] || fail "DLOCK_URL=$url (port $port)"
case "$port" in '' | *[!0-9]*) fail "REDIS_PORT=$port" ;; esac
[ "$(cat "$tmp/env.ping")" = PONG ] || fail "ping: $(cat "$tmp/env.ping")"
gone "$pid" || fail "server $pid still running after exit"
[ ! -e "$dir" ] || fail "dir $dir left behind"

# 2. --conf lines, in order, later ones win
"$W" --conf 'requirepass s3cret' --conf 'maxmemory 1000000' \
  --conf 'maxmemory 2000000' -- sh -c '
  $REDIS_CLI ping 2>&1 | grep -q NOAUTH || exit 11
  [ "$($REDIS_CLI -a s3cret --no-auth-warning config get maxmemory | tail -n 1)" = 2000000 ] || exit 12
  [ "$($REDIS_CLI -a s3cret --no-auth-warning config get save | tail -n 1)" = "" ] || exit 13
  [ "$($REDIS_CLI -a s3cret --no-auth-warning config get appendonly | tail -n 1)" = no ] || exit 14
  exit 0'
rc=$?
[ $rc -eq 0 ] || fail "--conf lines: status $rc"
"$W" --conf 'appendonly yes' -- sh -c \
  '[ "$($REDIS_CLI config get appendonly | tail -n 1)" = yes ]'
[ $? -eq 0 ] || fail "--conf appendonly yes not applied"

# 3. stdin reaches the command
out=$(echo hello | "$W" -- cat)
[ "$out" = hello ] || fail "stdin: got '$out'"

# 4. usage and startup errors give 125 and do not run the command
"$W" sh -c 'touch "$0"' "$tmp/ran" 2>/dev/null
rc=$?
[ $rc -eq 125 ] || fail "missing --: status $rc, want 125"
"$W" -- 2>/dev/null
rc=$?
[ $rc -eq 125 ] || fail "no command: status $rc, want 125"
"$W" --conf 'no-such-directive 1' -- sh -c 'touch "$0"' "$tmp/ran" 2>/dev/null
rc=$?
[ $rc -eq 125 ] || fail "bad --conf: status $rc, want 125"
[ ! -e "$tmp/ran" ] || fail "command ran although the server did not start"

# 5. SIGTERM to the script reaches the command; the server is stopped
"$W" -- sh -c 'trap "exit 42" TERM; echo "$REDIS_PID $REDIS_DIR" >"$0";
  i=0; while [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done; exit 3' \
  "$tmp/sig" &
wpid=$!
i=0
while [ $i -lt 1000 ] && [ ! -s "$tmp/sig" ]; do
  sleep 0.01
  i=$((i + 1))
done
kill -TERM "$wpid"
wait "$wpid"
rc=$?
[ $rc -eq 42 ] || fail "TERM forwarding: status $rc, want 42"
read -r pid dir <"$tmp/sig"
gone "$pid" || fail "server $pid still running after TERM"
[ ! -e "$dir" ] || fail "dir $dir left behind after TERM"

# 6. two at once get different ports
"$W" -- sh -c 'echo $REDIS_PORT >"$0"; sleep 0.3' "$tmp/p1" &
p1=$!
"$W" -- sh -c 'echo $REDIS_PORT >"$0"; sleep 0.3' "$tmp/p2" &
p2=$!
wait $p1 || fail "parallel 1"
wait $p2 || fail "parallel 2"
[ "$(cat "$tmp/p1")" != "$(cat "$tmp/p2")" ] || fail "same port twice"

if [ $fails -ne 0 ]; then
  echo "$fails failure(s)" >&2
  exit 1
fi
echo "with-redis.sh: all checks passed"
