//! HTTP/1.1 framing of the static file service: one session per
//! connection (keep-alive and pipelining, the request-phase timeouts,
//! `Expect: 100-continue`, bodies read and dropped), each request head
//! parsed into a [`Request`] for the handler, and the handler's
//! [`Response`] written as a status line and header block, then the page
//! bytes or the transport's `send_file` for a file range. What each
//! response put on the wire goes to the service's accounting.

use super::handler::{self, Route};
use super::model::{Body, Request, Response, Value};
use super::{Ctx, Tally};
use crate::config::secs;
use crate::http::request::{self, Body as ReqBody, Expect, HeadLimits, Method, RequestHead};
use crate::http::response::Reply;
use crate::server::timer::timeout_at;
use crate::transport::{close_and_linger, Transport, TransportError};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// How long to keep reading after our close_notify so the client's unread
/// data does not turn our close into a reset.
const LINGER: Duration = Duration::from_secs(2);

/// How long a connection between requests keeps its buffers before it
/// counts as idle and drops them.
const IDLE_GRACE: Duration = Duration::from_millis(50);

/// How long a keep-alive connection idle when draining begins may still
/// send its next request (answered with `Connection: close`).
const DRAIN_IDLE: Duration = Duration::from_secs(1);

/// How a session ended.
enum End {
    /// Close normally: close_notify, then linger.
    Close,
    /// The transport broke (or must not be read again): no linger.
    Abort(TransportError),
}

pub(super) async fn session<T: Transport>(mut t: T, cx: &Ctx<'_>, mut stop: watch::Receiver<bool>) {
    let end = serve(&mut t, cx, &mut stop).await;
    match end {
        // Boxed: the close's futures are large and needed once, and a
        // connection's task keeps room for the largest of its phases.
        End::Close => Box::pin(close_and_linger(&mut t, LINGER)).await,
        End::Abort(e) => {
            cx.front.metrics.error(e.kind());
            tracing::debug!("connection ended: {e}");
            if matches!(e, TransportError::KeyUpdateUnsupported) {
                // Our sending key is still valid: say goodbye properly, but
                // read nothing more (it is under a key we cannot install).
                let _ = Box::pin(t.close()).await;
            }
        }
    }
}

async fn serve<T: Transport>(t: &mut T, cx: &Ctx<'_>, stop: &mut watch::Receiver<bool>) -> End {
    let cfg = &cx.files.cfg;
    let mut s = Session {
        limits: HeadLimits {
            request_line: cfg.limits.request_line,
            header_bytes: cfg.limits.header_bytes,
            headers: cfg.limits.headers,
        },
        header_timeout: secs(cfg.timeouts.request_header),
        keepalive: secs(cfg.timeouts.keepalive),
        buf: Vec::new(),
        filled: 0,
        served: 0,
        out: Vec::new(),
        logged: Vec::new(),
    };
    loop {
        if s.filled == 0 {
            if let Some(end) = next_request(t, &mut s, stop).await {
                return end;
            }
        }
        // A request's future is boxed: the task of an idle connection keeps
        // no room for reading and answering one, only the small wait above.
        if let Some(end) = Box::pin(request(t, cx, &mut s, stop)).await {
            return end;
        }
    }
}

/// What a session keeps from one request to the next.
struct Session {
    limits: HeadLimits,
    header_timeout: Duration,
    keepalive: Duration,
    /// The bytes read and not yet parsed: `buf[..filled]`.
    buf: Vec<u8>,
    filled: usize,
    /// Requests answered.
    served: u64,
    /// The response head being written.
    out: Vec<u8>,
    /// The head of the request being answered, kept for the access log.
    logged: Vec<u8>,
}

