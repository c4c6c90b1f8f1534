//! Certificates: PEM loading for `--cert`/`--key`, and the self-signed
//! development identity made on first run and kept in the per-user data
//! directory.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("cannot read certificate file {path}: {source}")]
    ReadCert {
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("certificate file {path} has no PEM CERTIFICATE block: give a PEM file with the server certificate first, then its chain")]
    NoCert { path: PathBuf },
    #[error("cannot read private key file {path}: {source} (give a PEM PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY)")]
    ReadKey {
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("private key file {path}: the key is encrypted: tlsfront needs it unencrypted (openssl pkey -in {path} -out {path}.plain, then give that file, readable by root only)", path = path.display())]
    EncryptedKey { path: PathBuf },
    #[error("certificate file {path}: the chain is {size} bytes, more than {MAX_CHAIN} (TLS clients refuse a Certificate message that large: rustls above 64 KiB, OpenSSL above 100 KiB): give the server certificate and its intermediates only, without the root or unrelated certificates", path = path.display())]
    ChainTooLarge { path: PathBuf, size: usize },
    #[error("--cert and --key go together: give both, or neither for the built-in self-signed certificate")]
    Half,
    #[error("no per-user data directory for the default certificate (set HOME or XDG_DATA_HOME, or give --cert and --key)")]
    NoDataDir,
    #[error("cannot write the default certificate to {path}: {source} (make the directory writable, or give --cert and --key)")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot make a self-signed certificate: {0}")]
    Generate(#[from] rcgen::Error),
}

/// The largest chain served, in bytes of DER plus the Certificate
/// message's framing: rustls clients refuse a handshake message over
/// 0xffff bytes (`MAX_HANDSHAKE_SIZE`, rustls/src/msgs/deframer), OpenSSL
/// over 100 KiB (`SSL_MAX_CERT_LIST_DEFAULT`); real chains are a few KiB.
/// The margin leaves room for a stapled OCSP response and SCTs, which go
/// in the same message.
pub const MAX_CHAIN: usize = 0xffff - 8 * 1024;

impl CertError {
    /// Whether the key file, not the certificate, is at fault (the error
    /// then names the `key` setting).
    pub fn is_about_key(&self) -> bool {
        matches!(
            self,
            CertError::ReadKey { .. } | CertError::EncryptedKey { .. }
        )
    }
}

