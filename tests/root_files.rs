//! What tlsfront opens while it is root, through the real binary (issue
//! 26): an access log or a key whose path another user can redirect is
//! refused at start, naming the path, and the root-only file it was aimed
//! at keeps its owner, mode and content; root's own link chains (certbot's
//! `live/` links into `archive/`) keep working; a log under `user` is
//! written by that user through the descriptor opened as root, and stays
//! root's; rotated by real logrotate creating the new file for that user,
//! it is reopened by that user. All of it needs root (as the tests run in CI); elsewhere each
//! test says it is skipped.

mod common;

use common::{Ca, Server};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const NOBODY: u32 = 65534;

fn root() -> bool {
    if rustix::process::geteuid().is_root() {
        return true;
    }
    eprintln!("skipped: needs root");
    false
}

/// Owner, mode and content: what must not change.
fn facts(p: &Path) -> (u32, u32, Vec<u8>) {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(p).unwrap();
    (m.uid(), m.mode() & 0o7777, std::fs::read(p).unwrap())
}

/// A file only root may read or write.
fn root_only_file(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join("root-only");
    std::fs::write(&p, b"root's own\n").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

/// A directory the service user owns (as docs/LOGGING.md once advised for
/// the log directory).
fn theirs(dir: &Path) -> PathBuf {
    let d = dir.join("theirs");
    std::fs::create_dir(&d).unwrap();
    std::os::unix::fs::chown(&d, Some(NOBODY), Some(NOBODY)).unwrap();
    d
}

/// A symbolic link at `link` to `target`, made by that user.
fn their_link(target: &Path, link: &Path) {
    std::os::unix::fs::symlink(target, link).unwrap();
    std::os::unix::fs::lchown(link, Some(NOBODY), Some(NOBODY)).unwrap();
}

/// A config running as nobody with `body` (`{root}` in it: the fixture).
fn config(dir: &Path, body: &str) -> PathBuf {
    let config = dir.join("tlsfront.toml");
    let root = quoted(&common::fixture().root);
    std::fs::write(
        &config,
        format!(
            "user = \"nobody\"\ngroup = \"nogroup\"\n{}",
            body.replace("{root}", &root)
        ),
    )
    .unwrap();
    config
}

fn quoted(p: &Path) -> String {
    format!("{:?}", p.display().to_string())
}

/// `tlsfront run --config CONFIG`, which must refuse to start: its stderr.
/// A start that wrongly succeeds is killed after a generous bound.
fn refused_start(config: &Path) -> String {
    let data = tempfile::tempdir().unwrap();
    let mut child = Command::new(common::BIN)
        .args(["run", "--config"])
        .arg(config)
        .args(["--listen", "127.0.0.1:0"])
        .env("XDG_DATA_HOME", data.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tlsfront started: {}", reader.join().unwrap());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let err = reader.join().unwrap();
    assert!(!status.success(), "{err}");
    err
}

/// The lines of `path`, once it holds at least `n` (up to 10 s).
fn wait_lines(path: &Path, n: usize) -> Vec<String> {
    let deadline = Instant::now() + common::WAIT;
    loop {
        let l: Vec<String> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect();
        if l.len() >= n || Instant::now() > deadline {
            return l;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_log_linked_to_a_root_file_is_refused_and_the_file_untouched() {
    // The privilege escalation of issue 26: the service user, owning the
    // log directory, links access.log to a root-only file; started as
    // root, tlsfront must neither write into it nor give it away.
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let target = root_only_file(dir.path());
    let before = facts(&target);
    let log = theirs(dir.path()).join("access.log");
    let config = config(
        dir.path(),
        &format!("root = {{root}}\naccess_log = {}\n", quoted(&log)),
    );
    their_link(&target, &log);
    let err = refused_start(&config);
    assert!(
        err.contains(&log.display().to_string()) && err.contains("symbolic link"),
        "{err}"
    );
    assert_eq!(facts(&target), before);

    // The same through a second name (a hard link).
    std::fs::remove_file(&log).unwrap();
    std::fs::hard_link(&target, &log).unwrap();
    let err = refused_start(&config);
    assert!(
        err.contains(&log.display().to_string()) && err.contains("hard links"),
        "{err}"
    );
    assert_eq!(facts(&target), before);
}

#[test]
fn a_log_is_written_by_the_user_and_stays_roots() {
    if !root() {
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let log = theirs(dir.path()).join("access.log");
    let config = config(
        dir.path(),
        &format!("root = {{root}}\naccess_log = {}\n", quoted(&log)),
    );
    let server = Server::run(&config, &[]);
    assert!(
        server
            .startup
            .iter()
            .any(|l| l.starts_with("running as user nobody")),
        "{:?}",
        server.startup
    );
    assert_eq!(server.status("/hello.txt", &[]), "200");
    assert_eq!(server.status("/hello.txt?again", &[]), "200");
    let l = wait_lines(&log, 2);
    assert_eq!(l.len(), 2, "{l:?}");
    // Two workers may flush in either order.
    assert!(
        l.iter().any(|l| l.contains("GET /hello.txt?again ")),
        "{l:?}"
    );
    // Created by root before the switch, written through the descriptor
    // since: no owner was changed.
    let m = std::fs::metadata(&log).unwrap();
    assert_eq!((m.uid(), m.gid(), m.nlink()), (0, 0, 1));
    let (status, _) = server.stop();
    assert!(status.success());
}

#[test]
fn a_key_reached_through_another_users_directory_is_refused() {
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (cert, key) = ca.issue("a", &["a.test".to_string()], false);
    let before = facts(&key);
    // The user links a name in its directory to root's key: served, that
    // key would be that user's to use.
    let link = theirs(dir.path()).join("key.pem");
    their_link(&key, &link);
    let config = config(
        dir.path(),
        &format!(
            "[[site]]\nnames = [\"a.test\"]\nroot = {{root}}\ncert = {}\nkey = {}\n",
            quoted(&cert),
            quoted(&link)
        ),
    );
    let err = refused_start(&config);
    let theirs = dir.path().join("theirs").display().to_string();
    assert!(
        err.contains(&theirs) && err.contains("uid 65534") && err.contains("chown root"),
        "{err}"
    );
    // `config check` decides the same.
    let out = Command::new(common::BIN)
        .args(["config", "check"])
        .arg(&config)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && text.contains(&theirs), "{text}");
    assert_eq!(facts(&key), before);
}

#[test]
fn roots_own_link_chains_are_followed() {
    // certbot's layout: live/NAME/*.pem -> ../../archive/NAME/*1.pem, all
    // root's.
    if !root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (cert, key) = ca.issue("b", &["b.test".to_string()], false);
    let archive = dir.path().join("archive/b.test");
    let live = dir.path().join("live/b.test");
    std::fs::create_dir_all(&archive).unwrap();
    std::fs::create_dir_all(&live).unwrap();
    std::fs::copy(&cert, archive.join("fullchain1.pem")).unwrap();
    std::fs::copy(&key, archive.join("privkey1.pem")).unwrap();
    for (name, to) in [("fullchain", "fullchain1"), ("privkey", "privkey1")] {
        std::os::unix::fs::symlink(
            format!("../../archive/b.test/{to}.pem"),
            live.join(format!("{name}.pem")),
        )
        .unwrap();
    }
    let config = config(
        dir.path(),
        &format!(
            "[[site]]\nnames = [\"b.test\"]\nroot = {{root}}\ncert = {}\nkey = {}\n",
            quoted(&live.join("fullchain.pem")),
            quoted(&live.join("privkey.pem"))
        ),
    );
    let server = Server::run(&config, &[]);
    let out = common::tool("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
        .arg(&cert)
        .output()
        .unwrap();
    let expected = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(common::served_fingerprint(server.port, "b.test"), expected);
    let (status, _) = server.stop();
    assert!(status.success());
}

#[test]
fn rotation_under_user_reopens_roots_new_file_through_the_parent() {
    if !root() {
        return;
    }
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    // Root's, and open to nobody for the reopen's path lookup; logrotate
    // wants the log's directory writable by root alone.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let logs = dir.path().join("logs");
    std::fs::create_dir(&logs).unwrap();
    let log = logs.join("access.log");
    let config = config(
        dir.path(),
        &format!("root = {{root}}\naccess_log = {}\n", quoted(&log)),
    );
    let server = Server::run(&config, &[]);
    assert_eq!(server.status("/hello.txt?before", &[]), "200");
    assert_eq!(wait_lines(&log, 1).len(), 1);
    // A signal with nothing rotated keeps root's file open: no failure.
    server.signal(rustix::process::Signal::USR1);
    let said = server.wait_for_output("SIGUSR1: reopened", 1);
    assert!(
        said.contains("SIGUSR1: reopened 1 access log file(s), 0 failed"),
        "{said}"
    );
    // logrotate as the package's snippet does: the new file is root's
    // (root adm 0640); the parent opens it for the server process.
    let conf = dir.path().join("logrotate.conf");
    std::fs::write(
        &conf,
        format!(
            "{} {{\n  rotate 2\n  create 0640 root adm\n  postrotate\n    kill -USR1 {}\n  endscript\n}}\n",
            log.display(),
            server.pid()
        ),
    )
    .unwrap();
    let out = common::tool("logrotate")
        .args(["-f", "-s"])
        .arg(dir.path().join("logrotate.state"))
        .arg(&conf)
        .output()
        .unwrap();
    assert!(out.status.success(), "logrotate: {out:?}");
    let said = server.wait_for_output("SIGUSR1: reopened", 2);
    assert_eq!(
        said.matches("SIGUSR1: reopened 1 access log file(s), 0 failed")
            .count(),
        2,
        "{said}{}",
        server.log()
    );
    assert_eq!(server.status("/hello.txt?after", &[]), "200");
    let fresh = wait_lines(&log, 1);
    assert_eq!(fresh.len(), 1, "{fresh:?}");
    assert!(fresh[0].contains("GET /hello.txt?after "), "{fresh:?}");
    assert_eq!(std::fs::metadata(&log).unwrap().uid(), 0);
    let old = std::fs::read_to_string(logs.join("access.log.1")).unwrap();
    assert!(old.contains("?before") && !old.contains("?after"), "{old}");
    let (status, _) = server.stop();
    assert!(status.success());
}
