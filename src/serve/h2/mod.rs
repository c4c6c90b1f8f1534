//! HTTP/2 framing of the static file service (RFC 9113): one session per
//! connection that reads while it writes, so that WINDOW_UPDATE, RST_STREAM
//! and PING are seen while files stream. The connection's state is
//! [`conn::Conn`] (no I/O); this file drives it over the transport, answers
//! each request through the same handler as HTTP/1.1, writes the handler's
//! plan as HPACK fields and DATA frames, and accounts each response once it
//! is written.
//!
//! On kTLS a DATA frame whose payload comes from a file leaves as one
//! record: its 9-byte header goes with `MSG_MORE` (after whatever else the
//! write holds), then `sendfile()` of a payload sized to fill the record.
//! A run of such frames goes under `TCP_CORK` (`ktls::stream`), which the
//! empty `write_now` before each wait takes off.

mod conn;
pub(super) use conn::FILE_STREAMS;
mod request;

use super::handler::{self, Route};
use super::model::{Body, Response, Value};
use super::{Ctx, Elsewhere, Tally};
use crate::config::secs;
use crate::http::h2::frame::ErrorCode;
use crate::http::h2::hpack::Encoder;
use crate::http::path::NormPath;
use crate::http::request::Method;
use crate::http::response::with_dates;
use crate::server::timer::timeout_at;
use crate::transport::{close_and_linger, Transport, TransportError};
use conn::{Answer, Conn, FilePart, Respond};
use request::Head;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// How long to keep reading after our close_notify.
const LINGER: Duration = Duration::from_secs(2);
/// How long a connection with nothing in flight keeps its buffers.
const IDLE_GRACE: Duration = Duration::from_millis(50);
/// How long a drain waits for the ACK of its PING before the last GOAWAY.
const DRAIN_ACK: Duration = Duration::from_secs(1);
/// Streams a client may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS,
/// the peers' default).
const MAX_STREAMS: u32 = 100;
/// The receive buffer: one whole frame of the largest size we allow.
const IN_BUF: usize = conn::RECORD + crate::http::h2::frame::HEADER_LEN;

/// What a response's accounting needs once it is written.
struct Acct {
    started: Instant,
    /// A request line and the logged fields, in HTTP/1.1's form (only
    /// when the site keeps an access log).
    logged: Vec<u8>,
    /// The site that answered, when not the connection's own.
    elsewhere: Option<Box<Elsewhere>>,
    path: Option<NormPath>,
}

/// Answers a connection's requests.
struct Site<'c, 'a> {
    cx: &'c Ctx<'a>,
}

impl Respond for Site<'_, '_> {
    type Acct = Acct;

    fn respond(&mut self, head: &Head, status: Option<u16>) -> Answer<Acct> {
        let started = Instant::now();
        let cx = self.cx;
        let req = head.request();
        // The authority picks the site that answers, as Host does for
        // HTTP/1.1 (a browser reuses a connection for every name its
        // certificate covers, RFC 9113 §9.1.1).
        let (misdirected, elsewhere) = match cx.route(req.authority) {
            Route::Here => (false, None),
            Route::Misdirected => (true, None),
            Route::There(site) => (false, Some(Box::new(cx.elsewhere(site)))),
        };
        let there = elsewhere.as_ref().and_then(|e| e.ctx(cx.front));
        let acx = there.as_ref().unwrap_or(cx);
        let files = &acx.files.handler;
        let resp = match status {
            Some(s) => handler::page(files, 0, s, Vec::new()),
            None if misdirected => handler::page(files, 0, 421, Vec::new()),
            None if *req.method == Method::Other => {
                handler::page(files, 0, 405, vec![("Allow", Value::Text("GET, HEAD"))])
            }
            None => handler::handle(files, &req.verified(acx.info.client_cert.verified())),
        };
        let mut block = Vec::with_capacity(128);
        encode_head(&mut block, &resp, acx.files.cfg.server.value());
        let logged = if acx.info.log.is_some() {
            log_head(head)
        } else {
            Vec::new()
        };
        let Response {
            status, body, path, ..
        } = resp;
        let body = if *req.method == Method::Head {
            Body::Empty
        } else {
            body
        };
        Answer {
            status,
            block,
            body,
            acct: Acct {
                started,
                logged,
                elsewhere,
                path,
            },
        }
    }
}

