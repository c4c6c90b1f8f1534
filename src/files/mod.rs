//! The document root: turning a normalised request path into an open file,
//! a redirect, or a directory listing — never anything outside the root.
//!
//! Every open is `openat2()` relative to the root's open directory
//! (`root`: shared by the sites that name it, followed to where its path
//! leads now once `open_file_cache_valid` has passed), with `RESOLVE_BENEATH` (symlinks may not lead out of the root;
//! `..` was already refused by `http::path`) and `RESOLVE_NO_MAGICLINKS`.
//! Files are opened `O_NONBLOCK` so a FIFO cannot stall a worker, and only
//! regular files are served.
//!
//! A precompressed sibling (`app.js.br` for `app.js`) is looked up the same
//! way, beneath the same root with the same symlink rules, and only once
//! the file itself has been found: the sibling stands for the file, never
//! in for a missing one.
//!
//! What was found is kept open for the worker's next requests (`cache`).

use crate::http::conditional::Validators;
use crate::http::encoding::{self, Encoding};
use crate::http::path::NormPath;
use rustix::fs::{Mode, OFlags, ResolveFlags};
use std::cell::Cell;
use std::fmt::Write as _;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

pub mod cache;
mod root;
use cache::{Hit, Kind};
pub use root::open_roots;
use root::{OpenDir, RootPath};

/// Where files come from, and how strictly.
pub struct DocRoot {
    root: Arc<RootPath>,
    resolve: ResolveFlags,
    autoindex: bool,
}

/// A root's directory as one lookup sees it: taken once, so that a lookup
/// (its fallback and siblings included) never mixes two releases.
struct At {
    dir: arc_swap::Guard<Arc<OpenDir>>,
    /// The cache's key for this directory and these symlink rules (a file
    /// reached through a link out of the root must not be served from the
    /// cache to a site whose rules refuse that link).
    key: u64,
    now: Instant,
}

/// A regular file ready to send (shared with the worker's cache).
pub struct OpenFile {
    pub file: Arc<File>,
    pub size: u64,
    /// The modification time the validators were made of.
    mtime: (i64, i64),
    pub validators: Validators,
    /// The type of the file as named (a sibling keeps the original's).
    pub content_type: &'static str,
    /// The coding of the precompressed sibling being sent, if it is one.
    pub encoding: Option<Encoding>,
}

pub enum Lookup {
    File(OpenFile),
    /// A directory named without its trailing slash: 301 to this URL path.
    Redirect(String),
    /// An HTML directory listing (`--autoindex`).
    Listing(String),
}

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("not found")]
    NotFound,
    #[error("forbidden")]
    Forbidden,
    #[error("i/o error: {0}")]
    Io(io::Error),
}

impl FileError {
    pub fn status(&self) -> u16 {
        match self {
            FileError::NotFound => 404,
            FileError::Forbidden => 403,
            FileError::Io(_) => 500,
        }
    }
}

