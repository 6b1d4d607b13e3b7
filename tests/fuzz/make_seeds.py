#!/usr/bin/env python3
"""make_seeds.py - writes the seed corpora of fuzz_reply and fuzz_cli_args.

The seeds are committed (tests/fuzz/corpus/NAME/); this script only says
how they were made, so that they can be read and regenerated. The formats
are those documented at the top of fuzz_reply.c and fuzz_cli_args.c.
Usage: tests/fuzz/make_seeds.py (writes into the folder next to it).
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

# fuzz_reply ops (op % 11)
ACQ, ACQ_WAIT, ACQ_FOREVER, REL, FORCE, LOCKED, COUNT, STATE, AS, PAUSE, \
    PING = range(11)
F_PASSWORD, F_USER, F_DB, F_NAME, F_WATCHDOG, F_BRACES = 1, 2, 4, 8, 16, 32
CLOSE, PUSH = 1, 2


def rec(payload, ctl=0):
    if isinstance(payload, str):
        payload = payload.encode("latin-1")
    return bytes([ctl]) + struct.pack("<H", len(payload)) + payload


def reply_seed(flags, ops, *records):
    return bytes([flags, len(ops) - 1]) + bytes(ops) + b"".join(records)


def bulk(s):
    return "$%d\r\n%s\r\n" % (len(s), s)


PONG = rec("+PONG\r\n")
NIL = rec("$-1\r\n")
OK = rec("+OK\r\n")
SUBSCRIBED = rec("*3\r\n$9\r\nsubscribe\r\n\x02\x01:1\r\n")

REPLY = {
    "ping": reply_seed(0, [PING], PONG, PONG),
    "acquire-release": reply_seed(0, [ACQ, REL], PONG, NIL, rec(":1\r\n")),
    "acquire-busy": reply_seed(0, [ACQ], PONG, rec(":2500\r\n")),
    "release-down": reply_seed(0, [ACQ, ACQ, REL, REL], PONG, NIL, NIL,
                               rec(":0\r\n"), rec(":1\r\n")),
    "release-notowner": reply_seed(0, [REL], PONG, NIL),
    "handshake": reply_seed(F_PASSWORD | F_USER | F_DB | F_NAME, [PING],
                            OK, OK, OK, PONG, PONG),
    "auth-refused": reply_seed(F_PASSWORD, [PING],
                               rec("-WRONGPASS invalid username-password "
                                   "pair or user is disabled.\r\n")),
    "noscript": reply_seed(0, [ACQ], PONG,
                           rec("-NOSCRIPT No matching script.\r\n"), NIL),
    "queries": reply_seed(0, [LOCKED, COUNT], PONG, rec(":1\r\n"),
                          rec(":0\r\n"), rec(bulk("3")), rec(":1234\r\n")),
    "state": reply_seed(0, [STATE], PONG, rec(
        "*4\r\n" + bulk("hash") + ":1000\r\n*2\r\n" + bulk("c1:5") +
        bulk("2") + "*2\r\n" + bulk("c2:7:1:30000") + bulk("c3:9:4:500"))),
    "state-free": reply_seed(0, [STATE], PONG, rec(
        "*4\r\n" + bulk("none") + ":-2\r\n*0\r\n*0\r\n")),
    "state-wrongtype": reply_seed(0, [STATE], PONG, rec(
        "*4\r\n" + bulk("string") + ":-1\r\n*0\r\n*0\r\n")),
    "force": reply_seed(0, [FORCE, FORCE], PONG, rec(":1\r\n"),
                        rec(":0\r\n")),
    # a wait: busy, the two SUBSCRIBEs confirmed, queued, then the hand-off
    # message on the grant channel (pushed before the next answer)
    "wait-grant": reply_seed(0, [ACQ_WAIT, REL], PONG, rec(":500\r\n"),
                             SUBSCRIBED, SUBSCRIBED, rec(":500\r\n"),
                             rec("*3\r\n$7\r\nmessage\r\n\x02\x01\x03",
                                 PUSH), rec(":1\r\n")),
    "wait-timeout": reply_seed(0, [ACQ_WAIT], PONG, rec(":30\r\n"),
                               SUBSCRIBED, SUBSCRIBED, rec(":30\r\n"),
                               rec(":30\r\n"), rec(":0\r\n")),
    "wait-wake": reply_seed(F_BRACES, [ACQ_WAIT], PONG, rec(":500\r\n"),
                            SUBSCRIBED, SUBSCRIBED, rec(":500\r\n"),
                            rec("*3\r\n$7\r\nmessage\r\n\x02\x01" +
                                bulk("0"), PUSH), NIL),
    "subscribe-refused": reply_seed(0, [ACQ_WAIT], PONG, rec(":500\r\n"),
                                    rec("-NOPERM this user has no "
                                        "permissions to access one of the "
                                        "channels\r\n"),
                                    SUBSCRIBED),
    "renew": reply_seed(F_WATCHDOG, [ACQ_WAIT, PAUSE, PAUSE, REL], PONG,
                        NIL, rec("*1\r\n:1\r\n"), rec("*1\r\n:0\r\n"),
                        rec(":1\r\n")),
    "acquire-as": reply_seed(0, [AS], PONG, NIL, rec(":1\r\n")),
    "forever": reply_seed(0, [ACQ_FOREVER], PONG, rec(":20\r\n"), SUBSCRIBED,
                          SUBSCRIBED, rec(":20\r\n"), rec(":20\r\n"), NIL),
    "errors": reply_seed(0, [ACQ, REL, LOCKED, STATE], PONG,
                         rec("-WRONGTYPE Operation against a key holding the "
                             "wrong kind of value\r\n"),
                         rec("-LOADING Redis is loading\r\n"),
                         rec("-NOPERM no\r\n"), rec("-ERR boom\r\n")),
    "garbage": reply_seed(0, [ACQ, PING], PONG, rec("!bad\r\n"), PONG),
    "huge-int": reply_seed(0, [ACQ, COUNT], PONG,
                           rec(":99999999999999999999999\r\n"),
                           rec(bulk("-5")),
                           rec(":-9223372036854775808\r\n")),
    "nested": reply_seed(0, [STATE], PONG, rec("*1\r\n" * 9 + ":1\r\n")),
    "big-array": reply_seed(0, [ACQ], PONG, rec("*100000\r\n")),
    "truncated": reply_seed(0, [ACQ, PING], PONG, rec("$10\r\nabc"),
                            rec("defghij\r\n"), PONG),
    "closed": reply_seed(0, [ACQ, PING], PONG, rec("", CLOSE), PONG),
}

CLI = [
    ["-u", "redis://:pw@127.0.0.1:6379/0", "name", "true"],
    ["--url=redis://alice:s%40cret@host:1", "-n", "-E", "7", "lock", "sh"],
    ["-w", "2.5", "-l", "10", "--on-lost=kill", "--kill-after", "1", "x",
     "-c", "echo hi"],
    ["--status", "--json", "-uunix:///tmp/r.sock?db=2", "q"],
    ["--force-unlock", "-u", "redis://[::1]:6380", "a{b}c"],
    ["-vv", "--watchdog", "0.003", "--password-file", "/dev/null", "n"],
    ["-u", "rediss://h", "n", "true"],
    ["-nvx", "-w5", "--", "-name-", "cmd", "--", "arg"],
    ["--help"],
    ["--version"],
    ["-u", "redis://u@h:99999/x", "n"],
]


# Inputs of failures found by fuzzing, replayed one test each
# (regressions/NAME/FILE).
REGRESSIONS = {
    "reply": {
        # HGET answered with a negative integer: dlock_lock_hold_count()
        # must not report a negative count (a wrong reply type is
        # DLOCK_EPROTO)
        "hold-count-negative-integer": reply_seed(0, [COUNT], PONG,
                                                  rec(":-3\r\n"),
                                                  rec(":1\r\n")),
        # a wait told that the holder has INT64_MAX ms left: the sleep
        # bound now + pttl must not overflow (signed overflow in
        # wait_loop(), src/core/lock.c)
        "wait-huge-pttl": reply_seed(0, [ACQ_WAIT], PONG,
                                     rec(":9223372036854775807\r\n"),
                                     SUBSCRIBED, SUBSCRIBED,
                                     rec(":9223372036854775807\r\n"),
                                     rec(":0\r\n")),
        # a reply announcing 2^31-1 elements: hiredis 0.14 callocs 16 GiB
        # for the element array before a single element arrives (libFuzzer:
        # out-of-memory, malloc(17179869176)); the library should cap the
        # element count (a redisReader created with its own createArray)
        "huge-array-count": reply_seed(0, [ACQ, PING], PONG,
                                       rec("*2147483647\r\n"), PONG),
        # both SUBSCRIBEs of a wait refused (an ACL user without channel
        # permissions), the second answer 10 ms after the first: the
        # waiter has given up and freed its channel by then, and the
        # background thread reads the freed grant-channel name
        # (heap-use-after-free in dlock__chans_refused_locked)
        "subscribe-refused-late-uaf": reply_seed(
            0, [ACQ_WAIT, PAUSE, PAUSE], PONG, rec(":500\r\n"),
            rec("-NOPERM this user has no permissions to access one of "
                "the channels used as arguments\r\n"),
            rec(""),
            rec("-NOPERM this user has no permissions to access one of "
                "the channels used as arguments\r\n")),
    },
    "cli_args": {
        # a mistyped option quotes the argument back, password and all
        # (dlock(1): "A password is never printed")
        "usage-echo-unknown-option": b"\0".join(
            [b"--urll=redis://:Sekr3t-pw@h", b"n", b"true"]),
        "usage-echo-bad-seconds": b"\0".join(
            [b"-w", b"redis://:Sekr3t-pw@h", b"n", b"true"]),
        # the usage messages hide a URL's password only up to a '/', '?'
        # or '#' (the library's grammar), argv scrubbing and the -u
        # messages up to the last '@' (what a user may type): the
        # unencoded "Pa/Sekr3t-pw" is echoed
        "usage-echo-slash-in-password": b"\0".join(
            [b"--urll=redis://:Pa/Sekr3t-pw@h", b"n", b"true"]),
        # a fraction below a millisecond rounds up past CLI_SECS_MAX: the
        # value must be refused (cli_parse_secs() -3), not become
        # 1000000000001 ms
        "secs-max-rounding": b"\0".join(
            [b"-w", b"1000000000.0001", b"n", b"true"]),
    },
}


def main():
    d = os.path.join(HERE, "corpus", "reply")
    os.makedirs(d, exist_ok=True)
    for name, data in REPLY.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
    for target, inputs in REGRESSIONS.items():
        d = os.path.join(HERE, "regressions", target)
        os.makedirs(d, exist_ok=True)
        for name, data in inputs.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
    d = os.path.join(HERE, "corpus", "cli_args")
    os.makedirs(d, exist_ok=True)
    for i, argv in enumerate(CLI):
        with open(os.path.join(d, "seed-%02d" % (i + 1)), "wb") as f:
            f.write(b"\0".join(a.encode() for a in argv))


if __name__ == "__main__":
    main()
