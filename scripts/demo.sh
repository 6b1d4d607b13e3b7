#!/usr/bin/env bash
# demo.sh - what dlock is for, in half a minute.
#
# Installs what the build needs if it is missing (Debian/Ubuntu, apt-get:
# a compiler, cmake, pkg-config, hiredis, OpenSSL, redis-server; the demo
# builds the Redis backend only), builds the dlock command into build-demo/, starts a private redis-server on
# a free loopback port in a temporary directory, and lets 8 workers add 1 to
# a shared counter many times with a racy read-modify-write: first without a
# lock (updates get lost), then with every addition under `dlock` (none
# lost). The server it started is always stopped, whatever happens.
#
# Usage: ./scripts/demo.sh            (WORKERS=8 ROUNDS=25 by default)
set -euo pipefail

WORKERS=${WORKERS:-8}
ROUNDS=${ROUNDS:-25}
LOCK=demo-counter

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
BUILD=$ROOT/build-demo

bold() { if [ -t 1 ]; then printf '\033[1m%s\033[0m' "$*"; else printf '%s' "$*"; fi; }
step() { printf '\n%s\n' "$(bold "==> $*")"; }
die() {
  printf 'demo: %s\n' "$*" >&2
  exit 1
}
have() { command -v "$1" >/dev/null 2>&1; }
now_ms() {
  local t=${EPOCHREALTIME//[.,]/}
  echo $((t / 1000))
}
secs() { printf '%d.%01d s' $(($1 / 1000)) $(($1 % 1000 / 100)); }

case "$WORKERS$ROUNDS" in *[!0-9]*) die "WORKERS and ROUNDS must be numbers" ;; esac
[ "$WORKERS" -ge 1 ] && [ "$ROUNDS" -ge 1 ] || die "WORKERS and ROUNDS must be at least 1"

# ----------------------------------------------------------------- 1. tools
missing=()
have cmake || missing+=(cmake)
have make || missing+=(make)
have gcc || missing+=(gcc)
[ -e /usr/include/stdio.h ] || missing+=(libc6-dev)
have pkg-config || missing+=(pkg-config)
if ! have pkg-config || ! pkg-config --exists hiredis; then missing+=(libhiredis-dev); fi
if ! have pkg-config || ! pkg-config --exists openssl; then missing+=(libssl-dev); fi
have redis-server || missing+=(redis-server)
have redis-cli || missing+=(redis-tools)

if [ ${#missing[@]} -gt 0 ]; then
  step "Installing ${missing[*]}"
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    have sudo || die "need root (or sudo) to install: ${missing[*]}"
    sudo=(sudo)
  fi
  have apt-get || die "no apt-get here: please install ${missing[*]} yourself"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]+"${sudo[@]}"}" apt-get update -qq
  "${sudo[@]+"${sudo[@]}"}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
  for tool in cmake make gcc pkg-config redis-server redis-cli; do
    have "$tool" || die "$tool is still missing after apt-get install"
  done
fi

# ----------------------------------------------------------------- 2. build
step "Building dlock (cmake, into build-demo/)"
t0=$(now_ms)
log=$(mktemp "${TMPDIR:-/tmp}/dlock-demo-build-XXXXXX")
if ! { cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
  -DDLOCK_BUILD_TESTS=OFF -DDLOCK_BUILD_BENCH=OFF \
  -DDLOCK_WITH_ZOOKEEPER=OFF -DDLOCK_WITH_ETCD=OFF &&
  cmake --build "$BUILD" --target dlock_cli -j "$(nproc 2>/dev/null || echo 2)"; } \
  >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  rm -f "$log"
  die "the build failed (output above)"
fi
rm -f "$log"
DLOCK=$BUILD/tools/dlock/dlock
[ -x "$DLOCK" ] || die "the build did not produce $DLOCK"
echo "built $DLOCK in $(secs $(($(now_ms) - t0)))"

# ------------------------------------------------------------ 3. a server
step "Starting a private redis-server on 127.0.0.1"
dir=$(mktemp -d "${TMPDIR:-/tmp}/dlock-demo-XXXXXX")
server=""
workers=()
cleanup() {
  local w
  # Workers finish the addition they are in, then stop (their TERM trap);
  # only then does the server go, so nothing runs against a dead server.
  for w in "${workers[@]+"${workers[@]}"}"; do
    kill -TERM "$w" 2>/dev/null || true
  done
  for w in "${workers[@]+"${workers[@]}"}"; do
    wait "$w" 2>/dev/null || true
  done
  if [ -n "$server" ]; then
    kill -TERM "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  rm -rf -- "$dir"
}
trap cleanup EXIT
trap 'printf "\ndemo: interrupted\n" >&2; exit 130' INT
trap 'exit 143' TERM

# The server runs in its own session, so a Ctrl-C at the terminal reaches
# the workers and this script (which then stop it) but not the server
# itself; and it dies with this script even if the script is killed outright.
pdeath=()
if have setsid; then
  pdeath=(setsid)
