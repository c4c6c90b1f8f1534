"""The results: machine facts, medians over rounds, ratios to tlsfront, the
Markdown report, hand-drawn SVG bar charts."""

import os
import platform
import shutil
import statistics
import subprocess
from html import escape

# (key, label, unit, better, decimals)
SERVE_FIGURES = [
    ("dl_MiBps", "1 GiB download, 1 connection", "MiB/s", "higher", 0),
    ("dl_pct_aes", "  same, as % of the AES-128-GCM ceiling", "%", "higher", 1),
    ("dl_cpu_s_per_GiB", "server CPU per GiB (1 GiB downloads)", "CPU s/GiB", "lower", 3),
    ("kb100_c1_MiBps", "100 KiB files, 1 connection", "MiB/s", "higher", 0),
    ("kb100_c2_MiBps", "100 KiB files, 2 connections", "MiB/s", "higher", 0),
    ("kb100_c3_MiBps", "100 KiB files, 3 connections", "MiB/s", "higher", 0),
    ("kb100_cpu_s_per_GiB", "server CPU per GiB (100 KiB files)", "CPU s/GiB", "lower", 3),
    ("tps_full_max", "full handshakes: max TPS (4 req/session)", "sessions/s", "higher", 0),
    ("tps_full_100ms", "full handshakes: max TPS, mean < 100 ms", "sessions/s", "higher", 0),
    ("tps_res_max", "resumed: max TPS (4 req/session)", "sessions/s", "higher", 0),
    ("tps_res_100ms", "resumed: max TPS, mean < 100 ms", "sessions/s", "higher", 0),
    ("hs_full_cpu_ms", "server CPU per 1000 full handshakes", "CPU s", "lower", 3),
    ("hs_full_per_core", "  = full handshakes per server core-second", "/s", "higher", 0),
    ("hs_res_cpu_ms", "server CPU per 1000 resumed handshakes", "CPU s", "lower", 3),
    ("hs_res_per_core", "  = resumed handshakes per server core-second", "/s", "higher", 0),
    ("ka_rps", "1 KiB keep-alive requests/s (20 conns)", "req/s", "higher", 0),
    ("ka_p99_ms", "1 KiB keep-alive p99 latency", "ms", "lower", 2),
    ("ka_cpu_us_per_req", "server CPU per 1 KiB keep-alive request", "CPU µs", "lower", 1),
    ("idle_kib_per_conn", "memory per idle TLS connection (1000 open)", "KiB", "lower", 1),
    ("rss_peak_mib", "peak RSS (VmHWM, during the overload ramps)", "MiB", "lower", 0),
    ("rss_end_mib", "RSS 10 s after the overload ramps", "MiB", "lower", 0),
]

PROXY_FIGURES = [
    ("dl_MiBps", "download through the proxy, 1 connection", "MiB/s", "higher", 0),
    ("dl_cpu_s_per_GiB", "proxy CPU per GiB, download", "CPU s/GiB", "lower", 3),
    ("ul_MiBps", "upload through the proxy, 1 connection", "MiB/s", "higher", 0),
    ("ul_cpu_s_per_GiB", "proxy CPU per GiB, upload", "CPU s/GiB", "lower", 3),
    ("tps_full_max", "full handshakes: max TPS (4 req/session)", "sessions/s", "higher", 0),
    ("tps_full_100ms", "full handshakes: max TPS, mean < 100 ms", "sessions/s", "higher", 0),
    ("hs_full_cpu_ms", "proxy CPU per 1000 full handshakes", "CPU s", "lower", 3),
    ("hs_full_per_core", "  = full handshakes per proxy core-second", "/s", "higher", 0),
    ("idle_kib_per_conn", "memory per idle TLS connection (1000 open)", "KiB", "lower", 1),
    ("rss_peak_mib", "peak RSS (VmHWM, during the overload ramp)", "MiB", "lower", 0),
    ("rss_end_mib", "RSS 10 s after the overload ramp", "MiB", "lower", 0),
]

