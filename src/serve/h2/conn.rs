//! One HTTP/2 connection's state, with no I/O (RFC 9113): the preface and
//! SETTINGS, the stream table and its states (§5.1), flow control both ways
//! (§5.2, §6.9), header blocks across CONTINUATION, errors as RST_STREAM or
//! GOAWAY (§5.4), RFC 9218 priorities, the graceful GOAWAY of a drain, and
//! the abuse budgets. The session (`mod.rs`) feeds it the bytes read and
//! asks it for the next write: frames in memory, then at most one DATA
//! payload to come from a file, sized so that header and payload fill one
//! TLS record.

use super::request::{self, Head};
use crate::http::h2::frame::{self, ErrorCode, Frame, FrameError, Setting, HEADER_LEN};
use crate::http::h2::hpack::{Decoded, Decoder};
use crate::serve::model::Body;
use std::collections::VecDeque;
use std::fs::File;
use std::sync::Arc;

/// Plaintext of one TLS record: what a write is sized to.
pub(super) const RECORD: usize = 16_384;
/// Bodies up to this size are read into memory and framed with what else is
/// going out; larger ones go out by `send_file` (HTTP/1.1's break-even).
pub(super) const SMALL_BODY: u64 = 2048;
/// The window the client gets for each stream (RFC default): a static site
/// reads no request bodies.
const STREAM_RECV_WINDOW: i64 = 65_535;
/// The connection window we give, and give back once half is used.
const CONN_RECV_WINDOW: i64 = 65_535;
/// Output frames queued past this stop the reading of input (a SETTINGS or
/// PING flood meets back-pressure, not memory).
pub(super) const QUEUED_MAX: usize = 4 * RECORD;
/// Streams reset recently, whose late frames are ignored (§5.4.2).
const RECENT_RESETS: usize = 32;
/// The abuse budget: each client reset of a stream still being answered,
/// each request refused or malformed costs one, each response completed
/// gives one back; at zero the connection ends (ENHANCE_YOUR_CALM).
/// Rapid Reset (CVE-2023-44487) and MadeYouReset (CVE-2025-8671) both
/// spend it.
const BUDGET: i32 = 100;
/// Frames that do nothing for us (PING, SETTINGS, PRIORITY, empty DATA,
/// unknown types, WINDOW_UPDATE of closed streams) a connection may send
/// beyond [`GLITCHES_PER_REQUEST`] per request.
const GLITCHES: u64 = 10_000;
const GLITCHES_PER_REQUEST: u64 = 100;
/// The payload of the PING that follows the first GOAWAY of a drain.
const DRAIN_PING: [u8; 8] = *b"tlsdrain";
/// Streams whose body comes from a file, at once: each may hold a
/// descriptor until its last frame, so that a client's hundred streams
/// would otherwise hold a hundred. Requests past it wait, decoded, until one
/// of these ends, and are then answered by urgency (RFC 9218).
pub(crate) const FILE_STREAMS: usize = 8;
/// The decoded requests a connection keeps waiting, in bytes; a stream
/// that would take more is refused (REFUSED_STREAM: the client may retry).
const WAITING_MAX: usize = 128 * 1024;

/// What the session's configuration bounds.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub max_streams: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: a larger list is answered 431.
    pub header_list: usize,
    /// Requests on one connection before it drains.
    pub requests: u64,
}

/// The response to one request, as the handler and the framing made it.
pub(super) struct Answer<A> {
    pub status: u16,
    /// The HPACK header block.
    pub block: Vec<u8>,
    /// The body to send (empty for HEAD).
    pub body: Body,
    pub acct: A,
}

/// Answers requests: the site's handler and the framing of its headers.
pub(super) trait Respond {
    type Acct;
    /// Answer `head`, or with `status` (431) when its list was too large.
    fn respond(&mut self, head: &Head, status: Option<u16>) -> Answer<Self::Acct>;
}

/// A response done or abandoned, for the accounting.
pub(super) struct Finished<A> {
    pub id: u32,
    pub acct: A,
    pub status: u16,
    /// Body bytes queued.
    pub body: u64,
    /// Frame bytes queued: headers and data.
    pub wire: u64,
    /// Sent whole (not reset).
    pub complete: bool,
}

/// What is left of a body.
enum Cursor {
    Done,
    /// Not answered yet: waits for a file stream to end. The request and
    /// what it weighs in [`Conn::waiting_bytes`].
    Waiting(Box<Head>, usize),
    Bytes(Vec<u8>, usize),
    File {
        file: Arc<File>,
        off: u64,
        left: u64,
    },
}

impl Cursor {
    fn left(&self) -> u64 {
        match self {
            Cursor::Done | Cursor::Waiting(..) => 0,
            Cursor::Bytes(b, pos) => (b.len() - pos) as u64,
            Cursor::File { left, .. } => *left,
        }
    }
}

struct Stream<A> {
    id: u32,
    /// The client ended its side (END_STREAM).
    recv_closed: bool,
    recv_window: i64,
    send_window: i64,
    urgency: u8,
    incremental: bool,
    body: Cursor,
    /// The client's content-length and the DATA bytes it sent.
    declared: Option<u64>,
    received: u64,
    status: u16,
    sent_body: u64,
    wire: u64,
    /// From the answer (none while the request waits).
    acct: Option<A>,
}

/// A header block waiting for its CONTINUATION frames.
struct Block {
    stream: u32,
    end_stream: bool,
    bytes: Vec<u8>,
    /// Of a stream already refused: decoded only to keep HPACK in step.
    discard: bool,
}

/// The payload of one DATA frame to come from a file, after the bytes of
/// the same write.
pub(super) struct FilePart {
    /// The stream whose DATA it is.
    pub stream: u32,
    pub file: Arc<File>,
    pub off: u64,
    pub len: u64,
}

/// Why the connection ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Close {
    /// A connection error: GOAWAY with this code is queued.
    Error(ErrorCode, &'static str),
}

/// Drain: the two GOAWAYs of RFC 9113 §6.8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drain {
    No,
    /// GOAWAY(2^31-1) and a PING sent: streams still come in.
    Announced,
    /// GOAWAY(last) sent: newer streams are ignored.
    Final(u32),
}

/// Counters of what the connection met, for the metrics.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Counts {
    pub streams: u64,
    pub refused: u64,
    pub client_resets: u64,
    pub stream_errors: u64,
}

