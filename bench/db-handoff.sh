#!/usr/bin/env bash
# db-handoff.sh - contended hand-off on PostgreSQL and MySQL/MariaDB: dlock
# against the same SQL sent from Python (psycopg 3, PyMySQL), in one run.
#
#   bench/db-handoff.sh [BUILD_DIR] [-- db-handoff-bench options]
#
# Builds tests/db-handoff-bench in BUILD_DIR (default: build; configured as
# a Release build when it does not exist yet), makes a venv
# BUILD_DIR/bench-db-venv with bench/peers/requirements-db.txt's exact pins
# (pip from PyPI; once, a stamp file remembers the requirements), and runs
# the bench with the Python peer bench/peers/python_db_worker.py. The bench
# starts a private PostgreSQL and a private MariaDB server on loopback ports
# (the test harness) and stops them by PID. Options after `--` go to the
# bench (--db postgres,mysql --workers 4 --seconds 3 --reps 3 by default);
# the whole run is bounded by `timeout` (30 minutes).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=build
if [[ $# -gt 0 && $1 != -- ]]; then
  build=$1
  shift
fi
if [[ $# -gt 0 && $1 == -- ]]; then
  shift
fi
case $build in
/*) ;;
*) build=$root/$build ;;
esac

if [[ ! -f $build/CMakeCache.txt ]]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build" -j2 --target db-handoff-bench >/dev/null
bench=$build/tests/db-handoff-bench
if [[ ! -x $bench ]]; then
  echo "db-handoff.sh: $bench was not built (no PostgreSQL or MySQL backend" \
    "in this build: ./scripts/deps.sh)" >&2
  exit 1
fi

venv=$build/bench-db-venv
req=$here/peers/requirements-db.txt
stamp=$venv/.installed
if [[ ! -x $venv/bin/python ]] || ! cmp -s "$req" "$stamp"; then
  python3 -m venv "$venv" || {
    echo "db-handoff.sh: python3 -m venv failed (apt-get install" \
      "python3-venv)" >&2
    exit 1
  }
  "$venv/bin/python" -m pip install -q -r "$req"
  cp "$req" "$stamp"
fi

exec timeout 1800 "$bench" --python "$venv/bin/python" \
  --peer "$here/peers/python_db_worker.py" "$@"
