//! User-space TLS: a connection the kernel did not take (no kTLS, a cipher
//! it cannot carry, `--ktls off`) keeps running on the same rustls
//! unbuffered connection that did the handshake.
//!
//! Reads pull whole TLS records from the socket into one buffer and decrypt
//! them; writes encrypt straight into an output buffer sized for the data, so
//! a file chunk is read once, encrypted once and written once. Buffers are
//! dropped while the connection is idle, and a client that stops reading
//! leaves the connection holding little: file plaintext is staged in one
//! buffer per thread, once the socket's send buffer has been found full a
//! file chunk is no larger than the room left in it (so records are made
//! about as fast as the socket takes them, not ahead of it), and after a
//! moment without progress the output queue gives back its spare room.

use super::handshake::{queue_alert, Handshaken, MAX_RECORD};
use super::outbuf::OutBuf;
use crate::transport::{Path, Transport, TransportError};
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, EncryptError, UnbufferedStatus};
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::time::Duration;
use tokio::net::TcpStream;

/// Plaintext per write when sending a file: 8 full records.
const FILE_CHUNK: usize = 8 * 16384;
/// The smallest file chunk: one record, written even when the socket has
/// less room (it takes it once the client reads on).
const MIN_CHUNK: usize = 16384;
/// How long a send may wait for the socket before the connection counts as
/// a slow reader and gives back its output buffer's spare room.
const SLOW_AFTER: Duration = Duration::from_secs(1);

thread_local! {
    /// Plaintext staging for file reads. One per thread, not per connection:
    /// it is used only between a file read and its encryption, never across
    /// an await, so a connection waiting on its client holds no plaintext.
    static STAGING: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}
/// First size of the receive buffer; it grows to a whole record on demand.
const INITIAL_READ: usize = 4096;
/// Largest receive buffer: four whole records, reached only while reads keep
/// filling the buffer (a bulk upload), so that one `recvfrom`, and one write
/// of the plaintext onwards, carries 64 KiB instead of 16.
const MAX_READ: usize = 4 * MAX_RECORD;
/// Most plaintext held back waiting for a body (one record's worth).
const CORK_MAX: usize = 16384;
/// Most encrypted bytes the `_now` writes leave queued before they take no
/// more: a session that reads while it writes holds at most this (and one
/// chunk) for a client that is not reading.
const OUT_HIGH: usize = 4 * 16384;
/// Per-record overhead bound for the output buffer (header + nonce + tag +
/// TLS 1.3 content type).
const RECORD_OVERHEAD: usize = 5 + 8 + 16 + 1 + 2;

pub struct UserTls {
    sock: TcpStream,
    conn: UnbufferedServerConnection,
    /// Received TLS bytes, `in_len` of them valid.
    inbuf: Vec<u8>,
    in_len: usize,
    /// Decrypted bytes not yet returned by `read`, from `plain_pos`.
    plain: Vec<u8>,
    plain_pos: usize,
    /// Encrypted bytes not yet written.
    out: OutBuf,
    /// A response head held back (`write_all(.., more: true)`) so that it
    /// shares its record, and its write, with the body that follows.
    corked: Vec<u8>,
    /// `out` holds only what the handshake left (session tickets): it goes
    /// out with the first response, or when the connection turns idle, not
    /// in a write of its own before the first read.
    tickets_held: bool,
    /// The last read filled the receive buffer: more is arriving than one
    /// buffer per read takes.
    streaming: bool,
    peer_closed: bool,
    /// rustls failed and its alert went out: it must not be driven again
    /// (it would meet the same error and queue a second fatal alert).
    failed: bool,
    stall: Duration,
}

enum Want<'a> {
    /// Process what is buffered, stop when no more progress is possible.
    Process,
    /// Then encrypt this plaintext.
    Encrypt(&'a [u8]),
    /// Then encrypt a close_notify.
    CloseNotify,
}

impl UserTls {
    pub fn new(sock: TcpStream, hs: Handshaken, stall: Duration) -> Self {
        let in_len = hs.pending_tls.len();
        let peer_closed = hs.peer_closed;
        let tickets_held = !hs.pending_out.is_empty();
        UserTls {
            sock,
            conn: hs.conn,
            inbuf: hs.pending_tls,
            in_len,
            plain: hs.early_plaintext,
            plain_pos: 0,
            out: hs.pending_out,
            corked: Vec::new(),
            tickets_held,
            streaming: false,
            peer_closed,
            failed: false,
            stall,
        }
    }

