//! An ACME order in the fleet: the lock per set of names it is placed
//! under (a key created on the node's lease only if absent, so one node
//! orders a set at a time and a dead node's lock goes with its lease), the
//! challenge answers published to etcd before the CA validates (so any
//! node answers), and the certificate shared in the transaction that lets
//! the lock go (so nothing is written by a node that lost the lock). Also
//! the fleet's one ACME account (`P/acme/D/account`, sealed), and the
//! order record (`P/acme/D/order/S`) through which a node that takes the
//! lock over from a dead holder finishes the holder's order rather than
//! placing a second one.

use super::etcd::{EtcdErrorKind, FleetError};
use super::node::{hex, secs_of, set_key, Answer, Holder, Node, Session, StoredCert};
use crate::acme::{AcmeError, AcmeSettings, Issued, PublishFuture, Resume};
use base64::Engine as _;
use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

/// An order lock this node holds (see [`Node::lock`]).
#[derive(Debug)]
pub struct Lock {
    key: String,
    /// Its creation revision: every write under the lock compares it, so
    /// a node whose lease ran out writes nothing.
    revision: i64,
    names: Vec<String>,
}

/// An order under the lock, as kept in etcd (`P/acme/D/order/S`): not on
/// any lease, so that it outlives its holder.
#[derive(Serialize, Deserialize)]
struct OrderRecord {
    /// The order's URL at the CA.
    url: String,
    /// "ordered", then "finalizing" once the key is kept.
    state: String,
    /// The certificate key, PKCS#8 PEM, sealed (the etcd key as
    /// associated data), base64; kept before the order is finalized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    key: Option<String>,
    /// The node that placed it.
    by: String,
    since: u64,
}

fn now_secs() -> u64 {
    secs_of(SystemTime::now())
}

/// What [`Node::lock`] found.
#[derive(Debug)]
pub enum Locked {
    /// This node holds the lock: order.
    Held(Lock),
    /// Another node holds it (its name): its certificate will arrive.
    Busy(String),
    /// Another node renewed meanwhile; its certificate is stored here now.
    Renewed,
}

