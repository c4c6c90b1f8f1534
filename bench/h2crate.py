#!/usr/bin/env python3
"""bench/h2crate: tlsfront's own HTTP/2 framing and HPACK against the
hyperium `h2` crate (crates/bench/src/bin/h2crate_server.rs), on the host.

Owns the measurement behind docs/design/http2.md §6 (issue 27). Both
servers run user-space TLS (rustls on aws-lc-rs, TLS 1.3 AES-128-GCM,
X25519, one certificate) with 2 workers, so what differs is framing, HPACK
and scheduling. The measure is the server process's CPU time (utime +
stime from /proc/PID/stat, as tests/common's `Server::cpu_ticks`) per unit
of work, over h2load runs interleaved round by round; host timings drift,
so only the per-round ratios tlsfront / h2crate mean anything, reported as
their median with the spread.

    cargo build --release -p tlsfront -p tlsfront-bench --bin tlsfront --bin h2crate_server
    bench/h2crate.py                   # 7 rounds of the three cases
    bench/h2crate.py --rounds 3 --only small1
"""

import argparse
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TICK = os.sysconf("SC_CLK_TCK")
MIB = 1024 * 1024

# name: (file, file size, h2load arguments, units of work per run, unit)
CASES = {
    "small1": ("small", 1024, ["-n", "100000", "-c", "1", "-m", "100", "-t", "1"], 100000, "request"),
    "big": ("big", 64 * MIB, ["-n", "8", "-c", "1", "-m", "1", "-t", "1"], 8 * 64, "MiB"),
    "small10": ("small", 1024, ["-n", "100000", "-c", "10", "-m", "100", "-t", "1"], 100000, "request"),
}
LABELS = {
    "small1": "1 KiB file, 1 connection x 100 streams",
    "big": "64 MiB download, 1 stream",
    "small10": "1 KiB file, 10 connections x 100 streams",
}
TLSFRONT_TOML = """\
[limits]
keepalive_requests = 1000000
connections = 30000
"""


def cpu_ticks(pid):
    """utime + stime of the whole process (all its threads), in ticks."""
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[11]) + int(rest[12])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, name, argv, port, log):
        self.name, self.port = name, port
        self.log = open(log, "w")
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, XDG_DATA_HOME=os.path.dirname(log)))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"{name} exited {self.proc.returncode} at start; see {log}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        sys.exit(f"{name} did not listen on {port} within 20 s; see {log}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()


def h2load(port, path, args, timeout=300):
    """One h2load run; its wall seconds, or exits on any failed request."""
    cmd = ["h2load", "--tls13-ciphers=TLS_AES_128_GCM_SHA256", *args,
           f"https://127.0.0.1:{port}/{path}"]
    t0 = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    wall = time.monotonic() - t0
    m = re.search(r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded", out.stdout)
    codes = re.search(r"status codes: (\d+) 2xx", out.stdout)
    if out.returncode != 0 or not m or m.group(1) != m.group(3) or not codes \
            or codes.group(1) != m.group(1) or "TLSv1.3" not in out.stdout \
            or "TLS_AES_128_GCM_SHA256" not in out.stdout or "h2" not in out.stdout:
        sys.exit("h2load failed or not every request succeeded over TLS 1.3 "
                 f"AES-128-GCM h2:\n$ {' '.join(cmd)}\n{out.stdout}{out.stderr}")
    return wall


def measure(server, case):
    path, _, args, units, _ = CASES[case]
    before = cpu_ticks(server.proc.pid)
    wall = h2load(server.port, path, args)
    cpu = (cpu_ticks(server.proc.pid) - before) / TICK
    return cpu / units * 1e6, wall


def spread(xs):
    return f"{min(xs):.3f}-{max(xs):.3f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--only", default=",".join(CASES), help="cases, comma-separated: "
                    + ", ".join(CASES))
    ap.add_argument("--target", default=os.path.join(REPO, "target", "release"))
    a = ap.parse_args()
    cases = [c for c in a.only.split(",") if c]
    for c in cases:
        if c not in CASES:
            sys.exit(f"unknown case {c!r} (--only); valid: {', '.join(CASES)}")
    bins = {n: os.path.join(a.target, n) for n in ("tlsfront", "h2crate_server")}
    for n, b in bins.items():
        if not os.access(b, os.X_OK):
            sys.exit(f"{b} missing: cargo build --release -p tlsfront -p tlsfront-bench "
                     "--bin tlsfront --bin h2crate_server")
    if not shutil.which("h2load"):
        sys.exit("h2load missing (apt-get install nghttp2-client)")

    with tempfile.TemporaryDirectory(prefix="h2crate-") as d:
        www = os.path.join(d, "www")
        os.mkdir(www)
        with open(os.path.join(www, "small"), "wb") as f:
            f.write(os.urandom(1024))
        with open(os.path.join(www, "big"), "wb") as f:
            for _ in range(64):
                f.write(os.urandom(MIB))
        cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "2", "-subj", "/CN=localhost"],
                       check=True, capture_output=True, timeout=60)
        toml = os.path.join(d, "tlsfront.toml")
        with open(toml, "w") as f:
            f.write(TLSFRONT_TOML)
        servers = {}
        try:
            p = free_port()
            servers["tlsfront"] = Server("tlsfront", [
                bins["tlsfront"], "serve", www, "--listen", f"127.0.0.1:{p}", "--cert", cert,
                "--key", key, "--workers", "2", "--config", toml], p,
                os.path.join(d, "tlsfront.log"))
            p = free_port()
            servers["h2crate"] = Server("h2crate", [
                bins["h2crate_server"], www, "--listen", f"127.0.0.1:{p}", "--cert", cert,
                "--key", key, "--workers", "2"], p, os.path.join(d, "h2crate.log"))
            # One unrecorded run of each first (page cache, allocator, JIT of nothing).
            for c in cases:
                for s in servers.values():
                    measure(s, c)
            per = {(c, n): [] for c in cases for n in servers}
            ratios = {c: [] for c in cases}
            for r in range(a.rounds):
                order = ["tlsfront", "h2crate"] if r % 2 == 0 else ["h2crate", "tlsfront"]
                for c in cases:
                    got = {}
                    for n in order:
                        got[n], wall = measure(servers[n], c)
                        per[(c, n)].append(got[n])
                        print(f"round {r + 1} {c:8} {n:9} {got[n]:9.2f} us CPU/{CASES[c][4]}"
                              f"  ({wall:.2f} s wall)", flush=True)
                    ratios[c].append(got["tlsfront"] / got["h2crate"] if got["h2crate"] else 0)
        finally:
            for s in servers.values():
                s.stop()

    print()
    print("| case | tlsfront / h2crate, CPU per unit: median (min-max) "
          "| tlsfront us/unit | h2crate us/unit |")
    print("|---|---|---|---|")
    for c in cases:
        unit = CASES[c][4]
        print(f"| {LABELS[c]} | {statistics.median(ratios[c]):.3f} ({spread(ratios[c])}) "
              f"| {statistics.median(per[(c, 'tlsfront')]):.2f} per {unit} "
              f"| {statistics.median(per[(c, 'h2crate')]):.2f} per {unit} |")
    print(f"\n{a.rounds} interleaved rounds; CPU = utime+stime of the server process "
          f"(ticks of 1/{TICK} s); both user-space TLS 1.3 AES-128-GCM, 2 workers.")


if __name__ == "__main__":
    main()
