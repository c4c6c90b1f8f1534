//! The HTTP/2 conformance suite (tests/h2/conformance.py) against the
//! reference, Debian's nginx with `listen ... ssl http2`: it must pass
//! every case but those in [`NGINX_DIFFERS`], which documents where nginx
//! departs from RFC 9113 / RFC 7541 (and must keep departing: an entry
//! that starts passing is stale and fails the test too). The same suite
//! runs against tlsfront once it speaks HTTP/2.

mod common;

use common::*;
use std::path::Path;

/// Cases nginx does not pass, each with what nginx does and what the RFC
/// says. A skip counts as not passing (nginx gives no way to run the case).
const NGINX_DIFFERS: &[(&str, &str)] = &[
    ("3.4/3", "nginx answers a PING sent where the preface's SETTINGS belongs; RFC 9113 3.4: an invalid preface is a connection error PROTOCOL_ERROR"),
    ("4.2/2", "skipped: nginx advertises SETTINGS_MAX_FRAME_SIZE 2^24-1, so no DATA frame can exceed it"),
    ("4.2/3", "skipped: nginx advertises SETTINGS_MAX_FRAME_SIZE 2^24-1, so no HEADERS frame can exceed it"),
    ("4.2/4", "skipped: nginx advertises SETTINGS_MAX_FRAME_SIZE 2^24-1, so no SETTINGS frame can exceed it"),
    ("4.3/1", "nginx answers a truncated HPACK string with GOAWAY(FRAME_SIZE_ERROR); RFC 9113 4.3: a decoding error is a connection error COMPRESSION_ERROR"),
    ("5.1/1", "nginx ignores DATA on an idle stream; RFC 9113 5.1: connection error PROTOCOL_ERROR"),
    ("5.1/2", "nginx ignores RST_STREAM on an idle stream; RFC 9113 5.1 and 6.4: connection error PROTOCOL_ERROR"),
    ("5.1/3", "nginx ignores WINDOW_UPDATE on an idle stream; RFC 9113 5.1: connection error PROTOCOL_ERROR"),
    ("5.1/6", "nginx answers HEADERS on a half-closed (remote) stream with GOAWAY(PROTOCOL_ERROR); RFC 9113 5.1: stream error STREAM_CLOSED"),
    ("5.1/8", "nginx ignores DATA after the client's RST_STREAM; RFC 9113 5.1: stream error STREAM_CLOSED"),
    ("5.1/11", "nginx ignores DATA on a closed stream; RFC 9113 6.1: stream error STREAM_CLOSED"),
    ("5.3.1/1", "nginx makes a HEADERS self-dependency a connection error (GOAWAY PROTOCOL_ERROR); RFC 9113 5.3.1: stream error PROTOCOL_ERROR"),
    ("5.3.1/2", "nginx makes a PRIORITY self-dependency a connection error (GOAWAY PROTOCOL_ERROR); RFC 9113 5.3.1: stream error PROTOCOL_ERROR"),
    ("6.3/2", "nginx makes a PRIORITY of 4 octets a connection error (GOAWAY FRAME_SIZE_ERROR); RFC 9113 6.3: stream error FRAME_SIZE_ERROR"),
    ("6.9/2", "nginx makes a stream WINDOW_UPDATE of 0 a connection error (GOAWAY PROTOCOL_ERROR); RFC 9113 6.9: stream error PROTOCOL_ERROR"),
    ("6.9.2/3", "nginx resets the stream (RST_STREAM FLOW_CONTROL_ERROR) whose window a new SETTINGS_INITIAL_WINDOW_SIZE overflows; RFC 9113 6.9.2: connection error FLOW_CONTROL_ERROR"),
    ("8.1/1", "nginx makes trailers without END_STREAM a connection error (GOAWAY PROTOCOL_ERROR); RFC 9113 8.1.1: stream error PROTOCOL_ERROR"),
    ("8.1/2", "nginx makes a pseudo-header in trailers a connection error (GOAWAY PROTOCOL_ERROR); RFC 9113 8.1.1: stream error PROTOCOL_ERROR"),
    ("8.1.1/3", "nginx answers 400 to a content-length with no DATA and sends no RST_STREAM; RFC 9113 8.1.1: stream error PROTOCOL_ERROR"),
    ("8.2.1/5", "nginx accepts a field value starting with a space and answers 200; RFC 9113 8.2.1: malformed, stream error PROTOCOL_ERROR"),
    ("8.2.1/7", "nginx accepts a field value ending with a tab and answers 200; RFC 9113 8.2.1: malformed, stream error PROTOCOL_ERROR"),
    ("8.2.2/1", "nginx ignores a Connection field and answers 200; RFC 9113 8.2.2: malformed, stream error PROTOCOL_ERROR"),
    ("8.2.2/2", "nginx ignores a Keep-Alive field and answers 200; RFC 9113 8.2.2: malformed, stream error PROTOCOL_ERROR"),
    ("8.2.2/3", "nginx ignores a Proxy-Connection field and answers 200; RFC 9113 8.2.2: malformed, stream error PROTOCOL_ERROR"),
    ("8.2.2/4", "nginx ignores a Transfer-Encoding field and answers 200; RFC 9113 8.2.2: malformed, stream error PROTOCOL_ERROR"),
    ("8.2.2/5", "nginx ignores an Upgrade field and answers 200; RFC 9113 8.2.2: malformed, stream error PROTOCOL_ERROR"),
    ("8.2.2/6", "nginx ignores TE other than trailers and answers 200; RFC 9113 8.2.2: malformed, stream error PROTOCOL_ERROR"),
    ("8.3/1", "nginx answers 400 to an unknown pseudo-header and sends no RST_STREAM; RFC 9113 8.3: malformed, stream error PROTOCOL_ERROR"),
    ("8.3/2", "nginx answers 400 to :status in a request and sends no RST_STREAM; RFC 9113 8.3: malformed, stream error PROTOCOL_ERROR"),
    ("8.3/3", "nginx accepts a pseudo-header after a regular field and answers 200; RFC 9113 8.3: malformed, stream error PROTOCOL_ERROR"),
    ("8.3.1/1", "nginx answers 400 to an empty :path and sends no RST_STREAM; RFC 9113 8.3.1: malformed, stream error PROTOCOL_ERROR"),
    ("8.3.1/2", "nginx answers 400 without :method and sends no RST_STREAM; RFC 9113 8.3.1: malformed, stream error PROTOCOL_ERROR"),
    ("8.3.1/3", "nginx answers 400 without :scheme and sends no RST_STREAM; RFC 9113 8.3.1: malformed, stream error PROTOCOL_ERROR"),
    ("8.3.1/4", "nginx answers 400 without :path and sends no RST_STREAM; RFC 9113 8.3.1: malformed, stream error PROTOCOL_ERROR"),
    ("8.3.1/5", "nginx answers 400 to a second :method and sends no RST_STREAM; RFC 9113 8.3.1: malformed, stream error PROTOCOL_ERROR"),
    ("8.3.1/6", "nginx answers 400 to a second :scheme and sends no RST_STREAM; RFC 9113 8.3.1: malformed, stream error PROTOCOL_ERROR"),
    ("8.3.1/7", "nginx answers 400 to a second :path and sends no RST_STREAM; RFC 9113 8.3.1: malformed, stream error PROTOCOL_ERROR"),
    ("8.5/1", "nginx answers 405 to a CONNECT with :scheme and :path, then RST_STREAM(NO_ERROR); RFC 9113 8.5: malformed, stream error PROTOCOL_ERROR"),
    ("8.5/2", "nginx answers 400 to a CONNECT without :authority, then RST_STREAM(NO_ERROR); RFC 9113 8.5: malformed, stream error PROTOCOL_ERROR"),
    ("hpack/4.2/1", "nginx accepts a dynamic table size update at the end of a block; RFC 7541 4.2: it must come first, else a decoding error (COMPRESSION_ERROR)"),
    ("hpack/5.2/1", "nginx accepts Huffman padding longer than 7 bits; RFC 7541 5.2: a decoding error (COMPRESSION_ERROR)"),
];

