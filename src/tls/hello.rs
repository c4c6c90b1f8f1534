//! What tlsfront needs from a ClientHello before rustls sees it: the server
//! name (SNI; rustls 0.23's unbuffered server connection has no accessor for
//! it, and the PROXY v2 authority TLV needs it), whether the client offers
//! a ticket to resume with (which picks the configuration, see
//! [`super::ServerConfigs`]), and the checks rustls 0.23 does not make on a
//! ClientHello ([`Refusal`]), and the key exchange groups it lists and
//! sends key shares for (which pick the site's configuration for the
//! group, see [`super::policy::Policy::choose_group`]). Read from the whole ClientHello message, put
//! together from as many handshake records as it spans ([`gather`]), so a
//! split ClientHello cannot slip past the checks. Bounds-checked at every
//! step; anything unexpected (a malformed message, which rustls rejects
//! itself) gives the defaults: no name, no offer, no refusal.

use super::wire::extension;
use rustls::{AlertDescription, CipherSuite, ContentType, HandshakeType, ProtocolVersion};
use std::borrow::Cow;

/// RFC 7507's signalling suite value: rustls has no name for it.
const TLS_FALLBACK_SCSV: CipherSuite = CipherSuite::Unknown(0x5600);
/// SNI's `NameType` for a host name (RFC 6066 §3).
const HOST_NAME: u8 = 0;
/// The largest handshake message rustls accepts (a 16-bit length); a
/// longer one is left to rustls to refuse.
const MAX_MESSAGE: usize = 4 + 0xffff;

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()? as usize;
        self.take(n)
    }
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()? as usize;
        self.take(n)
    }
}

/// Why tlsfront refuses a ClientHello that rustls 0.23 would go on with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// `legacy_version` SSL 3.0 or older: nothing tlsfront speaks.
    #[error("ClientHello legacy_version {0:#06x} (SSL 3.0 or older)")]
    ObsoleteVersion(u16),
    /// `TLS_FALLBACK_SCSV` from a client that does not offer TLS 1.3,
    /// which we support: a downgraded retry (RFC 7507 §3).
    #[error("TLS_FALLBACK_SCSV from a client that does not offer TLS 1.3 (RFC 7507)")]
    InappropriateFallback,
    /// A non-empty `renegotiation_info` in an initial ClientHello (RFC 5746
    /// §3.6: the handshake MUST be aborted).
    #[error("non-empty renegotiation_info in an initial ClientHello (RFC 5746)")]
    Renegotiation,
    /// A name no site has, or no name, where the config refuses those
    /// (`unknown_names = "reject"`, RFC 6066 §3).
    #[error("no site for this server name (unknown_names = \"reject\")")]
    UnknownName,
}

impl Refusal {
    /// The fatal alert the RFCs prescribe.
    pub fn alert(self) -> AlertDescription {
        match self {
            Refusal::ObsoleteVersion(_) => AlertDescription::ProtocolVersion,
            Refusal::InappropriateFallback => AlertDescription::InappropriateFallback,
            Refusal::Renegotiation => AlertDescription::HandshakeFailure,
            Refusal::UnknownName => AlertDescription::UnrecognisedName,
        }
    }

    /// The metrics label.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::ObsoleteVersion(_) => "hello_obsolete_version",
            Refusal::InappropriateFallback => "hello_inappropriate_fallback",
            Refusal::Renegotiation => "hello_renegotiation_info",
            Refusal::UnknownName => "hello_unrecognized_name",
        }
    }
}

/// The parts of a ClientHello tlsfront looks at.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Hello {
    /// The host name asked for, lower-cased.
    pub sni: Option<String>,
    /// A `pre_shared_key` extension: the client tries to resume.
    pub offers_psk: bool,
    /// ALPN offers `acme-tls/1` and nothing else: an ACME CA validating a
    /// TLS-ALPN-01 challenge (RFC 8737 §3).
    pub acme_challenge: bool,
    /// tlsfront ends the handshake with this refusal's alert.
    pub refusal: Option<Refusal>,
    /// The groups (of tlsfront's) it lists and sends shares for, and
    /// whether it offers TLS 1.3.
    pub offered: super::policy::Offered,
}

