//! The DNS message reader of DNS-01 (`acme::dns01`, through its
//! `fuzz` hooks): what the zone's server sends back to the SOA and TXT
//! queries and to the signed UPDATE, checked as `update` checks it with a
//! TSIG key of fixed contents ("k.test", hmac-sha256).
//!
//! On arbitrary bytes: no panic; a message that reads is decided by its own
//! bytes alone (every prefix cut from it is refused, and one byte more is
//! "bytes after the last record"); names are lowercase; a TXT RDATA's
//! strings fill it exactly; and nothing verifies under the key (its secret
//! is not in the input, so an answer that checks is a forgery the MAC
//! check let through).
//!
//! Round trip: a message that reads is signed with the key as a server
//! signs its answer; the signed one reads back as the same records with a
//! TSIG record at its end (or, when it already ended with one, is refused
//! because that one is no longer last), verifies at its time and not 301 s
//! later, and with any one bit after the ID changed (which one follows
//! from the input) it does not verify.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use tlsfront::acme::dns01::fuzz::{parse, sign_answer, txt_strings, verify, Message, Tsig};
use tlsfront::acme::dns01::{TsigKey, WireError};

const TYPE_TXT: u16 = 16;

/// The seeds are signed with the unit tests' key, of this name and
/// algorithm and another secret, so they reach the MAC check.
fn key() -> &'static TsigKey {
    static KEY: OnceLock<TsigKey> = OnceLock::new();
    KEY.get_or_init(|| {
        TsigKey::parse(
            "key \"k.test\" { algorithm hmac-sha256; secret \"dGxzZnJvbnQtZnV6ei1kbnMtbWVzc2FnZQ==\"; };",
        )
        .unwrap()
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(message) = parse(data) else {
        return;
    };
    let hash = data.iter().fold(data.len(), |h, &b| {
        h.wrapping_mul(31).wrapping_add(b as usize)
    });

    // Decided by its own bytes: no prefix reads, nor does one byte more.
    for cut in [0, data.len() / 2, data.len() - 1, hash % data.len()] {
        assert!(parse(&data[..cut]).is_err(), "a prefix of {cut} bytes read");
    }
    let mut longer = data.to_vec();
    longer.push(0);
    assert_eq!(parse(&longer).unwrap_err(), WireError::TrailingBytes);

    for (name, rtype, _, rdata) in &message.records {
        assert_eq!(*name, name.to_ascii_lowercase());
        if *rtype == TYPE_TXT {
            let strings = txt_strings(rdata);
            if !strings.is_empty() {
                let filled: usize = strings.iter().map(|s| s.len() + 1).sum();
                assert_eq!(filled, rdata.len(), "TXT strings do not fill the RDATA");
            }
        }
    }
    if let Some(t) = &message.tsig {
        assert!(
            t.offset >= 12 && t.offset < data.len(),
            "TSIG at {}",
            t.offset
        );
    }
    let time = message.tsig.as_ref().map_or(0, |t| t.time);
    assert!(
        verify(data, key(), time).is_err(),
        "an answer not signed with the key verified"
    );

    // Signed as the server signs its answer.
    let ar = u16::from_be_bytes([data[10], data[11]]);
    if ar == u16::MAX {
        return;
    }
    let now = (hash as u64) & 0xffff_ffff_ffff;
    let signed = sign_answer(data, key(), now).expect("a message that reads has a header");
    if message.tsig.is_some() {
        assert_eq!(parse(&signed).unwrap_err(), WireError::TsigNotLast);
        return;
    }
    let read = parse(&signed).expect("a signed message reads");
    let want = Message {
        tsig: Some(Tsig {
            offset: data.len(),
            key_name: key().name.clone(),
            time: now,
            original_id: message.id,
        }),
        ..message
    };
    assert_eq!(read, want);
    assert_eq!(verify(&signed, key(), now), Ok(()));
    assert_eq!(
        verify(&signed, key(), now + 301),
        Err(WireError::TimeOutsideFudge)
    );
    // Any bit of the signed part but the ID (which TSIG leaves out: the
    // original ID is in the record).
    if data.len() > 2 {
        let at = 2 + hash % (data.len() - 2);
        let mut changed = signed.clone();
        changed[at] ^= 1 << (hash / 7 % 8);
        if let Ok(m) = parse(&changed) {
            // Read with the TSIG record where it was, the MAC covers one
            // bit more or less: it must not check.
            if m.tsig.as_ref().is_some_and(|t| t.offset == data.len()) {
                assert!(
                    verify(&changed, key(), now).is_err(),
                    "a signed answer with bit {} of byte {at} changed verified",
                    hash / 7 % 8
                );
            }
        }
    }
});
