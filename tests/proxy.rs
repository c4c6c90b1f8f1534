//! End-to-end tests of `tlsfront proxy` with real peers: echo and other
//! backends written here, nginx (`listen ... proxy_protocol`) and HAProxy
//! (`accept-proxy`) reading our PROXY v1/v2 headers, curl and a rustls
//! client that half-closes. On a kernel with kTLS the same tests prove the
//! kTLS + splice path (`/proc/net/tls_stat`, tlsfront's counters).

mod common;

use common::peers::{self, backend};
use common::*;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One TLS session through the proxy: optional raw bytes before TLS (a
/// PROXY header), then send `payload`, half-close with close_notify, and
/// read until the proxy closes. Returns what came back.
async fn session(
    port: u16,
    ca: &std::path::Path,
    preamble: &[u8],
    payload: &[u8],
) -> std::io::Result<Vec<u8>> {
    let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    tcp.write_all(preamble).await?;
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls = tokio_rustls::TlsConnector::from(client_config(ca))
        .connect(name, tcp)
        .await?;
    let (mut r, mut w) = tokio::io::split(tls);
    let writer = async {
        w.write_all(payload).await?;
        w.shutdown().await?; // close_notify, then FIN
        Ok::<_, std::io::Error>(())
    };
    let reader = async {
        let mut out = Vec::new();
        r.read_to_end(&mut out).await?;
        Ok::<_, std::io::Error>(out)
    };
    let (w, out) = tokio::join!(writer, reader);
    w?;
    out
}

/// Run `f` on `rt`, giving up after `secs` (a proxy that never closes must
/// fail the test, not hang it).
fn within<F: std::future::Future>(
    rt: &tokio::runtime::Runtime,
    secs: u64,
    f: F,
) -> Result<F::Output, tokio::time::error::Elapsed> {
    rt.block_on(async { tokio::time::timeout(Duration::from_secs(secs), f).await })
}

/// Connect over TLS, send nothing, and read until the server closes (the
/// client never closes first).
async fn read_until_close(port: u16, ca: &std::path::Path) -> std::io::Result<Vec<u8>> {
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = tokio_rustls::TlsConnector::from(client_config(ca))
        .connect(name, tcp)
        .await?;
    let mut got = Vec::new();
    tls.read_to_end(&mut got).await?;
    Ok(got)
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn echo_every_size_both_ways() {
    let _g = serial();
    let echo = backend(peers::echo).to_string();
    let server = Server::proxy(&echo, &[]);
    let rt = rt();
    let mut sizes: Vec<usize> = SIZES.to_vec();
    sizes.push(3 * 65536 + 7);
    for (i, size) in sizes.iter().enumerate() {
        let data = content(*size, 100 + i as u64);
        let stat = StatDelta::start();
        let back = within(&rt, 120, session(server.port, &server.ca(), b"", &data))
            .expect("echo timed out")
            .unwrap_or_else(|e| panic!("size {size}: {e}"));
        assert_eq!(back.len(), data.len(), "size {size}");
        assert_eq!(sha256(&back), sha256(&data), "size {size}: echo differs");
        stat.assert_connections(1);
    }
    let report = server.stop_and_check_path(sizes.len() as u64);
    assert!(report.contains("errors: none"), "{report}");
}

#[test]
fn half_close_each_way() {
    let rt = rt();
    // Client finishes first: the backend sees EOF, then still answers.
    let reporter = backend(peers::reporter).to_string();
    let server = Server::proxy(&reporter, &[]);
    let data = content(5 << 20, 7);
    let back = rt
        .block_on(session(server.port, &server.ca(), b"", &data))
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&back),
        format!("{} {}", data.len(), sha256(&data))
    );
    server.stop_and_check_path(1);

    // Backend finishes first: the client gets its bytes and close_notify,
    // and can still send afterwards.
    let greeter = backend(peers::greeter).to_string();
    let server = Server::proxy(&greeter, &[]);
    let back = rt
        .block_on(async {
            let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", server.port)).await?;
            tcp.write_all(b"").await?;
            let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            let mut tls = tokio_rustls::TlsConnector::from(client_config(&server.ca()))
                .connect(name, tcp)
                .await?;
            let mut got = Vec::new();
            tls.read_to_end(&mut got).await?; // ends with the proxy's close_notify
            tls.write_all(b"still talking after the backend closed")
                .await?;
            tls.shutdown().await?;
            Ok::<_, std::io::Error>(got)
        })
        .unwrap();
    assert_eq!(back, b"hello from the backend\n");
    let (_, report) = server.stop();
    assert!(report.contains("bytes in: ktls"), "{report}");
}

