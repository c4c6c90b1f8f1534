//! rustls on the server side: one `ServerConfig` per site, all of them
//! built on one session cache and one set of ticket keys ([`TlsShared`],
//! common to every worker and kept across reloads); each site's
//! certificates, chosen by the client's signature algorithms, and its
//! handshake policy ([`policy`]); the record-by-record handshake, and the
//! user-space data path.

pub mod client_auth;
pub mod handshake;
mod hello;
mod hkdf;
pub mod ocsp;
pub(crate) mod outbuf;
pub mod policy;
pub mod tickets;
pub mod userspace;
pub(crate) mod wire;

pub use hello::{Hello, Refusal};

use rustls::crypto::{aws_lc_rs, CryptoProvider};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{
    ClientHello, ResolvesServerCert, ServerSessionMemoryCache, StoresServerSessions,
};
use rustls::sign::CertifiedKey;
use rustls::{CipherSuite, ServerConfig, SignatureAlgorithm};
use std::sync::Arc;

/// The suites tlsfront negotiates: exactly the AEADs kTLS can carry, TLS 1.3
/// and TLS 1.2 ECDHE, in rustls' order of preference.
const SUITES: [CipherSuite; 9] = [
    CipherSuite::TLS13_AES_256_GCM_SHA384,
    CipherSuite::TLS13_AES_128_GCM_SHA256,
    CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
    CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
];

#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    #[error("the certificate and key cannot be used together: {0} (check that the key belongs to the first certificate of the chain)")]
    Identity(rustls::Error),
    #[error("TLS set-up failed: {0}")]
    Setup(rustls::Error),
    #[error("the system's random number generator failed")]
    Rng,
    #[error("setting ciphers: TLS 1.2 is allowed but none of the site's TLS 1.2 suites can be used with its certificate's key ({key}), so every TLS 1.2 client would be refused; add one of {valid}, or set tls_versions = [\"1.3\"]")]
    NoTls12Suite { key: String, valid: String },
}

/// Options that shape the TLS server.
#[derive(Clone, Debug)]
pub struct TlsOptions {
    /// ALPN protocols offered, most preferred first (empty: no ALPN).
    pub alpn: Vec<Vec<u8>>,
    /// Entries in the server-side session cache (TLS 1.2 session IDs).
    pub session_cache: usize,
    /// TLS 1.3 tickets sent after each full handshake (after a resumption:
    /// at most one, as OpenSSL does).
    pub tls13_tickets: usize,
}

impl Default for TlsOptions {
    fn default() -> Self {
        TlsOptions {
            // As nginx: HTTP/1.0 clients (curl --http1.0) offer "http/1.0".
            alpn: vec![b"http/1.1".to_vec(), b"http/1.0".to_vec()],
            session_cache: 20_000,
            tls13_tickets: 2,
        }
    }
}

/// The crypto provider: aws-lc-rs restricted to kTLS-capable suites and to
/// X25519MLKEM768, X25519 and P-256 key exchange (each site narrows them,
/// see [`policy`]), its TLS 1.3 HKDF on keyed HMAC contexts (see `hkdf`).
pub fn provider() -> CryptoProvider {
    let base = hkdf::keyed_hkdf(aws_lc_rs::default_provider());
    CryptoProvider {
        cipher_suites: base
            .cipher_suites
            .iter()
            .copied()
            .filter(|s| SUITES.contains(&s.suite()))
            .collect(),
        kx_groups: policy::Group::ALL.iter().map(|g| g.kx()).collect(),
        ..base
    }
}

/// What every site's configuration shares, for the life of the process:
/// the provider, the session cache and the ticket keys. Reloads build new
/// site configurations on the same objects, so sessions resume across them.
/// (rustls resumes a session only for the name it was made for, so sharing
/// across sites lets nothing cross between them.)
#[derive(Clone)]
pub struct TlsShared {
    provider: Arc<CryptoProvider>,
    cache: Arc<dyn StoresServerSessions>,
    tickets: Arc<tickets::TicketKeys>,
    opts: TlsOptions,
}

impl TlsShared {
    /// `tickets`: the ticket keys (from files, or rotated in memory).
    pub fn new(opts: TlsOptions, tickets: tickets::TicketKeys) -> TlsShared {
        TlsShared {
            provider: Arc::new(provider()),
            cache: ServerSessionMemoryCache::new(opts.session_cache),
            tickets: Arc::new(tickets),
            opts,
        }
    }

    /// The ticket keys every site's configuration uses (reloads replace
    /// their contents in place).
    pub fn tickets(&self) -> &Arc<tickets::TicketKeys> {
        &self.tickets
    }

    pub fn provider(&self) -> &Arc<CryptoProvider> {
        &self.provider
    }

    /// A certificate chain and its key, checked to belong together.
    pub fn certified_key(
        &self,
        chain: Vec<CertificateDer<'static>>,
        key: crate::config::cert::Key,
    ) -> Result<Arc<CertifiedKey>, TlsConfigError> {
        key.certify(chain, &self.provider)
            .map(Arc::new)
            .map_err(TlsConfigError::Identity)
    }

