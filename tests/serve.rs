//! End-to-end tests of `tlsfront serve` with real clients: curl and
//! `openssl s_client`. On a kernel with kTLS (the QEMU guest, or a host
//! that has it) the same tests also prove that every connection went
//! through the kernel (`/proc/net/tls_stat` deltas, tlsfront's counters).

mod common;

use common::*;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TLS13: [&str; 3] = [
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];
const TLS12: [&str; 3] = [
    "ECDHE-ECDSA-AES128-GCM-SHA256",
    "ECDHE-ECDSA-AES256-GCM-SHA384",
    "ECDHE-ECDSA-CHACHA20-POLY1305",
];

fn cipher_args(version: &str, cipher: &str) -> Vec<String> {
    match version {
        "1.3" => vec!["--tlsv1.3".into(), "--tls13-ciphers".into(), cipher.into()],
        _ => vec![
            "--tlsv1.2".into(),
            "--tls-max".into(),
            "1.2".into(),
            "--ciphers".into(),
            cipher.into(),
        ],
    }
}

/// Fetch every fixture size on ONE keep-alive connection and compare bodies.
fn fetch_all_sizes(server: &Server, version: &str, cipher: &str, sizes: &[usize]) {
    let out_dir = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = cipher_args(version, cipher);
    args.extend(["-w".into(), "%{http_code} %{num_connects}\\n".into()]);
    for s in sizes {
        args.push(server.url(&format!("/f{s}.bin")));
        args.push("-o".into());
        args.push(out_dir.path().join(format!("{s}")).display().to_string());
    }
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = server.curl(&argv);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "curl {version} {cipher}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = report.lines().collect();
    assert_eq!(lines.len(), sizes.len(), "{report}");
    for (i, l) in lines.iter().enumerate() {
        let expect_connects = if i == 0 { "1" } else { "0" };
        assert_eq!(
            *l,
            format!("200 {expect_connects}"),
            "{version} {cipher}: {report}"
        );
    }
    for s in sizes {
        let got = std::fs::read(out_dir.path().join(format!("{s}"))).unwrap_or_default();
        let want = std::fs::read(file_path(*s)).unwrap();
        assert_eq!(got.len(), want.len(), "{version} {cipher} size {s}");
        assert_eq!(
            sha256(&got),
            sha256(&want),
            "{version} {cipher} size {s}: body differs"
        );
    }
}

#[test]
fn bodies_match_for_every_version_and_cipher() {
    let _g = serial();
    let server = Server::start(&[]);
    let small: Vec<usize> = SIZES.iter().copied().filter(|s| *s <= 1 << 20).collect();
    let mut cases: Vec<(&str, &str, Vec<usize>)> = Vec::new();
    for c in TLS13 {
        cases.push(("1.3", c, small.clone()));
    }
    for c in TLS12 {
        cases.push(("1.2", c, small.clone()));
    }
    // The 64 MiB file once, AES-128-GCM over TLS 1.3 (the common case).
    cases.push(("1.3", TLS13[0], vec![64 << 20]));
    for (version, cipher, sizes) in &cases {
        // Per version and cipher: one keep-alive connection, offloaded both
        // ways where the kernel has kTLS (its later requests were decrypted
        // by the kernel), nothing failing to decrypt.
        let stat = StatDelta::start();
        fetch_all_sizes(&server, version, cipher, sizes);
        stat.assert_connections(1);
    }
    server.stop_and_check_path(cases.len() as u64);
}

#[test]
fn startup_line_states_the_ktls_outcome() {
    let server = Server::start(&["--workers", "1"]);
    let line = server
        .startup
        .iter()
        .find(|l| l.starts_with("kTLS:"))
        .unwrap()
        .clone();
    if ktls_expected() {
        assert!(
            line.starts_with(
                "kTLS: on for TLS1.3 AES-128-GCM, AES-256-GCM, CHACHA20-POLY1305 (TX+RX)"
            ),
            "{line}"
        );
    } else {
        assert!(
            line.starts_with("kTLS: unavailable (") || line.starts_with("kTLS: on for"),
            "{line}"
        );
        assert!(line.contains("user-space"), "{line}");
    }
    assert!(
        server.startup.iter().any(|l| l.contains("SHA-256")),
        "{:?}",
        server.startup
    );
    let (status, report) = server.stop();
    assert!(status.success());
    assert!(report.contains("handshakes: full 0"), "{report}");
}

#[test]
fn check_prints_the_matrix_with_fixes() {
    let out = std::process::Command::new(BIN)
        .arg("check")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for row in [
        "TLS1.2 AES-128-GCM",
        "TLS1.3 AES-256-GCM",
        "TLS1.3 CHACHA20-POLY1305",
        "kernel: Linux",
    ] {
        assert!(text.contains(row), "{text}");
    }
    if ktls_expected() {
        assert_eq!(out.status.code(), Some(0), "{text}");
        let matrix = text
            .lines()
            .filter(|l| l.starts_with("TLS1.") && !l.contains("rekey"));
        for row in matrix {
            assert!(row.ends_with("yes  yes"), "{row:?}");
        }
        assert!(text.contains("tls ULP: yes"), "{text}");
    } else {
        assert_eq!(out.status.code(), Some(2), "{text}");
        assert!(text.contains("fix: "), "{text}");
    }
}

