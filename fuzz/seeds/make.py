#!/usr/bin/env python3
"""Regenerate the seed corpora in fuzz/corpus/ (run from anywhere; needs
curl and openssl). Real client bytes are captured with a one-shot socket
listener: curl's request head, and the ClientHellos of curl and
`openssl s_client` (TLS 1.2 and 1.3, with SNI, and one resuming with a
ticket from a local `openssl s_server`, so it carries pre_shared_key).
PROXY headers are the examples of HAProxy's proxy-protocol.txt; the config
is README's example; DNS-01's answers are built as the unit tests in
src/acme/dns01.rs build them, and its key files come from tsig-keygen;
sealed fleet values carry the fuzz keys' ids.
Seeds are small on purpose: libFuzzer grows its own corpus from them."""
import os, socket, struct, subprocess, sys, tempfile, threading, time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "corpus")


def put(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)
    # Every captured ClientHello also split into 100-byte records, as a
    # client may send it (the reader joins them).
    if target == "client_hello" and len(data) > 5 and data[0] == 22:
        n = struct.unpack(">H", data[3:5])[0]
        payload = data[5:5 + n]
        split = b"".join(bytes([22]) + data[1:3] + struct.pack(">H", len(payload[i:i + 100]))
                         + payload[i:i + 100] for i in range(0, len(payload), 100))
        with open(os.path.join(d, name + "-split"), "wb") as f:
            f.write(split)


