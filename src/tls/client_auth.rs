//! Client certificates per site (`client_ca`, `client_auth`,
//! `client_crl`): the CA bundle and revocation lists read from their files
//! into rustls' webpki verifier, and what a verified certificate tells the
//! rest of tlsfront (its subject and CN, for the access log and the PROXY
//! header).

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::{CommonState, RootCertStore};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Whether a site's clients must present a certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// No handshake completes without a certificate the CA bundle verifies.
    Require,
    /// A client may present none; one it presents must verify.
    Optional,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Require => "require",
            Mode::Optional => "optional",
        }
    }
}

/// A site's client certificate settings, resolved (the files are read when
/// the site is built: at start and on every reload).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientAuth {
    pub mode: Mode,
    /// PEM bundle of the CA certificates that issue client certificates.
    pub ca: PathBuf,
    /// Certificate revocation lists, PEM or DER.
    pub crls: Vec<PathBuf>,
    /// Where `client_ca` and `client_crl` are set, for messages.
    pub ca_origin: String,
    pub crl_origin: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientAuthError {
    #[error("cannot read the CA bundle {path}: {source} (client_ca names a PEM file of CA certificates)")]
    ReadCa {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the CA bundle {path} is not valid PEM: {source} (client_ca names a PEM file of CA certificates)")]
    PemCa {
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("the CA bundle {0} holds no certificate: give a PEM file with at least one \"-----BEGIN CERTIFICATE-----\" block")]
    EmptyCa(PathBuf),
    #[error("certificate #{index} of the CA bundle {path} cannot be a trust anchor: {source:?} (give the CA's certificate as PEM)")]
    BadCa {
        path: PathBuf,
        index: usize,
        source: rustls::Error,
    },
    #[error(
        "cannot read the revocation list {path}: {source} (client_crl names PEM or DER CRL files)"
    )]
    ReadCrl {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the revocation list {path} is not a valid CRL: {reason} (client_crl names PEM or DER CRL files)")]
    BadCrl { path: PathBuf, reason: String },
    #[error("the client certificate verifier cannot be built: {0}")]
    Verifier(rustls::server::VerifierBuilderError),
}

impl ClientAuthError {
    /// The setting to fix: `client_ca` or `client_crl`.
    pub fn setting(&self) -> &'static str {
        match self {
            ClientAuthError::ReadCrl { .. } | ClientAuthError::BadCrl { .. } => "client_crl",
            _ => "client_ca",
        }
    }
}

/// The CA certificates of a PEM bundle (at least one).
pub fn read_ca(path: &Path) -> Result<Vec<CertificateDer<'static>>, ClientAuthError> {
    let pem = std::fs::read(path).map_err(|source| ClientAuthError::ReadCa {
        path: path.into(),
        source,
    })?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| ClientAuthError::PemCa {
            path: path.into(),
            source,
        })?;
    if certs.is_empty() {
        return Err(ClientAuthError::EmptyCa(path.into()));
    }
    Ok(certs)
}

/// The revocation lists of a file: PEM blocks (`X509 CRL`), or one DER CRL.
pub fn read_crl(
    path: &Path,
) -> Result<Vec<CertificateRevocationListDer<'static>>, ClientAuthError> {
    let bytes = std::fs::read(path).map_err(|source| ClientAuthError::ReadCrl {
        path: path.into(),
        source,
    })?;
    let bad = |reason: String| ClientAuthError::BadCrl {
        path: path.into(),
        reason,
    };
    let crls = if bytes.starts_with(b"-----") || bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        let crls = CertificateRevocationListDer::pem_slice_iter(&bytes)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| bad(e.to_string()))?;
        if crls.is_empty() {
            return Err(bad("no \"-----BEGIN X509 CRL-----\" block".into()));
        }
        crls
    } else {
        vec![CertificateRevocationListDer::from(bytes)]
    };
    // Each one parsed here, so that the message names its file (the
    // verifier's own error would not).
    for c in &crls {
        webpki::OwnedCertRevocationList::from_der(c.as_ref()).map_err(|e| bad(format!("{e:?}")))?;
    }
    Ok(crls)
}

