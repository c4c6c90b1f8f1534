//! HTTP/2 on a static site, end to end with real clients: curl `--http2`
//! (bodies, ranges, conditionals, HEAD, errors, many streams multiplexed
//! on one connection) and nghttp2's `h2load` (hundreds of streams in
//! flight). The same tests run in the kTLS guest, where the server's
//! counters must show every connection on the kernel's path.

mod common;

use common::*;

/// curl over HTTP/2 only (no fallback: ALPN must pick h2).
fn h2(server: &Server, args: &[&str]) -> std::process::Output {
    let mut a = vec!["--http2", "--fail-with-body"];
    a.extend_from_slice(args);
    server.curl(&a)
}

/// The response head curl gets over HTTP/2 (whatever the status).
fn h2_head(server: &Server, args: &[&str]) -> String {
    let mut a = vec!["--http2", "-s", "-D", "-", "-o", "/dev/null"];
    a.extend_from_slice(args);
    text(&server.curl(&a).stdout)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn every_size_downloads_whole_over_one_h2_connection() {
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = vec![
        "-w".into(),
        "%{http_version} %{http_code} %{num_connects} %{size_download}\\n".into(),
    ];
    for s in SIZES {
        args.push(server.url(&format!("/f{s}.bin")));
        args.push("-o".into());
        args.push(dir.path().join(format!("{s}")).display().to_string());
    }
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = h2(&server, &argv);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    let lines: Vec<&str> = report.lines().collect();
    assert_eq!(lines.len(), SIZES.len(), "{report}");
    for (i, (line, s)) in lines.iter().zip(SIZES).enumerate() {
        let connects = if i == 0 { 1 } else { 0 };
        assert_eq!(*line, format!("2 200 {connects} {s}"), "{report}");
        let got = std::fs::read(dir.path().join(format!("{s}"))).unwrap();
        let want = std::fs::read(file_path(s)).unwrap();
        assert!(got == want, "f{s}.bin: body differs over h2");
    }
    server.stop_and_check_path(1);
}

#[test]
fn ranges_conditionals_head_and_errors_behave_as_on_http1() {
    let server = Server::start(&[]);
    let want = std::fs::read(file_path(16385)).unwrap();
    // A single range.
    let out = h2(
        &server,
        &["-D", "-", "-r", "100-16000", &server.url("/f16385.bin")],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let all = out.stdout;
    let split = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = text(&all[..split]);
    assert!(head.starts_with("HTTP/2 206"), "{head}");
    assert!(
        head.contains("content-range: bytes 100-16000/16385\r\n"),
        "{head}"
    );
    assert!(head.contains("content-length: 15901\r\n"), "{head}");
    assert!(all[split..] == want[100..16001], "range body differs");
    // HEAD: the head with the length, no body.
    let out = h2(&server, &["-sI", &server.url("/f16385.bin")]);
    let head = text(&out.stdout);
    assert!(head.starts_with("HTTP/2 200"), "{head}");
    assert!(head.contains("content-length: 16385\r\n"), "{head}");
    let etag = head
        .lines()
        .find_map(|l| l.strip_prefix("etag: "))
        .expect("an etag")
        .trim()
        .to_string();
    // A matching If-None-Match: 304.
    let inm = format!("If-None-Match: {etag}");
    let out = h2(
        &server,
        &[
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-H",
            &inm,
            &server.url("/f16385.bin"),
        ],
    );
    assert_eq!(text(&out.stdout), "304");
    // Errors and redirects: the same pages and headers as HTTP/1.1.
    let out = server.curl(&["--http2", "-s", "-D", "-", &server.url("/missing")]);
    let all = text(&out.stdout);
    assert!(all.starts_with("HTTP/2 404"), "{all}");
    assert!(all.contains("404 Not Found"), "{all}");
    let head = h2_head(&server, &[&server.url("/sub")]);
    assert!(head.starts_with("HTTP/2 301"), "{head}");
    assert!(head.contains("location: /sub/\r\n"), "{head}");
    let head = h2_head(&server, &["-X", "POST", &server.url("/hello.txt")]);
    assert!(head.starts_with("HTTP/2 405"), "{head}");
    assert!(head.contains("allow: GET, HEAD\r\n"), "{head}");
    // No connection-specific field in any h2 response (RFC 9113 §8.2.2).
    assert!(!head.contains("connection:"), "{head}");
}

#[test]
fn many_parallel_downloads_share_one_connection() {
    let server = Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let sizes = [1usize, 2048, 2049, 16384, 16385, 1 << 20];
    let mut args: Vec<String> = vec![
        "--parallel".into(),
        "--parallel-max".into(),
        "60".into(),
        "-w".into(),
        "%{http_version} %{http_code}\\n".into(),
    ];
    for i in 0..60 {
        let s = sizes[i % sizes.len()];
        args.push(server.url(&format!("/f{s}.bin")));
        args.push("-o".into());
        args.push(dir.path().join(format!("{i}")).display().to_string());
    }
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = h2(&server, &argv);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    assert_eq!(
        report.lines().filter(|l| *l == "2 200").count(),
        60,
        "{report}"
    );
    for i in 0..60 {
        let s = sizes[i % sizes.len()];
        let got = std::fs::read(dir.path().join(format!("{i}"))).unwrap();
        assert!(
            got == std::fs::read(file_path(s)).unwrap(),
            "download {i} (f{s}.bin) differs"
        );
    }
    // Multiplexed: far fewer connections than downloads.
    server.stop_and_check_path(1);
}

#[test]
fn h2load_runs_hundreds_of_streams_in_flight_without_a_failure() {
    let server = Server::start(&[]);
    let out = tool("h2load")
        .args(["-n", "2000", "-c", "2", "-m", "100", "-t", "1"])
        .arg(server.url("/f2048.bin"))
        .output()
        .expect("run h2load (tests/install-packages.sh installs nghttp2-client)");
    let report = text(&out.stdout);
    assert!(out.status.success(), "{report}\n{}", text(&out.stderr));
    assert!(report.contains("Application protocol: h2"), "{report}");
    assert!(
        report.contains(
            "requests: 2000 total, 2000 started, 2000 done, 2000 succeeded, 0 failed, 0 errored"
        ),
        "{report}"
    );
    assert!(report.contains("status codes: 2000 2xx"), "{report}");
    server.stop_and_check_path(2);
}

#[test]
fn the_conformance_suite_passes_every_case() {
    let server = Server::start(&[]);
    let size = 1 << 20;
    let body = std::fs::read(file_path(size)).unwrap();
    common::h2::conformance(
        server.port,
        "localhost",
        &server.ca(),
        common::h2::Body {
            path: &format!("/f{size}.bin"),
            size,
            sha256: &sha256(&body),
        },
        &[],
    );
    server.stop_and_check_path(100);
}

/// The body each stream of the drain test fetches: 1 MiB, so that most
/// streams are still in flight at the signal; in the emulated kTLS guest
/// (where the drain's logic is the same and every MiB costs seconds) a
/// record's worth.
fn drain_file_size() -> usize {
    if std::env::var_os("TLSFRONT_IN_GUEST").is_some() {
        16385
    } else {
        1 << 20
    }
}

/// h2load with every request on the wire at once (`-n` = `-c` × `-m`: it
/// opens no stream after the first ones), signalled once a tenth of them
/// are done: the drain must let each stream in flight finish.
fn h2load_across(server: &mut Server, signal: rustix::process::Signal) -> String {
    use std::io::{BufRead, BufReader};
    let mut h2load = tool("h2load")
        .args(["-n", "100", "-c", "1", "-m", "100", "-t", "1"])
        .arg(server.url(&format!("/f{}.bin", drain_file_size())))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run h2load (tests/install-packages.sh installs nghttp2-client)");
    let mut out = BufReader::new(h2load.stdout.take().unwrap());
    let mut report = String::new();
    let mut signalled = false;
    let mut line = String::new();
    // Its lines come as it goes; the pipe ends when it exits.
    while out.read_line(&mut line).unwrap() > 0 {
        if !signalled && line.starts_with("progress: 10% done") {
            server.signal(signal);
            signalled = true;
        }
        report.push_str(&line);
        line.clear();
    }
    let status = h2load.wait().unwrap();
    assert!(signalled, "h2load never reported 10% done:\n{report}");
    assert!(status.success(), "{report}");
    assert!(
        report.contains("requests: 100 total, 100 started, 100 done, 100 succeeded, 0 failed"),
        "{signal:?}: streams were lost:\n{report}"
    );
    report
}

#[test]
fn reload_upgrade_and_sigterm_let_every_stream_in_flight_finish() {
    use rustix::process::Signal;
    let _serial = common::serial();
    // Reload: the connection goes on as it was.
    let mut server = Server::start(&[]);
    h2load_across(&mut server, Signal::HUP);
    server.wait_for_output("reloaded ", 1);
    // SIGTERM: GOAWAY, every stream finished, then the exit.
    h2load_across(&mut server, Signal::TERM);
    let status = server.wait_exit(WAIT);
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}\n{}",
        server.output()
    );
    // Upgrade: the old process finishes the streams it took, the new one
    // takes what comes next.
    let mut server = Server::start(&[]);
    h2load_across(&mut server, Signal::USR2);
    let out = server.wait_for_output("upgraded: new process", 1);
    let status = server.wait_exit(WAIT);
    assert!(status.is_some_and(|s| s.success()), "{status:?}\n{out}");
    let got = server.status("/hello.txt", &["--http2"]);
    assert_eq!(got, "200", "the new process serves h2");
    let new: u32 = out
        .split("upgraded: new process ")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no pid in: {out}"));
    let pid = rustix::process::Pid::from_raw(new as i32).unwrap();
    rustix::process::kill_process(pid, Signal::TERM).unwrap();
}

