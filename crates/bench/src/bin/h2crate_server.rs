//! h2crate_server: the smallest fair static-file server on the hyperium
//! `h2` crate, the other half of bench/h2crate.py (issue 27: the `h2`
//! crate against tlsfront's own HTTP/2 framing and HPACK).
//!
//! It does what tlsfront does for a static GET over HTTP/2 and no more:
//! rustls on aws-lc-rs (TLS 1.3, AES-128-GCM, X25519), ALPN h2, one tokio
//! current-thread runtime per worker thread on one shared listener, and per
//! request a path under the root, a 200 with content-length (404 when
//! there is no such regular file, HEAD without a body). The body goes out
//! the only way `h2` allows: as `Bytes` in memory (read with pread, 16 KiB
//! at a time), each chunk sent once flow control has granted it capacity,
//! so nothing is buffered beyond the peer's windows.

use bytes::{Bytes, BytesMut};
use clap::Parser;
use h2::server::SendResponse;
use h2::SendStream;
use http::{Method, Request, Response, StatusCode};
use rustls::crypto::{aws_lc_rs, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{CipherSuite, ServerConfig};
use std::fs::File;
use std::future::poll_fn;
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;

/// A DATA frame's worth (SETTINGS_MAX_FRAME_SIZE's default), the unit
/// tlsfront's user-space path writes too.
const CHUNK: usize = 16 * 1024;
/// Streams a client may have open at once, as tlsfront announces.
const MAX_STREAMS: u32 = 100;

type Error = Box<dyn std::error::Error + Send + Sync>;

#[derive(Parser)]
#[command(about = "A static-file HTTP/2 server on the h2 crate (for bench/h2crate.py)")]
struct Args {
    /// The directory to serve.
    root: PathBuf,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1:8443")]
    listen: SocketAddr,
    /// The certificate chain (PEM).
    #[arg(long)]
    cert: PathBuf,
    /// Its private key (PEM).
    #[arg(long)]
    key: PathBuf,
    /// Worker threads, each with its own current-thread runtime.
    #[arg(long, default_value_t = 2)]
    workers: usize,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("h2crate_server: {e}");
            ExitCode::FAILURE
        }
    }
}

fn tls_config(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, Error> {
    let chain = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("cannot read certificate {} (--cert): {e}", cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("cannot read key {} (--key): {e}", key.display()))?;
    let base = aws_lc_rs::default_provider();
    let provider = CryptoProvider {
        cipher_suites: base
            .cipher_suites
            .iter()
            .copied()
            .filter(|s| s.suite() == CipherSuite::TLS13_AES_128_GCM_SHA256)
            .collect(),
        kx_groups: vec![aws_lc_rs::kx_group::X25519],
        ..base
    };
    let mut cfg = ServerConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(cfg))
}

fn run(args: Args) -> Result<(), Error> {
    let tls = TlsAcceptor::from(tls_config(&args.cert, &args.key)?);
    let root: Arc<Path> = Arc::from(args.root.as_path());
    let listener = std::net::TcpListener::bind(args.listen)
        .map_err(|e| format!("cannot listen on {} (--listen): {e}", args.listen))?;
    listener.set_nonblocking(true)?;
    let mut threads = Vec::new();
    for _ in 0..args.workers.max(1) {
        let listener = listener.try_clone()?;
        let (tls, root) = (tls.clone(), root.clone());
        threads.push(std::thread::spawn(move || worker(listener, tls, root)));
    }
    println!("listening on {}", args.listen);
    for t in threads {
        match t.join() {
            Ok(r) => r?,
            Err(_) => return Err("a worker thread panicked".into()),
        }
    }
    Ok(())
}

fn worker(listener: std::net::TcpListener, tls: TlsAcceptor, root: Arc<Path>) -> Result<(), Error> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::from_std(listener)?;
        loop {
            let (sock, _) = match listener.accept().await {
                Ok(a) => a,
                // Another worker took it, or a transient failure (EMFILE).
                Err(_) => continue,
            };
            let _ = sock.set_nodelay(true);
            let (tls, root) = (tls.clone(), root.clone());
            tokio::spawn(async move {
                if let Err(e) = connection(sock, tls, root).await {
                    eprintln!("h2crate_server: connection: {e}");
                }
            });
        }
    })
}

async fn connection(
    sock: tokio::net::TcpStream,
    tls: TlsAcceptor,
    root: Arc<Path>,
) -> Result<(), Error> {
    let stream = tls.accept(sock).await?;
    let mut conn = h2::server::Builder::new()
        .max_concurrent_streams(MAX_STREAMS)
        .handshake::<_, Bytes>(stream)
        .await?;
    while let Some(req) = conn.accept().await {
        let (req, respond) = req?;
        let root = root.clone();
        tokio::spawn(async move {
            // A reset stream or a closed connection: nothing to answer.
            let _ = respond_to(req, respond, &root).await;
        });
    }
    Ok(())
}

/// The file a request path names under `root`: no `..`, no directories.
fn resolve(root: &Path, path: &str) -> Option<(File, u64)> {
    let rel = Path::new(path.trim_start_matches('/'));
    if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return None;
    }
    let file = File::open(root.join(rel)).ok()?;
    let meta = file.metadata().ok()?;
    meta.is_file().then_some((file, meta.len()))
}

async fn respond_to(
    req: Request<h2::RecvStream>,
    mut respond: SendResponse<Bytes>,
    root: &Path,
) -> Result<(), Error> {
    let head = match *req.method() {
        Method::GET => false,
        Method::HEAD => true,
        _ => {
            let resp = Response::builder()
                .status(StatusCode::METHOD_NOT_ALLOWED)
                .header("content-length", "0")
                .body(())?;
            respond.send_response(resp, true)?;
            return Ok(());
        }
    };
    let Some((file, len)) = resolve(root, req.uri().path()) else {
        let resp = Response::builder()
            .status(StatusCode::NOT_FOUND)
            .header("content-length", "0")
            .body(())?;
        respond.send_response(resp, true)?;
        return Ok(());
    };
    let resp = Response::builder()
        .status(StatusCode::OK)
        .header("content-length", len)
        .body(())?;
    let end = head || len == 0;
    let mut stream = respond.send_response(resp, end)?;
    if !end {
        send_file(&mut stream, &file, len).await?;
    }
    Ok(())
}

/// The body, CHUNK by CHUNK as flow control grants it. The buffer is
/// reused once h2 has dropped the chunks it was lent (BytesMut::reserve
/// reclaims a uniquely held allocation), so a download allocates only
/// while the connection's send queue holds earlier chunks.
async fn send_file(stream: &mut SendStream<Bytes>, file: &File, len: u64) -> Result<(), Error> {
    let mut buf = BytesMut::new();
    let mut off = 0u64;
    while off < len {
        let want = (len - off).min(CHUNK as u64) as usize;
        stream.reserve_capacity(want);
        let granted = loop {
            match poll_fn(|cx| stream.poll_capacity(cx)).await {
                Some(Ok(0)) => continue,
                Some(Ok(n)) => break n,
                Some(Err(e)) => return Err(e.into()),
                None => return Err("stream closed while waiting for capacity".into()),
            }
        };
        let n = granted.min(want);
        buf.reserve(CHUNK);
        buf.resize(n, 0);
        let mut got = 0;
        while got < n {
            match file.read_at(&mut buf[got..n], off + got as u64)? {
                0 => return Err("file shrank while being sent".into()),
                k => got += k,
            }
        }
        off += n as u64;
        stream.send_data(buf.split().freeze(), off == len)?;
    }
    Ok(())
}
