//! Opening a sealed fleet value (`fleet::seal::FleetKeys::open`) under two
//! key files of fixed contents: A, which seals, and B, which only opens. On
//! arbitrary input: no panic, and nothing opens (a value needs an AES-GCM
//! tag under a key libFuzzer does not have, so any input that opens is a
//! forgery). The error follows from the header alone: not sealed (no
//! "TFS1" or too short), an unknown key id (the input's own), or failed
//! authentication under A's or B's id. The input is also sealed, with
//! itself as the etcd key: it opens to itself, names A's id, and does not
//! open under another etcd key or with any one byte changed (which one
//! follows from the input).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use tlsfront::fleet::seal::{sealed_key_id, FleetKeys, KeyId, OpenError, OVERHEAD};

/// The key files' bytes; fuzz/seeds/make.py derives their key ids the same
/// way to put them in seeds, so inputs reach the tag check.
const KEY_A: [u8; 32] = [0x5a; 32];
const KEY_B: [u8; 32] = [0xa5; 32];

/// The etcd key the arbitrary inputs are opened under.
const AAD: &[u8] = b"/tlsfront/certs/fuzz.test/key";

fn keys() -> &'static FleetKeys {
    static KEYS: OnceLock<FleetKeys> = OnceLock::new();
    KEYS.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("tlsfront-fuzz-fleet-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a.key"), dir.join("b.key"));
        std::fs::write(&a, KEY_A).unwrap();
        std::fs::write(&b, KEY_B).unwrap();
        let keys = FleetKeys::read(&[a, b]).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        keys
    })
}

fuzz_target!(|data: &[u8]| {
    let keys = keys();
    let known: Vec<KeyId> = keys.key_ids().map(|(id, _)| id).collect();

    let got = keys.open(AAD, data);
    assert!(got.is_err(), "a forged value opened");
    let want = match sealed_key_id(data) {
        Err(e) => {
            assert!(data.len() < OVERHEAD || !data.starts_with(b"TFS1"));
            e
        }
        Ok(id) => {
            assert_eq!(id.as_bytes()[..], data[4..12]);
            if known.contains(&id) {
                OpenError::Authentication { id }
            } else {
                OpenError::UnknownKey { id }
            }
        }
    };
    assert_eq!(got.err(), Some(want));

    let sealed = keys.seal(data, data).expect("sealing never fails");
    assert_eq!(sealed.len(), data.len() + OVERHEAD);
    assert_eq!(sealed_key_id(&sealed), Ok(keys.sealing_key_id()));
    assert_eq!(keys.sealing_key_id(), known[0], "the first key seals");
    assert_eq!(
        keys.open(data, &sealed).as_deref().map(|v| &v[..]),
        Ok(data)
    );
    let mut other_key = data.to_vec();
    other_key.push(b'/');
    assert!(
        keys.open(&other_key, &sealed).is_err(),
        "opened under another etcd key"
    );
    let mut changed = sealed.clone();
    let at = data.iter().fold(data.len(), |h, &b| {
        h.wrapping_mul(31).wrapping_add(b as usize)
    });
    changed[at % sealed.len()] ^= 1;
    assert!(keys.open(data, &changed).is_err(), "a changed value opened");
});