#[test]
fn precompressed_siblings_fallback_and_listings_over_h2() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("index.html"), "<p>spa</p>\n").unwrap();
    // Served as stored, never decoded: any bytes do.
    std::fs::write(dir.path().join("index.html.gz"), b"gzip bytes as stored").unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/a.txt"), "a\n").unwrap();
    let server = Server::start_in(
        dir.path(),
        &[
            "--precompressed",
            "gzip",
            "--fallback",
            "/index.html",
            "--autoindex",
        ],
    );
    let split = |all: &[u8]| {
        let at = all.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        (text(&all[..at]), all[at..].to_vec())
    };
    // The precompressed sibling, by Accept-Encoding.
    let out = h2(
        &server,
        &[
            "-D",
            "-",
            "-H",
            "Accept-Encoding: gzip",
            &server.url("/index.html"),
        ],
    );
    let (head, body) = split(&out.stdout);
    assert!(head.starts_with("HTTP/2 200"), "{head}");
    assert!(head.contains("content-encoding: gzip\r\n"), "{head}");
    assert!(head.contains("vary: Accept-Encoding\r\n"), "{head}");
    assert_eq!(body, b"gzip bytes as stored");
    // The fallback answers a path that does not exist.
    let out = h2(&server, &["-D", "-", &server.url("/some/route")]);
    let (head, body) = split(&out.stdout);
    assert!(head.starts_with("HTTP/2 200"), "{head}");
    assert_eq!(body, b"<p>spa</p>\n");
    // A directory without an index is listed.
    let out = h2(&server, &["-D", "-", &server.url("/sub/")]);
    let (head, body) = split(&out.stdout);
    assert!(head.starts_with("HTTP/2 200"), "{head}");
    assert!(text(&body).contains("a.txt"), "{}", text(&body));
}
