#!/usr/bin/env bash
# ab.sh - two builds of dlock-bench against each other, in one run, on one
# private redis-server.
#
# Usage:
#   bench/ab.sh [--rounds N] [--seconds D] [options] A_DLOCK_BENCH B_DLOCK_BENCH
#
# Options (defaults in brackets):
#   --rounds N        rounds [3]
#   --seconds D       length of each timed run, seconds [2]
#   --workers W       processes in the contended cases [8]
#   --threads T       threads in the threads case [8]
#   --hold-us H       hold of the "held" contended cases, microseconds [1000]
#   --renew-locks K   watchdog locks held in the renewal case [1000]
#   --mem-locks K     locks held in the memory case [10000]
#   --cases LIST      comma-separated subset of
#                     uncontended,contended-h0,contended-h,threads,
#                     threads-distinct,renewal,
#                     memory,fair,fenced,write [all]
#   --keep DIR        keep every run's CSV and output in DIR (else removed)
#
# Design note
# -----------
# Comparing two builds from two separate runs mostly measures what else the
# machine was doing in between. So both builds run here in one process tree,
# against one redis-server, interleaved at the finest grain that still keeps
# each run whole: for round r = 1..N, for each case, A runs, then B runs. The
# A and B figures of a case in one round are taken seconds apart, and the
# ratio B/A is formed per round; the table gives A's and B's medians over
# the rounds and the median, min and max of the per-round ratios. The spread
# of the ratios is the honest error bar on a shared machine.
#
# Every number is a value dlock-bench wrote itself: each run gets a fresh
# `--csv FILE` (rows `scenario,case,metric,value`, written by csv_row() in
# bench/dlock-bench.c) and the script only selects rows by scenario, case
# and metric. A run that exits non-zero (overlapping holds, a failed worker,
# an unknown option in an older build, a timeout) contributes no figure; the
# table then says "n/a" where no round has one, and every failed run is
# listed under the table with its exit status and the last line it wrote
# to stderr.
#
# The cases (one dlock-bench invocation each, per build and round):
#   uncontended   `uncontended`: acquire+release pairs/s (acq_per_s)
#   contended-h0  `contended --workers W --hold-us 0`: acquisitions/s
#   contended-h   `contended --workers W --hold-us H`: acquisitions/s, worst
#                 wait (ms) and Jain's index over the workers
#   threads       `threads --threads T`: acquisitions/s of T threads on one
#                 lock (dlock-bench also runs T threads on T locks
#                 afterwards; that half is threads-distinct)
#   threads-distinct
#                 the same run's T threads on T locks: acquisitions/s
#   renewal       `renewal --locks K --cycles C` with C = 5 per second of D
#                 (the default 600 ms watchdog renews every 200 ms): scripts,
#                 server calls, server read events and client CPU per renewal
#                 cycle. dlock-bench does not count round trips; read events
#                 are the closest figure it gives (one pipelined renewal may
#                 arrive in several reads)
#   memory        `memory --locks K`: client heap bytes per held lock
#                 (mallinfo2), and the server's used_memory bytes per lock
#   fair, fenced, write
#                 `contended --workers W --hold-us H --kind KIND`: as
#                 contended-h
# Lower is better for worst wait, bytes, scripts, calls, reads and CPU;
# higher for the rest. The table says which.
#
# Server: the script re-runs itself under tests/harness/with-redis.sh, which
# starts redis-server on a free 127.0.0.1 port in a temporary directory and
# stops that server (by its PID) whatever happens; DLOCK_URL from the caller
# is ignored. The keyspace is flushed (FLUSHALL, on that private server
# only) before every run, so each run starts from an empty server; lock
# names are unique per run anyway.
#
# Bounds: N rounds x the cases x 2 builds runs, each under
# `timeout -k 5 LIMIT` with LIMIT = 4 D + 60 s (dlock-bench's own bound on
# its forked workers is D + 30 s). SIGINT/SIGTERM stop the current run
# (by its PID) and the script.
set -u

me=$(readlink -f "$0")
here=$(dirname "$me")
root=$(dirname "$here")

usage() {
  sed -n '5,19s/^# \{0,1\}//p' "$me" >&2
  exit 2
}

