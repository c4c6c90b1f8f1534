//! Preconditions (RFC 9110 13.2.2): If-Match, If-Unmodified-Since,
//! If-None-Match, If-Modified-Since, and If-Range for range requests.

use super::request::RequestHead;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The latest time an HTTP date can express (9999-12-31 23:59:59 UTC).
/// Later file times are clamped to it (`httpdate` panics past it).
pub const LAST_HTTP_DATE: u64 = 253_402_300_799;

/// The validators of a file.
#[derive(Debug, Clone)]
pub struct Validators {
    /// Strong entity tag, quoted.
    pub etag: ETag,
    /// Modification time, truncated to whole seconds (HTTP dates).
    pub modified: SystemTime,
}

impl Validators {
    pub fn new(size: u64, mtime_secs: i64, mtime_nsec: i64) -> Self {
        Validators::coded(size, mtime_secs, mtime_nsec, "")
    }

    /// The validators of a precompressed representation: its own file's,
    /// and the coding in the tag (`"…-br"`), so that no tag of one
    /// representation can ever match another (RFC 9110 8.8.3).
    pub fn coded(size: u64, mtime_secs: i64, mtime_nsec: i64, coding: &str) -> Self {
        let secs = mtime_secs.max(0) as u64;
        Validators {
            etag: ETag::new(size, secs, mtime_nsec.max(0) as u64, coding),
            modified: UNIX_EPOCH + Duration::from_secs(secs.min(LAST_HTTP_DATE)),
        }
    }
}

/// A strong entity tag, quoted, nginx-style (`"mtime.nsec-size"` in hex),
/// kept inline: no allocation per response.
#[derive(Clone, Copy)]
pub struct ETag {
    buf: [u8; ETag::MAX],
    len: u8,
}

impl ETag {
    /// `"` + 16 + `.` + 8 (nanoseconds < 2^30) + `-` + 16 + `"` = 44, and
    /// `-` and a coding name (`zstd`, the longest) for a precompressed file.
    const MAX: usize = 56;

    fn new(size: u64, secs: u64, nsec: u64, coding: &str) -> ETag {
        use std::io::Write as _;
        let mut buf = [0u8; ETag::MAX];
        let mut w = &mut buf[..];
        let dash = if coding.is_empty() { "" } else { "-" };
        // Cannot fail for the codings there are (see MAX); a longer one
        // would be cut, which still differs from the identity's tag.
        let _ = write!(w, "\"{secs:x}.{nsec:x}-{size:x}{dash}{coding}\"");
        let len = (ETag::MAX - w.len()) as u8;
        ETag { buf, len }
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII was written.
        std::str::from_utf8(&self.buf[..self.len as usize]).unwrap_or("")
    }
}

impl std::fmt::Display for ETag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Debug for ETag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Proceed,
    NotModified,
    PreconditionFailed,
}

/// The request fields the preconditions read, whatever the protocol
/// carried them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Preconditions<'a> {
    pub if_match: Option<&'a str>,
    pub if_none_match: Option<&'a str>,
    pub if_modified_since: Option<&'a str>,
    pub if_unmodified_since: Option<&'a str>,
    pub if_range: Option<&'a str>,
}

impl<'a> From<&'a RequestHead> for Preconditions<'a> {
    fn from(h: &'a RequestHead) -> Self {
        Preconditions {
            if_match: h.if_match.as_deref(),
            if_none_match: h.if_none_match.as_deref(),
            if_modified_since: h.if_modified_since.as_deref(),
            if_unmodified_since: h.if_unmodified_since.as_deref(),
            if_range: h.if_range.as_deref(),
        }
    }
}

pub fn evaluate<'a>(req: impl Into<Preconditions<'a>>, v: &Validators) -> Outcome {
    let req = req.into();
    if let Some(im) = req.if_match {
        if !list_matches(im, v.etag.as_str(), true) {
            return Outcome::PreconditionFailed;
        }
    } else if let Some(date) = req.if_unmodified_since.and_then(parse_date) {
        if v.modified > date {
            return Outcome::PreconditionFailed;
        }
    }
    if let Some(inm) = req.if_none_match {
        if list_matches(inm, v.etag.as_str(), false) {
            return Outcome::NotModified;
        }
    } else if let Some(date) = req.if_modified_since.and_then(parse_date) {
        if v.modified <= date {
            return Outcome::NotModified;
        }
    }
    Outcome::Proceed
}

