//! Upgrades without a refused connection: SIGUSR2 starts the executable
//! anew on the same listening sockets while clients keep coming (every
//! request answered, every body intact, a slow download in flight finished
//! by the old process, which then exits 0); a new executable that fails
//! leaves the old one serving; and systemd socket activation, through
//! systemd's own `systemd-socket-activate`.

mod common;

use common::{client_config, sha256, tool, Server};
use rustix::process::Signal;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MIB: usize = 1 << 20;

/// One HTTPS GET on a new connection (rustls, `Connection: close`): the
/// body of a 200, or what went wrong.
fn get(port: u16, config: &Arc<rustls::ClientConfig>, path: &str) -> Result<Vec<u8>, String> {
    let sock = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("connect: {e}"))?;
    sock.set_read_timeout(Some(common::WAIT)).unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(config.clone(), name).map_err(|e| e.to_string())?;
    let mut tls = rustls::StreamOwned::new(conn, sock);
    tls.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .map_err(|e| format!("send: {e}"))?;
    let mut got = Vec::new();
    let read = tls.read_to_end(&mut got);
    let end = got
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("no response head ({read:?}, {} bytes)", got.len()))?;
    let head = String::from_utf8_lossy(&got[..end]).into_owned();
    if !head.starts_with("HTTP/1.1 200 ") {
        return Err(format!("status: {head}"));
    }
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .ok_or("no Content-Length")?;
    let body = got.split_off(end + 4);
    if body.len() != len {
        return Err(format!("body {} of {len} bytes ({read:?})", body.len()));
    }
    Ok(body)
}

/// The pid in the old process's `upgraded: new process PID ...` line.
fn new_pid(output: &str) -> Option<u32> {
    output
        .lines()
        .find_map(|l| l.strip_prefix("upgraded: new process "))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
}

/// Is `pid` a live process (not gone, not a zombie)?
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, r)| !r.starts_with(" Z"))
    })
}