# figures whose server utilisation tells whether the server was the limit
UTIL_OF = {
    "dl_MiBps": "dl_server_util",
    "ka_rps": "ka_server_util",
    "tps_full_max": ("tps_full", "max_util"),
    "tps_full_100ms": ("tps_full", "100ms_util"),
    "tps_res_max": ("tps_res", "max_util"),
    "tps_res_100ms": ("tps_res", "100ms_util"),
}

CHART_FIGURES = {"dl_MiBps", "dl_cpu_s_per_GiB", "kb100_c1_MiBps", "tps_full_max", "tps_res_max",
                 "hs_full_cpu_ms", "hs_res_cpu_ms", "ka_rps", "ka_p99_ms", "idle_kib_per_conn",
                 "ul_MiBps", "ul_cpu_s_per_GiB"}

LABELS = {
    "tlsfront": "tlsfront serve",
    "tlsfront-proxy": "tlsfront proxy",
    "nginx": "nginx",
    "haproxy": "HAProxy",
    "hitch": "hitch",
    "stunnel": "stunnel",
}


def _run(cmd):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
        return (r.stdout + r.stderr).strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def machine_info(args, S):
    model = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 2**20:.1f} GiB"
    except OSError:
        pass
    flags = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                fl = line.split()
                flags = " ".join(f for f in ("aes", "pclmulqdq", "avx2", "vaes", "vpclmulqdq", "sha_ni") if f in fl)
                break
    except OSError:
        pass
    ulp = ""
    try:
        ulp = open("/proc/sys/net/ipv4/tcp_available_ulp").read().strip()
    except OSError:
        pass
    versions = {n: S.version(n, args.tlsfront) for n in ("tlsfront", "nginx", "haproxy", "hitch", "stunnel", "openssl")}
    commit = _run(["git", "-C", os.path.dirname(os.path.abspath(args.tlsfront)), "rev-parse", "--short", "HEAD"])
    return {
        "host": platform.node(),
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "cpu_flags": flags,
        "memory": mem,
        "kernel": platform.release(),
        "ktls": "yes" if "tls" in ulp.split() else "no (no \"tls\" ULP: every server runs user-space TLS)",
        "debian": _run(["cat", "/etc/debian_version"]),
        "python": platform.python_version(),
        "versions": versions,
        "tlsfront_commit": commit,
        "server_cpus": args.server_cpus,
        "client_cpus": args.client_cpus,
    }


def one_line(r):
    if "error" in r and len(r) <= 3:
        return r["error"]
    bits = []
    for k, fmt in (("dl_MiBps", "dl {:.0f} MiB/s"), ("dl_cpu_s_per_GiB", "{:.2f} CPU s/GiB"),
                   ("hs_full_per_core", "full hs {:.0f}/core-s"), ("hs_res_per_core", "resumed {:.0f}/core-s"),
                   ("ka_rps", "1k {:.0f} req/s"), ("tps_full_max", "tps {:.0f}"),
                   ("ul_MiBps", "ul {:.0f} MiB/s"), ("idle_kib_per_conn", "idle {:.1f} KiB/conn")):
        v = r.get(k)
        if isinstance(v, (int, float)):
            bits.append(fmt.format(v))
    if r.get("errors"):
        bits.append(f"{len(r['errors'])} error(s)")
    return ", ".join(bits)


def copy_bench_charts(run_dir, charts_dir):
    """Keep tlsfront-bench's own charts (round 1) next to the results."""
    logs = os.path.join(run_dir, "logs")
    if not os.path.isdir(logs):
        return
    for n in sorted(os.listdir(logs)):
        if n.endswith(".svg"):
            shutil.copy(os.path.join(logs, n), os.path.join(charts_dir, "bench-" + n))


