//! An HTTP/2 request's header list (RFC 9113 §8.2, §8.3) checked and
//! collected while HPACK decodes it: the pseudo-headers, the fields the
//! handler acts on, and the reason a malformed request is refused (a stream
//! error, not a response: §8.1.1). The result turns into the handler's
//! protocol-neutral [`Request`].

use crate::http::conditional::Preconditions;
use crate::http::request::{parse_host, Method};
use crate::serve::model::Request;

/// The fields of one request, as decoded.
#[derive(Debug, Default)]
pub(super) struct Head {
    pub method: Option<Method>,
    /// The method as sent, for the access log.
    pub method_text: String,
    pub path: String,
    pub authority: Option<String>,
    pub host: Option<String>,
    pub scheme: bool,
    pub range: Option<String>,
    ranges: u32,
    pub if_match: Option<String>,
    pub if_none_match: Option<String>,
    pub if_modified_since: Option<String>,
    pub if_unmodified_since: Option<String>,
    pub if_range: Option<String>,
    pub accept_encoding: Option<String>,
    pub user_agent: Option<String>,
    pub referer: Option<String>,
    pub priority: Option<String>,
    pub content_length: Option<u64>,
    /// A regular field came: no pseudo-header may follow.
    regular: bool,
    /// Why the request is malformed (the first reason found).
    pub malformed: Option<&'static str>,
    pseudo_seen: u8,
}

const P_METHOD: u8 = 1;
const P_SCHEME: u8 = 2;
const P_PATH: u8 = 4;
const P_AUTHORITY: u8 = 8;

impl Head {
    fn bad(&mut self, why: &'static str) {
        if self.malformed.is_none() {
            self.malformed = Some(why);
        }
    }

    /// One decoded field, in order.
    pub fn field(&mut self, name: &[u8], value: &[u8]) {
        if self.malformed.is_some() {
            return;
        }
        // §8.2.1: a value with NUL, CR or LF, or with whitespace at either
        // end, is malformed.
        if value.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n')
            || matches!(value.first(), Some(b' ' | b'\t'))
            || matches!(value.last(), Some(b' ' | b'\t'))
        {
            return self.bad("invalid field value");
        }
        if let Some(pseudo) = name.strip_prefix(b":") {
            if self.regular {
                return self.bad("pseudo-header after a regular field");
            }
            let (bit, ok) = match pseudo {
                b"method" => (P_METHOD, true),
                b"scheme" => (P_SCHEME, true),
                b"path" => (P_PATH, true),
                b"authority" => (P_AUTHORITY, true),
                _ => (0, false),
            };
            if !ok {
                return self.bad("unknown pseudo-header");
            }
            if self.pseudo_seen & bit != 0 {
                return self.bad("repeated pseudo-header");
            }
            self.pseudo_seen |= bit;
            let Ok(v) = std::str::from_utf8(value) else {
                return self.bad("pseudo-header not UTF-8");
            };
            match bit {
                P_METHOD => {
                    self.method = Some(match v {
                        "GET" => Method::Get,
                        "HEAD" => Method::Head,
                        _ => Method::Other,
                    });
                    if v.is_empty() || !v.bytes().all(is_tchar) {
                        return self.bad("invalid :method");
                    }
                    self.method_text = v.to_string();
                }
                P_SCHEME => self.scheme = true,
                P_PATH => {
                    if v.is_empty() {
                        return self.bad("empty :path");
                    }
                    self.path = v.to_string();
                }
                _ => match parse_host(value) {
                    Ok(h) => self.authority = Some(h),
                    Err(_) => self.bad("invalid :authority"),
                },
            }
            return;
        }
        self.regular = true;
        // §8.2: names are lower-case tokens.
        if name.is_empty() || !name.iter().all(|&b| is_tchar(b) && !b.is_ascii_uppercase()) {
            return self.bad("invalid field name");
        }
        // §8.2.2: connection-specific fields are malformed; TE may only
        // say "trailers".
        match name {
            b"connection" | b"keep-alive" | b"proxy-connection" | b"transfer-encoding"
            | b"upgrade" => return self.bad("connection-specific field"),
            b"te" => {
                if value != b"trailers" {
                    self.bad("TE other than trailers");
                }
                return;
            }
            _ => {}
        }
        let Ok(v) = std::str::from_utf8(value) else {
            // Only the fields acted on need be UTF-8.
            return;
        };
        let slot = match name {
            b"host" => {
                match parse_host(value) {
                    Ok(h) if self.host.is_none() => self.host = Some(h),
                    Ok(_) => self.bad("more than one host"),
                    Err(_) => self.bad("invalid host"),
                }
                return;
            }
            b"content-length" => {
                match v.parse::<u64>() {
                    Ok(n)
                        if v.bytes().all(|b| b.is_ascii_digit())
                            && self.content_length.is_none_or(|c| c == n) =>
                    {
                        self.content_length = Some(n)
                    }
                    _ => self.bad("invalid content-length"),
                }
                return;
            }
            b"range" => {
                self.ranges += 1;
                &mut self.range
            }
            b"if-match" => &mut self.if_match,
            b"if-none-match" => &mut self.if_none_match,
            b"if-modified-since" => &mut self.if_modified_since,
            b"if-unmodified-since" => &mut self.if_unmodified_since,
            b"if-range" => &mut self.if_range,
            b"accept-encoding" => &mut self.accept_encoding,
            b"user-agent" => &mut self.user_agent,
            b"referer" => &mut self.referer,
            b"priority" => &mut self.priority,
            _ => return,
        };
        // As HTTP/1.1 does: list fields combine (§8.2.3 lets a client split
        // one, cookies aside); a repeated Range is ignored.
        if name == b"range" && self.ranges > 1 {
            *slot = None;
            return;
        }
        match slot {
            Some(prev) => {
                prev.push_str(", ");
                prev.push_str(v);
            }
            None => *slot = Some(v.to_string()),
        }
    }

