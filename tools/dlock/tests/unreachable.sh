#!/usr/bin/env bash
# A backend nothing listens on: exit 69 with one line naming the address,
# the command never runs, a password in the URL is never shown.
. "$(dirname "$0")/common.bash"

# A loopback port with no listener (checked just before use).
port=""
for _ in $(seq 200); do
  p=$((20000 + RANDOM % 30000))
  if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
    port=$p
    break
  fi
done
[ -n "$port" ] || { echo "no free port found" >&2; exit 1; }
url=redis://127.0.0.1:$port

"$DLOCK" -u "$url" cli-un touch "$T/ran" 2>"$T/a.err"
expect "unreachable -u exits 69" 69 $?
expect_true "one line" one_line "$T/a.err"
expect_grep "names the address" "127.0.0.1:$port" "$T/a.err"
expect_grep "says what to do" "redis-server running" "$T/a.err"
expect_true "the command did not run" test ! -e "$T/ran"

DLOCK_URL=$url "$DLOCK" cli-un true 2>"$T/b.err"
expect "unreachable DLOCK_URL exits 69" 69 $?
expect_grep "DLOCK_URL is used" "127.0.0.1:$port" "$T/b.err"

"$DLOCK" -u "$url" --status cli-un 2>"$T/c.err"
expect "--status unreachable exits 69" 69 $?
"$DLOCK" -u "$url" --force-unlock cli-un 2>"$T/d.err"
expect "--force-unlock unreachable exits 69" 69 $?
"$DLOCK" -u "$url" -n cli-un true 2>/dev/null
expect "-n unreachable exits 69 (not the conflict status)" 69 $?
"$DLOCK" -u "$url" cli-un 2>/dev/null
expect "hold mode unreachable exits 69" 69 $?

secret=Sekrit-Zq81
"$DLOCK" -v -u "redis://user1:$secret@127.0.0.1:$port/0" cli-un true >"$T/e.out" 2>"$T/e.err"
expect "with a password: 69" 69 $?
expect_no_grep "password not on stderr" "$secret" "$T/e.err"
expect_no_grep "password not on stdout" "$secret" "$T/e.out"
expect_grep "password shown as ***" "user1:***@127.0.0.1:$port" "$T/e.err"

# Masked by position, not by text: the password "127" hides only itself,
# not the address that contains the same digits.
"$DLOCK" -u "redis://:127@127.0.0.1:$port" cli-un true 2>"$T/g.err"
expect "password '127': 69" 69 $?
expect_grep "password '127': address intact" "redis://:***@127.0.0.1:$port" \
  "$T/g.err"

finish
