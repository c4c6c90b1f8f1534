//! `tlsfront config check FILE` (what `nginx -t` and `hitch --test` do):
//! resolve the file as `run` would, load every certificate and key, check
//! that each key belongs to its certificate, warn (as `run` does) about a
//! certificate that does not cover a site's names and about certificates
//! that expire soon, check each OCSP response to staple (good, for that
//! certificate, current), open every document root, read the ticket keys,
//! check the access logs, the ACME state directory and `ktls = "require"`
//! with the functions `run` uses, whether the pid file could be written,
//! and print the resolved sites.

use super::cert;
use super::file::{FileConfig, UnknownNames};
use super::settings::{resolve, Job, Origins, Settings, Site};
use std::fmt::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// A certificate that expires within this is warned about.
pub const EXPIRY_WARNING: Duration = Duration::from_secs(14 * 86_400);

/// The report, and whether tlsfront would start with this file.
pub fn report(path: &Path) -> (String, bool) {
    let mut out = String::new();
    let settings = FileConfig::load(path)
        .map_err(super::ConfigError::from)
        .and_then(|(f, text)| {
            let o = Origins {
                file: Some(path.into()),
                ..Default::default()
            };
            resolve(f, &text, &o, None)
        });
    let settings = match settings {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(out, "error: {e}");
            let _ = writeln!(out, "config file {}: not valid", path.display());
            return (out, false);
        }
    };
    let errors = describe(&settings, SystemTime::now(), &mut out);
    if errors == 0 {
        let _ = writeln!(out, "config file {}: ok", path.display());
    } else {
        let _ = writeln!(
            out,
            "config file {}: {errors} error{}",
            path.display(),
            if errors == 1 { "" } else { "s" }
        );
    }
    (out, errors == 0)
}

/// Print the resolved settings into `out`; the number of errors found.
fn describe(s: &Settings, now: SystemTime, out: &mut String) -> usize {
    let listen: Vec<String> = s.listen.iter().map(ToString::to_string).collect();
    let _ = writeln!(
        out,
        "listen {}; {} worker{}; ktls {}; names no site has: {}",
        listen.join(", "),
        s.workers,
        if s.workers == 1 { "" } else { "s" },
        format!("{:?}", s.ktls).to_lowercase(),
        match s.unknown_names {
            UnknownNames::Default => "the default site",
            UnknownNames::Reject => "refused (unrecognized_name)",
        }
    );
    if let Some(a) = s.admin {
        let _ = writeln!(out, "admin: http://{a}/metrics and /healthz (plain HTTP)");
    }
    if !s.http_listen.is_empty() {
        let http: Vec<String> = s.http_listen.iter().map(ToString::to_string).collect();
        let _ = writeln!(
            out,
            "plain HTTP: {}: redirects to https:// with {}{}, answers ACME HTTP-01",
            http.join(", "),
            s.http_redirect.status(false),
            match s.http_redirect.status(true) {
                301 => " (301 for GET and HEAD)",
                _ => "",
            }
        );
    }
    let mut errors = 0;
    if let Some(p) = &s.pid_file {
        // As `run` writes it (the main process: this user, or root as the
        // parent), decided without writing.
        match crate::pid_file::PidFile::check(p) {
            Ok(()) => {
                let _ = writeln!(out, "pid file: {}", p.display());
            }
            Err(e) => {
                errors += 1;
                let _ = writeln!(out, "error: {e}");
            }
        }
    }
    errors += process_wide(s, out);
    for (i, site) in s.sites.iter().enumerate() {
        errors += describe_site(site, &s.acme, i == s.default_site, now, out);
    }
    errors
}

