#!/usr/bin/env python3
"""tests/tls/negative.py — TLS negative tests against a running tlsfront.

Owns the peer side of what tlsfront must refuse and how: it starts
`tlsfront serve` and `tlsfront proxy` (an ECDSA and an RSA certificate
each) and plays clients that break the protocol, with records built by
hand (before the handshake) or tlslite-ng (after it, where the records are
encrypted), and, against a static site with `client_auth = "require"`,
clients presenting no, a foreign, an expired or a mis-signed client
certificate. Each case asserts the exact alert received (or the 400 page),
that the connection was closed, and that the server still serves; at the
end no server may have printed a panic.

Usage: python3 tests/tls/negative.py [--bin PATH]  (default target/debug/tlsfront)
Needs: openssl (certificates), tlslite-ng (pip). With TLSFRONT_EXPECT_KTLS=1
(the kTLS guest) the post-handshake cases must also show up as kernel
decrypt errors in /proc/net/tls_stat. Ends with "N passed, M failed".
"""

import hashlib
import hmac
import os
import re
import select
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time

from tlslite.api import HandshakeSettings, TLSConnection, X509CertChain, parsePEMKey
from tlslite.constants import KeyUpdateMessageType
from tlslite.errors import TLSAbruptCloseError, TLSRemoteAlert
from tlslite.messages import Message
from tlslite.utils.cipherfactory import createAESGCM
from tlslite.utils.x25519 import x25519

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Bounds a broken server, not what is measured: every wait ends on data or EOF.
SAFETY = 60

# TLS constants (RFC 8446 §5.1, §6, §B.3).
HANDSHAKE, ALERT, APPDATA, CCS = 22, 21, 23, 20
BAD_RECORD_MAC, RECORD_OVERFLOW, HANDSHAKE_FAILURE = 20, 22, 40
DECODE_ERROR, PROTOCOL_VERSION, INAPPROPRIATE_FALLBACK = 50, 70, 86
UNEXPECTED_MESSAGE, NO_APPLICATION_PROTOCOL, USER_CANCELED = 10, 120, 90
NO_RENEGOTIATION = 100
BAD_CERTIFICATE, CERTIFICATE_EXPIRED, UNKNOWN_CA = 42, 45, 48
DECRYPT_ERROR, CERTIFICATE_REQUIRED = 51, 116
NAMES = {
    0: "close_notify", 10: "unexpected_message", 20: "bad_record_mac",
    22: "record_overflow", 40: "handshake_failure", 42: "bad_certificate",
    45: "certificate_expired", 47: "illegal_parameter", 48: "unknown_ca",
    50: "decode_error", 51: "decrypt_error", 70: "protocol_version",
    80: "internal_error", 86: "inappropriate_fallback", 90: "user_canceled",
    100: "no_renegotiation", 116: "certificate_required",
    120: "no_application_protocol",
}

KTLS = os.environ.get("TLSFRONT_EXPECT_KTLS") == "1"


def alert_name(d):
    return f"{NAMES.get(d, 'alert')}({d})"


# ---- Certificates and servers ------------------------------------------------

def make_cert(d, kind):
    cert, key = os.path.join(d, f"{kind}.crt"), os.path.join(d, f"{kind}.key")
    newkey = "rsa:2048" if kind == "rsa" else "ec"
    extra = [] if kind == "rsa" else ["-pkeyopt", "ec_paramgen_curve:P-256"]
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", newkey, *extra, "-nodes", "-days", "2",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
         "-keyout", key, "-out", cert],
        check=True, capture_output=True)
    return cert, key


# What the echo backend received, per connection, once it closed: its
# first MARK bytes -> how many bytes came in all.
RECEIVED = {}
MARK = 16


