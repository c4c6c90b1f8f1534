//! The TLS handshake, driven with rustls' unbuffered API.
//!
//! Once the server has answered the ClientHello, records are read one at a
//! time (5-byte header, then exactly its body), so when the handshake
//! completes no byte of the client's first request sits in our buffer: it is
//! still in the socket, where the kernel will decrypt it once `TLS_RX` is
//! set. (The ClientHello itself is read with whatever follows it: nothing
//! the client sends before the server's answer can be application data.) Everything rustls wants to send (the server's
//! flight, TLS 1.3 session tickets) is written out before we return when a
//! kernel handoff is planned, because it requires an empty send queue. On
//! the user-space path the tickets are handed on unsent instead, so that they
//! share a write (and a trip through loopback or the NIC) with the first
//! response.
//!
//! Before rustls sees anything, the whole ClientHello is read (however many
//! records it spans) for what tlsfront checks itself (see `hello`), and a
//! client that speaks plaintext to the port is told apart.

use super::hello::{self, Gathered, Refusal};
use super::outbuf::OutBuf;
use super::wire::AlertLevel;
use super::Hello;
use crate::transport::{try_read_drained, TransportError};
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, UnbufferedStatus};
use rustls::ServerConfig;
use rustls::{AlertDescription, ContentType, HandshakeKind, ProtocolVersion};
use std::io;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// Largest TLS record on the wire: header + 2^14 + 2048 (RFC 5246 limit on
/// ciphertext expansion; TLS 1.3 allows only 256 of it).
pub const MAX_RECORD: usize = 5 + 16384 + 2048;

