//! The config file: TOML text through `tlsfront run --config`'s resolver
//! (`RunArgs::resolve`), i.e. the real file loading, the sites, the merge
//! with defaults and every check. Whatever the text: no panic, and an error
//! has a message. A file that resolves gives settings that are all in range
//! (the checks were applied to what is used, not to a copy), at least one
//! address and one site, a default site that exists, names that are
//! lower-case and belong to one site each, paths anchored at the file's
//! directory, timeouts that convert to durations, and head limits under
//! which a minimal request is served.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;
use tlsfront::cli::{GlobalArgs, RunArgs};
use tlsfront::config::{secs, Job, MAX_TIMEOUT, MAX_WORKERS};
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
    let args = RunArgs {
        config: path.clone(),
        global: GlobalArgs::default(),
    };
    let c = match args.resolve() {
        Ok(c) => c,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    assert!((1..=MAX_WORKERS).contains(&c.workers));
    assert!(!c.listen.is_empty());
    assert!(c.default_site < c.sites.len());
    let mut seen = std::collections::HashSet::new();
    for site in &c.sites {
        assert!(
            site.limits.check(|k| k.to_string()).is_ok(),
            "{:?}",
            site.limits
        );
        assert!(
            site.timeouts.check(|k| k.to_string()).is_ok(),
            "{:?}",
            site.timeouts
        );
        for n in &site.names {
            assert_eq!(n, &n.to_ascii_lowercase());
            assert!(seen.insert(n.clone()), "{n} in two sites");
        }
        let t = &site.timeouts;
        for t in [
            t.handshake,
            t.request_header,
            t.keepalive,
            t.send,
            t.shutdown,
            t.connect,
            t.idle,
        ] {
            assert!(t > 0.0 && t <= MAX_TIMEOUT);
            assert!(secs(t).as_secs_f64() > 0.0);
        }
        let root = match &site.job {
            Job::Files(f) => Some(&f.root),
            Job::Backend(_) => None,
        };
        for p in root
            .into_iter()
            .chain(site.certs.iter().flat_map(|(c, k)| [c, k]))
        {
            // Relative ones are joined to the file's (absolute) directory.
            assert!(p.is_absolute(), "{p:?}");
        }
        let limits = HeadLimits {
            request_line: site.limits.request_line,
            header_bytes: site.limits.header_bytes,
            headers: site.limits.headers,
        };
        let req = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        assert!(matches!(parse(req, &limits), Ok(Some(_))), "{limits:?}");
    }
});
