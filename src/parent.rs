//! tlsfront's privileged parent, when started as root with `user` set
//! (nginx's master process, HAProxy's master): it binds the listening
//! sockets, makes what must exist before the server process can start
//! (the self-signed identity, the ACME state directory, owned by `user`),
//! and starts the server process (the same executable, [`crate::server`])
//! as `user`, handing it the sockets. From then on it is the one the
//! operator talks to:
//!
//! - it reads, as root, the files the configuration names (certificates,
//!   keys, OCSP responses, ticket keys, the configuration itself) and opens
//!   the access logs, each when the server process asks
//!   ([`crate::privsep`]); a path the configuration does not name is not
//!   read for it;
//! - with `keys_in_parent` (the default) it keeps the private keys and
//!   signs with them for the server process ([`Keys`]), so that nothing a
//!   client talks to holds one;
//! - SIGHUP: the configuration is read again (so that the files it now
//!   names may be read), then the server process reloads;
//! - SIGUSR1: the server process reopens its logs, through the parent;
//! - SIGUSR2: the executable is started anew on the same sockets (a new
//!   parent, with a server process of its own); once it is ready this
//!   parent's server process drains and both exit;
//! - SIGTERM/SIGINT: the server process drains, then the parent exits;
//! - a server process that dies is noticed and started again, unless it
//!   keeps dying.
//!
//! The parent never talks to a client, and holds no TLS state but keys.