def value(rd, name, key, aes):
    r = rd.get(name)
    if not isinstance(r, dict):
        return None
    if key in ("rss_end_mib", "rss_peak_mib"):
        v = r.get(key.replace("_mib", "_kib"))
        return v / 1024 if isinstance(v, (int, float)) else None
    if key == "dl_pct_aes":
        v = r.get("dl_MiBps")
        a = aes.get("aes-128-gcm") if aes else None
        return v / a * 100 if isinstance(v, (int, float)) and a else None
    v = r.get(key)
    return v if isinstance(v, (int, float)) else None


def util(rd, name, key):
    r = rd.get(name)
    if not isinstance(r, dict) or key not in UTIL_OF:
        return None
    u = UTIL_OF[key]
    if isinstance(u, tuple):
        sub = r.get(u[0])
        v = sub.get(u[1]) if isinstance(sub, dict) else None
    else:
        v = r.get(u)
    return v if isinstance(v, (int, float)) else None


def stats(kd, name, key):
    vals = [value(rd, name, key, aes) for rd, aes in zip(kd["rounds"], kd["aes"])]
    vals = [v for v in vals if v is not None]
    utils = [util(rd, name, key) for rd in kd["rounds"]]
    utils = [u for u in utils if u is not None]
    if not vals:
        return None
    return {
        "median": statistics.median(vals),
        "min": min(vals),
        "max": max(vals),
        "n": len(vals),
        "util": statistics.median(utils) if utils else None,
    }


def fmt(v, d):
    if v is None:
        return "—"
    if abs(v) >= 10000 and d == 0:
        return f"{v:,.0f}".replace(",", " ")
    return f"{v:.{d}f}"


def status(kd, name):
    """Why a server has no figures: missing / failed to start."""
    errs = [rd.get(name, {}).get("error") for rd in kd["rounds"] if isinstance(rd.get(name), dict)]
    errs = [e for e in errs if e]
    return errs[0] if errs else None


def table(kd, names, figures, base):
    head = ["figure", "unit"] + [LABELS.get(n, n) for n in names]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, label, unit, better, d in figures:
        st = {n: stats(kd, n, key) for n in names}
        if all(v is None for v in st.values()):
            continue
        b = st.get(base)
        row = [label.strip() if not label.startswith("  ") else "↳ " + label.strip(),
               unit + (" ↑" if better == "higher" else " ↓")]
        for n in names:
            s = st[n]
            if s is None:
                row.append("missing" if status(kd, n) else "—")
                continue
            cell = fmt(s["median"], d)
            if s["n"] > 1:
                cell += f" <sub>{fmt(s['min'], d)}–{fmt(s['max'], d)}</sub>"
            if s["util"] is not None and s["util"] < 0.85:
                cell += " †"
            if n != base and b and b["median"]:
                cell += f" (×{s['median'] / b['median']:.2f})"
            row.append(cell)
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def util_table(kd, names, figures):
    keys = [f for f in figures if f[0] in UTIL_OF]
    head = ["figure"] + [LABELS.get(n, n) for n in names]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, label, *_ in keys:
        row = [label.strip()]
        for n in names:
            s = stats(kd, n, key)
            row.append(f"{s['util'] * 100:.0f} %" if s and s["util"] is not None else "—")
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def losses(kd, names, figures, base, margin=0.05):
    """Figures where another server beats tlsfront by more than margin."""
    out = []
    b_all = {key: stats(kd, base, key) for key, *_ in figures}
    for key, label, unit, better, d in figures:
        b = b_all[key]
        if b is None or not b["median"]:
            continue
        worse = []
        for n in names:
            if n == base:
                continue
            s = stats(kd, n, key)
            if s is None:
                continue
            r = s["median"] / b["median"]
            if (better == "higher" and r > 1 + margin) or (better == "lower" and r < 1 - margin):
                worse.append(f"{LABELS.get(n, n)} {fmt(s['median'], d)} (×{r:.2f})")
        if worse:
            out.append(f"- **{label.strip()}**: tlsfront {fmt(b['median'], d)} {unit}; better: " + ", ".join(worse))
    return out


