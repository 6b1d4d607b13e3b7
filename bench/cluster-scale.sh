#!/usr/bin/env bash
# cluster-scale.sh [SECONDS] - dlock on a Redis Cluster of 1, 3 and 6
# masters, in one run: T threads on T distinct lock names (the names spread
# over the masters by slot) and one uncontended thread, through
# redis-cluster:// URLs.
#
# Design note. For each size M the script starts M cluster-enabled
# redis-servers on free 127.0.0.1 ports (bus ports of their own), joins
# them (redis-cli --cluster create for M >= 3; CLUSTER ADDSLOTSRANGE
# 0 16383 for M = 1), waits for cluster_state:ok, runs
# `dlock-bench threads --threads T` and `dlock-bench uncontended` against
# redis-cluster://the seeds, records the servers' CPU seconds (/proc) over
# the threads run, and stops every server by PID. Prints one line per size
# and the ratios against M = 1. On two cores the servers, the client and
# the kernel share two CPUs: the ratio shows how far that allows.
#   bench/cluster-scale.sh 3
# DLOCK_BENCH: the binary (default build/bench/dlock-bench); THREADS (16).
set -u
secs=${1:-3}
bin=${DLOCK_BENCH:-build/bench/dlock-bench}
threads=${THREADS:-16}
dir=$(mktemp -d "${TMPDIR:-/tmp}/cluster-scale-XXXXXX") || exit 1
pids=()
cleanup() {
  local p
  for p in "${pids[@]+"${pids[@]}"}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${pids[@]+"${pids[@]}"}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
    kill -KILL "$p" 2>/dev/null
  done
  pids=()
}
trap 'cleanup; rm -rf -- "$dir"' EXIT INT TERM
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
cpu_ticks() { # sum of utime+stime of the given pids
  local t=0 p
  for p in "$@"; do
    t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  echo "$t"
}
declare -A acq one cpu
for m in 1 3 6; do
  cleanup
  ports=()
  for i in $(seq "$m"); do
    port=$(free_port) bus=$(free_port)
    mkdir -p "$dir/$m-$i"
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
      --cluster-enabled yes --cluster-port "$bus" \
      --cluster-config-file "$dir/$m-$i/nodes.conf" --dir "$dir/$m-$i" \
      --logfile "$dir/$m-$i/log" &
    pids+=($!)
    ports+=("$port")
  done
  for p in "${ports[@]}"; do
    for _ in $(seq 200); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.05; done
  done
  if [ "$m" -eq 1 ]; then
    redis-cli -p "${ports[0]}" cluster addslotsrange 0 16383 >/dev/null
  else
    args=()
    for p in "${ports[@]}"; do args+=("127.0.0.1:$p"); done
    redis-cli --cluster create "${args[@]}" --cluster-yes >"$dir/create-$m.log" 2>&1 ||
      { echo "cluster-scale: create failed (M=$m)" >&2; exit 1; }
  fi
  for p in "${ports[@]}"; do
    for _ in $(seq 400); do
      redis-cli -p "$p" cluster info 2>/dev/null | grep -q cluster_state:ok && break
      sleep 0.05
    done
  done
  url="redis-cluster://$(printf '127.0.0.1:%s,' "${ports[@]}" | sed 's/,$//')"
  t0=$(cpu_ticks "${pids[@]}")
  out=$("$bin" threads --threads "$threads" --seconds "$secs" --url "$url" 2>&1)
  t1=$(cpu_ticks "${pids[@]}")
  acq[$m]=$(echo "$out" | awk -v T="$threads" '$1=="threads" && $2=="T=" T && $3=="locks" {print $5}')
  [ -n "${acq[$m]}" ] || acq[$m]=$(echo "$out" | awk '/locks/ && $1=="threads" {print $5; exit}')
  cpu[$m]=$(python3 -c "print(round(($t1 - $t0) / $(getconf CLK_TCK) / $secs, 2))")
  one[$m]=$("$bin" uncontended --seconds "$secs" --url "$url" 2>&1 |
    sed -n 's/^uncontended: \([0-9.]*\) acquire+release pairs per second.*/\1/p')
  echo "masters $m: $threads threads on $threads locks ${acq[$m]} acq/s (servers' CPU ${cpu[$m]} cores); one thread uncontended ${one[$m]} pairs/s"
done
python3 -c "
a = {1: float('${acq[1]:-0}'), 3: float('${acq[3]:-0}'), 6: float('${acq[6]:-0}')}
if a[1]:
    print('ratio against 1 master: 3 masters %.2f, 6 masters %.2f' % (a[3] / a[1], a[6] / a[1]))
"
