#!/usr/bin/env bash
# The command's exit status (and 128+S for a signal) is dlock's; arguments,
# stdin and DLOCK_NAME reach the command; the lock is free after each run.
. "$(dirname "$0")/common.bash"

L=cli-es
"$DLOCK" $L sh -c 'exit 42'
expect "exit 42 passes through" 42 $?
"$DLOCK" $L -c 'exit 3'
expect "-c 'exit 3' passes through" 3 $?
"$DLOCK" -c 'exit 4' $L
expect "-c before NAME" 4 $?
"$DLOCK" $L true
expect "true gives 0" 0 $?
"$DLOCK" $L sh -c 'kill -KILL $$'
expect "killed by SIGKILL gives 137" 137 $?
"$DLOCK" $L sh -c 'kill -TERM $$'
expect "killed by SIGTERM gives 143" 143 $?
expect_true "lock free after the runs" is_free $L

"$DLOCK" $L /nonexistent/dlock-no-such-command 2>"$T/nf.err"
expect "missing command exits 127" 127 $?
expect_true "missing command: one line" one_line "$T/nf.err"
"$DLOCK" $L dlock-no-such-command-in-path 2>"$T/nf2.err"
expect "command not in PATH exits 127" 127 $?
"$DLOCK" $L "$T" 2>"$T/dir.err"
expect "a directory as command exits 126" 126 $?
expect_true "lock free after failed starts" is_free $L

out=$("$DLOCK" $L printf '%s|' -n -c 'a b' -- -w)
expect "arguments after NAME are the command's, verbatim" "-n|-c|a b|--|-w|" "$out"
out=$("$DLOCK" -- $L printf '%s|' x)
expect "-- before NAME" "x|" "$out"
out=$("$DLOCK" $L sh -c 'printf %s "$DLOCK_NAME"')
expect "DLOCK_NAME is set" $L "$out"
out=$(DLOCK_TOKEN=stale "$DLOCK" $L sh -c 'printf %s "${DLOCK_TOKEN-unset}"')
expect_true "an outer DLOCK_TOKEN does not leak in: the lock's own ($out)" \
  eval '[[ $out =~ ^[0-9]+$ ]]'
out=$(printf 'line1\nline2\n' | "$DLOCK" $L cat)
expect "stdin reaches the command" "line1
line2" "$out"
out=$("$DLOCK" $L sh -c 'echo err >&2' 2>&1 >/dev/null)
expect "stderr reaches the caller" err "$out"

# Reentrancy is per owner: a command that takes the same lock again through
# another dlock process is another owner, so -n must refuse it.
"$DLOCK" $L sh -c '"$0" -n "$DLOCK_NAME" true' "$DLOCK"
expect "a nested dlock is another owner (-n gives 1)" 1 $?

# -l: a fixed lease; the lock expires while the command still runs.
run_bg p "$DLOCK" -l 0.3 cli-lease sh -c 'echo ready >"$0"; i=0
  while [ ! -e "$0.go" ] && [ $i -lt 1000 ]; do sleep 0.02; i=$((i+1)); done' "$T/lease"
expect_true "fixed-lease holder started" wait_until 10000 test -s "$T/lease"
expect_true "fixed lease expires by itself while the command runs" wait_until 5000 is_free cli-lease
touch "$T/lease.go"
wait_exit "$p" 10000
expect "fixed-lease run exits 0" 0 "$ST"

finish