pub(super) struct Conn<A> {
    limits: Limits,
    decoder: Decoder,
    preface: usize,
    settings_seen: bool,
    peer_max_frame: u32,
    peer_initial_window: i64,
    send_window: i64,
    recv_window: i64,
    recv_unacked: i64,
    streams: Vec<Stream<A>>,
    max_seen: u32,
    block: Option<Block>,
    recent_resets: VecDeque<u32>,
    /// Frames queued: control frames and HEADERS, written before any DATA.
    queued: Vec<u8>,
    finished: Vec<Finished<A>>,
    drain: Drain,
    peer_goaway: bool,
    closing: Option<Close>,
    budget: i32,
    glitches: u64,
    requests: u64,
    /// The last incremental stream sent from (round robin).
    last_incremental: u32,
    /// Streams whose request waits ([`Cursor::Waiting`]), and their bytes.
    waiting: usize,
    waiting_bytes: usize,
    /// Streams whose body comes from a file ([`Cursor::File`]).
    files: usize,
    pub counts: Counts,
}

type R<T> = Result<T, FrameError>;

impl<A> Conn<A> {
    pub fn new(limits: Limits) -> Conn<A> {
        let mut queued = Vec::with_capacity(64);
        frame::put_settings(
            &mut queued,
            &[
                (frame::SETTINGS_MAX_CONCURRENT_STREAMS, limits.max_streams),
                (
                    frame::SETTINGS_MAX_HEADER_LIST_SIZE,
                    limits.header_list as u32,
                ),
                (frame::SETTINGS_NO_RFC7540_PRIORITIES, 1),
            ],
        );
        Conn {
            limits,
            decoder: Decoder::new(4096),
            preface: 0,
            settings_seen: false,
            peer_max_frame: frame::DEFAULT_MAX_FRAME_SIZE,
            peer_initial_window: 65_535,
            send_window: 65_535,
            recv_window: CONN_RECV_WINDOW,
            recv_unacked: 0,
            streams: Vec::new(),
            max_seen: 0,
            block: None,
            recent_resets: VecDeque::new(),
            queued,
            finished: Vec::new(),
            drain: Drain::No,
            peer_goaway: false,
            closing: None,
            budget: BUDGET,
            glitches: 0,
            requests: 0,
            last_incremental: 0,
            waiting: 0,
            waiting_bytes: 0,
            files: 0,
            counts: Counts::default(),
        }
    }

    /// Whether input may be read now: not while output piles up unread,
    /// nor after a connection error.
    pub fn wants_input(&self) -> bool {
        self.closing.is_none() && self.queued.len() < QUEUED_MAX
    }

    /// The accounting of stream `id`, open or finished but not yet taken.
    pub fn acct(&self, id: u32) -> Option<&A> {
        self.streams
            .iter()
            .find(|s| s.id == id)
            .and_then(|s| s.acct.as_ref())
            .or_else(|| self.finished.iter().find(|f| f.id == id).map(|f| &f.acct))
    }

    /// Streams being answered.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// The connection has nothing left to do: an error, or a drain (ours
    /// or the peer's) with every stream done.
    pub fn done(&self) -> bool {
        self.closing.is_some()
            || (self.streams.is_empty()
                && self.block.is_none()
                && (matches!(self.drain, Drain::Final(_)) || self.peer_goaway))
    }

    pub fn closing(&self) -> Option<Close> {
        self.closing
    }

