#!/usr/bin/env bash
# smoke.sh DLOCK_BENCH - the bench-smoke test (run under with-redis.sh, which
# exports DLOCK_URL for a private redis-server).
#
# Runs dlock-bench for one second twice: 3 forked processes on one lock with a
# 100 us hold (contended scenario), and one worker-mode process with 2
# threads; then half a second each of the fair lock contended, of the
# readers scenario and of the semaphore scenario, and 5 rounds of the latch
# scenario. Then checks, independently of dlock-bench's own analysis, that each
# records file has records and that no hold began before the previous hold of
# the same lock had ended.
set -u
bench=${1:?usage: smoke.sh DLOCK_BENCH}
: "${DLOCK_URL:?run under with-redis.sh}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-bench-smoke-XXXXXX") || exit 1
trap 'rm -rf -- "$tmp"' EXIT

fail() {
  echo "bench-smoke: FAIL: $*" >&2
  exit 1
}

# check FILE: at least one record, well-formed, no overlapping holds
check() {
  local f=$1 out
  [ -s "$f" ] || fail "$f: no records file"
  # nanosecond instants exceed a double's exact range on long uptimes:
  # compare them as digit strings (shorter is smaller, else lexical)
  out=$(tail -n +2 "$f" | sort -t, -k2,2n | awk -F, '
    function lt(a, b) {
      return length(a) < length(b) || (length(a) == length(b) && (a "") < (b ""))
    }
    NF != 3 || $2 !~ /^[0-9]+$/ || $3 !~ /^[0-9]+$/ || lt($3, $2) { bad++; next }
    { n++; if (n > 1 && lt($2, last)) over++; if (n == 1 || lt(last, $3)) last = $3 }
    END { printf "%d %d %d\n", n, over + 0, bad + 0 }')
  set -- $out
  echo "bench-smoke: $(basename "$f"): $1 records, $2 overlaps, $3 malformed"
  [ "$1" -gt 0 ] || fail "$f: no records"
  [ "$2" -eq 0 ] || fail "$f: $2 overlapping holds"
  [ "$3" -eq 0 ] || fail "$f: $3 malformed lines"
}

"$bench" contended --url "$DLOCK_URL" --name smoke --workers 3 \
  --hold-us 100 --seconds 1 --records "$tmp/contended" ||
  fail "dlock-bench contended exited with $?"
check "$tmp/contended.H100"

# the lock kinds, briefly: the fair lock contended, and readers (their own
# holds overlap by design: dlock-bench checks them per reader; the file
# checked here is the reentrant half of the run)
"$bench" contended --url "$DLOCK_URL" --name smoke --kind fair --workers 2 \
  --hold-us 100 --seconds 0.5 --records "$tmp/fair" ||
  fail "dlock-bench contended --kind fair exited with $?"
check "$tmp/fair.H100.fair"
"$bench" readers --url "$DLOCK_URL" --name smoke --readers 2 --seconds 0.5 \
  --records "$tmp/readers" || fail "dlock-bench readers exited with $?"
[ -s "$tmp/readers.H0.read" ] || fail "readers: no records of the read side"
check "$tmp/readers.H0.reentrant"

# the semaphores (holds overlap up to P by design: dlock-bench itself
# fails the run if more than P held at once; here: records exist) and the
# latch (a few rounds; dlock-bench fails if a waiter did not wake)
"$bench" semaphore --url "$DLOCK_URL" --name smoke --permits 2 --workers 3 \
  --hold-us 100 --seconds 0.5 --records "$tmp/sem" ||
  fail "dlock-bench semaphore exited with $?"
[ -s "$tmp/sem.H100.plain" ] || fail "semaphore: no records of the plain one"
[ -s "$tmp/sem.H100.permit" ] || fail "semaphore: no records of the permit one"
"$bench" latch --url "$DLOCK_URL" --name smoke --waiters 2 --rounds 5 ||
  fail "dlock-bench latch exited with $?"

"$bench" --url "$DLOCK_URL" --name smoke-worker --hold-us 100 --seconds 1 \
  --threads 2 --worker 0 --records "$tmp/worker.csv" ||
  fail "dlock-bench worker mode exited with $?"
check "$tmp/worker.csv"
echo "bench-smoke: ok"
