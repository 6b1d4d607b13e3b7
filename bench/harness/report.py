"""report.py - CSV files, the Markdown report and the gnuplot plots.

Input is the results dict bench/compare collects: per-run metrics (runs),
the MONITOR accounting pass (acct), redis-benchmark limits, and dlock-bench's
renewal and memory rows. Medians are over repetitions; overlaps are summed
(they must be 0 in every run). Plots are drawn by gnuplot from data files
written to raw/.
"""
import os
import shutil
import subprocess

import analysis

RUN_COLS = ["acquisitions", "acq_per_s", "xhandoffs_per_s", "gap_p50_us", "gap_p99_us",
            "gap_max_us", "xgap_p50_us", "xgap_p99_us", "xgap_max_us",
            "worst_wait_ms", "overlaps", "jain", "scripts_per_acq",
            "server_calls_per_acq", "late_ms", "failed_workers"]
MEDIAN_COLS = ["acq_per_s", "xhandoffs_per_s", "gap_p50_us", "gap_p99_us", "gap_max_us",
               "xgap_p50_us", "xgap_p99_us", "xgap_max_us", "worst_wait_ms",
               "jain", "scripts_per_acq", "server_calls_per_acq"]
ACCT_COLS = ["client_cmds_per_acq", "client_scripts_per_acq",
             "inner_cmds_per_acq"]
CDF_POINTS = [0.1, 1] + list(range(5, 96, 5)) + [99, 99.9, 100]


def fmt(v, digits=None):
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if digits is not None:
        return "%.*f" % (digits, v)
    a = abs(v)
    if a >= 1000:
        return "%.0f" % v
    if a >= 100:
        return "%.0f" % v
    if a >= 10:
        return "%.1f" % v
    return "%.2f" % v


def write_csv(path, header, rows):
    with open(path, "w") as f:
        f.write(",".join(header) + "\n")
        for r in rows:
            f.write(",".join("" if v is None else
                             ("%.6g" % v if isinstance(v, float) else str(v))
                             for v in r) + "\n")


def summarise(results, case_list, peers):
    """{(peer, case): medians and totals}."""
    out = {}
    for peer in peers:
        for case in case_list:
            runs = [r for r in results["runs"]
                    if r["peer"] == peer and r["case"] == case["id"]]
            if not runs:
                continue
            s = {c: analysis.median([r.get(c) for r in runs])
                 for c in MEDIAN_COLS}
            s["overlaps_total"] = sum(r["overlaps"] for r in runs)
            s["reps"] = len(runs)
            s["failed_workers"] = sum(r["failed_workers"] for r in runs)
            s["late_ms_max"] = max(r["late_ms"] for r in runs)
            acct = [a for a in results["acct"] if a["peer"] == peer and
                    a["case"] == case["id"] and a["procs"] == case["procs"]]
            for c in ACCT_COLS:
                s[c] = acct[0].get(c) if acct else None
            s["breakdown"] = acct[0].get("client_cmd_breakdown", "") \
                if acct else ""
            xg = sorted(g for r in runs for g in r.get("_xgaps", []))
            s["cdf"] = [(q, v / 1e3) for q, v in
                        analysis.quantiles(xg, CDF_POINTS)] if xg else []
            s["cdf_n"] = len(xg)
            out[(peer, case["id"])] = s
    return out


def limits_median(results):
    ev = analysis.median([x.get("evalsha_acquire") for x in
                          results["limits"]])
    st = analysis.median([x.get("set_nx_px") for x in results["limits"]])
    return ev, st


def group_median(rows):
    """rows of dicts with K and rep -> {K: {metric: median}}."""
    out = {}
    for r in rows:
        out.setdefault(r["K"], []).append(r)
    med = {}
    for k, rs in out.items():
        keys = {m for r in rs for m in r if m not in ("K", "rep")}
        med[k] = {m: analysis.median([r.get(m) for r in rs]) for m in keys}
    return med


def k_sort(k):
    try:
        return int(k.split("=")[1])
    except (IndexError, ValueError):
        return 0


# ------------------------------------------------------------------ targets

