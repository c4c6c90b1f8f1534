//! Certificates from ACME for the sites with `acme = true`: a task on the
//! main thread's runtime that obtains each one the sites lack, renews each
//! when `acme::Renewals` says (in the CA's suggested window, else two
//! thirds into its lifetime), retries failures with backoff, and swaps
//! rebuilt sites in once a certificate is stored. The CA's TLS-ALPN-01
//! validation arrives on the sites' own listeners (see `worker`), HTTP-01
//! on the plain-HTTP ones (see `plain`).
//!
//! The same task drops stale OCSP staples (`ocsp = …` sites): it rebuilds
//! the sites when the earliest stapled response's nextUpdate passes
//! ([`Sites::ocsp_recheck`]), and the rebuild staples only what is valid
//! then.

use super::sites::{AcmeCert, Sites};
use super::Front;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// How long the task sleeps at most before it looks again.
const LOOK_AGAIN: Duration = Duration::from_secs(3600);

/// How long after a failed rebuild the task tries again.
const REBUILD_RETRY: Duration = Duration::from_secs(60);

/// When `cert` (for `names`) is due for (re)issuance: at once for a
/// placeholder, else when `renewals` says (and when to ask the CA again).
async fn due(
    renewals: &mut crate::acme::Renewals,
    acme: &crate::acme::AcmeSettings,
    names: &[String],
    cert: AcmeCert,
) -> crate::acme::Due {
    match cert {
        AcmeCert::Placeholder => crate::acme::Due {
            at: SystemTime::UNIX_EPOCH,
            ask_again: None,
        },
        AcmeCert::Issued {
            not_before,
            not_after,
        } => renewals.due(acme, names, not_before, not_after).await,
    }
}

/// Failures in a row for a set of names, and when to try again.
struct Backoff {
    failures: u32,
    next: SystemTime,
    /// Why the fleet made it wait, as last said (said once).
    said: Option<String>,
}

/// What one look at a due certificate came to.
enum Obtained {
    /// Ordered (by this node): issued, or failed.
    Done(Result<crate::acme::Issued, crate::acme::AcmeError>),
    /// Another node's newer certificate was found and stored here.
    Stored,
    /// Not ordered now (another node orders it, or etcd is away, or this
    /// node never orders): look again after the delay.
    Wait(Duration, String),
}

/// How long a node that found another ordering waits before it looks
/// again: past the lock's lease, so that it takes over if the holder died
/// (the holder's certificate, if it comes, makes the set not due anyway).
fn busy_wait(node: &crate::fleet::node::Node) -> Duration {
    node.settings().lock_ttl + Duration::from_secs(5)
}

/// How long a node waits for etcd before it looks again at a due set.
const ETCD_WAIT: Duration = Duration::from_secs(2);

/// A due certificate in a fleet: ordered only under the set's lock in
/// etcd, with the challenge answers published there, and the certificate
/// shared through etcd once issued.
async fn in_fleet(
    front: &Front,
    node: &crate::fleet::node::Node,
    acme: &crate::acme::AcmeSettings,
    site: &crate::config::Site,
    cert: AcmeCert,
) -> Obtained {
    use crate::fleet::order::{Locked, Publisher};
    if !node.settings().order {
        return Obtained::Wait(
            LOOK_AGAIN,
            "due, and this node does not order ([fleet] order = false): waiting for another \
             node's certificate"
                .into(),
        );
    }
    let local = match cert {
        AcmeCert::Issued { not_after, .. } => Some(not_after),
        AcmeCert::Placeholder => None,
    };
    let lock = match node.lock(acme, &site.names, local).await {
        Ok(Locked::Held(lock)) => lock,
        Ok(Locked::Renewed) => return Obtained::Stored,
        Ok(Locked::Busy(by)) => {
            return Obtained::Wait(
                busy_wait(node),
                format!("node {by} is ordering it; waiting for its certificate"),
            )
        }
        Err(e) => {
            return Obtained::Wait(
                ETCD_WAIT,
                format!("due, and not ordered: an order needs the fleet's lock ({e})"),
            )
        }
    };
    // One account for the fleet, and the order a dead holder left, if any.
    if let Err(e) = node.share_account(acme, &lock).await {
        node.unlock(lock).await;
        return Obtained::Done(Err(e));
    }
    let tracker = match node.tracker(acme, &lock).await {
        Ok(t) => t,
        Err(e) => {
            node.unlock(lock).await;
            return Obtained::Wait(
                ETCD_WAIT,
                format!("due, and not ordered: the order record is unread ({e})"),
            );
        }
    };
    let publisher = Publisher::new(node);
    let result = crate::acme::obtain_tracked(
        acme,
        &site.names,
        &front.challenges,
        site.acme_challenge,
        Some(&publisher),
        Some(&tracker),
    )
    .await;
    match &result {
        Ok(issued) => {
            if let Err(e) = node.publish(acme, lock, issued).await {
                // Stored here; the other nodes renew it themselves later.
                tracing::warn!(
                    "fleet: the certificate for {} was not shared: {e}",
                    site.names.join(", ")
                );
            }
        }
        Err(_) => node.unlock(lock).await,
    }
    Obtained::Done(result)
}

