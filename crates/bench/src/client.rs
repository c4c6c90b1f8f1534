//! One benchmark connection: TCP connect and TLS handshake (each timed),
//! GETs on it, and what was negotiated; plus the pre-flight probe that picks
//! the server address and turns a bad target (refused port, certificate
//! error, 404) into one clear error before any measuring starts.

use super::http::{self, HttpError, Response};
use super::url::Target;
use rustls::ClientConfig;
use serde::Serialize;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot resolve {host}: {source}")]
    Resolve { host: String, source: io::Error },
    #[error("{host} resolves to no address")]
    NoAddress { host: String },
    #[error("cannot connect to {addr}: {source}")]
    Connect { addr: SocketAddr, source: io::Error },
    #[error("TLS handshake with {addr} failed: {detail}")]
    Handshake { addr: SocketAddr, detail: String },
    #[error("sending the request failed: {0}")]
    Send(io::Error),
    #[error(transparent)]
    Http(#[from] HttpError),
    #[error("the server answered {status} {reason}")]
    Status { status: u16, reason: String },
    #[error("the server closed the connection after {done} of {wanted} requests")]
    ClosedEarly { done: u32, wanted: u32 },
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

impl ClientError {
    /// A short name for counting failures by kind.
    pub fn kind(&self) -> &'static str {
        match self {
            ClientError::Resolve { .. } | ClientError::NoAddress { .. } => "resolve",
            ClientError::Connect { .. } => "connect",
            ClientError::Handshake { .. } => "tls",
            ClientError::Send(_) => "send",
            ClientError::Http(HttpError::Idle(_)) | ClientError::Timeout(_) => "timeout",
            ClientError::Http(_) => "http",
            ClientError::Status { .. } => "status",
            ClientError::ClosedEarly { .. } => "closed_early",
        }
    }
}

/// What a connection negotiated and how long it took to set up.
#[derive(Clone, Debug, Serialize)]
pub struct ConnInfo {
    pub addr: SocketAddr,
    /// TCP connect, seconds.
    pub tcp_connect_s: f64,
    /// TLS handshake after TCP connect, seconds.
    pub handshake_s: f64,
    pub resumed: bool,
    pub version: String,
    pub suite: String,
    pub group: String,
}

impl ConnInfo {
    /// "TLS 1.3 TLS13_AES_256_GCM_SHA384 X25519".
    pub fn describe(&self) -> String {
        format!("{} {} {}", self.version, self.suite, self.group)
    }
}

/// An open TLS connection to the target.
pub struct Conn {
    io: BufReader<TlsStream<TcpStream>>,
    pub info: ConnInfo,
}

/// Explain a failed handshake in one line, with a hint where one helps.
fn handshake_detail(e: &io::Error) -> String {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(tls @ rustls::Error::InvalidCertificate(_)) => {
            format!("{tls} (give --ca FILE with the issuing CA, or --insecure)")
        }
        Some(tls) => tls.to_string(),
        None if e.kind() == io::ErrorKind::UnexpectedEof
            || e.kind() == io::ErrorKind::ConnectionReset =>
        {
            format!("{e} (the server hung up: does it speak TLS on this port?)")
        }
        None => e.to_string(),
    }
}

