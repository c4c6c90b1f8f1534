//! The HTTP/2 frame layer (`http::h2::frame`): the input is read as the
//! session reads a connection after the preface — a 9-byte header,
//! `check_len` against the default SETTINGS_MAX_FRAME_SIZE, then `decode`
//! of that many payload bytes — until it runs out or a connection error.
//!
//! No panic; a frame refused by `check_len` is one longer than the limit;
//! every slice a decoded frame borrows lies within its own payload; DATA's
//! flow-control length is the whole payload; each type is accepted only on
//! the stream kind RFC 9113 §6 allows (zero or non-zero); a SETTINGS view
//! yields one checked setting per 6-byte entry; a stream error names the
//! frame's own (non-zero) stream, and a HEADERS frame refused by one still
//! yields its field block; the header writes back to the same bytes (its
//! reserved bit cleared).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tlsfront::http::h2::frame::{
    check_len, decode, headers_block, ErrorCode, Frame, FrameError, Head, Setting,
    DEFAULT_MAX_FRAME_SIZE, HEADERS, HEADER_LEN,
};

/// `sub` borrows from `payload` (an empty `sub` anywhere within it or at
/// its end).
fn within(sub: &[u8], payload: &[u8]) -> bool {
    let p = payload.as_ptr_range();
    let s = sub.as_ptr_range();
    p.start <= s.start && s.end <= p.end
}

fn check(head: &Head, payload: &[u8]) -> Result<(), FrameError> {
    let frame = match decode(head, payload) {
        Ok(f) => f,
        Err(e) => {
            if let FrameError::Stream(stream, _, _) = e {
                assert_eq!(stream, head.stream, "{e}");
                assert_ne!(stream, 0, "{e}");
                if head.kind == HEADERS {
                    let block = headers_block(head, payload).expect("HEADERS stream error");
                    assert!(within(block, payload));
                }
            }
            return Err(e);
        }
    };
    let on_stream = head.stream != 0;
    match frame {
        Frame::Data {
            stream,
            data,
            flow_len,
            ..
        } => {
            assert!(on_stream && stream == head.stream);
            assert!(within(data, payload));
            assert_eq!(flow_len as usize, payload.len());
        }
        Frame::Headers { stream, block, .. } | Frame::Continuation { stream, block, .. } => {
            assert!(on_stream && stream == head.stream);
            assert!(within(block, payload));
        }
        Frame::Priority { stream, priority } => {
            assert!(on_stream && stream == head.stream);
            assert_ne!(priority.depends_on, stream);
            assert!(priority.depends_on < 1 << 31);
        }
        Frame::RstStream { stream, .. } => assert!(on_stream && stream == head.stream),
        Frame::Settings { ack, params } => {
            assert!(!on_stream);
            assert!(within(params.as_bytes(), payload));
            assert!(!ack || payload.is_empty());
            assert_eq!(payload.len() % 6, 0);
            let n = params
                .inspect(|s| match *s {
                    Setting::InitialWindowSize(v) => assert!(v < 1 << 31),
                    Setting::MaxFrameSize(v) => assert!((16_384..1 << 24).contains(&v)),
                    _ => {}
                })
                .count();
            assert_eq!(n, payload.len() / 6);
        }
        Frame::Ping { data, .. } => {
            assert!(!on_stream);
            assert_eq!(&data[..], payload);
        }
        Frame::GoAway {
            last_stream, debug, ..
        } => {
            assert!(!on_stream && last_stream < 1 << 31);
            assert!(within(debug, payload));
            assert_eq!(debug.len() + 8, payload.len());
        }
        Frame::WindowUpdate { stream, increment } => {
            assert_eq!(stream, head.stream);
            assert!(increment > 0 && increment < 1 << 31);
        }
        Frame::PriorityUpdate { prioritized, field } => {
            assert!(!on_stream && prioritized != 0 && prioritized < 1 << 31);
            assert!(within(field, payload));
        }
        Frame::Unknown { kind, stream } => {
            assert_eq!((kind, stream), (head.kind, head.stream));
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    while let Some((raw, after)) = rest.split_first_chunk::<HEADER_LEN>() {
        let head = Head::parse(raw);
        let mut again = [0; HEADER_LEN];
        head.write(&mut again);
        let mut want = *raw;
        want[5] &= 0x7f;
        assert_eq!(again, want);

        if let Err(e) = check_len(&head, DEFAULT_MAX_FRAME_SIZE) {
            assert!(head.len > DEFAULT_MAX_FRAME_SIZE);
            assert_eq!(
                e,
                FrameError::Connection(ErrorCode::FrameSizeError, e.reason())
            );
            return;
        }
        let Some((payload, after)) = after.split_at_checked(head.len as usize) else {
            return; // the rest of the frame has not arrived
        };
        if let Err(FrameError::Connection(..)) = check(&head, payload) {
            return; // GOAWAY: nothing after it is read
        }
        rest = after;
    }
});
