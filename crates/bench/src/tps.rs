//! `tlsfront-bench tps`: an open loop of new TLS sessions. Sessions start on a
//! clock schedule (the rate ramps from START by STEP every S seconds up to
//! MAX), each as its own task, so a slow server cannot slow the generator. A
//! session connects, does K GETs on one keep-alive connection and closes; it
//! fails on any error or when it takes longer than --timeout. Results are
//! counted in the second (and step) the session started in.

use super::client::{self, ClientError, Conn};
use super::report::{self, f, Outcome};
use super::stats::{self, Latency};
use super::svg::{Axis, Chart, Series, Style};
use super::{http, BenchError, CommonArgs, Setup};
use clap::Args;
use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::json;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;

#[derive(Args, Debug)]
pub struct TpsArgs {
    /// https:// URL to request.
    pub url: String,
    /// Session rates in sessions/s: START:STEP:MAX, e.g. 100:100:1000.
    #[arg(long, value_name = "START:STEP:MAX", value_parser = Ramp::parse)]
    pub ramp: Ramp,
    /// Seconds spent at each rate.
    #[arg(long, default_value_t = 10, value_name = "S",
          value_parser = clap::value_parser!(u32).range(1..=86_400))]
    pub step_seconds: u32,
    /// GET requests in each session, on one keep-alive connection.
    #[arg(long, default_value_t = 4, value_name = "K",
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub requests_per_session: u32,
    /// A session that takes longer than SECS counts as failed.
    #[arg(long, default_value_t = 10.0, value_name = "SECS")]
    pub timeout: f64,
    /// Another server to open sessions to (repeatable): sessions go to URL
    /// and each --interleave URL in turn, each at the ramp's rate, so every
    /// server is measured over the same moments of the run (for comparing
    /// servers on a machine whose speed drifts). Each has its own session
    /// cache; totals per server are reported after the combined ones.
    #[arg(long, value_name = "URL")]
    pub interleave: Vec<String>,
    /// With --interleave: sessions in a row to one server before the next
    /// server's turn. Servers sharing a core evict each other's caches at
    /// every switch, which adds the same few tens of µs to every session
    /// of each (measured here: 50 µs), so a block of 1 understates the
    /// difference between a cheap server and a dear one; a block of 50 at
    /// 500 sessions/s switches every 0.1 s.
    #[arg(long, default_value_t = 50, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub block: u32,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Most servers one run may interleave.
pub const MAX_TARGETS: usize = 16;

/// The rate ramp: START, START+STEP, ... up to MAX sessions per second.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Ramp {
    pub start: u32,
    pub step: u32,
    pub max: u32,
}

/// Most steps a ramp may have.
const MAX_STEPS: u32 = 10_000;
/// Highest rate accepted, sessions per second.
const MAX_RATE: u32 = 10_000_000;

impl Ramp {
    pub fn parse(s: &str) -> Result<Ramp, String> {
        let usage =
            || format!("{s:?} is not START:STEP:MAX (sessions per second, e.g. 100:100:1000)");
        let parts: Vec<&str> = s.split(':').collect();
        let [start, step, max] = parts.as_slice() else {
            return Err(usage());
        };
        let num = |v: &str| v.trim().parse::<u32>().map_err(|_| usage());
        let ramp = Ramp {
            start: num(start)?,
            step: num(step)?,
            max: num(max)?,
        };
        if ramp.start == 0 {
            return Err(format!("{s:?}: START must be at least 1 session/s"));
        }
        if ramp.max < ramp.start {
            return Err(format!("{s:?}: MAX must not be below START"));
        }
        if ramp.max > MAX_RATE {
            return Err(format!("{s:?}: MAX is limited to {MAX_RATE} sessions/s"));
        }
        if ramp.step == 0 && ramp.max > ramp.start {
            return Err(format!(
                "{s:?}: STEP must be at least 1 when MAX is above START"
            ));
        }
        if ramp.step > 0 && (ramp.max - ramp.start) / ramp.step >= MAX_STEPS {
            return Err(format!("{s:?}: more than {MAX_STEPS} steps"));
        }
        Ok(ramp)
    }