def targets(kd):
    """The project's targets, from the serve-group medians."""
    def med(n, k):
        s = stats(kd, n, k)
        return s["median"] if s else None

    rows = []

    def row(what, have, want, ok):
        rows.append(f"| {what} | {have} | {want} | {'met' if ok else ('not met' if ok is False else 'n/a')} |")

    t, n = med("tlsfront", "dl_cpu_s_per_GiB"), med("nginx", "dl_cpu_s_per_GiB")
    row("server CPU per GiB ≤ 0.7× nginx",
        f"{fmt(t, 3)} vs {fmt(n, 3)} CPU s/GiB (×{t / n:.2f})" if t and n else "—", "≤ ×0.70",
        (t / n <= 0.7) if t and n else None)
    for k, lab, want in (("hs_full_per_core", "full handshakes per core ≥ 1.5× best of nginx/HAProxy/hitch", 1.5),
                         ("hs_res_per_core", "resumed handshakes per core ≥ 2× best of nginx/HAProxy/hitch", 2.0)):
        t = med("tlsfront", k)
        others = {o: med(o, k) for o in ("nginx", "haproxy", "hitch")}
        others = {o: v for o, v in others.items() if v}
        if t and others:
            best = max(others, key=others.get)
            r = t / others[best]
            row(lab, f"{fmt(t, 0)} vs {LABELS[best]} {fmt(others[best], 0)} /s (×{r:.2f})", f"≥ ×{want}", r >= want)
        else:
            row(lab, "—", f"≥ ×{want}", None)
    t, n = med("tlsfront", "ka_rps"), med("nginx", "ka_rps")
    tp, np_ = med("tlsfront", "ka_p99_ms"), med("nginx", "ka_p99_ms")
    if t and n and tp and np_:
        row("1 KiB keep-alive req/s ≥ 1.2× nginx, p99 no worse",
            f"{fmt(t, 0)} vs {fmt(n, 0)} req/s (×{t / n:.2f}); p99 {fmt(tp, 2)} vs {fmt(np_, 2)} ms",
            "≥ ×1.2, p99 ≤ nginx", t / n >= 1.2 and tp <= np_)
    else:
        row("1 KiB keep-alive req/s ≥ 1.2× nginx, p99 no worse", "—", "", None)
    m = med("tlsfront", "idle_kib_per_conn")
    row("memory per idle connection ≤ 16 KiB", f"{fmt(m, 1)} KiB" if m is not None else "—", "≤ 16 KiB",
        (m <= 16) if m is not None else None)
    return ["| target | measured (medians) | wanted | |", "|---|---|---|---|"] + rows


