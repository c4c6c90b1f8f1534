//! The static file service of a site with a `root` (beside `proxy`, the
//! service of a site with a `backend`): one HTTP/1.1 session per TLS
//! connection, with
//! keep-alive and pipelining, the request-phase timeouts, and the response
//! to each request (files with ranges and preconditions, redirects,
//! listings, errors). Buffers exist only while a request is being read or
//! answered; file bodies go out through the transport's `send_file`
//! (`sendfile()` on kTLS). Each request's Host is checked against the
//! site the SNI chose (`route`: 421 for another site's name; without SNI,
//! the Host picks the static site).

use crate::config::settings::{Files, Site};
use crate::config::{secs, Limits, Timeouts};
use crate::files::{Charset, FileError, Lookup, OpenFile};
use crate::files::{DocRoot, RootError};
use crate::http::conditional::{self, Outcome};
use crate::http::encoding::Encoding;
use crate::http::path;
use crate::http::range::{self, RangeResult};
use crate::http::request::{self, Body, Expect, HeadLimits, Method, RequestHead};
use crate::http::response::{error_page, Reply, ServerHeader};
use crate::http::site_headers::SiteHeaders;
use crate::lograte::LogLimit;
use crate::server::sites::{SiteJob, SiteRt};
use crate::server::timer::timeout_at;
use crate::server::{ConnInfo, Front, Tls};
use crate::transport::{close_and_linger, Transport, TransportError};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
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

/// How long a keep-alive connection idle when draining begins may still
/// send its next request (answered with `Connection: close`).
const DRAIN_IDLE: Duration = Duration::from_secs(1);

/// The static file service of one site.
pub struct StaticFiles {
    root: DocRoot,
    cfg: FilesCfg,
    /// Warnings that a flood of requests could repeat.
    log: LogLimit,
}

/// What a session reads of its site's settings.
struct FilesCfg {
    limits: Limits,
    timeouts: Timeouts,
    /// Precompressed siblings to look for (none: only the files).
    precompressed: Vec<Encoding>,
    headers: SiteHeaders,
    fallback: Option<path::NormPath>,
    charset: Charset,
    /// The site's `Server` header (`server_tokens`).
    server: ServerHeader,
}

impl StaticFiles {
    /// The socket and the file being sent.
    pub const FDS_PER_CONNECTION: u64 = 2;

    /// Open the site's document root.
    pub fn new(site: &Site, files: &Files) -> Result<StaticFiles, RootError> {
        let root = DocRoot::open(&files.root, files.follow_symlinks_outside, files.autoindex)?;
        if let Some(problem) = files
            .fallback
            .as_ref()
            .and_then(|f| root.fallback_problem(f))
        {
            tracing::warn!("site {}: {problem}", site.label());
        }
        Ok(StaticFiles {
            root,
            cfg: FilesCfg {
                limits: site.limits.clone(),
                timeouts: site.timeouts.clone(),
                precompressed: files.precompressed.clone(),
                headers: files.headers.clone(),
                fallback: files.fallback.clone(),
                charset: Charset::new(files.charset.as_deref()),
                server: ServerHeader::from_tokens(files.server_tokens),
            },
            log: LogLimit::new(crate::lograte::EVERY),
        })
    }

    /// The directory the document root leads to now.
    pub fn root_path(&self) -> std::path::PathBuf {
        self.root.path()
    }

    /// Serve one connection. (Not an `async fn`: its arguments would be
    /// kept twice in the future, which every idle connection holds.)
    #[allow(clippy::manual_async_fn)]
    pub(crate) fn serve<'a>(
        &'a self,
        front: &'a Front,
        tls: Tls,
        info: ConnInfo,
        stop: watch::Receiver<bool>,
    ) -> impl std::future::Future<Output = ()> + Send + 'a {
        async move {
            let cx = Ctx {
                files: self,
                front,
                headers: AtomicUsize::new(0),
                site: &info.metrics,
                info: &info,
                sent: Sent::default(),
            };
            match tls {
                Tls::Kernel(k) => session(k, &cx, stop).await,
                Tls::User(u) => session(u, &cx, stop).await,
            }
        }
    }
}

