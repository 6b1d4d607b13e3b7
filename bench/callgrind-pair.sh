#!/usr/bin/env bash
# callgrind-pair.sh [DLOCK_BENCH [OPTION...]] - client instructions per uncontended
# acquire+release pair, counted by callgrind (exact and repeatable, unlike
# any timing on a shared machine).
#
# Design note. Runs `dlock-bench uncontended --seconds 2` under
# `valgrind --tool=callgrind` against a private redis-server
# (tests/harness/with-redis.sh, free 127.0.0.1 port, stopped by PID), then
# reads the callgrind output: the inclusive instructions of
# dlock_lock_acquire and dlock_lock_release (everything the calling thread
# spends in them, libc and hiredis included) divided by the number of calls.
# The event loop's work is not counted (an uncontended pair gives it none).
# Needs valgrind (apt-get install valgrind) and a dlock-bench built with
# symbols visible to callgrind (any CMake build of this tree).
# OPTIONs go to dlock-bench (e.g. --holder-info TEXT: the cost of recording
# an identity beside each hold). Prints one line: "instructions per pair: N
# (acquire A, release R, P pairs)".
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bench=${1:-$here/../build/bench/dlock-bench}
command -v valgrind >/dev/null || { echo "callgrind-pair: valgrind is not installed" >&2; exit 2; }
[ -x "$bench" ] || { echo "callgrind-pair: no dlock-bench at $bench" >&2; exit 2; }
out=$(mktemp "${TMPDIR:-/tmp}/callgrind-pair-XXXXXX")
trap 'rm -f -- "$out"' EXIT
timeout 600 "$here/../tests/harness/with-redis.sh" -- \
  valgrind --tool=callgrind --callgrind-out-file="$out" \
  "$bench" uncontended --seconds 2 "${@:2}" >/dev/null 2>&1
python3 - "$out" <<'PY'
import re, sys
names, calls, incl = {}, {}, {}
cur = None
want = ("dlock_lock_acquire", "dlock_lock_release")
with open(sys.argv[1]) as f:
    lines = f.read().splitlines()
# calls= lines are followed by one cost line: "<position> <inclusive Ir>"
i = 0
while i < len(lines):
    line = lines[i]
    m = re.match(r"(c?fn)=\((\d+)\)(?: (.*))?$", line)
    if m:
        kind, ident, name = m.groups()
        if name:
            names[ident] = name.strip()
        if kind == "cfn":
            cur = names.get(ident)
        i += 1
        continue
    m = re.match(r"calls=(\d+)", line)
    if m and cur in want and i + 1 < len(lines):
        calls[cur] = calls.get(cur, 0) + int(m.group(1))
        cost = lines[i + 1].split()
        incl[cur] = incl.get(cur, 0) + int(cost[1])
        i += 2
        continue
    i += 1
a, r = want
if not calls.get(a) or calls.get(a) != calls.get(r):
    sys.exit("callgrind-pair: could not find matching acquire/release calls")
n = calls[a]
pa, pr = incl[a] / n, incl[r] / n
print(f"instructions per pair: {pa + pr:.0f} (acquire {pa:.0f}, release {pr:.0f}, {n} pairs)")
PY
