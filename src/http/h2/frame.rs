//! HTTP/2 frames (RFC 9113 §4, §6): the 9-byte frame header, each frame
//! type's payload checked and parsed, and the frames a server writes.
//!
//! Owns every rule that can be checked from one frame alone (its header and
//! payload): lengths, the stream id being zero or not, padding, flags and
//! SETTINGS values. Rules that need the connection's state (stream states,
//! flow-control windows, the CONTINUATION sequence, HPACK) belong to the
//! session that calls [`decode`]. Decoding borrows from the payload and
//! never allocates; nothing here panics on peer bytes.
//!
//! PRIORITY_UPDATE (RFC 9218 §7.1) is parsed too, so that a client using
//! the extensible priority scheme is answered correctly rather than by
//! ignoring a frame whose misuse the RFC requires to be a connection error.

use std::fmt;

/// The frame header's length (RFC 9113 §4.1).
pub const HEADER_LEN: usize = 9;
/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// SETTINGS_MAX_FRAME_SIZE's initial value, and the least a peer may set
/// (RFC 9113 §6.5.2).
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 16_384;
/// The largest SETTINGS_MAX_FRAME_SIZE a peer may set: the frame header's
/// 24-bit length field (RFC 9113 §6.5.2).
pub const MAX_MAX_FRAME_SIZE: u32 = (1 << 24) - 1;
/// The largest flow-control window (RFC 9113 §6.9.1).
pub const MAX_WINDOW: u32 = (1 << 31) - 1;
/// The initial flow-control window of the connection and of each stream
/// (RFC 9113 §6.9.2).
pub const DEFAULT_WINDOW: u32 = 65_535;

/// The top bit of a stream identifier field is reserved: ignored on receipt
/// and sent as zero (RFC 9113 §4.1, §6.3, §6.8, §6.9; RFC 9218 §7.1).
const STREAM_MASK: u32 = MAX_WINDOW;

// Frame types (RFC 9113 §6; PRIORITY_UPDATE: RFC 9218 §7.1).
pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const PRIORITY: u8 = 0x2;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PUSH_PROMISE: u8 = 0x5;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;
pub const PRIORITY_UPDATE: u8 = 0x10;

// Flags (RFC 9113 §6). Each is defined only for some types; a flag a type
// does not define is ignored (§4.1).
/// DATA, HEADERS.
pub const FLAG_END_STREAM: u8 = 0x1;
/// SETTINGS, PING.
pub const FLAG_ACK: u8 = 0x1;
/// HEADERS, PUSH_PROMISE, CONTINUATION.
pub const FLAG_END_HEADERS: u8 = 0x4;
/// DATA, HEADERS, PUSH_PROMISE.
pub const FLAG_PADDED: u8 = 0x8;
/// HEADERS.
pub const FLAG_PRIORITY: u8 = 0x20;

// SETTINGS identifiers (RFC 9113 §6.5.2; 8: RFC 8441 §3; 9: RFC 9218 §2.1).
pub const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;
pub const SETTINGS_ENABLE_PUSH: u16 = 0x2;
pub const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
pub const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;
pub const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;
pub const SETTINGS_ENABLE_CONNECT_PROTOCOL: u16 = 0x8;
pub const SETTINGS_NO_RFC7540_PRIORITIES: u16 = 0x9;

/// RFC 9113 §7 error codes. Unknown codes received are kept as u32 by the
/// frames that carry them (§7: an unknown code MUST NOT trigger special
/// behaviour, and may be treated as INTERNAL_ERROR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum ErrorCode {
    NoError = 0,
    ProtocolError = 1,
    InternalError = 2,
    FlowControlError = 3,
    SettingsTimeout = 4,
    StreamClosed = 5,
    FrameSizeError = 6,
    RefusedStream = 7,
    Cancel = 8,
    CompressionError = 9,
    ConnectError = 10,
    EnhanceYourCalm = 11,
    InadequateSecurity = 12,
    Http11Required = 13,
}

impl ErrorCode {
    const ALL: [ErrorCode; 14] = [
        ErrorCode::NoError,
        ErrorCode::ProtocolError,
        ErrorCode::InternalError,
        ErrorCode::FlowControlError,
        ErrorCode::SettingsTimeout,
        ErrorCode::StreamClosed,
        ErrorCode::FrameSizeError,
        ErrorCode::RefusedStream,
        ErrorCode::Cancel,
        ErrorCode::CompressionError,
        ErrorCode::ConnectError,
        ErrorCode::EnhanceYourCalm,
        ErrorCode::InadequateSecurity,
        ErrorCode::Http11Required,
    ];

    /// The name RFC 9113 §7 gives it.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::NoError => "NO_ERROR",
            ErrorCode::ProtocolError => "PROTOCOL_ERROR",
            ErrorCode::InternalError => "INTERNAL_ERROR",
            ErrorCode::FlowControlError => "FLOW_CONTROL_ERROR",
            ErrorCode::SettingsTimeout => "SETTINGS_TIMEOUT",
            ErrorCode::StreamClosed => "STREAM_CLOSED",
            ErrorCode::FrameSizeError => "FRAME_SIZE_ERROR",
            ErrorCode::RefusedStream => "REFUSED_STREAM",
            ErrorCode::Cancel => "CANCEL",
            ErrorCode::CompressionError => "COMPRESSION_ERROR",
            ErrorCode::ConnectError => "CONNECT_ERROR",
            ErrorCode::EnhanceYourCalm => "ENHANCE_YOUR_CALM",
            ErrorCode::InadequateSecurity => "INADEQUATE_SECURITY",
            ErrorCode::Http11Required => "HTTP_1_1_REQUIRED",
        }
    }

    /// The code for a value on the wire; `None` for one §7 does not define.
    pub fn from_u32(code: u32) -> Option<ErrorCode> {
        usize::try_from(code)
            .ok()
            .and_then(|i| Self::ALL.get(i))
            .copied()
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A frame header (RFC 9113 §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// The payload's length (24 bits on the wire).
    pub len: u32,
    pub kind: u8,
    pub flags: u8,
    /// The stream identifier, its reserved bit cleared (§4.1: ignored on
    /// receipt).
    pub stream: u32,
}

impl Head {
    pub fn parse(b: &[u8; HEADER_LEN]) -> Head {
        let [l0, l1, l2, kind, flags, s0, s1, s2, s3] = *b;
        Head {
            len: u32::from_be_bytes([0, l0, l1, l2]),
            kind,
            flags,
            stream: u32::from_be_bytes([s0, s1, s2, s3]) & STREAM_MASK,
        }
    }

    /// The header's bytes. The length keeps its low 24 bits and the stream
    /// its low 31 (§4.1: the reserved bit MUST be unset when sending); the
    /// writers below never pass more.
    pub fn write(&self, out: &mut [u8; HEADER_LEN]) {
        debug_assert!(self.len <= MAX_MAX_FRAME_SIZE, "frame length {}", self.len);
        let [_, l0, l1, l2] = self.len.to_be_bytes();
        let [s0, s1, s2, s3] = (self.stream & STREAM_MASK).to_be_bytes();
        *out = [l0, l1, l2, self.kind, self.flags, s0, s1, s2, s3];
    }
}

/// Why a frame is refused: a connection error (GOAWAY with the code,
/// RFC 9113 §5.4.1) or a stream error (RST_STREAM on that stream, §5.4.2),
/// with a short static reason for logs, metrics and GOAWAY debug data.
///
/// The one stream error on a frame that carries a field block is HEADERS
/// whose stream depends on itself: the session must still run that block
/// through HPACK to keep the compression context in step (§4.3), and gets
/// it from [`headers_block`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("HTTP/2 connection error {code}: {1}", code = .0.name())]
    Connection(ErrorCode, &'static str),
    #[error("HTTP/2 stream {0} error {code}: {2}", code = .1.name())]
    Stream(u32, ErrorCode, &'static str),
}

impl FrameError {
    pub fn code(&self) -> ErrorCode {
        match *self {
            FrameError::Connection(code, _) | FrameError::Stream(_, code, _) => code,
        }
    }

    pub fn reason(&self) -> &'static str {
        match *self {
            FrameError::Connection(_, reason) | FrameError::Stream(_, _, reason) => reason,
        }
    }
}

fn conn(code: ErrorCode, reason: &'static str) -> FrameError {
    FrameError::Connection(code, reason)
}

/// RFC 7540-style priority (RFC 9113 §5.3.2 deprecates the scheme, but its
/// fields still arrive in HEADERS and PRIORITY and must be parsed; the
/// server ignores them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priority {
    pub exclusive: bool,
    pub depends_on: u32,
    /// The weight field as sent (the weight minus one).
    pub weight: u8,
}