def echo_backend():
    """A plain-TCP echo server for the proxy; returns its port."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(64)

    def serve(c):
        head, total = b"", 0
        with c:
            while True:
                try:
                    b = c.recv(65536)
                except OSError:
                    b = b""
                if not b:
                    RECEIVED[head[:MARK]] = total
                    return
                head = head if len(head) >= MARK else head + b[:MARK]
                total += len(b)
                try:
                    c.sendall(b)
                except OSError:
                    pass

    def loop():
        while True:
            c, _ = ls.accept()
            threading.Thread(target=serve, args=(c,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    return ls.getsockname()[1]


class Server:
    def __init__(self, binary, mode, kind, tmp, config=None):
        self.binary, self.mode, self.kind = binary, mode, kind
        self.cert, key = make_cert(tmp, kind)
        args = [binary, mode]
        if mode == "serve":
            www = os.path.join(tmp, "www")
            os.makedirs(www, exist_ok=True)
            with open(os.path.join(www, "hello.txt"), "w") as f:
                f.write("hello world\n")
            args.append(www)
        else:
            args += ["--backend", f"127.0.0.1:{echo_backend()}"]
        args += ["--listen", "127.0.0.1:0", "--cert", self.cert, "--key", key,
                 "--workers", "1"]
        if KTLS:
            args += ["--ktls", "require"]
        if config is not None:
            path = os.path.join(tmp, "tlsfront.toml")
            with open(path, "w") as f:
                f.write(config)
            args += ["--config", path]
        env = dict(os.environ, XDG_DATA_HOME=tmp)
        self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=env)
        self.out, self.err = [], []
        self.port = 0
        for line in self.p.stdout:
            self.out.append(line)
            m = re.search(r"https://127\.0\.0\.1:(\d+)", line)
            if m and not self.port:
                self.port = int(m.group(1))
            if line.startswith("kTLS:"):
                break
        if not self.port:
            raise RuntimeError(f"tlsfront {mode} did not start: {self.out} {self.p.stderr.read()}")
        self.readers = []
        for stream, sink in ((self.p.stdout, self.out), (self.p.stderr, self.err)):
            t = threading.Thread(target=lambda s=stream, k=sink: k.extend(s), daemon=True)
            t.start()
            self.readers.append(t)

    def name(self):
        return f"{self.mode}/{self.kind}"

    def stop(self):
        """Stop it (SIGTERM: it drains and prints its counters): (stdout, stderr)."""
        self.p.terminate()
        self.p.wait(SAFETY)
        # The closing report is the last thing it prints: read to the end
        # (EOF), not merely until the exit.
        for t in self.readers:
            t.join(SAFETY)
            assert not t.is_alive(), f"{self.name()}: no EOF on its output {SAFETY} s after the exit"
        return "".join(self.out), "".join(self.err)

    def alive(self):
        """A good client still gets served."""
        ctx = ssl.create_default_context(cafile=self.cert)
        with socket.create_connection(("127.0.0.1", self.port), timeout=SAFETY) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                if self.mode == "serve":
                    s.sendall(b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                    want = b"hello world\n"
                else:
                    s.sendall(b"ping\n")
                    want = b"ping\n"
                got = b""
                while not got.endswith(want):
                    b = s.recv(65536)
                    if not b:
                        break
                    got += b
        assert got.endswith(want), f"server no longer serves: {got[:200]!r}"
        if self.mode == "serve":
            assert got.startswith(b"HTTP/1.1 200"), got[:200]


# ---- Client certificates (client_auth = "require") ---------------------------

class ClientCerts:
    """A client CA, certificates it issues (good, expired), one from
    another CA, and a key that belongs to none of them."""

    def __init__(self, d):
        self.d = d
        self.ca = self.make_ca("ca")
        self.other_ca = self.make_ca("other-ca")
        self.good = self.issue("good", self.ca, days=2)
        self.expired = self.issue("expired", self.ca, days=-1)
        self.foreign = self.issue("foreign", self.other_ca, days=2)
        self.stray_key = self.issue("stray", self.ca, days=2)[1]

    def run(self, *args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    def make_ca(self, name):
        crt, key = os.path.join(self.d, f"{name}.crt"), os.path.join(self.d, f"{name}.key")
        self.run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                 "-nodes", "-days", "2", "-subj", f"/CN=negative {name}",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign", "-keyout", key, "-out", crt)
        return crt, key

    def issue(self, name, ca, days):
        """A client certificate signed by `ca`; `days` < 0: expired (its
        notAfter before its notBefore, both around now)."""
        crt, key = os.path.join(self.d, f"{name}.crt"), os.path.join(self.d, f"{name}.key")
        csr, ext = os.path.join(self.d, f"{name}.csr"), os.path.join(self.d, "client.ext")
        with open(ext, "w") as f:
            f.write("extendedKeyUsage=clientAuth\n")
        self.run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-subj", f"/CN={name}", "-keyout", key, "-out", csr)
        self.run("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-days", str(days),
                 "-extfile", ext, "-out", crt)
        return crt, key


def load_chain(crt, key):
    chain = X509CertChain()
    with open(crt) as f:
        chain.parsePemList(f.read())
    with open(key) as f:
        return chain, parsePEMKey(f.read(), private=True)


def mtls_handshake(srv, version, cert=None, key=None):
    """A tlslite-ng handshake presenting `cert` signed with `key` (no
    certificate with None): the connection, once the client is done."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=SAFETY)
    c = TLSConnection(s)
    hs = HandshakeSettings()
    hs.minVersion = hs.maxVersion = version
    chain, pkey = (None, None)
    if cert is not None:
        chain, _ = load_chain(cert, key)
        _, pkey = load_chain(cert, key)
    try:
        c.handshakeClientCert(certChain=chain, privateKey=pkey, settings=hs,
                              serverName="localhost")
    except TLSRemoteAlert as e:
        # TLS 1.2: the server's verdict comes before the client's Finished
        # is answered.
        c.sock.close()
        return e.description
    return c


def mtls_refused(version, which, want):
    """The certificate `which` (an attribute of ClientCerts, or None for
    none; "stray": the good certificate signed with another key) is refused
    with the alert `want`."""

    def case(srv):
        certs = srv.client_certs
        cert = key = None
        if which == "stray":
            cert, key = certs.good[0], certs.stray_key
        elif which is not None:
            cert, key = getattr(certs, which)
        got = mtls_handshake(srv, version, cert, key)
        if isinstance(got, int):
            assert got == want, f"want {alert_name(want)}, got {alert_name(got)}"
            return
        # TLS 1.3: the client is done before the server has checked; the
        # refusal is the first thing read (nothing is written: the server
        # may have closed already).
        expect_tls_alert(got, want)

    return case


def mtls_alive(srv):
    """A client with a good certificate is served."""
    c = mtls_handshake(srv, (3, 4), *srv.client_certs.good)
    assert not isinstance(c, int), f"refused with {alert_name(c)}"
    c.write(b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    got = b""
    try:
        while not got.endswith(b"hello world\n"):
            b = c.read()
            if not b:
                break
            got += b
    finally:
        c.sock.close()
    assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"hello world\n"), got[:200]


MTLS_CASES = [
    (f"{v}: {title}", mtls_refused(ver, which, want))
    for v, ver in (("TLS 1.3", (3, 4)), ("TLS 1.2", (3, 3)))
    for title, which, want in (
        ("no client certificate", None, CERTIFICATE_REQUIRED),
        ("a client certificate from another CA", "foreign", UNKNOWN_CA),
        ("an expired client certificate", "expired", CERTIFICATE_EXPIRED),
        ("a CertificateVerify signed with another key", "stray", DECRYPT_ERROR),
    )
]


# ---- Records built by hand ---------------------------------------------------

def record(ct, payload, version=b"\x03\x01"):
    return bytes([ct]) + version + struct.pack(">H", len(payload)) + payload


def ext(typ, data):
    return struct.pack(">HH", typ, len(data)) + data


SIGS = (0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501)


