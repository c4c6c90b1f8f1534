//! tlsfront's fleet on a real etcd cluster (issue 29; docs/design/fleet.md
//! §7). The harness self-tests come first (`harness_*`): Debian's etcd as
//! tests/common/etcd.rs runs it, with nothing of tlsfront yet, so a fleet
//! test failing here can be told apart from the cluster misbehaving.

mod common;

use common::etcd::{EtcdCluster, EtcdOptions};
use common::{wait_until, WAIT};
use std::time::{Duration, Instant};

/// etcdctl's bound where it must fail: it says a connection failed only
/// when the bound runs out.
const SHORT: Duration = Duration::from_secs(2);

/// Three members: a put through one is read from another's own store; the
/// leader killed, the others elect one and take puts; the killed member
/// restarted catches up; every member stopped and started again, nothing
/// is lost.
#[test]
fn harness_etcd_cluster_survives_leader_kill_and_restarts() {
    let t0 = Instant::now();
    let mut etcd = EtcdCluster::start(3, EtcdOptions::default());
    eprintln!("etcd: 3 members healthy after {:?}", t0.elapsed());
    assert_eq!(etcd.endpoints().len(), 3);
    assert!(etcd
        .endpoints()
        .iter()
        .all(|e| e.starts_with("http://127.0.0.1:")));

    etcd.put_via(0, "/harness/one", "through member 0");
    wait_until(WAIT, "member 2 to have /harness/one", || {
        match etcd.get_from(2, "/harness/one") {
            Some(v) if v == "through member 0" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });

    let old = etcd.leader();
    let t = Instant::now();
    etcd.kill(old);
    // Only a running member is named: the other two have elected it.
    let new = etcd.leader();
    eprintln!(
        "etcd: leader {old} killed, {new} elected after {:?}",
        t.elapsed()
    );
    etcd.put("/harness/two", "after the leader died");
    assert_eq!(
        etcd.get("/harness/two").as_deref(),
        Some("after the leader died")
    );

    let t = Instant::now();
    etcd.start_member(old);
    wait_until(
        WAIT,
        format!("restarted member {old} to catch up"),
        || match etcd.get_from(old, "/harness/two") {
            Some(v) if v == "after the leader died" => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    eprintln!(
        "etcd: member {old} restarted and caught up after {:?}",
        t.elapsed()
    );
    // It rejoined as the member it was: all three name one leader.
    etcd.leader();

    let t = Instant::now();
    etcd.stop_all();
    assert!(etcd.running_members().is_empty());
    let refused = etcd
        .ctl()
        .on(0)
        .timeout(SHORT)
        .run(&["get", "/harness/one"]);
    assert!(!refused.status.success(), "member 0 answers while stopped");
    etcd.start_all();
    eprintln!("etcd: all stopped and started again in {:?}", t.elapsed());
    for i in 0..3 {
        assert_eq!(
            etcd.get_from(i, "/harness/one").as_deref(),
            Some("through member 0")
        );
        assert_eq!(
            etcd.get_from(i, "/harness/two").as_deref(),
            Some("after the leader died")
        );
    }
    eprintln!("etcd: cluster self-test took {:?}", t0.elapsed());
}

/// TLS: etcdctl with the client certificate is answered, without it the
/// member refuses the handshake. Auth: a wrong password is refused, and
/// user `tlsfront` writes its prefix only. Both: the client certificate
/// alone makes a client that user.
#[test]
fn harness_etcd_tls_and_auth_variants() {
    let t0 = Instant::now();
    let etcd = EtcdCluster::start(3, EtcdOptions::default().with_tls());
    eprintln!("etcd: 3 TLS members healthy after {:?}", t0.elapsed());
    assert!(etcd
        .endpoints()
        .iter()
        .all(|e| e.starts_with("https://127.0.0.1:")));
    let tls = etcd.tls.clone().unwrap();
    assert!(tls.ca.is_file() && tls.client_cert.is_file() && tls.client_key.is_file());
    etcd.put_via(0, "/harness/tls", "with a client certificate");
    assert_eq!(
        etcd.get_from(2, "/harness/tls").as_deref(),
        Some("with a client certificate")
    );
    let refused = etcd
        .ctl()
        .without_cert()
        .on(1)
        .timeout(SHORT)
        .run(&["get", "/harness/tls"]);
    assert!(
        !refused.status.success(),
        "a client without a certificate was answered: {}",
        String::from_utf8_lossy(&refused.stdout)
    );
    // Refused for the missing certificate, by the member.
    wait_until(WAIT, "member 1 to log the refused handshake", || {
        if etcd.log(1).contains("client didn't provide a certificate") {
            Ok(())
        } else {
            Err(etcd.log_tails())
        }
    });
    drop(etcd);

    let t1 = Instant::now();
    let etcd = EtcdCluster::start(1, EtcdOptions::default().with_auth("/tlsfront/"));
    eprintln!("etcd: 1 member with auth ready after {:?}", t1.elapsed());
    let auth = etcd.auth.clone().unwrap();
    assert_eq!(auth.user, "tlsfront");
    let user = || etcd.ctl().user(&auth.user, &auth.password);
    let put = user().run(&["put", "/tlsfront/a", "mine"]);
    common::etcd::ok(&put, "put in the user's prefix");
    assert_eq!(etcd.get("/tlsfront/a").as_deref(), Some("mine"));

    let wrong =
        etcd.ctl()
            .user(&auth.user, "not-the-password")
            .run(&["put", "/tlsfront/a", "wrong"]);
    let said = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        !wrong.status.success() && said.contains("authentication failed"),
        "a wrong password: {said}"
    );
    for args in [
        ["put", "/elsewhere", "no"].as_slice(),
        &["get", "/elsewhere"],
    ] {
        let out = user().run(args);
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && said.contains("permission denied"),
            "{args:?} outside the prefix: {said}"
        );
    }
    let anonymous = etcd.ctl().anonymous().run(&["put", "/tlsfront/a", "anon"]);
    let said = String::from_utf8_lossy(&anonymous.stderr);
    assert!(
        !anonymous.status.success() && said.contains("user name is empty"),
        "a put without a user: {said}"
    );
    // Root may write anywhere; the refusals above left the value alone.
    etcd.put("/elsewhere", "root's");
    assert_eq!(etcd.get("/tlsfront/a").as_deref(), Some("mine"));
    drop(etcd);

    // Both: a client with the certificate and no password is user
    // `tlsfront`, by the certificate's CN.
    let etcd = EtcdCluster::start(1, EtcdOptions::default().with_tls().with_auth("/tlsfront/"));
    let by_cert = || etcd.ctl().anonymous();
    common::etcd::ok(
        &by_cert().run(&["put", "/tlsfront/b", "by cert"]),
        "put by CN",
    );
    assert_eq!(etcd.get("/tlsfront/b").as_deref(), Some("by cert"));
    let out = by_cert().run(&["put", "/elsewhere", "no"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("permission denied"),
        "a put outside the prefix by CN: {said}"
    );
    eprintln!("etcd: TLS and auth self-test took {:?}", t0.elapsed());
}

// ---- tlsfront nodes on the cluster ----

use common::fleet::{got_certificate, node_config, pebble_root, served_by_all};
use common::pebble::{free_tcp_port, start_pebble_issuing_for};
use common::peers::haproxy_tcp_balancer;
use common::Server;
use std::path::Path;

/// How soon after one node has a renewed certificate every node serves it:
/// a watch round trip, a state-directory write and a rebuild of the sites
/// each (well under a second on loopback), and the polling's own
/// handshakes. Generous for a loaded machine; docs/FLEET.md states it.
const PROPAGATION: Duration = Duration::from_secs(10);

/// When pebble issued each certificate, as seconds of the day, from its
/// log's `Pebble YYYY/MM/DD HH:MM:SS Issued certificate serial …` lines.
fn issue_times(log: &str) -> Vec<u64> {
    log.lines()
        .filter(|l| l.contains("Issued certificate serial"))
        .filter_map(|l| {
            let time = l.split_whitespace().nth(2)?;
            let mut hms = time.split(':').map(|x| x.parse::<u64>().ok());
            Some(hms.next()?? * 3600 + hms.next()?? * 60 + hms.next()??)
        })
        .collect()
}

/// Three nodes behind HAProxy (TCP, PROXY v2), each able to order, the CA
/// validating through HAProxy (so at whichever node it lands): one order
/// for the whole fleet, the same certificate on every node, validation
/// answered wherever it arrives; then the renewal, again once, reaches
/// every node without a reload.
#[test]
fn fleet_orders_each_certificate_once_and_every_node_serves_it() {
    let etcd = EtcdCluster::start(3, EtcdOptions::default());
    let dir = tempfile::tempdir().unwrap();
    let ports = [free_tcp_port(), free_tcp_port(), free_tcp_port()];
    let lb = haproxy_tcp_balancer(&ports);
    // Short-lived: renewed two thirds in, within the test.
    let pebble = start_pebble_issuing_for(lb.port, Some(Duration::from_secs(40)));
    let name = "once.fleet.test";
    let nodes: Vec<Server> = ["a", "b", "c"]
        .iter()
        .zip(ports)
        .map(|(node, port)| {
            let config = node_config(dir.path(), node, &pebble, &etcd, "/t-once/", name, "");
            Server::run(&config, &["--listen", &format!("127.0.0.1:{port}")])
        })
        .collect();
    wait_until(WAIT, "every node to have the certificate", || {
        let missing: Vec<usize> = (0..3)
            .filter(|&i| !got_certificate(&nodes[i], name))
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!("nodes {missing:?} lack it"))
        }
    });
    let issuers: Vec<usize> = (0..3)
        .filter(|&i| {
            nodes[i]
                .output()
                .contains(&format!("for {name}, valid until"))
        })
        .collect();
    assert_eq!(issuers.len(), 1, "one node orders: {issuers:?}");
    assert_eq!(pebble.posts_to("/order-plz"), 1, "{}", pebble.log());
    let root = pebble_root(&pebble, dir.path());
    let first = served_by_all(&ports, name, &root);
    assert!(first.iter().all(|f| *f == first[0]), "{first:?}");

    // The renewal: one more order, and every node serves the new one
    // within a bound of its issue (stated in docs/FLEET.md): from the
    // issuing node's line to the last node serving it, polled.
    wait_until(WAIT, "a node to renew the certificate", || {
        let issued: usize = nodes
            .iter()
            .map(|n| {
                n.output()
                    .matches(&format!("for {name}, valid until"))
                    .count()
            })
            .sum();
        if issued >= 2 {
            Ok(())
        } else {
            Err(format!("{issued} issued"))
        }
    });
    let renewed = Instant::now();
    wait_until(WAIT, "every node to serve the renewed certificate", || {
        let now = served_by_all(&ports, name, &root);
        if now.iter().all(|f| *f != first[0]) {
            Ok(())
        } else {
            Err(format!("{now:?}"))
        }
    });
    let spread = renewed.elapsed();
    eprintln!("renewal on every node {spread:?} after the issuing node said so");
    assert!(spread < PROPAGATION, "{spread:?}");
    let now = served_by_all(&ports, name, &root);
    assert!(now.iter().all(|f| *f == now[0]), "{now:?}");
    // No renewal was ordered twice: pebble issued each certificate at
    // least half a lifetime after the one before (a second node ordering
    // the same renewal would come seconds after the first).
    let times = issue_times(&pebble.log());
    assert_eq!(
        times.len(),
        pebble.posts_to("/order-plz"),
        "{}",
        pebble.log()
    );
    assert!(
        // (A run across midnight wraps once.)
        times
            .windows(2)
            .all(|w| (w[1] + 86_400 - w[0]) % 86_400 >= 15),
        "issued at {times:?} (seconds of the day): {}",
        pebble.log()
    );
    drop(lb);
    for n in nodes {
        let (status, _) = n.stop();
        assert!(status.success());
    }
}

