#!/usr/bin/env bash
# The full test suite, as CI runs it: installs what is missing, builds with
# warnings as errors, runs every test under AddressSanitizer+UBSan, then
# under ThreadSanitizer, then each fuzz target for 15 s (tests/fuzz/run.sh),
# then the integration tests under valgrind (tests/valgrind/run.sh), then in
# a normal build, then the Java interop suites against the real Redisson
# (tests/interop/run.sh) and the real Curator (tests/interop/curator/run.sh;
# each skipped with one line when java or mvn is missing). Each test starts its own redis-server on a free loopback port
# and stops it. Usage: ./scripts/test.sh [extra ctest args]
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
jobs=$(nproc 2>/dev/null || echo 2)

run_suite() { # build-dir, cmake args...
  local dir=$1; shift
  cmake -S . -B "$dir" -DDLOCK_WERROR=ON "$@" >/dev/null
  cmake --build "$dir" -j"$jobs" >/dev/null
  (cd "$dir" && ctest --output-on-failure -j"$jobs" "${CTEST_ARGS[@]}")
}
CTEST_ARGS=("$@")

# The sanitizer stages run the soak for 20 s (the Release stage runs its
# full 60 s): the same mix of operations, a third of the time, to keep the
# whole run within its budget.
echo "== ASan+UBSan build =="
FAULT_SOAK_SECS=20 \
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  run_suite build-asan -DCMAKE_BUILD_TYPE=Debug -DDLOCK_ASAN=ON -DDLOCK_UBSAN=ON
echo "== TSan build =="
FAULT_SOAK_SECS=20 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  run_suite build-tsan -DCMAKE_BUILD_TYPE=Debug -DDLOCK_TSAN=ON
echo "== Fuzzing (clang, libFuzzer, 15 s per target) =="
./tests/fuzz/run.sh 15 build-fuzz
echo "== valgrind memcheck (integration tests) =="
./tests/valgrind/run.sh build-vg
echo "== Release build =="
run_suite build -DCMAKE_BUILD_TYPE=RelWithDebInfo
echo "== Redisson interop (Java) =="
./tests/interop/run.sh build
echo "== Curator interop (Java) =="
./tests/interop/curator/run.sh build
