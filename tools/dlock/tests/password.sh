#!/usr/bin/env bash
# A server with requirepass: the password works from the URL, DLOCK_PASSWORD
# and --password-file; it never appears in dlock's output, nor in `ps`.
. "$(dirname "$0")/common.bash"
PW=${1:?password}
cli() { redis-cli -p "$REDIS_PORT" -a "$PW" --no-auth-warning "$@"; }
base=redis://127.0.0.1:$REDIS_PORT
unset DLOCK_PASSWORD

# Password in the URL; the command looks at dlock's argv through ps and /proc.
"$DLOCK" -v -u "redis://:$PW@127.0.0.1:$REDIS_PORT" cli-pw sh -c \
  'ps -o args= -p $PPID >"$0.ps"; tr "\0" " " </proc/$PPID/cmdline >"$0.cmdline"' \
  "$T/a" >"$T/a.out" 2>"$T/a.err"
expect "URL password: exit 0" 0 $?
expect_true "ps ran" test -s "$T/a.ps"
expect_no_grep "not in ps" "$PW" "$T/a.ps"
expect_no_grep "not in /proc/PID/cmdline" "$PW" "$T/a.cmdline"
expect_grep "ps shows the URL scrubbed" "redis://:*" "$T/a.ps"
expect_no_grep "not in -v output" "$PW" "$T/a.err"
expect_no_grep "not on stdout" "$PW" "$T/a.out"

# --url=URL form is scrubbed too.
"$DLOCK" --url="redis://default:$PW@127.0.0.1:$REDIS_PORT" cli-pw sh -c \
  'tr "\0" " " </proc/$PPID/cmdline >"$0"' "$T/b"
expect "--url= with user and password: exit 0" 0 $?
expect_no_grep "--url= scrubbed in /proc/PID/cmdline" "$PW" "$T/b"

# A wrong password: 69, one line, neither password shown.
"$DLOCK" -u "redis://:wrong-$PW@127.0.0.1:$REDIS_PORT" cli-pw true 2>"$T/c.err"
expect "wrong password: 69" 69 $?
expect_true "wrong password: one line" one_line "$T/c.err"
expect_no_grep "wrong password not shown" "wrong-" "$T/c.err"
expect_grep "wrong password: URL shown with ***" ":***@127.0.0.1:$REDIS_PORT" "$T/c.err"

# No password at all: refused, 69.
"$DLOCK" -u "$base" cli-pw true 2>"$T/d.err"
expect "no password: 69" 69 $?
expect_true "no password: one line" one_line "$T/d.err"

# DLOCK_PASSWORD.
DLOCK_PASSWORD=$PW "$DLOCK" -u "$base" cli-pw true 2>"$T/e.err"
expect "DLOCK_PASSWORD: exit 0" 0 $?
DLOCK_PASSWORD=$PW "$DLOCK" -v -u "redis://default@127.0.0.1:$REDIS_PORT" cli-pw true 2>"$T/e2.err"
expect "DLOCK_PASSWORD with a user in the URL: exit 0" 0 $?
expect_no_grep "DLOCK_PASSWORD not in -v output" "$PW" "$T/e2.err"
DLOCK_PASSWORD=nope "$DLOCK" -u "$base" cli-pw true 2>"$T/e3.err"
expect "wrong DLOCK_PASSWORD: 69" 69 $?
expect_no_grep "wrong DLOCK_PASSWORD not shown" "nope" "$T/e3.err"

# The command never sees a password: DLOCK_PASSWORD and
# DLOCK_SENTINEL_PASSWORD are removed from its environment, and DLOCK_URL
# too when it carries one (DLOCK_NAME stays).
DLOCK_PASSWORD=$PW DLOCK_SENTINEL_PASSWORD=s-$PW "$DLOCK" -u "$base" cli-pw \
  env >"$T/env.out"
expect "DLOCK_PASSWORD: the command ran" 0 $?
expect_grep "the command has DLOCK_NAME" "DLOCK_NAME=cli-pw" "$T/env.out"
expect_no_grep "no DLOCK_PASSWORD in the command's environment" \
  "DLOCK_PASSWORD" "$T/env.out"
expect_no_grep "no DLOCK_SENTINEL_PASSWORD in the command's environment" \
  "DLOCK_SENTINEL_PASSWORD" "$T/env.out"
expect_no_grep "the password is nowhere in the command's environment" \
  "$PW" "$T/env.out"
DLOCK_URL="redis://:$PW@127.0.0.1:$REDIS_PORT" "$DLOCK" cli-pw env >"$T/env2.out"
expect "DLOCK_URL with a password: the command ran" 0 $?
expect_no_grep "DLOCK_URL with a password is not passed on" "$PW" "$T/env2.out"
DLOCK_PASSWORD=$PW DLOCK_URL=$base "$DLOCK" cli-pw env >"$T/env3.out"
expect_grep "DLOCK_URL without a password is passed on" "DLOCK_URL=$base" \
  "$T/env3.out"

# Secrets are masked by their position, not by their text: a wrong password
# that also occurs elsewhere in the line ("redis", "127") hides only itself.
"$DLOCK" -u "redis://:redis@127.0.0.1:$REDIS_PORT" cli-pw true 2>"$T/f.err"
expect "password 'redis': 69" 69 $?
expect_grep "password 'redis': the scheme is intact" \
  "redis://:***@127.0.0.1:$REDIS_PORT" "$T/f.err"
expect_no_grep "password 'redis': nothing else masked" "***://" "$T/f.err"

# --password-file (first line, newline stripped).
printf '%s\nsecond line\n' "$PW" >"$T/pwfile"
"$DLOCK" -u "$base" --password-file "$T/pwfile" cli-pw true
expect "--password-file: exit 0" 0 $?
printf '%s\r\n' "$PW" >"$T/pwfile-crlf"
"$DLOCK" -u "$base" --password-file "$T/pwfile-crlf" cli-pw true
expect "--password-file with CRLF: exit 0" 0 $?

# The locks really work with auth: --status through DLOCK_PASSWORD.
run_bg p "$DLOCK" -u "redis://:$PW@127.0.0.1:$REDIS_PORT" cli-pw2
ok_held() { DLOCK_PASSWORD=$PW "$DLOCK" -u "$base" --status cli-pw2 >/dev/null 2>&1; }
expect_true "held, seen with DLOCK_PASSWORD" wait_until 10000 ok_held
expect "server agrees" 1 "$(cli EXISTS cli-pw2)"
DLOCK_PASSWORD=$PW "$DLOCK" -u "$base" --status --json cli-pw2 >"$T/st.json" 2>&1
expect_no_grep "status output has no password" "$PW" "$T/st.json"
kill -TERM "$p"
wait_exit "$p" 10000
expect "holder exits 0" 0 "$ST"
expect "released" 0 "$(cli EXISTS cli-pw2)"

finish