/// The state a finished handshake hands on.
pub struct Handshaken {
    pub conn: UnbufferedServerConnection,
    /// Unprocessed bytes read from the socket (always empty with
    /// record-by-record reading, but kept so nothing can be lost).
    pub pending_tls: Vec<u8>,
    /// Application data rustls decrypted during the handshake (likewise).
    pub early_plaintext: Vec<u8>,
    /// The server name the client asked for (SNI), if any.
    pub sni: Option<String>,
    /// The client's close_notify was read with the handshake (a client
    /// that sends its data and closes at once).
    pub peer_closed: bool,
    /// Records rustls queued after the handshake (TLS 1.3 session tickets),
    /// not yet written: only when not reading record by record.
    pub pending_out: OutBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    #[error("client closed the connection during the handshake")]
    Eof,
    /// The first byte is an ASCII letter, which no TLS record starts with:
    /// a plaintext client (HTTP, most likely).
    #[error("plaintext on the TLS port")]
    NotTls,
    #[error("ClientHello refused: {0}")]
    Refused(#[from] Refusal),
    #[error(transparent)]
    Transport(#[from] TransportError),
}

impl HandshakeError {
    /// The metrics label of a failure worth telling apart (refusals by
    /// tlsfront's own checks; the rest count as failed handshakes only).
    pub fn label(&self) -> Option<&'static str> {
        match self {
            HandshakeError::NotTls => Some("plaintext_on_tls_port"),
            HandshakeError::Refused(r) => Some(r.label()),
            _ => None,
        }
    }
}

impl From<io::Error> for HandshakeError {
    fn from(e: io::Error) -> Self {
        HandshakeError::Transport(e.into())
    }
}

impl From<rustls::Error> for HandshakeError {
    fn from(e: rustls::Error) -> Self {
        HandshakeError::Transport(e.into())
    }
}

/// Run the handshake on `sock` until rustls reports it may send application
/// data and has nothing left to send.
///
/// `record_by_record`: read exactly one record at a time, so that nothing
/// after the client's Finished is read (needed before a kTLS handoff);
/// otherwise read whatever has arrived, saving system calls, and hand any
/// surplus on in [`Handshaken`].
///
/// `choose` picks the configuration (the site) from the ClientHello, or
/// refuses it.
pub async fn handshake(
    sock: &mut TcpStream,
    choose: impl FnOnce(&Hello) -> Result<Arc<ServerConfig>, Refusal>,
    record_by_record: bool,
) -> Result<Handshaken, HandshakeError> {
    // Grown record by record (a ClientHello is usually under 2 KiB): a
    // connection that goes idle after its handshake keeps little memory.
    let mut incoming = vec![0u8; 2048];
    let mut reads = 0;
    // The whole ClientHello first, for the checks below; it may span
    // records. Read as it comes even before a handoff: until the server
    // answers, a client can send nothing that kTLS must decrypt (a
    // Finished needs the server's flight first), only the ClientHello and
    // what may follow it unanswered (a ChangeCipherSpec, rejected early
    // data), which rustls takes. A read shorter than the buffer also tells
    // tokio the socket is drained, so the first read after the server's
    // flight waits for the client instead of finding nothing (EAGAIN).
    let mut used = read_more(sock, &mut incoming, 0, false, &mut reads, true).await?;
    loop {
        match hello::gather(&incoming[..used]) {
            Gathered::Partial => {}
            // RFC 8446 §5.1 (rustls lets a plaintext record through up to
            // 2^14 + 2048 bytes).
            Gathered::Oversized => {
                send_plaintext_alert(sock, AlertDescription::RecordOverflow);
                return Err(TransportError::Protocol("ClientHello record over 2^14 bytes").into());
            }
            Gathered::Whole(_) | Gathered::Unreadable => break,
        }
        used += read_more(sock, &mut incoming, used, false, &mut reads, true).await?;
    }
    // The ClientHello picks the configuration; rustls checks it properly,
    // except for what `hello` refuses.
    let hello = hello::from_records(&incoming[..used]);
    let config = match hello.refusal.map_or_else(|| choose(&hello), Err) {
        Ok(c) => c,
        Err(refusal) => {
            send_plaintext_alert(sock, refusal.alert());
            return Err(refusal.into());
        }
    };
    let sni = hello.sni;
    let mut conn = UnbufferedServerConnection::new(config)?;
    let mut outgoing = OutBuf::default();
    let mut early_plaintext = Vec::new();
    let mut peer_closed = false;

    loop {
        let conn_handshaking = conn.is_handshaking();
        let UnbufferedStatus { discard, state } = conn.process_tls_records(&mut incoming[..used]);
        let state = match state {
            Ok(s) => s,
            Err(e) => {
                // Tell the client why, if rustls queued an alert.
                queue_alert(&mut conn, &mut incoming[..used], discard, &mut outgoing);
                write_best_effort(sock, outgoing.data());
                return Err(e.into());
            }
        };
        let mut done = false;
        let mut need_read = false;
        match state {
            ConnectionState::EncodeTlsData(mut enc) => outgoing.encode(&mut enc),
            ConnectionState::TransmitTlsData(tx) => {
                tx.done();
                // TLS 1.3 output after the client's Finished is only session
                // tickets, which nobody waits for: without a handoff they
                // wait for the first response. Anything else (TLS 1.2's last
                // flight above all) goes now.
                let tickets_only = !conn.is_handshaking()
                    && conn.protocol_version() == Some(rustls::ProtocolVersion::TLSv1_3);
                if record_by_record || !tickets_only {
                    sock.write_all(outgoing.data()).await?;
                    outgoing.consume(outgoing.len());
                }
            }
            ConnectionState::BlockedHandshake => need_read = true,
            ConnectionState::ReadTraffic(mut rt) => {
                while let Some(rec) = rt.next_record() {
                    early_plaintext.extend_from_slice(rec?.payload);
                }
            }
            ConnectionState::WriteTraffic(_) => done = true,
            // rustls reports this once; after the handshake it means the
            // client already sent its close_notify (data may precede it).
            ConnectionState::PeerClosed if !conn_handshaking => peer_closed = true,
            ConnectionState::PeerClosed | ConnectionState::Closed => {
                return Err(HandshakeError::Eof)
            }
            // 0-RTT is not enabled; anything else is a future rustls state.
            _ => return Err(TransportError::Protocol("unexpected handshake state").into()),
        }
        if discard > 0 {
            incoming.copy_within(discard..used, 0);
            used -= discard;
        }
        if done {
            if record_by_record && !outgoing.is_empty() {
                sock.write_all(outgoing.data()).await?;
                outgoing = OutBuf::default();
            }
            incoming.truncate(used);
            incoming.shrink_to_fit();
            return Ok(Handshaken {
                conn,
                pending_tls: incoming,
                early_plaintext,
                sni,
                peer_closed,
                pending_out: outgoing,
            });
        }
        if need_read {
            let plaintext = says_plaintext(&conn);
            used += read_more(
                sock,
                &mut incoming,
                used,
                record_by_record,
                &mut reads,
                plaintext,
            )
            .await?;
        }
    }
}

/// After `process_tls_records(incoming)` returned an error with `discard`:
/// take every record rustls still holds into `out`, the alert it queued
/// last (the caller writes them best effort, without waiting on the peer).
/// Records queued ahead of the alert must go first: a TLS 1.3 server
/// queues its ServerHello (and the compatibility ChangeCipherSpec) before
/// it builds the EncryptedExtensions, Certificate and CertificateVerify
/// that may fail (no common ALPN protocol or signature scheme), and the
/// client needs the ServerHello to read the alert encrypted after it; an
/// answer to a KeyUpdate waits in rustls until the next record goes out,
/// and that is the alert. Called once: the connection is dead after it.
/// rustls' buffer contract holds here too (`UnbufferedStatus::discard`):
/// the discard is applied and the rest of the same buffer passed again,
/// because its handshake deframer keeps positions relative to that buffer
/// (an empty buffer made it index out of range and panic).
pub(crate) fn queue_alert(
    conn: &mut UnbufferedServerConnection,
    incoming: &mut [u8],
    discard: usize,
    out: &mut OutBuf,
) {
    let mut start = discard.min(incoming.len());
    // rustls hands back one queued record per round, before it looks at
    // the input again, and only while it holds some (`wants_write`): a
    // round with nothing queued would read the input again and meet the
    // error again (a second fatal alert, which rustls debug-asserts
    // against). Each round takes one record off rustls' queue; the bound
    // is only in case a future rustls behaves otherwise, and is far above
    // what a failed handshake queues (its flight so far, in records).
    for _ in 0..MAX_QUEUED_AFTER_ERROR {
        if !conn.wants_write() {
            break;
        }
        let UnbufferedStatus { discard, state } = conn.process_tls_records(&mut incoming[start..]);
        match state {
            Ok(ConnectionState::EncodeTlsData(mut enc)) => out.encode(&mut enc),
            _ => break,
        }
        start = (start + discard).min(incoming.len());
    }
}

/// Most records taken from rustls after an error ([`queue_alert`]).
const MAX_QUEUED_AFTER_ERROR: usize = 4096;

/// Write `data` without waiting, as much as the socket takes now: the last
/// words (an alert) before the connection is dropped.
pub(crate) fn write_best_effort(sock: &TcpStream, mut data: &[u8]) {
    while !data.is_empty() {
        match sock.try_write(data) {
            Ok(0) | Err(_) => return,
            Ok(n) => data = &data[n..],
        }
    }
}

/// A fatal alert before any key exists (a plaintext record), best effort,
/// then our FIN: the connection ends here, and when what the client sent
/// lies unread, the close that follows is a reset, which must not be the
/// first the client hears of it.
fn send_plaintext_alert(sock: &TcpStream, alert: AlertDescription) {
    let v = ProtocolVersion::TLSv1_2.to_array();
    let record = [
        u8::from(ContentType::Alert),
        v[0],
        v[1],
        0,
        2,
        u8::from(AlertLevel::Fatal),
        u8::from(alert),
    ];
    write_best_effort(sock, &record);
    let _ = socket2::SockRef::from(sock).shutdown(std::net::Shutdown::Write);
}

/// Most reads one handshake may take. A real one takes a handful (the
/// ClientHello, then the client's second flight, each in a record or a
/// few). Each read looks again at everything read before it (the
/// ClientHello is joined from its first record, whole records are skipped
/// from the start), so a client that trickled a handshake in thousands of
/// tiny records or segments would make the server work quadratically.
const MAX_HANDSHAKE_READS: u32 = 64;

/// Whether what the server sends is still plaintext, so that tlsfront may
/// write an alert of its own: in a full TLS 1.2 handshake the server's
/// ChangeCipherSpec comes only after the client's last flight. (A TLS 1.3
/// server encrypts from its ServerHello on, a resumed TLS 1.2 one from its
/// first flight: only rustls can write an alert then.)
fn says_plaintext(conn: &UnbufferedServerConnection) -> bool {
    conn.protocol_version() == Some(ProtocolVersion::TLSv1_2)
        && conn.handshake_kind() == Some(HandshakeKind::Full)
}

/// Read after `buf[..used]`: exactly one more record, or whatever has
/// arrived. `reads` counts the handshake's reads against
/// [`MAX_HANDSHAKE_READS`]. Past it the handshake is refused with
/// `unexpected_message` if `plaintext` (the server has encrypted nothing
/// yet): pieces are legal (RFC 8446 §5.1), but so many are abuse, and
/// unexpected_message is what BoringSSL and OpenSSL answer to a peer that
/// sends too many of a legal thing (empty records, warning alerts), where
/// decode_error would claim the message is malformed, which it is not.
async fn read_more(
    sock: &mut TcpStream,
    buf: &mut Vec<u8>,
    used: usize,
    record_by_record: bool,
    reads: &mut u32,
    plaintext: bool,
) -> Result<usize, HandshakeError> {
    *reads += 1;
    if *reads > MAX_HANDSHAKE_READS {
        if plaintext {
            send_plaintext_alert(sock, AlertDescription::UnexpectedMessage);
        }
        return Err(TransportError::Protocol("handshake sent in too many pieces").into());
    }
    if record_by_record {
        read_one_record(sock, buf, used).await
    } else {
        read_some(sock, buf, used).await
    }
}

/// Read whatever has arrived (at least one byte) after `buf[..used]`.
async fn read_some(
    sock: &mut TcpStream,
    buf: &mut Vec<u8>,
    used: usize,
) -> Result<usize, HandshakeError> {
    if buf.len() - used < 2048 {
        if buf.len() >= 4 * MAX_RECORD {
            return Err(TransportError::Protocol("handshake larger than the record buffer").into());
        }
        buf.resize(buf.len() + MAX_RECORD, 0);
    }
    loop {
        sock.readable().await?;
        match try_read_drained(sock, &mut buf[used..]) {
            Ok(0) => return Err(HandshakeError::Eof),
            Ok(_) if used == 0 && !starts_like_tls(buf[0]) => return Err(HandshakeError::NotTls),
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Read until `buf[..used]` ends with one more complete record, never past
/// it, growing `buf` to fit that record. A ChangeCipherSpec is never a
/// client's last record before application data (a Finished follows it in
/// TLS 1.2 and 1.3), so its body is read with the next record's header.
async fn read_one_record(
    sock: &mut TcpStream,
    buf: &mut Vec<u8>,
    used: usize,
) -> Result<usize, HandshakeError> {
    let mut have = used;
    // Where the record we are completing starts: skip whole records first.
    let mut start = 0;
    while have - start >= 5 {
        let len = u16::from_be_bytes([buf[start + 3], buf[start + 4]]) as usize;
        if have - start >= 5 + len {
            start += 5 + len;
        } else {
            break;
        }
    }
    loop {
        let want = if have - start < 5 {
            start + 5
        } else {
            let len = u16::from_be_bytes([buf[start + 3], buf[start + 4]]) as usize;
            if 5 + len > MAX_RECORD {
                // No record is that long: hand rustls the header, which it
                // refuses at once with its alert, under the keys of the
                // moment (which only it has), as it does on the path that
                // reads whatever has arrived.
                return Ok(have - used);
            }
            let end = start + 5 + len;
            if have >= end {
                return Ok(have - used);
            }
            if buf[start] == u8::from(ContentType::ChangeCipherSpec) {
                end + 5
            } else {
                end
            }
        };
        if want > 4 * MAX_RECORD {
            return Err(TransportError::Protocol("handshake larger than the record buffer").into());
        }
        if want > buf.len() {
            buf.resize(want, 0);
        }
        sock.readable().await?;
        match try_read_drained(sock, &mut buf[have..want]) {
            Ok(0) => return Err(HandshakeError::Eof),
            Ok(_) if have == 0 && !starts_like_tls(buf[0]) => return Err(HandshakeError::NotTls),
            Ok(n) => have += n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// No TLS record starts with an ASCII letter (content types are 20-24);
/// every HTTP/1 request does. Other bytes are left to rustls to refuse.
fn starts_like_tls(first: u8) -> bool {
    !first.is_ascii_alphabetic()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    fn server() -> UnbufferedServerConnection {
        let (cert, key) = crate::config::cert::self_signed().unwrap();
        let chain = vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()];
        let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap();
        let configs = super::super::server_config(chain, key, &Default::default()).unwrap();
        let (config, _) = configs.for_client_hello(&[]);
        UnbufferedServerConnection::new(config).unwrap()
    }

    fn record(typ: u8, payload: &[u8]) -> Vec<u8> {
        let mut r = vec![typ, 3, 1];
        r.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        r.extend_from_slice(payload);
        r
    }

    /// Drive rustls over `input` as the handshake does, then fetch the
    /// alert the way the handshake does after an error.
    fn alert_after(input: &mut [u8]) -> (rustls::Error, Vec<u8>) {
        let mut conn = server();
        let mut out = OutBuf::default();
        let mut used = input.len();
        loop {
            let UnbufferedStatus { discard, state } = conn.process_tls_records(&mut input[..used]);
            match state {
                Err(e) => {
                    queue_alert(&mut conn, &mut input[..used], discard, &mut out);
                    return (e, out.data().to_vec());
                }
                Ok(ConnectionState::EncodeTlsData(mut enc)) => out.encode(&mut enc),
                Ok(ConnectionState::TransmitTlsData(tx)) => {
                    tx.done();
                    out.consume(out.len());
                }
                Ok(_) => panic!("rustls wants more input: the case does not fail"),
            }
            input.copy_within(discard..used, 0);
            used -= discard;
        }
    }

    /// The start of a ClientHello: enough for rustls' handshake deframer to
    /// hold a partial message when the next record breaks the rules.
    const HELLO_START: [u8; 8] = [1, 0, 0, 200, 3, 3, 0, 0];

    #[test]
    fn an_error_that_queues_no_alert_does_not_panic() {
        // A ClientHello fragment, then a ChangeCipherSpec in the middle of
        // it: rustls refuses with no alert, and fetching that (absent)
        // alert with an empty buffer once made it panic.
        let mut input = record(22, &HELLO_START);
        input.extend_from_slice(&record(20, &[1]));
        let (e, alert) = alert_after(&mut input);
        assert!(matches!(e, rustls::Error::PeerMisbehaved(_)), "{e:?}");
        assert!(alert.is_empty(), "{alert:?}");
    }

    #[test]
    fn an_error_with_an_alert_sends_it_once() {
        // A record type that does not exist: decode_error, one record.
        let mut input = record(22, &HELLO_START);
        input.extend_from_slice(&record(99, &[1]));
        let (_, alert) = alert_after(&mut input);
        let fatal = u8::from(AlertLevel::Fatal);
        let desc = u8::from(AlertDescription::DecodeError);
        assert_eq!(alert, [21, 3, 3, 0, 2, fatal, desc]);
    }
}
