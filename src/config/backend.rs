//! A backend's address as a setting: `HOST:PORT` (a name resolved once,
//! when the settings are read) or a Unix socket path.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Where the backend listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for BackendAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackendAddr::Tcp(a) => write!(f, "{a}"),
            BackendAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{value:?} is neither HOST:PORT (127.0.0.1:8080, [::1]:8080, localhost:8080) nor a Unix socket path (/run/app.sock)")]
pub struct BadBackend {
    value: String,
}

impl BackendAddr {
    /// `HOST:PORT` (names resolved once, now) or a path to a Unix socket.
    pub fn parse(value: &str) -> Result<BackendAddr, BadBackend> {
        let bad = || BadBackend {
            value: value.into(),
        };
        if let Some(path) = value.strip_prefix("unix:") {
            return Ok(BackendAddr::Unix(path.into()));
        }
        if value.starts_with('/') || value.starts_with("./") {
            return Ok(BackendAddr::Unix(value.into()));
        }
        if let Ok(a) = value.parse() {
            return Ok(BackendAddr::Tcp(a));
        }
        use std::net::ToSocketAddrs;
        value
            .to_socket_addrs()
            .map_err(|_| bad())?
            .next()
            .map(BackendAddr::Tcp)
            .ok_or_else(bad)
    }
}
