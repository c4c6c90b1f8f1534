//! ACME DNS-01 (RFC 8555 section 8.4) answered through the zone's own
//! authoritative server: the TXT record `_acme-challenge.<name>` is added
//! with an RFC 2136 dynamic update signed with TSIG (RFC 8945), checked to
//! be served, and deleted again (that exact record) once the CA is done.
//! This module owns the TSIG key file (bind's `key "NAME" { algorithm …;
//! secret "…"; };`, as `tsig-keygen` writes it), the few DNS messages that
//! takes (an SOA query to find the zone, the signed UPDATE, a TXT query)
//! over TCP, and the guard that removes what was added.
//!
//! Written here rather than taken from hickory-proto: its TSIG lives behind
//! its DNSSEC features and brings a whole DNS stack (IDNA/ICU tables, its
//! own rand line) into the tree for three small messages; what is needed
//! is a message builder, a bounds-checked reader, and HMAC (aws-lc-rs,
//! already the TLS provider). The reader never panics on any input (a unit
//! test feeds it random bytes).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::hmac;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The settings naming the server (`acme_dns_server`) and the key
/// (`acme_dns_tsig_key_file`), for the words of an error.
pub(crate) const SERVER_SETTING: &str = "acme_dns_server";
pub(crate) const KEY_SETTING: &str = "acme_dns_tsig_key_file";

/// How long one exchange with the DNS server may take (connect, send,
/// answer).
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);
/// The TTL of the challenge record: short, it is deleted within minutes.
const TXT_TTL: u32 = 60;
/// The clock skew allowed between us and the server (RFC 8945 suggests
/// 300 s).
const FUDGE: u16 = 300;

const TYPE_SOA: u16 = 6;
const TYPE_TXT: u16 = 16;
const TYPE_TSIG: u16 = 250;
const CLASS_IN: u16 = 1;
const CLASS_NONE: u16 = 254;
const CLASS_ANY: u16 = 255;
const OPCODE_QUERY: u16 = 0;
const OPCODE_UPDATE: u16 = 5;
/// ID, flags and the four counts.
const HEADER_LEN: usize = 12;

/// A TSIG HMAC algorithm (RFC 8945 section 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TsigAlgorithm {
    HmacSha256,
    HmacSha512,
}

impl TsigAlgorithm {
    /// The algorithm's name as bind writes it and as it goes on the wire.
    pub fn name(self) -> &'static str {
        match self {
            TsigAlgorithm::HmacSha256 => "hmac-sha256",
            TsigAlgorithm::HmacSha512 => "hmac-sha512",
        }
    }

    fn hmac(self) -> hmac::Algorithm {
        match self {
            TsigAlgorithm::HmacSha256 => hmac::HMAC_SHA256,
            TsigAlgorithm::HmacSha512 => hmac::HMAC_SHA512,
        }
    }

    fn from_name(name: &str) -> Option<TsigAlgorithm> {
        match name.trim_end_matches('.').to_ascii_lowercase().as_str() {
            "hmac-sha256" => Some(TsigAlgorithm::HmacSha256),
            "hmac-sha512" => Some(TsigAlgorithm::HmacSha512),
            _ => None,
        }
    }
}

/// A TSIG key: its name, algorithm and secret.
#[derive(Clone, PartialEq, Eq)]
pub struct TsigKey {
    /// Lowercase, without the final dot.
    pub name: String,
    pub algorithm: TsigAlgorithm,
    secret: zeroize::Zeroizing<Vec<u8>>,
}

// By hand: the secret never goes into a log.
impl std::fmt::Debug for TsigKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TsigKey")
            .field("name", &self.name)
            .field("algorithm", &self.algorithm)
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl TsigKey {
    /// A key from bind's `key` clause, the format `tsig-keygen NAME`
    /// writes: `key "NAME" { algorithm hmac-sha256; secret "BASE64"; };`.
    /// Errs with what is wrong, in words for an operator.
    pub fn parse(text: &str) -> Result<TsigKey, KeyFileError> {
        let tokens = tokens(text)?;
        let mut it = tokens.iter().map(String::as_str);
        let want = |got: Option<&str>, what: &'static str| match got {
            Some(g) if g == what => Ok(()),
            found => Err(KeyFileError::Expected {
                what,
                found: found.map(str::to_string),
            }),
        };
        want(it.next(), "key")?;
        let name = it
            .next()
            .filter(|n| !matches!(*n, "{" | "}" | ";"))
            .ok_or(KeyFileError::NoName)?;
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if let Err(source) = encode_name(&name) {
            return Err(KeyFileError::BadKeyName { name, source });
        }
        want(it.next(), "{")?;
        let (mut algorithm, mut secret) = (None, None);
        loop {
            match it.next() {
                Some("}") => break,
                Some("algorithm") => {
                    let a = it.next().ok_or(KeyFileError::NoValue("algorithm"))?;
                    algorithm = Some(
                        TsigAlgorithm::from_name(a)
                            .ok_or_else(|| KeyFileError::UnsupportedAlgorithm(a.to_string()))?,
                    );
                    want(it.next(), ";")?;
                }
                Some("secret") => {
                    let s = it.next().ok_or(KeyFileError::NoValue("secret"))?;
                    use base64::Engine;
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(s)
                        .map_err(KeyFileError::SecretNotBase64)?;
                    if bytes.is_empty() {
                        return Err(KeyFileError::EmptySecret);
                    }
                    secret = Some(zeroize::Zeroizing::new(bytes));
                    want(it.next(), ";")?;
                }
                Some(other) => return Err(KeyFileError::Unexpected(other.to_string())),
                None => return Err(KeyFileError::ClauseNotClosed),
            }
        }
        want(it.next(), ";")?;
        if let Some(more) = it.next() {
            return Err(KeyFileError::Trailing(more.to_string()));
        }
        Ok(TsigKey {
            name,
            algorithm: algorithm.ok_or(KeyFileError::NoAlgorithm)?,
            secret: secret.ok_or(KeyFileError::NoSecret)?,
        })
    }

    /// The key in `path` (read as tlsfront reads its other secrets:
    /// through the parent when there is one).
    pub fn read(path: &Path) -> Result<TsigKey, DnsError> {
        let bad = |source: KeyFileError| DnsError::KeyFile {
            path: path.to_path_buf(),
            source,
        };
        let bytes = zeroize::Zeroizing::new(
            crate::safe_open::read(path).map_err(|e| bad(KeyFileError::Read(e)))?,
        );
        let text = std::str::from_utf8(&bytes).map_err(|_| bad(KeyFileError::NotUtf8))?;
        TsigKey::parse(text).map_err(bad)
    }
}

