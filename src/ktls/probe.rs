//! Start-up probe: which (TLS version, cipher, direction) the running kernel
//! really accepts, found with real `setsockopt` calls on loopback sockets.
//! The result decides, per connection, whether the handoff is attempted, and
//! feeds the startup line and `tlsfront check`.

use super::{probe_info, Cipher, Direction, Version};
use crate::sys;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;

/// What the kernel accepts. Errors are kept as text for reports.
#[derive(Debug, Clone)]
pub struct Support {
    /// `uname -r`.
    pub kernel: String,
    /// Whether the "tls" ULP attaches to a TCP socket; the error otherwise.
    pub ulp: Result<(), String>,
    cells: BTreeMap<(Version, Cipher, Direction), Result<(), String>>,
    /// TLS 1.3 keys can be replaced on a live socket (Linux >= 6.14), so a
    /// KeyUpdate can be followed instead of ending the connection.
    pub rekey: bool,
    /// kTLS was switched off by configuration (`--ktls off`).
    pub disabled: bool,
    /// Tell the kernel to expect unpadded TLS 1.3 records
    /// (`ktls_expect_no_pad`, set from the settings, not probed).
    pub expect_no_pad: bool,
}

const ULP_FIX: &str =
    "kernel has no \"tls\" ULP: load it with 'modprobe tls' or use a kernel with CONFIG_TLS";

impl Support {
    /// Probe the running kernel (about a dozen loopback connections).
    pub fn probe() -> Support {
        let kernel = rustix::system::uname()
            .release()
            .to_string_lossy()
            .into_owned();
        let mut s = Support {
            kernel,
            ulp: Ok(()),
            cells: BTreeMap::new(),
            rekey: false,
            expect_no_pad: true,
            disabled: false,
        };
        for v in Version::ALL {
            for c in Cipher::ALL {
                match probe_pair(v, c) {
                    Ok(p) => {
                        if v == Version::Tls13 && c == Cipher::Aes128Gcm {
                            s.rekey = p.rekey;
                        }
                        s.cells.insert((v, c, Direction::Tx), p.tx);
                        s.cells.insert((v, c, Direction::Rx), p.rx);
                    }
                    Err(e) => {
                        let msg = if e.raw_os_error() == Some(libc::ENOENT) {
                            ULP_FIX.to_string()
                        } else {
                            format!("TCP_ULP \"tls\" failed: {e}")
                        };
                        s.ulp = Err(msg.clone());
                        s.cells.insert((v, c, Direction::Tx), Err(msg.clone()));
                        s.cells.insert((v, c, Direction::Rx), Err(msg));
                    }
                }
            }
        }
        s
    }

    /// A report for `--ktls off`: nothing is attempted.
    pub fn disabled() -> Support {
        let mut s = Support::probe_less();
        s.disabled = true;
        s.ulp = Err("switched off by --ktls off".into());
        s
    }

    fn probe_less() -> Support {
        Support {
            kernel: rustix::system::uname()
                .release()
                .to_string_lossy()
                .into_owned(),
            ulp: Err(String::new()),
            cells: BTreeMap::new(),
            rekey: false,
            expect_no_pad: true,
            disabled: false,
        }
    }

    /// Whether the ULP should be attached to new connections at all.
    pub fn usable(&self) -> bool {
        !self.disabled && self.ulp.is_ok() && self.cells.values().any(|r| r.is_ok())
    }

    /// Every (version, cipher) tlsfront negotiates is offloaded both ways.
    pub fn fully_usable(&self) -> bool {
        Version::ALL
            .iter()
            .all(|v| Cipher::ALL.iter().all(|c| self.offloads(*v, *c)))
    }

    /// Both directions of (version, cipher) can be handed to the kernel.
    pub fn offloads(&self, v: Version, c: Cipher) -> bool {
        !self.disabled
            && self.cell(v, c, Direction::Tx).is_ok()
            && self.cell(v, c, Direction::Rx).is_ok()
    }

    pub fn cell(&self, v: Version, c: Cipher, d: Direction) -> Result<(), &str> {
        match self.cells.get(&(v, c, d)) {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(e),
            None => Err("not probed"),
        }
    }

    /// How to get a "no" cell to "yes".
    pub fn fix(&self, v: Version, c: Cipher, d: Direction) -> Option<String> {
        let err = self.cell(v, c, d).err()?;
        if self.ulp.is_err() {
            return Some(self.ulp.clone().err().unwrap_or_default());
        }
        let dir = match d {
            Direction::Tx => "TX",
            Direction::Rx => "RX",
        };
        let min = match (v, d, c) {
            (Version::Tls13, Direction::Rx, Cipher::Aes128Gcm | Cipher::Aes256Gcm) => "5.2",
            _ => c.min_kernel(),
        };
        Some(format!(
            "{err}: {v} {c} {dir} needs Linux >= {min} with the crypto modules loaded ('modprobe {}')",
            c.modules()
        ))
    }

    /// The one-line verdict printed at startup.
    pub fn summary(&self) -> String {
        self.line(true)
    }

