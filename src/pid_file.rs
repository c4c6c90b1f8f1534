//! `pid_file`: the main process (the privileged parent with `user`, else
//! the one server process) writes its pid there once it serves, and
//! removes the file when it exits. After an upgrade (SIGUSR2) the new main
//! process has written its own pid, so the old one leaves the file alone.

use std::io;
use std::path::{Path, PathBuf};

/// The pid file written by this process; removed on drop if it still
/// names this process.
#[derive(Debug)]
pub struct PidFile {
    path: PathBuf,
    pid: u32,
}

/// The pid file could not be written.
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

impl PidFile {
    /// Write this process's pid (and a newline) to `path`, through
    /// [`crate::safe_open::write_public`]: no link followed, nothing
    /// written into a directory another user could change.
    pub fn write(path: &Path) -> Result<PidFile, PidFileError> {
        let pid = std::process::id();
        crate::safe_open::write_public(path, format!("{pid}\n").as_bytes()).map_err(|source| {
            PidFileError {
                path: path.into(),
                source,
            }
        })?;
        Ok(PidFile {
            path: path.into(),
            pid,
        })
    }
}

impl Drop for PidFile {
    fn drop(&mut self) {
        // Only a file that still names this process: after an upgrade it
        // names the new one, which serves on.
        let ours = std::fs::read_to_string(&self.path)
            .is_ok_and(|t| t.trim().parse::<u32>() == Ok(self.pid));
        if ours {
            if let Err(e) = std::fs::remove_file(&self.path) {
                tracing::warn!("pid_file: cannot remove {}: {e}", self.path.display());
            }
        }
    }
}