use crate::config::{secs, Settings};
use crate::privileges::RunAs;
use crate::privsep::{Answer, Request};
use crate::server::handover::{self, Exec, Handed};
use crate::server::{Reload, StartError};
use crate::tls::tickets::Seed;
use rustls::sign::SigningKey;
use rustls::SignatureScheme;
use std::collections::{HashMap, HashSet, VecDeque};
use std::os::fd::AsFd;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Crashes within [`CRASH_WINDOW`] after which the parent gives up (and
/// exits with failure, for systemd's `Restart=` to take over).
const MAX_CRASHES: usize = 5;
const CRASH_WINDOW: Duration = Duration::from_secs(60);

/// How long past the shutdown timeout a draining server process may take
/// before it is killed.
const KILL_AFTER: Duration = Duration::from_secs(5);

/// Whether `settings` ask for a parent: started as root, to run as `user`.
pub fn wanted(settings: &Settings) -> bool {
    settings.run_as.is_some() && rustix::process::geteuid().is_root()
}

/// The files and logs the configuration names: what the parent reads and
/// opens for the server process.
#[derive(Default)]
struct Held {
    files: HashSet<PathBuf>,
    logs: HashSet<PathBuf>,
    /// Private keys to keep here and sign with (`keys_in_parent`); empty
    /// when the server process is to read them.
    keys: HashSet<PathBuf>,
}

impl Held {
    fn of(settings: &Settings) -> Result<Held, StartError> {
        let mut held = Held::default();
        held.files.extend(settings.file.iter().cloned());
        held.files.extend(settings.ticket_keys.iter().cloned());
        // A private CA's roots, for the ACME client in the server process.
        held.files.extend(settings.acme.extra_roots.iter().cloned());
        // The TSIG key of DNS-01 updates (read again at each reload).
        held.files
            .extend(settings.acme.dns.iter().map(|d| d.key_file.clone()));
        // The fleet's key files, etcd's CA, client certificate and key, and
        // password (restart-only: read for each server process it starts).
        if let Some(f) = &settings.fleet {
            held.files.extend(f.secret_files().cloned());
        }
        for site in &settings.sites {
            for (cert, key) in &site.certs {
                held.files.insert(cert.clone());
                held.files.insert(key.clone());
                if settings.keys_in_parent {
                    held.keys.insert(key.clone());
                }
            }
            held.files.extend(site.ocsp.iter().flatten().cloned());
            if let crate::accesslog::Target::File(p) = &site.access_log.target {
                held.logs.insert(p.clone());
            }
        }
        // The self-signed identity of the sites without a certificate: made
        // here as root if missing (once, whatever the number of sites).
        if let Some(site) = settings
            .sites
            .iter()
            .find(|s| s.certs.is_empty() && !s.acme)
        {
            let fail = |e: crate::config::cert::CertError| StartError::Site {
                origin: site.origin.clone(),
                message: e.to_string(),
            };
            crate::config::cert::load(None, None).map_err(fail)?;
            let dir = crate::config::cert::data_dir().map_err(fail)?;
            held.files.insert(dir.join("cert.pem"));
            held.files.insert(dir.join("key.pem"));
            if settings.keys_in_parent {
                held.keys.insert(dir.join("key.pem"));
            }
        }
        Ok(held)
    }

    fn answer(&self, request: Request, keys: &Arc<Keys>) -> Answer {
        match request {
            Request::Key(p) if self.keys.contains(&p) => keys.load(&p),
            Request::Key(_) => Answer::NotHeld,
            Request::Signer => match keys.link() {
                Ok(fd) => Answer::Fd(fd),
                Err(e) => Answer::Error(e),
            },
            Request::TicketSeed => {
                Answer::Data(zeroize::Zeroizing::new(keys.seed.bytes().to_vec()))
            }
            Request::Read(p) if self.files.contains(&p) => match crate::safe_open::read(&p) {
                Ok(bytes) => Answer::Data(zeroize::Zeroizing::new(bytes)),
                Err(e) => Answer::Error(e),
            },
            Request::OpenLog(p) if self.logs.contains(&p) => match crate::safe_open::open_log(&p) {
                Ok(f) => Answer::Fd(f.into()),
                Err(e) => Answer::Error(e),
            },
            Request::Read(_) | Request::OpenLog(_) => Answer::NotHeld,
        }
    }
}

/// The private keys the parent holds for its server processes, by handle.
/// A key file's bytes get one handle, however many sites name the file and
/// however often it is loaded; new bytes (a renewed key) get a new handle,
/// and the newest [`GENERATIONS`] of each path are kept, so that a
/// handshake that began before a reload can still be signed after it.
struct Keys {
    provider: Arc<rustls::crypto::CryptoProvider>,
    table: Mutex<KeyTable>,
    /// The seed of the in-memory session ticket keys: every server process
    /// this parent starts gets it, and so does an upgrade's new parent.
    seed: Seed,
}

#[derive(Default)]
struct KeyTable {
    next: u32,
    by_handle: HashMap<u32, Arc<dyn SigningKey>>,
    /// Per path, its versions: handle and SHA-256 of the file's bytes,
    /// oldest first.
    by_path: HashMap<PathBuf, VecDeque<(u32, [u8; 32])>>,
}

/// Versions of one key file kept at a time.
const GENERATIONS: usize = 2;

/// Every scheme rustls' providers sign with: what a key is asked about.
const SCHEMES: [SignatureScheme; 10] = [
    SignatureScheme::ECDSA_NISTP256_SHA256,
    SignatureScheme::ECDSA_NISTP384_SHA384,
    SignatureScheme::ECDSA_NISTP521_SHA512,
    SignatureScheme::ED25519,
    SignatureScheme::RSA_PSS_SHA512,
    SignatureScheme::RSA_PSS_SHA384,
    SignatureScheme::RSA_PSS_SHA256,
    SignatureScheme::RSA_PKCS1_SHA512,
    SignatureScheme::RSA_PKCS1_SHA384,
    SignatureScheme::RSA_PKCS1_SHA256,
];

impl Keys {
    fn new(seed: Seed) -> Keys {
        Keys {
            provider: Arc::new(crate::tls::provider()),
            table: Mutex::default(),
            seed,
        }
    }

    /// Read and keep the key at `path`: its public half and a handle for
    /// the server process. A key that does not load is not kept
    /// ([`Answer::NotHeld`]): the server process then reads the file's
    /// bytes and says what is wrong with it, as without a parent.
    fn load(&self, path: &Path) -> Answer {
        let pem = match crate::safe_open::read(path) {
            Ok(b) => zeroize::Zeroizing::new(b),
            Err(e) => return Answer::Error(e),
        };
        let digest: [u8; 32] = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &pem)
            .as_ref()
            .try_into()
            .unwrap_or_default();
        // The version already held: the same handle.
        {
            let t = self.table.lock().unwrap_or_else(|p| p.into_inner());
            let held = t.by_path.get(path).and_then(|versions| {
                let (h, _) = versions.iter().find(|(_, d)| *d == digest)?;
                Some((*h, t.by_handle.get(h)?.clone()))
            });
            if let Some((handle, key)) = held {
                drop(t);
                return Self::info(handle, &*key).map_or(Answer::NotHeld, Answer::Key);
            }
        }
        use rustls::pki_types::pem::PemObject;
        let Ok(der) = rustls::pki_types::PrivateKeyDer::from_pem_slice(&pem) else {
            return Answer::NotHeld;
        };
        let Ok(key) = self.provider.key_provider.load_private_key(der) else {
            return Answer::NotHeld;
        };
        let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        t.next = t.next.wrapping_add(1);
        let handle = t.next;
        let Some(info) = Self::info(handle, &*key) else {
            return Answer::NotHeld;
        };
        t.by_handle.insert(handle, key);
        let kept = t.by_path.entry(path.to_path_buf()).or_default();
        kept.push_back((handle, digest));
        let gone: Vec<u32> = kept
            .drain(..kept.len().saturating_sub(GENERATIONS))
            .map(|(h, _)| h)
            .collect();
        // A handle another path still lists (two names for one file) stays.
        for h in gone {
            if !t.by_path.values().flatten().any(|(k, _)| *k == h) {
                t.by_handle.remove(&h);
            }
        }
        Answer::Key(info)
    }

    /// What the server process is told of key `handle`: its public half,
    /// algorithm and schemes, in the key's own order of preference (what it
    /// picks from all, then from the rest, and so on).
    fn info(handle: u32, key: &dyn SigningKey) -> Option<crate::privsep::KeyInfo> {
        let public_key = key.public_key()?.as_ref().to_vec();
        let mut left = SCHEMES.to_vec();
        let mut schemes = Vec::new();
        while let Some(signer) = key.choose_scheme(&left) {
            let s = signer.scheme();
            schemes.push(s);
            left.retain(|x| *x != s);
        }
        Some(crate::privsep::KeyInfo {
            handle,
            algorithm: key.algorithm(),
            schemes,
            public_key,
        })
    }

    fn sign(
        &self,
        handle: u32,
        scheme: SignatureScheme,
        message: &[u8],
    ) -> std::io::Result<Vec<u8>> {
        let key = self
            .table
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .by_handle
            .get(&handle)
            .cloned()
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("no key {handle} (replaced by two reloads since)"),
                )
            })?;
        let signer = key.choose_scheme(&[scheme]).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("key {handle} does not sign with {scheme:?}"),
            )
        })?;
        signer
            .sign(message)
            .map_err(|e| std::io::Error::other(format!("signing: {e}")))
    }

    /// A new signing link: its far end for the server process; this end
    /// served by a thread of its own until the server process closes it.
    fn link(self: &Arc<Self>) -> std::io::Result<std::os::fd::OwnedFd> {
        let (mine, theirs) = UnixStream::pair()?;
        let keys = self.clone();
        std::thread::Builder::new()
            .name("parent-signer".into())
            .spawn(move || {
                let sign = |h, s, m: &[u8]| keys.sign(h, s, m);
                if let Err(e) = crate::privsep::serve_signing(mine, sign) {
                    tracing::warn!("signing link to the server process: {e}");
                }
            })?;
        Ok(theirs.into())
    }
}

