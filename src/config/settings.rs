//! The one settings model both services read: process-wide settings and a
//! list of sites, resolved from a [`FileConfig`] that the command line has
//! already filled in (flags are shortcuts for the same keys; see `cli`).
//! Every value is checked here, and an error names where the value was set:
//! the flag, or the file, line and setting.

use super::backend::BackendAddr;
use super::file::{FileConfig, HeadersFile, ProxyVersion, SiteFile, UnknownNames};
use super::{
    check_timeout, check_workers, default_workers, parse_listen, ConfigError, KtlsMode, Limits,
    Timeouts,
};
use crate::privileges::RunAs;
use ipnet::IpNet;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Everything tlsfront runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The config file, if there is one (reloads read it again).
    pub file: Option<PathBuf>,
    pub listen: Vec<SocketAddr>,
    /// The admin listener (`/metrics`, `/healthz`), if any.
    pub admin: Option<SocketAddr>,
    /// Plain-HTTP listeners: HTTP-01 answers and redirects to HTTPS.
    pub http_listen: Vec<SocketAddr>,
    /// The status of those redirects.
    pub http_redirect: Redirect,
    pub workers: usize,
    pub ktls: KtlsMode,
    pub ktls_expect_no_pad: bool,
    pub run_as: Option<RunAs>,
    /// With `run_as` (and so a root parent): the parent keeps the private
    /// keys it reads and signs for the server process, which never holds
    /// them; `false`: it hands the key files' bytes over, as nginx's
    /// master does.
    pub keys_in_parent: bool,
    /// Trusted sources of a PROXY header before TLS; `None`: no header read.
    pub accept_proxy: Option<Vec<IpNet>>,
    pub unknown_names: UnknownNames,
    /// Where the main process writes its pid, if anywhere.
    pub pid_file: Option<PathBuf>,
    /// Session ticket key files (empty: keys rotated in memory).
    pub ticket_keys: Vec<PathBuf>,
    /// The ACME CA and where its account and certificates are kept (used
    /// by sites with `acme = true`).
    pub acme: crate::acme::AcmeSettings,
    /// Process-wide limits (`connections`), and every site's defaults.
    pub limits: Limits,
    /// Process-wide timeouts (`handshake`, `shutdown`), and every site's
    /// defaults.
    pub timeouts: Timeouts,
    pub sites: Vec<Site>,
    /// Index in `sites` of the site that answers unknown names.
    pub default_site: usize,
    pub open_file_cache: OpenFileCache,
    /// `[fleet]`: state shared with other nodes through etcd.
    pub fleet: Option<crate::fleet::FleetSettings>,
}

/// The status the plain-HTTP listener redirects with (`http_redirect`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Redirect {
    /// 308 Permanent Redirect for every method (RFC 9110 15.4.9): the
    /// client repeats the method and body.
    #[default]
    Permanent,
    /// 301 Moved Permanently for GET and HEAD, 308 for the others (a 301
    /// lets clients turn a POST into a GET).
    Moved,
}

impl Redirect {
    /// The status for a request with this method.
    pub fn status(self, get_or_head: bool) -> u16 {
        match self {
            Redirect::Moved if get_or_head => 301,
            _ => 308,
        }
    }
}

/// The workers' caches of open files (`files::cache`).
#[derive(Debug, Clone, PartialEq)]
pub struct OpenFileCache {
    /// Entries per worker; unset: the default, or fewer if the open-file
    /// limit is low.
    pub entries: Option<usize>,
    /// Seconds a kept file's path is trusted.
    pub valid: f64,
}

/// Most entries `open_file_cache` may ask of each worker.
pub const MAX_OPEN_FILE_CACHE: usize = 1_000_000;

/// One site: its names, certificates and job.
#[derive(Debug, Clone)]
pub struct Site {
    /// Where it was described (for messages).
    pub origin: String,
    /// Lower-case host names; `*.example.com` covers one label. Empty: the
    /// site of `serve`/`proxy` without a file, which answers every name.
    pub names: Vec<String>,
    /// (certificate chain, key) pairs; empty: the built-in self-signed
    /// certificate.
    pub certs: Vec<(PathBuf, PathBuf)>,
    /// The OCSP response file to staple for each of `certs` (same length;
    /// all `None` without `ocsp`).
    pub ocsp: Vec<Option<PathBuf>>,
    /// Where `cert` was set (for errors about the files).
    pub cert_origin: String,
    /// Where `key` was set (for errors about the key files).
    pub key_origin: String,
    /// The certificate comes from the ACME CA (`certs` is empty).
    pub acme: bool,
    /// How the CA validates the names (`acme_challenge`).
    pub acme_challenge: crate::acme::ChallengeKind,
    /// With `acme`: the certificate profile to order (its own
    /// `acme_profile`, else the top level's); `None`: the CA's default.
    pub acme_profile: Option<String>,
    pub job: Job,
    pub alpn: Vec<Vec<u8>>,
    /// TLS versions, cipher suites, key exchange groups, certificate
    /// compression.
    pub tls: crate::tls::policy::Policy,
    /// Client certificates asked for (`client_ca`, `client_auth`,
    /// `client_crl`), read when the site is built.
    pub client_auth: Option<crate::tls::client_auth::ClientAuth>,
    pub limits: Limits,
    pub timeouts: Timeouts,
    pub access_log: crate::accesslog::LogConfig,
}

impl Site {
    /// Where the setting at fault in a certificate or key error was set.
    pub fn origin_of(&self, e: &super::cert::CertError) -> &str {
        if e.is_about_key() {
            &self.key_origin
        } else {
            &self.cert_origin
        }
    }

    /// Its first name, or `*` for the site that answers every name.
    pub fn label(&self) -> &str {
        self.names.first().map_or("*", String::as_str)
    }
}

/// What a site does with a connection once TLS is up.
#[derive(Debug, Clone)]
pub enum Job {
    Files(Files),
    Backend(Backend),
}

#[derive(Debug, Clone)]
pub struct Files {
    pub root: PathBuf,
    pub autoindex: bool,
    pub follow_symlinks_outside: bool,
    /// Codings of precompressed siblings to serve, preferred first.
    pub precompressed: Vec<crate::http::encoding::Encoding>,
    /// Response headers, merged per path rule.
    pub headers: crate::http::site_headers::SiteHeaders,
    /// The file that answers paths that do not exist.
    pub fallback: Option<crate::http::path::NormPath>,
    /// The charset added to text types' `Content-Type`.
    pub charset: Option<String>,
    /// Paths that need a verified client certificate.
    pub client_cert_paths: Vec<crate::http::site_headers::Pattern>,
    /// The `Server` header names the version (`tlsfront/0.1.0`); `false`:
    /// `tlsfront` alone. The site's `server_tokens`, else the top level's.
    pub server_tokens: bool,
}

#[derive(Debug, Clone)]
pub struct Backend {
    pub addr: BackendAddr,
    pub write_proxy: Option<ProxyVersion>,
}

/// The ALPN offered by a static-file site unless set: HTTP/2 first (every
/// browser offers it), then HTTP/1.1 and, as nginx, "http/1.0" (which
/// clients such as `curl --http1.0` offer).
pub const FILES_ALPN: [&str; 3] = ["h2", "http/1.1", "http/1.0"];