/// One node orders; the two others never do (`order = false`) and alone
/// sit behind the balancer the CA validates through: the order succeeds
/// only because they answer from what the first node put in etcd.
#[test]
fn fleet_nodes_answer_the_validation_of_another_nodes_order() {
    let etcd = EtcdCluster::start(3, EtcdOptions::default());
    let dir = tempfile::tempdir().unwrap();
    let ports = [free_tcp_port(), free_tcp_port(), free_tcp_port()];
    let lb = haproxy_tcp_balancer(&ports[1..]);
    let pebble = start_pebble_issuing_for(lb.port, None);
    let name = "answers.fleet.test";
    let nodes: Vec<Server> = ["a", "b", "c"]
        .iter()
        .zip(ports)
        .map(|(node, port)| {
            let extra = if *node == "a" { "" } else { "order = false\n" };
            let config = node_config(dir.path(), node, &pebble, &etcd, "/t-answer/", name, extra);
            Server::run(&config, &["--listen", &format!("127.0.0.1:{port}")])
        })
        .collect();
    nodes[0].wait_for_output(&format!("for {name}, valid until"), 1);
    for n in &nodes[1..] {
        n.wait_for_output(
            &format!("fleet: certificate for {name} from node a stored"),
            1,
        );
        assert!(
            n.output().contains("this node does not order"),
            "{}",
            n.output()
        );
    }
    assert_eq!(pebble.posts_to("/order-plz"), 1, "{}", pebble.log());
    for (i, n) in nodes.iter().enumerate() {
        let m = n.metrics();
        assert!(m.contains("tlsfront_fleet_etcd_up 1"), "{m}");
        let applied = if i == 0 { 0 } else { 1 };
        assert!(
            m.contains(&format!(
                "tlsfront_fleet_certificates_applied_total {applied}"
            )),
            "{m}"
        );
        assert!(m.contains("tlsfront_fleet_order_locks_held 0"), "{m}");
    }
    let fp = served_by_all(&ports, name, &pebble_root(&pebble, dir.path()));
    assert!(fp.iter().all(|f| *f == fp[0]), "{fp:?}");
    drop(lb);
}

