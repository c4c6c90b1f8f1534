//! Preconditions (`http::conditional`). The input gives a file's validators
//! (size, mtime seconds and nanoseconds) and, one per line, If-Match,
//! If-None-Match, If-Modified-Since, If-Unmodified-Since and If-Range
//! (an empty line: header absent). Whatever they hold, evaluation does not
//! panic, and: the ETag is a quoted strong tag within its inline buffer;
//! the Last-Modified date formats and parses back to the same time (file
//! times past year 9999 are clamped); the file's own ETag and date satisfy
//! If-Match, If-Range and make If-None-Match/If-Modified-Since answer
//! 304; a weak tag never satisfies If-Range.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tlsfront::http::conditional::{evaluate, if_range_allows, Outcome, Validators};
use tlsfront::http::request::{parse, HeadLimits};

fuzz_target!(|data: &[u8]| {
    if data.len() < 20 {
        return;
    }
    let size = u64::from_le_bytes(data[0..8].try_into().unwrap());
    let secs = i64::from_le_bytes(data[8..16].try_into().unwrap());
    // `stat` gives nanoseconds below one second.
    let nsec = i64::from(u32::from_le_bytes(data[16..20].try_into().unwrap()) % 1_000_000_000);
    let v = Validators::new(size, secs, nsec);
    let etag = v.etag.as_str().to_string();
    assert!(etag.len() >= 2 && etag.len() <= 48);
    assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");
    assert!(etag[1..etag.len() - 1]
        .bytes()
        .all(|b| b.is_ascii_hexdigit() || b == b'.' || b == b'-'));
    let date = httpdate::fmt_http_date(v.modified);
    assert_eq!(
        httpdate::parse_http_date(&date).ok(),
        Some(v.modified),
        "{date}"
    );

    // The request's conditional headers, through the real head parser so
    // they are what a client can send.
    let text = String::from_utf8_lossy(&data[20..]);
    let mut lines = text.split('\n').map(|l| l.trim_end_matches('\r'));
    let mut head = String::from("GET / HTTP/1.1\r\nHost: x\r\n");
    for name in [
        "If-Match",
        "If-None-Match",
        "If-Modified-Since",
        "If-Unmodified-Since",
        "If-Range",
    ] {
        match lines.next() {
            Some(l) if !l.is_empty() => head.push_str(&format!("{name}: {l}\r\n")),
            _ => {}
        }
    }
    head.push_str("\r\n");
    let limits = HeadLimits {
        request_line: 8192,
        header_bytes: 1 << 20,
        headers: 100,
    };
    let Ok(Some(req)) = parse(head.as_bytes(), &limits) else {
        return;
    };
    let outcome = evaluate(&req, &v);
    let _ = if_range_allows(&req, &v);

    // What the server's own validators must satisfy, whatever else the
    // request holds.
    let mut r = req.clone();
    r.if_match = Some(etag.clone());
    r.if_unmodified_since = None;
    assert_ne!(
        evaluate(&r, &v),
        Outcome::PreconditionFailed,
        "If-Match: {etag}"
    );
    r.if_none_match = Some(etag.clone());
    assert_eq!(
        evaluate(&r, &v),
        Outcome::NotModified,
        "If-None-Match: {etag}"
    );
    r.if_none_match = None;
    r.if_modified_since = Some(date.clone());
    assert_eq!(
        evaluate(&r, &v),
        Outcome::NotModified,
        "If-Modified-Since: {date}"
    );
    r.if_match = None;
    r.if_unmodified_since = Some(date.clone());
    assert_ne!(
        evaluate(&r, &v),
        Outcome::PreconditionFailed,
        "If-Unmodified-Since: {date}"
    );
    r.if_range = Some(etag.clone());
    assert!(if_range_allows(&r, &v), "If-Range: {etag}");
    r.if_range = Some(date.clone());
    assert!(if_range_allows(&r, &v), "If-Range: {date}");
    r.if_range = Some(format!("W/{etag}"));
    assert!(!if_range_allows(&r, &v), "If-Range: W/{etag}");
    // If-None-Match takes precedence over If-Modified-Since (RFC 9110
    // 13.1.3): with a list that cannot match, the date is not consulted.
    if req.if_none_match.is_some() && outcome == Outcome::NotModified {
        let mut r = req.clone();
        r.if_modified_since = None;
        assert_eq!(evaluate(&r, &v), Outcome::NotModified);
    }
});
