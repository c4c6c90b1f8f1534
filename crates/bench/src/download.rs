//! `tlsfront-bench download`: N runs, each of C parallel full downloads on new
//! TLS connections (a run ends when all C are done). Every body is checked
//! against its Content-Length; the report is a ministat summary of the
//! per-download throughput (bytes over connect-to-last-byte time).

use super::client::{self, ClientError, ConnInfo};
use super::report::{self, Outcome};
use super::stats::{self, Summary};
use super::svg::{Axis, Chart, Series, Style};
use super::{http, BenchError, CommonArgs, Setup};
use clap::Args;
use serde::Serialize;
use serde_json::json;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

const MIB: f64 = 1024.0 * 1024.0;

#[derive(Args, Debug)]
pub struct DownloadArgs {
    /// https:// URL of the file to download.
    pub url: String,
    /// Number of runs.
    #[arg(long, default_value_t = 10, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub runs: u32,
    /// Parallel downloads in each run, each on its own new connection.
    #[arg(short = 'c', long, default_value_t = 1, value_name = "C",
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub connections: u32,
    /// Fail when the server sends nothing for SECS (connect, handshake or body).
    #[arg(long, default_value_t = 30.0, value_name = "SECS")]
    pub timeout: f64,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// One download.
#[derive(Clone, Debug, Serialize)]
pub struct Download {
    pub run: u32,
    pub stream: u32,
    pub bytes: u64,
    /// The Content-Length the body was checked against (`None`: the server
    /// sent the body chunked or until close).
    pub content_length: Option<u64>,
    pub status: u16,
    pub connection: ConnInfo,
    /// Request sent to first response byte, seconds.
    pub ttfb_s: f64,
    /// TCP connect to last body byte, seconds.
    pub total_s: f64,
    #[serde(rename = "kB_per_s")]
    pub kb_per_s: f64,
    #[serde(rename = "MiB_per_s")]
    pub mib_per_s: f64,
}

/// One run: C downloads side by side.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    pub run: u32,
    pub wall_s: f64,
    pub bytes: u64,
    /// All streams' bytes over the run's wall time.
    #[serde(rename = "MiB_per_s")]
    pub mib_per_s: f64,
    pub downloads: Vec<Download>,
}

async fn one(
    setup: Arc<(
        super::url::Target,
        std::net::SocketAddr,
        tokio_rustls::TlsConnector,
    )>,
    run: u32,
    stream: u32,
    idle: Duration,
) -> Result<Download, ClientError> {
    let (target, addr, connector) = &*setup;
    let t0 = Instant::now();
    let mut conn = tokio::time::timeout(idle, client::connect(*addr, target, connector))
        .await
        .map_err(|_| ClientError::Timeout(idle))??;
    let sent = Instant::now();
    let resp = conn.get(&http::get_request(target), Some(idle)).await?;
    let done = Instant::now();
    let info = conn.info.clone();
    conn.close().await;
    if !(200..300).contains(&resp.status) {
        return Err(ClientError::Status {
            status: resp.status,
            reason: format!("{} (a download needs a 2xx answer)", resp.reason),
        });
    }
    let total = (done - t0).as_secs_f64().max(1e-9);
    Ok(Download {
        run,
        stream,
        bytes: resp.body_bytes,
        content_length: resp.content_length(),
        status: resp.status,
        connection: info,
        ttfb_s: resp
            .first_byte
            .saturating_duration_since(sent)
            .as_secs_f64(),
        total_s: total,
        kb_per_s: resp.body_bytes as f64 / 1000.0 / total,
        mib_per_s: resp.body_bytes as f64 / MIB / total,
    })
}

pub async fn run(args: &DownloadArgs, setup: &Setup) -> Result<Outcome, BenchError> {
    let idle = super::seconds("--timeout", args.timeout)?;
    let shared = Arc::new((
        setup.target.clone(),
        setup.probe.addr,
        client::connector(&setup.config),
    ));
    let bar = report::progress(
        u64::from(args.runs) * u64::from(args.connections),
        "downloads",
    );
    let mut runs = Vec::new();
    for run in 1..=args.runs {
        let start = Instant::now();
        let mut set = JoinSet::new();
        for stream in 1..=args.connections {
            let shared = shared.clone();
            set.spawn(async move {
                one(shared, run, stream, idle)
                    .await
                    .map_err(|e| (stream, e))
            });
        }
        let mut downloads = Vec::new();
        while let Some(joined) = set.join_next().await {
            let d = match joined {
                Ok(Ok(d)) => d,
                Ok(Err((stream, source))) => {
                    bar.finish_and_clear();
                    return Err(BenchError::Download {
                        url: setup.target.url.clone(),
                        run,
                        stream,
                        source,
                    });
                }
                Err(e) => return Err(BenchError::Invalid(format!("a download task failed: {e}"))),
            };
            bar.inc(1);
            bar.set_message(format!("{:.1} MiB/s", d.mib_per_s));
            downloads.push(d);
        }
        downloads.sort_by_key(|d| d.stream);
        let wall = start.elapsed().as_secs_f64().max(1e-9);
        let bytes = downloads.iter().map(|d| d.bytes).sum();
        runs.push(Run {
            run,
            wall_s: wall,
            bytes,
            mib_per_s: bytes as f64 / MIB / wall,
            downloads,
        });
    }
    bar.finish_and_clear();
    Ok(outcome(args, setup, &runs))
}