    /// What the request holds on the heap: the bytes a waiting request
    /// weighs.
    pub fn heap_size(&self) -> usize {
        let opt = |o: &Option<String>| o.as_ref().map_or(0, String::capacity);
        std::mem::size_of::<Head>()
            + self.method_text.capacity()
            + self.path.capacity()
            + [
                &self.authority,
                &self.host,
                &self.range,
                &self.if_match,
                &self.if_none_match,
                &self.if_modified_since,
                &self.if_unmodified_since,
                &self.if_range,
                &self.accept_encoding,
                &self.user_agent,
                &self.referer,
                &self.priority,
            ]
            .into_iter()
            .map(opt)
            .sum::<usize>()
    }

    /// A pseudo-header came (not allowed in trailers, §8.1).
    pub fn has_pseudo(&self) -> bool {
        self.pseudo_seen != 0
    }

    /// After the last field: the request is well-formed, or why not.
    pub fn finish(&mut self) -> Result<(), &'static str> {
        if let Some(why) = self.malformed {
            return Err(why);
        }
        if self.pseudo_seen & P_METHOD == 0 {
            return Err("no :method");
        }
        if self.method_text == "CONNECT" {
            // §8.5: only :method and :authority.
            if self.pseudo_seen != P_METHOD | P_AUTHORITY {
                return Err("CONNECT with :scheme or :path, or without :authority");
            }
            return Ok(());
        }
        if self.pseudo_seen & P_SCHEME == 0 || self.pseudo_seen & P_PATH == 0 {
            return Err("no :scheme or :path");
        }
        if let (Some(a), Some(h)) = (&self.authority, &self.host) {
            if a != h {
                return Err(":authority and host differ");
            }
        }
        Ok(())
    }

    /// The request as the handler sees it.
    pub fn request(&self) -> Request<'_> {
        Request {
            method: self.method.as_ref().unwrap_or(&Method::Other),
            target: &self.path,
            authority: self.authority.as_deref().or(self.host.as_deref()),
            preconditions: Preconditions {
                if_match: self.if_match.as_deref(),
                if_none_match: self.if_none_match.as_deref(),
                if_modified_since: self.if_modified_since.as_deref(),
                if_unmodified_since: self.if_unmodified_since.as_deref(),
                if_range: self.if_range.as_deref(),
            },
            range: self.range.as_deref(),
            accept_encoding: self.accept_encoding.as_deref(),
            client_verified: false,
        }
    }
}

