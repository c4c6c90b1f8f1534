"""bench/ktls_lib/guest.py: the measuring half of bench/ktls, run INSIDE the
kTLS guest booted with `tests/guest/run.sh --icount`.

Owns one boot's measurements: it copies the served files into the guest's
tmpfs, starts every server (tlsfront serve and proxy, nginx, HAProxy, the
floor programs and the plain backend) once, drives them with clients that
live in this process (every loop bounded by a count), and around each case
reads every task's CPU time (/proc/*/task/*/schedstat, which under icount is
an instruction count), /proc/stat and /proc/net/tls_stat.  Each finished
case is printed as one line `KBENCH-CASE <json>` on stdout, for the host
half (bench/ktls) to collect; progress goes to stdout as plain lines.

    python3 bench/ktls_lib/guest.py WORKDIR CONFIG.json

WORKDIR (on the host, seen through 9p) holds cert.pem, key.pem and the
floor binary; CONFIG.json says which cases and sizes to run.
"""

import ctypes
import itertools
import json
import os
import re
import resource
import shutil
import socket
import ssl
import stat
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
REPO = os.path.dirname(os.path.dirname(HERE))

from compare_lib import servers as S  # noqa: E402

RUN = "/run/kbench"
# Not on the guest's root (an overlay of the host's root, over 9p, under a
# tmpfs): their own file systems.
OTHER_MOUNTS = ("/proc/", "/dev/", "/sys/", "/run/", "/tmp/")
# Sites of the "sites" group: the cost of a front for many names.
SITES = 1000
SUITES = {
    "aes128": "TLS_AES_128_GCM_SHA256",
    "aes256": "TLS_AES_256_GCM_SHA384",
    "chacha": "TLS_CHACHA20_POLY1305_SHA256",
}
# Every connect, read and wait below has a count as its bound; these are
# the counts (virtual time under icount jumps over idle periods, so a
# deadline in seconds would bound nothing real).
CONNECT_TRIES = 20000
READ_CALLS = 1 << 20


def log(msg):
    print("kbench:", msg, flush=True)


def emit(case):
    print("KBENCH-CASE " + json.dumps(case, sort_keys=True), flush=True)


# ---------------------------------------------------------------- readings

def all_tasks():
    """{(pid, tid): run time in ns} for every task in the guest."""
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tids:
            try:
                with open(f"/proc/{p}/task/{t}/schedstat") as f:
                    out[(int(p), int(t))] = int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    return out


def proc_stat():
    """The first /proc/stat line: user nice system idle iowait irq softirq steal."""
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:9]]


def tls_stat():
    out = {}
    try:
        with open("/proc/net/tls_stat") as f:
            for line in f:
                k, v = line.split()
                out[k] = int(v)
    except OSError:
        pass
    return out


TICK_NS = 1e9 / os.sysconf("SC_CLK_TCK")
KTHREAD_NAMES = ("kworker", "ksoftirqd", "kthreadd", "rcu", "migration", "idle_inject", "cpuhp")


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


class Reading:
    """Every task's CPU time, /proc/stat and tls_stat at one moment."""

    def __init__(self):
        self.tasks = all_tasks()
        self.stat = proc_stat()
        self.tls = tls_stat()


def between(r0, r1, server_pids, backend_pids):
    """Instructions between two Readings: the server's tasks, this client,
    the backend, and every other task (kernel threads: work moved out of
    the process lands there), plus /proc/stat's busy time for the guest."""
    me = os.getpid()
    groups = {"server": 0, "client": 0, "backend": 0, "other": 0}
    other_by = {}
    for (p, t), ns in r1.tasks.items():
        d = ns - r0.tasks.get((p, t), 0)
        if p in server_pids:
            groups["server"] += d
        elif p == me:
            groups["client"] += d
        elif p in backend_pids:
            groups["backend"] += d
        else:
            groups["other"] += d
            if d > 0:
                name = comm(t)
                for k in KTHREAD_NAMES:
                    if name.startswith(k):
                        name = k
                        break
                other_by[name] = other_by.get(name, 0) + d
    ds = [b - a for a, b in zip(r0.stat, r1.stat)]
    busy = ds[0] + ds[1] + ds[2] + ds[5] + ds[6] + ds[7]
    tls = {k: r1.tls.get(k, 0) - r0.tls.get(k, 0) for k in r1.tls
           if r1.tls.get(k, 0) != r0.tls.get(k, 0)}
    return {
        "instructions": groups,
        "other_tasks": dict(sorted(other_by.items(), key=lambda kv: -kv[1])[:6]),
        "proc_stat_busy_instructions": busy * TICK_NS,
        "proc_stat_softirq_instructions": ds[6] * TICK_NS,
        "proc_stat_system_instructions": ds[2] * TICK_NS,
        "tls_stat_delta": tls,
    }


# ---------------------------------------------------------------- servers

class Server:
    def __init__(self, name, argv, port, kind):
        self.name, self.argv, self.port, self.kind = name, argv, port, kind
        self.log = open(os.path.join(RUN, f"{name}.log"), "ab")
        self.popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log,
                                      stderr=subprocess.STDOUT, start_new_session=True)
        for _ in range(CONNECT_TRIES):
            if self.popen.poll() is not None:
                raise SystemExit(f"kbench: {name} exited with {self.popen.returncode}: {self.tail()}")
            if self.listening():
                break
            time.sleep(0.01)
        else:
            raise SystemExit(f"kbench: {name} did not listen on {port}: {self.tail()}")

    def listening(self):
        # The floor programs take every connection as a client (a probe
        # would be one): they say when they listen.  The servers are probed.
        if self.kind in ("floor", "backend"):
            return "listening" in self.tail()
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=5).close()
            return True
        except OSError:
            return False

    def tail(self):
        self.log.flush()
        try:
            with open(os.path.join(RUN, f"{self.name}.log"), "rb") as f:
                return f.read()[-600:].decode(errors="replace")
        except OSError:
            return "?"

    def pids(self):
        if self.popen.poll() is not None:
            raise SystemExit(f"kbench: {self.name} died ({self.popen.returncode}): {self.tail()}")
        return set(S.tree(self.popen.pid))

    def stop(self):
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(20)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.popen.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        self.log.close()


_PORTS = itertools.count(19001)


def next_port():
    return next(_PORTS)