def client_hello(legacy=0x0303, suites=(0x1301, 0x1302, 0x1303, 0xC02B, 0xC02F),
                 versions=(0x0304, 0x0303), reneg=b"", extra=b"", sigs=SIGS,
                 share=None, alpn=()):
    """A ClientHello handshake message rustls accepts, unless told otherwise.
    `versions` empty: no supported_versions (a TLS 1.2 client). `share`:
    the X25519 public key to offer (random bytes if None). `alpn`: the
    protocols to offer, if any."""
    name = b"localhost"
    exts = ext(0, struct.pack(">HBH", len(name) + 3, 0, len(name)) + name)
    exts += ext(10, struct.pack(">H", 4) + struct.pack(">HH", 0x001D, 0x0017))  # groups
    exts += ext(11, b"\x01\x00")  # ec_point_formats
    exts += ext(13, struct.pack(">H", 2 * len(sigs)) + b"".join(struct.pack(">H", s) for s in sigs))
    exts += ext(23, b"")  # extended_master_secret
    if alpn:
        names = b"".join(bytes([len(a)]) + a for a in alpn)
        exts += ext(16, struct.pack(">H", len(names)) + names)
    if versions:
        exts += ext(43, bytes([2 * len(versions)]) + b"".join(struct.pack(">H", v) for v in versions))
        share = struct.pack(">HH", 0x001D, 32) + (share or os.urandom(32))
        exts += ext(51, struct.pack(">H", len(share)) + share)  # key_share
    if reneg is not None:
        exts += ext(0xFF01, bytes([len(reneg)]) + reneg)
    exts += extra
    body = struct.pack(">H", legacy) + os.urandom(32) + b"\x20" + os.urandom(32)
    body += struct.pack(">H", 2 * len(suites)) + b"".join(struct.pack(">H", s) for s in suites)
    body += b"\x01\x00" + struct.pack(">H", len(exts)) + exts
    return b"\x01" + struct.pack(">I", len(body))[1:] + body


def fragments(msg, size, ct=HANDSHAKE):
    return b"".join(record(ct, msg[i:i + size]) for i in range(0, len(msg), size))


def converse(port, data):
    """Send `data`, read until the server closes: (records, raw bytes)."""
    with socket.create_connection(("127.0.0.1", port), timeout=SAFETY) as s:
        try:
            s.sendall(data)
        except OSError:
            pass  # the server may close before it has read everything
        got = b""
        while True:
            try:
                b = s.recv(65536)
            except ConnectionResetError:
                break
            if not b:
                break
            got += b
    recs, rest = [], got
    while len(rest) >= 5:
        n = struct.unpack(">H", rest[3:5])[0]
        recs.append((rest[0], rest[5:5 + n]))
        rest = rest[5 + n:]
    return recs, got


def expect_plain_alert(port, data, want):
    """The server's answer ends in fatal alert `want`; None: it closes
    without a word (where rustls queues no alert: see the upstream list)."""
    recs, raw = converse(port, data)
    if want is None:
        assert raw == b"", f"want a bare close, got records {[(ct, p[:8].hex()) for ct, p in recs]}"
        return
    alerts = [p for ct, p in recs if ct == ALERT]
    assert recs and recs[-1][0] == ALERT and alerts[-1] == bytes([2, want]), (
        f"want fatal {alert_name(want)}, got records {[(ct, p[:8].hex()) for ct, p in recs]}")


# ---- Clients by hand, past the ServerHello ---------------------------------------

class Records:
    """The server's records, read whole from a socket, until it closes."""

    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def next(self):
        """(content type, payload, header), or None at the end."""
        while len(self.buf) < 5 or len(self.buf) < 5 + struct.unpack(">H", self.buf[3:5])[0]:
            try:
                b = self.sock.recv(65536)
            except ConnectionResetError:
                b = b""
            if not b:
                return None
            self.buf += b
        n = struct.unpack(">H", self.buf[3:5])[0]
        header, payload, self.buf = self.buf[:5], self.buf[5:5 + n], self.buf[5 + n:]
        return header[0], payload, header


def handshake_messages(stream):
    """Split a handshake byte stream: (whole messages, the rest)."""
    msgs = []
    while len(stream) >= 4 and len(stream) >= 4 + int.from_bytes(stream[1:4], "big"):
        n = 4 + int.from_bytes(stream[1:4], "big")
        msgs.append(stream[:n])
        stream = stream[n:]
    return msgs, stream


def hkdf_extract(salt, ikm):
    return hmac.new(salt, ikm, hashlib.sha256).digest()


def expand_label(secret, label, context, length):
    """HKDF-Expand-Label with SHA-256 (RFC 8446 §7.1)."""
    label = b"tls13 " + label
    info = struct.pack(">H", length) + bytes([len(label)]) + label + bytes([len(context)]) + context
    out, block, i = b"", b"", 1
    while len(out) < length:
        block = hmac.new(secret, block + info + bytes([i]), hashlib.sha256).digest()
        out, i = out + block, i + 1
    return out[:length]


class Keys:
    """One direction's TLS_AES_128_GCM_SHA256 keys and sequence number."""

    def __init__(self, secret):
        self.aead = createAESGCM(bytearray(expand_label(secret, b"key", b"", 16)))
        self.iv = expand_label(secret, b"iv", b"", 12)
        self.seq = 0

    def open(self, header, payload):
        nonce = bytes(a ^ b for a, b in zip(self.iv, self.seq.to_bytes(12, "big")))
        self.seq += 1
        plain = self.aead.open(bytearray(nonce), bytearray(payload), bytearray(header))
        assert plain is not None, "a server record did not decrypt"
        plain = bytes(plain).rstrip(b"\0")
        return plain[-1], plain[:-1]


