//! The process's metrics, in one `prometheus-client` registry: what the
//! admin listener's `/metrics` encodes (docs/METRICS.md lists every family)
//! and what the shutdown summary ([`Metrics::report`]) is read from.
//!
//! Cost on the data path is the point of this project, so no label set is
//! hashed per byte count: a site's counters ([`SiteMetrics`]) are looked up
//! once per site (its first connection) and held by each connection, and
//! counting bytes is one relaxed atomic add on an already resolved counter.
//! Families keyed only by rare events (errors, handshake failures) are
//! looked up when the event happens.

use crate::transport::Path;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, OnceLock};

/// Why a connection stayed in user-space TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// `--ktls off`.
    Disabled,
    /// The kernel has no usable kTLS at all.
    NoKernelSupport,
    /// `TCP_ULP` failed on this socket.
    UlpFailed,
    /// The kernel does not offload the negotiated version and cipher.
    Cipher,
    /// Data was already buffered in user space at handoff time.
    Buffered,
}

impl Fallback {
    const ALL: [Fallback; 5] = [
        Fallback::Disabled,
        Fallback::NoKernelSupport,
        Fallback::UlpFailed,
        Fallback::Cipher,
        Fallback::Buffered,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fallback::Disabled => "disabled",
            Fallback::NoKernelSupport => "no_kernel_support",
            Fallback::UlpFailed => "ulp_failed",
            Fallback::Cipher => "cipher_not_offloaded",
            Fallback::Buffered => "data_buffered",
        }
    }
}

fn path_name(p: Path) -> &'static str {
    match p {
        Path::Ktls => "ktls",
        Path::Userspace => "userspace",
    }
}

fn idx(p: Path) -> usize {
    match p {
        Path::Ktls => 0,
        Path::Userspace => 1,
    }
}

