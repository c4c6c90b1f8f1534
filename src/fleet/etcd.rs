//! The connection to etcd: the secret files it needs (read as root by the
//! parent for a server process run as `user`), the client options, the
//! errors an operator can act on (each kind with what to fix, and a label
//! for the metrics), and the probe `config check` runs.

use super::FleetSettings;
use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, GetOptions, Identity, TlsOptions, Txn,
    TxnOp,
};
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;
use zeroize::Zeroizing;

/// How long connecting to one endpoint may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one request may take (a watch or keep-alive stream is not one
/// request).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// HTTP/2 pings on idle connections: a dead member is noticed without a
/// request failing first. Not more often than etcd's
/// `--grpc-keepalive-min-time` (5 s by default) allows.
const KEEP_ALIVE: (Duration, Duration) = (Duration::from_secs(10), Duration::from_secs(5));

/// The files `[fleet]` names, read: what connecting needs.
pub struct Secrets {
    ca: Option<Vec<u8>>,
    identity: Option<(Vec<u8>, Zeroizing<Vec<u8>>)>,
    password: Option<Zeroizing<String>>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("ca", &self.ca.is_some())
            .field("identity", &self.identity.is_some())
            .field("password", &self.password.is_some())
            .finish()
    }
}

/// What went wrong with etcd, as far as what to do about it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EtcdErrorKind {
    /// No member answered (down, wrong address, or a network fault).
    Unreachable,
    /// The TLS handshake failed (CA, client certificate).
    Tls,
    /// The user or password was refused.
    Auth,
    /// The user may not read or write the prefix.
    Permission,
    /// etcd's database is full (its NOSPACE alarm).
    NoSpace,
    /// The cluster answered too late (no leader, overload).
    Timeout,
    /// A watch's revision was compacted away.
    Compacted,
    /// Anything else etcd or the client said.
    Other,
}

