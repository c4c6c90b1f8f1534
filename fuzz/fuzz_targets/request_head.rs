//! The request head parser (`http::request::parse`) on arbitrary bytes,
//! under the default limits and under small ones. Beyond "no panic":
//! a parsed head lies within the input and the limits, does not depend on
//! the bytes after it (pipelining), and every shorter prefix of it asks for
//! more bytes instead of failing (a head split across reads is served); an
//! incomplete head never exceeds the header limit (memory per connection
//! stays bounded); an HTTP/1.1 head has exactly one Host line, an HTTP/1.0
//! one at most (the smuggling/virtual-host rule).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tlsfront::http::request::{parse, Body, HeadLimits};

const LIMITS: [HeadLimits; 2] = [
    // The defaults of `config::Limits`.
    HeadLimits {
        request_line: 8 * 1024,
        header_bytes: 16 * 1024,
        headers: 100,
    },
    // Near the smallest a config file may set, so inputs reach the limits.
    HeadLimits {
        request_line: 16,
        header_bytes: 64,
        headers: 2,
    },
];

fn host_lines(head: &[u8]) -> usize {
    head.split(|&b| b == b'\n')
        .filter(|l| l.len() >= 5 && l[..5].eq_ignore_ascii_case(b"host:"))
        .count()
}

fuzz_target!(|buf: &[u8]| {
    for limits in &LIMITS {
        match parse(buf, limits) {
            Ok(Some(h)) => {
                assert!(h.head_len > 0 && h.head_len <= buf.len());
                assert!(h.head_len <= limits.header_bytes);
                let head = &buf[..h.head_len];
                assert!(head.ends_with(b"\n"), "a head ends with its empty line");
                assert!(!h.target.is_empty());
                assert!(h.minor <= 1);
                if let Body::Length(n) = h.body {
                    assert!(n > 0);
                }
                if h.body == Body::Chunked {
                    assert_eq!(h.minor, 1, "chunked is HTTP/1.1 only");
                }
                let hosts = host_lines(head);
                assert!(hosts <= 1, "{hosts} Host lines accepted");
                if h.minor == 1 {
                    assert_eq!(hosts, 1, "HTTP/1.1 without a Host line accepted");
                }
                // The head alone parses the same: nothing after it was read.
                let alone = parse(head, limits).expect("the head alone parses");
                let alone = alone.expect("the head alone is complete");
                assert_eq!(format!("{alone:?}"), format!("{h:?}"));
                // Every prefix is incomplete, not an error. All of them for
                // small heads; a sample for long ones (quadratic otherwise).
                let step = (h.head_len / 256).max(1);
                for k in (0..h.head_len).step_by(step) {
                    match parse(&buf[..k], limits) {
                        Ok(None) => {}
                        other => panic!("prefix of {k} bytes gave {other:?}"),
                    }
                }
            }
            Ok(None) => {
                assert!(
                    buf.len() < limits.header_bytes,
                    "incomplete head of {} bytes past the limit",
                    buf.len()
                );
            }
            Err(e) => assert!(matches!(e.status(), 400 | 414 | 431 | 505)),
        }
    }
});
