//! Request-target to a path under the document root
//! (`http::path::normalize`). Whatever the target: the result is relative
//! and made only of normal components (no `..`, no `.`, no empty segment,
//! no root or prefix: it cannot escape the document root), holds no NUL or
//! backslash, and its URL form (`to_url`, used in redirects and directory
//! listings) normalises back to the same path. A child entry's URL
//! round-trips too.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Component;
use tlsfront::http::path::{normalize, NormPath};

fn check(p: &NormPath) {
    let rel = p.to_relative();
    let bytes = rel.as_os_str().as_encoded_bytes();
    assert!(!bytes.contains(&0), "NUL in {rel:?}");
    assert!(!bytes.contains(&b'\\'), "backslash in {rel:?}");
    if p.is_root() {
        assert_eq!(bytes, b".");
        assert_eq!(p.segments().count(), 0);
    } else {
        assert!(!bytes.starts_with(b"/") && !bytes.ends_with(b"/"));
        assert!(!bytes.windows(2).any(|w| w == b"//"));
        assert!(rel.components().all(|c| matches!(c, Component::Normal(_))));
        assert_eq!(rel.components().count(), p.segments().count());
    }
    for seg in p.segments() {
        assert!(!seg.is_empty() && seg != b"." && seg != b"..");
        assert!(!seg.contains(&b'/'));
    }
    let url = p.to_url();
    assert!(url.starts_with('/'));
    assert_eq!(
        normalize(&url).as_ref(),
        Ok(p),
        "{url:?} did not round-trip"
    );
}

fuzz_target!(|data: &[u8]| {
    let target = String::from_utf8_lossy(data);
    let Ok(p) = normalize(&target) else {
        return;
    };
    check(&p);
    // A directory listing links to its entries through `child`; any name a
    // file system can hold (no `/`, no NUL, not `.`/`..`) round-trips.
    let name: Vec<u8> = data
        .iter()
        .copied()
        .filter(|&b| b != b'/' && b != 0)
        .take(64)
        .collect();
    if !name.is_empty() && name != b"." && name != b".." && !name.contains(&b'\\') {
        for dir in [false, true] {
            check(&p.child(&name, dir));
        }
    }
});