impl From<rustix::io::Errno> for FileError {
    fn from(e: rustix::io::Errno) -> Self {
        use rustix::io::Errno;
        match e {
            Errno::NOENT | Errno::NOTDIR | Errno::NAMETOOLONG => FileError::NotFound,
            // EXDEV: a symlink led out of the root; ELOOP: symlink loop;
            // ENXIO, ENODEV, EOPNOTSUPP: a socket or device node, which is
            // never served anyway (and not worth a warning per request).
            Errno::ACCESS
            | Errno::PERM
            | Errno::XDEV
            | Errno::LOOP
            | Errno::NXIO
            | Errno::NODEV
            | Errno::OPNOTSUPP => FileError::Forbidden,
            e => FileError::Io(e.into()),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RootError {
    #[error("cannot serve {path}: {source} (give an existing, readable directory)")]
    Open { path: PathBuf, source: io::Error },
    #[error("cannot serve {path}: {source}: tlsfront has as many files open as its open-file limit allows; raise the limit (LimitNOFILE= in the systemd unit, ulimit -n in a shell)")]
    ProcessFiles { path: PathBuf, source: io::Error },
    #[error("cannot serve {path}: {source}: the system's open-file limit is reached; raise it (sysctl fs.file-max) or close files elsewhere")]
    SystemFiles { path: PathBuf, source: io::Error },
    #[error("cannot serve {path}: this kernel lacks openat2() (Linux >= 5.6 needed for safe path resolution)")]
    NoOpenat2 { path: PathBuf },
}

impl DocRoot {
    /// The root at `path`: the directory it leads to, shared with every
    /// other site (and an earlier build's) that has it open already.
    pub fn open(
        path: &Path,
        follow_symlinks_outside: bool,
        autoindex: bool,
    ) -> Result<DocRoot, RootError> {
        let resolve = if follow_symlinks_outside {
            ResolveFlags::NO_MAGICLINKS
        } else {
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS
        };
        let root = DocRoot {
            root: RootPath::get(path)?,
            resolve,
            autoindex,
        };
        let at = root.at(Instant::now());
        match root.open_at(&at, Path::new(".")) {
            Err(rustix::io::Errno::NOSYS) => Err(RootError::NoOpenat2 {
                path: at.dir.path.clone(),
            }),
            Err(e) => Err(root::root_error(&at.dir.path, e.into())),
            Ok(_) => Ok(root),
        }
    }

    /// The directory served now.
    pub fn path(&self) -> PathBuf {
        self.root.current_path()
    }

    /// The directory to look beneath, at `now` (the one clock read of a
    /// lookup, shared with the cache).
    fn at(&self, now: Instant) -> At {
        self.at_within(now, cache::valid())
    }

    /// As [`DocRoot::at`], with the root's path looked at again once
    /// `valid` has passed.
    fn at_within(&self, now: Instant, valid: std::time::Duration) -> At {
        let dir = self.root.current(now, valid);
        let follows = !self.resolve.contains(ResolveFlags::BENEATH);
        At {
            key: dir.id << 1 | u64::from(follows),
            dir,
            now,
        }
    }

    fn open_at(&self, at: &At, rel: &Path) -> Result<OwnedFd, rustix::io::Errno> {
        rustix::fs::openat2(
            &at.dir.fd,
            rel,
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
            Mode::empty(),
            self.resolve,
        )
    }

    /// Resolve a request path.
    pub fn lookup(&self, path: &NormPath) -> Result<Lookup, FileError> {
        self.lookup_coded(path, None, &[])
    }

    /// Resolve a request path as [`DocRoot::lookup_coded`] does; `lookup`
    /// of the request's fallback if the path is not there (`NotFound`).
    pub fn lookup_or(
        &self,
        path: &NormPath,
        fallback: Option<&NormPath>,
        accept: Option<&str>,
        offered: &[Encoding],
    ) -> Result<(Lookup, bool), FileError> {
        let at = self.at(Instant::now());
        let found = self.lookup_coded_at(&at, path, accept, offered);
        match (found, fallback) {
            (Err(FileError::NotFound), Some(fb)) => {
                match self.lookup_coded_at(&at, fb, accept, offered) {
                    Ok(Lookup::File(f)) => Ok((Lookup::File(f), true)),
                    _ => Err(FileError::NotFound),
                }
            }
            (found, _) => found.map(|l| (l, false)),
        }
    }

    /// Resolve a request path, and if it names a regular file, send instead
    /// the precompressed sibling of the coding `accept` (the request's
    /// `Accept-Encoding`) prefers among `offered`, where one is there.
    pub fn lookup_coded(
        &self,
        path: &NormPath,
        accept: Option<&str>,
        offered: &[Encoding],
    ) -> Result<Lookup, FileError> {
        self.lookup_coded_at(&self.at(Instant::now()), path, accept, offered)
    }

    fn lookup_coded_at(
        &self,
        at: &At,
        path: &NormPath,
        accept: Option<&str>,
        offered: &[Encoding],
    ) -> Result<Lookup, FileError> {
        let found = self.lookup_plain(at, path)?;
        let Lookup::File(file) = found else {
            return Ok(found);
        };
        let mut codings = encoding::ranked(accept, offered).peekable();
        if codings.peek().is_none() {
            return Ok(Lookup::File(file));
        }
        let rel = path.to_relative();
        let mut name = if path.trailing_slash || path.is_root() {
            rel.join("index.html").into_os_string()
        } else {
            rel.as_os_str().to_owned()
        };
        let base = name.len();
        for enc in codings {
            name.push(enc.suffix());
            if let Some(sibling) = self.sibling(at, Path::new(&name), enc) {
                return Ok(Lookup::File(sibling));
            }
            // Back to the file's own name (suffixes are ASCII).
            let mut bytes = name.into_encoded_bytes();
            bytes.truncate(base);
            name = std::ffi::OsString::from_vec(bytes);
        }
        Ok(Lookup::File(file))
    }

    /// The precompressed sibling `name`, if it is a regular file we may
    /// open (a missing one, a directory, or a symlink the root's rules
    /// refuse all mean the file itself is sent).
    fn sibling(&self, at: &At, name: &Path, enc: Encoding) -> Option<OpenFile> {
        let key = name.as_os_str().as_encoded_bytes();
        match cache::get(at.key, Kind::Sibling, key, at.now) {
            Hit::File(f) => return Some(f),
            Hit::Absent => return None,
            Hit::Miss => {}
        }
        let found = self.sibling_uncached(at, name, enc);
        cache::put(at.key, Kind::Sibling, key, found.as_ref(), at.now);
        found
    }

    fn sibling_uncached(&self, at: &At, name: &Path, enc: Encoding) -> Option<OpenFile> {
        let fd = self.open_at(at, name).ok()?;
        let st = rustix::fs::fstat(&fd).ok()?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
            return None;
        }
        let original = name.file_stem().map(Path::new).unwrap_or(name);
        Some(OpenFile {
            file: Arc::new(File::from(fd)),
            size: st.st_size as u64,
            mtime: (st.st_mtime, st.st_mtime_nsec as i64),
            validators: Validators::coded(
                st.st_size as u64,
                st.st_mtime,
                st.st_mtime_nsec as i64,
                enc.name(),
            ),
            content_type: content_type(original),
            encoding: Some(enc),
        })
    }

    /// Why a site's `fallback` cannot answer, if it cannot now (it may be
    /// put in place later, so this is a warning, not an error).
    pub fn fallback_problem(&self, fallback: &NormPath) -> Option<String> {
        let at = self.at(Instant::now());
        let shown = at.dir.path.join(fallback.to_relative());
        match self.lookup_plain(&at, fallback) {
            Ok(Lookup::File(_)) => None,
            Ok(_) => Some(format!(
                "fallback {} is a directory: paths that do not exist get 404 until it names a file",
                shown.display()
            )),
            Err(e) => Some(format!(
                "fallback {} cannot be served ({e}): paths that do not exist get 404 until it can",
                shown.display()
            )),
        }
    }

    fn lookup_plain(&self, at: &At, path: &NormPath) -> Result<Lookup, FileError> {
        let kind = Kind::Path {
            trailing_slash: path.trailing_slash,
        };
        if let Hit::File(f) = cache::get(at.key, kind, path.as_bytes(), at.now) {
            return Ok(Lookup::File(f));
        }
        let found = self.lookup_uncached(at, path)?;
        if let Lookup::File(f) = &found {
            cache::put(at.key, kind, path.as_bytes(), Some(f), at.now);
        }
        Ok(found)
    }

    fn lookup_uncached(&self, at: &At, path: &NormPath) -> Result<Lookup, FileError> {
        let rel = path.to_relative();
        let fd = self.open_at(at, rel)?;
        let st = rustix::fs::fstat(&fd)?;
        let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
        match kind {
            rustix::fs::FileType::RegularFile => {
                if path.trailing_slash {
                    // "/file.txt/" names no directory.
                    return Err(FileError::NotFound);
                }
                Ok(Lookup::File(regular(fd, &st, rel)))
            }
            rustix::fs::FileType::Directory => {
                if !path.trailing_slash && !path.is_root() {
                    let mut url = path.clone();
                    url.trailing_slash = true;
                    return Ok(Lookup::Redirect(url.to_url()));
                }
                match self.open_at(at, &rel.join("index.html")) {
                    Ok(ifd) => {
                        let ist = rustix::fs::fstat(&ifd)?;
                        if rustix::fs::FileType::from_raw_mode(ist.st_mode)
                            == rustix::fs::FileType::RegularFile
                        {
                            return Ok(Lookup::File(regular(ifd, &ist, Path::new("index.html"))));
                        }
                        Err(FileError::Forbidden)
                    }
                    Err(rustix::io::Errno::NOENT) if self.autoindex => {
                        Ok(Lookup::Listing(listing(fd, path)?))
                    }
                    Err(rustix::io::Errno::NOENT) => Err(FileError::Forbidden),
                    Err(e) => Err(e.into()),
                }
            }
            // FIFOs, sockets, devices: never served.
            _ => Err(FileError::Forbidden),
        }
    }
}

fn regular(fd: OwnedFd, st: &rustix::fs::Stat, name: &Path) -> OpenFile {
    OpenFile {
        file: Arc::new(File::from(fd)),
        size: st.st_size as u64,
        mtime: (st.st_mtime, st.st_mtime_nsec as i64),
        validators: Validators::new(st.st_size as u64, st.st_mtime, st.st_mtime_nsec as i64),
        content_type: content_type(name),
        encoding: None,
    }
}

/// `Content-Type` from the file name's extension.
pub fn content_type(name: &Path) -> &'static str {
    let Some(ext) = name.extension().and_then(|e| e.to_str()) else {
        return "application/octet-stream";
    };
    // mime_guess searches a table of ~1,000 extensions, case-insensitively;
    // a worker mostly serves the same few types, so remember the last.
    type Last = Cell<([u8; 16], usize, &'static str)>;
    thread_local! {
        static LAST: Last = const { Cell::new(([0; 16], usize::MAX, "")) };
    }
    let (cached, len, ct) = LAST.get();
    if cached.get(..len) == Some(ext.as_bytes()) {
        return ct;
    }
    // No charset here: a file's bytes are whatever they are, and a site
    // that knows its text is UTF-8 says so with `charset`.
    let ct = mime_guess::from_ext(ext)
        .first_raw()
        .unwrap_or("application/octet-stream");
    if let Some(dst) = cached_key(ext.as_bytes()) {
        LAST.set((dst, ext.len(), ct));
    }
    ct
}

/// The types whose `Content-Type` names the site's `charset` (nginx's
/// `charset_types`, and the other text formats of the web).
pub const CHARSET_TYPES: &[&str] = &[
    "text/html",
    "text/plain",
    "text/css",
    "text/xml",
    "text/javascript",
    "text/markdown",
    "text/csv",
    "application/javascript",
    "application/json",
    "application/xml",
    "application/rss+xml",
    "application/atom+xml",
    "image/svg+xml",
];

/// A site's `charset`, as the `Content-Type` values that carry it, made
/// once so that a response only picks one.
#[derive(Debug, Clone, Default)]
pub struct Charset {
    typed: Vec<(&'static str, String)>,
}

impl Charset {
    pub fn new(charset: Option<&str>) -> Charset {
        Charset {
            typed: charset.map_or_else(Vec::new, |c| {
                CHARSET_TYPES
                    .iter()
                    .map(|t| (*t, format!("{t}; charset={c}")))
                    .collect()
            }),
        }
    }

    /// `content_type`, with the charset if the site has one and the type
    /// is text.
    pub fn apply<'a>(&'a self, content_type: &'a str) -> &'a str {
        self.typed
            .iter()
            .find(|(t, _)| *t == content_type)
            .map_or(content_type, |(_, v)| v.as_str())
    }
}

/// An extension as a cache key, if it is short enough to be one.
fn cached_key(ext: &[u8]) -> Option<[u8; 16]> {
    let mut key = [0u8; 16];
    key.get_mut(..ext.len())?.copy_from_slice(ext);
    Some(key)
}

/// Most entries and bytes in one listing: a page is built in memory per
/// request, so a huge directory must not cost a huge page.
const LISTING_ENTRIES: usize = if cfg!(test) { 40 } else { 20_000 };
const LISTING_BYTES: usize = 4 << 20;

fn listing(dir: OwnedFd, path: &NormPath) -> Result<String, FileError> {
    let mut names: Vec<(Vec<u8>, bool)> = Vec::new();
    let mut d = rustix::fs::Dir::read_from(&dir)?;
    let mut more = false;
    for entry in d.by_ref() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        if names.len() == LISTING_ENTRIES {
            more = true;
            break;
        }
        let is_dir = entry.file_type() == rustix::fs::FileType::Directory;
        names.push((name.to_vec(), is_dir));
    }
    names.sort();
    let title = escape(&String::from_utf8_lossy(path.to_url().as_bytes()));
    let mut html = format!("<html>\r\n<head><title>Index of {title}</title></head>\r\n<body>\r\n<h1>Index of {title}</h1><hr><pre><a href=\"../\">../</a>\r\n");
    for (name, is_dir) in names {
        if html.len() > LISTING_BYTES {
            more = true;
            break;
        }
        // The link carries the name's own bytes (percent-encoded, so a
        // name that is not UTF-8 still resolves); the text is readable.
        let href = path.child(&name, is_dir).to_url();
        let slash = if is_dir { "/" } else { "" };
        let _ = write!(
            html,
            "<a href=\"{}\">{}{slash}</a>\r\n",
            escape(&href),
            escape(&String::from_utf8_lossy(&name))
        );
    }
    if more {
        html.push_str("(more entries not listed)\r\n");
    }
    html.push_str("</pre><hr></body>\r\n</html>\r\n");
    Ok(html)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::path::normalize;

    fn setup() -> (tempfile::TempDir, tempfile::TempDir) {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("a.txt"), "hello").unwrap();
        std::fs::create_dir(root.path().join("sub")).unwrap();
        std::fs::write(root.path().join("sub/index.html"), "<p>").unwrap();
        std::fs::create_dir(root.path().join("empty")).unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root.path().join("out")).unwrap();
        std::os::unix::fs::symlink("a.txt", root.path().join("in")).unwrap();
        (root, outside)
    }

