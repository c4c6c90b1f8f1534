//! Response headers a site adds (`headers`, and `[[site.paths]]` rules
//! with a `match` pattern): what may be set, the pattern language, and the
//! merged list each response gets. Everything is merged when the config is
//! resolved, so a response only picks a list and appends its bytes.

use super::path::NormPath;
use super::response::Head;
use std::collections::BTreeMap;

/// One header as written into responses.
pub type Header = (String, String);

/// The headers of a site: its own, and those of each path rule already
/// merged with them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SiteHeaders {
    site: Vec<Header>,
    paths: Vec<(Pattern, Vec<Header>)>,
}

impl SiteHeaders {
    /// `defaults` (top level), overridden by `site`, and each rule
    /// overriding both; rules keep their order (the first match applies).
    /// All of them must have been checked with [`check`].
    pub fn new(
        defaults: &BTreeMap<String, String>,
        site: &BTreeMap<String, String>,
        rules: Vec<(Pattern, BTreeMap<String, String>)>,
    ) -> SiteHeaders {
        let mut merged = Vec::new();
        overlay(&mut merged, defaults);
        overlay(&mut merged, site);
        let paths = rules
            .into_iter()
            .map(|(p, h)| {
                let mut m = merged.clone();
                overlay(&mut m, &h);
                (p, m)
            })
            .collect();
        SiteHeaders {
            site: merged,
            paths,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.site.is_empty() && self.paths.iter().all(|(_, h)| h.is_empty())
    }

    /// A one-line summary (for `config check`).
    pub fn describe(&self) -> String {
        let names = |h: &[Header]| {
            let v: Vec<&str> = h.iter().map(|(k, _)| k.as_str()).collect();
            if v.is_empty() {
                "none".to_string()
            } else {
                v.join(", ")
            }
        };
        let mut s = names(&self.site);
        for (p, h) in &self.paths {
            s.push_str(&format!("; {} gets {}", p.as_str(), names(h)));
        }
        s
    }

    /// The headers for a response to `path` (`None`: a request whose path
    /// could not be read, which gets the site's own).
    pub fn for_path(&self, path: Option<&NormPath>) -> &[Header] {
        self.list(self.which(path))
    }

    /// Which list [`SiteHeaders::list`] gives for `path`: a number that a
    /// session can keep where a reference would tie it to one thread.
    pub fn which(&self, path: Option<&NormPath>) -> usize {
        path.and_then(|p| self.paths.iter().position(|(pat, _)| pat.matches(p)))
            .map_or(0, |i| i + 1)
    }

    /// List `which`: 0 is the site's own, `i + 1` the rule `i`'s.
    pub fn list(&self, which: usize) -> &[Header] {
        match which.checked_sub(1).and_then(|i| self.paths.get(i)) {
            Some((_, h)) => h,
            None => &self.site,
        }
    }

    /// Write `list` into a response head.
    pub fn write(list: &[Header], h: &mut Head<'_>) {
        for (k, v) in list {
            h.header(k, v);
        }
    }
}

/// Merge `over` into `into`: a name already there (in any case) takes the
/// new value; an empty value removes it.
fn overlay(into: &mut Vec<Header>, over: &BTreeMap<String, String>) {
    for (k, v) in over {
        into.retain(|(n, _)| !n.eq_ignore_ascii_case(k));
        let v = v.trim();
        if !v.is_empty() {
            into.push((k.clone(), v.to_string()));
        }
    }
}

/// Headers tlsfront writes itself: setting them would send them twice or
/// contradict the framing.
const OWNED: &[&str] = &[
    "accept-ranges",
    "allow",
    "connection",
    "content-encoding",
    "content-length",
    "content-range",
    "content-type",
    "date",
    "etag",
    "keep-alive",
    "last-modified",
    "location",
    "proxy-connection",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "vary",
];

/// Whether `name: value` may be configured; else what is wrong and how
/// to fix it.
pub fn check(name: &str, value: &str) -> Result<(), String> {
    let tchar = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    if name.is_empty() || !name.bytes().all(tchar) {
        return Err(format!(
            "{name:?} is not a header name (letters, digits and !#$%&'*+-.^_`|~ only, \
             e.g. \"X-Frame-Options\")"
        ));
    }
    let lower = name.to_ascii_lowercase();
    if OWNED.contains(&lower.as_str()) {
        let fix = match lower.as_str() {
            "content-type" => {
                "tlsfront sets it from the file name; use charset = \"utf-8\" for the charset"
            }
            "content-encoding" | "vary" => {
                "tlsfront sets it for precompressed files (precompressed = [\"br\", \"gzip\"])"
            }
            "etag" | "last-modified" => "tlsfront derives it from the file",
            _ => "tlsfront sets it for each response",
        };
        return Err(format!("{name} cannot be set: {fix}; leave it out"));
    }
    if let Some(b) = value
        .bytes()
        .find(|&b| (b < 0x20 && b != b'\t') || b == 0x7f)
    {
        return Err(format!(
            "the value of {name} holds the control byte 0x{b:02x} (CR, LF, NUL and other \
             control characters cannot be sent): write it on one line without them"
        ));
    }
    Ok(())
}

/// A `match` pattern. One that starts with `/` is matched against the
/// whole request path; any other against the last segment of it (the file
/// name). The path is the one tlsfront resolves: percent-decoded, with
/// dot-segments removed and without the query; a request for a directory
/// keeps its trailing `/`. `*` matches any run of bytes, `/` included,
/// and every other byte only itself (case matters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    text: String,
}