const PATHS: [Path; 2] = [Path::Ktls, Path::Userspace];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PathSite {
    path: &'static str,
    site: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SiteLabel {
    site: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SiteStatus {
    site: Arc<str>,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SiteKind {
    site: Arc<str>,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SiteCert {
    site: Arc<str>,
    cert: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Kind {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Version {
    version: &'static str,
}

/// Buckets of the request duration: from a small file answered from the
/// page cache to a large download on a slow link.
const DURATION_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0,
];

/// The statuses a site's counters keep a resolved handle for (those the
/// file service answers with); any other status is looked up in the family
/// on each response.
const STATUSES: [u16; 19] = [
    200, 206, 301, 304, 400, 403, 404, 405, 408, 412, 413, 414, 416, 417, 431, 500, 501, 503, 505,
];

/// A family keyed by a static name (an error kind, a reason), and the
/// counters made so far, for the summary.
#[derive(Debug)]
struct Named<L> {
    family: Family<L, Counter>,
    seen: Mutex<BTreeMap<&'static str, Counter>>,
    label: fn(&'static str) -> L,
}

impl<
        L: Clone + std::hash::Hash + Eq + EncodeLabelSet + std::fmt::Debug + Send + Sync + 'static,
    > Named<L>
{
    fn new(label: fn(&'static str) -> L) -> Self {
        Named {
            family: Family::default(),
            seen: Mutex::new(BTreeMap::new()),
            label,
        }
    }

    fn inc(&self, name: &'static str) {
        if let Ok(mut seen) = self.seen.lock() {
            seen.entry(name)
                .or_insert_with(|| self.family.get_or_create(&(self.label)(name)).clone())
                .inc();
        }
    }

    fn counts(&self) -> Vec<(&'static str, u64)> {
        self.seen
            .lock()
            .map(|m| m.iter().map(|(k, c)| (*k, c.get())).collect())
            .unwrap_or_default()
    }
}

/// One site's counters, resolved once and held by its connections.
#[derive(Debug)]
pub struct SiteMetrics {
    label: Arc<str>,
    connections: [Counter; 2],
    sent: [Counter; 2],
    received: [Counter; 2],
    duration: Histogram,
    responses: Family<SiteStatus, Counter>,
    /// The handles of [`STATUSES`], made on their first response so that
    /// only statuses that were sent show up.
    status: [OnceLock<Counter>; STATUSES.len()],
    backend_errors: Family<SiteKind, Counter>,
}

impl SiteMetrics {
    /// A connection on data path `p`.
    pub fn connection(&self, p: Path) {
        self.connections[idx(p)].inc();
    }

    /// Application bytes sent to clients.
    pub fn bytes(&self, p: Path, n: u64) {
        self.sent[idx(p)].inc_by(n);
    }

    /// Application bytes received from clients (the proxy).
    pub fn bytes_in(&self, p: Path, n: u64) {
        self.received[idx(p)].inc_by(n);
    }

    /// A response with `code`. Per request, so no hashing for the statuses
    /// tlsfront sends: a scan of [`STATUSES`] (a few compares) and the
    /// handle made on that status's first response; the family (a lock and
    /// a hash of the labels) only for a status outside the list.
    pub fn status(&self, code: u16) {
        match STATUSES.iter().position(|s| *s == code) {
            Some(i) => self.status[i]
                .get_or_init(|| self.status_counter(code))
                .inc(),
            None => self.status_counter(code).inc(),
        };
    }

    fn status_counter(&self, code: u16) -> Counter {
        self.responses
            .get_or_create(&SiteStatus {
                site: self.label.clone(),
                status: code,
            })
            .clone()
    }

    /// A request answered, `secs` after its head was read. The histogram
    /// takes its own mutex, once per request (not per byte): uncontended
    /// but for requests of one site finishing at once on several workers.
    pub fn request_done(&self, secs: f64) {
        self.duration.observe(secs);
    }

    /// The backend failed (`kind` as [`crate::proxy::backend::ConnectError::kind`]
    /// or the relay's, without their `backend_` prefix in the label).
    pub fn backend_error(&self, kind: &'static str) {
        let kind = kind.strip_prefix("backend_").unwrap_or(kind);
        self.backend_errors
            .get_or_create(&SiteKind {
                site: self.label.clone(),
                kind,
            })
            .inc();
    }
}

/// An open connection, counted in `tlsfront_connections_active` until it
/// is dropped (a panicking connection's task drops it too).
pub struct Active(Gauge);

impl Drop for Active {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Every metric of the process.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    connections: Family<PathSite, Counter>,
    sent: Family<PathSite, Counter>,
    received: Family<PathSite, Counter>,
    active: Gauge,
    handshakes: [Counter; 2],
    handshake_failures: Named<Reason>,
    fallback: [Counter; 5],
    responses: Family<SiteStatus, Counter>,
    duration: Family<SiteLabel, Histogram>,
    backend_errors: Family<SiteKind, Counter>,
    errors: Named<Kind>,
    cert_expiry: Family<SiteCert, Gauge>,
    ticket_key_age: Gauge,
    reloads: Counter,
    /// The sites' handles by label: a site rebuilt by a reload keeps
    /// counting where it was.
    sites: Mutex<HashMap<Arc<str>, Arc<SiteMetrics>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut r = Registry::with_prefix("tlsfront");
        let connections = Family::<PathSite, Counter>::default();
        r.register(
            "connections",
            "TLS connections after their handshake, by data path and site",
            connections.clone(),
        );
        let sent = Family::<PathSite, Counter>::default();
        r.register_with_unit(
            "sent",
            "Application bytes sent to clients (HTTP heads and bodies, proxied bytes)",
            Unit::Bytes,
            sent.clone(),
        );
        let received = Family::<PathSite, Counter>::default();
        r.register_with_unit(
            "received",
            "Application bytes received from clients and passed to backends",
            Unit::Bytes,
            received.clone(),
        );
        let active = Gauge::default();
        r.register(
            "connections_active",
            "Connections open now (from accept)",
            active.clone(),
        );
        let handshakes_family = Family::<Kind, Counter>::default();
        r.register(
            "handshakes",
            "Completed TLS handshakes, full or resumed",
            handshakes_family.clone(),
        );
        let handshakes =
            ["full", "resumed"].map(|kind| handshakes_family.get_or_create(&Kind { kind }).clone());
        let handshake_failures = Named::new(|reason| Reason { reason });
        r.register(
            "handshake_failures",
            "TLS handshakes that failed, by reason",
            handshake_failures.family.clone(),
        );
        let fallback_family = Family::<Reason, Counter>::default();
        r.register(
            "ktls_fallback",
            "Connections left in user-space TLS, by reason",
            fallback_family.clone(),
        );
        let fallback = Fallback::ALL.map(|f| {
            fallback_family
                .get_or_create(&Reason { reason: f.name() })
                .clone()
        });
        let responses = Family::<SiteStatus, Counter>::default();
        r.register(
            "responses",
            "HTTP responses of static-file sites, by site and status",
            responses.clone(),
        );
        let duration: Family<SiteLabel, Histogram> =
            Family::new_with_constructor(|| Histogram::new(DURATION_BUCKETS));
        r.register_with_unit(
            "request_duration",
            "Static-file requests, from their head read to their response sent",
            Unit::Seconds,
            duration.clone(),
        );
        let backend_errors = Family::<SiteKind, Counter>::default();
        r.register(
            "backend_errors",
            "Backend failures of proxy sites, by site and kind",
            backend_errors.clone(),
        );
        let errors = Named::new(|kind| Kind { kind });
        r.register(
            "errors",
            "Errors by kind (the shutdown summary's list)",
            errors.family.clone(),
        );
        let cert_expiry = Family::<SiteCert, Gauge>::default();
        r.register_with_unit(
            "certificate_expiry_timestamp",
            "When each site's certificate expires (notAfter), Unix time",
            Unit::Seconds,
            cert_expiry.clone(),
        );
        let ticket_key_age = Gauge::default();
        r.register_with_unit(
            "ticket_key_age",
            "Age of the session ticket key that encrypts now",
            Unit::Seconds,
            ticket_key_age.clone(),
        );
        let reloads = Counter::default();
        r.register(
            "reloads",
            "Configurations loaded by SIGHUP",
            reloads.clone(),
        );
        let build = Family::<Version, Gauge>::default();
        build
            .get_or_create(&Version {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        r.register("build_info", "The running version, always 1", build);
        Metrics {
            registry: r,
            connections,
            sent,
            received,
            active,
            handshakes,
            handshake_failures,
            fallback,
            responses,
            duration,
            backend_errors,
            errors,
            cert_expiry,
            ticket_key_age,
            reloads,
            sites: Mutex::new(HashMap::new()),
        }
    }
}

impl Metrics {
    /// The counters of the site labelled `label` ([`crate::config::Site::label`]).
    pub fn site(&self, label: &Arc<str>) -> Arc<SiteMetrics> {
        let Ok(mut sites) = self.sites.lock() else {
            return Arc::new(self.make_site(label));
        };
        sites
            .entry(label.clone())
            .or_insert_with(|| Arc::new(self.make_site(label)))
            .clone()
    }

    fn make_site(&self, label: &Arc<str>) -> SiteMetrics {
        let per_path = |f: &Family<PathSite, Counter>| {
            PATHS.map(|p| {
                f.get_or_create(&PathSite {
                    path: path_name(p),
                    site: label.clone(),
                })
                .clone()
            })
        };
        SiteMetrics {
            label: label.clone(),
            connections: per_path(&self.connections),
            sent: per_path(&self.sent),
            received: per_path(&self.received),
            duration: self
                .duration
                .get_or_create(&SiteLabel {
                    site: label.clone(),
                })
                .clone(),
            responses: self.responses.clone(),
            status: Default::default(),
            backend_errors: self.backend_errors.clone(),
        }
    }

    /// A connection accepted; it counts as active until the guard drops.
    pub fn open(&self) -> Active {
        self.active.inc();
        Active(self.active.clone())
    }

    /// A completed handshake.
    pub fn handshake(&self, resumed: bool) {
        self.handshakes[usize::from(resumed)].inc();
    }

    /// A failed handshake (`reason`: [`crate::tls::handshake::HandshakeError::label`],
    /// `timeout`, or `other`).
    pub fn handshake_failed(&self, reason: &'static str) {
        self.handshake_failures.inc(reason);
    }

    pub fn fallback(&self, f: Fallback) {
        let i = Fallback::ALL.iter().position(|x| *x == f).unwrap_or(0);
        self.fallback[i].inc();
    }

    pub fn error(&self, kind: &'static str) {
        self.errors.inc(kind);
    }

    pub fn reloaded(&self) {
        self.reloads.inc();
    }

    /// Replace every certificate expiry series with `certs` (site label,
    /// certificate, notAfter as Unix time): sites gone since the last
    /// call lose theirs.
    pub fn certificates(&self, certs: impl IntoIterator<Item = (Arc<str>, String, i64)>) {
        self.cert_expiry.clear();
        for (site, cert, not_after) in certs {
            self.cert_expiry
                .get_or_create(&SiteCert { site, cert })
                .set(not_after);
        }
    }

    /// The text `/metrics` answers, OpenMetrics; `ticket_key_age`: the age
    /// of the encrypting ticket key now (it changes without any event to
    /// count, so it is set at each scrape).
    pub fn encode(&self, ticket_key_age: std::time::Duration) -> String {
        self.ticket_key_age
            .set(i64::try_from(ticket_key_age.as_secs()).unwrap_or(i64::MAX));
        let mut s = String::new();
        // Writing to a String does not fail.
        let _ = prometheus_client::encoding::text::encode(&mut s, &self.registry);
        s
    }

    /// A multi-line summary, logged at shutdown.
    pub fn report(&self) -> String {
        let sites: Vec<Arc<SiteMetrics>> = self
            .sites
            .lock()
            .map(|m| m.values().cloned().collect())
            .unwrap_or_default();
        let total = |f: fn(&SiteMetrics) -> &[Counter; 2], p: Path| -> u64 {
            sites.iter().map(|s| f(s)[idx(p)].get()).sum()
        };
        let mut s = String::new();
        let _ = writeln!(
            s,
            "connections: ktls {} userspace {}; bytes out: ktls {} userspace {}; bytes in: ktls {} userspace {}",
            total(|s| &s.connections, Path::Ktls),
            total(|s| &s.connections, Path::Userspace),
            total(|s| &s.sent, Path::Ktls),
            total(|s| &s.sent, Path::Userspace),
            total(|s| &s.received, Path::Ktls),
            total(|s| &s.received, Path::Userspace),
        );
        let fb: Vec<String> = Fallback::ALL
            .iter()
            .zip(self.fallback.iter())
            .filter(|(_, n)| n.get() > 0)
            .map(|(f, n)| format!("{} {}", f.name(), n.get()))
            .collect();
        let _ = writeln!(s, "user-space reasons: {}", listed(fb));
        let failed: u64 = self
            .handshake_failures
            .counts()
            .iter()
            .map(|(_, n)| n)
            .sum();
        let _ = writeln!(
            s,
            "handshakes: full {} resumed {} failed {failed}",
            self.handshakes[0].get(),
            self.handshakes[1].get(),
        );
        let reloads = self.reloads.get();
        if reloads > 0 {
            let _ = writeln!(s, "reloads: {reloads}");
        }
        let mut statuses = BTreeMap::<u16, u64>::new();
        for site in &sites {
            for (code, c) in STATUSES.iter().zip(&site.status) {
                if let Some(c) = c.get() {
                    *statuses.entry(*code).or_default() += c.get();
                }
            }
        }
        let st: Vec<String> = statuses
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(c, n)| format!("{c} {n}"))
            .collect();
        let _ = writeln!(s, "responses: {}", listed(st));
        let e: Vec<String> = self
            .errors
            .counts()
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = write!(s, "errors: {}", listed(e));
        s
    }
}

fn listed(items: Vec<String>) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_lists_what_happened() {
        let m = Metrics::default();
        let site = m.site(&Arc::from("*"));
        site.connection(Path::Userspace);
        m.fallback(Fallback::NoKernelSupport);
        site.status(200);
        site.status(200);
        m.error("reset");
        m.handshake(true);
        m.handshake_failed("timeout");
        let r = m.report();
        assert!(r.contains("ktls 0 userspace 1"), "{r}");
        assert!(r.contains("no_kernel_support 1"), "{r}");
        assert!(r.contains("handshakes: full 0 resumed 1 failed 1"), "{r}");
        assert!(r.contains("responses: 200 2"), "{r}");
        assert!(r.contains("errors: reset 1"), "{r}");
    }

    fn line<'a>(text: &'a str, start: &str) -> &'a str {
        text.lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no line {start} in\n{text}"))
    }

    #[test]
    fn families_are_encoded_with_their_labels_and_units() {
        let m = Metrics::default();
        let a = m.site(&Arc::from("a.test"));
        let b = m.site(&Arc::from("*"));
        a.connection(Path::Ktls);
        a.bytes(Path::Ktls, 1000);
        b.bytes_in(Path::Userspace, 7);
        a.status(404);
        a.status(404);
        a.status(299);
        a.request_done(0.002);
        b.backend_error("backend_refused");
        m.handshake(false);
        m.handshake_failed("plaintext_on_tls_port");
        m.fallback(Fallback::Cipher);
        m.error("reset");
        m.reloaded();
        // The same label gets the same counters.
        m.site(&Arc::from("a.test")).status(404);
        let t = m.encode(std::time::Duration::from_secs(42));
        for want in [
            "tlsfront_connections_total{path=\"ktls\",site=\"a.test\"} 1",
            "tlsfront_connections_total{path=\"userspace\",site=\"a.test\"} 0",
            "tlsfront_sent_bytes_total{path=\"ktls\",site=\"a.test\"} 1000",
            "tlsfront_received_bytes_total{path=\"userspace\",site=\"*\"} 7",
            "tlsfront_responses_total{site=\"a.test\",status=\"404\"} 3",
            "tlsfront_responses_total{site=\"a.test\",status=\"299\"} 1",
            "tlsfront_request_duration_seconds_count{site=\"a.test\"} 1",
            "tlsfront_request_duration_seconds_bucket{le=\"0.0025\",site=\"a.test\"} 1",
            "tlsfront_backend_errors_total{site=\"*\",kind=\"refused\"} 1",
            "tlsfront_handshakes_total{kind=\"full\"} 1",
            "tlsfront_handshakes_total{kind=\"resumed\"} 0",
            "tlsfront_handshake_failures_total{reason=\"plaintext_on_tls_port\"} 1",
            "tlsfront_ktls_fallback_total{reason=\"cipher_not_offloaded\"} 1",
            "tlsfront_errors_total{kind=\"reset\"} 1",
            "tlsfront_reloads_total 1",
            "tlsfront_ticket_key_age_seconds 42",
            "tlsfront_build_info{version=\"",
            "# TYPE tlsfront_request_duration_seconds histogram",
            "# UNIT tlsfront_sent_bytes bytes",
        ] {
            line(&t, want);
        }
        assert!(t.ends_with("# EOF\n"), "{t}");
    }

    #[test]
    fn certificate_series_follow_the_sites() {
        let m = Metrics::default();
        m.certificates([
            (Arc::from("a.test"), "a.pem".to_string(), 1_900_000_000),
            (Arc::from("b.test"), "b.pem".to_string(), 1_800_000_000),
        ]);
        let t = m.encode(Default::default());
        line(
            &t,
            "tlsfront_certificate_expiry_timestamp_seconds{site=\"b.test\",cert=\"b.pem\"} 1800000000",
        );
        // A reload without b.test: its series is gone.
        m.certificates([(Arc::from("a.test"), "a.pem".to_string(), 1_900_000_001)]);
        let t = m.encode(Default::default());
        assert!(!t.contains("b.test"), "{t}");
        line(
            &t,
            "tlsfront_certificate_expiry_timestamp_seconds{site=\"a.test\",cert=\"a.pem\"} 1900000001",
        );
    }
}
