//! Request-target to a path under the document root: query stripped,
//! percent-decoded, dot-segments resolved. Anything that could name a file
//! outside the root, or be read differently by another component (NUL,
//! backslash, `..` above the root), is refused here; symlinks are dealt with
//! by `openat2(RESOLVE_BENEATH)` in `files`.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// A normalised path, relative to the document root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NormPath {
    /// The decoded segments joined by `/`: none of them empty, `.` or `..`,
    /// none containing `/` or NUL. Empty for the root. One buffer, so a
    /// request costs one allocation here.
    rel: Vec<u8>,
    /// The target named a directory (ended in `/`).
    pub trailing_slash: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("request target is not an absolute path")]
    NotAbsolute,
    #[error("invalid percent-encoding")]
    BadEncoding,
    #[error("NUL byte in path")]
    Nul,
    #[error("backslash in path")]
    Backslash,
    #[error("path climbs above the document root")]
    AboveRoot,
}

impl NormPath {
    /// The relative filesystem path ("." for the root).
    pub fn to_relative(&self) -> &Path {
        if self.rel.is_empty() {
            return Path::new(".");
        }
        Path::new(OsStr::from_bytes(&self.rel))
    }

    /// The decoded segments joined by `/`, without a leading or trailing
    /// one (empty for the root).
    pub fn as_bytes(&self) -> &[u8] {
        &self.rel
    }

    /// The decoded segments, in order.
    pub fn segments(&self) -> impl Iterator<Item = &[u8]> {
        self.rel.split(|&b| b == b'/').filter(|s| !s.is_empty())
    }

    /// Whether this is the document root itself.
    pub fn is_root(&self) -> bool {
        self.rel.is_empty()
    }

    /// This directory's entry `name` (one segment: no `/`, not `.`/`..`).
    pub fn child(&self, name: &[u8], trailing_slash: bool) -> NormPath {
        debug_assert!(!name.contains(&b'/') && name != b"." && name != b"..");
        let mut rel = Vec::with_capacity(self.rel.len() + 1 + name.len());
        rel.extend_from_slice(&self.rel);
        if !rel.is_empty() {
            rel.push(b'/');
        }
        rel.extend_from_slice(name);
        NormPath {
            rel,
            trailing_slash,
        }
    }

    /// The path as a URL path, percent-encoded, with a leading `/`.
    pub fn to_url(&self) -> String {
        use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
        const SEGMENT: &AsciiSet = &CONTROLS
            .add(b' ')
            .add(b'"')
            .add(b'#')
            .add(b'%')
            .add(b'<')
            .add(b'>')
            .add(b'?')
            .add(b'`')
            .add(b'{')
            .add(b'}')
            .add(b'/')
            .add(b'\\');
        let mut out = String::new();
        for s in self.segments() {
            out.push('/');
            match std::str::from_utf8(s) {
                Ok(s) => out.extend(utf8_percent_encode(s, SEGMENT)),
                Err(_) => out.extend(percent_encoding::percent_encode(s, SEGMENT)),
            }
        }
        if self.trailing_slash || self.rel.is_empty() {
            out.push('/');
        }
        out
    }
}

/// Normalise an origin-form request-target (absolute-form was turned into
/// origin-form by `request::parse`).
pub fn normalize(target: &str) -> Result<NormPath, PathError> {
    if !target.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    let path = target;
    let path = path.split(['?', '#']).next().unwrap_or("");
    let decoded = decode(path.as_bytes())?;
    if decoded.contains(&0) {
        return Err(PathError::Nul);
    }
    if decoded.contains(&b'\\') {
        return Err(PathError::Backslash);
    }
    // Resolve dot-segments in place: every segment of `rel` is preceded by
    // a `/` (the path is absolute), so the output, one `/` shorter, never
    // overtakes the input being read.
    let mut rel = decoded;
    let (mut read, mut len) = (0, 0);
    let mut trailing_slash = false;
    while read <= rel.len() {
        let end = rel[read..]
            .iter()
            .position(|&b| b == b'/')
            .map_or(rel.len(), |i| read + i);
        trailing_slash = true;
        match &rel[read..end] {
            b"" | b"." => {}
            b".." => {
                if len == 0 {
                    return Err(PathError::AboveRoot);
                }
                len = rel[..len].iter().rposition(|&b| b == b'/').unwrap_or(0);
            }
            _ => {
                if len > 0 {
                    rel[len] = b'/';
                    len += 1;
                }
                rel.copy_within(read..end, len);
                len += end - read;
                trailing_slash = false;
            }
        }
        read = end + 1;
    }
    rel.truncate(len);
    Ok(NormPath {
        rel,
        trailing_slash,
    })
}

