//! Where access-log lines go, and how they get there: the open log files
//! (each distinct path opened once, process-wide, and reopened on SIGUSR1)
//! and each worker thread's buffer of lines not yet written.
//!
//! A worker appends lines to its own buffer (a thread-local: each worker
//! is one thread with a current-thread runtime, so nothing is shared or
//! locked per request) and writes a buffer with one `write()` once it
//! passes [`FLUSH_AT`], [`FLUSH_EVERY`] after its first line (a task per
//! worker), and when the worker stops. Only whole lines are ever written,
//! and a file is open with `O_APPEND`, so workers writing the same file
//! never interleave within a line; a write a full disk cuts short has its
//! fragment of a line cut off again ([`append`]).

use crate::server::timer::sleep;
use arc_swap::ArcSwap;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::Notify;

/// A buffer this full is written at once (nginx's `buffer=64k`).
pub const FLUSH_AT: usize = 64 * 1024;
/// Lines wait at most about this long in a buffer (nginx's `flush=1s`).
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// One destination of lines.
pub struct Sink {
    out: Out,
    /// Write failures are warned about at most once per interval.
    warn: crate::lograte::LogLimit,
    /// Held while a buffer is written: this process's writers of the file
    /// take turns, so that a write cut short can be told apart from the
    /// others' and repaired (see [`append`]).
    state: Mutex<WriteState>,
}

/// What failed writes left to say or to repair.
#[derive(Default)]
struct WriteState {
    /// Lines lost and not yet said in a warning (warnings are
    /// rate-limited; the count is not).
    lost: u64,
    /// A fragment of a line is at the end of the file and could not be
    /// cut off: the next write begins with a newline, so that the lines
    /// after it stay whole.
    unterminated: bool,
}

enum Out {
    Stdout,
    /// The file as opened last; SIGUSR1 swaps in a new open of the path.
    File {
        path: PathBuf,
        file: ArcSwap<File>,
    },
}

/// The files open now, by path, so that sites (and the configuration
/// after a reload) naming the same path share one open file, and SIGUSR1
/// finds them all. Weak: a file no site names any more is closed once the
/// last buffered line for it is written.
static OPEN: Mutex<Option<HashMap<PathBuf, Weak<Sink>>>> = Mutex::new(None);
static STDOUT: Mutex<Weak<Sink>> = Mutex::new(Weak::new());

/// Descriptors the access-log files hold now: one per file some site
/// (or a line not yet written) still uses.
pub fn open_files() -> u64 {
    let open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    open.as_ref()
        .map_or(0, |m| m.values().filter(|w| w.strong_count() > 0).count()) as u64
}

impl Sink {
    fn new(out: Out) -> Sink {
        Sink {
            out,
            warn: crate::lograte::LogLimit::new(crate::lograte::EVERY),
            state: Mutex::new(WriteState::default()),
        }
    }

    /// The shared standard-output sink.
    pub fn stdout() -> Arc<Sink> {
        let mut s = STDOUT.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sink) = s.upgrade() {
            return sink;
        }
        let sink = Arc::new(Sink::new(Out::Stdout));
        *s = Arc::downgrade(&sink);
        sink
    }

    /// The file at `path`, opened for appending unless it already is
    /// ([`crate::safe_open::open_log`]: no link followed, only a regular
    /// file with one name, no owner changed).
    pub fn file(path: &Path) -> std::io::Result<Arc<Sink>> {
        let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        let open = open.get_or_insert_with(HashMap::new);
        open.retain(|_, w| w.strong_count() > 0);
        if let Some(sink) = open.get(path).and_then(Weak::upgrade) {
            return Ok(sink);
        }
        let file = crate::safe_open::open_log(path)?;
        let sink = Arc::new(Sink::new(Out::File {
            path: path.to_path_buf(),
            file: ArcSwap::from_pointee(file),
        }));
        open.insert(path.to_path_buf(), Arc::downgrade(&sink));
        Ok(sink)
    }

    /// The path, or `stdout`.
    pub fn name(&self) -> String {
        match &self.out {
            Out::Stdout => "stdout".into(),
            Out::File { path, .. } => path.display().to_string(),
        }
    }

    /// Write whole lines, normally with one call (a regular file open with
    /// `O_APPEND` takes them at its end, whole, whatever other writers
    /// do). A failure loses lines, with a rate-limited warning that counts
    /// them: the buffer cannot grow without bound while a disk is full.
    /// The file keeps only whole lines (see [`append`]).
    fn write(&self, lines: &[u8]) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let r = match &self.out {
            Out::Stdout => {
                let mut out = std::io::stdout().lock();
                out.write_all(lines)
                    .and_then(|()| out.flush())
                    .map_err(|e| (count_lines(lines), e))
            }
            Out::File { file, .. } => append(&file.load(), lines, &mut state),
        };
        match r {
            Ok(()) if state.lost == 0 => {}
            Ok(()) => {
                // Writing works again: the lines lost since the last
                // warning are said (when a warning may be written).
                if let Some(left_out) = self.warn.allow("access_log_write") {
                    tracing::warn!(
                        "access log {}: {} more line(s) lost before writing worked again{left_out}",
                        self.name(),
                        std::mem::take(&mut state.lost)
                    );
                }
            }
            Err((lost, e)) => {
                state.lost += lost;
                if let Some(left_out) = self.warn.allow("access_log_write") {
                    tracing::warn!(
                        "access log {}: cannot write ({e}): {} line(s) lost; the file keeps \
                         whole lines only{left_out}",
                        self.name(),
                        std::mem::take(&mut state.lost)
                    );
                }
            }
        }
    }
}

