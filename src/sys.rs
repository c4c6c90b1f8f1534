//! Raw system calls and C library calls: the only `unsafe` code in tlsfront.
//!
//! Kernel TLS: written by hand on `libc` because no well-kept crate offers
//! these calls with the semantics we need: `rustix` has no `TCP_ULP`/`SOL_TLS`
//! socket options and no typed ancillary data for `TLS_SET_RECORD_TYPE` /
//! `TLS_GET_RECORD_TYPE`, and the `ktls` crate can panic on peer input.
//! Heap: mimalloc's `mi_collect` (through `libmimalloc-sys`), glibc's
//! `mallinfo2`/`malloc_trim`, which no crate wraps, and the process's
//! transparent-huge-page switch (`prctl`, which `rustix` does not offer).
//! Everything here is a thin, checked wrapper; the logic lives in the safe
//! modules that call it (`ktls`, `server`).

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd};

/// The kernel's TLS record type for application data (RFC 8446 `ContentType`).
pub const RECORD_APPLICATION_DATA: u8 = 23;

/// Which half of the connection a key belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    Tx,
    Rx,
}

impl Direction {
    fn optname(self) -> libc::c_int {
        match self {
            Direction::Tx => libc::TLS_TX,
            Direction::Rx => libc::TLS_RX,
        }
    }
}

/// One of the kernel's `tls12_crypto_info_*` structures (the name is the
/// kernel's; they serve TLS 1.3 as well). Key bytes are wiped on drop.
pub enum CryptoInfo {
    Aes128Gcm(libc::tls12_crypto_info_aes_gcm_128),
    Aes256Gcm(libc::tls12_crypto_info_aes_gcm_256),
    Chacha20Poly1305(libc::tls12_crypto_info_chacha20_poly1305),
}

impl Drop for CryptoInfo {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        match self {
            CryptoInfo::Aes128Gcm(i) => {
                i.key.zeroize();
                i.iv.zeroize();
                i.salt.zeroize();
            }
            CryptoInfo::Aes256Gcm(i) => {
                i.key.zeroize();
                i.iv.zeroize();
                i.salt.zeroize();
            }
            CryptoInfo::Chacha20Poly1305(i) => {
                i.key.zeroize();
                i.iv.zeroize();
            }
        }
    }
}

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Attach the kernel's "tls" upper-layer protocol to a connected TCP socket.
/// Fails with `ENOENT` when the kernel has no `tls` module, and harmlessly
/// leaves the socket a plain TCP socket in every failure case.
pub fn set_tls_ulp(fd: BorrowedFd<'_>) -> io::Result<()> {
    const ULP: &[u8] = b"tls";
    // SAFETY: `fd` is a live socket for the borrow; the option value points
    // at a static byte string whose exact length is passed.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_TCP,
            libc::TCP_ULP,
            ULP.as_ptr().cast(),
            ULP.len() as libc::socklen_t,
        )
    };
    check(ret)
}

/// `TCP_DEFER_ACCEPT` on a listener: the kernel completes a connection into
/// the accept queue only once the client's first bytes (the ClientHello)
/// are there, waiting up to about `secs`. One wake-up per connection fewer,
/// and a silent client costs a kernel request socket, not a task. (Neither
/// rustix nor socket2 wraps this option.)
pub fn set_defer_accept(fd: BorrowedFd<'_>, secs: u32) -> io::Result<()> {
    let value = secs.min(i32::MAX as u32) as libc::c_int;
    setsockopt_int(fd, libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT, value)
}

/// An integer-valued socket option that no crate we use wraps.
fn setsockopt_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `fd` is a live socket for the borrow; the option value points
    // at a local `c_int` whose exact size is passed.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    check(ret)
}

/// Install a record key for one direction (`TLS_TX` / `TLS_RX`).
pub fn set_crypto_info(fd: BorrowedFd<'_>, dir: Direction, info: &CryptoInfo) -> io::Result<()> {
    let (ptr, len): (*const libc::c_void, usize) = match info {
        CryptoInfo::Aes128Gcm(i) => ((i as *const _ as *const _), mem::size_of_val(i)),
        CryptoInfo::Aes256Gcm(i) => ((i as *const _ as *const _), mem::size_of_val(i)),
        CryptoInfo::Chacha20Poly1305(i) => ((i as *const _ as *const _), mem::size_of_val(i)),
    };
    // SAFETY: `ptr`/`len` describe a live, fully initialised `repr(C)` kernel
    // structure borrowed for the duration of the call.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_TLS,
            dir.optname(),
            ptr,
            len as libc::socklen_t,
        )
    };
    check(ret)
}

