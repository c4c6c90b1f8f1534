//! One worker thread, and one connection from accept to the HTTP session:
//! `TCP_ULP` right after accept, the handshake, then the choice of data
//! path — kTLS when the kernel takes the negotiated cipher, else user space.

use super::{http, Shared};
use crate::config::secs;
use crate::ktls::{crypto_info, stream::KtlsStream, sys, Cipher, Direction, Version};
use crate::metrics::Fallback;
use crate::tls::handshake::{handshake, Handshaken};
use crate::tls::userspace::UserTls;
use crate::transport::{Path, TransportError};
use rustls::server::UnbufferedServerConnection;
use std::cell::Cell;
use std::os::fd::AsFd;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub(super) fn worker(
    listeners: Vec<std::net::TcpListener>,
    shared: Arc<Shared>,
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
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let active = Rc::new(Cell::new(0usize));
        for l in listeners {
            match TcpListener::from_std(l) {
                Ok(l) => {
                    tokio::task::spawn_local(accept_loop(
                        l,
                        shared.clone(),
                        stop.clone(),
                        active.clone(),
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
        while active.get() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stop: watch::Receiver<bool>,
    active: Rc<Cell<usize>>,
) {
    let max = shared.cfg.limits.connections;
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = stop.changed() => return,
        };
        match accepted {
            Ok((sock, _peer)) => {
                if active.get() >= max {
                    shared.metrics.error("connection_limit");
                    continue;
                }
                active.set(active.get() + 1);
                let shared = shared.clone();
                let stop = stop.clone();
                let active = active.clone();
                tokio::task::spawn_local(async move {
                    connection(sock, &shared, stop).await;
                    active.set(active.get() - 1);
                });
            }
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                shared.metrics.error("accept");
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn connection(mut sock: TcpStream, shared: &Shared, stop: watch::Receiver<bool>) {
    let _ = sock.set_nodelay(true);
    let t = &shared.cfg.timeouts;

    // Attach the ULP before the handshake: it fails harmlessly, and it must
    // be there before the peer can close its side.
    let mut fallback = None;
    let ulp = if shared.ktls.disabled {
        fallback = Some(Fallback::Disabled);
        false
    } else if !shared.ktls.usable() {
        fallback = Some(Fallback::NoKernelSupport);
        false
    } else if let Err(e) = sys::set_tls_ulp(sock.as_fd()) {
        tracing::debug!("TCP_ULP tls failed: {e}");
        fallback = Some(Fallback::UlpFailed);
        false
    } else {
        true
    };

    let conn = match UnbufferedServerConnection::new(shared.tls.clone()) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("cannot create a TLS connection: {e}");
            return;
        }
    };
    let hs = match tokio::time::timeout(secs(t.handshake), handshake(&mut sock, conn)).await {
        Ok(Ok(hs)) => hs,
        Ok(Err(e)) => {
            shared
                .metrics
                .handshakes_failed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::debug!("handshake failed: {e}");
            return;
        }
        Err(_) => {
            shared
                .metrics
                .handshakes_failed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            shared.metrics.error("handshake_timeout");
            return;
        }
    };
    let counter = match hs.conn.handshake_kind() {
        Some(rustls::HandshakeKind::Resumed) => &shared.metrics.handshakes_resumed,
        _ => &shared.metrics.handshakes_full,
    };
    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);

    let version = hs.conn.protocol_version().and_then(Version::from_rustls);
    let cipher = hs
        .conn
        .negotiated_cipher_suite()
        .and_then(|s| Cipher::from_suite(s.suite()));
    let offload = match (version, cipher) {
        (Some(v), Some(c)) => shared.ktls.offloads(v, c),
        _ => false,
    };
    let buffered = !hs.pending_tls.is_empty() || !hs.early_plaintext.is_empty();
    let stall = secs(t.send);

    if ulp && offload && !buffered {
        match into_kernel(sock, hs, shared.ktls.rekey, stall) {
            Ok(k) => {
                shared.metrics.connection(Path::Ktls);
                http::session(k, shared, stop).await;
            }
            Err(e) => {
                // The rustls connection is consumed: this connection is lost.
                shared.metrics.error("ktls_setup");
                tracing::warn!("kTLS set-up failed after the handshake: {e}");
            }
        }
        return;
    }
    if ulp {
        fallback = Some(if buffered {
            Fallback::Buffered
        } else {
            Fallback::Cipher
        });
    }
    if let Some(f) = fallback {
        shared.metrics.fallback(f);
    }
    shared.metrics.connection(Path::Userspace);
    http::session(UserTls::new(sock, hs, stall), shared, stop).await;
}

/// Hand the record keys to the kernel: TX, then RX.
fn into_kernel(
    sock: TcpStream,
    hs: Handshaken,
    rekey: bool,
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
    Ok(KtlsStream::new(sock, kconn, rekey, stall))
}