rounds=3 seconds=2 workers=8 threads=8 hold=1000 renew_locks=1000
mem_locks=10000 keep=""
all_cases=uncontended,contended-h0,contended-h,threads,threads-distinct,renewal,memory,fair,fenced,write
cases=$all_cases
inner=0
if [ "${1:-}" = --under-server ]; then # internal: set by the outer run
  inner=1
  shift
fi
args=("$@")
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds | --seconds | --workers | --threads | --hold-us | --renew-locks | \
      --mem-locks | --cases | --keep)
      [ $# -ge 2 ] || usage
      case "$1" in
        --rounds) rounds=$2 ;;
        --seconds) seconds=$2 ;;
        --workers) workers=$2 ;;
        --threads) threads=$2 ;;
        --hold-us) hold=$2 ;;
        --renew-locks) renew_locks=$2 ;;
        --mem-locks) mem_locks=$2 ;;
        --cases) cases=$2 ;;
        --keep) keep=$2 ;;
      esac
      shift 2
      ;;
    -h | --help) usage ;;
    --) shift; break ;;
    -*) echo "ab.sh: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
[ $# -eq 2 ] || usage
A=$1 B=$2

isint() { case "$1" in '' | *[!0-9]*) return 1 ;; esac; [ "$1" -gt 0 ]; }
for v in "$rounds" "$workers" "$threads" "$renew_locks" "$mem_locks"; do
  isint "$v" || { echo "ab.sh: not a positive integer: $v" >&2; exit 2; }
done
case "$hold" in '' | *[!0-9]*) echo "ab.sh: bad --hold-us $hold" >&2; exit 2 ;; esac
awk -v s="$seconds" 'BEGIN { exit !(s ~ /^[0-9]*\.?[0-9]+$/ && s + 0 > 0 && s + 0 <= 600) }' ||
  { echo "ab.sh: --seconds must be in (0, 600]" >&2; exit 2; }
[ "$rounds" -le 100 ] || { echo "ab.sh: at most 100 rounds" >&2; exit 2; }
IFS=, read -r -a case_list <<<"$cases"
for c in "${case_list[@]}"; do
  case ",$all_cases," in *",$c,"*) ;; *) echo "ab.sh: unknown case $c" >&2; exit 2 ;; esac
done
for b in "$A" "$B"; do
  [ -x "$b" ] && [ -f "$b" ] || { echo "ab.sh: not an executable: $b" >&2; exit 2; }
done

if [ $inner -eq 0 ]; then
  exec "$root/tests/harness/with-redis.sh" -- "$me" --under-server "${args[@]}"
fi

# ------------------------------------------------------ under the server
case "${DLOCK_URL:-}" in
  redis://127.0.0.1:*) ;;
  *) echo "ab.sh: no private server (DLOCK_URL=${DLOCK_URL:-})" >&2; exit 2 ;;
esac
A=$(readlink -f "$A") B=$(readlink -f "$B")
if [ -n "$keep" ]; then
  mkdir -p "$keep" || exit 1
  tmp=$(readlink -f "$keep")
else
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/dlock-ab-XXXXXX") || exit 1
  trap 'rm -rf -- "$tmp"' EXIT
fi
results=$tmp/results.tsv # case metric round side value
failures=$tmp/failures.tsv # case round side reason
: >"$results"
: >"$failures"

limit=$(awk -v s="$seconds" 'BEGIN { printf "%d", 4 * s + 60 }')
cycles=$(awk -v s="$seconds" 'BEGIN { c = int(s * 5 + 0.5); print c < 1 ? 1 : c }')

run_pid=""
on_signal() {
  [ -n "$run_pid" ] && kill -TERM "$run_pid" 2>/dev/null
  echo "ab.sh: interrupted" >&2
  exit 130
}
trap on_signal INT TERM HUP

