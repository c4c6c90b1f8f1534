//! The process's metrics, in one `prometheus-client` registry: what the
//! admin listener's `/metrics` encodes (docs/METRICS.md lists every family),
//! in OpenMetrics or in the Prometheus text format 0.0.4 as the scraper's
//! `Accept` asks ([`Format`]), and what the shutdown summary
//! ([`Metrics::report`]) is read from. Also the `process_*` families, read
//! from `/proc/self` at each scrape.
//!
//! Cost on the data path is the point of this project, so no label set is
//! hashed per byte count: a site's counters ([`SiteMetrics`]) are looked up
//! once per site (its first connection) and held by each connection, and
//! counting bytes is one relaxed atomic add on an already resolved counter.
//! Families keyed only by rare events (errors, handshake failures) are
//! looked up when the event happens.

use crate::transport::Path;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
    data_path: &'static str,
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
struct Event {
    event: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Protocol {
    protocol: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CertResult {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PlainAnswer {
    answer: &'static str,
}

/// The answers of `tlsfront_plain_http_requests_total`, made at zero on
/// start (see `server::plain`).
pub const PLAIN_HTTP_ANSWERS: [&str; 5] = [
    "redirect",
    "acme_challenge",
    "misdirected",
    "not_found",
    "bad_request",
];

/// The results of `tlsfront_client_certificates_total`, made at zero on
/// start: a handshake done with a verified certificate or (`optional`)
/// none, or refused for want of one or because it did not verify.
const CLIENT_CERT_RESULTS: [&str; 7] = [
    "verified",
    "none",
    "missing",
    "unknown_ca",
    "revoked",
    "expired",
    "invalid",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Version {
    version: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Negotiated {
    version: &'static str,
    cipher_suite: &'static str,
    group: &'static str,
}

/// Buckets of the handshake duration: from a resumption on loopback to a
/// full handshake with a slow client far away (the default handshake
/// timeout ends them).
const HANDSHAKE_BUCKETS: [f64; 13] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0,
];

/// The reasons a handshake fails that tlsfront names (the `reason` label
/// of `tlsfront_handshake_failures_total`), made at zero on start so that
/// `increase()` sees a first failure; a reason not listed here still
/// counts, from its first event.
const HANDSHAKE_FAILURES: [&str; 14] = [
    "eof",
    "timeout",
    "plaintext_on_tls_port",
    "hello_obsolete_version",
    "hello_inappropriate_fallback",
    "hello_renegotiation_info",
    "hello_unrecognized_name",
    "tls",
    "tls_protocol",
    "peer_alert",
    "record_limit",
    "reset",
    "io",
    "other",
];

/// Likewise for `tlsfront_errors_total`: the kinds an alert is likely to
/// watch (limits, failed reloads and upgrades, panics, backends).
const ERRORS: [&str; 16] = [
    "accept",
    "connection_limit",
    "handshake_timeout",
    "ktls_setup",
    "panic",
    "reload_failed",
    "upgrade_failed",
    "acme_failed",
    "admin_connection_limit",
    "proxy_untrusted",
    "proxy_header",
    "backend_refused",
    "backend_timeout",
    "backend_unreachable",
    "backend_error",
    "send_timeout",
];

/// The events of `tlsfront_http2_events_total`: connections, and each kind
/// of client behaviour the server refused or ended a connection for.
pub const HTTP2_EVENTS: [&str; 9] = [
    "connection",
    "stream_refused",
    "client_reset",
    "stream_error",
    "protocol_error",
    "flow_control_error",
    "compression_error",
    "enhance_your_calm",
    "idle_timeout",
];

/// The error kind of a refused reload: it also turns
/// `tlsfront_config_last_reload_successful` to 0.
const RELOAD_FAILED: &str = "reload_failed";

/// The exposition format of a scrape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 text, what Prometheus asks for first.
    OpenMetrics,
    /// The same text to a scraper that accepts only version 0.0.1 (the
    /// draft 1.0.0 was released as; nothing differs in what is written
    /// here), labelled with the version it asked for.
    OpenMetrics001,
    /// The Prometheus text format 0.0.4: what anything else gets
    /// (`promtool check metrics`, older scrapers, a browser, curl).
    Text,
}

impl Format {
    /// The format an `Accept` header asks for, as the Go client
    /// (`expfmt.NegotiateIncludingOpenMetrics`) decides: the media ranges
    /// by preference (`q`), the first that is OpenMetrics (version 1.0.0,
    /// 0.0.1 or none) or `text/plain` (version 0.0.4 or none) wins, and
    /// the text format when none is (`*/*`, no header).
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Text;
        };
        let mut ranges: Vec<(f64, Option<Format>)> = accept
            .split(',')
            .map(|range| {
                let mut parts = range.split(';');
                let kind = parts.next().unwrap_or_default().trim();
                let mut q = 1.0;
                let mut version = None;
                for p in parts {
                    let Some((k, v)) = p.split_once('=') else {
                        continue;
                    };
                    let v = v.trim().trim_matches('"');
                    match k.trim().to_ascii_lowercase().as_str() {
                        "q" => q = v.parse().unwrap_or(0.0),
                        "version" => version = Some(v.to_string()),
                        _ => {}
                    }
                }
                let version = version.as_deref();
                let om = kind.eq_ignore_ascii_case("application/openmetrics-text");
                let format = if om && matches!(version, None | Some("1.0.0")) {
                    Some(Format::OpenMetrics)
                } else if om && version == Some("0.0.1") {
                    Some(Format::OpenMetrics001)
                } else if kind.eq_ignore_ascii_case("text/plain")
                    && matches!(version, None | Some("0.0.4"))
                {
                    Some(Format::Text)
                } else {
                    None
                };
                (q, format)
            })
            .filter(|(q, _)| *q > 0.0)
            .collect();
        // Stable: among equal preferences the header's order decides.
        ranges.sort_by(|a, b| b.0.total_cmp(&a.0));
        ranges
            .into_iter()
            .find_map(|(_, f)| f)
            .unwrap_or(Format::Text)
    }

    /// The answer's `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::OpenMetrics001 => "application/openmetrics-text; version=0.0.1; charset=utf-8",
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// OpenMetrics text as `prometheus-client` writes it, rewritten to the
/// Prometheus text format 0.0.4. Sound for what that encoder writes (each
/// family is `# HELP`, `# TYPE`, maybe `# UNIT`, then its samples, and this
/// registry has no exemplars): a counter's family is named with its
/// `_total` as its samples are, `# UNIT` and `# EOF` go, `_created`
/// samples go, `unknown` is `untyped` and `info` a gauge named `_info`.
/// Label values are escaped alike in both formats, and no help text here
/// has a character the two escape differently (a test checks).
fn openmetrics_to_text(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    let mut help: Option<&str> = None;
    let mut counter: Option<String> = None;
    for line in om.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = rest.split_once(' ').map(|(_, text)| text);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.rsplit_once(' ').unwrap_or((rest, "untyped"));
            let (name, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "unknown" => (name.to_string(), "untyped"),
                other => (name.to_string(), other),
            };
            counter = (kind == "counter").then(|| name.trim_end_matches("_total").to_string());
            if let Some(text) = help.take() {
                let _ = writeln!(out, "# HELP {name} {text}");
            }
            let _ = writeln!(out, "# TYPE {name} {kind}");
            continue;
        }
        if line.starts_with('#') {
            // `# UNIT`, `# EOF`.
            continue;
        }
        if let Some(base) = &counter {
            if line
                .strip_prefix(base.as_str())
                .is_some_and(|r| r.starts_with("_created"))
            {
                continue;
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The `process_*` families of the Go client, read from `/proc/self` at
/// each scrape (a family whose source cannot be read is left out).
#[derive(Debug)]
struct Process {
    /// Unix time the process started, read once.
    start: Option<f64>,
}

/// The kernel's clock ticks per second as `/proc` reports times
/// (`USER_HZ`): 100 on every architecture Linux runs tlsfront on; the Go
/// client's procfs assumes the same.
const USER_HZ: f64 = 100.0;

impl Process {
    fn new() -> Process {
        let start = (|| {
            let boot: f64 = std::fs::read_to_string("/proc/stat")
                .ok()?
                .lines()
                .find_map(|l| l.strip_prefix("btime "))?
                .trim()
                .parse()
                .ok()?;
            let ticks: f64 = stat_fields()?.get(19)?.parse().ok()?;
            Some(boot + ticks / USER_HZ)
        })();
        Process { start }
    }
}

/// The fields of `/proc/self/stat` after the command name (the first is
/// the state, field 3 in proc(5)).
fn stat_fields() -> Option<Vec<String>> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// A `/proc/self/status` line's value in kB, as bytes.
fn status_bytes(status: &str, key: &str) -> Option<f64> {
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024.0)
}

fn const_metric(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    metric: impl EncodeMetric,
) -> Result<(), std::fmt::Error> {
    let m = encoder.encode_descriptor(name, help, unit, metric.metric_type())?;
    metric.encode(m)
}

impl Collector for Process {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stat = stat_fields().unwrap_or_default();
        let ticks = |i: usize| stat.get(i).and_then(|v| v.parse::<f64>().ok());
        if let (Some(user), Some(system)) = (ticks(11), ticks(12)) {
            let cpu = ConstCounter::new((user + system) / USER_HZ);
            const_metric(
                &mut e,
                "process_cpu",
                "Total user and system CPU time spent in seconds",
                Some(&Unit::Seconds),
                cpu,
            )?;
        }
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        if let Some(rss) = status_bytes(&status, "VmRSS:") {
            const_metric(
                &mut e,
                "process_resident_memory",
                "Resident memory size in bytes",
                Some(&Unit::Bytes),
                ConstGauge::new(rss),
            )?;
        }
        if let Some(vsz) = status_bytes(&status, "VmSize:") {
            const_metric(
                &mut e,
                "process_virtual_memory",
                "Virtual memory size in bytes",
                Some(&Unit::Bytes),
                ConstGauge::new(vsz),
            )?;
        }
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            // Less the descriptor reading the directory.
            let open = dir.count().saturating_sub(1);
            const_metric(
                &mut e,
                "process_open_fds",
                "Number of open file descriptors",
                None,
                ConstGauge::new(i64::try_from(open).unwrap_or(i64::MAX)),
            )?;
        }
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        if let Some(max) = limit.current {
            const_metric(
                &mut e,
                "process_max_fds",
                "Maximum number of open file descriptors",
                None,
                ConstGauge::new(i64::try_from(max).unwrap_or(i64::MAX)),
            )?;
        }
        if let Some(start) = self.start {
            const_metric(
                &mut e,
                "process_start_time",
                "Start time of the process since unix epoch in seconds",
                Some(&Unit::Seconds),
                ConstGauge::new(start),
            )?;
        }
        Ok(())
    }
}

/// The `tlsfront_fleet_*` families of a fleet node (`[fleet]`), read
/// from its status at each scrape.
struct Fleet(std::sync::Arc<crate::fleet::node::Node>);

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fleet")
    }
}

