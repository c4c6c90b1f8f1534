//! The text of access-log lines: a static-file response in nginx's
//! `combined` format (optionally followed by the TLS fields) or as JSON, and
//! a proxied connection in a line of its own (client, time, site, how it
//! ended, bytes each way, duration, backend, TLS fields) or as JSON.
//! docs/LOGGING.md gives each as an nginx `log_format` line.

use super::Format;
use crate::ktls::Version;
use crate::server::ConnInfo;
use crate::transport::Path;
use std::borrow::Cow;
use std::cell::RefCell;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// One static-file response.
pub struct HttpRecord<'a> {
    pub info: &'a ConnInfo,
    /// The request line as received (empty: none was read).
    pub request: &'a [u8],
    pub user_agent: Option<&'a [u8]>,
    pub referer: Option<&'a [u8]>,
    pub status: u16,
    /// Body bytes sent (nginx's `$body_bytes_sent`: the head not counted).
    pub body_bytes: u64,
    /// From the request's first byte to its last byte sent.
    pub duration: Duration,
}

/// One proxied connection, when it ends.
pub struct ProxyRecord<'a> {
    pub info: &'a ConnInfo,
    pub backend: &'a str,
    /// Bytes from the client (to the backend) and to the client.
    pub from_client: u64,
    pub to_client: u64,
    /// From the end of the handshake to the end of the connection.
    pub duration: Duration,
    /// How it ended: `done`, or what broke it (`backend_refused`,
    /// `idle_timeout`, `backend_reset`, …: the error kinds of the metrics).
    pub end: &'a str,
}

/// Write the line for `r` (newline included) to `out`.
pub fn http(out: &mut Vec<u8>, format: Format, r: &HttpRecord<'_>) {
    let now = SystemTime::now();
    if format == Format::Json {
        let tls = TlsFields::of(r.info);
        let line = HttpJson {
            time: &iso_time(now),
            remote_addr: r.info.client.ip(),
            site: &r.info.site,
            request: lossy(r.request),
            status: r.status,
            body_bytes_sent: r.body_bytes,
            http_referer: r.referer.map(lossy),
            http_user_agent: r.user_agent.map(lossy),
            ssl_protocol: tls.protocol,
            ssl_cipher: tls.cipher,
            ssl_curve: tls.curve,
            ssl_server_name: r.info.sni.as_deref(),
            ssl_session_reused: r.info.resumed,
            data_path: tls.path,
            request_time: millis(r.duration),
            ssl_client_verify: r.info.client_cert.verify(),
            ssl_client_s_dn_cn: client_cn(r.info),
        };
        json_line(out, &line);
        return;
    }
    let mut n = itoa::Buffer::new();
    addr(out, r.info);
    out.extend_from_slice(b" - - [");
    with_local_time(now, |t| out.extend_from_slice(t));
    out.extend_from_slice(b"] \"");
    escaped(out, Some(r.request));
    out.extend_from_slice(b"\" ");
    out.extend_from_slice(n.format(r.status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(n.format(r.body_bytes).as_bytes());
    out.extend_from_slice(b" \"");
    escaped(out, r.referer);
    out.extend_from_slice(b"\" \"");
    escaped(out, r.user_agent);
    out.push(b'"');
    if format == Format::Tls {
        out.push(b' ');
        tls_fields(out, r.info);
        out.push(b' ');
        seconds(out, r.duration);
        client_fields(out, r.info);
    }
    out.push(b'\n');
}

/// Write the line for a proxied connection (newline included) to `out`.
/// The text form is the same for `combined` and `tls`: a TLS proxy's
/// connection line always carries its TLS fields.
pub fn proxy(out: &mut Vec<u8>, format: Format, r: &ProxyRecord<'_>) {
    let now = SystemTime::now();
    if format == Format::Json {
        let tls = TlsFields::of(r.info);
        let line = ProxyJson {
            time: &iso_time(now),
            remote_addr: r.info.client.ip(),
            site: &r.info.site,
            end: r.end,
            bytes_received: r.from_client,
            bytes_sent: r.to_client,
            session_time: millis(r.duration),
            upstream_addr: r.backend,
            ssl_protocol: tls.protocol,
            ssl_cipher: tls.cipher,
            ssl_curve: tls.curve,
            ssl_server_name: r.info.sni.as_deref(),
            ssl_session_reused: r.info.resumed,
            data_path: tls.path,
            ssl_client_verify: r.info.client_cert.verify(),
            ssl_client_s_dn_cn: client_cn(r.info),
        };
        json_line(out, &line);
        return;
    }
    let mut n = itoa::Buffer::new();
    addr(out, r.info);
    out.extend_from_slice(b" [");
    with_local_time(now, |t| out.extend_from_slice(t));
    out.extend_from_slice(b"] \"");
    escaped(out, Some(r.info.site.as_bytes()));
    out.extend_from_slice(b"\" ");
    out.extend_from_slice(r.end.as_bytes());
    out.push(b' ');
    out.extend_from_slice(n.format(r.from_client).as_bytes());
    out.push(b' ');
    out.extend_from_slice(n.format(r.to_client).as_bytes());
    out.push(b' ');
    seconds(out, r.duration);
    out.extend_from_slice(b" \"");
    escaped(out, Some(r.backend.as_bytes()));
    out.extend_from_slice(b"\" ");
    tls_fields(out, r.info);
    client_fields(out, r.info);
    out.push(b'\n');
}

/// The client certificate's CN for JSON (`None`: the site asks for none;
/// `Some(None)`: no certificate or no CN).
fn client_cn(info: &ConnInfo) -> Option<Option<&str>> {
    info.client_cert
        .verify()
        .map(|_| info.client_cert.peer().and_then(|p| p.cn.as_deref()))
}

/// ` $ssl_client_verify "$ssl_client_s_dn_cn"`, on the lines of sites that
/// ask for client certificates only (the others' lines keep their fields).
fn client_fields(out: &mut Vec<u8>, info: &ConnInfo) {
    let Some(verify) = info.client_cert.verify() else {
        return;
    };
    out.push(b' ');
    out.extend_from_slice(verify.as_bytes());
    out.extend_from_slice(b" \"");
    escaped(
        out,
        info.client_cert
            .peer()
            .and_then(|p| p.cn.as_deref())
            .map(str::as_bytes),
    );
    out.push(b'"');
}

/// `$remote_addr`: the client's address without its port, written in
/// place (IPv4 by hand: `Display` through `fmt` costs more than the rest
/// of a line's fields).
fn addr(out: &mut Vec<u8>, info: &ConnInfo) {
    match info.client.ip() {
        std::net::IpAddr::V4(v4) => {
            let mut n = itoa::Buffer::new();
            for (i, o) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.push(b'.');
                }
                out.extend_from_slice(n.format(o).as_bytes());
            }
        }
        ip => {
            use std::io::Write;
            let _ = write!(out, "{ip}");
        }
    }
}