/// bind's config tokens: quoted strings, `{`, `}`, `;` and words; `#`,
/// `//` and `/* */` comments skipped.
fn tokens(text: &str) -> Result<Vec<String>, KeyFileError> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {}
            '#' => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = ' ';
                loop {
                    match chars.next() {
                        Some('/') if last == '*' => break,
                        Some(c) => last = c,
                        None => return Err(KeyFileError::UnterminatedComment),
                    }
                }
            }
            '{' | '}' | ';' => out.push(c.to_string()),
            '"' => {
                let mut s = String::new();
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some(c) => s.push(c),
                        None => return Err(KeyFileError::UnterminatedString),
                    }
                }
                out.push(s);
            }
            c => {
                let mut s = c.to_string();
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() || matches!(c, '{' | '}' | ';' | '"') {
                        break;
                    }
                    s.push(c);
                    chars.next();
                }
                out.push(s);
            }
        }
    }
    Ok(out)
}

/// What is wrong with the TSIG key file: reading it, or bind's `key`
/// clause in it (what [`TsigKey::parse`] refuses), in words for an
/// operator. [`DnsError::KeyFile`] adds the file, the setting and the fix.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("{0}")]
    Read(#[source] std::io::Error),
    #[error("it is not UTF-8 text")]
    NotUtf8,
    #[error("a comment does not end")]
    UnterminatedComment,
    #[error("a quoted string does not end")]
    UnterminatedString,
    /// A token other than the one the clause needs there (`None`: the
    /// text ended).
    #[error("expected {what:?}, found {}", match found {
        Some(found) => format!("{found:?}"),
        None => "the end of the file".to_string(),
    })]
    Expected {
        what: &'static str,
        found: Option<String>,
    },
    #[error("the key clause has no name")]
    NoName,
    #[error("the key name {name:?}: {source}")]
    BadKeyName {
        name: String,
        #[source]
        source: WireError,
    },
    /// `algorithm` or `secret` with nothing after it.
    #[error("{0} without a value")]
    NoValue(&'static str),
    #[error("algorithm {0:?} is not supported: use hmac-sha256 or hmac-sha512")]
    UnsupportedAlgorithm(String),
    #[error("the secret is not base64: {0}")]
    SecretNotBase64(#[source] base64::DecodeError),
    #[error("the secret is empty")]
    EmptySecret,
    #[error("unexpected {0:?} in the key clause")]
    Unexpected(String),
    #[error("the key clause does not end with \"}};\"")]
    ClauseNotClosed,
    #[error("{0:?} after the key clause: give one key")]
    Trailing(String),
    #[error("the key clause has no algorithm")]
    NoAlgorithm,
    #[error("the key clause has no secret")]
    NoSecret,
}

/// What is wrong with a DNS message this module writes (a name or a TXT
/// value that does not fit) or reads (a malformed answer, or one whose
/// TSIG record does not check). [`DnsError`] adds the server, the message
/// and the setting.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    // Writing.
    #[error("an empty label (two dots in a row, or a leading dot)")]
    EmptyLabel,
    #[error("a label is longer than 63 bytes")]
    LabelTooLong,
    #[error("the name is longer than 255 bytes")]
    NameTooLong,
    #[error("the TXT value is longer than 255 bytes")]
    TxtTooLong,
    // Reading.
    #[error("the message ends inside a record")]
    Truncated,
    #[error("the message ends inside a name")]
    TruncatedName,
    #[error("a name longer than 255 bytes")]
    LongNameRead,
    #[error("a name pointer that does not point backwards")]
    BadPointer,
    #[error("a name pointer into the message header")]
    PointerIntoHeader,
    #[error("a name with a reserved label type")]
    ReservedLabelType,
    #[error("a TSIG record that is not the last one")]
    TsigNotLast,
    #[error("the TSIG record's length does not match its content")]
    TsigLength,
    #[error("bytes after the last record")]
    TrailingBytes,
    // Checking the TSIG record of an answer.
    #[error("the answer is not signed")]
    NotSigned,
    #[error("signed with the key {name:?}")]
    WrongKey { name: String },
    #[error("signed with the algorithm {name:?}")]
    WrongAlgorithm { name: String },
    #[error("TSIG error {0}")]
    TsigError(u16),
    #[error("the TSIG record's place is out of the message")]
    TsigOutside,
    #[error("the message is shorter than its header")]
    ShortHeader,
    #[error("the MAC is wrong")]
    BadMac,
    #[error("its time is outside the fudge: check both clocks (NTP)")]
    TimeOutsideFudge,
}

/// Where DNS-01 answers go: the primary server taking updates and the
/// key that signs them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsUpdate {
    /// `acme_dns_server`: updates and queries go here over TCP.
    pub server: SocketAddr,
    /// `acme_dns_tsig_key_file`, for the words of an error.
    pub key_file: PathBuf,
    pub key: Arc<TsigKey>,
}

/// What went wrong talking to the DNS server, naming the setting to fix.
#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    #[error("the TSIG key file {} (setting {KEY_SETTING}): {source}; give bind's key clause as `tsig-keygen -a hmac-sha256 NAME` writes it", path.display())]
    KeyFile {
        path: PathBuf,
        #[source]
        source: KeyFileError,
    },
    #[error("could not {what} through the DNS server {server} (setting {SERVER_SETTING}): {source}; check that it is the zone's primary and takes DNS over TCP on that port")]
    Transport {
        server: SocketAddr,
        what: String,
        /// The connection's error, or `TimedOut` after the exchange's
        /// bound.
        #[source]
        source: std::io::Error,
    },
    #[error("the DNS server {server} (setting {SERVER_SETTING}) answered {rcode} to {what}{tsig}")]
    Refused {
        server: SocketAddr,
        what: String,
        rcode: String,
        /// What to check about the key, when the answer concerns it.
        tsig: String,
    },
    #[error("the answer of the DNS server {server} (setting {SERVER_SETTING}) to {what} is unusable: {source}")]
    BadAnswer {
        server: SocketAddr,
        what: String,
        #[source]
        source: WireError,
    },
    #[error("the answer of the DNS server {server} (setting {SERVER_SETTING}) to {what} is unusable: it is not the answer to the message sent (another ID, or not a response)")]
    NotTheAnswer { server: SocketAddr, what: String },
    #[error("the answer of the DNS server {server} (setting {SERVER_SETTING}) to {what} is unusable: its TSIG signature does not check ({source}): check that the key in {} (setting {KEY_SETTING}) is the one the server has", key_file.display())]
    BadSignature {
        server: SocketAddr,
        what: String,
        key_file: PathBuf,
        #[source]
        source: WireError,
    },
    #[error("the DNS server {server} (setting {SERVER_SETTING}) is not authoritative for {name} (no SOA record in its answer): set it to the primary server of the zone holding {name}")]
    NoZone { server: SocketAddr, name: String },
    #[error("{name} cannot be a DNS name: {source}")]
    BadName {
        name: String,
        #[source]
        source: WireError,
    },
    #[error("the DNS server {server} (setting {SERVER_SETTING}) took the update but does not serve the TXT record {name} afterwards: check that it is the zone's primary and that the update is not redirected elsewhere")]
    NotServed { server: SocketAddr, name: String },
}