def tls13_exchange(port, then=None, **hello):
    """A TLS 1.3 ClientHello built by hand (TLS_AES_128_GCM_SHA256 and
    X25519 only; `hello` as for client_hello), and what the server answers,
    decrypted: [(content type, payload, encrypted)] until it closes.
    `then`: bytes to send once the server's Finished has been read."""
    priv = bytearray(os.urandom(32))
    pub = bytes(x25519(priv, bytearray([9] + [0] * 31)))
    ch = client_hello(suites=(0x1301,), share=pub, **hello)
    got, transcript, stream, keys, hs = [], ch, b"", None, None
    with socket.create_connection(("127.0.0.1", port), timeout=SAFETY) as s:
        s.sendall(record(HANDSHAKE, ch))
        recs = Records(s)
        while (r := recs.next()) is not None:
            ct, payload, header = r
            encrypted = ct == APPDATA and keys is not None
            if encrypted:
                ct, payload = keys.open(header, payload)
            got.append((ct, payload, encrypted))
            if ct != HANDSHAKE:
                continue
            msgs, stream = handshake_messages(stream + payload)
            for m in msgs:
                transcript += m
                if m[0] == 2:  # ServerHello: its key share gives the handshake keys
                    body = m[4:]
                    at = 2 + 32 + 1 + body[34] + 3 + 2
                    while at < len(body):
                        typ, n = struct.unpack(">HH", body[at:at + 4])
                        if typ == 51:
                            shared = bytes(x25519(priv, bytearray(body[at + 8:at + 8 + 32])))
                        at += 4 + n
                    early = hkdf_extract(b"\0" * 32, b"\0" * 32)
                    empty = hashlib.sha256(b"").digest()
                    hs = hkdf_extract(expand_label(early, b"derived", empty, 32), shared)
                    th = hashlib.sha256(transcript).digest()
                    keys = Keys(expand_label(hs, b"s hs traffic", th, 32))
                elif m[0] == 20:  # the server's Finished: its application keys
                    empty = hashlib.sha256(b"").digest()
                    master = hkdf_extract(expand_label(hs, b"derived", empty, 32), b"\0" * 32)
                    th = hashlib.sha256(transcript).digest()
                    keys = Keys(expand_label(master, b"s ap traffic", th, 32))
                    if then is not None:
                        s.sendall(then)
    return got


def tls12_exchange(port, then, **hello):
    """A TLS 1.2 ClientHello built by hand; once the server's flight has
    come (ServerHelloDone), send `then`. What the server sent, until it
    closes: [(content type, payload)]."""
    got, stream = [], b""
    with socket.create_connection(("127.0.0.1", port), timeout=SAFETY) as s:
        s.sendall(record(HANDSHAKE, client_hello(versions=(), suites=(0xC02B, 0xC02F), **hello)))
        recs = Records(s)
        while (r := recs.next()) is not None:
            got.append(r[:2])
            if r[0] == HANDSHAKE:
                msgs, stream = handshake_messages(stream + r[1])
                if any(m[0] == 14 for m in msgs):
                    s.sendall(then)
    return got


def expect_last_alert(got, want, encrypted=None):
    """The last record the server sent is fatal alert `want`."""
    shown = [(ct, p[:6].hex()) for ct, p, *_ in got]
    assert got and got[-1][0] == ALERT and got[-1][1] == bytes([2, want]), (
        f"want fatal {alert_name(want)} last, got {shown}")
    if encrypted is not None:
        assert got[-1][2] == encrypted, f"the alert's encryption is not as expected: {shown}"


def flight_fails(want, **hello):
    """A TLS 1.3 ClientHello the server can answer only with its
    ServerHello before it finds it cannot go on (its certificate cannot
    sign with any scheme offered, no protocol offered is one it speaks):
    the ServerHello, then the alert, encrypted under the handshake keys."""
    def case(srv):
        got = tls13_exchange(srv.port, **hello)
        assert got and got[0][0] == HANDSHAKE and got[0][1][0] == 2, f"want a ServerHello first: {got[:1]}"
        expect_last_alert(got, want, encrypted=True)
    return case


# ---- Cases before the handshake's keys -------------------------------------------

def case_interleaved_fragments(srv):
    # The ClientHello's fragments with a CCS record between them: rustls
    # refuses (RFC 8446 §5.1: handshake messages MUST NOT be interleaved
    # with other record types) but queues no alert; this once panicked.
    msg = client_hello()
    data = record(HANDSHAKE, msg[:40]) + record(CCS, b"\x01") + record(HANDSHAKE, msg[40:])
    expect_plain_alert(srv.port, data, None)


def case_hello_over_64k(srv):
    # A ClientHello whose length (in its 24-bit field) passes 64 KiB: a
    # long suite list and a long padding extension.
    msg = client_hello(suites=(0x1301,) + (0xC02B,) * 20000, extra=ext(21, b"\x00" * 0x8000))
    assert len(msg) > 0x10000
    # rustls refuses it (HandshakePayloadTooLarge) with no alert; this once
    # panicked.
    expect_plain_alert(srv.port, fragments(msg, 16384), None)


def case_empty_appdata_between_fragments(srv):
    # An empty application_data record between two fragments of the
    # ClientHello: rustls refuses (MessageInterleavedWithHandshakeMessage)
    # with no alert; this once panicked.
    msg = client_hello(suites=(0x1301,))
    data = record(HANDSHAKE, msg[:40]) + record(APPDATA, b"", b"\x03\x03") + record(HANDSHAKE, msg[40:])
    expect_plain_alert(srv.port, data, None)


def case_empty_handshake_record(srv):
    # Zero-length handshake fragments are not allowed (RFC 8446 §5.1): an
    # answer at once, not a wait for more of the ClientHello.
    expect_plain_alert(srv.port, record(HANDSHAKE, b""), DECODE_ERROR)


def case_empty_appdata_in_handshake(srv):
    # TLS 1.3: after our ClientHello, an empty application_data record
    # where the client's Finished should come. The server answers with an
    # encrypted alert (a 2-byte alert in an AEAD record: 19 bytes).
    data = record(HANDSHAKE, client_hello(suites=(0x1301,))) + record(APPDATA, b"", b"\x03\x03")
    recs, _ = converse(srv.port, data)
    assert recs and recs[0][0] == HANDSHAKE, recs[:1]
    assert recs[-1][0] == APPDATA and len(recs[-1][1]) == 2 + 1 + 16, (
        f"want an encrypted alert last, got {[(ct, len(p)) for ct, p in recs]}")


