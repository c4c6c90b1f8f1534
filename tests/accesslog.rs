//! The access log through the real binary and real clients: curl's
//! request in nginx's combined format field by field, the JSON form with
//! the TLS fields (a resumed openssl session logged as resumed), a proxied
//! connection's line, every line written when SIGTERM follows the requests
//! at once, and real logrotate rotating the file (SIGUSR1 in postrotate)
//! while requests run: no line lost, none doubled, the new file used after
//! each rotation; and a full disk (a small tmpfs) leaving whole lines only.

mod common;

use common::{s_client, tool, Server, Step};
use rustix::process::Signal;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The lines of `path` (none if it does not exist).
fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Wait until `path` holds at least `n` lines (at most [`common::WAIT`]:
/// the callers check the count); its lines then.
fn wait_lines(path: &Path, n: usize) -> Vec<String> {
    let deadline = Instant::now() + common::WAIT;
    loop {
        let l = lines(path);
        if l.len() >= n || Instant::now() > deadline {
            return l;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A combined line split into its fields: address, user, time, request,
/// status, bytes, referer, user agent, and what follows.
fn combined_fields(line: &str) -> Vec<String> {
    let mut f = Vec::new();
    let (addr, rest) = line
        .split_once(" - - [")
        .unwrap_or_else(|| panic!("{line}"));
    f.push(addr.to_string());
    let (time, rest) = rest.split_once("] \"").unwrap();
    f.push(time.to_string());
    let (request, rest) = rest.split_once("\" ").unwrap();
    f.push(request.to_string());
    let mut words = rest.splitn(3, ' ');
    f.push(words.next().unwrap().to_string());
    f.push(words.next().unwrap().to_string());
    let rest = words.next().unwrap();
    let rest = rest.strip_prefix('"').unwrap();
    let (referer, rest) = rest.split_once("\" \"").unwrap();
    f.push(referer.to_string());
    let (ua, rest) = rest.split_once('"').unwrap();
    f.push(ua.to_string());
    f.push(rest.trim_start().to_string());
    f
}

#[test]
fn combined_lines_match_nginx_field_by_field() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let server = Server::start(&["--access-log", log.to_str().unwrap()]);
    let out = server.curl(&[
        "-o",
        "/dev/null",
        "-A",
        "agent \"quoted\" 1.0",
        "-e",
        "https://referer.test/page",
        &server.url("/hello.txt?q=1"),
    ]);
    assert!(out.status.success());
    // No request: no flush, so the line arrives by the one-second flush.
    let l = wait_lines(&log, 1);
    assert_eq!(l.len(), 1, "{l:?}");
    let f = combined_fields(&l[0]);
    assert_eq!(f[0], "127.0.0.1");
    assert!(f[1].ends_with(" +0000") && f[1].len() == 26, "{}", f[1]);
    assert_eq!(f[2], "GET /hello.txt?q=1 HTTP/1.1");
    assert_eq!(f[3], "200");
    assert_eq!(f[4], "12");
    assert_eq!(f[5], "https://referer.test/page");
    assert_eq!(f[6], "agent \\x22quoted\\x22 1.0");
    assert_eq!(f[7], "", "combined ends with the user agent: {}", l[0]);
    // A 404, and a HEAD: no body bytes.
    assert_eq!(server.status("/nope", &[]), "404");
    assert_eq!(server.status("/hello.txt", &["-I"]), "200");
    // Two workers: lines of different connections come in the order their
    // workers' buffers were written.
    let l = wait_lines(&log, 3);
    let find = |request: &str| {
        l.iter()
            .map(|line| combined_fields(line))
            .find(|f| f[2] == request)
            .unwrap_or_else(|| panic!("no {request}: {l:?}"))
    };
    let f = find("GET /nope HTTP/1.1");
    assert_eq!(f[3], "404");
    assert!(f[4].parse::<u64>().unwrap() > 0);
    assert_eq!(f[5], "-");
    let f = find("HEAD /hello.txt HTTP/1.1");
    assert_eq!((f[3].as_str(), f[4].as_str()), ("200", "0"));
    let (status, _) = server.stop();
    assert!(status.success());
}

#[test]
fn tls_format_appends_the_tls_fields() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("tls.log");
    let server = Server::start(&[
        "--access-log",
        log.to_str().unwrap(),
        "--access-log-format",
        "tls",
    ]);
    let url = format!("https://localhost:{}/hello.txt", server.port);
    let out = server.curl(&[
        "-o",
        "/dev/null",
        "--resolve",
        &format!("localhost:{}:127.0.0.1", server.port),
        &url,
    ]);
    assert!(out.status.success(), "{out:?}");
    let (status, _) = server.stop();
    assert!(status.success());
    let l = lines(&log);
    let line = l.last().unwrap();
    let f = combined_fields(line);
    let tls: Vec<&str> = f[7].split(' ').collect();
    assert_eq!(tls.len(), 7, "{line}");
    assert_eq!(tls[0], "TLSv1.3");
    assert!(tls[1].starts_with("TLS_"), "{line}");
    // curl on OpenSSL 3.0: no ML-KEM, X25519 first.
    assert_eq!(tls[2], "X25519", "{line}");
    assert_eq!(tls[3], "\"localhost\"");
    assert_eq!(tls[4], ".");
    let path = if common::ktls_expected() {
        "ktls"
    } else {
        "userspace"
    };
    assert_eq!(tls[5], path);
    let secs: f64 = tls[6].parse().unwrap();
    assert!((0.0..10.0).contains(&secs) && tls[6].split('.').nth(1).unwrap().len() == 3);
}

#[test]
fn json_lines_carry_every_field_and_resumption() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("json.log");
    let server = Server::start(&[
        "--access-log",
        log.to_str().unwrap(),
        "--access-log-format",
        "json",
    ]);
    let sess = dir.path().join("sess.pem");
    let request: &[u8] =
        b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nUser-Agent: s_client\r\n\r\n";
    for resume in [false, true] {
        let mut args = vec!["-tls1_2", "-servername", "localhost", "-ign_eof"];
        let s = sess.to_str().unwrap();
        args.extend(if resume {
            ["-sess_in", s]
        } else {
            ["-sess_out", s]
        });
        let steps = [Step::Send(request), Step::WaitFor("hello world")];
        let (out, err, _) = s_client(server.port, &args, &steps, Duration::from_secs(3));
        assert!(out.contains("hello world"), "{out}{err}");
        assert_eq!(out.contains("Reused, TLSv1"), resume, "{out}");
    }
    let l = wait_lines(&log, 2);
    assert_eq!(l.len(), 2, "{l:?}");
    for (i, line) in l.iter().enumerate() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["remote_addr"], "127.0.0.1");
        assert_eq!(v["request"], "GET /hello.txt HTTP/1.1");
        assert_eq!(v["status"], 200);
        assert_eq!(v["body_bytes_sent"], 12);
        assert_eq!(v["http_user_agent"], "s_client");
        assert!(v["http_referer"].is_null());
        assert_eq!(v["ssl_protocol"], "TLSv1.2");
        assert!(
            v["ssl_cipher"].as_str().unwrap().starts_with("ECDHE-"),
            "{line}"
        );
        assert_eq!(v["ssl_server_name"], "localhost");
        assert_eq!(v["ssl_session_reused"], i == 1, "{line}");
        // openssl 3.0 offers X25519 first; a TLS 1.2 resumption exchanges
        // no key.
        assert_eq!(
            v["ssl_curve"],
            if i == 0 { "X25519" } else { "-" },
            "{line}"
        );
        let path = if common::ktls_expected() {
            "ktls"
        } else {
            "userspace"
        };
        assert_eq!(v["data_path"], path);
        assert!(v["request_time"].as_f64().unwrap() >= 0.0);
        assert!(v["time"].as_str().unwrap().ends_with("+00:00"));
    }
    let (status, _) = server.stop();
    assert!(status.success());
}

