//! One HTTP/1.1 session over a TLS transport: keep-alive and pipelining,
//! the request-phase timeouts, and the response to each request (files with
//! ranges and preconditions, redirects, listings, errors). Buffers exist
//! only while a request is being read or answered.

use super::{Shared, LINGER};
use crate::config::secs;
use crate::files::{FileError, Lookup, OpenFile};
use crate::http::conditional::{self, Outcome};
use crate::http::path;
use crate::http::range::{self, RangeResult};
use crate::http::request::{self, Body, HeadLimits, Method, RequestHead};
use crate::http::response::{error_page, DateCache, Head};
use crate::transport::{Transport, TransportError};
use std::cell::RefCell;
use tokio::sync::watch;
use tokio::time::{timeout, timeout_at, Instant};

thread_local! {
    static DATE: RefCell<DateCache> = RefCell::new(DateCache::default());
}

fn date() -> String {
    DATE.with(|d| d.borrow_mut().now().to_string())
}

/// How a session ended.
enum End {
    /// Close normally: close_notify, then linger.
    Close,
    /// The transport broke (or must not be read again): no linger.
    Abort(TransportError),
}

pub(super) async fn session<T: Transport>(
    mut t: T,
    shared: &Shared,
    mut stop: watch::Receiver<bool>,
) {
    let end = serve(&mut t, shared, &mut stop).await;
    match end {
        End::Close => {
            if t.close().await.is_ok() {
                linger(&mut t).await;
            }
        }
        End::Abort(e) => {
            shared.metrics.error(e.kind());
            tracing::debug!("connection ended: {e}");
            if matches!(e, TransportError::KeyUpdateUnsupported) {
                // Our sending key is still valid: say goodbye properly, but
                // read nothing more (it is under a key we cannot install).
                let _ = t.close().await;
            }
        }
    }
}

/// Read and discard what the client still sends after our close_notify, for
/// a short while, so that unread data does not turn the close into a reset.
async fn linger<T: Transport>(t: &mut T) {
    let mut scratch = [0u8; 4096];
    let deadline = Instant::now() + LINGER;
    let mut budget = 1usize << 20;
    while budget > 0 {
        match timeout_at(deadline, t.read(&mut scratch)).await {
            Ok(Ok(n)) if n > 0 => budget = budget.saturating_sub(n),
            _ => break,
        }
    }
}

