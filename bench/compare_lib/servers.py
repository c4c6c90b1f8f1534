"""The servers under test: configuration templates, start, stop, processes.

Every server gets the same job: TLS 1.3 only, TLS_AES_128_GCM_SHA256 only,
groups X25519 and P-256, the same certificate and key, one worker (thread or
process), access logs off, keep-alive kept for 100000 requests where the
server has such a limit.  Servers run pinned to the server cpuset; the plain
backend behind the terminators runs on the client's cpuset.
"""

import os
import signal
import socket
import ssl
import subprocess
import time

CIPHER_OSSL = "TLS_AES_128_GCM_SHA256"
CIPHER_RUSTLS = "TLS13_AES_128_GCM_SHA256"

# Debian packages each server comes from.
PACKAGES = {
    "nginx": ("nginx", "/usr/sbin/nginx"),
    "haproxy": ("haproxy", "/usr/sbin/haproxy"),
    "hitch": ("hitch", "/usr/sbin/hitch"),
    "stunnel": ("stunnel4", "/usr/bin/stunnel"),
    "caddy": ("caddy", "/usr/bin/caddy"),
    "h2o": ("h2o", "/usr/bin/h2o"),
    "h2load": ("nghttp2-client", "/usr/bin/h2load"),
}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def stat_fields(pid):
    """/proc/PID/stat from field 3 (state) on, split; None if pid is gone.
    Field N of the file is element N - 3 (the command name may hold spaces,
    so the split starts after its closing parenthesis)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read()
    except OSError:
        return None
    return st[st.rfind(")") + 2:].split()


def children_map():
    """ppid -> [pid] for every process."""
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        rest = stat_fields(d)
        if rest is not None:
            kids.setdefault(int(rest[1]), []).append(int(d))
    return kids


def tree(pid):
    """pid and all its descendants."""
    kids = children_map()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


TICK = os.sysconf("SC_CLK_TCK")


def cpu_reading(pids):
    """The CPU time of pids so far, for `cpu_between`: per process, utime +
    stime from /proc/PID/stat (clock ticks, 10 ms here, but counting
    threads that have ended) and each live thread's run time from
    /proc/PID/task/TID/schedstat (nanoseconds)."""
    out = {}
    for p in pids:
        rest = stat_fields(p)
        if rest is None:
            continue
        threads = {}
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            tids = []
        for t in tids:
            try:
                with open(f"/proc/{p}/task/{t}/schedstat") as f:
                    threads[t] = int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue
        out[p] = ((int(rest[11]) + int(rest[12])) / TICK, threads)
    return out


def cpu_between(r0, r1):
    """CPU seconds spent between two `cpu_reading`s, summed over processes.

    Per process, the nanosecond run times of its threads (threads started
    since count from zero): a 2 s measurement of 0.2 CPU seconds in 10 ms
    ticks would be ±5 %. But a thread that ended in between takes its run
    time with it (stunnel runs a thread per connection), while utime +
    stime keep it: where a thread of r0 is gone, or the ticks say more than
    a tick and a half above the threads, the ticks are used. Processes that
    appeared count in full; processes that ended are lost either way."""
    total = 0.0
    for p, (ticks1, th1) in r1.items():
        if p not in r0:
            total += ticks1
            continue
        ticks0, th0 = r0[p]
        ticks = ticks1 - ticks0
        threads = sum(ns - th0.get(t, 0) for t, ns in th1.items()) / 1e9
        # No threads read in r0 (the process was starting) would count
        # every thread's whole life: ticks then too.
        lost = not th0 or not th0.keys() <= th1.keys()
        total += ticks if lost or ticks - threads > 1.5 / TICK else threads
    return total


def rss_kib(pids, field="VmRSS"):
    """Sum of VmRSS (or VmHWM, the peak) over pids, KiB."""
    total = 0
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith(field + ":"):
                        total += int(line.split()[1])
                        break
        except OSError:
            continue
    return total


def tls_probe(port, ca, timeout=5.0):
    """One HTTPS GET /1k over TLS 1.3: True when a 200 comes back."""
    ctx = ssl.create_default_context(cafile=ca)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as s:
            s.sendall(b"GET /1k HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            data = b""
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                try:
                    chunk = s.recv(65536)
                except (ssl.SSLError, OSError):
                    break
                if not chunk:
                    break
                data += chunk
    return data.startswith(b"HTTP/1.1 200") or data.startswith(b"HTTP/1.0 200")


class StartError(Exception):
    pass


class Proc:
    """A server process we started (its own session), its log and its tree."""

    def __init__(self, name, argv, cpus, log_path, env=None):
        self.name = name
        self.argv = argv
        self.cpus = cpus
        self.log_path = log_path
        self.env = env
        self.popen = None

    def start(self, port, wait=10.0):
        self.log = open(self.log_path, "ab")
        cmd = ["taskset", "-c", self.cpus] + self.argv
        self.log.write(("$ " + " ".join(cmd) + "\n").encode())
        self.log.flush()
        self.popen = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True, env=self.env)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise StartError(f"{self.name} exited with {self.popen.returncode} (see {self.log_path})")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise StartError(f"{self.name} did not listen on {port} within {wait:.0f} s (see {self.log_path})")

    def pids(self):
        if self.popen is None or self.popen.poll() is not None:
            return []
        return tree(self.popen.pid)

    def alive(self):
        return self.popen is not None and self.popen.poll() is None

    def stop(self, grace=10.0):
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            try:
                self.popen.send_signal(signal.SIGTERM)
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        # anything left in the session we made (workers that outlived the master)
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.popen.wait(5)
        except subprocess.TimeoutExpired:
            pass
        self.log.close()
        return self.popen.returncode


# ---------------------------------------------------------------- templates

NGINX = """\
daemon off;
master_process on;
worker_processes 1;
worker_rlimit_nofile 65536;
pid {dir}/nginx-{tag}.pid;
error_log {dir}/nginx-{tag}-error.log warn;
events {{ worker_connections 30000; }}
http {{
    default_type application/octet-stream;
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 100000;
    keepalive_timeout 75s;
    client_body_temp_path {dir}/nginx-{tag}-body;
    proxy_temp_path {dir}/nginx-{tag}-proxy;
    fastcgi_temp_path {dir}/nginx-{tag}-fastcgi;
    uwsgi_temp_path {dir}/nginx-{tag}-uwsgi;
    scgi_temp_path {dir}/nginx-{tag}-scgi;
{tls}
    server {{
        listen 127.0.0.1:{port}{ssl} backlog=4096;
        root {www};
        location = /upload {{
            client_max_body_size 0;
            return 204;
        }}
    }}
}}
"""

NGINX_TLS = """\
    ssl_certificate {cert};
    ssl_certificate_key {key};
    ssl_protocols TLSv1.3;
    ssl_conf_command Ciphersuites {cipher};
    ssl_ecdh_curve X25519:prime256v1;
    ssl_session_cache shared:SSL:10m;
    ssl_session_tickets on;
