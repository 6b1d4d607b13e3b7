#!/usr/bin/env bash
# tests/interop/run.sh [BUILD_DIR] [MAVEN ARGS...]
#
# The Java interop suite (tests/interop/README.md): dlock processes and the
# real Redisson against private redis-servers, a Sentinel-managed master and
# a Redis Cluster. Builds the dlock command
# and the C helper in BUILD_DIR (default build/; configured with cmake if
# it is not), starts a redis-server on a free 127.0.0.1 port
# (tests/harness/with-redis.sh) and runs `mvn -q -B test` in
# tests/interop/java; then the Spring Integration suite in
# tests/interop/spring (a real RedisLockRegistry against --layout spring)
# on a server of its own. DLOCK_INTEROP_SUITES picks suites ("redisson",
# "spring"; default both). Extra arguments go to Maven, for example
#   tests/interop/run.sh build -Dredisson.version=3.51.0
#   tests/interop/run.sh build -Dtest=RLockTest
#   DLOCK_INTEROP_SUITES=spring tests/interop/run.sh build \
#     -Dspring.integration.version=6.5.3
# Exit status: Maven's (non-zero when a test fails); 0 with one line saying
# so when java or mvn is missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=build
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
  build=$1
  shift
fi
case "$build" in /*) ;; *) build="$root/$build" ;; esac

if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
  if [ "${DLOCK_REQUIRE_INTEROP:-0}" = 1 ]; then
    echo "interop: FAILED: java/mvn missing and DLOCK_REQUIRE_INTEROP=1 (CI runs every interop suite)" >&2
    exit 1
  fi
  echo "interop: skipped (no java/mvn; install openjdk-17-jdk-headless and maven to run it)"
  exit 0
fi

if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$build" -j2 --target dlock_cli dlock_interop th_with_topologies \
  >/dev/null
dlock_bin="$build/tools/dlock/dlock"
helper="$build/tests/interop/dlock_interop"
topologies="$build/tests/th_with_topologies"
for f in "$dlock_bin" "$helper" "$topologies"; do
  [ -x "$f" ] || { echo "interop: $f was not built" >&2; exit 1; }
done

suites=${DLOCK_INTEROP_SUITES:-redisson spring}
rc=0
with_redis="$root/tests/harness/with-redis.sh"
rm -rf "$root/tests/interop/java/target/surefire-reports" \
  "$root/tests/interop/spring/target/surefire-reports"
cd "$root/tests/interop/java"
if [[ " $suites " == *" redisson "* ]]; then
# Maven in batch mode, quiet (failures are still printed in full); the
# summary line is printed below from Surefire's reports.
# Three private servers: the first is the one most tests use (dlock.url);
# all three are the independent masters of the Redlock and MultiLock tests
# (dlock.urls). Each with-redis.sh stops its own server by PID. Around them,
# th_with_topologies runs a Sentinel-managed master and a 3-master Redis
# Cluster for TopologyTest (DLOCK_SENTINEL_*, DLOCK_CLUSTER_*), stopped by
# PID too. Two more, the twins, are ConformanceTest's alone: the same
# scripted sequence runs on one driven by Redisson and on the other driven
# by dlock, and their states are compared (dlock.twins).
"$topologies" -- \
  "$with_redis" -- sh -c 'DLOCK_URL_A=$DLOCK_URL exec "$0" "$@"' \
  "$with_redis" -- sh -c 'DLOCK_URL_B=$DLOCK_URL exec "$0" "$@"' \
  "$with_redis" -- sh -c 'DLOCK_TWIN_A=$DLOCK_URL exec "$0" "$@"' \
  "$with_redis" -- sh -c 'DLOCK_TWIN_B=$DLOCK_URL exec "$0" "$@"' \
  "$with_redis" -- sh -c '
  bin=$1 helper=$2
  shift 2
  exec mvn -q -B -Dstyle.color=never "$@" test -Ddlock.url="$DLOCK_URL_A" \
    -Ddlock.urls="$DLOCK_URL_A,$DLOCK_URL_B,$DLOCK_URL" \
    -Ddlock.twins="$DLOCK_TWIN_A,$DLOCK_TWIN_B" \
    -Ddlock.bin="$bin" -Ddlock.helper="$helper"
' run.sh "$dlock_bin" "$helper" "$@" || rc=$?
fi

# The Spring Integration suite (tests/interop/spring): a real
# RedisLockRegistry (Lettuce) against `dlock --layout spring` on a private
# redis-server of its own. Extra Maven arguments reach it too (a -Dtest=
# naming only Redisson classes selects none of its tests, which is fine).
if [[ " $suites " == *" spring "* ]]; then
  cd "$root/tests/interop/spring"
  "$with_redis" -- sh -c '
  bin=$1
  shift
  exec mvn -q -B -Dstyle.color=never -Dsurefire.failIfNoSpecifiedTests=false \
    "$@" test -Ddlock.url="$DLOCK_URL" -Ddlock.bin="$bin"
' run.sh "$dlock_bin" "$@" || rc=$?
fi
cd "$root/tests/interop"

# One summary line, as Surefire words it, summed over its XML reports.
shopt -s nullglob
reports=(java/target/surefire-reports/TEST-*.xml
  spring/target/surefire-reports/TEST-*.xml)
if [ ${#reports[@]} -gt 0 ]; then
  sed -n 's/.*<testsuite [^>]*tests="\([0-9]*\)" errors="\([0-9]*\)" skipped="\([0-9]*\)" failures="\([0-9]*\)".*/\1 \2 \3 \4/p' \
    "${reports[@]}" | awk '{t+=$1; e+=$2; s+=$3; f+=$4}
      END {printf "interop: Tests run: %d, Failures: %d, Errors: %d, Skipped: %d\n", t, f, e, s}'
else
  echo "interop: no test reports (Maven failed before the tests ran)"
fi
if [ "$rc" -ne 0 ]; then
  echo "interop: FAILED (exit status $rc)"
fi
exit "$rc"
