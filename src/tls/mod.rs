//! rustls on the server side: the one `ServerConfig` all workers share (so
//! the session cache and ticket keys are common to every worker), the
//! record-by-record handshake, and the user-space data path.

pub mod handshake;
mod hello;
mod hkdf;
pub(crate) mod outbuf;
pub mod tickets;
pub mod userspace;

pub use hello::Refusal;

use rustls::crypto::{aws_lc_rs, CryptoProvider};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::ServerSessionMemoryCache;
use rustls::{CipherSuite, ServerConfig};
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
    #[error("the certificate and key cannot be used together: {0} (check that --key belongs to the first certificate in --cert)")]
    Identity(rustls::Error),
    #[error("TLS set-up failed: {0}")]
    Setup(rustls::Error),
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

/// The server configurations all workers share. They differ only in how
/// many TLS 1.3 tickets follow the handshake; the session cache, the ticket
/// keys and the certificate are the same objects in both.
#[derive(Clone)]
pub struct ServerConfigs {
    full: Arc<ServerConfig>,
    resuming: Arc<ServerConfig>,
}

impl ServerConfigs {
    /// The configuration for a connection whose ClientHello is in
    /// `records`, and what the ClientHello says.
    ///
    /// A client that offers a ticket gets at most one new ticket, as from
    /// OpenSSL: it keeps one ticket per resumption, and each ticket costs an
    /// encryption and a record. rustls sends the same number after every
    /// handshake, so the choice is made here, before rustls sees the hello.
    /// (An offered ticket that turns out stale still means a full
    /// handshake, with one ticket instead of two: harmless.)
    pub fn for_client_hello(&self, records: &[u8]) -> (Arc<ServerConfig>, hello::Hello) {
        let hello = hello::from_records(records);
        let cfg = if hello.offers_psk {
            &self.resuming
        } else {
            &self.full
        };
        (cfg.clone(), hello)
    }
}

/// Build the shared server configurations.
pub fn server_config(
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    opts: &TlsOptions,
) -> Result<ServerConfigs, TlsConfigError> {
    let mut cfg = ServerConfig::builder_with_provider(Arc::new(provider()))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(TlsConfigError::Setup)?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(TlsConfigError::Identity)?;
    cfg.alpn_protocols = opts.alpn.clone();
    // Needed for the kernel handoff (`dangerous_into_kernel_connection`).
    cfg.enable_secret_extraction = true;
    cfg.session_storage = ServerSessionMemoryCache::new(opts.session_cache);
    cfg.ticketer = aws_lc_rs::Ticketer::new().map_err(TlsConfigError::Setup)?;
    cfg.send_tls13_tickets = opts.tls13_tickets;
    cfg.max_early_data_size = 0;
    let mut resuming = cfg.clone();
    resuming.send_tls13_tickets = opts.tls13_tickets.min(1);
    Ok(ServerConfigs {
        full: Arc::new(cfg),
        resuming: Arc::new(resuming),
    })
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
