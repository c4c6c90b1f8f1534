//! The Range header (`http::range::parse`). The first 8 input bytes pick the
//! representation's size (also tried: 0, 1 and u64::MAX), the rest is the
//! header. A partial range always lies within the representation
//! (start <= end < size), so the file is never read or announced past its
//! end; and for the canonical forms (`bytes=A-B`, `bytes=A-`, `bytes=-N`)
//! the result is the one RFC 9110 14.1.2 gives, from a reference written
//! here independently.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tlsfront::http::range::{parse, RangeResult};

/// RFC 9110 for one canonical range spec; `None` for anything else.
fn reference(header: &str, size: u64) -> Option<RangeResult> {
    let spec = header.strip_prefix("bytes=")?;
    let (first, last) = spec.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let num = |s: &str| s.parse::<u64>().ok();
    Some(match (first.is_empty(), last.is_empty()) {
        (true, false) if digits(last) => {
            let n = num(last)?;
            if n == 0 {
                RangeResult::Unsatisfiable
            } else if size == 0 {
                // 14.1.1: a suffix range is satisfiable on an empty
                // representation; all of it is nothing: an empty 200.
                RangeResult::Full
            } else {
                RangeResult::Partial {
                    start: size.saturating_sub(n),
                    end: size - 1,
                }
            }
        }
        (false, true) if digits(first) => {
            let a = num(first)?;
            if a >= size {
                RangeResult::Unsatisfiable
            } else {
                RangeResult::Partial {
                    start: a,
                    end: size - 1,
                }
            }
        }
        (false, false) if digits(first) && digits(last) => {
            let (a, b) = (num(first)?, num(last)?);
            if a > b {
                // Invalid: ignored (the whole representation is sent).
                RangeResult::Full
            } else if a >= size {
                RangeResult::Unsatisfiable
            } else {
                RangeResult::Partial {
                    start: a,
                    end: b.min(size - 1),
                }
            }
        }
        _ => return None,
    })
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let (size, header) = data.split_at(8);
    let size = u64::from_le_bytes(size.try_into().unwrap());
    let header = String::from_utf8_lossy(header);
    // Small sizes are where the edge cases are.
    for size in [size, size % 1024, 0, 1, u64::MAX] {
        let got = parse(&header, size);
        if let RangeResult::Partial { start, end } = got {
            assert!(start <= end && end < size, "{got:?} for size {size}");
        }
        if let Some(want) = reference(&header, size) {
            assert_eq!(got, want, "{header:?} for size {size}");
        }
    }
});
