//! `tlsfront-bench`, tlsfront's load client: measure any HTTPS server the
//! way users judge a TLS endpoint. It is a tool, not part of the server: it
//! shares no code with it (its own TLS client set-up, [`tls`]) and the
//! server's package does not depend on it. Tests and bench/compare run its
//! binary against tlsfront and other servers.
//!
//! Three modes: [`download`] (throughput of full downloads on new
//! connections), [`tps`] (open-loop new-session rate with a ramp) and
//! [`requests`] (closed-loop keep-alive requests). This crate root owns the
//! command line shared by all three, the set-up (URL, TLS configuration,
//! pre-flight probe, client runtime) and the output (table, JSON, SVG).

pub mod client;
pub mod download;
pub mod http;
pub mod report;
pub mod requests;
pub mod stats;
pub mod svg;
pub mod tls;
pub mod tps;
pub mod url;

use clap::{Args, Parser, Subcommand};
use client::{ClientError, Probe};
use rustls::ClientConfig;
use serde_json::json;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tls::{Kx, TlsChoice, TlsSetupError, TlsVersion, Trust};
use url::{Target, UrlError};

/// The command line of `tlsfront-bench`.
#[derive(Parser, Debug)]
#[command(
    name = "tlsfront-bench",
    version,
    about = "Measure an HTTPS server (download, tps, requests): tlsfront's load client"
)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub mode: Mode,
}

#[derive(Subcommand, Debug)]
pub enum Mode {
    /// Full downloads, each on a new TLS connection: throughput (ministat summary).
    Download(download::DownloadArgs),
    /// Open loop: new TLS sessions at a ramped rate: TPS, response time, errors.
    Tps(tps::TpsArgs),
    /// Closed loop: keep-alive GETs on C connections: requests/s and latency.
    Requests(requests::RequestsArgs),
}

impl Mode {
    fn common(&self) -> &CommonArgs {
        match self {
            Mode::Download(a) => &a.common,
            Mode::Tps(a) => &a.common,
            Mode::Requests(a) => &a.common,
        }
    }
}

