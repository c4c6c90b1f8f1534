//! `tlsfront check`: one screen on what the kernel's TLS offload does here,
//! probed with real socket options, and the fix for every "no".

use crate::ktls::{Cipher, Direction, Support, Version};
use std::fmt::Write as _;

/// The report, and whether every cell is "yes".
pub fn report(s: &Support) -> (String, bool) {
    let mut out = String::new();
    let _ = writeln!(out, "kernel: Linux {}", s.kernel);
    match &s.ulp {
        Ok(()) => {
            let _ = writeln!(out, "tls ULP: yes");
        }
        Err(e) => {
            let _ = writeln!(out, "tls ULP: no - {e}");
        }
    }
    let _ = writeln!(out, "{:<28} {:<4} RX", "offload", "TX");
    let mut fixes = Vec::new();
    let mut all = true;
    for v in Version::ALL {
        for c in Cipher::ALL {
            let yn = |d| if s.cell(v, c, d).is_ok() { "yes" } else { "no" };
            let _ = writeln!(
                out,
                "{:<28} {:<4} {}",
                format!("{v} {c}"),
                yn(Direction::Tx),
                yn(Direction::Rx)
            );
            for d in [Direction::Tx, Direction::Rx] {
                if let Some(f) = s.fix(v, c, d) {
                    all = false;
                    if !fixes.contains(&f) {
                        fixes.push(f);
                    }
                }
            }
        }
    }
    let _ = writeln!(
        out,
        "TLS1.3 rekey (KeyUpdate):    {}",
        if s.rekey { "yes" } else { "no" }
    );
    if !s.rekey {
        let _ = writeln!(
            out,
            "  {}; meanwhile a client's KeyUpdate ends its connection cleanly",
            s.rekey_missing()
        );
    }
    for f in &fixes {
        let _ = writeln!(out, "fix: {f}");
    }
    let _ = writeln!(out, "{}", s.summary());
    (out, all)
}
