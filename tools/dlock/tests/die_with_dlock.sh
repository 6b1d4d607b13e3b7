#!/usr/bin/env bash
# The command dies with dlock: kill -9 of dlock ends the command and its
# grandchild (parent-death signal, own process group, the guard process),
# and a second dlock's command, started once the lock has come back (its
# lease or session ran out), never overlaps the first one's.
#
#   die_with_dlock.sh DLOCK [redis|zookeeper|etcd]
# under with-redis.sh, th_with_zk or th_with_etcd (DLOCK_URL, DLOCK_ZK_URL,
# DLOCK_ETCD_URL).
. "$(dirname "$0")/common.bash"

backend=${1:-redis}
use_backend "$backend"
name=cli-die-$$

# $T/alive PID: the process exists and is not a zombie.
cat >"$T/alive" <<'SH'
st=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null)
[ -n "$st" ] && [ "$st" != Z ]
SH
chmod +x "$T/alive"
gone() { ! "$T/alive" "$1"; }

# The first command: a grandchild (sleep 100 in the background), its pid and
# its own, a start marker, then a bounded loop (100 s at most).
first='echo "start A" >>"$0.log"; sleep 100 & echo $! >"$0.gc.tmp";
  mv "$0.gc.tmp" "$0.gc"; echo $$ >"$0.pid"; i=0
  while [ $i -lt 2000 ]; do sleep 0.05; i=$((i + 1)); done; echo "stop A" >>"$0.log"'
f=$T/die
run_bg p "$DLOCK" --watchdog 2 "$name" sh -c "$first" "$f" 2>"$f.err"
# the command writes $f.gc, then $f.pid: wait for the last of them
expect_true "$backend: command and grandchild started" wait_until 20000 test -s "$f.pid"
child=$(cat "$f.pid")
gc=$(cat "$f.gc")
expect_true "$backend: the command runs" "$T/alive" "$child"
expect_true "$backend: the grandchild runs" "$T/alive" "$gc"
t0=$(now_ms)
kill -KILL "$p"
expect_true "$backend: the command is gone within 5 s of kill -9 of dlock" \
  wait_until 5000 gone "$child"
t1=$(now_ms)
expect_true "$backend: the grandchild is gone within 5 s of kill -9 of dlock" \
  wait_until 5000 gone "$gc"
t2=$(now_ms)
echo "measured: $backend: dlock SIGKILLed -> command gone $((t1 - t0)) ms," \
  "grandchild gone $((t2 - t0)) ms (20 ms polls)"
wait "$p" 2>/dev/null

# The second command records whether anything of the first still ran when
# it started. The lock comes back when the first holder's lease (Redis) or
# session (ZooKeeper, etcd) ends: --watchdog 2 sets either.
second='if "$1" "$(cat "$0.pid")" || "$1" "$(cat "$0.gc")"; then
  echo "start B overlap" >>"$0.log"; else echo "start B alone" >>"$0.log"; fi'
t0=$(now_ms)
"$DLOCK" -w 100 "$name" sh -c "$second" "$f" "$T/alive" 2>"$f.err2"
expect "$backend: the second dlock ran its command" 0 $?
echo "measured: $backend: the second dlock got the lock after $(($(now_ms) - t0)) ms"
expect "$backend: the first command never overlapped the second" \
  "start A|start B alone" "$(paste -sd '|' "$f.log")"
expect_true "$backend: free at the end" is_free "$name"

finish