impl Collector for Fleet {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        use crate::fleet::etcd::EtcdErrorKind;
        use std::sync::atomic::Ordering::Relaxed;
        let s = &self.0.status;
        let gauge = |v: i64| ConstGauge::new(v);
        const_metric(
            &mut e,
            "tlsfront_fleet_etcd_up",
            "Whether this node holds a working session with the fleet's etcd (1) or not (0)",
            None,
            gauge(i64::from(s.etcd_up.load(Relaxed))),
        )?;
        const_metric(
            &mut e,
            "tlsfront_fleet_last_sync_timestamp",
            "When this node last caught up with etcd (0: never), Unix time",
            Some(&Unit::Seconds),
            gauge(i64::try_from(s.last_sync.load(Relaxed)).unwrap_or(i64::MAX)),
        )?;
        const_metric(
            &mut e,
            "tlsfront_fleet_revision",
            "The etcd revision this node applied last",
            None,
            gauge(s.revision.load(Relaxed)),
        )?;
        const_metric(
            &mut e,
            "tlsfront_fleet_order_locks_held",
            "ACME order locks this node holds in etcd now",
            None,
            gauge(s.locks_held.load(Relaxed)),
        )?;
        const_metric(
            &mut e,
            "tlsfront_fleet_ticket_leader",
            "Whether this node makes and rotates the fleet's session-ticket keys (1) or not (0)",
            None,
            gauge(i64::from(self.0.ticket_leader())),
        )?;
        const_metric(
            &mut e,
            "tlsfront_fleet_ticket_period",
            "The period number of the fleet's ticket key that encrypts now (0: none yet, the node's own keys encrypt)",
            None,
            gauge(
                self.0
                    .ticket_period_encrypting()
                    .and_then(|n| i64::try_from(n).ok())
                    .unwrap_or(0),
            ),
        )?;
        const_metric(
            &mut e,
            "tlsfront_fleet_certificates_applied",
            "Certificates other nodes obtained, stored by this node",
            None,
            ConstCounter::new(s.applied.load(Relaxed)),
        )?;
        const_metric(
            &mut e,
            "tlsfront_fleet_lock_takeovers",
            "Orders of a node that died mid-order, finished by this node",
            None,
            ConstCounter::new(s.takeovers.load(Relaxed)),
        )?;
        let m = e.encode_descriptor(
            "tlsfront_fleet_etcd_errors",
            "Errors talking to etcd, by kind",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        let mut m = m;
        for (i, kind) in EtcdErrorKind::ALL.iter().enumerate() {
            let label = [("kind", kind.label())];
            let f = m.encode_family(&label)?;
            ConstCounter::new(s.errors[i].load(Relaxed)).encode(f)?;
        }
        Ok(())
    }
}