impl EtcdErrorKind {
    /// Every kind, for the docs and the metrics.
    pub const ALL: [EtcdErrorKind; 8] = [
        EtcdErrorKind::Unreachable,
        EtcdErrorKind::Tls,
        EtcdErrorKind::Auth,
        EtcdErrorKind::Permission,
        EtcdErrorKind::NoSpace,
        EtcdErrorKind::Timeout,
        EtcdErrorKind::Compacted,
        EtcdErrorKind::Other,
    ];

    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            EtcdErrorKind::Unreachable => "unreachable",
            EtcdErrorKind::Tls => "tls",
            EtcdErrorKind::Auth => "auth",
            EtcdErrorKind::Permission => "permission",
            EtcdErrorKind::NoSpace => "nospace",
            EtcdErrorKind::Timeout => "timeout",
            EtcdErrorKind::Compacted => "compacted",
            EtcdErrorKind::Other => "other",
        }
    }

    /// What the operator should look at.
    pub fn hint(self) -> &'static str {
        match self {
            EtcdErrorKind::Unreachable => {
                "is etcd running and reachable there? check [fleet] endpoints"
            }
            EtcdErrorKind::Tls => {
                "check [fleet] ca (the CA of etcd's server certificates, which must name the \
                 endpoint's host), cert and key (a client certificate etcd's \
                 --trusted-ca-file accepts)"
            }
            EtcdErrorKind::Auth => "check [fleet] user and the password in password_file",
            EtcdErrorKind::Permission => {
                "give the user read and write on the prefix: etcdctl role grant-permission \
                 ROLE --prefix=true readwrite PREFIX"
            }
            EtcdErrorKind::NoSpace => {
                "etcd's database is full: compact and defragment it, then `etcdctl alarm \
                 disarm`, and set --auto-compaction-retention"
            }
            EtcdErrorKind::Timeout => "does the cluster have a leader? `etcdctl endpoint status`",
            EtcdErrorKind::Compacted => "the node reads the prefix again",
            EtcdErrorKind::Other => "see etcd's own log",
        }
    }

    /// Sort an error of the client into a kind.
    pub fn of(e: &etcd_client::Error) -> EtcdErrorKind {
        use etcd_client::Error as E;
        use tonic::Code;
        // The whole chain: tonic wraps rustls' and the socket's errors,
        // and says some of them only in its Debug form.
        let mut text = format!("{e} {e:?}").to_lowercase();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            let _ = write!(text, ": {}", s.to_string().to_lowercase());
            source = s.source();
        }
        let tls = ["certificate", "tls", "handshake", "unknownissuer", "alert"]
            .iter()
            .any(|w| text.contains(w));
        match e {
            E::GRpcStatus(s) => match s.code() {
                _ if text.contains("compacted") => EtcdErrorKind::Compacted,
                _ if text.contains("database space exceeded") => EtcdErrorKind::NoSpace,
                Code::PermissionDenied => EtcdErrorKind::Permission,
                Code::Unauthenticated => EtcdErrorKind::Auth,
                _ if text.contains("authentication failed")
                    || text.contains("invalid auth token")
                    || text.contains("user name not found") =>
                {
                    EtcdErrorKind::Auth
                }
                Code::ResourceExhausted => EtcdErrorKind::NoSpace,
                Code::Unavailable if tls => EtcdErrorKind::Tls,
                Code::Unavailable | Code::Cancelled => EtcdErrorKind::Unreachable,
                Code::DeadlineExceeded => EtcdErrorKind::Timeout,
                Code::OutOfRange => EtcdErrorKind::Compacted,
                _ if tls => EtcdErrorKind::Tls,
                _ => EtcdErrorKind::Other,
            },
            E::TransportError(_) | E::IoError(_) if tls => EtcdErrorKind::Tls,
            E::TransportError(_) | E::IoError(_) => EtcdErrorKind::Unreachable,
            _ if text.contains("timed out") || text.contains("deadline") => EtcdErrorKind::Timeout,
            _ if tls => EtcdErrorKind::Tls,
            _ => EtcdErrorKind::Other,
        }
    }
}

/// An error of the fleet's, naming the file, the setting or the endpoint.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("[fleet] {setting} {path}: {source}")]
    Read {
        setting: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("[fleet] {setting} {path}: {what}")]
    Pem {
        setting: &'static str,
        path: PathBuf,
        what: &'static str,
    },
    #[error(
        "[fleet] password_file {path}: no password on its first line: write etcd's password \
         of user {user} there"
    )]
    NoPassword { path: PathBuf, user: String },
    #[error("{0}")]
    Keys(#[from] super::seal::FleetKeyError),
    #[error("cannot start the runtime that reaches etcd: {0}")]
    Runtime(io::Error),
    #[error("etcd at {endpoints}: {op}: {detail} ({})", kind.hint())]
    Etcd {
        endpoints: String,
        op: &'static str,
        kind: EtcdErrorKind,
        detail: String,
    },
}

impl FleetError {
    /// An etcd error of operation `op` (e.g. "connect", "read PREFIX").
    pub fn etcd(endpoints: &[String], op: &'static str, e: &etcd_client::Error) -> FleetError {
        FleetError::Etcd {
            endpoints: endpoints.join(", "),
            op,
            kind: EtcdErrorKind::of(e),
            detail: describe(e),
        }
    }

    /// The kind of an etcd error (`None` for the settings' own).
    pub fn kind(&self) -> Option<EtcdErrorKind> {
        match self {
            FleetError::Etcd { kind, .. } => Some(*kind),
            _ => None,
        }
    }
}

