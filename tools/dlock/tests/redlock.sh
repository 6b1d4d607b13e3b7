#!/usr/bin/env bash
# Several -u: a Redlock over three servers (a majority), --all (every
# server), -M (several names), --status per server, and --on-lost when a
# majority of the servers goes away. The servers come from nested
# with-redis.sh calls (keep-server.sh): RL_URL_1..3, RL_PORT_1..3,
# RL_PID_1..3.
. "$(dirname "$0")/common.bash"
require jq "reads --json output"

U=(-u "$RL_URL_1" -u "$RL_URL_2" -u "$RL_URL_3")
cli() { redis-cli -p "$1" "${@:2}"; }

# A Redlock: the fenced lock on every server, a token, excluded while held.
# (a majority at least: the acquire returns once two servers granted)
out=$("$DLOCK" "${U[@]}" rl sh -c 'echo "$DLOCK_TOKEN"; n=0; for p in '"$RL_PORT_1 $RL_PORT_2 $RL_PORT_3"'; do n=$((n + $(redis-cli -p $p exists rl))); done; [ $n -ge 2 ] && echo majority' 2>"$T/e1")
expect "redlock: token, and the key on a majority" "1 majority" "$(echo $out)"
expect "redlock: nothing left" "0" "$(cli "$RL_PORT_2" exists rl)"

run_bg p "$DLOCK" "${U[@]}" rl 2>"$T/hold.err"
expect_true "redlock: held (status)" wait_until 10000 "$DLOCK" "${U[@]}" --status rl
"$DLOCK" "${U[@]}" -n rl true 2>/dev/null
expect "redlock: -n while held exits 1" 1 "$?"
"$DLOCK" "${U[@]}" --status rl >"$T/st" 2>&1
expect_grep "status: one line per server" "node 3:" "$T/st"
expect_grep "status: majority held" "held:    yes" "$T/st"
expect_grep "status: each node names the holder's pid" "  who:   pid $p on " "$T/st"
"$DLOCK" "${U[@]}" --status --json rl >"$T/st.json"
expect_true "status: JSON" json_valid "$T/st.json"
kill -TERM "$p"
wait_exit "$p" 10000
expect "redlock: hold ends on SIGTERM" 0 "$ST"
"$DLOCK" "${U[@]}" --status rl >/dev/null 2>&1
expect "status: free exits 1" 1 "$?"

# usage: an even number of servers without --all; -s with several
"$DLOCK" -u "$RL_URL_1" -u "$RL_URL_2" rl true 2>"$T/even"
expect "even -u: 64" 64 "$?"
expect_grep "even -u: says odd" "odd" "$T/even"
"$DLOCK" "${U[@]}" -s rl true 2>/dev/null
expect "-s with several -u: 64" 64 "$?"

# --all: every server, the write side too (one-server clients)
out=$("$DLOCK" -u "$RL_URL_1" -u "$RL_URL_2" --all ra sh -c "redis-cli -p $RL_PORT_1 exists ra ra:dlock-rw; redis-cli -p $RL_PORT_2 exists ra ra:dlock-rw; echo \${DLOCK_TOKEN-none}")
expect "--all: both servers hold both keys, no token" "2 2 none" "$(echo $out)"

# -M: several names, all or nothing
out=$("$DLOCK" -u "$RL_URL_1" -M ma mb -- sh -c "redis-cli -p $RL_PORT_1 exists ma mb")
expect "-M: both names held" 2 "$out"
run_bg p "$DLOCK" -u "$RL_URL_1" mb 2>/dev/null
expect_true "-M: mb held by another" wait_until 10000 "$DLOCK" -u "$RL_URL_1" --status mb
"$DLOCK" -u "$RL_URL_1" -n -M ma mb -- true 2>"$T/m.err"
expect "-M: one name held: -n exits 1" 1 "$?"
expect "-M: ma not left held" 0 "$(cli "$RL_PORT_1" exists ma)"
kill -TERM "$p"
wait_exit "$p" 10000

# -M over a Redlock: each name on a majority of the three
out=$("$DLOCK" "${U[@]}" -M na nb -- sh -c "n=0; for p in $RL_PORT_1 $RL_PORT_2 $RL_PORT_3; do n=\$((n + \$(redis-cli -p \$p exists na nb))); done; echo \$n")
expect_true "-M over a Redlock: both names on a majority ($out of 6)" test "$out" -ge 4

# A majority of the servers goes away while the command runs: --on-lost
# terminates it and dlock exits 75.
f=$T/lost
run_bg p "$DLOCK" "${U[@]}" --watchdog 0.9 rl sh -c \
  'echo $$ >"$0.ready"; trap "echo TERM >\"$0.got\"; exit 3" TERM; i=0; while [ $i -lt 1500 ]; do sleep 0.02; i=$((i+1)); done' "$f" 2>"$f.err"
expect_true "lost: command started" wait_until 10000 test -s "$f.ready"
kill -KILL "$RL_PID_1" "$RL_PID_3"
wait_exit "$p" 15000
expect "lost: dlock exits 75" 75 "$ST"
expect "lost: the command got SIGTERM" TERM "$(cat "$f.got" 2>/dev/null)"
expect_grep "lost: loss reported" "lost lock 'rl'" "$f.err"

finish
