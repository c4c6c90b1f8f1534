//! HTTP/1.1 conformance of `tlsfront serve`, end to end: exact bytes in
//! through a real TLS client (`openssl s_client`), exact responses out.
//! Connection handling after each kind of error, HEAD never carrying a
//! body, `Expect`, request-target forms, Host grammar, versions, ranges on
//! an empty file, redirects. On a kTLS kernel (`TLSFRONT_EXPECT_KTLS=1` in
//! the guest) every connection must also have gone through the kernel.

mod common;

use common::*;

/// A last request that ends the connection, so a transcript is complete
/// when the server closes.
const LAST: &str = "GET /hello.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

/// `request` then [`LAST`] on one connection: the responses, and whether
/// the server closed the connection.
fn then_last(server: &Server, request: &str, head_requests: &[bool]) -> (Vec<Response>, bool) {
    let (out, closed) = exchange(server.port, format!("{request}{LAST}").as_bytes());
    (split_responses(&out, head_requests), closed)
}

/// The one response to `request` (which must end the connection).
fn only_response(server: &Server, request: &str, head: bool) -> Response {
    let (mut r, closed) = then_last(server, request, &[head]);
    assert!(closed, "{request:?}: connection left open: {r:?}");
    assert_eq!(r.len(), 1, "{request:?} was not the last answered: {r:?}");
    r.remove(0)
}

/// Assert the answer to `request` + [`LAST`]: `status` (and its body, if
/// any), then the hello file, the connection kept in between.
fn kept_open(server: &Server, request: &str, head: bool, status: u16) -> Response {
    let (mut r, closed) = then_last(server, request, &[head, false]);
    assert!(closed, "{request:?}: {r:?}");
    assert_eq!(r.len(), 2, "{request:?}: {r:?}");
    assert_eq!(r[0].status, status, "{request:?}: {r:?}");
    assert!(!r[0].closes(), "{request:?}: {r:?}");
    assert_eq!((r[1].status, r[1].body.as_str()), (200, "hello world\n"));
    r.remove(0)
}

