//! The sites the listeners front, as the workers see them: each site's TLS
//! configuration and service, and the lookup from the name a ClientHello
//! asks for (SNI) to its site: the exact name, then the wildcard one label
//! up (a trailing dot ignored), then the default site (or a refusal, as
//! configured); a request's Host is looked up the same way. Built whole
//! from the settings at start and on every reload, then swapped in at once.

use crate::config::cert;
use crate::config::settings::{Job, Settings, Site};
use crate::config::UnknownNames;
use crate::proxy::Proxy;
use crate::serve::StaticFiles;
use crate::server::StartError;
use crate::tls::{Refusal, ServerConfigs, TlsShared};
use ipnet::IpNet;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

/// Every site, and how names find them.
pub(crate) struct Sites {
    /// What they were built from (an ACME issuance rebuilds from it).
    pub settings: Settings,
    list: Vec<Arc<SiteRt>>,
    /// Lower-case names → index in `list`.
    names: HashMap<String, usize>,
    /// Wildcards, by the name under the `*.` (`example.com` for
    /// `*.example.com`) → index in `list`: looked up per request without
    /// building a string.
    wildcards: HashMap<String, usize>,
    default: usize,
    reject_unknown: bool,
    /// Trusted sources of a PROXY header before TLS (`None`: none read).
    pub accept_proxy: Option<Vec<IpNet>>,
    /// A plaintext HTTP client gets nginx's readable 400 when the default
    /// site serves files; a backend may speak anything, so it is closed.
    pub answers_plain_http: bool,
    /// When the OCSP staples must be looked at again: the earliest
    /// nextUpdate of a stapled response (it must stop being stapled then)
    /// or thisUpdate of one not valid yet. `server::certs` rebuilds the
    /// sites at that time, which reads the files again.
    pub ocsp_recheck: Option<SystemTime>,
}

/// One site, ready to serve.
pub(crate) struct SiteRt {
    pub settings: Site,
    /// Its name in logs and metric labels ([`Site::label`]), shared by its
    /// connections.
    pub label: Arc<str>,
    pub tls: ServerConfigs,
    pub job: SiteJob,
    /// For a site with `acme = true`: the certificate it has now.
    pub acme: Option<AcmeCert>,
    /// Its counters, looked up on its first connection (the metrics live
    /// in the `Front`, which is made after the first sites).
    pub metrics: std::sync::OnceLock<Arc<crate::metrics::SiteMetrics>>,
    /// Each certificate it serves (its file, or `acme`) and its notAfter.
    pub expiry: Expiry,
    /// Its access log, open (shared with the sites that name the same file).
    pub access_log: Option<crate::accesslog::SiteLog>,
}

/// A site's certificates (file, or `acme`) and their notAfter.
pub(crate) type Expiry = Vec<(String, SystemTime)>;

/// The certificate of an ACME site, as loaded.
#[derive(Debug, Clone, Copy)]
pub(crate) enum AcmeCert {
    /// None issued yet: a temporary self-signed one.
    Placeholder,
    /// Issued, valid between these.
    Issued {
        not_before: std::time::SystemTime,
        not_after: std::time::SystemTime,
    },
}

/// The service a site runs once TLS is up.
pub(crate) enum SiteJob {
    Files(StaticFiles),
    Proxy(Proxy),
}