def paired_section(kd):
    """The fine-interleaved phase: per server the median CPU per unit over
    the slices, and per peer the median of the per-slice ratios (each
    slice's figures were taken within about a minute of each other), with
    the CPU-per-unit targets judged on those ratios."""
    pd = kd.get("paired")
    if not pd or "tlsfront" not in pd:
        return []
    names = [n for n in ("tlsfront", "nginx", "haproxy", "hitch") if n in pd]
    figs = (("ka_cpu_us_per_req", "server CPU per 1 KiB keep-alive request", "CPU µs", 1),
            ("hs_res_cpu_ms", "server CPU per 1000 resumed handshakes", "CPU s", 3),
            ("hs_full_cpu_ms", "server CPU per 1000 full handshakes", "CPU s", 3))

    def ratios(fk, n):
        """Per slice: the peer's CPU per unit over tlsfront's (> 1: tlsfront
        cheaper). Handshakes: the ratio within the run that interleaved the
        two servers' sessions; keep-alive: the slice's two figures."""
        if "ratio_" + fk in pd[n]:
            return [r for r in pd[n]["ratio_" + fk] if r]
        return [o / t for t, o in zip(pd["tlsfront"][fk], pd[n][fk]) if t and o]

    slices = len(pd["tlsfront"]["ka_cpu_us_per_req"])
    how = ("Handshakes: in each slice, one `tlsfront-bench tps --interleave` run per peer sends sessions to "
           "tlsfront and that peer in turn (500/s each), so the two are measured over the same "
           "seconds; tlsfront's figure is the median of its runs. Keep-alive requests (a closed "
           "loop): each server in turn, seconds apart. ")
    L = [f"#### CPU per unit, fine-interleaved ({slices} slices)", "",
         "All four servers running at once, idle but for the ones measured. " + how +
         "Median over slices, <sub>min–max</sub>; ×: the median of the per-slice "
         "ratios, how many times tlsfront's CPU per unit the server spends.", "",
         "| figure | unit | " + " | ".join(LABELS[n] for n in names) + " |",
         "|---|---|" + "---|" * len(names)]
    for fk, label, unit, d in figs:
        cells = []
        for n in names:
            v = [x for x in pd[n][fk] if x]
            if not v:
                cells.append("—")
                continue
            c = f"{fmt(statistics.median(v), d)} <sub>{fmt(min(v), d)}–{fmt(max(v), d)}</sub>"
            r = ratios(fk, n)
            if n != "tlsfront" and r:
                c += f" (×{statistics.median(r):.2f})"
            cells.append(c)
        L.append(f"| {label} | {unit} ↓ | " + " | ".join(cells) + " |")
    L += ["", "| target, judged on the per-slice ratios | median (min–max over slices) | wanted | |",
          "|---|---|---|---|"]
    for fk, what, want, peers in (
            ("hs_full_cpu_ms", "full handshakes per core ≥ 1.5× best of nginx/HAProxy/hitch", 1.5,
             ("nginx", "haproxy", "hitch")),
            ("hs_res_cpu_ms", "resumed handshakes per core ≥ 2× best of nginx/HAProxy/hitch", 2.0,
             ("nginx", "haproxy", "hitch")),
            ("ka_cpu_us_per_req", "1 KiB keep-alive: CPU per request ≤ 1/1.2 of nginx's", 1.2, ("nginx",))):
        best = None
        for n in peers:
            r = ratios(fk, n) if n in pd else []
            if r and (best is None or statistics.median(r) < statistics.median(best[1])):
                best = (n, r)
        if not best:
            L.append(f"| {what} | — | ≥ ×{want} | n/a |")
            continue
        m = statistics.median(best[1])
        L.append(f"| {what} | ×{m:.2f} of {LABELS[best[0]]} (×{min(best[1]):.2f}–×{max(best[1]):.2f}) "
                 f"| ≥ ×{want} | {'met' if m >= want else 'not met'} |")
    L.append("")
    return L


