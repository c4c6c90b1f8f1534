//! A TLS connection whose records the kernel encrypts and decrypts.
//!
//! Application data is read with `recvmsg` (so control records arrive with
//! their type instead of as `EIO`), written with `send`, and file bodies go
//! out with `sendfile` and never enter user space. Control records are
//! handled here: close_notify ends the read side, fatal alerts end the
//! connection, TLS 1.3 KeyUpdate replaces the keys through rustls'
//! `KernelConnection` where the kernel allows it (>= 6.14) and otherwise
//! ends the connection before a single record under the new key is read.
//! Records are counted against the cipher's confidentiality limit.

use super::{crypto_info, Direction, Version};
use crate::sys;
use crate::transport::{Path, Transport, TransportError};
use rustls::internal::msgs::enums::AlertLevel;
use rustls::kernel::KernelConnection;
use rustls::server::ServerConnectionData;
use rustls::AlertDescription;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::time::Duration;
use tokio::io::Interest;
use tokio::net::TcpStream;

const CONTENT_CHANGE_CIPHER_SPEC: u8 = 20;
const CONTENT_ALERT: u8 = 21;
const CONTENT_HANDSHAKE: u8 = 22;

const ALERT_WARNING: u8 = 1;
const ALERT_FATAL: u8 = 2;
const ALERT_CLOSE_NOTIFY: u8 = 0;
const ALERT_UNEXPECTED_MESSAGE: u8 = 10;
const ALERT_DECODE_ERROR: u8 = 50;
const ALERT_USER_CANCELED: u8 = 90;
const ALERT_NO_RENEGOTIATION: u8 = 100;

const HS_CLIENT_HELLO: u8 = 1;
const HS_KEY_UPDATE: u8 = 24;

/// Largest plaintext a TLS record carries.
const MAX_FRAGMENT: u64 = 16384;
/// Largest control record we accept (a handshake record's plaintext).
const MAX_CONTROL: usize = 16384 + 256;

pub struct KtlsStream {
    sock: TcpStream,
    kconn: KernelConnection<ServerConnectionData>,
    version: Version,
    rekey: bool,
    stall: Duration,
    /// Records sent / received under the current keys (upper bounds).
    tx_records: u64,
    rx_records: u64,
    /// Replace or stop using a key after this many records.
    limit: u64,
    peer_closed: bool,
}

impl KtlsStream {
    /// `sock` already has `TLS_TX` and `TLS_RX` installed.
    pub fn new(
        sock: TcpStream,
        kconn: KernelConnection<ServerConnectionData>,
        rekey: bool,
        stall: Duration,
    ) -> Self {
        let version = Version::from_rustls(kconn.protocol_version()).unwrap_or(Version::Tls13);
        let limit = super::record_limit(kconn.negotiated_cipher_suite());
        KtlsStream {
            sock,
            kconn,
            version,
            rekey,
            stall,
            tx_records: 0,
            rx_records: 0,
            // Keep a margin below rustls' limit: our counts are estimates.
            limit: limit - limit / 16,
            peer_closed: false,
        }
    }

    pub fn socket(&self) -> &TcpStream {
        &self.sock
    }

    async fn writable(&self) -> Result<(), TransportError> {
        match tokio::time::timeout(self.stall, self.sock.writable()).await {
            Ok(r) => Ok(r?),
            Err(_) => Err(TransportError::SendTimeout(self.stall)),
        }
    }