/// The TXT records this order added, removed by [`Published::remove`], or
/// (if the order's future is dropped first, as on a timeout) by a task the
/// drop spawns.
pub(crate) struct Published {
    dns: DnsUpdate,
    /// (zone, owner name, value) of each record added.
    records: Vec<(String, String, String)>,
}

impl Published {
    pub(crate) fn new(dns: DnsUpdate) -> Published {
        Published {
            dns,
            records: Vec::new(),
        }
    }

    /// Answer DNS-01 for `name` (`*.example.com` or `example.com`) with
    /// `value` (the key authorization's digest, base64url): find the zone,
    /// add the TXT record, and check that it is served.
    pub(crate) async fn add(&mut self, name: &str, value: &str) -> Result<(), DnsError> {
        let base = name.strip_prefix("*.").unwrap_or(name);
        let owner = format!("_acme-challenge.{}", base.trim_end_matches('.')).to_ascii_lowercase();
        let zone = find_zone(&self.dns, &owner).await?;
        update(&self.dns, &zone, &owner, value, true).await?;
        self.records
            .push((zone.clone(), owner.clone(), value.to_string()));
        tracing::debug!(record = %owner, %zone, server = %self.dns.server, "DNS-01 TXT record added");
        if !txt_served(&self.dns, &owner, value).await? {
            return Err(DnsError::NotServed {
                server: self.dns.server,
                name: owner,
            });
        }
        Ok(())
    }

    /// Delete every record added (each exactly: other TXT records at the
    /// same name stay). Failures are logged: the CA is done with them
    /// either way, and a left-over record only names a spent challenge.
    pub(crate) async fn remove(mut self) {
        let records = std::mem::take(&mut self.records);
        remove_all(&self.dns, records).await;
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        if self.records.is_empty() {
            return;
        }
        let records = std::mem::take(&mut self.records);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let dns = self.dns.clone();
                runtime.spawn(async move { remove_all(&dns, records).await });
            }
            Err(_) => {
                for (_, owner, _) in records {
                    tracing::warn!(record = %owner, "DNS-01 TXT record left in place: no runtime to delete it");
                }
            }
        }
    }
}

async fn remove_all(dns: &DnsUpdate, records: Vec<(String, String, String)>) {
    for (zone, owner, value) in records {
        match update(dns, &zone, &owner, &value, false).await {
            Ok(()) => tracing::debug!(record = %owner, "DNS-01 TXT record deleted"),
            Err(e) => tracing::warn!(record = %owner, "DNS-01 TXT record not deleted: {e}"),
        }
    }
}

/// The zone holding `owner`: the owner of the SOA record in the answer
/// (`owner` is the apex) or in the authority section (any name inside).
async fn find_zone(dns: &DnsUpdate, owner: &str) -> Result<String, DnsError> {
    let what = format!("the SOA query for {owner}");
    let id = random_id();
    let query = query_message(id, owner, TYPE_SOA)?;
    let answer = exchange(dns, &query, &what).await?;
    let message = parse(&answer).map_err(|source| bad_answer(dns, &what, source))?;
    check_id(dns, &message, id, &what)?;
    // NXDOMAIN is fine: `_acme-challenge` does not exist yet, and the
    // authority section still names the zone.
    if !matches!(message.rcode, 0 | 3) {
        return Err(refused(dns, &what, message.rcode, None));
    }
    message
        .answers
        .iter()
        .chain(&message.authority)
        .find(|rr| rr.rtype == TYPE_SOA && rr.class == CLASS_IN)
        .map(|rr| rr.name.clone())
        .ok_or_else(|| DnsError::NoZone {
            server: dns.server,
            name: owner.to_string(),
        })
}

/// Whether the server answers a TXT query for `owner` with `value`.
async fn txt_served(dns: &DnsUpdate, owner: &str, value: &str) -> Result<bool, DnsError> {
    let what = format!("the TXT query for {owner}");
    let id = random_id();
    let query = query_message(id, owner, TYPE_TXT)?;
    let answer = exchange(dns, &query, &what).await?;
    let message = parse(&answer).map_err(|source| bad_answer(dns, &what, source))?;
    check_id(dns, &message, id, &what)?;
    Ok(message.answers.iter().any(|rr| {
        rr.rtype == TYPE_TXT && rr.name == owner && txt_strings(&rr.rdata) == [value.as_bytes()]
    }))
}

/// Add (`add`) or delete exactly the record `owner TXT value` in `zone`,
/// with a signed UPDATE whose signed answer is checked.
async fn update(
    dns: &DnsUpdate,
    zone: &str,
    owner: &str,
    value: &str,
    add: bool,
) -> Result<(), DnsError> {
    let what = format!(
        "the update {} the TXT record {owner} in the zone {zone}",
        if add { "adding" } else { "deleting" }
    );
    let id = random_id();
    let rdata = txt_rdata(value).map_err(|source| DnsError::BadName {
        name: format!("{owner} TXT {value:?}"),
        source,
    })?;
    let mut m = Message::new(id, OPCODE_UPDATE << 11);
    // Zone section (one), no prerequisites, one update.
    m.counts = [1, 0, 1, 0];
    let bad_name = |name: &str| {
        let name = name.to_string();
        move |source| DnsError::BadName { name, source }
    };
    m.name(zone).map_err(bad_name(zone))?;
    m.u16(TYPE_SOA);
    m.u16(CLASS_IN);
    m.name(owner).map_err(bad_name(owner))?;
    m.u16(TYPE_TXT);
    // RFC 2136 section 2.5.1 adds with the zone's class; 2.5.4 deletes one
    // RR with class NONE and TTL 0.
    m.u16(if add { CLASS_IN } else { CLASS_NONE });
    m.u32(if add { TXT_TTL } else { 0 });
    m.u16(rdata.len() as u16);
    m.bytes.extend_from_slice(&rdata);
    let now = unix_now();
    let (signed, request_mac) = sign(&m.finish(), &dns.key, now, &[]);
    let answer = exchange(dns, &signed, &what).await?;
    let message = parse(&answer).map_err(|source| bad_answer(dns, &what, source))?;
    check_id(dns, &message, id, &what)?;
    let tsig = verify(&answer, &message, &dns.key, &request_mac, unix_now());
    if message.rcode != 0 {
        return Err(refused(dns, &what, message.rcode, message.tsig_error()));
    }
    tsig.map_err(|source| DnsError::BadSignature {
        server: dns.server,
        what,
        key_file: dns.key_file.clone(),
        source,
    })
}