/// What a session needs to see.
struct Ctx<'a> {
    files: &'a StaticFiles,
    front: &'a Front,
    /// Which of the site's header lists the response being written gets
    /// (`SiteHeaders::which`): its path's once the path is known, else the
    /// site's own. (A number, not a reference: a `Cell` would make the
    /// session's future unsendable.)
    headers: AtomicUsize,
    /// The site's counters.
    site: &'a crate::metrics::SiteMetrics,
    info: &'a ConnInfo,
    /// The status and body bytes of the response being sent, for the
    /// access log.
    sent: Sent,
}

/// A response's status and body bytes. Atomics, not a `Cell`, only so that
/// the session future stays `Send` (one thread uses them: relaxed stores
/// are plain stores).
#[derive(Default)]
struct Sent {
    status: std::sync::atomic::AtomicU16,
    body: std::sync::atomic::AtomicU64,
}

impl Sent {
    fn set(&self, (status, body): (u16, u64)) {
        use std::sync::atomic::Ordering::Relaxed;
        self.status.store(status, Relaxed);
        self.body.store(body, Relaxed);
    }

    fn get(&self) -> (u16, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.status.load(Relaxed), self.body.load(Relaxed))
    }
}

impl Ctx<'_> {
    /// Write the site's headers for this response into its head.
    fn site_headers(&self, h: &mut crate::http::response::Head<'_>) {
        let list = self.files.cfg.headers.list(self.headers.load(Relaxed));
        SiteHeaders::write(list, h);
    }

    /// Log the response just sent to the request whose raw head (as far
    /// as it was read) is `head`, which took `took`.
    fn log(&self, head: &[u8], took: Duration) {
        if let Some(log) = &self.info.log {
            let (request, user_agent, referer) = crate::accesslog::head_fields(head);
            let (status, body_bytes) = self.sent.get();
            log.http(&crate::accesslog::HttpRecord {
                info: self.info,
                request,
                user_agent,
                referer,
                status,
                body_bytes,
                duration: took,
            });
        }
    }
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
    cx.headers.store(0, Relaxed);
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
                    let _ = send_page(t, cx, &mut s.out, &mut reply, 408, &[]).await;
                    cx.log(&s.buf[..s.filled], started.elapsed());
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
            let sent = send_page(t, cx, &mut s.out, &mut reply, e.status(), &[]).await;
            cx.log(&s.buf[..s.filled], started.elapsed());
            return Some(match sent {
                Ok(()) => End::Close,
                Err(e) => End::Abort(e),
            });
        }
    };
    // The Host picks the site that answers, or refuses the request: see
    // `route`. Another site's context lives as long as the request.
    let mut misdirected = false;
    let mut elsewhere = None;
    match route(cx, head.host.as_deref()) {
        Route::Here => {}
        Route::Misdirected => misdirected = true,
        Route::There(site) => {
            let info = ConnInfo {
                site: site.label.clone(),
                metrics: site
                    .metrics
                    .get_or_init(|| cx.front.metrics.site(&site.label))
                    .clone(),
                log: site.access_log.clone(),
                ..cx.info.clone()
            };
            elsewhere = Some((site, info));
        }
    }
    let there;
    let cx = match &elsewhere {
        Some((site, info)) => match &site.job {
            SiteJob::Files(files) => {
                there = Ctx {
                    files,
                    front: cx.front,
                    headers: AtomicUsize::new(0),
                    site: &info.metrics,
                    info,
                    sent: Sent::default(),
                };
                &there
            }
            // `route` sends a request to static sites only.
            SiteJob::Proxy(_) => cx,
        },
        None => cx,
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
        Some((421, &[][..]))
    } else {
        refusal(&head, cfg.limits.body)
    };
    let result = match refused {
        Some((status, extra)) => {
            // Refused before its body is read (a client waiting for
            // `100 Continue` is answered at once); the body, unread,
            // leaves the stream out of step.
            if head.body != Body::None {
                reply.stream_unusable();
            }
            send_page(t, cx, &mut s.out, &mut reply, status, extra).await
        }
        None => {
            match head.body {
                Body::None => {}
                Body::Length(n) => {
                    match discard_body(t, &mut s.buf, &mut s.filled, n, head.expect, deadline).await
                    {
                        Ok(BodyRead::Done) => {}
                        Ok(BodyRead::Closed) => return Some(End::Close),
                        Ok(BodyRead::TimedOut) => {
                            let mut reply =
                                Reply::closing(head.method == Method::Head, cx.files.cfg.server);
                            let _ = send_page(t, cx, &mut s.out, &mut reply, 408, &[]).await;
                            cx.log(&s.logged, started.elapsed());
                            return Some(End::Close);
                        }
                        Err(e) => return Some(End::Abort(e)),
                    }
                }
                // Chunked bodies are not read: answer, then close.
                Body::Chunked => reply.stream_unusable(),
            }
            respond(t, cx, &head, &mut reply, &mut s.out).await
        }
    };
    // Logged sent or not: a response cut short is logged with the body
    // bytes known to be sent (0).
    // One duration for the log and the metrics, nginx's
    // `$request_time`: from the request's first byte read to its
    // response sent (a file's body included). One clock read here and
    // one at the start: a clock read is most of what timing costs.
    let took = started.elapsed();
    cx.log(&s.logged, took);
    if let Err(e) = result {
        return Some(End::Abort(e));
    }
    cx.site.request_done(took.as_secs_f64());
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

