//! The config file (`--config`): TOML text through `ServeArgs::resolve`,
//! i.e. the real file loading, the merge with defaults and every range
//! check. Whatever the text: no panic, and an error has a message. A file
//! that resolves gives settings that are all in range (the checks were
//! applied to what is used, not to a copy), at least one address, paths
//! anchored at the file's directory, timeouts that convert to durations,
//! and head limits under which a minimal request is served.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;
use tlsfront::cli::ServeArgs;
use tlsfront::config::{secs, MAX_TIMEOUT, MAX_WORKERS};
use tlsfront::http::request::{parse, HeadLimits};

fn file() -> &'static PathBuf {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("tlsfront-fuzz-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("tlsfront.toml")
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = file();
    std::fs::write(path, text).unwrap();
    let args = ServeArgs {
        config: Some(path.clone()),
        ..Default::default()
    };
    let c = match args.resolve() {
        Ok(c) => c,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    assert!(c.limits.check(|k| k.to_string()).is_ok(), "{:?}", c.limits);
    assert!(
        c.timeouts.check(|k| k.to_string()).is_ok(),
        "{:?}",
        c.timeouts
    );
    assert!((1..=MAX_WORKERS).contains(&c.workers));
    assert!(!c.listen.is_empty());
    for t in [
        c.timeouts.handshake,
        c.timeouts.request_header,
        c.timeouts.keepalive,
        c.timeouts.send,
        c.timeouts.shutdown,
    ] {
        assert!(t > 0.0 && t <= MAX_TIMEOUT);
        assert!(secs(t).as_secs_f64() > 0.0);
    }
    for p in [Some(&c.root), c.cert.as_ref(), c.key.as_ref()]
        .into_iter()
        .flatten()
    {
        // Relative ones are joined to the file's (absolute) directory.
        assert!(p.is_absolute() || p == &PathBuf::from("."), "{p:?}");
    }
    let limits = HeadLimits {
        request_line: c.limits.request_line,
        header_bytes: c.limits.header_bytes,
        headers: c.limits.headers,
    };
    let req = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
    assert!(matches!(parse(req, &limits), Ok(Some(_))), "{limits:?}");
});