/// What [`acme_state_dir`] does: make a missing directory, or (for
/// `config check`) only decide whether a start would succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Make {
    Yes,
    DryRun,
}

/// The ACME state directory must be the server process's to write (it
/// orders and stores certificates as `user`): made for it if missing; one
/// that exists must already be its, else the fix is said. `config check`
/// asks the same with [`Make::DryRun`], which decides without making;
/// `Ok(true)`: it is missing (and is, or would be, made).
pub(crate) fn acme_state_dir(
    settings: &Settings,
    who: &RunAs,
    make: Make,
) -> Result<bool, StartError> {
    if !settings.sites.iter().any(|s| s.acme) {
        return Ok(false);
    }
    let dir = &settings.acme.state_dir;
    let fail = |message: String| StartError::Site {
        origin: "ACME state directory".into(),
        message,
    };
    let (uid, gid) = who.ids();
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && make == Make::DryRun => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(up) = dir.parent() {
                std::fs::create_dir_all(up)
                    .map_err(|e| fail(format!("cannot create {}: {e}", up.display())))?;
            }
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(dir)
                .map_err(|e| fail(format!("cannot create {}: {e}", dir.display())))?;
            // Just made by this process, so no one else's file can be
            // behind the name: opened without following links all the same.
            let fd = rustix::fs::open(
                dir,
                rustix::fs::OFlags::DIRECTORY
                    | rustix::fs::OFlags::NOFOLLOW
                    | rustix::fs::OFlags::CLOEXEC,
                rustix::fs::Mode::empty(),
            )
            .map_err(|e| fail(format!("cannot open {}: {e}", dir.display())))?;
            rustix::fs::fchown(
                &fd,
                Some(rustix::process::Uid::from_raw(uid)),
                Some(rustix::process::Gid::from_raw(gid)),
            )
            .map_err(|e| fail(format!("cannot give {} to uid {uid}: {e}", dir.display())))?;
            Ok(true)
        }
        Err(e) => Err(fail(format!("{}: {e}", dir.display()))),
        Ok(m) => {
            use std::os::unix::fs::MetadataExt;
            if m.is_dir() && m.uid() == uid {
                Ok(false)
            } else {
                Err(fail(format!(
                    "{} belongs to uid {}, but the server process runs as {} (uid {uid}) and \
                     must write certificates there: chown -R {uid}:{gid} {}",
                    dir.display(),
                    m.uid(),
                    who.name(),
                    dir.display()
                )))
            }
        }
    }
}

