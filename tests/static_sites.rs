//! End-to-end tests of what a static site adds to its files, through real
//! curl: precompressed siblings chosen by `Accept-Encoding` (`--compressed`
//! and explicit q-values), response headers per site and per path pattern
//! (errors and redirects included), the SPA `fallback`, `charset` only
//! where configured, `config check` refusing bad headers, and the
//! workers' open-file cache following what a deploy does to the files.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;

/// One response: its head (lower-cased names) and body.
struct Got {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Got {
    fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    fn has(&self, name: &str, value: &str) -> bool {
        self.header(name) == Some(value)
    }
}

/// curl `path` of `host` (None: the default site, by IP) with `args`.
fn get(server: &Server, host: Option<&str>, path: &str, args: &[&str]) -> Got {
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body");
    let body_s = body.display().to_string();
    let mut a: Vec<String> = vec!["-D".into(), "-".into(), "-o".into(), body_s];
    let url = match host {
        Some(h) => {
            a.extend([
                "-k".into(),
                "--resolve".into(),
                format!("{h}:{}:127.0.0.1", server.port),
            ]);
            format!("https://{h}:{}{path}", server.port)
        }
        None => server.url(path),
    };
    a.extend(args.iter().map(|s| s.to_string()));
    a.push(url);
    let argv: Vec<&str> = a.iter().map(String::as_str).collect();
    let out = server.curl(&argv);
    assert!(
        out.status.success(),
        "curl {argv:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let head = String::from_utf8_lossy(&out.stdout).into_owned();
    if args.contains(&"--http2") {
        assert!(head.starts_with("HTTP/2 "), "not HTTP/2: {head}");
    }
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Got {
        status,
        headers,
        body: std::fs::read(&body).unwrap_or_default(),
    }
}

/// Run `program` (from tests/packages.txt) with `args`; it must succeed.
fn run(program: &str, args: &[&str]) {
    let out = tool(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A real .gz and .zst of `file` (as `gzip -k` and `zstd -k` write them).
fn compress(file: &Path) {
    let f = file.display().to_string();
    run(
        "zstd",
        &[
            "-q",
            "-f",
            "-k",
            "--format=gzip",
            "-o",
            &format!("{f}.gz"),
            &f,
        ],
    );
    run(
        "zstd",
        &["-q", "-f", "-k", "-19", "-o", &format!("{f}.zst"), &f],
    );
}

/// The sites of the multi-site tests, each in its own directory:
/// - `localhost` (the default): precompressed br, zstd, gzip; charset;
///   site headers and path rules.
/// - `spa.test`: a fallback, precompressed gzip only, no charset.
///
/// Top-level `headers` reach both.
struct Sites {
    dir: tempfile::TempDir,
    _outside: tempfile::TempDir,
    server: Server,
}

fn sites() -> Sites {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    std::fs::create_dir_all(a.join("assets")).unwrap();
    std::fs::create_dir_all(a.join("dir")).unwrap();
    std::fs::create_dir_all(b.join("static")).unwrap();
    let js = content(20_000, 7)
        .iter()
        .map(|b| b'a' + b % 16)
        .collect::<Vec<u8>>();
    std::fs::write(a.join("assets/app.js"), &js).unwrap();
    compress(&a.join("assets/app.js"));
    // Not real brotli: the bytes are served as they are, never decoded.
    std::fs::write(
        a.join("assets/app.js.br"),
        b"brotli bytes, stored as they are",
    )
    .unwrap();
    std::fs::write(a.join("style.css"), "body { color: red }\n".repeat(50)).unwrap();
    compress(&a.join("style.css"));
    std::fs::write(a.join("index.html"), "<p>a</p>\n").unwrap();
    std::fs::write(a.join("notes.txt"), "plain\n").unwrap();
    std::fs::write(a.join("assets/only.js.gz"), "no original").unwrap();
    std::fs::write(a.join("secret.txt"), "public text\n").unwrap();
    std::fs::write(outside.path().join("leak.gz"), "outside the root").unwrap();
    std::os::unix::fs::symlink(outside.path().join("leak.gz"), a.join("secret.txt.gz")).unwrap();
    std::fs::write(b.join("index.html"), "<div id=app></div>\n").unwrap();
    compress(&b.join("index.html"));
    std::fs::write(b.join("static/app.css"), "p{}\n").unwrap();
    let config = dir.path().join("sites.toml");
    std::fs::write(
        &config,
        r#"workers = 1
headers = { "X-Content-Type-Options" = "nosniff" }

[[site]]
names = ["localhost"]
default = true
root = "a"
precompressed = ["br", "zstd", "gzip"]
charset = "utf-8"
headers = { "Strict-Transport-Security" = "max-age=63072000", "X-Frame-Options" = "DENY" }

[[site.paths]]
match = "/assets/*"
headers = { "Cache-Control" = "public, max-age=31536000, immutable", "X-Frame-Options" = "" }

[[site.paths]]
match = "*.css"
headers = { "Cache-Control" = "max-age=60" }

[[site]]
names = ["spa.test"]
root = "b"
fallback = "/index.html"
precompressed = ["gzip"]

[[site.paths]]
match = "/static/*"
headers = { "Cache-Control" = "immutable" }
"#,
    )
    .unwrap();
    let server = Server::run(&config, &[]);
    Sites {
        dir,
        _outside: outside,
        server,
    }
}

#[test]
fn precompressed_siblings_by_accept_encoding() {
    let s = sites();
    let srv = &s.server;
    let a = s.dir.path().join("a");
    let file = |n: &str| std::fs::read(a.join(n)).unwrap();

    // The identity: no coding, but Vary (caches must key on it).
    let plain = get(srv, None, "/assets/app.js", &[]);
    assert_eq!(plain.status, 200);
    assert_eq!(plain.body, file("assets/app.js"));
    assert_eq!(plain.header("content-encoding"), None);
    assert!(plain.has("vary", "Accept-Encoding"), "{:?}", plain.headers);
    let plain_tag = plain.header("etag").unwrap().to_string();

    // Explicit q-values: br wins, byte for byte.
    let ae = ["-H", "Accept-Encoding: br;q=1, gzip;q=0.5"];
    let br = get(srv, None, "/assets/app.js", &ae);
    assert_eq!(br.status, 200);
    assert_eq!(br.body, file("assets/app.js.br"));
    assert!(br.has("content-encoding", "br"));
    assert!(br.has("vary", "Accept-Encoding"));
    assert!(
        br.has("content-type", "application/javascript; charset=utf-8")
            || br.has("content-type", "text/javascript; charset=utf-8")
    );
    assert_eq!(
        br.header("content-type"),
        plain.header("content-type"),
        "the sibling keeps the original's type"
    );
    let br_tag = br.header("etag").unwrap().to_string();
    assert_ne!(br_tag, plain_tag);
    assert!(br_tag.ends_with("-br\""), "{br_tag}");

    // The client's q-values choose over the site's order.
    let gz = get(
        srv,
        None,
        "/assets/app.js",
        &["-H", "Accept-Encoding: br;q=0.1, gzip;q=0.5"],
    );
    assert_eq!(gz.body, file("assets/app.js.gz"));
    assert!(gz.has("content-encoding", "gzip"));
    assert_ne!(gz.header("etag"), Some(br_tag.as_str()));

    // q=0 refuses: the identity.
    let none = get(
        srv,
        None,
        "/assets/app.js",
        &["-H", "Accept-Encoding: gzip;q=0"],
    );
    assert_eq!(none.body, file("assets/app.js"));
    assert_eq!(none.header("content-encoding"), None);
    assert!(none.has("etag", &plain_tag));

    // Preconditions and ranges are about the sibling.
    let inm = format!("If-None-Match: {br_tag}");
    let not_modified = get(srv, None, "/assets/app.js", &[ae[0], ae[1], "-H", &inm]);
    assert_eq!(not_modified.status, 304);
    assert!(not_modified.has("etag", &br_tag));
    assert!(not_modified.has("vary", "Accept-Encoding"));
    // The sibling's tag does not match the identity.
    let other = get(srv, None, "/assets/app.js", &["-H", &inm]);
    assert_eq!(other.status, 200);
    let range = get(srv, None, "/assets/app.js", &[ae[0], ae[1], "-r", "7-12"]);
    assert_eq!(range.status, 206);
    assert_eq!(range.body, file("assets/app.js.br")[7..13].to_vec());
    assert!(range.has("content-encoding", "br"));
    let br_len = file("assets/app.js.br").len();
    assert!(range.has("content-range", &format!("bytes 7-12/{br_len}")));

    // HEAD: the sibling's length, no body.
    let head = get(srv, None, "/assets/app.js", &[ae[0], ae[1], "-I"]);
    assert_eq!(head.status, 200);
    assert!(head.has("content-length", &br_len.to_string()));
    assert!(head.has("content-encoding", "br"));
    // (curl -I writes the head where the body would go.)
    assert!(!String::from_utf8_lossy(&head.body).contains("brotli bytes"));

    // curl --compressed decodes what it gets: zstd for style.css (no .br),
    // and the result is the original.
    let css = get(srv, None, "/style.css", &["--compressed"]);
    assert!(css.has("content-encoding", "zstd"), "{:?}", css.headers);
    assert_eq!(css.body, file("style.css"));
    let css_gz = get(
        srv,
        None,
        "/style.css",
        &["--compressed", "-H", "Accept-Encoding: gzip"],
    );
    assert!(css_gz.has("content-encoding", "gzip"));
    assert_eq!(css_gz.body, file("style.css"));

    // A sibling whose symlink leaves the root is not served.
    let secret = get(srv, None, "/secret.txt", &["-H", "Accept-Encoding: gzip"]);
    assert_eq!(secret.status, 200);
    assert_eq!(secret.header("content-encoding"), None);
    assert_eq!(secret.body, b"public text\n");

    // A sibling without its original is not served.
    let only = get(
        srv,
        None,
        "/assets/only.js",
        &["-H", "Accept-Encoding: gzip"],
    );
    assert_eq!(only.status, 404);

    // Siblings go out on the path any file takes: with kTLS where the
    // kernel has it (sendfile), in user space elsewhere.
    s.server.stop_and_check_path(12);
}

#[test]
fn headers_per_site_and_per_path_on_every_response() {
    let s = sites();
    headers_per_site_and_path(&s.server, &[]);
    headers_per_site_and_path(&s.server, &["--http2"]);
}

/// The header checks, over HTTP/1.1 or (`--http2`) HTTP/2.
fn headers_per_site_and_path(srv: &Server, proto: &[&str]) {
    let get = |srv, host, path, args: &[&str]| get(srv, host, path, &[args, proto].concat());
    let hsts = "max-age=63072000";
    let immutable = "public, max-age=31536000, immutable";

    let root = get(srv, None, "/", &["-I"]);
    assert_eq!(root.status, 200);
    assert!(root.has("strict-transport-security", hsts));
    assert!(root.has("x-frame-options", "DENY"));
    assert!(root.has("x-content-type-options", "nosniff"));
    assert_eq!(root.header("cache-control"), None);

    // A path rule adds, overrides and removes ("" removes the site's).
    let asset = get(srv, None, "/assets/app.js", &["-I"]);
    assert!(asset.has("cache-control", immutable));
    assert!(asset.has("strict-transport-security", hsts));
    assert_eq!(asset.header("x-frame-options"), None);
    // The first rule that matches applies.
    assert!(get(srv, None, "/style.css", &["-I"]).has("cache-control", "max-age=60"));

    // Errors and redirects carry them too.
    let missing = get(srv, None, "/nope.html", &[]);
    assert_eq!(missing.status, 404);
    assert!(missing.has("strict-transport-security", hsts));
    assert!(missing.has("x-frame-options", "DENY"));
    let missing_asset = get(srv, None, "/assets/nope.js", &["-I"]);
    assert_eq!(missing_asset.status, 404);
    assert!(missing_asset.has("cache-control", immutable));
    let forbidden = get(srv, None, "/dir/", &["-I"]);
    assert_eq!(forbidden.status, 403);
    assert!(forbidden.has("strict-transport-security", hsts));
    // Requests refused before their path is looked at get the site's.
    let bad_path = get(srv, None, "/a/%00", &[]);
    assert_eq!(bad_path.status, 400);
    assert!(bad_path.has("strict-transport-security", hsts));
    let post = get(srv, None, "/assets/app.js", &["-X", "POST"]);
    assert_eq!(post.status, 405);
    assert!(post.has("strict-transport-security", hsts));
    assert_eq!(post.header("cache-control"), None);
    let redirect = get(srv, None, "/dir", &["-I"]);
    assert_eq!(redirect.status, 301);
    assert!(redirect.has("strict-transport-security", hsts));
    assert!(redirect.has("location", "/dir/"));
    let not_modified = get(
        srv,
        None,
        "/",
        &[
            "-H",
            &format!("If-None-Match: {}", root.header("etag").unwrap()),
        ],
    );
    assert_eq!(not_modified.status, 304);
    assert!(not_modified.has("strict-transport-security", hsts));

    // The other site has its own (and the top-level defaults).
    let b = get(srv, Some("spa.test"), "/", &["-I"]);
    assert_eq!(b.status, 200);
    assert_eq!(b.header("strict-transport-security"), None);
    assert!(b.has("x-content-type-options", "nosniff"));
    assert!(
        get(srv, Some("spa.test"), "/static/app.css", &["-I"]).has("cache-control", "immutable")
    );
}

#[test]
fn fallback_answers_paths_that_do_not_exist() {
    let s = sites();
    let srv = &s.server;
    let index = std::fs::read(s.dir.path().join("b/index.html")).unwrap();
    for path in ["/app/settings", "/deep/a/b/", "/missing.js"] {
        let g = get(srv, Some("spa.test"), path, &[]);
        assert_eq!(g.status, 200, "{path}");
        assert_eq!(g.body, index, "{path}");
        assert!(
            g.has("content-type", "text/html"),
            "{path}: {:?}",
            g.headers
        );
    }
    // Existing files are themselves; HEAD works; a fallback may be
    // precompressed like any file.
    let css = get(srv, Some("spa.test"), "/static/app.css", &[]);
    assert_eq!(css.body, b"p{}\n");
    let head = get(srv, Some("spa.test"), "/route", &["-I"]);
    assert_eq!(head.status, 200);
    assert!(head.has("content-length", &index.len().to_string()));
    let gz = get(
        srv,
        Some("spa.test"),
        "/route",
        &["--compressed", "-H", "Accept-Encoding: gzip"],
    );
    assert!(gz.has("content-encoding", "gzip"));
    assert_eq!(gz.body, index);
    // Headers follow the file sent: a missing /static/ file answered
    // with /index.html does not get the rule for /static/*.
    let missing_static = get(srv, Some("spa.test"), "/static/gone.css", &["-I"]);
    assert_eq!(missing_static.status, 200);
    assert_eq!(missing_static.header("cache-control"), None);
    // Without fallback, a missing path is 404.
    assert_eq!(get(srv, None, "/app/settings", &["-I"]).status, 404);
}

#[test]
fn charset_only_where_configured() {
    let s = sites();
    let srv = &s.server;
    for proto in [&[][..], &["--http2"]] {
        let ct = |host, path| {
            get(srv, host, path, &[&["-I"], proto].concat())
                .header("content-type")
                .unwrap_or("")
                .to_string()
        };
        assert_eq!(ct(None, "/"), "text/html; charset=utf-8");
        assert_eq!(ct(None, "/notes.txt"), "text/plain; charset=utf-8");
        assert_eq!(ct(None, "/style.css"), "text/css; charset=utf-8");
        assert_eq!(ct(Some("spa.test"), "/"), "text/html");
        assert_eq!(ct(Some("spa.test"), "/static/app.css"), "text/css");
    }
}

/// `serve` takes the same settings as flags.
/// The files of the document root the server holds open, by name
/// (`(deleted)` marks one that no longer has a name).
fn held(server: &Server, root: &Path) -> Vec<String> {
    let root = root.canonicalize().unwrap();
    let mut names = Vec::new();
    for fd in std::fs::read_dir(format!("/proc/{}/fd", server.pid())).unwrap() {
        if let Ok(target) = std::fs::read_link(fd.unwrap().path()) {
            match target.strip_prefix(&root) {
                // The root itself (the directory the lookups start from).
                Ok(rest) if rest.as_os_str().is_empty() => {}
                Ok(rest) => names.push(rest.display().to_string()),
                Err(_) => {}
            }
        }
    }
    names.sort();
    names
}

/// Poll `check` for up to `limit`; whether it came true.
fn eventually(limit: std::time::Duration, mut check: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if std::time::Instant::now() > end {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// What a deploy does to the files (written in place, replaced by a
/// rename, deleted) is served by the very next request, though the workers
/// keep files open; a new precompressed sibling is seen once the entry
/// expires (`--open-file-cache-valid`); a deleted file is let go by the
/// sweep even if nobody asks for it again; `--open-file-cache 0` keeps
/// nothing open.
#[test]
fn kept_files_follow_a_deploy() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("app.js"), "v1();\n").unwrap();
    let server = Server::start_in(
        d,
        &["--precompressed", "gzip", "--open-file-cache-valid", "0.5"],
    );
    let body = |path: &str| {
        let g = get(&server, None, path, &["--compressed"]);
        (g.status, String::from_utf8_lossy(&g.body).into_owned())
    };
    assert_eq!(body("/app.js"), (200, "v1();\n".into()));
    assert!(
        held(&server, d).contains(&"app.js".to_string()),
        "{:?}",
        held(&server, d)
    );
    // Written in place, longer: the new bytes and length at once.
    std::fs::write(d.join("app.js"), "version2();\n").unwrap();
    let g = get(&server, None, "/app.js", &[]);
    assert_eq!(g.body, b"version2();\n");
    assert!(g.has("content-length", "12"), "{:?}", g.headers);
    // Replaced by a rename, as rsync and deploy tools do: at once.
    std::fs::write(d.join(".app.js.tmp"), "v3();\n").unwrap();
    std::fs::rename(d.join(".app.js.tmp"), d.join("app.js")).unwrap();
    assert_eq!(body("/app.js"), (200, "v3();\n".into()));
    // A precompressed sibling put in place: served once the entry
    // expires (it was found missing a moment ago).
    std::fs::write(d.join("app.js"), "v4();\n".repeat(50)).unwrap();
    compress(&d.join("app.js"));
    assert!(
        eventually(common::WAIT, || {
            get(&server, None, "/app.js", &["--compressed"]).has("content-encoding", "gzip")
        }),
        "the new sibling was never served"
    );
    assert_eq!(body("/app.js"), (200, "v4();\n".repeat(50)));
    // Deleted: 404 at once; and deleted files the server still held are
    // let go without another request.
    std::fs::remove_file(d.join("app.js.gz")).unwrap();
    std::fs::remove_file(d.join("app.js")).unwrap();
    assert_eq!(server.status("/app.js", &[]), "404");
    assert!(
        eventually(common::WAIT, || held(&server, d).is_empty()),
        "still held: {:?}",
        held(&server, d)
    );
    drop(server);
    std::fs::write(d.join("app.js"), "v5();\n").unwrap();
    let server = Server::start_in(d, &["--open-file-cache", "0"]);
    assert_eq!(server.status("/app.js", &[]), "200");
    assert_eq!(held(&server, d), Vec::<String>::new());
}

#[test]
fn serve_flags_precompressed_fallback_charset() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("index.html"), "<p>spa</p>\n".repeat(20)).unwrap();
    compress(&dir.path().join("index.html"));
    let server = Server::start_in(
        dir.path(),
        &[
            "--precompressed",
            "gzip,zstd",
            "--fallback",
            "/index.html",
            "--charset",
            "utf-8",
        ],
    );
    let g = get(&server, None, "/some/route", &["--compressed"]);
    assert_eq!(g.status, 200);
    assert!(g.has("content-encoding", "gzip"), "{:?}", g.headers);
    assert!(g.has("content-type", "text/html; charset=utf-8"));
    assert!(g.has("vary", "Accept-Encoding"));
    assert_eq!(g.body, "<p>spa</p>\n".repeat(20).into_bytes());
}

#[test]
fn config_check_refuses_bad_headers_naming_line_and_fix() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("www")).unwrap();
    let config = dir.path().join("bad.toml");
    for (text, want) in [
        (
            "[[site]]\nnames = [\"a.test\"]\nroot = \"www\"\nheaders = { \"Content-Length\" = \"0\" }\n",
            "line 4, setting headers: Content-Length cannot be set: tlsfront sets it for each response; leave it out",
        ),
        (
            "[[site]]\nnames = [\"a.test\"]\nroot = \"www\"\n\n[[site.paths]]\nmatch = \"*.js\"\nheaders = { \"X-A\" = \"1\\r\\nSet-Cookie: x\" }\n",
            "line 7, setting [[site.paths]] headers: the value of X-A holds the control byte 0x0d",
        ),
        (
            "[[site]]\nnames = [\"a.test\"]\nbackend = \"127.0.0.1:1\"\nheaders = { \"X-A\" = \"1\" }\n",
            "setting headers: headers is for a site with a root",
        ),
    ] {
        std::fs::write(&config, text).unwrap();
        let out = Command::new(BIN)
            .args(["config", "check"])
            .arg(&config)
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "{said}");
        assert!(said.contains(want), "{said}\nwanted: {want}");
        assert!(said.contains(&config.display().to_string()), "{said}");
    }
    // A fallback that is not there yet is a warning, not an error.
    std::fs::write(
        &config,
        "[[site]]\nnames = [\"a.test\"]\nroot = \"www\"\nfallback = \"/index.html\"\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["config", "check"])
        .arg(&config)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("warning: fallback") && said.contains("index.html"),
        "{said}"
    );
}