#[test]
fn a_proxied_connection_is_one_line_when_it_ends() {
    // An echo backend.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let backend = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for mut c in l.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                c.set_read_timeout(Some(Duration::from_secs(10))).ok();
                let mut b = [0u8; 1024];
                while let Ok(n) = c.read(&mut b) {
                    if n == 0 || c.write_all(&b[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("proxy.log");
    let server = Server::proxy(&backend, &["--access-log", log.to_str().unwrap()]);
    let steps = [Step::Send(b"ping-pong\n"), Step::WaitFor("ping-pong")];
    let (out, err, _) = s_client(
        server.port,
        &["-servername", "p.test", "-quiet"],
        &steps,
        Duration::from_secs(3),
    );
    assert!(out.contains("ping-pong"), "{out}{err}");
    let l = wait_lines(&log, 1);
    assert_eq!(l.len(), 1, "{l:?}");
    let line = &l[0];
    let (addr, rest) = line.split_once(" [").unwrap();
    assert_eq!(addr, "127.0.0.1");
    let (_, rest) = rest.split_once("] ").unwrap();
    let w: Vec<&str> = rest.split(' ').collect();
    assert_eq!(w[0], "\"*\"", "{line}");
    assert_eq!(w[1], "done", "{line}");
    assert_eq!((w[2], w[3]), ("10", "10"), "{line}");
    assert!(w[4].parse::<f64>().is_ok(), "{line}");
    assert_eq!(w[5], format!("\"{backend}\""));
    assert_eq!(w[8], "X25519", "{line}");
    assert_eq!(w[9], "\"p.test\"");
    let (status, _) = server.stop();
    assert!(status.success());
}

#[test]
fn sigterm_right_after_the_requests_loses_no_line() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("term.log");
    let mut server = Server::start(&["--access-log", log.to_str().unwrap(), "--workers", "2"]);
    const N: usize = 40;
    // Keep-alive requests on one connection, and single ones on others.
    let out = server.curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}\\n",
        &server.url(&format!("/hello.txt?[1-{}]", N - 4)),
    ]);
    let mut ok = String::from_utf8_lossy(&out.stdout).matches("200").count();
    for _ in 0..4 {
        ok += usize::from(server.status("/hello.txt", &[]) == "200");
    }
    assert_eq!(ok, N);
    // At once: the lines are still in the workers' buffers.
    server.signal(Signal::TERM);
    let exit = server.wait_exit(common::WAIT);
    assert!(exit.is_some_and(|s| s.success()), "{exit:?}");
    assert_eq!(lines(&log).len(), N);
}