/// Stop a process this test does not own (the new one, whose parent was
/// the old one), within [`common::WAIT`].
fn stop_pid(pid: u32) {
    let p = rustix::process::Pid::from_raw(pid as i32).unwrap();
    let _ = rustix::process::kill_process(p, Signal::TERM);
    let deadline = Instant::now() + common::WAIT;
    while alive(pid) {
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
fn an_upgrade_under_load_refuses_nothing() {
    let _serial = common::serial();
    let mut server = Server::start(&[]);
    let port = server.port;
    let old = server.pid();
    let config = client_config(&server.ca());
    let want = sha256(&std::fs::read(common::file_path(MIB)).unwrap());

    // A slow download, in flight across the upgrade: the old process
    // finishes it while draining.
    let slow_out = server.data.path().join("slow.bin");
    let slow = {
        let mut c = tool("curl");
        c.arg("--cacert")
            .arg(server.ca())
            .args(["-sS", "--max-time", "60", "--limit-rate", "256k", "-o"])
            .arg(&slow_out)
            .arg(server.url(&format!("/f{MIB}.bin")));
        c.spawn().expect("run curl")
    };

    // Eight clients, each one request after another on new connections.
    let done = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (done, ok, config, want) = (done.clone(), ok.clone(), config.clone(), want.clone());
            std::thread::spawn(move || {
                let mut failures = Vec::new();
                // A safety net: the test stops them (`done`).
                let deadline = Instant::now() + 5 * common::WAIT;
                for _ in 0..2000 {
                    if done.load(SeqCst) || Instant::now() > deadline {
                        break;
                    }
                    match get(port, &config, &format!("/f{MIB}.bin")) {
                        Ok(body) if sha256(&body) == want => {
                            ok.fetch_add(1, SeqCst);
                        }
                        Ok(body) => failures.push(format!("corrupt body of {} bytes", body.len())),
                        Err(e) => failures.push(e),
                    }
                }
                failures
            })
        })
        .collect();

    let wait_ok = |n: usize| {
        common::wait_until(common::WAIT, format!("{n} good downloads"), || {
            match ok.load(SeqCst) {
                got if got >= n => Ok(()),
                got => Err(format!("{got}")),
            }
        })
    };
    wait_ok(16);
    // The slow download has started (its first bytes are in the file).
    common::wait_until(
        common::WAIT,
        "the slow download's first bytes",
        || match std::fs::metadata(&slow_out).map_or(0, |m| m.len()) {
            0 => Err("nothing yet".into()),
            _ => Ok(()),
        },
    );
    let before = ok.load(SeqCst);
    server.signal(Signal::USR2);
    let out = server.wait_for_output("upgraded: new process", 1);
    let new = new_pid(&out).unwrap_or_else(|| panic!("no upgrade announced: {out}"));
    assert_ne!(new, old);
    assert!(alive(new), "the new process {new} is not running");
    // The new process said what it took over.
    assert!(
        out.contains(&format!(
            "127.0.0.1:{port}: took the inherited listening socket"
        )),
        "{out}"
    );
    // Keep the clients going on the new process for a while.
    let after_upgrade = ok.load(SeqCst);
    wait_ok(after_upgrade + 32);
    done.store(true, SeqCst);
    let failures: Vec<String> = clients
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    let total = ok.load(SeqCst);
    eprintln!(
        "{total} downloads of 1 MiB: {before} before SIGUSR2, {} after the new process was ready",
        total - after_upgrade
    );
    assert!(failures.is_empty(), "failed requests: {failures:?}");
    assert!(
        total >= after_upgrade + 32,
        "too few requests after the upgrade"
    );

    // The slow download, started on the old process, completes intact, and
    // the old process exits 0 once it has.
    let status = wait_child(slow, common::WAIT);
    assert!(status.success(), "slow curl: {status}");
    assert_eq!(sha256(&std::fs::read(&slow_out).unwrap()), want);
    let exit = server.wait_exit(common::WAIT);
    assert!(
        exit.is_some_and(|s| s.success()),
        "old process: {exit:?}\n{}",
        server.output()
    );
    // The new one still serves.
    let body = get(port, &config, &format!("/f{MIB}.bin")).unwrap();
    assert_eq!(sha256(&body), want);
    stop_pid(new);
}

