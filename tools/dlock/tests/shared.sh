#!/usr/bin/env bash
# -s (shared): two shared holders overlap; shared holders and an exclusive
# holder exclude each other both ways; --status (plain, -s, --json) lists the
# read holders; once an exclusive holder waits, new shared holders wait
# behind it; --force-unlock -s breaks a shared hold. The read-write lock
# lives under NAME:dlock-rw, never on the key NAME (that one is the fenced
# lock of exclusive holders).
. "$(dirname "$0")/common.bash"
require jq "reads --json output"
W=$T/waitfor

# Two shared holders: each leaves a marker, then waits (bounded) for the
# other's marker, so both exit 0 only if they held the lock at once; then
# they wait for "go" so that the test can look at them.
for i in 1 2; do
  o=$((3 - i))
  run_bg "p$i" "$DLOCK" -s cli-sh sh -c \
    'touch "$0.$1" && "$2" "$0.$3" && "$2" "$0.go"' "$T/m" "$i" "$W" "$o"
done
expect_true "both shared holders are in" wait_until 20000 \
  test -e "$T/m.1" -a -e "$T/m.2"
expect "no hash on the key NAME while shared" 0 "$($REDIS_CLI EXISTS cli-sh)"
"$DLOCK" -n cli-sh true 2>/dev/null
expect "an exclusive -n fails while shared holders hold" 1 $?
"$DLOCK" -w 0.2 -E 7 cli-sh true 2>/dev/null
expect "an exclusive -w 0.2 gives up with -E while shared" 7 $?
"$DLOCK" -s -n cli-sh true
expect "a third shared -n gets in" 0 $?

"$DLOCK" --status cli-sh >"$T/st.out"
expect "plain --status: held by readers exits 0" 0 $?
expect_grep "plain --status: kind read" "kind:    read" "$T/st.out"
expect "plain --status: two read holders" 2 \
  "$(grep -c '^holder:  .*(count 1, read)$' "$T/st.out")"
"$DLOCK" -s --status cli-sh >"$T/st2.out"
expect "--status -s exits 0" 0 $?
expect "--status -s: two read holders" 2 \
  "$(grep -c '^holder:  .*(count 1, read)$' "$T/st2.out")"
"$DLOCK" -s --status --json cli-sh >"$T/st.json"
expect "--status -s --json exits 0" 0 $?
expect_true "--status -s --json is valid JSON" json_valid "$T/st.json"
expect "json: kind" read "$(json_get "$T/st.json" .kind)"
expect "json: view" shared "$(json_get "$T/st.json" .view)"
expect "json: key" cli-sh:dlock-rw "$(json_get "$T/st.json" .key)"
expect "json: two holders, both read" "2 true" \
  "$(json_get "$T/st.json" '"\(.holders | length) \(all(.holders[]; .side == "read"))"')"
expect "json: held" true "$(json_get "$T/st.json" .held)"

touch "$T/m.go"
wait_exit "$p1" 20000
expect "shared holder 1 saw holder 2 (overlap) and exits 0" 0 "$ST"
wait_exit "$p2" 20000
expect "shared holder 2 saw holder 1 (overlap) and exits 0" 0 "$ST"
expect_true "free after the shared holders" is_free cli-sh

# An exclusive holder excludes shared ones; a shared waiter gets in after.
run_bg px "$DLOCK" cli-sh sh -c \
  'touch "$0.x"; "$1" "$0.xgo"; echo exclusive-done >>"$0.log"' "$T/e" "$W"
expect_true "exclusive holder is in" wait_until 20000 test -e "$T/e.x"
"$DLOCK" -s -n cli-sh true 2>/dev/null
expect "a shared -n fails while an exclusive holder holds" 1 $?
run_bg ps "$DLOCK" -s cli-sh sh -c 'echo shared-in >>"$0.log"' "$T/e"
"$DLOCK" -s --status --json cli-sh >"$T/w.json"
expect "--status -s shows the write side" write "$(json_get "$T/w.json" .kind)"
expect "--status -s: the holder's side" write \
  "$(json_get "$T/w.json" '.holders[0].side')"
# the shared waiter is blocked: nothing in its log while the holder holds
expect_true "exclusive still holds" is_held cli-sh
expect_true "the shared waiter has not run" test ! -e "$T/e.log"
touch "$T/e.xgo"
wait_exit "$px" 20000
expect "exclusive holder exits 0" 0 "$ST"
wait_exit "$ps" 20000
expect "the shared waiter runs after it and exits 0" 0 "$ST"
expect "order: exclusive, then shared" "exclusive-done shared-in" \
  "$(tr '\n' ' ' <"$T/e.log" | sed 's/ $//')"

# Once an exclusive holder waits, a new shared holder does not join the
# shared one that holds (else a stream of them could keep it out for good):
# it waits, and runs right after the exclusive one.
zcard_is() { # KEY N
  [ "$($REDIS_CLI ZCARD "$1")" = "$2" ]
}
run_bg pq1 "$DLOCK" -s cli-shq sh -c 'touch "$0" && "$1" "$0.go"' "$T/q1" "$W"
expect_true "first shared holder is in" wait_until 20000 test -e "$T/q1"
run_bg pqx "$DLOCK" -w 20 cli-shq sh -c 'echo exclusive >>"$0"' "$T/q.log"
expect_true "the exclusive one queues for the write side" wait_until 20000 \
  zcard_is 'dlock_lock_rw_queue:{cli-shq:dlock-rw}' 1
"$DLOCK" -s -n cli-shq true 2>/dev/null
expect "a new shared -n fails while an exclusive one waits" 1 $?
run_bg pq2 "$DLOCK" -s -w 20 cli-shq sh -c 'echo shared >>"$0"' "$T/q.log"
expect_true "the new shared one waits (registered)" wait_until 20000 \
  zcard_is 'dlock_lock_rw_readers:{cli-shq:dlock-rw}' 1
touch "$T/q1.go"
for p in "$pq1" "$pqx" "$pq2"; do
  wait_exit "$p" 20000
  expect "queued holder $p exits 0" 0 "$ST"
done
expect "order: the exclusive one, then the new shared one" "exclusive shared" \
  "$(tr '\n' ' ' <"$T/q.log" | sed 's/ $//')"

# --force-unlock -s breaks a shared hold; the holder's command is ended.
run_bg pf "$DLOCK" -s --watchdog 0.6 cli-sh sh -c 'touch "$0"; exec "$1" "$0.never"' \
  "$T/f" "$W"
expect_true "shared holder for --force-unlock is in" wait_until 20000 test -e "$T/f"
"$DLOCK" -s --force-unlock cli-sh >"$T/fu.out"
expect "--force-unlock -s exits 0" 0 $?
expect_grep "--force-unlock -s says it was held" "unlocked (it was held)" "$T/fu.out"
wait_exit "$pf" 20000
expect "shared holder exits 75 after --force-unlock -s" 75 "$ST"
expect_true "free after --force-unlock -s" is_free cli-sh

finish