fn lossy(b: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(b)
}

/// Seconds with millisecond precision, as a number (JSON).
fn millis(d: Duration) -> f64 {
    d.as_millis() as f64 / 1000.0
}

fn json_line(out: &mut Vec<u8>, line: &impl serde::Serialize) {
    // Serializing these plain fields cannot fail; should it, the line is
    // dropped rather than half-written.
    let mark = out.len();
    if serde_json::to_writer(&mut *out, line).is_ok() {
        out.push(b'\n');
    } else {
        out.truncate(mark);
    }
}

#[derive(serde::Serialize)]
struct HttpJson<'a> {
    time: &'a str,
    remote_addr: std::net::IpAddr,
    site: &'a str,
    request: Cow<'a, str>,
    status: u16,
    body_bytes_sent: u64,
    http_referer: Option<Cow<'a, str>>,
    http_user_agent: Option<Cow<'a, str>>,
    ssl_protocol: &'a str,
    ssl_cipher: &'a str,
    ssl_curve: &'a str,
    ssl_server_name: Option<&'a str>,
    ssl_session_reused: bool,
    data_path: &'a str,
    request_time: f64,
    /// Only on sites that ask for client certificates.
    #[serde(skip_serializing_if = "Option::is_none")]
    ssl_client_verify: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ssl_client_s_dn_cn: Option<Option<&'a str>>,
}

#[derive(serde::Serialize)]
struct ProxyJson<'a> {
    time: &'a str,
    remote_addr: std::net::IpAddr,
    site: &'a str,
    end: &'a str,
    bytes_received: u64,
    bytes_sent: u64,
    session_time: f64,
    upstream_addr: &'a str,
    ssl_protocol: &'a str,
    ssl_cipher: &'a str,
    ssl_curve: &'a str,
    ssl_server_name: Option<&'a str>,
    ssl_session_reused: bool,
    data_path: &'a str,
    /// Only on sites that ask for client certificates.
    #[serde(skip_serializing_if = "Option::is_none")]
    ssl_client_verify: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ssl_client_s_dn_cn: Option<Option<&'a str>>,
}

/// The TLS fields as nginx names their values.
struct TlsFields {
    protocol: &'static str,
    cipher: &'static str,
    curve: &'static str,
    path: &'static str,
}

