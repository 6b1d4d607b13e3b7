# common.bash - helpers for the dlock command's black-box tests.
#
# Sourced by tools/dlock/tests/*.sh, which ctest runs as
#   with-redis.sh [--conf LINE]... -- bash TEST.sh PATH/TO/dlock [ARGS...]
# (DLOCK_URL, REDIS_PORT, REDIS_CLI exported by with-redis.sh), or directly
# for the tests that need no server. Every wait here is a bounded poll of a
# state, never a fixed sleep standing in for one.
set -u

DLOCK=${1:?usage: TEST.sh PATH/TO/dlock}
shift
T=$(mktemp -d "${TMPDIR:-/tmp}/dlock-cli-test-XXXXXX") || exit 1
failures=0
checks=0
bg_pids=()

cleanup() {
  local p
  for p in "${bg_pids[@]+"${bg_pids[@]}"}"; do
    kill -KILL "$p" 2>/dev/null
  done
  rm -rf -- "$T"
}
trap cleanup EXIT

now_ms() {
  local t=${EPOCHREALTIME//[.,]/}
  echo $((t / 1000))
}

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

pass() {
  echo "ok: $*"
}

# expect WHAT EXPECTED ACTUAL
expect() {
  checks=$((checks + 1))
  if [ "$2" = "$3" ]; then
    pass "$1"
  else
    fail "$1: expected '$2', got '$3'"
  fi
}

# expect_true WHAT CMD... : CMD must succeed.
expect_true() {
  local what=$1
  shift
  checks=$((checks + 1))
  if "$@"; then
    pass "$what"
  else
    fail "$what"
  fi
}

# expect_grep WHAT PATTERN FILE / expect_no_grep WHAT PATTERN FILE (fixed strings)
expect_grep() {
  checks=$((checks + 1))
  if grep -qF -- "$2" "$3"; then
    pass "$1"
  else
    fail "$1: '$2' not in $3: $(head -c 400 "$3")"
  fi
}
expect_no_grep() {
  checks=$((checks + 1))
  if grep -qF -- "$2" "$3"; then
    fail "$1: '$2' found in $3"
  else
    pass "$1"
  fi
}

# one_line FILE: the file is exactly one line starting with "dlock: ".
one_line() {
  [ "$(wc -l <"$1")" -eq 1 ] && head -c 7 "$1" | grep -q '^dlock: '
}

# wait_until MS CMD... : polls CMD every 20 ms until it succeeds or MS pass.
wait_until() {
  local deadline=$(($(now_ms) + $1))
  shift
  while :; do
    if "$@"; then
      return 0
    fi
    if [ "$(now_ms)" -ge "$deadline" ]; then
      return 1
    fi
    sleep 0.02
  done
}

# exited PID: the process is gone or a zombie (exited, not yet reaped).
exited() {
  local st
  st=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null)
  [ -z "$st" ] || [ "$st" = Z ]
}

# wait_exit PID MS: waits at most MS for a background child and sets ST to
# its exit status, or to "timeout" (and kills it) when it is still running.
# (Not usable in $(...): a subshell cannot wait for its parent's children.)
wait_exit() {
  if wait_until "$2" exited "$1"; then
    wait "$1"
    ST=$?
  else
    kill -KILL "$1" 2>/dev/null
    wait "$1" 2>/dev/null
    ST=timeout
  fi
}

# run_bg OUTVAR CMD...: starts CMD in the background, remembers its pid.
run_bg() {
  local var=$1
  shift
  "$@" &
  bg_pids+=($!)
  printf -v "$var" %s "$!"
}

# is_held NAME / is_free NAME, through the command itself.
is_held() {
  "$DLOCK" --status "$1" >/dev/null 2>&1
}
is_free() {
  "$DLOCK" --status "$1" >/dev/null 2>&1
  [ $? -eq 1 ]
}

# use_backend NAME: DLOCK_URL for the backend the test runs on (redis: the
# harness's as it is; zookeeper, etcd: th_with_zk's / th_with_etcd's URL).
use_backend() {
  case $1 in
  zookeeper) export DLOCK_URL=$DLOCK_ZK_URL ;;
  etcd) export DLOCK_URL=$DLOCK_ETCD_URL ;;
  esac
}

# require CMD WHAT: the test needs CMD (for WHAT); without it, says so and
# exits 1, before any check reads a missing tool's silence as an answer.
# scripts/deps.sh installs every command the tests use.
require() {
  command -v "$1" >/dev/null 2>&1 && return 0
  echo "FAIL: this test needs $1 ($2) and it is not installed:" \
    "./scripts/deps.sh installs it" >&2
  exit 1
}

# The --json checks read the output with jq. A script that uses these
# calls `require jq ...` first; they check again, for a call in $(...),
# where the exit ends only the subshell (the message still shows).
# json_valid FILE: FILE is exactly one valid JSON document.
json_valid() {
  require jq "reads --json output"
  [ "$(jq -s length "$1" 2>/dev/null)" = 1 ]
}

# json_get FILE FILTER: jq -r FILTER on FILE's JSON (e.g. '.holders |
# length', '.holders[0].owner'); "error" when jq fails.
json_get() {
  require jq "reads --json output"
  jq -r "$2" "$1" 2>/dev/null || echo error
}

# $T/waitfor FILE: a script for the commands run under dlock; waits until
# FILE exists, polling every 20 ms at most 1000 times (20 s); exit 0 when it
# appeared, 1 when it did not.
cat >"$T/waitfor" <<'SH'
i=0
while [ ! -e "$1" ] && [ $i -lt 1000 ]; do sleep 0.02; i=$((i + 1)); done
[ -e "$1" ]
SH
chmod +x "$T/waitfor"

finish() {
  if [ "$failures" -ne 0 ]; then
    echo "$failures of $checks checks failed" >&2
    exit 1
  fi
  echo "all $checks checks passed"
  exit 0
}
