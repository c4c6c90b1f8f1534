//! `tlsfront-bench requests`: a closed loop. C connections each send one GET
//! after another on a keep-alive connection for the whole duration
//! (reconnecting when the server closes or a request fails). Latency is request
//! sent to last body byte; requests still in flight at the end are not counted.

use super::client::{self, Conn};
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
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

#[derive(Args, Debug)]
pub struct RequestsArgs {
    /// https:// URL to request.
    pub url: String,
    /// Connections, each sending one request after another.
    #[arg(short = 'c', long, default_value_t = 10, value_name = "CONNS",
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub connections: u32,
    /// How long to run: 30 (seconds), 30s, 500ms, 2m.
    #[arg(short = 'd', long, default_value = "10s", value_parser = super::parse_duration, value_name = "DURATION")]
    pub duration: Duration,
    /// A request that takes longer than SECS fails (and its connection is replaced).
    #[arg(long, default_value_t = 10.0, value_name = "SECS")]
    pub timeout: f64,
    #[command(flatten)]
    pub common: CommonArgs,
}

struct Ctx {
    target: super::url::Target,
    addr: SocketAddr,
    connector: tokio_rustls::TlsConnector,
    request: Vec<u8>,
    timeout: Duration,
    done: AtomicU64,
}

#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Second {
    pub second: u64,
    pub requests: u64,
    pub errors: u64,
    pub mean_latency_ms: Option<f64>,
    #[serde(skip)]
    sum_ms: f64,
}

struct Worker {
    hist: Histogram<u64>,
    seconds: Vec<Second>,
    errors: BTreeMap<&'static str, (u64, String)>,
    connects: u64,
    resumed: u64,
}

impl Worker {
    fn second(&mut self, t0: Instant) -> &mut Second {
        let sec = t0.elapsed().as_secs();
        while self.seconds.len() as u64 <= sec {
            let second = self.seconds.len() as u64;
            self.seconds.push(Second {
                second,
                ..Default::default()
            });
        }
        &mut self.seconds[sec as usize]
    }

    fn error(&mut self, t0: Instant, kind: &'static str, message: String) {
        self.second(t0).errors += 1;
        self.errors.entry(kind).or_insert((0, message)).0 += 1;
    }
}

async fn worker(ctx: Arc<Ctx>, t0: Instant, deadline: Instant) -> Worker {
    let mut w = Worker {
        hist: stats::new_histogram(),
        seconds: Vec::new(),
        errors: BTreeMap::new(),
        connects: 0,
        resumed: 0,
    };
    let mut conn: Option<Conn> = None;
    while Instant::now() < deadline {
        let c = match conn.as_mut() {
            Some(c) => c,
            None => {
                let limit = (Instant::now() + ctx.timeout).min(deadline);
                match tokio::time::timeout_at(
                    limit,
                    client::connect(ctx.addr, &ctx.target, &ctx.connector),
                )
                .await
                {
                    Err(_) if Instant::now() >= deadline => break,
                    Err(_) => w.error(
                        t0,
                        "timeout",
                        format!("connect took longer than {:?}", ctx.timeout),
                    ),
                    Ok(Err(e)) => {
                        w.error(t0, e.kind(), e.to_string());
                        // Do not spin on a server that refuses.
                        tokio::time::sleep_until(
                            (Instant::now() + Duration::from_millis(10)).min(deadline),
                        )
                        .await;
                    }
                    Ok(Ok(c)) => {
                        w.connects += 1;
                        w.resumed += u64::from(c.info.resumed);
                        conn = Some(c);
                    }
                }
                continue;
            }
        };
        let sent = Instant::now();
        let limit = (sent + ctx.timeout).min(deadline);
        match tokio::time::timeout_at(limit, c.get(&ctx.request, None)).await {
            Err(_) if Instant::now() >= deadline => break,
            Err(_) => {
                w.error(
                    t0,
                    "timeout",
                    format!("request took longer than {:?}", ctx.timeout),
                );
                conn = None;
            }
            Ok(Err(e)) => {
                w.error(t0, e.kind(), e.to_string());
                conn = None;
            }
            Ok(Ok(resp)) => {
                let latency = sent.elapsed();
                stats::record(&mut w.hist, latency);
                let s = w.second(t0);
                s.requests += 1;
                s.sum_ms += latency.as_secs_f64() * 1000.0;
                ctx.done.fetch_add(1, Relaxed);
                if !resp.keep_alive {
                    conn = None;
                }
            }
        }
    }
    if let Some(c) = conn {
        c.close().await;
    }
    w
}

pub async fn run(args: &RequestsArgs, setup: &Setup) -> Result<Outcome, BenchError> {
    let ctx = Arc::new(Ctx {
        target: setup.target.clone(),
        addr: setup.probe.addr,
        connector: client::connector(&setup.config),
        request: http::get_request(&setup.target),
        timeout: super::seconds("--timeout", args.timeout)?,
        done: AtomicU64::new(0),
    });
    let total_secs = args.duration.as_secs_f64().ceil() as u64;
    let bar = report::progress(total_secs, "s");
    let t0 = Instant::now();
    let deadline = t0 + args.duration;
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..args.connections {
        set.spawn(worker(ctx.clone(), t0, deadline));
    }
    let mut workers = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    loop {
        tokio::select! {
            joined = set.join_next() => match joined {
                Some(Ok(w)) => workers.push(w),
                Some(Err(e)) => return Err(BenchError::Invalid(format!("a connection task failed: {e}"))),
                None => break,
            },
            _ = tick.tick() => {
                let elapsed = t0.elapsed().as_secs_f64();
                bar.set_position((elapsed as u64).min(total_secs));
                bar.set_message(format!("{:.0} req/s", ctx.done.load(Relaxed) as f64 / elapsed.max(0.001)));
            }
        }
    }
    bar.finish_and_clear();
    Ok(outcome(args, setup, workers))
}

