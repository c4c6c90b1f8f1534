//! Settings operators expect from a server, through the real binary and
//! curl: `server_tokens = false` leaves the version out of `Server:` (and a
//! reload turns it back on), per site over the top level's (two sites on
//! one listener, chosen by SNI; refused on a backend site), and `pid_file` names the main process — the
//! one process alone, the root parent with `user` — is gone after
//! SIGTERM, names the new process after an upgrade (SIGUSR2) and the old
//! one after an upgrade that failed, is written before the start is
//! announced, and a file that cannot be written (a missing directory, a
//! directory another user could change, a directory at its name) refuses
//! the start before any announcement, and `config check` alike.

mod common;

use common::{Server, BIN};
use rustix::process::Signal;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Wait (up to 60 s) until `cond` holds; panic naming `what` otherwise.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, r)| !r.starts_with(" Z"))
    })
}

/// The pid the file holds, if it exists and holds one.
fn pid_in(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The `Server` header curl sees.
fn server_header(server: &Server) -> String {
    let out = server.curl(&["-o", "/dev/null", "-D", "-", &server.url("/")]);
    let head = String::from_utf8_lossy(&out.stdout).into_owned();
    head.lines()
        .find_map(|l| l.strip_prefix("Server: ").or(l.strip_prefix("server: ")))
        .unwrap_or_else(|| panic!("no Server header: {head}"))
        .trim_end()
        .to_string()
}

#[test]
fn server_tokens_off_leaves_the_version_out() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tlsfront.toml");
    std::fs::write(&cfg, "server_tokens = false\n").unwrap();
    let cfg_arg = cfg.display().to_string();
    let server = Server::start(&["--config", &cfg_arg]);
    assert_eq!(server_header(&server), "tlsfront");
    // Error pages too (written by another path).
    let out = server.curl(&["-o", "/dev/null", "-D", "-", &server.url("/no-such-file")]);
    let head = String::from_utf8_lossy(&out.stdout);
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    assert!(head.contains("Server: tlsfront\r\n"), "{head}");
    // A reload takes it back: the version again.
    std::fs::write(&cfg, "server_tokens = true\n").unwrap();
    server.reload();
    server.wait_for_output("reloaded ", 1);
    assert_eq!(
        server_header(&server),
        format!("tlsfront/{}", env!("CARGO_PKG_VERSION"))
    );
    server.stop();
}

#[test]
fn the_version_is_in_server_by_default() {
    let server = Server::start(&[]);
    assert_eq!(
        server_header(&server),
        format!("tlsfront/{}", env!("CARGO_PKG_VERSION"))
    );
    server.stop();
}

#[test]
fn the_pid_file_follows_the_main_process_through_an_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("tlsfront.pid");
    let cfg = dir.path().join("tlsfront.toml");
    write_pid_config(&cfg, &pid_file);
    let cfg_arg = cfg.display().to_string();
    let mut server = Server::start(&["--config", &cfg_arg]);
    let old = server.pid();
    wait_until("the pid file", || pid_in(&pid_file) == Some(old));
    let mode = std::fs::metadata(&pid_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o644);
    // The new process writes its own pid; the old one, exiting, leaves it.
    server.signal(Signal::USR2);
    let out = server.wait_for_output("upgraded: new process ", 1);
    let new: u32 = out
        .lines()
        .find_map(|l| l.strip_prefix("upgraded: new process "))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    assert_ne!(new, old);
    assert_eq!(pid_in(&pid_file), Some(new));
    let status = server
        .wait_exit(Duration::from_secs(60))
        .expect("the old process did not exit");
    assert!(status.success(), "{status}");
    assert_eq!(pid_in(&pid_file), Some(new));
    // SIGTERM: the new process exits and removes it.
    let p = rustix::process::Pid::from_raw(new as i32).unwrap();
    rustix::process::kill_process(p, Signal::TERM).unwrap();
    wait_until("the new process to exit", || !alive(new));
    assert!(!pid_file.exists(), "{} is left", pid_file.display());
}

/// A config at `cfg` that sets only `pid_file`.
fn write_pid_config(cfg: &Path, pid_file: &Path) {
    let text = format!("pid_file = {:?}\n", pid_file.display().to_string());
    std::fs::write(cfg, text).unwrap();
}

/// `tlsfront serve` as nobody (a parent and a server process), from a
/// config with a `pid_file`, its root readable by nobody: the directory
/// (kept while the test needs it), the pid file's path and the server.
fn serve_with_user_and_pid_file() -> (tempfile::TempDir, std::path::PathBuf, Server) {
    let dir = tempfile::tempdir().unwrap();
    let www = dir.path().join("www");
    std::fs::create_dir(&www).unwrap();
    std::fs::write(www.join("index.html"), "hello\n").unwrap();
    for (p, m) in [(dir.path(), 0o755), (www.as_path(), 0o755)] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    }
    let pid_file = dir.path().join("tlsfront.pid");
    let cfg = dir.path().join("tlsfront.toml");
    write_pid_config(&cfg, &pid_file);
    let (www_arg, cfg_arg) = (www.display().to_string(), cfg.display().to_string());
    let server = Server::spawn_via(
        &[],
        &["serve", &www_arg],
        &["--config", &cfg_arg, "--user", "nobody"],
    );
    (dir, pid_file, server)
}