/// Options every mode takes.
#[derive(Args, Debug, Clone)]
pub struct CommonArgs {
    /// TLS version to offer [default: 1.3 and 1.2].
    #[arg(long, value_enum, value_name = "VERSION")]
    pub tls_version: Option<TlsVersion>,
    /// Offer only this cipher suite (rustls name, e.g. TLS13_AES_128_GCM_SHA256
    /// or TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256).
    #[arg(long, value_name = "NAME")]
    pub cipher: Option<String>,
    /// Offer only this key-exchange group [default: x25519 and secp256r1,
    /// X25519's key share sent].
    #[arg(long, value_enum, value_name = "GROUP")]
    pub kx: Option<Kx>,
    /// Accept any server certificate (handshake signatures are still verified).
    #[arg(long, conflicts_with = "ca")]
    pub insecure: bool,
    /// Trust the CA certificates in this PEM file [default: the Mozilla roots
    /// from webpki-roots].
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// No TLS session resumption: every handshake is a full one.
    #[arg(long)]
    pub no_resume: bool,
    /// Client runtime threads [default: number of cores].
    #[arg(long, value_name = "N",
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub threads: Option<usize>,
    /// Write every raw series and summary as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Draw a chart of the results to FILE (SVG).
    #[arg(long, value_name = "FILE.svg")]
    pub chart: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Url(#[from] UrlError),
    #[error(transparent)]
    Tls(#[from] TlsSetupError),
    #[error("{url}: {source}")]
    Target { url: String, source: ClientError },
    #[error("{0}")]
    Invalid(String),
    #[error("cannot start the client runtime: {0}")]
    Runtime(std::io::Error),
    #[error(transparent)]
    Output(#[from] report::OutputError),
    #[error("download {run}.{stream} of {url} failed: {source}")]
    Download {
        url: String,
        run: u32,
        stream: u32,
        source: ClientError,
    },
}

/// What every mode starts from: the target, the client configuration, and
/// the address and negotiated parameters found by the probe.
pub struct Setup {
    pub target: Target,
    pub config: Arc<ClientConfig>,
    pub probe: Probe,
    /// The TLS settings as asked for, for the JSON.
    pub settings: serde_json::Value,
}

impl Setup {
    /// One line: what was negotiated, with whom.
    pub fn describe(&self) -> String {
        format!("{} at {}", self.probe.info.describe(), self.probe.addr)
    }
}

/// The target and TLS configuration, before any network traffic.
struct Prepared {
    target: Target,
    config: Arc<ClientConfig>,
    settings: serde_json::Value,
}

fn prepare(url: &str, common: &CommonArgs) -> Result<Prepared, BenchError> {
    let target = url::parse(url)?;
    let trust = match (&common.ca, common.insecure) {
        (_, true) => Trust::Insecure,
        (Some(p), false) => Trust::CaFile(p.clone()),
        (None, false) => Trust::WebRoots,
    };
    let choice = TlsChoice {
        version: common.tls_version,
        cipher: common.cipher.clone(),
        kx: common.kx,
        trust: trust.clone(),
        resume: !common.no_resume,
    };
    let config = tls::client_config(&choice)?;
    let settings = json!({
        "url": target.url,
        "tls_version": common.tls_version.map(|v| v.flag()).unwrap_or("1.3,1.2"),
        "cipher": common.cipher,
        "kx": common.kx.map(|k| k.flag()).unwrap_or("x25519,secp256r1"),
        "trust": match &trust {
            Trust::Insecure => "insecure".to_string(),
            Trust::WebRoots => "webpki-roots".to_string(),
            Trust::CaFile(p) => p.display().to_string(),
        },
        "resumption": !common.no_resume,
    });
    Ok(Prepared {
        target,
        config,
        settings,
    })
}

/// Probe the target: any connection, TLS or HTTP problem ends the run here
/// with one clear error. `get`: also check that a GET succeeds.
async fn setup(p: Prepared, timeout: Duration, get: bool) -> Result<Setup, BenchError> {
    let probe = client::probe(&p.target, &p.config, timeout, get)
        .await
        .map_err(|source| BenchError::Target {
            url: p.target.url.clone(),
            source,
        })?;
    Ok(Setup {
        target: p.target,
        config: p.config,
        probe,
        settings: p.settings,
    })
}

/// Seconds from the command line, as a duration.
pub fn seconds(flag: &str, secs: f64) -> Result<Duration, BenchError> {
    if secs.is_finite() && secs > 0.0 && secs < 1e9 {
        Ok(Duration::from_secs_f64(secs))
    } else {
        Err(BenchError::Invalid(format!(
            "{flag} must be a positive number of seconds, not {secs}"
        )))
    }
}

/// Parse a duration: `10` (seconds), `10s`, `1.5s`, `500ms`, `2m`, `1h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (examples: 30, 30s, 500ms, 2m)"))?;
    let scale = match unit {
        "" | "s" => 1.0,
        "ms" => 0.001,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("{s:?}: unknown unit {unit:?} (use ms, s, m or h)")),
    };
    let secs = value * scale;
    if !(secs > 0.0 && secs < 1e9) {
        return Err(format!("{s:?}: the duration must be more than zero"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Let this process open as many sockets as the hard limit allows: an open
/// loop against a slow server keeps many connections at once.
fn raise_open_files_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    if lim.current < lim.maximum {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: lim.maximum,
                maximum: lim.maximum,
            },
        );
    }
}

/// Run `tlsfront-bench`.
pub fn run(args: BenchArgs) -> Result<(), BenchError> {
    let common = args.mode.common().clone();
    let threads = match common.threads {
        Some(n) => n,
        None => std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
    };
    // Check everything that needs no network before creating output files.
    let (url, timeout) = match &args.mode {
        Mode::Download(a) => (&a.url, a.timeout),
        Mode::Tps(a) => (&a.url, a.timeout),
        Mode::Requests(a) => (&a.url, a.timeout),
    };
    let timeout = seconds("--timeout", timeout)?;
    let prepared = prepare(url, &common)?;
    let interleaved = match &args.mode {
        Mode::Tps(a) if a.interleave.len() >= tps::MAX_TARGETS => {
            return Err(BenchError::Invalid(format!(
                "--interleave: at most {} more servers in one run",
                tps::MAX_TARGETS - 1
            )))
        }
        Mode::Tps(a) => a
            .interleave
            .iter()
            .map(|u| prepare(u, &common))
            .collect::<Result<Vec<_>, _>>()?,
        _ => Vec::new(),
    };
    let outputs = report::Outputs::open(&common.json, &common.chart)?;
    raise_open_files_limit();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .map_err(BenchError::Runtime)?;
    let result = rt.block_on(async {
        match &args.mode {
            // The first download checks the GET; a probe GET would fetch a
            // possibly huge file once more.
            Mode::Download(a) => download::run(a, &setup(prepared, timeout, false).await?).await,
            Mode::Tps(a) => {
                // Each server is probed (and must answer a GET) before the run.
                let mut targets = vec![setup(prepared, timeout, true).await?];
                for p in interleaved {
                    targets.push(setup(p, timeout, true).await?);
                }
                tps::run(a, &targets).await
            }
            Mode::Requests(a) => requests::run(a, &setup(prepared, timeout, true).await?).await,
        }
    });
    rt.shutdown_timeout(Duration::from_secs(1));
    let outcome = result?;
    // A closed stdout (`| head`) is not worth a failure: the files still get written.
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(outcome.table.as_bytes())
        .and_then(|_| stdout.flush());
    outputs.write(&outcome)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        for bad in ["", "s", "0", "-1s", "1x", "1.2.3s", "NaN"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert!(seconds("--timeout", 0.0).is_err());
        assert!(seconds("--timeout", f64::NAN).is_err());
        assert_eq!(
            seconds("--timeout", 0.25).unwrap(),
            Duration::from_millis(250)
        );
    }

    /// `tlsfront-bench ARGS`, parsed.
    fn parse(args: &[&str]) -> Result<BenchArgs, clap::Error> {
        BenchArgs::try_parse_from(std::iter::once("tlsfront-bench").chain(args.iter().copied()))
    }

    #[test]
    fn command_lines_parse() {
        let t = parse(&[
            "tps",
            "https://h/",
            "--ramp",
            "5:5:10",
            "--step-seconds",
            "2",
            "--no-resume",
            "--tls-version",
            "1.2",
            "--insecure",
            "--kx",
            "x25519mlkem768",
        ])
        .unwrap();
        let Mode::Tps(a) = t.mode else {
            panic!("not tps")
        };
        assert_eq!(a.common.kx, Some(Kx::X25519MlKem768));
        assert_eq!(a.ramp.rates(), vec![5, 10]);
        assert_eq!((a.step_seconds, a.requests_per_session), (2, 4));
        assert!(a.common.no_resume && a.common.insecure);
        assert_eq!(a.common.tls_version, Some(TlsVersion::V12));

        let t = parse(&["requests", "https://h/", "-c", "3", "-d", "2s"]).unwrap();
        let Mode::Requests(a) = t.mode else {
            panic!("not requests")
        };
        assert_eq!((a.connections, a.duration), (3, Duration::from_secs(2)));

        let t = parse(&[
            "download",
            "https://h/",
            "--runs",
            "3",
            "--connections",
            "2",
        ])
        .unwrap();
        let Mode::Download(a) = t.mode else {
            panic!("not download")
        };
        assert_eq!((a.runs, a.connections), (3, 2));

        for bad in [
            &["download", "https://h/", "--insecure", "--ca", "x"][..],
            &["download", "https://h/", "--tls-version", "1.1"],
            &["download", "https://h/", "--kx", "x448"],
            &["tps", "https://h/", "--ramp", "5:x:10"],
            &["download", "https://h/", "--runs", "0"],
            &["download", "https://h/", "-c", "0"],
            &["requests", "https://h/", "-c", "0"],
            &["download", "https://h/", "--threads", "0"],
            &["download", "https://h/", "--threads", "5000"],
            &[
                "tps",
                "https://h/",
                "--ramp",
                "1:1:1",
                "--step-seconds",
                "0",
            ],
            &[
                "tps",
                "https://h/",
                "--ramp",
                "1:1:1",
                "--requests-per-session",
                "0",
            ],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
