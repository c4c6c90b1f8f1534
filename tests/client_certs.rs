//! Client certificates per site (`client_ca`, `client_auth`, `client_crl`)
//! through real peers, on one listener with sites chosen by SNI: curl and
//! `openssl s_client` with a certificate from the site's CA (served), with
//! none (refused by a `require` site, served by an `optional` one), from
//! another CA, expired, and revoked by the CRL (refused); the access log's
//! client fields; a backend behind PROXY v2 reading the SSL TLV (verified
//! flags and CN): a Python listener, and Debian trixie's HAProxy 3.0
//! (bookworm's 2.6 has no `fc_pp_tlv` to read it); a reload that picks up a new CRL; paths that require a
//! certificate on an `optional` site; and `config check` refusals. The
//! tlslite-ng cases (a client writing its flight record by record) are in
//! tests/tls/negative.py.

mod common;

use common::{s_client, tool, Ca, Server, WAIT};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// A CA for client certificates, which also signs CRLs.
struct ClientCa(Ca);

impl std::ops::Deref for ClientCa {
    type Target = Ca;
    fn deref(&self) -> &Ca {
        &self.0
    }
}

impl ClientCa {
    fn new(name: &str) -> ClientCa {
        ClientCa(Ca::named(name))
    }

    /// A client certificate for `cn` with this serial: (cert, key) paths.
    fn issue(&self, cn: &str, serial: u64) -> (String, String) {
        self.issue_with(cn, serial, |_| {})
    }

    /// The same, expired since 2021.
    fn issue_expired(&self, cn: &str, serial: u64) -> (String, String) {
        self.issue_with(cn, serial, |p| {
            p.not_before = rcgen::date_time_ymd(2020, 1, 1);
            p.not_after = rcgen::date_time_ymd(2021, 1, 1);
        })
    }

    fn issue_with(
        &self,
        cn: &str,
        serial: u64,
        change: impl FnOnce(&mut rcgen::CertificateParams),
    ) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "tlsfront tests");
        params.serial_number = Some(serial.into());
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        change(&mut params);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let c = self.dir.path().join(format!("{cn}.pem"));
        let k = self.dir.path().join(format!("{cn}.key"));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c.display().to_string(), k.display().to_string())
    }

    /// A CRL revoking these serials, written to `path` (PEM, or DER).
    fn crl(&self, path: &Path, revoked: &[u64], number: u64, pem: bool) {
        let params = rcgen::CertificateRevocationListParams {
            this_update: rcgen::date_time_ymd(2024, 1, 1),
            next_update: rcgen::date_time_ymd(2099, 1, 1),
            crl_number: number.into(),
            issuing_distribution_point: None,
            revoked_certs: revoked
                .iter()
                .map(|s| rcgen::RevokedCertParams {
                    serial_number: (*s).into(),
                    revocation_time: rcgen::date_time_ymd(2024, 1, 1),
                    reason_code: Some(rcgen::RevocationReason::KeyCompromise),
                    invalidity_date: None,
                })
                .collect(),
            key_identifier_method: rcgen::KeyIdMethod::Sha256,
        };
        let crl = params.signed_by(&self.issuer).unwrap();
        if pem {
            std::fs::write(path, crl.pem().unwrap()).unwrap();
        } else {
            std::fs::write(path, crl.der().as_ref()).unwrap();
        }
    }
}