#[test]
fn require_refuses_to_start_without_ktls() {
    if ktls_expected() {
        let s = Server::start(&["--ktls", "require"]);
        s.stop_and_check_path(0);
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--ktls", "require"])
        .arg(&fixture().root)
        .env("XDG_DATA_HOME", data.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--ktls require") && err.contains("tlsfront check"),
        "{err}"
    );
}

#[test]
fn ktls_off_serves_in_user_space() {
    let _g = serial();
    let server = Server::start(&["--ktls", "off"]);
    assert!(
        server.startup.iter().any(|l| l.starts_with("kTLS: off")),
        "{:?}",
        server.startup
    );
    let stat = StatDelta::start();
    let out = server.curl(&[
        &server.url("/f16385.bin"),
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200");
    assert_eq!(stat.delta("TlsTxSw"), 0);
    let (_, report) = server.stop();
    assert!(
        report.contains("ktls 0 userspace 1") && report.contains("disabled 1"),
        "{report}"
    );
}

#[test]
fn head_http10_and_connection_close() {
    let server = Server::start(&[]);
    let out = server.curl(&["-I", &server.url("/f16384.bin")]);
    let h = String::from_utf8_lossy(&out.stdout).to_lowercase();
    assert!(h.starts_with("http/1.1 200"), "{h}");
    assert!(h.contains("content-length: 16384"), "{h}");
    assert!(
        h.contains("accept-ranges: bytes")
            && h.contains("etag: \"")
            && h.contains("last-modified: "),
        "{h}"
    );
    assert!(
        h.contains("content-type: application/octet-stream")
            && h.contains("date: ")
            && h.contains("server: tlsfront"),
        "{h}"
    );

    let out = server.curl(&["--http1.0", "-i", &server.url("/hello.txt")]);
    let r = String::from_utf8_lossy(&out.stdout);
    assert!(
        r.contains("Connection: close") && r.ends_with("hello world\n"),
        "{r}"
    );

    let out = server.curl(&["-i", "-H", "Connection: close", &server.url("/hello.txt")]);
    let r = String::from_utf8_lossy(&out.stdout);
    assert!(r.contains("Connection: close"), "{r}");
    let out = server.curl(&[
        "-i",
        "-H",
        "Connection: keep-alive",
        "--http1.0",
        &server.url("/hello.txt"),
    ]);
    let r = String::from_utf8_lossy(&out.stdout);
    assert!(r.contains("Connection: keep-alive"), "{r}");
    server.stop_and_check_path(4);
}

#[test]
fn content_types_from_extensions() {
    let server = Server::start(&[]);
    for (path, ct) in [
        // No charset unless the site sets one (tests/static_sites.rs).
        ("/hello.txt", "text/plain"),
        ("/", "text/html"),
    ] {
        let out = server.curl(&[
            "-o",
            "/dev/null",
            "-w",
            "%{content_type}",
            &server.url(path),
        ]);
        assert_eq!(String::from_utf8_lossy(&out.stdout), ct);
    }
}

/// A file dated after 9999 (tmpfs keeps 64-bit times) or before 1970 is
/// served with a Last-Modified clamped to what an HTTP date can say, and
/// that date round-trips as a 304. (Such a file once panicked a worker.)
#[test]
fn file_times_beyond_http_dates_are_clamped() {
    let shm = std::path::Path::new("/dev/shm");
    let root = if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let epoch = std::time::UNIX_EPOCH;
    let far = epoch + Duration::from_secs(253_402_300_900);
    let before = epoch - Duration::from_secs(86_400);
    for (name, t) in [("far.txt", far), ("old.txt", before)] {
        let f = std::fs::File::create(root.path().join(name)).unwrap();
        std::io::Write::write_all(&mut &f, b"dated").unwrap();
        f.set_modified(t).unwrap();
    }
    let stored = std::fs::metadata(root.path().join("far.txt"))
        .unwrap()
        .modified()
        .unwrap();
    let far_expected = if stored == far {
        "Fri, 31 Dec 9999 23:59:59 GMT".to_string()
    } else {
        // The file system clamped the time itself (ext4 stops in 2446).
        eprintln!("note: this file system cannot store a date past 9999");
        httpdate::fmt_http_date(stored)
    };
    let server = Server::start_in(root.path(), &[]);
    for (name, want) in [
        ("/far.txt", far_expected.as_str()),
        ("/old.txt", "Thu, 01 Jan 1970 00:00:00 GMT"),
    ] {
        let url = server.url(name);
        let out = server.curl(&["-sS", "-D", "-", &url]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(text.starts_with("HTTP/1.1 200"), "{name}: {text}");
        assert!(text.ends_with("\r\n\r\ndated"), "{name}: {text}");
        assert!(
            text.contains(&format!("\r\nLast-Modified: {want}\r\n")),
            "{name}: {text}"
        );
        let ims = format!("If-Modified-Since: {want}");
        let out = server.curl(&["-o", "/dev/null", "-w", "%{http_code}", "-H", &ims, &url]);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "304", "{name}");
    }
    server.stop_and_check_path(4);
}

#[test]
fn ranges() {
    let server = Server::start(&[]);
    let data = std::fs::read(file_path(16385)).unwrap();
    let url = server.url("/f16385.bin");
    for (spec, lo, hi) in [
        ("0-0", 0, 0),
        ("100-", 100, 16384),
        ("-10", 16375, 16384),
        ("16000-99999", 16000, 16384),
    ] {
        let body = tempfile::NamedTempFile::new().unwrap();
        let out = server.curl(&[
            "-r",
            spec,
            "-D",
            "-",
            "-o",
            body.path().to_str().unwrap(),
            &url,
        ]);
        let head = String::from_utf8_lossy(&out.stdout);
        assert!(head.starts_with("HTTP/1.1 206"), "{spec}: {head}");
        assert!(
            head.contains(&format!("Content-Range: bytes {lo}-{hi}/16385")),
            "{spec}: {head}"
        );
        assert_eq!(std::fs::read(body.path()).unwrap(), data[lo..=hi], "{spec}");
    }
    let out = server.curl(&["-r", "16385-", "-D", "-", "-o", "/dev/null", &url]);
    let head = String::from_utf8_lossy(&out.stdout);
    assert!(
        head.starts_with("HTTP/1.1 416") && head.contains("Content-Range: bytes */16385"),
        "{head}"
    );
    // Several ranges: the whole body (allowed by RFC 9110).
    let out = server.curl(&[
        "-r",
        "0-1,5-6",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code} %{size_download}",
        &url,
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200 16385");
    server.stop_and_check_path(6);
}

#[test]
fn conditional_requests() {
    let server = Server::start(&[]);
    let url = server.url("/hello.txt");
    let out = server.curl(&["-I", &url]);
    let head = String::from_utf8_lossy(&out.stdout).to_string();
    let field = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .unwrap()
            .trim()
            .to_string()
    };
    let etag = field("ETag");
    let lm = field("Last-Modified");
    let code = |extra: &[&str]| {
        let mut a = vec!["-o", "/dev/null", "-w", "%{http_code}"];
        a.extend_from_slice(extra);
        a.push(&url);
        String::from_utf8_lossy(&server.curl(&a).stdout).to_string()
    };
    assert_eq!(code(&["-H", &format!("If-None-Match: {etag}")]), "304");
    assert_eq!(
        code(&["-H", &format!("If-None-Match: \"other\", {etag}")]),
        "304"
    );
    assert_eq!(code(&["-H", "If-None-Match: \"other\""]), "200");
    assert_eq!(code(&["-H", &format!("If-Modified-Since: {lm}")]), "304");
    assert_eq!(
        code(&["-H", "If-Modified-Since: Thu, 01 Jan 1970 00:00:01 GMT"]),
        "200"
    );
    assert_eq!(code(&["-H", "If-Match: \"nope\""]), "412");
    assert_eq!(code(&["-H", &format!("If-Match: {etag}")]), "200");
    assert_eq!(
        code(&["-r", "0-1", "-H", &format!("If-Range: {etag}")]),
        "206"
    );
    assert_eq!(code(&["-r", "0-1", "-H", "If-Range: \"stale\""]), "200");
}

#[test]
fn directories_and_index() {
    let server = Server::start(&[]);
    let out = server.curl(&["-D", "-", "-o", "/dev/null", &server.url("/sub")]);
    let head = String::from_utf8_lossy(&out.stdout);
    assert!(
        head.starts_with("HTTP/1.1 301") && head.contains("Location: /sub/"),
        "{head}"
    );
    let out = server.curl(&[&server.url("/sub/")]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "<p>sub index</p>\n");
    assert_eq!(server.status("/noindex/", &[]), "403");
    assert_eq!(server.status("/missing", &[]), "404");
    assert_eq!(server.status("/inside-link", &[]), "200");
    drop(server);
    let server = Server::start(&["--autoindex"]);
    let out = server.curl(&[&server.url("/noindex/")]);
    let body = String::from_utf8_lossy(&out.stdout);
    assert!(
        body.contains("Index of /noindex/")
            && body.contains("<a href=\"/noindex/a.txt\">a.txt</a>"),
        "{body}"
    );
}

#[test]
fn nothing_outside_the_root_is_served() {
    let server = Server::start(&[]);
    for (path, want) in [
        ("/../secret.txt", "400"),
        ("/%2e%2e/secret.txt", "400"),
        ("/sub/%2E%2E/%2e%2e/secret.txt", "400"),
        ("/..%2fsecret.txt", "400"),
        ("/..%5csecret.txt", "400"),
        ("/hello.txt%00.html", "400"),
        ("/escape", "403"),
        ("/%", "400"),
    ] {
        let out = server.curl(&[
            "--path-as-is",
            "-o",
            "-",
            "-w",
            "\n%{http_code}",
            &server.url(path),
        ]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.ends_with(want), "{path}: {text}");
        assert!(!text.contains("TOP-SECRET"), "{path} leaked the secret");
    }
    drop(server);
    let server = Server::start(&["--follow-symlinks-outside"]);
    let out = server.curl(&[&server.url("/escape")]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "TOP-SECRET-OUTSIDE-ROOT\n"
    );
}

#[test]
fn malformed_requests_get_the_right_status() {
    let server = Server::start(&[]);
    let long_uri = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(9000));
    let big_header = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "b".repeat(17000)
    );
    let many = format!(
        "GET / HTTP/1.1\r\nHost: x\r\n{}\r\n",
        "X-A: b\r\n".repeat(101)
    );
    let cases: Vec<(String, u16)> = vec![
        ("GARBAGE\r\n\r\n".into(), 400),
        ("GET / HTTP/1.1\r\n\r\n".into(), 400),
        (
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n".into(),
            405,
        ),
        ("GET / HTTP/2.0\r\nHost: x\r\n\r\n".into(), 505),
        (
            "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n".into(),
            413,
        ),
        (
            "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
                .into(),
            400,
        ),
        (long_uri, 414),
        (big_header, 431),
        (many, 431),
    ];
    for (req, want) in cases {
        let (out, err, _) = s_client(
            server.port,
            &["-quiet"],
            // -quiet: s_client reads on after stdin ends, until the
            // server closes (or the limit, for the one that keeps it).
            &[Step::Send(req.as_bytes()), Step::WaitFor("\r\n\r\n")],
            Duration::from_secs(10),
        );
        assert_eq!(
            statuses(&out).first().copied(),
            Some(want),
            "request {:?}: {out} {err}",
            &req[..req.len().min(60)]
        );
        if want != 405 {
            assert!(out.contains("Connection: close"), "{want}: {out}");
        } else {
            assert!(out.contains("Allow: GET, HEAD"), "{out}");
        }
    }
}

/// A small `header_bytes` (below the 4 KiB first read) once panicked every
/// connection; it must simply be the limit.
#[test]
fn a_small_header_limit_is_obeyed() {
    let cfg = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(cfg.path(), "[limits]\nheader_bytes = 1024\n").unwrap();
    let server = Server::start(&["--config", cfg.path().to_str().unwrap()]);
    let ok = b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
    let big = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "b".repeat(1100)
    );
    for (req, want) in [(ok, 200), (big.into_bytes(), 431)] {
        let (out, err, _) = s_client(
            server.port,
            &["-quiet"],
            &[Step::Send(&req), Step::WaitFor("\r\n\r\n")],
            Duration::from_secs(10),
        );
        assert_eq!(statuses(&out).first().copied(), Some(want), "{out} {err}");
    }
    let report = server.stop_and_check_path(2);
    assert!(!report.contains("panic"), "{report}");
}

