//! tlsfront nodes of a fleet (tests/fleet_etcd.rs and the other fleet
//! suites): a node's config on an etcd cluster and pebble, and what a
//! node serves, read through the PROXY header the nodes expect; the
//! fleet's balancer (HAProxy), a load through it (h2load) for the fault
//! tests, and an HAProxy before etcd that cuts a node off and lets it back.

use super::etcd::EtcdCluster;
use super::pebble::Pebble;
use super::{s_client, tool, wait_until, Server, Step, WAIT};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

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
    node_config_on(dir, node, pebble, &etcd.endpoints(), prefix, name, extra)
}

/// [`node_config`] reaching etcd at `endpoints` (a proxy in front of the
/// members, say) rather than at the members themselves.
pub fn node_config_on(
    dir: &Path,
    node: &str,
    pebble: &Pebble,
    endpoints: &[String],
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
    let endpoints: Vec<String> = endpoints.iter().map(|e| format!("{e:?}")).collect();
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
    try_served(port, name, root)
        .unwrap_or_else(|e| panic!("handshake with 127.0.0.1:{port} for {name}: {e}"))
}

/// [`served`], or why the handshake failed (a certificate not chaining to
/// `root`, such as the placeholder, says `UnknownIssuer`).
pub fn try_served(port: u16, name: &str, root: &Path) -> Result<String, String> {
    handshake(port, name, super::client_config(root))
}

/// [`served`] as a client whose clock says `when`: what a node serves
/// even once it has expired (a short-lived certificate that a node cut
/// off from etcd keeps serving past its end).
pub fn served_as_of(port: u16, name: &str, root: &Path, when: SystemTime) -> String {
    #[derive(Debug)]
    struct At(SystemTime);
    impl rustls::time_provider::TimeProvider for At {
        fn current_time(&self) -> Option<rustls::pki_types::UnixTime> {
            Some(rustls::pki_types::UnixTime::since_unix_epoch(
                self.0.duration_since(SystemTime::UNIX_EPOCH).ok()?,
            ))
        }
    }
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(root).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_details(
        Arc::new(rustls::crypto::aws_lc_rs::default_provider()),
        Arc::new(At(when)),
    )
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    handshake(port, name, Arc::new(config))
        .unwrap_or_else(|e| panic!("handshake with 127.0.0.1:{port} for {name}: {e}"))
}

/// A handshake through a PROXY v1 header with `config`: the SHA-256 of
/// the leaf certificate, or why it failed.
fn handshake(port: u16, name: &str, config: Arc<rustls::ClientConfig>) -> Result<String, String> {
    use std::io::Write;
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    tcp.write_all(b"PROXY TCP4 127.0.0.1 127.0.0.1 40000 443\r\n")
        .unwrap();
    let server_name = rustls::pki_types::ServerName::try_from(name.to_string()).unwrap();
    let mut conn = rustls::ClientConnection::new(config, server_name).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).map_err(|e| e.to_string())?;
    }
    let leaf = &conn.peer_certificates().unwrap()[0];
    Ok(super::sha256(leaf.as_ref()))
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

/// Whether `server`'s admin listener says it holds a session with etcd
/// (`tlsfront_fleet_etcd_up`).
pub fn etcd_up(server: &Server) -> bool {
    server.metrics().contains("tlsfront_fleet_etcd_up 1")
}

/// Wait until every one of `nodes` says `tlsfront_fleet_etcd_up` is `up`.
pub fn wait_etcd_up(nodes: &[&Server], up: bool) {
    wait_until(
        WAIT,
        format!("every node's tlsfront_fleet_etcd_up to be {}", u8::from(up)),
        || {
            let off: Vec<usize> = (0..nodes.len())
                .filter(|&i| etcd_up(nodes[i]) != up)
                .collect();
            if off.is_empty() {
                Ok(())
            } else {
                let said: Vec<String> = off
                    .iter()
                    .map(|&i| format!("---- node {i} ----\n{}", nodes[i].output()))
                    .collect();
                Err(format!("nodes {off:?} are not:\n{}", said.join("\n")))
            }
        },
    );
}

/// A number in a Prometheus text line `name VALUE`.
pub fn metric(server: &Server, name: &str) -> i64 {
    let text = server.metrics();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

/// Requests per h2load run of [`load`], on this many connections.
const LOAD_REQUESTS: &str = "40";
const LOAD_CONNECTIONS: &str = "4";

/// The longest a [`Load`] runs if nobody ends it (a test that fails
/// before `finish` drops it, which ends it too).
const LOAD_LIMIT: Duration = Duration::from_secs(600);

/// h2load through a balancer, run after run until [`Load::finish`]: each
/// run opens new TLS connections (so every node behind the balancer takes
/// handshakes throughout, not only at first) and asks for `who.txt` with
/// `name` as SNI and authority; runs alternate HTTP/2 and HTTP/1.1.
pub struct Load {
    stop: Arc<AtomicBool>,
    runs: Arc<AtomicUsize>,
    thread: Option<JoinHandle<LoadReport>>,
}

/// What a [`Load`] saw: runs, requests asked and answered with 2xx, and
/// each run that did not answer every request (h2load's words).
#[derive(Debug)]
pub struct LoadReport {
    pub runs: usize,
    pub requests: u64,
    pub succeeded: u64,
    pub failures: Vec<String>,
}

/// Start a [`Load`] on the balancer at `port` for `name`.
pub fn load(port: u16, name: &str) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let runs = Arc::new(AtomicUsize::new(0));
    let url = format!("https://{name}/who.txt");
    let connect_to = format!("--connect-to=127.0.0.1:{port}");
    let thread = {
        let (stop, runs) = (stop.clone(), runs.clone());
        std::thread::spawn(move || {
            let mut report = LoadReport {
                runs: 0,
                requests: 0,
                succeeded: 0,
                failures: Vec::new(),
            };
            let start = Instant::now();
            while !stop.load(Ordering::Relaxed) && start.elapsed() < LOAD_LIMIT {
                let mut cmd = tool("h2load");
                cmd.args(["-n", LOAD_REQUESTS, "-c", LOAD_CONNECTIONS])
                    // A connection that hangs fails the run, boundedly.
                    .args(["-N", "20s", &connect_to]);
                if report.runs % 2 == 1 {
                    cmd.arg("--h1");
                }
                let out = cmd
                    .arg(&url)
                    .stdin(Stdio::null())
                    .output()
                    .expect("run h2load (Debian package nghttp2-client)");
                let text = String::from_utf8_lossy(&out.stdout).into_owned();
                let counts = h2load_requests(&text);
                report.runs += 1;
                match counts {
                    Some((total, ok)) if out.status.success() && ok == total => {
                        report.requests += total;
                        report.succeeded += ok;
                    }
                    _ => {
                        if let Some((total, ok)) = counts {
                            report.requests += total;
                            report.succeeded += ok;
                        }
                        report.failures.push(format!(
                            "run {} ({}): {text}{}",
                            report.runs,
                            out.status,
                            String::from_utf8_lossy(&out.stderr)
                        ));
                    }
                }
                runs.store(report.runs, Ordering::Relaxed);
            }
            report
        })
    };
    Load {
        stop,
        runs,
        thread: Some(thread),
    }
}

