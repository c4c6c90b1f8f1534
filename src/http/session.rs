//! The static file service: one HTTP/1.1 session per TLS connection, with
//! keep-alive and pipelining, the request-phase timeouts, and the response
//! to each request (files with ranges and preconditions, redirects,
//! listings, errors). Buffers exist only while a request is being read or
//! answered; file bodies go out through the transport's `send_file`
//! (`sendfile()` on kTLS).

use super::conditional::{self, Outcome};
use super::path;
use super::range::{self, RangeResult};
use super::request::{self, Body, HeadLimits, Method, RequestHead};
use super::response::{error_page, Head};
use crate::config::{secs, ServeConfig};
use crate::files::DocRoot;
use crate::files::{FileError, Lookup, OpenFile};
use crate::server::timer::{timeout, timeout_at};
use crate::server::{ConnInfo, Front, Service, StartError, Tls};
use crate::transport::{close_and_linger, Transport, TransportError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// How long to keep reading after our close_notify so the client's unread
/// data does not turn our close into a reset.
const LINGER: Duration = Duration::from_secs(2);

/// How long a connection between requests keeps its buffers before it
/// counts as idle and drops them.
const IDLE_GRACE: Duration = Duration::from_millis(50);

/// `tlsfront serve`: the static file service.
pub struct StaticFiles {
    root: DocRoot,
    cfg: ServeConfig,
}

/// Run `tlsfront serve` until SIGTERM/SIGINT.
pub fn run(cfg: ServeConfig) -> Result<(), StartError> {
    let front = crate::server::front(
        cfg.cert.as_deref(),
        cfg.key.as_deref(),
        &Default::default(),
        cfg.ktls,
        cfg.timeouts.clone(),
        cfg.limits.connections,
    )?;
    let root = DocRoot::open(&cfg.root, cfg.follow_symlinks_outside, cfg.autoindex)?;
    let (listen, workers) = (cfg.listen.clone(), cfg.workers);
    let shown = root.path().display().to_string();
    let svc = Arc::new(StaticFiles { root, cfg });
    crate::server::run(front, svc, &listen, workers, |a| {
        format!(
            "serving {shown} on https://{a}/ with {workers} worker{}",
            if workers == 1 { "" } else { "s" }
        )
    })
}

impl Service for StaticFiles {
    /// The socket and the file being sent.
    const FDS_PER_CONNECTION: u64 = 2;

    async fn serve(&self, front: &Front, tls: Tls, _info: ConnInfo, stop: watch::Receiver<bool>) {
        let cx = Ctx { files: self, front };
        match tls {
            Tls::Kernel(k) => session(k, &cx, stop).await,
            Tls::User(u) => session(u, &cx, stop).await,
        }
    }
}

/// What a session needs to see.
struct Ctx<'a> {
    files: &'a StaticFiles,
    front: &'a Front,
}

/// How a session ended.
enum End {
    /// Close normally: close_notify, then linger.
    Close,
    /// The transport broke (or must not be read again): no linger.
    Abort(TransportError),
}

async fn session<T: Transport>(mut t: T, cx: &Ctx<'_>, mut stop: watch::Receiver<bool>) {
    let end = serve(&mut t, cx, &mut stop).await;
    match end {
        End::Close => close_and_linger(&mut t, LINGER).await,
        End::Abort(e) => {
            cx.front.metrics.error(e.kind());
            tracing::debug!("connection ended: {e}");
            if matches!(e, TransportError::KeyUpdateUnsupported) {
                // Our sending key is still valid: say goodbye properly, but
                // read nothing more (it is under a key we cannot install).
                let _ = t.close().await;
            }
        }
    }
}

