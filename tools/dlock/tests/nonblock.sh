#!/usr/bin/env bash
# -n, -E and -w against a held lock; a waiter woken when the holder leaves.
. "$(dirname "$0")/common.bash"

# A holder in hold mode (no command): holds until SIGTERM.
run_bg holder "$DLOCK" cli-nb 2>"$T/holder.err"
expect_true "holder holds cli-nb" wait_until 10000 is_held cli-nb

"$DLOCK" -n cli-nb touch "$T/ran1" 2>"$T/n.err"
expect "-n on a held lock exits 1" 1 $?
expect_true "-n did not run the command" test ! -e "$T/ran1"
expect "-n is quiet without -v" 0 "$(wc -c <"$T/n.err")"

"$DLOCK" -n -E 7 cli-nb true
expect "-n -E 7 exits 7" 7 $?
"$DLOCK" --nonblock --conflict-exit-code=0 cli-nb touch "$T/ran2"
expect "-E 0 exits 0" 0 $?
expect_true "-E 0 did not run the command" test ! -e "$T/ran2"
"$DLOCK" -nE3 cli-nb true
expect "clustered -nE3 exits 3" 3 $?

"$DLOCK" -v -n cli-nb true 2>"$T/nv.err"
expect "-v -n exits 1" 1 $?
expect_grep "-v says the lock is held" "held by another owner" "$T/nv.err"

t0=$(now_ms)
"$DLOCK" -w 0.5 cli-nb touch "$T/ran3"
st=$?
el=$(($(now_ms) - t0))
expect "-w 0.5 on a held lock exits 1" 1 "$st"
expect_true "-w 0.5 waited at least 0.45 s (waited ${el} ms)" test "$el" -ge 450
expect_true "-w 0.5 gave up within 5 s (waited ${el} ms)" test "$el" -lt 5000
expect_true "-w did not run the command" test ! -e "$T/ran3"
"$DLOCK" --timeout=0.3 -E 9 cli-nb true
expect "--timeout 0.3 -E 9 exits 9" 9 $?
"$DLOCK" -w 0 cli-nb true
expect "-w 0 tries once and exits 1" 1 $?

# A waiter with a long -w gets the lock as soon as the holder leaves.
run_bg waiter "$DLOCK" -v -w 20 cli-nb touch "$T/ran4" 2>"$T/waiter.err"
expect_true "waiter connected" wait_until 10000 grep -q acquiring "$T/waiter.err"
t0=$(now_ms)
kill -TERM "$holder"
wait_exit "$holder" 10000
expect "holder exits 0 on SIGTERM" 0 "$ST"
wait_exit "$waiter" 10000
expect "waiter exits 0" 0 "$ST"
el=$(($(now_ms) - t0))
expect_true "waiter ran its command" test -e "$T/ran4"
expect_true "waiter woke within 2 s of the release (${el} ms)" test "$el" -lt 2000
expect_grep "-v reports the time waited" "acquired 'cli-nb' after" "$T/waiter.err"
expect_true "lock free at the end" is_free cli-nb

"$DLOCK" -n cli-nb touch "$T/ran5"
expect "-n on a free lock runs the command" 0 $?
expect_true "command ran" test -e "$T/ran5"

# -w bounds the wait when the server stops answering during it (frozen
# with SIGSTOP): the -E status, one line saying it gave up, the command
# never run. (Time printed, bound loose: a loaded machine.)
if [ -n "${REDIS_PID:-}" ]; then
  run_bg holder "$DLOCK" cli-nb-frozen
  expect_true "frozen: holder holds" wait_until 10000 is_held cli-nb-frozen
  run_bg waiter "$DLOCK" -w 3 -E 7 cli-nb-frozen touch "$T/ran6" 2>"$T/fz.err"
  expect_true "frozen: the waiter queued" wait_until 10000 sh -c \
    "'$DLOCK' --status cli-nb-frozen | grep -q '^waiter:'"
  kill -STOP "$REDIS_PID"
  t0=$(now_ms)
  wait_exit "$waiter" 20000
  el=$(($(now_ms) - t0))
  kill -CONT "$REDIS_PID"
  echo "measured: -w 3, server frozen during the wait: exit $ST after $el ms"
  expect "frozen: -E status" 7 "$ST"
  expect_true "frozen: returned before 10 s ($el ms)" test "$el" -lt 10000
  expect_true "frozen: one line" one_line "$T/fz.err"
  expect_true "frozen: the command never ran" test ! -e "$T/ran6"
  kill -TERM "$holder"
  wait_exit "$holder" 10000
  expect "frozen: holder exits 0" 0 "$ST"
fi

finish
