//! Pebble (Let's Encrypt's test CA, Debian's package, or trixie's 2.6 with
//! ACME Renewal Information) for the ACME tests (tests/acme.rs,
//! tests/acme_dns.rs): started on loopback ports the kernel picked, with
//! its HTTPS (ACME and management) on a certificate from a CA made here
//! (Debian ships no test certificate; `settings` trusts it), validating at
//! once and never reusing an authorization, and resolving the names through
//! pebble-challtestsrv (every name 127.0.0.1) or a DNS server of the test's.

use std::fs::File;
use std::net::{TcpListener as StdTcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, SanType};
use tlsfront::acme::AcmeSettings;

/// A running pebble and, unless it resolves through a DNS server of the
/// test's, its mock DNS server; both are killed on drop, and their logs
/// printed if the test failed.
pub struct Pebble {
    pebble: Child,
    dns: Option<Child>,
    pub dir: tempfile::TempDir,
    /// The ACME directory URL.
    pub directory: String,
    /// The management interface's port (roots, certificate status).
    pub mgmt: u16,
    /// The CA of pebble's own HTTPS certificate.
    pub https_ca: PathBuf,
}

impl Drop for Pebble {
    fn drop(&mut self) {
        for child in std::iter::once(&mut self.pebble).chain(self.dns.as_mut()) {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            for log in ["pebble.log", "challtestsrv.log"] {
                let text = std::fs::read_to_string(self.dir.path().join(log)).unwrap_or_default();
                eprintln!("---- {log} ----\n{text}");
            }
        }
    }
}

/// Whether `port` has not been handed out by this process yet (and now
/// is). The ports are free when picked but only taken later, by pebble,
/// its DNS server or tlsfront: without this, the kernel may pick a port
/// again for another of them (in the same test or one running beside it)
/// before the first has bound it.
fn first_hand_out(port: u16) -> bool {
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap();
    if handed_out.contains(&port) {
        return false;
    }
    handed_out.push(port);
    true
}

/// A loopback port free for TCP right now (the kernel's pick), not handed
/// out before.
pub fn free_tcp_port() -> u16 {
    for _ in 0..100 {
        let port = StdTcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if first_hand_out(port) {
            return port;
        }
    }
    panic!("no loopback port not handed out before in 100 tries");
}

/// A loopback port free for both UDP and TCP (DNS listens on both), not
/// handed out before.
pub fn free_dns_port() -> u16 {
    for _ in 0..100 {
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = udp.local_addr().unwrap().port();
        if StdTcpListener::bind(("127.0.0.1", port)).is_ok() && first_hand_out(port) {
            return port;
        }
    }
    panic!("no loopback port free for both UDP and TCP in 100 tries");
}

/// Wait (bounded) until something accepts TCP connections on `port`.
fn wait_for_port(port: u16, what: &str, child: &mut Child, log: &Path) {
    super::wait_until(super::WAIT, format!("{what} on 127.0.0.1:{port}"), || {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "{what} exited ({status}) before listening on {port}:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        TcpStream::connect(("127.0.0.1", port))
            .map(drop)
            .map_err(|e| {
                format!(
                    "{e}; its log:\n{}",
                    std::fs::read_to_string(log).unwrap_or_default()
                )
            })
    });
}

/// A CA and a certificate for 127.0.0.1/localhost signed by it, for
/// pebble's HTTPS listeners: (CA PEM, certificate PEM, key PEM).
fn https_certificate() -> (String, String, String) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "tlsfront test CA for pebble");
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    params
        .subject_alt_names
        .push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    let cert = params.signed_by(&key, &ca).unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

/// Start pebble-challtestsrv (DNS only: every name is 127.0.0.1, no AAAA)
/// and pebble validating TLS-ALPN-01 on `tls_port`.
pub fn start_pebble(tls_port: u16) -> Pebble {
    start_pebble_issuing_for(tls_port, None)
}

/// The same, issuing certificates valid for `validity` (pebble's
/// `certificateValidityPeriod`; default five years).
pub fn start_pebble_issuing_for(tls_port: u16, validity: Option<Duration>) -> Pebble {
    start_pebble_with(tls_port, validity, 0)
}

/// The same, rejecting `nonce_reject` percent of good nonces with badNonce
/// (`PEBBLE_WFE_NONCEREJECT`: each POST's nonce is refused when a roll in
/// 0..100 is below it, so 100 refuses every one; the answer carries a fresh
/// nonce all the same).
pub fn start_pebble_with(tls_port: u16, validity: Option<Duration>, nonce_reject: u8) -> Pebble {
    start_pebble_program(
        "pebble",
        (tls_port, free_tcp_port()),
        validity,
        nonce_reject,
    )
}