impl Priority {
    fn parse(b: [u8; 5]) -> Priority {
        let [d0, d1, d2, d3, weight] = b;
        let dep = u32::from_be_bytes([d0, d1, d2, d3]);
        Priority {
            exclusive: dep & !STREAM_MASK != 0,
            depends_on: dep & STREAM_MASK,
            weight,
        }
    }
}

/// One setting from a SETTINGS frame (RFC 9113 §6.5.2), its value already
/// checked by [`decode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    HeaderTableSize(u32),
    EnablePush(bool),
    MaxConcurrentStreams(u32),
    InitialWindowSize(u32),
    MaxFrameSize(u32),
    MaxHeaderListSize(u32),
    NoRfc7540Priorities(bool),
    EnableConnectProtocol(bool),
    /// An identifier this server does not know: ignored (§6.5.2).
    Unknown(u16, u32),
}

impl Setting {
    /// The setting for one 6-byte entry, or why its value is refused.
    fn parse(id: u16, value: u32) -> Result<Setting, FrameError> {
        let flag = |reason| match value {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(conn(ErrorCode::ProtocolError, reason)),
        };
        Ok(match id {
            SETTINGS_HEADER_TABLE_SIZE => Setting::HeaderTableSize(value),
            // §6.5.2: any value other than 0 or 1 MUST be a connection
            // error PROTOCOL_ERROR.
            SETTINGS_ENABLE_PUSH => Setting::EnablePush(flag("SETTINGS_ENABLE_PUSH not 0 or 1")?),
            SETTINGS_MAX_CONCURRENT_STREAMS => Setting::MaxConcurrentStreams(value),
            // §6.5.2: above the largest window MUST be a connection error
            // FLOW_CONTROL_ERROR.
            SETTINGS_INITIAL_WINDOW_SIZE if value > MAX_WINDOW => {
                return Err(conn(
                    ErrorCode::FlowControlError,
                    "SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1",
                ))
            }
            SETTINGS_INITIAL_WINDOW_SIZE => Setting::InitialWindowSize(value),
            // §6.5.2: outside the initial value and 2^24-1 MUST be a
            // connection error PROTOCOL_ERROR.
            SETTINGS_MAX_FRAME_SIZE
                if !(DEFAULT_MAX_FRAME_SIZE..=MAX_MAX_FRAME_SIZE).contains(&value) =>
            {
                return Err(conn(
                    ErrorCode::ProtocolError,
                    "SETTINGS_MAX_FRAME_SIZE outside 16384..=16777215",
                ))
            }
            SETTINGS_MAX_FRAME_SIZE => Setting::MaxFrameSize(value),
            SETTINGS_MAX_HEADER_LIST_SIZE => Setting::MaxHeaderListSize(value),
            // RFC 8441 §3 and RFC 9218 §2.1: values other than 0 or 1 are a
            // connection error PROTOCOL_ERROR.
            SETTINGS_ENABLE_CONNECT_PROTOCOL => {
                Setting::EnableConnectProtocol(flag("SETTINGS_ENABLE_CONNECT_PROTOCOL not 0 or 1")?)
            }
            SETTINGS_NO_RFC7540_PRIORITIES => {
                Setting::NoRfc7540Priorities(flag("SETTINGS_NO_RFC7540_PRIORITIES not 0 or 1")?)
            }
            _ => Setting::Unknown(id, value),
        })
    }
}

/// The settings of a SETTINGS frame, in the order sent (§6.5.3: processed
/// in order, a later value of the same identifier wins). Only [`decode`]
/// makes one, after checking every entry, so iterating cannot fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings<'a> {
    rest: &'a [u8],
}

impl<'a> Settings<'a> {
    /// The raw 6-byte entries not yet iterated.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.rest
    }

    /// The settings from here on, leaving this view where it is.
    pub fn iter(&self) -> Settings<'a> {
        self.clone()
    }
}

/// One 6-byte SETTINGS entry: a 16-bit identifier, a 32-bit value.
fn split_setting(b: &[u8]) -> Option<((u16, u32), &[u8])> {
    let (&[i0, i1, v0, v1, v2, v3], rest) = b.split_first_chunk::<6>()?;
    Some((
        (
            u16::from_be_bytes([i0, i1]),
            u32::from_be_bytes([v0, v1, v2, v3]),
        ),
        rest,
    ))
}

impl Iterator for Settings<'_> {
    type Item = Setting;

    fn next(&mut self) -> Option<Setting> {
        loop {
            let ((id, value), rest) = split_setting(self.rest)?;
            self.rest = rest;
            // Checked by decode; an entry that failed would be skipped
            // rather than panic, but none reaches here.
            if let Ok(s) = Setting::parse(id, value) {
                return Some(s);
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.rest.len() / 6))
    }
}

/// A frame as received, borrowing its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame<'a> {
    Data {
        stream: u32,
        end_stream: bool,
        data: &'a [u8],
        /// The whole payload length, padding included: what flow control
        /// counts (§6.1, §6.9).
        flow_len: u32,
    },
    Headers {
        stream: u32,
        end_stream: bool,
        end_headers: bool,
        priority: Option<Priority>,
        block: &'a [u8],
    },
    Priority {
        stream: u32,
        priority: Priority,
    },
    RstStream {
        stream: u32,
        code: u32,
    },
    Settings {
        ack: bool,
        params: Settings<'a>,
    },
    Ping {
        ack: bool,
        data: [u8; 8],
    },
    GoAway {
        last_stream: u32,
        code: u32,
        debug: &'a [u8],
    },
    WindowUpdate {
        stream: u32,
        increment: u32,
    },
    Continuation {
        stream: u32,
        end_headers: bool,
        block: &'a [u8],
    },
    PriorityUpdate {
        prioritized: u32,
        field: &'a [u8],
    },
    /// A type this server does not know: ignored (RFC 9113 §4.1, §5.5).
    Unknown {
        kind: u8,
        stream: u32,
    },
}

/// Check a frame header against our SETTINGS_MAX_FRAME_SIZE before its
/// payload is read.
///
/// §4.2: a frame longer than we advertised is a FRAME_SIZE_ERROR, and a
/// connection error for the frames that can alter connection state
/// (HEADERS, PUSH_PROMISE, CONTINUATION, SETTINGS, and any on stream 0).
/// For the others (DATA, PRIORITY, RST_STREAM, WINDOW_UPDATE on a stream)
/// the RFC would allow a stream error, but it is a connection error here
/// too, as in nginx: surviving it means reading and discarding a payload
/// we said we would not take, whose DATA bytes still count against the
/// connection's flow-control window (§6.9), all for a peer that has
/// already ignored our settings.
pub fn check_len(head: &Head, max_frame_size: u32) -> Result<(), FrameError> {
    if head.len > max_frame_size {
        return Err(conn(
            ErrorCode::FrameSizeError,
            "frame longer than SETTINGS_MAX_FRAME_SIZE",
        ));
    }
    Ok(())
}