/// Which site answers a request.
enum Route {
    /// The connection's own.
    Here,
    /// Another static site: the connection came without SNI, and its Host
    /// names that site.
    There(Arc<SiteRt>),
    /// `421 Misdirected Request` (RFC 9110 §15.5.20).
    Misdirected,
}

/// Which site answers a request for `host`, Caddy's `strict_sni_host`
/// with nginx's routing of clients without SNI:
/// - a Host that is none of the configured names (an IP address, an
///   unknown name), or none at all (HTTP/1.0): the connection's site, as
///   the SNI (or its absence) chose it;
/// - a Host that picks the connection's own site (any of its names, exact
///   or by its wildcard): that site;
/// - a Host that picks another site, on a connection with SNI: 421. The
///   client reached the certificate and settings of the SNI's site, and
///   another site's files must not be served under them; the client may
///   retry on a new connection with the right SNI.
/// - a Host that picks another site, on a connection without SNI (an IP
///   URL, a health check): that site, when it serves files; a backend
///   cannot take over a connection begun here, so 421.
///
/// Names are looked up in the sites as they are now (a reload may have
/// changed them); a site is the connection's own when it has the same
/// label (its first name, unique).
fn route(cx: &Ctx<'_>, host: Option<&str>) -> Route {
    let Some(host) = host else {
        return Route::Here;
    };
    let sni = cx.info.sni.as_deref();
    // The common case, without a look-up: the Host is the SNI.
    if sni.is_some_and(|n| n.strip_suffix('.').unwrap_or(n) == host) {
        return Route::Here;
    }
    let sites = cx.front.sites.load();
    let Some(site) = sites.named(host) else {
        return Route::Here;
    };
    if site.label == cx.info.site {
        return Route::Here;
    }
    match (&site.job, sni) {
        (SiteJob::Files(_), None) => Route::There(site.clone()),
        _ => Route::Misdirected,
    }
}

