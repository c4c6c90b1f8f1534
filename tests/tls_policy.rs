//! Each site's handshake policy through real clients, on one listener with
//! sites chosen by SNI: `tls_versions` and `ciphers` with `openssl
//! s_client` (a TLS 1.2 client refused by a 1.3-only site with a
//! protocol_version alert, a site restricted to one suite negotiating only
//! it and refusing clients without it), the key exchange group with a
//! rustls client (X25519MLKEM768 by default, X25519 with no
//! HelloRetryRequest for a client that sends only an X25519 share, the
//! site's order over the client's) and the metric that counts it, RFC
//! 8879 certificate compression seen in the size of the server's first
//! flight, headless Chromium negotiating X25519MLKEM768 and taking the
//! compressed certificate (its net log), a reload that changes a policy,
//! and `config check` refusing bad names.

mod common;

use common::{config_check, headless_chromium, s_client, tool, wait_until, Ca, Server, BIN, WAIT};
use rustls::crypto::{aws_lc_rs, CryptoProvider, SupportedKxGroup};
use rustls::pki_types::ServerName;
use rustls::{HandshakeKind, NamedGroup};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The sites: `default.test` (every default), `strict.test` (TLS 1.3
/// only, ChaCha20 only, X25519 only), `order.test` (X25519 before
/// X25519MLKEM768), `one12.test` (one TLS 1.2 suite), `plain.test`
/// (certificate compression off), all under one certificate whose many
/// names make it compress well. The file's path, and the certificate's.
fn config(dir: &Path, ca: &Ca, default_extra: &str) -> (PathBuf, PathBuf) {
    let mut names: Vec<String> = ["default", "strict", "order", "one12", "plain"]
        .iter()
        .map(|n| format!("{n}.test"))
        .collect();
    names.extend((0..40).map(|i| format!("padding-{i}.policy.test")));
    let (cert, key) = ca.issue("policy", &names, false);
    let root = dir.join("www");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("id.txt"), "policy\n").unwrap();
    let site = |name: &str, extra: &str| {
        format!(
            "[[site]]\nnames = [\"{name}.test\"]\nroot = {root:?}\ncert = {cert:?}\nkey = {key:?}\n{extra}\n",
        )
    };
    let text = [
        "admin = \"127.0.0.1:0\"\n".to_string(),
        site("default", &format!("default = true\n{default_extra}")),
        site(
            "strict",
            "tls_versions = [\"1.3\"]\nciphers = [\"TLS_CHACHA20_POLY1305_SHA256\"]\n\
             kx_groups = [\"X25519\"]\n",
        ),
        site("order", "kx_groups = [\"X25519\", \"X25519MLKEM768\"]\n"),
        site(
            "one12",
            "ciphers = [\"TLS_AES_128_GCM_SHA256\", \"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384\"]\n",
        ),
        site("plain", "cert_compression = false\n"),
    ]
    .concat();
    let path = dir.join("policy.toml");
    std::fs::write(&path, text).unwrap();
    (path, cert)
}

/// `openssl s_client` to `name` with `args`: (succeeded, all it printed).
fn openssl(port: u16, name: &str, args: &[&str]) -> (bool, String) {
    let mut all = vec!["-servername", name, "-brief"];
    all.extend_from_slice(args);
    let (out, err, _) = s_client(port, &all, &[], Duration::from_secs(30));
    let text = format!("{out}{err}");
    // -brief prints the protocol and cipher once the handshake is done.
    (text.contains("CONNECTION ESTABLISHED"), text)
}

/// A rustls client: these groups (the first gets a key share, and with
/// X25519MLKEM768 first, X25519 too), TLS 1.3 and 1.2, certificate
/// decompression as `decompress` says.
fn client(
    ca: &Path,
    groups: &[&'static dyn SupportedKxGroup],
    decompress: bool,
) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = CryptoProvider {
        kx_groups: groups.to_vec(),
        ..aws_lc_rs::default_provider()
    };
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    if !decompress {
        cfg.cert_decompressors = Vec::new();
    }
    Arc::new(cfg)
}

/// Counts the bytes the server sends.
struct Counting<'a>(&'a mut TcpStream, usize);

impl Read for Counting<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.0.read(buf)?;
        self.1 += n;
        Ok(n)
    }
}

