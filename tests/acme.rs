//! `tlsfront::acme` against a real ACME server: Debian's `pebble` (Let's
//! Encrypt's test CA), which validates TLS-ALPN-01 by connecting to a
//! listener in this test, resolving the names through `pebble-challtestsrv`
//! (a mock DNS server answering 127.0.0.1 for every name). Everything runs
//! on loopback, on ports the kernel picked free, and on tokio's
//! current-thread runtime, as the server's workers do.
//!
//! Pebble's HTTPS (ACME and management) uses a certificate from a CA this
//! test makes (Debian ships no test certificate); `extra_roots` trusts it.
//! The `tlsfront_*` tests run tlsfront itself with `acme = true` sites:
//! issuance, renewal and a site added by reload, on tlsfront's own
//! listener, and HTTP-01 on its plain-HTTP one. Bookworm's pebble (2.4)
//! has no ACME Renewal Information (RFC 9773); the test of renewals in the
//! CA's window runs trixie's (2.6, `common::pebble::PEBBLE_ARI`), which
//! has. Neither lists certificate profiles. Pebble's start-up is in
//! tests/common/pebble.rs.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use common::pebble::{
    free_tcp_port, start_pebble, start_pebble_ari, start_pebble_http, start_pebble_issuing_for,
    start_pebble_with, Pebble,
};
use common::tool;
use tlsfront::acme::{self, AcmeError, AcmeSettings, Challenges, Issued};
use tokio::io::AsyncWriteExt;

/// The test's TLS-ALPN-01 listener: a tokio-rustls acceptor on
/// `Challenges::server_config`, counting completed handshakes.
struct Listener {
    port: u16,
    handshakes: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

async fn challenge_listener(challenges: &Challenges) -> Listener {
    let config = challenges
        .server_config(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let handshakes = Arc::new(AtomicUsize::new(0));
    let count = handshakes.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            let count = count.clone();
            tokio::spawn(async move {
                let accepted = tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp));
                if let Ok(Ok(mut tls)) = accepted.await {
                    count.fetch_add(1, Ordering::SeqCst);
                    let _ = tls.shutdown().await;
                }
            });
        }
    });
    Listener {
        port,
        handshakes,
        task,
    }
}

fn leaf(issued: &Issued) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(issued.chain_pem.as_bytes())
        .next()
        .unwrap()
        .unwrap()
        .to_vec()
}

/// The leaf's serial as pebble writes it (hex, no leading zeros).
fn serial(issued: &Issued) -> String {
    let der = leaf(issued);
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    cert.tbs_certificate.serial.to_str_radix(16)
}

fn sans(issued: &Issued) -> Vec<String> {
    let der = leaf(issued);
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    let mut names: Vec<String> = cert
        .subject_alternative_name()
        .unwrap()
        .expect("the leaf has a subjectAltName")
        .value
        .general_names
        .iter()
        .map(|n| match n {
            x509_parser::extensions::GeneralName::DNSName(d) => d.to_string(),
            other => panic!("unexpected SAN {other:?}"),
        })
        .collect();
    names.sort();
    names
}

/// `openssl verify` of the leaf against pebble's root, with the rest of the
/// chain as untrusted intermediates.
fn verify_chain(pebble: &Pebble, issued: &Issued, dir: &Path) {
    let root = pebble.mgmt_get("/roots/0");
    assert!(root.contains("BEGIN CERTIFICATE"), "pebble's root: {root}");
    let blocks: Vec<&str> = issued
        .chain_pem
        .split_inclusive("-----END CERTIFICATE-----")
        .filter(|b| b.contains("BEGIN CERTIFICATE"))
        .collect();
    assert!(
        blocks.len() >= 2,
        "chain of {} certificate(s)",
        blocks.len()
    );
    std::fs::write(dir.join("root.pem"), root).unwrap();
    std::fs::write(dir.join("leaf.pem"), blocks[0]).unwrap();
    std::fs::write(dir.join("intermediates.pem"), blocks[1..].concat()).unwrap();
    let out = tool("openssl")
        .arg("verify")
        .arg("-CAfile")
        .arg(dir.join("root.pem"))
        .arg("-untrusted")
        .arg(dir.join("intermediates.pem"))
        .arg(dir.join("leaf.pem"))
        .output()
        .expect("run openssl");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && text.contains(": OK"),
        "openssl verify: {text}"
    );
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