impl Sites {
    /// Load every site's certificates and open its root; `say` gets the
    /// lines an operator should see (which certificate each site uses).
    pub fn build(
        settings: &Settings,
        shared: &TlsShared,
        say: &mut dyn FnMut(String),
    ) -> Result<Sites, StartError> {
        let mut list = Vec::with_capacity(settings.sites.len());
        let mut names = HashMap::new();
        let mut wildcards = HashMap::new();
        let mut ocsp_recheck: Option<SystemTime> = None;
        for (i, site) in settings.sites.iter().enumerate() {
            let (tls, acme, expiry) = if site.acme {
                let (tls, cert, expiry) = acme_site_tls(site, &settings.acme, shared, say)?;
                (tls, Some(cert), expiry)
            } else {
                let (tls, recheck, expiry) = site_tls(site, shared, say)?;
                ocsp_recheck = earliest(ocsp_recheck, recheck);
                (tls, None, expiry)
            };
            let job = match &site.job {
                Job::Files(f) => SiteJob::Files(StaticFiles::new(site, f)?),
                Job::Backend(b) => SiteJob::Proxy(Proxy::new(site, b)),
            };
            let access_log =
                crate::accesslog::SiteLog::open(&site.access_log).map_err(|message| {
                    StartError::Site {
                        origin: site.access_log.origin.clone(),
                        message,
                    }
                })?;
            for n in &site.names {
                match n.strip_prefix("*.") {
                    Some(parent) => wildcards.insert(parent.to_string(), i),
                    None => names.insert(n.clone(), i),
                };
            }
            list.push(Arc::new(SiteRt {
                settings: site.clone(),
                label: Arc::from(site.label()),
                tls,
                job,
                acme,
                metrics: Default::default(),
                expiry,
                access_log,
            }));
        }
        let default = settings.default_site.min(list.len().saturating_sub(1));
        let answers_plain_http =
            matches!(list.get(default).map(|s| &s.job), Some(SiteJob::Files(_)));
        Ok(Sites {
            settings: settings.clone(),
            list,
            names,
            wildcards,
            default,
            reject_unknown: settings.unknown_names == UnknownNames::Reject,
            accept_proxy: settings.accept_proxy.clone(),
            answers_plain_http,
            ocsp_recheck,
        })
    }

    /// The site for a ClientHello that asks for `sni`.
    pub fn choose(&self, sni: Option<&str>) -> Result<&Arc<SiteRt>, Refusal> {
        match sni.and_then(|n| self.named(n)) {
            Some(site) => Ok(site),
            None if self.reject_unknown => Err(Refusal::UnknownName),
            None => self.list.get(self.default).ok_or(Refusal::UnknownName),
        }
    }

    /// The site one of whose names is `name` (lower-case, as the
    /// ClientHello parser and the request's Host give it): the exact name,
    /// else the wildcard one label up. A trailing dot (the absolute form,
    /// `example.com.`) is the same name, as nginx takes it. The SNI and
    /// the Host of a request are looked up alike.
    pub fn named(&self, name: &str) -> Option<&Arc<SiteRt>> {
        let name = name.strip_suffix('.').unwrap_or(name);
        let i = self.names.get(name).or_else(|| {
            // One label up: a.b.example.com matches *.b.example.com only.
            let (_, parent) = name.split_once('.')?;
            self.wildcards.get(parent)
        })?;
        self.list.get(*i)
    }