#[test]
fn with_user_the_pid_file_names_the_parent() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let _serial = common::serial();
    let (_dir, pid_file, server) = serve_with_user_and_pid_file();
    let out = server.wait_for_output("parent process ", 1);
    assert!(
        out.contains(&format!("parent process {} ", server.pid())),
        "{out}"
    );
    wait_until("the pid file", || pid_in(&pid_file) == Some(server.pid()));
    assert_eq!(server.status("/index.html", &[]), "200");
    server.stop();
    assert!(!pid_file.exists(), "{} is left", pid_file.display());
}

#[test]
fn a_pid_file_where_others_could_swap_it_is_refused() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Writable by anyone (not sticky): anyone could put a link there.
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let target = dir.path().join("victim");
    std::fs::write(&target, "root's\n").unwrap();
    std::os::unix::fs::symlink(&target, open.join("tlsfront.pid")).unwrap();
    let cfg = dir.path().join("tlsfront.toml");
    let pid_file = open.join("tlsfront.pid");
    write_pid_config(&cfg, &pid_file);
    let out = std::process::Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        .arg(dir.path())
        .env("XDG_DATA_HOME", dir.path().join("data"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("setting pid_file"), "{err}");
    assert!(err.contains(&pid_file.display().to_string()), "{err}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "root's\n");
}

/// `tlsfront serve DIR --config CFG` with `extra` flags, which must refuse
/// to start: its exit status, stdout and stderr.
fn refused_start(
    dir: &Path,
    cfg: &Path,
    extra: &[&str],
) -> (std::process::ExitStatus, String, String) {
    let out = std::process::Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(cfg)
        .args(extra)
        .arg(dir)
        .env("XDG_DATA_HOME", dir.join("data"))
        .output()
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `tlsfront config check` of a file with one site (files from `dir`) and
/// `pid_file`.
fn config_check(dir: &Path, pid_file: &Path) -> std::process::Output {
    let cfg = dir.join("check.toml");
    std::fs::write(
        &cfg,
        format!(
            "pid_file = {:?}\n[[site]]\nroot = {:?}\n",
            pid_file.display().to_string(),
            dir.display().to_string()
        ),
    )
    .unwrap();
    std::process::Command::new(BIN)
        .args(["config", "check"])
        .arg(&cfg)
        .env("XDG_DATA_HOME", dir.join("data"))
        .output()
        .unwrap()
}

#[test]
fn a_pid_file_that_cannot_be_written_refuses_the_start_before_any_announcement() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let a_dir = dir.path().join("a-directory");
    std::fs::create_dir(&a_dir).unwrap();
    let cases = [
        (
            "missing directory",
            dir.path().join("missing").join("tlsfront.pid"),
        ),
        ("a directory", a_dir.clone()),
    ];
    // With `user` (as root) the parent writes it, before its server
    // process starts; else the one process does.
    let mut roles: Vec<&[&str]> = vec![&[]];
    if is_root() {
        roles.push(&["--user", "nobody"]);
    }
    for (what, pid_file) in &cases {
        let cfg = dir.path().join("tlsfront.toml");
        write_pid_config(&cfg, pid_file);
        let path = pid_file.display().to_string();
        for extra in &roles {
            let (status, out, err) = refused_start(dir.path(), &cfg, extra);
            let ctx = format!("{what} {extra:?}: status {status}\nstdout:\n{out}\nstderr:\n{err}");
            assert!(!status.success(), "{ctx}");
            assert!(err.contains("setting pid_file"), "{ctx}");
            assert!(err.contains(&path), "{ctx}");
            assert!(err.contains("or leave pid_file out"), "{ctx}");
            for announced in ["serving ", "listening on", "parent process"] {
                assert!(!out.contains(announced), "{ctx}");
            }
        }
        assert!(a_dir.is_dir());
        // `config check` decides the same, by the same rules.
        let out = config_check(dir.path(), pid_file);
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{what}: {text}");
        assert!(text.contains("setting pid_file"), "{what}: {text}");
        assert!(text.contains(&path), "{what}: {text}");
        assert!(!pid_file.is_file(), "{what}: config check wrote it");
    }
    // A good path passes the check, and the check leaves it unwritten.
    let good = dir.path().join("tlsfront.pid");
    let out = config_check(dir.path(), &good);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!("pid file: {}", good.display())),
        "{text}"
    );
    assert!(!good.exists());
}

