//! The settings of a site with a root that shape its responses —
//! `precompressed`, `headers` (with the top-level defaults and the
//! `[[site.paths]]` rules), `fallback` and `charset` — checked and resolved
//! here, so that a response only looks them up.

use super::file::{HeadersFile, SiteFile};
use super::ConfigError;
use crate::http::encoding::Encoding;
use crate::http::path::NormPath;
use crate::http::site_headers::{check, Pattern, SiteHeaders};
use std::collections::BTreeMap;
use std::ops::Range;

/// What [`resolve`] makes of those keys.
pub struct StaticFiles {
    pub precompressed: Vec<Encoding>,
    pub headers: SiteHeaders,
    pub fallback: Option<NormPath>,
    pub charset: Option<String>,
    /// Paths that need a verified client certificate (the patterns of the
    /// rules with `client_cert = "require"`, whatever rule comes first).
    pub client_cert_paths: Vec<Pattern>,
}

/// Resolve the keys of `s`. `top`: the site is described at the top level
/// (its rules are `[[paths]]`, not `[[site.paths]]`). `at(key)` names where
/// a key was set; `spot(key, span)` the same, with the line of `span` in
/// the file where known.
pub fn resolve(
    s: &SiteFile,
    defaults: Option<&HeadersFile>,
    top: bool,
    at: &dyn Fn(&str) -> String,
    spot: &dyn Fn(&str, Range<usize>) -> String,
) -> Result<StaticFiles, ConfigError> {
    let mut precompressed = Vec::new();
    for name in s.precompressed.iter().flatten() {
        let e = Encoding::from_name(name).ok_or_else(|| ConfigError::Invalid {
            origin: at("precompressed"),
            message: format!(
                "{name:?} is not a coding tlsfront serves precompressed: list some of \
                 \"br\", \"zstd\", \"gzip\" (preferred first)"
            ),
        })?;
        if precompressed.contains(&e) {
            return Err(ConfigError::Invalid {
                origin: at("precompressed"),
                message: format!("{name:?} is listed twice: list each coding once"),
            });
        }
        precompressed.push(e);
    }

    let headers_of = |h: Option<&HeadersFile>, key: &str| {
        let Some(h) = h else {
            return Ok(BTreeMap::new());
        };
        let mut seen: Vec<String> = Vec::new();
        for (name, value) in h.get_ref() {
            let lower = name.to_ascii_lowercase();
            let problem = if seen.contains(&lower) {
                Some(format!(
                    "{name} is set twice (header names ignore case): keep one"
                ))
            } else {
                check(name, value).err()
            };
            if let Some(message) = problem {
                return Err(ConfigError::Invalid {
                    origin: spot(key, h.span()),
                    message,
                });
            }
            seen.push(lower);
        }
        Ok(h.get_ref().clone())
    };
    let defaults = headers_of(defaults, "headers")?;
    let site = headers_of(s.headers.as_ref(), "headers")?;
    let table = if top { "[[paths]]" } else { "[[site.paths]]" };
    let (match_key, headers_key) = (format!("{table} match"), format!("{table} headers"));
    let mut rules = Vec::with_capacity(s.paths.len());
    let mut client_cert_paths = Vec::new();
    for rule in &s.paths {
        let r = rule.get_ref();
        let pattern = Pattern::new(&r.pattern).map_err(|message| ConfigError::Invalid {
            origin: spot(&match_key, rule.span()),
            message,
        })?;
        if r.client_cert.is_some() {
            client_cert_paths.push(pattern.clone());
        }
        let h = match (&r.headers, r.client_cert) {
            (Some(h), _) => h,
            // A rule only for the certificate: the site's headers.
            (None, Some(_)) => continue,
            (None, None) => {
                return Err(ConfigError::Invalid {
                    origin: spot(&headers_key, rule.span()),
                    message: format!(
                    "the rule for {:?} sets nothing: give it headers = {{ \"Name\" = \"value\" }} \
                         or client_cert = \"require\"",
                    r.pattern
                ),
                })
            }
        };
        rules.push((pattern, headers_of(Some(h), &headers_key)?));
    }
    let headers = SiteHeaders::new(&defaults, &site, rules);

    let fallback = match &s.fallback {
        None => None,
        Some(f) => {
            let bad = |why: &str| {
                ConfigError::Invalid {
                origin: at("fallback"),
                message: format!(
                    "{f:?} {why}: give the URL path of a file beneath the root, e.g. \"/index.html\""
                ),
            }
            };
            if !f.starts_with('/') || f.contains('?') || f.contains('#') {
                return Err(bad("is not a path from the root"));
            }
            let p = crate::http::path::normalize(f).map_err(|e| bad(&e.to_string()))?;
            if p.trailing_slash || p.is_root() {
                return Err(bad("names a directory"));
            }
            Some(p)
        }
    };

    let charset = match &s.charset {
        None => None,
        Some(c) => {
            let ok = !c.is_empty()
                && c.len() <= 40
                && c.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.:+".contains(&b));
            if !ok {
                return Err(ConfigError::Invalid {
                    origin: at("charset"),
                    message: format!(
                        "{c:?} is not a charset name (e.g. \"utf-8\", \"iso-8859-1\")"
                    ),
                });
            }
            Some(c.clone())
        }
    };
    Ok(StaticFiles {
        precompressed,
        headers,
        fallback,
        charset,
        client_cert_paths,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::file::FileConfig;
    use crate::config::settings::{resolve, Job, Origins};
    use crate::config::ConfigError;
    use crate::http::encoding::Encoding;
    use crate::http::path::normalize;

    fn from_text(text: &str) -> Result<crate::config::settings::Settings, ConfigError> {
        let f = FileConfig::parse(text).unwrap();
        let o = Origins {
            file: Some("/etc/t.toml".into()),
            ..Default::default()
        };
        resolve(f, text, &o, None)
    }

    fn files(text: &str, i: usize) -> crate::config::settings::Files {
        match &from_text(text).unwrap().sites[i].job {
            Job::Files(f) => f.clone(),
            Job::Backend(_) => panic!("not files"),
        }
    }

    #[test]
    fn headers_merge_defaults_site_and_rules() {
        let f = files(
            "headers = { \"X-Default\" = \"d\", \"X-Frame-Options\" = \"SAMEORIGIN\" }\n\
             [[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\n\
             precompressed = [\"zstd\", \"gzip\"]\ncharset = \"utf-8\"\nfallback = \"/app/index.html\"\n\
             headers = { \"Strict-Transport-Security\" = \"max-age=63072000\", \"X-Frame-Options\" = \"DENY\" }\n\
             [[site.paths]]\nmatch = \"/assets/*\"\n\
             headers = { \"Cache-Control\" = \"immutable\", \"X-Default\" = \"\" }\n\
             [[site]]\nnames = [\"b.test\"]\nroot = \"/y\"\n",
            0,
        );
        assert_eq!(f.precompressed, [Encoding::Zstd, Encoding::Gzip]);
        assert_eq!(f.charset.as_deref(), Some("utf-8"));
        assert_eq!(f.fallback, Some(normalize("/app/index.html").unwrap()));
        let names = |p: &str| {
            let mut v: Vec<String> = f
                .headers
                .for_path(Some(&normalize(p).unwrap()))
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            v.sort();
            v.join(" ")
        };
        assert_eq!(
            names("/a"),
            "Strict-Transport-Security=max-age=63072000 X-Default=d X-Frame-Options=DENY"
        );
        assert_eq!(
            names("/assets/a.js"),
            "Cache-Control=immutable Strict-Transport-Security=max-age=63072000 X-Frame-Options=DENY"
        );
        // The defaults reach every site with a root.
        let b = files(
            "headers = { \"X-Default\" = \"d\" }\n[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\n",
            0,
        );
        assert_eq!(b.headers.for_path(None).len(), 1);
        assert!(b.precompressed.is_empty() && b.charset.is_none() && b.fallback.is_none());
    }

    #[test]
    fn bad_settings_are_refused_naming_file_line_and_setting() {
        for (text, want) in [
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\n\nheaders = { \"Content-Length\" = \"5\" }\n",
                "config file /etc/t.toml, line 5, setting headers: Content-Length cannot be set",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\nheaders = { \"X Bad\" = \"5\" }\n",
                "line 4, setting headers: \"X Bad\" is not a header name",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\nheaders = { \"X-A\" = \"a\\r\\nX-B: b\" }\n",
                "line 4, setting headers: the value of X-A holds the control byte 0x0d",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\nheaders = { \"X-A\" = \"1\", \"x-a\" = \"2\" }\n",
                "setting headers: x-a is set twice",
            ),
            (
                "headers = { \"Date\" = \"x\" }\n[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\n",
                "line 1, setting headers: Date cannot be set",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\n[[site.paths]]\nmatch = \"/a/*\"\nheaders = { \"Transfer-Encoding\" = \"chunked\" }\n",
                "line 6, setting [[site.paths]] headers: Transfer-Encoding cannot be set",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\n[[site.paths]]\nmatch = \"\"\nheaders = {}\n",
                "line 4, setting [[site.paths]] match: an empty pattern",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\n[[site.paths]]\nmatch = \"/a\"\n",
                "setting [[site.paths]] headers: the rule for \"/a\" sets nothing",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nbackend = \"127.0.0.1:1\"\nheaders = { \"X-A\" = \"1\" }\n",
                "setting headers: headers is for a site with a root",
            ),
            (
                "headers = { \"X-A\" = \"1\" }\nbackend = \"127.0.0.1:1\"\n",
                "setting headers: headers is for a site with a root",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nbackend = \"127.0.0.1:1\"\nprecompressed = [\"gzip\"]\n",
                "setting precompressed: precompressed is for a site with a root",
            ),
            (
                "root = \"/x\"\n[[paths]]\nmatch = \"*.js\"\nheaders = { \"Server\" = \"x\" }\n",
                "line 4, setting [[paths]] headers: Server cannot be set",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\nprecompressed = [\"deflate\"]\n",
                "setting precompressed: \"deflate\" is not a coding",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\nprecompressed = [\"gzip\", \"gzip\"]\n",
                "\"gzip\" is listed twice",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\nfallback = \"index.html\"\n",
                "setting fallback: \"index.html\" is not a path from the root",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\nfallback = \"/../x\"\n",
                "setting fallback: \"/../x\" path climbs above the document root",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\nfallback = \"/app/\"\n",
                "names a directory",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\ncharset = \"utf 8\"\n",
                "setting charset: \"utf 8\" is not a charset name",
            ),
        ] {
            let e = from_text(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text}\n=> {e}\nwanted: {want}");
        }
    }
}