impl Node {
    /// Take the order lock for `names` (a transaction that creates the key
    /// on this node's lease only if it does not exist). With the lock, the
    /// certificate in etcd is read again: if another node renewed past
    /// `local_not_after` meanwhile, it is stored here and the lock let go.
    pub async fn lock(
        &self,
        acme: &AcmeSettings,
        names: &[String],
        local_not_after: Option<SystemTime>,
    ) -> Result<Locked, FleetError> {
        let Some(Session { mut client, lease }) = self.session() else {
            return Err(self.failed(
                "take the order lock",
                EtcdErrorKind::Unreachable,
                "no session with etcd now; an order waits for one",
            ));
        };
        let key = format!("{}lock/{}", self.acme_prefix(acme), set_key(names));
        let r = client
            .txn(
                Txn::new()
                    .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(
                        key.as_str(),
                        self.holder(),
                        Some(PutOptions::new().with_lease(lease)),
                    )])
                    .or_else([TxnOp::get(key.as_str(), None)]),
            )
            .await
            .map_err(|e| self.etcd_error("take the order lock", &e))?;
        if !r.succeeded() {
            let by = r
                .op_responses()
                .into_iter()
                .find_map(|op| match op {
                    etcd_client::TxnOpResponse::Get(g) => g
                        .kvs()
                        .first()
                        .and_then(|kv| serde_json::from_slice::<Holder>(kv.value()).ok())
                        .map(|h| h.node),
                    _ => None,
                })
                .unwrap_or_else(|| "another node".into());
            return Ok(Locked::Busy(by));
        }
        let revision = r.header().map(|h| h.revision()).unwrap_or_default();
        let lock = Lock {
            key,
            revision,
            names: names.to_vec(),
        };
        self.status.locks_held.fetch_add(1, Ordering::Relaxed);
        // Renewed by another node between our look and the lock?
        let cert_key = self.cert_key(acme, names);
        let got = client
            .get(cert_key.as_str(), None)
            .await
            .map_err(|e| self.etcd_error("read the certificate", &e));
        let got = match got {
            Ok(g) => g,
            Err(e) => {
                self.unlock(lock).await;
                return Err(e);
            }
        };
        if let Some(kv) = got.kvs().first() {
            let newer = serde_json::from_slice::<StoredCert>(kv.value())
                .ok()
                .is_some_and(|c| local_not_after.is_none_or(|l| c.not_after > secs_of(l)));
            if newer && self.store_cert(acme, &cert_key, kv.value()).is_ok() {
                self.unlock(lock).await;
                return Ok(Locked::Renewed);
            }
        }
        Ok(Locked::Held(lock))
    }

    /// `ops` in one transaction that holds only while the lock created at
    /// `revision` under `lock_key` is still ours: a node whose lease ran
    /// out (and whose lock another node may hold now) writes nothing.
    async fn under_lock(
        &self,
        what: &'static str,
        lock_key: &str,
        revision: i64,
        ops: Vec<TxnOp>,
    ) -> Result<(), FleetError> {
        let Some(Session { mut client, .. }) = self.session() else {
            return Err(self.failed(what, EtcdErrorKind::Unreachable, "no session with etcd now"));
        };
        let r = client
            .txn(
                Txn::new()
                    .when([Compare::create_revision(
                        lock_key,
                        CompareOp::Equal,
                        revision,
                    )])
                    .and_then(ops),
            )
            .await
            .map_err(|e| self.etcd_error(what, &e))?;
        if !r.succeeded() {
            return Err(self.failed(
                what,
                EtcdErrorKind::Other,
                "the order lock was lost (this node's lease expired)",
            ));
        }
        Ok(())
    }

    /// Let go of `lock` (only if it is still ours).
    pub async fn unlock(&self, lock: Lock) {
        self.status.locks_held.fetch_sub(1, Ordering::Relaxed);
        // A lock lost meanwhile is nothing to let go of.
        let _ = self
            .under_lock(
                "let go of the order lock",
                &lock.key,
                lock.revision,
                vec![TxnOp::delete(lock.key.as_str(), None)],
            )
            .await;
    }

    fn order_key(&self, acme: &AcmeSettings, names: &[String]) -> String {
        format!("{}order/{}", self.acme_prefix(acme), set_key(names))
    }

    /// The fleet's ACME account, taken under `lock` before an order: the
    /// one in etcd, made this node's own (its account file, which `acme
    /// revoke` and ARI read); if etcd has none, this node's (registered now
    /// if it has none either) put there if still absent, else the one
    /// another node put meanwhile.
    pub async fn share_account(&self, acme: &AcmeSettings, lock: &Lock) -> Result<(), AcmeError> {
        let key = format!("{}account", self.acme_prefix(acme));
        let fleet = |detail: String| AcmeError::FleetAccount {
            url: acme.directory.clone(),
            detail,
        };
        let Some(Session { mut client, .. }) = self.session() else {
            return Err(fleet("no session with etcd now".into()));
        };
        let got = client
            .get(key.as_str(), None)
            .await
            .map_err(|e| fleet(self.etcd_error("read the ACME account", &e).to_string()))?;
        if let Some(kv) = got.kvs().first() {
            return self.use_account(acme, &key, kv.value());
        }
        let ours = crate::acme::account_credentials(acme).await?;
        let sealed = self
            .keys
            .seal(key.as_bytes(), &ours)
            .map_err(|e| fleet(format!("sealing it: {e}")))?;
        let r = client
            .txn(
                Txn::new()
                    .when([
                        Compare::create_revision(key.as_str(), CompareOp::Equal, 0),
                        Compare::create_revision(
                            lock.key.as_str(),
                            CompareOp::Equal,
                            lock.revision,
                        ),
                    ])
                    .and_then([TxnOp::put(key.as_str(), sealed, None)])
                    .or_else([TxnOp::get(key.as_str(), None)]),
            )
            .await
            .map_err(|e| fleet(self.etcd_error("share the ACME account", &e).to_string()))?;
        if r.succeeded() {
            println!("fleet: this node's ACME account shared with the fleet");
            return Ok(());
        }
        let theirs = r.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Get(g) => g.kvs().first().map(|kv| kv.value().to_vec()),
            _ => None,
        });
        match theirs {
            Some(value) => self.use_account(acme, &key, &value),
            None => Err(fleet(
                "the order lock was lost (this node's lease expired) before it was shared".into(),
            )),
        }
    }

    /// The account sealed under `key` in etcd, made this node's.
    fn use_account(&self, acme: &AcmeSettings, key: &str, sealed: &[u8]) -> Result<(), AcmeError> {
        let credentials =
            self.keys
                .open(key.as_bytes(), sealed)
                .map_err(|e| AcmeError::FleetAccount {
                    url: acme.directory.clone(),
                    detail: format!("{key} does not open: {e}"),
                })?;
        crate::acme::use_account(acme, &credentials)
    }

    /// The order record under `lock`, if a holder before left one.
    pub async fn tracker<'a>(
        &'a self,
        acme: &AcmeSettings,
        lock: &Lock,
    ) -> Result<Tracker<'a>, FleetError> {
        let key = self.order_key(acme, &lock.names);
        let Some(Session { mut client, .. }) = self.session() else {
            return Err(self.failed(
                "read the order record",
                EtcdErrorKind::Unreachable,
                "no session with etcd now",
            ));
        };
        let got = client
            .get(key.as_str(), None)
            .await
            .map_err(|e| self.etcd_error("read the order record", &e))?;
        let mut found = None;
        if let Some(kv) = got.kvs().first() {
            match serde_json::from_slice::<OrderRecord>(kv.value()) {
                Ok(record) => found = Some(record),
                Err(e) => tracing::warn!("fleet: {key}: not an order record ({e}); ignored"),
            }
        }
        let resume = match found {
            Some(record) => {
                let key_pem = match &record.key {
                    None => None,
                    Some(sealed) => Some(self.open_key(&key, sealed).map_err(|detail| {
                        self.failed("read the order record", EtcdErrorKind::Other, detail)
                    })?),
                };
                Some((record, key_pem))
            }
            None => None,
        };
        Ok(Tracker {
            node: self,
            key,
            lock_key: lock.key.clone(),
            lock_revision: lock.revision,
            names: lock.names.join(", "),
            resume: Mutex::new(resume),
        })
    }

    fn open_key(&self, key: &str, sealed: &str) -> Result<String, String> {
        let sealed = base64::engine::general_purpose::STANDARD
            .decode(sealed)
            .map_err(|e| format!("{key}: the key's base64: {e}"))?;
        let pem = self
            .keys
            .open(key.as_bytes(), &sealed)
            .map_err(|e| format!("{key}: {e}"))?;
        String::from_utf8(pem.to_vec()).map_err(|e| format!("{key}: {e}"))
    }

    /// Put the certificate obtained under `lock` into etcd and let go of
    /// the lock, in one transaction that holds only while the lock is ours.
    pub async fn publish(
        &self,
        acme: &AcmeSettings,
        lock: Lock,
        issued: &Issued,
    ) -> Result<(), FleetError> {
        let key = self.cert_key(acme, &lock.names);
        let value = self.sealed_cert(&key, &lock.names, issued);
        self.status.locks_held.fetch_sub(1, Ordering::Relaxed);
        self.under_lock(
            "share the certificate",
            &lock.key,
            lock.revision,
            vec![
                TxnOp::put(key.as_str(), value?, None),
                TxnOp::delete(self.order_key(acme, &lock.names).as_str(), None),
                TxnOp::delete(lock.key.as_str(), None),
            ],
        )
        .await
    }
}