/// `config check` with `[fleet]`: every member reached and described, and
/// the node's access to its prefix checked, over TLS with a client
/// certificate and etcd's users; each wrong setting named with its fix.
#[test]
fn config_check_reaches_etcd_and_names_what_is_wrong() {
    let etcd = EtcdCluster::start(1, EtcdOptions::default().with_tls().with_auth("/t-check/"));
    let tls = etcd.tls.clone().unwrap();
    let auth = etcd.auth.clone().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("fleet.key");
    std::fs::write(&key, common::content(32, 7)).unwrap();
    let password = dir.path().join("etcd.password");
    std::fs::write(&password, format!("{}\n", auth.password)).unwrap();
    let wrong = dir.path().join("wrong.password");
    std::fs::write(&wrong, "not-it\n").unwrap();
    let config = |endpoints: &[String], extra: &str| {
        let path = dir.path().join("check.toml");
        let endpoints: Vec<String> = endpoints.iter().map(|e| format!("{e:?}")).collect();
        std::fs::write(
            &path,
            format!(
                "root = {:?}\n[fleet]\nendpoints = [{}]\nkey_files = [{:?}]\nnode = \"n1\"\n{extra}",
                dir.path().display().to_string(),
                endpoints.join(", "),
                key.display().to_string()
            ),
        )
        .unwrap();
        common::config_check(&path)
    };
    let tls_lines = format!(
        "ca = {:?}\ncert = {:?}\nkey = {:?}\n",
        tls.ca.display().to_string(),
        tls.client_cert.display().to_string(),
        tls.client_key.display().to_string()
    );
    let user = |file: &Path| {
        format!(
            "user = \"{}\"\npassword_file = {:?}\n",
            auth.user,
            file.display().to_string()
        )
    };
    let endpoints = etcd.endpoints();

    let (ok, out) = config(
        &endpoints,
        &format!("{tls_lines}{}prefix = \"/t-check/\"\n", user(&password)),
    );
    assert!(ok, "{out}");
    assert!(out.contains(": version 3."), "{out}");
    let id = out
        .lines()
        .find_map(|l| l.strip_prefix("fleet: key files: "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(id.ends_with(&format!("({}, seals)", key.display())), "{id}");
    assert!(out.contains(", leader, database "), "{out}");
    assert!(
        out.contains(&format!(
            "node n1 reads and writes /t-check/ (0 keys there now), as etcd user {}",
            auth.user
        )),
        "{out}"
    );
    // The write check wrote nothing.
    assert_eq!(etcd.get("/t-check/nodes/n1"), None);

    let (ok, out) = config(
        &endpoints,
        &format!("{tls_lines}{}prefix = \"/t-check/\"\n", user(&wrong)),
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("check [fleet] user and the password in password_file"),
        "{out}"
    );

    let (ok, out) = config(
        &endpoints,
        &format!("{tls_lines}{}prefix = \"/elsewhere/\"\n", user(&password)),
    );
    assert!(!ok, "{out}");
    assert!(out.contains("etcdctl role grant-permission"), "{out}");

    // etcd's own CA not given: the server's certificate is not trusted.
    let other = common::Ca::named("not etcd's");
    let (other_ca, _) = other.issue("x.pem", &["x.test".to_string()], false);
    let (ok, out) = config(
        &endpoints,
        &format!(
            "ca = {:?}\ncert = {:?}\nkey = {:?}\n{}prefix = \"/t-check/\"\n",
            other_ca.display().to_string(),
            tls.client_cert.display().to_string(),
            tls.client_key.display().to_string(),
            user(&password)
        ),
    );
    assert!(!ok, "{out}");
    assert!(out.contains("check [fleet] ca"), "{out}");

    // Nothing listens there.
    let dead = format!("https://127.0.0.1:{}", free_tcp_port());
    let (ok, out) = config(
        std::slice::from_ref(&dead),
        &format!("{tls_lines}{}", user(&password)),
    );
    assert!(!ok, "{out}");
    assert!(out.contains(&format!("etcd at {dead}")), "{out}");
    assert!(out.contains("check [fleet] endpoints"), "{out}");

    // A key file that is not 32 raw bytes.
    std::fs::write(&key, "not a key\n").unwrap();
    let (ok, out) = config(&endpoints, &format!("{tls_lines}{}", user(&password)));
    assert!(!ok, "{out}");
    assert!(
        out.contains("has 10 bytes, expected exactly 32 raw bytes"),
        "{out}"
    );

    // Settings refused before anything is reached.
    let (ok, out) = config(&endpoints, "");
    assert!(!ok && out.contains("setting [fleet] ca"), "{out}");
}

// ---- faults, each under load through HAProxy (issue 29, "Faults") ----

use common::fleet::{
    load, metric, node_config_on, served, served_as_of, try_served, wait_etcd_up, EtcdProxy, Load,
};

/// Short-lived certificates for the fault tests: the renewal (two thirds
/// in) falls due within the test, late enough that the setup before the
/// fault is done by then on a loaded machine.
const SHORT_LIVED: Duration = Duration::from_secs(45);

/// Shorter still, where a renewal before the fault changes nothing.
const SHORTER_LIVED: Duration = Duration::from_secs(30);

/// Nodes a, b, c, … on `ports`, node `i` reaching etcd at `endpoints(i)`.
fn start_nodes(
    dir: &Path,
    pebble: &common::pebble::Pebble,
    ports: &[u16],
    endpoints: impl Fn(usize) -> Vec<String>,
    prefix: &str,
    name: &str,
) -> Vec<Server> {
    ports
        .iter()
        .enumerate()
        .map(|(i, port)| start_node(dir, pebble, i, *port, &endpoints(i), prefix, name))
        .collect()
}

/// Three nodes on a 3-member etcd behind one balancer, which pebble
/// (issuing certificates valid for `life`) validates through, each with
/// the certificate for `name`.
struct Fleet3 {
    etcd: EtcdCluster,
    dir: tempfile::TempDir,
    ports: [u16; 3],
    lb: common::peers::Peer,
    pebble: common::pebble::Pebble,
    nodes: Vec<Server>,
    /// Pebble's root, in a file.
    root: std::path::PathBuf,
}

impl Fleet3 {
    fn start(name: &str, prefix: &str, life: Duration) -> Fleet3 {
        let etcd = EtcdCluster::start(3, EtcdOptions::default());
        let dir = tempfile::tempdir().unwrap();
        let ports = [free_tcp_port(), free_tcp_port(), free_tcp_port()];
        let lb = haproxy_tcp_balancer(&ports);
        let pebble = start_pebble_issuing_for(lb.port, Some(life));
        let endpoints = etcd.endpoints();
        let nodes = start_nodes(
            dir.path(),
            &pebble,
            &ports,
            |_| endpoints.clone(),
            prefix,
            name,
        );
        wait_all_got(&nodes.iter().collect::<Vec<_>>(), name);
        let root = pebble_root(&pebble, dir.path());
        Fleet3 {
            etcd,
            dir,
            ports,
            lb,
            pebble,
            nodes,
            root,
        }
    }
}

/// Node `i` (named a, b, c, …) on `port`.
fn start_node(
    dir: &Path,
    pebble: &common::pebble::Pebble,
    i: usize,
    port: u16,
    endpoints: &[String],
    prefix: &str,
    name: &str,
) -> Server {
    let node = ((b'a' + i as u8) as char).to_string();
    let config = node_config_on(dir, &node, pebble, endpoints, prefix, name, "");
    Server::run(&config, &["--listen", &format!("127.0.0.1:{port}")])
}

/// Wait until every node has the certificate for `name`.
fn wait_all_got(nodes: &[&Server], name: &str) {
    wait_until(WAIT, "every node to have the certificate", || {
        let missing: Vec<usize> = (0..nodes.len())
            .filter(|&i| !got_certificate(nodes[i], name))
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!("nodes {missing:?} lack it"))
        }
    });
}