impl Pattern {
    pub fn new(text: &str) -> Result<Pattern, String> {
        if text.is_empty() {
            return Err(
                "an empty pattern matches nothing: write e.g. \"/assets/*\" or \"*.css\"".into(),
            );
        }
        if text.contains('\0') {
            return Err(format!("{text:?} holds a NUL byte, which no path can"));
        }
        if text.starts_with('/') && text.split('/').any(|s| s == "." || s == "..") {
            return Err(format!(
                "{text:?} holds a . or .. segment, which a resolved path never has: write the path as it is beneath the root"
            ));
        }
        Ok(Pattern { text: text.into() })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn matches(&self, path: &NormPath) -> bool {
        let pat = self.text.as_bytes();
        let rel = path.as_bytes();
        if pat.first() == Some(&b'/') {
            // "/" + rel, and "/" at the end of a directory below the root.
            let slash_end = path.trailing_slash && !rel.is_empty();
            let len = 1 + rel.len() + usize::from(slash_end);
            glob(pat, len, |i| {
                if i == 0 || i > rel.len() {
                    b'/'
                } else {
                    rel[i - 1]
                }
            })
        } else {
            let name = rel.rsplit(|&b| b == b'/').next().unwrap_or(rel);
            glob(pat, name.len(), |i| name[i])
        }
    }
}

/// Whether `pat` (with `*` wildcards) matches the `len` bytes given by
/// `at`: the classic linear walk that backtracks to the last `*`.
fn glob(pat: &[u8], len: usize, at: impl Fn(usize) -> u8) -> bool {
    let (mut p, mut s) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while s < len {
        if p < pat.len() && pat[p] == b'*' {
            star = Some((p, s));
            p += 1;
        } else if p < pat.len() && pat[p] == at(s) {
            p += 1;
            s += 1;
        } else if let Some((sp, ss)) = star {
            p = sp + 1;
            s = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    pat[p..].iter().all(|&b| b == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::path::normalize;

    fn m(pat: &str, path: &str) -> bool {
        Pattern::new(pat)
            .unwrap()
            .matches(&normalize(path).unwrap())
    }

    #[test]
    fn patterns_match_paths_and_names() {
        assert!(m("/assets/*", "/assets/app.js"));
        assert!(m("/assets/*", "/assets/a/b.css"));
        assert!(m("/assets/*", "/assets/"));
        assert!(!m("/assets/*", "/assets"));
        assert!(!m("/assets/*", "/other/assets/x"));
        assert!(m("*.css", "/a/b/site.css"));
        assert!(m("*.css", "/site.css?v=1"));
        assert!(!m("*.css", "/site.css.map"));
        assert!(!m("*.css", "/a.css/b"));
        assert!(m("/*.html", "/a/b.html"));
        assert!(m("/", "/"));
        assert!(!m("/", "/a"));
        assert!(m("/*", "/"));
        assert!(m("/a/*/c", "/a/b/x/c"));
        assert!(m("/exact.txt", "/exact.txt"));
        assert!(!m("/exact.txt", "/Exact.txt"));
        assert!(m("/dir/", "/dir/"));
        assert!(m("/sp ace*", "/sp%20ace.txt"));
        assert!(m("/a/*", "/x/../a/./b"));
        assert!(m("*", "/anything/at/all"));
        assert!(m("index.html", "/sub/index.html"));
        assert!(m("a*b*c", "/aXbYc"));
        assert!(!m("a*b*c", "/aXbYcd"));
        assert!(m("/a?b", "/a%3Fb"));
        assert!(!m("/a?b", "/aXb"));
    }

    #[test]
    fn bad_patterns_are_refused() {
        assert!(Pattern::new("").is_err());
        assert!(Pattern::new("/a/../b").is_err());
        assert!(Pattern::new("/a/./b").is_err());
        assert!(Pattern::new("a\0").is_err());
        assert!(Pattern::new("..*").is_ok());
    }

    #[test]
    fn names_and_values_are_checked() {
        assert!(check("Strict-Transport-Security", "max-age=63072000").is_ok());
        assert!(check("X-Empty", "").is_ok());
        assert!(check("X-Tab", "a\tb").is_ok());
        assert!(check("X-Unicode", "caf\u{e9}").is_ok());
        for bad in ["", "X Frame", "X:Frame", "X-\u{e9}", "(x)"] {
            let e = check(bad, "v").unwrap_err();
            assert!(e.contains("is not a header name"), "{bad}: {e}");
        }
        for owned in [
            "Content-Length",
            "transfer-encoding",
            "CONNECTION",
            "Date",
            "Vary",
        ] {
            let e = check(owned, "v").unwrap_err();
            assert!(
                e.contains("cannot be set") && e.contains("leave it out"),
                "{e}"
            );
        }
        assert!(check("Content-Type", "x").unwrap_err().contains("charset"));
        for bad in ["a\r\nX-Injected: 1", "a\nb", "a\0", "a\x7f"] {
            let e = check("X-A", bad).unwrap_err();
            assert!(e.contains("control byte"), "{e}");
        }
    }

    #[test]
    fn rules_override_the_site_and_empty_values_remove() {
        let map = |kv: &[(&str, &str)]| {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        let h = SiteHeaders::new(
            &map(&[("X-Default", "d"), ("X-Frame-Options", "SAMEORIGIN")]),
            &map(&[("x-frame-options", "DENY"), ("Cache-Control", "no-cache")]),
            vec![
                (
                    Pattern::new("/assets/*").unwrap(),
                    map(&[("Cache-Control", "immutable"), ("X-Default", "")]),
                ),
                (
                    Pattern::new("*.css").unwrap(),
                    map(&[("Cache-Control", "max-age=60")]),
                ),
            ],
        );
        let get = |path: Option<&str>| {
            let p = path.map(|p| normalize(p).unwrap());
            let mut v: Vec<String> = h
                .for_path(p.as_ref())
                .iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect();
            v.sort();
            v
        };
        let site = [
            "Cache-Control: no-cache",
            "X-Default: d",
            "x-frame-options: DENY",
        ];
        assert_eq!(get(None), site);
        assert_eq!(get(Some("/index.html")), site);
        assert_eq!(
            get(Some("/assets/a.css")),
            ["Cache-Control: immutable", "x-frame-options: DENY"]
        );
        assert_eq!(
            get(Some("/a.css")),
            [
                "Cache-Control: max-age=60",
                "X-Default: d",
                "x-frame-options: DENY"
            ]
        );
        assert!(!h.is_empty());
        assert!(SiteHeaders::default().is_empty());
    }
}