/// Settings out of range are refused at startup, naming the flag or the
/// file and setting, instead of panicking later (NaN timeouts did) or
/// allocating absurdly (a huge header count or worker count did).
#[test]
fn out_of_range_settings_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    // A setting wrongly accepted starts a server: give it WAIT, then fail.
    let refused = |cmd: &mut std::process::Command| {
        let mut child = cmd
            .env("XDG_DATA_HOME", dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if t0.elapsed() > common::WAIT {
                let _ = child.kill();
                panic!("{cmd:?} was accepted");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        assert!(!out.status.success(), "{cmd:?} was accepted");
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    let run = |args: &[&str]| {
        refused(
            std::process::Command::new(BIN)
                .args(["serve", "--listen", "127.0.0.1:0"])
                .args(args)
                .arg(&fixture().root),
        )
    };
    for flag in [
        "--keepalive-timeout",
        "--send-timeout",
        "--handshake-timeout",
    ] {
        for v in ["nan", "0", "-1", "1e9"] {
            let err = run(&[&format!("{flag}={v}")]);
            assert!(
                err.contains(flag) && err.contains("86400"),
                "{flag} {v}: {err}"
            );
        }
    }
    let err = run(&["--workers", "100000000000000"]);
    assert!(err.contains("--workers") && err.contains("1024"), "{err}");
    for (text, setting) in [
        ("[limits]\nheaders = 1000000000000000\n", "[limits] headers"),
        ("[limits]\nheader_bytes = 10\n", "[limits] header_bytes"),
        ("[limits]\nconnections = 0\n", "[limits] connections"),
        ("[timeouts]\nshutdown = nan\n", "[timeouts] shutdown"),
        ("workers = 0\n", "setting workers"),
    ] {
        std::fs::write(&cfg, text).unwrap();
        let err = run(&["--config", cfg.to_str().unwrap()]);
        assert!(
            err.contains("bad.toml") && err.contains(setting),
            "{text}: {err}"
        );
    }
    let err = refused(
        std::process::Command::new(BIN)
            .args([
                "proxy",
                "--backend",
                "127.0.0.1:1",
                "--listen",
                "127.0.0.1:0",
            ])
            .args(["--idle-timeout", "NaN"]),
    );
    assert!(err.contains("--idle-timeout"), "{err}");
}

#[test]
fn pipelined_requests_and_bodies_are_answered_in_order() {
    let server = Server::start(&[]);
    let reqs = b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\nHEAD /f1.bin HTTP/1.1\r\nHost: x\r\n\r\nGET /missing HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nabcdeGET /hello.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let (out, _, by_itself) = s_client(
        server.port,
        &["-quiet"],
        // -quiet: s_client reads on after stdin ends, until the close.
        &[Step::Send(reqs)],
        Duration::from_secs(30),
    );
    assert_eq!(statuses(&out), vec![200, 200, 404, 200], "{out}");
    assert_eq!(out.matches("hello world").count(), 2, "{out}");
    assert!(by_itself, "server should close after Connection: close");
}

#[test]
fn timeouts_close_idle_and_slow_connections() {
    // The clients stay idle past the 1 s timeouts (the sleeps are the
    // scenario); the bounds are well below the defaults (60 and 75 s), so
    // only the configured timeouts can close them in time.
    let server = Server::start(&["--header-timeout", "1", "--keepalive-timeout", "1"]);
    // A request head that never completes: 408, then close.
    let started = std::time::Instant::now();
    let (out, _, by_itself) = s_client(
        server.port,
        &["-quiet"],
        &[
            Step::Send(b"GET / HTTP/1.1\r\nHost: x\r\n"),
            Step::Sleep(2500),
        ],
        Duration::from_secs(25),
    );
    assert_eq!(statuses(&out), vec![408], "{out}");
    assert!(by_itself);
    // An idle keep-alive connection: closed after the keep-alive timeout.
    let (out, _, by_itself) = s_client(
        server.port,
        &["-quiet"],
        &[
            Step::Send(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n"),
            Step::Sleep(2500),
        ],
        Duration::from_secs(25),
    );
    assert_eq!(statuses(&out), vec![200], "{out}");
    assert!(by_itself, "idle connection was not closed");
    assert!(
        started.elapsed() < Duration::from_secs(55),
        "{:?}",
        started.elapsed()
    );
}

/// A client that connects and says nothing: held by the kernel until its
/// first bytes (deferred accept) for about the handshake timeout, then
/// accepted and closed when the handshake timeout runs out. It must be
/// closed, not kept forever.
#[test]
fn a_silent_client_is_closed() {
    use std::io::Read;
    let server = Server::start(&["--handshake-timeout", "1"]);
    let mut c = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let t0 = Instant::now();
    let mut b = [0u8; 16];
    let r = c.read(&mut b);
    let waited = t0.elapsed();
    assert!(
        matches!(&r, Ok(0))
            || matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "{r:?} after {waited:?}"
    );
    assert!(
        waited < Duration::from_secs(15),
        "closed only after {waited:?}"
    );
    let (_, report) = server.stop();
    assert!(report.contains("handshake_timeout"), "{report}");
}

#[test]
fn client_abort_and_file_truncation_cost_only_that_connection() {
    let root = tempfile::tempdir().unwrap();
    let big = root.path().join("big.bin");
    std::fs::write(&big, content(32 << 20, 9)).unwrap();
    std::fs::write(root.path().join("small.txt"), "still here\n").unwrap();
    let server = Server::start_in(root.path(), &["--send-timeout", "5"]);

    // A client that goes away mid-file.
    let out = server.curl(&[
        "--limit-rate",
        "1M",
        "--max-time",
        "1",
        "-o",
        "/dev/null",
        &server.url("/big.bin"),
    ]);
    assert!(!out.status.success());

    // The file shrinks while being sent: the connection is aborted, the
    // client sees a short body (never padding, never a hang).
    let url = server.url("/big.bin");
    let body = tempfile::NamedTempFile::new().unwrap();
    let child = tool("curl")
        .arg("--cacert")
        .arg(server.ca())
        .args([
            "-sS",
            "--limit-rate",
            "4M",
            "--max-time",
            "60",
            "-w",
            "%{size_download}",
            "-o",
        ])
        .arg(body.path())
        .arg(&url)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Truncate only once the body is flowing (a slow machine may take a
    // while to get there).
    let deadline = std::time::Instant::now() + common::WAIT;
    while std::fs::metadata(body.path()).map(|m| m.len()).unwrap_or(0) < 256 * 1024 {
        assert!(
            std::time::Instant::now() < deadline,
            "the download never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::OpenOptions::new()
        .write(true)
        .open(&big)
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let started = std::time::Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(
        started.elapsed() < common::WAIT,
        "client hung after truncation"
    );
    assert!(
        !out.status.success(),
        "a truncated file must not look complete"
    );
    let got: u64 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(0);
    assert!(got < 32 << 20, "got {got} bytes");

    let out = server.curl(&[&server.url("/small.txt")]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "still here\n");
    // The operator is told which file, not only a counter.
    let line = format!(
        "{} shrank while being sent",
        big.canonicalize().unwrap().display()
    );
    let log = server.wait_for_log(&line);
    assert!(log.contains(&line), "{log}");
    let (status, report) = server.stop();
    assert!(status.success());
    // At least the truncated download (an aborted one still draining may
    // meet the shrunken file first, too).
    assert!(report.contains("file_shrank "), "{report}");
}

#[test]
fn ipv6_listener() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback here; skipping");
        return;
    }
    let server = Server::start(&["--listen", "[::1]:0"]);
    let url = format!("https://[::1]:{}/hello.txt", server.port);
    let out = server.curl(&["-g", &url]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello world\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn sessions_resume_across_workers() {
    let server = Server::start(&["--workers", "2"]);
    let dir = tempfile::tempdir().unwrap();
    let sess = dir.path().join("sess.pem");
    let ca = server.ca().display().to_string();
    let sess_s = sess.display().to_string();
    for tls in ["-tls1_3", "-tls1_2"] {
        // A request, answered after the server's tickets, then the server's
        // close: by then s_client has seen (and saved) the TLS 1.3 tickets.
        let req = b"GET /hello.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        let args = [tls, "-CAfile", &ca, "-ign_eof"];
        let (out, err, _) = s_client(
            server.port,
            &[&args[..], &["-sess_out", &sess_s]].concat(),
            &[Step::Send(req)],
            Duration::from_secs(20),
        );
        assert!(
            out.contains("Verify return code: 0") && out.contains("hello world"),
            "{out}{err}"
        );
        let mut reused = 0;
        for _ in 0..6 {
            let (out, _, _) = s_client(
                server.port,
                &[&args[..], &["-sess_in", &sess_s]].concat(),
                &[Step::Send(req)],
                Duration::from_secs(20),
            );
            if out.contains("Reused, TLS") {
                reused += 1;
            }
        }
        assert_eq!(reused, 6, "{tls}: every reconnect should resume");
    }
    let (_, report) = server.stop();
    assert!(report.contains("resumed 12"), "{report}");
}

#[test]
fn tickets_reach_a_client_that_sends_nothing() {
    // In user space the TLS 1.3 tickets wait for the first response, to
    // share its write; a client that sends no request must get them anyway
    // (when its connection turns idle), and resume with them.
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let sess = dir.path().join("sess.pem");
    let ca = server.ca().display().to_string();
    let sess_s = sess.display().to_string();
    let (out, err, _) = s_client(
        server.port,
        &["-tls1_3", "-CAfile", &ca, "-sess_out", &sess_s],
        &[Step::WaitForFile(&sess)],
        Duration::from_secs(30),
    );
    let saved = std::fs::read_to_string(&sess).unwrap_or_default();
    assert!(
        saved.contains("BEGIN SSL SESSION PARAMETERS"),
        "no ticket without a request:\n{out}{err}"
    );
    let req = b"GET /hello.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let (out, err, _) = s_client(
        server.port,
        &["-tls1_3", "-CAfile", &ca, "-ign_eof", "-sess_in", &sess_s],
        &[Step::Send(req)],
        Duration::from_secs(20),
    );
    assert!(
        out.contains("Reused, TLSv1.3") && out.contains("hello world"),
        "{out}{err}"
    );
    let (_, report) = server.stop();
    assert!(report.contains("resumed 1"), "{report}");
}

#[test]
fn two_tickets_after_a_full_handshake_one_after_a_resumption() {
    // As OpenSSL: a new client gets two TLS 1.3 tickets (for parallel
    // connections), a resuming one a single replacement.
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let sess = dir.path().join("sess.pem");
    let ca = server.ca().display().to_string();
    let sess_s = sess.display().to_string();
    let req = b"GET /hello.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let tickets = |out: &str| {
        out.matches("Post-Handshake New Session Ticket arrived")
            .count()
    };
    for (sess_arg, kind, expected) in [("-sess_out", "New", 2), ("-sess_in", "Reused", 1)] {
        let (out, err, _) = s_client(
            server.port,
            &["-tls1_3", "-CAfile", &ca, "-ign_eof", sess_arg, &sess_s],
            &[Step::Send(req)],
            Duration::from_secs(20),
        );
        assert!(
            out.contains(&format!("{kind}, TLSv1.3")) && out.contains("hello world"),
            "{out}{err}"
        );
        assert_eq!(tickets(&out), expected, "{out}");
    }
    let (_, report) = server.stop();
    assert!(report.contains("resumed 1"), "{report}");
}

#[test]
fn memory_freed_after_a_burst_goes_back_to_the_kernel() {
    // 300 connections fetching 1 MiB files grow the heap by their buffers;
    // once they are gone an allocator that is not called again (idle
    // workers) keeps the freed memory unless told to give it back, which
    // each worker does every 5 s until it is idle. User space only: this is
    // about the allocator, and the emulated kTLS guest is too slow for the
    // burst.
    if ktls_expected() {
        eprintln!("skipped in the kTLS guest (user-space buffers, host only)");
        return;
    }
    let server = Server::start(&["--workers", "2", "--ktls", "off"]);
    let before = server.rss_kib();
    // The burst lasts until it has grown the heap: 2 s get the 300
    // connections going on an idle machine, a loaded one takes longer.
    // Each try doubles it; WAIT bounds the tries.
    let started = Instant::now();
    let mut secs = 2;
    let peak = loop {
        let out = bench_client()
            .args(["requests", &server.url(&format!("/f{}.bin", 1 << 20))])
            .args(["-c", "300", "-d", &format!("{secs}s"), "--insecure"])
            .args(["--threads", "2"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let peak = server.peak_rss_kib();
        if peak > before + 32 * 1024 || started.elapsed() > common::WAIT {
            break peak;
        }
        eprintln!("a {secs} s burst grew the heap only to {peak} KiB: again, longer");
        secs *= 2;
    };
    assert!(
        peak > before + 32 * 1024,
        "the burst should have grown the heap: {before} -> {peak} KiB"
    );
    // Some of the burst stays live (tokio's registration slab, the session
    // cache): 2-3 MiB over the start were left once the workers' heaps had
    // been collected; with mimalloc's purging off
    // (`MIMALLOC_PURGE_DELAY=-1`) the peak stayed.
    let allowed = before + 8 * 1024;
    let deadline = Instant::now() + common::WAIT;
    let mut rss = server.rss_kib();
    while rss > allowed && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
        rss = server.rss_kib();
    }
    eprintln!("RSS before {before}, peak {peak}, after {rss} KiB");
    assert!(
        rss <= allowed,
        "RSS {rss} KiB {:?} after the burst (before {before}, peak {peak} KiB)",
        common::WAIT
    );
}

#[test]
fn clients_that_stop_reading_hold_little_memory() {
    // 200 clients ask for a 64 MiB file and read none of it (a slow-read
    // attack, or many stalled downloads). Once the socket buffers are full
    // each connection may hold at most what its client has not taken of the
    // last chunk of records, not a chunk of plaintext beside it, and the
    // spare room its buffers had while the data flowed is freed after a
    // second without progress.
    // User space only: with kTLS no user-space buffer exists at all, and
    // the emulated guest is too slow to fill 200 sockets' buffers.
    if ktls_expected() {
        eprintln!("skipped in the kTLS guest (user-space buffers, host only)");
        return;
    }
    use std::io::Write;
    const CONNS: u64 = 200;
    let server = Server::start(&["--workers", "1", "--ktls", "off"]);
    let before = server.rss_kib();
    let cfg = client_config(&server.ca());
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], server.port));
    let mut stalled = Vec::new();
    for _ in 0..CONNS {
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        // A small window, as a slow reader advertises.
        sock.set_recv_buffer_size(16 << 10).unwrap();
        sock.connect(&addr.into()).unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let conn = rustls::ClientConnection::new(cfg.clone(), name).unwrap();
        let mut tls = rustls::StreamOwned::new(conn, std::net::TcpStream::from(sock));
        tls.write_all(b"GET /f67108864.bin HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        tls.flush().unwrap();
        stalled.push(tls);
    }
    // Until the figure falls below the bound, or WAIT passes (the sends
    // stall within a second or two, the spare room is freed a second
    // later, the worker's heap is collected every 5 s).
    let bound = 192;
    let mut per_conn = u64::MAX;
    let deadline = Instant::now() + common::WAIT;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        per_conn = server.rss_kib().saturating_sub(before) / CONNS;
        if per_conn <= bound {
            break;
        }
    }
    eprintln!("RSS before {before} KiB; with {CONNS} stalled downloads {per_conn} KiB more each");
    // Before the bound, each held a whole chunk of plaintext beside a chunk
    // of records (docs/BENCHMARKS.md has the figures, and nginx's).
    assert!(per_conn <= bound, "{per_conn} KiB per stalled download");
    // The server still serves.
    let out = server.curl(&[&server.url("/hello.txt")]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello world\n");
    drop(stalled);
}

#[test]
fn open_file_limit_is_raised_and_a_low_one_is_reported() {
    // A soft limit of 256 under a hard one of 8192: raised at startup, so
    // accept() does not fail with EMFILE after ~250 connections (1000
    // connections x 2 descriptors fit).
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tlsfront.toml");
    std::fs::write(&cfg, "[limits]\nconnections = 1000\n").unwrap();
    let cfg = cfg.display().to_string();
    let server = Server::start_with_nofile("256:8192", &["--workers", "1", "--config", &cfg]);
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", server.pid())).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    assert_eq!(
        line.split_whitespace().skip(3).take(2).collect::<Vec<_>>(),
        ["8192", "8192"],
        "{line}"
    );
    assert!(
        !server.startup.iter().any(|l| l.contains("open-file limit")),
        "{:?}",
        server.startup
    );
    server.stop();
    // The defaults on a machine whose hard limit is too low for them
    // (1 worker x 10000 connections x 9 descriptors > 1024, and 1000 kept
    // files): the open-file cache takes an eighth of the limit, the
    // connections what is left beside the reserve, the root's directory
    // and the cache ((1024 - 64 - 1 - 128) / 9, an HTTP/2 connection's),
    // both said as information, not warnings.
    let server = Server::start_with_nofile("256:1024", &["--workers", "1"]);
    assert!(
        !server.startup.iter().any(|l| l.contains("warning")),
        "{:?}",
        server.startup
    );
    assert!(!server.log().contains(" WARN "), "{}", server.log());
    assert!(
        server
            .startup
            .iter()
            .any(|l| l.starts_with("open_file_cache: 128 files per worker")),
        "{:?}",
        server.startup
    );
    let note = server
        .startup
        .iter()
        .find(|l| l.starts_with("connections: up to 92 per worker"))
        .unwrap_or_else(|| panic!("{:?}", server.startup));
    assert!(
        note.contains("(1024)") && note.contains("LimitNOFILE"),
        "{note}"
    );
    let out = server.curl(&[&server.url("/hello.txt")]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello world\n");
    server.stop();
    // A limit that was set and cannot be met: a warning, with the fix.
    let server = Server::start_with_nofile("256:1024", &["--workers", "1", "--config", &cfg]);
    // A warning of the event log (stderr), said before the start-up ends.
    let log = server.wait_for_log("the open-file limit is 1024");
    let warning = log
        .lines()
        .find(|l| l.contains(" WARN ") && l.contains("the open-file limit is 1024"))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        warning.contains("LimitNOFILE") && warning.contains("[limits] connections"),
        "{warning}"
    );
    server.stop();
}

#[test]
fn key_update_from_the_client() {
    let _g = serial();
    let server = Server::start(&[]);
    let stat = StatDelta::start();
    // `k`: a KeyUpdate; `K`: one that asks us to update our key too.
    let (out, err, by_itself) = s_client(
        server.port,
        &[
            "-tls1_3",
            "-crlf",
            "-CAfile",
            &server.ca().display().to_string(),
        ],
        &[
            Step::Send(b"GET /hello.txt HTTP/1.1\nHost: x\n\n"),
            Step::WaitFor("hello world"),
            Step::Send(b"k\n"),
            Step::WaitForStderr("KEYUPDATE", 1),
            Step::Send(b"GET /index.html HTTP/1.1\nHost: x\n\n"),
            // (On a kernel without rekey the connection has ended: the
            // waits end with s_client's output.)
            Step::WaitFor("tlsfront test root"),
            Step::Send(b"K\n"),
            Step::WaitForStderr("KEYUPDATE", 2),
            Step::Send(b"GET /sub/ HTTP/1.1\nHost: x\nConnection: close\n\n"),
            Step::WaitFor("sub index"),
        ],
        Duration::from_secs(30),
    );
    assert!(
        err.contains("KEYUPDATE"),
        "s_client did not send a KeyUpdate: {err}"
    );
    let rekey = ktls_rekey();
    if ktls_expected() && !rekey {
        // Kernel < 6.14: the connection ends cleanly after the KeyUpdate;
        // nothing is read under a key the kernel does not have.
        assert_eq!(statuses(&out), vec![200], "{out}");
        assert!(by_itself, "connection should have been closed");
        assert_eq!(stat.delta("TlsDecryptError"), 0);
        let (_, report) = server.stop();
        assert!(report.contains("keyupdate_unsupported 1"), "{report}");
    } else {
        // User space (rustls) or a kernel that rekeys: the connection goes on.
        assert_eq!(statuses(&out), vec![200, 200, 200], "{out}\n{err}");
        assert!(
            out.contains("tlsfront test root") && out.contains("sub index"),
            "{out}"
        );
        assert_eq!(stat.delta("TlsDecryptError"), 0);
        if ktls_expected() {
            assert_rekeyed(&stat);
        }
    }
}

#[test]
fn the_server_rekeys_before_a_key_reaches_its_record_limit() {
    // A test-only limit of 16 records per key (the real ones are in the
    // millions): a 1 MiB download (64 records) passes it several times.
    let _g = serial();
    let server = Server::start_with_env(&["TLSFRONT_TEST_RECORD_LIMIT=16"], &[]);
    let stat = StatDelta::start();
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body");
    let out = server.curl(&[
        "--tlsv1.3",
        "-o",
        body.to_str().unwrap(),
        &server.url(&format!("/f{}.bin", 1 << 20)),
    ]);
    let got = std::fs::read(&body).unwrap_or_default();
    let whole = sha256(&got) == sha256(&std::fs::read(file_path(1 << 20)).unwrap());
    assert_eq!(stat.delta("TlsDecryptError"), 0);
    if ktls_expected() && ktls_rekey() {
        // TLS 1.3 on a kernel that rekeys: KeyUpdates, and the body intact.
        assert!(out.status.success() && whole, "{out:?}");
        let rekeys = stat.delta("TlsTxRekeyOk");
        assert!(rekeys >= 4, "TlsTxRekeyOk delta {rekeys}");
        assert_eq!(stat.delta("TlsTxRekeyError"), 0);
    } else if ktls_expected() {
        // No rekey in this kernel: the connection ends before the limit.
        assert!(!out.status.success() && !whole, "{out:?}");
        let (_, report) = server.stop();
        assert!(report.contains("record_limit 1"), "{report}");
    } else {
        // User space: rustls keeps its own (real) limits.
        assert!(out.status.success() && whole, "{out:?}");
    }
}

#[test]
fn runs_as_the_configured_user_with_no_capabilities_left() {
    // Started as root (as tests run here): the parent reads keys and binds
    // ports; the server process's uid, gid and groups are nobody's and no
    // capability is left.
    if !rustix::process::getuid().is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tlsfront.toml");
    std::fs::write(&cfg, "user = \"nobody\"\ngroup = \"nogroup\"\n").unwrap();
    for extra in [
        vec!["--user", "nobody"],
        vec!["--config", cfg.to_str().unwrap()],
    ] {
        let server = Server::start(&extra);
        assert!(
            server
                .startup
                .iter()
                .any(|l| l.starts_with("running as user nobody (uid 65534")),
            "{:?}",
            server.startup
        );
        // The parent stays root; its server process, which serves, is
        // nobody's (tests/parent.rs tests the parent's part).
        let child = common::server_pid(&server.wait_for_output("parent process ", 1));
        let status = std::fs::read_to_string(format!("/proc/{child}/status")).unwrap();
        let field = |name: &str| common::status_field(child, name);
        assert_eq!(field("Uid:"), "65534 65534 65534 65534", "{status}");
        assert_eq!(field("Gid:"), "65534 65534 65534 65534", "{status}");
        assert_eq!(field("Groups:"), "65534", "{status}");
        for cap in ["CapPrm:", "CapEff:", "CapAmb:"] {
            assert_eq!(field(cap), "0000000000000000", "{cap} {status}");
        }
        // Files are opened as nobody from now on: the fixture is readable.
        let out = server.curl(&[&server.url("/hello.txt")]);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "hello world\n");
        server.stop();
    }
}

#[test]
fn a_user_that_cannot_be_had_is_refused_by_name() {
    if !rustix::process::getuid().is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "group = \"nogroup\"\n").unwrap();
    let cfg = cfg.to_str().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (
            &["--user", "root"],
            "--user: running as root drops no privilege",
        ),
        (
            &["--user", "no-such-user-here"],
            "--user: there is no user named \"no-such-user-here\"",
        ),
        (
            &["--user", "nobody", "--group", "no-such-group-here"],
            "--group: there is no group named \"no-such-group-here\"",
        ),
        (&["--config", cfg], "setting group: a group needs a user"),
    ];
    for (args, expected) in cases {
        let out = Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(expected),
            "{args:?}: {err}"
        );
    }
    // Not started as root: switching to another user is impossible, and
    // said so (running as the named user already is fine).
    let out = tool("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--user", "daemon"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("needs tlsfront started as root"),
        "{err}"
    );
}