/// Where each setting came from: flags that were given (key → flag), else
/// the config file.
#[derive(Debug, Default, Clone)]
pub struct Origins {
    pub file: Option<PathBuf>,
    pub flags: HashMap<&'static str, &'static str>,
}

impl Origins {
    /// Where the top-level `key` (e.g. `listen`, `[timeouts] send`) was set.
    pub fn of(&self, key: &str) -> String {
        if let Some(flag) = self.flags.get(key) {
            return (*flag).to_string();
        }
        match &self.file {
            Some(p) => format!("config file {}, setting {key}", p.display()),
            None => format!("default {key}"),
        }
    }

    /// As [`Origins::of`], with the line the file sets it on (`text`: the
    /// file's text): `config file F, line N, setting [limits] headers`.
    pub fn of_in(&self, key: &str, text: &str) -> String {
        let (table, name) = match key.strip_prefix('[').and_then(|k| k.split_once("] ")) {
            Some((t, k)) => (Some(t), k),
            None => (None, key),
        };
        match (&self.file, self.flags.contains_key(key)) {
            (Some(p), false) => match super::file::key_line(text, table, name) {
                Some(line) => format!("config file {}, line {line}, setting {key}", p.display()),
                None => self.of(key),
            },
            _ => self.of(key),
        }
    }

    pub fn flag(&mut self, key: &'static str, flag: &'static str) {
        self.flags.insert(key, flag);
    }
}

/// Resolve `file` (already filled in with the flags; `text` is the file's
/// text, for line numbers) into [`Settings`]. `default_root`: the root of a
/// top-level site that names neither a root nor a backend (`serve`'s
/// current directory); `None` refuses such a site.
pub fn resolve(
    file: FileConfig,
    text: &str,
    origins: &Origins,
    default_root: Option<&Path>,
) -> Result<Settings, ConfigError> {
    let o = |k: &str| origins.of_in(k, text);
    let mut listen = Vec::new();
    for l in &file.listen {
        let origin = match (&origins.file, origins.flags.contains_key("listen")) {
            (Some(p), false) => format!(
                "config file {}, line {}, setting listen",
                p.display(),
                super::file::line_of(text, l.span().start)
            ),
            _ => o("listen"),
        };
        listen.push(parse_listen(&origin, l.get_ref())?);
    }
    if listen.is_empty() {
        listen.push(parse_listen("default", "127.0.0.1:8443")?);
    }
    let admin = match &file.admin {
        Some(a) => {
            let origin = match (&origins.file, origins.flags.contains_key("admin")) {
                (Some(p), false) => format!(
                    "config file {}, line {}, setting admin",
                    p.display(),
                    super::file::line_of(text, a.span().start)
                ),
                _ => o("admin"),
            };
            let value = a.get_ref();
            let addr: SocketAddr = value.parse().map_err(|_| ConfigError::Invalid {
                origin: origin.clone(),
                message: format!(
                    "admin address {value:?} is not IP:PORT (example: 127.0.0.1:9101; keep it \
                     on loopback or a private network: it answers without TLS or a password)"
                ),
            })?;
            if let Some(l) = listen.iter().find(|l| overlaps(addr, **l)) {
                return Err(ConfigError::Invalid {
                    origin,
                    message: format!(
                        "admin address {addr} is also a listen address ({l}): the admin \
                         listener answers plain HTTP, the listen ones TLS; give it a port of \
                         its own (e.g. 127.0.0.1:9101)"
                    ),
                });
            }
            Some(addr)
        }
        None => None,
    };
    let mut http_listen = Vec::new();
    for l in &file.http_listen {
        let addr = parse_listen(&o("http_listen"), l)?;
        let clash = listen
            .iter()
            .chain(admin.iter())
            .chain(http_listen.iter())
            .find(|a| overlaps(addr, **a));
        if let Some(a) = clash {
            return Err(ConfigError::Invalid {
                origin: o("http_listen"),
                message: format!(
                    "{addr} is also listened on as {a} (listen, admin or http_listen): give \
                     the plain-HTTP listener a port of its own (e.g. 0.0.0.0:80)"
                ),
            });
        }
        http_listen.push(addr);
    }
    let http_redirect = match file.http_redirect {
        None | Some(308) => Redirect::Permanent,
        Some(301) => Redirect::Moved,
        Some(n) => {
            return Err(ConfigError::Invalid {
                origin: o("http_redirect"),
                message: format!(
                    "{n} is not a redirect status this listener sends: 308 (the default, \
                     every method kept) or 301 (GET and HEAD; other methods still get 308)"
                ),
            })
        }
    };
    let workers = file.workers.unwrap_or_else(default_workers);
    check_workers(&o("workers"), workers)?;
    file.timeouts.check(|k| o(&format!("[timeouts] {k}")))?;
    file.limits.check(|k| o(&format!("[limits] {k}")))?;
    let run_as = match (&file.user, &file.group) {
        (Some(u), g) => Some(RunAs::resolve(u, g.as_deref(), o)?),
        (None, Some(_)) => return Err(ConfigError::GroupWithoutUser { origin: o("group") }),
        (None, None) => None,
    };
    let accept_proxy = match file.accept_proxy {
        Some(true) => Some(trusted_sources(
            file.proxy_from.as_deref().unwrap_or_default(),
            &o("proxy_from"),
        )?),
        _ if file.proxy_from.is_some() => {
            return Err(ConfigError::Invalid {
                origin: o("proxy_from"),
                message: "trusted PROXY sources mean nothing without accept_proxy = true \
                          (--accept-proxy): set it, or leave proxy_from out"
                    .into(),
            })
        }
        _ => None,
    };

    // The sites: `[[site]]` tables, else the one at the top level.
    // (where it is described, its keys, the byte offset of its [[site]]).
    let mut raw: Vec<(String, SiteFile, Option<usize>)> = Vec::new();
    let top = file.top_site();
    if !file.site.is_empty() {
        if top.is_some() {
            return Err(ConfigError::Invalid {
                origin: o("root"),
                message: "site keys (names, cert, key, root, backend, …) at the top level \
                          and [[site]] tables together: move them into a [[site]]"
                    .into(),
            });
        }
        for (i, s) in file.site.iter().enumerate() {
            let origin = match &origins.file {
                Some(p) => format!(
                    "config file {}, line {} ([[site]] #{})",
                    p.display(),
                    super::file::line_of(text, s.span().start),
                    i + 1
                ),
                None => format!("[[site]] #{}", i + 1),
            };
            raw.push((origin, s.get_ref().clone(), Some(s.span().start)));
        }
    } else {
        let site = top.unwrap_or_else(|| SiteFile {
            default: true,
            ..SiteFile::default()
        });
        let origin = match &origins.file {
            Some(p) => format!("config file {}", p.display()),
            None => "the command line".to_string(),
        };
        raw.push((origin, site, None));
    }

    // The top level's access log is every site's default.
    let top_log = site_log(
        &file.access_log,
        file.access_log_format,
        &Default::default(),
        &o("access_log"),
    )?;
    // Checked on its own, so that a bad top-level value is named there
    // even when every site sets its own.
    let top_tls = file.tls();
    top_tls.policy().map_err(|e| ConfigError::Invalid {
        origin: o(e.setting().key()),
        message: e.to_string(),
    })?;
    let mut sites = Vec::with_capacity(raw.len());
    let mut owner: HashMap<String, usize> = HashMap::new();
    let mut default_site = None;
    let single = raw.len() == 1;
    for (i, (origin, s, site_at)) in raw.into_iter().enumerate() {
        let mut site = resolve_site(
            (origin, site_at),
            s.clone(),
            (text, file.headers.as_ref(), file.server_tokens, file.http2),
            &top_tls,
            (&file.limits, &file.timeouts),
            origins,
            single.then_some(default_root).flatten(),
        )?;
        site.access_log = if site.origin.contains("[[site]]") {
            let at = site_setting(&site.origin, site_at, text, "access_log");
            site_log(&s.access_log, s.access_log_format, &top_log, &at)?
        } else {
            top_log.clone()
        };
        if !single && site.names.is_empty() {
            return Err(ConfigError::Invalid {
                origin: site.origin,
                message: "a site needs names = [\"example.com\", …] when there are several".into(),
            });
        }
        for n in &site.names {
            if let Some(&j) = owner.get(n) {
                return Err(ConfigError::Invalid {
                    origin: site_setting(&site.origin, site_at, text, "names"),
                    message: format!(
                        "name {n:?} is also a name of {}: each name belongs to one site",
                        sites_origin(&sites, j)
                    ),
                });
            }
            owner.insert(n.clone(), i);
        }
        if s.default {
            if let Some(j) = default_site {
                return Err(ConfigError::Invalid {
                    origin: site.origin,
                    message: format!(
                        "default = true here and in {}: one site is the default",
                        sites_origin(&sites, j)
                    ),
                });
            }
            default_site = Some(i);
        }
        sites.push(site);
    }
    if let Some(n) = file.open_file_cache {
        super::in_range(
            &o("open_file_cache"),
            n,
            0..=MAX_OPEN_FILE_CACHE,
            "a number of files per worker, 0 (keep none) to 1000000",
        )?;
    }
    let open_file_cache = OpenFileCache {
        entries: file.open_file_cache,
        valid: file
            .open_file_cache_valid
            .unwrap_or(crate::files::cache::DEFAULT_VALID),
    };
    super::check_timeout(&o("open_file_cache_valid"), open_file_cache.valid)?;
    let acme_dns = acme_dns(&file, &o)?;
    if acme_dns.is_none() {
        dns01_needs_a_server(&sites)?;
    }
    if http_listen.is_empty() {
        if let Some(s) = sites
            .iter()
            .find(|s| s.acme_challenge == crate::acme::ChallengeKind::Http01)
        {
            return Err(ConfigError::Invalid {
                origin: format!("{}, setting acme_challenge", s.origin),
                message: "\"http-01\" is answered on the plain-HTTP listener, and \
                          http_listen is not set: add http_listen = [\"0.0.0.0:80\", \"[::]:80\"] \
                          (the CA validates on port 80)"
                    .into(),
            });
        }
    }
    let acme_profile = match file.acme_profile.clone() {
        Some(p) => Some(check_acme_profile(&o("acme_profile"), p)?),
        None => None,
    };
    for site in sites
        .iter_mut()
        .filter(|s| s.acme && s.acme_profile.is_none())
    {
        site.acme_profile.clone_from(&acme_profile);
    }
    let fleet = match &file.fleet {
        Some(f) => Some(super::fleet::resolve(f, &o)?),
        None => None,
    };
    if fleet.is_some() && file.ticket_keys.as_ref().is_some_and(|k| !k.is_empty()) {
        return Err(ConfigError::Invalid {
            origin: o("ticket_keys"),
            message: "[fleet] shares session-ticket keys through etcd (made and rotated by one \
                      node): remove ticket_keys, which is for servers without a fleet"
                .into(),
        });
    }
    let unknown_names = file.unknown_names.unwrap_or_default();
    if unknown_names == UnknownNames::Reject && sites.iter().any(|s| s.names.is_empty()) {
        return Err(ConfigError::Invalid {
            origin: o("unknown_names"),
            message: "\"reject\" refuses every name no site lists, and a site here lists \
                      none: give it names = [\"example.com\", …]"
                .into(),
        });
    }
    Ok(Settings {
        file: origins.file.clone(),
        listen,
        admin,
        http_listen,
        http_redirect,
        workers,
        ktls: file.ktls.unwrap_or_default(),
        ktls_expect_no_pad: file.ktls_expect_no_pad.unwrap_or(true),
        run_as,
        keys_in_parent: file.keys_in_parent.unwrap_or(true),
        accept_proxy,
        unknown_names,
        pid_file: file.pid_file.clone(),
        ticket_keys: file.ticket_keys.unwrap_or_default(),
        acme: crate::acme::AcmeSettings {
            directory: file
                .acme_directory
                .clone()
                .unwrap_or_else(|| crate::acme::LETS_ENCRYPT_PRODUCTION.to_string()),
            contact: file.acme_contact.clone().unwrap_or_default(),
            state_dir: match &file.state_dir {
                Some(d) => d.join("acme"),
                None => super::cert::data_dir()
                    .map(|d| d.join("acme"))
                    .unwrap_or_else(|_| PathBuf::from("acme")),
            },
            extra_roots: file.acme_ca_roots.clone(),
            dns: acme_dns,
            profile: acme_profile,
        },
        limits: file.limits,
        timeouts: file.timeouts,
        sites,
        default_site: default_site.unwrap_or(0),
        open_file_cache,
        fleet,
    })
}

