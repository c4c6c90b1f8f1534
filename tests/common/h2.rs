//! The HTTP/2 conformance suite (tests/h2/conformance.py) run against a
//! server, its verdicts checked against the cases that server is known not
//! to pass: the reference (nginx) and tlsfront use the same runner.

use super::{tool, wait_until};
use std::path::Path;
use std::process::Child;

/// How long the whole suite may take before the test gives up on it (each
/// case bounds itself, see [`case_bound`], and 8 run at once: this is a
/// net only).
const SUITE_BOUND: std::time::Duration = std::time::Duration::from_secs(600);

/// Each case's own bound, in seconds (the script's `--timeout`): its 10 s
/// default, but 60 s in the QEMU guest, whose emulated CPU, running 8 cases
/// at once, takes more than 10 s for a 1 MiB body sent against a window
/// the client reopens frame by frame.
fn case_bound() -> &'static str {
    if std::env::var_os("TLSFRONT_IN_GUEST").is_some() {
        "60"
    } else {
        "10"
    }
}

/// A child process killed on drop (the suite, should the test fail early).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A file the body cases fetch: its path on the server, size and sha256.
pub struct Body<'a> {
    pub path: &'a str,
    pub size: usize,
    pub sha256: &'a str,
}

/// Run the suite against `port` and assert that every case passes but
/// those in `differs` (id, why), each of which must still not pass (an
/// entry that starts passing is stale).
pub fn conformance(
    port: u16,
    authority: &str,
    ca: &Path,
    body: Body<'_>,
    differs: &[(&str, &str)],
) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/h2/conformance.py");
    let out_dir = tempfile::tempdir().unwrap();
    let (out_path, err_path) = (out_dir.path().join("out"), out_dir.path().join("err"));
    let mut suite = Killed(
        tool("python3")
            .arg(script)
            .args(["--connect", &format!("127.0.0.1:{port}")])
            .args(["--authority", authority])
            .arg("--cafile")
            .arg(ca)
            .args(["--path", body.path, "--size", &body.size.to_string()])
            .args(["--sha256", body.sha256])
            .args(["--timeout", case_bound()])
            .stdout(std::fs::File::create(&out_path).unwrap())
            .stderr(std::fs::File::create(&err_path).unwrap())
            .spawn()
            .expect("run python3 tests/h2/conformance.py"),
    );
    // Every case bounds itself (--timeout): this bound is a net only.
    let status = wait_until(SUITE_BOUND, "the conformance suite to end", || {
        suite.0.try_wait().unwrap().ok_or("running".to_string())
    });
    let stdout = std::fs::read_to_string(&out_path).unwrap();
    let stderr = std::fs::read_to_string(&err_path).unwrap();
    let report = format!("{stdout}\n{stderr}");

    let mut verdicts = std::collections::HashMap::new();
    for line in stdout.lines() {
        let mut words = line.split_whitespace();
        if let (Some(verdict @ ("ok" | "FAIL" | "skip")), Some(id)) = (words.next(), words.next()) {
            assert!(
                verdicts.insert(id.to_string(), (verdict, line)).is_none(),
                "case {id} reported twice:\n{report}"
            );
        }
    }
    assert!(
        verdicts.len() > 100,
        "the suite reported {} cases (exit {status:?}):\n{report}",
        verdicts.len()
    );

    let mut problems = Vec::new();
    for (id, reason) in differs {
        match verdicts.get(*id) {
            None => problems.push(format!(
                "the known differences name {id}, which the suite does not have"
            )),
            Some(("ok", _)) => problems.push(format!(
                "{id} now passes: drop it from the known differences ({reason})"
            )),
            Some(_) => {}
        }
    }
    for (id, (verdict, line)) in &verdicts {
        if *verdict != "ok" && !differs.iter().any(|(d, _)| d == id) {
            problems.push(format!("unexpected: {line}"));
        }
    }
    problems.sort();
    assert!(
        problems.is_empty(),
        "{}\n\nfull report:\n{report}",
        problems.join("\n")
    );
    // Exactly the listed cases fail or skip: the script's exit says so too.
    let fails = verdicts.values().any(|(v, _)| *v == "FAIL");
    assert_eq!(
        status.success(),
        !fails,
        "exit status {status:?}:\n{report}"
    );
}
