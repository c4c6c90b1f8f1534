//! The link between tlsfront's privileged parent and its server process.
//!
//! Started as root with `user` set, tlsfront splits in two (nginx's master
//! and workers, HAProxy's master-worker): the parent stays root, binds the
//! sockets, reads what only root may read and opens the log files; the
//! server process, which alone talks to clients, runs as `user` with no
//! capabilities from its first file read on. This module is the server
//! process's side of their socket, and the protocol both speak:
//!
//! - the server process asks for a file's bytes (configuration,
//!   certificates, keys, OCSP responses, ticket keys) or for an access log
//!   opened for appending; the parent answers with the bytes, the open
//!   descriptor (`SCM_RIGHTS`), an error, or "not one of mine" for a path
//!   its configuration does not name, which the server process then reads
//!   as itself;
//! - everything else (reload, reopen, drain) the parent says with the
//!   signals an operator would send, forwarded to the server process.
//!
//! Frames on a Unix stream socket: a `u32` length (little-endian) of what
//! follows, a kind byte, the payload. Requests are answered in order, one
//! at a time.

use std::io::{IoSlice, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// The variable that makes a tlsfront process the server process of a
/// parent: `FD,PARENT_PID,USER[,GROUP]` (its end of the link, the parent,
/// whom to run as).
pub const LINK_VAR: &str = "TLSFRONT_PARENT_LINK";

/// The largest frame either side accepts (a certificate chain or a key
/// file is far smaller; a frame this large is a broken peer).
const MAX_FRAME: usize = 16 << 20;

const READ: u8 = 1;
const OPEN_LOG: u8 = 2;
const DATA: u8 = 0x81;
const FD: u8 = 0x82;
const ERROR: u8 = 0x80;
const NOT_HELD: u8 = 0x83;

/// What the server process asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    /// A file's bytes.
    Read(PathBuf),
    /// An access log, open for appending.
    OpenLog(PathBuf),
}

/// What the parent answers.
pub enum Answer {
    Data(zeroize::Zeroizing<Vec<u8>>),
    Fd(OwnedFd),
    Error(std::io::Error),
    /// The path is not among the files of the configuration the parent
    /// loaded last: the server process reads it as itself.
    NotHeld,
}

/// The server process's end of the link, taken from [`LINK_VAR`].
pub struct ChildLink {
    sock: UnixStream,
    parent: u32,
    user: String,
    group: Option<String>,
}

/// This process's link to its parent, once [`ChildLink::install`] made it
/// the server process of one. Process-wide like the inherited sockets: the
/// file reads it serves happen wherever configuration is loaded.
static LINK: OnceLock<Installed> = OnceLock::new();

struct Installed {
    sock: Mutex<UnixStream>,
    parent: u32,
}

#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    #[error("{LINK_VAR}={0:?}: not FD,PARENT_PID,USER[,GROUP] (it is set only by tlsfront's parent process)")]
    Malformed(String),
    #[error("{LINK_VAR}: descriptor {fd}: {source}")]
    Fd { fd: i32, source: std::io::Error },
    #[error(transparent)]
    Privilege(#[from] crate::privileges::PrivilegeError),
    #[error("the parent process {0} is gone")]
    Orphaned(u32),
}

impl ChildLink {
    /// The link this process was started with, if any, removed from the
    /// environment. Must run before any thread starts.
    pub fn take() -> Result<Option<ChildLink>, LinkError> {
        let Ok(value) = std::env::var(LINK_VAR) else {
            return Ok(None);
        };
        std::env::remove_var(LINK_VAR);
        let malformed = || LinkError::Malformed(value.clone());
        let mut parts = value.split(',');
        let fd: i32 = parts
            .next()
            .and_then(|f| f.parse().ok())
            .ok_or_else(malformed)?;
        let parent: u32 = parts
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or_else(malformed)?;
        let user = parts
            .next()
            .filter(|u| !u.is_empty())
            .ok_or_else(malformed)?
            .to_string();
        let group = parts.next().map(str::to_string);
        if parts.next().is_some() {
            return Err(malformed());
        }
        let owned = crate::sys::inherited_fd(fd)
            .and_then(|fd| {
                rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC)?;
                Ok(fd)
            })
            .map_err(|source| LinkError::Fd { fd, source })?;
        Ok(Some(ChildLink {
            sock: UnixStream::from(owned),
            parent,
            user,
            group,
        }))
    }

    /// Become the user the parent named (its groups, its group, its uid),
    /// ask to be stopped when the parent dies, and make the link the
    /// process's for [`read`] and [`open_log`]. Before anything is read.
    pub fn install(self) -> Result<u32, LinkError> {
        let who = crate::privileges::RunAs::resolve(&self.user, self.group.as_deref(), |k| {
            format!("{LINK_VAR} ({k})")
        })?;
        who.switch()?;
        // Set after the switch: a change of credentials clears it.
        let _ =
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM));
        // The parent may have died before the line above.
        if rustix::process::getppid().map(|p| p.as_raw_nonzero().get() as u32) != Some(self.parent)
        {
            return Err(LinkError::Orphaned(self.parent));
        }
        let parent = self.parent;
        let _ = LINK.set(Installed {
            sock: Mutex::new(self.sock),
            parent,
        });
        Ok(parent)
    }
}