/// What `run` decides before any site, by the same functions: the ticket
/// key files (`KeyFiles::read`), `ktls = "require"` (the kernel probe and
/// `server::ktls_support`), the ACME state directory with `user` set (the
/// parent's `acme_state_dir`, deciding without making), and every access
/// log file (see [`access_log`]). The number of errors.
fn process_wide(s: &Settings, out: &mut String) -> usize {
    let mut errors = 0;
    let mut error = |out: &mut String, m: String| {
        errors += 1;
        let _ = writeln!(out, "error: {m}");
    };
    if !s.ticket_keys.is_empty() {
        match crate::tls::tickets::KeyFiles::read(&s.ticket_keys) {
            Ok(_) => {
                let _ = writeln!(
                    out,
                    "session ticket keys: {} file(s), {} encrypts",
                    s.ticket_keys.len(),
                    s.ticket_keys[0].display()
                );
            }
            Err(e) => error(out, crate::server::StartError::from(e).to_string()),
        }
    }
    if s.ktls == super::KtlsMode::Require {
        if let Err(e) = crate::server::ktls_support(s.ktls) {
            error(out, e.to_string());
        }
    }
    if let Some(who) = s.run_as.as_ref().filter(|_| crate::parent::wanted(s)) {
        use crate::parent::{acme_state_dir, Make};
        match acme_state_dir(s, who, Make::DryRun) {
            Ok(true) => {
                let _ = writeln!(
                    out,
                    "ACME state directory {}: missing, made at start for {}",
                    s.acme.state_dir.display(),
                    who.name()
                );
            }
            Ok(false) => {}
            Err(e) => error(out, e.to_string()),
        }
    }
    if let Some(f) = &s.fleet {
        match fleet(f) {
            Ok(lines) => lines.iter().for_each(|l| {
                let _ = writeln!(out, "{l}");
            }),
            Err(e) => error(out, e.to_string()),
        }
    }
    let mut seen = std::collections::HashSet::new();
    for site in &s.sites {
        if let crate::accesslog::Target::File(p) = &site.access_log.target {
            if seen.insert(p.clone()) {
                if let Err(m) = access_log(p) {
                    error(out, format!("{}: {m}", site.access_log.origin));
                }
            }
        }
    }
    errors
}

/// `[fleet]`: its files read, and etcd reached (`fleet::etcd::check`),
/// bounded in time.
fn fleet(f: &crate::fleet::FleetSettings) -> Result<Vec<String>, crate::fleet::etcd::FleetError> {
    use crate::fleet::etcd::{check, FleetError, Secrets};
    let secrets = Secrets::read(f)?;
    let keys = crate::fleet::seal::FleetKeys::read(&f.key_files).map_err(FleetError::Keys)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(FleetError::Runtime)?;
    let mut lines = vec![format!(
        "fleet: node {}, prefix {}, etcd {}{}{}",
        f.node,
        f.prefix,
        f.endpoints.join(", "),
        match &f.tls {
            Some(t) if t.identity.is_some() => " (TLS, client certificate)",
            Some(_) => " (TLS)",
            None => "",
        },
        if f.order {
            ""
        } else {
            "; serves, never orders"
        }
    )];
    let ids: Vec<String> = keys
        .key_ids()
        .enumerate()
        .map(|(i, (id, path))| {
            format!(
                "{id} ({}{})",
                path.display(),
                if i == 0 { ", seals" } else { "" }
            )
        })
        .collect();
    lines.push(format!("fleet: key files: {}", ids.join(", ")));
    lines.extend(rt.block_on(check(f, &secrets))?);
    Ok(lines)
}

/// Whether `run` could open the access log `path` for appending: an
/// existing file is opened as `run` opens it (`safe_open::open_log`:
/// appending changes nothing, and no link is followed); a missing one is
/// not made, but its directory must exist and be writable.
fn access_log(path: &Path) -> Result<(), String> {
    let hint = "(its directory must exist, and the file be writable, or the directory be, by \
                the user tlsfront runs as at this point)";
    match std::fs::symlink_metadata(path) {
        Ok(_) => crate::safe_open::open_log(path)
            .map(drop)
            .map_err(|e| format!("cannot open the access log: {e} {hint}")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let dir = match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            let usable = std::fs::metadata(dir)
                .map_err(|e| e.to_string())
                .and_then(|m| {
                    if !m.is_dir() {
                        return Err("not a directory".into());
                    }
                    rustix::fs::access(dir, rustix::fs::Access::WRITE_OK)
                        .map_err(|e| format!("not writable: {e}"))
                });
            usable.map_err(|e| {
                format!(
                    "cannot open the access log {}: directory {}: {e} {hint}",
                    path.display(),
                    dir.display()
                )
            })
        }
        Err(e) => Err(format!(
            "cannot open the access log {}: {e} {hint}",
            path.display()
        )),
    }
}

