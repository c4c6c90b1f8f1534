//! The plain-TCP (or Unix socket) backend: its address, connecting with a
//! timeout, and the readiness-driven socket operations the relay uses.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;
use tokio::io::{Interest, Ready};
use tokio::net::{TcpStream, UnixStream};

pub use crate::config::backend::{BackendAddr, BadBackend};

/// Why the backend could not be reached; each is counted, and warned
/// about (at most once per kind per interval) by the proxy.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("connection refused")]
    Refused,
    #[error("no answer within {0:?} (connect timeout)")]
    Timeout(Duration),
    #[error("unreachable: {0}")]
    Unreachable(io::Error),
    #[error("{0}")]
    Other(io::Error),
}

impl ConnectError {
    pub fn kind(&self) -> &'static str {
        match self {
            ConnectError::Refused => "backend_refused",
            ConnectError::Timeout(_) => "backend_timeout",
            ConnectError::Unreachable(_) => "backend_unreachable",
            ConnectError::Other(_) => "backend_error",
        }
    }
}

/// A connected backend.
pub enum Backend {
    Tcp(TcpStream),
    Unix(UnixStream),
}

pub async fn connect(addr: &BackendAddr, timeout: Duration) -> Result<Backend, ConnectError> {
    let attempt = async {
        match addr {
            BackendAddr::Tcp(a) => TcpStream::connect(a).await.map(|s| {
                let _ = s.set_nodelay(true);
                Backend::Tcp(s)
            }),
            BackendAddr::Unix(p) => UnixStream::connect(p).await.map(Backend::Unix),
        }
    };
    match tokio::time::timeout(timeout, attempt).await {
        Err(_) => Err(ConnectError::Timeout(timeout)),
        Ok(Ok(b)) => Ok(b),
        Ok(Err(e)) => Err(match e.kind() {
            io::ErrorKind::ConnectionRefused => ConnectError::Refused,
            // A Unix socket path that does not exist is "nobody listening".
            io::ErrorKind::NotFound => ConnectError::Refused,
            io::ErrorKind::HostUnreachable | io::ErrorKind::NetworkUnreachable => {
                ConnectError::Unreachable(e)
            }
            _ => ConnectError::Other(e),
        }),
    }
}

impl Backend {
    pub fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Backend::Tcp(s) => s.as_fd(),
            Backend::Unix(s) => s.as_fd(),
        }
    }

    pub async fn ready(&self, interest: Interest) -> io::Result<Ready> {
        match self {
            Backend::Tcp(s) => s.ready(interest).await,
            Backend::Unix(s) => s.ready(interest).await,
        }
    }

    /// A non-blocking operation on the socket; `WouldBlock` clears the
    /// readiness it waited for.
    pub fn try_io<R>(
        &self,
        interest: Interest,
        f: impl FnOnce() -> io::Result<R>,
    ) -> io::Result<R> {
        match self {
            Backend::Tcp(s) => s.try_io(interest, f),
            Backend::Unix(s) => s.try_io(interest, f),
        }
    }

    pub fn try_read(&self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Backend::Tcp(s) => s.try_read(buf),
            Backend::Unix(s) => s.try_read(buf),
        }
    }

    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Backend::Tcp(s) => s.try_write(buf),
            Backend::Unix(s) => s.try_write(buf),
        }
    }

    /// Write all of a small buffer (the PROXY header) before relaying.
    pub async fn write_all(&self, mut data: &[u8], timeout: Duration) -> io::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        while !data.is_empty() {
            tokio::time::timeout_at(deadline, self.ready(Interest::WRITABLE))
                .await
                .map_err(|_| {
                    io::Error::new(io::ErrorKind::TimedOut, "backend accepts no data")
                })??;
            match self.try_write(data) {
                Ok(n) => data = &data[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Send at once what a write with `SPLICE_F_MORE` left queued:
    /// setting `TCP_NODELAY` (already set) pushes pending segments. A Unix
    /// socket holds nothing back.
    pub fn push(&self) {
        if let Backend::Tcp(s) = self {
            let _ = s.set_nodelay(true);
        }
    }

    pub fn shutdown_write(&self) -> io::Result<()> {
        rustix::net::shutdown(self.fd(), rustix::net::Shutdown::Write).map_err(io::Error::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        assert_eq!(
            BackendAddr::parse("127.0.0.1:80").unwrap(),
            BackendAddr::Tcp("127.0.0.1:80".parse().unwrap())
        );
        assert_eq!(
            BackendAddr::parse("[::1]:80").unwrap(),
            BackendAddr::Tcp("[::1]:80".parse().unwrap())
        );
        assert_eq!(
            BackendAddr::parse("/run/a.sock").unwrap(),
            BackendAddr::Unix("/run/a.sock".into())
        );
        assert_eq!(
            BackendAddr::parse("unix:rel.sock").unwrap(),
            BackendAddr::Unix("rel.sock".into())
        );
        assert!(matches!(
            BackendAddr::parse("localhost:80").unwrap(),
            BackendAddr::Tcp(_)
        ));
        let e = BackendAddr::parse("nonsense").unwrap_err().to_string();
        assert!(e.contains("nonsense") && e.contains("HOST:PORT"), "{e}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn refused_and_missing_socket() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        drop(l);
        let e = connect(&BackendAddr::Tcp(a), Duration::from_secs(2))
            .await
            .err()
            .unwrap();
        assert_eq!(e.kind(), "backend_refused");
        let e = connect(
            &BackendAddr::Unix("/nonexistent/x.sock".into()),
            Duration::from_secs(2),
        )
        .await
        .err()
        .unwrap();
        assert_eq!(e.kind(), "backend_refused");
    }
}
