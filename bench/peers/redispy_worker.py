#!/usr/bin/python3
"""redispy_worker.py - one worker of the benchmark loop for redis-py's Lock.

    python3 redispy_worker.py --url URL --name NAME --hold-us H --seconds D
        [--start-ns T] [--worker I] [--threads T [--distinct]] --records FILE

Same loop and record format as dlock-bench's worker mode: from the
CLOCK_MONOTONIC instant T (time.monotonic_ns() reads CLOCK_MONOTONIC on Linux)
until T + D: acquire, take the time, busy-wait H us, take the time, release;
one `worker,acquire_ns,release_ns` line per pass. Threads share one
redis.Redis client (its connection pool is thread-safe).

The peer is redis-py's redis.lock.Lock (Debian's python3-redis) with library
defaults: no timeout (the key never expires), sleep 0.1 s between attempts.
The only argument added is blocking_timeout = the time left in the run, so a
waiter stops waiting at the end instant, as every peer's loop does.
"""
import argparse
import sys
import threading
import time

import redis

MAX_ITER = 64 * 1024 * 1024
MAX_RECORDS = 2 * 1024 * 1024


def loop(client, wid, name, hold_ns, start_ns, end_ns, out, errors):
    lock = client.lock(name)
    recs = []
    try:
        delay = (start_ns - time.monotonic_ns()) / 1e9
        if delay > 0.002:
            time.sleep(delay - 0.002)
        for _ in range(10**9):
            if time.monotonic_ns() >= start_ns:
                break
        for _ in range(MAX_ITER):
            now = time.monotonic_ns()
            if now >= end_ns:
                break
            if not lock.acquire(blocking_timeout=(end_ns - now) / 1e9):
                break  # the run ended while waiting
            acq = time.monotonic_ns()
            rel = acq
            while rel - acq < hold_ns:
                rel = time.monotonic_ns()
            lock.release()
            if len(recs) >= MAX_RECORDS:
                break
            recs.append((wid, acq, rel))
    except Exception as e:  # reported, the other threads go on
        errors.append("worker %d: %r" % (wid, e))
    out.extend(recs)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--hold-us", type=int, default=0)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--start-ns", type=int)
    p.add_argument("--worker", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--distinct", action="store_true")
    p.add_argument("--records", required=True)
    a = p.parse_args()
    if not 1 <= a.threads <= 256 or a.seconds <= 0:
        p.error("bad --threads or --seconds")

    client = redis.Redis.from_url(a.url)
    client.ping()
    start = a.start_ns if a.start_ns is not None else time.monotonic_ns()
    end = start + int(a.seconds * 1e9)
    late = time.monotonic_ns() - start
    if late > 0:
        sys.stderr.write("redispy_worker %d: reached the start instant "
                         "%.1f ms late\n" % (a.worker, late / 1e6))
    out, errors, threads = [], [], []
    for t in range(a.threads):
        wid = a.worker if a.threads == 1 else a.worker * a.threads + t
        name = "%s:%d" % (a.name, wid) if a.distinct else a.name
        th = threading.Thread(target=loop, args=(
            client, wid, name, a.hold_us * 1000, start, end, out, errors))
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    with open(a.records, "w") as f:
        f.write("worker,acquire_ns,release_ns\n")
        for r in out:
            f.write("%d,%d,%d\n" % r)
    for e in errors:
        sys.stderr.write("redispy_worker: %s\n" % e)
    client.close()
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