async fn serve<T: Transport>(t: &mut T, cx: &Ctx<'_>, stop: &mut watch::Receiver<bool>) -> End {
    let cfg = &cx.files.cfg;
    let limits = HeadLimits {
        request_line: cfg.limits.request_line,
        header_bytes: cfg.limits.header_bytes,
        headers: cfg.limits.headers,
    };
    let header_timeout = secs(cfg.timeouts.request_header);
    let keepalive = secs(cfg.timeouts.keepalive);
    let mut buf: Vec<u8> = Vec::new();
    let mut filled = 0usize;
    let mut served = 0u64;
    let mut out = Vec::new();

    loop {
        // Wait for the next request. Back-to-back requests keep their
        // buffers; a connection idle beyond a moment holds none.
        if filled == 0 {
            if *stop.borrow() {
                return End::Close;
            }
            let idle = if served == 0 {
                header_timeout
            } else {
                keepalive
            };
            let mut waited = IDLE_GRACE.min(idle);
            let mut released = false;
            loop {
                tokio::select! {
                    r = timeout(waited, t.readable()) => match r {
                        Ok(Err(e)) => return End::Abort(e),
                        Ok(Ok(())) => break,
                        Err(_) if released => return End::Close,
                        Err(_) => {}
                    },
                    _ = stop.changed() => return End::Close,
                }
                buf = Vec::new();
                out = Vec::new();
                t.release_buffers();
                released = true;
                waited = idle.saturating_sub(waited);
            }
        }

        // Read until a whole request head is buffered.
        let deadline = Instant::now() + header_timeout;
        let head = loop {
            if filled > 0 {
                match request::parse(&buf[..filled], &limits) {
                    Ok(Some(h)) => break Ok(h),
                    Ok(None) => {}
                    Err(e) => break Err(e),
                }
            }
            if buf.len() == filled {
                let cap = (limits.header_bytes + 1).max(filled + 1);
                // Not `clamp`: that panics when `header_bytes` < 4 KiB.
                buf.resize((filled * 2).max(4096).min(cap), 0);
            }
            match timeout_at(deadline, t.read(&mut buf[filled..])).await {
                Err(_) => {
                    if filled > 0 {
                        let _ = respond_error(t, cx, &mut out, 408, 1, false).await;
                    }
                    return End::Close;
                }
                Ok(Ok(0)) => return End::Close,
                Ok(Ok(n)) => filled += n,
                Ok(Err(e)) => return End::Abort(e),
            }
        };
        let head = match head {
            Ok(h) => h,
            Err(e) => {
                tracing::debug!("bad request: {e}");
                return match respond_error(t, cx, &mut out, e.status(), 1, false).await {
                    Ok(()) => End::Close,
                    Err(e) => End::Abort(e),
                };
            }
        };
        buf.copy_within(head.head_len..filled, 0);
        filled -= head.head_len;

        let mut keep_alive =
            head.keep_alive && served + 1 < cfg.limits.keepalive_requests && !*stop.borrow();
        match head.body {
            Body::None => {}
            Body::Length(n) if n <= cfg.limits.body => {
                // Discard the body: from the buffer, then from the stream.
                let in_buf = (n as usize).min(filled);
                buf.copy_within(in_buf..filled, 0);
                filled -= in_buf;
                let mut left = n - in_buf as u64;
                let mut scratch = vec![0u8; 4096];
                while left > 0 {
                    let want = (left as usize).min(scratch.len());
                    match timeout_at(deadline, t.read(&mut scratch[..want])).await {
                        Ok(Ok(0)) | Err(_) => return End::Close,
                        Ok(Ok(k)) => left -= k as u64,
                        Ok(Err(e)) => return End::Abort(e),
                    }
                }
            }
            Body::Length(_) => {
                return match respond_error(t, cx, &mut out, 413, head.minor, false).await {
                    Ok(()) => End::Close,
                    Err(e) => End::Abort(e),
                };
            }
            // We do not read chunked bodies: answer, then close.
            Body::Chunked => keep_alive = false,
        }

        if let Err(e) = respond(t, cx, &head, keep_alive, &mut out).await {
            return End::Abort(e);
        }
        served += 1;
        if !keep_alive {
            return End::Close;
        }
    }
}

async fn respond_error<T: Transport>(
    t: &mut T,
    cx: &Ctx<'_>,
    out: &mut Vec<u8>,
    status: u16,
    minor: u8,
    keep_alive: bool,
) -> Result<(), TransportError> {
    send_page(t, cx, out, status, minor, keep_alive, true, &[]).await
}

/// A small HTML page (errors, redirects) with optional extra headers.
#[allow(clippy::too_many_arguments)]
async fn send_page<T: Transport>(
    t: &mut T,
    cx: &Ctx<'_>,
    out: &mut Vec<u8>,
    status: u16,
    minor: u8,
    keep_alive: bool,
    with_body: bool,
    extra: &[(&str, &str)],
) -> Result<(), TransportError> {
    cx.front.metrics.status(status);
    let body = error_page(status);
    let mut h = Head::new(out, status);
    h.header("Content-Type", "text/html; charset=utf-8");
    for (k, v) in extra {
        h.header(k, v);
    }
    h.finish(Some(body.len() as u64), keep_alive, minor);
    if with_body {
        out.extend_from_slice(body.as_bytes());
    }
    cx.front.metrics.bytes(t.path(), out.len() as u64);
    t.write_all(out, false).await
}

