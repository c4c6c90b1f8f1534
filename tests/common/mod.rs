//! Test harness for end-to-end runs: starts the real `tlsfront` binary on a
//! fixture directory, drives real clients (curl, openssl s_client), and
//! knows whether this kernel offloads TLS so tests can assert which data
//! path was taken (`/proc/net/tls_stat` deltas and tlsfront's own counters).

#![allow(dead_code)]

pub mod etcd;
pub mod fleet;
pub mod h2;
pub mod pebble;
pub mod peers;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_tlsfront");

/// How long a test waits for an event it expects (a line, an exit, a
/// file, a port) before it fails saying what it waited for. A safety net
/// only: every wait ends as soon as its event comes, so this bound is
/// set for a shared, loaded machine, not for a quick failure.
pub const WAIT: Duration = Duration::from_secs(60);

/// Poll `check` every 20 ms until it gives a value; fail after `limit`,
/// naming `what` was awaited and what `check` last saw (`last`).
pub fn wait_until<T>(
    limit: Duration,
    what: impl std::fmt::Display,
    mut check: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        let last = match check() {
            Ok(v) => return v,
            Err(last) => last,
        };
        assert!(
            Instant::now() < deadline,
            "waited {limit:?} for {what}; last seen: {last}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// File sizes every body test covers: record boundaries around 16 KiB, and
/// either side of the largest body written with its head (2048) rather
/// than sent from the file.
pub const SIZES: [usize; 9] = [0, 1, 2048, 2049, 16383, 16384, 16385, 1 << 20, 64 << 20];

/// Deterministic pseudo-random bytes.
pub fn content(size: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v = Vec::with_capacity(size + 8);
    while v.len() < size {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(size);
    v
}

pub fn sha256(data: &[u8]) -> String {
    aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, data)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The shared fixture tree: files of every size, a subdirectory with an
/// index, one without, symlinks in and out, and a secret outside the root.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub root: PathBuf,
    pub secret: PathBuf,
}

pub fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        // World-readable, for servers (nginx) that drop privileges.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let root = dir.path().join("www");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(root.join("noindex")).unwrap();
        for (i, s) in SIZES.iter().enumerate() {
            std::fs::write(root.join(format!("f{s}.bin")), content(*s, i as u64 + 1)).unwrap();
        }
        std::fs::write(root.join("index.html"), "<h1>tlsfront test root</h1>\n").unwrap();
        std::fs::write(root.join("sub/index.html"), "<p>sub index</p>\n").unwrap();
        std::fs::write(root.join("noindex/a.txt"), "a\n").unwrap();
        std::fs::write(root.join("hello.txt"), "hello world\n").unwrap();
        let secret = dir.path().join("secret.txt");
        std::fs::write(&secret, "TOP-SECRET-OUTSIDE-ROOT\n").unwrap();
        std::os::unix::fs::symlink(&secret, root.join("escape")).unwrap();
        std::os::unix::fs::symlink("hello.txt", root.join("inside-link")).unwrap();
        Fixture { dir, root, secret }
    })
}

pub fn file_path(size: usize) -> PathBuf {
    fixture().root.join(format!("f{size}.bin"))
}

/// `tlsfront check`, run once: (exited 0, its report).
fn check() -> &'static (bool, String) {
    static C: OnceLock<(bool, String)> = OnceLock::new();
    C.get_or_init(|| {
        let out = Command::new(BIN)
            .arg("check")
            .output()
            .expect("run tlsfront check");
        (
            out.status.code() == Some(0),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    })
}

/// Does this kernel offload every cipher? Decided once with `tlsfront
/// check`. `TLSFRONT_EXPECT_KTLS=1` (the QEMU guest) makes it mandatory.
pub fn ktls_expected() -> bool {
    let (all, report) = check();
    if std::env::var("TLSFRONT_EXPECT_KTLS").as_deref() == Ok("1") {
        assert!(
            *all,
            "TLSFRONT_EXPECT_KTLS=1 but tlsfront check says:\n{report}"
        );
    }
    *all
}

/// Can this kernel take new TLS 1.3 keys (a KeyUpdate), per `tlsfront check`?
pub fn ktls_rekey() -> bool {
    check().1.contains("rekey (KeyUpdate):    yes")
}

