//! A worker's open files: the regular files its requests found lately,
//! kept open so that the next request for one skips the path walk, the
//! open and the close (what nginx's `open_file_cache` and lighttpd's stat
//! cache do).
//!
//! Every hit is checked with `fstat()` on the kept descriptor, so a file
//! written in place is sent with its new size and validators, and a file
//! deleted or replaced by a rename (its link count fell to 0) is looked up
//! again at once. What a hit cannot see is seen when the entry expires,
//! `open_file_cache_valid` after its lookup: a path that now leads
//! elsewhere (a renamed directory, a changed symlink, a file with a second
//! link replaced under this name), a sibling that appeared, changed
//! permissions. Only regular files, and the absence of a precompressed
//! sibling, are kept: errors, redirects and listings are looked up every
//! time, as nginx does by default.
//!
//! One cache per worker thread, so no lock. Bounded in entries (each holds
//! a descriptor, counted in the open-file budget); a full cache takes no
//! new entry until expired ones are swept. The sweep also runs every
//! second, so an entry no request touches does not keep a deleted file's
//! blocks allocated for long.

use super::OpenFile;
use crate::http::conditional::Validators;
use crate::http::encoding::Encoding;
use crate::server::timer::sleep;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// Entries per worker when `open_file_cache` is not set.
pub const DEFAULT_ENTRIES: usize = 1000;
/// `open_file_cache_valid` when not set, seconds.
pub const DEFAULT_VALID: f64 = 1.0;

/// The process's settings, set once before the workers start (both take a
/// restart to change: the entries are counted in the open-file budget).
static ENTRIES: AtomicUsize = AtomicUsize::new(0);
static VALID_NANOS: AtomicU64 = AtomicU64::new(0);

/// Turn the workers' caches on (`entries` > 0) or off.
pub fn configure(entries: usize, valid: Duration) {
    ENTRIES.store(entries, Relaxed);
    VALID_NANOS.store(valid.as_nanos().min(u64::MAX as u128) as u64, Relaxed);
}

/// Whether the workers keep files open.
pub fn enabled() -> bool {
    ENTRIES.load(Relaxed) > 0
}

thread_local! {
    static CACHE: RefCell<Option<Cache>> = const { RefCell::new(None) };
}

/// Run `f` on this thread's cache, made on first use; `None` when off.
fn with<R>(f: impl FnOnce(&mut Cache) -> R) -> Option<R> {
    CACHE.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            let entries = ENTRIES.load(Relaxed);
            if entries == 0 {
                return None;
            }
            *c = Some(Cache::new(
                entries,
                Duration::from_nanos(VALID_NANOS.load(Relaxed)),
            ));
        }
        c.as_mut().map(f)
    })
}

/// What a lookup is: a request path (with or without its trailing slash),
/// or a precompressed sibling's name.
#[derive(Clone, Copy)]
pub(super) enum Kind {
    Path { trailing_slash: bool },
    Sibling,
}

impl Kind {
    fn tag(self) -> u8 {
        match self {
            Kind::Path {
                trailing_slash: false,
            } => 0,
            Kind::Path {
                trailing_slash: true,
            } => 1,
            Kind::Sibling => 2,
        }
    }
}

/// What the cache knows of a name.
pub(super) enum Hit {
    File(OpenFile),
    /// A sibling that was not there.
    Absent,
    Miss,
}

/// How long a lookup is trusted: a kept file's path, and a root's path
/// (`root`), are looked at again once it has passed.
pub fn valid() -> Duration {
    Duration::from_nanos(VALID_NANOS.load(Relaxed))
}

/// What is kept of `name` beneath the root numbered `root`, at `now` (the
/// lookup's one clock read).
pub(super) fn get(root: u64, kind: Kind, name: &[u8], now: Instant) -> Hit {
    with(|c| c.get(root, kind, name, now)).unwrap_or(Hit::Miss)
}

pub(super) fn put(root: u64, kind: Kind, name: &[u8], file: Option<&OpenFile>, now: Instant) {
    with(|c| c.put(root, kind, name, file, now));
}

/// Close this worker's expired entries.
pub fn sweep() {
    with(|c| c.sweep(Instant::now()));
}

/// How often a worker's cache is swept while it holds anything.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

thread_local! {
    /// Told when this worker's cache takes its first entry.
    static FILLED: Arc<Notify> = Arc::new(Notify::new());
}

