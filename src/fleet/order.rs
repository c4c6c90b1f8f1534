//! An ACME order in the fleet: the lock per set of names it is placed
//! under (a key created on the node's lease only if absent, so one node
//! orders a set at a time and a dead node's lock goes with its lease), the
//! challenge answers published to etcd before the CA validates (so any
//! node answers), and the certificate shared in the transaction that lets
//! the lock go (so nothing is written by a node that lost the lock).

use super::etcd::{EtcdErrorKind, FleetError};
use super::node::{hex, secs_of, set_key, Answer, Holder, Node, Session, StoredCert};
use crate::acme::{AcmeSettings, Issued};
use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
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

    /// Let go of `lock` (only if it is still ours).
    pub async fn unlock(&self, lock: Lock) {
        self.status.locks_held.fetch_sub(1, Ordering::Relaxed);
        let Some(Session { mut client, .. }) = self.session() else {
            return;
        };
        let _ = client
            .txn(
                Txn::new()
                    .when([Compare::create_revision(
                        lock.key.as_str(),
                        CompareOp::Equal,
                        lock.revision,
                    )])
                    .and_then([TxnOp::delete(lock.key.as_str(), None)]),
            )
            .await;
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
        let value = self.sealed_cert(&key, &lock.names, issued)?;
        let Some(Session { mut client, .. }) = self.session() else {
            self.status.locks_held.fetch_sub(1, Ordering::Relaxed);
            return Err(self.failed(
                "share the certificate",
                EtcdErrorKind::Unreachable,
                "etcd was lost during the order",
            ));
        };
        let r = client
            .txn(
                Txn::new()
                    .when([Compare::create_revision(
                        lock.key.as_str(),
                        CompareOp::Equal,
                        lock.revision,
                    )])
                    .and_then([
                        TxnOp::put(key.as_str(), value, None),
                        TxnOp::delete(lock.key.as_str(), None),
                    ]),
            )
            .await;
        self.status.locks_held.fetch_sub(1, Ordering::Relaxed);
        let r = r.map_err(|e| self.etcd_error("share the certificate", &e))?;
        if !r.succeeded() {
            return Err(self.failed(
                "share the certificate",
                EtcdErrorKind::Other,
                "the order lock was lost (this node's lease expired)",
            ));
        }
        Ok(())
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
