//! Parsing a request head (httparse) into the few fields a static file
//! server acts on, with the size limits that make memory per connection
//! bounded: request line (414), header block and count (431).

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

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    None,
    Length(u64),
    Chunked,
}

/// What the server needs from a request head.
#[derive(Debug, Clone)]
pub struct RequestHead {
    pub method: Method,
    /// The request-target as sent.
    pub target: String,
    /// HTTP/1.`minor`.
    pub minor: u8,
    pub keep_alive: bool,
    pub body: Body,
    pub range: Option<String>,
    pub if_match: Option<String>,
    pub if_none_match: Option<String>,
    pub if_modified_since: Option<String>,
    pub if_unmodified_since: Option<String>,
    pub if_range: Option<String>,
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
        Err(httparse::Error::Version) => return Err(RequestError::Version),
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
    let mut head = RequestHead {
        method,
        target: req.path.unwrap_or("").to_string(),
        minor,
        keep_alive: minor == 1,
        body: Body::None,
        range: None,
        if_match: None,
        if_none_match: None,
        if_modified_since: None,
        if_unmodified_since: None,
        if_range: None,
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
}