/// As root, the server process runs as `nobody` (its parent stays root):
/// the flags for that, and the directory `d` opened to that user.
fn as_nobody(d: &Path) -> Vec<&'static str> {
    use std::os::unix::fs::PermissionsExt;
    if !rustix::process::geteuid().is_root() {
        return Vec::new();
    }
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    vec!["--user", "nobody"]
}

/// The process that serves: the server process when a parent runs it
/// (`parented`: its line names it), else the one started.
fn serving_pid(server: &Server, parented: bool) -> u32 {
    if !parented {
        return server.pid();
    }
    common::server_pid(&server.wait_for_output("server process ", 1))
}

/// Point the symlink `link` at `to` the way deploy tools do (`ln -sfn`
/// with a temporary name, then an atomic rename over the old link).
fn switch_link(link: &Path, to: &str) {
    let tmp = link.with_extension("new");
    std::os::unix::fs::symlink(to, &tmp).unwrap();
    std::fs::rename(&tmp, link).unwrap();
}

/// A `root` that is a symlink (`current -> release-N`) switched to another
/// release while the server runs: served from the new release within
/// `open_file_cache_valid`, with no failed request in between (each gets
/// the old release's file or the new one's), and never the old one again.
#[test]
fn a_symlinked_root_switched_by_a_deploy_is_served() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for (release, body) in [
        ("release-1", "release one\n"),
        ("release-2", "release two!\n"),
    ] {
        std::fs::create_dir(d.join(release)).unwrap();
        std::fs::write(d.join(release).join("v.txt"), body).unwrap();
        std::fs::write(d.join(release).join("index.html"), body).unwrap();
    }
    let current = d.join("current");
    std::os::unix::fs::symlink("release-1", &current).unwrap();
    // The new release is opened by the server process, as its user.
    let mut flags = vec!["--workers", "2"];
    flags.extend(as_nobody(d));
    let server = Server::start_in(&current, &flags);
    let body = |path: &str| {
        let g = get(&server, None, path, &[]);
        (g.status, String::from_utf8_lossy(&g.body).into_owned())
    };
    // Kept open by the worker's cache, and its index too.
    for _ in 0..3 {
        assert_eq!(body("/v.txt"), (200, "release one\n".into()));
        assert_eq!(body("/"), (200, "release one\n".into()));
    }
    switch_link(&current, "release-2");
    let end = Instant::now() + Duration::from_secs(30);
    let mut old = 0;
    loop {
        let got = body("/v.txt");
        assert_eq!(got.0, 200, "a request failed during the deploy: {got:?}");
        if got.1 == "release two!\n" {
            break;
        }
        assert_eq!(got.1, "release one\n");
        old += 1;
        assert!(
            Instant::now() < end,
            "still the old release after 30 s ({old} requests)"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // From then on, every path and every worker: the new release.
    for _ in 0..10 {
        assert_eq!(body("/v.txt"), (200, "release two!\n".into()));
    }
    assert!(
        eventually(Duration::from_secs(30), || body("/")
            == (200, "release two!\n".into())),
        "the index was still the old release's"
    );
    for _ in 0..10 {
        assert_eq!(body("/"), (200, "release two!\n".into()));
    }
    assert!(
        server.wait_for_log("now leads to").contains(
            &d.join("release-2")
                .canonicalize()
                .unwrap()
                .display()
                .to_string()
        ),
        "{}",
        server.log()
    );
}

/// Descriptors the process `pid` holds.
fn fds_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// A config of `n` sites named `sI.test`, each with the root `root(i)`.
fn many_sites(dir: &Path, n: usize, root: impl Fn(usize) -> String) -> std::path::PathBuf {
    let mut text = String::from("workers = 1\n");
    for i in 0..n {
        text.push_str(&format!(
            "[[site]]\nnames = [\"s{i}.test\"]\nroot = \"{}\"\n",
            root(i)
        ));
    }
    let config = dir.join("many.toml");
    std::fs::write(&config, text).unwrap();
    config
}

/// Many sites sharing one root hold one descriptor for it, not one each,
/// across a reload too; and a start whose open-file limit is too low for
/// its roots says that it is the open-file limit, and how to raise it.
#[test]
fn sites_sharing_a_root_share_one_descriptor() {
    // Enough that one descriptor per site would show (the bound below),
    // few enough to build fast under the guest's emulated CPU too.
    const SITES: usize = 400;
    const BOUND: usize = 64;
    let dir = tempfile::tempdir().unwrap();
    let www = dir.path().join("www");
    std::fs::create_dir(&www).unwrap();
    std::fs::write(www.join("index.html"), "shared\n").unwrap();
    let config = many_sites(dir.path(), SITES, |_| "www".into());
    let nobody = as_nobody(dir.path());
    let server = Server::run(&config, &nobody);
    let pid = serving_pid(&server, !nobody.is_empty());
    for name in ["s0.test", "s399.test"] {
        let g = get(&server, Some(name), "/", &[]);
        assert_eq!((g.status, g.body.as_slice()), (200, &b"shared\n"[..]));
    }
    let fds = fds_of(pid);
    assert!(fds < BOUND, "{fds} descriptors for {SITES} sites");
    let roots = held(&server, &www).len();
    assert!(
        roots <= 1,
        "files of the root held: {:?}",
        held(&server, &www)
    );
    server.reload();
    let out = server.wait_for_output("reloaded", 1);
    assert!(out.contains(&format!("{SITES} sites")), "{out}");
    let g = get(&server, Some("s7.test"), "/", &[]);
    assert_eq!(g.status, 200);
    let after = fds_of(pid);
    assert!(
        after < BOUND,
        "{after} descriptors for {SITES} sites after a reload"
    );
    drop(server);

    // Distinct roots, more than the open-file limit allows.
    for i in 0..300 {
        std::fs::create_dir(dir.path().join(format!("r{i}"))).unwrap();
    }
    let config = many_sites(dir.path(), 300, |i| format!("r{i}"));
    let data = tempfile::tempdir().unwrap();
    let out_path = data.path().join("out");
    let out_file = std::fs::File::create(&out_path).unwrap();
    let mut child = tool("prlimit")
        .args(["--nofile=128:128", "--"])
        .arg(BIN)
        .args(["run", "--config"])
        .arg(&config)
        .args(["--listen", "127.0.0.1:0"])
        .env("XDG_DATA_HOME", data.path())
        .stdout(out_file.try_clone().unwrap())
        .stderr(out_file)
        .spawn()
        .unwrap();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "still running after 60 s: {}",
                std::fs::read_to_string(&out_path).unwrap_or_default()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let said = std::fs::read_to_string(&out_path).unwrap();
    assert!(!status.success(), "{said}");
    let error = said
        .lines()
        .find(|l| l.contains("cannot serve"))
        .unwrap_or_else(|| panic!("no error naming a root: {said}"));
    assert!(error.contains("Too many open files"), "{error}");
    assert!(error.contains("open-file limit"), "{error}");
    assert!(error.contains("LimitNOFILE"), "{error}");
    assert!(!error.contains("existing, readable directory"), "{error}");
}
