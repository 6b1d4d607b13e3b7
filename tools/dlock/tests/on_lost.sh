#!/usr/bin/env bash
# --on-lost: the key is DEL'd behind the holder's back; with a short
# --watchdog the renewal notices within a fraction of a second.
. "$(dirname "$0")/common.bash"

# Command: record readiness, then wait (bounded) for a go file.
waiter='echo $$ >"$0.ready"; i=0
  while [ ! -e "$0.go" ] && [ $i -lt 1500 ]; do sleep 0.02; i=$((i+1)); done
  exit 4'

# term (the default): SIGTERM reaches the command, dlock exits 75.
f=$T/term
run_bg p "$DLOCK" --watchdog 0.6 cli-lost sh -c \
  'trap "echo TERM >\"$0.got\"; exit 3" TERM; '"$waiter" "$f" 2>"$f.err"
expect_true "term: command started" wait_until 10000 test -s "$f.ready"
t0=$(now_ms)
$REDIS_CLI DEL cli-lost >/dev/null
wait_exit "$p" 10000
expect "term: dlock exits 75" 75 "$ST"
el=$(($(now_ms) - t0))
expect_true "term: noticed within 3 s (${el} ms)" test "$el" -lt 3000
expect "term: the command got SIGTERM" TERM "$(cat "$f.got" 2>/dev/null)"
expect_grep "term: loss reported" "lost lock 'cli-lost'" "$f.err"

# kill: SIGKILL at once, 75.
f=$T/kill
run_bg p "$DLOCK" --watchdog 0.6 --on-lost kill cli-lost sh -c \
  'trap "echo TERM >\"$0.got\"" TERM; '"$waiter" "$f" 2>"$f.err"
expect_true "kill: command started" wait_until 10000 test -s "$f.ready"
child=$(cat "$f.ready")
$REDIS_CLI DEL cli-lost >/dev/null
wait_exit "$p" 10000
expect "kill: dlock exits 75" 75 "$ST"
expect_true "kill: the command is gone" test ! -e "/proc/$child"
expect_true "kill: no SIGTERM first" test ! -e "$f.got"

# term, a command that ignores SIGTERM: SIGKILL after --kill-after.
f=$T/stubborn
run_bg p "$DLOCK" --watchdog 0.6 --kill-after 0.5 cli-lost sh -c \
  'trap "" TERM; '"$waiter" "$f" 2>"$f.err"
expect_true "kill-after: command started" wait_until 10000 test -s "$f.ready"
$REDIS_CLI DEL cli-lost >/dev/null
expect_true "kill-after: loss noticed" wait_until 5000 grep -q "lost lock" "$f.err"
t0=$(now_ms)
wait_exit "$p" 10000
expect "kill-after: dlock exits 75" 75 "$ST"
el=$(($(now_ms) - t0))
expect_true "kill-after: SIGKILL came after about 0.5 s (${el} ms)" \
  test "$el" -ge 300 -a "$el" -lt 5000
expect_grep "kill-after: SIGKILL reported" "SIGKILL" "$f.err"

# ignore: the command keeps running; the lock was lost under it, so dlock
# exits 75 whatever its status.
f=$T/ignore
run_bg p "$DLOCK" --watchdog=0.6 --on-lost=ignore cli-lost sh -c "$waiter" "$f" 2>"$f.err"
expect_true "ignore: command started" wait_until 10000 test -s "$f.ready"
$REDIS_CLI DEL cli-lost >/dev/null
expect_true "ignore: loss reported" wait_until 5000 grep -q "lost lock" "$f.err"
expect_true "ignore: command still running" test -e "/proc/$(cat "$f.ready")"
touch "$f.go"
wait_exit "$p" 10000
expect "ignore: dlock exits 75 (lost while the command ran)" 75 "$ST"
expect_true "ignore: one line on stderr" one_line "$f.err"

# A command that exits 0 after the lock was taken from it: the renewer has
# not noticed yet (30 s watchdog), the release finds it gone: 75, one line.
f=$T/zero
run_bg p "$DLOCK" cli-lost0 sh -c "${waiter%exit 4}exit 0" "$f" 2>"$f.err"
expect_true "exit 0: command started" wait_until 10000 test -s "$f.ready"
"$DLOCK" --force-unlock cli-lost0 >/dev/null 2>&1
touch "$f.go"
wait_exit "$p" 10000
expect "exit 0: dlock exits 75 (the lock was gone at release)" 75 "$ST"
expect_true "exit 0: one line on stderr" one_line "$f.err"
expect_grep "exit 0: it says the lock was lost" "no longer ours" "$f.err"

# hold mode: a lost lock ends dlock with 75.
run_bg p "$DLOCK" --watchdog 0.6 cli-lost 2>"$T/hold.err"
expect_true "hold: holds" wait_until 10000 is_held cli-lost
$REDIS_CLI DEL cli-lost >/dev/null
wait_exit "$p" 10000
expect "hold: dlock exits 75" 75 "$ST"

# The backend stops answering (server frozen with SIGSTOP): the lease cannot
# be renewed, the lock is lost as "unreachable", dlock exits 75.
if [ -n "${REDIS_PID:-}" ]; then
  f=$T/frozen
  run_bg p "$DLOCK" --watchdog 0.6 cli-frozen sh -c "$waiter" "$f" 2>"$f.err"
  expect_true "frozen: command started" wait_until 10000 test -s "$f.ready"
  t0=$(now_ms)
  kill -STOP "$REDIS_PID"
  wait_exit "$p" 20000
  el=$(($(now_ms) - t0))
  kill -CONT "$REDIS_PID"
  expect "frozen: dlock exits 75 (after ${el} ms)" 75 "$ST"
  expect_grep "frozen: reported as unreachable" "unreachable" "$f.err"
  expect_true "frozen: one line on stderr" one_line "$f.err"
fi

finish