/// Pebble validating TLS-ALPN-01 on `tls_port` and HTTP-01 on `http_port`.
pub fn start_pebble_http(tls_port: u16, http_port: u16) -> Pebble {
    start_pebble_program("pebble", (tls_port, http_port), None, 0)
}

/// Debian trixie's pebble (2.6), which has ACME Renewal Information (RFC
/// 9773) and `replaces`; bookworm's (2.4) has neither. Unpacked, not
/// installed, by tests/install-packages.sh (a path from the repository,
/// the directory tests run in).
pub const PEBBLE_ARI: &str = "target/trixie-packages/root/usr/bin/pebble";

/// Pebble 2.6 ([`PEBBLE_ARI`]), as [`start_pebble`].
pub fn start_pebble_ari(tls_port: u16) -> Pebble {
    assert!(
        Path::new(PEBBLE_ARI).is_file(),
        "{PEBBLE_ARI} is missing: tests/install-packages.sh fetches Debian trixie's pebble \
         (2.6, with ACME Renewal Information) there"
    );
    start_pebble_program(PEBBLE_ARI, (tls_port, free_tcp_port()), None, 0)
}

/// `program` (bookworm's pebble, or [`PEBBLE_ARI`]) as [`start_pebble_with`],
/// validating TLS-ALPN-01 and HTTP-01 on these ports.
pub fn start_pebble_program(
    program: &str,
    (tls_port, http_port): (u16, u16),
    validity: Option<Duration>,
    nonce_reject: u8,
) -> Pebble {
    start_pebble_resolving(program, None, (tls_port, http_port), validity, nonce_reject)
}

/// Bookworm's pebble resolving the names through a DNS server of the
/// test's on `dns_port` (bind9, for DNS-01) instead of pebble-challtestsrv.
pub fn start_pebble_resolving_through(dns_port: u16, tls_port: u16) -> Pebble {
    start_pebble_resolving(
        "pebble",
        Some(dns_port),
        (tls_port, free_tcp_port()),
        None,
        0,
    )
}

/// [`start_pebble_program`], resolving through `dns_server` (a port on
/// 127.0.0.1), else through a pebble-challtestsrv of its own (every name
/// is 127.0.0.1, no AAAA).
fn start_pebble_resolving(
    program: &str,
    dns_server: Option<u16>,
    (tls_port, http_port): (u16, u16),
    validity: Option<Duration>,
    nonce_reject: u8,
) -> Pebble {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = https_certificate();
    let https_ca = dir.path().join("https-ca.pem");
    std::fs::write(&https_ca, ca).unwrap();
    std::fs::write(dir.path().join("cert.pem"), cert).unwrap();
    std::fs::write(dir.path().join("key.pem"), key).unwrap();

    let (dns_port, dns) = match dns_server {
        Some(port) => (port, None),
        None => {
            let dns_port = free_dns_port();
            let dns_mgmt = free_tcp_port();
            let dns_log = dir.path().join("challtestsrv.log");
            let mut dns = super::tool("pebble-challtestsrv")
                .args(["-dns01", &format!("127.0.0.1:{dns_port}")])
                .args(["-management", &format!("127.0.0.1:{dns_mgmt}")])
                .args(["-http01", "", "-https01", "", "-tlsalpn01", ""])
                .args(["-defaultIPv4", "127.0.0.1", "-defaultIPv6", ""])
                .stdout(Stdio::from(File::create(&dns_log).unwrap()))
                .stderr(Stdio::from(File::create(&dns_log).unwrap()))
                .spawn()
                .expect("start pebble-challtestsrv (Debian package pebble: tests/install-packages.sh installs it)");
            wait_for_port(dns_mgmt, "pebble-challtestsrv", &mut dns, &dns_log);
            (dns_port, Some(dns))
        }
    };

    let acme_port = free_tcp_port();
    let mgmt = free_tcp_port();
    let config = serde_json::json!({
        "pebble": {
            "listenAddress": format!("127.0.0.1:{acme_port}"),
            "managementListenAddress": format!("127.0.0.1:{mgmt}"),
            "certificate": dir.path().join("cert.pem"),
            "privateKey": dir.path().join("key.pem"),
            // Nothing answers HTTP-01 there unless a test listens on it.
            "httpPort": http_port,
            "tlsPort": tls_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
            "certificateValidityPeriod": validity.map_or(157_766_400, |v| v.as_secs())
        }
    });
    let config_path = dir.path().join("pebble-config.json");
    std::fs::write(&config_path, config.to_string()).unwrap();
    let log = dir.path().join("pebble.log");
    let mut pebble = super::tool(program)
        .arg("-config")
        .arg(&config_path)
        .args(["-dnsserver", &format!("127.0.0.1:{dns_port}")])
        // Validate at once, accept every good nonce (unless told), and
        // never reuse an authorization: each order is validated through the
        // listener.
        .env("PEBBLE_VA_NOSLEEP", "1")
        .env("PEBBLE_WFE_NONCEREJECT", nonce_reject.to_string())
        .env("PEBBLE_AUTHZREUSE", "0")
        .stdout(Stdio::from(File::create(&log).unwrap()))
        .stderr(Stdio::from(File::create(&log).unwrap()))
        .spawn()
        .expect("start pebble (Debian package pebble: tests/install-packages.sh installs it)");
    wait_for_port(acme_port, "pebble", &mut pebble, &log);
    wait_for_port(mgmt, "pebble (management)", &mut pebble, &log);
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        said.contains(&format!(
            "Configured to reject {nonce_reject}% of good nonces"
        )),
        "pebble did not take PEBBLE_WFE_NONCEREJECT={nonce_reject}:\n{said}"
    );
    Pebble {
        pebble,
        dns,
        dir,
        directory: format!("https://127.0.0.1:{acme_port}/dir"),
        mgmt,
        https_ca,
    }
}