/// A logrotate configuration for `log`: keep 5, create the new file,
/// SIGUSR1 afterwards.
fn logrotate_conf(dir: &Path, log: &Path, pid: u32) -> PathBuf {
    let conf = dir.join("logrotate.conf");
    std::fs::write(
        &conf,
        format!(
            "{} {{\n  rotate 5\n  create\n  missingok\n  postrotate\n    kill -USR1 {pid}\n  endscript\n}}\n",
            log.display()
        ),
    )
    .unwrap();
    conf
}

#[test]
fn logrotate_while_requests_run_loses_no_line() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("rot.log");
    let mut server = Server::start(&["--access-log", log.to_str().unwrap(), "--workers", "2"]);
    let conf = logrotate_conf(dir.path(), &log, server.pid());
    let state = dir.path().join("logrotate.state");

    // Clients: keep-alive batches, one after another, until told to stop.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..2 {
        let stop = stop.clone();
        let url = server.url(&format!("/hello.txt?c={c}&n=[1-50]"));
        let ca = server.ca();
        clients.push(std::thread::spawn(move || {
            let mut got = 0usize;
            // Bounded: at most 200 batches.
            for _ in 0..200 {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let out = tool("curl")
                    .arg("--cacert")
                    .arg(&ca)
                    .args(["-sS", "--max-time", "60", "-o", "/dev/null"])
                    .args(["-w", "%{http_code}\\n", &url])
                    .output()
                    .unwrap();
                got += String::from_utf8_lossy(&out.stdout).matches("200").count();
            }
            got
        }));
    }
    let mut rotations = 0;
    for _ in 0..4 {
        // The scenario, not a wait: let the clients' requests run a while
        // between rotations.
        std::thread::sleep(Duration::from_millis(700));
        // The file exists once the first lines were written.
        wait_lines(&log, 1);
        let out = tool("logrotate")
            .args(["-f", "-s"])
            .arg(&state)
            .arg(&conf)
            .output()
            .unwrap();
        assert!(out.status.success(), "logrotate: {out:?}");
        rotations += 1;
        let said = server.wait_for_output(
            "SIGUSR1: reopened 1 access log file(s), 0 failed",
            rotations,
        );
        assert_eq!(
            said.matches("SIGUSR1: reopened 1").count(),
            rotations,
            "{said}"
        );
        // The new file gets the lines written from now on.
        let fresh = wait_lines(&log, 1);
        assert!(
            !fresh.is_empty(),
            "no line in the new file after rotation {rotations}"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let got: usize = clients.into_iter().map(|c| c.join().unwrap()).sum();
    server.signal(Signal::TERM);
    let exit = server.wait_exit(common::WAIT);
    assert!(exit.is_some_and(|s| s.success()), "{exit:?}");

    let mut total = lines(&log).len();
    let mut files = 1;
    for i in 1..=5 {
        let p = PathBuf::from(format!("{}.{i}", log.display()));
        if p.exists() {
            files += 1;
            total += lines(&p).len();
        }
    }
    assert_eq!(files, 5, "4 rotations: the file and 4 rotated ones");
    assert!(got > 0);
    assert_eq!(
        total, got,
        "lines across all files vs responses the clients got"
    );
}

/// `upgraded: new process PID` from the old process's output.
fn new_pid(output: &str) -> Option<u32> {
    output
        .lines()
        .find_map(|l| l.strip_prefix("upgraded: new process "))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
}

/// Stop the new process of an upgrade (not our child), within
/// [`common::WAIT`].
fn stop_pid(pid: u32) {
    let p = rustix::process::Pid::from_raw(pid as i32).unwrap();
    let _ = rustix::process::kill_process(p, Signal::TERM);
    let deadline = Instant::now() + common::WAIT;
    let alive = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, r)| !r.starts_with(" Z"))
        })
    };
    while alive() {
        if Instant::now() > deadline {
            let _ = rustix::process::kill_process(p, Signal::KILL);
            panic!(
                "process {pid} did not stop within {:?} of SIGTERM",
                common::WAIT
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_upgrade_loses_no_line() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("up.log");
    let mut server = Server::start(&["--access-log", log.to_str().unwrap(), "--workers", "2"]);
    let batch = |server: &Server, tag: &str| {
        let out = server.curl(&[
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}\\n",
            &server.url(&format!("/hello.txt?{tag}=[1-30]")),
        ]);
        String::from_utf8_lossy(&out.stdout).matches("200").count()
    };
    // Answered by the old process, whose lines are still buffered when
    // the upgrade begins.
    let before = batch(&server, "old");
    server.signal(Signal::USR2);
    let out = server.wait_for_output("upgraded: new process", 1);
    let new = new_pid(&out).unwrap_or_else(|| panic!("no upgrade announced: {out}"));
    let exit = server.wait_exit(common::WAIT);
    assert!(exit.is_some_and(|s| s.success()), "old process: {exit:?}");
    // The old process wrote its lines on its way out.
    assert_eq!(lines(&log).len(), before);
    let after = batch(&server, "new");
    stop_pid(new);
    assert_eq!((before, after), (30, 30));
    assert_eq!(lines(&log).len(), before + after);
}

#[test]
fn a_reload_takes_a_new_path_and_format() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("reload.toml");
    let root = common::fixture().root.display().to_string();
    // Relative paths: relative to the config file.
    std::fs::write(
        &config,
        format!("root = {root:?}\naccess_log = \"a.log\"\n"),
    )
    .unwrap();
    let server = Server::run(&config, &[]);
    assert_eq!(server.status("/hello.txt", &[]), "200");
    let a = dir.path().join("a.log");
    assert_eq!(wait_lines(&a, 1).len(), 1);
    std::fs::write(
        &config,
        format!("root = {root:?}\naccess_log = \"b.log\"\naccess_log_format = \"json\"\n"),
    )
    .unwrap();
    server.reload();
    let out = server.wait_for_output("reloaded ", 1);
    assert!(out.contains("reloaded "), "{out}");
    assert_eq!(server.status("/hello.txt?after", &[]), "200");
    let b = dir.path().join("b.log");
    let l = wait_lines(&b, 1);
    assert_eq!(l.len(), 1, "{l:?}");
    let v: serde_json::Value = serde_json::from_str(&l[0]).unwrap();
    assert_eq!(v["request"], "GET /hello.txt?after HTTP/1.1");
    let (status, _) = server.stop();
    assert!(status.success());
    assert_eq!(lines(&a).len(), 1, "nothing more in the old file");
}