/// Tests that read kernel-wide counters must not overlap.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static M: Mutex<()> = Mutex::new(());
    M.lock().unwrap_or_else(|e| e.into_inner())
}

/// `/proc/net/tls_stat`, or empty when the kernel has none.
pub fn tls_stat() -> HashMap<String, u64> {
    let Ok(text) = std::fs::read_to_string("/proc/net/tls_stat") else {
        return HashMap::new();
    };
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            Some((it.next()?.to_string(), it.next()?.parse().ok()?))
        })
        .collect()
}

/// Kernel TLS counters around a piece of work.
pub struct StatDelta(HashMap<String, u64>);

/// On a kernel that rekeys: the client's two KeyUpdates (`k`, `K`) both
/// gave the kernel a new receive key, and the one that asked for it (`K`)
/// a new send key too.
pub fn assert_rekeyed(stat: &StatDelta) {
    assert_eq!(stat.delta("TlsRxRekeyOk"), 2, "TlsRxRekeyOk delta");
    assert_eq!(stat.delta("TlsTxRekeyOk"), 1, "TlsTxRekeyOk delta");
    assert_eq!(stat.delta("TlsRxRekeyError"), 0, "TlsRxRekeyError delta");
    assert_eq!(stat.delta("TlsTxRekeyError"), 0, "TlsTxRekeyError delta");
}

impl StatDelta {
    pub fn start() -> Self {
        // Decide (and probe, which opens kTLS sockets) before measuring.
        ktls_expected();
        StatDelta(tls_stat())
    }

    pub fn delta(&self, key: &str) -> u64 {
        let now = tls_stat();
        now.get(key).copied().unwrap_or(0) - self.0.get(key).copied().unwrap_or(0)
    }

    /// Where kTLS is expected: exactly `conns` sockets got TX and RX
    /// offload and nothing failed to decrypt. Elsewhere: nothing offloaded.
    pub fn assert_connections(&self, conns: u64) {
        if ktls_expected() {
            assert_eq!(
                self.delta("TlsTxSw"),
                conns,
                "TlsTxSw delta (sockets with kernel TX)"
            );
            assert_eq!(
                self.delta("TlsRxSw"),
                conns,
                "TlsRxSw delta (sockets with kernel RX)"
            );
        } else {
            assert_eq!(self.delta("TlsTxSw"), 0);
        }
        assert_eq!(
            self.delta("TlsDecryptError"),
            0,
            "TlsDecryptError must not grow"
        );
    }
}

/// A running `tlsfront serve`.
pub struct Server {
    child: Child,
    pub port: u16,
    pub data: tempfile::TempDir,
    pub startup: Vec<String>,
    /// Everything the server wrote to stderr so far (its log); also
    /// passed on to the test's stderr.
    log: Arc<Mutex<String>>,
    /// What the server wrote to stdout after its start-up lines, so far.
    out: Arc<Mutex<String>>,
    /// The threads that read the server's stdout and stderr: each ends at
    /// EOF, when every process holding the pipe (the server, and any
    /// process it started with its stdout, such as an upgrade's new
    /// process) has exited. Joined by `stop`, so that nothing the server
    /// wrote before exiting is missed.
    readers: Vec<JoinHandle<()>>,
}

impl Server {
    /// Serve the fixture root with extra flags.
    pub fn start(extra: &[&str]) -> Server {
        Server::start_in(&fixture().root, extra)
    }

    pub fn start_in(root: &Path, extra: &[&str]) -> Server {
        let root = root.display().to_string();
        Server::spawn(&["serve", &root], extra)
    }

    /// Serve the fixture root, started by `prlimit --nofile=NOFILE` (soft:hard).
    pub fn start_with_nofile(nofile: &str, extra: &[&str]) -> Server {
        let root = fixture().root.display().to_string();
        let limit = format!("--nofile={nofile}");
        Server::spawn_via(&["prlimit", &limit, "--"], &["serve", &root], extra)
    }

    /// Serve the fixture root with `NAME=VALUE` settings in the environment.
    pub fn start_with_env(vars: &[&str], extra: &[&str]) -> Server {
        let root = fixture().root.display().to_string();
        let wrapper: Vec<&str> = std::iter::once("env").chain(vars.iter().copied()).collect();
        Server::spawn_via(&wrapper, &["serve", &root], extra)
    }