def start_servers(cfg):
    cert, key = os.path.join(RUN, "cert.pem"), os.path.join(RUN, "key.pem")
    pem = os.path.join(RUN, "cert+key.pem")
    tlsfront = os.path.join(RUN, "tlsfront")
    floor = os.path.join(RUN, "floor")
    big = os.path.join(RUN, "www", "big")
    suites = ":".join(SUITES.values())
    srv = {}
    p = next_port()
    srv["backend"] = Server("backend", [floor, "backend", str(p), big, "1000000"], p, "backend")
    backend = p
    toml = os.path.join(RUN, "tlsfront.toml")
    with open(toml, "w") as f:
        f.write(S.TLSFRONT_TOML)
    p = next_port()
    srv["tlsfront"] = Server("tlsfront", [tlsfront, "serve", os.path.join(RUN, "www"), "--listen",
                                          f"127.0.0.1:{p}", "--cert", cert, "--key", key,
                                          "--workers", "1", "--config", toml], p, "serve")
    p = next_port()
    common = dict(dir=RUN, port=p, www=os.path.join(RUN, "www"), cert=cert, key=key, pem=pem,
                  cipher=suites, backend=backend)
    conf = os.path.join(RUN, "nginx.conf")
    tls = S.NGINX_TLS.format(**common) + "    ssl_conf_command Options KTLS;\n"
    with open(conf, "w") as f:
        f.write(S.NGINX.format(tag="tls", ssl=" ssl", tls=tls, **common))
    srv["nginx"] = Server("nginx", ["nginx", "-p", RUN, "-c", conf, "-e",
                                    os.path.join(RUN, "nginx-error.log")], p, "serve")
    only = set(cfg.get("only") or [])
    if not only or "keepalive" in only:
        # Both servers with and without an open-file cache: tlsfront keeps
        # files open by default, nginx only with open_file_cache (here set
        # as tlsfront's defaults are).
        p = next_port()
        srv["tlsfront-nocache"] = Server("tlsfront-nocache", [
            tlsfront, "serve", os.path.join(RUN, "www"), "--listen", f"127.0.0.1:{p}", "--cert", cert,
            "--key", key, "--workers", "1", "--config", toml, "--open-file-cache", "0"], p, "serve")
        p = next_port()
        common.update(port=p)
        conf = os.path.join(RUN, "nginx-cache.conf")
        cache = "    open_file_cache max=1000;\n    open_file_cache_valid 1s;\n"
        with open(conf, "w") as f:
            f.write(S.NGINX.format(tag="cache", ssl=" ssl", tls=tls + cache, **common))
        srv["nginx-cache"] = Server("nginx-cache", ["nginx", "-p", RUN, "-c", conf, "-e",
                                                    os.path.join(RUN, "nginx-cache-error.log")], p, "serve")
    if not only or "sites" in only:
        # The same server with SITES sites: 999 others, then the one the
        # clients ask for (localhost), each with its own certificate
        # objects, as a front for many names holds them.
        sites = os.path.join(RUN, "sites.toml")
        with open(sites, "w") as f:
            for i in range(SITES - 1):
                f.write(f'[[site]]\nnames = ["s{i}.bench.test"]\nroot = "{RUN}/www"\n'
                        f'cert = "{cert}"\nkey = "{key}"\n')
            f.write(f'[[site]]\nnames = ["localhost"]\nroot = "{RUN}/www"\n'
                    f'cert = "{cert}"\nkey = "{key}"\n')
            f.write(S.TLSFRONT_TOML)
        p = next_port()
        srv["tlsfront-sites"] = Server("tlsfront-sites", [tlsfront, "run", "--config", sites, "--listen",
                                                          f"127.0.0.1:{p}", "--workers", "1"], p, "serve")
    if not only or "privsep" in only:
        # With `user`: a root parent and a server process as nobody, the
        # key kept by the parent (which signs each full handshake) or
        # handed over as nginx's master does.
        for name, keys in (("tlsfront-user-keys", "true"), ("tlsfront-user", "false")):
            conf = os.path.join(RUN, f"{name}.toml")
            with open(conf, "w") as f:
                f.write(f'user = "nobody"\nkeys_in_parent = {keys}\n' + S.TLSFRONT_TOML)
            p = next_port()
            srv[name] = Server(name, [tlsfront, "serve", os.path.join(RUN, "www"), "--listen",
                                      f"127.0.0.1:{p}", "--cert", cert, "--key", key,
                                      "--workers", "1", "--config", conf], p, "serve")
    if not only or "h2" in only or "pageload" in only:
        # HTTP/2: nginx with `http2` on its listener (1.22 spells it
        # there), and tlsfront with HTTP/2 off for HTTP/1.1 through the
        # same client (tlsfront offers h2 by default).
        p = next_port()
        common.update(port=p)
        conf = os.path.join(RUN, "nginx-h2.conf")
        with open(conf, "w") as f:
            f.write(S.NGINX.format(tag="h2", ssl=" ssl http2", tls=tls, **common))
        srv["nginx-h2"] = Server("nginx-h2", ["nginx", "-p", RUN, "-c", conf, "-e",
                                              os.path.join(RUN, "nginx-h2-error.log")], p, "serve")
        h1 = os.path.join(RUN, "tlsfront-h1.toml")
        with open(h1, "w") as f:
            f.write("http2 = false\n" + S.TLSFRONT_TOML)
        p = next_port()
        srv["tlsfront-h1"] = Server("tlsfront-h1", [tlsfront, "serve", os.path.join(RUN, "www"), "--listen",
                                                    f"127.0.0.1:{p}", "--cert", cert, "--key", key,
                                                    "--workers", "1", "--config", h1], p, "serve")
    p = next_port()
    srv["tlsfront-proxy"] = Server("tlsfront-proxy", [tlsfront, "proxy", "--listen", f"127.0.0.1:{p}",
                                                      "--backend", f"127.0.0.1:{backend}", "--cert", cert,
                                                      "--key", key, "--workers", "1"], p, "proxy")
    p = next_port()
    common.update(port=p)
    conf = os.path.join(RUN, "haproxy.cfg")
    with open(conf, "w") as f:
        f.write(S.HAPROXY.format(**common))
    srv["haproxy"] = Server("haproxy", ["haproxy", "-db", "-f", conf], p, "proxy")
    for c in SUITES:
        p = next_port()
        srv[f"floor-{c}"] = Server(f"floor-{c}", [floor, "serve", str(p), big, c, "1000"], p, "floor")
    p = next_port()
    srv["floor-proxy-down"] = Server("floor-proxy-down", [floor, "proxy-down", str(p), str(backend),
                                                          "aes128", "1000"], p, "floor")
    p = next_port()
    srv["floor-proxy-up"] = Server("floor-proxy-up", [floor, "proxy-up", str(p), str(backend), "aes128",
                                                      "1000", str(cfg["size"])], p, "floor")
    return srv


# ---------------------------------------------------------------- clients

_libssl = ctypes.CDLL("libssl.so.3")
_libssl.SSL_CTX_set_ciphersuites.argtypes = [ctypes.c_void_p, ctypes.c_char_p]