/// The query of an origin-form target (after `?`, before any `#`), if any.
pub fn query(target: &str) -> Option<&str> {
    let before_fragment = target.split('#').next().unwrap_or(target);
    before_fragment.split_once('?').map(|(_, q)| q)
}

fn decode(input: &[u8]) -> Result<Vec<u8>, PathError> {
    let hex = |b: u8| match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    };
    let mut out = Vec::with_capacity(input.len());
    let mut i = 0;
    while i < input.len() {
        if input[i] == b'%' {
            let (Some(h), Some(l)) = (
                input.get(i + 1).copied().and_then(hex),
                input.get(i + 2).copied().and_then(hex),
            ) else {
                return Err(PathError::BadEncoding);
            };
            out.push(h << 4 | l);
            i += 3;
        } else {
            out.push(input[i]);
            i += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rel(t: &str) -> Result<String, PathError> {
        normalize(t).map(|p| p.to_relative().to_string_lossy().into_owned())
    }

    #[test]
    fn normalises() {
        assert_eq!(rel("/").unwrap(), ".");
        assert_eq!(rel("/a/b.txt?x=1").unwrap(), "a/b.txt");
        assert_eq!(rel("/a/./b/../c").unwrap(), "a/c");
        assert_eq!(rel("//a///b").unwrap(), "a/b");
        assert_eq!(rel("/a%20b").unwrap(), "a b");
        assert_eq!(rel("/a/b/../../c/./d/").unwrap(), "c/d");
        assert_eq!(rel("/abc/../abc").unwrap(), "abc");
        assert_eq!(rel("/a/bb/ccc/..").unwrap(), "a/bb");
        assert_eq!(rel("/./.././"), Err(PathError::AboveRoot));
        assert_eq!(rel("/x/%2e/y%2f..%2Fz").unwrap(), "x/z");
        let p = normalize("/a/b%2Fc").unwrap();
        assert_eq!(p.segments().collect::<Vec<_>>(), [&b"a"[..], b"b", b"c"]);
        assert_eq!(p.child(b"d", true).to_url(), "/a/b/c/d/");
        assert_eq!(normalize("/").unwrap().child(b"e", false).to_url(), "/e");
        assert!(normalize("/a/").unwrap().trailing_slash);
        assert!(normalize("/a/..").unwrap().trailing_slash);
        assert!(!normalize("/a").unwrap().trailing_slash);
    }

    #[test]
    fn refuses_escapes() {
        assert_eq!(rel("/../etc/passwd"), Err(PathError::AboveRoot));
        assert_eq!(rel("/a/../../etc"), Err(PathError::AboveRoot));
        assert_eq!(rel("/%2e%2e/etc/passwd"), Err(PathError::AboveRoot));
        assert_eq!(rel("/%2E%2E%2fetc"), Err(PathError::AboveRoot));
        assert_eq!(rel("/a%00.txt"), Err(PathError::Nul));
        assert_eq!(rel("/..%5c..%5cetc"), Err(PathError::Backslash));
        assert_eq!(rel("/a%zz"), Err(PathError::BadEncoding));
        assert_eq!(rel("/a%2"), Err(PathError::BadEncoding));
        assert_eq!(rel("a/b"), Err(PathError::NotAbsolute));
        assert_eq!(rel("*"), Err(PathError::NotAbsolute));
        assert_eq!(rel("https://h/x"), Err(PathError::NotAbsolute));
    }

    #[test]
    fn queries() {
        assert_eq!(query("/a"), None);
        assert_eq!(query("/a?"), Some(""));
        assert_eq!(query("/a?b=1&c=/d?e"), Some("b=1&c=/d?e"));
        assert_eq!(query("/a?b#c"), Some("b"));
        assert_eq!(query("/a#c?d"), None);
    }

    #[test]
    fn url_round_trip() {
        let p = normalize("/a%20b/c%3F/").unwrap();
        assert_eq!(p.to_url(), "/a%20b/c%3F/");
        assert_eq!(normalize(&p.to_url()).unwrap(), p);
    }
}
