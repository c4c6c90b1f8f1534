//! One worker thread, and one connection from accept to its site's
//! service: a PROXY header from a trusted load balancer, `TCP_ULP` right
//! after accept, the handshake (whose ClientHello picks the site), then the
//! choice of data path — kTLS when the kernel takes the negotiated cipher,
//! else user space.

use super::sites::{SiteJob, SiteRt, Sites};
use super::{timer, ConnInfo, Front, Tls};
use crate::config::secs;
use crate::ktls::{crypto_info, stream::KtlsStream, Cipher, Direction, Support, Version};
use crate::metrics::Fallback;
use crate::sys;
use crate::tls::handshake::{handshake, HandshakeError, Handshaken};
use crate::tls::userspace::UserTls;
use crate::transport::{Path, TransportError};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};

/// A worker's listening sockets.
pub(super) struct Listeners {
    /// TLS (`listen`).
    pub tls: Vec<std::net::TcpListener>,
    /// Plain HTTP (`http_listen`).
    pub http: Vec<std::net::TcpListener>,
}

pub(super) fn worker(
    listeners: Listeners,
    front: Arc<Front>,
    mut stop: watch::Receiver<bool>,
    grace: Duration,
) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("worker cannot start its runtime: {e}");
            return;
        }
    };
    // Plain `spawn` on the current-thread runtime, no `LocalSet`: a
    // LocalSet task woken by the I/O driver wakes the runtime through its
    // eventfd (a write and an extra epoll_wait per wake-up).
    rt.block_on(async move {
        // Connection timeouts on this thread use the worker's coarse timers
        // (or tokio's, should their thread not start).
        let _timers = timer::Timers::start()
            .map_err(|e| tracing::warn!("worker timers: no thread ({e}); using tokio's"))
            .ok();
        let active = Arc::new(AtomicUsize::new(0));
        let busy = Arc::new(Notify::new());
        tokio::spawn(collect_heap(active.clone(), busy.clone()));
        tokio::spawn(crate::accesslog::flush_every());
        if crate::files::cache::enabled() {
            tokio::spawn(crate::files::cache::sweep_every());
        }
        let tls = listeners.tls.into_iter().map(|l| (l, Kind::Tls));
        let http = listeners.http.into_iter().map(|l| (l, Kind::PlainHttp));
        for (l, kind) in tls.chain(http) {
            match TcpListener::from_std(l) {
                Ok(l) => {
                    tokio::spawn(accept_loop(
                        l,
                        kind,
                        front.clone(),
                        stop.clone(),
                        active.clone(),
                        busy.clone(),
                    ));
                }
                Err(e) => tracing::error!("worker cannot use its listener: {e}"),
            }
        }
        while !*stop.borrow_and_update() {
            if stop.changed().await.is_err() {
                break;
            }
        }
        let deadline = tokio::time::Instant::now() + grace;
        while active.load(Relaxed) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    // Every line of the connections that ended goes out before the worker
    // does (the thread's buffer would also be written at thread exit).
    crate::accesslog::flush();
}

/// Give the memory this worker's connections freed back to the kernel:
/// every [`HEAP_COLLECT`] from the first connection after an idle spell
/// until a collection finds the worker without any; that last collection is
/// a full one. The allocator's heaps are per thread, only their thread
/// collects them, and an allocator that is not called (an idle worker after
/// a burst) would keep what the burst left. An idle worker has no timer.
async fn collect_heap(active: Arc<AtomicUsize>, woken: Arc<Notify>) {
    loop {
        woken.notified().await;
        loop {
            timer::sleep(HEAP_COLLECT).await;
            let idle = active.load(Relaxed) == 0;
            sys::heap_collect(idle);
            if idle {
                break;
            }
        }
    }
}

/// How often a busy worker's heap is collected (see [`collect_heap`]); the
/// server's own sweep purges the arenas they share at the same pace.
const HEAP_COLLECT: Duration = Duration::from_secs(5);

/// What a listener's connections speak.
#[derive(Clone, Copy)]
enum Kind {
    Tls,
    PlainHttp,
}

async fn accept_loop(
    listener: TcpListener,
    kind: Kind,
    front: Arc<Front>,
    mut stop: watch::Receiver<bool>,
    active: Arc<AtomicUsize>,
    collect: Arc<Notify>,
) {
    // Bound to one address, every connection's local address is that one:
    // no getsockname() per connection.
    let bound = listener
        .local_addr()
        .ok()
        .filter(|a| !a.ip().is_unspecified());
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = stop.changed() => return,
        };
        match accepted {
            Ok((sock, peer)) => {
                // Each worker's share, as the last load of the sites left
                // room for (see `Front::connection_limit`).
                if active.load(Relaxed) >= front.connection_limit.load(Relaxed) {
                    front.metrics.error("connection_limit");
                    continue;
                }
                if active.load(Relaxed) == 0 {
                    // The first connection of a busy spell (see collect_heap).
                    collect.notify_one();
                }
                let counted = front.clone();
                let slot = Slot::take(&active, move || counted.metrics.error("panic"));
                let open = front.metrics.open();
                let front = front.clone();
                let stop = stop.clone();
                tokio::spawn(async move {
                    match kind {
                        Kind::Tls => connection(sock, peer, bound, &front, stop).await,
                        Kind::PlainHttp => super::plain::connection(sock, &front).await,
                    }
                    drop((slot, open));
                });
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                front.metrics.error("accept");
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// A connection's place in the worker's count, given back when the task
/// ends, however it ends: a panic (tokio catches it and drops the task)
/// must not leave the slot taken, or the worker would refuse everyone once
/// `limits.connections` tasks had panicked. `on_panic` counts such ends.
struct Slot<F: Fn()> {
    active: Arc<AtomicUsize>,
    on_panic: F,
}

impl<F: Fn()> Slot<F> {
    fn take(active: &Arc<AtomicUsize>, on_panic: F) -> Self {
        active.fetch_add(1, Relaxed);
        Slot {
            active: active.clone(),
            on_panic,
        }
    }
}

impl<F: Fn()> Drop for Slot<F> {
    fn drop(&mut self) {
        self.active.fetch_sub(1, Relaxed);
        if std::thread::panicking() {
            (self.on_panic)();
        }
    }
}

/// One connection, from accept to close. (Not an `async fn`: its
/// arguments would be kept twice in the future, which every idle
/// connection holds.)
#[allow(clippy::manual_async_fn)]
fn connection<'a>(
    mut sock: TcpStream,
    peer: std::net::SocketAddr,
    bound: Option<std::net::SocketAddr>,
    front: &'a Front,
    stop: watch::Receiver<bool>,
) -> impl std::future::Future<Output = ()> + Send + 'a {
    async move {
        let t = &front.timeouts;
        let local = match bound {
            Some(a) => a,
            None => sock.local_addr().unwrap_or(peer),
        };
        // The sites as they are now: this connection keeps them to its end,
        // whatever reloads happen meanwhile.
        let sites = front.sites.load_full();
        let Some((client, local)) = accepted(front, &sites, &mut sock, peer, local).await else {
            return;
        };

        // Attach the ULP before the handshake: it fails harmlessly, and it must
        // be there before the peer can close its side.
        let mut fallback = None;
        let ulp = if front.ktls.disabled {
            fallback = Some(Fallback::Disabled);
            false
        } else if !front.ktls.usable() {
            fallback = Some(Fallback::NoKernelSupport);
            false
        } else if let Err(e) = sys::set_tls_ulp(sock.as_fd()) {
            tracing::debug!("TCP_ULP tls failed: {e}");
            fallback = Some(Fallback::UlpFailed);
            false
        } else {
            true
        };

        // The handshake future is boxed, so the task keeps no room for it once
        // the handshake is over; `hs` and everything made from it live only in
        // this block, for the same reason: across the service's await the task
        // holds the boxed transport alone (its size is what every idle
        // connection costs).
        let (tls, info, site) = {
            let mut chosen = None;
            let choose = |hello: &crate::tls::Hello| {
                // An ACME CA validating a name we are getting a certificate
                // for: its challenge answer, then the connection ends.
                if hello.acme_challenge
                    && hello
                        .sni
                        .as_deref()
                        .is_some_and(|n| front.challenges.get(n).is_some())
                {
                    return Ok(front.challenge_config.clone());
                }
                let site = sites.choose(hello.sni.as_deref())?;
                let config = site.tls.for_hello(hello);
                chosen = Some(site.clone());
                Ok(config)
            };
            // The failures are handled inside the box too: held across the
            // await of a plain-HTTP answer, the handshake's result would take
            // its room in every connection's task.
            let hs = Box::pin(async {
                let started = std::time::Instant::now();
                match timer::timeout(secs(t.handshake), handshake(&mut sock, choose, ulp)).await {
                    Ok(Ok(hs)) => Some((hs, started.elapsed())),
                    Ok(Err(e)) => {
                        front.metrics.handshake_failed(match &e {
                            HandshakeError::Eof => "eof",
                            HandshakeError::Transport(t) => t.kind(),
                            _ => e.label().unwrap_or("other"),
                        });
                        if let Some(label) = e.label() {
                            front.metrics.error(label);
                        }
                        front.metrics.client_cert_refused(&e);
                        tracing::debug!("handshake failed: {e}");
                        if sites.answers_plain_http && matches!(e, HandshakeError::NotTls) {
                            let answer = plain_http_answer(&mut sock);
                            let _ = timer::timeout(secs(t.handshake), answer).await;
                        } else if sent_alert(&e) {
                            // The alert is written; what the client still
                            // sends of its flight (a client that writes its
                            // Certificate, CertificateVerify and Finished
                            // one by one) must not turn the close into a
                            // reset that destroys the alert before it is
                            // read.
                            let _ = timer::timeout(secs(t.handshake), linger(&mut sock)).await;
                        }
                        None
                    }
                    Err(_) => {
                        front.metrics.handshake_failed("timeout");
                        front.metrics.error("handshake_timeout");
                        None
                    }
                }
            })
            .await;
            let Some((hs, took)) = hs else {
                return;
            };
            let Some(site) = chosen else {
                return;
            };
            let Some((tls, info)) =
                data_path(front, sock, hs, took, ulp, fallback, client, local, &site)
            else {
                return;
            };
            (tls, info, site)
        };
        drop(sites);
        let _site_active = info.metrics.open();
        match &site.job {
            SiteJob::Files(files) => files.serve(front, tls, info, stop).await,
            // Boxed: a task keeps room for the largest of its states, and the
            // relay's is larger than a file session's; an idle file
            // connection should not carry it.
            SiteJob::Proxy(proxy) => Box::pin(proxy.serve(front, tls, info, stop)).await,
        }
    }
}

/// Right after accept, before TLS: with `accept_proxy`, the PROXY header a
/// trusted load balancer sends (and a refusal for anyone else). Returns
/// (client, local) addresses, or `None` to drop the connection.
async fn accepted(
    front: &Front,
    sites: &Sites,
    sock: &mut TcpStream,
    peer: std::net::SocketAddr,
    local: std::net::SocketAddr,
) -> Option<(std::net::SocketAddr, std::net::SocketAddr)> {
    use crate::proxy::header;
    let Some(trusted) = &sites.accept_proxy else {
        return Some((peer, local));
    };
    let failure = |kind: &'static str, detail: std::fmt::Arguments<'_>| {
        front.metrics.error(kind);
        if let Some(left_out) = front.log.allow(kind) {
            tracing::warn!("{detail}{left_out}");
        }
    };
    if !trusted.iter().any(|n| n.contains(&peer.ip())) {
        failure(
            "proxy_untrusted",
            format_args!("refused {peer}: not a trusted PROXY source (--proxy-from)"),
        );
        return None;
    }
    // Boxed: only connections from a load balancer need room for it.
    match Box::pin(header::accept(sock, secs(front.timeouts.handshake))).await {
        Ok(Some(addrs)) => Some(addrs),
        Ok(None) => Some((peer, local)),
        Err(e) => {
            failure(
                "proxy_header",
                format_args!("PROXY header from {peer}: {e}"),
            );
            None
        }
    }
}

/// After the handshake: count it, describe the connection, and pick its
/// data path: kTLS when the socket has the ULP and the kernel takes the
/// cipher and nothing is buffered in user space; user-space TLS otherwise.
/// `None`: the kernel refused the keys (the rustls connection is consumed,
/// so the connection is lost).
#[allow(clippy::too_many_arguments)]
fn data_path(
    front: &Front,
    sock: TcpStream,
    hs: Handshaken,
    took: Duration,
    ulp: bool,
    mut fallback: Option<Fallback>,
    client: std::net::SocketAddr,
    local: std::net::SocketAddr,
    site: &SiteRt,
) -> Option<(Tls, ConnInfo)> {
    let stall = secs(site.settings.timeouts.send);
    let resumed = hs.conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
    front.metrics.handshake(&hs.conn, took);
    let metrics = site
        .metrics
        .get_or_init(|| front.metrics.site(&site.label))
        .clone();

    let version = hs.conn.protocol_version().and_then(Version::from_rustls);
    let cipher = hs
        .conn
        .negotiated_cipher_suite()
        .and_then(|s| Cipher::from_suite(s.suite()));
    let offload = match (version, cipher) {
        (Some(v), Some(c)) => front.ktls.offloads(v, c),
        _ => false,
    };
    let buffered = !hs.pending_tls.is_empty()
        || !hs.early_plaintext.is_empty()
        || !hs.pending_out.is_empty()
        || hs.peer_closed;
    let client_cert = match site.tls.client_cert(&hs.conn) {
        Ok(c) => c,
        Err(e) => {
            front.metrics.client_cert_error(&e);
            tracing::debug!("resumed session refused: {e}");
            return None;
        }
    };
    let mut info = ConnInfo {
        client,
        local,
        version,
        suite: hs.conn.negotiated_cipher_suite().map(|s| s.suite()),
        group: hs.conn.negotiated_key_exchange_group().map(|g| g.name()),
        sni: hs.sni.clone(),
        alpn: hs.conn.alpn_protocol().map(<[u8]>::to_vec),
        resumed,
        client_cert,
        path: Path::Userspace,
        site: site.label.clone(),
        metrics,
        log: site.access_log.clone(),
    };

    front.metrics.client_cert(&info.client_cert);

    if ulp && offload && !buffered {
        return match into_kernel(sock, hs, &front.ktls, stall) {
            Ok(k) => {
                info.metrics.connection(Path::Ktls);
                info.path = Path::Ktls;
                Some((Tls::Kernel(Box::new(k)), info))
            }
            Err(e) => {
                front.metrics.error("ktls_setup");
                tracing::warn!("kTLS set-up failed after the handshake: {e}");
                None
            }
        };
    }
    if ulp {
        fallback = Some(if buffered {
            Fallback::Buffered
        } else {
            Fallback::Cipher
        });
    }
    if let Some(f) = fallback {
        front.metrics.fallback(f);
        fallback_event(front, f, &info);
    }
    info.metrics.connection(Path::Userspace);
    Some((Tls::User(Box::new(UserTls::new(sock, hs, stall))), info))
}

/// The event line for a connection that stays in user-space TLS although
/// this kernel has kTLS: one line per reason per interval (clients choose
/// their cipher, so a flood of them must not flood the log). `--ktls off`
/// and a kernel without kTLS were said once at start.
fn fallback_event(front: &Front, f: Fallback, info: &ConnInfo) {
    let why = match f {
        Fallback::Disabled | Fallback::NoKernelSupport => return,
        Fallback::Cipher => "this kernel does not offload its cipher",
        Fallback::Buffered => "records were already buffered in user space at the hand-off",
        Fallback::UlpFailed => "the kernel refused the TLS ULP on its socket",
    };
    let Some(left_out) = front.log.allow(f.name()) else {
        return;
    };
    let suite = info.suite.map(|s| format!(" ({s:?})")).unwrap_or_default();
    if f == Fallback::UlpFailed {
        tracing::warn!(
            "kTLS fall-back ({}): a connection from {} stays in user-space TLS: {why}{left_out}",
            f.name(),
            info.client
        );
    } else {
        tracing::info!(
            "kTLS fall-back ({}): a connection from {}{suite} stays in user-space TLS: {why}{left_out}",
            f.name(),
            info.client
        );
    }
}

/// nginx's answer to plaintext HTTP on its HTTPS port, so that a person
/// who typed `http://` sees why.
const PLAIN_HTTP_400: &[u8] = b"HTTP/1.1 400 Bad Request\r\n\
Content-Type: text/plain\r\n\
Content-Length: 46\r\n\
Connection: close\r\n\
\r\n\
The plain HTTP request was sent to HTTPS port\n";

/// Answer a plaintext client with [`PLAIN_HTTP_400`] and close (see
/// [`linger`]). The caller bounds the time.
async fn plain_http_answer(sock: &mut TcpStream) {
    use tokio::io::AsyncWriteExt;
    if sock.write_all(PLAIN_HTTP_400).await.is_ok() {
        linger(sock).await;
    }
}

/// Whether a failed handshake told the client why in an alert (rustls'
/// own, or a refusal of its ClientHello): then [`linger`] before the close.
fn sent_alert(e: &HandshakeError) -> bool {
    matches!(
        e,
        HandshakeError::Refused(_) | HandshakeError::Transport(TransportError::Tls(_))
    )
}

/// Our last words are written: close our direction, then read and drop
/// what the client still sends (a bounded amount) until it closes too, so
/// that unread bytes do not turn our close into a reset that destroys those
/// words before the client reads them (nginx's lingering close). The caller
/// bounds the time.
async fn linger(sock: &mut TcpStream) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    if sock.shutdown().await.is_err() {
        return;
    }
    let mut scratch = [0u8; 1024];
    let mut budget: usize = 64 * 1024;
    while budget > 0 {
        match sock.read(&mut scratch).await {
            Ok(n) if n > 0 => budget = budget.saturating_sub(n),
            _ => break,
        }
    }
}