    /// The verdict without what a server does about it (for `--ktls
    /// require`, which refuses to start instead of serving).
    pub fn verdict(&self) -> String {
        self.line(false)
    }

    fn line(&self, serving: bool) -> String {
        let tail = if serving {
            " - serving with user-space TLS"
        } else {
            ""
        };
        if self.disabled {
            return format!("kTLS: off (--ktls off){tail}");
        }
        if let Err(e) = &self.ulp {
            return format!("kTLS: unavailable ({e}){tail}");
        }
        let mut parts = Vec::new();
        for v in Version::ALL.iter().rev() {
            let on: Vec<String> = Cipher::ALL
                .iter()
                .filter(|c| self.offloads(*v, **c))
                .map(|c| c.to_string())
                .collect();
            if !on.is_empty() {
                parts.push(format!("{v} {} (TX+RX)", on.join(", ")));
            }
        }
        if parts.is_empty() {
            return format!(
                "kTLS: unavailable (the kernel refused every cipher: run 'tlsfront check'){tail}"
            );
        }
        let mut line = format!("kTLS: on for {}", parts.join("; "));
        let off: Vec<String> = Version::ALL
            .iter()
            .flat_map(|v| Cipher::ALL.iter().map(move |c| (*v, *c)))
            .filter(|(v, c)| !self.offloads(*v, *c))
            .map(|(v, c)| format!("{v} {c}"))
            .collect();
        if !off.is_empty() {
            let _ = write!(line, "; user-space TLS for {}", off.join(", "));
        }
        if !self.rekey {
            line.push_str("; TLS1.3 KeyUpdate ends the connection (");
            line.push_str(self.rekey_missing());
            line.push(')');
        }
        line
    }
}

impl Support {
    /// Why a TLS 1.3 KeyUpdate cannot be followed: no kTLS at all here (the
    /// `tls` module, or offload switched off), or a kernel without rekeying
    /// (Linux < 6.14).
    pub fn rekey_missing(&self) -> &'static str {
        if self.disabled {
            "kTLS is off"
        } else if self.ulp.is_err() {
            "the kernel's tls module is not loaded, so there is no kTLS to rekey: 'modprobe tls'"
        } else if self
            .cell(Version::Tls13, Cipher::Aes128Gcm, Direction::Tx)
            .is_err()
        {
            "TLS1.3 is not offloaded here, so there is nothing to rekey"
        } else {
            "the kernel cannot replace TLS1.3 keys: that needs Linux >= 6.14"
        }
    }
}

struct PairResult {
    tx: Result<(), String>,
    rx: Result<(), String>,
    rekey: bool,
}

/// One established loopback connection: attach the ULP, then try TX and RX.
/// `Err` means the ULP itself failed.
fn probe_pair(v: Version, c: Cipher) -> io::Result<PairResult> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let client = TcpStream::connect(listener.local_addr()?)?;
    let (_server, _) = listener.accept()?;
    sys::set_tls_ulp(client.as_fd())?;
    let info = probe_info(v, c);
    let text = |r: io::Result<()>| r.map_err(|e| e.to_string());
    let tx = text(sys::set_crypto_info(client.as_fd(), Direction::Tx, &info));
    let rx = text(sys::set_crypto_info(client.as_fd(), Direction::Rx, &info));
    let rekey = tx.is_ok()
        && v == Version::Tls13
        && sys::set_crypto_info(client.as_fd(), Direction::Tx, &info).is_ok();
    Ok(PairResult { tx, rx, rekey })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_is_consistent_with_the_ulp_verdict() {
        let s = Support::probe();
        assert!(!s.kernel.is_empty());
        if s.ulp.is_err() {
            assert!(!s.usable());
            assert!(
                s.summary().starts_with("kTLS: unavailable ("),
                "{}",
                s.summary()
            );
            assert!(s
                .fix(Version::Tls13, Cipher::Aes128Gcm, Direction::Tx)
                .is_some());
        } else {
            assert!(s.summary().starts_with("kTLS: "));
        }
    }

    #[test]
    fn without_the_tls_module_the_module_is_blamed_and_require_does_not_serve() {
        let mut s = Support::probe_less();
        s.kernel = "6.18.0".into();
        s.ulp = Err(ULP_FIX.into());
        assert!(
            s.rekey_missing().contains("tls module is not loaded"),
            "{}",
            s.rekey_missing()
        );
        assert!(!s.rekey_missing().contains("6.14"));
        assert!(s.summary().ends_with("- serving with user-space TLS"));
        assert!(!s.verdict().contains("serving"), "{}", s.verdict());
        // With the ULP and TLS 1.3 offloaded, only the kernel version is left.
        s.ulp = Ok(());
        s.cells
            .insert((Version::Tls13, Cipher::Aes128Gcm, Direction::Tx), Ok(()));
        assert!(s.rekey_missing().contains("Linux >= 6.14"));
    }

    #[test]
    fn disabled_never_offloads() {
        let s = Support::disabled();
        assert!(!s.usable());
        assert!(!s.offloads(Version::Tls13, Cipher::Aes128Gcm));
        assert!(s.summary().contains("off"));
    }
}