#[test]
fn systemd_is_told_when_ready_and_when_stopping() {
    // Type=notify: READY=1 once serving, STOPPING=1 when the drain begins,
    // on the socket systemd names in NOTIFY_SOCKET.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify");
    let sock = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(common::WAIT)).unwrap();
    let var = format!("NOTIFY_SOCKET={}", path.display());
    let server = Server::start_with_env(&[&var], &[]);
    let mut buf = [0u8; 256];
    let n = sock.recv(&mut buf).expect("no READY=1");
    assert_eq!(String::from_utf8_lossy(&buf[..n]).trim_end(), "READY=1");
    let (status, _) = server.stop();
    assert!(status.success());
    let n = sock.recv(&mut buf).expect("no STOPPING=1");
    assert_eq!(String::from_utf8_lossy(&buf[..n]).trim_end(), "STOPPING=1");
}

#[test]
fn sigterm_finishes_and_reports() {
    let server = Server::start(&[]);
    let out = server.curl(&[&server.url("/hello.txt")]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello world\n");
    let (status, report) = server.stop();
    assert!(status.success());
    assert!(report.contains("responses: 200 1"), "{report}");
    assert!(report.contains("handshakes: full 1"), "{report}");
}

#[test]
fn bad_certificate_files_are_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let bogus = dir.path().join("bogus.pem");
    std::fs::write(&bogus, "not a pem\n").unwrap();
    let out = std::process::Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--cert"])
        .arg(&bogus)
        .arg("--key")
        .arg(&bogus)
        .arg(&fixture().root)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bogus.pem") && err.contains("--cert"), "{err}");
    let out = std::process::Command::new(BIN)
        .args(["serve", "/nonexistent/dir", "--listen", "127.0.0.1:0"])
        .env("XDG_DATA_HOME", dir.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("/nonexistent/dir"),
        "{err}"
    );
}

