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