def client_ctx(suite):
    """A TLS 1.3 client context that offers only `suite`.  Python's ssl has
    no call for TLS 1.3 suites, so OpenSSL's own is called on the context
    (the SSL_CTX pointer follows the object header); every connection
    checks the suite it got, so a wrong pointer could not go unseen."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # the client's cost is not measured; skip its work
    ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    ptr = ctypes.c_void_p.from_address(id(ctx) + 2 * ctypes.sizeof(ctypes.c_void_p)).value
    if _libssl.SSL_CTX_set_ciphersuites(ptr, SUITES[suite].encode()) != 1:
        raise SystemExit("kbench: SSL_CTX_set_ciphersuites failed")
    return ctx


class BioConn:
    """A TLS connection whose transport this process drives (MemoryBIO), so
    that after the handshake the server's records can be read raw and
    thrown away undecrypted: the client's share of the single vCPU stays
    small and nothing of it is counted anyway."""

    def __init__(self, port, ctx, suite):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=600)
        self.inc, self.out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = ctx.wrap_bio(self.inc, self.out, server_hostname="localhost")
        for _ in range(1000):
            try:
                self.obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                self.flush()
                data = self.sock.recv(65536)
                if not data:
                    raise SystemExit("kbench: the server closed during the handshake")
                self.inc.write(data)
        self.flush()
        got = self.obj.cipher()[0]
        if got != SUITES[suite]:
            raise SystemExit(f"kbench: negotiated {got}, wanted {SUITES[suite]}")

    def flush(self):
        data = self.out.read()
        if data:
            self.sock.sendall(data)

    def send(self, data):
        for i in range(0, len(data), 16384):
            self.obj.write(data[i:i + 16384])
            self.flush()

    def read_line(self):
        """Decrypts until a line arrives (post-handshake tickets are taken in passing)."""
        buf = b""
        for _ in range(READ_CALLS):
            try:
                buf += self.obj.read(65536)
                if b"\n" in buf:
                    return buf
            except ssl.SSLWantReadError:
                data = self.sock.recv(65536)
                if not data:
                    return buf
                self.inc.write(data)
            except ssl.SSLZeroReturnError:
                return buf
        return buf

    def close(self):
        self.sock.close()


FULL_RECORD = 16384 + 17  # TLS 1.3: a full plaintext, its content type byte, the tag


def read_raw(sock):
    """Reads TLS records until the peer's EOF, without decrypting them; the
    byte count and how many records came, and how many were full (a server
    that sends short records pays the per-record cost more often)."""
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    total = records = full = need = 0
    head = b""
    for _ in range(READ_CALLS):
        n = sock.recv_into(buf)
        if n == 0:
            return {"wire_bytes": total, "records": records, "full_records": full}
        total += n
        pos = 0
        while pos < n:  # each turn consumes at least one byte
            if need:
                take = min(need, n - pos)
                pos += take
                need -= take
                continue
            take = min(5 - len(head), n - pos)
            head += bytes(view[pos:pos + take])
            pos += take
            if len(head) == 5:
                need = int.from_bytes(head[3:5], "big")
                records += 1
                full += need == FULL_RECORD
                head = b""
    raise SystemExit("kbench: more reads than the bound")


def floor_key(cipher):
    """The fixed kTLS key of floor.c, as the struct setsockopt(TLS_TX) takes."""
    def fill(n, base):
        return bytes((base + i) & 0xFF for i in range(n))
    if cipher == "aes128":
        return struct.pack("<HH", 0x0304, 51) + fill(8, 0x40) + fill(16, 0x10) + fill(4, 0x60) + bytes(8)
    if cipher == "aes256":
        return struct.pack("<HH", 0x0304, 52) + fill(8, 0x40) + fill(32, 0x10) + fill(4, 0x60) + bytes(8)
    return struct.pack("<HH", 0x0304, 54) + fill(12, 0x40) + fill(32, 0x10) + bytes(8)


def settle():
    """Lets the server finish what the client's last close started (it is
    runnable; this process sleeps, so it runs)."""
    time.sleep(0.05)


# ---------------------------------------------------------------- cases

def http_get(s, path, close=False):
    """One GET on an SSLSocket; the body length (checks 200 and Content-Length)."""
    req = f"GET {path} HTTP/1.1\r\nHost: localhost\r\n"
    if close:
        req += "Connection: close\r\n"
    s.sendall((req + "\r\n").encode())
    buf = b""
    for _ in range(READ_CALLS):
        i = buf.find(b"\r\n\r\n")
        if i >= 0:
            break
        chunk = s.recv(65536)
        if not chunk:
            raise SystemExit(f"kbench: connection closed before a response head ({buf[:60]!r})")
        buf += chunk
    head, body = buf[:i].decode("latin-1"), buf[i + 4:]
    if not head.startswith("HTTP/1.1 200"):
        raise SystemExit(f"kbench: unexpected response {head[:60]!r}")
    length = None
    for line in head.split("\r\n")[1:]:
        k, _, v = line.partition(":")
        if k.strip().lower() == "content-length":
            length = int(v)
    if length is None:
        raise SystemExit("kbench: response without Content-Length")
    for _ in range(READ_CALLS):
        if len(body) >= length:
            break
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    if len(body) != length:
        raise SystemExit(f"kbench: body {len(body)} bytes, expected {length}")
    return length


# ---------------------------------------------------------------- profiles

# One sample per this many nanoseconds of CPU time: under icount, per this
# many guest instructions.
PROFILE_PERIOD = 50000


class Profile:
    """`perf record -a -g` around one case: started with its events off,
    switched on and off through perf's control fifo (so its own start-up,
    which reads every process's maps, is not sampled), then reported for the
    server's processes only."""

    def __init__(self, tag):
        self.data = os.path.join(RUN, f"perf-{tag}.data")
        # Kernel symbols by name (the guest is thrown away afterwards).
        for knob, v in (("kptr_restrict", "0"), ("perf_event_paranoid", "-1")):
            with open(f"/proc/sys/kernel/{knob}", "w") as f:
                f.write(v)
        ctl, ack = os.path.join(RUN, "perf-ctl"), os.path.join(RUN, "perf-ack")
        for f in (ctl, ack):
            if os.path.exists(f):
                os.unlink(f)
            os.mkfifo(f)
        self.err = open(os.path.join(RUN, "perf.log"), "ab")
        self.p = subprocess.Popen(
            ["perf", "record", "-a", "-g", "-e", "cpu-clock", "-c", str(PROFILE_PERIOD),
             "-D", "-1", "--control", f"fifo:{ctl},{ack}", "-o", self.data],
            stdin=subprocess.DEVNULL, stdout=self.err, stderr=self.err)
        # perf opens both fifos read-write: these opens do not wait for it.
        self.ctl = open(ctl, "w")
        self.ack = open(ack, "rb", buffering=0)

    def command(self, c):
        self.ctl.write(c + "\n")
        self.ctl.flush()
        got = self.ack.read(5)
        if not got.startswith(b"ack"):
            raise SystemExit(f"kbench: perf did not acknowledge {c!r} ({got!r})")

    def __enter__(self):
        self.command("enable")
        return self

    def __exit__(self, *exc):
        self.command("disable")
        self.p.send_signal(2)
        self.p.wait(600)
        self.ctl.close()
        self.ack.close()
        self.err.close()

    def report(self, pids, lines=40):
        """The server's kernel and user shares, then its hottest symbols,
        each as a share of the server's own samples."""
        r = subprocess.run(
            ["perf", "report", "-i", self.data, "--stdio", "--no-children", "-g", "none",
             "--percentage", "relative", "--sort", "sym",
             "--pid", ",".join(str(p) for p in sorted(pids))],
            capture_output=True, text=True, timeout=600)
        samples = next((l for l in r.stdout.splitlines() if l.startswith("# Samples")), "# Samples: ?")
        rows = []
        for l in r.stdout.splitlines():
            parts = l.split(None, 2)
            if len(parts) == 3 and parts[0].endswith("%") and parts[1] in ("[k]", "[.]"):
                rows.append((float(parts[0][:-1]), parts[1], parts[2].strip()))
        kernel = sum(p for p, k, _ in rows if k == "[k]")
        user = sum(p for p, k, _ in rows if k == "[.]")
        out = [samples.lstrip("# "), f"kernel {kernel:.1f} %, user space {user:.1f} %"]
        out += [f"{p:6.2f} %  {k} {name}" for p, k, name in rows[:lines]]
        return "\n".join(out)


def measured(srv, backend, fn):
    pids = srv.pids()
    bpids = backend.pids()
    r0 = Reading()
    detail = fn()
    settle()
    r1 = Reading()
    out = between(r0, r1, pids | srv.pids(), bpids)
    out["detail"] = detail
    return out


def download(srv, backend, cipher, path, size):
    """One download; ciphertext read raw.  Floors get a plain connection."""
    if srv.kind == "floor":
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=600)
        if srv.name != "floor-proxy-down":
            s.sendall(b"GET\n")
        got = read_raw(s)
        s.close()
        return got
    c = BioConn(srv.port, client_ctx(cipher), cipher)
    if srv.kind == "proxy":
        c.send(b"D\n")
    else:
        c.send(f"GET /{path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
    got = read_raw(c.sock)
    c.close()
    if got["wire_bytes"] < size:
        raise SystemExit(f"kbench: {srv.name}: {got['wire_bytes']} bytes on the wire, expected more than {size}")
    return got


def upload(srv, cipher, size, chunk=bytes(1 << 20)):
    """size bytes through the proxy to the backend, which answers the count."""
    if srv.kind == "floor":
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=600)
        s.setsockopt(socket.SOL_TCP, 31, b"tls")  # TCP_ULP
        s.setsockopt(282, 1, floor_key(cipher))  # SOL_TLS, TLS_TX
        sent = 0
        for _ in range(READ_CALLS):
            if sent >= size:
                break
            sent += s.send(chunk[:min(len(chunk), size - sent)])
        line = s.recv(64)
        s.close()
    else:
        c = BioConn(srv.port, client_ctx(cipher), cipher)
        c.send(f"U {size}\n".encode())
        for _ in range(size // len(chunk)):
            c.send(chunk)
        c.send(chunk[:size % len(chunk)])
        line = c.read_line()
        c.close()
    if line.strip() != str(size).encode():
        raise SystemExit(f"kbench: {srv.name}: the backend answered {line[:40]!r}, expected {size}")
    return {"bytes": size}


def first_session(srv):
    """A session ticket from one full handshake, to resume from (uncounted)."""
    ctx = client_ctx("aes128")
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", srv.port), timeout=600),
                        server_hostname="localhost")
    http_get(s, "/1k", close=True)
    session = s.session
    s.close()
    return ctx, session


