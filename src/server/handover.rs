//! Listening sockets that outlive a process: taken from systemd (socket
//! activation, `LISTEN_FDS`/`LISTEN_PID` as `sd_listen_fds(3)` reads them),
//! or from the tlsfront that started this one on SIGUSR2, which is the same
//! protocol; and handed on to a new executable on SIGUSR2 (nginx's binary
//! upgrade). The sockets stay open across the hand-over, so a client never
//! finds the port closed: whatever waits in their queues is accepted by the
//! new process.

use crate::sys;
use crate::tls::tickets::{Seed, SEED_LEN};
use std::ffi::OsString;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::time::Duration;

/// The variable naming the descriptor on which a process started by an
/// upgrade says it is ready (one byte, once its workers run).
pub(super) const READY_FD: &str = "TLSFRONT_READY_FD";

/// The read end of a pipe holding the in-memory ticket keys' seed, for the
/// new process of an upgrade (so that the tickets its predecessor issued
/// still resume).
const TICKET_SEED_FD: &str = "TLSFRONT_TICKET_SEED_FD";

/// How long the new process may take to start before the upgrade is given
/// up and the old one keeps serving.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The name (`LISTEN_FDNAMES`) a process of tlsfront gives the admin
/// listener it hands on, so that the new process tells it from the
/// listeners even when both asked for port 0 on the same IP.
pub(crate) const ADMIN_NAME: &str = "admin";

/// The name of a plain-HTTP (`http_listen`) listener handed on; a socket
/// unit names its port-80 sockets so too (`FileDescriptorName=http`).
pub(crate) const HTTP_NAME: &str = "http";

/// The listening sockets a process inherited.
#[derive(Default)]
pub(crate) struct Inherited {
    /// By local address.
    pub listen: Vec<(SocketAddr, TcpListener)>,
    /// The admin listener, when the process that started this one named it.
    pub admin: Option<TcpListener>,
    /// Plain-HTTP listeners named [`HTTP_NAME`], by local address.
    pub http: Vec<(SocketAddr, TcpListener)>,
}

/// The listening sockets this process inherited. The
/// variables are removed from the environment (`sd_listen_fds(1)`), so
/// that nothing this process starts takes them for its own. Must run
/// before any thread starts (it changes the environment).
pub(crate) fn take_inherited() -> Inherited {
    // Sets close-on-exec on each, as sd_listen_fds does.
    let fds: Vec<_> = match sd_notify::listen_fds_with_names() {
        Ok(fds) => fds.collect(),
        Err(e) => {
            tracing::warn!("LISTEN_FDS/LISTEN_PID: {e}; no inherited sockets taken");
            Vec::new()
        }
    };
    for var in ["LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"] {
        std::env::remove_var(var);
    }
    let mut taken = Inherited::default();
    for (raw, name) in fds {
        let fd = match sys::inherited_fd(raw) {
            Ok(fd) => fd,
            Err(e) => {
                tracing::warn!("inherited descriptor {raw}: {e}; ignored");
                continue;
            }
        };
        let listening = rustix::net::sockopt::socket_type(&fd)
            .is_ok_and(|t| t == rustix::net::SocketType::STREAM)
            && rustix::net::sockopt::socket_acceptconn(&fd).unwrap_or(false);
        let listener = TcpListener::from(fd);
        match listener.local_addr() {
            Ok(_) if listening && name == ADMIN_NAME && taken.admin.is_none() => {
                taken.admin = Some(listener)
            }
            Ok(addr) if listening && name == HTTP_NAME => taken.http.push((addr, listener)),
            Ok(addr) if listening => taken.listen.push((addr, listener)),
            _ => tracing::warn!(
                "inherited descriptor {raw} is not a listening TCP socket (check the \
                 socket unit's ListenStream=); closed"
            ),
        }
    }
    taken
}

/// The sockets inherited for a configured address: those bound to it
/// exactly, or, for port 0 ("any port"), those on the same IP. Removed from
/// `inherited`.
pub(crate) fn take_for(
    want: SocketAddr,
    inherited: &mut Vec<(SocketAddr, TcpListener)>,
) -> Vec<TcpListener> {
    let matches = |a: &SocketAddr| *a == want || (want.port() == 0 && a.ip() == want.ip());
    let (mine, rest): (Vec<_>, Vec<_>) = inherited.drain(..).partition(|(a, _)| matches(a));
    *inherited = rest;
    mine.into_iter().map(|(_, l)| l).collect()
}