    fn look(r: &DocRoot, p: &str) -> Result<Lookup, FileError> {
        r.lookup(&normalize(p).unwrap())
    }

    #[test]
    fn files_dirs_and_symlinks() {
        let (root, _o) = setup();
        let r = DocRoot::open(root.path(), false, false).unwrap();
        match look(&r, "/a.txt").unwrap() {
            Lookup::File(f) => {
                assert_eq!(f.size, 5);
                assert_eq!(f.content_type, "text/plain");
            }
            _ => panic!(),
        }
        assert!(matches!(look(&r, "/in").unwrap(), Lookup::File(_)));
        assert!(matches!(look(&r, "/out"), Err(FileError::Forbidden)));
        assert!(matches!(look(&r, "/nope"), Err(FileError::NotFound)));
        assert!(matches!(look(&r, "/a.txt/"), Err(FileError::NotFound)));
        assert!(matches!(look(&r, "/sub").unwrap(), Lookup::Redirect(u) if u == "/sub/"));
        assert!(matches!(look(&r, "/sub/").unwrap(), Lookup::File(_)));
        assert!(matches!(look(&r, "/empty/"), Err(FileError::Forbidden)));
        let r = DocRoot::open(root.path(), true, true).unwrap();
        assert!(matches!(look(&r, "/out").unwrap(), Lookup::File(_)));
        match look(&r, "/empty/").unwrap() {
            Lookup::Listing(h) => assert!(h.contains("Index of /empty/")),
            _ => panic!(),
        }
        match look(&r, "/").unwrap() {
            Lookup::Listing(h) => assert!(h.contains("<a href=\"/a.txt\">a.txt</a>")),
            _ => panic!(),
        }
    }