#[test]
fn rsa_certificate_with_chain_files() {
    let dir = tempfile::tempdir().unwrap();
    let (c, k) = (dir.path().join("rsa.pem"), dir.path().join("rsa.key"));
    let st = tool("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
        ])
        .arg(&k)
        .arg("-out")
        .arg(&c)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let server = Server::start(&["--cert", c.to_str().unwrap(), "--key", k.to_str().unwrap()]);
    let out = tool("curl")
        .arg("--cacert")
        .arg(&c)
        .args([
            "-sS",
            "--tlsv1.2",
            "--tls-max",
            "1.2",
            "--ciphers",
            "ECDHE-RSA-AES128-GCM-SHA256",
        ])
        .arg(server.url("/hello.txt"))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "hello world\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn open_connections_are_counted_by_the_kernel_while_held() {
    let _g = serial();
    let server = Server::start(&[]);
    let port = server.port;
    let ca = server.ca().display().to_string();
    let base = tls_stat();
    let cur = |k: &str| tls_stat().get(k).copied().unwrap_or(0) - base.get(k).copied().unwrap_or(0);
    // Hold one TLS 1.3 AES-256-GCM connection open, with one request
    // done, until the counts have been read.
    let answered = Arc::new(AtomicBool::new(false));
    let counted = Arc::new(AtomicBool::new(false));
    let holder = {
        let (answered, counted) = (answered.clone(), counted.clone());
        std::thread::spawn(move || {
            s_client(
                port,
                &[
                    "-tls1_3",
                    "-ciphersuites",
                    "TLS_AES_256_GCM_SHA384",
                    "-CAfile",
                    &ca,
                    "-crlf",
                ],
                &[
                    Step::Send(b"GET /hello.txt HTTP/1.1\nHost: x\n\n"),
                    Step::WaitFor("hello world"),
                    Step::Set(&answered),
                    Step::Await(&counted),
                ],
                Duration::from_secs(30),
            )
        })
    };
    let want = if ktls_expected() { 1 } else { 0 };
    common::wait_until(common::WAIT, "the held connection's answer", || {
        if answered.load(SeqCst) {
            Ok(())
        } else {
            Err("not yet".into())
        }
    });
    let deadline = Instant::now() + common::WAIT;
    while cur("TlsCurrTxSw") < want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    // Offloaded both ways while open (two sockets per side would be 2).
    let counts = (cur("TlsCurrTxSw"), cur("TlsCurrRxSw"));
    counted.store(true, SeqCst);
    assert_eq!(
        counts,
        (want, want),
        "(TlsCurrTxSw, TlsCurrRxSw) while open"
    );
    let (out, _, _) = holder.join().unwrap();
    assert!(
        out.contains("TLS_AES_256_GCM_SHA384") && out.contains("hello world"),
        "{out}"
    );
    // Closed: the kernel's count of open kTLS sockets drops back.
    let deadline = Instant::now() + common::WAIT;
    while cur("TlsCurrTxSw") > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(cur("TlsCurrTxSw"), 0);
    server.stop_and_check_path(1);
}

