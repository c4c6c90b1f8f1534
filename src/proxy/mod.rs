//! `tlsfront proxy`: TLS termination for a plain-TCP backend (the
//! stud/hitch job). One backend connection per client, opened after the
//! handshake (a handshake flood never reaches the backend), an optional
//! PROXY v1/v2 header first, then bytes both ways: with kTLS by `splice()`
//! through pipes, never through user space; otherwise through rustls.

pub mod backend;
pub mod header;
mod relay;

use crate::config::{
    check_timeout, check_workers, default_workers, parse_listen, secs, ConfigError, KtlsMode,
    Timeouts,
};
use crate::server::{ConnInfo, Front, Service, StartError, Tls};
use crate::tls::TlsOptions;
use crate::transport::close_and_linger;
use backend::{BackendAddr, ConnectError};
use header::ProxyVersion;
use ipnet::IpNet;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::watch;

/// Settings for `tlsfront proxy`.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    pub listen: Vec<SocketAddr>,
    pub backend: BackendAddr,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub workers: usize,
    pub ktls: KtlsMode,
    pub write_proxy: Option<ProxyVersion>,
    /// Read a PROXY header from these sources (and refuse all others).
    pub accept_proxy: Option<Vec<IpNet>>,
    /// ALPN protocols offered to clients (none by default).
    pub alpn: Vec<String>,
    pub connect_timeout: Duration,
    pub idle_timeout: Duration,
    pub timeouts: Timeouts,
    pub max_connections: usize,
}

#[derive(clap::Args, Debug, Default)]
pub struct ProxyArgs {
    #[command(flatten)]
    pub front: crate::cli::FrontArgs,
    /// The plain-TCP service: HOST:PORT, or a Unix socket path.
    #[arg(long, value_name = "ADDR")]
    pub backend: String,
    /// Send a PROXY protocol header (v1 text, or v2 binary with ALPN, SNI
    /// and SSL TLVs) to the backend first.
    #[arg(long, value_enum, value_name = "VERSION")]
    pub write_proxy: Option<ProxyVersion>,
    /// Expect a PROXY v1/v2 header from a load balancer in front, and pass
    /// its client address on. Only from --proxy-from sources.
    #[arg(long)]
    pub accept_proxy: bool,
    /// Trusted sources of PROXY headers (CIDR, repeatable)
    /// [default: 127.0.0.0/8 and ::1/128]. Other sources are refused.
    #[arg(long, value_name = "CIDR", requires = "accept_proxy")]
    pub proxy_from: Vec<String>,
    /// ALPN protocols to offer, comma-separated (e.g. h2,http/1.1) [default: none].
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub alpn: Vec<String>,
    /// Seconds allowed for the TLS handshake.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    pub handshake_timeout: f64,
    /// Seconds allowed to connect to the backend.
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    pub connect_timeout: f64,
    /// Seconds without a byte in either direction before closing.
    #[arg(long, value_name = "SECS", default_value_t = 300.0)]
    pub idle_timeout: f64,
}

