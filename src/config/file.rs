//! The TOML config file as written: every key a file may hold, nothing
//! resolved yet. [`super::settings`] turns it (and the flags, which fill the
//! same fields) into the one settings model the services read.
//!
//! Top-level keys are process-wide (listeners, workers, limits, timeouts);
//! each `[[site]]` is one site. A file without `[[site]]` may describe its
//! one site at the top level (`root = …` or `backend = …`), which is what
//! `serve --config` files have always held.

use super::{KtlsMode, Limits, Timeouts};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// Response headers as written: name → value (an empty value removes a
/// header inherited from the level above).
pub type HeadersFile = Spanned<BTreeMap<String, String>>;

/// A `[[site.paths]]` rule: headers for the paths its pattern matches,
/// and whether they need a client certificate.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathFile {
    /// `/assets/*` (the whole path) or `*.css` (the file name).
    #[serde(rename = "match")]
    pub pattern: String,
    #[serde(default)]
    pub headers: Option<HeadersFile>,
    /// `"require"`: 403 unless the connection presented a client
    /// certificate the site's `client_ca` verified (with `client_auth =
    /// "optional"`).
    #[serde(default)]
    pub client_cert: Option<PathClientCert>,
}

/// A path rule's `client_cert`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PathClientCert {
    Require,
}

/// What to do with a ClientHello whose name no site has (or that names
/// none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnknownNames {
    /// The default site answers (nginx's default server).
    #[default]
    Default,
    /// Refuse the handshake with `unrecognized_name` (nginx's
    /// `ssl_reject_handshake on` in the default server).
    Reject,
}

/// PROXY header towards the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ProxyVersion {
    V1,
    V2,
}

/// One path or several (a site with an RSA and an ECDSA certificate lists
/// both, keys in the same order).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum OneOrMany {
    One(PathBuf),
    Many(Vec<PathBuf>),
}

impl OneOrMany {
    pub fn paths(&self) -> Vec<PathBuf> {
        match self {
            OneOrMany::One(p) => vec![p.clone()],
            OneOrMany::Many(v) => v.clone(),
        }
    }

    fn rebase(&mut self, base: &Path) {
        let fix = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        match self {
            OneOrMany::One(p) => fix(p),
            OneOrMany::Many(v) => v.iter_mut().for_each(fix),
        }
    }
}

/// Per-site limits: those that bound one request or one connection.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SiteLimits {
    pub request_line: Option<usize>,
    pub header_bytes: Option<usize>,
    pub headers: Option<usize>,
    pub body: Option<u64>,
    pub keepalive_requests: Option<u64>,
}

/// Per-site timeouts: those that start after the handshake (the handshake
/// and shutdown ones are process-wide: no site is known before the
/// ClientHello, and shutdown is the process's).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SiteTimeouts {
    pub request_header: Option<f64>,
    pub keepalive: Option<f64>,
    pub send: Option<f64>,
    pub connect: Option<f64>,
    pub idle: Option<f64>,
}

