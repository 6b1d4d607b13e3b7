#!/usr/bin/env bash
# callgrind-floor.sh - the floor for client instructions per lock pair:
# redis-benchmark's client (hiredis, one connection, no pipelining)
# counted by callgrind, instructions per request x 2 (an acquire and a
# release are two requests).
#
# Design note. redis-benchmark runs `-t set -c 1` twice under
# `valgrind --tool=callgrind` against a private redis-server
# (tests/harness/with-redis.sh), with N1 and N2 requests; the difference of
# the two totals over N2 - N1 cancels what does not grow with the requests
# (start-up, the report). SET is the cheapest write a lock needs (a
# SET NX PX acquire); its reply is a status line. Unlike dlock's count
# (bench/callgrind-pair.sh), this one moves with the machine's load:
# redis-benchmark's event loop wakes more often per request when replies
# are slow (6 820 and 8 231 per pair in two runs on one day).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
command -v valgrind >/dev/null || { echo "callgrind-floor: valgrind is not installed" >&2; exit 2; }
command -v redis-benchmark >/dev/null || { echo "callgrind-floor: redis-benchmark is not installed (redis-tools)" >&2; exit 2; }
n1=${N1:-2000} n2=${N2:-12000}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/callgrind-floor-XXXXXX")
trap 'rm -rf -- "$tmp"' EXIT
total() { # callgrind out file -> total Ir
  sed -n 's/^totals: *\([0-9]*\).*/\1/p;s/^summary: *\([0-9]*\).*/\1/p' "$1" | head -n1
}
timeout 600 "$here/../tests/harness/with-redis.sh" -- bash -c '
  for n in '"$n1 $n2"'; do
    valgrind --tool=callgrind --callgrind-out-file='"$tmp"'/rb.$n \
      redis-benchmark -h 127.0.0.1 -p "$REDIS_PORT" -c 1 -n "$n" -t set -q \
      >/dev/null 2>&1
  done'
a=$(total "$tmp/rb.$n1") b=$(total "$tmp/rb.$n2")
[ -n "$a" ] && [ -n "$b" ] || { echo "callgrind-floor: no totals" >&2; exit 1; }
python3 -c "
a, b, n1, n2 = $a, $b, $n1, $n2
per = (b - a) / (n2 - n1)
print('instructions per request: %.0f; per pair (2 requests): %.0f' % (per, 2 * per))
"