/// Wait for the next request. Back-to-back requests keep their buffers; a
/// connection idle beyond a moment holds none. `Some`: the session ends.
async fn next_request<T: Transport>(
    t: &mut T,
    s: &mut Session,
    stop: &mut watch::Receiver<bool>,
) -> Option<End> {
    // Draining (SIGTERM, or an upgrade) ends a keep-alive
    // connection between requests, but not at once: a client in the
    // middle of a conversation sends its next request right away,
    // and closing under it would fail that request (clients may
    // retry, RFC 9112 9.3.1, but not every one does). So an idle
    // connection gets DRAIN_IDLE more for its next request, which
    // is answered with `Connection: close`. A connection's first
    // request is always answered, within the header timeout: that
    // client reached this process just now.
    let drain_closes = s.served > 0;
    let mut draining = drain_closes && *stop.borrow();
    let idle = if s.served == 0 {
        s.header_timeout
    } else {
        s.keepalive
    };
    let start = Instant::now();
    let mut deadline = start + if draining { DRAIN_IDLE.min(idle) } else { idle };
    let mut released = false;
    loop {
        let wake = if released {
            deadline
        } else {
            (start + IDLE_GRACE).min(deadline)
        };
        tokio::select! {
            r = timeout_at(wake, t.readable()) => match r {
                Ok(Err(e)) => return Some(End::Abort(e)),
                Ok(Ok(())) => return None,
                Err(_) if wake >= deadline => return Some(End::Close),
                Err(_) => {}
            },
            _ = stop.changed(), if drain_closes && !draining => {
                draining = true;
                deadline = deadline.min(Instant::now() + DRAIN_IDLE);
                continue;
            }
        }
        // Idle beyond a moment: hold no buffers.
        s.buf = Vec::new();
        s.out = Vec::new();
        s.logged = Vec::new();
        t.release_buffers();
        released = true;
    }
}

