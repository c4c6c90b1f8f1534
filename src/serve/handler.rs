//! The static file handler: from a protocol-neutral [`Request`] to a
//! [`Response`] plan (routing by Host, redirects, listings, error pages,
//! preconditions, ranges, precompressed siblings, the site's headers, the
//! fallback file). It decides and writes nothing: the framing of HTTP/1.1
//! (and later HTTP/2) sends the plan, and the service counts it.

use super::model::{Body, FileRange, Request, Response, Value};
use crate::files::{Charset, DocRoot, FileError, Lookup, OpenFile};
use crate::http::conditional::{self, Outcome};
use crate::http::encoding::Encoding;
use crate::http::path::{self, NormPath};
use crate::http::range::{self, RangeResult};
use crate::http::request::Method;
use crate::http::response::error_page;
use crate::http::site_headers::{Pattern, SiteHeaders};
use crate::lograte::LogLimit;

/// A site's files and what answering from them reads of its settings.
pub struct Handler {
    root: DocRoot,
    /// Precompressed siblings to look for (none: only the files).
    precompressed: Vec<Encoding>,
    headers: SiteHeaders,
    fallback: Option<NormPath>,
    charset: Charset,
    /// Paths answered only on a connection with a verified client
    /// certificate.
    client_cert_paths: Vec<Pattern>,
    /// Warnings that a flood of requests could repeat.
    log: LogLimit,
}

impl Handler {
    pub fn new(
        root: DocRoot,
        precompressed: Vec<Encoding>,
        headers: SiteHeaders,
        fallback: Option<NormPath>,
        charset: Charset,
        client_cert_paths: Vec<Pattern>,
    ) -> Handler {
        Handler {
            root,
            precompressed,
            headers,
            fallback,
            charset,
            client_cert_paths,
            log: LogLimit::new(crate::lograte::EVERY),
        }
    }

    /// The directory the document root leads to now.
    pub fn root_path(&self) -> std::path::PathBuf {
        self.root.path()
    }

    /// Warn (rate-limited) that the file being sent for `norm` (the
    /// request's path, if it had one) shrank: a framing found it shorter
    /// than the plan said.
    pub fn shrank(&self, norm: Option<&NormPath>) {
        if let Some(left_out) = self.log.allow("file_shrank") {
            let root = self.root.path();
            let shown = norm.map_or_else(|| root.clone(), |n| root.join(n.to_relative()));
            tracing::warn!(
                "{} shrank while being sent; the response was cut short{left_out}",
                shown.display()
            );
        }
    }
}

/// Which site answers a request.
pub(crate) enum Route<S> {
    /// The connection's own.
    Here,
    /// Another static site: the connection came without SNI, and its Host
    /// names that site.
    There(S),
    /// `421 Misdirected Request` (RFC 9110 §15.5.20).
    Misdirected,
}

/// A site a Host names, as routing needs to see it.
pub(crate) struct Named<S> {
    pub site: S,
    /// It is the connection's own site.
    pub own: bool,
    /// It serves files (not a backend).
    pub files: bool,
    /// It asks for client certificates (`client_auth`).
    pub asks_client_cert: bool,
}

/// Which site answers a request for `host` on a connection with `sni`,
/// Caddy's `strict_sni_host` with nginx's routing of clients without SNI
/// (`named`: the site a name picks among the sites as they are now, a
/// reload may have changed them):
/// - a Host that is none of the configured names (an IP address, an
///   unknown name), or none at all (HTTP/1.0): the connection's site, as
///   the SNI (or its absence) chose it;
/// - a Host that picks the connection's own site (any of its names, exact
///   or by its wildcard): that site;
/// - a Host that picks another site, on a connection with SNI: 421. The
///   client reached the certificate and settings of the SNI's site, and
///   another site's files must not be served under them; the client may
///   retry on a new connection with the right SNI.
/// - a Host that picks another site, on a connection without SNI (an IP
///   URL, a health check): that site, when it serves files and asks for no
///   client certificate; a backend cannot take over a connection begun
///   here, and a site that asks for a certificate must have asked in the
///   handshake (against its own `client_ca`), so 421.
pub(crate) fn route<S>(
    host: Option<&str>,
    sni: Option<&str>,
    named: impl FnOnce(&str) -> Option<Named<S>>,
) -> Route<S> {
    let Some(host) = host else {
        return Route::Here;
    };
    // The common case, without a look-up: the Host is the SNI.
    if sni.is_some_and(|n| n.strip_suffix('.').unwrap_or(n) == host) {
        return Route::Here;
    }
    let Some(site) = named(host) else {
        return Route::Here;
    };
    if site.own {
        return Route::Here;
    }
    match (site.files, site.asks_client_cert, sni) {
        (true, false, None) => Route::There(site.site),
        _ => Route::Misdirected,
    }
}

