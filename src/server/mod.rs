//! The process model every site runs in. One thread per worker, each with
//! its own current-thread tokio runtime and its own `SO_REUSEPORT` listener
//! per address (the nginx/stud model: the kernel spreads connections, no
//! work stealing). Workers share the [`Sites`] (swapped whole on SIGHUP),
//! the TLS session cache and ticket keys, the kTLS probe and the counters.
//! Each accepted connection gets the TLS front ([`worker`]): `TCP_ULP`, the
//! handshake, which picks the site by the name asked for, the choice of
//! data path; then the site's service takes over.

mod admin;
mod certs;
pub(crate) mod handover;
mod plain;
pub(crate) mod sites;
pub(crate) mod timer;
mod worker;

pub use handover::UpgradeError;

use crate::config::settings::OpenFileCache;
use crate::config::{secs, ConfigError, KtlsMode, ProxyVersion, Settings, Timeouts};
use crate::ktls::stream::KtlsStream;
use crate::ktls::{Support, Version};
use crate::lograte::LogLimit;
use crate::metrics::Metrics;
use crate::sys;
use crate::tls::tickets::{KeyFiles, TicketKeys, DEFAULT_ROTATION};
use crate::tls::userspace::UserTls;
use crate::tls::{TlsOptions, TlsShared};
use arc_swap::ArcSwap;
use sites::{SiteJob, Sites};
use socket2::{Domain, Socket, Type};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use tokio::sync::watch;

/// What every worker shares, whatever the sites.
pub(crate) struct Front {
    /// The sites, as last loaded; a connection keeps the ones it started
    /// with until it ends.
    pub sites: ArcSwap<Sites>,
    /// Session cache and ticket keys, for the life of the process.
    pub shared: TlsShared,
    pub ktls: Support,
    pub metrics: Metrics,
    /// Process-wide timeouts: the handshake (before any site is known) and
    /// shutdown.
    pub timeouts: Timeouts,
    /// Warnings a flood of clients could repeat, at most one per kind per
    /// interval.
    pub log: LogLimit,
    /// TLS-ALPN-01 answers being given, for the ACME CA's validation.
    pub challenges: crate::acme::Challenges,
    /// The configuration that answers them.
    pub challenge_config: Arc<rustls::ServerConfig>,
    /// The port the plain-HTTP listener's redirects name (the first TLS
    /// listener's).
    pub https_port: u16,
    /// Woken when new sites are swapped in (reload, or certificates from
    /// the fleet).
    pub sites_changed: tokio::sync::Notify,
    /// This node of a fleet (`[fleet]`), if any.
    pub fleet: Option<Arc<crate::fleet::node::Node>>,
    /// Connections each worker takes at once: what the open-file limit
    /// leaves beside the descriptors the sites hold, computed again at
    /// each reload ([`Budget`]).
    pub connection_limit: AtomicUsize,
}

/// What the per-worker connection limit is computed from, besides the
/// sites: fixed at start (what changes them takes a restart).
struct Budget {
    /// `[limits] connections`, if set.
    requested: Option<usize>,
    workers: usize,
    /// Files each worker's open-file cache keeps.
    cache: usize,
    /// The open-file limit (`None`: unlimited).
    fds: Option<u64>,
}

impl Budget {
    /// The limit for `sites`, with the descriptors held now (document
    /// roots, access logs) set aside, and what to say about it.
    fn fit(&self, sites: &Sites) -> (usize, Option<Note>) {
        let reserve = FD_RESERVE
            + crate::files::open_roots()
            + crate::accesslog::sink::open_files()
            + (self.cache as u64).saturating_mul(self.workers as u64);
        fit_connections(
            self.requested,
            self.workers,
            sites.fds_per_connection(),
            reserve,
            self.fds,
        )
    }
}

/// Open connections per worker unless set otherwise (nginx's
/// `worker_connections` defaults lower, HAProxy sizes `maxconn` to the
/// open-file limit: this is the latter with a ceiling).
pub const DEFAULT_CONNECTIONS: usize = 10_000;

/// A TLS connection after its handshake, on the data path it was given.
pub(crate) enum Tls {
    Kernel(Box<KtlsStream>),
    User(Box<UserTls>),
}

