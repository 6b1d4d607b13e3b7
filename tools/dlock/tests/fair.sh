#!/usr/bin/env bash
# -F (fair): three waiters queued in a known order (each one is seen in the
# queue through --status -F before the next starts) get the lock in exactly
# that order; --status -F shows the queue with each waiter's deadline; a
# fair lock and a plain exclusive one on the same NAME exclude each other;
# --force-unlock -F breaks a fair hold.
. "$(dirname "$0")/common.bash"
require jq "reads --json output"
W=$T/waitfor

queued() { # N: the fair queue of cli-fair has N waiters
  "$DLOCK" -F --status --json cli-fair >"$T/q.json" 2>/dev/null
  [ "$(json_get "$T/q.json" '.waiters | length')" = "$1" ]
}

run_bg ph "$DLOCK" -F cli-fair sh -c 'touch "$0.in"; "$1" "$0.go"' "$T/h" "$W"
expect_true "fair holder is in" wait_until 20000 test -e "$T/h.in"
"$DLOCK" -n cli-fair true 2>/dev/null
expect "a plain exclusive -n fails while a fair holder holds" 1 $?

pids=()
for i in 1 2 3; do
  run_bg p "$DLOCK" -F cli-fair sh -c 'echo "$1" >>"$0"' "$T/order" "$i"
  pids+=("$p")
  expect_true "waiter $i is queued" wait_until 20000 queued "$i"
done

"$DLOCK" -F --status cli-fair >"$T/st.out"
expect "--status -F exits 0 (held)" 0 $?
expect_grep "--status -F: kind fair" "kind:    fair" "$T/st.out"
expect "--status -F: three waiters with deadlines, in order" "1 2 3" \
  "$(sed -n 's/^waiter:  .* (queued \([0-9]*\), keeps its place for [0-9]* ms)$/\1/p' \
    "$T/st.out" | tr '\n' ' ' | sed 's/ $//')"
"$DLOCK" -F --status --json cli-fair >"$T/st.json"
expect_true "--status -F --json is valid JSON" json_valid "$T/st.json"
expect "json: kind fair" fair "$(json_get "$T/st.json" .kind)"
expect "json: three deadlines, all positive" true \
  "$(json_get "$T/st.json" '(.waiter_deadlines_ms | length) == 3 and all(.waiter_deadlines_ms[]; . > 0)')"
w1=$(json_get "$T/st.json" '.waiters[0]')
expect_true "json: waiter is an owner id ($w1)" \
  eval '[[ $w1 =~ ^[0-9a-f-]{36}:[0-9]+$ ]]'

touch "$T/h.go"
wait_exit "$ph" 20000
expect "fair holder exits 0" 0 "$ST"
n=1
for p in "${pids[@]}"; do
  wait_exit "$p" 30000
  expect "fair waiter $n exits 0" 0 "$ST"
  n=$((n + 1))
done
expect "fair waiters got the lock in arrival order" "1 2 3" \
  "$(tr '\n' ' ' <"$T/order" | sed 's/ $//')"
expect_true "free after the fair run" is_free cli-fair

# --force-unlock -F.
run_bg pf "$DLOCK" -F --watchdog 0.6 cli-fair sh -c 'touch "$0"; exec "$1" "$0.never"' \
  "$T/f" "$W"
expect_true "fair holder for --force-unlock is in" wait_until 20000 test -e "$T/f"
"$DLOCK" -F --force-unlock cli-fair >"$T/fu.out"
expect "--force-unlock -F exits 0" 0 $?
wait_exit "$pf" 20000
expect "fair holder exits 75 after --force-unlock -F" 75 "$ST"
expect_true "free after --force-unlock -F" is_free cli-fair

finish
