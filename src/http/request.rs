//! Parsing a request head (httparse) into the few fields a static file
//! server acts on, with the size limits that make memory per connection
//! bounded: request line (414), header block and count (431). Also what
//! httparse leaves to us: versions it does not know (RFC 9112 2.3), the
//! host (Host header or absolute-form target, RFC 9112 3.2), `Expect`.

/// Size limits on a request head.
#[derive(Clone, Copy, Debug)]
pub struct HeadLimits {
    pub request_line: usize,
    pub header_bytes: usize,
    pub headers: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Other,
}

/// The `Expect` header (RFC 9110 10.1.1), HTTP/1.1 only (1.0 ignores it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    None,
    /// `100-continue`: the client may wait for `100 Continue` before
    /// sending the body.
    Continue,
    /// Anything else: 417.
    Unsupported,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    None,
    Length(u64),
    Chunked,
}

/// What the server needs from a request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    pub method: Method,
    /// The request-target in origin-form (path and query): as sent, or
    /// taken from an absolute-form target. Other forms (`*`,
    /// authority-form) are kept as sent and fail path normalisation.
    pub target: String,
    /// HTTP/1.`minor` (a request saying 1.2 or later is served as 1.1).
    pub minor: u8,
    /// The host the request is for: from an absolute-form target, else from
    /// the Host header; lower-case, without port or trailing dot. `None`
    /// only for HTTP/1.0 without Host.
    pub host: Option<String>,
    pub keep_alive: bool,
    pub body: Body,
    pub expect: Expect,
    pub range: Option<String>,
    pub if_match: Option<String>,
    pub if_none_match: Option<String>,
    pub if_modified_since: Option<String>,
    pub if_unmodified_since: Option<String>,
    pub if_range: Option<String>,
    /// `Accept-Encoding`, repeated fields combined (read only by sites
    /// that serve precompressed files).
    pub accept_encoding: Option<String>,
    /// Bytes of the buffer the head occupied.
    pub head_len: usize,
}

/// A request that cannot be served; each maps to one status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("bad request: {0}")]
    Bad(&'static str),
    #[error("request line too long")]
    UriTooLong,
    #[error("request header fields too large")]
    HeadersTooLarge,
    #[error("HTTP version not supported")]
    Version,
}

impl RequestError {
    pub fn status(self) -> u16 {
        match self {
            RequestError::Bad(_) => 400,
            RequestError::UriTooLong => 414,
            RequestError::HeadersTooLarge => 431,
            RequestError::Version => 505,
        }
    }
}

/// Header slots kept on the stack (4 KiB); the default limit is 100.
const STACK_HEADERS: usize = 128;