#[tokio::test] // current-thread, as the server's workers
async fn issues_renews_and_revokes_with_pebble() {
    let started = Instant::now();
    let challenges = Challenges::default();
    let listener = challenge_listener(&challenges).await;
    let pebble = start_pebble(listener.port);
    let state = tempfile::tempdir().unwrap();
    let settings = pebble.settings(state.path());
    let names = vec!["www.tlsfront.test".to_string(), "tlsfront.test".to_string()];

    assert_eq!(acme::load_stored(&settings, &names).unwrap(), None);

    // First issuance: a new account, both names validated through the listener.
    let first = acme::obtain(&settings, &names, &challenges)
        .await
        .unwrap_or_else(|e| panic!("first obtain: {e}"));
    assert_eq!(sans(&first), ["tlsfront.test", "www.tlsfront.test"]);
    assert!(
        listener.handshakes.load(Ordering::SeqCst) >= 2,
        "pebble validated through the listener: {} handshake(s)",
        listener.handshakes.load(Ordering::SeqCst)
    );
    assert!(
        challenges.names().is_empty(),
        "challenge certificates taken down"
    );
    verify_chain(&pebble, &first, state.path());
    let now = SystemTime::now();
    assert!(first.not_before <= now && now < first.not_after);
    let renew = acme::renew_at(first.not_before, first.not_after);
    assert!(first.not_before < renew && renew < first.not_after);

    let account_file = acme::account_path(&settings);
    assert_eq!(mode(&account_file), 0o600, "account file mode");
    let cert_dir = state.path().join("certs/www.tlsfront.test");
    assert_eq!(mode(&cert_dir.join("key.pem")), 0o600, "key.pem mode");
    assert_eq!(
        std::fs::read_to_string(cert_dir.join("fullchain.pem")).unwrap(),
        first.chain_pem
    );
    assert_eq!(
        acme::load_stored(&settings, &names).unwrap(),
        Some(first.clone())
    );

    // Renewal: the stored account is reused (its file untouched), and the
    // new certificate is another one, with another key.
    let account_before = std::fs::read(&account_file).unwrap();
    let account_mtime = std::fs::metadata(&account_file)
        .unwrap()
        .modified()
        .unwrap();
    let accounts_before = std::fs::read_dir(state.path()).unwrap().count();
    let handshakes_before = listener.handshakes.load(Ordering::SeqCst);
    let second = acme::obtain(&settings, &names, &challenges)
        .await
        .unwrap_or_else(|e| panic!("renewal: {e}"));
    assert_eq!(std::fs::read(&account_file).unwrap(), account_before);
    assert_eq!(
        std::fs::metadata(&account_file)
            .unwrap()
            .modified()
            .unwrap(),
        account_mtime
    );
    assert_eq!(
        std::fs::read_dir(state.path()).unwrap().count(),
        accounts_before
    );
    assert!(listener.handshakes.load(Ordering::SeqCst) >= handshakes_before + 2);
    assert_eq!(sans(&second), ["tlsfront.test", "www.tlsfront.test"]);
    assert_ne!(serial(&first), serial(&second), "renewal gave a new serial");
    assert_ne!(first.key_pem, second.key_pem, "renewal gave a new key");
    verify_chain(&pebble, &second, state.path());
    assert_eq!(
        acme::load_stored(&settings, &names).unwrap(),
        Some(second.clone())
    );

    // Revocation of the first certificate. Pebble lets only the account
    // that obtained a certificate revoke it, so this also shows that the
    // renewal ran on the same account.
    assert_eq!(pebble.cert_status(&serial(&first)), "Valid");
    acme::revoke(&settings, &first.chain_pem)
        .await
        .unwrap_or_else(|e| panic!("revoke: {e}"));
    assert_eq!(pebble.cert_status(&serial(&first)), "Revoked");
    assert_eq!(pebble.cert_status(&serial(&second)), "Valid");

    // Revoking needs the account: none in another state directory.
    let elsewhere = tempfile::tempdir().unwrap();
    let err = acme::revoke(&pebble.settings(elsewhere.path()), &second.chain_pem)
        .await
        .unwrap_err();
    assert!(matches!(err, AcmeError::NoAccount { .. }), "{err}");

    listener.task.abort();
    eprintln!("issue, renew, revoke: {:?}", started.elapsed());
}

