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
use crate::server::timer;
use crate::sys;
use crate::tls::wire::AlertLevel;
use crate::transport::{Path, Transport, TransportError};
use rustls::kernel::KernelConnection;
use rustls::server::ServerConnectionData;
use rustls::{AlertDescription, ContentType, HandshakeType};
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::time::Duration;
use tokio::io::Interest;
use tokio::net::TcpStream;

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
    /// `TCP_CORK` is on: HTTP/2 DATA frames from files, one record per
    /// `sendfile()` (see `Transport::send_file_now`), gather into
    /// full-size TCP segments as one long `sendfile()`'s records do,
    /// instead of each closed record leaving as a segment of its own (the
    /// socket has `TCP_NODELAY`). Put on at the second such frame of a
    /// burst of writes and taken off by the empty `write_now` with which
    /// the session ends a burst, before it waits.
    corked: bool,
    /// File payloads sent since the session last waited (or uncorked).
    payloads: u8,
    /// The peer's control records, read in order.
    control: ControlReader,
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
            corked: false,
            payloads: 0,
            control: ControlReader::new(version),
        }
    }

    pub fn socket(&self) -> &TcpStream {
        &self.sock
    }

    /// Wait for room in the socket, for at most the stall timeout (on a
    /// worker, its coarse timers: no tokio timer behind every wait).
    async fn writable(&self) -> Result<(), TransportError> {
        match timer::timeout(self.stall, self.sock.writable()).await {
            Ok(r) => Ok(r?),
            Err(_) => Err(TransportError::SendTimeout(self.stall)),
        }
    }

    /// Send one whole control record, waiting for room if needed.
    async fn send_control(
        &mut self,
        record_type: ContentType,
        payload: &[u8],
    ) -> Result<(), TransportError> {
        loop {
            self.writable().await?;
            match self.sock.try_io(Interest::WRITABLE, || {
                sys::send_record(self.sock.as_fd(), record_type.into(), payload)
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

    async fn fatal(&mut self, alert: AlertDescription, why: &'static str) -> TransportError {
        let _ = self
            .send_control(
                ContentType::Alert,
                &[AlertLevel::Fatal.into(), alert.into()],
            )
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
            // The kernel saw a KeyUpdate and waits for keys we cannot give
            // it (see `handle_control`): our sending key still stands.
            Some(libc::EKEYEXPIRED) => return TransportError::KeyUpdateUnsupported,
            _ => return e.into(),
        };
        // A decrypt failure leaves its error pending on the socket (an
        // oversized record's was taken by the receive that reported it),
        // and the kernel refuses to send while one is: take it first.
        let _ = self.sock.take_error();
        let alert = [u8::from(AlertLevel::Fatal), u8::from(alert)];
        if sys::send_record(self.sock.as_fd(), ContentType::Alert.into(), &alert).is_ok() {
            self.tx_records += 1;
        }
        TransportError::Protocol(why)
    }

    /// Make room for `records` more outgoing records under the current key:
    /// rekey (TLS 1.3 on a kernel that allows it) or refuse.
    async fn reserve_tx(&mut self, records: u64) -> Result<(), TransportError> {
        if !self.tx_key_spent(records) {
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
        self.send_control(
            ContentType::Handshake,
            &[HandshakeType::KeyUpdate.into(), 0, 0, 1, 0],
        )
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
                    .fatal(AlertDescription::DecodeError, "oversized control record")
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
        match self.control.decode(record_type, msg) {
            Err(Fatal { alert, why }) => Err(self.fatal(alert, why).await),
            Ok(Control::Closed) => Ok(true),
            Ok(Control::Ignore)
                if self.version == Version::Tls13 && self.rekey && self.control.mid_message() =>
            {
                // A KeyUpdate split across records (the only message TLS
                // 1.3 allows here). A kernel that rekeys takes a handshake
                // record that starts with one for the whole message and
                // decrypts nothing more until it has new keys; the rest of
                // the message is under the old key, which cannot be
                // installed again. So, as on a kernel that cannot rekey:
                // close properly, read nothing more.
                Err(TransportError::KeyUpdateUnsupported)
            }
            Ok(Control::Ignore) => Ok(false),
            Ok(Control::PeerAlert(d)) => Err(TransportError::PeerAlert(d.into())),
            Ok(Control::KeyUpdate { update_requested }) => {
                self.key_update(update_requested).await?;
                Ok(false)
            }
            Ok(Control::Renegotiation) => {
                // Refused the way rustls does: with a warning (the
                // reader ends the connection at the next request).
                self.send_control(
                    ContentType::Alert,
                    &[
                        AlertLevel::Warning.into(),
                        AlertDescription::NoRenegotiation.into(),
                    ],
                )
                .await?;
                Ok(false)
            }
        }
    }

    /// The peer moved to a new sending key (and maybe asks us to as well).
    async fn key_update(&mut self, update_requested: bool) -> Result<(), TransportError> {
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
        if update_requested {
            self.update_tx_key().await?;
        }
        Ok(())
    }
}

/// What a control record from the peer (a non-application record the
/// kernel handed up after the handshake) asks for. Decoded apart from acting
/// on it, so that the decoding can be fuzzed without a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// close_notify: the peer closed its side.
    Closed,
    /// Nothing to do (a warning alert within the allowance; part of a
    /// handshake message that goes on in the next record).
    Ignore,
    /// An alert that ends the connection.
    PeerAlert(AlertDescription),
    /// A TLS 1.3 KeyUpdate, ending its record.
    KeyUpdate { update_requested: bool },
    /// TLS 1.2 renegotiation: a ClientHello.
    Renegotiation,
}

/// A control record that ends the connection with this alert of ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fatal {
    pub alert: AlertDescription,
    pub why: &'static str,
}

/// Warning alerts a peer may send over a connection's life: rustls' own
/// allowance (BoringSSL's `kMaxWarningAlerts`), so that a connection
/// answers alike whichever path carries it. Each costs a wakeup and a
/// receive, and nothing bounds them otherwise.
const WARNING_ALERTS: u8 = 4;
/// Renegotiation requests refused with a warning before the next one ends
/// the connection, as rustls allows.
const RENEGOTIATIONS: u8 = 1;
/// The longest handshake message rustls takes (a 16-bit length).
const MAX_HANDSHAKE_MESSAGE: usize = 0xffff;

/// Reads the peer's control records in order, as the user-space path
/// (rustls) reads them: a handshake message may span records (RFC 8446
/// §5.1), so one begun in a record is carried to the next; warning alerts
/// and renegotiation requests are allowed as many times as rustls allows
/// them. What it keeps of a split message is its header and, of a
/// KeyUpdate, the one byte of its body: a ClientHello (the only long
/// message it takes) is counted and skipped, not stored.
#[derive(Debug, Clone)]
pub struct ControlReader {
    version: Version,
    /// The handshake message under way: its header so far (`have` bytes
    /// of 4), then the body bytes still to come.
    header: [u8; 4],
    have: usize,
    body_left: usize,
    /// A KeyUpdate's request byte, once read.
    request: Option<u8>,
    warnings_left: u8,
    renegotiations_left: u8,
}

impl ControlReader {
    pub fn new(version: Version) -> Self {
        ControlReader {
            version,
            header: [0; 4],
            have: 0,
            body_left: 0,
            request: None,
            warnings_left: WARNING_ALERTS,
            renegotiations_left: RENEGOTIATIONS,
        }
    }

    /// A handshake message has begun and not ended: nothing but handshake
    /// records may come until it does (RFC 8446 §5.1).
    pub fn mid_message(&self) -> bool {
        self.have > 0
    }

    /// Decode one control record of `record_type`.
    pub fn decode(&mut self, record_type: u8, msg: &[u8]) -> Result<Control, Fatal> {
        let fatal = |alert, why| Err(Fatal { alert, why });
        let typ = ContentType::from(record_type);
        if typ != ContentType::Handshake && self.mid_message() {
            return fatal(
                AlertDescription::UnexpectedMessage,
                "a record inside a split handshake message",
            );
        }
        match typ {
            ContentType::Alert => self.alert(msg),
            ContentType::Handshake => self.handshake(msg),
            ContentType::ChangeCipherSpec => fatal(
                AlertDescription::UnexpectedMessage,
                "ChangeCipherSpec after the handshake",
            ),
            _ => fatal(AlertDescription::UnexpectedMessage, "unknown record type"),
        }
    }

    /// An alert, judged as rustls judges it.
    fn alert(&mut self, msg: &[u8]) -> Result<Control, Fatal> {
        let fatal = |alert, why| Err(Fatal { alert, why });
        let &[level, desc] = msg else {
            return fatal(AlertDescription::DecodeError, "malformed alert");
        };
        let (level, desc) = (AlertLevel::from(level), AlertDescription::from(desc));
        if let AlertLevel::Unknown(_) = level {
            return fatal(AlertDescription::IllegalParameter, "unknown alert level");
        }
        if desc == AlertDescription::CloseNotify {
            return Ok(Control::Closed);
        }
        if level != AlertLevel::Warning {
            return Ok(Control::PeerAlert(desc));
        }
        // Refused with unexpected_message, as BoringSSL and OpenSSL refuse
        // too many warnings (rustls closes without a word).
        let Some(left) = self.warnings_left.checked_sub(1) else {
            return fatal(
                AlertDescription::UnexpectedMessage,
                "too many warning alerts",
            );
        };
        self.warnings_left = left;
        // TLS 1.3 has no warnings but user_canceled (RFC 8446 §6).
        if self.version == Version::Tls13 && desc != AlertDescription::UserCanceled {
            return fatal(AlertDescription::DecodeError, "warning alert in TLS 1.3");
        }
        Ok(Control::Ignore)
    }

    /// A handshake record: the messages it ends, and the start of one it
    /// may leave for the next record.
    fn handshake(&mut self, mut rest: &[u8]) -> Result<Control, Fatal> {
        let fatal = |alert, why| Err(Fatal { alert, why });
        if rest.is_empty() {
            // RFC 8446 §5.1, RFC 5246 §6.2.1: no zero-length handshake
            // fragments. decode_error, as rustls answers one before the
            // handshake's keys (it is malformed, not out of place).
            return fatal(AlertDescription::DecodeError, "empty handshake record");
        }
        let mut seen = Control::Ignore;
        while !rest.is_empty() {
            if self.have < 4 {
                let n = (4 - self.have).min(rest.len());
                self.header[self.have..self.have + n].copy_from_slice(&rest[..n]);
                self.have += n;
                rest = &rest[n..];
                if self.have < 4 {
                    break;
                }
                let [typ, a, b, c] = self.header;
                let len = u32::from_be_bytes([0, a, b, c]) as usize;
                match (self.version, HandshakeType::from(typ)) {
                    (Version::Tls13, HandshakeType::KeyUpdate) if len != 1 => {
                        return fatal(AlertDescription::DecodeError, "malformed KeyUpdate")
                    }
                    (Version::Tls13, HandshakeType::KeyUpdate) => {}
                    (Version::Tls12, HandshakeType::ClientHello) if len > MAX_HANDSHAKE_MESSAGE => {
                        return fatal(AlertDescription::DecodeError, "oversized ClientHello")
                    }
                    (Version::Tls12, HandshakeType::ClientHello) => {}
                    _ => {
                        return fatal(
                            AlertDescription::UnexpectedMessage,
                            "unexpected post-handshake message",
                        )
                    }
                }
                self.body_left = len;
            }
            let n = self.body_left.min(rest.len());
            if self.request.is_none() && n > 0 {
                self.request = Some(rest[0]);
            }
            self.body_left -= n;
            rest = &rest[n..];
            if self.body_left > 0 {
                break;
            }
            // A whole message.
            let typ = HandshakeType::from(self.header[0]);
            let request = self.request.take();
            self.have = 0;
            if typ == HandshakeType::KeyUpdate {
                let update_requested = match request {
                    Some(0) => false,
                    Some(1) => true,
                    _ => return fatal(AlertDescription::DecodeError, "malformed KeyUpdate"),
                };
                // The next record is under the new key: the KeyUpdate must
                // end its record (RFC 8446 §5.1).
                if !rest.is_empty() {
                    return fatal(
                        AlertDescription::UnexpectedMessage,
                        "KeyUpdate not at the end of its record",
                    );
                }
                return Ok(Control::KeyUpdate { update_requested });
            }
            let Some(left) = self.renegotiations_left.checked_sub(1) else {
                return fatal(
                    AlertDescription::UnexpectedMessage,
                    "too many renegotiation requests",
                );
            };
            self.renegotiations_left = left;
            seen = Control::Renegotiation;
        }
        Ok(seen)
    }
}

/// Decode one control record of `record_type` under `version`, as the
/// first the peer sends (see [`ControlReader`] for a connection's).
pub fn decode_control(version: Version, record_type: u8, msg: &[u8]) -> Result<Control, Fatal> {
    ControlReader::new(version).decode(record_type, msg)
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
            if self.control.mid_message() {
                // RFC 8446 §5.1: nothing between a handshake message's
                // fragments. (The proxy's splices read data past this
                // check; the next control record is checked still.)
                return Err(self
                    .fatal(
                        AlertDescription::UnexpectedMessage,
                        "application data inside a split handshake message",
                    )
                    .await);
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

    /// After a read shorter than its buffer: the kernel copies records
    /// while whole ones are queued and the buffer has room, so it found no
    /// more. Tell tokio (as `try_read_drained` does for TCP), sparing the
    /// recvmsg that would only say EAGAIN after every request. A record
    /// that arrives later raises a new epoll event; one the kernel parked
    /// behind the data because its type differs (a control record) raises
    /// none and is read with the next data or FIN, so the sender of a
    /// KeyUpdate or close_notify alone waits as any idle keep-alive client
    /// does. (HTTP only: the proxy's relay reads by splice.)
    fn drained(&self) {
        // A closure that reports WouldBlock is how tokio is told to clear
        // the readiness it observed.
        let _ = self.sock.try_io(Interest::READABLE, || {
            Err::<(), _>(io::ErrorKind::WouldBlock.into())
        });
    }

    /// Before writing `bytes` by other means (splice): make room under the
    /// record limit, rekeying if the kernel allows.
    pub async fn reserve_for(&mut self, bytes: u64) -> Result<(), TransportError> {
        self.reserve_tx(records_for(bytes) + 1).await
    }

    /// Whether [`Self::reserve_for`] `bytes` must first rekey (and so
    /// wait on the client).
    pub fn rekey_due(&self, bytes: u64) -> bool {
        self.tx_key_spent(records_for(bytes) + 1)
    }

    fn tx_key_spent(&self, records: u64) -> bool {
        self.tx_records.saturating_add(records) >= self.limit
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

    /// One `sendfile()` of at most `len` bytes: how much went (0: no room).
    async fn sendfile_once(
        &mut self,
        file: &File,
        offset: u64,
        len: u64,
    ) -> Result<usize, TransportError> {
        if len == 0 {
            return Ok(0);
        }
        // Room for at least two records under the current key (a rekey if
        // need be), and no more in this call than the key may still
        // protect: each call may end a record early (hence the extra one
        // counted). Checked here first: the rekey's future is made (and
        // moved) only when it is due, not for every frame.
        if self.tx_key_spent(2) {
            self.reserve_tx(2).await?;
        }
        self.try_sendfile(file, offset, len)
    }

    /// The `sendfile()` itself, with room under the key made.
    fn try_sendfile(
        &mut self,
        file: &File,
        offset: u64,
        len: u64,
    ) -> Result<usize, TransportError> {
        let chunk = sendfile_chunk(len, self.limit - self.tx_records);
        let mut off = offset;
        match self.sock.try_io(Interest::WRITABLE, || {
            rustix::fs::sendfile(self.sock.as_fd(), file.as_fd(), Some(&mut off), chunk)
                .map_err(io::Error::from)
        }) {
            Ok(0) => Err(TransportError::FileShrank),
            Ok(n) => {
                // A partial send may close a record early: count one more.
                self.tx_records += records_for(n as u64) + 1;
                Ok(n)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(e.into()),
        }
    }
}

/// Bytes for one `sendfile` call with `left` to send and room for `room`
/// more records under the current key (at least 3, which `reserve_tx`
/// makes sure of): at most 8 MiB (nginx uses 2 MiB), and no more records
/// than the key may still protect, counting one for a record the call may
/// end early and one to stay below the limit. A cipher without a practical
/// limit gives a room near `u64::MAX`.
fn sendfile_chunk(left: u64, room: u64) -> usize {
    let records = room.saturating_sub(2).max(1);
    left.min(8 << 20).min(records.saturating_mul(MAX_FRAGMENT)) as usize
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
                Recv::Data(n) => {
                    if n < buf.len() {
                        self.drained();
                    }
                    return Ok(n);
                }
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
        while !data.is_empty() {
            // Tried first: a wait (and its timeout) only when there is no room.
            match self.write_now(data, more).await? {
                0 => self.writable().await?,
                n => {
                    data = &data[n..];
                    // A client that keeps up never makes us wait: give the
                    // worker's other connections their turn now and then
                    // (not after the last send: a write that is done is
                    // not held back, nor timed out while it yields).
                    if !data.is_empty() {
                        tokio::task::coop::consume_budget().await;
                    }
                }
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
            match self.sendfile_once(file, offset, end - offset).await? {
                0 => self.writable().await?,
                n => {
                    offset += n as u64;
                    if offset < end {
                        tokio::task::coop::consume_budget().await;
                    }
                }
            }
        }
        Ok(())
    }

    async fn close(&mut self) -> Result<(), TransportError> {
        self.send_control(
            ContentType::Alert,
            &[
                AlertLevel::Warning.into(),
                AlertDescription::CloseNotify.into(),
            ],
        )
        .await?;
        socket2::SockRef::from(&self.sock).shutdown(std::net::Shutdown::Write)?;
        Ok(())
    }

    async fn read_now(&mut self, buf: &mut [u8]) -> Result<Option<usize>, TransportError> {
        if buf.is_empty() {
            return Ok(Some(0));
        }
        loop {
            match self.recv_once(buf).await? {
                Recv::Data(n) => {
                    if n < buf.len() {
                        self.drained();
                    }
                    return Ok(Some(n));
                }
                Recv::Closed => return Ok(Some(0)),
                Recv::Control => continue,
                Recv::WouldBlock => return Ok(None),
            }
        }
    }

    async fn write_now(&mut self, data: &[u8], more: bool) -> Result<usize, TransportError> {
        use rustix::net::SendFlags;
        if data.is_empty() {
            // A record left open by MSG_MORE closes with the next send
            // without it; what the cork holds goes now.
            if !more && self.corked {
                rustix::net::sockopt::set_tcp_cork(self.sock.as_fd(), false)
                    .map_err(io::Error::from)?;
                self.corked = false;
                self.payloads = 0;
            }
            return Ok(0);
        }
        let mut flags = SendFlags::NOSIGNAL | SendFlags::DONTWAIT;
        if more {
            flags |= SendFlags::MORE;
        }
        let records = records_for(data.len() as u64);
        if self.tx_key_spent(records) {
            self.reserve_tx(records).await?;
        }
        match self.sock.try_io(Interest::WRITABLE, || {
            rustix::net::send(self.sock.as_fd(), data, flags).map_err(io::Error::from)
        }) {
            Ok(n) => {
                self.tx_records += records_for(n as u64);
                Ok(n)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(e.into()),
        }
    }

    async fn send_file_now(
        &mut self,
        file: &File,
        offset: u64,
        len: u64,
    ) -> Result<usize, TransportError> {
        // A lone frame (a small file) goes out at once, uncorked: the cork
        // is worth its two calls only for a run of records.
        if !self.corked && len > 0 {
            if self.payloads > 0 {
                rustix::net::sockopt::set_tcp_cork(self.sock.as_fd(), true)
                    .map_err(io::Error::from)?;
                self.corked = true;
            } else {
                self.payloads = 1;
            }
        }
        if len == 0 {
            return Ok(0);
        }
        if self.tx_key_spent(2) {
            self.reserve_tx(2).await?;
        }
        self.try_sendfile(file, offset, len)
    }

    fn pending(&self) -> bool {
        self.corked
    }

    async fn ready(&mut self, read: bool, write: bool) -> Result<(), TransportError> {
        self.payloads = 0;
        crate::transport::ready(&self.sock, read && !self.peer_closed, write).await
    }

    fn release_buffers(&mut self) {}

    fn path(&self) -> Path {
        Path::Ktls
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALERT: u8 = 21;
    const HANDSHAKE: u8 = 22;

    #[test]
    fn sendfile_chunks_stay_within_the_key_limit() {
        // No practical limit (as for some TLS 1.2 suites): 8 MiB.
        assert_eq!(sendfile_chunk(1 << 40, u64::MAX), 8 << 20);
        assert_eq!(sendfile_chunk(1 << 40, u64::MAX - 5), 8 << 20);
        assert_eq!(sendfile_chunk(100, u64::MAX), 100);
        // Room for 10 records: 8 of them in full, plus the one a short call
        // may close, stays below the limit.
        assert_eq!(sendfile_chunk(1 << 40, 10), 8 * 16384);
        assert!(records_for(sendfile_chunk(1 << 40, 10) as u64) + 1 < 10);
        // The least reserve_tx leaves: one record.
        assert_eq!(sendfile_chunk(1 << 40, 3), 16384);
    }

    #[test]
    fn control_records_decode_to_what_they_ask() {
        use Version::{Tls12, Tls13};
        let d = decode_control;
        assert_eq!(d(Tls13, ALERT, &[1, 0]), Ok(Control::Closed));
        assert_eq!(d(Tls13, ALERT, &[2, 0]), Ok(Control::Closed));
        assert_eq!(d(Tls13, ALERT, &[1, 90]), Ok(Control::Ignore));
        assert_eq!(d(Tls12, ALERT, &[1, 42]), Ok(Control::Ignore));
        assert_eq!(
            d(Tls13, ALERT, &[2, 42]),
            Ok(Control::PeerAlert(AlertDescription::BadCertificate))
        );
        // user_canceled ends the connection when it comes as fatal.
        assert_eq!(
            d(Tls12, ALERT, &[2, 90]),
            Ok(Control::PeerAlert(AlertDescription::UserCanceled))
        );
        assert_eq!(
            d(Tls13, HANDSHAKE, &[24, 0, 0, 1, 1]),
            Ok(Control::KeyUpdate {
                update_requested: true
            })
        );
        assert_eq!(
            d(Tls12, HANDSHAKE, &[1, 0, 0, 2, 3, 3]),
            Ok(Control::Renegotiation)
        );
        let alert = |r: Result<Control, Fatal>| r.unwrap_err().alert;
        assert_eq!(alert(d(Tls13, ALERT, &[1])), AlertDescription::DecodeError);
        // TLS 1.3 has no warnings but user_canceled: as rustls answers.
        assert_eq!(
            alert(d(Tls13, ALERT, &[1, 42])),
            AlertDescription::DecodeError
        );
        assert_eq!(
            alert(d(Tls12, ALERT, &[3, 42])),
            AlertDescription::IllegalParameter
        );
        // RFC 8446 §5.1: no zero-length handshake fragments.
        for v in Version::ALL {
            assert_eq!(alert(d(v, HANDSHAKE, &[])), AlertDescription::DecodeError);
        }
        assert_eq!(
            alert(d(Tls13, HANDSHAKE, &[24, 0, 0, 1, 2])),
            AlertDescription::DecodeError
        );
        assert_eq!(
            alert(d(Tls13, HANDSHAKE, &[24, 0, 0, 1, 0, 24, 0, 0, 1, 0])),
            AlertDescription::UnexpectedMessage
        );
        assert_eq!(
            alert(d(Tls13, HANDSHAKE, &[24, 0, 0, 9, 0])),
            AlertDescription::DecodeError
        );
        // A TLS 1.3 ClientHello, a TLS 1.2 KeyUpdate, ChangeCipherSpec and
        // unknown types are out of place after the handshake.
        for (v, t, m) in [
            (Tls13, HANDSHAKE, &[1u8, 0, 0, 0][..]),
            (Tls12, HANDSHAKE, &[24, 0, 0, 1, 0][..]),
            (Tls13, 20, &[1][..]),
            (Tls13, 99, &[][..]),
        ] {
            assert_eq!(alert(d(v, t, m)), AlertDescription::UnexpectedMessage);
        }
    }

    #[test]
    fn a_handshake_message_may_span_records() {
        let key_update = [24u8, 0, 0, 1, 1];
        // Every way of cutting a KeyUpdate in two or more records.
        for cuts in 1u32..(1 << 4) {
            let mut r = ControlReader::new(Version::Tls13);
            let mut start = 0;
            for end in 1..=key_update.len() {
                if end < key_update.len() && cuts & (1 << (end - 1)) == 0 {
                    continue;
                }
                let got = r.decode(HANDSHAKE, &key_update[start..end]);
                if end < key_update.len() {
                    assert_eq!(got, Ok(Control::Ignore), "{cuts:b} {end}");
                    assert!(r.mid_message());
                } else {
                    let want = Control::KeyUpdate {
                        update_requested: true,
                    };
                    assert_eq!(got, Ok(want), "{cuts:b}");
                    assert!(!r.mid_message());
                }
                start = end;
            }
        }
        // A TLS 1.2 ClientHello (renegotiation) of 3 000 bytes in 1 000-byte
        // records: counted once whole, not stored.
        let mut hello = vec![1u8, 0, 0x0b, 0xb8];
        hello.resize(4 + 3000, 7);
        let mut r = ControlReader::new(Version::Tls12);
        let mut got = Vec::new();
        for part in hello.chunks(1000) {
            got.push(r.decode(HANDSHAKE, part).unwrap());
        }
        assert_eq!(got.last(), Some(&Control::Renegotiation));
        assert!(got[..got.len() - 1].iter().all(|c| *c == Control::Ignore));
        // Nothing else may come between its fragments.
        let mut r = ControlReader::new(Version::Tls13);
        assert_eq!(r.decode(HANDSHAKE, &[24, 0]), Ok(Control::Ignore));
        let fatal = r.decode(ALERT, &[1, 0]).unwrap_err();
        assert_eq!(fatal.alert, AlertDescription::UnexpectedMessage);
        // A KeyUpdate whose last fragment carries more.
        let mut r = ControlReader::new(Version::Tls13);
        assert_eq!(r.decode(HANDSHAKE, &[24, 0, 0]), Ok(Control::Ignore));
        let fatal = r.decode(HANDSHAKE, &[1, 0, 24]).unwrap_err();
        assert_eq!(fatal.alert, AlertDescription::UnexpectedMessage);
    }

    #[test]
    fn warnings_and_renegotiations_are_bounded_as_rustls_bounds_them() {
        let mut r = ControlReader::new(Version::Tls12);
        for _ in 0..WARNING_ALERTS {
            assert_eq!(r.decode(ALERT, &[1, 42]), Ok(Control::Ignore));
        }
        let fatal = r.decode(ALERT, &[1, 42]).unwrap_err();
        assert_eq!(fatal.alert, AlertDescription::UnexpectedMessage);
        // close_notify is no warning to count.
        assert_eq!(r.decode(ALERT, &[1, 0]), Ok(Control::Closed));

        let mut r = ControlReader::new(Version::Tls12);
        let hello = [1u8, 0, 0, 1, 0];
        assert_eq!(r.decode(HANDSHAKE, &hello), Ok(Control::Renegotiation));
        let fatal = r.decode(HANDSHAKE, &hello).unwrap_err();
        assert_eq!(fatal.alert, AlertDescription::UnexpectedMessage);
    }
}