/// An error of the client in one line: gRPC's code and message, and the
/// innermost cause (the socket's or the TLS library's), without the debug
/// dumps the client's own text carries.
fn describe(e: &etcd_client::Error) -> String {
    let mut root: Option<&dyn std::error::Error> = None;
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        root = Some(s);
        source = s.source();
    }
    let head = match e {
        etcd_client::Error::GRpcStatus(s) => {
            format!("{:?}: {}", s.code(), s.message())
        }
        // tonic's Display of a transport error is only "transport error";
        // its Debug form names the cause (e.g. rustls' certificate error).
        etcd_client::Error::TransportError(t) => format!("{t}: {t:?}"),
        other => other.to_string(),
    };
    match root {
        Some(r) if !head.contains(&r.to_string()) => format!("{head}: {r}"),
        _ => head,
    }
}

/// Read one of `[fleet]`'s files (as root through the parent, when there
/// is one: see `safe_open::read`).
fn read(setting: &'static str, path: &Path) -> Result<Vec<u8>, FleetError> {
    crate::safe_open::read(path).map_err(|source| FleetError::Read {
        setting,
        path: path.into(),
        source,
    })
}

impl Secrets {
    /// Read the files `s` names for the connection (the CA, the client
    /// certificate and key, the password), checking that each holds what
    /// it should.
    pub fn read(s: &FleetSettings) -> Result<Secrets, FleetError> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let pem = |setting, path: &Path, what| FleetError::Pem {
            setting,
            path: path.into(),
            what,
        };
        let mut secrets = Secrets {
            ca: None,
            identity: None,
            password: None,
        };
        if let Some(tls) = &s.tls {
            let ca = read("ca", &tls.ca)?;
            if CertificateDer::pem_slice_iter(&ca).next().is_none() {
                return Err(pem("ca", &tls.ca, "no PEM certificate in it"));
            }
            secrets.ca = Some(ca);
            if let Some((c, k)) = &tls.identity {
                let cert = read("cert", c)?;
                if CertificateDer::pem_slice_iter(&cert).next().is_none() {
                    return Err(pem("cert", c, "no PEM certificate in it"));
                }
                let key = Zeroizing::new(read("key", k)?);
                if PrivateKeyDer::from_pem_slice(&key).is_err() {
                    return Err(pem("key", k, "no PEM private key in it"));
                }
                secrets.identity = Some((cert, key));
            }
        }
        if let Some(auth) = &s.auth {
            let bytes = Zeroizing::new(read("password_file", &auth.password_file)?);
            let first = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
            let first = first.strip_suffix(b"\r").unwrap_or(first);
            let password = std::str::from_utf8(first).ok().filter(|p| !p.is_empty());
            match password {
                Some(p) => secrets.password = Some(Zeroizing::new(p.to_string())),
                None => {
                    return Err(FleetError::NoPassword {
                        path: auth.password_file.clone(),
                        user: auth.user.clone(),
                    })
                }
            }
        }
        Ok(secrets)
    }
}

/// The client options `s` asks for.
fn options(s: &FleetSettings, secrets: &Secrets) -> ConnectOptions {
    let mut o = ConnectOptions::new()
        .with_connect_timeout(CONNECT_TIMEOUT)
        .with_timeout(REQUEST_TIMEOUT)
        .with_keep_alive(KEEP_ALIVE.0, KEEP_ALIVE.1)
        .with_keep_alive_while_idle(true);
    if let (Some(a), Some(p)) = (&s.auth, &secrets.password) {
        o = o
            .with_user(a.user.clone(), p.as_str())
            .with_auto_token_refresh(true);
    }
    if let Some(ca) = &secrets.ca {
        let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(ca));
        if let Some((c, k)) = &secrets.identity {
            tls = tls.identity(Identity::from_pem(c, k.as_slice()));
        }
        o = o.with_tls(tls);
    }
    o
}

/// Connect to the members `s.endpoints` lists (authenticating, with a
/// user). A client over several members spreads its calls over them and
/// keeps sending some to one that is down, so a node's session uses one
/// member at a time (see `node::Node::run`); `config check` uses one per
/// member and one over all.
pub async fn connect(s: &FleetSettings, secrets: &Secrets) -> Result<Client, FleetError> {
    Client::connect(&s.endpoints, Some(options(s, secrets)))
        .await
        .map_err(|e| FleetError::etcd(&s.endpoints, "connect", &e))
}

