"""analysis.py - what the worker records of one run say (stdlib only).

A record is (worker, acquire_ns, release_ns): the CLOCK_MONOTONIC instant
right after an acquire returned and the one right before the release was
sent. The server-side hold contains that interval, so two recorded intervals
on one lock that overlap prove a real overlap.

Definitions (the same as dlock-bench's C analysis):
  hand-off gap   next hold's acquire minus the previous hold's release, on
                 one lock, in acquire order; "cross" when the two holds
                 belong to different workers;
  wait           a worker's acquire minus its own previous release (or the
                 start instant); a worker still waiting at the end instant
                 waited until then;
  overlap        a hold that begins before the latest release seen so far
                 on its lock;
  Jain's index   (sum x)^2 / (n * sum x^2) over per-worker acquisition counts.
"""


def read_records(path):
    """Records of one CSV file: list of (worker, acq_ns, rel_ns)."""
    out = []
    with open(path) as f:
        for line in f:
            parts = line.strip().split(",")
            if len(parts) != 3 or not parts[0].lstrip("-").isdigit():
                continue
            out.append((int(parts[0]), int(parts[1]), int(parts[2])))
    return out


def percentile(sorted_vals, p):
    """Nearest-rank percentile of a sorted list (p in 0..100)."""
    if not sorted_vals:
        return None
    n = len(sorted_vals)
    rank = max(1, min(n, int(-(-p * n // 100))))
    return sorted_vals[rank - 1]


def analyse(records, nworkers, start_ns, end_ns, per_worker_lock=False):
    """Metrics of one run (durations in us or ms as named)."""
    seconds = (end_ns - start_ns) / 1e9
    m = {"acquisitions": len(records),
         "acq_per_s": len(records) / seconds if seconds > 0 else 0.0}
    key = (lambda r: (r[0], r[1])) if per_worker_lock else (lambda r: r[1])
    recs = sorted(records, key=key)
    gaps, xgaps = [], []
    overlaps = 0
    last_end = None
    prev = None
    for r in recs:
        same_lock = prev is not None and (not per_worker_lock
                                          or prev[0] == r[0])
        if not same_lock:
            last_end = None
        else:
            if r[1] < last_end:
                overlaps += 1
            else:
                g = r[1] - prev[2]
                gaps.append(g)
                if prev[0] != r[0]:
                    xgaps.append(g)
        if last_end is None or r[2] > last_end:
            last_end = r[2]
        prev = r
    gaps.sort()
    xgaps.sort()

    def us(v):
        return None if v is None else v / 1e3

    m["handoffs"] = len(gaps)
    m["gap_p50_us"] = us(percentile(gaps, 50))
    m["gap_p99_us"] = us(percentile(gaps, 99))
    m["gap_max_us"] = us(gaps[-1] if gaps else None)
    m["xhandoffs"] = len(xgaps)
    m["xhandoffs_per_s"] = len(xgaps) / seconds if seconds > 0 else 0.0
    m["xgap_p50_us"] = us(percentile(xgaps, 50))
    m["xgap_p99_us"] = us(percentile(xgaps, 99))
    m["xgap_max_us"] = us(xgaps[-1] if xgaps else None)
    m["overlaps"] = overlaps

    by_worker = {w: [] for w in range(nworkers)}
    for r in records:
        by_worker.setdefault(r[0], []).append(r)
    waits = {}
    for w, rs in by_worker.items():
        rs.sort(key=lambda r: r[1])
        prev_rel, worst = start_ns, 0
        for r in rs:
            worst = max(worst, r[1] - prev_rel)
            prev_rel = r[2]
        worst = max(worst, end_ns - prev_rel)
        waits[w] = worst / 1e6
    m["worker_waits_ms"] = waits
    m["worst_wait_ms"] = max(waits.values()) if waits else None
    counts = [len(by_worker[w]) for w in sorted(by_worker)]
    s, sq = sum(counts), sum(c * c for c in counts)
    m["jain"] = (s * s) / (len(counts) * sq) if sq else 0.0
    m["_xgaps"] = xgaps  # for distribution plots; not written to CSV
    return m


def quantiles(sorted_vals, points):
    """[(q, value)] for q in points (0..100) of a sorted list."""
    return [(q, percentile(sorted_vals, q)) for q in points]


def median(vals):
    vals = sorted(v for v in vals if v is not None)
    if not vals:
        return None
    n = len(vals)
    return vals[n // 2] if n % 2 else (vals[n // 2 - 1] + vals[n // 2]) / 2
