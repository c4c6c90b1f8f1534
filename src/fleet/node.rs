//! One node's life in the fleet, on the server process's main runtime:
//! the connection to etcd kept up (with backoff), the node's lease and its
//! registration, the prefix read at start and watched afterwards,
//! certificates other nodes obtained stored in this node's ACME state
//! directory as they arrive, and challenge answers mirrored into the local
//! [`Challenges`]. Ordering under the fleet's lock is [`super::order`]'s.
//!
//! Serving never waits on any of this: a node without etcd serves what its
//! state directory holds, and orders nothing (an order needs the lock).
//!
//! Keys, under the prefix `P` (docs/design/fleet.md §2):
//! - `P/nodes/NODE`: who runs as NODE (on the node's lease);
//! - `P/acme/D/certs/S`: the certificate for the set of names `S`, its key
//!   sealed ([`super::seal`]); `D` names the CA's directory;
//! - `P/acme/D/lock/S`: the node ordering `S` now (on its lease);
//! - `P/challenge/tls-alpn-01/NAME`, `P/challenge/http-01/TOKEN`: the
//!   answers to the CA's validation, on the ordering node's lease, so any
//!   node the CA reaches answers.

use super::etcd::{connect, EtcdErrorKind, FleetError, Secrets};
use super::seal::FleetKeys;
use super::FleetSettings;
use crate::acme::{AcmeSettings, Challenges, Issued};
use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, PutOptions, Txn, TxnOp, WatchOptions,
};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The first wait after a failure to reach etcd; it doubles up to
/// [`BACKOFF_MAX`], each wait drawn at random below it (full jitter), so a
/// hundred nodes that lost etcd together do not come back in step.
const BACKOFF_FIRST: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Keys read per request while reading the prefix: a page of the largest
/// values (a certificate for a hundred names) stays well under the gRPC
/// client's default limit on a message it takes.
const PAGE: i64 = 100;

/// What the server process provides the node with.
pub trait Host: Send + Sync + 'static {
    /// The ACME settings in force now (the CA, the state directory).
    fn acme(&self) -> AcmeSettings;
    /// The sets of names of the sites with `acme = true`.
    fn acme_names(&self) -> Vec<Vec<String>>;
    /// Certificates were stored in the state directory: rebuild the sites.
    fn certificates_stored(&self);
}

/// What the metrics and `/fleet` show of the node.
#[derive(Debug, Default)]
pub struct Status {
    /// Whether the node holds a working session with etcd.
    pub etcd_up: AtomicBool,
    /// The etcd revision applied last.
    pub revision: AtomicI64,
    /// When (Unix seconds) the node last caught up with etcd.
    pub last_sync: AtomicU64,
    /// Order locks held now.
    pub locks_held: AtomicI64,
    /// Certificates from the fleet stored here.
    pub applied: AtomicU64,
    /// Orders of another (dead) node this node finished.
    pub takeovers: AtomicU64,
    /// Errors talking to etcd, by [`EtcdErrorKind`] (in `ALL`'s order).
    pub errors: [AtomicU64; EtcdErrorKind::ALL.len()],
}