def case_trickled_hello(srv):
    # A ClientHello in 1-byte records, each in its own segment: a handshake
    # may take only so many reads (each read looks again at all the earlier
    # ones), so the server gives up long before the last piece, without a
    # ServerHello.
    msg = client_hello(extra=ext(21, b"\x00" * 800))
    pieces = [record(HANDSHAKE, msg[i:i + 1]) for i in range(len(msg))]
    got = b""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=SAFETY) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sent = 0
        for p in pieces:
            try:
                s.sendall(p)
            except OSError:
                break
            sent += 1
            time.sleep(0.002)
            if select.select([s], [], [], 0)[0]:
                try:
                    got = s.recv(65536)
                except OSError:
                    pass
                break
    assert sent < len(pieces), f"all {len(pieces)} pieces were taken"
    # Pieces are legal (RFC 8446 §5.1), so many are not: refused as
    # BoringSSL and OpenSSL refuse too many of a legal thing.
    assert got == record(ALERT, bytes([2, UNEXPECTED_MESSAGE]), b"\x03\x03"), (
        f"want fatal {alert_name(UNEXPECTED_MESSAGE)} alone, got {got[:16].hex()}")


def case_hello_record_over_2_14(srv):
    # RFC 8446 §5.1: a plaintext record carries at most 2^14 bytes; one
    # whole ClientHello in a record of 17 000.
    msg = client_hello(extra=ext(21, b"\x00" * 17000))
    expect_plain_alert(srv.port, record(HANDSHAKE, msg), RECORD_OVERFLOW)


def case_hello_record_header_over_2_14(srv):
    # The header alone tells: no need to wait for its 2^14 + 1 bytes.
    msg = client_hello()
    data = record(HANDSHAKE, msg[:100]) + bytes([HANDSHAKE, 3, 1, 0x40, 0x01]) + msg[100:]
    expect_plain_alert(srv.port, data, RECORD_OVERFLOW)


def oversized_after_flight(version):
    """A record header no record can have (2^16 - 1 bytes) where the
    client's second flight should come: with kTLS to follow the server
    reads record by record there, and must answer as when it reads what
    has arrived (rustls' decode_error, encrypted in TLS 1.3, RFC 8446 §5.2
    would have record_overflow: see docs/upstream-rustls.md)."""
    def case(srv):
        if version == (3, 4):
            got = tls13_exchange(srv.port, then=record(APPDATA, b"", b"\x03\x03")[:3] + b"\xff\xff")
            # Under the server's application keys (which tls13_exchange
            # takes up at its Finished), or it would not decrypt.
            expect_last_alert(got, DECODE_ERROR, encrypted=True)
        else:
            got = tls12_exchange(srv.port, then=bytes([HANDSHAKE, 3, 3, 0xff, 0xff]))
            expect_last_alert([(ct, p, False) for ct, p in got], DECODE_ERROR, encrypted=False)
    return case


def case_fallback_scsv_tls12(srv):
    msg = client_hello(suites=(0xC02B, 0xC02F, 0x5600), versions=())
    expect_plain_alert(srv.port, record(HANDSHAKE, msg), INAPPROPRIATE_FALLBACK)


def case_fallback_scsv_split(srv):
    # The SCSV in the second fragment of a split ClientHello.
    msg = client_hello(suites=(0xC02B,) * 40 + (0x5600,), versions=())
    expect_plain_alert(srv.port, fragments(msg, 60), INAPPROPRIATE_FALLBACK)


def case_fallback_scsv_tls13_is_fine(srv):
    # A client that offers TLS 1.3 may carry the SCSV: no downgrade.
    msg = client_hello(suites=(0x1301, 0x5600))
    recs, _ = converse(srv.port, record(HANDSHAKE, msg) + record(ALERT, b"\x01\x00"))
    assert recs and recs[0][0] == HANDSHAKE, f"want a ServerHello, got {recs[:1]}"


def case_legacy_version_ssl3(srv):
    msg = client_hello(legacy=0x0300, versions=(), suites=(0xC02B, 0xC02F))
    expect_plain_alert(srv.port, record(HANDSHAKE, msg, b"\x03\x00"), PROTOCOL_VERSION)


def case_renegotiation_info(srv):
    msg = client_hello(reneg=b"\x01" * 12)
    expect_plain_alert(srv.port, record(HANDSHAKE, msg), HANDSHAKE_FAILURE)


def case_plain_http(srv):
    _, raw = converse(srv.port, b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
    if srv.mode == "serve":
        assert raw.startswith(b"HTTP/1.1 400 Bad Request\r\n"), raw[:200]
        assert raw.endswith(b"\r\n\r\nThe plain HTTP request was sent to HTTPS port\n"), raw[-200:]
    else:
        # The proxy assumes no protocol: a plaintext client is just closed.
        assert raw == b"", raw[:200]


# ---- Cases after the handshake ---------------------------------------------------

def tls_stat(field):
    try:
        with open("/proc/net/tls_stat") as f:
            for line in f:
                k, v = line.split()
                if k == field:
                    return int(v)
    except OSError:
        pass
    return 0


def handshaken(srv, version):
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=SAFETY)
    c = TLSConnection(s)
    hs = HandshakeSettings()
    hs.minVersion = hs.maxVersion = version
    c.handshakeClientCert(settings=hs, serverName="localhost")
    return s, c


def expect_tls_alert(c, want):
    try:
        while True:
            b = c.read()
            assert b, f"closed without alert, want {alert_name(want)}"
    except TLSRemoteAlert as e:
        assert e.description == want, f"want {alert_name(want)}, got {alert_name(e.description)}"
    except TLSAbruptCloseError:
        raise AssertionError(f"closed without alert, want {alert_name(want)}")
    finally:
        c.sock.close()


def corrupted(version):
    def case(srv):
        errors = tls_stat("TlsDecryptError")
        s, c = handshaken(srv, version)
        # An application_data record of the right shape whose tag is wrong.
        s.sendall(record(APPDATA, os.urandom(64), b"\x03\x03"))
        expect_tls_alert(c, BAD_RECORD_MAC)
        if KTLS:
            assert tls_stat("TlsDecryptError") > errors, "the kernel did not see the record"
    return case