/// Requests that cannot be trusted: the status, `Connection: close`, and
/// a close (the pipelined request after it is never answered); sent as
/// HEAD, no body either.
#[test]
fn errors_that_end_the_connection_end_it() {
    let server = Server::start(&[]);
    let cases = [
        ("GET /../x HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        ("GET /%2e%2e/x HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: a..b\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\nHost: x:8a\r\n\r\n", 400),
        ("GET / HTTP/1.1\r\n\r\n", 400),
        ("GET https://u:p@x/ HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        ("GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505),
        ("GET /a b c HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        ("GET / http/1.1\r\nHost: x\r\n\r\n", 400),
        ("GET  / HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        ("GET / HTTP/1.1 \r\nHost: x\r\n\r\n", 400),
        ("GET / HTTP/1.10\r\nHost: x\r\n\r\n", 400),
    ];
    let mut conns = 0;
    for (request, status) in cases {
        for method in ["GET", "HEAD"] {
            let request = request.replacen("GET", method, 1);
            let r = only_response(&server, &request, method == "HEAD");
            conns += 1;
            assert_eq!(r.status, status, "{request:?}: {r:?}");
            assert!(r.closes(), "{request:?}: {r:?}");
            if method == "GET" {
                assert!(r.body.contains(&status.to_string()), "{r:?}");
            }
        }
    }
    server.stop_and_check_path(conns);
}

/// A server error (500: here the server has no descriptor left to open a
/// file it has not kept open) ends the connection too.
#[test]
fn a_server_error_ends_the_connection() {
    let server = Server::start(&["--workers", "1"]);
    // Answered once: the worker and its descriptors are all set up.
    kept_open(
        &server,
        "GET /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n",
        false,
        200,
    );
    // The lowest free descriptor number: a connection's socket takes it,
    // and a limit just above it leaves none for the file.
    let fd_dir = format!("/proc/{}/fd", server.pid());
    let open: std::collections::HashSet<u64> = std::fs::read_dir(&fd_dir)
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let free = (0..).find(|n| !open.contains(n)).unwrap();
    let limit = Some(free + 1);
    let pid = rustix::process::Pid::from_raw(server.pid() as i32).unwrap();
    let new = rustix::process::Rlimit {
        current: limit,
        maximum: limit,
    };
    rustix::process::prlimit(Some(pid), rustix::process::Resource::Nofile, new)
        .expect("prlimit on the server");
    for method in ["GET", "HEAD"] {
        let request = format!("{method} /noindex/a.txt HTTP/1.1\r\nHost: x\r\n\r\n");
        let r = only_response(&server, &request, method == "HEAD");
        assert_eq!(r.status, 500, "{r:?}");
        assert!(r.closes(), "{r:?}");
    }
    let log = server.wait_for_log("cannot open \"/noindex/a.txt\"");
    assert!(log.contains("cannot open \"/noindex/a.txt\""), "{log}");
    server.stop_and_check_path(3);
}

/// Errors about the resource only: the connection carries on; a HEAD gets
/// the head alone.
#[test]
fn errors_that_keep_the_connection_keep_it() {
    let server = Server::start(&[]);
    let cases = [
        ("GET /missing HTTP/1.1\r\nHost: x\r\n\r\n", 404),
        ("GET /noindex/ HTTP/1.1\r\nHost: x\r\n\r\n", 403),
        ("GET /sub HTTP/1.1\r\nHost: x\r\n\r\n", 301),
        (
            "GET /hello.txt HTTP/1.1\r\nHost: x\r\nRange: bytes=99-\r\n\r\n",
            416,
        ),
        (
            "GET /hello.txt HTTP/1.1\r\nHost: x\r\nIf-Match: \"no\"\r\n\r\n",
            412,
        ),
        (
            "GET /hello.txt HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\n\r\n",
            417,
        ),
        ("DELETE /hello.txt HTTP/1.1\r\nHost: x\r\n\r\n", 405),
    ];
    let mut conns = 0;
    for (request, status) in cases {
        let r = kept_open(&server, request, false, status);
        assert!(r.body.contains(&status.to_string()), "{r:?}");
        let head = request.replacen("GET", "HEAD", 1);
        if head != request {
            let r = kept_open(&server, &head, true, status);
            assert!(r.body.is_empty());
            conns += 1;
        }
        conns += 1;
    }
    server.stop_and_check_path(conns);
}

/// A client that waits for `100 Continue` gets it when its body will be
/// read, and an answer at once (then a close, the body unread) when the
/// request is refused anyway.
#[test]
fn expect_100_continue() {
    let server = Server::start(&[]);
    // A body that will be read: 100 first, then the body, then the answer.
    let (out, closed) = exchange_steps(
        server.port,
        &[
            Step::Send(
                b"GET /hello.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
            ),
            Step::WaitFor("100 Continue"),
            Step::Send(format!("abcde{LAST}").as_bytes()),
        ],
    );
    let r = split_responses(&out, &[false, false]);
    let statuses: Vec<u16> = r.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [100, 200, 200], "{out}");
    assert!(
        closed && r[1].body == "hello world\n" && !r[1].closes(),
        "{out}"
    );

    // Refused whatever the body: answered without waiting for it, no 100,
    // and closed (the body was never read). The body is never sent here,
    // so a server waiting for it would never answer.
    let refused = [
        (
            "POST /hello.txt",
            "Content-Length: 5\r\nExpect: 100-continue",
            405,
        ),
        (
            "PUT /x",
            "Transfer-Encoding: chunked\r\nExpect: 100-continue",
            405,
        ),
        (
            "GET /hello.txt",
            "Content-Length: 5\r\nExpect: 100-continue, x",
            417,
        ),
        ("GET /hello.txt", "Content-Length: 5\r\nExpect: teapot", 417),
        (
            "GET /hello.txt",
            "Content-Length: 9000000\r\nExpect: 100-continue",
            413,
        ),
        ("GET /hello.txt", "Content-Length: 9000000", 413),
    ];
    for (line, fields, status) in refused {
        let request = format!("{line} HTTP/1.1\r\nHost: x\r\n{fields}\r\n\r\n");
        let (out, closed) = exchange(server.port, request.as_bytes());
        let r = split_responses(&out, &[false]);
        assert!(closed, "{request:?}: {out}");
        assert_eq!(r.len(), 1, "{request:?}: {out}");
        assert_eq!(r[0].status, status, "{request:?}: {out}");
        assert!(r[0].closes(), "{request:?}: {out}");
    }
    // HTTP/1.0 ignores Expect.
    let (out, closed) = exchange(
        server.port,
        b"GET /hello.txt HTTP/1.0\r\nExpect: teapot\r\n\r\n",
    );
    let r = split_responses(&out, &[false]);
    assert!(closed && r.len() == 1 && r[0].status == 200, "{out}");
    // The body sent with the head, without waiting: no 100 (it would be an
    // answer to nothing), just the response.
    let (out, closed) = exchange(
        server.port,
        b"GET /hello.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\nConnection: close\r\n\r\nabcde",
    );
    let r = split_responses(&out, &[false]);
    assert!(closed && r.len() == 1 && r[0].status == 200, "{out}");
    server.stop_and_check_path(3 + refused.len() as u64);
}

#[test]
fn absolute_form_targets() {
    let server = Server::start(&[]);
    let index = "<h1>tlsfront test root</h1>\n";
    let cases = [
        // The query may hold a `/`: the path is still `/`.
        ("https://x?a=/hello.txt", 200, index),
        ("HTTPS://X/hello.txt", 200, "hello world\n"),
        ("Http://x:1/hello.txt#/frag", 200, "hello world\n"),
        ("https://x", 200, index),
        ("https://[::1]:8443/hello.txt", 200, "hello world\n"),
    ];
    for (target, status, body) in cases {
        let request = format!("GET {target} HTTP/1.1\r\nHost: other\r\n\r\n");
        let r = kept_open(&server, &request, false, status);
        assert_eq!(r.body, body, "{target}");
    }
    let r = kept_open(
        &server,
        "GET https://x/sub?q=/a HTTP/1.1\r\nHost: x\r\n\r\n",
        false,
        301,
    );
    assert_eq!(r.header("Location"), Some("/sub/?q=/a"), "{r:?}");
    let mut conns = cases.len() as u64 + 1;
    for target in [
        "https://user@x/hello.txt",
        "ftp://x/hello.txt",
        "https:///hello.txt",
    ] {
        let r = only_response(
            &server,
            &format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n"),
            false,
        );
        assert_eq!(r.status, 400, "{target}: {r:?}");
        conns += 1;
    }
    server.stop_and_check_path(conns);
}

#[test]
fn valid_hosts_are_served() {
    let server = Server::start(&[]);
    let hosts = [
        "Example.COM",
        "example.com.:8443",
        "127.0.0.1:443",
        "[::1]",
        "[2001:db8::1]:8443",
        "xn--bcher-kva.example",
        "a_b~c%41",
        "",
    ];
    for host in hosts {
        let r = kept_open(
            &server,
            &format!("GET /hello.txt HTTP/1.1\r\nHost: {host}\r\n\r\n"),
            false,
            200,
        );
        assert_eq!(r.body, "hello world\n", "{host}");
    }
    server.stop_and_check_path(hosts.len() as u64);
}

#[test]
fn versions() {
    let server = Server::start(&[]);
    // HTTP/1.0: answered and closed.
    let r = only_response(&server, "GET /hello.txt HTTP/1.0\r\n\r\n", false);
    assert_eq!((r.status, r.body.as_str()), (200, "hello world\n"));
    assert!(r.closes() && r.head.starts_with("HTTP/1.1 200 OK\r\n"));
    // 1.1 and any later 1.x (served as 1.1): kept open.
    for version in ["1.1", "1.2", "1.9"] {
        let request = format!("GET /hello.txt HTTP/{version}\r\nHost: x\r\n\r\n");
        let r = kept_open(&server, &request, false, 200);
        assert_eq!(r.body, "hello world\n");
    }
    // A 1.2 request's fields still count.
    let r = only_response(
        &server,
        "GET /hello.txt HTTP/1.2\r\nHost: x\r\nConnection: close\r\n\r\n",
        false,
    );
    assert!(r.status == 200 && r.closes(), "{r:?}");
    for (line, status) in [
        ("GET / HTTP/2.0", 505),
        ("GET / HTTP/3.0", 505),
        ("GET / http/1.1", 400),
        ("GET / HTTP/1.1 extra", 400),
        ("GET /  HTTP/1.1", 400),
    ] {
        let r = only_response(&server, &format!("{line}\r\nHost: x\r\n\r\n"), false);
        assert_eq!(r.status, status, "{line}: {r:?}");
    }
    server.stop_and_check_path(10);
}

#[test]
fn ranges_on_an_empty_file() {
    let server = Server::start(&[]);
    // The last N bytes of nothing: all of it, an empty 200.
    let r = kept_open(
        &server,
        "GET /f0.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=-1\r\n\r\n",
        false,
        200,
    );
    assert_eq!(r.header("Content-Length"), Some("0"));
    assert!(r.header("Content-Range").is_none(), "{r:?}");
    // A first byte that does not exist: 416.
    let r = kept_open(
        &server,
        "GET /f0.bin HTTP/1.1\r\nHost: x\r\nRange: bytes=0-\r\n\r\n",
        false,
        416,
    );
    assert_eq!(r.header("Content-Range"), Some("bytes */0"));
    server.stop_and_check_path(2);
}

#[test]
fn directory_redirect_keeps_the_query() {
    let server = Server::start(&[]);
    for (target, location) in [
        ("/sub?a=1&b=/c", "/sub/?a=1&b=/c"),
        ("/sub?", "/sub/?"),
        ("/sub#x?y", "/sub/"),
        ("/sub", "/sub/"),
    ] {
        let request = format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n");
        let r = kept_open(&server, &request, false, 301);
        assert_eq!(r.header("Location"), Some(location), "{target}");
    }
    server.stop_and_check_path(4);
}

/// A body that stops short of its Content-Length: 408 when the request
/// time runs out, then a close; never a close without a response.
#[test]
fn a_body_that_never_arrives_gets_408() {
    let server = Server::start(&["--header-timeout", "1"]);
    let (out, closed) = exchange(
        server.port,
        b"GET /hello.txt HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nab",
    );
    let r = split_responses(&out, &[false]);
    assert!(closed, "{out}");
    assert_eq!(r.len(), 1, "{out}");
    assert_eq!(r[0].status, 408, "{out}");
    assert!(r[0].closes(), "{out}");
    server.stop_and_check_path(1);
}
