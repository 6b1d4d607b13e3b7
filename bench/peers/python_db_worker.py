#!/usr/bin/env python3
"""One worker of bench/db-handoff.c's contended hand-off, in Python.

It takes the lock with the SQL a service would send by hand, the same
statements dlock sends for a name of at most 64 bytes:

  postgres (psycopg 3):  SELECT pg_advisory_lock(hashtextextended(%s, 0))
                         SELECT pg_advisory_unlock(hashtextextended(%s, 0))
  mysql (PyMySQL):       SELECT GET_LOCK(%s, <seconds left>)
                         SELECT RELEASE_LOCK(%s)

on one connection in autocommit mode (the client libraries' defaults
otherwise), and runs the worker loop of db-handoff.c: from START_MS to
END_MS (CLOCK_REALTIME ms), at most MAX sections, each a blocking acquire,
the shared counter file's record (count, last holder, holder inside: three
little-endian u64) read and written, a release. Every wait ends at END_MS
plus 5 s (PostgreSQL: lock_timeout; MySQL: GET_LOCK's timeout).

  python_db_worker.py --db postgres|mysql URL NAME FILE ID START_MS END_MS MAX

It prints one line, `RESULT acq A cross C sections S overlaps O late L
cpu_us U` (U: this process's CPU over the loop),
and exits 0, or 1 after a line on stderr.
"""
import os
import struct
import sys
import time
import urllib.parse

GRACE_MS = 5000
REC = struct.Struct("<QQQ")


def now_ms():
    return time.time_ns() // 1000000


def connect(db, url, end):
    if db == "postgres":
        import psycopg

        conn = psycopg.connect(url, autocommit=True)
        # a bound on every wait: the end instant plus the grace
        ms = max(1, end + GRACE_MS - now_ms())
        conn.execute("SET lock_timeout = %d" % ms)
        lock = "SELECT pg_advisory_lock(hashtextextended(%s, 0))"
        unlock = "SELECT pg_advisory_unlock(hashtextextended(%s, 0))"
        cur = conn.cursor()

        def acquire(name, left_ms):
            cur.execute(lock, (name,))
            cur.fetchone()
            return True

        def release(name):
            cur.execute(unlock, (name,))
            return cur.fetchone()[0] is True

        return conn, acquire, release
    if db == "mysql":
        import pymysql

        u = urllib.parse.urlsplit(url)
        conn = pymysql.connect(
            host=u.hostname,
            port=u.port or 3306,
            user=urllib.parse.unquote(u.username or ""),
            password=urllib.parse.unquote(u.password or ""),
            database=urllib.parse.unquote(u.path.lstrip("/")) or None,
            charset="utf8mb4",
            autocommit=True,
        )
        cur = conn.cursor()

        def acquire(name, left_ms):
            cur.execute("SELECT GET_LOCK(%s, %s)", (name, left_ms / 1000.0))
            return cur.fetchone()[0] == 1

        def release(name):
            cur.execute("SELECT RELEASE_LOCK(%s)", (name,))
            return cur.fetchone()[0] == 1

        return conn, acquire, release
    raise ValueError("--db must be postgres or mysql")


def main(argv):
    if len(argv) != 10 or argv[1] != "--db":
        print("usage: python_db_worker.py --db postgres|mysql URL NAME FILE "
              "ID START_MS END_MS MAX", file=sys.stderr)
        return 2
    db, url, name, path = argv[2], argv[3], argv[4], argv[5]
    wid, start, end, cap = (int(x) for x in argv[6:10])
    fd = os.open(path, os.O_RDWR)
    try:
        conn, acquire, release = connect(db, url, end)
        # warm: one statement on the connection before the start
        if not acquire("%s:warm:%d" % (name, wid), 1000) or not release(
                "%s:warm:%d" % (name, wid)):
            raise RuntimeError("the warm-up lock was not granted")
    except Exception as e:  # one line, as db-handoff.c prints it
        print("worker %d: %s" % (wid, str(e).splitlines()[0] if str(e) else
                                 type(e).__name__), file=sys.stderr)
        return 1
    late = now_ms() - start
    while now_ms() < start:
        time.sleep(min(0.05, (start - now_ms()) / 1000.0))
    cpu0 = time.process_time_ns()
    acq = cross = sections = overlaps = 0
    rc = 0
    try:
        while sections < cap:
            now = now_ms()
            if now >= end:
                break
            if not acquire(name, end + GRACE_MS - now):
                print("worker %d: timed out" % wid, file=sys.stderr)
                rc = 1
                break
            t_in = now_ms()
            count, last, inside = REC.unpack(os.pread(fd, REC.size, 0))
            overlaps += inside != 0
            other = last != 0 and last != wid
            os.pwrite(fd, REC.pack(count + 1, wid, wid), 0)
            os.pwrite(fd, struct.pack("<Q", 0), 16)
            sections += 1
            if t_in < end:
                acq += 1
                cross += other
            if not release(name):
                print("worker %d: the release found no hold" % wid,
                      file=sys.stderr)
                rc = 1
                break
    except Exception as e:
        print("worker %d: %s" % (wid, str(e).splitlines()[0] if str(e) else
                                 type(e).__name__), file=sys.stderr)
        rc = 1
    cpu_us = (time.process_time_ns() - cpu0) // 1000
    print("RESULT acq %d cross %d sections %d overlaps %d late %d cpu_us %d" %
          (acq, cross, sections, overlaps, max(0, late), cpu_us), flush=True)
    conn.close()
    os.close(fd)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
