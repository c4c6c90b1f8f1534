//! What the operator reads, through the binary: `config check` and `run`
//! decide alike on the same configuration (one refuses exactly when the
//! other does, with the same words), and the messages for common mistakes
//! name the file, the line, the setting and the fix.

mod common;

use common::{config_check, tool, Ca, Server, BIN};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A string as a TOML basic string.
fn quoted(p: &Path) -> String {
    format!("{:?}", p.display().to_string())
}

/// `tlsfront run --config FILE`, which must refuse to start: all it
/// printed. Waits for the exit itself; a server that starts instead is
/// killed once the bound passes and the test fails.
fn refused_run(config: &Path) -> String {
    let data = tempfile::tempdir().unwrap();
    let child = Command::new(BIN)
        .args(["run", "--config"])
        .arg(config)
        .env("XDG_DATA_HOME", data.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let Ok(out) = rx.recv_timeout(Duration::from_secs(60)) else {
        if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
        }
        panic!("tlsfront run started with {}", config.display());
    };
    let out = out.unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    text
}

/// A config file in `dir` with `body` after a listener on a fresh port.
fn config(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("t.toml");
    std::fs::write(&p, format!("listen = [\"127.0.0.1:0\"]\n{body}")).unwrap();
    p
}

/// A site with a root and a certificate for `a.test`, with `extra` keys.
fn site(dir: &Path, ca: &Ca, extra: &str) -> String {
    let (c, k) = ca.issue("a", &["a.test".to_string()], false);
    format!(
        "[[site]]\nnames = [\"a.test\"]\nroot = {}\ncert = {}\nkey = {}\n{extra}",
        quoted(dir),
        quoted(&c),
        quoted(&k)
    )
}

#[test]
fn check_and_run_refuse_an_empty_ticket_key_file_alike() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let key = dir.path().join("ticket.key");
    std::fs::write(&key, b"").unwrap();
    let body = format!(
        "ticket_keys = [{}]\n{}",
        quoted(&key),
        site(dir.path(), &ca, "")
    );
    let cfg = config(dir.path(), &body);
    let want = format!(
        "setting ticket_keys: session ticket key file {} has 0 bytes",
        key.display()
    );
    let (ok, text) = config_check(&cfg);
    assert!(!ok && text.contains(&want), "{text}");
    let text = refused_run(&cfg);
    assert!(text.contains(&want), "{text}");
}

#[test]
fn check_and_run_refuse_an_access_log_in_a_missing_directory_alike() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let log = dir.path().join("no-such-dir/access.log");
    let body = format!(
        "access_log = {}\n{}",
        quoted(&log),
        site(dir.path(), &ca, "")
    );
    let cfg = config(dir.path(), &body);
    let (ok, text) = config_check(&cfg);
    assert!(
        !ok && text.contains("setting access_log: cannot open the access log")
            && text.contains("no-such-dir"),
        "{text}"
    );
    let text = refused_run(&cfg);
    assert!(
        text.contains("setting access_log: cannot open the access log"),
        "{text}"
    );
    // Once the directory exists, both accept it, and check makes no file.
    std::fs::create_dir(dir.path().join("no-such-dir")).unwrap();
    let (ok, text) = config_check(&cfg);
    assert!(ok, "{text}");
    assert!(!log.exists());
}

#[test]
fn an_admin_address_that_is_a_listen_address_is_refused_by_both() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let p = dir.path().join("t.toml");
    std::fs::write(
        &p,
        format!(
            "listen = [\"127.0.0.1:18443\"]\nadmin = \"127.0.0.1:18443\"\n{}",
            site(dir.path(), &ca, "")
        ),
    )
    .unwrap();
    let want = format!(
        "config file {}, line 2, setting admin: admin address 127.0.0.1:18443 is also a listen \
         address",
        p.display()
    );
    let (ok, text) = config_check(&p);
    assert!(!ok && text.contains(&want), "{text}");
    let text = refused_run(&p);
    assert!(text.contains(&want), "{text}");
}