/// Read one request head and answer it. `Some`: the session ends.
async fn request<T: Transport>(
    t: &mut T,
    cx: &Ctx<'_>,
    s: &mut Session,
    stop: &watch::Receiver<bool>,
) -> Option<End> {
    // The head is read under the connection's site's limits; what follows,
    // under those of the site that answers.
    let (limits, header_timeout) = (s.limits, s.header_timeout);
    let mut tally = Tally::new(t.path());
    // Read until a whole request head is buffered.
    let started = Instant::now();
    let deadline = started + header_timeout;
    let head = loop {
        if s.filled > 0 {
            match request::parse(&s.buf[..s.filled], &limits) {
                Ok(Some(h)) => break Ok(h),
                Ok(None) => {}
                Err(e) => break Err(e),
            }
        }
        if s.buf.len() == s.filled {
            let cap = (limits.header_bytes + 1).max(s.filled + 1);
            // Not `clamp`: that panics when `header_bytes` < 4 KiB.
            s.buf.resize((s.filled * 2).max(4096).min(cap), 0);
        }
        match timeout_at(deadline, t.read(&mut s.buf[s.filled..])).await {
            Err(_) => {
                if s.filled > 0 {
                    let mut reply = Reply::closing(
                        request::names_head(&s.buf[..s.filled]),
                        cx.files.cfg.server,
                    );
                    let resp = handler::page(&cx.files.handler, 0, 408, Vec::new());
                    let _ = send(t, &mut s.out, &mut reply, &resp, &mut tally).await;
                    cx.account(
                        resp.status,
                        &tally,
                        &s.buf[..s.filled],
                        started.elapsed(),
                        false,
                    );
                }
                return Some(End::Close);
            }
            Ok(Ok(0)) => return Some(End::Close),
            Ok(Ok(n)) => s.filled += n,
            Ok(Err(e)) => return Some(End::Abort(e)),
        }
    };
    let head = match head {
        Ok(h) => h,
        Err(e) => {
            tracing::debug!("bad request: {e}");
            let mut reply =
                Reply::closing(request::names_head(&s.buf[..s.filled]), cx.files.cfg.server);
            let resp = handler::page(&cx.files.handler, 0, e.status(), Vec::new());
            let sent = send(t, &mut s.out, &mut reply, &resp, &mut tally).await;
            cx.account(
                resp.status,
                &tally,
                &s.buf[..s.filled],
                started.elapsed(),
                false,
            );
            return Some(match sent {
                Ok(()) => End::Close,
                Err(e) => End::Abort(e),
            });
        }
    };
    // The Host picks the site that answers, or refuses the request: see
    // `handler::route`. Another site's context lives as long as the
    // request.
    let mut misdirected = false;
    let elsewhere;
    let there;
    let cx = match cx.route(head.host.as_deref()) {
        Route::Here => cx,
        Route::Misdirected => {
            misdirected = true;
            cx
        }
        Route::There(site) => {
            elsewhere = cx.elsewhere(site);
            match elsewhere.ctx(cx.front) {
                Some(c) => {
                    there = c;
                    &there
                }
                // `route` sends a request to static sites only.
                None => cx,
            }
        }
    };
    let cfg = &cx.files.cfg;
    if cx.info.log.is_some() {
        s.logged.clear();
        s.logged.extend_from_slice(&s.buf[..head.head_len]);
    }
    s.buf.copy_within(head.head_len..s.filled, 0);
    s.filled -= head.head_len;

    let mut reply = Reply::new(
        head.minor,
        head.method == Method::Head,
        head.keep_alive && s.served + 1 < cfg.limits.keepalive_requests && !*stop.borrow(),
        cfg.server,
    );
    let refused = if misdirected {
        Some((421, Vec::new()))
    } else {
        refusal(&head, cfg.limits.body)
    };
    let (resp, result) = match refused {
        Some((status, extra)) => {
            // Refused before its body is read (a client waiting for
            // `100 Continue` is answered at once); the body, unread,
            // leaves the stream out of step.
            if head.body != ReqBody::None {
                reply.stream_unusable();
            }
            let resp = handler::page(&cx.files.handler, 0, status, extra);
            let result = send(t, &mut s.out, &mut reply, &resp, &mut tally).await;
            (resp, result)
        }
        None => {
            match head.body {
                ReqBody::None => {}
                ReqBody::Length(n) => {
                    match discard_body(t, &mut s.buf, &mut s.filled, n, head.expect, deadline).await
                    {
                        Ok(BodyRead::Done) => {}
                        Ok(BodyRead::Closed) => return Some(End::Close),
                        Ok(BodyRead::TimedOut) => {
                            let mut reply =
                                Reply::closing(head.method == Method::Head, cx.files.cfg.server);
                            let resp = handler::page(&cx.files.handler, 0, 408, Vec::new());
                            let _ = send(t, &mut s.out, &mut reply, &resp, &mut tally).await;
                            cx.account(resp.status, &tally, &s.logged, started.elapsed(), false);
                            return Some(End::Close);
                        }
                        Err(e) => return Some(End::Abort(e)),
                    }
                }
                // Chunked bodies are not read: answer, then close.
                ReqBody::Chunked => reply.stream_unusable(),
            }
            let req = Request::from(&head).verified(cx.info.client_cert.verified());
            let resp = handler::handle(&cx.files.handler, &req);
            let result = send(t, &mut s.out, &mut reply, &resp, &mut tally).await;
            (resp, result)
        }
    };
    // Counted and logged sent or not: a response cut short is logged with
    // the body bytes known to be sent (0).
    // One duration for the log and the metrics, nginx's
    // `$request_time`: from the request's first byte read to its
    // response sent (a file's body included). One clock read here and
    // one at the start: a clock read is most of what timing costs.
    let took = started.elapsed();
    cx.account(resp.status, &tally, &s.logged, took, result.is_ok());
    if let Err(e) = result {
        if matches!(e, TransportError::FileShrank) {
            cx.files.handler.shrank(resp.path.as_ref());
        }
        return Some(End::Abort(e));
    }
    s.served += 1;
    if !reply.keep_alive() {
        return Some(End::Close);
    }
    None
}