def capture(run, want_tls):
    """Start a listener, run `run(port)`, return the first bytes received
    (one whole TLS record when `want_tls`, else up to the end of a head)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    got = {}

    def serve():
        c, _ = srv.accept()
        c.settimeout(5)
        buf = b""
        while True:
            if want_tls and len(buf) >= 5 and len(buf) >= 5 + struct.unpack(">H", buf[3:5])[0]:
                buf = buf[: 5 + struct.unpack(">H", buf[3:5])[0]]
                break
            if not want_tls and b"\r\n\r\n" in buf:
                break
            chunk = c.recv(65536)
            if not chunk:
                break
            buf += chunk
        got["data"] = buf
        c.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    run(port)
    t.join(10)
    srv.close()
    if "data" not in got:
        sys.exit(f"nothing captured for {run}")
    return got["data"]


def quiet(cmd, **kw):
    subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=10, **kw)


def main():
    # Request heads.
    head = capture(lambda p: quiet(["curl", "-s", "-m", "2", f"http://127.0.0.1:{p}/index.html"]), False)
    put("request_head", "curl", head)
    put("request_head", "range-conditional",
        "GET /a/b.txt?x=1 HTTP/1.1\r\nHost: example.com\r\nRange: bytes=0-99\r\n"
        "If-None-Match: \"5f1.0-10\", W/\"x\"\r\nIf-Modified-Since: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
        "Connection: keep-alive\r\n\r\n")
    put("request_head", "http10", "\r\nHEAD / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    put("request_head", "post-chunked-pipelined",
        "POST /up HTTP/1.1\nHost: h\nTransfer-Encoding: gzip, chunked\n\n"
        "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n")
    # Found by fuzzing in CI: empty lines, then an unfinished line whose
    # version httparse refuses (an incomplete head past the limit).
    put("request_head", "blank-lines-unfinished-version", "\n" * 110 + "A A  ")
    # Request-targets.
    for i, t in enumerate(["/", "/index.html", "/a/./b/../c/", "/%2e%2e/etc/passwd",
                           "/d%C3%A9j%C3%A0%20vu/?q=1#f", "http://example.com/x/y",
                           "https://h", "/a%2Fb//c", "/..%5c..", "*"]):
        put("path_normalize", f"t{i}", t)
    # Ranges: 8 bytes of size (little-endian), then the header.
    for i, (size, h) in enumerate([(1000, "bytes=0-99"), (1000, "bytes=-500"),
                                   (1000, "bytes=900-"), (10, "bytes=20-30"),
                                   (0, "bytes=-1"), (1000, "Bytes = 1-2"),
                                   (1000, "bytes=0-1,5-6"), (2**64 - 1, "bytes=18446744073709551615-")]):
        put("range", f"r{i}", struct.pack("<Q", size) + h.encode())
    # Conditionals: size, mtime seconds, nanoseconds, then one header a line.
    v = struct.pack("<QqI", 4096, 1700000000, 123456789)
    put("conditional", "c0", v + b'"65538b00.75bcd15-1000"\n\nSun, 06 Nov 1994 08:49:37 GMT\n\n"x"\n')
    put("conditional", "c1", v + b'\n*\n\nTue, 14 Nov 2023 22:13:20 GMT\nTue, 14 Nov 2023 22:13:20 GMT\n')
    put("conditional", "c2", struct.pack("<QqI", 0, -5, 0) + b'W/"a", "b"\nW/"0.0-0"\n\n\nW/"0.0-0"\n')
    # PROXY headers (proxy-protocol.txt examples).
    put("proxy_header", "v1-tcp4", "PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\nGET / HTTP/1.1\r\n")
    put("proxy_header", "v1-tcp6", "PROXY TCP6 2001:db8::1 ::ffff:127.0.0.1 65535 443\r\n")
    put("proxy_header", "v1-unknown", "PROXY UNKNOWN\r\n")
    put("proxy_header", "v1-unknown-long",
        "PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n")
    sig = b"\r\n\r\n\x00\r\nQUIT\n"
    v4 = bytes([192, 0, 2, 7, 127, 0, 0, 1]) + struct.pack(">HH", 40000, 8443)
    put("proxy_header", "v2-tcp4", sig + b"\x21\x11" + struct.pack(">H", len(v4)) + v4 + b"\x16\x03\x01")
    v6 = bytes(15) + b"\x01" + bytes(15) + b"\x02" + struct.pack(">HH", 1, 2)
    put("proxy_header", "v2-tcp6", sig + b"\x21\x21" + struct.pack(">H", len(v6)) + v6)
    put("proxy_header", "v2-local", sig + b"\x20\x00\x00\x00")
    tlv = b"\x01\x00\x08http/1.1" + b"\x02\x00\x0bexample.com" + b"\x20\x00\x0f\x01\x00\x00\x00\x00\x21\x00\x07TLSv1.3"
    put("proxy_header", "v2-tlvs", sig + b"\x21\x11" + struct.pack(">H", len(v4) + len(tlv)) + v4 + tlv)
    unix = bytes(216)
    put("proxy_header", "v2-unix", sig + b"\x21\x31" + struct.pack(">H", len(unix)) + unix)
    # ClientHellos.
    hello = lambda args: capture(lambda p: quiet(args(p)), True)
    put("client_hello", "curl-sni", hello(lambda p: [
        "curl", "-sk", "-m", "2", "--resolve", f"example.test:{p}:127.0.0.1", f"https://example.test:{p}/"]))
    put("client_hello", "curl-ip-nosni", hello(lambda p: ["curl", "-sk", "-m", "2", f"https://127.0.0.1:{p}/"]))
    put("client_hello", "openssl-tls13", hello(lambda p: [
        "openssl", "s_client", "-connect", f"127.0.0.1:{p}", "-servername", "WWW.Example.ORG", "-tls1_3"]))
    put("client_hello", "openssl-tls12", hello(lambda p: [
        "openssl", "s_client", "-connect", f"127.0.0.1:{p}", "-servername", "a.b", "-tls1_2",
        "-alpn", "http/1.1"]))
    with tempfile.TemporaryDirectory() as d:
        key, crt, sess = (os.path.join(d, n) for n in ("k.pem", "c.pem", "sess.pem"))
        quiet(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
               "-nodes", "-keyout", key, "-out", crt, "-subj", "/CN=localhost", "-days", "1"])
        s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
        srv = subprocess.Popen(["openssl", "s_server", "-accept", str(port), "-key", key, "-cert", crt,
                                "-tls1_3", "-naccept", "1"], stdin=subprocess.PIPE,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        # A session ticket arrives after the handshake; give it time.
        subprocess.run(["sh", "-c", f"sleep 1 | openssl s_client -connect 127.0.0.1:{port} "
                        f"-servername localhost -sess_out {sess}"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10)
        srv.kill()
        srv.wait(5)
        put("client_hello", "openssl-resume-psk", hello(lambda p: [
            "openssl", "s_client", "-connect", f"127.0.0.1:{p}", "-servername", "localhost",
            "-sess_in", sess]))
    # The config file: README's example.
    put("config", "readme.toml", """root = "/srv/www"