/// A request refused whatever its target, so before its body is read: an
/// expectation we cannot meet (417), a method we do not serve (405), a body
/// over the limit (413).
fn refusal(
    head: &RequestHead,
    body_limit: u64,
) -> Option<(u16, &'static [(&'static str, &'static str)])> {
    if head.expect == Expect::Unsupported {
        Some((417, &[]))
    } else if head.method == Method::Other {
        Some((405, &[("Allow", "GET, HEAD")]))
    } else if matches!(head.body, Body::Length(n) if n > body_limit) {
        Some((413, &[]))
    } else {
        None
    }
}

/// A small HTML page (errors, redirects) with optional extra headers.
async fn send_page<T: Transport>(
    t: &mut T,
    cx: &Ctx<'_>,
    out: &mut Vec<u8>,
    reply: &mut Reply,
    status: u16,
    extra: &[(&str, &str)],
) -> Result<(), TransportError> {
    cx.site.status(status);
    let body = error_page(status);
    let mut h = reply.start(out, status);
    cx.site_headers(&mut h);
    h.header("Content-Type", "text/html; charset=utf-8");
    for (k, v) in extra {
        h.header(k, v);
    }
    h.finish(Some(body.len() as u64));
    cx.sent.set((status, 0));
    if reply.with_body() {
        out.extend_from_slice(body.as_bytes());
        cx.sent.set((status, body.len() as u64));
    }
    cx.site.bytes(t.path(), out.len() as u64);
    t.write_all(out, false).await
}

async fn respond<T: Transport>(
    t: &mut T,
    cx: &Ctx<'_>,
    req: &RequestHead,
    reply: &mut Reply,
    out: &mut Vec<u8>,
) -> Result<(), TransportError> {
    let norm = match path::normalize(&req.target) {
        Ok(p) => p,
        Err(e) => {
            tracing::debug!("refused path {:?}: {e}", req.target);
            return send_page(t, cx, out, reply, 400, &[]).await;
        }
    };
    cx.headers
        .store(cx.files.cfg.headers.which(Some(&norm)), Relaxed);
    match lookup(cx, req, &norm) {
        Err(e) => {
            if let FileError::Io(err) = &e {
                tracing::warn!("cannot open {:?}: {err}", req.target);
            }
            send_page(t, cx, out, reply, e.status(), &[]).await
        }
        Ok(Lookup::Redirect(mut url)) => {
            // The query goes along, as nginx does.
            if let Some(q) = path::query(&req.target) {
                url.push('?');
                url.push_str(q);
            }
            send_page(t, cx, out, reply, 301, &[("Location", &url)]).await
        }
        Ok(Lookup::Listing(html)) => {
            cx.site.status(200);
            let mut h = reply.start(out, 200);
            cx.site_headers(&mut h);
            h.header("Content-Type", "text/html; charset=utf-8");
            h.finish(Some(html.len() as u64));
            cx.sent.set((200, 0));
            if reply.with_body() {
                out.extend_from_slice(html.as_bytes());
                cx.sent.set((200, html.len() as u64));
            }
            cx.site.bytes(t.path(), out.len() as u64);
            t.write_all(out, false).await
        }
        Ok(Lookup::File(f)) => send_file(t, cx, req, reply, out, f, &norm).await,
    }
}

/// The file for a request: as `DocRoot::lookup`, with the site's
/// precompressed siblings, and its `fallback` for a path that is not there.
fn lookup(cx: &Ctx<'_>, req: &RequestHead, norm: &path::NormPath) -> Result<Lookup, FileError> {
    let cfg = &cx.files.cfg;
    let accept = req.accept_encoding.as_deref();
    // One look at the root for both: a request never mixes two releases.
    let (found, fell_back) =
        cx.files
            .root
            .lookup_or(norm, cfg.fallback.as_ref(), accept, &cfg.precompressed)?;
    if let (true, Some(fb)) = (fell_back, &cfg.fallback) {
        // Headers follow the file sent: a missing `/assets/x.js` answered
        // with `/index.html` must not get the assets' `immutable`.
        cx.headers.store(cfg.headers.which(Some(fb)), Relaxed);
    }
    Ok(found)
}