/// The keys of one site, in a `[[site]]` table or at the top level.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SiteFile {
    /// Host names (`example.com`, `*.example.com`).
    pub names: Vec<String>,
    /// This site answers names no site has (else the first site does).
    pub default: bool,
    pub cert: Option<OneOrMany>,
    pub key: Option<OneOrMany>,
    /// A DER OCSP response per certificate, stapled in handshakes (nginx's
    /// `ssl_stapling_file`); in the same order as `cert`.
    pub ocsp: Option<OneOrMany>,
    /// The certificate comes from the ACME CA (`acme_directory`), answered
    /// with TLS-ALPN-01 on the site's own listener.
    pub acme: bool,
    /// How the CA validates the names: `auto`, `tls-alpn-01`, `http-01`,
    /// `dns-01`.
    pub acme_challenge: Option<crate::acme::ChallengeKind>,
    /// The certificate profile to order for this `acme = true` site
    /// (default: the top level's `acme_profile`).
    pub acme_profile: Option<String>,
    /// Static files from this directory…
    pub root: Option<PathBuf>,
    pub autoindex: Option<bool>,
    pub follow_symlinks_outside: Option<bool>,
    /// Codings whose precompressed siblings (`app.js.br`) are served, in
    /// the site's order of preference.
    pub precompressed: Option<Vec<String>>,
    /// Response headers for every response of the site.
    pub headers: Option<HeadersFile>,
    /// Response headers for paths matching a pattern (the first match).
    pub paths: Vec<Spanned<PathFile>>,
    /// The file (a URL path beneath the root) that answers a path that
    /// does not exist (a single-page app's `/index.html`).
    pub fallback: Option<String>,
    /// `; charset=…` added to the `Content-Type` of text types.
    pub charset: Option<String>,
    /// `false`: `Server: tlsfront` without the version (default: the top
    /// level's `server_tokens`).
    pub server_tokens: Option<bool>,
    /// `false`: HTTP/1.1 only, no `h2` offered by ALPN (default: the top
    /// level's `http2`, else true).
    pub http2: Option<bool>,
    /// …or TLS termination for this backend.
    pub backend: Option<String>,
    pub write_proxy: Option<ProxyVersion>,
    /// ALPN protocols offered (default: h2, http/1.1 and http/1.0 for
    /// files, none for a backend).
    pub alpn: Option<Vec<String>>,
    pub limits: SiteLimits,
    pub timeouts: SiteTimeouts,
    /// TLS versions: `["1.2", "1.3"]` or `["1.3"]` (default: the top
    /// level's, else both).
    pub tls_versions: Option<Vec<String>>,
    /// Cipher suites allowed, by IANA name (default: the top level's, else
    /// every suite tlsfront offers).
    pub ciphers: Option<Vec<String>>,
    /// Key exchange groups, most preferred first (default: the top
    /// level's, else X25519MLKEM768, X25519, P-256).
    pub kx_groups: Option<Vec<String>>,
    /// RFC 8879 certificate compression (default: the top level's, else
    /// on).
    pub cert_compression: Option<bool>,
    /// Client certificates: the PEM bundle of the CAs that issue them
    /// (default: the top level's, else none asked for).
    pub client_ca: Option<PathBuf>,
    /// `require`, `optional` or `off` (default: the top level's, else
    /// `require` with `client_ca`).
    pub client_auth: Option<String>,
    /// Revocation lists (PEM or DER) for the client certificates.
    pub client_crl: Option<OneOrMany>,
    /// Access log: a path, `stdout` or `off` (default: the top level's).
    pub access_log: Option<String>,
    pub access_log_format: Option<crate::accesslog::Format>,
}

