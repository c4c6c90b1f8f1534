//! TLS code points tlsfront reads or writes itself, outside rustls: alert
//! levels (alerts written before any key exists, and those read on the
//! kTLS path) and the ClientHello extensions `hello` looks at. rustls keeps
//! its own definitions in `rustls::internal`, which is not API.

/// An alert's level (RFC 8446 §6; RFC 5246 §7.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AlertLevel {
    Warning,
    Fatal,
    Unknown(u8),
}

impl From<u8> for AlertLevel {
    fn from(b: u8) -> Self {
        match b {
            1 => AlertLevel::Warning,
            2 => AlertLevel::Fatal,
            other => AlertLevel::Unknown(other),
        }
    }
}

impl From<AlertLevel> for u8 {
    fn from(l: AlertLevel) -> u8 {
        match l {
            AlertLevel::Warning => 1,
            AlertLevel::Fatal => 2,
            AlertLevel::Unknown(b) => b,
        }
    }
}

/// ClientHello extension types (IANA "TLS ExtensionType Values").
pub mod extension {
    pub const SERVER_NAME: u16 = 0;
    pub const SUPPORTED_GROUPS: u16 = 10;
    pub const ALPN: u16 = 16;
    pub const PRE_SHARED_KEY: u16 = 41;
    pub const SUPPORTED_VERSIONS: u16 = 43;
    pub const KEY_SHARE: u16 = 51;
    pub const RENEGOTIATION_INFO: u16 = 0xff01;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_round_trip() {
        for b in 0..=255u8 {
            assert_eq!(u8::from(AlertLevel::from(b)), b);
        }
        assert_eq!(AlertLevel::from(2), AlertLevel::Fatal);
    }
}