#[tokio::test]
async fn unanswered_challenge_fails_naming_the_name() {
    let started = Instant::now();
    // Pebble validates on a port where nothing listens.
    let closed = free_tcp_port();
    let pebble = start_pebble(closed);
    let state = tempfile::tempdir().unwrap();
    let challenges = Challenges::default();
    let names = vec!["down.tlsfront.test".to_string()];
    let err = acme::obtain(&pebble.settings(state.path()), &names, &challenges)
        .await
        .expect_err("obtain with no listener answering must fail");
    let text = err.to_string();
    assert!(
        matches!(&err, AcmeError::Challenge { name, .. } if name == "down.tlsfront.test"),
        "{err:?}"
    );
    assert!(
        text.contains("down.tlsfront.test") && text.contains("TLS-ALPN-01"),
        "{text}"
    );
    eprintln!("the error: {text}");
    assert!(
        challenges.names().is_empty(),
        "challenge certificate taken down"
    );
    assert_eq!(
        acme::load_stored(&pebble.settings(state.path()), &names).unwrap(),
        None
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn unreachable_directory_is_named() {
    let state = tempfile::tempdir().unwrap();
    let url = format!("https://127.0.0.1:{}/dir", free_tcp_port());
    let settings = AcmeSettings {
        directory: url.clone(),
        contact: vec![],
        state_dir: state.path().to_path_buf(),
        extra_roots: None,
        dns: None,
        profile: None,
    };
    let err = acme::obtain(
        &settings,
        &["a.tlsfront.test".to_string()],
        &Challenges::default(),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, AcmeError::Directory { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains(&url) && text.to_lowercase().contains("refused"),
        "{text}"
    );
    eprintln!("the error: {text}");
    // Not URLs an ACME client can use: errors, not panics.
    for url in ["not a url", "http://127.0.0.1:1/dir", ""] {
        let settings = AcmeSettings {
            directory: url.into(),
            ..settings.clone()
        };
        let err = acme::obtain(
            &settings,
            &["a.tlsfront.test".to_string()],
            &Challenges::default(),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(err, AcmeError::Directory { .. }),
            "{url:?}: {err:?}"
        );
        eprintln!("the error: {err}");
    }
}

/// `tlsfront run` with sites marked `acme = true`, against pebble: the
/// first certificate is issued through TLS-ALPN-01 answered on tlsfront's
/// own listener and served at once (curl verifies it against pebble's
/// root), it is renewed two thirds into its lifetime (pebble issues
/// certificates valid for 9 s here), and a site added by reload gets its
/// certificate too.
#[test]
fn tlsfront_gets_renews_and_adds_certificates_by_acme() {
    let port = free_tcp_port();
    let pebble = start_pebble_issuing_for(port, Some(Duration::from_secs(9)));
    let dir = tempfile::tempdir().unwrap();
    let www = dir.path().join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("id.txt"), "acme site\n").unwrap();
    let config = dir.path().join("tlsfront.toml");
    let site = |name: &str| {
        format!(
            "[[site]]\nnames = [\"{name}\"]\nacme = true\nroot = {:?}\n",
            www.display().to_string()
        )
    };
    let head = format!(
        "acme_directory = {:?}\nacme_ca_roots = {:?}\nacme_contact = [\"mailto:ops@tlsfront.test\"]\nstate_dir = {:?}\n",
        pebble.directory,
        pebble.https_ca.display().to_string(),
        dir.path().join("state").display().to_string()
    );
    std::fs::write(&config, format!("{head}{}", site("a.tlsfront.test"))).unwrap();
    let listen = format!("127.0.0.1:{port}");
    let server = common::Server::run(&config, &["--listen", &listen]);
    assert!(
        server
            .startup
            .iter()
            .any(|l| l.contains("no certificate yet for a.tlsfront.test")),
        "{:?}",
        server.startup
    );
    let out = server.wait_for_output("certificate issued by", 1);
    assert!(
        out.contains("for a.tlsfront.test, valid until"),
        "{out}{}",
        server.log()
    );
    // Times in log lines are HTTP dates, not `SystemTime { tv_sec: … }`.
    let log = server.wait_for_log("ACME certificate issued");
    let line = log.lines().find(|l| l.contains("ACME certificate issued"));
    assert!(
        line.is_some_and(|l| l.contains(" GMT") && !l.contains("SystemTime")),
        "{log}"
    );

    let root = dir.path().join("pebble-root.pem");
    std::fs::write(&root, pebble.mgmt_get("/roots/0")).unwrap();
    let get = |name: &str| {
        let out = tool("curl")
            .args(["-sS", "--max-time", "20", "--cacert"])
            .arg(&root)
            .args(["--resolve", &format!("{name}:{port}:127.0.0.1")])
            .arg(format!("https://{name}:{port}/id.txt"))
            .output()
            .unwrap();
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (body, err) = get("a.tlsfront.test");
    assert_eq!(body, "acme site\n", "{err}");
    let first = common::served_fingerprint(port, "a.tlsfront.test");
    // Pebble 2.4 offers no renewal information: two thirds, said once
    // per certificate with the reason.
    let fallback = "ACME: renewing a.tlsfront.test two thirds into its lifetime, at ";
    let log = server.wait_for_log(fallback);
    let line = log.lines().find(|l| l.contains(fallback)).unwrap();
    assert!(
        line.contains("the CA's directory has no renewalInfo (it does not offer ACME Renewal Information, RFC 9773)"),
        "{line}"
    );

    // Renewal when due: a new certificate, served without a restart.
    let out = server.wait_for_output("certificate issued by", 2);
    assert!(
        out.matches("for a.tlsfront.test").count() >= 2,
        "{out}{}",
        server.log()
    );
    common::wait_until(common::WAIT, "the renewed certificate to be served", || {
        match common::served_fingerprint(port, "a.tlsfront.test") {
            fp if fp == first => Err(format!("still {fp}")),
            _ => Ok(()),
        }
    });
    let (body, err) = get("a.tlsfront.test");
    assert_eq!(body, "acme site\n", "{err}");
    // Once per certificate, not at each look (the log first: what it
    // says can only lag what stdout says).
    let said = server.log().matches(fallback).count();
    let issued = server.output().matches("certificate issued by").count();
    assert!(
        said <= issued,
        "{said} fallback lines for {issued} certificates:\n{}",
        server.log()
    );

    // A site added by reload gets its certificate.
    std::fs::write(
        &config,
        format!(
            "{head}{}{}",
            site("a.tlsfront.test"),
            site("b.tlsfront.test")
        ),
    )
    .unwrap();
    server.reload();
    server.wait_for_output("for b.tlsfront.test, valid until", 1);
    let deadline = Instant::now() + common::WAIT;
    let mut got = get("b.tlsfront.test");
    while got.0 != "acme site\n" && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        got = get("b.tlsfront.test");
    }
    assert_eq!(got.0, "acme site\n", "{}{}", got.1, server.output());

    // Revoke and replace: `tlsfront acme revoke` revokes the stored
    // certificate at the CA and removes it; the reload serves a placeholder
    // and gets a new one.
    let out = std::process::Command::new(common::BIN)
        .args(["acme", "revoke", "--config"])
        .arg(&config)
        .arg("a.tlsfront.test")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let serial = said
        .split("(serial ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .unwrap_or_else(|| panic!("{said}"));
    assert_eq!(pebble.cert_status(serial), "Revoked", "{said}");
    server.reload();
    server.wait_for_output("no certificate yet for a.tlsfront.test", 1);
    let deadline = Instant::now() + common::WAIT;
    let mut got = get("a.tlsfront.test");
    while got.0 != "acme site\n" && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        got = get("a.tlsfront.test");
    }
    assert_eq!(got.0, "acme site\n", "{}{}", got.1, server.output());
    let (status, report) = server.stop();
    assert!(status.success(), "{report}");
}

/// The packaged set-up: started as root with `user = "nobody"`. The parent
/// makes the ACME state directory for nobody (0700), the server process
/// orders and stores the certificate there as nobody, and serves it; a
/// state directory someone else owns is refused at start, naming the fix.
#[test]
fn tlsfront_as_user_stores_acme_certificates_in_a_directory_it_owns() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let port = free_tcp_port();
    let pebble = start_pebble(port);
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let www = dir.path().join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("id.txt"), "acme site\n").unwrap();
    let state = dir.path().join("state");
    let config = dir.path().join("tlsfront.toml");
    std::fs::write(
        &config,
        format!(
            "user = \"nobody\"\nacme_directory = {:?}\nacme_ca_roots = {:?}\nstate_dir = {:?}\n\
             [[site]]\nnames = [\"a.tlsfront.test\"]\nacme = true\nroot = {:?}\n",
            pebble.directory,
            pebble.https_ca.display().to_string(),
            state.display().to_string(),
            www.display().to_string()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
    let listen = format!("127.0.0.1:{port}");
    let server = common::Server::run(&config, &["--listen", &listen]);
    let out = server.wait_for_output("certificate issued by", 1);
    assert!(out.contains("for a.tlsfront.test"), "{out}{}", server.log());
    let acme_dir = state.join("acme");
    let meta = std::fs::metadata(&acme_dir).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (65534, 0o700));
    let stored = std::fs::read_dir(acme_dir.join("certs"))
        .unwrap()
        .flatten()
        .next()
        .expect("no stored certificate");
    assert_eq!(std::fs::metadata(stored.path()).unwrap().uid(), 65534);
    let root = dir.path().join("pebble-root.pem");
    std::fs::write(&root, pebble.mgmt_get("/roots/0")).unwrap();
    let out = tool("curl")
        .args(["-sS", "--max-time", "20", "--cacert"])
        .arg(&root)
        .args(["--resolve", &format!("a.tlsfront.test:{port}:127.0.0.1")])
        .arg(format!("https://a.tlsfront.test:{port}/id.txt"))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "acme site\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, report) = server.stop();
    assert!(status.success(), "{report}");

    // State written by another user (root, as before the parent existed):
    // refused at start with the fix, rather than served as a placeholder.
    std::os::unix::fs::chown(&acme_dir, Some(0), Some(0)).unwrap();
    let out = std::process::Command::new(common::BIN)
        .args(["run", "--config"])
        .arg(&config)
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!("chown -R 65534:65534 {}", acme_dir.display())),
        "{err}"
    );
}