/// The parent's pid, in a server process.
pub fn parent() -> Option<u32> {
    LINK.get().map(|l| l.parent)
}

/// In a server process, a file's bytes as the parent read them; `None`
/// outside one, or for a file the parent does not hold (read it as
/// this process).
pub fn read(path: &Path) -> Option<std::io::Result<zeroize::Zeroizing<Vec<u8>>>> {
    let link = LINK.get()?;
    match link.ask(READ, path) {
        Ok((DATA, payload, _)) => Some(Ok(zeroize::Zeroizing::new(payload))),
        Ok((NOT_HELD, ..)) => None,
        Ok((ERROR, payload, _)) => Some(Err(decode_error(&payload))),
        Ok((kind, ..)) => Some(Err(unexpected(kind))),
        Err(e) => Some(Err(link.lost(e))),
    }
}

/// In a server process, the access log at `path` as the parent opened it;
/// `None` outside one, or for a path the parent does not hold.
pub fn open_log(path: &Path) -> Option<std::io::Result<std::fs::File>> {
    let link = LINK.get()?;
    match link.ask(OPEN_LOG, path) {
        Ok((FD, _, Some(fd))) => Some(Ok(std::fs::File::from(fd))),
        Ok((NOT_HELD, ..)) => None,
        Ok((ERROR, payload, _)) => Some(Err(decode_error(&payload))),
        Ok((kind, ..)) => Some(Err(unexpected(kind))),
        Err(e) => Some(Err(link.lost(e))),
    }
}

fn unexpected(kind: u8) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("the parent process answered with frame kind {kind:#x}"),
    )
}

impl Installed {
    fn ask(&self, kind: u8, path: &Path) -> std::io::Result<(u8, Vec<u8>, Option<OwnedFd>)> {
        let mut sock = self.sock.lock().unwrap_or_else(|p| p.into_inner());
        write_frame(&mut sock, kind, path.as_os_str().as_bytes(), None)?;
        read_frame(&sock)
    }

    fn lost(&self, e: std::io::Error) -> std::io::Error {
        std::io::Error::new(
            e.kind(),
            format!("asking the parent process {} for it: {e}", self.parent),
        )
    }
}

/// The parent's side: answer the server process's requests with `answer`
/// until it closes the link (it exited).
pub fn serve(sock: UnixStream, mut answer: impl FnMut(Request) -> Answer) -> std::io::Result<()> {
    let mut sock = sock;
    loop {
        let (kind, payload, _) = match read_frame(&sock) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        };
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(&payload));
        let request = match kind {
            READ => Request::Read(path),
            OPEN_LOG => Request::OpenLog(path),
            other => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("the server process sent frame kind {other:#x}"),
                ))
            }
        };
        match answer(request) {
            Answer::Data(bytes) => write_frame(&mut sock, DATA, &bytes, None)?,
            Answer::Fd(fd) => write_frame(&mut sock, FD, &[], Some(&fd))?,
            Answer::NotHeld => write_frame(&mut sock, NOT_HELD, &[], None)?,
            Answer::Error(e) => write_frame(&mut sock, ERROR, &encode_error(&e), None)?,
        }
    }
}

/// An error as errno (0 if none) and its message.
fn encode_error(e: &std::io::Error) -> Vec<u8> {
    let mut out = e.raw_os_error().unwrap_or(0).to_le_bytes().to_vec();
    out.extend_from_slice(e.to_string().as_bytes());
    out
}

fn decode_error(payload: &[u8]) -> std::io::Error {
    let (errno, message) = payload.split_at(payload.len().min(4));
    let errno = i32::from_le_bytes(errno.try_into().unwrap_or([0; 4]));
    let message = String::from_utf8_lossy(message).into_owned();
    let kind = if errno > 0 {
        std::io::Error::from_raw_os_error(errno).kind()
    } else {
        std::io::ErrorKind::Other
    };
    std::io::Error::new(kind, message)
}

