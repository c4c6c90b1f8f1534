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
//! - with `keys_in_parent` (the default), a private key does not leave the
//!   parent at all: the server process gets the key's public half and a
//!   handle ([`ParentKey`], a rustls `SigningKey`), and the parent signs
//!   each handshake's CertificateVerify (or TLS 1.2 ServerKeyExchange) for
//!   it, on links of their own (one per signer at a time, so that workers
//!   do not queue behind one another, each served by a parent thread);
//! - everything else (reload, reopen, drain) the parent says with the
//!   signals an operator would send, forwarded to the server process.
//!
//! Frames on a Unix stream socket: a `u32` length (little-endian) of what
//! follows, a kind byte, the payload. Requests are answered in order, one
//! at a time.

use rustls::pki_types::SubjectPublicKeyInfoDer;
use rustls::sign::{Signer, SigningKey};
use rustls::{SignatureAlgorithm, SignatureScheme};
use std::io::{IoSlice, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

/// The variable that makes a tlsfront process the server process of a
/// parent: `FD,PARENT_PID,USER[,GROUP]` (its end of the link, the parent,
/// whom to run as).
pub const LINK_VAR: &str = "TLSFRONT_PARENT_LINK";

/// The largest frame either side accepts (a certificate chain or a key
/// file is far smaller; a frame this large is a broken peer).
const MAX_FRAME: usize = 16 << 20;

const READ: u8 = 1;
const OPEN_LOG: u8 = 2;
const KEY: u8 = 3;
const SIGNER: u8 = 4;
const SIGN: u8 = 5;
const TICKET_SEED: u8 = 6;
const DATA: u8 = 0x81;
const FD: u8 = 0x82;
const ERROR: u8 = 0x80;
const NOT_HELD: u8 = 0x83;
const KEY_INFO: u8 = 0x84;

/// Most signing links a server process opens (each is a thread in the
/// parent); signers beyond it wait for one to come free. Far above the
/// worker count of any machine this runs on.
const MAX_SIGNERS: usize = 64;

/// What the server process asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    /// A file's bytes.
    Read(PathBuf),
    /// An access log, open for appending.
    OpenLog(PathBuf),
    /// A private key, to be kept in the parent and used through a handle.
    Key(PathBuf),
    /// A new link on which to ask for signatures (answered with
    /// [`Answer::Fd`], its other end served by [`serve_signing`]).
    Signer,
    /// The seed of the in-memory session ticket keys (answered with
    /// [`Answer::Data`]): the parent's, the same for every server process
    /// it starts, so that one started again resumes the sessions of the
    /// one before.
    TicketSeed,
}

/// What the parent says of a private key it holds for the server process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInfo {
    /// What the server process names the key by in a signing request.
    pub handle: u32,
    pub algorithm: SignatureAlgorithm,
    /// The schemes the key signs with, in its own order of preference
    /// (rustls picks the first one the client offers).
    pub schemes: Vec<SignatureScheme>,
    /// SubjectPublicKeyInfo, DER: checked against the certificate.
    pub public_key: Vec<u8>,
}

impl KeyInfo {
    fn encode(&self) -> Vec<u8> {
        let mut out = self.handle.to_le_bytes().to_vec();
        out.push(u8::from(self.algorithm));
        out.extend_from_slice(&(self.schemes.len() as u16).to_le_bytes());
        for s in &self.schemes {
            out.extend_from_slice(&u16::from(*s).to_le_bytes());
        }
        out.extend_from_slice(&self.public_key);
        out
    }

    fn decode(b: &[u8]) -> Option<KeyInfo> {
        let handle = u32::from_le_bytes(b.get(..4)?.try_into().ok()?);
        let algorithm = SignatureAlgorithm::from(*b.get(4)?);
        let n = u16::from_le_bytes(b.get(5..7)?.try_into().ok()?) as usize;
        let list = b.get(7..7 + 2 * n)?;
        let schemes = list
            .chunks_exact(2)
            .map(|c| SignatureScheme::from(u16::from_le_bytes([c[0], c[1]])))
            .collect();
        Some(KeyInfo {
            handle,
            algorithm,
            schemes,
            public_key: b[7 + 2 * n..].to_vec(),
        })
    }
}

/// What the parent answers.
pub enum Answer {
    Data(zeroize::Zeroizing<Vec<u8>>),
    Fd(OwnedFd),
    Key(KeyInfo),
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
    signers: Signers,
}

