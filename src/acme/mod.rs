//! ACME (RFC 8555) certificates: the account, orders answered with
//! TLS-ALPN-01 (RFC 8737), issuance, storage on disk, renewal timing and
//! revocation. The protocol itself is instant-acme's; this module owns the
//! policy around it: where things live in `state_dir`, which challenge is
//! answered and how, and what an operator is told when something fails.
//! When to renew, from the CA's renewal information (RFC 9773) when it has
//! some, is `ari`'s.
//!
//! It runs on any tokio runtime, the workers' current-thread ones included:
//! the HTTP client (`client`) spawns its connection tasks onto the runtime
//! that awaits [`obtain`], and the challenge listener only reads
//! [`Challenges`], which needs no runtime at all.
//!
//! On disk, under `state_dir`:
//! - `account-<hash of the directory URL>.json` (0600): the account key and
//!   URL, one per CA, so switching from a staging CA to production does not
//!   lose either account;
//! - `certs/<first name>/fullchain.pem` and `key.pem` (0600): the last
//!   certificate issued for that name list. Each file is replaced whole
//!   (temporary file, fsync, rename), the key first; [`load_stored`] checks
//!   that the two still belong together, so a crash between the renames
//!   reads as "nothing stored" and is repaired by the next issuance.

mod ari;
pub(crate) mod challenge;
mod client;
pub mod dns01;

pub use ari::{cert_id, AriError, Due, Renewals, ASK_AGAIN_MAX, ASK_AGAIN_MIN};
pub use challenge::{is_challenge_hello, ChallengeKind, Challenges, ACME_TLS_ALPN, HTTP01_PREFIX};

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use instant_acme::{
    Account, AccountCredentials, AuthorizationStatus, ChallengeStatus, ChallengeType, Identifier,
    NewAccount, NewOrder, OrderStatus, Problem, RetryPolicy, RevocationRequest,
};
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair, PublicKeyData};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

/// Let's Encrypt's production directory.
pub const LETS_ENCRYPT_PRODUCTION: &str = "https://acme-v02.api.letsencrypt.org/directory";

/// Where the CA is and where our account and certificates live.
#[derive(Clone, Debug)]
pub struct AcmeSettings {
    /// The CA's ACME directory URL.
    pub directory: String,
    /// Contact URIs for the account ("mailto:..."); may be empty.
    pub contact: Vec<String>,
    /// The account and the certificates live here (created 0700).
    pub state_dir: PathBuf,
    /// A PEM file of extra CA roots to trust for the directory's HTTPS (a
    /// private or test CA, e.g. pebble's); webpki-roots are always trusted.
    pub extra_roots: Option<PathBuf>,
    /// Where DNS-01 answers go (`acme_dns_server` and its TSIG key); `None`:
    /// DNS-01 is not answered.
    pub dns: Option<dns01::DnsUpdate>,
    /// The certificate profile to order (`acme_profile`), which the CA's
    /// directory must list; `None`: the CA's default.
    pub profile: Option<String>,
}

impl AcmeSettings {
    /// Let's Encrypt production, no contact, state in `state_dir`.
    pub fn new(state_dir: impl Into<PathBuf>) -> AcmeSettings {
        AcmeSettings {
            directory: LETS_ENCRYPT_PRODUCTION.to_string(),
            contact: Vec::new(),
            state_dir: state_dir.into(),
            extra_roots: None,
            dns: None,
            profile: None,
        }
    }

    /// These settings, ordering `profile` (a site's own `acme_profile`, or
    /// the top level's) rather than `self.profile`.
    pub fn with_profile(&self, profile: Option<&str>) -> AcmeSettings {
        AcmeSettings {
            profile: profile.map(str::to_string),
            ..self.clone()
        }
    }
}

/// The future a [`Publish`] method gives.
pub type PublishFuture<'a> = std::pin::Pin<
    Box<
        dyn std::future::Future<Output = Result<(), Box<dyn std::error::Error + Send + Sync>>>
            + Send
            + 'a,
    >,
>;

/// Where an order's challenge answers go besides this process's own
/// listeners, before the CA is asked to validate (the fleet's etcd, so
/// that whichever node the CA reaches answers). A failure to publish
/// fails the order before the CA validates anything.
pub trait Publish: Sync {
    /// TLS-ALPN-01 for `name`: the SHA-256 of the key authorization.
    fn tls_alpn_01<'a>(&'a self, name: &'a str, digest: &'a [u8]) -> PublishFuture<'a>;
    /// HTTP-01: the key authorization for `token`.
    fn http_01<'a>(&'a self, token: &'a str, key_authorization: &'a str) -> PublishFuture<'a>;
    /// The order is over: take every answer down.
    fn withdraw(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>>;
}

/// An order to go on with rather than placing a new one (see [`Track`]).
pub struct Resume {
    /// The order's URL at the CA.
    pub url: String,
    /// The certificate key made for it before it was finalized, PKCS#8
    /// PEM, if it got that far.
    pub key_pem: Option<String>,
}

/// Where an order's progress is kept besides this process (the fleet's
/// etcd), so that another process finishes the same order should this one
/// die: the order placed, then the certificate key before it is finalized.
/// A failure to keep either stops the order before the CA does more.
pub trait Track: Sync {
    /// The order to go on with, if one was kept.
    fn resume(&self) -> Option<Resume>;
    /// What the CA says of the order [`Track::resume`] gave: its status
    /// ("pending", "ready", "processing", "valid", "invalid"), or `None`
    /// when it does not know it; `resumed` false when it cannot be
    /// finished (a new order is placed then, so forget this one).
    fn found<'a>(&'a self, status: Option<&'a str>, resumed: bool) -> PublishFuture<'a>;
    /// A new order was placed at `url`.
    fn placed<'a>(&'a self, url: &'a str) -> PublishFuture<'a>;
    /// The certificate key for the order at `url`, made before it is
    /// finalized with it.
    fn keyed<'a>(&'a self, url: &'a str, key_pem: &'a str) -> PublishFuture<'a>;
}

/// A certificate chain and its key, as issued (or stored).
#[derive(Clone, PartialEq, Eq)]
pub struct Issued {
    /// Leaf first, then the intermediates, PEM.
    pub chain_pem: String,
    /// The leaf's private key, PKCS#8 PEM.
    pub key_pem: String,
    /// The leaf's validity.
    pub not_before: SystemTime,
    pub not_after: SystemTime,
}

// By hand: a derived Debug would print the private key into logs.
impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued")
            .field("chain_pem", &format_args!("{} bytes", self.chain_pem.len()))
            .field("key_pem", &"<redacted>")
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .finish()
    }
}

/// What went wrong, for an operator: what failed, with what, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum AcmeError {
    #[error("no names to obtain a certificate for: give at least one DNS name")]
    NoNames,
    #[error("the certificate for {names} from the fleet is not used: {why}")]
    Adopt { names: String, why: String },
    #[error("the answer for {name} could not be shared with the fleet, so the CA was not asked to validate: {detail}")]
    Publish { name: String, detail: String },
    #[error(
        "the order for {names} could not {step} in the fleet, so it went no further: {detail}"
    )]
    Track {
        names: String,
        step: &'static str,
        detail: String,
    },
    #[error("the fleet's ACME account for {url}: {detail}")]
    FleetAccount { url: String, detail: String },
    #[error("{name:?} cannot be in an ACME certificate: {reason}")]
    BadName { name: String, reason: &'static str },
    #[error("could not {action} {}: {source}; check that the ACME state directory is writable by this user", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the extra ACME roots file {}: {detail}; give a PEM file of CA certificates", path.display())]
    Roots { path: PathBuf, detail: String },
    #[error("could not build the TLS configuration: {detail}")]
    Tls { detail: String },
    #[error("could not read the ACME directory {url}: {detail}; check the URL, that this host reaches it, and (for a private CA) extra_roots")]
    Directory { url: String, detail: String },
    #[error("the ACME CA at {url} did not create an account: {detail}; check the contact addresses and the CA's terms")]
    Account { url: String, detail: String },
    #[error("the stored ACME account {} is unusable: {detail}; move it away and a new account is registered", path.display())]
    AccountFile { path: PathBuf, detail: String },
    #[error("no ACME account for {url} in {}: only the account that obtained a certificate can revoke it", path.display())]
    NoAccount { url: String, path: PathBuf },
    #[error("the ACME CA at {url} refused an order for {names}: {detail}")]
    Order {
        url: String,
        names: String,
        detail: String,
    },
    #[error("the ACME CA offers no challenge for {name} that this server can answer (it offers: {offered}; {wanted})")]
    NoChallenge {
        name: String,
        offered: String,
        wanted: &'static str,
    },
    #[error("acme_profile = {profile:?}: the ACME CA at {url} {offered}; set acme_profile to one of its profiles, or remove it for the CA's default")]
    Profile {
        profile: String,
        url: String,
        /// "offers the profiles …", or "lists no profiles in its directory".
        offered: String,
    },
    #[error("the ACME CA could not validate {name} with TLS-ALPN-01: {detail}; check that {name} resolves to this server, that its port 443 reaches this listener, and that nothing in front of it terminates TLS")]
    Challenge { name: String, detail: String },
    #[error("the ACME CA could not validate {name} with HTTP-01: {detail}; check that {name} resolves to this server and that its port 80 reaches the http_listen listener (a redirect or proxy in front of it must pass /.well-known/acme-challenge/ on)")]
    HttpChallenge { name: String, detail: String },
    #[error("the ACME CA could not validate {name} with DNS-01: {detail}; check that the servers the CA asks for _acme-challenge.{} (the zone's NS records) serve what acme_dns_server was given (secondaries must be notified)", name.trim_start_matches("*."))]
    DnsChallenge { name: String, detail: String },
    #[error("DNS-01 for {name}: {source}")]
    Dns {
        name: String,
        // Boxed: every AcmeError stays small.
        #[source]
        source: Box<dns01::DnsError>,
    },
    #[error("the ACME CA at {url} rejected the replay nonce of a request while {step} (badNonce, RFC 8555 section 6.5: each request carries a one-time nonce from the CA, and it refused {MAX_NONCES} nonces in a row, each retry with a fresh one): this is not a failed validation and says nothing about the names or this server; it is tried again at the next attempt")]
    BadNonce { url: String, step: String },
    #[error("the ACME CA did not issue the certificate for {names}: {detail}")]
    Issue { names: String, detail: String },
    #[error("could not make {what}: {detail}")]
    Key { what: String, detail: String },
    #[error("{what} is unusable: {detail}")]
    BadCertificate { what: String, detail: String },
    #[error("the ACME CA at {url} did not revoke the certificate with serial {serial}: {detail}")]
    Revoke {
        url: String,
        serial: String,
        detail: String,
    },
    #[error(
        "{what} took longer than {secs} s at {url}; the CA is slow or unreachable: try again later"
    )]
    Timeout {
        what: String,
        url: String,
        secs: u64,
    },
}