/// The challenge answers an order under a [`Lock`] publishes to etcd, on
/// the node's lease, before the CA is asked to validate; taken down when
/// the order ends.
pub struct Publisher<'a> {
    node: &'a Node,
    keys: Mutex<Vec<String>>,
}

impl<'a> Publisher<'a> {
    pub fn new(node: &'a Node) -> Publisher<'a> {
        Publisher {
            node,
            keys: Mutex::new(Vec::new()),
        }
    }

    async fn put(&self, key: String, answer: Answer) -> Result<(), FleetError> {
        let Some(Session { mut client, lease }) = self.node.session() else {
            return Err(self.node.failed(
                "publish a challenge answer",
                EtcdErrorKind::Unreachable,
                "no session with etcd now",
            ));
        };
        let value = serde_json::to_string(&answer).unwrap_or_default();
        client
            .put(
                key.as_str(),
                value,
                Some(PutOptions::new().with_lease(lease)),
            )
            .await
            .map_err(|e| self.node.etcd_error("publish a challenge answer", &e))?;
        self.keys
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(key);
        Ok(())
    }
}

impl crate::acme::Publish for Publisher<'_> {
    fn tls_alpn_01<'b>(
        &'b self,
        name: &'b str,
        digest: &'b [u8],
    ) -> crate::acme::PublishFuture<'b> {
        let key = format!(
            "{}challenge/tls-alpn-01/{}",
            self.node.settings.prefix,
            name.to_ascii_lowercase()
        );
        let answer = Answer::TlsAlpn01 {
            name: name.to_string(),
            digest: hex(digest),
        };
        Box::pin(async move { self.put(key, answer).await.map_err(Into::into) })
    }

    fn http_01<'b>(
        &'b self,
        token: &'b str,
        key_authorization: &'b str,
    ) -> crate::acme::PublishFuture<'b> {
        let key = format!("{}challenge/http-01/{token}", self.node.settings.prefix);
        let answer = Answer::Http01 {
            token: token.to_string(),
            key_authorization: key_authorization.to_string(),
        };
        Box::pin(async move { self.put(key, answer).await.map_err(Into::into) })
    }

    fn withdraw(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            let keys =
                std::mem::take(&mut *self.keys.lock().unwrap_or_else(PoisonError::into_inner));
            let Some(Session { mut client, .. }) = self.node.session() else {
                return;
            };
            for k in keys {
                let _ = client.delete(k.as_str(), None).await;
            }
        })
    }
}

