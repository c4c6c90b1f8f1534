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
use crate::lograte::LogLimit;
use crate::server::{ConnInfo, Front, Service, StartError, Tls};
use crate::tls::TlsOptions;
use crate::transport::close_and_linger;
use backend::{BackendAddr, ConnectError};
use header::ProxyVersion;
use ipnet::IpNet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
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
    /// Open connections per worker (`None`: fit to the open-file limit).
    pub max_connections: Option<usize>,
    pub run_as: Option<crate::privileges::RunAs>,
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
            max_connections: None,
            run_as: self.front.run_as(None, None, |k| k.to_string())?,
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
    /// Failures are warned about at most once per kind per interval, with
    /// the count of lines left out; every one is counted in the metrics.
    log: LogLimit,
    /// Connection attempts to the backend that failed since one last
    /// succeeded (0: the backend answers).
    failing: AtomicU64,
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
    let (listen, workers, run_as) = (cfg.listen.clone(), cfg.workers, cfg.run_as.clone());
    let backend = cfg.backend.clone();
    let pp = match cfg.write_proxy {
        Some(ProxyVersion::V1) => ", PROXY v1",
        Some(ProxyVersion::V2) => ", PROXY v2",
        None => "",
    };
    let svc = Arc::new(Proxy {
        cfg,
        log: LogLimit::new(crate::lograte::EVERY),
        failing: AtomicU64::new(0),
    });
    crate::server::run(front, svc, &listen, workers, run_as.as_ref(), |a| {
        format!(
            "proxying https://{a}/ to {backend}{pp} with {workers} worker{}",
            if workers == 1 { "" } else { "s" }
        )
    })
}

impl Proxy {
    /// Count a failure; warn about it unless its kind was warned about
    /// within the interval.
    fn failure(&self, front: &Front, kind: &'static str, detail: std::fmt::Arguments<'_>) {
        front.metrics.error(kind);
        if let Some(left_out) = self.log.allow(kind) {
            tracing::warn!("{detail}{left_out}");
        }
    }

    /// The backend could not be reached: a warning when it starts failing
    /// and, rate-limited, while it goes on failing.
    fn backend_down(&self, front: &Front, e: &ConnectError) {
        let n = self.failing.fetch_add(1, Ordering::Relaxed) + 1;
        let how = if n == 1 {
            "failing".to_string()
        } else {
            format!("still failing ({n} attempts in a row)")
        };
        self.failure(
            front,
            e.kind(),
            format_args!("backend {} {how}: {e} ({})", self.cfg.backend, e.kind()),
        );
    }

    /// The backend answered: say so if it had been failing.
    fn backend_up(&self) {
        // A load first: the line is shared by every worker, and a swap on
        // every connection would write it every time.
        if self.failing.load(Ordering::Relaxed) == 0 {
            return;
        }
        let n = self.failing.swap(0, Ordering::Relaxed);
        if n > 0 {
            if let Some(left_out) = self.log.allow("backend_up") {
                let s = if n == 1 { "" } else { "s" };
                tracing::warn!(
                    "backend {} up again after {n} failed attempt{s}{left_out}",
                    self.cfg.backend
                );
            }
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
            Ok(b) => {
                self.backend_up();
                b
            }
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
        match r {
            Ok(()) => {}
            // The backend broke a connection (a reset, an I/O error):
            // worth a (rate-limited) line, unlike a client going away.
            Err(e @ relay::RelayError::Backend(_)) => self.failure(
                front,
                e.kind(),
                format_args!(
                    "backend {}, connection from {}: {e}",
                    self.cfg.backend, info.client
                ),
            ),
            Err(e) => {
                front.metrics.error(e.kind());
                tracing::debug!("connection from {} ended: {e}", info.client);
            }
        }
    }
}