/// Sweep this worker's cache every second while it holds entries; while it
/// is empty, wait for one. The wait is the worker's coarse timer, not a
/// tokio timer: a pending tokio timer would put a timeout (and a clock
/// read) on every `epoll_wait` of the worker (see `server::timer`), and a
/// worker with nothing kept open has no timer at all.
pub async fn sweep_every() {
    let filled = FILLED.with(Arc::clone);
    loop {
        if with(|c| c.map.is_empty()).unwrap_or(true) {
            filled.notified().await;
        }
        sleep(SWEEP_EVERY).await;
        sweep();
    }
}

/// A kept file.
struct Kept {
    file: Arc<File>,
    /// Size and modification time at the last check, and the validators
    /// made of them (remade only when they change).
    size: u64,
    mtime: (i64, i64),
    validators: Validators,
    content_type: &'static str,
    encoding: Option<Encoding>,
}

enum Entry {
    File(Kept),
    Absent,
}

struct Slot {
    entry: Entry,
    expires: Instant,
}

pub(super) struct Cache {
    /// foldhash, not std's SipHash: a lookup per request, on a key the
    /// client names; foldhash is seeded per map, and the map is bounded.
    map: HashMap<Box<[u8]>, Slot, foldhash::fast::RandomState>,
    /// The key being built: root, kind, name.
    key: Vec<u8>,
    entries: usize,
    valid: Duration,
}

impl Cache {
    pub(super) fn new(entries: usize, valid: Duration) -> Cache {
        Cache {
            map: HashMap::default(),
            key: Vec::new(),
            entries,
            valid,
        }
    }

    fn key(&mut self, root: u64, kind: Kind, name: &[u8]) -> &[u8] {
        self.key.clear();
        self.key.extend_from_slice(&root.to_ne_bytes());
        self.key.push(kind.tag());
        self.key.extend_from_slice(name);
        &self.key
    }

    pub(super) fn get(&mut self, root: u64, kind: Kind, name: &[u8], now: Instant) -> Hit {
        self.key(root, kind, name);
        let Some(slot) = self.map.get_mut(self.key.as_slice()) else {
            return Hit::Miss;
        };
        if now >= slot.expires {
            self.map.remove(self.key.as_slice());
            return Hit::Miss;
        }
        let kept = match &mut slot.entry {
            Entry::Absent => return Hit::Absent,
            Entry::File(kept) => kept,
        };
        match rustix::fs::fstat(&*kept.file) {
            // Still linked: still what this name leads to, as far as a
            // descriptor can tell.
            Ok(st) if st.st_nlink > 0 => {
                let (size, mtime) = (st.st_size as u64, (st.st_mtime, st.st_mtime_nsec as i64));
                if (size, mtime) != (kept.size, kept.mtime) {
                    kept.size = size;
                    kept.mtime = mtime;
                    kept.validators = Validators::coded(
                        size,
                        mtime.0,
                        mtime.1,
                        kept.encoding.map_or("", |e| e.name()),
                    );
                }
                Hit::File(OpenFile {
                    file: kept.file.clone(),
                    size,
                    mtime,
                    validators: kept.validators.clone(),
                    content_type: kept.content_type,
                    encoding: kept.encoding,
                })
            }
            _ => {
                self.map.remove(self.key.as_slice());
                Hit::Miss
            }
        }
    }

    /// Keep `file` under the name, or (`None`) that there is none.
    pub(super) fn put(
        &mut self,
        root: u64,
        kind: Kind,
        name: &[u8],
        file: Option<&OpenFile>,
        now: Instant,
    ) {
        if self.map.len() >= self.entries {
            self.sweep(now);
            if self.map.len() >= self.entries {
                return;
            }
        }
        let entry = match file {
            None => Entry::Absent,
            Some(f) => Entry::File(Kept {
                file: f.file.clone(),
                size: f.size,
                mtime: f.mtime,
                validators: f.validators.clone(),
                content_type: f.content_type,
                encoding: f.encoding,
            }),
        };
        if self.map.is_empty() {
            FILLED.with(|f| f.notify_one());
        }
        let key: Box<[u8]> = self.key(root, kind, name).into();
        self.map.insert(
            key,
            Slot {
                entry,
                expires: now + self.valid,
            },
        );
    }

    pub(super) fn sweep(&mut self, now: Instant) {
        self.map.retain(|_, s| now < s.expires);
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
pub(super) fn install_for_test(entries: usize, valid: Duration) {
    CACHE.with(|c| *c.borrow_mut() = Some(Cache::new(entries, valid)));
}
