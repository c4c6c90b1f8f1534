//! The admin listener (`admin = ADDR`): plain HTTP/1.1 for monitoring,
//! `GET /metrics` (the registry of [`crate::metrics`], OpenMetrics or the
//! Prometheus text format as the scraper's `Accept` asks) and `GET
//! /healthz` (`200 ok` while serving, `503` once the process drains, so a
//! load balancer's health check takes it out first).
//!
//! It runs on a thread of its own with its own current-thread runtime: the
//! main thread handles signals and does reloads and upgrades, which can
//! take seconds (thousands of sites to build, a new process to wait for),
//! and the workers are busy with clients; a health check must be answered
//! through all of that. The thread lives until the process exits.
//!
//! No HTTP server crate: two fixed paths, one request per connection and
//! `Connection: close` are a few lines on `httparse`, while a server crate
//! would add a dependency tree (and its own runtime expectations) for them.
//! What a server crate would give for free is kept by hand: the head is
//! bounded ([`MAX_HEAD`]) and must arrive within [`HEAD_TIMEOUT`], writing
//! the answer is bounded in time ([`WRITE_TIMEOUT`]), and at most
//! [`MAX_CONNECTIONS`] are open at once. When they are all taken, the
//! oldest one still waiting for its request is closed to make room for the
//! new one (nginx does the same with idle keep-alive connections when it
//! runs out), so connections that send nothing cannot lock out the
//! scraper: one that is not closed by its own timeout first is pushed out
//! by the next ones. Only when every slot is answering a request (each
//! bounded by the write timeout) does the oldest of those go.

use super::{Front, StartError};
use crate::metrics::Format;
use socket2::{Domain, Socket, Type};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::AbortHandle;

/// The largest request head read.
const MAX_HEAD: usize = 8 << 10;
/// For the request head, from accept: scrapers and health checks send it
/// at once, so this only ends connections that send nothing.
const HEAD_TIMEOUT: Duration = Duration::from_secs(3);
/// For writing the answer (a large registry to a slow reader).
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Admin connections open at once.
const MAX_CONNECTIONS: usize = 256;

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
            // Room for a burst of connections as large as the slots, so
            // that a scraper's SYN is not dropped behind idle ones.
            sock.listen(MAX_CONNECTIONS as i32).map_err(fail)?;
            sock.into()
        }
    };
    // Handed on under its name (`handover::ADMIN_NAME`), so that a new
    // process finds it even on port 0.
    let dup = Some(listener.as_fd().try_clone_to_owned().map_err(fail)?);
    Ok((listener, dup))
}

/// Answer admin connections until the process exits, on a thread of its
/// own. `stop` turns true when the drain begins.
pub(super) fn start(
    listener: std::net::TcpListener,
    front: Arc<Front>,
    stop: watch::Receiver<bool>,
) -> Result<(), StartError> {
    std::thread::Builder::new()
        .name("admin".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!("admin listener: no runtime ({e}); not answering");
                    return;
                }
            };
            rt.block_on(serve(listener, front, stop));
        })
        .map(drop)
        .map_err(StartError::Runtime)
}

/// The open admin connections, by age (ids in accept order).
#[derive(Default)]
struct Slots {
    next: u64,
    /// Still waiting for their request: the first to close for room.
    waiting: BTreeMap<u64, AbortHandle>,
    /// Answering a request.
    answering: BTreeMap<u64, AbortHandle>,
}

impl Slots {
    fn len(&self) -> usize {
        self.waiting.len() + self.answering.len()
    }
}

fn lock(slots: &Mutex<Slots>) -> MutexGuard<'_, Slots> {
    slots.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A connection's slot, given back when its task ends (or is aborted).
struct Slot {
    slots: Arc<Mutex<Slots>>,
    id: u64,
}

impl Slot {
    /// The request is read: no longer among the first to close.
    fn answering(&self) {
        let mut s = lock(&self.slots);
        if let Some(h) = s.waiting.remove(&self.id) {
            s.answering.insert(self.id, h);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut s = lock(&self.slots);
        s.waiting.remove(&self.id);
        s.answering.remove(&self.id);
    }
}

async fn serve(listener: std::net::TcpListener, front: Arc<Front>, stop: watch::Receiver<bool>) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("admin listener unusable: {e}");
            return;
        }
    };
    let slots = Arc::new(Mutex::new(Slots::default()));
    loop {
        let (sock, _) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!("admin accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (id, evicted) = {
            let mut s = lock(&slots);
            let evicted = if s.len() >= MAX_CONNECTIONS {
                s.waiting
                    .pop_first()
                    .or_else(|| s.answering.pop_first())
                    .map(|(_, h)| h)
            } else {
                None
            };
            s.next += 1;
            (s.next, evicted)
        };
        if let Some(h) = evicted {
            // Its task drops its socket (a close) when next polled.
            h.abort();
            front.metrics.error("admin_connection_limit");
        }
        let slot = Slot {
            slots: slots.clone(),
            id,
        };
        let front = front.clone();
        let stop = stop.clone();
        let task = tokio::spawn(async move {
            let _ = answer(sock, &front, &stop, &slot).await;
            drop(slot);
        });
        // The task has not run yet (this runtime has one thread, and this
        // loop holds it until its next await), so it is registered before
        // its slot can be given back.
        lock(&slots).waiting.insert(id, task.abort_handle());
    }
}

/// A request's method, path and `Accept` header.
struct Request {
    method: String,
    path: String,
    accept: Option<String>,
}

async fn answer(
    mut sock: TcpStream,
    front: &Front,
    stop: &watch::Receiver<bool>,
    slot: &Slot,
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
                    let path = req.path.unwrap_or_default();
                    let accept = req
                        .headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case("accept"))
                        .map(|h| String::from_utf8_lossy(h.value).into_owned());
                    return Ok(Some(Ok(Request {
                        method: req.method.unwrap_or_default().to_string(),
                        path: path.split('?').next().unwrap_or_default().to_string(),
                        accept,
                    })));
                }
                Ok(httparse::Status::Partial) if filled < buf.len() => {}
                Ok(httparse::Status::Partial) => return Ok(Some(Err(431))),
                Err(_) => return Ok(Some(Err(400))),
            }
        }
    };
    let request: std::io::Result<_> = match tokio::time::timeout(HEAD_TIMEOUT, read).await {
        Ok(r) => r,
        Err(_) => return Ok(()),
    };
    let (status, body, kind) = match request? {
        None => return Ok(()),
        Some(Err(status)) => (status, String::new(), TEXT),
        Some(Ok(req)) => route(&req, front, *stop.borrow()),
    };
    slot.answering();
    let response = response(status, &body, kind);
    let write = async {
        sock.write_all(&response).await?;
        sock.shutdown().await
    };
    match tokio::time::timeout(WRITE_TIMEOUT, write).await {
        Ok(r) => r,
        Err(_) => Ok(()),
    }
}

const TEXT: &str = "text/plain; charset=utf-8";

/// Status, body and content type for a request.
fn route(req: &Request, front: &Front, draining: bool) -> (u16, String, &'static str) {
    match req.path.as_str() {
        "/metrics" | "/healthz" if req.method != "GET" => (405, "use GET\n".into(), TEXT),
        "/metrics" => {
            let format = Format::negotiate(req.accept.as_deref());
            let key_age = front.shared.tickets().key_age();
            (
                200,
                front.metrics.encode(key_age, format),
                format.content_type(),
            )
        }
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
