#!/usr/bin/env bash
# bench/zk-compare.sh [--build DIR] [--out DIR] [--reps N] [--seconds D]
#                     [--workers W] [--cases uncontended,contended-h0,contended-h1000]
#                     [--warmup S]
#
# dlock on ZooKeeper, Apache Curator's InterProcessMutex (5.9.0, Maven
# Central, bench/peers/curator) on the same 3-member ensemble, and dlock on
# Redis, in one run: the uncontended loop (1 process), and W processes
# (default 8) on one lock with H = 0 and H = 1 ms, with the loop and
# records of bench/compare (bench/README.md), after S seconds (default 5)
# of unmeasured load on both servers (their own warm-up). Prints a markdown table
# (pairs/s, acquisitions/s, cross-worker hand-off p50/p99, worst wait,
# Jain's index, and the dlock-on-ZooKeeper / Curator ratio of each) and
# writes it to OUT/report.md with OUT/runs.csv (every repetition) and
# OUT/raw/ (records and worker logs).
#
# Builds dlock-bench and the harness's th_with_zk in DIR (default build/,
# -j2; configured RelWithDebInfo if it is not) and the Curator worker with
# Maven. The ensemble (tests/harness/zk.c) and the redis-server
# (tests/harness/with-redis.sh) run on free 127.0.0.1 ports in temporary
# directories and are stopped by PID whatever happens. Every run of a peer
# is bounded (its lead + D + 30 s, then its workers are killed by PID).
# Exit status: 0, 1 if any hold overlapped or any worker failed, 2 on a
# usage or build error.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build"
out="$root/bench/results/$(date -u +%F)/raw-zk-compare"
pass=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --reps|--seconds|--workers|--cases|--warmup) pass+=("$1" "$2"); shift 2 ;;
    *) echo "usage: bench/zk-compare.sh [--build DIR] [--out DIR] [--reps N] [--seconds D] [--workers W] [--cases LIST] [--warmup S]" >&2
       exit 2 ;;
  esac
done
case "$build" in /*) ;; *) build="$PWD/$build" ;; esac
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
for t in java mvn python3 redis-server; do
  command -v "$t" >/dev/null 2>&1 || { echo "zk-compare: needs $t" >&2; exit 2; }
done

if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
if ! grep -q '^DLOCK_HAVE_ZOOKEEPER:INTERNAL=TRUE$' "$build/CMakeCache.txt"; then
  echo "zk-compare: $build has no zookeeper backend (configure with -DDLOCK_WITH_ZOOKEEPER=ON)" >&2
  exit 2
fi
cmake --build "$build" -j2 --target dlock-bench th_with_zk >/dev/null
bench="$build/bench/dlock-bench"
with_zk="$build/tests/th_with_zk"
for f in "$bench" "$with_zk"; do
  [ -x "$f" ] || { echo "zk-compare: $f was not built" >&2; exit 2; }
done
(cd "$root/bench/peers/curator" &&
  mvn -q -B -Dstyle.color=never package dependency:copy-dependencies >/dev/null)
cp="$root/bench/peers/curator/target/classes:$root/bench/peers/curator/target/lib/*"

mkdir -p "$out"
echo "zk-compare: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo ?)," \
  "$(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
exec "$with_zk" --members 3 -- "$root/tests/harness/with-redis.sh" -- \
  python3 "$root/bench/harness/zk_compare.py" --dlock-bench "$bench" \
  --curator-cp "$cp" --out "$out" "${pass[@]}"
