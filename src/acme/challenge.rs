//! The answers to ACME challenges while an order waits for validation:
//! TLS-ALPN-01 (RFC 8737) challenge certificates and the rustls server
//! configuration that presents them, and HTTP-01 (RFC 8555 section 8.3) key
//! authorizations by token. The listeners own the sockets (port 443 and the
//! plain-HTTP `http_listen` one); this module only decides what a
//! ClientHello offering "acme-tls/1", or a request for
//! `/.well-known/acme-challenge/<token>`, gets to see.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use rcgen::{CertificateParams, CustomExtension, DistinguishedName, KeyPair};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, NoServerSessionStorage, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use super::AcmeError;

/// The ALPN protocol a CA's validator offers, and the only one a challenge
/// connection may negotiate (RFC 8737 section 3).
pub const ACME_TLS_ALPN: &[u8] = b"acme-tls/1";

/// Does this ClientHello come from a TLS-ALPN-01 validator? The listener
/// asks this (e.g. from a `LazyConfigAcceptor`) to pick
/// [`Challenges::server_config`] over its normal configuration.
pub fn is_challenge_hello(hello: &ClientHello<'_>) -> bool {
    hello
        .alpn()
        .is_some_and(|mut protocols| protocols.any(|p| p == ACME_TLS_ALPN))
}

/// The path prefix of an HTTP-01 validation request (RFC 8555 section
/// 8.3); the token follows it.
pub const HTTP01_PREFIX: &str = "/.well-known/acme-challenge/";

/// Which challenge a site's names are proven with (`acme_challenge`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
pub enum ChallengeKind {
    /// TLS-ALPN-01 when the CA offers it (it needs nothing but the TLS
    /// listener), else HTTP-01 when a plain-HTTP listener runs.
    #[default]
    #[serde(rename = "auto")]
    Auto,
    /// TLS-ALPN-01 on the TLS listener (port 443 as the CA reaches it).
    #[serde(rename = "tls-alpn-01")]
    TlsAlpn01,
    /// HTTP-01 on the plain-HTTP listener (port 80 as the CA reaches it).
    #[serde(rename = "http-01")]
    Http01,
    /// DNS-01: a TXT record added to the zone by an RFC 2136 update to
    /// `acme_dns_server` (the only challenge that proves wildcard names).
    #[serde(rename = "dns-01")]
    Dns01,
}

/// The challenges being answered, shared with the listeners: cloning
/// shares the same sets. TLS-ALPN-01 certificates are keyed by the
/// lowercased DNS name being validated, HTTP-01 key authorizations by
/// token.
#[derive(Clone, Default)]
pub struct Challenges {
    // A std lock: held only to copy an Arc in or out, never across an await.
    inner: Arc<RwLock<HashMap<String, Arc<CertifiedKey>>>>,
    http: Arc<RwLock<HashMap<String, Arc<str>>>>,
    /// Whether a plain-HTTP listener runs to answer HTTP-01 (set once at
    /// start; a process without one cannot be validated that way).
    http_listening: Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for Challenges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.read().keys().cloned().collect();
        f.debug_struct("Challenges").field("names", &names).finish()
    }
}

impl Challenges {
    /// The challenge certificate for this SNI, if one is being answered.
    pub fn get(&self, sni: &str) -> Option<Arc<CertifiedKey>> {
        self.read().get(&sni.to_ascii_lowercase()).cloned()
    }

    /// Names with a challenge certificate up right now.
    pub fn names(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }

    /// A rustls `ServerConfig` that answers "acme-tls/1" ClientHellos with
    /// the challenge certificate for their SNI, built on `provider`. It
    /// negotiates ALPN "acme-tls/1" only and resumes nothing (no session
    /// cache, no tickets): a validator connects once per challenge, and a
    /// resumed session would present no certificate at all.
    ///
    /// Errs only if `provider` supports none of TLS 1.2 and 1.3.
    pub fn server_config(
        &self,
        provider: Arc<rustls::crypto::CryptoProvider>,
    ) -> Result<Arc<rustls::ServerConfig>, AcmeError> {
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| AcmeError::Tls {
                detail: e.to_string(),
            })?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Resolver(self.clone())));
        config.alpn_protocols = vec![ACME_TLS_ALPN.to_vec()];
        config.session_storage = Arc::new(NoServerSessionStorage {});
        config.send_tls13_tickets = 0;
        // The default ticketer already issues no tickets; say so anyway.
        config.ticketer = Arc::new(NoTickets);
        Ok(Arc::new(config))
    }

    /// The key authorization for an HTTP-01 `token`, if one is being
    /// answered.
    pub fn http_answer(&self, token: &str) -> Option<Arc<str>> {
        self.http
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(token)
            .cloned()
    }

    /// Say that a plain-HTTP listener runs (and HTTP-01 can be answered).
    pub fn set_http_listening(&self, on: bool) {
        self.http_listening
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether HTTP-01 can be answered here.
    pub fn http_listening(&self) -> bool {
        self.http_listening
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Answer HTTP-01 for `token` until the returned guard is dropped.
    pub(crate) fn answer_http(&self, token: &str, key_authorization: &str) -> AnsweringHttp {
        let answer: Arc<str> = key_authorization.into();
        self.http
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(token.to_string(), answer.clone());
        AnsweringHttp {
            challenges: self.clone(),
            token: token.to_string(),
            answer,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<CertifiedKey>>> {
        // A panic elsewhere while holding the lock leaves the map intact
        // (every write is one insert or remove): keep serving it.
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<CertifiedKey>>> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Put up a challenge certificate until the returned guard is dropped,
    /// so that every exit from `obtain` (errors included) takes it down.
    pub(crate) fn answer(&self, name: &str, key: Arc<CertifiedKey>) -> Answering {
        let name = name.to_ascii_lowercase();
        self.write().insert(name.clone(), key.clone());
        Answering {
            challenges: self.clone(),
            name,
            key,
        }
    }
}

/// A challenge certificate that is up; dropping this takes it down,
/// unless another answer for the name replaced it meanwhile (a fleet node
/// answers its own order's challenge twice: from the order, and from
/// etcd's copy).
pub(crate) struct Answering {
    challenges: Challenges,
    name: String,
    key: Arc<CertifiedKey>,
}

impl Drop for Answering {
    fn drop(&mut self) {
        let mut map = self.challenges.write();
        if map
            .get(&self.name)
            .is_some_and(|k| Arc::ptr_eq(k, &self.key))
        {
            map.remove(&self.name);
        }
    }
}

/// An HTTP-01 answer that is up; dropping this takes it down (unless
/// replaced, as above).
pub(crate) struct AnsweringHttp {
    challenges: Challenges,
    token: String,
    answer: Arc<str>,
}

impl Drop for AnsweringHttp {
    fn drop(&mut self) {
        let mut map = self
            .challenges
            .http
            .write()
            .unwrap_or_else(|e| e.into_inner());
        if map
            .get(&self.token)
            .is_some_and(|a| Arc::ptr_eq(a, &self.answer))
        {
            map.remove(&self.token);
        }
    }
}

#[derive(Debug)]
struct Resolver(Challenges);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        // A client that did not offer acme-tls/1 must never see a challenge
        // certificate (RFC 8737 section 3): fail its handshake instead.
        if !is_challenge_hello(&hello) {
            return None;
        }
        self.0.get(hello.server_name()?)
    }
}

#[derive(Debug)]
struct NoTickets;

impl rustls::server::ProducesTickets for NoTickets {
    fn enabled(&self) -> bool {
        false
    }
    fn lifetime(&self) -> u32 {
        0
    }
    fn encrypt(&self, _plain: &[u8]) -> Option<Vec<u8>> {
        None
    }
    fn decrypt(&self, _cipher: &[u8]) -> Option<Vec<u8>> {
        None
    }
}

/// The self-signed certificate RFC 8737 asks for: the one DNS name as its
/// only SAN and the critical acmeIdentifier extension holding the SHA-256
/// of the key authorization. A fresh P-256 key each time: nothing else is
/// ever signed with it.
pub(crate) fn challenge_key(name: &str, digest: &[u8]) -> Result<Arc<CertifiedKey>, AcmeError> {
    let fail = |e: &dyn std::fmt::Display| AcmeError::Key {
        what: format!("the TLS-ALPN-01 certificate for {name}"),
        detail: e.to_string(),
    };
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| fail(&e))?;
    let mut params = CertificateParams::new(vec![name.to_string()]).map_err(|e| fail(&e))?;
    params.distinguished_name = DistinguishedName::new();
    params.custom_extensions = vec![CustomExtension::new_acme_identifier(digest)];
    let cert = params.self_signed(&key).map_err(|e| fail(&e))?;
    let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let signer = rustls::crypto::aws_lc_rs::sign::any_ecdsa_type(&der).map_err(|e| fail(&e))?;
    Ok(Arc::new(CertifiedKey::new(
        vec![cert.der().clone()],
        signer,
    )))
}
