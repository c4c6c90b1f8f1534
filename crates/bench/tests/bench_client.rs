//! End-to-end tests of `tlsfront-bench`: the real binary against a small
//! HTTPS server run inside the test, whose behaviour is known exactly: every
//! GET is answered after a fixed delay with a body of a fixed size
//! (Content-Length, or chunked on /chunked, or until close on /close, or 404
//! on /missing), and the server counts full and resumed handshakes.

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::ServerConfig;
use serde_json::Value;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const DELAY: Duration = Duration::from_millis(50);

struct TestServer {
    addr: SocketAddr,
    full: Arc<AtomicU64>,
    resumed: Arc<AtomicU64>,
    cert_pem: String,
}

fn identity() -> (CertificateDer<'static>, PrivateKeyDer<'static>, String) {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let params =
        rcgen::CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap();
    let cert = params.self_signed(&key).unwrap();
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    (cert.der().clone(), der, cert.pem())
}

/// Start the server on `bind` (port 0) in its own thread; `None` when the
/// address cannot be bound (no IPv6, say).
fn start_server(bind: &str, body_len: usize) -> Option<TestServer> {
    let (cert, key, cert_pem) = identity();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut cfg = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .unwrap();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let std_listener = std::net::TcpListener::bind(bind).ok()?;
    std_listener.set_nonblocking(true).unwrap();
    let addr = std_listener.local_addr().unwrap();
    let full = Arc::new(AtomicU64::new(0));
    let resumed = Arc::new(AtomicU64::new(0));
    let (f, r) = (full.clone(), resumed.clone());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, f, r) = (acceptor.clone(), f.clone(), r.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    match tls.get_ref().1.handshake_kind() {
                        Some(rustls::HandshakeKind::Resumed) => r.fetch_add(1, SeqCst),
                        _ => f.fetch_add(1, SeqCst),
                    };
                    let _ = serve(tls, body_len).await;
                });
            }
        });
    });
    Some(TestServer {
        addr,
        full,
        resumed,
        cert_pem,
    })
}

async fn serve(
    tls: tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
    body_len: usize,
) -> std::io::Result<()> {
    let mut io = BufReader::new(tls);
    let body = vec![b'x'; body_len];
    loop {
        let mut path = None;
        loop {
            let mut line = String::new();
            if io.read_line(&mut line).await? == 0 {
                return Ok(());
            }
            if path.is_none() {
                path = line.split(' ').nth(1).map(str::to_string);
            } else if line == "\r\n" {
                break;
            }
        }
        tokio::time::sleep(DELAY).await;
        let w = io.get_mut();
        match path.as_deref().unwrap_or("/") {
            "/missing" => {
                w.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    .await?;
            }
            "/chunked" => {
                w.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                    .await?;
                for chunk in body.chunks(1000) {
                    w.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
                        .await?;
                    w.write_all(chunk).await?;
                    w.write_all(b"\r\n").await?;
                }
                w.write_all(b"0\r\n\r\n").await?;
            }
            "/close" => {
                w.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
                    .await?;
                w.write_all(&body).await?;
                w.shutdown().await?;
                return Ok(());
            }
            _ => {
                w.write_all(
                    format!("HTTP/1.1 200 OK\r\nContent-Length: {body_len}\r\n\r\n").as_bytes(),
                )
                .await?;
                w.write_all(&body).await?;
            }
        }
        w.flush().await?;
    }
}

impl TestServer {
    fn url(&self, path: &str) -> String {
        match self.addr {
            SocketAddr::V4(a) => format!("https://127.0.0.1:{}{path}", a.port()),
            SocketAddr::V6(a) => format!("https://[::1]:{}{path}", a.port()),
        }
    }
    fn handshakes(&self) -> (u64, u64) {
        (self.full.load(SeqCst), self.resumed.load(SeqCst))
    }
}

