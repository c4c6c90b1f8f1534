//! The open directories of the document roots: one descriptor per distinct
//! directory however many sites name it, kept across a reload for the same
//! path, and counted for the open-file budget.
//!
//! A root is named by a path ([`RootPath`], one per configured path) and
//! served from an open directory ([`OpenDir`], one per (device, inode)).
//! The path is looked at again (a `stat()` following links, compared by
//! device and inode with the open directory) at most once every
//! `open_file_cache_valid`, by the request that finds the time passed: a
//! `current -> release-N` symlink switched by a deploy is served from the
//! new release within that time, with no system call on the other
//! requests. A lookup takes the directory once and keeps it to its end, so
//! a request in flight never mixes two releases.

use super::RootError;
use arc_swap::ArcSwap;
use rustix::fs::{Mode, OFlags};
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Each opened directory's own number, so that the workers' caches never
/// give one directory's file for another's (nor the old release's).
static IDS: AtomicU64 = AtomicU64::new(0);

/// Directories open now (what the open-file budget sets aside for roots).
static OPEN: AtomicUsize = AtomicUsize::new(0);

/// The directories open now, by (device, inode).
static DIRS: Mutex<Option<Registry<(u64, u64), OpenDir>>> = Mutex::new(None);

/// The roots in use, by configured path.
static PATHS: Mutex<Option<Registry<PathBuf, RootPath>>> = Mutex::new(None);

/// Descriptors the document roots hold now: one per distinct directory.
pub fn open_roots() -> u64 {
    OPEN.load(Relaxed) as u64
}

/// Weak references by key, pruned of the dead as it grows.
struct Registry<K, V> {
    map: HashMap<K, Weak<V>>,
    /// Prune when the map reaches this size.
    prune_at: usize,
}

impl<K: std::hash::Hash + Eq, V> Registry<K, V> {
    fn with<R>(slot: &Mutex<Option<Self>>, f: impl FnOnce(&mut Self) -> R) -> R {
        let mut guard = slot.lock().unwrap_or_else(|p| p.into_inner());
        let reg = guard.get_or_insert_with(|| Registry {
            map: HashMap::new(),
            prune_at: 64,
        });
        f(reg)
    }

    fn get(&self, key: &K) -> Option<Arc<V>> {
        self.map.get(key).and_then(Weak::upgrade)
    }

    fn insert(&mut self, key: K, value: &Arc<V>) {
        if self.map.len() >= self.prune_at {
            self.map.retain(|_, w| w.strong_count() > 0);
            self.prune_at = (self.map.len() * 2).max(64);
        }
        self.map.insert(key, Arc::downgrade(value));
    }
}

/// An open directory requests are resolved beneath.
pub(super) struct OpenDir {
    pub(super) id: u64,
    pub(super) fd: OwnedFd,
    dev: u64,
    ino: u64,
    /// Where it was found (for messages).
    pub(super) path: PathBuf,
}

impl Drop for OpenDir {
    fn drop(&mut self) {
        OPEN.fetch_sub(1, Relaxed);
    }
}

/// An I/O error opening `path` as a root, with the fix it calls for.
pub(super) fn root_error(path: &Path, source: std::io::Error) -> RootError {
    match rustix::io::Errno::from_io_error(&source) {
        Some(rustix::io::Errno::MFILE) => RootError::ProcessFiles {
            path: path.into(),
            source,
        },
        Some(rustix::io::Errno::NFILE) => RootError::SystemFiles {
            path: path.into(),
            source,
        },
        _ => RootError::Open {
            path: path.into(),
            source,
        },
    }
}

/// Open the directory `path` leads to now, or share the one already open
/// (another path to it, or an earlier build's).
fn open_dir(path: &Path) -> Result<Arc<OpenDir>, RootError> {
    let resolved = path.canonicalize().map_err(|e| root_error(path, e))?;
    let fd = rustix::fs::open(
        &resolved,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| root_error(&resolved, e.into()))?;
    let st = rustix::fs::fstat(&fd).map_err(|e| root_error(&resolved, e.into()))?;
    let key = (st.st_dev, st.st_ino);
    Ok(Registry::with(&DIRS, |reg| {
        if let Some(dir) = reg.get(&key) {
            // `fd` is closed here: the one already open serves.
            return dir;
        }
        OPEN.fetch_add(1, Relaxed);
        let dir = Arc::new(OpenDir {
            id: IDS.fetch_add(1, Relaxed),
            fd,
            dev: key.0,
            ino: key.1,
            path: resolved,
        });
        reg.insert(key, &dir);
        dir
    }))
}

/// A configured root path and the directory it leads to.
pub(super) struct RootPath {
    configured: PathBuf,
    current: ArcSwap<OpenDir>,
    /// When the path is looked at next, as nanoseconds after `epoch`.
    next_check: AtomicU64,
    epoch: Instant,
    /// Problems a flood of requests could repeat.
    log: crate::lograte::LogLimit,
}

impl RootPath {
    /// The root for `path`: the one in use already (looked at again now,
    /// so that a reload sees where a symlink leads), or a new one.
    pub(super) fn get(path: &Path) -> Result<Arc<RootPath>, RootError> {
        let found = Registry::with(&PATHS, |reg| reg.get(&path.to_path_buf()));
        if let Some(root) = found {
            root.check_now()?;
            return Ok(root);
        }
        let dir = open_dir(path)?;
        let root = Arc::new(RootPath {
            configured: path.into(),
            current: ArcSwap::new(dir),
            next_check: AtomicU64::new(0),
            epoch: Instant::now(),
            log: crate::lograte::LogLimit::new(crate::lograte::EVERY),
        });
        Ok(Registry::with(&PATHS, |reg| {
            // Two builds at once (a reload and an ACME rebuild) may both
            // have opened it: the first one registered serves.
            if let Some(other) = reg.get(&path.to_path_buf()) {
                return other;
            }
            reg.insert(path.into(), &root);
            root
        }))
    }

