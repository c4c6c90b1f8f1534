//! Certificates: PEM loading for `--cert`/`--key`, and the self-signed
//! development identity made on first run and kept in the per-user data
//! directory.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("cannot read certificate file {path} (--cert): {source}")]
    ReadCert {
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("certificate file {path} (--cert) has no PEM CERTIFICATE block: give a PEM file with the server certificate first, then its chain")]
    NoCert { path: PathBuf },
    #[error("cannot read private key file {path} (--key): {source} (give a PEM PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY)")]
    ReadKey {
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
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

/// A loaded certificate chain and its key.
pub struct Identity {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
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
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|source| CertError::ReadCert {
            path: cert.into(),
            source,
        })?;
    if chain.is_empty() {
        return Err(CertError::NoCert { path: cert.into() });
    }
    let key = PrivateKeyDer::from_pem_file(key).map_err(|source| CertError::ReadKey {
        path: key.into(),
        source,
    })?;
    Ok(Identity {
        chain,
        key,
        cert_path: cert.into(),
        created,
    })
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
    if cert.exists() && key.exists() {
        return load_pem(&cert, &key, false);
    }
    let write_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CertError::Write { path, source }
    };
    fs::create_dir_all(&dir).map_err(write_err(&dir))?;
    let (cert_pem, key_pem) = self_signed()?;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&key)
        .map_err(write_err(&key))?;
    f.write_all(key_pem.as_bytes()).map_err(write_err(&key))?;
    fs::write(&cert, cert_pem).map_err(write_err(&cert))?;
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
        crate::tls::server_config(id.chain, id.key, &Default::default()).unwrap();
    }

    #[test]
    fn errors_name_the_file_and_the_flag() {
        let e = load(Some(Path::new("/nonexistent/c.pem")), Some(Path::new("/x")))
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("/nonexistent/c.pem") && e.contains("--cert"),
            "{e}"
        );
        assert!(matches!(
            load(Some(Path::new("/a")), None),
            Err(CertError::Half)
        ));
    }
}