/// Parse the head at the start of `buf`. `Ok(None)`: incomplete, read more.
pub fn parse(buf: &[u8], limits: &HeadLimits) -> Result<Option<RequestHead>, RequestError> {
    // Empty lines before the request line are allowed (RFC 9112 2.2).
    let skip = buf
        .iter()
        .take_while(|&&b| b == b'\r' || b == b'\n')
        .count();
    let line_end = buf[skip..].iter().position(|&b| b == b'\n');
    match line_end {
        None if buf.len() - skip > limits.request_line => return Err(RequestError::UriTooLong),
        Some(n) if n > limits.request_line => return Err(RequestError::UriTooLong),
        _ => {}
    }
    // The header slots live on the stack unless the limit is unusually
    // high. No head within `header_bytes` holds more fields than one per 3
    // bytes ("a:" and LF), so more slots than that are never needed.
    let slots = limits.headers.min(limits.header_bytes / 3 + 1);
    let mut on_stack = [httparse::EMPTY_HEADER; STACK_HEADERS];
    let mut on_heap = Vec::new();
    let headers = if slots <= STACK_HEADERS {
        &mut on_stack[..slots]
    } else {
        on_heap.resize(slots, httparse::EMPTY_HEADER);
        &mut on_heap[..]
    };
    let mut req = httparse::Request::new(headers);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if buf.len() >= limits.header_bytes {
                return Err(RequestError::HeadersTooLarge);
            }
            return Ok(None);
        }
        Err(httparse::Error::TooManyHeaders) => return Err(RequestError::HeadersTooLarge),
        Err(httparse::Error::Version) => return other_version(buf, skip, limits),
        Err(_) => return Err(RequestError::Bad("malformed request head")),
    };
    if head_len > limits.header_bytes {
        return Err(RequestError::HeadersTooLarge);
    }
    let minor = req.version.unwrap_or(1);
    let method = match req.method.unwrap_or("") {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        _ => Method::Other,
    };
    let target = req.path.unwrap_or("");
    let (target, target_host) = match split_absolute(target)? {
        Some((authority, origin)) => (origin, Some(parse_host(authority.as_bytes())?)),
        None => (target.to_string(), None),
    };
    if target_host.as_deref() == Some("") {
        return Err(RequestError::Bad("no host in absolute-form target"));
    }
    let mut head = RequestHead {
        method,
        target,
        minor,
        host: None,
        keep_alive: minor == 1,
        body: Body::None,
        expect: Expect::None,
        range: None,
        if_match: None,
        if_none_match: None,
        if_modified_since: None,
        if_unmodified_since: None,
        if_range: None,
        accept_encoding: None,
        head_len,
    };
    let mut hosts = 0;
    let mut ranges = 0;
    let mut length: Option<u64> = None;
    let mut chunked = None;
    for h in req.headers.iter() {
        // Only the headers acted on are checked for UTF-8.
        let value = || std::str::from_utf8(h.value).map(str::trim);
        let name = h.name;
        let eq = |n: &str| name.eq_ignore_ascii_case(n);
        if eq("host") {
            hosts += 1;
            head.host = Some(parse_host(h.value)?);
        } else if eq("expect") && minor == 1 {
            let v = value();
            head.expect = match head.expect {
                _ if v == Ok("") => head.expect,
                Expect::None if v.is_ok_and(|v| v.eq_ignore_ascii_case("100-continue")) => {
                    Expect::Continue
                }
                _ => Expect::Unsupported,
            };
        } else if eq("connection") {
            for token in value().unwrap_or("").split(',').map(str::trim) {
                if token.eq_ignore_ascii_case("close") {
                    head.keep_alive = false;
                } else if token.eq_ignore_ascii_case("keep-alive") && minor == 0 {
                    head.keep_alive = true;
                }
            }
        } else if eq("content-length") {
            let v = value()
                .ok()
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or(RequestError::Bad("invalid Content-Length"))?;
            if length.is_some_and(|l| l != v) {
                return Err(RequestError::Bad("conflicting Content-Length"));
            }
            length = Some(v);
        } else if eq("transfer-encoding") {
            let v = value().map_err(|_| RequestError::Bad("invalid Transfer-Encoding"))?;
            let last = v.rsplit(',').next().unwrap_or("").trim();
            if !last.eq_ignore_ascii_case("chunked") || minor == 0 {
                return Err(RequestError::Bad("unsupported Transfer-Encoding"));
            }
            chunked = Some(());
        } else {
            let slot = if eq("range") {
                ranges += 1;
                &mut head.range
            } else if eq("if-match") {
                &mut head.if_match
            } else if eq("if-none-match") {
                &mut head.if_none_match
            } else if eq("if-modified-since") {
                &mut head.if_modified_since
            } else if eq("if-unmodified-since") {
                &mut head.if_unmodified_since
            } else if eq("if-range") {
                &mut head.if_range
            } else if eq("accept-encoding") {
                &mut head.accept_encoding
            } else {
                continue;
            };
            if let Ok(v) = value() {
                match slot {
                    // Repeated list headers combine; a repeated Range is
                    // ignored (however often it repeats).
                    _ if eq("range") && ranges > 1 => *slot = None,
                    Some(prev) => {
                        prev.push_str(", ");
                        prev.push_str(v);
                    }
                    None => *slot = Some(v.to_string()),
                }
            }
        }
    }
    if minor == 1 && hosts == 0 {
        return Err(RequestError::Bad("missing Host header"));
    }
    if hosts > 1 {
        return Err(RequestError::Bad("more than one Host header"));
    }
    if target_host.is_some() {
        // RFC 9112 3.2.2: the target's authority stands in for Host.
        head.host = target_host;
    }
    head.body = match (chunked, length) {
        (Some(()), Some(_)) => {
            return Err(RequestError::Bad(
                "both Transfer-Encoding and Content-Length",
            ))
        }
        (Some(()), None) => Body::Chunked,
        (None, Some(0)) | (None, None) => Body::None,
        (None, Some(n)) => Body::Length(n),
    };
    Ok(Some(head))
}

