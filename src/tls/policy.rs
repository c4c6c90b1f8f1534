//! What one site allows in its handshakes: the protocol versions, the
//! cipher suites, the key exchange groups (in the site's order of
//! preference) and certificate compression, read from the names the config
//! file uses (`tls_versions`, `ciphers`, `kx_groups`, `cert_compression`);
//! and which group a ClientHello gets.

use rustls::crypto::{aws_lc_rs, SupportedKxGroup};
use rustls::CipherSuite;

/// A key exchange group tlsfront offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    /// The hybrid of X25519 and ML-KEM-768 (post-quantum; TLS 1.3 only).
    X25519MlKem768,
    X25519,
    /// secp256r1.
    P256,
}

impl Group {
    /// Every group, in the default order of preference: post-quantum
    /// first (every current browser offers it), then the classical ones.
    pub const ALL: [Group; 3] = [Group::X25519MlKem768, Group::X25519, Group::P256];

    /// The name the config file and messages use.
    pub fn name(self) -> &'static str {
        match self {
            Group::X25519MlKem768 => "X25519MLKEM768",
            Group::X25519 => "X25519",
            Group::P256 => "P-256",
        }
    }

    fn parse(name: &str) -> Option<Group> {
        let n = name.to_ascii_lowercase();
        match n.as_str() {
            "x25519mlkem768" => Some(Group::X25519MlKem768),
            "x25519" => Some(Group::X25519),
            // The IANA name (and the metrics' label) is secp256r1.
            "p-256" | "secp256r1" => Some(Group::P256),
            _ => None,
        }
    }

    pub fn kx(self) -> &'static dyn SupportedKxGroup {
        match self {
            Group::X25519MlKem768 => aws_lc_rs::kx_group::X25519MLKEM768,
            Group::X25519 => aws_lc_rs::kx_group::X25519,
            Group::P256 => aws_lc_rs::kx_group::SECP256R1,
        }
    }

    /// TLS 1.2 has no ML-KEM (its key exchange is ECDHE only).
    pub fn tls12(self) -> bool {
        self != Group::X25519MlKem768
    }

    /// The bit of this group in [`Offered`]'s sets.
    fn bit(self) -> u8 {
        match self {
            Group::X25519MlKem768 => 1,
            Group::X25519 => 2,
            Group::P256 => 4,
        }
    }

    /// The group of a code point in a ClientHello, if tlsfront has it.
    fn from_wire(code: u16) -> Option<Group> {
        Group::ALL
            .into_iter()
            .find(|g| u16::from(g.kx().name()) == code)
    }
}

/// The groups of tlsfront's a ClientHello lists (`supported_groups`) and
/// sends a key share for (`key_share`), and whether it offers TLS 1.3.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offered {
    pub tls13: bool,
    supported: u8,
    shares: u8,
}

impl Offered {
    /// A code point from `supported_groups`.
    pub(crate) fn supports(&mut self, code: u16) {
        if let Some(g) = Group::from_wire(code) {
            self.supported |= g.bit();
        }
    }

    /// A code point of a `key_share` entry.
    pub(crate) fn shares(&mut self, code: u16) {
        if let Some(g) = Group::from_wire(code) {
            self.shares |= g.bit();
        }
    }

    fn has(set: u8, g: Group) -> bool {
        set & g.bit() != 0
    }
}

/// A protocol version a site may speak.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    Tls12,
    Tls13,
}

impl Version {
    pub fn name(self) -> &'static str {
        match self {
            Version::Tls12 => "1.2",
            Version::Tls13 => "1.3",
        }
    }

    pub fn rustls(self) -> &'static rustls::SupportedProtocolVersion {
        match self {
            Version::Tls12 => &rustls::version::TLS12,
            Version::Tls13 => &rustls::version::TLS13,
        }
    }
}

/// The suites a site may allow: those tlsfront negotiates (the AEADs kTLS
/// carries; see `super::SUITES`), with the names `ciphers` takes. TLS 1.3
/// suites go by their IANA name (`TLS_AES_128_GCM_SHA256`, as OpenSSL's
/// `-ciphersuites`) or rustls' (`TLS13_AES_128_GCM_SHA256`, as the metrics
/// label them).
fn suite_names(s: CipherSuite) -> (&'static str, Option<&'static str>) {
    let rustls_name = s.as_str().unwrap_or("?");
    let iana = match s {
        CipherSuite::TLS13_AES_128_GCM_SHA256 => Some("TLS_AES_128_GCM_SHA256"),
        CipherSuite::TLS13_AES_256_GCM_SHA384 => Some("TLS_AES_256_GCM_SHA384"),
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256 => Some("TLS_CHACHA20_POLY1305_SHA256"),
        _ => None,
    };
    (rustls_name, iana)
}