/// The readiness descriptor of a process started by an upgrade, taken out
/// of the environment (not passed on), close-on-exec.
pub(crate) fn take_ready_fd() -> Option<OwnedFd> {
    let value = std::env::var(READY_FD).ok()?;
    std::env::remove_var(READY_FD);
    let fd = value
        .parse()
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
        .and_then(sys::inherited_fd)
        .and_then(|fd| {
            rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC)?;
            Ok(fd)
        });
    match fd {
        Ok(fd) => Some(fd),
        Err(e) => {
            tracing::warn!("{READY_FD}={value}: {e}; readiness not reported");
            None
        }
    }
}

/// Tell the process that started this one that its workers run.
/// The ticket keys' seed an upgrading process handed over, if any; else a
/// new random one. Before any thread starts (it changes the environment).
pub(crate) fn take_ticket_seed() -> std::io::Result<Seed> {
    let handed = std::env::var(TICKET_SEED_FD).ok().and_then(|value| {
        std::env::remove_var(TICKET_SEED_FD);
        let read = || -> std::io::Result<Seed> {
            let fd = value
                .parse()
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
                .and_then(sys::inherited_fd)?;
            let mut b = zeroize::Zeroizing::new([0u8; SEED_LEN]);
            let mut got = 0;
            while got < SEED_LEN {
                match rustix::io::read(&fd, &mut b[got..])? {
                    0 => break,
                    n => got += n,
                }
            }
            Seed::from_bytes(&b[..got]).ok_or_else(|| std::io::ErrorKind::UnexpectedEof.into())
        };
        read()
            .inspect_err(|e| {
                tracing::warn!(
                    "{TICKET_SEED_FD}={value}: {e}; new ticket keys (the last process's tickets \
                     will not resume)"
                )
            })
            .ok()
    });
    match handed {
        Some(seed) => Ok(seed),
        None => Seed::random().ok_or_else(|| std::io::Error::other("the system RNG failed")),
    }
}

pub(crate) fn report_ready(fd: OwnedFd) {
    if let Err(e) = rustix::io::write(&fd, b"1") {
        tracing::warn!("cannot report readiness to the old process: {e}");
    }
}

#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error("cannot start {exe}: {source}")]
    Spawn {
        exe: PathBuf,
        source: std::io::Error,
    },
    #[error("{exe} exited before it was ready ({status}); its error is above")]
    Exited { exe: PathBuf, status: ExitStatus },
    #[error(
        "{exe} was not ready within {}s; stopped it",
        READY_TIMEOUT.as_secs()
    )]
    Timeout { exe: PathBuf },
}

/// A listening socket to hand on, and its name for `LISTEN_FDNAMES`
/// ([`ADMIN_NAME`], [`HTTP_NAME`], or [`LISTEN_NAME`] for the TLS
/// listeners).
pub(crate) struct Handed {
    pub fd: OwnedFd,
    pub name: &'static str,
}

/// The name of a TLS listener handed on.
pub(crate) const LISTEN_NAME: &str = "listen";

/// What a new process is started as: this executable's path, resolved at
/// start (once the file is replaced, `/proc/self/exe` names the deleted
/// old one), and the same arguments.
pub(crate) struct Exec {
    exe: PathBuf,
    args: Vec<OsString>,
}

impl Exec {
    pub(crate) fn current() -> Exec {
        let args: Vec<OsString> = std::env::args_os().collect();
        let exe = std::fs::read_link("/proc/self/exe")
            .unwrap_or_else(|_| args.first().cloned().unwrap_or_default().into());
        Exec { exe, args }
    }

    /// Start the new process with `sockets` as its `LISTEN_FDS` (3, 4, …)
    /// and wait until it says it is ready; its pid. On error the new process
    /// is gone and nothing changed here.
    pub(crate) fn start(&self, sockets: &[Handed], seed: &Seed) -> Result<u32, UpgradeError> {
        self.spawn_ready(sockets, None, Some(seed))
            .map(|child| child.id())
    }

