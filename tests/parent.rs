//! The privileged parent, as the packaged set-up runs tlsfront: started as
//! root with `user = "nobody"`, keys and configuration only root may read,
//! the access log in a directory only root may write. Through the real
//! binary and real clients (curl, openssl): the server process runs as
//! nobody with no capability left while the parent stays root; a reload
//! serves a renewed root-only key; log rotation reopens through the
//! parent, the new file root's; a killed server process is replaced; an
//! upgrade (SIGUSR2) hands the sockets to a new parent and its own server
//! process; and a second tlsfront on the same address is refused.

mod common;

use common::{served_fingerprint, server_pid, status_field, Ca, Server};
use rustix::process::Signal;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A site for `localhost` whose key, configuration and log directory only
/// root may read, and whose document root nobody may read.
struct Setup {
    ca: Ca,
    _www: tempfile::TempDir,
    conf: tempfile::TempDir,
    cfg: PathBuf,
    log: PathBuf,
}

impl Setup {
    fn new(extra: &str) -> Setup {
        let ca = Ca::new();
        let www = tempfile::tempdir().unwrap();
        chmod(www.path(), 0o755);
        std::fs::write(www.path().join("index.html"), "hello from nobody\n").unwrap();
        chmod(&www.path().join("index.html"), 0o644);
        let conf = tempfile::tempdir().unwrap();
        chmod(conf.path(), 0o700);
        let log = conf.path().join("logs/access.log");
        std::fs::create_dir(conf.path().join("logs")).unwrap();
        let cfg = conf.path().join("tlsfront.toml");
        let setup = Setup {
            ca,
            _www: www,
            conf,
            cfg,
            log,
        };
        setup.write_config("one", extra);
        setup
    }

    /// Issue a certificate named `file` (key 0600) and point the config at it.
    fn write_config(&self, file: &str, extra: &str) {
        let (c, k) = self.ca.issue(file, &["localhost".to_string()], false);
        chmod(&k, 0o600);
        let text = format!(
            "user = \"nobody\"\n{extra}\n[[site]]\nnames = [\"localhost\"]\ncert = \"{}\"\n\
             key = \"{}\"\nroot = \"{}\"\naccess_log = \"{}\"\n",
            c.display(),
            k.display(),
            self._www.path().display(),
            self.log.display()
        );
        std::fs::write(&self.cfg, text).unwrap();
        chmod(&self.cfg, 0o600);
    }

    fn get(&self, port: u16) -> String {
        let out = common::tool("curl")
            .args(["-sS", "--max-time", "30", "--cacert"])
            .arg(&self.ca.pem)
            .args(["--resolve", &format!("localhost:{port}:127.0.0.1")])
            .arg(format!("https://localhost:{port}/index.html"))
            .output()
            .unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }
}

/// s_client with TLS 1.3 to `localhost` on `port`, trusting the setup's
/// CA, with `session` (`-sess_out` or `-sess_in`) naming `sess`.
fn session(setup: &Setup, port: u16, session: &str, sess: &Path) -> (String, String) {
    let (ca, s) = (
        setup.ca.pem.display().to_string(),
        sess.display().to_string(),
    );
    let args = [
        "-tls1_3",
        "-servername",
        "localhost",
        "-CAfile",
        &ca,
        session,
        &s,
    ];
    let steps = match session {
        "-sess_out" => vec![common::Step::WaitForFile(sess)],
        _ => Vec::new(),
    };
    let (out, err, _) = common::s_client(port, &args, &steps, Duration::from_secs(30));
    (out, err)
}

/// A new TLS 1.3 session with `localhost` on `port`, saved to `sess`.
fn new_session(setup: &Setup, port: u16, sess: &Path) {
    let (out, err) = session(setup, port, "-sess_out", sess);
    assert!(out.contains("New, TLSv1.3"), "{out}{err}");
}

