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
}

/// Resolve the keys of `s`. `at(key)` names where a key was set; `spot(key,
/// span)` the same, with the line of `span` in the file where known.
pub fn resolve(
    s: &SiteFile,
    defaults: Option<&HeadersFile>,
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
    let mut rules = Vec::with_capacity(s.paths.len());
    for rule in &s.paths {
        let r = rule.get_ref();
        let pattern = Pattern::new(&r.pattern).map_err(|message| ConfigError::Invalid {
            origin: spot("[[site.paths]] match", rule.span()),
            message,
        })?;
        let Some(h) = &r.headers else {
            return Err(ConfigError::Invalid {
                origin: spot("[[site.paths]] headers", rule.span()),
                message: format!(
                    "the rule for {:?} sets nothing: give it headers = {{ \"Name\" = \"value\" }}",
                    r.pattern
                ),
            });
        };
        rules.push((pattern, headers_of(Some(h), "[[site.paths]] headers")?));
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
    })
}