/// What is known about a connection once its handshake is done.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// The client: the TCP peer, or the address a trusted PROXY header gave.
    pub client: SocketAddr,
    /// Our address as the client reached it (or the PROXY header's).
    pub local: SocketAddr,
    pub version: Option<Version>,
    /// The negotiated suite, IANA name (e.g. `TLS13_AES_128_GCM_SHA256`).
    pub suite: Option<rustls::CipherSuite>,
    /// The key exchange group (`None`: a TLS 1.2 resumption, which
    /// exchanges no key).
    pub group: Option<rustls::NamedGroup>,
    /// SNI, if the client sent one.
    pub sni: Option<String>,
    pub alpn: Option<Vec<u8>>,
    /// The session was resumed (abbreviated handshake).
    pub resumed: bool,
    /// The client's certificate, verified (by the site's `client_ca`), if
    /// it presented one in this handshake or the session's first; or
    /// whether the site asked for one.
    pub client_cert: crate::tls::client_auth::ClientCert,
    /// Where the records are sealed: the kernel or user space.
    pub path: crate::transport::Path,
    /// The site that took the connection ([`crate::config::Site::label`]).
    pub site: std::sync::Arc<str>,
    /// That site's counters, resolved once per site, not per count.
    pub metrics: std::sync::Arc<crate::metrics::SiteMetrics>,
    /// The site's access log, if it keeps one.
    pub log: Option<crate::accesslog::SiteLog>,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsConfigError),
    #[error(transparent)]
    Root(#[from] crate::files::RootError),
    #[error("{origin}: {message}")]
    Site { origin: String, message: String },
    #[error("{0}")]
    Fleet(#[from] crate::fleet::etcd::FleetError),
    #[error("{0}")]
    FleetKeys(#[from] crate::fleet::seal::FleetKeyError),
    #[error("setting ticket_keys: {0}")]
    TicketKeys(#[from] crate::tls::tickets::TicketKeyError),
    #[error("ktls = \"require\" (--ktls require): {0}")]
    KtlsRequired(String),
    #[error("cannot listen on {addr}: {source}{hint}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
        hint: &'static str,
    },
    #[error("cannot use the inherited listening socket on {addr}: {source}")]
    Inherited {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot listen on the admin address {addr}: {source} (setting admin: pick another address, or leave it out)")]
    Admin {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start: {0}")]
    Runtime(std::io::Error),
    #[error(transparent)]
    Privilege(#[from] crate::privileges::PrivilegeError),
    #[error("starting the server process: {0}")]
    ServerProcess(handover::UpgradeError),
    #[error("the server process keeps exiting (last: {0}); its errors are above")]
    Crashed(String),
    #[error(transparent)]
    PidFile(#[from] crate::pid_file::PidFileError),
    #[error("as the server process of tlsfront's parent: {0}")]
    Link(#[from] crate::privsep::LinkError),
}

/// Which process of tlsfront this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The only one: it binds, reads and serves itself.
    Alone,
    /// The server process of a privileged parent (this pid), which holds
    /// the sockets, reads the keys and does reloads and upgrades.
    Child { parent: u32 },
}

/// Reads the settings again (SIGHUP): the config file and the flags given
/// at start.
pub type Reload = Box<dyn Fn() -> Result<Settings, ConfigError>>;

/// Probe the kernel as the settings ask.
pub(crate) fn ktls_support(mode: KtlsMode) -> Result<Support, StartError> {
    let support = match mode {
        KtlsMode::Off => Support::disabled(),
        _ => Support::probe(),
    };
    if mode == KtlsMode::Require && !support.fully_usable() {
        return Err(StartError::KtlsRequired(format!(
            "{}: refusing to start (run 'tlsfront check' for the fix, or set ktls = \"auto\")",
            support.verdict()
        )));
    }
    Ok(support)
}

/// What is said for each bound address: what `serve` and `proxy` always
/// said for their one site, or the listener and its sites.
fn announce(settings: &Settings, sites: &Sites, addr: SocketAddr) -> String {
    let w = settings.workers;
    let workers = format!("{w} worker{}", if w == 1 { "" } else { "s" });
    match (sites.len(), sites.first_job()) {
        (1, Some(SiteJob::Files(f))) if settings.sites[0].names.is_empty() => {
            format!(
                "serving {} on https://{addr}/ with {workers}",
                f.root_path().display()
            )
        }
        (1, Some(SiteJob::Proxy(p))) if settings.sites[0].names.is_empty() => {
            format!(
                "proxying https://{addr}/ to {}{} with {workers}",
                p.backend(),
                pp(p.write_proxy())
            )
        }
        (n, _) => format!(
            "listening on https://{addr}/ with {workers} for {n} site{}",
            if n == 1 { "" } else { "s" }
        ),
    }
}

fn pp(v: Option<ProxyVersion>) -> &'static str {
    match v {
        Some(ProxyVersion::V1) => ", PROXY v1",
        Some(ProxyVersion::V2) => ", PROXY v2",
        None => "",
    }
}

/// One line per site, for a server with names.
fn describe_sites(settings: &Settings) -> Vec<String> {
    if settings.sites.len() == 1 && settings.sites[0].names.is_empty() {
        return Vec::new();
    }
    settings
        .sites
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let what = match &s.job {
                crate::config::Job::Files(f) => format!("files from {}", f.root.display()),
                crate::config::Job::Backend(b) => {
                    format!("TLS for {}{}", b.addr, pp(b.write_proxy))
                }
            };
            let default = if i == settings.default_site {
                " (default)"
            } else {
                ""
            };
            format!("site {}{default}: {what}", s.names.join(", "))
        })
        .collect()
}

fn bind_hint(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::AddrInUse => {
            " (another process uses this port: stop it or pick another with --listen)"
        }
        std::io::ErrorKind::PermissionDenied => {
            " (ports below 1024 need root or CAP_NET_BIND_SERVICE: pick another with --listen)"
        }
        std::io::ErrorKind::AddrNotAvailable => {
            " (this machine has no such address: check --listen)"
        }
        _ => "",
    }
}

/// A non-blocking listener; `defer_secs`: see [`sys::set_defer_accept`]
/// (TLS clients always speak first).
fn listener(addr: SocketAddr, defer_secs: u32) -> std::io::Result<std::net::TcpListener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    sock.set_reuse_address(true)?;
    sock.set_reuse_port(true)?;
    if addr.is_ipv6() {
        sock.set_only_v6(true)?;
    }
    sock.set_nonblocking(true)?;
    // Linux copies TCP_NODELAY from the listener to every socket accept()
    // returns: set once here, not once per connection.
    sock.set_tcp_nodelay(true)?;
    sys::set_defer_accept(sock.as_fd(), defer_secs)?;
    sock.bind(&addr.into())?;
    sock.listen(1024)?;
    Ok(sock.into())
}

/// The listeners share their address with `SO_REUSEPORT`, which the
/// kernel grants to every socket of the same user: a second tlsfront (or
/// anything of the same user) could join them and take a share of the
/// connections unnoticed. So the address is first bound without it, as
/// nginx binds, and one in use is refused. Only an upgrade and socket
/// activation share, and they hand the sockets on rather than bind.
fn refuse_if_taken(addr: SocketAddr) -> Result<(), StartError> {
    let probe = Socket::new(Domain::for_address(addr), Type::STREAM, None).and_then(|s| {
        s.set_reuse_address(true)?;
        if addr.is_ipv6() {
            s.set_only_v6(true)?;
        }
        s.bind(&addr.into())
    });
    match probe {
        Err(source) if source.kind() == std::io::ErrorKind::AddrInUse => Err(StartError::Bind {
            addr,
            source,
            hint: " (another process listens there: a second tlsfront? Stop it, or upgrade the \
                   running one with SIGUSR2 rather than starting another)",
        }),
        // Anything else is for the real bind to report.
        _ => Ok(()),
    }
}

type PerWorker = Vec<Vec<std::net::TcpListener>>;

/// The listeners, per worker and per address.
struct Bound {
    /// The TLS listeners.
    per_worker: PerWorker,
    /// Each configured address as it is bound (port 0 resolved).
    addrs: Vec<SocketAddr>,
    /// The plain-HTTP (`http_listen`) listeners, and their addresses.
    http_per_worker: PerWorker,
    http_addrs: Vec<SocketAddr>,
    /// One duplicate of every distinct listening socket, kept to hand on
    /// to a new process on SIGUSR2.
    handover: Vec<handover::Handed>,
}

/// One listener per worker for each address (port 0: the first gets a
/// port, the others share it), or the sockets inherited for it; each
/// added to `handover` under `name`. Returns the listeners per worker and
/// the addresses as bound.
fn bind_all(
    listen: &[SocketAddr],
    workers: usize,
    defer_secs: u32,
    inherited: &mut Vec<(SocketAddr, std::net::TcpListener)>,
    quiet: bool,
    (handover, name): (&mut Vec<handover::Handed>, &'static str),
) -> Result<(PerWorker, Vec<SocketAddr>), StartError> {
    let mut per_worker: PerWorker = (0..workers).map(|_| Vec::new()).collect();
    let mut addrs = Vec::new();
    let dup = |l: &std::net::TcpListener| {
        l.as_fd()
            .try_clone_to_owned()
            .map(|fd| handover::Handed { fd, name })
    };
    for &want in listen {
        let taken = handover::take_for(want, inherited);
        if !taken.is_empty() {
            let addr = taken[0].local_addr().map_err(StartError::Runtime)?;
            let prepare = |l: &std::net::TcpListener| -> std::io::Result<()> {
                l.set_nonblocking(true)?;
                let s = socket2::SockRef::from(l);
                s.set_tcp_nodelay(true)?;
                sys::set_defer_accept(l.as_fd(), defer_secs)
            };
            for l in &taken {
                prepare(l)
                    .and_then(|()| dup(l))
                    .map(|d| handover.push(d))
                    .map_err(|source| StartError::Inherited { addr, source })?;
            }
            if !quiet {
                println!(
                    "{addr}: took the inherited listening socket{} (not bound again)",
                    if taken.len() == 1 {
                        String::new()
                    } else {
                        format!("s ({})", taken.len())
                    }
                );
            }
            // systemd passes one socket per address (a hand-over on SIGUSR2
            // passes one per old worker): fewer sockets than workers are
            // shared, each worker accepting on its own duplicate. Accepting
            // on one socket from several threads is safe, but the kernel
            // no longer spreads connections among the workers as
            // SO_REUSEPORT does: whichever worker wakes first takes them.
            let k = taken.len();
            if k >= workers {
                for (j, l) in taken.into_iter().enumerate() {
                    per_worker[j % workers].push(l);
                }
            } else {
                for (i, w) in per_worker.iter_mut().enumerate() {
                    let l = taken[i % k]
                        .try_clone()
                        .map_err(|source| StartError::Inherited { addr, source })?;
                    w.push(l);
                }
            }
            addrs.push(addr);
            continue;
        }
        if want.port() != 0 {
            refuse_if_taken(want)?;
        }
        let mut addr = want;
        for w in per_worker.iter_mut() {
            let l = listener(addr, defer_secs).map_err(|source| StartError::Bind {
                addr,
                hint: bind_hint(&source),
                source,
            })?;
            addr = l.local_addr().map_err(StartError::Runtime)?;
            handover.push(dup(&l).map_err(StartError::Runtime)?);
            w.push(l);
        }
        addrs.push(addr);
    }
    Ok((per_worker, addrs))
}

/// The listeners (one per worker and address, TLS and plain HTTP) and the
/// admin listener, taken from `inherited` or bound now; `quiet`: no line
/// for each inherited one (a server process always inherits its parent's).
fn bind_sockets(
    settings: &Settings,
    inherited: &mut handover::Inherited,
    quiet: bool,
) -> Result<(Bound, Option<std::net::TcpListener>), StartError> {
    // Wait for the ClientHello in the kernel as long as the handshake may take.
    let defer = settings.timeouts.handshake.ceil() as u32;
    // The admin socket first: a listen address with port 0 takes every
    // inherited socket on its IP (but one named as the admin listener).
    let admin = match (settings.admin, inherited.admin.take()) {
        (Some(addr), Some(l)) => {
            let dup = l.as_fd().try_clone_to_owned();
            l.set_nonblocking(true)
                .and(dup)
                .map(|dup| Some((l, Some(dup))))
                .map_err(|source| StartError::Inherited { addr, source })?
        }
        (Some(addr), None) => Some(admin::bind(addr, &mut inherited.listen)?),
        (None, _) => None,
    };
    // The plain-HTTP ones next, for the same reason: those a socket unit
    // did not name `http` are known by their exact address.
    let (exact, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut inherited.listen)
        .into_iter()
        .partition(|(a, _)| settings.http_listen.contains(a));
    inherited.listen = rest;
    inherited.http.extend(exact);
    let mut handover = Vec::new();
    let (http_per_worker, http_addrs) = bind_all(
        &settings.http_listen,
        settings.workers,
        settings.timeouts.request_header.ceil() as u32,
        &mut inherited.http,
        quiet,
        (&mut handover, handover::HTTP_NAME),
    )?;
    let (per_worker, addrs) = bind_all(
        &settings.listen,
        settings.workers,
        defer,
        &mut inherited.listen,
        quiet,
        (&mut handover, handover::LISTEN_NAME),
    )?;
    for (addr, _) in inherited.listen.drain(..).chain(inherited.http.drain(..)) {
        tracing::warn!(
            "inherited a listening socket on {addr}, which no listen or http_listen address of \
             the configuration names: closed (add it to one, or remove it from the socket unit)"
        );
    }
    let admin = admin.map(|(l, dup)| {
        handover.extend(dup.map(|fd| handover::Handed {
            fd,
            name: handover::ADMIN_NAME,
        }));
        l
    });
    Ok((
        Bound {
            per_worker,
            addrs,
            http_per_worker,
            http_addrs,
            handover,
        },
        admin,
    ))
}

/// For tlsfront's privileged parent: every listening socket the settings
/// ask for, bound (or inherited), to hand to its server processes and to
/// a new executable on SIGUSR2.
pub(crate) fn bind_for_handover(
    settings: &Settings,
    inherited: &mut handover::Inherited,
) -> Result<Vec<handover::Handed>, StartError> {
    let (bound, _admin) = bind_sockets(settings, inherited, false)?;
    Ok(bound.handover)
}

/// Load the sites, bind, take the configured user's identity, announce,
/// run the workers until SIGTERM/SIGINT, then drain and print the counters.
/// SIGHUP reads the settings again (`reload`) and swaps the sites in; a
/// broken new configuration is refused with its error and the old one
/// keeps serving. Under systemd (`Type=notify`) readiness is signalled once
/// the workers run, reloading while a reload runs, and stopping when the
/// drain begins.
pub fn run(settings: Settings, reload: Option<Reload>, role: Role) -> Result<(), StartError> {
    // Before any thread starts: taking them removes their variables from
    // the environment.
    let mut inherited = handover::take_inherited();
    let ready = handover::take_ready_fd();
    // The in-memory ticket keys' seed: the parent's, or the one an
    // upgrading process handed over, else new.
    let seed = match role {
        Role::Child { .. } => crate::privsep::ticket_seed()
            .unwrap_or_else(|| Err(std::io::ErrorKind::NotConnected.into()))
            .and_then(|b| {
                crate::tls::tickets::Seed::from_bytes(&b).ok_or_else(|| {
                    std::io::Error::other("the parent process sent a seed of the wrong length")
                })
            }),
        Role::Alone => handover::take_ticket_seed(),
    }
    .map_err(StartError::Runtime)?;
    let exec = handover::Exec::current();
    // Signal handlers first: once the port is announced, a supervisor may
    // send SIGTERM at any time, and it must mean "drain", not "die".
    let mut signals = Signals::install().map_err(StartError::Runtime)?;
    // Before the connections' buffers: freed memory must stay freed
    // (`sys::disable_huge_pages` says why).
    if !crate::sys::disable_huge_pages() {
        tracing::debug!("transparent huge pages: could not turn them off for this process");
    }
    let tickets = if let Some(f) = &settings.fleet {
        // The fleet's keys once etcd brings them; the process's own until.
        TicketKeys::fleet(f.ticket_period, seed)
    } else if settings.ticket_keys.is_empty() {
        TicketKeys::rotating(DEFAULT_ROTATION, seed)
    } else {
        TicketKeys::from_files(&settings.ticket_keys, seed)?
    };
    let shared = TlsShared::new(TlsOptions::default(), tickets);
    let sites = Sites::build(&settings, &shared, &mut |l| println!("{l}"))?;
    let mut ktls = ktls_support(settings.ktls)?;
    ktls.expect_no_pad = settings.ktls_expect_no_pad;
    let workers = settings.workers;
    let fds = raise_fd_limit();
    if let Err(e) = &fds {
        tracing::warn!("{e}");
    }
    let fds = fds.ok().flatten();
    let cache = open_file_cache(&settings.open_file_cache, workers, fds);
    crate::files::cache::configure(cache, secs(settings.open_file_cache.valid));
    let budget = Budget {
        requested: settings.limits.connections,
        workers,
        cache,
        fds,
    };
    let max_connections = connection_limit(budget.fit(&sites));
    let (
        Bound {
            per_worker: listeners,
            addrs: bound,
            http_per_worker,
            http_addrs,
            handover,
        },
        admin,
    ) = bind_sockets(&settings, &mut inherited, role != Role::Alone)?;
    // The main process names itself (with a parent, the parent does)
    // before anything says it is ready: a file that cannot be written
    // refuses the start. After the bind: a second tlsfront on the same
    // port, refused there, must not touch the first one's file. Removed
    // when this returns.
    let mut pid_file = match (&settings.pid_file, role) {
        (Some(path), Role::Alone) => Some(crate::pid_file::PidFile::write(path)?),
        _ => None,
    };
    // Keys are read and ports bound: nothing needs root from here on.
    if let Some(who) = &settings.run_as {
        who.switch()?;
        println!("{}", who.describe());
    }
    for line in describe_sites(&settings) {
        println!("{line}");
    }
    for a in &bound {
        println!("{}", announce(&settings, &sites, *a));
    }
    // The redirects name the port the first TLS listener is on.
    let https_port = bound.first().map_or(443, |a| a.port());
    for a in &http_addrs {
        println!(
            "plain HTTP on http://{a}/: redirecting to https://…{} ({}), answering ACME HTTP-01",
            if https_port == 443 {
                String::new()
            } else {
                format!(":{https_port}")
            },
            settings.http_redirect.status(false)
        );
    }
    if let Some(l) = &admin {
        if let Ok(a) = l.local_addr() {
            println!("metrics on http://{a}/metrics, health on http://{a}/healthz");
        }
    }
    println!("{}", ktls.summary());

    let grace = secs(settings.timeouts.shutdown);
    let challenges = crate::acme::Challenges::default();
    challenges.set_http_listening(!http_addrs.is_empty());
    let fleet = match &settings.fleet {
        Some(f) => Some(Arc::new(fleet_node(f, &challenges, &shared)?)),
        None => None,
    };
    let challenge_config = challenges
        .server_config(shared.provider().clone())
        .map_err(|e| StartError::Site {
            origin: "ACME".into(),
            message: e.to_string(),
        })?;
    let front = Arc::new(Front {
        https_port,
        fleet: fleet.clone(),
        challenges,
        challenge_config,
        sites_changed: tokio::sync::Notify::new(),
        connection_limit: AtomicUsize::new(max_connections),
        sites: ArcSwap::from_pointee(sites),
        shared,
        ktls,
        metrics: Metrics::with_fleet(fleet.clone()),
        timeouts: settings.timeouts.clone(),
        log: LogLimit::new(crate::lograte::EVERY),
    });
    front.metrics.certificates(front.sites.load().expiry());
    front.metrics.connection_limit(max_connections, workers);
    let (stop_tx, stop_rx) = watch::channel(false);
    if let Some(l) = admin {
        admin::start(l, front.clone(), stop_rx.clone())?;
    }
    let mut threads = Vec::new();
    for (i, (tls, http)) in listeners.into_iter().zip(http_per_worker).enumerate() {
        let front = front.clone();
        let stop = stop_rx.clone();
        let ls = worker::Listeners { tls, http };
        let t = std::thread::Builder::new()
            .name(format!("worker-{i}"))
            .spawn(move || worker::worker(ls, front, stop, grace))
            .map_err(StartError::Runtime)?;
        threads.push(t);
    }
    if let Some(node) = &front.fleet {
        signals
            .rt
            .spawn(node.clone().run(Arc::new(certs::FleetHost(front.clone()))));
    }
    signals.rt.spawn(certs::manage(front.clone()));
    if let Some(p) = &mut pid_file {
        p.ready();
    }
    match ready {
        // Started by an upgrade: the old process tells systemd (MAINPID).
        Some(fd) => handover::report_ready(fd),
        // Nothing to do outside systemd (no NOTIFY_SOCKET).
        None => {
            let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
        }
    }

    let stop = signals.wait(
        || reload_sites(&front, &settings, &budget, reload.as_deref()),
        || match role {
            Role::Alone => upgrade(&exec, &handover, &front),
            Role::Child { parent } => {
                tracing::warn!(
                    "SIGUSR2: upgrades are the parent process's: send SIGUSR2 to {parent} \
                     (systemctl kill -s USR2 --kill-whom=main tlsfront); ignored"
                );
                None
            }
        },
    );
    drop(handover);
    match stop {
        Stop::Signal => {
            let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
            println!(
                "shutting down: no new connections, finishing what is in flight (up to {grace:?})"
            );
        }
        // Not STOPPING=1: the service goes on, in the new process.
        Stop::Upgraded(pid) => println!(
            "upgraded: new process {pid} serves; this one accepts no more, finishing what is \
             in flight (up to {grace:?})"
        ),
    }
    if let Some(node) = &front.fleet {
        // This node's locks, ticket lead and record go now rather than
        // when its lease would have run out: another node takes over at
        // once. (After an upgrade the new process has its own lease.)
        signals.rt.block_on(node.leave());
    }
    let _ = stop_tx.send(true);
    // The admin listener has a thread of its own: it answers /healthz (503
    // now) and /metrics while the workers drain.
    for t in threads {
        let _ = t.join();
    }
    println!("{}", front.metrics.report());
    Ok(())
}

/// SIGUSR2: start the executable anew (the file now at the path this one
/// was started from) on the same listening sockets, and once it is ready
/// make it systemd's main process; its pid. On failure this process keeps
/// serving, and says why.
fn upgrade(exec: &handover::Exec, sockets: &[handover::Handed], front: &Front) -> Option<u32> {
    println!("SIGUSR2: starting a new process on the same sockets");
    match exec.start(sockets, front.shared.tickets().seed()) {
        Ok(pid) => {
            // Under systemd (Type=notify) the new process becomes the
            // service's main process before this one exits.
            let _ = sd_notify::notify(&[sd_notify::NotifyState::MainPid(pid)]);
            Some(pid)
        }
        Err(e) => {
            front.metrics.error("upgrade_failed");
            tracing::error!("upgrade failed, still serving in this process: {e}");
            None
        }
    }
}

/// Why the signal loop ended.
enum Stop {
    /// SIGTERM or SIGINT.
    Signal,
    /// SIGUSR2 started this new process, now serving.
    Upgraded(u32),
}

/// This process's node of the fleet: its secrets read now (as root through
/// the parent), nothing asked of etcd yet ([`crate::fleet::node::Node::run`]
/// does that in the background; serving never waits on it).
fn fleet_node(
    f: &crate::fleet::FleetSettings,
    challenges: &crate::acme::Challenges,
    shared: &TlsShared,
) -> Result<crate::fleet::node::Node, StartError> {
    let secrets = crate::fleet::etcd::Secrets::read(f)?;
    let keys = crate::fleet::seal::FleetKeys::read(&f.key_files)?;
    println!(
        "fleet: node {} of the fleet at {} (prefix {}){}",
        f.node,
        f.endpoints.join(", "),
        f.prefix,
        if f.order {
            ""
        } else {
            "; serves, never orders"
        }
    );
    Ok(crate::fleet::node::Node::new(
        f.clone(),
        secrets,
        keys,
        challenges.clone(),
        Some(shared.tickets().clone()),
    ))
}

/// SIGHUP: read the settings again and swap the new sites in, or keep the
/// old ones and say why. What only a restart can change (listeners,
/// workers, the user, kTLS mode, `[limits] connections`) is kept as it is,
/// with a warning; the connection limit the open-file limit allows is
/// computed again for the descriptors the new sites hold.
fn reload_sites(
    front: &Front,
    started: &Settings,
    budget: &Budget,
    reload: Option<&dyn Fn() -> Result<Settings, ConfigError>>,
) {
    let Some(reload) = reload else {
        tracing::warn!("SIGHUP: nothing to reload (no config file); ignored");
        return;
    };
    let _ = sd_notify::notify(&[
        sd_notify::NotifyState::Reloading,
        sd_notify::NotifyState::monotonic_usec_now().unwrap_or(sd_notify::NotifyState::Reloading),
    ]);
    let result = reload().map_err(StartError::from).and_then(|new| {
        // Everything read and checked before anything is swapped in.
        let keys = match new.ticket_keys.as_slice() {
            [] => None,
            paths => Some(KeyFiles::read(paths)?),
        };
        let sites = Sites::build(&new, &front.shared, &mut |l| println!("{l}"))?;
        Ok((new, keys, sites))
    });
    match result {
        Ok((new, keys, sites)) => {
            if front.shared.tickets().install(keys) == crate::tls::tickets::Reload::Replaced {
                println!("ticket keys replaced: tickets under keys no longer listed do not resume");
            }
            for (what, changed) in [
                ("listen", new.listen != started.listen),
                ("http_listen", new.http_listen != started.http_listen),
                ("[fleet]", new.fleet != started.fleet),
                ("admin", new.admin != started.admin),
                ("workers", new.workers != started.workers),
                ("ktls", new.ktls != started.ktls),
                (
                    "ktls_expect_no_pad",
                    new.ktls_expect_no_pad != started.ktls_expect_no_pad,
                ),
                ("user/group", new.run_as != started.run_as),
                ("pid_file", new.pid_file != started.pid_file),
                (
                    "[limits] connections",
                    new.limits.connections != started.limits.connections,
                ),
                (
                    "open_file_cache/open_file_cache_valid",
                    new.open_file_cache != started.open_file_cache,
                ),
                (
                    "[timeouts] handshake/shutdown",
                    new.timeouts.handshake != started.timeouts.handshake
                        || new.timeouts.shutdown != started.timeouts.shutdown,
                ),
            ] {
                if changed {
                    tracing::warn!("reload: {what} changed, which takes a restart (or an upgrade); kept as started");
                }
            }
            let n = sites.len();
            front.metrics.certificates(sites.expiry());
            front.sites.store(Arc::new(sites));
            // Counted once the old sites are let go (connections still
            // on them keep their roots and logs open: counted too).
            let fit = budget.fit(&front.sites.load());
            let limit = fit.0;
            let changed = front.connection_limit.swap(limit, Relaxed) != limit;
            // Said again when it moved, and a limit that was set and no
            // longer fits beside the new sites is warned about again.
            if changed || matches!(fit.1, Some(Note::Warning(_))) {
                connection_limit(fit);
            }
            front.metrics.connection_limit(limit, budget.workers);
            front.sites_changed.notify_one();
            front.metrics.reloaded();
            println!(
                "reloaded {}: {n} site{}",
                new.file
                    .as_ref()
                    .map_or_else(|| "the settings".into(), |p| p.display().to_string()),
                if n == 1 { "" } else { "s" }
            );
        }
        Err(e) => {
            front.metrics.error("reload_failed");
            tracing::error!("reload failed, still serving the previous configuration: {e}");
        }
    }
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
}

/// Descriptors beside the connections: listeners, epoll, eventfds,
/// standard streams (the document roots' directories, one per distinct
/// directory, are counted beside it).
const FD_RESERVE: u64 = 64;

/// Open connections per worker, as [`Budget::fit`] chose: says on stdout
/// what it chose when that is not the plain default; warns only when a
/// limit that was set cannot be reached.
fn connection_limit((limit, note): (usize, Option<Note>)) -> usize {
    match note {
        Some(Note::Info(line)) => println!("{line}"),
        Some(Note::Warning(line)) => tracing::warn!("{line}"),
        None => {}
    }
    limit
}

/// Files each worker keeps open: as set, or the default, lowered so that
/// the caches take at most an eighth of the open-file limit (saying so).
fn open_file_cache(set: &OpenFileCache, workers: usize, fds: Option<u64>) -> usize {
    if let Some(n) = set.entries {
        return n;
    }
    let default = crate::files::cache::DEFAULT_ENTRIES;
    let fit = fds.map_or(default, |have| {
        (have / 8 / workers.max(1) as u64).min(default as u64) as usize
    });
    if fit < default {
        println!(
            "open_file_cache: {fit} files per worker, as the open-file limit ({}) allows; \
             raise it (ulimit -Hn, systemd LimitNOFILE=) for more",
            fds.unwrap_or_default()
        );
    }
    fit
}

/// Raise the soft open-file limit to the hard one, as Go's runtime and
/// HAProxy do (the usual soft default of 1024 would make accept() fail with
/// EMFILE long before the connection limits are reached); the limit now
/// in force (`None`: unlimited).
fn raise_fd_limit() -> Result<Option<u64>, String> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    if let (Some(soft), Some(hard)) = (lim.current, lim.maximum) {
        if soft < hard {
            lim.current = Some(hard);
            if let Err(e) = setrlimit(Resource::Nofile, lim) {
                return Err(format!(
                    "cannot raise the open-file limit from {soft} to {hard}: {e}"
                ));
            }
        }
    }
    Ok(lim.current)
}

/// What is said about a limit: a line of the start-up report (stdout), or
/// a warning (the event log).
#[derive(Debug, PartialEq)]
enum Note {
    Info(String),
    Warning(String),
}

/// The per-worker connection limit for an open-file limit of `fds`, and
/// what to tell the operator about it: information when the default was
/// lowered to fit, a warning when a limit that was set does not fit.
fn fit_connections(
    requested: Option<usize>,
    workers: usize,
    per_connection: u64,
    reserve: u64,
    fds: Option<u64>,
) -> (usize, Option<Note>) {
    let per_worker = (workers.max(1) as u64).saturating_mul(per_connection);
    let fitting = fds.map(|have| (have.saturating_sub(reserve) / per_worker) as usize);
    match (requested, fitting) {
        (Some(n), Some(fit)) if n > fit => {
            let have = fds.unwrap_or_default();
            let needed = (n as u64)
                .saturating_mul(per_worker)
                .saturating_add(reserve);
            let warning = format!(
                "the open-file limit is {have}, but the connection limits need up to \
                 {needed} descriptors: beyond about {} connections accept() will fail (EMFILE). \
                 Raise the hard limit (ulimit -Hn, systemd LimitNOFILE=) or lower the connection \
                 limit ([limits] connections in the config file for serve)",
                fit.saturating_mul(workers)
            );
            (n, Some(Note::Warning(warning)))
        }
        (Some(n), _) => (n, None),
        (None, Some(fit)) if fit < DEFAULT_CONNECTIONS => {
            let fit = fit.max(1);
            let note = format!(
                "connections: up to {fit} per worker, as the open-file limit ({}) allows; \
                 raise it (ulimit -Hn, systemd LimitNOFILE=) for more, or set [limits] \
                 connections",
                fds.unwrap_or_default()
            );
            (fit, Some(Note::Info(note)))
        }
        (None, _) => (DEFAULT_CONNECTIONS, None),
    }
}

/// SIGTERM, SIGINT, SIGHUP, SIGUSR1 and SIGUSR2, caught from before the
/// first line is printed.
struct Signals {
    rt: tokio::runtime::Runtime,
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    usr2: tokio::signal::unix::Signal,
    /// Reopen the access logs (logrotate's postrotate).
    usr1: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (term, int, hup, usr2, usr1) = {
            let _guard = rt.enter();
            (
                signal(SignalKind::terminate())?,
                signal(SignalKind::interrupt())?,
                signal(SignalKind::hangup())?,
                signal(SignalKind::user_defined2())?,
                signal(SignalKind::user_defined1())?,
            )
        };
        Ok(Signals {
            rt,
            term,
            int,
            hup,
            usr2,
            usr1,
        })
    }

    /// Until SIGTERM or SIGINT, or a SIGUSR2 for which `on_usr2` started a
    /// new process (its pid); calling `on_hup` for each SIGHUP, reopening
    /// the access logs for each SIGUSR1 and looking after the heap
    /// meanwhile. The signals go on being caught until the
    /// process exits.
    fn wait(&mut self, on_hup: impl Fn(), on_usr2: impl Fn() -> Option<u32>) -> Stop {
        self.rt.block_on(async {
            let mut check = tokio::time::interval(HEAP_CHECK);
            check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = self.term.recv() => return Stop::Signal,
                    _ = self.int.recv() => return Stop::Signal,
                    _ = self.hup.recv() => on_hup(),
                    _ = self.usr1.recv() => {
                        let (ok, failed) = crate::accesslog::reopen_all();
                        println!("SIGUSR1: reopened {ok} access log file(s), {failed} failed");
                    }
                    _ = self.usr2.recv() => {
                        if let Some(pid) = on_usr2() {
                            return Stop::Upgraded(pid);
                        }
                    }
                    _ = check.tick() => release_free_heap(),
                }
            }
        })
    }
}

