//! `[fleet]` as written ([`FleetFile`]) resolved into the typed
//! [`FleetSettings`]: every value checked, every error naming the setting
//! and what to write instead. Files are only named here; they are read
//! where they are used (by the parent as root, or by `config check`).

use super::file::FleetFile;
use super::ConfigError;
use crate::fleet::{
    EtcdAuth, EtcdTls, FleetSettings, DEFAULT_LOCK_TTL, DEFAULT_PREFIX, LOCK_TTL_RANGE,
};
use std::time::Duration;

/// Longest node name: it is part of etcd keys and log lines.
const MAX_NODE: usize = 64;

/// Resolve `[fleet]`; `o(key)` says where `[fleet] key` was set.
pub fn resolve(f: &FleetFile, o: &dyn Fn(&str) -> String) -> Result<FleetSettings, ConfigError> {
    let invalid = |key: &str, message: String| ConfigError::Invalid {
        origin: o(&format!("[fleet] {key}")),
        message,
    };
    if f.endpoints.is_empty() {
        return Err(invalid(
            "endpoints",
            "the fleet shares its state through etcd: add endpoints = \
             [\"https://10.0.0.1:2379\", …] (etcd's client URLs)"
                .into(),
        ));
    }
    let mut https = None;
    for e in &f.endpoints {
        let secure = endpoint_scheme(e).map_err(|m| invalid("endpoints", m))?;
        match https {
            Some(h) if h != secure => {
                return Err(invalid(
                    "endpoints",
                    "some endpoints are http:// and some https://: etcd serves one or the \
                     other on its client port; use one scheme for all"
                        .into(),
                ))
            }
            _ => https = Some(secure),
        }
    }
    let https = https.unwrap_or(false);
    let tls = match (&f.ca, &f.cert, &f.key) {
        (None, None, None) if https => {
            return Err(invalid(
                "ca",
                "the endpoints are https://: give ca = \"/etc/tlsfront/etcd-ca.pem\", the CA \
                 that issued etcd's server certificates"
                    .into(),
            ))
        }
        (None, None, None) => None,
        (_, _, _) if !https => {
            let key = if f.ca.is_some() {
                "ca"
            } else if f.cert.is_some() {
                "cert"
            } else {
                "key"
            };
            return Err(invalid(
                key,
                "TLS settings, and the endpoints are http://: write them as https:// (etcd \
                 with --cert-file) or leave ca, cert and key out"
                    .into(),
            ));
        }
        (None, _, _) => {
            return Err(invalid(
                "ca",
                "missing: give the CA that issued etcd's server certificates".into(),
            ))
        }
        (Some(ca), Some(c), Some(k)) => Some(EtcdTls {
            ca: ca.clone(),
            identity: Some((c.clone(), k.clone())),
        }),
        (Some(ca), None, None) => Some(EtcdTls {
            ca: ca.clone(),
            identity: None,
        }),
        (Some(_), Some(_), None) => {
            return Err(invalid(
                "cert",
                "a client certificate needs its key: add key = \"…\"".into(),
            ))
        }
        (Some(_), None, Some(_)) => {
            return Err(invalid(
                "key",
                "a client key needs its certificate: add cert = \"…\"".into(),
            ))
        }
    };
    let auth = match (&f.user, &f.password_file) {
        (None, None) => None,
        (Some(u), Some(p)) if !u.is_empty() => Some(EtcdAuth {
            user: u.clone(),
            password_file: p.clone(),
        }),
        (Some(_), Some(_)) => return Err(invalid("user", "empty: give etcd's user name".into())),
        (Some(_), None) => {
            return Err(invalid(
                "user",
                "etcd's password is read from a file: add password_file = \
                 \"/etc/tlsfront/etcd.password\""
                    .into(),
            ))
        }
        (None, Some(_)) => {
            return Err(invalid(
                "password_file",
                "whose password? add user = \"…\" (etcd's user)".into(),
            ))
        }
    };
    if f.key_files.is_empty() {
        return Err(invalid(
            "key_files",
            "private keys are sealed before they go to etcd: add key_files = \
             [\"/etc/tlsfront/fleet.key\"] (made once with `openssl rand 32`, the same file on \
             every node)"
                .into(),
        ));
    }
    let prefix = match &f.prefix {
        None => DEFAULT_PREFIX.to_string(),
        Some(p) => prefix(p).map_err(|m| invalid("prefix", m))?,
    };
    let node = match &f.node {
        Some(n) => node_name(n).map_err(|m| invalid("node", m))?,
        None => {
            let host = rustix::system::uname()
                .nodename()
                .to_string_lossy()
                .into_owned();
            node_name(&host).map_err(|m| {
                invalid(
                    "node",
                    format!(
                        "unset, and the host name {host:?} will not do ({m}): set node = \"…\""
                    ),
                )
            })?
        }
    };
    let lock_ttl = match f.lock_ttl {
        None => DEFAULT_LOCK_TTL,
        Some(t) => {
            super::in_range(
                &o("[fleet] lock_ttl"),
                t,
                LOCK_TTL_RANGE,
                "a number of seconds from 10 to 300",
            )?;
            Duration::from_secs(t)
        }
    };
    let ticket_period = match f.ticket_period {
        None => crate::tls::tickets::DEFAULT_ROTATION,
        Some(t) => {
            super::in_range(
                &o("[fleet] ticket_period"),
                t,
                crate::fleet::TICKET_PERIOD_RANGE,
                "a number of seconds from 10 to 259200 (three days)",
            )?;
            Duration::from_secs(t)
        }
    };
    Ok(FleetSettings {
        endpoints: f.endpoints.clone(),
        prefix,
        node,
        key_files: f.key_files.clone(),
        tls,
        auth,
        lock_ttl,
        order: f.order.unwrap_or(true),
        ticket_period,
    })
}

