//! The admin listener seen by a real Prometheus: `tlsfront run` with
//! `admin` and two sites (files, and a backend on a closed port), requests
//! through curl (200s and 404s), a resumed session (openssl s_client), then
//! a Prometheus scraping `/metrics` every second, asked through its HTTP
//! API until the counts made here appear, and until a reload that drops a
//! site drops its certificate's series. Both exposition formats checked by
//! promtool (the text format linted, OpenMetrics parsed by its strict
//! parser), chosen by `Accept`; handshakes counted by what they negotiated
//! (openssl s_client picking version, suite and group). `/healthz` (200
//! while serving, 503 once draining) and `/metrics` answered beside idle
//! and half-sent admin connections and while a reload is stuck reading a
//! certificate from a FIFO, the admin socket handed on in an upgrade, a
//! bad `admin` address refused with where it was set, and the connection
//! limit computed again by a reload that adds (or drops) roots and logs.

mod common;

use common::{s_client, tool, Server, Step};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// A loopback port nothing listens on now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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

/// (status, body) of a plain HTTP request to the admin listener.
fn admin(addr: &str, method: &str, path: &str) -> (String, String) {
    let out = tool("curl")
        .args([
            "-sS",
            "--max-time",
            "10",
            "-X",
            method,
            "-w",
            "\n%{http_code}",
        ])
        .arg(format!("http://{addr}{path}"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, status) = text.rsplit_once('\n').unwrap_or_default();
    (status.to_string(), body.trim_end().to_string())
}

/// `/metrics` as a scraper sending `accept` gets it: (content type, body).
fn scrape(addr: &str, accept: Option<&str>) -> (String, String) {
    let mut c = tool("curl");
    c.args(["-sS", "--max-time", "10", "-w", "\n%{content_type}"]);
    if let Some(a) = accept {
        c.arg("-H").arg(format!("Accept: {a}"));
    }
    let out = c.arg(format!("http://{addr}/metrics")).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, kind) = text.rsplit_once('\n').unwrap_or_default();
    (kind.to_string(), body.to_string())
}

/// HTTPS requests to `name` on `port`, one curl, one connection; their
/// statuses.
fn get(port: u16, name: &str, paths: &[&str]) -> Vec<String> {
    let mut c = tool("curl");
    c.args([
        "-sk",
        "--max-time",
        "20",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}\n",
    ])
    .arg("--resolve")
    .arg(format!("{name}:{port}:127.0.0.1"));
    for p in paths {
        c.args(["-o", "/dev/null"])
            .arg(format!("https://{name}:{port}{p}"));
    }
    let out = c.output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// One TLS 1.3 connection to `name` that saves its session to `out`, or