/// `acme_dns_server` and `acme_dns_tsig_key_file`: both or neither; the
/// key file is read now (and at each reload), so a bad one stops the start
/// rather than the first DNS-01 order.
fn acme_dns(
    file: &FileConfig,
    o: &dyn Fn(&str) -> String,
) -> Result<Option<crate::acme::dns01::DnsUpdate>, ConfigError> {
    use crate::acme::dns01::{TsigKey, KEY_SETTING, SERVER_SETTING};
    let invalid = |key: &str, message: String| ConfigError::Invalid {
        origin: o(key),
        message,
    };
    match (&file.acme_dns_server, &file.acme_dns_tsig_key_file) {
        (None, None) => Ok(None),
        (Some(_), None) => Err(invalid(
            SERVER_SETTING,
            format!(
                "DNS-01 updates are signed with TSIG: add {KEY_SETTING} = \
                 \"/etc/tlsfront/acme-dns.key\" (the key the server takes updates with, as \
                 `tsig-keygen -a hmac-sha256 NAME` writes it)"
            ),
        )),
        (None, Some(_)) => Err(invalid(
            KEY_SETTING,
            format!(
                "the key signs updates to a DNS server: add {SERVER_SETTING} = \"IP:PORT\" \
                 (the primary server of the zones holding the names)"
            ),
        )),
        (Some(server), Some(key_file)) => {
            let addr = server
                .parse::<SocketAddr>()
                .or_else(|_| {
                    server
                        .parse::<std::net::IpAddr>()
                        .map(|ip| SocketAddr::new(ip, 53))
                })
                .map_err(|_| {
                    invalid(
                        SERVER_SETTING,
                        format!(
                            "{server:?} is not IP:PORT or IP (examples: \"192.0.2.53:53\", \
                             \"[2001:db8::53]:53\"): the zone's primary server, which takes \
                             updates over TCP"
                        ),
                    )
                })?;
            let key = TsigKey::read(key_file).map_err(|e| invalid(KEY_SETTING, e.to_string()))?;
            Ok(Some(crate::acme::dns01::DnsUpdate {
                server: addr,
                key_file: key_file.clone(),
                key: std::sync::Arc::new(key),
            }))
        }
    }
}