    /// Send one whole control record, waiting for room if needed.
    async fn send_control(
        &mut self,
        record_type: u8,
        payload: &[u8],
    ) -> Result<(), TransportError> {
        loop {
            self.writable().await?;
            match self.sock.try_io(Interest::WRITABLE, || {
                sys::send_record(self.sock.as_fd(), record_type, payload)
            }) {
                Ok(n) if n == payload.len() => {
                    self.tx_records += 1;
                    return Ok(());
                }
                // The kernel takes a control record whole or not at all.
                Ok(_) => return Err(TransportError::Protocol("short control record write")),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    async fn fatal(&mut self, alert: u8, why: &'static str) -> TransportError {
        let _ = self
            .send_control(CONTENT_ALERT, &[ALERT_FATAL, alert])
            .await;
        TransportError::Protocol(why)
    }

    /// A receive (`recvmsg`, `splice`) failed. When the kernel refused a
    /// record of the peer's (EBADMSG: it did not decrypt, or is shorter
    /// than its tag; EMSGSIZE: longer than TLS allows), answer with the
    /// fatal alert the RFCs require (RFC 8446 §5.2, RFC 5246 §6.2.3.3),
    /// sent by the kernel under our key. One non-blocking try: the
    /// connection ends either way, and a peer that sends garbage is not
    /// waited for.
    pub fn recv_failed(&mut self, e: io::Error) -> TransportError {
        let (alert, why) = match e.raw_os_error() {
            Some(libc::EBADMSG) => (AlertDescription::BadRecordMac, "record failed to decrypt"),
            Some(libc::EMSGSIZE) => (AlertDescription::RecordOverflow, "oversized record"),
            _ => return e.into(),
        };
        // A decrypt failure leaves its error pending on the socket (an
        // oversized record's was taken by the receive that reported it),
        // and the kernel refuses to send while one is: take it first.
        let _ = self.sock.take_error();
        let alert = [u8::from(AlertLevel::Fatal), u8::from(alert)];
        if sys::send_record(self.sock.as_fd(), CONTENT_ALERT, &alert).is_ok() {
            self.tx_records += 1;
        }
        TransportError::Protocol(why)
    }

    /// Make room for `records` more outgoing records under the current key:
    /// rekey (TLS 1.3 on a kernel that allows it) or refuse.
    async fn reserve_tx(&mut self, records: u64) -> Result<(), TransportError> {
        if self.tx_records.saturating_add(records) < self.limit {
            return Ok(());
        }
        if self.version != Version::Tls13 || !self.rekey {
            return Err(TransportError::RecordLimit);
        }
        self.update_tx_key().await
    }

    /// Announce a KeyUpdate (under the old key), then install the new key.
    async fn update_tx_key(&mut self) -> Result<(), TransportError> {
        let (seq, secrets) = self.kconn.update_tx_secret()?;
        let info = crypto_info(self.version, seq, secrets)
            .map_err(|_| TransportError::Protocol("unsupported secrets"))?;
        self.send_control(CONTENT_HANDSHAKE, &[HS_KEY_UPDATE, 0, 0, 1, 0])
            .await?;
        sys::set_crypto_info(self.sock.as_fd(), Direction::Tx, &info)?;
        self.tx_records = 0;
        Ok(())
    }

    /// Read the rest of a control record whose first bytes are `first`.
    async fn read_control(&mut self, first: &[u8], done: bool) -> Result<Vec<u8>, TransportError> {
        let mut msg = first.to_vec();
        let mut end = done;
        while !end {
            if msg.len() > MAX_CONTROL {
                return Err(self
                    .fatal(ALERT_DECODE_ERROR, "oversized control record")
                    .await);
            }
            let mut chunk = vec![0u8; 1024];
            self.sock.readable().await?;
            match self.sock.try_io(Interest::READABLE, || {
                sys::recv_record(self.sock.as_fd(), &mut chunk)
            }) {
                Ok(r) if r.len == 0 => {
                    return Err(TransportError::Protocol("EOF inside a control record"))
                }
                Ok(r) => {
                    msg.extend_from_slice(&chunk[..r.len]);
                    end = r.end_of_record;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(msg)
    }

    /// Act on one control record. `Ok(true)`: the peer closed its side.
    async fn handle_control(
        &mut self,
        record_type: u8,
        msg: &[u8],
    ) -> Result<bool, TransportError> {
        match record_type {
            CONTENT_ALERT => {
                let [level, desc] = msg else {
                    return Err(self.fatal(ALERT_DECODE_ERROR, "malformed alert").await);
                };
                match (*level, *desc) {
                    (_, ALERT_CLOSE_NOTIFY) => Ok(true),
                    (_, ALERT_USER_CANCELED) => Ok(false),
                    (ALERT_WARNING, _) if self.version == Version::Tls12 => Ok(false),
                    (_, d) => Err(TransportError::PeerAlert(d)),
                }
            }
            CONTENT_HANDSHAKE => {
                let mut rest = msg;
                while !rest.is_empty() {
                    let &[typ, a, b, c, ref body @ ..] = rest else {
                        return Err(self
                            .fatal(ALERT_DECODE_ERROR, "truncated handshake message")
                            .await);
                    };
                    let len = u32::from_be_bytes([0, a, b, c]) as usize;
                    if body.len() < len {
                        return Err(self
                            .fatal(ALERT_DECODE_ERROR, "truncated handshake message")
                            .await);
                    }
                    let (payload, next) = body.split_at(len);
                    rest = next;
                    match typ {
                        HS_KEY_UPDATE if self.version == Version::Tls13 => {
                            let &[request] = payload else {
                                return Err(self
                                    .fatal(ALERT_DECODE_ERROR, "malformed KeyUpdate")
                                    .await);
                            };
                            if !rest.is_empty() {
                                return Err(self
                                    .fatal(
                                        ALERT_UNEXPECTED_MESSAGE,
                                        "KeyUpdate not alone in its record",
                                    )
                                    .await);
                            }
                            self.key_update(request).await?;
                        }
                        HS_CLIENT_HELLO if self.version == Version::Tls12 => {
                            // Renegotiation: refuse it the way rustls does.
                            self.send_control(
                                CONTENT_ALERT,
                                &[ALERT_WARNING, ALERT_NO_RENEGOTIATION],
                            )
                            .await?;
                        }
                        _ => {
                            return Err(self
                                .fatal(
                                    ALERT_UNEXPECTED_MESSAGE,
                                    "unexpected post-handshake message",
                                )
                                .await)
                        }
                    }
                }
                Ok(false)
            }
            CONTENT_CHANGE_CIPHER_SPEC => Err(self
                .fatal(
                    ALERT_UNEXPECTED_MESSAGE,
                    "ChangeCipherSpec after the handshake",
                )
                .await),
            _ => Err(self
                .fatal(ALERT_UNEXPECTED_MESSAGE, "unknown record type")
                .await),
        }
    }

    /// The peer moved to a new sending key (and maybe asks us to as well).
    async fn key_update(&mut self, request: u8) -> Result<(), TransportError> {
        if request > 1 {
            return Err(self.fatal(ALERT_DECODE_ERROR, "malformed KeyUpdate").await);
        }
        if !self.rekey {
            // Nothing after this record may be read: it is under a key the
            // kernel cannot take. The caller closes with close_notify under
            // our (unchanged) sending key.
            return Err(TransportError::KeyUpdateUnsupported);
        }
        let (seq, secrets) = self.kconn.update_rx_secret()?;
        let info = crypto_info(self.version, seq, secrets)
            .map_err(|_| TransportError::Protocol("unsupported secrets"))?;
        sys::set_crypto_info(self.sock.as_fd(), Direction::Rx, &info)?;
        self.rx_records = 0;
        if request == 1 {
            self.update_tx_key().await?;
        }
        Ok(())
    }
}

/// What one non-blocking receive on a kTLS socket gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recv {
    /// Application data, this many bytes.
    Data(usize),
    /// The peer closed its side (close_notify, or a FIN).
    Closed,
    /// A control record was handled (KeyUpdate, a warning alert).
    Control,
    /// Nothing to read now.
    WouldBlock,
}

impl KtlsStream {
    /// Receive once without waiting: application data into `buf`, or handle
    /// one control record. The proxy's splice loop calls this when
    /// `splice()` refuses a control record.
    pub async fn recv_once(&mut self, buf: &mut [u8]) -> Result<Recv, TransportError> {
        if self.peer_closed {
            return Ok(Recv::Closed);
        }
        if self.rx_records >= self.limit {
            return Err(TransportError::RecordLimit);
        }
        let r = match self.sock.try_io(Interest::READABLE, || {
            sys::recv_record(self.sock.as_fd(), buf)
        }) {
            Ok(r) => r,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Recv::WouldBlock),
            Err(e) => return Err(self.recv_failed(e)),
        };
        if r.record_type == sys::RECORD_APPLICATION_DATA {
            if r.len == 0 {
                self.peer_closed = true;
                return Ok(Recv::Closed);
            }
            self.rx_records += records_for(r.len as u64);
            return Ok(Recv::Data(r.len));
        }
        self.rx_records += 1;
        let msg = self.read_control(&buf[..r.len], r.end_of_record).await?;
        if self.handle_control(r.record_type, &msg).await? {
            self.peer_closed = true;
            return Ok(Recv::Closed);
        }
        Ok(Recv::Control)
    }

    /// Before writing `bytes` by other means (splice): make room under the
    /// record limit, rekeying if the kernel allows.
    pub async fn reserve_for(&mut self, bytes: u64) -> Result<(), TransportError> {
        self.reserve_tx(records_for(bytes) + 1).await
    }

    /// After writing `bytes` by other means (splice).
    pub fn count_sent(&mut self, bytes: u64) {
        self.tx_records += records_for(bytes) + 1;
    }

    /// The application data received so far, in records (for counting
    /// spliced input against the limit).
    pub fn count_received(&mut self, bytes: u64) {
        self.rx_records += records_for(bytes);
    }
}

fn records_for(bytes: u64) -> u64 {
    bytes.div_ceil(MAX_FRAGMENT).max(1)
}

impl Transport for KtlsStream {
    async fn read(&mut self, buf: &mut [u8]) -> Result<usize, TransportError> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            match self.recv_once(buf).await? {
                Recv::Data(n) => return Ok(n),
                Recv::Closed => return Ok(0),
                Recv::Control => continue,
                Recv::WouldBlock => self.sock.readable().await?,
            }
        }
    }

    async fn readable(&mut self) -> Result<(), TransportError> {
        if !self.peer_closed {
            self.sock.readable().await?;
        }
        Ok(())
    }

    async fn write_all(&mut self, mut data: &[u8], more: bool) -> Result<(), TransportError> {
        use rustix::net::SendFlags;
        let mut flags = SendFlags::NOSIGNAL | SendFlags::DONTWAIT;
        if more {
            flags |= SendFlags::MORE;
        }
        while !data.is_empty() {
            self.reserve_tx(records_for(data.len() as u64)).await?;
            self.writable().await?;
            match self.sock.try_io(Interest::WRITABLE, || {
                rustix::net::send(self.sock.as_fd(), data, flags).map_err(io::Error::from)
            }) {
                Ok(n) => {
                    self.tx_records += records_for(n as u64);
                    data = &data[n..];
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    async fn send_file(
        &mut self,
        file: &File,
        mut offset: u64,
        len: u64,
    ) -> Result<(), TransportError> {
        let end = offset + len;
        while offset < end {
            // Room for at least two records under the current key (a
            // rekey if need be), and no more in this call than the key may
            // still protect: each call may end a record early (hence the
            // extra one counted).
            self.reserve_tx(2).await?;
            let records = self.limit - self.tx_records - 1;
            // One sendfile call moves at most this much (nginx uses 2 MiB).
            let chunk = (end - offset)
                .min(8 << 20)
                .min((records - 1) * MAX_FRAGMENT) as usize;
            self.writable().await?;
            let mut off = offset;
            match self.sock.try_io(Interest::WRITABLE, || {
                rustix::fs::sendfile(self.sock.as_fd(), file.as_fd(), Some(&mut off), chunk)
                    .map_err(io::Error::from)
            }) {
                Ok(0) => return Err(TransportError::FileShrank),
                Ok(n) => {
                    // A partial send may close a record early: count one more.
                    self.tx_records += records_for(n as u64) + 1;
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    async fn close(&mut self) -> Result<(), TransportError> {
        self.send_control(CONTENT_ALERT, &[ALERT_WARNING, ALERT_CLOSE_NOTIFY])
            .await?;
        socket2::SockRef::from(&self.sock).shutdown(std::net::Shutdown::Write)?;
        Ok(())
    }

    fn release_buffers(&mut self) {}

    fn path(&self) -> Path {
        Path::Ktls
    }
}