/// The longest `obtain` may take as a whole: every step has its own bound
/// too (requests 30 s, validation and issuance polls 90 s each), this
/// catches whatever those do not, such as a body that never ends.
const OBTAIN_TIMEOUT: Duration = Duration::from_secs(300);
/// How long to wait for the CA to validate, and then to issue.
const POLL_TIMEOUT: Duration = Duration::from_secs(90);

fn poll_policy() -> RetryPolicy {
    // Validation is usually done in well under a second; start polling soon
    // and back off gently so a slow CA is not hammered.
    RetryPolicy::new()
        .initial_delay(Duration::from_millis(250))
        .backoff(1.5)
        .timeout(POLL_TIMEOUT)
}

/// How many calls into instant-acme one step makes while the CA rejects
/// its request's nonce (`badNonce`, RFC 8555 section 6.5). Each call
/// already sends the request with up to [`NONCES_PER_CALL`] nonces, each
/// after the first the fresh one the CA's rejection carried; a call made
/// again starts from the nonce the last rejection carried (instant-acme
/// keeps it with the order) or from a new one (newNonce). A CA may reject a
/// good nonce now and then (an expired one, another backend's); one that
/// rejects them all fails the step after [`MAX_NONCES`] requests, and the
/// caller's back-off takes over: bounded, never a spin.
const BAD_NONCE_CALLS: u32 = 4;
/// instant-acme's own bound (`Client::post`): the unit test
/// `bad_nonces_are_retried_with_the_fresh_nonce_a_bounded_number_of_times`
/// counts it.
const NONCES_PER_CALL: u32 = 3;
/// The most nonces one request of a step is sent with.
const MAX_NONCES: u32 = BAD_NONCE_CALLS * NONCES_PER_CALL;

fn is_bad_nonce(error: &instant_acme::Error) -> bool {
    matches!(error, instant_acme::Error::Api(p) if is_problem(p, "badNonce"))
}

/// The result of `$call` (an instant-acme future), made again while it
/// fails with badNonce, at most [`BAD_NONCE_CALLS`] times in all. A macro
/// rather than a function taking a closure: the calls borrow an order or a
/// challenge mutably, which a closure cannot lend to the future it returns.
macro_rules! retry_bad_nonce {
    ($call:expr) => {{
        let mut calls = 1;
        loop {
            match $call.await {
                Err(e) if is_bad_nonce(&e) && calls < BAD_NONCE_CALLS => {
                    calls += 1;
                    tracing::debug!(
                        "the ACME CA rejected {NONCES_PER_CALL} nonces in a row (badNonce): \
                         sending the request again ({calls} of {BAD_NONCE_CALLS})"
                    );
                }
                other => break other,
            }
        }
    }};
}

/// `error` as the failure of `step`: badNonce is [`AcmeError::BadNonce`]
/// at every step, so that an operator is never told that an account, an
/// order or a validation failed when the CA only refused nonces; anything
/// else is what `other` makes of it.
fn bad_nonce_or(
    error: instant_acme::Error,
    settings: &AcmeSettings,
    step: &str,
    other: impl FnOnce(instant_acme::Error) -> AcmeError,
) -> AcmeError {
    if is_bad_nonce(&error) {
        AcmeError::BadNonce {
            url: settings.directory.clone(),
            step: step.to_string(),
        }
    } else {
        other(error)
    }
}

/// Every authorization of `order` fetched (a POST-as-GET each). Made again
/// after a badNonce, it fetches only those not fetched yet: instant-acme
/// keeps the states it has. The calls are counted for the whole step, not
/// per authorization: still bounded, a little stricter.
async fn fetch_authorizations(order: &mut instant_acme::Order) -> Result<(), instant_acme::Error> {
    let mut authorizations = order.authorizations();
    while let Some(authorization) = authorizations.next().await {
        authorization?;
    }
    Ok(())
}

/// Obtain a certificate for `names` (the first one names its directory
/// under `state_dir/certs`): the account from `state_dir` (registered and
/// saved 0600 on first use), an order for `names`, TLS-ALPN-01 answered
/// through `challenges`, finalized with a fresh ECDSA P-256 key, the chain
/// downloaded and stored atomically. Challenge certificates are taken down
/// again whatever the outcome.
pub async fn obtain(
    settings: &AcmeSettings,
    names: &[String],
    challenges: &Challenges,
) -> Result<Issued, AcmeError> {
    obtain_with(settings, names, challenges, ChallengeKind::Auto).await
}

/// [`obtain`], proving the names with the challenge `kind` (a site's
/// `acme_challenge`).
pub async fn obtain_with(
    settings: &AcmeSettings,
    names: &[String],
    challenges: &Challenges,
    kind: ChallengeKind,
) -> Result<Issued, AcmeError> {
    obtain_published(settings, names, challenges, kind, None).await
}

/// [`obtain_with`], each challenge answer also given to `publish` before
/// the CA is asked to validate it (and withdrawn there however the order
/// ends).
pub async fn obtain_published(
    settings: &AcmeSettings,
    names: &[String],
    challenges: &Challenges,
    kind: ChallengeKind,
    publish: Option<&dyn Publish>,
) -> Result<Issued, AcmeError> {
    obtain_tracked(settings, names, challenges, kind, publish, None).await
}

/// [`obtain_published`], the order's progress also given to `track` (and
/// the order it keeps, if any, finished rather than a new one placed).
pub async fn obtain_tracked(
    settings: &AcmeSettings,
    names: &[String],
    challenges: &Challenges,
    kind: ChallengeKind,
    publish: Option<&dyn Publish>,
    track: Option<&dyn Track>,
) -> Result<Issued, AcmeError> {
    let names = normalize(names)?;
    // Only DNS-01 proves a wildcard: say so before ordering anything.
    let dns = matches!(kind, ChallengeKind::Auto | ChallengeKind::Dns01) && settings.dns.is_some();
    if let Some(w) = names.iter().find(|n| n.starts_with("*.") && !dns) {
        return Err(AcmeError::BadName {
            name: w.clone(),
            reason: "only DNS-01 proves a wildcard name: set acme_dns_server and \
                     acme_dns_tsig_key_file, and acme_challenge to \"dns-01\" or \"auto\"",
        });
    }
    let http = client::AcmeHttp::new(settings.extra_roots.as_deref())?;
    let work = obtain_names(settings, &names, challenges, kind, http, publish, track);
    let result = match tokio::time::timeout(OBTAIN_TIMEOUT, work).await {
        Ok(result) => result,
        Err(_) => Err(AcmeError::Timeout {
            what: format!("obtaining a certificate for {}", names.join(", ")),
            url: settings.directory.clone(),
            secs: OBTAIN_TIMEOUT.as_secs(),
        }),
    };
    if let Some(p) = publish {
        p.withdraw().await;
    }
    result
}