/// `payload` without its padding (§6.1, §6.2): the Pad Length byte read
/// off the front and that many bytes off the back. `fixed` is the length
/// of the fields between the Pad Length and the data (HEADERS' priority).
fn unpad(flags: u8, payload: &[u8], fixed: usize) -> Result<&[u8], FrameError> {
    if flags & FLAG_PADDED == 0 {
        return Ok(payload);
    }
    // §4.2: too short for the Pad Length field is a frame size error; a
    // connection error because DATA counts against the connection window
    // and HEADERS carries HPACK state.
    let Some((&pad, rest)) = payload.split_first() else {
        return Err(conn(
            ErrorCode::FrameSizeError,
            "PADDED frame without a Pad Length",
        ));
    };
    // §6.1, §6.2: padding as long as the rest of the payload (or longer)
    // MUST be a connection error PROTOCOL_ERROR. For HEADERS, the priority
    // fields are not room for padding.
    let room = rest.len().checked_sub(fixed).ok_or(conn(
        ErrorCode::FrameSizeError,
        "HEADERS too short for its priority fields",
    ))?;
    let pad = usize::from(pad);
    if pad > room {
        return Err(conn(
            ErrorCode::ProtocolError,
            "padding longer than the frame payload",
        ));
    }
    Ok(rest.get(..rest.len() - pad).unwrap_or_default())
}

/// HEADERS' optional priority and its field block fragment, before the
/// self-dependency check (which is a stream error, so the block survives).
fn parse_headers<'a>(
    head: &Head,
    payload: &'a [u8],
) -> Result<(Option<Priority>, &'a [u8]), FrameError> {
    // §6.2: HEADERS on stream 0 MUST be a connection error PROTOCOL_ERROR.
    if head.stream == 0 {
        return Err(conn(ErrorCode::ProtocolError, "HEADERS on stream 0"));
    }
    let has_priority = head.flags & FLAG_PRIORITY != 0;
    let rest = unpad(head.flags, payload, if has_priority { 5 } else { 0 })?;
    if !has_priority {
        return Ok((None, rest));
    }
    // §4.2: a HEADERS frame too short for its mandatory fields is a
    // connection error (it carries HPACK state).
    let Some((&fields, block)) = rest.split_first_chunk::<5>() else {
        return Err(conn(
            ErrorCode::FrameSizeError,
            "HEADERS too short for its priority fields",
        ));
    };
    Ok((Some(Priority::parse(fields)), block))
}

/// The field block fragment of a HEADERS frame that [`decode`] refused with
/// a stream error (its stream depending on itself): the session must still
/// decode it so that its HPACK context matches the peer's (§4.3), and
/// expect CONTINUATION frames if `END_HEADERS` is not set. `None` for
/// anything else that is not a well-formed HEADERS frame.
pub fn headers_block<'a>(head: &Head, payload: &'a [u8]) -> Option<&'a [u8]> {
    if head.kind != HEADERS {
        return None;
    }
    parse_headers(head, payload).ok().map(|(_, block)| block)
}

/// A fixed-size payload, or a connection FRAME_SIZE_ERROR (§4.2).
fn exact<const N: usize>(payload: &[u8], reason: &'static str) -> Result<[u8; N], FrameError> {
    <[u8; N]>::try_from(payload).map_err(|_| conn(ErrorCode::FrameSizeError, reason))
}

/// A 31-bit stream identifier field, its reserved bit ignored.
fn stream_field(b: [u8; 4]) -> u32 {
    u32::from_be_bytes(b) & STREAM_MASK
}

