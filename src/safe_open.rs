//! How tlsfront opens a file while it may be root: configuration,
//! certificates, keys, OCSP responses and ticket keys ([`read`]), access
//! logs ([`open_log`]) and the self-signed identity made on first run
//! ([`write_new_private`]) and the pid file ([`write_public`], and
//! [`check_write_public`] for `config check`). Every such open goes through here, so that one
//! place decides what root may follow.
//!
//! The danger is a path another user can change: a link in a directory
//! they can write, pointed at a root-only file, makes root read it, write
//! into it, or hand it out. So, when the effective uid is 0:
//! - a file is read only if it and every directory on the way to it, links
//!   included, belong to root and are writable by nobody else (OpenSSH's
//!   StrictModes rule). A directory writable by others that has the sticky
//!   bit (`/tmp`) is accepted, because others can then neither rename nor
//!   replace an entry that belongs to root (and what lies under it is
//!   checked the same way); OpenSSH refuses even that. Links root made in
//!   root's directories (`/etc/letsencrypt/live`) are followed.
//! - a log is opened without following a link at its name, and only a
//!   regular file with no other name is written; its directory may be
//!   anyone's (nothing in it is followed), the directories above it may
//!   not. Nothing is ever given to another owner.
//!
//! Not root, a file is read as the process may read it: there is nothing
//! to escalate to.

use rustix::fs::{FileType, Mode, OFlags, Stat};
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Component, Path, PathBuf};

/// Why a path was refused. Carried inside an [`io::Error`] (kind `Other`)
/// so that callers keep their `io::Result` and their own wording around it.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error(
        "refusing {path} (tlsfront runs as root here): the {what} {at} belongs to uid {uid}, \
         not root, and that user could change what tlsfront reads or writes through it; chown \
         root {at} and chmod go-w it, or move the file to a directory only root can write"
    )]
    Owner {
        path: PathBuf,
        what: &'static str,
        at: PathBuf,
        uid: u32,
    },
    #[error(
        "refusing {path} (tlsfront runs as root here): the {what} {at} is writable by group \
         or others (mode {mode:04o}), who could swap the file; chown root and chmod go-w {at}, \
         or move the file"
    )]
    Mode {
        path: PathBuf,
        what: &'static str,
        at: PathBuf,
        mode: u32,
    },
    #[error("{path} is {kind}, not a regular file: give the path of a regular file")]
    NotRegular { path: PathBuf, kind: &'static str },
    #[error(
        "{path} is a symbolic link: tlsfront does not follow a link at the name of a file it \
         writes (someone who can write the directory could aim it at any file); give the \
         file's real path, or remove the link"
    )]
    Link { path: PathBuf },
    #[error(
        "{path} has {links} names (hard links): another of them could be a file tlsfront must \
         not write; remove the other names, or remove this one and let tlsfront create the file"
    )]
    HardLinked { path: PathBuf, links: u64 },
    #[error(
        "refusing {path}: it belongs to uid {uid}, not to the user tlsfront runs as; remove it \
         and let tlsfront create it again"
    )]
    NotOurs { path: PathBuf, uid: u32 },
    #[error("{path} was replaced while tlsfront opened it; try again")]
    Changed { path: PathBuf },
    #[error("{path}: more than {MAX_LINKS} symbolic links on the way; give a shorter chain")]
    Loop { path: PathBuf },
    #[error("{path} names no file (it ends in `..` or `/`): give a file's path")]
    NoName { path: PathBuf },
}

impl From<Refused> for io::Error {
    fn from(r: Refused) -> io::Error {
        io::Error::other(r)
    }
}

/// As many links as the kernel follows in one lookup.
const MAX_LINKS: usize = 40;

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// Root, or whoever this process runs as.
fn trusted(uid: u32) -> bool {
    uid == 0 || uid == rustix::process::geteuid().as_raw()
}

fn kind_of(st: &Stat) -> &'static str {
    match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symbolic link",
        FileType::Fifo => "a FIFO (named pipe)",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Unknown => "of an unknown type",
    }
}

#[allow(clippy::unnecessary_cast)] // u32 on some targets
fn nlink(st: &Stat) -> u64 {
    st.st_nlink as u64
}

/// Group or others may write.
fn shared(st: &Stat) -> bool {
    st.st_mode & 0o022 != 0
}

/// Others may add entries but not rename or remove ours.
fn sticky(st: &Stat) -> bool {
    st.st_mode & 0o1000 != 0
}

