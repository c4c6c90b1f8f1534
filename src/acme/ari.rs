//! ACME Renewal Information (ARI, RFC 9773): when to renew a certificate
//! the CA issued, and which certificate a renewal order replaces.
//!
//! For each issued certificate [`Renewals::due`] asks the CA's
//! `renewalInfo` (when its directory has one) for the window in which it
//! suggests renewing, picks a uniformly random time inside it (RFC 9773
//! section 4.2, so that a CA's many clients do not all come at once) and
//! asks again after the CA's Retry-After, held to a sane range. A CA
//! without ARI, or a failed question before any answer, falls back to
//! [`super::renew_at`] (two thirds into the lifetime), said once per
//! certificate with the reason. An order for names that already have a
//! stored certificate names it in `replaces` ([`replaced`]), which lets the
//! CA mark it replaced (and, at Let's Encrypt, exempts the order from some
//! rate limits).

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use instant_acme::CertificateIdentifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, Der};

use super::{describe, renew_at, AcmeError, AcmeSettings};

/// The least and the most time between two questions about the same
/// certificate, whatever the CA's Retry-After says: a CA asking for a
/// minute would have every certificate polled all day; one asking for a
/// month would not be heard changing its mind (a revocation, an incident).
pub const ASK_AGAIN_MIN: Duration = Duration::from_secs(3600);
pub const ASK_AGAIN_MAX: Duration = Duration::from_secs(86_400);

/// How long one question may take in all (the account's directory, then
/// renewalInfo; each request also has the client's own bound).
const ASK_TIMEOUT: Duration = Duration::from_secs(60);

/// Why the CA's renewal window is not used for a certificate.
#[derive(Debug, thiserror::Error)]
pub enum AriError {
    #[error("the CA's directory has no renewalInfo (it does not offer ACME Renewal Information, RFC 9773)")]
    Unsupported,
    #[error("no certificate is stored for these names in the ACME state directory")]
    NotStored,
    #[error("the stored certificate has no authority key identifier, which its ARI identifier is made of")]
    NoKeyIdentifier,
    #[error("the stored certificate is unreadable: {detail}")]
    Certificate { detail: String },
    #[error("{0}")]
    Acme(#[from] AcmeError),
    /// instant-acme asks renewalInfo through an account.
    #[error("no account with the ACME CA at {url} is stored, which asking its renewalInfo needs (the stored certificate may come from another CA; the next order registers one)")]
    NoAccount { url: String },
    #[error("the CA's renewalInfo for certificate {id} did not answer: {detail}")]
    Request { id: String, detail: String },
    #[error("the CA's renewalInfo did not answer within {} s", ASK_TIMEOUT.as_secs())]
    Timeout,
    #[error(
        "the CA's suggested window for certificate {id} ends ({end}) before it starts ({start})"
    )]
    BadWindow {
        id: String,
        start: String,
        end: String,
    },
    #[error(
        "the CA's suggested window for certificate {id} ends ({end}) after the certificate \
         expires ({not_after}), which would have it renewed too late"
    )]
    PastExpiry {
        id: String,
        end: String,
        not_after: String,
    },
}

impl AriError {
    /// Whether asking again later may give another answer for the same
    /// certificate.
    fn may_change(&self) -> bool {
        !matches!(
            self,
            AriError::Unsupported | AriError::NoKeyIdentifier | AriError::Certificate { .. }
        )
    }
}

/// The ARI identifier of the leaf of `chain_pem` (RFC 9773 section 4.1):
/// its authority key identifier's keyIdentifier and its serial's DER
/// content bytes, each base64url.
pub fn cert_id(chain_pem: &str) -> Result<CertificateIdentifier<'static>, AriError> {
    let bad = |detail: String| AriError::Certificate { detail };
    let leaf = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .next()
        .ok_or_else(|| bad("it holds no PEM CERTIFICATE".into()))?
        .map_err(|e| bad(e.to_string()))?;
    let (_, cert) = x509_parser::parse_x509_certificate(&leaf).map_err(|e| bad(e.to_string()))?;
    let key_id = cert
        .iter_extensions()
        .find_map(|ext| match ext.parsed_extension() {
            x509_parser::extensions::ParsedExtension::AuthorityKeyIdentifier(aki) => {
                aki.key_identifier.as_ref().map(|k| k.0)
            }
            _ => None,
        })
        .ok_or(AriError::NoKeyIdentifier)?;
    Ok(CertificateIdentifier::new(
        Der::from_slice(key_id),
        Der::from_slice(cert.tbs_certificate.raw_serial()),
    )
    .into_owned())
}