/// The size a chain takes in a TLS 1.3 Certificate message: each entry's
/// 3-byte length and 2-byte extensions length, and the message's header.
pub fn chain_size(chain: &[CertificateDer<'_>]) -> usize {
    8 + chain.iter().map(|c| c.len() + 5).sum::<usize>()
}

/// The warning for each of `names` the leaf `der` (from `path`) does not
/// cover: `config check` and the server say the same (nginx and Caddy
/// also warn and serve: a client that does not check names, or a name
/// being moved to a new certificate, still works).
pub fn uncovered(der: &CertificateDer<'_>, path: &Path, names: &[String]) -> Vec<String> {
    let is_for = match facts(der) {
        Ok(f) => listed(&f.names),
        Err(_) => "(unreadable)".into(),
    };
    names
        .iter()
        .filter(|n| !covers(der, n))
        .map(|n| {
            format!(
                "certificate {} does not cover the name {n} (it is for {is_for}): clients that \
                 check names will refuse the connection; get one that lists {n}, or move the \
                 name to a site whose certificate does",
                path.display()
            )
        })
        .collect()
}

/// A certificate's names for messages: `(no DNS names)` for none.
pub fn listed(names: &[String]) -> String {
    if names.is_empty() {
        "(no DNS names)".into()
    } else {
        names.join(", ")
    }
}

/// A key that does not belong to its certificate (what `CertifiedKey`
/// refuses), as both `config check` and the server say it.
pub fn mismatch(cert: &Path, key: &Path, e: &dyn std::fmt::Display) -> String {
    format!(
        "key {} does not belong to certificate {}: {e} (the key must be the one the first \
         certificate of the chain was issued for)",
        key.display(),
        cert.display()
    )
}

/// A private key: its bytes, or (in the server process of a parent with
/// `keys_in_parent`) a handle on the key the parent keeps and signs with.
pub enum Key {
    Der(PrivateKeyDer<'static>),
    Parent(crate::privsep::ParentKey),
}

impl Key {
    /// The key in a rustls [`CertifiedKey`] with `chain`, checked to be the
    /// one the chain's first certificate was issued for.
    pub fn certify(
        self,
        chain: Vec<CertificateDer<'static>>,
        provider: &rustls::crypto::CryptoProvider,
    ) -> Result<rustls::sign::CertifiedKey, rustls::Error> {
        match self {
            Key::Der(der) => rustls::sign::CertifiedKey::from_der(chain, der, provider),
            Key::Parent(key) => {
                let certified = rustls::sign::CertifiedKey::new(chain, std::sync::Arc::new(key));
                certified.keys_match().map(|()| certified)
            }
        }
    }
}

/// A loaded certificate chain and its key.
pub struct Identity {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: Key,
    pub cert_path: PathBuf,
    /// Made just now (first run).
    pub created: bool,
}

impl Identity {
    /// SHA-256 of the leaf certificate, as colon-separated hex.
    pub fn fingerprint(&self) -> String {
        let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &self.chain[0]);
        d.as_ref()
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect::<Vec<_>>()
            .join(":")
    }
}

/// Load `--cert` and `--key`, or the default identity when neither is given.
pub fn load(cert: Option<&Path>, key: Option<&Path>) -> Result<Identity, CertError> {
    match (cert, key) {
        (Some(c), Some(k)) => load_pem(c, k, false),
        (None, None) => default_identity(),
        _ => Err(CertError::Half),
    }
}

fn load_pem(cert: &Path, key: &Path, created: bool) -> Result<Identity, CertError> {
    let io = |e: std::io::Error| rustls::pki_types::pem::Error::Io(e);
    let chain = read_secret(cert)
        .map_err(io)
        .and_then(|pem| CertificateDer::pem_slice_iter(&pem).collect::<Result<Vec<_>, _>>())
        .map_err(|source| CertError::ReadCert {
            path: cert.into(),
            source,
        })?;
    if chain.is_empty() {
        return Err(CertError::NoCert { path: cert.into() });
    }
    let size = chain_size(&chain);
    if size > MAX_CHAIN {
        return Err(CertError::ChainTooLarge {
            path: cert.into(),
            size,
        });
    }
    let read_err = |source| CertError::ReadKey {
        path: key.into(),
        source,
    };
    // Kept by tlsfront's parent, which signs with it: only its public half
    // comes here.
    match crate::privsep::key(key) {
        Some(Ok(held)) => {
            return Ok(Identity {
                chain,
                key: Key::Parent(held),
                cert_path: cert.into(),
                created,
            })
        }
        Some(Err(e)) => return Err(read_err(io(e))),
        None => {}
    }
    let pem = read_secret(key).map_err(io).map_err(read_err)?;
    if is_encrypted(&pem) {
        return Err(CertError::EncryptedKey { path: key.into() });
    }
    let key = PrivateKeyDer::from_pem_slice(&pem).map_err(read_err)?;
    Ok(Identity {
        chain,
        key: Key::Der(key),
        cert_path: cert.into(),
        created,
    })
}

/// A PKCS#8 `ENCRYPTED PRIVATE KEY` or a traditional PEM key with
/// `Proc-Type: 4,ENCRYPTED` (rustls-pki-types reads neither, and says "no
/// items found" or a base64 error).
fn is_encrypted(pem: &[u8]) -> bool {
    let has = |needle: &[u8]| pem.windows(needle.len()).any(|w| w == needle);
    has(b"-----BEGIN ENCRYPTED PRIVATE KEY-----") || has(b"Proc-Type: 4,ENCRYPTED")
}

/// A certificate or key file's bytes, in a buffer zeroized when dropped.
/// With `user` set, tlsfront's parent reads them as root for the server
/// process (`safe_open::read` asks it), so a key only root may read
/// reloads like any other.
fn read_secret(path: &Path) -> std::io::Result<zeroize::Zeroizing<Vec<u8>>> {
    crate::safe_open::read(path).map(zeroize::Zeroizing::new)
}

/// Where the default identity lives: `$XDG_DATA_HOME/tlsfront` (usually
/// `~/.local/share/tlsfront`).
pub fn data_dir() -> Result<PathBuf, CertError> {
    dirs::data_dir()
        .map(|d| d.join("tlsfront"))
        .ok_or(CertError::NoDataDir)
}

fn default_identity() -> Result<Identity, CertError> {
    let dir = data_dir()?;
    let cert = dir.join("cert.pem");
    let key = dir.join("key.pem");
    // A server process of tlsfront's parent: the parent made them (and
    // reads them for it), whether or not this process may look.
    if crate::privsep::parent().is_some() || (cert.exists() && key.exists()) {
        return load_pem(&cert, &key, false);
    }
    let write_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CertError::Write { path, source }
    };
    let (cert_pem, key_pem) = self_signed()?;
    crate::safe_open::write_new_private(&key, key_pem.as_bytes()).map_err(write_err(&key))?;
    crate::safe_open::write_new_private(&cert, cert_pem.as_bytes()).map_err(write_err(&cert))?;
    load_pem(&cert, &key, true)
}