/// Wait until each of `ports` serves one certificate, none of `old`: the
/// new one.
///
/// A node may serve an expired certificate meanwhile (a short-lived one,
/// renewed late because etcd was away): that is waited out too.
fn wait_all_serve_new(ports: &[u16], name: &str, root: &Path, old: &[String]) -> String {
    wait_until(WAIT, "every node to serve the renewed certificate", || {
        let now: Vec<Result<String, String>> =
            ports.iter().map(|&p| try_served(p, name, root)).collect();
        match &now[..] {
            [Ok(f), ..]
                if now
                    .iter()
                    .all(|n| n.as_ref().is_ok_and(|g| g == f && !old.contains(g))) =>
            {
                Ok(f.clone())
            }
            _ => Err(format!("{now:?}, old {old:?}")),
        }
    })
}

fn stop_all(nodes: Vec<Server>) {
    for n in nodes {
        let (status, _) = n.stop();
        assert!(status.success());
    }
}

/// The etcd leader killed under load: no request fails, every node has a
/// session with etcd again, and the renewal that follows is one order
/// whose certificate every node serves.
#[test]
fn fleet_keeps_serving_and_renewing_when_the_etcd_leader_is_killed() {
    let t0 = Instant::now();
    let Fleet3 {
        mut etcd,
        // Kept to the end: the nodes' files are in it.
        dir: _dir,
        ports,
        lb,
        pebble,
        nodes,
        root,
    } = Fleet3::start("leader.fleet.test", "/t-leader/", SHORTER_LIVED);
    let name = "leader.fleet.test";
    let all: Vec<&Server> = nodes.iter().collect();
    let load = load(lb.port, name);
    load.wait_runs(1);

    let before = served_by_all(&ports, name, &root);
    let orders = pebble.posts_to("/order-plz");
    let leader = etcd.leader();
    etcd.kill(leader);
    let new = etcd.leader();
    eprintln!("etcd: leader {leader} killed, {new} elected");
    wait_etcd_up(&all, true);
    load.wait_runs(2);

    wait_all_serve_new(&ports, name, &root, &before);
    assert_eq!(
        pebble.posts_to("/order-plz"),
        orders + 1,
        "one order for the renewal: {}",
        pebble.log()
    );
    load.finish();
    stop_all(nodes);
    eprintln!("leader killed: took {:?}", t0.elapsed());
}