/// The order record of an order under a [`Lock`] (`P/acme/D/order/S`):
/// read when the lock is taken (an order a dead holder left is resumed),
/// written as the order goes on, each write only while the lock is ours;
/// deleted with the certificate's publication.
pub struct Tracker<'a> {
    node: &'a Node,
    key: String,
    lock_key: String,
    lock_revision: i64,
    names: String,
    /// The record found, and its key opened, until the order is resumed.
    resume: Mutex<Option<(OrderRecord, Option<String>)>>,
}

impl Tracker<'_> {
    /// `op` (a put or a delete of the record) in a transaction that holds
    /// only while the lock is ours.
    async fn write(&self, what: &'static str, op: TxnOp) -> Result<(), FleetError> {
        self.node
            .under_lock(what, &self.lock_key, self.lock_revision, vec![op])
            .await
    }

    fn record(&self, url: &str, key: Option<String>) -> String {
        serde_json::to_string(&OrderRecord {
            url: url.to_string(),
            state: if key.is_some() {
                "finalizing"
            } else {
                "ordered"
            }
            .into(),
            key,
            by: self.node.settings.node.clone(),
            since: now_secs(),
        })
        .unwrap_or_default()
    }
}

impl crate::acme::Track for Tracker<'_> {
    fn resume(&self) -> Option<Resume> {
        let guard = self.resume.lock().unwrap_or_else(PoisonError::into_inner);
        let (record, key_pem) = guard.as_ref()?;
        Some(Resume {
            url: record.url.clone(),
            key_pem: key_pem.clone(),
        })
    }

    fn found<'b>(&'b self, status: Option<&'b str>, resumed: bool) -> PublishFuture<'b> {
        let by = self
            .resume
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .map(|(record, _)| record.by)
            .unwrap_or_default();
        Box::pin(async move {
            let status_said = status.unwrap_or("unknown to the CA");
            if resumed {
                self.node.status.takeovers.fetch_add(1, Ordering::Relaxed);
                println!(
                    "fleet: resuming the order of {by} for {} (state {status_said})",
                    self.names
                );
                return Ok(());
            }
            println!(
                "fleet: the order of {by} for {} cannot be finished (state {status_said}): \
                 ordering anew",
                self.names
            );
            self.write("forget an order", TxnOp::delete(self.key.as_str(), None))
                .await
                .map_err(Into::into)
        })
    }

    fn placed<'b>(&'b self, url: &'b str) -> PublishFuture<'b> {
        Box::pin(async move {
            let record = self.record(url, None);
            self.write(
                "keep the order",
                TxnOp::put(self.key.as_str(), record, None),
            )
            .await
            .map_err(Into::into)
        })
    }

    fn keyed<'b>(&'b self, url: &'b str, key_pem: &'b str) -> PublishFuture<'b> {
        Box::pin(async move {
            let sealed = self
                .node
                .keys
                .seal(self.key.as_bytes(), key_pem.as_bytes())
                .map_err(|e| format!("sealing the key: {e}"))?;
            let record = self.record(
                url,
                Some(base64::engine::general_purpose::STANDARD.encode(sealed)),
            );
            self.write(
                "keep the certificate key",
                TxnOp::put(self.key.as_str(), record, None),
            )
            .await
            .map_err(Into::into)
        })
    }
}