def sessions(srv, n, resume, primed=None):
    """n connections, each: handshake, GET /1k, close; resumed ones offer
    the session ticket the previous connection received (the first, the one
    of `primed`, a (context, session) from first_session)."""
    ctx, session = primed or (client_ctx("aes128"), None)
    reused = 0
    for _ in range(n):
        raw = socket.create_connection(("127.0.0.1", srv.port), timeout=600)
        s = ctx.wrap_socket(raw, server_hostname="localhost", session=session if resume else None)
        http_get(s, "/1k", close=True)
        reused += s.session_reused
        if resume:
            session = s.session
        s.close()
    if resume and reused < n:
        raise SystemExit(f"kbench: {srv.name}: only {reused} of {n} sessions were resumed")
    if not resume and reused:
        raise SystemExit(f"kbench: {srv.name}: {reused} sessions resumed in the full-handshake case")
    return {"sessions": n, "resumed": reused}


# `--kx` of tlsfront-bench: the group it offers alone, and the name it
# reports when that group was negotiated.
KX_GROUPS = {"x25519mlkem768": "X25519MLKEM768", "x25519": "X25519"}


def bench_client(srv, kx, n):
    """tlsfront-bench (a rustls client, the only one here with ML-KEM) as a
    subprocess: `download` of /1k, n connections one after another, each a
    full handshake offering only `kx`, the GET and a close, after its probe
    (one more full handshake, without GET).  Every connection must have
    negotiated `kx`'s group, else the run stops.  Its instructions, summed
    over its threads when it was reaped, are read from RUSAGE_CHILDREN."""
    out = os.path.join(RUN, f"bench-{srv.name}-{kx}.json")
    argv = [os.path.join(RUN, "tlsfront-bench"), "download", f"https://localhost:{srv.port}/1k",
            "--runs", str(n), "--kx", kx, "--cipher", "TLS13_AES_128_GCM_SHA256", "--no-resume",
            "--insecure", "--threads", "1", "--json", out]
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"kbench: {srv.name}: tlsfront-bench --kx {kx} failed ({r.returncode}): "
                         f"{(r.stdout + r.stderr)[-800:]}")
    with open(out) as f:
        v = json.load(f)
    want = KX_GROUPS[kx]
    conns = [v["negotiated"]] + [d["connection"] for run in v["runs"] for d in run["downloads"]]
    groups = sorted({c["group"] for c in conns})
    if len(conns) != n + 1 or groups != [want]:
        raise SystemExit(f"kbench: {srv.name}: --kx {kx}: {len(conns)} connections negotiated "
                         f"{groups}, wanted {n + 1} with {want}")
    sizes = {d["bytes"] for run in v["runs"] for d in run["downloads"]}
    if sizes != {1024} or v["summary"]["handshakes_resumed"]:
        raise SystemExit(f"kbench: {srv.name}: --kx {kx}: bodies {sorted(sizes)}, "
                         f"{v['summary']['handshakes_resumed']} resumed")
    return {"connections": n + 1, "group": want, "suite": v["negotiated"]["suite"],
            "version": v["negotiated"]["version"],
            "client_instructions": (c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime) * 1e9,
            "report": r.stdout.splitlines()[:2]}


def difference(big, small):
    """big - small, field by field: the counts of what the larger run did
    beyond the smaller (numbers, and dicts of numbers)."""
    out = {}
    for k, v in big.items():
        if isinstance(v, dict):
            out[k] = {kk: vv - small.get(k, {}).get(kk, 0) for kk, vv in v.items()
                      if isinstance(vv, (int, float))}
        elif isinstance(v, (int, float)):
            out[k] = v - small.get(k, 0)
    return out


def keepalive_requests(s, n):
    for _ in range(n):
        http_get(s, "/1k")
    return {"requests": n}


def rss_parts(pids):
    """RssAnon, RssFile and RssShmem summed over pids, KiB: which kind of
    page a growth is made of (code paged in counts in VmRSS too)."""
    out = {}
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    k = line.split(":")[0]
                    if k in ("RssAnon", "RssFile", "RssShmem"):
                        out[k] = out.get(k, 0) + int(line.split()[1])
        except OSError:
            continue
    return out


def idle_rss(srv, n):
    """n connections, each resumed, one GET /1k answered, then left open:
    the server's RSS growth.  (Resumption only saves the client's time;
    what an established connection holds does not depend on it.)"""
    ctx = client_ctx("aes128")
    first = ctx.wrap_socket(socket.create_connection(("127.0.0.1", srv.port)), server_hostname="localhost")
    http_get(first, "/1k")
    session = first.session
    settle()
    before = S.rss_kib(srv.pids())
    parts0 = rss_parts(srv.pids())
    t0 = tls_stat()
    socks = []
    try:
        for _ in range(n):
            s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", srv.port), timeout=600),
                                server_hostname="localhost", session=session)
            http_get(s, "/1k")
            session = s.session
            socks.append(s)
        time.sleep(1.0)
        after = S.rss_kib(srv.pids())
        parts1 = rss_parts(srv.pids())
        t1 = tls_stat()
    finally:
        for s in socks:
            s.close()
        first.close()
    settle()
    return {"connections": n, "rss_before_kib": before, "rss_after_kib": after,
            "kib_per_conn": (after - before) / n,
            "parts_kib_per_conn": {k: (parts1.get(k, 0) - parts0.get(k, 0)) / n for k in parts1},
            "tls_curr_tx": t1.get("TlsCurrTxSw", 0) - t0.get("TlsCurrTxSw", 0),
            "tls_curr_rx": t1.get("TlsCurrRxSw", 0) - t0.get("TlsCurrRxSw", 0)}


def h2load(srv, path, n, streams, h1, size):
    """nghttp2's h2load: n GETs of `path` on one connection, `streams` in
    flight (h2) or pipelined (h1), AES-128-GCM, the largest windows (its
    default 2^30 - 1), so flow control never waits on the client.  Its
    own instructions are not counted (a finished task's are gone)."""
    argv = ["h2load", "-n", str(n), "-c", "1", "-m", str(streams),
            "--tls13-ciphers=TLS_AES_128_GCM_SHA256", f"https://127.0.0.1:{srv.port}{path}"]
    if h1:
        argv.insert(1, "--h1")
    r = subprocess.run(argv, capture_output=True, text=True, timeout=3600)
    out = r.stdout
    proto = "http/1.1" if h1 else "h2"
    if (r.returncode != 0 or f"Application protocol: {proto}" not in out
            or f"requests: {n} total, {n} started, {n} done, {n} succeeded" not in out
            or f"status codes: {n} 2xx" not in out):
        raise SystemExit(f"kbench: {srv.name}: h2load {path} failed ({r.returncode}): "
                         f"{(out + r.stderr)[-800:]}")
    traffic = next((l for l in out.splitlines() if l.startswith("traffic:")), "")
    if size and "total" in traffic:
        # "traffic: 64.03MB (67141671) total, ..."
        wire = int(traffic.split("(")[1].split(")")[0])
        if wire < size * n:
            raise SystemExit(f"kbench: {srv.name}: {wire} bytes received, expected {size * n}")
    return {"requests": n, "streams": streams, "protocol": proto, "traffic": traffic.strip()}