fn outcome(args: &RequestsArgs, setup: &Setup, workers: Vec<Worker>) -> Outcome {
    let mut hist = stats::new_histogram();
    let mut seconds: Vec<Second> = Vec::new();
    let mut errors: BTreeMap<&'static str, (u64, String)> = BTreeMap::new();
    let (mut connects, mut resumed) = (0, 0);
    for w in workers {
        let _ = hist.add(&w.hist);
        for s in w.seconds {
            while seconds.len() as u64 <= s.second {
                let second = seconds.len() as u64;
                seconds.push(Second {
                    second,
                    ..Default::default()
                });
            }
            let t = &mut seconds[s.second as usize];
            t.requests += s.requests;
            t.errors += s.errors;
            t.sum_ms += s.sum_ms;
        }
        for (kind, (n, example)) in w.errors {
            errors.entry(kind).or_insert((0, example)).0 += n;
        }
        connects += w.connects;
        resumed += w.resumed;
    }
    for s in &mut seconds {
        if s.requests > 0 {
            s.mean_latency_ms = Some(s.sum_ms / s.requests as f64);
        }
    }
    let lat: Latency = stats::latency(&hist);
    let secs = args.duration.as_secs_f64();
    let requests = lat.count;
    let error_count: u64 = errors.values().map(|e| e.0).sum();
    let rate = requests as f64 / secs;

    let mut t = String::new();
    let _ = writeln!(
        t,
        "requests {}: {} connection{}, {:?}, keep-alive",
        setup.target.url,
        args.connections,
        if args.connections == 1 { "" } else { "s" },
        args.duration
    );
    let _ = writeln!(
        t,
        "{}; {connects} connections opened ({resumed} resumed)\n",
        setup.describe()
    );
    let reconnects = connects.saturating_sub(u64::from(args.connections));
    if reconnects > 0 {
        let _ = writeln!(
            t,
            "note: {reconnects} reconnections (the server closed connections or requests failed); connecting is not in the latency\n"
        );
    }
    let _ = writeln!(t, "requests  {requests}  ({} req/s)", f(rate, 1));
    let _ = writeln!(t, "errors    {error_count}");
    for (kind, (n, example)) in &errors {
        let _ = writeln!(t, "  {n} x {kind} (e.g. {example})");
    }
    let _ = writeln!(t);
    if requests > 0 {
        t.push_str(&report::table(
            &[
                "latency ms",
                "min",
                "p50",
                "p90",
                "p99",
                "p99.9",
                "max",
                "mean",
                "stddev",
            ],
            &[vec![
                String::new(),
                f(lat.min_ms, 2),
                f(lat.p50_ms, 2),
                f(lat.p90_ms, 2),
                f(lat.p99_ms, 2),
                f(lat.p999_ms, 2),
                f(lat.max_ms, 2),
                f(lat.mean_ms, 2),
                f(lat.stddev_ms, 2),
            ]],
        ));
    }

    // Latency by percentile on a "nines" scale, as HdrHistogram plots.
    let curve = stats::percentile_curve(&hist);
    let nines = |p: f64| {
        if p >= 100.0 {
            4.5
        } else {
            -(1.0 - p / 100.0).log10()
        }
    };
    let chart = Chart {
        title: format!("requests {}: latency by percentile", setup.target.url),
        x_label: "percentile".into(),
        y_label: "latency, ms".into(),
        series: vec![Series::new(
            &format!("{} connections", args.connections),
            curve.iter().map(|&(p, ms)| (nines(p), ms)).collect(),
            Style::Line,
            Axis::Left,
        )],
        x_ticks: Some(vec![
            (0.0, "0%".into()),
            (nines(50.0), "50%".into()),
            (1.0, "90%".into()),
            (2.0, "99%".into()),
            (3.0, "99.9%".into()),
            (4.0, "99.99%".into()),
            (4.5, "max".into()),
        ]),
        ..Default::default()
    };

    let json = json!({
        "mode": "requests",
        "settings": {
            "tls": setup.settings,
            "connections": args.connections,
            "duration_s": secs,
            "timeout_s": args.timeout,
        },
        "negotiated": setup.probe.info,
        "summary": {
            "requests": requests,
            "requests_per_s": rate,
            "errors": error_count,
            "connections_opened": connects,
            "connections_resumed": resumed,
            "latency": lat,
        },
        "errors": errors.iter().map(|(k, (n, e))| json!({"kind": k, "count": n, "example": e})).collect::<Vec<_>>(),
        "latency_percentiles_ms": curve.iter().map(|&(p, ms)| json!({"percentile": p, "ms": ms})).collect::<Vec<_>>(),
        "per_second": seconds,
    });
    Outcome {
        table: t,
        json,
        chart,
    }
}