    #[test]
    fn content_types_survive_the_cache() {
        for _ in 0..2 {
            for (name, ct) in [
                ("a.txt", "text/plain"),
                ("a.TXT", "text/plain"),
                ("b.html", "text/html"),
                ("c.css", "text/css"),
                ("c.css", "text/css"),
                ("d", "application/octet-stream"),
                ("e.unknown-ext", "application/octet-stream"),
                ("f.an-extension-longer-than-16", "application/octet-stream"),
                ("g.png", "image/png"),
                ("h.", "application/octet-stream"),
            ] {
                assert_eq!(content_type(Path::new(name)), ct, "{name}");
            }
        }
    }

    #[test]
    fn charset_only_where_set_and_only_for_text() {
        let none = Charset::new(None);
        assert_eq!(none.apply("text/html"), "text/html");
        let utf8 = Charset::new(Some("utf-8"));
        assert_eq!(utf8.apply("text/html"), "text/html; charset=utf-8");
        assert_eq!(utf8.apply("image/svg+xml"), "image/svg+xml; charset=utf-8");
        assert_eq!(utf8.apply("image/png"), "image/png");
        let js = content_type(Path::new("app.js"));
        assert!(utf8.apply(js).ends_with("; charset=utf-8"), "{js}");
    }

    #[test]
    fn precompressed_siblings_stay_beneath_the_root() {
        use crate::http::encoding::Encoding::{Br, Gzip, Zstd};
        let (root, outside) = setup();
        let d = root.path();
        std::fs::write(d.join("app.js"), "plain").unwrap();
        std::fs::write(d.join("app.js.br"), "brotli!").unwrap();
        std::fs::write(d.join("app.js.gz"), "gz").unwrap();
        std::fs::write(d.join("only.css.gz"), "gz").unwrap();
        std::fs::write(d.join("sub/index.html.gz"), "gz").unwrap();
        std::fs::write(d.join("a.txt.gz.gz"), "x").unwrap();
        std::fs::create_dir(d.join("a.txt.br")).unwrap();
        std::fs::write(outside.path().join("leak.gz"), "secret").unwrap();
        std::os::unix::fs::symlink(outside.path().join("leak.gz"), d.join("a.txt.gz")).unwrap();
        let r = DocRoot::open(d, false, false).unwrap();
        let get = |p: &str, ae: &str| match r.lookup_coded(
            &normalize(p).unwrap(),
            Some(ae),
            &[Br, Zstd, Gzip],
        ) {
            Ok(Lookup::File(f)) => Ok((f.encoding, f.size, f.content_type, f.validators.etag)),
            Ok(_) => panic!("not a file"),
            Err(e) => Err(e.status()),
        };
        let (enc, size, ct, tag) = get("/app.js", "gzip, br").unwrap();
        assert_eq!((enc, size), (Some(Br), 7));
        assert_eq!(ct, content_type(Path::new("app.js")));
        assert!(tag.as_str().ends_with("-br\""), "{tag}");
        assert_eq!(get("/app.js", "gzip").unwrap().0, Some(Gzip));
        // No zstd sibling: the next coding the client takes, else the
        // file itself.
        assert_eq!(get("/app.js", "zstd").unwrap().0, None);
        assert_eq!(get("/app.js", "zstd, gzip;q=0.5").unwrap().0, Some(Gzip));
        assert_eq!(get("/app.js", "br;q=0, gzip;q=0").unwrap().0, None);
        let plain = get("/app.js", "identity").unwrap();
        assert_eq!((plain.0, plain.1), (None, 5));
        assert_ne!(plain.3.as_str(), tag.as_str());
        // A sibling without its file is not served.
        assert_eq!(get("/only.css", "gzip").unwrap_err(), 404);
        assert_eq!(get("/only.css.gz", "gzip").unwrap().0, None);
        // A directory's index.html.
        let (enc, _, ct, _) = get("/sub/", "gzip").unwrap();
        assert_eq!((enc, ct), (Some(Gzip), "text/html"));
        // A symlink out of the root and a directory are not siblings.
        assert_eq!(get("/a.txt", "gzip, br").unwrap().0, None);
        let r = DocRoot::open(d, true, false).unwrap();
        let f = r.lookup_coded(&normalize("/a.txt").unwrap(), Some("gzip"), &[Gzip]);
        assert!(matches!(f, Ok(Lookup::File(f)) if f.encoding == Some(Gzip) && f.size == 6));
    }