/// How reading a request body ended.
enum BodyRead {
    Done,
    /// The client closed before sending all of it.
    Closed,
    /// The request's time ran out first.
    TimedOut,
}

/// Read and drop a body of `n` bytes: what is buffered (the bytes after it
/// move to the front of `buf`), then from the stream, after `100 Continue`
/// if the client waits for it and has not sent it all.
async fn discard_body<T: Transport>(
    t: &mut T,
    buf: &mut [u8],
    filled: &mut usize,
    n: u64,
    expect: Expect,
    deadline: Instant,
) -> Result<BodyRead, TransportError> {
    let in_buf = (n as usize).min(*filled);
    buf.copy_within(in_buf..*filled, 0);
    *filled -= in_buf;
    let mut left = n - in_buf as u64;
    if left > 0 && expect == Expect::Continue {
        t.write_all(CONTINUE, false).await?;
    }
    let mut scratch = vec![0u8; 4096];
    while left > 0 {
        let want = (left as usize).min(scratch.len());
        match timeout_at(deadline, t.read(&mut scratch[..want])).await {
            Ok(Ok(0)) => return Ok(BodyRead::Closed),
            Ok(Ok(k)) => left -= k as u64,
            Ok(Err(e)) => return Err(e),
            Err(_) => return Ok(BodyRead::TimedOut),
        }
    }
    Ok(BodyRead::Done)
}

/// The interim response to `Expect: 100-continue`.
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// Headers a refusal adds to its page.
type Extra = Vec<(&'static str, Value<'static>)>;

/// A request refused whatever its target, so before its body is read: an
/// expectation we cannot meet (417), a method we do not serve (405), a body
/// over the limit (413).
fn refusal(head: &RequestHead, body_limit: u64) -> Option<(u16, Extra)> {
    if head.expect == Expect::Unsupported {
        Some((417, Vec::new()))
    } else if head.method == Method::Other {
        Some((405, vec![("Allow", Value::Text("GET, HEAD"))]))
    } else if matches!(head.body, ReqBody::Length(n) if n > body_limit) {
        Some((413, Vec::new()))
    } else {
        None
    }
}

/// Bodies up to this size are read into the head's buffer and written with
/// it; larger ones go out with the transport's `send_file`. Where the two
/// cost the same: the write saves the splice's fixed cost but copies the
/// body twice (into our buffer, then into the record), and in the kTLS
/// guest's instruction counts that breaks even near 2 KiB on both kernels
/// (docs/BENCHMARKS.md).
const SMALL_BODY: u64 = 2048;