/// All of etcd stopped under load while a renewal falls due: no request
/// fails, every node says once that it lost etcd and that the renewal
/// waits for the lock, and nothing is ordered; etcd back, the renewal is
/// one order and every node serves its certificate.
#[test]
fn fleet_orders_nothing_while_etcd_is_down_and_renews_once_it_is_back() {
    let t0 = Instant::now();
    let Fleet3 {
        mut etcd,
        // Kept to the end: the nodes' files are in it.
        dir: _dir,
        ports,
        lb,
        pebble,
        nodes,
        root,
    } = Fleet3::start("down.fleet.test", "/t-down/", SHORT_LIVED);
    let name = "down.fleet.test";
    let all: Vec<&Server> = nodes.iter().collect();
    let first = served_by_all(&ports, name, &root);
    let seen = std::time::SystemTime::now();
    assert!(first.iter().all(|f| *f == first[0]), "{first:?}");
    let orders = pebble.posts_to("/order-plz");
    assert_eq!(orders, 1, "{}", pebble.log());
    let load = load(lb.port, name);
    load.wait_runs(1);

    etcd.stop_all();
    let lost = "fleet: lost etcd (";
    let waits = format!("fleet: {name}: due, and not ordered: an order needs the fleet's lock");
    for n in &nodes {
        n.wait_for_output(lost, 1);
    }
    wait_etcd_up(&all, false);
    for n in &nodes {
        n.wait_for_output(&waits, 1);
    }
    load.wait_runs(2);
    assert_eq!(pebble.posts_to("/order-plz"), orders, "{}", pebble.log());
    for p in ports {
        assert_eq!(served_as_of(p, name, &root, seen), first[0]);
    }

    etcd.start_all();
    for n in &nodes {
        n.wait_for_output("fleet: etcd reachable again after ", 1);
    }
    wait_all_serve_new(&ports, name, &root, &first);
    assert_eq!(
        pebble.posts_to("/order-plz"),
        orders + 1,
        "one order for the renewal: {}",
        pebble.log()
    );
    for n in &nodes {
        let out = n.output();
        assert_eq!(out.matches(lost).count(), 1, "{out}");
        assert_eq!(out.matches(&waits).count(), 1, "{out}");
    }
    load.finish();
    stop_all(nodes);
    eprintln!("etcd stopped: took {:?}", t0.elapsed());
}

