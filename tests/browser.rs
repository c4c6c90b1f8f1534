//! HTTP/2 in a real browser: headless Chromium loads a page of many small
//! assets (stylesheets, scripts, images) from `tlsfront serve`, and the
//! browser's own record of the load (its net log, with every byte it read)
//! shows each asset came over HTTP/2, on one connection, with status 200
//! and exactly the bytes on disk; the page itself reports that every
//! stylesheet parsed, every script ran and every image decoded.

mod common;

use common::*;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

/// The name the browser asks for; its resolver maps it to the server.
const NAME: &str = "h2.test";
/// Assets on the page: a third each of stylesheets, scripts and images.
const ASSETS: usize = 120;
/// How long the browser may take to load the page and exit: a safety net
/// for a loaded machine, never waited out when the browser works.
const BROWSER_LIMIT: Duration = Duration::from_secs(180);

struct Asset {
    path: String,
    bytes: Vec<u8>,
}

/// `n` characters of text (hex digits) drawn from `content(n, seed)`.
fn text(n: usize, seed: u64) -> Vec<u8> {
    content(n, seed)
        .iter()
        .map(|b| b"0123456789abcdef"[usize::from(b & 15)])
        .collect()
}

/// A 24-bit BMP, 32 pixels wide, as tall as fits in `size` bytes, of
/// pseudo-random pixels: a valid image of distinct bytes.
fn bmp(size: usize, seed: u64) -> Vec<u8> {
    const HEAD: usize = 54;
    const ROW: usize = 32 * 3;
    let height = (size - HEAD) / ROW;
    let pixels = content(ROW * height, seed);
    let total = (HEAD + pixels.len()) as u32;
    let mut v = Vec::with_capacity(total as usize);
    v.extend_from_slice(b"BM");
    v.extend_from_slice(&total.to_le_bytes());
    v.extend_from_slice(&0u32.to_le_bytes());
    v.extend_from_slice(&(HEAD as u32).to_le_bytes());
    v.extend_from_slice(&40u32.to_le_bytes());
    v.extend_from_slice(&32i32.to_le_bytes());
    v.extend_from_slice(&(height as i32).to_le_bytes());
    v.extend_from_slice(&1u16.to_le_bytes());
    v.extend_from_slice(&24u16.to_le_bytes());
    v.extend_from_slice(&0u32.to_le_bytes());
    v.extend_from_slice(&(pixels.len() as u32).to_le_bytes());
    for _ in 0..2 {
        v.extend_from_slice(&2835i32.to_le_bytes());
    }
    v.extend_from_slice(&[0; 8]);
    v.extend_from_slice(&pixels);
    v
}

/// Write the site into `root`: the assets (1.5 to 8 KB each, all
/// different) and an index.html that uses them all. The page records on
/// its load event how many stylesheets, scripts and images worked.
fn site(root: &Path) -> Vec<Asset> {
    let mut assets = Vec::new();
    let mut head = String::new();
    let mut body = String::new();
    for i in 0..ASSETS {
        let seed = 1000 + i as u64;
        let size = 1536 + (i * 4099) % (8192 - 1536);
        let (path, bytes) = match i % 3 {
            0 => {
                let mut css = format!(".a{i}{{margin:0}}/*").into_bytes();
                css.extend(text(size - css.len() - 2, seed));
                css.extend_from_slice(b"*/");
                head.push_str(&format!("<link rel=stylesheet href=\"/css/a{i}.css\">\n"));
                (format!("/css/a{i}.css"), css)
            }
            1 => {
                let mut js = b"window.ran=(window.ran||0)+1;/*".to_vec();
                js.extend(text(size - js.len() - 2, seed));
                js.extend_from_slice(b"*/");
                body.push_str(&format!("<script src=\"/js/a{i}.js\"></script>\n"));
                (format!("/js/a{i}.js"), js)
            }
            _ => {
                body.push_str(&format!(
                    "<img loading=eager width=32 alt=\"\" src=\"/img/a{i}.bmp\">\n"
                ));
                (format!("/img/a{i}.bmp"), bmp(size, seed))
            }
        };
        let file = root.join(&path[1..]);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, &bytes).unwrap();
        assets.push(Asset { path, bytes });
    }
    let index = format!(
        "<!doctype html>\n<html><head><meta charset=utf-8><title>h2 page</title>\n\
         <link rel=icon href=\"data:,\">\n{head}</head><body>\n{body}\
         <script>addEventListener('load', () => {{\n\
         const imgs = [...document.images].filter(i => i.complete && i.naturalWidth === 32);\n\
         document.body.dataset.loaded = \
         `${{document.styleSheets.length}} ${{window.ran}} ${{imgs.length}}`;\n\
         }});</script>\n</body></html>\n"
    );
    std::fs::write(root.join("index.html"), &index).unwrap();
    assets.push(Asset {
        path: "/".into(),
        bytes: index.into_bytes(),
    });
    assets
}