/// The PROXY v2 backend: a Python listener that prints each header's SSL
/// TLV as JSON (client flags, verify, sub-TLVs by type) and answers `ok`.
const BACKEND: &str = r#"
import json, socket, struct, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(8)
print(s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept()
    buf = b""
    while len(buf) < 16:
        buf += c.recv(4096)
    need = 16 + struct.unpack("!H", buf[14:16])[0]
    while len(buf) < need:
        buf += c.recv(4096)
    fam = buf[13] >> 4
    tlvs = buf[16 + (12 if fam == 1 else 36):need]
    out = {}
    while tlvs:
        t, n = tlvs[0], struct.unpack("!H", tlvs[1:3])[0]
        v, tlvs = tlvs[3:3 + n], tlvs[3 + n:]
        if t == 0x20:
            out["client"] = v[0]
            out["verify"] = struct.unpack("!I", v[1:5])[0]
            sub = v[5:]
            while sub:
                st, sn = sub[0], struct.unpack("!H", sub[1:3])[0]
                out["%#x" % st] = sub[3:3 + sn].decode()
                sub = sub[3 + sn:]
    print(json.dumps(out), flush=True)
    c.sendall(b"ok\n")
    c.close()
"#;

/// The backend's process, ended with the test however it ends.
struct Backend(std::process::Child);

impl Drop for Backend {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    path: PathBuf,
    ca: Ca,
    clients: ClientCa,
    crl: PathBuf,
    log: PathBuf,
}

/// The sites: `req.test` (require, with a CRL), `opt.test` (optional) and
/// `back.test` (require, a backend sent PROXY v2), all on one certificate.
fn setup(backend_port: u16) -> Setup {
    let ca = Ca::new();
    let clients = ClientCa::new("tlsfront client CA");
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = ["req", "opt", "back"]
        .iter()
        .map(|n| format!("{n}.test"))
        .collect();
    let (cert, key) = ca.issue("sites", &names, false);
    let root = dir.path().join("www");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("id.txt"), "mtls\n").unwrap();
    let crl = dir.path().join("clients.crl");
    clients.crl(&crl, &[], 1, true);
    let log = dir.path().join("access.log");
    let text = format!(
        "admin = \"127.0.0.1:0\"\naccess_log = {log:?}\naccess_log_format = \"tls\"\n\
         client_ca = {ca:?}\n\
         [[site]]\nnames = [\"req.test\"]\nroot = {root:?}\ncert = {cert:?}\nkey = {key:?}\n\
         default = true\nclient_auth = \"require\"\nclient_crl = [{crl:?}]\n\
         [[site]]\nnames = [\"opt.test\"]\nroot = {root:?}\ncert = {cert:?}\nkey = {key:?}\n\
         client_auth = \"optional\"\n\
         [[site]]\nnames = [\"back.test\"]\nbackend = \"127.0.0.1:{backend_port}\"\n\
         write_proxy = \"v2\"\ncert = {cert:?}\nkey = {key:?}\n",
        ca = clients.pem,
    );
    let path = dir.path().join("mtls.toml");
    std::fs::write(&path, text).unwrap();
    Setup {
        _dir: dir,
        path,
        ca,
        clients,
        crl,
        log,
    }
}

