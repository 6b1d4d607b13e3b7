#!/usr/bin/env bash
# tests/interop/curator/run.sh [BUILD_DIR] [MAVEN ARGS...]
#
# The Curator interop suite (tests/interop/README.md): dlock processes and
# the real Apache Curator against one private ZooKeeper server. Builds the
# dlock command, the C helper and the harness's th_with_zk in BUILD_DIR
# (default build/; configured with cmake if it is not), starts ZooKeeper on
# free 127.0.0.1 ports (tests/harness/zk.c) and runs `mvn -q -B test` here.
# Extra arguments go to Maven, for example
#   tests/interop/curator/run.sh build -Dcurator.version=5.6.0
#   tests/interop/curator/run.sh build -Dtest=MutexTest
# Exit status: Maven's; 0 with one line saying so when java or mvn is
# missing or the build has no zookeeper backend.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
build=build
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
  build=$1
  shift
fi
case "$build" in /*) ;; *) build="$root/$build" ;; esac

if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
  echo "curator interop: skipped (no java/mvn; install openjdk-17-jdk-headless and maven to run it)"
  exit 0
fi

if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
if ! grep -q '^DLOCK_HAVE_ZOOKEEPER:INTERNAL=TRUE$' "$build/CMakeCache.txt"; then
  echo "curator interop: skipped (this build has no zookeeper backend: configure with -DDLOCK_WITH_ZOOKEEPER=ON)"
  exit 0
fi
cmake --build "$build" -j2 --target dlock_cli dlock_interop th_with_zk >/dev/null
dlock_bin="$build/tools/dlock/dlock"
helper="$build/tests/interop/dlock_interop"
with_zk="$build/tests/th_with_zk"
for f in "$dlock_bin" "$helper" "$with_zk"; do
  [ -x "$f" ] || { echo "curator interop: $f was not built" >&2; exit 1; }
done

cd "$root/tests/interop/curator"
rm -rf target/surefire-reports
rc=0
"$with_zk" -- sh -c '
  bin=$1 helper=$2
  shift 2
  exec mvn -q -B -Dstyle.color=never "$@" test -Ddlock.zk="$DLOCK_ZK_URL" -Ddlock.bin="$bin" -Ddlock.helper="$helper"
' run.sh "$dlock_bin" "$helper" "$@" || rc=$?

shopt -s nullglob
reports=(target/surefire-reports/TEST-*.xml)
if [ ${#reports[@]} -gt 0 ]; then
  sed -n 's/.*<testsuite [^>]*tests="\([0-9]*\)" errors="\([0-9]*\)" skipped="\([0-9]*\)" failures="\([0-9]*\)".*/\1 \2 \3 \4/p' \
    "${reports[@]}" | awk '{t+=$1; e+=$2; s+=$3; f+=$4}
      END {printf "curator interop: Tests run: %d, Failures: %d, Errors: %d, Skipped: %d\n", t, f, e, s}'
else
  echo "curator interop: no test reports (Maven failed before the tests ran)"
fi
if [ "$rc" -ne 0 ]; then
  echo "curator interop: FAILED (exit status $rc)"
fi
exit "$rc"
