//! ACME DNS-01 against a real authoritative DNS server: Debian's bind9
//! (`named`, in the foreground, on a loopback port the kernel picked)
//! serves a throwaway zone `acme.test.` that takes RFC 2136 updates signed
//! with a key from `tsig-keygen`, and pebble (Let's Encrypt's test CA)
//! resolves the challenges through it (`-dnsserver`). tlsfront adds the
//! TXT records with signed updates, pebble validates them, and tlsfront
//! deletes them again: the certificates name `*.acme.test`.
//!
//! Pebble is tests/common/pebble.rs's, resolving through bind9 in place of
//! pebble-challtestsrv.

mod common;

use std::fs::File;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;

use common::pebble::{free_dns_port, free_tcp_port, start_pebble_resolving_through};
use common::{tool, wait_until, WAIT};
use tlsfront::acme::dns01::{DnsUpdate, TsigKey};
use tlsfront::acme::{self, AcmeSettings, ChallengeKind, Challenges};

/// Wait until `child` accepts TCP on `port` (and, if given, its log says
/// `line`), failing with its log if it exits first.
fn wait_ready(child: &mut Child, what: &str, port: u16, log: &Path, line: Option<&str>) {
    wait_until(WAIT, format!("{what} on 127.0.0.1:{port}"), || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited ({status}):\n{text}");
        }
        if line.is_some_and(|l| !text.contains(l)) {
            return Err(format!("its log does not say {line:?} yet"));
        }
        TcpStream::connect(("127.0.0.1", port))
            .map(drop)
            .map_err(|e| e.to_string())
    });
}

/// bind9 serving `acme.test.` (SOA, NS, and an A record 127.0.0.1 for the
/// apex), taking updates of `_acme-challenge` TXT records signed with the
/// key in `key_file`. Killed on drop; its log printed if the test failed.
struct Bind {
    child: Child,
    dir: tempfile::TempDir,
    port: u16,
    /// The key bind takes updates with (`tsig-keygen -a hmac-sha256
    /// acme-key`).
    key_file: PathBuf,
}

impl Drop for Bind {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("---- named.log ----\n{}", self.log());
        }
    }
}