/// A config for `tlsfront run` with one `acme = true` site, `name`, on
/// pebble (its root for the ACME directory's HTTPS) and a state directory
/// in `dir`; the site serves `id.txt` = "acme site\n".
fn acme_site_config(dir: &Path, pebble: &Pebble, name: &str) -> PathBuf {
    let www = dir.join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("id.txt"), "acme site\n").unwrap();
    let config = dir.join("tlsfront.toml");
    std::fs::write(
        &config,
        format!(
            "acme_directory = {:?}\nacme_ca_roots = {:?}\nstate_dir = {:?}\n\
             [[site]]\nnames = [\"{name}\"]\nacme = true\nroot = {:?}\n",
            pebble.directory,
            pebble.https_ca.display().to_string(),
            dir.join("state").display().to_string(),
            www.display().to_string()
        ),
    )
    .unwrap();
    config
}

/// curl `https://NAME:PORT/id.txt` (on 127.0.0.1), verifying the server
/// against `cacert`, or not at all if None: (body, stderr, success).
fn curl_id(port: u16, name: &str, cacert: Option<&Path>) -> (String, String, bool) {
    let mut curl = tool("curl");
    curl.args(["-sS", "--max-time", "20"]);
    match cacert {
        Some(root) => curl.arg("--cacert").arg(root),
        None => curl.arg("--insecure"),
    };
    let out = curl
        .args(["--resolve", &format!("{name}:{port}:127.0.0.1")])
        .arg(format!("https://{name}:{port}/id.txt"))
        .output()
        .expect("run curl");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.success(),
    )
}