def targets(S, peers, limit_pairs, acct, renewal):
    """[(target, met (True/False/None), figure text)]."""
    out = []
    others = [p for p in peers if p != "dlock"]

    def get(peer, case, col):
        return S.get((peer, case), {}).get(col)

    d_un = get("dlock", "uncontended", "acq_per_s")
    if d_un is not None and limit_pairs:
        ratio = d_un / limit_pairs
        best = max(((get(p, "uncontended", "acq_per_s") or 0, p)
                    for p in others), default=(0, "-"))
        met = ratio >= 0.9 and d_un > best[0]
        out.append(("uncontended pairs/s >= 0.9 x EVALSHA limit and above "
                    "every peer", met,
                    "dlock %s pairs/s = %.2f x limit (%s pairs/s); best peer "
                    "%s %s pairs/s" % (fmt(d_un), ratio, fmt(limit_pairs),
                                       best[1], fmt(best[0]))))
    d_c = get("dlock", "contended-h1000", "acq_per_s")
    if d_c is not None:
        best = max(((get(p, "contended-h1000", "acq_per_s") or 0, p)
                    for p in others), default=(0, "-"))
        out.append(("contended H=1000: acquisitions/s above every peer",
                    d_c > best[0], "dlock %s/s; best peer %s %s/s" % (
                        fmt(d_c), best[1], fmt(best[0]))))
        dx = get("dlock", "contended-h1000", "xgap_p50_us")
        px = [(get(p, "contended-h1000", "xgap_p50_us"), p) for p in others]
        px = [x for x in px if x[0] is not None]
        if dx is not None and px:
            bx = min(px)
            out.append(("contended H=1000: cross-worker hand-off p50 <= 1/3 "
                        "of the best peer's", dx <= bx[0] / 3,
                        "dlock %s us; best peer %s %s us (ratio %.2f)" % (
                            fmt(dx), bx[1], fmt(bx[0]), dx / bx[0])))
    da = [a for a in acct if a["peer"] == "dlock" and a["case"] in (
        "contended-h0", "contended-h1000", "contended-h20000",
        "threads-one")]
    if da:
        worst = max(da, key=lambda a: a.get("client_cmds_per_acq") or 0)
        figs = ", ".join("%s W=%d: %.2f" % (a["case"], a["procs"],
                                            a["client_cmds_per_acq"])
                         for a in sorted(da, key=lambda a: (a["case"],
                                                            a["procs"])))
        out.append(("contended: at most 3 Redis commands per acquisition at "
                    "any contention level, no polling",
                    worst["client_cmds_per_acq"] <= 3.0,
                    "commands sent per acquisition (MONITOR): " + figs))
    long_ = {a["peer"]: a["client_cmds_per_acq"] for a in acct
             if a["case"] == "contended-h20000"}
    wl = [a["procs"] for a in acct if a["case"] == "contended-h20000"]
    short = {a["peer"]: a["client_cmds_per_acq"] for a in acct
             if a["case"] == "contended-h1000" and wl and
             a["procs"] == wl[0]}
    if "dlock" in short and "dlock" in long_:
        r = long_["dlock"] / short["dlock"] if short["dlock"] else 0
        out.append(("no polling: commands per acquisition do not grow with "
                    "the hold time", r <= 1.25,
                    "sent/acq at H=1 ms -> H=20 ms: " + ", ".join(
                        "%s %.2f -> %.2f" % (p, short[p], long_[p])
                        for p in peers if p in short and p in long_)))
    if renewal:
        ks = sorted(renewal, key=k_sort)
        lo, hi = ks[0], ks[-1]
        slo = renewal[lo].get("scripts_per_cycle")
        shi = renewal[hi].get("scripts_per_cycle")
        klo, khi = k_sort(lo), k_sort(hi)
        if slo and shi and khi > klo:
            growth = shi / slo
            met = growth <= (khi / klo) / 50.0 or shi <= 2 * khi / 100.0
            out.append(("renewal: round trips per cycle grow as K/batch, "
                        "not K", met,
                        "scripts per cycle %s at %s, %s at %s (x%.1f for "
                        "x%d locks; %.0f locks per script)" % (
                            fmt(slo), lo, fmt(shi), hi, growth,
                            khi // klo, khi / shi)))
    tot = {p: sum(S[(p, c)]["overlaps_total"] for (pp, c) in S if pp == p)
           for p in peers}
    out.append(("no overlapping holds ever", tot.get("dlock", 0) == 0,
                "overlapping holds over all runs: " + ", ".join(
                    "%s %d" % (p, tot[p]) for p in peers)))
    return out


# ------------------------------------------------------------------ plots

def gnuplot(script, path):
    with open(path, "w") as f:
        f.write(script)
    r = subprocess.run(["gnuplot", path], capture_output=True, text=True,
                       timeout=120)
    if r.returncode != 0:
        raise RuntimeError("gnuplot %s: %s" % (path, r.stderr.strip()))


def quote(s):
    return '"%s"' % s.replace('"', "'")


def draw_plots(out, raw, S, case_list, peers, labels, limit_pairs, renewal):
    made = []
    colors = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e"]
    # throughput and worst waits: clustered bars, log scale
    for col, fname, ylabel, title in [
            ("acq_per_s", "throughput.png", "acquisitions per second (log)",
             "Throughput per peer and scenario (median of repetitions)"),
            ("worst_wait_ms", "worst_wait.png",
             "longest wait of any worker, ms (log)",
             "Worst wait per peer and scenario (median of repetitions)")]:
        dat = os.path.join(raw, fname.replace(".png", ".dat"))
        with open(dat, "w") as f:
            f.write("case " + " ".join(quote(labels[p]) for p in peers) +
                    "\n")
            for c in case_list:
                vals = [S.get((p, c["id"]), {}).get(col) for p in peers]
                f.write(quote(c["label"]) + " " + " ".join(
                    "?" if v is None or v <= 0 else "%.6g" % v
                    for v in vals) + "\n")
        plot_cmds = ", ".join(
            "'%s' using %d:xtic(1) title columnheader(%d) lc rgb '%s'" % (
                dat, i + 2, i + 2, colors[i % len(colors)])
            for i in range(len(peers)))
        extra = ""
        if col == "acq_per_s" and limit_pairs:
            extra = ("set arrow from -0.45,%g to 0.45,%g nohead dt 2 lw 2 "
                     "lc rgb 'black' front\n"
                     "set label 'EVALSHA limit / 2' at -0.45,%g font ',9' "
                     "offset 0,0.7\n" % (limit_pairs, limit_pairs,
                                         limit_pairs * 1.0))
        gnuplot("""set terminal pngcairo size 1100,520 font 'Sans,10'
set output '%s'
set title '%s'
set datafile missing '?'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set logscale y
set grid ytics
set ylabel '%s'
set key top right
set xtics rotate by -15
%s
plot %s
""" % (os.path.join(out, fname), title, ylabel, extra, plot_cmds),
            os.path.join(raw, fname.replace(".png", ".gp")))
        made.append(fname)
    # hand-off distributions: CDF of cross-worker gaps, one panel per case
    panels = [c for c in case_list if c["id"] in ("contended-h0",
                                                  "contended-h1000",
                                                  "threads-one")]
    parts = []
    for c in panels:
        lines = []
        for i, p in enumerate(peers):
            cdf = S.get((p, c["id"]), {}).get("cdf") or []
            dat = os.path.join(raw, "cdf.%s.%s.dat" % (p, c["id"]))
            with open(dat, "w") as f:
                for q, v in cdf:
                    f.write("%.6g %.6g\n" % (max(v, 0.1), q))
            if cdf:
                n = S[(p, c["id"])]["cdf_n"]
                lines.append("'%s' using 1:2 with steps lw 2 lc rgb '%s' "
                             "title %s" % (dat, colors[i % len(colors)],
                                           quote("%s (n=%d)" % (labels[p],
                                                                n))))
        if lines:
            parts.append("set title %s\nplot %s\n" % (
                quote("cross-worker hand-off, " + c["label"]),
                ", ".join(lines)))
    if parts:
        gnuplot("""set terminal pngcairo size 1400,480 font 'Sans,10'
set output '%s'
set multiplot layout 1,%d
set logscale x
set grid
set xlabel 'next acquire - previous release, us (log)'
set ylabel 'percentile'
set yrange [0:100]
set key bottom right
%s
unset multiplot
""" % (os.path.join(out, "handoff.png"), len(parts), "".join(parts)),
            os.path.join(raw, "handoff.gp"))
        made.append("handoff.png")
    if renewal:
        dat = os.path.join(raw, "renewal.dat")
        with open(dat, "w") as f:
            for k in sorted(renewal, key=k_sort):
                v = renewal[k]
                f.write("%d %.6g %.6g\n" % (
                    k_sort(k), v.get("scripts_per_cycle") or 0,
                    v.get("client_cpu_us_per_cycle") or 0))
        gnuplot("""set terminal pngcairo size 800,480 font 'Sans,10'
set output '%s'
set title 'dlock renewal: per watchdog cycle, by locks held'
set logscale xy
set grid
set xlabel 'locks held (K)'
set ylabel 'EVALSHA per cycle'
set y2label 'client CPU us per cycle'
set y2tics
set logscale y2
set key top left
plot '%s' using 1:2 with linespoints lw 2 title 'renewal scripts per cycle', \
     '%s' using 1:3 axes x1y2 with linespoints lw 2 title 'client CPU us per cycle', \
     '%s' using 1:1 with lines dt 2 lc rgb 'gray' title 'one per lock (K)'
""" % (os.path.join(out, "renewal.png"), dat, dat, dat),
            os.path.join(raw, "renewal.gp"))
        made.append("renewal.png")
    return made


# ------------------------------------------------------------------ report

def write_all(out, results, case_list, peers, labels, with_plots=True):
    raw = os.path.join(out, "raw")
    env = results["env"]
    S = summarise(results, case_list, peers)
    ev, st = limits_median(results)
    limit_pairs = ev / 2 if ev else None
    renewal = group_median(results["renewal"])
    memory = group_median(results["memory"])

    # ---- CSV
    write_csv(os.path.join(out, "runs.csv"), ["peer", "case", "rep"] +
              RUN_COLS,
              [[r["peer"], r["case"], r["rep"]] + [r.get(c) for c in RUN_COLS]
               for r in results["runs"]])
    write_csv(os.path.join(out, "summary.csv"),
              ["peer", "case", "reps"] + MEDIAN_COLS +
              ["overlaps_total"] + ACCT_COLS,
              [[p, c, S[(p, c)]["reps"]] +
               [S[(p, c)].get(x) for x in MEDIAN_COLS] +
               [S[(p, c)]["overlaps_total"]] +
               [S[(p, c)].get(x) for x in ACCT_COLS] for (p, c) in S])
    write_csv(os.path.join(out, "waits.csv"),
              ["peer", "case", "rep", "worker", "longest_wait_ms"],
              [[r["peer"], r["case"], r["rep"], w, v]
               for r in results["runs"]
               for w, v in sorted(r["worker_waits_ms"].items())])
    write_csv(os.path.join(out, "accounting.csv"),
              ["peer", "case", "procs", "acquisitions"] + ACCT_COLS +
              ["breakdown"],
              [[a["peer"], a["case"], a["procs"], a["acquisitions"]] +
               [a.get(c) for c in ACCT_COLS] +
               [a.get("client_cmd_breakdown", "").replace(",", ";")]
               for a in results["acct"]])
    write_csv(os.path.join(out, "limits.csv"),
              ["rep", "evalsha_acquire_rps", "set_nx_px_rps"],
              [[x["rep"], x.get("evalsha_acquire"), x.get("set_nx_px")]
               for x in results["limits"]])
    write_csv(os.path.join(out, "handoff_cdf.csv"),
              ["peer", "case", "percentile", "xgap_us"],
              [[p, c, q, v] for (p, c), s in S.items() for q, v in s["cdf"]])
    for name, rows in (("renewal", results["renewal"]),
                       ("memory", results["memory"])):
        metrics = sorted({m for r in rows for m in r if m not in ("K",
                                                                  "rep")})
        write_csv(os.path.join(out, name + ".csv"), ["rep", "K"] + metrics,
                  [[r["rep"], r["K"]] + [r.get(m) for m in metrics]
                   for r in rows])

    kinds = {}
    for r in results.get("kinds", []):
        kinds.setdefault((r["scenario"], r["case"]), []).append(r)
    kind_cols = ["acq_per_s", "acq_per_s_per_process", "worst_wait_ms",
                 "jain", "xgap_p50_us", "server_calls_per_acq",
                 "peak_holders", "rounds_per_s", "release_p50_us",
                 "release_p99_us", "release_max_us"]
    write_csv(os.path.join(out, "kinds.csv"),
              ["scenario", "case", "rep"] + kind_cols + ["overlaps"],
              [[r["scenario"], r["case"], r["rep"]] +
               [r.get(c) for c in kind_cols] + [r.get("overlaps")]
               for r in results.get("kinds", [])])

    made = []
    plot_note = ""
    if with_plots and shutil.which("gnuplot"):
        try:
            made = draw_plots(out, raw, S, case_list, peers, labels, limit_pairs,
                         renewal)
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            plot_note = "Plots failed: %s" % e
    elif with_plots:
        plot_note = "No plots: gnuplot not found (apt-get install gnuplot-nox)."

    T = targets(S, peers, limit_pairs, results["acct"], renewal)

    # ---- Markdown
    L = []
    w = L.append
    w("# dlock benchmark: %s\n" % env["date"])
    w("Produced by `bench/compare%s` in %s s. Machine: %s; load average %s "
      "at the start, %s at the end. %s; Node %s; Python %s; Java %s; "
      "Go %s; dlock `%s`. "
      "%d repetition(s) of %g s per case, medians shown; W = %d processes, "
      "T = %d threads.\n" % (
          " --quick" if env["quick"] else "", env.get("elapsed_s", "?"),
          env["host"], " ".join(env["loadavg_start"]),
          " ".join(env.get("loadavg_end", [])), env["redis"], env["node"],
          env["python"], env.get("java", "-"), env.get("go", "-"),
          env["dlock"], env["reps"], env["seconds"],
          env["workers"], env["threads"]))
    for n in env["notes"]:
        w("- " + n)
    if plot_note:
        w("- " + plot_note)
    w("")
    w("## Summary (ready to paste)\n")
    head = ["", ] + [labels[p] for p in peers]
    w("| " + " | ".join(head) + " |")
    w("|" + "---|" * len(head))

    def row(title, case, col, unit_fmt=fmt):
        w("| %s | %s |" % (title, " | ".join(
            unit_fmt(S.get((p, case), {}).get(col)) for p in peers)))

    row("uncontended, acquire+release pairs/s", "uncontended", "acq_per_s")
    row("contended (W=%d, H=0), acquisitions/s" % env["workers"],
        "contended-h0", "acq_per_s")
    row("contended (W=%d, H=1 ms), acquisitions/s" % env["workers"],
        "contended-h1000", "acq_per_s")
    row("H=1 ms: hand-offs between workers per second", "contended-h1000",
        "xhandoffs_per_s")
    row("H=1 ms: cross-worker hand-off p50, us", "contended-h1000",
        "xgap_p50_us")
    row("H=1 ms: cross-worker hand-off p99, us", "contended-h1000",
        "xgap_p99_us")
    row("H=1 ms: worst wait, ms", "contended-h1000", "worst_wait_ms")
    row("H=1 ms: Jain's fairness", "contended-h1000", "jain",
        lambda v: fmt(v, 3))
    row("H=1 ms: commands sent per acquisition", "contended-h1000",
        "client_cmds_per_acq")
    row("threads (T=%d, one lock), acquisitions/s" % env["threads"],
        "threads-one", "acq_per_s")
    row("threads (T=%d, T locks), acquisitions/s" % env["threads"],
        "threads-distinct", "acq_per_s")
    w("| overlapping holds, all runs | %s |" % " | ".join(
        str(sum(S[(p, c["id"])]["overlaps_total"] for c in case_list
                if (p, c["id"]) in S)) for p in peers))
    w("")
    if ev:
        w("Limit for one connection (`redis-benchmark -c 1 -P 1`): EVALSHA "
          "of dlock's acquire script %s/s, i.e. **%s acquire+release pairs/s"
          "**; `SET NX PX` %s/s.\n" % (fmt(ev), fmt(limit_pairs), fmt(st)))
    for f in made:
        w("![%s](%s)\n" % (f[:-4], f))

    w("## Targets\n")
    w("| target | met | figure |")
    w("|---|---|---|")
    for t, met, fig in T:
        w("| %s | %s | %s |" % (t, {True: "yes", False: "**no**",
                                    None: "?"}[met], fig))
    w("")

    w("## All cases (medians)\n")
    w("Hand-off = next acquire minus previous release on the same lock; "
      "*cross* = between different workers. Worst wait = the longest any "
      "worker waited. Scripts and server calls per acquisition come from "
      "`INFO commandstats` deltas of the measured runs (server calls include "
      "the commands run inside scripts); *sent* = commands clients sent per "
      "acquisition, from the MONITOR accounting pass.\n")
    w("| case | peer | acq/s | hand-off p50/p99/max us | cross p50/p99/max "
      "us | worst wait ms | Jain | scripts/acq | server calls/acq | sent/acq "
      "| overlaps |")
    w("|---|---|---|---|---|---|---|---|---|---|---|")
    for c in case_list:
        for p in peers:
            s = S.get((p, c["id"]))
            if not s:
                continue
            w("| %s | %s | %s | %s / %s / %s | %s / %s / %s | %s | %s | %s "
              "| %s | %s | %d |" % (
                  c["label"], labels[p], fmt(s["acq_per_s"]),
                  fmt(s["gap_p50_us"]), fmt(s["gap_p99_us"]),
                  fmt(s["gap_max_us"]), fmt(s["xgap_p50_us"]),
                  fmt(s["xgap_p99_us"]), fmt(s["xgap_max_us"]),
                  fmt(s["worst_wait_ms"]), fmt(s["jain"], 3),
                  fmt(s["scripts_per_acq"]), fmt(s["server_calls_per_acq"]),
                  fmt(s["client_cmds_per_acq"]), s["overlaps_total"]))
    w("")
    w("### Commands sent per acquisition (MONITOR accounting pass)\n")
    w("| case | peer | workers | acquisitions | sent/acq | of which scripts "
      "| run inside scripts/acq | most frequent |")
    w("|---|---|---|---|---|---|---|---|")
    for a in results["acct"]:
        w("| %s | %s | %d | %d | %s | %s | %s | %s |" % (
            a["case"], labels.get(a["peer"], a["peer"]), a["procs"],
            a["acquisitions"], fmt(a.get("client_cmds_per_acq")),
            fmt(a.get("client_scripts_per_acq")),
            fmt(a.get("inner_cmds_per_acq")),
            a.get("client_cmd_breakdown", "")))
    w("")
    cpu = results.get("cpu") or {}
    if cpu:
        w("## Client instructions per uncontended acquire+release pair "
          "(callgrind)\n")
        w("Counted by callgrind: `bench/callgrind-pair.sh` runs "
          "`dlock-bench uncontended` and counts what the calling thread "
          "spends in dlock_lock_acquire and dlock_lock_release (the same "
          "to within a few instructions from run to run); "
          "`bench/callgrind-floor.sh` counts redis-benchmark's client "
          "(hiredis, one connection) per SET request, times 2, the floor "
          "for any client that sends two requests per pair (its event loop "
          "runs more often when replies are slow, so its figure moves with "
          "the machine's load: 6 820-8 231 in two runs). The other peers "
          "run on runtimes (the JVM, Node, Go, CPython) whose instructions "
          "callgrind cannot attribute to one pair; they are left out.\n")
        w("| client | instructions per pair | x the floor |")
        w("|---|---|---|")
        floor = cpu.get("floor")
        for name, key in (("dlock", "dlock"),
                          ("redis-benchmark client (floor)", "floor")):
            v = cpu.get(key)
            w("| %s | %s | %s |" % (name, fmt(v),
                                    fmt(v / floor) if v and floor else "-"))
        w("")
    if renewal:
        w("## Renewal (dlock, watchdog %s ms: a cycle every %s ms)\n" % (
            fmt(next(iter(renewal.values())).get("watchdog_ms")),
            fmt((next(iter(renewal.values())).get("watchdog_ms") or 0) / 3)))
        w("| K locks | scripts/cycle | server calls/cycle | read events/cycle"
          " | client CPU us/cycle | locks lost |")
        w("|---|---|---|---|---|---|")
        for k in sorted(renewal, key=k_sort):
            v = renewal[k]
            w("| %s | %s | %s | %s | %s | %s |" % (
                k[2:], fmt(v.get("scripts_per_cycle")),
                fmt(v.get("server_calls_per_cycle")),
                fmt(v.get("reads_per_cycle")),
                fmt(v.get("client_cpu_us_per_cycle")),
                fmt(v.get("lost"), 0)))
        w("")
    if kinds:
        w("## Lock kinds (dlock)\n")
        w("`dlock-bench contended --kind reentrant|fair` (W processes, H = 1 "
          "ms) and `dlock-bench readers` (R processes looping "
          "acquire/release on the read side of one read-write lock, then on "
          "the reentrant lock), `dlock-bench semaphore` (P = 2, H = 1 "
          "ms), same server, same run; medians over "
          "repetitions. Readers hold together, so their overlaps are "
          "checked per reader.\n")
        w("| scenario | case | acq/s | acq/s per process | worst wait ms | "
          "Jain | server calls/acq | overlaps |")
        w("|---|---|---|---|---|---|---|---|")
        def med_of(rows, col):
            v = sorted(x[col] for x in rows if x.get(col) is not None)
            return v[len(v) // 2] if v else None
        for (scen, case), rows in sorted(kinds.items()):
            if scen == "latch":
                continue

            def med(col, rows=rows):
                return med_of(rows, col)
            w("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                scen, case, fmt(med("acq_per_s")),
                fmt(med("acq_per_s_per_process")),
                fmt(med("worst_wait_ms")), fmt(med("jain"), 3),
                fmt(med("server_calls_per_acq")),
                fmt(sum(x.get("overlaps") or 0 for x in rows), 0)))
        w("")
        w("`semaphore` rows: W processes on a semaphore of P permits, then "
          "on a permit semaphore (watchdog lease); holds overlap up to P by "
          "design, so overlaps are checked per process and dlock-bench "
          "fails the run if more than P ever held at once.\n")
        latch = [(case, rows) for (scen, case), rows in sorted(kinds.items())
                 if scen == "latch"]
        if latch:
            w("`dlock-bench latch`: W processes await a latch of count 1, "
              "this process counts it down, 100 rounds; release latency from "
              "count_down's return to each waiter's wake-up (medians over "
              "repetitions).\n")
            w("| case | rounds/s | p50 us | p99 us | max us |")
            w("|---|---|---|---|---|")
            for case, rows in latch:
                w("| %s | %s | %s | %s | %s |" % (
                    case, fmt(med_of(rows, "rounds_per_s")),
                    fmt(med_of(rows, "release_p50_us")),
                    fmt(med_of(rows, "release_p99_us")),
                    fmt(med_of(rows, "release_max_us"))))
            w("")
    if memory:
        w("## Memory (dlock)\n")
        w("| K held locks | client heap B/lock | client RSS B/lock | Redis "
          "B/lock | Redis keys/lock | Redis B left per release | keys left "
          "per release |")
        w("|---|---|---|---|---|---|---|")
        for k in sorted(memory, key=k_sort):
            v = memory[k]
            w("| %s | %s | %s | %s | %s | %s | %s |" % (
                k[2:], fmt(v.get("client_heap_bytes_per_lock")),
                fmt(v.get("client_rss_bytes_per_lock")),
                fmt(v.get("server_bytes_per_lock")),
                fmt(v.get("server_keys_per_lock")),
                fmt(v.get("server_bytes_left_per_release")),
                fmt(v.get("server_keys_left_per_release"))))
        w("")
    problems = [(r["peer"], r["case"], r["rep"], r["failed_workers"],
                 r["late_ms"], "; ".join(r["errors"][:1]))
                for r in results["runs"]
                if r["failed_workers"] or r["errors"] or r["late_ms"] > 0]
    if problems:
        w("## Run notes\n")
        w("Workers that failed or reached the start instant late (their "
          "first wait then includes the lateness):\n")
        w("| peer | case | rep | failed workers | late ms | first message |")
        w("|---|---|---|---|---|---|")
        for p in problems:
            w("| %s | %s | %s | %s | %s | %s |" % (
                p[0], p[1], p[2], p[3], fmt(p[4]),
                p[5].replace("|", "/")[:160]))
        w("")
    w("Files: runs.csv (every run), summary.csv (medians), waits.csv (each "
      "worker's longest wait), accounting.csv, limits.csv, renewal.csv, "
      "kinds.csv (lock kinds: contended fair vs reentrant, readers, "
      "semaphores, latch), "
      "memory.csv, handoff_cdf.csv (cross-worker hand-off percentiles, all "
      "repetitions pooled). raw/ holds the records and logs (not "
      "committed).\n")
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(L))
    return T