/// What a site with a root does to its responses, and a fallback that
/// cannot answer (a warning: it may be deployed after the config).
fn describe_files(
    f: &crate::config::settings::Files,
    root: &crate::files::DocRoot,
    out: &mut String,
) {
    if !f.precompressed.is_empty() {
        let names: Vec<&str> = f.precompressed.iter().map(|e| e.name()).collect();
        let _ = writeln!(out, "  precompressed siblings: {}", names.join(", "));
    }
    if let Some(c) = &f.charset {
        let _ = writeln!(out, "  charset {c} for text types");
    }
    if !f.server_tokens {
        let _ = writeln!(out, "  Server header: tlsfront, without the version");
    }
    if !f.headers.is_empty() {
        let _ = writeln!(out, "  response headers: {}", f.headers.describe());
    }
    if let Some(fb) = &f.fallback {
        match root.fallback_problem(fb) {
            None => {
                let _ = writeln!(
                    out,
                    "  fallback {} for paths that do not exist",
                    fb.to_url()
                );
            }
            Some(p) => {
                let _ = writeln!(out, "  warning: {p}");
            }
        }
    }
}

/// How the CA validates an `acme = true` site's names, in words.
fn challenge_words(site: &Site, acme: &crate::acme::AcmeSettings) -> String {
    use crate::acme::ChallengeKind;
    let dns = acme.dns.as_ref().map(|d| {
        format!(
            "DNS-01 through {} with the TSIG key {:?}",
            d.server, d.key.name
        )
    });
    let wildcard = site.names.iter().any(|n| n.starts_with("*."));
    match (site.acme_challenge, dns) {
        (ChallengeKind::Dns01, Some(dns)) => dns,
        (ChallengeKind::Http01, _) => "HTTP-01 on http_listen".into(),
        (ChallengeKind::Auto, Some(dns)) if wildcard => {
            format!("{dns} for the wildcard names, TLS-ALPN-01 on this listener (or HTTP-01) for the others")
        }
        (ChallengeKind::TlsAlpn01, _) => "TLS-ALPN-01 on this listener".into(),
        _ => "TLS-ALPN-01 on this listener (or HTTP-01 on http_listen)".into(),
    }
}