fn bad_answer(dns: &DnsUpdate, what: &str, source: WireError) -> DnsError {
    DnsError::BadAnswer {
        server: dns.server,
        what: what.to_string(),
        source,
    }
}

fn check_id(dns: &DnsUpdate, message: &Parsed, id: u16, what: &str) -> Result<(), DnsError> {
    if message.id != id || !message.response {
        return Err(DnsError::NotTheAnswer {
            server: dns.server,
            what: what.to_string(),
        });
    }
    Ok(())
}

fn refused(dns: &DnsUpdate, what: &str, rcode: u16, tsig_error: Option<u16>) -> DnsError {
    let name = |code: u16| match code {
        1 => "FORMERR".to_string(),
        2 => "SERVFAIL".to_string(),
        3 => "NXDOMAIN".to_string(),
        4 => "NOTIMP".to_string(),
        5 => "REFUSED".to_string(),
        6 => "YXDOMAIN".to_string(),
        7 => "YXRRSET".to_string(),
        8 => "NXRRSET".to_string(),
        9 => "NOTAUTH".to_string(),
        10 => "NOTZONE".to_string(),
        16 => "BADSIG".to_string(),
        17 => "BADKEY".to_string(),
        18 => "BADTIME".to_string(),
        22 => "BADTRUNC".to_string(),
        c => format!("rcode {c}"),
    };
    let mut rcode_text = name(rcode);
    if let Some(e) = tsig_error.filter(|e| *e != 0) {
        rcode_text = format!("{rcode_text} (TSIG error {})", name(e));
    }
    let key = format!(
        "the TSIG key {:?} in {} (setting {KEY_SETTING})",
        dns.key.name,
        dns.key_file.display()
    );
    let tsig = match (rcode, tsig_error.unwrap_or(0)) {
        (_, 16 | 17) | (9, _) => format!(
            ": check that {key} is the one the server has for the zone (same name, algorithm \
             and secret)"
        ),
        (_, 18) => ": the clocks of this host and the DNS server differ by more than 5 \
                     minutes: set both right (NTP)"
            .to_string(),
        (5, _) => format!(
            ": check that the zone's update policy (bind: update-policy or allow-update) \
             grants {key} this name"
        ),
        _ => String::new(),
    };
    DnsError::Refused {
        server: dns.server,
        what: what.to_string(),
        rcode: rcode_text,
        tsig,
    }
}

fn random_id() -> u16 {
    let mut id = [0u8; 2];
    // A failed fill leaves a fixed ID: the answer is still matched by the
    // connection it comes on.
    let _ = aws_lc_rs::rand::fill(&mut id);
    u16::from_be_bytes(id)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// One message out and its answer back, over a fresh TCP connection (RFC
/// 7766: two-byte length, then the message).
async fn exchange(dns: &DnsUpdate, message: &[u8], what: &str) -> Result<Vec<u8>, DnsError> {
    let fail = |source: std::io::Error| DnsError::Transport {
        server: dns.server,
        what: what.to_string(),
        source,
    };
    let work = async {
        let mut stream = tokio::net::TcpStream::connect(dns.server).await?;
        let mut out = Vec::with_capacity(message.len() + 2);
        out.extend_from_slice(&(message.len() as u16).to_be_bytes());
        out.extend_from_slice(message);
        stream.write_all(&out).await?;
        let len = stream.read_u16().await? as usize;
        let mut answer = vec![0; len];
        stream.read_exact(&mut answer).await?;
        Ok::<_, std::io::Error>(answer)
    };
    match tokio::time::timeout(EXCHANGE_TIMEOUT, work).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) => Err(fail(e)),
        Err(_) => Err(fail(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {} s", EXCHANGE_TIMEOUT.as_secs()),
        ))),
    }
}

/// A DNS message being written: the header's counts are set at the end.
struct Message {
    bytes: Vec<u8>,
    /// QD/ZO, AN/PR, NS/UP, AR counts.
    counts: [u16; 4],
}

impl Message {
    fn new(id: u16, flags: u16) -> Message {
        let mut bytes = Vec::with_capacity(512);
        bytes.extend_from_slice(&id.to_be_bytes());
        bytes.extend_from_slice(&flags.to_be_bytes());
        bytes.extend_from_slice(&[0; 8]);
        Message {
            bytes,
            counts: [0; 4],
        }
    }

    fn u16(&mut self, v: u16) {
        self.bytes.extend_from_slice(&v.to_be_bytes());
    }

    fn u32(&mut self, v: u32) {
        self.bytes.extend_from_slice(&v.to_be_bytes());
    }

    fn name(&mut self, name: &str) -> Result<(), WireError> {
        self.bytes.extend_from_slice(&encode_name(name)?);
        Ok(())
    }

    fn finish(mut self) -> Vec<u8> {
        for (i, c) in self.counts.iter().enumerate() {
            self.bytes[4 + 2 * i..6 + 2 * i].copy_from_slice(&c.to_be_bytes());
        }
        self.bytes
    }
}

/// A query for `name`/`rtype` (class IN), recursion not desired: the
/// server answers from its own zones.
fn query_message(id: u16, name: &str, rtype: u16) -> Result<Vec<u8>, DnsError> {
    let mut m = Message::new(id, OPCODE_QUERY << 11);
    m.counts[0] = 1;
    m.name(name).map_err(|source| DnsError::BadName {
        name: name.to_string(),
        source,
    })?;
    m.u16(rtype);
    m.u16(CLASS_IN);
    Ok(m.finish())
}

/// `name` in wire form, lowercased (TSIG's canonical form, and what the
/// updates use throughout), uncompressed.
fn encode_name(name: &str) -> Result<Vec<u8>, WireError> {
    let name = name.trim_end_matches('.');
    let mut out = Vec::with_capacity(name.len() + 2);
    if !name.is_empty() {
        for label in name.split('.') {
            if label.is_empty() {
                return Err(WireError::EmptyLabel);
            }
            if label.len() > 63 {
                return Err(WireError::LabelTooLong);
            }
            out.push(label.len() as u8);
            out.extend(label.bytes().map(|b| b.to_ascii_lowercase()));
        }
    }
    out.push(0);
    if out.len() > 255 {
        return Err(WireError::NameTooLong);
    }
    Ok(out)
}