def oversized(version):
    def case(srv):
        offloaded = tls_stat("TlsRxSw")
        s, c = handshaken(srv, version)
        # One record of 2^14 + 1 plaintext bytes, properly encrypted: its
        # length is within what a ciphertext may be, the plaintext is not.
        c._send_record_limit = c.recordSize = 2**14 + 1
        c.write(b"x" * (2**14 + 1))
        # Then our FIN (we still read). Linux 7.x's kTLS decrypts a record
        # only when it is read and does not wake a reader for this one: the
        # server hears of it with the next event on the socket, here the
        # FIN, and must answer then. (6.1 reports it at once.)
        try:
            s.shutdown(socket.SHUT_WR)
        except OSError:
            # 6.1 reported it at once: the server has answered and closed
            # (a reset, with the record's body unread) before our FIN.
            pass
        expect_tls_alert(c, RECORD_OVERFLOW)
        if KTLS:
            assert tls_stat("TlsRxSw") > offloaded, "the kernel did not take the connection"
    return case


def expect_close_notify(c):
    """The server closes properly: close_notify, no alert before it."""
    try:
        while True:
            b = c.read()
            if not b:
                return
    except TLSRemoteAlert as e:
        raise AssertionError(f"want close_notify, got {alert_name(e.description)}")
    except TLSAbruptCloseError:
        raise AssertionError("want close_notify, got a bare close")
    finally:
        c.sock.close()


def expect_bare_close(c):
    """The server closes without a word (where rustls queues no alert)."""
    try:
        while True:
            b = c.read()
            assert b, "want a bare close, got close_notify"
    except TLSRemoteAlert as e:
        raise AssertionError(f"want a bare close, got {alert_name(e.description)}")
    except TLSAbruptCloseError:
        pass
    finally:
        c.sock.close()


def raw_send(c, ct, data):
    """One record of type `ct` holding `data` as it is, under tlslite's
    keys, past its checks (an empty handshake record, half a message)."""
    for _ in c._recordLayer.sendRecord(Message(ct, bytearray(data))):
        pass


