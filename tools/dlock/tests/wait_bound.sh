#!/usr/bin/env bash
# -w bounds everything: against a listener that accepts and never answers,
# dlock -w 2 gives up with 69 and one line saying it got no answer, on
# every backend's URL (connect, TLS handshake, session or lease set-up are
# all inside -w); -n is one attempt bounded by the connect timeout. Times
# are printed, not asserted tightly (a loaded machine): "before 10 s".
#
#   wait_bound.sh DLOCK SILENT   (SILENT: the dlock_cli_silent helper)
. "$(dirname "$0")/common.bash"
SILENT=${1:?usage: wait_bound.sh DLOCK SILENT}

run_bg s "$SILENT" "$T/port" 120
expect_true "the silent listener is up" wait_until 10000 test -s "$T/port"
port=$(cat "$T/port")

for scheme in redis rediss zookeeper etcd; do
  t0=$(now_ms)
  "$DLOCK" -w 2 -u "$scheme://127.0.0.1:$port" cli-wb true 2>"$T/$scheme.err"
  st=$?
  el=$(($(now_ms) - t0))
  echo "measured: -w 2 against a silent $scheme:// server: exit $st after $el ms"
  expect "$scheme: -w 2, silent server: 69" 69 "$st"
  expect_true "$scheme: -w 2 returned before 10 s ($el ms)" test "$el" -lt 10000
  expect_true "$scheme: one line" one_line "$T/$scheme.err"
done

t0=$(now_ms)
"$DLOCK" -n -u "etcd://127.0.0.1:$port" cli-wb true 2>"$T/n.err"
st=$?
el=$(($(now_ms) - t0))
echo "measured: -n against a silent etcd:// server: exit $st after $el ms"
expect "-n, silent server: 69" 69 "$st"
expect_true "-n returned before 15 s ($el ms)" test "$el" -lt 15000
expect_true "-n: one line" one_line "$T/n.err"

finish
