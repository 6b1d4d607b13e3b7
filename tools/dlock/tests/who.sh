#!/usr/bin/env bash
# Who holds it, on every backend: a holder started by dlock records its
# identity beside the lock (host, pid, user, command line, start time);
# another dlock's --status and --status --json show it, and a queued
# waiter's too (--no-cmdline leaves the command line out); a waiting
# `dlock -v -w` says on stderr who holds it and how many wait ahead, once
# while nothing changes (stderr is not a terminal here). A holder of
# another client that records nothing (redis-cli, zkCli.sh, etcdctl lock,
# as Redisson, Curator or etcdctl would leave it) is shown by its owner id.
#
#   who.sh DLOCK [redis|zookeeper|etcd]
# under with-redis.sh, th_with_zk or th_with_etcd.
# shellcheck source=common.bash
. "$(dirname "$0")/common.bash"

require jq "reads --json output"
backend=${1:-redis}
case $backend in
etcd) require etcdctl "a holder that records no identity (etcdctl lock)" ;;
zookeeper)
  zkcli=/usr/share/zookeeper/bin/zkCli.sh
  [ -x "$zkcli" ] || {
    echo "FAIL: this test needs $zkcli (Debian package zookeeper):" \
      "./scripts/deps.sh installs it" >&2
    exit 1
  }
  ;;
esac
use_backend "$backend"
name=cli-who-$$
[ "$backend" = zookeeper ] && name=/cli-who-$$
host=$(hostname)
marker=who-marker-$$

# The holder: its command line carries the marker.
run_bg hp "$DLOCK" "$name" sh -c '"$1" "$2"; : "$3"' sh "$T/waitfor" \
  "$T/release" "$marker" 2>"$T/holder.err"
expect_true "$backend: the holder holds" wait_until 20000 \
  sh -c '"$1" --status --json "$2" | grep -q "\"pid\":$3"' sh "$DLOCK" \
  "$name" "$hp"

"$DLOCK" --status "$name" >"$T/held.out"
expect "$backend: --status of a held lock exits 0" 0 $?
# what keeps the hold: Redis's key lease, the holder's ZooKeeper session
# or etcd lease
case $backend in
redis | etcd) keeps="[0-9]* ms left" ;;
zookeeper) keeps="the holder's ZooKeeper session" ;;
esac
expect_true "$backend: --status says what keeps the hold ($keeps)" \
  grep -Eq "^lease: +$keeps" "$T/held.out"
expect_grep "$backend: --status names the holder's pid and host" \
  "  who:   pid $hp on $host (user " "$T/held.out"
expect_grep "$backend: --status shows the holder's command line" \
  "$marker'" "$T/held.out"
"$DLOCK" --status --json "$name" >"$T/held.json"
expect_true "$backend: --json is valid" json_valid "$T/held.json"
expect "$backend: json holder pid" "$hp" \
  "$(json_get "$T/held.json" '.holders[0].who.pid')"
expect "$backend: json holder host" "$host" \
  "$(json_get "$T/held.json" '.holders[0].who.host')"
expect_true "$backend: json holder cmd has the marker" \
  sh -c '"$1" --status --json "$2" | jq -re ".holders[0].who.cmd" |
    grep -q "$3\$"' sh "$DLOCK" "$name" "$marker"
since=$(json_get "$T/held.json" '.holders[0].who.since_ms')
expect_true "$backend: json since_ms is a wall-clock time ($since)" \
  test "$since" -gt 1600000000000

# A first waiter, without its command line; then a -v waiter behind it.
run_bg w1 "$DLOCK" --no-cmdline -w 30 "$name" true 2>"$T/w1.err"
expect_true "$backend: the first waiter is queued" wait_until 20000 \
  sh -c '"$1" --status --json "$2" | jq -e ".queue[0].who.pid == $3" \
    >/dev/null' sh "$DLOCK" "$name" "$w1"
"$DLOCK" --status --json "$name" >"$T/q.json"
expect "$backend: --no-cmdline: the waiter's cmd is null" null \
  "$(json_get "$T/q.json" '.queue[0].who.cmd')"
expect "$backend: the queue lists the waiter's owner as waiters does" \
  "$(json_get "$T/q.json" '.waiters[0]')" \
  "$(json_get "$T/q.json" '.queue[0].owner')"
"$DLOCK" --status "$name" >"$T/q.out"
expect_grep "$backend: --status names the waiter" "  who:   pid $w1 on $host" \
  "$T/q.out"

"$DLOCK" -v -w 3.5 "$name" true 2>"$T/w2.err"
expect "$backend: the -v waiter gives up with -w (1)" 1 $?
expect_grep "$backend: -v says who holds it and how many wait ahead" \
  "is held by pid $hp on $host (user" "$T/w2.err"
expect_grep "$backend: -v counts the waiter ahead" "; 1 waiting ahead" \
  "$T/w2.err"
expect "$backend: -v says it once while nothing changes (not a terminal)" 1 \
  "$(grep -c 'is held by pid' "$T/w2.err")"

