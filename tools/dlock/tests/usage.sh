#!/usr/bin/env bash
# Every usage error exits 64 with exactly one line "dlock: ..." on stderr and
# nothing on stdout, before any connection is tried (no server runs here:
# DLOCK_URL points at a port nothing listens on, so a connection attempt
# would show up as 69). --help, --version and -V exit 0.
. "$(dirname "$0")/common.bash"

export DLOCK_URL=redis://127.0.0.1:1
unset DLOCK_PASSWORD
: >"$T/empty"
printf 'pw\n' >"$T/pwfile"
long=$(printf 'n%.0s' $(seq 1025))

# usage CASE-NAME ARGS... : expects 64, one line, empty stdout.
usage() {
  local what=$1
  shift
  "$DLOCK" "$@" >"$T/out" 2>"$T/err"
  local st=$?
  checks=$((checks + 1))
  if [ $st -ne 64 ]; then
    fail "$what: exit $st, expected 64 (stderr: $(head -c 300 "$T/err"))"
  elif ! one_line "$T/err"; then
    fail "$what: stderr is not one 'dlock: ' line: $(head -c 300 "$T/err")"
  elif [ -s "$T/out" ]; then
    fail "$what: stdout not empty"
  else
    pass "$what: $(cat "$T/err")"
  fi
}

usage "no arguments"
usage "unknown long option" --bogus NAME true
usage "unknown short option" -q NAME true
usage "unknown option in a cluster" -nq NAME true
usage "long option prefix is not accepted" --stat NAME
usage "-w without a value" -w
usage "-w not a number" -w abc NAME true
usage "-w negative" -w -1 NAME true
usage "-w negative decimal" -w -0.5 NAME true
usage "-w empty" -w '' NAME true
usage "-w exponent" -w 1e3 NAME true
usage "-w hex" -w 0x10 NAME true
usage "-w inf" -w inf NAME true
usage "-w leading space" -w ' 1' NAME true
usage "-w trailing junk" --wait=5s NAME true
usage "-w too large" -w 99999999999999999999 NAME true
usage "--timeout not a number" --timeout x NAME true
usage "-E 256" -E 256 NAME true
usage "-E negative" -E -1 NAME true
usage "-E not a number" -E x NAME true
usage "-l 0" -l 0 NAME true
usage "-l negative" -l -3 NAME true
usage "--watchdog too small" --watchdog 0.002 NAME true
usage "--watchdog not a number" --watchdog= NAME true
usage "--session too small" --session 0.002 NAME true
usage "--session not a number" --session x NAME true
usage "--session missing value" --session
usage "--kill-after negative" --kill-after -1 NAME true
usage "--on-lost bad action" --on-lost stop NAME true
usage "--on-lost missing value" --on-lost
usage "flag with a value" --json=1 --status NAME
usage "-n with -w" -n -w 1 NAME true
usage "-l with --watchdog" -l 1 --watchdog 1 NAME true
usage "-l with --session" --session 1 -l 1 NAME true
usage "--json without --status" --json NAME
usage "--status with a command" --status NAME true
usage "--status with -c" --status NAME -c true
usage "--force-unlock with a command" --force-unlock NAME true
usage "--status and --force-unlock" --status --force-unlock NAME
usage "--status without NAME" --status
usage "-c without NAME" -c true
usage "-c after NAME without a command" NAME -c
usage "-c after NAME with extra args" NAME -c 'echo' extra
usage "-c and COMMAND" -c 'echo' NAME true
usage "-c twice" -c a NAME -c b
usage "empty NAME" '' true
usage "NAME too long" "$long" true
usage "-F with -s" -F -s NAME true
usage "--fair with --shared" --shared --fair NAME true
usage "-F with -s and --status" -F -s --status NAME
usage "-x with -s" -x -s NAME true
usage "NAME too long for its read-write lock" "$(printf 'n%.0s' $(seq 1016))" true
usage "-N 0" -N 0 NAME true
usage "--limit=abc" --limit=abc NAME true
usage "-N above the maximum" -N 1000001 NAME true
usage "-N with -F" -N 2 -F NAME true
usage "-N with -x" -x --limit 2 NAME true
usage "--all with one -u" --all -u redis://a NAME true
usage "two -u: a Redlock needs an odd number" -u redis://127.0.0.1:1 -u redis://127.0.0.1:2 NAME true
usage "-s with several -u" -s -u redis://a -u redis://b -u redis://c NAME true
usage "-F with -M" -F -M a b -- true
usage "-M with --status" --status -M a b
usage "-M: a name twice" -M a b a -- true
usage "--cert without --key" -u rediss://127.0.0.1:1 --cert "$T/pwfile" NAME true
usage "--key without --cert" -u rediss://127.0.0.1:1 --key "$T/pwfile" NAME true
usage "--cacert empty" -u rediss://127.0.0.1:1 --cacert '' NAME true
usage "--cacert twice" -u rediss://127.0.0.1:1 --cacert a --cacert b NAME true
usage "--cacert without TLS" -u redis://127.0.0.1:1 --cacert "$T/pwfile" NAME true
usage "--insecure without TLS" --insecure NAME true
usage "--tls takes no value" --tls=yes NAME true
usage "-u empty" -u '' NAME true
usage "--url missing value" --url
usage "--password-file missing" --password-file "$T/nope" NAME true
usage "--password-file empty" --password-file "$T/empty" NAME true
usage "--password-file and a URL password" -u redis://:pw@127.0.0.1:1 --password-file "$T/pwfile" NAME true
usage "malformed URL" -u 'not a url' NAME true
usage "unknown scheme" -u 'http://127.0.0.1:1' NAME true
usage "control bytes in an option" $'--bo\ngus' NAME
usage "control bytes in a value" -w $'1\n2' NAME