/// A TXT record's RDATA holding `value` as one string.
fn txt_rdata(value: &str) -> Result<Vec<u8>, WireError> {
    if value.len() > 255 {
        return Err(WireError::TxtTooLong);
    }
    let mut out = vec![value.len() as u8];
    out.extend_from_slice(value.as_bytes());
    Ok(out)
}

/// The strings of a TXT RDATA (an empty list if it is malformed).
fn txt_strings(rdata: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = rdata;
    while let Some((&len, tail)) = rest.split_first() {
        let Some((s, tail)) = tail.split_at_checked(len as usize) else {
            return Vec::new();
        };
        out.push(s);
        rest = tail;
    }
    out
}

/// The TSIG variables (RFC 8945 section 4.3.3) after the message.
fn tsig_variables(key: &TsigKey, time: u64, fudge: u16, error: u16, other: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(128);
    // The key name was checked when the key was read.
    v.extend_from_slice(&encode_name(&key.name).unwrap_or_else(|_| vec![0]));
    v.extend_from_slice(&CLASS_ANY.to_be_bytes());
    v.extend_from_slice(&0u32.to_be_bytes());
    v.extend_from_slice(&encode_name(key.algorithm.name()).unwrap_or_else(|_| vec![0]));
    v.extend_from_slice(&time.to_be_bytes()[2..]);
    v.extend_from_slice(&fudge.to_be_bytes());
    v.extend_from_slice(&error.to_be_bytes());
    v.extend_from_slice(&(other.len() as u16).to_be_bytes());
    v.extend_from_slice(other);
    v
}

/// `message` with a TSIG record appended (RFC 8945 section 4.2), and the
/// MAC (the answer's MAC covers it). `prefix` goes into the MAC before the
/// message: nothing for a request, the request's MAC (length first) for
/// an answer.
fn sign(message: &[u8], key: &TsigKey, now: u64, prefix: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let hkey = hmac::Key::new(key.algorithm.hmac(), &key.secret);
    let mut ctx = hmac::Context::with_key(&hkey);
    ctx.update(prefix);
    ctx.update(message);
    ctx.update(&tsig_variables(key, now, FUDGE, 0, &[]));
    let mac = ctx.sign().as_ref().to_vec();
    let mut out = message.to_vec();
    // One more additional record.
    let ar = u16::from_be_bytes([out[10], out[11]]).wrapping_add(1);
    out[10..12].copy_from_slice(&ar.to_be_bytes());
    out.extend_from_slice(&encode_name(&key.name).unwrap_or_else(|_| vec![0]));
    out.extend_from_slice(&TYPE_TSIG.to_be_bytes());
    out.extend_from_slice(&CLASS_ANY.to_be_bytes());
    out.extend_from_slice(&0u32.to_be_bytes());
    let mut rdata = encode_name(key.algorithm.name()).unwrap_or_else(|_| vec![0]);
    rdata.extend_from_slice(&now.to_be_bytes()[2..]);
    rdata.extend_from_slice(&FUDGE.to_be_bytes());
    rdata.extend_from_slice(&(mac.len() as u16).to_be_bytes());
    rdata.extend_from_slice(&mac);
    rdata.extend_from_slice(&message[0..2]); // original ID
    rdata.extend_from_slice(&0u16.to_be_bytes()); // error
    rdata.extend_from_slice(&0u16.to_be_bytes()); // other len
    out.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    out.extend_from_slice(&rdata);
    (out, mac)
}

/// Check the TSIG record that ends the answer `raw` (RFC 8945 section
/// 5.3): signed with `key`, its MAC over the request's MAC, the answer
/// without the record (its original ID and one additional record less)
/// and the TSIG variables, and its time within the fudge.
fn verify(
    raw: &[u8],
    message: &Parsed,
    key: &TsigKey,
    request_mac: &[u8],
    now: u64,
) -> Result<(), WireError> {
    let Some(tsig) = &message.tsig else {
        return Err(WireError::NotSigned);
    };
    if tsig.key_name != key.name {
        return Err(WireError::WrongKey {
            name: tsig.key_name.clone(),
        });
    }
    if TsigAlgorithm::from_name(&tsig.algorithm) != Some(key.algorithm) {
        return Err(WireError::WrongAlgorithm {
            name: tsig.algorithm.clone(),
        });
    }
    if tsig.error != 0 {
        return Err(WireError::TsigError(tsig.error));
    }
    let Some(unsigned) = raw.get(..tsig.offset) else {
        return Err(WireError::TsigOutside);
    };
    let mut unsigned = unsigned.to_vec();
    if unsigned.len() < 12 {
        return Err(WireError::ShortHeader);
    }
    unsigned[0..2].copy_from_slice(&tsig.original_id.to_be_bytes());
    let ar = u16::from_be_bytes([unsigned[10], unsigned[11]]).wrapping_sub(1);
    unsigned[10..12].copy_from_slice(&ar.to_be_bytes());
    let hkey = hmac::Key::new(key.algorithm.hmac(), &key.secret);
    let mut signed = Vec::with_capacity(unsigned.len() + request_mac.len() + 128);
    signed.extend_from_slice(&(request_mac.len() as u16).to_be_bytes());
    signed.extend_from_slice(request_mac);
    signed.extend_from_slice(&unsigned);
    signed.extend_from_slice(&tsig_variables(
        key,
        tsig.time,
        tsig.fudge,
        tsig.error,
        &tsig.other,
    ));
    hmac::verify(&hkey, &signed, &tsig.mac).map_err(|_| WireError::BadMac)?;
    if now.abs_diff(tsig.time) > u64::from(tsig.fudge) {
        return Err(WireError::TimeOutsideFudge);
    }
    Ok(())
}

/// The parts of a DNS message this module reads.
#[derive(Debug, Default)]
struct Parsed {
    id: u16,
    response: bool,
    rcode: u16,
    answers: Vec<Record>,
    authority: Vec<Record>,
    tsig: Option<Tsig>,
}

impl Parsed {
    fn tsig_error(&self) -> Option<u16> {
        self.tsig.as_ref().map(|t| t.error)
    }
}

#[derive(Debug)]
struct Record {
    /// Lowercase, without the final dot.
    name: String,
    rtype: u16,
    class: u16,
    rdata: Vec<u8>,
}