H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def h2_frame(kind, flags, stream, payload=b""):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def h2_open(port, ctx, session):
    """A TLS connection with ALPN h2 that has exchanged SETTINGS both ways
    (the server's acknowledged, ours acknowledged by the server), then
    sends nothing more."""
    s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=600),
                        server_hostname="localhost", session=session)
    if s.selected_alpn_protocol() != "h2":
        raise SystemExit(f"kbench: ALPN picked {s.selected_alpn_protocol()!r}, not h2")
    s.sendall(H2_PREFACE + h2_frame(4, 0, 0))
    buf = b""
    theirs = acked = False
    for _ in range(READ_CALLS):
        if theirs and acked:
            return s
        while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
            n = int.from_bytes(buf[:3], "big")
            kind, flags = buf[3], buf[4]
            if kind == 4 and flags & 1:
                acked = True
            elif kind == 4:
                theirs = True
                s.sendall(h2_frame(4, 1, 0))
            elif kind == 7:
                raise SystemExit(f"kbench: GOAWAY from the server: {buf[9:9 + n]!r}")
            buf = buf[9 + n:]
        if theirs and acked:
            return s
        chunk = s.recv(65536)
        if not chunk:
            raise SystemExit("kbench: the server closed an h2 connection during SETTINGS")
        buf += chunk
    raise SystemExit("kbench: more reads than the bound")


def idle_h2(srv, n):
    """n h2 connections (resumed), each past the SETTINGS exchange and no
    request, then left open: the server's RSS growth."""
    ctx = client_ctx("aes128")
    ctx.set_alpn_protocols(["h2"])
    first = h2_open(srv.port, ctx, None)
    session = first.session
    settle()
    before = S.rss_kib(srv.pids())
    parts0 = rss_parts(srv.pids())
    t0 = tls_stat()
    socks = []
    try:
        for _ in range(n):
            s = h2_open(srv.port, ctx, session)
            session = s.session or session
            socks.append(s)
        time.sleep(1.0)
        after = S.rss_kib(srv.pids())
        parts1 = rss_parts(srv.pids())
        t1 = tls_stat()
    finally:
        for s in socks:
            s.close()
        first.close()
    settle()
    return {"connections": n, "rss_before_kib": before, "rss_after_kib": after,
            "kib_per_conn": (after - before) / n,
            "parts_kib_per_conn": {k: (parts1.get(k, 0) - parts0.get(k, 0)) / n for k in parts1},
            "tls_curr_tx": t1.get("TlsCurrTxSw", 0) - t0.get("TlsCurrTxSw", 0),
            "tls_curr_rx": t1.get("TlsCurrRxSw", 0) - t0.get("TlsCurrRxSw", 0)}


# ---------------------------------------------------------------- page load

# The "pageload" group: a page as a static site serves it, an index.html
# linking PAGE_ASSETS small files (a few style sheets and scripts, mostly
# images), fetched as a browser does (the index, then what it links) over
# loopback slowed by netem. Under icount the guest's clock advances one
# nanosecond per instruction and jumps over idle time to the next timer, so
# time.monotonic() around the client is netem's delays plus the
# instructions of client, server and kernel: deterministic, not wall time.
PAGE_DIR = "page"
PAGE_ASSETS = 100
PAGE_CSS, PAGE_JS = 4, 6
PAGE_MIN, PAGE_MAX = 1536, 8192
# netem's delay on lo's egress; data and ACKs both cross it, so the round
# trip is twice this.
PAGE_DELAY_MS = 20
# A network path's MTU for the group: with lo's 65536 the initial
# congestion window (10 segments) would carry the whole page in one flight.
PAGE_MTU = 1500
# A browser's flow-control windows (Chrome: 6 MiB per stream, 15 MiB per
# connection); with nghttp's own 64 KiB the client's WINDOW_UPDATEs, not
# the server, would pace the page.
NGHTTP_WINDOWS = ("-w", "23", "-W", "24")
# HTTP/1.1: connections per host, as browsers open.
H1_CONNECTIONS = 6


def make_page():
    """The page under www/page: {asset name: size}; sizes spread evenly over
    PAGE_MIN..PAGE_MAX, the same bytes in every boot."""
    d = os.path.join(RUN, "www", PAGE_DIR)
    os.makedirs(d)
    os.chmod(d, 0o755)
    block = bytes(range(256)) * (PAGE_MAX // 256 + 2)
    assets = {}
    head, body = [], []
    for i in range(PAGE_ASSETS):
        ext = "css" if i < PAGE_CSS else "js" if i < PAGE_CSS + PAGE_JS else "png"
        name = f"a{i:03d}.{ext}"
        size = PAGE_MIN + (i * 2749) % (PAGE_MAX - PAGE_MIN + 1)
        with open(os.path.join(d, name), "wb") as f:
            f.write(block[i % 256:i % 256 + size])
        os.chmod(os.path.join(d, name), 0o644)
        assets[name] = size
        if ext == "css":
            head.append(f'<link rel="stylesheet" href="{name}">')
        elif ext == "js":
            head.append(f'<script src="{name}"></script>')
        else:
            body.append(f'<p><img src="{name}" alt="picture {i}" width="64" height="64"></p>')
    html = ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<title>page</title>\n" + "\n".join(head) + "\n</head>\n<body>\n<h1>page</h1>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")
    with open(os.path.join(d, "index.html"), "w") as f:
        f.write(html)
    os.chmod(os.path.join(d, "index.html"), 0o644)
    assets["index.html"] = len(html)
    return assets


def sh_guest(argv):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"kbench: {' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()[-400:]}")


def write_sysctl(name, value):
    path = "/proc/sys/" + name.replace(".", "/")
    with open(path) as f:
        old = f.read().strip()
    with open(path, "w") as f:
        f.write(str(value))
    return old


def set_delay(ms):
    """netem on lo with `ms` of one-way delay (0: no qdisc)."""
    subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root"], capture_output=True, timeout=600)
    if ms:
        sh_guest(["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", f"{ms}ms"])


def client_env():
    """The clients' environment: our certificate as their whole trust store
    (a browser's is loaded once; OpenSSL's default bundle would be parsed
    at every start), no configuration files of the user's."""
    nocerts = os.path.join(RUN, "no-certs")
    os.makedirs(nocerts, exist_ok=True)
    return {"PATH": "/usr/bin:/bin", "HOME": RUN, "SSL_CERT_FILE": os.path.join(RUN, "cert.pem"),
            "SSL_CERT_DIR": nocerts}