fn wait_child(mut child: std::process::Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("child did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_failed_upgrade_keeps_the_old_process_serving() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("tlsfront");
    std::fs::copy(common::BIN, &bin).unwrap();
    let root = common::fixture().root.display().to_string();
    let server = Server::spawn_bin(&bin, &[], &["serve", &root], &[]);
    let config = client_config(&server.ca());
    assert_eq!(
        get(server.port, &config, "/hello.txt").unwrap(),
        b"hello world\n"
    );

    // A broken new build: the file at the path the server was started from
    // is now one that exits at once.
    std::fs::remove_file(&bin).unwrap();
    std::fs::write(&bin, "#!/bin/sh\necho 'broken build' >&2\nexit 1\n").unwrap();
    std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();

    server.signal(Signal::USR2);
    let log = server.wait_for_log("upgrade failed");
    assert!(
        log.contains("upgrade failed, still serving in this process")
            && log.contains("exited before it was ready"),
        "{log}"
    );
    assert!(log.contains("broken build"), "{log}");
    assert!(!server.output().contains("upgraded:"));
    for _ in 0..5 {
        assert_eq!(
            get(server.port, &config, "/hello.txt").unwrap(),
            b"hello world\n"
        );
    }
    let (status, report) = server.stop();
    assert!(status.success(), "{status}: {report}");
    assert!(report.contains("upgrade_failed 1"), "{report}");
}

#[test]
fn socket_activation_takes_the_inherited_socket() {
    // A free port, for systemd-socket-activate to listen on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let root = common::fixture().root.display().to_string();
    // systemd-socket-activate (without --accept) starts the program on the
    // first connection, as systemd does for a socket unit: knock until
    // tlsfront has started (a knock may come before the socket is bound,
    // or, on a busy machine, reach another test's server that had the port
    // a moment before).
    let knock = addr.clone();
    let started = Arc::new(AtomicBool::new(false));
    let knocking = started.clone();
    std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !knocking.load(SeqCst) && Instant::now() < deadline {
            if let Ok(c) = TcpStream::connect(&knock) {
                std::thread::sleep(Duration::from_millis(200));
                drop(c);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    let server = Server::spawn_via(
        // It passes on only the environment it is told to (-E).
        &[
            "systemd-socket-activate",
            "-l",
            &addr,
            "-E",
            "XDG_DATA_HOME",
        ],
        &["serve", &root],
        &["--listen", &addr],
    );
    started.store(true, SeqCst);
    assert_eq!(server.port, port);
    assert!(
        server
            .startup
            .iter()
            .any(|l| l == &format!("{addr}: took the inherited listening socket (not bound again)")),
        "{:?}",
        server.startup
    );
    let config = client_config(&server.ca());
    for _ in 0..10 {
        assert_eq!(get(port, &config, "/hello.txt").unwrap(), b"hello world\n");
    }
    let (status, report) = server.stop();
    assert!(status.success(), "{status}: {report}");
}

/// An upgrade of `tlsfront run` with sites and ticket key files, while
/// `tlsfront-bench tps` opens sessions (resuming them) without pause and
/// `tlsfront-bench requests` sends keep-alive requests: no session and no
/// request fails, the new process serves the certificate now on disk, and
/// sessions made with the old process resume on the new one (the ticket
/// keys come from the files, not from memory).
#[test]
fn an_upgrade_of_many_sites_keeps_sessions_and_takes_the_new_certificate() {
    let _serial = common::serial();
    let ca = common::Ca::new();
    let dir = tempfile::tempdir().unwrap();
    let names = vec!["localhost".to_string()];
    let (c1, k1) = ca.issue("up-1", &names, false);
    let (c2, k2) = ca.issue("up-2", &names, false);
    let (cert, key) = (dir.path().join("live.pem"), dir.path().join("live.key"));
    std::fs::copy(&c1, &cert).unwrap();
    std::fs::copy(&k1, &key).unwrap();
    std::fs::write(dir.path().join("ticket.key"), common::content(80, 9)).unwrap();
    let www = dir.path().join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("1k"), common::content(1024, 3)).unwrap();
    let config = dir.path().join("up.toml");
    std::fs::write(
        &config,
        "ticket_keys = [\"ticket.key\"]\n\
         [[site]]\nnames = [\"localhost\"]\nroot = \"www\"\ncert = \"live.pem\"\nkey = \"live.key\"\n\
         [[site]]\nnames = [\"other.test\"]\nroot = \"www\"\ncert = \"live.pem\"\nkey = \"live.key\"\n",
    )
    .unwrap();
    let mut server = Server::run(&config, &[]);
    let port = server.port;
    let before = common::served_fingerprint(port, "localhost");

    let json = dir.path().join("tps.json");
    let mut tps = common::bench_client()
        .args(["tps", &format!("https://localhost:{port}/1k")])
        .args([
            "--ramp",
            "30:30:30",
            "--step-seconds",
            "8",
            "--requests-per-session",
            "1",
        ])
        .args(["--threads", "1", "--ca"])
        .arg(&ca.pem)
        .arg("--json")
        .arg(&json)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Keep-alive requests too, one after another on each connection.
    let requests_json = dir.path().join("requests.json");
    let mut requests = common::bench_client()
        .args(["requests", &format!("https://localhost:{port}/1k")])
        .args(["-c", "4", "-d", "8s", "--threads", "1", "--ca"])
        .arg(&ca.pem)
        .arg("--json")
        .arg(&requests_json)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The scenario, not a wait: the old process makes sessions for a
    // while before the upgrade.
    std::thread::sleep(Duration::from_secs(3));
    // A renewed certificate on disk, then the upgrade.
    std::fs::copy(&c2, &cert).unwrap();
    std::fs::copy(&k2, &key).unwrap();
    server.signal(Signal::USR2);
    let out = server.wait_for_output("upgraded: new process", 1);
    let new = new_pid(&out).unwrap_or_else(|| panic!("no upgrade announced: {out}"));
    assert_ne!(common::served_fingerprint(port, "localhost"), before);

    let mut err_pipe = tps.stderr.take().unwrap();
    let status = wait_child(tps, 2 * common::WAIT);
    let mut err = String::new();
    let _ = err_pipe.read_to_string(&mut err);
    assert!(status.success(), "tlsfront-bench tps: {err}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["summary"]["failed"], 0, "{}", v["errors"]);
    let mut err_pipe = requests.stderr.take().unwrap();
    let status = wait_child(requests, common::WAIT);
    let mut err = String::new();
    let _ = err_pipe.read_to_string(&mut err);
    assert!(status.success(), "tlsfront-bench requests: {err}");
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&requests_json).unwrap()).unwrap();
    // Keep-alive connections the old process had were ended with
    // `Connection: close` on a response, not closed under a request.
    assert_eq!(r["summary"]["errors"], 0, "{}", r["errors"]);
    assert!(r["summary"]["requests"].as_u64().unwrap_or(0) > 0);
    let exit = server.wait_exit(common::WAIT);
    assert!(exit.is_some_and(|s| s.success()), "old process: {exit:?}");
    stop_pid(new);
    // The new process's report comes last (it shares the old one's
    // stdout, which ends when both have exited): it resumed the sessions
    // the old one made, and made few full handshakes of its own.
    let out = server.output_at_eof();
    let last = out
        .lines()
        .filter_map(|l| l.strip_prefix("handshakes: "))
        .next_back()
        .unwrap_or_else(|| panic!("no report from the new process: {out}"));
    let n: Vec<u64> = last
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let (full, resumed) = (n[0], n[1]);
    // Each resumption uses up a ticket and brings one back only once its
    // handshake is done, so a client with many connections in flight runs
    // out now and then and makes a full handshake (more often on a loaded
    // machine), as does the fingerprint check: a few, not a count. Had the
    // ticket keys not carried over, every handshake would be full.
    assert!(
        resumed > 0 && full * 4 <= resumed,
        "new process: {last}\n{out}"
    );
}

/// Without ticket key files, the keys are derived from a seed the old
/// process hands the new one: a session made before the upgrade resumes
/// on the new process (nginx and HAProxy lose such sessions at every
/// restart).
#[test]
fn sessions_without_key_files_resume_across_an_upgrade() {
    let _serial = common::serial();
    let mut server = Server::start(&[]);
    let port = server.port;
    let old = server.pid();
    let dir = tempfile::tempdir().unwrap();
    let sess = dir.path().join("sess.pem");
    let (ca, sess_s) = (
        server.ca().display().to_string(),
        sess.display().to_string(),
    );
    let (out, err, _) = common::s_client(
        port,
        &["-tls1_3", "-CAfile", &ca, "-sess_out", &sess_s],
        &[common::Step::WaitForFile(&sess)],
        Duration::from_secs(30),
    );
    assert!(out.contains("New, TLSv1.3"), "{out}{err}");

    server.signal(Signal::USR2);
    let out = server.wait_for_output("upgraded: new process", 1);
    let new = new_pid(&out).unwrap_or_else(|| panic!("no upgrade announced: {out}"));
    assert_ne!(new, old);
    let exit = server.wait_exit(common::WAIT);
    assert!(exit.is_some_and(|s| s.success()), "{exit:?}");

    // Only the new process is left to answer.
    let (out, err, _) = common::s_client(
        port,
        &["-tls1_3", "-CAfile", &ca, "-sess_in", &sess_s],
        &[],
        Duration::from_secs(30),
    );
    assert!(out.contains("Reused, TLSv1.3"), "{out}{err}");
    let p = rustix::process::Pid::from_raw(new as i32).unwrap();
    rustix::process::kill_process(p, Signal::TERM).unwrap();
}