impl TlsFields {
    fn of(info: &ConnInfo) -> TlsFields {
        TlsFields {
            protocol: match info.version {
                Some(Version::Tls12) => "TLSv1.2",
                Some(Version::Tls13) => "TLSv1.3",
                None => "-",
            },
            cipher: info.suite.map_or("-", openssl_name),
            curve: info.group.map_or("-", openssl_group),
            path: match info.path {
                Path::Ktls => "ktls",
                Path::Userspace => "userspace",
            },
        }
    }
}

/// `$ssl_protocol $ssl_cipher $ssl_curve "$ssl_server_name"
/// $ssl_session_reused $data_path`
fn tls_fields(out: &mut Vec<u8>, info: &ConnInfo) {
    let t = TlsFields::of(info);
    out.extend_from_slice(t.protocol.as_bytes());
    out.push(b' ');
    out.extend_from_slice(t.cipher.as_bytes());
    out.push(b' ');
    out.extend_from_slice(t.curve.as_bytes());
    out.extend_from_slice(b" \"");
    escaped(out, info.sni.as_deref().map(str::as_bytes));
    out.extend_from_slice(b"\" ");
    out.push(if info.resumed { b'r' } else { b'.' });
    out.push(b' ');
    out.extend_from_slice(t.path.as_bytes());
}

/// The key exchange group as OpenSSL (and so nginx's `$ssl_curve`) names
/// it.
fn openssl_group(g: rustls::NamedGroup) -> &'static str {
    use rustls::NamedGroup as G;
    match g {
        G::secp256r1 => "prime256v1",
        other => other.as_str().unwrap_or("-"),
    }
}

/// The cipher as OpenSSL (and so nginx's `$ssl_cipher`) names it.
fn openssl_name(s: rustls::CipherSuite) -> &'static str {
    use rustls::CipherSuite as C;
    match s {
        C::TLS13_AES_128_GCM_SHA256 => "TLS_AES_128_GCM_SHA256",
        C::TLS13_AES_256_GCM_SHA384 => "TLS_AES_256_GCM_SHA384",
        C::TLS13_CHACHA20_POLY1305_SHA256 => "TLS_CHACHA20_POLY1305_SHA256",
        C::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 => "ECDHE-ECDSA-AES128-GCM-SHA256",
        C::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 => "ECDHE-ECDSA-AES256-GCM-SHA384",
        C::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 => "ECDHE-ECDSA-CHACHA20-POLY1305",
        C::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => "ECDHE-RSA-AES128-GCM-SHA256",
        C::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => "ECDHE-RSA-AES256-GCM-SHA384",
        C::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 => "ECDHE-RSA-CHACHA20-POLY1305",
        other => other.as_str().unwrap_or("-"),
    }
}

/// A quoted field's value as nginx writes it: `-` when absent or empty;
/// `"`, `\`, control bytes and bytes from 0x7f up as `\xHH` (so a line
/// can be neither split nor faked by what a client sends).
fn escaped(out: &mut Vec<u8>, v: Option<&[u8]>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    match v {
        None | Some([]) => out.push(b'-'),
        // Most values need no escape: one copy.
        Some(v)
            if v.iter()
                .all(|&b| b != b'"' && b != b'\\' && (0x20..0x7f).contains(&b)) =>
        {
            out.extend_from_slice(v)
        }
        Some(v) => {
            for &b in v {
                if b == b'"' || b == b'\\' || !(0x20..0x7f).contains(&b) {
                    out.extend_from_slice(&[
                        b'\\',
                        b'x',
                        HEX[(b >> 4) as usize],
                        HEX[(b & 15) as usize],
                    ]);
                } else {
                    out.push(b);
                }
            }
        }
    }
}