/// [`obtain`]'s work, through `http` (any client, for the unit tests'
/// fake CA).
async fn obtain_names<H: instant_acme::HttpClient + Clone>(
    settings: &AcmeSettings,
    names: &[String],
    challenges: &Challenges,
    kind: ChallengeKind,
    http: H,
    publish: Option<&dyn Publish>,
    track: Option<&dyn Track>,
) -> Result<Issued, AcmeError> {
    let listed = names.join(", ");
    let published_error =
        |name: &str, e: Box<dyn std::error::Error + Send + Sync>| AcmeError::Publish {
            name: name.to_string(),
            detail: e.to_string(),
        };
    let identifiers: Vec<Identifier> = names.iter().cloned().map(Identifier::Dns).collect();
    let order_error = |detail: String| AcmeError::Order {
        url: settings.directory.clone(),
        names: listed.clone(),
        detail,
    };

    let tracked = |step: &'static str| {
        let names = listed.clone();
        move |e: Box<dyn std::error::Error + Send + Sync>| AcmeError::Track {
            names,
            step,
            detail: e.to_string(),
        }
    };

    let (account, created) = account(settings, true, http.clone()).await?;
    let resumed = match track.and_then(|t| t.resume().map(|r| (t, r))) {
        Some((t, r)) => resume_order(settings, &account, t, r, &listed).await?,
        None => None,
    };
    let resuming = resumed.is_some();
    let (mut order, kept_key) = match resumed {
        Some(resumed) => resumed,
        None => {
            let order = place_order(settings, account, created, http, &identifiers, names).await?;
            if let Some(t) = track {
                t.placed(order.url())
                    .await
                    .map_err(tracked("keep the order placed"))?;
            }
            (order, None)
        }
    };
    // A resumed order the CA is issuing, or has issued, is only fetched.
    let finalized = matches!(
        order.state().status,
        OrderStatus::Processing | OrderStatus::Valid
    );
    if !finalized {
        // The authorizations first, each fetched once; the loop below then
        // reads them from the order without asking the CA again.
        retry_bad_nonce!(fetch_authorizations(&mut order)).map_err(|e| {
            bad_nonce_or(
                e,
                settings,
                &format!("fetching the authorizations for {listed}"),
                |e| order_error(describe(&e)),
            )
        })?;

        // Put up a challenge certificate for each name the CA wants proven; the
        // guards take them down when this function returns, however it does.
        let mut answering = Vec::new();
        let mut answering_http = Vec::new();
        // DNS-01 records added; removed (awaited) once the CA is done, or by
        // the guard's drop on any other way out.
        let mut published: Option<dns01::Published> = None;
        // The kind of challenge answered, for the words of a failure.
        let mut tried = ChallengeType::TlsAlpn01;
        let mut authorizations = order.authorizations();
        while let Some(authorization) = authorizations.next().await {
            let mut authorization = authorization.map_err(|e| order_error(describe(&e)))?;
            let name = authorization.identifier().to_string();
            match authorization.status {
                AuthorizationStatus::Pending => {}
                // Proven recently enough that the CA reuses it.
                AuthorizationStatus::Valid => continue,
                status => {
                    return Err(AcmeError::Challenge {
                        name,
                        detail: format!("its authorization is {status:?}, not pending"),
                    })
                }
            }
            let offered = offered(&authorization.challenges);
            let can = Can {
                http: challenges.http_listening(),
                dns: settings.dns.is_some(),
            };
            let wildcard = authorization.wildcard;
            let ty = pick_challenge(kind, can, wildcard, |t| {
                authorization.challenges.iter().any(|c| c.r#type == t)
            })
            .ok_or_else(|| AcmeError::NoChallenge {
                name: name.clone(),
                offered,
                wanted: wanted(kind, can, wildcard),
            })?;
            let Some(mut challenge) = authorization.challenge(ty.clone()) else {
                unreachable!("pick_challenge picks an offered challenge")
            };
            let key_authorization = challenge.key_authorization();
            tried = ty.clone();
            if ty == ChallengeType::Http01 {
                answering_http
                    .push(challenges.answer_http(&challenge.token, key_authorization.as_str()));
                if let Some(p) = publish {
                    p.http_01(&challenge.token, key_authorization.as_str())
                        .await
                        .map_err(|e| published_error(&name, e))?;
                }
            } else if let (ChallengeType::Dns01, Some(dns)) = (&ty, &settings.dns) {
                published
                    .get_or_insert_with(|| dns01::Published::new(dns.clone()))
                    .add(&name, &key_authorization.dns_value())
                    .await
                    .map_err(|source| AcmeError::Dns {
                        name: name.clone(),
                        source: Box::new(source),
                    })?;
            } else {
                let digest = key_authorization.digest();
                let key = challenge::challenge_key(&name, digest.as_ref())?;
                answering.push(challenges.answer(&name, key));
                if let Some(p) = publish {
                    p.tls_alpn_01(&name, digest.as_ref())
                        .await
                        .map_err(|e| published_error(&name, e))?;
                }
            }
            // A resumed order's challenge may be under validation already.
            if resuming && challenge.status != ChallengeStatus::Pending {
                continue;
            }
            retry_bad_nonce!(challenge.set_ready()).map_err(|e| {
                bad_nonce_or(e, settings, &format!("asking it to validate {name}"), |e| {
                    challenge_error(&ty, name.clone(), describe(&e))
                })
            })?;
        }

        let ready = retry_bad_nonce!(order.poll_ready(&poll_policy()));
        if let Some(published) = published.take() {
            published.remove().await;
        }
        match ready {
            Ok(OrderStatus::Ready) => {}
            Err(e) if is_bad_nonce(&e) => {
                return Err(AcmeError::BadNonce {
                    url: settings.directory.clone(),
                    step: format!("polling the order for {listed}"),
                })
            }
            Ok(_) | Err(instant_acme::Error::Api(_)) => {
                return Err(why_invalid(&mut order, &listed, &tried).await)
            }
            Err(instant_acme::Error::Timeout(_)) => {
                return Err(AcmeError::Timeout {
                    what: format!("validating {listed}"),
                    url: settings.directory.clone(),
                    secs: POLL_TIMEOUT.as_secs(),
                })
            }
            Err(e) => return Err(order_error(describe(&e))),
        }
        drop((answering, answering_http));
    }

    // The certificate's key: fresh for every issuance, so a renewal never
    // prolongs the life of a key that may have leaked; the one kept for a
    // resumed order, which may have been finalized with it already.
    let key = match kept_key {
        Some(pem) => KeyPair::from_pem(&pem).map_err(|e| AcmeError::Key {
            what: format!("the kept key for {listed}"),
            detail: e.to_string(),
        })?,
        None => {
            let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| {
                AcmeError::Key {
                    what: format!("the key for {listed}"),
                    detail: e.to_string(),
                }
            })?;
            if let Some(t) = track {
                t.keyed(order.url(), &key.serialize_pem())
                    .await
                    .map_err(tracked("keep the certificate key"))?;
            }
            key
        }
    };
    let issue_error = |detail: String| AcmeError::Issue {
        names: listed.clone(),
        detail,
    };
    if !finalized {
        let csr = CertificateParams::new(names.to_vec())
            .and_then(|mut params| {
                params.distinguished_name = DistinguishedName::new();
                params.serialize_request(&key)
            })
            .map_err(|e| AcmeError::Key {
                what: format!("the certificate request for {listed}"),
                detail: e.to_string(),
            })?;
        retry_bad_nonce!(order.finalize_csr(csr.der())).map_err(|e| {
            bad_nonce_or(
                e,
                settings,
                &format!("finalizing the order for {listed}"),
                |e| issue_error(describe(&e)),
            )
        })?;
    }
    let chain_pem = match retry_bad_nonce!(order.poll_certificate(&poll_policy())) {
        Ok(chain) => chain,
        Err(e) if is_bad_nonce(&e) => {
            return Err(AcmeError::BadNonce {
                url: settings.directory.clone(),
                step: format!("fetching the certificate for {listed}"),
            })
        }
        Err(instant_acme::Error::Timeout(_)) => {
            return Err(AcmeError::Timeout {
                what: format!("issuing the certificate for {listed}"),
                url: settings.directory.clone(),
                secs: POLL_TIMEOUT.as_secs(),
            })
        }
        Err(e) => return Err(issue_error(describe(&e))),
    };

    let issued = check_issued(chain_pem, key.serialize_pem(), names).map_err(|detail| {
        AcmeError::BadCertificate {
            what: format!("the certificate the CA issued for {listed}"),
            detail,
        }
    })?;
    store(settings, names, &issued)?;
    tracing::info!(names = %listed, not_after = %httpdate::fmt_http_date(issued.not_after), "ACME certificate issued");
    Ok(issued)
}

/// The order `resume` names, fetched from the CA, with the key kept for
/// it: `None` when a new one must be placed instead (the CA no longer
/// knows it, it is invalid, or it was finalized with a key not kept). A
/// failure to reach the CA is an error: ordering anew then could make a
/// second certificate.
async fn resume_order(
    settings: &AcmeSettings,
    account: &Account,
    track: &dyn Track,
    resume: Resume,
    listed: &str,
) -> Result<Option<(instant_acme::Order, Option<String>)>, AcmeError> {
    let tracked = |e: Box<dyn std::error::Error + Send + Sync>| AcmeError::Track {
        names: listed.to_string(),
        step: "forget the order it cannot finish",
        detail: e.to_string(),
    };
    match retry_bad_nonce!(account.order(resume.url.clone())) {
        Ok(mut order) => {
            let status = order.state().status;
            let word = match status {
                OrderStatus::Pending => "pending",
                OrderStatus::Ready => "ready",
                OrderStatus::Processing => "processing",
                OrderStatus::Valid => "valid",
                OrderStatus::Invalid => "invalid",
            };
            let resumed = match status {
                OrderStatus::Pending | OrderStatus::Ready => true,
                OrderStatus::Processing | OrderStatus::Valid => resume.key_pem.is_some(),
                OrderStatus::Invalid => false,
            };
            track.found(Some(word), resumed).await.map_err(tracked)?;
            Ok(resumed.then_some((order, resume.key_pem)))
        }
        // The CA does not know the order (any more), or not as this
        // account's; any other problem (a refused nonce, a limit, the CA's
        // own failure) says nothing of the order and is tried again later.
        Err(instant_acme::Error::Api(p))
            if matches!(p.status, Some(404 | 410)) || is_problem(&p, "unauthorized") =>
        {
            track.found(None, false).await.map_err(tracked)?;
            Ok(None)
        }
        Err(e) => Err(bad_nonce_or(
            e,
            settings,
            &format!("fetching the order for {listed} to resume"),
            |e| AcmeError::Order {
                url: settings.directory.clone(),
                names: listed.to_string(),
                detail: describe(&e),
            },
        )),
    }
}

/// What this process can answer besides TLS-ALPN-01: HTTP-01 (a
/// plain-HTTP listener runs), DNS-01 (`acme_dns_server` is set).
#[derive(Clone, Copy, Debug)]
struct Can {
    http: bool,
    dns: bool,
}

/// The challenge to answer for an authorization, given what the site asks
/// for (`kind`), what this process can answer, whether the authorization
/// is for a wildcard (only DNS-01 proves one: "auto" picks it for
/// wildcards only), and what the CA offers (`offers`).
fn pick_challenge(
    kind: ChallengeKind,
    can: Can,
    wildcard: bool,
    offers: impl Fn(ChallengeType) -> bool,
) -> Option<ChallengeType> {
    let candidates: &[ChallengeType] = match kind {
        ChallengeKind::Dns01 | ChallengeKind::Auto if wildcard && can.dns => {
            &[ChallengeType::Dns01]
        }
        _ if wildcard => &[],
        ChallengeKind::Auto if can.http => &[ChallengeType::TlsAlpn01, ChallengeType::Http01],
        ChallengeKind::Auto | ChallengeKind::TlsAlpn01 => &[ChallengeType::TlsAlpn01],
        ChallengeKind::Http01 if can.http => &[ChallengeType::Http01],
        ChallengeKind::Dns01 if can.dns => &[ChallengeType::Dns01],
        ChallengeKind::Http01 | ChallengeKind::Dns01 => &[],
    };
    candidates.iter().find(|t| offers((*t).clone())).cloned()
}

/// What [`pick_challenge`] looked for, for [`AcmeError::NoChallenge`].
fn wanted(kind: ChallengeKind, can: Can, wildcard: bool) -> &'static str {
    match (kind, can.http, can.dns) {
        (ChallengeKind::Dns01, _, true) => "the site's acme_challenge is \"dns-01\"",
        (ChallengeKind::Dns01, _, false) => {
            "the site's acme_challenge is \"dns-01\" and acme_dns_server is not set"
        }
        (_, _, false) if wildcard => {
            "a wildcard name is proven with dns-01 only, and acme_dns_server is not set"
        }
        (ChallengeKind::Auto, _, true) if wildcard => {
            "a wildcard name is proven with dns-01 only"
        }
        (ChallengeKind::TlsAlpn01 | ChallengeKind::Http01, _, _) if wildcard => {
            "a wildcard name is proven with dns-01 only, and the site's acme_challenge is not \"dns-01\""
        }
        (ChallengeKind::Auto, true, _) => "this server answers tls-alpn-01 and http-01",
        (ChallengeKind::Auto, false, _) => {
            "this server answers tls-alpn-01, and http-01 once http_listen is set"
        }
        (ChallengeKind::TlsAlpn01, _, _) => "the site's acme_challenge is \"tls-alpn-01\"",
        (ChallengeKind::Http01, true, _) => "the site's acme_challenge is \"http-01\"",
        (ChallengeKind::Http01, false, _) => {
            "the site's acme_challenge is \"http-01\" and no http_listen listener runs"
        }
    }
}