/// Without `acme_dns_server`, no site may need DNS-01: one that asks for
/// it, or an "auto" one with a wildcard name (only DNS-01 proves those).
fn dns01_needs_a_server(sites: &[Site]) -> Result<(), ConfigError> {
    use crate::acme::ChallengeKind;
    for s in sites.iter().filter(|s| s.acme) {
        let wildcard = s.names.iter().find(|n| n.starts_with("*."));
        match (s.acme_challenge, wildcard) {
            (ChallengeKind::Dns01, _) => {
                return Err(ConfigError::Invalid {
                    origin: format!("{}, setting acme_challenge", s.origin),
                    message: "\"dns-01\" adds a TXT record through the zone's DNS server, and \
                              acme_dns_server is not set: set acme_dns_server and \
                              acme_dns_tsig_key_file"
                        .into(),
                })
            }
            (ChallengeKind::Auto, Some(w)) => {
                return Err(ConfigError::Invalid {
                    origin: format!("{}, setting names", s.origin),
                    message: format!(
                        "{w}: an ACME CA proves a wildcard name with DNS-01 only, and \
                         acme_dns_server is not set: set acme_dns_server and \
                         acme_dns_tsig_key_file, list the names, or give cert and key"
                    ),
                })
            }
            _ => {}
        }
    }
    Ok(())
}

/// A key of a site with a root that a backend site has set, if any
/// (`default_headers`: the top-level `headers` belong to this site).
fn files_only_key(s: &SiteFile, default_headers: bool) -> Option<&'static str> {
    if s.headers.is_some() || default_headers {
        Some("headers")
    } else if !s.paths.is_empty() {
        Some("paths")
    } else if s.precompressed.is_some() {
        Some("precompressed")
    } else if s.fallback.is_some() {
        Some("fallback")
    } else if s.charset.is_some() {
        Some("charset")
    } else if s.server_tokens.is_some() {
        Some("server_tokens")
    } else if s.http2.is_some() {
        Some("http2")
    } else {
        None
    }
}

/// Whether two addresses would take the same port: the same fixed port
/// on the same address, or on the wildcard address of either's family
/// (port 0 is a fresh port each time, so it never collides).
/// `acme_profile`: what can be checked without the CA (whether it lists
/// the profile is checked at each order, against its directory): a name,
/// printable ASCII without blanks, as the directories of CAs write them
/// ("classic", "shortlived", ...).
fn check_acme_profile(origin: &str, profile: String) -> Result<String, ConfigError> {
    const MAX: usize = 255;
    if profile.is_empty() || profile.len() > MAX || !profile.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ConfigError::Invalid {
            origin: origin.to_string(),
            message: format!(
                "{profile:?} is not a profile name: give one the ACME CA's directory lists \
                 (e.g. \"classic\" or \"shortlived\" at Let's Encrypt), printable ASCII \
                 without blanks, 1 to {MAX} characters; or leave acme_profile out for the CA's \
                 default"
            ),
        });
    }
    Ok(profile)
}

fn overlaps(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() != 0
        && a.port() == b.port()
        && (a.ip() == b.ip()
            || (a.is_ipv4() == b.is_ipv4() && (a.ip().is_unspecified() || b.ip().is_unspecified())))
}

fn sites_origin(sites: &[Site], i: usize) -> &str {
    sites.get(i).map_or("another site", |s| s.origin.as_str())
}

/// `--proxy-from`/`proxy_from`: CIDR blocks or addresses (default:
/// loopback).
fn trusted_sources(list: &[String], origin: &str) -> Result<Vec<IpNet>, ConfigError> {
    let mut nets = Vec::new();
    for c in list {
        nets.push(
            c.parse::<IpNet>()
                .or_else(|_| c.parse::<std::net::IpAddr>().map(IpNet::from))
                .map_err(|_| ConfigError::Invalid {
                    origin: origin.into(),
                    message: format!(
                        "{c:?} is not an address or CIDR block (examples: 10.0.0.0/8, \
                         192.0.2.1, ::1/128)"
                    ),
                })?,
        );
    }
    if nets.is_empty() {
        nets = vec![
            "127.0.0.0/8".parse().unwrap_or_default(),
            IpNet::from(std::net::IpAddr::from(std::net::Ipv6Addr::LOCALHOST)),
        ];
    }
    Ok(nets)
}

/// Where a `[[site]]`'s setting `k` (`cert`, `[timeouts] send`) is: the
/// site's `origin` with the setting's own line when the file has it on one
/// (`site_at`: the byte offset of the `[[site]]`), else the site's line.
fn site_setting(origin: &str, site_at: Option<usize>, text: &str, k: &str) -> String {
    let (table, name) = match k.strip_prefix('[').and_then(|k| k.split_once("] ")) {
        Some((t, n)) => (t, n),
        None => ("", k),
    };
    let lines = site_at.and_then(|start| {
        let own = super::file::site_key_line(text, start, table, name)?;
        Some((super::file::line_of(text, start), own))
    });
    match lines {
        Some((site, own)) if own != site => format!(
            "{}, setting {k}",
            origin.replacen(&format!("line {site} ("), &format!("line {own} ("), 1)
        ),
        _ => format!("{origin}, setting {k}"),
    }
}

/// A site's client certificate settings (its own over the top level's):
/// `client_auth` needs `client_ca`; `client_ca` alone means `require`.
fn client_auth(
    t: &super::file::TlsFile,
    origin_of: &dyn Fn(&str) -> String,
) -> Result<Option<crate::tls::client_auth::ClientAuth>, ConfigError> {
    use crate::tls::client_auth::{ClientAuth, Mode};
    let mode = match t.client_auth.as_deref().map(str::trim) {
        None | Some("require") => Some(Mode::Require),
        Some("optional") => Some(Mode::Optional),
        Some("off") => None,
        Some(other) => {
            return Err(ConfigError::Invalid {
                origin: origin_of("client_auth"),
                message: format!(
                    "{other:?} is not a client_auth mode: give \"require\" (no handshake \
                     without a certificate from client_ca), \"optional\" (a certificate, if \
                     presented, must verify) or \"off\""
                ),
            })
        }
    };
    let Some(ca) = &t.client_ca else {
        if t.client_auth.is_some() && mode.is_some() {
            return Err(ConfigError::Invalid {
                origin: origin_of("client_auth"),
                message: "client certificates need the CAs that issue them: set client_ca = \
                          \"clients-ca.pem\" (a PEM bundle), or leave client_auth out"
                    .into(),
            });
        }
        if t.client_crl.is_some() {
            return Err(ConfigError::Invalid {
                origin: origin_of("client_crl"),
                message: "revocation lists apply to client certificates: set client_ca (and \
                          client_auth) as well, or leave client_crl out"
                    .into(),
            });
        }
        return Ok(None);
    };
    let Some(mode) = mode else {
        return Ok(None);
    };
    Ok(Some(ClientAuth {
        mode,
        ca: ca.clone(),
        crls: t.client_crl.clone().unwrap_or_default(),
        ca_origin: origin_of("client_ca"),
        crl_origin: origin_of("client_crl"),
    }))
}

