//! The access log: one line per static-file response and one per proxied
//! connection, in nginx's `combined` format, `combined` plus the TLS
//! fields, or JSON ([`format`]). Lines are gathered in a per-worker buffer
//! and written whole, a buffer at a time, to files opened with `O_APPEND`
//! ([`sink`]): no system call per request, and no line split between
//! workers. SIGUSR1 reopens every file (log rotation).

pub mod format;
pub mod sink;

pub use format::{HttpRecord, ProxyRecord};
pub use sink::{flush, flush_every, reopen_all, Sink};

use serde::Deserialize;
use std::path::PathBuf;
use std::sync::Arc;

/// How each line is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// nginx's `combined`.
    #[default]
    Combined,
    /// `combined`, then protocol, cipher, SNI, resumption, data path and
    /// request time.
    Tls,
    /// One JSON object per line, every field named.
    Json,
}

/// By hand rather than derived: the error names the setting (the file's
/// line alone does not say which key of it is wrong).
impl<'de> Deserialize<'de> for Format {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Format, D::Error> {
        let v = String::deserialize(d)?;
        match v.as_str() {
            "combined" => Ok(Format::Combined),
            "tls" => Ok(Format::Tls),
            "json" => Ok(Format::Json),
            _ => Err(serde::de::Error::custom(format!(
                "setting access_log_format: {v:?} is not a format: give \"combined\", \"tls\" \
                 or \"json\""
            ))),
        }
    }
}

/// Where the lines go: nowhere, standard output, or a file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Target {
    #[default]
    Off,
    Stdout,
    File(PathBuf),
}

impl Target {
    /// A value of `access_log`: `off`, `stdout`, or a path.
    pub fn parse(value: &str) -> Result<Target, String> {
        match value {
            "off" => Ok(Target::Off),
            "stdout" => Ok(Target::Stdout),
            "" => Err(
                "an empty path: give a file (/var/log/tlsfront/access.log), \
                       \"stdout\" or \"off\""
                    .into(),
            ),
            v if v.contains('\0') => Err(format!("{v:?}: a path cannot hold a NUL byte")),
            v => Ok(Target::File(PathBuf::from(v))),
        }
    }

    /// Whether `value` names a file (so a relative one is taken relative to
    /// the config file).
    pub fn is_path(value: &str) -> bool {
        !matches!(value, "off" | "stdout" | "")
    }
}

/// A site's access-log settings, as resolved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogConfig {
    pub target: Target,
    pub format: Format,
    /// Where `access_log` was set (for errors opening the file).
    pub origin: String,
}

/// A site's open access log, shared by its connections.
#[derive(Clone)]
pub struct SiteLog {
    pub sink: Arc<Sink>,
    pub format: Format,
}

impl std::fmt::Debug for SiteLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SiteLog({}, {:?})", self.sink.name(), self.format)
    }
}

impl SiteLog {
    /// Open (or share, when another site or the previous configuration
    /// already has it open) the log `config` names; `None` when off.
    pub fn open(config: &LogConfig) -> Result<Option<SiteLog>, String> {
        let sink = match &config.target {
            Target::Off => return Ok(None),
            Target::Stdout => Sink::stdout(),
            // The error names the path, and a refusal its own fix.
            Target::File(p) => Sink::file(p).map_err(|e| {
                let refused = e
                    .get_ref()
                    .is_some_and(|r| r.is::<crate::safe_open::Refused>());
                if refused {
                    format!("cannot open the access log: {e}")
                } else {
                    format!(
                        "cannot open the access log: {e} (its directory must exist, and the \
                         file be writable, or the directory be, by the user tlsfront runs as \
                         at this point)"
                    )
                }
            })?,
        };
        Ok(Some(SiteLog {
            sink,
            format: config.format,
        }))
    }

    /// Log one static-file response.
    pub fn http(&self, r: &HttpRecord<'_>) {
        sink::write(&self.sink, |buf| format::http(buf, self.format, r));
    }

    /// Log one proxied connection.
    pub fn proxy(&self, r: &ProxyRecord<'_>) {
        sink::write(&self.sink, |buf| format::proxy(buf, self.format, r));
    }
}

/// The request line, `User-Agent` and `Referer` of a raw request head
/// (what the combined format logs), found without allocating. Leading
/// empty lines are skipped, as the parser does.
pub fn head_fields(head: &[u8]) -> (&[u8], Option<&[u8]>, Option<&[u8]>) {
    let skip = head
        .iter()
        .take_while(|&&b| b == b'\r' || b == b'\n')
        .count();
    let mut lines = head[skip..].split(|&b| b == b'\n').map(|l| match l {
        [rest @ .., b'\r'] => rest,
        l => l,
    });
    let line = lines.next().unwrap_or_default();
    let (mut ua, mut referer) = (None, None);
    for l in lines {
        if l.is_empty() {
            break;
        }
        // Most headers are neither: one byte tells.
        if !matches!(l[0] | 0x20, b'u' | b'r') {
            continue;
        }
        let Some(colon) = l.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&l[..colon], trim(&l[colon + 1..]));
        if ua.is_none() && name.eq_ignore_ascii_case(b"user-agent") {
            ua = Some(value);
        } else if referer.is_none() && name.eq_ignore_ascii_case(b"referer") {
            referer = Some(value);
        }
    }
    (line, ua, referer)
}

fn trim(v: &[u8]) -> &[u8] {
    let start = v.iter().position(|&b| b != b' ' && b != b'\t');
    let end = v.iter().rposition(|&b| b != b' ' && b != b'\t');
    match (start, end) {
        (Some(s), Some(e)) => &v[s..=e],
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_fields_are_found_in_any_case() {
        let head = b"\r\nGET /a?b HTTP/1.1\r\nHost: x\r\nuser-AGENT:  curl/8 \r\nReferer: https://r/\r\n\r\n";
        let (line, ua, referer) = head_fields(head);
        assert_eq!(line, b"GET /a?b HTTP/1.1");
        assert_eq!(ua, Some(&b"curl/8"[..]));
        assert_eq!(referer, Some(&b"https://r/"[..]));
        let (line, ua, referer) = head_fields(b"GET / HTTP/1.0\n\n");
        assert_eq!((line, ua, referer), (&b"GET / HTTP/1.0"[..], None, None));
    }

    #[test]
    fn targets_parse() {
        assert_eq!(Target::parse("off").unwrap(), Target::Off);
        assert_eq!(Target::parse("stdout").unwrap(), Target::Stdout);
        assert_eq!(
            Target::parse("/var/log/a.log").unwrap(),
            Target::File("/var/log/a.log".into())
        );
        assert!(Target::parse("").is_err());
        assert!(!Target::is_path("off") && Target::is_path("a.log"));
    }
}