/// A running server process.
struct ServerProcess {
    pid: u32,
    started: Instant,
}

/// How the server process ended, for the loop.
type Exited = (u32, std::io::Result<ExitStatus>);

/// The parent's state: what it hands each server process it starts.
struct Parent {
    exec: Exec,
    sockets: Vec<Handed>,
    held: Arc<Mutex<Held>>,
    keys: Arc<Keys>,
    who: RunAs,
    exits: mpsc::UnboundedSender<Exited>,
}

impl Parent {
    /// Start a server process and wait until it is ready.
    fn spawn(&self) -> Result<ServerProcess, StartError> {
        let (mine, theirs) = UnixStream::pair().map_err(StartError::Runtime)?;
        let held = self.held.clone();
        let keys = self.keys.clone();
        std::thread::Builder::new()
            .name("parent-link".into())
            .spawn(move || {
                let answer = |r| {
                    let held = held.lock().unwrap_or_else(|p| p.into_inner());
                    held.answer(r, &keys)
                };
                if let Err(e) = crate::privsep::serve(mine, answer) {
                    tracing::warn!("link to the server process: {e}");
                }
            })
            .map_err(StartError::Runtime)?;
        let link = format!("{},{}", std::process::id(), self.who.link_names());
        let child = self
            .exec
            .spawn_ready(&self.sockets, Some((theirs.as_fd(), &link)), None)
            .map_err(StartError::ServerProcess)?;
        drop(theirs);
        let pid = child.id();
        let exits = self.exits.clone();
        std::thread::Builder::new()
            .name("parent-wait".into())
            .spawn(move || {
                let mut child = child;
                let _ = exits.send((pid, child.wait()));
            })
            .map_err(StartError::Runtime)?;
        Ok(ServerProcess {
            pid,
            started: Instant::now(),
        })
    }
}

fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(p, sig);
    }
}

/// Run as the privileged parent until SIGTERM/SIGINT or an upgrade.
pub fn run(settings: Settings, reload: Reload) -> Result<(), StartError> {
    // Before any thread starts (they change the environment).
    let mut inherited = handover::take_inherited();
    let ready = handover::take_ready_fd();
    let seed = handover::take_ticket_seed().map_err(StartError::Runtime)?;
    let exec = Exec::current();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(StartError::Runtime)?;
    let mut signals = {
        let _guard = rt.enter();
        Signals::install().map_err(StartError::Runtime)?
    };
    let who = settings.run_as.clone().expect("parent::wanted");
    acme_state_dir(&settings, &who, Make::Yes)?;
    let held = Arc::new(Mutex::new(Held::of(&settings)?));
    let sockets = crate::server::bind_for_handover(&settings, &mut inherited)?;
    let (exits, mut exited) = mpsc::unbounded_channel();
    let parent = Parent {
        exec,
        sockets,
        held,
        keys: Arc::new(Keys::new(seed)),
        who,
        exits,
    };
    // The parent is the main process: it names itself before its server
    // process says it serves (a file it cannot write refuses the start).
    let mut pid_file = match &settings.pid_file {
        Some(path) => Some(crate::pid_file::PidFile::write(path)?),
        None => None,
    };
    let mut server = parent.spawn()?;
    println!(
        "parent process {} (root): sockets, keys, logs, reloads and upgrades; server process {} \
         as user {}",
        std::process::id(),
        server.pid,
        parent.who.name()
    );
    if let Some(p) = &mut pid_file {
        p.ready();
    }
    match ready {
        Some(fd) => handover::report_ready(fd),
        None => {
            let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
        }
    }
    let grace = secs(settings.timeouts.shutdown) + KILL_AFTER;
    let mut crashes: Vec<Instant> = Vec::new();
    rt.block_on(async {
        loop {
            tokio::select! {
                _ = signals.term.recv() => return drain(server.pid, &mut exited, grace, "SIGTERM").await,
                _ = signals.int.recv() => return drain(server.pid, &mut exited, grace, "SIGINT").await,
                _ = signals.hup.recv() => {
                    let _ = sd_notify::notify(&[sd_notify::NotifyState::Reloading]);
                    reread(&parent, &reload);
                    signal(server.pid, rustix::process::Signal::HUP);
                    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
                }
                _ = signals.usr1.recv() => signal(server.pid, rustix::process::Signal::USR1),
                _ = signals.usr2.recv() => {
                    println!("SIGUSR2: starting a new process on the same sockets");
                    match parent.exec.start(&parent.sockets, &parent.keys.seed) {
                        Ok(pid) => {
                            let _ = sd_notify::notify(&[sd_notify::NotifyState::MainPid(pid)]);
                            println!(
                                "upgraded: new process {pid} serves; this one accepts no more, \
                                 its server process finishing what is in flight"
                            );
                            return drain(server.pid, &mut exited, grace, "upgrade").await;
                        }
                        Err(e) => tracing::error!("upgrade failed, still serving in this process: {e}"),
                    }
                }
                Some((pid, status)) = exited.recv() => {
                    if pid != server.pid {
                        continue;
                    }
                    let now = Instant::now();
                    crashes.retain(|t| now.duration_since(*t) < CRASH_WINDOW);
                    crashes.push(now);
                    let status = status.map_or_else(|e| e.to_string(), |s| s.to_string());
                    let ran = now.duration_since(server.started);
                    if crashes.len() >= MAX_CRASHES {
                        tracing::error!(
                            "the server process {pid} exited ({status}) after {ran:?}, the \
                             {MAX_CRASHES}th time within {CRASH_WINDOW:?}: giving up"
                        );
                        return Err(StartError::Crashed(status));
                    }
                    tracing::error!(
                        "the server process {pid} exited ({status}) after {ran:?}: starting a \
                         new one"
                    );
                    server = parent.spawn()?;
                    println!("server process {} started", server.pid);
                }
            }
        }
    })
}

