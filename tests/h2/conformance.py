#!/usr/bin/env python3
"""HTTP/2 conformance suite for a static-file server (GET/HEAD, no push).

Owns the raw-frame client and the case list: each case opens its own TLS
connection (ALPN h2), sends the preface and SETTINGS, drives frames built
with hyperframe and header blocks encoded with hpack (hand-crafted bytes
where a case needs what those libraries refuse to build), and checks the
server's reaction against one MUST of RFC 9113 (sections 3-8) or RFC 7541.

Case ids are `SECTION/N` with RFC 9113 section numbers, `hpack/SECTION/N`
for RFC 7541, and `server/N` for checks specific to a static-file server.
The checklist is h2spec's (summerwind/h2spec), renumbered to RFC 9113.

Usage:
  conformance.py --connect HOST:PORT --authority NAME --cafile CA.pem
                 [--path /existing-file --size N [--sha256 HEX]]
                 [--only REGEX] [--list] [--timeout S] [--jobs N]
Prints `ok   ID description`, `FAIL ID description: expected X, got Y` or
`skip ID description: why` per case, in case order; exits 1 if any case
fails. The cases that need a body (flow control, stream states held open
by a client window of 0) want --path, a file larger than 64 KiB (past the
connection's initial window); without it they skip.
Cases run --jobs at a time, each on its own connection, each within
--timeout. H2_DEBUG=1 traces every frame sent and received on stderr.

Expectations:
- connection error: GOAWAY with the code, then the server closes. A close
  without GOAWAY is accepted only for an invalid preface (RFC 9113 3.4:
  "A GOAWAY frame MAY be omitted in this case").
- stream error: RST_STREAM with the code on that stream (a response before
  it is allowed, RFC 9113 8.1.1), then the connection still answers a PING.
  Where the RFC allows either kind (e.g. 4.2 for DATA, 6.9 for DATA beyond
  the window), the case says so and accepts both.
- response: status and body bytes.
Every wait reads frames until its event, EOF or the per-case bound. A
server reads its frames in order, so a PING sent after the frames of a
case is answered only once they were dealt with: the cases use that to
know the server took a request in, and to end early when a connection
error did not come or a stream ended without its reset.
"""

import argparse
import concurrent.futures
import os
import re
import socket
import ssl
import struct
import sys
import time

import hpack
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    PriorityFrame,
    PushPromiseFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS = 0x0, 0x1, 0x2, 0x3, 0x4
PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0x5, 0x6, 0x7, 0x8, 0x9
TYPE_NAMES = {
    DATA: "DATA", HEADERS: "HEADERS", PRIORITY: "PRIORITY", RST_STREAM: "RST_STREAM",
    SETTINGS: "SETTINGS", PUSH_PROMISE: "PUSH_PROMISE", PING: "PING", GOAWAY: "GOAWAY",
    WINDOW_UPDATE: "WINDOW_UPDATE", CONTINUATION: "CONTINUATION",
}
END_STREAM, ACK, END_HEADERS, PADDED, PRIO_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20

ERRORS = [
    "NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR",
    "SETTINGS_TIMEOUT", "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM",
    "CANCEL", "COMPRESSION_ERROR", "CONNECT_ERROR", "ENHANCE_YOUR_CALM",
    "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED",
]
E = {name: code for code, name in enumerate(ERRORS)}

S_HEADER_TABLE_SIZE, S_ENABLE_PUSH, S_MAX_CONCURRENT_STREAMS = 0x1, 0x2, 0x3
S_INITIAL_WINDOW_SIZE, S_MAX_FRAME_SIZE, S_MAX_HEADER_LIST_SIZE = 0x4, 0x5, 0x6
MAX_WINDOW = 2**31 - 1
DEBUG = bool(os.environ.get("H2_DEBUG"))  # print every frame sent and received


def ename(code):
    return ERRORS[code] if code < len(ERRORS) else f"0x{code:x}"


def codes_text(codes):
    return "/".join(ename(c) for c in codes)


class Fail(Exception):
    def __init__(self, expected, got):
        super().__init__(f"expected {expected}, got {got}")


class Skip(Exception):
    pass


class Timeout(Exception):
    pass


def plain(fields):
    """A field block of literals without indexing (RFC 7541 6.2.2): it leaves
    the server's dynamic table as it was, so hand-crafted blocks can name
    dynamic indexes without tracking an encoder."""
    return b"".join(lit(k, v) for k, v in fields)


def raw(ftype, flags, sid, payload=b""):
    """A frame as bytes, for what hyperframe refuses to build (and for
    extension frames: hyperframe 6.1 writes their length as 0)."""
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", sid) + payload


def hint(value, prefix, first=0):
    """An HPACK integer (RFC 7541 5.1) with `prefix` bits in the first octet."""
    limit = (1 << prefix) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    out.append(value)
    return bytes(out)


def hstr(s):
    b = s.encode() if isinstance(s, str) else s
    return hint(len(b), 7) + b


def lit(name, value):
    """Literal field without indexing, new name, no Huffman: any bytes."""
    return b"\x00" + hstr(name) + hstr(value)


class Frame:
    """A frame the server sent, with the fields the cases look at."""

    def __init__(self, ftype, flags, sid, payload):
        self.type, self.flags, self.sid, self.payload = ftype, flags, sid, payload
        self.headers = None  # decoded field block (HEADERS, with its CONTINUATIONs)
        self.data = b""
        self.fragment = b""
        p = payload
        if ftype in (DATA, HEADERS, PUSH_PROMISE) and flags & PADDED and p:
            pad = p[0]
            p = p[1 : len(p) - pad] if pad < len(p) else b""
        if ftype == DATA:
            self.data = p
        elif ftype == HEADERS:
            self.fragment = p[5:] if flags & PRIO_FLAG else p
        elif ftype == CONTINUATION:
            self.fragment = p
        elif ftype == RST_STREAM and len(p) >= 4:
            self.code = struct.unpack(">I", p[:4])[0]
        elif ftype == GOAWAY and len(p) >= 8:
            self.last_sid = struct.unpack(">I", p[:4])[0] & MAX_WINDOW
            self.code = struct.unpack(">I", p[4:8])[0]
        elif ftype == WINDOW_UPDATE and len(p) >= 4:
            self.increment = struct.unpack(">I", p[:4])[0] & MAX_WINDOW
        elif ftype == SETTINGS:
            self.settings = [struct.unpack(">HI", p[i : i + 6]) for i in range(0, len(p) - 5, 6)]

    @property
    def end_stream(self):
        return self.type in (DATA, HEADERS) and bool(self.flags & END_STREAM)

    def status(self):
        for k, v in self.headers or []:
            if k == ":status":
                return v
        return None

    def describe(self):
        name = TYPE_NAMES.get(self.type, f"frame type 0x{self.type:x}")
        if self.type == GOAWAY:
            return f"GOAWAY({ename(getattr(self, 'code', 0))}, last stream {getattr(self, 'last_sid', '?')})"
        if self.type == RST_STREAM:
            return f"RST_STREAM(stream {self.sid}, {ename(getattr(self, 'code', 0))})"
        if self.type == HEADERS:
            es = ", END_STREAM" if self.end_stream else ""
            return f"HEADERS(stream {self.sid}, :status {self.status()}{es})"
        if self.type == DATA:
            es = ", END_STREAM" if self.end_stream else ""
            return f"DATA(stream {self.sid}, {len(self.data)} bytes{es})"
        if self.type == PING:
            return "PING ACK" if self.flags & ACK else "PING"
        if self.type == SETTINGS:
            return "SETTINGS ACK" if self.flags & ACK else f"SETTINGS{self.settings}"
        return f"{name}(stream {self.sid})"