/// `TLS_RX_EXPECT_NO_PAD` (Linux >= 6.0, TLS 1.3 receive only): let the
/// kernel decrypt a record straight into the reader's buffer, betting that
/// the peer does not pad; a padded data record (or a control record) is
/// decrypted again into a kernel buffer, counted in `TlsRxNoPadViolation`
/// (data) and `TlsDecryptRetry` (all).
pub fn set_rx_expect_no_pad(fd: BorrowedFd<'_>) -> io::Result<()> {
    setsockopt_int(fd, libc::SOL_TLS, libc::TLS_RX_EXPECT_NO_PAD, 1)
}

/// Room for one `cmsghdr` carrying a one-byte record type, aligned for
/// `cmsghdr` (CMSG_SPACE(1) is 24 bytes on 64-bit Linux).
#[repr(C, align(8))]
struct CmsgBuf([u8; 32]);

/// What one `recvmsg` on a kTLS socket returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// Plaintext bytes written to the buffer.
    pub len: usize,
    /// TLS content type of the record these bytes came from.
    pub record_type: u8,
    /// The kernel reached the end of that record (`MSG_EOR`).
    pub end_of_record: bool,
}

/// `recvmsg` with room for the kernel's `TLS_GET_RECORD_TYPE` ancillary
/// message, so control records (alerts, handshake messages) are returned
/// with their type instead of failing the read with `EIO`. The kernel never
/// mixes records of different types in one call. Non-blocking.
pub fn recv_record(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Received> {
    let mut cbuf = CmsgBuf([0; 32]);
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty header; every pointer set
    // below refers to a live local or to `buf`, which outlive the call.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.0.as_mut_ptr().cast();
    msg.msg_controllen = cbuf.0.len() as _;
    // SAFETY: `msg` is fully initialised and points at live buffers.
    let n = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut record_type = RECORD_APPLICATION_DATA;
    // SAFETY: `msg` was filled in by the kernel; the CMSG_* macros walk the
    // control buffer within `msg_controllen`, which the kernel bounded by
    // our buffer's size.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_TLS
                && (*c).cmsg_type == libc::TLS_GET_RECORD_TYPE
                && (*c).cmsg_len as usize >= libc::CMSG_LEN(1) as usize
            {
                record_type = *libc::CMSG_DATA(c);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok(Received {
        len: n as usize,
        record_type,
        end_of_record: msg.msg_flags & libc::MSG_EOR != 0,
    })
}

/// Send one record of the given TLS content type (`TLS_SET_RECORD_TYPE`),
/// used for alerts (close_notify) and post-handshake messages (KeyUpdate).
/// Non-blocking.
pub fn send_record(fd: BorrowedFd<'_>, record_type: u8, data: &[u8]) -> io::Result<usize> {
    let mut cbuf = CmsgBuf([0; 32]);
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: as in `recv_record`: zeroed header, pointers to live locals.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.0.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is a pure size computation.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(1) } as _;
    // SAFETY: the control buffer is 32 bytes, aligned, and at least
    // CMSG_SPACE(1) long, so the first header and its one data byte fit.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_TLS;
        (*c).cmsg_type = libc::TLS_SET_RECORD_TYPE;
        (*c).cmsg_len = libc::CMSG_LEN(1) as _;
        *libc::CMSG_DATA(c) = record_type;
    }
    // SAFETY: `msg` is fully initialised and points at live buffers; the
    // kernel only reads from `data`.
    let n = unsafe {
        libc::sendmsg(
            fd.as_raw_fd(),
            &msg,
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Bytes a TCP socket's send queue holds that the peer has not acknowledged
/// (`ioctl(SIOCOUTQ)`: sent and unsent alike).
pub fn send_queued(fd: BorrowedFd<'_>) -> io::Result<usize> {
    let mut queued: libc::c_int = 0;
    // SAFETY: `fd` is a live socket for the borrow; SIOCOUTQ (the same
    // number as TIOCOUTQ, which is how libc names it) writes one int
    // through the pointer, which points at a live local.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCOUTQ, &mut queued) };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(queued.max(0) as usize)
    }
}

/// Free bytes glibc's allocator holds in its arenas (`mallinfo2().fordblks`):
/// memory the process keeps although nothing uses it. `None` off glibc.
pub fn heap_free_bytes() -> Option<usize> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 takes no arguments and returns a plain struct
        // by value; it only reads the allocator's own state under its locks.
        let info = unsafe { libc::mallinfo2() };
        Some(info.fordblks)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        None
    }
}