/// Pebble rejecting half the good nonces (badNonce, RFC 8555 section 6.5):
/// each request is sent again with the fresh nonce the rejection carried,
/// a bounded number of times, and tlsfront gets its certificate and serves
/// it (curl verifies it against pebble's root). Should an unlucky run meet
/// more rejections in a row than the bound (rare, but pebble rolls its
/// dice for real), the site's usual back-off tries again a minute later:
/// the wait allows that one retry.
#[test]
fn tlsfront_gets_a_certificate_while_the_ca_rejects_half_the_nonces() {
    let port = free_tcp_port();
    let pebble = start_pebble_with(port, None, 50);
    let dir = tempfile::tempdir().unwrap();
    let config = acme_site_config(dir.path(), &pebble, "n.tlsfront.test");
    let listen = format!("127.0.0.1:{port}");
    let server = common::Server::run(&config, &["--listen", &listen]);
    let out = server
        .output_within(
            "certificate issued by",
            1,
            common::WAIT + tlsfront::acme::retry_delay(1),
        )
        .unwrap_or_else(|| {
            panic!(
                "no certificate issued with half the nonces rejected:\n{}{}",
                server.output(),
                server.log()
            )
        });
    assert!(out.contains("for n.tlsfront.test, valid until"), "{out}");
    eprintln!(
        "issued after {} POST request(s) to pebble; tlsfront's log:\n{}",
        pebble.posts(),
        server.log()
    );

    let root = dir.path().join("pebble-root.pem");
    std::fs::write(&root, pebble.mgmt_get("/roots/0")).unwrap();
    let got = common::wait_until(
        common::WAIT,
        "pebble's certificate to be served",
        || match curl_id(port, "n.tlsfront.test", Some(&root)) {
            (body, _, true) if body == "acme site\n" => Ok(body),
            (body, err, _) => Err(format!("{body}{err}")),
        },
    );
    assert_eq!(got, "acme site\n");
    let (status, report) = server.stop();
    assert!(status.success(), "{report}");
}

/// Pebble rejecting every nonce: no certificate can be issued. tlsfront
/// sends the first request (the new account) a bounded number of times,
/// says that the CA rejected the nonce (badNonce), not that it could not
/// validate the name or refused the account, schedules its next try by the
/// usual back-off, and keeps serving the placeholder meanwhile.
#[test]
fn tlsfront_keeps_its_placeholder_when_the_ca_rejects_every_nonce() {
    let port = free_tcp_port();
    let pebble = start_pebble_with(port, None, 100);
    let dir = tempfile::tempdir().unwrap();
    let config = acme_site_config(dir.path(), &pebble, "z.tlsfront.test");
    let listen = format!("127.0.0.1:{port}");
    let server = common::Server::run(&config, &["--listen", &listen]);
    assert!(
        server
            .startup
            .iter()
            .any(|l| l.contains("no certificate yet for z.tlsfront.test")),
        "{:?}",
        server.startup
    );

    let log = server.wait_for_log("ACME: no certificate for z.tlsfront.test");
    let line = log
        .lines()
        .find(|l| l.contains("ACME: no certificate for z.tlsfront.test"))
        .unwrap();
    eprintln!("the line: {line}");
    assert!(
        line.contains(&format!(
            "(1 failure in a row), next try in {} s",
            tlsfront::acme::retry_delay(1).as_secs()
        )),
        "{line}"
    );
    assert!(
        line.contains(&format!(
            "the ACME CA at {} rejected the replay nonce of a request while registering an \
             account (badNonce",
            pebble.directory
        )),
        "{line}"
    );
    // Not reported as another failure (what the account, order or
    // validation errors would say).
    for wrong in [
        "could not validate",
        "did not create an account",
        "refused an order",
    ] {
        assert!(!line.contains(wrong), "{wrong:?} in {line}");
    }

    // Bounded: the number of nonces the line says were refused is the
    // number of new-account requests pebble saw, a handful; no other POST.
    let refused: usize = line
        .split("refused ")
        .nth(1)
        .and_then(|r| r.split(" nonces in a row").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of refused nonces in {line}"));
    assert!((2..=20).contains(&refused), "{line}");
    assert_eq!(pebble.posts_to("/sign-me-up"), refused);
    assert_eq!(pebble.posts(), refused);

    // The placeholder is still served (no client trusts it: curl refuses
    // it against pebble's root, and serves the site without checking).
    let (out, err, _) = common::s_client(
        port,
        &["-servername", "z.tlsfront.test"],
        &[],
        Duration::from_secs(20),
    );
    assert!(
        out.contains("tlsfront placeholder (no ACME certificate yet)"),
        "{out}{err}"
    );
    let root = dir.path().join("pebble-root.pem");
    std::fs::write(&root, pebble.mgmt_get("/roots/0")).unwrap();
    let (_, err, verified) = curl_id(port, "z.tlsfront.test", Some(&root));
    assert!(!verified, "the placeholder verified against pebble's root");
    assert!(err.contains("certificate"), "{err}");
    let (body, err, ok) = curl_id(port, "z.tlsfront.test", None);
    assert!(ok && body == "acme site\n", "{body}{err}");

    // No spin: the next try is a minute away, so nothing more reached
    // pebble while the site was being fetched, and the server stops cleanly.
    assert_eq!(pebble.posts(), refused, "{}", server.log());
    assert_eq!(
        server
            .log()
            .matches("ACME: no certificate for z.tlsfront.test")
            .count(),
        1
    );
    let (status, report) = server.stop();
    assert!(status.success(), "{report}");
}

/// The ARI identifier of the leaf of `chain_pem` (RFC 9773 section 4.1),
/// made here from the certificate: its authority key identifier and the
/// DER content of its serial.
fn ari_id(chain_pem: &str) -> String {
    use rustls::pki_types::pem::PemObject;
    let leaf = rustls::pki_types::CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .next()
        .unwrap()
        .unwrap();
    let (_, cert) = x509_parser::parse_x509_certificate(&leaf).unwrap();
    let aki = cert
        .iter_extensions()
        .find_map(|e| match e.parsed_extension() {
            x509_parser::extensions::ParsedExtension::AuthorityKeyIdentifier(a) => {
                a.key_identifier.as_ref().map(|k| k.0.to_vec())
            }
            _ => None,
        })
        .expect("pebble's certificate has an authority key identifier");
    instant_acme::CertificateIdentifier::new(
        rustls::pki_types::Der::from_slice(&aki),
        rustls::pki_types::Der::from_slice(cert.tbs_certificate.raw_serial()),
    )
    .to_string()
}

/// One "ACME renewal information" line of tlsfront's log.
#[derive(Debug)]
struct AriLine {
    start: SystemTime,
    end: SystemTime,
    /// None: "renewing now".
    at: Option<SystemTime>,
    ask_again_secs: u64,
}

/// The "ACME renewal information for NAME (certificate ID): ..." lines of
/// `log`, in order.
fn ari_lines(log: &str, name: &str, id: &str) -> Vec<AriLine> {
    let head = format!(
        "ACME renewal information for {name} (certificate {id}): the CA suggests renewing between "
    );
    log.lines()
        .filter_map(|l| Some(l.split_once(&head)?.1))
        .map(|rest| {
            let (start, rest2) = rest.split_once(" and ").unwrap_or_else(|| bad_line(rest));
            let (end, rest2) = rest2.split_once("; ").unwrap_or_else(|| bad_line(rest));
            let (when, rest2) = rest2
                .split_once("; asking again in ")
                .unwrap_or_else(|| bad_line(rest));
            let date = |d: &str| httpdate::parse_http_date(d).unwrap_or_else(|_| bad_line(rest));
            AriLine {
                start: date(start),
                end: date(end),
                at: match when {
                    "renewing now" => None,
                    w => Some(date(
                        w.strip_prefix("renewing at ")
                            .unwrap_or_else(|| bad_line(rest)),
                    )),
                },
                ask_again_secs: rest2
                    .strip_suffix(" s")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| bad_line(rest)),
            }
        })
        .collect()
}