/// The config file.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FileConfig {
    /// Unset: 127.0.0.1:8443; an empty list is refused (it would listen
    /// nowhere, or silently on the default).
    #[serde(deserialize_with = "non_empty_listen")]
    pub listen: Vec<Spanned<String>>,
    /// Plain-HTTP admin listener: `/metrics` and `/healthz` (off unset).
    pub admin: Option<Spanned<String>>,
    /// Plain-HTTP listeners (port 80): ACME HTTP-01 answers, and a
    /// redirect to `https://` for every other request (off unset).
    pub http_listen: Vec<String>,
    /// The redirect's status: 308 (the default) or 301 (for GET and HEAD;
    /// other methods still get 308, which keeps the method and body).
    pub http_redirect: Option<u16>,
    pub workers: Option<usize>,
    pub ktls: Option<KtlsMode>,
    /// Tell the kernel TLS 1.3 clients do not pad their records (default
    /// true): it decrypts into the reader's buffer, and decrypts again if
    /// a client does pad.
    pub ktls_expect_no_pad: Option<bool>,
    /// Run as this user once the keys are read and the ports bound.
    pub user: Option<String>,
    /// ... and this group (default: the user's own).
    pub group: Option<String>,
    /// With `user`: the private keys stay in the root parent, which signs
    /// handshakes for the server process (default true).
    pub keys_in_parent: Option<bool>,
    /// Read a PROXY v1/v2 header from a load balancer before TLS.
    pub accept_proxy: Option<bool>,
    /// Trusted sources of PROXY headers.
    pub proxy_from: Option<Vec<String>>,
    pub unknown_names: Option<UnknownNames>,
    /// `false`: `Server: tlsfront` without the version (nginx's
    /// `server_tokens off`), for every site that does not set it.
    pub server_tokens: Option<bool>,
    /// `false`: no HTTP/2 (nginx's `http2 off`), for every static site that
    /// does not set it.
    pub http2: Option<bool>,
    /// The main process writes its pid here (and removes it at exit).
    pub pid_file: Option<PathBuf>,
    /// Session ticket keys, nginx's `ssl_session_ticket_key` format: the
    /// first encrypts, all decrypt (several servers resume each other's
    /// sessions). Unset: random keys rotated in memory.
    pub ticket_keys: Option<Vec<PathBuf>>,
    /// Where the ACME account and certificates are kept (default: the
    /// data directory, `$XDG_DATA_HOME/tlsfront`).
    pub state_dir: Option<PathBuf>,
    /// The ACME CA's directory URL (default: Let's Encrypt).
    pub acme_directory: Option<String>,
    /// Contact URIs for the ACME account (`mailto:…`).
    pub acme_contact: Option<Vec<String>>,
    /// Extra CA roots (PEM) to trust for the ACME directory's HTTPS (a
    /// private CA).
    pub acme_ca_roots: Option<PathBuf>,
    /// DNS-01: the zone's primary DNS server, `IP:PORT` (or `IP`, port 53),
    /// which takes RFC 2136 updates over TCP.
    pub acme_dns_server: Option<String>,
    /// DNS-01: the TSIG key those updates are signed with, bind's key
    /// clause as `tsig-keygen` writes it.
    pub acme_dns_tsig_key_file: Option<PathBuf>,
    /// The certificate profile to order from the ACME CA (one its
    /// directory lists; default: none, the CA's default).
    pub acme_profile: Option<String>,
    pub limits: Limits,
    pub timeouts: Timeouts,
    /// Several nodes sharing ACME certificates and ticket keys through
    /// etcd (off unset).
    pub fleet: Option<FleetFile>,
    /// Response headers every site with a root starts from (and the one
    /// site of a file without `[[site]]`).
    pub headers: Option<HeadersFile>,
    /// Every site's access log unless it sets its own: a path, `stdout`
    /// or `off` (the default).
    pub access_log: Option<String>,
    pub access_log_format: Option<crate::accesslog::Format>,
    /// Files each worker keeps open for its next requests (0: none).
    pub open_file_cache: Option<usize>,
    /// Seconds a kept file's path is trusted before it is looked up again.
    pub open_file_cache_valid: Option<f64>,

    /// Every site's TLS versions, cipher suites, key exchange groups and
    /// certificate compression unless it sets its own.
    pub tls_versions: Option<Vec<String>>,
    pub ciphers: Option<Vec<String>>,
    pub kx_groups: Option<Vec<String>>,
    pub cert_compression: Option<bool>,
    /// Every site's client certificate settings unless it sets its own.
    pub client_ca: Option<PathBuf>,
    pub client_auth: Option<String>,
    pub client_crl: Option<OneOrMany>,

    // The one site of a file without `[[site]]`.
    pub names: Vec<String>,
    pub cert: Option<OneOrMany>,
    pub key: Option<OneOrMany>,
    pub ocsp: Option<OneOrMany>,
    pub root: Option<PathBuf>,
    pub autoindex: Option<bool>,
    pub follow_symlinks_outside: Option<bool>,
    pub precompressed: Option<Vec<String>>,
    pub paths: Vec<Spanned<PathFile>>,
    pub fallback: Option<String>,
    pub charset: Option<String>,
    pub backend: Option<String>,
    pub write_proxy: Option<ProxyVersion>,
    pub alpn: Option<Vec<String>>,

    pub site: Vec<Spanned<SiteFile>>,
}