#[test]
fn sigterm_lets_an_inflight_response_finish() {
    // A long grace, so that a slow machine cannot turn this into a cut.
    let cfg = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(cfg.path(), "[timeouts]\nshutdown = 60\n").unwrap();
    let server = Server::start(&["--config", cfg.path().to_str().unwrap()]);
    let url = server.url("/f67108864.bin");
    let body = tempfile::NamedTempFile::new().unwrap();
    // About 4 s at 16 MiB/s, far more than socket buffers hold: SIGTERM
    // arrives in the middle.
    let child = tool("curl")
        .arg("--cacert")
        .arg(server.ca())
        .args(["-sS", "--limit-rate", "16M", "--max-time", "60", "-o"])
        .arg(body.path())
        .arg(&url)
        .spawn()
        .unwrap();
    // SIGTERM once the body is flowing (a process start alone can take a
    // second in the emulated guest).
    common::wait_until(
        common::WAIT,
        "the download's first bytes",
        || match std::fs::metadata(body.path()).map_or(0, |m| m.len()) {
            0 => Err("an empty file".into()),
            _ => Ok(()),
        },
    );
    let t0 = std::time::Instant::now();
    let (status, report) = server.stop();
    let out = child.wait_with_output().unwrap();
    assert!(
        t0.elapsed() > Duration::from_secs(1),
        "the download was not in flight"
    );
    assert!(out.status.success(), "the in-flight download was cut");
    assert_eq!(
        sha256(&std::fs::read(body.path()).unwrap()),
        sha256(&std::fs::read(file_path(64 << 20)).unwrap())
    );
    assert!(status.success(), "{report}");
    assert!(report.contains("responses: 200 1"), "{report}");
    // It drained as soon as the response was done, not at the grace limit.
    assert!(t0.elapsed() < Duration::from_secs(40), "{:?}", t0.elapsed());
}

