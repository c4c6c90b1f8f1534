//! The client's rustls configuration, from the command line: its own
//! crypto provider (aws-lc-rs), protocol versions, one cipher suite or all
//! of the provider's, one key-exchange group or the default two, trusted roots (webpki-roots, `--ca`, or `--insecure`),
//! session resumption, and the `--insecure` certificate verifier that still
//! checks handshake signatures.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::Resumption;
use rustls::crypto::{aws_lc_rs, CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    ClientConfig, DigitallySignedStruct, ProtocolVersion, RootCertStore, SignatureScheme,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    #[error("unknown cipher suite {name:?}; valid names: {valid}")]
    UnknownCipher { name: String, valid: String },
    #[error(
        "cipher suite {name} is for {suite_version}, but --tls-version {wanted} was asked for"
    )]
    CipherVersion {
        name: String,
        suite_version: &'static str,
        wanted: &'static str,
    },
    #[error("cannot read CA file {path} (--ca): {source}")]
    ReadCa {
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("CA file {path} (--ca) has no usable PEM CERTIFICATE")]
    NoCa { path: PathBuf },
    #[error("TLS client set-up failed: {0}")]
    Setup(rustls::Error),
}

/// A TLS protocol version the client may offer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TlsVersion {
    #[value(name = "1.2")]
    V12,
    #[value(name = "1.3")]
    V13,
}

impl TlsVersion {
    pub fn name(self) -> &'static str {
        match self {
            TlsVersion::V12 => "TLS 1.2",
            TlsVersion::V13 => "TLS 1.3",
        }
    }

    /// As written after `--tls-version`.
    pub fn flag(self) -> &'static str {
        match self {
            TlsVersion::V12 => "1.2",
            TlsVersion::V13 => "1.3",
        }
    }

    fn of(v: ProtocolVersion) -> Option<TlsVersion> {
        match v {
            ProtocolVersion::TLSv1_2 => Some(TlsVersion::V12),
            ProtocolVersion::TLSv1_3 => Some(TlsVersion::V13),
            _ => None,
        }
    }
}

/// A key-exchange group the client may offer alone (`--kx`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kx {
    /// The hybrid of X25519 and ML-KEM-768 (post-quantum).
    #[value(name = "x25519mlkem768")]
    X25519MlKem768,
    #[value(name = "x25519")]
    X25519,
    #[value(name = "secp256r1")]
    Secp256r1,
}

impl Kx {
    /// As written after `--kx`.
    pub fn flag(self) -> &'static str {
        match self {
            Kx::X25519MlKem768 => "x25519mlkem768",
            Kx::X25519 => "x25519",
            Kx::Secp256r1 => "secp256r1",
        }
    }

    fn group(self) -> &'static dyn rustls::crypto::SupportedKxGroup {
        match self {
            Kx::X25519MlKem768 => aws_lc_rs::kx_group::X25519MLKEM768,
            Kx::X25519 => aws_lc_rs::kx_group::X25519,
            Kx::Secp256r1 => aws_lc_rs::kx_group::SECP256R1,
        }
    }
}

/// Where server certificates are checked against.
#[derive(Clone, Debug)]
pub enum Trust {
    /// The Mozilla roots from webpki-roots.
    WebRoots,
    /// The certificates in a PEM file.
    CaFile(PathBuf),
    /// Any certificate (handshake signatures are still verified).
    Insecure,
}

/// The TLS choices of one benchmark run.
#[derive(Clone, Debug)]
pub struct TlsChoice {
    /// `None`: offer TLS 1.3 and 1.2.
    pub version: Option<TlsVersion>,
    /// A rustls suite name; `None`: all of [`provider`]'s suites.
    pub cipher: Option<String>,
    /// The one group to offer; `None`: all of [`provider`]'s groups.
    pub kx: Option<Kx>,
    pub trust: Trust,
    /// Resume sessions across connections (in-memory cache).
    pub resume: bool,
}

/// The client's crypto provider: aws-lc-rs with its default suites (the
/// AEAD suites of TLS 1.3 and of TLS 1.2 with ECDHE, the ones tlsfront and
/// kTLS carry) and only X25519 and P-256 key exchange, the groups tlsfront
/// takes without ML-KEM: no hybrid share to compute per handshake unless
/// `--kx x25519mlkem768` asks for it.
pub fn provider() -> CryptoProvider {
    CryptoProvider {
        kx_groups: vec![aws_lc_rs::kx_group::X25519, aws_lc_rs::kx_group::SECP256R1],
        ..aws_lc_rs::default_provider()
    }
}

/// The names `--cipher` accepts, in preference order.
pub fn cipher_names() -> Vec<String> {
    provider()
        .cipher_suites
        .iter()
        .map(|s| format!("{:?}", s.suite()))
        .collect()
}