    /// Whether the plain-HTTP listener redirects a request for `host`
    /// (lower-case) to HTTPS: for a name some site lists; for any name when
    /// names no site lists go to a default site that lists none (the one
    /// site of a file without names: the operator named nothing, so
    /// nothing can be told apart). Anything else would be sent to a
    /// certificate that does not name it.
    pub fn redirects(&self, host: &str) -> bool {
        self.named(host).is_some()
            || (!self.reject_unknown
                && self
                    .list
                    .get(self.default)
                    .is_some_and(|s| s.settings.names.is_empty()))
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// The sites with `acme = true`, and their certificates now.
    pub fn acme_sites(&self) -> impl Iterator<Item = (&Site, AcmeCert)> {
        self.list
            .iter()
            .filter_map(|s| Some((&s.settings, s.acme?)))
    }

    /// Every site's certificates: (site label, certificate, notAfter as
    /// Unix time), for the expiry gauge.
    pub fn expiry(&self) -> Vec<(Arc<str>, String, i64)> {
        let unix = |t: SystemTime| match t.duration_since(SystemTime::UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
        };
        self.list
            .iter()
            .flat_map(|s| {
                s.expiry
                    .iter()
                    .map(|(c, t)| (s.label.clone(), c.clone(), unix(*t)))
            })
            .collect()
    }

    /// The first site's service.
    pub fn first_job(&self) -> Option<&SiteJob> {
        self.list.first().map(|s| &s.job)
    }

    /// Descriptors one connection may hold at once, at most, over all
    /// sites.
    pub fn fds_per_connection(&self) -> u64 {
        self.list
            .iter()
            .map(|s| match s.job {
                SiteJob::Files(_) if s.settings.alpn.iter().any(|a| a == b"h2") => {
                    StaticFiles::FDS_PER_H2_CONNECTION
                }
                SiteJob::Files(_) => StaticFiles::FDS_PER_CONNECTION,
                SiteJob::Proxy(_) => Proxy::FDS_PER_CONNECTION,
            })
            .max()
            .unwrap_or(1)
    }
}

/// An ACME site's certificate: the one the CA issued (stored in the state
/// directory), or a temporary self-signed one until then.
fn acme_site_tls(
    site: &Site,
    acme: &crate::acme::AcmeSettings,
    shared: &TlsShared,
    say: &mut dyn FnMut(String),
) -> Result<(ServerConfigs, AcmeCert, Expiry), StartError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let in_site = |e: &dyn std::fmt::Display| StartError::Site {
        origin: format!("{}, setting acme", site.origin),
        message: e.to_string(),
    };
    let names = site.names.join(", ");
    let stored = crate::acme::load_stored(acme, &site.names).unwrap_or_else(|e| {
        tracing::warn!(
            "{}: stored ACME certificate for {names} unreadable: {e}",
            site.origin
        );
        None
    });
    let (chain_pem, key_pem, state) = match stored {
        Some(i) => {
            say(format!(
                "certificate for {names} from ACME ({}), valid until {}",
                acme.directory,
                httpdate::fmt_http_date(i.not_after)
            ));
            let state = AcmeCert::Issued {
                not_before: i.not_before,
                not_after: i.not_after,
            };
            (i.chain_pem, i.key_pem, state)
        }
        None => {
            say(format!(
                "no certificate yet for {names}: a temporary self-signed one until {} issues it",
                acme.directory
            ));
            let (c, k) = crate::acme::placeholder(&site.names).map_err(|e| in_site(&e))?;
            (c, k, AcmeCert::Placeholder)
        }
    };
    let chain = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| in_site(&e))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| in_site(&e))?;
    let key = shared
        .certified_key(chain, cert::Key::Der(key))
        .map_err(|e| in_site(&e))?;
    let expiry = not_after(&key).map(|t| ("acme".to_string(), t));
    let tls = shared
        .site(
            vec![key],
            site.alpn.clone(),
            &site.tls,
            client_verifier(site, shared)?,
        )
        .map_err(|e| in_site(&e))?;
    Ok((tls, state, expiry.into_iter().collect()))
}

/// The notAfter of a key's certificate.
fn not_after(key: &rustls::sign::CertifiedKey) -> Option<SystemTime> {
    cert::facts(key.cert.first()?).ok().map(|f| f.not_after)
}

fn earliest(a: Option<SystemTime>, b: Option<SystemTime>) -> Option<SystemTime> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The verifier of a site's client certificates, from its CA bundle and
/// revocation lists as they are now (read again on every reload).
fn client_verifier(
    site: &Site,
    shared: &TlsShared,
) -> Result<Option<crate::tls::client_auth::SiteVerifier>, StartError> {
    let Some(auth) = &site.client_auth else {
        return Ok(None);
    };
    let v = crate::tls::client_auth::verifier(auth, shared.provider()).map_err(|e| {
        StartError::Site {
            origin: if e.setting() == "client_crl" {
                auth.crl_origin.clone()
            } else {
                auth.ca_origin.clone()
            },
            message: e.to_string(),
        }
    })?;
    Ok(Some((auth.mode, v)))
}

