//! Real peers for the proxy tests: backends written here (echo, sink,
//! reporter, recorder, closer) and Debian's nginx and HAProxy with PROXY protocol.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A backend thread pool: one thread per connection running `handler`.
pub fn backend(handler: fn(TcpStream)) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            std::thread::spawn(move || handler(c));
        }
    });
    addr
}

/// Echo everything; at EOF shut down our write side (half-close).
pub fn echo(mut c: TcpStream) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if c.write_all(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    }
    let _ = c.shutdown(Shutdown::Write);
}

/// Read to EOF, then answer with the byte count and SHA-256 of what came.
pub fn reporter(c: TcpStream) {
    report(c);
}

/// [`reporter`]'s work; returns what came.
fn report(mut c: TcpStream) -> Vec<u8> {
    let mut all = Vec::new();
    let _ = c.read_to_end(&mut all);
    let _ = write!(c, "{} {}", all.len(), super::sha256(&all));
    let _ = c.shutdown(Shutdown::Write);
    all
}

/// A [`reporter`] that also hands the test what each connection brought,
/// once it ended.
pub fn recorder() -> (SocketAddr, std::sync::mpsc::Receiver<Vec<u8>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let _ = tx.send(report(c));
            });
        }
    });
    (addr, rx)
}

/// Send a greeting and close our side at once, then read to EOF and
/// answer nothing (the client's bytes are counted by the reporter variant).
pub fn greeter(mut c: TcpStream) {
    let _ = c.write_all(b"hello from the backend\n");
    let _ = c.shutdown(Shutdown::Write);
    let mut sink = Vec::new();
    let _ = c.read_to_end(&mut sink);
}

/// Accept and never read (a stuck backend).
pub fn sink(c: TcpStream) {
    std::thread::sleep(Duration::from_secs(60));
    drop(c);
}

