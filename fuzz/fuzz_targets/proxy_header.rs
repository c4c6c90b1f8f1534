//! The accept side of the PROXY protocol (`proxy::header::parse`, what
//! `accept` peeks), and the writer (`encode`) through it.
//!
//! On arbitrary bytes: a header lies within the input, is decided by its
//! own bytes alone (the TLS bytes behind it are never read: `accept`
//! consumes exactly `len`), and every prefix of it is "incomplete" — never
//! invalid nor a different header — because `accept` sees a header split
//! across TCP segments one prefix at a time. Both addresses are of one
//! family.
//!
//! Round trip: a connection built from the input (addresses of either
//! family, TLS version, suite, SNI, ALPN) is encoded as v1 and v2, and the
//! accept side reads back exactly that header and its addresses, with the
//! TLS bytes behind it untouched; v2's TLVs carry the SNI and ALPN.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use tlsfront::ktls::Version;
use tlsfront::proxy::header::{encode, parse, Parsed, ProxyVersion};
use tlsfront::server::ConnInfo;

fn check_header(buf: &[u8]) -> Parsed {
    let got = parse(buf);
    if let Parsed::Header { len, addrs } = got {
        assert!(len > 0 && len <= buf.len(), "len {len} of {}", buf.len());
        assert_eq!(parse(&buf[..len]), got, "depends on bytes after it");
        for k in 0..len {
            assert_eq!(
                parse(&buf[..k]),
                Parsed::Incomplete,
                "prefix of {k} of {len} bytes"
            );
        }
        if let Some((s, d)) = addrs {
            assert_eq!(s.is_ipv4(), d.is_ipv4());
        }
    }
    got
}

/// A little reader over the input for building a connection.
struct Bytes<'a>(&'a [u8]);
impl Bytes<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = N.min(self.0.len());
        out[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        out
    }
    fn addr(&mut self, v6: bool) -> SocketAddr {
        let port = u16::from_be_bytes(self.take());
        let ip = if v6 {
            IpAddr::V6(Ipv6Addr::from(self.take::<16>()))
        } else {
            IpAddr::V4(Ipv4Addr::from(self.take::<4>()))
        };
        SocketAddr::new(ip, port)
    }
    fn string(&mut self, max: usize) -> Vec<u8> {
        let [n] = self.take();
        let n = (n as usize).min(max).min(self.0.len());
        let (s, rest) = self.0.split_at(n);
        self.0 = rest;
        s.to_vec()
    }
}

fn mapped(a: SocketAddr) -> SocketAddr {
    match a.ip() {
        IpAddr::V4(ip) => SocketAddr::new(IpAddr::V6(ip.to_ipv6_mapped()), a.port()),
        IpAddr::V6(_) => a,
    }
}

fuzz_target!(|data: &[u8]| {
    check_header(data);

    let mut b = Bytes(data);
    let [flags] = b.take();
    let client = b.addr(flags & 1 != 0);
    let local = b.addr(flags & 2 != 0);
    let suites = [
        rustls::CipherSuite::TLS13_AES_128_GCM_SHA256,
        rustls::CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        rustls::CipherSuite::Unknown(0x1234),
    ];
    let sni = String::from_utf8_lossy(&b.string(255)).into_owned();
    let alpn = b.string(255);
    let info = ConnInfo {
        client,
        local,
        version: [None, Some(Version::Tls12), Some(Version::Tls13)][(flags as usize >> 2) % 3],
        suite: (flags & 0x10 != 0).then(|| suites[(flags as usize >> 5) % 3]),
        group: (flags & 0x10 != 0).then_some(rustls::NamedGroup::X25519MLKEM768),
        sni: (flags & 0x80 != 0).then_some(sni.clone()),
        alpn: (!alpn.is_empty()).then_some(alpn.clone()),
        resumed: false,
        client_cert: Default::default(),
        path: tlsfront::transport::Path::Userspace,
        site: "fuzz".into(),
        log: None,
        metrics: site_metrics(),
    };
    let want = if client.is_ipv4() == local.is_ipv4() {
        (client, local)
    } else {
        (mapped(client), mapped(local))
    };
    for version in [ProxyVersion::V1, ProxyVersion::V2] {
        let header = encode(version, &info);
        let mut wire = header.clone();
        wire.extend_from_slice(b"\x16\x03\x01\x02\x00\x01");
        assert_eq!(
            check_header(&wire),
            Parsed::Header {
                len: header.len(),
                addrs: Some(want)
            },
            "{version:?} {info:?}"
        );
        if version == ProxyVersion::V2 {
            let h = ppp::v2::Header::try_from(&header[..]).expect("v2 parses");
            let tlvs: Vec<(u8, Vec<u8>)> = h
                .tlvs()
                .map(|t| t.expect("TLV parses"))
                .map(|t| (t.kind, t.value.to_vec()))
                .collect();
            let find = |k: u8| tlvs.iter().find(|t| t.0 == k).map(|t| &t.1);
            assert_eq!(find(0x01), info.alpn.as_ref());
            assert_eq!(
                find(0x02),
                info.sni.as_ref().map(|s| s.as_bytes().to_vec()).as_ref()
            );
            assert!(find(0x20).is_some(), "SSL TLV");
        }
    }
});

/// One set of counters for every run (made once: building a registry per
/// input would be most of the work).
fn site_metrics() -> std::sync::Arc<tlsfront::metrics::SiteMetrics> {
    static SITE: std::sync::OnceLock<std::sync::Arc<tlsfront::metrics::SiteMetrics>> =
        std::sync::OnceLock::new();
    SITE.get_or_init(|| tlsfront::metrics::Metrics::default().site(&"fuzz".into()))
        .clone()
}
