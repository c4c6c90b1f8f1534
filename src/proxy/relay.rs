//! Moving bytes between the TLS client and the backend, both directions at
//! once, in one task per connection driven by socket readiness.
//!
//! kTLS path: `splice(client → pipe → backend)` and `splice(backend → pipe
//! → client)`, one pipe per direction (a second one reads a bulk upload's
//! next records ahead), so the bytes never enter user space; the kernel
//! decrypts on the way in and encrypts on the way out. `splice()`
//! refuses control records (EINVAL on 6.1, EIO elsewhere): the record is
//! then taken with `recvmsg` by the kTLS stream (close_notify, alerts,
//! KeyUpdate), and splicing resumes.
//!
//! User-space path: rustls decrypts into a bounded buffer for the backend,
//! and encrypts what the backend sends into a bounded output queue.
//!
//! Both: half-close is propagated (client close_notify or FIN → backend
//! `shutdown(WR)`; backend EOF → close_notify and `shutdown(WR)` to the
//! client), a slow reader stops reads on the other side (backpressure), and
//! a connection idle in both directions for the idle timeout is closed.

use super::backend::Backend;
use crate::ktls::stream::{KtlsStream, Recv};
use crate::metrics::SiteMetrics as Metrics;
use crate::server::timer::Deadline;
use crate::tls::userspace::UserTls;
use crate::transport::{Path, Transport, TransportError};
use rustix::pipe::SpliceFlags;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;
use tokio::io::Interest;
use tokio::time::Instant;

thread_local! {
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// How long a quiet connection keeps its user-space buffers.
const IDLE_GRACE: Duration = Duration::from_millis(50);

/// Per-direction buffering: a pipe's default capacity (16 pages).
const WINDOW: usize = 64 * 1024;

/// The largest TLS record's plaintext: what kTLS puts in a full record.
const RECORD: usize = 16 * 1024;

/// What one read from the backend takes on the user-space path: four full
/// records, encrypted together and written with one `sendto`.
const SCRATCH_LEN: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    #[error("client side: {0}")]
    Client(#[from] TransportError),
    #[error("backend side: {0}")]
    Backend(io::Error),
    #[error("idle for {0:?} in both directions")]
    Idle(Duration),
}

impl RelayError {
    pub fn kind(&self) -> &'static str {
        match self {
            RelayError::Client(e) => e.kind(),
            RelayError::Backend(e) if e.kind() == io::ErrorKind::ConnectionReset => "backend_reset",
            RelayError::Backend(_) => "backend_io",
            RelayError::Idle(_) => "idle_timeout",
        }
    }
}

/// The process's byte counters, and this connection's own (for its
/// access-log line): every count goes to both. (Atomics only to keep the
/// relay future `Send`: one task counts, so a load and a store will do.)
pub struct Meter<'a> {
    pub metrics: &'a Metrics,
    /// Bytes from the client, and to it.
    pub from_client: AtomicU64,
    pub to_client: AtomicU64,
}

impl<'a> Meter<'a> {
    pub fn new(metrics: &'a Metrics) -> Meter<'a> {
        Meter {
            metrics,
            from_client: Default::default(),
            to_client: Default::default(),
        }
    }

    fn bytes_in(&self, p: Path, n: u64) {
        self.metrics.bytes_in(p, n);
        let c = &self.from_client;
        c.store(c.load(Relaxed) + n, Relaxed);
    }

    fn bytes(&self, p: Path, n: u64) {
        self.metrics.bytes(p, n);
        let c = &self.to_client;
        c.store(c.load(Relaxed) + n, Relaxed);
    }
}

/// What each side still has to do.
#[derive(Default)]
struct Sides {
    /// The client sent its last byte (close_notify or FIN).
    client_eof: bool,
    /// We passed that on: backend `shutdown(WR)`.
    backend_shut: bool,
    /// The backend sent its last byte.
    backend_eof: bool,
    /// We passed that on: close_notify + `shutdown(WR)` to the client.
    client_shut: bool,
}

impl Sides {
    fn done(&self) -> bool {
        self.backend_shut && self.client_shut
    }
}

fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::NONBLOCK | rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(io::Error::from)
}