# A waiter that dies without leaving the queue (SIGKILL) is not listed
# once its connection is gone (Redis: its client has no grant channel
# subscriber; its entry would otherwise stay for its -w plus 2 s). On
# ZooKeeper and etcd its node or key goes with its session or lease.
if [ "$backend" = redis ]; then
  run_bg wk "$DLOCK" -w 30 "$name" true 2>/dev/null
  expect_true "$backend: a second waiter is queued" wait_until 20000 \
    sh -c '"$1" --status --json "$2" | jq -e ".queue[1].who.pid == $3" \
      >/dev/null' sh "$DLOCK" "$name" "$wk"
  kill -KILL "$wk"
  wait_exit "$wk" 10000
  expect_true "$backend: the killed waiter is no longer listed" \
    wait_until 5000 sh -c '"$1" --status --json "$2" |
      jq -e "(.queue | length) == 1 and (.waiters | length) == 1" \
      >/dev/null' sh "$DLOCK" "$name"
fi

touch "$T/release"
wait_exit "$hp" 20000
expect "$backend: the holder exits 0" 0 "$ST"
wait_exit "$w1" 20000
expect "$backend: the first waiter gets it and exits 0" 0 "$ST"

# A holder of another client that records no identity.
foreign=$name-foreign
case $backend in
redis)
  $REDIS_CLI HSET "$foreign" 0f0f0f0f-0000-4000-8000-000000000000:7 1 \
    >/dev/null
  $REDIS_CLI PEXPIRE "$foreign" 20000 >/dev/null
  fowner=0f0f0f0f-0000-4000-8000-000000000000:7
  ;;
zookeeper)
  # a protected node as Curator makes it, holding the client's address
  "$DLOCK" -n "$foreign" true # makes the lock's parent node
  "$zkcli" -server "${DLOCK_URL#zookeeper://}" \
    create -s "$foreign/_c_0f0f0f0f-0000-4000-8000-000000000000-lock-" \
    10.1.2.3 >"$T/zk.out" 2>&1
  fowner="session 0x0"
  ;;
etcd)
  ep=${DLOCK_URL#etcd://}
  printf '#!/bin/sh\ntouch "%s"\nexec "%s" "%s.end"\n' "$T/etcdctl" \
    "$T/waitfor" "$T/etcdctl" >"$T/etcdctl.sh"
  chmod +x "$T/etcdctl.sh"
  ETCDCTL_API=3 etcdctl --endpoints="$ep" lock "$foreign" "$T/etcdctl.sh" \
    >"$T/etcdctl.out" 2>&1 &
  bg_pids+=($!)
  ep_pid=$!
  expect_true "etcd: etcdctl lock holds it" wait_until 20000 \
    test -e "$T/etcdctl"
  [ -e "$T/etcdctl" ] || cat "$T/etcdctl.out" >&2
  fowner="(no owner recorded)"
  ;;
esac
"$DLOCK" --status "$foreign" >"$T/f.out" 2>"$T/f.err"
expect "$backend: foreign holder: --status exits 0" 0 $?
expect_grep "$backend: foreign holder: shown by its owner id" \
  "holder:  $fowner" "$T/f.out"
expect_no_grep "$backend: foreign holder: no identity line" "who:" "$T/f.out"
"$DLOCK" --status --json "$foreign" >"$T/f.json"
expect "$backend: foreign holder: json who is null" null \
  "$(json_get "$T/f.json" '.holders[0].who')"
expect "$backend: foreign holder: json info is null" null \
  "$(json_get "$T/f.json" '.holders[0].info')"
"$DLOCK" -v -w 1.5 "$foreign" true 2>"$T/fw.err"
expect "$backend: foreign holder: -v waiter gives up (1)" 1 $?
expect_grep "$backend: foreign holder: -v names the owner id" \
  "is held by $fowner" "$T/fw.err"
expect_grep "$backend: foreign holder: -v says none was recorded" \
  "(no identity recorded)" "$T/fw.err"
case $backend in
etcd)
  touch "$T/etcdctl.end"
  wait_exit "$ep_pid" 20000
  ;;
*) "$DLOCK" --force-unlock "$foreign" >/dev/null ;;
esac

# A library user's holder info that is not dlock's JSON: shown as it is.
if [ "$backend" = redis ]; then
  lib=$name-lib
  $REDIS_CLI HSET "$lib" 0f0f0f0f-0000-4000-8000-000000000000:9 1 >/dev/null
  $REDIS_CLI PEXPIRE "$lib" 20000 >/dev/null
  $REDIS_CLI SET "dlock_holder:{$lib}:0f0f0f0f-0000-4000-8000-000000000000:9" \
    'batch job "nightly"' PX 20000 >/dev/null
  "$DLOCK" --status "$lib" >"$T/lib.out"
  expect_grep "$backend: free-text info: shown as it is" \
    '  who:   0f0f0f0f-0000-4000-8000-000000000000:9 (batch job "nightly")' \
    "$T/lib.out"
  "$DLOCK" --status --json "$lib" >"$T/lib.json"
  expect "$backend: free-text info: json info" 'batch job "nightly"' \
    "$(json_get "$T/lib.json" '.holders[0].info')"
  expect "$backend: free-text info: json who is null" null \
    "$(json_get "$T/lib.json" '.holders[0].who')"
  "$DLOCK" --force-unlock "$lib" >/dev/null
