//! `tlsfront serve`: the process model. One thread per worker, each with
//! its own current-thread tokio runtime and its own `SO_REUSEPORT` listener
//! per address (the nginx/stud model: the kernel spreads connections, no
//! work stealing). Workers share the TLS configuration (one session cache
//! and ticket key set), the document root and the counters.

mod conn;
mod http;

use crate::config::{cert, secs, KtlsMode, ServeConfig};
use crate::files::DocRoot;
use crate::ktls::Support;
use crate::metrics::Metrics;
use rustls::ServerConfig;
use socket2::{Domain, Socket, Type};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// What every worker shares.
pub(crate) struct Shared {
    pub tls: Arc<ServerConfig>,
    pub root: DocRoot,
    pub cfg: ServeConfig,
    pub ktls: Support,
    pub metrics: Metrics,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Cert(#[from] cert::CertError),
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsConfigError),
    #[error(transparent)]
    Root(#[from] crate::files::RootError),
    #[error("--ktls require: {0}")]
    KtlsRequired(String),
    #[error("cannot listen on {addr}: {source}{hint}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
        hint: &'static str,
    },
    #[error("cannot start: {0}")]
    Runtime(std::io::Error),
}

fn bind_hint(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::AddrInUse => {
            " (another process uses this port: stop it or pick another with --listen)"
        }
        std::io::ErrorKind::PermissionDenied => {
            " (ports below 1024 need root or CAP_NET_BIND_SERVICE: pick another with --listen)"
        }
        std::io::ErrorKind::AddrNotAvailable => {
            " (this machine has no such address: check --listen)"
        }
        _ => "",
    }
}

fn listener(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    sock.set_reuse_address(true)?;
    sock.set_reuse_port(true)?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())?;
    sock.listen(1024)?;
    Ok(sock.into())
}

/// Bind one listener per worker for each address (port 0: the first gets a
/// port, the others share it).
fn bind_all(
    cfg: &ServeConfig,
) -> Result<(Vec<Vec<std::net::TcpListener>>, Vec<SocketAddr>), ServeError> {
    let mut per_worker: Vec<Vec<std::net::TcpListener>> =
        (0..cfg.workers).map(|_| Vec::new()).collect();
    let mut bound = Vec::new();
    for &want in &cfg.listen {
        let mut addr = want;
        for w in per_worker.iter_mut() {
            let l = listener(addr).map_err(|source| ServeError::Bind {
                addr,
                hint: bind_hint(&source),
                source,
            })?;
            addr = l.local_addr().map_err(ServeError::Runtime)?;
            w.push(l);
        }
        bound.push(addr);
    }
    Ok((per_worker, bound))
}

pub fn run(cfg: ServeConfig) -> Result<(), ServeError> {
    let id = cert::load(cfg.cert.as_deref(), cfg.key.as_deref())?;
    if id.created {
        println!(
            "made a self-signed certificate for localhost, 127.0.0.1, ::1: {}",
            id.cert_path.display()
        );
    }
    println!(
        "certificate {} (SHA-256 {})",
        id.cert_path.display(),
        id.fingerprint()
    );
    let tls = crate::tls::server_config(id.chain, id.key, &Default::default())?;
    let root = DocRoot::open(&cfg.root, cfg.follow_symlinks_outside, cfg.autoindex)?;
    let ktls = match cfg.ktls {
        KtlsMode::Off => Support::disabled(),
        _ => Support::probe(),
    };
    if cfg.ktls == KtlsMode::Require && !ktls.fully_usable() {
        return Err(ServeError::KtlsRequired(format!(
            "{} (run 'tlsfront check' for the fix)",
            ktls.summary()
        )));
    }
    let (listeners, bound) = bind_all(&cfg)?;
    for a in &bound {
        println!(
            "serving {} on https://{a}/ with {} worker{}",
            root.path().display(),
            cfg.workers,
            if cfg.workers == 1 { "" } else { "s" }
        );
    }
    println!("{}", ktls.summary());

    let grace = secs(cfg.timeouts.shutdown);
    let shared = Arc::new(Shared {
        tls,
        root,
        cfg,
        ktls,
        metrics: Metrics::default(),
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut threads = Vec::new();
    for (i, ls) in listeners.into_iter().enumerate() {
        let shared = shared.clone();
        let stop = stop_rx.clone();
        let t = std::thread::Builder::new()
            .name(format!("worker-{i}"))
            .spawn(move || conn::worker(ls, shared, stop, grace))
            .map_err(ServeError::Runtime)?;
        threads.push(t);
    }

    wait_for_signal().map_err(ServeError::Runtime)?;
    println!("shutting down: no new connections, finishing responses (up to {grace:?})");
    let _ = stop_tx.send(true);
    for t in threads {
        let _ = t.join();
    }
    println!("{}", shared.metrics.report());
    Ok(())
}

fn wait_for_signal() -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        Ok(())
    })
}

/// How long to keep reading after our close_notify so the client's unread
/// data does not turn our close into a reset.
const LINGER: Duration = Duration::from_secs(2);