"""

HAPROXY = """\
global
    nbthread 1
    maxconn 9000
    tune.ssl.cachesize 20000
    ssl-default-bind-ciphersuites {cipher}
    ssl-default-bind-options ssl-min-ver TLSv1.3
    ssl-default-bind-curves X25519:P-256
defaults
    mode tcp
    timeout connect 5s
    timeout client 75s
    timeout server 75s
    maxconn 9000
frontend tls
    bind 127.0.0.1:{port} ssl crt {pem} curves X25519:P-256 backlog 4096
    default_backend plain
backend plain
    server b 127.0.0.1:{backend}
"""

HITCH = """\
frontend = "[127.0.0.1]:{port}"
backend = "[127.0.0.1]:{backend}"
pem-file = "{pem}"
tls-protos = TLSv1.3
ciphersuites = "{cipher}"
ecdh-curve = "X25519:prime256v1"
workers = 1
daemon = off
write-proxy-v2 = off
user = "_hitch"
backlog = 4096
log-level = 1
ocsp-dir = "{dir}/hitch-ocsp"
"""

STUNNEL = """\
foreground = yes
pid =
syslog = no
debug = 3
output = {dir}/stunnel.out
[tls]
accept = 127.0.0.1:{port}
connect = 127.0.0.1:{backend}
cert = {cert}
key = {key}
sslVersionMin = TLSv1.3
ciphersuites = {cipher}
curves = X25519:P-256
"""

TLSFRONT_TOML = """\
[limits]
keepalive_requests = 100000
connections = 30000
"""


class Server:
    """One server under test.

    kind: "serve"  serves the files itself (tlsfront serve, nginx);
          "proxy"  TLS terminator in front of the plain backend.
    """

    def __init__(self, name, kind, label, port):
        self.name, self.kind, self.label, self.port = name, kind, label, port
        self.proc = None

    def __repr__(self):
        return self.name


def make_server(name, run):
    """A started Server, or raises StartError. run: the Run (dirs, certs)."""
    d = run.dir
    port = free_port()
    key = run.key
    common = dict(dir=d, port=port, www=run.www, cert=key.cert, key=key.key,
                  pem=key.pem, cipher=CIPHER_OSSL, backend=run.backend_port)
    log = os.path.join(d, f"{name}.log")
    if name == "tlsfront":
        toml = os.path.join(d, "tlsfront.toml")
        with open(toml, "w") as f:
            f.write(TLSFRONT_TOML)
        argv = [run.tlsfront, "serve", run.www, "--listen", f"127.0.0.1:{port}",
                "--cert", key.cert, "--key", key.key, "--workers", "1",
                "--config", toml]
        srv = Server(name, "serve", "tlsfront serve", port)
    elif name == "tlsfront-proxy":
        argv = [run.tlsfront, "proxy", "--listen", f"127.0.0.1:{port}",
                "--backend", f"127.0.0.1:{run.backend_port}",
                "--cert", key.cert, "--key", key.key, "--workers", "1"]
        srv = Server(name, "proxy", "tlsfront proxy", port)
    elif name == "nginx":
        conf = os.path.join(d, "nginx-tls.conf")
        with open(conf, "w") as f:
            f.write(NGINX.format(tag="tls", ssl=" ssl", tls=NGINX_TLS.format(**common), **common))
        argv = ["nginx", "-p", d, "-c", conf, "-e", os.path.join(d, "nginx-tls-error.log")]
        srv = Server(name, "serve", "nginx", port)
    elif name == "haproxy":
        conf = os.path.join(d, "haproxy.cfg")
        with open(conf, "w") as f:
            f.write(HAPROXY.format(**common))
        argv = ["haproxy", "-db", "-f", conf]
        srv = Server(name, "proxy", "HAProxy (mode tcp)", port)
    elif name == "hitch":
        os.makedirs(os.path.join(d, "hitch-ocsp"), exist_ok=True)
        conf = os.path.join(d, "hitch.conf")
        with open(conf, "w") as f:
            f.write(HITCH.format(**common))
        argv = ["hitch", f"--config={conf}"]
        srv = Server(name, "proxy", "hitch", port)
    elif name == "stunnel":
        conf = os.path.join(d, "stunnel.conf")
        with open(conf, "w") as f:
            f.write(STUNNEL.format(**common))
        argv = ["stunnel", conf]
        srv = Server(name, "proxy", "stunnel", port)
    else:
        raise StartError(f"unknown server {name}")
    srv.proc = Proc(name, argv, run.server_cpus, log)
    srv.proc.start(port)
    # a real TLS request before anything is measured
    ok = False
    for _ in range(20):
        try:
            if tls_probe(port, run.ca):
                ok = True
                break
        except (OSError, ssl.SSLError):
            pass
        time.sleep(0.25)
    if not ok:
        srv.proc.stop()
        raise StartError(f"{name} listens on {port} but GET /1k over TLS 1.3 failed (see {log})")
    return srv


def start_backend(run):
    """The plain-HTTP nginx behind the terminators, on the client's cpuset."""
    port = free_port()
    conf = os.path.join(run.dir, "nginx-plain.conf")
    with open(conf, "w") as f:
        f.write(NGINX.format(dir=run.dir, tag="plain", ssl="", tls="", port=port, www=run.www))
    proc = Proc("backend", ["nginx", "-p", run.dir, "-c", conf, "-e",
                            os.path.join(run.dir, "nginx-plain-error.log")],
                run.client_cpus, os.path.join(run.dir, "backend.log"))
    proc.start(port)
    return proc, port


