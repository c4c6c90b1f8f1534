//! The command line: `serve`, `check` (and the other jobs as they land).

use crate::config::{
    check_timeout, check_workers, default_workers, parse_listen, ConfigError, FileConfig, KtlsMode,
    ServeConfig,
};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "tlsfront",
    version,
    about = "A TLS front end for Linux: static files over HTTPS with kernel TLS + sendfile"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Serve a directory over HTTPS (HTTP/1.1).
    Serve(Box<ServeArgs>),
    /// Terminate TLS for a plain-TCP backend (like hitch or stud).
    Proxy(Box<crate::proxy::ProxyArgs>),
    /// Show what this kernel's TLS offload can do, and how to fix each "no".
    Check,
    /// Measure an HTTPS server (download, tps, requests).
    Bench(Box<crate::bench::BenchArgs>),
}

/// What every TLS-serving command takes: addresses, identity, workers and
/// the kTLS mode.
#[derive(Args, Debug, Default)]
pub struct FrontArgs {
    /// Address to listen on, IPv4 or IPv6 (repeatable) [default: 127.0.0.1:8443].
    #[arg(long, value_name = "ADDR")]
    pub listen: Vec<String>,
    /// Certificate chain, PEM (server certificate first). Default: a
    /// self-signed certificate made on first run.
    #[arg(long, value_name = "FILE", requires = "key")]
    pub cert: Option<PathBuf>,
    /// Private key for --cert, PEM (PKCS#8, RSA or EC).
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub key: Option<PathBuf>,
    /// Worker threads [default: number of cores].
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,
    /// Kernel TLS: auto (use where possible), off, or require [default: auto].
    #[arg(long, value_enum, value_name = "MODE")]
    pub ktls: Option<KtlsMode>,
    /// Once the keys are read and the ports bound, run as this user (needs
    /// tlsfront started as root).
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// ... and this group [default: the user's own].
    #[arg(long, value_name = "NAME", requires = "user")]
    pub group: Option<String>,
}

impl FrontArgs {
    /// The user to run as: the flags, else `file`'s `user`/`group` settings
    /// (`in_file(key)` names such a setting).
    pub fn run_as(
        &self,
        file_user: Option<&str>,
        file_group: Option<&str>,
        in_file: impl Fn(&str) -> String,
    ) -> Result<Option<crate::privileges::RunAs>, ConfigError> {
        use crate::privileges::RunAs;
        Ok(match (&self.user, file_user) {
            (Some(u), _) => Some(RunAs::resolve(u, self.group.as_deref(), |k| {
                format!("--{k}")
            })?),
            (None, Some(u)) => Some(RunAs::resolve(u, file_group, in_file)?),
            (None, None) if file_group.is_some() => {
                return Err(ConfigError::GroupWithoutUser {
                    origin: in_file("group"),
                })
            }
            (None, None) => None,
        })
    }
}

#[derive(Args, Debug, Default)]
pub struct ServeArgs {
    /// Directory to serve [default: the current directory].
    pub dir: Option<PathBuf>,
    #[command(flatten)]
    pub front: FrontArgs,
    /// List directories that have no index.html.
    #[arg(long)]
    pub autoindex: bool,
    /// Serve files reached through symlinks that lead outside DIR.
    #[arg(long)]
    pub follow_symlinks_outside: bool,
    /// TOML file with these settings plus [limits] and [timeouts].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Seconds allowed for the TLS handshake [default: 10].
    #[arg(long, value_name = "SECS")]
    pub handshake_timeout: Option<f64>,
    /// Seconds allowed to receive a request head [default: 60].
    #[arg(long, value_name = "SECS")]
    pub header_timeout: Option<f64>,
    /// Seconds an idle keep-alive connection is kept [default: 75].
    #[arg(long, value_name = "SECS")]
    pub keepalive_timeout: Option<f64>,
    /// Seconds the client may accept no data while we send [default: 60].
    #[arg(long, value_name = "SECS")]
    pub send_timeout: Option<f64>,
}

