#!/usr/bin/env bash
# The full test suite, as CI runs it: installs what is missing, builds with
# warnings as errors, runs every test under AddressSanitizer+UBSan, then
# under ThreadSanitizer, then each fuzz target for 15 s (tests/fuzz/run.sh),
# then the integration tests under valgrind (tests/valgrind/run.sh), then in
# a normal build, then the Java interop suites against the real Redisson
# and Spring Integration's RedisLockRegistry (tests/interop/run.sh) and the
# real Curator (tests/interop/curator/run.sh;
# each skipped with one line when java or mvn is missing). Each test starts
# its own servers on free loopback ports and stops them.
# Every stage runs even when an earlier one failed, so one run shows every
# failure; the last lines list each stage with its result and duration, and
# the exit status is 1 when any stage failed.
# Usage: ./scripts/test.sh [extra ctest args]
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/deps.sh
jobs=$(nproc 2>/dev/null || echo 2)

# (stages run under `||`, where set -e does not apply: every step checks)
run_suite() { # build-dir, cmake args...
  local dir=$1; shift
  cmake -S . -B "$dir" -DDLOCK_WERROR=ON "$@" >/dev/null || return
  cmake --build "$dir" -j"$jobs" >/dev/null || return
  (cd "$dir" && ctest --output-on-failure -j"$jobs" "${CTEST_ARGS[@]}")
}
CTEST_ARGS=("$@")

# The sanitizer stages run the soak for 20 s (the Release stage runs its
# full 60 s): the same mix of operations, a third of the time, to keep the
# whole run within its budget.
results=()
failed=0
# stage NAME COMMAND...: runs it, notes its result and duration
stage() {
  local name=$1 t0 rc=0
  shift
  echo "== $name =="
  t0=$(date +%s)
  "$@" || rc=$?
  if [ "$rc" -eq 0 ]; then
    results+=("passed  $(($(date +%s) - t0)) s  $name")
  else
    results+=("FAILED  $(($(date +%s) - t0)) s  $name (exit $rc)")
    failed=1
  fi
}
asan() {
  FAULT_SOAK_SECS=20 \
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    run_suite build-asan -DCMAKE_BUILD_TYPE=Debug -DDLOCK_ASAN=ON -DDLOCK_UBSAN=ON
}
tsan() {
  FAULT_SOAK_SECS=20 TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    run_suite build-tsan -DCMAKE_BUILD_TYPE=Debug -DDLOCK_TSAN=ON
}
stage "ASan+UBSan build" asan
stage "TSan build" tsan
stage "Fuzzing (clang, libFuzzer, 15 s per target)" ./tests/fuzz/run.sh 15 build-fuzz
stage "valgrind memcheck (integration tests)" ./tests/valgrind/run.sh build-vg
stage "Release build" run_suite build -DCMAKE_BUILD_TYPE=RelWithDebInfo
stage "Redisson and Spring interop (Java)" ./tests/interop/run.sh build
stage "Curator interop (Java)" ./tests/interop/curator/run.sh build
echo "== summary =="
printf '%s\n' "${results[@]}"
exit $failed