def version(name, tlsfront=None):
    """A one-line version string, or None when missing."""
    cmds = {
        "tlsfront": [tlsfront or "tlsfront", "--version"],
        "nginx": ["nginx", "-v"],
        "haproxy": ["haproxy", "-v"],
        "hitch": ["hitch", "--version"],
        "stunnel": ["stunnel", "-version"],
        "caddy": ["caddy", "version"],
        "h2o": ["h2o", "--version"],
        "h2load": ["h2load", "--version"],
        "openssl": ["openssl", "version"],
    }
    try:
        out = subprocess.run(cmds[name], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout + out.stderr).strip().splitlines()
    for line in text:
        if name == "stunnel" and not line.startswith("stunnel "):
            continue
        return line.strip()
    return None


def ensure_installed(names, log):
    """apt-get install the Debian packages of the servers that are missing."""
    missing = [PACKAGES[n][0] for n in names if n in PACKAGES and not os.path.exists(PACKAGES[n][1])]
    if not missing:
        return
    log(f"installing {' '.join(missing)} with apt-get")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    cmd = ["apt-get", "install", "-y", "--no-install-recommends"] + missing
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, timeout=600)
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        log(f"apt-get install failed: {r.stderr.strip().splitlines()[-1:]}")
    # Debian starts the packaged services: stop them so they take no CPU
    for svc in ("nginx", "haproxy", "hitch", "stunnel4", "caddy", "h2o"):
        try:
            subprocess.run(["systemctl", "stop", svc], capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            pass