fi
if have setpriv && setpriv --pdeathsig KILL true 2>/dev/null; then
  pdeath+=(setpriv --pdeathsig KILL)
fi
free_port() {
  local p
  p=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null) ||
    p=$((20000 + RANDOM % 12000))
  echo "$p"
}
port=""
for _ in 1 2 3 4 5 6 7 8; do
  p=$(free_port)
  : >"$dir/redis.log"
  "${pdeath[@]+"${pdeath[@]}"}" redis-server --bind 127.0.0.1 --port "$p" \
    --dir "$dir" --save '' --appendonly no --logfile "$dir/redis.log" \
    --daemonize no </dev/null >/dev/null 2>&1 &
  server=$!
  # Wait (at most 10 s) until it answers, or has exited (port taken).
  for _ in $(seq 500); do
    if [ "$(redis-cli -h 127.0.0.1 -p "$p" ping 2>/dev/null)" = PONG ]; then
      port=$p
      break
    fi
    kill -0 "$server" 2>/dev/null || break
    sleep 0.02
  done
  [ -n "$port" ] && break
  kill -TERM "$server" 2>/dev/null || true
  wait "$server" 2>/dev/null || true
  server=""
done
[ -n "$port" ] || die "could not start redis-server: $(tail -n 3 "$dir/redis.log")"
echo "redis-server (pid $server) on 127.0.0.1:$port, data in $dir"

# -------------------------------------------------------------- 4. the race
export REDIS="redis-cli -h 127.0.0.1 -p $port"
URL=redis://127.0.0.1:$port
TOTAL=$((WORKERS * ROUNDS))
# One addition: read the counter, then write back value + 1.
ADD='v=$($REDIS GET counter); $REDIS SET counter $((v + 1)) >/dev/null'

# run_workers MODE: WORKERS processes, ROUNDS additions each, all at once.
run_workers() {
  local mode=$1 w pids=()
  for w in $(seq "$WORKERS"); do
    (
      trap 'exit 143' TERM
      for _ in $(seq "$ROUNDS"); do
        if [ "$mode" = locked ]; then
          "$DLOCK" -u "$URL" "$LOCK" sh -c "$ADD"
        else
          sh -c "$ADD"
        fi
      done
    ) &
    pids+=($!)
    workers+=($!)
  done
  local ok=0
  for w in "${pids[@]}"; do
    wait "$w" || ok=1
  done
  workers=()
  return $ok
}

# round MODE: resets the counter, runs the workers, sets COUNT and TOOK.
round() {
  $REDIS SET counter 0 >/dev/null
  local t0
  t0=$(now_ms)
  run_workers "$1" || die "a worker failed in the $1 round"
  TOOK=$(($(now_ms) - t0))
  COUNT=$($REDIS GET counter)
}

step "The race"
cat <<EOF
$WORKERS workers run at the same time. Each adds 1 to the counter "counter"
in Redis, $ROUNDS times, so the counter should end at $WORKERS x $ROUNDS = $TOTAL.
One addition reads the value, then writes back value + 1:

    v=\$(redis-cli GET counter); redis-cli SET counter \$((v + 1))

When two workers read the same value, both write the same result and one
of the additions is lost.
EOF

step "1. Without a lock"
round unlocked
lost=$((TOTAL - COUNT))
printf '   counter = %-5s expected %s   ->  %s   (%s)\n' "$COUNT" "$TOTAL" \
  "$(bold "$lost of $TOTAL additions LOST")" "$(secs "$TOOK")"
plain_lost=$lost

step "2. Every addition under dlock"
echo "   each worker runs:  dlock $LOCK sh -c 'v=\$(redis-cli GET counter); redis-cli SET ...'"
round locked
lost=$((TOTAL - COUNT))
if [ "$lost" -eq 0 ]; then
  verdict="none lost"
else
  verdict="$lost LOST: this is a bug, please report it"
fi
printf '   counter = %-5s expected %s   ->  %s   (%s)\n' "$COUNT" "$TOTAL" \
  "$(bold "$verdict")" "$(secs "$TOOK")"
locked_took=$TOOK

step "What happened"
if [ "$plain_lost" -eq 0 ]; then
  echo "Without a lock no addition was lost this time (the race is real but was"
  echo "lucky); run the demo again, or with ROUNDS=100."
fi
cat <<EOF
With dlock, one worker at a time held the lock "$LOCK" while it read and
wrote the counter; the others waited (woken by Redis pub/sub when the lock
was released, no polling). $TOTAL locked runs of the command took $(secs "$locked_took").
The lock lives in Redis, so the workers could as well be on $WORKERS machines.
On yours, for example:

    export DLOCK_URL=redis://your-redis-host:6379
    build-demo/tools/dlock/dlock nightly-backup -c '/usr/local/bin/backup.sh'

More: build-demo/tools/dlock/dlock --help, and man ./docs/dlock.1
EOF
[ "$lost" -eq 0 ]