#[test]
fn a_client_that_stops_reading_is_cut_after_the_send_timeout() {
    let server = Server::start(&["--send-timeout", "1", "--admin", "127.0.0.1:0"]);
    let metrics = server
        .startup
        .iter()
        .find_map(|l| l.strip_prefix("metrics on ")?.split(',').next())
        .unwrap_or_else(|| panic!("no admin address in {:?}", server.startup))
        .to_string();
    // s_client writes the body to a pipe nobody reads: it soon stops
    // reading its socket, and our sends stall.
    let mut child = tool("openssl")
        .args([
            "s_client",
            "-quiet",
            "-connect",
            &format!("127.0.0.1:{}", server.port),
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .as_mut()
        .unwrap()
        .write_all(b"GET /f67108864.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    // Until the server has counted the cut (its metrics say so).
    common::wait_until(common::WAIT, "a send timeout in tlsfront's metrics", || {
        let out = tool("curl")
            .args(["-sS", "--max-time", "10", &metrics])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let counted = text.lines().any(|l| {
            l.starts_with("tlsfront_errors_total{")
                && l.contains("\"send_timeout\"")
                && l.ends_with(" 1")
        });
        if counted {
            Ok(())
        } else {
            Err(text)
        }
    });
    let (status, report) = server.stop();
    let _ = child.kill();
    let _ = child.wait();
    assert!(status.success());
    assert!(report.contains("send_timeout 1"), "{report}");
}