async fn respond<T: Transport>(
    t: &mut T,
    cx: &Ctx<'_>,
    req: &RequestHead,
    keep_alive: bool,
    out: &mut Vec<u8>,
) -> Result<(), TransportError> {
    let is_head = req.method == Method::Head;
    let minor = req.minor;
    if req.method == Method::Other {
        return send_page(
            t,
            cx,
            out,
            405,
            minor,
            keep_alive,
            !is_head,
            &[("Allow", "GET, HEAD")],
        )
        .await;
    }
    let norm = match path::normalize(&req.target) {
        Ok(p) => p,
        Err(e) => {
            tracing::debug!("refused path {:?}: {e}", req.target);
            return send_page(t, cx, out, 400, minor, false, true, &[]).await;
        }
    };
    match cx.files.root.lookup(&norm) {
        Err(e) => {
            if let FileError::Io(err) = &e {
                tracing::warn!("cannot open {:?}: {err}", req.target);
            }
            let ka = keep_alive && e.status() < 500;
            send_page(t, cx, out, e.status(), minor, ka, !is_head, &[]).await
        }
        Ok(Lookup::Redirect(url)) => {
            send_page(
                t,
                cx,
                out,
                301,
                minor,
                keep_alive,
                !is_head,
                &[("Location", &url)],
            )
            .await
        }
        Ok(Lookup::Listing(html)) => {
            cx.front.metrics.status(200);
            let mut h = Head::new(out, 200);
            h.header("Content-Type", "text/html; charset=utf-8");
            h.finish(Some(html.len() as u64), keep_alive, minor);
            if !is_head {
                out.extend_from_slice(html.as_bytes());
            }
            cx.front.metrics.bytes(t.path(), out.len() as u64);
            t.write_all(out, false).await
        }
        Ok(Lookup::File(f)) => send_file(t, cx, req, keep_alive, out, f).await,
    }
}

async fn send_file<T: Transport>(
    t: &mut T,
    cx: &Ctx<'_>,
    req: &RequestHead,
    keep_alive: bool,
    out: &mut Vec<u8>,
    f: OpenFile,
) -> Result<(), TransportError> {
    let is_head = req.method == Method::Head;
    let v = &f.validators;
    match conditional::evaluate(req, v) {
        Outcome::Proceed => {}
        Outcome::NotModified => {
            cx.front.metrics.status(304);
            let mut h = Head::new(out, 304);
            h.header_date("Last-Modified", v.modified)
                .header("ETag", v.etag.as_str());
            h.finish(None, keep_alive, req.minor);
            return t.write_all(out, false).await;
        }
        Outcome::PreconditionFailed => {
            return send_page(t, cx, out, 412, req.minor, keep_alive, !is_head, &[]).await;
        }
    }
    let range = match &req.range {
        Some(r) if conditional::if_range_allows(req, v) => range::parse(r, f.size),
        _ => RangeResult::Full,
    };
    let (status, start, len) = match range {
        RangeResult::Full => (200, 0, f.size),
        RangeResult::Partial { start, end } => (206, start, end - start + 1),
        RangeResult::Unsatisfiable => {
            let cr = format!("bytes */{}", f.size);
            return send_page(
                t,
                cx,
                out,
                416,
                req.minor,
                keep_alive,
                !is_head,
                &[("Content-Range", &cr)],
            )
            .await;
        }
    };
    cx.front.metrics.status(status);
    let mut h = Head::new(out, status);
    h.header("Content-Type", f.content_type)
        .header_date("Last-Modified", v.modified)
        .header("ETag", v.etag.as_str())
        .header("Accept-Ranges", "bytes");
    if status == 206 {
        h.header(
            "Content-Range",
            &format!("bytes {start}-{}/{}", start + len - 1, f.size),
        );
    }
    h.finish(Some(len), keep_alive, req.minor);
    let body = !is_head && len > 0;
    cx.front.metrics.bytes(t.path(), out.len() as u64);
    t.write_all(out, body).await?;
    if body {
        t.send_file(&f.file, start, len).await?;
        cx.front.metrics.bytes(t.path(), len);
    }
    Ok(())
}
