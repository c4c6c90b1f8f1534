//! The admin listener seen by a real Prometheus: `tlsfront run` with
//! `admin` and two sites (files, and a backend on a closed port), requests
//! through curl (200s and 404s), a resumed session (openssl s_client), then
//! a Prometheus scraping `/metrics` every second, asked through its HTTP
//! API until the counts made here appear, and until a reload that drops a
//! site drops its certificate's series. Also `/healthz` (200 while
//! serving, 503 once draining), the admin socket handed on in an upgrade,
//! and a bad `admin` address refused with where it was set.

mod common;

use common::{s_client, tool, Server, Step};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
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
    // A ticket comes after the handshake: wait for it. Whether a session
    // was resumed is printed with the handshake, before stdin is read.
    let steps = match out {
        Some(p) => vec![Step::WaitForFile(p)],
        None => vec![],
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

    /// Query until `ok` holds for the samples (fails after
    /// [`common::WAIT`]); the samples.
    fn wait(&self, expr: &str, ok: impl Fn(&[(serde_json::Value, f64)]) -> bool) -> Vec<f64> {
        let deadline = Instant::now() + common::WAIT;
        loop {
            let r = self.query(expr);
            if let Some(r) = r.as_deref().filter(|r| ok(r)) {
                return r.iter().map(|(_, v)| *v).collect();
            }
            assert!(
                Instant::now() < deadline,
                "Prometheus: {expr} gave {r:?} after {:?} ({})",
                common::WAIT,
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

    // The text Prometheus will read, as it reads it.
    let (status, text) = admin(&addr, "GET", "/metrics");
    assert_eq!(status, "200");
    assert!(text.ends_with("# EOF"), "{text}");

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

    // A reload without the backend site: its certificate's series goes,
    // the other site's stays.
    let config = dir.path().join("tlsfront.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let files_only = &text[..text.rfind("[[site]]").unwrap()];
    std::fs::write(&config, files_only).unwrap();
    server.reload();
    let out = server.wait_for_output("reloaded", 1);
    assert!(out.contains(": 1 site"), "{out}");
    prometheus.wait_value("tlsfront_reloads_total", |v| v == 1.0);
    prometheus.wait(
        "tlsfront_certificate_expiry_timestamp_seconds{site=\"backend.test\"}",
        |r| r.is_empty(),
    );
    prometheus.wait_value(
        "count(tlsfront_certificate_expiry_timestamp_seconds{site=\"files.test\"})",
        |v| v == 1.0,
    );
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
    // (its first request is still answered): it sends it once the test
    // has seen the 503.
    let port = server.port;
    let connected = Arc::new(AtomicBool::new(false));
    let checked = Arc::new(AtomicBool::new(false));
    let holder = {
        let (connected, checked) = (connected.clone(), checked.clone());
        std::thread::spawn(move || {
            s_client(
                port,
                &["-servername", "files.test"],
                &[
                    Step::WaitFor("Verify return code"),
                    Step::Set(&connected),
                    Step::Await(&checked),
                    Step::Send(
                        b"GET /id.txt HTTP/1.1\r\nHost: files.test\r\nConnection: close\r\n\r\n",
                    ),
                    Step::WaitFor("files"),
                ],
                Duration::from_secs(20),
            )
        })
    };
    common::wait_until(common::WAIT, "the holding connection's handshake", || {
        if connected.load(SeqCst) {
            Ok(())
        } else {
            Err("no handshake yet".into())
        }
    });
    server.signal(rustix::process::Signal::TERM);
    let seen = common::wait_until(
        common::WAIT,
        "/healthz to say 503 while draining",
        || match admin(&addr, "GET", "/healthz") {
            seen if seen.0 == "503" => Ok(seen),
            seen => Err(format!("{seen:?}")),
        },
    );
    checked.store(true, SeqCst);
    assert_eq!(seen, ("503".into(), "draining".into()));
    let (out, _, _) = holder.join().unwrap();
    assert!(out.contains("HTTP/1.1 200"), "{out}");
    assert!(server.wait_exit(common::WAIT).is_some());
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
    assert!(server.wait_exit(common::WAIT).is_some());
    assert_eq!(admin(&addr, "GET", "/healthz"), ("200".into(), "ok".into()));
    let (status, text) = admin(&addr, "GET", "/metrics");
    assert_eq!(status, "200");
    assert!(text.contains("tlsfront_build_info{"), "{text}");
    let pid = rustix::process::Pid::from_raw(new as i32).unwrap();
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    let deadline = Instant::now() + common::WAIT;
    while alive(new) {
        assert!(
            Instant::now() < deadline,
            "process {new} did not stop within {:?}",
            common::WAIT
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