    /// `tlsfront run --config CONFIG` with extra flags.
    pub fn run(config: &Path, extra: &[&str]) -> Server {
        Server::spawn(&["run", "--config", &config.display().to_string()], extra)
    }

    /// Send SIGHUP (reload the config); see `wait_for_output`/`wait_for_log`
    /// for its outcome.
    pub fn reload(&self) {
        let pid = rustix::process::Pid::from_raw(self.pid() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::HUP).unwrap();
    }

    /// `tlsfront proxy --backend BACKEND` with extra flags.
    pub fn proxy(backend: &str, extra: &[&str]) -> Server {
        Server::spawn(&["proxy", "--backend", backend], extra)
    }

    /// `tlsfront proxy` with extra environment variables (`NAME=value`).
    pub fn proxy_with_env(vars: &[&str], backend: &str, extra: &[&str]) -> Server {
        let wrapper: Vec<&str> = std::iter::once("env").chain(vars.iter().copied()).collect();
        Server::spawn_via(&wrapper, &["proxy", "--backend", backend], extra)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The admin listener's `/metrics` URL, from the start-up line that
    /// names it (a server started with `--admin` or `admin =`).
    pub fn metrics_url(&self) -> String {
        self.startup
            .iter()
            .find_map(|l| l.strip_prefix("metrics on ")?.split(',').next())
            .unwrap_or_else(|| panic!("no admin address in {:?}", self.startup))
            .to_string()
    }

    /// What `/metrics` says now (curl, the text format).
    pub fn metrics(&self) -> String {
        let out = tool("curl")
            .args(["-sS", "--max-time", "10"])
            .arg(self.metrics_url())
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Resident memory of the server process, KiB.
    pub fn rss_kib(&self) -> u64 {
        self.status_kib("VmRSS:")
    }

    /// Peak resident memory so far (VmHWM), in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        self.status_kib("VmHWM:")
    }

    fn status_kib(&self, field: &str) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    }

    /// CPU time (user + system) the server process has used, in clock ticks.
    pub fn cpu_ticks(&self) -> u64 {
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap_or_default();
        // Fields after the parenthesised command name; utime and stime are
        // the 14th and 15th fields of the whole line.
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        num(11) + num(12)
    }

    fn spawn(command: &[&str], extra: &[&str]) -> Server {
        Server::spawn_via(&[], command, extra)
    }

    /// `wrapper` (a command that execs the rest, e.g. prlimit), then tlsfront.
    pub fn spawn_via(wrapper: &[&str], command: &[&str], extra: &[&str]) -> Server {
        Server::spawn_bin(Path::new(BIN), wrapper, command, extra)
    }