/// Write `resp` as the answer to the request `reply` frames: the head
/// (status line, `Server`, `Date`, the plan's headers, `Content-Length`
/// and `Connection`), then the page, or the file range by `send_file`
/// (small ones read into the head's buffer). `tally` gets what went out.
async fn send<T: Transport>(
    t: &mut T,
    out: &mut Vec<u8>,
    reply: &mut Reply,
    resp: &Response<'_>,
    tally: &mut Tally,
) -> Result<(), TransportError> {
    let mut h = reply.start(out, resp.status);
    for (name, value) in &resp.headers {
        match value {
            Value::Date(d) => h.header_date(name, *d),
            v => h.header(name, v.as_text().unwrap_or("")),
        };
    }
    h.finish(resp.body.content_length());
    let with_body = reply.with_body();
    match &resp.body {
        Body::Empty => {
            tally.wire = out.len() as u64;
            t.write_all(out, false).await
        }
        Body::Page(page) => {
            if with_body {
                out.extend_from_slice(page.as_bytes());
                tally.body = page.len() as u64;
            }
            tally.wire = out.len() as u64;
            t.write_all(out, false).await
        }
        Body::File(f) => {
            let (start, len) = (f.offset, f.len);
            let body = with_body && len > 0;
            if body && len <= SMALL_BODY {
                // A small body goes out with the head, in one write: the
                // kernel encrypts it from our buffer instead of splicing
                // the file's pages into the record after a write of the
                // head alone.
                let head = out.len();
                out.resize(head + len as usize, 0);
                let read =
                    std::os::unix::fs::FileExt::read_exact_at(&*f.file, &mut out[head..], start);
                if let Err(e) = read {
                    out.truncate(head);
                    return Err(match e.kind() {
                        std::io::ErrorKind::UnexpectedEof => TransportError::FileShrank,
                        _ => TransportError::Io(e),
                    });
                }
                t.write_all(out, false).await?;
                tally.wire = out.len() as u64;
                tally.body = len;
                return Ok(());
            }
            tally.wire = out.len() as u64;
            t.write_all(out, body).await?;
            if body {
                t.send_file(&f.file, start, len).await?;
                tally.wire += len;
                tally.body = len;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    //! The HTTP/1.1 writing of a plan, into a transport kept in memory.

    use super::*;
    use crate::http::response::ServerHeader;
    use crate::serve::model::FileRange;
    use crate::transport::Path;
    use std::sync::Arc;

    /// What was written, and how: `(more, bytes)` per write, file bodies
    /// as `(false, bytes)` read from the file.
    #[derive(Default)]
    struct Memory {
        writes: Vec<(bool, Vec<u8>)>,
        files: usize,
    }

    impl Transport for Memory {
        async fn read(&mut self, _: &mut [u8]) -> Result<usize, TransportError> {
            Ok(0)
        }
        async fn readable(&mut self) -> Result<(), TransportError> {
            Ok(())
        }
        async fn write_all(&mut self, data: &[u8], more: bool) -> Result<(), TransportError> {
            self.writes.push((more, data.to_vec()));
            Ok(())
        }
        async fn send_file(
            &mut self,
            file: &std::fs::File,
            offset: u64,
            len: u64,
        ) -> Result<(), TransportError> {
            let mut buf = vec![0; len as usize];
            std::os::unix::fs::FileExt::read_exact_at(file, &mut buf, offset)
                .map_err(|_| TransportError::FileShrank)?;
            self.files += 1;
            self.writes.push((false, buf));
            Ok(())
        }
        async fn close(&mut self) -> Result<(), TransportError> {
            Ok(())
        }
        async fn read_now(&mut self, _: &mut [u8]) -> Result<Option<usize>, TransportError> {
            Ok(Some(0))
        }
        async fn write_now(&mut self, _: &[u8], _: bool) -> Result<usize, TransportError> {
            unreachable!("HTTP/1.1 writes whole")
        }
        async fn send_file_now(
            &mut self,
            _: &std::fs::File,
            _: u64,
            _: u64,
        ) -> Result<usize, TransportError> {
            unreachable!("HTTP/1.1 writes whole")
        }
        fn pending(&self) -> bool {
            false
        }
        async fn ready(&mut self, _: bool, _: bool) -> Result<(), TransportError> {
            Ok(())
        }
        fn release_buffers(&mut self) {}
        fn path(&self) -> Path {
            Path::Userspace
        }
    }

    fn plan(file: &Arc<std::fs::File>, offset: u64, len: u64) -> Response<'static> {
        let mut r = Response::new(206);
        r.header("X-Site", Value::Text("yes"))
            .header("Content-Range", Value::Owned(format!("bytes {offset}-")));
        r.body = Body::File(FileRange {
            file: file.clone(),
            offset,
            len,
        });
        r
    }

    /// Write `resp` for a request of HTTP/1.`minor`; the writes, the tally.
    fn write(resp: &Response<'_>, head_only: bool, minor: u8) -> (Memory, Tally) {
        let mut t = Memory::default();
        let mut tally = Tally::new(Path::Userspace);
        let mut reply = Reply::new(minor, head_only, true, ServerHeader::NameOnly);
        let mut out = Vec::new();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(send(&mut t, &mut out, &mut reply, resp, &mut tally))
            .unwrap();
        (t, tally)
    }

    fn text(b: &[u8]) -> String {
        String::from_utf8_lossy(b).into_owned()
    }

    #[test]
    fn a_large_file_range_follows_its_head_by_send_file() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        std::fs::write(dir.path().join("f"), &data).unwrap();
        let file = Arc::new(std::fs::File::open(dir.path().join("f")).unwrap());
        let (t, tally) = write(&plan(&file, 100, 5000), false, 1);
        assert_eq!(t.files, 1);
        assert_eq!(t.writes.len(), 2);
        let (more, head) = &t.writes[0];
        let head = text(head);
        // The head says a body follows at once: it may share its record.
        assert!(more, "{head}");
        assert!(head.starts_with("HTTP/1.1 206 Partial Content\r\nServer: tlsfront\r\nDate: "));
        assert!(
            head.ends_with(
                "X-Site: yes\r\nContent-Range: bytes 100-\r\nContent-Length: 5000\r\n\r\n"
            ),
            "{head}"
        );
        assert_eq!(t.writes[1].1, &data[100..5100]);
        assert_eq!((tally.body, tally.wire), (5000, head.len() as u64 + 5000));
        // HEAD: the same head, no body.
        let (t, tally) = write(&plan(&file, 100, 5000), true, 1);
        assert_eq!((t.files, t.writes.len(), t.writes[0].0), (0, 1, false));
        assert!(text(&t.writes[0].1).contains("Content-Length: 5000\r\n"));
        assert_eq!(tally.body, 0);
    }

    #[test]
    fn a_small_file_range_goes_out_with_its_head_in_one_write() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"0123456789").unwrap();
        let file = Arc::new(std::fs::File::open(dir.path().join("f")).unwrap());
        let (t, tally) = write(&plan(&file, 2, 3), false, 0);
        assert_eq!((t.files, t.writes.len()), (0, 1));
        let all = text(&t.writes[0].1);
        // HTTP/1.0 kept open says so.
        assert!(
            all.ends_with("Content-Length: 3\r\nConnection: keep-alive\r\n\r\n234"),
            "{all}"
        );
        assert_eq!((tally.body, tally.wire), (3, all.len() as u64));
        // A file shorter than the plan: no padding, the error that says so.
        let mut t = Memory::default();
        let mut tally = Tally::new(Path::Userspace);
        let mut reply = Reply::new(1, false, true, ServerHeader::NameOnly);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let r = rt.block_on(send(
            &mut t,
            &mut Vec::new(),
            &mut reply,
            &plan(&file, 8, 5),
            &mut tally,
        ));
        assert!(matches!(r, Err(TransportError::FileShrank)), "{r:?}");
        assert!(t.writes.is_empty() && tally.wire == 0);
    }

    #[test]
    fn pages_state_their_length_and_a_304_none() {
        let mut page = Response::new(404);
        page.header("Content-Type", Value::Text("text/html"));
        page.body = Body::Page("<p>gone</p>".into());
        let (t, tally) = write(&page, false, 1);
        let all = text(&t.writes[0].1);
        assert!(all.starts_with("HTTP/1.1 404 Not Found\r\n"), "{all}");
        assert!(all.ends_with("Content-Type: text/html\r\nContent-Length: 11\r\n\r\n<p>gone</p>"));
        assert_eq!((tally.body, tally.wire), (11, all.len() as u64));
        let mut nm = Response::new(304);
        nm.header(
            "Last-Modified",
            Value::Date(std::time::SystemTime::UNIX_EPOCH),
        );
        let (t, tally) = write(&nm, false, 1);
        let all = text(&t.writes[0].1);
        assert!(
            all.ends_with("\r\nLast-Modified: Thu, 01 Jan 1970 00:00:00 GMT\r\n\r\n"),
            "{all}"
        );
        assert!(!all.contains("Content-Length"), "{all}");
        assert_eq!(tally.body, 0);
    }
}