    /// Start this executable with `sockets` as its `LISTEN_FDS` (3, 4, …,
    /// named in `LISTEN_FDNAMES`), and, for a server process of tlsfront's
    /// privileged parent, `link`: its end of the parent's socket and the
    /// rest of [`crate::privsep::LINK_VAR`]'s value. Waits until the
    /// process says it is ready; on error it is gone and nothing changed.
    pub(crate) fn spawn_ready(
        &self,
        sockets: &[Handed],
        link: Option<(BorrowedFd<'_>, &str)>,
        seed: Option<&Seed>,
    ) -> Result<Child, UpgradeError> {
        let spawn_err = |source| UpgradeError::Spawn {
            exe: self.exe.clone(),
            source,
        };
        let (ready_r, ready_w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| spawn_err(e.into()))?;
        // The seed waits in a pipe (far below its capacity, so the write
        // cannot block) for the new process to read at its start.
        let seed_r = match seed {
            Some(seed) => {
                let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
                    .map_err(|e| spawn_err(e.into()))?;
                rustix::io::write(&w, seed.bytes()).map_err(|e| spawn_err(e.into()))?;
                Some(r)
            }
            None => None,
        };
        let n = sockets.len();
        let mut passed: Vec<_> = sockets.iter().map(|s| s.fd.as_fd()).collect();
        passed.push(ready_w.as_fd());
        if let Some((fd, _)) = link {
            passed.push(fd);
        }
        if let Some(r) = &seed_r {
            passed.push(r.as_fd());
        }
        // `pass_fds` numbers them from 3 in this order.
        let seed_at = 3 + passed.len() - 1;
        let passed = sys::fds_above(&passed, 3 + passed.len() as i32).map_err(spawn_err)?;
        let names: Vec<&str> = sockets.iter().map(|s| s.name).collect();
        // LISTEN_PID must be the new process's own pid, known only after the
        // fork; setting it in the forked child of a threaded process is not
        // async-signal-safe (setenv allocates). The shell sets it and execs
        // tlsfront in the same process: the same pid, no unsafe of ours.
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(r#"LISTEN_PID=$$ exec "$0" "$@""#)
            .arg(&self.exe)
            .args(self.args.iter().skip(1))
            .env("LISTEN_FDS", n.to_string())
            .env("LISTEN_FDNAMES", names.join(":"))
            .env(READY_FD, (3 + n).to_string())
            .env_remove("LISTEN_PID")
            .env_remove(crate::privsep::LINK_VAR)
            .env_remove(TICKET_SEED_FD);
        if seed_r.is_some() {
            cmd.env(TICKET_SEED_FD, seed_at.to_string());
        }
        if let Some((_, rest)) = link {
            cmd.env(crate::privsep::LINK_VAR, format!("{},{rest}", 4 + n))
                // Only the parent talks to systemd.
                .env_remove("NOTIFY_SOCKET");
        }
        sys::pass_fds(&mut cmd, passed);
        let mut child = cmd.spawn().map_err(spawn_err)?;
        // Only the child holds the write end now: its exit ends the read.
        drop(cmd);
        drop(ready_w);
        drop(seed_r);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut byte = [0u8; 1];
            let _ = tx.send(rustix::io::read(&ready_r, &mut byte).unwrap_or(0));
        });
        let exe = self.exe.clone();
        match rx.recv_timeout(READY_TIMEOUT) {
            Ok(1) => Ok(child),
            Ok(_) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                // It closed the pipe: it is exiting (or exec failed).
                let deadline = std::time::Instant::now() + Duration::from_secs(5);
                loop {
                    match child.try_wait() {
                        Ok(Some(status)) => return Err(UpgradeError::Exited { exe, status }),
                        Ok(None) if std::time::Instant::now() < deadline => {
                            std::thread::sleep(Duration::from_millis(20))
                        }
                        _ => {
                            let _ = child.kill();
                            let status = child.wait().map_err(spawn_err)?;
                            return Err(UpgradeError::Exited { exe, status });
                        }
                    }
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(UpgradeError::Timeout { exe })
            }
        }
    }
}