/// Open a TCP connection to `addr` and do the TLS handshake.
pub async fn connect(
    addr: SocketAddr,
    target: &Target,
    connector: &TlsConnector,
) -> Result<Conn, ClientError> {
    let t0 = Instant::now();
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|source| ClientError::Connect { addr, source })?;
    let _ = tcp.set_nodelay(true);
    let t1 = Instant::now();
    let tls = connector
        .connect(target.server_name.clone(), tcp)
        .await
        .map_err(|e| ClientError::Handshake {
            addr,
            detail: handshake_detail(&e),
        })?;
    let t2 = Instant::now();
    let (_, state) = tls.get_ref();
    let info = ConnInfo {
        addr,
        tcp_connect_s: (t1 - t0).as_secs_f64(),
        handshake_s: (t2 - t1).as_secs_f64(),
        resumed: state.handshake_kind() == Some(rustls::HandshakeKind::Resumed),
        version: match state.protocol_version() {
            Some(rustls::ProtocolVersion::TLSv1_3) => "TLS 1.3".into(),
            Some(rustls::ProtocolVersion::TLSv1_2) => "TLS 1.2".into(),
            Some(v) => format!("{v:?}"),
            None => "?".into(),
        },
        suite: state
            .negotiated_cipher_suite()
            .map(|s| format!("{:?}", s.suite()))
            .unwrap_or_else(|| "?".into()),
        group: state
            .negotiated_key_exchange_group()
            .map(|g| format!("{:?}", g.name()))
            .unwrap_or_else(|| "-".into()),
    };
    Ok(Conn {
        io: BufReader::with_capacity(64 * 1024, tls),
        info,
    })
}

impl Conn {
    /// Send `request` (a GET) and read the whole response. `idle` bounds
    /// each wait for data. A status of 400 or more is an error (after the
    /// body was read).
    pub async fn get(
        &mut self,
        request: &[u8],
        idle: Option<Duration>,
    ) -> Result<Response, ClientError> {
        let w = self.io.get_mut();
        w.write_all(request).await.map_err(ClientError::Send)?;
        w.flush().await.map_err(ClientError::Send)?;
        let resp = http::read_response(&mut self.io, idle).await?;
        if resp.status >= 400 || resp.status < 200 {
            return Err(ClientError::Status {
                status: resp.status,
                reason: resp.reason,
            });
        }
        Ok(resp)
    }

    /// Send close_notify and close, waiting at most a second.
    pub async fn close(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(1), self.io.get_mut().shutdown()).await;
    }
}

/// Resolve the target's host.
pub async fn resolve(target: &Target) -> Result<Vec<SocketAddr>, ClientError> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((target.host.as_str(), target.port))
        .await
        .map_err(|source| ClientError::Resolve {
            host: target.host.clone(),
            source,
        })?
        .collect();
    if addrs.is_empty() {
        return Err(ClientError::NoAddress {
            host: target.host.clone(),
        });
    }
    Ok(addrs)
}

/// The result of the pre-flight connection.
pub struct Probe {
    /// The address every measured connection will use.
    pub addr: SocketAddr,
    pub info: ConnInfo,
}

/// Resolve the target, find an address that accepts connections, and
/// handshake there (then, with `get`, do one GET) on a connection that
/// leaves the session cache untouched.
pub async fn probe(
    target: &Target,
    cfg: &ClientConfig,
    timeout: Duration,
    get: bool,
) -> Result<Probe, ClientError> {
    let connector = TlsConnector::from(super::tls::without_resumption(cfg));
    let request = http::get_request(target);
    let mut last = None;
    for addr in resolve(target).await? {
        let mut conn = match tokio::time::timeout(timeout, connect(addr, target, &connector)).await
        {
            Err(_) => {
                last = Some(ClientError::Timeout(timeout));
                continue;
            }
            Ok(Err(e @ ClientError::Connect { .. })) => {
                last = Some(e);
                continue;
            }
            Ok(Err(e)) => return Err(e),
            Ok(Ok(conn)) => conn,
        };
        if get {
            tokio::time::timeout(timeout, conn.get(&request, None))
                .await
                .map_err(|_| ClientError::Timeout(timeout))??;
        }
        let info = conn.info.clone();
        conn.close().await;
        return Ok(Probe { addr, info });
    }
    Err(last.unwrap_or(ClientError::NoAddress {
        host: target.host.clone(),
    }))
}

/// A connector for measured connections (sharing `cfg`'s session cache).
pub fn connector(cfg: &Arc<ClientConfig>) -> TlsConnector {
    TlsConnector::from(cfg.clone())
}