/// Run `tlsfront-bench ARGS`, killing it after `limit`.
fn bench(args: &[&str], limit: Duration) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tlsfront-bench"))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "tlsfront-bench {args:?} still running after {limit:?}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Run a benchmark that must succeed, and return its JSON and stdout.
fn bench_json(args: &[&str], dir: &Path, limit: Duration) -> (Value, String) {
    let json = dir.join("out.json");
    let mut all: Vec<&str> = args.to_vec();
    let json_arg = json.to_str().unwrap().to_string();
    all.extend(["--json", &json_arg, "--insecure", "--threads", "2"]);
    let out = bench(&all, limit);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{args:?}: {:?}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    (v, stdout)
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn requests_latency_follows_the_server_delay() {
    let server = start_server("127.0.0.1:0", 1000).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("lat.svg");
    let url = server.url("/");
    let (v, stdout) = bench_json(
        &[
            "requests",
            &url,
            "-c",
            "2",
            "-d",
            "2s",
            "--chart",
            chart.to_str().unwrap(),
        ],
        dir.path(),
        Duration::from_secs(60),
    );
    let s = &v["summary"];
    let p50 = num(&s["latency"]["p50_ms"]);
    assert!(
        (50.0..450.0).contains(&p50),
        "p50 {p50} ms for a {DELAY:?} server"
    );
    assert!(num(&s["latency"]["min_ms"]) >= 50.0, "{s}");
    assert_eq!(num(&s["errors"]), 0.0, "{v}");
    // Each connection waits >= 50 ms per request: at most 2 s * 2 / 50 ms.
    let requests = num(&s["requests"]);
    assert!((10.0..=80.0).contains(&requests), "{requests} requests");
    let per_second: f64 = v["per_second"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| num(&s["requests"]))
        .sum();
    assert_eq!(per_second, requests);
    assert_eq!(num(&s["connections_opened"]), 2.0);
    assert!(
        stdout.contains("p99.9") && stdout.contains("req/s"),
        "{stdout}"
    );
    let svg = std::fs::read_to_string(&chart).unwrap();
    assert!(
        svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>") && svg.contains("<polyline")
    );
}

#[test]
fn download_counts_runs_and_verifies_bytes() {
    const SIZE: usize = 300_000;
    let server = start_server("127.0.0.1:0", SIZE).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = server.url("/file");
    let (v, stdout) = bench_json(
        &["download", &url, "--runs", "3", "--connections", "2"],
        dir.path(),
        Duration::from_secs(60),
    );
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    for run in runs {
        let downloads = run["downloads"].as_array().unwrap();
        assert_eq!(downloads.len(), 2);
        for d in downloads {
            assert_eq!(num(&d["bytes"]), SIZE as f64);
            assert_eq!(num(&d["content_length"]), SIZE as f64);
            assert!(num(&d["ttfb_s"]) >= DELAY.as_secs_f64(), "{d}");
        }
    }
    let s = &v["summary"];
    assert_eq!(num(&s["total_bytes"]), 6.0 * SIZE as f64);
    assert_eq!(num(&s["content_length_verified"]), 6.0);
    assert_eq!(num(&s["per_download_MiB_per_s"]["n"]), 6.0);
    assert_eq!(num(&s["per_run_MiB_per_s"]["n"]), 3.0);
    // 6 measured connections plus the probe, each one handshake.
    let (full, resumed) = server.handshakes();
    assert_eq!(full + resumed, 7);
    assert_eq!(num(&s["handshakes_resumed"]), resumed as f64);
    for word in ["Median", "Stddev", "kB/s", "MiB/s", "total 1800000 bytes"] {
        assert!(stdout.contains(word), "{word}: {stdout}");
    }

    // Bodies without Content-Length are counted too.
    for path in ["/chunked", "/close"] {
        let (v, _) = bench_json(
            &["download", &server.url(path), "--runs", "2"],
            dir.path(),
            Duration::from_secs(60),
        );
        for d in v["runs"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r["downloads"].as_array().unwrap())
        {
            assert_eq!(num(&d["bytes"]), SIZE as f64, "{path}");
            assert!(d["content_length"].is_null(), "{path}");
        }
    }

    // A chosen TLS 1.2 suite is the one negotiated.
    let (v, _) = bench_json(
        &[
            "download",
            &url,
            "--runs",
            "1",
            "--cipher",
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        ],
        dir.path(),
        Duration::from_secs(60),
    );
    assert_eq!(
        v["negotiated"]["suite"],
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"
    );
    assert_eq!(v["negotiated"]["version"], "TLS 1.2");

    // A chosen key-exchange group is offered alone: every connection
    // negotiates it, and the report's first lines name it.
    for (kx, group) in [
        ("x25519mlkem768", "X25519MLKEM768"),
        ("x25519", "X25519"),
        ("secp256r1", "secp256r1"),
    ] {
        let (v, stdout) = bench_json(
            &["download", &url, "--runs", "2", "--kx", kx],
            dir.path(),
            Duration::from_secs(60),
        );
        assert_eq!(v["settings"]["tls"]["kx"], kx);
        assert_eq!(v["negotiated"]["group"], group, "{kx}");
        let downloads: Vec<_> = v["runs"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r["downloads"].as_array().unwrap())
            .collect();
        assert_eq!(downloads.len(), 2);
        for d in downloads {
            assert_eq!(d["connection"]["group"], group, "{kx}: {d}");
        }
        let head: String = stdout.lines().take(2).collect::<Vec<_>>().join("\n");
        assert!(head.contains(&format!(" {group} at ")), "{kx}: {stdout}");
    }
}

#[test]
fn ca_file_and_ipv6_literal() {
    let dir = tempfile::tempdir().unwrap();
    let server = start_server("127.0.0.1:0", 1000).unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &server.cert_pem).unwrap();
    let url = format!("https://localhost:{}/", server.addr.port());
    let out = bench(
        &[
            "download",
            &url,
            "--runs",
            "1",
            "--ca",
            ca.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("Content-Length verified on 1 of 1"));

    // IPv6 loopback, where this machine has it.
    if let Some(v6) = start_server("[::1]:0", 1000) {
        let (v, _) = bench_json(
            &["download", &v6.url("/"), "--runs", "1"],
            dir.path(),
            Duration::from_secs(60),
        );
        assert_eq!(num(&v["summary"]["total_bytes"]), 1000.0);
        assert_eq!(
            v["negotiated"]["addr"].as_str().unwrap(),
            v6.addr.to_string()
        );
    }
}

/// The tps tests' ramp: 5/s then 10/s, one second each, 2 GETs a session.
const SHORT_RAMP: [&str; 6] = [
    "--ramp",
    "5:5:10",
    "--step-seconds",
    "1",
    "--requests-per-session",
    "2",
];

/// Run one [`SHORT_RAMP`] against a fresh server.
fn tps_run(extra: &[&str]) -> (Value, TestServer) {
    let server = start_server("127.0.0.1:0", 1000).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = server.url("/");
    let mut args = vec!["tps", &url];
    args.extend(SHORT_RAMP);
    args.extend(extra);
    let (v, _) = bench_json(&args, dir.path(), Duration::from_secs(60));
    (v, server)
}

#[test]
fn tps_follows_the_schedule_and_resumes_sessions() {
    let (v, server) = tps_run(&[]);
    let s = &v["summary"];
    let attempted = num(&s["attempted"]);
    assert!(
        (15.0 * 0.7..=15.0 * 1.3).contains(&attempted),
        "{attempted} attempted, schedule 5 + 10"
    );
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2);
    assert!(
        (3.0..=7.0).contains(&num(&steps[0]["attempted"])),
        "{}",
        steps[0]
    );
    assert!(
        (7.0..=13.0).contains(&num(&steps[1]["attempted"])),
        "{}",
        steps[1]
    );
    assert_eq!(num(&s["failed"]), 0.0, "{v}");
    // Response time covers connect + 2 requests of >= 50 ms each.
    assert!(
        num(&steps[0]["response"]["min_ms"]) >= 100.0,
        "{}",
        steps[0]
    );
    assert!(s["max_tps"]["tps"].as_f64().unwrap() > 0.0);
    let (full, resumed) = server.handshakes();
    assert!(resumed >= 1, "no resumed handshake: {full} full");
    assert_eq!(
        num(&s["handshakes_resumed"]),
        resumed as f64,
        "client and server agree"
    );
    assert_eq!(
        full + resumed,
        attempted as u64 + 1,
        "every session and the probe"
    );
    let secs: f64 = v["per_second"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| num(&s["attempted"]))
        .sum();
    assert_eq!(secs, attempted);

    let (v, server) = tps_run(&["--no-resume"]);
    let attempted = num(&v["summary"]["attempted"]);
    assert_eq!(num(&v["summary"]["failed"]), 0.0, "{v}");
    let (full, resumed) = server.handshakes();
    assert_eq!(resumed, 0, "--no-resume");
    assert_eq!(full, attempted as u64 + 1);
    assert_eq!(num(&v["summary"]["handshakes_resumed"]), 0.0);
}