class Conn:
    """One connection to the server, with its own HPACK state and deadline."""

    def __init__(self, opts, settings=None, preface=PREFACE, handshake=True, conn_window=None):
        self.opts = opts
        self.deadline = time.monotonic() + opts.timeout
        host, port = opts.connect.rsplit(":", 1)
        ctx = ssl.create_default_context(cafile=opts.cafile)
        ctx.set_alpn_protocols(["h2"])
        sock = socket.create_connection((host.strip("[]"), int(port)), timeout=opts.timeout)
        self.sock = ctx.wrap_socket(sock, server_hostname=opts.authority)
        alpn = self.sock.selected_alpn_protocol()
        if alpn != "h2":
            raise Fail("ALPN h2", f"ALPN {alpn!r}")
        self.buf = bytearray()
        self.eof = False
        self.enc = hpack.Encoder()
        self.dec = hpack.Decoder()
        self.block = None  # (HEADERS frame, fragments) while a field block is open
        self.server = {}  # the server's SETTINGS
        self.send_window = 65535  # connection window the server gave us
        self.stream_credit = {}  # WINDOW_UPDATE increments the server sent per stream
        self.next_sid = 1
        self.auto_window = True  # replenish the windows as DATA arrives
        self.pings = 0
        self.sent_pings = set()  # earlier probes, whose ACKs may still come
        self.first_frame = None
        if preface is not None:
            self.send(preface)
        # Push off (RFC 9113 8.4: the server MUST NOT push then); the case's
        # settings after, so a case may still send what it wants.
        settings = {S_ENABLE_PUSH: 0, **(settings or {})}
        self.max_frame_in = max(16384, settings.get(S_MAX_FRAME_SIZE, 16384))
        if handshake:
            self.send(SettingsFrame(0, settings=settings).serialize())
            if conn_window:
                self.send(WindowUpdateFrame(0, window_increment=conn_window).serialize())
            self.handshake()

    # -- wire ------------------------------------------------------------
    def send(self, *parts):
        data = b"".join(p if isinstance(p, (bytes, bytearray)) else p.serialize() for p in parts)
        if DEBUG:
            print(f"{self.opts.current} > {data[:80]!r}{'...' if len(data) > 80 else ''}", file=sys.stderr)
        try:
            self.sock.sendall(data)
        except (OSError, ssl.SSLError):
            pass  # the server closed: the reader sees EOF and reports it

    def _fill(self):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Timeout()
        self.sock.settimeout(left)
        try:
            chunk = self.sock.recv(65536)
        except (socket.timeout, TimeoutError):
            raise Timeout()
        except (OSError, ssl.SSLError):
            chunk = b""
        if not chunk:
            self.eof = True
        self.buf += chunk

    def next_frame(self):
        """The next frame (a field block comes back as its HEADERS frame,
        decoded), None at EOF; raises Timeout past the case's bound."""
        while True:
            while len(self.buf) < 9 or len(self.buf) < 9 + int.from_bytes(self.buf[:3], "big"):
                if self.eof:
                    return None
                self._fill()
            n = int.from_bytes(self.buf[:3], "big")
            ftype, flags = self.buf[3], self.buf[4]
            sid = struct.unpack(">I", self.buf[5:9])[0] & MAX_WINDOW
            f = Frame(ftype, flags, sid, bytes(self.buf[9 : 9 + n]))
            del self.buf[: 9 + n]
            if self.first_frame is None:
                self.first_frame = f
            if n > self.max_frame_in:
                raise Fail(f"frames within our SETTINGS_MAX_FRAME_SIZE {self.max_frame_in} (RFC 9113 4.2)",
                           f"{f.describe()} of {n} octets")
            if ftype == PUSH_PROMISE:
                raise Fail("no PUSH_PROMISE: our SETTINGS_ENABLE_PUSH is 0 (RFC 9113 8.4)", f.describe())
            if DEBUG:
                name = TYPE_NAMES.get(ftype, f"type 0x{ftype:x}")
                print(f"{self.opts.current} < {name} stream={sid} flags=0x{flags:x} length={n} "
                      f"{f.payload[:40]!r}", file=sys.stderr)
            if ftype == HEADERS or ftype == PUSH_PROMISE:
                if flags & END_HEADERS:
                    f.headers = self.decode(f.fragment)
                    return f
                self.block = (f, [f.fragment])
                continue
            if ftype == CONTINUATION and self.block:
                self.block[1].append(f.fragment)
                if flags & END_HEADERS:
                    h, frags = self.block
                    self.block = None
                    h.headers = self.decode(b"".join(frags))
                    return h
                continue
            if ftype == SETTINGS and not flags & ACK:
                for k, v in f.settings:
                    self.server[k] = v
                self.send(SettingsFrame(0, flags=["ACK"]).serialize())
            if ftype == WINDOW_UPDATE:
                if sid == 0:
                    self.send_window += getattr(f, "increment", 0)
                else:
                    self.stream_credit[sid] = self.stream_credit.get(sid, 0) + getattr(f, "increment", 0)
            if ftype == DATA and self.auto_window and f.payload:
                updates = [WindowUpdateFrame(0, window_increment=len(f.payload))]
                if not flags & END_STREAM:  # a closed stream takes no WINDOW_UPDATE
                    updates.append(WindowUpdateFrame(sid, window_increment=len(f.payload)))
                self.send(*updates)
            return f

    def decode(self, block):
        try:
            return [(k.decode() if isinstance(k, bytes) else k, v.decode() if isinstance(v, bytes) else v)
                    for k, v in self.dec.decode(block, raw=True)]
        except Exception as e:  # the server's own HPACK is broken
            raise Fail("a valid HPACK block from the server", f"{e!r}")

    def handshake(self):
        got_settings = got_ack = False
        while not (got_settings and got_ack):
            f = self.read("the server's SETTINGS and its ACK of ours")
            if f.type == SETTINGS:
                if f.flags & ACK:
                    got_ack = True
                else:
                    got_settings = True
        if self.first_frame.type != SETTINGS or self.first_frame.flags & ACK:
            raise Fail("SETTINGS as the server's first frame (RFC 9113 3.4)", self.first_frame.describe())

    def read(self, what):
        try:
            f = self.next_frame()
        except Timeout:
            raise Fail(what, f"nothing more within {self.opts.timeout:g} s")
        if f is None:
            raise Fail(what, "connection closed")
        return f

    # -- requests --------------------------------------------------------
    @property
    def max_frame(self):
        return self.server.get(S_MAX_FRAME_SIZE, 16384)

    def sid(self):
        s = self.next_sid
        self.next_sid += 2
        return s

    def req(self, method="GET", path=None, extra=()):
        return [(":method", method), (":scheme", "https"), (":authority", self.opts.authority),
                (":path", path or self.opts.path or "/")] + list(extra)

    def block_of(self, headers):
        return self.enc.encode(headers, huffman=True)

    def headers(self, sid, headers, end_stream=True, end_headers=True, **kw):
        flags = (["END_STREAM"] if end_stream else []) + (["END_HEADERS"] if end_headers else [])
        block = headers if isinstance(headers, bytes) else self.block_of(headers)
        return HeadersFrame(sid, block, flags=flags, **kw).serialize()

    def get(self, method="GET", path=None, extra=(), end_stream=True):
        s = self.sid()
        self.send(self.headers(s, self.req(method, path, extra), end_stream=end_stream))
        return s

    # -- expectations ----------------------------------------------------
    def ping(self):
        self.pings += 1
        payload = struct.pack(">II", os.getpid() & 0xFFFFFFFF, self.pings)
        self.sent_pings.add(payload)
        self.send(PingFrame(0, payload).serialize())
        return payload

    def expect_ping_ack(self, payload, what="PING ACK (the connection still usable)"):
        while True:
            f = self.read(what)
            if f.type == PING and f.flags & ACK:
                if f.payload == payload:
                    return
                if f.payload in self.sent_pings:
                    continue
                raise Fail(what + " with the same payload", f"PING ACK with {f.payload!r}")
            if f.type == GOAWAY:
                raise Fail(what, f.describe())

    def alive(self):
        self.expect_ping_ack(self.ping())

    def expect_conn_error(self, *codes, bare_close_ok=False, probe=True):
        """GOAWAY(codes) then the server's close. With probe, a PING goes
        after the offending frames: a server reads its frames in order, so
        one that answers it has gone on past them (no connection error).
        probe may also be the payload of a PING the case sent itself."""
        want = f"GOAWAY({codes_text(codes)}) then close"
        seen = []
        payload = probe if isinstance(probe, bytes) else self.ping() if probe else None
        while True:
            try:
                f = self.next_frame()
            except Timeout:
                raise Fail(want, (", ".join(seen) + ", then " if seen else "") + "no GOAWAY within the bound")
            if f is None:
                if bare_close_ok:
                    return
                raise Fail(want, (", ".join(seen) + ", then " if seen else "") + "close without GOAWAY")
            if f.type == GOAWAY:
                if f.code not in codes:
                    raise Fail(want, f.describe())
                try:
                    while self.next_frame() is not None:
                        pass
                except Timeout:
                    raise Fail(want, f"{f.describe()} but the connection stayed open (RFC 9113 5.4.1: MUST close)")
                return
            if f.type == PING and f.flags & ACK and f.payload == payload:
                raise Fail(want, ", ".join(seen + ["the PING sent after it answered: no connection error"]))
            if f.type in (RST_STREAM, HEADERS):
                seen.append(f.describe())

    def expect_stream_error(self, sid, *codes, conn_too=False, conn_codes=(), early_ok=False):
        """RST_STREAM(codes) on sid then a usable connection. With conn_too
        the RFC allows a connection error with those codes as well; with
        conn_codes, a connection error with these. With early_ok, a complete
        response then RST_STREAM(NO_ERROR) passes too: RFC 9113 8.1 lets a
        server answer before the request ends and stop the rest that way,
        so it never reads the part the case made wrong."""
        goaway_ok = (set(codes) if conn_too else set()) | set(conn_codes)
        want = f"RST_STREAM(stream {sid}, {codes_text(codes)})" + (
            f" or GOAWAY({codes_text(sorted(goaway_ok))})" if goaway_ok else "")
        probe, seen = None, []
        while True:
            try:
                f = self.next_frame()
            except Timeout:
                raise Fail(want, ", ".join(seen + [f"nothing more within {self.opts.timeout:g} s"]))
            if f is None:
                raise Fail(want, ", ".join(seen + ["close without GOAWAY"]))
            if f.type == GOAWAY:
                if f.code in goaway_ok:
                    return
                raise Fail(want, ", ".join(seen + [f.describe()]))
            if f.type == RST_STREAM and f.sid == sid:
                if early_ok and probe is not None and f.code == E["NO_ERROR"]:
                    self.alive()
                    return
                if f.code not in codes:
                    raise Fail(want, ", ".join(seen + [f.describe()]))
                self.alive()
                return
            if f.sid == sid and f.type in (HEADERS, DATA) and (f.type == HEADERS or not seen or f.end_stream):
                seen.append(f.describe())
            if f.sid == sid and f.end_stream and probe is None:
                # The stream ended with a response: a reset must come with it.
                probe = self.ping()
            if f.type == PING and f.flags & ACK and probe is not None and f.payload == probe:
                raise Fail(want, ", ".join(seen + ["no RST_STREAM"]))

    def expect_response(self, sid, status=None, size=None):
        """The response on sid: (fields, body, DATA frame lengths)."""
        want = f"a response on stream {sid}" + (f" with :status {status}" if status else "")
        fields, body, sizes = None, b"", []
        while True:
            f = self.read(want)
            if f.type == GOAWAY or (f.type == RST_STREAM and f.sid == sid):
                raise Fail(want, f.describe())
            if f.sid != sid or f.type not in (HEADERS, DATA):
                continue
            if f.type == HEADERS:
                st = f.status()
                if fields is None and st and st.startswith("1"):
                    continue
                if fields is None:
                    fields = f.headers
                    if status is not None and st != str(status):
                        raise Fail(want, f.describe())
            else:
                if fields is None:
                    raise Fail(want, "DATA before HEADERS")
                body += f.data
                sizes.append(len(f.payload))
            if f.end_stream:
                if size is not None and len(body) != size:
                    raise Fail(f"{size} body bytes", f"{len(body)}")
                return fields, body, sizes

    def stalled(self, end_stream=True):
        """A GET of --path on a connection whose client window is 0: its body
        cannot flow, so the stream stays open on the server (half-closed
        (remote) with end_stream, open without). Returns once a PING sent
        after the request came back: the server has taken the request in."""
        s = self.get(end_stream=end_stream)
        payload = self.ping()
        while True:
            f = self.read(f"PING ACK after the request on stream {s}")
            if f.type == PING and f.flags & ACK and f.payload == payload:
                return s
            if f.type == GOAWAY or (f.type == RST_STREAM and f.sid == s) or (f.sid == s and f.end_stream):
                raise Fail(f"stream {s} open (its body held by a window of 0)", f.describe())

    def data_until_ping(self, sid):
        """Flow-controlled octets (padding included) of DATA on sid until
        the ACK of a PING sent now."""
        payload = self.ping()
        got = 0
        while True:
            f = self.read("PING ACK")
            if f.type == DATA and f.sid == sid:
                got += len(f.payload)
            elif f.type == PING and f.flags & ACK and f.payload == payload:
                return got
            elif f.type == GOAWAY or (f.type == RST_STREAM and f.sid == sid):
                raise Fail("the stream open", f.describe())

    def data_bytes(self, sid, n):
        """Read DATA on sid until n flow-controlled octets came; fail past n."""
        got = 0
        while got < n:
            f = self.read(f"{n} bytes of DATA on stream {sid}")
            if f.type == DATA and f.sid == sid:
                got += len(f.payload)
            elif f.type == GOAWAY or (f.type == RST_STREAM and f.sid == sid):
                raise Fail(f"{n} bytes of DATA", f"{got}, then {f.describe()}")
        if got > n:
            raise Fail(f"{n} bytes of DATA (the window)", f"{got}")

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


