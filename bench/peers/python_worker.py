#!/usr/bin/python3
"""python_worker.py - one worker of the benchmark loop for the Python peers.

    python3 python_worker.py [--peer redis-py|python-redis-lock|pottery]
        --url URL --name NAME --hold-us H --seconds D
        [--start-ns T] [--worker I] [--threads T [--distinct]] --records FILE

Same loop and record format as dlock-bench's worker mode: from the
CLOCK_MONOTONIC instant T (time.monotonic_ns() reads CLOCK_MONOTONIC on Linux)
until T + D: acquire, take the time, busy-wait H us, take the time, release;
one `worker,acquire_ns,release_ns` line per pass. Threads share one
redis.Redis client (its connection pool is thread-safe).

The peers, each with its library defaults; the only argument added is the
time left in the run as the acquire's timeout, so that a waiter stops
waiting at the end instant, as every peer's loop does:
  redis-py           redis.lock.Lock (Debian's python3-redis): no expiry,
                     sleep 0.1 s between attempts.
  python-redis-lock  redis_lock.Lock 4.0.1 (PyPI, bench/peers/requirements.txt):
                     no expiry, no auto-renewal; a waiter blocks in BLPOP on
                     the lock's signal list, which the release pushes to.
  pottery            pottery.Redlock 3.0.1 (PyPI) over the one server:
                     auto_release_time 10 s; a waiter retries after random
                     sleeps.
Each thread has its own lock object (the objects hold their owner token).
"""
import argparse
import sys
import threading
import time

import redis

MAX_ITER = 64 * 1024 * 1024
MAX_RECORDS = 2 * 1024 * 1024


def make_lock(peer, client, name):
    """(acquire(timeout_s) -> bool, release()) for one lock object."""
    if peer == "redis-py":
        lock = client.lock(name)
        return (lambda t: lock.acquire(blocking_timeout=t)), lock.release
    if peer == "python-redis-lock":
        import redis_lock
        import logging
        import math
        # its "Failed to acquire" warning is an outcome here, not an error
        logging.getLogger("redis_lock").setLevel(logging.ERROR)
        lock = redis_lock.Lock(client, name)
        # whole seconds only (0 would block for ever): the last wait of a
        # run may end up to 1 s after the end instant, outside the window
        return (lambda t: lock.acquire(timeout=max(1, math.ceil(t)))), \
            lock.release
    if peer == "pottery":
        import pottery
        lock = pottery.Redlock(key=name, masters={client})
        return (lambda t: lock.acquire(timeout=t)), lock.release
    raise ValueError("unknown peer " + peer)


def loop(peer, client, wid, name, hold_ns, start_ns, end_ns, out, errors):
    acquire, release = make_lock(peer, client, name)
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
            if not acquire((end_ns - now) / 1e9):
                break  # the run ended while waiting
            acq = time.monotonic_ns()
            rel = acq
            while rel - acq < hold_ns:
                rel = time.monotonic_ns()
            release()
            if len(recs) >= MAX_RECORDS:
                break
            recs.append((wid, acq, rel))
    except Exception as e:  # reported, the other threads go on
        errors.append("worker %d: %r" % (wid, e))
    out.extend(recs)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--peer", default="redis-py",
                   choices=["redis-py", "python-redis-lock", "pottery"])
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
        sys.stderr.write("python_worker %d: reached the start instant "
                         "%.1f ms late\n" % (a.worker, late / 1e6))
    out, errors, threads = [], [], []
    for t in range(a.threads):
        wid = a.worker if a.threads == 1 else a.worker * a.threads + t
        name = "%s:%d" % (a.name, wid) if a.distinct else a.name
        th = threading.Thread(target=loop, args=(
            a.peer, client, wid, name, a.hold_us * 1000, start, end, out, errors))
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    with open(a.records, "w") as f:
        f.write("worker,acquire_ns,release_ns\n")
        for r in out:
            f.write("%d,%d,%d\n" % r)
    for e in errors:
        sys.stderr.write("python_worker: %s\n" % e)
    client.close()
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