fn base64_decode(s: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c:?} in {s:?}"),
        }
    };
    let digits: Vec<u8> = s.bytes().filter(|&c| c != b'=').collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0, |n, (i, &c)| n | value(c) << (18 - 6 * i));
        out.extend_from_slice(&n.to_be_bytes()[1..chunk.len()]);
    }
    out
}

/// The browser, in a process group of its own (with its renderer, GPU and
/// utility processes): killed as a whole if it is still there when the
/// test ends, which it is only if the test failed.
struct Browser(Child);

impl Drop for Browser {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let group = rustix::process::Pid::from_raw(self.0.id() as i32).unwrap();
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
            let _ = self.0.wait();
        }
    }
}

/// What the net log says about each request for a page of `https://NAME/`.
#[derive(Debug, Default)]
struct Request {
    /// The HTTP stream job that carried it (links it to its session).
    job: Option<i64>,
    /// The bytes the page got, after any content decoding.
    body: Vec<u8>,
    /// Number of requests for this URL (a retry would make two).
    count: usize,
}

/// One HTTP/2 session: its protocol and socket, and per stream the path
/// asked for, the job that asked, the `:status` and DATA bytes received.
#[derive(Debug, Default)]
struct Session {
    protocol: String,
    socket: Option<i64>,
    /// job id → (stream id, :path)
    streams: HashMap<i64, (u64, String)>,
    status: HashMap<u64, String>,
    data: HashMap<u64, u64>,
}

/// What the test reads from Chromium's net log.
#[derive(Debug, Default)]
struct NetLog {
    requests: HashMap<String, Request>,
    sessions: HashMap<i64, Session>,
    /// Sockets connected to the server: id → (ALPN protocol negotiated,
    /// whether anything used it). Chromium may open a second connection
    /// when the first is slow to finish its handshake, then close the
    /// spare unused once the first offers HTTP/2.
    sockets: HashMap<i64, (String, bool)>,
}

