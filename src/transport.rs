//! The plaintext byte stream that the HTTP server and the proxy speak over:
//! a kTLS socket ([`crate::ktls::stream::KtlsStream`]) or rustls in user
//! space ([`crate::tls::userspace::UserTls`]), behind one small trait so the
//! protocol code is written once.

use std::fs::File;
use std::io;
use std::time::Duration;
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::{timeout_at, Instant};

/// `try_read`, and a read shorter than `buf` also clears tokio's readiness
/// for the socket: TCP's recvmsg copies until the buffer is full or the
/// receive queue is empty, so a short read means it was drained, and with
/// edge-triggered epoll anything that arrives later raises a new event.
/// This saves the read that would only return EAGAIN after every request;
/// tokio's own `AsyncRead::poll_read` does the same (tokio-rs/tokio#5866),
/// but `try_read` does not.
pub(crate) fn try_read_drained(sock: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    let n = sock.try_read(buf)?;
    if n > 0 && n < buf.len() {
        // A closure that reports WouldBlock is how tokio is told to clear
        // the readiness it observed (closed bits are never cleared).
        let _ = sock.try_io(Interest::READABLE, || {
            Err::<(), _>(io::ErrorKind::WouldBlock.into())
        });
    }
    Ok(n)
}

/// Wait until `sock` is readable (with `read`) or writable (with
/// `write`); with neither, forever.
pub(crate) async fn ready(sock: &TcpStream, read: bool, write: bool) -> Result<(), TransportError> {
    let interest = match (read, write) {
        (true, true) => Interest::READABLE | Interest::WRITABLE,
        (true, false) => Interest::READABLE,
        (false, true) => Interest::WRITABLE,
        (false, false) => return std::future::pending().await,
    };
    sock.ready(interest).await?;
    Ok(())
}

/// Which data path a connection took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// Records encrypted and decrypted by the kernel; bodies by `sendfile`.
    Ktls,
    /// Records handled by rustls in this process.
    Userspace,
}

/// Why a transport operation failed. Every variant ends the connection.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("socket: {0}")]
    Io(#[from] io::Error),
    #[error("TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("peer sent fatal TLS alert {0}")]
    PeerAlert(u8),
    #[error("peer sent a TLS 1.3 KeyUpdate, which this kernel cannot follow (kTLS rekey needs Linux >= 6.14)")]
    KeyUpdateUnsupported,
    #[error("the cipher's record limit was reached and the key cannot be replaced here")]
    RecordLimit,
    #[error("file shrank while it was being sent")]
    FileShrank,
    #[error("peer accepted no data for {0:?} (send timeout)")]
    SendTimeout(Duration),
    #[error("peer broke the TLS protocol: {0}")]
    Protocol(&'static str),
}

impl TransportError {
    /// A short, stable label for counters.
    pub fn kind(&self) -> &'static str {
        match self {
            TransportError::Io(e) if e.kind() == io::ErrorKind::ConnectionReset => "reset",
            TransportError::Io(e) if e.kind() == io::ErrorKind::BrokenPipe => "reset",
            TransportError::Io(_) => "io",
            TransportError::Tls(_) => "tls",
            TransportError::PeerAlert(_) => "peer_alert",
            TransportError::KeyUpdateUnsupported => "keyupdate_unsupported",
            TransportError::RecordLimit => "record_limit",
            TransportError::FileShrank => "file_shrank",
            TransportError::SendTimeout(_) => "send_timeout",
            TransportError::Protocol(_) => "tls_protocol",
        }
    }
}

/// A TLS connection after its handshake, seen as plaintext.
pub(crate) trait Transport {
    /// Read plaintext; `Ok(0)` is the end of the peer's data (close_notify
    /// or TCP FIN).
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize, TransportError>;

    /// Wait until `read` can make progress, without holding a buffer (idle
    /// keep-alive connections keep no buffers).
    async fn readable(&mut self) -> Result<(), TransportError>;

    /// Write all of `data`. `more` says a body follows at once, so the
    /// bytes may share a record with it.
    async fn write_all(&mut self, data: &[u8], more: bool) -> Result<(), TransportError>;