/// Parse one whole frame's payload (`payload` is the `head.len` bytes after
/// the header, and [`check_len`] has passed). Applies every rule of §6 that
/// needs no connection state; flags a type does not define and the
/// reserved bits are ignored (§4.1).
pub fn decode<'a>(head: &Head, payload: &'a [u8]) -> Result<Frame<'a>, FrameError> {
    let stream = head.stream;
    let flags = head.flags;
    match head.kind {
        DATA => {
            // §6.1: DATA on stream 0 MUST be a connection error
            // PROTOCOL_ERROR.
            if stream == 0 {
                return Err(conn(ErrorCode::ProtocolError, "DATA on stream 0"));
            }
            let data = unpad(flags, payload, 0)?;
            Ok(Frame::Data {
                stream,
                end_stream: flags & FLAG_END_STREAM != 0,
                data,
                // check_len bounds it far below u32::MAX.
                flow_len: u32::try_from(payload.len()).unwrap_or(u32::MAX),
            })
        }
        HEADERS => {
            let (priority, block) = parse_headers(head, payload)?;
            // §5.3.1: a stream cannot depend on itself; a stream error
            // PROTOCOL_ERROR.
            if priority.is_some_and(|p| p.depends_on == stream) {
                return Err(FrameError::Stream(
                    stream,
                    ErrorCode::ProtocolError,
                    "HEADERS stream depends on itself",
                ));
            }
            Ok(Frame::Headers {
                stream,
                end_stream: flags & FLAG_END_STREAM != 0,
                end_headers: flags & FLAG_END_HEADERS != 0,
                priority,
                block,
            })
        }
        PRIORITY => {
            // §6.3: PRIORITY on stream 0 MUST be a connection error
            // PROTOCOL_ERROR.
            if stream == 0 {
                return Err(conn(ErrorCode::ProtocolError, "PRIORITY on stream 0"));
            }
            // §6.3: a length other than 5 is a stream error
            // FRAME_SIZE_ERROR. PRIORITY may name an idle stream, on which
            // RST_STREAM must not be sent (§6.4): the session decides.
            let Ok(fields) = <[u8; 5]>::try_from(payload) else {
                return Err(FrameError::Stream(
                    stream,
                    ErrorCode::FrameSizeError,
                    "PRIORITY length not 5",
                ));
            };
            let priority = Priority::parse(fields);
            // §5.3.1: a stream error PROTOCOL_ERROR.
            if priority.depends_on == stream {
                return Err(FrameError::Stream(
                    stream,
                    ErrorCode::ProtocolError,
                    "PRIORITY stream depends on itself",
                ));
            }
            Ok(Frame::Priority { stream, priority })
        }
        RST_STREAM => {
            // §6.4: stream 0 MUST be a connection error PROTOCOL_ERROR; a
            // length other than 4 a connection error FRAME_SIZE_ERROR.
            if stream == 0 {
                return Err(conn(ErrorCode::ProtocolError, "RST_STREAM on stream 0"));
            }
            let code = exact::<4>(payload, "RST_STREAM length not 4")?;
            Ok(Frame::RstStream {
                stream,
                code: u32::from_be_bytes(code),
            })
        }
        SETTINGS => {
            // §6.5: a stream other than 0 MUST be a connection error
            // PROTOCOL_ERROR; an ACK with a payload, or a length not a
            // multiple of 6, a connection error FRAME_SIZE_ERROR.
            if stream != 0 {
                return Err(conn(ErrorCode::ProtocolError, "SETTINGS on a stream"));
            }
            let ack = flags & FLAG_ACK != 0;
            if ack && !payload.is_empty() {
                return Err(conn(
                    ErrorCode::FrameSizeError,
                    "SETTINGS ACK with a payload",
                ));
            }
            if payload.len() % 6 != 0 {
                return Err(conn(
                    ErrorCode::FrameSizeError,
                    "SETTINGS length not a multiple of 6",
                ));
            }
            // Every value checked now (§6.5.2), so the session applies
            // none of a frame that carries a bad one.
            let mut rest = payload;
            while let Some(((id, value), next)) = split_setting(rest) {
                Setting::parse(id, value)?;
                rest = next;
            }
            Ok(Frame::Settings {
                ack,
                params: Settings { rest: payload },
            })
        }
        // §8.4: a client cannot push; a server MUST treat PUSH_PROMISE as
        // a connection error PROTOCOL_ERROR.
        PUSH_PROMISE => Err(conn(ErrorCode::ProtocolError, "PUSH_PROMISE from a client")),
        PING => {
            // §6.7: a stream other than 0 MUST be a connection error
            // PROTOCOL_ERROR; a length other than 8 a connection error
            // FRAME_SIZE_ERROR.
            if stream != 0 {
                return Err(conn(ErrorCode::ProtocolError, "PING on a stream"));
            }
            let data = exact::<8>(payload, "PING length not 8")?;
            Ok(Frame::Ping {
                ack: flags & FLAG_ACK != 0,
                data,
            })
        }
        GOAWAY => {
            // §6.8: a stream other than 0 MUST be a connection error
            // PROTOCOL_ERROR; shorter than its two fields is a connection
            // FRAME_SIZE_ERROR (§4.2, stream 0).
            if stream != 0 {
                return Err(conn(ErrorCode::ProtocolError, "GOAWAY on a stream"));
            }
            let Some((&[l0, l1, l2, l3, c0, c1, c2, c3], debug)) = payload.split_first_chunk::<8>()
            else {
                return Err(conn(ErrorCode::FrameSizeError, "GOAWAY shorter than 8"));
            };
            Ok(Frame::GoAway {
                last_stream: stream_field([l0, l1, l2, l3]),
                code: u32::from_be_bytes([c0, c1, c2, c3]),
                debug,
            })
        }
        WINDOW_UPDATE => {
            // §6.9: a length other than 4 MUST be a connection error
            // FRAME_SIZE_ERROR; an increment of 0 a stream error
            // PROTOCOL_ERROR, or a connection error on stream 0.
            let increment = stream_field(exact::<4>(payload, "WINDOW_UPDATE length not 4")?);
            if increment == 0 {
                let reason = "WINDOW_UPDATE increment 0";
                return Err(if stream == 0 {
                    conn(ErrorCode::ProtocolError, reason)
                } else {
                    FrameError::Stream(stream, ErrorCode::ProtocolError, reason)
                });
            }
            Ok(Frame::WindowUpdate { stream, increment })
        }
        CONTINUATION => {
            // §6.10: CONTINUATION on stream 0 MUST be a connection error
            // PROTOCOL_ERROR. Whether one may come now is the session's.
            if stream == 0 {
                return Err(conn(ErrorCode::ProtocolError, "CONTINUATION on stream 0"));
            }
            Ok(Frame::Continuation {
                stream,
                end_headers: flags & FLAG_END_HEADERS != 0,
                block: payload,
            })
        }
        PRIORITY_UPDATE => {
            // RFC 9218 §7.1: on a stream other than 0, or prioritizing
            // stream 0, MUST be a connection error PROTOCOL_ERROR; shorter
            // than the Prioritized Stream ID is a connection
            // FRAME_SIZE_ERROR (RFC 9113 §4.2, stream 0).
            if stream != 0 {
                return Err(conn(
                    ErrorCode::ProtocolError,
                    "PRIORITY_UPDATE on a stream",
                ));
            }
            let Some((&id, field)) = payload.split_first_chunk::<4>() else {
                return Err(conn(
                    ErrorCode::FrameSizeError,
                    "PRIORITY_UPDATE shorter than 4",
                ));
            };
            let prioritized = stream_field(id);
            if prioritized == 0 {
                return Err(conn(
                    ErrorCode::ProtocolError,
                    "PRIORITY_UPDATE for stream 0",
                ));
            }
            Ok(Frame::PriorityUpdate { prioritized, field })
        }
        kind => Ok(Frame::Unknown { kind, stream }),
    }
}

/// Append a frame header.
pub fn put_head(out: &mut Vec<u8>, len: u32, kind: u8, flags: u8, stream: u32) {
    let mut b = [0; HEADER_LEN];
    Head {
        len,
        kind,
        flags,
        stream,
    }
    .write(&mut b);
    out.extend_from_slice(&b);
}

/// The header of a DATA frame of `len` bytes, for a payload sent apart from
/// it (from a file).
pub fn data_head(len: u32, stream: u32, end_stream: bool) -> [u8; HEADER_LEN] {
    let mut b = [0; HEADER_LEN];
    Head {
        len,
        kind: DATA,
        flags: if end_stream { FLAG_END_STREAM } else { 0 },
        stream,
    }
    .write(&mut b);
    b
}

/// A DATA frame, unpadded. `data` must fit the peer's max frame size.
pub fn put_data(out: &mut Vec<u8>, stream: u32, data: &[u8], end_stream: bool) {
    let len = u32::try_from(data.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&data_head(len, stream, end_stream));
    out.extend_from_slice(data);
}

/// A SETTINGS frame with these (identifier, value) pairs.
pub fn put_settings(out: &mut Vec<u8>, settings: &[(u16, u32)]) {
    let len = u32::try_from(settings.len() * 6).unwrap_or(u32::MAX);
    put_head(out, len, SETTINGS, 0, 0);
    for &(id, value) in settings {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
}

/// The acknowledgement of the peer's SETTINGS (§6.5.3).
pub fn put_settings_ack(out: &mut Vec<u8>) {
    put_head(out, 0, SETTINGS, FLAG_ACK, 0);
}

/// A PING of our own (a drain's, whose ACK says the client has seen the
/// GOAWAY before it).
pub fn put_ping(out: &mut Vec<u8>, data: [u8; 8]) {
    put_head(out, 8, PING, 0, 0);
    out.extend_from_slice(&data);
}

/// The answer to a PING, with its data (§6.7).
pub fn put_ping_ack(out: &mut Vec<u8>, data: [u8; 8]) {
    put_head(out, 8, PING, FLAG_ACK, 0);
    out.extend_from_slice(&data);
}

/// A GOAWAY (§6.8). `debug` should be short: it must fit the peer's max
/// frame size with the 8 bytes before it.
pub fn put_goaway(out: &mut Vec<u8>, last_stream: u32, code: ErrorCode, debug: &[u8]) {
    let len = u32::try_from(8 + debug.len()).unwrap_or(u32::MAX);
    put_head(out, len, GOAWAY, 0, 0);
    out.extend_from_slice(&(last_stream & STREAM_MASK).to_be_bytes());
    out.extend_from_slice(&(code as u32).to_be_bytes());
    out.extend_from_slice(debug);
}

pub fn put_rst_stream(out: &mut Vec<u8>, stream: u32, code: ErrorCode) {
    put_head(out, 4, RST_STREAM, 0, stream);
    out.extend_from_slice(&(code as u32).to_be_bytes());
}

/// A WINDOW_UPDATE; `increment` is 1..=2^31-1 (§6.9: 0 is an error).
pub fn put_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    debug_assert!(
        (1..=MAX_WINDOW).contains(&increment),
        "increment {increment}"
    );
    put_head(out, 4, WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&(increment & STREAM_MASK).to_be_bytes());
}