/// `[fleet]` as written (resolved by `config::fleet`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FleetFile {
    /// etcd's client URLs, `http://HOST:PORT` or `https://HOST:PORT`.
    pub endpoints: Vec<String>,
    /// Where in etcd's key space this fleet's keys live.
    pub prefix: Option<String>,
    /// This node's name in the fleet (default: the host name).
    pub node: Option<String>,
    /// 32-byte key files that seal private keys in etcd: the first seals,
    /// all open.
    pub key_files: Vec<PathBuf>,
    /// TLS to etcd: the CA that issued its certificates, and this node's
    /// client certificate and key (`--client-cert-auth`).
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// etcd authentication: the user, and a file with its password.
    pub user: Option<String>,
    pub password_file: Option<PathBuf>,
    /// Seconds a dead node's locks outlive it.
    pub lock_ttl: Option<u64>,
    /// `false`: this node serves what the fleet has but never orders.
    pub order: Option<bool>,
    /// Seconds each session-ticket key of the fleet encrypts for.
    pub ticket_period: Option<u64>,
}

/// The keys of a handshake policy as written, at the top level or in a
/// `[[site]]` (resolved by [`crate::tls::policy::Policy::from_names`]).
#[derive(Clone, Debug, Default)]
pub struct TlsFile {
    pub tls_versions: Option<Vec<String>>,
    pub ciphers: Option<Vec<String>>,
    pub kx_groups: Option<Vec<String>>,
    pub cert_compression: Option<bool>,
    pub client_ca: Option<PathBuf>,
    pub client_auth: Option<String>,
    pub client_crl: Option<Vec<PathBuf>>,
}

impl TlsFile {
    /// These keys, each one left out taken from `under`.
    pub fn over(&self, under: &TlsFile) -> TlsFile {
        TlsFile {
            tls_versions: self.tls_versions.clone().or(under.tls_versions.clone()),
            ciphers: self.ciphers.clone().or(under.ciphers.clone()),
            kx_groups: self.kx_groups.clone().or(under.kx_groups.clone()),
            cert_compression: self.cert_compression.or(under.cert_compression),
            client_ca: self.client_ca.clone().or(under.client_ca.clone()),
            client_auth: self.client_auth.clone().or(under.client_auth.clone()),
            client_crl: self.client_crl.clone().or(under.client_crl.clone()),
        }
    }

    /// Whether the key of this policy setting is set here.
    pub fn sets(&self, key: &str) -> bool {
        match key {
            "tls_versions" => self.tls_versions.is_some(),
            "ciphers" => self.ciphers.is_some(),
            "kx_groups" => self.kx_groups.is_some(),
            "client_ca" => self.client_ca.is_some(),
            "client_auth" => self.client_auth.is_some(),
            "client_crl" => self.client_crl.is_some(),
            _ => self.cert_compression.is_some(),
        }
    }

    pub fn policy(&self) -> Result<crate::tls::policy::Policy, crate::tls::policy::PolicyError> {
        crate::tls::policy::Policy::from_names(
            self.tls_versions.as_deref(),
            self.ciphers.as_deref(),
            self.kx_groups.as_deref(),
            self.cert_compression,
        )
    }
}

impl SiteFile {
    pub fn tls(&self) -> TlsFile {
        TlsFile {
            tls_versions: self.tls_versions.clone(),
            ciphers: self.ciphers.clone(),
            kx_groups: self.kx_groups.clone(),
            cert_compression: self.cert_compression,
            client_ca: self.client_ca.clone(),
            client_auth: self.client_auth.clone(),
            client_crl: self.client_crl.as_ref().map(OneOrMany::paths),
        }
    }
}