/// Read a little, then close mid-stream.
pub fn closer(mut c: TcpStream) {
    let mut buf = [0u8; 1000];
    let _ = c.read(&mut buf);
    let _ = c.write_all(b"partial");
    drop(c);
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Wait until something listens on `port`; fail after [`super::WAIT`].
fn wait_for_port(port: u16) {
    let deadline = Instant::now() + super::WAIT;
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("nothing listens on port {port} after {:?}", super::WAIT);
}

/// A peer process, killed on drop.
pub struct Peer {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl Peer {
    /// The directory its config and files live in.
    pub fn dir(&self) -> &Path {
        self._dir.path()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// nginx in the foreground on a fresh port, with `server` (its block,
/// given the port) inside a minimal `http {}`: every file it writes stays in
/// its own temporary directory.
pub fn nginx(server: impl FnOnce(u16) -> String) -> Peer {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let d = dir.path().display();
    let server = server(port);
    let conf = format!(
        "daemon off;\nmaster_process off;\nerror_log {d}/error.log;\npid {d}/nginx.pid;\nevents {{ worker_connections 512; }}\nhttp {{\n  access_log off;\n  client_body_temp_path {d}; proxy_temp_path {d}; fastcgi_temp_path {d}; uwsgi_temp_path {d}; scgi_temp_path {d};\n  {server}\n}}\n"
    );
    std::fs::write(dir.path().join("nginx.conf"), conf).unwrap();
    let child = super::tool("nginx")
        .arg("-p")
        .arg(dir.path())
        .arg("-c")
        .arg(dir.path().join("nginx.conf"))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("run nginx (tests/install-packages.sh installs it)");
    let peer = Peer {
        child,
        port,
        _dir: dir,
    };
    wait_for_port(port);
    peer
}

/// nginx on a plain port with `listen ... proxy_protocol`, answering every
/// request with the client address it got from the PROXY header.
pub fn nginx_proxy_protocol() -> Peer {
    nginx(|port| {
        format!(
            "server {{\n    listen 127.0.0.1:{port} proxy_protocol;\n    location / {{ default_type text/plain; return 200 \"$proxy_protocol_addr $proxy_protocol_port\\n\"; }}\n  }}"
        )
    })
}

/// HAProxy on a free port with the config `conf(port)` makes, in the
/// foreground, once it listens.
fn haproxy(conf: impl FnOnce(u16) -> String) -> Peer {
    haproxy_from(super::tool("haproxy"), |port, _| conf(port))
}

/// HAProxy with the config `conf(port, its directory)` makes (a config
/// that names files of its own there, such as a stats socket).
pub fn haproxy_in(conf: impl FnOnce(u16, &Path) -> String) -> Peer {
    haproxy_from(super::tool("haproxy"), conf)
}

/// Debian trixie's HAProxy (3.0), unpacked with the trixie libraries it
/// needs by tests/install-packages.sh and run through trixie's own dynamic
/// loader (bookworm's C library is older than it was built for).
const TRIXIE_ROOT: &str = "target/trixie-packages/root";

fn trixie_haproxy() -> Command {
    let lib = format!("{TRIXIE_ROOT}/usr/lib/x86_64-linux-gnu");
    let haproxy = format!("{TRIXIE_ROOT}/usr/sbin/haproxy");
    assert!(
        Path::new(&haproxy).is_file(),
        "{haproxy} is missing: tests/install-packages.sh fetches Debian trixie's HAProxy there"
    );
    let mut c = super::tool(&format!("{lib}/ld-linux-x86-64.so.2"));
    c.arg("--library-path").arg(&lib).arg(haproxy);
    c
}

/// HAProxy 3.0 with `accept-proxy`, answering each request with the raw
/// SSL TLV (PP2_TYPE_SSL, 0x20) of the PROXY v2 header, in hex: what
/// HAProxy itself reads of it (`fc_pp_tlv`, which bookworm's 2.6 lacks).
pub fn haproxy3_ssl_tlv_reader() -> Peer {
    haproxy_from(trixie_haproxy(), |port, _| {
        format!(
        "global\n  maxconn 100\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client 10s\n  timeout server 10s\nfrontend fe\n  bind 127.0.0.1:{port} accept-proxy\n  http-request return status 200 content-type text/plain lf-string \"ssl=%[fc_pp_tlv(0x20),hex]\\n\"\n"
    )
    })
}

/// `program` (an HAProxy) as [`haproxy`] runs it.
fn haproxy_from(mut program: Command, conf: impl FnOnce(u16, &Path) -> String) -> Peer {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let cfg = dir.path().join("haproxy.cfg");
    std::fs::write(&cfg, conf(port, dir.path())).unwrap();
    let child = program
        .arg("-db")
        .arg("-f")
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("run haproxy (tests/install-packages.sh installs it)");
    wait_for_port(port);
    Peer {
        child,
        port,
        _dir: dir,
    }
}

/// HAProxy with `accept-proxy`, answering with the client address and the
/// authority (SNI) TLV it got from the PROXY header.
pub fn haproxy_accept_proxy() -> Peer {
    haproxy(|port| {
        format!(
        "global\n  maxconn 100\ndefaults\n  mode http\n  timeout connect 5s\n  timeout client 10s\n  timeout server 10s\nfrontend fe\n  bind 127.0.0.1:{port} accept-proxy\n  http-request return status 200 content-type text/plain lf-string \"%[src] %[src_port] authority=%[fc_pp_authority]\\n\"\n"
    )
    })
}

/// HAProxy in TCP mode before `servers` (ports), round-robin, each sent a
/// PROXY v2 header: the L4 balancer of a fleet. A connection a server
/// refuses (not started yet, or restarting) is sent to another, as a
/// balancer with health checks would, so that, say, the CA's validation of
/// a fleet's first order does not land on a node still starting.
pub fn haproxy_tcp_balancer(servers: &[u16]) -> Peer {
    haproxy(|port| {
        let mut conf = format!(
            "global\n  maxconn 100\ndefaults\n  mode tcp\n  retries 3\n  option redispatch 1\n  \
             timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\
             frontend fe\n  bind 127.0.0.1:{port}\n  default_backend fleet\nbackend fleet\n  \
             balance roundrobin\n"
        );
        for (i, p) in servers.iter().enumerate() {
            conf.push_str(&format!("  server s{i} 127.0.0.1:{p} send-proxy-v2\n"));
        }
        conf
    })
}