/// h2load's `requests: T total, …` and `status codes: N 2xx, …`: the
/// total, and how many were answered with 2xx.
fn h2load_requests(text: &str) -> Option<(u64, u64)> {
    let total = text.lines().find_map(|l| {
        l.strip_prefix("requests: ")?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })?;
    let ok = text.lines().find_map(|l| {
        l.strip_prefix("status codes: ")?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })?;
    Some((total, ok))
}

impl Load {
    /// Runs finished so far.
    pub fn runs(&self) -> usize {
        self.runs.load(Ordering::Relaxed)
    }

    /// Wait until `more` runs have finished after now: the load went on
    /// across what the test just did.
    pub fn wait_runs(&self, more: usize) {
        let want = self.runs() + more;
        wait_until(WAIT, format!("{want} load runs"), || {
            let n = self.runs();
            if n >= want {
                Ok(())
            } else {
                Err(format!("{n}"))
            }
        });
    }

    /// End the load after the run under way; fail the test if any request
    /// failed, or none was made.
    pub fn finish(mut self) -> LoadReport {
        self.stop.store(true, Ordering::Relaxed);
        let report = self.thread.take().unwrap().join().unwrap();
        assert!(
            report.failures.is_empty(),
            "{} of {} requests failed:\n{}",
            report.requests - report.succeeded,
            report.requests,
            report.failures.join("\n")
        );
        assert!(report.requests > 0 && report.succeeded == report.requests);
        eprintln!(
            "load: {} runs, {} requests, all answered with 2xx",
            report.runs, report.requests
        );
        report
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// HAProxy in TCP mode (no PROXY header) in front of etcd's members: a
/// node's only way to etcd, cut and healed through HAProxy's runtime API
/// (`disable server` and `shutdown sessions server` for every member: new
/// connections are closed at once, open ones cut).
pub struct EtcdProxy {
    peer: super::peers::Peer,
    pub port: u16,
    socket: PathBuf,
    members: usize,
}

impl EtcdProxy {
    pub fn start(etcd: &EtcdCluster) -> EtcdProxy {
        let peer = super::peers::haproxy_in(|port, dir| {
            // Long timeouts: a watch is quiet for minutes, and HAProxy's
            // client and server timeouts would cut it.
            let mut conf = format!(
                "global\n  maxconn 100\n  stats socket {} level admin\ndefaults\n  mode tcp\n  \
                 timeout connect 5s\n  timeout client 1h\n  timeout server 1h\n\
                 frontend fe\n  bind 127.0.0.1:{port}\n  default_backend etcd\nbackend etcd\n  \
                 balance roundrobin\n",
                dir.join("admin.sock").display()
            );
            for (i, e) in etcd.endpoints().iter().enumerate() {
                let addr = e.rsplit('/').next().unwrap();
                conf.push_str(&format!("  server m{i} {addr}\n"));
            }
            conf
        });
        EtcdProxy {
            port: peer.port,
            socket: peer.dir().join("admin.sock"),
            members: etcd.len(),
            peer,
        }
    }

    /// The endpoint a node is given.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// One runtime API command line; HAProxy's answer.
    fn api(&self, commands: &str) -> String {
        use std::io::{Read, Write};
        let mut s = std::os::unix::net::UnixStream::connect(&self.socket).unwrap();
        s.write_all(format!("{commands}\n").as_bytes()).unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        answer
    }

    /// Cut: no member reachable through the proxy, open sessions ended.
    pub fn cut(&self) {
        let commands: Vec<String> = (0..self.members)
            .flat_map(|i| {
                [
                    format!("disable server etcd/m{i}"),
                    format!("shutdown sessions server etcd/m{i}"),
                ]
            })
            .collect();
        let answer = self.api(&commands.join("; "));
        assert!(answer.trim().is_empty(), "HAProxy: {answer}");
    }

    /// Heal: every member reachable again.
    pub fn heal(&self) {
        let commands: Vec<String> = (0..self.members)
            .map(|i| format!("enable server etcd/m{i}"))
            .collect();
        let answer = self.api(&commands.join("; "));
        assert!(answer.trim().is_empty(), "HAProxy: {answer}");
    }
}