/// A pipe for splices out of a kTLS socket, or `None` when the kernel would
/// only give a smaller one than [`WINDOW`]: past the user's pipe budget
/// (`/proc/sys/fs/pipe-user-pages-soft`) a new pipe gets two slots, and a
/// record that does not fit the slots left is cut short by the kernel's
/// `tls_sw_splice_read` without an error.
fn rx_pipe() -> io::Result<Option<(OwnedFd, OwnedFd)>> {
    // In debug builds (the tests'), `TLSFRONT_TEST_NO_RX_PIPE=1` acts as if
    // every pipe were too small, so the copying path is tested too.
    #[cfg(debug_assertions)]
    if std::env::var_os("TLSFRONT_TEST_NO_RX_PIPE").is_some_and(|v| v == "1") {
        return Ok(None);
    }
    let p = pipe()?;
    let size = |p: &(OwnedFd, OwnedFd)| rustix::pipe::fcntl_getpipe_size(&p.1).unwrap_or(0);
    if size(&p) >= WINDOW {
        return Ok(Some(p));
    }
    let _ = rustix::pipe::fcntl_setpipe_size(&p.1, WINDOW);
    Ok((size(&p) >= WINDOW).then_some(p))
}

/// What `splice()` from a kTLS socket returns for a record it will not
/// splice: a control record (EINVAL on 6.1, EIO later).
fn refused_by_splice(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::EIO))
}

const SPLICE: SpliceFlags = SpliceFlags::NONBLOCK.union(SpliceFlags::MOVE);

/// Splice the client's decrypted records into `w`, an empty pipe (kTLS RX
/// must only splice into one: see `rx_pipe`), and count what came.
fn splice_in(tls: &mut KtlsStream, w: &OwnedFd, m: &Meter<'_>) -> io::Result<usize> {
    let n = tls.socket().try_io(Interest::READABLE, || {
        rustix::pipe::splice(tls.socket().as_fd(), None, w, None, WINDOW, SPLICE)
            .map_err(io::Error::from)
    })?;
    if n > 0 {
        tls.count_received(n as u64);
        m.bytes_in(Path::Ktls, n as u64);
    }
    Ok(n)
}