impl Pebble {
    pub fn settings(&self, state_dir: &Path) -> AcmeSettings {
        AcmeSettings {
            directory: self.directory.clone(),
            contact: vec!["mailto:hostmaster@tlsfront.test".into()],
            state_dir: state_dir.to_path_buf(),
            extra_roots: Some(self.https_ca.clone()),
            dns: None,
            profile: None,
        }
    }

    /// POST requests to `path` pebble has seen so far (its log names each
    /// before it checks the nonce).
    pub fn posts_to(&self, path: &str) -> usize {
        std::fs::read_to_string(self.dir.path().join("pebble.log"))
            .unwrap_or_default()
            .matches(&format!("POST {path} -> calling handler()"))
            .count()
    }

    /// All POST requests pebble has seen so far.
    pub fn posts(&self) -> usize {
        std::fs::read_to_string(self.dir.path().join("pebble.log"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(" POST /") && l.ends_with("-> calling handler()"))
            .count()
    }

    /// GET from pebble's management interface (curl, bounded).
    pub fn mgmt_get(&self, path: &str) -> String {
        let out = super::tool("curl")
            .args(["-sS", "--fail", "--max-time", "10", "--cacert"])
            .arg(&self.https_ca)
            .arg(format!("https://127.0.0.1:{}{path}", self.mgmt))
            .output()
            .expect("run curl");
        assert!(
            out.status.success(),
            "GET {path} from pebble's management interface: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Pebble's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pebble.log")).unwrap_or_default()
    }

    /// GET `url` from the ACME server (curl, bounded): the headers, the body.
    pub fn acme_get(&self, url: &str) -> (String, String) {
        let out = super::tool("curl")
            .args(["-sS", "--fail", "--max-time", "10", "-i", "--cacert"])
            .arg(&self.https_ca)
            .arg(url)
            .output()
            .expect("run curl");
        assert!(
            out.status.success(),
            "GET {url}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        (head.to_string(), body.to_string())
    }

    /// What the CA's renewalInfo says about `cert_id` (asked here, with
    /// curl): the suggested window as Unix seconds, and Retry-After.
    pub fn renewal_info(&self, cert_id: &str) -> ((i64, i64), String) {
        let (_, directory) = self.acme_get(&self.directory);
        let directory: serde_json::Value = serde_json::from_str(&directory).unwrap();
        let base = directory["renewalInfo"]
            .as_str()
            .unwrap_or_else(|| panic!("no renewalInfo in pebble's directory: {directory}"));
        let (head, body) = self.acme_get(&format!("{base}/{cert_id}"));
        let info: instant_acme::RenewalInfo = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("pebble's renewalInfo {body:?}: {e}"));
        let retry_after = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("retry-after")
                    .then(|| value.trim().to_string())
            })
            .unwrap_or_else(|| panic!("no Retry-After in {head}"));
        (
            (
                info.suggested_window.start.unix_timestamp(),
                info.suggested_window.end.unix_timestamp(),
            ),
            retry_after,
        )
    }

    /// Pebble's word on a certificate: "Valid" or "Revoked".
    pub fn cert_status(&self, serial: &str) -> String {
        let body = self.mgmt_get(&format!("/cert-status-by-serial/{serial}"));
        let json: serde_json::Value = serde_json::from_str(&body).unwrap();
        json["Status"].as_str().unwrap_or_default().to_string()
    }
}
