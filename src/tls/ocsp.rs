//! OCSP stapling from a file per certificate (nginx's `ssl_stapling_file`,
//! HAProxy's `.ocsp` next to the certificate): a site's `ocsp = "…der"`
//! names a DER OCSP response that something else fetches (a cron job with
//! `openssl ocsp`, certbot, …). It is read when the sites are built (start,
//! SIGHUP reload, and the rebuild when a stapled response expires; see
//! `server::certs`) and, if it passes [`check`], put in the certificate's
//! `CertifiedKey::ocsp`: rustls then staples it for TLS 1.2 clients that
//! send `status_request` and in the TLS 1.3 leaf certificate entry.
//!
//! What [`check`] requires before a response is stapled: response status
//! successful; a BasicOCSPResponse; a SingleResponse whose CertID has the
//! leaf's serial and, for the hash algorithms it knows (SHA-1, SHA-2), the
//! hash of the leaf's issuer name and, when the issuer is in the chain, of
//! its key; certStatus good; thisUpdate ≤ now < nextUpdate. A response that
//! fails is not stapled (a handshake without a staple is what clients get
//! from most servers; a wrong or stale one may make them refuse), and the
//! reason is shown to the operator.
//!
//! The responder's signature is not verified: clients verify it against
//! the issuer themselves (a staple proves nothing they do not check), and
//! the checks above already catch the mistakes an operator can make (a
//! response for another certificate, a stale or revoked one).

use rustls::pki_types::CertificateDer;
use std::path::{Path, PathBuf};
use std::time::SystemTime;
use x509_ocsp::{BasicOcspResponse, CertStatus, OcspResponse, OcspResponseStatus};

/// The OID of a BasicOCSPResponse (`id-pkix-ocsp-basic`).
const BASIC: &str = "1.3.6.1.5.5.7.48.1.1";

/// A response that passed [`check`]: what to staple, and until when.
#[derive(Debug, Clone)]
pub struct Staple {
    pub der: Vec<u8>,
    pub this_update: SystemTime,
    /// `None`: the responder gave no nextUpdate (newer information is
    /// always available, RFC 6960 4.2.2.1); stapled until the file changes.
    pub next_update: Option<SystemTime>,
}

/// Why a response is not stapled.
#[derive(Debug, thiserror::Error)]
pub enum OcspError {
    #[error("cannot read OCSP response {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not a DER OCSP response: {message}", .path.display())]
    Malformed { path: PathBuf, message: String },
    #[error("OCSP response {}: the responder answered {status:?}, not a status", .path.display())]
    NotSuccessful { path: PathBuf, status: String },
    #[error("OCSP response {} is for another certificate: {detail}", .path.display())]
    OtherCertificate { path: PathBuf, detail: String },
    #[error(
        "OCSP response {}: the certificate is REVOKED (since {}): replace the certificate",
        .path.display(),
        httpdate::fmt_http_date(*.since)
    )]
    Revoked { path: PathBuf, since: SystemTime },
    #[error("OCSP response {}: the responder does not know the certificate (status unknown)", .path.display())]
    Unknown { path: PathBuf },
    #[error(
        "OCSP response {} expired on {} (nextUpdate): fetch a new one",
        .path.display(),
        httpdate::fmt_http_date(*.next_update)
    )]
    Expired {
        path: PathBuf,
        next_update: SystemTime,
    },
    #[error(
        "OCSP response {} is not valid before {} (thisUpdate): is the clock right?",
        .path.display(),
        httpdate::fmt_http_date(*.this_update)
    )]
    NotYetValid {
        path: PathBuf,
        this_update: SystemTime,
    },
}

impl OcspError {
    /// When this response becomes valid, if it only is not yet (the sites
    /// are rebuilt then, to staple it).
    pub fn valid_from(&self) -> Option<SystemTime> {
        match self {
            OcspError::NotYetValid { this_update, .. } => Some(*this_update),
            _ => None,
        }
    }
}