/// What an order for `names` replaces: the certificate stored for them,
/// if there is one and it has an ARI identifier (else the order replaces
/// nothing, said at debug level).
pub(super) fn replaced(
    settings: &AcmeSettings,
    names: &[String],
) -> Option<CertificateIdentifier<'static>> {
    let stored = match super::load_stored(settings, names) {
        Ok(Some(stored)) => stored,
        Ok(None) => return None,
        Err(e) => {
            tracing::debug!("the order for {} replaces nothing: {e}", names.join(", "));
            return None;
        }
    };
    cert_id(&stored.chain_pem)
        .map_err(|e| {
            tracing::debug!("the order for {} replaces nothing: {e}", names.join(", "));
        })
        .ok()
}

/// When a certificate is due, as [`Renewals::due`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// Renew then (in the past: now).
    pub at: SystemTime,
    /// Ask the CA again then (the caller wakes up for it); `None`: not
    /// again for this certificate.
    pub ask_again: Option<SystemTime>,
}

/// What was decided for one certificate.
struct Entry {
    /// The certificate's validity: another one is another certificate.
    validity: (SystemTime, SystemTime),
    /// The CA's last suggested window, if it gave one.
    window: Option<(SystemTime, SystemTime)>,
    due: Due,
    /// The fallback to two thirds was logged for this certificate.
    said_fallback: bool,
}

/// The renewal times of the issued certificates, by their names: kept
/// between the calls of the certificate task so that the CA is asked only
/// when its Retry-After says.
#[derive(Default)]
pub struct Renewals {
    certs: HashMap<Vec<String>, Entry>,
}

impl Renewals {
    /// Forget every decision: the next [`Renewals::due`] of each
    /// certificate asks the CA again (after a reload, which an operator may
    /// send for exactly that).
    pub fn ask_again(&mut self) {
        self.certs.clear();
    }

    /// When to renew the certificate issued for `names`, valid from
    /// `not_before` to `not_after`: in the CA's suggested window if it
    /// offers ARI (asked now if due), else two thirds into its lifetime.
    pub async fn due(
        &mut self,
        settings: &AcmeSettings,
        names: &[String],
        not_before: SystemTime,
        not_after: SystemTime,
    ) -> Due {
        let now = SystemTime::now();
        let validity = (not_before, not_after);
        // Two thirds in until the CA is asked, which is at once.
        let fresh = || Entry {
            validity,
            window: None,
            due: Due {
                at: renew_at(not_before, not_after),
                ask_again: Some(UNIX_EPOCH),
            },
            said_fallback: false,
        };
        let entry = self.certs.entry(names.to_vec()).or_insert_with(fresh);
        if entry.validity != validity {
            *entry = fresh();
        }
        if entry.due.ask_again.is_none_or(|t| t > now) {
            return entry.due;
        }
        let listed = names.join(", ");
        let answer = match tokio::time::timeout(ASK_TIMEOUT, ask(settings, names)).await {
            Ok(answer) => answer,
            Err(_) => Err(AriError::Timeout),
        };
        let planned = answer.and_then(|a| {
            let plan = schedule(a.start, a.end, not_after, now, a.retry_after, roll()).map_err(
                |e| match e {
                    WindowError::Inverted => AriError::BadWindow {
                        id: a.id.clone(),
                        start: httpdate::fmt_http_date(a.start),
                        end: httpdate::fmt_http_date(a.end),
                    },
                    WindowError::PastExpiry => AriError::PastExpiry {
                        id: a.id.clone(),
                        end: httpdate::fmt_http_date(a.end),
                        not_after: httpdate::fmt_http_date(not_after),
                    },
                },
            )?;
            Ok((a, plan))
        });
        match planned {
            Ok((a, plan)) => {
                // The same window as last time: keep the time picked in it
                // rather than roll again (which would drift towards its
                // start, one roll per question).
                let at = match entry.window {
                    Some(w) if w == (a.start, a.end) => entry.due.at,
                    _ => plan.at,
                };
                entry.window = Some((a.start, a.end));
                entry.due = Due {
                    at,
                    ask_again: Some(plan.ask_again),
                };
                let when = if at <= now {
                    "renewing now".to_string()
                } else {
                    format!("renewing at {}", httpdate::fmt_http_date(at))
                };
                tracing::info!(
                    "ACME renewal information for {listed} (certificate {}): the CA suggests \
                     renewing between {} and {}{}; {when}; asking again in {} s",
                    a.id,
                    httpdate::fmt_http_date(a.start),
                    httpdate::fmt_http_date(a.end),
                    a.explanation
                        .map(|u| format!(" (explained at {u})"))
                        .unwrap_or_default(),
                    plan.ask_again
                        .duration_since(now)
                        .unwrap_or_default()
                        .as_secs()
                );
            }
            Err(e) => {
                let again = e.may_change().then(|| now + ASK_AGAIN_MIN);
                if entry.window.is_some() {
                    // The last answer stands until the CA gives another.
                    entry.due.ask_again = again;
                    tracing::warn!(
                        "ACME renewal information for {listed}: {e}; keeping the CA's last \
                         window (renewing at {})",
                        httpdate::fmt_http_date(entry.due.at)
                    );
                } else {
                    entry.due = Due {
                        at: renew_at(not_before, not_after),
                        ask_again: again,
                    };
                    if !entry.said_fallback {
                        entry.said_fallback = true;
                        let line = format!(
                            "ACME: renewing {listed} two thirds into its lifetime, at {}: {e}{}",
                            httpdate::fmt_http_date(entry.due.at),
                            match again {
                                Some(t) => format!(
                                    "; asking again in {} s",
                                    t.duration_since(now).unwrap_or_default().as_secs()
                                ),
                                None => String::new(),
                            }
                        );
                        // A CA without ARI is no fault; a failed question is.
                        if matches!(e, AriError::Unsupported) {
                            tracing::info!("{line}");
                        } else {
                            tracing::warn!("{line}");
                        }
                    } else {
                        tracing::debug!("ACME renewal information for {listed}: {e}");
                    }
                }
            }
        }
        entry.due
    }
}