/// Whether `e` is an `https://` endpoint; what is wrong with it otherwise.
fn endpoint_scheme(e: &str) -> Result<bool, String> {
    let (https, rest) = if let Some(r) = e.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = e.strip_prefix("http://") {
        (false, r)
    } else {
        return Err(format!(
            "{e:?}: write etcd's client URL, http://HOST:PORT or https://HOST:PORT"
        ));
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    let port_ok = authority
        .rsplit_once(':')
        .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p != 0));
    if authority.contains('/') || !port_ok {
        return Err(format!(
            "{e:?}: write HOST:PORT after the scheme (etcd's client port, usually 2379)"
        ));
    }
    Ok(https)
}

/// The prefix as given, with a `/` at the end so that `/a` and `/ab`
/// cannot overlap.
fn prefix(p: &str) -> Result<String, String> {
    if !p.starts_with('/') || p.len() < 2 {
        return Err(format!(
            "{p:?}: give a key path such as \"/tlsfront/\" (not \"/\", which is every key)"
        ));
    }
    if p.chars().any(|c| c.is_control()) {
        return Err(format!("{p:?}: control characters are not allowed"));
    }
    Ok(if p.ends_with('/') {
        p.to_string()
    } else {
        format!("{p}/")
    })
}

/// A node name: letters, digits, `.`, `-`, `_`; it becomes part of keys.
fn node_name(n: &str) -> Result<String, String> {
    if n.is_empty() || n.len() > MAX_NODE {
        return Err(format!("{n:?}: give 1 to {MAX_NODE} characters"));
    }
    if !n
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    {
        return Err(format!("{n:?}: use letters, digits, '.', '-' and '_' only"));
    }
    Ok(n.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(extra: &str) -> FleetFile {
        toml::from_str(&format!(
            "endpoints = [\"http://127.0.0.1:2379\"]\nkey_files = [\"/k\"]\nnode = \"a\"\n{extra}"
        ))
        .expect("parses")
    }

    fn err(f: &FleetFile) -> String {
        resolve(f, &|k| k.to_string()).unwrap_err().to_string()
    }

    #[test]
    fn defaults() {
        let s = resolve(&file(""), &|k| k.to_string()).unwrap();
        assert_eq!(s.prefix, "/tlsfront/");
        assert_eq!(s.lock_ttl, DEFAULT_LOCK_TTL);
        assert!(s.order && s.tls.is_none() && s.auth.is_none());
        assert_eq!(s.node, "a");
    }

    #[test]
    fn refusals_name_the_setting() {
        let mut f = file("");
        f.endpoints = vec!["127.0.0.1:2379".into()];
        assert!(err(&f).contains("[fleet] endpoints"), "{}", err(&f));
        f.endpoints = vec![
            "http://127.0.0.1:2379".into(),
            "https://127.0.0.2:2379".into(),
        ];
        assert!(err(&f).contains("one scheme"), "{}", err(&f));
        f.endpoints = vec!["https://127.0.0.1:2379".into()];
        assert!(err(&f).contains("[fleet] ca"), "{}", err(&f));
        let f = file("ca = \"/ca.pem\"");
        assert!(err(&f).contains("https://"), "{}", err(&f));
        let f = file("user = \"u\"");
        assert!(err(&f).contains("password_file"), "{}", err(&f));
        let f = file("prefix = \"/\"");
        assert!(err(&f).contains("[fleet] prefix"), "{}", err(&f));
        let mut f = file("");
        f.node = Some("a/b".into());
        assert!(err(&f).contains("[fleet] node"), "{}", err(&f));
        let f = file("lock_ttl = 5");
        assert!(err(&f).contains("[fleet] lock_ttl"), "{}", err(&f));
        let mut f = file("");
        f.key_files.clear();
        assert!(err(&f).contains("openssl rand 32"), "{}", err(&f));
    }

    #[test]
    fn tls_and_auth() {
        let mut f = file(
            "ca = \"/ca.pem\"\ncert = \"/c.pem\"\nkey = \"/k.pem\"\nuser = \"u\"\n\
             password_file = \"/p\"\nprefix = \"/t\"",
        );
        f.endpoints = vec!["https://127.0.0.1:2379/".into()];
        let s = resolve(&f, &|k| k.to_string()).unwrap();
        assert_eq!(s.prefix, "/t/");
        assert_eq!(s.secret_files().count(), 5);
        assert!(s.tls.unwrap().identity.is_some());
        assert_eq!(s.auth.unwrap().user, "u");
    }
}
