//! kTLS control records (`ktls::stream::decode_control`): what a peer's
//! non-application record, handed up by the kernel after the handshake,
//! asks for. The first byte picks the version and the record type, the rest
//! is the record. Beyond not panicking: a KeyUpdate is decoded only from a
//! TLS 1.3 handshake record holding exactly that one 5-byte message with a
//! request of 0 or 1; renegotiation only under TLS 1.2; an alert record
//! decodes only when it is exactly two bytes; a refusal's alert is one of
//! the three the decoder may send.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rustls::AlertDescription;
use tlsfront::ktls::stream::{decode_control, Control};
use tlsfront::ktls::Version;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, msg)) = data.split_first() else {
        return;
    };
    let version = if pick & 0x80 == 0 {
        Version::Tls13
    } else {
        Version::Tls12
    };
    // Mostly the three types that mean something, sometimes any.
    let record_type = match pick & 0x7f {
        0..=39 => 21,
        40..=79 => 22,
        80..=89 => 20,
        other => other,
    };
    match decode_control(version, record_type, msg) {
        Ok(Control::KeyUpdate { update_requested }) => {
            assert_eq!(version, Version::Tls13);
            assert_eq!(record_type, 22);
            assert_eq!(msg, [24, 0, 0, 1, update_requested as u8]);
        }
        Ok(Control::Renegotiation) => {
            assert_eq!(version, Version::Tls12);
            assert_eq!(record_type, 22);
            assert!(msg.len() >= 4 && msg[0] == 1);
        }
        Ok(Control::Closed | Control::Ignore | Control::PeerAlert(_)) => {
            if record_type == 21 {
                assert_eq!(msg.len(), 2);
            } else {
                assert_eq!(record_type, 22);
            }
        }
        Err(f) => assert!(matches!(
            f.alert,
            AlertDescription::DecodeError
                | AlertDescription::UnexpectedMessage
                | AlertDescription::IllegalParameter
        )),
    }
});