listen = ["127.0.0.1:8443", "[::1]:8443"]
ktls = "auto"
[limits]          # defaults shown (allowed range)
request_line = 8192       # bytes, 414 beyond (16 to 1 MiB)
header_bytes = 16384      # bytes, 431 beyond (64 to 1 MiB)
headers = 100             # fields, 431 beyond (1 to 10000)
body = 1048576            # request body read and discarded, 413 beyond
keepalive_requests = 1000 # (at least 1)
connections = 10000       # per worker (1 to 1000000)
[timeouts]        # seconds, above 0 and at most 86400
handshake = 10            # these three are checked every 0.1 s
request_header = 60
keepalive = 75
send = 60                 # client accepts no data this long: closed
shutdown = 10             # grace for in-flight responses on SIGTERM
""")
    put("config", "relative.toml", 'root = "www"\ncert = "c.pem"\nkey = "k.pem"\nworkers = 4\n'
        'autoindex = true\nfollow_symlinks_outside = false\nktls = "off"\n[timeouts]\nkeepalive = 2.5\n')
    put("config", "sites.toml", """listen = ["127.0.0.1:8443"]
unknown_names = "default"
[[site]]
names = ["example.com", "*.example.com"]
cert = ["rsa.pem", "ecdsa.pem"]
key = ["rsa.key", "ecdsa.key"]
root = "www"
[site.timeouts]
keepalive = 5
[[site]]
names = ["api.example.net"]
backend = "127.0.0.1:8080"
write_proxy = "v2"
alpn = ["h2", "http/1.1"]
default = true
""")
    put("config", "bad-range.toml", "[limits]\nheaders = 0\n[timeouts]\nsend = nan\n")
    # kTLS control records: first byte = version bit (0x80: TLS 1.2) and a
    # type pick (0x00: alert, 0x28: handshake, 0x50: ChangeCipherSpec).
    for name, data in [
        ("close-notify", b"\x00\x01\x00"),
        ("fatal-alert", b"\x00\x02\x28"),
        ("tls12-warning", b"\x80\x01\x2a"),
        ("key-update", b"\x28\x18\x00\x00\x01\x00"),
        ("key-update-requested", b"\x28\x18\x00\x00\x01\x01"),
        ("two-key-updates", b"\x28" + b"\x18\x00\x00\x01\x00" * 2),
        ("renegotiation", b"\xa8\x01\x00\x00\x04abcd"),
        ("ccs", b"\x50\x01"),
    ]:
        put("ktls_control", name, data)
    # Session tickets: the fuzz keys' names (see fuzz_targets/ticket_decrypt.rs)
    # then bytes, so inputs reach the MAC check; the shortest ticket is 80.
    for name, data in [
        ("name-80-short", b"tlsfront-fuzz-80" + b"\x00" * 10),
        ("name-80-min", b"tlsfront-fuzz-80" + bytes(range(64))),
        ("name-48-two-blocks", b"tlsfront-fuzz-48" + bytes(range(80))),
        ("unknown-name", b"\xff" * 96),
    ]:
        put("ticket_decrypt", name, data)

    dns()
    fleet()


def fleet():
    """Sealed fleet values' headers under the fuzz target's key ids
    (fuzz_targets/fleet_open.rs: key A is 32 bytes of 0x5a, B of 0xa5), so
    inputs reach the tag check; an unknown id and a short one besides."""
    import hashlib, hmac
    key_id = lambda b: hmac.new(bytes([b]) * 32, b"tlsfront fleet key id", hashlib.sha256).digest()[:8]
    for name, data in [
        ("key-a-empty", b"TFS1" + key_id(0x5a) + bytes(range(12)) + b"\x00" * 16),
        ("key-a-body", b"TFS1" + key_id(0x5a) + bytes(range(12)) + bytes(range(64))),
        ("key-b-body", b"TFS1" + key_id(0xa5) + bytes(range(12)) + bytes(range(40))),
        ("unknown-id", b"TFS1" + b"\xff" * 8 + bytes(range(28))),
        ("short", b"TFS1" + key_id(0x5a) + bytes(12)),
    ]:
        put("fleet_open", name, data)


def dns_name(name):
    out = b""
    for label in name.rstrip(".").split(".") if name.strip(".") else []:
        out += bytes([len(label)]) + label.lower().encode()
    return out + b"\0"


def tsig_sign(msg, now, prefix=b""):
    """`msg` signed as src/acme/dns01.rs `sign` does, with the unit tests'
    key ("k.test", hmac-sha256, secret "0123456789abcdef"): the fuzz
    target's key has that name and algorithm, so these reach the MAC."""
    import hashlib, hmac
    key, alg, fudge = dns_name("k.test"), dns_name("hmac-sha256"), 300
    variables = (key + struct.pack(">HI", 255, 0) + alg + now.to_bytes(6, "big")
                 + struct.pack(">HHH", fudge, 0, 0))
    mac = hmac.new(b"0123456789abcdef", prefix + msg + variables, hashlib.sha256).digest()
    ar = struct.unpack(">H", msg[10:12])[0] + 1
    rdata = alg + now.to_bytes(6, "big") + struct.pack(">HH", fudge, len(mac)) + mac + msg[0:2] + b"\0\0\0\0"
    out = msg[:10] + struct.pack(">H", ar) + msg[12:]
    return out + key + struct.pack(">HHIH", 250, 255, 0, len(rdata)) + rdata, mac