#[test]
fn tps_resumes_tls12_sessions_too() {
    let (v, server) = tps_run(&["--tls-version", "1.2"]);
    assert_eq!(v["negotiated"]["version"], "TLS 1.2");
    assert_eq!(num(&v["summary"]["failed"]), 0.0, "{v}");
    let (_, resumed) = server.handshakes();
    assert!(resumed >= 1);
    assert_eq!(num(&v["summary"]["handshakes_resumed"]), resumed as f64);
}

/// `--interleave`: sessions alternate between two servers (`--block 2`:
/// two at a time), each at the ramp's rate, each with its own session
/// cache (both resume), and the per-server totals agree with what each
/// server saw.
#[test]
fn tps_interleaves_sessions_between_servers() {
    let a = start_server("127.0.0.1:0", 1000).unwrap();
    let b = start_server("127.0.0.1:0", 1000).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (ua, ub) = (a.url("/"), b.url("/"));
    let mut args = vec!["tps", &ua, "--interleave", &ub, "--block", "2"];
    args.extend(SHORT_RAMP);
    let (v, stdout) = bench_json(&args, dir.path(), Duration::from_secs(60));
    assert_eq!(num(&v["summary"]["failed"]), 0.0, "{v}");
    let attempted = num(&v["summary"]["attempted"]);
    // Each server at 5 then 10 sessions/s: twice the single-server schedule.
    assert!(
        (30.0 * 0.7..=30.0 * 1.3).contains(&attempted),
        "{attempted} attempted, schedule 2 x (5 + 10)"
    );
    let steps = v["steps"].as_array().unwrap();
    assert_eq!(
        (num(&steps[0]["rate"]), num(&steps[1]["rate"])),
        (10.0, 20.0)
    );
    let targets = v["targets"].as_array().unwrap();
    assert_eq!(targets.len(), 2);
    let mut sum = 0.0;
    for (t, (server, url)) in targets.iter().zip([(&a, &ua), (&b, &ub)]) {
        assert_eq!(t["url"].as_str().unwrap(), url.as_str());
        let (full, resumed) = server.handshakes();
        assert!(resumed >= 1, "{url}: no resumed handshake ({full} full)");
        assert_eq!(num(&t["handshakes_resumed"]), resumed as f64, "{url}");
        assert_eq!(
            num(&t["successful"]) + 1.0,
            (full + resumed) as f64,
            "{url}: every session and the probe"
        );
        sum += num(&t["attempted"]);
    }
    assert_eq!(sum, attempted);
    // In turn, two at a time: the counts differ by at most two sessions.
    assert!(
        (num(&targets[0]["attempted"]) - num(&targets[1]["attempted"])).abs() <= 2.0,
        "{targets:?}"
    );
    assert!(
        stdout.contains("sessions go to 2 servers in turn"),
        "{stdout}"
    );
    assert!(stdout.contains(&ub), "{stdout}");
}

