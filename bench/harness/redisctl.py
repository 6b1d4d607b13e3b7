"""redisctl.py - a private redis-server and a minimal RESP client (stdlib).

RedisServer starts redis-server bound to 127.0.0.1 on a free port in a fresh
temporary directory (no persistence) and stops it by its PID: SIGTERM, then
SIGKILL after 5 s. If the harness dies outright the server dies with it
(setpriv --pdeathsig, when available).

Resp is a blocking client for the harness's own commands (INFO, SCRIPT LOAD,
FLUSHALL). Monitor counts, on its own connection and thread, the commands
MONITOR shows: those sent by clients and those run inside scripts (shown as
"[db lua]"), by name.
"""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time


class RespError(Exception):
    pass


class Resp:
    def __init__(self, port, timeout=10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout)
        self.buf = b""

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def _line(self):
        for _ in range(1 << 20):
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 2:]
                return line
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise RespError("connection closed")
            self.buf += chunk
        raise RespError("line too long")

    def _exact(self, n):
        for _ in range(1 << 20):
            if len(self.buf) >= n:
                data, self.buf = self.buf[:n], self.buf[n:]
                return data
            chunk = self.sock.recv(max(1 << 16, n - len(self.buf)))
            if not chunk:
                raise RespError("connection closed")
            self.buf += chunk
        raise RespError("reply too long")

    def read(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            raise RespError(rest.decode())
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self._exact(n + 2)[:-2]
            return data.decode(errors="replace")
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RespError("bad reply type %r" % t)

    def send(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        self.sock.sendall(b"".join(out))

    def call(self, *args):
        self.send(*args)
        return self.read()

    def info(self, *sections):
        """INFO as a dict; cmdstat_* become {'cmd': {'calls': n, ...}}."""
        text = self.call("INFO", *sections)
        out = {"commandstats": {}}
        for line in text.splitlines():
            if not line or line.startswith("#") or ":" not in line:
                continue
            k, v = line.split(":", 1)
            if k.startswith("cmdstat_"):
                fields = dict(p.split("=", 1) for p in v.split(","))
                out["commandstats"][k[8:]] = int(fields.get("calls", 0))
            elif k.startswith("db") and "keys=" in v:
                out[k] = int(v.split("keys=")[1].split(",")[0])
            else:
                try:
                    out[k] = int(v)
                except ValueError:
                    try:
                        out[k] = float(v)
                    except ValueError:
                        out[k] = v
        return out


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class RedisServer:
    def __init__(self, server="redis-server", log_dir=None):
        self.server = server
        self.log_dir = log_dir
        self.proc = None
        self.dir = None
        self.port = None

    @property
    def url(self):
        return "redis://127.0.0.1:%d" % self.port

    def start(self):
        self.dir = tempfile.mkdtemp(prefix="dlock-bench-redis-")
        pdeath = []
        if shutil.which("setpriv") and subprocess.call(
                ["setpriv", "--pdeathsig", "KILL", "true"],
                stderr=subprocess.DEVNULL) == 0:
            pdeath = ["setpriv", "--pdeathsig", "KILL"]
        for _attempt in range(8):
            self.port = free_port()
            conf = os.path.join(self.dir, "redis.conf")
            with open(conf, "w") as f:
                f.write("bind 127.0.0.1\nport %d\ndir %s\ndaemonize no\n"
                        "save \"\"\nappendonly no\nlogfile %s\n"
                        % (self.port, self.dir,
                           os.path.join(self.dir, "redis.log")))
            self.proc = subprocess.Popen(pdeath + [self.server, conf],
                                         stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL,
                                         stderr=subprocess.DEVNULL)
            for _ in range(1000):  # at most 10 s
                if self.proc.poll() is not None:
                    break
                try:
                    c = Resp(self.port, timeout=1.0)
                    try:
                        if c.call("PING") == "PONG":
                            return self
                    finally:
                        c.close()
                except (OSError, RespError):
                    pass
                time.sleep(0.01)
            self.stop(keep_dir=True)
        raise RuntimeError("redis-server did not start; see %s" % self.dir)

    def client(self):
        return Resp(self.port)

    def stop(self, keep_dir=False):
        p, self.proc = self.proc, None
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        if not keep_dir and self.dir:
            if self.log_dir:
                log = os.path.join(self.dir, "redis.log")
                if os.path.exists(log):
                    shutil.copy(log, os.path.join(self.log_dir, "redis.log"))
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


MARKER = "dlock-bench-monitor-stop"


class Monitor:
    """Counts commands seen by MONITOR until stop()."""

    def __init__(self, port):
        self.conn = Resp(port, timeout=None)
        if self.conn.call("MONITOR") != "OK":
            raise RespError("MONITOR refused")
        self.client = {}   # name -> count, sent by clients
        self.inner = {}    # name -> count, run inside scripts
        self.stopping = False
        self.seen_marker = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @staticmethod
    def _name(rest):
        # rest: "cmd" "arg" ... ; containers get their subcommand
        parts = rest.split('"')
        if len(parts) < 2:
            return "?"
        name = parts[1].lower()
        if name in ("client", "script", "config", "command", "cluster") \
                and len(parts) >= 4:
            name += "|" + parts[3].lower()
        return name

    def _run(self):
        try:
            for _ in range(1 << 40):
                line = self.conn._line()
                if self.stopping:
                    return
                if not line.startswith(b"+"):
                    continue
                s = line.decode(errors="replace")
                if MARKER in s:
                    self.seen_marker.set()
                    continue
                i = s.find("[")
                j = s.find("] ", i)
                if i < 0 or j < 0:
                    continue
                src = s[i + 1:j]
                name = self._name(s[j + 2:])
                d = self.inner if src.endswith(" lua") else self.client
                d[name] = d.get(name, 0) + 1
        except (OSError, RespError, ValueError):
            return

    def stop(self):
        # the counter reads until the stop marker has come through
        marker = Resp(self.conn.sock.getpeername()[1])
        try:
            marker.call("ECHO", MARKER)
        finally:
            marker.close()
        self.seen_marker.wait(30)
        self.stopping = True
        try:
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.thread.join(5)
        self.conn.close()
        return dict(self.client), dict(self.inner)
