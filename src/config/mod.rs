//! Settings: the config file as written ([`file`]), the one resolved model
//! both services read ([`settings`]), and the pieces they share: limits,
//! timeouts and their checks, certificates ([`cert`]), backend addresses.
//! The command line (`cli`) fills the file's fields from flags, so flags
//! and file keys have the same names and the same checks.

pub mod backend;
pub mod cert;
pub mod check;
pub mod file;
pub mod fleet;
pub mod settings;
pub mod static_files;

pub use file::{FileConfig, ProxyVersion, UnknownNames};
pub use settings::{Job, Settings, Site};

use serde::Deserialize;
use std::net::SocketAddr;
use std::time::Duration;

/// Whether to hand record keys to the kernel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum KtlsMode {
    /// Use kTLS where the kernel takes the negotiated cipher; user-space TLS otherwise.
    #[default]
    Auto,
    /// Never use kTLS.
    Off,
    /// Refuse to start unless the kernel offloads every cipher tlsfront negotiates.
    Require,
}

/// Size limits.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Longest request line, bytes (414 beyond).
    pub request_line: usize,
    /// Largest request head, bytes (431 beyond).
    pub header_bytes: usize,
    /// Most header fields in a request (431 beyond).
    pub headers: usize,
    /// Largest request body read and discarded, bytes (413 beyond).
    pub body: u64,
    /// Requests served on one connection before it is closed.
    pub keepalive_requests: u64,
    /// Open connections per worker; more are closed at once. Unset: as
    /// many as the open-file limit allows, at most 10000.
    pub connections: Option<usize>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            request_line: 8 * 1024,
            header_bytes: 16 * 1024,
            headers: 100,
            body: 1 << 20,
            keepalive_requests: 1000,
            connections: None,
        }
    }
}

/// Timeouts, in seconds.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Timeouts {
    /// TLS handshake, from accept.
    pub handshake: f64,
    /// Receiving a whole request head, from its first byte (or from the
    /// handshake for the first request).
    pub request_header: f64,
    /// Idle time between keep-alive requests.
    pub keepalive: f64,
    /// Longest time the client may accept no data while we send.
    pub send: f64,
    /// Grace period for in-flight responses on SIGTERM/SIGINT.
    pub shutdown: f64,
    /// Connecting to a backend.
    pub connect: f64,
    /// A proxied connection with no byte in either direction.
    pub idle: f64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            handshake: 10.0,
            request_header: 60.0,
            keepalive: 75.0,
            send: 60.0,
            shutdown: 10.0,
            connect: 5.0,
            idle: 300.0,
        }
    }
}

/// The longest timeout accepted: one day.
pub const MAX_TIMEOUT: f64 = 86_400.0;
/// The most worker threads accepted.
pub const MAX_WORKERS: usize = 1024;

/// A timeout in seconds as a `Duration`. Settings are checked by
/// [`check_timeout`] when read; the clamp only keeps this total.
pub fn secs(s: f64) -> Duration {
    let s = if s.is_nan() { MAX_TIMEOUT } else { s };
    Duration::from_secs_f64(s.clamp(0.001, MAX_TIMEOUT))
}

/// `value` from `origin` must lie in `ok`, or the error says what to give.
pub(super) fn in_range<T: PartialOrd + ToString>(
    origin: &str,
    value: T,
    ok: impl std::ops::RangeBounds<T>,
    expected: &'static str,
) -> Result<(), ConfigError> {
    if ok.contains(&value) {
        return Ok(());
    }
    Err(ConfigError::Range {
        origin: origin.into(),
        value: value.to_string(),
        expected,
    })
}

/// A timeout must be a number of seconds above 0, at most a day (NaN is in
/// no range).
pub fn check_timeout(origin: &str, value: f64) -> Result<(), ConfigError> {
    use std::ops::Bound::{Excluded, Included};
    in_range(
        origin,
        value,
        (Excluded(0.0), Included(MAX_TIMEOUT)),
        "a number of seconds above 0 and at most 86400 (one day)",
    )
}

/// Worker threads: 1 to [`MAX_WORKERS`].
pub fn check_workers(origin: &str, value: usize) -> Result<(), ConfigError> {
    in_range(
        origin,
        value,
        1..=MAX_WORKERS,
        "a number of worker threads from 1 to 1024",
    )
}

