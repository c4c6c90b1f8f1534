//! HTTP/1.1 for a static file server: request heads, target paths, ranges,
//! preconditions and response heads, with no I/O (`serve` drives them over
//! a TLS transport).

pub mod conditional;
pub mod encoding;
pub mod h2;
pub mod path;
pub mod range;
pub mod request;
pub mod response;
pub mod site_headers;

#[cfg(test)]
mod no_panic_tests {
    //! Arbitrary bytes into every parser that sees client input: no panic,
    //! and what parses keeps its invariants.

    fn bytes(seed: &mut u64, max: usize) -> Vec<u8> {
        let mut next = || {
            *seed ^= *seed << 13;
            *seed ^= *seed >> 7;
            *seed ^= *seed << 17;
            *seed
        };
        let len = (next() as usize) % max;
        // Bias towards the bytes HTTP cares about.
        const ALPHABET: &[u8] =
            b"GET HEAD/ .%2e5c0:-,=\r\nHTTP/1.1Host:Range:bytes=If-None-Match\"W/*\\\x00\xff?#@[]https://Expect:100-continue";
        (0..len)
            .map(|_| {
                let r = next();
                if r % 4 == 0 {
                    r as u8
                } else {
                    ALPHABET[(r as usize >> 8) % ALPHABET.len()]
                }
            })
            .collect()
    }

    #[test]
    fn parsers_never_panic() {
        let limits = super::request::HeadLimits {
            request_line: 256,
            header_bytes: 512,
            headers: 16,
        };
        let mut seed = 0x1234_5678_9abc_def1u64;
        for _ in 0..20_000 {
            let b = bytes(&mut seed, 600);
            if let Ok(Some(h)) = super::request::parse(&b, &limits) {
                assert!(h.head_len <= b.len());
            }
            let _ = super::request::names_head(&b);
            if let Ok(h) = super::request::parse_host(&b) {
                assert!(!h.contains(['/', ' ', '@']) && !h.contains(".."), "{h:?}");
                assert_eq!(h, h.to_ascii_lowercase());
            }
            let s = String::from_utf8_lossy(&b);
            let _ = super::path::query(&s);
            if let Ok(p) = super::path::normalize(&s) {
                assert!(p
                    .segments()
                    .all(|seg| !seg.is_empty() && seg != b".." && seg != b"."));
                assert!(p.segments().all(|seg| !seg.contains(&0)));
                let rel = p.to_relative().as_os_str().as_encoded_bytes();
                assert!(!rel.starts_with(b"/") && !rel.ends_with(b"/"));
                assert!(!rel.windows(2).any(|w| w == b"//"));
            }
            for size in [0u64, 1, 100] {
                if let super::range::RangeResult::Partial { start, end } =
                    super::range::parse(&s, size)
                {
                    assert!(start <= end && end < size);
                }
            }
            let _ = crate::tls::sni_for_tests(&b);
            let all = super::encoding::Encoding::ALL;
            let ranked: Vec<_> = super::encoding::ranked(Some(&s), &all).collect();
            assert!(ranked.len() <= all.len());
            if let (Ok(pat), Ok(p)) = (
                super::site_headers::Pattern::new(&s),
                super::path::normalize("/a/b.css"),
            ) {
                let _ = pat.matches(&p);
            }
        }
    }
}