    /// The rates, one per step.
    pub fn rates(&self) -> Vec<u32> {
        let mut v = vec![self.start];
        if self.step > 0 {
            let mut r = self.start;
            while let Some(next) = r.checked_add(self.step).filter(|n| *n <= self.max) {
                v.push(next);
                r = next;
            }
        }
        v
    }
}

/// When each session starts: for step `i` at rate `r`, `r * S` sessions
/// evenly spaced over seconds `[i*S, (i+1)*S)`.
pub fn schedule(rates: &[u32], step_seconds: u32) -> impl Iterator<Item = (usize, Duration)> + '_ {
    rates.iter().enumerate().flat_map(move |(i, &rate)| {
        let n = u64::from(rate) * u64::from(step_seconds);
        let base = Duration::from_secs(i as u64 * u64::from(step_seconds));
        (0..n).map(move |k| {
            (
                i,
                base + Duration::from_nanos(k * 1_000_000_000 / u64::from(rate)),
            )
        })
    })
}

struct Ctx {
    target: super::url::Target,
    addr: SocketAddr,
    connector: tokio_rustls::TlsConnector,
    request: Vec<u8>,
    requests: u32,
    timeout: Duration,
}

/// What one session reports.
struct Done {
    step: usize,
    /// Which server (index into the run's targets).
    target: usize,
    /// Start, from the beginning of the test.
    start: Duration,
    /// Connect to last response byte.
    elapsed: Duration,
    /// How late the session started, against the schedule.
    lag: Duration,
    result: Result<bool, (&'static str, String)>,
}

async fn session_body(ctx: &Ctx) -> Result<Conn, ClientError> {
    let mut conn = client::connect(ctx.addr, &ctx.target, &ctx.connector).await?;
    for i in 0..ctx.requests {
        let resp = conn.get(&ctx.request, None).await?;
        if !resp.keep_alive && i + 1 < ctx.requests {
            return Err(ClientError::ClosedEarly {
                done: i + 1,
                wanted: ctx.requests,
            });
        }
    }
    Ok(conn)
}

async fn session(
    ctx: Arc<Ctx>,
    target: usize,
    step: usize,
    scheduled: Duration,
    t0: Instant,
    tx: mpsc::UnboundedSender<Done>,
) {
    let start = Instant::now();
    let res = tokio::time::timeout(ctx.timeout, session_body(&ctx)).await;
    let elapsed = start.elapsed();
    let (result, conn) = match res {
        // A starved runtime can finish a session after its deadline.
        Ok(Ok(conn)) if elapsed <= ctx.timeout => (Ok(conn.info.resumed), Some(conn)),
        Ok(Err(e)) => (Err((e.kind(), e.to_string())), None),
        Ok(Ok(_)) | Err(_) => {
            let e = ClientError::Timeout(ctx.timeout);
            (
                Err((
                    e.kind(),
                    format!("session took longer than {:?}", ctx.timeout),
                )),
                None,
            )
        }
    };
    let _ = tx.send(Done {
        step,
        target,
        start: start - t0,
        elapsed,
        lag: (start - t0).saturating_sub(scheduled),
        result,
    });
    if let Some(conn) = conn {
        conn.close().await;
    }
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Second {
    pub second: u64,
    pub attempted: u64,
    pub successful: u64,
    pub failed: u64,
    /// Mean response time of the successful sessions, ms.
    pub mean_response_ms: Option<f64>,
    #[serde(skip)]
    sum_ms: f64,
}

/// Sessions counted together: those of one step, or of one server.
struct Tally {
    attempted: u64,
    ok: u64,
    failed: u64,
    resumed: u64,
    /// Response times of the successful ones.
    hist: Histogram<u64>,
}

impl Tally {
    fn new() -> Self {
        Tally {
            attempted: 0,
            ok: 0,
            failed: 0,
            resumed: 0,
            hist: stats::new_histogram(),
        }
    }

    /// Count a session: `Some(resumed)` if it succeeded.
    fn count(&mut self, ok: Option<bool>, elapsed: Duration) {
        self.attempted += 1;
        match ok {
            Some(resumed) => {
                self.ok += 1;
                self.resumed += u64::from(resumed);
                stats::record(&mut self.hist, elapsed);
            }
            None => self.failed += 1,
        }
    }
}

struct StepAgg {
    tally: Tally,
    lag: Histogram<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct StepReport {
    /// Attempted rate, sessions/s.
    pub rate: u32,
    pub start_s: u64,
    pub attempted: u64,
    pub successful: u64,
    pub failed: u64,
    pub error_rate: f64,
    /// Successful sessions per second over the step.
    pub tps: f64,
    pub handshakes_resumed: u64,
    pub handshakes_full: u64,
    /// Response time of successful sessions.
    pub response: Latency,
    /// How late sessions started against the schedule: large values mean
    /// the client could not keep up.
    pub start_lag: Latency,
}

/// A step that meets a condition: its successful TPS and how it got there.
#[derive(Clone, Debug, Serialize)]
pub struct Level {
    pub tps: f64,
    pub rate: u32,
    pub mean_response_ms: f64,
    pub error_rate: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ErrorCount {
    pub kind: &'static str,
    pub count: u64,
    pub example: String,
}

/// Run the ramp against `targets` (the URL, then each --interleave URL):
/// with more than one, the schedule runs at `targets.len()` times each
/// rate and session `n` goes to target `(n / block) % targets.len()`.
pub async fn run(args: &TpsArgs, targets: &[Setup]) -> Result<Outcome, BenchError> {
    let timeout = super::seconds("--timeout", args.timeout)?;
    let k = targets.len().max(1) as u32;
    // The steps' rates are what all targets together are sent.
    let rates: Vec<u32> = args.ramp.rates().iter().map(|r| r * k).collect();
    let ctxs: Vec<Arc<Ctx>> = targets
        .iter()
        .map(|setup| {
            Arc::new(Ctx {
                target: setup.target.clone(),
                addr: setup.probe.addr,
                connector: client::connector(&setup.config),
                request: http::get_request(&setup.target),
                requests: args.requests_per_session,
                timeout,
            })
        })
        .collect();
    let total_secs = rates.len() as u64 * u64::from(args.step_seconds);
    let bar = report::progress(total_secs, "s");

    let (tx, mut rx) = mpsc::unbounded_channel::<Done>();
    let t0 = Instant::now();
    // The clock runs on a thread of its own, so busy runtime workers cannot
    // delay it; each session is a task of its own.
    let generator = {
        let (ctxs, rates, step_seconds) = (ctxs.clone(), rates.clone(), args.step_seconds);
        let block = args.block as usize;
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            let start = t0.into_std();
            for (n, (step, offset)) in schedule(&rates, step_seconds).enumerate() {
                let wait = (start + offset).saturating_duration_since(std::time::Instant::now());
                if !wait.is_zero() {
                    std::thread::sleep(wait);
                }
                let target = (n / block) % ctxs.len();
                handle.spawn(session(
                    ctxs[target].clone(),
                    target,
                    step,
                    offset,
                    t0,
                    tx.clone(),
                ));
            }
        })
    };
    let mut lags = stats::new_histogram();

    let mut seconds: Vec<Second> = Vec::new();
    let mut steps: Vec<StepAgg> = rates
        .iter()
        .map(|_| StepAgg {
            tally: Tally::new(),
            lag: stats::new_histogram(),
        })
        .collect();
    let mut per_target: Vec<Tally> = targets.iter().map(|_| Tally::new()).collect();
    let mut errors: BTreeMap<&'static str, ErrorCount> = BTreeMap::new();
    let mut failed_so_far = 0u64;
    while let Some(done) = rx.recv().await {
        let sec = done.start.as_secs();
        while seconds.len() as u64 <= sec {
            let second = seconds.len() as u64;
            seconds.push(Second {
                second,
                ..Default::default()
            });
        }
        let s = &mut seconds[sec as usize];
        let st = &mut steps[done.step];
        let ok = done.result.as_ref().ok().copied();
        st.tally.count(ok, done.elapsed);
        per_target[done.target].count(ok, done.elapsed);
        s.attempted += 1;
        stats::record(&mut lags, done.lag);
        stats::record(&mut st.lag, done.lag);
        match done.result {
            Ok(_) => {
                s.successful += 1;
                s.sum_ms += done.elapsed.as_secs_f64() * 1000.0;
            }
            Err((kind, message)) => {
                s.failed += 1;
                failed_so_far += 1;
                errors
                    .entry(kind)
                    .or_insert(ErrorCount {
                        kind,
                        count: 0,
                        example: message,
                    })
                    .count += 1;
            }
        }
        let elapsed = t0.elapsed().as_secs().min(total_secs);
        bar.set_position(elapsed);
        let step = usize::try_from(elapsed / u64::from(args.step_seconds)).unwrap_or(0);
        bar.set_message(format!(
            "rate {}/s, failed {failed_so_far}",
            rates.get(step).or(rates.last()).copied().unwrap_or(0),
        ));
    }
    let _ = generator.await;
    let lag = stats::latency(&lags);
    bar.finish_and_clear();
    for s in &mut seconds {
        if s.successful > 0 {
            s.mean_response_ms = Some(s.sum_ms / s.successful as f64);
        }
    }
    let per_target: Vec<TargetReport> = targets
        .iter()
        .zip(&per_target)
        .map(|(setup, tg)| TargetReport {
            url: setup.target.url.clone(),
            addr: setup.probe.addr,
            attempted: tg.attempted,
            successful: tg.ok,
            failed: tg.failed,
            handshakes_resumed: tg.resumed,
            handshakes_full: tg.ok - tg.resumed,
            response: stats::latency(&tg.hist),
        })
        .collect();
    Ok(outcome(
        args,
        &targets[0],
        &rates,
        &seconds,
        &steps,
        errors,
        lag,
        &per_target,
    ))
}

/// One server's totals in an interleaved run.
#[derive(Clone, Debug, Serialize)]
pub struct TargetReport {
    pub url: String,
    pub addr: SocketAddr,
    pub attempted: u64,
    pub successful: u64,
    pub failed: u64,
    pub handshakes_resumed: u64,
    pub handshakes_full: u64,
    pub response: Latency,
}

/// A response time in ms for a table, or "-" when no session succeeded.
fn ms_if_any(successful: u64, v: f64) -> String {
    if successful > 0 {
        f(v, 1)
    } else {
        "-".into()
    }
}

#[allow(clippy::too_many_arguments)]
fn outcome(
    args: &TpsArgs,
    setup: &Setup,
    rates: &[u32],
    seconds: &[Second],
    steps: &[StepAgg],
    errors: BTreeMap<&'static str, ErrorCount>,
    lag: Latency,
    targets: &[TargetReport],
) -> Outcome {
    let secs = f64::from(args.step_seconds);
    let reports: Vec<StepReport> = steps
        .iter()
        .zip(rates)
        .enumerate()
        .map(|(i, (st, &rate))| StepReport {
            rate,
            start_s: i as u64 * u64::from(args.step_seconds),
            attempted: st.tally.attempted,
            successful: st.tally.ok,
            failed: st.tally.failed,
            error_rate: if st.tally.attempted > 0 {
                st.tally.failed as f64 / st.tally.attempted as f64
            } else {
                0.0
            },
            tps: st.tally.ok as f64 / secs,
            handshakes_resumed: st.tally.resumed,
            handshakes_full: st.tally.ok - st.tally.resumed,
            response: stats::latency(&st.tally.hist),
            start_lag: stats::latency(&st.lag),
        })
        .collect();
    let best = |ok: &dyn Fn(&StepReport) -> bool| -> Option<Level> {
        reports
            .iter()
            .filter(|r| r.successful > 0 && ok(r))
            .max_by(|a, b| a.tps.total_cmp(&b.tps))
            .map(|r| Level {
                tps: r.tps,
                rate: r.rate,
                mean_response_ms: r.response.mean_ms,
                error_rate: r.error_rate,
            })
    };
    let levels = [
        ("max successful TPS", "max_tps", best(&|_| true)),
        (
            "max TPS with mean response < 100 ms",
            "max_tps_mean_response_under_100ms",
            best(&|r| r.response.mean_ms < 100.0),
        ),
        (
            "max TPS with mean response < 500 ms",
            "max_tps_mean_response_under_500ms",
            best(&|r| r.response.mean_ms < 500.0),
        ),
        (
            "max TPS with error rate < 0.01 %",
            "max_tps_error_rate_under_0_01pct",
            best(&|r| r.error_rate < 0.0001),
        ),
        (
            "max TPS with error rate < 0.1 %",
            "max_tps_error_rate_under_0_1pct",
            best(&|r| r.error_rate < 0.001),
        ),
    ];
    let peak = seconds.iter().map(|s| s.successful).max().unwrap_or(0);
    let attempted: u64 = reports.iter().map(|r| r.attempted).sum();
    let successful: u64 = reports.iter().map(|r| r.successful).sum();
    let failed: u64 = reports.iter().map(|r| r.failed).sum();
    let resumed: u64 = reports.iter().map(|r| r.handshakes_resumed).sum();

    let mut t = String::new();
    let _ = writeln!(
        t,
        "tps {}: ramp {}:{}:{} sessions/s, {} s per step, {} request{} per session, resumption {}, timeout {} s",
        setup.target.url,
        args.ramp.start,
        args.ramp.step,
        args.ramp.max,
        args.step_seconds,
        args.requests_per_session,
        if args.requests_per_session == 1 { "" } else { "s" },
        if args.common.no_resume { "off" } else { "on" },
        args.timeout
    );
    let _ = writeln!(t, "{}", setup.describe());
    if targets.len() > 1 {
        let _ = writeln!(
            t,
            "interleaved: sessions go to {} servers in turn, {} at a time, each server at the ramp's rate (the rates below are all of them together)",
            targets.len(),
            args.block
        );
    }
    let _ = writeln!(t);
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|r| {
            let ms = |v| ms_if_any(r.successful, v);
            vec![
                r.rate.to_string(),
                r.attempted.to_string(),
                r.successful.to_string(),
                r.failed.to_string(),
                f(r.error_rate * 100.0, 3),
                f(r.tps, 1),
                r.handshakes_resumed.to_string(),
                ms(r.response.mean_ms),
                ms(r.response.p50_ms),
                ms(r.response.p99_ms),
                ms(r.response.max_ms),
                f(r.start_lag.p99_ms, 1),
            ]
        })
        .collect();
    t.push_str(&report::table(
        &[
            "rate/s",
            "attempted",
            "successful",
            "failed",
            "error %",
            "TPS",
            "resumed",
            "mean ms",
            "p50 ms",
            "p99 ms",
            "max ms",
            "late p99 ms",
        ],
        &rows,
    ));
    let _ = writeln!(
        t,
        "(response: connect to last byte of the last response, successful sessions; late: session start behind the schedule)"
    );
    let _ = writeln!(t);
    for (label, _, level) in &levels {
        let value = match level {
            Some(l) => format!(
                "{:.1}  (at {}/s attempted; mean {:.1} ms, errors {:.3} %)",
                l.tps,
                l.rate,
                l.mean_response_ms,
                l.error_rate * 100.0
            ),
            None => "none".into(),
        };
        let _ = writeln!(t, "{label:<38} {value}");
    }
    let _ = writeln!(t, "{:<38} {peak}", "peak successful sessions in a second");
    let _ = writeln!(
        t,
        "{:<38} {attempted} attempted, {successful} successful ({resumed} resumed), {failed} failed",
        "sessions"
    );
    for e in errors.values() {
        let _ = writeln!(t, "failed: {} x {} (e.g. {})", e.count, e.kind, e.example);
    }
    if targets.len() > 1 {
        let rows: Vec<Vec<String>> = targets
            .iter()
            .map(|g| {
                let ms = |v| ms_if_any(g.successful, v);
                vec![
                    g.url.clone(),
                    g.attempted.to_string(),
                    g.successful.to_string(),
                    g.handshakes_resumed.to_string(),
                    g.failed.to_string(),
                    ms(g.response.mean_ms),
                    ms(g.response.p99_ms),
                ]
            })
            .collect();
        let _ = writeln!(t);
        t.push_str(&report::table(
            &[
                "server",
                "attempted",
                "successful",
                "resumed",
                "failed",
                "mean ms",
                "p99 ms",
            ],
            &rows,
        ));
    }
    if lag.p99_ms > 50.0 {
        let _ = writeln!(
            t,
            "note: 1 % of sessions started more than {:.0} ms late (worst {:.0} ms): the client, not the server, may be the limit (try --threads, or another machine)",
            lag.p99_ms, lag.max_ms
        );
    }

    let xs = |v: &dyn Fn(&Second) -> f64| {
        seconds
            .iter()
            .map(|s| (s.second as f64, v(s)))
            .collect::<Vec<_>>()
    };
    let chart = Chart {
        title: format!("tps {}: new TLS sessions per second", setup.target.url),
        x_label: "seconds (session start)".into(),
        y_label: "sessions/s".into(),
        y2_label: "mean response time, ms".into(),
        series: vec![
            Series::new(
                "attempted",
                xs(&|s| s.attempted as f64),
                Style::Wide,
                Axis::Left,
            ),
            Series::new(
                "successful",
                xs(&|s| s.successful as f64),
                Style::Line,
                Axis::Left,
            ),
            Series::new("failed", xs(&|s| s.failed as f64), Style::Line, Axis::Left),
            Series::new(
                "mean response ms",
                seconds
                    .iter()
                    .filter_map(|s| s.mean_response_ms.map(|m| (s.second as f64, m)))
                    .collect(),
                Style::Dashed,
                Axis::Right,
            ),
        ],
        x_ticks: None,
    };

    let mut summary = serde_json::Map::new();
    for (_, key, level) in &levels {
        summary.insert((*key).into(), json!(level));
    }
    summary.insert("peak_second_successful".into(), json!(peak));
    summary.insert("attempted".into(), json!(attempted));
    summary.insert("successful".into(), json!(successful));
    summary.insert("failed".into(), json!(failed));
    summary.insert("handshakes_resumed".into(), json!(resumed));
    summary.insert("handshakes_full".into(), json!(successful - resumed));
    // How late sessions started against the schedule (a busy client).
    summary.insert("start_lag".into(), json!(lag));
    let json = json!({
        "mode": "tps",
        "settings": {
            "tls": setup.settings,
            "ramp": args.ramp,
            "interleave": args.interleave,
            "block": args.block,
            "rates": rates,
            "step_seconds": args.step_seconds,
            "requests_per_session": args.requests_per_session,
            "timeout_s": args.timeout,
        },
        "negotiated": setup.probe.info,
        "summary": summary,
        "steps": reports,
        "targets": targets,
        "errors": errors.values().collect::<Vec<_>>(),
        "per_second": seconds,
    });
    Outcome {
        table: t,
        json,
        chart,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ramp_parsing() {
        let r = Ramp::parse("100:100:1000").unwrap();
        assert_eq!(r.rates(), (1..=10).map(|i| i * 100).collect::<Vec<_>>());
        assert_eq!(Ramp::parse("5:5:10").unwrap().rates(), vec![5, 10]);
        // MAX need not be START plus whole steps: the last step stays below it.
        assert_eq!(Ramp::parse("10:20:55").unwrap().rates(), vec![10, 30, 50]);
        assert_eq!(Ramp::parse("7:0:7").unwrap().rates(), vec![7]);
        assert_eq!(Ramp::parse("7:3:7").unwrap().rates(), vec![7]);
        for bad in [
            "",
            "1:2",
            "1:2:3:4",
            "a:1:2",
            "0:1:5",
            "5:1:4",
            "1:0:5",
            "-1:1:5",
            "1:1:20000000",
            "1:1:100000",
        ] {
            assert!(Ramp::parse(bad).is_err(), "{bad}");
        }
        assert!(Ramp::parse("5:x:10")
            .unwrap_err()
            .contains("START:STEP:MAX"));
    }

    #[test]
    fn schedule_spaces_sessions_evenly_per_step() {
        let plan: Vec<(usize, Duration)> = schedule(&[2, 4], 2).collect();
        assert_eq!(plan.len(), 2 * 2 + 4 * 2);
        let ms: Vec<u128> = plan.iter().map(|p| p.1.as_millis()).collect();
        assert_eq!(
            ms,
            vec![0, 500, 1000, 1500, 2000, 2250, 2500, 2750, 3000, 3250, 3500, 3750]
        );
        assert!(plan[..4].iter().all(|p| p.0 == 0) && plan[4..].iter().all(|p| p.0 == 1));
        // Non-dividing rates stay inside their step.
        let plan: Vec<(usize, Duration)> = schedule(&[3], 1).collect();
        assert_eq!(plan.last().unwrap().1, Duration::from_nanos(666_666_666));
    }
}