    #[test]
    fn sockets_are_forbidden_and_listings_bounded_and_exact() {
        use std::os::unix::ffi::OsStrExt;
        let (root, _o) = setup();
        let _sock = std::os::unix::net::UnixListener::bind(root.path().join("sock")).unwrap();
        let odd = std::ffi::OsStr::from_bytes(b"caf\xe9 & <b>");
        std::fs::write(root.path().join("empty").join(odd), "x").unwrap();
        let r = DocRoot::open(root.path(), false, true).unwrap();
        assert!(matches!(look(&r, "/sock"), Err(FileError::Forbidden)));
        // A name that is not UTF-8 is linked by its own bytes.
        let Lookup::Listing(h) = look(&r, "/empty/").unwrap() else {
            panic!()
        };
        let href = "/empty/caf%E9%20&amp;%20%3Cb%3E";
        assert!(
            h.contains(&format!(
                "<a href=\"{href}\">caf\u{fffd} &amp; &lt;b&gt;</a>"
            )),
            "{h}"
        );
        assert!(matches!(
            look(&r, "/empty/caf%E9%20&%20%3Cb%3E").unwrap(),
            Lookup::File(_)
        ));
        assert!(!h.contains("more entries"));
        let many = root.path().join("many");
        std::fs::create_dir(&many).unwrap();
        for i in 0..=LISTING_ENTRIES {
            std::fs::write(many.join(format!("f{i}")), "").unwrap();
        }
        let Lookup::Listing(h) = look(&r, "/many/").unwrap() else {
            panic!()
        };
        assert_eq!(h.matches("<a href=\"/many/f").count(), LISTING_ENTRIES);
        assert!(h.contains("(more entries not listed)"));
    }