fn with_path(path: &Path) -> impl Fn(rustix::io::Errno) -> io::Error + '_ {
    move |e| {
        let e = io::Error::from(e);
        io::Error::new(e.kind(), format!("{}: {e}", path.display()))
    }
}

/// The owner and mode rule for a directory on the way to `path`.
fn check_dir(path: &Path, at: &Path, st: &Stat) -> Result<(), Refused> {
    if !trusted(st.st_uid) {
        return Err(Refused::Owner {
            path: path.into(),
            what: "directory",
            at: at.into(),
            uid: st.st_uid,
        });
    }
    if shared(st) && !sticky(st) {
        return Err(Refused::Mode {
            path: path.into(),
            what: "directory",
            at: at.into(),
            mode: st.st_mode & 0o7777,
        });
    }
    Ok(())
}

/// The owner and mode rule for the file itself.
fn check_file(path: &Path, at: &Path, st: &Stat) -> Result<(), Refused> {
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(Refused::NotRegular {
            path: at.into(),
            kind: kind_of(st),
        });
    }
    if !trusted(st.st_uid) {
        return Err(Refused::Owner {
            path: path.into(),
            what: "file",
            at: at.into(),
            uid: st.st_uid,
        });
    }
    if shared(st) {
        return Err(Refused::Mode {
            path: path.into(),
            what: "file",
            at: at.into(),
            mode: st.st_mode & 0o7777,
        });
    }
    Ok(())
}

enum Step {
    Root,
    Parent,
    Name(OsString),
}

/// Push `path`'s components so that the first comes out first.
fn push(todo: &mut Vec<Step>, path: &Path) {
    for c in path.components().rev() {
        todo.push(match c {
            Component::RootDir | Component::Prefix(_) => Step::Root,
            Component::ParentDir => Step::Parent,
            Component::CurDir => continue,
            Component::Normal(n) => Step::Name(n.to_os_string()),
        });
    }
}

/// Resolve `path` one component at a time, as the kernel would, and check
/// everything met on the way: each directory entered ([`check_dir`]) and
/// each link followed (root's or ours; a link's own mode means nothing).
/// With `loose_last`, the directory `path` ends in is not checked (a log
/// directory: nothing in it is followed). Gives the resolved path and what
/// `lstat` said of it.
fn resolve(path: &Path, loose_last: bool) -> io::Result<(PathBuf, Stat)> {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    };
    let mut todo = Vec::new();
    push(&mut todo, &abs);
    let root = Path::new("/");
    let mut cur = PathBuf::from("/");
    let mut st = rustix::fs::lstat(root).map_err(with_path(root))?;
    check_dir(path, root, &st)?;
    let mut links = 0;
    while let Some(step) = todo.pop() {
        let name = match step {
            Step::Root => {
                cur = PathBuf::from("/");
                st = rustix::fs::lstat(root).map_err(with_path(root))?;
                continue;
            }
            // `cur` holds no link, so its parent is the kernel's `..`
            // (and was checked on the way in).
            Step::Parent => {
                cur.pop();
                st = rustix::fs::lstat(&cur).map_err(with_path(&cur))?;
                continue;
            }
            Step::Name(n) => n,
        };
        let next = cur.join(&name);
        let next_st = rustix::fs::lstat(&next).map_err(with_path(&next))?;
        let last = todo.is_empty();
        match FileType::from_raw_mode(next_st.st_mode) {
            FileType::Symlink => {
                if !trusted(next_st.st_uid) {
                    return Err(Refused::Owner {
                        path: path.into(),
                        what: "symbolic link",
                        at: next,
                        uid: next_st.st_uid,
                    }
                    .into());
                }
                links += 1;
                if links > MAX_LINKS {
                    return Err(Refused::Loop { path: path.into() }.into());
                }
                let target = std::fs::read_link(&next)
                    .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", next.display())))?;
                push(&mut todo, &target);
            }
            FileType::Directory => {
                if !(last && loose_last) {
                    check_dir(path, &next, &next_st)?;
                }
                cur = next;
                st = next_st;
            }
            _ if last => {
                cur = next;
                st = next_st;
            }
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::NotADirectory,
                    format!("{}: {} is not a directory", path.display(), next.display()),
                ))
            }
        }
    }
    Ok((cur, st))
}

