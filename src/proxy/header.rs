//! PROXY protocol (v1 and v2) on both sides of the proxy, through the `ppp`
//! crate. Towards the backend: the header hitch writes with
//! `write-proxy-v1`/`write-proxy-v2` + `proxy-tlv`, i.e. v2 carries TLVs for
//! ALPN, the authority (SNI) and the SSL block (version and cipher, named as
//! OpenSSL names them). From a load balancer in front: a v1 or v2 header
//! read by peeking, so not one byte of the TLS handshake behind it is
//! consumed.

use crate::ktls::Version;
use crate::server::ConnInfo;
use ppp::v2;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::Instant;

pub use crate::config::file::ProxyVersion;

// PP2 SSL TLV (PROXY protocol spec 2.2.5).
const PP2_CLIENT_SSL: u8 = 0x01;
const PP2_CLIENT_CERT_CONN: u8 = 0x02;
const PP2_CLIENT_CERT_SESS: u8 = 0x04;
const PP2_SUBTYPE_SSL_VERSION: u8 = 0x21;
const PP2_SUBTYPE_SSL_CN: u8 = 0x22;
const PP2_SUBTYPE_SSL_CIPHER: u8 = 0x23;

/// OpenSSL's name for a suite (what hitch and HAProxy put in the SSL TLV).
fn openssl_name(suite: rustls::CipherSuite) -> Option<&'static str> {
    use rustls::CipherSuite as S;
    Some(match suite {
        S::TLS13_AES_128_GCM_SHA256 => "TLS_AES_128_GCM_SHA256",
        S::TLS13_AES_256_GCM_SHA384 => "TLS_AES_256_GCM_SHA384",
        S::TLS13_CHACHA20_POLY1305_SHA256 => "TLS_CHACHA20_POLY1305_SHA256",
        S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 => "ECDHE-ECDSA-AES128-GCM-SHA256",
        S::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 => "ECDHE-ECDSA-AES256-GCM-SHA384",
        S::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 => "ECDHE-ECDSA-CHACHA20-POLY1305",
        S::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => "ECDHE-RSA-AES128-GCM-SHA256",
        S::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => "ECDHE-RSA-AES256-GCM-SHA384",
        S::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 => "ECDHE-RSA-CHACHA20-POLY1305",
        _ => return None,
    })
}

/// Both addresses in one family (a v4 client on a v6 listener is mapped).
fn same_family(a: SocketAddr, b: SocketAddr) -> (SocketAddr, SocketAddr) {
    let v6 = |s: SocketAddr| match s.ip() {
        IpAddr::V4(ip) => SocketAddr::new(IpAddr::V6(ip.to_ipv6_mapped()), s.port()),
        IpAddr::V6(_) => s,
    };
    if a.is_ipv4() == b.is_ipv4() {
        (a, b)
    } else {
        (v6(a), v6(b))
    }
}