/// resumes the one in `resume`; whether it was resumed.
fn session(port: u16, name: &str, out: Option<&Path>, resume: Option<&Path>) -> bool {
    let mut args = vec!["-tls1_3".to_string(), "-servername".into(), name.into()];
    if let Some(p) = out {
        args.extend(["-sess_out".into(), p.display().to_string()]);
    }
    if let Some(p) = resume {
        args.extend(["-sess_in".into(), p.display().to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let steps = match out {
        Some(p) => vec![Step::WaitForFile(p)],
        None => vec![Step::WaitFor("Verify return code")],
    };
    let (stdout, stderr, _) = s_client(port, &args, &steps, Duration::from_secs(20));
    assert!(
        stdout.contains("New, TLSv1") || stdout.contains("Reused, TLSv1"),
        "no handshake: {stdout}{stderr}"
    );
    stdout.contains("Reused, TLSv1")
}

/// A Prometheus of our own, killed when dropped.
struct Prometheus {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(target: &str) -> Prometheus {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: tlsfront\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = tool("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("run prometheus (tests/install-packages.sh installs it)");
        Prometheus {
            child,
            port,
            _dir: dir,
        }
    }

    /// The samples of an instant query, (labels, value); `None` when
    /// Prometheus gave no answer (not up yet) or an error.
    fn query(&self, expr: &str) -> Option<Vec<(serde_json::Value, f64)>> {
        let out = tool("curl")
            .args(["-sS", "--max-time", "5", "-G"])
            .arg(format!("http://127.0.0.1:{}/api/v1/query", self.port))
            .arg("--data-urlencode")
            .arg(format!("query={expr}"))
            .output()
            .unwrap();
        let v = serde_json::from_slice::<serde_json::Value>(&out.stdout).ok()?;
        if v["status"] != "success" {
            return None;
        }
        let samples = v["data"]["result"].as_array()?;
        Some(
            samples
                .iter()
                .map(|s| {
                    let value = s["value"][1].as_str().unwrap_or("NaN");
                    (s["metric"].clone(), value.parse().unwrap_or(f64::NAN))
                })
                .collect(),
        )
    }

    /// Query until `ok` holds for the samples (up to 30 s); the samples.
    fn wait(&self, expr: &str, ok: impl Fn(&[(serde_json::Value, f64)]) -> bool) -> Vec<f64> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let r = self.query(expr);
            if let Some(r) = r.as_deref().filter(|r| ok(r)) {
                return r.iter().map(|(_, v)| *v).collect();
            }
            assert!(
                Instant::now() < deadline,
                "Prometheus: {expr} gave {r:?} after 30 s ({})",
                std::fs::read_to_string(self._dir.path().join("prometheus.log"))
                    .unwrap_or_default()
                    .lines()
                    .rev()
                    .take(5)
                    .collect::<Vec<_>>()
                    .join(" | ")
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The one value of `expr` once it equals `want`.
    fn wait_value(&self, expr: &str, want: impl Fn(f64) -> bool) -> f64 {
        self.wait(expr, |r| r.len() == 1 && want(r[0].1))[0]
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Two sites on one listener and the admin listener on a port of its own.
fn two_sites(dir: &Path) -> std::path::PathBuf {
    let root = dir.join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("id.txt"), "files\n").unwrap();
    let closed = free_port();
    let config = dir.join("tlsfront.toml");
    std::fs::write(
        &config,
        format!(
            "admin = \"127.0.0.1:0\"\n\
             [[site]]\nnames = [\"files.test\"]\nroot = {:?}\ndefault = true\n\
             [[site]]\nnames = [\"backend.test\"]\nbackend = \"127.0.0.1:{closed}\"\n",
            root.display().to_string()
        ),
    )
    .unwrap();
    config
}

#[test]
fn prometheus_scrapes_what_was_served() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::run(&two_sites(dir.path()), &[]);
    let addr = admin_addr(&server);
    assert_eq!(admin(&addr, "GET", "/healthz"), ("200".into(), "ok".into()));
    assert_eq!(admin(&addr, "GET", "/nope").0, "404");
    assert_eq!(admin(&addr, "POST", "/metrics").0, "405");

    let port = server.port;
    let statuses = get(
        port,
        "files.test",
        &["/id.txt", "/id.txt", "/missing", "/id.txt", "/also-missing"],
    );
    assert_eq!(statuses, ["200", "200", "404", "200", "404"]);
    // The backend's port is closed: the client gets a TLS close, and the
    // site a backend error.
    let failed = get(port, "backend.test", &["/"]);
    assert_ne!(failed, ["200"]);
    let ticket = dir.path().join("session.pem");
    assert!(!session(port, "files.test", Some(&ticket), None));
    assert!(
        session(port, "files.test", None, Some(&ticket)),
        "the session was not resumed"
    );

    // The text Prometheus will read, as it asks for it.
    let (kind, text) = scrape(
        &addr,
        Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
    );
    assert!(kind.starts_with("application/openmetrics-text"), "{kind}");
    assert!(text.ends_with("# EOF\n"), "{text}");

    let prometheus = Prometheus::start(&addr);
    prometheus.wait_value("up{job=\"tlsfront\"}", |v| v == 1.0);
    prometheus.wait_value("sum(tlsfront_responses_total{status=\"404\"})", |v| {
        v == 2.0
    });
    prometheus.wait_value(
        "sum(tlsfront_responses_total{site=\"files.test\",status=\"200\"})",
        |v| v == 3.0,
    );
    prometheus.wait_value(
        "sum(tlsfront_request_duration_seconds_count{site=\"files.test\"})",
        |v| v == 5.0,
    );
    prometheus.wait_value("tlsfront_handshakes_total{kind=\"resumed\"}", |v| v >= 1.0);
    prometheus.wait_value(
        "sum(tlsfront_backend_errors_total{site=\"backend.test\",kind=\"refused\"})",
        |v| v >= 1.0,
    );
    prometheus.wait_value(
        "sum(tlsfront_connections_total{site=\"files.test\"})",
        |v| v >= 3.0,
    );
    prometheus.wait_value("sum(tlsfront_sent_bytes_total{site=\"files.test\"})", |v| {
        v > 0.0
    });
    // Every site's certificate, expiring in the future.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    for site in ["files.test", "backend.test"] {
        prometheus.wait_value(
            &format!("min(tlsfront_certificate_expiry_timestamp_seconds{{site=\"{site}\"}})"),
            |v| v > now,
        );
    }
    prometheus.wait_value("tlsfront_build_info", |v| v == 1.0);
    prometheus.wait_value("tlsfront_ticket_key_age_seconds", |v| v >= 0.0);
    // What operators look for beside the counters above.
    prometheus.wait_value("process_open_fds", |v| v >= 3.0);
    prometheus.wait_value("process_start_time_seconds", |v| {
        v <= now && v > now - 3600.0
    });
    prometheus.wait_value("sum(tlsfront_handshake_duration_seconds_count)", |v| {
        v >= 4.0
    });
    prometheus.wait_value("sum(tlsfront_tls_negotiated_total)", |v| v >= 4.0);
    prometheus.wait_value("tlsfront_connections_limit", |v| v > 0.0);
    prometheus.wait_value("tlsfront_config_last_reload_successful", |v| v == 1.0);
    // Known failure reasons are there at zero before any happens.
    prometheus.wait_value(
        "tlsfront_handshake_failures_total{reason=\"hello_unrecognized_name\"}",
        |v| v == 0.0,
    );

    // A reload without the backend site: its certificate's series goes,
    // the other site's stays.
    let config = dir.path().join("tlsfront.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let files_only = &text[..text.rfind("[[site]]").unwrap()];
    std::fs::write(&config, files_only).unwrap();
    let loaded = prometheus.wait_value(
        "tlsfront_config_last_reload_success_timestamp_seconds",
        |v| v > 0.0,
    );
    server.reload();
    let out = server.wait_for_output("reloaded", 1);
    assert!(out.contains(": 1 site"), "{out}");
    prometheus.wait_value("tlsfront_reloads_total", |v| v == 1.0);
    prometheus.wait_value(
        "tlsfront_config_last_reload_success_timestamp_seconds",
        |v| v > loaded,
    );
    prometheus.wait(
        "tlsfront_certificate_expiry_timestamp_seconds{site=\"backend.test\"}",
        |r| r.is_empty(),
    );
    prometheus.wait_value(
        "count(tlsfront_certificate_expiry_timestamp_seconds{site=\"files.test\"})",
        |v| v == 1.0,
    );
    // A refused reload: the last one failed, the time stays.
    std::fs::write(&config, format!("{files_only}\n[[site]]\nnames = 3\n")).unwrap();
    server.reload();
    prometheus.wait_value("tlsfront_config_last_reload_successful", |v| v == 0.0);
    prometheus.wait_value("tlsfront_errors_total{kind=\"reload_failed\"}", |v| {
        v == 1.0
    });
    prometheus.wait_value("tlsfront_reloads_total", |v| v == 1.0);
    drop(prometheus);

    // The shutdown summary is unchanged, and counts the same.
    let (_, report) = server.stop();
    assert!(report.contains("responses: 200 3, 404 2"), "{report}");
    assert!(report.contains("backend_refused 1"), "{report}");
}

#[test]
fn healthz_turns_503_while_draining() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::run(&two_sites(dir.path()), &[]);
    let addr = admin_addr(&server);
    assert_eq!(admin(&addr, "GET", "/healthz").0, "200");
    // A connection that has not sent its request yet holds the drain open
    // (its first request is still answered): it sends it once the test has
    // seen the 503 (the file appears).
    let port = server.port;
    let go = dir.path().join("go");
    let go_in = go.clone();
    let holder = std::thread::spawn(move || {
        s_client(
            port,
            &["-servername", "files.test"],
            &[
                Step::WaitFor("Verify return code"),
                Step::WaitForFile(&go_in),
                Step::Send(
                    b"GET /id.txt HTTP/1.1\r\nHost: files.test\r\nConnection: close\r\n\r\n",
                ),
                Step::WaitFor("files"),
            ],
            Duration::from_secs(40),
        )
    });
    // The holder's handshake is done (the site counts it) before the drain.
    scrape_until(&addr, "the holder's connection", |t| {
        sample(t, "tlsfront_site_connections_active{site=\"files.test\"}") == Some(1.0)
    });
    server.signal(rustix::process::Signal::TERM);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = admin(&addr, "GET", "/healthz");
    while seen.0 != "503" && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        seen = admin(&addr, "GET", "/healthz");
    }
    assert_eq!(seen, ("503".into(), "draining".into()));
    // Metrics are still answered while draining.
    let (status, body) = admin(&addr, "GET", "/metrics");
    assert_eq!(status, "200");
    assert!(body.contains("tlsfront_build_info{"), "{body}");
    std::fs::write(&go, "go").unwrap();
    let (out, _, _) = holder.join().unwrap();
    assert!(out.contains("HTTP/1.1 200"), "{out}");
    assert!(server.wait_exit(Duration::from_secs(20)).is_some());
}

#[test]
fn a_bad_admin_address_names_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("bad.toml");
    std::fs::write(&config, "root = \".\"\n\nadmin = \"localhost\"\n").unwrap();
    let out = std::process::Command::new(common::BIN)
        .args(["run", "--config"])
        .arg(&config)
        .env("XDG_DATA_HOME", dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 3, setting admin"), "{err}");
    assert!(err.contains("127.0.0.1:9101"), "{err}");
}

/// Is `pid` a live process (not gone, not a zombie)?
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, r)| !r.starts_with(" Z"))
    })
}