/// Whether the session in `sess` resumes on `port`.
fn resumes(setup: &Setup, port: u16, sess: &Path) -> bool {
    let (out, err) = session(setup, port, "-sess_in", sess);
    assert!(out.contains("Verify return code: 0 (ok)"), "{out}{err}");
    out.contains("Reused, TLSv1.3")
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, r)| !r.starts_with(" Z"))
    })
}

/// Wait (up to 60 s) until `cond` holds; panic naming `what` otherwise.
fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_server_process_runs_as_user_while_the_parent_reads_root_only_files() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let _serial = common::serial();
    let setup = Setup::new("");
    let server = Server::run(&setup.cfg, &[]);
    let port = server.port;
    let out = server.wait_for_output("parent process ", 1);
    let child = server_pid(&out);
    assert_eq!(status_field(child, "Uid:"), "65534 65534 65534 65534");
    assert_eq!(status_field(child, "Groups:"), "65534");
    for cap in ["CapPrm:", "CapEff:", "CapAmb:"] {
        assert_eq!(status_field(child, cap), "0000000000000000", "{cap}");
    }
    assert_eq!(status_field(server.pid(), "Uid:"), "0 0 0 0");

    // The key is root's alone (0600 in a 0700 directory), yet it is served.
    assert_eq!(setup.get(port), "hello from nobody\n");
    let first = served_fingerprint(port, "localhost");

    // A renewed certificate and key, root's alone again: a reload serves it.
    setup.write_config("two", "");
    server.reload();
    server.wait_for_output("reloaded ", 1);
    let second = served_fingerprint(port, "localhost");
    assert_ne!(first, second, "the renewed certificate is not served");
    assert_eq!(setup.get(port), "hello from nobody\n");

    // The access log: opened by the parent, root's, written by nobody.
    wait_until("the access log's first lines", || {
        std::fs::read_to_string(&setup.log).is_ok_and(|t| t.lines().count() >= 2)
    });
    assert_eq!(std::fs::metadata(&setup.log).unwrap().uid(), 0);

    // Rotation: renamed away, SIGUSR1, and the next line goes to a new file
    // the parent made (root's, in root's directory).
    let rotated = setup.conf.path().join("logs/access.log.1");
    std::fs::rename(&setup.log, &rotated).unwrap();
    server.signal(Signal::USR1);
    server.wait_for_output("SIGUSR1: reopened 1 access log file(s), 0 failed", 1);
    assert_eq!(setup.get(port), "hello from nobody\n");
    wait_until("a line in the new access log", || {
        std::fs::read_to_string(&setup.log).is_ok_and(|t| t.lines().count() >= 1)
    });
    assert_eq!(std::fs::metadata(&setup.log).unwrap().uid(), 0);
    let (status, report) = server.stop();
    assert!(status.success(), "{status}: {report}");
    assert!(!alive(child), "the server process outlived its parent");
}

#[test]
fn a_server_process_that_dies_is_replaced() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let _serial = common::serial();
    let setup = Setup::new("");
    let server = Server::run(&setup.cfg, &[]);
    let port = server.port;
    let child = server_pid(&server.wait_for_output("parent process ", 1));
    assert_eq!(setup.get(port), "hello from nobody\n");
    let sess = setup.conf.path().join("sess.pem");
    new_session(&setup, port, &sess);
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(child as i32).unwrap(),
        Signal::KILL,
    )
    .unwrap();
    let out = server.wait_for_output(" started", 1);
    let next = server_pid(&out);
    assert_ne!(next, child, "{out}");
    assert!(server
        .log()
        .contains(&format!("the server process {child} exited")));
    assert_eq!(setup.get(port), "hello from nobody\n");
    // The new server process has the parent's ticket keys: the session
    // made with the one before resumes.
    assert!(
        resumes(&setup, port, &sess),
        "no resumption after a respawn"
    );
    let (status, report) = server.stop();
    assert!(status.success(), "{status}: {report}");
}