/// A small tmpfs mounted on a temporary directory, unmounted (lazily: a
/// file may still be open) when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> SmallDisk {
        let dir = tempfile::tempdir().unwrap();
        let out = tool("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0755")])
            .arg("tlsfront-test")
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "mount: {out:?}");
        SmallDisk { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = tool("umount").arg("-l").arg(self.dir.path()).status();
    }
}

/// Every line of `text` is a JSON object, and `text` ends with a newline:
/// no fragment of a line anywhere.
fn assert_whole_json_lines(text: &str) -> usize {
    let tail: String = text
        .chars()
        .rev()
        .take(400)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "a fragment at the end: ...{tail:?}"
    );
    for line in text.lines() {
        let v: Result<serde_json::Value, _> = serde_json::from_str(line);
        assert!(
            v.as_ref().is_ok_and(|v| v["status"] == 200),
            "not a whole line: {line:?}"
        );
    }
    text.lines().count()
}

/// The access log on a full disk (a 64 KiB tmpfs, almost filled): the
/// write that finds it full is cut short by the kernel, and the fragment of
/// a line it leaves is cut off again, so every line in the file is whole
/// JSON; the warning counts the lines lost; once there is room again the
/// next lines start on a line of their own.
#[test]
fn a_full_disk_leaves_only_whole_lines() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    let disk = SmallDisk::mount("64k");
    let log = disk.path().join("access.log");
    // The disk full but for a few pages: a burst of lines crosses the end.
    let filler = disk.path().join("filler");
    std::fs::write(&filler, vec![b'.'; 48 * 1024]).unwrap();
    let server = Server::start(&[
        "--access-log",
        log.to_str().unwrap(),
        "--access-log-format",
        "json",
    ]);
    // Bursts of requests on one connection, each written by the worker as
    // one buffer, until a write fails.
    let burst = |n: usize, path: &str| {
        let url = server.url(path);
        let mut args = Vec::new();
        for _ in 0..n {
            args.extend(["-o", "/dev/null", url.as_str()]);
        }
        let out = server.curl(&args);
        assert!(out.status.success(), "{out:?}");
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !server.log().contains("line(s) lost") {
        assert!(
            Instant::now() < deadline,
            "no write failed: {}",
            server.log()
        );
        burst(40, "/hello.txt");
        // The burst is written within a second (FLUSH_EVERY); wait for
        // that write (the file grows, or the warning comes).
        let size = std::fs::metadata(&log).map_or(0, |m| m.len());
        let wait = Instant::now() + Duration::from_secs(10);
        while Instant::now() < wait
            && std::fs::metadata(&log).map_or(0, |m| m.len()) == size
            && !server.log().contains("line(s) lost")
        {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let warning = server.log();
    let lost: u64 = warning
        .lines()
        .find_map(|l| {
            l.split_once("): ")?
                .1
                .split_once(" line(s) lost")?
                .0
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no count of lost lines: {warning}"));
    assert!(lost > 0, "{warning}");
    assert!(warning.contains("No space left on device"), "{warning}");
    let full = std::fs::read_to_string(&log).unwrap();
    let kept = assert_whole_json_lines(&full);
    assert!(kept > 0, "{full}");

    // Room again: the next lines are whole and on lines of their own.
    std::fs::remove_file(&filler).unwrap();
    // (Lines of the last full burst that its worker wrote later, if any,
    // may come too: the new ones are told by their target.)
    burst(5, "/hello.txt?after");
    let deadline = Instant::now() + common::WAIT;
    let after = loop {
        let text = std::fs::read_to_string(&log).unwrap();
        let n = text.matches("GET /hello.txt?after ").count();
        if n >= 5 || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(after.matches("GET /hello.txt?after ").count(), 5);
    assert!(assert_whole_json_lines(&after) >= kept + 5);
    let (status, _) = server.stop();
    assert!(status.success());
    drop(disk);
}

#[test]
fn http2_requests_are_logged_as_nginx_logs_them() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let server = Server::start(&["--access-log", log.to_str().unwrap()]);
    let out = server.curl(&[
        "--http2",
        "-o",
        "/dev/null",
        "-A",
        "agent 2",
        "-e",
        "https://referer.test/h2",
        &server.url("/hello.txt?q=2"),
        "-o",
        "/dev/null",
        &server.url("/nope"),
    ]);
    assert!(out.status.success());
    let l = wait_lines(&log, 2);
    let f: Vec<Vec<String>> = l.iter().map(|line| combined_fields(line)).collect();
    // nginx writes `$request` of an HTTP/2 request with "HTTP/2.0".
    assert_eq!(f[0][2], "GET /hello.txt?q=2 HTTP/2.0", "{l:?}");
    assert_eq!((f[0][3].as_str(), f[0][4].as_str()), ("200", "12"));
    assert_eq!(f[0][5], "https://referer.test/h2");
    assert_eq!(f[0][6], "agent 2");
    assert_eq!(f[1][2], "GET /nope HTTP/2.0", "{l:?}");
    assert_eq!(f[1][3], "404");
}
