"""zk_compare.py - dlock on ZooKeeper, Curator's InterProcessMutex on the same
ensemble, and dlock on Redis, in one run, with the loop and records of
bench/compare (bench/README.md "The loop and the records").

Run by bench/zk-compare.sh inside tests/harness th_with_zk --members 3 and
with-redis.sh, which export DLOCK_ZK_URL (the ensemble) and DLOCK_URL (the
redis-server); it is not meant to be run by hand.

    zk_compare.py --dlock-bench PATH --curator-cp CP --out DIR
                  [--reps N] [--seconds D] [--workers W]
                  [--cases uncontended,contended-h0,contended-h1000]
                  [--warmup S]

Before the first case, dlock-bench runs S seconds (default 5; 0: none) of
the uncontended loop on the ensemble and on the redis-server, unrecorded:
the servers' own warm-up (ZooKeeper's JIT) would otherwise fall on the
first peer's first run.

Cases: uncontended (1 process, H = 0), contended-h0 and contended-h1000
(W processes, H = 0 and 1000 us). Per repetition every case runs once per
peer, the peers alternating, so they share the machine's load. Each worker
is a process with its own client; every run is bounded (lead + D + 30 s,
then the workers are killed by PID). Figures are medians over the
repetitions; the ratio column is dlock-on-ZooKeeper / Curator of the
medians. Writes report.md and runs.csv to DIR, raw records to DIR/raw.
Exit status 1 if any hold overlapped or any worker failed.
"""
import argparse
import csv
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import analysis  # noqa: E402

CASES = [
    {"id": "uncontended", "procs": 1, "hold": 0},
    {"id": "contended-h0", "procs": None, "hold": 0},
    {"id": "contended-h1000", "procs": None, "hold": 1000},
]
PEERS = ["dlock-zk", "curator", "dlock-redis"]
LIVE = {}


def log(msg):
    sys.stderr.write("[zk-compare %s] %s\n" % (time.strftime("%H:%M:%S"),
                                              msg))
    sys.stderr.flush()


def lead_for(peer, procs):
    if peer == "curator":  # a JVM per process, warmed up before the start
        return 3.0 + 0.8 * procs
    return 0.5 + 0.1 * procs


def warm_up(args):
    """S seconds of the uncontended loop on each server, not measured."""
    for url in (os.environ["DLOCK_ZK_URL"], os.environ["DLOCK_URL"]):
        name = "/bench/zkcmp/warmup" if url.startswith("zookeeper") \
            else "bench:zkcmp:warmup"
        cmd = [args.dlock_bench, "--url", url, "--name", name, "--hold-us",
               "0", "--seconds", repr(args.warmup), "--records",
               os.path.join(args.raw, "warmup.csv")]
        log("warm-up: %s, %g s" % (url.split("://")[0], args.warmup))
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL)
        LIVE[p.pid] = p
        try:
            p.wait(args.warmup + 30)
        except subprocess.TimeoutExpired:
            log("warm-up pid %d overran; killing it" % p.pid)
            p.kill()
            p.wait(5)
        LIVE.pop(p.pid, None)


