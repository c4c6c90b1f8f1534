//! Process-wide counters: connections and bytes by data path, why
//! connections stayed in user space, handshakes, responses by status, and
//! errors by kind. Relaxed atomics: each is an independent tally.

use crate::transport::Path;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Why a connection stayed in user-space TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// `--ktls off`.
    Disabled,
    /// The kernel has no usable kTLS at all.
    NoKernelSupport,
    /// `TCP_ULP` failed on this socket.
    UlpFailed,
    /// The kernel does not offload the negotiated version and cipher.
    Cipher,
    /// Data was already buffered in user space at handoff time.
    Buffered,
}

impl Fallback {
    const ALL: [Fallback; 5] = [
        Fallback::Disabled,
        Fallback::NoKernelSupport,
        Fallback::UlpFailed,
        Fallback::Cipher,
        Fallback::Buffered,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fallback::Disabled => "disabled",
            Fallback::NoKernelSupport => "no_kernel_support",
            Fallback::UlpFailed => "ulp_failed",
            Fallback::Cipher => "cipher_not_offloaded",
            Fallback::Buffered => "data_buffered",
        }
    }
}

pub struct Metrics {
    connections: [AtomicU64; 2],
    bytes: [AtomicU64; 2],
    bytes_in: [AtomicU64; 2],
    fallback: [AtomicU64; 5],
    pub handshakes_full: AtomicU64,
    pub handshakes_resumed: AtomicU64,
    pub handshakes_failed: AtomicU64,
    /// Configurations loaded by SIGHUP.
    pub reloads: AtomicU64,
    status: Box<[AtomicU64; 600]>,
    errors: Mutex<BTreeMap<&'static str, u64>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            connections: Default::default(),
            bytes: Default::default(),
            bytes_in: Default::default(),
            fallback: Default::default(),
            handshakes_full: AtomicU64::new(0),
            handshakes_resumed: AtomicU64::new(0),
            handshakes_failed: AtomicU64::new(0),
            reloads: AtomicU64::new(0),
            status: Box::new(std::array::from_fn(|_| AtomicU64::new(0))),
            errors: Mutex::new(BTreeMap::new()),
        }
    }
}

fn idx(p: Path) -> usize {
    match p {
        Path::Ktls => 0,
        Path::Userspace => 1,
    }
}

impl Metrics {
    pub fn connection(&self, p: Path) {
        self.connections[idx(p)].fetch_add(1, Relaxed);
    }

    pub fn bytes(&self, p: Path, n: u64) {
        self.bytes[idx(p)].fetch_add(n, Relaxed);
    }

    /// Application bytes received from clients (the proxy).
    pub fn bytes_in(&self, p: Path, n: u64) {
        self.bytes_in[idx(p)].fetch_add(n, Relaxed);
    }

    pub fn fallback(&self, f: Fallback) {
        let i = Fallback::ALL.iter().position(|x| *x == f).unwrap_or(0);
        self.fallback[i].fetch_add(1, Relaxed);
    }

    pub fn status(&self, code: u16) {
        if let Some(c) = self.status.get(code as usize) {
            c.fetch_add(1, Relaxed);
        }
    }

    pub fn error(&self, kind: &'static str) {
        if let Ok(mut m) = self.errors.lock() {
            *m.entry(kind).or_default() += 1;
        }
    }

    /// A multi-line summary, logged at shutdown.
    pub fn report(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "connections: ktls {} userspace {}; bytes out: ktls {} userspace {}; bytes in: ktls {} userspace {}",
            self.connections[0].load(Relaxed),
            self.connections[1].load(Relaxed),
            self.bytes[0].load(Relaxed),
            self.bytes[1].load(Relaxed),
            self.bytes_in[0].load(Relaxed),
            self.bytes_in[1].load(Relaxed),
        );
        let fb: Vec<String> = Fallback::ALL
            .iter()
            .zip(self.fallback.iter())
            .filter(|(_, n)| n.load(Relaxed) > 0)
            .map(|(f, n)| format!("{} {}", f.name(), n.load(Relaxed)))
            .collect();
        let _ = writeln!(
            s,
            "user-space reasons: {}",
            if fb.is_empty() {
                "none".into()
            } else {
                fb.join(", ")
            }
        );
        let _ = writeln!(
            s,
            "handshakes: full {} resumed {} failed {}",
            self.handshakes_full.load(Relaxed),
            self.handshakes_resumed.load(Relaxed),
            self.handshakes_failed.load(Relaxed),
        );
        let reloads = self.reloads.load(Relaxed);
        if reloads > 0 {
            let _ = writeln!(s, "reloads: {reloads}");
        }
        let st: Vec<String> = self
            .status
            .iter()
            .enumerate()
            .filter(|(_, n)| n.load(Relaxed) > 0)
            .map(|(c, n)| format!("{c} {}", n.load(Relaxed)))
            .collect();
        let _ = writeln!(
            s,
            "responses: {}",
            if st.is_empty() {
                "none".into()
            } else {
                st.join(", ")
            }
        );
        let errs = self.errors.lock().map(|m| m.clone()).unwrap_or_default();
        let e: Vec<String> = errs.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = write!(
            s,
            "errors: {}",
            if e.is_empty() {
                "none".into()
            } else {
                e.join(", ")
            }
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_lists_what_happened() {
        let m = Metrics::default();
        m.connection(Path::Userspace);
        m.fallback(Fallback::NoKernelSupport);
        m.status(200);
        m.status(200);
        m.error("reset");
        let r = m.report();
        assert!(r.contains("ktls 0 userspace 1"), "{r}");
        assert!(r.contains("no_kernel_support 1"), "{r}");
        assert!(r.contains("responses: 200 2"), "{r}");
        assert!(r.contains("errors: reset 1"), "{r}");
    }
}
