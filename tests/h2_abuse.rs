//! The HTTP/2 abuse suite (tests/h2/abuse.py, issue 27) against `tlsfront
//! serve`: Rapid Reset, CONTINUATION and HPACK floods, SETTINGS, PING,
//! WINDOW_UPDATE and empty DATA floods, zero-window stalls, MadeYouReset,
//! streams past the limit and idle connections, each with its bound. The
//! suite asks this test what it cannot see from a socket: the server's
//! memory, a normal client's (curl's) response while the attack runs, and
//! the server's `tlsfront_http2_events_total`. After every attack the
//! server must still run and count what it met.

mod common;

use common::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Stdio};
use std::time::Duration;

/// The idle timeouts the server runs with (request head and keep-alive),
/// short so that the idle case waits for the close, not for the default.
const IDLE_SECS: u32 = 3;
/// A net over the whole suite: every wait in it has its own bound.
const SUITE_BOUND: Duration = Duration::from_secs(900);
/// The file the normal client fetches while an attack runs.
const WITNESS_SIZE: usize = 16385;

/// A child process killed on drop (the suite, should the test fail early).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The admin address from the start-up lines.
fn admin_addr(server: &Server) -> String {
    server
        .startup
        .iter()
        .find_map(|l| l.strip_prefix("metrics on http://"))
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no admin address in {:?}", server.startup))
        .to_string()
}

/// `tlsfront_http2_events_total` by event, from the admin listener.
fn http2_events(admin: &str) -> Vec<(String, u64)> {
    let out = tool("curl")
        .args(["-sS", "--max-time", "30"])
        .arg(format!("http://{admin}/metrics"))
        .output()
        .expect("run curl");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter_map(|l| l.strip_prefix("tlsfront_http2_events_total{event=\""))
        .filter_map(|rest| {
            let (event, rest) = rest.split_once('"')?;
            let n = rest.rsplit(' ').next()?.parse::<f64>().ok()?;
            Some((event.to_string(), n as u64))
        })
        .collect()
}

/// A normal client over HTTP/2: "ok" when it got the whole file.
fn witness(server: &Server, want: &[u8], dir: &std::path::Path) -> String {
    let file = dir.join("witness");
    let _ = std::fs::remove_file(&file);
    let out = server.curl(&[
        "--http2",
        "-o",
        file.to_str().unwrap(),
        "-w",
        "%{http_version} %{http_code}",
        &server.url(&format!("/f{WITNESS_SIZE}.bin")),
    ]);
    let got = String::from_utf8_lossy(&out.stdout).into_owned();
    if got != "2 200" {
        return format!(
            "curl: {got:?} {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    match std::fs::read(&file) {
        Ok(body) if body == want => "ok".into(),
        Ok(body) => format!("curl: a body of {} bytes that differs", body.len()),
        Err(e) => format!("curl wrote no body: {e}"),
    }
}

#[test]
fn every_attack_is_bounded_and_others_are_served_meanwhile() {
    let idle = IDLE_SECS.to_string();
    // No limit of requests a connection: the floods of frames without
    // answers hide among requests, and a drain must not end them first.
    // No open-file cache either: each stream answered from a file holds a
    // descriptor of its own.
    let conf = tempfile::tempdir().unwrap();
    let config = conf.path().join("limits.toml");
    std::fs::write(
        &config,
        "open_file_cache = 0\n[limits]\nkeepalive_requests = 18446744073709551615\n",
    )
    .unwrap();
    let server = Server::start(&[
        "--config",
        config.to_str().unwrap(),
        "--admin",
        "127.0.0.1:0",
        "--request-header-timeout",
        &idle,
        "--keepalive-timeout",
        &idle,
    ]);
    let admin = admin_addr(&server);
    let want = std::fs::read(file_path(WITNESS_SIZE)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let large = 1 << 20;
    let small = 2048;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/h2/abuse.py");
    let mut suite = Killed(
        tool("python3")
            .arg(script)
            .args(["--connect", &format!("127.0.0.1:{}", server.port)])
            .args(["--authority", "localhost", "--cafile"])
            .arg(server.ca())
            .args(["--path", &format!("/f{large}.bin")])
            .args(["--small", &format!("/f{small}.bin")])
            .args(["--small-size", &small.to_string()])
            .args(["--idle", &idle])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("run python3 tests/h2/abuse.py"),
    );
    let mut answers = suite.0.stdin.take().unwrap();
    let questions = BufReader::new(suite.0.stdout.take().unwrap());
    let (tx, lines) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in questions.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let pid = server.pid();
    let deadline = std::time::Instant::now() + SUITE_BOUND;
    let mut report = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let line = match lines.recv_timeout(left) {
            Ok(line) => line,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(e) => panic!("the abuse suite ran past {SUITE_BOUND:?} ({e}):\n{report:#?}"),
        };
        let Some(question) = line.strip_prefix("? ") else {
            eprintln!("{line}");
            report.push(line);
            continue;
        };
        let answer = match question {
            "rss" => format!("{} {}", server.rss_kib(), server.peak_rss_kib()),
            "reset-peak" => {
                // Linux ≥ 4.0: the peak (VmHWM) starts again from VmRSS,
                // so that each attack's peak is its own.
                std::fs::write(format!("/proc/{pid}/clear_refs"), "5")
                    .expect("reset the server's peak RSS through /proc/PID/clear_refs");
                "ok".into()
            }
            "witness" => witness(&server, &want, dir.path()),
            "fds" => std::fs::read_dir(format!("/proc/{pid}/fd"))
                .expect("list the server's descriptors")
                .count()
                .to_string(),
            "metrics" => http2_events(&admin)
                .iter()
                .map(|(e, n)| format!("{e}={n}"))
                .collect::<Vec<_>>()
                .join(" "),
            other => panic!("the abuse suite asked {other:?}"),
        };
        writeln!(answers, "{answer}").unwrap();
        answers.flush().unwrap();
    }
    let status = wait_until(WAIT, "the abuse suite to exit", || {
        suite.0.try_wait().unwrap().ok_or("running".to_string())
    });
    let text = report.join("\n");
    let cases = [
        "rapid-reset",
        "continuation-flood",
        "continuation-empty",
        "hpack-bomb",
        "settings-flood",
        "ping-flood",
        "window-update-flood",
        "empty-data-flood",
        "zero-window-stall",
        "file-streams",
        "made-you-reset",
        "too-many-streams",
        "idle",
    ];
    for id in cases {
        assert!(
            report.iter().any(|l| l.starts_with(&format!("ok   {id} "))),
            "{id} did not pass:\n{text}"
        );
    }
    assert!(status.success(), "exit {status:?}:\n{text}");

    // The server lived through all of it, and counted what it met.
    let mut server = server;
    assert!(
        server.wait_exit(Duration::ZERO).is_none(),
        "tlsfront exited"
    );
    let events = http2_events(&admin);
    for event in [
        "connection",
        "client_reset",
        "stream_error",
        "stream_refused",
        "enhance_your_calm",
        "idle_timeout",
    ] {
        assert!(
            events.iter().any(|(e, n)| e == event && *n > 0),
            "tlsfront_http2_events_total{{event=\"{event}\"}} is 0: {events:?}"
        );
    }
    assert_eq!(witness(&server, &want, dir.path()), "ok");
    server.stop_and_check_path(100);
}