fn parse_net_log(path: &Path, port: u16) -> NetLog {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("Chromium's net log {}: {e}", path.display()));
    let log: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("Chromium's net log {} is not JSON: {e}", path.display()));
    let constants = &log["constants"];
    let id = |table: &str, name: &str| -> u64 {
        constants[table][name]
            .as_u64()
            .unwrap_or_else(|| panic!("the net log's constants have no {table}.{name}"))
    };
    let ev = |name: &str| id("logEventTypes", name);
    let (alive, bound, bytes_read) = (
        ev("REQUEST_ALIVE"),
        ev("HTTP_STREAM_REQUEST_BOUND_TO_JOB"),
        ev("URL_REQUEST_JOB_FILTERED_BYTES_READ"),
    );
    let (init, send, recv, data) = (
        ev("HTTP2_SESSION_INITIALIZED"),
        ev("HTTP2_SESSION_SEND_HEADERS"),
        ev("HTTP2_SESSION_RECV_HEADERS"),
        ev("HTTP2_SESSION_RECV_DATA"),
    );
    let (tcp, ssl, in_use) = (ev("TCP_CONNECT"), ev("SSL_CONNECT"), ev("SOCKET_IN_USE"));
    let begin = id("logEventPhase", "PHASE_BEGIN");
    let end = id("logEventPhase", "PHASE_END");
    let url_request = id("logSourceType", "URL_REQUEST");
    let server = format!("127.0.0.1:{port}");
    let prefix = format!("https://{NAME}");

    let mut net = NetLog::default();
    // A URL request's URL is in its first event; the rest name only its id.
    let mut url_of: HashMap<i64, String> = HashMap::new();
    let mut socket_alpn: HashMap<i64, String> = HashMap::new();
    let mut socket_peer: HashMap<i64, String> = HashMap::new();
    let mut socket_used: BTreeSet<i64> = BTreeSet::new();
    for e in log["events"].as_array().expect("the net log has events") {
        let (t, phase) = (e["type"].as_u64().unwrap(), e["phase"].as_u64().unwrap());
        // Ids are signed: those made outside the network service are negative.
        let source = e["source"]["id"].as_i64().unwrap();
        let p = &e["params"];
        let dep = p["source_dependency"]["id"].as_i64();
        if e["source"]["type"].as_u64() == Some(url_request) {
            if t == alive && phase == begin {
                let url = p["url"].as_str().unwrap_or_default();
                if let Some(path) = url.strip_prefix(&prefix) {
                    url_of.insert(source, path.to_string());
                    net.requests.entry(path.to_string()).or_default().count += 1;
                }
            }
            let Some(req) = url_of.get(&source).and_then(|u| net.requests.get_mut(u)) else {
                continue;
            };
            if t == bound {
                req.job = dep;
            } else if t == bytes_read {
                req.body
                    .extend(base64_decode(p["bytes"].as_str().unwrap_or_else(|| {
                        panic!("a body read without its bytes (capture mode?): {e}")
                    })));
            }
        } else if t == init {
            let s = net.sessions.entry(source).or_default();
            s.protocol = p["protocol"].as_str().unwrap_or_default().to_string();
            s.socket = dep;
        } else if t == send {
            let path = p["headers"]
                .as_array()
                .into_iter()
                .flatten()
                .find_map(|h| h.as_str()?.strip_prefix(":path: "))
                .unwrap_or_default()
                .to_string();
            let stream = p["stream_id"].as_u64().unwrap();
            let s = net.sessions.entry(source).or_default();
            s.streams.insert(dep.unwrap_or(i64::MIN), (stream, path));
        } else if t == recv {
            let status = p["headers"]
                .as_array()
                .into_iter()
                .flatten()
                .find_map(|h| h.as_str()?.strip_prefix(":status: "))
                .unwrap_or_default()
                .to_string();
            let stream = p["stream_id"].as_u64().unwrap();
            net.sessions
                .entry(source)
                .or_default()
                .status
                .insert(stream, status);
        } else if t == data {
            let stream = p["stream_id"].as_u64().unwrap();
            *net.sessions
                .entry(source)
                .or_default()
                .data
                .entry(stream)
                .or_default() += p["size"].as_u64().unwrap_or(0);
        } else if t == tcp && phase == end {
            if let Some(peer) = p["remote_address"].as_str() {
                socket_peer.insert(source, peer.to_string());
            }
        } else if t == ssl && phase == end {
            let alpn = p["next_proto"].as_str().unwrap_or("(none)").to_string();
            socket_alpn.insert(source, alpn);
        } else if t == in_use && phase == begin {
            socket_used.insert(source);
        }
    }
    for (socket, peer) in socket_peer {
        if peer == server {
            let alpn = socket_alpn
                .remove(&socket)
                .unwrap_or_else(|| "(no TLS)".into());
            net.sockets
                .insert(socket, (alpn, socket_used.contains(&socket)));
        }
    }
    net
}

fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in the metrics:\n{text}"))
}

