//! A fleet node taking over the order of a node that died mid-order
//! (issue 29; docs/design/fleet.md §3, "An order under the lock"): the
//! fleet's one ACME account, the order record in etcd, and the order
//! finished by another node rather than placed twice.

mod common;

use common::etcd::{EtcdCluster, EtcdOptions};
use common::fleet::{got_certificate, load, node_config, pebble_root, served_by_all};
use common::pebble::{free_tcp_port, start_pebble_issuing_for};
use common::peers::haproxy_tcp_balancer;
use common::{wait_until, Server, WAIT};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

/// Pebble's validation port: every connection is accepted and held until
/// [`Gate::open`] names the port to relay it to (the balancer in front of
/// the nodes), so that the CA's validation of an order waits while the
/// test kills the node that placed it.
struct Gate {
    port: u16,
    to: Arc<(Mutex<Option<u16>>, Condvar)>,
    held: Arc<AtomicUsize>,
}

impl Gate {
    fn new() -> Gate {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let to: Arc<(Mutex<Option<u16>>, Condvar)> = Arc::default();
        let held = Arc::new(AtomicUsize::new(0));
        let (t, h) = (to.clone(), held.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                h.fetch_add(1, Ordering::SeqCst);
                let t = t.clone();
                std::thread::spawn(move || {
                    let (lock, opened) = &*t;
                    let mut to = lock.lock().unwrap();
                    while to.is_none() {
                        to = opened.wait(to).unwrap();
                    }
                    let port = to.unwrap();
                    drop(to);
                    relay(conn, port);
                });
            }
        });
        Gate { port, to, held }
    }

    /// Connections held (or relayed) so far.
    fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    /// Relay what is held, and what comes, to `port`.
    fn open(&self, port: u16) {
        *self.to.0.lock().unwrap() = Some(port);
        self.to.1.notify_all();
    }
}

