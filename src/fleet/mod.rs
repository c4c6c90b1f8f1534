//! The fleet (`[fleet]`): several tlsfront nodes behind one load balancer
//! that share their ACME account, certificates and session-ticket keys
//! through etcd, so that one node orders a certificate for the whole fleet
//! and any node answers the CA's validation. This module owns the typed
//! settings, the connection to etcd ([`etcd`]) and the sealing of private
//! values before they are stored there ([`seal`]). Serving never waits on
//! etcd: a node serves what it has and catches up when etcd answers.
//!
//! docs/design/fleet.md is the design; docs/CONFIG.md the settings.

pub mod etcd;
pub mod node;
pub mod order;
pub mod seal;
pub mod tickets;

use std::path::PathBuf;
use std::time::Duration;

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "/tlsfront/";

/// The default `lock_ttl`: how long a dead node's locks outlive it.
pub const DEFAULT_LOCK_TTL: Duration = Duration::from_secs(30);

/// The range `lock_ttl` may take: below, one slow keep-alive loses the
/// locks; above, a dead node's order waits too long for a successor.
pub const LOCK_TTL_RANGE: std::ops::RangeInclusive<u64> = 10..=300;

/// The range `ticket_period` may take: a key encrypts for one period and
/// decrypts for the next, and a ticket lifetime hint is at most seven days
/// (RFC 8446).
pub const TICKET_PERIOD_RANGE: std::ops::RangeInclusive<u64> = 10..=3 * 86_400;

/// `[fleet]`, resolved. All of it takes a restart to change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetSettings {
    /// etcd's client URLs, one scheme for all.
    pub endpoints: Vec<String>,
    /// Every key of this fleet starts with it; ends with `/`.
    pub prefix: String,
    /// This node's name, unique in the fleet.
    pub node: String,
    /// The fleet key files (the first seals, all open).
    pub key_files: Vec<PathBuf>,
    /// TLS to etcd (`https://` endpoints).
    pub tls: Option<EtcdTls>,
    /// etcd's user and password (from a file).
    pub auth: Option<EtcdAuth>,
    /// The lease every lock of this node rides on.
    pub lock_ttl: Duration,
    /// Whether this node orders certificates (else it only serves them).
    pub order: bool,
    /// How long each of the fleet's session-ticket keys encrypts.
    pub ticket_period: Duration,
}

/// TLS to etcd: the CA its server certificates chain to, and this node's
/// client certificate and key, if etcd asks for one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdTls {
    pub ca: PathBuf,
    pub identity: Option<(PathBuf, PathBuf)>,
}

/// etcd's own authentication.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdAuth {
    pub user: String,
    pub password_file: PathBuf,
}

impl FleetSettings {
    /// The files only root may have to read for this node (the parent
    /// reads them for the server process).
    pub fn secret_files(&self) -> impl Iterator<Item = &PathBuf> {
        self.key_files
            .iter()
            .chain(self.tls.iter().flat_map(|t| {
                std::iter::once(&t.ca).chain(t.identity.iter().flat_map(|(c, k)| [c, k]))
            }))
            .chain(self.auth.iter().map(|a| &a.password_file))
    }
}