    /// Send `len` bytes of `file` from `offset`. A file that turns out to be
    /// shorter fails with [`TransportError::FileShrank`]; nothing is padded.
    async fn send_file(&mut self, file: &File, offset: u64, len: u64)
        -> Result<(), TransportError>;

    /// Send close_notify and shut down our direction.
    async fn close(&mut self) -> Result<(), TransportError>;

    // Without waiting, for sessions that read while they write (HTTP/2
    // must see WINDOW_UPDATE, RST_STREAM and PING while a file streams):
    // each does what the socket allows now, and [`Transport::ready`] waits
    // for more.

    /// Read what is there: `Ok(None)` when nothing is, `Ok(Some(0))` at
    /// the end of the peer's data.
    async fn read_now(&mut self, buf: &mut [u8]) -> Result<Option<usize>, TransportError>;

    /// Write as much of `data` as the socket takes now (`more`: as for
    /// [`Transport::write_all`]); how much was taken. Empty `data` without
    /// `more` pushes out what an earlier `more` held back.
    async fn write_now(&mut self, data: &[u8], more: bool) -> Result<usize, TransportError>;

    /// Send what the socket takes now of `len` bytes of `file` from
    /// `offset`, at least one byte unless it takes none; how much was sent.
    /// A file that ends first fails with [`TransportError::FileShrank`].
    async fn send_file_now(
        &mut self,
        file: &File,
        offset: u64,
        len: u64,
    ) -> Result<usize, TransportError>;

    /// Whether bytes given to the `_now` writes are still held back (in
    /// user-space TLS's queue, or by kTLS's `TCP_CORK`) until an empty
    /// `write_now` without `more`: the session is not done writing.
    fn pending(&self) -> bool;

    /// Wait until, with `read`, reading may make progress or, with
    /// `write`, writing may (or held bytes may be pushed out); with
    /// neither, forever.
    async fn ready(&mut self, read: bool, write: bool) -> Result<(), TransportError>;

    /// Drop buffers that an idle connection does not need.
    fn release_buffers(&mut self);

    fn path(&self) -> Path;
}

/// Close with close_notify, then read and discard what the peer still
/// sends for up to `linger` (at most 1 MiB), so that data it had already
/// sent does not turn our close into a reset that could destroy the
/// close_notify before the peer reads it.
pub(crate) async fn close_and_linger<T: Transport>(t: &mut T, linger: Duration) {
    if t.close().await.is_err() {
        return;
    }
    let mut scratch = vec![0u8; 4096];
    let deadline = Instant::now() + linger;
    let mut budget = 1usize << 20;
    while budget > 0 {
        match timeout_at(deadline, t.read(&mut scratch)).await {
            Ok(Ok(n)) if n > 0 => budget = budget.saturating_sub(n),
            _ => break,
        }
    }
}

/// A boxed transport is a transport: connections keep theirs on the heap so
/// the per-connection task stays small.
impl<T: Transport> Transport for Box<T> {
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize, TransportError> {
        (**self).read(buf).await
    }

    async fn readable(&mut self) -> Result<(), TransportError> {
        (**self).readable().await
    }

    async fn write_all(&mut self, data: &[u8], more: bool) -> Result<(), TransportError> {
        (**self).write_all(data, more).await
    }

    async fn send_file(
        &mut self,
        file: &File,
        offset: u64,
        len: u64,
    ) -> Result<(), TransportError> {
        (**self).send_file(file, offset, len).await
    }

    async fn close(&mut self) -> Result<(), TransportError> {
        (**self).close().await
    }

    async fn read_now(&mut self, buf: &mut [u8]) -> Result<Option<usize>, TransportError> {
        (**self).read_now(buf).await
    }

    async fn write_now(&mut self, data: &[u8], more: bool) -> Result<usize, TransportError> {
        (**self).write_now(data, more).await
    }

    async fn send_file_now(
        &mut self,
        file: &File,
        offset: u64,
        len: u64,
    ) -> Result<usize, TransportError> {
        (**self).send_file_now(file, offset, len).await
    }

    fn pending(&self) -> bool {
        (**self).pending()
    }

    async fn ready(&mut self, read: bool, write: bool) -> Result<(), TransportError> {
        (**self).ready(read, write).await
    }

    fn release_buffers(&mut self) {
        (**self).release_buffers()
    }

    fn path(&self) -> Path {
        (**self).path()
    }
}