#[test]
fn a_certificate_that_does_not_cover_a_name_is_a_warning_in_both() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (c, k) = ca.issue("a", &["a.test".to_string()], false);
    let cfg = config(
        dir.path(),
        &format!(
            "[[site]]\nnames = [\"a.test\", \"b.test\"]\nroot = {}\ncert = {}\nkey = {}\n",
            quoted(dir.path()),
            quoted(&c),
            quoted(&k)
        ),
    );
    let want = format!(
        "certificate {} does not cover the name b.test (it is for a.test)",
        c.display()
    );
    let (ok, text) = config_check(&cfg);
    assert!(ok, "{text}");
    assert!(text.contains(&format!("warning: {want}")), "{text}");
    let server = Server::run(&cfg, &[]);
    // A warning of the event log (stderr, with its level and time), not a
    // line of the start-up report.
    let log = server.wait_for_log(&want);
    let line = log.lines().find(|l| l.contains(&want)).unwrap();
    assert!(line.contains(" WARN "), "{log}");
    assert!(
        !server.startup.iter().any(|l| l.contains(&want)),
        "{:?}",
        server.startup
    );
    server.stop();
}

#[test]
fn ktls_require_is_decided_alike_and_a_refusal_does_not_say_it_serves() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let cfg = config(
        dir.path(),
        &format!("ktls = \"require\"\n{}", site(dir.path(), &ca, "")),
    );
    let (ok, text) = config_check(&cfg);
    if ok {
        // This kernel offloads everything: run starts as well.
        let server = Server::run(&cfg, &[]);
        server.stop();
    } else {
        assert!(
            text.contains("ktls = \"require\" (--ktls require): kTLS: ")
                && text.contains("refusing to start"),
            "{text}"
        );
        assert!(!text.contains("serving with user-space TLS"), "{text}");
        let run = refused_run(&cfg);
        assert!(run.contains("refusing to start"), "{run}");
        assert!(!run.contains("serving with user-space TLS"), "{run}");
    }
}

#[test]
fn key_errors_name_the_key_setting_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (c, _) = ca.issue("a", &["a.test".to_string()], false);
    let (_, other) = ca.issue("b", &["a.test".to_string()], false);
    let p = config(
        dir.path(),
        &format!(
            "root = {}\nnames = [\"a.test\"]\ncert = {}\nkey = {}\n",
            quoted(dir.path()),
            quoted(&c),
            quoted(&other)
        ),
    );
    let want = format!(
        "config file {}, line 5, setting key: key {} does not belong to certificate {}",
        p.display(),
        other.display(),
        c.display()
    );
    let (ok, text) = config_check(&p);
    assert!(!ok && text.contains(&want), "{text}");
    let text = refused_run(&p);
    assert!(text.contains(&want), "{text}");

    // An encrypted key (PKCS#8, as `openssl pkey -aes256` writes it).
    let (_, k) = ca.issue("c", &["a.test".to_string()], false);
    let enc = dir.path().join("enc.key");
    let status = tool("openssl")
        .args(["pkey", "-aes256", "-passout", "pass:secret", "-in"])
        .arg(&k)
        .arg("-out")
        .arg(&enc)
        .status()
        .unwrap();
    assert!(status.success());
    let p = config(
        dir.path(),
        &format!(
            "[[site]]\nnames = [\"a.test\"]\nroot = {}\ncert = {}\nkey = {}\n",
            quoted(dir.path()),
            quoted(&c),
            quoted(&enc)
        ),
    );
    let want = format!(
        "line 6 ([[site]] #1), setting key: private key file {}: the key is encrypted: \
         tlsfront needs it unencrypted (openssl pkey -in {}",
        enc.display(),
        enc.display()
    );
    let (ok, text) = config_check(&p);
    assert!(!ok && text.contains(&want), "{text}");
    assert!(
        !text.contains("no items found") && !text.contains("base64"),
        "{text}"
    );
    let text = refused_run(&p);
    assert!(text.contains(&want), "{text}");
}