/// Hand the record keys to the kernel: TX, then RX.
fn into_kernel(
    sock: TcpStream,
    hs: Handshaken,
    ktls: &Support,
    stall: Duration,
) -> Result<KtlsStream, TransportError> {
    let (secrets, kconn) = hs.conn.dangerous_into_kernel_connection()?;
    let version = Version::from_rustls(kconn.protocol_version())
        .ok_or(TransportError::Protocol("version kTLS cannot carry"))?;
    let unsupported = |_| TransportError::Protocol("secrets kTLS cannot carry");
    let tx = crypto_info(version, secrets.tx.0, secrets.tx.1).map_err(unsupported)?;
    let rx = crypto_info(version, secrets.rx.0, secrets.rx.1).map_err(unsupported)?;
    sys::set_crypto_info(sock.as_fd(), Direction::Tx, &tx)?;
    sys::set_crypto_info(sock.as_fd(), Direction::Rx, &rx)?;
    drop((tx, rx));
    if version == Version::Tls13 && ktls.expect_no_pad {
        // Without it the kernel cannot decrypt a TLS 1.3 record into our
        // buffer (it does not know where padding ends), so it decrypts each
        // into a page of its own and copies: for a request, a page cleared
        // and freed. The bet costs a second decryption of each record a
        // client pads or each control record, which the client pays for
        // with its own encryption and the request limits bound; the kernel
        // counts them (`TlsRxNoPadViolation`). The proxy's splice reads
        // never bet. Kernels before 6.0 refuse the option: nothing lost.
        // `ktls_expect_no_pad = false` is for a client population that
        // pads.
        let _ = sys::set_rx_expect_no_pad(sock.as_fd());
    }
    Ok(KtlsStream::new(sock, kconn, ktls.rekey, stall))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn a_panicking_connection_gives_its_slot_back() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let active = Arc::new(AtomicUsize::new(0));
        let panicked = Arc::new(AtomicBool::new(false));
        rt.block_on(async {
            for fail in [false, true] {
                let p = panicked.clone();
                let slot = Slot::take(&active, move || p.store(true, Relaxed));
                assert_eq!(active.load(Relaxed), 1);
                let r = tokio::spawn(async move {
                    let _slot = slot;
                    if fail {
                        panic!("a bug in one connection");
                    }
                })
                .await;
                assert_eq!(r.is_err(), fail);
                assert_eq!(active.load(Relaxed), 0);
                assert_eq!(panicked.load(Relaxed), fail);
            }
        });
    }
}