/// The response's fields as HPACK: `:status`, `server`, `date`, the plan's
/// headers, `content-length`. Names are lower-case on HTTP/2 (§8.2), and
/// the connection-specific fields HTTP/1.1 may carry are left out (§8.2.2:
/// a client treats a response with them as malformed).
fn encode_head(out: &mut Vec<u8>, resp: &Response<'_>, server: &str) {
    Encoder::status(out, resp.status);
    Encoder::field(out, b"server", server.as_bytes());
    with_dates(|d| {
        Encoder::field(out, b"date", d.now().as_bytes());
        let mut name = [0u8; 64];
        for (n, v) in &resp.headers {
            let lower: &[u8] = if n.len() <= name.len() {
                let l = &mut name[..n.len()];
                l.copy_from_slice(n.as_bytes());
                l.make_ascii_lowercase();
                l
            } else {
                continue;
            };
            if matches!(
                lower,
                b"connection"
                    | b"keep-alive"
                    | b"proxy-connection"
                    | b"transfer-encoding"
                    | b"upgrade"
            ) {
                continue;
            }
            match v {
                Value::Date(t) => Encoder::field(out, lower, d.date(*t).as_bytes()),
                v => Encoder::field(out, lower, v.as_text().unwrap_or("").as_bytes()),
            }
        }
    });
    if let Some(n) = resp.body.content_length() {
        Encoder::field(
            out,
            b"content-length",
            itoa::Buffer::new().format(n).as_bytes(),
        );
    }
}

/// The request as the access log reads it: an HTTP/1.1-style head with
/// `HTTP/2.0` as its version, as nginx logs `$request`.
fn log_head(head: &Head) -> Vec<u8> {
    let mut v = Vec::with_capacity(64 + head.path.len());
    v.extend_from_slice(head.method_text.as_bytes());
    v.push(b' ');
    v.extend_from_slice(head.path.as_bytes());
    v.extend_from_slice(b" HTTP/2.0\r\n");
    for (name, value) in [("User-Agent", &head.user_agent), ("Referer", &head.referer)] {
        if let Some(value) = value {
            v.extend_from_slice(name.as_bytes());
            v.extend_from_slice(b": ");
            v.extend_from_slice(value.as_bytes());
            v.extend_from_slice(b"\r\n");
        }
    }
    v.extend_from_slice(b"\r\n");
    v
}

/// The write in progress: bytes, then a file payload that must follow
/// them before anything else (a DATA frame's header promised it).
#[derive(Default)]
struct Write {
    buf: Vec<u8>,
    pos: usize,
    file: Option<FilePart>,
}

impl Write {
    fn is_empty(&self) -> bool {
        self.pos == self.buf.len() && self.file.is_none()
    }
}

/// How a session ended.
enum End {
    Close,
    Abort(TransportError),
}

pub(super) async fn session<T: Transport>(mut t: T, cx: &Ctx<'_>, stop: watch::Receiver<bool>) {
    cx.front.metrics.http2("connection", 1);
    let end = Box::pin(serve(&mut t, cx, stop)).await;
    match end {
        End::Close => Box::pin(close_and_linger(&mut t, LINGER)).await,
        End::Abort(e) => {
            cx.front.metrics.error(e.kind());
            tracing::debug!("HTTP/2 connection ended: {e}");
        }
    }
}