/// A file that could not be read or parsed.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}, line {line}: {message}")]
    Parse {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

impl FileConfig {
    /// Read and parse `path`. Relative paths in it are relative to the file.
    pub fn load(path: &Path) -> Result<(FileConfig, String), FileError> {
        let text = crate::safe_open::read(path)
            .and_then(|bytes| {
                String::from_utf8(bytes)
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
            })
            .map_err(|source| FileError::Read {
                path: path.into(),
                source,
            })?;
        let mut cfg = FileConfig::parse(&text).map_err(|e| FileError::Parse {
            path: path.into(),
            line: e.span().map_or(0, |s| line_of(&text, s.start)),
            message: explain(&text, e.span(), e.message().trim_end()),
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        cfg.rebase(base);
        Ok((cfg, text))
    }

    /// The top level's handshake policy keys (every site's defaults).
    pub fn tls(&self) -> TlsFile {
        TlsFile {
            tls_versions: self.tls_versions.clone(),
            ciphers: self.ciphers.clone(),
            kx_groups: self.kx_groups.clone(),
            cert_compression: self.cert_compression,
            client_ca: self.client_ca.clone(),
            client_auth: self.client_auth.clone(),
            client_crl: self.client_crl.as_ref().map(OneOrMany::paths),
        }
    }

    pub fn parse(text: &str) -> Result<FileConfig, toml::de::Error> {
        toml::from_str(text)
    }

    fn rebase(&mut self, base: &Path) {
        let fix = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        self.root.iter_mut().for_each(fix);
        self.ticket_keys.iter_mut().flatten().for_each(fix);
        self.state_dir.iter_mut().for_each(fix);
        self.pid_file.iter_mut().for_each(fix);
        self.acme_ca_roots.iter_mut().for_each(fix);
        self.acme_dns_tsig_key_file.iter_mut().for_each(fix);
        if let Some(f) = &mut self.fleet {
            f.key_files.iter_mut().for_each(fix);
            f.ca.iter_mut().for_each(fix);
            f.cert.iter_mut().for_each(fix);
            f.key.iter_mut().for_each(fix);
            f.password_file.iter_mut().for_each(fix);
        }
        self.cert.iter_mut().for_each(|c| c.rebase(base));
        self.key.iter_mut().for_each(|c| c.rebase(base));
        self.ocsp.iter_mut().for_each(|c| c.rebase(base));
        self.client_ca.iter_mut().for_each(fix);
        self.client_crl.iter_mut().for_each(|c| c.rebase(base));
        rebase_log(&mut self.access_log, base);
        for s in &mut self.site {
            let s = s.get_mut();
            rebase_log(&mut s.access_log, base);
            s.root.iter_mut().for_each(fix);
            s.cert.iter_mut().for_each(|c| c.rebase(base));
            s.key.iter_mut().for_each(|c| c.rebase(base));
            s.ocsp.iter_mut().for_each(|c| c.rebase(base));
            s.client_ca.iter_mut().for_each(fix);
            s.client_crl.iter_mut().for_each(|c| c.rebase(base));
        }
    }

    /// The site described at the top level, if any key of one is there.
    pub fn top_site(&self) -> Option<SiteFile> {
        let any = !self.names.is_empty()
            || self.cert.is_some()
            || self.key.is_some()
            || self.ocsp.is_some()
            || self.root.is_some()
            || self.autoindex.is_some()
            || self.follow_symlinks_outside.is_some()
            || self.precompressed.is_some()
            || !self.paths.is_empty()
            || self.fallback.is_some()
            || self.charset.is_some()
            || self.backend.is_some()
            || self.write_proxy.is_some()
            || self.alpn.is_some();
        any.then(|| SiteFile {
            names: self.names.clone(),
            default: true,
            cert: self.cert.clone(),
            key: self.key.clone(),
            ocsp: self.ocsp.clone(),
            root: self.root.clone(),
            autoindex: self.autoindex,
            follow_symlinks_outside: self.follow_symlinks_outside,
            precompressed: self.precompressed.clone(),
            paths: self.paths.clone(),
            fallback: self.fallback.clone(),
            charset: self.charset.clone(),
            backend: self.backend.clone(),
            write_proxy: self.write_proxy,
            alpn: self.alpn.clone(),
            ..SiteFile::default()
        })
    }
}

/// An `access_log` that names a file, relative to the config file's
/// directory (`off` and `stdout` are not paths).
fn rebase_log(v: &mut Option<String>, base: &Path) {
    if let Some(v) = v {
        if crate::accesslog::Target::is_path(v) && Path::new(v.as_str()).is_relative() {
            *v = base.join(v.as_str()).to_string_lossy().into_owned();
        }
    }
}

/// `listen = []`: refused, naming the setting (the default address only
/// stands in for a `listen` left out).
fn non_empty_listen<'de, D>(d: D) -> Result<Vec<Spanned<String>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let v = Vec::<Spanned<String>>::deserialize(d)?;
    if v.is_empty() {
        return Err(serde::de::Error::custom(
            "setting listen: an empty list listens nowhere: give at least one address \
             (listen = [\"127.0.0.1:8443\"]), or leave listen out for 127.0.0.1:8443",
        ));
    }
    Ok(v)
}

/// The setting a parse error at `at` concerns, as messages name it:
/// `workers`, `[limits] headers`, or the table header itself (`[site]`).
fn setting_at(text: &str, at: usize) -> Option<String> {
    let mut at = at.min(text.len());
    // A value on a later line of a multi-line list: the key is above it.
    let (start, line) = loop {
        let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
        let line = text[start..].lines().next().unwrap_or("").trim();
        if line.starts_with('[') || line.contains('=') || start == 0 {
            break (start, line);
        }
        at = start - 1;
    };
    if line.starts_with('[') {
        return Some(line.split('#').next().unwrap_or(line).trim().to_string());
    }
    let key = line.split_once('=')?.0.trim().trim_matches('"').to_string();
    // The table the key is in: the last header above it.
    let table = text[..start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .map(|h| h.split('#').next().unwrap_or(h).trim().to_string());
    Some(match table {
        Some(t) if t != "[[site]]" => format!("{t} {key}"),
        _ => key,
    })
}

/// What a Rust type name in a serde message means, in words.
fn in_words(expected: &str, key: &str) -> String {
    let e = expected.trim();
    let words = match e {
        "usize" | "u64" | "u32" | "u16" | "u8" => "a whole number (0 or more, no quotes)",
        "i64" | "i32" => "a whole number (no quotes)",
        "f64" | "f32" => "a number (no quotes; seconds may have a fraction: 2.5)",
        "a boolean" => "true or false (no quotes)",
        "a string" => "a string in quotes",
        "path string" => "a path in quotes",
        "a sequence" if key.ends_with("paths") => "[[site.paths]] tables",
        "a sequence" => "a list of strings, in brackets: [\"…\", \"…\"]",
        "a map" => "a table",
        e if e.starts_with("struct ") => "a table",
        e if e.contains("untagged enum OneOrMany") => {
            "a path in quotes, or a list of paths in brackets: [\"…\", \"…\"]"
        }
        e => return e.to_string(),
    };
    words.to_string()
}

/// A value as written, from serde's description of it.
fn found_words(found: &str) -> String {
    let f = found.trim();
    if let Some(v) = f.strip_prefix("string ") {
        return format!("a string ({v})");
    }
    for (kind, word) in [
        ("integer ", "the number"),
        ("floating point ", "the number"),
        ("boolean ", "the boolean"),
    ] {
        if let Some(v) = f.strip_prefix(kind) {
            return format!("{word} {}", v.trim_matches('`'));
        }
    }
    match f {
        "map" => "a table".into(),
        "sequence" => "a list".into(),
        f => f.to_string(),
    }
}

/// A TOML or serde message rewritten for an operator: which setting, and
/// what it takes in words (serde says `invalid type: string "x", expected
/// usize`); `[site]` where `[[site]]` is meant gets the fix.
fn explain(text: &str, span: Option<std::ops::Range<usize>>, message: &str) -> String {
    let setting = span.as_ref().and_then(|s| setting_at(text, s.start));
    let setting = setting.as_deref().unwrap_or("");
    if setting == "[site]" {
        return "[site]: use [[site]] (an array of tables) for each site: [site] is a single \
                table, which cannot hold a list of sites (a second [site] is a duplicate key)"
            .to_string();
    }
    if message.starts_with("setting ") || setting.is_empty() {
        return message.to_string();
    }
    let key = setting.rsplit(' ').next().unwrap_or(setting);
    let typed = message
        .strip_prefix("invalid type: ")
        .or_else(|| message.strip_prefix("invalid value: "));
    if let Some((found, expected)) = typed.and_then(|t| t.rsplit_once(", expected ")) {
        return format!(
            "setting {setting}: expected {}, found {}",
            in_words(expected, key),
            found_words(found)
        );
    }
    if message.contains("untagged enum OneOrMany") {
        return format!("setting {setting}: expected {}", in_words(message, key));
    }
    format!("setting {setting}: {message}")
}

/// The 1-based line where `key` is set in `table` (`None`: the top level,
/// before any header), if it is written on a line of its own.
pub fn key_line(text: &str, table: Option<&str>, key: &str) -> Option<usize> {
    let mut current: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.starts_with('[') {
            let h = l.split('#').next().unwrap_or(l).trim();
            current = Some(h.trim_matches(|c| c == '[' || c == ']').trim().to_string());
            continue;
        }
        let Some((k, _)) = l.split_once('=') else {
            continue;
        };
        if current.as_deref() == table && k.trim().trim_matches('"') == key {
            return Some(i + 1);
        }
    }
    None
}

/// The 1-based line where the `[[site]]` at byte `start` sets `key` in
/// its own table (`table` ""), or in `[site.TABLE]`; the search ends at
/// the next header that is not one of this site's tables.
pub fn site_key_line(text: &str, start: usize, table: &str, key: &str) -> Option<usize> {
    let first = line_of(text, start);
    let mut current = Some(String::new());
    for (i, line) in text.lines().enumerate().skip(first) {
        let l = line.trim();
        if l.starts_with('[') {
            let h = l.split('#').next().unwrap_or(l).trim();
            let name = h.trim_matches(|c| c == '[' || c == ']').trim();
            if h.starts_with("[[") && !name.starts_with("site.") {
                return None;
            }
            // Any other header ends the site.
            current = Some(name.strip_prefix("site.")?.to_string());
            continue;
        }
        let Some((k, _)) = l.split_once('=') else {
            continue;
        };
        if current.as_deref() == Some(table) && k.trim().trim_matches('"') == key {
            return Some(i + 1);
        }
    }
    None
}

/// The 1-based line of byte `offset` in `text`.
pub fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sites_parse_with_their_lines() {
        let text = "listen = [\"127.0.0.1:1\"]\n\
                    \n\
                    [[site]]\n\
                    names = [\"a.test\"]\n\
                    root = \"www\"\n\
                    [site.timeouts]\n\
                    keepalive = 3\n\
                    \n\
                    [[site]]\n\
                    names = [\"*.b.test\"]\n\
                    cert = [\"r.pem\", \"e.pem\"]\n\
                    key = [\"r.key\", \"e.key\"]\n\
                    backend = \"127.0.0.1:9\"\n\
                    write_proxy = \"v2\"\n";
        let f = FileConfig::parse(text).unwrap();
        assert_eq!(f.site.len(), 2);
        assert_eq!(line_of(text, f.site[0].span().start), 3);
        assert_eq!(line_of(text, f.site[1].span().start), 9);
        assert_eq!(f.site[0].get_ref().timeouts.keepalive, Some(3.0));
        let b = f.site[1].get_ref();
        assert_eq!(b.cert.as_ref().unwrap().paths().len(), 2);
        assert_eq!(b.write_proxy, Some(ProxyVersion::V2));
        assert!(f.top_site().is_none());
    }

    #[test]
    fn unknown_keys_are_refused_with_their_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.toml");
        std::fs::write(&p, "[[site]]\nnames = [\"a\"]\nrot = \"x\"\n").unwrap();
        let e = FileConfig::load(&p).unwrap_err().to_string();
        assert!(e.contains("t.toml, line 3") && e.contains("rot"), "{e}");
        std::fs::write(&p, "[timeouts]\nkeepalive = \"long\"\n").unwrap();
        let e = FileConfig::load(&p).unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
    }

    #[test]
    fn access_logs_are_relative_to_the_file_and_formats_checked() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.toml");
        std::fs::write(
            &p,
            "access_log = \"logs/a.log\"\n[[site]]\nnames = [\"a\"]\naccess_log = \"stdout\"\n\
             [[site]]\nnames = [\"b\"]\naccess_log = \"/var/log/b.log\"\n",
        )
        .unwrap();
        let (f, _) = FileConfig::load(&p).unwrap();
        let want = dir.path().join("logs/a.log");
        assert_eq!(f.access_log.as_deref(), want.to_str());
        assert_eq!(f.site[0].get_ref().access_log.as_deref(), Some("stdout"));
        assert_eq!(
            f.site[1].get_ref().access_log.as_deref(),
            Some("/var/log/b.log")
        );
        std::fs::write(&p, "root = \"www\"\n\naccess_log_format = \"xml\"\n").unwrap();
        let e = FileConfig::load(&p).unwrap_err().to_string();
        assert!(
            e.contains("t.toml, line 3: setting access_log_format: \"xml\" is not a format"),
            "{e}"
        );
    }

    fn load_err(text: &str) -> String {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.toml");
        std::fs::write(&p, text).unwrap();
        FileConfig::load(&p).unwrap_err().to_string()
    }

    #[test]
    fn type_errors_name_file_line_setting_and_say_what_is_expected() {
        for (text, want) in [
            (
                "root = \"x\"\nworkers = \"four\"\n",
                "t.toml, line 2: setting workers: expected a whole number (0 or more, no \
                 quotes), found a string (\"four\")",
            ),
            (
                "root = \"x\"\n[limits]\nheaders = -1\n",
                "line 3: setting [limits] headers: expected a whole number (0 or more, no \
                 quotes), found the number -1",
            ),
            (
                "names = \"a.test\"\nroot = \"x\"\n",
                "line 1: setting names: expected a list of strings, in brackets",
            ),
            (
                "[timeouts]\nsend = \"long\"\n",
                "line 2: setting [timeouts] send: expected a number",
            ),
            (
                "autoindex = 1\n",
                "line 1: setting autoindex: expected true or false (no quotes), found the \
                 number 1",
            ),
            (
                "[[site]]\nnames = [\"a\"]\ncert = 3\n",
                "line 3: setting cert: expected a path in quotes, or a list of paths",
            ),
            (
                "[[site]]\nroot = \"x\"\nnames = [\n  \"a\",\n  2,\n]\n",
                "line 5: setting names: expected a string in quotes, found the number 2",
            ),
            (
                "[[site]]\nroot = \"x\"\n[site.timeouts]\nsend = false\n",
                "line 4: setting [site.timeouts] send: expected a number",
            ),
        ] {
            let e = load_err(text);
            assert!(e.contains(want), "{text}\n=> {e}\nwanted: {want}");
            assert!(!e.contains("usize") && !e.contains("a sequence"), "{e}");
        }
    }

    #[test]
    fn a_single_site_table_says_to_use_an_array_of_tables() {
        for (text, line) in [
            ("[site]\nroot = \"x\"\n", 1),
            ("[site]\nroot = \"x\"\n[site]\nroot = \"y\"\n", 3),
            ("[[site]]\nroot = \"x\"\n[site]\nroot = \"y\"\n", 3),
        ] {
            let e = load_err(text);
            assert!(
                e.contains(&format!(
                    "line {line}: [site]: use [[site]] (an array of tables) for each site"
                )),
                "{text}\n=> {e}"
            );
        }
    }

    #[test]
    fn an_empty_listen_list_is_refused() {
        let e = load_err("root = \"x\"\n\nlisten = []\n");
        assert!(
            e.contains("t.toml, line 3: setting listen: an empty list listens nowhere"),
            "{e}"
        );
        // Left out, it is the default (resolved later).
        assert!(FileConfig::parse("root = \"x\"\n")
            .unwrap()
            .listen
            .is_empty());
    }

    #[test]
    fn the_old_flat_file_is_one_site() {
        let f = FileConfig::parse("root = \"www\"\nautoindex = true\n").unwrap();
        let s = f.top_site().unwrap();
        assert_eq!(s.root.unwrap(), PathBuf::from("www"));
        assert!(s.default);
    }
}