/// SIGHUP: the configuration as the server process will read it, so that
/// the files it names may be read for it. A configuration that does not
/// load is left to the server process to refuse and report (it reads the
/// same one); the files held stay those of the last good one.
fn reread(parent: &Parent, reload: &Reload) {
    let Ok(new) = reload() else {
        return;
    };
    if let Err(e) = acme_state_dir(&new, &parent.who, Make::Yes) {
        tracing::warn!("reload: {e}");
    }
    match Held::of(&new) {
        Ok(held) => *parent.held.lock().unwrap_or_else(|p| p.into_inner()) = held,
        Err(e) => tracing::warn!("reload: {e}"),
    }
}

/// Ask the server process to drain, and wait for it (killing it if it
/// overstays the shutdown timeout).
async fn drain(
    pid: u32,
    exited: &mut mpsc::UnboundedReceiver<Exited>,
    grace: Duration,
    why: &str,
) -> Result<(), StartError> {
    if why != "upgrade" {
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    }
    signal(pid, rustix::process::Signal::TERM);
    let wait = async {
        while let Some((p, status)) = exited.recv().await {
            if p == pid {
                return Some(status);
            }
        }
        None
    };
    match tokio::time::timeout(grace, wait).await {
        Ok(Some(Ok(status))) if status.success() => Ok(()),
        Ok(Some(Ok(status))) => Err(StartError::Crashed(status.to_string())),
        Ok(Some(Err(e))) => Err(StartError::Runtime(e)),
        Ok(None) => Ok(()),
        Err(_) => {
            tracing::error!(
                "the server process {pid} did not finish within {grace:?} of {why}: killed"
            );
            signal(pid, rustix::process::Signal::KILL);
            Ok(())
        }
    }
}

/// The signals the parent acts on.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
    usr2: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
            usr1: signal(SignalKind::user_defined1())?,
            usr2: signal(SignalKind::user_defined2())?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle(a: Answer) -> u32 {
        match a {
            Answer::Key(info) => info.handle,
            _ => panic!("no key"),
        }
    }

    #[test]
    fn one_handle_per_version_of_a_key_file_and_two_versions_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.pem");
        let keys = Keys::new(Seed::random().unwrap());
        let write = || {
            let (_, key) = crate::config::cert::self_signed().unwrap();
            std::fs::write(&path, key).unwrap();
        };
        write();
        // Many sites naming one file, and reloads: one handle.
        let first = handle(keys.load(&path));
        for _ in 0..10 {
            assert_eq!(handle(keys.load(&path)), first);
        }
        let scheme = SignatureScheme::ECDSA_NISTP256_SHA256;
        assert!(keys.sign(first, scheme, b"m").is_ok());
        // A renewed key: a new handle; the old one still signs (a
        // handshake begun before the reload).
        write();
        let second = handle(keys.load(&path));
        assert_ne!(second, first);
        assert!(keys.sign(first, scheme, b"m").is_ok());
        // A third version: the first is let go.
        write();
        let third = handle(keys.load(&path));
        assert!(keys.sign(first, scheme, b"m").is_err());
        assert!(keys.sign(second, scheme, b"m").is_ok());
        assert!(keys.sign(third, scheme, b"m").is_ok());
        assert_eq!(keys.table.lock().unwrap().by_handle.len(), 2);
        // A file that is no key: not held (the server process reads it and
        // says what is wrong).
        std::fs::write(&path, "not a key").unwrap();
        assert!(matches!(keys.load(&path), Answer::NotHeld));
    }
}