impl ServeArgs {
    /// Merge defaults, the config file and the flags.
    pub fn resolve(&self) -> Result<ServeConfig, ConfigError> {
        let file = match &self.config {
            Some(p) => FileConfig::load(p)?,
            None => FileConfig::default(),
        };
        let file_origin = self
            .config
            .as_ref()
            .map(|p| format!("config file {}", p.display()))
            .unwrap_or_default();
        let mut listen = Vec::new();
        if !self.front.listen.is_empty() {
            for l in &self.front.listen {
                listen.push(parse_listen("--listen", l)?);
            }
        } else if !file.listen.is_empty() {
            for l in &file.listen {
                listen.push(parse_listen(&format!("{file_origin}, setting listen"), l)?);
            }
        } else {
            listen.push(parse_listen("default", "127.0.0.1:8443")?);
        }
        let workers = self
            .front
            .workers
            .or(file.workers)
            .unwrap_or_else(default_workers);
        let in_file = |key: &str| format!("{file_origin}, setting {key}");
        check_workers(
            &if self.front.workers.is_some() {
                "--workers".to_string()
            } else {
                in_file("workers")
            },
            workers,
        )?;
        let mut timeouts = file.timeouts;
        timeouts.check(|k| in_file(&format!("[timeouts] {k}")))?;
        for (flag, name, slot) in [
            (
                self.handshake_timeout,
                "--handshake-timeout",
                &mut timeouts.handshake,
            ),
            (
                self.header_timeout,
                "--header-timeout",
                &mut timeouts.request_header,
            ),
            (
                self.keepalive_timeout,
                "--keepalive-timeout",
                &mut timeouts.keepalive,
            ),
            (self.send_timeout, "--send-timeout", &mut timeouts.send),
        ] {
            if let Some(v) = flag {
                check_timeout(name, v)?;
                *slot = v;
            }
        }
        file.limits.check(|k| in_file(&format!("[limits] {k}")))?;
        Ok(ServeConfig {
            root: self
                .dir
                .clone()
                .or(file.root)
                .unwrap_or_else(|| PathBuf::from(".")),
            listen,
            cert: self.front.cert.clone().or(file.cert),
            key: self.front.key.clone().or(file.key),
            workers,
            ktls: self.front.ktls.or(file.ktls).unwrap_or(KtlsMode::Auto),
            autoindex: self.autoindex || file.autoindex.unwrap_or(false),
            follow_symlinks_outside: self.follow_symlinks_outside
                || file.follow_symlinks_outside.unwrap_or(false),
            run_as: self
                .front
                .run_as(file.user.as_deref(), file.group.as_deref(), in_file)?,
            limits: file.limits,
            timeouts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_flags() {
        let c = ServeArgs::default().resolve().unwrap();
        assert_eq!(c.listen, vec!["127.0.0.1:8443".parse().unwrap()]);
        assert_eq!(c.ktls, KtlsMode::Auto);
        assert_eq!(
            c.timeouts.keepalive,
            crate::config::Timeouts::default().keepalive
        );
        let a = ServeArgs {
            front: FrontArgs {
                listen: vec!["[::1]:0".into(), "127.0.0.1:0".into()],
                workers: Some(3),
                ..Default::default()
            },
            keepalive_timeout: Some(1.5),
            ..Default::default()
        };
        let c = a.resolve().unwrap();
        assert_eq!(c.listen.len(), 2);
        assert_eq!(c.timeouts.keepalive, 1.5);
        assert_eq!(c.workers, 3);
        let bad = ServeArgs {
            front: FrontArgs {
                listen: vec!["localhost".into()],
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(bad.resolve().unwrap_err().to_string().contains("--listen"));
        let zero = ServeArgs {
            front: FrontArgs {
                workers: Some(0),
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(zero
            .resolve()
            .unwrap_err()
            .to_string()
            .contains("--workers"));
    }
}
