//! `pid_file`: the main process (the privileged parent with `user`, else
//! the one server process) writes its pid there before anything says it
//! is ready (its start-up lines, systemd's READY=1, an upgrade's ready
//! handshake), so that a file that cannot be written refuses the start
//! rather than leave a server running that the operator's tools cannot
//! find; it removes the file when it exits. After an upgrade (SIGUSR2)
//! the new main process has written its own pid, so the old one leaves the
//! file alone; a new process that fails before it is ready puts back the
//! pid it found (the old process, which serves on).

use std::io;
use std::path::{Path, PathBuf};

/// The pid file written by this process; on drop, if it still names this
/// process, removed (once [`PidFile::ready`]) or given back the pid it held
/// before (a start that failed).
#[derive(Debug)]
pub struct PidFile {
    path: PathBuf,
    pid: u32,
    /// The pid the file held before this process wrote its own.
    before: Option<u32>,
    ready: bool,
}

/// The pid file could not be written (or, for `config check`, could not
/// be).
#[derive(Debug, thiserror::Error)]
#[error(
    "setting pid_file: cannot write {path}: {source} (give a path in a directory that \
     tlsfront's main process may write, root's own such as /run when started as root, \
     or leave pid_file out)"
)]
pub struct PidFileError {
    path: PathBuf,
    source: io::Error,
}

/// The pid in the file at `path`, if it holds one.
fn pid_in(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

impl PidFile {
    /// Write this process's pid (and a newline) to `path`, through
    /// [`crate::safe_open::write_public`]: no link followed, nothing
    /// written into a directory another user could change.
    pub fn write(path: &Path) -> Result<PidFile, PidFileError> {
        let pid = std::process::id();
        let before = pid_in(path);
        write(path, pid)?;
        Ok(PidFile {
            path: path.into(),
            pid,
            before,
            ready: false,
        })
    }

    /// Whether [`PidFile::write`] would succeed, deciding without writing
    /// (`config check`: a running server's file stays as it is).
    pub fn check(path: &Path) -> Result<(), PidFileError> {
        crate::safe_open::check_write_public(path).map_err(|source| PidFileError {
            path: path.into(),
            source,
        })
    }

    /// The process is ready and serves: from now on the file is removed
    /// when it exits.
    pub fn ready(&mut self) {
        self.ready = true;
    }
}

fn write(path: &Path, pid: u32) -> Result<(), PidFileError> {
    crate::safe_open::write_public(path, format!("{pid}\n").as_bytes()).map_err(|source| {
        PidFileError {
            path: path.into(),
            source,
        }
    })
}

impl Drop for PidFile {
    fn drop(&mut self) {
        // Only a file that still names this process: after an upgrade it
        // names the new one, which serves on.
        if pid_in(&self.path) != Some(self.pid) {
            return;
        }
        match (self.ready, self.before) {
            // A start (an upgrade's new process) that failed: the process
            // named before may be serving still.
            (false, Some(before)) => {
                if let Err(e) = write(&self.path, before) {
                    tracing::warn!("{e}");
                }
            }
            _ => {
                if let Err(e) = std::fs::remove_file(&self.path) {
                    tracing::warn!("pid_file: cannot remove {}: {e}", self.path.display());
                }
            }
        }
    }
}