/// The number of lines in `lines`.
fn count_lines(lines: &[u8]) -> u64 {
    lines.iter().filter(|&&b| b == b'\n').count() as u64
}

/// Append `lines` (whole lines) to `file`, open with `O_APPEND`, with the
/// sink's lock held. `Err`: how many of them were lost, and why.
///
/// A full disk (or a quota, or the file size limit) can take part of a
/// write: the kernel writes what fits and the next write fails. What went
/// in then ends in a fragment of a line, and the next lines written once
/// there is room would be glued onto it. So the fragment is cut off again:
/// the file's size is read before the write, and if it is exactly that
/// plus what this write took (no other process appended meanwhile), it is
/// truncated back to the last whole line written. Appending with one write
/// per buffer keeps the lines of other writers (another process during an
/// upgrade) whole; only when one of them did write in between is the
/// fragment left (where it is cannot be known), and the next write begins
/// with a newline so that it stands on a line of its own. Checking the
/// free space first would not do: another writer can take it in between,
/// and file systems reserve and round space in ways a count cannot follow.
fn append(file: &File, lines: &[u8], state: &mut WriteState) -> Result<(), (u64, std::io::Error)> {
    if state.unterminated {
        match write_all(file, b"\n") {
            (1, _) => state.unterminated = false,
            (_, e) => return Err((count_lines(lines), e)),
        }
    }
    let before = rustix::fs::fstat(file).ok().map(|s| s.st_size);
    let (done, error) = match write_all(file, lines) {
        (n, _) if n == lines.len() => return Ok(()),
        (n, e) => (n, e),
    };
    let whole = lines[..done]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    if whole < done {
        let cut = before.is_some_and(|before| {
            let only_ours = rustix::fs::fstat(file)
                .is_ok_and(|s| s.st_size.checked_sub(before) == i64::try_from(done).ok());
            only_ours
                && u64::try_from(before)
                    .ok()
                    .and_then(|b| b.checked_add(whole as u64))
                    .is_some_and(|end| rustix::fs::ftruncate(file, end).is_ok())
        });
        state.unterminated = !cut;
    }
    Err((count_lines(&lines[whole..]), error))
}