/// Copy both ways between `a` and a new connection to `port`.
fn relay(a: TcpStream, port: u16) {
    let Ok(b) = TcpStream::connect(("127.0.0.1", port)) else {
        return;
    };
    let pipe = |mut from: TcpStream, mut to: TcpStream| {
        std::thread::spawn(move || {
            let mut buf = [0u8; 16 * 1024];
            while let Ok(n) = from.read(&mut buf) {
                if n == 0 || to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            let _ = to.shutdown(Shutdown::Write);
        })
    };
    pipe(a.try_clone().unwrap(), b.try_clone().unwrap());
    pipe(b, a);
}

/// The etcd keys under `prefix`.
fn etcd_keys(etcd: &EtcdCluster, prefix: &str) -> Vec<String> {
    let out = etcd.etcdctl(&["get", "--prefix", "--keys-only", prefix]);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// Three nodes on one account. The node holding the order lock places the
/// order, keeps its record in etcd and asks the CA to validate; the CA's
/// validation is held, and the node is killed (SIGKILL) there. Once its
/// lock has gone with its lease, another node takes the lock, finds the
/// record and finishes that same order with the fleet's account: one
/// account, one order, one certificate, served by both survivors.
#[test]
fn a_node_finishes_the_order_of_a_node_that_died_mid_order() {
    let t0 = Instant::now();
    let etcd = EtcdCluster::start(1, EtcdOptions::default());
    let dir = tempfile::tempdir().unwrap();
    let ports = [free_tcp_port(), free_tcp_port(), free_tcp_port()];
    let gate = Gate::new();
    let pebble = start_pebble_issuing_for(gate.port, None);
    let name = "takeover.fleet.test";
    let prefix = "/t-takeover/";
    let names = ["a", "b", "c"];
    let mut nodes: Vec<Option<Server>> = names
        .iter()
        .zip(ports)
        .map(|(node, port)| {
            // The shortest lease: a dead holder's lock goes soonest.
            let config = node_config(
                dir.path(),
                node,
                &pebble,
                &etcd,
                prefix,
                name,
                "lock_ttl = 10\n",
            );
            Some(Server::run(
                &config,
                &["--listen", &format!("127.0.0.1:{port}")],
            ))
        })
        .collect();

    // The order placed and recorded, its validation asked for and held.
    let holder = wait_until(WAIT, "an order record in etcd", || {
        let keys = etcd_keys(&etcd, prefix);
        let record = keys.iter().find(|k| k.contains("/order/"));
        let value = record.and_then(|k| etcd.get(k));
        match value.map(|v| serde_json::from_str::<serde_json::Value>(&v)) {
            Some(Ok(v)) if v["url"].is_string() => Ok(v["by"].as_str().unwrap().to_string()),
            _ => Err(format!("{keys:?}")),
        }
    });
    wait_until(WAIT, "the CA to start validating", || {
        if gate.held() > 0 {
            Ok(())
        } else {
            Err(pebble.log())
        }
    });
    let h = names.iter().position(|n| *n == holder).unwrap();
    let shared = etcd_keys(&etcd, prefix);
    assert!(
        shared.iter().any(|k| k.ends_with("/account")),
        "the account is not in etcd: {shared:?}"
    );
    // Clients of the survivors, through a balancer of their own, across
    // the kill and the takeover: none of their requests may fail. (The
    // killed node's own connections die with it: the balancer's problem,
    // not the fleet's.)
    let survivors: Vec<usize> = (0..3).filter(|&i| i != h).collect();
    let survivor_ports: Vec<u16> = survivors.iter().map(|&i| ports[i]).collect();
    let front = haproxy_tcp_balancer(&survivor_ports);
    let clients = load(front.port, name);
    clients.wait_runs(1);
    drop(nodes[h].take());
    eprintln!("holder {holder} killed after {:?}", t0.elapsed());

    // The CA's validation goes through to the survivors, which answer from
    // what the holder put in etcd.
    let lb = haproxy_tcp_balancer(&survivor_ports);
    gate.open(lb.port);

    let resuming = format!("fleet: resuming the order of {holder} for {name} (state ");
    let successor = wait_until(WAIT, "a survivor to resume the order", || {
        survivors
            .iter()
            .copied()
            .find(|&i| nodes[i].as_ref().unwrap().output().contains(&resuming))
            .ok_or_else(|| "not yet".to_string())
    });
    let m = nodes[successor].as_ref().unwrap().metrics();
    assert!(m.contains("tlsfront_fleet_lock_takeovers_total 1"), "{m}");
    wait_until(WAIT, "both survivors to have the certificate", || {
        let missing: Vec<&str> = survivors
            .iter()
            .filter(|&&i| !got_certificate(nodes[i].as_ref().unwrap(), name))
            .map(|&i| names[i])
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(format!("{missing:?} lack it"))
        }
    });
    eprintln!(
        "node {} finished the order after {:?}",
        names[successor],
        t0.elapsed()
    );

    let out = nodes[successor].as_ref().unwrap().output();
    let said = out.lines().find(|l| l.contains(&resuming)).unwrap();
    eprintln!("node {}: {said}", names[successor]);
    assert!(!out.contains("ACME account registered"), "{out}");
    assert_eq!(pebble.posts_to("/sign-me-up"), 1, "{}", pebble.log());
    assert_eq!(pebble.posts_to("/order-plz"), 1, "{}", pebble.log());
    assert_eq!(
        pebble.log().matches("Issued certificate serial").count(),
        1,
        "{}",
        pebble.log()
    );
    let left = etcd_keys(&etcd, prefix);
    assert!(
        !left.iter().any(|k| k.contains("/order/")),
        "the order record outlived the order: {left:?}"
    );
    let root = pebble_root(&pebble, dir.path());
    let served = served_by_all(&survivor_ports, name, &root);
    assert_eq!(served[0], served[1]);
    // Some of the clients' runs saw the new certificate.
    clients.wait_runs(1);
    clients.finish();
    drop((lb, front));
    for n in nodes.into_iter().flatten() {
        let (status, _) = n.stop();
        assert!(status.success());
    }
    eprintln!("took {:?}", t0.elapsed());
}
