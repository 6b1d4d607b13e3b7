#!/usr/bin/env python3
"""etcd_compare.py - dlock on etcd against etcd's Go concurrency.Mutex, and
the dlock command against `etcdctl lock`, on one cluster, in one run.

Run by bench/etcd-compare.sh next to a private 3-member cluster
(DLOCK_ETCD_URL, DLOCK_ETCD_ENDPOINTS in the environment). stdlib only.

Library peers run bench/README.md's loop with its record format: dlock-bench
(one libdlock client per process) and bench/peers/etcd-go (one clientv3
client and one concurrency.Session per process). Cases, per repetition,
peers alternated within each case:

  uncontended   1 process, H = 0: pairs/s and the pair latency (p50/p99 of
                the gap between one pass's release and the next acquire:
                one release plus one acquire)
  contended-h0  8 processes, H = 0, one lock: acquisitions/s, cross-worker
                hand-off gap p50/p99, worst wait, Jain, overlaps
  contended-h1000  the same with a 1 ms hold

Commands: `dlock -u URL NAME true` and `etcdctl lock NAME true` (exec mode)
alternated, each run timed as a whole process (start-up, connection,
session, lock, child, release, exit) with its CPU from wait4's rusage.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import analysis  # noqa: E402

CASES = [("uncontended", 1, 0), ("contended-h0", 8, 0),
         ("contended-h1000", 8, 1000)]


def run_case(peer, exe, url, case, seconds, lead, raw, rep):
    cid, procs, hold = case
    name = "bench-%s-%s-%d" % (peer, cid, rep)
    start = time.monotonic_ns() + int(lead * 1e9)
    end = start + int(seconds * 1e9)
    ps, files = [], []
    for i in range(procs):
        rec = os.path.join(raw, "%s.%s.%d.w%d.csv" % (peer, cid, rep, i))
        lg = open(rec[:-4] + ".log", "w")
        cmd = [exe, "--url", url, "--name", name, "--hold-us", str(hold),
               "--seconds", repr(seconds), "--start-ns", str(start),
               "--worker", str(i), "--records", rec]
        ps.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=lg,
                                   stderr=subprocess.STDOUT))
        lg.close()
        files.append(rec)
    failed = []
    deadline = time.monotonic() + lead + seconds + 60
    for p in ps:
        try:
            code = p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)
            code = "killed"
        if code != 0:
            failed.append(code)
    recs = []
    for f in files:
        if os.path.exists(f):
            recs += analysis.read_records(f)
    m = analysis.analyse(recs, procs, start, end)
    m["failed"] = failed
    if procs == 1:  # one worker: every gap is its own release + acquire
        m["pair_p50_us"] = m["gap_p50_us"]
        m["pair_p99_us"] = m["gap_p99_us"]
    return m


def time_command(argv):
    """Wall ms and CPU ms (user + system, children reaped) of one run."""
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = (time.monotonic() - t0) * 1e3
    err = p.stderr.read().decode(errors="replace").strip()
    p.stderr.close()
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (argv[0], p.returncode, err))
    return wall, (ru.ru_utime + ru.ru_stime) * 1e3


def fmt(v, nd=1):
    return "n/a" if v is None else ("%.*f" % (nd, v))


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlock-bench", required=True)
    ap.add_argument("--go-worker", required=True)
    ap.add_argument("--dlock", required=True)
    ap.add_argument("--etcdctl", default="/usr/bin/etcdctl")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--lead", type=float, default=2.0)
    ap.add_argument("--cmd-runs", type=int, default=20)
    ap.add_argument("--keep", help="keep the records in this directory")
    a = ap.parse_args()
    url = os.environ["DLOCK_ETCD_URL"]
    eps = os.environ["DLOCK_ETCD_ENDPOINTS"]
    raw = a.keep or tempfile.mkdtemp(prefix="etcd-compare-")
    os.makedirs(raw, exist_ok=True)
    peers = [("dlock", a.dlock_bench), ("go", a.go_worker)]
    res = {}  # (peer, case) -> [metrics per rep]
    bad = []
    for rep in range(a.reps):
        for case in CASES:
            order = peers if rep % 2 == 0 else peers[::-1]
            for peer, exe in order:
                m = run_case(peer, exe, url, case, a.seconds, a.lead, raw,
                             rep)
                res.setdefault((peer, case[0]), []).append(m)
                print("rep %d %-16s %-5s acq/s %8.1f xgap p50 %s us "
                      "worst wait %s ms overlaps %d%s" % (
                          rep, case[0], peer, m["acq_per_s"],
                          fmt(m["xgap_p50_us"]), fmt(m["worst_wait_ms"]),
                          m["overlaps"],
                          " FAILED %s" % m["failed"] if m["failed"] else ""),
                      file=sys.stderr, flush=True)
                if m["failed"] or m["overlaps"]:
                    bad.append((peer, case[0], rep))

    # the commands, alternated
    env_ok = dict(os.environ, ETCDCTL_API="3")
    os.environ.update(env_ok)
    cmds = {"dlock": [a.dlock, "-u", url, "cmd-bench", "true"],
            "etcdctl": [a.etcdctl, "--endpoints=" + eps, "lock",
                        "cmd-bench", "true"]}
    times = {"dlock": [], "etcdctl": []}
    for k in cmds:  # warm-up (page cache)
        time_command(cmds[k])
    for i in range(a.cmd_runs):
        for k in (["dlock", "etcdctl"] if i % 2 == 0
                  else ["etcdctl", "dlock"]):
            times[k].append(time_command(cmds[k]))

    # report
    out = []
    w = out.append
    w("Cluster: 3 members of %s on loopback (heartbeat 50 ms, election "
      "500 ms); %d repetitions of %.1f s per case, peers alternated; "
      "figures are medians over the repetitions." % (
          subprocess.run(["/usr/bin/etcd", "--version"], capture_output=True,
                         text=True).stdout.splitlines()[0],
          a.reps, a.seconds))
    w("")
    w("| case | metric | dlock | Go concurrency.Mutex | dlock / Go |")
    w("|---|---|---|---|---|")
    metrics = {
        "uncontended": [("pairs/s", "acq_per_s", 1),
                        ("pair latency p50 (ms)", "pair_p50_us", 1e-3),
                        ("pair latency p99 (ms)", "pair_p99_us", 1e-3)],
        "contended-h0": [("acquisitions/s", "acq_per_s", 1),
                         ("cross hand-off p50 (ms)", "xgap_p50_us", 1e-3),
                         ("cross hand-off p99 (ms)", "xgap_p99_us", 1e-3),
                         ("worst wait (ms)", "worst_wait_ms", 1),
                         ("Jain", "jain", 1),
                         ("overlaps (all reps)", "overlaps", None)],
    }
    metrics["contended-h1000"] = metrics["contended-h0"]
    for case in CASES:
        for label, key, scale in metrics[case[0]]:
            vals = {}
            for peer, _ in peers:
                ms = res[(peer, case[0])]
                if scale is None:
                    vals[peer] = sum(m[key] for m in ms)
                else:
                    v = med([m.get(key) for m in ms])
                    vals[peer] = None if v is None else v * scale
            nd = 0 if scale is None else (3 if key == "jain" else 2)
            if key == "acq_per_s":
                nd = 1
            r = ratio(vals["dlock"], vals["go"]) if scale is not None else None
            w("| %s | %s | %s | %s | %s |" % (
                case[0], label, fmt(vals["dlock"], nd), fmt(vals["go"], nd),
                fmt(r, 2)))
    w("")
    w("Whole process, %d runs each, alternated (`dlock -u URL cmd-bench "
      "true` and `etcdctl --endpoints=... lock cmd-bench true`: start-up, "
      "connection, session, lock, the child, release, exit):" % a.cmd_runs)
    w("")
    w("| command | wall p50 (ms) | wall p90 (ms) | wall min (ms) | "
      "CPU p50 (ms) |")
    w("|---|---|---|---|---|")
    for k in ("dlock", "etcdctl"):
        walls = sorted(t[0] for t in times[k])
        cpus = sorted(t[1] for t in times[k])
        w("| %s | %.1f | %.1f | %.1f | %.1f |" % (
            k, statistics.median(walls), analysis.percentile(walls, 90),
            walls[0], statistics.median(cpus)))
    dw = statistics.median(t[0] for t in times["dlock"])
    ew = statistics.median(t[0] for t in times["etcdctl"])
    dc = statistics.median(t[1] for t in times["dlock"])
    ec = statistics.median(t[1] for t in times["etcdctl"])
    w("")
    w("dlock / etcdctl: wall %.2f, CPU %.2f." % (dw / ew, dc / ec))
    if bad:
        w("")
        w("FAILED or overlapping runs: %s" % bad)
    print("\n".join(out))
    if not a.keep:
        shutil.rmtree(raw, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