/// The verifier of a site's client certificates, its files read now.
///
/// Revocation is checked for every certificate of the chain below the
/// trust anchor, and a certificate whose issuer has no CRL among
/// `client_crl` is refused (rustls' defaults, as OpenSSL's `CRL_CHECK_ALL`
/// in nginx): a CRL list that lacks a CA fails closed.
pub fn verifier(
    auth: &ClientAuth,
    provider: &Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, ClientAuthError> {
    let mut roots = RootCertStore::empty();
    for (i, c) in read_ca(&auth.ca)?.into_iter().enumerate() {
        roots.add(c).map_err(|source| ClientAuthError::BadCa {
            path: auth.ca.clone(),
            index: i + 1,
            source,
        })?;
    }
    let mut crls = Vec::new();
    for p in &auth.crls {
        crls.extend(read_crl(p)?);
    }
    let mut b = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
    if !crls.is_empty() {
        b = b.with_crls(crls);
    }
    if auth.mode == Mode::Optional {
        b = b.allow_unauthenticated();
    }
    b.build().map_err(ClientAuthError::Verifier)
}

/// What a connection's handshake says about a client certificate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ClientCert {
    /// The site asks for none.
    #[default]
    NotAsked,
    /// Asked for (`optional`), none presented.
    Absent,
    /// Presented and verified.
    Verified(Arc<PeerCert>),
}

impl ClientCert {
    /// A certificate was presented and verified.
    pub fn verified(&self) -> bool {
        matches!(self, ClientCert::Verified(_))
    }

    /// The result of a finished handshake on a site that asks in `mode`.
    pub fn of(mode: Option<Mode>, conn: &CommonState) -> ClientCert {
        match (mode, PeerCert::of(conn)) {
            (_, Some(p)) => ClientCert::Verified(p),
            (Some(_), None) => ClientCert::Absent,
            (None, None) => ClientCert::NotAsked,
        }
    }

    /// nginx's `$ssl_client_verify`: `SUCCESS` or `NONE` (`None`: the
    /// site asks for no certificate). A certificate that fails ends the
    /// handshake, so no request is ever logged with `FAILED`.
    pub fn verify(&self) -> Option<&'static str> {
        match self {
            ClientCert::NotAsked => None,
            ClientCert::Absent => Some("NONE"),
            ClientCert::Verified(_) => Some("SUCCESS"),
        }
    }

    pub fn peer(&self) -> Option<&PeerCert> {
        match self {
            ClientCert::Verified(p) => Some(p),
            _ => None,
        }
    }
}

/// How a site asks for client certificates, and the verifier of them.
pub type SiteVerifier = (Mode, Arc<dyn ClientCertVerifier>);

/// A client certificate rustls verified in this connection's handshake, or
/// in the one of the session it resumed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCert {
    /// The subject's (last) commonName, if it has one.
    pub cn: Option<String>,
    /// The subject, RFC 4514 style (`CN=alice,O=Example`).
    pub subject: String,
    /// Presented in this connection's handshake (false: a resumption of a
    /// session that had one).
    pub this_connection: bool,
}

impl PeerCert {
    /// The verified client certificate of a finished handshake, if any
    /// (rustls ends the handshake of one that fails to verify, so any
    /// certificate still here passed).
    pub fn of(conn: &CommonState) -> Option<Arc<PeerCert>> {
        let leaf = conn.peer_certificates()?.first()?;
        let resumed = conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
        let (cn, subject) = match x509_parser::parse_x509_certificate(leaf.as_ref()) {
            Ok((_, cert)) => {
                let subject = cert.subject();
                let cn = subject
                    .iter_common_name()
                    .last()
                    .and_then(|a| a.as_str().ok())
                    .map(str::to_string);
                (cn, subject.to_string())
            }
            Err(_) => (None, String::new()),
        };
        Some(Arc::new(PeerCert {
            cn,
            subject,
            this_connection: !resumed,
        }))
    }
}
