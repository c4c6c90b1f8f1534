//! The admin listener (`admin = ADDR`): plain HTTP/1.1 for monitoring,
//! `GET /metrics` (the registry of [`crate::metrics`], OpenMetrics text for
//! Prometheus) and `GET /healthz` (`200 ok` while serving, `503` once the
//! process drains, so a load balancer's health check takes it out first).
//! It runs as one task on the main runtime, beside the signals.
//!
//! No HTTP server crate: two fixed paths, one request per connection and
//! `Connection: close` are a few lines on `httparse`, while a server crate
//! would add a dependency tree (and its own runtime expectations) for them.
//! What a server crate would give for free is kept by hand: the head is
//! bounded ([`MAX_HEAD`]), reading it and writing the answer are bounded in
//! time ([`IO_TIMEOUT`]), and at most [`MAX_CONNECTIONS`] are served at once
//! (others are closed at once), so a stuck or hostile client cannot pile up
//! tasks on the runtime that also handles signals and reloads.

use super::{Front, StartError};
use socket2::{Domain, Socket, Type};
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{watch, Semaphore};

/// The largest request head read.
const MAX_HEAD: usize = 8 << 10;
/// For reading the head, and again for writing the answer.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Admin connections served at once.
const MAX_CONNECTIONS: usize = 16;

/// The admin listener: the socket inherited for its address (from the
/// process that started this one on SIGUSR2, or from systemd), else one
/// bound now (before privileges are dropped); and a duplicate to hand on to
/// a new process on SIGUSR2, which could not bind the address while this
/// one holds it (nor at all once this one runs as `user`). An inherited
/// socket is taken by address here only for a port other than 0 (one
/// named as the admin listener is taken before).
pub(super) fn bind(
    addr: SocketAddr,
    inherited: &mut Vec<(SocketAddr, std::net::TcpListener)>,
) -> Result<(std::net::TcpListener, Option<OwnedFd>), StartError> {
    let fail = |source| StartError::Admin { addr, source };
    let taken = if addr.port() == 0 {
        None
    } else {
        super::handover::take_for(addr, inherited)
            .into_iter()
            .next()
    };
    let listener = match taken {
        Some(l) => {
            l.set_nonblocking(true).map_err(fail)?;
            l
        }
        None => {
            let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None).map_err(fail)?;
            sock.set_reuse_address(true).map_err(fail)?;
            if addr.is_ipv6() {
                sock.set_only_v6(true).map_err(fail)?;
            }
            sock.set_nonblocking(true).map_err(fail)?;
            sock.bind(&addr.into()).map_err(fail)?;
            sock.listen(64).map_err(fail)?;
            sock.into()
        }
    };
    // Handed on under its name (`handover::ADMIN_NAME`), so that a new
    // process finds it even on port 0.
    let dup = Some(listener.as_fd().try_clone_to_owned().map_err(fail)?);
    Ok((listener, dup))
}

/// Answer admin connections until the process exits. `stop` turns true
/// when the drain begins.
pub(super) async fn serve(
    listener: std::net::TcpListener,
    front: Arc<Front>,
    stop: watch::Receiver<bool>,
) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("admin listener unusable: {e}");
            return;
        }
    };
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (sock, _) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!("admin accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            front.metrics.error("admin_connection_limit");
            continue;
        };
        let front = front.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let _ = answer(sock, &front, &stop).await;
            drop(slot);
        });
    }
}

async fn answer(
    mut sock: TcpStream,
    front: &Front,
    stop: &watch::Receiver<bool>,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; MAX_HEAD];
    let mut filled = 0;
    let read = async {
        loop {
            let n = sock.read(&mut buf[filled..]).await?;
            if n == 0 {
                return Ok(None);
            }
            filled += n;
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(&buf[..filled]) {
                Ok(httparse::Status::Complete(_)) => {
                    let method = req.method.unwrap_or_default().to_string();
                    let path = req.path.unwrap_or_default();
                    let path = path.split('?').next().unwrap_or_default().to_string();
                    return Ok(Some(Ok((method, path))));
                }
                Ok(httparse::Status::Partial) if filled < buf.len() => {}
                Ok(httparse::Status::Partial) => return Ok(Some(Err(431))),
                Err(_) => return Ok(Some(Err(400))),
            }
        }
    };
    let request: std::io::Result<_> = match tokio::time::timeout(IO_TIMEOUT, read).await {
        Ok(r) => r,
        Err(_) => return Ok(()),
    };
    let (status, body, kind) = match request? {
        None => return Ok(()),
        Some(Err(status)) => (status, String::new(), TEXT),
        Some(Ok((method, path))) => route(&method, &path, front, *stop.borrow()),
    };
    let response = response(status, &body, kind);
    let write = async {
        sock.write_all(&response).await?;
        sock.shutdown().await
    };
    match tokio::time::timeout(IO_TIMEOUT, write).await {
        Ok(r) => r,
        Err(_) => Ok(()),
    }
}

const TEXT: &str = "text/plain; charset=utf-8";
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Status, body and content type for a request.
fn route(method: &str, path: &str, front: &Front, draining: bool) -> (u16, String, &'static str) {
    match path {
        "/metrics" | "/healthz" if method != "GET" => (405, "use GET\n".into(), TEXT),
        "/metrics" => (
            200,
            front.metrics.encode(front.shared.tickets().key_age()),
            OPENMETRICS,
        ),
        "/healthz" if draining => (503, "draining\n".into(), TEXT),
        "/healthz" => (200, "ok\n".into(), TEXT),
        _ => (404, "not found: try /metrics or /healthz\n".into(), TEXT),
    }
}

fn response(status: u16, body: &str, kind: &str) -> Vec<u8> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        _ => "Service Unavailable",
    };
    let allow = if status == 405 { "Allow: GET\r\n" } else { "" };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\n{allow}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn responses_are_whole() {
        let r = String::from_utf8(response(405, "use GET\n", TEXT)).unwrap();
        assert!(r.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"), "{r}");
        assert!(r.contains("Allow: GET\r\n"), "{r}");
        assert!(r.contains("Content-Length: 8\r\n"), "{r}");
        assert!(r.ends_with("\r\n\r\nuse GET\n"), "{r}");
    }
}