/// curl to `name` on `port` with these extra flags: (exit code, stdout,
/// stderr).
fn curl(s: &Setup, port: u16, name: &str, path: &str, extra: &[&str]) -> (i32, String, String) {
    let out = tool("curl")
        .arg("--cacert")
        .arg(&s.ca.pem)
        .args(["-sS", "--http1.1", "--max-time", "30", "--resolve"])
        .arg(format!("{name}:{port}:127.0.0.1"))
        .args(extra)
        .arg(format!("https://{name}:{port}{path}"))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The access log's lines once it has `n` of them (it is flushed about a
/// second after a line).
fn log_lines(path: &Path, n: usize) -> Vec<String> {
    let text = common::wait_until(WAIT, format!("{n} lines in {}", path.display()), || {
        let t = std::fs::read_to_string(path).unwrap_or_default();
        if t.lines().count() >= n {
            Ok(t)
        } else {
            Err(t)
        }
    });
    text.lines().map(str::to_string).collect()
}

#[test]
fn client_certificates_are_required_verified_logged_and_passed_to_the_backend() {
    let mut backend = Backend(
        tool("python3")
            .args(["-c", BACKEND])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(backend.0.stdout.take().unwrap()).lines();
    let backend_port: u16 = lines.next().unwrap().unwrap().trim().parse().unwrap();
    let s = setup(backend_port);
    let server = Server::run(&s.path, &[]);
    let port = server.port;
    let (alice, alice_key) = s.clients.issue("alice", 10);
    let (bob, bob_key) = s.clients.issue("bob", 11);
    let alice_args = ["--cert", alice.as_str(), "--key", alice_key.as_str()];

    // require: a certificate from the CA is served; none is refused with
    // TLS 1.3's certificate_required alert.
    let (code, out, err) = curl(&s, port, "req.test", "/id.txt", &alice_args);
    assert_eq!((code, out.as_str()), (0, "mtls\n"), "{err}");
    let (code, _, err) = curl(&s, port, "req.test", "/id.txt", &[]);
    assert_ne!(code, 0);
    assert!(err.contains("alert certificate required"), "{err}");

    // openssl s_client, TLS 1.2 and 1.3 with the certificate: the
    // handshake completes and the server asked for the client CA.
    let ca_arg = s.ca.pem.display().to_string();
    for v in ["-tls1_2", "-tls1_3"] {
        let (out, err, _) = s_client(
            port,
            &[
                "-servername",
                "req.test",
                "-CAfile",
                &ca_arg,
                "-verify_return_error",
                "-cert",
                &alice,
                "-key",
                &alice_key,
                v,
            ],
            &[],
            Duration::from_secs(30),
        );
        let text = format!("{out}{err}");
        assert!(
            text.contains("Verify return code: 0 (ok)")
                && text.contains("Acceptable client certificate CA names")
                && text.contains("CN = tlsfront client CA"),
            "{v}: {text}"
        );
    }

    // A certificate from another CA: unknown_ca (TLS 1.2 shows it in the
    // handshake itself); an expired one from the right CA:
    // certificate_expired.
    let other = ClientCa::new("another CA");
    let (mallory, mallory_key) = other.issue("mallory", 12);
    let (old, old_key) = s.clients.issue_expired("old", 13);
    for (cert, key, alert) in [
        (&mallory, &mallory_key, "alert unknown ca"),
        (&old, &old_key, "alert certificate expired"),
    ] {
        let (code, _, err) = curl(
            &s,
            port,
            "req.test",
            "/id.txt",
            &["--cert", cert, "--key", key],
        );
        assert!(code != 0 && err.contains(alert), "{alert}: {err}");
    }
    let (out, err, _) = s_client(
        port,
        &[
            "-servername",
            "req.test",
            "-CAfile",
            &ca_arg,
            "-cert",
            &mallory,
            "-key",
            &mallory_key,
            "-tls1_2",
        ],
        &[],
        Duration::from_secs(30),
    );
    assert!(err.contains("alert unknown ca"), "{out}{err}");

    // optional: none is served, a bad one is still refused.
    let (code, out, err) = curl(&s, port, "opt.test", "/id.txt", &[]);
    assert_eq!((code, out.as_str()), (0, "mtls\n"), "{err}");
    let (code, out, err) = curl(&s, port, "opt.test", "/id.txt", &alice_args);
    assert_eq!((code, out.as_str()), (0, "mtls\n"), "{err}");
    let (code, _, err) = curl(
        &s,
        port,
        "opt.test",
        "/id.txt",
        &["--cert", &mallory, "--key", &mallory_key],
    );
    assert!(code != 0 && err.contains("alert unknown ca"), "{err}");

    // The access log: verify result and CN on the sites that ask. Each
    // worker writes its own lines, so the file's order need not be the
    // requests'.
    let l = log_lines(&s.log, 3);
    for (site, end) in [
        ("req.test", " SUCCESS \"alice\""),
        ("opt.test", " NONE \"-\""),
        ("opt.test", " SUCCESS \"alice\""),
    ] {
        let site = format!("\"{site}\"");
        assert_eq!(
            l.iter()
                .filter(|l| l.contains(&site) && l.ends_with(end))
                .count(),
            1,
            "{site}{end}: {l:?}"
        );
    }

    // The backend: the SSL TLV says a certificate was presented in this
    // connection and its session and verified, and carries the CN.
    let (code, out, err) = curl(&s, port, "back.test", "/", &alice_args);
    assert!(out.contains("ok") || code == 1, "{code} {out} {err}");
    let tlv: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(tlv["client"], 0x07, "{tlv}");
    assert_eq!(tlv["verify"], 0, "{tlv}");
    assert_eq!(tlv["0x22"], "alice", "{tlv}");
    assert_eq!(tlv["0x21"], "TLSv1.3", "{tlv}");

    // A reload reads the CRL again: bob, served before, is refused once
    // revoked (a DER CRL this time).
    let (code, _, err) = curl(
        &s,
        port,
        "req.test",
        "/id.txt",
        &["--cert", &bob, "--key", &bob_key],
    );
    assert_eq!(code, 0, "{err}");
    // TLS 1.2 sessions of both, kept for after the reload.
    let dir = tempfile::tempdir().unwrap();
    let sess = |who: &str| dir.path().join(format!("{who}.sess")).display().to_string();
    let get: &[u8] = b"GET /id.txt HTTP/1.1\r\nHost: req.test\r\nConnection: close\r\n\r\n";
    // A TLS 1.2 GET with `cert`, its session saved to (`-sess_out`) or
    // taken from (`-sess_in`) `who`'s file.
    let tls12 = |who: &str, cert: &str, key: &str, sess_arg: &str| {
        let file = sess(who);
        let (out, err, _) = s_client(
            port,
            &[
                "-servername",
                "req.test",
                "-CAfile",
                &ca_arg,
                "-tls1_2",
                "-ign_eof",
                "-cert",
                cert,
                "-key",
                key,
                sess_arg,
                &file,
            ],
            &[common::Step::Send(get)],
            Duration::from_secs(30),
        );
        format!("{out}{err}")
    };
    for (who, cert, key) in [("alice", &alice, &alice_key), ("bob", &bob, &bob_key)] {
        let out = tls12(who, cert, key, "-sess_out");
        assert!(out.contains("mtls"), "{who}: {out}");
    }
    s.clients.crl(&s.crl, &[11], 2, false);
    server.reload();
    server.wait_for_output("reloaded", 1);
    // The sessions resume, and bob's certificate, verified again against
    // the new CRL, ends the connection before any request.
    for (who, cert, key, served) in [
        ("alice", &alice, &alice_key, true),
        ("bob", &bob, &bob_key, false),
    ] {
        let out = tls12(who, cert, key, "-sess_in");
        assert!(out.contains("Reused, TLSv1.2"), "{who}: {out}");
        assert_eq!(out.contains("mtls"), served, "{who}: {out}");
    }
    let (code, _, err) = curl(
        &s,
        port,
        "req.test",
        "/id.txt",
        &["--cert", &bob, "--key", &bob_key],
    );
    assert!(
        code != 0 && err.contains("alert certificate revoked"),
        "{err}"
    );
    let (code, _, err) = curl(&s, port, "req.test", "/id.txt", &alice_args);
    assert_eq!(code, 0, "{err}");

    // Every handshake above, by result: refused for want of a certificate
    // (1), from another CA (3), revoked (bob's full handshake and his
    // resumed session), served without one (1, optional).
    // A refusal is counted once its alert is sent, maybe after the client
    // read it: waited for.
    let lines: Vec<String> = [
        ("missing", 1),
        ("unknown_ca", 3),
        ("revoked", 2),
        ("none", 1),
    ]
    .iter()
    .map(|(result, n)| format!("tlsfront_client_certificates_total{{result=\"{result}\"}} {n}\n"))
    .collect();
    common::wait_until(WAIT, "the client certificate counts in /metrics", || {
        let m = server.metrics();
        match lines.iter().find(|l| !m.contains(l.as_str())) {
            None => Ok(()),
            Some(l) => Err(format!("{l}{m}")),
        }
    });
}

#[test]
fn config_check_refuses_client_auth_without_a_usable_ca() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    for (name, extra, want) in [
        (
            "noca",
            "client_auth = \"optional\"\n".to_string(),
            "line 4 ([[site]] #1), setting client_auth: client certificates need the CAs that \
             issue them: set client_ca"
                .to_string(),
        ),
        (
            "missing",
            "client_ca = \"missing.pem\"\n".to_string(),
            format!(
                "line 4 ([[site]] #1), setting client_ca: cannot read the CA bundle {}",
                dir.path().join("missing.pem").display()
            ),
        ),
        (
            "empty",
            format!("client_ca = {empty:?}\n"),
            format!(
                "line 4 ([[site]] #1), setting client_ca: the CA bundle {} holds no certificate",
                empty.display()
            ),
        ),
        (
            "mode",
            format!("client_ca = {empty:?}\nclient_auth = \"yes\"\n"),
            "line 5 ([[site]] #1), setting client_auth: \"yes\" is not a client_auth mode"
                .to_string(),
        ),
    ] {
        let file = dir.path().join(format!("{name}.toml"));
        std::fs::write(
            &file,
            format!("[[site]]\nnames = [\"a.test\"]\nroot = {root:?}\n{extra}"),
        )
        .unwrap();
        let (ok, text) = common::config_check(&file);
        assert!(!ok, "{name}: {text}");
        let at = format!("config file {}, {want}", file.display());
        assert!(text.contains(&at), "{name}: {text}\nwanted: {at}");
    }
}

/// `[[site.paths]] client_cert = "require"` on an `optional` site: those
/// paths answer 403 without a verified certificate, over HTTP/1.1 and
/// HTTP/2, and the site's other paths need none. A connection made
/// without SNI (for the default site, which asks for no certificate)
/// cannot reach a site that asks for one through its Host: 421.
#[test]
fn paths_can_require_a_certificate_and_no_sni_cannot_skip_it() {
    let ca = Ca::new();
    let clients = ClientCa::new("tlsfront path CA");
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = ["pub", "opt", "req"]
        .iter()
        .map(|n| format!("{n}.test"))
        .collect();
    let (cert, key) = ca.issue("sites", &names, false);
    let root = dir.path().join("www");
    std::fs::create_dir_all(root.join("private")).unwrap();
    std::fs::write(root.join("id.txt"), "public\n").unwrap();
    std::fs::write(root.join("private/x.txt"), "private\n").unwrap();
    let text = format!(
        "client_ca = {ca:?}\n\
         [[site]]\nnames = [\"pub.test\"]\nroot = {root:?}\ncert = {cert:?}\nkey = {key:?}\n\
         default = true\nclient_auth = \"off\"\n\
         [[site]]\nnames = [\"opt.test\"]\nroot = {root:?}\ncert = {cert:?}\nkey = {key:?}\n\
         client_auth = \"optional\"\n\
         [[site.paths]]\nmatch = \"/private/*\"\nclient_cert = \"require\"\n\
         [[site]]\nnames = [\"req.test\"]\nroot = {root:?}\ncert = {cert:?}\nkey = {key:?}\n\
         client_auth = \"require\"\n",
        ca = clients.pem,
    );
    let path = dir.path().join("paths.toml");
    std::fs::write(&path, &text).unwrap();
    let server = Server::run(&path, &[]);
    let port = server.port;
    let (alice, alice_key) = clients.issue("alice", 20);
    let s = Setup {
        _dir: dir,
        path,
        ca,
        clients,
        crl: PathBuf::new(),
        log: PathBuf::new(),
    };
    let status = |name: &str, target: &str, extra: &[&str]| {
        let mut args = vec!["-o", "/dev/null", "-w", "%{http_code} %{http_version}"];
        args.extend_from_slice(extra);
        let (code, out, err) = curl(&s, port, name, target, &args);
        assert_eq!(code, 0, "{name}{target} {extra:?}: {err}");
        out
    };
    let cert = ["--cert", alice.as_str(), "--key", alice_key.as_str()];
    for (proto, v) in [("--http1.1", "1.1"), ("--http2", "2")] {
        for (target, with_cert, want) in [
            ("/private/x.txt", false, 403),
            ("/private/nope", false, 403),
            ("/private/x.txt", true, 200),
            ("/id.txt", false, 200),
        ] {
            let mut extra = vec![proto];
            if with_cert {
                extra.extend(cert);
            }
            assert_eq!(
                status("opt.test", target, &extra),
                format!("{want} {v}"),
                "{target} {extra:?}"
            );
        }
    }
    let (_, body, _) = curl(&s, port, "opt.test", "/private/x.txt", &cert);
    assert_eq!(body, "private\n");

    // Without SNI the handshake is the default site's (no certificate
    // asked); a Host naming a site that asks for one is not served there.
    for host in ["req.test", "opt.test"] {
        let out = tool("curl")
            .arg("--cacert")
            .arg(&s.ca.pem)
            .args([
                "-sS",
                "-k",
                "--http1.1",
                "--max-time",
                "30",
                "-o",
                "/dev/null",
            ])
            .args(["-w", "%{http_code}", "-H", &format!("Host: {host}")])
            .arg(format!("https://127.0.0.1:{port}/id.txt"))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "421",
            "{host}: {out:?}"
        );
    }
    // The default site itself answers it.
    let out = tool("curl")
        .args(["-sS", "-k", "--http1.1", "--max-time", "30"])
        .arg(format!("https://127.0.0.1:{port}/id.txt"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "public\n");

    // A path rule on a site that asks for no certificate is refused.
    let bad = text
        .replacen("client_auth = \"optional\"\n", "", 1)
        .replacen("client_ca = ", "#client_ca = ", 1)
        .replace("client_auth = \"off\"\n", "")
        .replace("client_auth = \"require\"\n", "");
    std::fs::write(&s.path, bad).unwrap();
    let (ok, said) = common::config_check(&s.path);
    assert!(
        !ok && said.contains("[[site.paths]] client_cert")
            && said.contains("client_auth = \"optional\""),
        "{said}"
    );
    server.stop();
}

/// HAProxy itself reads what a backend site sends: Debian trixie's 3.0
/// (bookworm's 2.6 has no `fc_pp_tlv`) behind `write_proxy = "v2"` answers
/// with the SSL TLV it received, which carries the client flags, the
/// verify result and the subject CN (HAProxy's own `send-proxy-v2-ssl-cn`
/// layout), with a certificate and, on an `optional` site, without one.
#[test]
fn haproxy_reads_the_client_certificate_in_the_proxy_v2_ssl_tlv() {
    let haproxy = common::peers::haproxy3_ssl_tlv_reader();
    let ca = Ca::new();
    let clients = ClientCa::new("tlsfront TLV CA");
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = vec!["req.test".into(), "opt.test".into()];
    let (cert, key) = ca.issue("sites", &names, false);
    let site = |name: &str, mode: &str| {
        format!(
            "[[site]]\nnames = [\"{name}\"]\nbackend = \"127.0.0.1:{}\"\nwrite_proxy = \"v2\"\n\
             cert = {cert:?}\nkey = {key:?}\nclient_ca = {:?}\nclient_auth = \"{mode}\"\n",
            haproxy.port, clients.pem,
        )
    };
    let path = dir.path().join("tlv.toml");
    std::fs::write(
        &path,
        site("req.test", "require") + &site("opt.test", "optional"),
    )
    .unwrap();
    let server = Server::run(&path, &[]);
    let (alice, alice_key) = clients.issue("alice", 30);
    let s = Setup {
        _dir: dir,
        path,
        ca,
        clients,
        crl: PathBuf::new(),
        log: PathBuf::new(),
    };
    /// The SSL TLV HAProxy answered with: (client flags, verify, sub-TLVs).
    fn decoded(body: &str) -> (u8, u32, Vec<(u8, String)>) {
        let hex = body
            .trim()
            .strip_prefix("ssl=")
            .unwrap_or_else(|| panic!("{body:?}"));
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        assert!(bytes.len() >= 5, "{body:?}");
        let verify = u32::from_be_bytes(bytes[1..5].try_into().unwrap());
        let (mut sub, mut rest) = (Vec::new(), &bytes[5..]);
        while rest.len() >= 3 {
            let n = u16::from_be_bytes([rest[1], rest[2]]) as usize;
            sub.push((
                rest[0],
                String::from_utf8_lossy(&rest[3..3 + n]).into_owned(),
            ));
            rest = &rest[3 + n..];
        }
        (bytes[0], verify, sub)
    }
    let port = server.port;
    let cert_args = ["--cert", alice.as_str(), "--key", alice_key.as_str()];
    let (code, body, err) = curl(&s, port, "req.test", "/", &cert_args);
    assert_eq!(code, 0, "{err}");
    let (client, verify, sub) = decoded(&body);
    // PP2_CLIENT_SSL | PP2_CLIENT_CERT_CONN | PP2_CLIENT_CERT_SESS.
    assert_eq!((client, verify), (0x07, 0), "{body}");
    assert!(sub.contains(&(0x21, "TLSv1.3".into())), "{sub:?}");
    assert!(sub.contains(&(0x22, "alice".into())), "{sub:?}");
    // Without a certificate: the TLS flag alone, and a non-zero verify.
    let (code, body, err) = curl(&s, port, "opt.test", "/", &[]);
    assert_eq!(code, 0, "{err}");
    let (client, verify, sub) = decoded(&body);
    assert_eq!(client, 0x01, "{body}");
    assert_ne!(verify, 0, "{body}");
    assert!(!sub.iter().any(|(t, _)| *t == 0x22), "{sub:?}");
    server.stop();
}