#[test]
fn the_pid_file_is_written_by_the_time_the_start_is_announced() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("tlsfront.pid");
    let cfg = dir.path().join("tlsfront.toml");
    write_pid_config(&cfg, &pid_file);
    let cfg_arg = cfg.display().to_string();
    // `Server::start` returns once the start-up lines are out: no waiting.
    let server = Server::start(&["--config", &cfg_arg]);
    assert_eq!(pid_in(&pid_file), Some(server.pid()));
    assert_eq!(server.status("/", &[]), "200");
    server.stop();
    assert!(!pid_file.exists(), "{} is left", pid_file.display());
}

#[test]
fn an_upgrade_that_fails_leaves_the_pid_file_to_the_process_that_serves_on() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let _serial = common::serial();
    let (dir, pid_file, server) = serve_with_user_and_pid_file();
    let www = dir.path().join("www");
    assert_eq!(pid_in(&pid_file), Some(server.pid()));
    // The new parent writes its pid, then its server process (as nobody)
    // cannot open the root and the upgrade fails: the file names the old
    // parent again, which serves on.
    std::fs::set_permissions(&www, std::fs::Permissions::from_mode(0o700)).unwrap();
    server.signal(Signal::USR2);
    server.wait_for_log("upgrade failed, still serving in this process");
    assert_eq!(pid_in(&pid_file), Some(server.pid()));
    std::fs::set_permissions(&www, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(server.status("/index.html", &[]), "200");
    server.stop();
    assert!(!pid_file.exists(), "{} is left", pid_file.display());
}

/// The `Server` header curl sees from the site named `name` (SNI and
/// Host, `--resolve`d to the server), for `path`; and the status.
fn site_server_header(server: &Server, name: &str, path: &str) -> (String, String) {
    let resolve = format!("{name}:{}:127.0.0.1", server.port);
    let url = format!("https://{name}:{}{path}", server.port);
    let out = server.curl(&[
        "-k",
        "--resolve",
        &resolve,
        "-o",
        "/dev/null",
        "-D",
        "-",
        &url,
    ]);
    let head = String::from_utf8_lossy(&out.stdout).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("no response from {name}: {out:?}"))
        .to_string();
    let server = head
        .lines()
        .find_map(|l| l.strip_prefix("Server: ").or(l.strip_prefix("server: ")))
        .unwrap_or_else(|| panic!("no Server header from {name}: {head}"))
        .trim_end()
        .to_string();
    (status, server)
}

#[test]
fn server_tokens_is_per_site_over_the_top_level() {
    let dir = tempfile::tempdir().unwrap();
    for site in ["a", "b"] {
        let root = dir.path().join(site);
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("index.html"), format!("{site}\n")).unwrap();
    }
    let config = |top: &str, a: &str| {
        format!(
            "{top}[[site]]\nnames = [\"a.test\"]\nroot = \"a\"\n{a}\
             [[site]]\nnames = [\"b.test\"]\nroot = \"b\"\n"
        )
    };
    let cfg = dir.path().join("tlsfront.toml");
    let versioned = format!("tlsfront/{}", env!("CARGO_PKG_VERSION"));
    // The top level leaves it on; a.test turns it off for itself.
    std::fs::write(&cfg, config("", "server_tokens = false\n")).unwrap();
    let server = Server::run(&cfg, &[]);
    for path in ["/", "/no-such-file"] {
        let (status, header) = site_server_header(&server, "a.test", path);
        assert_eq!(header, "tlsfront", "a.test {path} ({status})");
        let (status, header) = site_server_header(&server, "b.test", path);
        assert_eq!(header, versioned, "b.test {path} ({status})");
    }
    assert_eq!(site_server_header(&server, "a.test", "/").0, "200");
    assert_eq!(
        site_server_header(&server, "b.test", "/no-such-file").0,
        "404"
    );
    // Reloaded the other way: the top level turns it off, which b.test
    // (setting nothing) takes, and a.test turns it on for itself.
    std::fs::write(
        &cfg,
        config("server_tokens = false\n", "server_tokens = true\n"),
    )
    .unwrap();
    server.reload();
    server.wait_for_output("reloaded ", 1);
    assert_eq!(site_server_header(&server, "a.test", "/").1, versioned);
    assert_eq!(site_server_header(&server, "b.test", "/").1, "tlsfront");
    server.stop();
}

#[test]
fn server_tokens_on_a_backend_site_is_refused() {
    // A backend site relays the TLS stream: it writes no Server header.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("tlsfront.toml");
    std::fs::write(
        &cfg,
        "[[site]]\nnames = [\"p.test\"]\nbackend = \"127.0.0.1:9\"\nserver_tokens = false\n",
    )
    .unwrap();
    let out = std::process::Command::new(BIN)
        .args(["config", "check"])
        .arg(&cfg)
        .env("XDG_DATA_HOME", dir.path().join("data"))
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("line 4 ([[site]] #1), setting server_tokens"),
        "{text}"
    );
    assert!(
        text.contains("a backend site relays the TLS stream"),
        "{text}"
    );
}