def svg_bars(path, title, unit, better, entries, d):
    """A horizontal bar chart: median bars with min–max whiskers."""
    w, left, right, top, bar, gap = 640, 130, 110, 40, 22, 10
    h = top + len(entries) * (bar + gap) + 30
    vmax = max([e[3] for e in entries if e[3] is not None] + [1e-9])
    scale = (w - left - right) / vmax
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="10" y="20" font-size="14" font-weight="bold">{escape(title)}</text>',
           f'<text x="10" y="34" fill="#555">{escape(unit)}, {"higher" if better == "higher" else "lower"} is better; '
           f'bar: median, whisker: min–max over rounds</text>']
    for i, (label, med, lo, hi) in enumerate(entries):
        y = top + i * (bar + gap) + 6
        out.append(f'<text x="{left - 6}" y="{y + bar * 0.7}" text-anchor="end">{escape(label)}</text>')
        if med is None:
            out.append(f'<text x="{left + 4}" y="{y + bar * 0.7}" fill="#999">missing</text>')
            continue
        color = "#d9534f" if label.startswith("tlsfront") else "#5b8def"
        out.append(f'<rect x="{left}" y="{y}" width="{max(med * scale, 1):.1f}" height="{bar}" fill="{color}"/>')
        if lo is not None and hi is not None and hi > lo:
            cy = y + bar / 2
            out.append(f'<line x1="{left + lo * scale:.1f}" x2="{left + hi * scale:.1f}" y1="{cy}" y2="{cy}" stroke="black"/>')
            for x in (lo, hi):
                out.append(f'<line x1="{left + x * scale:.1f}" x2="{left + x * scale:.1f}" y1="{cy - 5}" y2="{cy + 5}" stroke="black"/>')
        out.append(f'<text x="{left + max(hi or med, med) * scale + 6:.1f}" y="{y + bar * 0.7}">{fmt(med, d)}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def markdown(data, charts_dir, out_dir):
    m = data["machine"]
    rel = os.path.relpath(charts_dir, out_dir)
    L = []
    L.append(f"# tlsfront vs nginx, HAProxy, hitch, stunnel — {data['stem']}")
    L.append("")
    L.append(f"Started {data['started']}, {data['rounds']} interleaved round(s), "
             f"{'quick' if data['profile']['big'] != 1 << 30 else 'full'} profile, "
             f"{data.get('wall_s', 0) / 60:.1f} minutes in all. Command: `bench/compare {' '.join(data['argv'])}`.")
    L.append("")
    L.append("## Machine")
    L.append("")
    L.append(f"- {m['nproc']} CPUs: {m['cpu_model']} ({m['cpu_flags']}), {m['memory']}; kernel {m['kernel']}, "
             f"Debian {m['debian']}; kTLS: {m['ktls']}.")
    L.append(f"- Servers pinned to CPU {m['server_cpus']}; the client (`tlsfront-bench --threads 1`), the plain "
             f"nginx backend and this script to CPU {m['client_cpus']}. The client has **one core**.")
    v = m["versions"]
    L.append("- " + "; ".join(f"{k}: {v[k] or 'missing'}" for k in ("tlsfront", "nginx", "haproxy", "hitch", "stunnel", "openssl"))
             + (f"; tlsfront commit {m['tlsfront_commit']}" if m.get("tlsfront_commit") else ""))
    L.append("")
    L.append("Settings for every server: TLS 1.3 only, TLS_AES_128_GCM_SHA256 only, X25519/P-256, one worker "
             "(thread or process), access log off, keep-alive up to 100000 requests. "
             "HAProxy, hitch and stunnel terminate TLS in front of a plain-HTTP nginx on the client's CPU: "
             "their CPU and memory figures are the terminator's alone (the backend's CPU is in the JSON).")
    L.append("")
    for key, kd in data["keys"].items():
        aes = [a.get("aes-128-gcm") for a in kd["aes"] if a.get("aes-128-gcm")]
        aes256 = [a.get("aes-256-gcm") for a in kd["aes"] if a.get("aes-256-gcm")]
        L.append(f"## {key.upper()} ({'P-256' if key == 'ecdsa' else 'RSA-2048'} certificate)")
        L.append("")
        if aes:
            L.append(f"AES-GCM ceiling of one core (`openssl speed -evp`, 16 KiB blocks, median of {len(aes)}): "
                     f"AES-128-GCM {statistics.median(aes):.0f} MiB/s"
                     + (f", AES-256-GCM {statistics.median(aes256):.0f} MiB/s" if aes256 else "")
                     + f" (range {min(aes):.0f}–{max(aes):.0f}: the VM's speed drifts).")
            L.append("")
        groups = [("serve", "Static files", SERVE_FIGURES, "tlsfront",
                   [n for n in ("tlsfront", "nginx", "haproxy", "hitch", "stunnel") if n in data["servers"]]),
                  ("proxy", "TLS termination in front of a TCP backend", PROXY_FIGURES, "tlsfront-proxy",
                   [n for n in ("tlsfront-proxy", "haproxy", "hitch", "stunnel") if n in data["servers"]])]
        big = data["profile"]["big"]
        big_label = "1 GiB" if big == 1 << 30 else f"{big >> 20} MiB"
        for g, title, figures, base, names in groups:
            if g not in data["groups"] or not names:
                continue
            figures = [(f[0], f[1].replace("1 GiB", big_label)) + tuple(f[2:]) for f in figures]
            L.append(f"### {title}")
            L.append("")
            L.append("Median over rounds, <sub>min–max</sub>, (×ratio to " + LABELS[base] + "). "
                     "↑ higher is better, ↓ lower is better. † the server was less than 85 % busy during "
                     "that measurement (median): the one-core client (or the backend sharing its core) was the limit, "
                     "so read the CPU-per-unit rows instead.")
            L.append("")
            L.append(table(kd, names, figures, base))
            L.append("")
            L.append("Server core utilisation during the throughput measurements (CPU seconds per second, median):")
            L.append("")
            L.append(util_table(kd, names, figures))
            L.append("")
            lost = losses(kd, names, figures, base)
            L.append(f"#### Where {LABELS[base]} loses ({key.upper()})")
            L.append("")
            L.extend(lost or ["- nowhere by more than 5 % in this run."])
            L.append("")
            if g == "serve" and "tlsfront" in names:
                L.append(f"#### Targets ({key.upper()})")
                L.append("")
                L.extend(targets(kd))
                L.append("")
                L.extend(paired_section(kd))
            charts = []
            for fk, label, unit, better, d in figures:
                if fk not in CHART_FIGURES:
                    continue
                entries = []
                for n in names:
                    s = stats(kd, n, fk)
                    entries.append((LABELS.get(n, n), s and s["median"], s and s["min"], s and s["max"]))
                if all(e[1] is None for e in entries):
                    continue
                fname = f"{key}-{g}-{fk}.svg"
                svg_bars(os.path.join(charts_dir, fname), f"{label.strip()} ({key.upper()})", unit, better, entries, d)
                charts.append(f"[{label.strip()}]({rel}/{fname})")
            if charts:
                L.append("Charts: " + " · ".join(charts))
                L.append("")
        # problems
        probs = []
        for i, rd in enumerate(kd["rounds"]):
            for n, r in rd.items():
                if not isinstance(r, dict):
                    continue
                if r.get("error"):
                    probs.append(f"- round {i + 1}, {LABELS.get(n, n)}: {r['error']}")
                for e in r.get("errors", []):
                    probs.append(f"- round {i + 1}, {LABELS.get(n, n)}: {e}")
        L.append(f"### Problems seen ({key.upper()})")
        L.append("")
        L.extend(probs or ["- none."])
        L.append("")
    L.append("## Method, in short")
    L.append("")
    L.append("See docs/BENCHMARKS.md. Each round starts every server afresh (rotated order, reversed every other "
             "round), then: 1000 idle TLS connections (RSS growth / 1000), downloads of the big file on new "
             "connections, 100 KiB keep-alive GETs on 1/2/3 connections, 1 KiB keep-alive GETs on 20 connections, "
             f"{data['profile']['hs_rate']} sessions/s for {data['profile']['hs_s']} s with one 1 KiB GET each "
             "(full, then resumed) for CPU per handshake, uploads through the terminators, then the open-loop "
             f"`tlsfront-bench tps` ramp {data['profile']['ramp']} sessions/s, {data['profile']['step_s']} s per step, "
             "4 requests per session, with and without resumption. Server CPU is the run time of every thread of "
             "every process of the server (/proc/PID/task/TID/schedstat, nanoseconds) before and after each "
             "measurement; utime+stime from /proc/PID/stat (10 ms ticks) for a process that lost threads "
             "in between.")
    L.append("")
    return "\n".join(L) + "\n"