impl Timeouts {
    /// Every timeout in range; `origin` names where they were set.
    pub fn check(&self, origin: impl Fn(&str) -> String) -> Result<(), ConfigError> {
        for (name, v) in [
            ("handshake", self.handshake),
            ("request_header", self.request_header),
            ("keepalive", self.keepalive),
            ("send", self.send),
            ("shutdown", self.shutdown),
            ("connect", self.connect),
            ("idle", self.idle),
        ] {
            check_timeout(&origin(name), v)?;
        }
        Ok(())
    }
}

impl Limits {
    /// Every limit in range: each one bounds memory or work per request or
    /// per worker, so an absurd value is refused rather than obeyed.
    pub fn check(&self, origin: impl Fn(&str) -> String) -> Result<(), ConfigError> {
        const MIB: u64 = 1 << 20;
        for (name, v, lo, hi, expected) in [
            (
                "request_line",
                self.request_line as u64,
                16,
                MIB,
                "a number of bytes from 16 to 1048576 (1 MiB)",
            ),
            (
                "header_bytes",
                self.header_bytes as u64,
                64,
                MIB,
                "a number of bytes from 64 to 1048576 (1 MiB)",
            ),
            (
                "headers",
                self.headers as u64,
                1,
                10_000,
                "a number of header fields from 1 to 10000",
            ),
            (
                "connections",
                self.connections.map_or(1, |c| c as u64),
                1,
                1_000_000,
                "a number of connections per worker from 1 to 1000000",
            ),
            (
                "keepalive_requests",
                self.keepalive_requests,
                1,
                u64::MAX,
                "at least 1 request per connection",
            ),
        ] {
            in_range(&origin(name), v, lo..=hi, expected)?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Privilege(#[from] crate::privileges::PrivilegeError),
    #[error("{origin}: a group needs a user to go with it (set user as well)")]
    GroupWithoutUser { origin: String },
    #[error(transparent)]
    File(#[from] file::FileError),
    #[error("{origin}: {message}")]
    Invalid { origin: String, message: String },
    #[error(
        "{origin}: listen address {value:?} is not IP:PORT (examples: 127.0.0.1:8443, [::1]:8443)"
    )]
    Listen { origin: String, value: String },
    #[error("{origin}: {value} is out of range: give {expected}")]
    Range {
        origin: String,
        value: String,
        expected: &'static str,
    },
}

/// One worker per core (at most [`MAX_WORKERS`]).
pub fn default_workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(MAX_WORKERS)
}

pub fn parse_listen(origin: &str, value: &str) -> Result<SocketAddr, ConfigError> {
    value.parse().map_err(|_| ConfigError::Listen {
        origin: origin.into(),
        value: value.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_range_settings_are_named() {
        let at = |k: &str| format!("setting {k}");
        assert!(Timeouts::default().check(at).is_ok());
        assert!(Limits::default().check(at).is_ok());
        for bad in [f64::NAN, 0.0, -5.0, f64::INFINITY, 86_400.5] {
            let t = Timeouts {
                keepalive: bad,
                ..Default::default()
            };
            let e = t.check(at).unwrap_err().to_string();
            assert!(
                e.starts_with("setting keepalive: ") && e.contains("86400"),
                "{e}"
            );
        }
        type Set = fn(&mut Limits);
        let bad: [(Set, &str); 6] = [
            (|l| l.headers = 1 << 50, "headers"),
            (|l| l.headers = 0, "headers"),
            (|l| l.header_bytes = 10, "header_bytes"),
            (|l| l.request_line = usize::MAX, "request_line"),
            (|l| l.connections = Some(0), "connections"),
            (|l| l.keepalive_requests = 0, "keepalive_requests"),
        ];
        for (set, name) in bad {
            let mut l = Limits::default();
            set(&mut l);
            let e = l.check(at).unwrap_err().to_string();
            assert!(e.starts_with(&format!("setting {name}: ")), "{e}");
        }
        assert!(check_workers("--workers", 0).is_err());
        assert!(check_workers("--workers", 1 << 40).is_err());
        assert!(check_workers("--workers", 2).is_ok());
        // Unchecked values still give a usable Duration.
        assert_eq!(secs(f64::NAN), Duration::from_secs(86_400));
        assert_eq!(secs(-1.0), Duration::from_millis(1));
    }
}