/// A key from `tsig-keygen` named `acme-key`, written to `path`.
fn tsig_keygen(path: &Path) {
    let out = tool("tsig-keygen")
        .args(["-a", "hmac-sha256", "acme-key"])
        .output()
        .expect("run tsig-keygen (Debian package bind9)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(path, out.stdout).unwrap();
}

fn start_bind() -> Bind {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let key_file = d.join("acme.key");
    tsig_keygen(&key_file);
    std::fs::write(
        d.join("acme.test.zone"),
        "$TTL 60\n\
         @ IN SOA ns.acme.test. hostmaster.acme.test. 1 3600 600 86400 60\n\
         @ IN NS ns.acme.test.\n\
         @ IN A 127.0.0.1\n\
         ns IN A 127.0.0.1\n",
    )
    .unwrap();
    let port = free_dns_port();
    let conf = d.join("named.conf");
    std::fs::write(
        &conf,
        format!(
            "options {{\n\
             \tdirectory \"{dir}\";\n\
             \tpid-file \"{dir}/named.pid\";\n\
             \tsession-keyfile \"{dir}/session.key\";\n\
             \tmanaged-keys-directory \"{dir}\";\n\
             \tlisten-on port {port} {{ 127.0.0.1; }};\n\
             \tlisten-on-v6 {{ none; }};\n\
             \trecursion no;\n\
             \tdnssec-validation no;\n\
             \tnotify no;\n\
             }};\n\
             controls {{ }};\n\
             include \"{key}\";\n\
             zone \"acme.test\" {{\n\
             \ttype primary;\n\
             \tfile \"{dir}/acme.test.zone\";\n\
             \tupdate-policy {{ grant acme-key subdomain _acme-challenge.acme.test. TXT; }};\n\
             }};\n",
            dir = d.display(),
            key = key_file.display(),
        ),
    )
    .unwrap();
    let log = d.join("named.log");
    // -g: foreground, logging to stderr; -4: IPv4 only; -n 1: one worker.
    let mut child = tool("named")
        .args(["-g", "-4", "-n", "1", "-c"])
        .arg(&conf)
        .stdout(Stdio::from(File::create(&log).unwrap()))
        .stderr(Stdio::from(File::create(&log).unwrap()))
        .spawn()
        .expect("start named (Debian package bind9: tests/install-packages.sh installs it)");
    wait_ready(&mut child, "named", port, &log, Some("running"));
    Bind {
        child,
        dir,
        port,
        key_file,
    }
}

impl Bind {
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("named.log")).unwrap_or_default()
    }

    /// The DNS-01 settings for this server, signing with `key_file`.
    fn update(&self, key_file: &Path) -> DnsUpdate {
        DnsUpdate {
            server: format!("127.0.0.1:{}", self.port).parse().unwrap(),
            key_file: key_file.to_path_buf(),
            key: Arc::new(TsigKey::read(key_file).unwrap()),
        }
    }

    /// The TXT records of `name` as dig (over TCP) sees them.
    fn txt(&self, name: &str) -> String {
        let out = tool("dig")
            .args(["+tcp", "+short", "+time=10", "-p", &self.port.to_string()])
            .args(["@127.0.0.1", name, "TXT"])
            .output()
            .expect("run dig (Debian package bind9-dnsutils)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

/// The DNS names of the leaf of `chain_pem`, sorted.
fn sans(chain_pem: &str) -> Vec<String> {
    use rustls::pki_types::pem::PemObject;
    let leaf = rustls::pki_types::CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .next()
        .unwrap()
        .unwrap();
    let (_, cert) = x509_parser::parse_x509_certificate(&leaf).unwrap();
    let mut names: Vec<String> = cert
        .subject_alternative_name()
        .unwrap()
        .unwrap()
        .value
        .general_names
        .iter()
        .filter_map(|n| match n {
            x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_string()),
            _ => None,
        })
        .collect();
    names.sort();
    names
}

fn names() -> Vec<String> {
    vec!["*.acme.test".to_string(), "acme.test".to_string()]
}

/// `obtain_with(.., Dns01)`: a certificate for `*.acme.test` and
/// `acme.test` from pebble, which validated both TXT records through
/// bind9 (nothing here answers another challenge); bind9 logged each record added and deleted, and serves neither
/// afterwards.
#[tokio::test(flavor = "current_thread")]
async fn dns01_proves_a_wildcard_through_bind9() {
    let bind = start_bind();
    let pebble = start_pebble_resolving_through(bind.port, free_tcp_port());
    let state = tempfile::tempdir().unwrap();
    let settings = AcmeSettings {
        dns: Some(bind.update(&bind.key_file)),
        ..pebble.settings(state.path())
    };
    let issued = acme::obtain_with(
        &settings,
        &names(),
        &Challenges::default(),
        ChallengeKind::Dns01,
    )
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{e}\n---- named ----\n{}\n---- pebble ----\n{}",
            bind.log(),
            pebble.log()
        )
    });
    assert_eq!(sans(&issued.chain_pem), ["*.acme.test", "acme.test"]);
    // The chain is pebble's: its root signed it (openssl verifies).
    let dir = state.path();
    std::fs::write(dir.join("root.pem"), pebble.mgmt_get("/roots/0")).unwrap();
    let mut certs = issued
        .chain_pem
        .split_inclusive("-----END CERTIFICATE-----\n");
    std::fs::write(dir.join("leaf.pem"), certs.next().unwrap()).unwrap();
    std::fs::write(dir.join("chain.pem"), certs.collect::<String>()).unwrap();
    let out = tool("openssl")
        .args(["verify", "-CAfile"])
        .arg(dir.join("root.pem"))
        .arg("-untrusted")
        .arg(dir.join("chain.pem"))
        .arg(dir.join("leaf.pem"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // Two records went up (one per authorization, at the same name) and
    // both came down: bind9 says so, and serves none now.
    let log = bind.log();
    let said = |what: &str| {
        log.lines()
            .filter(|l| l.contains(what) && l.contains("_acme-challenge.acme.test"))
            .count()
    };
    assert_eq!(said("adding an RR"), 2, "{log}");
    assert_eq!(said("deleting an RR"), 2, "{log}");
    assert_eq!(bind.txt("_acme-challenge.acme.test"), "", "{log}");
}

/// A key file whose secret is not bind9's: the update is refused
/// (BADSIG), the error names the setting and the file, and no certificate
/// is issued.
#[tokio::test(flavor = "current_thread")]
async fn a_bad_tsig_secret_fails_naming_the_setting() {
    let bind = start_bind();
    let pebble = start_pebble_resolving_through(bind.port, free_tcp_port());
    let state = tempfile::tempdir().unwrap();
    // The same key name, another secret.
    let wrong = state.path().join("wrong.key");
    tsig_keygen(&wrong);
    let settings = AcmeSettings {
        dns: Some(bind.update(&wrong)),
        ..pebble.settings(state.path())
    };
    let err = acme::obtain_with(
        &settings,
        &names(),
        &Challenges::default(),
        ChallengeKind::Dns01,
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(err.contains("setting acme_dns_tsig_key_file"), "{err}");
    assert!(err.contains(&wrong.display().to_string()), "{err}");
    assert!(err.contains("BADSIG"), "{err}");
    assert!(!state
        .path()
        .join("certs")
        .join("*.acme.test")
        .join("fullchain.pem")
        .exists());
    assert_eq!(bind.txt("_acme-challenge.acme.test"), "");
}

/// `tlsfront run` with a site `*.acme.test` + `acme.test` and `acme =
/// true` (acme_challenge left "auto"): DNS-01 through bind9 for the
/// wildcard, TLS-ALPN-01 on tlsfront's own listener for the apex; the
/// certificate is served for a name under the wildcard (curl verifies it
/// against pebble's root). `config check` refuses the same site without
/// the DNS settings, naming the setting. Started as root, it runs as
/// `user = "nobody"`, and the key file (0600, root's) reaches the server
/// process through the parent, as the other secrets do.
#[test]
fn tlsfront_gets_a_wildcard_certificate_with_dns01() {
    use std::os::unix::fs::PermissionsExt;
    let bind = start_bind();
    let port = free_tcp_port();
    let pebble = start_pebble_resolving_through(bind.port, port);
    let dir = tempfile::tempdir().unwrap();
    let root_user = rustix::process::geteuid().is_root();
    let user = if root_user { "user = \"nobody\"\n" } else { "" };
    if root_user {
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&bind.key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let www = dir.path().join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("id.txt"), "wildcard site\n").unwrap();
    let site = format!(
        "[[site]]\nnames = [\"*.acme.test\", \"acme.test\"]\nacme = true\nroot = {:?}\n",
        www.display().to_string()
    );
    let head = format!(
        "{user}acme_directory = {:?}\nacme_ca_roots = {:?}\nstate_dir = {:?}\n",
        pebble.directory,
        pebble.https_ca.display().to_string(),
        dir.path().join("state").display().to_string()
    );
    let config = dir.path().join("tlsfront.toml");
    std::fs::write(&config, format!("{head}{site}")).unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (ok, said) = common::config_check(&config);
    assert!(!ok, "{said}");
    assert!(
        said.contains(
            "setting names: *.acme.test: an ACME CA proves a wildcard name with DNS-01 only"
        ),
        "{said}"
    );

    let dns = format!(
        "acme_dns_server = \"127.0.0.1:{}\"\nacme_dns_tsig_key_file = {:?}\n",
        bind.port,
        bind.key_file.display().to_string()
    );
    std::fs::write(&config, format!("{head}{dns}{site}")).unwrap();
    let (ok, said) = common::config_check(&config);
    assert!(ok, "{said}");
    let words = format!(
        "DNS-01 through 127.0.0.1:{} with the TSIG key \"acme-key\" for the wildcard names",
        bind.port
    );
    assert!(said.contains(&words), "{said}");

    let listen = format!("127.0.0.1:{port}");
    let server = common::Server::run(&config, &["--listen", &listen]);
    let out = server.wait_for_output("certificate issued by", 1);
    assert!(
        out.contains("for *.acme.test, acme.test, valid until"),
        "{out}{}",
        server.log()
    );
    let root = dir.path().join("pebble-root.pem");
    std::fs::write(&root, pebble.mgmt_get("/roots/0")).unwrap();
    for name in ["www.acme.test", "acme.test"] {
        let got = tool("curl")
            .args(["-sS", "--max-time", "20", "--cacert"])
            .arg(&root)
            .args(["--resolve", &format!("{name}:{port}:127.0.0.1")])
            .arg(format!("https://{name}:{port}/id.txt"))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&got.stdout),
            "wildcard site\n",
            "{name}: {}",
            String::from_utf8_lossy(&got.stderr)
        );
    }
    // A reload reads the key file again, in the server process that runs
    // as nobody now: through the parent.
    server.reload();
    let reloaded = wait_until(WAIT, "the reload's outcome", || {
        let (out, log) = (server.output(), server.log());
        if out.contains("reloaded ") {
            Ok(true)
        } else if log.contains("reload failed") {
            Ok(false)
        } else {
            Err(out)
        }
    });
    assert!(reloaded, "{}", server.log());
    let log = bind.log();
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("adding an RR at '_acme-challenge.acme.test' TXT"))
            .count(),
        1,
        "auto: DNS-01 for the wildcard only\n{log}"
    );
    assert_eq!(bind.txt("_acme-challenge.acme.test"), "", "{log}");
}