#[test]
fn an_upgrade_starts_a_new_parent_on_the_same_sockets() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let _serial = common::serial();
    let setup = Setup::new("");
    let mut server = Server::run(&setup.cfg, &["--admin", "127.0.0.1:0"]);
    let port = server.port;
    let child = server_pid(&server.wait_for_output("parent process ", 1));
    assert_eq!(setup.get(port), "hello from nobody\n");
    let sess = setup.conf.path().join("sess.pem");
    new_session(&setup, port, &sess);
    server.signal(Signal::USR2);
    let out = server.wait_for_output("upgraded: new process ", 1);
    let new_parent: u32 = out
        .lines()
        .find_map(|l| l.strip_prefix("upgraded: new process "))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("{out}"));
    // The old parent and its server process finish and exit 0.
    let status = server
        .wait_exit(Duration::from_secs(60))
        .expect("the old parent did not exit");
    assert!(status.success(), "{status}");
    wait_until("the old server process to exit", || !alive(child));
    // The new parent is root, its server process nobody, on the same port.
    assert_eq!(status_field(new_parent, "Uid:"), "0 0 0 0");
    assert_eq!(setup.get(port), "hello from nobody\n");
    // The new parent was handed the ticket keys' seed.
    assert!(
        resumes(&setup, port, &sess),
        "no resumption after an upgrade"
    );
    let p = rustix::process::Pid::from_raw(new_parent as i32).unwrap();
    rustix::process::kill_process(p, Signal::TERM).unwrap();
    wait_until("the new parent to exit", || !alive(new_parent));
}

#[test]
fn a_second_tlsfront_on_the_same_address_is_refused() {
    let _serial = common::serial();
    let first = Server::start(&[]);
    let addr = format!("127.0.0.1:{}", first.port);
    let out = common::tool("env")
        .arg(env!("CARGO_BIN_EXE_tlsfront"))
        .args(["serve", "--listen", &addr])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a second server started: {err}");
    assert!(
        err.contains(&format!("cannot listen on {addr}")) && err.contains("another process"),
        "{err}"
    );
    first.stop();
}

/// The P-256 private scalar of a PKCS#8 key file (rcgen's), as stored:
/// big-endian in the file, and little-endian (byte-reversed) as a BIGNUM
/// holds it in memory.
fn ec_scalar_forms(key: &Path) -> [Vec<u8>; 2] {
    use rustls::pki_types::pem::PemObject;
    let der = rustls::pki_types::PrivatePkcs8KeyDer::from_pem_file(key).unwrap();
    let der = der.secret_pkcs8_der();
    // ECPrivateKey: SEQUENCE { INTEGER 1, OCTET STRING (32) privateKey, ... }
    let at = der
        .windows(5)
        .position(|w| w == [0x02, 0x01, 0x01, 0x04, 0x20])
        .expect("an ECPrivateKey in the PKCS#8 key")
        + 5;
    let be = der[at..at + 32].to_vec();
    let le = be.iter().rev().copied().collect();
    [be, le]
}

/// Whether any of `needles` is in the memory of process `pid`: its
/// readable pages that are in RAM (/proc/PID/pagemap says which; the
/// allocator's untouched reservations are gigabytes of nothing).
fn in_memory(pid: u32, needles: &[Vec<u8>]) -> bool {
    use std::os::unix::fs::FileExt;
    const PAGE: u64 = 4096;
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let pagemap = std::fs::File::open(format!("/proc/{pid}/pagemap")).unwrap();
    let found = |bytes: &[u8]| {
        needles
            .iter()
            .any(|nd| bytes.windows(nd.len()).any(|w| w == nd.as_slice()))
    };
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        if !perms.starts_with('r') || line.ends_with("[vvar]") || line.ends_with("[vsyscall]") {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (u64::from_str_radix(start, 16), u64::from_str_radix(end, 16))
        else {
            continue;
        };
        let pages = ((end - start) / PAGE) as usize;
        let mut entries = vec![0u8; pages * 8];
        if pagemap
            .read_exact_at(&mut entries, start / PAGE * 8)
            .is_err()
        {
            continue;
        }
        let present = |i: usize| {
            let e = u64::from_le_bytes(entries[i * 8..i * 8 + 8].try_into().unwrap());
            e & (1 << 63) != 0
        };
        // Runs of present pages, read and searched whole.
        let mut i = 0;
        while i < pages {
            if !present(i) {
                i += 1;
                continue;
            }
            let first = i;
            while i < pages && present(i) {
                i += 1;
            }
            let mut run = vec![0u8; (i - first) * PAGE as usize];
            if mem
                .read_exact_at(&mut run, start + first as u64 * PAGE)
                .is_ok()
                && found(&run)
            {
                return true;
            }
        }
    }
    false
}