async fn serve<T: Transport>(t: &mut T, cx: &Ctx<'_>, stop: watch::Receiver<bool>) -> End {
    let cfg = &cx.files.cfg;
    let mut conn: Conn<Acct> = Conn::new(conn::Limits {
        max_streams: MAX_STREAMS,
        header_list: cfg.limits.header_bytes,
        requests: cfg.limits.keepalive_requests,
    });
    let end = drive(t, cx, &mut conn, stop).await;
    account(cx, &mut conn, t.path());
    let m = &cx.front.metrics;
    let c = conn.counts;
    for (event, n) in [
        ("stream_refused", c.refused),
        ("client_reset", c.client_resets),
        ("stream_error", c.stream_errors),
    ] {
        m.http2(event, n);
    }
    if let Some(conn::Close::Error(code, why)) = conn.closing() {
        let event = match code {
            ErrorCode::NoError if why == "idle" => Some("idle_timeout"),
            ErrorCode::NoError => None,
            ErrorCode::FlowControlError => Some("flow_control_error"),
            ErrorCode::CompressionError => Some("compression_error"),
            ErrorCode::EnhanceYourCalm => Some("enhance_your_calm"),
            _ => Some("protocol_error"),
        };
        if let Some(event) = event {
            m.http2(event, 1);
        }
        if code != ErrorCode::NoError {
            tracing::debug!("HTTP/2 connection error {}: {why}", code.name());
        }
    }
    end
}

async fn drive<T: Transport>(
    t: &mut T,
    cx: &Ctx<'_>,
    conn: &mut Conn<Acct>,
    mut stop: watch::Receiver<bool>,
) -> End {
    let cfg = &cx.files.cfg;
    let header_timeout = secs(cfg.timeouts.request_header);
    let keepalive = secs(cfg.timeouts.keepalive);
    let send_timeout = secs(cfg.timeouts.send);
    let mut site = Site { cx };
    let mut inbuf: Vec<u8> = Vec::new();
    let mut filled = 0;
    let mut w = Write::default();
    let mut peer_closed = false;
    let mut stopping = false;
    let mut drain_at: Option<Instant> = None;
    let mut released = false;
    let mut last_read = Instant::now();
    let mut last_write = Instant::now();
    let path = t.path();
    loop {
        // Read what has come, while the connection takes input.
        while conn.wants_input() && !peer_closed {
            if inbuf.is_empty() {
                if released {
                    // Idle with its buffers let go: none until the socket
                    // says there is input.
                    break;
                }
                inbuf = vec![0; IN_BUF];
            } else if filled == inbuf.len() {
                // Whole frames are taken as they come: a full buffer
                // waits for output to drain.
                break;
            }
            match t.read_now(&mut inbuf[filled..]).await {
                Ok(None) => break,
                Ok(Some(0)) => peer_closed = true,
                Ok(Some(n)) => {
                    filled += n;
                    last_read = Instant::now();
                }
                Err(e) => return End::Abort(e),
            }
            let used = conn.recv(&inbuf[..filled], &mut site);
            inbuf.copy_within(used..filled, 0);
            filled -= used;
            // A client that sends without pause (a flood of frames that
            // need no answer) must not keep the worker's other connections
            // waiting: they get their turn now and then.
            tokio::task::coop::consume_budget().await;
        }
        // Write what can go.
        let mut want_write = false;
        loop {
            if w.is_empty() {
                account(cx, conn, path);
                if !conn.has_output() {
                    break;
                }
                w.buf.clear();
                w.pos = 0;
                match conn.fill(&mut w.buf, &mut site) {
                    Ok(f) => w.file = f,
                    Err((stream, e)) => {
                        let e = match e.kind() {
                            std::io::ErrorKind::UnexpectedEof => TransportError::FileShrank,
                            _ => TransportError::Io(e),
                        };
                        return shrank(cx, conn, stream, e);
                    }
                }
            }
            match write_some(t, &mut w).await {
                Ok(true) => last_write = Instant::now(),
                Ok(false) => {
                    want_write = true;
                    break;
                }
                Err(e) => {
                    let stream = w.file.as_ref().map_or(0, |f| f.stream);
                    return shrank(cx, conn, stream, e);
                }
            }
        }
        if w.is_empty() && t.pending() {
            match t.write_now(&[], false).await {
                Ok(_) => want_write = t.pending(),
                Err(e) => return End::Abort(e),
            }
        }
        if w.is_empty() {
            w.buf = Vec::new();
            w.pos = 0;
        }
        let flushed = w.is_empty() && !t.pending();
        if flushed && conn.done() {
            return End::Close;
        }
        if peer_closed && flushed {
            return End::Close;
        }
        // Wait for the socket, a timer, or the signal to drain.
        let now = Instant::now();
        let deadline = if want_write || conn.blocked() {
            last_write.max(last_read) + send_timeout
        } else if conn.open_streams() == 0 {
            last_read
                + if conn.counts.streams == 0 {
                    header_timeout
                } else {
                    keepalive
                }
        } else {
            now + keepalive
        };
        let deadline = drain_at.map_or(deadline, |d| d.min(deadline));
        // A connection with nothing in flight keeps its buffers for a
        // moment (the next request usually follows at once), then holds
        // none while it idles.
        let idle = filled == 0 && conn.open_streams() == 0 && !want_write;
        let grace = idle && !released;
        let wake = if grace {
            deadline.min(Instant::now() + IDLE_GRACE)
        } else {
            deadline
        };
        let read = conn.wants_input() && !peer_closed;
        let wait = timeout_at(wake, async {
            tokio::select! {
                r = t.ready(read, want_write) => r.map(|()| false),
                _ = stop.changed(), if !stopping => Ok(true),
            }
        })
        .await;
        match wait {
            Ok(Ok(false)) => released = false,
            Ok(Ok(true)) => {
                stopping = true;
                conn.drain();
                drain_at = Some(Instant::now() + DRAIN_ACK);
            }
            Ok(Err(e)) => return End::Abort(e),
            Err(_) if grace && wake < deadline => {
                inbuf = Vec::new();
                t.release_buffers();
                released = true;
                continue;
            }
            Err(_) => {
                if drain_at.is_some_and(|d| Instant::now() >= d) {
                    drain_at = None;
                    conn.finish_drain();
                } else if want_write || conn.blocked() {
                    return End::Abort(TransportError::SendTimeout(send_timeout));
                } else {
                    conn.idle_close();
                }
            }
        }
    }
}