def copy_up(path, depth=0):
    """Copies `path` from the overlay's 9p lower layer up to its tmpfs
    (a utime to its own times does it), and every symbolic link on the way.
    Each open of a file still below costs a 9p round trip to the host, and
    while the guest waits for one, its clock jumps to its next timer: the
    clients must open only files above."""
    if depth > 40 or not path.startswith("/") or path.startswith(OTHER_MOUNTS):
        return
    parts = [p for p in path.split("/") if p]
    cur = "/"
    for i, comp in enumerate(parts):
        nxt = os.path.join(cur, comp)
        try:
            st = os.lstat(nxt)
        except OSError:
            return
        if stat.S_ISLNK(st.st_mode):
            os.utime(nxt, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
            target = os.path.join(cur, os.readlink(nxt))
            return copy_up(os.path.normpath(os.path.join(target, *parts[i + 1:])), depth + 1)
        cur = nxt
    if stat.S_ISREG(st.st_mode):
        os.utime(cur, ns=(st.st_atime_ns, st.st_mtime_ns))


OPENED = re.compile(r'(?:execve|open|openat)\((?:AT_FDCWD, )?"([^"]+)".* = \d+$')


def copy_up_client(argv, env):
    """Runs argv once under strace and copies up every file it opened."""
    trace = os.path.join(RUN, "strace.out")
    r = subprocess.run(["strace", "-f", "-qq", "-e", "trace=execve,open,openat", "-o", trace] + argv,
                       env=env, cwd=RUN, capture_output=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"kbench: strace {' '.join(argv[:3])} failed: {r.stderr[-400:]!r}")
    n = 0
    with open(trace) as f:
        for line in f:
            m = OPENED.search(line.strip())
            if m:
                copy_up(os.path.join(RUN, m.group(1)))
                n += 1
    return n


def nghttp_ms(v):
    """nghttp -s's "+10.51ms", "+606us", "+1.23s" in milliseconds."""
    v = v.lstrip("+")
    for unit, scale in (("ms", 1.0), ("us", 1e-3), ("s", 1e3)):
        if v.endswith(unit):
            return float(v[:-len(unit)]) * scale
    raise SystemExit(f"kbench: nghttp timing {v!r} not understood")


def nghttp_size(n):
    """nghttp -s's size column (nghttp2's util::utos_unit)."""
    for shift, unit in ((30, "G"), (20, "M"), (10, "K")):
        if n >= 1 << shift:
            return f"{n >> shift}{unit}"
    return str(n)


def nghttp_argv(srv):
    return ["/usr/bin/nghttp", "-a", "-n", "-s", *NGHTTP_WINDOWS,
            f"https://127.0.0.1:{srv.port}/{PAGE_DIR}/index.html"]


def curl_argv():
    # -q first: no ~/.curlrc
    return ["/usr/bin/curl", "-q", "-s", "-S", "--no-progress-meter", "--cacert",
            os.path.join(RUN, "cert.pem"), "--http1.1", "-w", CURL_W]


def timed(argv, env):
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, cwd=RUN)
    return r, time.monotonic() - t0


def page_h2(srv, assets, env):
    """`nghttp -a`: the index, then every asset it links, on one connection."""
    r, secs = timed(nghttp_argv(srv), env)
    got = {}
    prefix = f"/{PAGE_DIR}/"
    # "id  responseEnd requestStart  process code size request path"
    for line in r.stdout.splitlines():
        f = line.split()
        if len(f) == 7 and f[0].isdigit() and f[6].startswith(prefix):
            got[f[6][len(prefix):]] = (f[4], f[5], nghttp_ms(f[1]), nghttp_ms(f[2]))
    bad = [n for n, size in assets.items()
           if n not in got or got[n][0] != "200" or got[n][1] != nghttp_size(size)]
    if r.returncode != 0 or bad or len(got) != len(assets):
        raise SystemExit(f"kbench: {srv.name}: nghttp -a: status {r.returncode}, {len(got)} responses, "
                         f"wrong or missing: {bad[:5]}: {(r.stdout + r.stderr)[-600:]}")
    return secs, {"connections": 1, "responses": len(got), "index_end_ms": got["index.html"][2],
                  "last_end_ms": max(g[2] for g in got.values())}


CURL_W = "%{http_code} %{num_connects} %{size_download} %{url_effective}\\n"


def page_h1(srv, assets, env):
    """HTTP/1.1 as a browser fetches it: curl for the index; the links read
    from it; one curl for them all, H1_CONNECTIONS in parallel on as many
    keep-alive connections."""
    base = f"https://127.0.0.1:{srv.port}/{PAGE_DIR}/"
    index = os.path.join(RUN, "page-index.html")
    curl = curl_argv()
    t0 = time.monotonic()
    r1 = subprocess.run(curl + ["-o", index, base + "index.html"], capture_output=True, text=True,
                        timeout=600, env=env, cwd=RUN)
    with open(index, "rb") as f:
        links = re.findall(rb'(?:href|src)="([^"]+)"', f.read())
    argv = curl + ["--parallel", "--parallel-max", str(H1_CONNECTIONS)]
    for link in links:
        argv += [base + link.decode(), "-o", "/dev/null"]
    r2 = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, cwd=RUN)
    secs = time.monotonic() - t0
    got, connects = {}, 0
    for line in (r1.stdout + r2.stdout).splitlines():
        code, n, size, url = line.split()
        got[url[len(base):]] = (code, int(size))
        connects += int(n)
    bad = [n for n, size in assets.items() if got.get(n) != ("200", size)]
    if r1.returncode or r2.returncode or bad or len(got) != len(assets):
        raise SystemExit(f"kbench: {srv.name}: curl: status {r1.returncode}/{r2.returncode}, "
                         f"{len(got)} responses, wrong or missing: {bad[:5]}: "
                         f"{(r1.stderr + r2.stderr)[-600:]}")
    # the index's connection, then the parallel ones: keep-alive, not one per asset
    if connects != 1 + H1_CONNECTIONS:
        raise SystemExit(f"kbench: {srv.name}: curl opened {connects} connections, "
                         f"expected 1 + {H1_CONNECTIONS}")
    return secs, {"connections": connects, "responses": len(got)}


# TCP's counters kept per page load: segments, and any loss or
# retransmission that would add round trips; IP's bytes (on lo each byte
# is sent once and received once).
TCP_COUNTERS = ("OutOctets", "ActiveOpens", "InSegs", "OutSegs", "RetransSegs", "TCPTimeouts", "TCPLossProbes",
                "TCPLossProbeRecovery", "TCPSynRetrans", "TCPFastRetrans", "TCPSlowStartRetrans",
                "TCPSpuriousRTOs", "TCPRcvQDrop", "PruneCalled", "TCPBacklogDrop", "ListenOverflows",
                "ListenDrops", "TCPOFOQueue", "DelayedACKs", "TCPAutoCorking")


def tcp_counters():
    """/proc/net/snmp's Tcp and /proc/net/netstat's TcpExt and IpExt counters."""
    out = {}
    for path in ("/proc/net/snmp", "/proc/net/netstat"):
        with open(path) as f:
            lines = f.read().splitlines()
        for names, values in zip(lines[::2], lines[1::2]):
            if names.startswith(("Tcp:", "TcpExt:", "IpExt:")):
                for k, v in zip(names.split()[1:], values.split()[1:]):
                    out[k] = int(v)
    return out


