//! Opening files while tlsfront may be root (placeholder until the
//! safe-open change lands: plain reads and appends without following a
//! final symlink).

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

pub fn read(path: &Path) -> std::io::Result<Vec<u8>> {
    if let Some(r) = crate::privsep::read(path) {
        return r.map(|mut z| std::mem::take(&mut *z));
    }
    std::fs::read(path)
}

pub fn open_log(path: &Path) -> std::io::Result<std::fs::File> {
    if let Some(r) = crate::privsep::open_log(path) {
        return r;
    }
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o640)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}