    /// The configurations of one site: its certificates (at least one),
    /// ALPN list and handshake policy, and the verifier of its clients'
    /// certificates if it asks for them ([`client_auth::verifier`]), on the
    /// shared cache and ticket keys.
    pub fn site(
        &self,
        certs: Vec<Arc<CertifiedKey>>,
        alpn: Vec<Vec<u8>>,
        policy: &policy::Policy,
        client_auth: Option<client_auth::SiteVerifier>,
    ) -> Result<ServerConfigs, TlsConfigError> {
        check_tls12_suites(&self.provider, &certs, policy)?;
        let resolver: Arc<dyn ResolvesServerCert> = Arc::new(SiteCerts::new(certs));
        // One cache of compressed certificates for all of the site's
        // configurations (rustls' default size).
        let compression_cache = Arc::new(rustls::compress::CompressionCache::default());
        let pair = |groups: &[policy::Group]| -> Result<Pair, TlsConfigError> {
            let provider = CryptoProvider {
                cipher_suites: self
                    .provider
                    .cipher_suites
                    .iter()
                    .copied()
                    .filter(|s| policy.suites.contains(&s.suite()))
                    .collect(),
                kx_groups: groups.iter().map(|g| g.kx()).collect(),
                ..(*self.provider).clone()
            };
            let builder = ServerConfig::builder_with_provider(Arc::new(provider))
                .with_protocol_versions(&policy.rustls_versions())
                .map_err(TlsConfigError::Setup)?;
            let builder = match &client_auth {
                Some((_, v)) => builder.with_client_cert_verifier(v.clone()),
                None => builder.with_no_client_auth(),
            };
            let mut cfg = builder.with_cert_resolver(resolver.clone());
            cfg.alpn_protocols = alpn.clone();
            // Needed for the kernel handoff (`dangerous_into_kernel_connection`).
            cfg.enable_secret_extraction = true;
            cfg.session_storage = self.cache.clone();
            cfg.ticketer = self.tickets.clone();
            cfg.send_tls13_tickets = self.opts.tls13_tickets;
            cfg.max_early_data_size = 0;
            // RFC 8879 (TLS 1.3 only): the handshake's Certificate message,
            // compressed once per certificate and kept; what kTLS carries
            // afterwards is not concerned.
            cfg.cert_compressors = if policy.cert_compression {
                rustls::compress::default_cert_compressors().to_vec()
            } else {
                Vec::new()
            };
            cfg.cert_compression_cache = compression_cache.clone();
            let mut resuming = cfg.clone();
            resuming.send_tls13_tickets = self.opts.tls13_tickets.min(1);
            Ok(Pair {
                full: Arc::new(cfg),
                resuming: Arc::new(resuming),
            })
        };
        let mut by_group = Vec::with_capacity(policy.groups.len());
        for g in &policy.groups {
            by_group.push((*g, pair(std::slice::from_ref(g))?));
        }
        Ok(ServerConfigs {
            all: pair(&policy.groups)?,
            by_group,
            policy: Arc::new(policy.clone()),
            client_auth,
        })
    }
}

/// One site's certificates (an ECDSA and an RSA one, say): the first whose
/// key can sign with an algorithm the client offers, cheapest first.
#[derive(Debug)]
struct SiteCerts(Vec<Arc<CertifiedKey>>);

impl SiteCerts {
    fn new(mut certs: Vec<Arc<CertifiedKey>>) -> SiteCerts {
        // ECDSA and Ed25519 signatures cost a fraction of RSA ones: offer
        // them to every client that takes them.
        certs.sort_by_key(|c| match c.key.algorithm() {
            SignatureAlgorithm::ECDSA | SignatureAlgorithm::ED25519 => 0,
            _ => 1,
        });
        SiteCerts(certs)
    }
}

impl ResolvesServerCert for SiteCerts {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let offered = hello.signature_schemes();
        self.0
            .iter()
            .find(|c| c.key.choose_scheme(offered).is_some())
            .or_else(|| self.0.first())
            .cloned()
    }
}