async fn serve<T: Transport>(t: &mut T, shared: &Shared, stop: &mut watch::Receiver<bool>) -> End {
    let cfg = &shared.cfg;
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
        // Idle until the next request starts, holding no buffers.
        if filled == 0 {
            buf = Vec::new();
            out = Vec::new();
            t.release_buffers();
            if *stop.borrow() {
                return End::Close;
            }
            let idle = if served == 0 {
                header_timeout
            } else {
                keepalive
            };
            tokio::select! {
                r = timeout(idle, t.readable()) => match r {
                    Err(_) => return End::Close,
                    Ok(Err(e)) => return End::Abort(e),
                    Ok(Ok(())) => {}
                },
                _ = stop.changed() => return End::Close,
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
                buf.resize((filled * 2).clamp(4096, cap), 0);
            }
            match timeout_at(deadline, t.read(&mut buf[filled..])).await {
                Err(_) => {
                    if filled > 0 {
                        let _ = respond_error(t, shared, &mut out, 408, 1, false).await;
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
                return match respond_error(t, shared, &mut out, e.status(), 1, false).await {
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
                let mut scratch = [0u8; 4096];
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
                return match respond_error(t, shared, &mut out, 413, head.minor, false).await {
                    Ok(()) => End::Close,
                    Err(e) => End::Abort(e),
                };
            }
            // We do not read chunked bodies: answer, then close.
            Body::Chunked => keep_alive = false,
        }

        if let Err(e) = respond(t, shared, &head, keep_alive, &mut out).await {
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
    shared: &Shared,
    out: &mut Vec<u8>,
    status: u16,
    minor: u8,
    keep_alive: bool,
) -> Result<(), TransportError> {
    send_page(t, shared, out, status, minor, keep_alive, true, &[]).await
}

/// A small HTML page (errors, redirects) with optional extra headers.
#[allow(clippy::too_many_arguments)]
async fn send_page<T: Transport>(
    t: &mut T,
    shared: &Shared,
    out: &mut Vec<u8>,
    status: u16,
    minor: u8,
    keep_alive: bool,
    with_body: bool,
    extra: &[(&str, &str)],
) -> Result<(), TransportError> {
    shared.metrics.status(status);
    let body = error_page(status);
    let mut h = Head::new(out, status, &date());
    h.header("Content-Type", "text/html; charset=utf-8");
    for (k, v) in extra {
        h.header(k, v);
    }
    h.finish(Some(body.len() as u64), keep_alive, minor);
    if with_body {
        out.extend_from_slice(body.as_bytes());
    }
    shared.metrics.bytes(t.path(), out.len() as u64);
    t.write_all(out, false).await
}

async fn respond<T: Transport>(
    t: &mut T,
    shared: &Shared,
    req: &RequestHead,
    keep_alive: bool,
    out: &mut Vec<u8>,
) -> Result<(), TransportError> {
    let is_head = req.method == Method::Head;
    let minor = req.minor;
    if req.method == Method::Other {
        return send_page(
            t,
            shared,
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
            return send_page(t, shared, out, 400, minor, false, true, &[]).await;
        }
    };
    match shared.root.lookup(&norm) {
        Err(e) => {
            if let FileError::Io(err) = &e {
                tracing::warn!("cannot open {:?}: {err}", req.target);
            }
            let ka = keep_alive && e.status() < 500;
            send_page(t, shared, out, e.status(), minor, ka, !is_head, &[]).await
        }
        Ok(Lookup::Redirect(url)) => {
            send_page(
                t,
                shared,
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
            shared.metrics.status(200);
            let mut h = Head::new(out, 200, &date());
            h.header("Content-Type", "text/html; charset=utf-8");
            h.finish(Some(html.len() as u64), keep_alive, minor);
            if !is_head {
                out.extend_from_slice(html.as_bytes());
            }
            shared.metrics.bytes(t.path(), out.len() as u64);
            t.write_all(out, false).await
        }
        Ok(Lookup::File(f)) => send_file(t, shared, req, keep_alive, out, f).await,
    }
}

async fn send_file<T: Transport>(
    t: &mut T,
    shared: &Shared,
    req: &RequestHead,
    keep_alive: bool,
    out: &mut Vec<u8>,
    f: OpenFile,
) -> Result<(), TransportError> {
    let is_head = req.method == Method::Head;
    let v = &f.validators;
    let last_modified = httpdate::fmt_http_date(v.modified);
    match conditional::evaluate(req, v) {
        Outcome::Proceed => {}
        Outcome::NotModified => {
            shared.metrics.status(304);
            let mut h = Head::new(out, 304, &date());
            h.header("Last-Modified", &last_modified)
                .header("ETag", &v.etag);
            h.finish(None, keep_alive, req.minor);
            return t.write_all(out, false).await;
        }
        Outcome::PreconditionFailed => {
            return send_page(t, shared, out, 412, req.minor, keep_alive, !is_head, &[]).await;
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
                shared,
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
    shared.metrics.status(status);
    let mut h = Head::new(out, status, &date());
    h.header("Content-Type", f.content_type)
        .header("Last-Modified", &last_modified)
        .header("ETag", &v.etag)
        .header("Accept-Ranges", "bytes");
    if status == 206 {
        h.header(
            "Content-Range",
            &format!("bytes {start}-{}/{}", start + len - 1, f.size),
        );
    }
    h.finish(Some(len), keep_alive, req.minor);
    let body = !is_head && len > 0;
    shared.metrics.bytes(t.path(), out.len() as u64);
    t.write_all(out, body).await?;
    if body {
        t.send_file(&f.file, start, len).await?;
        shared.metrics.bytes(t.path(), len);
    }
    Ok(())
}