/// In a server process, a file its parent would not read for it (one the
/// configuration the parent loaded last does not name) and this process
/// may not read either: say how to have the parent read it.
fn not_held(path: &Path, e: io::Error) -> io::Error {
    match crate::privsep::parent() {
        Some(pid) if e.kind() == io::ErrorKind::PermissionDenied => io::Error::new(
            e.kind(),
            format!(
                "{}: {e}; tlsfront's parent process ({pid}) reads for this process only the \
                 files its own last load of the configuration names: reload through it \
                 (systemctl reload tlsfront, or SIGHUP to {pid}), not the server process",
                path.display()
            ),
        ),
        _ => e,
    }
}

/// What `fd` (opened from `path` for writing) is: a regular file with no
/// other name, else the refusal.
fn regular_single(path: &Path, fd: &OwnedFd) -> io::Result<Stat> {
    let st = rustix::fs::fstat(fd).map_err(with_path(path))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err(Refused::NotRegular {
            path: path.into(),
            kind: kind_of(&st),
        }
        .into());
    }
    if st.st_nlink != 1 {
        return Err(Refused::HardLinked {
            path: path.into(),
            links: nlink(&st),
        }
        .into());
    }
    Ok(st)
}

/// `fd` is still what `st` (an `lstat` of `path` before the open) saw.
fn same(path: &Path, fd: &OwnedFd, st: &Stat) -> io::Result<Stat> {
    let now = rustix::fs::fstat(fd).map_err(with_path(path))?;
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) {
        return Err(Refused::Changed { path: path.into() }.into());
    }
    Ok(now)
}