def qdisc_stats():
    """lo's root qdisc: (packets sent, dropped)."""
    r = subprocess.run(["tc", "-s", "qdisc", "show", "dev", "lo"], capture_output=True, text=True,
                       timeout=600)
    m = re.search(r"Sent \d+ bytes (\d+) pkt \(dropped (\d+)", r.stdout)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def page_load(srv, assets, h1, env):
    """One page load: its time (virtual ms); the instructions of the server,
    of the client processes (their CPU time, RUSAGE_CHILDREN) and of this
    process and every other task meanwhile; and the rest of the time, when
    the guest was idle: waiting on the network (netem's timers)."""
    pids = srv.pids()
    me = os.getpid()
    q0 = qdisc_stats()
    t0 = tcp_counters()
    r0 = Reading()
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    secs, detail = (page_h1 if h1 else page_h2)(srv, assets, env)
    r1tasks = all_tasks()
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t1 = tcp_counters()
    busy = sum(ns - r0.tasks.get(k, 0) for k, ns in r1tasks.items() if k[0] != me)
    settle()
    r1 = Reading()
    q1 = qdisc_stats()
    m = between(r0, r1, pids | srv.pids(), set())
    client = (c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime) * 1e9
    mine = sum(ns - r0.tasks.get(k, 0) for k, ns in r1tasks.items() if k[0] == me)
    # the idle tasks (pid 0) are not in /proc: what no task ran is idle
    idle = secs * 1e9 - busy - client - mine
    return dict(detail, ms=secs * 1e3, server_instructions=m["instructions"]["server"],
                other_instructions=m["instructions"]["other"], client_instructions=client,
                idle_ms=idle / 1e6, qdisc_packets=q1[0] - q0[0], qdisc_drops=q1[1] - q0[1],
                tcp={k: t1.get(k, 0) - t0.get(k, 0) for k in TCP_COUNTERS if t1.get(k, 0) != t0.get(k, 0)})


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def pageload(srv, names, rounds):
    """Every server's page loads: without delay, then with netem, each
    round taking the servers in turn; {name: summary} with the medians."""
    assets = make_page()
    h1 = {name: name == "tlsfront-h1" for name in names}
    with open("/sys/class/net/lo/mtu") as f:
        old_mtu = int(f.read())
    # Each connection starts from the kernel's defaults, as to a server not
    # seen before: no ssthresh or RTT remembered from the previous load.
    old_metrics = write_sysctl("net.ipv4.tcp_no_metrics_save", 1)
    sh_guest(["ip", "tcp_metrics", "flush", "all"])
    sh_guest(["ip", "link", "set", "lo", "mtu", str(PAGE_MTU)])
    runs = {name: {0: [], PAGE_DELAY_MS: []} for name in names}
    env = client_env()
    try:
        # the clients' files copied up out of 9p, then a warm-up load each
        h1srv = next(srv[n] for n in names if h1[n])
        base = f"https://127.0.0.1:{h1srv.port}/{PAGE_DIR}/"
        opened = copy_up_client(nghttp_argv(srv[names[0]]), env)
        opened += copy_up_client(curl_argv() + ["--parallel", "--parallel-max", str(H1_CONNECTIONS),
                                                base + "index.html", "-o", "/dev/null",
                                                base + "a000.css", "-o", "/dev/null"], env)
        log(f"page load: {opened} files the clients open copied up")
        for name in names:
            page_load(srv[name], assets, h1[name], env)
        for delay in (0, PAGE_DELAY_MS):
            set_delay(delay)
            for rnd in range(rounds):
                for name in names:
                    r = page_load(srv[name], assets, h1[name], env)
                    runs[name][delay].append(r)
                    log(f"page load {name}, delay {delay} ms, round {rnd + 1}: {r['ms']:.1f} ms, "
                        f"idle {r['idle_ms']:.1f} ms, client {r['client_instructions'] / 1e6:.1f} M, "
                        f"server {r['server_instructions'] / 1e6:.2f} M, netem {r['qdisc_packets']} packets "
                        f"{r['qdisc_drops']} dropped, TCP {r['tcp']}")
    finally:
        set_delay(0)
        sh_guest(["ip", "link", "set", "lo", "mtu", str(old_mtu)])
        write_sysctl("net.ipv4.tcp_no_metrics_save", old_metrics)
    rtt = 2 * PAGE_DELAY_MS
    out = {}
    for name in names:
        slow, fast = runs[name][PAGE_DELAY_MS], runs[name][0]
        ms, ms0 = median(r["ms"] for r in slow), median(r["ms"] for r in fast)
        out[name] = {
            "client": ("curl --http1.1, then curl --parallel --parallel-max 6" if h1[name]
                       else "nghttp -a"),
            "assets": PAGE_ASSETS, "page_bytes": sum(assets.values()), "rtt_ms": rtt, "mtu": PAGE_MTU,
            "rounds": rounds, "median_ms": ms, "median_ms_nodelay": ms0,
            # time the guest waited on netem, in round trips
            "round_trips": median(r["idle_ms"] for r in slow) / rtt,
            "idle_ms": median(r["idle_ms"] for r in slow),
            "idle_ms_nodelay": median(r["idle_ms"] for r in fast),
            "server_instructions": median(r["server_instructions"] for r in slow),
            "server_instructions_nodelay": median(r["server_instructions"] for r in fast),
            "client_instructions": median(r["client_instructions"] for r in slow),
            "connections": slow[0]["connections"],
            "runs": slow, "runs_nodelay": fast,
        }
    return out


# ---------------------------------------------------------------- main

