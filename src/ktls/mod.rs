//! Kernel TLS (kTLS): what the running kernel can offload, and moving a
//! finished rustls handshake's record keys into the kernel.
//!
//! The flow per connection is: `TCP_ULP "tls"` right after accept
//! ([`sys::set_tls_ulp`]), the handshake in user space with rustls'
//! unbuffered API, then — if [`probe::Support`] says the kernel takes the
//! negotiated (version, cipher) in both directions — `TLS_TX`/`TLS_RX` from
//! rustls' `dangerous_into_kernel_connection()` and a [`stream::KtlsStream`].

pub mod probe;
pub mod stream;

use rustls::{CipherSuite, ConnectionTrafficSecrets, ProtocolVersion, SupportedCipherSuite};
use std::fmt;

use crate::sys;
pub use crate::sys::Direction;
pub use probe::Support;

/// A TLS protocol version kTLS knows about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Version {
    Tls12,
    Tls13,
}

impl Version {
    pub const ALL: [Version; 2] = [Version::Tls12, Version::Tls13];

    pub fn from_rustls(v: ProtocolVersion) -> Option<Self> {
        match v {
            ProtocolVersion::TLSv1_2 => Some(Version::Tls12),
            ProtocolVersion::TLSv1_3 => Some(Version::Tls13),
            _ => None,
        }
    }

    fn kernel(self) -> u16 {
        match self {
            Version::Tls12 => libc::TLS_1_2_VERSION,
            Version::Tls13 => libc::TLS_1_3_VERSION,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Version::Tls12 => "TLS1.2",
            Version::Tls13 => "TLS1.3",
        })
    }
}

/// A record cipher the kernel can carry (the AEADs tlsfront negotiates).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cipher {
    Aes128Gcm,
    Aes256Gcm,
    Chacha20Poly1305,
}

impl Cipher {
    pub const ALL: [Cipher; 3] = [
        Cipher::Aes128Gcm,
        Cipher::Aes256Gcm,
        Cipher::Chacha20Poly1305,
    ];

    /// The record cipher of a negotiated rustls suite, if kTLS knows it.
    pub fn from_suite(suite: CipherSuite) -> Option<Self> {
        use CipherSuite as S;
        match suite {
            S::TLS13_AES_128_GCM_SHA256
            | S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
            | S::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => Some(Cipher::Aes128Gcm),
            S::TLS13_AES_256_GCM_SHA384
            | S::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
            | S::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => Some(Cipher::Aes256Gcm),
            S::TLS13_CHACHA20_POLY1305_SHA256
            | S::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
            | S::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 => Some(Cipher::Chacha20Poly1305),
            _ => None,
        }
    }

    /// Oldest mainline kernel that offloads this cipher (both directions).
    pub fn min_kernel(self) -> &'static str {
        match self {
            Cipher::Aes128Gcm => "5.1",
            Cipher::Aes256Gcm => "5.1",
            Cipher::Chacha20Poly1305 => "5.11",
        }
    }

    /// Kernel crypto modules this cipher needs.
    pub fn modules(self) -> &'static str {
        match self {
            Cipher::Aes128Gcm | Cipher::Aes256Gcm => "gcm aesni_intel",
            Cipher::Chacha20Poly1305 => "chacha20poly1305",
        }
    }
}

impl fmt::Display for Cipher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Cipher::Aes128Gcm => "AES-128-GCM",
            Cipher::Aes256Gcm => "AES-256-GCM",
            Cipher::Chacha20Poly1305 => "CHACHA20-POLY1305",
        })
    }
}

/// Messages a key may protect before it must be replaced (rustls' limit for
/// the suite; `u64::MAX` for ChaCha20-Poly1305).
pub fn confidentiality_limit(suite: SupportedCipherSuite) -> u64 {
    match suite {
        SupportedCipherSuite::Tls12(s) => s.common.confidentiality_limit,
        SupportedCipherSuite::Tls13(s) => s.common.confidentiality_limit,
    }
}

/// Records one key may protect before it is replaced (TLS 1.3 on a kernel
/// that rekeys) or the connection ends: the cipher's confidentiality limit.
/// In debug builds (the tests'), `TLSFRONT_TEST_RECORD_LIMIT` (read once,
/// at least 16) lowers it, so that a download of a few MiB reaches it; a
/// release build never reads it.
pub fn record_limit(suite: SupportedCipherSuite) -> u64 {
    let limit = confidentiality_limit(suite);
    #[cfg(debug_assertions)]
    {
        static TEST_LIMIT: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
        let test = TEST_LIMIT.get_or_init(|| {
            std::env::var("TLSFRONT_TEST_RECORD_LIMIT")
                .ok()?
                .parse()
                .ok()
        });
        if let Some(t) = *test {
            return t.clamp(16, limit);
        }
    }
    limit
}

/// Why a set of secrets could not be expressed for the kernel.
#[derive(Debug, thiserror::Error)]
#[error("rustls negotiated a record cipher that kTLS cannot carry")]
pub struct UnsupportedSecrets;

