#!/usr/bin/env bash
# -N (limit): at most N holders at once, observed by the holders themselves
# (each counts the holders inside); the (N+1)th waits and gets in when one
# leaves; a killed holder's permit comes back after its lease; another N is
# refused (64) until --force-unlock -N deletes the semaphore; --status -N
# (plain and JSON) lists the permits; a deleted semaphore's holder is told
# it lost its permit (75); a semaphore with more permits in use than
# --status lists (120) is measured exactly, and with holders in it the
# refusal does not send the user to --force-unlock.
. "$(dirname "$0")/common.bash"
require jq "reads --json output"
W=$T/waitfor
mkdir "$T/in"

# Each holder: enter (a file per holder), count who is in, wait for go.
cat >"$T/holder" <<'SH'
#!/bin/sh
touch "$1/in/$2"
ls "$1/in" | wc -l >"$1/count.$2"
"$1/waitfor" "$1/go"
rm -f "$1/in/$2"
SH
chmod +x "$T/holder"

inside() { [ "$(ls "$T/in" | wc -l)" -eq "$1" ]; }
permits_in_use() {
  "$DLOCK" -N 2 --status --json cli-lim >"$T/s.json" 2>/dev/null
  [ "$(json_get "$T/s.json" '.permits | length')" = "$1" ]
}

pids=()
for i in 1 2 3; do
  run_bg p "$DLOCK" -N 2 cli-lim "$T/holder" "$T" "$i"
  pids+=("$p")
done
expect_true "two holders are in" wait_until 20000 inside 2
expect_true "two permits in use" wait_until 5000 permits_in_use 2
sleep 0.3
expect_true "the third waits (still two inside)" inside 2
"$DLOCK" -N 2 --status cli-lim >"$T/st.out"
expect "--status -N exits 0 while held" 0 $?
expect_grep "--status -N: kind semaphore" "kind:    semaphore" "$T/st.out"
expect_grep "--status -N: none free, two in use" "permits: 0 free, 2 in use" \
  "$T/st.out"
expect_true "--status -N --json is valid JSON" json_valid "$T/s.json"
expect "json: view limit, none available" "limit 0" \
  "$(json_get "$T/s.json" '"\(.view) \(.available)"')"
"$DLOCK" -n -N 2 cli-lim true 2>/dev/null
expect "-n -N 2 fails while both permits are taken" 1 $?
"$DLOCK" -N 3 -n cli-lim true 2>"$T/mis.err"
expect "another limit is refused" 64 $?
expect_grep "another limit: says the semaphore's size" "semaphore of 2 permits, not 3" \
  "$T/mis.err"

touch "$T/go"
n=1
for p in "${pids[@]}"; do
  wait_exit "$p" 30000
  expect "holder $n exits 0" 0 "$ST"
  n=$((n + 1))
done
max=$(cat "$T"/count.* | sort -n | tail -1)
expect "all three ran" 3 "$(ls "$T"/count.* | wc -l)"
expect "never more than two inside, and two reached" 2 "$max"
"$DLOCK" -N 2 --status cli-lim >/dev/null
expect "--status -N exits 1 when no permit is taken" 1 $?

# A killed holder's permit comes back when its fixed lease runs out.
run_bg pk "$DLOCK" -N 1 -l 1 cli-lim1 sh -c 'touch "$0"; exec sleep 60' "$T/k.in"
expect_true "holder to kill is in" wait_until 20000 test -e "$T/k.in"
# its child too (found through /proc: no procps needed)
child=$(grep -l "^PPid:[[:space:]]*$pk\$" /proc/[0-9]*/status 2>/dev/null |
  sed -n 's|^/proc/\([0-9]*\)/status$|\1|p')
kill -KILL "$pk" $child 2>/dev/null
wait "$pk" 2>/dev/null
"$DLOCK" -n -N 1 cli-lim1 true 2>/dev/null
expect "right after the kill the permit is still taken" 1 $?
t0=$(now_ms)
"$DLOCK" -w 10 -N 1 cli-lim1 true
expect "a waiter gets the dead holder's permit" 0 $?
took=$(($(now_ms) - t0))
expect_true "... once its 1 s lease ran out (${took} ms)" test "$took" -le 5000

# --force-unlock -N deletes the semaphore; its holder loses its permit.
run_bg pf "$DLOCK" -N 1 --watchdog 0.6 cli-lim1 sh -c 'touch "$0"; exec "$1" "$0.never"' \
  "$T/f" "$W"
expect_true "holder for --force-unlock is in" wait_until 20000 test -e "$T/f"
"$DLOCK" -N 1 --force-unlock cli-lim1 >"$T/fu.out"
expect "--force-unlock -N exits 0" 0 $?
expect_grep "--force-unlock -N says it deleted" "semaphore deleted" "$T/fu.out"
wait_exit "$pf" 20000
expect "the holder exits 75 (permit lost)" 75 "$ST"
"$DLOCK" -N 3 -n cli-lim1 true
expect "a new limit takes over after the delete" 0 $?

# 120 permits, all in use (as holders elsewhere, say Redisson's, leave the
# semaphore): the size is exact, the holders are counted, and the advice
# is to wait, not to delete their permits.
"$DLOCK" -N 120 -n cli-lim-big true
expect "the 120-permit semaphore is created" 0 $?
ids=()
for i in $(seq 120); do
  ids+=(99999999999999 "$(printf '%032x' "$i")")
done
$REDIS_CLI ZADD '{cli-lim-big}:timeout' "${ids[@]}" >/dev/null
$REDIS_CLI SET cli-lim-big 0 >/dev/null
"$DLOCK" -N 120 --status cli-lim-big >"$T/big.st"
expect_grep "--status -N counts all 120 in use" "permits: 0 free, 120 in use" \
  "$T/big.st"
"$DLOCK" -N 150 -n cli-lim-big true 2>"$T/big.err"
expect "another limit on a full 120-permit semaphore is refused" 64 $?
expect_grep "... with its exact size" "semaphore of 120 permits, not 150" \
  "$T/big.err"
expect_grep "... and its holders counted" "in use by 120 holders" "$T/big.err"
expect_no_grep "... without advising to delete their permits" \
  "delete it with 'dlock --force-unlock" "$T/big.err"
$REDIS_CLI DEL cli-lim-big '{cli-lim-big}:timeout' >/dev/null
"$DLOCK" -N 120 -n cli-lim-big true
"$DLOCK" -N 150 -n cli-lim-big true 2>"$T/free.err"
expect "another limit on an unheld semaphore is refused" 64 $?
expect_grep "... which nobody holds: --force-unlock is offered" \
  "delete it with 'dlock --force-unlock -N 150 cli-lim-big'" "$T/free.err"

"$DLOCK" -N 2 -s cli-lim true 2>/dev/null
expect "-N with -s is a usage error" 64 $?
"$DLOCK" -N 0 cli-lim true 2>/dev/null
expect "-N 0 is a usage error" 64 $?
finish