/// etcd down at start: a node restarted serves the certificate in its
/// state directory at once and says so; a fresh node serves the
/// placeholder and orders nothing; etcd back, the fresh node gets the
/// fleet's certificate. The balancer (under load throughout) fronts a and
/// b, which keep running; c and d are reached directly.
#[test]
fn fleet_node_starts_without_etcd_from_its_local_copy() {
    let t0 = Instant::now();
    let mut etcd = EtcdCluster::start(3, EtcdOptions::default());
    let dir = tempfile::tempdir().unwrap();
    let ports = [
        free_tcp_port(),
        free_tcp_port(),
        free_tcp_port(),
        free_tcp_port(),
    ];
    let lb = haproxy_tcp_balancer(&ports[..2]);
    let pebble = start_pebble_issuing_for(lb.port, None);
    let name = "start.fleet.test";
    let prefix = "/t-start/";
    let endpoints = etcd.endpoints();
    let mut nodes = start_nodes(
        dir.path(),
        &pebble,
        &ports[..3],
        |_| endpoints.clone(),
        prefix,
        name,
    );
    wait_all_got(&nodes.iter().collect::<Vec<_>>(), name);
    let root = pebble_root(&pebble, dir.path());
    let first = served_by_all(&ports[..3], name, &root);
    assert!(first.iter().all(|f| *f == first[0]), "{first:?}");
    assert_eq!(pebble.posts_to("/order-plz"), 1, "{}", pebble.log());
    let load = load(lb.port, name);
    load.wait_runs(1);

    etcd.stop_all();
    let (status, _) = nodes.pop().unwrap().stop();
    assert!(status.success());
    let c = start_node(dir.path(), &pebble, 2, ports[2], &endpoints, prefix, name);
    // At once: its listener is up, and it serves what it stored.
    assert_eq!(served(ports[2], name, &root), first[0]);
    c.wait_for_output("fleet: etcd unreachable at start (", 1);

    let d = start_node(dir.path(), &pebble, 3, ports[3], &endpoints, prefix, name);
    d.wait_for_output("fleet: etcd unreachable at start (", 1);
    d.wait_for_output(
        &format!("fleet: {name}: due, and not ordered: an order needs the fleet's lock"),
        1,
    );
    let placeholder = try_served(ports[3], name, &root);
    assert!(
        placeholder
            .as_ref()
            .is_err_and(|e| e.contains("UnknownIssuer")),
        "d serves a certificate pebble issued: {placeholder:?}"
    );
    assert_eq!(pebble.posts_to("/order-plz"), 1, "{}", pebble.log());
    load.wait_runs(2);

    etcd.start_all();
    d.wait_for_output(&format!("fleet: certificate for {name} from node "), 1);
    assert_eq!(served(ports[3], name, &root), first[0]);
    c.wait_for_output("fleet: etcd reachable again after ", 1);
    assert_eq!(
        served_by_all(&ports, name, &root),
        vec![first[0].clone(); 4]
    );
    assert_eq!(pebble.posts_to("/order-plz"), 1, "{}", pebble.log());
    load.finish();
    nodes.extend([c, d]);
    stop_all(nodes);
    eprintln!("start without etcd: took {:?}", t0.elapsed());
}

