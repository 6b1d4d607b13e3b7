#!/usr/bin/env bash
# tests/unit/symbols.sh LIBDLOCK.a LIBDLOCK.so [SYMBOLS-FILE]
#
# libdlock's namespace: every global symbol the static library defines is
# named dlock_ (public) or dlock__ (internal), and the shared library
# exports only public dlock_ names (its internal ones are hidden; the
# linker's own _init, _fini, _edata, _end, __bss_start and the bounds of
# named sections, __start_SECTION and __stop_SECTION, which clang's
# coverage instrumentation of a fuzzing build makes, are allowed). In
# an AddressSanitizer build each global variable has an ODR indicator named
# after it (GCC: __odr_asan.NAME, clang: __odr_asan_gen_NAME): NAME is what
# is checked.
# With SYMBOLS-FILE (debian/libdlock0.symbols), the shared library's dlock_
# exports are exactly the names that file lists, so a public function added
# or removed shows here, not first in a package build.
# Prints what is wrong, one symbol a line, and exits 1; exits 77 (skipped,
# one line) when nm (binutils) is missing.
set -u
a=$1
so=$2
symfile=${3:-}
if ! command -v nm >/dev/null 2>&1; then
  echo "symbols: skipped (no nm; install binutils)"
  exit 77
fi
for f in "$a" "$so"; do
  [ -r "$f" ] || { echo "symbols: $f: not found"; exit 1; }
done
bad=0
# static: "ADDRESS TYPE NAME" for every defined global of every member
if ! out=$(nm -g --defined-only "$a" 2>&1); then
  echo "symbols: nm $a failed: $out"
  exit 1
fi
static_bad=$(printf '%s\n' "$out" | awk 'NF == 3 {
    name = $3
    sub(/^__odr_asan(\.|_gen_)/, "", name)
    if (name !~ /^dlock_/) print $3
  }' | sort -u)
if [ -n "$static_bad" ]; then
  echo "$a defines globals without the dlock_ prefix:"
  printf '  %s\n' $static_bad
  bad=1
fi
# shared: the dynamic symbol table
if ! out=$(nm -D --defined-only "$so" 2>&1); then
  echo "symbols: nm -D $so failed: $out"
  exit 1
fi
shared_bad=$(printf '%s\n' "$out" | awk 'NF == 3 {
    name = $3
    sub(/^__odr_asan(\.|_gen_)/, "", name)
    print name
  }' |
  grep -Ev '^(_init|_fini|_edata|_end|__bss_start|__(start|stop)_[A-Za-z0-9_]+)$' |
  grep -Ev '^dlock_[a-z0-9]' | sort -u)
if [ -n "$shared_bad" ]; then
  echo "$so exports symbols that are not public dlock_ names:"
  printf '  %s\n' $shared_bad
  bad=1
fi
if [ -n "$symfile" ]; then
  exported=$(printf '%s\n' "$out" | awk 'NF == 3 && $3 ~ /^dlock_/ {print $3}' | sort -u)
  listed=$(sed -n 's/^ \(dlock_[a-z0-9_]*\)@Base .*/\1/p' "$symfile" | sort -u)
  if [ "$exported" != "$listed" ]; then
    echo "$so and $symfile disagree (< exported only, > listed only):"
    diff <(printf '%s\n' "$exported") <(printf '%s\n' "$listed") | grep '^[<>]'
    bad=1
  fi
fi
if [ $bad = 0 ]; then
  n_a=$(nm -g --defined-only "$a" | awk 'NF == 3' | wc -l)
  n_so=$(nm -D --defined-only "$so" | awk 'NF == 3 && $3 ~ /^dlock_/' | wc -l)
  echo "symbols: $n_a globals in $(basename "$a"), $n_so dlock_ exports in $(basename "$so"): all prefixed"
fi
exit $bad