fn resolve_site(
    (origin, site_at): (String, Option<usize>),
    s: SiteFile,
    (text, default_headers, server_tokens, http2): (
        &str,
        Option<&HeadersFile>,
        Option<bool>,
        Option<bool>,
    ),
    top_tls: &super::file::TlsFile,
    (limits, timeouts): (&Limits, &Timeouts),
    origins: &Origins,
    default_root: Option<&Path>,
) -> Result<Site, ConfigError> {
    // A site from the command line or the file's top level: its keys are
    // top-level ones, named as such; a [[site]]'s are named in it.
    let top = !origin.contains("[[site]]");
    // A [[site]]'s key is named with its own line when the file has it
    // on one (else the [[site]]'s line).
    let at = |k: &str| {
        if top {
            origins.of_in(k, text)
        } else {
            site_setting(&origin, site_at, text, k)
        }
    };
    let invalid = |k: &str, message: String| ConfigError::Invalid {
        origin: at(k),
        message,
    };

    let mut names = Vec::with_capacity(s.names.len());
    for n in &s.names {
        names.push(check_name(n).map_err(|m| invalid("names", m))?);
    }
    let certs = match (&s.cert, &s.key) {
        (None, None) => Vec::new(),
        (Some(c), Some(k)) => {
            let (c, k) = (c.paths(), k.paths());
            if c.len() != k.len() || c.is_empty() {
                return Err(invalid(
                    "key",
                    format!(
                        "{} certificate file(s) and {} key file(s): give one key per \
                         certificate, in the same order",
                        c.len(),
                        k.len()
                    ),
                ));
            }
            c.into_iter().zip(k).collect()
        }
        (Some(_), None) => {
            return Err(invalid(
                "cert",
                "a certificate needs its key: set key as well".into(),
            ))
        }
        (None, Some(_)) => {
            return Err(invalid(
                "key",
                "a key needs its certificate: set cert as well".into(),
            ))
        }
    };

    let ocsp: Vec<Option<PathBuf>> = match &s.ocsp {
        None => vec![None; certs.len()],
        Some(_) if s.acme => {
            return Err(invalid(
                "ocsp",
                "acme = true sites get their certificate from the CA, and tlsfront does not \
                 staple OCSP for those: leave ocsp out (or give cert, key and ocsp instead of \
                 acme)"
                    .into(),
            ))
        }
        Some(o) => {
            let o = o.paths();
            if o.len() != certs.len() {
                return Err(invalid(
                    "ocsp",
                    format!(
                        "{} OCSP response file(s) for {} certificate file(s): give one \
                         response per certificate, in the same order as cert",
                        o.len(),
                        certs.len()
                    ),
                ));
            }
            o.into_iter().map(Some).collect()
        }
    };

    let job = match (&s.root, &s.backend) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "backend",
                "a site serves files (root) or terminates TLS for a backend (backend), \
                 not both: make two sites"
                    .into(),
            ))
        }
        (None, Some(b)) => {
            if let Some(k) = files_only_key(&s, top && default_headers.is_some()) {
                return Err(invalid(
                    k,
                    format!(
                        "{k} is for a site with a root: a backend site relays the TLS \
                         stream and writes no HTTP of its own (set it in the backend)"
                    ),
                ));
            }
            if s.autoindex.is_some() || s.follow_symlinks_outside.is_some() {
                return Err(invalid(
                    "autoindex",
                    "autoindex and follow_symlinks_outside are for a site with a root, \
                     not a backend"
                        .into(),
                ));
            }
            Job::Backend(Backend {
                addr: BackendAddr::parse(b).map_err(|e| invalid("backend", e.to_string()))?,
                write_proxy: s.write_proxy,
            })
        }
        (root, None) => {
            let Some(root) = root.clone().or_else(|| default_root.map(Path::to_path_buf)) else {
                return Err(invalid(
                    "root",
                    "a site needs root = \"/srv/DIR\" (static files) or backend = \
                     \"HOST:PORT\" (TLS termination)"
                        .into(),
                ));
            };
            if s.write_proxy.is_some() {
                return Err(invalid(
                    "write_proxy",
                    "a PROXY header goes to a backend: this site serves files".into(),
                ));
            }
            let spot = |k: &str, span: std::ops::Range<usize>| match &origins.file {
                Some(p) if !span.is_empty() && !origins.flags.contains_key(k) => format!(
                    "config file {}, line {}, setting {k}",
                    p.display(),
                    super::file::line_of(text, span.start)
                ),
                _ => at(k),
            };
            let static_files = super::static_files::resolve(&s, default_headers, top, &at, &spot)?;
            Job::Files(Files {
                root,
                autoindex: s.autoindex.unwrap_or(false),
                follow_symlinks_outside: s.follow_symlinks_outside.unwrap_or(false),
                precompressed: static_files.precompressed,
                headers: static_files.headers,
                fallback: static_files.fallback,
                charset: static_files.charset,
                client_cert_paths: static_files.client_cert_paths,
                server_tokens: s.server_tokens.or(server_tokens).unwrap_or(true),
            })
        }
    };
    let alpn: Vec<String> = match (&s.alpn, &job) {
        (Some(a), _) => a.clone(),
        (None, Job::Files(_)) => FILES_ALPN
            .iter()
            .filter(|a| s.http2.or(http2).unwrap_or(true) || **a != "h2")
            .map(|s| s.to_string())
            .collect(),
        (None, Job::Backend(_)) => Vec::new(),
    };
    for a in &alpn {
        if a.is_empty() || a.len() > 255 {
            return Err(invalid(
                "alpn",
                format!("{a:?} is not an ALPN protocol name (1 to 255 bytes, e.g. h2, http/1.1)"),
            ));
        }
        if matches!(job, Job::Files(_)) && !FILES_ALPN.contains(&a.as_str()) {
            return Err(invalid(
                "alpn",
                format!(
                    "{a:?}: a site with a root speaks h2, http/1.1 and http/1.0; offer \
                     those, or leave alpn out"
                ),
            ));
        }
    }

    // The site's own keys over the top level's; an error names the one
    // that is set (the site's, else the top level's).
    let site_tls = s.tls();
    let origin_of = |key: &str| {
        if !site_tls.sets(key) && top_tls.sets(key) {
            origins.of_in(key, text)
        } else {
            at(key)
        }
    };
    let merged = site_tls.over(top_tls);
    let tls = merged.policy().map_err(|e| ConfigError::Invalid {
        origin: origin_of(e.setting().key()),
        message: e.to_string(),
    })?;
    let client_auth = client_auth(&merged, &origin_of)?;
    if let Job::Files(f) = &job {
        if !f.client_cert_paths.is_empty() && client_auth.is_none() {
            let table = if top { "[[paths]]" } else { "[[site.paths]]" };
            return Err(invalid(
                &format!("{table} client_cert"),
                "a path can require a client certificate only on a site that asks for one: \
                 set client_ca and client_auth = \"optional\" on the site (\"require\" asks \
                 every connection for one already)"
                    .into(),
            ));
        }
    }

    let mut site_limits = limits.clone();
    let l = &s.limits;
    for (slot, v) in [
        (&mut site_limits.request_line, l.request_line),
        (&mut site_limits.header_bytes, l.header_bytes),
        (&mut site_limits.headers, l.headers),
    ] {
        if let Some(v) = v {
            *slot = v;
        }
    }
    if let Some(v) = l.body {
        site_limits.body = v;
    }
    if let Some(v) = l.keepalive_requests {
        site_limits.keepalive_requests = v;
    }
    site_limits.check(|k| at(&format!("[limits] {k}")))?;
    let mut site_timeouts = timeouts.clone();
    let t = &s.timeouts;
    for (name, slot, v) in [
        (
            "request_header",
            &mut site_timeouts.request_header,
            t.request_header,
        ),
        ("keepalive", &mut site_timeouts.keepalive, t.keepalive),
        ("send", &mut site_timeouts.send, t.send),
        ("connect", &mut site_timeouts.connect, t.connect),
        ("idle", &mut site_timeouts.idle, t.idle),
    ] {
        if let Some(v) = v {
            check_timeout(&at(&format!("[timeouts] {name}")), v)?;
            *slot = v;
        }
    }
    if s.acme {
        if !certs.is_empty() {
            return Err(invalid(
                "acme",
                "acme = true gets the certificate from the CA: leave cert and key out, \
                 or acme out"
                    .into(),
            ));
        }
        if names.is_empty() {
            return Err(invalid(
                "acme",
                "acme = true needs names = [\"example.com\", …]: the certificate is for them"
                    .into(),
            ));
        }
        use crate::acme::ChallengeKind;
        let challenge = s.acme_challenge.unwrap_or_default();
        if let (Some(w), ChallengeKind::TlsAlpn01 | ChallengeKind::Http01) =
            (names.iter().find(|n| n.starts_with("*.")), challenge)
        {
            return Err(invalid(
                "acme_challenge",
                format!(
                    "{w}: the CA proves a wildcard name with DNS-01 only, not {}: set \
                     acme_challenge = \"dns-01\" (or leave it out: \"auto\" uses DNS-01 for \
                     wildcards) with acme_dns_server and acme_dns_tsig_key_file, list the \
                     names, or give cert and key",
                    match challenge {
                        ChallengeKind::TlsAlpn01 => "TLS-ALPN-01",
                        _ => "HTTP-01",
                    }
                ),
            ));
        }
    }
    if s.acme_challenge.is_some() && !s.acme {
        return Err(invalid(
            "acme_challenge",
            "acme_challenge says how the ACME CA validates the names of an acme = true site, \
             and this site is not one: set acme = true, or leave acme_challenge out"
                .into(),
        ));
    }
    let acme_profile = match s.acme_profile {
        Some(_) if !s.acme => {
            return Err(invalid(
                "acme_profile",
                "a profile is for a certificate from the ACME CA: set acme = true, or leave \
                 acme_profile out"
                    .into(),
            ))
        }
        Some(p) => Some(check_acme_profile(&at("acme_profile"), p)?),
        None => None,
    };
    Ok(Site {
        acme: s.acme,
        acme_challenge: s.acme_challenge.unwrap_or_default(),
        acme_profile,
        cert_origin: at("cert"),
        key_origin: at("key"),
        origin,
        names,
        certs,
        ocsp,
        job,
        alpn: alpn.into_iter().map(String::into_bytes).collect(),
        tls,
        client_auth,
        limits: site_limits,
        timeouts: site_timeouts,
        access_log: Default::default(),
    })
}