/// The kTLS + splice relay. (The streams stay boxed: an async fn keeps
/// its arguments twice over in its state, and the state is what a
/// connection costs.)
pub async fn splice(
    mut tls: Box<KtlsStream>,
    backend: &Backend,
    idle: Duration,
    m: &Meter<'_>,
) -> Result<(), RelayError> {
    // `None`: no pipe kTLS can safely splice into; the client's records
    // are then read by copy (see `rx_pipe`).
    let mut c2b = rx_pipe().map_err(RelayError::Backend)?;
    let (b2c_r, b2c_w) = pipe().map_err(RelayError::Backend)?;
    let (mut in_c2b, mut in_b2c) = (0usize, 0usize);
    // The client's next records, read while `c2b` still holds the last
    // ones: a second pipe, made on the first full record (a bulk upload).
    let mut ahead: Option<(OwnedFd, OwnedFd)> = None;
    let mut in_ahead = 0usize;
    // Something other than a record waits behind `c2b` (a control record,
    // an empty record, the end): no read ahead until the read below has
    // taken it, in order.
    let mut ahead_blocked = false;
    let mut no_ahead = false;
    // An error the read-ahead met: raised once what `c2b` holds is through.
    let mut ahead_err: Option<io::Error> = None;
    // The last write to the backend said more follows: TCP may hold its
    // tail until the next one, so nothing may wait on the client before.
    let mut held = false;
    // Plaintext that came out of `recv_once` instead of a pipe (rare).
    let mut side: Vec<u8> = Vec::new();
    let mut s = Sides::default();
    let mut idle_at = Deadline::at(Instant::now() + idle);
    // Something moved since the idle deadline was last set.
    let mut active = false;
    loop {
        let mut want_c: Option<Interest> = None;
        let mut want_b: Option<Interest> = None;
        let mut moved = false;

        // Client -> backend. Fill the pipe only when it is empty, so that
        // EAGAIN can only mean "no whole record yet".
        if !s.client_eof && in_c2b == 0 && side.is_empty() {
            if let Some(e) = ahead_err.take() {
                return Err(tls.recv_failed(e).into());
            }
            ahead_blocked = false;
            match c2b.as_ref().map(|(_, w)| splice_in(&mut tls, w, m)) {
                Some(Ok(n)) if n > 0 => {
                    in_c2b = n;
                    moved = true;
                }
                Some(Err(e)) if would_block(&e) => add(&mut want_c, Interest::READABLE),
                Some(Err(e)) if !refused_by_splice(&e) => return Err(tls.recv_failed(e).into()),
                // A control record heads the queue (`splice()` refuses
                // it), or `splice()` read nothing (the end, or an empty
                // record, which TLS 1.3 allows and is not the end), or
                // there is no pipe: one record by copy.
                _ => {
                    let mut buf = vec![0u8; 16 * 1024 + 512];
                    let got = match tls.recv_once(&mut buf).await {
                        Err(TransportError::KeyUpdateUnsupported) => {
                            // Our sending key still stands: close properly,
                            // read nothing more (see KtlsStream::key_update).
                            let _ = tls.close().await;
                            return Err(TransportError::KeyUpdateUnsupported.into());
                        }
                        r => r?,
                    };
                    match got {
                        Recv::Data(n) => {
                            side.extend_from_slice(&buf[..n]);
                            m.bytes_in(Path::Ktls, n as u64);
                            moved = true;
                        }
                        Recv::Closed => {
                            s.client_eof = true;
                            moved = true;
                        }
                        Recv::Control => moved = true,
                        Recv::WouldBlock => add(&mut want_c, Interest::READABLE),
                    }
                }
            }
        }
        // Read ahead: with a whole record in hand and the next one already
        // there, the backend's socket is told more follows (SPLICE_F_MORE),
        // so TCP sends full segments rather than one per record. Into a
        // second pipe, empty like the first was: kTLS RX must only splice
        // into an empty pipe (the kernel's tls_sw_splice_read skips what a
        // pipe short of free slots could not take).
        let read_ahead =
            !s.client_eof && in_c2b >= RECORD && in_ahead == 0 && side.is_empty() && !ahead_blocked;
        if read_ahead && ahead.is_none() && !no_ahead {
            // Without a pipe fit for it, the relay just does not read ahead.
            ahead = rx_pipe().ok().flatten();
            no_ahead = ahead.is_none();
        }
        if let Some((_, w)) = ahead.as_ref().filter(|_| read_ahead) {
            match splice_in(&mut tls, w, m) {
                Ok(n) if n > 0 => {
                    in_ahead = n;
                    moved = true;
                }
                // Nothing more yet: the read above asks for readiness once
                // `c2b` is empty.
                Err(e) if would_block(&e) => {}
                // Anything else waits for the read above, behind what
                // `c2b` holds: a control record or nothing read (taken
                // there, in order), or an error (raised there, so the
                // records before it still reach the backend).
                Ok(_) => ahead_blocked = true,
                Err(e) => {
                    ahead_blocked = true;
                    if !refused_by_splice(&e) {
                        ahead_err = Some(e);
                    }
                }
            }
        }
        if !side.is_empty() {
            match backend.try_write(&side) {
                Ok(n) => {
                    side.drain(..n);
                    moved = true;
                }
                Err(e) if would_block(&e) => add(&mut want_b, Interest::WRITABLE),
                Err(e) => return Err(RelayError::Backend(e)),
            }
        }
        if let Some((r, _)) = c2b.as_ref().filter(|_| in_c2b > 0) {
            let flags = if in_ahead > 0 {
                SPLICE | SpliceFlags::MORE
            } else {
                SPLICE
            };
            let r = backend.try_io(Interest::WRITABLE, || {
                rustix::pipe::splice(r, None, backend.fd(), None, in_c2b, flags)
                    .map_err(io::Error::from)
            });
            match r {
                Ok(n) => {
                    in_c2b -= n;
                    held = flags.contains(SpliceFlags::MORE);
                    moved = true;
                }
                Err(e) if would_block(&e) => add(&mut want_b, Interest::WRITABLE),
                Err(e) => return Err(RelayError::Backend(e)),
            }
        }
        if in_c2b == 0 && in_ahead > 0 {
            if let (Some(p), Some(a)) = (c2b.as_mut(), ahead.as_mut()) {
                std::mem::swap(p, a);
                in_c2b = std::mem::take(&mut in_ahead);
            }
        }
        if s.client_eof && in_c2b == 0 && in_ahead == 0 && side.is_empty() && !s.backend_shut {
            let _ = backend.shutdown_write();
            s.backend_shut = true;
        }

        // Backend -> client.
        if !s.backend_eof && in_b2c == 0 {
            let r = backend.try_io(Interest::READABLE, || {
                rustix::pipe::splice(backend.fd(), None, &b2c_w, None, WINDOW, SPLICE)
                    .map_err(io::Error::from)
            });
            match r {
                Ok(0) => s.backend_eof = true,
                Ok(n) => {
                    in_b2c = n;
                    moved = true;
                }
                Err(e) if would_block(&e) => add(&mut want_b, Interest::READABLE),
                Err(e) => return Err(RelayError::Backend(e)),
            }
        }
        // Waits on the client below (a rekey, the close) come after the
        // backend has what the last write held back.
        if held && in_b2c > 0 && tls.rekey_due(in_b2c as u64) {
            backend.push();
            held = false;
        }
        if in_b2c > 0 {
            tls.reserve_for(in_b2c as u64).await?;
            let r = tls.socket().try_io(Interest::WRITABLE, || {
                rustix::pipe::splice(&b2c_r, None, tls.socket().as_fd(), None, in_b2c, SPLICE)
                    .map_err(io::Error::from)
            });
            match r {
                Ok(n) => {
                    in_b2c -= n;
                    tls.count_sent(n as u64);
                    m.bytes(Path::Ktls, n as u64);
                    moved = true;
                }
                Err(e) if would_block(&e) => add(&mut want_c, Interest::WRITABLE),
                Err(e) => return Err(TransportError::from(e).into()),
            }
        }
        if s.backend_eof && in_b2c == 0 && !s.client_shut {
            if std::mem::take(&mut held) {
                backend.push();
            }
            tls.close().await?;
            s.client_shut = true;
        }

        if s.done() {
            return Ok(());
        }
        if moved {
            active = true;
            // Both sides may keep up for long: give the worker's other
            // connections their turn now and then.
            tokio::task::coop::consume_budget().await;
            continue;
        }
        // The clock is read once per wait, not once per move.
        if std::mem::take(&mut active) {
            idle_at.reset(Instant::now() + idle);
        }
        wait(tls.socket(), want_c, backend, want_b, &mut idle_at, idle).await?;
    }
}