fn bad_line<T>(line: &str) -> T {
    panic!("unexpected renewal information line: {line}")
}

fn unix(t: SystemTime) -> i64 {
    t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() as i64
}

/// `tlsfront run` on pebble 2.6, which offers ACME Renewal Information
/// (RFC 9773). The issued certificate's renewal is scheduled at a time
/// inside the window pebble's renewalInfo suggests (asked with curl here
/// too), and the CA is asked again after its Retry-After. Revoked, the
/// certificate gets a window in the past from pebble; a reload (which asks
/// again) has it renewed at once, by an order that replaces it, as
/// pebble's log says. Put back in place, the replaced certificate is
/// renewed again: pebble refuses a second replacement of it, and the order
/// goes through once more without `replaces`.
#[test]
fn tlsfront_renews_in_the_cas_ari_window_and_replaces_the_old_certificate() {
    let port = free_tcp_port();
    let pebble = start_pebble_ari(port);
    let dir = tempfile::tempdir().unwrap();
    let name = "r.tlsfront.test";
    let config = acme_site_config(dir.path(), &pebble, name);
    let listen = format!("127.0.0.1:{port}");
    let server = common::Server::run(&config, &["--listen", &listen]);
    server.wait_for_output("certificate issued by", 1);
    let cert_dir = dir.path().join("state/acme/certs").join(name);
    let first_chain = std::fs::read_to_string(cert_dir.join("fullchain.pem")).unwrap();
    let first_key = std::fs::read_to_string(cert_dir.join("key.pem")).unwrap();
    let first_id = ari_id(&first_chain);

    // Scheduled inside pebble's window (two thirds into the five years it
    // issues for, give or take a day), not by tlsfront's own rule.
    let log = server.wait_for_log(&format!("(certificate {first_id}): the CA suggests"));
    let lines = ari_lines(&log, name, &first_id);
    eprintln!("{lines:?}");
    let ((start, end), retry_after) = pebble.renewal_info(&first_id);
    let line = &lines[0];
    assert_eq!((unix(line.start), unix(line.end)), (start, end), "{log}");
    let at = line
        .at
        .unwrap_or_else(|| panic!("renewing now, with a window ahead: {log}"));
    assert!(
        start <= unix(at) && unix(at) <= end && at > SystemTime::now(),
        "{at:?} outside {start}..={end}"
    );
    let retry_after: u64 = retry_after.parse().unwrap();
    let clamped = retry_after.clamp(acme::ASK_AGAIN_MIN.as_secs(), acme::ASK_AGAIN_MAX.as_secs());
    assert!(
        (clamped - 1..=clamped).contains(&line.ask_again_secs),
        "Retry-After {retry_after}, asking again in {} s",
        line.ask_again_secs
    );
    assert!(!log.contains("two thirds into its lifetime"), "{log}");

    // Revoked: pebble's window for it moves into the past. A reload asks
    // again, and the certificate is renewed at once, replacing it.
    let serial_hex = {
        use rustls::pki_types::pem::PemObject;
        let leaf = rustls::pki_types::CertificateDer::pem_slice_iter(first_chain.as_bytes())
            .next()
            .unwrap()
            .unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&leaf).unwrap();
        cert.tbs_certificate.serial.to_str_radix(16)
    };
    let settings = AcmeSettings {
        state_dir: dir.path().join("state/acme"),
        ..pebble.settings(dir.path())
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(acme::revoke(&settings, &first_chain))
        .unwrap_or_else(|e| panic!("revoke: {e}"));
    assert_eq!(pebble.cert_status(&serial_hex), "Revoked");
    let ((start, end), _) = pebble.renewal_info(&first_id);
    let now = unix(SystemTime::now());
    assert!(
        end <= now,
        "pebble's window for a revoked certificate: {start}..{end}"
    );
    let first_served = common::served_fingerprint(port, name);
    server.reload();
    let log = server.wait_for_log_count(&format!("(certificate {first_id}): the CA suggests"), 2);
    // (Pebble's window for a revoked certificate is an hour before each
    // question: the one tlsfront got is not the one asked above.)
    let lines = ari_lines(&log, name, &first_id);
    assert!(
        lines[1].start < lines[1].end && lines[1].end <= SystemTime::now(),
        "{:?}",
        lines[1]
    );
    assert!(
        lines[1].at.is_none(),
        "a past window is not renewing now: {log}"
    );
    let out = server.wait_for_output("certificate issued by", 2);
    assert!(
        out.matches(&format!("for {name}, valid until")).count() >= 2,
        "{out}"
    );
    // Pebble takes `replaces` only for a serial it can look up: its own
    // table has it without the 00 that DER puts before a serial whose top
    // bit is set (1 serial in about 256 of pebble's), so it refuses such
    // a replacement, and the order goes through without it.
    let pebble_knows_it = !{
        use rustls::pki_types::pem::PemObject;
        let leaf = rustls::pki_types::CertificateDer::pem_slice_iter(first_chain.as_bytes())
            .next()
            .unwrap()
            .unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&leaf).unwrap();
        cert.tbs_certificate.raw_serial().first() == Some(&0)
    };
    let log = server.log();
    let refused = format!(
        "ACME: the CA refused the order for {name} as the replacement of certificate {first_id}"
    );
    if pebble_knows_it {
        assert!(
            log.contains(&format!(
                "ACME: the order for {name} replaces certificate {first_id}"
            )),
            "{log}"
        );
        assert!(!log.contains(&refused), "{log}");
        let said = pebble.log();
        assert!(
            said.contains("is a replacement of") && said.contains("marked as replaced"),
            "pebble's log does not show a replacement:\n{said}"
        );
    } else {
        eprintln!("the first serial has a leading 00: pebble refuses to look it up");
        assert!(log.contains(&refused), "{log}");
    }
    common::wait_until(common::WAIT, "the renewed certificate to be served", || {
        match common::served_fingerprint(port, name) {
            fp if fp == first_served => Err(format!("still {fp}")),
            _ => Ok(()),
        }
    });

    // The replaced certificate put back: due at once again (revoked), but
    // pebble refuses a second replacement of it (409, "malformed"), and the
    // order is placed once more without `replaces`.
    let second_chain = std::fs::read_to_string(cert_dir.join("fullchain.pem")).unwrap();
    assert_ne!(ari_id(&second_chain), first_id);
    std::fs::write(cert_dir.join("key.pem"), &first_key).unwrap();
    std::fs::write(cert_dir.join("fullchain.pem"), &first_chain).unwrap();
    server.reload();
    let out = server.wait_for_output("certificate issued by", 3);
    assert!(
        out.matches(&format!("for {name}, valid until")).count() >= 3,
        "{out}"
    );
    let log = server.wait_for_log(&refused);
    let line = log.lines().rfind(|l| l.contains(&refused)).unwrap();
    eprintln!("the line: {line}");
    assert!(
        line.contains("ordering once more without `replaces`"),
        "{line}"
    );
    if pebble_knows_it {
        assert!(line.contains("already has a replacement order"), "{line}");
        assert_eq!(log.matches(&refused).count(), 1, "{log}");
    }
    let third_chain = std::fs::read_to_string(cert_dir.join("fullchain.pem")).unwrap();
    assert_ne!(third_chain, first_chain);
    assert_ne!(third_chain, second_chain);
    let (status, report) = server.stop();
    assert!(status.success(), "{report}");
}