/// How often the heap is looked at, and how much free memory glibc's
/// allocator may keep. Rust's allocations go to mimalloc (the binary's
/// global allocator), whose arenas, shared by all threads, purge the free
/// ranges the workers hand back (`worker::collect_heap`) only while some
/// thread allocates: this sweep purges them when every thread is idle.
/// glibc's malloc still serves C code (aws-lc's handshake state): after a
/// burst it keeps what was freed (it returns only the top of each arena,
/// and live blocks pin the rest), so it is trimmed past the slack.
const HEAP_CHECK: std::time::Duration = std::time::Duration::from_secs(5);
const HEAP_SLACK: usize = 16 << 20;

fn release_free_heap() {
    crate::sys::heap_collect(false);
    let Some(free) = crate::sys::heap_free_bytes() else {
        return;
    };
    if free > HEAP_SLACK {
        let released = crate::sys::heap_trim();
        tracing::debug!(
            "heap: {} MiB free in glibc's allocator, trimmed: {released}",
            free >> 20
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_connection_limit_fits_the_open_file_limit() {
        // Plenty of descriptors: the default, nothing said.
        assert_eq!(
            fit_connections(None, 2, 2, FD_RESERVE, Some(1 << 20)),
            (DEFAULT_CONNECTIONS, None)
        );
        assert_eq!(
            fit_connections(None, 2, 2, FD_RESERVE, None),
            (DEFAULT_CONNECTIONS, None)
        );
        // A stock hard limit below what the default needs: fitted, and said
        // as information (no "warning").
        let (n, note) = fit_connections(None, 2, 2, FD_RESERVE, Some(20_000));
        assert_eq!(n, (20_000 - 64) / 4);
        let Some(Note::Info(note)) = note else {
            panic!("{note:?}")
        };
        assert!(
            note.starts_with("connections: up to 4984 per worker"),
            "{note}"
        );
        // Never zero.
        assert_eq!(fit_connections(None, 4, 2, FD_RESERVE, Some(10)).0, 1);
        // A limit that was set is kept; a warning only when it cannot be met.
        assert_eq!(
            fit_connections(Some(480), 1, 2, FD_RESERVE, Some(1024)),
            (480, None)
        );
        let (n, warning) = fit_connections(Some(5000), 1, 2, FD_RESERVE, Some(1024));
        assert_eq!(n, 5000);
        let Some(Note::Warning(warning)) = warning else {
            panic!("{warning:?}")
        };
        assert!(
            warning.starts_with("the open-file limit is 1024"),
            "{warning}"
        );
    }

    /// The per-connection `setsockopt(TCP_NODELAY)` was dropped because the
    /// kernel hands the listener's setting on to accepted sockets: check it.
    #[test]
    fn accepted_sockets_inherit_nodelay() {
        let l = listener("127.0.0.1:0".parse().unwrap(), 10).unwrap();
        l.set_nonblocking(false).unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        // Deferred accept: the client speaks first.
        std::io::Write::write_all(&mut c, b"x").unwrap();
        let (a, _) = l.accept().unwrap();
        assert!(a.nodelay().unwrap());
    }

    /// With TCP_DEFER_ACCEPT a connection that has sent nothing is not
    /// handed to accept(); its first bytes hand it over at once.
    #[test]
    fn a_connection_is_accepted_once_its_first_bytes_arrive() {
        use std::io::Write;
        let l = listener("127.0.0.1:0".parse().unwrap(), 10).unwrap();
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        let e = l.accept().unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
        c.write_all(b"\x16\x03\x01").unwrap();
        let t0 = std::time::Instant::now();
        loop {
            match l.accept() {
                Ok(_) => break,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    assert!(t0.elapsed().as_secs() < 5, "never accepted");
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
}
