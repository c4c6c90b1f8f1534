"""bench/compare --mode h2: static files over HTTP/2, tlsfront serve against
nginx, Caddy and h2o, loaded by h2load (nghttp2-client).

Owns the HTTP/2 servers' configurations, the h2load runs and their parsing,
the interleaved rounds and the h2 report. Every server: the same ECDSA P-256
certificate, TLS 1.3 only (the client offers TLS_AES_128_GCM_SHA256 alone,
as Caddy cannot restrict TLS 1.3 suites), ALPN h2 only (h2load fails rather
than fall back to HTTP/1.1), two workers, access logs off. The figure is the
server process tree's CPU time per unit (/proc), not throughput: the host's
cores are shared with other work.
"""

import json
import os
import re
import statistics
import subprocess
import time

from . import servers as S

NAMES = ["tlsfront", "nginx", "caddy", "h2o"]
LABELS = {"tlsfront": "tlsfront serve", "nginx": "nginx", "caddy": "Caddy", "h2o": "h2o"}
WORKERS = 2

# What each case loads and how much; `unit` is what CPU is divided by.
CASES = {
    "1k": dict(label="1 KiB file, `h2load -c 10 -m 100`", unit="CPU µs per request",
               digits=2),
    "64m": dict(label="64 MiB file, `h2load -c 1 -m 1 -n 4`", unit="CPU ms per MiB",
                digits=3),
}

NGINX_H2 = """\
daemon off;
master_process on;
worker_processes {workers};
worker_rlimit_nofile 65536;
pid {dir}/nginx-h2.pid;
error_log {dir}/nginx-h2-error.log warn;
events {{ worker_connections 30000; }}
http {{
    default_type application/octet-stream;
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000;
    keepalive_timeout 75s;
    client_body_temp_path {dir}/nginx-h2-body;
    proxy_temp_path {dir}/nginx-h2-proxy;
    fastcgi_temp_path {dir}/nginx-h2-fastcgi;
    uwsgi_temp_path {dir}/nginx-h2-uwsgi;
    scgi_temp_path {dir}/nginx-h2-scgi;
    ssl_certificate {cert};
    ssl_certificate_key {key};
    ssl_protocols TLSv1.3;
    ssl_conf_command Ciphersuites {cipher};
    ssl_ecdh_curve X25519:prime256v1;
    server {{
        listen 127.0.0.1:{port} ssl http2 backlog=4096;
        root {www};
    }}
}}
"""

# Caddy 2.6: HTTP/3 off (protocols h1 h2), no automatic HTTPS, no admin
# endpoint; the site's own certificate for every name (no SNI from h2load
# when it connects to an address).
CADDYFILE = """\
{{
    admin off
    auto_https off
    default_bind 127.0.0.1
    servers {{
        protocols h1 h2
    }}
}}
https://:{port} {{
    tls {cert} {key} {{
        protocols tls1.3
        curves x25519 secp256r1
    }}
    root * {www}
    file_server
}}
"""

# h2o 2.2: no TLS 1.3 suite setting (the client offers one); no OCSP
# fetching (a helper process per certificate otherwise); no pid file (h2o
# started as root runs as nobody, who cannot write the run directory).
H2O_YAML = """\
num-threads: {workers}
error-log: {dir}/h2o-error.log
http2-max-concurrent-requests-per-connection: 100
listen:
  host: 127.0.0.1
  port: {port}
  ssl:
    certificate-file: {cert}
    key-file: {key}
    minimum-version: TLSv1.3
    ocsp-update-interval: 0
hosts:
  default:
    paths:
      /:
        file.dir: {www}
"""


class H2LoadError(Exception):
    pass


def make_server(name, run):
    """A started HTTP/2 server (servers.Server), or raises servers.StartError."""
    d, port, key = run.dir, S.free_port(), run.key
    common = dict(dir=d, port=port, www=run.www, cert=key.cert, key=key.key,
                  cipher=S.CIPHER_OSSL, workers=WORKERS)
    log = os.path.join(d, f"h2-{name}.log")
    env = None
    if name == "tlsfront":
        toml = os.path.join(d, "tlsfront-h2.toml")
        with open(toml, "w") as f:
            f.write(S.TLSFRONT_TOML)
        argv = [run.tlsfront, "serve", run.www, "--listen", f"127.0.0.1:{port}",
                "--cert", key.cert, "--key", key.key, "--workers", str(WORKERS),
                "--ktls", "off", "--config", toml]
    elif name == "nginx":
        conf = os.path.join(d, "nginx-h2.conf")
        with open(conf, "w") as f:
            f.write(NGINX_H2.format(**common))
        argv = ["nginx", "-p", d, "-c", conf, "-e", os.path.join(d, "nginx-h2-error.log")]
    elif name == "caddy":
        conf = os.path.join(d, "Caddyfile")
        with open(conf, "w") as f:
            f.write(CADDYFILE.format(**common))
        home = os.path.join(d, "caddy-home")
        os.makedirs(home, exist_ok=True)
        env = dict(os.environ, GOMAXPROCS=str(WORKERS), HOME=home,
                   XDG_DATA_HOME=home, XDG_CONFIG_HOME=home)
        argv = ["caddy", "run", "--adapter", "caddyfile", "--config", conf]
    elif name == "h2o":
        conf = os.path.join(d, "h2o.yaml")
        with open(conf, "w") as f:
            f.write(H2O_YAML.format(**common))
        argv = ["h2o", "-c", conf]
    else:
        raise S.StartError(f"unknown HTTP/2 server {name} (known: {', '.join(NAMES)})")
    srv = S.Server(name, "serve", LABELS[name], port)
    srv.proc = S.Proc(name, argv, run.server_cpus, log, env=env)
    srv.proc.start(port)
    # one real HTTP/2 request before anything is measured
    try:
        h2load(run, srv, "1k", ["-n", "1", "-c", "1"], f"probe-{name}", timeout=20)
    except H2LoadError as e:
        srv.proc.stop()
        raise S.StartError(f"{name} listens on {port} but an HTTP/2 GET /1k failed: {e} (see {log})")
    return srv