/// A header block as HEADERS followed by CONTINUATIONs so that no frame
/// exceeds `max_frame_size` (the peer's; §4.2, §6.10). END_STREAM goes on
/// the HEADERS frame (§6.2: it ends the stream after the whole block),
/// END_HEADERS on the last frame. An empty block is one empty HEADERS.
pub fn put_headers(
    out: &mut Vec<u8>,
    stream: u32,
    block: &[u8],
    end_stream: bool,
    max_frame_size: u32,
) {
    // The peer cannot have set less or more (§6.5.2, checked by decode);
    // clamping keeps a zero from looping forever.
    let max = max_frame_size.clamp(DEFAULT_MAX_FRAME_SIZE, MAX_MAX_FRAME_SIZE) as usize;
    let mut chunks = block.chunks(max);
    let first = chunks.next().unwrap_or_default();
    let mut chunks = chunks.peekable();
    let mut flags = if end_stream { FLAG_END_STREAM } else { 0 };
    if chunks.peek().is_none() {
        flags |= FLAG_END_HEADERS;
    }
    // Each chunk is at most `max`, which fits in 24 bits.
    put_head(out, first.len() as u32, HEADERS, flags, stream);
    out.extend_from_slice(first);
    while let Some(chunk) = chunks.next() {
        let flags = if chunks.peek().is_none() {
            FLAG_END_HEADERS
        } else {
            0
        };
        put_head(out, chunk.len() as u32, CONTINUATION, flags, stream);
        out.extend_from_slice(chunk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ErrorCode::*;

    fn head(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Head {
        Head {
            len: payload.len() as u32,
            kind,
            flags,
            stream,
        }
    }

    fn dec(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Result<Frame<'_>, FrameError> {
        decode(&head(kind, flags, stream, payload), payload)
    }

    /// The code of a connection error, failing the test on anything else.
    fn conn_err(r: Result<Frame<'_>, FrameError>) -> ErrorCode {
        match r {
            Err(FrameError::Connection(code, _)) => code,
            other => panic!("want a connection error, got {other:?}"),
        }
    }

    /// The (stream, code) of a stream error, failing on anything else.
    fn stream_err(r: Result<Frame<'_>, FrameError>) -> (u32, ErrorCode) {
        match r {
            Err(FrameError::Stream(stream, code, _)) => (stream, code),
            other => panic!("want a stream error, got {other:?}"),
        }
    }

    /// Split written bytes into frames the way the session reads them.
    fn split(mut buf: &[u8]) -> Vec<(Head, &[u8])> {
        let mut frames = Vec::new();
        while !buf.is_empty() {
            let (h, rest) = buf.split_first_chunk::<HEADER_LEN>().unwrap();
            let h = Head::parse(h);
            let (payload, rest) = rest.split_at(h.len as usize);
            frames.push((h, payload));
            buf = rest;
        }
        frames
    }

    /// The one frame in `buf`, decoded.
    fn one(buf: &[u8]) -> Frame<'_> {
        let frames = split(buf);
        assert_eq!(frames.len(), 1, "{frames:?}");
        let (h, payload) = frames[0];
        check_len(&h, DEFAULT_MAX_FRAME_SIZE).unwrap();
        decode(&h, payload).unwrap()
    }

    fn setting(id: u16, value: u32) -> [u8; 6] {
        let mut b = [0; 6];
        b[..2].copy_from_slice(&id.to_be_bytes());
        b[2..].copy_from_slice(&value.to_be_bytes());
        b
    }

    #[test]
    fn head_parse_and_write() {
        let b = [0x12, 0x34, 0x56, 0x01, 0x25, 0x80, 0x00, 0x00, 0x07];
        let h = Head::parse(&b);
        // The reserved bit is cleared on receipt (§4.1).
        assert_eq!(
            h,
            Head {
                len: 0x12_3456,
                kind: HEADERS,
                flags: 0x25,
                stream: 7
            }
        );
        let mut out = [0; HEADER_LEN];
        h.write(&mut out);
        assert_eq!(out, [0x12, 0x34, 0x56, 0x01, 0x25, 0, 0, 0, 7]);
        // ... and never sent.
        Head {
            stream: 0xffff_ffff,
            ..h
        }
        .write(&mut out);
        assert_eq!(out[5..], [0x7f, 0xff, 0xff, 0xff]);
        assert_eq!(Head::parse(&out).stream, MAX_WINDOW);
    }

    #[test]
    fn error_codes() {
        for (i, code) in ErrorCode::ALL.iter().enumerate() {
            assert_eq!(*code as u32, i as u32);
            assert_eq!(ErrorCode::from_u32(i as u32), Some(*code));
        }
        assert_eq!(ErrorCode::from_u32(14), None);
        assert_eq!(ErrorCode::from_u32(u32::MAX), None);
        assert_eq!(ProtocolError.name(), "PROTOCOL_ERROR");
        assert_eq!(Http11Required.name(), "HTTP_1_1_REQUIRED");
        assert_eq!(EnhanceYourCalm.to_string(), "ENHANCE_YOUR_CALM");
        let e = FrameError::Stream(3, FlowControlError, "why");
        assert_eq!(
            e.to_string(),
            "HTTP/2 stream 3 error FLOW_CONTROL_ERROR: why"
        );
        assert_eq!((e.code(), e.reason()), (FlowControlError, "why"));
        let e = FrameError::Connection(FrameSizeError, "why");
        assert_eq!(
            e.to_string(),
            "HTTP/2 connection error FRAME_SIZE_ERROR: why"
        );
    }

    #[test]
    fn check_len_is_a_connection_error_for_every_type() {
        for kind in [
            DATA,
            HEADERS,
            PRIORITY,
            RST_STREAM,
            SETTINGS,
            PING,
            WINDOW_UPDATE,
            CONTINUATION,
            0xfa,
        ] {
            for stream in [0, 1] {
                let mut h = Head {
                    len: DEFAULT_MAX_FRAME_SIZE,
                    kind,
                    flags: 0,
                    stream,
                };
                assert_eq!(check_len(&h, DEFAULT_MAX_FRAME_SIZE), Ok(()));
                h.len += 1;
                assert!(matches!(
                    check_len(&h, DEFAULT_MAX_FRAME_SIZE),
                    Err(FrameError::Connection(FrameSizeError, _))
                ));
                // Our own larger limit is honoured.
                assert_eq!(check_len(&h, DEFAULT_MAX_FRAME_SIZE + 1), Ok(()));
            }
        }
    }

    #[test]
    fn reserved_stream_bit_ignored() {
        let b = [0, 0, 1, DATA, 0, 0x80, 0, 0, 3];
        let h = Head::parse(&b);
        assert_eq!(h.stream, 3);
        assert!(matches!(
            decode(&h, b"x"),
            Ok(Frame::Data { stream: 3, .. })
        ));
        // Stream 0 with the reserved bit set is still stream 0.
        let h = Head::parse(&[0, 0, 1, DATA, 0, 0x80, 0, 0, 0]);
        assert_eq!(conn_err(decode(&h, b"x")), ProtocolError);
    }

    #[test]
    fn data() {
        assert_eq!(
            dec(DATA, FLAG_END_STREAM, 1, b"abc"),
            Ok(Frame::Data {
                stream: 1,
                end_stream: true,
                data: b"abc",
                flow_len: 3
            })
        );
        // Undefined flags are ignored (§4.1).
        assert_eq!(
            dec(DATA, !(FLAG_END_STREAM | FLAG_PADDED), 1, b"abc"),
            Ok(Frame::Data {
                stream: 1,
                end_stream: false,
                data: b"abc",
                flow_len: 3
            })
        );
        assert_eq!(conn_err(dec(DATA, 0, 0, b"abc")), ProtocolError);
    }

    #[test]
    fn data_padding() {
        // Flow control counts the padding and its length byte (§6.9.1).
        assert_eq!(
            dec(DATA, FLAG_PADDED, 5, b"\x02abcPP"),
            Ok(Frame::Data {
                stream: 5,
                end_stream: false,
                data: b"abc",
                flow_len: 6
            })
        );
        assert_eq!(
            dec(DATA, FLAG_PADDED, 5, b"\x00"),
            Ok(Frame::Data {
                stream: 5,
                end_stream: false,
                data: b"",
                flow_len: 1
            })
        );
        // Padding filling all but the Pad Length byte: empty data.
        assert!(matches!(
            dec(DATA, FLAG_PADDED, 5, b"\x03PPP"),
            Ok(Frame::Data { data: b"", .. })
        ));
        // Padding the length of the payload or more (§6.1).
        assert_eq!(
            conn_err(dec(DATA, FLAG_PADDED, 5, b"\x04PPP")),
            ProtocolError
        );
        assert_eq!(conn_err(dec(DATA, FLAG_PADDED, 5, b"\x01")), ProtocolError);
        assert_eq!(conn_err(dec(DATA, FLAG_PADDED, 5, b"\xff")), ProtocolError);
        // No room for the Pad Length field (§4.2).
        assert_eq!(conn_err(dec(DATA, FLAG_PADDED, 5, b"")), FrameSizeError);
    }

    #[test]
    fn headers() {
        assert_eq!(
            dec(HEADERS, FLAG_END_STREAM | FLAG_END_HEADERS, 1, b"blk"),
            Ok(Frame::Headers {
                stream: 1,
                end_stream: true,
                end_headers: true,
                priority: None,
                block: b"blk"
            })
        );
        assert_eq!(
            dec(HEADERS, 0xd2, 1, b"blk"),
            Ok(Frame::Headers {
                stream: 1,
                end_stream: false,
                end_headers: false,
                priority: None,
                block: b"blk"
            })
        );
        assert_eq!(
            conn_err(dec(HEADERS, FLAG_END_HEADERS, 0, b"blk")),
            ProtocolError
        );
    }

    #[test]
    fn headers_priority_and_padding() {
        let p = Priority {
            exclusive: true,
            depends_on: 3,
            weight: 200,
        };
        assert!(matches!(
            dec(HEADERS, FLAG_PRIORITY, 5, b"\x80\0\0\x03\xc8blk"),
            Ok(Frame::Headers { priority: Some(q), block: b"blk", .. }) if q == p
        ));
        assert!(matches!(
            dec(HEADERS, FLAG_PRIORITY | FLAG_PADDED, 5, b"\x02\x80\0\0\x03\xc8blkPP"),
            Ok(Frame::Headers { priority: Some(q), block: b"blk", .. }) if q == p
        ));
        // All padding after the priority fields: an empty block.
        assert!(matches!(
            dec(
                HEADERS,
                FLAG_PRIORITY | FLAG_PADDED,
                5,
                b"\x02\0\0\0\x03\xc8PP"
            ),
            Ok(Frame::Headers {
                block: b"",
                priority: Some(_),
                ..
            })
        ));
        assert!(matches!(
            dec(HEADERS, FLAG_PADDED, 5, b"\x02blkPP"),
            Ok(Frame::Headers {
                priority: None,
                block: b"blk",
                ..
            })
        ));
        // Padding that exceeds what is left for the block (§6.2).
        assert_eq!(
            conn_err(dec(
                HEADERS,
                FLAG_PRIORITY | FLAG_PADDED,
                5,
                b"\x03\0\0\0\x03\xc8PP"
            )),
            ProtocolError
        );
        assert_eq!(
            conn_err(dec(HEADERS, FLAG_PADDED, 5, b"\x03PP")),
            ProtocolError
        );
        // Too short for the priority fields or the Pad Length (§4.2).
        assert_eq!(
            conn_err(dec(HEADERS, FLAG_PRIORITY, 5, b"\0\0\0\x03")),
            FrameSizeError
        );
        assert_eq!(
            conn_err(dec(
                HEADERS,
                FLAG_PRIORITY | FLAG_PADDED,
                5,
                b"\0\0\0\0\x03"
            )),
            FrameSizeError
        );
        assert_eq!(conn_err(dec(HEADERS, FLAG_PADDED, 5, b"")), FrameSizeError);
    }

    #[test]
    fn headers_depending_on_itself_is_a_stream_error_keeping_its_block() {
        // The exclusive bit is not part of the stream id.
        for payload in [&b"\0\0\0\x05\x10blk"[..], b"\x80\0\0\x05\x10blk"] {
            let h = head(HEADERS, FLAG_PRIORITY | FLAG_END_HEADERS, 5, payload);
            assert_eq!(stream_err(decode(&h, payload)), (5, ProtocolError));
            assert_eq!(headers_block(&h, payload), Some(&b"blk"[..]));
        }
        let payload = b"\x01\0\0\0\x05\x10blkP";
        let h = head(HEADERS, FLAG_PRIORITY | FLAG_PADDED, 5, payload);
        assert_eq!(stream_err(decode(&h, payload)), (5, ProtocolError));
        assert_eq!(headers_block(&h, payload), Some(&b"blk"[..]));
        // Not a HEADERS frame, or a malformed one: no block.
        let h = head(CONTINUATION, 0, 5, b"blk");
        assert_eq!(headers_block(&h, b"blk"), None);
        let h = head(HEADERS, FLAG_PRIORITY, 5, b"\0");
        assert_eq!(headers_block(&h, b"\0"), None);
    }

    #[test]
    fn priority() {
        assert_eq!(
            dec(PRIORITY, 0xff, 3, b"\0\0\0\x01\x0f"),
            Ok(Frame::Priority {
                stream: 3,
                priority: Priority {
                    exclusive: false,
                    depends_on: 1,
                    weight: 15
                }
            })
        );
        assert_eq!(
            conn_err(dec(PRIORITY, 0, 0, b"\0\0\0\x01\x0f")),
            ProtocolError
        );
        // §6.3: a wrong length is a stream error.
        assert_eq!(
            stream_err(dec(PRIORITY, 0, 3, b"\0\0\0\x01")),
            (3, FrameSizeError)
        );
        assert_eq!(
            stream_err(dec(PRIORITY, 0, 3, b"\0\0\0\x01\x0f\0")),
            (3, FrameSizeError)
        );
        assert_eq!(
            stream_err(dec(PRIORITY, 0, 3, b"\x80\0\0\x03\x0f")),
            (3, ProtocolError)
        );
    }

    #[test]
    fn rst_stream() {
        assert_eq!(
            dec(RST_STREAM, 0xff, 3, b"\0\0\0\x08"),
            Ok(Frame::RstStream { stream: 3, code: 8 })
        );
        // Unknown codes are kept (§7).
        assert_eq!(
            dec(RST_STREAM, 0, 3, b"\xde\xad\xbe\xef"),
            Ok(Frame::RstStream {
                stream: 3,
                code: 0xdead_beef
            })
        );
        assert_eq!(
            conn_err(dec(RST_STREAM, 0, 0, b"\0\0\0\x08")),
            ProtocolError
        );
        assert_eq!(conn_err(dec(RST_STREAM, 0, 3, b"\0\0\x08")), FrameSizeError);
        assert_eq!(
            conn_err(dec(RST_STREAM, 0, 3, b"\0\0\0\0\x08")),
            FrameSizeError
        );
    }

    #[test]
    fn settings() {
        let mut p = Vec::new();
        for (id, v) in [
            (SETTINGS_HEADER_TABLE_SIZE, 4096),
            (SETTINGS_ENABLE_PUSH, 0),
            (SETTINGS_MAX_CONCURRENT_STREAMS, 100),
            (SETTINGS_INITIAL_WINDOW_SIZE, MAX_WINDOW),
            (SETTINGS_MAX_FRAME_SIZE, DEFAULT_MAX_FRAME_SIZE),
            (SETTINGS_MAX_FRAME_SIZE, MAX_MAX_FRAME_SIZE),
            (SETTINGS_MAX_HEADER_LIST_SIZE, 8192),
            (SETTINGS_ENABLE_CONNECT_PROTOCOL, 1),
            (SETTINGS_NO_RFC7540_PRIORITIES, 1),
            (SETTINGS_ENABLE_PUSH, 1),
            (0x7777, 9),
        ] {
            p.extend_from_slice(&setting(id, v));
        }
        let Ok(Frame::Settings { ack: false, params }) = dec(SETTINGS, 0, 0, &p) else {
            panic!()
        };
        assert_eq!(params.size_hint(), (0, Some(11)));
        assert_eq!(
            params.iter().collect::<Vec<_>>(),
            [
                Setting::HeaderTableSize(4096),
                Setting::EnablePush(false),
                Setting::MaxConcurrentStreams(100),
                Setting::InitialWindowSize(MAX_WINDOW),
                Setting::MaxFrameSize(16_384),
                Setting::MaxFrameSize(16_777_215),
                Setting::MaxHeaderListSize(8192),
                Setting::EnableConnectProtocol(true),
                Setting::NoRfc7540Priorities(true),
                Setting::EnablePush(true),
                Setting::Unknown(0x7777, 9),
            ]
        );
        assert_eq!(params.as_bytes(), &p[..]);
        // Empty, and the acknowledgement (undefined flags ignored).
        assert!(matches!(
            dec(SETTINGS, 0, 0, b""),
            Ok(Frame::Settings { ack: false, params }) if params.iter().count() == 0
        ));
        assert!(matches!(
            dec(SETTINGS, 0xff, 0, b""),
            Ok(Frame::Settings { ack: true, params }) if params.iter().count() == 0
        ));
    }

    #[test]
    fn settings_frame_errors() {
        let one = setting(SETTINGS_MAX_CONCURRENT_STREAMS, 1);
        assert_eq!(conn_err(dec(SETTINGS, 0, 1, &one)), ProtocolError);
        assert_eq!(conn_err(dec(SETTINGS, FLAG_ACK, 0, &one)), FrameSizeError);
        assert_eq!(conn_err(dec(SETTINGS, 0, 0, &one[..5])), FrameSizeError);
        assert_eq!(
            conn_err(dec(SETTINGS, 0, 0, &[one, one].concat()[..11])),
            FrameSizeError
        );
    }

    #[test]
    fn settings_value_errors() {
        for (id, v, code) in [
            (SETTINGS_ENABLE_PUSH, 2, ProtocolError),
            (SETTINGS_ENABLE_PUSH, u32::MAX, ProtocolError),
            (
                SETTINGS_INITIAL_WINDOW_SIZE,
                MAX_WINDOW + 1,
                FlowControlError,
            ),
            (SETTINGS_INITIAL_WINDOW_SIZE, u32::MAX, FlowControlError),
            (SETTINGS_MAX_FRAME_SIZE, 0, ProtocolError),
            (
                SETTINGS_MAX_FRAME_SIZE,
                DEFAULT_MAX_FRAME_SIZE - 1,
                ProtocolError,
            ),
            (
                SETTINGS_MAX_FRAME_SIZE,
                MAX_MAX_FRAME_SIZE + 1,
                ProtocolError,
            ),
            (SETTINGS_NO_RFC7540_PRIORITIES, 2, ProtocolError),
            (SETTINGS_ENABLE_CONNECT_PROTOCOL, 2, ProtocolError),
        ] {
            let bad = setting(id, v);
            assert_eq!(conn_err(dec(SETTINGS, 0, 0, &bad)), code, "{id} = {v}");
            // A bad entry after good ones refuses the whole frame.
            let p = [setting(SETTINGS_HEADER_TABLE_SIZE, 0), bad].concat();
            assert_eq!(conn_err(dec(SETTINGS, 0, 0, &p)), code, "{id} = {v}");
        }
    }

    #[test]
    fn push_promise_from_a_client() {
        for stream in [0, 1, 2] {
            let p = b"\0\0\0\x02blk";
            assert_eq!(
                conn_err(dec(PUSH_PROMISE, FLAG_END_HEADERS, stream, p)),
                ProtocolError
            );
        }
    }

    #[test]
    fn ping() {
        assert_eq!(
            dec(PING, 0, 0, b"12345678"),
            Ok(Frame::Ping {
                ack: false,
                data: *b"12345678"
            })
        );
        assert_eq!(
            dec(PING, 0xff, 0, b"12345678"),
            Ok(Frame::Ping {
                ack: true,
                data: *b"12345678"
            })
        );
        assert_eq!(conn_err(dec(PING, 0, 1, b"12345678")), ProtocolError);
        assert_eq!(conn_err(dec(PING, 0, 0, b"1234567")), FrameSizeError);
        assert_eq!(conn_err(dec(PING, 0, 0, b"123456789")), FrameSizeError);
    }

    #[test]
    fn goaway() {
        assert_eq!(
            dec(GOAWAY, 0xff, 0, b"\x80\0\0\x07\0\0\0\x0bcalm"),
            Ok(Frame::GoAway {
                last_stream: 7,
                code: 11,
                debug: b"calm"
            })
        );
        assert_eq!(
            dec(GOAWAY, 0, 0, b"\0\0\0\0\xff\xff\xff\xff"),
            Ok(Frame::GoAway {
                last_stream: 0,
                code: u32::MAX,
                debug: b""
            })
        );
        assert_eq!(
            conn_err(dec(GOAWAY, 0, 1, b"\0\0\0\0\0\0\0\0")),
            ProtocolError
        );
        assert_eq!(
            conn_err(dec(GOAWAY, 0, 0, b"\0\0\0\0\0\0\0")),
            FrameSizeError
        );
    }

    #[test]
    fn window_update() {
        assert_eq!(
            dec(WINDOW_UPDATE, 0xff, 0, b"\0\0\x01\0"),
            Ok(Frame::WindowUpdate {
                stream: 0,
                increment: 256
            })
        );
        // The reserved bit is ignored (§6.9).
        assert_eq!(
            dec(WINDOW_UPDATE, 0, 9, b"\xff\xff\xff\xff"),
            Ok(Frame::WindowUpdate {
                stream: 9,
                increment: MAX_WINDOW
            })
        );
        assert_eq!(
            stream_err(dec(WINDOW_UPDATE, 0, 9, b"\0\0\0\0")),
            (9, ProtocolError)
        );
        assert_eq!(
            stream_err(dec(WINDOW_UPDATE, 0, 9, b"\x80\0\0\0")),
            (9, ProtocolError)
        );
        assert_eq!(
            conn_err(dec(WINDOW_UPDATE, 0, 0, b"\0\0\0\0")),
            ProtocolError
        );
        for stream in [0, 9] {
            assert_eq!(
                conn_err(dec(WINDOW_UPDATE, 0, stream, b"\0\0\x01")),
                FrameSizeError
            );
            assert_eq!(
                conn_err(dec(WINDOW_UPDATE, 0, stream, b"\0\0\0\x01\0")),
                FrameSizeError
            );
        }
    }

    #[test]
    fn continuation() {
        // PADDED is not defined for CONTINUATION: its byte is block.
        assert_eq!(
            dec(CONTINUATION, FLAG_END_HEADERS | FLAG_PADDED, 3, b"\x01blk"),
            Ok(Frame::Continuation {
                stream: 3,
                end_headers: true,
                block: b"\x01blk"
            })
        );
        assert_eq!(
            dec(CONTINUATION, 0, 3, b""),
            Ok(Frame::Continuation {
                stream: 3,
                end_headers: false,
                block: b""
            })
        );
        assert_eq!(
            conn_err(dec(CONTINUATION, FLAG_END_HEADERS, 0, b"blk")),
            ProtocolError
        );
    }

    #[test]
    fn priority_update() {
        assert_eq!(
            dec(PRIORITY_UPDATE, 0xff, 0, b"\x80\0\0\x05u=1, i"),
            Ok(Frame::PriorityUpdate {
                prioritized: 5,
                field: b"u=1, i"
            })
        );
        assert_eq!(
            dec(PRIORITY_UPDATE, 0, 0, b"\0\0\0\x05"),
            Ok(Frame::PriorityUpdate {
                prioritized: 5,
                field: b""
            })
        );
        assert_eq!(
            conn_err(dec(PRIORITY_UPDATE, 0, 5, b"\0\0\0\x05u=1")),
            ProtocolError
        );
        assert_eq!(
            conn_err(dec(PRIORITY_UPDATE, 0, 0, b"\0\0\0\0u=1")),
            ProtocolError
        );
        assert_eq!(
            conn_err(dec(PRIORITY_UPDATE, 0, 0, b"\x80\0\0\0u=1")),
            ProtocolError
        );
        assert_eq!(
            conn_err(dec(PRIORITY_UPDATE, 0, 0, b"\0\0\x05")),
            FrameSizeError
        );
    }

    #[test]
    fn unknown_types_are_ignored() {
        for kind in [0x0a, 0x0f, 0x11, 0xff] {
            for stream in [0, 1] {
                assert_eq!(
                    dec(kind, 0xff, stream, b"anything"),
                    Ok(Frame::Unknown { kind, stream })
                );
            }
        }
    }

    #[test]
    fn writers_round_trip() {
        let mut out = Vec::new();
        put_settings(
            &mut out,
            &[
                (SETTINGS_MAX_CONCURRENT_STREAMS, 128),
                (SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20),
                (SETTINGS_NO_RFC7540_PRIORITIES, 1),
            ],
        );
        let Frame::Settings { ack: false, params } = one(&out) else {
            panic!()
        };
        assert_eq!(
            params.collect::<Vec<_>>(),
            [
                Setting::MaxConcurrentStreams(128),
                Setting::InitialWindowSize(1 << 20),
                Setting::NoRfc7540Priorities(true)
            ]
        );

        out.clear();
        put_settings_ack(&mut out);
        assert!(
            matches!(one(&out), Frame::Settings { ack: true, params } if params.iter().count() == 0)
        );

        out.clear();
        put_ping_ack(&mut out, *b"pingdata");
        assert_eq!(
            one(&out),
            Frame::Ping {
                ack: true,
                data: *b"pingdata"
            }
        );

        out.clear();
        put_goaway(&mut out, 41, EnhanceYourCalm, b"too many resets");
        assert_eq!(
            one(&out),
            Frame::GoAway {
                last_stream: 41,
                code: EnhanceYourCalm as u32,
                debug: b"too many resets"
            }
        );

        out.clear();
        put_rst_stream(&mut out, 7, RefusedStream);
        assert_eq!(
            one(&out),
            Frame::RstStream {
                stream: 7,
                code: RefusedStream as u32
            }
        );

        for (stream, increment) in [(0, 1), (3, MAX_WINDOW)] {
            out.clear();
            put_window_update(&mut out, stream, increment);
            assert_eq!(one(&out), Frame::WindowUpdate { stream, increment });
        }

        out.clear();
        put_data(&mut out, 9, b"body", true);
        assert_eq!(
            one(&out),
            Frame::Data {
                stream: 9,
                end_stream: true,
                data: b"body",
                flow_len: 4
            }
        );
        let h = Head::parse(&data_head(16_384, 11, false));
        assert_eq!(
            h,
            Head {
                len: 16_384,
                kind: DATA,
                flags: 0,
                stream: 11
            }
        );

        out.clear();
        put_head(&mut out, 3, 0xee, 0x5a, 13);
        out.extend_from_slice(b"xyz");
        assert_eq!(
            one(&out),
            Frame::Unknown {
                kind: 0xee,
                stream: 13
            }
        );
    }

    /// A written frame: (kind, end_stream, end_headers, payload length).
    type Written = (u8, bool, bool, usize);

    /// put_headers' frames, each checked against `max` and decoded, as
    /// (kind, end_stream, end_headers, len), and the block reassembled.
    fn headers_frames(block: &[u8], end_stream: bool, max: u32) -> (Vec<Written>, Vec<u8>) {
        let mut out = Vec::new();
        put_headers(&mut out, 5, block, end_stream, max);
        let mut frames = Vec::new();
        let mut whole = Vec::new();
        for (h, payload) in split(&out) {
            check_len(&h, max.max(DEFAULT_MAX_FRAME_SIZE)).unwrap();
            match decode(&h, payload).unwrap() {
                Frame::Headers {
                    stream: 5,
                    end_stream,
                    end_headers,
                    priority: None,
                    block,
                } => {
                    frames.push((HEADERS, end_stream, end_headers, block.len()));
                    whole.extend_from_slice(block);
                }
                Frame::Continuation {
                    stream: 5,
                    end_headers,
                    block,
                } => {
                    frames.push((CONTINUATION, false, end_headers, block.len()));
                    whole.extend_from_slice(block);
                }
                f => panic!("{f:?}"),
            }
        }
        (frames, whole)
    }

    #[test]
    fn put_headers_splits_at_the_max_frame_size() {
        for max in [DEFAULT_MAX_FRAME_SIZE, 20_000] {
            let m = max as usize;
            let block: Vec<u8> = (0..3 * m).map(|i| (i % 251) as u8).collect();
            for end_stream in [false, true] {
                let (frames, whole) = headers_frames(&block[..m], end_stream, max);
                assert_eq!(frames, [(HEADERS, end_stream, true, m)]);
                assert_eq!(whole, block[..m]);

                let (frames, whole) = headers_frames(&block[..m + 1], end_stream, max);
                assert_eq!(
                    frames,
                    [
                        (HEADERS, end_stream, false, m),
                        (CONTINUATION, false, true, 1)
                    ]
                );
                assert_eq!(whole, block[..m + 1]);

                let (frames, whole) = headers_frames(&block, end_stream, max);
                assert_eq!(
                    frames,
                    [
                        (HEADERS, end_stream, false, m),
                        (CONTINUATION, false, false, m),
                        (CONTINUATION, false, true, m)
                    ]
                );
                assert_eq!(whole, block);
            }
        }
        let (frames, _) = headers_frames(b"", true, DEFAULT_MAX_FRAME_SIZE);
        assert_eq!(frames, [(HEADERS, true, true, 0)]);
        // A nonsensical limit is not a zero-length loop.
        let (frames, _) = headers_frames(b"abc", false, 0);
        assert_eq!(frames, [(HEADERS, false, true, 3)]);
    }
}
