//! Response heads and the small built-in error pages. A head is written
//! straight into the connection's reusable buffer: no allocation per
//! response. Every head is started by a [`Reply`], the one place that
//! decides whether the connection stays open and whether a body follows.

use super::conditional::LAST_HTTP_DATE;
use std::cell::RefCell;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

pub const SERVER: &str = concat!("tlsfront/", env!("CARGO_PKG_VERSION"));

/// What follows the status line up to the `Date` value.
const AFTER_STATUS: &str = concat!(
    "\r\nServer: tlsfront/",
    env!("CARGO_PKG_VERSION"),
    "\r\nDate: "
);
/// The same with `server_tokens = false`: no version.
const AFTER_STATUS_NO_VERSION: &str = "\r\nServer: tlsfront\r\nDate: ";

/// What the `Server` header says: the answering site's `server_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerHeader {
    /// `tlsfront/VERSION` (`server_tokens = true`, the default).
    WithVersion,
    /// `tlsfront` (`server_tokens = false`).
    NameOnly,
}

impl ServerHeader {
    pub fn from_tokens(server_tokens: bool) -> ServerHeader {
        if server_tokens {
            ServerHeader::WithVersion
        } else {
            ServerHeader::NameOnly
        }
    }

    /// The header's value.
    pub fn value(self) -> &'static str {
        match self {
            ServerHeader::WithVersion => SERVER,
            ServerHeader::NameOnly => "tlsfront",
        }
    }

    /// What follows the status line up to the `Date` value.
    fn after_status(self) -> &'static [u8] {
        match self {
            ServerHeader::WithVersion => AFTER_STATUS.as_bytes(),
            ServerHeader::NameOnly => AFTER_STATUS_NO_VERSION.as_bytes(),
        }
    }
}

pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        206 => "Partial Content",
        301 => "Moved Permanently",
        304 => "Not Modified",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        412 => "Precondition Failed",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        413 => "Content Too Large",
        414 => "URI Too Long",
        416 => "Range Not Satisfiable",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// One HTTP date, formatted again only when its second changes.
#[derive(Default)]
struct OneDate {
    secs: Option<u64>,
    text: String,
}

impl OneDate {
    fn get(&mut self, t: SystemTime) -> &str {
        let secs = clamped_secs(t);
        if self.secs != Some(secs) {
            self.secs = Some(secs);
            self.text.clear();
            let t = SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
            let _ = write!(self.text, "{}", httpdate::HttpDate::from(t));
        }
        &self.text
    }
}

/// HTTP dates formatted at most once per value per worker: `Date` (this
/// second) and the last `Last-Modified` written (usually the same file's).
#[derive(Default)]
pub struct DateCache {
    now: OneDate,
    modified: OneDate,
}

impl DateCache {
    pub fn now(&mut self) -> &str {
        self.now.get(SystemTime::now())
    }

    /// `t` as an HTTP date, clamped to what one can say (1970 to 9999).
    pub fn date(&mut self, t: SystemTime) -> &str {
        self.modified.get(t)
    }
}

/// Whole seconds since 1970, within what an HTTP date can say (`httpdate`
/// panics outside it, and a clock or a file may well be outside it).
fn clamped_secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
        .min(LAST_HTTP_DATE)
}

thread_local! {
    // One per worker thread: workers share nothing on the request path.
    static DATE: RefCell<DateCache> = RefCell::new(DateCache::default());
}

/// This worker's date cache, for framings other than [`Reply`]'s.
pub fn with_dates<R>(f: impl FnOnce(&mut DateCache) -> R) -> R {
    DATE.with(|d| f(&mut d.borrow_mut()))
}

/// How the response to one request is framed. The `Connection` header a
/// head states and whether the session reads another request both come
/// from [`Reply::keep_alive`], fixed when the head is started, so they
/// cannot disagree; and a response to HEAD never carries a body.
#[derive(Debug)]
pub struct Reply {
    minor: u8,
    head_only: bool,
    reusable: bool,
    keep_alive: bool,
    server: ServerHeader,
}