/// A small HTML page for `status` (errors, redirects), with the site
/// headers of list `which` (`SiteHeaders::which`) and `extra` headers.
pub(crate) fn page<'a>(
    files: &'a Handler,
    which: usize,
    status: u16,
    extra: Vec<(&'a str, Value<'a>)>,
) -> Response<'a> {
    let mut r = Response::new(status);
    site_headers(files, which, &mut r);
    r.header("Content-Type", Value::Text("text/html; charset=utf-8"));
    r.headers.extend(extra);
    r.body = Body::Page(error_page(status));
    r
}

/// The site's headers of list `which`, first after the framing's own.
fn site_headers<'a>(files: &'a Handler, which: usize, r: &mut Response<'a>) {
    for (k, v) in files.headers.list(which) {
        r.header(k, Value::Text(v));
    }
}

/// Answer `req` from the site's files.
pub(crate) fn handle<'a>(files: &'a Handler, req: &Request<'_>) -> Response<'a> {
    if *req.method == Method::Other {
        // HTTP/1.1 refuses these before reading a body; any other way in
        // gets the same answer here.
        return page(files, 0, 405, vec![("Allow", Value::Text("GET, HEAD"))]);
    }
    let norm = match path::normalize(req.target) {
        Ok(p) => p,
        Err(e) => {
            tracing::debug!("refused path {:?}: {e}", req.target);
            return page(files, 0, 400, Vec::new());
        }
    };
    let cfg = files;
    let mut which = cfg.headers.which(Some(&norm));
    // Before the root is looked at: whether a path exists is not told
    // without the certificate either (nginx's `ssl_verify_client optional`
    // with `if ($ssl_client_verify != SUCCESS) { return 403; }`).
    if !req.client_verified && cfg.client_cert_paths.iter().any(|p| p.matches(&norm)) {
        let mut r = page(files, which, 403, Vec::new());
        r.path = Some(norm);
        return r;
    }
    // One look at the root for both: a request never mixes two releases.
    let found = files.root.lookup_or(
        &norm,
        cfg.fallback.as_ref(),
        req.accept_encoding,
        &cfg.precompressed,
    );
    let mut r = match found {
        Err(e) => {
            if let FileError::Io(err) = &e {
                tracing::warn!("cannot open {:?}: {err}", req.target);
            }
            page(files, which, e.status(), Vec::new())
        }
        Ok((Lookup::Redirect(mut url), _)) => {
            // The query goes along, as nginx does.
            if let Some(q) = path::query(req.target) {
                url.push('?');
                url.push_str(q);
            }
            page(files, which, 301, vec![("Location", Value::Owned(url))])
        }
        Ok((Lookup::Listing(html), _)) => {
            let mut r = Response::new(200);
            site_headers(files, which, &mut r);
            r.header("Content-Type", Value::Text("text/html; charset=utf-8"));
            r.body = Body::Page(html);
            r
        }
        Ok((Lookup::File(f), fell_back)) => {
            if let (true, Some(fb)) = (fell_back, &cfg.fallback) {
                // Headers follow the file sent: a missing `/assets/x.js`
                // answered with `/index.html` must not get the assets'
                // `immutable`.
                which = cfg.headers.which(Some(fb));
            }
            file(files, which, req, f)
        }
    };
    r.path = Some(norm);
    r
}

/// The response with the file `f` (or a part of it, or none).
fn file<'a>(files: &'a Handler, which: usize, req: &Request<'_>, f: OpenFile) -> Response<'a> {
    let cfg = files;
    let v = &f.validators;
    match conditional::evaluate(req.preconditions, v) {
        Outcome::Proceed => {}
        Outcome::NotModified => {
            let mut r = Response::new(304);
            site_headers(files, which, &mut r);
            r.header("Last-Modified", Value::Date(v.modified))
                .header("ETag", Value::ETag(v.etag));
            if !cfg.precompressed.is_empty() {
                r.header("Vary", Value::Text("Accept-Encoding"));
            }
            return r;
        }
        Outcome::PreconditionFailed => return page(files, which, 412, Vec::new()),
    }
    let range = match req.range {
        Some(r) if conditional::if_range_allows(req.preconditions, v) => range::parse(r, f.size),
        _ => RangeResult::Full,
    };
    let (status, start, len) = match range {
        RangeResult::Full => (200, 0, f.size),
        RangeResult::Partial { start, end } => (206, start, end - start + 1),
        RangeResult::Unsatisfiable => {
            let cr = format!("bytes */{}", f.size);
            return page(files, which, 416, vec![("Content-Range", Value::Owned(cr))]);
        }
    };
    let mut r = Response::new(status);
    site_headers(files, which, &mut r);
    r.header(
        "Content-Type",
        Value::Text(cfg.charset.apply(f.content_type)),
    )
    .header("Last-Modified", Value::Date(v.modified))
    .header("ETag", Value::ETag(v.etag))
    .header("Accept-Ranges", Value::Text("bytes"));
    if let Some(enc) = f.encoding {
        r.header("Content-Encoding", Value::Text(enc.name()));
    }
    if !cfg.precompressed.is_empty() {
        // On the identity too (nginx's gzip_vary): caches must key on it.
        r.header("Vary", Value::Text("Accept-Encoding"));
    }
    if status == 206 {
        let cr = format!("bytes {start}-{}/{}", start + len - 1, f.size);
        r.header("Content-Range", Value::Owned(cr));
    }
    r.body = Body::File(FileRange {
        file: f.file,
        offset: start,
        len,
    });
    r
}