fn describe_site(
    site: &Site,
    acme: &crate::acme::AcmeSettings,
    default: bool,
    now: SystemTime,
    out: &mut String,
) -> usize {
    let mut errors = 0;
    let mut error = |out: &mut String, m: String| {
        errors += 1;
        let _ = writeln!(out, "  error: {m}");
    };
    let _ = writeln!(
        out,
        "site {}{} ({})",
        if site.names.is_empty() {
            "(every name)".to_string()
        } else {
            site.names.join(", ")
        },
        if default { ", default" } else { "" },
        site.origin
    );
    match &site.job {
        Job::Files(f) => {
            let _ = writeln!(
                out,
                "  files from {}{}",
                f.root.display(),
                if f.autoindex { ", autoindex" } else { "" }
            );
            match crate::files::DocRoot::open(&f.root, f.follow_symlinks_outside, f.autoindex) {
                Err(e) => error(out, e.to_string()),
                Ok(root) => describe_files(f, &root, out),
            }
        }
        Job::Backend(b) => {
            let pp = match b.write_proxy {
                Some(v) => format!(", PROXY {v:?}")
                    .to_lowercase()
                    .replace("proxy", "PROXY"),
                None => String::new(),
            };
            let _ = writeln!(out, "  TLS for backend {}{pp}", b.addr);
        }
    }
    if !site.alpn.is_empty() {
        let alpn: Vec<String> = site
            .alpn
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let _ = writeln!(out, "  alpn {}", alpn.join(", "));
    }
    if let Some(tls) = site.tls.describe() {
        let _ = writeln!(out, "  {tls}");
    }
    if let Some(auth) = &site.client_auth {
        // As the server builds it (the same files, read the same way).
        match crate::tls::client_auth::verifier(auth, &Arc::new(crate::tls::provider())) {
            Ok(_) => {
                let cas = crate::tls::client_auth::read_ca(&auth.ca).map_or(0, |c| c.len());
                let crls: Vec<String> = auth.crls.iter().map(|p| p.display().to_string()).collect();
                let _ = writeln!(
                    out,
                    "  client certificates: {}, from {} ({cas} CA certificate{}){}",
                    auth.mode.name(),
                    auth.ca.display(),
                    if cas == 1 { "" } else { "s" },
                    if crls.is_empty() {
                        String::new()
                    } else {
                        format!(", revocation lists {}", crls.join(", "))
                    }
                );
            }
            Err(e) => {
                let origin = if e.setting() == "client_crl" {
                    &auth.crl_origin
                } else {
                    &auth.ca_origin
                };
                error(out, format!("{origin}: {e}"));
            }
        }
    }
    if site.acme {
        let stored = match crate::acme::load_stored(acme, &site.names) {
            Ok(Some(i)) => format!(
                "stored, valid until {}",
                httpdate::fmt_http_date(i.not_after)
            ),
            Ok(None) => "none stored yet: a temporary self-signed one until it is issued".into(),
            Err(e) => format!("stored one unreadable: {e}"),
        };
        let _ = writeln!(
            out,
            "  certificate: from ACME ({}, {}; account and certificates in {}): {stored}",
            acme.directory,
            challenge_words(site, acme),
            acme.state_dir.display()
        );
        if let Some(profile) = &site.acme_profile {
            // Whether the CA lists it needs the CA: each order checks.
            let _ = writeln!(
                out,
                "  ACME profile: {profile:?} (acme_profile; the CA's directory must list it)"
            );
        }
    } else if site.certs.is_empty() {
        let _ = writeln!(
            out,
            "  certificate: the built-in self-signed one (localhost, 127.0.0.1, ::1; made on \
             first run): for testing only"
        );
    }
    let mut keys = Vec::new();
    for (i, (c, k)) in site.certs.iter().enumerate() {
        let id = match cert::load(Some(c), Some(k)) {
            Ok(id) => id,
            Err(e) => {
                error(out, format!("{}: {e}", site.origin_of(&e)));
                continue;
            }
        };
        let leaf = id.chain[0].clone();
        match id.key.certify(id.chain.clone(), &crate::tls::provider()) {
            Ok(key) => keys.push(std::sync::Arc::new(key)),
            Err(e) => error(
                out,
                format!("{}: {}", site.key_origin, cert::mismatch(c, k, &e)),
            ),
        }
        let facts = match cert::facts(&leaf) {
            Ok(f) => f,
            Err(e) => {
                error(
                    out,
                    format!("certificate {}: cannot read it: {e}", c.display()),
                );
                continue;
            }
        };
        let _ = writeln!(
            out,
            "  certificate {}: {}, {} in chain, for {}; valid {} to {}",
            c.display(),
            facts.key,
            id.chain.len(),
            cert::listed(&facts.names),
            httpdate::fmt_http_date(facts.not_before),
            httpdate::fmt_http_date(facts.not_after),
        );
        // As the server does: a response that fails is not stapled, which
        // is a warning (tlsfront starts, the certificate goes unstapled).
        if let Some(o) = site.ocsp.get(i).and_then(Option::as_ref) {
            let _ = match crate::tls::ocsp::load(o, &id.chain, now) {
                Ok(staple) => writeln!(
                    out,
                    "  OCSP response {}: {}",
                    o.display(),
                    crate::tls::ocsp::describe(&staple)
                ),
                Err(e) => writeln!(out, "  warning: {e}; not stapled"),
            };
        }
        // A warning, as at `run` (see `cert::uncovered`).
        for w in cert::uncovered(&leaf, c, &site.names) {
            let _ = writeln!(out, "  warning: {w}");
        }
        match facts.not_after.duration_since(now) {
            Err(_) => error(
                out,
                format!(
                    "certificate {} expired on {}: renew it",
                    c.display(),
                    httpdate::fmt_http_date(facts.not_after)
                ),
            ),
            Ok(left) if left < EXPIRY_WARNING => {
                let _ = writeln!(
                    out,
                    "  warning: certificate {} expires in {} day(s), on {}: renew it",
                    c.display(),
                    left.as_secs() / 86_400,
                    httpdate::fmt_http_date(facts.not_after)
                );
            }
            Ok(_) => {}
        }
        if facts.not_before > now {
            error(
                out,
                format!(
                    "certificate {} is not valid before {}",
                    c.display(),
                    httpdate::fmt_http_date(facts.not_before)
                ),
            );
        }
    }
    if let Err(e) = crate::tls::check_tls12_suites(&crate::tls::provider(), &keys, &site.tls) {
        error(out, format!("{}, {e}", site.origin));
    }
    errors
}