def prepare(work, cfg):
    if os.path.exists(RUN):
        shutil.rmtree(RUN)
    os.makedirs(os.path.join(RUN, "www"))
    os.chmod(RUN, 0o755)
    os.chmod(os.path.join(RUN, "www"), 0o755)
    for name in ("cert.pem", "key.pem", "floor"):
        shutil.copy(os.path.join(work, name), os.path.join(RUN, name))
    shutil.copy(cfg["tlsfront"], os.path.join(RUN, "tlsfront"))
    if cfg.get("bench_client"):
        shutil.copy(cfg["bench_client"], os.path.join(RUN, "tlsfront-bench"))
    with open(os.path.join(RUN, "cert+key.pem"), "w") as f:
        f.write(open(os.path.join(RUN, "cert.pem")).read() + open(os.path.join(RUN, "key.pem")).read())
    for name in ("cert.pem", "key.pem", "cert+key.pem"):
        os.chmod(os.path.join(RUN, name), 0o644)
    # the same bytes in every boot: a fixed pattern (compression plays no part)
    block = bytes(range(256)) * 4096
    with open(os.path.join(RUN, "www", "big"), "wb") as f:
        for _ in range(cfg["size"] // len(block)):
            f.write(block)
    with open(os.path.join(RUN, "www", "1k"), "wb") as f:
        f.write(block[:1024])
    with open(os.path.join(RUN, "www", "1m"), "wb") as f:
        f.write(block[:1 << 20])
    for name in ("big", "1k", "1m"):
        os.chmod(os.path.join(RUN, "www", name), 0o644)
    resource.setrlimit(resource.RLIMIT_NOFILE, (65536, 65536))


def versions(cfg):
    def first_line(cmd):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            return ((r.stdout + r.stderr).strip().splitlines() or ["?"])[0]
        except (OSError, subprocess.TimeoutExpired):
            return "?"
    return {"kernel": os.uname().release, "tlsfront": first_line([cfg["tlsfront"], "--version"]),
            "nginx": first_line(["nginx", "-v"]), "haproxy": first_line(["haproxy", "-v"]),
            "openssl": ssl.OPENSSL_VERSION}


def main():
    work, cfg_path = sys.argv[1], sys.argv[2]
    with open(cfg_path) as f:
        cfg = json.load(f)
    os.environ["PATH"] += ":/usr/sbin:/sbin"
    prepare(work, cfg)
    print("KBENCH-META " + json.dumps(versions(cfg)), flush=True)
    srv = start_servers(cfg)
    backend = srv["backend"]
    size = cfg["size"]
    mib = size / (1 << 20)
    only = set(cfg.get("only") or [])

    def want(group):
        return not only or group in only

    def case(group, name, server, unit, units, fn, **extra):
        log(f"{name} {server.name}")
        if cfg.get("profile"):
            # Profiled, the figures include perf's sampling: only the
            # profile is reported.
            with Profile(f"{group}-{server.name}") as prof:
                fn()
            print("KBENCH-PROFILE " + json.dumps(dict(
                case=name, server=server.name, units=units, unit=unit, period=PROFILE_PERIOD,
                report=prof.report(server.pids()))), flush=True)
            return
        m = measured(server, backend, fn)
        m.update(case=name, group=group, server=server.name, unit=unit, units=units, **extra)
        emit(m)

    try:
        # warm-up: each server's code and its libraries are paged in (over
        # 9p) before anything is counted
        for c in SUITES:
            download(srv["tlsfront"], backend, c, "1m", 1 << 20)
            download(srv["nginx"], backend, c, "1m", 1 << 20)
        for name in ("tlsfront", "nginx"):
            sessions(srv[name], 5, False)
            sessions(srv[name], 5, True, first_session(srv[name]))
        for name in ("tlsfront-proxy", "haproxy"):
            download(srv[name], backend, "aes128", None, 0)
            upload(srv[name], "aes128", 1 << 20)

        if want("download"):
            for c in SUITES:
                for name in ("tlsfront", "nginx", f"floor-{c}"):
                    case("download", f"download {c}", srv[name], "MiB", mib,
                         lambda: download(srv[name], backend, c, "big", size), cipher=c)
        if want("proxy"):
            for name in ("tlsfront-proxy", "haproxy", "floor-proxy-down"):
                case("proxy", "proxy download aes128", srv[name], "MiB", mib,
                     lambda: download(srv[name], backend, "aes128", None, size), cipher="aes128")
            for name in ("tlsfront-proxy", "haproxy", "floor-proxy-up"):
                case("proxy", "proxy upload aes128", srv[name], "MiB", mib,
                     lambda: upload(srv[name], "aes128", size), cipher="aes128")
        if want("handshake"):
            n = cfg["sessions"]
            for resume in (False, True):
                label = "resumed" if resume else "full"
                for name in ("tlsfront", "nginx"):
                    primed = first_session(srv[name]) if resume else None
                    case("handshake", f"{label} handshake + GET 1k", srv[name], "session", n,
                         lambda: sessions(srv[name], n, resume, primed), cipher="aes128")
        if want("kx"):
            # The key exchange's cost: tlsfront-bench offers one group, and
            # each server is counted over two of its runs, one connection
            # and n + 1 (after the probe each), the first taken from the
            # second: n full handshakes + GET 1k, nothing of the client's
            # start-up or probe.  The client's instructions are its own.
            n = cfg["sessions"]
            for label, name, kx in (("tlsfront-mlkem", "tlsfront", "x25519mlkem768"),
                                    ("tlsfront-x25519", "tlsfront", "x25519"),
                                    ("nginx-x25519", "nginx", "x25519")):
                server = srv[name]
                bench_client(server, kx, 5)
                title = "full handshake + GET 1k, rustls client offering one group"
                log(f"{title} {label}")
                if cfg.get("profile"):
                    with Profile(f"kx-{label}") as prof:
                        bench_client(server, kx, n)
                    print("KBENCH-PROFILE " + json.dumps(dict(
                        case=title, server=label, units=n, unit="session", period=PROFILE_PERIOD,
                        report=prof.report(server.pids()))), flush=True)
                    continue
                small = measured(server, backend, lambda: bench_client(server, kx, 1))
                big = measured(server, backend, lambda: bench_client(server, kx, n + 1))
                m = difference(big, small)
                m["instructions"]["client"] += (big["detail"]["client_instructions"]
                                                - small["detail"]["client_instructions"])
                m["detail"] = dict(big["detail"], method=f"runs of {n + 2} and 2 connections, subtracted",
                                   small=small, big={k: v for k, v in big.items() if k != "detail"})
                m.update(case=title, group="kx", server=label, unit="session", units=n,
                         cipher="aes128", kx=big["detail"]["group"])
                emit(m)
        if want("privsep"):
            n = cfg["sessions"]
            for name in ("tlsfront-user", "tlsfront-user-keys"):
                sessions(srv[name], 5, False)
                sessions(srv[name], 5, True, first_session(srv[name]))
            for resume in (False, True):
                label = "resumed" if resume else "full"
                for name in ("tlsfront", "tlsfront-user", "tlsfront-user-keys"):
                    primed = first_session(srv[name]) if resume else None
                    case("privsep", f"{label} handshake + GET 1k, alone / with user", srv[name],
                         "session", n, lambda: sessions(srv[name], n, resume, primed), cipher="aes128")
        if want("keepalive"):
            n = cfg["requests"]
            for name in ("tlsfront", "nginx", "tlsfront-nocache", "nginx-cache"):
                ctx = client_ctx("aes128")
                s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", srv[name].port), timeout=600),
                                    server_hostname="localhost")
                keepalive_requests(s, 3)
                case("keepalive", "keep-alive GET 1k", srv[name], "request", n,
                     lambda: keepalive_requests(s, n), cipher="aes128")
                s.close()
        if want("repeat"):
            # the same case again, late in the same boot: its spread
            for name in ("tlsfront", "nginx", "floor-aes128"):
                case("repeat", "download aes128 (again)", srv[name], "MiB", mib,
                     lambda: download(srv[name], backend, "aes128", "big", size), cipher="aes128")
            for name in ("tlsfront-proxy", "haproxy", "floor-proxy-down"):
                case("repeat", "proxy download aes128 (again)", srv[name], "MiB", mib,
                     lambda: download(srv[name], backend, "aes128", None, size), cipher="aes128")
            for name in ("tlsfront", "nginx"):
                primed = first_session(srv[name])
                case("repeat", "resumed handshake + GET 1k (again)", srv[name], "session", cfg["sessions"],
                     lambda: sessions(srv[name], cfg["sessions"], True, primed), cipher="aes128")
        if want("sites"):
            n = cfg["sessions"]
            for name in ("tlsfront-sites", "tlsfront"):
                sessions(srv[name], 5, False)
                case("sites", f"full handshake + GET 1k, {SITES} sites vs 1", srv[name], "session", n,
                     lambda: sessions(srv[name], n, False), cipher="aes128")
            for name in ("tlsfront-sites", "tlsfront"):
                primed = first_session(srv[name])
                case("sites", f"resumed handshake + GET 1k, {SITES} sites vs 1", srv[name], "session", n,
                     lambda: sessions(srv[name], n, True, primed), cipher="aes128")
            settle()
            one, many = S.rss_kib(srv["tlsfront"].pids()), S.rss_kib(srv["tlsfront-sites"].pids())
            emit(dict(case=f"RSS per site ({SITES} sites)", group="sitemem", server="tlsfront-sites",
                      unit="site", units=SITES - 1,
                      detail={"sites": SITES, "rss_one_kib": one, "rss_many_kib": many,
                              "kib_per_site": (many - one) / (SITES - 1)}))
        if want("h2"):
            for name in ("tlsfront", "nginx-h2", "tlsfront-h1"):
                h2load(srv[name], "/1m", 2, 1, name == "tlsfront-h1", 1 << 20)
                h2load(srv[name], "/1k", 200, 100, name == "tlsfront-h1", 0)
            for name in ("tlsfront", "nginx-h2", "tlsfront-h1"):
                case("h2", "h2load download aes128", srv[name], "MiB", mib,
                     lambda: h2load(srv[name], "/big", 1, 1, name == "tlsfront-h1", size), cipher="aes128")
            n = cfg["requests"]
            for name in ("tlsfront", "nginx-h2"):
                case("h2", "h2load GET 1k, 100 streams on 1 connection", srv[name], "request", n,
                     lambda: h2load(srv[name], "/1k", n, 100, False, 0), cipher="aes128")
            for name in ("tlsfront", "nginx-h2"):
                log(f"idle h2 {name}")
                d = idle_h2(srv[name], cfg["idle"])
                emit(dict(case="idle kTLS h2 connection", group="h2idle", server=name, unit="connection",
                          units=cfg["idle"], detail=d, cipher="aes128"))
        if want("pageload") and not cfg.get("profile"):
            rounds = cfg.get("rounds", 5)
            for name, d in pageload(srv, ("tlsfront", "nginx-h2", "tlsfront-h1"), rounds).items():
                emit(dict(case=f"page load, {d['assets']} assets, {d['rtt_ms']} ms RTT", group="pageload",
                          server=name, unit="page load", units=rounds, detail=d))
        if want("idle"):
            for name in ("tlsfront", "nginx"):
                log(f"idle {name}")
                d = idle_rss(srv[name], cfg["idle"])
                emit(dict(case="idle kTLS connection", group="idle", server=name, unit="connection",
                          units=cfg["idle"], detail=d, cipher="aes128"))
    finally:
        for s in srv.values():
            s.stop()
    print("KBENCH-DONE", flush=True)


if __name__ == "__main__":
    main()
