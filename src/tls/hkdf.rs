//! The TLS 1.3 key schedule's HKDF: rustls' own HKDF-over-HMAC
//! (`HkdfUsingHmac`) on aws-lc-rs HMAC keys.
//!
//! Why not the aws-lc-rs provider's HKDF as rustls ships it: that one calls
//! aws-lc's `HKDF_expand` with the raw secret for every label, so each of
//! the ~25 expansions of a handshake keys HMAC afresh (two SHA-256 blocks
//! for the padded key) and copies the label into a fresh `Vec`. Here the
//! key is set up once per secret (`hmac::Key` keeps the padded-key state),
//! and every expansion starts from a copy of that state. Same primitives,
//! same results (the test below compares them); only the rekeying goes.

use aws_lc_rs::hmac;
use rustls::crypto::hmac::{Hmac, Key, Tag};
use rustls::crypto::tls13::HkdfUsingHmac;
use rustls::crypto::CryptoProvider;
use rustls::{CipherSuiteCommon, SupportedCipherSuite, Tls13CipherSuite};
use std::sync::OnceLock;

struct AwsLcHmac(hmac::Algorithm);

struct AwsLcHmacKey(hmac::Key);

impl Hmac for AwsLcHmac {
    fn with_key(&self, key: &[u8]) -> Box<dyn Key> {
        Box::new(AwsLcHmacKey(hmac::Key::new(self.0, key)))
    }

    fn hash_output_len(&self) -> usize {
        self.0.digest_algorithm().output_len()
    }
}

impl Key for AwsLcHmacKey {
    fn sign_concat(&self, first: &[u8], middle: &[&[u8]], last: &[u8]) -> Tag {
        let mut cx = hmac::Context::with_key(&self.0);
        cx.update(first);
        for m in middle {
            cx.update(m);
        }
        cx.update(last);
        Tag::new(cx.sign().as_ref())
    }

    fn tag_len(&self) -> usize {
        self.0.algorithm().digest_algorithm().output_len()
    }
}

static HMAC_SHA256: AwsLcHmac = AwsLcHmac(hmac::HMAC_SHA256);
static HMAC_SHA384: AwsLcHmac = AwsLcHmac(hmac::HMAC_SHA384);
static HKDF_SHA256: HkdfUsingHmac<'static> = HkdfUsingHmac(&HMAC_SHA256);
static HKDF_SHA384: HkdfUsingHmac<'static> = HkdfUsingHmac(&HMAC_SHA384);

/// `suite` with its HKDF replaced, for TLS 1.3 suites hashing with SHA-256
/// or SHA-384 (every TLS 1.3 suite there is); anything else unchanged.
fn with_keyed_hkdf(suite: SupportedCipherSuite) -> SupportedCipherSuite {
    let SupportedCipherSuite::Tls13(s) = suite else {
        return suite;
    };
    let hkdf: &'static HkdfUsingHmac<'static> = match s.common.hash_provider.output_len() {
        32 => &HKDF_SHA256,
        48 => &HKDF_SHA384,
        _ => return suite,
    };
    // Leaked: made once per suite per process (see `keyed_hkdf`).
    SupportedCipherSuite::Tls13(Box::leak(Box::new(Tls13CipherSuite {
        common: CipherSuiteCommon {
            suite: s.common.suite,
            hash_provider: s.common.hash_provider,
            confidentiality_limit: s.common.confidentiality_limit,
        },
        hkdf_provider: hkdf,
        aead_alg: s.aead_alg,
        quic: s.quic,
    })))
}

/// `base` (aws-lc-rs suites) with every TLS 1.3 suite on the keyed HKDF.
pub fn keyed_hkdf(base: CryptoProvider) -> CryptoProvider {
    // Built once: rustls wants `&'static` suites, and `provider()` is
    // called more than once (the server, `config check`, tests).
    static KEYED: OnceLock<Vec<SupportedCipherSuite>> = OnceLock::new();
    let keyed = KEYED.get_or_init(|| {
        rustls::crypto::aws_lc_rs::ALL_CIPHER_SUITES
            .iter()
            .copied()
            .map(with_keyed_hkdf)
            .collect()
    });
    CryptoProvider {
        cipher_suites: base
            .cipher_suites
            .iter()
            .map(|s| {
                keyed
                    .iter()
                    .find(|k| k.suite() == s.suite())
                    .copied()
                    .unwrap_or(*s)
            })
            .collect(),
        ..base
    }
}