/// Build the client configuration.
pub fn client_config(choice: &TlsChoice) -> Result<Arc<ClientConfig>, TlsSetupError> {
    let mut provider = provider();
    let mut versions = match choice.version {
        None => vec![&rustls::version::TLS13, &rustls::version::TLS12],
        Some(TlsVersion::V13) => vec![&rustls::version::TLS13],
        Some(TlsVersion::V12) => vec![&rustls::version::TLS12],
    };
    if let Some(name) = &choice.cipher {
        let suite = provider
            .cipher_suites
            .iter()
            .copied()
            .find(|s| format!("{:?}", s.suite()).eq_ignore_ascii_case(name))
            .ok_or_else(|| TlsSetupError::UnknownCipher {
                name: name.clone(),
                valid: cipher_names().join(", "),
            })?;
        let suite_version = TlsVersion::of(suite.version().version).unwrap_or(TlsVersion::V13);
        if let Some(wanted) = choice.version {
            if wanted != suite_version {
                return Err(TlsSetupError::CipherVersion {
                    name: format!("{:?}", suite.suite()),
                    suite_version: suite_version.name(),
                    wanted: wanted.flag(),
                });
            }
        }
        versions = vec![suite.version()];
        provider.cipher_suites = vec![suite];
    }
    if let Some(kx) = choice.kx {
        // Offered alone: its key share goes in the ClientHello, and a server
        // without it must fail the handshake rather than fall back.
        provider.kx_groups = vec![kx.group()];
    }
    let provider = Arc::new(provider);
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(TlsSetupError::Setup)?;
    let mut cfg = match &choice.trust {
        Trust::Insecure => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCertificate {
                algorithms: provider.signature_verification_algorithms,
            }))
            .with_no_client_auth(),
        Trust::WebRoots => {
            let roots = RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        Trust::CaFile(path) => builder
            .with_root_certificates(load_roots(path)?)
            .with_no_client_auth(),
    };
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    cfg.resumption = if choice.resume {
        Resumption::in_memory_sessions(1024)
    } else {
        Resumption::disabled()
    };
    Ok(Arc::new(cfg))
}

/// A copy of `cfg` that neither uses nor fills the session cache.
pub fn without_resumption(cfg: &ClientConfig) -> Arc<ClientConfig> {
    let mut c = cfg.clone();
    c.resumption = Resumption::disabled();
    Arc::new(c)
}

fn load_roots(path: &Path) -> Result<RootCertStore, TlsSetupError> {
    let read_err = |source| TlsSetupError::ReadCa {
        path: path.to_path_buf(),
        source,
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(read_err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read_err)?;
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(TlsSetupError::NoCa {
            path: path.to_path_buf(),
        });
    }
    Ok(roots)
}

/// `--insecure`: accepts any certificate chain and name, but still verifies
/// that the server signed the handshake with the key in the certificate it
/// sent, using the provider's signature algorithms.
#[derive(Debug)]
struct AnyCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice() -> TlsChoice {
        TlsChoice {
            version: None,
            cipher: None,
            kx: None,
            trust: Trust::Insecure,
            resume: true,
        }
    }

    #[test]
    fn cipher_choice_and_errors() {
        let names = cipher_names();
        assert_eq!(names.len(), 9, "{names:?}");
        assert!(names.contains(&"TLS13_AES_128_GCM_SHA256".to_string()));
        assert!(names.contains(&"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256".to_string()));
        let groups: Vec<_> = provider().kx_groups.iter().map(|g| g.name()).collect();
        assert_eq!(
            groups,
            [rustls::NamedGroup::X25519, rustls::NamedGroup::secp256r1]
        );

        let c = client_config(&TlsChoice {
            cipher: Some("tls13_aes_128_gcm_sha256".into()),
            ..choice()
        })
        .unwrap();
        assert_eq!(c.crypto_provider().cipher_suites.len(), 1);

        let e = client_config(&TlsChoice {
            cipher: Some("RC4".into()),
            ..choice()
        })
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("unknown cipher suite \"RC4\"") && e.contains("TLS13_AES_256_GCM_SHA384"),
            "{e}"
        );

        let e = client_config(&TlsChoice {
            cipher: Some("TLS13_AES_128_GCM_SHA256".into()),
            version: Some(TlsVersion::V12),
            ..choice()
        })
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("TLS 1.3") && e.contains("--tls-version 1.2"),
            "{e}"
        );
    }

    #[test]
    fn kx_choice() {
        for (kx, group) in [
            (Kx::X25519MlKem768, rustls::NamedGroup::X25519MLKEM768),
            (Kx::X25519, rustls::NamedGroup::X25519),
            (Kx::Secp256r1, rustls::NamedGroup::secp256r1),
        ] {
            let c = client_config(&TlsChoice {
                kx: Some(kx),
                ..choice()
            })
            .unwrap();
            let groups: Vec<_> = c
                .crypto_provider()
                .kx_groups
                .iter()
                .map(|g| g.name())
                .collect();
            assert_eq!(groups, [group], "{kx:?}");
        }
    }

    #[test]
    fn ca_file_errors() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "nothing here\n").unwrap();
        let e = client_config(&TlsChoice {
            trust: Trust::CaFile(empty),
            ..choice()
        })
        .unwrap_err();
        assert!(matches!(e, TlsSetupError::NoCa { .. }), "{e}");
        let e = client_config(&TlsChoice {
            trust: Trust::CaFile(dir.path().join("missing.pem")),
            ..choice()
        })
        .unwrap_err();
        assert!(e.to_string().contains("cannot read CA file"), "{e}");
    }
}