#[derive(Debug)]
struct Tsig {
    /// Where the TSIG record starts in the message.
    offset: usize,
    key_name: String,
    algorithm: String,
    time: u64,
    fudge: u16,
    mac: Vec<u8>,
    original_id: u16,
    error: u16,
    other: Vec<u8>,
}

/// Read a DNS message: every bound checked, compression pointers followed
/// only backwards (so no loop), never a panic.
fn parse(raw: &[u8]) -> Result<Parsed, WireError> {
    let mut r = Reader { raw, at: 0 };
    let id = r.u16()?;
    let flags = r.u16()?;
    let counts = [r.u16()?, r.u16()?, r.u16()?, r.u16()?];
    let mut parsed = Parsed {
        id,
        response: flags & 0x8000 != 0,
        rcode: flags & 0x000f,
        ..Parsed::default()
    };
    for _ in 0..counts[0] {
        r.name()?;
        r.u16()?;
        r.u16()?;
    }
    for section in 1..4 {
        for i in 0..counts[section] {
            let offset = r.at;
            let name = r.name()?;
            let rtype = r.u16()?;
            let class = r.u16()?;
            r.u32()?;
            let len = r.u16()? as usize;
            let rdata_at = r.at;
            let rdata = r.take(len)?;
            if rtype == TYPE_TSIG {
                // TSIG must be the very last record (RFC 8945 section 5.2).
                if section != 3 || i + 1 != counts[3] {
                    return Err(WireError::TsigNotLast);
                }
                let mut t = Reader { raw, at: rdata_at };
                let algorithm = t.name()?;
                let time = t.take(6)?.iter().fold(0u64, |a, b| a << 8 | u64::from(*b));
                let fudge = t.u16()?;
                let mac_len = t.u16()? as usize;
                let mac = t.take(mac_len)?.to_vec();
                let original_id = t.u16()?;
                let error = t.u16()?;
                let other_len = t.u16()? as usize;
                let other = t.take(other_len)?.to_vec();
                if t.at != rdata_at + len {
                    return Err(WireError::TsigLength);
                }
                parsed.tsig = Some(Tsig {
                    offset,
                    key_name: name,
                    algorithm,
                    time,
                    fudge,
                    mac,
                    original_id,
                    error,
                    other,
                });
                continue;
            }
            let record = Record {
                name,
                rtype,
                class,
                rdata: rdata.to_vec(),
            };
            match section {
                1 => parsed.answers.push(record),
                2 => parsed.authority.push(record),
                _ => {}
            }
        }
    }
    if r.at != raw.len() {
        return Err(WireError::TrailingBytes);
    }
    Ok(parsed)
}

struct Reader<'a> {
    raw: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        // An end past usize is past the message too.
        let end = self.at.checked_add(n).ok_or(WireError::Truncated)?;
        let bytes = self.raw.get(self.at..end).ok_or(WireError::Truncated)?;
        self.at = end;
        Ok(bytes)
    }

    fn u16(&mut self) -> Result<u16, WireError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, WireError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A name, lowercased, dot-separated, without the final dot; the
    /// reader moves past its bytes here (not past what a pointer leads
    /// to).
    fn name(&mut self) -> Result<String, WireError> {
        let mut labels: Vec<String> = Vec::new();
        let mut pos = self.at;
        let mut jumped = false;
        let mut total = 0usize;
        loop {
            let len = *self.raw.get(pos).ok_or(WireError::TruncatedName)?;
            match len & 0xc0 {
                0x00 => {
                    if len == 0 {
                        if !jumped {
                            self.at = pos + 1;
                        }
                        break;
                    }
                    let start = pos + 1;
                    let label = self
                        .raw
                        .get(start..start + len as usize)
                        .ok_or(WireError::TruncatedName)?;
                    total += label.len() + 1;
                    if total > 255 {
                        return Err(WireError::LongNameRead);
                    }
                    labels.push(
                        String::from_utf8_lossy(label)
                            .to_ascii_lowercase()
                            .replace('.', "\\."),
                    );
                    pos = start + len as usize;
                }
                0xc0 => {
                    let low = *self.raw.get(pos + 1).ok_or(WireError::TruncatedName)?;
                    let target = usize::from(len & 0x3f) << 8 | usize::from(low);
                    // Only backwards: each jump goes strictly earlier, so
                    // the walk ends.
                    if target >= pos {
                        return Err(WireError::BadPointer);
                    }
                    // The header holds no name, and a name read from it
                    // would change with the counts (signing adds one).
                    if target < HEADER_LEN {
                        return Err(WireError::PointerIntoHeader);
                    }
                    if !jumped {
                        self.at = pos + 2;
                        jumped = true;
                    }
                    pos = target;
                }
                _ => return Err(WireError::ReservedLabelType),
            }
        }
        Ok(labels.join("."))
    }
}

/// The module's private message reader, signer and TSIG check, for the
/// fuzz targets `dns_message` and `tsig_key` (fuzz/fuzz_targets/) only:
/// not an API, and nothing in tlsfront calls it.
#[doc(hidden)]
pub mod fuzz {
    use super::{TsigKey, WireError};

    /// What the reader took from a message.
    #[derive(Debug, PartialEq, Eq)]
    pub struct Message {
        pub id: u16,
        pub response: bool,
        pub rcode: u16,
        /// (name, type, class, RDATA) of the answer and authority records.
        pub records: Vec<(String, u16, u16, Vec<u8>)>,
        pub tsig: Option<Tsig>,
    }

    /// The TSIG record that ends a message.
    #[derive(Debug, PartialEq, Eq)]
    pub struct Tsig {
        /// Where the record starts in the message.
        pub offset: usize,
        pub key_name: String,
        pub time: u64,
        pub original_id: u16,
    }

    /// The reader `find_zone`, `txt_served` and `update` read answers with.
    pub fn parse(raw: &[u8]) -> Result<Message, WireError> {
        let p = super::parse(raw)?;
        Ok(Message {
            id: p.id,
            response: p.response,
            rcode: p.rcode,
            records: p
                .answers
                .into_iter()
                .chain(p.authority)
                .map(|r| (r.name, r.rtype, r.class, r.rdata))
                .collect(),
            tsig: p.tsig.map(|t| Tsig {
                offset: t.offset,
                key_name: t.key_name,
                time: t.time,
                original_id: t.original_id,
            }),
        })
    }

