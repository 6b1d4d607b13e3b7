#!/usr/bin/env bash
# tests/unit/symbols.sh LIBDLOCK.a LIBDLOCK.so
#
# libdlock's namespace: every global symbol the static library defines is
# named dlock_ (public) or dlock__ (internal), and the shared library
# exports only public dlock_ names (its internal ones are hidden; the
# linker's own _init, _fini, _edata, _end and __bss_start are allowed).
# Prints what is wrong, one symbol a line, and exits 1; exits 77 (skipped,
# one line) when nm (binutils) is missing.
set -u
a=$1
so=$2
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
static_bad=$(printf '%s\n' "$out" | awk 'NF == 3 && $3 !~ /^dlock_/ {print $3}' | sort -u)
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
shared_bad=$(printf '%s\n' "$out" | awk 'NF == 3 {print $3}' |
  grep -Ev '^(_init|_fini|_edata|_end|__bss_start)$' |
  grep -Ev '^dlock_[a-z0-9]' | sort -u)
if [ -n "$shared_bad" ]; then
  echo "$so exports symbols that are not public dlock_ names:"
  printf '  %s\n' $shared_bad
  bad=1
fi
if [ $bad = 0 ]; then
  n_a=$(nm -g --defined-only "$a" | awk 'NF == 3' | wc -l)
  n_so=$(nm -D --defined-only "$so" | awk 'NF == 3 && $3 ~ /^dlock_/' | wc -l)
  echo "symbols: $n_a globals in $(basename "$a"), $n_so dlock_ exports in $(basename "$so"): all prefixed"
fi
exit $bad