def run_case(args, peer, case, rep, leads):
    procs = case["procs"] or args.workers
    tag = "%s.%s.r%d" % (peer, case["id"], rep)
    if peer == "dlock-redis":
        url = os.environ["DLOCK_URL"]
        name = "bench:zkcmp:%s:%s:r%d" % (peer, case["id"], rep)
    else:
        url = os.environ["DLOCK_ZK_URL"]
        name = "/bench/zkcmp/%s/%s/r%d" % (peer, case["id"], rep)
    if peer == "curator":
        base = ["java", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-cp", args.curator_cp, "dlockbench.CuratorWorker"]
    else:
        base = [args.dlock_bench]
    key = (peer, procs)
    lead = leads.setdefault(key, lead_for(peer, procs))
    start = time.monotonic_ns() + int(lead * 1e9)
    end = start + int(args.seconds * 1e9)
    files, logs, ps = [], [], []
    for i in range(procs):
        rec = os.path.join(args.raw, "%s.w%d.csv" % (tag, i))
        lg = os.path.join(args.raw, "%s.w%d.log" % (tag, i))
        if os.path.exists(rec):
            os.unlink(rec)
        cmd = base + ["--url", url, "--name", name, "--hold-us",
                      str(case["hold"]), "--seconds", repr(args.seconds),
                      "--start-ns", str(start), "--worker", str(i),
                      "--records", rec]
        with open(lg, "w") as lf:
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=lf,
                                 stderr=subprocess.STDOUT)
        LIVE[p.pid] = p
        files.append(rec)
        logs.append(lg)
        ps.append(p)
    deadline = time.monotonic() + lead + args.seconds + 30
    failed = 0
    for p in ps:
        try:
            code = p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log("%s: worker pid %d overran; killing it" % (tag, p.pid))
            p.kill()
            p.wait(5)
            code = -9
        LIVE.pop(p.pid, None)
        if code != 0:
            failed += 1
    late_ms, errors = 0.0, []
    for lg in logs:
        with open(lg) as f:
            for line in f:
                m = re.search(r"start instant ([0-9.]+) ms late", line)
                if m:
                    late_ms = max(late_ms, float(m.group(1)))
                elif line.strip():
                    errors.append(line.strip())
    if late_ms > 0:  # the next repetition gets a longer lead
        leads[key] = min(15.0, lead * 1.5 + late_ms / 1e3)
    records = []
    for f in files:
        if os.path.exists(f):
            records += analysis.read_records(f)
    m = analysis.analyse(records, procs, start, end)
    m["late_ms"] = late_ms
    if not records and not failed:  # a run that measured nothing failed
        failed = procs
    m["failed_workers"] = failed
    m["errors"] = errors[:3]
    log("%s: %d acq, %.0f acq/s, xgap p50 %s us, worst wait %.1f ms, "
        "overlaps %d, failed %d, late %.1f ms" % (
            tag, m["acquisitions"], m["acq_per_s"], fmt(m["xgap_p50_us"]),
            m["worst_wait_ms"] or 0, m["overlaps"], failed, late_ms))
    for e in m["errors"]:
        log("  %s: %s" % (tag, e))
    return m


def fmt(v, nd=1):
    if v is None:
        return "n/a"
    if abs(v) >= 100:
        return "%.0f" % v
    return "%.*f" % (nd, v)


