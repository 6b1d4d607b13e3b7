#!/usr/bin/env bash
# --status (plain and --json) while free and while held; --force-unlock.
. "$(dirname "$0")/common.bash"

require jq "reads --json output"

"$DLOCK" --status cli-st >"$T/free.out" 2>"$T/free.err"
expect "--status on a free lock exits 1" 1 $?
expect_grep "free: plain output names the lock" "lock:    cli-st" "$T/free.out"
expect_grep "free: plain output says free" "kind:    free" "$T/free.out"
"$DLOCK" --status --json cli-st >"$T/free.json"
expect "--status --json on a free lock exits 1" 1 $?
expect "free json: held" false "$(json_get "$T/free.json" .held)"
expect "free json: kind" free "$(json_get "$T/free.json" .kind)"
expect "free json: name" cli-st "$(json_get "$T/free.json" .name)"

run_bg p "$DLOCK" --watchdog 0.6 cli-st sh -c 'echo ready >"$0"; i=0
  while [ $i -lt 1500 ]; do sleep 0.02; i=$((i+1)); done' "$T/ready" 2>"$T/holder.err"
expect_true "holder running" wait_until 10000 test -s "$T/ready"
owner=$($REDIS_CLI HKEYS cli-st)
"$DLOCK" --status cli-st >"$T/held.out"
expect "--status on a held lock exits 0" 0 $?
expect_grep "held: kind" "kind:    fenced" "$T/held.out"
expect_grep "held: holder is the owner on the server" "holder:  $owner (count 1)" "$T/held.out"
expect_grep "held: lease shown" "ms left" "$T/held.out"
"$DLOCK" --json --status cli-st >"$T/held.json"
expect "--status --json on a held lock exits 0" 0 $?
expect "held json: held" true "$(json_get "$T/held.json" .held)"
expect "held json: kind" fenced "$(json_get "$T/held.json" .kind)"
expect "held json: owner" "$owner" "$(json_get "$T/held.json" '.holders[0].owner')"
expect "held json: count" 1 "$(json_get "$T/held.json" '.holders[0].count')"
lease=$(json_get "$T/held.json" .lease_ms)
expect_true "held json: 0 < lease_ms <= 600 ($lease)" test "$lease" -gt 0 -a "$lease" -le 600
expect_true "owner looks like <uuid>:<thread>" \
  eval '[[ $owner =~ ^[0-9a-f-]{36}:[0-9]+$ ]]'

# A waiter queues behind the holder and is listed, oldest first.
run_bg wpid "$DLOCK" -w 20 cli-st true
expect_true "a waiter is queued" wait_until 10000 \
  sh -c "$REDIS_CLI ZCARD dlock_lock_queue:{cli-st} | grep -qx 1"
"$DLOCK" --status cli-st >"$T/waiting.out"
expect_grep "held: the queued waiter is listed" " (queued 1)" "$T/waiting.out"
"$DLOCK" --status --json cli-st >"$T/waiting.json"
wowner=$(json_get "$T/waiting.json" '.waiters[0]')
expect_true "json: waiter is an owner id ($wowner)" \
  eval '[[ $wowner =~ ^[0-9a-f-]{36}:[0-9]+$ && $wowner != "$owner" ]]'
kill -TERM "$wpid" 2>/dev/null
wait_exit "$wpid" 10000

# --force-unlock breaks it; the holder notices and terminates its command.
"$DLOCK" --force-unlock cli-st >"$T/fu.out"
expect "--force-unlock exits 0" 0 $?
expect_grep "--force-unlock says it was held" "unlocked" "$T/fu.out"
wait_exit "$p" 10000
expect "holder exits 75 after the force-unlock" 75 "$ST"
expect_true "free after --force-unlock" is_free cli-st
"$DLOCK" --force-unlock cli-st >"$T/fu2.out"
expect "--force-unlock on a free lock exits 0" 0 $?
expect_grep "--force-unlock on a free lock says so" "was not locked" "$T/fu2.out"

# A name with a quote, a newline and a byte that is not UTF-8: still one
# valid JSON object, still one line per field in the plain output.
odd=$'odd"name\n\xff'
"$DLOCK" --status --json "$odd" >"$T/odd.json"
expect "odd name: exit 1" 1 $?
expect "odd name: json name" $'odd"name\n\xef\xbf\xbd' "$(json_get "$T/odd.json" .name)"
"$DLOCK" --status "$odd" >"$T/odd.out"
expect "odd name: plain output is two lines" 2 "$(wc -l <"$T/odd.out")"

# A key that is not a lock.
$REDIS_CLI SET cli-string x >/dev/null
"$DLOCK" --status cli-string >/dev/null 2>"$T/wt.err"
st=$?
expect_true "status of a non-lock key fails with 69 ($st)" test "$st" -eq 69
expect_true "non-lock key: one line" one_line "$T/wt.err"
"$DLOCK" -n cli-string true 2>"$T/wt2.err"
st=$?
expect_true "locking a non-lock key fails with 69 ($st)" test "$st" -eq 69

finish