/// With TLS 1.2 allowed, one of the site's TLS 1.2 suites must sign with
/// one of its keys (an ECDSA suite for an ECDSA or Ed25519 key, an RSA one
/// for RSA): else no TLS 1.2 handshake could complete. Checked where the
/// site is built and by `config check`.
pub fn check_tls12_suites(
    provider: &CryptoProvider,
    certs: &[Arc<CertifiedKey>],
    policy: &policy::Policy,
) -> Result<(), TlsConfigError> {
    if !policy.versions.contains(&policy::Version::Tls12) || certs.is_empty() {
        return Ok(());
    }
    let tls12: Vec<&rustls::Tls12CipherSuite> = provider
        .cipher_suites
        .iter()
        .filter_map(|s| match s {
            rustls::SupportedCipherSuite::Tls12(t) => Some(*t),
            _ => None,
        })
        .collect();
    let usable =
        |t: &rustls::Tls12CipherSuite| certs.iter().any(|c| c.key.choose_scheme(t.sign).is_some());
    if tls12
        .iter()
        .any(|t| policy.suites.contains(&t.common.suite) && usable(t))
    {
        return Ok(());
    }
    let key = certs
        .iter()
        .map(|c| format!("{:?}", c.key.algorithm()))
        .collect::<Vec<_>>()
        .join(", ");
    let valid = tls12
        .iter()
        .filter(|t| usable(t))
        .filter_map(|t| t.common.suite.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    Err(TlsConfigError::NoTls12Suite { key, valid })
}

/// A full handshake's configuration and a resumption's: they differ only
/// in how many TLS 1.3 tickets follow the handshake.
#[derive(Clone)]
struct Pair {
    full: Arc<ServerConfig>,
    resuming: Arc<ServerConfig>,
}

/// One site's server configurations: one pair per key exchange group the
/// site allows (with that group alone, so that the site's order of
/// preference decides: rustls would take the client's), and one with all
/// of them for a ClientHello that lists none. The session cache, the
/// ticket keys, the certificates and the compressed certificates are the
/// same objects in all of them.
#[derive(Clone)]
pub struct ServerConfigs {
    all: Pair,
    by_group: Vec<(policy::Group, Pair)>,
    policy: Arc<policy::Policy>,
    client_auth: Option<client_auth::SiteVerifier>,
}

impl ServerConfigs {
    /// The configuration for a connection whose ClientHello is in
    /// `records`, and what the ClientHello says (one-site servers).
    pub fn for_client_hello(&self, records: &[u8]) -> (Arc<ServerConfig>, hello::Hello) {
        let hello = hello::from_records(records);
        (self.for_hello(&hello), hello)
    }

    /// The configuration for a connection with this ClientHello: for the
    /// key exchange group the site's policy picks for it
    /// ([`policy::Policy::choose_group`]).
    ///
    /// A client that offers a ticket gets at most one new ticket, as from
    /// OpenSSL: it keeps one ticket per resumption, and each ticket costs an
    /// encryption and a record. rustls sends the same number after every
    /// handshake, so the choice is made here, before rustls sees the hello.
    /// (An offered ticket that turns out stale still means a full
    /// handshake, with one ticket instead of two: harmless.)
    pub fn for_hello(&self, hello: &hello::Hello) -> Arc<ServerConfig> {
        let pair = self
            .policy
            .choose_group(&hello.offered)
            .and_then(|g| self.by_group.iter().find(|(h, _)| *h == g))
            .map_or(&self.all, |(_, p)| p);
        if hello.offers_psk {
            pair.resuming.clone()
        } else {
            pair.full.clone()
        }
    }

    /// The site's handshake policy.
    pub fn policy(&self) -> &policy::Policy {
        &self.policy
    }

    /// Whether the site asks its clients for a certificate, and how.
    pub fn client_auth(&self) -> Option<client_auth::Mode> {
        self.client_auth.as_ref().map(|(m, _)| *m)
    }

    /// The client certificate of a finished handshake, or why the
    /// connection must not go on.
    ///
    /// rustls resumes a session (ticket or ID) without looking at the
    /// client certificate again: a session made before a reload (another
    /// CA, a new CRL, `optional` turned `require`) would carry over what
    /// the site no longer accepts. So a resumed connection's certificate is
    /// verified again against the site's verifier as it is now, and a
    /// `require` site refuses a resumed session without one.
    pub fn client_cert(
        &self,
        conn: &rustls::CommonState,
    ) -> Result<client_auth::ClientCert, rustls::Error> {
        let Some((mode, verifier)) = &self.client_auth else {
            return Ok(client_auth::ClientCert::of(None, conn));
        };
        if conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
            match conn.peer_certificates() {
                Some([leaf, intermediates @ ..]) => {
                    verifier.verify_client_cert(
                        leaf,
                        intermediates,
                        rustls::pki_types::UnixTime::now(),
                    )?;
                }
                _ if *mode == client_auth::Mode::Require => {
                    return Err(rustls::Error::NoCertificatesPresented)
                }
                _ => {}
            }
        }
        Ok(client_auth::ClientCert::of(Some(*mode), conn))
    }
}

/// The configurations of a one-site server with its own cache and keys
/// (tests, fuzzing).
pub fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    opts: &TlsOptions,
) -> Result<ServerConfigs, TlsConfigError> {
    let shared = TlsShared::new(
        opts.clone(),
        tickets::TicketKeys::rotating(
            tickets::DEFAULT_ROTATION,
            tickets::Seed::random().ok_or(TlsConfigError::Rng)?,
        ),
    );
    let cert = shared.certified_key(chain, crate::config::cert::Key::Der(key))?;
    shared.site(
        vec![cert],
        opts.alpn.clone(),
        &policy::Policy::default(),
        None,
    )
}

/// The ClientHello reader, for the parser robustness tests.
#[cfg(test)]
pub(crate) fn sni_for_tests(record: &[u8]) -> Option<String> {
    hello::from_records(record).sni
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_offers_only_ktls_capable_suites() {
        let p = provider();
        assert_eq!(p.cipher_suites.len(), SUITES.len());
        for s in &p.cipher_suites {
            assert!(
                crate::ktls::Cipher::from_suite(s.suite()).is_some(),
                "{:?}",
                s.suite()
            );
        }
    }
}