/// An access log as set (`access_log` at `origin`, its format), over the
/// one it inherits.
fn site_log(
    target: &Option<String>,
    format: Option<crate::accesslog::Format>,
    inherited: &crate::accesslog::LogConfig,
    origin: &str,
) -> Result<crate::accesslog::LogConfig, ConfigError> {
    let mut log = inherited.clone();
    if let Some(t) = target {
        log.target =
            crate::accesslog::Target::parse(t).map_err(|message| ConfigError::Invalid {
                origin: origin.into(),
                message,
            })?;
        log.origin = origin.into();
    }
    if let Some(f) = format {
        log.format = f;
    }
    Ok(log)
}

/// A host name as a site may list it: lower case, no trailing dot; a
/// wildcard only as the whole first label (`*.example.com`, as in
/// certificates). IP addresses never arrive in SNI, so they are refused.
pub fn check_name(name: &str) -> Result<String, String> {
    let n = name.trim_end_matches('.').to_ascii_lowercase();
    let (wild, rest) = match n.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, n.as_str()),
    };
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    let ok = !rest.is_empty() && n.len() <= 253 && rest.split('.').all(label_ok);
    if !ok {
        return Err(format!(
            "{name:?} is not a host name (examples: example.com, *.example.com; a wildcard \
             only as the whole first label)"
        ));
    }
    if rest.parse::<std::net::IpAddr>().is_ok() || (!wild && n.parse::<std::net::IpAddr>().is_ok())
    {
        return Err(format!(
            "{name:?} is an IP address: clients send no name (SNI) for those, so the \
             default site answers them"
        ));
    }
    if wild && !rest.contains('.') {
        return Err(format!(
            "{name:?}: a wildcard needs at least two labels after it (*.example.com)"
        ));
    }
    Ok(n)
}