    pub fn socket(&self) -> &TcpStream {
        &self.sock
    }

    /// Drive rustls over the buffered input; stash plaintext, queue any
    /// output (alerts, KeyUpdate replies), and do `want` once rustls allows
    /// writing.
    fn step(&mut self, want: Want<'_>) -> Result<(), TransportError> {
        if self.failed {
            return Err(TransportError::Protocol("connection already failed"));
        }
        loop {
            let UnbufferedStatus { discard, state } = self
                .conn
                .process_tls_records(&mut self.inbuf[..self.in_len]);
            let state = match state {
                Ok(s) => s,
                Err(e) => return Err(self.fail(discard, e)),
            };
            let mut finished = false;
            match state {
                ConnectionState::ReadTraffic(mut rt) => {
                    while let Some(rec) = rt.next_record() {
                        self.plain.extend_from_slice(rec?.payload);
                    }
                }
                ConnectionState::EncodeTlsData(mut enc) => {
                    // A reply (alert, KeyUpdate) takes the tickets with it.
                    self.tickets_held = false;
                    self.out.encode(&mut enc)
                }
                // Output stays queued in `out`, in order; it is written by
                // the caller before anything else.
                ConnectionState::TransmitTlsData(tx) => tx.done(),
                ConnectionState::PeerClosed => self.peer_closed = true,
                ConnectionState::Closed => {
                    self.peer_closed = true;
                    finished = true;
                }
                ConnectionState::WriteTraffic(mut wt) => {
                    match want {
                        Want::Process => {}
                        Want::Encrypt(data) => {
                            let room = data.len() + (data.len() / 16384 + 1) * RECORD_OVERHEAD;
                            let n = match wt.encrypt(data, self.out.spare(room)) {
                                Ok(n) => n,
                                Err(EncryptError::InsufficientSize(e)) => wt
                                    .encrypt(data, self.out.spare(e.required_size))
                                    .map_err(|_| TransportError::Protocol("encrypt failed"))?,
                                Err(_) => return Err(TransportError::Protocol("encrypt failed")),
                            };
                            self.out.commit(n);
                        }
                        Want::CloseNotify => {
                            let n = wt.queue_close_notify(self.out.spare(64)).unwrap_or(0);
                            self.out.commit(n);
                        }
                    }
                    finished = true;
                }
                ConnectionState::BlockedHandshake => finished = true,
                _ => return Err(TransportError::Protocol("unexpected TLS state")),
            }
            if discard > 0 {
                self.inbuf.copy_within(discard..self.in_len, 0);
                self.in_len -= discard;
            }
            if finished {
                return Ok(());
            }
        }
    }

    /// rustls failed on the client's input (a record that does not decrypt
    /// or is too long, say): send the fatal alert it queued, as the RFCs
    /// require (RFC 8446 §5.2, RFC 5246 §6.2.3.3), without waiting for a
    /// slow peer, after whatever was queued before it.
    fn fail(&mut self, discard: usize, e: rustls::Error) -> TransportError {
        self.failed = true;
        queue_alert(
            &mut self.conn,
            &mut self.inbuf[..self.in_len],
            discard,
            &mut self.out,
        );
        let _ = self.try_flush();
        e.into()
    }

    // ---- The synchronous core, used directly by the proxy's relay loop.

    /// Decrypt whatever whole records are buffered; queue any replies.
    pub fn process(&mut self) -> Result<(), TransportError> {
        self.step(Want::Process)
    }

    /// Encrypt `data` into the output queue.
    pub fn queue(&mut self, data: &[u8]) -> Result<(), TransportError> {
        for chunk in data.chunks(FILE_CHUNK) {
            self.step(Want::Encrypt(chunk))?;
        }
        Ok(())
    }

    /// Queue a close_notify.
    pub fn queue_close_notify(&mut self) -> Result<(), TransportError> {
        self.step(Want::CloseNotify)
    }

    /// Encrypted bytes waiting to be written.
    pub fn pending_out(&self) -> usize {
        self.out.len()
    }

    /// Decrypted bytes waiting to be taken.
    pub fn pending_plain(&self) -> usize {
        self.plain.len() - self.plain_pos
    }

    /// The peer sent close_notify (or FIN) and everything before it has
    /// been decrypted.
    pub fn peer_closed(&self) -> bool {
        self.peer_closed
    }

