//! OCSP stapling from a file per certificate (`ocsp = "…der"`), through real
//! tools: an openssl CA signs the certificates and `openssl ocsp` (as a
//! responder over an index.txt) writes the responses; `openssl s_client
//! -status` shows what is stapled over TLS 1.3 and TLS 1.2. A good response
//! is stapled; a revoked, expired or foreign one (another certificate's,
//! or another CA's for the same serial) is not (and is warned
//! about); a reload with a new file staples the new one; a response whose
//! nextUpdate passes while the server runs stops being stapled without a
//! reload; `tlsfront config check` reports each.

mod common;

use common::{s_client, tool, Server};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// A CA on disk (openssl's `ocsp` responder needs its key in a file).
struct Pki {
    dir: tempfile::TempDir,
}

fn run(cmd: &mut std::process::Command) {
    let out = cmd.output().expect("run openssl");
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Pki {
    fn new() -> Pki {
        let dir = tempfile::tempdir().unwrap();
        run(tool("openssl").current_dir(dir.path()).args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-subj",
            "/CN=tlsfront OCSP test CA",
            "-days",
            "2",
        ]));
        Pki { dir }
    }

    fn path(&self, f: &str) -> PathBuf {
        self.dir.path().join(f)
    }

    /// A certificate for `name` with `serial` (hex): `<name>.pem` (leaf,
    /// then the CA) and `<name>.key`.
    fn leaf(&self, name: &str, serial: &str) {
        let d = self.dir.path();
        run(tool("openssl").current_dir(d).args([
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            &format!("subjectAltName=DNS:{name}"),
            "-out",
            &format!("{name}.csr"),
        ]));
        run(tool("openssl").current_dir(d).args([
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-set_serial",
            &format!("0x{serial}"),
            "-days",
            "1",
            "-copy_extensions",
            "copy",
            "-out",
            &format!("{name}.leaf"),
        ]));
        let mut chain = std::fs::read(d.join(format!("{name}.leaf"))).unwrap();
        chain.extend(std::fs::read(d.join("ca.pem")).unwrap());
        std::fs::write(d.join(format!("{name}.pem")), chain).unwrap();
    }

    /// `openssl ocsp` answering for the certificate of `name` (serial
    /// `serial`): good, or revoked, per the index; into `out`.
    fn respond(&self, name: &str, serial: &str, revoked: bool, out: &Path) {
        let d = self.dir.path();
        let line = if revoked {
            format!("R\t301231000000Z\t240101000000Z\t{serial}\tunknown\t/CN={name}\n")
        } else {
            format!("V\t301231000000Z\t\t{serial}\tunknown\t/CN={name}\n")
        };
        std::fs::write(d.join("index.txt"), line).unwrap();
        run(tool("openssl")
            .current_dir(d)
            .args([
                "ocsp",
                "-index",
                "index.txt",
                "-rsigner",
                "ca.pem",
                "-rkey",
                "ca.key",
                "-CA",
                "ca.pem",
                "-issuer",
                "ca.pem",
                "-cert",
                &format!("{name}.leaf"),
                "-ndays",
                "1",
                "-respout",
            ])
            .arg(out));
    }
}

/// `openssl ocsp` gives nextUpdate in whole days or minutes from now (at
/// least a minute). To test expiry within seconds, the response's
/// nextUpdate (`[0] { GeneralizedTime }`) is rewritten in place: the
/// signature no longer covers it, which tlsfront does not check (clients
/// do) and s_client does not either when it prints the staple.
fn set_next_update(file: &Path, at: SystemTime) {
    let mut der = std::fs::read(file).unwrap();
    let i = der
        .windows(4)
        .position(|w| w == [0xa0, 0x11, 0x18, 0x0f])
        .expect("a nextUpdate in the response");
    der[i + 4..i + 19].copy_from_slice(generalized_time(at).as_bytes());
    std::fs::write(file, der).unwrap();
}

