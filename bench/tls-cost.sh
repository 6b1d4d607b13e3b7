#!/usr/bin/env bash
# tls-cost.sh BUILD_DIR [SECONDS] - the cost of TLS on uncontended pairs.
#
# Makes a throwaway CA and a server certificate for 127.0.0.1 with the
# openssl command, starts one private redis-server on two free loopback
# ports, plain and TLS (the same process, so both sides share one server),
# runs `dlock-bench tls` (plain and TLS passes alternated three times) and
# stops the server by its PID. Everything lives in a temp dir removed at
# exit. Prints dlock-bench's table and its "TLS/plain" ratio line.
set -euo pipefail
build=$(cd "${1:?usage: tls-cost.sh BUILD_DIR [SECONDS]}" && pwd)
secs=${2:-3}
bench=$build/bench/dlock-bench
[ -x "$bench" ] || { echo "no $bench" >&2; exit 2; }
dir=$(mktemp -d /tmp/dlock-tls-bench-XXXXXX)
pid=
cleanup() {
  if [ -n "$pid" ]; then
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$dir"
}
trap cleanup EXIT
cd "$dir"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
key ca.key
openssl req -x509 -new -key ca.key -days 1 -subj /CN=bench-ca -out ca.crt
key server.key
openssl req -new -key server.key -subj /CN=127.0.0.1 -out server.csr
echo 'subjectAltName=IP:127.0.0.1' >server.ext
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
  -days 1 -extfile server.ext -out server.crt 2>/dev/null
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
tport=$(free_port)
redis-server --bind 127.0.0.1 --port "$port" --tls-port "$tport" \
  --tls-cert-file server.crt --tls-key-file server.key \
  --tls-ca-cert-file ca.crt --tls-auth-clients no --save '' \
  --appendonly no --dir "$dir" --logfile "$dir/redis.log" &
pid=$!
for _ in $(seq 200); do
  redis-cli -p "$port" ping >/dev/null 2>&1 && break
  sleep 0.05
done
"$bench" tls --url "redis://127.0.0.1:$port" \
  --tls-url "rediss://127.0.0.1:$tport" --cacert "$dir/ca.crt" \
  --seconds "$secs"
