#!/usr/bin/env bash
# redlock.sh [N] [redlock-bench options] - starts N (default 5) private
# redis-servers on free 127.0.0.1 ports (temp dirs, no persistence), runs
# redlock-bench over them (then node-redlock and go-redsync over the same
# servers, when bench/peers has its node modules and Go is installed), and
# stops them by PID whatever happens.
#   bench/redlock.sh 5 --iters 5000
#   bench/redlock.sh 5 --delay-ms 1 --iters 1000   (a 2 ms round trip added)
# REDLOCK_BENCH: the binary (default build/bench/redlock-bench).
set -u
n=${1:-5}
shift || true
bin=${REDLOCK_BENCH:-build/bench/redlock-bench}
dir=$(mktemp -d "${TMPDIR:-/tmp}/redlock-bench-XXXXXX") || exit 1
pids=()
cleanup() {
  local p
  for p in "${pids[@]+"${pids[@]}"}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]+"${pids[@]}"}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
    kill -KILL "$p" 2>/dev/null
  done
  rm -rf -- "$dir"
}
trap cleanup EXIT INT TERM
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
# --delay-ms D (first after N): every server behind a relay (bench/relay)
# that holds each chunk D ms in each direction, for every client below
delay=0
if [ "${1:-}" = "--delay-ms" ]; then
  delay=$2
  shift 2
fi
relay_bin=${RELAY:-$(dirname "$bin")/relay}
urls=()
for i in $(seq "$n"); do
  port=$(free_port)
  mkdir -p "$dir/$i"
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$dir/$i" --logfile "$dir/$i/log" &
  pids+=($!)
  for _ in $(seq 200); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.05
  done
  if [ "$delay" -gt 0 ]; then
    "$relay_bin" "$port" "$delay" >"$dir/$i/relay.port" &
    pids+=($!)
    port=
    for _ in $(seq 200); do
      port=$(head -n1 "$dir/$i/relay.port" 2>/dev/null)
      [ -n "$port" ] && break
      sleep 0.05
    done
    [ -n "$port" ] || { echo "redlock.sh: relay failed" >&2; exit 1; }
  fi
  urls+=("redis://127.0.0.1:$port")
done
[ "$delay" -gt 0 ] && echo "every server behind a relay adding $delay ms each way (round trip $((2 * delay)) ms more)"
"$bin" "$@" "${urls[@]}"
# node-redlock over the same servers, when bench/peers has its modules
# (npm ci in bench/peers)
peers=$(dirname "$0")/peers
if command -v node >/dev/null && [ -d "$peers/node_modules/redlock" ]; then
  node "$peers/redlock_latency.js" 3000 "${urls[@]}"
fi
# go-redsync v4 over the same servers, when Go is installed (go build
# fetches the modules of bench/peers/redsync/go.mod)
if command -v go >/dev/null; then
  (cd "$peers/redsync" && go build -o "$dir/redsync-latency" . ) &&
    "$dir/redsync-latency" 3000 "${urls[@]}"
fi