fn write_frame(
    sock: &mut UnixStream,
    kind: u8,
    payload: &[u8],
    fd: Option<&OwnedFd>,
) -> std::io::Result<()> {
    if payload.len() + 1 > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "{} bytes: more than the link carries ({MAX_FRAME})",
                payload.len()
            ),
        ));
    }
    let len = (payload.len() as u32 + 1).to_le_bytes();
    let head = [len[0], len[1], len[2], len[3], kind];
    match fd {
        None => {
            sock.write_all(&head)?;
            sock.write_all(payload)
        }
        Some(fd) => {
            // The descriptor rides on the frame's head (its first bytes), so
            // the reader finds it with them.
            let fds = [fd.as_fd()];
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
            let mut control = rustix::net::SendAncillaryBuffer::new(&mut space);
            control.push(rustix::net::SendAncillaryMessage::ScmRights(&fds));
            let sent = rustix::net::sendmsg(
                &*sock,
                &[IoSlice::new(&head)],
                &mut control,
                rustix::net::SendFlags::NOSIGNAL,
            )?;
            sock.write_all(&head[sent..])?;
            sock.write_all(payload)
        }
    }
}

/// Read one frame: its kind, payload and the descriptor that came with it.
fn read_frame(sock: &UnixStream) -> std::io::Result<(u8, Vec<u8>, Option<OwnedFd>)> {
    let mut fd = None;
    let mut head = [0u8; 5];
    recv_exact(sock, &mut head, &mut fd)?;
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if len == 0 || len > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes on the parent link"),
        ));
    }
    let mut payload = vec![0u8; len - 1];
    recv_exact(sock, &mut payload, &mut fd)?;
    Ok((head[4], payload, fd))
}

/// Fill `buf`, keeping a descriptor that arrives with the bytes (a second
/// one is closed: the protocol sends at most one per frame).
fn recv_exact(
    sock: &UnixStream,
    mut buf: &mut [u8],
    fd: &mut Option<OwnedFd>,
) -> std::io::Result<()> {
    while !buf.is_empty() {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = rustix::net::RecvAncillaryBuffer::new(&mut space);
        let got = rustix::net::recvmsg(
            sock,
            &mut [std::io::IoSliceMut::new(buf)],
            &mut control,
            rustix::net::RecvFlags::CMSG_CLOEXEC,
        );
        let got = match got {
            Ok(g) => g,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        for message in control.drain() {
            if let rustix::net::RecvAncillaryMessage::ScmRights(fds) = message {
                for f in fds {
                    if fd.is_none() {
                        *fd = Some(f);
                    }
                }
            }
        }
        if got.bytes == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf = &mut buf[got.bytes..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_answered_with_bytes_descriptors_and_errors() {
        let (child, parent) = UnixStream::pair().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("a.log");
        let log2 = log.clone();
        let server = std::thread::spawn(move || {
            serve(parent, |r| match r {
                Request::Read(p) if p == Path::new("/held") => {
                    Answer::Data(zeroize::Zeroizing::new(b"secret".to_vec()))
                }
                Request::Read(p) if p == Path::new("/denied") => {
                    Answer::Error(std::io::Error::from_raw_os_error(libc::EACCES))
                }
                Request::OpenLog(p) if p == log2 => {
                    Answer::Fd(std::fs::File::create(&p).unwrap().into())
                }
                _ => Answer::NotHeld,
            })
        });
        let link = Installed {
            sock: Mutex::new(child),
            parent: 1,
        };
        let (kind, bytes, _) = link.ask(READ, Path::new("/held")).unwrap();
        assert_eq!((kind, bytes.as_slice()), (DATA, &b"secret"[..]));
        let (kind, payload, _) = link.ask(READ, Path::new("/denied")).unwrap();
        assert_eq!(kind, ERROR);
        assert_eq!(
            decode_error(&payload).kind(),
            std::io::ErrorKind::PermissionDenied
        );
        assert_eq!(link.ask(READ, Path::new("/other")).unwrap().0, NOT_HELD);
        let (kind, _, fd) = link.ask(OPEN_LOG, &log).unwrap();
        assert_eq!(kind, FD);
        let mut f = std::fs::File::from(fd.unwrap());
        f.write_all(b"line\n").unwrap();
        assert_eq!(std::fs::read(&log).unwrap(), b"line\n");
        drop(link);
        server.join().unwrap().unwrap();
    }

    #[test]
    fn a_frame_too_large_is_refused_not_allocated() {
        use std::io::Read;
        let (mut a, b) = UnixStream::pair().unwrap();
        a.write_all(&u32::MAX.to_le_bytes()).unwrap();
        a.write_all(&[READ]).unwrap();
        let e = read_frame(&b).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        let mut rest = Vec::new();
        drop(a);
        let _ = (&b).read_to_end(&mut rest);
    }
}