#[test]
fn an_upgrade_hands_the_admin_address_on() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    let admin_port = free_port();
    let config = dir.path().join("tlsfront.toml");
    std::fs::write(
        &config,
        format!(
            "admin = \"127.0.0.1:{admin_port}\"\nroot = {:?}\n",
            root.display().to_string()
        ),
    )
    .unwrap();
    let mut server = Server::run(&config, &[]);
    let addr = format!("127.0.0.1:{admin_port}");
    assert_eq!(admin_addr(&server), addr);
    assert_eq!(admin(&addr, "GET", "/healthz").0, "200");
    server.signal(rustix::process::Signal::USR2);
    let out = server.wait_for_output("upgraded: new process ", 1);
    let new: u32 = out
        .lines()
        .find_map(|l| l.strip_prefix("upgraded: new process "))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no upgrade in {out}"));
    // The new process took the admin socket (it could not have bound it
    // while the old one held it) and answers on it once the old is gone.
    assert!(
        out.contains(&format!("metrics on http://{addr}/metrics")),
        "{out}"
    );
    assert!(server.wait_exit(Duration::from_secs(20)).is_some());
    assert_eq!(admin(&addr, "GET", "/healthz"), ("200".into(), "ok".into()));
    let (status, text) = admin(&addr, "GET", "/metrics");
    assert_eq!(status, "200");
    assert!(text.contains("tlsfront_build_info{"), "{text}");
    let pid = rustix::process::Pid::from_raw(new as i32).unwrap();
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    let deadline = Instant::now() + Duration::from_secs(30);
    while alive(new) {
        assert!(
            Instant::now() < deadline,
            "process {new} did not stop within 30 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The metrics with `Accept: accept`, after a few handshakes and
/// requests, written to a file in `dir`; the content type.
fn scrape_to(addr: &str, accept: &str, file: &Path) -> String {
    let (kind, text) = scrape(addr, Some(accept));
    std::fs::write(file, text).unwrap();
    kind
}

#[test]
fn both_formats_pass_promtool() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::run(&two_sites(dir.path()), &[]);
    let addr = admin_addr(&server);
    assert_eq!(
        get(server.port, "files.test", &["/id.txt", "/nope"]),
        ["200", "404"]
    );
    // Every kind of family with series: a backend failure, a resumption.
    assert_ne!(get(server.port, "backend.test", &["/"]), ["200"]);
    let ticket = dir.path().join("session.pem");
    assert!(!session(server.port, "files.test", Some(&ticket), None));
    assert!(session(server.port, "files.test", None, Some(&ticket)));
    // Counted once the server has seen the client's Finished.
    scrape_until(&addr, "the backend failure and the resumption", |t| {
        sample(
            t,
            "tlsfront_backend_errors_total{site=\"backend.test\",kind=\"refused\"}",
        ) == Some(1.0)
            && sample(t, "tlsfront_handshakes_total{kind=\"resumed\"}") == Some(1.0)
    });

    // The text format 0.0.4, to what asks for it (and to what asks for
    // nothing in particular), linted by promtool: no issue at all.
    let text = dir.path().join("metrics.txt");
    for accept in ["text/plain;version=0.0.4", "*/*"] {
        let kind = scrape_to(&addr, accept, &text);
        assert_eq!(kind, "text/plain; version=0.0.4; charset=utf-8");
        let out = tool("promtool")
            .args(["check", "metrics"])
            .stdin(std::fs::File::open(&text).unwrap())
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success() && said.trim().is_empty(), "{said}");
    }
    let body = std::fs::read_to_string(&text).unwrap();
    assert!(
        body.contains("# TYPE tlsfront_responses_total counter\n")
            && body.contains("tlsfront_responses_total{site=\"files.test\",status=\"404\"} 1\n")
            && !body.contains("# EOF"),
        "{body}"
    );

    // OpenMetrics, read by promtool's strict OpenMetrics parser (its
    // backfill, which wants a timestamp on every sample: given here).
    let om = dir.path().join("metrics.om");
    let kind = scrape_to(&addr, "application/openmetrics-text; version=1.0.0", &om);
    assert_eq!(
        kind,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let stamped: String = std::fs::read_to_string(&om)
        .unwrap()
        .lines()
        .map(|l| {
            if l.starts_with('#') {
                format!("{l}\n")
            } else {
                format!("{l} {now}\n")
            }
        })
        .collect();
    assert!(stamped.ends_with("# EOF\n"), "{stamped}");
    std::fs::write(&om, stamped).unwrap();
    let out = tool("promtool")
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&om)
        .arg(dir.path().join("blocks"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = server.stop();
}

/// The value of the sample line starting with `series ` in `text`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.parse().ok())
}

/// Scrape (text format) until `ok` holds for the text (within WAIT); the text.
fn scrape_until(addr: &str, what: &str, ok: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + common::WAIT;
    loop {
        let (_, text) = scrape(addr, None);
        if ok(&text) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "no {what} within {:?}:\n{text}",
            common::WAIT
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn handshakes_count_what_they_negotiated() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::run(&two_sites(dir.path()), &[]);
    let addr = admin_addr(&server);
    let port = server.port;
    let hello = |args: &[&str]| {
        let mut all = vec!["-servername", "files.test"];
        all.extend_from_slice(args);
        let (out, err, _) = s_client(
            port,
            &all,
            &[Step::WaitFor("Verify return code")],
            Duration::from_secs(20),
        );
        assert!(out.contains("New, TLSv1"), "no handshake: {out}{err}");
        out
    };
    hello(&[
        "-tls1_3",
        "-ciphersuites",
        "TLS_CHACHA20_POLY1305_SHA256",
        "-groups",
        "P-256",
    ]);
    // P-256 too: in TLS 1.2 the groups also name the curves the client
    // takes an ECDSA certificate on.
    let client_saw = hello(&["-tls1_2", "-groups", "X25519:P-256"]);
    assert!(
        client_saw.contains("Server Temp Key: X25519"),
        "{client_saw}"
    );
    let series13 = "tlsfront_tls_negotiated_total{version=\"TLSv1.3\",\
                    cipher_suite=\"TLS13_CHACHA20_POLY1305_SHA256\",group=\"secp256r1\"}";
    let text = scrape_until(&addr, "two handshakes", |t| {
        sample(t, "tlsfront_handshakes_total{kind=\"full\"}") == Some(2.0)
    });
    assert_eq!(sample(&text, series13), Some(1.0), "{text}");
    let tls12: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("tlsfront_tls_negotiated_total{version=\"TLSv1.2\""))
        .collect();
    assert!(
        tls12.len() == 1
            && tls12[0].contains("cipher_suite=\"TLS_ECDHE_")
            && tls12[0].ends_with("group=\"X25519\"} 1"),
        "{text}"
    );
    assert_eq!(
        sample(
            &text,
            "tlsfront_handshake_duration_seconds_count{kind=\"full\"}"
        ),
        Some(2.0),
        "{text}"
    );
    let took = sample(
        &text,
        "tlsfront_handshake_duration_seconds_sum{kind=\"full\"}",
    );
    assert!(took.is_some_and(|s| s > 0.0 && s < 40.0), "{text}");

    // The process's open descriptors as the kernel lists them (the
    // server's own fd count moves little while it is idle: listeners,
    // epoll, eventfds, the admin socket).
    let fds = std::fs::read_dir(format!("/proc/{}/fd", server.pid()))
        .unwrap()
        .count() as f64;
    let said = sample(&text, "process_open_fds").unwrap();
    assert!(said >= 5.0 && (said - fds).abs() <= 8.0, "{said} vs {fds}");
    assert!(sample(&text, "process_max_fds").unwrap() >= said);
    let rss = sample(&text, "process_resident_memory_bytes").unwrap();
    assert!(rss > 1e6 && rss < 1e10, "{rss}");
    let _ = server.stop();
}

/// `/healthz` and `/metrics` answered at once (curl's own bound is the
/// safety net) while `idle` connections that send nothing and a client
/// that sent half a request are open to the admin port.
fn admin_answers_beside(addr: &str, idle: &[std::net::TcpStream]) {
    assert!(!idle.is_empty());
    assert_eq!(admin(addr, "GET", "/healthz"), ("200".into(), "ok".into()));
    let (status, body) = admin(addr, "GET", "/metrics");
    assert_eq!(status, "200");
    assert!(body.contains("tlsfront_build_info{"), "{body}");
}

#[test]
fn idle_admin_connections_do_not_silence_it() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::run(&two_sites(dir.path()), &[]);
    let addr = admin_addr(&server);
    let connect = || std::net::TcpStream::connect(&addr).unwrap();
    let mut idle: Vec<std::net::TcpStream> = (0..64).map(|_| connect()).collect();
    let mut slow = connect();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: admin\r\n")
        .unwrap();
    idle.push(slow);
    admin_answers_beside(&addr, &idle);
    // It answered from a thread of its own (not the main thread's, which
    // does reloads and upgrades): `top -H` shows it.
    let threads: Vec<String> = std::fs::read_dir(format!("/proc/{}/task", server.pid()))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|c| c.trim().to_string())
        .collect();
    assert!(threads.iter().any(|t| t == "admin"), "{threads:?}");
    // More than the listener keeps open: the oldest idle ones make room.
    idle.extend((0..300).map(|_| connect()));
    admin_answers_beside(&addr, &idle);
    let _ = server.stop();
}