/// A self-signed ECDSA P-256 certificate for localhost, 127.0.0.1 and ::1.
pub fn self_signed() -> Result<(String, String), rcgen::Error> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
    let mut params = rcgen::CertificateParams::new(vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ])?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "tlsfront self-signed");
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Whether the end-entity certificate `der` is valid for the host name
/// `name` (a site's `*.example.com` is checked as one name under it), as
/// clients check it (webpki).
pub fn covers(der: &CertificateDer<'_>, name: &str) -> bool {
    let probe = match name.strip_prefix("*.") {
        Some(rest) => format!("tlsfront-check.{rest}"),
        None => name.to_string(),
    };
    let Ok(server_name) = rustls::pki_types::ServerName::try_from(probe.as_str()) else {
        return false;
    };
    webpki::EndEntityCert::try_from(der)
        .is_ok_and(|c| c.verify_is_valid_for_subject_name(&server_name).is_ok())
}

/// What `config check` shows of a certificate.
#[derive(Debug, Clone)]
pub struct Facts {
    pub subject: String,
    /// DNS names and IP addresses it is for.
    pub names: Vec<String>,
    pub not_before: std::time::SystemTime,
    pub not_after: std::time::SystemTime,
    /// Its key's algorithm (ECDSA P-256, RSA 2048, …).
    pub key: String,
}