fn suite_version(s: CipherSuite) -> Version {
    if s.as_str().is_some_and(|n| n.starts_with("TLS13_")) {
        Version::Tls13
    } else {
        Version::Tls12
    }
}

/// The setting a policy error concerns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setting {
    TlsVersions,
    Ciphers,
    KxGroups,
}

impl Setting {
    pub fn key(self) -> &'static str {
        match self {
            Setting::TlsVersions => "tls_versions",
            Setting::Ciphers => "ciphers",
            Setting::KxGroups => "kx_groups",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("{0:?} is not a TLS version tlsfront speaks: give [\"1.2\", \"1.3\"] (the default) or [\"1.3\"]")]
    UnknownVersion(String),
    #[error(
        "an empty list allows no TLS version: give [\"1.2\", \"1.3\"] (the default) or [\"1.3\"]"
    )]
    NoVersion,
    #[error("TLS 1.3 cannot be left out (tlsfront refuses a TLS_FALLBACK_SCSV retry without it as a downgrade, RFC 7507): give [\"1.2\", \"1.3\"] or [\"1.3\"]")]
    No13,
    #[error("{name:?} is not a cipher suite tlsfront offers (only the AEADs kTLS carries): give some of {valid}")]
    UnknownCipher { name: String, valid: String },
    #[error("an empty list allows no cipher suite: give some of {valid}, or leave ciphers out for all of them")]
    NoCipher { valid: String },
    #[error("no TLS {version} suite is left, and tls_versions allows TLS {version}: add one of {valid}{or}")]
    NoSuiteFor {
        version: &'static str,
        valid: String,
        or: &'static str,
    },
    #[error("{0:?} is not a key exchange group tlsfront offers: give some of X25519MLKEM768, X25519, P-256 (or its IANA name secp256r1), most preferred first")]
    UnknownGroup(String),
    #[error("an empty list allows no key exchange: give some of X25519MLKEM768, X25519, P-256, most preferred first, or leave kx_groups out for all three")]
    NoGroup,
    #[error("TLS 1.2 cannot use X25519MLKEM768 (ML-KEM is TLS 1.3 only), and tls_versions allows TLS 1.2: add X25519 or P-256, or set tls_versions = [\"1.3\"]")]
    NoGroupFor12,
}

impl PolicyError {
    /// The setting to fix.
    pub fn setting(&self) -> Setting {
        match self {
            PolicyError::UnknownVersion(_) | PolicyError::NoVersion | PolicyError::No13 => {
                Setting::TlsVersions
            }
            PolicyError::UnknownCipher { .. }
            | PolicyError::NoCipher { .. }
            | PolicyError::NoSuiteFor { .. } => Setting::Ciphers,
            PolicyError::UnknownGroup(_) | PolicyError::NoGroup | PolicyError::NoGroupFor12 => {
                Setting::KxGroups
            }
        }
    }
}

/// A site's handshake policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Policy {
    /// At least TLS 1.3.
    pub versions: Vec<Version>,
    /// Which of tlsfront's suites are allowed (the client's order picks
    /// among them, as rustls does by default).
    pub suites: Vec<CipherSuite>,
    /// Key exchange groups, most preferred first.
    pub groups: Vec<Group>,
    /// Offer RFC 8879 certificate compression (brotli, zlib) to TLS 1.3
    /// clients that ask for it.
    pub cert_compression: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            versions: vec![Version::Tls13, Version::Tls12],
            suites: super::SUITES.to_vec(),
            groups: Group::ALL.to_vec(),
            cert_compression: true,
        }
    }
}