#[test]
fn admin_answers_while_a_reload_is_stuck() {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let config = two_sites(dir.path());
    // As root, tlsfront reads only regular files (a FIFO is refused, not
    // waited on): the server runs as nobody here, which reads as it is told.
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let as_nobody = rustix::process::geteuid().is_root();
    if as_nobody {
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(&data, Some(65534), Some(65534)).unwrap();
    }
    let xdg = format!("XDG_DATA_HOME={}", data.display());
    let wrapper: &[&str] = if as_nobody {
        &[
            "env",
            &xdg,
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
        ]
    } else {
        &[]
    };
    let server = Server::spawn_via(
        wrapper,
        &["run", "--config", &config.display().to_string()],
        &[],
    );
    let addr = admin_addr(&server);
    // A new site whose certificate is a FIFO: the reload (on the main
    // thread, which also handles signals) reads it and waits there until
    // the test writes the certificate.
    let (cert, key) = (dir.path().join("slow.pem"), dir.path().join("slow.key"));
    let made = tool("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:P-256", "-nodes", "-days", "30"])
        .args([
            "-subj",
            "/CN=slow.test",
            "-addext",
            "subjectAltName=DNS:slow.test",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let pem = std::fs::read(&cert).unwrap();
    std::fs::remove_file(&cert).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &cert,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from(0o644),
        0,
    )
    .unwrap();
    std::fs::set_permissions(&cert, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "[[site]]\nnames = [\"slow.test\"]\nroot = {:?}\ncert = {:?}\nkey = {:?}\n",
        dir.path().join("root").display().to_string(),
        cert.display().to_string(),
        key.display().to_string(),
    ));
    std::fs::write(&config, text).unwrap();
    server.reload();
    // The write end opens (without blocking) once the reload has opened
    // the read end: the reload is waiting for the certificate now.
    let writer = || {
        std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(&cert)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut fifo = loop {
        match writer() {
            Ok(f) => break f,
            Err(e) => assert!(
                Instant::now() < deadline,
                "the reload did not open the certificate in 20 s: {e}"
            ),
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    admin_answers_beside(&addr, &[std::net::TcpStream::connect(&addr).unwrap()]);
    assert!(!server.output().contains("reloaded"), "{}", server.output());
    // Let the reload go on; it may open the file again.
    fifo.write_all(&pem).unwrap();
    drop(fifo);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !server.output().contains("reloaded") {
        if let Ok(mut again) = writer() {
            let _ = again.write_all(&pem);
        }
        assert!(
            Instant::now() < deadline,
            "no reload in 20 s: {}",
            server.output()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = server.wait_for_output("reloaded", 1);
    assert!(out.contains(": 3 sites"), "{out}");
    let _ = server.stop();
}

/// A config with the admin listener and `n` sites, each with a root of its
/// own under `dir` (the first the one the smaller configs have too) and,
/// with `logs`, an access log of its own.
fn many_sites(dir: &Path, n: usize, logs: bool) -> String {
    let mut text = String::from("admin = \"127.0.0.1:0\"\n");
    for i in 0..n {
        let root = dir.join(format!("root{i}"));
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("id.txt"), format!("site {i}\n")).unwrap();
        text += &format!(
            "[[site]]\nnames = [\"s{i}.test\"]\nroot = {:?}\n",
            root.display().to_string()
        );
        if logs {
            let log = dir.join(format!("access{i}.log"));
            text += &format!("access_log = {:?}\n", log.display().to_string());
        }
    }
    text
}

#[test]
fn a_reload_recomputes_the_connection_limit() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tlsfront.toml");
    std::fs::write(&config, many_sites(dir.path(), 1, false)).unwrap();
    let cfg = config.display().to_string();
    // One worker under an open-file limit of 1024: an eighth for the
    // open-file cache (128), the reserve (64) and one root; 9 descriptors
    // per HTTP/2 connection: (1024 - 64 - 128 - 1) / 9.
    let server = Server::spawn_via(
        &["prlimit", "--nofile=1024:1024", "--"],
        &["run", "--config", &cfg],
        &["--workers", "1"],
    );
    assert!(
        server
            .startup
            .iter()
            .any(|l| l.starts_with("connections: up to 92 per worker")),
        "{:?}",
        server.startup
    );
    let addr = admin_addr(&server);
    let (_, text) = scrape(&addr, None);
    assert_eq!(
        sample(&text, "tlsfront_connections_limit"),
        Some(92.0),
        "{text}"
    );
    // 100 sites, each with its own root (the first kept) and access log:
    // 99 more roots and 100 logs held, so (1024 - 64 - 128 - 100 - 100) / 9.
    std::fs::write(&config, many_sites(dir.path(), 100, true)).unwrap();
    server.reload();
    server.wait_for_output("reloaded ", 1);
    let out = server.wait_for_output("connections: up to 70 per worker", 1);
    assert!(out.contains("reloaded"), "{out}");
    let (_, text) = scrape(&addr, None);
    assert_eq!(
        sample(&text, "tlsfront_connections_limit"),
        Some(70.0),
        "{text}"
    );
    // And it serves the new sites.
    assert_eq!(get(server.port, "s42.test", &["/id.txt"]), ["200"]);
    // Back to one site, once that connection is over (it holds the sites
    // it started with): the roots and logs let go, the limit back up.
    scrape_until(&addr, "no connection open", |t| {
        sample(t, "tlsfront_connections_active") == Some(0.0)
    });
    std::fs::write(&config, many_sites(dir.path(), 1, false)).unwrap();
    server.reload();
    server.wait_for_output("reloaded ", 2);
    let text = scrape_until(&addr, "the limit back up", |t| {
        sample(t, "tlsfront_connections_limit") == Some(92.0)
    });
    assert!(text.contains("tlsfront_connections_limit 92"), "{text}");
    assert_eq!(get(server.port, "s0.test", &["/id.txt"]), ["200"]);
    let _ = server.stop();
}

#[test]
fn a_set_connection_limit_that_a_reload_outgrows_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("tlsfront.toml");
    // The table after the top-level key many_sites starts with.
    let with_set = |n, logs| {
        many_sites(dir.path(), n, logs).replacen('\n', "\n[limits]\nconnections = 80\n", 1)
    };
    std::fs::write(&config, with_set(1, false)).unwrap();
    let cfg = config.display().to_string();
    // 80 fit beside one root (92 would); beside 100 roots and 100 logs
    // (70) they do not.
    let server = Server::spawn_via(
        &["prlimit", "--nofile=1024:1024", "--"],
        &["run", "--config", &cfg],
        &["--workers", "1"],
    );
    assert!(!server.log().contains(" WARN "), "{}", server.log());
    let addr = admin_addr(&server);
    std::fs::write(&config, with_set(100, true)).unwrap();
    server.reload();
    let log = server.wait_for_log("the open-file limit is 1024");
    assert!(log.contains("[limits] connections"), "{log}");
    server.wait_for_output("reloaded ", 1);
    // The limit that was set stays: the warning is the operator's cue.
    let (_, text) = scrape(&addr, None);
    assert_eq!(
        sample(&text, "tlsfront_connections_limit"),
        Some(80.0),
        "{text}"
    );
    assert_eq!(get(server.port, "s7.test", &["/id.txt"]), ["200"]);
    let _ = server.stop();
}