impl Reply {
    /// `minor`: the request's HTTP/1.x version; `head_only`: a HEAD
    /// request; `reusable`: the client asked to keep the connection, the
    /// limits allow another request, and the stream is in step with us;
    /// `server`: the answering site's `Server` header.
    pub fn new(minor: u8, head_only: bool, reusable: bool, server: ServerHeader) -> Reply {
        Reply {
            minor,
            head_only,
            reusable,
            keep_alive: false,
            server,
        }
    }

    /// For a request that could not be parsed or read to its end: the
    /// connection closes whatever the status.
    pub fn closing(head_only: bool, server: ServerHeader) -> Reply {
        Reply::new(1, head_only, false, server)
    }

    /// The stream is out of step (a body left unread): close after this.
    pub fn stream_unusable(&mut self) {
        self.reusable = false;
    }

    /// Whether the response may have a body (not for HEAD).
    pub fn with_body(&self) -> bool {
        !self.head_only
    }

    /// What the head said: the connection carries another request.
    pub fn keep_alive(&self) -> bool {
        self.keep_alive
    }

    /// Start the response head: status line, `Server` and `Date`. Decides
    /// the connection's fate from the status.
    pub fn start<'a>(&mut self, out: &'a mut Vec<u8>, status: u16) -> Head<'a> {
        self.keep_alive = self.reusable && !ends_connection(status);
        DATE.with(|d| Head::with_date(out, status, d.borrow_mut().now(), self))
    }
}

/// Statuses after which no further request is read: the request could not
/// be understood, so where the next one starts is unknown (400, 414, 431,
/// 505), it was not read to its end (408, 413), or the server failed (5xx).
fn ends_connection(status: u16) -> bool {
    matches!(status, 400 | 408 | 413 | 414 | 431) || status >= 500
}

/// Writes a response head into a reusable buffer.
pub struct Head<'a> {
    out: &'a mut Vec<u8>,
    keep_alive: bool,
    minor: u8,
}

impl<'a> Head<'a> {
    fn with_date(out: &'a mut Vec<u8>, status: u16, date: &str, reply: &Reply) -> Self {
        out.clear();
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(itoa::Buffer::new().format(status).as_bytes());
        out.push(b' ');
        out.extend_from_slice(reason(status).as_bytes());
        out.extend_from_slice(reply.server.after_status());
        out.extend_from_slice(date.as_bytes());
        out.extend_from_slice(b"\r\n");
        Head {
            out,
            keep_alive: reply.keep_alive,
            minor: reply.minor,
        }
    }

    pub fn header(&mut self, name: &str, value: &str) -> &mut Self {
        self.out.extend_from_slice(name.as_bytes());
        self.out.extend_from_slice(b": ");
        // Values we write never contain CR or LF; be sure anyway.
        let at = self.out.len();
        self.out.extend_from_slice(value.as_bytes());
        for b in &mut self.out[at..] {
            if *b == b'\r' || *b == b'\n' {
                *b = b' ';
            }
        }
        self.out.extend_from_slice(b"\r\n");
        self
    }

    /// A header whose value is an HTTP date (`Last-Modified`).
    pub fn header_date(&mut self, name: &str, t: SystemTime) -> &mut Self {
        DATE.with(|d| self.header(name, d.borrow_mut().date(t)))
    }

    /// Finish with `Content-Length` (if any) and the connection decision
    /// of the [`Reply`], stated for the request's HTTP version.
    pub fn finish(self, content_length: Option<u64>) {
        if let Some(n) = content_length {
            self.out.extend_from_slice(b"Content-Length: ");
            self.out
                .extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
            self.out.extend_from_slice(b"\r\n");
        }
        match (self.keep_alive, self.minor) {
            (false, _) => {
                self.out.extend_from_slice(b"Connection: close\r\n");
            }
            (true, 0) => {
                self.out.extend_from_slice(b"Connection: keep-alive\r\n");
            }
            (true, _) => {}
        }
        self.out.extend_from_slice(b"\r\n");
    }
}