/// Collect the calling thread's mimalloc heap: its pages left without a
/// live block go back to the arenas, which all threads share, and the
/// arenas' free ranges whose purge delay has passed go back to the kernel
/// (`MADV_DONTNEED`). mimalloc does this on its own only while the thread
/// allocates, and a thread's pages are collected only by that thread.
/// `force` also frees the empty pages kept per size class for reuse and
/// purges every free range at once (`mi_collect(true)`: for a thread that
/// has just gone idle, not for every call).
pub fn heap_collect(force: bool) {
    // SAFETY: mi_collect takes a flag and no pointers; it works on this
    // thread's heap and, under their atomics, on the shared arenas, as
    // malloc and free do. On a thread whose heap mimalloc never set up
    // (mimalloc not the global allocator: tests, library users) it does
    // nothing.
    unsafe { libmimalloc_sys::mi_collect(force) }
}

/// Keep this process's memory in base pages: no transparent huge pages,
/// whatever the system's THP policy (`prctl(PR_SET_THP_DISABLE)`, kept
/// across `execve`, so an upgraded process keeps it too). With THP
/// `always`, the kernel would back mimalloc's 2 MiB-aligned arena with
/// huge pages and khugepaged would refill the ranges it purged, so freed
/// memory would not stay freed. Returns whether the kernel took it.
pub fn disable_huge_pages() -> bool {
    // SAFETY: prctl with PR_SET_THP_DISABLE takes integers only and sets a
    // flag on this process's memory map.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0 }
}

/// Give the free pages of every arena back to the kernel (`malloc_trim(0)`).
/// Returns whether any memory was released.
pub fn heap_trim() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim takes a size and no pointers; it works on the
        // allocator's own free lists under its locks, like free() does.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Take ownership of a descriptor another process left us by number
/// (systemd's `LISTEN_FDS`, the readiness pipe of an upgrade). Fails with
/// `EBADF` when no such descriptor is open.
pub fn inherited_fd(raw: std::os::fd::RawFd) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: F_GETFD only reads the descriptor's flags; any number is valid
    // to ask about.
    check(unsafe { libc::fcntl(raw, libc::F_GETFD) })?;
    // SAFETY: the descriptor is open (checked above), and the callers take
    // each number once, at start-up, from the protocol that handed it to
    // this process: nothing else in the process owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) })
}

/// Have `cmd`'s child start with `fds` as descriptors 3, 4, … in order,
/// inheritable (as sd_listen_fds expects). `fds` must be close-on-exec
/// duplicates numbered at or above `3 + fds.len()` (see
/// [`fds_above`]), so that placing one never overwrites another; they stay
/// owned by `cmd` and close with it.
pub fn pass_fds(cmd: &mut std::process::Command, fds: Vec<std::os::fd::OwnedFd>) {
    use std::os::unix::process::CommandExt;
    // The numbers are read here, before the fork: the closure allocates
    // nothing.
    let raws: Vec<libc::c_int> = fds.iter().map(|f| f.as_raw_fd()).collect();
    // SAFETY: the closure runs in the child between fork and exec, where
    // only async-signal-safe functions may be called: it calls dup2 only
    // (which also clears close-on-exec on the new number), and touches only
    // `raws`, built before the fork. `fds` is moved in so that the numbers
    // stay open until the child has been spawned.
    unsafe {
        cmd.pre_exec(move || {
            let _open = &fds;
            for (i, &from) in raws.iter().enumerate() {
                check(libc::dup2(from, 3 + i as libc::c_int))?;
            }
            Ok(())
        });
    }
}

/// Close-on-exec duplicates of `fds`, each numbered `min` or above.
pub fn fds_above(
    fds: &[BorrowedFd<'_>],
    min: std::os::fd::RawFd,
) -> io::Result<Vec<std::os::fd::OwnedFd>> {
    fds.iter()
        .map(|fd| Ok(rustix::io::fcntl_dupfd_cloexec(fd, min)?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsFd;

    #[test]
    fn ulp_on_a_plain_socket_is_either_accepted_or_refused_cleanly() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        match set_tls_ulp(c.as_fd()) {
            Ok(()) => {}
            Err(e) => assert!(
                matches!(e.raw_os_error(), Some(libc::ENOENT)),
                "unexpected error {e}"
            ),
        }
    }

    #[test]
    fn recv_record_on_plain_tcp_reports_application_data() {
        use std::io::Write;
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        c.write_all(b"hello").unwrap();
        let mut buf = [0u8; 16];
        let r = loop {
            match recv_record(s.as_fd(), &mut buf) {
                Ok(r) => break r,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(&buf[..r.len], b"hello");
        assert_eq!(r.record_type, RECORD_APPLICATION_DATA);
    }
}