#[test]
fn private_keys_stay_in_the_parent_which_signs_for_the_server_process() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let _serial = common::serial();
    // One site with an ECDSA and an RSA certificate, keys root's alone.
    let setup = Setup::new("");
    let (ec_cert, ec_key) = setup.ca.issue("ec", &["localhost".to_string()], false);
    let (rsa_cert, rsa_key) = setup.ca.issue("rsa", &["localhost".to_string()], true);
    chmod(&ec_key, 0o600);
    chmod(&rsa_key, 0o600);
    let scalar = ec_scalar_forms(&ec_key);
    for keys_in_parent in [true, false] {
        let text = format!(
            "user = \"nobody\"\nkeys_in_parent = {keys_in_parent}\n[[site]]\n\
             names = [\"localhost\"]\ncert = [\"{}\", \"{}\"]\nkey = [\"{}\", \"{}\"]\n\
             root = \"{}\"\n",
            ec_cert.display(),
            rsa_cert.display(),
            ec_key.display(),
            rsa_key.display(),
            setup._www.path().display(),
        );
        std::fs::write(&setup.cfg, text).unwrap();
        let server = Server::run(&setup.cfg, &[]);
        let port = server.port;
        let child = server_pid(&server.wait_for_output("parent process ", 1));
        assert_eq!(setup.get(port), "hello from nobody\n");
        // Every kind of signature a handshake asks for: TLS 1.3
        // CertificateVerify with ECDSA and RSA-PSS, TLS 1.2
        // ServerKeyExchange with RSA PKCS#1.
        let ca = setup.ca.pem.display().to_string();
        for (args, signed) in [
            (
                &["-tls1_3", "-sigalgs", "ecdsa_secp256r1_sha256"][..],
                "ECDSA",
            ),
            (
                &["-tls1_3", "-sigalgs", "rsa_pss_rsae_sha256"][..],
                "RSA-PSS",
            ),
            (
                &[
                    "-tls1_2",
                    "-cipher",
                    "ECDHE-RSA-AES128-GCM-SHA256",
                    "-sigalgs",
                    "RSA+SHA256",
                ][..],
                "RSA",
            ),
        ] {
            let mut all = vec!["-servername", "localhost", "-CAfile", &ca];
            all.extend_from_slice(args);
            let (out, err, _) = common::s_client(port, &all, &[], Duration::from_secs(30));
            assert!(
                out.contains("Verify return code: 0 (ok)")
                    && out.contains(&format!("Peer signature type: {signed}\n")),
                "keys_in_parent = {keys_in_parent}, {args:?}:\n{out}{err}"
            );
        }
        // Where the ECDSA key is: in the parent's memory (which shows the
        // search finds it), and in the server process's only when it was
        // handed over.
        if keys_in_parent {
            assert!(in_memory(server.pid(), &scalar), "not in the parent");
            assert!(
                !in_memory(child, &scalar),
                "the server process holds the private key"
            );
        } else {
            assert!(
                in_memory(child, &scalar),
                "keys_in_parent = false: the server process should hold the key"
            );
        }
        let (status, report) = server.stop();
        assert!(status.success(), "{status}: {report}");
    }
}