/// The signing links of a server process: idle ones, and how many exist.
#[derive(Default)]
struct Signers {
    pool: Mutex<(Vec<UnixStream>, usize)>,
    freed: Condvar,
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
            signers: Signers::default(),
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

/// In a server process, the bytes of the session ticket keys' seed, from
/// the parent; `None` outside one.
pub fn ticket_seed() -> Option<std::io::Result<zeroize::Zeroizing<Vec<u8>>>> {
    let link = LINK.get()?;
    Some(match link.ask(TICKET_SEED, Path::new("")) {
        Ok((DATA, payload, _)) => Ok(zeroize::Zeroizing::new(payload)),
        Ok((ERROR, payload, _)) => Err(decode_error(&payload)),
        Ok((kind, ..)) => Err(unexpected(kind)),
        Err(e) => Err(link.lost(e)),
    })
}

/// In a server process, the private key at `path` as the parent holds it
/// (`keys_in_parent`); `None` outside one, or when the parent does not
/// keep it (then read it, through [`read`]).
pub fn key(path: &Path) -> Option<std::io::Result<ParentKey>> {
    let link = LINK.get()?;
    match link.ask(KEY, path) {
        Ok((KEY_INFO, payload, _)) => Some(
            KeyInfo::decode(&payload)
                .map(|info| ParentKey {
                    info: Arc::new(info),
                })
                .ok_or_else(|| unexpected(KEY_INFO)),
        ),
        Ok((NOT_HELD, ..)) => None,
        Ok((ERROR, payload, _)) => Some(Err(decode_error(&payload))),
        Ok((kind, ..)) => Some(Err(unexpected(kind))),
        Err(e) => Some(Err(link.lost(e))),
    }
}

/// A private key the parent holds: rustls asks it for a signature once per
/// full handshake, and the parent makes it.
#[derive(Debug)]
pub struct ParentKey {
    info: Arc<KeyInfo>,
}

impl SigningKey for ParentKey {
    fn choose_scheme(&self, offered: &[SignatureScheme]) -> Option<Box<dyn Signer>> {
        let scheme = *self.info.schemes.iter().find(|s| offered.contains(s))?;
        Some(Box::new(ParentSigner {
            info: self.info.clone(),
            scheme,
        }))
    }

    fn public_key(&self) -> Option<SubjectPublicKeyInfoDer<'_>> {
        Some(SubjectPublicKeyInfoDer::from(&self.info.public_key[..]))
    }

    fn algorithm(&self) -> SignatureAlgorithm {
        self.info.algorithm
    }
}

#[derive(Debug)]
struct ParentSigner {
    info: Arc<KeyInfo>,
    scheme: SignatureScheme,
}

impl Signer for ParentSigner {
    fn sign(&self, message: &[u8]) -> Result<Vec<u8>, rustls::Error> {
        let fail = |e: std::io::Error| {
            rustls::Error::General(format!("the parent process did not sign: {e}"))
        };
        let link = LINK
            .get()
            .ok_or_else(|| fail(std::io::ErrorKind::NotConnected.into()))?;
        link.sign(self.info.handle, self.scheme, message)
            .map_err(fail)
    }

    fn scheme(&self) -> SignatureScheme {
        self.scheme
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

    /// A signature from the parent, on an idle signing link, or a new one
    /// while fewer than [`MAX_SIGNERS`] exist, or the next one freed.
    fn sign(
        &self,
        handle: u32,
        scheme: SignatureScheme,
        message: &[u8],
    ) -> std::io::Result<Vec<u8>> {
        let mut link = {
            let mut pool = self.signers.pool.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if let Some(l) = pool.0.pop() {
                    break l;
                }
                if pool.1 < MAX_SIGNERS {
                    pool.1 += 1;
                    drop(pool);
                    match self.ask(SIGNER, Path::new("")) {
                        Ok((FD, _, Some(fd))) => break UnixStream::from(fd),
                        other => {
                            self.signers
                                .pool
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .1 -= 1;
                            return Err(match other {
                                Ok((ERROR, payload, _)) => decode_error(&payload),
                                Ok((kind, ..)) => unexpected(kind),
                                Err(e) => self.lost(e),
                            });
                        }
                    }
                }
                pool = self
                    .signers
                    .freed
                    .wait(pool)
                    .unwrap_or_else(|p| p.into_inner());
            }
        };
        let mut request = Vec::with_capacity(6 + message.len());
        request.extend_from_slice(&handle.to_le_bytes());
        request.extend_from_slice(&u16::from(scheme).to_le_bytes());
        request.extend_from_slice(message);
        let answer = write_frame(&mut link, SIGN, &request, None).and_then(|()| read_frame(&link));
        let mut pool = self.signers.pool.lock().unwrap_or_else(|p| p.into_inner());
        match answer {
            Ok(a) => {
                pool.0.push(link);
                self.signers.freed.notify_one();
                match a {
                    (DATA, signature, _) => Ok(signature),
                    (ERROR, payload, _) => Err(decode_error(&payload)),
                    (kind, ..) => Err(unexpected(kind)),
                }
            }
            // A broken link is dropped; a new one may be made.
            Err(e) => {
                pool.1 -= 1;
                self.signers.freed.notify_one();
                Err(self.lost(e))
            }
        }
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
        let Some((kind, payload)) = next_request(&sock)? else {
            return Ok(());
        };
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(&payload));
        let request = match kind {
            READ => Request::Read(path),
            OPEN_LOG => Request::OpenLog(path),
            KEY => Request::Key(path),
            SIGNER => Request::Signer,
            TICKET_SEED => Request::TicketSeed,
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
            Answer::Key(info) => write_frame(&mut sock, KEY_INFO, &info.encode(), None)?,
            Answer::NotHeld => write_frame(&mut sock, NOT_HELD, &[], None)?,
            Answer::Error(e) => write_frame(&mut sock, ERROR, &encode_error(&e), None)?,
        }
    }
}