/// RFC 9110 §5.6.2 token characters.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The urgency (0–7, default 3) and incremental flag of an RFC 9218
/// `priority` value (a structured-field dictionary: `u=N`, `i`); what does
/// not parse keeps the defaults (§4: ignore what is not understood).
pub(super) fn priority(value: &str) -> (u8, bool) {
    let (mut urgency, mut incremental) = (DEFAULT_URGENCY, false);
    for member in value.split(',') {
        // Parameters (`;…`) are ignored.
        let member = member.split(';').next().unwrap_or("").trim();
        let (key, val) = member.split_once('=').unwrap_or((member, "?1"));
        let val = val.trim();
        match key.trim() {
            "u" => {
                if let Ok(u) = val.parse::<u8>() {
                    if u <= 7 {
                        urgency = u;
                    }
                }
            }
            "i" => match val {
                "?1" => incremental = true,
                "?0" => incremental = false,
                _ => {}
            },
            _ => {}
        }
    }
    (urgency, incremental)
}

pub(super) const DEFAULT_URGENCY: u8 = 3;

#[cfg(test)]
mod tests {
    use super::*;

    fn head(fields: &[(&str, &str)]) -> Head {
        let mut h = Head::default();
        for (n, v) in fields {
            h.field(n.as_bytes(), v.as_bytes());
        }
        h
    }

    const GET: [(&str, &str); 4] = [
        (":method", "GET"),
        (":scheme", "https"),
        (":authority", "Example.com:443"),
        (":path", "/a?b"),
    ];

    #[test]
    fn a_get_becomes_the_handlers_request() {
        let mut fields = GET.to_vec();
        fields.extend([
            ("range", "bytes=0-1"),
            ("if-none-match", "\"x\""),
            ("accept-encoding", "br"),
            ("accept-encoding", "gzip"),
        ]);
        let mut h = head(&fields);
        assert_eq!(h.finish(), Ok(()));
        let r = h.request();
        assert_eq!(*r.method, Method::Get);
        assert_eq!((r.target, r.authority), ("/a?b", Some("example.com")));
        assert_eq!(r.range, Some("bytes=0-1"));
        assert_eq!(r.preconditions.if_none_match, Some("\"x\""));
        assert_eq!(r.accept_encoding, Some("br, gzip"));
    }

    #[test]
    fn malformed_requests_say_why() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[(":method", "GET"), (":path", "/")], "no :scheme or :path"),
            (&[(":scheme", "https"), (":path", "/")], "no :method"),
            (
                &[(":method", "GET"), (":scheme", "https"), (":path", "")],
                "empty :path",
            ),
            (
                &[(":method", "GET"), (":method", "GET")],
                "repeated pseudo-header",
            ),
            (
                &[(":method", "GET"), ("a", "b"), (":path", "/")],
                "pseudo-header after a regular field",
            ),
            (
                &[(":method", "GET"), (":foo", "x")],
                "unknown pseudo-header",
            ),
            (&[(":method", "GET"), ("Accept", "x")], "invalid field name"),
            (
                &[(":method", "GET"), ("connection", "close")],
                "connection-specific field",
            ),
            (
                &[(":method", "GET"), ("te", "gzip")],
                "TE other than trailers",
            ),
            (
                &[(":method", "GET"), ("x", " padded")],
                "invalid field value",
            ),
            (&[(":method", "GET"), ("x", "a\nb")], "invalid field value"),
            (
                &[(":method", "CONNECT"), (":authority", "a"), (":path", "/")],
                "CONNECT with :scheme or :path, or without :authority",
            ),
            (
                &[
                    (":method", "GET"),
                    (":scheme", "https"),
                    (":path", "/"),
                    (":authority", "a"),
                    ("host", "b"),
                ],
                ":authority and host differ",
            ),
            (
                &[
                    (":method", "GET"),
                    ("content-length", "1"),
                    ("content-length", "2"),
                ],
                "invalid content-length",
            ),
        ];
        for (fields, why) in cases {
            assert_eq!(head(fields).finish(), Err(*why), "{fields:?}");
        }
        // TE: trailers is allowed, a repeated Range ignored.
        let mut fields = GET.to_vec();
        fields.extend([
            ("te", "trailers"),
            ("range", "bytes=0-1"),
            ("range", "bytes=2-3"),
        ]);
        let mut h = head(&fields);
        assert_eq!(h.finish(), Ok(()));
        assert_eq!(h.range, None);
    }

    #[test]
    fn priorities_follow_rfc_9218_and_ignore_what_they_do_not_know() {
        assert_eq!(priority(""), (3, false));
        assert_eq!(priority("u=0"), (0, false));
        assert_eq!(priority("u=5, i"), (5, true));
        assert_eq!(priority("i=?0, u=1"), (1, false));
        assert_eq!(priority("u=9, i=x, foo=bar"), (3, false));
        assert_eq!(priority("u=2;ext, i;x=1"), (2, true));
    }
}