/// Whether a Range may be honoured given If-Range (absent: yes).
pub fn if_range_allows<'a>(req: impl Into<Preconditions<'a>>, v: &Validators) -> bool {
    match req.into().if_range.map(str::trim) {
        None => true,
        Some(tag) if tag.starts_with('"') => tag == v.etag.as_str(),
        Some(tag) if tag.starts_with("W/") => false,
        Some(date) => parse_date(date) == Some(v.modified),
    }
}

fn parse_date(s: &str) -> Option<SystemTime> {
    httpdate::parse_http_date(s.trim()).ok()
}

/// Does a comma-separated entity-tag list (or `*`) match `etag`?
fn list_matches(list: &str, etag: &str, strong: bool) -> bool {
    fn bare(t: &str) -> &str {
        t.trim().trim_start_matches("W/")
    }
    list.split(',').map(str::trim).any(|t| {
        t == "*"
            || if strong {
                !t.starts_with("W/") && t == etag
            } else {
                bare(t) == bare(etag)
            }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> RequestHead {
        crate::http::request::parse(
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
            &crate::http::request::HeadLimits {
                request_line: 100,
                header_bytes: 1000,
                headers: 10,
            },
        )
        .unwrap()
        .unwrap()
    }

    #[test]
    fn etag_is_nginx_style_and_fits_the_largest_values() {
        assert_eq!(
            Validators::new(10, 1_000_000, 5).etag.as_str(),
            "\"f4240.5-a\""
        );
        let big = Validators::new(u64::MAX, i64::MAX, 999_999_999).etag;
        assert_eq!(
            big.as_str(),
            "\"7fffffffffffffff.3b9ac9ff-ffffffffffffffff\""
        );
        assert_eq!(Validators::new(0, -5, -1).etag.as_str(), "\"0.0-0\"");
        assert_eq!(
            Validators::coded(10, 1_000_000, 5, "br").etag.as_str(),
            "\"f4240.5-a-br\""
        );
        assert_eq!(
            Validators::coded(u64::MAX, i64::MAX, 999_999_999, "zstd")
                .etag
                .as_str(),
            "\"7fffffffffffffff.3b9ac9ff-ffffffffffffffff-zstd\""
        );
    }

    #[test]
    fn none_match_and_modified_since() {
        let v = Validators::new(10, 1_000_000, 5);
        let mut r = req();
        assert_eq!(evaluate(&r, &v), Outcome::Proceed);
        r.if_none_match = Some(format!("\"x\", W/{}", v.etag));
        assert_eq!(evaluate(&r, &v), Outcome::NotModified);
        r.if_none_match = Some("\"other\"".into());
        r.if_modified_since = Some(httpdate::fmt_http_date(v.modified));
        // If-None-Match present: If-Modified-Since is ignored.
        assert_eq!(evaluate(&r, &v), Outcome::Proceed);
        r.if_none_match = None;
        assert_eq!(evaluate(&r, &v), Outcome::NotModified);
        r.if_modified_since = Some(httpdate::fmt_http_date(v.modified - Duration::from_secs(1)));
        assert_eq!(evaluate(&r, &v), Outcome::Proceed);
    }

    #[test]
    fn match_and_if_range() {
        let v = Validators::new(10, 1_000_000, 5);
        let mut r = req();
        r.if_match = Some("\"nope\"".into());
        assert_eq!(evaluate(&r, &v), Outcome::PreconditionFailed);
        r.if_match = Some(format!("W/{}", v.etag));
        assert_eq!(evaluate(&r, &v), Outcome::PreconditionFailed);
        r.if_match = Some("*".into());
        assert_eq!(evaluate(&r, &v), Outcome::Proceed);
        r.if_range = Some(v.etag.to_string());
        assert!(if_range_allows(&r, &v));
        r.if_range = Some("\"old\"".into());
        assert!(!if_range_allows(&r, &v));
        r.if_range = Some(httpdate::fmt_http_date(v.modified));
        assert!(if_range_allows(&r, &v));
    }
}