#[test]
fn many_concurrent_clients() {
    let echo = backend(peers::echo).to_string();
    let server = Server::proxy(&echo, &[]);
    let rt = rt();
    let ca = server.ca();
    let port = server.port;
    let local = tokio::task::LocalSet::new();
    let results = local.block_on(&rt, async {
        let handles: Vec<_> = (0..40u64)
            .map(|i| {
                let ca = ca.clone();
                tokio::task::spawn_local(async move {
                    let data = content(64 * 1024 + i as usize * 1000, i);
                    let back = session(port, &ca, b"", &data).await?;
                    Ok::<_, std::io::Error>(sha256(&back) == sha256(&data))
                })
            })
            .collect();
        let mut out = Vec::new();
        for h in handles {
            out.push(h.await.expect("task"));
        }
        out
    });
    assert_eq!(
        results.iter().filter(|r| matches!(r, Ok(true))).count(),
        40,
        "{results:?}"
    );
    server.stop_and_check_path(40);
}

#[test]
fn unix_socket_backend() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("echo.sock");
    let l = std::os::unix::net::UnixListener::bind(&path).unwrap();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut c = c;
                let mut all = Vec::new();
                let _ = std::io::Read::read_to_end(&mut c, &mut all);
                let _ = std::io::Write::write_all(&mut c, &all);
            });
        }
    });
    let server = Server::proxy(path.to_str().unwrap(), &[]);
    let data = content(300_000, 3);
    let back = rt()
        .block_on(session(server.port, &server.ca(), b"", &data))
        .unwrap();
    assert_eq!(sha256(&back), sha256(&data));
    server.stop_and_check_path(1);
}