/// The ClientHello at the start of the bytes a client sent.
#[derive(Debug, PartialEq, Eq)]
pub enum Gathered<'a> {
    /// The whole handshake message, header included: borrowed when one
    /// record holds it, joined from the record payloads when it is split.
    Whole(Cow<'a, [u8]>),
    /// Its records so far are whole or cut short: read more.
    Partial,
    /// Not a handshake message in handshake records (another record type
    /// between its fragments, an empty fragment, a message too long):
    /// rustls decides.
    Unreadable,
    /// A record longer than a plaintext record may be (2^14 bytes, RFC 8446
    /// §5.1: `record_overflow`), which rustls would take.
    Oversized,
}

/// The longest plaintext record (RFC 8446 §5.1, RFC 5246 §6.2.1).
const MAX_PLAINTEXT_RECORD: usize = 1 << 14;

/// Put together the handshake message at the front of `records`, TLS
/// records back to back as read from the socket.
pub fn gather(records: &[u8]) -> Gathered<'_> {
    let mut rest = Reader(records);
    let mut first: &[u8] = &[];
    let mut joined: Option<Vec<u8>> = None;
    loop {
        let have = joined.as_ref().map_or(first.len(), Vec::len);
        let msg = joined.as_deref().unwrap_or(first);
        if have >= 4 {
            let want = 4 + u32::from_be_bytes([0, msg[1], msg[2], msg[3]]) as usize;
            if want > MAX_MESSAGE {
                return Gathered::Unreadable;
            }
            if have >= want {
                return Gathered::Whole(match joined {
                    Some(mut v) => {
                        v.truncate(want);
                        Cow::Owned(v)
                    }
                    None => Cow::Borrowed(&first[..want]),
                });
            }
        }
        // A record's header, judged before its body has all arrived.
        let header = rest.0.get(..5);
        if header
            .is_some_and(|h| usize::from(u16::from_be_bytes([h[3], h[4]])) > MAX_PLAINTEXT_RECORD)
        {
            return Gathered::Oversized;
        }
        let Some(typ) = rest.u8() else {
            return Gathered::Partial;
        };
        if typ != u8::from(ContentType::Handshake) {
            return Gathered::Unreadable;
        }
        let (Some(_version), Some(payload)) = (rest.take(2), rest.vec16()) else {
            return Gathered::Partial;
        };
        if payload.is_empty() {
            // Not allowed (RFC 8446 §5.1): rustls refuses it at once,
            // where waiting for more would hold the connection.
            return Gathered::Unreadable;
        }
        if first.is_empty() && joined.is_none() {
            first = payload;
        } else {
            joined
                .get_or_insert_with(|| first.to_vec())
                .extend_from_slice(payload);
        }
    }
}

/// Read a ClientHello from the records a client sent (defaults if they do
/// not hold a whole one).
pub fn from_records(records: &[u8]) -> Hello {
    match gather(records) {
        Gathered::Whole(msg) => from_message(&msg),
        _ => Hello::default(),
    }
}

/// Read a whole ClientHello handshake message.
pub fn from_message(msg: &[u8]) -> Hello {
    let mut hello = Hello::default();
    let _ = parse(msg, &mut hello);
    hello
}