#[test]
fn chromium_loads_a_page_of_many_assets_over_one_h2_connection() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("www");
    let assets = site(&root);

    let ca = Ca::new();
    let (cert, key) = ca.issue("h2site", &[NAME.to_string()], false);
    let (cert_arg, key_arg) = (cert.display().to_string(), key.display().to_string());
    let server = Server::start_in(
        &root,
        &[
            "--cert",
            &cert_arg,
            "--key",
            &key_arg,
            "--admin",
            "127.0.0.1:0",
        ],
    );
    let metrics_url = server.metrics_url();

    // One launch: --dump-dom prints the page once it has loaded (its load
    // event has run, so every asset is in) and exits. The resolver sends
    // NAME to the server and every other name nowhere (no network), the
    // server's key is trusted by its hash, and the net log keeps the
    // bytes of every read.
    let net_log = dir.path().join("net-log.json");
    let dom = dir.path().join("dom.html");
    let errors = dir.path().join("chromium.err");
    let mut cmd = headless_chromium(dir.path(), NAME, server.port, &cert);
    cmd.arg(format!("--log-net-log={}", net_log.display()))
        .args(["--net-log-capture-mode=Everything", "--dump-dom"])
        .arg(format!("https://{NAME}/"))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&dom).unwrap())
        .stderr(std::fs::File::create(&errors).unwrap())
        .process_group(0);
    let started = std::time::Instant::now();
    let mut browser = Browser(
        cmd.spawn()
            .expect("run chromium (tests/install-packages.sh installs it)"),
    );
    let status = wait_until(BROWSER_LIMIT, "Chromium to load the page and exit", || {
        browser
            .0
            .try_wait()
            .unwrap()
            .ok_or_else(|| "still running".to_string())
    });
    eprintln!("chromium ran {:?}", started.elapsed());
    let stderr = std::fs::read_to_string(&errors).unwrap_or_default();
    assert!(status.success(), "chromium exited with {status}:\n{stderr}");

    // The page, as the browser saw it: every stylesheet parsed, every
    // script ran, every image decoded.
    let dom = std::fs::read_to_string(&dom).unwrap();
    let per_kind = ASSETS / 3;
    let loaded = format!("data-loaded=\"{per_kind} {per_kind} {per_kind}\"");
    assert!(
        dom.contains(&loaded),
        "the page did not report {loaded}; Chromium dumped:\n{dom}\nstderr:\n{stderr}"
    );

    // Every asset, as the browser's network stack saw it.
    let net = parse_net_log(&net_log, server.port);
    let used: Vec<(&i64, &String)> = net
        .sockets
        .iter()
        .filter(|(_, (_, used))| *used)
        .map(|(id, (alpn, _))| (id, alpn))
        .collect();
    assert_eq!(
        used.len(),
        1,
        "Chromium used {} connections to the server (want one); all it opened \
         (id: ALPN, used): {:?}",
        used.len(),
        net.sockets
    );
    let (&socket, alpn) = used[0];
    assert_eq!(alpn, "h2", "ALPN on the one connection");
    let mut sessions_used = BTreeSet::new();
    for asset in &assets {
        let path = &asset.path;
        let req = net
            .requests
            .get(path)
            .unwrap_or_else(|| panic!("Chromium never requested {path}"));
        assert_eq!(req.count, 1, "requests for {path}");
        let job = req
            .job
            .unwrap_or_else(|| panic!("{path} was not fetched from the network: {req:?}"));
        let (session_id, session, (stream, sent_path)) = net
            .sessions
            .iter()
            .find_map(|(id, s)| Some((*id, s, s.streams.get(&job)?)))
            .unwrap_or_else(|| panic!("{path} went on no HTTP/2 session (job {job})"));
        sessions_used.insert(session_id);
        assert_eq!(sent_path, path, "the :path sent for {path}");
        assert_eq!(session.protocol, "h2", "session of {path}");
        assert_eq!(session.socket, Some(socket), "the connection of {path}");
        assert_eq!(
            session.status.get(stream).map(String::as_str),
            Some("200"),
            "the :status of {path} (stream {stream})"
        );
        assert_eq!(
            session.data.get(stream).copied().unwrap_or(0),
            asset.bytes.len() as u64,
            "DATA bytes of {path} (stream {stream})"
        );
        assert_eq!(
            (req.body.len(), sha256(&req.body)),
            (asset.bytes.len(), sha256(&asset.bytes)),
            "the bytes Chromium read for {path}"
        );
    }
    assert_eq!(
        sessions_used.len(),
        1,
        "the assets came on several sessions: {sessions_used:?}"
    );

    // The server's side: every response was an HTTP/2 one.
    let out = tool("curl")
        .args(["-sS", "--max-time", "30", &metrics_url])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let h2 = metric(
        &text,
        "tlsfront_protocol_responses_total{protocol=\"HTTP/2\"}",
    );
    let h1 = metric(
        &text,
        "tlsfront_protocol_responses_total{protocol=\"HTTP/1.1\"}",
    );
    assert!(
        h2 > ASSETS as u64,
        "HTTP/2 responses: {h2}, want at least {}",
        ASSETS + 1
    );
    assert_eq!(h1, 0, "HTTP/1.1 responses");
    server.stop_and_check_path(1);
}