# case -> "dlock-bench arguments|scenario|case regex|metric[,metric...]"
spec() {
  local kind_metrics="acq_per_s,worst_wait_ms,jain"
  case "$1" in
    uncontended) echo "uncontended --seconds $seconds|uncontended|.|acq_per_s" ;;
    contended-h0) echo "contended --workers $workers --hold-us 0 --seconds $seconds|contended|^W=$workers H=0us\$|acq_per_s" ;;
    contended-h) echo "contended --workers $workers --hold-us $hold --seconds $seconds|contended|^W=$workers H=${hold}us\$|$kind_metrics" ;;
    threads) echo "threads --threads $threads --seconds $seconds|threads|^T=$threads one lock\$|acq_per_s" ;;
    threads-distinct) echo "threads --threads $threads --seconds $seconds|threads|^T=$threads locks\$|acq_per_s" ;;
    renewal) echo "renewal --locks $renew_locks --cycles $cycles|renewal|^K=$renew_locks\$|scripts_per_cycle,server_calls_per_cycle,reads_per_cycle,client_cpu_us_per_cycle" ;;
    memory) echo "memory --locks $mem_locks|memory|^K=$mem_locks\$|client_heap_bytes_per_lock,server_bytes_per_lock" ;;
    fair | fenced | write) echo "contended --workers $workers --hold-us $hold --kind $1 --seconds $seconds|contended|^W=$workers H=${hold}us $1\$|$kind_metrics" ;;
  esac
}

flush() {
  if command -v redis-cli >/dev/null 2>&1; then
    redis-cli -h 127.0.0.1 -p "$REDIS_PORT" flushall >/dev/null 2>&1
  fi
}

# one run: side (A|B), binary, case, round
run_one() {
  local side=$1 bin=$2 kase=$3 r=$4 s argv scen re metrics base rc reason
  s=$(spec "$kase")
  IFS='|' read -r argv scen re metrics <<<"$s"
  base=$tmp/$kase.r$r.$side
  rm -f "$base.csv"
  flush
  # shellcheck disable=SC2086 # argv is a word list built above
  timeout -k 5 "$limit" "$bin" $argv --url "$DLOCK_URL" \
    --name "ab:$kase:r$r:$side" --csv "$base.csv" >"$base.out" 2>"$base.err" &
  run_pid=$!
  wait "$run_pid"
  rc=$?
  run_pid=""
  if [ $rc -ne 0 ]; then
    case $rc in
      124 | 137) reason="timed out after ${limit} s" ;;
      *) reason="exit $rc" ;;
    esac
    local last
    last=$(grep -v '^[[:space:]]*$' "$base.err" | tail -n 1 | tr '\t' ' ' | cut -c1-160)
    [ -n "$last" ] && reason="$reason: $last"
    printf '%s\t%s\t%s\t%s\n' "$kase" "$r" "$side" "$reason" >>"$failures"
    printf '  %-13s %s: %s\n' "$kase" "$side" "$reason" >&2
    return
  fi
  local m got
  IFS=, read -r -a mlist <<<"$metrics"
  for m in "${mlist[@]}"; do
    got=$(awk -F, -v sc="$scen" -v re="$re" -v m="$m" \
      '$1 == sc && $2 ~ re && $3 == m { v = $4; n++ } END { if (n == 1) print v }' \
      "$base.csv" 2>/dev/null)
    if [ -n "$got" ]; then
      printf '%s\t%s\t%s\t%s\t%s\n' "$kase" "$m" "$r" "$side" "$got" >>"$results"
    else
      printf '%s\t%s\t%s\t%s\n' "$kase" "$r" "$side" \
        "exit 0 but no single $scen/$m row in its CSV" >>"$failures"
    fi
  done
}

load() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null; }
load_start=$(load)
t_start=$(date +%s)
echo "ab.sh: $rounds rounds x ${#case_list[@]} cases x 2 builds, D=${seconds}s, server $DLOCK_URL" >&2
for r in $(seq 1 "$rounds"); do
  for kase in "${case_list[@]}"; do
    echo "ab.sh: round $r/$rounds $kase" >&2
    run_one A "$A" "$kase" "$r"
    run_one B "$B" "$kase" "$r"
  done
done
t_end=$(date +%s)

srv=$(redis-server --version 2>/dev/null | sed -n 's/.*v=\([^ ]*\).*/\1/p')
python3 - "$results" "$failures" "$cases" "$rounds" "$workers" "$threads" \
  "$hold" "$renew_locks" "$cycles" "$mem_locks" <<'PY'