def dns():
    """DNS-01's answers (the messages of the unit tests in
    src/acme/dns01.rs) and TSIG key files (tsig-keygen's, needs bind9)."""
    header = lambda id, flags, counts: struct.pack(">HH4H", id, flags, *counts)
    # NXDOMAIN to the SOA query for _acme-challenge.a.test, the zone's SOA
    # in the authority section by pointers into the question; signed.
    q = dns_name("_acme-challenge.a.test") + struct.pack(">HH", 6, 1)
    soa_rdata = b"\xc0\x1c\xc0\x1c" + bytes(20)
    soa = b"\xc0\x1c" + struct.pack(">HHIH", 6, 1, 60, len(soa_rdata)) + soa_rdata
    put("dns_message", "soa-nxdomain-signed",
        tsig_sign(header(9, 0x8003, (1, 0, 1, 0)) + q + soa, 5, b"\0\0")[0])
    # The answer to a signed UPDATE, its MAC over the request's.
    zone = dns_name("acme.test") + struct.pack(">HH", 6, 1)
    _, request_mac = tsig_sign(header(7, 5 << 11, (1, 0, 0, 0)) + zone, 1000)
    prefix = struct.pack(">H", len(request_mac)) + request_mac
    put("dns_message", "update-answer-signed",
        tsig_sign(header(7, 0x8000 | 5 << 11, (1, 0, 0, 0)) + zone, 1001, prefix)[0])
    # The answer to the TXT query: two records, one the challenge's value.
    q = dns_name("_acme-challenge.acme.test") + struct.pack(">HH", 16, 1)
    value = b"LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0"
    txt = lambda v: b"\xc0\x0c" + struct.pack(">HHIH", 16, 1, 60, len(v) + 1) + bytes([len(v)]) + v
    put("dns_message", "txt-answer", header(0x1234, 0x8400, (1, 2, 0, 0)) + q + txt(value) + txt(b"other"))
    # Key files.
    for alg in ["hmac-sha256", "hmac-sha512"]:
        out = subprocess.run(["tsig-keygen", "-a", alg, "acme-key."], capture_output=True, check=True,
                             timeout=10).stdout
        put("tsig_key", f"tsig-keygen-{alg}", out)
    put("tsig_key", "edited", '# DNS-01 for *.example.com\nkey "Acme.Example.COM." {\n'
        '  algorithm HMAC-SHA256.; // any case, a final dot\n  /* tsig-keygen -a hmac-sha256 */\n'
        '  secret "c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0";\n};\n')


if __name__ == "__main__":
    main()