fn parse(msg: &[u8], hello: &mut Hello) -> Option<()> {
    let mut m = Reader(msg);
    if m.u8()? != u8::from(HandshakeType::ClientHello) {
        return None;
    }
    m.take(3)?; // length: `gather` cut the message to it
    let mut body = m;
    let legacy_version = body.u16()?;
    body.take(32)?; // random
    body.vec8()?; // session id
    let suites = body.vec16()?;
    body.vec8()?; // compression methods
                  // No extensions at all is a valid (TLS 1.2) ClientHello.
    let exts = if body.0.is_empty() {
        &[][..]
    } else {
        body.vec16()?
    };
    let mut exts = Reader(exts);
    let mut offers_tls13 = false;
    let mut renegotiating = false;
    while !exts.0.is_empty() {
        let typ = exts.u16()?;
        let data = exts.vec16()?;
        match typ {
            extension::SERVER_NAME => hello.sni = host_name(data),
            extension::PRE_SHARED_KEY => hello.offers_psk = true,
            extension::SUPPORTED_VERSIONS => {
                let mut list = Reader(Reader(data).vec8()?);
                while let Some(v) = list.u16() {
                    offers_tls13 |= ProtocolVersion::from(v) == ProtocolVersion::TLSv1_3;
                }
            }
            extension::SUPPORTED_GROUPS => {
                let mut list = Reader(Reader(data).vec16()?);
                while let Some(g) = list.u16() {
                    hello.offered.supports(g);
                }
            }
            extension::KEY_SHARE => {
                let mut list = Reader(Reader(data).vec16()?);
                while !list.0.is_empty() {
                    let group = list.u16()?;
                    list.vec16()?;
                    hello.offered.shares(group);
                }
            }
            extension::RENEGOTIATION_INFO => {
                renegotiating = Reader(data).vec8().is_some_and(|v| !v.is_empty());
            }
            extension::ALPN => {
                let mut list = Reader(Reader(data).vec16()?);
                let first = list.vec8();
                hello.acme_challenge = first == Some(b"acme-tls/1") && list.0.is_empty();
            }
            _ => {}
        }
    }
    hello.offered.tls13 = offers_tls13;
    let fallback = suites
        .chunks_exact(2)
        .any(|s| CipherSuite::from(u16::from_be_bytes([s[0], s[1]])) == TLS_FALLBACK_SCSV);
    hello.refusal = if legacy_version <= u16::from(ProtocolVersion::SSLv3) {
        Some(Refusal::ObsoleteVersion(legacy_version))
    } else if fallback && !offers_tls13 {
        Some(Refusal::InappropriateFallback)
    } else if renegotiating {
        Some(Refusal::Renegotiation)
    } else {
        None
    };
    Some(())
}