    /// Write queued output without blocking; `Ok(true)` once it is empty.
    pub fn try_flush(&mut self) -> io::Result<bool> {
        while !self.out.is_empty() {
            match self.sock.try_write(self.out.data()) {
                Ok(n) => self.out.consume(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        self.tickets_held = false;
        Ok(true)
    }

    /// Read TLS bytes from the socket without blocking. `Ok(false)` on EOF
    /// (a FIN: `peer_closed` becomes true).
    pub fn try_fill(&mut self) -> Result<bool, TransportError> {
        // Small to start (a request fits), grown to what the record at the
        // front says it needs (unprocessed bytes always start a record).
        let need = if self.in_len >= 5 {
            5 + u16::from_be_bytes([self.inbuf[3], self.inbuf[4]]) as usize
        } else {
            0
        };
        let target = need.clamp(INITIAL_READ, MAX_RECORD);
        let cap = if self.streaming { MAX_READ } else { MAX_RECORD };
        if self.inbuf.len() < target
            || (self.in_len == self.inbuf.len() || self.streaming) && self.inbuf.len() < cap
        {
            self.inbuf
                .resize(target.max((self.inbuf.len() * 2).min(cap)), 0);
        }
        if self.in_len == self.inbuf.len() {
            return Err(TransportError::Protocol(
                "record larger than the protocol allows",
            ));
        }
        match crate::transport::try_read_drained(&self.sock, &mut self.inbuf[self.in_len..]) {
            Ok(0) => {
                self.peer_closed = true;
                Ok(false)
            }
            Ok(n) => {
                self.in_len += n;
                self.streaming = self.in_len == self.inbuf.len();
                Ok(true)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Decrypted bytes waiting, in place (the proxy writes them to the
    /// backend from here: no copy into a buffer of its own).
    pub fn plaintext(&self) -> &[u8] {
        &self.plain[self.plain_pos..]
    }

    /// Drop the first `n` bytes of [`Self::plaintext`].
    pub fn consume_plaintext(&mut self, n: usize) {
        self.plain_pos = (self.plain_pos + n).min(self.plain.len());
        if self.plain_pos == self.plain.len() {
            self.plain.clear();
            self.plain_pos = 0;
        }
    }

    /// Encrypt a held-back head on its own (nothing followed it).
    fn uncork(&mut self) -> Result<(), TransportError> {
        if !self.corked.is_empty() {
            let c = std::mem::take(&mut self.corked);
            self.queue(&c)?;
        }
        Ok(())
    }

    // ---- Async helpers on top of the core.

    /// Write all queued output. A client that takes nothing for
    /// [`SLOW_AFTER`] counts as a slow reader: the queue gives back its
    /// spare room while the wait goes on; past the send timeout (`stall`)
    /// without progress, an error.
    async fn flush(&mut self) -> Result<(), TransportError> {
        self.flush_waiting().await.map(drop)
    }

    /// [`Self::flush`], and whether it had to wait for the socket (its send
    /// buffer was full).
    async fn flush_waiting(&mut self) -> Result<bool, TransportError> {
        let mut waited = false;
        while !self.try_flush()? {
            waited = true;
            let first = SLOW_AFTER.min(self.stall);
            if let Ok(r) = tokio::time::timeout(first, self.sock.writable()).await {
                r?;
                continue;
            }
            self.out.shrink();
            match tokio::time::timeout(self.stall - first, self.sock.writable()).await {
                Ok(r) => r?,
                Err(_) => return Err(TransportError::SendTimeout(self.stall)),
            }
        }
        Ok(waited)
    }

    /// Room left in the socket's send buffer, in bytes the kernel will
    /// still take: its size (read each time: the kernel grows it as the
    /// connection speeds up) less what is queued, with a quarter more for
    /// the kernel's own overhead (it counts memory, `sk_wmem_queued`, which
    /// runs above the bytes queued).
    fn send_room(&self) -> usize {
        let size = rustix::net::sockopt::socket_send_buffer_size(&self.sock).unwrap_or(FILE_CHUNK);
        let queued = crate::sys::send_queued(self.sock.as_fd()).unwrap_or(0);
        size.saturating_sub(queued + queued / 4)
    }

    /// Read more TLS bytes from the socket. `Ok(false)` on EOF.
    async fn fill(&mut self) -> Result<bool, TransportError> {
        loop {
            self.sock.readable().await?;
            match self.try_fill() {
                Ok(more) => return Ok(more),
                Err(TransportError::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Read up to `want` bytes of `file` at `offset` and encrypt them, after
    /// the corked head (a response head, a frame header), so that both
    /// share a record; how many file bytes went.
    fn encrypt_file(
        &mut self,
        file: &File,
        offset: u64,
        want: usize,
    ) -> Result<usize, TransportError> {
        let head = self.corked.len();
        STAGING.with_borrow_mut(|staging| {
            if staging.len() < head + want {
                staging.resize(FILE_CHUNK.max(head + want), 0);
            }
            staging[..head].copy_from_slice(&self.corked);
            let n = file.read_at(&mut staging[head..head + want], offset)?;
            if n == 0 {
                return Err(TransportError::FileShrank);
            }
            self.corked.clear();
            self.step(Want::Encrypt(&staging[..head + n]))?;
            Ok(n)
        })
    }

    fn take_plain(&mut self, buf: &mut [u8]) -> usize {
        let avail = self.plaintext();
        let n = avail.len().min(buf.len());
        buf[..n].copy_from_slice(&avail[..n]);
        self.consume_plaintext(n);
        n
    }
}

/// Plaintext for the next write of a file response, head included, with
/// `total` left to send: all of it when it fits one record; otherwise what
/// the socket has `room` for, in whole records, between [`MIN_CHUNK`] and
/// [`FILE_CHUNK`].
fn chunk_size(total: u64, room: Option<usize>) -> usize {
    if total <= MIN_CHUNK as u64 {
        return total as usize;
    }
    let room = room.unwrap_or(FILE_CHUNK);
    (room / MIN_CHUNK * MIN_CHUNK)
        .clamp(MIN_CHUNK, FILE_CHUNK)
        .min(total.min(FILE_CHUNK as u64) as usize)
}

impl Transport for UserTls {
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize, TransportError> {
        if !self.corked.is_empty() {
            self.uncork()?;
            self.flush().await?;
        }
        loop {
            if self.plain_pos < self.plain.len() {
                return Ok(self.take_plain(buf));
            }
            if self.peer_closed {
                return Ok(0);
            }
            self.step(Want::Process)?;
            if !self.out.is_empty() && !self.tickets_held {
                self.flush().await?;
            }
            if self.plain_pos < self.plain.len() || self.peer_closed {
                continue;
            }
            // On EOF (a FIN without close_notify) `peer_closed` is set.
            self.fill().await?;
        }
    }

    async fn readable(&mut self) -> Result<(), TransportError> {
        if self.plain_pos < self.plain.len() || self.peer_closed || self.in_len > 0 {
            return Ok(());
        }
        // Not just `readable()`: tokio keeps a socket marked readable until
        // an operation sees EAGAIN, which would wake an idle connection at
        // once (right after the handshake, say). So read for real: the
        // bytes are needed anyway, and a wakeup that finds nothing gives
        // its buffer back.
        loop {
            self.sock.readable().await?;
            match self.try_fill() {
                Ok(_) => return Ok(()),
                Err(TransportError::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                    if self.in_len == 0 {
                        self.inbuf = Vec::new();
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn write_all(&mut self, data: &[u8], more: bool) -> Result<(), TransportError> {
        if more && self.corked.len() + data.len() <= CORK_MAX {
            self.corked.extend_from_slice(data);
            return Ok(());
        }
        if !self.corked.is_empty() {
            let mut all = std::mem::take(&mut self.corked);
            all.extend_from_slice(data);
            self.queue(&all)?;
            all.clear();
            self.corked = all;
        } else {
            self.queue(data)?;
        }
        self.flush().await
    }

    async fn send_file(
        &mut self,
        file: &File,
        mut offset: u64,
        len: u64,
    ) -> Result<(), TransportError> {
        let end = offset + len;
        // Whether the last write found the socket's buffer full: only then
        // is the room in it asked for (two system calls, which cost as much
        // as a good part of a chunk's encryption), so that a client that
        // keeps up costs nothing more, and one that falls behind gets
        // chunks no larger than the socket takes.
        let mut full = false;
        while offset < end {
            // The corked head goes first, in the same record as the body start.
            let head = self.corked.len();
            let total = end - offset + head as u64;
            let room = (full && total > MIN_CHUNK as u64).then(|| self.send_room());
            let want = chunk_size(total, room).saturating_sub(head).max(1);
            let n = self.encrypt_file(file, offset, want)?;
            offset += n as u64;
            full = self.flush_waiting().await?;
        }
        Ok(())
    }

    async fn close(&mut self) -> Result<(), TransportError> {
        self.uncork()?;
        self.step(Want::CloseNotify)?;
        self.flush().await?;
        // After the peer's close_notify nothing more will be read: the
        // close() that follows sends the FIN without a shutdown() of its own.
        if !self.peer_closed {
            socket2::SockRef::from(&self.sock).shutdown(std::net::Shutdown::Write)?;
        }
        Ok(())
    }

    async fn read_now(&mut self, buf: &mut [u8]) -> Result<Option<usize>, TransportError> {
        loop {
            if self.plain_pos < self.plain.len() {
                return Ok(Some(self.take_plain(buf)));
            }
            if self.peer_closed {
                return Ok(Some(0));
            }
            self.step(Want::Process)?;
            if !self.out.is_empty() {
                self.try_flush()?;
            }
            if self.plain_pos < self.plain.len() || self.peer_closed {
                continue;
            }
            match self.try_fill() {
                Ok(_) => continue,
                Err(TransportError::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Ok(None)
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn write_now(&mut self, data: &[u8], more: bool) -> Result<usize, TransportError> {
        if !self.out.is_empty() {
            self.try_flush()?;
        }
        if data.is_empty() {
            if !more {
                self.uncork()?;
                self.try_flush()?;
            }
            return Ok(0);
        }
        if self.out.len() >= OUT_HIGH {
            return Ok(0);
        }
        if more && self.corked.len() + data.len() <= CORK_MAX {
            self.corked.extend_from_slice(data);
            return Ok(data.len());
        }
        let n = data.len().min(FILE_CHUNK);
        if self.corked.is_empty() {
            self.queue(&data[..n])?;
        } else {
            let mut all = std::mem::take(&mut self.corked);
            all.extend_from_slice(&data[..n]);
            self.queue(&all)?;
            all.clear();
            self.corked = all;
        }
        self.try_flush()?;
        Ok(n)
    }

    async fn send_file_now(
        &mut self,
        file: &File,
        offset: u64,
        len: u64,
    ) -> Result<usize, TransportError> {
        if !self.out.is_empty() {
            self.try_flush()?;
        }
        if len == 0 || self.out.len() >= OUT_HIGH {
            return Ok(0);
        }
        let n = self.encrypt_file(file, offset, (len.min(FILE_CHUNK as u64) as usize).max(1))?;
        self.try_flush()?;
        Ok(n)
    }

    fn pending(&self) -> bool {
        !self.out.is_empty() || !self.corked.is_empty()
    }

    async fn ready(&mut self, read: bool, write: bool) -> Result<(), TransportError> {
        let flush = !self.out.is_empty();
        if read && self.plain_pos < self.plain.len() || write && !flush {
            // Decrypted bytes wait, or encrypting into memory can go on.
            return Ok(());
        }
        crate::transport::ready(&self.sock, read && !self.peer_closed, write).await
    }

    fn release_buffers(&mut self) {
        // Held tickets go now, if the socket takes them at once; if not they
        // stay queued and go with the next write.
        if self.tickets_held {
            let _ = self.try_flush();
        }
        if self.in_len == 0 {
            self.inbuf = Vec::new();
        }
        if self.plain_pos == self.plain.len() {
            self.plain = Vec::new();
            self.plain_pos = 0;
        }
        self.out.release();
        self.corked = Vec::new();
    }

    fn path(&self) -> Path {
        Path::Userspace
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_chunks_follow_the_room_in_the_socket() {
        // A small response, head and body, goes in one record whatever the
        // room.
        assert_eq!(chunk_size(450, None), 450);
        assert_eq!(chunk_size(MIN_CHUNK as u64, Some(0)), MIN_CHUNK);
        // Larger: whole records the socket has room for, within bounds.
        assert_eq!(chunk_size(1 << 30, Some(5 * MIN_CHUNK + 7)), 5 * MIN_CHUNK);
        assert_eq!(chunk_size(1 << 30, Some(1 << 30)), FILE_CHUNK);
        assert_eq!(chunk_size(1 << 30, Some(0)), MIN_CHUNK);
        // Never more than is left.
        assert_eq!(
            chunk_size(MIN_CHUNK as u64 + 5, Some(1 << 30)),
            MIN_CHUNK + 5
        );
    }
}