/// Seconds with millisecond precision (`$request_time`: `0.003`).
fn seconds(out: &mut Vec<u8>, d: Duration) {
    let ms = d.as_millis();
    let mut n = itoa::Buffer::new();
    out.extend_from_slice(n.format(ms / 1000).as_bytes());
    let frac = (ms % 1000) as u16;
    out.extend_from_slice(&[
        b'.',
        b'0' + (frac / 100) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ]);
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// (year, month 1-12, day) of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `$time_local` for `secs` since the epoch: `24/Nov/2026:13:32:47 +0000`.
/// Times are UTC (what a server's clock usually is; nginx writes the local
/// zone, the same on a UTC machine): no time-zone database is read.
fn local_time(secs: u64) -> String {
    let (y, m, d) = civil((secs / 86_400) as i64);
    let s = secs % 86_400;
    format!(
        "{d:02}/{}/{y}:{:02}:{:02}:{:02} +0000",
        MONTHS[(m - 1) as usize],
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// `$time_iso8601`: `2026-11-24T13:32:47+00:00`.
fn iso_time(now: SystemTime) -> String {
    let secs = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let (y, m, d) = civil((secs / 86_400) as i64);
    let s = secs % 86_400;
    format!(
        "{y}-{m:02}-{d:02}T{:02}:{:02}:{:02}+00:00",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

thread_local! {
    /// The last second formatted, and its text: a busy worker formats the
    /// time once a second, not once a line.
    static CLOCK: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

fn with_local_time(now: SystemTime, f: impl FnOnce(&[u8])) {
    let secs = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    CLOCK.with_borrow_mut(|(at, text)| {
        if *at != secs {
            *at = secs;
            *text = local_time(secs);
        }
        f(text.as_bytes());
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(resumed: bool) -> ConnInfo {
        ConnInfo {
            client: "192.0.2.7:5555".parse().unwrap(),
            local: "127.0.0.1:443".parse().unwrap(),
            version: Some(Version::Tls13),
            suite: Some(rustls::CipherSuite::TLS13_AES_256_GCM_SHA384),
            group: Some(rustls::NamedGroup::X25519MLKEM768),
            sni: Some("a.test".into()),
            alpn: None,
            resumed,
            client_cert: Default::default(),
            path: Path::Ktls,
            site: "a.test".into(),
            log: None,
            metrics: crate::metrics::Metrics::default().site(&"a.test".into()),
        }
    }

    fn record<'a>(info: &'a ConnInfo, request: &'a [u8], ua: &'a [u8]) -> HttpRecord<'a> {
        HttpRecord {
            info,
            request,
            user_agent: Some(ua),
            referer: None,
            status: 200,
            body_bytes: 1234,
            duration: Duration::from_micros(3_456_789),
        }
    }

    fn text(format: Format, r: &HttpRecord<'_>) -> String {
        let mut out = Vec::new();
        http(&mut out, format, r);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn combined_is_nginx_combined_with_its_escaping() {
        let i = info(false);
        let line = text(
            Format::Combined,
            &record(&i, b"GET /a\"b\\c\x01\xff HTTP/1.1", b"agent \"x\"\n"),
        );
        let (head, rest) = line.split_once(" [").unwrap();
        assert_eq!(head, "192.0.2.7 - -");
        let (time, rest) = rest.split_once("] ").unwrap();
        assert_eq!(time.len(), "24/Nov/2026:13:32:47 +0000".len(), "{time}");
        assert!(time.ends_with(" +0000"));
        assert_eq!(
            rest,
            "\"GET /a\\x22b\\x5Cc\\x01\\xFF HTTP/1.1\" 200 1234 \"-\" \"agent \\x22x\\x22\\x0A\"\n"
        );
        assert_eq!(line.matches('\n').count(), 1);
    }

    #[test]
    fn addresses_are_written_without_their_port() {
        for (client, want) in [
            ("192.0.2.7:5555", "192.0.2.7 - - ["),
            ("10.0.0.255:1", "10.0.0.255 - - ["),
            ("[2001:db8::1]:443", "2001:db8::1 - - ["),
        ] {
            let mut i = info(false);
            i.client = client.parse().unwrap();
            let line = text(Format::Combined, &record(&i, b"GET / HTTP/1.1", b"ua"));
            assert!(line.starts_with(want), "{line}");
        }
    }

    #[test]
    fn tls_adds_the_tls_fields_in_order() {
        let i = info(true);
        let line = text(Format::Tls, &record(&i, b"GET / HTTP/1.1", b"ua"));
        assert!(
            line.ends_with(
                "\"ua\" TLSv1.3 TLS_AES_256_GCM_SHA384 X25519MLKEM768 \"a.test\" r ktls 3.456\n"
            ),
            "{line}"
        );
        let mut i = info(false);
        i.sni = None;
        i.path = Path::Userspace;
        let line = text(Format::Tls, &record(&i, b"GET / HTTP/1.1", b"ua"));
        assert!(line.ends_with(" \"-\" . userspace 3.456\n"), "{line}");
    }

    #[test]
    fn json_round_trips_through_serde_json() {
        let i = info(true);
        let line = text(Format::Json, &record(&i, b"GET /\xff HTTP/1.1", b"a \"q\""));
        assert!(line.ends_with('\n') && line.matches('\n').count() == 1);
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["remote_addr"], "192.0.2.7");
        assert_eq!(v["request"], "GET /\u{fffd} HTTP/1.1");
        assert_eq!(v["status"], 200);
        assert_eq!(v["body_bytes_sent"], 1234);
        assert_eq!(v["http_user_agent"], "a \"q\"");
        assert!(v["http_referer"].is_null());
        assert_eq!(v["ssl_protocol"], "TLSv1.3");
        assert_eq!(v["ssl_cipher"], "TLS_AES_256_GCM_SHA384");
        assert_eq!(v["ssl_curve"], "X25519MLKEM768");
        assert_eq!(v["ssl_server_name"], "a.test");
        assert_eq!(v["ssl_session_reused"], true);
        assert_eq!(v["data_path"], "ktls");
        assert_eq!(v["request_time"], 3.456);
        assert_eq!(v["site"], "a.test");
    }

    #[test]
    fn proxy_lines() {
        let i = info(false);
        let r = ProxyRecord {
            info: &i,
            backend: "127.0.0.1:9000",
            from_client: 10,
            to_client: 20,
            duration: Duration::from_millis(1500),
            end: "done",
        };
        let mut out = Vec::new();
        proxy(&mut out, Format::Combined, &r);
        let line = String::from_utf8(out).unwrap();
        let (_, rest) = line.split_once("] ").unwrap();
        assert_eq!(
            rest,
            "\"a.test\" done 10 20 1.500 \"127.0.0.1:9000\" TLSv1.3 TLS_AES_256_GCM_SHA384 X25519MLKEM768 \"a.test\" . ktls\n"
        );
        let mut out = Vec::new();
        proxy(&mut out, Format::Json, &r);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["bytes_received"], 10);
        assert_eq!(v["bytes_sent"], 20);
        assert_eq!(v["session_time"], 1.5);
        assert_eq!(v["upstream_addr"], "127.0.0.1:9000");
        assert_eq!(v["end"], "done");
    }

    #[test]
    fn client_certificate_fields_only_on_sites_that_ask() {
        use crate::tls::client_auth::{ClientCert, PeerCert};
        let mut i = info(false);
        let http_line = |i: &ConnInfo, f| text(f, &record(i, b"GET / HTTP/1.1", b"ua"));
        let proxy_line = |i: &ConnInfo, f| {
            let r = ProxyRecord {
                info: i,
                backend: "127.0.0.1:9000",
                from_client: 1,
                to_client: 2,
                duration: Duration::from_millis(5),
                end: "done",
            };
            let mut out = Vec::new();
            proxy(&mut out, f, &r);
            String::from_utf8(out).unwrap()
        };
        // Not asked: the lines as before, no JSON keys.
        assert!(http_line(&i, Format::Tls).ends_with(" ktls 3.456\n"));
        assert!(proxy_line(&i, Format::Combined).ends_with(" ktls\n"));
        let v: serde_json::Value = serde_json::from_str(&http_line(&i, Format::Json)).unwrap();
        assert!(v.get("ssl_client_verify").is_none(), "{v}");
        // Asked, none presented.
        i.client_cert = ClientCert::Absent;
        assert!(http_line(&i, Format::Tls).ends_with(" ktls 3.456 NONE \"-\"\n"));
        let v: serde_json::Value = serde_json::from_str(&proxy_line(&i, Format::Json)).unwrap();
        assert_eq!(v["ssl_client_verify"], "NONE");
        assert!(v["ssl_client_s_dn_cn"].is_null(), "{v}");
        // Verified, with a CN that needs escaping.
        i.client_cert = ClientCert::Verified(std::sync::Arc::new(PeerCert {
            cn: Some("al\"ice".into()),
            subject: "CN=al\"ice".into(),
            this_connection: true,
        }));
        assert!(proxy_line(&i, Format::Combined).ends_with(" ktls SUCCESS \"al\\x22ice\"\n"));
        let v: serde_json::Value = serde_json::from_str(&http_line(&i, Format::Json)).unwrap();
        assert_eq!(v["ssl_client_verify"], "SUCCESS");
        assert_eq!(v["ssl_client_s_dn_cn"], "al\"ice");
    }

    #[test]
    fn times_are_formatted_as_nginx_does() {
        // 2026-11-24 13:32:47 UTC; and a leap day.
        assert_eq!(local_time(1_795_527_167), "24/Nov/2026:13:32:47 +0000");
        assert_eq!(local_time(951_782_400), "29/Feb/2000:00:00:00 +0000");
        assert_eq!(
            iso_time(UNIX_EPOCH + Duration::from_secs(1_795_527_167)),
            "2026-11-24T13:32:47+00:00"
        );
        let mut out = Vec::new();
        seconds(&mut out, Duration::from_micros(7_999));
        assert_eq!(out, b"0.007");
    }
}
