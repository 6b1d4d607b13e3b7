#!/usr/bin/env bash
# A grant that lapsed before the command could start: a waiter stopped
# (SIGSTOP) while queued is handed the lock by the holder's release, its
# 1 s lease runs out while it is stopped, and on SIGCONT it must not run its
# command (exit 75, one line), whether or not a third dlock took the lock
# meanwhile. Every command appends start/stop markers to one log, which
# shows that no two ever overlapped. Redis: the lapse needs a lease shorter
# than the stop (--watchdog 1); ZooKeeper and etcd sessions of the
# command's default length would need a stop of a minute.
. "$(dirname "$0")/common.bash"

name=cli-lapsed
log=$T/log
# $T/mark WHO GO: "start WHO", then (GO given) wait for the file GO, then
# "stop WHO".
cat >"$T/mark" <<SH
echo "start \$1" >>"$log"
[ -z "\${2:-}" ] || "$T/waitfor" "\$2"
echo "stop \$1" >>"$log"
SH
chmod +x "$T/mark"

# queued: NAME's status lists a waiter.
queued() {
  "$DLOCK" --status "$name" 2>/dev/null | grep -q '^waiter:'
}

for third in yes no; do
  : >"$log"
  rm -f "$T/h.go" "$T/x.go"
  run_bg h "$DLOCK" "$name" "$T/mark" H "$T/h.go"
  expect_true "third=$third: holder runs" wait_until 10000 grep -q 'start H' "$log"
  run_bg w "$DLOCK" --watchdog 1 -w 30 "$name" "$T/mark" W 2>"$T/w.err"
  expect_true "third=$third: the waiter is queued" wait_until 10000 queued
  kill -STOP "$w"
  touch "$T/h.go"
  wait_exit "$h" 10000
  expect "third=$third: holder exits 0" 0 "$ST"
  # the lock was handed to the stopped waiter; its lease (1 s) runs out
  if [ $third = yes ]; then
    run_bg x "$DLOCK" -w 30 "$name" "$T/mark" X "$T/x.go"
    expect_true "third=$third: a third dlock takes the lock after the lapse" \
      wait_until 20000 grep -q 'start X' "$log"
  else
    expect_true "third=$third: the handed lock expires" wait_until 20000 \
      is_free "$name"
  fi
  t0=$(now_ms)
  kill -CONT "$w"
  # (the third dlock keeps the lock until the waiter has exited: the waiter
  # must not wait for it, -w 30 notwithstanding)
  wait_exit "$w" 10000
  [ $third = yes ] && touch "$T/x.go"
  echo "measured: third=$third: SIGCONT -> waiter exit $(($(now_ms) - t0)) ms"
  expect "third=$third: the stopped waiter exits 75" 75 "$ST"
  expect_true "third=$third: one line on stderr" one_line "$T/w.err"
  expect_grep "third=$third: it says the grant lapsed" "lapsed" "$T/w.err"
  if [ $third = yes ]; then
    wait_exit "$x" 10000
    expect "third=$third: the third dlock exits 0" 0 "$ST"
    expect "third=$third: no overlap, the waiter never ran" \
      "start H|stop H|start X|stop X" "$(paste -sd '|' "$log")"
  else
    expect "third=$third: the waiter never ran" "start H|stop H" \
      "$(paste -sd '|' "$log")"
  fi
  expect_true "third=$third: free at the end" is_free "$name"
done

# dlock stopped while its command runs (the command, in its own process
# group, runs on): on SIGCONT the lapsed lease is a loss at once (the
# command is terminated, 75), said as a stop, not as an outage.
rm -f "$T/c.ready"
run_bg w "$DLOCK" --watchdog 1 cli-lapsed-run sh -c \
  'echo $$ >"$0"; i=0; while [ $i -lt 1500 ]; do sleep 0.02; i=$((i+1)); done' \
  "$T/c.ready" 2>"$T/c.err"
expect_true "running: the command started" wait_until 10000 test -s "$T/c.ready"
kill -STOP "$w"
expect_true "running: the lease runs out while dlock is stopped" \
  wait_until 20000 is_free cli-lapsed-run
t0=$(now_ms)
kill -CONT "$w"
wait_exit "$w" 10000
echo "measured: running: SIGCONT -> dlock exit $(($(now_ms) - t0)) ms"
expect "running: dlock exits 75" 75 "$ST"
expect_true "running: the command is gone" wait_until 5000 sh -c \
  "! kill -0 $(cat "$T/c.ready") 2>/dev/null"
expect_grep "running: the loss is said as a stop" "stopped" "$T/c.err"
expect_true "running: one line" one_line "$T/c.err"

finish
