#!/usr/bin/env bash
# with-redis.sh - run a command against a private, throw-away redis-server.
#
# Usage:
#   with-redis.sh [--conf 'LINE']... -- CMD ARGS...
#
# Starts redis-server bound to 127.0.0.1 on a free port, in a fresh mktemp
# directory, with `save ""` and `appendonly no` followed by every --conf LINE
# (redis.conf syntax, one directive per --conf; later lines override earlier
# ones, e.g. --conf 'requirepass s3cret' or --conf 'appendonly yes'). Waits
# (at most 10 s) until the server answers, then runs CMD ARGS... with:
#   DLOCK_URL=redis://127.0.0.1:PORT
#   REDIS_PORT=PORT
#   REDIS_CLI="redis-cli -p PORT"
#   REDIS_DIR=the server's directory (config, redis.log)
#   REDIS_PID=the server's pid
# exported. CMD's stdin, stdout and stderr are the script's.
#
# Exit status: CMD's exit status (128+N if it died of signal N).
# 125 if the server could not be started or the usage is wrong (CMD not run).
#
# The server is always stopped (SIGTERM, SIGKILL after 5 s) and its directory
# removed when the script exits, whatever happened; SIGINT/SIGTERM/SIGHUP sent
# to the script are forwarded to CMD first. The server also dies if the script
# is killed outright (setpriv --pdeathsig, when available).
#
# Environment: REDIS_SERVER (default: redis-server from PATH).
set -u

usage() {
  echo "usage: with-redis.sh [--conf 'LINE']... -- CMD ARGS..." >&2
  exit 125
}

confs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --conf)
      [ $# -ge 2 ] || usage
      confs+=("$2")
      shift 2
      ;;
    --conf=*)
      confs+=("${1#--conf=}")
      shift
      ;;
    --)
      shift
      break
      ;;
    *)
      usage
      ;;
  esac
done
[ $# -ge 1 ] || usage

redis_server="${REDIS_SERVER:-redis-server}"
if ! command -v "$redis_server" >/dev/null 2>&1; then
  echo "with-redis.sh: $redis_server not found" >&2
  exit 125
fi

dir=""
server_pid=""
cmd_pid=""

stop_server() {
  if [ -n "$server_pid" ]; then
    kill -TERM "$server_pid" 2>/dev/null
    kill -CONT "$server_pid" 2>/dev/null
    local i=0 state
    # at most 5 s (500 x 10 ms) for a graceful exit
    while [ $i -lt 500 ] && kill -0 "$server_pid" 2>/dev/null; do
      # an exited but unreaped child still answers kill -0
      state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' \
        "/proc/$server_pid/status" 2>/dev/null)
      if [ "$state" = Z ]; then
        break
      fi
      sleep 0.01
      i=$((i + 1))
    done
    kill -KILL "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
    server_pid=""
  fi
}

cleanup() {
  stop_server
  if [ -n "$dir" ] && [ -d "$dir" ]; then
    rm -rf -- "$dir"
  fi
}
trap cleanup EXIT

# A signal is forwarded to CMD once CMD exists. Between CMD's fork and
# `cmd_pid=$!` a trap can already run (CMD may even have told the sender it
# is ready); bash sets $! at the fork, so a handler that finds $! changed
# forwards to it. A signal that comes before the fork is kept and sent to
# CMD as soon as it exists.
got_signal=""
cmd_starting=""
pending_signal=""
on_signal() {
  local sig=$1 target=$cmd_pid
  got_signal=yes
  if [ -z "$target" ] && [ -n "$cmd_starting" ] && [ "$!" != "$server_pid" ]; then
    target=$!
  fi
  if [ -n "$target" ]; then
    kill -s "$sig" "$target" 2>/dev/null
  elif [ -n "$cmd_starting" ]; then
    pending_signal=$sig
  else
    exit $((128 + $(kill -l "$sig")))
  fi
}
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM
trap 'on_signal HUP' HUP

# A port that was free a moment ago: bind port 0 when python3 can do it,
# else a random port below the ephemeral range. A collision is detected
# (redis-server exits with "Address already in use") and retried.
pick_port() {
  local p
  p=$(python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])' 2>/dev/null) || p=""
  if [ -z "$p" ]; then
    p=$((20000 + RANDOM % 12000))
  fi
  echo "$p"
}

dir=$(mktemp -d "${TMPDIR:-/tmp}/dlock-with-redis-XXXXXX") || exit 125

pdeath=()
if command -v setpriv >/dev/null 2>&1 && setpriv --pdeathsig KILL true 2>/dev/null; then
  pdeath=(setpriv --pdeathsig KILL)
fi

started=""
for attempt in 1 2 3 4 5 6 7 8; do
  port=$(pick_port)
  {
    echo "bind 127.0.0.1"
    echo "port $port"
    echo "dir $dir"
    echo "daemonize no"
    echo 'save ""'
    echo "appendonly no"
    echo "logfile $dir/redis.log"
    for line in "${confs[@]+"${confs[@]}"}"; do
      echo "$line"
    done
  } >"$dir/redis.conf"
  : >"$dir/redis.log"
  "${pdeath[@]+"${pdeath[@]}"}" "$redis_server" "$dir/redis.conf" \
    </dev/null >>"$dir/redis.out" 2>&1 &
  server_pid=$!
  # wait (at most 10 s, 1000 x 10 ms) until it answers or exits
  i=0
  while [ $i -lt 1000 ]; do
    if ! kill -0 "$server_pid" 2>/dev/null; then
      break
    fi
    out=$(redis-cli -h 127.0.0.1 -p "$port" ping 2>&1)
    case "$out" in
      *"Could not connect"* | *"Connection refused"* | *LOADING* | "") ;;
      *)
        started=yes
        break
        ;;
    esac
    sleep 0.01
    i=$((i + 1))
  done
  if [ -n "$started" ]; then
    break
  fi
  if kill -0 "$server_pid" 2>/dev/null; then
    echo "with-redis.sh: redis-server on port $port not ready after 10 s" >&2
    tail -n 20 "$dir/redis.log" >&2
    exit 125
  fi
  wait "$server_pid" 2>/dev/null
  server_pid=""
  if ! grep -q "Address already in use" "$dir/redis.log" 2>/dev/null; then
    echo "with-redis.sh: redis-server failed to start:" >&2
    tail -n 20 "$dir/redis.log" "$dir/redis.out" >&2
    exit 125
  fi
done
if [ -z "$started" ]; then
  echo "with-redis.sh: no free port found" >&2
  exit 125
fi

export DLOCK_URL="redis://127.0.0.1:$port"
export REDIS_PORT="$port"
export REDIS_CLI="redis-cli -p $port"
export REDIS_DIR="$dir"
export REDIS_PID="$server_pid"

# Run CMD in the background (stdin kept explicitly) so that signals sent to
# this script are handled at once and forwarded.
cmd_starting=yes
"$@" <&0 &
cmd_pid=$!
if [ -n "$pending_signal" ]; then
  kill -s "$pending_signal" "$cmd_pid" 2>/dev/null
fi
# `wait` returns early (status > 128) when a trapped signal arrives; wait
# again for CMD's own status. A CMD that exits in that same instant is
# still collected by the next `wait`, which bash keeps its status for; a
# `wait` on an already collected CMD says 127 and keeps the status we have.
status=0
while :; do
  got_signal=""
  wait "$cmd_pid"
  rc=$?
  if [ -z "$got_signal" ]; then
    status=$rc
    break
  fi
  if [ "$rc" -eq 127 ]; then
    break
  fi
  status=$rc
done
cmd_pid=""
exit "$status"
