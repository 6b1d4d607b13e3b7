#!/usr/bin/env bash
# Mutual exclusion: 16 concurrent dlock invocations each do a racy
# read-modify-write increment (GET, then SET value+1) through redis-cli.
# Under the lock no update may be lost: the counter ends at 16.
. "$(dirname "$0")/common.bash"

N=16
$REDIS_CLI SET cli:counter 0 >/dev/null

# The short sleep between GET and SET widens the race window so that a
# broken lock would lose updates reliably; it waits for no state.
incr='v=$($REDIS_CLI GET cli:counter) && sleep 0.02 &&
  $REDIS_CLI SET cli:counter $((v + 1)) >/dev/null &&
  printf "%s\n" "$DLOCK_NAME" >"$OUT.$I"'

pids=()
for i in $(seq $N); do
  OUT=$T/name I=$i run_bg p "$DLOCK" cli-mutex -c "$incr"
  pids+=("$p")
done
bad=0
for p in "${pids[@]}"; do
  wait_exit "$p" 60000
  [ "$ST" = 0 ] || { fail "a dlock exited with $ST"; bad=1; }
done
expect "all $N invocations exit 0" 0 "$bad"
expect "counter after $N locked increments" "$N" "$($REDIS_CLI GET cli:counter)"
expect "the command saw DLOCK_NAME" cli-mutex "$(cat "$T/name.1" 2>/dev/null)"
expect_true "lock free afterwards" is_free cli-mutex
expect "no key left behind" 0 "$($REDIS_CLI EXISTS cli-mutex)"

finish