/// The CA's answer about one certificate.
struct Answer {
    /// The certificate's ARI identifier, for the log.
    id: String,
    start: SystemTime,
    end: SystemTime,
    retry_after: Duration,
    explanation: Option<String>,
}

/// Ask the CA's renewalInfo about the certificate stored for `names`.
async fn ask(settings: &AcmeSettings, names: &[String]) -> Result<Answer, AriError> {
    let stored = super::load_stored(settings, names)?.ok_or(AriError::NotStored)?;
    let id = cert_id(&stored.chain_pem)?;
    let http = super::client::AcmeHttp::new(settings.extra_roots.as_deref())?;
    let (account, _) = super::account(settings, false, http)
        .await
        .map_err(|e| match e {
            AcmeError::NoAccount { url, .. } => AriError::NoAccount { url },
            e => AriError::Acme(e),
        })?;
    let (info, retry_after) = account.renewal_info(&id).await.map_err(|e| match e {
        instant_acme::Error::Unsupported(_) => AriError::Unsupported,
        e => AriError::Request {
            id: id.to_string(),
            detail: describe(&e),
        },
    })?;
    Ok(Answer {
        id: id.to_string(),
        start: from_unix_nanos(info.suggested_window.start.unix_timestamp_nanos()),
        end: from_unix_nanos(info.suggested_window.end.unix_timestamp_nanos()),
        retry_after,
        explanation: info.explanation_url,
    })
}

fn from_unix_nanos(nanos: i128) -> SystemTime {
    let magnitude = Duration::new(
        u64::try_from(nanos.unsigned_abs() / 1_000_000_000).unwrap_or(u64::MAX),
        (nanos.unsigned_abs() % 1_000_000_000) as u32,
    );
    if nanos >= 0 {
        UNIX_EPOCH.checked_add(magnitude).unwrap_or(UNIX_EPOCH)
    } else {
        UNIX_EPOCH.checked_sub(magnitude).unwrap_or(UNIX_EPOCH)
    }
}

/// A uniformly random 64-bit number (the system's generator, through
/// aws-lc-rs); 0 if it fails, which only makes the pick the window's start.
fn roll() -> u64 {
    let mut bytes = [0u8; 8];
    match aws_lc_rs::rand::fill(&mut bytes) {
        Ok(()) => u64::from_le_bytes(bytes),
        Err(_) => 0,
    }
}

/// When to renew and when to ask again, decided from one answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Plan {
    at: SystemTime,
    ask_again: SystemTime,
}

/// Why a suggested window is not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WindowError {
    /// It ends before it starts.
    Inverted,
    /// It ends after the certificate expires: a broken answer, which must
    /// not leave a site serving an expired certificate.
    PastExpiry,
}