    /// Like [`Server::spawn_via`], with the tlsfront executable at `bin`
    /// (a copy of [`BIN`], say, to be replaced while it runs).
    pub fn spawn_bin(bin: &Path, wrapper: &[&str], command: &[&str], extra: &[&str]) -> Server {
        let data = tempfile::tempdir().unwrap();
        let mut cmd = match wrapper.split_first() {
            Some((first, rest)) => {
                let mut c = tool(first);
                c.args(rest).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        cmd.args(command);
        if !extra.contains(&"--listen") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        cmd.args(extra)
            .env("XDG_DATA_HOME", data.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("start tlsfront");
        let log = Arc::new(Mutex::new(String::new()));
        let err = child.stderr.take().unwrap();
        let sink = log.clone();
        let err_reader = std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("{line}");
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        // Lines come through a channel, so that a server that prints
        // nothing cannot hold the test past the deadline.
        let out = BufReader::new(child.stdout.take().unwrap());
        let (lines_tx, lines) = std::sync::mpsc::channel::<String>();
        let out_reader = std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut startup = Vec::new();
        let mut port = 0;
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = lines.recv_timeout(left) else {
                break;
            };
            if let Some(rest) = line.split("https://").nth(1) {
                if port == 0 {
                    let hostport = rest.split('/').next().unwrap();
                    port = hostport.rsplit(':').next().unwrap().parse().unwrap();
                }
            }
            let done = line.starts_with("kTLS:");
            startup.push(line);
            if done {
                break;
            }
        }
        if port == 0 {
            let _ = child.kill();
        }
        assert!(
            port != 0,
            "tlsfront did not start within {WAIT:?} (or its output ended): {startup:?}"
        );
        // Keep draining stdout so the server never blocks on it; keep the
        // text for `output` and `stop`. This thread ends once the reader
        // above has met EOF and every line it read is in `out`.
        let out = Arc::new(Mutex::new(String::new()));
        let sink = out.clone();
        let drain = std::thread::spawn(move || {
            for line in lines {
                let mut out = sink.lock().unwrap();
                out.push_str(&line);
                out.push('\n');
            }
        });
        Server {
            child,
            port,
            data,
            startup,
            log,
            out,
            readers: vec![err_reader, out_reader, drain],
        }
    }

    /// What the server wrote to stdout after its start-up lines, so far.
    pub fn output(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    /// Have the server's stdout and stderr both reached EOF (all it wrote
    /// is in `output` and `log`)?
    fn at_eof(&self) -> bool {
        self.readers.iter().all(JoinHandle::is_finished)
    }

    /// Wait until the server's stdout and stderr have reached EOF: every
    /// process that holds them (the server; after an upgrade also the new
    /// process) has exited. Fails after [`WAIT`]. For what a process
    /// writes on its way out: its exit alone does not mean the reader
    /// threads have taken in its last lines.
    pub fn wait_eof(&self) {
        wait_until(
            WAIT,
            "EOF on tlsfront's stdout and stderr (all its processes gone)",
            || {
                if self.at_eof() {
                    Ok(())
                } else {
                    Err(format!("output so far:\n{}", self.output()))
                }
            },
        );
    }

    /// All the server wrote to stdout after its start-up lines, once every
    /// process holding its stdout has exited (see [`Server::wait_eof`]).
    pub fn output_at_eof(&self) -> String {
        self.wait_eof();
        self.output()
    }

    /// Until stdout after start-up holds `count` occurrences of `text`, or
    /// `limit` passes, or stdout ends: the output then, if it holds them.
    pub fn output_within(&self, text: &str, count: usize, limit: Duration) -> Option<String> {
        let deadline = Instant::now() + limit;
        loop {
            // EOF checked first: once it is seen, the output is complete.
            let ended = self.at_eof();
            let out = self.output();
            if out.matches(text).count() >= count {
                return Some(out);
            }
            if ended || Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait until stdout after start-up holds `count` occurrences of
    /// `text`; the output then. Fails if they have not come within
    /// [`WAIT`], or stdout ended without them.
    pub fn wait_for_output(&self, text: &str, count: usize) -> String {
        self.output_within(text, count, WAIT).unwrap_or_else(|| {
            panic!(
                "tlsfront's stdout did not show {text:?} {count} time(s) within {WAIT:?} \
                 (or it ended); stdout:\n{}\nstderr:\n{}",
                self.output(),
                self.log()
            )
        })
    }

    /// The server's log (stderr) so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Wait until the log contains `text`; the log then. Fails as
    /// [`Server::wait_for_output`] does.
    pub fn wait_for_log(&self, text: &str) -> String {
        self.wait_for_log_count(text, 1)
    }

    /// The log once `text` is in it `n` times. Fails if that has not
    /// happened within [`WAIT`], or stderr ended first.
    pub fn wait_for_log_count(&self, text: &str, n: usize) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let ended = self.at_eof();
            let log = self.log();
            if log.matches(text).count() >= n {
                return log;
            }
            assert!(
                !ended && Instant::now() < deadline,
                "tlsfront's log did not show {text:?} {n} time(s) within {WAIT:?} (or it \
                 ended); log:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    pub fn ca(&self) -> PathBuf {
        self.data.path().join("tlsfront/cert.pem")
    }

    /// curl with our CA and `args`, over HTTP/1.1 unless `args` say
    /// `--http2` (a later flag wins): the suites written for HTTP/1.1 keep
    /// testing it, while static sites offer h2 first (tests/h2.rs).
    pub fn curl(&self, args: &[&str]) -> Output {
        let mut c = tool("curl");
        c.arg("--cacert")
            .arg(self.ca())
            .args(["-sS", "--http1.1", "--max-time", "120"])
            .args(args);
        c.output()
            .expect("run curl (tests/install-packages.sh installs it)")
    }

    /// The HTTP status curl gets for `path`, with extra curl flags.
    pub fn status(&self, path: &str, extra: &[&str]) -> String {
        let url = self.url(path);
        let mut args = vec!["-o", "/dev/null", "-w", "%{http_code}"];
        args.extend_from_slice(extra);
        args.push(&url);
        String::from_utf8_lossy(&self.curl(&args).stdout).into_owned()
    }

    /// Send `signal` to the server process.
    pub fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.pid() as i32).unwrap();
        rustix::process::kill_process(pid, signal).unwrap();
    }

    /// Wait up to `limit` for the server process to exit by itself; its
    /// status, or `None` if it still runs.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return Some(s);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM; wait for the exit and for EOF on the server's stdout and
    /// stderr; return the exit status and the metrics report (all of
    /// stdout after the start-up lines).
    pub fn stop(mut self) -> (std::process::ExitStatus, String) {
        let _ = sigterm(self.child.id());
        let deadline = Instant::now() + WAIT;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("tlsfront did not exit within {WAIT:?} of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // The report is written just before the exit: the readers have it
        // once they meet EOF, not necessarily when the exit is seen.
        self.wait_eof();
        for r in std::mem::take(&mut self.readers) {
            r.join().expect("a reader of tlsfront's output panicked");
        }
        (status, self.output())
    }

    /// Stop, and check the metrics say every connection took the data path
    /// this kernel should give it. Returns the report.
    pub fn stop_and_check_path(self, min_conns: u64) -> String {
        let (status, report) = self.stop();
        assert!(status.success(), "tlsfront exited with {status}: {report}");
        let line = report
            .lines()
            .find(|l| l.starts_with("connections:"))
            .unwrap_or_else(|| panic!("no metrics report: {report}"));
        let num = |key: &str| -> u64 {
            line.split(key)
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|n| n.trim_end_matches(';').parse().ok())
                .unwrap_or_else(|| panic!("bad report line {line}"))
        };
        let (ktls, user) = (num("ktls "), num("userspace "));
        if ktls_expected() {
            assert_eq!(user, 0, "connections fell back to user space: {report}");
            assert!(ktls >= min_conns, "{report}");
        } else {
            assert_eq!(ktls, 0, "{report}");
            assert!(user >= min_conns, "{report}");
        }
        report
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sigterm(pid: u32) -> std::io::Result<()> {
    let pid = rustix::process::Pid::from_raw(pid as i32).ok_or(std::io::ErrorKind::InvalidInput)?;
    rustix::process::kill_process(pid, rustix::process::Signal::TERM)?;
    Ok(())
}

/// `openssl ARGS` fed `input`: its stdout.
pub fn openssl_filter(args: &[&str], input: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = tool("openssl")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run openssl");
    child.stdin.take().unwrap().write_all(input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Base64 of the SHA-256 of the certificate's SubjectPublicKeyInfo: what
/// Chromium's `--ignore-certificate-errors-spki-list` takes.
pub fn spki_hash(cert: &Path) -> String {
    let pem = std::fs::read(cert).unwrap();
    let key = openssl_filter(&["x509", "-noout", "-pubkey"], &pem);
    let der = openssl_filter(&["pkey", "-pubin", "-outform", "DER"], &key);
    let hash = openssl_filter(&["dgst", "-sha256", "-binary"], &der);
    let b64 = openssl_filter(&["base64", "-A"], &hash);
    String::from_utf8(b64).unwrap().trim().to_string()
}

/// Headless Chromium (as root: `--no-sandbox`), with a profile in `dir`,
/// `name` resolved to 127.0.0.1:`port` and every other name nowhere (no
/// network), the certificate in `cert` trusted by its key's hash; the
/// caller adds the net log, the URL and what to do.
pub fn headless_chromium(dir: &Path, name: &str, port: u16, cert: &Path) -> Command {
    let mut cmd = tool("chromium");
    cmd.args([
        "--headless=new",
        "--no-sandbox",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-default-apps",
        "--disable-extensions",
        "--disable-sync",
    ])
    .arg(format!("--user-data-dir={}", dir.join("profile").display()))
    .arg(format!(
        "--host-resolver-rules=MAP {name} 127.0.0.1:{port}, MAP * ~NOTFOUND"
    ))
    .arg(format!(
        "--ignore-certificate-errors-spki-list={}",
        spki_hash(cert)
    ));
    cmd
}

/// `tlsfront config check FILE`, with a data directory of its own: whether
/// it passed, and what it said (stdout, then stderr).
pub fn config_check(file: &Path) -> (bool, String) {
    let data = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["config", "check"])
        .arg(file)
        .env("XDG_DATA_HOME", data.path())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// A program from `tests/packages.txt`, the one list the test command
/// installs: a test that runs anything else fails here, on this machine,
/// rather than on a fresh one where it was never installed.
pub fn tool(program: &str) -> Command {
    const LIST: &str = include_str!("../packages.txt");
    let listed = LIST
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(|l| l.split_whitespace().skip(2))
        .any(|p| p == program);
    assert!(
        listed,
        "tests run only programs listed in tests/packages.txt: add the package that \
         provides {program:?} there (tests/install-packages.sh installs it)"
    );
    Command::new(program)
}

/// The load client, `tlsfront-bench`: its own package (crates/bench), so it
/// has no `CARGO_BIN_EXE_` here. It is found next to [`BIN`], in the same
/// target/<profile>/ directory, where `cargo test --workspace` builds it;
/// the kTLS guest sees that directory too.
pub fn bench_client() -> Command {
    let path = Path::new(BIN).with_file_name("tlsfront-bench");
    if !path.is_file() {
        let release = path.parent().and_then(Path::file_name) == Some("release".as_ref());
        panic!(
            "{} is missing: the load client is a package of its own; build it with \
             `cargo build{} -p tlsfront-bench` (or run the tests with `cargo test --workspace`)",
            path.display(),
            if release { " --release" } else { "" }
        );
    }
    Command::new(path)
}

/// The SHA-256 fingerprint openssl sees for `name`.
pub fn served_fingerprint(port: u16, name: &str) -> String {
    // The chain is printed with the handshake, before s_client reads its
    // stdin: no step needed.
    let (out, err, _) = s_client(
        port,
        &["-servername", name, "-showcerts"],
        &[],
        Duration::from_secs(20),
    );
    let pem: String = {
        let start = out
            .find("-----BEGIN CERTIFICATE-----")
            .unwrap_or_else(|| panic!("{out}{err}"));
        let end = out[start..].find("-----END CERTIFICATE-----").unwrap() + start + 25;
        out[start..end].to_string()
    };
    let mut x = tool("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    x.stdin.take().unwrap().write_all(pem.as_bytes()).unwrap();
    let out = x.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A test CA that signs each site's certificates.
pub struct Ca {
    pub dir: tempfile::TempDir,
    pub issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
    pub pem: PathBuf,
}

impl Ca {
    pub fn new() -> Ca {
        Ca::named("tlsfront test CA")
    }

    /// A CA whose subject's common name is `name`.
    pub fn named(name: &str) -> Ca {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        let pem = dir.path().join("ca.pem");
        std::fs::write(&pem, cert.pem()).unwrap();
        Ca {
            dir,
            issuer: rcgen::Issuer::new(params, key),
            pem,
        }
    }

    /// A certificate for `names` (ECDSA P-256, or RSA 2048 with `rsa`),
    /// written as `<file>.pem` and `<file>.key`; their paths.
    pub fn issue(&self, file: &str, names: &[String], rsa: bool) -> (PathBuf, PathBuf) {
        let key = if rsa {
            rcgen::KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256).unwrap()
        } else {
            rcgen::KeyPair::generate().unwrap()
        };
        let mut params = rcgen::CertificateParams::new(names.to_vec()).unwrap();
        params.distinguished_name.push(
            rcgen::DnType::CommonName,
            format!("{file} {}", if rsa { "rsa" } else { "ecdsa" }),
        );
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let c = self.dir.path().join(format!("{file}.pem"));
        let k = self.dir.path().join(format!("{file}.key"));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }
}

/// A rustls client that trusts `ca` (the server's self-signed certificate).
pub fn client_config(ca: &std::path::Path) -> std::sync::Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    std::sync::Arc::new(
        rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth(),
    )
}

/// One step of an `openssl s_client` conversation.
///
/// s_client reads its stdin only once the handshake is done, so what it
/// prints about the handshake (certificates, "Reused", the staple) is in
/// its output even when stdin ends at once: no step is needed for that.
pub enum Step<'a> {
    Send(&'a [u8]),
    /// A pause that is part of the scenario (a client that stays idle past
    /// a server timeout), never a wait for an event: use the waits below.
    Sleep(u64),
    /// Wait until s_client's output contains this text, so the next input
    /// goes out as a separate read (s_client takes `k` as a command only
    /// at the start of a read). Ends early if the output ends (the server
    /// closed); fails after [`WAIT`].
    WaitFor(&'a str),
    /// Wait until s_client's stderr holds this text this many times (it
    /// says `KEYUPDATE` there when it has taken a `k` or `K` command).
    /// Ends early if its output ends; fails after [`WAIT`].
    WaitForStderr(&'a str, usize),
    /// Wait until this file exists and is not empty (e.g. the `-sess_out`
    /// file, written when a TLS 1.3 ticket arrives: s_client's own ticket
    /// message sits in its stdout buffer until it exits). Fails if it has
    /// not come within [`WAIT`] or s_client's output ended first.
    WaitForFile(&'a std::path::Path),
    /// Set this flag (tell the test's thread the conversation got here).
    Set(&'a AtomicBool),
    /// Wait until this flag is set (the test's thread has checked what it
    /// needed while the connection was open); fails after [`WAIT`].
    Await(&'a AtomicBool),
}

/// How a wait in [`s_client`] ended.
#[derive(PartialEq, Eq)]
enum Waited {
    Done,
    /// s_client's output ended first.
    Ended,
    TimedOut,
}

/// Run `openssl s_client` against `port` with `args`, feeding `steps` to
/// its stdin, then closing stdin. Killed after `limit`. Returns (stdout,
/// stderr, exited-by-itself).
pub fn s_client(
    port: u16,
    args: &[&str],
    steps: &[Step],
    limit: Duration,
) -> (String, String, bool) {
    let mut child = tool("openssl")
        .arg("s_client")
        .arg("-connect")
        .arg(format!("127.0.0.1:{port}"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run openssl (tests/install-packages.sh installs it)");
    let mut stdin = child.stdin.take().unwrap();
    // Both outputs are gathered as they come, for the waits; each reader
    // ends at EOF.
    let gather = |mut from: Box<dyn Read + Send>| {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let reader = std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            loop {
                match from.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => sink.lock().unwrap().extend_from_slice(&chunk[..n]),
                }
            }
        });
        (seen, reader)
    };
    let (out, o) = gather(Box::new(child.stdout.take().unwrap()));
    let (err, e) = gather(Box::new(child.stderr.take().unwrap()));
    let text = |b: &Arc<Mutex<Vec<u8>>>| String::from_utf8_lossy(&b.lock().unwrap()).into_owned();
    // A wait that failed: kill s_client, then fail saying what was awaited.
    // Once s_client is gone both readers end; the report waits for its
    // stderr too, where it says why a connection ended.
    let mut fail = |what: String| -> ! {
        let ended = o.is_finished();
        let _ = child.kill();
        let _ = child.wait();
        let deadline = Instant::now() + WAIT;
        while !e.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let why = if ended {
            "s_client ended first".to_string()
        } else {
            format!("waited {WAIT:?}")
        };
        panic!(
            "s_client: {why}, without {what}\nstdout:\n{}\nstderr:\n{}",
            text(&out),
            text(&err)
        );
    };
    for step in steps {
        // Until `done` holds, or the output has ended (nothing more can
        // come), or WAIT has passed; says which, `done` first.
        let wait = |done: &dyn Fn() -> bool| {
            let deadline = Instant::now() + WAIT;
            loop {
                let ended = o.is_finished();
                if done() {
                    return Waited::Done;
                }
                if ended {
                    return Waited::Ended;
                }
                if Instant::now() > deadline {
                    return Waited::TimedOut;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        match step {
            Step::Send(b) => {
                let _ = stdin.write_all(b);
                let _ = stdin.flush();
            }
            Step::Sleep(ms) => std::thread::sleep(Duration::from_millis(*ms)),
            Step::WaitFor(t) => {
                if wait(&|| text(&out).contains(t)) == Waited::TimedOut {
                    fail(format!("{t:?} in its output"));
                }
            }
            Step::WaitForStderr(t, n) => {
                if wait(&|| text(&err).matches(t).count() >= *n) == Waited::TimedOut {
                    fail(format!("{t:?} {n} time(s) on its stderr"));
                }
            }
            Step::WaitForFile(path) => {
                // Seen written once is enough: s_client rewrites the file
                // for every ticket (truncating it first), so a second look
                // can land in between.
                let written = || std::fs::metadata(path).is_ok_and(|m| m.len() > 0);
                match wait(&written) {
                    Waited::Done => {}
                    // s_client is gone: the file is as it left it.
                    Waited::Ended if written() => {}
                    Waited::Ended | Waited::TimedOut => {
                        fail(format!("{} to be written", path.display()))
                    }
                }
            }
            Step::Set(flag) => flag.store(true, SeqCst),
            Step::Await(flag) => {
                let deadline = Instant::now() + WAIT;
                while !flag.load(SeqCst) {
                    if Instant::now() > deadline {
                        fail("the test to set its flag".into());
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
    drop(stdin);
    let deadline = Instant::now() + limit;
    let mut by_itself = true;
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            by_itself = false;
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    o.join().unwrap();
    e.join().unwrap();
    (text(&out), text(&err), by_itself)
}

/// Status codes of the HTTP responses in a raw transcript, in order.
pub fn statuses(transcript: &str) -> Vec<u16> {
    transcript
        .lines()
        .filter_map(|l| l.strip_prefix("HTTP/1.1 "))
        .filter_map(|r| r.get(..3)?.parse().ok())
        .collect()
}

/// Send `request` (raw bytes, possibly several pipelined requests) on one
/// TLS connection, then wait for the server to close it (up to 30 s).
/// Returns the raw transcript and whether the server closed.
pub fn exchange(port: u16, request: &[u8]) -> (String, bool) {
    exchange_steps(port, &[Step::Send(request)])
}

/// Like [`exchange`], with steps (e.g. wait for `100 Continue` before the body).
pub fn exchange_steps(port: u16, steps: &[Step]) -> (String, bool) {
    let (out, _, closed) = s_client(port, &["-quiet"], steps, Duration::from_secs(30));
    (out, closed)
}

/// One response taken off a raw transcript.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    /// The head, status line included, up to the blank line.
    pub head: String,
    pub body: String,
}

impl Response {
    /// A header's value (the first, name case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }

    /// Says `Connection: close`.
    pub fn closes(&self) -> bool {
        self.header("Connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"))
    }
}

/// Split a transcript into its responses, exactly: each must start where
/// the last ended (so a body where none belongs shows up as garbage in
/// place of a status line) and nothing may trail. Bodies are framed by
/// `Content-Length`; 1xx, 304 and the answers to HEAD have none
/// (`head_requests[i]`: the i-th final response answers a HEAD).
pub fn split_responses(transcript: &str, head_requests: &[bool]) -> Vec<Response> {
    let mut rest = transcript;
    let mut all = Vec::new();
    let mut finals = 0;
    while !rest.is_empty() {
        assert!(
            rest.starts_with("HTTP/1.1 "),
            "expected a status line at {rest:?} in {transcript:?}"
        );
        let end = rest
            .find("\r\n\r\n")
            .unwrap_or_else(|| panic!("unterminated head in {transcript:?}"))
            + 4;
        let head = rest[..end - 2].to_string();
        let status: u16 = head[9..12].parse().unwrap();
        let mut r = Response {
            status,
            head,
            body: String::new(),
        };
        rest = &rest[end..];
        if status >= 200 {
            let is_head = head_requests.get(finals).copied().unwrap_or(false);
            finals += 1;
            let len: usize = r.header("Content-Length").map_or(0, |v| v.parse().unwrap());
            if !is_head && status != 304 {
                assert!(rest.len() >= len, "short body in {transcript:?}");
                r.body = rest[..len].to_string();
                rest = &rest[len..];
            }
        }
        all.push(r);
    }
    all
}

/// The server process's pid, from the last `... server process PID ...`
/// line of tlsfront's privileged parent in `text`.
pub fn server_pid(text: &str) -> u32 {
    let after = text
        .lines()
        .rev()
        .find_map(|l| {
            l.split("server process ")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
        })
        .unwrap_or_else(|| panic!("no server process line in: {text}"));
    after.parse().unwrap()
}

/// A `/proc/PID/status` field, its words joined by one space.
pub fn status_field(pid: u32, name: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .unwrap_or("")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}