/// Read a whole file: configuration, a certificate, a key, an OCSP
/// response, ticket keys. As root, only through a path no one else can
/// change (see the module doc), and only a regular file.
pub fn read(path: &Path) -> io::Result<Vec<u8>> {
    if let Some(got) = crate::privsep::read(path) {
        // The server process of tlsfront's parent: read as root there.
        return got.map(|mut bytes| std::mem::take(&mut *bytes));
    }
    if !is_root() {
        return std::fs::read(path).map_err(|e| not_held(path, e));
    }
    let (resolved, st) = resolve(path, false)?;
    check_file(path, &resolved, &st)?;
    let fd = rustix::fs::open(
        &resolved,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(with_path(&resolved))?;
    same(&resolved, &fd, &st)?;
    let mut bytes = Vec::with_capacity(st.st_size.max(0) as usize);
    File::from(fd).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// The directory and the name of `path`, for opening the name in it.
fn split(path: &Path) -> io::Result<(&Path, &std::ffi::OsStr)> {
    let Some(name) = path.file_name() else {
        return Err(Refused::NoName { path: path.into() }.into());
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    Ok((dir, name))
}

/// Open an access log for appending, creating it (0640) if missing. The
/// name is never followed as a link, and only a regular file with one name
/// is taken: a link, a FIFO, a device or a second name of some other file
/// is refused, naming the path. No owner is changed: a file created here
/// belongs to whoever created it.
pub fn open_log(path: &Path) -> io::Result<File> {
    if let Some(got) = crate::privsep::open_log(path) {
        return got;
    }
    let (dir, name) = split(path)?;
    let flags = OFlags::WRONLY
        | OFlags::APPEND
        | OFlags::CREATE
        | OFlags::NOFOLLOW
        | OFlags::CLOEXEC
        | OFlags::NONBLOCK
        | OFlags::NOCTTY;
    let mode = Mode::from_raw_mode(0o640);
    let opened = if is_root() {
        let (dir, _) = resolve(dir, true)?;
        let dirfd = rustix::fs::open(
            &dir,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(with_path(&dir))?;
        rustix::fs::openat(&dirfd, name, flags, mode)
    } else {
        rustix::fs::open(path, flags, mode)
    };
    let fd = match opened {
        Ok(fd) => fd,
        // O_NOFOLLOW's answer to a link at the name.
        Err(rustix::io::Errno::LOOP) => return Err(Refused::Link { path: path.into() }.into()),
        // A FIFO nobody reads, or a socket.
        Err(rustix::io::Errno::NXIO) => {
            let kind = rustix::fs::lstat(path).map_or("not a regular file", |st| kind_of(&st));
            return Err(Refused::NotRegular {
                path: path.into(),
                kind,
            }
            .into());
        }
        Err(e) => return Err(with_path(path)(e)),
    };
    regular_single(path, &fd)?;
    // Writes to a regular file never wait anyway; the flag was for the open.
    let flags = rustix::fs::fcntl_getfl(&fd).map_err(with_path(path))?;
    rustix::fs::fcntl_setfl(&fd, flags - OFlags::NONBLOCK).map_err(with_path(path))?;
    Ok(File::from(fd))
}

/// Write `bytes` as the whole of `path`, a file only this user may read
/// (0600), creating its directory (0700) if missing: the self-signed
/// identity made on first run. The name is not followed as a link, and
/// the file must be a regular file of this user's with one name. As root,
/// the directory must be one no one else can write, nor the directories
/// above it (see the module doc).
pub fn write_new_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let (dir, _) = split(path)?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
    write_own(path, bytes, 0o600)
}

/// Write `bytes` as the whole of `path`, readable by all (0644), in an
/// existing directory: the pid file. Checked as [`write_new_private`]
/// checks its file (no link followed, a regular file of this user's with
/// one name, as root in a directory no one else can write).
pub fn write_public(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_own(path, bytes, 0o644)
}

/// Whether [`write_public`] would succeed, deciding without writing: the
/// same directory rules, and a file that exists must be a regular file of
/// this user's with one name that it may write; one that does not, a
/// directory it may write in.
pub fn check_write_public(path: &Path) -> io::Result<()> {
    let (dirfd, name) = own_dir(path)?;
    match rustix::fs::statat(&dirfd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        Err(rustix::io::Errno::NOENT) => rustix::fs::accessat(
            &dirfd,
            ".",
            rustix::fs::Access::WRITE_OK,
            rustix::fs::AtFlags::EACCESS,
        )
        .map_err(with_path(path)),
        Err(e) => Err(with_path(path)(e)),
        Ok(st) => {
            match FileType::from_raw_mode(st.st_mode) {
                FileType::RegularFile => {}
                FileType::Symlink => return Err(Refused::Link { path: path.into() }.into()),
                _ => {
                    return Err(Refused::NotRegular {
                        path: path.into(),
                        kind: kind_of(&st),
                    }
                    .into())
                }
            }
            if st.st_nlink != 1 {
                return Err(Refused::HardLinked {
                    path: path.into(),
                    links: nlink(&st),
                }
                .into());
            }
            if st.st_uid != rustix::process::geteuid().as_raw() {
                return Err(Refused::NotOurs {
                    path: path.into(),
                    uid: st.st_uid,
                }
                .into());
            }
            rustix::fs::accessat(
                &dirfd,
                name,
                rustix::fs::Access::WRITE_OK,
                rustix::fs::AtFlags::EACCESS | rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
            )
            .map_err(with_path(path))
        }
    }
}

/// The directory `path` is in, opened (`O_PATH`) as [`write_own`] and
/// [`check_write_public`] require it, and the file's name in it.
fn own_dir(path: &Path) -> io::Result<(OwnedFd, &std::ffi::OsStr)> {
    let (dir, name) = split(path)?;
    let dir_flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let dirfd = if is_root() {
        let (resolved, st) = resolve(dir, false)?;
        // Sticky or not: anyone who may add a name here could have made
        // this one first.
        if shared(&st) {
            return Err(Refused::Mode {
                path: path.into(),
                what: "directory",
                at: resolved,
                mode: st.st_mode & 0o7777,
            }
            .into());
        }
        let fd =
            rustix::fs::open(&resolved, dir_flags, Mode::empty()).map_err(with_path(&resolved))?;
        same(&resolved, &fd, &st)?;
        fd
    } else {
        rustix::fs::open(dir, dir_flags - OFlags::NOFOLLOW, Mode::empty())
            .map_err(with_path(dir))?
    };
    Ok((dirfd, name))
}

/// [`write_new_private`] and [`write_public`] once the directory exists.
fn write_own(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let (dirfd, name) = own_dir(path)?;
    let fd = rustix::fs::openat(
        &dirfd,
        name,
        OFlags::WRONLY
            | OFlags::CREATE
            | OFlags::NOFOLLOW
            | OFlags::CLOEXEC
            | OFlags::NONBLOCK
            | OFlags::NOCTTY,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| match e {
        rustix::io::Errno::LOOP => Refused::Link { path: path.into() }.into(),
        e => with_path(path)(e),
    })?;
    let st = regular_single(path, &fd)?;
    if st.st_uid != rustix::process::geteuid().as_raw() {
        return Err(Refused::NotOurs {
            path: path.into(),
            uid: st.st_uid,
        }
        .into());
    }
    // Only now, once it is known to be ours alone: a file left from before
    // may have had another mode or more bytes.
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode)).map_err(with_path(path))?;
    rustix::fs::ftruncate(&fd, 0).map_err(with_path(path))?;
    let mut file = File::from(fd);
    file.write_all(bytes)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};

    const NOBODY: u32 = 65534;

    fn root_only() -> bool {
        if is_root() {
            return true;
        }
        eprintln!("skipped: needs root");
        false
    }

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// A root-only file with known content, owner and mode.
    fn secret(dir: &Path) -> PathBuf {
        let p = dir.join("secret");
        std::fs::write(&p, b"root's").unwrap();
        chmod(&p, 0o600);
        p
    }

    fn unchanged(p: &Path) {
        let m = std::fs::symlink_metadata(p).unwrap();
        assert!(m.file_type().is_file());
        assert_eq!(
            (m.uid(), m.mode() & 0o7777),
            (rustix::process::geteuid().as_raw(), 0o600)
        );
        assert_eq!(std::fs::read(p).unwrap(), b"root's");
    }

    #[test]
    fn read_refuses_a_link_in_a_directory_another_user_owns() {
        if !root_only() {
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let target = secret(t.path());
        let theirs = t.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(NOBODY), Some(NOBODY)).unwrap();
        let link = theirs.join("key.pem");
        symlink(&target, &link).unwrap();
        let e = read(&link).unwrap_err().to_string();
        assert!(e.contains(&theirs.display().to_string()), "{e}");
        assert!(e.contains("uid 65534"), "{e}");
        assert!(e.contains("chown root"), "{e}");
        // A link nobody owns, in root's directory: refused too.
        let their_link = t.path().join("their-link");
        symlink(&target, &their_link).unwrap();
        std::os::unix::fs::lchown(&their_link, Some(NOBODY), None).unwrap();
        let e = read(&their_link).unwrap_err().to_string();
        assert!(
            e.contains("symbolic link") && e.contains("uid 65534"),
            "{e}"
        );
        // The file itself, or owned by someone else.
        assert_eq!(read(&target).unwrap(), b"root's");
        let their_file = theirs.join("file");
        std::fs::write(&their_file, b"x").unwrap();
        std::os::unix::fs::chown(&their_file, Some(NOBODY), None).unwrap();
        let e = read(&t.path().join("theirs/../theirs/file"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("uid 65534"), "{e}");
    }

    #[test]
    fn read_refuses_a_group_writable_ancestor_or_file() {
        if !root_only() {
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let shared = t.path().join("shared");
        std::fs::create_dir_all(shared.join("sub")).unwrap();
        let file = shared.join("sub/cert.pem");
        std::fs::write(&file, b"pem").unwrap();
        chmod(&shared, 0o775);
        let e = read(&file).unwrap_err().to_string();
        assert!(e.contains(&shared.display().to_string()), "{e}");
        assert!(e.contains("mode 0775") && e.contains("chmod go-w"), "{e}");
        // Sticky, as /tmp: others cannot rename root's entries.
        chmod(&shared, 0o1777);
        assert_eq!(read(&file).unwrap(), b"pem");
        chmod(&shared, 0o755);
        chmod(&file, 0o664);
        let e = read(&file).unwrap_err().to_string();
        assert!(e.contains("file") && e.contains("mode 0664"), "{e}");
        chmod(&file, 0o644);
        assert_eq!(read(&file).unwrap(), b"pem");
        // Not a regular file.
        let e = read(&shared).unwrap_err().to_string();
        assert!(e.contains("is a directory, not a regular file"), "{e}");
    }

    /// Certbot's layout: live/NAME/cert.pem -> ../../archive/NAME/cert1.pem,
    /// here behind one more link, all root's.
    #[test]
    fn read_follows_root_owned_link_chains() {
        let t = tempfile::tempdir().unwrap();
        let archive = t.path().join("archive/x.test");
        let live = t.path().join("live/x.test");
        std::fs::create_dir_all(&archive).unwrap();
        std::fs::create_dir_all(&live).unwrap();
        std::fs::write(archive.join("cert1.pem"), b"chain").unwrap();
        symlink("../../archive/x.test/cert1.pem", live.join("cert.pem")).unwrap();
        symlink("live/x.test", t.path().join("current")).unwrap();
        assert_eq!(read(&t.path().join("current/cert.pem")).unwrap(), b"chain");
        // Relative to the working directory is resolved as well.
        let e = read(Path::new("no/such/file")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
    }

    #[test]
    fn open_log_refuses_links_fifos_and_hard_links() {
        let t = tempfile::tempdir().unwrap();
        let target = secret(t.path());
        let logs = t.path().join("logs");
        std::fs::create_dir(&logs).unwrap();
        if is_root() {
            std::os::unix::fs::chown(&logs, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        let link = logs.join("link.log");
        symlink(&target, &link).unwrap();
        let e = open_log(&link).unwrap_err().to_string();
        assert!(
            e.contains(&link.display().to_string()) && e.contains("symbolic link"),
            "{e}"
        );
        let fifo = logs.join("fifo.log");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, Mode::from_raw_mode(0o644)).unwrap();
        let e = open_log(&fifo).unwrap_err().to_string();
        assert!(
            e.contains("FIFO") && e.contains("not a regular file"),
            "{e}"
        );
        let hard = logs.join("hard.log");
        std::fs::hard_link(&target, &hard).unwrap();
        let e = open_log(&hard).unwrap_err().to_string();
        assert!(e.contains("hard links") && e.contains("hard.log"), "{e}");
        unchanged(&target);
    }

    #[test]
    fn open_log_creates_0640_and_changes_no_owner() {
        let t = tempfile::tempdir().unwrap();
        let logs = t.path().join("logs");
        std::fs::create_dir(&logs).unwrap();
        if is_root() {
            std::os::unix::fs::chown(&logs, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        let path = logs.join("access.log");
        let mut f = open_log(&path).unwrap();
        f.write_all(b"one\n").unwrap();
        let m = std::fs::metadata(&path).unwrap();
        assert_eq!(m.uid(), rustix::process::geteuid().as_raw());
        // 0640 less the umask.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let umask = status
            .lines()
            .find_map(|l| l.strip_prefix("Umask:"))
            .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
            .unwrap();
        assert_eq!(m.mode() & 0o7777, 0o640 & !umask, "{:o}", m.mode());
        // Appends to what is there, and the descriptor blocks again.
        let mut f = open_log(&path).unwrap();
        f.write_all(b"two\n").unwrap();
        assert!(!rustix::fs::fcntl_getfl(&f)
            .unwrap()
            .contains(OFlags::NONBLOCK));
        assert_eq!(std::fs::read(&path).unwrap(), b"one\ntwo\n");
    }

    #[test]
    fn open_log_refuses_a_directory_above_the_logs_others_can_write() {
        if !root_only() {
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let theirs = t.path().join("theirs");
        std::fs::create_dir_all(theirs.join("logs")).unwrap();
        std::os::unix::fs::chown(&theirs, Some(NOBODY), Some(NOBODY)).unwrap();
        let e = open_log(&theirs.join("logs/access.log"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&theirs.display().to_string()) && e.contains("uid 65534"),
            "{e}"
        );
        assert!(!theirs.join("logs/access.log").exists());
    }

    #[test]
    fn write_new_private_writes_0600_in_a_0700_directory() {
        let t = tempfile::tempdir().unwrap();
        let key = t.path().join("new/dir/key.pem");
        write_new_private(&key, b"first, longer").unwrap();
        write_new_private(&key, b"second").unwrap();
        assert_eq!(std::fs::read(&key).unwrap(), b"second");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
        assert_eq!(mode(&key), 0o600);
        assert_eq!(mode(&t.path().join("new/dir")), 0o700);
        // A link at the name is not followed.
        let target = secret(t.path());
        let link = t.path().join("new/dir/cert.pem");
        symlink(&target, &link).unwrap();
        let e = write_new_private(&link, b"x").unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        unchanged(&target);
    }

    #[test]
    fn write_new_private_refuses_a_directory_others_can_write() {
        if !root_only() {
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("data");
        std::fs::create_dir(&dir).unwrap();
        chmod(&dir, 0o1777);
        let e = write_new_private(&dir.join("key.pem"), b"k")
            .unwrap_err()
            .to_string();
        assert!(e.contains("mode 1777"), "{e}");
        chmod(&dir, 0o700);
        std::os::unix::fs::chown(&dir, Some(NOBODY), None).unwrap();
        let e = write_new_private(&dir.join("key.pem"), b"k")
            .unwrap_err()
            .to_string();
        assert!(e.contains("uid 65534"), "{e}");
        assert!(!dir.join("key.pem").exists());
    }
}