/// Bodies up to this size are read into the head's buffer and written with
/// it; larger ones go out with the transport's `send_file`. Where the two
/// cost the same: the write saves the splice's fixed cost but copies the
/// body twice (into our buffer, then into the record), and in the kTLS
/// guest's instruction counts that breaks even near 2 KiB on both kernels
/// (docs/BENCHMARKS.md).
const SMALL_BODY: u64 = 2048;

/// Warn (rate-limited) that the file being sent shrank; the error.
fn shrank(cx: &Ctx<'_>, norm: &path::NormPath) -> TransportError {
    if let Some(left_out) = cx.files.log.allow("file_shrank") {
        tracing::warn!(
            "{} shrank while being sent; the response was cut short{left_out}",
            cx.files.root.path().join(norm.to_relative()).display()
        );
    }
    TransportError::FileShrank
}

async fn send_file<T: Transport>(
    t: &mut T,
    cx: &Ctx<'_>,
    req: &RequestHead,
    reply: &mut Reply,
    out: &mut Vec<u8>,
    f: OpenFile,
    norm: &path::NormPath,
) -> Result<(), TransportError> {
    let v = &f.validators;
    match conditional::evaluate(req, v) {
        Outcome::Proceed => {}
        Outcome::NotModified => {
            cx.site.status(304);
            let mut h = reply.start(out, 304);
            cx.site_headers(&mut h);
            h.header_date("Last-Modified", v.modified)
                .header("ETag", v.etag.as_str());
            if !cx.files.cfg.precompressed.is_empty() {
                h.header("Vary", "Accept-Encoding");
            }
            h.finish(None);
            cx.sent.set((304, 0));
            return t.write_all(out, false).await;
        }
        Outcome::PreconditionFailed => {
            return send_page(t, cx, out, reply, 412, &[]).await;
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
            return send_page(t, cx, out, reply, 416, &[("Content-Range", &cr)]).await;
        }
    };
    cx.site.status(status);
    let mut h = reply.start(out, status);
    cx.site_headers(&mut h);
    h.header("Content-Type", cx.files.cfg.charset.apply(f.content_type))
        .header_date("Last-Modified", v.modified)
        .header("ETag", v.etag.as_str())
        .header("Accept-Ranges", "bytes");
    if let Some(enc) = f.encoding {
        h.header("Content-Encoding", enc.name());
    }
    if !cx.files.cfg.precompressed.is_empty() {
        // On the identity too (nginx's gzip_vary): caches must key on it.
        h.header("Vary", "Accept-Encoding");
    }
    if status == 206 {
        h.header(
            "Content-Range",
            &format!("bytes {start}-{}/{}", start + len - 1, f.size),
        );
    }
    h.finish(Some(len));
    cx.sent.set((status, 0));
    let body = reply.with_body() && len > 0;
    if body && len <= SMALL_BODY {
        // A small body goes out with the head, in one write: the kernel
        // encrypts it from our buffer instead of splicing the file's pages
        // into the record after a write of the head alone.
        let head = out.len();
        out.resize(head + len as usize, 0);
        let read = std::os::unix::fs::FileExt::read_exact_at(&*f.file, &mut out[head..], start);
        if let Err(e) = read {
            out.truncate(head);
            return Err(match e.kind() {
                std::io::ErrorKind::UnexpectedEof => shrank(cx, norm),
                _ => TransportError::Io(e),
            });
        }
        t.write_all(out, false).await?;
        cx.site.bytes(t.path(), out.len() as u64);
        cx.sent.set((status, len));
        return Ok(());
    }
    cx.site.bytes(t.path(), out.len() as u64);
    t.write_all(out, body).await?;
    if body {
        if let Err(e) = t.send_file(&f.file, start, len).await {
            if matches!(e, TransportError::FileShrank) {
                return Err(shrank(cx, norm));
            }
            return Err(e);
        }
        cx.site.bytes(t.path(), len);
        cx.sent.set((status, len));
    }
    Ok(())
}