/// The order for `identifiers` (`names`) on `account` (`created`: just
/// registered): with `settings.profile` if set, which the CA's directory
/// must list (no silent fallback to its default), and, when `names` have a
/// stored certificate, `replaces` naming it (RFC 9773 section 5). Should
/// the CA refuse the replacement (already replaced, or it does not know
/// the certificate), the order is placed once more without it; should it
/// no longer know the stored account, a new one is registered, once.
async fn place_order<H: instant_acme::HttpClient + Clone>(
    settings: &AcmeSettings,
    mut account: Account,
    mut created: bool,
    http: H,
    identifiers: &[Identifier],
    names: &[String],
) -> Result<instant_acme::Order, AcmeError> {
    let listed = names.join(", ");
    let order_error = |detail: String| AcmeError::Order {
        url: settings.directory.clone(),
        names: listed.clone(),
        detail,
    };
    if let Some(profile) = &settings.profile {
        let mut offered: Vec<&str> = account.profiles().map(|p| p.name).collect();
        offered.sort_unstable();
        if !offered.contains(&profile.as_str()) {
            return Err(AcmeError::Profile {
                profile: profile.clone(),
                url: settings.directory.clone(),
                offered: if offered.is_empty() {
                    "lists no profiles in its directory".into()
                } else {
                    format!("offers the profiles {}", offered.join(", "))
                },
            });
        }
    }
    let mut replaces = ari::replaced(settings, names);
    // Each way round the loop clears `replaces` or sets `created`: at most
    // three orders.
    loop {
        let mut new_order = NewOrder::new(identifiers);
        if let Some(profile) = &settings.profile {
            new_order = new_order.profile(profile);
        }
        if let Some(id) = &replaces {
            new_order = new_order.replaces(id.clone());
        }
        match retry_bad_nonce!(account.new_order(&new_order)) {
            Ok(mut order) => {
                if let (Some(want), Some(got)) = (&settings.profile, &order.state().profile) {
                    if want != got {
                        return Err(order_error(format!(
                            "it made the order with the profile {got:?}, not acme_profile = \
                             {want:?}"
                        )));
                    }
                }
                if let Some(id) = &replaces {
                    tracing::info!("ACME: the order for {listed} replaces certificate {id}");
                }
                return Ok(order);
            }
            // The CA forgot the stored account (a test CA restarted, or it
            // was deactivated elsewhere): register anew, once.
            Err(instant_acme::Error::Api(p))
                if !created && is_problem(&p, "accountDoesNotExist") =>
            {
                tracing::warn!(directory = %settings.directory, "the ACME CA no longer knows the stored account: registering a new one");
                account = register(settings, http.clone()).await?;
                created = true;
            }
            Err(e) if replaces.is_some() && refuses_replaces(&e) => {
                let id = replaces.take().map(|id| id.to_string()).unwrap_or_default();
                match e {
                    // Known before asking: the directory has no renewalInfo.
                    instant_acme::Error::Unsupported(_) => tracing::debug!(
                        "ACME: the CA has no ARI; the order for {listed} replaces nothing"
                    ),
                    e => tracing::warn!(
                        "ACME: the CA refused the order for {listed} as the replacement of \
                         certificate {id} ({}); ordering once more without `replaces`",
                        describe(&e)
                    ),
                }
            }
            Err(e) => {
                return Err(bad_nonce_or(
                    e,
                    settings,
                    &format!("ordering a certificate for {listed}"),
                    |e| order_error(describe(&e)),
                ))
            }
        }
    }
}

/// A failed validation, in the words of the challenge tried.
fn challenge_error(ty: &ChallengeType, name: String, detail: String) -> AcmeError {
    match ty {
        ChallengeType::Http01 => AcmeError::HttpChallenge { name, detail },
        ChallengeType::Dns01 => AcmeError::DnsChallenge { name, detail },
        _ => AcmeError::Challenge { name, detail },
    }
}

/// Whether `error`, the answer to an order carrying `replaces`, may be
/// about the replacement (RFC 9773's alreadyReplaced, or what a CA says
/// instead: pebble a 409 "malformed", a CA that does not know the
/// certificate something else), so that the order without it may pass.
/// Not a refused nonce, a rate limit, or a forgotten account: each of
/// those has its own way and would refuse the second order too.
fn refuses_replaces(error: &instant_acme::Error) -> bool {
    match error {
        instant_acme::Error::Unsupported(_) => true,
        instant_acme::Error::Api(p) => !["badNonce", "rateLimited", "accountDoesNotExist"]
            .iter()
            .any(|t| is_problem(p, t)),
        // instant-acme's own check: the CA made the order without
        // reflecting `replaces` (RFC 9773 says it must).
        instant_acme::Error::Other(e) => e.to_string().contains("replaces"),
        _ => false,
    }
}

/// After an order went invalid: the names whose validation failed and the
/// CA's problem documents for them.
async fn why_invalid(
    order: &mut instant_acme::Order,
    listed: &str,
    ty: &ChallengeType,
) -> AcmeError {
    let mut failed: Vec<(String, String)> = Vec::new();
    let mut authorizations = order.authorizations();
    while let Some(authorization) = authorizations.next().await {
        let Ok(mut authorization) = authorization else {
            continue;
        };
        let Ok(state) = authorization.refresh().await else {
            continue;
        };
        let name = state.identifier().to_string();
        let problems: Vec<String> = state
            .challenges
            .iter()
            .filter_map(|c| c.error.as_ref().map(problem_text))
            .collect();
        if !problems.is_empty() {
            failed.push((name, problems.join("; ")));
        } else if state.status != AuthorizationStatus::Valid {
            failed.push((name, format!("authorization {:?}", state.status)));
        }
    }
    if let Some(state_error) = order.state().error.as_ref().map(problem_text) {
        if failed.is_empty() {
            failed.push((listed.to_string(), state_error));
        }
    }
    if failed.is_empty() {
        failed.push((listed.to_string(), "the order became invalid".into()));
    }
    if let [(name, detail)] = failed.as_slice() {
        return challenge_error(ty, name.clone(), detail.clone());
    }
    challenge_error(
        ty,
        failed
            .iter()
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        failed
            .iter()
            .map(|(n, d)| format!("{n}: {d}"))
            .collect::<Vec<_>>()
            .join("; "),
    )
}

fn offered(challenges: &[instant_acme::Challenge]) -> String {
    let types: Vec<String> = challenges
        .iter()
        .map(|c| match &c.r#type {
            ChallengeType::Http01 => "http-01".to_string(),
            ChallengeType::Dns01 => "dns-01".to_string(),
            ChallengeType::TlsAlpn01 => "tls-alpn-01".to_string(),
            ChallengeType::DeviceAttest01 => "device-attest-01".to_string(),
            ChallengeType::Unknown(t) => t.clone(),
            other => format!("{other:?}"),
        })
        .collect();
    if types.is_empty() {
        "nothing".into()
    } else {
        types.join(", ")
    }
}

/// What [`obtain`] stored for `names` earlier, if it is still whole: the
/// chain parses, names exactly these names, and the key is the leaf's.
/// Anything else is `Ok(None)` (logged), so the caller obtains anew;
/// `Err` only when the files exist but cannot be read.
pub fn load_stored(settings: &AcmeSettings, names: &[String]) -> Result<Option<Issued>, AcmeError> {
    let names = normalize(names)?;
    let dir = cert_dir(settings, &names[0]);
    let read = |file: &str| -> Result<Option<String>, AcmeError> {
        let path = dir.join(file);
        match read_state(&path).and_then(|bytes| {
            String::from_utf8(bytes)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
        }) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(AcmeError::Io {
                action: "read",
                path,
                source,
            }),
        }
    };
    let (Some(chain_pem), Some(key_pem)) = (read("fullchain.pem")?, read("key.pem")?) else {
        return Ok(None);
    };
    match check_issued(chain_pem, key_pem, &names) {
        Ok(issued) => Ok(Some(issued)),
        Err(why) => {
            tracing::warn!(dir = %dir.display(), "stored ACME certificate not used: {why}");
            Ok(None)
        }
    }
}

/// Store a certificate obtained elsewhere (by another node of the fleet)
/// for `names`, as [`obtain`] stores its own, once [`load_stored`]'s
/// checks pass: the chain names exactly these names and holds the key's
/// public half.
pub fn adopt(
    settings: &AcmeSettings,
    names: &[String],
    chain_pem: String,
    key_pem: String,
) -> Result<Issued, AcmeError> {
    let names = normalize(names)?;
    let issued = check_issued(chain_pem, key_pem, &names).map_err(|why| AcmeError::Adopt {
        names: names.join(", "),
        why,
    })?;
    store(settings, &names, &issued)?;
    Ok(issued)
}

/// When to renew: two thirds into the certificate's lifetime (day 60 of
/// Let's Encrypt's 90), leaving a third for retries. A lifetime that ends
/// before it starts renews at once (at `not_after`, in the past).
pub fn renew_at(not_before: SystemTime, not_after: SystemTime) -> SystemTime {
    match not_after.duration_since(not_before) {
        // `/ 3 * 2`, not `* 2 / 3`: no overflow on absurd lifetimes.
        Ok(life) => not_before.checked_add(life / 3 * 2).unwrap_or(not_after),
        Err(_) => not_after,
    }
}

/// How long to wait before trying again after `failures` failures in a row:
/// none before the first, then 1 minute, doubling up to 1 day. No jitter:
/// each process renews its own names at its own times, and tests can rely
/// on the numbers.
pub fn retry_delay(failures: u32) -> Duration {
    const FIRST: u64 = 60;
    const MAX: u64 = 24 * 60 * 60;
    if failures == 0 {
        return Duration::ZERO;
    }
    // 60 << 11 already exceeds a day; the cap keeps the shift in range.
    let secs = FIRST << (failures - 1).min(11);
    Duration::from_secs(secs.min(MAX))
}