/// `config check`: each member's version, role and database size, its
/// alarms, and whether this node may read and write its prefix (checked
/// without writing). The lines to print; an error if no member answered
/// or the prefix is out of bounds for the user.
pub async fn check(s: &FleetSettings, secrets: &Secrets) -> Result<Vec<String>, FleetError> {
    let mut lines = Vec::new();
    let mut answered = 0;
    let mut last_error = None;
    for e in &s.endpoints {
        let one = std::slice::from_ref(e);
        let status = async {
            let mut c = Client::connect(one, Some(options(s, secrets))).await?;
            let st = c.status().await?;
            let alarms = c
                .alarm(
                    etcd_client::AlarmAction::Get,
                    etcd_client::AlarmType::None,
                    None,
                )
                .await?;
            Ok::<_, etcd_client::Error>((st, alarms))
        };
        match tokio::time::timeout(REQUEST_TIMEOUT, status).await {
            Ok(Ok((st, alarms))) => {
                answered += 1;
                let member = st.header().map(|h| h.member_id()).unwrap_or_default();
                let role = if member != 0 && member == st.leader() {
                    "leader"
                } else if st.leader() == 0 {
                    "no leader"
                } else {
                    "follower"
                };
                let mut line = format!(
                    "fleet: etcd {e}: version {}, {role}, database {} KiB",
                    st.version(),
                    st.db_size() / 1024
                );
                if st.db_size_quota() > 0 {
                    let _ = write!(line, " of {} KiB", st.db_size_quota() / 1024);
                }
                let alarms: Vec<String> = alarms
                    .alarms()
                    .iter()
                    .map(|a| format!("{:?}", a.alarm()).to_uppercase())
                    .collect();
                if !alarms.is_empty() {
                    let _ = write!(line, "; ALARM {}", alarms.join(", "));
                }
                lines.push(line);
            }
            Ok(Err(err)) => {
                let err = FleetError::etcd(one, "status", &err);
                lines.push(format!("fleet: warning: {err}"));
                last_error = Some(err);
            }
            Err(_) => {
                lines.push(format!(
                    "fleet: warning: etcd at {e}: no answer within {} s ({})",
                    REQUEST_TIMEOUT.as_secs(),
                    EtcdErrorKind::Timeout.hint()
                ));
            }
        }
    }
    if answered == 0 {
        return Err(last_error.unwrap_or_else(|| FleetError::Etcd {
            endpoints: s.endpoints.join(", "),
            op: "status",
            kind: EtcdErrorKind::Timeout,
            detail: "no member answered".into(),
        }));
    }
    let mut client = connect(s, secrets).await?;
    let keys = client
        .get(
            s.prefix.as_str(),
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await
        .map_err(|e| FleetError::etcd(&s.endpoints, "read the prefix", &e))?;
    // etcd checks the permissions of both branches of a transaction before
    // it evaluates the comparison, so a put behind a comparison that
    // cannot hold tells whether the user may write, and writes nothing.
    let probe = format!("{}nodes/{}", s.prefix, s.node);
    client
        .txn(
            Txn::new()
                .when([Compare::create_revision(probe.as_str(), CompareOp::Less, 0)])
                .and_then([TxnOp::put(probe.as_str(), "", None)]),
        )
        .await
        .map_err(|e| FleetError::etcd(&s.endpoints, "check write access to the prefix", &e))?;
    lines.push(format!(
        "fleet: node {} reads and writes {} ({} keys there now){}",
        s.node,
        s.prefix,
        keys.count(),
        match &s.auth {
            Some(a) => format!(", as etcd user {}", a.user),
            None => String::new(),
        }
    ));
    Ok(lines)
}