#[test]
fn a_chain_no_client_accepts_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (c, k) = ca.issue("a", &["a.test".to_string()], false);
    let big = dir.path().join("big.pem");
    std::fs::write(&big, std::fs::read_to_string(&c).unwrap().repeat(2000)).unwrap();
    let p = config(
        dir.path(),
        &format!(
            "[[site]]\nnames = [\"a.test\"]\nroot = {}\ncert = {}\nkey = {}\n",
            quoted(dir.path()),
            quoted(&big),
            quoted(&k)
        ),
    );
    let want = format!(
        "setting cert: certificate file {}: the chain is ",
        big.display()
    );
    let (ok, text) = config_check(&p);
    assert!(!ok && text.contains(&want), "{text}");
    let text = refused_run(&p);
    assert!(text.contains(&want), "{text}");
}

#[test]
fn a_certificate_without_names_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new();
    let (c, k) = ca.issue("none", &[], false);
    let p = config(
        dir.path(),
        &format!(
            "[[site]]\nnames = [\"a.test\"]\nroot = {}\ncert = {}\nkey = {}\n",
            quoted(dir.path()),
            quoted(&c),
            quoted(&k)
        ),
    );
    let (_, text) = config_check(&p);
    assert!(
        text.contains("in chain, for (no DNS names); valid"),
        "{text}"
    );
    assert!(text.contains("(it is for (no DNS names))"), "{text}");
    assert!(!text.contains("for ;"), "{text}");
}

#[test]
fn file_mistakes_name_the_line_the_setting_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let root = quoted(dir.path());
    for (body, want) in [
        (
            format!("root = {root}\nworkers = \"four\"\n"),
            "line 3: setting workers: expected a whole number",
        ),
        (
            format!("root = {root}\n[limits]\nheaders = 0\n"),
            "line 4, setting [limits] headers: 0 is out of range",
        ),
        (
            format!("[site]\nroot = {root}\n"),
            "line 2: [site]: use [[site]] (an array of tables) for each site",
        ),
    ] {
        let p = config(dir.path(), &body);
        let (ok, text) = config_check(&p);
        assert!(
            !ok && text.contains(&format!("config file {}, {want}", p.display())),
            "{body}\n=> {text}"
        );
        assert!(
            !text.contains("usize") && !text.contains("duplicate key\n"),
            "{text}"
        );
    }
    let p = dir.path().join("empty.toml");
    std::fs::write(&p, format!("root = {root}\nlisten = []\n")).unwrap();
    let (ok, text) = config_check(&p);
    assert!(
        !ok && text.contains("line 2: setting listen: an empty list listens nowhere"),
        "{text}"
    );
}

#[test]
fn tlsfront_check_blames_the_missing_module_not_the_kernel_version() {
    let out = Command::new(BIN).arg("check").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if text.contains("tls ULP: no") {
        assert!(text.contains("tls module is not loaded"), "{text}");
        assert!(!text.contains("6.14"), "{text}");
    } else {
        assert!(text.contains("tls ULP: yes"), "{text}");
    }
}

#[test]
fn check_and_run_decide_the_acme_state_directory_alike() {
    // The privileged parent (root with `user`) owns this decision.
    if !rustix::process::geteuid().is_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let acme = state.join("acme");
    std::fs::create_dir_all(&acme).unwrap();
    let cfg = config(
        dir.path(),
        &format!(
            "user = \"nobody\"\nstate_dir = {}\n[[site]]\nnames = [\"a.test\"]\nroot = {}\n\
             acme = true\n",
            quoted(&state),
            quoted(dir.path())
        ),
    );
    // Root's directory: the server process (nobody) could not write there.
    let want = format!(
        "{} belongs to uid 0, but the server process runs as nobody",
        acme.display()
    );
    let (ok, text) = config_check(&cfg);
    assert!(
        !ok && text.contains(&want) && text.contains("chown -R"),
        "{text}"
    );
    let text = refused_run(&cfg);
    assert!(text.contains(&want), "{text}");
    // Missing: run makes it for nobody; check says so and makes nothing.
    std::fs::remove_dir(&acme).unwrap();
    let (ok, text) = config_check(&cfg);
    assert!(ok, "{text}");
    assert!(
        text.contains(&format!(
            "ACME state directory {}: missing, made at start for nobody",
            acme.display()
        )),
        "{text}"
    );
    assert!(!acme.exists());
}