const AUTHORITY: &str = "h2.test";
const BODY: usize = 200_000;

/// nginx serving `root` over TLS with HTTP/2, certificate from `ca`.
fn nginx_h2(ca: &Ca, root: &Path) -> peers::Peer {
    let (cert, key) = ca.issue("h2", &[AUTHORITY.to_string()], false);
    peers::nginx(|port| {
        format!(
            "server {{\n    listen 127.0.0.1:{port} ssl http2;\n    server_name {AUTHORITY};\n    \
             ssl_certificate {};\n    ssl_certificate_key {};\n    root {};\n    location / {{ }}\n  }}",
            cert.display(),
            key.display(),
            root.display()
        )
    })
}

#[test]
fn conformance_suite_against_nginx() {
    let ca = Ca::new();
    let root = tempfile::tempdir().unwrap();
    let body = content(BODY, 7);
    std::fs::write(root.path().join("body.bin"), &body).unwrap();
    let nginx = nginx_h2(&ca, root.path());

    // The reference set-up itself: nghttp2's client gets the file over h2.
    let got = tool("nghttp")
        .args(["--no-verify-peer", "--timeout=60"])
        .arg(format!("https://127.0.0.1:{}/body.bin", nginx.port))
        .output()
        .expect("run nghttp (tests/install-packages.sh installs nghttp2-client)");
    assert!(
        got.status.success() && got.stdout == body,
        "nghttp got {} bytes, exit {:?}: {}",
        got.stdout.len(),
        got.status,
        String::from_utf8_lossy(&got.stderr)
    );

    common::h2::conformance(
        nginx.port,
        AUTHORITY,
        &ca.pem,
        common::h2::Body {
            path: "/body.bin",
            size: BODY,
            sha256: &sha256(&body),
        },
        NGINX_DIFFERS,
    );
}