impl Write for Counting<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// What a rustls handshake with `name` negotiated.
struct Shook {
    group: Option<NamedGroup>,
    kind: Option<HandshakeKind>,
    /// Bytes the server sent until the client's handshake was done (its
    /// whole first flight: the client reads nothing after it).
    server_bytes: usize,
}

fn handshake(port: u16, name: &str, cfg: Arc<rustls::ClientConfig>) -> Shook {
    let mut sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
    sock.set_read_timeout(Some(WAIT)).unwrap();
    let mut conn =
        rustls::ClientConnection::new(cfg, ServerName::try_from(name.to_string()).unwrap())
            .unwrap();
    let mut io = Counting(&mut sock, 0);
    while conn.is_handshaking() {
        conn.complete_io(&mut io)
            .unwrap_or_else(|e| panic!("handshake with {name}: {e}"));
    }
    Shook {
        group: conn.negotiated_key_exchange_group().map(|g| g.name()),
        kind: conn.handshake_kind(),
        server_bytes: io.1,
    }
}

#[test]
fn versions_and_ciphers_per_site_with_openssl() {
    let ca = Ca::new();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::run(&config(dir.path(), &ca, "").0, &[]);
    let ca_arg = ca.pem.display().to_string();
    let port = server.port;
    let ca_args = ["-CAfile", &ca_arg, "-verify_return_error"];
    fn with<'a>(ca_args: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
        [ca_args, extra].concat()
    }

    let all13 = "TLS_AES_256_GCM_SHA384:TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256";
    let two13 = "TLS_AES_256_GCM_SHA384:TLS_AES_128_GCM_SHA256";
    let two12 = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384";
    let one12 = "ECDHE-ECDSA-AES128-GCM-SHA256";
    // (site, client arguments, handshake done, what s_client says)
    let cases: [(&str, &[&str], bool, &str); 8] = [
        // TLS 1.2: refused by the 1.3-only site with protocol_version,
        // taken by the default one on the same listener.
        ("strict.test", &["-tls1_2"], false, "alert protocol version"),
        (
            "default.test",
            &["-tls1_2"],
            true,
            "Protocol version: TLSv1.2",
        ),
        // One TLS 1.3 suite: the one negotiated even when the client
        // prefers others; a client without it is refused. The default
        // site takes the client's first.
        (
            "strict.test",
            &["-tls1_3", "-ciphersuites", all13],
            true,
            "Ciphersuite: TLS_CHACHA20_POLY1305_SHA256",
        ),
        (
            "strict.test",
            &["-tls1_3", "-ciphersuites", two13],
            false,
            "alert handshake failure",
        ),
        (
            "default.test",
            &["-tls1_3", "-ciphersuites", all13],
            true,
            "Ciphersuite: TLS_AES_256_GCM_SHA384",
        ),
        // One TLS 1.2 suite, likewise.
        (
            "one12.test",
            &["-tls1_2", "-cipher", two12],
            true,
            "Ciphersuite: ECDHE-ECDSA-AES256-GCM-SHA384",
        ),
        (
            "one12.test",
            &["-tls1_2", "-cipher", one12],
            false,
            "alert handshake failure",
        ),
        (
            "default.test",
            &["-tls1_2", "-cipher", one12],
            true,
            "Ciphersuite: ECDHE-ECDSA-AES128-GCM-SHA256",
        ),
    ];
    for (site, args, done, says) in cases {
        let (ok, text) = openssl(port, site, &with(&ca_args, args));
        assert!(ok == done && text.contains(says), "{site} {args:?}: {text}");
    }
}