/// `acme_profile` with a CA whose directory lists no profiles (pebble 2.4,
/// like 2.6, has none): `config check` shows the profile the site orders,
/// and tlsfront places no order: the try fails naming the setting, the
/// profile and what the CA lists, is retried by the usual back-off, and
/// the site keeps serving its placeholder meanwhile.
#[test]
fn tlsfront_orders_no_certificate_in_a_profile_the_ca_does_not_list() {
    let port = free_tcp_port();
    let pebble = start_pebble(port);
    let dir = tempfile::tempdir().unwrap();
    let name = "p.tlsfront.test";
    let config = acme_site_config(dir.path(), &pebble, name);
    let text = std::fs::read_to_string(&config).unwrap();
    // What can be checked without the CA is: a profile name is a name.
    std::fs::write(&config, format!("acme_profile = \"short lived\"\n{text}")).unwrap();
    let (ok, report) = common::config_check(&config);
    assert!(!ok, "{report}");
    assert!(
        report.contains(", line 1, setting acme_profile: \"short lived\" is not a profile name"),
        "{report}"
    );
    std::fs::write(&config, format!("acme_profile = \"shortlived\"\n{text}")).unwrap();
    let (ok, report) = common::config_check(&config);
    assert!(ok, "{report}");
    assert!(
        report.contains(
            "  ACME profile: \"shortlived\" (acme_profile; the CA's directory must list it)"
        ),
        "{report}"
    );

    let listen = format!("127.0.0.1:{port}");
    let server = common::Server::run(&config, &["--listen", &listen]);
    let head = format!("ACME: no certificate for {name}");
    let log = server.wait_for_log(&head);
    let line = log.lines().find(|l| l.contains(&head)).unwrap();
    eprintln!("the line: {line}");
    assert!(
        line.contains(&format!(
            "(1 failure in a row), next try in {} s: acme_profile = \"shortlived\": the ACME CA \
             at {} lists no profiles in its directory; set acme_profile to one of its profiles, \
             or remove it for the CA's default",
            acme::retry_delay(1).as_secs(),
            pebble.directory
        )),
        "{line}"
    );
    // The account is registered (pebble's log shows each POST), the
    // order never placed.
    assert_eq!(pebble.posts_to("/sign-me-up"), 1, "{}", pebble.log());
    assert_eq!(pebble.posts_to("/order-plz"), 0, "{}", pebble.log());
    let (out, err, _) =
        common::s_client(port, &["-servername", name], &[], Duration::from_secs(20));
    assert!(
        out.contains("tlsfront placeholder (no ACME certificate yet)"),
        "{out}{err}"
    );
    let (status, report) = server.stop();
    assert!(status.success(), "{report}");
}