/// The user-space relay over rustls.
pub async fn userspace(
    mut tls: Box<UserTls>,
    backend: &Backend,
    idle: Duration,
    m: &Meter<'_>,
) -> Result<(), RelayError> {
    let r = userspace_relay(&mut tls, backend, idle, m).await;
    if let Err(RelayError::Client(_)) = r {
        // What the client's records held before the one that failed (a
        // record that does not decrypt, a reset) was authenticated: it is
        // the client's, and still goes to the backend, as with kTLS.
        let _ = crate::server::timer::timeout(idle, deliver(&mut tls, backend, m)).await;
    }
    r
}

/// Write all decrypted plaintext to the backend.
async fn deliver(tls: &mut UserTls, backend: &Backend, m: &Meter<'_>) -> io::Result<()> {
    while tls.pending_plain() > 0 {
        match backend.try_write(tls.plaintext()) {
            Ok(n) => {
                tls.consume_plaintext(n);
                m.bytes_in(Path::Userspace, n as u64);
            }
            Err(e) if would_block(&e) => backend.ready(Interest::WRITABLE).await.map(drop)?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

async fn userspace_relay(
    tls: &mut UserTls,
    backend: &Backend,
    idle: Duration,
    m: &Meter<'_>,
) -> Result<(), RelayError> {
    let mut s = Sides::default();
    let mut deadline = Instant::now() + idle;
    let mut idle_at = Deadline::at(deadline);
    // Moved before every wait; within its tick that changes nothing.
    let mut grace_at = Deadline::at(deadline);
    let mut active = false;
    loop {
        let mut want_c: Option<Interest> = None;
        let mut want_b: Option<Interest> = None;
        let mut moved = false;

        // Client -> backend: the plaintext goes to the backend from where
        // rustls' records were decrypted into; more is read and decrypted
        // only once the backend has taken all of it (the client's data then
        // waits in the socket, where TCP flow control holds it back).
        if !s.client_eof && tls.pending_plain() == 0 {
            tls.process()?;
            if tls.pending_plain() > 0 {
                moved = true;
            } else if tls.peer_closed() {
                s.client_eof = true;
            } else {
                match tls.try_fill() {
                    Ok(_) => moved = true,
                    Err(TransportError::Io(e)) if would_block(&e) => {
                        add(&mut want_c, Interest::READABLE)
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
        if tls.pending_plain() > 0 {
            match backend.try_write(tls.plaintext()) {
                Ok(n) => {
                    tls.consume_plaintext(n);
                    m.bytes_in(Path::Userspace, n as u64);
                    moved = true;
                }
                Err(e) if would_block(&e) => add(&mut want_b, Interest::WRITABLE),
                Err(e) => return Err(RelayError::Backend(e)),
            }
        }
        if s.client_eof && tls.pending_plain() == 0 && !s.backend_shut {
            let _ = backend.shutdown_write();
            s.backend_shut = true;
        }

        // Backend -> client: encrypt while the output queue has room.
        if !s.backend_eof && tls.pending_out() < WINDOW {
            // One scratch buffer per worker thread: nothing awaits between
            // the read and the encryption that copies it out.
            let r = SCRATCH.with_borrow_mut(|scratch| {
                if scratch.is_empty() {
                    scratch.resize(SCRATCH_LEN, 0);
                }
                match backend.try_read(scratch) {
                    Ok(0) => Ok(0),
                    Ok(n) => tls
                        .queue(&scratch[..n])
                        .map(|()| n)
                        .map_err(RelayError::from),
                    Err(e) => Err(RelayError::Backend(e)),
                }
            });
            match r {
                Ok(0) => s.backend_eof = true,
                Ok(n) => {
                    m.bytes(Path::Userspace, n as u64);
                    moved = true;
                }
                Err(RelayError::Backend(e)) if would_block(&e) => {
                    add(&mut want_b, Interest::READABLE)
                }
                Err(e) => return Err(e),
            }
        }
        if s.backend_eof && !s.client_shut && tls.pending_out() == 0 {
            tls.queue_close_notify()?;
            s.client_shut = true;
            moved = true;
        }
        if tls.pending_out() > 0 {
            match tls.try_flush() {
                Ok(true) => moved = true,
                Ok(false) => add(&mut want_c, Interest::WRITABLE),
                Err(e) => return Err(TransportError::from(e).into()),
            }
        }
        if s.client_shut && tls.pending_out() == 0 {
            let _ = socket2::SockRef::from(tls.socket()).shutdown(std::net::Shutdown::Write);
        }

        if s.done() && tls.pending_out() == 0 {
            return Ok(());
        }
        if moved {
            active = true;
            // Both sides may keep up for long: give the worker's other
            // connections their turn now and then.
            tokio::task::coop::consume_budget().await;
            continue;
        }
        let now = Instant::now();
        if std::mem::take(&mut active) {
            deadline = now + idle;
            idle_at.reset(deadline);
        }
        // A quiet connection keeps no buffers: after a short grace, drop
        // them until something arrives.
        let grace = (now + IDLE_GRACE).min(deadline);
        grace_at.reset(grace);
        match wait(tls.socket(), want_c, backend, want_b, &mut grace_at, idle).await {
            Err(RelayError::Idle(_)) if grace < deadline => {
                tls.release_buffers();
                wait(tls.socket(), want_c, backend, want_b, &mut idle_at, idle).await?;
            }
            r => r?,
        }
    }
}

fn add(want: &mut Option<Interest>, i: Interest) {
    *want = Some(want.map_or(i, |w| w | i));
}

/// Sleep until a wanted readiness, or the idle deadline (on a worker, its
/// coarse timers: no tokio timer, so no timeout on the worker's
/// `epoll_wait` for every wait of a busy relay). A side we want
/// nothing from is not polled at all: its error readiness (after a reset)
/// would stay set and turn this loop into a spin; its errors surface at the
/// next operation on it instead.
async fn wait(
    client: &tokio::net::TcpStream,
    want_c: Option<Interest>,
    backend: &Backend,
    want_b: Option<Interest>,
    deadline: &mut Deadline,
    idle: Duration,
) -> Result<(), RelayError> {
    let c = async {
        match want_c {
            Some(i) => client.ready(i).await.map(drop),
            None => std::future::pending().await,
        }
    };
    let b = async {
        match want_b {
            Some(i) => backend.ready(i).await.map(drop),
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        // The deadline first: no busy loop can outlive the idle timeout.
        biased;
        _ = deadline => return Err(RelayError::Idle(idle)),
        r = c => r.map_err(TransportError::from)?,
        r = b => r.map_err(RelayError::Backend)?,
    }
    Ok(())
}