/// Run for the life of the process.
pub(super) async fn manage(front: Arc<Front>) {
    let mut backoff: HashMap<Vec<String>, Backoff> = HashMap::new();
    let mut renewals = crate::acme::Renewals::default();
    loop {
        let sites = front.sites.load_full();
        let now = SystemTime::now();
        let mut wake = now + LOOK_AGAIN;
        let mut issued = false;
        for (site, cert) in sites.acme_sites() {
            let due = due(&mut renewals, &sites.settings.acme, &site.names, cert).await;
            if let Some(t) = due.ask_again {
                wake = wake.min(t);
            }
            let mut at = due.at;
            if let Some(b) = backoff.get(&site.names) {
                at = at.max(b.next);
            }
            if at > now {
                wake = wake.min(at);
                continue;
            }
            let names = site.names.join(", ");
            let acme = &sites
                .settings
                .acme
                .with_profile(site.acme_profile.as_deref());
            let obtained = match &front.fleet {
                None => Obtained::Done(
                    crate::acme::obtain_with(
                        acme,
                        &site.names,
                        &front.challenges,
                        site.acme_challenge,
                    )
                    .await,
                ),
                Some(node) => in_fleet(&front, node, acme, site, cert).await,
            };
            match obtained {
                Obtained::Done(Ok(i)) => {
                    backoff.remove(&site.names);
                    println!(
                        "certificate issued by {} for {names}, valid until {}",
                        acme.directory,
                        httpdate::fmt_http_date(i.not_after)
                    );
                    issued = true;
                }
                Obtained::Stored => {
                    backoff.remove(&site.names);
                    issued = true;
                }
                Obtained::Wait(delay, why) => {
                    let b = backoff.entry(site.names.clone()).or_insert(Backoff {
                        failures: 0,
                        next: now,
                        said: None,
                    });
                    b.next = SystemTime::now() + delay;
                    wake = wake.min(b.next);
                    // Said once, not at every look.
                    if b.said.as_deref() != Some(why.as_str()) {
                        println!("fleet: {names}: {why}");
                        b.said = Some(why);
                    }
                }
                Obtained::Done(Err(e)) => {
                    front.metrics.error("acme_failed");
                    let b = backoff.entry(site.names.clone()).or_insert(Backoff {
                        failures: 0,
                        next: now,
                        said: None,
                    });
                    b.failures += 1;
                    b.said = None;
                    let delay = crate::acme::retry_delay(b.failures);
                    b.next = SystemTime::now() + delay;
                    wake = wake.min(b.next);
                    tracing::warn!(
                        "ACME: no certificate for {names} ({} failure{} in a row), next try in \
                         {} s: {e}",
                        b.failures,
                        if b.failures == 1 { "" } else { "s" },
                        delay.as_secs()
                    );
                }
            }
        }
        // A stapled OCSP response must stop being stapled once its
        // nextUpdate passes (and one not valid yet starts being stapled at
        // its thisUpdate). Rather than a clock check in every handshake,
        // the sites are rebuilt at the earliest such time: the build reads
        // the response files again and staples only what is valid then
        // (also a newer file a cron job put there meanwhile).
        let ocsp_due = match sites.ocsp_recheck {
            Some(t) if t <= now => true,
            Some(t) => {
                wake = wake.min(t);
                false
            }
            None => false,
        };
        if issued || ocsp_due {
            if ocsp_due && !issued {
                println!("OCSP staples are due for a look: rebuilding the sites");
            }
            let rebuilt = rebuild(&front, &sites);
            // Not kept while waiting: what old sites hold (roots, logs) is
            // let go once a reload swaps them out.
            drop(sites);
            if !rebuilt {
                // Not rebuilt (logged): the same sites would be due again
                // at once; look again in a while, or after a reload.
                tokio::select! {
                    _ = tokio::time::sleep(REBUILD_RETRY) => {}
                    _ = front.sites_changed.notified() => {}
                }
            }
            continue;
        }
        let sleep = wake
            .duration_since(SystemTime::now())
            .unwrap_or_default()
            .max(Duration::from_millis(100));
        drop(sites);
        tokio::select! {
            _ = tokio::time::sleep(sleep) => {}
            // A reload may have added sites; it also has the CA asked
            // again about every certificate's renewal.
            _ = front.sites_changed.notified() => renewals.ask_again(),
        }
    }
}

/// The server's side of a fleet node: its ACME settings, and a rebuild
/// once certificates from the fleet are stored.
pub(super) struct FleetHost(pub Arc<Front>);

impl crate::fleet::node::Host for FleetHost {
    fn acme(&self) -> crate::acme::AcmeSettings {
        self.0.sites.load().settings.acme.clone()
    }

    fn acme_names(&self) -> Vec<Vec<String>> {
        self.0
            .sites
            .load()
            .acme_sites()
            .map(|(s, _)| s.names.clone())
            .collect()
    }

    fn certificates_stored(&self) {
        let sites = self.0.sites.load_full();
        if rebuild(&self.0, &sites) {
            // The renewal loop looks at the new dates.
            self.0.sites_changed.notify_one();
        }
    }
}

/// Build the sites again from the settings they were built from (the new
/// certificates are in the state directory now; the OCSP files are read
/// again) and swap them in; whether that worked.
fn rebuild(front: &Front, sites: &Sites) -> bool {
    match Sites::build(&sites.settings, &front.shared, &mut |l| println!("{l}")) {
        Ok(new) => {
            front.metrics.certificates(new.expiry());
            front.sites.store(Arc::new(new));
            true
        }
        // The old sites stay; a stale OCSP staple in them stays too, which
        // clients treat as no staple at best: say so loudly.
        Err(e) => {
            tracing::error!(
                "the sites could not be rebuilt (new certificate or OCSP staple due), retrying \
                 in {} s or on reload: {e}",
                REBUILD_RETRY.as_secs()
            );
            false
        }
    }
}
