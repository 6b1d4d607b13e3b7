#!/usr/bin/env bash
# tests/fuzz/run.sh [SECONDS] [BUILD_DIR] - builds the libFuzzer targets with
# clang (ASan+UBSan, library instrumented for coverage) in their own build
# directory (default build-fuzz) and runs each for SECONDS (default 25) as
# the ctest tests labelled `fuzz`, one after the other. New corpus entries
# stay in BUILD_DIR/tests/fuzz/fuzz-out/; a crash leaves its input in
# BUILD_DIR/tests/fuzz/fuzz-out/artifacts/ and fails the run. Needs clang
# and libFuzzer's runtime (Debian: clang, libclang-rt-14-dev).
set -euo pipefail
cd "$(dirname "$0")/../.."
secs=${1:-25}
dir=${2:-build-fuzz}
cc=${FUZZ_CC:-clang}
if ! command -v "$cc" >/dev/null; then
  echo "fuzz: $cc not found (install clang and libclang-rt-14-dev)" >&2
  exit 1
fi
cmake -S . -B "$dir" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DDLOCK_WERROR=ON -DDLOCK_ASAN=ON -DDLOCK_UBSAN=ON -DDLOCK_FUZZ=ON \
  -DDLOCK_FUZZ_SECONDS="$secs" -DDLOCK_BUILD_BENCH=OFF \
  -DDLOCK_BUILD_TOOLS=OFF >/dev/null
targets=$(sed -n 's/^foreach(name \(.*\))$/\1/p' tests/fuzz/CMakeLists.txt | head -1)
build=()
for t in $targets; do
  [ -f "tests/fuzz/fuzz_$t.c" ] && build+=(--target "fuzz_$t")
done
cmake --build "$dir" -j"$(nproc 2>/dev/null || echo 2)" "${build[@]}" >/dev/null
if ! grep -q 'DLOCK_HAVE_LIBFUZZER:INTERNAL=1' "$dir/CMakeCache.txt"; then
  echo "fuzz: $cc cannot link -fsanitize=fuzzer (install libclang-rt-14-dev)" >&2
  exit 1
fi
out="$dir/tests/fuzz/fuzz-out"
rm -f "$out"/artifacts/* 2>/dev/null || true
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
rc=0
(cd "$dir" && ctest -L fuzz --output-on-failure) || rc=$?
if compgen -G "$out/artifacts/*" >/dev/null; then
  echo "fuzz: inputs that failed (add each to tests/fuzz/regressions/NAME/):"
  ls -l "$out"/artifacts/
  rc=1
fi
exit $rc
