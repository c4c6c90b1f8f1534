//! The event log (stderr) as an operator reads it in a file or the journal:
//! warnings a client provokes in a library (rustls's, for an IP address
//! sent as SNI) are held to one line per ten seconds with the count of
//! those left out, and no terminal colour codes are written to a file.

mod common;

use common::{tool, Server};
use std::time::Instant;

#[test]
fn library_warnings_a_client_provokes_are_rate_limited_and_uncoloured() {
    let server = Server::start(&[]);
    let hellos = 20;
    let started = Instant::now();
    for _ in 0..hellos {
        // openssl sends the IP literal as SNI; rustls warns and ignores it.
        let out = tool("openssl")
            .args(["s_client", "-connect"])
            .arg(format!("127.0.0.1:{}", server.port))
            .args(["-servername", "192.0.2.7"])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("BEGIN CERTIFICATE"),
            "the handshake failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let elapsed = started.elapsed();
    // The first line is written as it happens; wait for it, not a time.
    let log = server.wait_for_log("Illegal SNI");
    let lines = log.lines().filter(|l| l.contains("Illegal SNI")).count();
    // One line per ten seconds of the run at most (and the first).
    let allowed = 1 + (elapsed.as_secs() / 10) as usize;
    assert!(
        (1..=allowed).contains(&lines),
        "{lines} lines for {hellos} hellos in {elapsed:?}:\n{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("rustls")),
        "{log}"
    );
    assert!(!log.contains('\u{1b}'), "colour codes in the log: {log:?}");
    server.stop();
}