/// Read the response in `path` and [`check`] it for `chain`.
pub fn load(
    path: &Path,
    chain: &[CertificateDer<'_>],
    now: SystemTime,
) -> Result<Staple, OcspError> {
    let der = crate::safe_open::read(path).map_err(|source| OcspError::Read {
        path: path.into(),
        source,
    })?;
    check(path, der, chain, now)
}

/// Check `der` (read from `path`, for messages) as a response to staple
/// with `chain` (leaf first) at `now`.
pub fn check(
    path: &Path,
    der: Vec<u8>,
    chain: &[CertificateDer<'_>],
    now: SystemTime,
) -> Result<Staple, OcspError> {
    use der::Decode;
    let malformed = |message: String| OcspError::Malformed {
        path: path.into(),
        message,
    };
    let resp = OcspResponse::from_der(&der).map_err(|e| malformed(e.to_string()))?;
    if resp.response_status != OcspResponseStatus::Successful {
        return Err(OcspError::NotSuccessful {
            path: path.into(),
            status: format!("{:?}", resp.response_status),
        });
    }
    let bytes = resp
        .response_bytes
        .ok_or_else(|| malformed("successful, but no response in it".into()))?;
    if bytes.response_type.to_string() != BASIC {
        return Err(malformed(format!(
            "response type {} is not a BasicOCSPResponse",
            bytes.response_type
        )));
    }
    let basic = BasicOcspResponse::from_der(bytes.response.as_bytes())
        .map_err(|e| malformed(e.to_string()))?;

    fn parse<'a>(
        c: &'a CertificateDer<'_>,
    ) -> Option<x509_parser::certificate::X509Certificate<'a>> {
        x509_parser::parse_x509_certificate(c.as_ref())
            .ok()
            .map(|(_, c)| c)
    }
    let leaf = chain
        .first()
        .and_then(parse)
        .ok_or_else(|| malformed("the certificate it is for cannot be read".into()))?;
    // The issuer, if the chain holds it: the certificate named by the
    // leaf's issuer field.
    let issuer = chain
        .iter()
        .skip(1)
        .filter_map(parse)
        .find(|c| c.subject().as_raw() == leaf.issuer().as_raw());

    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02X}")).collect::<String>();
    let single = basic
        .tbs_response_data
        .responses
        .iter()
        .find(|r| r.cert_id.serial_number.as_bytes() == leaf.raw_serial())
        .ok_or_else(|| {
            let serials: Vec<String> = basic
                .tbs_response_data
                .responses
                .iter()
                .map(|r| hex(r.cert_id.serial_number.as_bytes()))
                .collect();
            OcspError::OtherCertificate {
                path: path.into(),
                detail: format!(
                    "serial {}, the certificate's is {}",
                    serials.join(", "),
                    hex(leaf.raw_serial())
                ),
            }
        })?;
    let id = &single.cert_id;
    if let Some(alg) = digest_of(&id.hash_algorithm.oid.to_string()) {
        let digest = |b: &[u8]| aws_lc_rs::digest::digest(alg, b).as_ref().to_vec();
        if id.issuer_name_hash.as_bytes() != digest(leaf.issuer().as_raw()) {
            return Err(OcspError::OtherCertificate {
                path: path.into(),
                detail: format!(
                    "same serial, but another issuer than the certificate's ({})",
                    leaf.issuer()
                ),
            });
        }
        if let Some(issuer) = &issuer {
            let key = &issuer.public_key().subject_public_key.data;
            if id.issuer_key_hash.as_bytes() != digest(key) {
                return Err(OcspError::OtherCertificate {
                    path: path.into(),
                    detail: format!(
                        "same serial and issuer name, but another issuer key than the one of \
                         {} in the chain",
                        issuer.subject()
                    ),
                });
            }
        }
    }
    match single.cert_status {
        CertStatus::Good(_) => {}
        CertStatus::Revoked(info) => {
            return Err(OcspError::Revoked {
                path: path.into(),
                since: info.revocation_time.0.to_system_time(),
            })
        }
        CertStatus::Unknown(_) => return Err(OcspError::Unknown { path: path.into() }),
    }
    let this_update = single.this_update.0.to_system_time();
    let next_update = single.next_update.map(|t| t.0.to_system_time());
    if this_update > now {
        return Err(OcspError::NotYetValid {
            path: path.into(),
            this_update,
        });
    }
    if let Some(next_update) = next_update.filter(|&t| t <= now) {
        return Err(OcspError::Expired {
            path: path.into(),
            next_update,
        });
    }
    Ok(Staple {
        der,
        this_update,
        next_update,
    })
}

/// The digest a CertID's hashAlgorithm OID names (those RFC 6960 and
/// responders use).
fn digest_of(oid: &str) -> Option<&'static aws_lc_rs::digest::Algorithm> {
    use aws_lc_rs::digest;
    Some(match oid {
        "1.3.14.3.2.26" => &digest::SHA1_FOR_LEGACY_USE_ONLY,
        "2.16.840.1.101.3.4.2.1" => &digest::SHA256,
        "2.16.840.1.101.3.4.2.2" => &digest::SHA384,
        "2.16.840.1.101.3.4.2.3" => &digest::SHA512,
        _ => return None,
    })
}

/// How [`Staple`] reads to an operator: "good, valid until …".
pub fn describe(s: &Staple) -> String {
    match s.next_update {
        Some(t) => format!("good, valid until {}", httpdate::fmt_http_date(t)),
        None => "good, no nextUpdate (stapled until the file is replaced)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_and_unsuccessful_responses_are_refused() {
        let p = Path::new("x.der");
        let e = check(p, b"not der".to_vec(), &[], SystemTime::now()).unwrap_err();
        assert!(matches!(e, OcspError::Malformed { .. }), "{e}");
        // OCSPResponse { responseStatus tryLater (3) }, no responseBytes.
        let try_later = vec![0x30, 0x03, 0x0a, 0x01, 0x03];
        let e = check(p, try_later, &[], SystemTime::now()).unwrap_err();
        assert!(e.to_string().contains("TryLater"), "{e}");
        // Successful but empty.
        let empty = vec![0x30, 0x03, 0x0a, 0x01, 0x00];
        let e = check(p, empty, &[], SystemTime::now()).unwrap_err();
        assert!(e.to_string().contains("no response in it"), "{e}");
    }
}
