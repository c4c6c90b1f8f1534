//! Session-ticket keys for the whole fleet. One node at a time, the holder
//! of `P/tickets/leader` (on its lease, so a dead leader's place goes with
//! it), writes a fresh random key for each period ahead of its use, sealed,
//! and deletes those past their decrypting window; every node installs
//! what the watch brings into its [`TicketKeys`] (fleet mode: key `n`
//! encrypts in period `n` and decrypts in `n−1..=n+1`), so a ticket any
//! node issues resumes on any other. Until a node has the key of the
//! current period it issues tickets under its own keys, which only it
//! opens: resumption is lost across nodes for a while, never a handshake.
//!
//! Keys: `P/tickets/PERIOD_SECS/N` (N zero-padded, so keys sort), so that
//! nodes configured with another `ticket_period` keep to their own.
//! Writes are create-if-absent transactions: two nodes that both believe
//! they lead (one of them about to learn it lost its lease) still write one
//! key per period.

use super::seal::{FleetKeys, SealError};
use crate::tls::tickets::{period_number, FleetKey, TicketKeys};
use base64::Engine as _;
use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

/// What went wrong in [`FleetTickets::tick`]: the etcd operation, or the
/// sealing of a new key.
#[derive(Debug)]
pub enum TickError {
    Etcd(&'static str, etcd_client::Error),
    Seal(SealError),
}

/// Where in etcd the fleet's ticket keys are, and what seals them: what
/// the node hands [`FleetTickets`] (which knows nothing else of it).
pub struct Place<'a> {
    /// The fleet's prefix (`P/`).
    pub prefix: &'a str,
    pub keys: &'a FleetKeys,
}

/// The fleet's ticket keys as this node has them.
pub struct FleetTickets {
    keys: Arc<TicketKeys>,
    period: Duration,
    /// Period number → key, as read from etcd.
    have: Mutex<BTreeMap<u64, FleetKey>>,
    /// Whether this node holds the leader key (in this session).
    leader: AtomicBool,
}

impl FleetTickets {
    pub fn new(keys: Arc<TicketKeys>, period: Duration) -> FleetTickets {
        FleetTickets {
            keys,
            period,
            have: Mutex::new(BTreeMap::new()),
            leader: AtomicBool::new(false),
        }
    }

    /// Whether this node rotates the fleet's keys now.
    pub fn leading(&self) -> bool {
        self.leader.load(Ordering::Relaxed)
    }

    /// The period whose fleet key encrypts now, if this node has it.
    pub fn encrypting(&self) -> Option<u64> {
        self.keys.fleet_encrypting()
    }

    fn prefix(&self, at: &Place<'_>) -> String {
        format!("{}tickets/{}/", at.prefix, self.period.as_secs())
    }

    fn leader_key(&self, at: &Place<'_>) -> String {
        format!("{}tickets/leader", at.prefix)
    }

    /// A key of this period length from etcd: opened and installed.
    /// Whether `key` was one of ours (else not a ticket key).
    pub(super) fn apply(&self, at: &Place<'_>, key: &str, value: &[u8]) -> bool {
        let Some(n) = key
            .strip_prefix(&self.prefix(at))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            return false;
        };
        let opened = base64::engine::general_purpose::STANDARD
            .decode(value)
            .map_err(|e| e.to_string())
            .and_then(|sealed| {
                at.keys
                    .open(key.as_bytes(), &sealed)
                    .map_err(|e| e.to_string())
            });
        let key_material = match opened {
            Ok(k) => k,
            Err(why) => {
                tracing::warn!("fleet: {key}: ticket key not used: {why}");
                return true;
            }
        };
        let Some(k) = FleetKey::from_bytes(n, &key_material) else {
            tracing::warn!("fleet: {key}: not an 80-byte ticket key; not used");
            return true;
        };
        let mut have = self.have.lock().unwrap_or_else(PoisonError::into_inner);
        have.insert(n, k);
        self.keys.install_fleet(have.values().cloned().collect());
        true
    }

    /// A key deleted from etcd (its window is over).
    pub(super) fn removed(&self, at: &Place<'_>, key: &str) {
        let Some(n) = key
            .strip_prefix(&self.prefix(at))
            .and_then(|n| n.parse::<u64>().ok())
        else {
            return;
        };
        let mut have = self.have.lock().unwrap_or_else(PoisonError::into_inner);
        if have.remove(&n).is_some() {
            self.keys.install_fleet(have.values().cloned().collect());
        }
    }

    /// A new session with etcd: leadership is won again, or not.
    pub(super) fn new_session(&self) {
        self.leader.store(false, Ordering::Relaxed);
    }

    /// Called at each keep-alive: take the lead if no node has it
    /// (`holder`: this node's record, the leader key's value); as the
    /// leader, make sure the keys of this period and the next exist and
    /// delete those before the last.
    pub(super) async fn tick(
        &self,
        at: &Place<'_>,
        holder: String,
        client: &mut Client,
        lease: i64,
    ) -> Result<(), TickError> {
        if !self.leading() {
            let leader = self.leader_key(at);
            let r = client
                .txn(
                    Txn::new()
                        .when([Compare::create_revision(
                            leader.as_str(),
                            CompareOp::Equal,
                            0,
                        )])
                        .and_then([TxnOp::put(
                            leader.as_str(),
                            holder,
                            Some(PutOptions::new().with_lease(lease)),
                        )]),
                )
                .await
                .map_err(|e| TickError::Etcd("take the ticket keys' lead", e))?;
            if !r.succeeded() {
                return Ok(());
            }
            self.leader.store(true, Ordering::Relaxed);
            println!(
                "fleet: this node makes and rotates the fleet's ticket keys (every {} s)",
                self.period.as_secs()
            );
        }
        let n = period_number(SystemTime::now(), self.period);
        let have: Vec<u64> = self
            .have
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .copied()
            .collect();
        for m in [n, n + 1] {
            if have.contains(&m) {
                continue;
            }
            let Some(k) = FleetKey::random(m) else {
                continue;
            };
            let key = format!("{}{m:020}", self.prefix(at));
            let sealed = at
                .keys
                .seal(key.as_bytes(), k.bytes())
                .map_err(TickError::Seal)?;
            let value = base64::engine::general_purpose::STANDARD.encode(sealed);
            client
                .txn(
                    Txn::new()
                        .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                        .and_then([TxnOp::put(key.as_str(), value, None)]),
                )
                .await
                .map_err(|e| TickError::Etcd("write a ticket key", e))?;
        }
        for m in have.into_iter().filter(|m| m + 1 < n) {
            let key = format!("{}{m:020}", self.prefix(at));
            client
                .delete(key.as_str(), None)
                .await
                .map_err(|e| TickError::Etcd("delete an old ticket key", e))?;
        }
        Ok(())
    }
}