fi

# A loss says what happened and who holds the lock now, on one line: the holder's
# lock is removed (--force-unlock) while a waiter is queued. On Redis the
# holder's renewal finds it gone while the command runs (the waiter has
# taken it by then, or not yet: either line is right); ZooKeeper and etcd
# watch no holder's own node or key, so there it is found at the release,
# when the command ends (the waiter has it then, or is queueing again).
lost=$name-lost
run_bg lp "$DLOCK" --session 1.5 "$lost" "$T/waitfor" "$T/lost.end" \
  2>"$T/lost.err"
expect_true "$backend: loss: the holder holds" wait_until 20000 \
  sh -c '"$1" --status --json "$2" | jq -e ".holders[0].who.pid == $3" \
    >/dev/null' sh "$DLOCK" "$lost" "$lp"
run_bg lw "$DLOCK" -w 30 "$lost" true 2>"$T/lostw.err"
expect_true "$backend: loss: the waiter is queued" wait_until 20000 \
  sh -c '"$1" --status --json "$2" | jq -e ".queue[0].who.pid == $3" \
    >/dev/null' sh "$DLOCK" "$lost" "$lw"
"$DLOCK" --force-unlock "$lost" >/dev/null
now="another owner holds it now: pid $lw on $host ("
if [ "$backend" = redis ]; then
  wait_exit "$lp" 30000
  expect "$backend: loss: the holder exits 75" 75 "$ST"
  said="lost lock '$lost': its key was removed or taken by another owner;"
else
  touch "$T/lost.end"
  wait_exit "$lp" 30000
  expect "$backend: loss: the holder exits 75 (lost at release)" 75 "$ST"
  said="'$lost' was no longer ours at release (the lock was lost;"
fi
expect_true "$backend: loss: one line says so" one_line "$T/lost.err"
expect_grep "$backend: loss: it says what happened" "$said" "$T/lost.err"
expect_true "$backend: loss: it says who holds it now (the waiter) or that it is free" \
  grep -q -F -e "$now" -e "; it is free now" "$T/lost.err" ||
  sed 's/^/  the holder said: /' "$T/lost.err"
wait_exit "$lw" 30000
expect "$backend: loss: the waiter gets it and exits 0" 0 "$ST"

# -s (the read side of NAME:dlock-rw): a shared holder is named too.
shr=$name-shr
run_bg sp "$DLOCK" -s "$shr" sh -c '"$1" "$2"; : "$3"' sh "$T/waitfor" \
  "$T/shr.end" "$marker" 2>"$T/shr.err"
expect_true "$backend: -s: the shared holder holds" wait_until 20000 \
  sh -c '"$1" -s --status --json "$2" | jq -e ".holders[0].who.pid == $3" \
    >/dev/null' sh "$DLOCK" "$shr" "$sp"
"$DLOCK" -s --status "$shr" >"$T/shr.out"
expect_grep "$backend: -s: --status names the shared holder" \
  "  who:   pid $sp on $host (user " "$T/shr.out"
touch "$T/shr.end"
wait_exit "$sp" 20000
expect "$backend: -s: the shared holder exits 0" 0 "$ST"

# -N permits (Redis and ZooKeeper; etcd has no permit semaphore): each
# permit's holder is named in --status and --json.
if [ "$backend" != etcd ]; then
  sem=$name-sem
  run_bg np "$DLOCK" -N 2 "$sem" sh -c '"$1" "$2"; : "$3"' sh "$T/waitfor" \
    "$T/sem.end" "$marker" 2>"$T/sem.err"
  expect_true "$backend: -N: the permit holder holds" wait_until 20000 \
    sh -c '"$1" -N 2 --status --json "$2" |
      jq -e ".permits[0].who.pid == $3" >/dev/null' sh "$DLOCK" "$sem" "$np"
  "$DLOCK" -N 2 --status "$sem" >"$T/sem.out"
  expect_grep "$backend: -N: --status names the permit's holder" \
    "  who:   pid $np on $host (user " "$T/sem.out"
  expect_grep "$backend: -N: with its command line" "$marker'" "$T/sem.out"
  touch "$T/sem.end"
  wait_exit "$np" 20000
  expect "$backend: -N: the permit holder exits 0" 0 "$ST"
  "$DLOCK" -N 2 --status --json "$sem" >"$T/sem.json"
  expect "$backend: -N: released, no permit listed" 0 \
    "$(json_get "$T/sem.json" '.permits | length')"
fi

finish
