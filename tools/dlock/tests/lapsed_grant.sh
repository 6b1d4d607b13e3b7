#!/usr/bin/env bash
# A grant that lapsed before the command could start: a waiter stopped
# (SIGSTOP) while queued is handed the lock by the holder's release, its
# 1 s lease runs out while it is stopped, and on SIGCONT it must not run its
# command (exit 75, one line), whether or not a third dlock took the lock
# meanwhile. Every command appends start/stop markers to one log, which
# shows that no two ever overlapped. The lapse needs a lease or session
# shorter than the stop: --session 1 (Redis's renewed lease, ZooKeeper's
# session), 2 on etcd (whole seconds, at least the cluster's minimum TTL).
# ZooKeeper and etcd: the stopped waiter's session ends on the server while
# it is stopped, and on SIGCONT the library may find that out first and
# wait on a new session: it may then run its command, once the lock is
# free (after the third dlock), never beside another; else it exits 75.
#
#   lapsed_grant.sh DLOCK [redis|zookeeper|etcd]
. "$(dirname "$0")/common.bash"

backend=${1:-redis}
use_backend "$backend"
secs=1
[ "$backend" = etcd ] && secs=2
name=cli-lapsed-$$
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
  run_bg w "$DLOCK" --session $secs -w 30 "$name" "$T/mark" W 2>"$T/w.err"
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
  # (the third dlock keeps the lock until the waiter has exited: on Redis
  # the waiter must not wait for it, -w 30 notwithstanding; on ZooKeeper
  # and etcd it may wait again, on a new session, so the third is let go
  # after 3 s and the order in the log decides)
  if [ "$backend" != redis ] && [ $third = yes ]; then
    wait_until 3000 exited "$w" || true
  fi
  [ $third = yes ] && touch "$T/x.go"
  wait_exit "$w" 10000
  wst=$ST
  echo "measured: $backend: third=$third: SIGCONT -> waiter exit $(($(now_ms) - t0)) ms (status $wst)"
  if [ $third = yes ]; then
    wait_exit "$x" 10000
    expect "third=$third: the third dlock exits 0" 0 "$ST"
  fi
  seq=$(paste -sd '|' "$log")
  if [ "$backend" = redis ] || [ "$wst" != 0 ]; then
    expect "third=$third: the stopped waiter exits 75" 75 "$wst"
    expect_true "third=$third: one line on stderr" one_line "$T/w.err"
    expect_grep "third=$third: it says the grant lapsed" "lapsed" "$T/w.err"
    if [ $third = yes ]; then
      expect "third=$third: no overlap, the waiter never ran" \
        "start H|stop H|start X|stop X" "$seq"
    else
      expect "third=$third: the waiter never ran" "start H|stop H" "$seq"
    fi
  else
    # it waited again on a new session and ran once the lock was free
    echo "note: $backend: third=$third: the waiter waited again and ran"
    if [ $third = yes ]; then
      expect "third=$third: no overlap, the waiter ran after the third" \
        "start H|stop H|start X|stop X|start W|stop W" "$seq"
    else
      expect "third=$third: no overlap, the waiter ran after the holder" \
        "start H|stop H|start W|stop W" "$seq"
    fi
  fi
  expect_true "third=$third: free at the end" is_free "$name"
done

# dlock stopped while its command runs (the command, in its own process
# group, runs on): on SIGCONT the lapsed lease is a loss at once (the
# command is terminated, 75), said as a stop, not as an outage.
rm -f "$T/c.ready"
run_bg w "$DLOCK" --session $secs "$name-run" sh -c \
  'echo $$ >"$0"; i=0; while [ $i -lt 1500 ]; do sleep 0.02; i=$((i+1)); done' \
  "$T/c.ready" 2>"$T/c.err"
expect_true "running: the command started" wait_until 10000 test -s "$T/c.ready"
kill -STOP "$w"
expect_true "running: the lease runs out while dlock is stopped" \
  wait_until 20000 is_free "$name-run"
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