/// RFC 9773 section 4.3.3: the time `roll` (uniform over u64) picks in
/// the window `start..=end` (renew then, or now if that has passed, as it
/// has for a window wholly in the past), and the next question after
/// `retry_after` held to [`ASK_AGAIN_MIN`]..=[`ASK_AGAIN_MAX`]. A window
/// ending before it starts, or after the certificate's `not_after`, is
/// not used.
fn schedule(
    start: SystemTime,
    end: SystemTime,
    not_after: SystemTime,
    now: SystemTime,
    retry_after: Duration,
    roll: u64,
) -> Result<Plan, WindowError> {
    let span = end
        .duration_since(start)
        .map_err(|_| WindowError::Inverted)?;
    if end > not_after {
        return Err(WindowError::PastExpiry);
    }
    // roll / 2^64 of the span, in nanoseconds: a span is below 2^94 ns,
    // so each half of the roll times it fits in a u128.
    let nanos = span.as_nanos();
    let offset = (nanos * u128::from(roll >> 32) + ((nanos * u128::from(roll as u32)) >> 32)) >> 32;
    let offset = Duration::new(
        u64::try_from(offset / 1_000_000_000).unwrap_or(u64::MAX),
        (offset % 1_000_000_000) as u32,
    );
    let at = start.checked_add(offset).unwrap_or(end).min(end).max(now);
    let ask_again = now + retry_after.clamp(ASK_AGAIN_MIN, ASK_AGAIN_MAX);
    Ok(Plan { at, ask_again })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);
    /// A certificate that outlives every window of these tests.
    fn outlives_all() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(u64::MAX / 2)
    }

    fn t(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn the_roll_picks_uniformly_inside_the_window() {
        let (start, end) = (t(10 * 86_400), t(12 * 86_400));
        let now = t(86_400);
        let at = |roll| {
            schedule(start, end, outlives_all(), now, DAY, roll)
                .unwrap()
                .at
        };
        assert_eq!(at(0), start);
        assert_eq!(at(u64::MAX / 2 + 1), t(11 * 86_400));
        assert_eq!(at(u64::MAX / 4 + 1), t(10 * 86_400 + 43_200));
        // The top of the range is just short of the end, never past it.
        assert!(at(u64::MAX) < end && at(u64::MAX) > end - Duration::from_micros(1));
        // Real rolls: inside, and not all the same.
        let picks: Vec<SystemTime> = (0..64).map(|_| at(roll())).collect();
        assert!(picks.iter().all(|p| (start..=end).contains(p)));
        assert!(picks.iter().any(|p| *p != picks[0]));
    }

    #[test]
    fn a_window_in_the_past_means_now() {
        let now = t(100 * 86_400);
        // Wholly past: now, whatever the roll.
        for roll in [0, u64::MAX / 3, u64::MAX] {
            let plan = schedule(
                t(50 * 86_400),
                t(51 * 86_400),
                outlives_all(),
                now,
                DAY,
                roll,
            )
            .unwrap();
            assert_eq!(plan.at, now);
        }
        // Begun: a pick before now is now, one after it stays.
        let (start, end) = (now - DAY, now + DAY);
        assert_eq!(
            schedule(start, end, outlives_all(), now, DAY, 0)
                .unwrap()
                .at,
            now
        );
        assert_eq!(
            schedule(start, end, outlives_all(), now, DAY, (u64::MAX / 4 + 1) * 3)
                .unwrap()
                .at,
            now + DAY / 2
        );
        // An empty window is its one instant; an inverted one is refused.
        assert_eq!(
            schedule(now + DAY, now + DAY, outlives_all(), now, DAY, 12345)
                .unwrap()
                .at,
            now + DAY
        );
        assert_eq!(
            schedule(now + DAY, now, outlives_all(), now, DAY, 0),
            Err(WindowError::Inverted)
        );
        // One that ends after the certificate does is not used either; one
        // ending as it does is.
        let not_after = now + 2 * DAY;
        assert_eq!(
            schedule(
                now + DAY,
                not_after + Duration::from_secs(1),
                not_after,
                now,
                DAY,
                0
            ),
            Err(WindowError::PastExpiry)
        );
        assert_eq!(
            schedule(now + DAY, not_after, not_after, now, DAY, 0).map(|p| p.at),
            Ok(now + DAY)
        );
    }

    #[test]
    fn retry_after_is_held_to_an_hour_to_a_day() {
        let now = t(1_000_000);
        let again = |retry| {
            schedule(now + DAY, now + 2 * DAY, outlives_all(), now, retry, 0)
                .unwrap()
                .ask_again
        };
        assert_eq!(again(Duration::ZERO), now + ASK_AGAIN_MIN);
        assert_eq!(again(Duration::from_secs(60)), now + ASK_AGAIN_MIN);
        assert_eq!(
            again(Duration::from_secs(6 * 3600)),
            now + Duration::from_secs(6 * 3600)
        );
        assert_eq!(again(30 * DAY), now + ASK_AGAIN_MAX);
        assert_eq!(ASK_AGAIN_MIN, Duration::from_secs(3600));
        assert_eq!(ASK_AGAIN_MAX, DAY);
    }

    #[test]
    fn absurd_windows_do_not_panic() {
        let far = UNIX_EPOCH + Duration::from_secs(u64::MAX / 4);
        let plan = schedule(
            UNIX_EPOCH,
            far,
            outlives_all(),
            t(0),
            Duration::MAX,
            u64::MAX,
        )
        .unwrap();
        assert!(plan.at <= far);
        assert_eq!(
            from_unix_nanos(-1_500_000_000),
            UNIX_EPOCH - Duration::from_millis(1500)
        );
        assert_eq!(
            from_unix_nanos(1_500_000_000),
            t(1) + Duration::from_millis(500)
        );
        let _ = from_unix_nanos(i128::MAX);
        let _ = from_unix_nanos(i128::MIN);
    }

    /// A CA that cannot be asked (nothing listens at its directory): two
    /// thirds into the lifetime, asked again in an hour, the same answer
    /// until then without asking; another certificate, or a reload, is
    /// asked about afresh.
    #[tokio::test]
    async fn without_an_answer_it_is_two_thirds_and_asked_again_in_an_hour() {
        let dir = tempfile::tempdir().unwrap();
        let names = vec!["a.example.com".to_string()];
        let settings = AcmeSettings {
            directory: "https://127.0.0.1:1/dir".into(),
            ..AcmeSettings::new(dir.path())
        };
        super::super::tests::store_issued_with_aki(&settings, &names);
        let (nb, na) = (t(1_000_000), t(1_000_000) + 90 * DAY);
        let mut renewals = Renewals::default();
        let asked_at = SystemTime::now();
        let due = renewals.due(&settings, &names, nb, na).await;
        assert_eq!(due.at, renew_at(nb, na));
        let again = due.ask_again.expect("asked again later");
        assert!(
            again >= asked_at + ASK_AGAIN_MIN && again <= SystemTime::now() + ASK_AGAIN_MIN,
            "{due:?}"
        );
        // Not asked again before then: the very same answer.
        assert_eq!(renewals.due(&settings, &names, nb, na).await, due);
        // Another certificate for the names: asked about now.
        let (nb2, na2) = (nb + DAY, na + DAY);
        let due2 = renewals.due(&settings, &names, nb2, na2).await;
        assert_eq!(due2.at, renew_at(nb2, na2));
        assert!(due2.ask_again.unwrap() > again, "{due2:?}");
        // Forgotten (a reload): asked again now.
        renewals.ask_again();
        let due3 = renewals.due(&settings, &names, nb2, na2).await;
        assert!(
            due3.ask_again.unwrap() >= due2.ask_again.unwrap(),
            "{due3:?}"
        );
    }

    /// RFC 9773 section 4.1's example: keyIdentifier
    /// 69:88:5B:6B:87:46:40:41:E1:B3:7B:84:7B:A0:AE:2C:DE:01:C8:D4 and
    /// serial 00:87:65:43:21 are "aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE".
    #[test]
    fn the_identifier_is_the_rfc_one() {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyIdMethod, KeyPair,
            SerialNumber,
        };
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_identifier_method = KeyIdMethod::PreSpecified(vec![
            0x69, 0x88, 0x5B, 0x6B, 0x87, 0x46, 0x40, 0x41, 0xE1, 0xB3, 0x7B, 0x84, 0x7B, 0xA0,
            0xAE, 0x2C, 0xDE, 0x01, 0xC8, 0xD4,
        ]);
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
        let mut leaf = CertificateParams::new(vec!["a.example.com".to_string()]).unwrap();
        leaf.serial_number = Some(SerialNumber::from_slice(&[0x00, 0x87, 0x65, 0x43, 0x21]));
        leaf.use_authority_key_identifier_extension = true;
        let cert = leaf.signed_by(&KeyPair::generate().unwrap(), &ca).unwrap();
        let id = cert_id(&cert.pem()).unwrap();
        assert_eq!(id.to_string(), "aYhba4dGQEHhs3uEe6CuLN4ByNQ.AIdlQyE");

        // Without the extension there is no identifier, said so.
        let mut bare = CertificateParams::new(vec!["a.example.com".to_string()]).unwrap();
        bare.use_authority_key_identifier_extension = false;
        let cert = bare.signed_by(&KeyPair::generate().unwrap(), &ca).unwrap();
        assert!(matches!(
            cert_id(&cert.pem()),
            Err(AriError::NoKeyIdentifier)
        ));
        assert!(matches!(
            cert_id("not PEM"),
            Err(AriError::Certificate { .. })
        ));
    }
}
