//! The ClientHello reader (`tls::hello`, reached through the public
//! `ServerConfigs::for_client_hello`, which the accept path calls with the
//! records the hello came in: it joins them). On arbitrary records: no
//! panic; a server name is 1..=253 printable ASCII bytes, lower-cased, that
//! the handshake records' payloads, joined, really hold; a resumption offer
//! picks the configuration that sends at most one ticket and is only seen
//! where those payloads hold a pre_shared_key extension type. Differential: where rustls itself accepts a ClientHello that fits
//! in this one record and finds a server name, the reader finds the same
//! name (the PROXY v2 authority TLV and logs carry it).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use tlsfront::tls::{server_config, ServerConfigs, TlsOptions};

fn configs() -> &'static ServerConfigs {
    static CONFIGS: OnceLock<ServerConfigs> = OnceLock::new();
    CONFIGS.get_or_init(|| {
        let (cert, key) = tlsfront::config::cert::self_signed().unwrap();
        let dir = std::env::temp_dir().join(format!("tlsfront-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&c, cert).unwrap();
        std::fs::write(&k, key).unwrap();
        let id = tlsfront::config::cert::load(Some(&c), Some(&k)).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let tlsfront::config::cert::Key::Der(key) = id.key else {
            unreachable!("no parent process here")
        };
        server_config(id.chain, key, &TlsOptions::default()).unwrap()
    })
}

/// The whole handshake message is inside the first record.
fn fits_one_record(r: &[u8]) -> bool {
    if r.len() < 9 || r[0] != 22 {
        return false;
    }
    let rec = u16::from_be_bytes([r[3], r[4]]) as usize;
    let msg = u32::from_be_bytes([0, r[6], r[7], r[8]]) as usize;
    r.len() >= 5 + rec && 4 + msg <= rec
}

/// The payloads of the handshake records at the front, back to back (what
/// a ClientHello split across records is made of), joined independently of
/// the reader under test.
fn joined(mut r: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while r.len() >= 5 && r[0] == 22 {
        let n = u16::from_be_bytes([r[3], r[4]]) as usize;
        let end = (5 + n).min(r.len());
        out.extend_from_slice(&r[5..end]);
        r = &r[end..];
    }
    out
}

fuzz_target!(|record: &[u8]| {
    let payloads = joined(record);
    let (cfg, hello) = configs().for_client_hello(record);
    if let Some(name) = &hello.sni {
        assert!(!name.is_empty() && name.len() <= 253);
        assert!(name
            .bytes()
            .all(|b| b.is_ascii_graphic() && !b.is_ascii_uppercase()));
        let lower = payloads.to_ascii_lowercase();
        assert!(lower.windows(name.len()).any(|w| w == name.as_bytes()));
    }
    if hello.offers_psk {
        assert!(cfg.send_tls13_tickets <= 1);
        assert!(payloads.windows(2).any(|w| w == [0, 41]));
    } else {
        assert_eq!(cfg.send_tls13_tickets, TlsOptions::default().tls13_tickets);
    }

    if fits_one_record(record) {
        let mut acceptor = rustls::server::Acceptor::default();
        let mut rd = record;
        if acceptor.read_tls(&mut rd).is_ok() {
            if let Ok(Some(accepted)) = acceptor.accept() {
                let ch = accepted.client_hello();
                if let Some(name) = ch.server_name() {
                    assert_eq!(hello.sni.as_deref(), Some(name), "rustls read another name");
                }
            }
        }
    }
});
