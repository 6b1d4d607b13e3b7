#!/usr/bin/env bash
# --session SECS (alias --watchdog) is how long a killed holder keeps the
# lock from others, on every backend: Redis's renewed lease, ZooKeeper's
# session timeout, etcd's lease TTL. After kill -9 of a holder under
# --session 3, a second dlock gets the lock within its -w 9 (without the
# option it would wait for the backend's default: ZooKeeper's server cap,
# etcd's 10 s); -v names what applies on the backend, the default as well
# as --session's. Grant times are printed, not asserted beyond -w.
#
#   session.sh DLOCK [redis|zookeeper|etcd]
# under with-redis.sh, th_with_zk or th_with_etcd (DLOCK_URL, DLOCK_ZK_URL,
# DLOCK_ETCD_URL).
# shellcheck source=common.bash
. "$(dirname "$0")/common.bash"

backend=${1:-redis}
use_backend "$backend"
name=cli-session-$$

# what -v says applies, for a session of SECS (as a "%.3f")
applies() {
  case $backend in
  redis) echo "lease $1 s, renewed every" ;;
  zookeeper) echo "ZooKeeper session timeout $1 s (negotiated" ;;
  etcd) echo "etcd lease TTL $1 s, kept alive every" ;;
  esac
}

# kill_and_take SPELLING SECS BOUND: a holder under SPELLING SECS is killed
# with SIGKILL once its command runs; a second dlock -w BOUND then takes the
# lock (exit 0), and the time from the kill to its grant is printed.
kill_and_take() {
  local spelling=$1 secs=$2 bound=$3 f=$T/hold-$1 p t0 rc
  run_bg p "$DLOCK" -v "$spelling" "$secs" "$name" sh -c \
    'touch "$0"; exec "$1" "$0.never"' "$f" "$T/waitfor" 2>"$f.err"
  expect_true "$backend: $spelling $secs: the holder's command runs" \
    wait_until 20000 test -e "$f"
  expect_grep "$backend: $spelling $secs: -v names what applies" \
    "$(applies "$secs.000")" "$f.err"
  t0=$(now_ms)
  kill -KILL "$p"
  wait "$p" 2>/dev/null
  "$DLOCK" -v -w "$bound" "$name" true 2>"$f.err2"
  rc=$?
  expect "$backend: $spelling $secs: kill -9 of the holder; -w $bound gets it" \
    0 "$rc"
  echo "measured: $backend: $spelling $secs: kill -9 of the holder ->" \
    "next grant $(($(now_ms) - t0)) ms;" \
    "$(grep -o "acquired '[^']*' after [0-9.]* s" "$f.err2")"
}

kill_and_take --session 3 9
kill_and_take --watchdog 3 9

# Without the option: Redis's 30 s renewed lease, a 10 s session or lease on
# ZooKeeper and etcd (a ZooKeeper server with a tick below 500 ms may
# negotiate less: -v says what it granted).
"$DLOCK" -v "$name" true 2>"$T/default.err"
expect "$backend: a default hold: 0" 0 $?
case $backend in
redis) want="$(applies 30.000)" ;;
*) want="$(applies 10.000)" ;;
esac
expect_grep "$backend: -v names the default ($want...)" "$want" \
  "$T/default.err"
grep -o "acquired .*" "$T/default.err" | sed "s/^/measured: $backend: /"

# ZooKeeper: -v says what the server negotiated, not what was asked (the
# test server's minSessionTimeout is 400 ms).
if [ "$backend" = zookeeper ]; then
  "$DLOCK" -v --session 0.2 "$name" true 2>"$T/neg.err"
  expect "zookeeper: --session 0.2: 0" 0 $?
  expect_grep "zookeeper: --session 0.2: -v names the negotiated 0.4 s" \
    "session timeout 0.400 s (negotiated; asked for 0.200 s)" "$T/neg.err"
fi

# etcd: a holder whose lease is revoked (etcdctl lease revoke) is told
# that its session ended (not that its key was taken), its command is
# ended, and dlock exits 75.
if [ "$backend" = etcd ]; then
  require etcdctl "revoking the holder's lease"
  ep=${DLOCK_URL#etcd://}
  f=$T/revoked
  run_bg p "$DLOCK" --session 5 "$name" sh -c \
    'touch "$0"; exec "$1" "$0.never"' "$f" "$T/waitfor" 2>"$f.err"
  expect_true "etcd: revoked: the holder's command runs" \
    wait_until 20000 test -e "$f"
  for id in $(ETCDCTL_API=3 etcdctl --endpoints="$ep" lease list |
    sed -n 's/^\([0-9a-f]\{6,\}\)$/\1/p'); do
    ETCDCTL_API=3 etcdctl --endpoints="$ep" lease revoke "$id" >/dev/null
  done
  wait_exit "$p" 20000
  expect "etcd: revoked: exit 75" 75 "$ST"
  expect_grep "etcd: revoked: says the session ended" \
    "session with the service ended" "$f.err"
fi

# -l stays a fixed lease (Redis), has no effect on etcd, is refused on
# ZooKeeper; with --session it is a usage error everywhere.
"$DLOCK" -l 1 --session 2 "$name" true 2>"$T/l.err"
expect "$backend: -l with --session: 64" 64 $?
expect_true "$backend: -l with --session: one line" one_line "$T/l.err"

"$DLOCK" --session 0.002 "$name" true 2>"$T/s.err"
expect "$backend: --session 0.002: 64" 64 $?
expect_grep "$backend: --session 0.002: says the minimum" "0.003" "$T/s.err"

expect_true "$backend: free at the end" is_free "$name"
finish
