//! The document root: turning a normalised request path into an open file,
//! a redirect, or a directory listing — never anything outside the root.
//!
//! Every open is `openat2()` relative to a directory descriptor taken at
//! startup, with `RESOLVE_BENEATH` (symlinks may not lead out of the root;
//! `..` was already refused by `http::path`) and `RESOLVE_NO_MAGICLINKS`.
//! Files are opened `O_NONBLOCK` so a FIFO cannot stall a worker, and only
//! regular files are served.

use crate::http::conditional::Validators;
use crate::http::path::NormPath;
use rustix::fs::{Mode, OFlags, ResolveFlags};
use std::cell::Cell;
use std::fmt::Write as _;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// Where files come from, and how strictly.
pub struct DocRoot {
    dir: OwnedFd,
    path: PathBuf,
    resolve: ResolveFlags,
    autoindex: bool,
}

/// A regular file ready to send.
pub struct OpenFile {
    pub file: File,
    pub size: u64,
    pub validators: Validators,
    pub content_type: &'static str,
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
    #[error("cannot serve {path}: this kernel lacks openat2() (Linux >= 5.6 needed for safe path resolution)")]
    NoOpenat2 { path: PathBuf },
}

impl DocRoot {
    pub fn open(
        path: &Path,
        follow_symlinks_outside: bool,
        autoindex: bool,
    ) -> Result<DocRoot, RootError> {
        let path = path.canonicalize().map_err(|source| RootError::Open {
            path: path.into(),
            source,
        })?;
        let dir = rustix::fs::open(
            &path,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| RootError::Open {
            path: path.clone(),
            source: e.into(),
        })?;
        let resolve = if follow_symlinks_outside {
            ResolveFlags::NO_MAGICLINKS
        } else {
            ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS
        };
        let root = DocRoot {
            dir,
            path,
            resolve,
            autoindex,
        };
        match root.open_at(Path::new(".")) {
            Err(rustix::io::Errno::NOSYS) => Err(RootError::NoOpenat2 { path: root.path }),
            Err(e) => Err(RootError::Open {
                path: root.path,
                source: e.into(),
            }),
            Ok(_) => Ok(root),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn open_at(&self, rel: &Path) -> Result<OwnedFd, rustix::io::Errno> {
        rustix::fs::openat2(
            &self.dir,
            rel,
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
            Mode::empty(),
            self.resolve,
        )
    }

    /// Resolve a request path.
    pub fn lookup(&self, path: &NormPath) -> Result<Lookup, FileError> {
        let rel = path.to_relative();
        let fd = self.open_at(rel)?;
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
                match self.open_at(&rel.join("index.html")) {
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
        file: File::from(fd),
        size: st.st_size as u64,
        validators: Validators::new(st.st_size as u64, st.st_mtime, st.st_mtime_nsec as i64),
        content_type: content_type(name),
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
    let ct = match mime_guess::from_ext(ext).first_raw() {
        Some("text/html") => "text/html; charset=utf-8",
        Some("text/plain") => "text/plain; charset=utf-8",
        Some(t) => t,
        None => "application/octet-stream",
    };
    if let Some(dst) = cached_key(ext.as_bytes()) {
        LAST.set((dst, ext.len(), ct));
    }
    ct
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
                assert_eq!(f.content_type, "text/plain; charset=utf-8");
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
                ("a.txt", "text/plain; charset=utf-8"),
                ("a.TXT", "text/plain; charset=utf-8"),
                ("b.html", "text/html; charset=utf-8"),
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
