//! The TSIG key file of DNS-01 (`acme::dns01::TsigKey::parse`): bind's
//! `key "NAME" { algorithm …; secret "…"; };` clause, as `tsig-keygen`
//! writes it and as an operator edits it, on arbitrary UTF-8 text.
//!
//! No panic; comments and blank lines around the clause change nothing
//! (the same key, or the same error). A key that is read has a lowercase
//! name without a final dot that fits a DNS message; written back into a
//! clause with another secret it reads as that name again; and a message
//! signed with it (through the `fuzz` hooks, as a server signs an answer)
//! verifies with it, and not with the other secret.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tlsfront::acme::dns01::fuzz::{encode_name, sign_answer, verify};
use tlsfront::acme::dns01::{TsigKey, WireError};

/// A query header and question ("a.test" SOA IN).
const QUERY: &[u8] = &[
    0, 7, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, b'a', 4, b't', b'e', b's', b't', 0, 0, 6, 0, 1,
];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let got = TsigKey::parse(text);
    let wrapped = TsigKey::parse(&format!("/* tsig-keygen */\n{text}\n# end\n"));
    match (&got, &wrapped) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        _ => panic!("comments around the clause changed it: {got:?} and {wrapped:?}"),
    }
    let Ok(key) = got else {
        return;
    };
    assert_eq!(key.name, key.name.to_ascii_lowercase());
    assert!(!key.name.ends_with('.'), "{:?}", key.name);
    assert!(encode_name(&key.name).is_ok(), "{:?}", key.name);

    // The name written back, with another secret.
    let other = TsigKey::parse(&format!(
        "key \"{}.\" {{ algorithm {}; secret \"b3RoZXI=\"; }};",
        key.name,
        key.algorithm.name()
    ))
    .expect("a key's name and algorithm written back read");
    assert_eq!((&other.name, other.algorithm), (&key.name, key.algorithm));

    let signed = sign_answer(QUERY, &key, 1000).unwrap();
    assert_eq!(verify(&signed, &key, 1000), Ok(()));
    if other != key {
        assert_eq!(verify(&signed, &other, 1000), Err(WireError::BadMac));
    }
});