CASES = []


def case(cid, desc, needs_file=False):
    def wrap(fn):
        CASES.append((cid, desc, needs_file, fn))
        return fn
    return wrap


ZERO_WINDOW = {S_INITIAL_WINDOW_SIZE: 0}


def no_larger_frame(c):
    if c.max_frame >= 2**24 - 1:
        raise Skip("the server's SETTINGS_MAX_FRAME_SIZE is 2^24-1: no frame can exceed it")


def need_size(o, n):
    if o.size <= n:
        raise Skip(f"needs a --path file larger than {n} bytes")


# ---------------------------------------------------------------- 3.4
@case("3.4/1", "the server's first frame is SETTINGS")
def _(o):
    Conn(o)  # the handshake checks it


@case("3.4/2", "invalid connection preface: PROTOCOL_ERROR (GOAWAY may be omitted)")
def _(o):
    c = Conn(o, preface=b"INVALID CONNECTION PREFACE\r\n\r\n", handshake=False)
    c.expect_conn_error(E["PROTOCOL_ERROR"], bare_close_ok=True, probe=False)


@case("3.4/3", "preface followed by PING, not SETTINGS: PROTOCOL_ERROR (GOAWAY may be omitted)")
def _(o):
    c = Conn(o, handshake=False)
    c.send(PingFrame(0, b"preface?").serialize())
    c.expect_conn_error(E["PROTOCOL_ERROR"], bare_close_ok=True, probe=b"preface?")


# ---------------------------------------------------------------- 4.1
@case("4.1/1", "a frame of unknown type is ignored")
def _(o):
    c = Conn(o)
    c.send(raw(0x20, 0, 0, b"unknown"))
    c.alive()


@case("4.1/2", "undefined flags are ignored (PING with flags 0xfe)")
def _(o):
    c = Conn(o)
    c.send(raw(PING, 0xFE, 0, b"flags!!!"))
    c.expect_ping_ack(b"flags!!!")


@case("4.1/3", "the reserved bit of the stream id is ignored")
def _(o):
    c = Conn(o)
    block = c.block_of(c.req())
    c.send(raw(HEADERS, END_STREAM | END_HEADERS, 0x80000001, block))
    c.expect_response(1)


# ---------------------------------------------------------------- 4.2
@case("4.2/1", "a DATA frame of 2^14 octets is accepted")
def _(o):
    c = Conn(o)
    if c.server.get(S_INITIAL_WINDOW_SIZE, 65535) < 16384:
        raise Skip("the server's initial window is below 2^14")
    s = c.get(extra=[("content-length", "16384")], end_stream=False)
    c.send(DataFrame(s, b"x" * 16384, flags=["END_STREAM"]).serialize())
    while True:  # any response; a reset only with NO_ERROR (RFC 9113 8.1)
        f = c.read(f"a response on stream {s}")
        if f.type == GOAWAY or (f.type == RST_STREAM and f.sid == s and f.code != 0):
            raise Fail("a response", f.describe())
        if f.sid == s and (f.end_stream or f.type == RST_STREAM):
            break
    c.alive()


@case("4.2/2", "DATA over SETTINGS_MAX_FRAME_SIZE: FRAME_SIZE_ERROR (stream or connection)", needs_file=True)
def _(o):
    c = Conn(o, ZERO_WINDOW)
    no_larger_frame(c)
    s = c.stalled(end_stream=False)
    c.send(raw(DATA, END_STREAM, s, b"x" * (c.max_frame + 1)))
    c.expect_stream_error(s, E["FRAME_SIZE_ERROR"], conn_too=True)


