#!/usr/bin/env bash
# Installs what dlock needs to build and test on Debian 12, if anything is
# missing. Needs root (or sudo) only when something must be installed.
set -euo pipefail
# build and run; clang + libclang-rt-14-dev: libFuzzer (tests/fuzz);
# valgrind: memcheck over the integration tests; iproute2 + iptables: the
# fault suite's network partitions (tests/fault, in a private namespace);
# openssl: test_tls and bench/tls-cost.sh make their certificates with it;
# zookeeper + libzookeeper-mt-dev: the ZooKeeper backend and its tests;
# libcurl4-openssl-dev + libjson-c-dev: the etcd backend (its gRPC gateway);
# etcd-server + etcd-client: its tests and interop (etcdctl lock);
# libpq-dev: the PostgreSQL backend; postgresql: its tests run a private
# server (initdb and postgres from /usr/lib/postgresql/15/bin) and psql;
# libmariadb-dev: the MySQL/MariaDB backend; mariadb-server + mariadb-client:
# its tests run a private mariadbd (mariadb-install-db) and the mariadb
# client (in a root without an init system the package starts no server);
# libuv1-dev + libevent-dev: the async examples and their adapters
# (include/dlock/adapters; examples/async_waiters.c, async_libevent.c);
# jq: the command's tests read its --json output with it (the JSON tool
# Debian ships for shell scripts); procps: cli_password looks at the
# command's arguments through ps; python3-minimal: with-redis.sh asks the
# kernel for a free port through it. Everything else the tests run is in
# every Debian (coreutils, util-linux, sed, grep, mawk).
pkgs=(build-essential cmake pkg-config libhiredis-dev libssl-dev
      redis-server redis-tools clang libclang-rt-14-dev valgrind
      iproute2 iptables openssl zookeeper libzookeeper-mt-dev
      libcurl4-openssl-dev libjson-c-dev etcd-server etcd-client
      libpq-dev postgresql libmariadb-dev mariadb-server mariadb-client
      libuv1-dev libevent-dev jq procps python3-minimal)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