/// The HTML body of an error page, like nginx's.
pub fn error_page(status: u16) -> String {
    let title = format!("{status} {}", reason(status));
    format!(
        "<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n<center><h1>{title}</h1></center>\r\n<hr><center>tlsfront</center>\r\n</body>\r\n</html>\r\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_layout() {
        let mut out = Vec::new();
        let reply = Reply::new(1, false, false, ServerHeader::WithVersion);
        let mut h = Head::with_date(&mut out, 404, "Sat, 21 Nov 2026 00:00:00 GMT", &reply);
        h.header("Content-Type", "text/html")
            .header("X-Test", "a\r\nInjected: yes")
            .header_date("Last-Modified", SystemTime::UNIX_EPOCH);
        h.finish(Some(3));
        let s = String::from_utf8(out).unwrap();
        assert!(s.starts_with("HTTP/1.1 404 Not Found\r\nServer: tlsfront/"));
        assert!(s.contains("\r\nDate: Sat, 21 Nov 2026 00:00:00 GMT\r\n"));
        assert!(s.ends_with(
            "Content-Type: text/html\r\nX-Test: a  Injected: yes\r\n\
             Last-Modified: Thu, 01 Jan 1970 00:00:00 GMT\r\n\
             Content-Length: 3\r\nConnection: close\r\n\r\n"
        ));
        // A second head in the same buffer replaces the first.
        let mut out = s.into_bytes();
        Reply::new(1, false, true, ServerHeader::NameOnly)
            .start(&mut out, 200)
            .finish(None);
        let s = String::from_utf8(out).unwrap();
        assert!(
            s.starts_with("HTTP/1.1 200 OK\r\nServer: tlsfront\r\nDate: "),
            "{s}"
        );
        assert!(s.ends_with("GMT\r\n\r\n") && !s.contains("404"), "{s}");
    }

    #[test]
    fn the_head_and_the_session_agree_on_the_connection() {
        let mut out = Vec::new();
        for (minor, reusable, status, keep, line) in [
            (1, true, 200, true, None),
            (1, true, 404, true, None),
            (1, true, 416, true, None),
            (1, true, 400, false, Some("Connection: close")),
            (1, true, 413, false, Some("Connection: close")),
            (1, true, 500, false, Some("Connection: close")),
            (1, true, 505, false, Some("Connection: close")),
            (1, false, 200, false, Some("Connection: close")),
            (0, true, 200, true, Some("Connection: keep-alive")),
            (0, true, 400, false, Some("Connection: close")),
        ] {
            let mut r = Reply::new(minor, false, reusable, ServerHeader::WithVersion);
            r.start(&mut out, status).finish(Some(0));
            let s = String::from_utf8_lossy(&out);
            assert_eq!(r.keep_alive(), keep, "{status} {s}");
            assert_eq!(s.contains("Connection:"), line.is_some(), "{s}");
            if let Some(line) = line {
                assert!(s.contains(line), "{s}");
            }
        }
        let mut r = Reply::new(1, true, true, ServerHeader::WithVersion);
        r.stream_unusable();
        r.start(&mut out, 404).finish(None);
        assert!(!r.keep_alive() && !r.with_body());
        assert!(!Reply::closing(false, ServerHeader::WithVersion).keep_alive());
    }

    #[test]
    fn date_is_http_date() {
        let mut d = DateCache::default();
        assert!(httpdate::parse_http_date(d.now()).is_ok());
    }

    #[test]
    fn dates_are_cached_per_value_and_clamped() {
        let mut d = DateCache::default();
        let t = |s| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        assert_eq!(d.date(t(784111777)), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(d.date(t(784111777)), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(d.date(t(0)), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(d.date(t(784111778)), "Sun, 06 Nov 1994 08:49:38 GMT");
        // httpdate panics past 9999; a file may still carry such a time.
        assert_eq!(
            d.date(t(LAST_HTTP_DATE + 1)),
            "Fri, 31 Dec 9999 23:59:59 GMT"
        );
        assert_eq!(
            d.date(SystemTime::UNIX_EPOCH - Duration::from_secs(5)),
            "Thu, 01 Jan 1970 00:00:00 GMT"
        );
    }
}