/// Revoke the leaf of `chain_pem` with the account in `state_dir` (the one
/// that obtained it: a new account could not).
pub async fn revoke(settings: &AcmeSettings, chain_pem: &str) -> Result<(), AcmeError> {
    let leaf = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .next()
        .and_then(Result::ok)
        .ok_or_else(|| AcmeError::BadCertificate {
            what: "the chain to revoke".into(),
            detail: "it holds no PEM CERTIFICATE".into(),
        })?;
    let serial = x509_parser::parse_x509_certificate(&leaf)
        .map(|(_, cert)| hex(cert.raw_serial()))
        .map_err(|e| AcmeError::BadCertificate {
            what: "the certificate to revoke".into(),
            detail: e.to_string(),
        })?;
    let work = async {
        let http = client::AcmeHttp::new(settings.extra_roots.as_deref())?;
        let (account, _) = account(settings, false, http).await?;
        let request = RevocationRequest {
            certificate: &leaf,
            reason: None,
        };
        retry_bad_nonce!(account.revoke(&request)).map_err(|e| {
            bad_nonce_or(
                e,
                settings,
                &format!("revoking the certificate with serial {serial}"),
                |e| AcmeError::Revoke {
                    url: settings.directory.clone(),
                    serial: serial.clone(),
                    detail: describe(&e),
                },
            )
        })
    };
    match tokio::time::timeout(OBTAIN_TIMEOUT, work).await {
        Ok(result) => result,
        Err(_) => Err(AcmeError::Timeout {
            what: format!("revoking the certificate with serial {serial}"),
            url: settings.directory.clone(),
            secs: OBTAIN_TIMEOUT.as_secs(),
        }),
    }
}

/// Revoke the certificate stored for `names` and remove it, so that the
/// next load of the sites (a reload) starts over with a placeholder and
/// obtains a new one: what to do when its key may have leaked. Returns the
/// revoked certificate's serial (hex, as the CA shows it); `Ok(None)`: none
/// was stored.
pub async fn revoke_stored(
    settings: &AcmeSettings,
    names: &[String],
) -> Result<Option<String>, AcmeError> {
    let Some(issued) = load_stored(settings, names)? else {
        return Ok(None);
    };
    revoke(settings, &issued.chain_pem).await?;
    let names = normalize(names)?;
    let dir = cert_dir(settings, &names[0]);
    for file in ["fullchain.pem", "key.pem"] {
        let path = dir.join(file);
        std::fs::remove_file(&path).map_err(|source| AcmeError::Io {
            action: "remove",
            path,
            source,
        })?;
    }
    let serial = CertificateDer::pem_slice_iter(issued.chain_pem.as_bytes())
        .next()
        .and_then(Result::ok)
        .and_then(|leaf| {
            x509_parser::parse_x509_certificate(&leaf)
                .ok()
                .map(|(_, c)| c.tbs_certificate.serial.to_str_radix(16))
        })
        .unwrap_or_default();
    Ok(Some(serial))
}

/// A self-signed certificate (ECDSA P-256) for `names`, to serve until the
/// first issuance: (chain PEM, key PEM). No client trusts it; it lets the
/// listener come up, and answer TLS-ALPN-01, before any certificate exists.
pub fn placeholder(names: &[String]) -> Result<(String, String), AcmeError> {
    let names = normalize(names)?;
    let fail = |e: rcgen::Error| AcmeError::Key {
        what: format!("the placeholder certificate for {}", names.join(", ")),
        detail: e.to_string(),
    };
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(fail)?;
    let mut params = CertificateParams::new(names.clone()).map_err(fail)?;
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(
        DnType::CommonName,
        "tlsfront placeholder (no ACME certificate yet)",
    );
    let cert = params.self_signed(&key).map_err(fail)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// The account file for `settings.directory`.
pub fn account_path(settings: &AcmeSettings) -> PathBuf {
    let digest =
        aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, settings.directory.as_bytes());
    settings
        .state_dir
        .join(format!("account-{}.json", hex(&digest.as_ref()[..8])))
}

/// The account for `settings.directory`: stored, or registered now (and
/// saved) if `create`. The flag says it was registered now.
async fn account<H: instant_acme::HttpClient + Clone>(
    settings: &AcmeSettings,
    create: bool,
    http: H,
) -> Result<(Account, bool), AcmeError> {
    client::check_directory(&http, &settings.directory).await?;
    let path = account_path(settings);
    match read_state(&path) {
        Ok(bytes) => {
            let bad = |detail: String| AcmeError::AccountFile {
                path: path.clone(),
                detail,
            };
            // The file names the directory it was registered with: it must
            // be this one (instant-acme would also trust it as a URL).
            let stored: serde_json::Value =
                serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
            let registered_with = stored.get("directory").and_then(serde_json::Value::as_str);
            if registered_with != Some(settings.directory.as_str()) {
                return Err(bad(format!(
                    "it is for the directory {registered_with:?}, not {}",
                    settings.directory
                )));
            }
            let credentials: AccountCredentials =
                serde_json::from_value(stored).map_err(|e| bad(e.to_string()))?;
            let account = Account::builder_with_http(Box::new(http))
                .from_credentials(credentials)
                .await
                .map_err(|e| match e {
                    instant_acme::Error::KeyRejected | instant_acme::Error::Crypto => {
                        AcmeError::AccountFile {
                            path: path.clone(),
                            detail: describe(&e),
                        }
                    }
                    e => AcmeError::Directory {
                        url: settings.directory.clone(),
                        detail: describe(&e),
                    },
                })?;
            Ok((account, false))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !create {
                return Err(AcmeError::NoAccount {
                    url: settings.directory.clone(),
                    path,
                });
            }
            Ok((register(settings, http).await?, true))
        }
        Err(source) => Err(AcmeError::Io {
            action: "read",
            path,
            source,
        }),
    }
}

/// Register a new account (agreeing to the CA's terms) and save it 0600.
/// Generic over the HTTP client for the unit tests' fake CA.
async fn register<H: instant_acme::HttpClient + Clone>(
    settings: &AcmeSettings,
    http: H,
) -> Result<Account, AcmeError> {
    let contact: Vec<&str> = settings.contact.iter().map(String::as_str).collect();
    let new_account = NewAccount {
        contact: &contact,
        terms_of_service_agreed: true,
        only_return_existing: false,
    };
    let (account, credentials) = retry_bad_nonce!(Account::builder_with_http(Box::new(
        http.clone()
    ))
    .create(&new_account, settings.directory.clone(), None))
    .map_err(|e| {
        bad_nonce_or(e, settings, "registering an account", |e| match e {
            // The CA answered with a problem document: it refused the account.
            instant_acme::Error::Api(_) => AcmeError::Account {
                url: settings.directory.clone(),
                detail: describe(&e),
            },
            // Anything else is the transport or the directory.
            e => AcmeError::Directory {
                url: settings.directory.clone(),
                detail: describe(&e),
            },
        })
    })?;
    let json = serde_json::to_vec_pretty(&credentials).map_err(|e| AcmeError::Key {
        what: "the account file".into(),
        detail: e.to_string(),
    })?;
    write_atomic(&account_path(settings), &json, 0o600)?;
    tracing::info!(directory = %settings.directory, account = account.id(), "ACME account registered");
    Ok(account)
}

/// The account for `settings.directory` as its file holds it (the JSON
/// of instant-acme's `AccountCredentials`, naming the directory): the
/// stored one, else one registered now and saved. For the fleet, which
/// shares it.
pub async fn account_credentials(settings: &AcmeSettings) -> Result<Vec<u8>, AcmeError> {
    let http = client::AcmeHttp::new(settings.extra_roots.as_deref())?;
    account(settings, true, http).await?;
    let path = account_path(settings);
    read_state(&path).map_err(|source| AcmeError::Io {
        action: "read",
        path,
        source,
    })
}

/// Make `credentials` (an account file's JSON, from the fleet) the account
/// for `settings.directory`, saved 0600 where [`account_path`] says, so
/// that revocation and ARI use it too; nothing is written when the file
/// holds it already. Refused unless it is an account of this directory.
pub fn use_account(settings: &AcmeSettings, credentials: &[u8]) -> Result<(), AcmeError> {
    let bad = |detail: String| AcmeError::FleetAccount {
        url: settings.directory.clone(),
        detail,
    };
    let stored: serde_json::Value =
        serde_json::from_slice(credentials).map_err(|e| bad(e.to_string()))?;
    let registered_with = stored.get("directory").and_then(serde_json::Value::as_str);
    if registered_with != Some(settings.directory.as_str()) {
        return Err(bad(format!(
            "it is for the directory {registered_with:?}, not this one"
        )));
    }
    let _: AccountCredentials = serde_json::from_value(stored).map_err(|e| bad(e.to_string()))?;
    let path = account_path(settings);
    if read_state(&path).is_ok_and(|held| held == credentials) {
        return Ok(());
    }
    write_atomic(&path, credentials, 0o600)
}

fn cert_dir(settings: &AcmeSettings, first: &str) -> PathBuf {
    settings.state_dir.join("certs").join(first)
}

/// Key first, then chain: see the module doc for why that order.
fn store(settings: &AcmeSettings, names: &[String], issued: &Issued) -> Result<(), AcmeError> {
    let dir = cert_dir(settings, &names[0]);
    write_atomic(&dir.join("key.pem"), issued.key_pem.as_bytes(), 0o600)?;
    write_atomic(
        &dir.join("fullchain.pem"),
        issued.chain_pem.as_bytes(),
        0o644,
    )
}

/// A file of the state directory, read without following a link at its
/// name and only if it is a regular file. The state directory is meant to
/// belong to the user tlsfront runs as, so its files are not held to
/// [`crate::safe_open::read`]'s root-only rule; a link or a FIFO put there
/// still does not make tlsfront read another file, nor hang.
fn read_state(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => std::io::Error::new(
                e.kind(),
                "it is a symbolic link, which tlsfront does not follow in the ACME state \
                 directory (remove it: the next issuance writes the file)",
            ),
            _ => e,
        })?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other(
            "not a regular file (remove it: the next issuance writes the file)",
        ));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Replace `path` whole: a temporary file beside it (created with `mode`,
/// so a key is never readable by others even for a moment), fsync, rename,
/// fsync the directory.
fn write_atomic(path: &Path, data: &[u8], mode: u32) -> Result<(), AcmeError> {
    let io = |action: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| AcmeError::Io {
            action,
            path,
            source,
        }
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(io("create the directory", dir))?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{file_name}.tmp-{}", std::process::id()));
    // A leftover from a crashed run of a process with the same pid.
    let _ = std::fs::remove_file(&tmp);
    // O_EXCL already refuses a link at the name; O_NOFOLLOW says so too.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .map_err(io("create", &tmp))?;
    let written = file
        .write_all(data)
        .and_then(|()| file.sync_all())
        .map_err(io("write", &tmp));
    drop(file);
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path).map_err(io("replace", path)))
    {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("sync the directory", dir))
}