fn outcome(args: &DownloadArgs, setup: &Setup, runs: &[Run]) -> Outcome {
    let all: Vec<&Download> = runs.iter().flat_map(|r| &r.downloads).collect();
    let kb: Vec<f64> = all.iter().map(|d| d.kb_per_s).collect();
    let mib: Vec<f64> = all.iter().map(|d| d.mib_per_s).collect();
    let secs: Vec<f64> = all.iter().map(|d| d.total_s).collect();
    let per_run: Vec<f64> = runs.iter().map(|r| r.mib_per_s).collect();
    let total_bytes: u64 = runs.iter().map(|r| r.bytes).sum();
    let verified = all.iter().filter(|d| d.content_length.is_some()).count();
    let resumed = all.iter().filter(|d| d.connection.resumed).count();
    let (min_b, max_b) = all.iter().fold((u64::MAX, 0), |(lo, hi), d| {
        (lo.min(d.bytes), hi.max(d.bytes))
    });
    let summary = |v: &[f64]| stats::summarize(v);

    let mut t = String::new();
    let _ = writeln!(
        t,
        "download {}: {} run{} x {} connection{}",
        setup.target.url,
        args.runs,
        if args.runs == 1 { "" } else { "s" },
        args.connections,
        if args.connections == 1 { "" } else { "s" }
    );
    let _ = writeln!(
        t,
        "{}; handshakes: {} full, {resumed} resumed",
        setup.describe(),
        all.len() - resumed
    );
    let size = if min_b == max_b {
        format!("{min_b} bytes each")
    } else {
        format!("{min_b} to {max_b} bytes")
    };
    let _ = writeln!(
        t,
        "{} downloads, {size}, Content-Length verified on {verified} of {}; total {total_bytes} bytes",
        all.len(),
        all.len()
    );
    let _ = writeln!(t, "\nthroughput per download (TCP connect to last byte):");
    let mut rows: Vec<(&str, Summary)> = Vec::new();
    if let (Some(k), Some(m), Some(s)) = (summary(&kb), summary(&mib), summary(&secs)) {
        rows.extend([("kB/s", k), ("MiB/s", m), ("seconds", s)]);
    }
    let run_summary = summary(&per_run);
    if args.connections > 1 {
        if let Some(r) = run_summary {
            rows.push(("run MiB/s", r));
        }
    }
    t.push_str(&stats::ministat_table(&rows));
    if args.connections > 1 {
        let _ = writeln!(
            t,
            "(run MiB/s: all {} streams of a run over its wall time)",
            args.connections
        );
    }

    let median = summary(&mib).map(|s| s.median).unwrap_or(0.0);
    let bars: Vec<(f64, f64)> = all
        .iter()
        .enumerate()
        .map(|(i, d)| ((i + 1) as f64, d.mib_per_s))
        .collect();
    let mut series = vec![Series::new(
        "MiB/s per download",
        bars,
        Style::Bars,
        Axis::Left,
    )];
    if !all.is_empty() {
        series.push(Series::new(
            &format!("median {median:.1} MiB/s"),
            vec![(0.5, median), (all.len() as f64 + 0.5, median)],
            Style::Dashed,
            Axis::Left,
        ));
    }
    if args.connections > 1 {
        // Mark where each run ends, as the run's aggregate throughput.
        let c = f64::from(args.connections);
        let pts = runs
            .iter()
            .map(|r| (f64::from(r.run) * c - (c - 1.0) / 2.0, r.mib_per_s))
            .collect();
        series.push(Series::new(
            "run aggregate MiB/s",
            pts,
            Style::Line,
            Axis::Left,
        ));
    }
    let chart = Chart {
        title: format!("download {}: throughput per download", setup.target.url),
        x_label: "download (in run order)".into(),
        y_label: "MiB/s".into(),
        series,
        ..Default::default()
    };

    let json = json!({
        "mode": "download",
        "settings": {
            "tls": setup.settings,
            "runs": args.runs,
            "connections": args.connections,
            "timeout_s": args.timeout,
        },
        "negotiated": setup.probe.info,
        "summary": {
            "downloads": all.len(),
            "total_bytes": total_bytes,
            "content_length_verified": verified,
            "handshakes_full": all.len() - resumed,
            "handshakes_resumed": resumed,
            "per_download_kB_per_s": summary(&kb),
            "per_download_MiB_per_s": summary(&mib),
            "per_download_seconds": summary(&secs),
            "per_run_MiB_per_s": run_summary,
        },
        "runs": runs,
    });
    Outcome {
        table: t,
        json,
        chart,
    }
}
