//! `tlsfront proxy`: TLS termination for a plain-TCP backend (the
//! stud/hitch job). One backend connection per client, opened after the
//! handshake (a handshake flood never reaches the backend), an optional
//! PROXY v1/v2 header first, then bytes both ways: with kTLS by `splice()`
//! through pipes, never through user space; otherwise through rustls.

pub mod backend;
pub mod header;
mod relay;

use crate::config::settings::{Backend, Site};
use crate::config::{secs, ProxyVersion};
use crate::lograte::LogLimit;
use crate::server::{ConnInfo, Front, Tls};
use crate::transport::close_and_linger;
use backend::{BackendAddr, ConnectError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// The proxy service of one site.
pub struct Proxy {
    backend: BackendAddr,
    write_proxy: Option<ProxyVersion>,
    connect_timeout: Duration,
    idle_timeout: Duration,
    /// Failures are warned about at most once per kind per interval, with
    /// the count of lines left out; every one is counted in the metrics.
    log: LogLimit,
    /// The lines of an outage's start and end: every outage gets them, but
    /// a backend that flaps on every connection cannot flood the log.
    transitions: LogLimit,
    /// Connection attempts to the backend that failed since one last
    /// succeeded (0: the backend answers).
    failing: AtomicU64,
    /// The backend as the access log names it.
    backend_name: String,
}

impl Proxy {
    /// Client and backend sockets, and the two splice pipes of the kTLS
    /// relay.
    pub const FDS_PER_CONNECTION: u64 = 6;

    pub fn new(site: &Site, backend: &Backend) -> Proxy {
        Proxy {
            backend: backend.addr.clone(),
            write_proxy: backend.write_proxy,
            connect_timeout: secs(site.timeouts.connect),
            idle_timeout: secs(site.timeouts.idle),
            log: LogLimit::new(crate::lograte::EVERY),
            transitions: LogLimit::new(Duration::from_secs(1)),
            failing: AtomicU64::new(0),
            backend_name: backend.addr.to_string(),
        }
    }

    pub fn backend(&self) -> &BackendAddr {
        &self.backend
    }

    pub fn write_proxy(&self) -> Option<ProxyVersion> {
        self.write_proxy
    }

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
    ///
    /// The first failure of an outage is limited on its own, at a shorter
    /// interval, so an outage that begins soon after another still gets its
    /// line; it then holds the continued-failure lines for an interval.
    fn backend_down(&self, front: &Front, e: &ConnectError) {
        let n = self.failing.fetch_add(1, Ordering::Relaxed) + 1;
        if n > 1 {
            return self.failure(
                front,
                e.kind(),
                format_args!(
                    "backend {} still failing ({n} attempts in a row): {e} ({})",
                    self.backend,
                    e.kind()
                ),
            );
        }
        front.metrics.error(e.kind());
        if let Some(left_out) = self.transitions.allow("backend_down") {
            tracing::warn!(
                "backend {} failing: {e} ({}){left_out}",
                self.backend,
                e.kind()
            );
        }
        self.log.hold(e.kind());
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
            if let Some(left_out) = self.transitions.allow("backend_up") {
                let s = if n == 1 { "" } else { "s" };
                tracing::warn!(
                    "backend {} up again after {n} failed attempt{s}{left_out}",
                    self.backend
                );
            }
        }
    }
}

impl Proxy {
    /// Serve one connection: connect to the backend, send the PROXY
    /// header, relay.
    pub(crate) async fn serve(
        &self,
        front: &Front,
        tls: Tls,
        info: ConnInfo,
        _stop: watch::Receiver<bool>,
    ) {
        let started = std::time::Instant::now();
        let meter = relay::Meter::new(&info.metrics);
        let end = self.relay(front, tls, &info, &meter).await;
        if let Some(log) = &info.log {
            log.proxy(&crate::accesslog::ProxyRecord {
                info: &info,
                backend: &self.backend_name,
                from_client: meter.from_client.load(Ordering::Relaxed),
                to_client: meter.to_client.load(Ordering::Relaxed),
                duration: started.elapsed(),
                end,
            });
        }
    }

    /// Connect to the backend, send the PROXY header, relay; how the
    /// connection ended, for the access log (`done`, or an error kind).
    async fn relay(
        &self,
        front: &Front,
        tls: Tls,
        info: &ConnInfo,
        meter: &relay::Meter<'_>,
    ) -> &'static str {
        let backend = match backend::connect(&self.backend, self.connect_timeout).await {
            Ok(b) => {
                self.backend_up();
                b
            }
            Err(e) => {
                info.metrics.backend_error(e.kind());
                self.backend_down(front, &e);
                // The client gets a TLS close, not a hang.
                let linger = Duration::from_secs(1);
                match tls {
                    Tls::Kernel(mut k) => close_and_linger(&mut k, linger).await,
                    Tls::User(mut u) => close_and_linger(&mut u, linger).await,
                }
                return e.kind();
            }
        };
        if let Some(v) = self.write_proxy {
            let h = header::encode(v, info);
            if let Err(e) = backend.write_all(&h, self.connect_timeout).await {
                info.metrics.backend_error("backend_error");
                self.failure(
                    front,
                    "backend_error",
                    format_args!("backend {}: {e}", self.backend),
                );
                return "backend_error";
            }
        }
        let idle = self.idle_timeout;
        let r = match tls {
            Tls::Kernel(k) => relay::splice(k, &backend, idle, meter).await,
            Tls::User(u) => relay::userspace(u, &backend, idle, meter).await,
        };
        match &r {
            Ok(()) => {}
            // The backend broke a connection (a reset, an I/O error):
            // worth a (rate-limited) line, unlike a client going away.
            Err(e @ relay::RelayError::Backend(_)) => {
                info.metrics.backend_error(e.kind());
                self.failure(
                    front,
                    e.kind(),
                    format_args!(
                        "backend {}, connection from {}: {e}",
                        self.backend, info.client
                    ),
                )
            }
            Err(e) => {
                front.metrics.error(e.kind());
                tracing::debug!("connection from {} ended: {e}", info.client);
            }
        }
        r.map_or_else(|e| e.kind(), |()| "done")
    }
}
