//! Session-ticket decryption (`tls::tickets::TicketKeys`), under two key
//! files of fixed contents: an 80-byte key (which encrypts) and a 48-byte
//! one. On arbitrary input: no panic, and nothing is accepted (a ticket
//! needs an HMAC-SHA256 tag under a key libFuzzer does not have, so any
//! input that decrypts is a forgery the MAC check let through). The input
//! is also sealed as a ticket: it opens to the input again, and with any
//! one byte changed (which one follows from the input) it does not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rustls::server::ProducesTickets;
use std::sync::OnceLock;
use tlsfront::tls::tickets::TicketKeys;

/// The key names, so seeds can reach the MAC check (fuzz/seeds/make.py
/// writes them at the start of inputs).
const NAME_80: &[u8; 16] = b"tlsfront-fuzz-80";
const NAME_48: &[u8; 16] = b"tlsfront-fuzz-48";

fn keys() -> &'static TicketKeys {
    static KEYS: OnceLock<TicketKeys> = OnceLock::new();
    KEYS.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("tlsfront-fuzz-tk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("80.key"), dir.join("48.key"));
        std::fs::write(&a, [&NAME_80[..], &[0x5a; 64]].concat()).unwrap();
        std::fs::write(&b, [&NAME_48[..], &[0xa5; 32]].concat()).unwrap();
        let seed = tlsfront::tls::tickets::Seed::random().unwrap();
        let keys = TicketKeys::from_files(&[a, b], seed).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        keys
    })
}

fuzz_target!(|data: &[u8]| {
    let keys = keys();
    assert_eq!(keys.decrypt(data), None, "a forged ticket was accepted");

    let ticket = keys.encrypt(data).expect("sealing never fails");
    assert_eq!(&ticket[..16], NAME_80, "the first key encrypts");
    assert_eq!(keys.decrypt(&ticket).as_deref(), Some(data));
    let mut changed = ticket.clone();
    let at = data.iter().fold(data.len(), |h, &b| {
        h.wrapping_mul(31).wrapping_add(b as usize)
    });
    changed[at % ticket.len()] ^= 1;
    assert_eq!(
        keys.decrypt(&changed),
        None,
        "a changed ticket was accepted"
    );
});
