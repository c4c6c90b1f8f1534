//! The `Range` header, single range only (RFC 9110 14.2). Multiple ranges
//! and syntax we do not understand are ignored (the full body is sent),
//! which the RFC allows; a range wholly past the end is unsatisfiable.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeResult {
    /// Send the whole representation (no usable Range).
    Full,
    /// Send bytes `start..=end`.
    Partial { start: u64, end: u64 },
    /// 416, with `Content-Range: bytes */size`.
    Unsatisfiable,
}

pub fn parse(header: &str, size: u64) -> RangeResult {
    let Some((unit, spec)) = header.split_once('=') else {
        return RangeResult::Full;
    };
    if !unit.trim().eq_ignore_ascii_case("bytes") || spec.contains(',') {
        return RangeResult::Full;
    }
    let Some((first, last)) = spec.trim().split_once('-') else {
        return RangeResult::Full;
    };
    let num = |s: &str| -> Option<u64> {
        let s = s.trim();
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    match (first.trim().is_empty(), last.trim().is_empty()) {
        // "-N": the last N bytes.
        (true, false) => match num(last) {
            Some(0) => RangeResult::Unsatisfiable,
            // The last N bytes of nothing: all of it, i.e. an empty 200
            // (RFC 9110 14.1.1: a suffix range is satisfiable on an empty
            // representation).
            Some(_) if size == 0 => RangeResult::Full,
            Some(n) => RangeResult::Partial {
                start: size.saturating_sub(n),
                end: size - 1,
            },
            None => RangeResult::Full,
        },
        // "A-": from A to the end.
        (false, true) => match num(first) {
            Some(a) if a >= size => RangeResult::Unsatisfiable,
            Some(a) => RangeResult::Partial {
                start: a,
                end: size - 1,
            },
            None => RangeResult::Full,
        },
        // "A-B".
        (false, false) => match (num(first), num(last)) {
            (Some(a), Some(b)) if a > b => RangeResult::Full,
            (Some(a), Some(_)) if a >= size => RangeResult::Unsatisfiable,
            (Some(a), Some(b)) => RangeResult::Partial {
                start: a,
                end: b.min(size - 1),
            },
            _ => RangeResult::Full,
        },
        (true, true) => RangeResult::Full,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RangeResult::*;

    #[test]
    fn ranges() {
        assert_eq!(parse("bytes=0-0", 10), Partial { start: 0, end: 0 });
        assert_eq!(parse("bytes=2-", 10), Partial { start: 2, end: 9 });
        assert_eq!(parse("bytes=-3", 10), Partial { start: 7, end: 9 });
        assert_eq!(parse("bytes=-30", 10), Partial { start: 0, end: 9 });
        assert_eq!(parse("bytes=5-100", 10), Partial { start: 5, end: 9 });
        assert_eq!(parse("Bytes = 1-2", 10), Partial { start: 1, end: 2 });
    }

    #[test]
    fn unsatisfiable_and_ignored() {
        assert_eq!(parse("bytes=10-", 10), Unsatisfiable);
        assert_eq!(parse("bytes=10-20", 10), Unsatisfiable);
        assert_eq!(parse("bytes=-0", 10), Unsatisfiable);
        assert_eq!(parse("bytes=0-", 0), Unsatisfiable);
        assert_eq!(parse("bytes=-5", 0), Full);
        assert_eq!(parse("bytes=-0", 0), Unsatisfiable);
        assert_eq!(parse("bytes=0-0", 0), Unsatisfiable);
        assert_eq!(parse("bytes=5-2", 10), Full);
        assert_eq!(parse("bytes=0-1,3-4", 10), Full);
        assert_eq!(parse("items=0-1", 10), Full);
        assert_eq!(parse("bytes=a-b", 10), Full);
        assert_eq!(parse("bytes=-", 10), Full);
        assert_eq!(parse("bytes=+1-2", 10), Full);
    }
}
