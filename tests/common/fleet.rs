//! tlsfront nodes of a fleet (tests/fleet_etcd.rs and the other fleet
//! suites): a node's config on an etcd cluster and pebble, and what a
//! node serves, read through the PROXY header the nodes expect.

use super::etcd::EtcdCluster;
use super::pebble::Pebble;
use super::{s_client, Server, Step};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A node's config: its own state directory, port and document root (its
/// `who.txt` names it), one `acme = true` site, and `[fleet]` on `etcd`
/// under `prefix`, with `extra` lines in `[fleet]`.
pub fn node_config(
    dir: &Path,
    node: &str,
    pebble: &Pebble,
    etcd: &EtcdCluster,
    prefix: &str,
    name: &str,
    extra: &str,
) -> PathBuf {
    let www = dir.join(format!("www-{node}"));
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(www.join("who.txt"), format!("{node}\n")).unwrap();
    let key = dir.join("fleet.key");
    if !key.exists() {
        std::fs::write(&key, super::content(32, 29)).unwrap();
    }
    let endpoints: Vec<String> = etcd.endpoints().iter().map(|e| format!("{e:?}")).collect();
    let config = dir.join(format!("{node}.toml"));
    std::fs::write(
        &config,
        format!(
            "acme_directory = {:?}\nacme_ca_roots = {:?}\nstate_dir = {:?}\naccept_proxy = true\n\
             admin = \"127.0.0.1:0\"\n\
             [[site]]\nnames = [\"{name}\"]\nacme = true\nroot = {:?}\n\
             [fleet]\nendpoints = [{}]\nkey_files = [{:?}]\nnode = \"{node}\"\nprefix = \"{prefix}\"\n{extra}",
            pebble.directory,
            pebble.https_ca.display().to_string(),
            dir.join(format!("state-{node}")).display().to_string(),
            www.display().to_string(),
            endpoints.join(", "),
            key.display().to_string(),
        ),
    )
    .unwrap();
    config
}

/// The SHA-256 of the certificate a node (which takes PROXY headers only)
/// serves for `name`: a PROXY v1 header as HAProxy would send, then a
/// rustls handshake verifying the chain against pebble's root.
pub fn served(port: u16, name: &str, root: &Path) -> String {
    use std::io::Write;
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    tcp.write_all(b"PROXY TCP4 127.0.0.1 127.0.0.1 40000 443\r\n")
        .unwrap();
    let server_name = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
    let mut conn = rustls::ClientConnection::new(super::client_config(root), server_name).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp)
            .unwrap_or_else(|e| panic!("handshake with 127.0.0.1:{port} for {name}: {e}"));
    }
    let leaf = &conn.peer_certificates().unwrap()[0];
    super::sha256(leaf.as_ref())
}

/// Every node's certificate for `name` (see [`served`]).
pub fn served_by_all(ports: &[u16], name: &str, root: &Path) -> Vec<String> {
    ports.iter().map(|&p| served(p, name, root)).collect()
}

/// Pebble's root, in a file.
pub fn pebble_root(pebble: &Pebble, dir: &Path) -> PathBuf {
    let root = dir.join("pebble-root.pem");
    std::fs::write(&root, pebble.mgmt_get("/roots/0")).unwrap();
    root
}

/// What `node` printed about `name`'s certificate arriving: issued here,
/// or stored from another node.
pub fn got_certificate(server: &Server, name: &str) -> bool {
    let out = server.output();
    out.contains(&format!("for {name}, valid until"))
        || out.contains(&format!("fleet: certificate for {name} from node"))
}

/// A handshake with `openssl s_client` (`version`: `-tls1_3` or
/// `-tls1_2`; SNI `localhost`) and one request: the session saved to
/// `out` and/or resumed from `resume`. Whether it was resumed.
pub fn connect(port: u16, version: &str, out: Option<&Path>, resume: Option<&Path>) -> bool {
    let mut args = vec![
        version.to_string(),
        "-servername".into(),
        "localhost".into(),
    ];
    if let Some(p) = out {
        args.extend(["-sess_out".into(), p.display().to_string()]);
    }
    if let Some(p) = resume {
        args.extend(["-sess_in".into(), p.display().to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // A ticket comes after the handshake: wait for it. Then a request and
    // its answer: the server has finished the handshake (and counted it)
    // before the client closes, which a client that closes at once races.
    let request = b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    let mut steps = match out {
        Some(p) => vec![Step::WaitForFile(p)],
        None => vec![],
    };
    steps.extend([Step::Send(request), Step::WaitFor("HTTP/1.1 ")]);
    let (stdout, stderr, _) = s_client(port, &args, &steps, Duration::from_secs(20));
    assert!(
        stdout.contains("New, TLSv1") || stdout.contains("Reused, TLSv1"),
        "no handshake: {stdout}{stderr}"
    );
    stdout.contains("Reused, TLSv1")
}
