//! rustls on the server side: one `ServerConfig` per site, all of them
//! built on one session cache and one set of ticket keys ([`TlsShared`],
//! common to every worker and kept across reloads); each site's
//! certificates, chosen by the client's signature algorithms; the
//! record-by-record handshake, and the user-space data path.

pub mod handshake;
mod hello;
mod hkdf;
pub mod ocsp;
pub(crate) mod outbuf;
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
/// X25519 and P-256 key exchange, its TLS 1.3 HKDF on keyed HMAC contexts
/// (see `hkdf`).
pub fn provider() -> CryptoProvider {
    let base = hkdf::keyed_hkdf(aws_lc_rs::default_provider());
    CryptoProvider {
        cipher_suites: base
            .cipher_suites
            .iter()
            .copied()
            .filter(|s| SUITES.contains(&s.suite()))
            .collect(),
        kx_groups: vec![aws_lc_rs::kx_group::X25519, aws_lc_rs::kx_group::SECP256R1],
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
    pub fn tickets(&self) -> &tickets::TicketKeys {
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

    /// The configurations of one site: its certificates (at least one) and
    /// ALPN list, on the shared cache and ticket keys.
    pub fn site(
        &self,
        certs: Vec<Arc<CertifiedKey>>,
        alpn: Vec<Vec<u8>>,
    ) -> Result<ServerConfigs, TlsConfigError> {
        let mut cfg = ServerConfig::builder_with_provider(self.provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .map_err(TlsConfigError::Setup)?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(SiteCerts::new(certs)));
        cfg.alpn_protocols = alpn;
        // Needed for the kernel handoff (`dangerous_into_kernel_connection`).
        cfg.enable_secret_extraction = true;
        cfg.session_storage = self.cache.clone();
        cfg.ticketer = self.tickets.clone();
        cfg.send_tls13_tickets = self.opts.tls13_tickets;
        cfg.max_early_data_size = 0;
        let mut resuming = cfg.clone();
        resuming.send_tls13_tickets = self.opts.tls13_tickets.min(1);
        Ok(ServerConfigs {
            full: Arc::new(cfg),
            resuming: Arc::new(resuming),
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

/// One site's server configurations. They differ only in how many TLS 1.3
/// tickets follow the handshake; the session cache, the ticket keys and the
/// certificates are the same objects in both.
#[derive(Clone)]
pub struct ServerConfigs {
    full: Arc<ServerConfig>,
    resuming: Arc<ServerConfig>,
}

impl ServerConfigs {
    /// The configuration for a connection whose ClientHello is in
    /// `records`, and what the ClientHello says (one-site servers).
    pub fn for_client_hello(&self, records: &[u8]) -> (Arc<ServerConfig>, hello::Hello) {
        let hello = hello::from_records(records);
        (self.for_hello(&hello), hello)
    }

    /// The configuration for a connection with this ClientHello.
    ///
    /// A client that offers a ticket gets at most one new ticket, as from
    /// OpenSSL: it keeps one ticket per resumption, and each ticket costs an
    /// encryption and a record. rustls sends the same number after every
    /// handshake, so the choice is made here, before rustls sees the hello.
    /// (An offered ticket that turns out stale still means a full
    /// handshake, with one ticket instead of two: harmless.)
    pub fn for_hello(&self, hello: &hello::Hello) -> Arc<ServerConfig> {
        if hello.offers_psk {
            self.resuming.clone()
        } else {
            self.full.clone()
        }
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
    shared.site(vec![cert], opts.alpn.clone())
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