/// The header for the backend, describing the client's connection.
pub fn encode(version: ProxyVersion, info: &ConnInfo) -> Vec<u8> {
    let (src, dst) = same_family(info.client, info.local);
    match version {
        ProxyVersion::V1 => {
            let addrs = match (src, dst) {
                (SocketAddr::V4(s), SocketAddr::V4(d)) => {
                    ppp::v1::Addresses::new_tcp4(*s.ip(), *d.ip(), s.port(), d.port())
                }
                (SocketAddr::V6(s), SocketAddr::V6(d)) => {
                    ppp::v1::Addresses::new_tcp6(*s.ip(), *d.ip(), s.port(), d.port())
                }
                _ => ppp::v1::Addresses::Unknown,
            };
            addrs.to_string().into_bytes()
        }
        ProxyVersion::V2 => {
            // As HAProxy's send-proxy-v2-ssl(-cn): the client flags say a
            // certificate was presented in this connection and/or its
            // session, `verify` is 0 for one that verified (rustls ends a
            // handshake whose certificate does not) and 1 without one, and
            // the CN follows the version.
            let peer = info.client_cert.peer();
            let mut client = PP2_CLIENT_SSL;
            if let Some(p) = peer {
                client |= PP2_CLIENT_CERT_SESS;
                if p.this_connection {
                    client |= PP2_CLIENT_CERT_CONN;
                }
            }
            let verify: u32 = if peer.is_some() { 0 } else { 1 };
            let mut ssl = vec![client];
            ssl.extend_from_slice(&verify.to_be_bytes());
            let mut sub = |kind: u8, value: &[u8]| {
                ssl.push(kind);
                ssl.extend_from_slice(&(value.len() as u16).to_be_bytes());
                ssl.extend_from_slice(value);
            };
            match info.version {
                Some(Version::Tls13) => sub(PP2_SUBTYPE_SSL_VERSION, b"TLSv1.3"),
                Some(Version::Tls12) => sub(PP2_SUBTYPE_SSL_VERSION, b"TLSv1.2"),
                None => {}
            }
            if let Some(cn) = peer.and_then(|p| p.cn.as_deref()) {
                sub(PP2_SUBTYPE_SSL_CN, cn.as_bytes());
            }
            if let Some(name) = info.suite.and_then(openssl_name) {
                sub(PP2_SUBTYPE_SSL_CIPHER, name.as_bytes());
            }
            let build = || -> std::io::Result<Vec<u8>> {
                let mut b = v2::Builder::with_addresses(
                    v2::Version::Two | v2::Command::Proxy,
                    v2::Protocol::Stream,
                    (src, dst),
                );
                if let Some(alpn) = &info.alpn {
                    b = b.write_tlv(v2::Type::ALPN, alpn)?;
                }
                if let Some(sni) = &info.sni {
                    b = b.write_tlv(v2::Type::Authority, sni.as_bytes())?;
                }
                b.write_tlv(v2::Type::SSL, &ssl)?.build()
            };
            // Writing into a Vec cannot fail and every TLV is far below
            // 64 KiB; fall back to a bare LOCAL header all the same.
            build().unwrap_or_else(|_| {
                v2::Builder::new(v2::Version::Two | v2::Command::Local, 0)
                    .build()
                    .unwrap_or_default()
            })
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    #[error("no PROXY header within {0:?}")]
    Timeout(Duration),
    #[error("connection closed before a PROXY header")]
    Eof,
    #[error("invalid PROXY header")]
    Invalid,
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
}

/// Largest header accepted: v1 is at most 107 bytes; v2 TLVs from load
/// balancers are small.
const MAX_HEADER: usize = 4096;

/// The longest v1 header, CRLF included (proxy-protocol.txt 2.1).
const V1_MAX: usize = 107;

/// What the start of a connection's bytes holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// A whole v1 or v2 header of `len` bytes, naming (client, destination)
    /// or, for `LOCAL`/`UNKNOWN`, nothing.
    Header {
        len: usize,
        addrs: Option<(SocketAddr, SocketAddr)>,
    },
    /// The start of a header: wait for more bytes.
    Incomplete,
    /// Not a PROXY header.
    Invalid,
}

/// Parse a PROXY header at the start of `buf` (what [`accept`] peeked).
/// Pure, so the fuzz target sees exactly what a load balancer's bytes do.
pub fn parse(buf: &[u8]) -> Parsed {
    if buf.starts_with(b"PROXY") || b"PROXY".starts_with(buf) {
        return parse_v1(buf);
    }
    match ppp::HeaderResult::parse(buf) {
        ppp::HeaderResult::V2(Ok(h)) => {
            let addrs = match (h.command, h.addresses) {
                (v2::Command::Local, _) => None,
                (_, v2::Addresses::IPv4(a)) => Some((
                    SocketAddr::new(a.source_address.into(), a.source_port),
                    SocketAddr::new(a.destination_address.into(), a.destination_port),
                )),
                (_, v2::Addresses::IPv6(a)) => Some((
                    SocketAddr::new(a.source_address.into(), a.source_port),
                    SocketAddr::new(a.destination_address.into(), a.destination_port),
                )),
                _ => None,
            };
            Parsed::Header {
                len: h.len(),
                addrs,
            }
        }
        other => {
            use ppp::PartialResult;
            if other.is_incomplete() {
                Parsed::Incomplete
            } else {
                Parsed::Invalid
            }
        }
    }
}

/// A v1 header: one line, ended by its first CRLF (the spec's terminator;
/// an UNKNOWN line may hold anything before it, a bare LF included). ppp
/// alone would judge a line still arriving field by field (so a line cut
/// inside an address was "invalid") and could take a bare LF as the end or
/// not depending on the bytes after it, so the line is cut here and only
/// the whole line handed to ppp.
fn parse_v1(buf: &[u8]) -> Parsed {
    let window = &buf[..buf.len().min(V1_MAX)];
    let Some(end) = window.windows(2).position(|w| w == b"\r\n").map(|i| i + 2) else {
        return if buf.len() < V1_MAX {
            Parsed::Incomplete
        } else {
            Parsed::Invalid
        };
    };
    match ppp::HeaderResult::parse(&buf[..end]) {
        ppp::HeaderResult::V1(Ok(h)) if h.header.len() == end => {
            let addrs = match h.addresses {
                ppp::v1::Addresses::Tcp4(a) => Some((
                    SocketAddr::new(a.source_address.into(), a.source_port),
                    SocketAddr::new(a.destination_address.into(), a.destination_port),
                )),
                ppp::v1::Addresses::Tcp6(a) => Some((
                    SocketAddr::new(a.source_address.into(), a.source_port),
                    SocketAddr::new(a.destination_address.into(), a.destination_port),
                )),
                ppp::v1::Addresses::Unknown => None,
            };
            Parsed::Header { len: end, addrs }
        }
        _ => Parsed::Invalid,
    }
}

/// Read a PROXY header from a load balancer: peek until a whole v1 or v2
/// header is buffered, then consume exactly its bytes. Returns the
/// (client, destination) it names, or `None` for `LOCAL`/`UNKNOWN` (health
/// checks: use the connection's own addresses).
pub async fn accept(
    sock: &TcpStream,
    timeout: Duration,
) -> Result<Option<(SocketAddr, SocketAddr)>, AcceptError> {
    let deadline = Instant::now() + timeout;
    let mut buf = vec![0u8; MAX_HEADER];
    let mut seen = 0;
    loop {
        let n = match tokio::time::timeout_at(deadline, sock.peek(&mut buf)).await {
            Err(_) => return Err(AcceptError::Timeout(timeout)),
            Ok(r) => r?,
        };
        if n == 0 {
            return Err(AcceptError::Eof);
        }
        let (len, addrs) = match parse(&buf[..n]) {
            Parsed::Header { len, addrs } => (len, addrs),
            Parsed::Incomplete if n < MAX_HEADER => {
                // Wait for more of the header; `peek` would return the
                // same bytes at once.
                if n == seen {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                seen = n;
                if Instant::now() >= deadline {
                    return Err(AcceptError::Timeout(timeout));
                }
                continue;
            }
            Parsed::Incomplete | Parsed::Invalid => return Err(AcceptError::Invalid),
        };
        // Consume exactly the header; the TLS bytes behind it stay queued.
        let mut left = len;
        while left > 0 {
            sock.readable().await?;
            match sock.try_read(&mut buf[..left]) {
                Ok(0) => return Err(AcceptError::Eof),
                Ok(k) => left -= k,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e.into()),
            }
        }
        return Ok(addrs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> ConnInfo {
        ConnInfo {
            client: "192.0.2.7:40000".parse().unwrap(),
            local: "127.0.0.1:8443".parse().unwrap(),
            version: Some(Version::Tls13),
            suite: Some(rustls::CipherSuite::TLS13_AES_128_GCM_SHA256),
            group: Some(rustls::NamedGroup::X25519),
            sni: Some("example.com".into()),
            alpn: Some(b"http/1.1".to_vec()),
            resumed: false,
            client_cert: Default::default(),
            path: crate::transport::Path::Userspace,
            site: "example.com".into(),
            metrics: crate::metrics::Metrics::default().site(&"example.com".into()),
            log: None,
        }
    }

    #[test]
    fn v1_line() {
        let h = encode(ProxyVersion::V1, &info());
        assert_eq!(h, b"PROXY TCP4 192.0.2.7 127.0.0.1 40000 8443\r\n");
        let mut i = info();
        i.client = "[2001:db8::1]:5".parse().unwrap();
        let h = String::from_utf8(encode(ProxyVersion::V1, &i)).unwrap();
        assert_eq!(h, "PROXY TCP6 2001:db8::1 ::ffff:127.0.0.1 5 8443\r\n");
    }

    #[test]
    fn v2_round_trips_with_tlvs() {
        let h = encode(ProxyVersion::V2, &info());
        let parsed = v2::Header::try_from(&h[..]).unwrap();
        assert_eq!(parsed.command, v2::Command::Proxy);
        assert_eq!(
            parsed.addresses,
            v2::Addresses::from((info().client, info().local))
        );
        let tlvs: Vec<(u8, Vec<u8>)> = parsed
            .tlvs()
            .map(|t| t.unwrap())
            .map(|t| (t.kind, t.value.to_vec()))
            .collect();
        assert_eq!(tlvs[0], (0x01, b"http/1.1".to_vec()));
        assert_eq!(tlvs[1], (0x02, b"example.com".to_vec()));
        let ssl = &tlvs[2];
        assert_eq!(ssl.0, 0x20);
        assert_eq!(ssl.1[0], PP2_CLIENT_SSL);
        let sub = &ssl.1[5..];
        assert_eq!(&sub[..3], &[0x21, 0, 7]);
        assert_eq!(&sub[3..10], b"TLSv1.3");
        assert_eq!(&sub[10..13], &[0x23, 0, 22]);
        assert_eq!(&sub[13..], b"TLS_AES_128_GCM_SHA256");
    }

    #[test]
    fn v2_ssl_tlv_carries_the_client_certificate() {
        use crate::tls::client_auth::{ClientCert, PeerCert};
        let ssl_of = |i: &ConnInfo| -> Vec<u8> {
            let h = encode(ProxyVersion::V2, i);
            let parsed = v2::Header::try_from(&h[..]).unwrap();
            let t = parsed.tlvs().map(|t| t.unwrap()).find(|t| t.kind == 0x20);
            t.unwrap().value.to_vec()
        };
        let mut i = info();
        // No certificate: only the SSL flag, verify non-zero.
        assert_eq!(&ssl_of(&i)[..5], &[PP2_CLIENT_SSL, 0, 0, 0, 1]);
        for (this_connection, flags) in [(true, 0x07), (false, 0x05)] {
            i.client_cert = ClientCert::Verified(std::sync::Arc::new(PeerCert {
                cn: Some("alice".into()),
                subject: "CN=alice".into(),
                this_connection,
            }));
            let ssl = ssl_of(&i);
            assert_eq!(&ssl[..5], &[flags, 0, 0, 0, 0]);
            assert_eq!(&ssl[5..15], b"\x21\x00\x07TLSv1.3");
            assert_eq!(&ssl[15..23], b"\x22\x00\x05alice");
            assert_eq!(ssl[23], 0x23);
        }
    }

    /// Found by fuzz/proxy_header: a v1 header cut inside a field (as a
    /// TCP segment boundary can cut it) was refused as invalid, and one cut
    /// after a bare LF was taken as a shorter header.
    #[test]
    fn v1_cut_anywhere_is_incomplete() {
        for line in [
            &b"PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n"[..],
            b"PROXY TCP6 2001:db8::1 ::ffff:127.0.0.1 65535 443\r\n",
            b"PROXY UNKNOWN\r\n",
            b"PROXY UNKNOWN ffff\nfff::\r\n",
            // A bare LF was the end of the header or not depending on what
            // followed it.
            b"PROXY UNKNOWN \nz\r\n",
        ] {
            let whole = parse(line);
            assert!(matches!(whole, Parsed::Header { len, .. } if len == line.len()));
            for k in 0..line.len() {
                assert_eq!(parse(&line[..k]), Parsed::Incomplete, "{k}");
            }
        }
        // Still refused once the line is whole, or too long to be one.
        assert_eq!(parse(b"PROXY TCP4 192.168.0.\r\n"), Parsed::Invalid);
        assert_eq!(
            parse(&[b"PROXY ".as_slice(), &[b'1'; 101]].concat()),
            Parsed::Invalid
        );
        assert_eq!(parse(b"GET / HTTP/1.1\r\n"), Parsed::Invalid);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn accept_consumes_exactly_the_header() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        for header in [
            encode(ProxyVersion::V1, &info()),
            encode(ProxyVersion::V2, &info()),
        ] {
            let mut c = TcpStream::connect(addr).await.unwrap();
            let (s, _) = l.accept().await.unwrap();
            // Split the header across two writes.
            let (a, b) = header.split_at(header.len() / 2);
            c.write_all(a).await.unwrap();
            let w = async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                c.write_all(b).await.unwrap();
                c.write_all(b"\x16\x03\x01rest").await.unwrap();
                c
            };
            let (got, _c) = tokio::join!(accept(&s, Duration::from_secs(2)), w);
            assert_eq!(got.unwrap(), Some((info().client, info().local)));
            let mut rest = [0u8; 7];
            let mut s = s;
            s.read_exact(&mut rest).await.unwrap();
            assert_eq!(&rest, b"\x16\x03\x01rest");
        }
        let mut c = TcpStream::connect(addr).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        c.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        assert!(matches!(
            accept(&s, Duration::from_secs(1)).await,
            Err(AcceptError::Invalid)
        ));
    }
}