def parse_h2load(text):
    """The figures of h2load's summary: requests succeeded, 2xx, data bytes,
    the protocol; raises H2LoadError when a line is missing."""
    def grab(pattern):
        m = re.search(pattern, text, re.M)
        if m is None:
            raise H2LoadError(f"no /{pattern}/ in h2load's output")
        return m.group(1)
    return {
        "succeeded": int(grab(r"^requests: .*?(\d+) succeeded")),
        "failed": int(grab(r"^requests: .*?(\d+) failed")),
        "ok_2xx": int(grab(r"^status codes: (\d+) 2xx")),
        "data_bytes": int(grab(r"^traffic: .*\((\d+)\) data")),
        "protocol": grab(r"^Application protocol: (\S+)"),
    }


def h2load(run, srv, path, args, name, timeout):
    """h2load against srv's /path over h2 only, TLS 1.3 AES-128-GCM only;
    its parsed summary, or raises H2LoadError unless every request got a
    2xx over h2."""
    logs = os.path.join(run.dir, "logs")
    os.makedirs(logs, exist_ok=True)
    cmd = ["taskset", "-c", run.client_cpus, "h2load", "--npn-list", "h2",
           "--tls13-ciphers", S.CIPHER_OSSL, "-t", "1",
           f"https://127.0.0.1:{srv.port}/{path}"] + args
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise H2LoadError(f"{name}: h2load did not finish within {timeout:.0f} s")
    with open(os.path.join(logs, name + ".txt"), "w") as f:
        f.write("$ " + " ".join(cmd) + "\n" + out.stdout + out.stderr)
    if out.returncode != 0:
        raise H2LoadError(f"{name}: h2load exited {out.returncode}")
    s = parse_h2load(out.stdout)
    want = int(args[args.index("-n") + 1])
    if s["protocol"] != "h2":
        raise H2LoadError(f"{name}: protocol {s['protocol']}, not h2")
    if s["ok_2xx"] != want or s["succeeded"] != want:
        raise H2LoadError(f"{name}: {s['ok_2xx']} of {want} requests got a 2xx")
    return s


def settle(srv, limit=10.0, busy=0.05):
    """Wait (at most limit seconds) until the server is idle: under `busy`
    CPU seconds per second over a quarter second."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        c0 = S.cpu_reading(srv.proc.pids())
        time.sleep(0.25)
        if S.cpu_between(c0, S.cpu_reading(srv.proc.pids())) < busy * 0.25:
            return


def measure(run, srv, case, n_small, name):
    """One measured h2load run of `case`: (CPU per unit, h2load summary).
    The server's whole process tree is read before and after."""
    if case == "1k":
        path, args = "1k", ["-c", "10", "-m", "100", "-n", str(n_small)]
    else:
        path, args = run.big_name, ["-c", "1", "-m", "1", "-n", "4"]
    settle(srv)
    c0 = S.cpu_reading(srv.proc.pids())
    s = h2load(run, srv, path, args, name, timeout=120)
    cpu = S.cpu_between(c0, S.cpu_reading(srv.proc.pids()))
    if case == "1k":
        return cpu / s["succeeded"] * 1e6, s
    mib = s["data_bytes"] / 2**20
    if s["data_bytes"] != 4 * run.big:
        raise H2LoadError(f"{name}: {s['data_bytes']} data bytes, not {4 * run.big}")
    return cpu / mib * 1e3, s


