//! Settings for `tlsfront serve`: defaults, an optional TOML file
//! (`--config`), and command-line flags, merged in that order.

pub mod cert;

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
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
    /// Open connections per worker; more are closed at once.
    pub connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            request_line: 8 * 1024,
            header_bytes: 16 * 1024,
            headers: 100,
            body: 1 << 20,
            keepalive_requests: 1000,
            connections: 10_000,
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
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            handshake: 10.0,
            request_header: 60.0,
            keepalive: 75.0,
            send: 60.0,
            shutdown: 10.0,
        }
    }
}

pub fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s.clamp(0.001, 86_400.0))
}

/// The `--config` file.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FileConfig {
    pub root: Option<PathBuf>,
    pub listen: Vec<String>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub workers: Option<usize>,
    pub ktls: Option<KtlsMode>,
    pub autoindex: Option<bool>,
    pub follow_symlinks_outside: Option<bool>,
    pub limits: Limits,
    pub timeouts: Timeouts,
}

/// Resolved settings for the static file server.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub root: PathBuf,
    pub listen: Vec<SocketAddr>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    pub workers: usize,
    pub ktls: KtlsMode,
    pub autoindex: bool,
    pub follow_symlinks_outside: bool,
    pub limits: Limits,
    pub timeouts: Timeouts,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error(
        "{origin}: listen address {value:?} is not IP:PORT (examples: 127.0.0.1:8443, [::1]:8443)"
    )]
    Listen { origin: String, value: String },
    #[error("{origin}: workers must be at least 1")]
    Workers { origin: String },
}

impl FileConfig {
    pub fn load(path: &Path) -> Result<FileConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.into(),
            source,
        })?;
        let mut cfg: FileConfig = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.into(),
            message: e.to_string(),
        })?;
        // Relative paths in the file are relative to the file.
        let base = path.parent().unwrap_or(Path::new("."));
        for p in [&mut cfg.root, &mut cfg.cert, &mut cfg.key]
            .into_iter()
            .flatten()
        {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        }
        Ok(cfg)
    }
}

pub fn default_workers() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
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
    fn file_config_parses_and_rejects_unknown_keys() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.toml");
        std::fs::write(
            &p,
            "root = \"www\"\nlisten = [\"127.0.0.1:1\"]\nktls = \"off\"\n[timeouts]\nkeepalive = 2.5\n[limits]\nheaders = 7\n",
        )
        .unwrap();
        let c = FileConfig::load(&p).unwrap();
        assert_eq!(c.root.unwrap(), dir.path().join("www"));
        assert_eq!(c.ktls, Some(KtlsMode::Off));
        assert_eq!(c.timeouts.keepalive, 2.5);
        assert_eq!(c.timeouts.send, 60.0);
        assert_eq!(c.limits.headers, 7);
        std::fs::write(&p, "lisen = []\n").unwrap();
        let e = FileConfig::load(&p).unwrap_err().to_string();
        assert!(e.contains("t.toml") && e.contains("lisen"), "{e}");
    }
}
