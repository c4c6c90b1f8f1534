"""Measurements: the tlsfront-bench client, server CPU and memory from /proc,
idle connections and uploads with Python's ssl, and `openssl speed`.

Every step is bounded: each subprocess has a timeout, each socket a timeout,
each loop a count and a deadline.
"""

import json
import os
import re
import socket
import ssl
import subprocess
import threading
import time

from .servers import CIPHER_RUSTLS, cpu_between, cpu_reading, rss_kib


class BenchError(Exception):
    pass


def run_bench(run, mode, url, args, name, timeout, chart=False):
    """`tlsfront-bench MODE URL ...` on the client cpuset; its JSON, or raises."""
    logs = os.path.join(run.dir, "logs")
    os.makedirs(logs, exist_ok=True)
    jpath = os.path.join(logs, name + ".json")
    cmd = ["taskset", "-c", run.client_cpus, run.client, mode, url,
           "--ca", run.ca, "--threads", "1", "--tls-version", "1.3",
           "--cipher", CIPHER_RUSTLS, "--json", jpath] + args
    if chart:
        cmd += ["--chart", os.path.join(logs, name + ".svg")]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{name}: bench did not finish within {timeout:.0f} s")
    with open(os.path.join(logs, name + ".txt"), "w") as f:
        f.write("$ " + " ".join(cmd) + "\n" + out.stdout + out.stderr)
    if out.returncode != 0:
        tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or ["?"]
        raise BenchError(f"{name}: bench exited {out.returncode}: {tail[0]}")
    with open(jpath) as f:
        return json.load(f)


class CpuSampler:
    """Samples the server's CPU seconds four times a second, in a thread."""

    def __init__(self, pids_fn, period=0.25):
        self.pids_fn, self.period = pids_fn, period
        self.samples = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def _loop(self):
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), cpu_reading(self.pids_fn())))
            self._stop.wait(self.period)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(2)
        self.samples.append((time.monotonic(), cpu_reading(self.pids_fn())))

    def utilisation(self, t0, t1):
        """CPU seconds per second between t0 and t1 (nearest samples)."""
        inside = [s for s in self.samples if t0 <= s[0] <= t1]
        if len(inside) < 2:
            return None
        (a, ca), (b, cb) = inside[0], inside[-1]
        return cpu_between(ca, cb) / (b - a) if b > a else None


def with_cpu(pids_fn, fn):
    """Run fn(); return (its result, server CPU seconds, wall seconds)."""
    c0, t0 = cpu_reading(pids_fn()), time.monotonic()
    r = fn()
    c1, t1 = cpu_reading(pids_fn()), time.monotonic()
    return r, cpu_between(c0, c1), t1 - t0


def client_ctx(ca):
    ctx = ssl.create_default_context(cafile=ca)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    return ctx


def idle_connections(port, ca, pids_fn, n, deadline_s=60.0, settle=1.0):
    """Open n TLS connections that stay idle; the server's RSS growth per
    connection (KiB), with the RSS before (KiB) and how many were opened."""
    ctx = client_ctx(ca)
    time.sleep(0.3)
    before = rss_kib(pids_fn())
    socks = []
    end = time.monotonic() + deadline_s
    err = None
    try:
        for _ in range(n):
            if time.monotonic() > end:
                err = "deadline"
                break
            try:
                raw = socket.create_connection(("127.0.0.1", port), timeout=5)
                s = ctx.wrap_socket(raw, server_hostname="localhost")
                socks.append(s)
            except (OSError, ssl.SSLError) as e:
                err = str(e)
                break
        time.sleep(settle)
        after = rss_kib(pids_fn())
    finally:
        for s in socks:
            try:
                s.close()
            except OSError:
                pass
    opened = len(socks)
    return {
        "rss_before_kib": before,
        "rss_after_kib": after,
        "opened": opened,
        "kib_per_conn": (after - before) / opened if opened else None,
        "error": err,
    }


def upload(port, ca, nbytes, timeout=60.0):
    """PUT nbytes of zeros to /upload (the backend answers 204 and discards
    the body), then GET /1k on the same connection, whose answer comes only
    after the whole body went through.  Returns seconds, or raises."""
    ctx = client_ctx(ca)
    buf = memoryview(bytes(1 << 20))
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            s.sendall(f"PUT /upload HTTP/1.1\r\nHost: localhost\r\nContent-Length: {nbytes}\r\n\r\n".encode())
            sent = 0
            while sent < nbytes:
                if time.monotonic() - t0 > timeout:
                    raise BenchError("upload: deadline")
                k = min(len(buf), nbytes - sent)
                s.sendall(buf[:k])
                sent += k
            s.sendall(b"GET /1k HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            data = b""
            while len(data) < 1 << 16:
                if time.monotonic() - t0 > timeout:
                    raise BenchError("upload: deadline waiting for the answers")
                try:
                    chunk = s.recv(65536)
                except ssl.SSLError:
                    break
                if not chunk:
                    break
                data += chunk
                if data.count(b"HTTP/1.1 ") >= 2 and len(data) > 1024 + 300:
                    break
    t1 = time.monotonic()
    if b"HTTP/1.1 204" not in data or b"HTTP/1.1 200" not in data:
        raise BenchError(f"upload: unexpected answer {data[:80]!r}")
    return t1 - t0


def aes_ceiling(cpus, seconds):
    """openssl speed -evp aes-{128,256}-gcm on 16 KiB blocks, MiB/s."""
    out = {}
    for alg in ("aes-128-gcm", "aes-256-gcm"):
        cmd = ["taskset", "-c", cpus, "openssl", "speed", "-evp", alg,
               "-seconds", str(seconds), "-bytes", "16384"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds * 4 + 30)
        except subprocess.TimeoutExpired:
            continue
        m = re.search(r"^" + alg.upper() + r"\s+([\d.]+)k\s*$", r.stdout, re.M)
        if m:
            out[alg] = float(m.group(1)) * 1000 / 2**20
    return out


def cpu_reading_tree(proc):
    """A `cpu_reading` of a Proc's whole process tree."""
    return cpu_reading(proc.pids())