import statistics, sys
results, failures = sys.argv[1], sys.argv[2]
cases = sys.argv[3].split(",")
rounds = int(sys.argv[4])
W, T, H, RK, CY, MK = sys.argv[5:11]
label = {
    "uncontended": "uncontended, 1 thread",
    "contended-h0": f"contended W={W} H=0",
    "contended-h": f"contended W={W} H={H}us",
    "threads": f"threads T={T}, one lock",
    "threads-distinct": f"threads T={T}, {T} locks",
    "renewal": f"renewal K={RK}, {CY} cycles",
    "memory": f"memory K={MK} held",
    "fair": f"fair W={W} H={H}us",
    "fenced": f"fenced W={W} H={H}us",
    "write": f"write W={W} H={H}us",
}
metric = {  # name, higher is better
    "acq_per_s": ("acquisitions/s", True),
    "worst_wait_ms": ("worst wait ms", False),
    "jain": ("Jain's index", True),
    "scripts_per_cycle": ("scripts/cycle", False),
    "server_calls_per_cycle": ("server calls/cycle", False),
    "reads_per_cycle": ("server read events/cycle", False),
    "client_cpu_us_per_cycle": ("client CPU us/cycle", False),
    "client_heap_bytes_per_lock": ("client heap bytes/lock", False),
    "server_bytes_per_lock": ("server bytes/lock", False),
}
order = {
    "uncontended": ["acq_per_s"],
    "contended-h0": ["acq_per_s"],
    "contended-h": ["acq_per_s", "worst_wait_ms", "jain"],
    "threads": ["acq_per_s"],
    "threads-distinct": ["acq_per_s"],
    "renewal": ["scripts_per_cycle", "server_calls_per_cycle",
                "reads_per_cycle", "client_cpu_us_per_cycle"],
    "memory": ["client_heap_bytes_per_lock", "server_bytes_per_lock"],
}
for k in ("fair", "fenced", "write"):
    order[k] = order["contended-h"]
val = {}
for line in open(results):
    c, m, r, side, v = line.rstrip("\n").split("\t")
    val[(c, m, int(r), side)] = float(v)
fails = [l.rstrip("\n").split("\t", 3) for l in open(failures) if l.strip()]

def fmt(x):
    if x is None:
        return "n/a"
    a = abs(x)
    return f"{x:.0f}" if a >= 1000 else f"{x:.1f}" if a >= 10 else f"{x:.3f}"

print("| case | metric | better | A median | B median | B/A median | B/A min | B/A max | rounds |")
print("|---|---|---|---:|---:|---:|---:|---:|---|")
for c in cases:
    for m in order[c]:
        a = [val.get((c, m, r, "A")) for r in range(1, rounds + 1)]
        b = [val.get((c, m, r, "B")) for r in range(1, rounds + 1)]
        ratios = [y / x for x, y in zip(a, b)
                  if x is not None and y is not None and x != 0]
        av = [x for x in a if x is not None]
        bv = [y for y in b if y is not None]
        med = lambda v: statistics.median(v) if v else None
        note = f"{len(ratios)}/{rounds}"
        missing = []
        for side, v in (("A", av), ("B", bv)):
            if not v:
                why = sorted({f[3] for f in fails if f[0] == c and f[2] == side})
                missing.append(f"{side} n/a: " + ("; ".join(why) or "no value"))
        if missing:
            note += " (" + "; ".join(missing) + ")"
        name, hi = metric[m]
        print(f"| {label[c]} | {name} | {'higher' if hi else 'lower'} "
              f"| {fmt(med(av))} | {fmt(med(bv))} "
              f"| {'n/a' if not ratios else f'{statistics.median(ratios):.3f}'} "
              f"| {'n/a' if not ratios else f'{min(ratios):.3f}'} "
              f"| {'n/a' if not ratios else f'{max(ratios):.3f}'} | {note} |")
if fails:
    print()
    print("Failed runs (no figures taken from them):")
    for c, r, side, why in fails:
        print(f"- {c}, round {r}, {side}: {why}")
PY
echo
echo "A = $A"
echo "B = $B"
echo "$rounds rounds, D = ${seconds} s, alternating A B per case; redis-server ${srv:-?} on 127.0.0.1; $(nproc) CPUs; load average ${load_start} at start, $(load) at end; $((t_end - t_start)) s"
[ -n "$keep" ] && echo "raw CSV and output of every run: $tmp"
# non-zero when a run failed (the table is printed all the same)
[ -s "$failures" ] && exit 1
exit 0