/// `GET /id.txt` over HTTP/1.1 (no ALPN) with `cfg`: the whole answer.
fn get(port: u16, name: &str, cfg: Arc<rustls::ClientConfig>) -> String {
    let mut sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
    sock.set_read_timeout(Some(WAIT)).unwrap();
    let mut conn =
        rustls::ClientConnection::new(cfg, ServerName::try_from(name.to_string()).unwrap())
            .unwrap();
    let mut tls = rustls::Stream::new(&mut conn, &mut sock);
    let req = format!("GET /id.txt HTTP/1.1\r\nHost: {name}\r\nConnection: close\r\n\r\n");
    tls.write_all(req.as_bytes()).unwrap();
    let mut out = Vec::new();
    // The server closes after its close_notify: an unclean EOF is an error.
    let _ = tls.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn key_exchange_prefers_post_quantum_without_a_retry_and_follows_the_site() {
    use aws_lc_rs::kx_group::{SECP256R1, X25519, X25519MLKEM768};
    let ca = Ca::new();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let logged = format!("access_log = {log:?}\naccess_log_format = \"tls\"\n");
    let server = Server::run(&config(dir.path(), &ca, &logged).0, &[]);
    let port = server.port;
    let pq = client(&ca.pem, &[X25519MLKEM768, X25519], true);

    // A client as browsers are: X25519MLKEM768 and X25519 shares.
    let s = handshake(port, "default.test", pq.clone());
    assert_eq!(s.group, Some(NamedGroup::X25519MLKEM768));
    assert_eq!(s.kind, Some(HandshakeKind::Full));
    // The access log's tls format names the group ($ssl_curve).
    let answer = get(port, "default.test", pq.clone());
    assert!(answer.ends_with("\r\n\r\npolicy\n"), "{answer}");
    let line = wait_until(WAIT, "the request's line in the access log", || {
        let t = std::fs::read_to_string(&log).unwrap_or_default();
        t.lines()
            .find(|l| l.contains("GET /id.txt"))
            .map(str::to_string)
            .ok_or(t)
    });
    assert!(
        line.contains(" TLSv1.3 ") && line.contains(" X25519MLKEM768 \"default.test\" . "),
        "{line}"
    );
    // Only an X25519 share (it lists P-256 too): X25519, at once.
    let s = handshake(
        port,
        "default.test",
        client(&ca.pem, &[X25519, SECP256R1], true),
    );
    assert_eq!(s.group, Some(NamedGroup::X25519));
    assert_eq!(s.kind, Some(HandshakeKind::Full), "a HelloRetryRequest");
    // A share for a group the site does not take first, and a listed one
    // it prefers with no share: the shared one, with no retry.
    let s = handshake(
        port,
        "default.test",
        client(&ca.pem, &[SECP256R1, X25519MLKEM768], true),
    );
    assert_eq!(s.group, Some(NamedGroup::secp256r1));
    assert_eq!(s.kind, Some(HandshakeKind::Full));

    // The site's order, not the client's: X25519 first there.
    let s = handshake(port, "order.test", pq.clone());
    assert_eq!(s.group, Some(NamedGroup::X25519));
    assert_eq!(s.kind, Some(HandshakeKind::Full));
    // X25519MLKEM768 is still allowed there.
    let s = handshake(port, "order.test", client(&ca.pem, &[X25519MLKEM768], true));
    assert_eq!(s.group, Some(NamedGroup::X25519MLKEM768));
    // A site that leaves it out: X25519, and P-256 gets a retry to X25519.
    let s = handshake(port, "strict.test", pq);
    assert_eq!(s.group, Some(NamedGroup::X25519));
    let s = handshake(
        port,
        "strict.test",
        client(&ca.pem, &[SECP256R1, X25519], true),
    );
    assert_eq!(s.group, Some(NamedGroup::X25519));
    assert_eq!(s.kind, Some(HandshakeKind::FullWithHelloRetryRequest));

    // The metric names the post-quantum group (counted once the server
    // has the client's Finished, after the client is done: waited for).
    let want = "group=\"X25519MLKEM768\"} ";
    let text = wait_until(WAIT, "the X25519MLKEM768 handshakes in /metrics", || {
        let m = server.metrics();
        let n: u64 = m
            .lines()
            .filter(|l| l.starts_with("tlsfront_tls_negotiated_total{") && l.contains(want))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum();
        if n >= 2 {
            Ok(m)
        } else {
            Err(m)
        }
    });
    assert!(
        text.contains("version=\"TLSv1.3\"") && text.contains("group=\"secp256r1\""),
        "{text}"
    );
}

/// The server's first flight to a client that offers certificate
/// compression, for an ECDSA and an RSA chain, with compression on and off
/// (`cert_compression = false`), and to a client that offers none.
#[test]
fn certificate_compression_shrinks_the_first_flight_unless_off() {
    use aws_lc_rs::kx_group::X25519;
    let ca = Ca::new();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("www");
    std::fs::create_dir_all(&root).unwrap();
    let mut text = String::new();
    for (kind, rsa) in [("ecdsa", false), ("rsa", true)] {
        // 45 names, as a multi-domain certificate has: they compress well.
        let mut names: Vec<String> = vec![format!("{kind}.test"), format!("{kind}-off.test")];
        names.extend((0..43).map(|i| format!("padding-{i}.{kind}.policy.test")));
        let (cert, key) = ca.issue(kind, &names, rsa);
        for (name, extra) in [
            (kind.to_string(), ""),
            (format!("{kind}-off"), "cert_compression = false\n"),
        ] {
            text.push_str(&format!(
                "[[site]]\nnames = [\"{name}.test\"]\nroot = {root:?}\ncert = {cert:?}\nkey = {key:?}\n{extra}"
            ));
        }
    }
    let path = dir.path().join("compression.toml");
    std::fs::write(&path, text).unwrap();
    let server = Server::run(&path, &[]);
    let port = server.port;
    let asks = client(&ca.pem, &[X25519], true);
    let asks_none = client(&ca.pem, &[X25519], false);
    for kind in ["ecdsa", "rsa"] {
        let on = format!("{kind}.test");
        let compressed = handshake(port, &on, asks.clone()).server_bytes;
        let off = handshake(port, &format!("{kind}-off.test"), asks.clone()).server_bytes;
        let not_asked = handshake(port, &on, asks_none.clone()).server_bytes;
        eprintln!(
            "{kind} first flight: {compressed} bytes compressed, {off} with compression off, \
             {not_asked} not asked"
        );
        assert!(
            compressed + 500 < off,
            "{kind}: compressed {compressed} bytes, off {off}"
        );
        // A client that asks for none gets it whole (ECDSA signatures vary
        // by a few bytes).
        assert!(
            off.abs_diff(not_asked) < 16,
            "{kind}: off {off}, not asked {not_asked}"
        );
    }
}

#[test]
fn a_reload_changes_a_sites_versions() {
    let ca = Ca::new();
    let dir = tempfile::tempdir().unwrap();
    let (path, _) = config(dir.path(), &ca, "");
    let server = Server::run(&path, &[]);
    let ca_arg = ca.pem.display().to_string();
    let args = ["-CAfile", &ca_arg, "-tls1_2"];
    let (ok, text) = openssl(server.port, "default.test", &args);
    assert!(ok, "{text}");
    config(dir.path(), &ca, "tls_versions = [\"1.3\"]\n");
    server.reload();
    server.wait_for_output("reloaded", 1);
    let (ok, text) = openssl(server.port, "default.test", &args);
    assert!(!ok && text.contains("alert protocol version"), "{text}");
}

#[test]
fn tls12_suites_that_no_certificate_key_can_sign_are_refused() {
    // An ECDSA certificate, and TLS 1.2 suites for RSA keys only: no TLS
    // 1.2 handshake could complete. `config check` and `run` say so.
    let ca = Ca::new();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = ca.issue("ecdsa", &["a.test".to_string()], false);
    let file = dir.path().join("rsa12.toml");
    std::fs::write(
        &file,
        format!(
            "[[site]]\nnames = [\"a.test\"]\nroot = {:?}\ncert = {:?}\nkey = {:?}\n\
             ciphers = [\"TLS_AES_128_GCM_SHA256\", \"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256\"]\n",
            dir.path().display().to_string(),
            cert.display().to_string(),
            key.display().to_string()
        ),
    )
    .unwrap();
    let want = "setting ciphers: TLS 1.2 is allowed but none of the site's TLS 1.2 suites can be \
                used with its certificate's key (ECDSA)";
    for args in [&["config", "check"][..], &["run", "--config"]] {
        // Bounded: a `run` that took the config would serve until killed.
        let out = tool("timeout")
            .args(["60", BIN])
            .args(args)
            .arg(&file)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {text}");
        assert!(
            text.contains(want) && text.contains("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"),
            "{args:?}: {text}"
        );
    }
}

#[test]
fn config_check_refuses_bad_names_naming_the_setting_and_the_valid_ones() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().display().to_string();
    for (key, value, want) in [
        (
            "kx_groups",
            "[\"X25519\", \"X448\"]",
            "setting kx_groups: \"X448\" is not a key exchange group tlsfront offers: give some \
             of X25519MLKEM768, X25519, P-256",
        ),
        (
            "ciphers",
            "[\"TLS_RSA_WITH_AES_128_CBC_SHA\"]",
            "setting ciphers: \"TLS_RSA_WITH_AES_128_CBC_SHA\" is not a cipher suite tlsfront \
             offers (only the AEADs kTLS carries): give some of TLS_AES_256_GCM_SHA384, \
             TLS_AES_128_GCM_SHA256, TLS_CHACHA20_POLY1305_SHA256, \
             TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        ),
        (
            "tls_versions",
            "[]",
            "setting tls_versions: an empty list allows no TLS version: give [\"1.2\", \"1.3\"] \
             (the default) or [\"1.3\"]",
        ),
    ] {
        let file = dir.path().join(format!("{key}.toml"));
        std::fs::write(
            &file,
            format!("[[site]]\nnames = [\"a.test\"]\nroot = {root:?}\n{key} = {value}\n"),
        )
        .unwrap();
        let (ok, text) = config_check(&file);
        assert!(!ok, "{text}");
        let at = format!(
            "config file {}, line 4 ([[site]] #1), {want}",
            file.display()
        );
        assert!(text.contains(&at), "{text}\nwanted: {at}");
    }
}

/// What Chromium's net log says of its TLS handshakes: the key exchange
/// group of each, and the types of the handshake messages it received.
fn chromium_handshakes(port: u16, cert: &Path, name: &str) -> (Vec<i64>, Vec<i64>) {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let net_log = dir.path().join("net-log.json");
    let mut child = headless_chromium(dir.path(), name, port, cert)
        .arg(format!("--log-net-log={}", net_log.display()))
        .args(["--net-log-capture-mode=Everything", "--dump-dom"])
        .arg(format!("https://{name}/id.txt"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .expect("run chromium (tests/install-packages.sh installs it)");
    let status = wait_until(
        Duration::from_secs(180),
        "Chromium to load and exit",
        || {
            child
                .try_wait()
                .unwrap()
                .ok_or_else(|| "still running".to_string())
        },
    );
    let mut dom = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut dom)
        .unwrap();
    assert!(
        status.success() && dom.contains("policy"),
        "{status}: {dom}"
    );
    let log: serde_json::Value = serde_json::from_slice(&std::fs::read(&net_log).unwrap()).unwrap();
    let types = &log["constants"]["logEventTypes"];
    let (connect, received) = (
        types["SSL_CONNECT"].as_i64().unwrap(),
        types["SSL_HANDSHAKE_MESSAGE_RECEIVED"].as_i64().unwrap(),
    );
    let (mut groups, mut messages) = (Vec::new(), Vec::new());
    for e in log["events"].as_array().unwrap() {
        let params = &e["params"];
        if e["type"].as_i64() == Some(connect) {
            groups.extend(params["key_exchange_group"].as_i64());
        } else if e["type"].as_i64() == Some(received) {
            messages.extend(params["type"].as_i64());
        }
    }
    (groups, messages)
}

/// A real browser negotiates X25519MLKEM768 and takes the compressed
/// certificate (handshake message 25, RFC 8879), or the whole one (11)
/// from the site that turned compression off.
#[test]
fn chromium_negotiates_post_quantum_and_a_compressed_certificate() {
    let ca = Ca::new();
    let dir = tempfile::tempdir().unwrap();
    let (path, cert) = config(dir.path(), &ca, "");
    let server = Server::run(&path, &[]);
    let (groups, messages) = chromium_handshakes(server.port, &cert, "default.test");
    assert!(
        !groups.is_empty() && groups.iter().all(|g| *g == 0x11ec),
        "key exchange groups {groups:?}"
    );
    assert!(
        messages.contains(&25) && !messages.contains(&11),
        "handshake messages {messages:?}"
    );
    let (groups, messages) = chromium_handshakes(server.port, &cert, "plain.test");
    assert!(
        !groups.is_empty() && groups.iter().all(|g| *g == 0x11ec),
        "{groups:?}"
    );
    assert!(
        messages.contains(&11) && !messages.contains(&25),
        "handshake messages {messages:?}"
    );
}