impl Status {
    fn error(&self, kind: EtcdErrorKind) {
        if let Some(i) = EtcdErrorKind::ALL.iter().position(|k| *k == kind) {
            self.errors[i].fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The node's session with etcd, while it has one.
#[derive(Clone)]
pub(super) struct Session {
    pub(super) client: Client,
    pub(super) lease: i64,
}

/// A certificate as stored in etcd (`P/acme/D/certs/S`).
#[derive(Serialize, Deserialize)]
pub(super) struct StoredCert {
    names: Vec<String>,
    chain_pem: String,
    /// The private key, PKCS#8 PEM, sealed, base64.
    key: String,
    not_before: u64,
    pub(super) not_after: u64,
    /// The node that obtained it.
    by: String,
}

/// A holder's record (`P/nodes/NODE`, `P/acme/D/lock/S`).
#[derive(Serialize, Deserialize)]
pub(super) struct Holder {
    pub(super) node: String,
    host: String,
    pid: u32,
    since: u64,
}

/// A challenge answer as stored in etcd.
#[derive(Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub(super) enum Answer {
    /// TLS-ALPN-01: SHA-256 of the key authorization, hex; each node makes
    /// its own RFC 8737 certificate from it (no key crosses etcd).
    TlsAlpn01 { name: String, digest: String },
    /// HTTP-01: the key authorization served at the token's URL.
    Http01 {
        token: String,
        key_authorization: String,
    },
}

/// One node of the fleet.
pub struct Node {
    pub(super) settings: FleetSettings,
    secrets: Secrets,
    pub(super) keys: FleetKeys,
    challenges: Challenges,
    /// The fleet's ticket keys (`None`: not shared, e.g. in tests).
    tickets: Option<super::tickets::FleetTickets>,
    session: Mutex<Option<Session>>,
    /// Set by [`Node::leave`]: the session is not made again.
    leaving: AtomicBool,
    /// What was applied for each key (its `mod_revision`).
    applied: Mutex<HashMap<String, i64>>,
    /// The challenge answers from other nodes, kept up while their key is.
    answering: Mutex<HashMap<String, Box<dyn std::any::Any + Send>>>,
    pub status: Status,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

pub(super) fn secs_of(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The set key `S` of `names`: lower-cased, sorted and joined, hashed, so
/// that two sites differing only in a later name do not share a key.
pub fn set_key(names: &[String]) -> String {
    let mut names: Vec<String> = names.iter().map(|n| n.to_ascii_lowercase()).collect();
    names.sort();
    names.dedup();
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, names.join("\n").as_bytes());
    hex(&d.as_ref()[..16])
}

/// `D`: the CA's directory, hashed (as the local account file is named).
fn directory_key(directory: &str) -> String {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, directory.as_bytes());
    hex(&d.as_ref()[..8])
}

fn host_name() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

impl Node {
    pub fn new(
        settings: FleetSettings,
        secrets: Secrets,
        keys: FleetKeys,
        challenges: Challenges,
        tickets: Option<Arc<crate::tls::tickets::TicketKeys>>,
    ) -> Node {
        let tickets = tickets.map(|t| super::tickets::FleetTickets::new(t, settings.ticket_period));
        Node {
            settings,
            secrets,
            keys,
            challenges,
            tickets,
            session: Mutex::new(None),
            leaving: AtomicBool::new(false),
            applied: Mutex::new(HashMap::new()),
            answering: Mutex::new(HashMap::new()),
            status: Status::default(),
        }
    }

    pub fn settings(&self) -> &FleetSettings {
        &self.settings
    }

    pub(super) fn acme_prefix(&self, acme: &AcmeSettings) -> String {
        format!(
            "{}acme/{}/",
            self.settings.prefix,
            directory_key(&acme.directory)
        )
    }

    pub(super) fn cert_key(&self, acme: &AcmeSettings, names: &[String]) -> String {
        format!("{}certs/{}", self.acme_prefix(acme), set_key(names))
    }

    pub(super) fn session(&self) -> Option<Session> {
        self.session
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(super) fn holder(&self) -> String {
        serde_json::to_string(&Holder {
            node: self.settings.node.clone(),
            host: host_name(),
            pid: std::process::id(),
            since: now_secs(),
        })
        .unwrap_or_default()
    }

    /// Whether this node makes and rotates the fleet's ticket keys now.
    pub fn ticket_leader(&self) -> bool {
        self.tickets.as_ref().is_some_and(|t| t.leading())
    }

    /// The period number of the fleet ticket key that encrypts now.
    pub fn ticket_period_encrypting(&self) -> Option<u64> {
        self.tickets.as_ref().and_then(|t| t.encrypting())
    }

    fn ticket_place(&self) -> super::tickets::Place<'_> {
        super::tickets::Place {
            prefix: &self.settings.prefix,
            keys: &self.keys,
        }
    }

    /// The fleet's ticket keys' turn at a keep-alive.
    async fn ticket_tick(
        &self,
        t: &super::tickets::FleetTickets,
        client: &mut Client,
        lease: i64,
    ) -> Result<(), FleetError> {
        use super::tickets::TickError;
        t.tick(&self.ticket_place(), self.holder(), client, lease)
            .await
            .map_err(|e| match e {
                TickError::Etcd(op, e) => self.etcd_error(op, &e),
                TickError::Seal(e) => {
                    self.failed("seal a ticket key", EtcdErrorKind::Other, e.to_string())
                }
            })
    }

    /// A failure of `op` that is not an error of the client's.
    pub(super) fn failed(
        &self,
        op: &'static str,
        kind: EtcdErrorKind,
        detail: impl Into<String>,
    ) -> FleetError {
        FleetError::Etcd {
            endpoints: self.settings.endpoints.join(", "),
            op,
            kind,
            detail: detail.into(),
        }
    }

    pub(super) fn etcd_error(&self, op: &'static str, e: &etcd_client::Error) -> FleetError {
        let e = FleetError::etcd(&self.settings.endpoints, op, e);
        if let Some(k) = e.kind() {
            self.status.error(k);
        }
        e
    }

    /// Run for the life of the process: keep a session with etcd, catch up
    /// and follow the prefix; after a failure, back off and start again.
    pub async fn run(self: Arc<Self>, host: Arc<dyn Host>) {
        let mut failures: u32 = 0;
        let mut down_since: Option<(SystemTime, String)> = None;
        let mut first = true;
        // Where the next session's watch starts: after a break, at the
        // revision after the last one applied (what happened meanwhile
        // comes as events); at start and after a compaction, at a read of
        // the whole prefix.
        let mut from: Option<i64> = None;
        // One member at a time, the next one after a failure: a client
        // balanced over every endpoint fails the calls it sends to a
        // member that is down (etcd-client's balanced channel does not
        // leave it out), so one dead member of three would break most
        // sessions. Members tried in a row without a working session.
        let mut member = 0usize;
        let mut tried = 0usize;
        loop {
            let mut caught_up = |node: &Node, revision| {
                // Caught up: say so once per transition.
                if let Some((since, _)) = down_since.take() {
                    let gone = SystemTime::now().duration_since(since).unwrap_or_default();
                    println!(
                        "fleet: etcd reachable again after {} s ({} attempts), revision {revision}",
                        gone.as_secs(),
                        failures
                    );
                } else if first {
                    println!(
                        "fleet: node {} joined through etcd at {}, revision {revision}",
                        node.settings.node,
                        node.settings.endpoints.join(", ")
                    );
                }
                first = false;
                failures = 0;
                tried = 0;
            };
            let endpoint = &self.settings.endpoints[member % self.settings.endpoints.len()];
            let e = match self
                .session_once(&*host, endpoint, from, &mut caught_up)
                .await
            {
                Ok(()) => continue,
                Err(e) => e,
            };
            *self.session.lock().unwrap_or_else(PoisonError::into_inner) = None;
            self.status.etcd_up.store(false, Ordering::Relaxed);
            if self.leaving.load(Ordering::Relaxed) {
                return;
            }
            if e.kind() == Some(EtcdErrorKind::Compacted) {
                println!("fleet: {e}; reading {} again", self.settings.prefix);
                from = None;
                continue;
            }
            let applied = self.status.revision.load(Ordering::Relaxed);
            from = (applied > 0).then_some(applied);
            // Another member at once, and nothing said, until each has
            // failed in turn.
            member = member.wrapping_add(1);
            tried += 1;
            if tried < self.settings.endpoints.len() {
                continue;
            }
            tried = 0;
            failures = failures.saturating_add(1);
            let reason = e.to_string();
            match &down_since {
                None if first => {
                    println!(
                        "fleet: etcd unreachable at start ({reason}); serving the local copy, \
                         ordering nothing, retrying"
                    );
                    down_since = Some((SystemTime::now(), reason));
                }
                None => {
                    println!(
                        "fleet: lost etcd ({reason}); serving what this node has, renewals wait"
                    );
                    down_since = Some((SystemTime::now(), reason));
                }
                Some((_, last)) if *last != reason => {
                    // A different reason is news; the same one again is not.
                    println!("fleet: etcd still unreachable: {reason}");
                    down_since = down_since.map(|(t, _)| (t, reason));
                }
                Some(_) => {}
            }
            tokio::time::sleep(backoff(failures)).await;
        }
    }

    /// One session: connect to `endpoint`, take a lease, register, read
    /// the prefix (unless `from` names the revision applied last: the
    /// watch then resumes after it), then follow it until something fails
    /// (the error says what).
    async fn session_once(
        &self,
        host: &dyn Host,
        endpoint: &str,
        from: Option<i64>,
        caught_up: &mut (dyn FnMut(&Node, i64) + Send),
    ) -> Result<(), FleetError> {
        let one = FleetSettings {
            endpoints: vec![endpoint.to_string()],
            ..self.settings.clone()
        };
        let mut client = connect(&one, &self.secrets).await.inspect_err(|e| {
            if let Some(k) = e.kind() {
                self.status.error(k);
            }
        })?;
        let ttl = i64::try_from(self.settings.lock_ttl.as_secs()).unwrap_or(30);
        let lease = client
            .lease_grant(ttl, None)
            .await
            .map_err(|e| self.etcd_error("grant a lease", &e))?
            .id();
        let (mut keeper, mut keep_alive) = client
            .lease_keep_alive(lease)
            .await
            .map_err(|e| self.etcd_error("keep the lease alive", &e))?;
        self.register(&mut client, lease).await?;
        *self.session.lock().unwrap_or_else(PoisonError::into_inner) = Some(Session {
            client: client.clone(),
            lease,
        });
        if let Some(t) = &self.tickets {
            t.new_session();
        }
        let acme = host.acme();
        let revision = match from {
            Some(applied) => applied,
            None => {
                let revision = self.read_all(&mut client, &acme, host).await?;
                self.synced(revision);
                revision
            }
        };
        if let Some(t) = &self.tickets {
            self.ticket_tick(t, &mut client, lease).await?;
        }
        self.adopt_local(&mut client, &acme, host).await;
        self.status.etcd_up.store(true, Ordering::Relaxed);
        caught_up(self, revision);

        let mut watch = client
            .watch(
                self.settings.prefix.as_str(),
                Some(
                    WatchOptions::new()
                        .with_prefix()
                        .with_start_revision(revision + 1)
                        .with_progress_notify()
                        .with_fragment(),
                ),
            )
            .await
            .map_err(|e| self.etcd_error("watch the prefix", &e))?;
        let mut tick = tokio::time::interval(self.settings.lock_ttl / 3);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    keeper.keep_alive().await.map_err(|e| self.etcd_error("keep the lease alive", &e))?;
                    match keep_alive.message().await {
                        Ok(Some(r)) if r.ttl() > 0 => {}
                        Ok(_) => return Err(self.failed("keep the lease alive", EtcdErrorKind::Other, "the lease expired")),
                        Err(e) => return Err(self.etcd_error("keep the lease alive", &e)),
                    }
                    if let Some(t) = &self.tickets {
                        self.ticket_tick(t, &mut client, lease).await?;
                    }
                }
                message = watch.message() => {
                    let response = match message {
                        Ok(Some(r)) => r,
                        Ok(None) => return Err(self.failed("watch the prefix", EtcdErrorKind::Unreachable, "the watch ended")),
                        Err(e) => return Err(self.etcd_error("watch the prefix", &e)),
                    };
                    if response.canceled() {
                        let compacted = response.compact_revision() > 0;
                        return Err(self.failed("watch the prefix", if compacted { EtcdErrorKind::Compacted } else { EtcdErrorKind::Other }, if compacted {
                                format!(
                                    "revision {} was compacted (now {})",
                                    self.status.revision.load(Ordering::Relaxed) + 1,
                                    response.compact_revision()
                                )
                            } else {
                                response.cancel_reason().to_string()
                            }));
                    }
                    let acme = host.acme();
                    let mut stored = 0;
                    for event in response.events() {
                        let Some(kv) = event.kv() else { continue };
                        let Ok(key) = kv.key_str() else { continue };
                        match event.event_type() {
                            EventType::Put => {
                                stored += self.apply(&acme, key, kv.value(), kv.mod_revision());
                            }
                            EventType::Delete => self.removed(key),
                        }
                    }
                    if stored > 0 {
                        host.certificates_stored();
                    }
                    // Not the creation's header: it names the store's
                    // revision, which a resumed watch's events reach only
                    // in the responses after it.
                    if let Some(h) = response.header().filter(|_| !response.created()) {
                        self.synced(h.revision());
                    }
                }
            }
        }
    }

    /// Leaving (SIGTERM, or an upgrade's old process): revoke the lease,
    /// so that what rides on it (locks, the ticket lead, the node's
    /// record, challenge answers) goes at once. Bounded: a node that
    /// cannot reach etcd leaves without it, and the lease runs out.
    pub async fn leave(&self) {
        self.leaving.store(true, Ordering::Relaxed);
        let Some(Session { mut client, lease }) = self.session() else {
            return;
        };
        let revoke = client.lease_revoke(lease);
        match tokio::time::timeout(std::time::Duration::from_secs(2), revoke).await {
            Ok(Ok(_)) => println!("fleet: left (lease revoked)"),
            Ok(Err(e)) => tracing::warn!(
                "fleet: leaving: {}",
                self.etcd_error("revoke the lease", &e)
            ),
            Err(_) => tracing::warn!("fleet: leaving: etcd did not answer; the lease runs out"),
        }
    }

    fn synced(&self, revision: i64) {
        self.status.revision.store(revision, Ordering::Relaxed);
        self.status.last_sync.store(now_secs(), Ordering::Relaxed);
    }

    /// `P/nodes/NODE`, on this node's lease. A record left by a process of
    /// this host (a restart, an upgrade) is taken over; one of another
    /// host means two nodes share a name, which is refused.
    async fn register(&self, client: &mut Client, lease: i64) -> Result<(), FleetError> {
        let key = format!("{}nodes/{}", self.settings.prefix, self.settings.node);
        let got = client
            .get(key.as_str(), None)
            .await
            .map_err(|e| self.etcd_error("read the node's record", &e))?;
        if let Some(kv) = got.kvs().first() {
            if let Ok(h) = serde_json::from_slice::<Holder>(kv.value()) {
                if h.host != host_name() {
                    return Err(self.failed(
                        "register the node",
                        EtcdErrorKind::Other,
                        format!(
                            "node name {} is registered by host {} (pid {}): give each node \
                             its own [fleet] node",
                            self.settings.node, h.host, h.pid
                        ),
                    ));
                }
            }
        }
        client
            .put(
                key.as_str(),
                self.holder(),
                Some(PutOptions::new().with_lease(lease)),
            )
            .await
            .map_err(|e| self.etcd_error("register the node", &e))?;
        Ok(())
    }

    /// Read every key under the prefix (in pages) and apply what changed;
    /// the revision read at.
    async fn read_all(
        &self,
        client: &mut Client,
        acme: &AcmeSettings,
        host: &dyn Host,
    ) -> Result<i64, FleetError> {
        let prefix = self.settings.prefix.as_str();
        let end = prefix_end(prefix);
        let mut from = prefix.as_bytes().to_vec();
        let mut revision = 0;
        let mut stored = 0;
        let mut seen = std::collections::HashSet::new();
        loop {
            let mut options = GetOptions::new().with_range(end.clone()).with_limit(PAGE);
            if revision > 0 {
                // Every page at the first page's revision: one snapshot.
                options = options.with_revision(revision);
            }
            let page = client
                .get(from.clone(), Some(options))
                .await
                .map_err(|e| self.etcd_error("read the prefix", &e))?;
            if revision == 0 {
                revision = page.header().map(|h| h.revision()).unwrap_or_default();
            }
            for kv in page.kvs() {
                if let Ok(key) = kv.key_str() {
                    seen.insert(key.to_string());
                    stored += self.apply(acme, key, kv.value(), kv.mod_revision());
                }
            }
            match page.kvs().last() {
                Some(last) if page.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => break,
            }
        }
        // Answers whose keys went while this node was away.
        let gone: Vec<String> = self
            .answering
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .filter(|k| !seen.contains(*k))
            .cloned()
            .collect();
        for k in gone {
            self.removed(&k);
        }
        if stored > 0 {
            host.certificates_stored();
        }
        Ok(revision)
    }

    /// Apply one key's value; 1 if a certificate was stored.
    fn apply(&self, acme: &AcmeSettings, key: &str, value: &[u8], mod_revision: i64) -> usize {
        {
            let mut applied = self.applied.lock().unwrap_or_else(PoisonError::into_inner);
            if applied.get(key) == Some(&mod_revision) {
                return 0;
            }
            applied.insert(key.to_string(), mod_revision);
        }
        let certs = format!("{}certs/", self.acme_prefix(acme));
        let challenge = format!("{}challenge/", self.settings.prefix);
        if key.starts_with(&certs) {
            match self.store_cert(acme, key, value) {
                Ok(true) => return 1,
                Ok(false) => {}
                Err(why) => {
                    self.status.error(EtcdErrorKind::Other);
                    tracing::warn!("fleet: {key}: not applied: {why}");
                }
            }
        } else if key.starts_with(&challenge) {
            self.answer(key, value);
        } else if let Some(t) = &self.tickets {
            t.apply(&self.ticket_place(), key, value);
        }
        0
    }

    /// A certificate from etcd: opened, checked, and stored in the state
    /// directory unless what is there is as new. Whether it was stored.
    pub(super) fn store_cert(
        &self,
        acme: &AcmeSettings,
        key: &str,
        value: &[u8],
    ) -> Result<bool, String> {
        use base64::Engine as _;
        let c: StoredCert = serde_json::from_slice(value).map_err(|e| e.to_string())?;
        if let Ok(Some(local)) = crate::acme::load_stored(acme, &c.names) {
            if secs_of(local.not_after) >= c.not_after {
                return Ok(false);
            }
        }
        let sealed = base64::engine::general_purpose::STANDARD
            .decode(&c.key)
            .map_err(|e| format!("the key's base64: {e}"))?;
        let key_pem = self
            .keys
            .open(key.as_bytes(), &sealed)
            .map_err(|e| e.to_string())?;
        let key_pem = String::from_utf8(key_pem.to_vec()).map_err(|e| e.to_string())?;
        let issued =
            crate::acme::adopt(acme, &c.names, c.chain_pem, key_pem).map_err(|e| e.to_string())?;
        self.status.applied.fetch_add(1, Ordering::Relaxed);
        println!(
            "fleet: certificate for {} from node {} stored, valid until {}",
            c.names.join(", "),
            c.by,
            httpdate::fmt_http_date(issued.not_after)
        );
        Ok(true)
    }

    /// A challenge answer another node published: answer it here too
    /// while its key lasts.
    fn answer(&self, key: &str, value: &[u8]) {
        let Ok(a) = serde_json::from_slice::<Answer>(value) else {
            tracing::warn!("fleet: {key}: not a challenge answer; ignored");
            return;
        };
        let guard: Box<dyn std::any::Any + Send> = match a {
            Answer::TlsAlpn01 { name, digest } => {
                let Some(digest) = unhex(&digest) else {
                    return;
                };
                match crate::acme::challenge::challenge_key(&name, &digest) {
                    Ok(k) => Box::new(self.challenges.answer(&name, k)),
                    Err(e) => {
                        tracing::warn!("fleet: {key}: {e}");
                        return;
                    }
                }
            }
            Answer::Http01 {
                token,
                key_authorization,
            } => Box::new(self.challenges.answer_http(&token, &key_authorization)),
        };
        self.answering
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.to_string(), guard);
    }

    fn removed(&self, key: &str) {
        if let Some(t) = &self.tickets {
            t.removed(&self.ticket_place(), key);
        }
        self.applied
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(key);
        // Dropping the guard takes the answer down.
        drop(
            self.answering
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(key),
        );
    }

    /// Certificates this node obtained before it was in a fleet (or while
    /// etcd was away) and etcd lacks: put there, so that the fleet adopts
    /// them rather than ordering again. Only where no key exists: a
    /// certificate in etcd is never replaced this way.
    async fn adopt_local(&self, client: &mut Client, acme: &AcmeSettings, host: &dyn Host) {
        for names in host.acme_names() {
            let Ok(Some(issued)) = crate::acme::load_stored(acme, &names) else {
                continue;
            };
            let key = self.cert_key(acme, &names);
            let Ok(value) = self.sealed_cert(&key, &names, &issued) else {
                continue;
            };
            let put = client
                .txn(
                    Txn::new()
                        .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                        .and_then([TxnOp::put(key.as_str(), value, None)]),
                )
                .await;
            match put {
                Ok(r) if r.succeeded() => {
                    println!(
                        "fleet: certificate for {} from this node's state directory shared",
                        names.join(", ")
                    );
                }
                Ok(_) => {}
                Err(e) => {
                    self.etcd_error("share a stored certificate", &e);
                }
            }
        }
    }

    pub(super) fn sealed_cert(
        &self,
        key: &str,
        names: &[String],
        issued: &Issued,
    ) -> Result<String, FleetError> {
        use base64::Engine as _;
        let sealed = self
            .keys
            .seal(key.as_bytes(), issued.key_pem.as_bytes())
            .map_err(|e| FleetError::Etcd {
                endpoints: String::new(),
                op: "seal a key",
                kind: EtcdErrorKind::Other,
                detail: e.to_string(),
            })?;
        Ok(serde_json::to_string(&StoredCert {
            names: names.to_vec(),
            chain_pem: issued.chain_pem.clone(),
            key: base64::engine::general_purpose::STANDARD.encode(sealed),
            not_before: secs_of(issued.not_before),
            not_after: secs_of(issued.not_after),
            by: self.settings.node.clone(),
        })
        .unwrap_or_default())
    }
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The end of the key range of `prefix`: the prefix with its last byte
/// incremented (etcd's `--prefix`).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// The wait after `failures` failures in a row: at random below
/// `BACKOFF_FIRST · 2^(failures−1)`, at most [`BACKOFF_MAX`].
fn backoff(failures: u32) -> Duration {
    let cap = BACKOFF_FIRST
        .saturating_mul(1 << failures.saturating_sub(1).min(5))
        .min(BACKOFF_MAX);
    let mut r = [0u8; 4];
    let _ = aws_lc_rs::rand::fill(&mut r);
    let frac = f64::from(u32::from_le_bytes(r)) / f64::from(u32::MAX);
    // At least a tenth of the cap: a node does not spin on a dead etcd.
    cap.mul_f64(0.1 + 0.9 * frac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_key_ignores_order_case_and_repeats() {
        let a = set_key(&["B.test".into(), "a.test".into()]);
        let b = set_key(&["a.test".into(), "b.test".into(), "a.test".into()]);
        assert_eq!(a, b);
        assert_ne!(a, set_key(&["a.test".into()]));
        assert_eq!(a.len(), 32);
    }

    #[test]
    fn prefix_end_is_etcds() {
        assert_eq!(prefix_end("/t/"), b"/t0".to_vec());
    }

    #[test]
    fn backoff_grows_and_stays_bounded() {
        for f in 1..40 {
            let b = backoff(f);
            assert!(b <= BACKOFF_MAX, "{b:?}");
            assert!(b >= BACKOFF_FIRST / 10, "{b:?}");
        }
    }

    #[test]
    fn hex_round_trips() {
        assert_eq!(
            unhex(&hex(&[0, 1, 0xab, 0xff])),
            Some(vec![0, 1, 0xab, 0xff])
        );
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
    }
}