# (case, metric, label, better) rows of the report
ROWS = [
    ("uncontended", "acq_per_s", "uncontended: acquire+release pairs/s",
     "higher"),
    ("uncontended", "gap_p50_us",
     "uncontended: release + next acquire, p50 (us)", "lower"),
    ("uncontended", "gap_p99_us",
     "uncontended: release + next acquire, p99 (us)", "lower"),
    ("contended-h0", "acq_per_s", "W procs, H=0: acquisitions/s", "higher"),
    ("contended-h0", "xhandoffs_per_s",
     "W procs, H=0: hand-offs between workers/s", "higher"),
    ("contended-h0", "xgap_p50_us", "W procs, H=0: cross hand-off p50 (us)",
     "lower"),
    ("contended-h0", "xgap_p99_us", "W procs, H=0: cross hand-off p99 (us)",
     "lower"),
    ("contended-h0", "worst_wait_ms", "W procs, H=0: worst wait (ms)",
     "lower"),
    ("contended-h0", "jain", "W procs, H=0: Jain's index", "higher"),
    ("contended-h1000", "acq_per_s", "W procs, H=1 ms: acquisitions/s",
     "higher"),
    ("contended-h1000", "xgap_p50_us",
     "W procs, H=1 ms: cross hand-off p50 (us)", "lower"),
    ("contended-h1000", "xgap_p99_us",
     "W procs, H=1 ms: cross hand-off p99 (us)", "lower"),
    ("contended-h1000", "worst_wait_ms", "W procs, H=1 ms: worst wait (ms)",
     "lower"),
    ("contended-h1000", "jain", "W procs, H=1 ms: Jain's index", "higher"),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlock-bench", required=True)
    ap.add_argument("--curator-cp", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--cases", default=",".join(c["id"] for c in CASES))
    ap.add_argument("--warmup", type=float, default=5.0)
    args = ap.parse_args()
    ids = [c["id"] for c in CASES]
    args.cases = args.cases.split(",")
    if not args.cases or any(c not in ids for c in args.cases):
        ap.error("--cases: a comma-separated subset of " + ",".join(ids))
    if not (1 <= args.reps <= 20 and 0 < args.seconds <= 60
            and 1 <= args.workers <= 64 and 0 <= args.warmup <= 60):
        ap.error("--reps 1..20, --seconds (0, 60], --workers 1..64, "
                 "--warmup [0, 60]")
    args.raw = os.path.join(args.out, "raw")
    os.makedirs(args.raw, exist_ok=True)
    leads, results = {}, {}
    try:
        if args.warmup > 0:
            warm_up(args)
        for rep in range(1, args.reps + 1):
            for case in CASES:
                if case["id"] not in args.cases:
                    continue
                for peer in PEERS:
                    m = run_case(args, peer, case, rep, leads)
                    results.setdefault((peer, case["id"]), []).append(m)
    finally:
        for pid, p in list(LIVE.items()):
            if p.poll() is None:
                log("killing worker pid %d" % pid)
                p.kill()
                p.wait(5)
    bad = write_outputs(args, results)
    return 1 if bad else 0


def write_outputs(args, results):
    keys = ["acquisitions", "acq_per_s", "gap_p50_us", "gap_p99_us",
            "xhandoffs_per_s", "xgap_p50_us", "xgap_p99_us", "xgap_max_us",
            "worst_wait_ms", "jain", "overlaps", "failed_workers", "late_ms"]
    bad = 0
    with open(os.path.join(args.out, "runs.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["peer", "case", "rep"] + keys)
        for (peer, case), ms in sorted(results.items()):
            for i, m in enumerate(ms, 1):
                w.writerow([peer, case, i] + [m.get(k) for k in keys])
                bad += m["overlaps"] + m["failed_workers"]

    def med(peer, case, metric):  # over the runs whose workers all worked
        return analysis.median([m.get(metric)
                                for m in results.get((peer, case), [])
                                if not m["failed_workers"]])

    lines = ["| figure (W = %d, D = %g s, median of %d) | dlock on ZooKeeper "
             "| Curator InterProcessMutex | dlock on Redis | dlock-ZK / "
             "Curator |" % (args.workers, args.seconds, args.reps),
             "|---|---:|---:|---:|---:|"]
    for case, metric, label, better in ROWS:
        if case not in args.cases:
            continue
        z, c, r = (med(p, case, metric) for p in PEERS)
        ratio = "n/a"
        if z is not None and c:
            ratio = "%.2f (%s is better)" % (z / c, better)
        nd = 3 if metric == "jain" else 1
        lines.append("| %s | %s | %s | %s | %s |" % (
            label, fmt(z, nd), fmt(c, nd), fmt(r, nd), ratio))
    ov = {p: sum(m["overlaps"] for (q, _), ms in results.items() if q == p
                 for m in ms) for p in PEERS}
    fl = {p: sum(m["failed_workers"] for (q, _), ms in results.items()
                 if q == p for m in ms) for p in PEERS}
    lines.append("")
    lines.append("overlaps: %s; failed workers: %s" % (
        ", ".join("%s %d" % (p, ov[p]) for p in PEERS),
        ", ".join("%s %d" % (p, fl[p]) for p in PEERS)))
    text = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    return bad


if __name__ == "__main__":
    sys.exit(main())