/// Seconds since the Unix epoch, now.
fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
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
        self.inc_by(name, 1);
    }

    fn inc_by(&self, name: &'static str, n: u64) {
        if let Ok(mut seen) = self.seen.lock() {
            seen.entry(name)
                .or_insert_with(|| self.family.get_or_create(&(self.label)(name)).clone())
                .inc_by(n);
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
    active: Gauge,
}

impl SiteMetrics {
    /// A connection of this site, counted in
    /// `tlsfront_site_connections_active` until the guard drops.
    pub fn open(&self) -> Active {
        self.active.inc();
        Active(self.active.clone())
    }

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
    site_active: Family<SiteLabel, Gauge>,
    connection_limit: Gauge,
    handshakes: [Counter; 2],
    /// Handshake durations, full and resumed.
    handshake_duration: [Histogram; 2],
    negotiated: Family<Negotiated, Counter>,
    handshake_failures: Named<Reason>,
    client_certs: Named<CertResult>,
    plain_http: Named<PlainAnswer>,
    fallback: [Counter; 5],
    responses: Family<SiteStatus, Counter>,
    duration: Family<SiteLabel, Histogram>,
    backend_errors: Family<SiteKind, Counter>,
    errors: Named<Kind>,
    /// Responses of static sites over HTTP/1.x and HTTP/2.
    protocol_responses: [Counter; 2],
    http2: Named<Event>,
    cert_expiry: Family<SiteCert, Gauge>,
    ticket_key_age: Gauge,
    reloads: Counter,
    reload_ok: Gauge,
    reload_time: Gauge<f64, std::sync::atomic::AtomicU64>,
    /// The sites' handles by label: a site rebuilt by a reload keeps
    /// counting where it was.
    sites: Mutex<HashMap<Arc<str>, Arc<SiteMetrics>>>,
}

impl Metrics {
    /// The metrics of a fleet node: the usual ones and `tlsfront_fleet_*`.
    pub fn with_fleet(node: Option<std::sync::Arc<crate::fleet::node::Node>>) -> Metrics {
        let mut m = Metrics::default();
        if let Some(node) = node {
            m.registry.register_collector(Box::new(Fleet(node)));
        }
        m
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut root = Registry::default();
        root.register_collector(Box::new(Process::new()));
        let r = root.sub_registry_with_prefix("tlsfront");
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
        let site_active = Family::<SiteLabel, Gauge>::default();
        r.register(
            "site_connections_active",
            "Connections open now by site (from their handshake)",
            site_active.clone(),
        );
        let connection_limit = Gauge::default();
        r.register(
            "connections_limit",
            "Connections the workers take at once, together (each its share)",
            connection_limit.clone(),
        );
        let handshakes_family = Family::<Kind, Counter>::default();
        r.register(
            "handshakes",
            "Completed TLS handshakes, full or resumed",
            handshakes_family.clone(),
        );
        let handshakes =
            ["full", "resumed"].map(|kind| handshakes_family.get_or_create(&Kind { kind }).clone());
        let duration_family: Family<Kind, Histogram> =
            Family::new_with_constructor(|| Histogram::new(HANDSHAKE_BUCKETS));
        r.register_with_unit(
            "handshake_duration",
            "Completed TLS handshakes, from the wait for the ClientHello to the handshake done",
            Unit::Seconds,
            duration_family.clone(),
        );
        let handshake_duration =
            ["full", "resumed"].map(|kind| duration_family.get_or_create(&Kind { kind }).clone());
        let negotiated = Family::<Negotiated, Counter>::default();
        r.register(
            "tls_negotiated",
            "Completed TLS handshakes by protocol version, cipher suite and key exchange group",
            negotiated.clone(),
        );
        let handshake_failures = Named::new(|reason| Reason { reason });
        for reason in HANDSHAKE_FAILURES {
            let _ = handshake_failures.family.get_or_create(&Reason { reason });
        }
        r.register(
            "handshake_failures",
            "TLS handshakes that failed, by reason",
            handshake_failures.family.clone(),
        );
        let client_certs = Named::new(|result| CertResult { result });
        for result in CLIENT_CERT_RESULTS {
            let _ = client_certs.family.get_or_create(&CertResult { result });
        }
        r.register(
            "client_certificates",
            "TLS handshakes on sites that ask for a client certificate, by result",
            client_certs.family.clone(),
        );
        let plain_http = Named::new(|answer| PlainAnswer { answer });
        for answer in PLAIN_HTTP_ANSWERS {
            let _ = plain_http.family.get_or_create(&PlainAnswer { answer });
        }
        r.register(
            "plain_http_requests",
            "Requests on the plain-HTTP (http_listen) listeners, by answer",
            plain_http.family.clone(),
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
        for kind in ERRORS {
            let _ = errors.family.get_or_create(&Kind { kind });
        }
        r.register(
            "errors",
            "Errors by kind (the shutdown summary's list)",
            errors.family.clone(),
        );
        let by_protocol = Family::<Protocol, Counter>::default();
        r.register(
            "protocol_responses",
            "HTTP responses of static-file sites, by protocol (HTTP/1.1, HTTP/2)",
            by_protocol.clone(),
        );
        let protocol_responses = ["HTTP/1.1", "HTTP/2"]
            .map(|protocol| by_protocol.get_or_create(&Protocol { protocol }).clone());
        let http2 = Named::new(|event| Event { event });
        for event in HTTP2_EVENTS {
            let _ = http2.family.get_or_create(&Event { event });
        }
        r.register(
            "http2_events",
            "HTTP/2 connections and what their clients did that the server refused, by event",
            http2.family.clone(),
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
        let reload_ok = Gauge::default();
        reload_ok.set(1);
        r.register(
            "config_last_reload_successful",
            "Whether the last reload (SIGHUP) succeeded; 1 from the start",
            reload_ok.clone(),
        );
        let reload_time = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        reload_time.set(unix_now());
        r.register_with_unit(
            "config_last_reload_success_timestamp",
            "When the configuration in use was loaded (start or reload), Unix time",
            Unit::Seconds,
            reload_time.clone(),
        );
        let build = Family::<Version, Gauge>::default();
        build
            .get_or_create(&Version {
                version: env!("CARGO_PKG_VERSION"),
            })
            .set(1);
        r.register("build_info", "The running version, always 1", build);
        Metrics {
            registry: root,
            connections,
            sent,
            received,
            active,
            site_active,
            connection_limit,
            handshakes,
            handshake_duration,
            negotiated,
            handshake_failures,
            client_certs,
            plain_http,
            fallback,
            responses,
            duration,
            backend_errors,
            errors,
            protocol_responses,
            http2,
            cert_expiry,
            ticket_key_age,
            reloads,
            reload_ok,
            reload_time,
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
                    data_path: path_name(p),
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
            active: self
                .site_active
                .get_or_create(&SiteLabel {
                    site: label.clone(),
                })
                .clone(),
        }
    }

    /// A connection accepted; it counts as active until the guard drops.
    pub fn open(&self) -> Active {
        self.active.inc();
        Active(self.active.clone())
    }

    /// The workers take at most `per_worker` connections at once each (at
    /// start, and again after each reload).
    pub fn connection_limit(&self, per_worker: usize, workers: usize) {
        let total = per_worker.saturating_mul(workers);
        self.connection_limit
            .set(i64::try_from(total).unwrap_or(i64::MAX));
    }

    /// A completed handshake, `took` after the wait for its ClientHello
    /// began: its kind, duration, and what it negotiated.
    pub fn handshake(&self, state: &rustls::CommonState, took: Duration) {
        let resumed = state.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
        let version = match state.protocol_version() {
            Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
            Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
            Some(v) => v.as_str().unwrap_or("other"),
            None => "none",
        };
        let cipher_suite = state
            .negotiated_cipher_suite()
            .map_or("none", |s| s.suite().as_str().unwrap_or("other"));
        // None: a TLS 1.2 resumption (no key exchange).
        let group = state
            .negotiated_key_exchange_group()
            .map_or("none", |g| g.name().as_str().unwrap_or("other"));
        self.handshake_done(
            resumed,
            took,
            Negotiated {
                version,
                cipher_suite,
                group,
            },
        );
    }

    fn handshake_done(&self, resumed: bool, took: Duration, negotiated: Negotiated) {
        self.handshakes[usize::from(resumed)].inc();
        self.handshake_duration[usize::from(resumed)].observe(took.as_secs_f64());
        self.negotiated.get_or_create(&negotiated).inc();
    }

    /// A failed handshake (`reason`: [`crate::tls::handshake::HandshakeError::label`],
    /// `timeout`, or `other`).
    pub fn handshake_failed(&self, reason: &'static str) {
        self.handshake_failures.inc(reason);
    }

    /// A handshake done on a site that asks for client certificates:
    /// `verified` or `none`.
    /// A request on a plain-HTTP listener, by its answer (one of
    /// [`PLAIN_HTTP_ANSWERS`]).
    pub fn plain_http(&self, answer: &'static str) {
        self.plain_http.inc(answer);
    }

    pub fn client_cert(&self, c: &crate::tls::client_auth::ClientCert) {
        use crate::tls::client_auth::ClientCert;
        match c {
            ClientCert::NotAsked => {}
            ClientCert::Absent => self.client_certs.inc("none"),
            ClientCert::Verified(_) => self.client_certs.inc("verified"),
        }
    }

    /// A handshake that failed: counted here if a client certificate was
    /// missing or did not verify.
    pub fn client_cert_refused(&self, e: &crate::tls::handshake::HandshakeError) {
        use crate::tls::handshake::HandshakeError;
        use crate::transport::TransportError;
        if let HandshakeError::Transport(TransportError::Tls(e)) = e {
            self.client_cert_error(e);
        }
    }

    /// A client certificate refused (missing or not verified) with this
    /// error, in the handshake or when a resumed session's is verified
    /// again; other errors are not counted here.
    pub fn client_cert_error(&self, e: &rustls::Error) {
        use rustls::CertificateError as C;
        let result = match e {
            rustls::Error::NoCertificatesPresented => "missing",
            rustls::Error::InvalidCertificate(c) => match c {
                C::UnknownIssuer => "unknown_ca",
                C::Revoked => "revoked",
                C::Expired | C::ExpiredContext { .. } => "expired",
                _ => "invalid",
            },
            _ => return,
        };
        self.client_certs.inc(result);
    }

    pub fn fallback(&self, f: Fallback) {
        let i = Fallback::ALL.iter().position(|x| *x == f).unwrap_or(0);
        self.fallback[i].inc();
    }

    /// An error of `kind`; a refused reload (`reload_failed`) also sets
    /// `tlsfront_config_last_reload_successful` to 0.
    pub fn error(&self, kind: &'static str) {
        self.errors.inc(kind);
        if kind == RELOAD_FAILED {
            self.reload_ok.set(0);
        }
    }

    /// A response of a static site, over HTTP/2 or not.
    pub fn protocol_response(&self, http2: bool) {
        self.protocol_responses[usize::from(http2)].inc();
    }

    /// `n` HTTP/2 events (see [`HTTP2_EVENTS`]).
    pub fn http2(&self, event: &'static str, n: u64) {
        if n > 0 {
            self.http2.inc_by(event, n);
        }
    }

    /// A configuration loaded by SIGHUP.
    pub fn reloaded(&self) {
        self.reloads.inc();
        self.reload_ok.set(1);
        self.reload_time.set(unix_now());
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

    /// The text `/metrics` answers, in `format`; `ticket_key_age`: the
    /// age of the encrypting ticket key now (it changes without any event
    /// to count, so it is set at each scrape).
    pub fn encode(&self, ticket_key_age: Duration, format: Format) -> String {
        self.ticket_key_age
            .set(i64::try_from(ticket_key_age.as_secs()).unwrap_or(i64::MAX));
        let mut s = String::new();
        // Writing to a String does not fail.
        let _ = prometheus_client::encoding::text::encode(&mut s, &self.registry);
        match format {
            Format::OpenMetrics | Format::OpenMetrics001 => s,
            Format::Text => openmetrics_to_text(&s),
        }
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

    fn tls13() -> Negotiated {
        Negotiated {
            version: "TLSv1.3",
            cipher_suite: "TLS13_AES_128_GCM_SHA256",
            group: "X25519",
        }
    }

    #[test]
    fn report_lists_what_happened() {
        let m = Metrics::default();
        let site = m.site(&Arc::from("*"));
        site.connection(Path::Userspace);
        m.fallback(Fallback::NoKernelSupport);
        site.status(200);
        site.status(200);
        m.error("reset");
        m.handshake_done(true, Duration::from_millis(1), tls13());
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
        m.handshake_done(false, Duration::from_millis(3), tls13());
        m.handshake_failed("plaintext_on_tls_port");
        m.fallback(Fallback::Cipher);
        m.error("reset");
        m.reloaded();
        // The same label gets the same counters.
        m.site(&Arc::from("a.test")).status(404);
        let t = m.encode(Duration::from_secs(42), Format::OpenMetrics);
        for want in [
            "tlsfront_connections_total{data_path=\"ktls\",site=\"a.test\"} 1",
            "tlsfront_connections_total{data_path=\"userspace\",site=\"a.test\"} 0",
            "tlsfront_sent_bytes_total{data_path=\"ktls\",site=\"a.test\"} 1000",
            "tlsfront_received_bytes_total{data_path=\"userspace\",site=\"*\"} 7",
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
    fn accept_picks_the_format_as_the_go_client_does() {
        use Format::*;
        for (accept, want) in [
            (None, Text),
            (Some("*/*"), Text),
            (Some("text/plain;version=0.0.4"), Text),
            (Some("text/plain"), Text),
            (Some("application/openmetrics-text"), OpenMetrics),
            // Prometheus 2's scrape.
            (
                Some(
                    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                     version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
                ),
                OpenMetrics,
            ),
            // Prometheus 3's (UTF-8 escaping asked for; these names need none).
            (
                Some(
                    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,\
                     application/openmetrics-text;version=0.0.1;q=0.4,text/plain;\
                     version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,\
                     */*;q=0.1",
                ),
                OpenMetrics,
            ),
            // Preference, not order, decides.
            (
                Some("application/openmetrics-text; version=1.0.0; q=0.2, text/plain; q=0.9"),
                Text,
            ),
            (
                Some("Application/OpenMetrics-Text; version=\"1.0.0\""),
                OpenMetrics,
            ),
            // Versions this encoder does not write, and q=0, are not asked for.
            // Only the draft version: answered as such.
            (
                Some("application/openmetrics-text;version=0.0.1,text/plain;q=0.5"),
                OpenMetrics001,
            ),
            (Some("application/openmetrics-text;version=2.0.0"), Text),
            (Some("application/openmetrics-text;q=0"), Text),
            (
                Some("text/plain;version=1.0.0,application/openmetrics-text;q=0.1"),
                OpenMetrics,
            ),
        ] {
            assert_eq!(Format::negotiate(accept), want, "{accept:?}");
        }
    }

    /// The family (`# TYPE` line) a sample line belongs to in `text`.
    fn families(text: &str) -> Vec<(String, String)> {
        text.lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|r| r.rsplit_once(' '))
            .map(|(n, k)| (n.to_string(), k.to_string()))
            .collect()
    }

    #[test]
    fn the_text_format_names_counters_with_total_and_has_no_openmetrics_lines() {
        let m = Metrics::default();
        let site = m.site(&Arc::from("a.test"));
        site.connection(Path::Ktls);
        site.request_done(0.01);
        m.handshake_done(false, Duration::from_millis(2), tls13());
        let om = m.encode(Duration::ZERO, Format::OpenMetrics);
        let text = m.encode(Duration::ZERO, Format::Text);
        assert!(
            !text.contains("# EOF") && !text.contains("# UNIT"),
            "{text}"
        );
        for (name, kind) in families(&text) {
            assert_eq!(
                kind == "counter",
                name.ends_with("_total"),
                "{name} {kind}\n{text}"
            );
            assert!(
                text.contains(&format!("# HELP {name} ")),
                "no help for {name}\n{text}"
            );
            assert!(
                ["counter", "gauge", "histogram"].contains(&kind.as_str()),
                "{kind}"
            );
        }
        // Every sample is kept, unchanged (but the process's, read anew).
        let samples = |t: &str| -> Vec<String> {
            t.lines()
                .filter(|l| !l.starts_with('#') && !l.starts_with("process_"))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(samples(&om), samples(&text));
        line(
            &text,
            "tlsfront_connections_total{data_path=\"ktls\",site=\"a.test\"} 1",
        );
        line(&text, "# TYPE tlsfront_sent_bytes_total counter");
        line(&text, "# TYPE process_cpu_seconds_total counter");
        // Help texts carry nothing the two formats escape differently.
        for l in om.lines().filter(|l| l.starts_with("# HELP ")) {
            assert!(!l.contains('\\') && !l.contains('"'), "{l}");
        }
    }

    #[test]
    fn created_samples_and_other_types_are_rewritten() {
        let om = "# HELP a_b Counts.\n# TYPE a_b counter\n# UNIT a_b b\na_b_total 3\n\
                  a_b_created 1.7e9\n# HELP i Info.\n# TYPE i info\ni_info{v=\"1\"} 1\n\
                  # TYPE u unknown\nu 2\n# EOF\n";
        assert_eq!(
            openmetrics_to_text(om),
            "# HELP a_b_total Counts.\n# TYPE a_b_total counter\na_b_total 3\n\
             # HELP i_info Info.\n# TYPE i_info gauge\ni_info{v=\"1\"} 1\n\
             # TYPE u untyped\nu 2\n"
        );
    }

    fn value(text: &str, name: &str) -> f64 {
        let l = line(text, &format!("{name} "));
        l.rsplit(' ').next().unwrap().parse().unwrap()
    }

    #[test]
    fn process_families_read_this_process() {
        let m = Metrics::default();
        let t = m.encode(Duration::ZERO, Format::Text);
        // Other tests of this process open and close files meanwhile.
        let fds = value(&t, "process_open_fds");
        assert!(fds >= 3.0, "{fds}");
        assert!(value(&t, "process_max_fds") >= fds);
        assert!(value(&t, "process_resident_memory_bytes") > 1e5);
        assert!(
            value(&t, "process_virtual_memory_bytes") >= value(&t, "process_resident_memory_bytes")
        );
        assert!(value(&t, "process_cpu_seconds_total") >= 0.0);
        let start = value(&t, "process_start_time_seconds");
        let now = unix_now();
        assert!(
            start <= now + 1.0 && start > now - 24.0 * 3600.0,
            "{start} {now}"
        );
    }

    #[test]
    fn known_label_values_start_at_zero() {
        let m = Metrics::default();
        let t = m.encode(Duration::ZERO, Format::Text);
        for want in [
            "tlsfront_handshake_failures_total{reason=\"timeout\"} 0",
            "tlsfront_handshake_failures_total{reason=\"hello_unrecognized_name\"} 0",
            "tlsfront_errors_total{kind=\"reload_failed\"} 0",
            "tlsfront_errors_total{kind=\"connection_limit\"} 0",
            "tlsfront_ktls_fallback_total{reason=\"data_buffered\"} 0",
            "tlsfront_handshakes_total{kind=\"full\"} 0",
            "tlsfront_handshake_duration_seconds_count{kind=\"resumed\"} 0",
            "tlsfront_config_last_reload_successful 1",
        ] {
            line(&t, want);
        }
        // And the summary still lists only what happened.
        assert!(m.report().ends_with("errors: none"), "{}", m.report());
    }

    #[test]
    fn reloads_and_handshakes_move_their_families() {
        let m = Metrics::default();
        let site = m.site(&Arc::from("a.test"));
        let guard = site.open();
        m.connection_limit(300, 2);
        m.connection_limit(100, 2);
        m.handshake_done(false, Duration::from_millis(30), tls13());
        m.error(RELOAD_FAILED);
        let t = m.encode(Duration::ZERO, Format::Text);
        line(&t, "tlsfront_config_last_reload_successful 0");
        line(&t, "tlsfront_site_connections_active{site=\"a.test\"} 1");
        line(&t, "tlsfront_connections_limit 200");
        line(
            &t,
            "tlsfront_tls_negotiated_total{version=\"TLSv1.3\",cipher_suite=\"TLS13_AES_128_GCM_SHA256\",group=\"X25519\"} 1",
        );
        line(
            &t,
            "tlsfront_handshake_duration_seconds_bucket{le=\"0.05\",kind=\"full\"} 1",
        );
        line(
            &t,
            "tlsfront_handshake_duration_seconds_bucket{le=\"0.025\",kind=\"full\"} 0",
        );
        drop(guard);
        let before = value(&t, "tlsfront_config_last_reload_success_timestamp_seconds");
        m.reloaded();
        let t = m.encode(Duration::ZERO, Format::Text);
        line(&t, "tlsfront_config_last_reload_successful 1");
        line(&t, "tlsfront_site_connections_active{site=\"a.test\"} 0");
        assert!(value(&t, "tlsfront_config_last_reload_success_timestamp_seconds") >= before);
    }

    #[test]
    fn certificate_series_follow_the_sites() {
        let m = Metrics::default();
        m.certificates([
            (Arc::from("a.test"), "a.pem".to_string(), 1_900_000_000),
            (Arc::from("b.test"), "b.pem".to_string(), 1_800_000_000),
        ]);
        let t = m.encode(Default::default(), Format::OpenMetrics);
        line(
            &t,
            "tlsfront_certificate_expiry_timestamp_seconds{site=\"b.test\",cert=\"b.pem\"} 1800000000",
        );
        // A reload without b.test: its series is gone.
        m.certificates([(Arc::from("a.test"), "a.pem".to_string(), 1_900_000_001)]);
        let t = m.encode(Default::default(), Format::OpenMetrics);
        assert!(!t.contains("b.test"), "{t}");
        line(
            &t,
            "tlsfront_certificate_expiry_timestamp_seconds{site=\"a.test\",cert=\"a.pem\"} 1900000001",
        );
    }
}