impl ProxyArgs {
    pub fn resolve(&self) -> Result<ProxyConfig, ProxyConfigError> {
        let mut listen = Vec::new();
        for l in &self.front.listen {
            listen.push(parse_listen("--listen", l)?);
        }
        if listen.is_empty() {
            listen.push(parse_listen("default", "127.0.0.1:8443")?);
        }
        let workers = self.front.workers.unwrap_or_else(default_workers);
        check_workers("--workers", workers)?;
        for (flag, v) in [
            ("--handshake-timeout", self.handshake_timeout),
            ("--connect-timeout", self.connect_timeout),
            ("--idle-timeout", self.idle_timeout),
        ] {
            check_timeout(flag, v)?;
        }
        let accept_proxy = if self.accept_proxy {
            let mut nets = Vec::new();
            for c in &self.proxy_from {
                nets.push(
                    c.parse::<IpNet>()
                        .or_else(|_| c.parse::<std::net::IpAddr>().map(IpNet::from))
                        .map_err(|_| ProxyConfigError::Cidr { value: c.clone() })?,
                );
            }
            if nets.is_empty() {
                nets = vec![
                    "127.0.0.0/8".parse().unwrap_or_default(),
                    "::1/128".parse().unwrap_or_default(),
                ];
            }
            Some(nets)
        } else {
            None
        };
        let timeouts = Timeouts {
            handshake: self.handshake_timeout,
            ..Timeouts::default()
        };
        Ok(ProxyConfig {
            listen,
            backend: BackendAddr::parse(&self.backend)?,
            cert: self.front.cert.clone(),
            key: self.front.key.clone(),
            workers,
            ktls: self.front.ktls.unwrap_or_default(),
            write_proxy: self.write_proxy,
            accept_proxy,
            alpn: self.alpn.clone(),
            connect_timeout: secs(self.connect_timeout),
            idle_timeout: secs(self.idle_timeout),
            timeouts,
            max_connections: 10_000,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ProxyConfigError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Backend(#[from] backend::BadBackend),
    #[error("--proxy-from {value:?} is not an address or CIDR block (examples: 10.0.0.0/8, 192.0.2.1, ::1/128)")]
    Cidr { value: String },
}

/// The proxy service.
pub struct Proxy {
    cfg: ProxyConfig,
    /// Failure kinds already logged (each is logged once, then counted).
    logged: Mutex<HashSet<&'static str>>,
}

/// Run `tlsfront proxy` until SIGTERM/SIGINT.
pub fn run(cfg: ProxyConfig) -> Result<(), StartError> {
    let opts = TlsOptions {
        alpn: cfg.alpn.iter().map(|a| a.as_bytes().to_vec()).collect(),
        ..TlsOptions::default()
    };
    let front = crate::server::front(
        cfg.cert.as_deref(),
        cfg.key.as_deref(),
        &opts,
        cfg.ktls,
        cfg.timeouts.clone(),
        cfg.max_connections,
    )?;
    let (listen, workers) = (cfg.listen.clone(), cfg.workers);
    let backend = cfg.backend.clone();
    let pp = match cfg.write_proxy {
        Some(ProxyVersion::V1) => ", PROXY v1",
        Some(ProxyVersion::V2) => ", PROXY v2",
        None => "",
    };
    let svc = Arc::new(Proxy {
        cfg,
        logged: Mutex::new(HashSet::new()),
    });
    crate::server::run(front, svc, &listen, workers, |a| {
        format!(
            "proxying https://{a}/ to {backend}{pp} with {workers} worker{}",
            if workers == 1 { "" } else { "s" }
        )
    })
}

impl Proxy {
    /// Log a failure kind the first time it happens; count it always.
    fn failure(&self, front: &Front, kind: &'static str, detail: std::fmt::Arguments<'_>) {
        front.metrics.error(kind);
        let first = self
            .logged
            .lock()
            .map(|mut l| l.insert(kind))
            .unwrap_or(false);
        if first {
            tracing::warn!("{detail} (further \"{kind}\" failures are counted, not logged)");
        }
    }
}

impl Service for Proxy {
    /// Client and backend sockets, and the two splice pipes of the kTLS
    /// relay.
    const FDS_PER_CONNECTION: u64 = 6;

    /// A backend may speak any protocol: a plaintext client is closed, not
    /// answered in HTTP.
    const ANSWERS_PLAIN_HTTP: bool = false;

    async fn accepted(
        &self,
        front: &Front,
        sock: &mut TcpStream,
        peer: SocketAddr,
        local: SocketAddr,
    ) -> Option<(SocketAddr, SocketAddr)> {
        let Some(trusted) = &self.cfg.accept_proxy else {
            return Some((peer, local));
        };
        if !trusted.iter().any(|n| n.contains(&peer.ip())) {
            self.failure(
                front,
                "proxy_untrusted",
                format_args!("refused {peer}: not a trusted PROXY source (--proxy-from)"),
            );
            return None;
        }
        match header::accept(sock, secs(front.timeouts.handshake)).await {
            Ok(Some(addrs)) => Some(addrs),
            Ok(None) => Some((peer, local)),
            Err(e) => {
                self.failure(
                    front,
                    "proxy_header",
                    format_args!("PROXY header from {peer}: {e}"),
                );
                None
            }
        }
    }

    async fn serve(&self, front: &Front, tls: Tls, info: ConnInfo, _stop: watch::Receiver<bool>) {
        let backend = match backend::connect(&self.cfg.backend, self.cfg.connect_timeout).await {
            Ok(b) => b,
            Err(e) => {
                self.backend_down(front, &e);
                // The client gets a TLS close, not a hang.
                let linger = Duration::from_secs(1);
                match tls {
                    Tls::Kernel(mut k) => close_and_linger(&mut k, linger).await,
                    Tls::User(mut u) => close_and_linger(&mut u, linger).await,
                }
                return;
            }
        };
        if let Some(v) = self.cfg.write_proxy {
            let h = header::encode(v, &info);
            if let Err(e) = backend.write_all(&h, self.cfg.connect_timeout).await {
                self.failure(
                    front,
                    "backend_error",
                    format_args!("backend {}: {e}", self.cfg.backend),
                );
                return;
            }
        }
        let idle = self.cfg.idle_timeout;
        let r = match tls {
            Tls::Kernel(k) => relay::splice(k, &backend, idle, &front.metrics).await,
            Tls::User(u) => relay::userspace(u, &backend, idle, &front.metrics).await,
        };
        if let Err(e) = r {
            front.metrics.error(e.kind());
            tracing::debug!("connection from {} ended: {e}", info.client);
        }
    }
}

impl Proxy {
    fn backend_down(&self, front: &Front, e: &ConnectError) {
        self.failure(
            front,
            e.kind(),
            format_args!("backend {}: {e}", self.cfg.backend),
        );
    }
}