@case("4.2/3", "HEADERS over SETTINGS_MAX_FRAME_SIZE: connection FRAME_SIZE_ERROR")
def _(o):
    c = Conn(o)
    no_larger_frame(c)
    pad = [(f"x-pad-{i}", "p" * 100) for i in range(c.max_frame // 100 + 2)]
    block = hpack.Encoder().encode(c.req() + pad, huffman=False)
    c.send(raw(HEADERS, END_STREAM | END_HEADERS, 1, block[: c.max_frame + 1]))
    c.expect_conn_error(E["FRAME_SIZE_ERROR"])


@case("4.2/4", "SETTINGS over SETTINGS_MAX_FRAME_SIZE: connection FRAME_SIZE_ERROR")
def _(o):
    c = Conn(o)
    no_larger_frame(c)
    n = (c.max_frame // 6 + 1) * 6
    c.send(raw(SETTINGS, 0, 0, struct.pack(">HI", 0xF0F0, 0) * (n // 6)))
    c.expect_conn_error(E["FRAME_SIZE_ERROR"])


# ---------------------------------------------------------------- 4.3
@case("4.3/1", "an undecodable field block: connection COMPRESSION_ERROR")
def _(o):
    c = Conn(o)
    block = c.block_of(c.req()) + b"\x00\x85ab"  # a name of 5 octets, 2 present
    c.send(raw(HEADERS, END_STREAM | END_HEADERS, 1, block))
    c.expect_conn_error(E["COMPRESSION_ERROR"])


@case("4.3/2", "PRIORITY inside a field block: connection PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    c.send(c.headers(1, c.req(), end_headers=False),
           PriorityFrame(1, depends_on=0, stream_weight=15).serialize())
    c.expect_conn_error(E["PROTOCOL_ERROR"])


@case("4.3/3", "HEADERS of another stream inside a field block: connection PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    c.send(c.headers(1, c.req(), end_headers=False), c.headers(3, c.req()))
    c.expect_conn_error(E["PROTOCOL_ERROR"])


@case("4.3/4", "the field block of a refused stream still updates the dynamic table")
def _(o):
    c = Conn(o)
    # stream 1 is malformed (unknown pseudo-header) and adds :path to the
    # dynamic table (literal with incremental indexing, index 62)
    head = plain(base(o)[:3])
    c.send(raw(HEADERS, END_STREAM | END_HEADERS, 1, head + b"\x44" + hstr(o.path or "/") + lit(":bogus", "1")))
    while True:
        f = c.read("the reaction to stream 1")
        if f.type == GOAWAY:
            raise Fail("a stream error on stream 1", f.describe())
        if f.sid == 1 and (f.type == RST_STREAM or f.end_stream):
            break
    c.send(raw(HEADERS, END_STREAM | END_HEADERS, 3, head + hint(62, 7, 0x80)))
    fields, _, _ = c.expect_response(3)
    st = dict(fields).get(":status")
    if o.path and st != "200":
        raise Fail(f"200 for {o.path} named by dynamic index 62", f":status {st}")


# ---------------------------------------------------------------- 5.1
@case("5.1/1", "idle: DATA: connection PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    c.send(DataFrame(1, b"test", flags=["END_STREAM"]).serialize())
    c.expect_conn_error(E["PROTOCOL_ERROR"])


@case("5.1/2", "idle: RST_STREAM: connection PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    c.send(RstStreamFrame(1, error_code=E["CANCEL"]).serialize())
    c.expect_conn_error(E["PROTOCOL_ERROR"])


@case("5.1/3", "idle: WINDOW_UPDATE: connection PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    c.send(WindowUpdateFrame(1, window_increment=100).serialize())
    c.expect_conn_error(E["PROTOCOL_ERROR"])


@case("5.1/4", "idle: CONTINUATION: connection PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    c.send(ContinuationFrame(1, c.block_of(c.req()), flags=["END_HEADERS"]).serialize())
    c.expect_conn_error(E["PROTOCOL_ERROR"])


@case("5.1/5", "half-closed (remote): DATA: STREAM_CLOSED", needs_file=True)
def _(o):
    c = Conn(o, ZERO_WINDOW)
    s = c.stalled()
    c.send(DataFrame(s, b"test", flags=["END_STREAM"]).serialize())
    c.expect_stream_error(s, E["STREAM_CLOSED"], conn_too=True)


@case("5.1/6", "half-closed (remote): HEADERS: STREAM_CLOSED", needs_file=True)
def _(o):
    c = Conn(o, ZERO_WINDOW)
    s = c.stalled()
    c.send(c.headers(s, [("x-trailer", "1")]))
    c.expect_stream_error(s, E["STREAM_CLOSED"], conn_too=True)


@case("5.1/7", "half-closed (remote): CONTINUATION: STREAM_CLOSED or connection PROTOCOL_ERROR (6.10)",
      needs_file=True)
def _(o):
    c = Conn(o, ZERO_WINDOW)
    s = c.stalled()
    c.send(ContinuationFrame(s, lit("x-a", "1"), flags=["END_HEADERS"]).serialize())
    c.expect_stream_error(s, E["STREAM_CLOSED"], E["PROTOCOL_ERROR"], conn_too=True)


@case("5.1/8", "closed by the client's RST_STREAM: DATA: STREAM_CLOSED", needs_file=True)
def _(o):
    c = Conn(o, ZERO_WINDOW)
    s = c.get(end_stream=False)
    c.send(RstStreamFrame(s, error_code=E["CANCEL"]).serialize())
    c.send(DataFrame(s, b"test", flags=["END_STREAM"]).serialize())
    c.expect_stream_error(s, E["STREAM_CLOSED"], conn_too=True)


@case("5.1/9", "closed by the client's RST_STREAM: HEADERS: STREAM_CLOSED (or connection PROTOCOL_ERROR, 5.1.1)", needs_file=True)
def _(o):
    c = Conn(o, ZERO_WINDOW)
    s = c.get(end_stream=False)
    c.send(RstStreamFrame(s, error_code=E["CANCEL"]).serialize())
    c.send(c.headers(s, [("x-trailer", "1")]))
    c.expect_stream_error(s, E["STREAM_CLOSED"], conn_too=True, conn_codes=[E["PROTOCOL_ERROR"]])


@case("5.1/10", "closed by the client's RST_STREAM: CONTINUATION: connection PROTOCOL_ERROR or STREAM_CLOSED", needs_file=True)
def _(o):
    c = Conn(o, ZERO_WINDOW)
    s = c.get(end_stream=False)
    c.send(RstStreamFrame(s, error_code=E["CANCEL"]).serialize())
    c.send(ContinuationFrame(s, lit("x-a", "1"), flags=["END_HEADERS"]).serialize())
    c.expect_stream_error(s, E["STREAM_CLOSED"], E["PROTOCOL_ERROR"], conn_too=True)


@case("5.1/11", "closed (both END_STREAM): DATA: STREAM_CLOSED")
def _(o):
    c = Conn(o)
    s = c.get()
    c.expect_response(s)
    c.send(DataFrame(s, b"test", flags=["END_STREAM"]).serialize())
    c.expect_stream_error(s, E["STREAM_CLOSED"], conn_too=True)


@case("5.1/12", "closed (both END_STREAM): HEADERS: STREAM_CLOSED (or connection PROTOCOL_ERROR, 5.1.1)")
def _(o):
    c = Conn(o)
    s = c.get()
    c.expect_response(s)
    c.send(c.headers(s, c.req()))
    c.expect_stream_error(s, E["STREAM_CLOSED"], conn_too=True, conn_codes=[E["PROTOCOL_ERROR"]])


@case("5.1/13", "closed (both END_STREAM): CONTINUATION: connection PROTOCOL_ERROR or STREAM_CLOSED")
def _(o):
    c = Conn(o)
    s = c.get()
    c.expect_response(s)
    c.send(ContinuationFrame(s, lit("x-a", "1"), flags=["END_HEADERS"]).serialize())
    c.expect_stream_error(s, E["STREAM_CLOSED"], E["PROTOCOL_ERROR"], conn_too=True)


# ---------------------------------------------------------------- 5.1.1
@case("5.1.1/1", "an even stream id from the client: connection PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    c.send(c.headers(2, c.req()))
    c.expect_conn_error(E["PROTOCOL_ERROR"])


@case("5.1.1/2", "a stream id smaller than a previous one: connection PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    c.send(c.headers(5, c.req()))
    c.expect_response(5)
    c.send(c.headers(3, c.req()))
    c.expect_conn_error(E["PROTOCOL_ERROR"])


# ---------------------------------------------------------------- 5.1.2
@case("5.1.2/1", "streams over SETTINGS_MAX_CONCURRENT_STREAMS: REFUSED_STREAM or PROTOCOL_ERROR",
      needs_file=True)
def _(o):
    c = Conn(o, ZERO_WINDOW)
    limit = c.server.get(S_MAX_CONCURRENT_STREAMS)
    if limit is None or limit > 1000:
        raise Skip(f"the server advertises no usable limit ({limit})")
    sids = [c.sid() for _ in range(limit + 1)]
    c.send(*[c.headers(s, c.req()) for s in sids])
    want = f"RST_STREAM(REFUSED_STREAM/PROTOCOL_ERROR) on a stream past {limit}"
    while True:
        f = c.read(want)
        if f.type == RST_STREAM:
            if f.code in (E["REFUSED_STREAM"], E["PROTOCOL_ERROR"]):
                c.alive()
                return
            raise Fail(want, f.describe())
        if f.type == GOAWAY:
            raise Fail(want, f.describe())


# ---------------------------------------------------------------- 5.3.1
@case("5.3.1/1", "HEADERS depending on its own stream: PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    c.send(HeadersFrame(1, c.block_of(c.req()), flags=["END_STREAM", "END_HEADERS", "PRIORITY"],
                        depends_on=1, stream_weight=15).serialize())
    c.expect_stream_error(1, E["PROTOCOL_ERROR"])


@case("5.3.1/2", "PRIORITY depending on its own stream: PROTOCOL_ERROR", needs_file=True)
def _(o):
    c = Conn(o, ZERO_WINDOW)
    s = c.stalled()
    c.send(PriorityFrame(s, depends_on=s, stream_weight=15).serialize())
    c.expect_stream_error(s, E["PROTOCOL_ERROR"])


# ---------------------------------------------------------------- 5.4
@case("5.4.1/1", "a connection error is a GOAWAY then a close (PING of 6 octets)")
def _(o):
    c = Conn(o)
    c.send(raw(PING, 0, 0, b"\0" * 6))
    c.expect_conn_error(E["FRAME_SIZE_ERROR"])


@case("5.4.1/2", "GOAWAY names the last stream the server processed")
def _(o):
    c = Conn(o)
    s = c.get()
    c.expect_response(s)
    c.send(raw(PING, 0, 0, b"\0" * 6))
    while True:
        f = c.read("GOAWAY")
        if f.type == GOAWAY:
            if f.last_sid != s:
                raise Fail(f"GOAWAY with last stream {s}", f.describe())
            return


# ---------------------------------------------------------------- 5.5
@case("5.5/1", "an unknown extension frame on a stream is ignored")
def _(o):
    c = Conn(o)
    c.send(raw(0xFF, 0xFF, 1, b"extension"))
    c.alive()
    s = c.get()
    c.expect_response(s)


@case("5.5/2", "an unknown frame inside a field block: connection PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    c.send(c.headers(1, c.req(), end_headers=False), raw(0xFF, 0, 1, b"x"))
    c.expect_conn_error(E["PROTOCOL_ERROR"])


@case("5.5/3", "an unknown setting is ignored")
def _(o):
    c = Conn(o)
    c.send(SettingsFrame(0, settings={0xFF: 1}).serialize())
    while True:
        f = c.read("SETTINGS ACK")
        if f.type == SETTINGS and f.flags & ACK:
            break
        if f.type == GOAWAY:
            raise Fail("SETTINGS ACK", f.describe())
    c.alive()


# ---------------------------------------------------------------- 6.1
@case("6.1/1", "DATA on stream 0: connection PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    c.send(raw(DATA, END_STREAM, 0, b"test"))
    c.expect_conn_error(E["PROTOCOL_ERROR"])


@case("6.1/2", "DATA on a stream half-closed (remote) after END_STREAM: STREAM_CLOSED", needs_file=True)
def _(o):
    c = Conn(o, ZERO_WINDOW)
    s = c.stalled()
    c.send(DataFrame(s, b"", flags=["END_STREAM"]).serialize())
    c.expect_stream_error(s, E["STREAM_CLOSED"], conn_too=True)


@case("6.1/3", "DATA whose padding is not shorter than the payload: connection PROTOCOL_ERROR", needs_file=True)
def _(o):
    c = Conn(o, ZERO_WINDOW)
    s = c.stalled(end_stream=False)
    c.send(raw(DATA, PADDED | END_STREAM, s, b"\x06test!"))
    c.expect_conn_error(E["PROTOCOL_ERROR"])


# ---------------------------------------------------------------- 6.2
@case("6.2/1", "HEADERS on stream 0: connection PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    c.send(raw(HEADERS, END_STREAM | END_HEADERS, 0, c.block_of(c.req())))
    c.expect_conn_error(E["PROTOCOL_ERROR"])


@case("6.2/2", "HEADERS whose padding is not shorter than the payload: connection PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    block = c.block_of(c.req())
    c.send(raw(HEADERS, PADDED | END_STREAM | END_HEADERS, 1, bytes([len(block) + 1]) + block))
    c.expect_conn_error(E["PROTOCOL_ERROR"])


@case("6.2/3", "padded HEADERS with priority are accepted")
def _(o):
    c = Conn(o)
    f = HeadersFrame(1, c.block_of(c.req()), flags=["END_STREAM", "END_HEADERS", "PADDED", "PRIORITY"],
                     pad_length=10, depends_on=0, stream_weight=200)
    c.send(f.serialize())
    c.expect_response(1)


# ---------------------------------------------------------------- 6.3
@case("6.3/1", "PRIORITY on stream 0: connection PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    c.send(raw(PRIORITY, 0, 0, b"\0\0\0\x01\x0f"))
    c.expect_conn_error(E["PROTOCOL_ERROR"])


@case("6.3/2", "PRIORITY of 4 octets: stream FRAME_SIZE_ERROR", needs_file=True)
def _(o):
    c = Conn(o, ZERO_WINDOW)
    s = c.stalled()
    c.send(raw(PRIORITY, 0, s, b"\0\0\0\x00"))
    c.expect_stream_error(s, E["FRAME_SIZE_ERROR"])


@case("6.3/3", "PRIORITY on an idle stream is accepted")
def _(o):
    c = Conn(o)
    c.send(PriorityFrame(9, depends_on=0, stream_weight=15).serialize())
    c.alive()
    c.next_sid = 11  # whether PRIORITY used up 9 (and those below) is left open
    c.expect_response(c.get())


@case("6.3/4", "PRIORITY on a closed stream is accepted")
def _(o):
    c = Conn(o)
    s = c.get()
    c.expect_response(s)
    c.send(PriorityFrame(s, depends_on=0, stream_weight=15).serialize())
    c.alive()


# ---------------------------------------------------------------- 6.4
@case("6.4/1", "RST_STREAM on stream 0: connection PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    c.send(raw(RST_STREAM, 0, 0, struct.pack(">I", E["CANCEL"])))
    c.expect_conn_error(E["PROTOCOL_ERROR"])


@case("6.4/2", "RST_STREAM of 3 octets: connection FRAME_SIZE_ERROR", needs_file=True)
def _(o):
    c = Conn(o, ZERO_WINDOW)
    s = c.stalled()
    c.send(raw(RST_STREAM, 0, s, b"\0\0\x08"))
    c.expect_conn_error(E["FRAME_SIZE_ERROR"])


@case("6.4/3", "RST_STREAM from the client ends the response", needs_file=True)
def _(o):
    c = Conn(o, ZERO_WINDOW)
    s = c.stalled()
    # The window opens for every stream (no frame may go on the reset one):
    # a server that still served it would send DATA now.
    c.send(RstStreamFrame(s, error_code=E["CANCEL"]).serialize(),
           SettingsFrame(0, settings={S_INITIAL_WINDOW_SIZE: 65535}).serialize())
    if c.data_until_ping(s):
        raise Fail("no DATA after RST_STREAM", "DATA")


# ---------------------------------------------------------------- 6.5
@case("6.5/1", "SETTINGS ACK with a payload: connection FRAME_SIZE_ERROR")
def _(o):
    c = Conn(o)
    c.send(raw(SETTINGS, ACK, 0, struct.pack(">HI", S_ENABLE_PUSH, 0)))
    c.expect_conn_error(E["FRAME_SIZE_ERROR"])


@case("6.5/2", "SETTINGS on stream 1: connection PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    c.send(raw(SETTINGS, 0, 1, struct.pack(">HI", S_ENABLE_PUSH, 0)))
    c.expect_conn_error(E["PROTOCOL_ERROR"])


@case("6.5/3", "SETTINGS of 3 octets: connection FRAME_SIZE_ERROR")
def _(o):
    c = Conn(o)
    c.send(raw(SETTINGS, 0, 0, b"\0\x02\0"))
    c.expect_conn_error(E["FRAME_SIZE_ERROR"])


@case("6.5.2/1", "SETTINGS_ENABLE_PUSH of 2: connection PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    c.send(raw(SETTINGS, 0, 0, struct.pack(">HI", S_ENABLE_PUSH, 2)))
    c.expect_conn_error(E["PROTOCOL_ERROR"])


@case("6.5.2/2", "SETTINGS_INITIAL_WINDOW_SIZE of 2^31: connection FLOW_CONTROL_ERROR")
def _(o):
    c = Conn(o)
    c.send(raw(SETTINGS, 0, 0, struct.pack(">HI", S_INITIAL_WINDOW_SIZE, 2**31)))
    c.expect_conn_error(E["FLOW_CONTROL_ERROR"])


@case("6.5.2/3", "SETTINGS_MAX_FRAME_SIZE of 2^14-1: connection PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    c.send(raw(SETTINGS, 0, 0, struct.pack(">HI", S_MAX_FRAME_SIZE, 2**14 - 1)))
    c.expect_conn_error(E["PROTOCOL_ERROR"])


@case("6.5.2/4", "SETTINGS_MAX_FRAME_SIZE of 2^24: connection PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    c.send(raw(SETTINGS, 0, 0, struct.pack(">HI", S_MAX_FRAME_SIZE, 2**24)))
    c.expect_conn_error(E["PROTOCOL_ERROR"])


@case("6.5.3/1", "several SETTINGS_INITIAL_WINDOW_SIZE values apply in order (last: 1)", needs_file=True)
def _(o):
    c = Conn(o)
    c.send(raw(SETTINGS, 0, 0, struct.pack(">HIHI", S_INITIAL_WINDOW_SIZE, 100, S_INITIAL_WINDOW_SIZE, 1)))
    c.auto_window = False
    s = c.get()
    c.data_bytes(s, 1)
    got = c.data_until_ping(s)
    if got:
        raise Fail("1 byte of DATA (the window)", f"{1 + got}")


@case("6.5.3/2", "SETTINGS is acknowledged")
def _(o):
    c = Conn(o)
    c.send(SettingsFrame(0, settings={S_MAX_HEADER_LIST_SIZE: 65536}).serialize())
    while True:
        f = c.read("SETTINGS ACK")
        if f.type == SETTINGS and f.flags & ACK:
            return
        if f.type == GOAWAY:
            raise Fail("SETTINGS ACK", f.describe())


# ---------------------------------------------------------------- 6.7
@case("6.7/1", "PING is answered by PING ACK with the same payload")
def _(o):
    c = Conn(o)
    c.send(PingFrame(0, b"h2-conf!").serialize())
    c.expect_ping_ack(b"h2-conf!")


@case("6.7/2", "PING ACK is not answered")
def _(o):
    c = Conn(o)
    c.send(PingFrame(0, b"unsolic!", flags=["ACK"]).serialize())
    c.send(PingFrame(0, b"solicit!").serialize())
    c.expect_ping_ack(b"solicit!")


@case("6.7/3", "PING on stream 1: connection PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    c.send(raw(PING, 0, 1, b"\0" * 8))
    c.expect_conn_error(E["PROTOCOL_ERROR"])


@case("6.7/4", "PING of 6 octets: connection FRAME_SIZE_ERROR")
def _(o):
    c = Conn(o)
    c.send(raw(PING, 0, 0, b"\0" * 6))
    c.expect_conn_error(E["FRAME_SIZE_ERROR"])


# ---------------------------------------------------------------- 6.8
@case("6.8/1", "GOAWAY on stream 1: connection PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    c.send(raw(GOAWAY, 0, 1, struct.pack(">II", 0, 0)))
    c.expect_conn_error(E["PROTOCOL_ERROR"])


# ---------------------------------------------------------------- 6.9
@case("6.9/1", "WINDOW_UPDATE of 0 on the connection: connection PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    c.send(raw(WINDOW_UPDATE, 0, 0, struct.pack(">I", 0)))
    c.expect_conn_error(E["PROTOCOL_ERROR"])


@case("6.9/2", "WINDOW_UPDATE of 0 on a stream: stream PROTOCOL_ERROR", needs_file=True)
def _(o):
    c = Conn(o, ZERO_WINDOW)
    s = c.stalled()
    c.send(raw(WINDOW_UPDATE, 0, s, struct.pack(">I", 0)))
    c.expect_stream_error(s, E["PROTOCOL_ERROR"])


@case("6.9/3", "WINDOW_UPDATE of 3 octets: connection FRAME_SIZE_ERROR")
def _(o):
    c = Conn(o)
    c.send(raw(WINDOW_UPDATE, 0, 0, b"\0\0\x01"))
    c.expect_conn_error(E["FRAME_SIZE_ERROR"])


@case("6.9.1/1", "SETTINGS_INITIAL_WINDOW_SIZE of 1: DATA frames of at most 1 octet", needs_file=True)
def _(o):
    c = Conn(o, {S_INITIAL_WINDOW_SIZE: 1})
    c.auto_window = False
    s = c.get()
    c.data_bytes(s, 1)
    got = c.data_until_ping(s)
    if got:
        raise Fail("no DATA past the window of 1", f"{got} more bytes")


@case("6.9.1/2", "the connection window over 2^31-1: connection FLOW_CONTROL_ERROR")
def _(o):
    c = Conn(o)
    c.send(WindowUpdateFrame(0, window_increment=MAX_WINDOW).serialize(),
           WindowUpdateFrame(0, window_increment=MAX_WINDOW).serialize())
    c.expect_conn_error(E["FLOW_CONTROL_ERROR"])


@case("6.9.1/3", "a stream window over 2^31-1: stream FLOW_CONTROL_ERROR", needs_file=True)
def _(o):
    need_size(o, 65535)  # our connection window then keeps the stream open
    c = Conn(o, ZERO_WINDOW)
    c.auto_window = False
    s = c.stalled()
    c.send(WindowUpdateFrame(s, window_increment=MAX_WINDOW).serialize(),
           WindowUpdateFrame(s, window_increment=MAX_WINDOW).serialize())
    c.expect_stream_error(s, E["FLOW_CONTROL_ERROR"])


@case("6.9.1/4", "DATA beyond the server's stream window: FLOW_CONTROL_ERROR (stream or connection)", needs_file=True)
def _(o):
    c = Conn(o, ZERO_WINDOW)
    c.stream_credit = {}
    s = c.stalled(end_stream=False)
    # What the server allows for this stream (its SETTINGS and any
    # WINDOW_UPDATE it sent before the PING came back), then one frame more.
    window = c.server.get(S_INITIAL_WINDOW_SIZE, 65535) + c.stream_credit.get(s, 0)
    if min(window, c.send_window) > 16 << 20:
        raise Skip(f"the server's window ({min(window, c.send_window)}) is too large to overrun here")
    window = min(window, c.send_window)
    frames, left = [], window + 1
    while left:
        n = min(left, c.max_frame)
        frames.append(raw(DATA, 0, s, b"x" * n))
        left -= n
    c.send(*frames)
    probe = c.ping()
    want = f"RST_STREAM(stream {s}, FLOW_CONTROL_ERROR) or GOAWAY(FLOW_CONTROL_ERROR)"
    credited = False
    while True:
        f = c.read(want)
        if f.type == GOAWAY or (f.type == RST_STREAM and f.sid == s):
            if f.code != E["FLOW_CONTROL_ERROR"]:
                raise Fail(want, f.describe())
            if f.type == RST_STREAM:
                c.alive()
            return
        if f.type == WINDOW_UPDATE and f.sid in (0, s):
            credited = True
        if f.type == PING and f.flags & ACK and f.payload == probe:
            if credited:
                raise Skip("the server credited its window while the DATA was on its way (it reads "
                           "request bodies): the overrun cannot be told from a legal send")
            raise Fail(want, "the PING after the DATA answered, no error")


@case("6.9.2/1", "a new SETTINGS_INITIAL_WINDOW_SIZE applies to open streams", needs_file=True)
def _(o):
    c = Conn(o, ZERO_WINDOW)
    c.auto_window = False
    s = c.stalled()
    if c.data_until_ping(s):
        raise Fail("no DATA with a window of 0", "DATA")
    n = min(100, o.size)
    c.send(SettingsFrame(0, settings={S_INITIAL_WINDOW_SIZE: n}).serialize())
    c.data_bytes(s, n)
    if n < o.size and c.data_until_ping(s):
        raise Fail(f"{n} bytes of DATA (the new window)", "more")


@case("6.9.2/2", "a SETTINGS_INITIAL_WINDOW_SIZE change can make a window negative", needs_file=True)
def _(o):
    need_size(o, 120)
    c = Conn(o, {S_INITIAL_WINDOW_SIZE: 100})
    c.auto_window = False
    s = c.get()
    c.data_bytes(s, 100)
    # window 100 - 100 = 0; new initial 50: 0 - 50 = -50; +60: 10
    c.send(SettingsFrame(0, settings={S_INITIAL_WINDOW_SIZE: 50}).serialize(),
           WindowUpdateFrame(s, window_increment=60).serialize())
    c.data_bytes(s, 10)
    got = c.data_until_ping(s)
    if got:
        raise Fail("10 bytes of DATA (window -50 + 60)", f"{10 + got}")


@case("6.9.2/3", "a SETTINGS_INITIAL_WINDOW_SIZE change pushing a stream window over 2^31-1: "
      "connection FLOW_CONTROL_ERROR", needs_file=True)
def _(o):
    need_size(o, 65535)
    c = Conn(o, ZERO_WINDOW)
    c.auto_window = False
    s = c.stalled()
    c.send(WindowUpdateFrame(s, window_increment=MAX_WINDOW).serialize())
    c.data_bytes(s, 65535)  # our connection window stops it here
    c.send(SettingsFrame(0, settings={S_INITIAL_WINDOW_SIZE: 65535 + 1}).serialize())
    c.expect_conn_error(E["FLOW_CONTROL_ERROR"])


# ---------------------------------------------------------------- 6.10
@case("6.10/1", "HEADERS and several CONTINUATION frames are accepted")
def _(o):
    c = Conn(o)
    block = c.block_of(c.req() + [(f"x-dummy{i}", "d" * 20) for i in range(8)])
    parts = [block[i : i + 16] for i in range(0, len(block), 16)]
    frames = [raw(HEADERS, END_STREAM, 1, parts[0])]
    frames += [raw(CONTINUATION, 0, 1, p) for p in parts[1:-1]]
    frames.append(raw(CONTINUATION, END_HEADERS, 1, parts[-1]))
    c.send(*frames)
    c.expect_response(1)


@case("6.10/2", "CONTINUATION followed by another frame type: connection PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    block = c.block_of(c.req())
    c.send(raw(HEADERS, END_STREAM, 1, block[:2]), raw(CONTINUATION, 0, 1, block[2:]),
           raw(DATA, 0, 1, b"x"))
    c.expect_conn_error(E["PROTOCOL_ERROR"])


@case("6.10/3", "CONTINUATION on stream 0: connection PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    block = c.block_of(c.req())
    c.send(raw(HEADERS, END_STREAM, 1, block[:2]), raw(CONTINUATION, END_HEADERS, 0, block[2:]))
    c.expect_conn_error(E["PROTOCOL_ERROR"])


@case("6.10/4", "CONTINUATION after HEADERS with END_HEADERS: connection PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    c.send(c.headers(1, c.req()), raw(CONTINUATION, END_HEADERS, 1, lit("x-a", "1")))
    c.expect_conn_error(E["PROTOCOL_ERROR"], E["STREAM_CLOSED"])


@case("6.10/5", "CONTINUATION after CONTINUATION with END_HEADERS: connection PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    block = c.block_of(c.req())
    c.send(raw(HEADERS, END_STREAM, 1, block[:2]), raw(CONTINUATION, END_HEADERS, 1, block[2:]),
           raw(CONTINUATION, END_HEADERS, 1, lit("x-a", "1")))
    c.expect_conn_error(E["PROTOCOL_ERROR"], E["STREAM_CLOSED"])


@case("6.10/6", "CONTINUATION after DATA: connection PROTOCOL_ERROR", needs_file=True)
def _(o):
    c = Conn(o, ZERO_WINDOW)
    s = c.stalled(end_stream=False)
    c.send(raw(DATA, 0, s, b"x"), raw(CONTINUATION, END_HEADERS, s, lit("x-a", "1")))
    c.expect_conn_error(E["PROTOCOL_ERROR"])


@case("6.10/7", "CONTINUATION on another stream than its HEADERS: connection PROTOCOL_ERROR")
def _(o):
    c = Conn(o)
    block = c.block_of(c.req())
    c.send(raw(HEADERS, END_STREAM, 1, block[:2]), raw(CONTINUATION, END_HEADERS, 3, block[2:]))
    c.expect_conn_error(E["PROTOCOL_ERROR"])


# ---------------------------------------------------------------- 7
@case("7/1", "GOAWAY with an unknown error code: no special behaviour")
def _(o):
    c = Conn(o)
    c.send(GoAwayFrame(0, last_stream_id=0, error_code=0xFF).serialize())
    # The server may answer the PING or, with nothing in flight, end the
    # connection gracefully; an error of its own would be special behaviour.
    payload = c.ping()
    while True:
        f = c.read("PING ACK or GOAWAY(NO_ERROR)")
        if f.type == PING and f.flags & ACK and f.payload == payload:
            return
        if f.type == GOAWAY:
            if f.code != E["NO_ERROR"]:
                raise Fail("no error from the server", f.describe())
            return


@case("7/2", "RST_STREAM with an unknown error code: no special behaviour", needs_file=True)
def _(o):
    c = Conn(o, ZERO_WINDOW)
    s = c.stalled()
    c.send(RstStreamFrame(s, error_code=0xFF).serialize())
    c.alive()
    c.send(SettingsFrame(0, settings={S_INITIAL_WINDOW_SIZE: 65535}).serialize())
    c.expect_response(c.get(method="HEAD"), status=200)


# ---------------------------------------------------------------- 8.1
def malformed(o, fields=None, block=None, end_stream=True):
    """Send a request (fields or a raw block), expect PROTOCOL_ERROR on it."""
    c = Conn(o)
    b = block if block is not None else plain(fields)
    c.send(raw(HEADERS, END_HEADERS | (END_STREAM if end_stream else 0), 1, b))
    c.expect_stream_error(1, E["PROTOCOL_ERROR"])


def base(o, path=None):
    return [(":method", "GET"), (":scheme", "https"), (":authority", o.authority),
            (":path", path or o.path or "/")]


@case("8.1/1", "a second HEADERS without END_STREAM (trailers): PROTOCOL_ERROR", needs_file=True)
def _(o):
    c = Conn(o, ZERO_WINDOW)
    s = c.stalled(end_stream=False)
    c.send(c.headers(s, [("x-trailer", "1")], end_stream=False))
    c.expect_stream_error(s, E["PROTOCOL_ERROR"])


@case("8.1/2", "trailers with a pseudo-header: PROTOCOL_ERROR", needs_file=True)
def _(o):
    c = Conn(o, ZERO_WINDOW)
    s = c.stalled(end_stream=False)
    c.send(c.headers(s, [(":method", "GET")], end_stream=True))
    c.expect_stream_error(s, E["PROTOCOL_ERROR"])


@case("8.1.1/1", "content-length above the DATA received: PROTOCOL_ERROR (or an early response and RST_STREAM(NO_ERROR))")
def _(o):
    c = Conn(o)
    s = c.get(extra=[("content-length", "10")], end_stream=False)
    c.send(DataFrame(s, b"test", flags=["END_STREAM"]).serialize())
    c.expect_stream_error(s, E["PROTOCOL_ERROR"], early_ok=True)


@case("8.1.1/2", "content-length below the DATA received (several frames): PROTOCOL_ERROR (or an early response and RST_STREAM(NO_ERROR))")
def _(o):
    c = Conn(o)
    s = c.get(extra=[("content-length", "6")], end_stream=False)
    c.send(DataFrame(s, b"test").serialize(), DataFrame(s, b"test", flags=["END_STREAM"]).serialize())
    c.expect_stream_error(s, E["PROTOCOL_ERROR"], early_ok=True)


@case("8.1.1/3", "content-length on a GET that then sends no DATA: PROTOCOL_ERROR")
def _(o):
    malformed(o, base(o) + [("content-length", "1")])


# ---------------------------------------------------------------- 8.2
@case("8.2/1", "a field name in uppercase: PROTOCOL_ERROR")
def _(o):
    malformed(o, base(o) + [("X-TEST", "ok")])


@case("8.2.1/1", "a field name with a space: PROTOCOL_ERROR")
def _(o):
    malformed(o, block=plain(base(o)) + lit("x test", "ok"))


@case("8.2.1/2", "a field value with LF: PROTOCOL_ERROR")
def _(o):
    malformed(o, block=plain(base(o)) + lit("x-test", "a\nb"))


@case("8.2.1/3", "a field value with NUL: PROTOCOL_ERROR")
def _(o):
    malformed(o, block=plain(base(o)) + lit("x-test", "a\0b"))


@case("8.2.1/4", "a field value with CR: PROTOCOL_ERROR")
def _(o):
    malformed(o, block=plain(base(o)) + lit("x-test", "a\rb"))


@case("8.2.1/5", "a field value starting with a space: PROTOCOL_ERROR")
def _(o):
    malformed(o, block=plain(base(o)) + lit("x-test", " ok"))


@case("8.2.1/6", "a field name with a colon past its start: PROTOCOL_ERROR")
def _(o):
    malformed(o, block=plain(base(o)) + lit("x:test", "ok"))


@case("8.2.1/7", "a field value ending with a tab: PROTOCOL_ERROR")
def _(o):
    malformed(o, block=plain(base(o)) + lit("x-test", "ok\t"))


for _i, (_name, _value) in enumerate([("connection", "keep-alive"), ("keep-alive", "timeout=5"),
                                      ("proxy-connection", "keep-alive"),
                                      ("transfer-encoding", "chunked"), ("upgrade", "h2c")]):
    @case(f"8.2.2/{_i + 1}", f"the connection-specific field {_name}: PROTOCOL_ERROR")
    def _(o, n=_name, v=_value):
        malformed(o, base(o) + [(n, v)])


@case("8.2.2/6", "TE other than trailers: PROTOCOL_ERROR")
def _(o):
    malformed(o, base(o) + [("te", "trailers, deflate")])


@case("8.2.2/7", "TE: trailers is accepted")
def _(o):
    c = Conn(o)
    c.expect_response(c.get(extra=[("te", "trailers")]))


@case("8.2.3/1", "cookie split over several fields is accepted")
def _(o):
    c = Conn(o)
    c.expect_response(c.get(extra=[("cookie", "a=b"), ("cookie", "c=d")]))


# ---------------------------------------------------------------- 8.3
@case("8.3/1", "an unknown pseudo-header: PROTOCOL_ERROR")
def _(o):
    malformed(o, base(o) + [(":test", "ok")])


@case("8.3/2", "a response pseudo-header (:status) in a request: PROTOCOL_ERROR")
def _(o):
    malformed(o, base(o) + [(":status", "200")])


@case("8.3/3", "a pseudo-header after a regular field: PROTOCOL_ERROR")
def _(o):
    b = base(o)
    malformed(o, b[:3] + [("x-test", "ok")] + b[3:])


@case("8.3.1/1", "an empty :path: PROTOCOL_ERROR")
def _(o):
    malformed(o, base(o)[:3] + [(":path", "")])


for _i, _p in enumerate([":method", ":scheme", ":path"]):
    @case(f"8.3.1/{_i + 2}", f"{_p} omitted: PROTOCOL_ERROR")
    def _(o, p=_p):
        malformed(o, [(k, v) for k, v in base(o) if k != p])


for _i, _p in enumerate([":method", ":scheme", ":path"]):
    @case(f"8.3.1/{_i + 5}", f"{_p} duplicated: PROTOCOL_ERROR")
    def _(o, p=_p):
        b = base(o)
        malformed(o, b + [(p, dict(b)[p])])


@case("8.3.1/8", "GET of --path: 200, with its size and bytes", needs_file=True)
def _(o):
    c = Conn(o)
    c.expect_response(c.get(), status=200, size=o.size)


# ---------------------------------------------------------------- 8.4
@case("8.4/1", "PUSH_PROMISE from the client: connection PROTOCOL_ERROR", needs_file=True)
def _(o):
    c = Conn(o, ZERO_WINDOW)
    s = c.stalled(end_stream=False)
    c.send(PushPromiseFrame(s, promised_stream_id=2, data=c.block_of(c.req()),
                            flags=["END_HEADERS"]).serialize())
    c.expect_conn_error(E["PROTOCOL_ERROR"])


# ---------------------------------------------------------------- 8.5
@case("8.5/1", "CONNECT with :scheme and :path: PROTOCOL_ERROR")
def _(o):
    malformed(o, [(":method", "CONNECT"), (":scheme", "https"), (":authority", o.authority),
                  (":path", "/")], end_stream=False)


@case("8.5/2", "CONNECT without :authority: PROTOCOL_ERROR")
def _(o):
    malformed(o, [(":method", "CONNECT")], end_stream=False)


@case("8.5/3", "a well-formed CONNECT is not tunnelled (a non-2xx response or a reset)")
def _(o):
    c = Conn(o)
    c.send(c.headers(1, [(":method", "CONNECT"), (":authority", "127.0.0.1:443")], end_stream=False))
    while True:
        f = c.read("a response or RST_STREAM on stream 1")
        if f.type == GOAWAY:
            raise Fail("a stream-level answer", f.describe())
        if f.sid == 1 and f.type == RST_STREAM:
            break
        if f.sid == 1 and f.type == HEADERS:
            if (f.status() or "").startswith("2"):
                raise Fail("no tunnel", f.describe())
            break
    c.alive()


# ---------------------------------------------------------------- HPACK
def compression_error(o, block):
    c = Conn(o)
    c.send(raw(HEADERS, END_STREAM | END_HEADERS, 1, block))
    c.expect_conn_error(E["COMPRESSION_ERROR"])


def enc_base(o):
    """The request's fields, none of them added to the dynamic table."""
    return plain(base(o))


@case("hpack/2.3/1", "entries of the dynamic table are usable by later field blocks")
def _(o):
    c = Conn(o)  # c.enc indexes incrementally: the second block is indexed fields
    c.expect_response(c.get(extra=[("x-dyn", "value")]))
    c.expect_response(c.get(extra=[("x-dyn", "value")]))


@case("hpack/2.3.3/1", "indexed field past both tables: COMPRESSION_ERROR")
def _(o):
    compression_error(o, enc_base(o) + hint(70, 7, 0x80))


@case("hpack/2.3.3/2", "literal with an indexed name past both tables: COMPRESSION_ERROR")
def _(o):
    compression_error(o, enc_base(o) + hint(70, 4, 0x00) + hstr("x"))


@case("hpack/4.2/1", "dynamic table size update at the end of a block: COMPRESSION_ERROR")
def _(o):
    compression_error(o, enc_base(o) + hint(0, 5, 0x20))


@case("hpack/4.2/2", "dynamic table size update to 0 at the start of a block is accepted")
def _(o):
    c = Conn(o)
    c.send(raw(HEADERS, END_STREAM | END_HEADERS, 1, hint(0, 5, 0x20) + enc_base(o)))
    c.expect_response(1)


@case("hpack/4.2/3", "two dynamic table size updates at the start of a block are accepted")
def _(o):
    c = Conn(o)
    c.send(raw(HEADERS, END_STREAM | END_HEADERS, 1, hint(0, 5, 0x20) + hint(256, 5, 0x20) + enc_base(o)))
    c.expect_response(1)


@case("hpack/4.4/1", "entries evicted by a smaller table size are gone: COMPRESSION_ERROR")
def _(o):
    c = Conn(o)
    # stream 1 adds x-evict to the table (index 62); stream 3 shrinks the
    # table to 0 (evicting it) and refers to index 62.
    b1 = enc_base(o) + b"\x40" + hstr("x-evict") + hstr("1")
    c.send(raw(HEADERS, END_STREAM | END_HEADERS, 1, b1))
    c.expect_response(1)
    c.send(raw(HEADERS, END_STREAM | END_HEADERS, 3, hint(0, 5, 0x20) + enc_base(o) + hint(62, 7, 0x80)))
    c.expect_conn_error(E["COMPRESSION_ERROR"])


@case("hpack/5.1/1", "an integer past any limit: COMPRESSION_ERROR")
def _(o):
    compression_error(o, enc_base(o) + b"\xff" + b"\xff" * 10 + b"\x01")


@case("hpack/5.2/1", "Huffman string with padding longer than 7 bits: COMPRESSION_ERROR")
def _(o):
    compression_error(o, enc_base(o) + b"\x00\x85\xf2\xb2\x4a\x84\xff\x84\x49\x50\x9f\xff")


@case("hpack/5.2/2", "Huffman string padded with zeros: COMPRESSION_ERROR")
def _(o):
    compression_error(o, enc_base(o) + b"\x00\x85\xf2\xb2\x4a\x84\xff\x83\x49\x50\x90")


@case("hpack/5.2/3", "Huffman string containing EOS: COMPRESSION_ERROR")
def _(o):
    compression_error(o, enc_base(o) + b"\x00\x85\xf2\xb2\x4a\x84\xff\x87\x49\x51\xff\xff\xff\xfa\x7f")


@case("hpack/5.2/4", "Huffman-encoded strings are accepted")
def _(o):
    c = Conn(o)
    c.send(raw(HEADERS, END_STREAM | END_HEADERS, 1, hpack.Encoder().encode(base(o), huffman=True)))
    c.expect_response(1)


@case("hpack/6.1/1", "indexed field with index 0: COMPRESSION_ERROR")
def _(o):
    compression_error(o, enc_base(o) + b"\x80")


@case("hpack/6.3/1", "dynamic table size update over SETTINGS_HEADER_TABLE_SIZE: COMPRESSION_ERROR")
def _(o):
    c = Conn(o)
    limit = c.server.get(S_HEADER_TABLE_SIZE, 4096)  # what the server's decoder allows
    c.send(raw(HEADERS, END_STREAM | END_HEADERS, 1, hint(limit + 1, 5, 0x20) + enc_base(o)))
    c.expect_conn_error(E["COMPRESSION_ERROR"])


# ---------------------------------------------------------------- server
@case("server/1", "GET of --path: DATA frames within SETTINGS_MAX_FRAME_SIZE, body intact", needs_file=True)
def _(o):
    c = Conn(o, {S_INITIAL_WINDOW_SIZE: MAX_WINDOW}, conn_window=MAX_WINDOW - 65535)
    fields, body, sizes = c.expect_response(c.get(), status=200, size=o.size)
    if any(n > 16384 for n in sizes):
        raise Fail("DATA frames of at most 16384 octets (our SETTINGS_MAX_FRAME_SIZE)", f"{max(sizes)}")
    if o.size > 16384 and len(sizes) < 2:
        raise Fail("several DATA frames", f"{len(sizes)}")
    cl = dict(fields).get("content-length")
    if cl is not None and cl != str(o.size):
        raise Fail(f"content-length {o.size}", cl)
    if o.sha256 and __import__("hashlib").sha256(body).hexdigest() != o.sha256:
        raise Fail(f"body with sha256 {o.sha256}", __import__("hashlib").sha256(body).hexdigest())


@case("server/2", "HEAD of --path: HEADERS with END_STREAM, content-length, no DATA", needs_file=True)
def _(o):
    c = Conn(o)
    s = c.get("HEAD")
    f = c.read("the HEAD response")
    while not (f.sid == s and f.type in (HEADERS, DATA, RST_STREAM)):
        f = c.read("the HEAD response")
    if f.type != HEADERS or not f.end_stream or f.status() != "200":
        raise Fail("HEADERS(:status 200, END_STREAM)", f.describe())
    cl = dict(f.headers).get("content-length")
    if cl is not None and cl != str(o.size):
        raise Fail(f"content-length {o.size}", cl)
    if c.data_until_ping(s):
        raise Fail("no DATA", "DATA")


@case("server/3", "a window of 0 holds the body; WINDOW_UPDATE resumes it", needs_file=True)
def _(o):
    c = Conn(o, ZERO_WINDOW)
    c.auto_window = False
    s = c.stalled()
    if c.data_until_ping(s):
        raise Fail("no DATA while the stream window is 0", "DATA")
    c.auto_window = True
    c.send(WindowUpdateFrame(s, window_increment=o.size).serialize(),
           WindowUpdateFrame(0, window_increment=o.size).serialize())
    got = 0
    while True:
        f = c.read("the rest of the body")
        if f.type == GOAWAY or (f.type == RST_STREAM and f.sid == s):
            raise Fail("the body", f.describe())
        if f.type == DATA and f.sid == s:
            got += len(f.data)
            if f.end_stream:
                break
    if got != o.size:
        raise Fail(f"{o.size} bytes", f"{got}")


@case("server/4", "a larger SETTINGS_MAX_FRAME_SIZE from the client: DATA frames within it", needs_file=True)
def _(o):
    c = Conn(o, {S_INITIAL_WINDOW_SIZE: MAX_WINDOW, S_MAX_FRAME_SIZE: 65536}, conn_window=MAX_WINDOW - 65535)
    _, _, sizes = c.expect_response(c.get(), status=200, size=o.size)
    if any(n > 65536 for n in sizes):
        raise Fail("DATA frames of at most 65536 octets", f"{max(sizes)}")


@case("server/5", "concurrent streams are answered each with its own body", needs_file=True)
def _(o):
    c = Conn(o, {S_INITIAL_WINDOW_SIZE: MAX_WINDOW}, conn_window=MAX_WINDOW - 65535)
    sids = [c.sid() for _ in range(3)]
    c.send(*[c.headers(s, c.req()) for s in sids])
    bodies = {s: b"" for s in sids}
    done = set()
    while len(done) < len(sids):
        f = c.read("three responses")
        if f.type == GOAWAY or f.type == RST_STREAM:
            raise Fail("three responses", f.describe())
        if f.type == DATA and f.sid in bodies:
            bodies[f.sid] += f.data
        if f.sid in bodies and f.end_stream:
            done.add(f.sid)
    if any(len(b) != o.size for b in bodies.values()) or len(set(bodies.values())) != 1:
        raise Fail(f"three bodies of {o.size} bytes", str([len(b) for b in bodies.values()]))


@case("server/6", "GET of a missing file: 404")
def _(o):
    c = Conn(o)
    c.expect_response(c.get(path="/h2-conformance-no-such-file"), status=404)


def run_case(o, entry):
    cid, desc, needs_file, fn = entry
    o = argparse.Namespace(**vars(o), current=cid)
    if needs_file and not o.path:
        return "skip", "needs --path and --size"
    try:
        fn(o)
        return "ok", ""
    except Skip as e:
        return "skip", str(e)
    except Fail as e:
        return "FAIL", str(e)
    except (OSError, ssl.SSLError) as e:
        return "FAIL", f"connection failed: {e!r}"
    except Exception as e:  # a bug in the case itself: report it, run the rest
        return "FAIL", f"the case broke: {e!r}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--connect", required=True, help="HOST:PORT")
    ap.add_argument("--authority", required=True, help="SNI and :authority")
    ap.add_argument("--cafile", required=True)
    ap.add_argument("--path", help="an existing file, for the body and flow-control cases")
    ap.add_argument("--size", type=int, default=0, help="its size in bytes")
    ap.add_argument("--sha256", help="its SHA-256, checked by server/1")
    ap.add_argument("--only", help="run the cases whose id or description matches this regex")
    ap.add_argument("--timeout", type=float, default=10.0, help="bound of each case, seconds")
    ap.add_argument("--jobs", type=int, default=8, help="cases run at once (each on its own connection)")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    o = ap.parse_args()
    if o.path and o.size <= 0:
        ap.error("--path needs --size (a file of at least 1 byte)")
    cases = [c for c in CASES if not o.only or re.search(o.only, f"{c[0]} {c[1]}")]
    if o.list:
        for cid, desc, _, _ in cases:
            print(f"{cid} {desc}")
        return 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=o.jobs) as pool:
        results = list(pool.map(lambda c: run_case(o, c), cases))
    failed = 0
    for (cid, desc, _, _), (verdict, why) in zip(cases, results):
        if verdict == "ok":
            print(f"ok   {cid} {desc}")
        else:
            failed += verdict == "FAIL"
            print(f"{verdict:<4} {cid} {desc}: {why}")
    counts = {v: sum(r[0] == v for r in results) for v in ("ok", "FAIL", "skip")}
    print(f"{counts['ok']} passed, {counts['FAIL']} failed, {counts['skip']} skipped", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