/// `write()` until all of `bytes` is written or a write fails: the bytes
/// written, and the failure (meaningless when all were written).
fn write_all(file: &File, bytes: &[u8]) -> (usize, std::io::Error) {
    let mut done = 0;
    while done < bytes.len() {
        match rustix::io::write(file, &bytes[done..]) {
            Ok(0) => return (done, std::io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return (done, e.into()),
        }
    }
    (done, std::io::ErrorKind::Other.into())
}

/// SIGUSR1: open every log file again at its path (logrotate has renamed
/// the old one) and write to the new one from now on; what workers still
/// buffer goes to the new file. A file still at its path stays open as it
/// is. A file that cannot be opened keeps the old one, with a warning.
/// Returns (reopened, failed).
pub fn reopen_all() -> (usize, usize) {
    let sinks: Vec<Arc<Sink>> = {
        let open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
        open.iter()
            .flat_map(|m| m.values())
            .filter_map(Weak::upgrade)
            .collect()
    };
    let (mut ok, mut failed) = (0, 0);
    for sink in sinks {
        let Out::File { path, file } = &sink.out else {
            continue;
        };
        // The very file still at its path (logrotate left it, e.g. by
        // `notifempty` beside rotated ones): nothing to reopen, and the
        // user tlsfront runs as may not be able to open root's file again.
        if still_at(path, &file.load()) {
            ok += 1;
            continue;
        }
        match crate::safe_open::open_log(path) {
            Ok(f) => {
                file.store(Arc::new(f));
                ok += 1;
            }
            Err(e) => {
                failed += 1;
                tracing::warn!(
                    "SIGUSR1: cannot reopen the access log: {e}; still writing to the file \
                     open before"
                );
            }
        }
    }
    (ok, failed)
}

/// `path` (not followed, were it a link) is the file `file` has open.
fn still_at(path: &Path, file: &File) -> bool {
    match (rustix::fs::lstat(path), rustix::fs::fstat(file)) {
        (Ok(a), Ok(b)) => (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino),
        _ => false,
    }
}

/// One worker's lines not yet written, per destination (a handful: a
/// linear search beats hashing).
#[derive(Default)]
struct Pending {
    bufs: Vec<(Arc<Sink>, Vec<u8>)>,
    /// A line came since the last flush, and the flushing task was told.
    armed: bool,
}

impl Pending {
    fn flush(&mut self) {
        self.armed = false;
        for (sink, buf) in &mut self.bufs {
            if !buf.is_empty() {
                sink.write(buf);
                buf.clear();
            }
        }
        // A sink only this buffer still holds belongs to no site any more
        // (a reload dropped it): let its file close.
        self.bufs.retain(|(sink, _)| Arc::strong_count(sink) > 1);
    }
}

impl Drop for Pending {
    /// The last flush, when the thread ends: a worker that ends without
    /// its explicit flush (a panic) still writes what it holds.
    fn drop(&mut self) {
        self.flush();
    }
}

thread_local! {
    static PENDING: RefCell<Pending> = RefCell::new(Pending::default());
    /// Told when a line is buffered after a flush (see [`flush_every`]).
    static BUFFERED: Arc<Notify> = Arc::new(Notify::new());
}

/// Append one line (`line` writes it, newline included) to this thread's
/// buffer for `sink`; write the buffer if it passed [`FLUSH_AT`].
pub fn write(sink: &Arc<Sink>, line: impl FnOnce(&mut Vec<u8>)) {
    let _ = PENDING.try_with(|p| {
        let mut p = p.borrow_mut();
        let i = match p.bufs.iter().position(|(s, _)| Arc::ptr_eq(s, sink)) {
            Some(i) => i,
            None => {
                p.bufs
                    .push((sink.clone(), Vec::with_capacity(FLUSH_AT + 1024)));
                p.bufs.len() - 1
            }
        };
        if !p.armed {
            p.armed = true;
            let _ = BUFFERED.try_with(|b| b.notify_one());
        }
        let (sink, buf) = &mut p.bufs[i];
        line(buf);
        if buf.len() >= FLUSH_AT {
            sink.write(buf);
            buf.clear();
        }
    });
}

/// Write everything this thread has buffered.
pub fn flush() {
    let _ = PENDING.try_with(|p| p.borrow_mut().flush());
}

/// A worker's flushing task: [`FLUSH_EVERY`] after a line is buffered,
/// write what its buffer holds. Runs on the worker's own runtime, so on its
/// thread. The wait is the worker's coarse timer (a tick late at most),
/// armed only while lines wait: a pending tokio timer would put a timeout
/// (and clock reads) on every `epoll_wait` of the worker, logging or not
/// (see `server::timer`).
pub async fn flush_every() {
    let buffered = BUFFERED.with(Arc::clone);
    loop {
        buffered.notified().await;
        sleep(FLUSH_EVERY).await;
        flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(path: &Path) -> usize {
        std::fs::read(path)
            .map(|b| b.iter().filter(|&&c| c == b'\n').count())
            .unwrap_or(0)
    }

    #[test]
    fn lines_wait_until_the_buffer_is_full_or_flushed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.log");
        let sink = Sink::file(&path).unwrap();
        // The same path is one open file.
        assert!(Arc::ptr_eq(&sink, &Sink::file(&path).unwrap()));
        let line = [b'x'; 99];
        let mut written = 0;
        // Below the threshold nothing is written.
        while (written + 1) * 100 < FLUSH_AT {
            write(&sink, |b| {
                b.extend_from_slice(&line);
                b.push(b'\n');
            });
            written += 1;
        }
        assert_eq!(lines(&path), 0);
        // The line that crosses it writes the whole buffer.
        write(&sink, |b| {
            b.extend_from_slice(&line);
            b.push(b'\n');
        });
        written += 1;
        assert_eq!(lines(&path), written);
        write(&sink, |b| b.extend_from_slice(b"last\n"));
        assert_eq!(lines(&path), written);
        flush();
        assert_eq!(lines(&path), written + 1);
    }

    #[test]
    fn reopen_writes_to_the_new_file_and_loses_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.log");
        let sink = Sink::file(&path).unwrap();
        write(&sink, |b| b.extend_from_slice(b"one\n"));
        flush();
        // logrotate: rename, then the signal; a line buffered before the
        // reopen goes to the new file.
        std::fs::rename(&path, dir.path().join("r.log.1")).unwrap();
        write(&sink, |b| b.extend_from_slice(b"two\n"));
        let (ok, failed) = reopen_all();
        assert!(ok >= 1 && failed == 0);
        flush();
        assert_eq!(std::fs::read(&path).unwrap(), b"two\n");
        assert_eq!(std::fs::read(dir.path().join("r.log.1")).unwrap(), b"one\n");
    }

    #[test]
    fn reopen_keeps_a_file_still_at_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.log");
        let sink = Sink::file(&path).unwrap();
        let Out::File { file, .. } = &sink.out else {
            unreachable!()
        };
        let before = file.load_full();
        let (ok, _) = reopen_all();
        assert!(ok >= 1);
        assert!(Arc::ptr_eq(&before, &file.load_full()));
        std::fs::rename(&path, dir.path().join("k.log.1")).unwrap();
        reopen_all();
        assert!(!Arc::ptr_eq(&before, &file.load_full()));
    }

    #[test]
    fn a_thread_writes_what_it_holds_when_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.log");
        let sink = Sink::file(&path).unwrap();
        let s = sink.clone();
        std::thread::spawn(move || write(&s, |b| b.extend_from_slice(b"bye\n")))
            .join()
            .unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"bye\n");
    }
}
