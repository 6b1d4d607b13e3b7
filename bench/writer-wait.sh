#!/usr/bin/env bash
# writer-wait.sh - how long an exclusive `dlock` waits while a stream of
# shared (`dlock -s`) holders keeps the read side held: R reader loops, each
# running `dlock -s NAME sleep H` back to back (staggered by 30 ms), and
# after 1 s one `dlock -w WAIT NAME true`. Prints the exclusive one's exit
# status and wait. Every loop is bounded (200 rounds, 12 s); the readers are
# stopped by their PIDs.
#
# Usage: tests/harness/with-redis.sh -- bench/writer-wait.sh [DLOCK...]
#   DLOCK: dlock binaries to compare (default build/tools/dlock/dlock);
#   R (6), H (0.2 s), WAIT (8 s) from the environment.
set -u
R=${R:-6}
H=${H:-0.2}
WAIT=${WAIT:-8}
[ $# -gt 0 ] || set -- build/tools/dlock/dlock
for D in "$@"; do
  name=writer-wait-$$-$RANDOM
  end=$(($(date +%s) + 12))
  pids=()
  for i in $(seq 1 "$R"); do
    (
      sleep "$(printf "%d.%03d" $((i * 30 / 1000)) $((i * 30 % 1000)))"
      n=0
      while [ "$(date +%s)" -lt $end ] && [ $n -lt 200 ]; do
        "$D" -s -w 20 "$name" sleep "$H"
        n=$((n + 1))
      done
    ) &
    pids+=($!)
  done
  sleep 1
  t0=$(date +%s%N)
  "$D" -w "$WAIT" "$name" true
  rc=$?
  t1=$(date +%s%N)
  echo "$D: R=$R H=${H}s: exclusive exit $rc after $(((t1 - t0) / 1000000)) ms (wait ${WAIT}s)"
  for p in "${pids[@]}"; do
    pkill -P "$p" 2>/dev/null
    kill "$p" 2>/dev/null
  done
  wait 2>/dev/null
done