impl Settings {
    /// The files site of `serve` / the backend site of `proxy` when there is
    /// only one site (what `serve` and `proxy` print).
    pub fn only_site(&self) -> Option<&Site> {
        match self.sites.as_slice() {
            [one] => Some(one),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from_text(text: &str) -> Result<Settings, ConfigError> {
        let f = FileConfig::parse(text).unwrap();
        let o = Origins {
            file: Some("/etc/t.toml".into()),
            ..Default::default()
        };
        resolve(f, text, &o, None)
    }

    #[test]
    fn several_sites_resolve_with_defaults_and_overrides() {
        let s = from_text(
            "listen = [\"127.0.0.1:1\", \"[::1]:1\"]\n\
             [timeouts]\nkeepalive = 9\n\
             [[site]]\nnames = [\"A.test.\", \"*.a.test\"]\nroot = \"/srv/a\"\n\
             [site.timeouts]\nkeepalive = 2\n\
             [[site]]\nnames = [\"b.test\"]\nbackend = \"127.0.0.1:9\"\nwrite_proxy = \"v1\"\n\
             default = true\n\
             [[site]]\nnames = [\"c.test\"]\nroot = \"/srv/c\"\nhttp2 = false\n",
        )
        .unwrap();
        assert_eq!(s.listen.len(), 2);
        assert_eq!(s.sites.len(), 3);
        assert_eq!(s.sites[0].names, ["a.test", "*.a.test"]);
        assert_eq!(s.sites[0].timeouts.keepalive, 2.0);
        assert_eq!(s.sites[1].timeouts.keepalive, 9.0);
        assert_eq!(
            s.sites[0].alpn,
            [b"h2".to_vec(), b"http/1.1".to_vec(), b"http/1.0".to_vec()]
        );
        assert!(s.sites[1].alpn.is_empty());
        assert_eq!(
            s.sites[2].alpn,
            [b"http/1.1".to_vec(), b"http/1.0".to_vec()]
        );
        assert!(matches!(s.sites[1].job, Job::Backend(_)));
        assert_eq!(s.default_site, 1);
    }

    /// DNS-01: the server and key settings go together, the key file is
    /// read and checked, and wildcard names with acme need DNS-01.
    #[test]
    fn dns01_settings_and_wildcards() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("acme.key");
        std::fs::write(
            &key,
            "key \"acme.\" {\n\talgorithm hmac-sha256;\n\tsecret \"c2VjcmV0\";\n};\n",
        )
        .unwrap();
        let bad_key = dir.path().join("bad.key");
        std::fs::write(
            &bad_key,
            "key \"acme\" { algorithm hmac-sha256; secret \"#\"; };",
        )
        .unwrap();
        let dns = format!(
            "acme_dns_server = \"192.0.2.53\"\nacme_dns_tsig_key_file = \"{}\"\n",
            key.display()
        );
        let wild = "[[site]]\nnames = [\"*.a.test\", \"a.test\"]\nroot = \"/x\"\nacme = true\n";
        let s = from_text(&format!("{dns}{wild}")).unwrap();
        let d = s.acme.dns.as_ref().unwrap();
        assert_eq!(d.server, "192.0.2.53:53".parse().unwrap());
        assert_eq!(d.key.name, "acme");
        assert_eq!(s.sites[0].acme_challenge, crate::acme::ChallengeKind::Auto);
        from_text(&format!("{dns}{wild}acme_challenge = \"dns-01\"\n")).unwrap();
        for (text, want) in [
            (
                wild.to_string(),
                "setting names: *.a.test: an ACME CA proves a wildcard name with DNS-01 only, \
                 and acme_dns_server is not set",
            ),
            (
                format!("http_listen = [\"127.0.0.1:0\"]\n{dns}{wild}acme_challenge = \"http-01\"\n"),
                "setting acme_challenge: *.a.test: the CA proves a wildcard name with DNS-01 \
                 only, not HTTP-01",
            ),
            (
                format!("{dns}{wild}acme_challenge = \"tls-alpn-01\"\n"),
                "not TLS-ALPN-01",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\nacme = true\nacme_challenge = \"dns-01\"\n".into(),
                "setting acme_challenge: \"dns-01\" adds a TXT record through the zone's DNS \
                 server, and acme_dns_server is not set",
            ),
            (
                "acme_dns_server = \"192.0.2.53:53\"\nroot = \"/x\"\n".into(),
                "line 1, setting acme_dns_server: DNS-01 updates are signed with TSIG: add \
                 acme_dns_tsig_key_file",
            ),
            (
                format!("acme_dns_tsig_key_file = \"{}\"\nroot = \"/x\"\n", key.display()),
                "line 1, setting acme_dns_tsig_key_file: the key signs updates to a DNS server",
            ),
            (
                format!(
                    "acme_dns_server = \"ns.a.test\"\nacme_dns_tsig_key_file = \"{}\"\nroot = \"/x\"\n",
                    key.display()
                ),
                "line 1, setting acme_dns_server: \"ns.a.test\" is not IP:PORT or IP",
            ),
            (
                format!(
                    "acme_dns_server = \"192.0.2.53\"\nacme_dns_tsig_key_file = \"{}\"\nroot = \"/x\"\n",
                    bad_key.display()
                ),
                "line 2, setting acme_dns_tsig_key_file: the TSIG key file",
            ),
            (
                format!(
                    "acme_dns_server = \"192.0.2.53\"\nacme_dns_tsig_key_file = \"{}\"\nroot = \"/x\"\n",
                    dir.path().join("missing.key").display()
                ),
                "setting acme_dns_tsig_key_file: the TSIG key file",
            ),
        ] {
            let e = from_text(&text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}:\n{e}\nwants {want:?}");
        }
    }

    #[test]
    fn bad_sites_are_refused_naming_line_and_setting() {
        for (text, want) in [
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\n[[site]]\nnames = [\"A.TEST\"]\nroot = \"/y\"\n",
                "line 5 ([[site]] #2), setting names: name \"a.test\" is also a name of config file /etc/t.toml, line 1",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\n",
                "line 1 ([[site]] #1), setting root: a site needs root",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\nbackend = \"127.0.0.1:1\"\n",
                "setting backend: a site serves files",
            ),
            (
                "[[site]]\nnames = [\"a..test\"]\nroot = \"/x\"\n",
                "setting names: \"a..test\" is not a host name",
            ),
            (
                "[[site]]\nnames = [\"*.test\"]\nroot = \"/x\"\n",
                "a wildcard needs at least two labels",
            ),
            (
                "[[site]]\nnames = [\"10.0.0.1\"]\nroot = \"/x\"\n",
                "is an IP address",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\ncert = [\"a\", \"b\"]\nkey = \"k\"\n",
                "setting key: 2 certificate file(s) and 1 key file(s)",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\nalpn = [\"h3\"]\n",
                "setting alpn: \"h3\": a site with a root speaks h2, http/1.1 and http/1.0",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nbackend = \"127.0.0.1:1\"\nhttp2 = false\n",
                "http2",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\n[site.timeouts]\nsend = 0\n",
                "line 5 ([[site]] #1), setting [timeouts] send: 0 is out of range",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\n[[site]]\nroot = \"/y\"\n",
                "([[site]] #2): a site needs names",
            ),
            (
                "root = \"/x\"\n[[site]]\nnames = [\"a.test\"]\nroot = \"/y\"\n",
                "move them into a [[site]]",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\ncert = [\"a\", \"b\"]\nkey = [\"k\", \"l\"]\nocsp = \"o.der\"\n",
                "line 6 ([[site]] #1), setting ocsp: 1 OCSP response file(s) for 2 certificate file(s)",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\nocsp = \"o.der\"\n",
                "setting ocsp: 1 OCSP response file(s) for 0 certificate file(s)",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\nacme = true\nocsp = \"o.der\"\n",
                "setting ocsp: acme = true sites",
            ),
            ("listen = [\"nope\"]\nroot = \"/x\"\n", "line 1, setting listen"),
            (
                "access_log = \"\"\nroot = \"/x\"\n",
                "config file /etc/t.toml, line 1, setting access_log: an empty path",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\naccess_log = \"\"\n",
                "line 4 ([[site]] #1), setting access_log: an empty path",
            ),
            (
                "proxy_from = [\"10.0.0.0/8\"]\nroot = \"/x\"\n",
                "setting proxy_from: trusted PROXY sources mean nothing",
            ),
            (
                "root = \"/x\"\nopen_file_cache_valid = 0\n",
                "setting open_file_cache_valid",
            ),
            (
                "root = \"/x\"\nopen_file_cache = 2000000\n",
                "config file /etc/t.toml, line 2, setting open_file_cache: 2000000 is out of range",
            ),
            (
                "root = \"/x\"\n[limits]\nheaders = 0\n",
                "config file /etc/t.toml, line 3, setting [limits] headers: 0 is out of range",
            ),
            (
                "root = \"/x\"\n[timeouts]\nshutdown = 1e9\n",
                "config file /etc/t.toml, line 3, setting [timeouts] shutdown: 1000000000 is out of range",
            ),
            (
                "root = \"/x\"\nworkers = 5000\n",
                "config file /etc/t.toml, line 2, setting workers: 5000 is out of range",
            ),
            (
                "root = \"/x\"\nlisten = [\"127.0.0.1:8443\"]\nadmin = \"127.0.0.1:8443\"\n",
                "config file /etc/t.toml, line 3, setting admin: admin address 127.0.0.1:8443 is also a listen address (127.0.0.1:8443)",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\nkx_groups = [\"X448\"]\n",
                "line 4 ([[site]] #1), setting kx_groups: \"X448\" is not a key exchange group tlsfront offers: give some of X25519MLKEM768, X25519, P-256",
            ),
            (
                "kx_groups = []\nroot = \"/x\"\n",
                "config file /etc/t.toml, line 1, setting kx_groups: an empty list",
            ),
            (
                "tls_versions = [\"1.3\"]\n[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\nciphers = [\"TLS_AES_128_GCM_SHA256\", \"TLS_RC4\"]\n",
                "line 5 ([[site]] #1), setting ciphers: \"TLS_RC4\" is not a cipher suite tlsfront offers",
            ),
            (
                "ciphers = [\"TLS_AES_128_GCM_SHA256\"]\n[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\n",
                "config file /etc/t.toml, line 1, setting ciphers: no TLS 1.2 suite is left",
            ),
            (
                "client_auth = \"require\"\nroot = \"/x\"\n",
                "config file /etc/t.toml, line 1, setting client_auth: client certificates need the CAs that issue them: set client_ca",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\nclient_crl = \"c.pem\"\n",
                "line 4 ([[site]] #1), setting client_crl: revocation lists apply to client certificates",
            ),
            (
                "client_ca = \"ca.pem\"\n[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\nclient_auth = \"maybe\"\n",
                "line 5 ([[site]] #1), setting client_auth: \"maybe\" is not a client_auth mode",
            ),
            (
                "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\ntls_versions = []\n",
                "line 4 ([[site]] #1), setting tls_versions: an empty list allows no TLS version",
            ),
            (
                "root = \"/x\"\nlisten = [\"0.0.0.0:443\"]\nadmin = \"127.0.0.1:443\"\n",
                "setting admin: admin address 127.0.0.1:443 is also a listen address (0.0.0.0:443)",
            ),
        ] {
            let e = from_text(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text}\n=> {e}\nwanted: {want}");
        }
    }

    #[test]
    fn acme_profile_is_a_name_or_unset() {
        let site = "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\nacme = true\n";
        let s = from_text(site).unwrap();
        assert_eq!(s.acme.profile, None);
        let s = from_text(&format!("acme_profile = \"shortlived\"\n{site}")).unwrap();
        assert_eq!(s.acme.profile.as_deref(), Some("shortlived"));
        assert_eq!(s.sites[0].acme_profile.as_deref(), Some("shortlived"));
        // A site's own over the top level's; only for acme = true sites.
        let s = from_text(&format!(
            "acme_profile = \"shortlived\"\n{site}acme_profile = \"classic\"\n\
             [[site]]\nnames = [\"b.test\"]\nroot = \"/x\"\nacme = true\n\
             [[site]]\nnames = [\"c.test\"]\nroot = \"/x\"\n"
        ))
        .unwrap();
        let profiles: Vec<Option<&str>> =
            s.sites.iter().map(|x| x.acme_profile.as_deref()).collect();
        assert_eq!(profiles, [Some("classic"), Some("shortlived"), None]);
        let e = from_text(
            "[[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\nacme_profile = \"classic\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("line 4 ([[site]] #1), setting acme_profile: a profile is for a certificate from the ACME CA: set acme = true"),
            "{e}"
        );
        let e = from_text(&format!("{site}acme_profile = \"a b\"\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 5 ([[site]] #1), setting acme_profile: \"a b\" is not a profile name"),
            "{e}"
        );
        for bad in ["", "short lived", "tls\\u0000server", "é"] {
            let text = format!("acme_profile = \"{bad}\"\n{site}");
            let e = from_text(&text).unwrap_err().to_string();
            assert!(
                e.contains("config file /etc/t.toml, line 1, setting acme_profile: ")
                    && e.contains("is not a profile name")
                    && e.contains("leave acme_profile out"),
                "{text}\n=> {e}"
            );
        }
    }

    #[test]
    fn tls_policies_are_the_sites_over_the_top_levels() {
        use crate::tls::policy::{Group, Version};
        let s = from_text(
            "kx_groups = [\"X25519\", \"P-256\"]\ncert_compression = false\n\
             [[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\ntls_versions = [\"1.3\"]\n\
             [[site]]\nnames = [\"b.test\"]\nroot = \"/x\"\nkx_groups = [\"X25519MLKEM768\", \"X25519\"]\n\
             cert_compression = true\n",
        )
        .unwrap();
        let (a, b) = (&s.sites[0].tls, &s.sites[1].tls);
        assert_eq!(a.versions, [Version::Tls13]);
        assert_eq!(a.groups, [Group::X25519, Group::P256]);
        assert!(!a.cert_compression);
        assert_eq!(b.versions, [Version::Tls13, Version::Tls12]);
        assert_eq!(b.groups, [Group::X25519MlKem768, Group::X25519]);
        assert!(b.cert_compression);
    }

    #[test]
    fn client_auth_is_the_sites_over_the_top_levels() {
        use crate::tls::client_auth::Mode;
        let s = from_text(
            "client_ca = \"/ca.pem\"\nclient_crl = \"/a.crl\"\n\
             [[site]]\nnames = [\"a.test\"]\nroot = \"/x\"\n\
             [[site]]\nnames = [\"b.test\"]\nroot = \"/x\"\nclient_auth = \"optional\"\n\
             client_crl = [\"/b1.crl\", \"/b2.crl\"]\n\
             [[site]]\nnames = [\"c.test\"]\nroot = \"/x\"\nclient_auth = \"off\"\n",
        )
        .unwrap();
        let a = s.sites[0].client_auth.as_ref().unwrap();
        assert_eq!(a.mode, Mode::Require);
        assert_eq!(a.ca, Path::new("/ca.pem"));
        assert_eq!(a.crls, [Path::new("/a.crl")]);
        let b = s.sites[1].client_auth.as_ref().unwrap();
        assert_eq!(b.mode, Mode::Optional);
        assert_eq!(b.crls, [Path::new("/b1.crl"), Path::new("/b2.crl")]);
        assert!(
            b.crl_origin.contains("line 10 ([[site]] #2)"),
            "{}",
            b.crl_origin
        );
        assert!(s.sites[2].client_auth.is_none());
    }

    #[test]
    fn names_are_checked_and_normalised() {
        assert_eq!(check_name("WWW.Example.COM.").unwrap(), "www.example.com");
        assert_eq!(check_name("*.example.com").unwrap(), "*.example.com");
        for bad in [
            "", ".", "a.*.b", "-a.b", "a b.c", "*", "*.com", "::1", "x.*",
        ] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_admin_port_of_its_own_is_accepted() {
        for (listen, admin) in [
            ("127.0.0.1:8443", "127.0.0.1:9101"),
            ("127.0.0.1:0", "127.0.0.1:0"),
            ("[::1]:8443", "127.0.0.1:8443"),
        ] {
            let text = format!("root = \"/x\"\nlisten = [\"{listen}\"]\nadmin = \"{admin}\"\n");
            assert!(from_text(&text).is_ok(), "{text}");
        }
    }

    #[test]
    fn a_top_level_site_may_take_the_default_root() {
        let f = FileConfig::parse("autoindex = true\n").unwrap();
        let s = resolve(f, "", &Origins::default(), Some(Path::new("/srv"))).unwrap();
        match &s.only_site().unwrap().job {
            Job::Files(f) => {
                assert_eq!(f.root, PathBuf::from("/srv"));
                assert!(f.autoindex);
            }
            Job::Backend(_) => panic!("not files"),
        }
    }
}
