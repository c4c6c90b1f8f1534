//! Rate-limited warnings: at most one line per kind per interval, with a
//! count of the lines left out. A flood of failing clients cannot flood
//! the log, and a failure that comes back long after the first still gets
//! its line (a once-per-process warning would stay silent).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The interval the servers use: one line per kind per this long.
pub const EVERY: Duration = Duration::from_secs(10);

/// When each kind last got a line, and how many were left out since.
/// Kinds are tlsfront's own names (`&'static str`), or the libraries'
/// targets (`String`, see [`LibraryWarnings`]).
pub struct LogLimit<K = &'static str> {
    every: Duration,
    kinds: Mutex<HashMap<K, (Instant, u64)>>,
}

impl<K: Hash + Eq> LogLimit<K> {
    pub fn new(every: Duration) -> LogLimit<K> {
        LogLimit {
            every,
            kinds: Mutex::new(HashMap::new()),
        }
    }

    /// May a line of `kind` be written now? If so, the lines of that kind
    /// left out since the last one, as text to append (empty if none).
    pub fn allow(&self, kind: K) -> Option<Suppressed> {
        self.allow_at(kind, Instant::now())
    }

    /// Start `kind`'s interval now without writing a line of it: a line of
    /// another kind has just said as much. Lines left out stay counted, to
    /// be reported with the next line of `kind`.
    pub fn hold(&self, kind: K) {
        self.hold_at(kind, Instant::now())
    }

    fn hold_at(&self, kind: K, now: Instant) {
        let mut kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        kinds.entry(kind).or_insert((now, 0)).0 = now;
    }

    fn allow_at(&self, kind: K, now: Instant) -> Option<Suppressed> {
        let mut kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        match kinds.get_mut(&kind) {
            Some((last, left_out)) if now.saturating_duration_since(*last) < self.every => {
                *left_out += 1;
                None
            }
            Some((last, left_out)) => {
                *last = now;
                Some(Suppressed(std::mem::take(left_out)))
            }
            None => {
                kinds.insert(kind, (now, 0));
                Some(Suppressed(0))
            }
        }
    }
}

/// How many lines of a kind were left out before this one; displayed as
/// ` (N similar lines left out)`, or nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Suppressed(pub u64);

impl std::fmt::Display for Suppressed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            0 => Ok(()),
            1 => f.write_str(" (1 similar line left out)"),
            n => write!(f, " ({n} similar lines left out)"),
        }
    }
}

/// The libraries' warnings (rustls's, above all: a client with an
/// IP-literal or malformed SNI makes it warn once per handshake), held to
/// the same limit as tlsfront's own client-provoked lines: at most one per
/// library target per [`EVERY`], said again by tlsfront with the count of
/// those left out. A layer beside the formatting one, which is given
/// [`is_library_warning`] events no more.
pub struct LibraryWarnings {
    limit: LogLimit<String>,
}

impl Default for LibraryWarnings {
    fn default() -> LibraryWarnings {
        LibraryWarnings {
            limit: LogLimit::new(EVERY),
        }
    }
}

/// A warning or error of a library (not one of tlsfront's own events).
pub fn is_library_warning(m: &tracing::Metadata<'_>) -> bool {
    !m.target().starts_with("tlsfront") && *m.level() <= tracing::Level::WARN
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for LibraryWarnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let m = event.metadata();
        if !is_library_warning(m) {
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        // Events of the `log` crate (rustls's) come through tracing-log,
        // under the target "log" with the real one as a field.
        let target = fields.log_target.unwrap_or_else(|| m.target().to_string());
        let Some(left_out) = self.limit.allow(target.clone()) else {
            return;
        };
        let message = fields.message;
        if *m.level() == tracing::Level::ERROR {
            tracing::error!(target: "tlsfront::library", "{target}: {message}{left_out}");
        } else {
            tracing::warn!(target: "tlsfront::library", "{target}: {message}{left_out}");
        }
    }
}

/// An event's message (with its other fields, as `name=value`), and the
/// target of a `log` record.
#[derive(Default)]
struct Fields {
    message: String,
    log_target: Option<String>,
}

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "log.target" {
            self.log_target = Some(value.to_string());
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write;
        if field.name().starts_with("log.") {
            return;
        }
        if !self.message.is_empty() {
            self.message.push(' ');
        }
        let _ = match field.name() {
            "message" => write!(self.message, "{value:?}"),
            name => write!(self.message, "{name}={value:?}"),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_kind_waits_a_whole_interval_and_keeps_its_count() {
        let l = LogLimit::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        l.hold_at("a", at(0));
        assert_eq!(l.allow_at("a", at(5)), None);
        assert_eq!(l.allow_at("a", at(11)), Some(Suppressed(1)));
        l.hold_at("a", at(12));
        assert_eq!(l.allow_at("a", at(15)), None);
        l.hold_at("a", at(20));
        assert_eq!(l.allow_at("a", at(29)), None);
        assert_eq!(l.allow_at("a", at(30)), Some(Suppressed(2)));
    }

    #[test]
    fn one_line_per_kind_per_interval_with_a_count() {
        let l = LogLimit::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(l.allow_at("a", at(0)), Some(Suppressed(0)));
        assert_eq!(l.allow_at("b", at(1)), Some(Suppressed(0)));
        for s in 1..10 {
            assert_eq!(l.allow_at("a", at(s)), None);
        }
        assert_eq!(l.allow_at("a", at(10)), Some(Suppressed(9)));
        assert_eq!(l.allow_at("a", at(11)), None);
        // Days later: a line again, and the count of what was left out.
        assert_eq!(l.allow_at("a", at(3 * 86400)), Some(Suppressed(1)));
        assert_eq!(l.allow_at("a", at(4 * 86400)), Some(Suppressed(0)));
        assert_eq!(Suppressed(0).to_string(), "");
        assert_eq!(Suppressed(3).to_string(), " (3 similar lines left out)");
    }
}
