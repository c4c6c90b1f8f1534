//! The fleet's session-ticket keys through etcd (issue 29): one node makes
//! and rotates them, every node installs them from the watch, a session
//! any node issued resumes on any other, before and after a rotation, and
//! when the node that makes them stops another takes over.

mod common;

use common::etcd::{EtcdCluster, EtcdOptions};
use common::fleet::connect;
use common::pebble::free_tcp_port;
use common::{wait_until, Server, WAIT};
use std::path::Path;

/// A node serving `dir/www` on its own port, in the fleet on `etcd`, with
/// ticket keys of 20 s (a ticket lives a period: long enough for the
/// s_client runs between its issue and its use even in the slow kTLS
/// guest) and locks of 10 s (the shortest allowed).
fn node(dir: &Path, etcd: &EtcdCluster, name: &str) -> Server {
    let www = dir.join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("index.html"), "fleet\n").unwrap();
    let key = dir.join("fleet.key");
    if !key.exists() {
        std::fs::write(&key, common::content(32, 11)).unwrap();
    }
    let endpoints: Vec<String> = etcd.endpoints().iter().map(|e| format!("{e:?}")).collect();
    let config = dir.join(format!("{name}.toml"));
    std::fs::write(
        &config,
        format!(
            "root = {:?}\nstate_dir = {:?}\nadmin = \"127.0.0.1:0\"\n[fleet]\n\
             endpoints = [{}]\nkey_files = [{:?}]\nnode = \"{name}\"\nprefix = \"/t-tickets/\"\n\
             ticket_period = 20\nlock_ttl = 10\n",
            www.display().to_string(),
            dir.join(format!("state-{name}")).display().to_string(),
            endpoints.join(", "),
            key.display().to_string(),
        ),
    )
    .unwrap();
    let listen = format!("127.0.0.1:{}", free_tcp_port());
    Server::run(&config, &["--listen", &listen])
}

/// A `tlsfront_fleet_*` gauge of `server`.
fn gauge(server: &Server, name: &str) -> i64 {
    let m = server.metrics();
    m.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} "))?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{m}"))
}

/// Wait until every node in `nodes` encrypts under the same fleet key,
/// later than period `after`; that period.
fn same_period(nodes: &[&Server], after: i64) -> i64 {
    let mut at = 0;
    wait_until(
        WAIT,
        format!("every node on a fleet ticket key after period {after}"),
        || {
            let p: Vec<i64> = nodes
                .iter()
                .map(|n| gauge(n, "tlsfront_fleet_ticket_period"))
                .collect();
            if p[0] > after && p.iter().all(|x| *x == p[0]) {
                at = p[0];
                Ok(())
            } else {
                Err(format!("{p:?}"))
            }
        },
    );
    at
}

/// Sessions made on `from` resume on each of `to`, in TLS 1.3 and 1.2.
fn resumes_across(dir: &Path, from: &Server, to: &[&Server], tag: &str) {
    for version in ["-tls1_3", "-tls1_2"] {
        let sess = dir.join(format!("sess-{tag}{version}"));
        let _ = std::fs::remove_file(&sess);
        assert!(!connect(from.port, version, Some(&sess), None));
        for n in to {
            assert!(
                connect(n.port, version, None, Some(&sess)),
                "{tag} {version}: a session from port {} did not resume on port {}",
                from.port,
                n.port
            );
        }
    }
}

#[test]
fn fleet_ticket_keys_resume_sessions_across_nodes_and_rotate() {
    let etcd = EtcdCluster::start(1, EtcdOptions::default());
    let dir = tempfile::tempdir().unwrap();
    let mut nodes: Vec<Server> = ["a", "b", "c"]
        .iter()
        .map(|n| node(dir.path(), &etcd, n))
        .collect();
    let all: Vec<&Server> = nodes.iter().collect();
    let first = same_period(&all, 0);
    // From here on the only TLS connections are the test's: in the kTLS
    // guest each must have been offloaded, resumed or not.
    let _serial = common::serial();
    let stat = common::StatDelta::start();
    let leaders: i64 = all
        .iter()
        .map(|n| gauge(n, "tlsfront_fleet_ticket_leader"))
        .sum();
    assert_eq!(leaders, 1, "one node makes the keys");
    resumes_across(dir.path(), all[0], &all[1..], "first");

    // The next period's key was written ahead: every node moves on to it.
    let second = same_period(&all, first);
    resumes_across(dir.path(), all[1], &[all[0], all[2]], "rotated");
    drop(all);

    // The node that makes the keys goes; its lead goes with its lease and
    // another node takes it, and the keys go on.
    let leader = (0..3)
        .find(|&i| gauge(&nodes[i], "tlsfront_fleet_ticket_leader") == 1)
        .unwrap();
    let (status, out) = nodes.remove(leader).stop();
    assert!(status.success());
    // Its lease revoked as it left: the lead is free at once.
    assert!(out.contains("fleet: left (lease revoked)"), "{out}");
    let rest: Vec<&Server> = nodes.iter().collect();
    wait_until(WAIT, "another node to make the ticket keys", || {
        let l: Vec<i64> = rest
            .iter()
            .map(|n| gauge(n, "tlsfront_fleet_ticket_leader"))
            .collect();
        if l.iter().sum::<i64>() == 1 {
            Ok(())
        } else {
            Err(format!("{l:?}"))
        }
    });
    // The stopped node wrote keys up to the period after the one it
    // stopped in: a key two periods past now is the new maker's.
    let now = same_period(&rest, second - 1);
    let ahead = format!("/t-tickets/tickets/20/{:020}", now + 2);
    wait_until(WAIT, format!("the new key maker to write {ahead}"), || {
        etcd.get(&ahead).map(drop).ok_or("not yet".to_string())
    });
    resumes_across(dir.path(), rest[0], &rest[1..], "new leader");
    // Three rounds: 2 versions × (one session made + the nodes resuming it).
    stat.assert_connections(2 * (3 + 3 + 2));
    let out = rest.iter().map(|n| n.output()).collect::<String>();
    assert!(
        out.contains("fleet: this node makes and rotates the fleet's ticket keys"),
        "{out}"
    );
}

/// Ticket key files and the fleet's keys are one or the other: both are
/// refused, naming the setting, before etcd is reached.
#[test]
fn ticket_key_files_are_refused_in_a_fleet() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("t.toml");
    std::fs::write(
        &config,
        "root = \"/tmp\"\nticket_keys = [\"/etc/tlsfront/ticket.key\"]\n[fleet]\n\
         endpoints = [\"http://127.0.0.1:1\"]\nkey_files = [\"/etc/tlsfront/fleet.key\"]\n",
    )
    .unwrap();
    let (ok, out) = common::config_check(&config);
    assert!(!ok, "{out}");
    assert!(
        out.contains(
            "line 2, setting ticket_keys: [fleet] shares session-ticket keys through etcd"
        ),
        "{out}"
    );
}