def rounds(run, names, n_rounds, n_small, log):
    """Start every server, warm each up, then `n_rounds` rounds: per round,
    per case, each server in turn, the order rotated every round (idle
    servers cost nothing). Returns {name: {case: [value per round]}} and
    errors."""
    out = {n: {c: [] for c in CASES} for n in names}
    errors = []
    srvs = {}
    try:
        for n in names:
            try:
                srvs[n] = make_server(n, run)
            except S.StartError as e:
                log(f"  {n}: cannot start: {e}")
                errors.append(f"{n}: cannot start: {e}")
        live = [n for n in names if n in srvs]
        if not live:
            return out, errors
        for n in live:
            for case in CASES:
                try:
                    measure(run, srvs[n], case, max(1000, n_small // 10), f"warm-{n}-{case}")
                except H2LoadError as e:
                    log(f"  warm-up {n} {case}: {e}")
        for r in range(n_rounds):
            order = live[r % len(live):] + live[:r % len(live)]
            t0 = time.monotonic()
            for case in CASES:
                for n in order:
                    srv = srvs[n]
                    if not srv.proc.alive():
                        out[n][case].append(None)
                        errors.append(f"round {r + 1}, {n}: not running")
                        continue
                    try:
                        v, _ = measure(run, srv, case, n_small, f"r{r}-{n}-{case}")
                    except H2LoadError as e:
                        log(f"  round {r + 1}, {n}, {case}: {e}")
                        errors.append(f"round {r + 1}, {n}, {case}: {e}")
                        v = None
                    out[n][case].append(v)
            log(f"round {r + 1}/{n_rounds} ({time.monotonic() - t0:.0f} s), order {', '.join(order)}: " + "; ".join(
                f"{n} {fmt(out[n]['1k'][-1], 2)} µs/req, {fmt(out[n]['64m'][-1], 3)} ms/MiB" for n in live))
    finally:
        for srv in srvs.values():
            srv.proc.stop()
    return out, errors


def fmt(v, d):
    return "—" if v is None else f"{v:.{d}f}"


def summary(values):
    """median, min, max of the values that are there (None when none)."""
    v = [x for x in values if x is not None]
    if not v:
        return None
    return statistics.median(v), min(v), max(v)


def ratios(out, name, case):
    """Per-round ratios of name's figure to tlsfront's (same round)."""
    return [o / t for o, t in zip(out[name][case], out["tlsfront"][case])
            if o is not None and t]


def table(out, names):
    """The markdown table: per case, each server's median <sub>min–max</sub>
    and the median of its per-round ratios to tlsfront <sub>min–max</sub>."""
    head = "| case | unit ↓ | " + " | ".join(LABELS[n] for n in names) + " |"
    lines = [head, "|" + "---|" * (len(names) + 2)]
    for case, c in CASES.items():
        cells = []
        for n in names:
            s = summary(out[n][case])
            if s is None:
                cells.append("—")
                continue
            cell = f"{s[0]:.{c['digits']}f} <sub>{s[1]:.{c['digits']}f}–{s[2]:.{c['digits']}f}</sub>"
            if n != "tlsfront" and "tlsfront" in out:
                rs = summary(ratios(out, n, case))
                if rs:
                    cell += f" ×{rs[0]:.2f} <sub>×{rs[1]:.2f}–×{rs[2]:.2f}</sub>"
            cells.append(cell)
        lines.append(f"| {c['label']} | {c['unit']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(args, run, machine, log):
    """Run the h2 comparison; write <out>/<stem>.{md,json}."""
    names = [n for n in args.servers.split(",") if n]
    t0 = time.time()
    out, errors = rounds(run, names, args.rounds, args.h2_requests, log)
    wall = time.time() - t0
    data = {"mode": "h2", "stem": args.name, "argv": args.argv, "rounds": args.rounds,
            "requests_1k": args.h2_requests, "workers": WORKERS, "machine": machine,
            "values": out, "errors": errors, "wall_s": wall}
    with open(os.path.join(args.out, args.name + ".json"), "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    v = machine.get("versions", {})
    md = [f"# HTTP/2 static files: {args.name}", "",
          f"`bench/compare {' '.join(args.argv)}`, {wall / 60:.1f} min. tlsfront "
          f"{machine.get('tlsfront_commit')}; " + ", ".join(
              f"{k}: {v.get(k)}" for k in ("nginx", "caddy", "h2o", "h2load", "openssl")) + ".",
          f"Host: {machine.get('nproc')} CPUs ({machine.get('cpu_model')}), Linux {machine.get('kernel')}, "
          f"kTLS: {machine.get('ktls')}.", "",
          f"Server CPU (process tree, /proc) per unit; median of {args.rounds} interleaved rounds "
          "<sub>min–max</sub>; × the median of per-round ratios to tlsfront <sub>min–max</sub>. "
          f"{WORKERS} workers each; 1 KiB case: {args.h2_requests} requests per run.", "",
          table(out, names)]
    if errors:
        md += ["Errors:", ""] + [f"- {e}" for e in errors] + [""]
    with open(os.path.join(args.out, args.name + ".md"), "w") as f:
        f.write("\n".join(md))
    log(f"wrote {os.path.join(args.out, args.name)}.md/.json ({wall / 60:.1f} min)")
    print(table(out, names))