/// `acme_challenge = "http-01"`: pebble validates through tlsfront's
/// plain-HTTP listener (its `httpPort`), while nothing answers TLS-ALPN-01
/// on the port pebble would use for it; the certificate is issued and
/// served, the validation requests are counted as answered challenges, and
/// the tokens are gone afterwards (404).
#[test]
fn tlsfront_gets_a_certificate_by_http_01_on_its_plain_http_listener() {
    let (tls_port, http_port) = (free_tcp_port(), free_tcp_port());
    // pebble's TLS-ALPN-01 port: nobody listens there.
    let pebble = start_pebble_http(free_tcp_port(), http_port);
    let dir = tempfile::tempdir().unwrap();
    let config = acme_site_config(dir.path(), &pebble, "h.tlsfront.test");
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text.replacen(
        "acme = true\n",
        "acme = true\nacme_challenge = \"http-01\"\n",
        1,
    );
    let text =
        format!("http_listen = [\"127.0.0.1:{http_port}\"]\nadmin = \"127.0.0.1:0\"\n{text}");
    std::fs::write(&config, text).unwrap();
    let listen = format!("127.0.0.1:{tls_port}");
    let server = common::Server::run(&config, &["--listen", &listen]);
    let out = server
        .output_within("certificate issued by", 1, common::WAIT)
        .unwrap_or_else(|| {
            panic!(
                "no certificate issued by HTTP-01:\n{}{}",
                server.output(),
                server.log()
            )
        });
    assert!(out.contains("for h.tlsfront.test, valid until"), "{out}");

    let root = dir.path().join("pebble-root.pem");
    std::fs::write(&root, pebble.mgmt_get("/roots/0")).unwrap();
    let got = common::wait_until(
        common::WAIT,
        "pebble's certificate to be served",
        || match curl_id(tls_port, "h.tlsfront.test", Some(&root)) {
            (body, _, true) if body == "acme site\n" => Ok(body),
            (body, err, _) => Err(format!("{body}{err}")),
        },
    );
    assert_eq!(got, "acme site\n");
    // Each validation was answered on the plain-HTTP listener (pebble
    // validates from several perspectives: at least one request).
    let metrics = server.metrics();
    let answered: u64 = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("tlsfront_plain_http_requests_total{answer=\"acme_challenge\"} ")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no acme_challenge count in {metrics}"));
    assert!(answered >= 1, "{metrics}");
    // The token is taken down with the order.
    let log = std::fs::read_to_string(pebble.dir.path().join("pebble.log")).unwrap();
    let token = log
        .split("/.well-known/acme-challenge/")
        .nth(1)
        .and_then(|rest| {
            rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'))
                .next()
        })
        .unwrap_or_else(|| panic!("pebble's log names no HTTP-01 request:\n{log}"));
    let gone = tool("curl")
        .args([
            "-sS",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "20",
        ])
        .args(["-H", "Host: h.tlsfront.test"])
        .arg(format!(
            "http://127.0.0.1:{http_port}/.well-known/acme-challenge/{token}"
        ))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&gone.stdout), "404");
    let (status, report) = server.stop();
    assert!(status.success(), "{report}");
}