/// The parent's side of a signing link: answer each request with
/// `sign(handle, scheme, message)` until the server process closes it.
pub fn serve_signing(
    sock: UnixStream,
    sign: impl Fn(u32, SignatureScheme, &[u8]) -> std::io::Result<Vec<u8>>,
) -> std::io::Result<()> {
    let mut sock = sock;
    loop {
        let Some((kind, payload)) = next_request(&sock)? else {
            return Ok(());
        };
        if kind != SIGN || payload.len() < 6 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("the server process sent frame kind {kind:#x} on a signing link"),
            ));
        }
        let handle = u32::from_le_bytes([payload[0], payload[1], payload[2], payload[3]]);
        let scheme = SignatureScheme::from(u16::from_le_bytes([payload[4], payload[5]]));
        match sign(handle, scheme, &payload[6..]) {
            Ok(signature) => write_frame(&mut sock, DATA, &signature, None)?,
            Err(e) => write_frame(&mut sock, ERROR, &encode_error(&e), None)?,
        }
    }
}

/// The next request on the parent's side of a link; `None` once the
/// server process closed it (it exited).
fn next_request(sock: &UnixStream) -> std::io::Result<Option<(u8, Vec<u8>)>> {
    match read_frame(sock) {
        Ok((kind, payload, _)) => Ok(Some((kind, payload))),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(e),
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
        // One write: a signing round trip is on every full handshake.
        None => {
            let mut parts = [IoSlice::new(&head), IoSlice::new(payload)];
            let mut parts = &mut parts[..];
            while !parts.is_empty() {
                let n = sock.write_vectored(parts)?;
                if n == 0 {
                    return Err(std::io::ErrorKind::WriteZero.into());
                }
                IoSlice::advance_slices(&mut parts, n);
            }
            Ok(())
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
            signers: Signers::default(),
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
    fn key_info_round_trips() {
        let info = KeyInfo {
            handle: 7,
            algorithm: SignatureAlgorithm::RSA,
            schemes: vec![
                SignatureScheme::RSA_PSS_SHA512,
                SignatureScheme::RSA_PKCS1_SHA256,
            ],
            public_key: vec![0x30, 3, 1, 2, 3],
        };
        assert_eq!(KeyInfo::decode(&info.encode()), Some(info));
        assert_eq!(KeyInfo::decode(&[1, 2, 3]), None);
    }

    #[test]
    fn signatures_come_over_signing_links_the_parent_hands_out() {
        // The parent's side: a signing link per SIGNER request, each
        // answering with the handle, the scheme and the message echoed.
        let (child, parent) = UnixStream::pair().unwrap();
        let server = std::thread::spawn(move || {
            serve(parent, |r| match r {
                Request::Signer => {
                    let (mine, theirs) = UnixStream::pair().unwrap();
                    std::thread::spawn(move || {
                        serve_signing(mine, |h, s, m| {
                            if h == 0 {
                                return Err(std::io::Error::other("no key 0"));
                            }
                            let mut out = h.to_le_bytes().to_vec();
                            out.extend_from_slice(&u16::from(s).to_le_bytes());
                            out.extend_from_slice(m);
                            Ok(out)
                        })
                    });
                    Answer::Fd(theirs.into())
                }
                _ => Answer::NotHeld,
            })
        });
        let link = Arc::new(Installed {
            sock: Mutex::new(child),
            parent: 1,
            signers: Signers::default(),
        });
        // Signers at once from several threads: each gets a link.
        let threads: Vec<_> = (1..=4u32)
            .map(|h| {
                let link = link.clone();
                std::thread::spawn(move || {
                    for _ in 0..20 {
                        let got = link.sign(h, SignatureScheme::ED25519, b"msg").unwrap();
                        let mut want = h.to_le_bytes().to_vec();
                        want.extend_from_slice(&u16::from(SignatureScheme::ED25519).to_le_bytes());
                        want.extend_from_slice(b"msg");
                        assert_eq!(got, want);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let made = link.signers.pool.lock().unwrap().1;
        assert!((1..=4).contains(&made), "{made} links");
        let e = link.sign(0, SignatureScheme::ED25519, b"x").unwrap_err();
        assert!(e.to_string().contains("no key 0"), "{e}");
        drop(Arc::into_inner(link));
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