/// Read the facts of the certificate `der`.
pub fn facts(der: &CertificateDer<'_>) -> Result<Facts, String> {
    use x509_parser::extensions::GeneralName;
    use x509_parser::public_key::PublicKey;
    let (_, c) = x509_parser::parse_x509_certificate(der).map_err(|e| e.to_string())?;
    let mut names = Vec::new();
    if let Ok(Some(san)) = c.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                GeneralName::DNSName(d) => names.push(d.to_string()),
                GeneralName::IPAddress(ip) => match ip.len() {
                    4 => names.push(
                        std::net::Ipv4Addr::from(<[u8; 4]>::try_from(*ip).unwrap_or_default())
                            .to_string(),
                    ),
                    16 => names.push(
                        std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*ip).unwrap_or_default())
                            .to_string(),
                    ),
                    _ => {}
                },
                _ => {}
            }
        }
    }
    let time = |t: x509_parser::time::ASN1Time| {
        let secs = t.timestamp();
        if secs >= 0 {
            std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs as u64)
        } else {
            std::time::UNIX_EPOCH
        }
    };
    let key = match c.public_key().parsed() {
        Ok(PublicKey::RSA(k)) => format!("RSA {}", k.key_size()),
        Ok(PublicKey::EC(p)) => format!("ECDSA ({} bits)", p.key_size()),
        Ok(_) => "other".to_string(),
        Err(_) => "unreadable".to_string(),
    };
    Ok(Facts {
        subject: c.subject().to_string(),
        names,
        not_before: time(c.validity().not_before),
        not_after: time(c.validity().not_after),
        key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_signed_round_trips_through_pem_loading() {
        let dir = tempfile::tempdir().unwrap();
        let (c, k) = self_signed().unwrap();
        std::fs::write(dir.path().join("c.pem"), c).unwrap();
        std::fs::write(dir.path().join("k.pem"), k).unwrap();
        let id = load(
            Some(&dir.path().join("c.pem")),
            Some(&dir.path().join("k.pem")),
        )
        .unwrap();
        assert_eq!(id.chain.len(), 1);
        assert_eq!(id.fingerprint().len(), 32 * 3 - 1);
        let Key::Der(key) = id.key else {
            panic!("a key read here, not kept by a parent")
        };
        crate::tls::server_config(id.chain, key, &Default::default()).unwrap();
    }

    #[test]
    fn coverage_and_facts_of_the_self_signed_certificate() {
        let (c, _) = self_signed().unwrap();
        let der = CertificateDer::from_pem_slice(c.as_bytes()).unwrap();
        assert!(covers(&der, "localhost"));
        assert!(!covers(&der, "example.com"));
        assert!(!covers(&der, "*.localhost"));
        let f = facts(&der).unwrap();
        assert!(f.names.contains(&"localhost".to_string()), "{f:?}");
        assert!(f.names.contains(&"::1".to_string()), "{f:?}");
        assert!(f.not_after > std::time::SystemTime::now());
        assert!(f.key.starts_with("ECDSA"), "{f:?}");
    }

    #[test]
    fn an_encrypted_key_is_named_as_such() {
        let dir = tempfile::tempdir().unwrap();
        let (c, _) = self_signed().unwrap();
        let cp = dir.path().join("c.pem");
        let kp = dir.path().join("k.pem");
        std::fs::write(&cp, c).unwrap();
        for body in [
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIFHzBJBgkqhkiG9w0BBQ0wPDAbBgkqhkiG9w0BBQwwDgQI\n-----END ENCRYPTED PRIVATE KEY-----\n",
            "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,0123456789ABCDEF0123456789ABCDEF\n\nMIIEow==\n-----END RSA PRIVATE KEY-----\n",
        ] {
            std::fs::write(&kp, body).unwrap();
            let e = load(Some(&cp), Some(&kp)).err().unwrap();
            assert!(e.is_about_key());
            let e = e.to_string();
            assert!(
                e.contains(&format!(
                    "private key file {}: the key is encrypted: tlsfront needs it unencrypted \
                     (openssl pkey -in {} -out",
                    kp.display(),
                    kp.display()
                )),
                "{e}"
            );
        }
    }

    #[test]
    fn a_chain_too_large_for_clients_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (c, k) = self_signed().unwrap();
        let cp = dir.path().join("c.pem");
        let kp = dir.path().join("k.pem");
        std::fs::write(&kp, k).unwrap();
        // The same certificate over and over: about 1.2 MB of chain.
        std::fs::write(&cp, c.repeat(2000)).unwrap();
        let e = load(Some(&cp), Some(&kp)).err().unwrap().to_string();
        assert!(
            e.contains(&format!("certificate file {}: the chain is ", cp.display()))
                && e.contains("bytes, more than"),
            "{e}"
        );
        // A real chain (leaf, intermediate) is far below the bound.
        std::fs::write(&cp, c.repeat(3)).unwrap();
        assert!(load(Some(&cp), Some(&kp)).is_ok());
    }

    #[test]
    fn coverage_warnings_and_names_without_sans() {
        let (c, _) = self_signed().unwrap();
        let der = CertificateDer::from_pem_slice(c.as_bytes()).unwrap();
        let w = uncovered(
            &der,
            Path::new("/c.pem"),
            &["localhost".into(), "a.test".into()],
        );
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with(
                "certificate /c.pem does not cover the name a.test (it is for localhost"
            ),
            "{w:?}"
        );
        assert_eq!(listed(&[]), "(no DNS names)");
    }

    /// A file that can no longer be read is taken as read before, as long
    /// as it is unchanged.
    #[test]
    fn errors_name_the_file() {
        let e = load(Some(Path::new("/nonexistent/c.pem")), Some(Path::new("/x")))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("/nonexistent/c.pem"), "{e}");
        assert!(matches!(
            load(Some(Path::new("/a")), None),
            Err(CertError::Half)
        ));
    }
}