/// `YYYYMMDDHHMMSSZ` for `t` (UTC).
fn generalized_time(t: SystemTime) -> String {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// What `openssl s_client -status` says about the staple for `name` over
/// `version` (`-tls1_3` / `-tls1_2`).
fn staple(port: u16, name: &str, version: &str) -> String {
    // The staple is printed with the handshake, before s_client reads its
    // stdin: no step needed.
    let (out, err, _) = s_client(
        port,
        &["-status", "-servername", name, version],
        &[],
        Duration::from_secs(20),
    );
    assert!(
        out.contains("BEGIN CERTIFICATE") || out.contains("Server certificate"),
        "{out}{err}"
    );
    out
}

fn stapled_good(out: &str) -> bool {
    out.contains("OCSP Response Status: successful") && out.contains("Cert Status: good")
}

fn not_stapled(out: &str) -> bool {
    out.contains("OCSP response: no response sent")
}

/// A site for `name` (files relative to the config, in the CA's directory).
fn site(name: &str, root: &Path) -> String {
    format!(
        "[[site]]\nnames = [{name:?}]\nroot = {:?}\ncert = \"{name}.pem\"\nkey = \"{name}.key\"\n\
         ocsp = \"{name}.der\"\n",
        root.display().to_string(),
    )
}

#[test]
fn good_staples_bad_ones_do_not_and_reloads_and_expiry_take_effect() {
    let pki = Pki::new();
    let root = pki.path("www");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("id.txt"), "ocsp\n").unwrap();
    // good, revoked, expired, short-lived (expires while serving), and
    // wrong (a response for another certificate).
    for (name, serial) in [
        ("g.test", "1001"),
        ("r.test", "1002"),
        ("e.test", "1003"),
        ("s.test", "1004"),
        ("w.test", "1005"),
        ("other.test", "1006"),
        ("k.test", "1007"),
    ] {
        pki.leaf(name, serial);
    }
    // k.test: a response from another CA of the same name for the same
    // serial (only the issuer key hash tells).
    let other_ca = Pki::new();
    other_ca.leaf("k.test", "1007");
    other_ca.respond("k.test", "1007", false, &pki.path("k.test.der"));
    pki.respond("g.test", "1001", false, &pki.path("g.test.der"));
    pki.respond("r.test", "1002", true, &pki.path("r.test.der"));
    pki.respond("e.test", "1003", false, &pki.path("e.test.der"));
    set_next_update(
        &pki.path("e.test.der"),
        SystemTime::now() - Duration::from_secs(3600),
    );
    pki.respond("s.test", "1004", false, &pki.path("s.test.der"));
    let s_expiry = SystemTime::now() + Duration::from_secs(8);
    set_next_update(&pki.path("s.test.der"), s_expiry);
    pki.respond("other.test", "1006", false, &pki.path("w.test.der"));

    let config = pki.path("ocsp.toml");
    let text: String = ["g.test", "r.test", "e.test", "s.test", "w.test", "k.test"]
        .iter()
        .map(|n| site(n, &root))
        .collect();
    std::fs::write(&config, &text).unwrap();

    // config check reports each response.
    let out = std::process::Command::new(common::BIN)
        .args(["config", "check"])
        .arg(&config)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{report}");
    for want in [
        "g.test.der: good, valid until",
        "s.test.der: good, valid until",
        "warning: OCSP response",
        "r.test.der: the certificate is REVOKED",
        "e.test.der expired on",
        "w.test.der is for another certificate: serial 1006, the certificate's is 1005",
        "k.test.der is for another certificate: same serial and issuer name, but another \
         issuer key",
    ] {
        assert!(report.contains(want), "{want:?} not in:\n{report}");
    }

    let server = Server::run(&config, &[]);
    let port = server.port;
    let startup = server.startup.join("\n");
    for want in ["OCSP response", "g.test.der for", "stapled"] {
        assert!(startup.contains(want), "{want:?} not in:\n{startup}");
    }
    // What is not stapled is a warning of the event log (stderr).
    let log = server.wait_for_log_count("served without a staple", 4);
    for want in [
        "r.test.der: the certificate is REVOKED",
        "e.test.der expired on",
        "w.test.der is for another certificate",
        "served without a staple",
    ] {
        assert!(
            log.lines()
                .any(|l| l.contains(" WARN ") && l.contains(want)),
            "{want:?} not in:\n{log}"
        );
    }

    // The good one, over TLS 1.3 (certificate entry) and 1.2
    // (status_request).
    for v in ["-tls1_3", "-tls1_2"] {
        let out = staple(port, "g.test", v);
        assert!(stapled_good(&out), "g.test {v}: {out}");
        for bad in ["r.test", "e.test", "w.test", "k.test"] {
            let out = staple(port, bad, v);
            assert!(not_stapled(&out), "{bad} {v}: {out}");
        }
    }

    // The short-lived one is stapled until its nextUpdate, then dropped
    // with no reload.
    let out = staple(port, "s.test", "-tls1_3");
    assert!(
        SystemTime::now() >= s_expiry || stapled_good(&out),
        "s.test before expiry: {out}"
    );
    let out = server.wait_for_output("OCSP staples are due", 1);
    server.wait_for_log("s.test.der expired on");
    assert!(
        SystemTime::now() >= s_expiry - Duration::from_secs(1),
        "rebuilt before nextUpdate: {out}"
    );
    for v in ["-tls1_3", "-tls1_2"] {
        let out = staple(port, "s.test", v);
        assert!(not_stapled(&out), "s.test after expiry {v}: {out}");
        let out = staple(port, "g.test", v);
        assert!(stapled_good(&out), "g.test after the rebuild {v}: {out}");
    }

    // A reload reads the files again: r.test now has a good response, and
    // g.test a newer one.
    let before = staple(port, "g.test", "-tls1_3");
    // Not a wait: OCSP times have whole seconds, and the new response's
    // thisUpdate must differ from the old one's.
    std::thread::sleep(Duration::from_millis(1100));
    pki.respond("r.test", "1002", false, &pki.path("r.test.der"));
    pki.respond("g.test", "1001", false, &pki.path("g.test.der"));
    server.reload();
    let out = server.wait_for_output("reloaded ", 1);
    assert!(out.contains("reloaded "), "{out}{}", server.log());
    for v in ["-tls1_3", "-tls1_2"] {
        let out = staple(port, "r.test", v);
        assert!(stapled_good(&out), "r.test after reload {v}: {out}");
    }
    let after = staple(port, "g.test", "-tls1_3");
    let this_update = |s: &str| {
        s.lines()
            .find(|l| l.contains("This Update:"))
            .map(str::to_string)
            .unwrap_or_default()
    };
    assert!(!this_update(&after).is_empty(), "{after}");
    assert_ne!(
        this_update(&before),
        this_update(&after),
        "the old response is still stapled"
    );
}