    /// `message` signed with `key` at `now` as a server signs its answer
    /// to a request whose MAC is empty (None if it is shorter than a
    /// header).
    pub fn sign_answer(message: &[u8], key: &TsigKey, now: u64) -> Option<Vec<u8>> {
        (message.len() >= 12).then(|| super::sign(message, key, now, &[0, 0]).0)
    }

    /// The check `update` makes of an answer (to a request whose MAC is
    /// empty), at the time `now`.
    pub fn verify(raw: &[u8], key: &TsigKey, now: u64) -> Result<(), WireError> {
        super::verify(raw, &super::parse(raw)?, key, &[], now)
    }

    /// The strings of a TXT RDATA as `txt_served` reads them.
    pub fn txt_strings(rdata: &[u8]) -> Vec<&[u8]> {
        super::txt_strings(rdata)
    }

    /// A name in wire form, as the messages written here carry it.
    pub fn encode_name(name: &str) -> Result<Vec<u8>, WireError> {
        super::encode_name(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(secret: &[u8]) -> TsigKey {
        TsigKey {
            name: "k.test".into(),
            algorithm: TsigAlgorithm::HmacSha256,
            secret: zeroize::Zeroizing::new(secret.to_vec()),
        }
    }

    #[test]
    fn reads_tsig_keygen_output() {
        let text = "key \"acme-key.\" {\n\talgorithm hmac-sha512;\n\tsecret \"c2VjcmV0\";\n};\n";
        let k = TsigKey::parse(text).unwrap();
        assert_eq!(k.name, "acme-key");
        assert_eq!(k.algorithm, TsigAlgorithm::HmacSha512);
        assert_eq!(&**k.secret, b"secret");
        assert!(!format!("{k:?}").contains("c2VjcmV0"));
        for (bad, says) in [
            ("", "expected \"key\", found the end of the file"),
            ("zone \"k\" {", "expected \"key\", found \"zone\""),
            ("key { };", "the key clause has no name"),
            (
                "key \"k\" { algorithm hmac-md5; secret \"c2VjcmV0\"; };",
                "algorithm \"hmac-md5\" is not supported: use hmac-sha256 or hmac-sha512",
            ),
            (
                "key \"k\" { algorithm hmac-sha256; secret \"!!\"; };",
                "the secret is not base64: ",
            ),
            (
                "key \"k\" { algorithm hmac-sha256; secret \"\"; };",
                "the secret is empty",
            ),
            (
                "key \"k\" { algorithm hmac-sha256; };",
                "the key clause has no secret",
            ),
            (
                "key \"k\" { secret \"c2VjcmV0\"; };",
                "the key clause has no algorithm",
            ),
            (
                "key \"k\" { secret \"c2VjcmV0\";",
                "the key clause does not end with \"};\"",
            ),
            (
                "key \"k\" { algorithm hmac-sha256; secret \"c2VjcmV0",
                "a quoted string does not end",
            ),
            ("key \"k\" /* {", "a comment does not end"),
            (
                "key \"k\" { algorithm hmac-sha256; secret \"c2VjcmV0\"; }; key",
                "\"key\" after the key clause: give one key",
            ),
            (
                "key \"k\" { algorithm hmac-sha256; bits 256; };",
                "unexpected \"bits\" in the key clause",
            ),
            ("key \"k\" { algorithm", "algorithm without a value"),
            (
                "key \"a..b\" { };",
                "the key name \"a..b\": an empty label (two dots in a row, or a leading dot)",
            ),
            (
                &format!("key \"{}\" {{ }};", "x".repeat(64)),
                "a label is longer than 63 bytes",
            ),
        ] {
            let e = TsigKey::parse(bad).unwrap_err();
            assert!(e.to_string().contains(says), "{bad:?}: {e}");
        }
        assert!(matches!(
            TsigKey::parse("key \"k\" {").unwrap_err(),
            KeyFileError::ClauseNotClosed
        ));
        assert!(matches!(
            TsigKey::parse("key \"k\"").unwrap_err(),
            KeyFileError::Expected {
                what: "{",
                found: None
            }
        ));
    }

    /// The key file's error names the file, the setting and the fix around
    /// what is wrong in it.
    #[test]
    fn key_file_errors_name_the_file_setting_and_fix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("acme.key");
        std::fs::write(&path, "key \"k\" { algorithm hmac-sha1; };").unwrap();
        let e = TsigKey::read(&path).unwrap_err();
        assert!(matches!(
            &e,
            DnsError::KeyFile {
                source: KeyFileError::UnsupportedAlgorithm(a),
                ..
            } if a == "hmac-sha1"
        ));
        assert_eq!(
            e.to_string(),
            format!(
                "the TSIG key file {} (setting acme_dns_tsig_key_file): algorithm \"hmac-sha1\" \
                 is not supported: use hmac-sha256 or hmac-sha512; give bind's key clause as \
                 `tsig-keygen -a hmac-sha256 NAME` writes it",
                path.display()
            )
        );
        std::fs::write(&path, b"\xff").unwrap();
        let e = TsigKey::read(&path).unwrap_err();
        assert!(e.to_string().contains(": it is not UTF-8 text; "), "{e}");
        let e = TsigKey::read(&dir.path().join("missing")).unwrap_err();
        assert!(matches!(
            e,
            DnsError::KeyFile {
                source: KeyFileError::Read(_),
                ..
            }
        ));
    }

    /// An answer as a server signs it, checked as `update` checks it; a
    /// changed byte or another secret fails.
    #[test]
    fn signed_answers_verify_and_tampered_ones_do_not() {
        let k = key(b"0123456789abcdef");
        let mut request = Message::new(7, OPCODE_UPDATE << 11);
        request.counts = [1, 0, 0, 0];
        request.name("acme.test").unwrap();
        request.u16(TYPE_SOA);
        request.u16(CLASS_IN);
        let (signed, request_mac) = sign(&request.finish(), &k, 1000, &[]);
        let parsed = parse(&signed).unwrap();
        let t = parsed.tsig.as_ref().unwrap();
        assert_eq!(
            (t.key_name.as_str(), t.time, t.original_id),
            ("k.test", 1000, 7)
        );
        assert_eq!(t.mac, request_mac);

        // The server's answer: header with QR set, signed over the
        // request's MAC.
        let mut answer = Message::new(7, 0x8000 | OPCODE_UPDATE << 11);
        answer.counts = [1, 0, 0, 0];
        answer.name("acme.test").unwrap();
        answer.u16(TYPE_SOA);
        answer.u16(CLASS_IN);
        let unsigned = answer.finish();
        let mut prefix = (request_mac.len() as u16).to_be_bytes().to_vec();
        prefix.extend_from_slice(&request_mac);
        let (full, _) = sign(&unsigned, &k, 1001, &prefix);
        let parsed = parse(&full).unwrap();
        assert!(parsed.response);
        verify(&full, &parsed, &k, &request_mac, 1001).unwrap();
        // Another secret.
        let e = verify(&full, &parsed, &key(b"other"), &request_mac, 1001).unwrap_err();
        assert_eq!(e, WireError::BadMac);
        assert_eq!(e.to_string(), "the MAC is wrong");
        // Too late.
        let e = verify(&full, &parsed, &k, &request_mac, 1001 + 301).unwrap_err();
        assert_eq!(e, WireError::TimeOutsideFudge);
        assert!(e.to_string().contains("fudge: check both clocks"), "{e}");
        // Another key name or algorithm.
        let mut other = key(b"0123456789abcdef");
        other.name = "other.test".into();
        let e = verify(&full, &parsed, &other, &request_mac, 1001).unwrap_err();
        assert_eq!(e.to_string(), "signed with the key \"k.test\"");
        other = key(b"0123456789abcdef");
        other.algorithm = TsigAlgorithm::HmacSha512;
        let e = verify(&full, &parsed, &other, &request_mac, 1001).unwrap_err();
        assert_eq!(e.to_string(), "signed with the algorithm \"hmac-sha256\"");
        // An unsigned answer.
        let parsed_unsigned = parse(&unsigned).unwrap();
        assert_eq!(
            verify(&unsigned, &parsed_unsigned, &k, &request_mac, 1001),
            Err(WireError::NotSigned)
        );
        // A flipped byte in the signed part.
        let mut tampered = full.clone();
        tampered[3] ^= 1;
        let parsed = parse(&tampered).unwrap();
        assert!(verify(&tampered, &parsed, &k, &request_mac, 1001).is_err());
    }

    #[test]
    fn names_follow_backward_pointers_only() {
        // Header, then "a.test" at 12, then a pointer to it at 20.
        let mut m = vec![0, 1, 0x80, 0, 0, 1, 0, 0, 0, 0, 0, 0];
        m.extend_from_slice(&[1, b'A', 4, b't', b'e', b's', b't', 0]);
        m.extend_from_slice(&[0xc0, 12]);
        let mut r = Reader { raw: &m, at: 12 };
        assert_eq!(r.name().unwrap(), "a.test");
        assert_eq!(r.name().unwrap(), "a.test");
        assert_eq!(r.at, m.len());
        // A pointer to itself.
        let looped = [0xc0u8, 0];
        let mut r = Reader {
            raw: &looped,
            at: 0,
        };
        assert_eq!(r.name(), Err(WireError::BadPointer));
        // A pointer into the header (found by the dns_message fuzz target:
        // the name read there changed when signing added to the counts).
        let into_header = [0, 0, 0x80, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 0, 0, 6, 0, 1];
        assert_eq!(
            parse(&into_header).unwrap_err(),
            WireError::PointerIntoHeader
        );
        let mut r = Reader {
            raw: &[0x40, 0],
            at: 0,
        };
        assert_eq!(r.name(), Err(WireError::ReservedLabelType));
        let mut r = Reader {
            raw: &[3, b'a'],
            at: 0,
        };
        assert_eq!(r.name(), Err(WireError::TruncatedName));
        // Trailing bytes after a whole message (the question "a.test" TXT IN).
        let mut whole = m[..20].to_vec();
        whole.extend_from_slice(&[0, 16, 0, 1]);
        assert!(parse(&whole).is_ok());
        whole.push(0);
        assert_eq!(parse(&whole).unwrap_err(), WireError::TrailingBytes);
    }

    #[test]
    fn txt_rdata_round_trips() {
        let value = "a".repeat(43);
        let rdata = txt_rdata(&value).unwrap();
        assert_eq!(txt_strings(&rdata), [value.as_bytes()]);
        assert!(txt_strings(&[5, b'a']).is_empty());
        assert_eq!(txt_rdata(&"a".repeat(256)), Err(WireError::TxtTooLong));
        assert_eq!(encode_name(&"a.".repeat(128)), Err(WireError::NameTooLong));
    }

    /// An answer as bind sends one for an SOA query (a compressed SOA in
    /// the authority section) and signed: it reads back, and every prefix
    /// of it and every one-byte change is read or refused, never a panic.
    #[test]
    fn every_cut_and_flip_of_an_answer_is_read_or_refused() {
        let k = key(b"0123456789abcdef");
        let mut m = Message::new(9, 0x8000 | 3);
        m.counts = [1, 0, 1, 0];
        m.name("_acme-challenge.a.test").unwrap();
        m.u16(TYPE_SOA);
        m.u16(CLASS_IN);
        // "a.test" by a pointer into the question (offset 12 + 16).
        m.bytes.extend_from_slice(&[0xc0, 28]);
        m.u16(TYPE_SOA);
        m.u16(CLASS_IN);
        m.u32(60);
        let rdata = [&[0xc0u8, 28][..], &[0xc0, 28], &[0; 20]].concat();
        m.u16(rdata.len() as u16);
        m.bytes.extend_from_slice(&rdata);
        let (answer, _) = sign(&m.finish(), &k, 5, &[]);
        let parsed = parse(&answer).unwrap();
        assert_eq!(parsed.rcode, 3);
        assert_eq!(parsed.authority[0].name, "a.test");
        assert!(parsed.tsig.is_some());
        for cut in 0..answer.len() {
            assert!(parse(&answer[..cut]).is_err(), "cut at {cut}");
        }
        for at in 0..answer.len() {
            for bit in 0..8 {
                let mut flipped = answer.clone();
                flipped[at] ^= 1 << bit;
                if let Ok(p) = parse(&flipped) {
                    let _ = verify(&flipped, &p, &k, &[], 5);
                }
            }
        }
    }

    /// Whatever the bytes, parsing returns (and so does reading a key).
    #[test]
    fn random_input_never_panics() {
        let mut seed = [0u8; 4096];
        for round in 0..2000 {
            aws_lc_rs::rand::fill(&mut seed).unwrap();
            let len = usize::from(seed[0]) * 16 % seed.len();
            let bytes = &seed[..len];
            let _ = parse(bytes);
            // Valid-looking headers with random bodies reach the records.
            let mut framed = vec![0, 1, 0x80, 0, 0, (round % 3) as u8, 0, 2, 0, 1, 0, 1];
            framed.extend_from_slice(bytes);
            let _ = parse(&framed);
            let _ = TsigKey::parse(&String::from_utf8_lossy(bytes));
            let _ = txt_strings(bytes);
        }
    }
}