# DLOCK_URL with TLS: a connection is tried (nothing listens: 69).
DLOCK_URL=rediss://127.0.0.1:1 "$DLOCK" NAME true 2>"$T/err"
expect "rediss:// in DLOCK_URL is dialled (69)" 69 $?

"$DLOCK" --help >"$T/help" 2>&1
expect "--help exits 0" 0 $?
expect_grep "--help shows the usage" "Usage: dlock [options] NAME COMMAND" "$T/help"
expect_grep "--help mentions DLOCK_TOKEN" "DLOCK_TOKEN" "$T/help"
"$DLOCK" -h >/dev/null
expect "-h exits 0" 0 $?
"$DLOCK" -n -h >/dev/null
expect "-h after other options exits 0" 0 $?
"$DLOCK" --version >"$T/ver"
expect "--version exits 0" 0 $?
expect_true "--version prints the version" grep -qE '^dlock [0-9]+\.[0-9]+\.[0-9]+ \(libdlock [0-9.]+\)$' "$T/ver"
"$DLOCK" -V >"$T/ver-short"
expect "-V exits 0" 0 $?
expect_true "-V prints what --version prints" cmp -s "$T/ver" "$T/ver-short"
"$DLOCK" -nV >"$T/ver-short"
expect "-V in a cluster exits 0" 0 $?
for b in Redis ZooKeeper etcd; do
  expect_true "--help's first lines name $b" sh -c "sed -n '1,10p' '$T/help' | grep -q '$b'"
done

# Garbage never crashes: every run ends with a status below 128.
crash=0
for args in "-" "--" "---" "-w" "-wx" "--=" "-E" "-uu" "--url=" "-vvvvvvvvvv" \
  "-c" "-n -n -n" "--wait=." "-w ." "-w 1." "-l .0001" "-E 00000000000000000001"; do
  # shellcheck disable=SC2086
  timeout 10 "$DLOCK" $args >/dev/null 2>&1 </dev/null
  st=$?
  if [ $st -ge 124 ] && [ $st -ne 127 ]; then
    fail "args '$args': status $st"
    crash=1
  fi
done
expect "no crash on odd arguments" 0 "$crash"

finish