/// Build the kernel's crypto info for one direction from rustls' secrets.
/// `seq` is the next record sequence number.
pub fn crypto_info(
    version: Version,
    seq: u64,
    secrets: ConnectionTrafficSecrets,
) -> Result<sys::CryptoInfo, UnsupportedSecrets> {
    let (cipher, key, iv) = match &secrets {
        ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (Cipher::Aes128Gcm, key.as_ref(), iv),
        ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (Cipher::Aes256Gcm, key.as_ref(), iv),
        ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
            (Cipher::Chacha20Poly1305, key.as_ref(), iv)
        }
        _ => return Err(UnsupportedSecrets),
    };
    build_info(version, cipher, key, iv.as_ref(), seq)
}

/// rustls gives a 12-byte IV for every AEAD; the kernel wants GCM's as a
/// 4-byte salt (the implicit part) plus an 8-byte IV, and ChaCha20's whole.
fn build_info(
    version: Version,
    cipher: Cipher,
    key: &[u8],
    iv: &[u8],
    seq: u64,
) -> Result<sys::CryptoInfo, UnsupportedSecrets> {
    let info = |cipher_type: u16| libc::tls_crypto_info {
        version: version.kernel(),
        cipher_type,
    };
    let rec_seq = seq.to_be_bytes();
    if iv.len() != 12 {
        return Err(UnsupportedSecrets);
    }
    Ok(match cipher {
        Cipher::Aes128Gcm => {
            let mut c = libc::tls12_crypto_info_aes_gcm_128 {
                info: info(libc::TLS_CIPHER_AES_GCM_128),
                iv: [0; 8],
                key: [0; 16],
                salt: [0; 4],
                rec_seq,
            };
            c.key = key.try_into().map_err(|_| UnsupportedSecrets)?;
            c.salt.copy_from_slice(&iv[..4]);
            c.iv.copy_from_slice(&iv[4..]);
            sys::CryptoInfo::Aes128Gcm(c)
        }
        Cipher::Aes256Gcm => {
            let mut c = libc::tls12_crypto_info_aes_gcm_256 {
                info: info(libc::TLS_CIPHER_AES_GCM_256),
                iv: [0; 8],
                key: [0; 32],
                salt: [0; 4],
                rec_seq,
            };
            c.key = key.try_into().map_err(|_| UnsupportedSecrets)?;
            c.salt.copy_from_slice(&iv[..4]);
            c.iv.copy_from_slice(&iv[4..]);
            sys::CryptoInfo::Aes256Gcm(c)
        }
        Cipher::Chacha20Poly1305 => {
            let mut c = libc::tls12_crypto_info_chacha20_poly1305 {
                info: info(libc::TLS_CIPHER_CHACHA20_POLY1305),
                iv: [0; 12],
                key: [0; 32],
                salt: [],
                rec_seq,
            };
            c.key = key.try_into().map_err(|_| UnsupportedSecrets)?;
            c.iv.copy_from_slice(iv);
            sys::CryptoInfo::Chacha20Poly1305(c)
        }
    })
}

/// A dummy key of the right shape, used by the probe.
pub(crate) fn probe_info(version: Version, cipher: Cipher) -> sys::CryptoInfo {
    let len = match cipher {
        Cipher::Aes128Gcm => 16,
        _ => 32,
    };
    build_info(version, cipher, &[0x42; 32][..len], &[7; 12], 0)
        .expect("probe keys have the kernel's shapes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcm_iv_is_split_into_salt_and_explicit_part() {
        match probe_info(Version::Tls13, Cipher::Aes128Gcm) {
            sys::CryptoInfo::Aes128Gcm(c) => {
                assert_eq!(c.info.version, libc::TLS_1_3_VERSION);
                assert_eq!(c.info.cipher_type, libc::TLS_CIPHER_AES_GCM_128);
                assert_eq!(c.salt, [7; 4]);
                assert_eq!(c.iv, [7; 8]);
                assert_eq!(c.key, [0x42; 16]);
            }
            _ => panic!("wrong shape"),
        }
    }

    #[test]
    fn sequence_number_is_big_endian() {
        let secrets = ConnectionTrafficSecrets::Chacha20Poly1305 {
            key: rustls::crypto::cipher::AeadKey::from([1u8; 32]),
            iv: rustls::crypto::cipher::Iv::new([2u8; 12]),
        };
        match crypto_info(Version::Tls12, 0x0102, secrets).unwrap() {
            sys::CryptoInfo::Chacha20Poly1305(c) => {
                assert_eq!(c.rec_seq, [0, 0, 0, 0, 0, 0, 1, 2]);
                assert_eq!(c.info.version, libc::TLS_1_2_VERSION);
                assert_eq!(c.iv, [2; 12]);
            }
            _ => panic!("wrong shape"),
        }
    }

    #[test]
    fn suites_map_to_kernel_ciphers() {
        assert_eq!(
            Cipher::from_suite(CipherSuite::TLS13_AES_256_GCM_SHA384),
            Some(Cipher::Aes256Gcm)
        );
        assert_eq!(
            Cipher::from_suite(CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256),
            Some(Cipher::Chacha20Poly1305)
        );
        assert_eq!(
            Cipher::from_suite(CipherSuite::TLS13_AES_128_CCM_SHA256),
            None
        );
    }
}