/// Whether the request at the start of `buf` is a HEAD, judged from its
/// first word alone: a request refused before it could be parsed still
/// gets no body in its response if it was a HEAD.
pub fn names_head(buf: &[u8]) -> bool {
    let skip = buf
        .iter()
        .take_while(|&&b| b == b'\r' || b == b'\n')
        .count();
    buf[skip..].starts_with(b"HEAD ")
}

/// httparse knows `HTTP/1.0` and `HTTP/1.1` only, and says `Version` for
/// anything else after the target, a malformed request line included
/// (`GET /a b HTTP/1.1`). Tell them apart: a well-formed `HTTP/1.x` with
/// x > 1 is served as 1.1 (RFC 9112 2.3), other well-formed versions get
/// 505, and a malformed line (extra words, `http/1.1`, `HTTP/1.10`) 400.
fn other_version(
    buf: &[u8],
    skip: usize,
    limits: &HeadLimits,
) -> Result<Option<RequestHead>, RequestError> {
    let Some(end) = buf[skip..].iter().position(|&b| b == b'\n') else {
        // Incomplete, as for httparse's Partial: within the head limit,
        // read more (the empty lines before it count towards the limit).
        if buf.len() >= limits.header_bytes {
            return Err(RequestError::HeadersTooLarge);
        }
        return Ok(None);
    };
    let line = &buf[skip..skip + end];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut words = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return Err(RequestError::Bad("malformed request line"));
    };
    if method.is_empty() || target.is_empty() {
        return Err(RequestError::Bad("malformed request line"));
    }
    match version {
        [b'H', b'T', b'T', b'P', b'/', b'1', b'.', b'2'..=b'9'] => {
            // Parse a copy that says 1.1 (httparse cannot be told otherwise);
            // rare enough that the copy does not matter.
            let mut copy = buf.to_vec();
            copy[skip + line.len() - 1] = b'1';
            parse(&copy, limits)
        }
        // 1.0 and 1.1 are httparse's own: its complaint was elsewhere.
        [b'H', b'T', b'T', b'P', b'/', b'1', b'.', _] => {
            Err(RequestError::Bad("malformed request line"))
        }
        [b'H', b'T', b'T', b'P', b'/', b'0'..=b'9', b'.', b'0'..=b'9'] => {
            Err(RequestError::Version)
        }
        _ => Err(RequestError::Bad("malformed HTTP version")),
    }
}

/// Split an absolute-form target (RFC 9112 3.2.2) into its authority and
/// its origin-form path and query. `Ok(None)`: not absolute-form. The
/// scheme is case-insensitive; the authority ends at the first `/`, `?` or
/// `#`; an empty path is `/`. Userinfo is refused (RFC 9110 4.2.4).
fn split_absolute(target: &str) -> Result<Option<(&str, String)>, RequestError> {
    if target.starts_with('/') {
        return Ok(None);
    }
    let Some((scheme, rest)) = target.split_once("://") else {
        return Ok(None);
    };
    let is_scheme = scheme
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic())
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
    if !is_scheme {
        return Ok(None);
    }
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return Err(RequestError::Bad("target scheme is neither http nor https"));
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if authority.contains('@') {
        return Err(RequestError::Bad("userinfo in request target"));
    }
    let origin = if tail.starts_with('/') {
        tail.to_string()
    } else {
        format!("/{tail}")
    };
    Ok(Some((authority, origin)))
}