def exchange(srv, c):
    """One request (serve) or echo (proxy) over `c`, answered."""
    if srv.mode == "serve":
        c.write(b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
        want = b"HTTP/1.1 200 "
    else:
        want = b"still here"
        c.write(want)
    got = b""
    while len(got) < len(want):
        b = c.read()
        assert b, f"closed after {got!r}"
        got += b
    assert got.startswith(want), f"want {want!r}, got {got[:60]!r}"


REKEY = {}


def ktls_rekey(srv):
    """Can this kernel take a TLS 1.3 KeyUpdate (tlsfront check)?"""
    if srv.binary not in REKEY:
        out = subprocess.run([srv.binary, "check"], capture_output=True, text=True).stdout
        REKEY[srv.binary] = "rekey (KeyUpdate):    yes" in out
    return REKEY[srv.binary]


def keyupdate_then_corrupted(srv):
    """A KeyUpdate asking for ours and a corrupted record in one segment:
    the KeyUpdate answered, then bad_record_mac under the new key (the
    answer once went out alone and the alert was lost). A kernel that
    cannot rekey ends the connection at the KeyUpdate with close_notify."""
    s, c = handshaken(srv, (3, 4))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
    for _ in c.send_keyupdate_request(KeyUpdateMessageType.update_requested):
        pass
    s.sendall(record(APPDATA, os.urandom(64), b"\x03\x03"))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
    if KTLS and not ktls_rekey(srv):
        expect_close_notify(c)
    else:
        expect_tls_alert(c, BAD_RECORD_MAC)


def split_keyupdate(srv):
    """A KeyUpdate in two records (RFC 8446 §5.1 allows it): taken whole,
    and the connection goes on under the new key. With kTLS it ends with
    close_notify: a kernel that rekeys takes the first piece for the whole
    message and reads nothing more until new keys come, and the rest is
    under the old key; one that cannot rekey ends at the KeyUpdate."""
    s, c = handshaken(srv, (3, 4))
    try:
        raw_send(c, HANDSHAKE, b"\x18\x00")
        raw_send(c, HANDSHAKE, b"\x00\x01\x00")  # update_not_requested
        ss = c.session
        ss.cl_app_secret, ss.sr_app_secret = c._recordLayer.calcTLS1_3KeyUpdate_reciever(
            ss.cipherSuite, ss.cl_app_secret, ss.sr_app_secret)
        if KTLS:
            expect_close_notify(c)
        else:
            exchange(srv, c)
    finally:
        s.close()


def split_renegotiation(srv):
    """TLS 1.2: a renegotiating ClientHello in two records is refused with a
    warning, no_renegotiation, as a whole one is (kTLS once refused the
    split one as malformed)."""
    s, c = handshaken(srv, (3, 3))
    msg = client_hello(versions=(), suites=(0xC02B, 0xC02F))
    raw_send(c, HANDSHAKE, msg[:60])
    raw_send(c, HANDSHAKE, msg[60:])
    try:
        while True:
            assert c.read(), "closed without an answer"
    except TLSRemoteAlert as e:
        assert (e.level, e.description) == (1, NO_RENEGOTIATION), (
            f"want warning no_renegotiation, got level {e.level} {alert_name(e.description)}")
    finally:
        s.close()


def empty_handshake_record(version):
    """An empty handshake record after the handshake (RFC 8446 §5.1: none
    may be sent): decode_error with kTLS, as before the handshake; rustls
    takes it as nothing (see docs/upstream-rustls.md)."""
    def case(srv):
        s, c = handshaken(srv, version)
        try:
            raw_send(c, HANDSHAKE, b"")
            if KTLS:
                expect_tls_alert(c, DECODE_ERROR)
            else:
                exchange(srv, c)
        finally:
            s.close()
    return case


def warning_alerts(srv):
    """TLS 1.2 warning alerts: four are let pass, as rustls lets them; the
    fifth ends the connection: with unexpected_message with kTLS, without
    a word with rustls (see docs/upstream-rustls.md)."""
    s, c = handshaken(srv, (3, 3))
    try:
        for _ in range(4):
            raw_send(c, ALERT, bytes([1, USER_CANCELED]))
        exchange(srv, c)
        raw_send(c, ALERT, bytes([1, USER_CANCELED]))
        if KTLS:
            expect_tls_alert(c, UNEXPECTED_MESSAGE)
        else:
            expect_bare_close(c)
    finally:
        s.close()


def bulk_records(n):
    """n full records' worth of plaintext, starting with a fresh mark."""
    return os.urandom(MARK) + b"u" * (n * 2**14 - MARK)


def received_by_backend(mark):
    """What the echo backend got on the connection that began with `mark`,
    once that connection closed."""
    end = time.monotonic() + SAFETY
    while mark not in RECEIVED:
        assert time.monotonic() < end, "the backend connection never closed"
        time.sleep(0.05)
    return RECEIVED.pop(mark)


def corrupted_behind_upload(version):
    """A bulk upload whose last record does not decrypt: the client gets
    bad_record_mac, and every record before it still reaches the backend
    (with kTLS, the proxy has read the next records ahead into a second
    pipe while the first one went out)."""
    def case(srv):
        errors = tls_stat("TlsDecryptError")
        s, c = handshaken(srv, version)
        # All in one burst, so the records behind the first are there when
        # it is read.
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        data = bulk_records(6)
        c.write(data)
        s.sendall(record(APPDATA, os.urandom(64), b"\x03\x03"))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
        expect_tls_alert(c, BAD_RECORD_MAC)
        got = received_by_backend(data[:MARK])
        assert got == len(data), f"the backend got {got} of the {len(data)} bytes before the bad record"
        if KTLS:
            assert tls_stat("TlsDecryptError") > errors, "the kernel did not see the record"
    return case


def empty_records_in_upload(version):
    """Empty application_data records (allowed in TLS 1.2 and 1.3) amid a
    bulk upload are skipped, not taken for the client's end: everything is
    echoed back in order and the connection goes on."""
    def case(srv):
        s, c = handshaken(srv, version)
        try:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
            parts = [bulk_records(3), bulk_records(3)]
            c.write(parts[0])
            c.write(b"")
            c.write(b"")
            c.write(parts[1])
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
            want = b"".join(parts)
            got = bytearray()
            while len(got) < len(want):
                b = c.read()
                assert b, f"closed after {len(got)} of {len(want)} bytes"
                got += b
            assert bytes(got) == want, "the echo differs from what was sent"
            c.write(b"and on")
            assert c.read() == b"and on"
        finally:
            s.close()
    return case


def padded_exchange(srv):
    """Two requests (serve) or echoes (proxy) in TLS 1.3 records padded by
    100 bytes each, answered in full."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=SAFETY)
    c = TLSConnection(s)
    hs = HandshakeSettings()
    hs.minVersion = hs.maxVersion = (3, 4)
    c.handshakeClientCert(settings=hs, serverName="localhost")
    # tlslite-ng's HandshakeSettings.padding_cb lands on the socket, not on
    # the record layer that pads: set it there.
    c._recordLayer.padding_cb = lambda length, content_type, max_padding: min(100, max_padding)
    try:
        for _ in range(2):
            if srv.mode == "serve":
                c.write(b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\n")
                want = b"HTTP/1.1 200 "
            else:
                want = b"padded, and echoed back"
                c.write(want)
            got = b""
            while len(got) < len(want):
                b = c.read()
                assert b, f"closed after {got!r}"
                got += b
            assert got.startswith(want), f"want {want!r}, got {got[:60]!r}"
    finally:
        s.close()


def padded_records(srv):
    """TLS 1.3 records with padding (RFC 8446 5.4) are read like any other.
    tlsfront tells the kernel to expect none (TLS_RX_EXPECT_NO_PAD), so it
    can decrypt straight into the reader's buffer; a padded record makes it
    decrypt again into its own, and the connection goes on. With
    `ktls_expect_no_pad = false` the kernel is told nothing: no retry."""
    violations = tls_stat("TlsRxNoPadViolation")
    offloaded = tls_stat("TlsRxSw")
    padded_exchange(srv)
    # The proxy reads by splice, which always decrypts into the kernel's
    # buffers: the bet is made, and lost, by the HTTP reads only.
    if KTLS and srv.mode == "serve":
        assert tls_stat("TlsRxSw") > offloaded, "the kernel did not take the connection"
        assert tls_stat("TlsRxNoPadViolation") > violations, \
            "the kernel decrypted padded records without a retry: was TLS_RX_EXPECT_NO_PAD set?"
        with tempfile.TemporaryDirectory() as tmp:
            off = Server(srv.binary, "serve", srv.kind, tmp, config="ktls_expect_no_pad = false\n")
            try:
                violations = tls_stat("TlsRxNoPadViolation")
                offloaded = tls_stat("TlsRxSw")
                padded_exchange(off)
                assert tls_stat("TlsRxSw") > offloaded, "the kernel did not take the connection"
                assert tls_stat("TlsRxNoPadViolation") == violations, \
                    "ktls_expect_no_pad = false, yet the kernel bet on unpadded records"
            finally:
                off.stop()


CASES = [
    ("ClientHello in interleaved fragments", case_interleaved_fragments),
    ("ClientHello over 64 KiB", case_hello_over_64k),
    ("empty application_data between ClientHello fragments", case_empty_appdata_between_fragments),
    ("empty application_data in a TLS 1.3 handshake", case_empty_appdata_in_handshake),
    ("empty handshake record", case_empty_handshake_record),
    ("ClientHello trickled in 1-byte records", case_trickled_hello),
    ("TLS_FALLBACK_SCSV at TLS 1.2", case_fallback_scsv_tls12),
    ("TLS_FALLBACK_SCSV in a split ClientHello", case_fallback_scsv_split),
    ("TLS_FALLBACK_SCSV beside TLS 1.3 is accepted", case_fallback_scsv_tls13_is_fine),
    ("legacy_version 0x0300", case_legacy_version_ssl3),
    ("non-empty renegotiation_info", case_renegotiation_info),
    ("plain HTTP on the TLS port", case_plain_http),
    ("corrupted record after a TLS 1.3 handshake", corrupted((3, 4))),
    ("corrupted record after a TLS 1.2 handshake", corrupted((3, 3))),
    ("oversized record after a TLS 1.3 handshake", oversized((3, 4))),
    ("oversized record after a TLS 1.2 handshake", oversized((3, 3))),
    ("padded records after a TLS 1.3 handshake", padded_records),
    ("ClientHello record over 2^14 bytes", case_hello_record_over_2_14),
    ("ClientHello record header over 2^14 bytes", case_hello_record_header_over_2_14),
    ("TLS 1.3 offer of undefined signature schemes only",
     flight_fails(HANDSHAKE_FAILURE, sigs=(0xFEFE, 0x0A0A))),
    ("TLS 1.3 offer of PKCS#1 signature schemes only",
     flight_fails(HANDSHAKE_FAILURE, sigs=(0x0401, 0x0501, 0x0601))),
    ("TLS 1.3 offer of RSA-PSS-PSS schemes only",
     flight_fails(HANDSHAKE_FAILURE, sigs=(0x0809, 0x080A, 0x080B))),
    ("TLS 1.3 offer of ECDSA P-384 only", flight_fails(HANDSHAKE_FAILURE, sigs=(0x0503,))),
    ("oversized record header after a TLS 1.3 server flight", oversized_after_flight((3, 4))),
    ("oversized record header after a TLS 1.2 server flight", oversized_after_flight((3, 3))),
    ("KeyUpdate and a corrupted record in one segment", keyupdate_then_corrupted),
    ("KeyUpdate split across records", split_keyupdate),
    ("renegotiating ClientHello split across records", split_renegotiation),
    ("empty handshake record after a TLS 1.3 handshake", empty_handshake_record((3, 4))),
    ("empty handshake record after a TLS 1.2 handshake", empty_handshake_record((3, 3))),
    ("TLS 1.2 warning alerts past rustls' allowance", warning_alerts),
]

# serve's: it speaks h2, http/1.1 and http/1.0 (the proxy offers no ALPN and
# takes any).
SERVE_CASES = [
    ("TLS 1.3 offer of h3 only", flight_fails(NO_APPLICATION_PROTOCOL, alpn=(b"h3",))),
    ("TLS 1.3 offer of acme-tls/1 only", flight_fails(NO_APPLICATION_PROTOCOL, alpn=(b"acme-tls/1",))),
    ("TLS 1.3 offer of an unknown protocol only",
     flight_fails(NO_APPLICATION_PROTOCOL, alpn=(b"x-none",))),
]

# The proxy's: records it relays to a backend.
PROXY_CASES = [
    ("corrupted record behind a TLS 1.3 bulk upload", corrupted_behind_upload((3, 4))),
    ("corrupted record behind a TLS 1.2 bulk upload", corrupted_behind_upload((3, 3))),
    ("empty records in a TLS 1.3 bulk upload", empty_records_in_upload((3, 4))),
    ("empty records in a TLS 1.2 bulk upload", empty_records_in_upload((3, 3))),
]

# The metrics labels of the refusals the cases above provoke.
REFUSAL_LABELS = ("hello_inappropriate_fallback", "hello_obsolete_version",
                  "hello_renegotiation_info", "plaintext_on_tls_port")


class Tally:
    """Counts and prints each check's outcome."""

    def __init__(self):
        self.passed = self.failed = 0

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print(f"ok   {name}", flush=True)
        else:
            self.failed += 1
            print(f"FAIL {name}{detail}", flush=True)

    def cases(self, prefix, srv, cases, alive):
        """Each case against `srv`, then `alive(srv)`: one failing case must
        not stop the rest."""
        for title, case in cases:
            try:
                case(srv)
                alive(srv)
            except Exception as e:
                self.check(f"{prefix}: {title}", False, f": {type(e).__name__}: {e}")
            else:
                self.check(f"{prefix}: {title}", True)


def main():
    binary = os.path.join(ROOT, "target/debug/tlsfront")
    if len(sys.argv) == 3 and sys.argv[1] == "--bin":
        binary = sys.argv[2]
    t = Tally()
    for mode in ("serve", "proxy"):
        for kind in ("ecdsa", "rsa"):
            with tempfile.TemporaryDirectory() as tmp:
                srv = Server(binary, mode, kind, tmp)
                extra = PROXY_CASES if mode == "proxy" else SERVE_CASES
                t.cases(srv.name(), srv, CASES + extra, Server.alive)
                out, err = srv.stop()
                t.check(f"{srv.name()}: no panic in stderr", "panicked" not in err, f":\n{err}")
                # The refusals are counted, each under its own label.
                errors = next((l for l in out.splitlines() if l.startswith("errors:")), "")
                for label in REFUSAL_LABELS:
                    t.check(f"{srv.name()}: '{label}' counted", label in errors, f":\n{errors}")
    # Client certificates: a static site that requires them.
    with tempfile.TemporaryDirectory() as tmp:
        certs = ClientCerts(tmp)
        config = f'client_ca = "{certs.ca[0]}"\nclient_auth = "require"\ntls_versions = ["1.2", "1.3"]\n'
        srv = Server(binary, "serve", "ecdsa", tmp, config=config)
        srv.client_certs = certs
        prefix = f"{srv.name()} (client_auth require)"
        t.cases(prefix, srv, MTLS_CASES, mtls_alive)
        _, err = srv.stop()
        t.check(f"{prefix}: no panic in stderr", "panicked" not in err, f":\n{err}")
    print(f"{t.passed} passed, {t.failed} failed")
    return 1 if t.failed else 0


if __name__ == "__main__":
    sys.exit(main())