/// Every name `ciphers` takes, for messages (TLS 1.3 ones by their IANA
/// name), optionally of one version only.
fn valid_ciphers(only: Option<Version>) -> String {
    super::SUITES
        .iter()
        .filter(|s| only.is_none_or(|v| suite_version(**s) == v))
        .map(|s| {
            let (r, iana) = suite_names(*s);
            iana.unwrap_or(r)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl Policy {
    /// The policy of these settings as written (`None`: left out, the
    /// default).
    pub fn from_names(
        versions: Option<&[String]>,
        ciphers: Option<&[String]>,
        groups: Option<&[String]>,
        cert_compression: Option<bool>,
    ) -> Result<Policy, PolicyError> {
        let mut p = Policy::default();
        if let Some(v) = versions {
            if v.is_empty() {
                return Err(PolicyError::NoVersion);
            }
            let mut out = Vec::new();
            for n in v {
                let ver = match n.trim() {
                    "1.2" => Version::Tls12,
                    "1.3" => Version::Tls13,
                    _ => return Err(PolicyError::UnknownVersion(n.clone())),
                };
                if !out.contains(&ver) {
                    out.push(ver);
                }
            }
            if !out.contains(&Version::Tls13) {
                return Err(PolicyError::No13);
            }
            out.sort_by_key(|v| *v != Version::Tls13);
            p.versions = out;
        }
        if let Some(c) = ciphers {
            if c.is_empty() {
                return Err(PolicyError::NoCipher {
                    valid: valid_ciphers(None),
                });
            }
            let mut chosen = Vec::new();
            for n in c {
                let upper = n.trim().to_ascii_uppercase();
                let suite = super::SUITES.iter().copied().find(|s| {
                    let (r, iana) = suite_names(*s);
                    r == upper || iana == Some(upper.as_str())
                });
                match suite {
                    Some(s) => chosen.push(s),
                    None => {
                        return Err(PolicyError::UnknownCipher {
                            name: n.clone(),
                            valid: valid_ciphers(None),
                        })
                    }
                }
            }
            // rustls' order (the client's preference picks among them).
            p.suites.retain(|s| chosen.contains(s));
        }
        for v in &p.versions {
            if !p.suites.iter().any(|s| suite_version(*s) == *v) {
                return Err(PolicyError::NoSuiteFor {
                    version: v.name(),
                    valid: valid_ciphers(Some(*v)),
                    or: match v {
                        Version::Tls12 => ", or set tls_versions = [\"1.3\"]",
                        Version::Tls13 => "",
                    },
                });
            }
        }
        if let Some(g) = groups {
            if g.is_empty() {
                return Err(PolicyError::NoGroup);
            }
            let mut out = Vec::new();
            for n in g {
                let group = Group::parse(n.trim()).ok_or(PolicyError::UnknownGroup(n.clone()))?;
                if !out.contains(&group) {
                    out.push(group);
                }
            }
            p.groups = out;
        }
        if p.versions.contains(&Version::Tls12) && !p.groups.iter().any(|g| g.tls12()) {
            return Err(PolicyError::NoGroupFor12);
        }
        if let Some(c) = cert_compression {
            p.cert_compression = c;
        }
        Ok(p)
    }

    /// The versions for rustls.
    pub fn rustls_versions(&self) -> Vec<&'static rustls::SupportedProtocolVersion> {
        self.versions.iter().map(|v| v.rustls()).collect()
    }

    /// The group a client with this ClientHello gets, in the site's order
    /// of preference: for TLS 1.3, the first group the client sent a key
    /// share for (no HelloRetryRequest), else the first it lists (one
    /// HelloRetryRequest); for TLS 1.2, the first it lists that TLS 1.2
    /// can use. `None`: the client lists none of the site's groups (the
    /// handshake fails as rustls decides).
    pub fn choose_group(&self, offered: &Offered) -> Option<Group> {
        let tls13 = offered.tls13 && self.versions.contains(&Version::Tls13);
        let listed = |g: &&Group| Offered::has(offered.supported, **g);
        if tls13 {
            self.groups
                .iter()
                .find(|g| Offered::has(offered.shares, **g) && listed(g))
                .or_else(|| self.groups.iter().find(listed))
                .copied()
        } else {
            self.groups
                .iter()
                .filter(|g| g.tls12())
                .find(listed)
                .copied()
        }
    }

    /// One line for `config check` when it is not the default.
    pub fn describe(&self) -> Option<String> {
        if *self == Policy::default() {
            return None;
        }
        let versions: Vec<&str> = self.versions.iter().map(|v| v.name()).collect();
        let suites: Vec<&str> = self
            .suites
            .iter()
            .map(|s| {
                let (r, iana) = suite_names(*s);
                iana.unwrap_or(r)
            })
            .collect();
        let groups: Vec<&str> = self.groups.iter().map(|g| g.name()).collect();
        Some(format!(
            "TLS {}; ciphers {}; key exchange {}; certificate compression {}",
            versions.join(", "),
            suites.join(", "),
            groups.join(", "),
            if self.cert_compression {
                "brotli, zlib"
            } else {
                "off"
            }
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::NamedGroup;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn defaults_prefer_post_quantum_and_allow_everything() {
        let p = Policy::from_names(None, None, None, None).unwrap();
        assert_eq!(p, Policy::default());
        assert_eq!(p.groups[0], Group::X25519MlKem768);
        assert!(p.cert_compression);
        assert!(p.describe().is_none());
    }

    #[test]
    fn names_are_read_and_bad_ones_refused_naming_the_valid_ones() {
        let p = Policy::from_names(
            Some(&names(&["1.3"])),
            Some(&names(&[
                "TLS_AES_128_GCM_SHA256",
                "tls13_chacha20_poly1305_sha256",
            ])),
            Some(&names(&["secp256r1", "X25519"])),
            Some(false),
        )
        .unwrap();
        assert_eq!(p.versions, [Version::Tls13]);
        assert_eq!(
            p.suites,
            [
                CipherSuite::TLS13_AES_128_GCM_SHA256,
                CipherSuite::TLS13_CHACHA20_POLY1305_SHA256
            ]
        );
        assert_eq!(p.groups, [Group::P256, Group::X25519]);
        assert!(!p.cert_compression);
        assert!(p.describe().unwrap().contains("key exchange P-256, X25519"));

        let err = |v: Option<&[&str]>, c: Option<&[&str]>, g: Option<&[&str]>| {
            let (v, c, g) = (v.map(names), c.map(names), g.map(names));
            Policy::from_names(v.as_deref(), c.as_deref(), g.as_deref(), None).unwrap_err()
        };
        let e = err(None, None, Some(&["X448"]));
        assert_eq!(e.setting(), Setting::KxGroups);
        assert!(
            e.to_string().contains("X25519MLKEM768, X25519, P-256"),
            "{e}"
        );
        assert_eq!(err(None, None, Some(&[])).setting(), Setting::KxGroups);
        // TLS 1.2 needs a classical group.
        let e = err(None, None, Some(&["X25519MLKEM768"]));
        assert!(matches!(e, PolicyError::NoGroupFor12), "{e}");
        assert!(Policy::from_names(
            Some(&names(&["1.3"])),
            None,
            Some(&names(&["X25519MLKEM768"])),
            None
        )
        .is_ok());
        for v in [&[][..], &["1.1"], &["1.2"]] {
            assert_eq!(err(Some(v), None, None).setting(), Setting::TlsVersions);
        }
        let e = err(None, Some(&["TLS_RSA_WITH_AES_128_CBC_SHA"]), None);
        assert_eq!(e.setting(), Setting::Ciphers);
        assert!(
            e.to_string().contains("TLS_AES_128_GCM_SHA256")
                && e.to_string()
                    .contains("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"),
            "{e}"
        );
        assert_eq!(err(None, Some(&[]), None).setting(), Setting::Ciphers);
        // Only TLS 1.3 suites while 1.2 is allowed: none left for 1.2.
        let e = err(None, Some(&["TLS_AES_256_GCM_SHA384"]), None);
        assert!(e.to_string().contains("no TLS 1.2 suite"), "{e}");
        let e = err(
            Some(&["1.3"]),
            Some(&["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]),
            None,
        );
        assert!(e.to_string().contains("no TLS 1.3 suite"), "{e}");
    }

    #[test]
    fn the_group_is_the_sites_first_with_a_share_then_the_first_listed() {
        let offer = |tls13: bool, supported: &[Group], shares: &[Group]| {
            let mut o = Offered {
                tls13,
                ..Default::default()
            };
            supported
                .iter()
                .for_each(|g| o.supports(u16::from(g.kx().name())));
            shares
                .iter()
                .for_each(|g| o.shares(u16::from(g.kx().name())));
            o.supports(u16::from(NamedGroup::X448));
            o
        };
        use Group::*;
        let p = Policy::default();
        let both = [X25519MlKem768, X25519, P256];
        assert_eq!(
            p.choose_group(&offer(true, &both, &[X25519MlKem768, X25519])),
            Some(X25519MlKem768)
        );
        // Only an X25519 share: X25519, with no HelloRetryRequest.
        assert_eq!(p.choose_group(&offer(true, &both, &[X25519])), Some(X25519));
        // No share the site takes: the site's first listed (a retry).
        assert_eq!(
            p.choose_group(&offer(true, &[P256, X25519MlKem768], &[])),
            Some(X25519MlKem768)
        );
        assert_eq!(p.choose_group(&offer(false, &both, &[])), Some(X25519));
        assert_eq!(p.choose_group(&offer(true, &[], &[])), None);
        let classic = Policy {
            groups: vec![P256, X25519],
            ..Policy::default()
        };
        assert_eq!(
            classic.choose_group(&offer(true, &both, &[X25519MlKem768, X25519])),
            Some(X25519)
        );
        assert_eq!(
            classic.choose_group(&offer(true, &both, &[P256, X25519])),
            Some(P256)
        );
    }
}
