//! Session tickets for a fleet: two tlsfront servers with the same
//! nginx-format ticket key files behind a real HAProxy in TCP mode
//! (round-robin, `send-proxy-v2`): a session made on one resumes on the
//! other, for TLS 1.3 and TLS 1.2. Key rotation by reload: a ticket under a
//! key still listed resumes, and once its key is gone it does not.

mod common;

use common::fleet::connect;
use common::peers::haproxy_tcp_balancer;
use common::Server;
use std::path::Path;

/// 80 random bytes: what `openssl rand 80 > FILE` makes.
fn key_file(path: &Path, seed: u64) {
    std::fs::write(path, common::content(80, seed)).unwrap();
}

/// `handshakes: full F resumed R` from a report.
fn handshakes(report: &str) -> (u64, u64) {
    let line = report
        .lines()
        .find(|l| l.starts_with("handshakes: "))
        .unwrap_or_else(|| panic!("{report}"));
    let n: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (n[0], n[1])
}

#[test]
fn a_session_from_one_server_resumes_on_the_other_behind_haproxy() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("ticket.key");
    key_file(&key, 1);
    let k = key.display().to_string();
    let flags = ["--ticket-keys", &k, "--accept-proxy"];
    let one = Server::start(&flags);
    let two = Server::start(&flags);
    let lb = haproxy_tcp_balancer(&[one.port, two.port]);

    // Round-robin: each first connection lands on one, each second on two.
    for version in ["-tls1_3", "-tls1_2"] {
        let sess = dir.path().join(format!("sess{version}"));
        assert!(!connect(lb.port, version, Some(&sess), None));
        assert!(
            connect(lb.port, version, None, Some(&sess)),
            "{version}: the session from one server did not resume on the other"
        );
    }
    drop(lb);
    let (s1, r1) = one.stop();
    let (s2, r2) = two.stop();
    assert!(s1.success() && s2.success());
    // One server made both sessions and the other resumed both: the
    // sessions crossed. (Which one went first depends on where HAProxy's
    // round-robin stood after its start-up probe.)
    let mut counts = [handshakes(&r1), handshakes(&r2)];
    counts.sort();
    assert_eq!(counts, [(0, 2), (2, 0)], "{r1}\n{r2}");
}

#[test]
fn servers_with_other_keys_do_not_resume_each_others_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.key"), dir.path().join("b.key"));
    key_file(&a, 2);
    key_file(&b, 3);
    let (a, b) = (a.display().to_string(), b.display().to_string());
    let one = Server::start(&["--ticket-keys", &a, "--accept-proxy"]);
    let two = Server::start(&["--ticket-keys", &b, "--accept-proxy"]);
    let lb = haproxy_tcp_balancer(&[one.port, two.port]);
    let sess = dir.path().join("sess");
    assert!(!connect(lb.port, "-tls1_3", Some(&sess), None));
    assert!(!connect(lb.port, "-tls1_3", None, Some(&sess)));
    drop(lb);
    one.stop();
    two.stop();
}

#[test]
fn rotated_keys_resume_while_listed_and_not_after() {
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (dir.path().join("old.key"), dir.path().join("new.key"));
    key_file(&old, 4);
    key_file(&new, 5);
    let config = dir.path().join("tlsfront.toml");
    let write = |keys: &[&str]| {
        let list: Vec<String> = keys.iter().map(|k| format!("{k:?}")).collect();
        std::fs::write(
            &config,
            format!(
                "ticket_keys = [{}]\nroot = {:?}\n",
                list.join(", "),
                common::fixture().root.display().to_string()
            ),
        )
        .unwrap();
    };
    write(&["old.key"]);
    let server = Server::run(&config, &[]);
    let sess = dir.path().join("sess");
    assert!(!connect(server.port, "-tls1_3", Some(&sess), None));

    // The new key encrypts, the old one still decrypts.
    write(&["new.key", "old.key"]);
    server.reload();
    // The reload's last line: the new keys are in use once it is out.
    let out = server.wait_for_output("reloaded ", 1);
    assert!(out.contains("ticket keys replaced"), "{out}");
    assert!(connect(server.port, "-tls1_3", None, Some(&sess)));

    // The old key gone: its tickets no longer resume.
    write(&["new.key"]);
    server.reload();
    let out = server.wait_for_output("reloaded ", 2);
    assert_eq!(out.matches("ticket keys replaced").count(), 2, "{out}");
    assert!(!connect(server.port, "-tls1_3", None, Some(&sess)));
    // A broken key file is refused with the reload; the keys stay.
    std::fs::write(&new, b"short").unwrap();
    server.reload();
    let log = server.wait_for_log("reload failed");
    assert!(
        log.contains("new.key") && log.contains("openssl rand 80"),
        "{log}"
    );
    server.stop();
}
