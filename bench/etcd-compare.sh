#!/bin/sh
# etcd-compare.sh - dlock on etcd against etcd's Go concurrency.Mutex (and
# the dlock command against `etcdctl lock`) on one private 3-member etcd
# cluster, in one run. See bench/README.md ("etcd: dlock against the Go
# client").
#
#   bench/etcd-compare.sh [BUILD_DIR] [-- etcd_compare.py options]
#
# BUILD_DIR (default build) must be configured; this builds dlock-bench,
# the dlock command and th_with_etcd there (-j2), builds the Go worker
# (bench/peers/etcd-go, modules from the Go module proxy) into a temp dir,
# then runs bench/harness/etcd_compare.py under th_with_etcd, which starts
# the cluster and stops its members by PID whatever happens. Options after
# -- go to etcd_compare.py: --reps N (3), --seconds D (3), --cmd-runs N
# (20), --keep DIR. The report (markdown) goes to stdout, progress to
# stderr. Exit status: etcd_compare.py's (1 if a worker failed or holds
# overlapped), 69 without go or without the etcd backend in BUILD_DIR.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:-build}
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
case $build in /*) ;; *) build=$root/$build ;; esac
command -v go >/dev/null 2>&1 || {
  echo "etcd-compare: go is needed for the Go peer" >&2
  exit 69
}
grep -q '^DLOCK_HAVE_ETCD:INTERNAL=TRUE$' "$build/CMakeCache.txt" || {
  echo "etcd-compare: $build has no etcd backend (configure with -DDLOCK_WITH_ETCD=ON)" >&2
  exit 69
}
cmake --build "$build" -j2 --target dlock-bench dlock_cli th_with_etcd >&2
tmp=$(mktemp -d /tmp/etcd-compare-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
(cd "$here/peers/etcd-go" && go build -o "$tmp/etcd_worker" .) >&2
"$build/tests/th_with_etcd" --members 3 -- python3 \
  "$here/harness/etcd_compare.py" \
  --dlock-bench "$build/bench/dlock-bench" \
  --go-worker "$tmp/etcd_worker" \
  --dlock "$build/tools/dlock/dlock" "$@"
