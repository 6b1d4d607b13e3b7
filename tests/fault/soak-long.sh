#!/usr/bin/env bash
# soak-long.sh - the fault suite's soak (test_fault soak), for longer runs.
#
#   tests/fault/soak-long.sh [-b BUILD_DIR] [-s SECS] [-p PROCS] [-t THREADS]
#                            [-l LOCKS] [--valgrind] [--dump DIR] [--debug]
#
# Defaults: build-fault next to this checkout, 600 s, 8 processes x 4
# threads on 4 locks (ctest's soak is the same for 60 s). The run starts
# its own redis-servers on free 127.0.0.1 ports and stops them; it checks
# what the ctest soak checks: no overlapping holds and no stale write
# accepted (fenced checker), no lost hold, every worker exits 0, RSS growth
# of each worker bounded (FAULT_SOAK_RSS_KB, default 4096 KiB, from the
# quarter mark to the end), and no lock keys or keys without expiry left
# behind. Its FIGURE lines are the figures of docs/RELIABILITY.md.
#
#   --valgrind  run every worker under valgrind's memcheck (definite leaks
#               and errors fail the worker); default 2 processes x 2 threads,
#               since valgrind is slow. The RSS bound is not applied then.
#   --dump DIR  write every line of every worker to DIR/<tag>.log.
#   --debug     workers log the library's debug messages (with --dump).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../../build-fault"
secs=600 procs="" threads="" locks=4 valgrind=0 dump="" debug=0
while [ $# -gt 0 ]; do
  case "$1" in
    -b) build=$2; shift 2 ;;
    -s) secs=$2; shift 2 ;;
    -p) procs=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    -l) locks=$2; shift 2 ;;
    --valgrind) valgrind=1; shift ;;
    --dump) dump=$2; shift 2 ;;
    --debug) debug=1; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "soak-long.sh: unknown argument $1 (try --help)" >&2; exit 64 ;;
  esac
done
exe="$build/tests/fault/test_fault"
worker="$build/tests/fault/fault_worker"
if [ ! -x "$exe" ] || [ ! -x "$worker" ]; then
  echo "soak-long.sh: build first: cmake -S . -B $build && cmake --build $build" >&2
  exit 69
fi
export FAULT_WORKER="$worker" FAULT_SOAK_SECS="$secs" FAULT_SOAK_LOCKS="$locks"
if [ "$valgrind" = 1 ]; then
  command -v valgrind >/dev/null || { echo "soak-long.sh: no valgrind" >&2; exit 69; }
  export FAULT_WORKER_WRAPPER="valgrind --quiet --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=99"
  procs=${procs:-2} threads=${threads:-2}
fi
export FAULT_SOAK_PROCS="${procs:-8}" FAULT_SOAK_THREADS="${threads:-4}"
if [ -n "$dump" ]; then
  mkdir -p "$dump"
  export FAULT_DUMP_DIR="$dump"
fi
[ "$debug" = 1 ] && export FAULT_SOAK_OPTS="--log-level 3"
echo "soak: ${FAULT_SOAK_PROCS} processes x ${FAULT_SOAK_THREADS} threads, $locks locks, $secs s${FAULT_WORKER_WRAPPER:+ (valgrind)}"
exec "$exe" soak