/// The host of a Host value or an authority (RFC 3986 3.2.2): a reg-name
/// (which covers IPv4) or `[IPv6]`, with an optional `:port`. Returned
/// lower-case without the port or a trailing dot. `..` is refused as nginx
/// does, since the host is what picks a site.
pub fn parse_host(value: &[u8]) -> Result<String, RequestError> {
    let bad = RequestError::Bad("invalid host");
    let v = value.trim_ascii();
    let (host, port) = if v.first() == Some(&b'[') {
        let close = v.iter().position(|&b| b == b']').ok_or(bad)?;
        let literal = std::str::from_utf8(&v[1..close]).map_err(|_| bad)?;
        literal.parse::<std::net::Ipv6Addr>().map_err(|_| bad)?;
        (&v[..=close], &v[close + 1..])
    } else {
        let colon = v.iter().position(|&b| b == b':').unwrap_or(v.len());
        (&v[..colon], &v[colon..])
    };
    let port_ok = match port.split_first() {
        None => true,
        Some((b':', digits)) => digits.iter().all(u8::is_ascii_digit),
        Some(_) => false,
    };
    if !port_ok {
        return Err(bad);
    }
    if host.first() != Some(&b'[') {
        let mut i = 0;
        while i < host.len() {
            match host[i] {
                b'%' if host
                    .get(i + 1..i + 3)
                    .is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) =>
                {
                    i += 2
                }
                b if b.is_ascii_alphanumeric() => {}
                b'-' | b'.' | b'_' | b'~' => {}
                b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'=' => {}
                _ => return Err(bad),
            }
            i += 1;
        }
        if host.windows(2).any(|w| w == b"..") {
            return Err(bad);
        }
    }
    let host = host.strip_suffix(b".").unwrap_or(host);
    // Only ASCII is left.
    Ok(String::from_utf8_lossy(host).to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: HeadLimits = HeadLimits {
        request_line: 100,
        header_bytes: 300,
        headers: 8,
    };

    fn p(s: &str) -> Result<Option<RequestHead>, RequestError> {
        parse(s.as_bytes(), &L)
    }

    #[test]
    fn simple_get_and_keep_alive_defaults() {
        let h = p("GET /a HTTP/1.1\r\nHost: x\r\n\r\n").unwrap().unwrap();
        assert_eq!(h.method, Method::Get);
        assert_eq!(h.target, "/a");
        assert!(h.keep_alive);
        let h = p("GET /a HTTP/1.0\r\n\r\n").unwrap().unwrap();
        assert!(!h.keep_alive);
        let h = p("HEAD / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(h.keep_alive && h.method == Method::Head);
        let h = p("GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!h.keep_alive);
    }

    #[test]
    fn partial_and_limits() {
        assert!(p("GET / HTTP/1.1\r\nHost: x\r\n").unwrap().is_none());
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(200));
        assert_eq!(p(&long).unwrap_err(), RequestError::UriTooLong);
        assert_eq!(
            p(&"GET /".repeat(30)).unwrap_err(),
            RequestError::UriTooLong
        );
        let many = format!("GET / HTTP/1.1\r\n{}\r\n", "A: b\r\n".repeat(9));
        assert_eq!(p(&many).unwrap_err(), RequestError::HeadersTooLarge);
        let big = format!("GET / HTTP/1.1\r\nHost: x\r\nA: {}\r\n", "b".repeat(300));
        assert_eq!(p(&big).unwrap_err(), RequestError::HeadersTooLarge);
        // Empty lines, then an unfinished line that httparse refuses for
        // its version (found by fuzz/request_head): still bounded by the
        // head limit, not read on and on.
        let blank = format!("{}A A  ", "\n".repeat(310));
        assert_eq!(p(&blank).unwrap_err(), RequestError::HeadersTooLarge);
        assert!(p(&format!("{}A A  ", "\n".repeat(10))).unwrap().is_none());
    }

    #[test]
    fn header_limits_beyond_the_stack_slots() {
        let wide = HeadLimits {
            request_line: 100,
            header_bytes: 64 * 1024,
            headers: STACK_HEADERS + 72,
        };
        let head = |n: usize| format!("GET / HTTP/1.1\r\nHost: x\r\n{}\r\n", "A: b\r\n".repeat(n));
        let ok = head(STACK_HEADERS + 71);
        assert!(parse(ok.as_bytes(), &wide).unwrap().is_some());
        let over = head(STACK_HEADERS + 72);
        assert_eq!(
            parse(over.as_bytes(), &wide).unwrap_err(),
            RequestError::HeadersTooLarge
        );
    }

    #[test]
    fn rejects_what_cannot_be_trusted() {
        assert!(matches!(
            p("GET / HTTP/1.1\r\n\r\n"),
            Err(RequestError::Bad(_))
        ));
        assert!(matches!(
            p("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"),
            Err(RequestError::Bad(_))
        ));
        assert!(matches!(
            p("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Err(RequestError::Bad(_))
        ));
        assert!(matches!(
            p("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n"),
            Err(RequestError::Bad(_))
        ));
        assert!(matches!(
            p("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
            Err(RequestError::Bad(_))
        ));
        assert_eq!(
            p("GET / HTTP/2.0\r\n\r\n").unwrap_err(),
            RequestError::Version
        );
        assert!(matches!(
            p("GET\0 / HTTP/1.1\r\n\r\n"),
            Err(RequestError::Bad(_))
        ));
    }

    #[test]
    fn bodies_and_conditionals() {
        let h = p("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nRange: bytes=1-2\r\nIf-None-Match: \"a\"\r\nIf-None-Match: \"b\"\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.body, Body::Length(5));
        assert_eq!(h.range.as_deref(), Some("bytes=1-2"));
        assert_eq!(h.if_none_match.as_deref(), Some("\"a\", \"b\""));
        let h = p("GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(h.body, Body::Chunked);
    }

    #[test]
    fn repeated_range_is_ignored_however_often() {
        for n in 1..=4 {
            let ranges = "Range: bytes=0-0\r\n".repeat(n);
            let h = p(&format!("GET / HTTP/1.1\r\nHost: a\r\n{ranges}\r\n"))
                .unwrap()
                .unwrap();
            assert_eq!(h.range.is_some(), n == 1, "{n} Range headers");
        }
    }

    #[test]
    fn header_slots_follow_the_byte_limit_not_a_huge_count() {
        // An absurd field count must not be allocated per parse; the byte
        // limit still caps what a head can hold.
        let limits = HeadLimits {
            request_line: 100,
            header_bytes: 600,
            headers: usize::MAX,
        };
        let many = "a:b\r\n".repeat(100);
        let h = parse(
            format!("GET / HTTP/1.1\r\nHost: a\r\n{many}\r\n").as_bytes(),
            &limits,
        );
        assert!(h.unwrap().is_some());
        let too_many = "a:\r\n".repeat(200);
        let h = parse(
            format!("GET / HTTP/1.1\r\nHost: a\r\n{too_many}\r\n").as_bytes(),
            &limits,
        );
        assert_eq!(h.unwrap_err(), RequestError::HeadersTooLarge);
    }

    #[test]
    fn head_is_recognised_in_unusable_requests() {
        assert!(names_head(b"HEAD / HTTP/9.9\r\n"));
        assert!(names_head(b"\r\nHEAD /"));
        assert!(!names_head(b"HEADX / HTTP/1.1"));
        assert!(!names_head(b"GET / HTTP/1.1"));
        assert!(!names_head(b""));
    }

    #[test]
    fn versions() {
        let minor = |line: &str| p(&format!("{line}\r\nHost: x\r\n\r\n")).map(|h| h.unwrap().minor);
        assert_eq!(minor("GET / HTTP/1.0"), Ok(0));
        assert_eq!(minor("GET / HTTP/1.1"), Ok(1));
        assert_eq!(minor("GET / HTTP/1.2"), Ok(1));
        assert_eq!(minor("GET / HTTP/1.9"), Ok(1));
        assert_eq!(minor("GET / HTTP/2.0"), Err(RequestError::Version));
        assert_eq!(minor("GET / HTTP/3.1"), Err(RequestError::Version));
        assert_eq!(minor("GET / HTTP/0.9"), Err(RequestError::Version));
        for bad in [
            "GET /a b c HTTP/1.1",
            "GET / http/1.1",
            "GET / HTTP/1.10",
            "GET / HTTP/1.1 ",
            "GET  / HTTP/1.1",
            "GET /  HTTP/1.1",
            "GET / HTTP/1",
            "GET / HTTP/1.1 x",
        ] {
            assert!(
                matches!(minor(bad), Err(RequestError::Bad(_))),
                "{bad:?}: {:?}",
                minor(bad)
            );
        }
        // The version is judged once the line is complete.
        assert_eq!(p("GET / HTTP/1.2"), Ok(None));
        assert_eq!(p("GET / HTTP/1.2\r\nHost: x\r\n"), Ok(None));
        // A 1.2 request keeps its whole head: the fields after the line count.
        let h = p("GET /a HTTP/1.2\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap()
            .unwrap();
        assert!(!h.keep_alive && h.target == "/a");
        assert!(matches!(
            p("GET / HTTP/1.2\r\n\r\n"),
            Err(RequestError::Bad(_))
        ));
    }

    #[test]
    fn absolute_form_targets() {
        let t = |target: &str| {
            p(&format!("GET {target} HTTP/1.1\r\nHost: header\r\n\r\n"))
                .map(|h| h.map(|h| (h.target, h.host.unwrap_or_default())))
        };
        let ok = |target, path: &str, host: &str| {
            assert_eq!(
                t(target),
                Ok(Some((path.to_string(), host.to_string()))),
                "{target}"
            )
        };
        ok("/a?b", "/a?b", "header");
        ok("https://x?a=/hello.txt", "/?a=/hello.txt", "x");
        ok("https://x#/frag", "/#/frag", "x");
        ok("HTTPS://Ex.Com:8443/p/q?r", "/p/q?r", "ex.com");
        ok("Http://x", "/", "x");
        ok("http://[::1]:1/a", "/a", "[::1]");
        // The authority ends at the first `/`: an `@` after it is path.
        ok("https://a/b@x/", "/b@x/", "a");
        for bad in [
            "https://user@x/",
            "https://u:p@x/a",
            "ftp://x/",
            "https:///a",
            "https://a b/",
            "https://a..b/",
        ] {
            assert!(
                matches!(t(bad), Err(RequestError::Bad(_))),
                "{bad:?}: {:?}",
                t(bad)
            );
        }
        // Not absolute-form: kept for path normalisation to refuse.
        ok("*", "*", "header");
        ok("x.com:443", "x.com:443", "header");
    }

    #[test]
    fn host_grammar() {
        let host = |v: &str| parse_host(v.as_bytes());
        assert_eq!(host("Example.COM").unwrap(), "example.com");
        assert_eq!(host("example.com.:8443").unwrap(), "example.com");
        assert_eq!(host("127.0.0.1:80").unwrap(), "127.0.0.1");
        assert_eq!(host("[::1]").unwrap(), "[::1]");
        assert_eq!(host("[2001:DB8::1]:443").unwrap(), "[2001:db8::1]");
        assert_eq!(
            host("a-b_c~d%41!$&'()*+,;=").unwrap(),
            "a-b_c~d%41!$&'()*+,;="
        );
        assert_eq!(host("").unwrap(), "");
        assert_eq!(host("x:").unwrap(), "x");
        for bad in [
            "a b",
            "a/b",
            "a\\b",
            "a..b",
            "..",
            "a:b",
            "a:1:2",
            "[::1",
            "[x]",
            "[::1]x",
            "a%4",
            "a%zz",
            "a@b",
            "a?b",
            "a#b",
            "\u{e9}.com",
            "[::1]:8a",
        ] {
            assert!(
                matches!(host(bad), Err(RequestError::Bad(_))),
                "{bad:?}: {:?}",
                host(bad)
            );
        }
        let h = p("GET / HTTP/1.1\r\nHost: A.b:1\r\n\r\n").unwrap().unwrap();
        assert_eq!(h.host.as_deref(), Some("a.b"));
        assert!(matches!(
            p("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n"),
            Err(RequestError::Bad(_))
        ));
        assert!(matches!(
            p("GET / HTTP/1.0\r\nHost: a b\r\n\r\n"),
            Err(RequestError::Bad(_))
        ));
        assert_eq!(p("GET / HTTP/1.0\r\n\r\n").unwrap().unwrap().host, None);
        // Absolute-form still needs a valid Host on HTTP/1.1.
        assert!(matches!(
            p("GET http://x/ HTTP/1.1\r\n\r\n"),
            Err(RequestError::Bad(_))
        ));
        assert!(matches!(
            p("GET http://x/ HTTP/1.1\r\nHost: a b\r\n\r\n"),
            Err(RequestError::Bad(_))
        ));
    }

    #[test]
    fn expectations() {
        let e = |fields: &str, v: &str| {
            p(&format!("GET / HTTP/1.{v}\r\nHost: x\r\n{fields}\r\n"))
                .unwrap()
                .unwrap()
                .expect
        };
        assert_eq!(e("", "1"), Expect::None);
        assert_eq!(e("Expect: 100-Continue\r\n", "1"), Expect::Continue);
        assert_eq!(
            e("Expect: 100-continue\r\nExpect: 100-continue\r\n", "1"),
            Expect::Unsupported
        );
        assert_eq!(e("Expect: 100-continue, x\r\n", "1"), Expect::Unsupported);
        assert_eq!(e("Expect: 200-ok\r\n", "1"), Expect::Unsupported);
        assert_eq!(e("Expect:\r\n", "1"), Expect::None);
        // HTTP/1.0 ignores Expect (RFC 9110 10.1.1).
        assert_eq!(e("Expect: 200-ok\r\n", "0"), Expect::None);
        assert_eq!(e("Expect: 100-continue\r\n", "0"), Expect::None);
    }
}
