//! Build details for `tlsfront --version`: the commit the binary was built
//! from (from `git`, when the source is a git checkout and git is there;
//! a tarball builds without it) and the rustls release with its crypto
//! provider (from Cargo.lock, the versions actually linked). No network,
//! no dependency: only `git` if present and the lock file.

use std::path::Path;
use std::process::Command;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let dir = Path::new(&dir);
    let mut details = Vec::new();
    // Only this package's own checkout: a tarball unpacked inside some
    // other git repository must not report that one's commit.
    let own = git(dir, &["rev-parse", "--show-toplevel"])
        .is_some_and(|top| Path::new(&top).canonicalize().ok() == dir.canonicalize().ok());
    let commit = own
        .then(|| git(dir, &["rev-parse", "--short=12", "HEAD"]))
        .flatten();
    if let Some(commit) = commit {
        details.push(format!("commit {commit}"));
        // Run again when HEAD moves: HEAD itself (a checkout) and the
        // branch it names (a commit), in this worktree's git directory and
        // the shared one.
        for d in [
            git(dir, &["rev-parse", "--absolute-git-dir"]),
            git(
                dir,
                &["rev-parse", "--path-format=absolute", "--git-common-dir"],
            ),
        ]
        .into_iter()
        .flatten()
        {
            let d = Path::new(&d);
            // Only paths that exist: a missing one would make cargo run
            // this script (and rebuild the crate) every time. The branch's
            // loose ref where there is one, else refs/heads as a whole (a
            // packed ref gets a loose one at the next commit).
            let branch = git(dir, &["symbolic-ref", "-q", "HEAD"]).map(|r| d.join(r));
            let refs = match branch {
                Some(b) if b.exists() => b,
                _ => d.join("refs/heads"),
            };
            for p in [d.join("HEAD"), d.join("packed-refs"), refs] {
                if p.exists() {
                    println!("cargo:rerun-if-changed={}", p.display());
                }
            }
        }
    }
    let lock = std::fs::read_to_string(dir.join("Cargo.lock")).unwrap_or_default();
    println!("cargo:rerun-if-changed=Cargo.lock");
    match locked_version(&lock, "rustls") {
        Some(v) => details.push(format!("rustls {v}")),
        None => details.push("rustls".into()),
    }
    details.push("aws-lc-rs".into());
    println!(
        "cargo:rustc-env=TLSFRONT_BUILD_DETAILS={}",
        details.join(", ")
    );
}

/// One line of `git` output in `dir`, if git runs and succeeds there.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    let line = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !line.is_empty()).then_some(line)
}

/// The version Cargo.lock gives package `name` (the first, if several).
fn locked_version(lock: &str, name: &str) -> Option<String> {
    let want = format!("name = \"{name}\"");
    let mut lines = lock.lines();
    while let Some(l) = lines.next() {
        if l.trim() == want {
            let v = lines.next()?.trim();
            return Some(
                v.strip_prefix("version = \"")?
                    .strip_suffix('"')?
                    .to_string(),
            );
        }
    }
    None
}