#[test]
fn write_proxy_v1_and_v2_read_by_nginx_and_haproxy() {
    let nginx = peers::nginx_proxy_protocol();
    let haproxy = peers::haproxy_accept_proxy();
    for (peer, version) in [
        (&nginx, "v1"),
        (&nginx, "v2"),
        (&haproxy, "v1"),
        (&haproxy, "v2"),
    ] {
        let backend = format!("127.0.0.1:{}", peer.port);
        let server = Server::proxy(&backend, &["--write-proxy", version, "--alpn", "http/1.1"]);
        let url = format!("https://localhost:{}/", server.port);
        let resolve = format!("localhost:{}:127.0.0.1", server.port);
        let out = tool("curl")
            .arg("--cacert")
            .arg(server.ca())
            .args([
                "-sS",
                "--resolve",
                &resolve,
                "-w",
                "|%{local_ip} %{local_port}",
                &url,
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (body, real) = text.split_once('|').unwrap_or(("", ""));
        assert!(
            !real.is_empty(),
            "{version}: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The backend saw the client's real address and port.
        assert!(
            body.starts_with(real),
            "{version} via port {}: backend said {body:?}, client is {real}",
            peer.port
        );
        if std::ptr::eq(peer, &haproxy) && version == "v2" {
            assert!(body.contains("authority=localhost"), "SNI TLV: {body}");
        }
        server.stop_and_check_path(1);
    }
}

#[test]
fn accept_proxy_passes_the_original_client_on() {
    let nginx = peers::nginx_proxy_protocol();
    let backend = format!("127.0.0.1:{}", nginx.port);
    let server = Server::proxy(&backend, &["--accept-proxy", "--write-proxy", "v2"]);
    let rt = rt();
    let req = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    // v1 from the load balancer.
    let v1 = b"PROXY TCP4 192.0.2.9 127.0.0.1 5555 443\r\n";
    let back = rt
        .block_on(session(server.port, &server.ca(), v1, req))
        .unwrap();
    let back = String::from_utf8_lossy(&back);
    assert!(back.ends_with("192.0.2.9 5555\n"), "{back}");
    // v2, IPv6 client.
    let mut v2 = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    v2.extend_from_slice(&[0x21, 0x21, 0, 36]);
    v2.extend_from_slice(
        &"2001:db8::7"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets(),
    );
    v2.extend_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
    v2.extend_from_slice(&[0x1f, 0x90, 0x01, 0xbb]);
    let back = rt
        .block_on(session(server.port, &server.ca(), &v2, req))
        .unwrap();
    let back = String::from_utf8_lossy(&back);
    assert!(back.ends_with("2001:db8::7 8080\n"), "{back}");
    // No header at all: refused (nothing reaches the backend).
    let r = rt.block_on(session(server.port, &server.ca(), b"", req));
    assert!(
        r.is_err() || r.as_ref().is_ok_and(|b| b.is_empty()),
        "{r:?}"
    );
    let (_, report) = server.stop();
    assert!(report.contains("proxy_header 1"), "{report}");

    // A source outside --proxy-from is refused before TLS.
    let server = Server::proxy(&backend, &["--accept-proxy", "--proxy-from", "10.0.0.0/8"]);
    let r = rt.block_on(session(server.port, &server.ca(), v1, req));
    assert!(r.is_err(), "{r:?}");
    let (_, report) = server.stop();
    assert!(report.contains("proxy_untrusted 1"), "{report}");
}

#[test]
fn backend_down_gives_a_tls_close_not_a_hang() {
    let port = peers::free_port();
    let server = Server::proxy(&format!("127.0.0.1:{port}"), &[]);
    let started = std::time::Instant::now();
    for _ in 0..3 {
        // A clean TLS close (close_notify): no data, no error.
        let back = rt().block_on(read_until_close(server.port, &server.ca()));
        assert_eq!(back.unwrap(), b"");
    }
    // A client that talks first also gets the close, not a hang. (The
    // bounds catch a hang: they are set for a loaded machine.)
    let r = within(
        &rt(),
        common::WAIT.as_secs(),
        session(server.port, &server.ca(), b"", b"anyone there?"),
    );
    assert!(r.is_ok(), "client hung");
    assert!(
        started.elapsed() < common::WAIT,
        "four closes took {:?}",
        started.elapsed()
    );
    let (_, report) = server.stop();
    assert!(report.contains("backend_refused 4"), "{report}");
}

/// An outage is logged when it starts (address and kind), once however
/// many clients meet it, and the recovery when the backend answers again.
#[test]
fn backend_outage_and_recovery_are_logged() {
    let port = peers::free_port();
    let addr = format!("127.0.0.1:{port}");
    let server = Server::proxy(&addr, &[]);
    let rt = rt();
    for _ in 0..3 {
        let back = rt.block_on(read_until_close(server.port, &server.ca()));
        assert_eq!(back.unwrap(), b"");
    }
    let failing = format!("backend {addr} failing: connection refused (backend_refused)");
    let log = server.wait_for_log(&failing);
    assert!(log.contains(&failing), "{log}");
    // Three clients within the interval: one line.
    assert_eq!(log.matches(&format!("backend {addr}")).count(), 1, "{log}");
    // The backend comes up for one connection, then goes away again.
    let l = std::net::TcpListener::bind(&addr).unwrap();
    let backend = std::thread::spawn(move || {
        let (c, _) = l.accept().unwrap();
        drop(l);
        peers::echo(c)
    });
    let r = within(
        &rt,
        common::WAIT.as_secs(),
        session(server.port, &server.ca(), b"", b"ping"),
    );
    assert_eq!(r.expect("client hung").unwrap(), b"ping");
    backend.join().unwrap();
    let up = format!("backend {addr} up again after 3 failed attempts");
    let log = server.wait_for_log(&up);
    assert!(log.contains(&up), "{log}");
    // A second outage, a second after the first: its own line, though the
    // first outage's line of the same kind is within the 10 s interval of
    // the lines a client can provoke. (The pause is the scenario, not a
    // wait for an event.)
    std::thread::sleep(Duration::from_millis(1100));
    let back = rt.block_on(read_until_close(server.port, &server.ca()));
    assert_eq!(back.unwrap(), b"");
    let log = server.wait_for_log_count(&failing, 2);
    assert_eq!(log.matches(&failing).count(), 2, "{log}");
    let (_, report) = server.stop();
    assert!(report.contains("backend_refused 4"), "{report}");
}

#[test]
fn stuck_backend_exerts_backpressure_and_idle_timeout_closes() {
    let sink = backend(peers::sink).to_string();
    let server = Server::proxy(&sink, &["--idle-timeout", "2"]);
    let before = server.rss_kib();
    let data = content(64 << 20, 5);
    // The idle timeout (2 s) ends it; the bound only catches a hang.
    let r = within(
        &rt(),
        common::WAIT.as_secs(),
        session(server.port, &server.ca(), b"", &data),
    );
    let after = server.rss_kib();
    // The proxy closed the connection (idle), the client did not hang.
    assert!(r.is_ok(), "client hung on a stuck backend");
    assert!(
        r.unwrap().is_err(),
        "the client could not have sent 64 MiB into a stuck backend"
    );
    // Bounded buffers: memory did not grow with the 64 MiB offered.
    assert!(
        after < before + 16 * 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );
    let (_, report) = server.stop();
    assert!(report.contains("idle_timeout 1"), "{report}");
}

#[test]
fn backend_closing_mid_stream() {
    let closer = backend(peers::closer).to_string();
    let server = Server::proxy(&closer, &["--idle-timeout", "5"]);
    let rt = rt();
    for payload in [content(4 << 20, 11), Vec::new()] {
        let r = within(
            &rt,
            common::WAIT.as_secs(),
            session(server.port, &server.ca(), b"", &payload),
        );
        let r = r.expect("client hung after the backend closed");
        // Either the partial answer and a close, or a reset while sending.
        if let Ok(b) = &r {
            assert_eq!(b, b"partial");
        }
    }
    assert_idle(&server);
    let (status, _) = server.stop();
    assert!(status.success());
}

#[test]
fn client_abort_costs_only_its_connection() {
    let echo = backend(peers::echo).to_string();
    let server = Server::proxy(&echo, &["--idle-timeout", "5"]);
    let rt = rt();
    rt.block_on(async {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", server.port))
            .await
            .unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let mut tls = tokio_rustls::TlsConnector::from(client_config(&server.ca()))
            .connect(name, tcp)
            .await
            .unwrap();
        tls.write_all(&content(100_000, 1)).await.unwrap();
        drop(tls); // no close_notify, just gone
    });
    let data = content(50_000, 2);
    let back = within(
        &rt,
        common::WAIT.as_secs(),
        session(server.port, &server.ca(), b"", &data),
    )
    .expect("client hung")
    .unwrap();
    assert_eq!(back, data);
    assert_idle(&server);
    let (status, _) = server.stop();
    assert!(status.success());
}

/// With nothing left to do the proxy must sleep, not spin (a reset
/// socket's error readiness once kept a relay loop busy). A measurement
/// over a fixed window, not a wait: a loaded machine gives a spinning
/// process less CPU, never an idle one more.
fn assert_idle(server: &Server) {
    std::thread::sleep(Duration::from_millis(300));
    let before = server.cpu_ticks();
    std::thread::sleep(Duration::from_millis(1500));
    let used = server.cpu_ticks() - before;
    assert!(used < 30, "idle proxy used {used} CPU ticks in 1.5 s");
}

#[test]
fn backend_that_never_answers_hits_the_connect_timeout() {
    // A listener that never accepts, its backlog filled: SYNs go unanswered.
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(
        &"127.0.0.1:0"
            .parse::<std::net::SocketAddr>()
            .unwrap()
            .into(),
    )
    .unwrap();
    sock.listen(0).unwrap();
    let addr = sock.local_addr().unwrap().as_socket().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.set_nonblocking(true).unwrap();
        let _ = s.connect(&addr.into());
        fillers.push(s);
    }
    // The queue is full once a filler's connection is established (the
    // others' SYNs are dropped).
    common::wait_until(
        common::WAIT,
        "a filler's connection to the backlog",
        || match fillers.iter().find(|s| s.peer_addr().is_ok()) {
            Some(_) => Ok(()),
            None => Err("none established".into()),
        },
    );
    let server = Server::proxy(&addr.to_string(), &["--connect-timeout", "1"]);
    let started = std::time::Instant::now();
    let back = rt().block_on(read_until_close(server.port, &server.ca()));
    assert_eq!(back.unwrap(), b"", "a clean TLS close");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(6),
        "{took:?}"
    );
    let (_, report) = server.stop();
    assert!(report.contains("backend_timeout 1"), "{report}");
    drop(fillers);
}

#[test]
fn key_update_from_the_client() {
    let _g = serial();
    let echo = backend(peers::echo).to_string();
    let server = Server::proxy(&echo, &[]);
    let stat = StatDelta::start();
    let ca = server.ca().display().to_string();
    // `k`: a KeyUpdate; `K`: one that asks us to update our key too (then
    // the echo comes back under our new key).
    let (out, err, by_itself) = s_client(
        server.port,
        &["-tls1_3", "-CAfile", &ca],
        &[
            Step::Send(b"first line\n"),
            Step::WaitFor("first line"),
            Step::Send(b"k\n"),
            Step::WaitForStderr("KEYUPDATE", 1),
            Step::Send(b"second line\n"),
            Step::WaitFor("second line"),
            Step::Send(b"K\n"),
            Step::WaitForStderr("KEYUPDATE", 2),
            Step::Send(b"third line\n"),
            Step::WaitFor("third line"),
        ],
        Duration::from_secs(30),
    );
    assert!(
        err.contains("KEYUPDATE"),
        "s_client did not send a KeyUpdate: {err}"
    );
    assert!(out.contains("first line"), "{out}");
    let rekey = ktls_rekey();
    if ktls_expected() && !rekey {
        // Kernel < 6.14: the proxy ends the connection cleanly.
        assert!(!out.contains("second line"), "{out}");
        assert!(by_itself, "connection should have been closed");
        let (_, report) = server.stop();
        assert!(report.contains("keyupdate_unsupported 1"), "{report}");
    } else {
        assert!(out.contains("second line"), "{out}\n{err}");
        assert!(out.contains("third line"), "{out}\n{err}");
        if ktls_expected() {
            assert_rekeyed(&stat);
        }
    }
    assert_eq!(stat.delta("TlsDecryptError"), 0);
}

/// A bulk upload with KeyUpdates between its records. The kTLS relay reads
/// the client's next records into a second pipe while the first still
/// holds some, and that read-ahead must stop at a control record: every
/// byte reaches the backend in order, under each of its four keys. Where
/// kTLS cannot rekey (kernels before 6.14) the proxy ends the connection
/// cleanly at the first KeyUpdate instead, after every byte before it
/// reached the backend.
#[test]
fn bulk_upload_across_key_updates_arrives_intact() {
    let _g = serial();
    let (recorder, received) = peers::recorder();
    let server = Server::proxy(&recorder.to_string(), &[]);
    // Before the counters start: `tlsfront check` rekeys sockets of its own.
    let (ktls, rekey) = (ktls_expected(), ktls_rekey());
    let stat = StatDelta::start();
    // Parts with a KeyUpdate between them.
    const PART: usize = 2 << 20;
    let data = content(3 * PART + 12345, 21);
    let ca = server.ca();
    let rt = rt();
    let got = within(&rt, 120, async {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", server.port)).await?;
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let mut tls = tokio_rustls::TlsConnector::from(client_config(&ca))
            .connect(name, tcp)
            .await?;
        for (i, part) in data.chunks(PART).enumerate() {
            if i > 0 {
                // Sent before the next record; asks the proxy to update
                // its own key as well.
                tls.get_mut()
                    .1
                    .refresh_traffic_keys()
                    .map_err(std::io::Error::other)?;
            }
            tls.write_all(part).await?;
        }
        tls.shutdown().await?;
        let mut got = Vec::new();
        tls.read_to_end(&mut got).await?;
        Ok::<_, std::io::Error>(got)
    })
    .expect("the upload timed out");
    if ktls && !rekey {
        let (_, report) = server.stop();
        assert!(report.contains("keyupdate_unsupported 1"), "{report}");
        let before = received
            .recv_timeout(common::WAIT)
            .expect("the backend connection did not end");
        assert_eq!(
            (before.len(), sha256(&before)),
            (PART, sha256(&data[..PART])),
            "the backend did not get exactly the bytes before the first KeyUpdate"
        );
    } else {
        let got = got.expect("upload through the proxy");
        assert_eq!(
            String::from_utf8_lossy(&got),
            format!("{} {}", data.len(), sha256(&data))
        );
        if ktls {
            // One rekey each way per KeyUpdate: the client's, and ours in
            // answer to its request.
            let updates = data.chunks(PART).count() as u64 - 1;
            assert_eq!(stat.delta("TlsRxRekeyOk"), updates, "TlsRxRekeyOk");
            assert_eq!(stat.delta("TlsTxRekeyOk"), updates, "TlsTxRekeyOk");
            assert_eq!(stat.delta("TlsRxRekeyError"), 0);
            assert_eq!(stat.delta("TlsTxRekeyError"), 0);
        }
        let report = server.stop_and_check_path(1);
        assert!(report.contains("errors: none"), "{report}");
    }
    assert_eq!(stat.delta("TlsDecryptError"), 0);
}

/// Past the user's pipe budget the kernel gives new pipes two slots, too
/// few for kTLS to splice a record into safely; the relay then reads the
/// client's records by copy. (A debug-build switch stands in for the
/// exhausted budget.) Every size still arrives intact both ways, and the
/// backend's bytes still go out by splice.
#[test]
fn without_a_pipe_fit_for_ktls_uploads_are_copied_intact() {
    let _g = serial();
    let echo = backend(peers::echo).to_string();
    let server = Server::proxy_with_env(&["TLSFRONT_TEST_NO_RX_PIPE=1"], &echo, &[]);
    let rt = rt();
    let mut sizes: Vec<usize> = SIZES.to_vec();
    sizes.push(3 * 65536 + 7);
    for (i, size) in sizes.iter().enumerate() {
        let data = content(*size, 300 + i as u64);
        let back = within(&rt, 120, session(server.port, &server.ca(), b"", &data))
            .expect("echo timed out")
            .unwrap_or_else(|e| panic!("size {size}: {e}"));
        assert_eq!(back.len(), data.len(), "size {size}");
        assert_eq!(sha256(&back), sha256(&data), "size {size}: echo differs");
    }
    let report = server.stop_and_check_path(sizes.len() as u64);
    assert!(report.contains("errors: none"), "{report}");
}