/// The aws-lc-rs default, for comparison in tests.
#[cfg(test)]
fn stock(suite: rustls::CipherSuite) -> &'static Tls13CipherSuite {
    rustls::crypto::aws_lc_rs::default_provider()
        .cipher_suites
        .into_iter()
        .find_map(|s| match s {
            SupportedCipherSuite::Tls13(t) if t.common.suite == suite => Some(t),
            _ => None,
        })
        .unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::crypto::tls13::OkmBlock;
    use rustls::CipherSuite;

    /// Every HKDF operation rustls uses gives the stock provider's bytes,
    /// for both hashes, including multi-block expansions.
    #[test]
    fn same_bytes_as_the_stock_hkdf() {
        for suite in [
            CipherSuite::TLS13_AES_128_GCM_SHA256,
            CipherSuite::TLS13_AES_256_GCM_SHA384,
            CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
        ] {
            let old = stock(suite).hkdf_provider;
            let SupportedCipherSuite::Tls13(new) =
                with_keyed_hkdf(SupportedCipherSuite::Tls13(stock(suite)))
            else {
                unreachable!()
            };
            let new = new.hkdf_provider;
            let secret = [7u8; 48];
            let info: [&[u8]; 3] = [
                b"\x00\x20",
                b"tls13 c hs traffic",
                b"\x20abcdefghijklmnopqrstuvwxyz012345",
            ];
            for salt in [None, Some(&b"some salt"[..])] {
                let (a, b) = (
                    old.extract_from_secret(salt, &secret),
                    new.extract_from_secret(salt, &secret),
                );
                assert_eq!(
                    a.expand_block(&info).as_ref(),
                    b.expand_block(&info).as_ref()
                );
                for len in [12, 16, 32, 100] {
                    let (mut x, mut y) = (vec![0u8; len], vec![0u8; len]);
                    a.expand_slice(&info, &mut x).unwrap();
                    b.expand_slice(&info, &mut y).unwrap();
                    assert_eq!(x, y, "{suite:?} expand {len}");
                }
                let (a, b) = (
                    old.extract_from_zero_ikm(salt),
                    new.extract_from_zero_ikm(salt),
                );
                assert_eq!(
                    a.expand_block(&info).as_ref(),
                    b.expand_block(&info).as_ref()
                );
            }
            let okm = OkmBlock::new(&secret[..old.extract_from_zero_ikm(None).hash_len()]);
            assert_eq!(
                old.expander_for_okm(&okm).expand_block(&info).as_ref(),
                new.expander_for_okm(&okm).expand_block(&info).as_ref()
            );
            assert_eq!(
                old.hmac_sign(&okm, b"finished").as_ref(),
                new.hmac_sign(&okm, b"finished").as_ref()
            );
        }
    }

    /// Every TLS 1.3 suite of tlsfront's provider runs on this HKDF, and
    /// building the provider again reuses the same suites (nothing leaks).
    #[test]
    fn the_provider_uses_it_once() {
        let (a, b) = (crate::tls::provider(), crate::tls::provider());
        let mut tls13 = 0;
        for (x, y) in a.cipher_suites.iter().zip(&b.cipher_suites) {
            if let (SupportedCipherSuite::Tls13(x), SupportedCipherSuite::Tls13(y)) = (x, y) {
                tls13 += 1;
                assert!(std::ptr::eq(*x, *y), "{:?} built twice", x.common.suite);
                let h = x.hkdf_provider as *const dyn rustls::crypto::tls13::Hkdf as *const u8;
                assert!(
                    std::ptr::eq(h, &HKDF_SHA256 as *const _ as *const u8)
                        || std::ptr::eq(h, &HKDF_SHA384 as *const _ as *const u8),
                    "{:?} is on another HKDF",
                    x.common.suite
                );
            }
        }
        assert_eq!(tls13, 3);
    }
}
