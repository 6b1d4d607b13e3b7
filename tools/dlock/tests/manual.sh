#!/usr/bin/env bash
# manual.sh - the manual page documents the command as it is: every option
# that `dlock --help` lists is an item (a .TP tag) of docs/dlock.1, every
# URL scheme the help names is in it too, and the page has the markup slip
# of old (a raw form feed, from a "\f" that lost its backslash) nowhere.
# No server.
#   bash manual.sh PATH/TO/dlock PATH/TO/dlock.1
# shellcheck source=common.bash
. "$(dirname "$0")/common.bash"
PAGE=${1:?usage: manual.sh PATH/TO/dlock PATH/TO/dlock.1}

"$DLOCK" --help >"$T/help"
expect "--help exits 0" 0 $?

# The options --help lists: "  -u, --url URL", "      --all", "  -V, --version".
grep -oE '^  (-[A-Za-z], |    )--[a-z][a-z-]*' "$T/help" |
  sed -E 's/^ +//; s/, / /' | tr ' ' '\n' | sed '/^$/d' | sort -u >"$T/opts"
n=$(wc -l <"$T/opts")
expect_true "--help lists at least 30 options (found $n)" test "$n" -ge 30

# The page's item tags: the line after each .TP, roff escapes removed
# ("\-" is a hyphen, "\fB" a font change), one word per line.
awk 'prev == ".TP" { print } { prev = $0 }' "$PAGE" |
  sed -E 's/\\-/-/g; s/\\f[BIRP]//g; s/^\.[A-Z]+ //; s/"//g' |
  tr ' ,' '\n\n' | sed '/^$/d' | sort -u >"$T/tags"

missing=$(comm -23 "$T/opts" "$T/tags" | tr '\n' ' ')
expect "every option of --help is an item of dlock.1" "" "$missing"

# Every URL scheme the help shows is described on the page.
grep -oE '[a-z-]+://' "$T/help" | sort -u >"$T/schemes"
expect_true "--help names at least 8 schemes" test "$(wc -l <"$T/schemes")" -ge 8
sed -E 's/\\-/-/g; s/\\f[BIRP]//g' "$PAGE" >"$T/page"
for s in $(cat "$T/schemes"); do
  expect_grep "dlock.1 describes $s" "$s" "$T/page"
done

# Each environment variable the help names is an item of ENVIRONMENT.
sed -n '/^\.SH ENVIRONMENT/,/^\.SH EXAMPLES/p' "$T/page" |
  awk 'prev == ".TP" { print } { prev = $0 }' |
  sed -E 's/^\.[A-Z]+ //; s/"//g' | tr ' ,' '\n\n' | sed '/^$/d' |
  sort -u >"$T/env-tags"
grep -oE 'DLOCK_[A-Z_]+|ETCD_LOCK_[A-Z]+' "$T/help" | sort -u >"$T/env"
missing=$(comm -23 "$T/env" "$T/env-tags" | tr '\n' ' ')
expect "every variable of --help is an item of ENVIRONMENT" "" "$missing"

ff=$(LC_ALL=C grep -c $'\f' "$PAGE")
expect "no form feed (a lost backslash) in dlock.1" 0 "$ff"
expect_no_grep "DESCRIPTION does not say 'on a Redis server'" \
  "on a Redis server" "$T/page"

# The page renders without a warning, where a formatter is installed (the
# build does not need one).
if command -v mandoc >/dev/null; then
  mandoc -Tlint -Wwarning "$PAGE" >"$T/lint" 2>&1
  expect "mandoc -Tlint finds nothing: $(head -c 300 "$T/lint")" 0 "$(wc -c <"$T/lint")"
fi
if command -v groff >/dev/null; then
  groff -man -Tutf8 -ww -z "$PAGE" >"$T/groff" 2>&1
  expect "groff -ww finds nothing: $(head -c 300 "$T/groff")" 0 "$(wc -c <"$T/groff")"
fi

finish