#[cfg(test)]
mod tests {
    //! The handler with no socket: a document root in a temp dir, requests
    //! built as any framing would, and the plans it returns.

    use super::*;
    use crate::http::conditional::Preconditions;
    use std::collections::BTreeMap;

    const BODY: &[u8] = b"hello, world";

    fn site(dir: &std::path::Path) -> Handler {
        std::fs::write(dir.join("a.txt"), BODY).unwrap();
        std::fs::create_dir(dir.join("d")).unwrap();
        std::fs::write(dir.join("d/index.html"), b"<p>d</p>").unwrap();
        std::fs::create_dir(dir.join("p")).unwrap();
        std::fs::write(dir.join("p/index.html"), b"<p>private</p>").unwrap();
        let own = BTreeMap::from([("X-Site".to_string(), "yes".to_string())]);
        Handler::new(
            DocRoot::open(dir, false, false).unwrap(),
            Vec::new(),
            SiteHeaders::new(&BTreeMap::new(), &own, Vec::new()),
            None,
            Charset::new(None),
            vec![Pattern::new("/p/*").unwrap()],
        )
    }

    fn get(target: &str) -> Request<'_> {
        Request {
            method: &Method::Get,
            target,
            authority: Some("a.example"),
            preconditions: Preconditions::default(),
            range: None,
            accept_encoding: None,
            client_verified: false,
        }
    }

    fn file_range(r: &Response<'_>) -> (u64, u64) {
        match &r.body {
            Body::File(f) => (f.offset, f.len),
            other => panic!("not a file body: {other:?}"),
        }
    }

    fn page_text(r: &Response<'_>) -> String {
        match &r.body {
            Body::Page(p) => p.clone(),
            other => panic!("not a page: {other:?}"),
        }
    }

    #[test]
    fn client_cert_paths_need_a_verified_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let files = site(dir.path());
        // Refused before the root is looked at: a missing file is a 403
        // too, not a 404 that would tell what exists.
        for target in [
            "/p/",
            "/p/index.html",
            "/p/missing",
            "/p/%69ndex.html",
            "/d/../p/",
        ] {
            let r = handle(&files, &get(target));
            assert_eq!(r.status, 403, "{target}");
            assert!(page_text(&r).contains("403 Forbidden"));
        }
        assert_eq!(handle(&files, &get("/p/").verified(true)).status, 200);
        assert_eq!(
            handle(&files, &get("/p/missing").verified(true)).status,
            404
        );
        // Other paths need none.
        assert_eq!(handle(&files, &get("/a.txt")).status, 200);
    }

    #[test]
    fn a_file_is_a_200_with_its_range_and_validators() {
        let dir = tempfile::tempdir().unwrap();
        let files = site(dir.path());
        let r = handle(&files, &get("/a.txt"));
        assert_eq!(r.status, 200);
        assert_eq!(file_range(&r), (0, BODY.len() as u64));
        // The site's headers come first, then the file's own.
        assert_eq!(r.headers[0].0, "X-Site");
        assert_eq!(r.get("content-type"), Some("text/plain"));
        assert_eq!(r.get("Accept-Ranges"), Some("bytes"));
        assert!(r.get("ETag").is_some_and(|t| t.starts_with('"')));
        assert!(r
            .headers
            .iter()
            .any(|(n, v)| *n == "Last-Modified" && matches!(v, Value::Date(_))));
        assert!(r.get("Content-Range").is_none() && r.get("Vary").is_none());
    }

    #[test]
    fn a_matching_if_none_match_is_a_304_without_a_body() {
        let dir = tempfile::tempdir().unwrap();
        let files = site(dir.path());
        let tag = handle(&files, &get("/a.txt"))
            .get("ETag")
            .unwrap()
            .to_string();
        let mut req = get("/a.txt");
        req.preconditions.if_none_match = Some(&tag);
        let r = handle(&files, &req);
        assert_eq!(r.status, 304);
        assert!(matches!(r.body, Body::Empty));
        assert_eq!(r.get("ETag"), Some(tag.as_str()));
        // Another tag: the file.
        req.preconditions.if_none_match = Some("\"other\"");
        assert_eq!(handle(&files, &req).status, 200);
    }

    #[test]
    fn a_single_range_is_a_206_of_that_part() {
        let dir = tempfile::tempdir().unwrap();
        let files = site(dir.path());
        let mut req = get("/a.txt");
        req.range = Some("bytes=7-");
        let r = handle(&files, &req);
        assert_eq!(r.status, 206);
        assert_eq!(file_range(&r), (7, 5));
        assert_eq!(r.get("Content-Range"), Some("bytes 7-11/12"));
        // An If-Range that does not match: the whole file.
        req.preconditions.if_range = Some("\"stale\"");
        let r = handle(&files, &req);
        assert_eq!((r.status, file_range(&r)), (200, (0, 12)));
    }

    #[test]
    fn a_range_past_the_end_is_a_416() {
        let dir = tempfile::tempdir().unwrap();
        let files = site(dir.path());
        let mut req = get("/a.txt");
        req.range = Some("bytes=100-");
        let r = handle(&files, &req);
        assert_eq!(r.status, 416);
        assert_eq!(r.get("Content-Range"), Some("bytes */12"));
        assert!(page_text(&r).contains("416 Range Not Satisfiable"));
    }

    #[test]
    fn a_missing_file_is_a_404_page_with_the_site_headers() {
        let dir = tempfile::tempdir().unwrap();
        let files = site(dir.path());
        let r = handle(&files, &get("/missing.txt"));
        assert_eq!(r.status, 404);
        assert!(page_text(&r).contains("<h1>404 Not Found</h1>"));
        assert_eq!(r.get("Content-Type"), Some("text/html; charset=utf-8"));
        assert_eq!(r.get("X-Site"), Some("yes"));
        // A path that cannot be normalised, and a method not served.
        assert_eq!(handle(&files, &get("/../a.txt")).status, 400);
        let mut post = get("/a.txt");
        post.method = &Method::Other;
        let r = handle(&files, &post);
        assert_eq!((r.status, r.get("Allow")), (405, Some("GET, HEAD")));
    }

    #[test]
    fn a_directory_without_its_slash_redirects_with_the_query() {
        let dir = tempfile::tempdir().unwrap();
        let files = site(dir.path());
        let r = handle(&files, &get("/d?x=1"));
        assert_eq!(r.status, 301);
        assert_eq!(r.get("Location"), Some("/d/?x=1"));
        assert!(page_text(&r).contains("301 Moved Permanently"));
        let r = handle(&files, &get("/d/"));
        assert_eq!((r.status, file_range(&r)), (200, (0, 8)));
    }

    #[test]
    fn another_sites_host_is_misdirected_on_a_connection_with_sni() {
        let other = |own, files| {
            move |_: &str| {
                Some(Named {
                    site: "b",
                    own,
                    files,
                    asks_client_cert: false,
                })
            }
        };
        let sni = Some("a.example");
        // Another site's Host under this SNI: 421.
        assert!(matches!(
            route(Some("b.example"), sni, other(false, true)),
            Route::Misdirected
        ));
        // Without SNI, a static site's Host picks that site; a backend's
        // cannot take the connection.
        assert!(matches!(
            route(Some("b.example"), None, other(false, true)),
            Route::There("b")
        ));
        assert!(matches!(
            route(Some("b.example"), None, other(false, false)),
            Route::Misdirected
        ));
        // Nor a site that asks for client certificates: the handshake,
        // made for the default site, asked for none.
        let mtls = |_: &str| {
            Some(Named {
                site: "b",
                own: false,
                files: true,
                asks_client_cert: true,
            })
        };
        assert!(matches!(
            route(Some("b.example"), None, mtls),
            Route::Misdirected
        ));
        // The SNI itself, the own site by another name, an unknown name,
        // no Host: the connection's site.
        let never = |_: &str| -> Option<Named<&str>> { panic!("looked up") };
        assert!(matches!(
            route(Some("a.example"), Some("a.example."), never),
            Route::Here
        ));
        assert!(matches!(
            route(Some("www.a.example"), sni, other(true, true)),
            Route::Here
        ));
        assert!(matches!(
            route(Some("10.0.0.1"), sni, |_| None::<Named<&str>>),
            Route::Here
        ));
        assert!(matches!(route(None, sni, never), Route::Here));
        // And what is sent for it.
        let dir = tempfile::tempdir().unwrap();
        let files = site(dir.path());
        let r = page(&files, 0, 421, Vec::new());
        assert_eq!(r.status, 421);
        assert!(page_text(&r).contains("421 Misdirected Request"));
    }
}