/// The current revision of the cluster.
fn etcd_revision(etcd: &EtcdCluster) -> i64 {
    let out = common::etcd::ok(&etcd.etcdctl(&["get", "/", "-w", "json"]), "get");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    v["header"]["revision"]
        .as_i64()
        .unwrap_or_else(|| panic!("no revision in {out}"))
}

/// Node c reaches etcd only through an HAProxy of its own, which is cut:
/// c keeps serving its certificate while a and b renew (validation goes
/// to a and b only: c, away, could not answer it), without a failed
/// request; etcd compacted past c's revision, then healed: c finds its
/// watch's revision compacted, reads the prefix again and serves the new
/// certificate; one order for the renewal.
#[test]
fn fleet_node_partitioned_from_etcd_catches_up_after_compaction() {
    let t0 = Instant::now();
    let etcd = EtcdCluster::start(3, EtcdOptions::default());
    let proxy = EtcdProxy::start(&etcd);
    let dir = tempfile::tempdir().unwrap();
    let ports = [free_tcp_port(), free_tcp_port(), free_tcp_port()];
    let lb = haproxy_tcp_balancer(&ports);
    let validation = haproxy_tcp_balancer(&ports[..2]);
    let pebble = start_pebble_issuing_for(validation.port, Some(SHORTER_LIVED));
    let name = "partition.fleet.test";
    let prefix = "/t-part/";
    let (members, via_proxy) = (etcd.endpoints(), vec![proxy.endpoint()]);
    let nodes = start_nodes(
        dir.path(),
        &pebble,
        &ports,
        |i| {
            if i == 2 {
                via_proxy.clone()
            } else {
                members.clone()
            }
        },
        prefix,
        name,
    );
    let all: Vec<&Server> = nodes.iter().collect();
    wait_all_got(&all, name);
    let c = &nodes[2];
    let root = pebble_root(&pebble, dir.path());
    let first = served_by_all(&ports, name, &root);
    assert!(first.iter().all(|f| *f == first[0]), "{first:?}");
    assert_eq!(pebble.posts_to("/order-plz"), 1, "{}", pebble.log());
    wait_etcd_up(&all, true);
    let load: Load = load(lb.port, name);
    load.wait_runs(1);

    proxy.cut();
    c.wait_for_output("fleet: lost etcd (", 1);
    wait_etcd_up(&[c], false);
    // What c has from before the cut (a renewal may have come first).
    let held = served(ports[2], name, &root);
    let cut = std::time::SystemTime::now();
    wait_all_serve_new(&ports[..2], name, &root, std::slice::from_ref(&held));
    // Still: a short-lived certificate may have expired meanwhile.
    assert_eq!(served_as_of(ports[2], name, &root, cut), held);
    load.wait_runs(2);

    let away = metric(c, "tlsfront_fleet_revision");
    let now = etcd_revision(&etcd);
    assert!(now > away, "etcd at {now}, c at {away}");
    common::etcd::ok(&etcd.etcdctl(&["compact", &now.to_string()]), "compact");
    proxy.heal();
    let out = c.wait_for_output(&format!("reading {prefix} again"), 1);
    assert!(out.contains(&format!("was compacted (now {now})")), "{out}");
    // The renewed certificate, or (c's backoff being long) the next
    // renewal's: what a and b serve.
    wait_all_serve_new(&ports, name, &root, std::slice::from_ref(&held));
    wait_etcd_up(&all, true);
    // One order per renewal, none by c: as many orders as certificates
    // issued, all on a and b.
    let issued = |n: &Server| {
        n.output()
            .matches(&format!("for {name}, valid until"))
            .count()
    };
    let orders = pebble.posts_to("/order-plz");
    assert_eq!(issued(c), 0, "{}", c.output());
    assert_eq!(
        orders,
        issued(&nodes[0]) + issued(&nodes[1]),
        "{}",
        pebble.log()
    );
    assert!(orders >= 2, "{}", pebble.log());
    load.wait_runs(1);
    load.finish();
    drop(lb);
    stop_all(nodes);
    eprintln!("partition: took {:?}", t0.elapsed());
}