    /// Responses finished since the last call.
    pub fn take_finished(&mut self) -> std::vec::Drain<'_, Finished<A>> {
        self.finished.drain(..)
    }

    /// Begin a graceful drain (RFC 9113 §6.8): GOAWAY with the largest id,
    /// and a PING; on its ACK, GOAWAY with the last stream taken.
    pub fn drain(&mut self) {
        if self.drain == Drain::No && self.closing.is_none() {
            frame::put_goaway(&mut self.queued, frame::MAX_WINDOW, ErrorCode::NoError, b"");
            frame::put_ping(&mut self.queued, DRAIN_PING);
            self.drain = Drain::Announced;
        }
    }

    /// The drain's PING went unanswered: the last GOAWAY now.
    pub fn finish_drain(&mut self) {
        if self.drain == Drain::Announced {
            frame::put_goaway(&mut self.queued, self.max_seen, ErrorCode::NoError, b"");
            self.drain = Drain::Final(self.max_seen);
        }
    }

    /// End the connection now with GOAWAY(code); streams not yet answered
    /// are not. `Close` is what [`Conn::closing`] then says.
    pub fn fail(&mut self, code: ErrorCode, why: &'static str) {
        if self.closing.is_none() {
            frame::put_goaway(&mut self.queued, self.max_seen, code, why.as_bytes());
            self.closing = Some(Close::Error(code, why));
            self.abandon_all();
        }
    }

    /// An idle connection times out: GOAWAY(NO_ERROR) with the last id.
    pub fn idle_close(&mut self) {
        self.fail(ErrorCode::NoError, "idle");
    }

    fn abandon_all(&mut self) {
        while let Some(s) = self.streams.last() {
            self.forget(s.id, false);
        }
    }

    /// Feed input; returns how much of it was used (the rest is an
    /// incomplete frame, or input held back while output piles up).
    pub fn recv<P: Respond<Acct = A>>(&mut self, input: &[u8], r: &mut P) -> usize {
        let mut used = 0;
        if self.preface < frame::PREFACE.len() {
            let want = &frame::PREFACE[self.preface..];
            let n = want.len().min(input.len());
            if input[..n] != want[..n] {
                self.fail(ErrorCode::ProtocolError, "invalid connection preface");
                return input.len();
            }
            self.preface += n;
            used = n;
        }
        while self.wants_input() {
            let rest = &input[used..];
            let Some(hb) = rest.first_chunk::<HEADER_LEN>() else {
                break;
            };
            let head = frame::Head::parse(hb);
            if let Err(e) = frame::check_len(&head, frame::DEFAULT_MAX_FRAME_SIZE) {
                self.frame_error(e);
                return input.len();
            }
            let total = HEADER_LEN + head.len as usize;
            if rest.len() < total {
                break;
            }
            used += total;
            let payload = &rest[HEADER_LEN..total];
            match frame::decode(&head, payload) {
                Ok(f) => {
                    if let Err(e) = self.on_frame(f, r) {
                        self.frame_error(e);
                    }
                }
                Err(e) => {
                    // A HEADERS refused for its stream alone still carries
                    // a block the client's encoder counted (§4.3).
                    if let (FrameError::Stream(id, ..), Some(block)) =
                        (e, frame::headers_block(&head, payload))
                    {
                        if head.flags & frame::FLAG_END_HEADERS != 0 {
                            self.discard_block(block);
                        } else if self.block.is_none() {
                            self.block = Some(Block {
                                stream: id,
                                end_stream: false,
                                bytes: block.to_vec(),
                                discard: true,
                            });
                        }
                    }
                    self.frame_error(e);
                }
            }
        }
        if self.closing.is_some() {
            return input.len();
        }
        used
    }

    fn frame_error(&mut self, e: FrameError) {
        match e {
            FrameError::Connection(code, why) => self.fail(code, why),
            FrameError::Stream(id, code, _) => {
                self.counts.stream_errors += 1;
                self.reset(id, code);
                self.spend();
            }
        }
    }

    /// Spend one of the abuse budget.
    fn spend(&mut self) {
        self.budget -= 1;
        if self.budget <= 0 {
            self.fail(
                ErrorCode::EnhanceYourCalm,
                "too many streams reset or refused",
            );
        }
    }

    fn glitch(&mut self) {
        self.glitches += 1;
        if self.glitches > GLITCHES {
            self.fail(
                ErrorCode::EnhanceYourCalm,
                "too many frames that do nothing",
            );
        }
    }

    /// Send RST_STREAM and forget the stream.
    fn reset(&mut self, id: u32, code: ErrorCode) {
        frame::put_rst_stream(&mut self.queued, id, code);
        self.forget(id, false);
        self.remember_reset(id);
    }

    /// Frames of a stream we reset may still be on their way: they are
    /// ignored for a while (§5.4.2), not answered with errors.
    fn remember_reset(&mut self, id: u32) {
        if self.recent_resets.len() == RECENT_RESETS {
            self.recent_resets.pop_front();
        }
        self.recent_resets.push_back(id);
    }

    /// The stream is closed: account for it.
    fn forget(&mut self, id: u32, complete: bool) {
        let Some(i) = self.streams.iter().position(|s| s.id == id) else {
            return;
        };
        let s = self.streams.remove(i);
        match s.body {
            Cursor::Waiting(_, size) => {
                self.waiting -= 1;
                self.waiting_bytes -= size;
            }
            Cursor::File { .. } => self.files -= 1,
            _ => {}
        }
        // A request that never got its answer has nothing to account.
        if let Some(acct) = s.acct {
            self.finished.push(Finished {
                id: s.id,
                acct,
                status: s.status,
                body: s.sent_body,
                wire: s.wire,
                complete,
            });
        }
    }

    fn stream(&mut self, id: u32) -> Option<&mut Stream<A>> {
        self.streams.iter_mut().find(|s| s.id == id)
    }

    fn on_frame<P: Respond<Acct = A>>(&mut self, f: Frame<'_>, r: &mut P) -> R<()> {
        let conn = |code, why| Err(FrameError::Connection(code, why));
        if !self.settings_seen {
            // §3.4: the preface's first frame is SETTINGS.
            if !matches!(f, Frame::Settings { ack: false, .. }) {
                return conn(ErrorCode::ProtocolError, "first frame is not SETTINGS");
            }
            self.settings_seen = true;
        }
        if let Some(b) = &self.block {
            // §6.10: nothing but the block's CONTINUATION frames in between.
            match f {
                Frame::Continuation { stream, .. } if stream == b.stream => {}
                _ => return conn(ErrorCode::ProtocolError, "expected CONTINUATION"),
            }
        }
        match f {
            Frame::Data {
                stream,
                end_stream,
                data,
                flow_len,
            } => self.on_data(stream, end_stream, data.len() as u64, flow_len),
            Frame::Headers {
                stream,
                end_stream,
                end_headers,
                block,
                ..
            } => {
                if stream % 2 == 0 {
                    return conn(ErrorCode::ProtocolError, "HEADERS on an even stream");
                }
                if end_headers {
                    self.on_block(stream, end_stream, block, r)
                } else {
                    self.block = Some(Block {
                        stream,
                        end_stream,
                        bytes: block.to_vec(),
                        discard: false,
                    });
                    self.check_block()
                }
            }
            Frame::Continuation {
                stream,
                end_headers,
                block,
            } => {
                if block.is_empty() && !end_headers {
                    self.glitch();
                }
                let Some(b) = &mut self.block else {
                    return conn(ErrorCode::ProtocolError, "CONTINUATION without HEADERS");
                };
                b.bytes.extend_from_slice(block);
                self.check_block()?;
                if end_headers {
                    let Some(b) = self.block.take() else {
                        return Ok(());
                    };
                    if b.discard {
                        self.discard_block(&b.bytes);
                        return Ok(());
                    }
                    self.on_block(stream, b.end_stream, &b.bytes, r)
                } else {
                    Ok(())
                }
            }
            Frame::Priority { stream, .. } => {
                self.glitch();
                if stream > self.max_seen {
                    // A PRIORITY for an idle stream leaves it idle.
                }
                Ok(())
            }
            Frame::RstStream { stream, .. } => {
                if stream > self.max_seen {
                    return conn(ErrorCode::ProtocolError, "RST_STREAM on an idle stream");
                }
                if self.stream(stream).is_some() {
                    self.counts.client_resets += 1;
                    // Not among our resets: after its own RST_STREAM the
                    // client may send nothing more on it (§5.1).
                    self.forget(stream, false);
                    self.spend();
                }
                Ok(())
            }
            Frame::Settings { ack, params } => {
                if ack {
                    return Ok(());
                }
                self.glitch();
                for p in params {
                    self.setting(p)?;
                }
                frame::put_settings_ack(&mut self.queued);
                Ok(())
            }
            Frame::Ping { ack, data } => {
                if ack {
                    if data == DRAIN_PING && self.drain == Drain::Announced {
                        frame::put_goaway(&mut self.queued, self.max_seen, ErrorCode::NoError, b"");
                        self.drain = Drain::Final(self.max_seen);
                    }
                } else {
                    self.glitch();
                    frame::put_ping_ack(&mut self.queued, data);
                }
                Ok(())
            }
            Frame::GoAway { .. } => {
                // The client opens no more streams: those in flight finish,
                // then our own GOAWAY precedes the close (§6.8).
                self.peer_goaway = true;
                if !matches!(self.drain, Drain::Final(_)) {
                    frame::put_goaway(&mut self.queued, self.max_seen, ErrorCode::NoError, b"");
                    self.drain = Drain::Final(self.max_seen);
                }
                Ok(())
            }
            Frame::WindowUpdate { stream, increment } => {
                let inc = increment as i64;
                if stream == 0 {
                    self.send_window += inc;
                    if self.send_window > frame::MAX_WINDOW as i64 {
                        return conn(ErrorCode::FlowControlError, "connection window too large");
                    }
                    return Ok(());
                }
                if stream > self.max_seen {
                    return conn(ErrorCode::ProtocolError, "WINDOW_UPDATE on an idle stream");
                }
                match self.stream(stream) {
                    Some(s) => {
                        s.send_window += inc;
                        if s.send_window > frame::MAX_WINDOW as i64 {
                            return Err(FrameError::Stream(
                                stream,
                                ErrorCode::FlowControlError,
                                "stream window too large",
                            ));
                        }
                    }
                    None => self.glitch(),
                }
                Ok(())
            }
            Frame::PriorityUpdate { prioritized, field } => {
                let (u, i) = request::priority(std::str::from_utf8(field).unwrap_or(""));
                if let Some(s) = self.stream(prioritized) {
                    (s.urgency, s.incremental) = (u, i);
                } else {
                    self.glitch();
                }
                Ok(())
            }
            Frame::Unknown { .. } => {
                self.glitch();
                Ok(())
            }
        }
    }

    /// A header block in pieces may not grow past what its list could
    /// decode to (HPACK never takes more bytes than the fields it names,
    /// give or take its integers): a CONTINUATION flood ends here.
    fn check_block(&self) -> R<()> {
        match &self.block {
            Some(b) if b.bytes.len() > 2 * self.limits.header_list + 1024 => Err(
                FrameError::Connection(ErrorCode::EnhanceYourCalm, "header block too large"),
            ),
            _ => Ok(()),
        }
    }

    fn setting(&mut self, s: Setting) -> R<()> {
        match s {
            Setting::InitialWindowSize(w) => {
                let delta = w as i64 - self.peer_initial_window;
                self.peer_initial_window = w as i64;
                for s in &mut self.streams {
                    s.send_window += delta;
                    if s.send_window > frame::MAX_WINDOW as i64 {
                        return Err(FrameError::Connection(
                            ErrorCode::FlowControlError,
                            "stream window too large",
                        ));
                    }
                }
            }
            Setting::MaxFrameSize(n) => self.peer_max_frame = n,
            // No push, no dynamic table in our encoder, no limit on what we
            // send that these change.
            _ => {}
        }
        Ok(())
    }

    fn on_data(&mut self, id: u32, end_stream: bool, len: u64, flow_len: u32) -> R<()> {
        if id > self.max_seen {
            return Err(FrameError::Connection(
                ErrorCode::ProtocolError,
                "DATA on an idle stream",
            ));
        }
        // §6.9: DATA counts against the connection window whatever the
        // stream's state.
        let flow = flow_len as i64;
        self.recv_window -= flow;
        if self.recv_window < 0 {
            return Err(FrameError::Connection(
                ErrorCode::FlowControlError,
                "DATA beyond the connection window",
            ));
        }
        self.recv_unacked += flow;
        if self.recv_unacked >= CONN_RECV_WINDOW / 2 {
            frame::put_window_update(&mut self.queued, 0, self.recv_unacked as u32);
            self.recv_window += self.recv_unacked;
            self.recv_unacked = 0;
        }
        if len == 0 && !end_stream {
            self.glitch();
        }
        let recent = self.recent_resets.contains(&id);
        let Some(s) = self.stream(id) else {
            if recent {
                return Ok(());
            }
            return Err(FrameError::Stream(
                id,
                ErrorCode::StreamClosed,
                "DATA on a closed stream",
            ));
        };
        if s.recv_closed {
            return Err(FrameError::Stream(
                id,
                ErrorCode::StreamClosed,
                "DATA after END_STREAM",
            ));
        }
        s.recv_window -= flow;
        if s.recv_window < 0 {
            return Err(FrameError::Stream(
                id,
                ErrorCode::FlowControlError,
                "DATA beyond the stream window",
            ));
        }
        s.received += len;
        // §8.1.1: a body longer, or at its end shorter, than its
        // content-length is malformed.
        if s.declared
            .is_some_and(|d| s.received > d || end_stream && s.received != d)
        {
            return Err(FrameError::Stream(
                id,
                ErrorCode::ProtocolError,
                "content-length mismatch",
            ));
        }
        if end_stream {
            s.recv_closed = true;
            if matches!(s.body, Cursor::Done) && s.wire > 0 {
                // Answered already: the stream closes now.
            }
        }
        Ok(())
    }

    /// Decode a refused stream's block for the table alone.
    fn discard_block(&mut self, block: &[u8]) {
        if self
            .decoder
            .decode(block, self.limits.header_list, &mut |_, _| {})
            .is_err()
        {
            self.fail(ErrorCode::CompressionError, "HPACK");
        }
    }

    /// A whole header block for `id`.
    fn on_block<P: Respond<Acct = A>>(
        &mut self,
        id: u32,
        end_stream: bool,
        block: &[u8],
        r: &mut P,
    ) -> R<()> {
        let mut head = Head::default();
        let decoded = self
            .decoder
            .decode(block, self.limits.header_list, &mut |n, v| head.field(n, v))
            .map_err(|_| FrameError::Connection(ErrorCode::CompressionError, "HPACK"))?;
        if id <= self.max_seen {
            // Trailers on an open stream (ignored), or a closed stream.
            let recent = self.recent_resets.contains(&id);
            return match self.stream(id) {
                Some(s) if !s.recv_closed => {
                    if !end_stream || head.has_pseudo() {
                        return Err(FrameError::Stream(
                            id,
                            ErrorCode::ProtocolError,
                            "trailers without END_STREAM, or with a pseudo-header",
                        ));
                    }
                    s.recv_closed = true;
                    Ok(())
                }
                Some(_) => Err(FrameError::Stream(
                    id,
                    ErrorCode::StreamClosed,
                    "HEADERS after END_STREAM",
                )),
                None if recent => Ok(()),
                // §5.1.1: a new stream's id must be larger than every
                // earlier one.
                None => Err(FrameError::Connection(
                    ErrorCode::ProtocolError,
                    "HEADERS on a closed stream",
                )),
            };
        }
        self.max_seen = id;
        if let Drain::Final(last) = self.drain {
            if id > last {
                // §6.8: after the last GOAWAY, newer streams are ignored;
                // the client retries them elsewhere.
                return Ok(());
            }
        }
        if self.closing.is_some() {
            return Ok(());
        }
        self.counts.streams += 1;
        if self.streams.len() >= self.limits.max_streams as usize {
            self.counts.refused += 1;
            self.reset(id, ErrorCode::RefusedStream);
            self.spend();
            return Ok(());
        }
        let too_large = decoded == Decoded::TooLarge;
        // A list cut short lacks what came after the limit: it is answered
        // 431 whatever it lacks.
        if let (Err(why), false) = (head.finish(), too_large) {
            return Err(FrameError::Stream(id, ErrorCode::ProtocolError, why));
        }
        if end_stream && head.content_length.is_some_and(|n| n > 0) {
            return Err(FrameError::Stream(
                id,
                ErrorCode::ProtocolError,
                "content-length without DATA",
            ));
        }
        let status = too_large.then_some(431);
        let (urgency, incremental) = head
            .priority
            .as_deref()
            .map_or((request::DEFAULT_URGENCY, false), request::priority);
        let mut stream = Stream {
            id,
            recv_closed: end_stream,
            recv_window: STREAM_RECV_WINDOW,
            send_window: self.peer_initial_window,
            urgency,
            incremental,
            body: Cursor::Done,
            declared: head.content_length,
            received: 0,
            status: 0,
            sent_body: 0,
            wire: 0,
            acct: None,
        };
        if status.is_none() && (self.waiting > 0 || self.files >= FILE_STREAMS) {
            let size = head.heap_size();
            if self.waiting_bytes + size > WAITING_MAX {
                self.counts.refused += 1;
                self.reset(id, ErrorCode::RefusedStream);
                self.spend();
                return Ok(());
            }
            self.waiting += 1;
            self.waiting_bytes += size;
            stream.body = Cursor::Waiting(Box::new(head), size);
            self.streams.push(stream);
            return Ok(());
        }
        self.streams.push(stream);
        self.answer(self.streams.len() - 1, &head, status, r);
        Ok(())
    }

    /// Answer the request of the stream at `i`: its HEADERS are queued, its
    /// body is what DATA will carry.
    fn answer<P: Respond<Acct = A>>(
        &mut self,
        i: usize,
        head: &Head,
        status: Option<u16>,
        r: &mut P,
    ) {
        let answer = r.respond(head, status);
        self.requests += 1;
        self.glitches = self.glitches.saturating_sub(GLITCHES_PER_REQUEST);
        if self.requests >= self.limits.requests {
            self.drain();
        }
        let body = match answer.body {
            Body::Empty => Cursor::Done,
            Body::Page(p) if p.is_empty() => Cursor::Done,
            Body::Page(p) => Cursor::Bytes(p.into_bytes(), 0),
            Body::File(f) if f.len == 0 => Cursor::Done,
            Body::File(f) => Cursor::File {
                file: f.file,
                off: f.offset,
                left: f.len,
            },
        };
        let done = matches!(body, Cursor::Done);
        if matches!(body, Cursor::File { .. }) {
            self.files += 1;
        }
        let id = self.streams[i].id;
        let at = self.queued.len();
        frame::put_headers(
            &mut self.queued,
            id,
            &answer.block,
            done,
            self.peer_max_frame,
        );
        let s = &mut self.streams[i];
        s.wire = (self.queued.len() - at) as u64;
        s.body = body;
        s.status = answer.status;
        s.acct = Some(answer.acct);
        if done {
            self.complete(id);
        }
    }

    /// Whether a waiting request can be answered now.
    fn can_answer(&self) -> bool {
        self.waiting > 0 && self.closing.is_none() && self.files < FILE_STREAMS
    }

    /// Answer waiting requests while file streams are free: the most
    /// urgent first, then in the order they came.
    fn answer_waiting<P: Respond<Acct = A>>(&mut self, r: &mut P) {
        while self.can_answer() {
            let Some(i) = self
                .streams
                .iter()
                .enumerate()
                .filter(|(_, s)| matches!(s.body, Cursor::Waiting(..)))
                .min_by_key(|(_, s)| s.urgency)
                .map(|(i, _)| i)
            else {
                return;
            };
            let Cursor::Waiting(head, size) =
                std::mem::replace(&mut self.streams[i].body, Cursor::Done)
            else {
                return;
            };
            self.waiting -= 1;
            self.waiting_bytes -= size;
            self.answer(i, &head, None, r);
        }
    }

    /// The stream's response is all queued: it closes (a client still
    /// sending is told to stop, §8.1).
    fn complete(&mut self, id: u32) {
        let Some(s) = self.stream(id) else { return };
        let open = !s.recv_closed;
        if open {
            frame::put_rst_stream(&mut self.queued, id, ErrorCode::NoError);
        }
        self.budget = (self.budget + 1).min(BUDGET);
        self.forget(id, true);
        if open {
            self.remember_reset(id);
        }
    }

    /// Whether DATA could be framed now.
    pub fn has_data(&self) -> bool {
        self.send_window > 0
            && self
                .streams
                .iter()
                .any(|s| s.send_window > 0 && s.body.left() > 0)
    }

    /// Whether anything is waiting to be written.
    pub fn has_output(&self) -> bool {
        !self.queued.is_empty() || self.has_data() || self.can_answer()
    }

    /// Streams that have data but no window: a stall the send timeout
    /// bounds.
    pub fn blocked(&self) -> bool {
        self.streams.iter().any(|s| s.body.left() > 0) && !self.has_data()
    }

    /// The stream to send from (RFC 9218): the lowest urgency; within it,
    /// non-incremental streams one after another in the order they came,
    /// then incremental ones in turn.
    fn pick(&mut self) -> Option<usize> {
        let ready = |s: &Stream<A>| s.send_window > 0 && s.body.left() > 0;
        let urgency = self
            .streams
            .iter()
            .filter(|s| ready(s))
            .map(|s| s.urgency)
            .min()?;
        let at = |s: &Stream<A>| ready(s) && s.urgency == urgency;
        if let Some(i) = self.streams.iter().position(|s| at(s) && !s.incremental) {
            return Some(i);
        }
        let last = self.last_incremental;
        let i = self
            .streams
            .iter()
            .position(|s| at(s) && s.id > last)
            .or_else(|| self.streams.iter().position(at))?;
        self.last_incremental = self.streams[i].id;
        Some(i)
    }

    /// Frame what can go out now into `out` (which starts empty): queued
    /// frames, then DATA while the write has room for a record, small
    /// bodies read into it. A larger file's frame ends the write: its
    /// header is the last bytes of `out`, its payload the returned part,
    /// sized so that the header and the payload fill one record.
    pub fn fill<P: Respond<Acct = A>>(
        &mut self,
        out: &mut Vec<u8>,
        r: &mut P,
    ) -> Result<Option<FilePart>, (u32, std::io::Error)> {
        self.answer_waiting(r);
        out.append(&mut self.queued);
        loop {
            if self.can_answer() {
                // A file stream ended in this write: the next request's
                // HEADERS go before its DATA.
                self.answer_waiting(r);
                out.append(&mut self.queued);
            }
            let used = out.len() % RECORD;
            // Too little room left in this record for a frame worth its
            // header: the next write starts a new one.
            if self.send_window <= 0 || used > RECORD - 1024 {
                return Ok(None);
            }
            let room = RECORD - used - HEADER_LEN;
            let Some(i) = self.pick() else {
                return Ok(None);
            };
            let max_frame = self.peer_max_frame as i64;
            let s = &mut self.streams[i];
            let p = (room as i64)
                .min(s.send_window)
                .min(self.send_window)
                .min(max_frame)
                .min(s.body.left() as i64) as u64;
            let end = p == s.body.left();
            let id = s.id;
            let mut file_part = None;
            match &mut s.body {
                Cursor::Done | Cursor::Waiting(..) => return Ok(None),
                Cursor::Bytes(b, pos) => {
                    out.extend_from_slice(&frame::data_head(p as u32, id, end));
                    out.extend_from_slice(&b[*pos..*pos + p as usize]);
                    *pos += p as usize;
                }
                Cursor::File { file, off, left } => {
                    if *left <= SMALL_BODY || p <= SMALL_BODY {
                        out.extend_from_slice(&frame::data_head(p as u32, id, end));
                        let at = out.len();
                        out.resize(at + p as usize, 0);
                        if let Err(e) =
                            std::os::unix::fs::FileExt::read_exact_at(&**file, &mut out[at..], *off)
                        {
                            out.truncate(at - HEADER_LEN);
                            return Err((id, e));
                        }
                    } else {
                        out.extend_from_slice(&frame::data_head(p as u32, id, end));
                        file_part = Some(FilePart {
                            stream: id,
                            file: file.clone(),
                            off: *off,
                            len: p,
                        });
                    }
                    *off += p;
                    *left -= p;
                }
            }
            s.send_window -= p as i64;
            s.sent_body += p;
            s.wire += p + HEADER_LEN as u64;
            self.send_window -= p as i64;
            if end {
                if matches!(
                    std::mem::replace(&mut s.body, Cursor::Done),
                    Cursor::File { .. }
                ) {
                    self.files -= 1;
                }
                self.complete(id);
            }
            if file_part.is_some() {
                return Ok(file_part);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::h2::hpack::Encoder;

    /// Answers every request with a page of `body` (empty: no body).
    struct Pages {
        body: String,
        seen: Vec<String>,
    }

    impl Respond for Pages {
        type Acct = u32;
        fn respond(&mut self, head: &Head, status: Option<u16>) -> Answer<u32> {
            self.seen.push(head.path.clone());
            let mut block = Vec::new();
            Encoder::status(&mut block, status.unwrap_or(200));
            Answer {
                status: status.unwrap_or(200),
                block,
                body: Body::Page(self.body.clone()),
                acct: self.seen.len() as u32,
            }
        }
    }

    fn limits() -> Limits {
        Limits {
            max_streams: 4,
            header_list: 16384,
            requests: 1000,
        }
    }

    fn client_start() -> Vec<u8> {
        let mut b = frame::PREFACE.to_vec();
        frame::put_settings(&mut b, &[]);
        b
    }

    fn get(out: &mut Vec<u8>, id: u32, path: &str) {
        let mut block = Vec::new();
        Encoder::field(&mut block, b":method", b"GET");
        Encoder::field(&mut block, b":scheme", b"https");
        Encoder::field(&mut block, b":authority", b"a.test");
        Encoder::field(&mut block, b":path", path.as_bytes());
        frame::put_headers(out, id, &block, true, 16384);
    }

    /// The frames in `bytes`: (type, flags, stream, payload length).
    fn frames(mut bytes: &[u8]) -> Vec<(u8, u8, u32, u32)> {
        let mut v = Vec::new();
        while let Some(h) = bytes.first_chunk::<HEADER_LEN>() {
            let h = frame::Head::parse(h);
            v.push((h.kind, h.flags, h.stream, h.len));
            bytes = &bytes[HEADER_LEN + h.len as usize..];
        }
        v
    }

    fn drive<P: Respond<Acct = u32>>(c: &mut Conn<u32>, p: &mut P) -> Vec<u8> {
        let mut out = Vec::new();
        while c.has_output() {
            let mut w = Vec::new();
            if let Some(f) = c.fill(&mut w, p).unwrap() {
                // What send_file would write after the frame header.
                let at = w.len();
                w.resize(at + f.len as usize, 0);
                std::os::unix::fs::FileExt::read_exact_at(&*f.file, &mut w[at..], f.off).unwrap();
            }
            if w.is_empty() {
                break;
            }
            out.extend_from_slice(&w);
        }
        out
    }

    #[test]
    fn requests_are_answered_and_settings_and_pings_acknowledged() {
        let mut c = Conn::new(limits());
        let mut p = Pages {
            body: "hello".into(),
            seen: vec![],
        };
        let mut input = client_start();
        get(&mut input, 1, "/a");
        get(&mut input, 3, "/b");
        input.extend_from_slice(&{
            let mut b = Vec::new();
            frame::put_head(&mut b, 8, 6, 0, 0);
            b.extend_from_slice(b"12345678");
            b
        });
        assert_eq!(c.recv(&input, &mut p), input.len());
        assert_eq!(p.seen, ["/a", "/b"]);
        let out = frames(&drive(&mut c, &mut p));
        // Our SETTINGS, the ACK of theirs, HEADERS, PING ACK, then DATA.
        assert_eq!(out[0].0, 4);
        assert_eq!((out[1].0, out[1].1), (4, 1));
        assert!(out.contains(&(6, 1, 0, 8)), "{out:?}");
        assert!(
            out.contains(&(0, 1, 1, 5)) && out.contains(&(0, 1, 3, 5)),
            "{out:?}"
        );
        assert_eq!(c.take_finished().filter(|f| f.complete).count(), 2);
        assert_eq!(c.open_streams(), 0);
    }

    #[test]
    fn windows_bound_data_and_a_zero_window_stalls_only_its_stream() {
        let mut c = Conn::new(limits());
        let mut p = Pages {
            body: "x".repeat(100_000),
            seen: vec![],
        };
        let mut input = client_start();
        get(&mut input, 1, "/big");
        c.recv(&input, &mut p);
        let out = frames(&drive(&mut c, &mut p));
        let sent: u32 = out.iter().filter(|f| f.0 == 0).map(|f| f.3).sum();
        // The initial windows: 65,535 bytes, no more.
        assert_eq!(sent, 65_535);
        assert!(out
            .iter()
            .filter(|f| f.0 == 0)
            .all(|f| f.3 as usize <= RECORD - HEADER_LEN));
        assert!(c.blocked());
        // More window: the rest, ending the stream.
        let mut wu = Vec::new();
        frame::put_window_update(&mut wu, 0, 100_000);
        frame::put_window_update(&mut wu, 1, 100_000);
        c.recv(&wu, &mut p);
        let out = frames(&drive(&mut c, &mut p));
        let sent: u32 = out.iter().filter(|f| f.0 == 0).map(|f| f.3).sum();
        assert_eq!(sent, 100_000 - 65_535);
        assert_eq!(out.last().unwrap().1 & 1, 1);
    }

    #[test]
    fn streams_past_the_limit_are_refused_and_resets_spend_the_budget() {
        let mut c = Conn::new(limits());
        let mut p = Pages {
            body: "x".repeat(100_000),
            seen: vec![],
        };
        let mut input = client_start();
        for id in (1..=9).step_by(2) {
            get(&mut input, id, "/x");
        }
        c.recv(&input, &mut p);
        assert_eq!(c.open_streams(), 4);
        let out = frames(&drive(&mut c, &mut p));
        assert!(out.contains(&(3, 0, 9, 4)), "{out:?}");
        // Rapid reset: open and cancel, again and again, until the budget
        // is gone and the connection ends with ENHANCE_YOUR_CALM.
        let mut id = 11;
        while c.closing().is_none() && id < 1000 {
            let mut b = Vec::new();
            get(&mut b, id, "/x");
            frame::put_rst_stream(&mut b, id, ErrorCode::Cancel);
            c.recv(&b, &mut p);
            id += 2;
        }
        assert_eq!(
            c.closing(),
            Some(Close::Error(
                ErrorCode::EnhanceYourCalm,
                "too many streams reset or refused"
            ))
        );
        assert!(id < 300, "{id}");
    }

    #[test]
    fn protocol_errors_end_the_connection_with_goaway() {
        let cases: Vec<(Vec<u8>, ErrorCode)> = vec![
            (b"GET / HTTP/1.1\r\n\r\n".to_vec(), ErrorCode::ProtocolError),
            (
                {
                    let mut b = frame::PREFACE.to_vec();
                    frame::put_ping_ack(&mut b, [0; 8]);
                    b
                },
                ErrorCode::ProtocolError,
            ),
            (
                {
                    let mut b = client_start();
                    get(&mut b, 2, "/");
                    b
                },
                ErrorCode::ProtocolError,
            ),
            (
                {
                    let mut b = client_start();
                    frame::put_window_update(&mut b, 0, frame::MAX_WINDOW);
                    b
                },
                ErrorCode::FlowControlError,
            ),
            (
                {
                    let mut b = client_start();
                    frame::put_head(&mut b, 3, frame::CONTINUATION, 4, 1);
                    b.extend_from_slice(&[0x82, 0x84, 0x87]);
                    b
                },
                ErrorCode::ProtocolError,
            ),
        ];
        for (input, code) in cases {
            let mut c = Conn::new(limits());
            let mut p = Pages {
                body: String::new(),
                seen: vec![],
            };
            c.recv(&input, &mut p);
            assert!(
                matches!(c.closing(), Some(Close::Error(k, _)) if k == code),
                "{:?}",
                c.closing()
            );
            let out = frames(&drive(&mut c, &mut p));
            assert_eq!(out.last().unwrap().0, 7, "{out:?}");
        }
    }

    #[test]
    fn a_stream_refused_by_its_frame_still_feeds_the_hpack_table() {
        let mut c = Conn::new(limits());
        let mut p = Pages {
            body: "x".into(),
            seen: vec![],
        };
        let mut input = client_start();
        // HEADERS of stream 1 depending on itself (a stream error) whose
        // block adds "x-a: 1" to the dynamic table.
        let mut block = vec![0x40, 3, b'x', b'-', b'a', 1, b'1'];
        let mut get1 = Vec::new();
        Encoder::field(&mut get1, b":method", b"GET");
        block.extend_from_slice(&get1);
        let mut payload = 1u32.to_be_bytes().to_vec();
        payload.push(15);
        payload.extend_from_slice(&block);
        frame::put_head(&mut input, payload.len() as u32, frame::HEADERS, 0x25, 1);
        input.extend_from_slice(&payload);
        // Stream 3 names that entry by its index (62): it must decode.
        let mut b3 = Vec::new();
        Encoder::field(&mut b3, b":method", b"GET");
        Encoder::field(&mut b3, b":scheme", b"https");
        Encoder::field(&mut b3, b":path", b"/three");
        b3.push(0xbe);
        frame::put_headers(&mut input, 3, &b3, true, 16384);
        c.recv(&input, &mut p);
        assert_eq!(c.closing(), None);
        assert_eq!(p.seen, ["/three"]);
        let out = frames(&drive(&mut c, &mut p));
        assert!(out.contains(&(3, 0, 1, 4)), "{out:?}");
    }

    #[test]
    fn a_header_list_past_the_limit_is_answered_431() {
        let mut c = Conn::new(limits());
        let mut p = Pages {
            body: String::new(),
            seen: vec![],
        };
        let mut input = client_start();
        let mut block = Vec::new();
        Encoder::field(&mut block, b":method", b"GET");
        Encoder::field(&mut block, b"x-big", &[b'a'; 20_000]);
        Encoder::field(&mut block, b":path", b"/late");
        frame::put_headers(&mut input, 1, &block, true, 16384);
        c.recv(&input, &mut p);
        assert_eq!(c.closing(), None);
        let f: Vec<_> = c.take_finished().map(|f| f.status).collect();
        assert_eq!(f, [431]);
    }

    fn get_with(out: &mut Vec<u8>, id: u32, path: &str, priority: &str) {
        let mut block = Vec::new();
        Encoder::field(&mut block, b":method", b"GET");
        Encoder::field(&mut block, b":scheme", b"https");
        Encoder::field(&mut block, b":path", path.as_bytes());
        Encoder::field(&mut block, b"priority", priority.as_bytes());
        frame::put_headers(out, id, &block, true, 16384);
    }

    #[test]
    fn urgent_streams_go_first_and_a_stalled_one_blocks_no_other() {
        let mut c = Conn::new(limits());
        let mut p = Pages {
            body: "x".repeat(40_000),
            seen: vec![],
        };
        let mut input = client_start();
        // Stream windows of 0: nothing moves until a WINDOW_UPDATE.
        input.clear();
        input.extend_from_slice(frame::PREFACE);
        frame::put_settings(&mut input, &[(frame::SETTINGS_INITIAL_WINDOW_SIZE, 0)]);
        frame::put_window_update(&mut input, 0, 1 << 20);
        get_with(&mut input, 1, "/image", "u=5, i");
        get_with(&mut input, 3, "/style", "u=0");
        get_with(&mut input, 5, "/stalled", "u=0");
        c.recv(&input, &mut p);
        drive(&mut c, &mut p);
        assert!(c.blocked());
        // Windows for 1 and 3, not 5: 3 (urgency 0) is sent whole before
        // 1 (urgency 5) starts, and 5 holds nothing back.
        let mut wu = Vec::new();
        frame::put_window_update(&mut wu, 1, 1 << 20);
        frame::put_window_update(&mut wu, 3, 1 << 20);
        c.recv(&wu, &mut p);
        let out = frames(&drive(&mut c, &mut p));
        let order: Vec<u32> = out.iter().filter(|f| f.0 == 0).map(|f| f.2).collect();
        let first_1 = order.iter().position(|&s| s == 1).unwrap();
        let last_3 = order.iter().rposition(|&s| s == 3).unwrap();
        assert!(last_3 < first_1, "{order:?}");
        assert!(!order.contains(&5), "{order:?}");
        let sent = |id| {
            out.iter()
                .filter(|f| f.0 == 0 && f.2 == id)
                .map(|f| f.3)
                .sum::<u32>()
        };
        assert_eq!((sent(1), sent(3)), (40_000, 40_000));
        assert_eq!(c.open_streams(), 1);
    }

    /// Answers every request with the whole of one file.
    struct OneFile {
        file: Arc<File>,
        len: u64,
        seen: Vec<String>,
    }

    impl Respond for OneFile {
        type Acct = u32;
        fn respond(&mut self, head: &Head, _: Option<u16>) -> Answer<u32> {
            self.seen.push(head.path.clone());
            let mut block = Vec::new();
            Encoder::status(&mut block, 200);
            Answer {
                status: 200,
                block,
                body: Body::File(crate::serve::model::FileRange {
                    file: self.file.clone(),
                    offset: 0,
                    len: self.len,
                }),
                acct: self.seen.len() as u32,
            }
        }
    }

    #[test]
    fn requests_past_the_file_streams_wait_and_are_answered_by_urgency() {
        use std::io::Write;
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&[7; 100_000]).unwrap();
        let mut p = OneFile {
            file: Arc::new(f),
            len: 100_000,
            seen: vec![],
        };
        let mut c = Conn::new(Limits {
            max_streams: 100,
            ..limits()
        });
        // Stream windows of 0: every file stream stays open.
        let mut input = frame::PREFACE.to_vec();
        frame::put_settings(&mut input, &[(frame::SETTINGS_INITIAL_WINDOW_SIZE, 0)]);
        for k in 0..20u32 {
            let u = if k == 19 { "u=0" } else { "u=3" };
            get_with(&mut input, 1 + 2 * k, &format!("/f{k}"), u);
        }
        c.recv(&input, &mut p);
        let out = frames(&drive(&mut c, &mut p));
        assert_eq!(p.seen.len(), FILE_STREAMS, "{:?}", p.seen);
        assert_eq!(out.iter().filter(|f| f.0 == 1).count(), FILE_STREAMS);
        assert_eq!(c.open_streams(), 20);
        assert!(!c.has_output());
        let rst = |id| {
            let mut b = Vec::new();
            frame::put_rst_stream(&mut b, id, ErrorCode::Cancel);
            b
        };
        // A waiting request the client gives up is never answered.
        c.recv(&rst(37), &mut p);
        // A file stream ends: the most urgent waiting request is answered,
        // its HEADERS written.
        c.recv(&rst(1), &mut p);
        let out = frames(&drive(&mut c, &mut p));
        assert_eq!(p.seen.last().unwrap(), "/f19");
        assert!(out.contains(&(1, 4, 39, out.iter().find(|f| f.2 == 39).unwrap().3)));
        // Then the others in the order they came.
        for (id, path) in [(3, "/f8"), (5, "/f9"), (7, "/f10")] {
            c.recv(&rst(id), &mut p);
            drive(&mut c, &mut p);
            assert_eq!(p.seen.last().unwrap(), path);
        }
        assert_eq!(c.open_streams(), 20 - 5);
        // Windows open: every stream is sent whole, the waiting ones as
        // slots free, /f18 (reset while waiting) never.
        let mut wu = Vec::new();
        frame::put_window_update(&mut wu, 0, 1 << 24);
        frame::put_settings(&mut wu, &[(frame::SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20)]);
        c.recv(&wu, &mut p);
        let out = frames(&drive(&mut c, &mut p));
        assert_eq!(c.open_streams(), 0);
        assert_eq!(p.seen.len(), 19);
        assert!(!p.seen.iter().any(|s| s == "/f18"));
        let data: u32 = out.iter().filter(|f| f.0 == 0).map(|f| f.3).sum();
        assert_eq!(data as u64, 15 * 100_000);
        assert_eq!(c.take_finished().filter(|f| f.complete).count(), 15);
    }

    #[test]
    fn a_drain_sends_two_goaways_and_ignores_newer_streams() {
        let mut c = Conn::new(limits());
        let mut p = Pages {
            body: "x".into(),
            seen: vec![],
        };
        let mut input = client_start();
        get(&mut input, 1, "/a");
        c.recv(&input, &mut p);
        c.drain();
        let out = frames(&drive(&mut c, &mut p));
        assert!(out.iter().any(|f| f.0 == 7) && out.iter().any(|f| f.0 == 6 && f.1 == 0));
        assert!(!c.done());
        let mut b = Vec::new();
        get(&mut b, 3, "/b");
        frame::put_head(&mut b, 8, 6, 1, 0);
        b.extend_from_slice(&DRAIN_PING);
        get(&mut b, 5, "/c");
        c.recv(&b, &mut p);
        // /b came before the PING's ACK: answered; /c after: not.
        assert_eq!(p.seen, ["/a", "/b"]);
        drive(&mut c, &mut p);
        assert!(c.done());
    }
}
