//! The benchmark target: an `https://` URL split into what the client needs
//! (host to resolve, port, request target, `Host` header, TLS server name).
//! Only `https://`; IPv6 literals go in brackets (`https://[::1]:8443/`).

use rustls::pki_types::ServerName;
use std::net::Ipv6Addr;

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("{url:?} is not an https:// URL (tlsfront-bench speaks HTTPS only)")]
    NotHttps { url: String },
    #[error("{url:?} has no host")]
    NoHost { url: String },
    #[error("{url:?}: user names and passwords in the URL are not supported")]
    UserInfo { url: String },
    #[error("{url:?}: bad port {port:?} (give 1-65535)")]
    Port { url: String, port: String },
    #[error("{url:?}: bad IPv6 address {addr:?} (write it as https://[::1]:8443/)")]
    Ipv6 { url: String, addr: String },
    #[error("{url:?}: bad host name {host:?}")]
    Host { url: String, host: String },
    #[error("{url:?}: the path has spaces or control characters (percent-encode them)")]
    Path { url: String },
}

/// A parsed `https://` URL.
#[derive(Clone, Debug)]
pub struct Target {
    /// The URL as given.
    pub url: String,
    /// Host to resolve, without brackets.
    pub host: String,
    pub port: u16,
    /// Request target: path and query, at least "/".
    pub path: String,
    /// Value of the `Host` header.
    pub host_header: String,
    /// Name for SNI and certificate checks (an IP literal sends no SNI).
    pub server_name: ServerName<'static>,
}

/// Parse an `https://` URL.
pub fn parse(url: &str) -> Result<Target, UrlError> {
    let err_url = || url.to_string();
    let rest = match url.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("https") => rest,
        _ => return Err(UrlError::NotHttps { url: err_url() }),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, remainder) = rest.split_at(end);
    let remainder = remainder.split('#').next().unwrap_or("");
    let path = match remainder.chars().next() {
        None => "/".to_string(),
        Some('?') => format!("/{remainder}"),
        Some(_) => remainder.to_string(),
    };
    if path.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(UrlError::Path { url: err_url() });
    }
    if authority.contains('@') {
        return Err(UrlError::UserInfo { url: err_url() });
    }
    let (host, port, bracketed) = if let Some(inner) = authority.strip_prefix('[') {
        let (addr, after) = inner.split_once(']').ok_or_else(|| UrlError::Ipv6 {
            url: err_url(),
            addr: inner.to_string(),
        })?;
        if addr.parse::<Ipv6Addr>().is_err() {
            return Err(UrlError::Ipv6 {
                url: err_url(),
                addr: addr.to_string(),
            });
        }
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or_else(|| UrlError::Ipv6 {
                url: err_url(),
                addr: format!("[{addr}]{p}"),
            })?),
        };
        (addr, port, true)
    } else {
        match authority.split_once(':') {
            Some((h, p)) if p.contains(':') => {
                return Err(UrlError::Ipv6 {
                    url: err_url(),
                    addr: format!("{h}:{p}"),
                })
            }
            Some((h, p)) => (h, Some(p), false),
            None => (authority, None, false),
        }
    };
    if host.is_empty() {
        return Err(UrlError::NoHost { url: err_url() });
    }
    let port = match port {
        None => 443,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => n,
            _ => {
                return Err(UrlError::Port {
                    url: err_url(),
                    port: p.to_string(),
                })
            }
        },
    };
    let server_name = ServerName::try_from(host.to_string()).map_err(|_| UrlError::Host {
        url: err_url(),
        host: host.to_string(),
    })?;
    let shown = if bracketed {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    let host_header = if port == 443 {
        shown
    } else {
        format!("{shown}:{port}")
    };
    Ok(Target {
        url: url.to_string(),
        host: host.to_string(),
        port,
        path,
        host_header,
        server_name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hosts_ports_and_paths() {
        let t = parse("https://example.com/a/b?c=d#frag").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("example.com", 443, "/a/b?c=d")
        );
        assert_eq!(t.host_header, "example.com");
        assert!(matches!(t.server_name, ServerName::DnsName(_)));

        let t = parse("HTTPS://127.0.0.1:8443").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("127.0.0.1", 8443, "/")
        );
        assert_eq!(t.host_header, "127.0.0.1:8443");
        assert!(matches!(t.server_name, ServerName::IpAddress(_)));

        let t = parse("https://[::1]:8443/x").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("::1", 8443, "/x")
        );
        assert_eq!(t.host_header, "[::1]:8443");
        assert!(matches!(t.server_name, ServerName::IpAddress(_)));

        let t = parse("https://host?q=1").unwrap();
        assert_eq!(t.path, "/?q=1");
        assert_eq!(parse("https://[::1]/").unwrap().host_header, "[::1]");
    }

    #[test]
    fn rejects_bad_urls() {
        for (u, want) in [
            ("http://example.com/", "not an https://"),
            ("example.com", "not an https://"),
            ("https:///x", "no host"),
            ("https://u:p@h/", "user names"),
            ("https://h:0/", "bad port"),
            ("https://h:99999/", "bad port"),
            ("https://h:+1/", "bad port"),
            ("https://h:/", "bad port"),
            ("https://::1/", "IPv6"),
            ("https://[::1/", "IPv6"),
            ("https://[zz]/", "IPv6"),
            ("https://[::1]x/", "IPv6"),
            ("https://bad_host!/", "bad host"),
            ("https://h/a b", "path"),
        ] {
            let e = parse(u).unwrap_err().to_string();
            assert!(e.contains(want), "{u}: {e}");
        }
    }
}