/// Parse and check a chain and key: the leaf names exactly `names` and
/// holds the key's public half. Gives the leaf's validity.
fn check_issued(chain_pem: String, key_pem: String, names: &[String]) -> Result<Issued, String> {
    let leaf = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .next()
        .ok_or("the chain holds no PEM CERTIFICATE")?
        .map_err(|e| format!("the chain's PEM: {e}"))?;
    let (_, cert) =
        x509_parser::parse_x509_certificate(&leaf).map_err(|e| format!("the leaf: {e}"))?;
    let key = KeyPair::from_pem(&key_pem).map_err(|e| format!("the key: {e}"))?;
    if key.subject_public_key_info() != cert.public_key().raw {
        return Err("the key does not belong to the leaf certificate".into());
    }
    let sans: BTreeSet<String> = cert
        .subject_alternative_name()
        .map_err(|e| format!("the leaf's subjectAltName: {e}"))?
        .map(|ext| {
            ext.value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    x509_parser::extensions::GeneralName::DNSName(d) => {
                        Some(d.to_ascii_lowercase())
                    }
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    let wanted: BTreeSet<String> = names.iter().cloned().collect();
    if sans != wanted {
        return Err(format!(
            "the leaf names {:?}, not {:?}",
            sans.iter().collect::<Vec<_>>(),
            wanted.iter().collect::<Vec<_>>()
        ));
    }
    let validity = cert.validity();
    Ok(Issued {
        chain_pem,
        key_pem,
        not_before: system_time(validity.not_before.timestamp()),
        not_after: system_time(validity.not_after.timestamp()),
    })
}

fn system_time(unix: i64) -> SystemTime {
    let secs = Duration::from_secs(unix.unsigned_abs());
    if unix >= 0 {
        UNIX_EPOCH.checked_add(secs).unwrap_or(UNIX_EPOCH)
    } else {
        UNIX_EPOCH.checked_sub(secs).unwrap_or(UNIX_EPOCH)
    }
}

/// Lowercased, deduplicated (first occurrence kept), each a DNS name or a
/// wildcard `*.` and one (only DNS-01 proves those: `obtain_names` refuses
/// them with any other challenge); IP identifiers are not offered. The
/// first name is also a directory name under `state_dir/certs`, which a
/// valid DNS name is safe to be (no '/', never "." or ".."), and so is
/// `*.` before one (the directory of a wildcard is named with its `*`).
fn normalize(names: &[String]) -> Result<Vec<String>, AcmeError> {
    let mut out: Vec<String> = Vec::with_capacity(names.len());
    for name in names {
        let lower = name.trim_end_matches('.').to_ascii_lowercase();
        let bad = |reason| AcmeError::BadName {
            name: name.clone(),
            reason,
        };
        let base = lower.strip_prefix("*.").unwrap_or(&lower);
        if base.parse::<std::net::IpAddr>().is_ok() {
            return Err(bad("IP addresses are not supported, only DNS names"));
        }
        if rustls::pki_types::DnsName::try_from(base).is_err()
            || !base.contains('.')
            || base.contains('*')
        {
            return Err(bad("not a valid fully qualified DNS name"));
        }
        if !out.contains(&lower) {
            out.push(lower);
        }
    }
    if out.is_empty() {
        return Err(AcmeError::NoNames);
    }
    Ok(out)
}

fn is_problem(problem: &Problem, short: &str) -> bool {
    problem
        .r#type
        .as_deref()
        .is_some_and(|t| t.strip_prefix("urn:ietf:params:acme:error:") == Some(short))
}

/// A problem document as one line: the detail, its type, and its
/// subproblems (which name the identifiers they concern).
fn problem_text(problem: &Problem) -> String {
    let mut text = problem
        .detail
        .clone()
        .unwrap_or_else(|| "no detail given".into());
    if let Some(t) = &problem.r#type {
        text.push_str(&format!(" ({t})"));
    }
    for sub in &problem.subproblems {
        text.push_str(&format!("; {sub}"));
    }
    text
}

/// An instant-acme error with every cause it wraps (hyper hides "connection
/// refused" or "invalid peer certificate" a few sources down).
fn describe(error: &instant_acme::Error) -> String {
    if let instant_acme::Error::Api(problem) = error {
        return problem_text(problem);
    }
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_nonce_is_not_called_a_failed_validation() {
        let e = AcmeError::BadNonce {
            url: "https://ca.test/dir".into(),
            step: "asking it to validate a.test".into(),
        }
        .to_string();
        assert!(e.contains("rejected the replay nonce of a request while asking it to validate a.test (badNonce"), "{e}");
        assert!(
            e.contains(&format!("refused {MAX_NONCES} nonces in a row")),
            "{e}"
        );
        assert!(e.contains("tried again at the next attempt"), "{e}");
        assert!(!e.contains("could not validate"), "{e}");
    }

    /// A fake CA for `register`: its directory, newNonce, and newAccount,
    /// which rejects the nonce of the first `reject` requests (badNonce,
    /// 400, each rejection carrying a fresh nonce, as RFC 8555 section 6.5
    /// says) and then creates the account. It records the nonce each
    /// newAccount request carried and the nonce each answer handed out.
    #[derive(Clone)]
    struct NonceCa(std::sync::Arc<std::sync::Mutex<NonceCaLog>>);

    #[derive(Default)]
    struct NonceCaLog {
        /// The status of the order at /order/1 when fetched (as an order
        /// to resume is); `None`: the CA does not know it.
        existing: Option<&'static str>,
        /// The POSTs to this path are the ones rejected, and logged.
        reject_path: &'static str,
        reject: usize,
        /// (the nonce the request carried, the nonce its answer gave)
        posts: Vec<(String, String)>,
        /// The nonces newNonce handed out.
        fetched: Vec<String>,
        handed_out: usize,
        /// The directory's extra fields (JSON members, with a leading
        /// comma): "renewalInfo", "meta" and its "profiles".
        directory_extra: &'static str,
        /// Orders carrying `replaces` are refused (409, as pebble does for
        /// a certificate already replaced).
        refuse_replaces: bool,
        /// The payload of each newOrder request.
        orders: Vec<serde_json::Value>,
    }

    impl NonceCa {
        fn rejecting(reject_path: &'static str, reject: usize) -> NonceCa {
            NonceCa(std::sync::Arc::new(std::sync::Mutex::new(NonceCaLog {
                reject_path,
                reject,
                ..NonceCaLog::default()
            })))
        }

        /// A CA rejecting no nonce, whose directory has `directory_extra`.
        fn with_directory(directory_extra: &'static str, refuse_replaces: bool) -> NonceCa {
            NonceCa(std::sync::Arc::new(std::sync::Mutex::new(NonceCaLog {
                directory_extra,
                refuse_replaces,
                ..NonceCaLog::default()
            })))
        }
    }

    /// base64url without padding, decoded.
    fn b64url(text: &str) -> Vec<u8> {
        let mut bits = 0u32;
        let mut nbits = 0;
        let mut bytes = Vec::new();
        for c in text.bytes() {
            let v = match c {
                b'A'..=b'Z' => c - b'A',
                b'a'..=b'z' => c - b'a' + 26,
                b'0'..=b'9' => c - b'0' + 52,
                b'-' => 62,
                b'_' => 63,
                _ => panic!("not base64url: {text}"),
            };
            bits = (bits << 6) | u32::from(v);
            nbits += 6;
            if nbits >= 8 {
                nbits -= 8;
                bytes.push((bits >> nbits) as u8);
                bits &= (1 << nbits) - 1;
            }
        }
        bytes
    }

    /// The `nonce` of a JWS's protected header (base64url without padding).
    fn jws_nonce(body: &[u8]) -> String {
        let jws: serde_json::Value = serde_json::from_slice(body).unwrap();
        let header: serde_json::Value =
            serde_json::from_slice(&b64url(jws["protected"].as_str().unwrap())).unwrap();
        header["nonce"].as_str().unwrap().to_string()
    }

    /// A JWS's payload (JSON; `null` for a POST-as-GET).
    fn jws_payload(body: &[u8]) -> serde_json::Value {
        let jws: serde_json::Value = serde_json::from_slice(body).unwrap();
        let payload = b64url(jws["payload"].as_str().unwrap());
        serde_json::from_slice(&payload).unwrap_or(serde_json::Value::Null)
    }

    impl instant_acme::HttpClient for NonceCa {
        fn request(
            &self,
            req: http::Request<instant_acme::BodyWrapper<bytes::Bytes>>,
        ) -> std::pin::Pin<
            Box<
                dyn std::future::Future<
                        Output = Result<instant_acme::BytesResponse, instant_acme::Error>,
                    > + Send,
            >,
        > {
            let log = self.0.clone();
            Box::pin(async move {
                use http_body_util::BodyExt;
                let (parts, body) = req.into_parts();
                let body = body.collect().await.unwrap().to_bytes();
                let mut log = log.lock().unwrap();
                log.handed_out += 1;
                let fresh = format!("nonce-{}", log.handed_out);
                let answer = http::Response::builder().header("Replay-Nonce", &fresh);
                // Answers made here (the directory, an order reflecting
                // its `replaces`) live in this.
                let made: String;
                let (answer, text) = match (parts.method.as_str(), parts.uri.path()) {
                    ("GET", "/dir") => {
                        made = format!(
                            r#"{{"newNonce":"https://ca.test/nonce","newAccount":"https://ca.test/account","newOrder":"https://ca.test/order"{}}}"#,
                            log.directory_extra
                        );
                        (answer.status(200), made.as_str())
                    }
                    ("HEAD", "/nonce") => {
                        log.fetched.push(fresh);
                        (answer.status(200), "")
                    }
                    ("POST", path) => {
                        let rejected = path == log.reject_path && {
                            log.posts.push((jws_nonce(&body), fresh));
                            log.posts.len() <= log.reject
                        };
                        match path {
                            _ if rejected => (
                                answer
                                    .status(400)
                                    .header("Content-Type", "application/problem+json"),
                                r#"{"type":"urn:ietf:params:acme:error:badNonce","detail":"JWS has an invalid anti-replay nonce","status":400}"#,
                            ),
                            "/account" => (
                                answer
                                    .status(201)
                                    .header("Location", "https://ca.test/account/1"),
                                r#"{"status":"valid"}"#,
                            ),
                            "/order" => {
                                let order = jws_payload(&body);
                                let replaces = order.get("replaces").cloned();
                                log.orders.push(order);
                                match replaces {
                                    Some(_) if log.refuse_replaces => (
                                        answer
                                            .status(409)
                                            .header("Content-Type", "application/problem+json"),
                                        r#"{"type":"urn:ietf:params:acme:error:malformed","detail":"cannot indicate an order replaces certificate with serial 1234, which already has a replacement order","status":409}"#,
                                    ),
                                    _ => {
                                        made = format!(
                                            r#"{{"status":"pending","identifiers":[{{"type":"dns","value":"a.example.com"}}],"authorizations":["https://ca.test/authz/1"],"finalize":"https://ca.test/finalize/1"{}}}"#,
                                            replaces
                                                .map(|r| format!(r#","replaces":{r}"#))
                                                .unwrap_or_default()
                                        );
                                        (
                                            answer
                                                .status(201)
                                                .header("Location", "https://ca.test/order/1"),
                                            made.as_str(),
                                        )
                                    }
                                }
                            }
                            "/order/1" => match log.existing {
                                Some(status) => {
                                    made = format!(
                                        r#"{{"status":"{status}","identifiers":[{{"type":"dns","value":"a.example.com"}}],"authorizations":["https://ca.test/authz/1"],"finalize":"https://ca.test/finalize/1"}}"#
                                    );
                                    (answer.status(200), made.as_str())
                                }
                                None => (
                                    answer
                                        .status(404)
                                        .header("Content-Type", "application/problem+json"),
                                    r#"{"type":"urn:ietf:params:acme:error:malformed","detail":"No order found","status":404}"#,
                                ),
                            },
                            "/authz/1" => (
                                answer.status(200),
                                r#"{"status":"pending","identifier":{"type":"dns","value":"a.example.com"},"challenges":[{"type":"tls-alpn-01","url":"https://ca.test/chall/1","token":"tok","status":"pending"}]}"#,
                            ),
                            _ => (answer.status(404), ""),
                        }
                    }
                    _ => (answer.status(404), ""),
                };
                let answer = answer
                    .body(http_body_util::Full::new(bytes::Bytes::from(
                        text.to_string(),
                    )))
                    .unwrap();
                Ok(instant_acme::BytesResponse::from(answer))
            })
        }
    }

    #[tokio::test]
    async fn bad_nonces_are_retried_with_the_fresh_nonce_a_bounded_number_of_times() {
        let max = MAX_NONCES as usize;
        let dir = tempfile::tempdir().unwrap();
        let settings = AcmeSettings {
            directory: "https://ca.test/dir".into(),
            ..AcmeSettings::new(dir.path())
        };

        // One nonce short of the bound: registered, on the last try.
        let ca = NonceCa::rejecting("/account", max - 1);
        register(&settings, ca.clone())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(account_path(&settings).exists());
        {
            let log = ca.0.lock().unwrap();
            assert_eq!(log.posts.len(), max);
            // Each request after a rejection carries the nonce that rejection
            // gave, but for the first of each call into instant-acme, which
            // fetches one from newNonce (a new call does not see the last
            // rejection's nonce: instant-acme keeps none between calls of
            // Account). Either way, never a nonce used before.
            let mut newnonce = log.fetched.iter();
            for (i, (carried, _)) in log.posts.iter().enumerate() {
                if i % NONCES_PER_CALL as usize == 0 {
                    assert_eq!(Some(carried), newnonce.next(), "request {i}");
                } else {
                    assert_eq!(carried, &log.posts[i - 1].1, "request {i}");
                }
            }
            assert_eq!(newnonce.next(), None);
            assert_eq!(log.fetched.len(), BAD_NONCE_CALLS as usize);
        }

        // A CA that rejects every nonce: exactly the bound, then BadNonce
        // naming the step (not "did not create an account").
        std::fs::remove_file(account_path(&settings)).unwrap();
        let ca = NonceCa::rejecting("/account", usize::MAX);
        let Err(err) = register(&settings, ca.clone()).await else {
            panic!("registered with every nonce rejected");
        };
        assert!(
            matches!(&err, AcmeError::BadNonce { step, .. } if step == "registering an account"),
            "{err:?}"
        );
        assert_eq!(ca.0.lock().unwrap().posts.len(), max);
        assert!(!account_path(&settings).exists());
    }

    /// The step the earlier message got wrong: a CA rejecting every nonce
    /// of "the challenge is ready" is a badNonce while asking it to
    /// validate, not a failed validation; the request went out a bounded
    /// number of times, each with the fresh nonce of the rejection before
    /// (the order keeps it between calls), and the challenge certificate
    /// is taken down again.
    #[tokio::test]
    async fn a_ready_challenge_whose_nonces_are_all_rejected_is_a_bad_nonce() {
        let dir = tempfile::tempdir().unwrap();
        let settings = AcmeSettings {
            directory: "https://ca.test/dir".into(),
            ..AcmeSettings::new(dir.path())
        };
        let ca = NonceCa::rejecting("/chall/1", usize::MAX);
        let challenges = Challenges::default();
        let names = vec!["a.example.com".to_string()];
        let Err(err) = obtain_names(
            &settings,
            &names,
            &challenges,
            ChallengeKind::Auto,
            ca.clone(),
            None,
            None,
        )
        .await
        else {
            panic!("issued with every nonce of the challenge rejected");
        };
        assert!(
            matches!(&err, AcmeError::BadNonce { step, .. } if step == "asking it to validate a.example.com"),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(!text.contains("could not validate"), "{text}");
        let log = ca.0.lock().unwrap();
        assert_eq!(log.posts.len(), MAX_NONCES as usize);
        for (i, pair) in log.posts.windows(2).enumerate() {
            assert_eq!(pair[1].0, pair[0].1, "request {}", i + 1);
        }
        assert!(challenges.names().is_empty());
    }

    /// `acme_profile` against the CA's directory: a profile it does not
    /// list, or a directory listing none, fails before any order, naming
    /// the setting, the profile and what the CA offers; one it lists is
    /// asked for in the order.
    #[tokio::test]
    async fn the_profile_must_be_one_the_directory_lists() {
        let dir = tempfile::tempdir().unwrap();
        let names = vec!["a.example.com".to_string()];
        let settings = |profile: &str| AcmeSettings {
            directory: "https://ca.test/dir".into(),
            profile: Some(profile.into()),
            ..AcmeSettings::new(dir.path())
        };
        let listing = r#","meta":{"profiles":{"shortlived":"Six days","classic":"Ninety days"}}"#;
        for (extra, want) in [
            (listing, "offers the profiles classic, shortlived"),
            ("", "lists no profiles in its directory"),
        ] {
            let ca = NonceCa::with_directory(extra, false);
            let err = obtain_names(
                &settings("tlsserver"),
                &names,
                &Challenges::default(),
                ChallengeKind::Auto,
                ca.clone(),
                None,
                None,
            )
            .await
            .err()
            .unwrap_or_else(|| panic!("issued with a profile the CA does not list"));
            let text = err.to_string();
            assert!(matches!(err, AcmeError::Profile { .. }), "{err:?}");
            assert!(
                text.starts_with(&format!(
                    "acme_profile = \"tlsserver\": the ACME CA at https://ca.test/dir {want}; set \
                     acme_profile to one of its profiles, or remove it"
                )),
                "{text}"
            );
            assert!(
                ca.0.lock().unwrap().orders.is_empty(),
                "an order was placed"
            );
        }

        let orders = orders_placed(
            &settings("shortlived"),
            &names,
            NonceCa::with_directory(listing, false),
        )
        .await;
        assert_eq!(orders.len(), 1);
        assert_eq!(orders[0]["profile"], "shortlived", "{}", orders[0]);
        assert_eq!(orders[0].get("replaces"), None, "{}", orders[0]);
    }

    /// A certificate for `names` signed by a CA of the test (with an
    /// authority key identifier), stored as `obtain` stores one; its ARI
    /// identifier.
    pub(super) fn store_issued_with_aki(settings: &AcmeSettings, names: &[String]) -> String {
        use rcgen::{BasicConstraints, CertifiedIssuer, IsCa};
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
        let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut leaf = CertificateParams::new(names.to_vec()).unwrap();
        leaf.use_authority_key_identifier_extension = true;
        let leaf = leaf.signed_by(&key, &ca).unwrap();
        let chain = format!("{}{}", leaf.pem(), ca.pem());
        let issued = check_issued(chain, key.serialize_pem(), names).unwrap();
        store(settings, names, &issued).unwrap();
        cert_id(&issued.chain_pem).unwrap().to_string()
    }

    /// A renewal's order names the stored certificate in `replaces` when
    /// the CA has ARI (not when it has none: instant-acme would refuse the
    /// order); a CA refusing the replacement gets the order once more
    /// without it.
    #[tokio::test]
    async fn a_renewal_order_replaces_the_stored_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let names = vec!["a.example.com".to_string()];
        let settings = AcmeSettings {
            directory: "https://ca.test/dir".into(),
            ..AcmeSettings::new(dir.path())
        };
        let id = store_issued_with_aki(&settings, &names);
        let ari = r#","renewalInfo":"https://ca.test/renewal-info""#;

        let orders = orders_placed(&settings, &names, NonceCa::with_directory(ari, false)).await;
        assert_eq!(orders.len(), 1, "{orders:?}");
        assert_eq!(orders[0]["replaces"], id.as_str(), "{}", orders[0]);
        assert_eq!(orders[0].get("profile"), None, "{}", orders[0]);

        // Refused as a replacement: once more, without `replaces`.
        let orders = orders_placed(&settings, &names, NonceCa::with_directory(ari, true)).await;
        assert_eq!(orders.len(), 2, "{orders:?}");
        assert_eq!(orders[0]["replaces"], id.as_str(), "{}", orders[0]);
        assert_eq!(orders[1].get("replaces"), None, "{}", orders[1]);

        // No ARI at the CA: one order, replacing nothing.
        let orders = orders_placed(&settings, &names, NonceCa::with_directory("", false)).await;
        assert_eq!(orders.len(), 1, "{orders:?}");
        assert_eq!(orders[0].get("replaces"), None, "{}", orders[0]);
    }

    /// The fleet's account becomes this node's account file (0600) only if
    /// it is an account of this directory.
    #[test]
    fn an_account_from_the_fleet_must_be_of_this_directory() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let settings = AcmeSettings {
            directory: "https://ca.test/dir".into(),
            ..AcmeSettings::new(dir.path())
        };
        let credentials = |directory: &str| {
            serde_json::json!({
                "id": "https://ca.test/account/1",
                "key_pkcs8": "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg",
                "directory": directory,
            })
            .to_string()
        };
        let other = credentials("https://other.test/dir");
        let err = use_account(&settings, other.as_bytes()).unwrap_err();
        assert!(matches!(err, AcmeError::FleetAccount { .. }), "{err:?}");
        assert!(err.to_string().contains("other.test"), "{err}");
        assert!(use_account(&settings, b"not json").is_err());
        assert!(!account_path(&settings).exists());

        let ours = credentials("https://ca.test/dir");
        use_account(&settings, ours.as_bytes()).unwrap();
        let path = account_path(&settings);
        assert_eq!(std::fs::read(&path).unwrap(), ours.as_bytes());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    /// A [`Track`] that resumes `resume` (a URL, and a key if kept) and
    /// notes each call.
    struct Noting {
        resume: Option<(&'static str, Option<String>)>,
        calls: std::sync::Mutex<Vec<String>>,
    }

    impl Track for Noting {
        fn resume(&self) -> Option<Resume> {
            self.resume.as_ref().map(|(url, key)| Resume {
                url: url.to_string(),
                key_pem: key.clone(),
            })
        }
        fn found<'a>(&'a self, status: Option<&'a str>, resumed: bool) -> PublishFuture<'a> {
            self.calls
                .lock()
                .unwrap()
                .push(format!("found {status:?} {resumed}"));
            Box::pin(async { Ok(()) })
        }
        fn placed<'a>(&'a self, url: &'a str) -> PublishFuture<'a> {
            self.calls.lock().unwrap().push(format!("placed {url}"));
            Box::pin(async { Ok(()) })
        }
        fn keyed<'a>(&'a self, url: &'a str, _key_pem: &'a str) -> PublishFuture<'a> {
            self.calls.lock().unwrap().push(format!("keyed {url}"));
            Box::pin(async { Ok(()) })
        }
    }

    /// An order kept by another process: fetched from the CA and gone on
    /// with while pending (no new order); invalid, unknown to the CA, or
    /// finalized with a key that was not kept, it is forgotten and a new
    /// order placed, which is kept. Without a kept order, the new one is
    /// kept as soon as it is placed.
    #[tokio::test]
    async fn a_kept_order_is_resumed_or_replaced_by_what_the_ca_says() {
        let dir = tempfile::tempdir().unwrap();
        let names = vec!["a.example.com".to_string()];
        let settings = AcmeSettings {
            directory: "https://ca.test/dir".into(),
            ..AcmeSettings::new(dir.path())
        };
        let url = "https://ca.test/order/1";
        for (existing, resume, calls, orders) in [
            (
                Some("pending"),
                true,
                vec!["found Some(\"pending\") true"],
                0,
            ),
            (
                Some("invalid"),
                true,
                vec![
                    "found Some(\"invalid\") false",
                    "placed https://ca.test/order/1",
                ],
                1,
            ),
            (
                Some("valid"),
                true,
                vec![
                    "found Some(\"valid\") false",
                    "placed https://ca.test/order/1",
                ],
                1,
            ),
            (
                None,
                true,
                vec!["found None false", "placed https://ca.test/order/1"],
                1,
            ),
            (None, false, vec!["placed https://ca.test/order/1"], 1),
        ] {
            let ca = NonceCa::with_directory("", false);
            ca.0.lock().unwrap().existing = existing;
            let track = Noting {
                resume: resume.then_some((url, None)),
                calls: Default::default(),
            };
            // It ends at the challenge, which this CA does not know.
            let _ = obtain_names(
                &settings,
                &names,
                &Challenges::default(),
                ChallengeKind::Auto,
                ca.clone(),
                None,
                Some(&track),
            )
            .await;
            assert_eq!(*track.calls.lock().unwrap(), calls, "{existing:?}");
            assert_eq!(ca.0.lock().unwrap().orders.len(), orders, "{existing:?}");
        }

        // A CA that refuses every nonce of the fetch says nothing of the
        // order: it is neither forgotten nor replaced.
        let ca = NonceCa::rejecting("/order/1", usize::MAX);
        ca.0.lock().unwrap().existing = Some("pending");
        let track = Noting {
            resume: Some((url, None)),
            calls: Default::default(),
        };
        let err = obtain_names(
            &settings,
            &names,
            &Challenges::default(),
            ChallengeKind::Auto,
            ca.clone(),
            None,
            Some(&track),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, AcmeError::BadNonce { .. }), "{err:?}");
        assert!(track.calls.lock().unwrap().is_empty());
        assert!(ca.0.lock().unwrap().orders.is_empty());
    }

    /// The orders the fake CA `ca` received while `obtain_names` ran
    /// against it (it has no challenge to validate: only the orders count).
    async fn orders_placed(
        settings: &AcmeSettings,
        names: &[String],
        ca: NonceCa,
    ) -> Vec<serde_json::Value> {
        let _ = obtain_names(
            settings,
            names,
            &Challenges::default(),
            ChallengeKind::Auto,
            ca.clone(),
            None,
            None,
        )
        .await;
        let orders = ca.0.lock().unwrap().orders.clone();
        orders
    }

    #[test]
    fn renews_two_thirds_in() {
        let nb = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let na = nb + Duration::from_secs(90 * 86400);
        assert_eq!(renew_at(nb, na), nb + Duration::from_secs(60 * 86400));
        // Inverted or absurd validity: no panic, renew by not_after.
        assert_eq!(renew_at(na, nb), nb);
        let far = UNIX_EPOCH + Duration::from_secs(u64::MAX / 4);
        assert!(renew_at(UNIX_EPOCH, far) <= far);
    }

    #[test]
    fn backoff_doubles_to_a_day() {
        assert_eq!(retry_delay(0), Duration::ZERO);
        assert_eq!(retry_delay(1), Duration::from_secs(60));
        assert_eq!(retry_delay(2), Duration::from_secs(120));
        assert_eq!(retry_delay(5), Duration::from_secs(960));
        assert_eq!(retry_delay(11), Duration::from_secs(61_440));
        assert_eq!(retry_delay(12), Duration::from_secs(86_400));
        assert_eq!(retry_delay(u32::MAX), Duration::from_secs(86_400));
    }

    #[test]
    fn challenges_are_picked_by_kind_what_runs_and_wildcards() {
        use ChallengeType::{Dns01, Http01, TlsAlpn01};
        let all = |_: ChallengeType| true;
        let can = |http, dns| Can { http, dns };
        let pick = |kind, c, wildcard| pick_challenge(kind, c, wildcard, all);
        // "auto": dns-01 for wildcards only, when it can be answered.
        assert_eq!(
            pick(ChallengeKind::Auto, can(true, true), false),
            Some(TlsAlpn01)
        );
        assert_eq!(
            pick(ChallengeKind::Auto, can(true, true), true),
            Some(Dns01)
        );
        assert_eq!(pick(ChallengeKind::Auto, can(true, false), true), None);
        assert_eq!(
            pick(ChallengeKind::Dns01, can(true, true), false),
            Some(Dns01)
        );
        assert_eq!(pick(ChallengeKind::Dns01, can(true, false), false), None);
        // No other challenge proves a wildcard, whatever runs.
        assert_eq!(pick(ChallengeKind::Http01, can(true, true), true), None);
        assert_eq!(pick(ChallengeKind::TlsAlpn01, can(true, true), true), None);
        assert_eq!(
            pick(ChallengeKind::Http01, can(true, true), false),
            Some(Http01)
        );
        // "auto" falls back to http-01 when the CA offers no tls-alpn-01.
        let no_alpn = |t: ChallengeType| t != TlsAlpn01;
        assert_eq!(
            pick_challenge(ChallengeKind::Auto, can(true, true), false, no_alpn),
            Some(Http01)
        );
        assert!(wanted(ChallengeKind::Http01, can(true, true), true).contains("dns-01 only"));
        assert!(wanted(ChallengeKind::Dns01, can(true, false), false).contains("acme_dns_server"));
    }

    #[test]
    fn names_are_checked_and_normalized() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            normalize(&s(&["A.Example.COM.", "a.example.com", "b.example.com"])).unwrap(),
            s(&["a.example.com", "b.example.com"])
        );
        // A wildcard is a name here (DNS-01 proves it); one label of it.
        assert_eq!(
            normalize(&s(&["*.Example.com", "example.com"])).unwrap(),
            s(&["*.example.com", "example.com"])
        );
        for bad in [
            "",
            "*.com",
            "*.*.example.com",
            "a.*.example.com",
            "*example.com",
            "*.127.0.0.1",
            "127.0.0.1",
            "::1",
            "../etc",
            "a/b.com",
            "..",
            "localhost",
        ] {
            assert!(normalize(&s(&[bad])).is_err(), "{bad:?} accepted");
        }
        assert!(matches!(normalize(&[]), Err(AcmeError::NoNames)));
    }

    #[test]
    fn placeholder_names_its_names_and_loads() {
        let names = vec!["a.example.com".to_string(), "b.example.com".to_string()];
        let (chain, key) = placeholder(&names).unwrap();
        let issued = check_issued(chain, key, &names).unwrap();
        assert!(issued.not_before < SystemTime::now() && SystemTime::now() < issued.not_after);
    }

    #[test]
    fn stored_certificates_round_trip_and_mismatches_read_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let settings = AcmeSettings::new(dir.path());
        let names = vec!["a.example.com".to_string()];
        assert_eq!(load_stored(&settings, &names).unwrap(), None);
        let (chain, key) = placeholder(&names).unwrap();
        let issued = check_issued(chain, key, &names).unwrap();
        store(&settings, &names, &issued).unwrap();
        assert_eq!(
            load_stored(&settings, &names).unwrap(),
            Some(issued.clone())
        );
        let key_file = dir.path().join("certs/a.example.com/key.pem");
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&key_file).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        // Other names: not what was stored.
        let other = vec!["a.example.com".to_string(), "c.example.com".to_string()];
        assert_eq!(load_stored(&settings, &other).unwrap(), None);
        // A key that is not the leaf's (a crash between the two renames).
        let (_, other_key) = placeholder(&names).unwrap();
        write_atomic(&key_file, other_key.as_bytes(), 0o600).unwrap();
        assert_eq!(load_stored(&settings, &names).unwrap(), None);
    }

    #[test]
    fn challenge_config_answers_only_acme_tls() {
        let challenges = Challenges::default();
        let key = challenge::challenge_key("a.example.com", &[7u8; 32]).unwrap();
        let guard = challenges.answer("A.example.com", key);
        assert!(challenges.get("a.EXAMPLE.com").is_some());
        let config = challenges
            .server_config(std::sync::Arc::new(
                rustls::crypto::aws_lc_rs::default_provider(),
            ))
            .unwrap();
        assert_eq!(config.alpn_protocols, vec![ACME_TLS_ALPN.to_vec()]);
        assert_eq!(config.send_tls13_tickets, 0);
        assert!(!config.ticketer.enabled());
        drop(guard);
        assert!(challenges.get("a.example.com").is_none());
    }
}