/// A failing command line: non-zero exit, nothing on stdout, one line on
/// stderr that says `want`.
fn fails_with(args: &[&str], want: &str) {
    let out = bench(args, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
    assert!(
        stderr.starts_with("tlsfront-bench: ") && stderr.contains(want),
        "{args:?}: want {want:?}, got {stderr}"
    );
    assert!(out.stdout.is_empty(), "{args:?}");
}

#[test]
fn bad_targets_give_one_clear_line() {
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let refused_url = format!("https://127.0.0.1:{refused}/");
    fails_with(
        &["download", &refused_url, "--insecure"],
        "cannot connect to 127.0.0.1",
    );
    fails_with(
        &["tps", &refused_url, "--ramp", "1:1:1", "--insecure"],
        "Connection refused",
    );
    fails_with(
        &["requests", &refused_url, "-d", "1s", "--insecure"],
        "Connection refused",
    );
    fails_with(&["download", "http://127.0.0.1/"], "not an https:// URL");
    fails_with(&["download", "https://[::1/"], "IPv6");
    fails_with(&["download", "https://h:70000/"], "bad port");

    let server = start_server("127.0.0.1:0", 10).unwrap();
    let url = server.url("/");
    fails_with(&["download", &url], "invalid peer certificate");
    // An interleaved server is checked like the first one, before the run.
    let tps_with = |other: &str, want: &str| {
        fails_with(
            &[
                "tps",
                &url,
                "--interleave",
                other,
                "--ramp",
                "1:1:1",
                "--insecure",
            ],
            want,
        )
    };
    tps_with(&refused_url, "Connection refused");
    tps_with("http://127.0.0.1/", "not an https:// URL");
    fails_with(
        &["download", &server.url("/missing"), "--insecure"],
        "404 Not Found",
    );
    let dir = tempfile::tempdir().unwrap();
    let untouched = dir.path().join("untouched.json");
    fails_with(
        &[
            "download",
            &url,
            "--insecure",
            "--cipher",
            "RC4",
            "--json",
            untouched.to_str().unwrap(),
        ],
        "TLS13_AES_128_GCM_SHA256",
    );
    assert!(!untouched.exists(), "no output file for a bad command line");
    fails_with(
        &["download", &url, "--ca", "/nonexistent/ca.pem"],
        "cannot read CA file",
    );
    let bad_json = dir.path().join("no/such/dir/out.json");
    fails_with(
        &[
            "download",
            &url,
            "--insecure",
            "--json",
            bad_json.to_str().unwrap(),
        ],
        "cannot write",
    );
    // A TLS 1.3 suite with --tls-version 1.2.
    fails_with(
        &[
            "download",
            &url,
            "--insecure",
            "--tls-version",
            "1.2",
            "--cipher",
            "TLS13_AES_128_GCM_SHA256",
        ],
        "--tls-version 1.2",
    );
}