    /// The directory to resolve a request beneath, at `now`; the path is
    /// looked at again first if `valid` has passed since it last was.
    pub(super) fn current(&self, now: Instant, valid: Duration) -> arc_swap::Guard<Arc<OpenDir>> {
        let t = now.saturating_duration_since(self.epoch).as_nanos() as u64;
        let next = self.next_check.load(Relaxed);
        if t >= next {
            let after = t.saturating_add(valid.as_nanos().min(u64::MAX as u128) as u64);
            // One request looks; the others go on with what is open.
            if self
                .next_check
                .compare_exchange(next, after, Relaxed, Relaxed)
                .is_ok()
            {
                if let Err(e) = self.check_now() {
                    if let Some(left_out) = self.log.allow("root") {
                        tracing::warn!(
                            "{e}; still serving {}{left_out}",
                            self.current.load().path.display()
                        );
                    }
                }
            }
        }
        self.current.load()
    }

    /// The directory served now (for messages).
    pub(super) fn current_path(&self) -> PathBuf {
        self.current.load().path.clone()
    }

    /// Where the path leads now, without waiting for the time to pass.
    pub(super) fn check_now(&self) -> Result<(), RootError> {
        let st = rustix::fs::stat(&self.configured)
            .map_err(|e| root_error(&self.configured, e.into()))?;
        let now = self.current.load();
        if (st.st_dev, st.st_ino) == (now.dev, now.ino) {
            return Ok(());
        }
        let dir = open_dir(&self.configured)?;
        if dir.id != now.id {
            tracing::info!(
                "root {} now leads to {} (was {})",
                self.configured.display(),
                dir.path.display(),
                now.path.display()
            );
            self.current.store(dir);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn switch(link: &Path, to: &Path) {
        let tmp = link.with_extension("tmp");
        std::os::unix::fs::symlink(to, &tmp).unwrap();
        std::fs::rename(&tmp, link).unwrap();
    }

    #[test]
    fn paths_to_one_directory_share_one_descriptor() {
        let d = tempfile::tempdir().unwrap();
        let www = d.path().join("www");
        std::fs::create_dir(&www).unwrap();
        std::os::unix::fs::symlink(&www, d.path().join("alias")).unwrap();
        let a = RootPath::get(&www).unwrap();
        let b = RootPath::get(&www).unwrap();
        assert!(Arc::ptr_eq(&a, &b), "the same path is one root");
        let c = RootPath::get(&d.path().join("alias")).unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        let now = Instant::now();
        let (da, dc) = (
            a.current(now, Duration::ZERO),
            c.current(now, Duration::ZERO),
        );
        assert!(Arc::ptr_eq(&da, &dc), "two paths to one directory share it");
        // Let go with its last user, and opened afresh after.
        let id = da.id;
        drop((a, b, c, da, dc));
        let again = RootPath::get(&www).unwrap();
        assert_ne!(again.current(now, Duration::ZERO).id, id);
    }

    #[test]
    fn a_switched_symlink_is_followed_once_valid_has_passed() {
        let d = tempfile::tempdir().unwrap();
        let (r1, r2) = (d.path().join("release-1"), d.path().join("release-2"));
        std::fs::create_dir(&r1).unwrap();
        std::fs::create_dir(&r2).unwrap();
        let link = d.path().join("current");
        std::os::unix::fs::symlink(&r1, &link).unwrap();
        let root = RootPath::get(&link).unwrap();
        let valid = Duration::from_secs(3600);
        let t0 = Instant::now();
        let first = root.current(t0, valid);
        assert_eq!(first.path, r1.canonicalize().unwrap());
        switch(&link, &r2);
        // Within `valid` of the last look: the open directory, unlooked.
        let held = root.current(t0 + valid / 2, valid);
        assert!(Arc::ptr_eq(&first, &held));
        // Then the path is looked at, and the new release used; the old
        // one stays open for whoever still holds it.
        let new = root.current(t0 + valid, valid);
        assert_eq!(new.path, r2.canonicalize().unwrap());
        assert_ne!(new.id, first.id);
        assert_eq!(first.path, r1.canonicalize().unwrap());
        // A path that leads nowhere for a moment keeps the last directory.
        std::fs::remove_file(&link).unwrap();
        let kept = root.current(t0 + valid * 2, valid);
        assert!(Arc::ptr_eq(&kept, &new));
        switch(&link, &r1);
        // A reload (a new build) looks at once.
        let reloaded = RootPath::get(&link).unwrap();
        assert!(Arc::ptr_eq(&reloaded, &root));
        assert_eq!(
            root.current(t0 + valid * 2, valid).path,
            r1.canonicalize().unwrap()
        );
    }

    #[test]
    fn the_open_file_limit_is_named_as_such() {
        let e = root_error(Path::new("/srv/www"), rustix::io::Errno::MFILE.into());
        let said = e.to_string();
        assert!(said.contains("open-file limit"), "{said}");
        assert!(said.contains("LimitNOFILE"), "{said}");
        assert!(!said.contains("existing, readable directory"), "{said}");
        let said = root_error(Path::new("/srv/www"), rustix::io::Errno::NFILE.into()).to_string();
        assert!(said.contains("fs.file-max"), "{said}");
        let said = root_error(Path::new("/srv/www"), rustix::io::Errno::NOENT.into()).to_string();
        assert!(said.contains("existing, readable directory"), "{said}");
    }
}