    fn file(found: Result<Lookup, FileError>) -> OpenFile {
        match found {
            Ok(Lookup::File(f)) => f,
            Ok(_) => panic!("not a file"),
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn kept_files_follow_writes_renames_and_deletes() {
        use std::time::Duration;
        cache::install_for_test(100, Duration::from_secs(3600));
        let (root, _o) = setup();
        let d = root.path();
        let r = DocRoot::open(d, false, false).unwrap();
        let first = file(look(&r, "/a.txt"));
        let again = file(look(&r, "/a.txt"));
        assert!(Arc::ptr_eq(&first.file, &again.file), "not kept");
        assert_eq!(
            again.validators.etag.as_str(),
            first.validators.etag.as_str()
        );
        // Written in place: the same descriptor, the new size and validators.
        std::fs::write(d.join("a.txt"), "hello, world").unwrap();
        let written = file(look(&r, "/a.txt"));
        assert!(Arc::ptr_eq(&first.file, &written.file));
        assert_eq!(written.size, 12);
        assert_ne!(
            written.validators.etag.as_str(),
            first.validators.etag.as_str()
        );
        // Replaced by a rename (how deploy tools write): seen at once.
        std::fs::write(d.join("a.new"), "new!").unwrap();
        std::fs::rename(d.join("a.new"), d.join("a.txt")).unwrap();
        let renamed = file(look(&r, "/a.txt"));
        assert!(!Arc::ptr_eq(&first.file, &renamed.file));
        assert_eq!(renamed.size, 4);
        // Deleted: gone at once, and its descriptor let go.
        std::fs::remove_file(d.join("a.txt")).unwrap();
        assert!(matches!(look(&r, "/a.txt"), Err(FileError::NotFound)));
        // A directory's index is kept under the directory's path.
        let index = file(look(&r, "/sub/"));
        assert!(Arc::ptr_eq(&index.file, &file(look(&r, "/sub/")).file));
        assert!(matches!(look(&r, "/sub").unwrap(), Lookup::Redirect(_)));
        // Another root with the same names gets its own files.
        let (other, _o2) = setup();
        std::fs::write(other.path().join("sub/index.html"), "other root").unwrap();
        let r2 = DocRoot::open(other.path(), false, false).unwrap();
        assert_eq!(file(look(&r2, "/sub/")).size, 10);
        assert_eq!(file(look(&r, "/sub/")).size, 3);
        cache::install_for_test(0, Duration::ZERO);
    }

    #[test]
    fn what_a_hit_cannot_see_waits_for_the_entry_to_expire() {
        use crate::http::encoding::Encoding::Gzip;
        use std::time::Duration;
        let valid = Duration::from_secs(3600);
        cache::install_for_test(100, valid);
        let (root, _o) = setup();
        let d = root.path();
        let r = DocRoot::open(d, false, false).unwrap();
        // A symlink turned to another file that is still linked.
        assert_eq!(file(look(&r, "/in")).size, 5);
        std::os::unix::fs::symlink("sub/index.html", d.join("in.new")).unwrap();
        std::fs::rename(d.join("in.new"), d.join("in")).unwrap();
        assert_eq!(file(look(&r, "/in")).size, 5, "kept until it expires");
        // A sibling that appears.
        let coded = |r: &DocRoot| {
            file(r.lookup_coded(&normalize("/a.txt").unwrap(), Some("gzip"), &[Gzip])).encoding
        };
        assert_eq!(coded(&r), None);
        std::fs::write(d.join("a.txt.gz"), "gz").unwrap();
        assert_eq!(coded(&r), None, "kept until it expires");
        // Both are looked up again once the entries expire.
        cache::install_for_test(100, valid);
        assert_eq!(file(look(&r, "/in")).size, 3);
        assert_eq!(coded(&r), Some(Gzip));
        // Expiry itself, and the bound on entries.
        let mut c = cache::Cache::new(2, valid);
        let now = Instant::now();
        let id = r.at(now).key;
        let f = file(look(&r, "/a.txt"));
        c.put(
            id,
            Kind::Path {
                trailing_slash: false,
            },
            b"a.txt",
            Some(&f),
            now,
        );
        let kind = Kind::Path {
            trailing_slash: false,
        };
        assert!(matches!(c.get(id, kind, b"a.txt", now), Hit::File(_)));
        assert!(matches!(c.get(id, kind, b"a.txt", now + valid), Hit::Miss));
        assert_eq!(c.len(), 0, "an expired entry is let go");
        for name in [&b"x"[..], b"y", b"z"] {
            c.put(id, kind, name, Some(&f), now);
        }
        assert_eq!(c.len(), 2);
        c.put(id, kind, b"z", Some(&f), now + valid);
        assert_eq!(c.len(), 1, "a full cache sweeps before it takes an entry");
        cache::install_for_test(0, Duration::ZERO);
    }

    #[test]
    fn sites_on_one_root_share_its_directory_not_each_others_links() {
        use std::time::Duration;
        cache::install_for_test(100, Duration::from_secs(3600));
        let (root, _o) = setup();
        let roots: Vec<DocRoot> = (0..50)
            .map(|i| DocRoot::open(root.path(), i % 2 == 0, i % 3 == 0).unwrap())
            .collect();
        // One directory (one descriptor), however many sites and rules.
        let now = Instant::now();
        let first = roots[0].at(now).dir;
        assert!(roots.iter().all(|r| Arc::ptr_eq(&r.at(now).dir, &first)));
        assert!(open_roots() >= 1);
        // A site that follows links out of the root caches what it found
        // there; one that does not is not given it from the cache.
        let (follows, beneath) = (&roots[0], &roots[1]);
        assert!(matches!(look(follows, "/out").unwrap(), Lookup::File(_)));
        assert!(matches!(look(beneath, "/out"), Err(FileError::Forbidden)));
        // The same rules share the cache.
        let a = file(look(&roots[1], "/a.txt"));
        assert!(Arc::ptr_eq(&a.file, &file(look(&roots[3], "/a.txt")).file));
        cache::install_for_test(0, Duration::ZERO);
    }

    #[test]
    fn a_root_switched_by_symlink_is_served_after_valid() {
        use std::time::Duration;
        let d = tempfile::tempdir().unwrap();
        for (rel, body) in [("release-1", "one"), ("release-2", "two!")] {
            std::fs::create_dir(d.path().join(rel)).unwrap();
            std::fs::write(d.path().join(rel).join("v.txt"), body).unwrap();
        }
        let link = d.path().join("current");
        std::os::unix::fs::symlink("release-1", &link).unwrap();
        let valid = Duration::from_secs(3600);
        cache::install_for_test(100, valid);
        let r = DocRoot::open(&link, false, false).unwrap();
        let t0 = Instant::now();
        let size = |t: Instant| match r
            .lookup_plain(&r.at_within(t, valid), &normalize("/v.txt").unwrap())
        {
            Ok(Lookup::File(f)) => f.size,
            _ => panic!("not a file"),
        };
        assert_eq!(size(t0), 3);
        std::os::unix::fs::symlink("release-2", d.path().join("tmp")).unwrap();
        std::fs::rename(d.path().join("tmp"), &link).unwrap();
        assert_eq!(size(t0), 3, "the root is not looked at on every request");
        // Once valid has passed: the new release, not the old release's
        // kept file (the cache is keyed by the directory).
        assert_eq!(size(t0 + valid), 4);
        assert_eq!(r.path(), d.path().join("release-2").canonicalize().unwrap());
        cache::install_for_test(0, Duration::ZERO);
    }

    #[test]
    fn fifo_is_refused_without_blocking() {
        let (root, _o) = setup();
        let p = root.path().join("fifo");
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        rustix::fs::mkfifoat(rustix::fs::CWD, c.as_c_str(), Mode::from_raw_mode(0o644)).unwrap();
        let r = DocRoot::open(root.path(), false, false).unwrap();
        assert!(matches!(look(&r, "/fifo"), Err(FileError::Forbidden)));
    }
}