/// A site's certificates and its TLS configurations, and when its OCSP
/// staples must be looked at again (see [`Sites::ocsp_recheck`]).
fn site_tls(
    site: &Site,
    shared: &TlsShared,
    say: &mut dyn FnMut(String),
) -> Result<(ServerConfigs, Option<SystemTime>, Expiry), StartError> {
    let in_site = |e: &dyn std::fmt::Display| StartError::Site {
        origin: site.cert_origin.clone(),
        message: e.to_string(),
    };
    let for_names = if site.names.is_empty() {
        String::new()
    } else {
        format!(" for {}", site.names.join(", "))
    };
    let mut keys = Vec::new();
    let mut expiry = Vec::new();
    if site.certs.is_empty() {
        let id = cert::load(None, None).map_err(|e| in_site(&e))?;
        if id.created {
            say(format!(
                "made a self-signed certificate for localhost, 127.0.0.1, ::1: {}",
                id.cert_path.display()
            ));
        }
        say(format!(
            "certificate {} (SHA-256 {}){for_names}",
            id.cert_path.display(),
            id.fingerprint()
        ));
        let key = shared
            .certified_key(id.chain, id.key)
            .map_err(|e| in_site(&e))?;
        if let Some(t) = not_after(&key) {
            expiry.push((id.cert_path.display().to_string(), t));
        }
        keys.push(key);
    }
    let mut recheck = None;
    let now = SystemTime::now();
    for (i, (c, k)) in site.certs.iter().enumerate() {
        let id = cert::load(Some(c), Some(k)).map_err(|e| StartError::Site {
            origin: site.origin_of(&e).to_string(),
            message: e.to_string(),
        })?;
        let shown = format!(
            "certificate {} (SHA-256 {}){for_names}",
            id.cert_path.display(),
            id.fingerprint()
        );
        let key = shared
            .certified_key(id.chain, id.key)
            .map_err(|e| StartError::Site {
                origin: site.key_origin.clone(),
                message: cert::mismatch(c, k, &e),
            })?;
        // A warning here and in `config check` alike (cert::uncovered).
        for w in cert::uncovered(&key.cert[0], c, &site.names) {
            tracing::warn!("{}: {w}", site.origin);
        }
        say(shown);
        if let Some(t) = not_after(&key) {
            expiry.push((c.display().to_string(), t));
        }
        let key = match site.ocsp.get(i).and_then(Option::as_ref) {
            None => key,
            // Problems with the response are warnings: the certificate is
            // served without a staple (a missing staple is what clients
            // get from most servers; a reload or the recheck picks up a
            // fixed file).
            Some(o) => match crate::tls::ocsp::load(o, &key.cert, now) {
                Ok(staple) => {
                    say(format!(
                        "OCSP response {} for {}: {}, stapled",
                        o.display(),
                        c.display(),
                        crate::tls::ocsp::describe(&staple)
                    ));
                    recheck = earliest(recheck, staple.next_update);
                    let mut key = Arc::unwrap_or_clone(key);
                    key.ocsp = Some(staple.der);
                    Arc::new(key)
                }
                Err(e) => {
                    tracing::warn!(
                        "{}: {e}; certificate {} is served without a staple",
                        site.origin,
                        c.display()
                    );
                    recheck = earliest(recheck, e.valid_from());
                    key
                }
            },
        };
        keys.push(key);
    }
    let tls = shared
        .site(
            keys,
            site.alpn.clone(),
            &site.tls,
            client_verifier(site, shared)?,
        )
        .map_err(|e| in_site(&e))?;
    Ok((tls, recheck, expiry))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::file::FileConfig;
    use crate::config::settings::{resolve, Origins};

    /// The sites of a config file's `text` (`c.pem` and `k.pem` exist).
    pub(crate) fn sites(text: &str) -> Sites {
        let dir = tempfile::tempdir().unwrap();
        let (c, k) = cert::self_signed().unwrap();
        std::fs::write(dir.path().join("c.pem"), c).unwrap();
        std::fs::write(dir.path().join("k.pem"), k).unwrap();
        let p = dir.path().join("t.toml");
        std::fs::write(&p, text).unwrap();
        let (f, text) = FileConfig::load(&p).unwrap();
        let o = Origins {
            file: Some(p),
            ..Default::default()
        };
        let s = resolve(f, &text, &o, None).unwrap();
        let shared = TlsShared::new(
            Default::default(),
            crate::tls::tickets::TicketKeys::rotating(
                crate::tls::tickets::DEFAULT_ROTATION,
                crate::tls::tickets::Seed::random().unwrap(),
            ),
        );
        Sites::build(&s, &shared, &mut |_| {}).unwrap()
    }

    fn site_of(s: &Sites, sni: Option<&str>) -> Result<String, Refusal> {
        s.choose(sni).map(|s| s.settings.label().to_string())
    }

    #[test]
    fn names_pick_sites_exact_then_wildcard_then_default() {
        let s = sites(
            "[[site]]\nnames = [\"a.test\", \"*.a.test\"]\nroot = \".\"\ncert = \"c.pem\"\nkey = \"k.pem\"\n\
             [[site]]\nnames = [\"x.a.test\", \"b.test\"]\nbackend = \"127.0.0.1:9\"\ncert = \"c.pem\"\nkey = \"k.pem\"\n\
             [[site]]\nnames = [\"c.test\"]\nroot = \".\"\ndefault = true\ncert = \"c.pem\"\nkey = \"k.pem\"\n",
        );
        assert_eq!(s.len(), 3);
        assert_eq!(site_of(&s, Some("a.test")).unwrap(), "a.test");
        assert_eq!(site_of(&s, Some("y.a.test")).unwrap(), "a.test");
        // The exact name wins over the wildcard.
        assert_eq!(site_of(&s, Some("x.a.test")).unwrap(), "x.a.test");
        // A wildcard covers one label only.
        assert_eq!(site_of(&s, Some("z.y.a.test")).unwrap(), "c.test");
        assert_eq!(site_of(&s, Some("other.test")).unwrap(), "c.test");
        assert_eq!(site_of(&s, None).unwrap(), "c.test");
        // The absolute form (a trailing dot) is the same name.
        assert_eq!(site_of(&s, Some("x.a.test.")).unwrap(), "x.a.test");
        assert_eq!(site_of(&s, Some("y.a.test.")).unwrap(), "a.test");
        assert_eq!(site_of(&s, Some("a.test..")).unwrap(), "c.test");
        assert_eq!(site_of(&s, Some(".")).unwrap(), "c.test");
        assert!(s.named("other.test").is_none());
        assert_eq!(s.named("b.test.").unwrap().label.as_ref(), "x.a.test");
        assert!(s.answers_plain_http);
        // The most any site's connection holds: an HTTP/2 static site's.
        assert_eq!(
            s.fds_per_connection(),
            StaticFiles::FDS_PER_H2_CONNECTION.max(Proxy::FDS_PER_CONNECTION)
        );
    }

    #[test]
    fn unknown_names_can_be_refused() {
        let s = sites(
            "unknown_names = \"reject\"\n\
             [[site]]\nnames = [\"b.test\"]\nbackend = \"127.0.0.1:9\"\ncert = \"c.pem\"\nkey = \"k.pem\"\n",
        );
        assert_eq!(site_of(&s, Some("b.test")).unwrap(), "b.test");
        assert_eq!(site_of(&s, Some("c.test")), Err(Refusal::UnknownName));
        assert_eq!(site_of(&s, None), Err(Refusal::UnknownName));
        assert!(!s.answers_plain_http);
    }
}
