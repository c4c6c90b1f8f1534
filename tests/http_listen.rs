//! The plain-HTTP listener (`http_listen`), through curl and raw sockets:
//! a browser-like client that follows the redirect ends on the site's
//! HTTPS page with its path and query; 308 (or 301 for GET and HEAD with
//! `http_redirect = 301`); 421 for names no site lists; the head limits
//! and the `request_header` timeout of the TLS listeners; the answers
//! counted in the metrics; `config check` on bad settings; the listener
//! kept across a reload (restart-only) and handed to the new process of an
//! upgrade. HTTP-01 answered to a real CA is in tests/acme.rs.

mod common;

use common::{config_check, tool, Ca, Server};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A config with a static site for `a.test` and `*.w.test` (root with
/// `dir/page.html`) and a backend site for `b.test`, listening on TLS and
/// plain HTTP (ports the kernel picks) with an admin listener; `extra`
/// goes after the top-level keys. The config's path.
fn config(base: &Path, extra: &str) -> PathBuf {
    let ca = Ca::new();
    let names = ["a.test".to_string(), "*.w.test".to_string()];
    let (cert, key) = ca.issue("a", &names, false);
    let (bcert, bkey) = ca.issue("b", &["b.test".to_string()], false);
    std::fs::copy(&ca.pem, base.join("ca.pem")).unwrap();
    let root = base.join("www");
    std::fs::create_dir_all(root.join("dir")).unwrap();
    std::fs::write(root.join("dir/page.html"), "the page\n").unwrap();
    let text = format!(
        "listen = [\"127.0.0.1:0\"]\nhttp_listen = [\"127.0.0.1:0\"]\n\
         admin = \"127.0.0.1:0\"\nworkers = 2\n{extra}\n\n\
         [[site]]\nnames = [\"a.test\", \"*.w.test\"]\nroot = {root:?}\ncert = {cert:?}\nkey = {key:?}\n\n\
         [[site]]\nnames = [\"b.test\"]\nbackend = \"127.0.0.1:9\"\ncert = {bcert:?}\nkey = {bkey:?}\n",
    );
    let path = base.join("t.toml");
    std::fs::write(&path, text).unwrap();
    // The CA's files live as long as the config: keep its directory.
    std::mem::forget(ca);
    path
}

/// The plain-HTTP port, from the start-up line that names it.
fn http_port(server: &Server) -> u16 {
    server
        .startup
        .iter()
        .find_map(|l| {
            let rest = l.strip_prefix("plain HTTP on http://")?;
            rest.split('/').next()?.rsplit(':').next()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no plain-HTTP line in {:?}", server.startup))
}

/// curl against the plain-HTTP port with `Host: host`; (status, headers).
fn head_of(port: u16, host: &str, args: &[&str], path: &str) -> (u16, String) {
    let out = tool("curl")
        .args(["-sS", "-o", "/dev/null", "-D", "-", "--max-time", "60"])
        .args(["-H", &format!("Host: {host}")])
        .args(args)
        .arg(format!("http://127.0.0.1:{port}{path}"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status from curl: {text:?} {:?}", out.stderr));
    (status, text)
}

fn location(headers: &str) -> Option<&str> {
    headers
        .lines()
        .find_map(|l| l.strip_prefix("Location: "))
        .map(str::trim)
}

/// The count of `tlsfront_plain_http_requests_total{answer=...}`.
fn answered(server: &Server, answer: &str) -> u64 {
    let want = format!("tlsfront_plain_http_requests_total{{answer=\"{answer}\"}} ");
    server
        .metrics()
        .lines()
        .find_map(|l| l.strip_prefix(&want)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {want} in the metrics"))
}

#[test]
fn a_client_following_the_redirect_gets_the_https_page() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::run(&config(dir.path(), ""), &[]);
    let (hp, tp) = (http_port(&server), server.port);
    let out = tool("curl")
        .args(["-sS", "-L", "--max-time", "60", "--cacert"])
        .arg(dir.path().join("ca.pem"))
        .args(["--resolve", &format!("x.w.test:{hp}:127.0.0.1")])
        .args(["--resolve", &format!("x.w.test:{tp}:127.0.0.1")])
        .args(["-w", "\n%{url_effective} %{num_redirects} %{http_version}"])
        .arg(format!("http://x.w.test:{hp}/dir/page.html?q=1&r=%20"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text,
        format!("the page\n\nhttps://x.w.test:{tp}/dir/page.html?q=1&r=%20 1 2"),
    );

    // Every method keeps its method and body across a 308; the backend
    // site's names are redirected too.
    for (host, args) in [
        ("a.test", &["-X", "POST", "--data", "x=1"][..]),
        ("b.test", &[][..]),
        ("A.TEST.", &["-I"][..]),
    ] {
        let (status, headers) = head_of(hp, host, args, "/p?x");
        assert_eq!(status, 308, "{headers}");
        // Lower-case, and without the trailing dot of the absolute form.
        let host = host.to_ascii_lowercase();
        let want = format!("https://{}:{tp}/p?x", host.trim_end_matches('.'));
        assert_eq!(location(&headers), Some(want.as_str()), "{headers}");
        assert!(headers.contains("Connection: close"), "{headers}");
    }

    // Names no site lists.
    for host in ["other.test", "z.x.w.test", "127.0.0.1"] {
        let (status, headers) = head_of(hp, host, &[], "/");
        assert_eq!(status, 421, "{host}: {headers}");
        assert_eq!(location(&headers), None);
    }
    assert_eq!(answered(&server, "misdirected"), 3);
    assert_eq!(answered(&server, "redirect"), 4);

    // The head limits of the TLS listeners: 431 past 16 KiB of header.
    let big = format!("X-Big: {}", "a".repeat(20 * 1024));
    let (status, _) = head_of(hp, "a.test", &["-H", &big], "/");
    assert_eq!(status, 431);
    // A validation for a token no order has.
    let (status, _) = head_of(hp, "a.test", &[], "/.well-known/acme-challenge/nope");
    assert_eq!(status, 404);
    assert_eq!(answered(&server, "bad_request"), 1);
    assert_eq!(answered(&server, "not_found"), 1);
    server.stop();
}

#[test]
fn http_redirect_301_is_for_get_and_head_only() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::run(&config(dir.path(), "http_redirect = 301"), &[]);
    let (hp, tp) = (http_port(&server), server.port);
    let want = format!("https://a.test:{tp}/f");
    for (args, status) in [
        (&[][..], 301),
        (&["-I"][..], 301),
        (&["-X", "POST", "--data", "x"][..], 308),
        (&["-X", "PUT", "--data", "x"][..], 308),
        (&["-X", "DELETE"][..], 308),
    ] {
        let (got, headers) = head_of(hp, "a.test", args, "/f");
        assert_eq!(got, status, "{args:?}: {headers}");
        assert_eq!(location(&headers), Some(want.as_str()), "{headers}");
    }
    // HEAD: the head alone (curl -I would hang on a body it did not ask for).
    let mut c = TcpStream::connect(("127.0.0.1", hp)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    c.write_all(b"HEAD /f HTTP/1.1\r\nHost: a.test\r\n\r\n")
        .unwrap();
    let mut all = Vec::new();
    c.read_to_end(&mut all).unwrap();
    let text = String::from_utf8(all).unwrap();
    assert!(
        text.starts_with("HTTP/1.1 301 Moved Permanently\r\n"),
        "{text}"
    );
    assert!(
        text.ends_with("\r\n\r\n"),
        "a body after a HEAD's head: {text}"
    );
    server.stop();
}

/// A client that sends half a head and waits is closed at the
/// `request_header` timeout without an answer, and the listener goes on
/// answering others meanwhile.
#[test]
fn a_slow_client_is_closed_at_the_request_header_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::run(&config(dir.path(), "[timeouts]\nrequest_header = 1\n"), &[]);
    let hp = http_port(&server);
    let mut slow = TcpStream::connect(("127.0.0.1", hp)).unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: a.t").unwrap();
    let (status, _) = head_of(hp, "a.test", &[], "/");
    assert_eq!(status, 308);
    // The close is the event waited for; the read timeout only bounds it.
    slow.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut got = Vec::new();
    let r = slow.read_to_end(&mut got);
    assert!(r.is_ok(), "not closed: {r:?}");
    assert!(got.is_empty(), "answered a head that never ended: {got:?}");
    server.stop();
}

#[test]
fn config_check_refuses_bad_plain_http_settings() {
    let dir = tempfile::tempdir().unwrap();
    let base = config(dir.path(), "");
    let text = std::fs::read_to_string(&base).unwrap();
    let (ok, said) = config_check(&base);
    assert!(
        ok && said.contains("plain HTTP: 127.0.0.1:0: redirects to https:// with 308"),
        "{said}"
    );
    let http = "http_listen = [\"127.0.0.1:0\"]";
    for (changed, want) in [
        (
            text.replacen(http, "http_listen = [\"nope\"]", 1),
            "setting http_listen",
        ),
        (
            text.replacen(
                "listen = [\"127.0.0.1:0\"]",
                "listen = [\"127.0.0.1:8443\"]",
                1,
            )
            .replacen(http, "http_listen = [\"0.0.0.0:8443\"]", 1),
            "give the plain-HTTP listener a port of its own",
        ),
        (
            text.replacen("workers = 2", "workers = 2\nhttp_redirect = 302", 1),
            "setting http_redirect: 302 is not a redirect status",
        ),
        (
            text.replacen(
                "names = [\"b.test\"]",
                "names = [\"b.test\"]\nacme_challenge = \"http-01\"",
                1,
            ),
            "setting acme_challenge",
        ),
        (text.replacen(http, "", 1), ""),
    ] {
        let path = dir.path().join("c.toml");
        std::fs::write(&path, &changed).unwrap();
        let (ok, said) = config_check(&path);
        if want.is_empty() {
            assert!(ok, "{changed}\n{said}");
        } else {
            assert!(!ok && said.contains(want), "{changed}\n{said}");
        }
    }
    // An acme site asking for HTTP-01 with no plain-HTTP listener.
    let changed = text
        .replacen("http_listen = [\"127.0.0.1:0\"]", "", 1)
        .replacen(
            "[[site]]\nnames = [\"b.test\"]",
            "[[site]]\nnames = [\"c.test\"]\nroot = \".\"\nacme = true\nacme_challenge = \"http-01\"\n\n[[site]]\nnames = [\"b.test\"]",
            1,
        );
    let path = dir.path().join("d.toml");
    std::fs::write(&path, &changed).unwrap();
    let (ok, said) = config_check(&path);
    assert!(
        !ok && said.contains("setting acme_challenge") && said.contains("http_listen is not set"),
        "{said}"
    );
}

/// A reload keeps the listener (it is restart-only, and says so); an
/// upgrade hands it to the new process, which answers on it.
#[test]
fn the_listener_survives_reload_and_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path(), "");
    let server = Server::run(&path, &[]);
    let hp = http_port(&server);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replacen(
            "http_listen = [\"127.0.0.1:0\"]",
            "http_listen = [\"127.0.0.1:1\"]",
            1,
        ),
    )
    .unwrap();
    server.reload();
    let said = server.wait_for_log("http_listen");
    assert!(said.contains("restart"), "{said}");
    assert_eq!(head_of(hp, "a.test", &[], "/").0, 308);
    std::fs::write(&path, text).unwrap();

    server.signal(rustix::process::Signal::USR2);
    let out = server.wait_for_output("upgraded: new process", 1);
    let new = out
        .lines()
        .find_map(|l| l.strip_prefix("upgraded: new process "))
        .and_then(|r| r.split_whitespace().next()?.parse::<i32>().ok())
        .unwrap_or_else(|| panic!("no upgrade announced: {out}"));
    // The old process stopped accepting: whoever answers now is the new one.
    let (status, headers) = head_of(hp, "b.test", &[], "/n");
    assert_eq!(status, 308, "{headers}");
    assert_eq!(
        location(&headers),
        Some(format!("https://b.test:{}/n", server.port).as_str())
    );
    // The new process is not the test's child: stopping it ends the
    // output the old one's reader waits for.
    let new = rustix::process::Pid::from_raw(new).unwrap();
    rustix::process::kill_process(new, rustix::process::Signal::TERM).unwrap();
    server.stop();
}
