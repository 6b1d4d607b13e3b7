#!/usr/bin/env bash
# tests/valgrind/run.sh [BUILD_DIR] [TEST_REGEX] - the integration tests under
# valgrind memcheck: zero memory errors and zero leaks (definite, indirect,
# possible), or the run fails.
#
# Builds a plain Debug build (no sanitizers; default build-vg) and runs each
# ctest test labelled `integration` (names EXE.CASE, or those matching
# TEST_REGEX) as
#     valgrind ... BUILD_DIR/tests/EXE CASE
# VG_JOBS (2) at a time, each bounded by VG_TIMEOUT (240 s), plus the fuzz
# seed corpus of every reply shape (fuzz_replay_reply). Only the test
# process is checked: the redis-servers it starts run natively.
#
# Left out (VG_EXCLUDE): the harness's own tests (no libdlock in them), and
# test_mutex.processes, test_wakeup.killed_waiter_process_skipped,
# test_redlock.processes, test_redlock.multilock_opposite_orders and
# test_common.redis.exclusion_processes, which
# re-execute themselves through /proc/self/exe - under valgrind that path
# is valgrind's own binary, which refuses to start (a limitation of the
# tool, not of the code); and test_tls.fork_child_frees, whose forked child
# exits with the parent's threads' stacks behind it, which memcheck counts
# as the child's leaks (its exit status then fails the test's own check).
# All the rest runs: ~200 tests in about two and a half minutes on 2 cores
# (the tests wait on the network far more than they compute, so
# valgrind's slowdown hardly shows).
#
# A test that fails its own checks exits through exit(1) with clients still
# open, so its leak report means nothing: such a test is reported as a test
# failure (the normal suite reports it too) and fails this run only if the
# log holds a memory error other than a leak. Suppressions:
# tests/valgrind/dlock.supp. Logs: BUILD_DIR/valgrind/NAME.log.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-build-vg}
regex=${2:-${VG_SUBSET:-.}}
exclude=${VG_EXCLUDE:-'^(with_redis_sh|test_harness\..*|test_mutex\.processes|test_wakeup\.killed_waiter_process_skipped|test_redlock\.processes|test_redlock\.multilock_opposite_orders|test_common\.redis\.exclusion_processes|test_tls\.fork_child_frees)$'}
jobs=${VG_JOBS:-2}
command -v valgrind >/dev/null || {
  echo "valgrind: not installed (Debian package valgrind)" >&2
  exit 1
}
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DDLOCK_WERROR=ON \
  -DDLOCK_ASAN=OFF -DDLOCK_UBSAN=OFF -DDLOCK_TSAN=OFF -DDLOCK_FUZZ=OFF \
  -DDLOCK_BUILD_BENCH=OFF >/dev/null
cmake --build "$dir" -j"$(nproc 2>/dev/null || echo 2)" >/dev/null
logs="$dir/valgrind"
rm -rf "$logs"
mkdir -p "$logs"
tests=$(cd "$dir" && ctest -N -L integration | sed -n 's/^ *Test *#[0-9]*: //p' |
  grep -E "$regex" | grep -vE "$exclude" || true)
[ -n "$tests" ] || {
  echo "valgrind: no test matches $regex" >&2
  exit 1
}
if [ -x "$dir/tests/fuzz/fuzz_replay_reply" ] && [ "$regex" = . ]; then
  tests="$tests
fuzz_replay_reply"
fi
export TH_REDIS_SERVER=${TH_REDIS_SERVER:-$(command -v redis-server)}
export VG_DIR=$dir VG_LOGS=$logs VG_SUPP=$PWD/tests/valgrind/dlock.supp
export VG_TIMEOUT=${VG_TIMEOUT:-240} VG_SRC=$PWD

# Memory errors other than leaks, as memcheck words them.
export VG_ERRORS='Invalid (read|write|free)|uninitialised|Mismatched free|overlap|Syscall param|Argument .* of function|Process terminating|fishy'

one() { # NAME
  local name=$1 log="$VG_LOGS/$1.log" rc=0 t0=$SECONDS
  local cmd
  if [ "$name" = fuzz_replay_reply ]; then
    cmd=("$VG_DIR/tests/fuzz/fuzz_replay_reply" "$VG_SRC/tests/fuzz/corpus/reply")
  elif [[ "$name" == test_common.*.* || "$name" == test_async.*.* ]]; then
    # the suites run per backend: SUITE.BACKEND.CASE runs CASE with
    # TH_BACKEND=BACKEND
    local suite=${name%%.*}
    local rest=${name#"$suite".}
    local -x TH_BACKEND=${rest%%.*}
    cmd=("$VG_DIR/tests/$suite" "${rest#*.}")
  else
    cmd=("$VG_DIR/tests/${name%%.*}" "${name#*.}")
  fi
  timeout -k 10 "$VG_TIMEOUT" valgrind --tool=memcheck --quiet \
    --leak-check=full --show-leak-kinds=definite,indirect,possible \
    --errors-for-leak-kinds=definite,indirect,possible --error-exitcode=99 \
    --num-callers=40 --suppressions="$VG_SUPP" --gen-suppressions=all \
    "${cmd[@]}" >"$log" 2>&1 || rc=$?
  local took=$((SECONDS - t0))
  if [ "$rc" -eq 0 ]; then
    echo "ok   $name (${took} s)"
    return 0
  fi
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "FAIL $name: timed out after $VG_TIMEOUT s (see $log)"
    return 1
  fi
  if grep -q 'CHECK failed' "$log"; then
    if grep -qE "$VG_ERRORS" "$log"; then
      echo "FAIL $name: memory errors (and the test failed; see $log)"
      return 1
    fi
    echo "test $name: the test itself failed (not a memcheck finding;" \
      "its leaks are those of an early exit; see $log)"
    return 2
  fi
  if [ "$rc" -eq 99 ]; then
    echo "FAIL $name: memory errors or leaks (see $log)"
  else
    echo "FAIL $name: exit $rc (see $log)"
  fi
  return 1
}
export -f one

n=$(echo "$tests" | wc -l)
echo "valgrind memcheck over $n tests, $jobs at a time"
t0=$SECONDS
results=$(echo "$tests" | xargs -P "$jobs" -I{} bash -c 'one "$@"; true' _ {} |
  tee -a /dev/stderr) # -a: reopening a log file must not truncate it
bad=$(grep -c '^FAIL' <<<"$results" || true)
failed_tests=$(grep -c '^test ' <<<"$results" || true)
echo "valgrind: $n tests in $((SECONDS - t0)) s: $bad with memory errors," \
  "leaks or timeouts; $failed_tests failed their own checks (see the suite)"
[ "$bad" -eq 0 ]