fn host_name(ext: &[u8]) -> Option<String> {
    let mut list = Reader(Reader(ext).vec16()?);
    while !list.0.is_empty() {
        let kind = list.u8()?;
        let name = list.vec16()?;
        if kind == HOST_NAME {
            let name = std::str::from_utf8(name).ok()?;
            if !name.is_empty() && name.len() <= 253 && name.bytes().all(|b| b.is_ascii_graphic()) {
                return Some(name.to_ascii_lowercase());
            }
            return None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXT_SERVER_NAME: u16 = 0;
    const EXT_SUPPORTED_VERSIONS: u16 = 43;
    const EXT_PRE_SHARED_KEY: u16 = 41;
    const EXT_RENEGOTIATION_INFO: u16 = 0xff01;

    /// A ClientHello message (no record header).
    struct Spec<'a> {
        sni: Option<&'a str>,
        psk: bool,
        legacy_version: u16,
        suites: &'a [u16],
        versions: &'a [u16],
        reneg: Option<&'a [u8]>,
        alpn: &'a [&'a [u8]],
        /// `supported_groups`, and the groups of `key_share` entries.
        groups: &'a [u16],
        shares: &'a [u16],
    }

    const TLS13: Spec<'static> = Spec {
        sni: None,
        psk: false,
        legacy_version: 0x0303,
        suites: &[0x1301],
        versions: &[0x0304, 0x0303],
        reneg: None,
        alpn: &[],
        groups: &[],
        shares: &[],
    };

    fn ext(out: &mut Vec<u8>, typ: u16, data: &[u8]) {
        out.extend_from_slice(&typ.to_be_bytes());
        out.extend_from_slice(&(data.len() as u16).to_be_bytes());
        out.extend_from_slice(data);
    }

    fn message(spec: &Spec<'_>) -> Vec<u8> {
        let mut exts = Vec::new();
        // An unrelated extension first.
        ext(&mut exts, 0x000b, &[0x01, 0x00]);
        if let Some(name) = spec.sni {
            let mut entry = vec![HOST_NAME];
            entry.extend_from_slice(&(name.len() as u16).to_be_bytes());
            entry.extend_from_slice(name.as_bytes());
            let mut list = (entry.len() as u16).to_be_bytes().to_vec();
            list.extend_from_slice(&entry);
            ext(&mut exts, EXT_SERVER_NAME, &list);
        }
        if !spec.versions.is_empty() {
            let mut list = vec![(spec.versions.len() * 2) as u8];
            for v in spec.versions {
                list.extend_from_slice(&v.to_be_bytes());
            }
            ext(&mut exts, EXT_SUPPORTED_VERSIONS, &list);
        }
        if let Some(r) = spec.reneg {
            let mut data = vec![r.len() as u8];
            data.extend_from_slice(r);
            ext(&mut exts, EXT_RENEGOTIATION_INFO, &data);
        }
        if !spec.alpn.is_empty() {
            let mut list = Vec::new();
            for p in spec.alpn {
                list.push(p.len() as u8);
                list.extend_from_slice(p);
            }
            let mut data = (list.len() as u16).to_be_bytes().to_vec();
            data.extend_from_slice(&list);
            ext(&mut exts, 16, &data);
        }
        if !spec.groups.is_empty() {
            let mut data = ((spec.groups.len() * 2) as u16).to_be_bytes().to_vec();
            for g in spec.groups {
                data.extend_from_slice(&g.to_be_bytes());
            }
            ext(&mut exts, 10, &data);
        }
        if !spec.shares.is_empty() {
            // Each entry: group, then a 32-byte key.
            let mut list = Vec::new();
            for g in spec.shares {
                list.extend_from_slice(&g.to_be_bytes());
                list.extend_from_slice(&[0, 32]);
                list.extend_from_slice(&[5; 32]);
            }
            let mut data = (list.len() as u16).to_be_bytes().to_vec();
            data.extend_from_slice(&list);
            ext(&mut exts, 51, &data);
        }
        if spec.psk {
            // One identity (4 bytes, age 0), one 32-byte binder.
            let mut data = vec![0, 10, 0, 4, 1, 2, 3, 4, 0, 0, 0, 0];
            data.extend_from_slice(&[0, 33, 32]);
            data.extend_from_slice(&[9; 32]);
            ext(&mut exts, EXT_PRE_SHARED_KEY, &data);
        }
        let mut body = spec.legacy_version.to_be_bytes().to_vec();
        body.extend_from_slice(&[7; 32]);
        body.extend_from_slice(&[0]); // session id
        body.extend_from_slice(&((spec.suites.len() * 2) as u16).to_be_bytes());
        for s in spec.suites {
            body.extend_from_slice(&s.to_be_bytes());
        }
        body.extend_from_slice(&[1, 0]); // null compression
        body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
        body.extend_from_slice(&exts);
        let mut hs = vec![1];
        hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend_from_slice(&body);
        hs
    }

    /// `msg` in handshake records of at most `fragment` bytes each.
    fn records(msg: &[u8], fragment: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for part in msg.chunks(fragment) {
            out.extend_from_slice(&[22, 3, 1]);
            out.extend_from_slice(&(part.len() as u16).to_be_bytes());
            out.extend_from_slice(part);
        }
        out
    }

    fn hello(spec: &Spec<'_>) -> Hello {
        from_records(&records(&message(spec), 16384))
    }

    #[test]
    fn finds_the_host_name() {
        let h = hello(&Spec {
            sni: Some("Example.COM"),
            ..TLS13
        });
        assert_eq!(h.sni.as_deref(), Some("example.com"));
        let mut plain = Hello::default();
        plain.offered.tls13 = true;
        assert_eq!(hello(&TLS13), plain);
    }

    /// The groups listed and shared pick the site's group (0x11ec:
    /// X25519MLKEM768, 0x1d: X25519, 0x17: P-256, 0x1e: X448).
    #[test]
    fn reads_the_groups_and_key_shares() {
        use super::super::policy::{Group, Policy};
        let p = Policy::default();
        let pick = |versions, groups, shares| {
            let h = hello(&Spec {
                versions,
                groups,
                shares,
                ..TLS13
            });
            p.choose_group(&h.offered)
        };
        let all: &[u16] = &[0x1e, 0x11ec, 0x1d, 0x17];
        assert_eq!(
            pick(&[0x0304], all, &[0x11ec, 0x1d]),
            Some(Group::X25519MlKem768)
        );
        assert_eq!(pick(&[0x0304], all, &[0x1e, 0x1d]), Some(Group::X25519));
        assert_eq!(pick(&[0x0304], all, &[0x1e]), Some(Group::X25519MlKem768));
        assert_eq!(pick(&[0x0304], &[0x17], &[0x1d]), Some(Group::P256));
        // TLS 1.2 cannot use ML-KEM.
        assert_eq!(pick(&[0x0303], all, &[]), Some(Group::X25519));
        assert_eq!(pick(&[0x0304], &[0x1e], &[0x1e]), None);
    }

    /// RFC 8737 §3: a validation offers `acme-tls/1` and nothing else.
    #[test]
    fn tells_an_acme_validation_apart() {
        let acme = |alpn| {
            hello(&Spec {
                sni: Some("a.test"),
                alpn,
                ..TLS13
            })
            .acme_challenge
        };
        assert!(acme(&[b"acme-tls/1"]));
        assert!(!acme(&[]));
        assert!(!acme(&[b"http/1.1"]));
        assert!(!acme(&[b"acme-tls/1", b"http/1.1"]));
        assert!(!acme(&[b"h2", b"acme-tls/1"]));
    }

    #[test]
    fn sees_a_resumption_offer() {
        let with = Spec {
            sni: Some("a.test"),
            psk: true,
            ..TLS13
        };
        let h = hello(&with);
        assert_eq!(h.sni.as_deref(), Some("a.test"));
        assert!(h.offers_psk);
        assert!(!hello(&Spec { psk: false, ..with }).offers_psk);
        // A truncated record gives the defaults.
        let full = records(&message(&with), 16384);
        assert!(!from_records(&full[..full.len() - 10]).offers_psk);
    }

    #[test]
    fn a_split_client_hello_is_read_whole() {
        let spec = Spec {
            sni: Some("split.test"),
            suites: &[0xc02f, 0x5600],
            versions: &[0x0303],
            ..TLS13
        };
        let msg = message(&spec);
        for fragment in [1, 2, 7, 40, msg.len() - 1] {
            let recs = records(&msg, fragment);
            assert_eq!(gather(&recs), Gathered::Whole(Cow::Borrowed(&msg[..])));
            let h = from_records(&recs);
            assert_eq!(h.sni.as_deref(), Some("split.test"), "{fragment}");
            assert_eq!(h.refusal, Some(Refusal::InappropriateFallback));
            // Any prefix is still partial: read more before deciding.
            for cut in [0, 3, 5, recs.len() - 1] {
                assert_eq!(gather(&recs[..cut]), Gathered::Partial, "{fragment} {cut}");
            }
        }
    }

    #[test]
    fn other_records_or_huge_messages_are_left_to_rustls() {
        let msg = message(&TLS13);
        let mut recs = records(&msg[..10], 16384);
        recs.extend_from_slice(&[23, 3, 3, 0, 0]);
        recs.extend_from_slice(&records(&msg[10..], 16384));
        assert_eq!(gather(&recs), Gathered::Unreadable);
        // A ClientHello that claims more than a 16-bit length.
        let huge = records(&[1, 1, 0, 0], 16384);
        assert_eq!(gather(&huge), Gathered::Unreadable);
        assert_eq!(gather(b"GET / HTTP/1.1"), Gathered::Unreadable);
        // An empty handshake record, alone or after a first fragment.
        assert_eq!(gather(&[22, 3, 1, 0, 0]), Gathered::Unreadable);
        let mut recs = records(&msg[..10], 16384);
        recs.extend_from_slice(&[22, 3, 1, 0, 0]);
        assert_eq!(gather(&recs), Gathered::Unreadable);
    }

    #[test]
    fn a_record_over_2_14_bytes_is_oversized() {
        // Seen from its header alone, first or after other records.
        let msg = message(&TLS13);
        let mut long = vec![22, 3, 1, 0x40, 0x01];
        assert_eq!(gather(&long), Gathered::Oversized);
        long.extend_from_slice(&msg);
        assert_eq!(gather(&long), Gathered::Oversized);
        let mut recs = records(&msg[..10], 16384);
        recs.extend_from_slice(&[22, 3, 1, 0xff, 0xff]);
        assert_eq!(gather(&recs), Gathered::Oversized);
        // 2^14 itself is allowed: a message of 20 000 bytes (19 996 and
        // its header) in a full record and the rest.
        let mut hello = vec![1, 0, 0x4e, 0x1c];
        hello.resize(20000, 0);
        let recs = records(&hello, 16384);
        assert_eq!(recs[3..5], [0x40, 0x00]);
        assert_eq!(gather(&recs[..5 + 16384]), Gathered::Partial);
    }

    #[test]
    fn refuses_what_rustls_lets_through() {
        let cases: [(Spec<'_>, Option<Refusal>); 8] = [
            (TLS13, None),
            // A TLS 1.3 client may send the SCSV (a retry that still
            // offers our best version is no downgrade).
            (
                Spec {
                    suites: &[0x1301, 0x5600],
                    ..TLS13
                },
                None,
            ),
            (
                Spec {
                    suites: &[0xc02f, 0x5600],
                    versions: &[],
                    ..TLS13
                },
                Some(Refusal::InappropriateFallback),
            ),
            (
                Spec {
                    suites: &[0x5600, 0x1301],
                    versions: &[0x0303, 0x0302],
                    ..TLS13
                },
                Some(Refusal::InappropriateFallback),
            ),
            (
                Spec {
                    legacy_version: 0x0300,
                    versions: &[],
                    ..TLS13
                },
                Some(Refusal::ObsoleteVersion(0x0300)),
            ),
            (
                Spec {
                    legacy_version: 0x0002,
                    ..TLS13
                },
                Some(Refusal::ObsoleteVersion(0x0002)),
            ),
            (
                Spec {
                    reneg: Some(&[1, 2, 3]),
                    ..TLS13
                },
                Some(Refusal::Renegotiation),
            ),
            // The empty renegotiation_info every initial hello may carry.
            (
                Spec {
                    reneg: Some(&[]),
                    ..TLS13
                },
                None,
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(hello(&spec).refusal, want, "{:?}", message(&spec));
        }
        assert_eq!(
            Refusal::InappropriateFallback.alert(),
            AlertDescription::InappropriateFallback
        );
    }

    #[test]
    fn never_reads_out_of_bounds() {
        let full = records(
            &message(&Spec {
                sni: Some("example.com"),
                reneg: Some(&[1]),
                ..TLS13
            }),
            16384,
        );
        for cut in 0..full.len() {
            let _ = from_records(&full[..cut]);
        }
        let mut bad = full.clone();
        for i in 5..bad.len() {
            bad[i] = 0xff;
            let _ = from_records(&bad);
        }
    }
}