/// The connection ends on `e`; a file that shrank under stream `stream`
/// is named in a warning by the site that answered it.
fn shrank(cx: &Ctx<'_>, conn: &Conn<Acct>, stream: u32, e: TransportError) -> End {
    if matches!(e, TransportError::FileShrank) {
        if let Some(acct) = conn.acct(stream) {
            let there = acct.elsewhere.as_ref().and_then(|e| e.ctx(cx.front));
            let acx = there.as_ref().unwrap_or(cx);
            acx.files.handler.shrank(acct.path.as_ref());
        }
    }
    End::Abort(e)
}

/// Go on with the write in progress: `Ok(true)` when it made progress,
/// `Ok(false)` when the socket takes nothing now.
async fn write_some<T: Transport>(t: &mut T, w: &mut Write) -> Result<bool, TransportError> {
    let mut progress = false;
    while w.pos < w.buf.len() {
        let more = w.file.is_some();
        let n = t.write_now(&w.buf[w.pos..], more).await?;
        if n == 0 {
            return Ok(progress);
        }
        w.pos += n;
        progress = true;
    }
    while let Some(f) = &mut w.file {
        let n = t.send_file_now(&f.file, f.off, f.len).await? as u64;
        if n == 0 {
            return Ok(progress);
        }
        progress = true;
        f.off += n;
        f.len -= n;
        if f.len == 0 {
            w.file = None;
        }
    }
    Ok(true)
}

/// Count and log the responses written (or abandoned).
fn account(cx: &Ctx<'_>, conn: &mut Conn<Acct>, path: crate::transport::Path) {
    for f in conn.take_finished() {
        let acct = f.acct;
        let there = acct.elsewhere.as_ref().and_then(|e| e.ctx(cx.front));
        let acx = there.as_ref().unwrap_or(cx);
        let tally = Tally {
            path,
            wire: f.wire,
            body: f.body,
            http2: true,
        };
        acx.account(
            f.status,
            &tally,
            &acct.logged,
            acct.started.elapsed(),
            f.complete,
        );
    }
}
